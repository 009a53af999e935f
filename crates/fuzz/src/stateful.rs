//! The stateful target: a client and a server [`Endpoint`] connected by an in-memory
//! network whose every step the fuzzer chooses.

use crate::crypto::Input;
use bytes::{Bytes, BytesMut};
use polypath_quic::sched::PathStatus;
use polypath_quic::testing::{seal_frames, tls_configs};
use polypath_quic::{
    ClientConfig, ConnectionHandle, Dir, Endpoint, EndpointConfig, PathId, ServerConfig, StreamId,
    TransportConfig, TransportErrorCode, VarInt,
};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Most operations one input runs.
const MAX_OPS: usize = 400;
/// Most datagrams in flight; the oldest are lost beyond it.
const MAX_QUEUE: usize = 256;
/// Most datagrams collected from one endpoint in one go.
const MAX_POLL: usize = 64;
/// Most old client datagrams kept for replays.
const MAX_HISTORY: usize = 32;

/// The addresses datagrams may claim to come from: the client's two interfaces, and two
/// addresses the client does not own (NAT rebinding, spoofing).
fn client_addresses() -> [SocketAddr; 4] {
    [
        ([10, 0, 0, 1], 5000).into(),
        ([10, 0, 1, 1], 5000).into(),
        ([10, 0, 0, 1], 6000).into(),
        ([192, 0, 2, 66], 443).into(),
    ]
}

fn server_addr() -> SocketAddr {
    ([10, 0, 0, 2], 4433).into()
}

/// One datagram in the network.
#[derive(Clone)]
struct Datagram {
    to_server: bool,
    src: SocketAddr,
    dst: SocketAddr,
    data: Vec<u8>,
}

/// The two endpoints, the network between them, and what the applications know.
struct World {
    now: Instant,
    client: Endpoint,
    server: Endpoint,
    client_conn: ConnectionHandle,
    server_conns: Vec<ConnectionHandle>,
    queue: VecDeque<Datagram>,
    history: VecDeque<Datagram>,
    client_streams: Vec<StreamId>,
    server_streams: Vec<StreamId>,
    buf: Vec<u8>,
}

fn tls() -> &'static (Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>) {
    static TLS: OnceLock<(Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>)> = OnceLock::new();
    TLS.get_or_init(tls_configs)
}

impl World {
    fn new(flags: u8) -> Option<Self> {
        let (client_tls, server_tls) = tls().clone();
        let transport = TransportConfig {
            initial_max_path_id: (flags & 1 != 0).then_some(3),
            max_datagram_frame_size: (flags & 2 != 0).then_some(1200),
            // Small windows and few streams, so flow control and stream limits are reached.
            receive_window: if flags & 4 != 0 { 4_000 } else { 1 << 20 },
            stream_receive_window: if flags & 4 != 0 { 2_000 } else { 1 << 19 },
            max_concurrent_bidi_streams: 4,
            max_concurrent_uni_streams: 4,
            active_connection_id_limit: 2 + u64::from(flags >> 6),
            key_update_interval: (flags & 8 != 0).then_some(20),
            ..TransportConfig::default()
        };
        let transport = Arc::new(transport);
        let mut server_config = ServerConfig::new(server_tls);
        server_config.transport = transport.clone();
        server_config.retry = flags & 16 != 0;
        let mut client_config = ClientConfig::new(client_tls);
        client_config.transport = transport;
        let now = Instant::now();
        let mut client = Endpoint::new(EndpointConfig::from_seed(1), None);
        let server = Endpoint::new(EndpointConfig::from_seed(2), Some(server_config));
        let client_conn = client
            .connect(
                now,
                client_config,
                client_addresses()[0],
                server_addr(),
                "localhost",
            )
            .ok()?;
        Some(World {
            now,
            client,
            server,
            client_conn,
            server_conns: Vec::new(),
            queue: VecDeque::new(),
            history: VecDeque::new(),
            client_streams: Vec::new(),
            server_streams: Vec::new(),
            buf: Vec::new(),
        })
    }

    /// Puts what both endpoints want to send on the network.
    fn collect(&mut self) {
        for to_server in [true, false] {
            for _ in 0..MAX_POLL {
                let ep = if to_server {
                    &mut self.client
                } else {
                    &mut self.server
                };
                let Some(t) = ep.poll_transmit(self.now, &mut self.buf) else {
                    break;
                };
                let size = t.size.min(self.buf.len());
                let segment = t.segment_size.unwrap_or(size).max(1);
                for chunk in self.buf[..size].chunks(segment) {
                    let d = Datagram {
                        to_server,
                        src: t.source,
                        dst: t.destination,
                        data: chunk.to_vec(),
                    };
                    if to_server {
                        if self.history.len() >= MAX_HISTORY {
                            self.history.pop_front();
                        }
                        self.history.push_back(d.clone());
                    }
                    if self.queue.len() >= MAX_QUEUE {
                        self.queue.pop_front();
                    }
                    self.queue.push_back(d);
                }
            }
        }
    }

