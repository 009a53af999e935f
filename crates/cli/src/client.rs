//! `polypath client`: one transfer to or from a `polypath server`, verified with SHA-256 at
//! both ends, summarised as JSON on stdout.

use crate::feed::{FeedArgs, FeedCounts, LinkEvents};
use crate::setup::{
    AppProtocol, End, TransportArgs, VerifyArgs, WeightChangeReport, client_tls, parse_alpn,
};
use crate::transfer::{
    CHUNK, ConnectionReport, DIGEST_LEN, Direction, MAX_REPORT_LEN, Request, STATUS_OK,
    confirm_upload, goodput_mbps, parse_size, read_exact, receive_object, send_generated,
    write_failed,
};
use clap::{Args, ValueEnum};
use polypath_io::{Connection, Endpoint, PathStatus, SendStream};
use polypath_quic::ClientConfig;
use polypath_quic::sched::PathState;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// How long the client waits for extra paths to be validated before it starts anyway.
const PATH_VALIDATION_WAIT: Duration = Duration::from_secs(3);
/// How long the client waits for its connection to close cleanly at the end.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// Object size when neither --size nor an upload --file is given.
const DEFAULT_SIZE: u64 = 100_000_000;

/// `polypath client`.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The server: `HOST:PORT`, HOST an IP address or a name to resolve (`[::1]:4433` for
    /// IPv6). Default with --url: the first URL's host and port.
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "urls")]
    connect: Option<String>,
    /// The application protocol (ALPN): `polypath-transfer/1` (the default) or `hq-interop`
    /// (the default with --url).
    #[arg(long, value_name = "PROTOCOL", value_parser = parse_alpn)]
    alpn: Option<AppProtocol>,
    /// hq-interop: a file to download, `https://HOST[:PORT]/PATH`, repeatable; all are
    /// requested at once, one stream each, and saved under --downloads at their path.
    #[arg(long = "url", value_name = "URL")]
    urls: Vec<String>,
    /// hq-interop: where downloaded files are saved.
    #[arg(long, value_name = "DIR", default_value = ".")]
    downloads: PathBuf,
    /// hq-interop: split the --url list over two connections, one after the other: the
    /// first downloads the first URL and receives the server's session ticket, the second
    /// resumes that TLS session (no certificate, RFC 8446 section 2.2) and downloads the
    /// rest (the QUIC Interop Runner's `resumption` case). Tickets live in this process's
    /// memory only.
    #[arg(long, requires = "urls")]
    resume: bool,
    /// hq-interop: as --resume, and the second connection sends its requests in 0-RTT
    /// packets (early data) when the server's ticket allows it (`polypath server
    /// --zero-rtt`); a server that rejects them gets them again after the handshake. Early
    /// data can be replayed by an attacker (RFC 9001 section 9.2): only idempotent
    /// requests (HTTP/0.9 GETs) go in it.
    #[arg(long, requires = "urls")]
    zero_rtt: bool,
    /// Local address to send from, repeatable: one path per address, Multipath QUIC when
    /// more than one; the first carries the handshake. Default: any address, free port.
    #[arg(long = "local", value_name = "ADDR")]
    locals: Vec<SocketAddr>,
    /// The server address of the path from each --local after the first, in order,
    /// repeatable (a server with one address per link); default: the --connect address.
    #[arg(long = "remote", value_name = "ADDR")]
    remotes: Vec<SocketAddr>,
    /// Object size (e.g. 100MB, 64MiB; MB = 10^6 bytes). Default 100MB, or the --file
    /// size for an upload.
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Upload this file instead of generated data; with --download, write the received
    /// object here.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Have the server send the object.
    #[arg(long)]
    download: bool,
    /// Server name for TLS (SNI and, with --ca, certificate verification). Default: the
    /// host name of --connect, or `localhost` when --connect gives an IP address (the
    /// name in `polypath server`'s generated certificate).
    #[arg(long)]
    server_name: Option<String>,
    /// Give up when the handshake has not completed this long after the first Initial
    /// (separate from the idle timeout; a closed port, reported by ICMP, fails at once).
    #[arg(long, default_value = "10s", value_parser = polypath_scenario::units::parse_duration)]
    handshake_timeout: Duration,
    /// Which paths the client opens at the start: `all` (one per --local address), or
    /// `first` (only the handshake path; the path manager, e.g. lamp5g fed by
    /// --link-events, adds the others), as the simulator's `initial_paths` flow option.
    #[arg(long, value_enum, default_value_t = InitialPaths::All)]
    initial_paths: InitialPaths,
    /// Offer Multipath QUIC (initial_max_path_id) even with a single --local address, for
    /// paths opened later (by the path manager) or by the server; on by itself with two or
    /// more --local addresses. Some stacks (picoquic) use multipath only when both sides
    /// offer it.
    #[arg(long)]
    multipath: bool,
    /// Abandon path ID (PATH_ABANDON) once it has received SIZE bytes, e.g. `1@64kB`: a
    /// path in use, in the middle of the transfer (the interop runner's multipath-abandon
    /// case).
    #[arg(long, value_name = "ID@SIZE", value_parser = parse_abandon)]
    abandon_path: Option<(u32, u64)>,
    /// Migrate the first path to local address ADDR (bound beside the --local ones, port 0
    /// for any) once it has received SIZE bytes, e.g. `192.168.2.10:0@5MB`: an active
    /// migration of single-path QUIC (RFC 9000 section 9.2), the baseline that multipath
    /// handovers are compared against. The server must not have disabled migration.
    #[arg(long, value_name = "ADDR@SIZE", value_parser = parse_migrate)]
    migrate_to: Option<(SocketAddr, u64)>,
    /// Stay on the server's address even if the server offers a preferred address (by
    /// default the client validates one of the family in use once the handshake is
    /// confirmed and moves there, RFC 9000 section 9.6).
    #[arg(long)]
    no_preferred_address: bool,
    #[command(flatten)]
    feed: FeedArgs,
    #[command(flatten)]
    verify: VerifyArgs,
    #[command(flatten)]
    transport: TransportArgs,
}

