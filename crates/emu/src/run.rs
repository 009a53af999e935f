//! `polypath emu run`: builds the testbed for a scenario, runs it in real time, writes the
//! outputs and removes everything it created.

use polypath_quic::registry;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use polypath_link::feed::FEED_ENV;
use polypath_scenario::{FlowKind, QuicFlow, RateModel, Scenario, TcpFlow, TransferDirection};
use polypath_sim::{
    AgentFactory, AgentId, BuildContext, Datagram, Hooks, RunOptions, SimError, SimTime,
    StopReason, Summary, UdpPair,
};
use serde::Serialize;

use crate::error::EmuError;
use crate::feed::Feed;
use crate::ns::{self, RunLock};
use crate::packet;
use crate::procs::{Proc, ProcessReport, Role};
use crate::rt::{self, Classifier, Lateness, LatenessReport, Outbox, Tap};
use crate::testbed;
use crate::udpgen;

/// Most hosts a scenario may have in the emulator (one namespace each).
pub const MAX_HOSTS: usize = 64;
/// Lateness (p99) above which a run is reported as overloaded, µs.
const OVERLOAD_P99_US: f64 = 1000.0;
/// Engine CPU share above which a run is reported as overloaded.
const OVERLOAD_CPU: f64 = 0.9;
/// How often processes, feeds and the end of the run are checked, ns.
const HOUSEKEEPING_NS: u64 = 5_000_000;

/// Options of one emulation.
#[derive(Debug, Clone, Default)]
pub struct EmuOptions {
    /// Seed; the scenario's `sim.seed` when `None`.
    pub seed: Option<u64>,
    /// Where the outputs go (created if missing); a temporary folder, removed at the end,
    /// when `None`.
    pub out_dir: Option<PathBuf>,
    /// Write the radio event stream here (JSON lines), as the simulator does.
    pub events: Option<PathBuf>,
    /// Write what each host interface sent and received as pcap files in `out/pcap/`.
    pub pcap: bool,
    /// Print progress to stderr once a second.
    pub progress: bool,
    /// The `polypath` binary for `quic` flows and `{polypath}`; this process's own
    /// executable when `None`.
    pub polypath_bin: Option<PathBuf>,
}

/// What the emulator measured of itself.
#[derive(Debug, Clone, Serialize)]
pub struct Realtime {
    /// Wall-clock seconds the run took.
    pub wall_s: f64,
    /// How late packets were written to their host, against the model's schedule.
    pub lateness: LatenessReport,
    /// The engine thread's CPU time over the wall time.
    pub engine_cpu_share: f64,
    /// Whether the engine ran with real-time priority (SCHED_FIFO).
    pub realtime_priority: bool,
    /// Packets read from the hosts.
    pub packets_in: u64,
    /// Packets written to the hosts.
    pub packets_out: u64,
    /// Packets a host's device refused (its queue full).
    pub packets_refused: u64,
    /// Link events written to at least one feed reader.
    pub feed_events: u64,
    /// Link events produced while no process on their host listened.
    pub feed_events_unheard: u64,
    /// True when the machine could not keep up: the results of this run are not to be
    /// trusted as an emulation of the scenario.
    pub overloaded: bool,
    /// Why, in words.
    pub warnings: Vec<String>,
}

/// `summary.json` of an emulation: the simulator's summary of the same model, what the
/// emulator measured of itself, and the processes it ran.
#[derive(Debug, Clone, Serialize)]
pub struct EmuSummary {
    /// The model's summary, as `polypath sim run` writes it.
    #[serde(flatten)]
    pub sim: Summary,
    /// The emulator's own figures.
    pub realtime: Realtime,
    /// Every process started.
    pub processes: Vec<ProcessReport>,
}

/// What a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct EmuReport {
    /// The summary (also in `summary.json`).
    #[serde(flatten)]
    pub summary: EmuSummary,
    /// SHA-256 over the output files (not reproducible: the emulation runs in real time).
    pub output_hash: String,
    /// The output folder, when one was asked for.
    pub out_dir: Option<PathBuf>,
}

