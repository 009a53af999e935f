//! `polypath bench emu`: how much kernel-TCP goodput the emulator carries on this machine,
//! through one unconstrained emulated link and through two at once, with the engine's CPU
//! share and lateness. A benchmark: it prints what it measured and judges nothing.

use clap::Args;
use polypath_emu::{EmuOptions, EmuReport};
use polypath_sim::scenario::Scenario;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// `polypath bench emu`.
#[derive(Debug, Args)]
pub struct EmuBenchArgs {
    /// Seconds each TCP sender runs.
    #[arg(long, default_value_t = 8)]
    seconds: u32,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// One case of the benchmark.
#[derive(Debug, Serialize)]
struct Case {
    /// `one-link` or `two-links`.
    case: &'static str,
    /// Receiver goodput of each TCP flow, Mbit/s.
    flows_mbps: Vec<f64>,
    /// Their sum.
    aggregate_mbps: f64,
    /// The engine thread's CPU time over the wall time.
    engine_cpu_share: f64,
    /// Lateness of packet deliveries, µs.
    late_p50_us: f64,
    late_p99_us: f64,
    late_max_us: f64,
    /// Whether the emulator reported itself overloaded.
    overloaded: bool,
    /// Packets the engine read from the hosts.
    packets: u64,
}

/// The benchmark's report.
#[derive(Debug, Serialize)]
struct Report {
    seconds: u32,
    cores: usize,
    cases: Vec<Case>,
}

/// Runs the benchmark.
pub fn run(args: EmuBenchArgs) -> Result<(), String> {
    polypath_emu::available()?;
    let dir = std::env::temp_dir().join(format!("polypath-bench-emu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let bin = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cases = Vec::new();
    for (case, links) in [("one-link", 1usize), ("two-links", 2)] {
        eprintln!(
            "bench emu: {case} ({} s of kernel TCP per link) ...",
            args.seconds
        );
        let out = dir.join(case);
        let report = emulate(&out, &bin, &scenario(links, args.seconds))?;
        let flows_mbps: Vec<f64> = (0..links)
            .map(|k| receiver_goodput(&out.join(format!("out/recv{k}.json"))))
            .collect::<Result<_, _>>()?;
        let r = &report.summary.realtime;
        cases.push(Case {
            case,
            aggregate_mbps: flows_mbps.iter().sum(),
            flows_mbps,
            engine_cpu_share: r.engine_cpu_share,
            late_p50_us: r.lateness.p50_us,
            late_p99_us: r.lateness.p99_us,
            late_max_us: r.lateness.max_us,
            overloaded: r.overloaded,
            packets: r.packets_in,
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    let report = Report {
        seconds: args.seconds,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cases,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        for c in &report.cases {
            println!(
                "{:10} {:8.1} Mbit/s aggregate ({}), engine {:.0} % of a core, late p50 {:.0} \
                 us p99 {:.0} us max {:.0} us{}",
                c.case,
                c.aggregate_mbps,
                c.flows_mbps
                    .iter()
                    .map(|m| format!("{m:.1}"))
                    .collect::<Vec<_>>()
                    .join(" + "),
                c.engine_cpu_share * 100.0,
                c.late_p50_us,
                c.late_p99_us,
                c.late_max_us,
                if c.overloaded { " (overloaded)" } else { "" }
            );
        }
    }
    Ok(())
}

/// Hosts `a` and `b` joined by `links` unconstrained links (100 Gbit/s, no delay), a TCP
/// receiver per link on `b` and a sender per link on `a`.
fn scenario(links: usize, seconds: u32) -> String {
    let mut s = format!("[sim]\nduration = \"{}s\"\n", seconds + 10);
    let ifaces = |side: &str, host: u8| -> String {
        (0..links)
            .map(|k| {
                format!(
                    "{{ name = \"e{k}\", addr = \"10.{}.0.{host}\", link = \"l{k}\", side = \"{side}\" }}",
                    k + 1
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    s.push_str(&format!(
        "[[host]]\nname = \"a\"\ninterfaces = [{}]\n[[host]]\nname = \"b\"\ninterfaces = [{}]\n",
        ifaces("a", 1),
        ifaces("b", 2)
    ));
    for k in 0..links {
        s.push_str(&format!(
            "[[link]]\nname = \"l{k}\"\nrate = \"100Gbit/s\"\nqueue = \"unlimited\"\n"
        ));
    }
    for k in 0..links {
        let port = 5201 + k;
        let addr = format!("10.{}.0.2", k + 1);
        let local = format!("10.{}.0.1", k + 1);
        s.push_str(&format!(
            "[[flow]]\nname = \"recv{k}\"\nkind = \"command\"\nfrom = \"b\"\nto = \"a\"\nport = {port}\n\
             command = \"{{polypath}} tcp recv --listen {addr}:{port} --once --json > {{out}}/recv{k}.json\"\n\
             [[flow]]\nname = \"send{k}\"\nkind = \"command\"\nfrom = \"a\"\nto = \"b\"\nport = {port}\nstart = \"300ms\"\n\
             command = \"{{polypath}} tcp send --connect {addr}:{port} --bind {local} --time {seconds}s --json > /dev/null\"\n"
        ));
    }
    s
}

fn emulate(dir: &Path, bin: &Path, toml: &str) -> Result<EmuReport, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("scenario.toml");
    std::fs::write(&path, toml).map_err(|e| format!("{}: {e}", path.display()))?;
    let scenario = Scenario::load(&path).map_err(|e| e.to_string())?;
    let opts = EmuOptions {
        out_dir: Some(dir.join("out")),
        polypath_bin: Some(PathBuf::from(bin)),
        ..EmuOptions::default()
    };
    polypath_emu::run_scenario(&scenario, &opts).map_err(|e| e.to_string())
}

fn receiver_goodput(path: &Path) -> Result<f64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let start = text.find('{').unwrap_or(0);
    let v: serde_json::Value =
        serde_json::from_str(&text[start..]).map_err(|e| format!("{}: {e}", path.display()))?;
    v["goodput_mbps"]
        .as_f64()
        .ok_or_else(|| format!("{}: no goodput_mbps", path.display()))
}
