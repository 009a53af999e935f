//! The M2HO daemon (Linux): the [`Controller`] between the kernel's TCP and the network
//! through NFQUEUE, fed with link-layer events.
//!
//! * **Rules.** At start the daemon removes what killed daemons left ([`clean`]), then
//!   installs iptables chains of its own (IPv4 and IPv6), `POLYPATH_M2HO_<pid>_OUT`
//!   (jumped to from `OUTPUT`) that sends every TCP packet the host sends to queue `Q`, and
//!   `..._IN` (from `INPUT`) that sends every one it receives to queue `Q + 1`, with
//!   `--queue-bypass`: while no daemon listens, packets pass. On exit (end of the duration,
//!   SIGINT, SIGTERM, an error) it removes them; a daemon killed with SIGKILL leaves them,
//!   and the next start or `polypath m2ho clean` removes them (the chains of a live daemon
//!   are left alone). iptables rather than nftables' own `queue` statement, which kernels
//!   without `nft_queue` refuse; Debian's iptables drives nf_tables underneath.
//! * **Packets.** Outbound packets are copied whole, may be rewritten (window) or dropped
//!   (suppressed duplicate ACK); inbound ones are copied up to their headers
//!   ([`INBOUND_COPY`] bytes) and always accepted unmodified. A packet the core cannot parse
//!   is accepted unmodified and counted. The daemon also sends packets of its own: the
//!   controller's window updates for connections stalled behind a retracted window
//!   ([`Config::reopen_stalled`]), through raw IP sockets, every 5 ms tick.
//! * **Link events** come from a JSON-lines source, one [`polypath_link::feed::FeedEvent`]
//!   (or bare [`polypath_link::LinkEvent`]) per line: the emulator's feed socket
//!   (`POLYPATH_LINK_EVENTS`), any Unix socket, a file or standard input. Each is applied
//!   when it is read, on the daemon's clock.
//! * **Outputs.** JSON statistics ([`DaemonReport`]): on exit, and every
//!   `stats_interval` to a file if asked; a per-packet CSV log on request.

use crate::buffer::BufferDb;
use crate::config::Config;
use crate::conn::Direction;
use crate::controller::{Controller, Stats, Verdict};
use crate::packet;
use polypath_link::feed::FeedEvent;
use serde::Serialize;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Prefix of the daemon's iptables chains; the daemon's pid and `_OUT` / `_IN` follow.
pub const CHAIN_PREFIX: &str = "POLYPATH_M2HO_";
/// Bytes of an inbound packet copied to the daemon: enough for an IPv6 header with an
/// extension header and a TCP header with options.
pub const INBOUND_COPY: u16 = 160;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// The iptables rules could not be installed, listed or removed.
    #[error("iptables: {0}")]
    Rules(String),
    /// NFQUEUE failed.
    #[error("NFQUEUE queue {queue}: {source}")]
    Queue {
        /// The queue number.
        queue: u16,
        /// The error.
        source: io::Error,
    },
    /// A file or socket failed.
    #[error("{path}: {source}")]
    Io {
        /// What was being read or written.
        path: String,
        /// The error.
        source: io::Error,
    },
}

fn io_err(path: impl AsRef<Path>) -> impl FnOnce(io::Error) -> DaemonError {
    let path = path.as_ref().display().to_string();
    move |source| DaemonError::Io { path, source }
}

/// Where link events come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventSource {
    /// A Unix stream socket serving JSON lines (the emulator's feed).
    Socket(PathBuf),
    /// A file (or FIFO) of JSON lines, read as it grows until its end.
    File(PathBuf),
    /// Standard input.
    Stdin,
}

