//! The redundant scheduler: every packet's data goes on every path that can take it, as
//! the Linux MPTCP "redundant" scheduler does. It is the latency and reliability baseline of
//! 5G-CLARITY ("Combining 5G New Radio, Wi-Fi, and LiFi for Industry 4.0", Section 3), where
//! it served the latency-sensitive services of the production deployment.
//!
//! The copies are listed fastest path (lowest smoothed RTT) first, so the packet's own data
//! leaves on the path most likely to deliver it first. The backup rule applies: backup paths
//! carry copies only when no available path can send.
//!
//! "With space in the CW" is the congestion window alone: the packet waits for the fastest
//! path's pacer, and the copies follow it on every other path whose window has room without
//! waiting for those paths' pacers (see the contract in [`crate::sched`]). Linux queues each
//! copy on its subflow, which transmits it at its own pace; polypath has no per-path queue,
//! so a copy leaves at once or, if its window is full, not at all. The goodput is then that
//! of the fastest path, as with the kernel's scheduler.
//!
//! [`Decision::Duplicate`] owns a `Vec`, so a decision with two or more paths allocates once;
//! the candidate list itself is gathered in a buffer the scheduler keeps.
//
//= shared/seeds/002_1270520b0abf4520.txt#section-3
//# - Redundant. Traffic will be transmitted on all available subflows with space in the CW in
//# a redundant way, i.e., repeating the same packets through all the different paths.

use super::{Decision, PathSnapshot, PendingData, Scheduler, SchedulerFactory, preferred_paths};
use crate::shared::PathId;
use std::time::{Duration, Instant};

/// Sends every packet on all paths that can send (with the backup rule).
#[derive(Debug, Default)]
pub struct Redundant {
    scratch: Vec<(Duration, PathId)>,
}

impl Scheduler for Redundant {
    fn name(&self) -> &str {
        "redundant"
    }

    fn schedule(
        &mut self,
        _now: Instant,
        paths: &[PathSnapshot],
        _pending: &PendingData,
    ) -> Decision {
        self.scratch.clear();
        self.scratch
            .extend(preferred_paths(paths).map(|p| (p.srtt, p.id)));
        match self.scratch.as_slice() {
            [] => Decision::Wait,
            [(_, only)] => Decision::Send(*only),
            _ => {
                self.scratch.sort_unstable();
                Decision::Duplicate(self.scratch.iter().map(|(_, id)| *id).collect())
            }
        }
    }
}

/// Builds [`Redundant`] schedulers.
#[derive(Debug, Default, Clone, Copy)]
pub struct RedundantFactory;

impl SchedulerFactory for RedundantFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(Redundant::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::PathStatus;
    use crate::sched::tests::{Sim, snapshot};

    #[test]
    fn duplicates_on_every_path_that_can_send() {
        let now = Instant::now();
        let mut s = Redundant::default();
        let pending = PendingData::default();
        let paths = [
            snapshot(0, 30, true),
            snapshot(1, 10, true),
            snapshot(2, 5, false),
            snapshot(3, 20, true),
        ];
        // Fastest first; the full path 2 is left out.
        assert_eq!(
            s.schedule(now, &paths, &pending),
            Decision::Duplicate(vec![PathId(1), PathId(3), PathId(0)])
        );
        // Only one path can send: a plain send.
        let paths = [snapshot(0, 30, false), snapshot(1, 10, true)];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(1)));
        let paths = [snapshot(0, 30, false)];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Wait);
    }

    #[test]
    fn backup_paths_carry_copies_only_when_needed() {
        let now = Instant::now();
        let mut s = Redundant::default();
        let pending = PendingData::default();
        let mut backup = snapshot(2, 5, true);
        backup.peer_status = Some(PathStatus::Backup);
        let paths = [snapshot(0, 30, true), snapshot(1, 10, true), backup.clone()];
        assert_eq!(
            s.schedule(now, &paths, &pending),
            Decision::Duplicate(vec![PathId(1), PathId(0)])
        );
        // A full window on the available path does not open the backup path; a failing
        // available path does.
        let paths = [snapshot(0, 30, false), backup.clone()];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Wait);
        let mut failing = snapshot(0, 30, false);
        failing.pto_count = crate::sched::POTENTIALLY_FAILED_PTOS;
        let paths = [failing, backup];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(2)));
    }

    #[test]
    fn every_packet_reaches_every_path_in_a_loop() {
        // Two paths with the same RTT and window: every decision puts a copy on both.
        let mut sim = Sim::new(&[(20, 10), (20, 10)]);
        let mut s = Redundant::default();
        assert_eq!(sim.run(&mut s, 200), 200);
        assert_eq!((sim.sent(0), sim.sent(1)), (200, 200));
        // Heterogeneous paths: the slow path still carries a copy whenever its window has
        // room, so it keeps sending while the fast path does most of the work.
        let mut sim = Sim::new(&[(10, 10), (40, 10)]);
        let mut s = Redundant::default();
        assert_eq!(sim.run(&mut s, 400), 400);
        assert!(sim.sent(1) >= 80, "slow path got {} copies", sim.sent(1));
        assert!(sim.sent(0) + sim.sent(1) > 400);
    }
}
