//! `polypath bench loopback`: polypath and noq (a quinn fork, used here only as the
//! reference peer of the benchmark, never by polypath itself) moving
//! the same object over real loopback UDP in one process, one after the other, with the
//! same application code on top: one stream, 1 MB chunks written without copying, the
//! receiver counting bytes. The two stacks take turns (`--repeat` rounds of polypath
//! then noq), so that a burst of load from elsewhere on the machine hits both; the report
//! gives every run, each stack's median and range, and the ratio of the medians with the
//! range of the per-round ratios, and the CPU time of the process (both ends) per gigabit
//! moved.

use crate::client::open_paths;
use crate::transfer::{ALPN, ConnectionReport, parse_size};
use bytes::Bytes;
use clap::{Args, Subcommand};
use polypath_io::Endpoint;
use polypath_quic::crypto::{
    ServerVerification, client_config, self_signed_certificate, server_config,
};
use polypath_quic::sched::PathStatus;
use polypath_quic::{ClientConfig, EndpointConfig, ServerConfig, TransportConfig};
use rand::RngCore;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Size of the block the sender writes again and again.
const BLOCK: usize = 1 << 20;
/// How long the end of a run may take to close down before it is abandoned.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// polypath vs noq over loopback UDP (and polypath over two loopback paths).
    Loopback(LoopbackArgs),
    /// Kernel TCP goodput through the real-time emulator: one unconstrained link, then two
    /// at once (needs root).
    Emu(crate::bench_emu::EmuBenchArgs),
    /// Many clients uploading to one `polypath server` at once (default 1000 x 8 MB), with
    /// the server's peak and after-load memory.
    Server(crate::bench_server::ServerLoadArgs),
    /// Many client gateways on one server gateway at once in the emulator (default 50),
    /// each pinging and downloading through its own session (needs root).
    Gateway(crate::bench_gateway::GatewayBenchArgs),
    /// The simulator on the lab's heaviest scenarios (NR-DC with CUBIC and BBR,
    /// 5G-CLARITY static, the 3000-device backhaul): times real time, events and
    /// simulated Gbit per CPU-second, output hashes.
    Sim(crate::bench_sim::SimBenchArgs),
}

/// `polypath bench loopback`.
#[derive(Debug, Args)]
pub struct LoopbackArgs {
    /// Bytes per transfer (e.g. 100MB).
    #[arg(long, alias = "bytes", default_value = "200MB", value_parser = parse_size)]
    size: u64,
    /// Rounds: each runs every stack once, in turn.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// 2 adds a polypath run over two paths (127.0.0.1 and 127.0.0.2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    paths: u8,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// polypath packet scheduler.
    #[arg(long, default_value = "minrtt")]
    scheduler: String,
    /// polypath congestion controller (noq uses its default, CUBIC).
    #[arg(long, default_value = "cubic")]
    cc: String,
}

/// One measured transfer.
#[derive(Debug, Serialize)]
struct Measurement {
    seconds: f64,
    goodput_mbps: f64,
    /// CPU time of the whole process (both ends, every thread) during the transfer.
    cpu_s: f64,
    /// `cpu_s` per gigabit of goodput.
    cpu_s_per_gbit: f64,
    packets_sent: u64,
    packets_lost: u64,
    /// Stream payload bytes sent per path (polypath only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    path_bytes: Vec<u64>,
}

impl Measurement {
    fn new(size: u64, seconds: f64, cpu_s: f64, packets_sent: u64, packets_lost: u64) -> Self {
        Measurement {
            seconds,
            goodput_mbps: crate::transfer::goodput_mbps(size, seconds),
            cpu_s,
            cpu_s_per_gbit: cpu_s / (size as f64 * 8.0 / 1e9).max(1e-12),
            packets_sent,
            packets_lost,
            path_bytes: Vec::new(),
        }
    }
}

/// The runs of one stack with their median and range.
#[derive(Debug, Serialize)]
struct Runs {
    median_mbps: f64,
    min_mbps: f64,
    max_mbps: f64,
    /// Median CPU-seconds (the whole process: sender and receiver) per gigabit.
    median_cpu_s_per_gbit: f64,
    runs: Vec<Measurement>,
}

impl Runs {
    fn new(runs: Vec<Measurement>) -> Self {
        let goodputs: Vec<f64> = runs.iter().map(|m| m.goodput_mbps).collect();
        let cpu: Vec<f64> = runs.iter().map(|m| m.cpu_s_per_gbit).collect();
        let spread = Spread::of(&goodputs);
        Runs {
            median_mbps: spread.median,
            min_mbps: spread.min,
            max_mbps: spread.max,
            median_cpu_s_per_gbit: Spread::of(&cpu).median,
            runs,
        }
    }
}

