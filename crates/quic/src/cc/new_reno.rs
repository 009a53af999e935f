//! The NewReno controller of RFC 9002 section 7 and Appendix B, and its per-path state
//! machine ([`RenoCore`]), which the coupled controllers (LIA, OLIA) share.

use super::{
    CongestionController, CongestionEvent, CongestionMetrics, CongestionState, ControllerFactory,
    RecoveryPeriod, initial_window, minimum_window,
};
use crate::recovery::RttEstimator;
use crate::shared::PathId;
use std::time::Instant;

/// NewReno settings; also the factory of [`NewReno`] controllers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NewRenoConfig {
    /// Initial window in bytes; `None` for the RFC 9002 value
    /// ([`super::initial_window`]).
    pub initial_window: Option<u64>,
}

impl ControllerFactory for NewRenoConfig {
    fn build(
        &self,
        _now: Instant,
        _path_id: PathId,
        max_datagram_size: u16,
    ) -> Box<dyn CongestionController> {
        Box::new(NewReno::new(*self, max_datagram_size))
    }
}

/// The NewReno congestion controller of RFC 9002 (Appendix B pseudocode), with
/// byte-counting congestion avoidance.
#[derive(Debug, Clone)]
pub struct NewReno {
    core: RenoCore,
    /// Bytes acknowledged in congestion avoidance since the window last grew.
    bytes_acked: u64,
}

impl NewReno {
    /// A controller for a path whose maximum datagram size is `max_datagram_size`.
    pub fn new(config: NewRenoConfig, max_datagram_size: u16) -> Self {
        NewReno {
            core: RenoCore::new(config.initial_window, max_datagram_size),
            bytes_acked: 0,
        }
    }
}

impl CongestionController for NewReno {
    fn name(&self) -> &str {
        "new_reno"
    }

    fn on_ack(
        &mut self,
        _now: Instant,
        sent_time: Instant,
        bytes: u64,
        app_limited: bool,
        _rtt: &RttEstimator,
    ) {
        if self.core.on_ack(sent_time, bytes, app_limited) != AckAction::CongestionAvoidance {
            return;
        }
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.3.3
        //# A sender in congestion avoidance uses an Additive Increase Multiplicative
        //# Decrease (AIMD) approach that MUST limit the increase to the congestion window
        //# to at most one maximum datagram size for each congestion window that is
        //# acknowledged.
        //
        //= https://www.rfc-editor.org/rfc/rfc9002#section-b.5
        //# In congestion avoidance, implementers that use an integer representation
        //# for congestion_window should be careful with division and can use
        //# the alternative approach suggested in {{Section 2.1 of RFC3465}}.
        self.bytes_acked += bytes;
        let window = self.core.window();
        if self.bytes_acked >= window {
            self.bytes_acked -= window;
            self.core.add(self.core.mss());
        }
    }

    fn on_congestion_event(&mut self, now: Instant, event: &CongestionEvent) {
        if self.core.on_congestion_event(now, event) || event.persistent_congestion {
            self.bytes_acked = 0;
        }
    }

    fn on_spurious_congestion(&mut self, _now: Instant) {
        if self.core.on_spurious_congestion() {
            self.bytes_acked = 0;
        }
    }

    fn on_mtu_update(&mut self, max_datagram_size: u16) {
        self.core.on_mtu_update(max_datagram_size);
    }

    fn window(&self) -> u64 {
        self.core.window()
    }

    fn ssthresh(&self) -> Option<u64> {
        self.core.ssthresh()
    }

    fn in_slow_start(&self) -> bool {
        self.core.in_slow_start()
    }

    fn set_window(&mut self, bytes: u64) {
        self.core.set_window(bytes);
        self.bytes_acked = 0;
    }

    fn metrics(&self) -> CongestionMetrics {
        self.core.metrics(Vec::new())
    }
}

/// What an acknowledgment means for the window of a coupled controller.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub(super) enum AckAction {
    /// No growth: the sender is application-limited or the packet was sent before the
    /// current recovery period started.
    None,
    /// Slow start: the window already grew by the acknowledged bytes.
    SlowStart,
    /// Congestion avoidance: the caller computes the coupled increase and applies it with
    /// [`RenoCore::add`].
    CongestionAvoidance,
}

/// State saved when a congestion event reduces the window, to undo a spurious one.
#[derive(Debug, Clone, Copy)]
struct Undo {
    window: f64,
    ssthresh: f64,
    recovery: RecoveryPeriod,
}