/// Loads `scenario_path` and emulates it.
pub fn run(scenario_path: &Path, opts: &EmuOptions) -> Result<EmuReport, EmuError> {
    let scenario = Scenario::load(scenario_path)?;
    run_scenario(&scenario, opts)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the SIGINT / SIGTERM handlers for the run; restores the previous ones on drop.
struct SignalGuard {
    old: [libc::sighandler_t; 2],
}

impl SignalGuard {
    fn install() -> SignalGuard {
        INTERRUPTED.store(false, Ordering::SeqCst);
        let h = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only stores to an atomic.
        let old = unsafe {
            [
                libc::signal(libc::SIGINT, h),
                libc::signal(libc::SIGTERM, h),
            ]
        };
        SignalGuard { old }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        // SAFETY: restoring the handlers we replaced.
        unsafe {
            libc::signal(libc::SIGINT, self.old[0]);
            libc::signal(libc::SIGTERM, self.old[1]);
        }
    }
}

/// Refuses what the emulator cannot honour, naming the file, line and field.
fn check(scenario: &Scenario) -> Result<(), EmuError> {
    if scenario.hosts.len() > MAX_HOSTS {
        return Err(scenario
            .error_at(
                "host",
                format!(
                    "the emulator runs one network namespace per host and takes at most \
                     {MAX_HOSTS} hosts; this scenario has {} (use the simulator)",
                    scenario.hosts.len()
                ),
            )
            .into());
    }
    for (i, l) in scenario.links.iter().enumerate() {
        for (d, dir) in [("up", &l.up), ("down", &l.down)] {
            if matches!(dir.rate, RateModel::External { .. }) {
                return Err(scenario
                    .error_at(
                        &format!("link[{i}].rate"),
                        format!(
                            "link `{}` ({d}) takes its rate from an external source, which \
                             the emulator has no way to supply",
                            l.name
                        ),
                    )
                    .into());
            }
        }
    }
    for (i, f) in scenario.flows.iter().enumerate() {
        if let FlowKind::Quic(q) = &f.kind {
            quic_args(scenario, i, q)?;
        }
    }
    Ok(())
}

/// The policy and option flags of a `quic` flow for `polypath client` (`client = true`)
/// and `polypath server`, or the error naming what the CLI cannot do.
fn quic_args(scenario: &Scenario, i: usize, q: &QuicFlow) -> Result<QuicArgs, EmuError> {
    let refuse = |field: &str, why: String| -> EmuError {
        scenario.error_at(&format!("flow[{i}].{field}"), why).into()
    };
    if q.stack != "polypath" {
        return Err(refuse(
            "stack",
            format!("the emulator runs the polypath binary, not `{}`", q.stack),
        ));
    }
    if q.transactions.is_some() {
        return Err(refuse(
            "request_size",
            "the emulator runs `polypath client`, which makes bulk transfers only".into(),
        ));
    }
    // `polypath client` and `server` take the simulator's policy names (one registry); the
    // command lines carry each policy's own name, whatever alias the scenario used.
    fn canonical<F: ?Sized, X>(
        list: &'static [registry::Policy<F, X>],
        name: &str,
    ) -> Result<String, String> {
        registry::find(list, name)
            .map(|p| p.name.to_string())
            .ok_or_else(|| format!("unknown name `{name}`; known: {}", registry::known(list)))
    }
    let mut common = vec![
        "--scheduler".to_string(),
        canonical(registry::SCHEDULERS, &q.scheduler).map_err(|e| refuse("scheduler", e))?,
        "--cc".into(),
        canonical(registry::CONGESTION_CONTROLLERS, &q.cc).map_err(|e| refuse("cc", e))?,
        "--path-manager".into(),
        canonical(registry::PATH_MANAGERS, &q.path_manager)
            .map_err(|e| refuse("path_manager", e))?,
    ];
    if let Some(rate) = q.rate {
        // The sending side applies it: the client on an upload, the server on a download.
        common.extend(["--rate".to_string(), format!("{rate}bit/s")]);
    }
    if let Some(size) = q.message_size {
        common.extend(["--message-size".to_string(), size.to_string()]);
    }
    let mut client = Vec::new();
    let mut qlog = false;
    for (key, value) in &q.options {
        let field = format!("options.{key}");
        match key.as_str() {
            "qlog" => qlog = value.as_bool().unwrap_or(false),
            "initial_paths" => {
                let v = value.as_str().unwrap_or("");
                client.extend(["--initial-paths".to_string(), v.to_string()]);
            }
            "scheduler" => {
                let weights = value
                    .as_table()
                    .and_then(|t| match (t.len(), t.get("weights")) {
                        (1, Some(w)) => w.as_str(),
                        _ => None,
                    });
                let Some(w) = weights else {
                    return Err(refuse(
                        &field,
                        "the emulator passes only `{ weights = \"...\" }` to polypath \
                         (--weights)"
                            .into(),
                    ));
                };
                common.extend(["--weights".to_string(), w.to_string()]);
            }
            "path_manager" => {
                let Some(t) = value.as_table() else {
                    return Err(refuse(&field, "expected a table of parameters".into()));
                };
                for (k, v) in t {
                    let v = v
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string());
                    common.extend(["--path-manager-param".to_string(), format!("{k}={v}")]);
                }
            }
            "scheduler_changes" => {
                let Some(list) = value.as_array() else {
                    return Err(refuse(&field, "expected a list of changes".into()));
                };
                for (k, c) in list.iter().enumerate() {
                    let t = c.as_table();
                    let at = t.and_then(|t| t.get("at")).and_then(|v| v.as_str());
                    let w = t.and_then(|t| t.get("weights")).and_then(|v| v.as_str());
                    match (at, w, t.map(|t| t.len())) {
                        (Some(at), Some(w), Some(2)) => {
                            common.extend(["--weights-at".to_string(), format!("{at}={w}")]);
                        }
                        _ => {
                            return Err(refuse(
                                &format!("{field}[{k}]"),
                                "the emulator passes only `{ at, weights }` changes to \
                                 polypath (--weights-at)"
                                    .into(),
                            ));
                        }
                    }
                }
            }
            _ => {
                return Err(refuse(
                    &field,
                    format!("`{key}` has no counterpart in `polypath client`/`server`"),
                ));
            }
        }
    }
    Ok(QuicArgs {
        common,
        client,
        qlog,
    })
}

struct QuicArgs {
    common: Vec<String>,
    client: Vec<String>,
    qlog: bool,
}

