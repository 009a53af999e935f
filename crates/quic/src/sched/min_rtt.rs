//! The minimum-RTT scheduler, the default of Linux MPTCP: among the paths whose congestion
//! window has room, send on the one with the lowest smoothed RTT.
//!
//! The fast path is kept busy and the slower paths take packets only while its window,
//! counting the data queued on it for its pacer, is full (the contract of
//! [`crate::sched`]).

use super::{Decision, PathSnapshot, PendingData, Scheduler, SchedulerFactory, preferred_paths};
use std::time::Instant;

/// Lowest-smoothed-RTT-first scheduler (with the backup rule).
#[derive(Debug, Default)]
pub struct MinRtt;

impl Scheduler for MinRtt {
    fn name(&self) -> &str {
        "minrtt"
    }

    fn schedule(
        &mut self,
        _now: Instant,
        paths: &[PathSnapshot],
        _pending: &PendingData,
    ) -> Decision {
        preferred_paths(paths)
            .min_by_key(|p| (p.srtt, p.id))
            .map_or(Decision::Wait, |p| Decision::Send(p.id))
    }
}

/// Builds [`MinRtt`] schedulers.
#[derive(Debug, Default, Clone, Copy)]
pub struct MinRttFactory;

impl SchedulerFactory for MinRttFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(MinRtt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::snapshot;
    use crate::shared::PathId;

    #[test]
    fn picks_lowest_rtt_with_room() {
        let now = Instant::now();
        let mut s = MinRtt;
        let paths = [
            snapshot(0, 30, true),
            snapshot(1, 10, true),
            snapshot(2, 5, false),
        ];
        assert_eq!(
            s.schedule(now, &paths, &PendingData::default()),
            Decision::Send(PathId(1))
        );
        let none = [snapshot(0, 30, false)];
        assert_eq!(
            s.schedule(now, &none, &PendingData::default()),
            Decision::Wait
        );
    }
}
