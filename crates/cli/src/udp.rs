//! `polypath udp send|recv`: a numbered UDP stream at a fixed packet rate and its
//! receiver, which counts what arrived, what was lost or duplicated, and the longest gap
//! between deliveries: the tool of the gateway's loss (duplication) and failover
//! measurements.
//!
//! Each packet carries its sequence number and its send time (ns on the system clock, so a
//! receiver on the same clock gets one-way delays) in its first 16 bytes.

use clap::{Args, Subcommand};
use polypath_scenario::units::parse_duration;
use serde::Serialize;
use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// UDP tool commands.
#[derive(Debug, Subcommand)]
pub enum UdpCommand {
    /// Send numbered packets at a fixed rate.
    Send(SendArgs),
    /// Receive them and report loss, duplicates, gaps and one-way delays as JSON.
    Recv(RecvArgs),
}

/// `polypath udp send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Where to send.
    #[arg(long, value_name = "ADDR:PORT")]
    to: SocketAddr,
    /// Local address to send from.
    #[arg(long, value_name = "ADDR:PORT")]
    bind: Option<SocketAddr>,
    /// Packets per second.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// UDP payload bytes per packet (at least 16).
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Packets to send.
    #[arg(long)]
    count: u64,
}

/// `polypath udp recv`.
#[derive(Debug, Args)]
pub struct RecvArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Packets the sender sends (the loss figure counts against it).
    #[arg(long)]
    expect: u64,
    /// Stop this long after the last packet (once the first one arrived).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    idle: Duration,
    /// Stop after this long in any case.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    timeout: Duration,
    /// Width of the bins of the delivery series.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    bin: Duration,
}

/// Runs a `udp` subcommand.
pub fn run(cmd: UdpCommand) -> Result<(), String> {
    match cmd {
        UdpCommand::Send(a) => send(&a),
        UdpCommand::Recv(a) => {
            let report = recv(&a)?;
            println!(
                "{}",
                serde_json::to_string(&report).map_err(|e| e.to_string())?
            );
            Ok(())
        }
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn send(a: &SendArgs) -> Result<(), String> {
    if a.size < 16 || a.rate == 0 {
        return Err("--size must be at least 16 and --rate above 0".into());
    }
    let bind = a.bind.unwrap_or_else(|| {
        SocketAddr::new(
            if a.to.is_ipv4() {
                [0u8; 4].into()
            } else {
                [0u16; 8].into()
            },
            0,
        )
    });
    let sock = UdpSocket::bind(bind).map_err(|e| format!("bind {bind}: {e}"))?;
    sock.connect(a.to)
        .map_err(|e| format!("connect {}: {e}", a.to))?;
    let mut buf = vec![0u8; a.size];
    let period = Duration::from_secs_f64(1.0 / f64::from(a.rate));
    let start = Instant::now();
    let mut errors = 0u64;
    for seq in 0..a.count {
        let due = start + period.mul_f64(seq as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        buf[8..16].copy_from_slice(&wall_ns().to_be_bytes());
        if sock.send(&buf).is_err() {
            errors += 1;
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "sent": a.count,
            "send_errors": errors,
            "seconds": start.elapsed().as_secs_f64(),
        })
    );
    Ok(())
}

/// What the receiver saw.
#[derive(Debug, Serialize)]
pub struct RecvReport {
    /// Packets the sender was to send.
    pub expected: u64,
    /// Distinct packets received.
    pub received: u64,
    /// Packets received more than once (extra copies).
    pub duplicates: u64,
    /// Expected packets never received.
    pub lost: u64,
    /// `lost / expected`.
    pub loss_ratio: f64,
    /// Packets that arrived after a later-numbered one.
    pub reordered: u64,
    /// Longest time between two consecutive deliveries, ms.
    pub max_gap_ms: f64,
    /// When that gap began, s after the first packet.
    pub max_gap_at_s: f64,
    /// One-way delay percentiles, ms (same clock on both ends assumed).
    pub owd_p50_ms: Option<f64>,
    /// 99th percentile.
    pub owd_p99_ms: Option<f64>,
    /// Distinct packets delivered per bin, from the first packet.
    pub series: Vec<u64>,
    /// The bin width, ms.
    pub bin_ms: f64,
}

fn recv(a: &RecvArgs) -> Result<RecvReport, String> {
    let sock = UdpSocket::bind(a.listen).map_err(|e| format!("bind {}: {e}", a.listen))?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;
    println!(
        "listening on {}",
        sock.local_addr().map_err(|e| e.to_string())?
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let begin = Instant::now();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut duplicates = 0u64;
    let mut reordered = 0u64;
    let mut highest: Option<u64> = None;
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut max_gap = Duration::ZERO;
    let mut max_gap_at = Duration::ZERO;
    let mut owd: Vec<f64> = Vec::new();
    let mut series: Vec<u64> = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let now = Instant::now();
        if now.duration_since(begin) > a.timeout
            || last.is_some_and(|l| now.duration_since(l) > a.idle)
        {
            break;
        }
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(format!("recv: {e}")),
        };
        if n < 16 {
            continue;
        }
        let arrived = Instant::now();
        let t = wall_ns();
        let seq = u64::from_be_bytes(buf[..8].try_into().unwrap_or_default());
        let sent = u64::from_be_bytes(buf[8..16].try_into().unwrap_or_default());
        if !seen.insert(seq) {
            duplicates += 1;
            continue;
        }
        let start = *first.get_or_insert(arrived);
        if let Some(l) = last {
            let gap = arrived.duration_since(l);
            if gap > max_gap {
                max_gap = gap;
                max_gap_at = l.duration_since(start);
            }
        }
        last = Some(arrived);
        if highest.is_some_and(|h| seq < h) {
            reordered += 1;
        }
        highest = Some(highest.map_or(seq, |h| h.max(seq)));
        owd.push(t.saturating_sub(sent) as f64 / 1e6);
        let bin = (arrived.duration_since(start).as_nanos() / a.bin.as_nanos().max(1)) as usize;
        if series.len() <= bin {
            series.resize(bin + 1, 0);
        }
        series[bin] += 1;
    }
    let received = seen.iter().filter(|s| **s < a.expect).count() as u64;
    owd.sort_by(f64::total_cmp);
    let pct = |p: f64| (!owd.is_empty()).then(|| owd[((owd.len() - 1) as f64 * p) as usize]);
    Ok(RecvReport {
        expected: a.expect,
        received,
        duplicates,
        lost: a.expect.saturating_sub(received),
        loss_ratio: if a.expect > 0 {
            a.expect.saturating_sub(received) as f64 / a.expect as f64
        } else {
            0.0
        },
        reordered,
        max_gap_ms: max_gap.as_secs_f64() * 1e3,
        max_gap_at_s: max_gap_at.as_secs_f64(),
        owd_p50_ms: pct(0.5),
        owd_p99_ms: pct(0.99),
        series,
        bin_ms: a.bin.as_secs_f64() * 1e3,
    })
}