/// Options of one daemon run.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The controller's parameters.
    pub config: Config,
    /// Outbound queue number; inbound packets use the next one.
    pub queue: u16,
    /// Link events; none: the controller sees packets only.
    pub events: Option<EventSource>,
    /// Apply only events of this UE interface (radio leg).
    pub iface: Option<u16>,
    /// Handle only packets from / to this address, and events about it (when they name one).
    pub local: Option<IpAddr>,
    /// Write the statistics here (atomically), every `stats_interval` and at exit.
    pub stats: Option<PathBuf>,
    /// How often the statistics file is rewritten.
    pub stats_interval: Duration,
    /// The local buffer database (M2HO Sec. 4.3): read at start (a missing file is an empty
    /// history), written every `stats_interval` and at exit with what the run learnt.
    pub buffer_db: Option<PathBuf>,
    /// Write a CSV line per packet here.
    pub csv: Option<PathBuf>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Called once the rules are installed and the queues bound.
    pub on_ready: Option<fn(&str)>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            config: Config::default(),
            queue: 4200,
            events: None,
            iface: None,
            local: None,
            stats: None,
            stats_interval: Duration::from_secs(1),
            buffer_db: None,
            csv: None,
            duration: None,
            on_ready: None,
        }
    }
}

/// What the link-event reader did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct FeedCounts {
    /// Lines read.
    pub lines: u64,
    /// Events applied.
    pub applied: u64,
    /// Events of another interface or address, ignored.
    pub filtered: u64,
    /// Lines that were not events (skipped; the first error is in `first_error`).
    pub skipped: u64,
}

/// What the queues did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct QueueCounts {
    /// Packets received from the kernel.
    pub packets: u64,
    /// Packets accepted unmodified.
    pub accepted: u64,
    /// Packets accepted with a rewritten window.
    pub rewritten: u64,
    /// Packets dropped (suppressed duplicate ACKs).
    pub dropped: u64,
    /// Packets the core could not parse (accepted unmodified).
    pub unparsed: u64,
    /// Verdicts the kernel refused.
    pub verdict_errors: u64,
    /// Receive errors other than interruptions.
    pub recv_errors: u64,
    /// Window updates sent for connections stalled behind a retracted window.
    pub window_updates_sent: u64,
    /// Window updates the raw socket refused (opening or sending).
    pub window_update_errors: u64,
}

/// Sends the controller's window updates as packets of the device's own (raw IP sockets
/// with the IP header included, one per family, opened on first use). They leave through
/// `OUTPUT` like the kernel's ACKs, so the daemon sees them in its queue too.
#[derive(Default)]
struct RawSender {
    v4: Option<socket2::Socket>,
    v6: Option<socket2::Socket>,
}

impl RawSender {
    fn send(&mut self, packet: &[u8]) -> io::Result<()> {
        let seg = packet::parse(packet)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let (slot, domain) = match seg.dst {
            IpAddr::V4(_) => (&mut self.v4, socket2::Domain::IPV4),
            IpAddr::V6(_) => (&mut self.v6, socket2::Domain::IPV6),
        };
        let socket = match slot {
            Some(s) => s,
            None => slot.insert(socket2::Socket::new(
                domain,
                socket2::Type::RAW,
                Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
            )?),
        };
        let to = socket2::SockAddr::from(std::net::SocketAddr::new(seg.dst, 0));
        socket.send_to(packet, &to).map(|_| ())
    }
}

/// The daemon's statistics (`--stats` and the summary printed at exit).
#[derive(Debug, Clone, Serialize)]
pub struct DaemonReport {
    /// The daemon's iptables chains (prefix).
    pub chains: String,
    /// Outbound queue (inbound is the next one).
    pub queue: u16,
    /// Seconds since the start.
    pub seconds: f64,
    /// Why it stopped (`running` in periodic writes).
    pub stopped_by: String,
    /// The controller's state now.
    pub state: crate::controller::State,
    /// Queue counters.
    pub queues: QueueCounts,
    /// Link-event counters.
    pub feed: FeedCounts,
    /// The first unreadable line of the event source, if any.
    pub feed_first_error: Option<String>,
    /// The controller's parameters.
    pub config: Config,
    /// The controller's statistics.
    pub m2ho: Stats,
}

// ------------------------------------------------------------------------ rules

