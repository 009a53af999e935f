//! `polypath gw server|client`: the QoS-aware multipath gateway (polypath-gateway).

use crate::feed::FeedArgs;
use crate::setup::{VerifyArgs, client_tls_for, server_tls_for, write_certificate};
use clap::{Args, Subcommand};
use polypath_gateway::client::{ClientOptions, InterfaceArg};
use polypath_gateway::pmf::ClockMode;
use polypath_gateway::server::{ServerConfig, ServerOptions};
use polypath_quic::crypto::CipherSuites;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `polypath gw ...`.
#[derive(Debug, Subcommand)]
pub enum GwCommand {
    /// The server gateway: authenticates client gateways, gives each its address and
    /// policy, and routes (or NATs) their traffic between the tunnel and its network.
    Server(ServerArgs),
    /// The client gateway: carries the IP traffic routed into its TUN device to the server
    /// gateway over one Multipath QUIC connection with a path per interface.
    Client(ClientArgs),
}

/// `polypath gw server`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The configuration file (JSON: listen address, tunnel, routes, NAT, clients with
    /// their tokens, policies and address pools); SIGHUP reloads it.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Certificate chain (PEM). Without --cert/--key a self-signed certificate is made.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Write the generated self-signed certificate (PEM) here, for `gw client --pin`.
    #[arg(long, value_name = "FILE", conflicts_with = "cert")]
    cert_out: Option<PathBuf>,
    /// Serve Prometheus metrics (/metrics) and the JSON status (/status) on this address.
    #[arg(long, value_name = "ADDR")]
    status: Option<SocketAddr>,
    /// Congestion controller of each path: bbr (the default), cubic, newreno, lia, olia.
    /// The tunnel carries congestion-controlled traffic: a loss-based controller grows its
    /// window into the link's queue, so the minimum-RTT-first aggregation never spills to
    /// the second path and queueing delay grows; BBR keeps the window near the path's
    /// bandwidth-delay product.
    #[arg(long, default_value = "bbr")]
    cc: String,
}

/// `polypath gw client`.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The server gateway's address (reached over the first --interface).
    #[arg(long, value_name = "ADDR")]
    server: SocketAddr,
    /// An interface, `NAME=LOCAL_IP` or `NAME=LOCAL_IP@SERVER_IP` (the server's address to
    /// use over it); `NAME` or `NAME@SERVER_IP` take the address of network device NAME;
    /// repeatable, one QUIC path each; the first carries the handshake.
    #[arg(long = "interface", value_name = "NAME[=IP][@IP]", required = true)]
    interfaces: Vec<InterfaceArg>,
    /// The client's name, as the server's configuration lists it.
    #[arg(long)]
    name: String,
    /// The pre-shared token.
    #[arg(
        long,
        conflicts_with = "token_file",
        required_unless_present = "token_file"
    )]
    token: Option<String>,
    /// A file holding the pre-shared token (its first line).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    verify: VerifyArgs,
    /// The TUN device to create.
    #[arg(long, default_value = "gw0")]
    tun: String,
    /// Serve Prometheus metrics (/metrics) and the JSON status (/status) on this address.
    #[arg(long, value_name = "ADDR")]
    status: Option<SocketAddr>,
    /// Write every QoS decision as a JSON line to this file.
    #[arg(long, value_name = "FILE")]
    decision_log: Option<PathBuf>,
    #[command(flatten)]
    feed: FeedArgs,
    /// One-way delays: `synchronised` clocks (offset zero) or the offset `estimated` from
    /// each probe exchange (symmetric paths assumed).
    #[arg(long, default_value = "synchronised", value_parser = parse_clock)]
    clock: ClockMode,
    /// Congestion controller of each path: bbr (the default), cubic, newreno, lia, olia.
    /// The tunnel carries congestion-controlled traffic: a loss-based controller grows its
    /// window into the link's queue, so the minimum-RTT-first aggregation never spills to
    /// the second path and queueing delay grows; BBR keeps the window near the path's
    /// bandwidth-delay product.
    #[arg(long, default_value = "bbr")]
    cc: String,
}

fn parse_clock(s: &str) -> Result<ClockMode, String> {
    match s {
        "synchronised" | "synchronized" | "synced" => Ok(ClockMode::Synchronised),
        "estimated" => Ok(ClockMode::Estimated),
        _ => Err(format!("{s:?}: expected synchronised or estimated")),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// Runs a `gw` subcommand.
pub fn run(cmd: GwCommand) -> Result<(), String> {
    match cmd {
        GwCommand::Server(a) => {
            // The configuration is checked before anything is set up.
            let config = ServerConfig::load(&a.config).map_err(|e| e.to_string())?;
            let (tls, generated) = server_tls_for(
                a.cert.as_deref(),
                a.key.as_deref(),
                config.listen,
                &[polypath_gateway::ALPN],
                CipherSuites::All,
            )?;
            if let (Some(path), Some(cert)) = (&a.cert_out, &generated) {
                write_certificate(path, cert)?;
            }
            runtime()?.block_on(polypath_gateway::server::run(ServerOptions {
                config: a.config,
                tls,
                status: a.status,
                cc: a.cc,
            }))
        }
        GwCommand::Client(a) => {
            let token = match (&a.token, &a.token_file) {
                (Some(t), _) => t.clone(),
                (None, Some(f)) => std::fs::read_to_string(f)
                    .map_err(|e| format!("{}: {e}", f.display()))?
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string(),
                (None, None) => return Err("give --token or --token-file".into()),
            };
            let tls = client_tls_for(&a.verify, polypath_gateway::ALPN, CipherSuites::All)?;
            runtime()?.block_on(polypath_gateway::client::run(ClientOptions {
                server: a.server,
                interfaces: a.interfaces,
                name: a.name,
                token,
                tls,
                tun: a.tun,
                status: a.status,
                decision_log: a.decision_log,
                link_events: a.feed.socket(),
                clock: a.clock,
                cc: a.cc,
            }))
        }
    }
}
