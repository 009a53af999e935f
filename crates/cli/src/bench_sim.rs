//! `polypath bench sim`: how fast the simulator runs the lab's heaviest scenarios.
//!
//! The runs are the lab's own (see `lab/polypath_lab/experiments/`): LAMP5G Table I's
//! NR-DC download (`nrdc-two-path.toml`, LAMP5G scheduler) with CUBIC (300 MB) and with
//! BBR (1 GB), the 5G-CLARITY static download (`clarity-static.toml`: 5G, Wi-Fi and LiFi
//! under WRR, about 1.5 Gbit/s) and the IAB backhaul with 3000 devices
//! (`backhaul-3000.toml`). Each is run in this process, without output files, `--repeat`
//! times, the scenarios taking turns so that a burst of load from elsewhere hits them all.
//!
//! Per run it prints simulated seconds per wall-clock second and per CPU-second of the
//! simulating thread (the simulator is single-threaded, so the latter is "times real time
//! on one core"), events per second, the traffic the links carried (simulated Gbit) per
//! CPU-second, and the run's `output_hash`: a change that makes the simulator faster must
//! leave the hashes as they were unless it changes behaviour on purpose. The machine's
//! load average is printed with each run: figures are comparable only within one run of
//! the benchmark on a machine equally loaded.

use clap::Args;
use polypath_sim::scenario::{FlowKind, Scenario};
use polypath_sim::{Hooks, RunOptions};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `polypath bench sim`.
#[derive(Debug, Args)]
pub struct SimBenchArgs {
    /// The folder holding the scenario files.
    #[arg(long, default_value = "scenarios")]
    scenarios: PathBuf,
    /// Rounds: each runs every selected scenario once, in turn.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Only these runs (comma-separated names: nrdc-cubic, nrdc-bbr, clarity-static,
    /// backhaul-3000).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// One benchmark run: a scenario file and what the lab changes in it.
struct Case {
    name: &'static str,
    file: &'static str,
    /// Congestion controller and bytes of the first flow, where the lab sets them.
    cc_bytes: Option<(&'static str, u64)>,
    what: &'static str,
}

const CASES: [Case; 4] = [
    Case {
        name: "nrdc-cubic",
        file: "nrdc-two-path.toml",
        cc_bytes: Some(("cubic", 300_000_000)),
        what: "LAMP5G NR-DC, LAMP5G scheduler, CUBIC, 300 MB",
    },
    Case {
        name: "nrdc-bbr",
        file: "nrdc-two-path.toml",
        cc_bytes: Some(("bbr", 1_000_000_000)),
        what: "LAMP5G NR-DC, LAMP5G scheduler, BBR, 1 GB",
    },
    Case {
        name: "clarity-static",
        file: "clarity-static.toml",
        cc_bytes: None,
        what: "5G-CLARITY static, WRR 30/100/1, CUBIC, 10 s",
    },
    Case {
        name: "backhaul-3000",
        file: "backhaul-3000.toml",
        cc_bytes: None,
        what: "IAB backhaul, 3000 UDP devices + 6 MPQUIC uploads, 10 s",
    },
];

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
struct Measured {
    name: String,
    round: u32,
    /// Simulated seconds.
    sim_s: f64,
    wall_s: f64,
    /// CPU time of the simulating thread.
    cpu_s: f64,
    /// Simulated seconds per wall-clock second.
    sim_per_wall_s: f64,
    /// Simulated seconds per CPU-second: times real time on one core.
    sim_per_cpu_s: f64,
    events: u64,
    events_per_wall_s: f64,
    events_per_cpu_s: f64,
    /// IP traffic the links delivered (every direction), Gbit.
    simulated_gbit: f64,
    gbit_per_cpu_s: f64,
    output_hash: String,
    /// The machine's 1-minute load average when the run started.
    load_1min: f64,
}

#[derive(Debug, Serialize)]
struct SimBenchReport {
    rounds: u32,
    cases: Vec<CaseReport>,
}

#[derive(Debug, Serialize)]
struct CaseReport {
    name: String,
    scenario: String,
    what: String,
    /// The round with the median simulated-seconds per CPU-second.
    median: Measured,
    /// Every round's output hash is this one (the simulator is deterministic).
    hashes_agree: bool,
    runs: Vec<Measured>,
}

/// The CPU time the calling thread has used, in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn load_1min() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The scenario of `case`, read from `dir`, with the lab's changes applied.
fn scenario(dir: &Path, case: &Case) -> Result<Scenario, String> {
    let path = dir.join(case.file);
    let mut s = Scenario::load(&path).map_err(|e| e.to_string())?;
    if let Some((cc, bytes)) = case.cc_bytes {
        let Some(FlowKind::Quic(q)) = s.flows.first_mut().map(|f| &mut f.kind) else {
            return Err(format!(
                "{}: the first flow is not a quic flow",
                path.display()
            ));
        };
        q.cc = cc.to_string();
        q.bytes = bytes;
        // As the lab: long enough for the transfer to finish (the run stops when done).
        s.sim.duration = s.sim.duration.max(std::time::Duration::from_secs(600));
    }
    Ok(s)
}

fn measure(name: &str, round: u32, scenario: &Scenario) -> Result<Measured, String> {
    let load = load_1min();
    let opts = RunOptions::default();
    let (wall0, cpu0) = (Instant::now(), thread_cpu_s());
    let report = polypath_sim::run_scenario(scenario, &opts, Hooks::default())
        .map_err(|e| format!("{name}: {e}"))?;
    let (wall_s, cpu_s) = (wall0.elapsed().as_secs_f64(), thread_cpu_s() - cpu0);
    let s = &report.summary;
    let bytes: u64 = s.links.iter().map(|l| l.bytes).sum();
    let simulated_gbit = bytes as f64 * 8.0 / 1e9;
    let per = |x: f64, t: f64| if t > 0.0 { x / t } else { 0.0 };
    Ok(Measured {
        name: name.to_string(),
        round,
        sim_s: s.sim_time_s,
        wall_s,
        cpu_s,
        sim_per_wall_s: per(s.sim_time_s, wall_s),
        sim_per_cpu_s: per(s.sim_time_s, cpu_s),
        events: s.events,
        events_per_wall_s: per(s.events as f64, wall_s),
        events_per_cpu_s: per(s.events as f64, cpu_s),
        simulated_gbit,
        gbit_per_cpu_s: per(simulated_gbit, cpu_s),
        output_hash: report.output_hash,
        load_1min: load,
    })
}

/// Runs the benchmark.
pub fn run(args: SimBenchArgs) -> Result<(), String> {
    for name in &args.only {
        if !CASES.iter().any(|c| c.name == name) {
            let names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
            return Err(format!(
                "--only: no run named `{name}` (runs: {})",
                names.join(", ")
            ));
        }
    }
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| args.only.is_empty() || args.only.iter().any(|n| n == c.name))
        .collect();
    let scenarios = cases
        .iter()
        .map(|c| scenario(&args.scenarios, c))
        .collect::<Result<Vec<_>, _>>()?;
    let total = cases.len() as u32 * args.repeat;
    let mut runs: Vec<Vec<Measured>> = vec![Vec::new(); cases.len()];
    let mut n = 0;
    for round in 0..args.repeat {
        for (i, (case, scenario)) in cases.iter().zip(&scenarios).enumerate() {
            n += 1;
            eprint!("bench sim [{n}/{total}] {} ... ", case.name);
            let m = measure(case.name, round, scenario)?;
            eprintln!(
                "{:.2} s simulated in {:.2} s wall, {:.2} s CPU ({:.1}x real time on one core; load {:.2})",
                m.sim_s, m.wall_s, m.cpu_s, m.sim_per_cpu_s, m.load_1min
            );
            runs[i].push(m);
        }
    }
    let report = SimBenchReport {
        rounds: args.repeat,
        cases: cases
            .iter()
            .zip(runs)
            .map(|(case, runs)| {
                let mut order: Vec<&Measured> = runs.iter().collect();
                order.sort_by(|a, b| a.sim_per_cpu_s.total_cmp(&b.sim_per_cpu_s));
                let median = order[order.len() / 2].clone();
                CaseReport {
                    name: case.name.to_string(),
                    scenario: args.scenarios.join(case.file).display().to_string(),
                    what: case.what.to_string(),
                    hashes_agree: runs.iter().all(|r| r.output_hash == median.output_hash),
                    median,
                    runs,
                }
            })
            .collect(),
    };
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{json}");
    } else {
        print_human(&report);
    }
    if report.cases.iter().any(|c| !c.hashes_agree) {
        return Err("a scenario's rounds gave different output hashes".into());
    }
    Ok(())
}

