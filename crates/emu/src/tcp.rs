//! The TCP bulk tool: an iperf3-like sender and receiver over kernel TCP or kernel MPTCP
//! (Linux only).
//!
//! The sender ([`send`]) connects, writes a deterministic byte pattern (byte `n` of the
//! stream is `n % 251`) as fast as the socket takes it for a number of bytes or a time, shuts
//! its write side down and waits for the receiver to close, so its time covers delivery. The
//! receiver ([`listen`], then [`recv_one`] per connection) reads to end of stream and counts.
//! Both sides measure per interval and in total; the sender adds what the kernel knows of the
//! connection (`TCP_INFO`: round-trip time, congestion window, retransmissions, time stalled
//! by the receiver's window) and, over MPTCP, the number of subflows (`MPTCP_INFO`).
//!
//! With [`SendConfig::mptcp`] / [`RecvConfig::mptcp`] the socket is opened with
//! `IPPROTO_MPTCP`; a kernel without MPTCP is an error ([`TcpToolError::MptcpUnavailable`]),
//! never a silent fall back to TCP. [`SendConfig::cc`] / [`RecvConfig::cc`] set
//! `TCP_CONGESTION`; the report names the controller the socket actually uses.
//!
//! ```no_run
//! use polypath_emu::tcp::{self, Amount, RecvConfig, SendConfig};
//! use std::time::Duration;
//!
//! let recv_config = RecvConfig::new("127.0.0.1:0".parse()?);
//! let listener = tcp::listen(&recv_config)?;
//! let addr = listener.local_addr();
//! let receiver = std::thread::spawn(move || tcp::recv_one(&listener, &recv_config));
//! let mut send_config = SendConfig::new(addr, Amount::Bytes(20_000_000));
//! send_config.cc = Some("cubic".into());
//! let sent = tcp::send(&send_config)?;
//! let received = receiver.join().expect("receiver thread")?;
//! assert_eq!(sent.bytes, received.bytes);
//! println!("{:.1} Mbit/s, rtt {:?} ms", sent.goodput_mbps, sent.rtt_ms);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod sockopt;

use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use polypath_sim::traffic::AppRate;

pub use sockopt::{MptcpInfo, TcpInfo};

/// Bytes handed to the socket per write.
const WRITE_CHUNK: usize = 128 * 1024;
/// Bytes read from the socket per read.
const READ_CHUNK: usize = 256 * 1024;
/// Period of the sender's byte pattern (a prime, so it does not line up with segments).
const PATTERN_PERIOD: usize = 251;
/// Longest a blocked read or write waits before the tool looks at the clock.
const MAX_BLOCK: Duration = Duration::from_millis(200);
/// Listen backlog of the receiver.
const BACKLOG: i32 = 16;
/// Default reporting interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// What went wrong in the TCP tool.
#[derive(Debug, thiserror::Error)]
pub enum TcpToolError {
    /// The kernel refused an `IPPROTO_MPTCP` socket.
    #[error(
        "MPTCP is not available: the kernel refused an IPPROTO_MPTCP socket ({source}); \
         check `sysctl net.mptcp.enabled` (must be 1) and that the kernel has MPTCP"
    )]
    MptcpUnavailable {
        /// The error of `socket(2)`.
        source: io::Error,
    },
    /// The kernel refused the congestion controller asked for.
    #[error(
        "congestion controller {name:?} cannot be used ({source}); available: {available} \
         (from {path})",
        path = sockopt::AVAILABLE_CC_PATH
    )]
    UnknownCongestionControl {
        /// The controller asked for.
        name: String,
        /// What `/proc/sys/net/ipv4/tcp_available_congestion_control` lists.
        available: String,
        /// The error of `setsockopt(TCP_CONGESTION)`.
        source: io::Error,
    },
    /// A socket operation failed; `what` names the operation and the address.
    #[error("{what}: {source}")]
    Io {
        /// The operation and its address, e.g. `connect to 10.0.0.1:5201`.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A configuration value is unusable.
    #[error("{0}")]
    Config(String),
}

