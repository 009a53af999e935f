//! BLEST, "Blocking Estimation": S. Ferlin, Ö. Alay, O. Mehani and R. Boreli, "BLEST:
//! Blocking Estimation-based MPTCP Scheduler for Heterogeneous Networks", IFIP Networking
//! 2016. (The paper is not among the project's seed texts, so it is paraphrased here rather
//! than quoted.)
//!
//! Packets sent on a slow path occupy the connection-level send window until they are
//! acknowledged, one slow RTT later; meanwhile the fast path may want that room. If it runs
//! out, the fast path is blocked behind the slow path's packets (head-of-line blocking at the
//! receiver, which cannot free its window before the holes fill). BLEST sends on the fastest
//! path `x_f` while it has room; when it is full and a slower path `x_s` could send, it
//! estimates how much the fast path would send during one slow RTT,
//!
//! `X = MSS_f · (CWND_f + (rtts − 1) / 2) · rtts`, with `rtts = RTT_s / RTT_f`
//!
//! (the fast window growing by one packet per round trip, as in congestion avoidance, with
//! `CWND_f` in packets), and skips the slow path (waits) if
//!
//! `X · λ > |SW| − MSS_s · (inflight_s + 1)`,
//!
//! that is if the window left once the slow path holds its packets in flight plus this one
//! could not carry what the fast path will want to send. λ scales the estimate to correct its
//! errors: it grows by `lambda_up` whenever BLEST sees the connection blocked by its send
//! window and shrinks by `lambda_down` otherwise, within `[lambda_min, lambda_max]`, at most
//! once per fast-path RTT.
//!
//! Here the send window |SW| (MPTCP's meta-level window) is the peer's connection-level flow
//! control credit [`PendingData::flow_credit`] plus the bytes in flight on every path: like
//! TCP's send window it counts from the oldest unacknowledged byte. "Blocked" means stream
//! data is waiting but the credit is below one full packet of the fast path. Without a credit
//! (`flow_credit == None`) nothing at the sender can block the fast path and BLEST sends on
//! `x_s` as the minimum-RTT scheduler would. MSS is the path's [`PathSnapshot::mtu`].
//!
//! The λ defaults (start 1.2, bounds 1.0 and 1.3, +0.04 when blocked, −0.01 otherwise)
//! follow the authors' implementation in the Linux MPTCP kernel; all are configurable.

use super::{
    Decision, PathSnapshot, PendingData, Scheduler, SchedulerFactory, parse_non_negative,
    preferred_paths, usable_paths,
};
use std::time::Instant;

/// BLEST's tunables.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlestParams {
    /// Initial scaling factor λ.
    pub lambda: f64,
    /// Smallest λ.
    pub lambda_min: f64,
    /// Largest λ.
    pub lambda_max: f64,
    /// Increase of λ after a send-window block.
    pub lambda_up: f64,
    /// Decrease of λ when no block was seen.
    pub lambda_down: f64,
}

impl Default for BlestParams {
    fn default() -> Self {
        BlestParams {
            lambda: 1.2,
            lambda_min: 1.0,
            lambda_max: 1.3,
            lambda_up: 0.04,
            lambda_down: 0.01,
        }
    }
}

/// Blocking-estimation scheduler.
#[derive(Debug)]
pub struct Blest {
    params: BlestParams,
    lambda: f64,
    last_lambda_update: Option<Instant>,
}

impl Default for Blest {
    fn default() -> Self {
        Blest::new(BlestParams::default())
    }
}

impl Blest {
    /// A scheduler with the given tunables.
    pub fn new(params: BlestParams) -> Self {
        Blest {
            lambda: params.lambda.clamp(params.lambda_min, params.lambda_max),
            params,
            last_lambda_update: None,
        }
    }

    /// The current scaling factor λ.
    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    /// BLEST's estimate `X` of the bytes the fast path sends during one RTT of the slow path.
    pub fn fast_bytes_during_slow_rtt(fast: &PathSnapshot, slow: &PathSnapshot) -> f64 {
        let mss_f = f64::from(fast.mtu.max(1));
        let cwnd_f = fast.cwnd as f64 / mss_f;
        let rtt_f = fast.srtt.as_secs_f64().max(1e-6);
        let rtts = slow.srtt.as_secs_f64() / rtt_f;
        mss_f * (cwnd_f + (rtts - 1.0) / 2.0) * rtts
    }

    /// The room `|SW| − MSS_s · (inflight_s + 1)` the send window keeps for the fast path if
    /// the next packet goes on `slow`, or `None` without a flow-control credit.
    pub fn window_left(
        paths: &[PathSnapshot],
        slow: &PathSnapshot,
        pending: &PendingData,
    ) -> Option<f64> {
        let credit = pending.flow_credit?;
        let in_flight: u64 = paths.iter().map(|p| p.bytes_in_flight).sum();
        let window = credit.saturating_add(in_flight) as f64;
        Some(window - (slow.bytes_in_flight as f64 + f64::from(slow.mtu)))
    }

