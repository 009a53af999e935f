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
    ServerVerification, client_config, self_signed_certificate_from_seed, server_config,
};
use polypath_quic::pm::{PathManagerFactory, path_manager_by_name};
use polypath_quic::qlog::QlogFactory;
use polypath_quic::sched::{PathStatus, SchedulerFactory, scheduler_by_name};
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

/// The adapter's settings from a flow's `[flow.options]`.
#[derive(Debug, Default)]
struct Options {
    qlog: bool,
    scheduler: Vec<(String, String)>,
    scheduler_changes: Vec<SchedulerChange>,
    path_manager: Vec<(String, String)>,
    idle_timeout: Option<Option<Duration>>,
    /// `initial_paths = "first"`: the client opens only the first path at the start and
    /// leaves the others to its path manager.
    first_path_only: bool,
    /// `receive_window`: both endpoints' connection-level receive window (initial_max_data),
    /// fixed (without it, windows start smaller and auto-tune).
    receive_window: Option<u64>,
    /// `stream_receive_window`: both endpoints' per-stream receive window, fixed.
    stream_receive_window: Option<u64>,
}

/// Parses a receive window as the simulator's flow options and the CLI take it: a size
/// (`"256kB"`, `"3MiB"`, a byte count) or `linux` for
/// [`polypath_quic::config::LINUX_RECEIVE_WINDOW`].
pub fn parse_receive_window(text: &str) -> Result<u64, String> {
    if text.trim().eq_ignore_ascii_case("linux") {
        return Ok(polypath_quic::config::LINUX_RECEIVE_WINDOW);
    }
    let bytes = match text.trim().parse::<u64>() {
        Ok(n) => n,
        Err(_) => polypath_scenario::units::parse_size(text)?,
    };
    if bytes == 0 {
        return Err(format!("receive window {text:?} is zero"));
    }
    Ok(bytes)
}

/// Reads a table of plug-in parameters (`{ key = "value", ... }`) as `key=value` text
/// pairs, checking each with `probe` (a freshly built plug-in's `configure`).
fn parameter_table(
    scenario: &Scenario,
    field: &str,
    value: &toml::Value,
    what: &str,
    mut probe: impl FnMut(&str, &str) -> Result<(), String>,
) -> Result<Vec<(String, String)>, SimError> {
    let table = value.as_table().ok_or_else(|| {
        scenario.error_at(
            field,
            format!("`{what}` must be a table of parameters, e.g. {{ key = \"value\" }}"),
        )
    })?;
    let mut out = Vec::new();
    for (k, v) in table {
        let text = match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                v.to_string()
            }
            _ => {
                return Err(scenario
                    .error_at(
                        &format!("{field}.{k}"),
                        format!("a {what} parameter is a string, number or boolean"),
                    )
                    .into());
            }
        };
        probe(k, &text).map_err(|e| scenario.error_at(&format!("{field}.{k}"), e))?;
        out.push((k.clone(), text));
    }
    Ok(out)
}

fn parse_options(
    scenario: &Scenario,
    flow: usize,
    q: &QuicFlow,
    factory: Option<&dyn SchedulerFactory>,
    path_manager: Option<&dyn PathManagerFactory>,
) -> Result<Options, SimError> {
    let mut opts = Options::default();
    for (key, value) in &q.options {
        let field = format!("flow[{flow}].options.{key}");
        match key.as_str() {
            "qlog" => {
                opts.qlog = value
                    .as_bool()
                    .ok_or_else(|| scenario.error_at(&field, "`qlog` must be true or false"))?;
            }
            "idle_timeout" => {
                let text = value.as_str().ok_or_else(|| {
                    scenario.error_at(
                        &field,
                        "`idle_timeout` is a duration such as \"60s\", or \"none\"",
                    )
                })?;
                opts.idle_timeout = Some(if text == "none" {
                    None
                } else {
                    Some(
                        polypath_scenario::units::parse_duration(text)
                            .map_err(|e| scenario.error_at(&field, e))?,
                    )
                });
            }
            "receive_window" | "stream_receive_window" => {
                let bytes = match value {
                    toml::Value::Integer(n) => u64::try_from(*n).ok().filter(|n| *n > 0),
                    toml::Value::String(text) => parse_receive_window(text).ok(),
                    _ => None,
                }
                .ok_or_else(|| {
                    scenario.error_at(
                        &field,
                        format!(
                            "`{key}` is a positive size such as \"256kB\", a byte count, \
                             or \"linux\""
                        ),
                    )
                })?;
                if key == "receive_window" {
                    opts.receive_window = Some(bytes);
                } else {
                    opts.stream_receive_window = Some(bytes);
                }
            }
            "initial_paths" => {
                opts.first_path_only = match value.as_str() {
                    Some("all") => false,
                    Some("first") => true,
                    _ => {
                        return Err(scenario
                            .error_at(&field, "`initial_paths` is \"all\" or \"first\"")
                            .into());
                    }
                };
            }
            "scheduler" => {
                let Some(factory) = factory else {
                    return Err(scenario
                        .error_at(
                            &field,
                            "scheduler parameters apply to the polypath stack only",
                        )
                        .into());
                };
                let mut probe = factory.build();
                opts.scheduler = parameter_table(scenario, &field, value, "scheduler", |k, v| {
                    probe.configure(k, v)
                })?;
            }
            "path_manager" => {
                let Some(factory) = path_manager else {
                    return Err(scenario
                        .error_at(
                            &field,
                            "path manager parameters need one of polypath's path managers (`path_manager` = fullmesh, lamp5g, lamp5g_throughput or failover)",
                        )
                        .into());
                };
                let mut probe = factory.build();
                opts.path_manager =
                    parameter_table(scenario, &field, value, "path_manager", |k, v| {
                        probe.configure(k, v)
                    })?;
            }
            "scheduler_changes" => {
                opts.scheduler_changes = parse_scheduler_changes(scenario, &field, value, factory)?;
            }
            _ => {
                return Err(scenario
                    .error_at(
                        &field,
                        format!(
                            "unknown QUIC flow option `{key}`; known: qlog, idle_timeout, receive_window, stream_receive_window, initial_paths, scheduler, scheduler_changes, path_manager"
                        ),
                    )
                    .into());
            }
        }
    }
    Ok(opts)
}

