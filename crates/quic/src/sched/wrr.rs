//! Weighted round robin as 5G-CLARITY defines it ("Combining 5G New Radio, Wi-Fi, and LiFi
//! for Industry 4.0", Section 5): each path gets an integer weight `w_i` and, per round,
//! exactly `w_i` packets, sent as one burst of consecutive packets (the Linux MPTCP
//! round-robin scheduler's "number of consecutive segments", made per path).
//!
//! Weights default to 1 and change at run time through [`Scheduler::configure`] with the key
//! `weights` (the paper sets them through sysctl while traffic flows):
//!
//! - a plain list, `"30,100,1"`, gives the weights of path 0, 1, 2, ... in path-ID order and
//!   replaces the whole table (unlisted paths fall back to 1);
//! - `path_id=weight` pairs, `"0=30,2=1"`, update only the named paths;
//! - an empty value resets every weight to 1.
//!
//! Weights are integers of at least 1 (the paper's `w ∈ ℕ`); the two forms cannot be mixed in
//! one value.
//!
//! Two modes, chosen with the key `cwnd_limited` (`y`/`n`) or [`WrrFactory::cwnd_limited`],
//! mirror the MPTCP round-robin scheduler's `cwnd_limited` parameter the paper builds on:
//!
//! - **`n`, true WRR (the default, the paper's scheduler).** Every usable path belongs to the
//!   round whether or not its window has room. A path that cannot send when its turn comes (or
//!   in the middle of its burst) is skipped and the other paths go on with their own turns; it
//!   keeps the rest of its quota, takes it as soon as its window opens, and the next round only
//!   starts once every path has sent exactly its `w_i` packets. The proportions therefore hold
//!   exactly whatever the RTTs, and a path that falls behind its weight holds back the next
//!   round (the paper's "slowest interface limits the rest" when weights do not match
//!   capacities).
//! - **`y`, cwnd-limited.** Only paths that can send now take part: when every path with room
//!   has used its quota, a new round starts among them, so fast paths fill their windows while
//!   a full path is skipped. A skipped path keeps a partly used quota and finishes it first
//!   when its window reopens (the kernel scheduler prefers a subflow "currently being used").
//!
//! In both modes, as in the kernel scheduler, paths not yet validated and paths in loss
//! recovery after a probe timeout ([`PathSnapshot::pto_count`] above 0) sit out the rounds,
//! and the backup rule of [`usable_paths`] applies.
//!
//! Within a round, the path in the middle of its burst goes first, then paths resuming a
//! partly used quota, then fresh paths, each in path-ID order. Quotas count packets, as
//! reported through [`Scheduler::on_packet_sent`].
//
//= Combining 5G New Radio, Wi-Fi, and LiFi for Industry 4.0: Performance Evaluation (5G-CLARITY), Section 5
//# For this, we propose utilizing a scheduler that implements a true Weighted Round-Robin
//# algorithm (freely available for Linux Kernels 5.4 and 5.5 at [29]) that allows subflows to
//# be assigned different numbers of packets per round, with weights
//# $\omega_{subflow_i} \in \mathbb{N}$.

use super::{
    Decision, PathSnapshot, PendingData, Scheduler, SchedulerFactory, parse_flag, usable_paths,
};
use crate::shared::PathId;
use std::collections::BTreeMap;
use std::time::Instant;

/// One path's place in the current round.
#[derive(Debug, Clone, Copy)]
struct Turn {
    id: PathId,
    weight: u32,
    /// Packets sent in the current round.
    used: u32,
    /// The path takes part in rounds (usable, backup rule, not in PTO recovery).
    member: bool,
    /// The path's window has room now.
    can_send: bool,
    /// Seen in the latest snapshot.
    present: bool,
}

impl Turn {
    fn has_quota(&self) -> bool {
        self.used < self.weight
    }

    fn eligible(&self) -> bool {
        self.member && self.can_send && self.has_quota()
    }
}

