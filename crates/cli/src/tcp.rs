//! `polypath tcp`: the emulator's TCP bulk tool (kernel TCP or MPTCP), iperf3-like; see
//! `polypath_emu::tcp`.

use crate::transfer::parse_size;
use clap::{Args, Subcommand};
use polypath_emu::tcp::{self, Amount, CSV_HEADER, Interval, RecvConfig, Report, SendConfig};
use polypath_scenario::units::parse_duration;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// TCP tool commands.
#[derive(Debug, Subcommand)]
pub enum TcpCommand {
    /// Send a bulk stream to a `polypath tcp recv` (or any sink that reads to end of stream).
    Send(SendArgs),
    /// Receive bulk streams, one connection after the other, and report each.
    Recv(RecvArgs),
}

/// Options both sides take.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Use kernel MPTCP (IPPROTO_MPTCP); an error if the kernel has none.
    #[arg(long)]
    mptcp: bool,
    /// Congestion controller (TCP_CONGESTION), e.g. cubic, reno, bbr.
    #[arg(long, value_name = "NAME")]
    cc: Option<String>,
    /// Reporting interval (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
    /// Print the report as JSON on stdout (one object; `recv`: one line per connection).
    #[arg(long)]
    json: bool,
    /// Write the per-interval rows (t_s,bytes,goodput_mbps,rtt_ms,cwnd_bytes,retrans,
    /// rwnd_limited_ms,rtos,sndbuf_limited_ms) here.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
}

/// `polypath tcp send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The receiver's address.
    #[arg(long, value_name = "ADDR:PORT")]
    connect: SocketAddr,
    /// Local address to connect from (ADDR or ADDR:PORT).
    #[arg(long, value_name = "ADDR", value_parser = parse_bind)]
    bind: Option<SocketAddr>,
    /// Bytes to send (e.g. 100MB, 64MiB; MB = 10^6 bytes).
    #[arg(long, value_parser = parse_size, conflicts_with = "time")]
    bytes: Option<u64>,
    /// Send for this long instead (e.g. 10s). Default: 10s when --bytes is not given.
    #[arg(long, value_parser = parse_duration)]
    time: Option<Duration>,
    /// Write no faster than this (e.g. 100Mbit/s), like a rate-limited iperf client; the
    /// socket still sends only what its congestion control allows. Default: unlimited.
    #[arg(long, value_parser = parse_send_rate)]
    rate: Option<f64>,
    /// With --rate: write messages of this size (e.g. 100B, a device's message) instead of
    /// a millisecond's worth at a time.
    #[arg(long, value_parser = parse_size, requires = "rate")]
    message_size: Option<u64>,
    #[command(flatten)]
    common: CommonArgs,
}

/// `polypath tcp recv`.
#[derive(Debug, Args)]
pub struct RecvArgs {
    /// Address to listen on (port 0 picks a free port; the first line printed tells it).
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:5201")]
    listen: SocketAddr,
    /// Serve one connection, then exit (non-zero if it failed).
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    common: CommonArgs,
}

/// Default sending time when neither --bytes nor --time is given.
const DEFAULT_TIME: Duration = Duration::from_secs(10);

fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("interval {text:?} must be longer than zero"));
    }
    Ok(d)
}

fn parse_send_rate(text: &str) -> Result<f64, String> {
    let r = polypath_sim::scenario::units::parse_rate(text)?;
    if r <= 0.0 {
        return Err(format!("rate {text:?} must be positive"));
    }
    Ok(r)
}

fn parse_bind(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    text.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 0))
        .map_err(|_| format!("{text:?} is neither ADDR nor ADDR:PORT"))
}

/// Runs a TCP tool command.
pub fn run(cmd: TcpCommand) -> Result<(), String> {
    match cmd {
        TcpCommand::Send(args) => run_send(args),
        TcpCommand::Recv(args) => run_recv(args),
    }
}

