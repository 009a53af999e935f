//! The noq peer stack (noq-proto 1.4) as simulator agents, for `stack = "noq"` flows: the
//! same transfer application as polypath's agents ([`Transfer`]) over another QUIC
//! implementation, so a scenario can compare the two under identical conditions. Built only
//! with polypath-sim's `noq` feature (noq serves as a test and benchmark peer).
//!
//! Transport settings match polypath's defaults where both have them (flow-control windows,
//! idle timeout, initial RTT, MTU discovery up to 1452 bytes). noq brings its own packet
//! scheduler, so `scheduler` must stay `default`; `cc` is `newreno`, `cubic` or `bbr`
//! (noq's BBRv3). The endpoints' randomness (reset key, connection IDs, packet-number
//! skips) is seeded from the run seed; what noq draws internally without a seed (token
//! nonces) changes bytes inside packets but never their sizes or timing.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use noq_proto as noq;
use noq_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use polypath_quic::sched::PathStatus;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::agent::{Agent, AgentStats, Datagram, PathStats, Record};
use crate::error::SimError;
use crate::quic::{
    AgentPair, CLOSE_STOPPED, Placement, ReadStep, SERVER_NAME, Transfer, TransferConn,
    queue_datagrams,
};
use crate::time::SimTime;

/// Datagrams one noq transmit may batch.
const MAX_BATCH: NonZeroUsize = NonZeroUsize::new(10).unwrap();
/// How stale the per-path figures in the recorder may be.
const STATS_REFRESH: Duration = Duration::from_millis(10);
/// Length of the connection IDs the endpoints issue (polypath's default too).
const CID_LEN: usize = 8;

/// Connection IDs from a seeded generator.
struct SeededCids(ChaCha20Rng);

impl noq::ConnectionIdGenerator for SeededCids {
    fn generate_cid(&mut self) -> noq::ConnectionId {
        let mut b = [0u8; CID_LEN];
        self.0.fill_bytes(&mut b);
        noq::ConnectionId::new(&b)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// A fixed wall clock for the tokens noq issues, so no output depends on the real one.
#[derive(Debug)]
struct FixedSystemTime;

impl noq::TimeSource for FixedSystemTime {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }
}

fn endpoint_config(seed: u64) -> noq::EndpointConfig {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut key = [0u8; 32];
    rng.fill_bytes(&mut key);
    let mut config = noq::EndpointConfig::new(Arc::new(ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        &key,
    )));
    let mut rng_seed = [0u8; 32];
    rng.fill_bytes(&mut rng_seed);
    config.rng_seed(Some(rng_seed));
    let cid_seed = rng.next_u64();
    let generators = Arc::new(AtomicU64::new(0));
    config.cid_generator(Arc::new(move || {
        let n = generators.fetch_add(1, Ordering::Relaxed);
        Box::new(SeededCids(ChaCha20Rng::seed_from_u64(
            cid_seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )))
    }));
    config
}

fn transport(p: &Placement<'_>) -> Result<Arc<noq::TransportConfig>, SimError> {
    let q = p.quic;
    let cc: Arc<dyn noq::congestion::ControllerFactory + Send + Sync> = match q
        .cc
        .to_ascii_lowercase()
        .as_str()
    {
        "newreno" | "new_reno" | "reno" => Arc::new(noq::congestion::NewRenoConfig::default()),
        "cubic" => Arc::new(noq::congestion::CubicConfig::default()),
        "bbr" => Arc::new(noq::congestion::Bbr3Config::default()),
        _ => {
            return Err(p
                    .scenario
                    .error_at(
                        &format!("flow[{}].cc", p.flow),
                        format!(
                            "congestion controller `{}` is not available in noq; known: newreno, cubic, bbr",
                            q.cc
                        ),
                    )
                    .into());
        }
    };
    if !matches!(q.scheduler.to_ascii_lowercase().as_str(), "default") {
        return Err(p
            .scenario
            .error_at(
                &format!("flow[{}].scheduler", p.flow),
                "noq uses its own packet scheduler: leave `scheduler` at \"default\"",
            )
            .into());
    }
    let defaults = polypath_quic::TransportConfig::default();
    let mut t = noq::TransportConfig::default();
    t.congestion_controller_factory(cc)
        .receive_window(noq::VarInt::from_u64(defaults.receive_window).unwrap_or(noq::VarInt::MAX))
        .stream_receive_window(
            noq::VarInt::from_u64(defaults.stream_receive_window).unwrap_or(noq::VarInt::MAX),
        )
        .send_window(defaults.send_window)
        .initial_rtt(defaults.initial_rtt);
    let idle = p.idle_timeout.unwrap_or(defaults.max_idle_timeout);
    t.max_idle_timeout(idle.and_then(|d| noq::IdleTimeout::try_from(d).ok()));
    if p.paths.len() > 1 {
        t.max_concurrent_multipath_paths(u32::try_from(p.paths.len()).unwrap_or(u32::MAX));
    }
    Ok(Arc::new(t))
}

