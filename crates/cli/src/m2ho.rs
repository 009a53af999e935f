//! `polypath m2ho`: the M2HO shim on this host (NFQUEUE, root), the cleanup of what a killed
//! daemon left, and a replay of a link-event file through the controller's predictor.

use clap::{Args, Subcommand};
use polypath_link::feed::{FEED_ENV, FeedEvent};
use polypath_m2ho::buffer::BufferDb;
use polypath_m2ho::daemon::{self, DaemonOptions, EventSource};
use polypath_m2ho::{Config, Controller, PredictorKind};
use polypath_scenario::units::parse_duration;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// M2HO commands.
#[derive(Debug, Subcommand)]
pub enum M2hoCommand {
    /// Run the shim: TCP packets of this host through NFQUEUE, link-layer events from a
    /// feed, until SIGINT / SIGTERM or --duration (root; installs and removes its own
    /// iptables chains).
    Run(RunArgs),
    /// Remove the iptables chains of M2HO daemons that are no longer running.
    Clean,
    /// Feed a link-event file (JSON lines) through the controller and print its
    /// predictions, handovers and buffer estimates as JSON (no packets, no root).
    Replay(ReplayArgs),
}

/// Controller parameters shared by `run` and `replay`.
#[derive(Debug, Args)]
pub struct ParamArgs {
    /// Which predictor starts the preparation state: m2ho (Algorithm 1), naive (any
    /// report), command (no prediction: the handover command).
    #[arg(long, default_value = "m2ho", value_parser = ["m2ho", "naive", "command"])]
    predictor: String,
    /// Set a controller parameter, KEY=VALUE (repeatable; VALUE as JSON, else a string),
    /// e.g. `lambda=2`, `shrink=false`, `clamp_rwnd_bytes=64000`, `burst={"full":0.9,"partial":0.4}`.
    /// Keys: predictor, initial_t2_ms, fallback_a1, shrink, burst, learn_from_forwarded_burst,
    /// default_buffer_bytes, suppress_dup_acks, max_suppression_ms, rate_control, lambda, min_rwnd_bytes,
    /// clamp_rwnd_bytes, limit_widening, reopen_stalled, reopen_after_rtts, reopen_min_ms, max_preparation_ms,
    /// max_connections, idle_timeout_s, max_records.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// The local buffer database (M2HO Sec. 4.3): per-cell buffer estimates read at the
    /// start (a missing file is an empty history) and written back with what this run
    /// learnt (`run`: every --stats-interval and at exit; `replay`: at the end).
    #[arg(long = "buffer-db", value_name = "FILE")]
    buffer_db: Option<PathBuf>,
}

impl ParamArgs {
    fn config(&self) -> Result<Config, String> {
        let mut obj = serde_json::Map::new();
        obj.insert("predictor".into(), self.predictor.clone().into());
        for p in &self.params {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("--param {p:?}: expected KEY=VALUE"))?;
            let value = serde_json::from_str(v).unwrap_or_else(|_| v.into());
            obj.insert(k.trim().to_string(), value);
        }
        let cfg: Config = serde_json::from_value(serde_json::Value::Object(obj))
            .map_err(|e| format!("--param: {e}"))?;
        cfg.validate().map_err(|e| format!("--param {e}"))?;
        Ok(cfg)
    }
}

/// `polypath m2ho run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    params: ParamArgs,
    /// NFQUEUE number for outbound packets (inbound use the next one).
    #[arg(long, default_value_t = 4200)]
    queue: u16,
    /// Unix socket serving link events as JSON lines. Default: POLYPATH_LINK_EVENTS, if set.
    #[arg(long = "link-events", value_name = "SOCKET", conflicts_with_all = ["events_file", "events_stdin"])]
    link_events: Option<PathBuf>,
    /// Read link events (JSON lines) from this file or FIFO instead.
    #[arg(
        long = "events-file",
        value_name = "FILE",
        conflicts_with = "events_stdin"
    )]
    events_file: Option<PathBuf>,
    /// Read link events (JSON lines) from standard input instead.
    #[arg(long = "events-stdin")]
    events_stdin: bool,
    /// Apply only the events of this UE interface (radio leg) number.
    #[arg(long)]
    iface: Option<u16>,
    /// Handle only TCP from / to this local address (and the events naming it).
    #[arg(long)]
    local: Option<IpAddr>,
    /// Write the JSON statistics to this file, every --stats-interval and at exit.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// How often --stats is rewritten.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    stats_interval: Duration,
    /// Write one CSV line per packet to this file.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Stop after this long (default: until SIGINT / SIGTERM).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Print the final statistics as JSON on stdout (default: a one-line summary).
    #[arg(long)]
    json: bool,
}

