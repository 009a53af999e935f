//! Fast failover: abandon a path that stopped acknowledging while another path works.

use super::{PathAction, PathManager, PathManagerFactory};
use crate::error::TransportErrorCode;
use crate::sched::{PathEvent, PathSnapshot, PathState, parse_non_negative};
use std::time::{Duration, Instant};

/// When [`FastFailover`] declares a path dead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FastFailoverParams {
    /// A path is dead when it has waited for an acknowledgment
    /// ([`PathSnapshot::awaiting_ack_since`]) for `max(k · srtt, floor)`. Default 3: a
    /// working path acknowledges within about one RTT plus the peer's ack delay.
    pub k: f64,
    /// The lower bound of that wait. Default 100 ms: well above the 25 ms default
    /// max_ack_delay, so short-RTT paths are not declared dead over a delayed
    /// acknowledgment.
    pub floor: Duration,
    /// A path is also dead after this many probe timeouts in a row (RFC 9002 `pto_count`).
    /// Default 2, the count at which schedulers already treat it as potentially failed
    /// ([`crate::sched::POTENTIALLY_FAILED_PTOS`]).
    pub pto_count: u32,
}

impl Default for FastFailoverParams {
    fn default() -> Self {
        FastFailoverParams {
            k: 3.0,
            floor: Duration::from_millis(100),
            pto_count: crate::sched::POTENTIALLY_FAILED_PTOS,
        }
    }
}

impl FastFailoverParams {
    /// How long `path` may wait for an acknowledgment: `max(k · srtt, floor)`.
    pub fn allowed_wait(&self, path: &PathSnapshot) -> Duration {
        path.srtt.mul_f64(self.k).max(self.floor)
    }

    /// When `path` counts as dead if no acknowledgment arrives first, or `None` while
    /// nothing ack-eliciting is in flight on it.
    pub fn deadline(&self, path: &PathSnapshot) -> Option<Instant> {
        path.awaiting_ack_since.map(|t| t + self.allowed_wait(path))
    }

    /// Why `path` is dead at `now`, if it is.
    fn dead(&self, now: Instant, path: &PathSnapshot) -> Option<String> {
        if path.pto_count >= self.pto_count {
            return Some(format!("pto_count {}", path.pto_count));
        }
        let since = path.awaiting_ack_since?;
        let wait = self.allowed_wait(path);
        (now >= since + wait).then(|| format!("no ack for {} ms", wait.as_millis()))
    }
}

/// Abandons a path that stopped acknowledging, so that its data moves to the other paths
/// at once instead of after repeated probe timeouts.
///
/// A validated path is dead when it has waited for an acknowledgment for
/// `max(k · srtt, floor)` or had `pto_count` probe timeouts in a row (see
/// [`FastFailoverParams`]). A dead path is abandoned (`PATH_UNSTABLE_OR_POOR`) if another
/// validated path is not dead; the connection then puts the dead path's in-flight data
/// back in the send queues, so the surviving paths retransmit it right away. When every
/// path is dead nothing is abandoned: abandoning the last path would close the connection,
/// and a path may come back.
///
/// The path manager asks to be ticked at the earliest deadline of the paths waiting for an
/// acknowledgment, and at least every `floor` while two paths are usable (a path may start
/// waiting between ticks; its deadline is at least `floor` after that, so it is never
/// missed). Parameters ([`PathManager::configure`]): `k`, `floor_ms`, `pto_count`.
#[derive(Debug, Clone)]
pub struct FastFailover {
    params: FastFailoverParams,
    next: Option<Instant>,
}

impl FastFailover {
    /// A failover path manager with the given thresholds.
    pub fn new(params: FastFailoverParams) -> Self {
        FastFailover { params, next: None }
    }

    /// The thresholds in use.
    pub fn params(&self) -> FastFailoverParams {
        self.params
    }

