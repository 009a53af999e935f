//! `polypath server`: serves transfers (see [`crate::transfer`]) and, with `--www`, files
//! over HTTP/0.9 (`hq-interop`, see [`polypath_cli::hq`]) to many clients at once, one task
//! per connection, each bounded by a handshake timeout and a read timeout. The ALPN protocol
//! the client picks decides which.

use crate::feed::{FeedArgs, LinkEvents};
use crate::setup::{
    AppProtocol, End, TransportArgs, WeightChangeReport, parse_alpn, server_tls, write_certificate,
};
use crate::transfer::{
    ConnectionReport, DIGEST_LEN, Direction, REQUEST_LEN, Request, STATUS_MISMATCH, STATUS_OK,
    expect_end, goodput_mbps, parse_size, read_exact, receive_object, send_generated, write_failed,
};
use clap::Args;
use polypath_io::{Connection, Endpoint};
use polypath_quic::ServerConfig;
use polypath_sim::traffic::AppRate;
use serde::Serialize;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the server waits for its connections to close when it exits (--once).
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// `polypath server`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address to listen on (port 0 picks a free port; the first line printed tells it).
    #[arg(long, default_value = "127.0.0.1:4433")]
    listen: SocketAddr,
    /// Certificate chain (PEM). Without --cert/--key a self-signed certificate for
    /// localhost and the listening IP is generated.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Write the generated self-signed certificate (PEM) here, for `polypath client --pin`.
    #[arg(long, value_name = "FILE", conflicts_with = "cert")]
    cert_out: Option<PathBuf>,
    /// Exit after the first connection ends (non-zero if its transfer failed); connections
    /// still being served then are closed.
    #[arg(long)]
    once: bool,
    /// Largest object a client may ask for.
    #[arg(long, default_value = "64GiB", value_parser = parse_size)]
    max_size: u64,
    /// A connection whose handshake has not completed this long after its first Initial
    /// is dropped.
    #[arg(long, default_value = "10s", value_parser = polypath_scenario::units::parse_duration)]
    handshake_timeout: Duration,
    /// A connection with no stream progress for this long (no stream data received and
    /// none of the server's data acknowledged) is closed; separate from the QUIC idle
    /// timeout, which keep-alives reset. Also how long the server waits, after its last
    /// response, for the client to close the connection.
    #[arg(long, default_value = "30s", value_parser = polypath_scenario::units::parse_duration)]
    read_timeout: Duration,
    /// Most connections served at once; Initials beyond it are ignored (the library's
    /// `max_incoming`), and a connection accepted while that many are served is closed
    /// at once with "server busy".
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// Validate client addresses with a Retry before creating any connection state
    /// (RFC 9000 section 8.1.2).
    #[arg(long)]
    retry: bool,
    /// Validate client addresses with a Retry automatically, only while at least this many
    /// handshakes are in progress (a load of spoofed or slow Initials); below it clients
    /// connect without the extra round trip.
    #[arg(long, value_name = "N", conflicts_with = "retry")]
    retry_above: Option<usize>,
    /// hq-interop: send session tickets that allow 0-RTT and accept the early data of a
    /// client resuming with one (its requests are read before the handshake completes;
    /// answers go after it). Anti-replay: a ticket is good for one resumption (the session
    /// is taken out of this process's memory when used), so a replayed first flight gets a
    /// full handshake and its early data rejected; an attacker racing the client with a
    /// copy can still have a request served twice, which HTTP/0.9 GETs of static files
    /// allow (RFC 9001 section 9.2).
    #[arg(long, requires = "www")]
    zero_rtt: bool,
    /// Serve the files of this directory over HTTP/0.9 (ALPN hq-interop): one `GET /path`
    /// per client stream, answered with the file and FIN; paths leaving the directory are
    /// refused. Every hq-interop connection gets one TLS session ticket (kept in this
    /// process's memory), so a client can resume on its next connection (`client
    /// --resume`); tickets allow no 0-RTT.
    #[arg(long, value_name = "DIR")]
    www: Option<PathBuf>,
    /// An application protocol to offer (ALPN), repeatable, in preference order:
    /// `polypath-transfer/1` or `hq-interop` (needs --www). Default: polypath-transfer/1,
    /// and hq-interop with --www.
    #[arg(long = "alpn", value_name = "PROTOCOL", value_parser = parse_alpn)]
    alpns: Vec<AppProtocol>,
    /// Advertise ADDR (IP and port) as the server's preferred address (RFC 9000 section
    /// 9.6) and listen there too: clients that use it validate it after the handshake and
    /// move their connection there.
    #[arg(long, value_name = "ADDR")]
    preferred_address: Option<SocketAddr>,
    #[command(flatten)]
    feed: FeedArgs,
    #[command(flatten)]
    transport: TransportArgs,
}