/// CPU time used so far, seconds, by this process (every thread:
/// `libc::CLOCK_PROCESS_CPUTIME_ID`) or the calling thread
/// (`libc::CLOCK_THREAD_CPUTIME_ID`); NaN if the clock cannot be read.
pub(crate) fn cpu_s(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; an unknown clock id is an error return.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn process_cpu_s() -> f64 {
    cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Median and range of some figures.
#[derive(Debug, Clone, Copy, Serialize)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Self {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Spread {
            median,
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// A ratio of goodputs: of the two medians, with the range of the per-round ratios.
#[derive(Debug, Serialize)]
struct Ratio {
    of_medians: f64,
    round_min: f64,
    round_max: f64,
}

impl Ratio {
    fn new(a: &Runs, b: &Runs) -> Self {
        let rounds: Vec<f64> = a
            .runs
            .iter()
            .zip(&b.runs)
            .map(|(x, y)| x.goodput_mbps / y.goodput_mbps.max(1e-9))
            .collect();
        let spread = Spread::of(&rounds);
        Ratio {
            of_medians: a.median_mbps / b.median_mbps.max(1e-9),
            round_min: spread.min,
            round_max: spread.max,
        }
    }
}

/// What `bench loopback` prints.
#[derive(Debug, Serialize)]
struct LoopbackReport {
    size_bytes: u64,
    rounds: u32,
    scheduler: String,
    cc: String,
    polypath: Runs,
    noq: Runs,
    /// polypath goodput / noq goodput.
    ratio: Ratio,
    #[serde(skip_serializing_if = "Option::is_none")]
    polypath_two_paths: Option<Runs>,
    /// polypath two-path goodput / noq goodput.
    #[serde(skip_serializing_if = "Option::is_none")]
    two_path_ratio: Option<Ratio>,
}

/// Runs a benchmark command.
pub fn run(cmd: BenchCommand) -> Result<(), String> {
    match cmd {
        BenchCommand::Emu(args) => crate::bench_emu::run(args),
        BenchCommand::Server(args) => crate::bench_server::run(args),
        BenchCommand::Gateway(args) => crate::bench_gateway::run(args),
        BenchCommand::Sim(args) => crate::bench_sim::run(args),
        BenchCommand::Loopback(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the runtime: {e}"))?;
            let report = runtime.block_on(loopback(&args))?;
            if args.json {
                let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
                println!("{json}");
            } else {
                print_human(&report);
            }
            Ok(())
        }
    }
}

fn print_human(r: &LoopbackReport) {
    println!(
        "{} bytes over loopback UDP, {} rounds (median, and range, of goodput)",
        r.size_bytes, r.rounds
    );
    let line = |name: &str, runs: &Runs| {
        let lost: u64 = runs.runs.iter().map(|m| m.packets_lost).sum();
        let sent: u64 = runs.runs.iter().map(|m| m.packets_sent).sum();
        println!(
            "{name:<16}: {:8.1} Mbit/s ({:.1} to {:.1}; {:.3} CPU-s per Gbit; {sent} packets, {lost} lost)",
            runs.median_mbps, runs.min_mbps, runs.max_mbps, runs.median_cpu_s_per_gbit
        );
    };
    line("polypath 1 path", &r.polypath);
    line("noq", &r.noq);
    println!(
        "ratio polypath/noq: {:.3} (rounds {:.3} to {:.3})",
        r.ratio.of_medians, r.ratio.round_min, r.ratio.round_max
    );
    if let (Some(m), Some(ratio)) = (&r.polypath_two_paths, &r.two_path_ratio) {
        line("polypath 2 paths", m);
        println!(
            "ratio polypath 2 paths/noq: {:.3} (rounds {:.3} to {:.3})",
            ratio.of_medians, ratio.round_min, ratio.round_max
        );
    }
}

async fn loopback(args: &LoopbackArgs) -> Result<LoopbackReport, String> {
    let stacks = if args.paths == 2 { 3 } else { 2 };
    let total = stacks * args.repeat;
    let mut n = 0;
    let mut label = |what: &str| {
        n += 1;
        eprint!(
            "bench loopback [{n}/{total}] {what}, {} bytes ... ",
            args.size
        );
    };
    let done = |m: &Measurement| {
        eprintln!(
            "{:.1} Mbit/s in {:.3} s, {:.3} CPU-s per Gbit",
            m.goodput_mbps, m.seconds, m.cpu_s_per_gbit
        );
    };
    let block = random_block();
    let local = addr("127.0.0.1:0");
    let (mut polypath, mut noq, mut two) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat {
        label("polypath -> polypath, 1 path");
        let m = polypath_run(args, &block, &[local]).await?;
        done(&m);
        polypath.push(m);
        label("noq -> noq");
        let m = noq_run(args.size, &block).await?;
        done(&m);
        noq.push(m);
        if args.paths == 2 {
            label("polypath -> polypath, 2 paths (127.0.0.1, 127.0.0.2)");
            let m = polypath_run(args, &block, &[local, addr("127.0.0.2:0")]).await?;
            done(&m);
            two.push(m);
        }
    }
    let (polypath, noq) = (Runs::new(polypath), Runs::new(noq));
    let polypath_two_paths = (args.paths == 2).then(|| Runs::new(two));
    Ok(LoopbackReport {
        size_bytes: args.size,
        rounds: args.repeat,
        scheduler: args.scheduler.clone(),
        cc: args.cc.clone(),
        ratio: Ratio::new(&polypath, &noq),
        two_path_ratio: polypath_two_paths.as_ref().map(|t| Ratio::new(t, &noq)),
        polypath,
        noq,
        polypath_two_paths,
    })
}

fn addr(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
}

fn random_block() -> Bytes {
    let mut block = vec![0u8; BLOCK];
    rand::rng().fill_bytes(&mut block);
    block.into()
}

/// Chunks of `block` adding up to `size` bytes.
fn chunks(block: &Bytes, size: u64) -> impl Iterator<Item = Bytes> + '_ {
    let mut left = size;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        let n = left.min(block.len() as u64) as usize;
        left -= n as u64;
        Some(block.slice(..n))
    })
}