    fn check(&mut self, now: Instant, paths: &[PathSnapshot], actions: &mut Vec<PathAction>) {
        let usable: Vec<&PathSnapshot> = paths
            .iter()
            .filter(|p| p.state == PathState::Validated)
            .collect();
        let dead: Vec<(&PathSnapshot, String)> = usable
            .iter()
            .filter_map(|p| self.params.dead(now, p).map(|why| (*p, why)))
            .collect();
        if dead.len() < usable.len() {
            for (p, why) in &dead {
                actions.push(PathAction::Abandon {
                    path: p.id,
                    code: TransportErrorCode::PATH_UNSTABLE_OR_POOR,
                    drain: false,
                    reason: format!("failover: {why}"),
                });
            }
        }
        let survivors = usable.len()
            - if dead.len() < usable.len() {
                dead.len()
            } else {
                0
            };
        self.next = if survivors >= 2 {
            usable
                .iter()
                .filter(|p| !dead.iter().any(|(d, _)| d.id == p.id))
                .filter_map(|p| self.params.deadline(p))
                .chain(std::iter::once(now + self.params.floor))
                .min()
        } else {
            None
        };
    }
}

impl PathManager for FastFailover {
    fn name(&self) -> &str {
        "failover"
    }

    fn on_path_event(
        &mut self,
        now: Instant,
        event: &PathEvent,
        paths: &[PathSnapshot],
        actions: &mut Vec<PathAction>,
    ) {
        if matches!(event, PathEvent::Validated(_) | PathEvent::Abandoned(_)) {
            self.check(now, paths, actions);
        }
    }

    fn on_tick(&mut self, now: Instant, paths: &[PathSnapshot], actions: &mut Vec<PathAction>) {
        self.check(now, paths, actions);
    }

    fn next_tick(&self) -> Option<Instant> {
        self.next
    }

    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "k" => {
                let k = parse_non_negative(key, value)?;
                if k == 0.0 {
                    return Err("k: must be positive".into());
                }
                self.params.k = k;
            }
            "floor_ms" => {
                let ms = parse_non_negative(key, value)?;
                self.params.floor = Duration::from_secs_f64(ms / 1000.0);
            }
            "pto_count" => {
                self.params.pto_count = value
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        format!("pto_count: expected a positive integer, got {value:?}")
                    })?;
            }
            _ => return Err(format!("failover has no parameter {key} (value {value})")),
        }
        Ok(())
    }
}

/// Builds [`FastFailover`] path managers.
#[derive(Debug, Clone, Copy, Default)]
pub struct FastFailoverFactory {
    /// The thresholds.
    pub params: FastFailoverParams,
}

