//! Token-bucket pacing (RFC 9002 section 7.7), one pacer per path.
//!
//! The bucket fills at `N * congestion_window / smoothed_rtt` (or at an explicit rate
//! supplied by the congestion controller) up to a burst capacity, and every sent packet
//! drains it. Arithmetic is exact: the fill rate is kept as a fraction `num / den` bytes per
//! nanosecond and the sub-byte remainder is carried between updates, so a constant rate
//! never drifts however many packets are sent; the cost per call is a few 128-bit integer
//! operations.

use std::time::{Duration, Instant};

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The longest wait the pacer ever asks for. Only reachable with absurd rates (a few bytes
/// per second); keeps deadline arithmetic far from `Instant` overflow.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// Pacer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacerConfig {
    /// N in `rate = N * congestion_window / smoothed_rtt`, as numerator and denominator.
    /// Default 5/4 (N = 1.25).
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-7.7
    //# Using a value for `N` that is small, but at least 1 (for example, 1.25) ensures
    //# that variations in RTT do not result in underutilization of the
    //# congestion window.
    pub window_multiplier: (u32, u32),
    /// The bucket holds at least this many full-sized datagrams. Default 10, in line with
    /// the initial congestion window.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-7.7
    //# Senders SHOULD limit bursts to the initial congestion window; see {{initial-cwnd}}.
    pub burst_datagrams: u32,
    /// If set, the bucket also holds at least what the current rate delivers in this much
    /// time, so that a driver whose timers fire late (e.g. 1 ms granularity) can still
    /// reach high rates. Default `None` (bursts are limited to `burst_datagrams`).
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-7.7
    //# A sender with knowledge that the network
    //# path to the receiver can absorb larger bursts MAY use a higher limit.
    pub burst_interval: Option<Duration>,
}

impl Default for PacerConfig {
    fn default() -> Self {
        PacerConfig {
            window_multiplier: (5, 4),
            burst_datagrams: 10,
            burst_interval: None,
        }
    }
}

/// A token-bucket pacer for one path.
///
//= https://www.rfc-editor.org/rfc/rfc9002#section-7.7
//# One possible implementation strategy for pacing uses a leaky bucket algorithm,
//# where the capacity of the "bucket" is limited to the maximum burst size and the
//# rate the "bucket" fills is determined by the above function.
///
/// Usage per packet that counts toward bytes in flight: ask
/// [`Pacer::delay_until`]; if it returns `Some(t)`, arm a timer for `t` and try again then;
/// after sending, call [`Pacer::on_sent`]. Packets containing only ACK frames are not paced
/// and need not be reported.
///
//= https://www.rfc-editor.org/rfc/rfc9002#section-7.7
//# Timely delivery of ACK frames is important for efficient loss recovery. To avoid
//# delaying their delivery to the peer, packets containing only ACK frames SHOULD
//# therefore not be paced.
#[derive(Debug, Clone)]
pub struct Pacer {
    config: PacerConfig,
    /// Whole bytes available.
    tokens: u64,
    /// Sub-byte remainder, in units of 1/`den` byte (always < `den`).
    frac: u128,
    /// Current fill rate: `num / den` bytes per nanosecond.
    num: u128,
    den: u128,
    /// Current bucket size, bytes.
    capacity: u64,
    /// When the bucket was last filled; `None` before the first use.
    last: Option<Instant>,
    /// The last [`Pacer::delay_until`] question and its answer: asked again with nothing
    /// sent in between, it has the same answer (a refill at the same instant adds
    /// nothing), without the arithmetic. A scheduler asks several times per packet.
    memo: Option<(DelayQuestion, Option<Instant>)>,
}

/// The arguments of one [`Pacer::delay_until`] call: now, bytes to send, MTU, window,
/// smoothed RTT, rate, send quantum.
type DelayQuestion = (Instant, u64, u16, u64, Duration, Option<u64>, Option<u64>);

impl Pacer {
    /// A pacer with a full bucket, configured by `config`.
    pub fn new(config: PacerConfig) -> Self {
        Pacer {
            config,
            tokens: 0,
            frac: 0,
            num: 0,
            den: 1,
            capacity: 0,
            last: None,
            memo: None,
        }
    }

