//! The QUIC adapter: runs the real `polypath-quic` stack for `kind = "quic"` flows.
//!
//! [`QuicFactory`] places, for every instance of a QUIC flow, a client endpoint on the
//! `from` host and a server endpoint on the `to` host. The client connects from its first
//! path; with more than one path, Multipath QUIC is negotiated and the client opens the
//! other paths (from its other local addresses) once the handshake is confirmed. The flow's
//! `bytes` move over one stream in the flow's direction:
//!
//! * `upload`: the client opens a unidirectional stream, writes the bytes and finishes it;
//! * `download`: the client opens a bidirectional stream carrying an 8-byte request (the
//!   byte count, big-endian) and the server answers with the bytes on the same stream.
//!
//! The receiving application reads every byte in order, checks it against the data the
//! sender wrote ([`transfer_bytes`]) and records a [`Record::Completion`] (from the
//! instance's start to the last byte read). The sender closes the connection (application
//! code 0) once its data and FIN are acknowledged: it is the last to know the transfer is
//! complete.
//!
//! The stack works with `std::time::Instant`s: a [`SimTime`] `t` becomes one fixed base
//! instant plus `t`, so only differences between instants reach the stack, and runs with
//! the same seed behave identically whenever they happen. Every endpoint's randomness is
//! seeded from the run seed.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use polypath_link::LinkEvent;
use polypath_quic::cc::factory_by_name;
use polypath_quic::crypto::{
    PacketProtection, ServerVerification, client_config, self_signed_certificate_from_seed,
    server_config,
};
use polypath_quic::pm::PathManagerFactory;
use polypath_quic::qlog::QlogFactory;
use polypath_quic::registry::{self, PathManagerTraits, Policy};
use polypath_quic::sched::{PathStatus, Scheduler, SchedulerFactory, scheduler_by_name};
use polypath_quic::streams::{ReadError, StreamEvent};
use polypath_quic::{
    ClientConfig, Connection, ConnectionHandle, ConnectionId, Dir, Endpoint, EndpointConfig, Event,
    ServerConfig, Side, StreamId, TransportConfig, VarInt,
};
use polypath_scenario::{FlowKind, QuicFlow, QuicTransactions, Scenario, TransferDirection};

use crate::agent::{Agent, AgentStats, Datagram, PathStats, Record};
use crate::build::{AgentFactory, BuildContext};
use crate::error::SimError;
use crate::time::SimTime;
use crate::traffic::AppRate;

mod agent;
mod options;
mod transfer;

use agent::*;
use options::*;
use transfer::*;

pub use options::parse_receive_window;
// The noq peer's agent shares the transfer application and the datagram queueing.
#[cfg(feature = "noq")]
pub(crate) use agent::queue_datagrams;
#[cfg(feature = "noq")]
pub(crate) use transfer::{ReadStep, Transfer, TransferConn};

/// ALPN protocol of simulated transfers.
pub(crate) const ALPN: &[u8] = b"polypath-sim";
/// Server name the clients ask for (the certificate carries it).
pub(crate) const SERVER_NAME: &str = "server.polypath.sim";
/// Seed of the servers' self-signed certificate (any fixed value: it only has to be the
/// same in every run).
const CERT_SEED: [u8; 32] = [0x5a; 32];
/// Length of the download request: the byte count as a big-endian `u64`.
pub(crate) const REQUEST_LEN: usize = 8;
/// Application error code of a clean close after the transfer.
pub(crate) const CLOSE_DONE: u32 = 0;
/// Application error code of a close at the instance's `stop` time.
pub(crate) const CLOSE_STOPPED: u32 = 1;
/// Application error code of a close after the transfer went wrong.
pub(crate) const CLOSE_FAILED: u32 = 2;

/// Period of the transfer data: byte `i` equals byte `i % TRANSFER_PERIOD`. A prime just
/// under 1 MiB, so data placed at a wrong offset is recognised unless the error is a
/// multiple of it (never in transfers shorter than the period).
pub const TRANSFER_PERIOD: usize = 1_048_573;
/// Largest piece handed to a stream in one write.
const WRITE_CHUNK: usize = 256 * 1024;

