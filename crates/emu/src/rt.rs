//! The real-time engine: the simulator's link and radio model (`polypath_sim::Simulator`)
//! advanced on the monotonic clock, between the TUN devices of the hosts.
//!
//! One thread (real-time priority when allowed, 1 ns timer slack) loops: advance the model
//! to now; write the packets it delivered to the destination hosts' TUN devices; hand the
//! link events it produced to the hosts' feeds; read every packet the hosts' stacks sent
//! and inject it, at now, from the flow's tap agent on that host; sleep until the model's
//! next event or a packet arrives (`ppoll`, nanosecond timeout).

use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use polypath_link::LinkEvent;
use polypath_link::feed::FeedEvent;
use polypath_sim::{Agent, AgentStats, Datagram, Record, SimTime};
use serde::Serialize;

use crate::udpgen;

/// A packet the model delivered to a host.
pub(crate) struct Delivery {
    pub host: u32,
    pub dst: IpAddr,
    pub packet: Bytes,
    /// When the model delivered it (ns of the run's clock).
    pub due: u64,
}

/// What the taps hand to the loop.
#[derive(Default)]
pub(crate) struct Outbox {
    pub deliveries: Vec<Delivery>,
    pub events: Vec<(u32, FeedEvent)>,
}

/// The model's side of a host's network stack for one flow: packets the loop injects are
/// this agent's; with `catch_all` it also receives the packets addressed to the host and
/// the host's link events.
pub(crate) struct Tap {
    pub host: u32,
    pub outbox: Rc<RefCell<Outbox>>,
    /// Application counters and completions of the flow's generator or client, reported
    /// as this agent's.
    pub app: Option<Arc<udpgen::Shared>>,
    /// Passes the host's link events to its feed (the host's catch-all tap only, so each
    /// event is fed once).
    pub feeds_events: bool,
}

impl Agent for Tap {
    fn handle_datagram(&mut self, now: SimTime, datagram: Datagram) {
        self.outbox.borrow_mut().deliveries.push(Delivery {
            host: self.host,
            dst: datagram.dst.ip(),
            packet: datagram.payload,
            due: now.0,
        });
    }

    fn handle_timeout(&mut self, _now: SimTime) {}

    fn poll_transmit(&mut self, _now: SimTime) -> Option<Datagram> {
        None
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        None
    }

    fn is_done(&self) -> bool {
        true
    }

    fn stats(&self, stats: &mut AgentStats) {
        if let Some(a) = &self.app {
            stats.app_bytes_received = a.app_rx.load(Ordering::Relaxed);
            stats.app_bytes_sent = a.app_tx.load(Ordering::Relaxed);
        }
    }

    fn drain_records(&mut self, out: &mut Vec<Record>) {
        if let Some(a) = &self.app
            && let Ok(mut r) = a.records.lock()
        {
            out.append(&mut r);
        }
    }

    fn handle_link_event(&mut self, _now: SimTime, event: &LinkEvent, local: Option<IpAddr>) {
        if !self.feeds_events {
            return;
        }
        self.outbox.borrow_mut().events.push((
            self.host,
            FeedEvent {
                event: event.clone(),
                local,
            },
        ));
    }
}

/// Lateness of packet deliveries against the model's schedule: a histogram with 1 µs bins
/// up to 100 ms (later ones in the last bin, the maximum kept exactly).
pub(crate) struct Lateness {
    bins: Vec<u64>,
    count: u64,
    max_ns: u64,
    sum_ns: u128,
}

const LATE_BINS: usize = 100_000;

impl Lateness {
    pub fn new() -> Self {
        Lateness {
            bins: vec![0; LATE_BINS + 1],
            count: 0,
            max_ns: 0,
            sum_ns: 0,
        }
    }

    pub fn add(&mut self, late_ns: u64) {
        let b = usize::try_from(late_ns / 1000)
            .unwrap_or(LATE_BINS)
            .min(LATE_BINS);
        self.bins[b] += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(late_ns);
        self.sum_ns += u128::from(late_ns);
    }