impl TcpToolError {
    /// True if the kernel has no MPTCP at all (`EPROTONOSUPPORT`), as opposed to MPTCP
    /// being disabled or some other failure.
    pub fn is_mptcp_unsupported(&self) -> bool {
        matches!(self, TcpToolError::MptcpUnavailable { source }
            if source.raw_os_error() == Some(libc::EPROTONOSUPPORT))
    }
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> TcpToolError {
    let what = what.into();
    move |source| TcpToolError::Io { what, source }
}

/// How much the sender sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// Exactly this many bytes.
    Bytes(u64),
    /// As many bytes as the connection takes in this time.
    Time(Duration),
}

/// The sender's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SendConfig {
    /// The receiver's address.
    pub connect: SocketAddr,
    /// Local address (and port, 0 for any) to connect from; default any.
    pub bind: Option<SocketAddr>,
    /// Open the socket with `IPPROTO_MPTCP`.
    pub mptcp: bool,
    /// Congestion controller (`TCP_CONGESTION`); default the system's.
    pub cc: Option<String>,
    /// How much to send.
    pub amount: Amount,
    /// Reporting interval.
    pub interval: Duration,
    /// The application's sending rate, bit/s: the sender writes no faster than this, in
    /// the pieces of [`polypath_sim::traffic::AppRate`] (unlimited when `None`).
    pub rate: Option<f64>,
    /// With `rate`: the size of each write (a device's message), bytes; default the pieces
    /// of [`polypath_sim::traffic::AppRate::new`].
    pub message_size: Option<u64>,
}

impl SendConfig {
    /// A TCP sender of `amount` to `connect` with the system's congestion controller and
    /// one-second intervals.
    pub fn new(connect: SocketAddr, amount: Amount) -> SendConfig {
        SendConfig {
            connect,
            bind: None,
            mptcp: false,
            cc: None,
            amount,
            interval: DEFAULT_INTERVAL,
            rate: None,
            message_size: None,
        }
    }
}

/// The receiver's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RecvConfig {
    /// Address to listen on (port 0 picks a free port: see [`Listener::local_addr`]).
    pub listen: SocketAddr,
    /// Open the listening socket with `IPPROTO_MPTCP`.
    pub mptcp: bool,
    /// Congestion controller (`TCP_CONGESTION`) of the listening and accepted sockets;
    /// default the system's.
    pub cc: Option<String>,
    /// Reporting interval.
    pub interval: Duration,
}

impl RecvConfig {
    /// A TCP receiver on `listen` with the system's congestion controller and one-second
    /// intervals.
    pub fn new(listen: SocketAddr) -> RecvConfig {
        RecvConfig {
            listen,
            mptcp: false,
            cc: None,
            interval: DEFAULT_INTERVAL,
        }
    }
}

/// Which side a report is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The sender.
    Send,
    /// The receiver.
    Recv,
}

/// One reporting interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    /// End of the interval, seconds since the transfer started.
    pub t_s: f64,
    /// Length of the interval, seconds (the last one is usually shorter).
    pub seconds: f64,
    /// Bytes written (sender) or read (receiver) in the interval.
    pub bytes: u64,
    /// `bytes` over `seconds`, Mbit/s.
    pub goodput_mbps: f64,
    /// Smoothed round-trip time at the end of the interval, ms (sender only).
    pub rtt_ms: Option<f64>,
    /// Congestion window at the end of the interval, bytes (sender only).
    pub cwnd_bytes: Option<u64>,
    /// Segments retransmitted in the interval (sender only).
    pub retrans: Option<u32>,
    /// Retransmission timeouts in the interval (sender only; `tcpi_total_rto`, kernels
    /// from 6.7).
    pub rtos: Option<u32>,
    /// Time in the interval the sender was stalled by the receiver's window, ms (sender
    /// only; `tcpi_rwnd_limited`, kernels from 4.10). The kernel counts it in clock ticks
    /// (1 to 10 ms), so one interval's figure is off by up to a tick, and so is a sum over
    /// consecutive intervals (the errors do not add up).
    pub rwnd_limited_ms: Option<f64>,
    /// Time in the interval the sender was stalled by its own send buffer, ms (sender
    /// only; `tcpi_sndbuf_limited`, kernels from 4.10), counted like `rwnd_limited_ms`.
    pub sndbuf_limited_ms: Option<f64>,
}

