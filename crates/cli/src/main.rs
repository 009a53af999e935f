//! `polypath`: one binary for everything polypath runs.
//!
//! ```text
//! polypath sim run SCENARIO.toml [--seed N] [--out DIR] [--events FILE] [--json]
//! ```

mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// polypath: multipath transport for heterogeneous, disruption-prone 5G networks.
#[derive(Debug, Parser)]
#[command(name = "polypath", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The deterministic network simulator.
    #[command(subcommand)]
    Sim(sim::SimCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(cmd) => sim::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
