//! Building blocks shared by the coupled multipath controllers ([`super::Lia`] and
//! [`super::Olia`]): the per-connection registry of subflows that their factories share
//! between the controllers of one connection, and the Reno-style per-path state machine
//! (slow start, recovery periods, halving, persistent congestion, undo) that both keep
//! unchanged from single-path TCP.
//!
//! Only the congestion-avoidance increase differs between the coupled algorithms; each of
//! them asks [`RenoCore::on_ack`] whether an acknowledgment is due a congestion-avoidance
//! increase, computes that increase from the shared state, and applies it with
//! [`RenoCore::add`].

use super::{
    CongestionEvent, CongestionMetrics, CongestionState, RecoveryPeriod, initial_window,
    minimum_window,
};
use crate::shared::PathId;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The smallest RTT used in the coupled formulas, so that a zero RTT (possible in
/// simulations) cannot divide by zero.
const MIN_RTT_SECS: f64 = 1e-6;

/// A path's RTT in seconds as used by the coupled formulas: the smoothed RTT, at least
/// one microsecond.
pub(super) fn rtt_secs(smoothed: Duration) -> f64 {
    smoothed.as_secs_f64().max(MIN_RTT_SECS)
}

/// The subflows of one connection, keyed by path and by a per-registration serial number
/// (so that a path whose controller is rebuilt, or two live controllers for one path ID,
/// never remove each other's entry). A `BTreeMap` keeps every iteration in path order, so
/// floating-point sums are computed in the same order on every run.
#[derive(Debug)]
pub(super) struct Registry<E> {
    entries: BTreeMap<(PathId, u64), E>,
    next_serial: u64,
}

impl<E> Default for Registry<E> {
    fn default() -> Self {
        Registry {
            entries: BTreeMap::new(),
            next_serial: 0,
        }
    }
}

impl<E> Registry<E> {
    /// Adds a subflow; returns its key.
    pub(super) fn register(&mut self, path: PathId, entry: E) -> (PathId, u64) {
        let key = (path, self.next_serial);
        self.next_serial += 1;
        self.entries.insert(key, entry);
        key
    }

    /// Removes a subflow (its path was closed).
    pub(super) fn remove(&mut self, key: (PathId, u64)) {
        self.entries.remove(&key);
    }

    /// The entry of a subflow.
    pub(super) fn get_mut(&mut self, key: (PathId, u64)) -> Option<&mut E> {
        self.entries.get_mut(&key)
    }

    /// All subflows in path order.
    pub(super) fn values(&self) -> impl Iterator<Item = &E> {
        self.entries.values()
    }

    /// All subflows in path order, with their keys.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&(PathId, u64), &E)> {
        self.entries.iter()
    }

    /// The number of subflows.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Locks shared coupled state. A poisoned lock (a panic in another thread while it held
/// the lock) is recovered: the registry holds plain numbers that are valid at any point.
pub(super) fn lock<T>(shared: &Arc<Mutex<T>>) -> MutexGuard<'_, T> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// The per-path Reno machinery of RFC 9002 Appendix B, with the window kept in `f64`
/// bytes so that the small fractional increases of the coupled algorithms accumulate.
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

    /// A new maximum datagram size (see `NewReno::on_mtu_update`).
    pub(super) fn on_mtu_update(&mut self, max_datagram_size: u16) {
        let old_initial = self
            .initial_window
            .unwrap_or_else(|| initial_window(self.mds));
        self.mds = max_datagram_size.max(1);
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.2
        //# If the maximum datagram size changes during the connection, the initial
        //# congestion window SHOULD be recalculated with the new size.
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