/// `polypath m2ho replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The link-event file (JSON lines, as `sim run --events` writes).
    events: PathBuf,
    #[command(flatten)]
    params: ParamArgs,
    /// Apply only the events of this UE.
    #[arg(long, default_value_t = 0)]
    ue: u32,
    /// Apply only the events of this UE interface.
    #[arg(long, default_value_t = 0)]
    iface: u16,
}

fn ready(chains: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "m2ho: ready, iptables chains {chains}_OUT and {chains}_IN"
    );
    let _ = out.flush();
}

/// Runs an M2HO command.
pub fn run(cmd: M2hoCommand) -> Result<(), String> {
    match cmd {
        M2hoCommand::Run(args) => run_daemon(args),
        M2hoCommand::Clean => {
            let r = daemon::clean().map_err(|e| e.to_string())?;
            let pids: Vec<String> = r.removed.iter().map(u32::to_string).collect();
            println!(
                "removed the rules of {} M2HO daemon(s) that are gone{}; {} live daemon(s) left alone",
                r.removed.len(),
                if pids.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {})", pids.join(", "))
                },
                r.live.len()
            );
            Ok(())
        }
        M2hoCommand::Replay(args) => replay(args),
    }
}

fn run_daemon(args: RunArgs) -> Result<(), String> {
    let config = args.params.config()?;
    let events = if args.events_stdin {
        Some(EventSource::Stdin)
    } else if let Some(f) = args.events_file {
        Some(EventSource::File(f))
    } else {
        args.link_events
            .or_else(|| {
                std::env::var_os(FEED_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .map(EventSource::Socket)
    };
    let opts = DaemonOptions {
        config,
        queue: args.queue,
        events,
        iface: args.iface,
        local: args.local,
        stats: args.stats,
        stats_interval: args.stats_interval,
        buffer_db: args.params.buffer_db.clone(),
        csv: args.csv,
        duration: args.duration,
        on_ready: Some(ready),
    };
    let report = daemon::run(&opts).map_err(|e| e.to_string())?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        let q = &report.queues;
        println!(
            "m2ho: {:.1} s, {} packets ({} rewritten, {} dropped, {} unparsed), {} link events, \
             {} handovers, {} predictions, stopped by {}",
            report.seconds,
            q.packets,
            q.rewritten,
            q.dropped,
            q.unparsed,
            report.feed.applied,
            report.m2ho.handovers.len(),
            report.m2ho.predictions.len(),
            report.stopped_by
        );
    }
    Ok(())
}

fn replay(args: ReplayArgs) -> Result<(), String> {
    let config = args.params.config()?;
    let file =
        std::fs::File::open(&args.events).map_err(|e| format!("{}: {e}", args.events.display()))?;
    let mut c = Controller::new(config);
    if let Some(path) = &args.params.buffer_db {
        c.remember_buffers(&BufferDb::load(path)?);
    }
    let mut last = 0u64;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: line {}: {e}", args.events.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let ev = FeedEvent::parse(&line, i + 1)
            .map_err(|e| format!("{}: {e}", args.events.display()))?;
        if ev.event.ue != args.ue || ev.event.iface != args.iface {
            continue;
        }
        last = last.max(ev.event.t_ns);
        c.on_link_event(ev.event.t_ns, &ev.event.event);
    }
    c.poll(last.saturating_add(10_000_000_000));
    if let Some(path) = &args.params.buffer_db {
        c.stats()
            .buffers
            .to_db()
            .save(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let predictor = match c.config().predictor {
        PredictorKind::M2ho => "m2ho",
        PredictorKind::Naive => "naive",
        PredictorKind::Command => "command",
    };
    let out = serde_json::json!({
        "events": args.events,
        "predictor": predictor,
        "stats": c.stats(),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
    );
    Ok(())
}
