//! Delivery-rate estimation, one estimator per path, after
//! <https://datatracker.ietf.org/doc/html/draft-cheng-iccrg-delivery-rate-estimation-02>
//! ("Delivery Rate Estimation", Cheng, Cardwell, Hassas Yeganeh, Jacobson).
//!
//! Each packet that counts toward bytes in flight is stamped at send time with the path's
//! delivery state ([`DeliveryStamp`]); when packets are acknowledged the estimator computes
//! how much data was delivered over how long, using the newest acknowledged packet's stamp
//! ([`RateSample`]). The draft is written for TCP; the QUIC translation is:
//!
//! - "no packets in flight" (`SND.NXT == SND.UNA`) is the path's bytes in flight being zero
//!   before the packet is sent;
//! - "the newest packet" among those acknowledged by one ACK is the one sent last, tracked
//!   with a per-path send sequence number (QUIC never acknowledges a packet twice, so the
//!   draft's SACK-then-cumulative-ACK guard is not needed);
//! - application-limited phases are reported by the connection
//!   ([`DeliveryRateEstimator::on_app_limited`]) when it has nothing to send while the
//!   congestion window would allow more, no lost data awaits retransmission and pacing is
//!   not what stops it.
//!
//! The comments marked "draft" below paraphrase the draft's pseudocode; they are not
//! verbatim quotes.

use super::sent::SentPacket;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The default length of the maximum filter, in round trips (as BBR's bandwidth filter).
const DEFAULT_MAX_FILTER_ROUNDS: u64 = 10;

/// Delivery state of the path when a packet was sent (the draft's per-packet `P.*`
/// fields), stored in [`SentPacket::delivery`].
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct DeliveryStamp {
    /// `P.delivered`: bytes delivered on the path before this packet was sent.
    pub delivered: u64,
    /// `P.delivered_time`: when `delivered` last changed before this packet was sent.
    pub delivered_time: Instant,
    /// `P.first_sent_time`: send time of the packet most recently acknowledged before this
    /// one was sent (or of the first packet after an idle period).
    pub first_sent_time: Instant,
    /// `P.is_app_limited`: whether the path was in an application-limited phase.
    pub is_app_limited: bool,
    /// Bytes declared lost on the path before this packet was sent.
    pub lost: u64,
    /// Per-path send order, to find the newest of several acknowledged packets.
    pub send_seq: u64,
}

/// One delivery-rate sample (the draft's `rs.*`), produced per ACK frame.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct RateSample {
    /// `rs.delivery_rate` in bytes per second.
    pub delivery_rate: u64,
    /// `rs.delivered`: bytes delivered over `interval`.
    pub delivered: u64,
    /// `rs.interval`: the longer of `send_elapsed` and `ack_elapsed`.
    pub interval: Duration,
    /// `rs.send_elapsed`: send-time span of the packets that made up the sample.
    pub send_elapsed: Duration,
    /// `rs.ack_elapsed`: acknowledgment-time span of the sample.
    pub ack_elapsed: Duration,
    /// `rs.prior_delivered`: `P.delivered` of the newest acknowledged packet.
    pub prior_delivered: u64,
    /// `rs.prior_time`: `P.delivered_time` of the newest acknowledged packet.
    pub prior_time: Instant,
    /// `rs.is_app_limited`: the sample may understate the path's capacity.
    pub is_app_limited: bool,
    /// Bytes newly acknowledged by this ACK.
    pub newly_acked: u64,
    /// Bytes declared lost on the path since the newest acknowledged packet was sent.
    pub lost: u64,
    /// The round-trip count when the sample was taken (see
    /// [`DeliveryRateEstimator::round_count`]).
    pub round: u64,
}

/// The newest acknowledged packet's stamp, collected while an ACK is processed.
#[derive(Debug, Copy, Clone)]
struct Pending {
    stamp: DeliveryStamp,
    send_elapsed: Duration,
    ack_elapsed: Duration,
    newly_acked: u64,
}

/// Exact sliding-window maximum over the last `window` round trips.
#[derive(Debug, Clone)]
struct MaxFilter {
    window: u64,
    /// (round, value), rounds increasing and values strictly decreasing.
    entries: VecDeque<(u64, u64)>,
}

