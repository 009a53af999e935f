//! A virtual-clock network for tests: a client and a server [`Endpoint`] exchanging
//! datagrams in memory, with per-address delays and a drop filter. The crate's own tests use
//! it; other crates get it with the `testing` cargo feature (for example the `largest-cwnd`
//! example scheduler's tests).
//!
//! Time only moves when the pair steps: [`Pair::step`] jumps to the next delivery or timer.
//! Everything is deterministic: the endpoints' randomness comes from fixed seeds.
//!
//! [`scheduler`] tests a scheduler alone, without a connection: path snapshots and a
//! closed-loop simulation of paths that drives it packet by packet.

use crate::config::TransportConfig;
use crate::connection::Connection;
use crate::crypto::{
    ServerVerification, client_config, self_signed_certificate_from_seed, server_config,
};
use crate::ecn::EcnCodepoint;
use crate::endpoint::{ConnectionHandle, Endpoint};
use crate::shared::Dir;
use crate::{ClientConfig, EndpointConfig, ServerConfig};
use bytes::BytesMut;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The scheduler test harness: [`scheduler::snapshot`] and [`scheduler::Sim`].
pub mod scheduler {
    pub use crate::sched::harness::{Sim, SimPath, snapshot};
}

/// The ALPN protocol both test endpoints speak.
pub const ALPN: &[u8] = b"polypath-test";

/// The client's first address (path 0), `10.0.0.1:5000`.
pub fn client_addr() -> SocketAddr {
    "10.0.0.1:5000".parse().unwrap()
}

/// The client's second address, for a second path, `10.0.1.1:5000`.
pub fn client_addr2() -> SocketAddr {
    "10.0.1.1:5000".parse().unwrap()
}

/// The server's address, `10.0.0.2:4433`.
pub fn server_addr() -> SocketAddr {
    "10.0.0.2:4433".parse().unwrap()
}

/// A datagram in flight in the test network.
#[derive(Debug, PartialEq, Eq)]
struct InFlight {
    at: Instant,
    seq: u64,
    to_server: bool,
    src: SocketAddr,
    dst: SocketAddr,
    ecn: Option<EcnCodepoint>,
    data: Vec<u8>,
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Decides the fate of a datagram from its bytes, source and destination: `true` drops
/// it.
pub type DropFn = Box<dyn FnMut(&[u8], SocketAddr, SocketAddr) -> bool>;

/// A network element that rewrites the ECN field of datagrams (marks CE, bleaches): it is
/// given the codepoint the sender set, the source and the destination, and returns the
/// codepoint delivered.
pub type EcnFn =
    Box<dyn FnMut(Option<EcnCodepoint>, SocketAddr, SocketAddr) -> Option<EcnCodepoint>>;

/// Two endpoints and the network between them.
pub struct Pair {
    /// The virtual clock.
    pub now: Instant,
    /// The client endpoint.
    pub client: Endpoint,
    /// The server endpoint.
    pub server: Endpoint,
    /// The client's connection.
    pub client_conn: ConnectionHandle,
    /// The server's connection, once it accepted one.
    pub server_conn: Option<ConnectionHandle>,
    /// One-way delay of every datagram.
    pub delay: Duration,
    /// Extra one-way delay for datagrams from or to a given client address.
    pub extra_delay: BTreeMap<SocketAddr, Duration>,
    /// Drops datagrams it returns true for.
    pub drop: Option<DropFn>,
    /// Rewrites the ECN field (the network keeps it as sent without one).
    pub ecn: Option<EcnFn>,
    /// Rewrites the source address of client datagrams (a NAT rebinding).
    pub rewrite_client_source: Option<SocketAddr>,
    queue: BinaryHeap<InFlight>,
    seq: u64,
    buf: Vec<u8>,
    /// Datagrams the client sent, for replay and mutation tests.
    pub client_sent: Vec<Vec<u8>>,
}

/// A client and a server TLS configuration with a fixed self-signed certificate.
pub fn tls_configs() -> (Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>) {
    let cert = self_signed_certificate_from_seed(&["localhost".into()], &[7; 32]).unwrap();
    let server = server_config(cert.chain.clone(), cert.key, vec![ALPN.to_vec()], false).unwrap();
    let client = client_config(
        vec![ALPN.to_vec()],
        ServerVerification::Pinned(cert.chain[0].clone()),
        false,
    )
    .unwrap();
    (client, server)
}

impl Pair {
    /// A client and a server with the given transport settings; the client connects at once.
    pub fn new(client_transport: TransportConfig, server_transport: TransportConfig) -> Self {
        let (client_tls, server_tls) = tls_configs();
        let mut server_config = ServerConfig::new(server_tls);
        server_config.transport = Arc::new(server_transport);
        let mut client_config = ClientConfig::new(client_tls);
        client_config.transport = Arc::new(client_transport);
        Self::with_configs(client_config, server_config, EndpointConfig::from_seed(1))
    }