/// Period plus one write chunk of pseudo-random bytes, so any write is one slice of it.
fn pattern() -> &'static Bytes {
    static PATTERN: OnceLock<Bytes> = OnceLock::new();
    PATTERN.get_or_init(|| {
        let mut state = 0x243f_6a88_85a3_08d3_u64;
        let mut out = Vec::with_capacity(TRANSFER_PERIOD + WRITE_CHUNK);
        for _ in 0..(TRANSFER_PERIOD / 8 + 1) {
            // SplitMix64.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        out.truncate(TRANSFER_PERIOD);
        let head = out[..WRITE_CHUNK].to_vec();
        out.extend_from_slice(&head);
        Bytes::from(out)
    })
}

/// Up to `len` bytes (at most one write chunk) of the transfer data from `offset`, without
/// copying.
pub(crate) fn transfer_slice(offset: u64, len: u64) -> Bytes {
    let start = (offset % TRANSFER_PERIOD as u64) as usize;
    let n = len.min(WRITE_CHUNK as u64) as usize;
    pattern().slice(start..start + n)
}

/// The first `len` bytes every QUIC transfer sends (for tests that compare what arrived).
pub fn transfer_bytes(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let piece = transfer_slice(out.len() as u64, (len - out.len()) as u64);
        out.extend_from_slice(&piece);
    }
    out
}

/// Bytes of `data` that differ from the transfer data at `offset`.
pub(crate) fn mismatches(mut offset: u64, mut data: &[u8]) -> u64 {
    let mut bad = 0;
    while !data.is_empty() {
        let start = (offset % TRANSFER_PERIOD as u64) as usize;
        let n = data.len().min(TRANSFER_PERIOD - start);
        let (piece, rest) = data.split_at(n);
        let expected = &pattern()[start..start + n];
        if piece != expected {
            bad += piece.iter().zip(expected).filter(|(a, b)| a != b).count() as u64;
        }
        offset += n as u64;
        data = rest;
    }
    bad
}

/// Maps simulated time to the stack's `Instant`s: one process-wide base plus the offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    base: Instant,
}

impl Clock {
    pub fn new() -> Self {
        static BASE: OnceLock<Instant> = OnceLock::new();
        Clock {
            base: *BASE.get_or_init(Instant::now),
        }
    }

    pub fn instant(self, t: SimTime) -> Instant {
        self.base + t.as_duration()
    }

    pub fn sim(self, i: Instant) -> SimTime {
        SimTime::from_duration(i.saturating_duration_since(self.base))
    }
}

/// What became of one QUIC transfer, for tests and reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransferOutcome {
    /// The flow's name.
    pub flow: String,
    /// The instance (member number).
    pub instance: u32,
    /// Bytes the flow asked to move.
    pub bytes: u64,
    /// Bytes the receiving application read.
    pub received: u64,
    /// Bytes read that differ from the bytes sent at their offset.
    pub corrupt: u64,
    /// When the instance started (the client connected).
    pub started: SimTime,
    /// When the receiving application read the end of the stream, all bytes present.
    pub completed: Option<SimTime>,
    /// Paths the client connection had open (validated or not) at most at once.
    pub client_paths: usize,
    /// The client connection's scheduler top-path switches
    /// (`ConnectionStats::top_path_switches`): an upload's.
    pub client_top_path_switches: u64,
    /// The server connection's: a download's.
    pub server_top_path_switches: u64,
    /// Why the client's connection or transfer failed, if it did.
    pub client_error: Option<String>,
    /// Why the server's connection or transfer failed, if it did.
    pub server_error: Option<String>,
    /// The bytes read, in order, if the factory was asked to keep them
    /// ([`QuicFactory::keep_received`]).
    pub data: Option<Vec<u8>>,
}

/// Builds the agents of `kind = "quic"` flows: a polypath-quic client on the `from` host and
/// a server on the `to` host per instance. [`crate::run`] and [`crate::run_scenario`] use
/// one after any factory supplied in [`crate::Hooks`].
pub struct QuicFactory {
    out_dir: Option<PathBuf>,
    keep_received: bool,
    tls: Option<(Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>)>,
    outcomes: Vec<Rc<RefCell<TransferOutcome>>>,
}

impl std::fmt::Debug for QuicFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicFactory")
            .field("out_dir", &self.out_dir)
            .field("keep_received", &self.keep_received)
            .field("transfers", &self.outcomes.len())
            .finish_non_exhaustive()
    }
}

impl QuicFactory {
    /// A factory writing qlog files (for flows with `[flow.options] qlog = true`) under
    /// `out_dir/qlog/`.
    pub fn new(out_dir: Option<&Path>) -> Self {
        QuicFactory {
            out_dir: out_dir.map(Path::to_path_buf),
            keep_received: false,
            tls: None,
            outcomes: Vec::new(),
        }
    }