/// One line of the server's output per client.
#[derive(Debug, Serialize)]
struct ServedReport {
    peer: String,
    /// The application protocol agreed (none if the handshake failed).
    protocol: Option<AppProtocol>,
    direction: Option<Direction>,
    /// hq-interop: files served.
    #[serde(skip_serializing_if = "Option::is_none")]
    files: Option<u64>,
    /// hq-interop: requests refused, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    refused: Vec<String>,
    bytes: u64,
    seconds: f64,
    goodput_mbps: f64,
    verified: bool,
    error: Option<String>,
    /// The server's side of the connection, as it ended.
    connection: ConnectionReport,
    /// The --weights-at changes (for downloads, where the server's scheduler sends).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    weight_changes: Vec<WeightChangeReport>,
}

/// What one connection was served.
struct Served {
    protocol: AppProtocol,
    /// The transfer protocol's direction.
    direction: Option<Direction>,
    /// hq-interop: what was served.
    hq: Option<polypath_cli::hq::Served>,
    bytes: u64,
    seconds: f64,
}

/// Runs the server until interrupted (or after the first connection with `--once`).
pub fn run(args: ServerArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(serve(args))
}

/// The protocols to offer: `--alpn`, else the transfer protocol and, with --www,
/// hq-interop.
fn offered_protocols(args: &ServerArgs) -> Result<Vec<AppProtocol>, String> {
    let mut protocols = args.alpns.clone();
    if protocols.is_empty() {
        protocols.push(AppProtocol::Transfer);
        if args.www.is_some() {
            protocols.push(AppProtocol::Hq);
        }
    }
    if protocols.contains(&AppProtocol::Hq) {
        let www = args
            .www
            .as_deref()
            .ok_or("--alpn hq-interop needs --www DIR, the directory to serve")?;
        if !www.is_dir() {
            return Err(format!("--www {}: not a directory", www.display()));
        }
    }
    Ok(protocols)
}

async fn serve(args: ServerArgs) -> Result<(), String> {
    let protocols = offered_protocols(&args)?;
    let (tls, generated) = server_tls(
        args.cert.as_deref(),
        args.key.as_deref(),
        args.listen,
        &protocols,
        args.transport.cipher.suites(),
    )?;
    if let (Some(path), Some(cert)) = (&args.cert_out, &generated) {
        write_certificate(path, cert)?;
    }
    let feed = LinkEvents::start(&args.feed).await?.map(Arc::new);
    // An hq-interop server sends one session ticket per connection (kept in this process's
    // memory), so that a client may resume the session on its next connection (the
    // interop runner's resumption case).
    let tls = if protocols.contains(&AppProtocol::Hq) {
        let mut tls = Arc::unwrap_or_clone(tls);
        if args.zero_rtt {
            polypath_quic::crypto::enable_zero_rtt(&mut tls);
        } else {
            polypath_quic::crypto::enable_session_tickets(&mut tls);
        }
        Arc::new(tls)
    } else {
        tls
    };
    let mut config = ServerConfig::new(tls);
    let mut transport = args.transport.transport(true, &[], End::Server)?;
    if let Some(preferred) = args.preferred_address {
        if preferred.port() == 0 || preferred.ip().is_unspecified() {
            return Err(format!(
                "--preferred-address {preferred}: needs a specific IP address and port"
            ));
        }
        Arc::make_mut(&mut transport).preferred_address = Some(preferred);
    }
    config.transport = transport;
    let max_connections = usize::try_from(args.max_connections).unwrap_or(usize::MAX);
    config.max_incoming = max_connections;
    config.retry = args.retry;
    config.retry_above = args.retry_above;
    config.versions = args.transport.quic_versions(End::Server);
    let endpoint = Endpoint::server(args.listen, args.transport.endpoint()?, config)
        .map_err(|e| e.to_string())?;
    let bound = endpoint.local_addrs();
    println!("listening on {}", bound[0]);
    if let Some(preferred) = args.preferred_address {
        eprintln!("preferred address {preferred}");
    }
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let args = Arc::new(args);
    let active = Arc::new(AtomicUsize::new(0));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Result<(), String>>();
    loop {
        let conn = tokio::select! {
            conn = endpoint.accept() => conn,
            Some(result) = done_rx.recv(), if args.once => {
                endpoint.close(0, b"server done");
                let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
                return result;
            }
        };
        let Some(conn) = conn else { break };
        let slot = Slot::take(&active, max_connections);
        let feed = feed.clone();
        let args = args.clone();
        // Only --once waits for results (others would pile up in the channel).
        let done_tx = args.once.then(|| done_tx.clone());
        tokio::spawn(async move {
            let result = handle_connection(conn, slot, feed.as_deref(), &args).await;
            if let Some(tx) = done_tx {
                // A send error means the server is already exiting.
                let _ = tx.send(result);
            }
        });
    }
    Ok(())
}