impl MaxFilter {
    fn update(&mut self, round: u64, value: u64) {
        while self.entries.back().is_some_and(|&(_, v)| v <= value) {
            self.entries.pop_back();
        }
        self.entries.push_back((round, value));
        self.expire(round);
    }

    fn expire(&mut self, round: u64) {
        while self
            .entries
            .front()
            .is_some_and(|&(r, _)| r.saturating_add(self.window) <= round)
        {
            self.entries.pop_front();
        }
    }

    fn get(&self) -> Option<u64> {
        self.entries.front().map(|&(_, v)| v)
    }
}

/// The delivery-rate estimator of one path (the draft's per-connection `C.*` state).
///
/// Per sent packet that counts toward bytes in flight call
/// [`DeliveryRateEstimator::on_packet_sent`] and store the stamp in the
/// [`SentPacket`]; per ACK frame call [`DeliveryRateEstimator::on_packet_acked`] for every
/// newly acknowledged packet, [`DeliveryRateEstimator::on_packet_lost`] for every lost one,
/// then [`DeliveryRateEstimator::generate_sample`] once.
#[derive(Debug, Clone)]
pub struct DeliveryRateEstimator {
    /// `C.delivered`.
    delivered: u64,
    /// `C.delivered_time`.
    delivered_time: Option<Instant>,
    /// `C.first_sent_time`.
    first_sent_time: Option<Instant>,
    /// `C.app_limited`: zero, or the `delivered` value that ends the current
    /// application-limited phase.
    app_limited: u64,
    /// Bytes declared lost.
    lost: u64,
    next_seq: u64,
    pending: Option<Pending>,
    latest: Option<RateSample>,
    round_count: u64,
    next_round_delivered: u64,
    max_filter: MaxFilter,
}

impl Default for DeliveryRateEstimator {
    fn default() -> Self {
        Self::new()
    }
}

impl DeliveryRateEstimator {
    /// An estimator whose maximum filter spans 10 round trips.
    pub fn new() -> Self {
        Self::with_filter_rounds(DEFAULT_MAX_FILTER_ROUNDS)
    }

    /// An estimator whose maximum filter spans `rounds` round trips (at least 1).
    pub fn with_filter_rounds(rounds: u64) -> Self {
        DeliveryRateEstimator {
            delivered: 0,
            delivered_time: None,
            first_sent_time: None,
            app_limited: 0,
            lost: 0,
            next_seq: 0,
            pending: None,
            latest: None,
            round_count: 0,
            next_round_delivered: 0,
            max_filter: MaxFilter {
                window: rounds.max(1),
                entries: VecDeque::new(),
            },
        }
    }