/// Weighted round-robin scheduler (5G-CLARITY), in true-WRR or cwnd-limited mode.
#[derive(Debug, Default)]
pub struct WeightedRoundRobin {
    weights: BTreeMap<PathId, u32>,
    cwnd_limited: bool,
    /// Per-path round state, sorted by path ID.
    turns: Vec<Turn>,
    /// The path whose burst is in progress.
    current: Option<PathId>,
}

impl WeightedRoundRobin {
    /// A scheduler with all weights 1; `cwnd_limited` selects the mode (false: true WRR).
    pub fn new(cwnd_limited: bool) -> Self {
        WeightedRoundRobin {
            cwnd_limited,
            ..Self::default()
        }
    }

    /// The weight of a path (1 unless configured).
    pub fn weight(&self, path: PathId) -> u32 {
        self.weights.get(&path).copied().unwrap_or(1)
    }

    /// True in cwnd-limited mode (the paper's `CWND_LIMITED=Y`).
    pub fn cwnd_limited(&self) -> bool {
        self.cwnd_limited
    }

    /// Applies a `weights` value (see the module documentation).
    pub fn set_weights(&mut self, value: &str) -> Result<(), String> {
        apply_weights(&mut self.weights, value)
    }

    fn sync(&mut self, paths: &[PathSnapshot]) {
        for t in &mut self.turns {
            t.present = false;
            t.member = false;
        }
        for p in paths {
            let weight = self.weights.get(&p.id).copied().unwrap_or(1);
            let idx = match self.turns.binary_search_by_key(&p.id, |t| t.id) {
                Ok(i) => i,
                Err(i) => {
                    self.turns.insert(
                        i,
                        Turn {
                            id: p.id,
                            weight,
                            used: 0,
                            member: false,
                            can_send: false,
                            present: true,
                        },
                    );
                    i
                }
            };
            if let Some(t) = self.turns.get_mut(idx) {
                t.present = true;
                t.weight = weight;
                t.can_send = p.can_send;
            }
        }
        for p in usable_paths(paths) {
            if p.pto_count > 0 {
                continue;
            }
            if let Ok(i) = self.turns.binary_search_by_key(&p.id, |t| t.id)
                && let Some(t) = self.turns.get_mut(i)
            {
                t.member = true;
            }
        }
        self.turns.retain(|t| t.present);
    }

    fn pick(&self) -> Option<PathId> {
        if let Some(cur) = self.current
            && self.turns.iter().any(|t| t.id == cur && t.eligible())
        {
            return Some(cur);
        }
        self.turns
            .iter()
            .find(|t| t.eligible() && t.used > 0)
            .or_else(|| self.turns.iter().find(|t| t.eligible()))
            .map(|t| t.id)
    }

    /// True if a path counts towards the end of the round.
    fn counted(&self, t: &Turn) -> bool {
        t.member && (!self.cwnd_limited || t.can_send)
    }
}

impl Scheduler for WeightedRoundRobin {
    fn name(&self) -> &str {
        "wrr"
    }

    fn schedule(
        &mut self,
        _now: Instant,
        paths: &[PathSnapshot],
        _pending: &PendingData,
    ) -> Decision {
        self.sync(paths);
        if let Some(id) = self.pick() {
            return Decision::Send(id);
        }
        //= Combining 5G New Radio, Wi-Fi, and LiFi for Industry 4.0: Performance Evaluation (5G-CLARITY), Section 5
        //# However, if *CWND_LIMITED* is set to “N” (no), the scheduler enqueues exactly the
        //# number of packets for each subflow based on its assigned weight, even if the
        //# congestion window is not fully utilized.
        let any_counted = self.turns.iter().any(|t| self.counted(t));
        let round_over = self
            .turns
            .iter()
            .all(|t| !self.counted(t) || !t.has_quota());
        if !(any_counted && round_over) {
            // Paths still owe packets in this round but none can send now (true WRR), or no
            // path can take part at all.
            return Decision::Wait;
        }
        //= Combining 5G New Radio, Wi-Fi, and LiFi for Industry 4.0: Performance Evaluation (5G-CLARITY), Section 5
        //# When this parameter is set to “Y” (yes), the scheduler attempts to fill the
        //# congestion window on all subflows, thereby increasing the data rate for subflows
        //# associated with faster network interfaces.
        let cwnd_limited = self.cwnd_limited;
        for t in &mut self.turns {
            if t.member && (!cwnd_limited || t.can_send) {
                t.used = 0;
            }
        }
        self.current = None;
        self.pick().map_or(Decision::Wait, Decision::Send)
    }