/// The per-path Reno machinery of RFC 9002 Appendix B (slow start, recovery periods,
/// halving, persistent congestion, undo of a spurious reduction), shared by [`NewReno`]
/// and the coupled controllers, which differ only in the congestion-avoidance increase:
/// each asks [`RenoCore::on_ack`] whether an acknowledgment is due one, computes it and
/// applies it with [`RenoCore::add`]. The window is kept in `f64` bytes so that the small
/// fractional increases of the coupled algorithms accumulate; NewReno adds whole datagrams.
#[derive(Debug, Clone)]
pub(super) struct RenoCore {
    /// Configured initial window, bytes.
    initial_window: Option<u64>,
    /// max_datagram_size.
    mds: u16,
    /// congestion_window, bytes.
    window: f64,
    /// ssthresh, bytes; infinite until the first reduction.
    ssthresh: f64,
    recovery: RecoveryPeriod,
    app_limited: bool,
    /// Whether anything has been acknowledged or lost yet (for MTU updates).
    touched: bool,
    undo: Option<Undo>,
    congestion_events: u64,
    persistent_congestion_events: u64,
    spurious_undos: u64,
}

impl RenoCore {
    /// Fresh state: the initial window, infinite threshold.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-b.3
    //# congestion_window = kInitialWindow
    //# bytes_in_flight = 0
    //# congestion_recovery_start_time = 0
    //# ssthresh = infinite
    pub(super) fn new(initial: Option<u64>, max_datagram_size: u16) -> Self {
        let mds = max_datagram_size.max(1);
        let window = initial
            .unwrap_or_else(|| initial_window(mds))
            .max(minimum_window(mds));
        RenoCore {
            initial_window: initial,
            mds,
            window: window as f64,
            ssthresh: f64::INFINITY,
            recovery: RecoveryPeriod::new(),
            app_limited: false,
            touched: false,
            undo: None,
            congestion_events: 0,
            persistent_congestion_events: 0,
            spurious_undos: 0,
        }
    }

    /// The window in bytes, as a float.
    pub(super) fn window_f64(&self) -> f64 {
        self.window
    }

    /// The window in whole bytes.
    pub(super) fn window(&self) -> u64 {
        self.window as u64
    }

    /// max_datagram_size as a float (the MSS_i of the coupled formulas).
    pub(super) fn mss(&self) -> f64 {
        f64::from(self.mds)
    }

    fn minimum_window(&self) -> f64 {
        minimum_window(self.mds) as f64
    }

    /// The slow start threshold in bytes, `None` while infinite.
    pub(super) fn ssthresh(&self) -> Option<u64> {
        self.ssthresh.is_finite().then_some(self.ssthresh as u64)
    }

    /// Whether the window is below the threshold.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-7.3.1
    //# A NewReno sender is in slow start any time the congestion window is below the
    //# slow start threshold.
    pub(super) fn in_slow_start(&self) -> bool {
        self.window < self.ssthresh
    }

    /// One acknowledged packet: ends the recovery period when due, applies slow start,
    /// and tells the caller whether a congestion-avoidance increase is due.
    pub(super) fn on_ack(
        &mut self,
        sent_time: Instant,
        bytes: u64,
        app_limited: bool,
    ) -> AckAction {
        self.touched = true;
        self.recovery.on_ack(sent_time);
        self.app_limited = app_limited;
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.8
        //# When this occurs,
        //# the congestion window SHOULD NOT be increased in either slow start or
        //# congestion avoidance.
        if app_limited {
            return AckAction::None;
        }
        //= https://www.rfc-editor.org/rfc/rfc9002#section-b.5
        //# // Do not increase congestion window in recovery period.
        //# if (InCongestionRecovery(acked_packet.time_sent)):
        //#   return
        if self.recovery.contains(sent_time) {
            return AckAction::None;
        }
        if self.in_slow_start() {
            //= https://www.rfc-editor.org/rfc/rfc9002#section-7.3.1
            //# While a sender is in slow start, the congestion window increases by the number
            //# of bytes acknowledged when each acknowledgment is processed.
            self.window += bytes as f64;
            AckAction::SlowStart
        } else {
            AckAction::CongestionAvoidance
        }
    }

    /// Changes the window by `delta` bytes (negative for OLIA's decreasing term), never
    /// below the minimum window.
    pub(super) fn add(&mut self, delta: f64) {
        if delta.is_finite() {
            self.window = (self.window + delta).max(self.minimum_window());
        }
    }