/// Scheduler parameters applied at a simulated time (`[[flow.options.scheduler_changes]]`):
/// both endpoints of every instance call [`Connection::configure_scheduler`] with them at
/// `at` (simulated time since the run's start), e.g. to change WRR weights during a run as
/// 5G-CLARITY does (the 5G-CLARITY paper, Sections 6.2 and 6.5).
#[derive(Clone, Debug, Default)]
pub(crate) struct SchedulerChange {
    /// When.
    pub at: SimTime,
    /// The parameters, in order.
    pub params: Vec<(String, String)>,
}

/// Parses `scheduler_changes = [{ at = "30s", weights = "2,3,1" }, ...]`: times must
/// increase, and every parameter is tried on a fresh scheduler so a bad one is reported
/// with its field before the run starts.
fn parse_scheduler_changes(
    scenario: &Scenario,
    field: &str,
    value: &toml::Value,
    factory: Option<&dyn SchedulerFactory>,
) -> Result<Vec<SchedulerChange>, SimError> {
    let list = value.as_array().ok_or_else(|| {
        scenario.error_at(
            field,
            "`scheduler_changes` is a list of tables such as { at = \"30s\", weights = \"3,1\" }",
        )
    })?;
    let Some(factory) = factory else {
        return Err(scenario
            .error_at(
                field,
                "scheduler parameters apply to the polypath stack only",
            )
            .into());
    };
    let mut probe = factory.build();
    let mut changes: Vec<SchedulerChange> = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let item = format!("{field}[{i}]");
        let table = entry
            .as_table()
            .ok_or_else(|| scenario.error_at(&item, "each change is a table with `at`"))?;
        let at = table
            .get("at")
            .and_then(toml::Value::as_str)
            .ok_or_else(|| {
                scenario.error_at(&format!("{item}.at"), "`at` is a duration such as \"30s\"")
            })?;
        let at = SimTime::from_duration(
            polypath_scenario::units::parse_duration(at)
                .map_err(|e| scenario.error_at(&format!("{item}.at"), e))?,
        );
        if changes.last().is_some_and(|c| c.at > at) {
            return Err(scenario
                .error_at(&format!("{item}.at"), "changes must be in time order")
                .into());
        }
        let mut rest = table.clone();
        rest.remove("at");
        let params = parameter_table(
            scenario,
            &item,
            &toml::Value::Table(rest),
            "scheduler",
            |k, v| probe.configure(k, v),
        )?;
        changes.push(SchedulerChange { at, params });
    }
    Ok(changes)
}