/// TLS configurations for one run: a fresh self-signed certificate, pinned by the client.
fn tls() -> Result<(Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>), String> {
    let cert = self_signed_certificate(&["localhost".into()]).map_err(|e| e.to_string())?;
    let server = server_config(cert.chain.clone(), cert.key, vec![ALPN.to_vec()], false)
        .map_err(|e| e.to_string())?;
    let client = client_config(
        vec![ALPN.to_vec()],
        ServerVerification::Pinned(cert.chain[0].clone()),
        false,
    )
    .map_err(|e| e.to_string())?;
    Ok((client, server))
}

async fn polypath_run(
    args: &LoopbackArgs,
    block: &Bytes,
    locals: &[SocketAddr],
) -> Result<Measurement, String> {
    let transport_args = crate::setup::TransportArgs {
        scheduler: args.scheduler.clone(),
        cc: args.cc.clone(),
        path_manager: "manual".into(),
        path_manager_params: Vec::new(),
        weights: None,
        weights_at: Vec::new(),
        qlog: None,
        receive_window: None,
        stream_receive_window: None,
        rate: None,
        message_size: None,
        no_ecn: false,
        cipher: crate::setup::Cipher::All,
        key_update: None,
        quic_version: None,
    };
    let multipath = locals.len() > 1;
    // Manual path manager: the same transport suits both ends.
    let transport: Arc<TransportConfig> =
        transport_args.transport(multipath, &[], crate::setup::End::Server)?;
    let (client_tls, server_tls) = tls()?;
    let mut server_config = ServerConfig::new(server_tls);
    server_config.transport = transport.clone();
    let server = Endpoint::server(addr("127.0.0.1:0"), EndpointConfig::random(), server_config)
        .map_err(|e| e.to_string())?;
    let server_addr = server.local_addrs()[0];
    let receiver = tokio::spawn(async move {
        let conn = server.accept().await.ok_or("server endpoint closed")?;
        conn.handshake().await.map_err(|e| e.to_string())?;
        let (_send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
        let mut received = 0u64;
        while let Some(chunk) = recv
            .read_chunk(usize::MAX)
            .await
            .map_err(|e| e.to_string())?
        {
            received += chunk.len() as u64;
        }
        // The client closes once it has the result; the connection goes back with it.
        Ok::<_, String>((received, Instant::now(), conn, server))
    });
    let client = Endpoint::client(locals, EndpointConfig::random()).map_err(|e| e.to_string())?;
    let bound = client.local_addrs();
    let mut config = ClientConfig::new(client_tls);
    config.transport = transport;
    let conn = client
        .connect_from(bound[0], config, server_addr, "localhost")
        .await
        .map_err(|e| e.to_string())?;
    if multipath {
        open_paths(&conn, &bound[1..], &[], false, PathStatus::Available).await?;
    }
    let (start, cpu_start) = (Instant::now(), process_cpu_s());
    let (mut send, _recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    for chunk in chunks(block, args.size) {
        send.write_chunk(chunk).await.map_err(|e| e.to_string())?;
    }
    send.finish().map_err(|e| e.to_string())?;
    let (received, end, server_conn, server) = receiver.await.map_err(|e| e.to_string())??;
    let cpu_s = process_cpu_s() - cpu_start;
    if received != args.size {
        return Err(format!(
            "polypath delivered {received} of {} bytes",
            args.size
        ));
    }
    let report = ConnectionReport::of(&conn, "client");
    conn.close(0, b"done");
    drop((send, _recv, conn));
    let _ = tokio::time::timeout(CLOSE_WAIT, server_conn.closed()).await;
    drop((server_conn, server));
    let _ = tokio::time::timeout(CLOSE_WAIT, client.wait_idle()).await;
    let mut m = Measurement::new(
        args.size,
        (end - start).as_secs_f64(),
        cpu_s,
        report.packets_sent,
        report.packets_lost,
    );
    m.path_bytes = report.paths.iter().map(|p| p.bytes).collect();
    Ok(m)
}

/// The noq run, with noq's default transport configuration: with flow-control windows as
/// large as polypath's (8 MiB per stream), noq 1.4's receiver gives up on loopback with
/// "too many gaps in stream buffer" once the sockets drop datagrams.
async fn noq_run(size: u64, block: &Bytes) -> Result<Measurement, String> {
    let (client_tls, server_tls) = tls()?;
    let server_crypto =
        noq::crypto::rustls::QuicServerConfig::try_from(server_tls).map_err(|e| e.to_string())?;
    let server_config = noq::ServerConfig::with_crypto(Arc::new(server_crypto));
    let server = noq::Endpoint::server(server_config, addr("127.0.0.1:0"))
        .map_err(|e| format!("noq server: {e}"))?;
    let server_addr = server.local_addr().map_err(|e| e.to_string())?;
    let receiver = tokio::spawn(async move {
        let incoming = server.accept().await.ok_or("noq server endpoint closed")?;
        let conn = incoming
            .accept()
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        let (_send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
        let mut received = 0u64;
        while let Some(chunk) = recv
            .read_chunk(usize::MAX)
            .await
            .map_err(|e| e.to_string())?
        {
            received += chunk.len() as u64;
        }
        // The client closes once it has the result; the connection goes back with it.
        Ok::<_, String>((received, Instant::now(), conn, server))
    });
    let client_crypto =
        noq::crypto::rustls::QuicClientConfig::try_from(client_tls).map_err(|e| e.to_string())?;
    let client_config = noq::ClientConfig::new(Arc::new(client_crypto));
    let client =
        noq::Endpoint::client(addr("127.0.0.1:0")).map_err(|e| format!("noq client: {e}"))?;
    let conn = client
        .connect_with(client_config, server_addr, "localhost")
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    let (start, cpu_start) = (Instant::now(), process_cpu_s());
    let (mut send, _recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let lost = |e: &dyn std::fmt::Display| match conn.close_reason() {
        Some(reason) => format!("noq: {e}: {reason}"),
        None => format!("noq: {e}"),
    };
    for chunk in chunks(block, size) {
        send.write_chunk(chunk).await.map_err(|e| lost(&e))?;
    }
    send.finish().map_err(|e| lost(&e))?;
    let (received, end, server_conn, server) = receiver.await.map_err(|e| e.to_string())??;
    let cpu_s = process_cpu_s() - cpu_start;
    if received != size {
        return Err(format!("noq delivered {received} of {size} bytes"));
    }
    let stats = conn.stats();
    conn.close(noq::VarInt::from_u32(0), b"done");
    let _ = tokio::time::timeout(CLOSE_WAIT, server_conn.closed()).await;
    let _ = tokio::time::timeout(CLOSE_WAIT, server.wait_idle()).await;
    let _ = tokio::time::timeout(CLOSE_WAIT, client.wait_idle()).await;
    Ok(Measurement::new(
        size,
        (end - start).as_secs_f64(),
        cpu_s,
        stats.sent_packets,
        stats.lost_packets,
    ))
}