/// What one transfer was, from one side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Sender or receiver.
    pub role: Role,
    /// This side's address.
    pub local: String,
    /// The other side's address.
    pub peer: String,
    /// Bytes sent (sender) or received (receiver).
    pub bytes: u64,
    /// Seconds from connection to the peer's close (sender) or from accept to end of
    /// stream (receiver).
    pub seconds: f64,
    /// `bytes` over `seconds`, Mbit/s.
    pub goodput_mbps: f64,
    /// The congestion controller the socket used (`TCP_CONGESTION`), if it could be read.
    pub cc: Option<String>,
    /// Whether the socket was an MPTCP socket.
    pub mptcp: bool,
    /// The most MPTCP subflows seen open at once (`MPTCP_INFO`); `None` without MPTCP or
    /// when the kernel did not tell (e.g. after a fall back to TCP).
    pub subflows: Option<u32>,
    /// Smoothed round-trip time at the end, ms (sender only).
    pub rtt_ms: Option<f64>,
    /// Round-trip time variation at the end, ms (sender only).
    pub rttvar_ms: Option<f64>,
    /// Congestion window at the end, segments (sender only).
    pub cwnd_segments: Option<u32>,
    /// Congestion window at the end, bytes (sender only).
    pub cwnd_bytes: Option<u64>,
    /// Segments retransmitted over the connection (sender only).
    pub retransmits: Option<u32>,
    /// The last `TCP_INFO` read (for MPTCP, the first subflow's), either side.
    pub tcp_info: Option<TcpInfo>,
    /// The last `MPTCP_INFO` read, either side.
    pub mptcp_info: Option<MptcpInfo>,
    /// Per-interval records.
    pub intervals: Vec<Interval>,
    /// Receiver only: whether every byte received was the sender's pattern (byte `n` of the
    /// stream is `n % 251`), i.e. the stream arrived byte-exact.
    pub pattern_ok: Option<bool>,
}

/// A listening socket of the receiver.
#[derive(Debug)]
pub struct Listener {
    socket: Socket,
    local: SocketAddr,
    mptcp: bool,
}

impl Listener {
    /// The address it listens on (with the port picked when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether it is an MPTCP socket.
    pub fn is_mptcp(&self) -> bool {
        self.mptcp
    }
}

/// Opens a stream socket for `addr`'s family, TCP or MPTCP.
fn open_socket(addr: SocketAddr, mptcp: bool) -> Result<Socket, TcpToolError> {
    let protocol = if mptcp {
        Protocol::from(sockopt::IPPROTO_MPTCP)
    } else {
        Protocol::TCP
    };
    Socket::new(Domain::for_address(addr), Type::STREAM, Some(protocol)).map_err(|source| {
        match source.raw_os_error() {
            Some(libc::EPROTONOSUPPORT | libc::ENOPROTOOPT | libc::EINVAL) if mptcp => {
                TcpToolError::MptcpUnavailable { source }
            }
            _ => TcpToolError::Io {
                what: format!(
                    "open a {} socket for {addr}",
                    if mptcp { "MPTCP" } else { "TCP" }
                ),
                source,
            },
        }
    })
}

/// Sets the congestion controller, or says which ones there are.
fn set_congestion(socket: &Socket, name: &str) -> Result<(), TcpToolError> {
    let unknown = |source| TcpToolError::UnknownCongestionControl {
        name: name.to_owned(),
        available: sockopt::available_congestion_controls(),
        source,
    };
    // The kernel truncates longer names, which could pick another controller.
    if name.is_empty() || name.len() >= sockopt::TCP_CA_NAME_MAX || name.contains('\0') {
        return Err(unknown(io::Error::from_raw_os_error(libc::ENOENT)));
    }
    sockopt::set_congestion(socket.as_raw_fd(), name).map_err(unknown)
}

fn sock_addr_text(addr: io::Result<SockAddr>) -> String {
    match addr.map(|a| a.as_socket()) {
        Ok(Some(a)) => a.to_string(),
        _ => "unknown".to_owned(),
    }
}

fn check_interval(interval: Duration) -> Result<(), TcpToolError> {
    if interval.is_zero() {
        return Err(TcpToolError::Config(
            "the reporting interval must be longer than zero".into(),
        ));
    }
    Ok(())
}

/// Splits a transfer into intervals.
struct Meter {
    start: Instant,
    interval: Duration,
    next: Instant,
    last_t: Duration,
    last_bytes: u64,
    last_retrans: Option<u32>,
    last_rtos: u16,
    last_rwnd_limited_us: u64,
    last_sndbuf_limited_us: u64,
    intervals: Vec<Interval>,
}