    /// A pair from full configurations (for Retry, versions, qlog, ...).
    pub fn with_configs(
        client_config: ClientConfig,
        server_config: ServerConfig,
        client_endpoint: EndpointConfig,
    ) -> Self {
        Self::with_endpoints(
            client_config,
            server_config,
            client_endpoint,
            EndpointConfig::from_seed(2),
        )
    }

    /// A pair with default transport settings whose endpoints both protect packets with
    /// `protection`.
    pub fn with_packet_protection(protection: crate::crypto::PacketProtection) -> Self {
        let (client_tls, server_tls) = tls_configs();
        let [mut client_endpoint, mut server_endpoint] = [1, 2].map(EndpointConfig::from_seed);
        client_endpoint.packet_protection = protection;
        server_endpoint.packet_protection = protection;
        Self::with_endpoints(
            ClientConfig::new(client_tls),
            ServerConfig::new(server_tls),
            client_endpoint,
            server_endpoint,
        )
    }

    /// A pair from full configurations, the server's endpoint's included.
    pub fn with_endpoints(
        client_config: ClientConfig,
        server_config: ServerConfig,
        client_endpoint: EndpointConfig,
        server_endpoint: EndpointConfig,
    ) -> Self {
        let now = Instant::now();
        let mut client = Endpoint::new(client_endpoint, None);
        let server = Endpoint::new(server_endpoint, Some(server_config));
        let client_conn = client
            .connect(
                now,
                client_config,
                client_addr(),
                server_addr(),
                "localhost",
            )
            .unwrap();
        Pair {
            now,
            client,
            server,
            client_conn,
            server_conn: None,
            delay: Duration::from_millis(10),
            extra_delay: BTreeMap::new(),
            drop: None,
            ecn: None,
            rewrite_client_source: None,
            queue: BinaryHeap::new(),
            seq: 0,
            buf: Vec::new(),
            client_sent: Vec::new(),
        }
    }

    /// A pair with default transport settings.
    pub fn default_pair() -> Self {
        Self::new(TransportConfig::default(), TransportConfig::default())
    }

    /// The client's connection.
    pub fn client(&mut self) -> &mut Connection {
        self.client
            .connection_mut(self.client_conn)
            .expect("client connection")
    }

    /// The server's connection (panics before the server accepted it).
    pub fn server(&mut self) -> &mut Connection {
        let h = self.server_conn.expect("server connection accepted");
        self.server.connection_mut(h).expect("server connection")
    }

    /// Collects every datagram both endpoints want to send and puts it on the network.
    pub fn send_all(&mut self) {
        for to_server in [true, false] {
            loop {
                let ep = if to_server {
                    &mut self.client
                } else {
                    &mut self.server
                };
                let Some(t) = ep.poll_transmit(self.now, &mut self.buf) else {
                    break;
                };
                let segment = t.segment_size.unwrap_or(t.size);
                for chunk in self.buf[..t.size].chunks(segment) {
                    if to_server {
                        self.client_sent.push(chunk.to_vec());
                    }
                    let dropped = self
                        .drop
                        .as_mut()
                        .is_some_and(|d| d(chunk, t.source, t.destination));
                    if dropped {
                        continue;
                    }
                    let source = match self.rewrite_client_source {
                        Some(addr) if to_server => addr,
                        _ => t.source,
                    };
                    let client_side = if to_server { source } else { t.destination };
                    let delay = self.delay
                        + self
                            .extra_delay
                            .get(&client_side)
                            .copied()
                            .unwrap_or_default();
                    let ecn = match self.ecn.as_mut() {
                        Some(f) => f(t.ecn, source, t.destination),
                        None => t.ecn,
                    };
                    self.seq += 1;
                    self.queue.push(InFlight {
                        at: self.now + delay,
                        seq: self.seq,
                        to_server,
                        src: source,
                        dst: t.destination,
                        ecn,
                        data: chunk.to_vec(),
                    });
                }
            }
        }
    }

    /// Advances to the next event (a delivery or a timer) and processes it. Returns false
    /// when nothing is scheduled any more.
    pub fn step(&mut self) -> bool {
        self.step_until(None)
    }