    /// Keep every byte the receivers read in [`TransferOutcome::data`] (for tests; costs
    /// memory for the whole transfer).
    pub fn keep_received(mut self, keep: bool) -> Self {
        self.keep_received = keep;
        self
    }

    /// The outcome of every transfer built so far, in build order.
    pub fn outcomes(&self) -> Vec<TransferOutcome> {
        self.outcomes.iter().map(|o| o.borrow().clone()).collect()
    }

    fn tls(&mut self) -> Result<(Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>), SimError> {
        if let Some(t) = &self.tls {
            return Ok(t.clone());
        }
        let tls_error = |e: polypath_quic::crypto::ConfigError| {
            SimError::Build(format!("QUIC TLS configuration: {e}"))
        };
        let cert = self_signed_certificate_from_seed(&[SERVER_NAME.into()], &CERT_SEED)
            .map_err(tls_error)?;
        let server = server_config(cert.chain.clone(), cert.key, vec![ALPN.to_vec()], false)
            .map_err(tls_error)?;
        let client = client_config(
            vec![ALPN.to_vec()],
            ServerVerification::Pinned(cert.chain[0].clone()),
            false,
        )
        .map_err(tls_error)?;
        self.tls = Some((client.clone(), server.clone()));
        Ok((client, server))
    }

    fn qlog(
        &self,
        flow: &str,
        instance: u32,
        side: &str,
    ) -> Result<Option<Arc<dyn QlogFactory>>, SimError> {
        let Some(dir) = &self.out_dir else {
            return Ok(None);
        };
        let dir = dir.join("qlog");
        std::fs::create_dir_all(&dir).map_err(|e| SimError::io(&dir, e))?;
        let path = dir.join(format!("{flow}-{instance}-{side}.sqlog"));
        let file = File::create(&path).map_err(|e| SimError::io(&path, e))?;
        Ok(Some(Arc::new(QlogFile(Mutex::new(Some(BufWriter::new(
            file,
        )))))))
    }
}

/// Hands one already created file to the first connection of an endpoint.
struct QlogFile(Mutex<Option<BufWriter<File>>>);

impl QlogFactory for QlogFile {
    fn create(&self, _side: Side, _odcid: &ConnectionId) -> Option<Box<dyn Write + Send>> {
        let file = self.0.lock().ok()?.take()?;
        Some(Box::new(file))
    }
}

/// The client and the server agent of one flow instance.
pub(crate) type AgentPair = (Box<dyn Agent>, Box<dyn Agent>);

/// One flow instance as both stacks place it: names, addresses, ports and the shared
/// transfer state.
pub(crate) struct Placement<'s> {
    /// The scenario (for errors naming file, line and field).
    pub scenario: &'s Scenario,
    /// Flow index.
    pub flow: usize,
    /// The flow's QUIC parameters.
    pub quic: &'s QuicFlow,
    /// Client host, server host.
    pub hosts: (usize, usize),
    /// Member number of the instance.
    pub index: u32,
    /// (client address, server address) of every path, the first one first.
    pub paths: Vec<(SocketAddr, SocketAddr)>,
    /// Status of the paths after the first.
    pub extra_status: PathStatus,
    /// The client's path manager.
    pub path_manager: Arc<dyn PathManagerFactory>,
    /// The server runs the path manager too (LAMP5G's window split).
    pub path_manager_at_server: bool,
    /// Parameters for the client's path manager (`[flow.options] path_manager`).
    pub path_manager_params: Vec<(String, String)>,
    /// The client opens only the first path at the start (`initial_paths = "first"`).
    pub first_path_only: bool,
    /// Adapter options.
    pub idle_timeout: Option<Option<Duration>>,
    /// Both endpoints' connection-level receive window, if the flow sets one.
    pub receive_window: Option<u64>,
    /// Both endpoints' per-stream receive window, if the flow sets one.
    pub stream_receive_window: Option<u64>,
    /// Seeds of the client's and the server's randomness.
    pub seeds: (u64, u64),
    /// Shared by the client and the server.
    pub common: Common,
}

