//! CUBIC (RFC 9438), adapted to QUIC's byte-counted windows and recovery periods.
//!
//! RFC 9438 is not vendored in the project's spec directory, so the comments below cite its
//! sections by URL and paraphrase them rather than quoting.
//!
//! Choices made where RFC 9438 leaves room:
//! - Slow start is standard slow start (RFC 9438 section 4.10 permits it; HyStart++,
//!   RFC 9406, is not implemented).
//! - The window is in bytes; the RFC's segment-based formulas use `max_datagram_size` as
//!   the segment size. Window arithmetic is in `f64` with the sub-byte remainder of every
//!   increase carried forward, so slow growth near `W_max` is not lost to rounding.
//!   (`f64` results are deterministic for a given build and platform.)
//! - The multiplicative decrease uses the congestion window, as RFC 9002 Appendix B does,
//!   rather than the flight size.
//! - Application-limited periods freeze growth and are excluded from the time `t` of the
//!   cubic function, by moving the epoch start forward by their length.

use super::{
    CongestionController, CongestionEvent, CongestionMetrics, CongestionState, ControllerFactory,
    RecoveryPeriod, initial_window, minimum_window,
};
use crate::recovery::RttEstimator;
use crate::shared::PathId;
use std::time::Instant;

/// CUBIC settings; also the factory of [`Cubic`] controllers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CubicConfig {
    /// C, the cubic scaling constant, in segments per second cubed. Default 0.4.
    pub c: f64,
    /// β_cubic, the multiplicative decrease factor. Default 0.7.
    pub beta: f64,
    /// Whether to use fast convergence (RFC 9438 section 4.7). Default true.
    pub fast_convergence: bool,
    /// Initial window in bytes; `None` for the RFC 9002 value
    /// ([`super::initial_window`]).
    pub initial_window: Option<u64>,
}

impl Default for CubicConfig {
    fn default() -> Self {
        //= https://www.rfc-editor.org/rfc/rfc9438#section-4.1.1
        // Paraphrase: β_cubic SHOULD be 0.7 and C SHOULD be 0.4.
        CubicConfig {
            c: 0.4,
            beta: 0.7,
            fast_convergence: true,
            initial_window: None,
        }
    }
}

impl ControllerFactory for CubicConfig {
    fn build(
        &self,
        _now: Instant,
        _path_id: PathId,
        max_datagram_size: u16,
    ) -> Box<dyn CongestionController> {
        Box::new(Cubic::new(*self, max_datagram_size))
    }
}

/// The state a congestion event changes, saved to undo a spurious one
/// (RFC 9438 section 4.9).
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    window: u64,
    ssthresh: u64,
    w_max: f64,
    cwnd_prior: f64,
    k: f64,
    t_epoch: Option<Instant>,
    cwnd_epoch: f64,
    w_est: f64,
    alpha: f64,
    recovery: RecoveryPeriod,
}

/// The CUBIC congestion controller (RFC 9438).
#[derive(Debug, Clone)]
pub struct Cubic {
    config: CubicConfig,
    /// Segment size, bytes.
    mds: u16,
    /// cwnd, bytes.
    window: u64,
    /// Fractional bytes of growth not yet added to `window`.
    frac: f64,
    /// ssthresh, bytes; `u64::MAX` is infinite.
    ssthresh: u64,
    /// W_max, bytes: the window just before the last reduction (after fast convergence).
    w_max: f64,
    /// cwnd_prior, bytes: the window just before the last reduction.
    cwnd_prior: f64,
    /// K, seconds.
    k: f64,
    /// t_epoch: when the current congestion-avoidance stage started (shifted forward over
    /// application-limited periods); `None` outside congestion avoidance.
    t_epoch: Option<Instant>,
    /// cwnd_epoch, bytes.
    cwnd_epoch: f64,
    /// W_est, bytes: the Reno-friendly window estimate.
    w_est: f64,
    /// α_cubic currently in use.
    alpha: f64,
    recovery: RecoveryPeriod,
    /// Start of the current application-limited period.
    app_limited_since: Option<Instant>,
    /// Whether anything has been acknowledged or lost yet (for MTU updates).
    touched: bool,
    undo: Option<Snapshot>,
    congestion_events: u64,
    persistent_congestion_events: u64,
    spurious_undos: u64,
}