    fn update_lambda(&mut self, now: Instant, fast: &PathSnapshot, pending: &PendingData) {
        if let Some(last) = self.last_lambda_update
            && now.saturating_duration_since(last) < fast.srtt
        {
            return;
        }
        let blocked = pending.new_stream_bytes > 0
            && pending
                .flow_credit
                .is_some_and(|credit| credit < u64::from(fast.mtu));
        self.lambda = if blocked {
            self.lambda + self.params.lambda_up
        } else {
            self.lambda - self.params.lambda_down
        }
        .clamp(self.params.lambda_min, self.params.lambda_max);
        self.last_lambda_update = Some(now);
    }
}

impl Scheduler for Blest {
    fn name(&self) -> &str {
        "blest"
    }

    fn schedule(
        &mut self,
        now: Instant,
        paths: &[PathSnapshot],
        pending: &PendingData,
    ) -> Decision {
        let Some(fast) = usable_paths(paths).min_by_key(|p| (p.srtt, p.id)) else {
            return Decision::Wait;
        };
        if fast.can_send {
            return Decision::Send(fast.id);
        }
        let Some(slow) = preferred_paths(paths).min_by_key(|p| (p.srtt, p.id)) else {
            return Decision::Wait;
        };
        self.update_lambda(now, fast, pending);
        let Some(left) = Self::window_left(paths, slow, pending) else {
            return Decision::Send(slow.id);
        };
        if Self::fast_bytes_during_slow_rtt(fast, slow) * self.lambda > left {
            Decision::Wait
        } else {
            Decision::Send(slow.id)
        }
    }

    /// Keys: `lambda` (sets the current λ, clamped to the bounds), `lambda_min`,
    /// `lambda_max`, `lambda_up`, `lambda_down` (non-negative numbers; the bounds must stay
    /// ordered).
    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        let v = parse_non_negative(key, value)?;
        let mut params = self.params;
        match key {
            "lambda" => params.lambda = v,
            "lambda_min" => params.lambda_min = v,
            "lambda_max" => params.lambda_max = v,
            "lambda_up" => params.lambda_up = v,
            "lambda_down" => params.lambda_down = v,
            _ => return Err(format!("scheduler blest has no parameter {key}")),
        }
        if params.lambda_min > params.lambda_max {
            return Err(format!(
                "{key}: lambda_min {} above lambda_max {}",
                params.lambda_min, params.lambda_max
            ));
        }
        self.params = params;
        if key == "lambda" {
            self.lambda = v;
        }
        self.lambda = self.lambda.clamp(params.lambda_min, params.lambda_max);
        Ok(())
    }
}

/// Builds [`Blest`] schedulers.
#[derive(Debug, Default, Clone, Copy)]
pub struct BlestFactory {
    /// Tunables of new schedulers.
    pub params: BlestParams,
}