/// What `path_manager` asks of a flow: the status of the paths the client opens after the
/// first one, and the client's [`PathManager`](polypath_quic::pm::PathManager) plug-in.
/// `default` and `backup` open every path of the flow at the start (`backup`: those after
/// the first as backups); the names of [`path_manager_by_name`] (`fullmesh`, `lamp5g`,
/// `lamp5g_throughput`, `failover`) open them the same way, as available paths, and then
/// let that path manager act on link and path events.
fn path_manager_plan(
    scenario: &Scenario,
    flow: usize,
    name: &str,
) -> Result<(PathStatus, Option<Arc<dyn PathManagerFactory>>), SimError> {
    match name.to_ascii_lowercase().as_str() {
        "default" => Ok((PathStatus::Available, None)),
        "backup" => Ok((PathStatus::Backup, None)),
        other => match path_manager_by_name(other) {
            Some(factory) => Ok((PathStatus::Available, Some(factory))),
            None => Err(scenario
                .error_at(
                    &format!("flow[{flow}].path_manager"),
                    format!(
                        "unknown path manager `{name}`; known: default (every path available), backup (paths after the first are backups), fullmesh, lamp5g, lamp5g_throughput, failover"
                    ),
                )
                .into()),
        },
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
    /// The client's path manager, if `path_manager` names one of polypath's.
    pub path_manager: Option<Arc<dyn PathManagerFactory>>,
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
                        "unknown scheduler `{}`; known: default (minrtt), roundrobin, redundant, wrr, ecf, blest, lamp5g, qos",
                        q.scheduler
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
        let (extra_status, path_manager) = path_manager_plan(scenario, flow, &q.path_manager)?;
        let opts = parse_options(
            scenario,
            flow,
            q,
            scheduler.as_deref(),
            path_manager.as_deref(),
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
            extra_status,
            path_manager,
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
                    "unknown congestion controller `{}`; known: newreno, cubic, bbr, lia, olia",
                    q.cc
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
        let split_at_server =
            p.path_manager.is_some() && q.path_manager.to_ascii_lowercase().starts_with("lamp5g");
        if let Some(pm) = p.path_manager.as_ref().filter(|_| split_at_server) {
            Arc::make_mut(&mut server_transport).path_manager = pm.clone();
        }
        server_config.transport = server_transport;
        let mut client_config = ClientConfig::new(client_tls);
        let mut client_transport = transport(client_cc);
        if let Some(pm) = &p.path_manager {
            Arc::make_mut(&mut client_transport).path_manager = pm.clone();
        }
        client_config.transport = client_transport;
        let mut client_ep = EndpointConfig::from_seed(p.seeds.0);
        let mut server_ep = EndpointConfig::from_seed(p.seeds.1);
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

/// What the client and the server of one transfer share.
#[derive(Clone)]
pub(crate) struct Common {
    pub clock: Clock,
    pub direction: TransferDirection,
    pub total: u64,
    /// Request/response transactions instead of the bulk transfer.
    pub transactions: Option<QuicTransactions>,
    pub start: SimTime,
    pub stop: Option<SimTime>,
    pub scheduler_params: Vec<(String, String)>,
    /// Scheduler parameters to apply later, in time order.
    pub scheduler_changes: Rc<Vec<SchedulerChange>>,
    pub outcome: Rc<RefCell<TransferOutcome>>,
    /// The sending application's rate limit (the flow's `rate`).
    pub rate: Option<AppRate>,
}

/// What a transfer application needs from a QUIC connection: one stream, opened or
/// accepted, written and read. Implemented for polypath-quic's and (with the `noq`
/// feature) noq's connections, so both run the same application.
pub(crate) trait TransferConn {
    /// The stack's stream identifier.
    type Stream: Copy + PartialEq;
    /// Opens a stream (bidirectional or not); `None` while the peer's limits forbid it.
    fn open(&mut self, bidi: bool) -> Option<Self::Stream>;
    /// Takes a stream the peer opened.
    fn accept(&mut self, bidi: bool) -> Option<Self::Stream>;
    /// Writes a prefix of `data`: `Ok(n)`, `Ok(0)` when blocked, or why it failed.
    fn write(&mut self, id: Self::Stream, data: Bytes) -> Result<usize, String>;
    /// Ends the stream after the data written.
    fn finish(&mut self, id: Self::Stream) -> Result<(), String>;
    /// Reads what is available in order, up to `max` bytes, into `sink`.
    fn read(&mut self, id: Self::Stream, max: usize, sink: &mut dyn FnMut(Bytes)) -> ReadStep;
    /// Closes the connection with an application error code.
    fn close(&mut self, now: Instant, code: u32, reason: &'static [u8]);
}

/// How far a read got.
pub(crate) enum ReadStep {
    /// Nothing more now.
    Blocked,
    /// The end of the stream was read.
    Finished,
    /// The stream failed.
    Failed(String),
}

impl TransferConn for Connection {
    type Stream = StreamId;

    fn open(&mut self, bidi: bool) -> Option<StreamId> {
        self.open_stream(if bidi { Dir::Bi } else { Dir::Uni })
    }

    fn accept(&mut self, bidi: bool) -> Option<StreamId> {
        self.accept_stream(if bidi { Dir::Bi } else { Dir::Uni })
    }

    fn write(&mut self, id: StreamId, mut data: Bytes) -> Result<usize, String> {
        match self.write_bytes(id, &mut data) {
            Ok(n) => Ok(n),
            Err(polypath_quic::streams::WriteError::Blocked) => Ok(0),
            Err(e) => Err(e.to_string()),
        }
    }

    fn finish(&mut self, id: StreamId) -> Result<(), String> {
        Connection::finish(self, id).map_err(|e| e.to_string())
    }

    fn read(&mut self, id: StreamId, max: usize, sink: &mut dyn FnMut(Bytes)) -> ReadStep {
        let mut left = max;
        while left > 0 {
            match Connection::read(self, id, left) {
                Ok(Some(chunk)) => {
                    left -= chunk.len().min(left);
                    sink(chunk);
                }
                Ok(None) => return ReadStep::Finished,
                Err(ReadError::Blocked) => return ReadStep::Blocked,
                Err(e) => return ReadStep::Failed(e.to_string()),
            }
        }
        ReadStep::Blocked
    }

    fn close(&mut self, now: Instant, code: u32, reason: &'static [u8]) {
        Connection::close(self, now, VarInt::from_u32(code), reason);
    }
}

/// The transfer application of one endpoint.
pub(crate) struct Transfer<S> {
    pub client: bool,
    pub c: Common,
    stream: Option<S>,
    /// Download server: request bytes read so far.
    request: Vec<u8>,
    /// Bytes to send: the transfer on the sending side, the request on a download client.
    to_send: u64,
    pub sent: u64,
    finished_writing: bool,
    pub received: u64,
    /// The sending side's data (and FIN) were acknowledged, or the receiving side read
    /// everything.
    pub done: bool,
    pub records: Vec<Record>,
    /// Client of a transactions flow: when each unanswered request was issued.
    issued_at: VecDeque<SimTime>,
    /// Client of a transactions flow: requests issued, and when the stream opened (the
    /// time of the first request).
    issued: u64,
    opened_at: Option<SimTime>,
    /// Rate-limited sender: when it started handing over the transfer's bytes.
    data_started: Option<SimTime>,
    /// Rate-limited sender: when its next piece is due, while it waits for one.
    next_piece: Option<SimTime>,
}

impl<S: Copy + PartialEq> Transfer<S> {
    pub fn new(client: bool, c: Common) -> Self {
        Transfer {
            client,
            c,
            stream: None,
            request: Vec::new(),
            to_send: 0,
            sent: 0,
            finished_writing: false,
            received: 0,
            done: false,
            records: Vec::new(),
            issued_at: VecDeque::new(),
            issued: 0,
            opened_at: None,
            data_started: None,
            next_piece: None,
        }
    }

    /// Whether this side sends the transfer's bytes (and closes the connection once they
    /// are acknowledged); neither side of a transactions flow does.
    pub fn sends_data(&self) -> bool {
        if self.c.transactions.is_some() {
            return false;
        }
        match self.c.direction {
            TransferDirection::Upload => self.client,
            TransferDirection::Download => !self.client,
        }
    }

    /// Whether `id` is the transfer's stream.
    pub fn is_stream(&self, id: S) -> bool {
        self.stream == Some(id)
    }

    /// Records why this side failed (the first reason only).
    pub fn fail(&self, why: String) {
        let mut o = self.c.outcome.borrow_mut();
        let slot = if self.client {
            &mut o.client_error
        } else {
            &mut o.server_error
        };
        slot.get_or_insert(why);
    }

    /// The sender learnt that everything was acknowledged: it is the last to know the
    /// transfer is complete, so it closes the connection.
    pub fn on_acknowledged<C: TransferConn<Stream = S>>(&mut self, conn: &mut C, t: Instant) {
        self.done = true;
        conn.close(t, CLOSE_DONE, b"done");
    }

    /// Opens, writes and reads the stream. Returns false if the transfer failed (the
    /// connection is then closed).
    pub fn step<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        now: SimTime,
        t: Instant,
    ) -> bool {
        if let Some(txn) = self.c.transactions {
            return self.step_transactions(conn, now, t, txn);
        }
        let upload = self.c.direction == TransferDirection::Upload;
        if self.stream.is_none() {
            self.stream = match (self.client, upload) {
                (true, up) => conn.open(!up),
                (false, up) => conn.accept(!up),
            };
            if self.stream.is_none() {
                return true;
            }
            self.to_send = match (self.client, upload) {
                (true, true) => self.c.total,
                (true, false) => REQUEST_LEN as u64,
                // Upload server: sends nothing; download server: once the request is read.
                (false, _) => 0,
            };
        }
        let Some(id) = self.stream else {
            return true;
        };
        let mut error = None;
        // Download server: read the request first.
        if !self.client && !upload && self.request.len() < REQUEST_LEN {
            let mut got = Vec::new();
            let step = conn.read(id, REQUEST_LEN - self.request.len(), &mut |b| {
                got.extend_from_slice(&b)
            });
            self.request.extend_from_slice(&got);
            if let ReadStep::Failed(e) = step {
                error = Some(format!("reading the request: {e}"));
            } else if self.request.len() == REQUEST_LEN {
                let mut n = [0u8; REQUEST_LEN];
                n.copy_from_slice(&self.request);
                let asked = u64::from_be_bytes(n);
                if asked == self.c.total {
                    self.to_send = asked;
                } else {
                    error = Some(format!(
                        "request for {asked} bytes, the flow moves {}",
                        self.c.total
                    ));
                }
            }
        }
        let data = self.sends_data();
        if error.is_none() {
            let total = self.c.total;
            // A rate-limited sender hands over what its rate allows so far (from the
            // moment it has something to send).
            let mut limit = self.to_send;
            self.next_piece = None;
            if let (true, Some(rate)) = (data && self.to_send > 0, self.c.rate) {
                let started = *self.data_started.get_or_insert(now);
                limit = limit.min(limit_of(rate, started, now));
            }
            error = self.write_due(conn, id, limit, |sent, left| {
                if data {
                    transfer_slice(sent, left)
                } else {
                    Bytes::copy_from_slice(&total.to_be_bytes()[sent as usize..])
                }
            });
        }
        if let (Some(rate), Some(started)) = (self.c.rate, self.data_started)
            && error.is_none()
            && self.sent < self.to_send
            && self.sent >= limit_of(rate, started, now)
        {
            self.next_piece = Some(started + rate.due(self.sent));
        }
        if error.is_none()
            && self.to_send > 0
            && self.sent == self.to_send
            && !self.finished_writing
        {
            match conn.finish(id) {
                Ok(()) => self.finished_writing = true,
                Err(e) => error = Some(format!("finishing: {e}")),
            }
        }
        if error.is_none() && !data && !self.done {
            match self.read_checked(conn, id) {
                ReadStep::Blocked => {}
                ReadStep::Finished if self.received == self.c.total => {
                    self.done = true;
                    self.c.outcome.borrow_mut().completed = Some(now);
                    self.records.push(Record::Completion {
                        label: "transfer".into(),
                        started: self.c.start,
                        finished: now,
                        bytes: self.received,
                    });
                }
                ReadStep::Finished => {
                    error = Some(format!(
                        "the stream ended after {} of {} bytes",
                        self.received, self.c.total
                    ));
                }
                ReadStep::Failed(e) => error = Some(format!("reading: {e}")),
            }
        }
        if let Some(e) = error {
            conn.close(t, CLOSE_FAILED, b"transfer failed");
            self.fail(e);
            return false;
        }
        true
    }

    /// Writes what is due of `self.to_send`: `piece(sent, left)` gives the bytes from offset
    /// `sent` (any prefix of the `left` still due). Returns why writing failed, if it did.
    fn write_due<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        id: S,
        limit: u64,
        piece: impl Fn(u64, u64) -> Bytes,
    ) -> Option<String> {
        let end = self.to_send.min(limit);
        while self.sent < end {
            let chunk = piece(self.sent, end - self.sent);
            let len = chunk.len();
            match conn.write(id, chunk) {
                Ok(n) => {
                    self.sent += n as u64;
                    if n < len {
                        break;
                    }
                }
                Err(e) => return Some(format!("writing: {e}")),
            }
        }
        None
    }

    /// Reads what arrived (transfer data from offset `self.received`), checking it; the
    /// outcome's `received` counts the transfer's bytes, or a transactions client's
    /// responses.
    fn read_checked<C: TransferConn<Stream = S>>(&mut self, conn: &mut C, id: S) -> ReadStep {
        let mut received = self.received;
        let mut outcome = self.c.outcome.borrow_mut();
        let step = conn.read(id, usize::MAX, &mut |chunk| {
            outcome.corrupt += mismatches(received, &chunk);
            received += chunk.len() as u64;
            if let Some(d) = outcome.data.as_mut() {
                d.extend_from_slice(&chunk);
            }
        });
        if self.client || self.c.transactions.is_none() {
            outcome.received = received;
        }
        drop(outcome);
        self.received = received;
        step
    }

    /// The request/response application, in the style of netperf's TCP_RR test: the
    /// client writes `request` bytes on one bidirectional stream, the server answers each
    /// whole request with `response` bytes, and the client records a `transaction`
    /// completion (from the request's issue to the last byte of its response) and issues
    /// the next request at once, or every `interval` when one is set. The client closes
    /// the connection after `count` transactions or at the flow's stop time.
    fn step_transactions<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        now: SimTime,
        t: Instant,
        txn: QuicTransactions,
    ) -> bool {
        if self.done && self.client {
            return true;
        }
        if self.stream.is_none() {
            self.stream = if self.client {
                conn.open(true)
            } else {
                conn.accept(true)
            };
            if self.stream.is_some() {
                self.opened_at = Some(now);
            }
        }
        let Some(id) = self.stream else {
            return true;
        };
        let stopping = self.c.stop.is_some_and(|s| now >= s);
        let error = if self.client {
            self.run_client_transactions(conn, id, stopping, now, txn)
        } else {
            self.run_server_transactions(conn, id, stopping, txn)
        };
        if let Some(e) = error {
            conn.close(t, CLOSE_FAILED, b"transactions failed");
            self.fail(e);
            return false;
        }
        let limit = txn.count.unwrap_or(u64::MAX);
        if self.client && (self.issued == limit && self.issued_at.is_empty() || stopping) {
            self.done = true;
            self.c.outcome.borrow_mut().completed = Some(now);
            conn.close(t, CLOSE_DONE, b"done");
        }
        true
    }

    /// The client's side of [`Self::step_transactions`]: issues the requests that are
    /// due, writes them, reads the responses and records each completed transaction.
    fn run_client_transactions<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        id: S,
        stopping: bool,
        now: SimTime,
        txn: QuicTransactions,
    ) -> Option<String> {
        let limit = txn.count.unwrap_or(u64::MAX);
        loop {
            while !stopping && self.issued < limit {
                let due = match txn.interval {
                    None if self.issued_at.is_empty() => now,
                    None => break,
                    Some(_) => match self.next_request() {
                        Some(due) => due,
                        None => break,
                    },
                };
                if due > now {
                    break;
                }
                self.issued_at.push_back(due);
                self.issued += 1;
                self.to_send += txn.request;
            }
            if let Some(e) = self.write_due(conn, id, u64::MAX, transfer_slice) {
                return Some(e);
            }
            match self.read_checked(conn, id) {
                ReadStep::Blocked => {}
                ReadStep::Finished => return Some("the server ended the stream".into()),
                ReadStep::Failed(e) => return Some(format!("reading: {e}")),
            }
            let answered = self.received / txn.response;
            let completed = self.issued - self.issued_at.len() as u64;
            if answered == completed {
                return None;
            }
            for _ in completed..answered {
                let Some(started) = self.issued_at.pop_front() else {
                    return Some("more response bytes than requests".into());
                };
                self.records.push(Record::Completion {
                    label: "transaction".into(),
                    started,
                    finished: now,
                    bytes: txn.response,
                });
            }
        }
    }

    /// The server's side of [`Self::step_transactions`]: reads requests and answers each
    /// whole one. Its part is done once it answered the last of `count` requests, or, in
    /// flows without a count (which end with the client's close at the stop time),
    /// whenever it answered every request read so far.
    fn run_server_transactions<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        id: S,
        stopping: bool,
        txn: QuicTransactions,
    ) -> Option<String> {
        match self.read_checked(conn, id) {
            ReadStep::Blocked | ReadStep::Finished => {}
            ReadStep::Failed(e) => return Some(format!("reading: {e}")),
        }
        self.to_send = self.received / txn.request * txn.response;
        let error = self.write_due(conn, id, u64::MAX, transfer_slice);
        self.done = stopping
            || match txn.count {
                Some(n) => self.sent == n.saturating_mul(txn.response),
                None => self.sent == self.to_send,
            };
        error
    }

    /// Whether the instance's stop time has come with the transfer unfinished (the stop
    /// time is the normal end of a transactions flow without a count).
    pub fn stopped(&self, now: SimTime) -> bool {
        let open_ended = self.c.transactions.is_some_and(|t| t.count.is_none());
        !self.done && !open_ended && self.c.stop.is_some_and(|s| now >= s)
    }

    /// When the client of a transactions flow issues its next request on a timer.
    fn next_request(&self) -> Option<SimTime> {
        let txn = self.c.transactions?;
        let interval = txn.interval?;
        let opened = self.opened_at?;
        let issued = u32::try_from(self.issued).unwrap_or(u32::MAX);
        (self.client && !self.done && self.issued < txn.count.unwrap_or(u64::MAX))
            .then(|| opened + interval.saturating_mul(issued))
    }

    /// The agent's next deadline given the stack's (`stack`): also the start (before the
    /// client connected) and the stop time.
    pub fn next_deadline(
        &self,
        stack: Option<SimTime>,
        connecting: bool,
        gone: bool,
    ) -> Option<SimTime> {
        let own = if connecting {
            Some(self.c.start)
        } else {
            let stop = self.c.stop.filter(|_| !gone && !self.done);
            let app = earliest(self.next_request(), self.next_piece);
            earliest(stop, app.filter(|_| !gone))
        };
        earliest(stack, own)
    }

    /// Application bytes for the recorder.
    pub fn app_stats(&self, stats: &mut AgentStats) {
        if self.c.transactions.is_some() {
            stats.app_bytes_sent = self.sent;
            stats.app_bytes_received = self.received;
        } else if self.sends_data() {
            stats.app_bytes_sent = self.sent;
        } else {
            stats.app_bytes_received = self.received;
        }
    }
}