impl Cubic {
    /// A controller for a path whose maximum datagram size is `max_datagram_size`.
    pub fn new(config: CubicConfig, max_datagram_size: u16) -> Self {
        let window = config
            .initial_window
            .unwrap_or_else(|| initial_window(max_datagram_size))
            .max(minimum_window(max_datagram_size));
        Cubic {
            config,
            mds: max_datagram_size.max(1),
            window,
            frac: 0.0,
            ssthresh: u64::MAX,
            w_max: 0.0,
            cwnd_prior: 0.0,
            k: 0.0,
            t_epoch: None,
            cwnd_epoch: 0.0,
            w_est: 0.0,
            alpha: alpha_cubic(config.beta),
            recovery: RecoveryPeriod::new(),
            app_limited_since: None,
            touched: false,
            undo: None,
            congestion_events: 0,
            persistent_congestion_events: 0,
            spurious_undos: 0,
        }
    }

    /// K: seconds from the start of the congestion-avoidance stage until the window
    /// returns to W_max (zero outside congestion avoidance or when starting above W_max).
    pub fn k(&self) -> f64 {
        self.k
    }

    /// W_max in bytes (zero before the first reduction and after persistent congestion
    /// until the next congestion-avoidance stage).
    pub fn w_max(&self) -> f64 {
        self.w_max
    }

    /// W_est in bytes, the Reno-friendly window estimate of the current stage.
    pub fn w_est(&self) -> f64 {
        self.w_est
    }

    fn segment(&self) -> f64 {
        f64::from(self.mds)
    }

    fn minimum_window(&self) -> u64 {
        minimum_window(self.mds)
    }

    /// W_cubic(t) in bytes, `t` in seconds since the epoch started.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9438#section-4.2
    // Paraphrase: W_cubic(t) = C * (t - K)^3 + W_max, in segments, where t is the time
    // elapsed since the start of the current congestion avoidance stage.
    fn w_cubic(&self, t: f64) -> f64 {
        let d = t - self.k;
        self.config.c * self.segment() * d * d * d + self.w_max
    }

    /// Starts a congestion-avoidance stage at `now`.
    fn start_epoch(&mut self, now: Instant) {
        self.t_epoch = Some(now);
        self.cwnd_epoch = self.window as f64;
        if self.w_max <= self.cwnd_epoch {
            // Starting at or above W_max (the first stage, after persistent congestion,
            // or after an external window change): the curve starts here, convex.
            //= https://www.rfc-editor.org/rfc/rfc9438#section-4.8
            // Paraphrase: in the first congestion avoidance stage after a timeout, K is 0
            // and W_max is the window at the start of the stage.
            self.k = 0.0;
            self.w_max = self.cwnd_epoch;
        } else {
            //= https://www.rfc-editor.org/rfc/rfc9438#section-4.2
            // Paraphrase: K = cubic_root((W_max - cwnd_epoch) / C), cwnd_epoch being the
            // window at the start of the congestion avoidance stage.
            self.k = ((self.w_max - self.cwnd_epoch) / (self.config.c * self.segment())).cbrt();
        }
        //= https://www.rfc-editor.org/rfc/rfc9438#section-4.3
        // Paraphrase: W_est is set to cwnd_epoch at the start of the stage.
        self.w_est = self.cwnd_epoch;
    }

