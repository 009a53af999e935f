//! `polypath bench gateway`: one server gateway and many client gateways at once in the
//! real-time emulator (`scenarios/gateway/many.toml` with `count` clients): every client
//! sets up its own session (address pool, policy), pings a host behind the server and
//! downloads its 5 MB blob through the tunnel at the same time as the others; the report
//! says which sessions worked and what the emulator measured of itself.

use clap::Args;
use polypath_emu::EmuOptions;
use polypath_sim::scenario::Scenario;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// `polypath bench gateway`.
#[derive(Debug, Args)]
pub struct GatewayBenchArgs {
    /// Client gateways at once (each a namespace; at most 50, the clients of
    /// `server-many.json`).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=50))]
    clients: u32,
    /// The gateway scenarios' folder.
    #[arg(long, default_value = "scenarios/gateway")]
    scenarios: PathBuf,
    /// Keep the outputs here (a temporary folder otherwise).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// One client's outcome.
#[derive(Debug, Serialize)]
struct ClientResult {
    name: String,
    pings_answered: usize,
    download_identical: bool,
    tunnel_ip: Option<String>,
}

#[derive(Debug, Serialize)]
struct GatewayBenchReport {
    clients: u32,
    sessions_working: usize,
    wall_s: f64,
    lateness_p99_us: f64,
    lateness_max_us: f64,
    engine_cpu_share: f64,
    overloaded: bool,
    warnings: Vec<String>,
    results: Vec<ClientResult>,
}

fn sha(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok().map(|b| Sha256::digest(b).to_vec())
}

/// Runs the benchmark.
pub fn run(args: GatewayBenchArgs) -> Result<(), String> {
    polypath_emu::available()?;
    let dir = std::fs::canonicalize(&args.scenarios)
        .map_err(|e| format!("{}: {e}", args.scenarios.display()))?;
    let base = dir.join("many.toml");
    let text = std::fs::read_to_string(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let n = args.clients;
    // The same file with `n` clients; its scripts stay where they are.
    let text = text
        .replace("count = 3", &format!("count = {n}"))
        .replace(" {addr:dn} 3 ", &format!(" {{addr:dn}} {n} "))
        .replace("{dir}", &dir.display().to_string());
    let work = match &args.out {
        Some(p) => p.clone(),
        None => std::env::temp_dir().join(format!("pp-bench-gateway-{}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let path = work.join("many.toml");
    std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    let scenario = Scenario::parse(&text, &path).map_err(|e| e.to_string())?;
    let out = work.join("out");
    eprintln!("bench gateway: {n} client gateways at once ...");
    let report = polypath_emu::run_scenario(
        &scenario,
        &EmuOptions {
            out_dir: Some(out.clone()),
            progress: !args.json,
            ..EmuOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let served = sha(&out.join("www/blob.bin"));
    let mut results = Vec::new();
    for k in 0..n {
        let name = format!("gwc{k}");
        let ping =
            std::fs::read_to_string(out.join(format!("ping-{name}.txt"))).unwrap_or_default();
        let pings_answered = ping.lines().filter(|l| l.contains("bytes from")).count();
        let download_identical =
            served.is_some() && sha(&out.join(format!("got-{name}.bin"))) == served;
        let ready =
            std::fs::read_to_string(out.join(format!("gwc-{name}.out"))).unwrap_or_default();
        let tunnel_ip = ready.lines().find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l).ok()?["ready"]["tunnel_ip"]
                .as_str()
                .map(String::from)
        });
        results.push(ClientResult {
            name,
            pings_answered,
            download_identical,
            tunnel_ip,
        });
    }
    let working = results
        .iter()
        .filter(|r| r.pings_answered >= 9 && r.download_identical)
        .count();
    let rt = &report.summary.realtime;
    let summary = GatewayBenchReport {
        clients: n,
        sessions_working: working,
        wall_s: rt.wall_s,
        lateness_p99_us: rt.lateness.p99_us,
        lateness_max_us: rt.lateness.max_us,
        engine_cpu_share: rt.engine_cpu_share,
        overloaded: rt.overloaded,
        warnings: rt.warnings.clone(),
        results,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?
        );
    } else {
        for r in &summary.results {
            println!(
                "{:>6}  {:<15} ping {:>2}/10  download {}",
                r.name,
                r.tunnel_ip.as_deref().unwrap_or("no tunnel"),
                r.pings_answered,
                if r.download_identical {
                    "identical"
                } else {
                    "FAILED"
                }
            );
        }
        println!(
            "{working} of {n} sessions worked ({:.1} s; emulator late p99 {:.0} us, max {:.0} us, \
             engine {:.0} % of a core{})",
            summary.wall_s,
            summary.lateness_p99_us,
            summary.lateness_max_us,
            summary.engine_cpu_share * 100.0,
            if summary.overloaded {
                ", OVERLOADED"
            } else {
                ""
            }
        );
    }
    if args.out.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(())
}