/// The client and the server agent of one `stack = "noq"` flow instance.
pub(crate) fn agents(
    p: &Placement<'_>,
    (client_tls, server_tls): (Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>),
) -> Result<AgentPair, SimError> {
    let tls_error = |e: noq::crypto::rustls::NoInitialCipherSuite| {
        SimError::Build(format!("noq TLS configuration: {e}"))
    };
    let transport = transport(p)?;
    let mut server_config = noq::ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(server_tls).map_err(tls_error)?,
    ));
    server_config
        .transport_config(transport.clone())
        .time_source(Arc::new(FixedSystemTime));
    let mut client_config = noq::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(client_tls).map_err(tls_error)?,
    ));
    client_config.transport_config(transport);
    let dcids = Mutex::new(ChaCha20Rng::seed_from_u64(p.seeds.0 ^ 0x00dc_1d00));
    client_config.initial_dst_cid_provider(Arc::new(move || {
        let mut b = [0u8; 8];
        if let Ok(mut rng) = dcids.lock() {
            rng.fill_bytes(&mut b);
        }
        noq::ConnectionId::new(&b)
    }));
    let server = NoqAgent::new(
        false,
        noq::Endpoint::new(
            Arc::new(endpoint_config(p.seeds.1)),
            Some(Arc::new(server_config)),
            true,
        ),
        p,
    );
    let mut client = NoqAgent::new(
        true,
        noq::Endpoint::new(Arc::new(endpoint_config(p.seeds.0)), None, true),
        p,
    );
    client.connect = Some(client_config);
    Ok((Box::new(client), Box::new(server)))
}

impl TransferConn for noq::Connection {
    type Stream = noq::StreamId;

    fn open(&mut self, bidi: bool) -> Option<noq::StreamId> {
        self.streams()
            .open(if bidi { noq::Dir::Bi } else { noq::Dir::Uni })
    }

    fn accept(&mut self, bidi: bool) -> Option<noq::StreamId> {
        self.streams()
            .accept(if bidi { noq::Dir::Bi } else { noq::Dir::Uni })
    }

    fn write(&mut self, id: noq::StreamId, data: Bytes) -> Result<usize, String> {
        match self.send_stream(id).write(&data) {
            Ok(n) => Ok(n),
            Err(noq::WriteError::Blocked) => Ok(0),
            Err(e) => Err(e.to_string()),
        }
    }

    fn finish(&mut self, id: noq::StreamId) -> Result<(), String> {
        self.send_stream(id).finish().map_err(|e| e.to_string())
    }

    fn read(&mut self, id: noq::StreamId, max: usize, sink: &mut dyn FnMut(Bytes)) -> ReadStep {
        let mut recv = self.recv_stream(id);
        let mut chunks = match recv.read(true) {
            Ok(c) => c,
            Err(e) => return ReadStep::Failed(e.to_string()),
        };
        let mut left = max;
        let step = loop {
            if left == 0 {
                break ReadStep::Blocked;
            }
            match chunks.next(left) {
                Ok(Some(chunk)) => {
                    left -= chunk.bytes.len().min(left);
                    sink(chunk.bytes);
                }
                Ok(None) => break ReadStep::Finished,
                Err(noq::ReadError::Blocked) => break ReadStep::Blocked,
                Err(e) => break ReadStep::Failed(e.to_string()),
            }
        };
        // Flow-control credit for what was read goes out with the next packets.
        let _ = chunks.finalize();
        step
    }

    fn close(&mut self, now: Instant, code: u32, reason: &'static [u8]) {
        noq::Connection::close(
            self,
            now,
            noq::VarInt::from_u32(code),
            Bytes::from_static(reason),
        );
    }
}