    /// Adds `grow` bytes (possibly fractional) to the window.
    fn grow(&mut self, grow: f64) {
        let total = grow.max(0.0) + self.frac;
        let whole = total.floor();
        self.frac = total - whole;
        self.window = self.window.saturating_add(whole as u64);
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            window: self.window,
            ssthresh: self.ssthresh,
            w_max: self.w_max,
            cwnd_prior: self.cwnd_prior,
            k: self.k,
            t_epoch: self.t_epoch,
            cwnd_epoch: self.cwnd_epoch,
            w_est: self.w_est,
            alpha: self.alpha,
            recovery: self.recovery,
        }
    }

    /// The growth of one acknowledgment of `bytes` in congestion avoidance.
    fn congestion_avoidance(&mut self, now: Instant, bytes: u64, rtt: &RttEstimator) {
        let t_epoch = match self.t_epoch {
            Some(t) => t,
            None => {
                self.start_epoch(now);
                now
            }
        };
        let t = now.saturating_duration_since(t_epoch).as_secs_f64();
        let w = self.window as f64;
        let acked = bytes as f64;

        //= https://www.rfc-editor.org/rfc/rfc9438#section-4.3
        // Paraphrase: W_est grows by α_cubic * segments_acked / cwnd per ACK; once W_est
        // reaches cwnd_prior, α_cubic SHOULD become 1 so that the growth matches Reno's.
        self.w_est += self.alpha * self.segment() * acked / w;
        if self.alpha < 1.0 && self.w_est >= self.cwnd_prior {
            self.alpha = 1.0;
        }

        let new_w = if self.w_cubic(t) < self.w_est {
            //= https://www.rfc-editor.org/rfc/rfc9438#section-4.3
            // Paraphrase: if W_cubic(t) is below W_est, CUBIC is in the Reno-friendly
            // region and cwnd SHOULD be set to W_est on each ACK. (Never decreased here.)
            self.w_est.max(w)
        } else {
            //= https://www.rfc-editor.org/rfc/rfc9438#section-4.2
            // Paraphrase: target is W_cubic(t + RTT) clamped to [cwnd, 1.5 * cwnd], and
            // cwnd grows by (target - cwnd) / cwnd segments per acknowledged segment.
            // This covers the concave (cwnd < W_max, section 4.4) and convex (cwnd >=
            // W_max, section 4.5) regions alike.
            let target = self
                .w_cubic(t + rtt.smoothed().as_secs_f64())
                .clamp(w, 1.5 * w);
            w + (target - w) * acked / w
        };
        self.grow(new_w - w);
    }
}

/// α_cubic = 3 * (1 - β_cubic) / (1 + β_cubic), the Reno-friendly additive increase.
///
//= https://www.rfc-editor.org/rfc/rfc9438#section-4.3
// Paraphrase: α_cubic = 3 (1 - β_cubic) / (1 + β_cubic) makes the average window of the
// Reno-friendly estimate match Reno's with its own decrease factor.
fn alpha_cubic(beta: f64) -> f64 {
    3.0 * (1.0 - beta) / (1.0 + beta)
}

impl CongestionController for Cubic {
    fn name(&self) -> &str {
        "cubic"
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent_time: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.touched = true;
        self.recovery.on_ack(sent_time);
        //= https://www.rfc-editor.org/rfc/rfc9438#section-5.8
        // Paraphrase: CUBIC does not increase its window while the flow is application
        // limited. The time spent application-limited is also removed from t, so the
        // curve resumes where it stopped instead of jumping ahead.
        if app_limited {
            if self.app_limited_since.is_none() {
                self.app_limited_since = Some(now);
            }
            return;
        }
        if let Some(since) = self.app_limited_since.take()
            && let Some(t_epoch) = self.t_epoch
        {
            self.t_epoch = Some(t_epoch + now.saturating_duration_since(since));
        }
        if self.recovery.contains(sent_time) {
            return;
        }
        if self.window < self.ssthresh {
            //= https://www.rfc-editor.org/rfc/rfc9438#section-4.10
            // Paraphrase: CUBIC uses a slow-start algorithm while cwnd is below ssthresh
            // (standard slow start here: cwnd grows by the acknowledged bytes).
            self.window = self.window.saturating_add(bytes);
            return;
        }
        self.congestion_avoidance(now, bytes, rtt);
    }