impl AgentFactory for QuicFactory {
    fn build(
        &mut self,
        ctx: &mut BuildContext<'_>,
        flow: usize,
        instance: usize,
    ) -> Result<bool, SimError> {
        let scenario = ctx.scenario();
        let Some(f) = scenario.flows.get(flow) else {
            return Ok(false);
        };
        let FlowKind::Quic(q) = &f.kind else {
            return Ok(false);
        };
        let Some(inst) = f.instances.get(instance) else {
            return Ok(false);
        };
        let stack = q.stack.to_ascii_lowercase();
        let scheduler = match stack.as_str() {
            "polypath" => Some(scheduler_by_name(&q.scheduler).ok_or_else(|| {
                scenario.error_at(
                    &format!("flow[{flow}].scheduler"),
                    format!(
                        "unknown scheduler `{}`; known: {}",
                        q.scheduler,
                        registry::known(registry::SCHEDULERS)
                    ),
                )
            })?),
            "noq" => None,
            other => {
                return Err(scenario
                    .error_at(
                        &format!("flow[{flow}].stack"),
                        format!("unknown QUIC stack `{other}`; known: polypath, noq"),
                    )
                    .into());
            }
        };
        let path_manager = path_manager_plan(scenario, flow, &q.path_manager)?;
        let opts = parse_options(
            scenario,
            flow,
            q,
            inst.paths.len(),
            scheduler.as_deref(),
            path_manager.build().as_ref(),
        )?;
        if inst.paths.is_empty() {
            return Err(scenario
                .error_at(
                    &format!("flow[{flow}].paths"),
                    "a QUIC flow needs at least one path",
                )
                .into());
        }
        let idx = inst.index;
        let client_port = ctx.alloc_port(inst.from)?;
        let mut server_port = q.port;
        while ctx.is_bound(inst.to, server_port) {
            server_port = server_port.checked_add(1).ok_or_else(|| {
                SimError::Build(format!(
                    "flow `{}`: no free server port from {} up",
                    f.name, q.port
                ))
            })?;
        }
        let start = SimTime::from_duration(inst.start);
        let outcome = Rc::new(RefCell::new(TransferOutcome {
            flow: f.name.clone(),
            instance: idx,
            bytes: q.bytes,
            started: start,
            data: self.keep_received.then(Vec::new),
            ..TransferOutcome::default()
        }));
        self.outcomes.push(outcome.clone());
        let placement = Placement {
            scenario,
            flow,
            quic: q,
            hosts: (inst.from, inst.to),
            index: idx,
            paths: inst
                .paths
                .iter()
                .map(|p| {
                    (
                        SocketAddr::new(p.local, client_port),
                        SocketAddr::new(p.remote, server_port),
                    )
                })
                .collect(),
            extra_status: path_manager.traits.extra_paths,
            path_manager: path_manager.build(),
            path_manager_at_server: path_manager.traits.at_server,
            path_manager_params: opts.path_manager.clone(),
            first_path_only: opts.first_path_only,
            idle_timeout: opts.idle_timeout,
            receive_window: opts.receive_window,
            stream_receive_window: opts.stream_receive_window,
            seeds: (ctx.agent_seed(flow, idx, 0), ctx.agent_seed(flow, idx, 1)),
            common: Common {
                clock: Clock::new(),
                direction: q.direction,
                total: q.bytes,
                transactions: q.transactions,
                start,
                stop: inst.stop.map(SimTime::from_duration),
                scheduler_params: opts.scheduler.clone(),
                scheduler_changes: Rc::new(opts.scheduler_changes.clone()),
                outcome,
                rate: q
                    .rate
                    .and_then(|r| AppRate::with_message(r, q.message_size)),
            },
        };
        let tls = self.tls()?;
        let (client, server): AgentPair = match scheduler {
            Some(scheduler) => self.polypath_agents(&placement, scheduler, opts.qlog, tls)?,
            None => noq_agents(&placement, opts.qlog, tls)?,
        };
        let (from, to) = placement.hosts;
        ctx.add_agent(to, server_port, flow, idx, server)?;
        ctx.add_agent(from, client_port, flow, idx, client)?;
        Ok(true)
    }
}

/// The peer stack's agents, when polypath-sim is built with the `noq` feature.
#[cfg(feature = "noq")]
fn noq_agents(
    p: &Placement<'_>,
    qlog: bool,
    tls: (Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>),
) -> Result<AgentPair, SimError> {
    if qlog {
        return Err(p
            .scenario
            .error_at(
                &format!("flow[{}].options.qlog", p.flow),
                "qlog output is written by the polypath stack only",
            )
            .into());
    }
    crate::noq::agents(p, tls)
}