/// Bytes a rate-limited sender that started at `started` may have handed over at `now`.
fn limit_of(rate: AppRate, started: SimTime, now: SimTime) -> u64 {
    rate.allowed(Duration::from_nanos(now.0.saturating_sub(started.0)))
}

/// The client's connection, made at the instance's start.
struct PendingConnect {
    config: ClientConfig,
    local: SocketAddr,
    remote: SocketAddr,
}

/// One polypath-quic endpoint with its one connection and the transfer application.
struct QuicAgent {
    app: Transfer<StreamId>,
    endpoint: Endpoint,
    conn: Option<ConnectionHandle>,
    connect: Option<PendingConnect>,
    /// Client: paths still to open, and the status they get.
    extra_paths: Vec<(SocketAddr, SocketAddr)>,
    extra_status: PathStatus,
    /// Client: parameters for its path manager, applied when it connects.
    path_manager_params: Vec<(String, String)>,
    /// The connection is gone (closed, drained or never made).
    gone: bool,
    /// How many of the flow's scheduler changes this endpoint has applied.
    changes_applied: usize,
    out: VecDeque<Datagram>,
    buf: Vec<u8>,
}

impl QuicAgent {
    fn new(side: Side, endpoint: Endpoint, c: Common) -> Self {
        QuicAgent {
            app: Transfer::new(side.is_client(), c),
            endpoint,
            conn: None,
            connect: None,
            extra_paths: Vec::new(),
            extra_status: PathStatus::Available,
            path_manager_params: Vec::new(),
            gone: false,
            changes_applied: 0,
            out: VecDeque::new(),
            buf: Vec::new(),
        }
    }

