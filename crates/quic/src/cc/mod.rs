//! Congestion control: the plug-in trait every controller implements, the factory that
//! builds one controller per path, and the built-in controllers:
//!
//! | name | controller | factory | specification |
//! |---|---|---|---|
//! | `newreno` | [`NewReno`] | [`NewRenoConfig`] | RFC 9002 section 7, Appendix B |
//! | `cubic` | [`Cubic`] | [`CubicConfig`] | RFC 9438 |
//! | `bbr` | [`Bbr`] (BBRv1) | [`BbrConfig`] | Cardwell et al., ACM Queue 2016; draft-cardwell-iccrg-bbr-congestion-control-00 |
//! | `lia` | [`Lia`] (coupled) | [`LiaFactory`] | RFC 6356 |
//! | `olia` | [`Olia`] (coupled) | [`OliaFactory`] | Khalili et al., IEEE/ACM ToN 2013; draft-khalili-mptcp-congestion-control |
//!
//! [`factory_by_name`] builds a factory from one of these names.
//!
//! # Writing a controller
//!
//! A controller is a per-path state machine driven by the connection through
//! [`CongestionController`]. Everything it learns arrives as method calls with the current
//! time passed in; it never reads a clock and never sends anything itself. The connection:
//!
//! 1. calls [`CongestionController::on_packet_sent`] for every packet that counts toward
//!    bytes in flight, and refuses to send such a packet when bytes in flight would exceed
//!    [`CongestionController::window`] (except for PTO probes);
//! 2. for every ACK frame that newly acknowledges packets of the path, in the order of
//!    RFC 9002 Appendix A.7: first [`CongestionController::on_congestion_event`] if the
//!    peer's ECN-CE count increased, then again if the loss detection run by the ACK
//!    declared in-flight packets lost (one event per batch), then
//!    [`CongestionController::on_ack`] once per newly acknowledged in-flight packet in
//!    ascending packet-number order, and finally
//!    [`CongestionController::on_ack_batch_end`] once;
//! 3. when the loss-detection timer declares in-flight packets lost, calls
//!    [`CongestionController::on_congestion_event`] for that batch;
//! 4. paces sends with [`crate::recovery::Pacer`] at
//!    [`CongestionController::pacing_rate`] or, when that is `None`, at a rate derived from
//!    the window and the smoothed RTT.
//!
//! A controller must start at most one recovery period per round trip: a congestion event
//! whose newest lost packet was sent before the current recovery period started is ignored
//! ([`RecoveryPeriod`] implements this rule for you).
//!
//! # Coupled (multipath) controllers
//!
//! A [`ControllerFactory`] builds the controller of every path of a connection. A coupled
//! algorithm such as LIA (RFC 6356) or OLIA keeps its shared state behind an
//! `Arc<Mutex<..>>` created per connection by the factory and handed to every controller it
//! builds; a controller deregisters from the shared state in its `Drop` implementation when
//! its path is closed.

use crate::recovery::{RateSample, RttEstimator};
use crate::shared::PathId;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

mod bbr;
mod coupled;
mod cubic;
mod lia;
mod new_reno;
mod olia;
#[cfg(test)]
pub(crate) mod test_net;

pub use bbr::{
    BTL_BW_FILTER_LEN, Bbr, BbrConfig, BbrMode, CWND_GAIN, DRAIN_GAIN, HIGH_GAIN,
    MIN_PIPE_CWND_PACKETS, PACING_GAIN_CYCLE, PROBE_RTT_DURATION, RTPROP_FILTER_LEN,
};
pub use cubic::{Cubic, CubicConfig};
pub use lia::{Lia, LiaFactory, lia_alpha};
pub use new_reno::{NewReno, NewRenoConfig};
pub use olia::{Olia, OliaFactory};

/// The built-in controller factory that `name` selects in
/// [`crate::registry::CONGESTION_CONTROLLERS`], with default settings; `None` for any other
/// name.
///
/// The `"lia"` and `"olia"` factories couple **every** controller they build, so a
/// coupled factory must serve a single connection: call this function once per
/// connection rather than sharing the result between connections. The other factories
/// keep no state and may be shared freely.
pub fn factory_by_name(name: &str) -> Option<Arc<dyn ControllerFactory>> {
    crate::registry::find(crate::registry::CONGESTION_CONTROLLERS, name).map(|p| p.build())
}

