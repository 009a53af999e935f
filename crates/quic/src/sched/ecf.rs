//! ECF, "Earliest Completion First": Y.-s. Lim, E. M. Nahum, D. Towsley and R. J. Gibbens,
//! "ECF: An MPTCP Path Scheduler to Manage Heterogeneous Paths", ACM CoNEXT 2017,
//! Algorithm 1. (The paper is not among the project's seed texts, so it is paraphrased here
//! rather than quoted.)
//!
//! ECF sends on the fastest path `x_f` (lowest smoothed RTT) whenever its congestion window
//! has room. When it is full, ECF asks whether the data still waiting would finish sooner by
//! waiting for `x_f` than by also using the fastest path that can send, `x_s`:
//!
//! - with `k` the bytes waiting in the connection's send buffer, `n = 1 + k / cwnd_f` is the
//!   number of `x_f` round trips needed for them (the current one included), and
//!   `δ = max(σ_f, σ_s)` allows for RTT variability (σ: the paths' RTT variation);
//! - if `n · RTT_f < (1 + waiting · β) · (RTT_s + δ)`, waiting for `x_f` looks faster; ECF
//!   then waits only if `x_s` would itself be slow to finish its share, that is if
//!   `(k / cwnd_s) · RTT_s ≥ 2 · RTT_f + δ`; it sets `waiting = 1` and sends nothing;
//!   otherwise it sends on `x_s`;
//! - otherwise it sends on `x_s` and clears `waiting`.
//!
//! `waiting` is the algorithm's hysteresis: once ECF decided to wait for the fast path, the
//! bar for switching back to the slow path is raised by the factor `1 + β` (β = 0.25 in the
//! paper, configurable with the key `beta`), so it does not flip between the two decisions
//! on every packet.
//!
//! Units: `k` and the windows are in bytes (their ratio is what the paper's packet counts
//! express), times are in seconds. `k` is [`PendingData::total_bytes`]. The backup rule
//! applies: `x_f` is the fastest usable non-backup path, `x_s` comes from
//! [`preferred_paths`].

use super::{
    Decision, PathSnapshot, PendingData, Scheduler, SchedulerFactory, parse_non_negative,
    preferred_paths, usable_paths,
};
use std::time::Instant;

/// Earliest-completion-first scheduler.
#[derive(Debug)]
pub struct Ecf {
    beta: f64,
    waiting: bool,
}

impl Default for Ecf {
    fn default() -> Self {
        Ecf::new(Ecf::DEFAULT_BETA)
    }
}

impl Ecf {
    /// The paper's default hysteresis parameter β.
    pub const DEFAULT_BETA: f64 = 0.25;

    /// A scheduler with hysteresis parameter `beta` (0.25 in the paper).
    pub fn new(beta: f64) -> Self {
        Ecf {
            beta,
            waiting: false,
        }
    }

    /// True while ECF is in its "waiting for the fastest path" state.
    pub fn is_waiting(&self) -> bool {
        self.waiting
    }

    /// The hysteresis parameter β.
    pub fn beta(&self) -> f64 {
        self.beta
    }
}

impl Scheduler for Ecf {
    fn name(&self) -> &str {
        "ecf"
    }

    fn schedule(
        &mut self,
        _now: Instant,
        paths: &[PathSnapshot],
        pending: &PendingData,
    ) -> Decision {
        // The fastest path, whether or not its window has room.
        let Some(fast) = usable_paths(paths).min_by_key(|p| (p.srtt, p.id)) else {
            return Decision::Wait;
        };
        if fast.can_send {
            return Decision::Send(fast.id);
        }
        // The fastest path that can send (the MPTCP default scheduler's choice).
        let Some(slow) = preferred_paths(paths).min_by_key(|p| (p.srtt, p.id)) else {
            return Decision::Wait;
        };
        let k = pending.total_bytes() as f64;
        let cwnd_f = fast.cwnd.max(1) as f64;
        let cwnd_s = slow.cwnd.max(1) as f64;
        let rtt_f = fast.srtt.as_secs_f64();
        let rtt_s = slow.srtt.as_secs_f64();
        let delta = fast.rttvar.max(slow.rttvar).as_secs_f64();
        let n = 1.0 + k / cwnd_f;
        let waiting = if self.waiting { 1.0 } else { 0.0 };
        if n * rtt_f < (1.0 + waiting * self.beta) * (rtt_s + delta) {
            if (k / cwnd_s) * rtt_s >= 2.0 * rtt_f + delta {
                // Waiting for the fast path completes the transfer earlier.
                self.waiting = true;
                Decision::Wait
            } else {
                Decision::Send(slow.id)
            }
        } else {
            self.waiting = false;
            Decision::Send(slow.id)
        }
    }