    fn quantile_us(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let target = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, n) in self.bins.iter().enumerate() {
            seen += n;
            if seen >= target {
                return b as f64;
            }
        }
        LATE_BINS as f64
    }

    pub fn report(&self) -> LatenessReport {
        LatenessReport {
            packets: self.count,
            mean_us: if self.count > 0 {
                self.sum_ns as f64 / self.count as f64 / 1e3
            } else {
                0.0
            },
            p50_us: self.quantile_us(0.5),
            p99_us: self.quantile_us(0.99),
            max_us: self.max_ns as f64 / 1e3,
        }
    }
}

/// How late packets reached their destination host compared with the model's schedule.
#[derive(Debug, Clone, Serialize)]
pub struct LatenessReport {
    /// Packets written to a host.
    pub packets: u64,
    /// Mean lateness, µs.
    pub mean_us: f64,
    /// Median, µs (1 µs bins).
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Maximum, µs.
    pub max_us: f64,
}

/// Real-time priority and 1 ns timer slack for the calling thread, when allowed; returns
/// whether the priority was granted.
pub(crate) fn tune_thread(realtime: bool) -> bool {
    // SAFETY: prctl and sched_setscheduler on the calling thread with valid arguments.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
        if realtime {
            let p = libc::sched_param { sched_priority: 20 };
            libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0
        } else {
            false
        }
    }
}

/// CPU time of the calling thread, in seconds.
pub(crate) fn thread_cpu_s() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we pass.
    unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Reads up to `max` packets from non-blocking `fd` into `buf` and calls `each` with them;
/// returns how many were read.
pub(crate) fn read_packets(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    max: usize,
    mut each: impl FnMut(&[u8]),
) -> io::Result<usize> {
    let mut n = 0;
    while n < max {
        // SAFETY: reading into a buffer we own, with its length.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => break,
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        let len = r as usize;
        if len == 0 {
            break;
        }
        each(&buf[..len]);
        n += 1;
    }
    Ok(n)
}

/// Writes one packet to a TUN device; a full device queue drops it (returns `false`).
pub(crate) fn write_packet(fd: &impl AsRawFd, packet: &[u8]) -> io::Result<bool> {
    loop {
        // SAFETY: writing a buffer we own, with its length.
        let r = unsafe { libc::write(fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
        if r >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(false),
            // The host's stack refused the packet (e.g. no route back): a drop.
            _ if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EIO)) => {
                return Ok(false);
            }
            _ => return Err(e),
        }
    }
}

/// Which tap a packet a host sent belongs to: the flow whose port it uses.
pub(crate) struct Classifier {
    /// (host, port, tap).
    entries: Vec<(u32, u16, polypath_sim::AgentId)>,
    /// Per host: the tap of traffic that matches no flow.
    other: Vec<polypath_sim::AgentId>,
}

impl Classifier {
    pub fn new(other: Vec<polypath_sim::AgentId>) -> Self {
        Classifier {
            entries: Vec::new(),
            other,
        }
    }

    pub fn add(&mut self, host: u32, port: u16, tap: polypath_sim::AgentId) {
        self.entries.push((host, port, tap));
    }

    pub fn tap(
        &self,
        host: u32,
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Option<polypath_sim::AgentId> {
        self.entries
            .iter()
            .find(|(h, p, _)| *h == host && *p != 0 && (src.port() == *p || dst.port() == *p))
            .map(|e| e.2)
            .or_else(|| self.other.get(host as usize).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_quantiles() {
        let mut l = Lateness::new();
        for us in 1..=100u64 {
            l.add(us * 1000 + 500);
        }
        let r = l.report();
        assert_eq!(r.packets, 100);
        assert_eq!(r.p50_us, 50.0);
        assert_eq!(r.p99_us, 99.0);
        assert!((r.max_us - 100.5).abs() < 1e-9);
        l.add(10_000_000_000);
        assert_eq!(l.report().max_us, 10_000_000.0);
    }
}
