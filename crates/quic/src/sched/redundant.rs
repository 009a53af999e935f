//! The redundant scheduler: every packet's data goes on every path, as the Linux MPTCP
//! "redundant" scheduler does. It is the latency and reliability baseline of
//! 5G-CLARITY ("Combining 5G New Radio, Wi-Fi, and LiFi for Industry 4.0", Section 3), where
//! it served the latency-sensitive services of the production deployment.
//!
//! While at least one usable path has room in its congestion window, the next packet's data
//! is queued on every usable path, fastest (lowest smoothed RTT) first; each path sends its
//! copy when its own window and pacer allow, and skips it if another path's copy was
//! acknowledged first (the kernel's scheduler likewise lets each subflow walk the whole
//! send queue, skipping what is acknowledged). Every path thus carries every byte it gets
//! to before the byte is delivered, and the goodput is about that of the fastest path. The
//! backup rule applies: backup paths carry copies only when no available path works.
//! Potentially failed paths get no copies (their queued data would go back at once).
//!
//! [`Decision::Duplicate`] owns a `Vec`, so a decision with two or more paths allocates once;
//! the candidate list itself is gathered in a buffer the scheduler keeps.
//
//= Combining 5G New Radio, Wi-Fi, and LiFi for Industry 4.0: Performance Evaluation (5G-CLARITY), Section 3
//# - Redundant. Traffic will be transmitted on all available subflows with space in the CW in
//# a redundant way, i.e., repeating the same packets through all the different paths.

use super::{
    Decision, PathSnapshot, PendingData, Scheduler, SchedulerFactory, preferred_paths, usable_paths,
};
use crate::shared::PathId;
use std::time::{Duration, Instant};

/// Sends every packet on all usable paths (with the backup rule).
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
        if preferred_paths(paths).next().is_none() {
            return Decision::Wait;
        }
        self.scratch.clear();
        self.scratch.extend(
            usable_paths(paths)
                .filter(|p| !p.is_potentially_failed())
                .map(|p| (p.srtt, p.id)),
        );
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
    fn duplicates_on_every_path_while_one_has_room() {
        let now = Instant::now();
        let mut s = Redundant::default();
        let pending = PendingData::default();
        let paths = [
            snapshot(0, 30, true),
            snapshot(1, 10, true),
            snapshot(2, 5, false),
            snapshot(3, 20, true),
        ];
        // Fastest first; the full path 2 gets its copy too (it waits in its queue).
        assert_eq!(
            s.schedule(now, &paths, &pending),
            Decision::Duplicate(vec![PathId(2), PathId(1), PathId(3), PathId(0)])
        );
        let paths = [snapshot(0, 30, false), snapshot(1, 10, true)];
        assert_eq!(
            s.schedule(now, &paths, &pending),
            Decision::Duplicate(vec![PathId(1), PathId(0)])
        );
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