/// Parses `--abandon-path ID@SIZE`.
fn parse_abandon(text: &str) -> Result<(u32, u64), String> {
    let (id, size) = text
        .split_once('@')
        .ok_or_else(|| format!("{text:?}: expected ID@SIZE, e.g. 1@64kB"))?;
    let id = id
        .parse()
        .map_err(|_| format!("{text:?}: {id:?} is not a path ID"))?;
    Ok((id, parse_size(size)?))
}

/// Parses `--migrate-to ADDR@SIZE`.
fn parse_migrate(text: &str) -> Result<(SocketAddr, u64), String> {
    let (addr, size) = text
        .rsplit_once('@')
        .ok_or_else(|| format!("{text:?}: expected ADDR@SIZE, e.g. 192.168.2.10:0@5MB"))?;
    let addr = addr
        .parse()
        .map_err(|_| format!("{text:?}: {addr:?} is not an address with a port"))?;
    Ok((addr, parse_size(size)?))
}

/// Runs `act` once path `id` has received `bytes` (checked every 5 ms); stops with the
/// returned guard.
fn when_path_received(
    conn: &Connection,
    id: u32,
    bytes: u64,
    act: impl FnOnce(&Connection) + Send + 'static,
) -> AbortOnDrop {
    let conn = conn.clone();
    let id = polypath_quic::PathId(id);
    AbortOnDrop(tokio::spawn(async move {
        loop {
            let received = conn
                .paths()
                .iter()
                .find(|p| p.snapshot.id == id)
                .map_or(0, |p| p.stats.udp_bytes_received);
            if received >= bytes {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        act(&conn);
    }))
}

/// The `--abandon-path` and `--migrate-to` actions, each once its path has received its
/// bytes; they stop when the returned guards are dropped.
fn schedule_path_actions(
    args: &ClientArgs,
    conn: &Connection,
    endpoint: &Endpoint,
) -> Vec<AbortOnDrop> {
    let mut guards = Vec::new();
    if let Some((id, bytes)) = args.abandon_path {
        guards.push(when_path_received(conn, id, bytes, move |conn| match conn
            .abandon_path(polypath_quic::PathId(id), 0)
        {
            Ok(()) => tracing::info!(id, "path abandoned (--abandon-path)"),
            Err(e) => eprintln!("warning: --abandon-path {id}: {e}"),
        }));
    }
    if let (Some((_, bytes)), Some(&to)) = (args.migrate_to, endpoint.local_addrs().last()) {
        guards.push(when_path_received(conn, 0, bytes, move |conn| {
            match conn.migrate(polypath_quic::PathId::ZERO, to) {
                Ok(()) => tracing::info!(%to, "path 0 migrated (--migrate-to)"),
                Err(e) => eprintln!("warning: --migrate-to {to}: {e}"),
            }
        }));
    }
    guards
}

/// The endpoint's addresses that paths start from: all but the `--migrate-to` socket.
fn path_locals(args: &ClientArgs, endpoint: &Endpoint) -> Vec<SocketAddr> {
    let mut bound = endpoint.local_addrs();
    if args.migrate_to.is_some() {
        bound.pop();
    }
    bound
}

/// A task aborted when this guard is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `--initial-paths`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InitialPaths {
    /// A path from every --local address.
    All,
    /// Only the first path; the path manager opens the others.
    First,
}

/// One path of the client's connection in the summary: when it was opened, validated and
/// abandoned, in seconds since the client started connecting.
#[derive(Debug, Serialize)]
struct ClientPath {
    id: u32,
    local: Option<String>,
    remote: Option<String>,
    /// `validating`, `validated`, `abandoned`, or `discarded` (abandoned and forgotten).
    state: &'static str,
    opened_s: f64,
    validated_s: Option<f64>,
    abandoned_s: Option<f64>,
    /// Payload bytes the client sent on the path (for a discarded path: until it was
    /// abandoned).
    bytes_sent: u64,
    /// Packets the client received on the path (likewise).
    packets_received: u64,
}

/// The JSON summary printed at the end.
#[derive(Debug, Serialize)]
struct Summary {
    direction: Direction,
    bytes: u64,
    seconds: f64,
    goodput_mbps: f64,
    /// The client's handshake duration, milliseconds.
    handshake_ms: f64,
    sha256: String,
    verified: bool,
    multipath: bool,
    scheduler: String,
    cc: String,
    /// The connection of the side that sent the object (the client for an upload, the
    /// server for a download): its congestion and per-path figures, its addresses.
    sender: ConnectionReport,
    /// The client's paths with their times (whichever side sent the data).
    client_paths: Vec<ClientPath>,
    /// The --weights-at changes: when due, whether applied, each path's bytes by then.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    weight_changes: Vec<WeightChangeReport>,
    /// What the link-event feed did (with --link-events).
    #[serde(skip_serializing_if = "Option::is_none")]
    link_events: Option<FeedCounts>,
}

/// The JSON summary of an hq-interop client.
#[derive(Debug, Serialize)]
struct HqSummary {
    protocol: AppProtocol,
    files: Vec<polypath_cli::hq::Fetched>,
    bytes: u64,
    seconds: f64,
    goodput_mbps: f64,
    handshake_ms: f64,
    multipath: bool,
    /// The client's view of its (last) connection.
    connection: ConnectionReport,
    /// With --resume: the connections before the last one (the one that got the ticket).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    earlier_connections: Vec<ConnectionReport>,
}

/// Runs one transfer (or the hq-interop downloads) and prints its summary.
pub fn run(args: ClientArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let json = match protocol(&args)? {
        AppProtocol::Transfer => {
            let summary = runtime.block_on(transfer(&args))?;
            serde_json::to_string_pretty(&summary)
        }
        AppProtocol::Hq => {
            let summary = runtime.block_on(hq_downloads(&args))?;
            serde_json::to_string_pretty(&summary)
        }
    }
    .map_err(|e| e.to_string())?;
    println!("{json}");
    Ok(())
}

/// The protocol: --alpn, else hq-interop with --url, else the transfer protocol.
fn protocol(args: &ClientArgs) -> Result<AppProtocol, String> {
    let protocol = args.alpn.unwrap_or(if args.urls.is_empty() {
        AppProtocol::Transfer
    } else {
        AppProtocol::Hq
    });
    match protocol {
        AppProtocol::Hq if args.urls.is_empty() => {
            Err("--alpn hq-interop needs at least one --url to download".into())
        }
        AppProtocol::Transfer if !args.urls.is_empty() => {
            Err("--url is for hq-interop (--alpn hq-interop)".into())
        }
        p => Ok(p),
    }
}

/// The `--connect` address, or the first URL's authority.
fn connect_to(args: &ClientArgs) -> Result<String, String> {
    match (&args.connect, args.urls.first()) {
        (Some(c), _) => Ok(c.clone()),
        (None, Some(url)) => polypath_cli::hq::split_url(url).map(|(authority, _)| authority),
        (None, None) => Err("--connect HOST:PORT is needed".into()),
    }
}

/// Resolves the server and connects to the first of its addresses that answers, with the
/// TLS configuration `tls` (whose session store keeps tickets between connections); with
/// `early`, returns before the handshake completes if the connection can send early data.
async fn connect_any(
    args: &ClientArgs,
    tls: &Arc<rustls::ClientConfig>,
    multipath: bool,
    early: bool,
) -> Result<(Endpoint, Connection, SocketAddr), String> {
    let (candidates, server_name) = resolve_server(
        &connect_to(args)?,
        args.server_name.as_deref(),
        &args.locals,
    )
    .await?;
    // A name may resolve to several addresses: try them in turn, as TCP clients do.
    let mut failures = Vec::new();
    for server in candidates {
        match connect(args, server, &server_name, multipath, tls.clone(), early).await {
            Ok(c) => return Ok(c),
            Err(e) => failures.push(format!("connecting to {server}: {e}")),
        }
    }
    Err(failures.join("; "))
}

/// hq-interop: downloads every --url over parallel streams into --downloads; with
/// --resume, the first URL on a first connection and the rest on a second one that resumes
/// the first one's TLS session.
async fn hq_downloads(args: &ClientArgs) -> Result<HqSummary, String> {
    let paths = args
        .urls
        .iter()
        .map(|u| polypath_cli::hq::split_url(u).map(|(_, path)| path))
        .collect::<Result<Vec<_>, _>>()?;
    let two_connections = args.resume || args.zero_rtt;
    if two_connections && paths.len() < 2 {
        return Err("--resume and --zero-rtt need two --url at least (one per connection)".into());
    }
    // One TLS configuration for every connection: its session store carries the ticket
    // from the first connection to the second.
    let mut tls = client_tls(
        &args.verify,
        AppProtocol::Hq,
        args.transport.cipher.suites(),
    )?;
    if args.zero_rtt {
        let mut early = Arc::unwrap_or_clone(tls);
        polypath_quic::crypto::enable_early_data(&mut early);
        tls = Arc::new(early);
    }
    let started = Instant::now();
    let groups: Vec<&[String]> = if two_connections {
        let (first, rest) = paths.split_at(1);
        vec![first, rest]
    } else {
        vec![&paths]
    };
    let mut files = Vec::new();
    let mut reports = Vec::new();
    let mut last = None;
    for (index, group) in groups.into_iter().enumerate() {
        // The first connection gets the ticket; only a later one can send early data.
        let early = args.zero_rtt && index > 0;
        let (fetched, conn) = hq_connection(args, &tls, group, early).await?;
        files.extend(fetched);
        reports.push(ConnectionReport::of(&conn, "client"));
        last = Some(conn);
    }
    let seconds = started.elapsed().as_secs_f64();
    let (Some(conn), Some(connection)) = (last, reports.pop()) else {
        return Err("no connection was made".into());
    };
    let bytes = files.iter().map(|f| f.bytes).sum();
    Ok(HqSummary {
        protocol: AppProtocol::Hq,
        files,
        bytes,
        seconds,
        goodput_mbps: goodput_mbps(bytes, seconds),
        handshake_ms: connection.handshake_ms,
        multipath: conn.is_multipath(),
        connection,
        earlier_connections: reports,
    })
}

/// One hq-interop connection: connects, opens the extra paths, downloads `paths`, closes
/// and waits for the close to complete. Returns the files and the (closed) connection.
/// With `early`, the requests go out in 0-RTT packets if the session allows it.
async fn hq_connection(
    args: &ClientArgs,
    tls: &Arc<rustls::ClientConfig>,
    paths: &[String],
    early: bool,
) -> Result<(Vec<polypath_cli::hq::Fetched>, Connection), String> {
    let multipath = args.multipath || args.locals.len() > 1;
    let (endpoint, conn, _server) = connect_any(args, tls, multipath, early).await?;
    if args.locals.len() > 1 {
        let policy = args.transport.path_manager_policy()?;
        open_paths(
            &conn,
            &path_locals(args, &endpoint)[1..],
            &args.remotes,
            policy.traits.opens_paths,
            policy.traits.extra_paths,
        )
        .await?;
    }
    let actions = schedule_path_actions(args, &conn, &endpoint);
    let outcome = if conn.is_sending_early_data() {
        polypath_cli::hq::fetch_early(&conn, paths, &args.downloads).await
    } else {
        polypath_cli::hq::fetch(&conn, paths, &args.downloads).await
    };
    drop(actions);
    // Early requests were answered after the handshake; this only surfaces its failure.
    if early && let Err(e) = conn.handshake().await {
        return Err(format!("handshake: {e}"));
    }
    conn.close(0, b"done");
    let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
    outcome.map(|files| (files, conn))
}

async fn transfer(args: &ClientArgs) -> Result<Summary, String> {
    let direction = if args.download {
        Direction::Download
    } else {
        Direction::Upload
    };
    let size = match (&args.file, direction, args.size) {
        (Some(path), Direction::Upload, given) => {
            let len = std::fs::metadata(path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .len();
            if given.is_some_and(|g| g != len) {
                return Err(format!(
                    "--size {} differs from the size of {} ({len} bytes)",
                    given.unwrap_or_default(),
                    path.display()
                ));
            }
            len
        }
        (_, _, given) => given.unwrap_or(DEFAULT_SIZE),
    };
    let multipath = args.multipath || args.locals.len() > 1;
    let feed = LinkEvents::start(&args.feed).await?;
    let started = Instant::now();
    let tls = client_tls(
        &args.verify,
        AppProtocol::Transfer,
        args.transport.cipher.suites(),
    )?;
    let (endpoint, conn, server) = connect_any(args, &tls, multipath, false).await?;
    let bound = path_locals(args, &endpoint);
    let attached = feed.as_ref().map(|f| f.attach(&conn));
    tracing::info!(%server, "client connected");
    if args.locals.len() > 1 {
        match args.initial_paths {
            InitialPaths::All => {
                let policy = args.transport.path_manager_policy()?;
                open_paths(
                    &conn,
                    &bound[1..],
                    &args.remotes,
                    policy.traits.opens_paths,
                    policy.traits.extra_paths,
                )
                .await?;
            }
            InitialPaths::First if !conn.is_multipath() => {
                return Err("the server did not negotiate Multipath QUIC".into());
            }
            InitialPaths::First => {}
        }
    }
    // Weight changes count from here, once the initial paths are open: a change due at once
    // applies to every path, not to whichever had opened when its task first ran.
    let weight_changes = args.transport.schedule_weight_changes(&conn);
    let actions = schedule_path_actions(args, &conn, &endpoint);
    let outcome = run_transfer(&conn, args, direction, size).await;
    drop(actions);
    let client_paths = client_paths(&conn, started);
    let summary = outcome.map(|(seconds, digest, report)| Summary {
        direction,
        bytes: size,
        seconds,
        goodput_mbps: goodput_mbps(size, seconds),
        handshake_ms: conn
            .stats()
            .handshake_duration
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        sha256: hex::encode(digest),
        verified: true,
        multipath: conn.is_multipath(),
        scheduler: conn.scheduler_name(),
        cc: args.transport.cc.clone(),
        sender: report,
        client_paths,
        weight_changes: weight_changes.report(),
        link_events: feed.as_ref().map(LinkEvents::counts),
    });
    conn.close(0, b"done");
    drop(attached);
    drop(conn);
    let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
    summary
}

/// An endpoint on the --local addresses (or any address of `server`'s family) and a
/// connection from it to `server` whose handshake completed within --handshake-timeout.
async fn connect(
    args: &ClientArgs,
    server: SocketAddr,
    server_name: &str,
    multipath: bool,
    tls: Arc<rustls::ClientConfig>,
    early: bool,
) -> Result<(Endpoint, Connection, SocketAddr), String> {
    let locals = if args.locals.is_empty() {
        let any: IpAddr = if server.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            Ipv6Addr::UNSPECIFIED.into()
        };
        vec![SocketAddr::new(any, 0)]
    } else {
        args.locals.clone()
    };
    let locals: Vec<SocketAddr> = locals
        .into_iter()
        .chain(args.migrate_to.map(|(to, _)| to))
        .collect();
    let endpoint =
        Endpoint::client(&locals, args.transport.endpoint()?).map_err(|e| e.to_string())?;
    let bound = path_locals(args, &endpoint);
    let mut config = ClientConfig::new(tls);
    let mut transport = args.transport.transport(multipath, &bound, End::Client)?;
    Arc::make_mut(&mut transport).use_preferred_address = !args.no_preferred_address;
    config.transport = transport;
    let versions = args.transport.quic_versions(End::Client);
    config.version = versions[0];
    config.available_versions = versions;
    let connecting = async {
        if early {
            endpoint
                .connect_early_from(bound[0], config, server, server_name)
                .await
        } else {
            endpoint
                .connect_from(bound[0], config, server, server_name)
                .await
        }
    };
    match tokio::time::timeout(args.handshake_timeout, connecting).await {
        Ok(Ok(conn)) => Ok((endpoint, conn, server)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no handshake within {:?} (--handshake-timeout); is a polypath server \
             listening there, and can this host reach it?",
            args.handshake_timeout
        )),
    }
}