/// What one flow instance needs once the testbed exists.
enum Plan {
    Quic {
        flow: usize,
        instance: u32,
        from: usize,
        to: usize,
        port: u16,
        paths: Vec<(IpAddr, IpAddr)>,
        q: QuicFlow,
        start: u64,
        stop: Option<u64>,
        app: Arc<udpgen::Shared>,
    },
    Udp {
        from: usize,
        to: usize,
        pair: UdpPair,
        sender: Arc<udpgen::Shared>,
        receiver: Arc<udpgen::Shared>,
    },
    Command {
        flow: usize,
        instance: u32,
        from: usize,
        to: usize,
        command: String,
        paths: Vec<(IpAddr, IpAddr)>,
        start: u64,
        stop: Option<u64>,
    },
    Tcp {
        flow: usize,
        instance: u32,
        from: usize,
        to: usize,
        port: u16,
        paths: Vec<(IpAddr, IpAddr)>,
        t: TcpFlow,
        start: u64,
        stop: Option<u64>,
    },
}

/// Builds the taps of every flow instance and records what to start.
struct EmuFactory {
    outbox: Rc<RefCell<Outbox>>,
    plans: Vec<Plan>,
    taps: Vec<(u32, u16, AgentId)>,
    /// (host, port) pairs the QUIC servers and TCP receivers listen on.
    servers: BTreeSet<(usize, u16)>,
}

impl EmuFactory {
    /// The first port from `first` up that no server or receiver uses on `host` yet,
    /// taken.
    fn server_port(&mut self, host: usize, first: u16) -> Result<u16, SimError> {
        let mut port = first;
        while self.servers.contains(&(host, port)) {
            port = port
                .checked_add(1)
                .ok_or_else(|| SimError::Build(format!("host #{host} ran out of ports")))?;
        }
        self.servers.insert((host, port));
        Ok(port)
    }

    fn tap(
        &mut self,
        ctx: &mut BuildContext<'_>,
        host: usize,
        port: u16,
        flow: usize,
        instance: u32,
        app: Option<Arc<udpgen::Shared>>,
    ) -> Result<(), SimError> {
        let id = ctx.add_raw_agent(
            host,
            flow,
            instance,
            Box::new(Tap {
                host: host as u32,
                outbox: self.outbox.clone(),
                app,
                feeds_events: false,
            }),
            false,
        )?;
        self.taps.push((host as u32, port, id));
        Ok(())
    }
}

fn nanos(d: std::time::Duration) -> u64 {
    SimTime::from_duration(d).as_nanos()
}

impl AgentFactory for EmuFactory {
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
        let Some(inst) = f.instances.get(instance) else {
            return Ok(false);
        };
        let paths: Vec<(IpAddr, IpAddr)> = inst.paths.iter().map(|p| (p.local, p.remote)).collect();
        let (from, to, idx) = (inst.from, inst.to, inst.index);
        let start = nanos(inst.start);
        let stop = inst.stop.map(nanos);
        match &f.kind {
            FlowKind::Quic(q) => {
                let port = self.server_port(to, q.port)?;
                let app = Arc::new(udpgen::Shared::default());
                self.tap(ctx, from, port, flow, idx, Some(app.clone()))?;
                self.tap(ctx, to, port, flow, idx, None)?;
                self.plans.push(Plan::Quic {
                    flow,
                    instance: idx,
                    from,
                    to,
                    port,
                    paths,
                    q: q.clone(),
                    start,
                    stop,
                    app,
                });
            }
            FlowKind::Tcp(t) => {
                let port = self.server_port(to, t.port)?;
                self.tap(ctx, from, port, flow, idx, None)?;
                self.tap(ctx, to, port, flow, idx, None)?;
                self.plans.push(Plan::Tcp {
                    flow,
                    instance: idx,
                    from,
                    to,
                    port,
                    paths,
                    t: t.clone(),
                    start,
                    stop,
                });
            }
            FlowKind::Command(c) => {
                let port = c.port.unwrap_or(0);
                self.tap(ctx, from, port, flow, idx, None)?;
                if to != from {
                    self.tap(ctx, to, port, flow, idx, None)?;
                }
                self.plans.push(Plan::Command {
                    flow,
                    instance: idx,
                    from,
                    to,
                    command: c.command.clone(),
                    paths,
                    start,
                    stop,
                });
            }
            _ => {
                let Some(pair) = polypath_sim::udp_agents(ctx, flow, instance)? else {
                    return Ok(false);
                };
                let sender = Arc::new(udpgen::Shared::default());
                let receiver = Arc::new(udpgen::Shared::default());
                self.tap(ctx, from, pair.sender_port, flow, idx, Some(sender.clone()))?;
                self.tap(
                    ctx,
                    to,
                    pair.receiver_port,
                    flow,
                    idx,
                    Some(receiver.clone()),
                )?;
                self.plans.push(Plan::Udp {
                    from,
                    to,
                    pair,
                    sender,
                    receiver,
                });
            }
        }
        Ok(true)
    }
}

