//! `polypath bench server`: many clients uploading to one `polypath server` at once, with
//! the server's memory measured from outside. The server runs as a child process (the
//! same binary, so its memory is its own); one client process holds every connection,
//! each uploading a generated object that the server verifies with SHA-256. The server's
//! resident set is sampled from `/proc` while the load runs; the report gives its peak
//! (`VmHWM`) and what it still holds after the load has ended. `--preload` runs the server
//! with another allocator (e.g. Debian's `libjemalloc.so.2`) to tell the server's own
//! memory apart from what the allocator keeps.

use crate::transfer::{Direction, Request, confirm_upload, parse_size, send_generated};
use clap::Args;
use polypath_io::{Connection, Endpoint};
use polypath_quic::crypto::{ServerVerification, client_config, load_certificate_chain};
use polypath_quic::{ClientConfig, EndpointConfig};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the server may take to print its listening address.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long after the last upload the server's memory is read again.
const SETTLE: Duration = Duration::from_secs(3);
/// How often the server's resident set is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Connections sharing one client socket.
const CLIENTS_PER_SOCKET: u64 = 10;
/// How often progress is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// `polypath bench server`.
#[derive(Debug, Args)]
pub struct ServerLoadArgs {
    /// Connections uploading at once.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    clients: u64,
    /// Bytes each connection uploads (e.g. 8MB; MB = 10^6 bytes).
    #[arg(long, default_value = "8MB", value_parser = parse_size)]
    size: u64,
    /// Run the server with this shared library preloaded (LD_PRELOAD), e.g. another
    /// allocator: /usr/lib/x86_64-linux-gnu/libjemalloc.so.2.
    #[arg(long, value_name = "LIB")]
    preload: Option<PathBuf>,
    /// Extra argument for `polypath server`, repeatable (e.g. --server-arg=--receive-window
    /// --server-arg=16MiB).
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Give up on the whole load after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// What `bench server` prints.
#[derive(Debug, Serialize)]
struct ServerLoadReport {
    clients: u64,
    size_bytes: u64,
    /// LD_PRELOAD of the server, if any.
    preload: Option<String>,
    server_args: Vec<String>,
    /// Uploads the client saw verified by the server.
    completed: u64,
    /// Uploads that failed (first error below).
    failed: u64,
    first_error: Option<String>,
    /// Errors the server reported for its connections, with their counts.
    server_errors: BTreeMap<String, u64>,
    /// From the first connection attempt to the last upload's end.
    seconds: f64,
    /// All verified bytes over `seconds`.
    aggregate_mbps: f64,
    /// Server resident set before the load (MiB).
    rss_idle_mib: f64,
    /// Server peak resident set (VmHWM, MiB).
    rss_peak_mib: f64,
    /// Server resident set `SETTLE` after the load, connections closed (MiB).
    rss_after_mib: f64,
}

/// Runs the benchmark and prints its report.
pub fn run(args: ServerLoadArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let dir = std::env::temp_dir().join(format!("polypath-bench-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let report = ServerChild::start(&args, &dir).and_then(|mut server| {
        let report = runtime.block_on(load(&args, &mut server, &dir));
        server.stop();
        report
    });
    let _ = std::fs::remove_dir_all(&dir);
    let report = report?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{json}");
    } else {
        println!(
            "{} clients x {} bytes uploaded to polypath server{}",
            report.clients,
            report.size_bytes,
            report
                .preload
                .as_deref()
                .map(|p| format!(" (LD_PRELOAD={p})"))
                .unwrap_or_default()
        );
        println!(
            "completed {} failed {} in {:.1} s ({:.0} Mbit/s together)",
            report.completed, report.failed, report.seconds, report.aggregate_mbps
        );
        if let Some(e) = &report.first_error {
            println!("first error: {e}");
        }
        for (error, count) in &report.server_errors {
            println!("server reported {count} x: {error}");
        }
        println!(
            "server RSS: idle {:.1} MiB, peak {:.1} MiB, {:.0?} after the load {:.1} MiB",
            report.rss_idle_mib, report.rss_peak_mib, SETTLE, report.rss_after_mib
        );
    }
    if report.completed != args.clients {
        return Err(format!(
            "{} of {} uploads failed",
            args.clients - report.completed,
            args.clients
        ));
    }
    Ok(())
}

/// The `polypath server` child, killed when dropped.
struct ServerChild {
    child: Child,
    addr: SocketAddr,
    /// Errors the server reported for its connections, with their counts.
    errors: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl ServerChild {
    fn start(args: &ServerLoadArgs, dir: &Path) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find polypath: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["server", "--listen", "127.0.0.1:0", "--max-connections"])
            .arg(args.clients.to_string())
            .arg("--cert-out")
            .arg(dir.join("cert.pem"))
            .args(&args.server_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(lib) = &args.preload {
            if !lib.exists() {
                return Err(format!("--preload {}: no such file", lib.display()));
            }
            cmd.env("LD_PRELOAD", lib);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start polypath server: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout from the server")?;
        let (tx, rx) = std::sync::mpsc::channel();
        // The server prints its address first, then one JSON line per client: keep
        // draining the pipe so that the server never blocks on it, and count the errors
        // the server reports.
        let errors = Arc::new(Mutex::new(BTreeMap::new()));
        let counted = errors.clone();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            for line in lines.map_while(Result::ok) {
                let error = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("error")?.as_str().map(str::to_owned));
                if let (Some(error), Ok(mut counts)) = (error, counted.lock()) {
                    *counts.entry(error).or_insert(0u64) += 1;
                }
            }
        });
        let mut server = ServerChild {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            errors,
        };
        let first = rx
            .recv_timeout(START_TIMEOUT)
            .map_err(|_| "polypath server did not start".to_string())?;
        server.addr = first
            .strip_prefix("listening on ")
            .and_then(|a| a.trim().parse().ok())
            .ok_or_else(|| format!("unexpected first line from polypath server: {first}"))?;
        Ok(server)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn mib(kib: Option<u64>) -> f64 {
    kib.unwrap_or(0) as f64 / 1024.0
}

