//! PMF, the performance measurement function (after ATSSS's PMF, as the MPF-Gateway has
//! it): active probes per interface for delay, loss and a bounded capacity test, with
//! one-way delays from timestamps.
//!
//! The client gateway sends a small UDP probe from each interface's address to the
//! server's measurement port every probe interval; the server answers each with its own
//! receive and send timestamps. From the four timestamps the client has the round-trip
//! time, the one-way delay in each direction and the clock offset estimate:
//!
//! ```text
//! t1 client sends, t2 server receives, t3 server replies, t4 client receives
//! uplink OWD = t2 - t1 - offset   downlink OWD = t4 - t3 + offset
//! RTT = (t4 - t1) - (t3 - t2)     offset estimate = ((t2 - t1) - (t4 - t3)) / 2
//! ```
//!
//! **Clocks.** One-way delays need the two clocks' offset. With [`ClockMode::Synchronised`]
//! (the default) the offset is taken as zero: the gateways' clocks are assumed synchronised
//! (NTP or PTP in a deployment; in the emulator both ends read the same host clock, so the
//! assumption holds exactly). With [`ClockMode::Estimated`] the offset is the NTP-style
//! estimate above, which assumes symmetric paths and so cannot see a delay added in one
//! direction only. Both are reported.
//!
//! **Loss** is the share of probes without an answer among the last [`LOSS_WINDOW`] sent
//! (a probe counts once it is older than [`ANSWER_WAIT`]). **Capacity** comes from a train
//! of [`TRAIN_PACKETS`] back-to-back packets sent at start-up and whenever an interface
//! comes (back) up: the server times the train's arrivals and reports the rate of the
//! train's bytes over its arrival spread. An interface without an answer for the policy's
//! detection time counts as down ([`IfaceStats::silence_limit`]: longer while probes are
//! being lost at random).
//!
//! Passive metrics (smoothed RTT, loss rate, delivery rate of each QUIC path) come from the
//! stack; see [`crate::status`].
//
//= To Poly or Not to Poly: QoS-Aware Multi-Path Networking, Section IV
//# *CHYMP* provides QoS-Support through its custom header, which includes timestamps and per-path packet numbers. This enables the measurement of throughput, per-path packet loss, and one-way delay, assuming system synchronization.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The probe's magic bytes.
pub const MAGIC: [u8; 4] = *b"PPGW";
/// Probe format version.
pub const VERSION: u8 = 1;
/// Bytes of a probe header (answers are the same size).
pub const HEADER: usize = 4 + 1 + 1 + 8 + 1 + 8 + 8 + 8 + 8 + 4;
/// Packets in a capacity train.
pub const TRAIN_PACKETS: u32 = 64;
/// Size of each train packet (UDP payload).
pub const TRAIN_PACKET_SIZE: usize = 1200;
/// Probes the loss estimate looks back over.
pub const LOSS_WINDOW: usize = 200;
/// Samples the delay estimates (median) look back over: a delay change shows in the median
/// after three probes.
pub const DELAY_WINDOW: usize = 5;
/// How long a probe may wait for its answer before it counts as lost.
pub const ANSWER_WAIT: Duration = Duration::from_millis(500);

/// What a probe packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A delay and loss probe (client to server).
    Probe = 1,
    /// Its answer (server to client).
    Answer = 2,
    /// A packet of a capacity train (client to server).
    Train = 3,
    /// The server's report of a train (server to client).
    TrainReport = 4,
}

/// A measurement packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// What it is.
    pub kind: Kind,
    /// The session it belongs to (from the control plane's welcome): the server answers
    /// probes of live sessions only.
    pub session: u64,
    /// The client's interface index.
    pub iface: u8,
    /// Probe or train sequence number.
    pub seq: u64,
    /// Client send time, ns since the Unix epoch.
    pub t1: u64,
    /// Server receive time (answers), or the train's first arrival (reports).
    pub t2: u64,
    /// Server send time (answers), or the train's last arrival (reports).
    pub t3: u64,
    /// Train reports: bytes received from the train; train packets: index in the train.
    pub extra: u32,
}

impl Probe {
    /// The packet, padded to `size` bytes (at least [`HEADER`]).
    pub fn encode(&self, size: usize) -> Vec<u8> {
        let mut b = Vec::with_capacity(size.max(HEADER));
        b.extend_from_slice(&MAGIC);
        b.push(VERSION);
        b.push(self.kind as u8);
        b.extend_from_slice(&self.session.to_be_bytes());
        b.push(self.iface);
        b.extend_from_slice(&self.seq.to_be_bytes());
        b.extend_from_slice(&self.t1.to_be_bytes());
        b.extend_from_slice(&self.t2.to_be_bytes());
        b.extend_from_slice(&self.t3.to_be_bytes());
        b.extend_from_slice(&self.extra.to_be_bytes());
        b.resize(size.max(HEADER), 0);
        b
    }