fn print_human(r: &SimBenchReport) {
    println!(
        "simulator benchmark, {} round(s); median round by simulated s per CPU-s",
        r.rounds
    );
    println!(
        "{:<15} {:>8} {:>8} {:>8} {:>9} {:>9} {:>12} {:>9} {:>6}  output hash",
        "run",
        "sim s",
        "wall s",
        "CPU s",
        "x real",
        "x 1 core",
        "events/CPU-s",
        "Gbit/CPU-s",
        "load"
    );
    for c in &r.cases {
        let m = &c.median;
        println!(
            "{:<15} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2} {:>12.0} {:>9.3} {:>6.2}  {}",
            c.name,
            m.sim_s,
            m.wall_s,
            m.cpu_s,
            m.sim_per_wall_s,
            m.sim_per_cpu_s,
            m.events_per_cpu_s,
            m.gbit_per_cpu_s,
            m.load_1min,
            &m.output_hash[..16.min(m.output_hash.len())]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenarios_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
    }

    /// The NR-DC runs are the lab's: the scenario's LAMP5G flow with the controller and size
    /// the benchmark names, and nothing else changed.
    #[test]
    fn the_nrdc_runs_set_the_controller_and_size() {
        let dir = scenarios_dir();
        let base = Scenario::load(&dir.join("nrdc-two-path.toml")).unwrap();
        for case in CASES.iter().filter(|c| c.cc_bytes.is_some()) {
            let s = scenario(&dir, case).unwrap();
            let (cc, bytes) = case.cc_bytes.unwrap();
            let FlowKind::Quic(q) = &s.flows[0].kind else {
                panic!("{}: not a quic flow", case.name)
            };
            let FlowKind::Quic(b) = &base.flows[0].kind else {
                panic!("base: not a quic flow")
            };
            assert_eq!((q.cc.as_str(), q.bytes), (cc, bytes));
            assert_eq!(q.scheduler, b.scheduler);
            assert_eq!(s.links, base.links);
        }
        for case in CASES.iter().filter(|c| c.cc_bytes.is_none()) {
            scenario(&dir, case).unwrap();
        }
    }
}