/// Replaces the placeholders of a command line; `{{` and `}}` stand for literal braces
/// (an awk program, a JSON argument).
fn substitute(
    scenario: &Scenario,
    field: &str,
    text: &str,
    vars: &[(&str, String)],
) -> Result<String, EmuError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find(['{', '}']) {
        let (before, from) = rest.split_at(open);
        out.push_str(before);
        if let Some(after) = from.strip_prefix("{{").or_else(|| from.strip_prefix("}}")) {
            out.push_str(&from[..1]);
            rest = after;
            continue;
        }
        if from.starts_with('}') {
            return Err(scenario
                .error_at(
                    field,
                    "a `}` without its `{` (write `}}` for a literal one)",
                )
                .into());
        }
        let Some(close) = rest[open..].find('}') else {
            return Err(scenario.error_at(field, "a `{` without its `}`").into());
        };
        let name = &rest[open + 1..open + close];
        let value = if let Some(spec) = name.strip_prefix("addr:") {
            let (host, iface) = match spec.split_once('.') {
                Some((h, i)) => (h, Some(i)),
                None => (spec, None),
            };
            let h = scenario.hosts.iter().find(|h| h.name == host);
            let addr = h.and_then(|h| match iface {
                Some(i) => h.interfaces.iter().find(|x| x.name == i).map(|x| x.addr),
                None => h.interfaces.first().map(|x| x.addr),
            });
            addr.map(|a| a.to_string()).ok_or_else(|| {
                EmuError::from(
                    scenario.error_at(field, format!("`{{{name}}}`: no such host or interface")),
                )
            })?
        } else {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| {
                    EmuError::from(scenario.error_at(
                        field,
                        format!(
                            "unknown placeholder `{{{name}}}` (known: {{out}}, {{dir}}, \
                             {{from}}, {{to}}, {{local}}, {{remote}}, {{polypath}}, \
                             {{addr:HOST}}, {{addr:HOST.IFACE}})"
                        ),
                    ))
                })?
        };
        out.push_str(&value);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A pcap file (raw IP link type, nanosecond timestamps).
struct Pcap {
    out: BufWriter<File>,
}