impl Meter {
    fn new(start: Instant, interval: Duration) -> Meter {
        Meter {
            start,
            interval,
            next: start + interval,
            last_t: Duration::ZERO,
            last_bytes: 0,
            last_retrans: None,
            last_rtos: 0,
            last_rwnd_limited_us: 0,
            last_sndbuf_limited_us: 0,
            intervals: Vec::new(),
        }
    }

    fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Closes the last interval, unless an interval just closed and nothing came since.
    fn finish(
        &mut self,
        now: Instant,
        total: u64,
        info: Option<&TcpInfo>,
        on_interval: &mut dyn FnMut(&Interval),
    ) {
        if total > self.last_bytes || self.intervals.is_empty() {
            self.close(now, total, info, on_interval);
        }
    }

    /// Closes the interval ending `now` with `total` bytes so far.
    fn close(
        &mut self,
        now: Instant,
        total: u64,
        info: Option<&TcpInfo>,
        on_interval: &mut dyn FnMut(&Interval),
    ) {
        let t = now.saturating_duration_since(self.start);
        let seconds = (t - self.last_t.min(t)).as_secs_f64();
        let bytes = total - self.last_bytes;
        let retrans = info.map(|i| {
            let delta = i
                .total_retrans
                .saturating_sub(self.last_retrans.unwrap_or(0));
            self.last_retrans = Some(i.total_retrans);
            delta
        });
        let rtos = info.and_then(|i| i.total_rto).map(|total| {
            let delta = total.saturating_sub(self.last_rtos);
            self.last_rtos = total;
            u32::from(delta)
        });
        let rwnd_limited_ms = info
            .and_then(|i| i.rwnd_limited_us)
            .map(|total| stalled_ms(total, &mut self.last_rwnd_limited_us));
        let sndbuf_limited_ms = info
            .and_then(|i| i.sndbuf_limited_us)
            .map(|total| stalled_ms(total, &mut self.last_sndbuf_limited_us));
        let interval = Interval {
            t_s: t.as_secs_f64(),
            seconds,
            bytes,
            goodput_mbps: mbps(bytes, seconds),
            rtt_ms: info.map(TcpInfo::rtt_ms),
            cwnd_bytes: info.map(TcpInfo::cwnd_bytes),
            retrans,
            rtos,
            rwnd_limited_ms,
            sndbuf_limited_ms,
        };
        on_interval(&interval);
        self.intervals.push(interval);
        self.last_t = t;
        self.last_bytes = total;
        self.next += self.interval;
        if self.next <= now {
            self.next = now + self.interval;
        }
    }
}

/// The stall a cumulative `tcp_info` counter (µs) gained since `last`, in ms; moves `last`
/// on to `total`.
fn stalled_ms(total: u64, last: &mut u64) -> f64 {
    let delta = total.saturating_sub(*last);
    *last = total;
    delta as f64 / 1000.0
}

fn mbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds / 1e6
    } else {
        0.0
    }
}

/// Tracks the most subflows seen and the last `MPTCP_INFO`.
#[derive(Default)]
struct MptcpWatch {
    last: Option<MptcpInfo>,
    most_subflows: Option<u32>,
}

impl MptcpWatch {
    fn sample(&mut self, socket: &Socket, mptcp: bool) {
        if !mptcp {
            return;
        }
        if let Ok(info) = MptcpInfo::read(socket.as_raw_fd()) {
            let count = info.subflow_count();
            self.most_subflows = Some(self.most_subflows.map_or(count, |m| m.max(count)));
            self.last = Some(info);
        }
    }
}

/// The stream's bytes: byte `n` is `n % 251`, so any window of `len` bytes starts at offset
/// `n % 251` of this buffer.
fn pattern(len: usize) -> Vec<u8> {
    (0..len + PATTERN_PERIOD)
        .map(|i| (i % PATTERN_PERIOD) as u8)
        .collect()
}

/// Sends as [`SendConfig`] says and reports; see [`send_with`] to see intervals as they end.
pub fn send(config: &SendConfig) -> Result<Report, TcpToolError> {
    send_with(config, &mut |_| {})
}

