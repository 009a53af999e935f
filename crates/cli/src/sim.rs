//! `polypath sim`: run scenario files in the deterministic simulator.

use clap::{Args, Subcommand};
use polypath_sim::RunOptions;
use std::path::PathBuf;

/// Simulator commands.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Run a scenario file and write its time series, completions and summary.
    Run(RunArgs),
}

/// `polypath sim run` (and, with the emulator's own flags, `polypath emu run`).
#[derive(Debug, Args)]
#[group(skip)]
pub struct RunArgs {
    /// The scenario (TOML; see scenarios/README.md).
    pub scenario: PathBuf,
    /// Seed (default: the scenario's `sim.seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory for flows.csv, paths.csv, links.csv, completions.csv and summary.json.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the link-layer event stream (JSON lines) of a scenario with a radio model.
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Show no progress.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs a simulator command.
pub fn run(cmd: SimCommand) -> Result<(), String> {
    match cmd {
        SimCommand::Run(args) => run_scenario(args),
    }
}

fn run_scenario(args: RunArgs) -> Result<(), String> {
    let opts = RunOptions {
        seed: args.seed,
        out_dir: args.out.clone(),
        progress: !args.quiet,
        events: args.events,
    };
    let report = polypath_sim::run(&args.scenario, &opts).map_err(|e| e.to_string())?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{json}");
    } else {
        let s = &report.summary;
        println!(
            "{}: {:.3} s simulated in {:.3} s wall ({:.1}x real time), output hash {}",
            args.scenario.display(),
            s.sim_time_s,
            report.wall_time_s,
            report.speedup,
            report.output_hash
        );
        if let Some(dir) = &args.out {
            println!("outputs in {}", dir.display());
        }
    }
    Ok(())
}