/// A congestion event: in-flight packets declared lost, or an increase in the ECN-CE count
/// reported by the peer.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub struct CongestionEvent {
    /// The send time of the newest lost packet that was in flight
    /// ([`crate::recovery::LostPackets::newest_in_flight_sent_time`]), or for ECN the send
    /// time of the largest acknowledged packet
    /// ([`crate::recovery::SpaceRecovery::largest_acked_time_sent`]). A controller ignores
    /// the event if this is within the current recovery period.
    pub sent_time: Instant,
    /// Bytes of in-flight packets declared lost (zero for ECN).
    pub lost_bytes: u64,
    /// Whether the losses establish persistent congestion
    /// ([`crate::recovery::LostPackets::in_persistent_congestion`]).
    pub persistent_congestion: bool,
    /// Whether the event is an ECN-CE increase rather than loss.
    pub ecn: bool,
}

/// The state a controller reports for logging (the qlog `congestion_state_updated` event).
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub enum CongestionState {
    /// The window grows by the acknowledged bytes.
    SlowStart,
    /// The window grows slowly (additively for NewReno, along the cubic curve for CUBIC).
    CongestionAvoidance,
    /// A recovery period is in progress: no growth, no further reduction.
    Recovery,
    /// The sender is not using its window, so the window does not grow.
    ApplicationLimited,
    /// An algorithm-specific state (for example a BBR phase).
    Other(&'static str),
}

impl CongestionState {
    /// The name used in qlog.
    pub fn as_str(self) -> &'static str {
        match self {
            CongestionState::SlowStart => "slow_start",
            CongestionState::CongestionAvoidance => "congestion_avoidance",
            CongestionState::Recovery => "recovery",
            CongestionState::ApplicationLimited => "application_limited",
            CongestionState::Other(name) => name,
        }
    }
}

/// A snapshot of a controller's state, for logs, metrics and schedulers. New fields may be
/// added: a controller outside this crate builds one with [`CongestionMetrics::new`] and
/// sets the other fields it has.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CongestionMetrics {
    /// The congestion window, bytes.
    pub window: u64,
    /// The slow start threshold, bytes; `None` while infinite.
    pub ssthresh: Option<u64>,
    /// The current state.
    pub state: CongestionState,
    /// The controller's own pacing rate, bytes per second, if it has one.
    pub pacing_rate: Option<u64>,
    /// Congestion events that reduced the window (events within a recovery period do not
    /// count).
    pub congestion_events: u64,
    /// Persistent congestion events.
    pub persistent_congestion_events: u64,
    /// Congestion responses undone as spurious.
    pub spurious_undos: u64,
    /// Algorithm-specific values, by name (for example CUBIC's `w_max`).
    pub extra: Vec<(&'static str, f64)>,
}

impl CongestionMetrics {
    /// Metrics with the given window, threshold and state; no pacing rate, no events, no
    /// algorithm-specific values.
    pub fn new(window: u64, ssthresh: Option<u64>, state: CongestionState) -> Self {
        CongestionMetrics {
            window,
            ssthresh,
            state,
            pacing_rate: None,
            congestion_events: 0,
            persistent_congestion_events: 0,
            spurious_undos: 0,
            extra: Vec::new(),
        }
    }
}

/// A per-path congestion controller.
///
/// Implement this to plug a new algorithm into polypath; build it through a
/// [`ControllerFactory`]. All sizes are in bytes (QUIC packet sizes: header and AEAD
/// overhead included, UDP and IP headers excluded) and all times are passed in by the
/// caller. See the [module documentation](self) for the order of calls.
///
/// Any controller must follow the congestion control guidelines of RFC 8085 section 3.1
/// (RFC 9002 section 7), never let the window fall below two datagrams in response to
/// congestion (RFC 9002 section 7.2), and react to persistent congestion by collapsing the
/// window.
//= https://www.rfc-editor.org/rfc/rfc9002#section-7
//# If a sender uses a different controller than that specified in this document,
//# the chosen controller MUST conform to the congestion control guidelines
//# specified in {{Section 3.1 of RFC8085}}.
pub trait CongestionController: Send {
    /// A short name for logs, such as `"cubic"`.
    fn name(&self) -> &str;

