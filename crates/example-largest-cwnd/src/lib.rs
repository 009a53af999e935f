//! # polypath-example-largest-cwnd
//!
//! A Multipath QUIC scheduler written outside `polypath-quic`, against its public plug-in API
//! only ([`polypath_quic::sched`]): it proves that a scheduler needs nothing private.
//!
//! The policy is deliberately simple: every packet goes on the usable path with the largest
//! congestion window; when that window is full the scheduler waits for it rather than
//! spilling onto another path. Ties go to the lower path ID. Backup paths and paths with
//! repeated probe timeouts are left out as the draft's backup rule asks, through
//! [`usable_paths`].
//!
//! Use it like a built-in scheduler:
//!
//! ```
//! use polypath_example_largest_cwnd::LargestCwndFactory;
//! use polypath_quic::TransportConfig;
//! use std::sync::Arc;
//!
//! let transport = TransportConfig {
//!     initial_max_path_id: Some(4),
//!     scheduler: Arc::new(LargestCwndFactory),
//!     ..TransportConfig::default()
//! };
//! # let _ = transport;
//! ```
#![warn(missing_docs)]

use polypath_quic::sched::{
    Decision, PathSnapshot, PendingData, Scheduler, SchedulerFactory, usable_paths,
};
use std::time::Instant;

/// Sends every packet on the usable path with the largest congestion window.
#[derive(Debug, Default, Clone, Copy)]
pub struct LargestCwnd;

impl Scheduler for LargestCwnd {
    fn name(&self) -> &str {
        "largest-cwnd"
    }

    fn schedule(
        &mut self,
        _now: Instant,
        paths: &[PathSnapshot],
        _pending: &PendingData,
    ) -> Decision {
        let largest = usable_paths(paths).max_by(|a, b| a.cwnd.cmp(&b.cwnd).then(b.id.cmp(&a.id)));
        match largest {
            Some(path) if path.can_send => Decision::Send(path.id),
            _ => Decision::Wait,
        }
    }
}

/// Builds [`LargestCwnd`] schedulers, one per connection.
#[derive(Debug, Default, Clone, Copy)]
pub struct LargestCwndFactory;

impl SchedulerFactory for LargestCwndFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(LargestCwnd)
    }
}