    /// Applies the scheduler changes that are due (once the connection exists).
    fn apply_scheduler_changes(&mut self, now: SimTime, h: ConnectionHandle) {
        let changes = self.app.c.scheduler_changes.clone();
        while let Some(change) = changes.get(self.changes_applied).filter(|c| c.at <= now) {
            if let Some(conn) = self.endpoint.connection_mut(h) {
                for (k, v) in &change.params {
                    // Checked when the flow was built.
                    let _ = conn.configure_scheduler(k, v);
                }
            }
            self.changes_applied += 1;
        }
    }

    /// When the next scheduler change is due.
    fn next_scheduler_change(&self) -> Option<SimTime> {
        self.app
            .c
            .scheduler_changes
            .get(self.changes_applied)
            .map(|c| c.at)
    }

    fn configure_path_manager(&mut self, h: ConnectionHandle) {
        if let Some(conn) = self.endpoint.connection_mut(h) {
            for (k, v) in &self.path_manager_params {
                // Checked when the flow was built.
                let _ = conn.configure_path_manager(k, v);
            }
        }
    }

    fn configure_scheduler(&mut self, h: ConnectionHandle) {
        if let Some(conn) = self.endpoint.connection_mut(h) {
            for (k, v) in &self.app.c.scheduler_params {
                // Checked when the flow was built.
                let _ = conn.configure_scheduler(k, v);
            }
        }
    }