    fn on_congestion_event(&mut self, now: Instant, event: &CongestionEvent) {
        self.touched = true;
        if !self.recovery.contains(event.sent_time) {
            self.undo = Some(self.snapshot());
            self.recovery.enter(now);
            let w = self.window as f64;
            //= https://www.rfc-editor.org/rfc/rfc9438#section-4.7
            // Paraphrase: with fast convergence, if the window at a congestion event is
            // below the previous W_max, W_max becomes cwnd * (1 + β_cubic) / 2 (releasing
            // bandwidth to new flows); otherwise W_max is cwnd.
            self.w_max = if self.config.fast_convergence && w < self.w_max {
                w * (1.0 + self.config.beta) / 2.0
            } else {
                w
            };
            //= https://www.rfc-editor.org/rfc/rfc9438#section-4.6
            // Paraphrase: on a congestion event ssthresh becomes cwnd * β_cubic (at least
            // two segments here: RFC 9002's minimum window), cwnd_prior records the window
            // before the reduction, and cwnd is set to the new ssthresh.
            self.cwnd_prior = w;
            // Rounded, not truncated: 84 000 * 0.7 is 58 799.999... in binary floating point.
            let reduced = ((w * self.config.beta).round() as u64).max(self.minimum_window());
            self.ssthresh = reduced;
            self.window = reduced;
            self.frac = 0.0;
            self.t_epoch = None;
            self.k = 0.0;
            self.alpha = alpha_cubic(self.config.beta);
            self.congestion_events += 1;
        }
        if event.persistent_congestion {
            //= https://www.rfc-editor.org/rfc/rfc9438#section-4.8
            // Paraphrase: after a timeout CUBIC reduces ssthresh as in section 4.6 and the
            // window as Reno does; the next congestion avoidance stage starts with K = 0
            // and W_max equal to the window at its start. QUIC's analogue of the timeout is
            // persistent congestion (RFC 9002 section 7.6.2): the window collapses to the
            // minimum window.
            self.window = self.minimum_window();
            self.frac = 0.0;
            self.recovery.reset();
            self.t_epoch = None;
            self.w_max = 0.0;
            self.k = 0.0;
            self.undo = None;
            self.persistent_congestion_events += 1;
        }
    }

    //= https://www.rfc-editor.org/rfc/rfc9438#section-4.9
    // Paraphrase: when a congestion event is found to be spurious, CUBIC may restore the
    // state it had before the event (cwnd, ssthresh, W_max, K, the epoch and W_est).
    fn on_spurious_congestion(&mut self, _now: Instant) {
        if let Some(s) = self.undo.take() {
            self.window = self.window.max(s.window);
            self.ssthresh = s.ssthresh;
            self.w_max = s.w_max;
            self.cwnd_prior = s.cwnd_prior;
            self.k = s.k;
            self.t_epoch = s.t_epoch;
            self.cwnd_epoch = s.cwnd_epoch;
            self.w_est = s.w_est;
            self.alpha = s.alpha;
            self.recovery = s.recovery;
            self.frac = 0.0;
            self.spurious_undos += 1;
        }
    }