    /// When a packet of `bytes_to_send` bytes may be sent: `None` means now, `Some(t)` means
    /// not before `t`.
    ///
    /// `mtu` is the path's maximum datagram size, `window` the congestion window and
    /// `smoothed_rtt` the path's smoothed RTT; the fill rate is `rate` (bytes per second)
    /// when the controller supplies one ([`crate::cc::CongestionController::pacing_rate`]),
    /// else `N * window / smoothed_rtt`. A zero rate, window or RTT disables pacing.
    ///
    /// `send_quantum` is the controller's aggregate size
    /// ([`crate::cc::CongestionController::send_quantum`]): once the bucket cannot pay for
    /// the packet, the answer is when it holds a whole quantum, so that the packets leave
    /// in aggregates rather than one per wake-up. The quantum counts at most half the
    /// bucket: the other half absorbs a timer that fires late, whose tokens would
    /// otherwise overflow and be lost. `None` waits for the packet's own bytes only.
    #[allow(clippy::too_many_arguments)]
    pub fn delay_until(
        &mut self,
        now: Instant,
        bytes_to_send: u64,
        mtu: u16,
        window: u64,
        smoothed_rtt: Duration,
        rate: Option<u64>,
        send_quantum: Option<u64>,
    ) -> Option<Instant> {
        let question = (
            now,
            bytes_to_send,
            mtu,
            window,
            smoothed_rtt,
            rate,
            send_quantum,
        );
        if let Some((asked, answer)) = self.memo
            && asked == question
        {
            return answer;
        }
        let answer = self.delay_of(question);
        self.memo = Some((question, answer));
        answer
    }

    /// [`Pacer::delay_until`] without the memo.
    fn delay_of(
        &mut self,
        (now, bytes_to_send, mtu, window, smoothed_rtt, rate, send_quantum): DelayQuestion,
    ) -> Option<Instant> {
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.7
        //# ~~~pseudocode
        //# rate = N * congestion_window / smoothed_rtt
        //# ~~~
        let (num, den) = match rate {
            Some(r) if r > 0 => (u128::from(r), NANOS_PER_SEC),
            _ => {
                let (n_num, n_den) = self.config.window_multiplier;
                (
                    u128::from(window) * u128::from(n_num),
                    smoothed_rtt.as_nanos() * u128::from(n_den),
                )
            }
        };
        if num == 0 || den == 0 {
            return None;
        }
        let mut capacity = u64::from(self.config.burst_datagrams.max(1)) * u64::from(mtu.max(1));
        if let Some(interval) = self.config.burst_interval {
            let by_rate = num.saturating_mul(interval.as_nanos()) / den;
            capacity = capacity.max(u64::try_from(by_rate).unwrap_or(u64::MAX));
        }
        if self.last.is_some() {
            // Credit the time since the last update at the rate that applied during it.
            self.refill(now);
            self.set_rate(num, den, capacity);
        } else {
            self.set_rate(num, den, capacity);
            self.refill(now);
        }

        let needed = bytes_to_send.min(self.capacity);
        if self.tokens >= needed {
            return None;
        }
        let target =
            send_quantum.map_or(needed, |quantum| quantum.min(self.capacity / 2).max(needed));
        // Time until `target - tokens` whole bytes have accrued, given `frac` already has.
        let missing = u128::from(target - self.tokens) * self.den - self.frac;
        let wait_ns = missing.div_ceil(self.num);
        let wait = u64::try_from(wait_ns)
            .map(Duration::from_nanos)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        Some(now + wait)
    }