/// The server's candidate addresses from `--connect` (`HOST:PORT`, HOST an IP address or
/// a name; a name's addresses of the --local addresses' family, IPv4 first), and the TLS
/// server name: `--server-name`, else the host name, else `localhost` for an IP address.
async fn resolve_server(
    connect: &str,
    server_name: Option<&str>,
    locals: &[SocketAddr],
) -> Result<(Vec<SocketAddr>, String), String> {
    if let Ok(addr) = connect.parse::<SocketAddr>() {
        let name = server_name.unwrap_or("localhost").to_string();
        return Ok((vec![addr], name));
    }
    let (host, port) = connect
        .rsplit_once(':')
        .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        .ok_or_else(|| {
            format!(
                "--connect {connect:?}: expected HOST:PORT, e.g. localhost:4433 or 127.0.0.1:4433"
            )
        })?;
    let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host(connect)
        .await
        .map_err(|e| format!("--connect {connect:?}: cannot resolve {host:?}: {e}"))?
        .filter(|a| locals.first().is_none_or(|l| l.is_ipv4() == a.is_ipv4()))
        .collect();
    addrs.sort_by_key(|a| !a.is_ipv4());
    addrs.dedup();
    if addrs.is_empty() {
        return Err(format!(
            "--connect {connect:?}: {host:?} has no address of the --local addresses' family"
        ));
    }
    tracing::debug!(%host, port, ?addrs, "resolved");
    let name = server_name.unwrap_or(host).to_string();
    Ok((addrs, name))
}