impl SchedulerFactory for BlestFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(Blest::new(self.params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::snapshot;
    use crate::shared::PathId;
    use std::time::Duration;

    const MSS: u64 = 1200;

    /// A full fast path (10 ms, 10 packets in flight) and an idle 100 ms path.
    fn paths() -> [PathSnapshot; 2] {
        let mut fast = snapshot(0, 10, false);
        fast.cwnd = 10 * MSS;
        fast.bytes_in_flight = 10 * MSS;
        let mut slow = snapshot(1, 100, true);
        slow.cwnd = 10 * MSS;
        slow.bytes_in_flight = 0;
        [fast, slow]
    }

    fn pending(credit: Option<u64>) -> PendingData {
        PendingData {
            new_stream_bytes: 1_000_000,
            flow_credit: credit,
            ..PendingData::default()
        }
    }

    fn fixed_lambda(lambda: f64) -> Blest {
        Blest::new(BlestParams {
            lambda,
            lambda_min: lambda,
            lambda_max: lambda,
            ..BlestParams::default()
        })
    }

    #[test]
    fn estimate_follows_the_formula() {
        let [fast, slow] = paths();
        // rtts = 10; X = 1200 * (10 + 4.5) * 10 = 174 000 bytes.
        let x = Blest::fast_bytes_during_slow_rtt(&fast, &slow);
        assert!((x - 174_000.0).abs() < 1e-6, "{x}");
        // Window: 100 000 credit + 12 000 in flight, minus 1200 for the slow packet.
        let left = Blest::window_left(
            &[fast.clone(), slow.clone()],
            &slow,
            &pending(Some(100_000)),
        );
        assert_eq!(left, Some(110_800.0));
        assert_eq!(
            Blest::window_left(&[fast, slow.clone()], &slow, &pending(None)),
            None
        );
    }

    #[test]
    fn blocks_the_slow_path_when_the_window_would_run_out() {
        let now = Instant::now();
        let p = paths();
        let mut s = fixed_lambda(1.0);
        // X = 174 000 > 110 800: the fast path would be blocked, so wait for it.
        assert_eq!(s.schedule(now, &p, &pending(Some(100_000))), Decision::Wait);
        // Right at the boundary: room for X exactly is enough.
        let credit = 174_000 + 1200 - 12_000;
        assert_eq!(
            s.schedule(now, &p, &pending(Some(credit))),
            Decision::Send(PathId(1))
        );
        assert_eq!(
            s.schedule(now, &p, &pending(Some(credit - 1))),
            Decision::Wait
        );
        // λ scales the estimate: with λ = 1.2 the same window no longer suffices.
        let mut s = fixed_lambda(1.2);
        assert_eq!(s.schedule(now, &p, &pending(Some(credit))), Decision::Wait);
        assert_eq!(
            s.schedule(now, &p, &pending(Some(1_000_000))),
            Decision::Send(PathId(1))
        );
    }

    #[test]
    fn slow_path_packets_in_flight_count_against_the_window() {
        let now = Instant::now();
        let [fast, mut slow] = paths();
        let mut s = fixed_lambda(1.0);
        // The window that just fits X with an idle slow path (see the boundary above).
        let credit = 174_000 + 1200 - 12_000;
        let p = [fast.clone(), slow.clone()];
        assert_eq!(
            s.schedule(now, &p, &pending(Some(credit))),
            Decision::Send(PathId(1))
        );
        // Same window, but 5 of its packets now sit on the slow path (they came out of the
        // credit): they hold their room for a whole slow RTT, so the fast path would block.
        slow.bytes_in_flight = 5 * MSS;
        let p = [fast.clone(), slow.clone()];
        assert_eq!(
            s.schedule(now, &p, &pending(Some(credit - 5 * MSS))),
            Decision::Wait
        );
        // A bigger fast window means more bytes to protect.
        let mut big = fast;
        big.cwnd = 20 * MSS;
        slow.bytes_in_flight = 0;
        assert_eq!(
            s.schedule(now, &[big, slow], &pending(Some(credit))),
            Decision::Wait
        );
    }

    #[test]
    fn without_a_window_it_acts_like_min_rtt() {
        let now = Instant::now();
        let mut s = Blest::default();
        let [mut fast, slow] = paths();
        assert_eq!(
            s.schedule(now, &[fast.clone(), slow.clone()], &pending(None)),
            Decision::Send(PathId(1))
        );
        fast.can_send = true;
        assert_eq!(
            s.schedule(now, &[fast, slow], &pending(Some(0))),
            Decision::Send(PathId(0))
        );
        assert_eq!(s.schedule(now, &[], &pending(None)), Decision::Wait);
    }

    #[test]
    fn lambda_adapts_once_per_fast_rtt() {
        let t0 = Instant::now();
        let p = paths();
        let mut s = Blest::default();
        assert!((s.lambda() - 1.2).abs() < 1e-9);
        // Blocked: credit below one packet while data waits.
        s.schedule(t0, &p, &pending(Some(100)));
        assert!((s.lambda() - 1.24).abs() < 1e-9);
        // Within the same fast RTT: no further change.
        s.schedule(t0 + Duration::from_millis(5), &p, &pending(Some(100)));
        assert!((s.lambda() - 1.24).abs() < 1e-9);
        s.schedule(t0 + Duration::from_millis(10), &p, &pending(Some(100)));
        assert!((s.lambda() - 1.28).abs() < 1e-9);
        s.schedule(t0 + Duration::from_millis(20), &p, &pending(Some(100)));
        assert!((s.lambda() - 1.3).abs() < 1e-9, "capped at lambda_max");
        // Not blocked: λ decreases, down to lambda_min.
        for i in 3..40 {
            s.schedule(
                t0 + Duration::from_millis(10 * i),
                &p,
                &pending(Some(1_000_000)),
            );
        }
        assert!((s.lambda() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn configuration() {
        let mut s = Blest::default();
        assert_eq!(s.configure("lambda", "1.25"), Ok(()));
        assert!((s.lambda() - 1.25).abs() < 1e-9);
        assert_eq!(s.configure("lambda", "2"), Ok(()));
        assert!((s.lambda() - 1.3).abs() < 1e-9, "clamped");
        assert_eq!(s.configure("lambda_max", "3"), Ok(()));
        assert!(s.configure("lambda_min", "4").is_err());
        assert!(s.configure("lambda_up", "-0.1").is_err());
        assert!(s.configure("mu", "1").is_err());
        assert_eq!(s.configure("lambda_down", "0.5"), Ok(()));
    }
}
