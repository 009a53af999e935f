//! `polypath server`: serves transfers (see [`crate::transfer`]) to clients one after the
//! other.

use crate::feed::{FeedArgs, LinkEvents};
use crate::setup::{End, TransportArgs, server_tls, write_certificate};
use crate::transfer::{
    DIGEST_LEN, Direction, REQUEST_LEN, Request, STATUS_MISMATCH, STATUS_OK, SenderReport,
    expect_end, parse_size, read_exact, receive_object, send_generated, write_failed,
};
use clap::Args;
use polypath_io::{Connection, Endpoint};
use polypath_quic::ServerConfig;
use serde::Serialize;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the server waits for a client to close after the last response.
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
    /// Serve one client, then exit (non-zero if its transfer failed).
    #[arg(long)]
    once: bool,
    /// Largest object a client may ask for.
    #[arg(long, default_value = "64GiB", value_parser = parse_size)]
    max_size: u64,
    #[command(flatten)]
    feed: FeedArgs,
    #[command(flatten)]
    transport: TransportArgs,
}

/// One line of the server's output per client.
#[derive(Debug, Serialize)]
struct ServedReport {
    peer: String,
    direction: Option<Direction>,
    bytes: u64,
    seconds: f64,
    verified: bool,
    error: Option<String>,
}

/// What one transfer was.
struct Served {
    direction: Direction,
    bytes: u64,
    seconds: f64,
}

/// Runs the server until interrupted (or after one client with `--once`).
pub fn run(args: ServerArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(serve(args))
}

async fn serve(args: ServerArgs) -> Result<(), String> {
    let (tls, generated) = server_tls(args.cert.as_deref(), args.key.as_deref(), args.listen)?;
    if let (Some(path), Some(cert)) = (&args.cert_out, &generated) {
        write_certificate(path, cert)?;
    }
    let feed = LinkEvents::start(&args.feed).await?;
    let mut config = ServerConfig::new(tls);
    config.transport = args.transport.transport(true, &[], End::Server)?;
    let endpoint = Endpoint::server(args.listen, args.transport.endpoint()?, config)
        .map_err(|e| e.to_string())?;
    let bound = endpoint.local_addrs();
    println!("listening on {}", bound[0]);
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    while let Some(conn) = endpoint.accept().await {
        let peer = conn
            .remote_address()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let attached = feed.as_ref().map(|f| f.attach(&conn));
        let weight_changes = args.transport.schedule_weight_changes(&conn);
        let result = serve_connection(&conn, args.max_size).await;
        drop(weight_changes);
        if result.is_err() {
            conn.close(1, b"transfer failed");
        }
        // Let the client read the last response and close the connection itself.
        let _ = tokio::time::timeout(CLOSE_WAIT, conn.closed()).await;
        drop(attached);
        drop(conn);
        let report = match &result {
            Ok(s) => ServedReport {
                peer,
                direction: Some(s.direction),
                bytes: s.bytes,
                seconds: s.seconds,
                verified: true,
                error: None,
            },
            Err(e) => ServedReport {
                peer,
                direction: None,
                bytes: 0,
                seconds: 0.0,
                verified: false,
                error: Some(e.clone()),
            },
        };
        let line = serde_json::to_string(&report).map_err(|e| e.to_string())?;
        println!("{line}");
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        if args.once {
            endpoint.close(0, b"server done");
            let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
            return result.map(|_| ());
        }
    }
    Ok(())
}

/// Serves the transfer of one connection.
async fn serve_connection(conn: &Connection, max_size: u64) -> Result<Served, String> {
    conn.handshake()
        .await
        .map_err(|e| format!("handshake failed: {e}"))?;
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
                direction: request.direction,
                bytes: request.size,
                seconds,
            })
        }
        Direction::Download => {
            let digest = send_generated(&mut send, request.size).await?;
            send.write_all(&digest).await.map_err(write_failed)?;
            let client_digest = read_exact(&mut recv, DIGEST_LEN).await?;
            expect_end(&mut recv).await?;
            let seconds = start.elapsed().as_secs_f64();
            let ok = client_digest[..] == digest[..];
            let status = if ok { STATUS_OK } else { STATUS_MISMATCH };
            let report = serde_json::to_vec(&SenderReport::of(conn)).map_err(|e| e.to_string())?;
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
                direction: request.direction,
                bytes: request.size,
                seconds,
            })
        }
    }
}