    /// Stamps a packet that is about to be sent and counts toward bytes in flight.
    /// `bytes_in_flight` is the path's bytes in flight *before* this packet.
    pub fn on_packet_sent(&mut self, now: Instant, bytes_in_flight: u64) -> DeliveryStamp {
        // draft, "Transmitting a data packet": when nothing is in flight, restart both
        // C.first_sent_time and C.delivered_time at the current time, so that idle periods
        // are not counted as delivery time.
        if bytes_in_flight == 0 || self.delivered_time.is_none() {
            self.first_sent_time = Some(now);
            self.delivered_time = Some(now);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        DeliveryStamp {
            delivered: self.delivered,
            delivered_time: self.delivered_time.unwrap_or(now),
            first_sent_time: self.first_sent_time.unwrap_or(now),
            is_app_limited: self.app_limited != 0,
            lost: self.lost,
            send_seq: seq,
        }
    }

    /// Marks the start of an application-limited phase: the sender had nothing to send
    /// although the congestion window allowed it. `bytes_in_flight` is the path's current
    /// bytes in flight; the phase ends once that data has been delivered.
    pub fn on_app_limited(&mut self, bytes_in_flight: u64) {
        // draft, "Detecting application-limited phases": C.app_limited is set to
        // C.delivered + in-flight data, or to 1 if that is zero, so it is never zero while
        // a phase is active.
        self.app_limited = self.delivered.saturating_add(bytes_in_flight).max(1);
    }

    /// Accounts one newly acknowledged packet. Packets without a stamp are ignored.
    pub fn on_packet_acked<T>(&mut self, now: Instant, packet: &SentPacket<T>) {
        let Some(stamp) = packet.delivery else {
            return;
        };
        let size = u64::from(packet.size);
        // draft, "Upon receiving an ACK": C.delivered grows by the packet's length and
        // C.delivered_time becomes now.
        self.delivered += size;
        self.delivered_time = Some(now);
        let newly_acked = self.pending.map_or(0, |p| p.newly_acked) + size;
        // draft: the sample is taken from the most recently sent of the acknowledged
        // packets; C.first_sent_time becomes that packet's send time.
        let newer = self
            .pending
            .is_none_or(|p| stamp.send_seq > p.stamp.send_seq);
        if newer {
            self.pending = Some(Pending {
                stamp,
                send_elapsed: packet
                    .time_sent
                    .saturating_duration_since(stamp.first_sent_time),
                ack_elapsed: now.saturating_duration_since(stamp.delivered_time),
                newly_acked,
            });
            self.first_sent_time = Some(packet.time_sent);
        } else if let Some(p) = self.pending.as_mut() {
            p.newly_acked = newly_acked;
        }
    }

    /// Accounts one packet declared lost (for the `lost` fields of samples).
    pub fn on_packet_lost<T>(&mut self, packet: &SentPacket<T>) {
        if packet.delivery.is_some() {
            self.lost += u64::from(packet.size);
        }
    }

    /// Finishes the processing of one ACK frame: produces the rate sample, or `None` if
    /// nothing stamped was acknowledged or the sampling interval is shorter than `min_rtt`
    /// (the path's [`super::RttEstimator::min`]), which the draft treats as unreliable.
    pub fn generate_sample(&mut self, min_rtt: Duration) -> Option<RateSample> {
        // draft, "Upon receiving an ACK": the application-limited phase ends once the data
        // in flight when it began has been delivered.
        if self.app_limited != 0 && self.delivered > self.app_limited {
            self.app_limited = 0;
        }
        let p = self.pending.take()?;
        // Round trips, counted as BBR does: a round ends when a packet sent after the
        // previous round ended is acknowledged.
        if p.stamp.delivered >= self.next_round_delivered {
            self.next_round_delivered = self.delivered;
            self.round_count += 1;
        }
        // draft: the interval is the longer of the send and ack spans, which guards against
        // both ACK compression and send bursts; shorter than min_rtt is not trusted.
        let interval = p.send_elapsed.max(p.ack_elapsed);
        if interval.is_zero() || interval < min_rtt {
            return None;
        }
        let delivered = self.delivered - p.stamp.delivered;
        let rate = u128::from(delivered) * 1_000_000_000 / interval.as_nanos();
        let sample = RateSample {
            delivery_rate: u64::try_from(rate).unwrap_or(u64::MAX),
            delivered,
            interval,
            send_elapsed: p.send_elapsed,
            ack_elapsed: p.ack_elapsed,
            prior_delivered: p.stamp.delivered,
            prior_time: p.stamp.delivered_time,
            is_app_limited: p.stamp.is_app_limited,
            newly_acked: p.newly_acked,
            lost: self.lost - p.stamp.lost,
            round: self.round_count,
        };
        // As BBR's bandwidth filter: application-limited samples only count when they
        // raise the maximum, since they may understate the path's capacity.
        if !sample.is_app_limited
            || self
                .max_filter
                .get()
                .is_none_or(|m| sample.delivery_rate >= m)
        {
            self.max_filter
                .update(self.round_count, sample.delivery_rate);
        }
        self.latest = Some(sample);
        Some(sample)
    }

    /// The latest rate sample.
    pub fn latest_sample(&self) -> Option<&RateSample> {
        self.latest.as_ref()
    }

    /// The latest delivery rate, bytes per second.
    pub fn delivery_rate(&self) -> Option<u64> {
        self.latest.map(|s| s.delivery_rate)
    }

    /// The maximum delivery rate over the filter window, bytes per second: the largest
    /// accepted sample among those taken in the last `rounds` round trips, as of the latest
    /// accepted sample. Application-limited samples are only accepted when they raise the
    /// maximum, so an application-limited period neither lowers nor expires it.
    pub fn max_delivery_rate(&self) -> Option<u64> {
        self.max_filter.get()
    }

    /// Total bytes delivered (`C.delivered`).
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Total bytes declared lost.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Whether an application-limited phase is active.
    pub fn is_app_limited(&self) -> bool {
        self.app_limited != 0
    }

    /// The number of round trips counted so far.
    pub fn round_count(&self) -> u64 {
        self.round_count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn packet(now: Instant, size: u16, stamp: DeliveryStamp) -> SentPacket<()> {
        SentPacket {
            time_sent: now,
            size,
            ack_eliciting: true,
            in_flight: true,
            delivery: Some(stamp),
            payload: (),
        }
    }

    /// Sends one `size`-byte packet every `gap` and acknowledges each `rtt` later, one ACK
    /// per packet (ACKs processed before sends at equal times); before send `k` the sender
    /// reports being application-limited if `app_limited(k)`. Returns the samples.
    fn run(
        est: &mut DeliveryRateEstimator,
        t0: Instant,
        count: u64,
        size: u16,
        gap: Duration,
        rtt: Duration,
        app_limited: impl Fn(u64) -> bool,
    ) -> Vec<Option<RateSample>> {
        let mut in_flight: VecDeque<SentPacket<()>> = VecDeque::new();
        let mut bytes_in_flight = 0u64;
        let mut samples = Vec::new();
        let gap_n = u64::try_from(gap.as_nanos()).unwrap();
        let rtt_n = u64::try_from(rtt.as_nanos()).unwrap();
        for k in 0..count + rtt_n / gap_n + 1 {
            let now = t0 + gap * u32::try_from(k).unwrap();
            while in_flight.front().is_some_and(|p| p.time_sent + rtt <= now) {
                let p = in_flight.pop_front().unwrap();
                bytes_in_flight -= u64::from(p.size);
                est.on_packet_acked(now, &p);
                samples.push(est.generate_sample(ms(0)));
            }
            if k < count && app_limited(k) {
                est.on_app_limited(bytes_in_flight);
            }
            if k < count {
                let stamp = est.on_packet_sent(now, bytes_in_flight);
                bytes_in_flight += u64::from(size);
                in_flight.push_back(packet(now, size, stamp));
            }
        }
        samples
    }

    #[test]
    fn steady_rate_is_measured_exactly() {
        let t0 = Instant::now();
        let mut est = DeliveryRateEstimator::new();
        let samples = run(&mut est, t0, 400, 1000, ms(1), ms(50), |_| false);
        assert_eq!(samples.len(), 400);
        // Once a full RTT of acknowledgments exists, every sample is exactly 1 MB/s.
        for s in &samples[60..] {
            let s = s.unwrap();
            assert_eq!(s.delivery_rate, 1_000_000);
            assert_eq!(s.interval, ms(50));
            assert_eq!(s.delivered, 50_000);
            assert!(!s.is_app_limited);
        }
        assert_eq!(est.delivery_rate(), Some(1_000_000));
        assert_eq!(est.max_delivery_rate(), Some(1_000_000));
        assert_eq!(est.delivered(), 400_000);
        // 400 ms of sending at 50 ms RTT: about 8 rounds plus the initial one.
        assert!(
            (8..=10).contains(&est.round_count()),
            "{}",
            est.round_count()
        );
    }

    #[test]
    fn first_sample_after_idle_uses_send_span() {
        // Two packets 10 ms apart, both acked 100 ms after sending.
        let t0 = Instant::now();
        let mut est = DeliveryRateEstimator::new();
        let s0 = est.on_packet_sent(t0, 0);
        let p0 = packet(t0, 1000, s0);
        let s1 = est.on_packet_sent(t0 + ms(10), 1000);
        let p1 = packet(t0 + ms(10), 1000, s1);
        est.on_packet_acked(t0 + ms(100), &p0);
        let a = est.generate_sample(ms(0)).unwrap();
        // P0: delivered 0 at t0; ack_elapsed 100 ms.
        assert_eq!((a.delivered, a.interval), (1000, ms(100)));
        assert_eq!(a.delivery_rate, 10_000);
        est.on_packet_acked(t0 + ms(110), &p1);
        let b = est.generate_sample(ms(0)).unwrap();
        // P1 was sent before P0 was acked: both acks count, over 110 ms.
        assert_eq!((b.delivered, b.interval), (2000, ms(110)));
    }

    #[test]
    fn newest_packet_of_an_ack_defines_the_sample() {
        let t0 = Instant::now();
        let mut est = DeliveryRateEstimator::new();
        let p: Vec<_> = (0..3u32)
            .map(|i| {
                let t = t0 + ms(u64::from(i));
                packet(t, 1000, est.on_packet_sent(t, u64::from(i) * 1000))
            })
            .collect();
        // One ACK frame acknowledging them in descending order.
        for q in p.iter().rev() {
            est.on_packet_acked(t0 + ms(50), q);
        }
        let s = est.generate_sample(ms(0)).unwrap();
        assert_eq!(s.newly_acked, 3000);
        assert_eq!(s.delivered, 3000);
        assert_eq!(s.send_elapsed, ms(2));
        assert_eq!(s.ack_elapsed, ms(50));
    }

    #[test]
    fn samples_shorter_than_min_rtt_are_rejected() {
        let t0 = Instant::now();
        let mut est = DeliveryRateEstimator::new();
        let s = est.on_packet_sent(t0, 0);
        est.on_packet_acked(t0 + ms(10), &packet(t0, 1000, s));
        assert!(est.generate_sample(ms(20)).is_none());
        assert!(est.delivery_rate().is_none());
        // Nothing acknowledged: no sample either.
        assert!(est.generate_sample(ms(0)).is_none());
    }

    #[test]
    fn app_limited_phase_marks_samples_and_ends() {
        let t0 = Instant::now();
        let mut est = DeliveryRateEstimator::new();
        // Application-limited once, just before packet 100 is sent (packets 0..=50
        // delivered, 51..=99 in flight).
        let samples = run(&mut est, t0, 300, 1000, ms(1), ms(50), |k| k == 100);
        let flags: Vec<bool> = samples.iter().map(|s| s.unwrap().is_app_limited).collect();
        // The phase ends when more than that has been delivered, i.e. when packet 100 is
        // acknowledged: packets 100..=149 were sent during it.
        assert!(!flags[99]);
        assert!(flags[100..150].iter().all(|&f| f));
        assert!(flags[150..].iter().all(|&f| !f));
        assert!(!est.is_app_limited());
    }

    #[test]
    fn max_filter_expires_after_window_rounds() {
        let mut f = MaxFilter {
            window: 3,
            entries: VecDeque::new(),
        };
        f.update(1, 100);
        f.update(2, 50);
        f.update(3, 70);
        assert_eq!(f.get(), Some(100));
        f.update(4, 60);
        // Round 1 left the window (rounds 2..=4 remain).
        assert_eq!(f.get(), Some(70));
        f.update(7, 10);
        assert_eq!(f.get(), Some(10));
        f.update(7, 80);
        assert_eq!(f.get(), Some(80));
    }

    #[test]
    fn app_limited_samples_do_not_lower_the_maximum() {
        let t0 = Instant::now();
        let mut est = DeliveryRateEstimator::with_filter_rounds(2);
        run(&mut est, t0, 200, 1000, ms(1), ms(50), |_| false);
        assert_eq!(est.max_delivery_rate(), Some(1_000_000));
        // Slow, application-limited traffic for many rounds.
        let t1 = t0 + Duration::from_secs(1);
        run(&mut est, t1, 100, 1000, ms(10), ms(50), |_| true);
        assert!(est.latest_sample().unwrap().is_app_limited);
        assert_eq!(est.max_delivery_rate(), Some(1_000_000));
        // Not app-limited any more: the slow rate replaces the old maximum.
        let t2 = t1 + Duration::from_secs(2);
        run(&mut est, t2, 100, 1000, ms(10), ms(50), |_| false);
        assert!(!est.latest_sample().unwrap().is_app_limited);
        assert_eq!(est.max_delivery_rate(), Some(100_000));
    }

    #[test]
    fn lost_bytes_are_reported() {
        let t0 = Instant::now();
        let mut est = DeliveryRateEstimator::new();
        let a = packet(t0, 1000, est.on_packet_sent(t0, 0));
        let b = packet(t0, 1200, est.on_packet_sent(t0, 1000));
        let c = packet(t0 + ms(1), 1000, est.on_packet_sent(t0 + ms(1), 2200));
        est.on_packet_lost(&b);
        est.on_packet_acked(t0 + ms(60), &a);
        est.on_packet_acked(t0 + ms(60), &c);
        let s = est.generate_sample(ms(0)).unwrap();
        assert_eq!(s.lost, 1200);
        assert_eq!(est.lost(), 1200);
    }
}
