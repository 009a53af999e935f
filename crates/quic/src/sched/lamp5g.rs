//! LAMP5G's link-throughput-aware path-ranking scheduler ("LAMP5G: A Link-Aware Multipath
//! QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks", Sections
//! III-A and IV-A).
//!
//! Each path `i` is scored `min(cwnd_i (1 − p_i) / RTT_i, T_i)`: the transport layer's
//! estimated loss-free bandwidth (congestion window in bytes, loss rate, smoothed RTT in
//! seconds, so bytes per second) capped by the link layer's predicted throughput `T_i`
//! ([`PathSnapshot::predicted_throughput`], bit/s, divided by 8). Without a prediction the
//! transport term alone is the score (see [`PathSnapshot::estimated_bandwidth`]).
//!
//! Paths are ranked by score, best first, and each packet goes on the highest-ranked path
//! that can send: the scheduler keeps filling the best path and spills to the next ranked
//! paths only while the better ones have no congestion-window room. The ranking is frozen
//! between re-ranking events, so small drifts of the scores do not move traffic around (which
//! would reorder packets across paths). It is recomputed when the set of paths changes (or a
//! path's status does) and on the paper's events, each with a configurable threshold
//! ([`Lamp5gThresholds`], keys of [`Scheduler::configure`]):
//!
//! - `rtt_change` (default 0.25): a path's smoothed RTT moved by more than this fraction of
//!   its value at the last ranking. The smoothed RTT is an average with gain 1/8 (RFC 9002),
//!   so one outlier sample moves it little and a 25 % change means conditions really changed;
//!   a quarter of the RTT also exceeds the usual RTT variation of a stable path.
//! - `loss_change` (default 0.05): the loss rate moved by more than 5 percentage points from
//!   its value at the last ranking. The score scales with `1 − p`, so 5 points shift it by
//!   about 5 % or more, the order of RTT noise; smaller moves cannot reorder paths reliably.
//! - `throughput_drop` (default 0.3): the predicted throughput fell more than 30 % below its
//!   highest value since the last ranking (a "sudden drop", a blockage or a handover
//!   starting). Throughput predictors err by tens of percent on stable links, so smaller
//!   dips would re-rank on noise. Rises do not re-rank, as in the paper.
//! - `cwnd_drop` (default 0.3): the congestion window fell more than 30 % below its largest
//!   value since the last ranking. CUBIC's multiplicative decrease (β = 0.7) is exactly 30 %
//!   and NewReno's is 50 %, so every loss reaction of the usual controllers counts as
//!   "significant", while window wobbles of rate-based controllers do not.
//!
//! A change of exactly the threshold does not trigger; a threshold of 0 re-ranks on any
//! change. Congestion events and predicted-throughput updates reported through
//! [`Scheduler::on_path_event`] are checked against the same thresholds.
//!
//! The scheduler keeps its ranking in a buffer it reuses, so deciding allocates nothing once
//! the path set is stable.
//
//= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section IV-A
//# The scheduler then ranks each path using the minimum of the transport-layer estimate and
//# the predicted throughput:

use super::{
    Decision, PathEvent, PathSnapshot, PendingData, Scheduler, SchedulerFactory, parse_fraction,
};
use crate::shared::PathId;
use std::time::{Duration, Instant};

/// When LAMP5G re-ranks its paths; see the module documentation for the defaults' rationale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lamp5gThresholds {
    /// Relative change of a path's smoothed RTT.
    pub rtt_change: f64,
    /// Absolute change of a path's loss rate (0.0 to 1.0).
    pub loss_change: f64,
    /// Relative drop of a path's predicted throughput below its peak since the last ranking.
    pub throughput_drop: f64,
    /// Relative drop of a path's congestion window below its peak since the last ranking.
    pub cwnd_drop: f64,
}

impl Default for Lamp5gThresholds {
    fn default() -> Self {
        Lamp5gThresholds {
            rtt_change: 0.25,
            loss_change: 0.05,
            throughput_drop: 0.3,
            cwnd_drop: 0.3,
        }
    }
}