    fn on_packet_sent(&mut self, _now: Instant, path: PathId, _payload_bytes: u64) {
        if let Ok(i) = self.turns.binary_search_by_key(&path, |t| t.id) {
            if let Some(t) = self.turns.get_mut(i) {
                t.used = t.used.saturating_add(1);
            }
            self.current = Some(path);
        }
    }

    /// Keys: `weights` (see the module documentation) and `cwnd_limited` (`y` or `n`).
    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "weights" => self.set_weights(value),
            "cwnd_limited" => {
                self.cwnd_limited = parse_flag(key, value)?;
                Ok(())
            }
            _ => Err(format!("scheduler wrr has no parameter {key}")),
        }
    }
}

/// Parses a `weights` value into `table`, leaving it unchanged on error.
fn apply_weights(table: &mut BTreeMap<PathId, u32>, value: &str) -> Result<(), String> {
    let value = value.trim();
    if value.is_empty() {
        table.clear();
        return Ok(());
    }
    let parse_weight = |s: &str| -> Result<u32, String> {
        match s.trim().parse::<u32>() {
            Ok(w) if w >= 1 => Ok(w),
            _ => Err(format!(
                "weights: {s:?} is not a weight (an integer of at least 1)"
            )),
        }
    };
    let items: Vec<&str> = value.split(',').map(str::trim).collect();
    let pairs = items.iter().filter(|i| i.contains('=')).count();
    if pairs == 0 {
        let mut new = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            let id = u32::try_from(i).map_err(|_| "weights: too many entries".to_string())?;
            new.insert(PathId(id), parse_weight(item)?);
        }
        *table = new;
        Ok(())
    } else if pairs == items.len() {
        let mut updates = BTreeMap::new();
        for item in items {
            let (id, w) = item.split_once('=').unwrap_or((item, ""));
            let id = id
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("weights: {id:?} is not a path ID"))?;
            if updates.insert(PathId(id), parse_weight(w)?).is_some() {
                return Err(format!("weights: path {id} listed twice"));
            }
        }
        table.extend(updates);
        Ok(())
    } else {
        Err(format!(
            "weights: mix of plain weights and path_id=weight pairs in {value:?}"
        ))
    }
}

/// Builds [`WeightedRoundRobin`] schedulers with preset weights and mode.
#[derive(Debug, Default, Clone)]
pub struct WrrFactory {
    weights: BTreeMap<PathId, u32>,
    cwnd_limited: bool,
}

impl WrrFactory {
    /// True WRR with all weights 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// Presets the weights, in the `weights` syntax of the module documentation.
    pub fn with_weights(mut self, value: &str) -> Result<Self, String> {
        apply_weights(&mut self.weights, value)?;
        Ok(self)
    }

    /// Selects the cwnd-limited mode (`true`) or true WRR (`false`, the default).
    pub fn cwnd_limited(mut self, cwnd_limited: bool) -> Self {
        self.cwnd_limited = cwnd_limited;
        self
    }
}

