//! `polypath`: one binary for everything polypath runs.
//!
//! ```text
//! polypath sim run SCENARIO.toml [--seed N] [--out DIR] [--events FILE] [--json]
//! polypath emu run SCENARIO.toml [--seed N] [--out DIR] [--events FILE] [--pcap] [--json]
//! polypath emu clean
//! polypath server [--listen ADDR] [--cert FILE --key FILE | --cert-out FILE] [--once] ...
//! polypath client --connect ADDR [--local ADDR]... [--size 100MB | --file PATH] [--download]
//!                 [--pin FILE | --ca FILE | --insecure] [--initial-paths all|first]
//! polypath bench loopback [--bytes N] [--paths 1|2] [--json]
//! polypath bench emu [--seconds N] [--json]
//! polypath bench server [--clients N] [--size BYTES] [--preload LIB] [--json]
//! polypath bench gateway [--clients 50] [--scenarios scenarios/gateway] [--json]
//! polypath bench sim [--repeat N] [--only NAME,...] [--scenarios DIR] [--json]
//! polypath relay --to ADDR [--listen ADDR] [--loss 0.05] [--seed N] [--duration SECONDS]
//! polypath tcp recv [--listen ADDR:PORT] [--once] [--mptcp] [--cc NAME] [--interval 1s]
//!                   [--json] [--csv FILE]
//! polypath tcp send --connect ADDR:PORT [--bind ADDR] [--bytes N | --time DURATION]
//!                   [--rate 100Mbit/s [--message-size 100B]] [--mptcp] [--cc NAME]
//!                   [--interval 1s] [--json] [--csv FILE]
//! polypath gw server --config FILE [--cert FILE --key FILE | --cert-out FILE] [--status ADDR]
//! polypath gw client --server ADDR --interface NAME=IP[@IP]... --name NAME
//!                    (--token T | --token-file F) (--pin FILE | --ca FILE | --insecure)
//!                    [--tun gw0] [--status ADDR] [--decision-log FILE]
//! polypath udp send --to ADDR:PORT --count N [--rate PPS] [--size BYTES]
//! polypath udp recv --listen ADDR:PORT --expect N [--idle 2s]
//! polypath m2ho run [--link-events SOCKET | --events-file FILE | --events-stdin] [--queue N]
//!                   [--param KEY=VALUE]... [--stats FILE] [--csv FILE] [--duration D] [--json]
//! polypath m2ho clean
//! polypath m2ho replay EVENTS.jsonl [--predictor m2ho|naive|command] [--param KEY=VALUE]...
//! ```
//!
//! `server`, `client` and `bench` take `--scheduler NAME` and `--cc NAME`; `server` and
//! `client` also `--path-manager NAME`, `--weights LIST` (per-path weights for `wrr`),
//! `--weights-at TIME=LIST` (new weights at a time of a running connection) and
//! `--qlog DIR`, `--rate RATE` (the sending application's rate limit, e.g. `100Mbit/s`:
//! the client's on an upload, the server's on a download; `--message-size SIZE` its
//! writes),
//! `--path-manager-param KEY=VALUE` and `--link-events SOCKET` (the host's
//! link-event feed, default `$POLYPATH_LINK_EVENTS`: link-layer events applied to the
//! connection as in the simulator, e.g. for LAMP5G make-before-break with
//! `--path-manager lamp5g --initial-paths first`). `tcp` is kernel TCP or MPTCP
//! (`--mptcp`), not polypath's own transport: the emulator's iperf3-like bulk tool, with the
//! kernel congestion controller `--cc NAME`. `SSLKEYLOGFILE` in the environment appends TLS
//! secrets to that file.
//!
//! Logs go to stderr; `RUST_LOG` sets their level (default `warn`).

mod bench;
mod bench_emu;
mod bench_gateway;
mod bench_server;
mod bench_sim;
mod client;
mod emu;
mod feed;
mod gw;
mod m2ho;
mod relay;
mod server;
mod setup;
mod sim;
mod tcp;
mod transfer;
mod udp;

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
    /// The real-time emulator: the scenario's hosts as network namespaces, real processes.
    #[command(subcommand)]
    Emu(emu::EmuCommand),
    /// Serve transfers over (Multipath) QUIC to `polypath client`s, many at once.
    Server(server::ServerArgs),
    /// Transfer one object to or from a `polypath server`, verified with SHA-256, and print
    /// a JSON summary.
    Client(client::ClientArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// A UDP relay that drops datagrams at random (seeded), for loss on loopback.
    Relay(relay::RelayArgs),
    /// Kernel TCP / MPTCP bulk transfers, iperf3-like: goodput, RTT, cwnd, retransmissions.
    #[command(subcommand)]
    Tcp(tcp::TcpCommand),
    /// The QoS-aware multipath gateway (CHYMP / MPF-Gateway): `gw server`, `gw client`.
    #[command(subcommand)]
    Gw(gw::GwCommand),
    /// A numbered UDP stream at a fixed rate and its receiver: loss, duplicates, the
    /// longest gap between deliveries, one-way delays.
    #[command(subcommand)]
    Udp(udp::UdpCommand),
    /// M2HO: keep this host's kernel TCP fast across 5G handovers (NFQUEUE shim fed with
    /// link-layer events), its cleanup, and a replay of link events through its predictor.
    #[command(subcommand)]
    M2ho(m2ho::M2hoCommand),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(cmd) => sim::run(cmd),
        Command::Emu(cmd) => emu::run(cmd),
        Command::Server(args) => server::run(args),
        Command::Client(args) => client::run(args),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Relay(args) => relay::run(args),
        Command::Tcp(cmd) => tcp::run(cmd),
        Command::Gw(cmd) => gw::run(cmd),
        Command::Udp(cmd) => udp::run(cmd),
        Command::M2ho(cmd) => m2ho::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The example systemd units start the gateway with options this binary takes.
    #[test]
    fn the_example_systemd_units_parse() {
        for unit in [
            include_str!("../../gateway/dist/polypath-gw-server.service"),
            include_str!("../../gateway/dist/polypath-gw-client.service"),
        ] {
            let exec = unit.split("ExecStart=").nth(1).expect("an ExecStart line");
            let mut line = String::new();
            for l in exec.lines() {
                line += l.trim_end_matches('\\');
                if !l.ends_with('\\') {
                    break;
                }
            }
            let mut args: Vec<&str> = line.split_whitespace().collect();
            args[0] = "polypath";
            Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
        // Subcommands are built (and checked) only when parsed: parse each one's help.
        for args in [
            &["polypath", "emu", "run", "--help"][..],
            &["polypath", "sim", "run", "--help"],
            &["polypath", "bench", "emu", "--help"],
            &["polypath", "bench", "sim", "--help"],
            &["polypath", "tcp", "send", "--help"],
            &["polypath", "client", "--help"],
            &["polypath", "server", "--help"],
            &["polypath", "gw", "server", "--help"],
            &["polypath", "gw", "client", "--help"],
            &["polypath", "udp", "recv", "--help"],
            &["polypath", "m2ho", "run", "--help"],
            &["polypath", "m2ho", "replay", "--help"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp,
                "{args:?}: {e}"
            );
        }
    }
}