    /// Decodes a measurement packet; `None` for anything else.
    pub fn decode(b: &[u8]) -> Option<Probe> {
        if b.len() < HEADER || b[..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        let kind = match b[5] {
            1 => Kind::Probe,
            2 => Kind::Answer,
            3 => Kind::Train,
            4 => Kind::TrainReport,
            _ => return None,
        };
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        Some(Probe {
            kind,
            session: u64_at(6),
            iface: b[14],
            seq: u64_at(15),
            t1: u64_at(23),
            t2: u64_at(31),
            t3: u64_at(39),
            extra: u32::from_be_bytes([b[47], b[48], b[49], b[50]]),
        })
    }
}

/// Nanoseconds since the Unix epoch on the system clock (the clock the probes carry).
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// How one-way delays treat the clocks (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockMode {
    /// The clocks are synchronised: offset zero.
    #[default]
    Synchronised,
    /// The offset is estimated from each exchange (symmetric paths assumed).
    Estimated,
}

/// One interface's measurements (the client's view).
#[derive(Debug, Clone, Default)]
pub struct IfaceStats {
    /// Sent probes not yet settled: (seq, sent at ns).
    outstanding: VecDeque<(u64, u64)>,
    /// Settled probes, oldest first: true if answered.
    settled: VecDeque<bool>,
    up_ms: VecDeque<f64>,
    down_ms: VecDeque<f64>,
    rtt_ms: VecDeque<f64>,
    offset_ms: VecDeque<f64>,
    /// When the last answer arrived (ns).
    pub last_answer_ns: Option<u64>,
    /// When the last probe was sent (ns).
    pub last_probe_ns: Option<u64>,
    /// When probing started on the interface (ns).
    pub since_ns: Option<u64>,
    /// Probes sent.
    pub probes_sent: u64,
    /// Answers received.
    pub answers: u64,
    /// The latest capacity estimate, bit/s.
    pub capacity_bps: Option<f64>,
    /// Capacity trains sent.
    pub trains: u64,
}

/// A summary of one interface's measurements.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Metrics {
    /// Answered within the detection time (or probing started less than that ago).
    pub up: bool,
    /// Median uplink one-way delay over the last samples, ms.
    pub owd_up_ms: Option<f64>,
    /// Median downlink one-way delay, ms.
    pub owd_down_ms: Option<f64>,
    /// Median round-trip time, ms.
    pub rtt_ms: Option<f64>,
    /// Median clock offset estimate (server minus client), ms.
    pub offset_ms: Option<f64>,
    /// Probe loss over the loss window, percent (once enough probes settled).
    pub loss_pct: Option<f64>,
    /// Probes the loss figure is over.
    pub loss_samples: usize,
    /// Latest capacity estimate, Mbit/s.
    pub capacity_mbps: Option<f64>,
}