/// One path in the ranking, with the values its triggers compare against.
#[derive(Debug, Clone, Copy)]
struct Ranked {
    id: PathId,
    score: f64,
    backup: bool,
    srtt: Duration,
    loss_rate: f64,
    peak_throughput: Option<u64>,
    peak_cwnd: u64,
}

/// LAMP5G path-ranking scheduler.
#[derive(Debug, Default)]
pub struct Lamp5g {
    thresholds: Lamp5gThresholds,
    /// Usable paths, best score first.
    ranking: Vec<Ranked>,
    /// Re-rank before the next decision.
    dirty: bool,
    rerankings: u64,
}

impl Lamp5g {
    /// A scheduler with the given re-ranking thresholds.
    pub fn new(thresholds: Lamp5gThresholds) -> Self {
        Lamp5g {
            thresholds,
            ..Self::default()
        }
    }

    /// The current ranking, best first, with each path's score in bytes per second.
    pub fn ranking(&self) -> impl Iterator<Item = (PathId, f64)> + '_ {
        self.ranking.iter().map(|r| (r.id, r.score))
    }

    /// How many times the paths were ranked.
    pub fn rerankings(&self) -> u64 {
        self.rerankings
    }

    /// The re-ranking thresholds.
    pub fn thresholds(&self) -> Lamp5gThresholds {
        self.thresholds
    }

    fn rerank(&mut self, paths: &[PathSnapshot]) {
        self.ranking.clear();
        self.ranking
            .extend(paths.iter().filter(|p| p.is_usable()).map(|p| Ranked {
                id: p.id,
                score: p.estimated_bandwidth(),
                backup: p.is_backup(),
                srtt: p.srtt,
                loss_rate: p.loss_rate,
                peak_throughput: p.predicted_throughput,
                peak_cwnd: p.cwnd,
            }));
        self.ranking
            .sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        self.dirty = false;
        self.rerankings += 1;
    }

    /// Updates the peaks and tells whether a re-ranking event occurred.
    fn needs_rerank(&mut self, paths: &[PathSnapshot]) -> bool {
        let th = self.thresholds;
        let mut usable = 0;
        let mut event = false;
        for p in paths.iter().filter(|p| p.is_usable()) {
            usable += 1;
            let Some(r) = self.ranking.iter_mut().find(|r| r.id == p.id) else {
                return true;
            };
            if r.backup != p.is_backup() {
                event = true;
            }
            //= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section III-A
            //# The scheduler reevaluates path rankings when significant events occur,
            //# including: (1) Changes in RTT or loss rate: These delay-based metrics indicate
            //# evolving path conditions that may reduce the suitability of the current path.
            let base = r.srtt.as_secs_f64().max(1e-6);
            if (p.srtt.as_secs_f64() - base).abs() > th.rtt_change * base
                || (p.loss_rate - r.loss_rate).abs() > th.loss_change
            {
                event = true;
            }
            //# (2) Sudden drops in predicted link layer throughput: This signals
            //# environment-related disruption of the wireless channel, prompting the scheduler
            //# to avoid the affected path.
            match (r.peak_throughput, p.predicted_throughput) {
                (Some(peak), Some(now)) => {
                    r.peak_throughput = Some(peak.max(now));
                    if (now as f64) < peak as f64 * (1.0 - th.throughput_drop) {
                        event = true;
                    }
                }
                // A prediction appeared or went away: the score's nature changed.
                (None, Some(_)) | (Some(_), None) => event = true,
                (None, None) => {}
            }
            //# (3) Significant congestion window reduction: This reflects reduced available
            //# bandwidth and also helps guard against false positives from throughput
            //# prediction.
            r.peak_cwnd = r.peak_cwnd.max(p.cwnd);
            if (p.cwnd as f64) < r.peak_cwnd as f64 * (1.0 - th.cwnd_drop) {
                event = true;
            }
        }
        event || usable != self.ranking.len()
    }
}

impl Scheduler for Lamp5g {
    fn name(&self) -> &str {
        "lamp5g"
    }