/// Sends as [`SendConfig`] says, calling `on_interval` at the end of each interval, and
/// reports.
pub fn send_with(
    config: &SendConfig,
    on_interval: &mut dyn FnMut(&Interval),
) -> Result<Report, TcpToolError> {
    check_interval(config.interval)?;
    let pacing = match config.rate {
        None => None,
        Some(r) => Some(
            AppRate::with_message(r, config.message_size).ok_or_else(|| {
                TcpToolError::Config(format!(
                    "rate {r} bit/s: must be positive and finite, and the message size positive"
                ))
            })?,
        ),
    };
    let peer = config.connect;
    let socket = open_socket(peer, config.mptcp)?;
    if let Some(name) = &config.cc {
        set_congestion(&socket, name)?;
    }
    if let Some(bind) = config.bind {
        socket
            .bind(&bind.into())
            .map_err(io_error(format!("bind to {bind}")))?;
    }
    socket
        .connect(&peer.into())
        .map_err(io_error(format!("connect to {peer}")))?;
    let start = Instant::now();
    let fd = socket.as_raw_fd();
    socket
        .set_write_timeout(Some(config.interval.min(MAX_BLOCK)))
        .map_err(io_error("set SO_SNDTIMEO"))?;
    socket
        .set_read_timeout(Some(config.interval.min(MAX_BLOCK)))
        .map_err(io_error("set SO_RCVTIMEO"))?;
    let local = sock_addr_text(socket.local_addr());
    let mut watch = MptcpWatch::default();
    watch.sample(&socket, config.mptcp);

    let buf = pattern(WRITE_CHUNK);
    let deadline = match config.amount {
        Amount::Time(d) => Some(start + d),
        Amount::Bytes(_) => None,
    };
    let mut meter = Meter::new(start, config.interval);
    let mut sent: u64 = 0;
    loop {
        let now = Instant::now();
        let mut want = match config.amount {
            Amount::Bytes(total) => (total - sent).min(WRITE_CHUNK as u64) as usize,
            Amount::Time(_) => WRITE_CHUNK,
        };
        if want == 0 || deadline.is_some_and(|d| now >= d) {
            break;
        }
        if meter.due(now) {
            let info = TcpInfo::read(fd).ok();
            watch.sample(&socket, config.mptcp);
            meter.close(now, sent, info.as_ref(), on_interval);
        }
        if let Some(p) = &pacing {
            let allowed = p.allowed(now.duration_since(start)).saturating_sub(sent);
            if allowed == 0 {
                // Sleep until the next piece, the next interval or the end, whichever
                // comes first.
                let mut wake = (start + p.due(sent)).min(meter.next);
                if let Some(d) = deadline {
                    wake = wake.min(d);
                }
                std::thread::sleep(wake.saturating_duration_since(now));
                continue;
            }
            want = want.min(usize::try_from(allowed).unwrap_or(usize::MAX));
        }
        let offset = (sent % PATTERN_PERIOD as u64) as usize;
        match (&socket).write(&buf[offset..offset + want]) {
            Ok(0) => {
                return Err(TcpToolError::Io {
                    what: format!("write to {peer}"),
                    source: io::Error::from(io::ErrorKind::WriteZero),
                });
            }
            Ok(n) => sent += n as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(io_error(format!("write to {peer}"))(e)),
        }
    }
    // What the connection looked like while it was still sending.
    let sending_info = TcpInfo::read(fd).ok();
    watch.sample(&socket, config.mptcp);
    meter.finish(Instant::now(), sent, sending_info.as_ref(), on_interval);
    socket
        .shutdown(Shutdown::Write)
        .map_err(io_error(format!("shut down the write side to {peer}")))?;
    // The receiver closes once it has read everything: wait for that.
    let mut sink = [0u8; 4096];
    loop {
        match (&socket).read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                return Err(io_error(format!(
                    "wait for {peer} to close after {sent} bytes"
                ))(e));
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let cc = sockopt::congestion(fd).ok();
    // After the close the kernel may no longer answer (an MPTCP subflow is gone) or answer
    // with less: keep what was read while sending then.
    let info = TcpInfo::read(fd)
        .ok()
        .filter(|i| i.rtt_us > 0 && i.snd_cwnd > 0)
        .or(sending_info);
    if config.mptcp
        && let Ok(last) = MptcpInfo::read(fd)
    {
        watch.last = Some(last);
    }
    Ok(Report {
        role: Role::Send,
        local,
        peer: peer.to_string(),
        bytes: sent,
        seconds,
        goodput_mbps: mbps(sent, seconds),
        cc,
        mptcp: config.mptcp,
        subflows: watch.most_subflows,
        rtt_ms: info.as_ref().map(TcpInfo::rtt_ms),
        rttvar_ms: info.as_ref().map(|i| f64::from(i.rttvar_us) / 1000.0),
        cwnd_segments: info.as_ref().map(|i| i.snd_cwnd),
        cwnd_bytes: info.as_ref().map(TcpInfo::cwnd_bytes),
        retransmits: info.as_ref().map(|i| i.total_retrans),
        tcp_info: info,
        mptcp_info: watch.last,
        intervals: meter.intervals,
        pattern_ok: None,
    })
}

/// Opens the receiver's listening socket.
pub fn listen(config: &RecvConfig) -> Result<Listener, TcpToolError> {
    check_interval(config.interval)?;
    let addr = config.listen;
    let socket = open_socket(addr, config.mptcp)?;
    socket
        .set_reuse_address(true)
        .map_err(io_error(format!("set SO_REUSEADDR on {addr}")))?;
    if let Some(name) = &config.cc {
        set_congestion(&socket, name)?;
    }
    socket
        .bind(&addr.into())
        .map_err(io_error(format!("bind to {addr}")))?;
    socket
        .listen(BACKLOG)
        .map_err(io_error(format!("listen on {addr}")))?;
    let local = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or(addr);
    Ok(Listener {
        socket,
        local,
        mptcp: config.mptcp,
    })
}

/// Accepts one connection on `listener`, reads it to end of stream and reports; see
/// [`recv_one_with`] to see intervals as they end.
pub fn recv_one(listener: &Listener, config: &RecvConfig) -> Result<Report, TcpToolError> {
    recv_one_with(listener, config, &mut |_| {})
}

/// Accepts one connection on `listener`, reads it to end of stream, calling `on_interval`
/// at the end of each interval, and reports.
pub fn recv_one_with(
    listener: &Listener,
    config: &RecvConfig,
    on_interval: &mut dyn FnMut(&Interval),
) -> Result<Report, TcpToolError> {
    check_interval(config.interval)?;
    let here = listener.local;
    let (socket, peer) = loop {
        match listener.socket.accept() {
            Ok(accepted) => break accepted,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(format!("accept on {here}"))(e)),
        }
    };
    let start = Instant::now();
    let peer = peer
        .as_socket()
        .map_or_else(|| "unknown".to_owned(), |a| a.to_string());
    let fd = socket.as_raw_fd();
    if let Some(name) = &config.cc {
        set_congestion(&socket, name)?;
    }
    socket
        .set_read_timeout(Some(config.interval.min(MAX_BLOCK)))
        .map_err(io_error(format!(
            "set SO_RCVTIMEO on the connection from {peer}"
        )))?;
    let local = sock_addr_text(socket.local_addr());
    let mut watch = MptcpWatch::default();
    watch.sample(&socket, listener.mptcp);

    let mut buf = vec![0u8; READ_CHUNK];
    let expected = pattern(READ_CHUNK);
    let mut pattern_ok = true;
    let mut meter = Meter::new(start, config.interval);
    let mut received: u64 = 0;
    loop {
        match (&socket).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // The sender's pattern continues at offset `received % 251`.
                let offset = (received % PATTERN_PERIOD as u64) as usize;
                pattern_ok &= buf[..n] == expected[offset..offset + n];
                received += n as u64;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                return Err(io_error(format!("read from {peer} after {received} bytes"))(e));
            }
        }
        let now = Instant::now();
        if meter.due(now) {
            watch.sample(&socket, listener.mptcp);
            meter.close(now, received, None, on_interval);
        }
    }
    let end = Instant::now();
    meter.finish(end, received, None, on_interval);
    let seconds = end.duration_since(start).as_secs_f64();
    watch.sample(&socket, listener.mptcp);
    let cc = sockopt::congestion(fd).ok();
    let tcp_info = TcpInfo::read(fd).ok();
    drop(socket);
    Ok(Report {
        role: Role::Recv,
        local,
        peer,
        bytes: received,
        seconds,
        goodput_mbps: mbps(received, seconds),
        cc,
        mptcp: listener.mptcp,
        subflows: watch.most_subflows,
        rtt_ms: None,
        rttvar_ms: None,
        cwnd_segments: None,
        cwnd_bytes: None,
        retransmits: None,
        tcp_info,
        mptcp_info: watch.last,
        intervals: meter.intervals,
        pattern_ok: Some(pattern_ok),
    })
}