/// The client's paths with their times since `started`.
fn client_paths(conn: &Connection, started: Instant) -> Vec<ClientPath> {
    let since = |t: Instant| t.saturating_duration_since(started).as_secs_f64();
    let live = conn.paths();
    conn.path_times()
        .into_iter()
        .map(|t| {
            let info = live.iter().find(|p| p.snapshot.id == t.id);
            // A discarded path keeps the counters it had when it was abandoned.
            let stats = info.map(|p| p.stats).or(t.stats_at_abandon);
            ClientPath {
                id: t.id.0,
                local: info
                    .map(|p| p.snapshot.local)
                    .or(t.local)
                    .map(|a| a.to_string()),
                remote: info
                    .map(|p| p.snapshot.remote)
                    .or(t.remote)
                    .map(|a| a.to_string()),
                state: match info.map(|p| p.snapshot.state) {
                    Some(PathState::Validating) => "validating",
                    Some(PathState::Validated) => "validated",
                    Some(PathState::Abandoned) => "abandoned",
                    None => "discarded",
                },
                opened_s: since(t.opened),
                validated_s: t.validated.map(since),
                abandoned_s: t.abandoned.map(since),
                bytes_sent: stats.map_or(0, |s| s.payload_bytes_sent),
                packets_received: stats.map_or(0, |s| s.packets_received),
            }
        })
        .collect()
}