    /// A packet that counts toward bytes in flight was sent: `bytes` is its size and
    /// `bytes_in_flight` the path's bytes in flight including it. The default does nothing.
    fn on_packet_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64) {
        let _ = (now, bytes, bytes_in_flight);
    }

    /// One newly acknowledged packet that counted toward bytes in flight.
    ///
    /// - `sent_time`: when it was sent (compare with the recovery period);
    /// - `bytes`: its size;
    /// - `app_limited`: whether the sender is currently not using its window, in the sense
    ///   of RFC 9002 section 7.8 (bytes in flight below the window and the sender not
    ///   pacing-limited when it last ran out of data). Controllers do not grow the window
    ///   on such acknowledgments;
    /// - `rtt`: the path's RTT estimator, already updated with this ACK's sample.
    fn on_ack(
        &mut self,
        now: Instant,
        sent_time: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    );

    /// All packets newly acknowledged by one ACK frame have been reported through
    /// [`CongestionController::on_ack`]. `bytes_in_flight` is the path's bytes in flight
    /// after the ACK (and after any losses it revealed) and `sample` the delivery-rate
    /// sample of the ACK, if any. Model-based algorithms (BBR) do their work here. The
    /// default does nothing.
    fn on_ack_batch_end(
        &mut self,
        now: Instant,
        bytes_in_flight: u64,
        rtt: &RttEstimator,
        sample: Option<&RateSample>,
    ) {
        let _ = (now, bytes_in_flight, rtt, sample);
    }

    /// In-flight packets were declared lost, or the ECN-CE count increased.
    ///
    /// The controller starts a recovery period and reduces its window unless
    /// `event.sent_time` lies within the current recovery period. If
    /// `event.persistent_congestion` is set it then collapses the window to its minimum and
    /// leaves the recovery period (RFC 9002 section 7.6.2).
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-7.3.2
    //# The recovery period aims to limit congestion window reduction to once per round
    //# trip. Therefore, during a recovery period, the congestion window does not change
    //# in response to new losses or increases in the ECN-CE count.
    fn on_congestion_event(&mut self, now: Instant, event: &CongestionEvent);

    /// The losses that started the most recent window reduction turned out to be spurious
    /// (the packets were acknowledged after being declared lost; see
    /// [`crate::recovery::AckOutcome::spurious`]). The controller may restore the state it
    /// had before that reduction. The connection should call this only when every packet
    /// whose loss triggered the reduction has been acknowledged. The default does nothing.
    fn on_spurious_congestion(&mut self, now: Instant) {
        let _ = now;
    }

    /// The path's maximum datagram size changed (after path MTU discovery, or on a new
    /// path). Windows expressed in datagrams (initial and minimum window) follow.
    fn on_mtu_update(&mut self, max_datagram_size: u16);

    /// The congestion window: the most bytes the path may have in flight.
    fn window(&self) -> u64;

    /// The slow start threshold, `None` while infinite.
    fn ssthresh(&self) -> Option<u64>;

    /// Whether the controller is in slow start.
    fn in_slow_start(&self) -> bool;

    /// The rate, bytes per second, at which the controller wants packets paced; `None`
    /// (the default) lets the pacer derive it from the window and the smoothed RTT
    /// (RFC 9002 section 7.7).
    fn pacing_rate(&self) -> Option<u64> {
        None
    }

    /// The size, bytes, of the aggregates the controller wants the pacer to release at
    /// once ([`crate::recovery::Pacer::delay_until`]); `None` (the default) paces packet
    /// by packet.
    fn send_quantum(&self) -> Option<u64> {
        None
    }

    /// Overrides the congestion window, for a path manager that splits or transfers a
    /// window between paths (for example after a predicted handover).
    ///
    /// Semantics: the window becomes `bytes`, raised to the controller's minimum window if
    /// below it. The slow start threshold is not changed, so a window set below the
    /// threshold grows in slow start and one set above it in congestion avoidance. Growth
    /// continues from the new value (CUBIC starts a new epoch). An ongoing recovery period
    /// is not affected.
    fn set_window(&mut self, bytes: u64);

    /// A snapshot of the controller's state. The default reports the window, threshold
    /// and slow start state without counters.
    fn metrics(&self) -> CongestionMetrics {
        CongestionMetrics {
            window: self.window(),
            ssthresh: self.ssthresh(),
            state: if self.in_slow_start() {
                CongestionState::SlowStart
            } else {
                CongestionState::CongestionAvoidance
            },
            pacing_rate: self.pacing_rate(),
            congestion_events: 0,
            persistent_congestion_events: 0,
            spurious_undos: 0,
            extra: Vec::new(),
        }
    }
}

impl fmt::Debug for dyn CongestionController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CongestionController")
            .field("name", &self.name())
            .field("window", &self.window())
            .field("ssthresh", &self.ssthresh())
            .finish()
    }
}