impl Pcap {
    fn create(path: &Path) -> Result<Pcap, EmuError> {
        let f = File::create(path).map_err(|e| EmuError::io(path, e))?;
        let mut out = BufWriter::new(f);
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&65535u32.to_le_bytes());
        h.extend_from_slice(&101u32.to_le_bytes());
        out.write_all(&h).map_err(|e| EmuError::io(path, e))?;
        Ok(Pcap { out })
    }

    fn write(&mut self, t_ns: u64, packet: &[u8]) {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((t_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((t_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(packet.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(packet.len() as u32).to_le_bytes());
        let _ = self.out.write_all(&h);
        let _ = self.out.write_all(packet);
    }
}

/// Emulates a loaded scenario.
pub fn run_scenario(scenario: &Scenario, opts: &EmuOptions) -> Result<EmuReport, EmuError> {
    ns::available().map_err(EmuError::Setup)?;
    check(scenario)?;
    // From here on SIGINT / SIGTERM end the run through the loop (at its first check,
    // if they come during the setup), so everything below is removed.
    let _signals = SignalGuard::install();
    // What killed runs left behind.
    ns::clean()?;
    let lock = RunLock::acquire()?;
    let out_dir = opts.out_dir.clone();
    let work = out_dir.clone().unwrap_or_else(|| lock.dir.join("out"));
    let procs_dir = work.join("procs");
    std::fs::create_dir_all(&procs_dir).map_err(|e| EmuError::io(&procs_dir, e))?;
    let polypath = match &opts.polypath_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| EmuError::Setup(format!("cannot find the polypath binary: {e}")))?,
    };

    // The model, with a tap per flow end instead of the simulator's agents.
    let outbox = Rc::new(RefCell::new(Outbox::default()));
    let mut factory = EmuFactory {
        outbox: outbox.clone(),
        plans: Vec::new(),
        taps: Vec::new(),
        servers: BTreeSet::new(),
    };
    let sim_opts = RunOptions {
        seed: opts.seed,
        out_dir: out_dir.clone(),
        progress: false,
        events: opts.events.clone(),
    };
    let mut sim = polypath_sim::prepare(
        scenario,
        &sim_opts,
        Hooks {
            agents: Some(&mut factory),
            sources: Vec::new(),
        },
    )?;
    sim.set_stop_when_done(false);
    let mut other_name = "other".to_string();
    while scenario.flows.iter().any(|f| f.name == other_name) {
        other_name.insert(0, '_');
    }
    let other = sim.add_flow(&other_name, "other");
    let mut catch_all = Vec::with_capacity(scenario.hosts.len());
    for h in 0..scenario.hosts.len() {
        catch_all.push(sim.add_raw_agent(
            h,
            other,
            0,
            Box::new(Tap {
                host: h as u32,
                outbox: outbox.clone(),
                app: None,
                feeds_events: true,
            }),
            true,
        )?);
    }
    let mut classifier = Classifier::new(catch_all);
    for (h, p, id) in &factory.taps {
        classifier.add(*h, *p, *id);
    }

    // The testbed.
    let hosts = testbed::build(scenario, &lock, 1500)?;
    testbed::setup_mptcp(scenario, &hosts)?;
    let mut feeds = Vec::with_capacity(hosts.len());
    for (i, _) in hosts.iter().enumerate() {
        feeds.push(Feed::bind(&lock.dir.join(format!("h{i}.sock")))?);
    }
    let mut pcaps: Vec<Vec<Option<(Pcap, Pcap)>>> = Vec::new();
    if opts.pcap {
        let dir = work.join("pcap");
        std::fs::create_dir_all(&dir).map_err(|e| EmuError::io(&dir, e))?;
        for h in &hosts {
            let mut v = Vec::new();
            for i in &h.ifaces {
                v.push(match i {
                    Some(i) => Some((
                        Pcap::create(&dir.join(format!("{}-{}-tx.pcap", h.name, i.dev)))?,
                        Pcap::create(&dir.join(format!("{}-{}-rx.pcap", h.name, i.dev)))?,
                    )),
                    None => None,
                });
            }
            pcaps.push(v);
        }
    }

    // Processes and generators.
    let t0 = Instant::now();
    let epoch_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(nanos)
        .unwrap_or(0);
    let stop_gens = Arc::new(AtomicBool::new(false));
    let mut procs: Vec<Proc> = Vec::new();
    let mut gens: Vec<(Arc<udpgen::Shared>, std::thread::JoinHandle<()>)> = Vec::new();
    let out_abs = std::fs::canonicalize(&work).unwrap_or(work.clone());
    // `{dir}`: the scenario file's folder, for files that come with the scenario.
    let scenario_dir = scenario
        .file
        .parent()
        .map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        })
        .and_then(|d| std::fs::canonicalize(d).ok())
        .unwrap_or_else(|| PathBuf::from("."));
    // A process of flow `flow`'s `instance` on host `host`, with that host's link-event
    // feed; `command` is how the report shows it, `log` its log files' stem.
    let process = |(flow, instance): (usize, u32),
                   role: Role,
                   host: usize,
                   argv: Vec<String>,
                   command: String,
                   log: &str,
                   (start, stop): (u64, Option<u64>)| {
        Proc::new(
            ProcessReport::planned(
                &scenario.flows[flow].name,
                instance,
                role,
                &scenario.hosts[host].name,
                command,
                log,
            ),
            argv,
            vec![(FEED_ENV.to_string(), feeds[host].path.display().to_string())],
            hosts[host].ns.raw_fd(),
            start,
            stop,
        )
    };
    for plan in std::mem::take(&mut factory.plans) {
        match plan {
            Plan::Udp {
                from,
                to,
                pair,
                sender,
                receiver,
            } => {
                let addrs = |h: usize| -> Vec<IpAddr> {
                    hosts[h].ifaces.iter().flatten().map(|i| i.addr).collect()
                };
                let r = udpgen::spawn(
                    udpgen::Generator {
                        ns_fd: hosts[to].ns.raw_fd(),
                        addrs: addrs(to),
                        port: pair.receiver_port,
                        agent: pair.receiver,
                        sender: false,
                    },
                    t0,
                    stop_gens.clone(),
                    receiver.clone(),
                );
                gens.push((receiver, r));
                let s = udpgen::spawn(
                    udpgen::Generator {
                        ns_fd: hosts[from].ns.raw_fd(),
                        addrs: addrs(from),
                        port: pair.sender_port,
                        agent: pair.sender,
                        sender: true,
                    },
                    t0,
                    stop_gens.clone(),
                    sender.clone(),
                );
                gens.push((sender, s));
            }
            Plan::Command {
                flow,
                instance,
                from,
                to,
                command,
                paths,
                start,
                stop,
            } => {
                let f = &scenario.flows[flow];
                let vars = [
                    ("out", out_abs.display().to_string()),
                    ("from", scenario.hosts[from].name.clone()),
                    ("to", scenario.hosts[to].name.clone()),
                    (
                        "local",
                        paths.first().map(|p| p.0.to_string()).unwrap_or_default(),
                    ),
                    (
                        "remote",
                        paths.first().map(|p| p.1.to_string()).unwrap_or_default(),
                    ),
                    ("polypath", polypath.display().to_string()),
                    ("dir", scenario_dir.display().to_string()),
                ];
                let line = substitute(scenario, &format!("flow[{flow}].command"), &command, &vars)?;
                let stem = procs_dir.join(format!("{}-{instance}", f.name));
                procs.push(process(
                    (flow, instance),
                    Role::Command,
                    from,
                    vec!["sh".into(), "-c".into(), line.clone()],
                    line,
                    &stem.display().to_string(),
                    (start, stop),
                ));
            }
            Plan::Tcp {
                flow,
                instance,
                from,
                to,
                port,
                paths,
                t,
                start,
                stop,
            } => {
                let f = &scenario.flows[flow];
                let stem = procs_dir.join(format!("{}-{instance}", f.name));
                let (argv_recv, argv_send) = tcp_args(&polypath, port, &paths, &t, start, stop);
                let log = |suffix: &str| format!("{}-{suffix}", stem.display());
                let receiver = process(
                    (flow, instance),
                    Role::TcpReceiver,
                    to,
                    argv_recv.clone(),
                    argv_recv.join(" "),
                    &log("recv"),
                    (0, None),
                );
                // Without `bytes` the sender stops itself at the stop time (`--time`) and
                // waits for the receiver to read everything, so both report; with `bytes`
                // the stop time ends it, and without either it runs until the end.
                let sender = process(
                    (flow, instance),
                    Role::TcpSender,
                    from,
                    argv_send.clone(),
                    argv_send.join(" "),
                    &log("send"),
                    (start, stop.filter(|_| t.bytes.is_some())),
                );
                push_listener_and_peer(&mut procs, receiver, sender);
            }
            Plan::Quic {
                flow,
                instance,
                from,
                to,
                port,
                paths,
                q,
                start,
                stop,
                app,
            } => {
                let f = &scenario.flows[flow];
                let args = quic_args(scenario, flow, &q)?;
                let stem = procs_dir.join(format!("{}-{instance}", f.name));
                let cert = format!("{}-cert.pem", stem.display());
                let bin = polypath.display().to_string();
                let mut server = vec![
                    bin.clone(),
                    "server".into(),
                    "--listen".into(),
                    SocketAddr::new(unspecified(paths.first().map(|p| p.1)), port).to_string(),
                    "--cert-out".into(),
                    cert.clone(),
                    "--once".into(),
                ];
                server.extend(args.common.iter().cloned());
                let mut client = vec![
                    bin,
                    "client".into(),
                    "--connect".into(),
                    SocketAddr::new(
                        paths
                            .first()
                            .map(|p| p.1)
                            .unwrap_or(IpAddr::from([0, 0, 0, 0])),
                        port,
                    )
                    .to_string(),
                    "--pin".into(),
                    cert,
                    "--size".into(),
                    q.bytes.to_string(),
                ];
                if q.direction == TransferDirection::Download {
                    client.push("--download".into());
                }
                for (local, _) in &paths {
                    client.extend([
                        "--local".to_string(),
                        SocketAddr::new(*local, 0).to_string(),
                    ]);
                }
                // Each further path goes to the server's address on its own link, as in
                // the simulator.
                for (_, remote) in paths.iter().skip(1) {
                    client.extend([
                        "--remote".to_string(),
                        SocketAddr::new(*remote, port).to_string(),
                    ]);
                }
                client.extend(args.common.iter().cloned());
                client.extend(args.client.iter().cloned());
                if args.qlog {
                    let qlog = out_abs.join("qlog");
                    client.extend(["--qlog".to_string(), qlog.display().to_string()]);
                    server.extend(["--qlog".to_string(), qlog.display().to_string()]);
                }
                let log = |suffix: &str| format!("{}-{suffix}", stem.display());
                let server = process(
                    (flow, instance),
                    Role::QuicServer,
                    to,
                    server.clone(),
                    server.join(" "),
                    &log("server"),
                    (0, None),
                );
                let client = process(
                    (flow, instance),
                    Role::QuicClient,
                    from,
                    client.clone(),
                    client.join(" "),
                    &log("client"),
                    (start, stop),
                );
                push_listener_and_peer(&mut procs, server, client).app = Some((app, q.bytes));
            }
        }
    }

    // The loop.
    let realtime_priority = rt::tune_thread(true);
    let cpu0 = rt::thread_cpu_s();
    let ns_now = || nanos(t0.elapsed());
    sim.start();
    let mut lateness = Lateness::new();
    let (mut packets_in, mut packets_out, mut refused) = (0u64, 0u64, 0u64);
    let mut buf = vec![0u8; 65536];
    let mut next_housekeeping = 0u64;
    let mut next_progress = 1_000_000_000u64;
    let mut pfds: Vec<libc::pollfd> = hosts
        .iter()
        .flat_map(|h| h.ifaces.iter().flatten())
        .map(|i| libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&i.tun),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let finite = procs.iter().filter(|p| !p.is_daemon()).count() + gens.len() / 2;
    let mut stopped_by: Option<String> = None;
    let mut loop_error: Option<EmuError> = None;
    let stop_reason = 'run: loop {
        let now = ns_now();
        match sim.advance(now) {
            Ok(Some(r)) => {
                stopped_by = Some("duration".into());
                break 'run r;
            }
            Ok(None) => {}
            Err(e) => {
                loop_error = Some(e.into());
                break 'run StopReason::Idle;
            }
        }
        // Deliveries and link events.
        let mut ob = outbox.borrow_mut();
        if !ob.deliveries.is_empty() {
            for d in ob.deliveries.drain(..) {
                let Some(h) = hosts.get(d.host as usize) else {
                    continue;
                };
                let Some((k, iface)) = h.iface_for(d.dst) else {
                    continue;
                };
                match rt::write_packet(&iface.tun, &d.packet) {
                    Ok(true) => {
                        let w = ns_now();
                        lateness.add(w.saturating_sub(d.due));
                        packets_out += 1;
                        if let Some(Some((_, rx))) =
                            pcaps.get_mut(d.host as usize).and_then(|v| v.get_mut(k))
                        {
                            rx.write(epoch_ns + w, &d.packet);
                        }
                    }
                    Ok(false) => refused += 1,
                    Err(e) => {
                        loop_error = Some(EmuError::Setup(format!(
                            "writing to {} of host `{}`: {e}",
                            iface.dev, h.name
                        )));
                        break 'run StopReason::Idle;
                    }
                }
            }
        }
        for (host, ev) in ob.events.drain(..) {
            if let Some(f) = feeds.get_mut(host as usize) {
                f.send(&ev);
            }
        }
        drop(ob);
        // Packets the hosts sent: one poll tells which devices have any, so a run with
        // many hosts does not spend a read on every idle device each time round.
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: pfds is a valid array of pollfd for its length.
        unsafe {
            libc::ppoll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                &zero,
                std::ptr::null(),
            );
        }
        let mut got = 0usize;
        let mut fd_index = 0usize;
        for (hi, h) in hosts.iter().enumerate() {
            for (k, iface) in h.ifaces.iter().enumerate() {
                let Some(iface) = iface else { continue };
                let ready = pfds.get(fd_index).is_none_or(|p| p.revents != 0);
                fd_index += 1;
                if !ready {
                    continue;
                }
                let mut pcap = pcaps
                    .get_mut(hi)
                    .and_then(|v| v.get_mut(k))
                    .and_then(Option::as_mut);
                let read = rt::read_packets(&iface.tun, &mut buf, 64, |pkt| {
                    let Some(hd) = packet::parse(pkt) else {
                        return;
                    };
                    let t = ns_now();
                    if let Err(e) = sim.advance(t) {
                        loop_error.get_or_insert(e.into());
                        return;
                    }
                    if let Some((tx, _)) = pcap.as_mut() {
                        tx.write(epoch_ns + t, pkt);
                    }
                    if let Some(tap) = classifier.tap(hi as u32, hd.src, hd.dst) {
                        sim.inject(
                            tap,
                            Datagram {
                                src: hd.src,
                                dst: hd.dst,
                                payload: bytes::Bytes::copy_from_slice(pkt),
                            },
                        );
                    }
                });
                match read {
                    Ok(n) => got += n,
                    Err(e) => {
                        loop_error = Some(EmuError::Setup(format!(
                            "reading from {} of host `{}`: {e}",
                            iface.dev, h.name
                        )));
                        break 'run StopReason::Idle;
                    }
                }
            }
        }
        packets_in += got as u64;
        if loop_error.is_some() {
            break 'run StopReason::Idle;
        }
        let now = ns_now();
        if now >= next_housekeeping {
            next_housekeeping = now + HOUSEKEEPING_NS;
            for k in 0..procs.len() {
                // A client whose server ended before it was ready never starts.
                let orphan = procs[k]
                    .after
                    .as_ref()
                    .is_some_and(|(_, server)| procs.get(*server).is_some_and(|s| s.finished));
                let p = &mut procs[k];
                if orphan && p.report.started_s.is_none() {
                    p.finished = true;
                    continue;
                }
                if let Err(e) = p.poll(now) {
                    loop_error = Some(e);
                    break 'run StopReason::Idle;
                }
            }
            for f in &mut feeds {
                f.poll();
            }
            if INTERRUPTED.load(Ordering::SeqCst) {
                stopped_by = Some("interrupted".into());
                break 'run StopReason::Done;
            }
            let finished = procs
                .iter()
                .filter(|p| !p.is_daemon() && p.finished)
                .count()
                + gens
                    .iter()
                    .skip(1)
                    .step_by(2)
                    .filter(|g| g.0.done.load(Ordering::Relaxed))
                    .count();
            if scenario.sim.stop_when_done && finite > 0 && finished == finite {
                stopped_by = Some("done".into());
                break 'run StopReason::Done;
            }
            if opts.progress && now >= next_progress {
                next_progress += 1_000_000_000;
                let l = lateness.report();
                eprintln!(
                    "emu: {:.0}/{:.0} s, {} packets in, {} out, late p99 {:.0} us, max {:.0} us",
                    now as f64 / 1e9,
                    scenario.sim.duration.as_secs_f64(),
                    packets_in,
                    packets_out,
                    l.p99_us,
                    l.max_us
                );
            }
        }
        if got > 0 {
            continue;
        }
        // Sleep until the next event, a packet, or the next housekeeping.
        let now = ns_now();
        let until = sim
            .next_event_at()
            .unwrap_or(u64::MAX)
            .min(next_housekeeping);
        let wait = until.saturating_sub(now);
        if wait == 0 {
            continue;
        }
        let ts = libc::timespec {
            tv_sec: (wait / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: pfds is a valid array of pollfd for its length.
        unsafe {
            libc::ppoll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            );
        }
    };
    let wall = t0.elapsed().as_secs_f64();
    let cpu = rt::thread_cpu_s() - cpu0;
    // SAFETY: back to normal scheduling for the rest of this thread's life.
    unsafe {
        let p = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_OTHER, &p);
    }
    let end = ns_now();
    for p in &mut procs {
        p.kill_and_reap(end);
    }
    stop_gens.store(true, Ordering::SeqCst);
    for (_, g) in gens {
        let _ = g.join();
    }
    if let Some(e) = loop_error {
        return Err(e);
    }
    // Client completions, as records of the flow's tap.
    for p in &procs {
        p.record_completion();
    }
    // Let the taps report them: one more sample.
    sim.finish()?;
    let mut summary = sim.summary(stop_reason);
    // Why the run ended: `duration`, `done` (every process and generator finished) or
    // `interrupted` (SIGINT / SIGTERM).
    summary.stopped_by = stopped_by.unwrap_or_else(|| "duration".into());
    let lat = lateness.report();
    let mut warnings = Vec::new();
    let share = if wall > 0.0 { cpu / wall } else { 0.0 };
    if lat.p99_us > OVERLOAD_P99_US {
        warnings.push(format!(
            "packets reached their host up to {:.0} us late at the 99th percentile (max {:.0} \
             us): the machine could not keep up with the model's schedule",
            lat.p99_us, lat.max_us
        ));
    }
    if share > OVERLOAD_CPU {
        warnings.push(format!(
            "the engine used {:.0} % of a core: it was the bottleneck",
            share * 100.0
        ));
    }
    if refused > 0 {
        warnings.push(format!(
            "{refused} packets were refused by a host's device queue"
        ));
    }
    for w in &warnings {
        eprintln!("emu: warning: {w}");
    }
    let realtime = Realtime {
        wall_s: wall,
        lateness: lat,
        engine_cpu_share: share,
        realtime_priority,
        packets_in,
        packets_out,
        packets_refused: refused,
        feed_events: feeds.iter().map(|f| f.delivered).sum(),
        feed_events_unheard: feeds.iter().map(|f| f.unheard).sum(),
        overloaded: !warnings.is_empty(),
        warnings,
    };
    let emu_summary = EmuSummary {
        sim: summary,
        realtime,
        processes: procs.iter().map(|p| p.report.clone()).collect(),
    };
    let (output_hash, _) = polypath_sim::write_outputs(&mut sim, out_dir.as_deref(), &emu_summary)?;
    drop(pcaps);
    drop(feeds);
    drop(hosts);
    drop(lock);
    Ok(EmuReport {
        summary: emu_summary,
        output_hash,
        out_dir,
    })
}

