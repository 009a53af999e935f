//! `polypath emu`: run scenario files in the real-time emulator (network namespaces, real
//! processes), and remove what killed runs left.

use clap::{Args, Subcommand};
use polypath_emu::EmuOptions;

/// Emulator commands.
#[derive(Debug, Subcommand)]
pub enum EmuCommand {
    /// Emulate a scenario file in real time between network namespaces (needs root) and
    /// write the same outputs as `sim run`, plus the emulator's own timing figures.
    Run(EmuRunArgs),
    /// Remove the namespaces, processes and sockets of emulator runs that were killed.
    Clean,
}

/// `polypath emu run`: the simulator's run flags, plus pcap files.
#[derive(Debug, Args)]
pub struct EmuRunArgs {
    #[command(flatten)]
    run: crate::sim::RunArgs,
    /// Write pcap files of what each host interface sent and received (OUT/pcap/); the
    /// processes' output goes to OUT/procs/.
    #[arg(long)]
    pcap: bool,
}

/// Runs an emulator command.
pub fn run(cmd: EmuCommand) -> Result<(), String> {
    match cmd {
        EmuCommand::Run(args) => run_scenario(args),
        EmuCommand::Clean => {
            let r = polypath_emu::clean().map_err(|e| e.to_string())?;
            println!(
                "removed {} namespace(s) of {} run(s); {} namespace(s) of live runs left alone",
                r.namespaces.len(),
                r.runs.len(),
                r.live.len()
            );
            Ok(())
        }
    }
}

fn run_scenario(EmuRunArgs { run: args, pcap }: EmuRunArgs) -> Result<(), String> {
    let opts = EmuOptions {
        seed: args.seed,
        out_dir: args.out.clone(),
        events: args.events,
        pcap,
        progress: !args.quiet,
        polypath_bin: None,
    };
    let report = polypath_emu::run(&args.scenario, &opts).map_err(|e| e.to_string())?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{json}");
    } else {
        let s = &report.summary;
        let r = &s.realtime;
        println!(
            "{}: {:.3} s emulated in {:.3} s wall (stopped by {}); packets reached their host \
             {:.0} us late at p50, {:.0} us at p99, {:.0} us at most; engine {:.0} % of a core{}",
            args.scenario.display(),
            s.sim.sim_time_s,
            r.wall_s,
            s.sim.stopped_by,
            r.lateness.p50_us,
            r.lateness.p99_us,
            r.lateness.max_us,
            r.engine_cpu_share * 100.0,
            if r.overloaded {
                " -- OVERLOADED: do not trust this run"
            } else {
                ""
            }
        );
        for f in &s.sim.flows {
            println!(
                "  flow {}: {} packets sent, {} delivered, {:.1} Mbit/s delivered",
                f.name, f.packets_sent, f.packets_delivered, f.delivered_mbps
            );
        }
        if let Some(dir) = &args.out {
            println!("outputs in {}", dir.display());
        }
    }
    Ok(())
}