/// The two iptables commands (IPv4, IPv6).
const IPTABLES: [&str; 2] = ["iptables", "ip6tables"];

fn iptables(cmd: &str, args: &[&str]) -> Result<String, DaemonError> {
    let out = Command::new(cmd)
        .arg("-w")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            DaemonError::Rules(format!(
                "cannot run `{cmd}` ({e}): install the iptables package (Debian: apt-get \
                 install iptables)"
            ))
        })?;
    if !out.status.success() {
        return Err(DaemonError::Rules(format!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The chains of a daemon: `<prefix><pid>_OUT` (jumped to from OUTPUT) and `..._IN` (from
/// INPUT).
fn chains(pid: u32) -> [(String, &'static str); 2] {
    [
        (format!("{CHAIN_PREFIX}{pid}_OUT"), "OUTPUT"),
        (format!("{CHAIN_PREFIX}{pid}_IN"), "INPUT"),
    ]
}

/// The iptables arguments that install the rules of daemon `pid` for one family (`v6`):
/// each a separate command line.
pub fn rule_commands(pid: u32, queue: u16, local: Option<IpAddr>, v6: bool) -> Vec<Vec<String>> {
    let [(out_chain, out_hook), (in_chain, in_hook)] = chains(pid);
    let addr = |flag: &str| -> Vec<String> {
        match local {
            Some(a) if a.is_ipv6() == v6 => vec![flag.into(), a.to_string()],
            _ => Vec::new(),
        }
    };
    let queue_to = |q: u16| -> Vec<String> {
        [
            "-j",
            "NFQUEUE",
            "--queue-num",
            &q.to_string(),
            "--queue-bypass",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect()
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let mut v = Vec::new();
    for (chain, hook, flag, q) in [
        (&out_chain, out_hook, "-s", queue),
        (&in_chain, in_hook, "-d", queue.wrapping_add(1)),
    ] {
        v.push(s(&["-N", chain]));
        let mut rule = s(&["-A", chain, "-p", "tcp"]);
        rule.extend(addr(flag));
        rule.extend(queue_to(q));
        v.push(rule);
        v.push(s(&["-I", hook, "-j", chain]));
    }
    v
}

/// The families the rules cover: IPv4, IPv6 or both (without `local`).
fn families(local: Option<IpAddr>) -> Vec<bool> {
    match local {
        Some(a) => vec![a.is_ipv6()],
        None => vec![false, true],
    }
}

/// Removes the chains of daemon `pid` from one family; what was not there is no error.
fn remove_chains(cmd: &str, pid: u32) -> Result<(), DaemonError> {
    let listed = iptables(cmd, &["-S"])?;
    for (chain, hook) in chains(pid) {
        while listed.contains(&format!("-A {hook} -j {chain}"))
            && iptables(cmd, &["-D", hook, "-j", &chain]).is_ok()
        {}
        if listed.contains(&format!("-N {chain}")) {
            iptables(cmd, &["-F", &chain])?;
            iptables(cmd, &["-X", &chain])?;
        }
    }
    Ok(())
}

/// The pids of the daemons whose chains are present (in this network namespace).
pub fn daemons_with_rules() -> Result<Vec<u32>, DaemonError> {
    let mut pids = Vec::new();
    for cmd in IPTABLES {
        for line in iptables(cmd, &["-S"])?.lines() {
            let pid = line
                .strip_prefix("-N ")
                .and_then(|c| c.strip_prefix(CHAIN_PREFIX))
                .and_then(|c| c.split('_').next())
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(p) = pid
                && !pids.contains(&p)
            {
                pids.push(p);
            }
        }
    }
    pids.sort_unstable();
    Ok(pids)
}

/// True when `pid` is a live M2HO daemon.
fn daemon_alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| c.split(|b| *b == 0).any(|arg| arg == b"m2ho"))
        .unwrap_or(false)
}

/// What [`clean`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CleanReport {
    /// Daemons whose chains were removed (they are gone).
    pub removed: Vec<u32>,
    /// Live daemons, whose chains were left alone.
    pub live: Vec<u32>,
}

/// Removes the chains of daemons that are no longer running (in this network namespace).
pub fn clean() -> Result<CleanReport, DaemonError> {
    let mut r = CleanReport::default();
    for pid in daemons_with_rules()? {
        if pid != std::process::id() && daemon_alive(pid) {
            r.live.push(pid);
            continue;
        }
        for cmd in IPTABLES {
            remove_chains(cmd, pid)?;
        }
        r.removed.push(pid);
    }
    Ok(r)
}

/// The daemon's chains; removed on drop.
struct Rules {
    name: String,
    pid: u32,
    families: Vec<bool>,
}

impl Rules {
    fn install(queue: u16, local: Option<IpAddr>) -> Result<Rules, DaemonError> {
        let pid = std::process::id();
        let rules = Rules {
            name: format!("{CHAIN_PREFIX}{pid}"),
            pid,
            families: families(local),
        };
        for v6 in &rules.families {
            let cmd = IPTABLES[usize::from(*v6)];
            for args in rule_commands(pid, queue, local, *v6) {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                // On failure, `rules` is dropped: what was installed goes.
                iptables(cmd, &args)?;
            }
        }
        Ok(rules)
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        for v6 in &self.families {
            if let Err(e) = remove_chains(IPTABLES[usize::from(*v6)], self.pid) {
                eprintln!("m2ho: {e}");
            }
        }
    }
}

// ------------------------------------------------------------------------ signals

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig != libc::SIGUSR1 {
        STOP.store(true, Ordering::SeqCst);
    }
}

/// Handlers without `SA_RESTART`, so that a blocked `recv` returns `EINTR`; restored on drop.
struct Signals {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Signals {
    fn install() -> Signals {
        STOP.store(false, Ordering::SeqCst);
        let mut old = Vec::new();
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1] {
            // SAFETY: a zeroed sigaction with a handler that only stores to an atomic.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut sa.sa_mask);
                sa.sa_flags = 0;
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Signals { old }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restoring what `install` replaced.
            unsafe {
                libc::sigaction(*sig, prev, std::ptr::null_mut());
            }
        }
    }
}

// ------------------------------------------------------------------------ the run

fn lock(c: &Mutex<Controller>) -> MutexGuard<'_, Controller> {
    c.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Shared {
    controller: Mutex<Controller>,
    feed: Mutex<(FeedCounts, Option<String>)>,
    queues: Mutex<QueueCounts>,
    start: Instant,
    done: AtomicBool,
    ticks: AtomicU64,
}

impl Shared {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn report(&self, table: &str, queue: u16, stopped_by: &str) -> DaemonReport {
        let c = lock(&self.controller);
        let feed = self
            .feed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        DaemonReport {
            chains: table.to_string(),
            queue,
            seconds: self.start.elapsed().as_secs_f64(),
            stopped_by: stopped_by.to_string(),
            state: c.state(),
            queues: *self.queues.lock().unwrap_or_else(PoisonError::into_inner),
            feed: feed.0,
            feed_first_error: feed.1,
            config: c.config().clone(),
            m2ho: c.stats().clone(),
        }
    }
}

/// Writes `report` to `path` through a temporary file (readers never see half a file).
fn write_report(path: &Path, report: &DaemonReport) -> Result<(), DaemonError> {
    crate::write_json_atomically(path, report).map_err(io_err(path))
}

/// Reads events from `source` into the controller until it ends or the daemon stops.
fn read_events(shared: &Shared, source: EventSource, iface: Option<u16>, local: Option<IpAddr>) {
    let reader: Box<dyn BufRead> = match &source {
        EventSource::Socket(p) => match UnixStream::connect(p) {
            Ok(s) => Box::new(BufReader::new(s)),
            Err(e) => {
                let mut f = shared.feed.lock().unwrap_or_else(PoisonError::into_inner);
                f.1.get_or_insert(format!("{}: {e}", p.display()));
                return;
            }
        },
        EventSource::File(p) => match std::fs::File::open(p) {
            Ok(f) => Box::new(BufReader::new(f)),
            Err(e) => {
                let mut f = shared.feed.lock().unwrap_or_else(PoisonError::into_inner);
                f.1.get_or_insert(format!("{}: {e}", p.display()));
                return;
            }
        },
        EventSource::Stdin => Box::new(BufReader::new(io::stdin())),
    };
    for (i, line) in reader.lines().enumerate() {
        if shared.done.load(Ordering::SeqCst) {
            return;
        }
        let Ok(line) = line else { return };
        let mut f = shared.feed.lock().unwrap_or_else(PoisonError::into_inner);
        f.0.lines += 1;
        if line.trim().is_empty() {
            continue;
        }
        let ev = match FeedEvent::parse(&line, i + 1) {
            Ok(ev) => ev,
            Err(e) => {
                f.0.skipped += 1;
                f.1.get_or_insert(e.to_string());
                continue;
            }
        };
        let wrong_iface = iface.is_some_and(|x| x != ev.event.iface);
        let wrong_local = matches!((local, ev.local), (Some(a), Some(b)) if a != b);
        if wrong_iface || wrong_local {
            f.0.filtered += 1;
            continue;
        }
        f.0.applied += 1;
        drop(f);
        let now = shared.now();
        lock(&shared.controller).on_link_event(now, &ev.event.event);
    }
}

/// One CSV line per packet.
struct Csv {
    out: BufWriter<std::fs::File>,
}

impl Csv {
    fn create(path: &Path) -> Result<Csv, DaemonError> {
        let f = std::fs::File::create(path).map_err(io_err(path))?;
        let mut out = BufWriter::new(f);
        writeln!(
            out,
            "t_s,dir,src,sport,dst,dport,seq,ack,flags,len,window,new_window,verdict,state"
        )
        .map_err(io_err(path))?;
        Ok(Csv { out })
    }

    #[allow(clippy::too_many_arguments)]
    fn line(
        &mut self,
        t: u64,
        dir: Direction,
        captured: &[u8],
        wire_len: usize,
        verdict: &Verdict,
        state: crate::controller::State,
    ) {
        let dir = match dir {
            Direction::Outbound => "out",
            Direction::Inbound => "in",
        };
        let state = serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let _ = match (packet::parse_captured(captured, wire_len), verdict) {
            (Ok(s), v) => {
                let (new, what) = match v {
                    Verdict::Rewritten { new, .. } => (new.to_string(), "rewritten"),
                    Verdict::Drop => (String::new(), "dropped"),
                    _ => (String::new(), "passed"),
                };
                writeln!(
                    self.out,
                    "{:.6},{dir},{},{},{},{},{},{},{:#04x},{},{},{new},{what},{state}",
                    t as f64 / 1e9,
                    s.src,
                    s.src_port,
                    s.dst,
                    s.dst_port,
                    s.seq,
                    s.ack,
                    s.flags,
                    s.payload_len,
                    s.window
                )
            }
            (Err(e), _) => writeln!(
                self.out,
                "{:.6},{dir},,,,,,,,{wire_len},,,unparsed: {e},{state}",
                t as f64 / 1e9
            ),
        };
    }
}

/// Runs the daemon until `duration`, SIGINT or SIGTERM; returns the final statistics.
pub fn run(opts: &DaemonOptions) -> Result<DaemonReport, DaemonError> {
    opts.config.validate().map_err(DaemonError::Config)?;
    let history = match &opts.buffer_db {
        Some(path) => BufferDb::load(path).map_err(DaemonError::Config)?,
        None => BufferDb::default(),
    };
    let signals = Signals::install();
    let cleaned = clean()?;
    if !cleaned.removed.is_empty() {
        let pids: Vec<String> = cleaned.removed.iter().map(u32::to_string).collect();
        eprintln!(
            "m2ho: removed the rules of daemons that are gone (pid {})",
            pids.join(", ")
        );
    }
    let queue_err = |queue| move |e: io::Error| DaemonError::Queue { queue, source: e };
    let q_out = opts.queue;
    let q_in = opts.queue.wrapping_add(1);
    let mut queue = nfq::Queue::open().map_err(queue_err(q_out))?;
    // The socket's receive buffer follows the last copy range set: the inbound queue's
    // short one first, then the outbound queue's whole packets.
    queue.bind(q_in).map_err(queue_err(q_in))?;
    queue
        .set_copy_range(q_in, INBOUND_COPY)
        .map_err(queue_err(q_in))?;
    queue.bind(q_out).map_err(queue_err(q_out))?;
    for q in [q_out, q_in] {
        // A full queue lets packets through rather than dropping them.
        queue.set_fail_open(q, true).map_err(queue_err(q))?;
        queue.set_queue_max_len(q, 4096).map_err(queue_err(q))?;
    }
    let rules = Rules::install(q_out, opts.local)?;
    let mut csv = opts.csv.as_deref().map(Csv::create).transpose()?;
    let mut controller = Controller::new(opts.config.clone());
    controller.remember_buffers(&history);
    let shared = Arc::new(Shared {
        controller: Mutex::new(controller),
        feed: Mutex::new((FeedCounts::default(), None)),
        queues: Mutex::new(QueueCounts::default()),
        start: Instant::now(),
        done: AtomicBool::new(false),
        ticks: AtomicU64::new(0),
    });
    if let Some(f) = opts.on_ready {
        f(&rules.name);
    }
    // The event reader.
    if let Some(src) = opts.events.clone() {
        let s = shared.clone();
        let (iface, local) = (opts.iface, opts.local);
        std::thread::spawn(move || read_events(&s, src, iface, local));
    }
    // Timers, periodic statistics, the duration: wakes the packet loop when it ends.
    // SAFETY: pthread_self has no preconditions.
    let main = unsafe { libc::pthread_self() };
    let timer = {
        let s = shared.clone();
        let (duration, stats, every) = (opts.duration, opts.stats.clone(), opts.stats_interval);
        let buffer_db = opts.buffer_db.clone();
        let (table, q) = (rules.name.clone(), q_out);
        std::thread::spawn(move || {
            let mut raw = RawSender::default();
            let mut next_stats = every;
            loop {
                std::thread::sleep(Duration::from_millis(5));
                s.ticks.fetch_add(1, Ordering::Relaxed);
                let now = s.now();
                let updates = {
                    let mut c = lock(&s.controller);
                    c.poll(now);
                    c.take_window_updates()
                };
                if !updates.is_empty() {
                    let (mut sent, mut errors) = (0, 0);
                    for p in &updates {
                        match raw.send(p) {
                            Ok(()) => sent += 1,
                            Err(_) => errors += 1,
                        }
                    }
                    let mut q = s.queues.lock().unwrap_or_else(PoisonError::into_inner);
                    q.window_updates_sent += sent;
                    q.window_update_errors += errors;
                }
                let elapsed = s.start.elapsed();
                if elapsed >= next_stats {
                    next_stats += every;
                    if let Some(path) = &stats {
                        let _ = write_report(path, &s.report(&table, q, "running"));
                    }
                    if let Some(path) = &buffer_db {
                        let db = lock(&s.controller).stats().buffers.to_db();
                        let _ = db.save(path);
                    }
                }
                if duration.is_some_and(|d| elapsed >= d) {
                    STOP.store(true, Ordering::SeqCst);
                }
                if STOP.load(Ordering::SeqCst) || s.done.load(Ordering::SeqCst) {
                    // SAFETY: `main` is the packet loop's thread, alive until it joins us.
                    unsafe {
                        libc::pthread_kill(main, libc::SIGUSR1);
                    }
                    if s.done.load(Ordering::SeqCst) {
                        return;
                    }
                }
            }
        })
    };
    let mut buf = Vec::with_capacity(65536);
    let mut failure = None;
    while !STOP.load(Ordering::SeqCst) {
        let mut msg = match queue.recv() {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let mut q = shared.queues.lock().unwrap_or_else(PoisonError::into_inner);
                q.recv_errors += 1;
                // ENOBUFS and the like: the kernel dropped or let through what did not fit.
                if q.recv_errors > 1000 {
                    failure = Some(DaemonError::Queue {
                        queue: q_out,
                        source: e,
                    });
                    break;
                }
                continue;
            }
        };
        let dir = if msg.get_queue_num() == q_in {
            Direction::Inbound
        } else {
            Direction::Outbound
        };
        buf.clear();
        buf.extend_from_slice(msg.get_payload());
        let wire_len = msg.get_original_len().max(buf.len());
        let now = shared.now();
        let (verdict, state) = {
            let mut c = lock(&shared.controller);
            let v = c.on_capture(now, dir, &mut buf, wire_len);
            (v, c.state())
        };
        {
            let mut q = shared.queues.lock().unwrap_or_else(PoisonError::into_inner);
            q.packets += 1;
            match verdict {
                Verdict::Pass => q.accepted += 1,
                Verdict::Rewritten { .. } => q.rewritten += 1,
                Verdict::Drop => q.dropped += 1,
                Verdict::Unparsed(_) => q.unparsed += 1,
            }
        }
        if let Some(c) = csv.as_mut() {
            c.line(now, dir, &buf, wire_len, &verdict, state);
        }
        match verdict {
            Verdict::Drop => msg.set_verdict(nfq::Verdict::Drop),
            Verdict::Rewritten { .. } => {
                msg.set_payload(buf.clone());
                msg.set_verdict(nfq::Verdict::Accept);
            }
            Verdict::Pass | Verdict::Unparsed(_) => msg.set_verdict(nfq::Verdict::Accept),
        }
        if queue.verdict(msg).is_err() {
            shared
                .queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .verdict_errors += 1;
        }
    }
    shared.done.store(true, Ordering::SeqCst);
    let _ = timer.join();
    let stopped_by = if failure.is_some() {
        "error"
    } else if opts.duration.is_some_and(|d| shared.start.elapsed() >= d) {
        "duration"
    } else {
        "signal"
    };
    if let Some(c) = csv.as_mut() {
        let _ = c.out.flush();
    }
    let report = shared.report(&rules.name, q_out, stopped_by);
    // Unbinding before the rules go would make `bypass` pass packets anyway; the order
    // only matters for packets in flight, which the kernel then accepts.
    drop(rules);
    let _ = queue.unbind(q_out);
    let _ = queue.unbind(q_in);
    drop(signals);
    if let Some(path) = &opts.stats {
        write_report(path, &report)?;
    }
    if let Some(path) = &opts.buffer_db {
        report
            .m2ho
            .buffers
            .to_db()
            .save(path)
            .map_err(io_err(path))?;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_commands_per_family() {
        let v4 = rule_commands(7, 100, Some("10.0.0.2".parse().unwrap()), false);
        let lines: Vec<String> = v4.iter().map(|a| a.join(" ")).collect();
        assert_eq!(
            lines,
            [
                "-N POLYPATH_M2HO_7_OUT",
                "-A POLYPATH_M2HO_7_OUT -p tcp -s 10.0.0.2 -j NFQUEUE --queue-num 100 --queue-bypass",
                "-I OUTPUT -j POLYPATH_M2HO_7_OUT",
                "-N POLYPATH_M2HO_7_IN",
                "-A POLYPATH_M2HO_7_IN -p tcp -d 10.0.0.2 -j NFQUEUE --queue-num 101 --queue-bypass",
                "-I INPUT -j POLYPATH_M2HO_7_IN",
            ]
        );
        let any = rule_commands(7, 100, None, true);
        assert_eq!(
            any[1].join(" "),
            "-A POLYPATH_M2HO_7_OUT -p tcp -j NFQUEUE --queue-num 100 --queue-bypass"
        );
        assert_eq!(families(Some("::1".parse().unwrap())), vec![true]);
        assert_eq!(families(None), vec![false, true]);
    }
}