    /// Hands a datagram to its endpoint, then lets both applications react.
    fn deliver(&mut self, d: Datagram) {
        let data = BytesMut::from(&d.data[..]);
        if d.to_server {
            if let Some(h) = self.server.handle(self.now, d.dst, d.src, None, data)
                && !self.server_conns.contains(&h)
            {
                self.server_conns.push(h);
            }
        } else {
            self.client.handle(self.now, d.dst, d.src, None, data);
        }
        self.applications();
    }

    /// The applications: accept connections and streams, read everything readable, take
    /// datagrams and events.
    fn applications(&mut self) {
        while let Some(h) = self.server.accept() {
            if !self.server_conns.contains(&h) {
                self.server_conns.push(h);
            }
        }
        let mut conns: Vec<(bool, ConnectionHandle)> = vec![(true, self.client_conn)];
        conns.extend(self.server_conns.iter().map(|h| (false, *h)));
        for (is_client, h) in conns {
            let (ep, streams) = if is_client {
                (&mut self.client, &mut self.client_streams)
            } else {
                (&mut self.server, &mut self.server_streams)
            };
            let Some(conn) = ep.connection_mut(h) else {
                continue;
            };
            for dir in [Dir::Bi, Dir::Uni] {
                while let Some(id) = conn.accept_stream(dir) {
                    if streams.len() < 64 {
                        streams.push(id);
                    }
                }
            }
            for &id in streams.iter() {
                for _ in 0..16 {
                    match conn.read(id, 64 * 1024) {
                        Ok(Some(_)) => {}
                        _ => break,
                    }
                }
            }
            for _ in 0..64 {
                if conn.recv_datagram().is_none() {
                    break;
                }
            }
        }
        for ep in [&mut self.client, &mut self.server] {
            for _ in 0..1024 {
                if ep.poll_event().is_none() {
                    break;
                }
            }
        }
    }

    /// Moves the clock to `to` (never backwards) and runs the timers due.
    fn advance(&mut self, to: Instant) {
        self.now = self.now.max(to);
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.applications();
    }