/// One noq endpoint with its one connection and the transfer application.
struct NoqAgent {
    app: Transfer<noq::StreamId>,
    endpoint: noq::Endpoint,
    conn: Option<(noq::ConnectionHandle, noq::Connection)>,
    connect: Option<noq::ClientConfig>,
    /// (local, remote) of every path; the first is the handshake's.
    paths: Vec<(SocketAddr, SocketAddr)>,
    /// Client: how many paths are opened.
    opened: usize,
    extra_status: PathStatus,
    /// The handshake is confirmed: the client may open paths.
    confirmed: bool,
    gone: bool,
    /// Per-path state for the recorder, refreshed at most every [`STATS_REFRESH`] (noq
    /// reads path statistics through `&mut`).
    path_stats: Vec<PathStats>,
    stats_at: Option<SimTime>,
    out: VecDeque<Datagram>,
    buf: Vec<u8>,
}

impl NoqAgent {
    fn new(client: bool, endpoint: noq::Endpoint, p: &Placement<'_>) -> Self {
        let paths = if client {
            p.paths.clone()
        } else {
            p.paths.iter().map(|&(c, s)| (s, c)).collect()
        };
        NoqAgent {
            app: Transfer::new(client, p.common.clone()),
            endpoint,
            conn: None,
            connect: None,
            paths,
            opened: 1,
            extra_status: p.extra_status,
            confirmed: false,
            gone: false,
            path_stats: Vec::new(),
            stats_at: None,
            out: VecDeque::new(),
            buf: Vec::new(),
        }
    }

    /// The local address datagrams leave from when noq names only an IP (or nothing).
    fn source(&self, ip: Option<IpAddr>) -> SocketAddr {
        let (first, _) = self.paths[0];
        SocketAddr::new(ip.unwrap_or(first.ip()), first.port())
    }

    /// Queues the endpoint's stateless response (version negotiation, retry, reset, close)
    /// that it wrote into the send buffer.
    fn queue_response(&mut self, r: &noq::Transmit) {
        let src = self.source(r.src_ip);
        queue_datagrams(
            &mut self.out,
            &self.buf,
            r.size,
            r.segment_size,
            src,
            r.destination,
        );
    }

    fn refresh_path_stats(&mut self, now: SimTime) {
        self.stats_at = Some(now);
        self.path_stats.clear();
        let Some((_, conn)) = self.conn.as_mut() else {
            return;
        };
        for id in conn.paths() {
            let (Ok(tuple), Some(st)) = (conn.network_path(id), conn.path_stats(id)) else {
                continue;
            };
            let (first, _) = self.paths[0];
            self.path_stats.push(PathStats {
                id: id.to_string().parse().unwrap_or(u64::MAX),
                local: SocketAddr::new(tuple.local_ip().unwrap_or(first.ip()), first.port()),
                remote: tuple.remote(),
                srtt: Some(st.rtt),
                cwnd: Some(st.cwnd),
                bytes_in_flight: None,
                lost_packets: st.lost_packets,
                sent_packets: st.sent_packets,
            });
        }
    }