/// The command lines of a `tcp` flow instance's receiver (on all addresses of `to`, port
/// `port`) and sender (from the first path's local address to its remote one; MPTCP opens
/// the other subflows through the kernel's path manager).
fn tcp_args(
    polypath: &Path,
    port: u16,
    paths: &[(IpAddr, IpAddr)],
    t: &TcpFlow,
    start: u64,
    stop: Option<u64>,
) -> (Vec<String>, Vec<String>) {
    let bin = polypath.display().to_string();
    let first = paths.first().copied();
    let mut recv = vec![
        bin.clone(),
        "tcp".into(),
        "recv".into(),
        "--listen".into(),
        SocketAddr::new(unspecified(first.map(|p| p.1)), port).to_string(),
        "--once".into(),
        "--json".into(),
    ];
    let mut send = vec![
        bin,
        "tcp".into(),
        "send".into(),
        "--connect".into(),
        SocketAddr::new(first.map_or(IpAddr::from([0, 0, 0, 0]), |p| p.1), port).to_string(),
        "--interval".into(),
        "100ms".into(),
        "--json".into(),
    ];
    if let Some((local, _)) = first {
        send.extend(["--bind".to_string(), local.to_string()]);
    }
    if t.mptcp {
        recv.push("--mptcp".into());
        send.push("--mptcp".into());
    }
    if let Some(cc) = &t.cc {
        send.extend(["--cc".to_string(), cc.clone()]);
    }
    if let Some(rate) = t.rate {
        send.extend(["--rate".to_string(), format!("{rate}bit/s")]);
    }
    if let Some(size) = t.message_size {
        send.extend(["--message-size".to_string(), size.to_string()]);
    }
    match (t.bytes, stop) {
        (Some(b), _) => send.extend(["--bytes".to_string(), b.to_string()]),
        (None, Some(stop)) => {
            let secs = stop.saturating_sub(start) as f64 / 1e9;
            send.extend(["--time".to_string(), format!("{secs}s")]);
        }
        // Until the end of the run.
        (None, None) => send.extend(["--time".to_string(), "100000s".to_string()]),
    }
    (recv, send)
}

