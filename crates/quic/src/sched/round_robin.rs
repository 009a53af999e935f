//! Round robin: each packet goes to the next path in turn that can send (skipping paths
//! whose congestion window is full, as Linux MPTCP's round-robin scheduler does with its
//! default `cwnd_limited` Y and one segment per turn). The turn passes packet by packet
//! even when the next path's pacer holds it: the packet is queued on that path (the
//! contract of [`crate::sched`]). `cwnd_limited` N, where a full path keeps its turn, is
//! [`crate::sched::WeightedRoundRobin`] with weights 1 in its true-WRR mode.

use super::{Decision, PathSnapshot, PendingData, Scheduler, SchedulerFactory, preferred_paths};
use crate::shared::PathId;
use std::time::Instant;

/// Round-robin scheduler (with the backup rule). The turn passes when a packet is given to
/// a path ([`Scheduler::on_packet_sent`]), not when a decision is made: a decision the
/// connection does not carry out (it ends a batch of packets for another path) leaves the
/// turn where it was.
#[derive(Debug, Default)]
pub struct RoundRobin {
    last: Option<PathId>,
}

impl Scheduler for RoundRobin {
    fn name(&self) -> &str {
        "roundrobin"
    }

    fn schedule(
        &mut self,
        _now: Instant,
        paths: &[PathSnapshot],
        _pending: &PendingData,
    ) -> Decision {
        let candidates: Vec<PathId> = preferred_paths(paths).map(|p| p.id).collect();
        let next = match self.last {
            Some(last) => candidates
                .iter()
                .find(|id| **id > last)
                .or(candidates.first()),
            None => candidates.first(),
        };
        next.map_or(Decision::Wait, |id| Decision::Send(*id))
    }

    fn on_packet_sent(&mut self, _now: Instant, path: PathId, _payload_bytes: u64) {
        self.last = Some(path);
    }
}

/// Builds [`RoundRobin`] schedulers.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoundRobinFactory;

impl SchedulerFactory for RoundRobinFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(RoundRobin::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::snapshot;

    #[test]
    fn alternates_and_skips_full_paths() {
        let now = Instant::now();
        let mut s = RoundRobin::default();
        let paths = [
            snapshot(0, 30, true),
            snapshot(1, 10, true),
            snapshot(2, 5, true),
        ];
        let pick = |s: &mut RoundRobin, paths: &[PathSnapshot]| match s.schedule(
            now,
            paths,
            &PendingData::default(),
        ) {
            Decision::Send(id) => {
                s.on_packet_sent(now, id, 1200);
                id
            }
            other => panic!("unexpected {other:?}"),
        };
        let picks: Vec<_> = (0..6).map(|_| pick(&mut s, &paths).0).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
        // A decision not carried out does not pass the turn.
        assert_eq!(
            s.schedule(now, &paths, &PendingData::default()),
            Decision::Send(PathId(0))
        );
        let paths = [
            snapshot(0, 30, true),
            snapshot(1, 10, false),
            snapshot(2, 5, true),
        ];
        // Last pick was 2: wrap to 0, then skip the full path 1.
        assert_eq!(pick(&mut s, &paths), PathId(0));
        assert_eq!(pick(&mut s, &paths), PathId(2));
    }
}