    /// Shuttles endpoint events between the connection and its endpoint.
    fn exchange_events(&mut self) {
        let Some((h, conn)) = self.conn.as_mut() else {
            return;
        };
        while let Some(ev) = conn.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(*h, ev) {
                conn.handle_event(back);
            }
        }
    }

    fn service(&mut self, now: SimTime) {
        let t = self.app.c.clock.instant(now);
        if let Some(config) = self.connect.take_if(|_| now >= self.app.c.start) {
            let (_, remote) = self.paths[0];
            match self.endpoint.connect(t, config, remote, SERVER_NAME) {
                Ok(c) => self.conn = Some(c),
                Err(e) => {
                    self.app.fail(format!("connect: {e}"));
                    self.gone = true;
                }
            }
        }
        self.exchange_events();
        let Some((_, conn)) = self.conn.as_mut() else {
            return;
        };
        if !self.gone && self.app.stopped(now) {
            conn.close(
                t,
                noq::VarInt::from_u32(CLOSE_STOPPED),
                Bytes::from_static(b"stopped"),
            );
            self.app
                .fail("stopped at the flow's stop time before the transfer completed".into());
            self.gone = true;
        }
        while let Some(event) = conn.poll() {
            match event {
                noq::Event::HandshakeConfirmed => self.confirmed = true,
                noq::Event::Stream(noq::StreamEvent::Finished { id })
                    if self.app.is_stream(id) && self.app.sends_data() =>
                {
                    self.app.on_acknowledged(conn, t);
                }
                noq::Event::ConnectionLost { reason } => {
                    self.gone = true;
                    if !self.app.done {
                        self.app.fail(reason.to_string());
                    }
                }
                _ => {}
            }
        }
        if conn.is_closed() {
            self.gone = true;
        } else {
            if self.app.client && self.confirmed {
                while let Some(&(local, remote)) = self.paths.get(self.opened) {
                    let status = match self.extra_status {
                        PathStatus::Available => noq::PathStatus::Available,
                        PathStatus::Backup => noq::PathStatus::Backup,
                    };
                    match conn.open_path(noq::FourTuple::new(remote, Some(local.ip())), status, t) {
                        Ok(_) => self.opened += 1,
                        Err(
                            noq::PathError::MaxPathIdReached | noq::PathError::RemoteCidsExhausted,
                        ) => {
                            break;
                        }
                        Err(_) => {
                            self.opened = self.paths.len();
                        }
                    }
                }
                let open = conn.paths().len();
                let mut o = self.app.c.outcome.borrow_mut();
                o.client_paths = o.client_paths.max(open);
            }
            if !self.app.step(conn, now, t) {
                self.gone = true;
            }
        }
        self.exchange_events();
        if self
            .stats_at
            .is_none_or(|at| now.saturating_since(at) >= STATS_REFRESH)
        {
            self.refresh_path_stats(now);
        }
        if self.conn.as_ref().is_some_and(|(_, c)| c.is_drained()) {
            self.conn = None;
            self.gone = true;
        }
    }
}

impl Agent for NoqAgent {
    fn handle_datagram(&mut self, now: SimTime, datagram: Datagram) {
        let t = self.app.c.clock.instant(now);
        let path = noq::FourTuple::new(datagram.src, Some(datagram.dst.ip()));
        let data = BytesMut::from(datagram.payload);
        match self.endpoint.handle(t, path, None, data, &mut self.buf) {
            Some(noq::DatagramEvent::ConnectionEvent(h, ev)) => {
                if let Some((ch, conn)) = self.conn.as_mut()
                    && *ch == h
                {
                    conn.handle_event(ev);
                }
            }
            Some(noq::DatagramEvent::NewConnection(incoming)) => {
                if self.conn.is_none() && !self.app.client {
                    match self.endpoint.accept(incoming, t, &mut self.buf, None) {
                        Ok(c) => self.conn = Some(c),
                        Err(e) => {
                            if let Some(r) = e.response {
                                self.queue_response(&r);
                            }
                        }
                    }
                } else {
                    self.endpoint.ignore(incoming);
                }
            }
            Some(noq::DatagramEvent::Response(r)) => self.queue_response(&r),
            None => {}
        }
        self.service(now);
    }

    fn handle_timeout(&mut self, now: SimTime) {
        if let Some((_, conn)) = self.conn.as_mut() {
            conn.handle_timeout(self.app.c.clock.instant(now));
        }
        self.service(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Datagram> {
        if let Some(d) = self.out.pop_front() {
            return Some(d);
        }
        let t = self.app.c.clock.instant(now);
        let (_, conn) = self.conn.as_mut()?;
        let tx = conn.poll_transmit(t, MAX_BATCH, &mut self.buf)?;
        let src = self.source(tx.src_ip);
        queue_datagrams(
            &mut self.out,
            &self.buf,
            tx.size,
            tx.segment_size,
            src,
            tx.destination,
        );
        self.exchange_events();
        self.out.pop_front()
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        let stack = self
            .conn
            .as_mut()
            .and_then(|(_, c)| c.poll_timeout())
            .map(|i| self.app.c.clock.sim(i));
        self.app
            .next_deadline(stack, self.connect.is_some(), self.gone)
    }

    fn is_done(&self) -> bool {
        self.app.done || self.gone
    }

    fn stats(&self, stats: &mut AgentStats) {
        self.app.app_stats(stats);
        stats.paths.extend(self.path_stats.iter().cloned());
    }

    fn drain_records(&mut self, out: &mut Vec<Record>) {
        out.append(&mut self.app.records);
    }
}