fn unspecified(like: Option<IpAddr>) -> IpAddr {
    match like {
        Some(IpAddr::V6(_)) => IpAddr::from([0u16; 8]),
        _ => IpAddr::from([0u8; 4]),
    }
}

/// Pushes a flow's listener and the peer that starts once the listener's first line of
/// output says it listens; returns the peer.
fn push_listener_and_peer(procs: &mut Vec<Proc>, listener: Proc, mut peer: Proc) -> &mut Proc {
    peer.after = Some((PathBuf::from(&listener.report.stdout), procs.len()));
    procs.push(listener);
    procs.push(peer);
    procs.last_mut().expect("the peer was just pushed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders() {
        let sc = Scenario::parse(
            r#"
[sim]
duration = "1s"
[[host]]
name = "a"
interfaces = [{ name = "x", addr = "10.0.0.1", link = "l", side = "a" }]
[[host]]
name = "b"
interfaces = [{ name = "y", addr = "10.0.0.2", link = "l", side = "b" }]
[[link]]
name = "l"
rate = "10Mbit/s"
"#,
            Path::new("t.toml"),
        )
        .unwrap();
        let vars = [("out", "/o".to_string())];
        assert_eq!(
            substitute(&sc, "f", "ping {addr:b} > {out}/x {addr:a.x}", &vars).unwrap(),
            "ping 10.0.0.2 > /o/x 10.0.0.1"
        );
        let e = substitute(&sc, "flow[0].command", "{nope}", &vars).unwrap_err();
        assert!(
            e.to_string().contains("unknown placeholder `{nope}`"),
            "{e}"
        );
        assert!(substitute(&sc, "f", "{addr:c}", &vars).is_err());
        assert!(substitute(&sc, "f", "{out", &vars).is_err());
        assert_eq!(
            substitute(
                &sc,
                "f",
                "awk '{{print $1}}' {out}/x --p 'b={{\"f\":1}}'",
                &vars
            )
            .unwrap(),
            "awk '{print $1}' /o/x --p 'b={\"f\":1}'"
        );
        let e = substitute(&sc, "f", "a } b", &vars).unwrap_err();
        assert!(e.to_string().contains("a `}` without its `{`"), "{e}");
    }
}