/// One of the `--max-connections` places, held while a connection is served.
struct Slot(Option<Arc<AtomicUsize>>);

impl Slot {
    /// Takes a place if one is free; `Slot(None)` if `max` connections are served.
    fn take(active: &Arc<AtomicUsize>, max: usize) -> Slot {
        let taken = active.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        });
        Slot(taken.ok().map(|_| active.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(active) = &self.0 {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Serves one accepted connection to its end and prints its JSON line.
async fn handle_connection(
    conn: Connection,
    slot: Slot,
    feed: Option<&LinkEvents>,
    args: &ServerArgs,
) -> Result<(), String> {
    let peer = conn
        .remote_address()
        .map_or_else(|| "unknown".to_string(), |a| a.to_string());
    let (result, weight_changes) = if slot.0.is_none() {
        let busy = format!(
            "server busy: {} connections served (--max-connections)",
            args.max_connections
        );
        (Err(busy), Vec::new())
    } else {
        let attached = feed.map(|f| f.attach(&conn));
        let weight_changes = args.transport.schedule_weight_changes(&conn);
        let result = serve_bounded(&conn, args).await;
        let changes = weight_changes.report();
        drop(weight_changes);
        drop(attached);
        (result, changes)
    };
    if result.is_err() {
        conn.close(1, b"transfer failed");
    }
    // Let the client read the last response and close the connection itself: closing
    // first would discard a response still in flight or unread. A busy client (or a
    // response that needs retransmissions) gets as long as a stalled transfer would.
    let _ = tokio::time::timeout(args.read_timeout, conn.closed()).await;
    let connection = ConnectionReport::of(&conn, "server");
    let protocol = AppProtocol::of(&conn);
    drop(conn);
    drop(slot);
    let report = match &result {
        Ok(s) => ServedReport {
            peer,
            protocol: Some(s.protocol),
            direction: s.direction,
            files: s.hq.as_ref().map(|h| h.files),
            refused: s.hq.as_ref().map(|h| h.refused.clone()).unwrap_or_default(),
            bytes: s.bytes,
            seconds: s.seconds,
            goodput_mbps: goodput_mbps(s.bytes, s.seconds),
            // hq-interop has no digest: verified means no request was refused.
            verified: s.hq.as_ref().is_none_or(|h| h.refused.is_empty()),
            error: None,
            connection,
            weight_changes,
        },
        Err(e) => ServedReport {
            peer,
            protocol,
            direction: None,
            files: None,
            refused: Vec::new(),
            bytes: 0,
            seconds: 0.0,
            goodput_mbps: 0.0,
            verified: false,
            error: Some(e.clone()),
            connection,
            weight_changes,
        },
    };
    let line = serde_json::to_string(&report).map_err(|e| e.to_string())?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    result.map(|_| ())
}

/// Serves a connection within `--handshake-timeout` (for the handshake) and
/// `--read-timeout` (for any stall of the transfer).
async fn serve_bounded(conn: &Connection, args: &ServerArgs) -> Result<Served, String> {
    match tokio::time::timeout(args.handshake_timeout, conn.handshake()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("handshake failed: {e}")),
        Err(_) => {
            return Err(format!(
                "handshake timed out after {:?} (--handshake-timeout)",
                args.handshake_timeout
            ));
        }
    }
    let serving = async {
        match (AppProtocol::of(conn), args.www.as_deref()) {
            (Some(AppProtocol::Hq), Some(www)) => {
                let start = Instant::now();
                let served = polypath_cli::hq::serve_connection(conn, www).await?;
                Ok(Served {
                    protocol: AppProtocol::Hq,
                    direction: None,
                    bytes: served.bytes,
                    seconds: start.elapsed().as_secs_f64(),
                    hq: Some(served),
                })
            }
            (Some(AppProtocol::Transfer), _) => {
                serve_connection(conn, args.max_size, args.transport.app_rate()).await
            }
            (other, _) => Err(format!("no protocol to serve for ALPN {other:?}")),
        }
    };
    tokio::select! {
        result = serving => result,
        stalled = stall_watchdog(conn, args.read_timeout) => Err(stalled),
    }
}

/// Stream progress of a connection: stream bytes read plus payload bytes the peer
/// acknowledged. Keep-alives move neither.
fn progress(conn: &Connection) -> u64 {
    let acked: u64 = conn
        .paths()
        .iter()
        .map(|p| p.stats.payload_bytes_acked)
        .sum();
    conn.stats().stream_bytes_read.saturating_add(acked)
}

/// Returns (with the reason) once `conn` made no stream progress for `timeout`.
async fn stall_watchdog(conn: &Connection, timeout: Duration) -> String {
    let tick = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut last = progress(conn);
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(tick).await;
        let now = progress(conn);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= timeout {
            return format!("no stream progress for {timeout:?} (--read-timeout)");
        }
    }
}

/// Serves the transfer of one connection.
async fn serve_connection(
    conn: &Connection,
    max_size: u64,
    rate: Option<AppRate>,
) -> Result<Served, String> {
    let (mut send, mut recv) = conn
        .accept_bi()
        .await
        .map_err(|e| format!("no request stream: {e}"))?;
    let request = Request::decode(&read_exact(&mut recv, REQUEST_LEN).await?)?;
    if request.size > max_size {
        let _ = send.reset(1);
        return Err(format!(
            "client asked for {} bytes, more than --max-size {max_size}",
            request.size
        ));
    }
    let start = Instant::now();
    match request.direction {
        Direction::Upload => {
            let digest = receive_object(&mut recv, request.size, |_| Ok(())).await?;
            let trailer = read_exact(&mut recv, DIGEST_LEN).await?;
            expect_end(&mut recv).await?;
            let seconds = start.elapsed().as_secs_f64();
            let ok = trailer[..] == digest[..];
            let status = if ok { STATUS_OK } else { STATUS_MISMATCH };
            send.write_all(&[status]).await.map_err(write_failed)?;
            send.write_all(&digest).await.map_err(write_failed)?;
            send.finish().map_err(write_failed)?;
            if !ok {
                return Err(format!(
                    "SHA-256 mismatch: the client sent {}, the data received hashes to {}",
                    hex::encode(&trailer),
                    hex::encode(digest)
                ));
            }
            Ok(Served {
                protocol: AppProtocol::Transfer,
                direction: Some(request.direction),
                hq: None,
                bytes: request.size,
                seconds,
            })
        }
        Direction::Download => {
            let digest = send_generated(&mut send, request.size, rate).await?;
            send.write_all(&digest).await.map_err(write_failed)?;
            let client_digest = read_exact(&mut recv, DIGEST_LEN).await?;
            expect_end(&mut recv).await?;
            let seconds = start.elapsed().as_secs_f64();
            let ok = client_digest[..] == digest[..];
            let status = if ok { STATUS_OK } else { STATUS_MISMATCH };
            let report = serde_json::to_vec(&ConnectionReport::of(conn, "server"))
                .map_err(|e| e.to_string())?;
            send.write_all(&[status]).await.map_err(write_failed)?;
            send.write_all(&report).await.map_err(write_failed)?;
            send.finish().map_err(write_failed)?;
            if !ok {
                return Err(format!(
                    "SHA-256 mismatch: the client received data hashing to {}, the object hashes to {}",
                    hex::encode(&client_digest),
                    hex::encode(digest)
                ));
            }
            Ok(Served {
                protocol: AppProtocol::Transfer,
                direction: Some(request.direction),
                hq: None,
                bytes: request.size,
                seconds,
            })
        }
    }
}