    /// A congestion event: halves the window unless the event lies within the current
    /// recovery period, then collapses it on persistent congestion. Returns whether a new
    /// reduction took place (a new congestion episode began).
    pub(super) fn on_congestion_event(&mut self, now: Instant, event: &CongestionEvent) -> bool {
        self.touched = true;
        let mut reduced = false;
        //= https://www.rfc-editor.org/rfc/rfc9002#section-b.6
        //# // No reaction if already in a recovery period.
        //# if (InCongestionRecovery(sent_time)):
        //#   return
        if !self.recovery.contains(event.sent_time) {
            self.undo = Some(Undo {
                window: self.window,
                ssthresh: self.ssthresh,
                recovery: self.recovery,
            });
            //= https://www.rfc-editor.org/rfc/rfc9002#section-b.6
            //# // Enter recovery period.
            //# congestion_recovery_start_time = now()
            //# ssthresh = congestion_window * kLossReductionFactor
            //# congestion_window = max(ssthresh, kMinimumWindow)
            self.recovery.enter(now);
            self.ssthresh = (self.window / 2.0).floor();
            self.window = self.ssthresh.max(self.minimum_window());
            self.congestion_events += 1;
            reduced = true;
        }
        if event.persistent_congestion {
            //= https://www.rfc-editor.org/rfc/rfc9002#section-b.8
            //# if (InPersistentCongestion(pc_lost)):
            //#   congestion_window = kMinimumWindow
            //#   congestion_recovery_start_time = 0
            self.window = self.minimum_window();
            self.recovery.reset();
            self.undo = None;
            self.persistent_congestion_events += 1;
        }
        reduced
    }

    /// Undoes the latest reduction; returns whether there was one to undo.
    pub(super) fn on_spurious_congestion(&mut self) -> bool {
        match self.undo.take() {
            Some(undo) => {
                self.window = self.window.max(undo.window);
                self.ssthresh = undo.ssthresh;
                self.recovery = undo.recovery;
                self.spurious_undos += 1;
                true
            }
            None => false,
        }
    }

    /// A new maximum datagram size.
    pub(super) fn on_mtu_update(&mut self, max_datagram_size: u16) {
        let old_initial = self
            .initial_window
            .unwrap_or_else(|| initial_window(self.mds));
        self.mds = max_datagram_size.max(1);
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.2
        //# If the maximum datagram size changes during the connection, the initial
        //# congestion window SHOULD be recalculated with the new size.  If the maximum
        //# datagram size is decreased in order to complete the handshake, the
        //# congestion window SHOULD be set to the new initial congestion window.
        if !self.touched && self.window == old_initial as f64 {
            self.window = self
                .initial_window
                .unwrap_or_else(|| initial_window(self.mds)) as f64;
        }
        self.window = self.window.max(self.minimum_window());
    }

    /// `set_window` per the trait's semantics.
    pub(super) fn set_window(&mut self, bytes: u64) {
        self.window = (bytes as f64).max(self.minimum_window());
    }