/// Opens one path per extra local address with `status`, to the matching address of
/// `remotes` (the connection's remote address past its end) (unless the path manager opens
/// them itself, `by_path_manager`) and waits (bounded) until they are validated.
pub async fn open_paths(
    conn: &Connection,
    locals: &[SocketAddr],
    remotes: &[SocketAddr],
    by_path_manager: bool,
    status: PathStatus,
) -> Result<(), String> {
    if !conn.is_multipath() {
        return Err("the server did not negotiate Multipath QUIC".into());
    }
    if !by_path_manager {
        for (k, &local) in locals.iter().enumerate() {
            conn.open_path_to(local, remotes.get(k).copied(), status)
                .await
                .map_err(|e| format!("path from {local}: {e}"))?;
        }
    }
    let deadline = tokio::time::Instant::now() + PATH_VALIDATION_WAIT;
    loop {
        let paths = conn.paths();
        let pending = paths
            .iter()
            .filter(|p| p.snapshot.state == PathState::Validating)
            .count();
        let validated = paths
            .iter()
            .filter(|p| p.snapshot.state == PathState::Validated)
            .count();
        if pending == 0 && (!by_path_manager || validated > locals.len()) {
            let failed = locals.len() + 1 - paths.len();
            if failed > 0 {
                eprintln!("warning: {failed} path(s) failed validation; continuing without them");
            }
            return Ok(());
        }
        match tokio::time::timeout_at(deadline, conn.path_event()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("connection lost while opening paths: {e}")),
            Err(_) => {
                eprintln!(
                    "warning: {pending} path(s) not validated after {PATH_VALIDATION_WAIT:?}; starting anyway"
                );
                return Ok(());
            }
        }
    }
}