/// Without the `noq` feature the peer stack is not built in.
#[cfg(not(feature = "noq"))]
fn noq_agents(
    p: &Placement<'_>,
    _qlog: bool,
    _tls: (Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>),
) -> Result<AgentPair, SimError> {
    Err(p
        .scenario
        .error_at(
            &format!("flow[{}].stack", p.flow),
            "the noq peer stack is only built into polypath-sim with its `noq` feature (for tests and benchmarks: cargo bench -p polypath-sim --features noq)",
        )
        .into())
}

impl QuicFactory {
    fn polypath_agents(
        &self,
        p: &Placement<'_>,
        scheduler: Arc<dyn SchedulerFactory>,
        qlog: bool,
        (client_tls, server_tls): (Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>),
    ) -> Result<AgentPair, SimError> {
        let q = p.quic;
        let cc_error = || {
            p.scenario.error_at(
                &format!("flow[{}].cc", p.flow),
                format!(
                    "unknown congestion controller `{}`; known: {}",
                    q.cc,
                    registry::known(registry::CONGESTION_CONTROLLERS)
                ),
            )
        };
        // One factory per connection: coupled controllers couple the paths of one
        // connection only.
        let client_cc = factory_by_name(&q.cc).ok_or_else(cc_error)?;
        let server_cc = factory_by_name(&q.cc).ok_or_else(cc_error)?;
        let transport = |cc| {
            let mut t = TransportConfig {
                congestion_controller: cc,
                scheduler: scheduler.clone(),
                ..TransportConfig::default()
            };
            if let Some(idle) = p.idle_timeout {
                t.max_idle_timeout = idle;
            }
            if let Some(window) = p.receive_window {
                t.set_fixed_receive_window(window);
            }
            if let Some(window) = p.stream_receive_window {
                t.set_fixed_stream_receive_window(window);
            }
            if p.paths.len() > 1 {
                t.initial_max_path_id = u32::try_from(p.paths.len() - 1).ok();
            }
            Arc::new(t)
        };
        let mut server_config = ServerConfig::new(server_tls);
        let mut server_transport = transport(server_cc);
        // The LAMP5G window split (Section V-C) must reach the sender: the server runs the
        // same path manager, which splits at the validation of each path the client adds.
        let split_at_server = p.path_manager_at_server;
        if split_at_server {
            Arc::make_mut(&mut server_transport).path_manager = p.path_manager.clone();
        }
        server_config.transport = server_transport;
        let mut client_config = ClientConfig::new(client_tls);
        let mut client_transport = transport(client_cc);
        Arc::make_mut(&mut client_transport).path_manager = p.path_manager.clone();
        client_config.transport = client_transport;
        let mut client_ep = endpoint_config(p.seeds.0, p.scenario);
        let mut server_ep = endpoint_config(p.seeds.1, p.scenario);
        if qlog {
            let name = &p.scenario.flows[p.flow].name;
            client_ep.qlog = self.qlog(name, p.index, "client")?;
            server_ep.qlog = self.qlog(name, p.index, "server")?;
        }
        let mut server = QuicAgent::new(
            Side::Server,
            Endpoint::new(server_ep, Some(server_config)),
            p.common.clone(),
        );
        if split_at_server {
            server.path_manager_params = vec![("split_peer_paths".into(), "y".into())];
        }
        let mut client = QuicAgent::new(
            Side::Client,
            Endpoint::new(client_ep, None),
            p.common.clone(),
        );
        let (local, remote) = p.paths[0];
        client.connect = Some(PendingConnect {
            config: client_config,
            local,
            remote,
        });
        if !p.first_path_only {
            client.extra_paths = p.paths[1..].to_vec();
        }
        client.extra_status = p.extra_status;
        client.path_manager_params = p.path_manager_params.clone();
        Ok((Box::new(client), Box::new(server)))
    }
}