    /// Like [`Pair::step`], but never advances the clock past `limit`.
    pub fn step_until(&mut self, limit: Option<Instant>) -> bool {
        self.send_all();
        let next_delivery = self.queue.peek().map(|d| d.at);
        let next = [
            next_delivery,
            self.client.poll_timeout(),
            self.server.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(mut next) = next else {
            return false;
        };
        if let Some(limit) = limit {
            next = next.min(limit);
        }
        self.now = self.now.max(next);
        while self.queue.peek().is_some_and(|d| d.at <= self.now) {
            let Some(d) = self.queue.pop() else { break };
            let data = BytesMut::from(&d.data[..]);
            if d.to_server {
                if let Some(h) = self.server.handle(self.now, d.dst, d.src, d.ecn, data)
                    && self.server_conn.is_none()
                {
                    self.server_conn = Some(h);
                }
            } else {
                self.client.handle(self.now, d.dst, d.src, d.ecn, data);
            }
        }
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        if self.server_conn.is_none() {
            self.server_conn = self.server.accept();
        }
        self.send_all();
        true
    }

    /// Steps until `done` holds or `limit` of virtual time passes; returns whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let deadline = self.now + limit;
        while self.now < deadline {
            if done(self) {
                return true;
            }
            if !self.step_until(Some(deadline)) {
                return done(self);
            }
        }
        done(self)
    }

    /// Runs until the handshake is complete and confirmed on both sides (panics after ten
    /// seconds of virtual time).
    pub fn handshake(&mut self) {
        let ok = self.run_until(Duration::from_secs(10), |p| {
            p.server_conn.is_some()
                && !p.client().is_handshaking()
                && p.client().is_handshake_confirmed()
                && !p.server().is_handshaking()
        });
        if !ok {
            let sc = self.server_conn.is_some();
            let c = self.client();
            let c = format!(
                "closed={:?} hs={} confirmed={} stats={:?}",
                c.close_reason(),
                c.is_handshaking(),
                c.is_handshake_confirmed(),
                c.stats()
            );
            let s = if sc {
                let s = self.server();
                format!(
                    "closed={:?} hs={} stats={:?}",
                    s.close_reason(),
                    s.is_handshaking(),
                    s.stats()
                )
            } else {
                "none".into()
            };
            panic!("handshake did not complete: client {c}; server {s}");
        }
    }

    /// Sends `len` bytes on a new client stream and reads them at the server; returns the
    /// bytes received.
    pub fn transfer(&mut self, len: usize, limit: Duration) -> Vec<u8> {
        let Some(id) = self.client().open_stream(Dir::Uni) else {
            let c = self.client().close_reason().cloned();
            let sr = self.server().close_reason().cloned();
            panic!("no stream: client closed by {c:?}, server by {sr:?}");
        };
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut written = 0;
        let mut received = Vec::with_capacity(len);
        let mut server_stream = None;
        let mut finished = false;
        let deadline = self.now + limit;
        while self.now < deadline {
            if written < len {
                written += self.client().write(id, &payload[written..]).unwrap_or(0);
            }
            if written == len && !finished {
                self.client().finish(id).unwrap();
                finished = true;
            }
            if server_stream.is_none() {
                server_stream = self.server().accept_stream(Dir::Uni);
            }
            if let Some(sid) = server_stream {
                loop {
                    match self.server().read(sid, usize::MAX) {
                        Ok(Some(chunk)) => received.extend_from_slice(&chunk),
                        Ok(None) => return received,
                        Err(_) => break,
                    }
                }
            }
            if !self.step() {
                break;
            }
        }
        received
    }
}

/// The payload [`Pair::transfer`] sends: `len` bytes of a fixed pattern.
pub fn expected_payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

/// Builds a 1-RTT packet that `conn` sends on `path` with `payload` as its frames (any
/// bytes: the receiver parses them), protected with the connection's current keys, as a
/// misbehaving or attacking peer would send it. `None` before the handshake completes, on
/// a path without a connection ID for the peer, or for payloads over 1 400 bytes.
pub fn seal_frames(conn: &mut Connection, path: crate::PathId, payload: &[u8]) -> Option<Vec<u8>> {
    conn.seal_raw_frames(path, payload)
}

/// Processes `payload` as the frames of a 1-RTT packet `conn` received on path 0 (bypassing
/// packet protection), closing the connection on a protocol violation as a real packet
/// would. Only meaningful once the handshake is complete.
pub fn inject_frames(conn: &mut Connection, now: Instant, payload: &[u8]) {
    conn.inject_frames(now, payload);
}