/// Writes intervals as CSV rows
/// `t_s,bytes,goodput_mbps,rtt_ms,cwnd_bytes,retrans,rwnd_limited_ms,rtos,sndbuf_limited_ms`
/// (empty where a value is unknown), without the header ([`CSV_HEADER`]).
pub fn write_csv_rows(out: &mut dyn Write, intervals: &[Interval]) -> io::Result<()> {
    fn opt<T: ToString>(v: Option<T>) -> String {
        v.map(|v| v.to_string()).unwrap_or_default()
    }
    for i in intervals {
        writeln!(
            out,
            "{:.6},{},{:.3},{},{},{},{},{},{}",
            i.t_s,
            i.bytes,
            i.goodput_mbps,
            opt(i.rtt_ms.map(|r| format!("{r:.3}"))),
            opt(i.cwnd_bytes),
            opt(i.retrans),
            opt(i.rwnd_limited_ms.map(|r| format!("{r:.3}"))),
            opt(i.rtos),
            opt(i.sndbuf_limited_ms.map(|r| format!("{r:.3}"))),
        )?;
    }
    Ok(())
}

/// The CSV header line of [`write_csv_rows`].
pub const CSV_HEADER: &str =
    "t_s,bytes,goodput_mbps,rtt_ms,cwnd_bytes,retrans,rwnd_limited_ms,rtos,sndbuf_limited_ms";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_the_stream_offset_mod_251() {
        let buf = pattern(WRITE_CHUNK);
        for sent in [0u64, 1, 250, 251, 1_000_003] {
            let offset = (sent % PATTERN_PERIOD as u64) as usize;
            for k in 0..600 {
                assert_eq!(
                    u64::from(buf[offset + k]),
                    (sent + k as u64) % PATTERN_PERIOD as u64
                );
            }
        }
    }

    #[test]
    fn meter_intervals_add_up_and_skip_an_empty_tail() {
        let start = Instant::now();
        let step = Duration::from_millis(100);
        let mut meter = Meter::new(start, step);
        let mut seen = 0;
        let mut count = |_: &Interval| seen += 1;
        assert!(!meter.due(start));
        assert!(meter.due(start + step));
        meter.close(start + step, 1000, None, &mut count);
        meter.close(start + 2 * step, 3000, None, &mut count);
        // Nothing since the last interval: no empty tail.
        meter.finish(start + 2 * step, 3000, None, &mut count);
        assert_eq!(meter.intervals.len(), 2);
        meter.finish(start + 3 * step, 3500, None, &mut count);
        assert_eq!(seen, 3);
        let bytes: Vec<u64> = meter.intervals.iter().map(|i| i.bytes).collect();
        assert_eq!(bytes, [1000, 2000, 500]);
        assert!((meter.intervals[1].goodput_mbps - 0.16).abs() < 1e-9);
        // A transfer shorter than one interval still has one.
        let mut short = Meter::new(start, step);
        short.finish(start + step / 2, 0, None, &mut |_| {});
        assert_eq!(short.intervals.len(), 1);
    }

    #[test]
    fn csv_rows_leave_unknowns_empty() {
        let mut out = Vec::new();
        let rows = [
            Interval {
                t_s: 1.0,
                seconds: 1.0,
                bytes: 125_000,
                goodput_mbps: 1.0,
                rtt_ms: Some(0.05),
                cwnd_bytes: Some(14480),
                retrans: Some(0),
                rtos: Some(1),
                rwnd_limited_ms: Some(12.5),
                sndbuf_limited_ms: Some(3.25),
            },
            Interval {
                t_s: 1.5,
                seconds: 0.5,
                bytes: 0,
                goodput_mbps: 0.0,
                rtt_ms: None,
                cwnd_bytes: None,
                retrans: None,
                rtos: None,
                rwnd_limited_ms: None,
                sndbuf_limited_ms: None,
            },
        ];
        write_csv_rows(&mut out, &rows).expect("write to a Vec");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "1.000000,125000,1.000,0.050,14480,0,12.500,1,3.250\n1.500000,0,0.000,,,,,,\n"
        );
    }
}