    /// Everything the application does after the endpoint processed input.
    fn service(&mut self, now: SimTime) {
        let t = self.app.c.clock.instant(now);
        if let Some(p) = self.connect.take_if(|_| now >= self.app.c.start) {
            match self
                .endpoint
                .connect(t, p.config, p.local, p.remote, SERVER_NAME)
            {
                Ok(h) => {
                    self.conn = Some(h);
                    self.configure_scheduler(h);
                    self.configure_path_manager(h);
                }
                Err(e) => {
                    self.app.fail(format!("connect: {e}"));
                    self.gone = true;
                }
            }
        }
        if self.conn.is_none() && !self.app.client {
            self.conn = self.endpoint.accept();
            if let Some(h) = self.conn {
                self.configure_scheduler(h);
                self.configure_path_manager(h);
            }
        }
        let Some(h) = self.conn else {
            return;
        };
        self.apply_scheduler_changes(now, h);
        if !self.gone && self.app.stopped(now) {
            if let Some(conn) = self.endpoint.connection_mut(h) {
                conn.close(t, VarInt::from_u32(CLOSE_STOPPED), b"stopped");
            }
            self.app
                .fail("stopped at the flow's stop time before the transfer completed".into());
            self.gone = true;
        }
        while let Some((_, event)) = self.endpoint.poll_event() {
            match event {
                Event::Stream(StreamEvent::Finished { id })
                    if self.app.is_stream(id) && self.app.sends_data() =>
                {
                    if let Some(conn) = self.endpoint.connection_mut(h) {
                        self.app.on_acknowledged(conn, t);
                    }
                }
                Event::ConnectionLost(e) => {
                    self.gone = true;
                    // Once its part is done, whatever ends the connection (the sender's
                    // close, or the receiver's idle timeout when that close was lost) is
                    // no failure.
                    if !self.app.done {
                        self.app.fail(e.to_string());
                    }
                }
                _ => {}
            }
        }
        let Some(conn) = self.endpoint.connection_mut(h) else {
            self.gone = true;
            return;
        };
        if conn.is_closed() {
            self.gone = true;
            return;
        }
        if self.app.client {
            open_paths(conn, t, &mut self.extra_paths, self.extra_status);
            let open = conn.paths().len();
            let mut o = self.app.c.outcome.borrow_mut();
            o.client_paths = o.client_paths.max(open);
        }
        {
            let switches = conn.stats().top_path_switches;
            let mut o = self.app.c.outcome.borrow_mut();
            if self.app.client {
                o.client_top_path_switches = switches;
            } else {
                o.server_top_path_switches = switches;
            }
        }
        if !self.app.step(conn, now, t) {
            self.gone = true;
        }
    }
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<SimTime>, b: Option<SimTime>) -> Option<SimTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Opens the client's remaining paths once the handshake is confirmed; paths that cannot
/// be opened yet (the peer has not issued connection IDs for them) are tried again later.
fn open_paths(
    conn: &mut Connection,
    now: Instant,
    pending: &mut Vec<(SocketAddr, SocketAddr)>,
    status: PathStatus,
) {
    use polypath_quic::connection::OpenPathError;
    if pending.is_empty() || !conn.is_handshake_confirmed() {
        return;
    }
    while let Some(&(local, remote)) = pending.first() {
        match conn.open_path(now, local, remote, status) {
            Ok(_) => {
                pending.remove(0);
            }
            Err(OpenPathError::NoPathId) => return,
            Err(_) => {
                // Not negotiated or closed: the other paths will not open either.
                pending.clear();
                return;
            }
        }
    }
}

