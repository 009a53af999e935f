//! A congestion window cap for the noq peer of the multipath cases.
//!
//! noq puts application data on the path with the lowest ID that has room in its
//! congestion window and pacer, and moves to the next path only when that one is full.
//! On loopback its first path rarely fills: when the receiver is slow (a busy machine),
//! the transfer is limited by flow control instead, each window update goes out on path 0,
//! and a noq sender once put 10 kB of 10 MB on path 1. Capping each path's window at
//! [`MULTIPATH_WINDOW_CAP`] makes path 0 fill, so both paths carry data whatever the load,
//! and the multipath cases test polypath's side of a two-path transfer rather than noq's
//! choice of path.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use noq::congestion::{Controller, ControllerFactory, ControllerMetrics, CubicConfig};
use noq_proto::RttEstimator;

/// The most bytes a noq sender keeps in flight on one path in the multipath cases: 64 KiB,
/// over 700 Mbit/s per path at loopback's sub-millisecond round trips.
pub const MULTIPATH_WINDOW_CAP: u64 = 64 * 1024;

/// Builds noq's CUBIC controllers with their window capped at `cap` bytes.
#[derive(Debug)]
pub struct CappedCubic {
    cubic: Arc<CubicConfig>,
    cap: u64,
}

impl CappedCubic {
    /// noq's default CUBIC, capped at `cap` bytes.
    pub fn new(cap: u64) -> Self {
        Self {
            cubic: Arc::new(CubicConfig::default()),
            cap,
        }
    }
}

impl ControllerFactory for CappedCubic {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Capped {
            inner: self.cubic.clone().build(now, current_mtu),
            cap: self.cap,
        })
    }
}

/// A controller whose window is its inner controller's, at most `cap`; every event goes
/// to the inner controller unchanged.
#[derive(Debug)]
struct Capped {
    inner: Box<dyn Controller>,
    cap: u64,
}

impl Controller for Capped {
    fn on_sent(&mut self, now: Instant, bytes: u64, largest_pn: u64) {
        self.inner.on_sent(now, bytes, largest_pn);
    }

    fn on_packet_sent(&mut self, now: Instant, bytes: u16, pn: u64) {
        self.inner.on_packet_sent(now, bytes, pn);
    }

    fn on_cwnd_limited(&mut self) {
        self.inner.on_cwnd_limited();
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        pn: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, pn, app_limited, rtt);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        is_ecn: bool,
        lost_bytes: u64,
        largest_lost_pn: u64,
    ) {
        self.inner.on_congestion_event(
            now,
            sent,
            is_persistent_congestion,
            is_ecn,
            lost_bytes,
            largest_lost_pn,
        );
    }

    fn on_packet_lost(&mut self, lost_bytes: u16, pn: u64, now: Instant) {
        self.inner.on_packet_lost(lost_bytes, pn, now);
    }

    fn on_spurious_congestion_event(&mut self) {
        self.inner.on_spurious_congestion_event();
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
    }

    fn on_ack_frequency_update(
        &mut self,
        ack_eliciting_threshold: u64,
        requested_max_ack_delay: Duration,
    ) {
        self.inner
            .on_ack_frequency_update(ack_eliciting_threshold, requested_max_ack_delay);
    }

    fn window(&self) -> u64 {
        self.inner.window().min(self.cap)
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut metrics = self.inner.metrics();
        metrics.congestion_window = self.window();
        metrics
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Capped {
            inner: self.inner.clone_box(),
            cap: self.cap,
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window().min(self.cap)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_never_exceeds_the_cap() {
        let now = Instant::now();
        let uncapped = Arc::new(CubicConfig::default()).build(now, 1200);
        let small = Arc::new(CappedCubic::new(4 * 1200)).build(now, 1200);
        assert!(
            uncapped.window() > 4 * 1200,
            "the test needs a larger window"
        );
        assert_eq!(small.window(), 4 * 1200);
        assert_eq!(small.metrics().congestion_window, 4 * 1200);
        let large = Arc::new(CappedCubic::new(1 << 40)).build(now, 1200);
        assert_eq!(large.window(), uncapped.window());
    }
}