impl Metrics {
    /// The one-way delay a requirement is checked against: the larger of the two
    /// directions (a class's requirement holds both ways).
    pub fn owd_ms(&self) -> Option<f64> {
        match (self.owd_up_ms, self.owd_down_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

fn push_window(v: &mut VecDeque<f64>, x: f64, n: usize) {
    if v.len() == n {
        v.pop_front();
    }
    v.push_back(x);
}

fn median(v: &VecDeque<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s: Vec<f64> = v.iter().copied().collect();
    s.sort_by(f64::total_cmp);
    Some(s[s.len() / 2])
}

impl IfaceStats {
    /// Records a probe sent at `now_ns`.
    pub fn on_sent(&mut self, seq: u64, now_ns: u64) {
        self.since_ns.get_or_insert(now_ns);
        self.outstanding.push_back((seq, now_ns));
        self.last_probe_ns = Some(now_ns);
        self.probes_sent += 1;
        self.settle(now_ns);
    }

    fn settle(&mut self, now_ns: u64) {
        let wait = ANSWER_WAIT.as_nanos() as u64;
        while let Some(&(_, sent)) = self.outstanding.front() {
            if now_ns.saturating_sub(sent) < wait {
                break;
            }
            self.outstanding.pop_front();
            self.push_settled(false);
        }
    }

    fn push_settled(&mut self, answered: bool) {
        if self.settled.len() == LOSS_WINDOW {
            self.settled.pop_front();
        }
        self.settled.push_back(answered);
    }

    /// Records an answer received at `t4` (ns).
    pub fn on_answer(&mut self, p: &Probe, t4: u64, clock: ClockMode) {
        // Only answers to outstanding probes count (a late or repeated answer is ignored).
        let Some(pos) = self.outstanding.iter().position(|(s, _)| *s == p.seq) else {
            return;
        };
        self.outstanding.remove(pos);
        self.push_settled(true);
        self.answers += 1;
        self.last_answer_ns = Some(t4);
        let ms = |ns: i128| ns as f64 / 1e6;
        let (t1, t2, t3, t4) = (
            i128::from(p.t1),
            i128::from(p.t2),
            i128::from(p.t3),
            i128::from(t4),
        );
        let offset = ((t2 - t1) - (t4 - t3)) / 2;
        let applied = match clock {
            ClockMode::Synchronised => 0,
            ClockMode::Estimated => offset,
        };
        push_window(&mut self.up_ms, ms(t2 - t1 - applied), DELAY_WINDOW);
        push_window(&mut self.down_ms, ms(t4 - t3 + applied), DELAY_WINDOW);
        push_window(&mut self.rtt_ms, ms((t4 - t1) - (t3 - t2)), DELAY_WINDOW);
        push_window(&mut self.offset_ms, ms(offset), DELAY_WINDOW);
    }

    /// Records a capacity train's report.
    pub fn on_train_report(&mut self, p: &Probe) {
        let spread_ns = p.t3.saturating_sub(p.t2);
        let bytes = u64::from(p.extra);
        // The first packet's bytes arrived before the spread began.
        let counted = bytes.saturating_sub(TRAIN_PACKET_SIZE as u64);
        if spread_ns > 0 && counted > 0 {
            self.capacity_bps = Some(counted as f64 * 8.0 / (spread_ns as f64 / 1e9));
        }
    }

    /// Forgets the delay samples (the interface went down: its old delays say nothing of
    /// the link that comes back).
    pub fn reset_delays(&mut self) {
        self.up_ms.clear();
        self.down_ms.clear();
        self.rtt_ms.clear();
        self.offset_ms.clear();
    }

    /// How long a silence means down: the policy's `detection`, or, while probes are lost
    /// at random (the share of unanswered probes among the settled ones, once there are
    /// 20, taken as at most one in two), as many probe `interval`s as make a run of that
    /// many losses less likely than one in a million (at most 20), so random loss alone
    /// does not fail an interface.
    pub fn silence_limit(&self, detection: Duration, interval: Duration) -> Duration {
        let n = self.settled.len();
        if n < 20 {
            return detection;
        }
        // Capped at one probe in two: beyond that the probes are not being lost at random,
        // the interface is failing (and a long silence would otherwise raise the loss
        // figure, and with it the limit, until the interface never counted as down).
        let lost = (self.settled.iter().filter(|a| !**a).count() as f64 / n as f64).min(0.5);
        if lost <= 0.0 {
            return detection;
        }
        let runs = (1e-6f64.ln() / lost.ln()).ceil();
        detection.max(interval.mul_f64(runs))
    }

    /// The summary at `now_ns`, with [`IfaceStats::silence_limit`] of `detection` and the
    /// probe `interval` as the silence that means down.
    pub fn metrics(&mut self, now_ns: u64, detection: Duration, interval: Duration) -> Metrics {
        self.settle(now_ns);
        let det = self.silence_limit(detection, interval).as_nanos() as u64;
        let heard = self.last_answer_ns.or(self.since_ns);
        let up = heard.is_some_and(|t| now_ns.saturating_sub(t) <= det);
        let answered = self.settled.iter().filter(|a| **a).count();
        let n = self.settled.len();
        Metrics {
            up,
            owd_up_ms: median(&self.up_ms),
            owd_down_ms: median(&self.down_ms),
            rtt_ms: median(&self.rtt_ms),
            offset_ms: median(&self.offset_ms),
            loss_pct: (n >= 50).then(|| 100.0 * (n - answered) as f64 / n as f64),
            loss_samples: n,
            capacity_mbps: self.capacity_bps.map(|b| b / 1e6),
        }
    }
}

/// The server's side of a capacity train from one client interface.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrainReceiver {
    /// The train's sequence number.
    pub seq: u64,
    /// First arrival, ns.
    pub first_ns: u64,
    /// Last arrival, ns.
    pub last_ns: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Packets received.
    pub packets: u32,
}

impl TrainReceiver {
    /// Adds a train packet of `len` bytes arriving at `now_ns`; returns true when it was the
    /// train's last packet (the report is due).
    pub fn on_packet(&mut self, p: &Probe, len: usize, now_ns: u64) -> bool {
        if p.seq != self.seq || self.packets == 0 {
            *self = TrainReceiver {
                seq: p.seq,
                first_ns: now_ns,
                ..TrainReceiver::default()
            };
        }
        self.last_ns = now_ns;
        self.bytes += len as u64;
        self.packets += 1;
        p.extra + 1 >= TRAIN_PACKETS
    }

    /// The report to send back.
    pub fn report(&self, session: u64, iface: u8) -> Probe {
        Probe {
            kind: Kind::TrainReport,
            session,
            iface,
            seq: self.seq,
            t1: 0,
            t2: self.first_ns,
            t3: self.last_ns,
            extra: u32::try_from(self.bytes).unwrap_or(u32::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(kind: Kind, seq: u64, t: [u64; 3]) -> Probe {
        Probe {
            kind,
            session: 7,
            iface: 1,
            seq,
            t1: t[0],
            t2: t[1],
            t3: t[2],
            extra: 0,
        }
    }

    #[test]
    fn probes_round_trip_and_garbage_is_ignored() {
        let p = probe(Kind::Answer, 3, [1, 2, 3]);
        let b = p.encode(0);
        assert_eq!(b.len(), HEADER);
        assert_eq!(Probe::decode(&b), Some(p));
        assert_eq!(Probe::decode(&p.encode(1200)), Some(p));
        assert_eq!(Probe::decode(&b[..HEADER - 1]), None);
        let mut bad = b.clone();
        bad[5] = 9;
        assert_eq!(Probe::decode(&bad), None);
        bad = b;
        bad[0] = b'X';
        assert_eq!(Probe::decode(&bad), None);
    }

    #[test]
    fn delays_offsets_and_loss() {
        let mut s = IfaceStats::default();
        let ms = 1_000_000u64;
        // Server clock 5 ms ahead; 1 ms up, 3 ms down, 0.1 ms in the server.
        for k in 0..60u64 {
            let t1 = 1_000 * ms + k * 20 * ms;
            s.on_sent(k, t1);
            if k % 10 == 9 {
                continue; // every tenth probe lost
            }
            let p = probe(Kind::Answer, k, [t1, t1 + 6 * ms, t1 + 6 * ms + ms / 10]);
            s.on_answer(&p, t1 + 4 * ms + ms / 10, ClockMode::Synchronised);
        }
        let now = 1_000 * ms + 60 * 20 * ms + 600 * ms;
        let m = s.metrics(now, Duration::from_secs(1), Duration::from_millis(20));
        assert!((m.owd_up_ms.unwrap() - 6.0).abs() < 1e-9, "{m:?}");
        assert!((m.owd_down_ms.unwrap() + 2.0).abs() < 1e-9);
        assert!((m.rtt_ms.unwrap() - 4.0).abs() < 1e-9);
        assert!((m.offset_ms.unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(m.loss_samples, 60);
        assert!((m.loss_pct.unwrap() - 10.0).abs() < 1e-9);
        assert!(m.up);
        // With the offset estimated, the asymmetry is lost: 2 ms each way.
        let mut e = IfaceStats::default();
        e.on_sent(0, 0);
        e.on_answer(
            &probe(Kind::Answer, 0, [0, 6 * ms, 6 * ms]),
            4 * ms,
            ClockMode::Estimated,
        );
        let m = e.metrics(4 * ms, Duration::from_secs(1), Duration::from_millis(20));
        assert_eq!(m.owd_up_ms, Some(2.0));
        assert_eq!(m.owd_down_ms, Some(2.0));
        assert_eq!(m.loss_pct, None, "too few probes for a loss figure");
        // Silence beyond the detection time: down.
        assert!(
            !e.metrics(
                4 * ms + 101 * ms,
                Duration::from_millis(100),
                Duration::from_millis(20)
            )
            .up
        );
        // With one probe in ten lost, six lost in a row is a one-in-a-million run: 120 ms
        // of silence at 20 ms probes; a clean interface keeps the detection time.
        assert_eq!(
            s.silence_limit(Duration::from_millis(100), Duration::from_millis(20)),
            Duration::from_millis(120)
        );
        assert_eq!(
            e.silence_limit(Duration::from_millis(100), Duration::from_millis(20)),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn trains_measure_capacity() {
        let mut r = TrainReceiver::default();
        let mut done = false;
        // 10 Mbit/s: a 1200-byte packet every 960 us.
        for i in 0..TRAIN_PACKETS {
            let mut p = probe(Kind::Train, 4, [0, 0, 0]);
            p.extra = i;
            done = r.on_packet(&p, TRAIN_PACKET_SIZE, 5_000 + u64::from(i) * 960_000);
        }
        assert!(done);
        let mut s = IfaceStats::default();
        s.on_train_report(&r.report(7, 1));
        let m = s.metrics(0, Duration::from_secs(1), Duration::from_millis(20));
        assert!((m.capacity_mbps.unwrap() - 10.0).abs() < 1e-6, "{m:?}");
    }
}