    fn schedule(
        &mut self,
        _now: Instant,
        paths: &[PathSnapshot],
        _pending: &PendingData,
    ) -> Decision {
        if self.dirty || self.needs_rerank(paths) {
            self.rerank(paths);
        }
        //= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section III-A
        //# To mitigate this issue, our scheduler continues to transmit packets over the
        //# highest-ranked available path as long as its ranking remains stable.
        //
        //= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section IV-A
        //# However, our scheduling strategy restricts the amount of data transmitted on each
        //# path by its available congestion window.
        let can_send = |id: PathId| paths.iter().any(|p| p.id == id && p.can_send);
        let any_available = self.ranking.iter().any(|r| !r.backup && can_send(r.id));
        self.ranking
            .iter()
            .find(|r| r.backup != any_available && can_send(r.id))
            .map_or(Decision::Wait, |r| Decision::Send(r.id))
    }

    fn on_path_event(&mut self, _now: Instant, event: &PathEvent) {
        match event {
            PathEvent::Opened(_)
            | PathEvent::Validated(_)
            | PathEvent::Abandoned(_)
            | PathEvent::StatusChanged { .. } => self.dirty = true,
            PathEvent::CongestionEvent {
                cwnd_before,
                cwnd_after,
                ..
            } => {
                if (*cwnd_after as f64) < *cwnd_before as f64 * (1.0 - self.thresholds.cwnd_drop) {
                    self.dirty = true;
                }
            }
            PathEvent::PredictedThroughput {
                path,
                bits_per_second,
            } => {
                let drop = self.thresholds.throughput_drop;
                if let Some(r) = self.ranking.iter_mut().find(|r| r.id == *path) {
                    match r.peak_throughput {
                        Some(peak) if (*bits_per_second as f64) < peak as f64 * (1.0 - drop) => {
                            self.dirty = true;
                        }
                        Some(peak) => r.peak_throughput = Some(peak.max(*bits_per_second)),
                        None => self.dirty = true,
                    }
                }
            }
        }
    }

    /// Keys: `rtt_change`, `loss_change`, `throughput_drop`, `cwnd_drop` (fractions in
    /// [0, 1); see the module documentation).
    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        let v = parse_fraction(key, value)?;
        match key {
            "rtt_change" => self.thresholds.rtt_change = v,
            "loss_change" => self.thresholds.loss_change = v,
            "throughput_drop" => self.thresholds.throughput_drop = v,
            "cwnd_drop" => self.thresholds.cwnd_drop = v,
            _ => return Err(format!("scheduler lamp5g has no parameter {key}")),
        }
        Ok(())
    }
}

/// Builds [`Lamp5g`] schedulers.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lamp5gFactory {
    /// Re-ranking thresholds of new schedulers.
    pub thresholds: Lamp5gThresholds,
}