fn run_send(args: SendArgs) -> Result<(), String> {
    let amount = match (args.bytes, args.time) {
        (Some(n), _) => Amount::Bytes(n),
        (None, Some(t)) => Amount::Time(t),
        (None, None) => Amount::Time(DEFAULT_TIME),
    };
    let common = &args.common;
    let config = SendConfig {
        connect: args.connect,
        bind: args.bind,
        mptcp: common.mptcp,
        cc: common.cc.clone(),
        amount,
        interval: common.interval,
        rate: args.rate,
        message_size: args.message_size,
    };
    let mut csv = common.csv.as_deref().map(CsvOut::create).transpose()?;
    let json = common.json;
    let report = tcp::send_with(&config, &mut |i| {
        if !json {
            eprintln!("{}", interval_line(i));
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some(csv) = &mut csv {
        csv.rows(&report.intervals)?;
    }
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        println!("{}", summary_line(&report));
    }
    Ok(())
}

fn run_recv(args: RecvArgs) -> Result<(), String> {
    let common = &args.common;
    let config = RecvConfig {
        listen: args.listen,
        mptcp: common.mptcp,
        cc: common.cc.clone(),
        interval: common.interval,
    };
    let listener = tcp::listen(&config).map_err(|e| e.to_string())?;
    let mut csv = common.csv.as_deref().map(CsvOut::create).transpose()?;
    println!("listening on {}", listener.local_addr());
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let json = common.json;
    loop {
        let result = tcp::recv_one_with(&listener, &config, &mut |i| {
            if !json {
                eprintln!("{}", interval_line(i));
            }
        });
        let report = match result {
            Ok(report) => report,
            Err(e) if !args.once => {
                eprintln!("error: {e}");
                // Not a busy loop if accepting itself keeps failing (e.g. out of descriptors).
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        if let Some(csv) = &mut csv {
            csv.rows(&report.intervals)?;
        }
        if json {
            let text = serde_json::to_string(&report).map_err(|e| e.to_string())?;
            println!("{text}");
        } else {
            println!("{}", summary_line(&report));
        }
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        if args.once {
            return Ok(());
        }
    }
}

/// The CSV file: a header, then the rows of every transfer (each from t = 0).
struct CsvOut {
    path: PathBuf,
    out: BufWriter<File>,
}

impl CsvOut {
    fn create(path: &Path) -> Result<CsvOut, String> {
        let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut csv = CsvOut {
            path: path.to_owned(),
            out: BufWriter::new(file),
        };
        writeln!(csv.out, "{CSV_HEADER}").map_err(|e| csv.error(e))?;
        Ok(csv)
    }

    fn rows(&mut self, intervals: &[Interval]) -> Result<(), String> {
        tcp::write_csv_rows(&mut self.out, intervals).map_err(|e| self.error(e))?;
        self.out.flush().map_err(|e| self.error(e))
    }

    fn error(&self, e: std::io::Error) -> String {
        format!("{}: {e}", self.path.display())
    }
}

fn interval_line(i: &Interval) -> String {
    let mut line = format!(
        "{:7.2}-{:7.2} s  {:>10}  {:9.2} Mbit/s",
        i.t_s - i.seconds,
        i.t_s,
        human_bytes(i.bytes),
        i.goodput_mbps
    );
    if let Some(rtt) = i.rtt_ms {
        line.push_str(&format!("  rtt {rtt:.3} ms"));
    }
    if let Some(cwnd) = i.cwnd_bytes {
        line.push_str(&format!("  cwnd {}", human_bytes(cwnd)));
    }
    if let Some(retrans) = i.retrans {
        line.push_str(&format!("  retrans {retrans}"));
    }
    line
}

fn summary_line(r: &Report) -> String {
    let role = match r.role {
        tcp::Role::Send => "sent to",
        tcp::Role::Recv => "received from",
    };
    let mut line = format!(
        "{role} {}: {} bytes ({}) in {:.3} s, {:.2} Mbit/s, cc {}",
        r.peer,
        r.bytes,
        human_bytes(r.bytes),
        r.seconds,
        r.goodput_mbps,
        r.cc.as_deref().unwrap_or("unknown"),
    );
    if r.mptcp {
        match r.subflows {
            Some(n) => line.push_str(&format!(", MPTCP with {n} subflow(s)")),
            None => line.push_str(", MPTCP (subflows unknown)"),
        }
    }
    if let Some(rtt) = r.rtt_ms {
        line.push_str(&format!(", rtt {rtt:.3} ms"));
    }
    if let (Some(seg), Some(bytes)) = (r.cwnd_segments, r.cwnd_bytes) {
        line.push_str(&format!(", cwnd {seg} segments ({})", human_bytes(bytes)));
    }
    if let Some(retrans) = r.retransmits {
        line.push_str(&format!(", {retrans} retransmits"));
    }
    line
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1000.0;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_takes_an_address_with_or_without_port() {
        assert_eq!(parse_bind("10.0.0.2"), Ok("10.0.0.2:0".parse().unwrap()));
        assert_eq!(
            parse_bind("10.0.0.2:4000"),
            Ok("10.0.0.2:4000".parse().unwrap())
        );
        assert_eq!(parse_bind("::1"), Ok("[::1]:0".parse().unwrap()));
        assert!(parse_bind("eth0").is_err());
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(20_000_000), "20.00 MB");
        assert_eq!(human_bytes(1_500_000_000), "1.50 GB");
    }
}