    /// Accounts a sent packet of `bytes` bytes that counts toward bytes in flight.
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        self.memo = None;
        self.refill(now);
        self.tokens = self.tokens.saturating_sub(bytes);
    }

    /// Whole bytes currently available, as of the last update.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The bucket size, as of the last [`Pacer::delay_until`].
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The current fill rate in bytes per second (rounded down), as of the last
    /// [`Pacer::delay_until`]; `None` before the first.
    pub fn rate(&self) -> Option<u64> {
        if self.last.is_none() || self.num == 0 {
            return None;
        }
        let r = self.num.saturating_mul(NANOS_PER_SEC) / self.den;
        Some(u64::try_from(r).unwrap_or(u64::MAX))
    }

    /// Switches to a new fill rate and capacity, keeping the accrued fraction.
    fn set_rate(&mut self, num: u128, den: u128, capacity: u64) {
        if (num, den) != (self.num, self.den) {
            // Rescale the remainder to the new denominator (it stays below one byte).
            self.frac = self.frac.checked_mul(den).map_or(0, |f| f / self.den);
            self.num = num;
            self.den = den;
        }
        self.capacity = capacity;
        if self.tokens >= capacity {
            self.tokens = capacity;
            self.frac = 0;
        }
    }

    /// Adds what the bucket gained since the last update.
    fn refill(&mut self, now: Instant) {
        let Some(last) = self.last else {
            // First use: start with a full bucket.
            self.tokens = self.capacity;
            self.frac = 0;
            self.last = Some(now);
            return;
        };
        if now <= last {
            return;
        }
        self.last = Some(now);
        if self.num == 0 {
            return;
        }
        let elapsed = (now - last).as_nanos();
        let gained = self
            .num
            .checked_mul(elapsed)
            .and_then(|g| g.checked_add(self.frac));
        let Some(gained) = gained else {
            self.tokens = self.capacity;
            self.frac = 0;
            return;
        };
        let whole = gained / self.den;
        let total = u128::from(self.tokens) + whole;
        if total >= u128::from(self.capacity) {
            self.tokens = self.capacity;
            self.frac = 0;
        } else {
            // total < capacity <= u64::MAX.
            self.tokens = total as u64;
            self.frac = gained % self.den;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// With a send quantum the pacer releases aggregates: a drained bucket waits for half
    /// its size (the quantum is larger), so there are about five times fewer wake-ups for
    /// the same bytes at the same rate.
    #[test]
    fn a_send_quantum_releases_aggregates_at_the_same_rate() {
        let t0 = Instant::now();
        let rate = Some(10_000_000); // 10 MB/s: a 1200-byte packet every 120 us
        let run = |quantum: Option<u64>| {
            let mut p = Pacer::new(PacerConfig::default());
            let (mut now, mut sent, mut wakeups) = (t0, 0u64, 0u32);
            while now < t0 + Duration::from_secs(1) {
                match p.delay_until(now, 1200, 1200, 0, ms(10), rate, quantum) {
                    None => {
                        p.on_sent(now, 1200);
                        sent += 1200;
                    }
                    Some(t) => {
                        now = t;
                        wakeups += 1;
                    }
                }
            }
            (sent, wakeups, p.capacity())
        };
        let (single_bytes, single_wakeups, capacity) = run(None);
        let (quantum_bytes, quantum_wakeups, _) = run(Some(64 * 1024));
        // One second at the rate plus the full bucket of the start, either way.
        assert!(
            single_bytes.abs_diff(10_000_000 + capacity) <= 1200,
            "{single_bytes}"
        );
        assert!(
            quantum_bytes.abs_diff(single_bytes) <= capacity / 2,
            "{quantum_bytes}"
        );
        // Five packets (half the ten-packet bucket) per wake-up instead of one.
        assert!(single_wakeups > 8_000, "{single_wakeups}");
        assert!(
            quantum_wakeups * 4 < single_wakeups && quantum_wakeups * 6 > single_wakeups,
            "{quantum_wakeups} against {single_wakeups}"
        );
        // A quantum smaller than the packet waits for the packet.
        let mut p = Pacer::new(PacerConfig::default());
        while p
            .delay_until(t0, 1200, 1200, 0, ms(10), rate, Some(100))
            .is_none()
        {
            p.on_sent(t0, 1200);
        }
        assert_eq!(
            p.delay_until(t0, 1200, 1200, 0, ms(10), rate, Some(100)),
            Some(t0 + Duration::from_micros(120))
        );
    }

    /// Asking the same question again, as a scheduler does several times per packet, gets
    /// the answer of the arithmetic, before and after a packet is sent.
    #[test]
    fn a_repeated_question_gets_the_answer_of_the_arithmetic() {
        let t0 = Instant::now();
        let mut reference = Pacer::new(PacerConfig::default());
        let mut memoized = Pacer::new(PacerConfig::default());
        let mut sent = 0;
        for i in 0..200u64 {
            let now = t0 + Duration::from_micros(37 * i);
            let rate = (i % 3 == 0).then_some(1_000_000 + 1000 * i);
            let quantum = (i % 5 == 0).then_some(4800);
            let question = (now, 1200, 1200, 60_000, ms(20), rate, quantum);
            let ask = |p: &mut Pacer| p.delay_until(now, 1200, 1200, 60_000, ms(20), rate, quantum);
            let want = reference.delay_of(question);
            assert_eq!(ask(&mut memoized), want, "call {i}");
            assert_eq!(ask(&mut memoized), want, "call {i}, again");
            if want.is_none() {
                reference.on_sent(now, 1200);
                memoized.on_sent(now, 1200);
                sent += 1;
                assert_eq!(ask(&mut memoized), reference.delay_of(question));
            }
        }
        assert!(sent > 10 && sent < 200, "{sent} sent");
        assert_eq!(reference.tokens(), memoized.tokens());
    }

    #[test]
    fn initial_burst_then_paced() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerConfig::default());
        // window 120 000 B over 100 ms at N = 1.25: 1.5 MB/s, 1200 B every 800 us.
        for _ in 0..10 {
            assert_eq!(
                p.delay_until(t0, 1200, 1200, 120_000, ms(100), None, None),
                None
            );
            p.on_sent(t0, 1200);
        }
        assert_eq!(p.rate(), Some(1_500_000));
        assert_eq!(
            p.delay_until(t0, 1200, 1200, 120_000, ms(100), None, None),
            Some(t0 + Duration::from_micros(800))
        );
        let t1 = t0 + Duration::from_micros(799);
        assert_eq!(
            p.delay_until(t1, 1200, 1200, 120_000, ms(100), None, None),
            Some(t0 + Duration::from_micros(800))
        );
        let t2 = t0 + Duration::from_micros(800);
        assert_eq!(
            p.delay_until(t2, 1200, 1200, 120_000, ms(100), None, None),
            None
        );
    }

    #[test]
    fn explicit_rate_overrides_window() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerConfig {
            burst_datagrams: 1,
            ..PacerConfig::default()
        });
        assert_eq!(
            p.delay_until(t0, 1000, 1000, 10, ms(1), Some(1_000_000), None),
            None
        );
        p.on_sent(t0, 1000);
        assert_eq!(
            p.delay_until(t0, 1000, 1000, 10, ms(1), Some(1_000_000), None),
            Some(t0 + ms(1))
        );
        // Zero rate falls back to the window; zero window and RTT disable pacing.
        assert_eq!(
            p.delay_until(t0, 1000, 1000, 0, Duration::ZERO, Some(0), None),
            None
        );
    }

    #[test]
    fn no_drift_over_a_million_packets() {
        // An awkward rate: N * window / srtt = 5 * 123_457 / (4 * 33_333_333 ns).
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerConfig::default());
        let (window, srtt, size) = (123_457u64, Duration::from_nanos(33_333_333), 1187u64);
        let mut now = t0;
        let n = 1_000_000u64;
        for _ in 0..n {
            if let Some(t) = p.delay_until(now, size, 1200, window, srtt, None, None) {
                assert!(t > now);
                now = t;
            }
            assert_eq!(
                p.delay_until(now, size, 1200, window, srtt, None, None),
                None
            );
            p.on_sent(now, size);
        }
        // The bucket started with 10 * 1200 bytes; packet k (1-based) beyond what that
        // covers may leave once k * size - 12 000 bytes have accrued at the exact rate.
        let den = 4 * 33_333_333u128;
        let num = 5 * u128::from(window);
        let needed = u128::from(n * size) - 12_000;
        let expected = (needed * den).div_ceil(num);
        assert_eq!((now - t0).as_nanos(), expected);
    }

    #[test]
    fn idle_refills_only_to_capacity() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerConfig::default());
        p.delay_until(t0, 1200, 1200, 12_000, ms(10), None, None);
        for _ in 0..10 {
            p.on_sent(t0, 1200);
        }
        assert_eq!(p.tokens(), 0);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            p.delay_until(later, 1200, 1200, 12_000, ms(10), None, None),
            None
        );
        assert_eq!(p.tokens(), 12_000);
        assert_eq!(p.capacity(), 12_000);
    }

    #[test]
    fn burst_interval_scales_capacity_with_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerConfig {
            burst_interval: Some(ms(2)),
            ..PacerConfig::default()
        });
        // 125 MB/s explicit: 2 ms worth is 250 000 bytes, above 10 datagrams.
        p.delay_until(t0, 1200, 1200, 0, ms(10), Some(125_000_000), None);
        assert_eq!(p.capacity(), 250_000);
        // Slow: the datagram floor applies.
        p.delay_until(t0, 1200, 1200, 0, ms(10), Some(1_000), None);
        assert_eq!(p.capacity(), 12_000);
    }

    #[test]
    fn rate_change_keeps_accrued_tokens() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerConfig {
            burst_datagrams: 2,
            ..PacerConfig::default()
        });
        p.delay_until(t0, 1000, 1000, 0, ms(1), Some(1_000_000), None);
        p.on_sent(t0, 1000);
        p.on_sent(t0, 1000);
        // 500 us at 1 MB/s: 500 bytes accrued.
        let t1 = t0 + Duration::from_micros(500);
        // Now at 2 MB/s: the remaining 500 bytes take 250 us.
        assert_eq!(
            p.delay_until(t1, 1000, 1000, 0, ms(1), Some(2_000_000), None),
            Some(t1 + Duration::from_micros(250))
        );
    }
}