impl SchedulerFactory for WrrFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(WeightedRoundRobin {
            weights: self.weights.clone(),
            cwnd_limited: self.cwnd_limited,
            ..WeightedRoundRobin::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::PathState;
    use crate::sched::tests::{Sim, snapshot};

    fn wrr(weights: &str, cwnd_limited: bool) -> Box<dyn Scheduler> {
        let factory = WrrFactory::new()
            .with_weights(weights)
            .map(|f| f.cwnd_limited(cwnd_limited));
        match factory {
            Ok(f) => f.build(),
            Err(e) => panic!("{e}"),
        }
    }

    /// Asks for one packet on static snapshots and reports it as sent.
    fn pick(s: &mut dyn Scheduler, paths: &[PathSnapshot]) -> Option<u32> {
        let now = Instant::now();
        match s.schedule(now, paths, &PendingData::default()) {
            Decision::Send(id) => {
                s.on_packet_sent(now, id, 1200);
                Some(id.0)
            }
            Decision::Wait => None,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn bursts_of_weight_packets_per_round() {
        let mut s = wrr("3,1,2", false);
        let paths = [
            snapshot(0, 10, true),
            snapshot(1, 100, true),
            snapshot(2, 50, true),
        ];
        let picks: Vec<_> = (0..12).filter_map(|_| pick(s.as_mut(), &paths)).collect();
        assert_eq!(picks, vec![0, 0, 0, 1, 2, 2, 0, 0, 0, 1, 2, 2]);
    }

    #[test]
    fn true_wrr_keeps_three_to_one_whatever_the_rtts() {
        // Path 0 is ten times faster, so it could carry far more than 3/4 of the packets;
        // true WRR still sends exactly 3 packets on it for each one on path 1.
        for (rtt0, rtt1) in [(10, 100), (100, 10), (30, 30)] {
            let mut sim = Sim::new(&[(rtt0, 10), (rtt1, 10)]);
            let mut s = wrr("3,1", false);
            assert_eq!(sim.run(s.as_mut(), 4000), 4000);
            assert_eq!(
                (sim.sent(0), sim.sent(1)),
                (3000, 1000),
                "rtts {rtt0}/{rtt1}"
            );
        }
    }

    #[test]
    fn true_wrr_skips_a_full_path_but_keeps_its_quota() {
        let mut s = wrr("3,1", false);
        let mut paths = [snapshot(0, 10, true), snapshot(1, 100, false)];
        // Path 1's window is full: path 0 takes its turn without waiting for it...
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        // ...but the round cannot end before path 1 sent its packet.
        assert_eq!(pick(s.as_mut(), &paths), None);
        paths[1].can_send = true;
        assert_eq!(pick(s.as_mut(), &paths), Some(1));
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
    }

    #[test]
    fn blocked_path_resumes_its_burst_first() {
        let mut s = wrr("1,3", false);
        let mut paths = [snapshot(0, 10, true), snapshot(1, 10, true)];
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        assert_eq!(pick(s.as_mut(), &paths), Some(1));
        paths[1].can_send = false;
        assert_eq!(pick(s.as_mut(), &paths), None);
        paths[1].can_send = true;
        assert_eq!(pick(s.as_mut(), &paths), Some(1));
        assert_eq!(pick(s.as_mut(), &paths), Some(1));
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
    }

    #[test]
    fn cwnd_limited_fills_the_open_window() {
        let mut s = wrr("3,1", true);
        let mut paths = [snapshot(0, 10, true), snapshot(1, 100, false)];
        // Path 1 is full and skipped: path 0 goes on beyond its quota, round after round.
        for _ in 0..7 {
            assert_eq!(pick(s.as_mut(), &paths), Some(0));
        }
        // Path 0 used 1 packet of its new round; once path 1 reopens it gets its packet
        // after path 0 finishes the burst in progress.
        paths[1].can_send = true;
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        assert_eq!(pick(s.as_mut(), &paths), Some(1));
        paths[0].can_send = false;
        paths[1].can_send = false;
        assert_eq!(pick(s.as_mut(), &paths), None);
    }

    #[test]
    fn cwnd_limited_favours_the_fast_path_in_a_loop() {
        // Same paths as the true-WRR test: with cwnd_limited the fast path fills its window
        // while the slow one waits for acknowledgments, so the ratio moves far beyond 3:1.
        let mut sim = Sim::new(&[(10, 10), (100, 10)]);
        let mut s = wrr("3,1", true);
        assert_eq!(sim.run(s.as_mut(), 4000), 4000);
        assert!(
            sim.sent(0) > 6 * sim.sent(1),
            "{} vs {}",
            sim.sent(0),
            sim.sent(1)
        );
        // True WRR on the same paths takes longer: the slow path paces the rounds.
        let mut sim_true = Sim::new(&[(10, 10), (100, 10)]);
        let mut s = wrr("3,1", false);
        sim_true.run(s.as_mut(), 4000);
        assert!(sim_true.now > sim.now);
    }

    #[test]
    fn weights_change_at_run_time() {
        let mut sim = Sim::new(&[(20, 20), (20, 20), (20, 20)]);
        let mut s = wrr("", false);
        sim.run(s.as_mut(), 300);
        assert_eq!((sim.sent(0), sim.sent(1), sim.sent(2)), (100, 100, 100));
        // The last round just ended with every path at 1 packet. New weights apply to the
        // round in progress: paths 0 and 1 each have 1 packet of their new quota behind them.
        assert_eq!(s.configure("weights", "30,100,1"), Ok(()));
        sim.run(s.as_mut(), 29 + 99 + 10 * 131);
        assert_eq!(
            (sim.sent(0), sim.sent(1), sim.sent(2)),
            (100 + 29 + 300, 100 + 99 + 1000, 100 + 10)
        );
        // Pairs update only the named path; path 2 (which just finished its turn) continues
        // its burst up to its new weight, then rounds of 30:100:69 follow.
        assert_eq!(s.configure("weights", "2 = 69"), Ok(()));
        sim.run(s.as_mut(), 68 + 2 * 199);
        assert_eq!(
            (sim.sent(0), sim.sent(1), sim.sent(2)),
            (429 + 60, 1199 + 200, 110 + 68 + 138)
        );
    }

    #[test]
    fn weight_syntax_errors() {
        let mut s = WeightedRoundRobin::default();
        assert_eq!(s.configure("weights", "3, 2 ,1"), Ok(()));
        assert_eq!(s.weight(PathId(1)), 2);
        assert_eq!(s.weight(PathId(7)), 1);
        assert_eq!(s.configure("weights", "4=5, 0=9"), Ok(()));
        assert_eq!((s.weight(PathId(0)), s.weight(PathId(4))), (9, 5));
        for bad in [
            "0", "1,,2", "a", "1=2,3", "1=0", "x=1", "1=2,1=3", "-1", "1.5",
        ] {
            assert!(s.configure("weights", bad).is_err(), "{bad}");
        }
        // A failed update leaves the table alone.
        assert_eq!(s.weight(PathId(0)), 9);
        assert_eq!(s.configure("weights", ""), Ok(()));
        assert_eq!(s.weight(PathId(0)), 1);
        assert!(s.configure("cwnd_limited", "maybe").is_err());
        assert_eq!(s.configure("cwnd_limited", "Y"), Ok(()));
        assert!(s.cwnd_limited());
        assert!(s.configure("quantum", "1").is_err());
    }

    #[test]
    fn unusable_and_recovering_paths_sit_out() {
        let mut s = wrr("1,1", false);
        let mut paths = [snapshot(0, 10, true), snapshot(1, 10, true)];
        paths[1].state = PathState::Validating;
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        paths[1].state = PathState::Validated;
        paths[1].pto_count = 1;
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        paths[1].pto_count = 0;
        // Path 0 already sent in this round: path 1's turn.
        assert_eq!(pick(s.as_mut(), &paths), Some(1));
        assert_eq!(pick(s.as_mut(), &paths), Some(0));
        let none: [PathSnapshot; 0] = [];
        assert_eq!(pick(s.as_mut(), &none), None);
    }
}