/// Builds the congestion controller of each path of a connection.
///
/// One factory value is typically shared by all connections of an endpoint (in an `Arc`).
/// To couple the paths of a connection, make the factory itself per connection, or have
/// it key shared state by connection, and give every controller it builds an `Arc` of that
/// state.
///
/// Closures `Fn(Instant, PathId, u16) -> Box<dyn CongestionController>` are factories.
pub trait ControllerFactory: Send + Sync {
    /// A controller for path `path_id`, created at `now`, whose maximum datagram size is
    /// `max_datagram_size`.
    fn build(
        &self,
        now: Instant,
        path_id: PathId,
        max_datagram_size: u16,
    ) -> Box<dyn CongestionController>;

    /// The factory one new connection uses for its paths. Factories of coupled controllers
    /// (LIA, OLIA) return a fresh factory here, so that only the paths of one connection
    /// share state even when many connections share a configuration. The default
    /// (`None`) uses this factory itself.
    fn for_connection(&self) -> Option<Arc<dyn ControllerFactory>> {
        None
    }
}

impl<F> ControllerFactory for F
where
    F: Fn(Instant, PathId, u16) -> Box<dyn CongestionController> + Send + Sync,
{
    fn build(
        &self,
        now: Instant,
        path_id: PathId,
        max_datagram_size: u16,
    ) -> Box<dyn CongestionController> {
        self(now, path_id, max_datagram_size)
    }
}

/// The initial congestion window for a maximum datagram size:
/// `min(10 * max_datagram_size, max(14720, 2 * max_datagram_size))`.
///
//= https://www.rfc-editor.org/rfc/rfc9002#section-7.2
//# Endpoints SHOULD use an initial congestion window of ten times
//# the maximum datagram size (max_datagram_size), while limiting the window to the
//# larger of 14,720 bytes or twice the maximum datagram size.
pub fn initial_window(max_datagram_size: u16) -> u64 {
    let mds = u64::from(max_datagram_size);
    (10 * mds).min(14_720u64.max(2 * mds))
}

/// The minimum congestion window: `2 * max_datagram_size`.
///
//= https://www.rfc-editor.org/rfc/rfc9002#section-7.2
//# The minimum congestion window is the smallest value the congestion window can
//# attain in response to loss, an increase in the peer-reported ECN-CE count,
//# or persistent congestion.  The RECOMMENDED value is 2 * max_datagram_size.
pub fn minimum_window(max_datagram_size: u16) -> u64 {
    2 * u64::from(max_datagram_size)
}

/// The recovery-period bookkeeping shared by loss-based controllers (RFC 9002 Appendix B
/// `congestion_recovery_start_time` and `InCongestionRecovery`).
#[derive(Debug, Copy, Clone, Default, PartialEq, Eq)]
pub struct RecoveryPeriod {
    /// congestion_recovery_start_time.
    start: Option<Instant>,
    /// Whether no packet sent after `start` has been acknowledged yet.
    active: bool,
}

impl RecoveryPeriod {
    /// No recovery period has started.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a packet sent at `sent_time` was sent before the current recovery period
    /// started (its acknowledgment does not grow the window, its loss does not start a new
    /// period).
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-b.5
    //# InCongestionRecovery(sent_time):
    //#   return sent_time <= congestion_recovery_start_time
    pub fn contains(&self, sent_time: Instant) -> bool {
        self.start.is_some_and(|start| sent_time <= start)
    }

    /// Starts a recovery period at `now`.
    pub fn enter(&mut self, now: Instant) {
        self.start = Some(now);
        self.active = true;
    }

    /// Notes an acknowledgment of a packet sent at `sent_time`; the period ends with the
    /// first packet sent after it started.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-7.3.2
    //# A recovery period ends and the sender enters congestion avoidance when a packet
    //# sent during the recovery period is acknowledged.
    pub fn on_ack(&mut self, sent_time: Instant) {
        if self.active && !self.contains(sent_time) {
            self.active = false;
        }
    }