/// The transfer proper: returns the seconds it took, the object's SHA-256 and the sending
/// side's report.
async fn run_transfer(
    conn: &Connection,
    args: &ClientArgs,
    direction: Direction,
    size: u64,
) -> Result<(f64, [u8; DIGEST_LEN], ConnectionReport), String> {
    let start = Instant::now();
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|e| format!("cannot open a stream: {e}"))?;
    let request = Request { direction, size };
    send.write_all(&request.encode())
        .await
        .map_err(write_failed)?;
    match direction {
        Direction::Upload => {
            let digest = match &args.file {
                Some(path) => send_file(&mut send, path, size).await?,
                None => send_generated(&mut send, size, args.transport.app_rate()).await?,
            };
            confirm_upload(&mut send, &mut recv, &digest).await?;
            let seconds = start.elapsed().as_secs_f64();
            Ok((seconds, digest, ConnectionReport::of(conn, "client")))
        }
        Direction::Download => {
            let mut out = match &args.file {
                Some(path) => Some(std::io::BufWriter::new(
                    std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?,
                )),
                None => None,
            };
            let file_name = args
                .file
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let digest = receive_object(&mut recv, size, |chunk| match out.as_mut() {
                Some(w) => w
                    .write_all(chunk)
                    .map_err(|e| format!("writing {file_name}: {e}")),
                None => Ok(()),
            })
            .await?;
            if let Some(mut w) = out {
                w.flush()
                    .map_err(|e| format!("writing the output file: {e}"))?;
            }
            let trailer = read_exact(&mut recv, DIGEST_LEN).await?;
            let seconds = start.elapsed().as_secs_f64();
            send.write_all(&digest).await.map_err(write_failed)?;
            send.finish().map_err(write_failed)?;
            if trailer[..] != digest[..] {
                return Err(format!(
                    "SHA-256 mismatch: the server sent {}, the data received hashes to {}",
                    hex::encode(&trailer),
                    hex::encode(digest)
                ));
            }
            let status = read_exact(&mut recv, 1).await?;
            let report = recv
                .read_to_end(MAX_REPORT_LEN)
                .await
                .map_err(|e| format!("reading the server's report: {e}"))?;
            if status[0] != STATUS_OK {
                return Err("the server reports a SHA-256 mismatch".into());
            }
            let report: ConnectionReport = serde_json::from_slice(&report)
                .map_err(|e| format!("the server's report is not valid: {e}"))?;
            Ok((seconds, digest, report))
        }
    }
}