/// Splits a (GSO) batch of `size` bytes in `buf` into datagrams.
pub(crate) fn queue_datagrams(
    out: &mut VecDeque<Datagram>,
    buf: &[u8],
    size: usize,
    segment: Option<usize>,
    src: SocketAddr,
    dst: SocketAddr,
) {
    let size = size.min(buf.len());
    let segment = segment.unwrap_or(size).max(1);
    for chunk in buf[..size].chunks(segment) {
        out.push_back(Datagram {
            src,
            dst,
            payload: Bytes::copy_from_slice(chunk),
        });
    }
}

impl Agent for QuicAgent {
    fn handle_datagram(&mut self, now: SimTime, datagram: Datagram) {
        let t = self.app.c.clock.instant(now);
        self.endpoint.handle(
            t,
            datagram.dst,
            datagram.src,
            BytesMut::from(datagram.payload),
        );
        self.service(now);
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.endpoint.handle_timeout(self.app.c.clock.instant(now));
        self.service(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Datagram> {
        if let Some(d) = self.out.pop_front() {
            return Some(d);
        }
        let t = self
            .endpoint
            .poll_transmit(self.app.c.clock.instant(now), &mut self.buf)?;
        queue_datagrams(
            &mut self.out,
            &self.buf,
            t.size,
            t.segment_size,
            t.source,
            t.destination,
        );
        self.out.pop_front()
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        let stack = self
            .endpoint
            .poll_timeout()
            .map(|i| self.app.c.clock.sim(i));
        let change = self
            .next_scheduler_change()
            .filter(|_| self.conn.is_some() && !self.gone);
        let stack = earliest(stack, change);
        self.app
            .next_deadline(stack, self.connect.is_some(), self.gone)
    }

    fn is_done(&self) -> bool {
        self.app.done || self.gone
    }

    fn stats(&self, stats: &mut AgentStats) {
        self.app.app_stats(stats);
        let Some(conn) = self.conn.and_then(|h| self.endpoint.connection(h)) else {
            return;
        };
        for p in conn.paths() {
            let s = &p.snapshot;
            stats.paths.push(PathStats {
                id: u64::from(s.id.0),
                local: s.local,
                remote: s.remote,
                srtt: s.has_rtt_sample.then_some(s.srtt),
                cwnd: Some(s.cwnd),
                bytes_in_flight: Some(s.bytes_in_flight),
                lost_packets: p.stats.packets_lost,
                sent_packets: p.stats.packets_sent,
            });
        }
    }

    fn drain_records(&mut self, out: &mut Vec<Record>) {
        out.append(&mut self.app.records);
    }

    fn handle_link_event(&mut self, now: SimTime, event: &LinkEvent, local: Option<IpAddr>) {
        let t = self.app.c.clock.instant(now);
        if let Some(conn) = self.conn.and_then(|h| self.endpoint.connection_mut(h)) {
            conn.handle_link_event(t, event, local);
        }
    }
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

    #[test]
    fn clock_maps_both_ways() {
        let c = Clock::new();
        let t = SimTime(1_234_567_891);
        assert_eq!(c.sim(c.instant(t)), t);
        assert_eq!(c.instant(SimTime::ZERO), Clock::new().base);
    }
}