impl SchedulerFactory for Lamp5gFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(Lamp5g::new(self.thresholds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::PathStatus;
    use crate::sched::tests::{Sim, snapshot};

    const MSS: u64 = 1200;

    fn path(id: u32, rtt_ms: u64, cwnd_packets: u64, predicted_bps: Option<u64>) -> PathSnapshot {
        let mut p = snapshot(id, rtt_ms, true);
        p.cwnd = cwnd_packets * MSS;
        p.bytes_in_flight = 0;
        p.predicted_throughput = predicted_bps;
        p
    }

    fn decide(s: &mut Lamp5g, paths: &[PathSnapshot]) -> Decision {
        s.schedule(Instant::now(), paths, &PendingData::default())
    }

    #[test]
    fn prefers_the_larger_minimum() {
        let mut s = Lamp5g::default();
        // Path 0: transport 40 * 1200 B / 10 ms = 4.8 MB/s, predicted 8 Mbit/s = 1 MB/s.
        // Path 1: transport 100 * 1200 B / 60 ms = 2 MB/s, predicted 40 Mbit/s = 5 MB/s.
        // Scores 1 MB/s and 2 MB/s: path 1 wins although path 0 has the bigger transport term.
        let paths = [
            path(0, 10, 40, Some(8_000_000)),
            path(1, 60, 100, Some(40_000_000)),
        ];
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
        let ranking: Vec<_> = s.ranking().collect();
        assert_eq!(ranking.len(), 2);
        assert_eq!(ranking[0].0, PathId(1));
        assert!((ranking[0].1 - 2_000_000.0).abs() < 1e-3);
        assert!((ranking[1].1 - 1_000_000.0).abs() < 1e-3);
    }

    #[test]
    fn ignores_an_over_estimated_prediction() {
        let mut s = Lamp5g::default();
        // Path 0's predictor claims 1 Gbit/s, but its transport term is 10 * 1200 B / 50 ms
        // = 240 kB/s; path 1 has 480 kB/s and no prediction. The minimum keeps path 0 second.
        let paths = [path(0, 50, 10, Some(1_000_000_000)), path(1, 50, 20, None)];
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
        let scores: Vec<_> = s.ranking().map(|(_, score)| score).collect();
        assert!((scores[1] - 240_000.0).abs() < 1e-3, "{scores:?}");
    }

    #[test]
    fn under_estimated_best_path_keeps_carrying_traffic() {
        // Path 0 is truly the best (40 packets per 10 ms = 4.8 MB/s) but its predictor says
        // 1 Mbit/s, ranking it below path 1 (10 packets per 50 ms = 240 kB/s). Path 1's
        // window fills quickly, and the spill goes to path 0, whose window stays open: path 0
        // still carries nearly all the traffic.
        let mut sim = Sim::new(&[(10, 40), (50, 10)]);
        sim.paths[0].snap.predicted_throughput = Some(1_000_000);
        let mut s = Lamp5g::default();
        assert_eq!(sim.run(&mut s, 10_000), 10_000);
        let ranking: Vec<_> = s.ranking().map(|(id, _)| id).collect();
        assert_eq!(ranking, vec![PathId(1), PathId(0)]);
        assert!(
            sim.sent(0) > 9 * sim.sent(1),
            "path 0 {} vs path 1 {}",
            sim.sent(0),
            sim.sent(1)
        );
        // Path 1 is still used to the full extent of its window: 10 packets per 50 ms.
        let elapsed = (sim.now - sim.start).as_secs_f64();
        let expected = elapsed / 0.05 * 10.0;
        assert!(
            (sim.sent(1) as f64) >= expected - 10.0,
            "{} < {expected}",
            sim.sent(1)
        );
    }

    #[test]
    fn fills_the_best_path_before_spilling() {
        let mut s = Lamp5g::default();
        let mut paths = [path(0, 10, 40, None), path(1, 50, 10, None)];
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        paths[0].can_send = false;
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
        paths[1].can_send = false;
        assert_eq!(decide(&mut s, &paths), Decision::Wait);
    }

    /// Path 0 slightly ahead of path 1: 4.8 MB/s against 4.0 MB/s.
    fn close_pair() -> [PathSnapshot; 2] {
        [path(0, 10, 40, None), path(1, 12, 40, None)]
    }

    #[test]
    fn ranking_stays_stable_under_small_rtt_changes() {
        let mut s = Lamp5g::default();
        let mut paths = close_pair();
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        // +20 %: path 0's score falls to path 1's 4.0 MB/s; not significant, no re-rank.
        paths[0].srtt = Duration::from_millis(12);
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        assert_eq!(s.rerankings(), 1);
        // +31 %: a significant RTT change, re-rank: path 1 (4.0 MB/s > 3.7 MB/s) now leads.
        paths[0].srtt = Duration::from_micros(13_100);
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
        assert_eq!(s.rerankings(), 2);
    }

    #[test]
    fn reranks_on_loss_change() {
        let mut s = Lamp5g::default();
        let mut paths = close_pair();
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        paths[0].loss_rate = 0.04;
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        // 25 % loss: 4.8 * 0.75 = 3.6 MB/s < 4.0 MB/s.
        paths[0].loss_rate = 0.25;
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
    }

    #[test]
    fn reranks_on_a_sudden_throughput_drop() {
        let mut s = Lamp5g::default();
        let mut paths = close_pair();
        // 40 Mbit/s = 5 MB/s: path 0's score stays its transport term, 4.8 MB/s.
        paths[0].predicted_throughput = Some(40_000_000);
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        // A slow decline to 30 Mbit/s (3.75 MB/s, below path 1's 4 MB/s) stays within 30 %
        // of the peak: not a sudden drop, the ranking holds.
        paths[0].predicted_throughput = Some(30_000_000);
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        assert_eq!(s.rerankings(), 1);
        // Blockage: down to 10 Mbit/s, re-rank.
        paths[0].predicted_throughput = Some(10_000_000);
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
        assert_eq!(s.rerankings(), 2);
        // The peak restarts from the new ranking: a recovery is no drop and does not re-rank.
        paths[0].predicted_throughput = Some(12_500_000);
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
        assert_eq!(s.rerankings(), 2);
    }

    #[test]
    fn reranks_on_a_significant_cwnd_reduction() {
        let mut s = Lamp5g::default();
        let mut paths = close_pair();
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        // The window grows (no re-rank), then a CUBIC-style reduction by 30 % from the peak
        // is exactly the threshold: still no re-rank...
        paths[0].cwnd = 100 * MSS;
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        paths[0].cwnd = 70 * MSS;
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        assert_eq!(s.rerankings(), 1);
        // ...a halving is: 50 packets / 10 ms = 6 MB/s, still first.
        paths[0].cwnd = 50 * MSS;
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(0)));
        assert_eq!(s.rerankings(), 2);
        // Halved again (25 packets: 3 MB/s): path 1 leads.
        paths[0].cwnd = 25 * MSS;
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
    }

    #[test]
    fn events_trigger_reranking() {
        let mut s = Lamp5g::default();
        let paths = close_pair();
        let now = Instant::now();
        decide(&mut s, &paths);
        s.on_path_event(
            now,
            &PathEvent::CongestionEvent {
                path: PathId(0),
                cwnd_before: 100,
                cwnd_after: 80,
            },
        );
        decide(&mut s, &paths);
        assert_eq!(s.rerankings(), 1);
        s.on_path_event(
            now,
            &PathEvent::CongestionEvent {
                path: PathId(0),
                cwnd_before: 100,
                cwnd_after: 50,
            },
        );
        decide(&mut s, &paths);
        assert_eq!(s.rerankings(), 2);
        s.on_path_event(now, &PathEvent::Validated(PathId(2)));
        decide(&mut s, &paths);
        assert_eq!(s.rerankings(), 3);
        s.on_path_event(
            now,
            &PathEvent::PredictedThroughput {
                path: PathId(1),
                bits_per_second: 1_000_000,
            },
        );
        decide(&mut s, &paths);
        assert_eq!(s.rerankings(), 4, "a first prediction re-ranks");
    }

    #[test]
    fn path_set_and_status_changes_rerank() {
        let mut s = Lamp5g::default();
        let [a, b] = close_pair();
        assert_eq!(
            decide(&mut s, std::slice::from_ref(&b)),
            Decision::Send(PathId(1))
        );
        assert_eq!(
            decide(&mut s, &[a.clone(), b.clone()]),
            Decision::Send(PathId(0))
        );
        let mut backup = a.clone();
        backup.peer_status = Some(PathStatus::Backup);
        assert_eq!(
            decide(&mut s, &[backup.clone(), b.clone()]),
            Decision::Send(PathId(1))
        );
        let mut full = b;
        full.can_send = false;
        assert_eq!(decide(&mut s, &[backup, full]), Decision::Send(PathId(0)));
        assert_eq!(decide(&mut s, &[]), Decision::Wait);
    }

    #[test]
    fn thresholds_are_configurable() {
        let mut s = Lamp5g::default();
        assert_eq!(s.configure("rtt_change", "0.1"), Ok(()));
        let mut paths = close_pair();
        decide(&mut s, &paths);
        paths[0].srtt = Duration::from_millis(13);
        assert_eq!(decide(&mut s, &paths), Decision::Send(PathId(1)));
        assert_eq!(s.thresholds().rtt_change, 0.1);
        for key in ["loss_change", "throughput_drop", "cwnd_drop"] {
            assert_eq!(s.configure(key, "0.5"), Ok(()));
            assert!(s.configure(key, "1.5").is_err());
        }
        assert!(s.configure("alpha", "0.1").is_err());
    }
}