impl PathManagerFactory for FastFailoverFactory {
    fn build(&self) -> Box<dyn PathManager> {
        Box::new(FastFailover::new(self.params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pm::tests::path_on;
    use crate::shared::PathId;

    fn waiting(id: u32, local: &str, srtt_ms: u64, since: Instant) -> PathSnapshot {
        let mut p = path_on(id, local, 50_000);
        p.srtt = Duration::from_millis(srtt_ms);
        p.awaiting_ack_since = Some(since);
        p
    }

    /// Ticks at every time the path manager asks for until `until`; returns the time of the
    /// first abandonment and what was abandoned.
    fn run(
        pm: &mut FastFailover,
        paths: &[PathSnapshot],
        start: Instant,
        until: Instant,
    ) -> Option<(Instant, Vec<PathAction>)> {
        let mut now = start;
        let mut actions = Vec::new();
        pm.on_tick(now, paths, &mut actions);
        while actions.is_empty() {
            let next = pm.next_tick()?;
            assert!(next > now, "ticks move forward");
            if next > until {
                return None;
            }
            now = next;
            pm.on_tick(now, paths, &mut actions);
        }
        Some((now, actions))
    }

    #[test]
    fn a_silent_path_is_abandoned_exactly_at_its_deadline() {
        let t0 = Instant::now();
        let mut pm = FastFailover::new(FastFailoverParams::default());
        // Path 1 (srtt 50 ms) has waited since t0: its deadline is t0 + 150 ms. Path 0 is
        // acknowledged all the time.
        let mut healthy = path_on(0, "10.0.0.1:5000", 50_000);
        healthy.srtt = Duration::from_millis(20);
        healthy.awaiting_ack_since = None;
        let paths = [healthy, waiting(1, "10.0.1.1:5000", 50, t0)];
        let (at, actions) = run(&mut pm, &paths, t0, t0 + Duration::from_secs(5)).unwrap();
        assert_eq!(at, t0 + Duration::from_millis(150));
        assert_eq!(
            actions,
            vec![PathAction::Abandon {
                path: PathId(1),
                code: TransportErrorCode::PATH_UNSTABLE_OR_POOR,
                drain: false,
                reason: "failover: no ack for 150 ms".into(),
            }]
        );
    }

    #[test]
    fn the_floor_bounds_short_rtts_and_pto_counts_fail_a_path_too() {
        let t0 = Instant::now();
        let mut pm = FastFailover::new(FastFailoverParams::default());
        let healthy = path_on(0, "10.0.0.1:5000", 50_000);
        let fast_but_silent = waiting(1, "10.0.1.1:5000", 2, t0);
        let paths = [healthy.clone(), fast_but_silent];
        let (at, _) = run(&mut pm, &paths, t0, t0 + Duration::from_secs(5)).unwrap();
        assert_eq!(
            at,
            t0 + Duration::from_millis(100),
            "3 x 2 ms < 100 ms floor"
        );
        let mut probing = path_on(1, "10.0.1.1:5000", 50_000);
        probing.pto_count = 2;
        let mut actions = Vec::new();
        pm.on_tick(t0, &[healthy, probing], &mut actions);
        assert_eq!(
            actions.first().map(|a| a.reason().to_owned()),
            Some("failover: pto_count 2".into())
        );
    }

    #[test]
    fn an_acknowledged_path_is_kept_and_the_last_path_never_abandoned() {
        let t0 = Instant::now();
        let mut pm = FastFailover::new(FastFailoverParams::default());
        // Both paths wait but are acknowledged within their deadlines: the wait restarts
        // with each acknowledgment, so nothing is ever abandoned.
        let mut now = t0;
        let mut actions = Vec::new();
        for _ in 0..100 {
            let paths = [
                waiting(0, "10.0.0.1:5000", 40, now - Duration::from_millis(30)),
                waiting(1, "10.0.1.1:5000", 40, now - Duration::from_millis(90)),
            ];
            pm.on_tick(now, &paths, &mut actions);
            now += Duration::from_millis(10);
        }
        assert!(actions.is_empty(), "{actions:?}");
        // Every path silent: nothing to fail over to, nothing abandoned.
        let paths = [
            waiting(0, "10.0.0.1:5000", 40, t0),
            waiting(1, "10.0.1.1:5000", 40, t0),
        ];
        pm.on_tick(t0 + Duration::from_secs(10), &paths, &mut actions);
        assert!(actions.is_empty(), "{actions:?}");
        // Alone on one path: no ticks at all.
        pm.on_tick(t0, &paths[..1], &mut actions);
        assert_eq!(pm.next_tick(), None);
    }

    #[test]
    fn a_path_that_starts_waiting_between_ticks_is_not_missed() {
        let t0 = Instant::now();
        let mut pm = FastFailover::new(FastFailoverParams::default());
        let idle = [
            path_on(0, "10.0.0.1:5000", 50_000),
            path_on(1, "10.0.1.1:5000", 50_000),
        ];
        let mut actions = Vec::new();
        pm.on_tick(t0, &idle, &mut actions);
        let next = pm.next_tick().unwrap();
        assert_eq!(next, t0 + Duration::from_millis(100));
        // Path 1 started waiting just after the tick; the next tick sees it and asks for
        // its deadline.
        let since = t0 + Duration::from_millis(1);
        let paths = [idle[0].clone(), waiting(1, "10.0.1.1:5000", 50, since)];
        pm.on_tick(next, &paths, &mut actions);
        assert!(actions.is_empty());
        assert_eq!(pm.next_tick(), Some(since + Duration::from_millis(150)));
    }

    #[test]
    fn configuration() {
        let mut pm = FastFailover::new(FastFailoverParams::default());
        pm.configure("k", "2.5").unwrap();
        pm.configure("floor_ms", "40").unwrap();
        pm.configure("pto_count", "3").unwrap();
        assert_eq!(
            pm.params(),
            FastFailoverParams {
                k: 2.5,
                floor: Duration::from_millis(40),
                pto_count: 3
            }
        );
        assert!(pm.configure("k", "0").is_err());
        assert!(pm.configure("pto_count", "0").is_err());
        assert!(pm.configure("floor_ms", "-1").is_err());
        assert!(pm.configure("rto", "1").is_err());
    }
}