    fn on_mtu_update(&mut self, max_datagram_size: u16) {
        let old_initial = self
            .config
            .initial_window
            .unwrap_or_else(|| initial_window(self.mds));
        self.mds = max_datagram_size.max(1);
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.2
        //# If the maximum datagram size changes during the connection, the initial
        //# congestion window SHOULD be recalculated with the new size.
        if !self.touched && self.window == old_initial {
            self.window = self
                .config
                .initial_window
                .unwrap_or_else(|| initial_window(max_datagram_size));
        }
        self.window = self.window.max(self.minimum_window());
        // K depends on the segment size: restart the stage from the current window.
        self.t_epoch = None;
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn ssthresh(&self) -> Option<u64> {
        (self.ssthresh != u64::MAX).then_some(self.ssthresh)
    }

    fn in_slow_start(&self) -> bool {
        self.window < self.ssthresh
    }

    fn set_window(&mut self, bytes: u64) {
        self.window = bytes.max(self.minimum_window());
        self.frac = 0.0;
        self.t_epoch = None;
    }

    fn metrics(&self) -> CongestionMetrics {
        let state = if self.recovery.is_active() {
            CongestionState::Recovery
        } else if self.app_limited_since.is_some() {
            CongestionState::ApplicationLimited
        } else if self.in_slow_start() {
            CongestionState::SlowStart
        } else {
            CongestionState::CongestionAvoidance
        };
        CongestionMetrics {
            window: self.window,
            ssthresh: self.ssthresh(),
            state,
            pacing_rate: None,
            congestion_events: self.congestion_events,
            persistent_congestion_events: self.persistent_congestion_events,
            spurious_undos: self.spurious_undos,
            extra: vec![
                ("w_max", self.w_max),
                ("k", self.k),
                ("w_est", self.w_est),
                ("cwnd_prior", self.cwnd_prior),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::test_util::{lose, steady_rtt, window_round};
    use std::time::Duration;

    const MDS: u16 = 1200;
    const M: u64 = MDS as u64;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// A controller that has just reduced from `w_max_segments` (first loss, so no fast
    /// convergence) and whose recovery period is over at the returned time.
    fn after_loss(w_max_segments: u64, t0: Instant) -> (Cubic, Instant) {
        let mut cc = Cubic::new(CubicConfig::default(), MDS);
        cc.set_window(w_max_segments * M);
        lose(&mut cc, t0, t0, M);
        (cc, t0 + ms(1))
    }

    /// Window after each round (plus the round's start time relative to the epoch).
    fn rounds(cc: &mut Cubic, mut now: Instant, rtt: &RttEstimator, n: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            now = window_round(cc, now, rtt, M);
            out.push(cc.window());
        }
        out
    }

    #[test]
    fn slow_start_doubles_per_rtt() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let mut cc = Cubic::new(CubicConfig::default(), MDS);
        let mut now = t0;
        for round in 1..=4 {
            now = window_round(&mut cc, now, &rtt, M);
            assert_eq!(cc.window(), 12_000 << round);
        }
        assert!(cc.in_slow_start());
    }

    #[test]
    fn reduction_is_beta_and_ignored_within_recovery() {
        let t0 = Instant::now();
        let mut cc = Cubic::new(CubicConfig::default(), MDS);
        cc.set_window(100 * M);
        lose(&mut cc, t0, t0, M);
        assert_eq!(cc.window(), 84_000);
        assert_eq!(cc.ssthresh(), Some(84_000));
        assert_eq!(cc.w_max(), 120_000.0);
        lose(&mut cc, t0 + ms(5), t0, M);
        assert_eq!(cc.window(), 84_000);
        assert_eq!(cc.metrics().congestion_events, 1);
        assert_eq!(cc.metrics().state, CongestionState::Recovery);
    }

    #[test]
    fn k_matches_formula() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let (mut cc, now) = after_loss(100, t0);
        // The first acknowledgment in congestion avoidance starts the epoch.
        cc.on_ack(now, now, M, false, &rtt);
        // K = cbrt(W_max (1 - beta) / C) in segments and seconds.
        let expected = (100.0f64 * 0.3 / 0.4).cbrt();
        assert!((cc.k() - expected).abs() < 1e-9, "{} vs {expected}", cc.k());
        assert_eq!(
            cc.metrics()
                .extra
                .iter()
                .find(|(n, _)| *n == "k")
                .map(|(_, v)| *v),
            Some(cc.k())
        );
    }

    #[test]
    fn window_returns_to_w_max_at_k_concave_then_convex() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(200));
        let (mut cc, now) = after_loss(100, t0);
        let k = (75.0f64).cbrt();
        // 200 ms rounds: round i ends 0.2 * (i + 1) s after the epoch start.
        let w = rounds(&mut cc, now, &rtt, 40);
        let at = |secs: f64| w[((secs / 0.2).round() as usize).saturating_sub(1)] as f64;
        // At t = K the window is back at W_max (within 1%).
        let w_k = at(k);
        assert!((w_k - 120_000.0).abs() < 1_200.0, "window at K: {w_k}");
        // Concave before K: the first second grows far more than the last second before K.
        let early = at(1.0) - 84_000.0;
        let late = at(k) - at(k - 1.0);
        assert!(early > 10.0 * late, "early {early} late {late}");
        // Convex after K: the growth accelerates.
        let first = at(k + 1.0) - at(k);
        let second = at(k + 2.0) - at(k + 1.0);
        assert!(second > 3.0 * first, "first {first} second {second}");
        // Never below W_max again after K, and in the cubic (not Reno-friendly) region.
        assert!(cc.w_est() < cc.window() as f64);
    }

    #[test]
    fn reno_friendly_region_dominates_at_small_rtt() {
        let t0 = Instant::now();
        // 1 ms RTT, small window: in 100 ms W_cubic hardly moves, Reno's estimate does.
        let rtt = steady_rtt(t0, ms(1));
        let (mut cc, now) = after_loss(20, t0);
        assert_eq!(cc.window(), 14 * M);
        let w = rounds(&mut cc, now, &rtt, 100);
        let last = *w.last().unwrap() as f64;
        // W_cubic(0.1 s) is about 14.4 segments; the window is far above, tracking W_est.
        assert!(last > 40.0 * M as f64, "window {last}");
        assert!(
            (last - cc.w_est()).abs() <= M as f64,
            "{last} vs {}",
            cc.w_est()
        );
        // First rounds grow by alpha_cubic segments per RTT (about 0.53), after W_est
        // passes cwnd_prior by one segment per RTT.
        let first = (w[1] - w[0]) as f64 / M as f64;
        assert!((first - alpha_cubic(0.7)).abs() < 0.1, "{first}");
        let later = (w[99] - w[98]) as f64 / M as f64;
        assert!((later - 1.0).abs() < 0.1, "{later}");
    }

    #[test]
    fn growth_capped_at_one_and_a_half_per_rtt() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, Duration::from_secs(2));
        let (mut cc, now) = after_loss(10, t0);
        let w = rounds(&mut cc, now, &rtt, 12);
        let ratios: Vec<f64> = w.windows(2).map(|p| p[1] as f64 / p[0] as f64).collect();
        // At most 1.5x plus the sub-byte carry.
        assert!(ratios.iter().all(|&r| r <= 1.5 + 1e-4), "{ratios:?}");
        assert!(ratios.iter().any(|&r| r > 1.45), "{ratios:?}");
    }

    #[test]
    fn fast_convergence_lowers_w_max() {
        let t0 = Instant::now();
        let mut cc = Cubic::new(CubicConfig::default(), MDS);
        cc.set_window(100 * M);
        lose(&mut cc, t0, t0, M);
        // Second loss below W_max (window 70 segments): W_max = 70 * 1.7 / 2 = 59.5.
        lose(&mut cc, t0 + ms(100), t0 + ms(50), M);
        assert!((cc.w_max() - 59.5 * M as f64).abs() < 1e-6);
        assert_eq!(cc.window(), 58_800); // 84 000 * 0.7
        let mut plain = Cubic::new(
            CubicConfig {
                fast_convergence: false,
                ..CubicConfig::default()
            },
            MDS,
        );
        plain.set_window(100 * M);
        lose(&mut plain, t0, t0, M);
        lose(&mut plain, t0 + ms(100), t0 + ms(50), M);
        assert_eq!(plain.w_max(), 84_000.0);
    }

    #[test]
    fn minimum_window_floor() {
        let t0 = Instant::now();
        let mut cc = Cubic::new(CubicConfig::default(), MDS);
        for i in 1..30 {
            lose(&mut cc, t0 + ms(100 * i), t0 + ms(100 * i - 1), M);
            assert!(cc.window() >= 2 * M);
        }
        assert_eq!(cc.window(), 2 * M);
    }

    #[test]
    fn persistent_congestion_restarts_from_minimum_window() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let mut cc = Cubic::new(CubicConfig::default(), MDS);
        cc.set_window(100 * M);
        cc.on_congestion_event(
            t0,
            &CongestionEvent {
                sent_time: t0,
                lost_bytes: 10 * M,
                persistent_congestion: true,
                ecn: false,
            },
        );
        assert_eq!(cc.window(), 2 * M);
        assert_eq!(cc.ssthresh(), Some(84_000));
        assert!(cc.in_slow_start());
        assert_eq!(cc.metrics().persistent_congestion_events, 1);
        // Slow start up to ssthresh, then (in the same round here: 2, 4, ..., 64 segments
        // then 6 more reach 70 segments = ssthresh) a convex stage that starts at the
        // window of its first acknowledgment: K = 0 and W_max = 84 000.
        let mut now = t0 + ms(1);
        while cc.in_slow_start() {
            now = window_round(&mut cc, now, &rtt, M);
        }
        assert_eq!(cc.k(), 0.0);
        assert_eq!(cc.w_max(), 84_000.0);
        let before = cc.window();
        window_round(&mut cc, now, &rtt, M);
        assert!(cc.window() > before);
    }

    #[test]
    fn app_limited_freezes_growth_and_time() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let (mut a, now) = after_loss(100, t0);
        let mut now = now;
        for _ in 0..10 {
            now = window_round(&mut a, now, &rtt, M);
        }
        let mut b = a.clone();
        // b is application-limited for 10 s.
        let frozen = b.window();
        for i in 0..100 {
            b.on_ack(now + ms(100 * i), now + ms(100 * i), M, true, &rtt);
        }
        assert_eq!(b.window(), frozen);
        assert_eq!(b.metrics().state, CongestionState::ApplicationLimited);
        // One more round each: a now, b after the pause. Without the epoch shift b's
        // curve would be 10 s further along and jump by the 1.5x cap.
        window_round(&mut a, now, &rtt, M);
        window_round(&mut b, now + Duration::from_secs(10), &rtt, M);
        let (wa, wb) = (a.window() as f64, b.window() as f64);
        assert!((wa - wb).abs() < 0.01 * wa, "a {wa} b {wb}");
    }

    #[test]
    fn spurious_undo_restores_state() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let (mut cc, now) = after_loss(100, t0);
        let mut now = now;
        for _ in 0..5 {
            now = window_round(&mut cc, now, &rtt, M);
        }
        let (window, k, w_max) = (cc.window(), cc.k(), cc.w_max());
        lose(&mut cc, now, now - ms(50), M);
        assert!(cc.window() < window);
        cc.on_spurious_congestion(now + ms(10));
        assert_eq!((cc.window(), cc.k(), cc.w_max()), (window, k, w_max));
        assert_eq!(cc.ssthresh(), Some(84_000));
        assert_eq!(cc.metrics().spurious_undos, 1);
    }

    #[test]
    fn factory_builds_per_path() {
        let f = CubicConfig::default();
        let cc = f.build(Instant::now(), PathId(1), 1500);
        assert_eq!(cc.name(), "cubic");
        assert_eq!(cc.window(), 14_720);
    }
}
