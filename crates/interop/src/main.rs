//! `polypath-interop`: runs the interop matrix against noq over loopback UDP and prints
//! the results (a table, or one JSON object with `--json`). Exits with status 1 if any case
//! failed. With `--runner`, runs the QUIC Interop Runner's endpoint contract instead
//! (`interop/runner/run_endpoint.sh` against noq, see `polypath_interop::runner`) and
//! prints its table of cases by direction.
//!
//! With `POLYPATH_INTEROP_QLOG=DIR` in the environment, the matrix's polypath endpoints
//! write qlog files to `DIR`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use polypath_interop::{Case, MatrixOptions, Sizes, run_matrix};

/// Interop matrix: polypath against noq over loopback UDP, both directions.
#[derive(Debug, Parser)]
#[command(
    name = "polypath-interop",
    version,
    after_help = "Environment: POLYPATH_INTEROP_QLOG=DIR makes the matrix's polypath endpoints write qlog files to DIR."
)]
struct Args {
    /// Print one JSON object {"cases":[...]} instead of a table.
    #[arg(long)]
    json: bool,
    /// Run only these cases (repeatable). Known: handshake, retry, upload, download,
    /// streams, stream-reset, datagrams, key-update, close, chacha20, ipv6, hq-interop,
    /// multiplexing, resumption, zero-rtt,
    /// mp-handshake, mp-second-path,
    /// mp-path-status, mp-upload, mp-download, mp-abandon-initial, mp-server-abandon,
    /// mp-reopen, mp-key-update.
    #[arg(long = "case", value_name = "NAME", value_parser = parse_case)]
    cases: Vec<Case>,
    /// Bytes of each stream transfer.
    #[arg(long, default_value_t = Sizes::default().transfer_bytes)]
    transfer_bytes: usize,
    /// Datagrams sent each way in the datagrams case.
    #[arg(long, default_value_t = Sizes::default().datagrams)]
    datagrams: usize,
    /// Seconds after which a case fails as timed out.
    #[arg(long, default_value_t = 60)]
    case_timeout: u64,
    /// Run the interop runner's endpoint contract (run_endpoint.sh against noq) instead of
    /// the matrix.
    #[arg(long)]
    runner: bool,
    /// With --runner: only these test cases (repeatable); default all of
    /// `polypath_interop::runner::CASES`.
    #[arg(long = "runner-case", value_name = "NAME", requires = "runner", value_parser = parse_runner_case)]
    runner_cases: Vec<String>,
    /// With --runner: the polypath binary the script runs (default: the one beside this
    /// binary, or $POLYPATH_BIN).
    #[arg(long, value_name = "FILE", requires = "runner")]
    polypath: Option<std::path::PathBuf>,
}

fn parse_runner_case(name: &str) -> Result<String, String> {
    if polypath_interop::runner::CASES.contains(&name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "unknown runner case {name:?}; known: {}",
            polypath_interop::runner::CASES.join(", ")
        ))
    }
}

fn run_runner(runtime: &tokio::runtime::Runtime, args: &Args) -> ExitCode {
    let mut options = polypath_interop::runner::HarnessOptions::for_this_checkout();
    if !args.runner_cases.is_empty() {
        options.cases = args.runner_cases.clone();
    }
    if let Some(p) = &args.polypath {
        options.polypath = p.clone();
    }
    options.timeout = Duration::from_secs(args.case_timeout);
    if !options.polypath.is_file() {
        eprintln!(
            "polypath-interop: no polypath binary at {} (build it: cargo build -p polypath, \
             or pass --polypath)",
            options.polypath.display()
        );
        return ExitCode::FAILURE;
    }
    let rows = runtime.block_on(polypath_interop::runner::run_harness(&options));
    print!("{}", polypath_interop::runner::table(&rows));
    if rows
        .iter()
        .any(|r| matches!(r.outcome, polypath_interop::runner::Outcome::Fail(_)))
    {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn parse_case(name: &str) -> Result<Case, String> {
    Case::from_name(name).ok_or_else(|| {
        let known: Vec<_> = Case::ALL.iter().map(|c| c.name()).collect();
        format!("unknown case {name:?}; known: {}", known.join(", "))
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = MatrixOptions {
        cases: if args.cases.is_empty() {
            Case::ALL.to_vec()
        } else {
            args.cases.clone()
        },
        sizes: Sizes {
            transfer_bytes: args.transfer_bytes,
            datagrams: args.datagrams,
        },
        case_timeout: Duration::from_secs(args.case_timeout),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("polypath-interop: cannot start the Tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.runner {
        return run_runner(&runtime, &args);
    }
    let report = runtime.block_on(run_matrix(&options));
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    if report.all_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