    /// A metrics snapshot with the given algorithm-specific values.
    pub(super) fn metrics(&self, extra: Vec<(&'static str, f64)>) -> CongestionMetrics {
        let state = if self.recovery.is_active() {
            CongestionState::Recovery
        } else if self.app_limited {
            CongestionState::ApplicationLimited
        } else if self.in_slow_start() {
            CongestionState::SlowStart
        } else {
            CongestionState::CongestionAvoidance
        };
        CongestionMetrics {
            window: self.window(),
            ssthresh: self.ssthresh(),
            state,
            pacing_rate: None,
            congestion_events: self.congestion_events,
            persistent_congestion_events: self.persistent_congestion_events,
            spurious_undos: self.spurious_undos,
            extra,
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

    #[test]
    fn slow_start_doubles_per_rtt() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let mut cc = NewReno::new(NewRenoConfig::default(), MDS);
        assert_eq!(cc.window(), 12_000);
        assert!(cc.in_slow_start());
        let mut now = t0;
        for round in 1..=5 {
            now = window_round(&mut cc, now, &rtt, M);
            assert_eq!(cc.window(), 12_000 << round);
        }
        assert_eq!(cc.metrics().state, CongestionState::SlowStart);
    }

    #[test]
    fn loss_halves_then_one_mss_per_rtt() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let mut cc = NewReno::new(NewRenoConfig::default(), MDS);
        let mut now = window_round(&mut cc, t0, &rtt, M);
        now = window_round(&mut cc, now, &rtt, M);
        assert_eq!(cc.window(), 48_000);
        // A packet sent in the last round is lost.
        lose(&mut cc, now, now - ms(50), M);
        assert_eq!(cc.window(), 24_000);
        assert_eq!(cc.ssthresh(), Some(24_000));
        assert!(!cc.in_slow_start());
        assert_eq!(cc.metrics().state, CongestionState::Recovery);
        // More losses of packets sent before recovery started: ignored.
        lose(&mut cc, now + ms(1), now - ms(10), M);
        lose(&mut cc, now + ms(2), now, M);
        assert_eq!(cc.window(), 24_000);
        assert_eq!(cc.metrics().congestion_events, 1);
        // Acks for packets sent before the recovery period do not grow the window.
        cc.on_ack(now + ms(3), now - ms(20), M, false, &rtt);
        assert_eq!(cc.window(), 24_000);
        assert_eq!(cc.metrics().state, CongestionState::Recovery);
        // Congestion avoidance: +1 MSS per window acknowledged.
        let mut now = now + ms(10);
        for round in 1..=4 {
            now = window_round(&mut cc, now, &rtt, M);
            assert_eq!(cc.window(), 24_000 + round * M);
            assert_eq!(cc.metrics().state, CongestionState::CongestionAvoidance);
        }
        // A new loss of a packet sent after the recovery period: a new reduction.
        lose(&mut cc, now, now - ms(50), M);
        assert_eq!(cc.window(), (24_000 + 4 * M) / 2);
        assert_eq!(cc.metrics().congestion_events, 2);
    }

    #[test]
    fn minimum_window_floor_and_persistent_congestion() {
        let t0 = Instant::now();
        let mut cc = NewReno::new(NewRenoConfig::default(), MDS);
        let mut now = t0;
        for _ in 0..10 {
            now += ms(100);
            lose(&mut cc, now, now - ms(1), M);
        }
        assert_eq!(cc.window(), 2 * M);
        assert_eq!(cc.ssthresh(), Some(M));
        // Persistent congestion collapses the window and ends recovery.
        let mut cc = NewReno::new(NewRenoConfig::default(), MDS);
        let now = t0 + ms(500);
        cc.on_congestion_event(
            now,
            &CongestionEvent {
                sent_time: now - ms(10),
                lost_bytes: 5 * M,
                persistent_congestion: true,
                ecn: false,
            },
        );
        assert_eq!(cc.window(), 2 * M);
        assert_eq!(cc.ssthresh(), Some(6000));
        assert!(cc.in_slow_start());
        assert_eq!(cc.metrics().state, CongestionState::SlowStart);
        assert_eq!(cc.metrics().persistent_congestion_events, 1);
        // Acknowledgments of packets sent before grow the window again (slow start).
        let rtt = steady_rtt(t0, ms(100));
        cc.on_ack(now + ms(1), now - ms(20), M, false, &rtt);
        assert_eq!(cc.window(), 3 * M);
    }

    #[test]
    fn no_growth_when_app_limited() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let mut cc = NewReno::new(NewRenoConfig::default(), MDS);
        for i in 0..20 {
            cc.on_ack(t0 + ms(i), t0, M, true, &rtt);
        }
        assert_eq!(cc.window(), 12_000);
        assert_eq!(cc.metrics().state, CongestionState::ApplicationLimited);
    }

    #[test]
    fn spurious_undo_restores_previous_state() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let mut cc = NewReno::new(NewRenoConfig::default(), MDS);
        let now = window_round(&mut cc, t0, &rtt, M);
        lose(&mut cc, now, now - ms(50), M);
        assert_eq!(cc.window(), 12_000);
        cc.on_spurious_congestion(now + ms(5));
        assert_eq!(cc.window(), 24_000);
        assert_eq!(cc.ssthresh(), None);
        assert!(cc.in_slow_start());
        assert_eq!(cc.metrics().spurious_undos, 1);
        // Nothing left to undo.
        cc.on_spurious_congestion(now + ms(6));
        assert_eq!(cc.metrics().spurious_undos, 1);
    }

    #[test]
    fn mtu_update_and_set_window() {
        let mut cc = NewReno::new(NewRenoConfig::default(), 1200);
        cc.on_mtu_update(1452);
        assert_eq!(cc.window(), 14_520);
        cc.on_mtu_update(1200);
        assert_eq!(cc.window(), 12_000);
        cc.set_window(100);
        assert_eq!(cc.window(), 2400);
        cc.set_window(50_000);
        assert_eq!(cc.window(), 50_000);
        // After traffic the window is not reset by an MTU change, only floored.
        let t0 = Instant::now();
        lose(&mut cc, t0, t0, 1200);
        cc.set_window(2400);
        cc.on_mtu_update(1500);
        assert_eq!(cc.window(), 3000);
        assert_eq!(cc.name(), "new_reno");
    }
}
