//! Simulator benchmark (run with `cargo bench -p polypath-sim`; one case with
//! `cargo bench -p polypath-sim -- NAME`).
//!
//! Prints wall time, CPU time, events per second, speed-up over real time
//! (simulated seconds per wall-clock second; the simulator runs on one core)
//! and peak memory for:
//! 1. `nrdc-1GB-quic`: `scenarios/nrdc-two-path.toml` as is: a 1 GB Multipath
//!    QUIC download (real polypath-quic stack, LAMP5G scheduler, CUBIC) over
//!    the two NR-DC paths, until the transfer completes. Goal: >= 10x real time.
//! 2. `nrdc-1GB-udp`: the same topology with the QUIC flow replaced by 1 GB of
//!    constant-rate UDP (~700k packets): the engine's share of the QUIC run.
//! 3. `backhaul-3000`: `scenarios/backhaul-3000.toml` as is (3000 low-rate UDP
//!    devices and 6 bulk Multipath QUIC uploads over two shared backhaul
//!    links, 10 s).
//!
//! Numbers are reports, not pass/fail criteria. Peak memory is the process's
//! high-water mark (VmHWM), so it includes every earlier case: run one case
//! alone for its own peak.

use std::path::Path;
use std::time::Instant;

use polypath_sim::scenario::{CbrFlow, FlowKind, Scenario};
use polypath_sim::{Hooks, RunOptions, run_scenario};

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// User plus system CPU seconds of this process (from /proc/self/stat; the
/// clock tick is 100 Hz on Linux). On a shared machine this is a steadier
/// measure than wall time.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn bench(name: &str, s: &Scenario) {
    let t = Instant::now();
    let cpu0 = cpu_seconds().unwrap_or(0.0);
    let opts = RunOptions {
        seed: Some(1),
        out_dir: None,
        progress: false,
        events: None,
    };
    match run_scenario(s, &opts, Hooks::default()) {
        Ok(r) => {
            let wall = t.elapsed().as_secs_f64();
            let cpu = cpu_seconds().unwrap_or(f64::NAN) - cpu0;
            let sent: u64 = r.summary.flows.iter().map(|f| f.packets_sent).sum();
            let completion = r
                .summary
                .flows
                .iter()
                .filter_map(|f| {
                    f.completions
                        .as_ref()
                        .map(|c| format!("{}: {} done, last at {:.3} s", f.name, c.count, c.max_s))
                })
                .collect::<Vec<_>>()
                .join("; ");
            println!(
                "{name}: simulated {:.3} s in {wall:.3} s wall = {:.1}x real time ({cpu:.3} s CPU = {:.1}x); {} events ({:.2} M events/s); {sent} packets sent; {} agents; peak RSS {:.1} MiB; stopped by {}; completions: {completion}",
                r.summary.sim_time_s,
                r.summary.sim_time_s / wall,
                r.summary.sim_time_s / cpu,
                r.summary.events,
                r.summary.events as f64 / wall / 1e6,
                r.summary.agents,
                peak_rss_mib().unwrap_or(f64::NAN),
                r.summary.stopped_by,
            );
        }
        Err(e) => println!("{name}: error: {e}"),
    }
}

fn main() {
    // `cargo bench -p polypath-sim -- NAME` runs only the cases whose name
    // contains NAME.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let load = |f: &str| Scenario::load(&root.join(f)).unwrap_or_else(|e| panic!("{e}"));

    if wanted("nrdc-1GB-quic") {
        bench("nrdc-1GB-quic", &load("nrdc-two-path.toml"));
    }
    let mut nrdc = load("nrdc-two-path.toml");
    if let Some(f) = nrdc.flows.first_mut() {
        // Downlink UDP at the two paths' combined 400 Mbit/s, split evenly by
        // the round-robin sender; 1 GB of IP bytes.
        for inst in &mut f.instances {
            std::mem::swap(&mut inst.from, &mut inst.to);
            for p in &mut inst.paths {
                std::mem::swap(&mut p.local, &mut p.remote);
                std::mem::swap(&mut p.local_iface, &mut p.remote_iface);
            }
        }
        f.kind = FlowKind::Cbr(CbrFlow {
            devices: 1,
            rate: 200e6,
            packet_size: 1500,
            bytes: Some(1_000_000_000),
        });
    }
    if wanted("nrdc-1GB-udp") {
        bench("nrdc-1GB-udp", &nrdc);
    }
    if wanted("backhaul-3000") {
        bench("backhaul-3000", &load("backhaul-3000.toml"));
    }
}