    /// Forgets the recovery period (after persistent congestion:
    /// `congestion_recovery_start_time = 0`).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Whether a recovery period is in progress.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// When the current (or last) recovery period started.
    pub fn start(&self) -> Option<Instant> {
        self.start
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Synthetic traffic for controller tests.
    use super::*;
    use crate::recovery::K_INITIAL_RTT;
    use std::time::Duration;

    /// An RTT estimator holding a steady `rtt`.
    pub fn steady_rtt(now: Instant, rtt: Duration) -> RttEstimator {
        let mut e = RttEstimator::new(K_INITIAL_RTT);
        e.update(now, Duration::ZERO, rtt, Duration::ZERO, true);
        e
    }

    /// Simulates one round trip of a window-limited sender: a full window of
    /// `mds`-sized packets sent at `now`, all acknowledged one by one over the following
    /// `rtt`. Returns the time at the end of the round.
    pub fn window_round(
        cc: &mut dyn CongestionController,
        now: Instant,
        rtt: &RttEstimator,
        mds: u64,
    ) -> Instant {
        let packets = (cc.window() / mds).max(1);
        let rtt_d = rtt.smoothed();
        for _ in 0..packets {
            cc.on_packet_sent(now, mds, mds);
        }
        for i in 0..packets {
            let at = now + rtt_d.mul_f64((i + 1) as f64 / packets as f64);
            cc.on_ack(at, now, mds, false, rtt);
        }
        now + rtt_d
    }

    /// A loss of one packet sent at `sent_time`, detected at `now`.
    pub fn lose(cc: &mut dyn CongestionController, now: Instant, sent_time: Instant, mds: u64) {
        cc.on_congestion_event(
            now,
            &CongestionEvent {
                sent_time,
                lost_bytes: mds,
                persistent_congestion: false,
                ecn: false,
            },
        );
    }

    /// Two paths of one connection of coupled controllers from `f`, identical (50 ms RTT,
    /// `mds`-byte packets), both put into congestion avoidance at 40 packets, then 40
    /// round trips on each, interleaved as simultaneous ACK clocks would be. Returns the two
    /// controllers (still alive: coupled state counts them) and their total growth per
    /// round trip, in packets.
    pub fn identical_paths_growth(
        f: &dyn ControllerFactory,
        mds: u16,
    ) -> (
        Box<dyn CongestionController>,
        Box<dyn CongestionController>,
        f64,
    ) {
        let m = u64::from(mds);
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, Duration::from_millis(50));
        let mut a = f.build(t0, PathId(0), mds);
        let mut b = f.build(t0, PathId(1), mds);
        for cc in [&mut a, &mut b] {
            lose(&mut **cc, t0, t0, m);
            cc.set_window(40 * m);
        }
        let start = a.window() + b.window();
        let mut now = t0 + Duration::from_millis(1);
        for _ in 0..40 {
            window_round(&mut *a, now, &rtt, m);
            now = window_round(&mut *b, now, &rtt, m);
        }
        let per_rtt = (a.window() + b.window() - start) as f64 / 40.0 / m as f64;
        (a, b, per_rtt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_per_rfc() {
        assert_eq!(initial_window(1200), 12_000);
        assert_eq!(initial_window(1472), 14_720);
        assert_eq!(initial_window(1500), 14_720);
        assert_eq!(initial_window(9000), 18_000);
        assert_eq!(minimum_window(1200), 2400);
    }

    #[test]
    fn recovery_period_rules() {
        let t0 = Instant::now();
        let ms = std::time::Duration::from_millis;
        let mut r = RecoveryPeriod::new();
        assert!(!r.contains(t0) && !r.is_active());
        r.enter(t0 + ms(10));
        assert!(r.contains(t0) && r.contains(t0 + ms(10)));
        assert!(!r.contains(t0 + ms(11)));
        r.on_ack(t0 + ms(5));
        assert!(r.is_active());
        r.on_ack(t0 + ms(11));
        assert!(!r.is_active());
        // Still "contains" old packets after the period ended.
        assert!(r.contains(t0 + ms(5)));
        r.reset();
        assert!(!r.contains(t0));
    }

    #[test]
    fn factories_by_name() {
        let t0 = Instant::now();
        for (name, built) in [
            ("newreno", "new_reno"),
            ("NewReno", "new_reno"),
            ("new_reno", "new_reno"),
            ("reno", "new_reno"),
            ("CUBIC", "cubic"),
            ("bbr", "bbr"),
            ("Bbr", "bbr"),
            ("lia", "lia"),
            ("LIA", "lia"),
            ("olia", "olia"),
            ("Olia", "olia"),
        ] {
            let f = factory_by_name(name).unwrap_or_else(|| panic!("{name}"));
            let cc = f.build(t0, PathId(0), 1200);
            assert_eq!(cc.name(), built);
            assert_eq!(cc.window(), 12_000);
        }
        for bad in ["", "vegas", "bbr2", "cubic ", "olia\0"] {
            assert!(factory_by_name(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn closures_are_factories() {
        let factory = |_now: Instant, _path: PathId, mds: u16| -> Box<dyn CongestionController> {
            Box::new(NewReno::new(NewRenoConfig::default(), mds))
        };
        let boxed: std::sync::Arc<dyn ControllerFactory> = std::sync::Arc::new(factory);
        let cc = boxed.build(Instant::now(), PathId(3), 1200);
        assert_eq!(cc.window(), 12_000);
        assert!(format!("{cc:?}").contains("new_reno"));
    }
}