async fn load(
    args: &ServerLoadArgs,
    server: &mut ServerChild,
    dir: &Path,
) -> Result<ServerLoadReport, String> {
    let pid = server.pid();
    let rss_idle_mib = mib(status_kib(pid, "VmRSS"));
    let cert = load_certificate_chain(&dir.join("cert.pem")).map_err(|e| e.to_string())?;
    let tls = client_config(
        vec![crate::transfer::ALPN.to_vec()],
        ServerVerification::Pinned(cert[0].clone()),
        false,
    )
    .map_err(|e| e.to_string())?;
    // Clients of a real server each have their own socket; here a socket serves
    // `CLIENTS_PER_SOCKET` connections, so that no client socket's receive buffer is
    // shared by more acknowledgments than a host's would be.
    let sockets = args.clients.div_ceil(CLIENTS_PER_SOCKET);
    let endpoints = (0..sockets)
        .map(|_| {
            Endpoint::client(
                &[SocketAddr::from(([127, 0, 0, 1], 0))],
                EndpointConfig::random(),
            )
            .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let completed = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.clients {
        let endpoint = &endpoints[(i / CLIENTS_PER_SOCKET) as usize];
        let (endpoint, tls, completed, failed, running) = (
            endpoint.clone(),
            tls.clone(),
            completed.clone(),
            failed.clone(),
            running.clone(),
        );
        let (addr, size) = (server.addr, args.size);
        running.fetch_add(1, Ordering::Relaxed);
        tasks.spawn(async move {
            let result = upload(&endpoint, ClientConfig::new(tls), addr, size).await;
            running.fetch_sub(1, Ordering::Relaxed);
            match &result {
                Ok(()) => completed.fetch_add(1, Ordering::Relaxed),
                Err(_) => failed.fetch_add(1, Ordering::Relaxed),
            };
            result
        });
    }
    let mut first_error = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_s);
    let mut sample = tokio::time::interval(SAMPLE_EVERY);
    let mut last_progress = Instant::now();
    let mut rss_peak_sampled = 0u64;
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(Err(e))) => { first_error.get_or_insert(e); }
                Some(Err(e)) => { first_error.get_or_insert(format!("upload task failed: {e}")); }
                Some(Ok(Ok(()))) => {}
            },
            _ = sample.tick() => {
                rss_peak_sampled = rss_peak_sampled.max(status_kib(pid, "VmRSS").unwrap_or(0));
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    last_progress = Instant::now();
                    eprintln!(
                        "bench server: {:5.1} s, {} done, {} failed, {} running, server RSS {:.1} MiB",
                        started.elapsed().as_secs_f64(),
                        completed.load(Ordering::Relaxed),
                        failed.load(Ordering::Relaxed),
                        running.load(Ordering::Relaxed),
                        mib(status_kib(pid, "VmRSS")),
                    );
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                tasks.abort_all();
                first_error.get_or_insert(format!("the load did not end within {} s", args.timeout_s));
                break;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    for endpoint in &endpoints {
        endpoint.close(0, b"bench done");
    }
    for endpoint in &endpoints {
        let _ = tokio::time::timeout(SETTLE, endpoint.wait_idle()).await;
    }
    tokio::time::sleep(SETTLE).await;
    let completed = completed.load(Ordering::Relaxed);
    // VmHWM is the kernel's own peak; the sampled peak covers kernels without it.
    let rss_peak_kib = status_kib(pid, "VmHWM").unwrap_or(0).max(rss_peak_sampled);
    Ok(ServerLoadReport {
        clients: args.clients,
        size_bytes: args.size,
        preload: args.preload.as_ref().map(|p| p.display().to_string()),
        server_args: args.server_args.clone(),
        completed,
        failed: args.clients - completed,
        first_error,
        server_errors: server.errors.lock().map(|e| e.clone()).unwrap_or_default(),
        seconds,
        aggregate_mbps: crate::transfer::goodput_mbps(completed * args.size, seconds),
        rss_idle_mib,
        rss_peak_mib: mib(Some(rss_peak_kib)),
        rss_after_mib: mib(status_kib(pid, "VmRSS")),
    })
}

/// One verified upload of a generated object on its own connection.
async fn upload(
    endpoint: &Endpoint,
    config: ClientConfig,
    server: SocketAddr,
    size: u64,
) -> Result<(), String> {
    let conn: Connection = endpoint
        .connect(config, server, "localhost")
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|e| format!("cannot open a stream: {e}"))?;
    let request = Request {
        direction: Direction::Upload,
        size,
    };
    send.write_all(&request.encode())
        .await
        .map_err(crate::transfer::write_failed)?;
    let digest = send_generated(&mut send, size, None).await?;
    confirm_upload(&mut send, &mut recv, &digest).await?;
    conn.close(0, b"done");
    Ok(())
}