/// Sends a file of `size` bytes; returns its SHA-256.
async fn send_file(
    send: &mut SendStream,
    path: &Path,
    size: u64,
) -> Result<[u8; DIGEST_LEN], String> {
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut sent = 0u64;
    loop {
        let mut chunk = vec![0u8; CHUNK];
        let n = file
            .read(&mut chunk)
            .await
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        chunk.truncate(n);
        sent += n as u64;
        if sent > size {
            break;
        }
        hasher.update(&chunk);
        send.write_chunk(chunk.into()).await.map_err(write_failed)?;
    }
    if sent != size {
        return Err(format!(
            "{} changed size while being sent ({size} bytes expected)",
            path.display()
        ));
    }
    Ok(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        connect: &str,
        name: Option<&str>,
        locals: &[SocketAddr],
    ) -> Result<(Vec<SocketAddr>, String), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(resolve_server(connect, name, locals))
    }

    #[test]
    fn the_server_name_is_the_host_name_unless_given() {
        let v4: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (addrs, name) = resolve("localhost:4433", None, &[]).unwrap();
        assert_eq!(name, "localhost");
        assert!(
            addrs[0].is_ipv4() && addrs.iter().all(|a| a.port() == 4433),
            "{addrs:?}"
        );
        let (_, name) = resolve("localhost:4433", Some("example.org"), &[]).unwrap();
        assert_eq!(name, "example.org");
        // An IP address: `localhost`, the name in the server's generated certificate.
        let (addrs, name) = resolve("192.0.2.7:443", None, &[]).unwrap();
        assert_eq!(
            (addrs, name.as_str()),
            (vec!["192.0.2.7:443".parse().unwrap()], "localhost")
        );
        // Only the --local addresses' family.
        let (addrs, _) = resolve("localhost:4433", None, &[v4]).unwrap();
        assert!(addrs.iter().all(SocketAddr::is_ipv4), "{addrs:?}");
        assert!(
            resolve("[::1]", None, &[])
                .unwrap_err()
                .contains("HOST:PORT")
        );
    }
}
