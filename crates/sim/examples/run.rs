//! Runs a scenario file and prints the report as JSON, like
//! `polypath sim run SCENARIO.toml --json` will.
//!
//! ```text
//! cargo run --release -p polypath-sim --example run -- scenarios/backhaul-3000.toml [--seed N] [--out DIR]
//! cargo run --release -p polypath-sim --example run -- scenarios/handover-two-gnb.toml --events events.jsonl
//! ```
//!
//! `--events FILE` writes the link-layer event stream of a scenario with `[radio]` as
//! JSON lines. The report's `radio` key has the handover figures.

use std::path::PathBuf;
use std::process::ExitCode;

use polypath_sim::{RunOptions, run};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut scenario = None;
    let mut opts = RunOptions {
        progress: true,
        ..RunOptions::default()
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => opts.seed = args.next().and_then(|s| s.parse().ok()),
            "--out" => opts.out_dir = args.next().map(PathBuf::from),
            "--events" => opts.events = args.next().map(PathBuf::from),
            _ => scenario = Some(PathBuf::from(a)),
        }
    }
    let Some(path) = scenario else {
        eprintln!("usage: run SCENARIO.toml [--seed N] [--out DIR] [--events FILE]");
        return ExitCode::FAILURE;
    };
    match run(&path, &opts) {
        Ok(report) => match serde_json::to_string_pretty(&report) {
            Ok(s) => {
                println!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