    /// Key: `beta`, the hysteresis parameter (a non-negative number).
    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "beta" => {
                self.beta = parse_non_negative(key, value)?;
                Ok(())
            }
            _ => Err(format!("scheduler ecf has no parameter {key}")),
        }
    }
}

/// Builds [`Ecf`] schedulers.
#[derive(Debug, Clone, Copy)]
pub struct EcfFactory {
    /// Hysteresis parameter β of new schedulers.
    pub beta: f64,
}

impl Default for EcfFactory {
    fn default() -> Self {
        EcfFactory {
            beta: Ecf::DEFAULT_BETA,
        }
    }
}

impl SchedulerFactory for EcfFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(Ecf::new(self.beta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::MinRtt;
    use crate::sched::tests::{Sim, snapshot};
    use crate::shared::PathId;
    use std::time::Duration;

    const MSS: u64 = 1200;

    /// A full fast path (10 ms, 10 packets) and a slow path that can send.
    fn paths(slow_rtt_ms: u64, slow_cwnd_packets: u64, rttvar_ms: u64) -> [PathSnapshot; 2] {
        let mut fast = snapshot(0, 10, false);
        fast.cwnd = 10 * MSS;
        fast.bytes_in_flight = fast.cwnd;
        fast.rttvar = Duration::from_millis(rttvar_ms);
        let mut slow = snapshot(1, slow_rtt_ms, true);
        slow.cwnd = slow_cwnd_packets * MSS;
        slow.bytes_in_flight = 0;
        slow.rttvar = Duration::from_millis(rttvar_ms);
        [fast, slow]
    }

    fn pending(packets: u64) -> PendingData {
        PendingData {
            new_stream_bytes: packets * MSS,
            ..PendingData::default()
        }
    }

    #[test]
    fn fastest_path_first() {
        let now = Instant::now();
        let mut s = Ecf::default();
        let [mut fast, slow] = paths(100, 10, 1);
        fast.can_send = true;
        assert_eq!(
            s.schedule(now, &[fast, slow], &pending(1)),
            Decision::Send(PathId(0))
        );
    }

    #[test]
    fn waits_for_the_fast_path_when_that_finishes_sooner() {
        let now = Instant::now();
        let mut s = Ecf::default();
        // k = 10 packets: n = 2, 2 * 10 ms = 20 ms < 100 + 1 ms; and the slow path would
        // need (10 / 10) * 100 ms = 100 ms >= 2 * 10 + 1 ms: wait.
        assert_eq!(
            s.schedule(now, &paths(100, 10, 1), &pending(10)),
            Decision::Wait
        );
        assert!(s.is_waiting());
    }

    #[test]
    fn uses_the_slow_path_for_a_large_backlog() {
        let now = Instant::now();
        let mut s = Ecf::default();
        // k = 1000 packets: n = 101 round trips of 10 ms = 1.01 s > 101 ms: use both paths.
        assert_eq!(
            s.schedule(now, &paths(100, 10, 1), &pending(1000)),
            Decision::Send(PathId(1))
        );
        assert!(!s.is_waiting());
    }

    #[test]
    fn uses_a_slow_path_that_finishes_its_share_in_time() {
        let now = Instant::now();
        let mut s = Ecf::default();
        // Waiting would be faster (n = 1.1: 11 ms < 31 ms), but the slow path's share takes
        // (1 / 100) * 30 ms = 0.3 ms < 21 ms: no reason to leave it idle.
        assert_eq!(
            s.schedule(now, &paths(30, 100, 1), &pending(1)),
            Decision::Send(PathId(1))
        );
        assert!(!s.is_waiting());
    }

    #[test]
    fn hysteresis_keeps_waiting() {
        let now = Instant::now();
        let p = paths(100, 10, 1);
        // k = 100 packets: n = 11, 110 ms. Not below 101 ms, but below 1.25 * 101 ms.
        let mut fresh = Ecf::default();
        assert_eq!(
            fresh.schedule(now, &p, &pending(100)),
            Decision::Send(PathId(1))
        );
        let mut waiting = Ecf::default();
        assert_eq!(waiting.schedule(now, &p, &pending(10)), Decision::Wait);
        assert_eq!(waiting.schedule(now, &p, &pending(100)), Decision::Wait);
        // Past the raised bar (k = 200: 210 ms > 126.25 ms) it switches and clears the state.
        assert_eq!(
            waiting.schedule(now, &p, &pending(200)),
            Decision::Send(PathId(1))
        );
        assert!(!waiting.is_waiting());
        assert_eq!(
            waiting.schedule(now, &p, &pending(100)),
            Decision::Send(PathId(1))
        );
        // Without hysteresis the waiting state makes no difference.
        let mut no_beta = Ecf::default();
        assert_eq!(no_beta.configure("beta", "0"), Ok(()));
        assert_eq!(no_beta.schedule(now, &p, &pending(10)), Decision::Wait);
        assert_eq!(
            no_beta.schedule(now, &p, &pending(100)),
            Decision::Send(PathId(1))
        );
        assert!(no_beta.configure("beta", "-1").is_err());
        assert!(no_beta.configure("gamma", "1").is_err());
    }

    #[test]
    fn rtt_variation_widens_the_slow_side() {
        let now = Instant::now();
        // k = 100 packets: n * RTT_f = 110 ms. With δ = 1 ms the slow side is 101 ms (send on
        // the slow path); with δ = 20 ms it is 120 ms and waiting wins.
        let mut s = Ecf::default();
        assert_eq!(
            s.schedule(now, &paths(100, 10, 1), &pending(100)),
            Decision::Send(PathId(1))
        );
        assert_eq!(
            s.schedule(now, &paths(100, 10, 20), &pending(100)),
            Decision::Wait
        );
    }

    #[test]
    fn short_transfer_finishes_sooner_than_min_rtt() {
        // 30 packets over a 10 ms path and a 200 ms path, 10-packet windows. MinRtt puts
        // packets on the slow path and waits 200 ms for them; ECF keeps them on the fast path.
        let bytes = 30 * MSS;
        let mut sim = Sim::new(&[(10, 10), (200, 10)]);
        let ecf_time = sim.transfer(&mut Ecf::default(), bytes);
        assert_eq!(sim.sent(1), 0);
        let mut sim = Sim::new(&[(10, 10), (200, 10)]);
        let minrtt_time = sim.transfer(&mut MinRtt, bytes);
        assert!(sim.sent(1) > 0);
        assert_eq!(ecf_time, Duration::from_millis(30));
        assert!(minrtt_time >= Duration::from_millis(200));
    }

    #[test]
    fn long_transfer_uses_both_paths() {
        let mut sim = Sim::new(&[(10, 10), (50, 10)]);
        sim.transfer(&mut Ecf::default(), 2000 * MSS);
        assert!(sim.sent(1) > 50, "slow path sent {}", sim.sent(1));
    }

    #[test]
    fn no_path_no_packet() {
        let now = Instant::now();
        let mut s = Ecf::default();
        assert_eq!(s.schedule(now, &[], &pending(1)), Decision::Wait);
        let [fast, mut slow] = paths(100, 10, 1);
        slow.can_send = false;
        assert_eq!(s.schedule(now, &[fast, slow], &pending(1)), Decision::Wait);
    }
}