/// An endpoint's configuration: secrets and randomness from `seed`, packet protection as
/// the scenario's `[sim] packet_protection` says.
fn endpoint_config(seed: u64, scenario: &Scenario) -> EndpointConfig {
    let mut config = EndpointConfig::from_seed(seed);
    config.packet_protection = match scenario.sim.packet_protection {
        polypath_scenario::PacketProtection::Aead => PacketProtection::Aead,
        polypath_scenario::PacketProtection::Simulated => PacketProtection::Simulated,
    };
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use polypath_link::LinkEventKind;

    #[test]
    fn receive_windows_are_sizes_or_linux() {
        assert_eq!(parse_receive_window("linux"), Ok(3 * 1024 * 1024));
        assert_eq!(parse_receive_window("256kB"), Ok(256_000));
        assert_eq!(parse_receive_window("1200"), Ok(1200));
        assert!(parse_receive_window("0").is_err());
        assert!(parse_receive_window("wide").is_err());
    }

    #[test]
    fn transfer_data_is_checked_at_its_offset() {
        let data = transfer_bytes(3 * TRANSFER_PERIOD / 2);
        assert_eq!(data.len(), 3 * TRANSFER_PERIOD / 2);
        assert_eq!(data[..1000], data[TRANSFER_PERIOD..TRANSFER_PERIOD + 1000]);
        assert_eq!(mismatches(0, &data), 0);
        assert_eq!(mismatches(1234, &data[1234..]), 0);
        // Data at a wrong offset is noticed, and so is a flipped byte.
        assert!(mismatches(1200, &data[..1200]) > 1000);
        let mut bad = data[..5000].to_vec();
        bad[4000] ^= 1;
        assert_eq!(mismatches(0, &bad), 1);
        // Slices never exceed one write chunk, and follow the period.
        assert_eq!(transfer_slice(7, u64::MAX).len(), WRITE_CHUNK);
        assert_eq!(
            transfer_slice(TRANSFER_PERIOD as u64 + 5, 3)[..],
            data[5..8]
        );
    }

    #[test]
    fn predicted_throughput_reaches_the_paths_of_its_interface() {
        let mut f = QuicFactory::new(None);
        let (client_tls, _) = f.tls().unwrap();
        let mut ep = Endpoint::new(EndpointConfig::from_seed(1), None);
        let now = Clock::new().instant(SimTime::ZERO);
        let local: SocketAddr = "10.0.0.1:10000".parse().unwrap();
        let h = ep
            .connect(
                now,
                ClientConfig::new(client_tls),
                local,
                "10.0.0.2:4433".parse().unwrap(),
                SERVER_NAME,
            )
            .unwrap();
        let conn = ep.connection_mut(h).unwrap();
        let event = |bps| {
            LinkEvent::new(
                0,
                0,
                0,
                LinkEventKind::PredictedThroughput {
                    bps,
                    predictor: "oracle".into(),
                    horizon_ms: 100,
                },
            )
        };
        let predicted = |conn: &Connection| conn.paths()[0].snapshot.predicted_throughput;
        // Another interface's prediction, or one without a bound link, changes nothing.
        conn.handle_link_event(now, &event(5e6), Some("10.0.9.9".parse().unwrap()));
        conn.handle_link_event(now, &event(5e6), None);
        assert_eq!(predicted(conn), None);
        conn.handle_link_event(now, &event(42e6), Some(local.ip()));
        assert_eq!(predicted(conn), Some(42_000_000));
        conn.handle_link_event(now, &event(f64::NAN), Some(local.ip()));
        assert_eq!(predicted(conn), Some(42_000_000));
    }

    /// The scenario's `[sim] packet_protection` reaches the endpoints.
    #[test]
    fn endpoints_protect_packets_as_the_scenario_says() {
        let src = |key: &str| {
            format!("name = \"p\"\n[sim]\nduration = \"1s\"\n{key}\n[[host]]\nname = \"h\"\n")
        };
        let file = Path::new("inline.toml");
        for (key, expected) in [
            ("packet_protection = \"aead\"", PacketProtection::Aead),
            (
                "packet_protection = \"simulated\"",
                PacketProtection::Simulated,
            ),
            ("", PacketProtection::Simulated),
        ] {
            let s = Scenario::parse(&src(key), file).unwrap();
            assert_eq!(endpoint_config(1, &s).packet_protection, expected, "{key}");
        }
        let err = Scenario::parse(&src("packet_protection = \"none\""), file)
            .unwrap_err()
            .to_string();
        assert!(err.contains("sim.packet_protection"), "{err}");
        assert!(err.starts_with("inline.toml:4: "), "{err}");
    }

    #[test]
    fn clock_maps_both_ways() {
        let c = Clock::new();
        let t = SimTime(1_234_567_891);
        assert_eq!(c.sim(c.instant(t)), t);
        assert_eq!(c.instant(SimTime::ZERO), Clock::new().base);
    }
}