    /// Jumps to the next timer of either endpoint.
    fn next_timer(&mut self) {
        let next = [self.client.poll_timeout(), self.server.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        if let Some(t) = next {
            self.advance(t);
        }
    }

    /// Delivers everything in flight and jumps timers until both connections are
    /// established (or a bounded number of rounds passed).
    fn run_clean(&mut self, rounds: usize) {
        for _ in 0..rounds {
            self.collect();
            if self.queue.is_empty() {
                let done = self.server_conns.iter().any(|h| {
                    self.server
                        .connection(*h)
                        .is_some_and(|c| !c.is_handshaking())
                }) && self
                    .client
                    .connection(self.client_conn)
                    .is_some_and(|c| c.is_handshake_confirmed());
                if done {
                    return;
                }
                self.next_timer();
                continue;
            }
            while let Some(d) = self.queue.pop_front() {
                self.deliver(d);
            }
            self.advance(self.now + Duration::from_millis(10));
        }
    }

    fn server_conn(&mut self, pick: u8) -> Option<&mut polypath_quic::Connection> {
        let h = *self
            .server_conns
            .get(usize::from(pick) % self.server_conns.len().max(1))?;
        self.server.connection_mut(h)
    }

    /// Runs one operation chosen by the input.
    fn op(&mut self, input: &mut Input<'_>) -> Option<()> {
        let op = input.next()?;
        self.collect();
        match op % 32 {
            // Deliver the next datagram (the common case, so weighted).
            0..=7 => {
                let d = self.queue.pop_front()?;
                self.deliver(d);
            }
            // Lose it.
            8 => {
                self.queue.pop_front();
            }
            // Duplicate it (a copy arrives later).
            9 => {
                let d = self.queue.front()?.clone();
                self.queue.push_back(d);
            }
            // Reorder: the next datagram goes to the back.
            10 => {
                let d = self.queue.pop_front()?;
                self.queue.push_back(d);
            }
            // Corrupt bytes of it, then deliver.
            11 => {
                let mut d = self.queue.pop_front()?;
                for _ in 0..=input.byte() % 4 {
                    let at = usize::from(input.u16());
                    let len = d.data.len();
                    if len > 0 {
                        d.data[at % len] ^= input.byte() | 1;
                    }
                }
                self.deliver(d);
            }
            // Truncate it, then deliver.
            12 => {
                let mut d = self.queue.pop_front()?;
                let keep = usize::from(input.u16()) % (d.data.len() + 1);
                d.data.truncate(keep);
                self.deliver(d);
            }
            // Deliver it from another source address (rebinding or spoofing).
            13 => {
                let mut d = self.queue.pop_front()?;
                let addr = client_addresses()[usize::from(input.byte() % 4)];
                if d.to_server {
                    d.src = addr;
                } else {
                    d.dst = addr;
                }
                self.deliver(d);
            }
            // Time passes a little, or up to the next timer.
            14 => {
                let ms = u64::from(input.byte());
                self.advance(self.now + Duration::from_millis(ms));
            }
            15 => self.next_timer(),
            // An arbitrary datagram from the input, to either endpoint.
            16 => {
                let len = usize::from(input.u16() % 1500);
                let from = client_addresses()[usize::from(input.byte() % 4)];
                let data = input.take(len).to_vec();
                let to_server = op & 32 == 0;
                self.deliver(Datagram {
                    to_server,
                    src: if to_server { from } else { server_addr() },
                    dst: if to_server { server_addr() } else { from },
                    data,
                });
            }
            // A replay of an old client datagram, possibly from another address.
            17 => {
                let i = usize::from(input.byte()) % self.history.len().max(1);
                let mut d = self.history.get(i)?.clone();
                if op & 32 != 0 {
                    d.src = client_addresses()[usize::from(input.byte() % 4)];
                }
                self.deliver(d);
            }
            // A correctly protected 1-RTT packet with frames from the input, sent by either
            // side on a path from the input and arriving from an address from the input.
            18 | 19 => {
                let len = usize::from(input.byte()) * 4;
                let payload = input.take(len).to_vec();
                let path = PathId(u32::from(input.byte() % 4));
                let from = client_addresses()[usize::from(input.byte() % 4)];
                let pick = input.byte();
                if op % 32 == 18 {
                    let conn = self.client.connection_mut(self.client_conn)?;
                    let data = seal_frames(conn, path, &payload)?;
                    self.deliver(Datagram {
                        to_server: true,
                        src: from,
                        dst: server_addr(),
                        data,
                    });
                } else {
                    let conn = self.server_conn(pick)?;
                    let data = seal_frames(conn, path, &payload)?;
                    self.deliver(Datagram {
                        to_server: false,
                        src: server_addr(),
                        dst: from,
                        data,
                    });
                }
            }
            // Applications write to a stream (opening one if needed) and maybe finish it.
            20 | 21 => {
                let n = usize::from(input.u16()) % 20_000;
                let fin = input.byte() & 1 == 1;
                let dir = if op & 64 == 0 { Dir::Bi } else { Dir::Uni };
                let pick = input.byte();
                let is_client = op % 32 == 20;
                let (conn, streams) = if is_client {
                    (
                        self.client.connection_mut(self.client_conn)?,
                        &mut self.client_streams,
                    )
                } else {
                    let h = *self
                        .server_conns
                        .get(usize::from(pick) % self.server_conns.len().max(1))?;
                    (self.server.connection_mut(h)?, &mut self.server_streams)
                };
                let id = match conn.open_stream(dir) {
                    Some(id) if streams.len() < 64 => {
                        streams.push(id);
                        id
                    }
                    _ => *streams.get(usize::from(pick) % streams.len().max(1))?,
                };
                let data = vec![0x5a; n];
                let _ = conn.write(id, &data);
                if fin {
                    let _ = conn.finish(id);
                }
            }
            // Reset or stop a stream.
            22 => {
                let pick = input.byte();
                let code = VarInt::from_u32(u32::from(input.byte()));
                let conn = self.client.connection_mut(self.client_conn)?;
                let id = *self
                    .client_streams
                    .get(usize::from(pick) % self.client_streams.len().max(1))?;
                if pick & 1 == 0 {
                    let _ = conn.reset_stream(id, code);
                } else {
                    let _ = conn.stop_sending(id, code);
                }
            }
            // Unreliable datagrams.
            23 => {
                let n = usize::from(input.u16() % 1400);
                let pick = input.byte();
                let data = Bytes::from(vec![0xa5; n]);
                let conn = if pick & 1 == 0 {
                    self.client.connection_mut(self.client_conn)?
                } else {
                    self.server_conn(pick)?
                };
                let _ = conn.send_datagram(data);
            }
            // The client opens, abandons or changes the status of a path.
            24 => {
                let local = client_addresses()[usize::from(input.byte() % 4)];
                let status = if input.byte() & 1 == 0 {
                    PathStatus::Available
                } else {
                    PathStatus::Backup
                };
                let now = self.now;
                let conn = self.client.connection_mut(self.client_conn)?;
                let _ = conn.open_path(now, local, server_addr(), status);
            }
            25 => {
                let id = PathId(u32::from(input.byte() % 4));
                let pick = input.byte();
                let now = self.now;
                let conn = if pick & 1 == 0 {
                    self.client.connection_mut(self.client_conn)?
                } else {
                    self.server_conn(pick)?
                };
                if pick & 2 == 0 {
                    conn.abandon_path(now, id, TransportErrorCode::NO_ERROR);
                } else {
                    conn.set_path_status(now, id, PathStatus::Backup);
                }
            }
            // A key update.
            26 => {
                let pick = input.byte();
                let now = self.now;
                let conn = if pick & 1 == 0 {
                    self.client.connection_mut(self.client_conn)?
                } else {
                    self.server_conn(pick)?
                };
                conn.force_key_update(now);
            }
            // One side closes.
            27 => {
                let pick = input.byte();
                let now = self.now;
                let conn = if pick & 1 == 0 {
                    self.client.connection_mut(self.client_conn)?
                } else {
                    self.server_conn(pick)?
                };
                conn.close(now, VarInt::from_u32(u32::from(pick)), b"fuzz");
            }
            // Deliver everything in flight, in order.
            _ => {
                while let Some(d) = self.queue.pop_front() {
                    self.deliver(d);
                }
            }
        }
        Some(())
    }
}

/// Drives a client and a server [`Endpoint`] through a network the input controls. The
/// first byte sets the configuration (multipath, datagrams, small flow-control windows,
/// frequent key updates, Retry, the connection ID limit) and whether a clean handshake
/// runs first. Each following byte is an operation, with its arguments from the next
/// bytes: deliver, lose, duplicate, reorder, corrupt or truncate the next datagram,
/// deliver it from another address, advance the clock or jump to the next timer, inject
/// an arbitrary datagram, replay an old one, send a correctly protected packet whose
/// frames come from the input, write to streams, reset them, send datagrams, open,
/// abandon and mark paths, update keys, close. Nothing may panic; the input then settles
/// (everything delivered, timers run) and the client must still hold at most its one connection.
/// Returns the number of operations run.
pub fn endpoint_pair(data: &[u8]) -> usize {
    let mut input = Input(data);
    let flags = input.byte();
    let Some(mut world) = World::new(flags) else {
        return 0;
    };
    if flags & 32 != 0 {
        world.run_clean(64);
    }
    let mut ops = 0;
    while ops < MAX_OPS && !input.0.is_empty() {
        // `None` means the operation had nothing to act on; its byte is still used.
        let _ = world.op(&mut input);
        ops += 1;
    }
    // Settle: whatever happened, the endpoints must keep working.
    for _ in 0..16 {
        world.collect();
        while let Some(d) = world.queue.pop_front() {
            world.deliver(d);
        }
        world.next_timer();
    }
    assert!(world.client.connection_count() <= 1);
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_handshake_establishes_both_sides() {
        let mut world = World::new(0x21).expect("world");
        world.run_clean(64);
        let client = world.client.connection(world.client_conn).expect("client");
        assert!(
            client.is_handshake_confirmed(),
            "{:?}",
            client.close_reason()
        );
        assert_eq!(world.server_conns.len(), 1);
    }

    #[test]
    fn frames_from_the_input_reach_the_server() {
        // Clean handshake, then a protected client packet on path 0 from the client's own
        // address carrying HANDSHAKE_DONE, which a client must never send.
        let mut world = World::new(0x21).expect("world");
        world.run_clean(64);
        let ops = [18u8, 1, 0x1e, 0, 0, 0, 0, 0];
        let mut input = Input(&ops);
        assert!(world.op(&mut input).is_some());
        let h = world.server_conns[0];
        let conn = world.server.connection(h).expect("server connection");
        match conn.close_reason() {
            Some(polypath_quic::ConnectionError::TransportError(e)) => {
                assert_eq!(e.code, TransportErrorCode::PROTOCOL_VIOLATION)
            }
            other => panic!("server did not close: {other:?}"),
        }
    }
}
