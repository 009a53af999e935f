//! The QoS manager: checks each class's requirements against each interface's
//! measurements, moves a class off an interface that fails or violates them and back with
//! hysteresis, logs every decision with its reason, and turns the result into the stack's
//! scheduler configuration ([`QosPolicyConfig`]), which both gateways apply.
//!
//! Per mode (of the class's stack class):
//!
//! - `select`: the class's first interface, always (single-path usage, no backup).
//! - `failover`: the first interface that is up; when a more preferred interface comes
//!   back, the class returns to it after it has been up for the hold time.
//! - `fallback`: like `failover`, but the active interface is also left once it has
//!   violated the requirements (one-way delay, loss, capacity) continuously for the
//!   detection time; the class moves to the most preferred interface that is up and
//!   meets them (an unmeasured one counts as meeting them), and returns to a more preferred
//!   one only once that one has met them with the hysteresis margin (delay and loss at
//!   most `1 - hysteresis` of their limits, capacity at least `1 + hysteresis` of its
//!   minimum) continuously for the hold time.
//! - `duplicate` and `aggregate`: every interface that is up (all of them if none is).
//!
//! Down interfaces are also told to the stack as link-layer hints (the client gateway does
//! that), so its schedulers stop using them at once; the manager's decisions go in the
//! stack's per-class policy as an ordered path list (stack mode `failover` for the
//! single-path modes, so the stack's own failure detection remains as a backstop).
//
//= To Poly or Not to Poly: QoS-Aware Multi-Path Networking, Section III
//# The QoS Manager analyzes traffic data collected by the PMF to adjust user traffic policies based on real-time conditions, enabling adaptive quality control.

use std::time::{Duration, Instant};

use polypath_quic::sched::{AllowedPath, ClassPolicy, QosClass, QosMode, QosPolicyConfig};
use serde::Serialize;

use crate::pmf::Metrics;
use crate::policy::{ClassRule, Policy};

/// One decision of the manager.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Seconds since the manager started.
    pub t_s: f64,
    /// When, on the system clock (seconds since the Unix epoch; set by the gateway that
    /// logs the decision, 0 until then).
    pub unix_s: f64,
    /// The stack class (and so every gateway class sent as it).
    pub qos_class: &'static str,
    /// The gateway classes concerned.
    pub classes: Vec<String>,
    /// The interface the class used (single-path modes), or `None`.
    pub from: Option<String>,
    /// The interface it uses now.
    pub to: Option<String>,
    /// The interfaces in use now, in order.
    pub interfaces: Vec<String>,
    /// Why, in words with the measurements.
    pub reason: String,
}

/// One stack class's state.
#[derive(Debug, Clone)]
struct ClassState {
    qos_class: QosClass,
    names: Vec<String>,
    rule: ClassRule,
    /// The interface in use (single-path modes), an index into the policy's interfaces.
    active: Option<usize>,
    /// Since when the active interface violates the requirements.
    violating_since: Option<Instant>,
    /// A more preferred interface good since this time.
    candidate: Option<(usize, Instant)>,
    /// The interfaces in use, as last put in force.
    in_use: Vec<usize>,
}

/// The QoS manager of one session.
#[derive(Debug, Clone)]
pub struct QosManager {
    start: Instant,
    detection: Duration,
    labels: Vec<String>,
    classes: Vec<ClassState>,
    /// Interface up/down as last seen.
    up: Vec<bool>,
}

impl QosManager {
    /// A manager for `policy`, starting at `now` with nothing measured.
    pub fn new(policy: &Policy, now: Instant) -> QosManager {
        let mut classes: Vec<ClassState> = Vec::new();
        for c in policy.all_classes() {
            match classes.iter_mut().find(|s| s.qos_class == c.qos_class) {
                Some(s) => s.names.push(c.name.clone()),
                None => classes.push(ClassState {
                    qos_class: c.qos_class,
                    names: vec![c.name.clone()],
                    rule: c.clone(),
                    active: None,
                    violating_since: None,
                    candidate: None,
                    in_use: Vec::new(),
                }),
            }
        }
        QosManager {
            start: now,
            detection: policy.detection,
            labels: policy.interfaces.iter().map(|i| i.label()).collect(),
            classes,
            up: vec![true; policy.interfaces.len()],
        }
    }

    /// Which interfaces the manager counts as up.
    pub fn interfaces_up(&self) -> &[bool] {
        &self.up
    }

    /// Re-evaluates every class with the interfaces' measurements (`metrics[i]` for the
    /// policy's interface `i`; `None` for one the gateway does not have). Returns the
    /// decisions that changed something.
    pub fn evaluate(&mut self, now: Instant, metrics: &[Option<Metrics>]) -> Vec<Decision> {
        let t_s = now.saturating_duration_since(self.start).as_secs_f64();
        for (i, up) in self.up.iter_mut().enumerate() {
            *up = metrics.get(i).copied().flatten().is_some_and(|m| m.up);
        }
        let mut out = Vec::new();
        let labels = self.labels.clone();
        let up = self.up.clone();
        let detection = self.detection;
        for s in &mut self.classes {
            if let Some(reason) = evaluate_class(s, now, detection, &up, metrics, &labels) {
                out.push(Decision {
                    t_s,
                    unix_s: 0.0,
                    qos_class: s.qos_class.name(),
                    classes: s.names.clone(),
                    from: reason.0.map(|i| labels[i].clone()),
                    to: s.active.map(|i| labels[i].clone()),
                    interfaces: s.in_use.iter().map(|&i| labels[i].clone()).collect(),
                    reason: reason.1,
                });
            }
        }
        out
    }

    /// The stack's scheduler configuration now: for each stack class its mode and paths,
    /// with `path_of[i]` the QUIC path over the policy's interface `i`.
    pub fn stack_config(&self, path_of: &[Option<u32>]) -> QosPolicyConfig {
        let mut config = QosPolicyConfig::default();
        for s in &self.classes {
            let mut allowed: Vec<AllowedPath> = Vec::new();
            for &i in &s.in_use {
                if let Some(Some(id)) = path_of.get(i) {
                    let priority = allowed.len() as u32 + 1;
                    allowed.push(AllowedPath::id(*id, priority));
                }
            }
            let mode = match s.rule.mode {
                QosMode::Select => QosMode::Select,
                QosMode::Failover | QosMode::Fallback => QosMode::Failover,
                QosMode::Duplicate => QosMode::Duplicate,
                QosMode::Aggregate => QosMode::Aggregate,
            };
            let policy = ClassPolicy {
                policy_num: Some(s.names.join("+")),
                mode,
                allowed_paths: allowed,
                hold_time_ms: s.rule.hold_time.as_millis() as u64,
                hysteresis: s.rule.hysteresis,
                ..ClassPolicy::default()
            };
            match s.qos_class {
                QosClass::BestEffort => config.best_effort = Some(policy),
                QosClass::Bulk => config.bulk = Some(policy),
                QosClass::LowLatency => config.low_latency = Some(policy),
                QosClass::Critical => config.critical = Some(policy),
            }
        }
        // Classes without a gateway class keep the default policy: aggregation over every
        // path (nothing is sent as them).
        config
    }
}

/// Whether interface `i` meets the rule's requirements with `margin`; `presume` lets an
/// unmeasured figure pass. Returns the first violation, in words.
fn violation(rule: &ClassRule, m: &Metrics, margin: f64, presume: bool) -> Option<String> {
    let r = &rule.requirements;
    if let Some(limit) = r.delay {
        let bound = limit * (1.0 - margin);
        match m.owd_ms() {
            Some(d) if d > bound => {
                return Some(format!("one-way delay {d:.3} ms > {bound:.3} ms"));
            }
            None if !presume => return Some("one-way delay not measured".into()),
            _ => {}
        }
    }
    if let Some(limit) = r.packetloss {
        let bound = limit * (1.0 - margin);
        if let Some(l) = m.loss_pct
            && l > bound
        {
            return Some(format!("loss {l:.2} % > {bound:.2} %"));
        }
    }
    if let Some(min) = r.throughput {
        let bound = min * (1.0 + margin);
        match m.capacity_mbps {
            Some(c) if c < bound => {
                return Some(format!("capacity {c:.1} Mbit/s < {bound:.1} Mbit/s"));
            }
            None if !presume => return Some("capacity not measured".into()),
            _ => {}
        }
    }
    None
}

/// One class's step; `Some((previous active, reason))` when something changed.
fn evaluate_class(
    s: &mut ClassState,
    now: Instant,
    detection: Duration,
    up: &[bool],
    metrics: &[Option<Metrics>],
    labels: &[String],
) -> Option<(Option<usize>, String)> {
    let order = s.rule.interfaces.clone();
    let is_up = |i: usize| up.get(i).copied().unwrap_or(false);
    let m = |i: usize| metrics.get(i).copied().flatten().unwrap_or_default();
    let previous = s.active;
    let mut reason = None;
    match s.rule.mode {
        QosMode::Select => {
            if s.active.is_none() {
                s.active = order.first().copied();
                reason = Some("path selection: the class's first interface".to_string());
            }
        }
        QosMode::Duplicate | QosMode::Aggregate => {}
        QosMode::Failover | QosMode::Fallback => {
            let qos = s.rule.mode == QosMode::Fallback;
            let ok =
                |i: usize| is_up(i) && (!qos || violation(&s.rule, &m(i), 0.0, true).is_none());
            match s.active {
                None => {
                    let first = order
                        .iter()
                        .copied()
                        .find(|&i| ok(i))
                        .or_else(|| order.iter().copied().find(|&i| is_up(i)))
                        .or_else(|| order.first().copied());
                    s.active = first;
                    reason = Some("start: the most preferred interface that is up".to_string());
                }
                Some(a) => {
                    let a_up = is_up(a);
                    let a_violation = if qos {
                        violation(&s.rule, &m(a), 0.0, true)
                    } else {
                        None
                    };
                    if !a_up || a_violation.is_some() {
                        let since = *s.violating_since.get_or_insert(now);
                        // Down is already the end of a detection time (no answers for
                        // it); a violation must last one.
                        let due = !a_up || now.saturating_duration_since(since) >= detection;
                        if due && let Some(next) = order.iter().copied().find(|&i| i != a && ok(i))
                        {
                            let why = if a_up {
                                format!(
                                    "{} on {} for {} ms",
                                    a_violation.unwrap_or_default(),
                                    labels[a],
                                    now.saturating_duration_since(since).as_millis()
                                )
                            } else {
                                format!(
                                    "{} is down (no probe answer for {} ms)",
                                    labels[a],
                                    detection.as_millis()
                                )
                            };
                            s.active = Some(next);
                            s.violating_since = None;
                            s.candidate = None;
                            reason = Some(format!(
                                "{why}; {} {}",
                                labels[next],
                                if qos {
                                    "is up and meets the requirements"
                                } else {
                                    "is up"
                                }
                            ));
                        }
                    } else {
                        s.violating_since = None;
                        // A more preferred interface good enough to return to?
                        let pos = order.iter().position(|&i| i == a).unwrap_or(order.len());
                        let better = order[..pos].iter().copied().find(|&i| {
                            is_up(i)
                                && (!qos
                                    || violation(&s.rule, &m(i), s.rule.hysteresis, false)
                                        .is_none())
                        });
                        match (better, s.candidate) {
                            (None, _) => s.candidate = None,
                            (Some(b), Some((c, since))) if b == c => {
                                if now.saturating_duration_since(since) >= s.rule.hold_time {
                                    s.active = Some(b);
                                    s.candidate = None;
                                    reason = Some(format!(
                                        "{} has been up{} for {} ms (hold time {} ms, hysteresis {:.0} %)",
                                        labels[b],
                                        if qos {
                                            " and inside the requirements with the margin"
                                        } else {
                                            ""
                                        },
                                        now.saturating_duration_since(since).as_millis(),
                                        s.rule.hold_time.as_millis(),
                                        s.rule.hysteresis * 100.0
                                    ));
                                }
                            }
                            (Some(b), _) => s.candidate = Some((b, now)),
                        }
                    }
                }
            }
        }
    }
    // The interfaces in use, in order.
    let in_use: Vec<usize> = match s.rule.mode {
        QosMode::Select => s.active.into_iter().collect(),
        QosMode::Failover | QosMode::Fallback => {
            let mut v: Vec<usize> = s.active.into_iter().collect();
            v.extend(
                order
                    .iter()
                    .copied()
                    .filter(|&i| Some(i) != s.active && is_up(i)),
            );
            v.extend(
                order
                    .iter()
                    .copied()
                    .filter(|&i| Some(i) != s.active && !is_up(i)),
            );
            v
        }
        QosMode::Duplicate | QosMode::Aggregate => {
            let v: Vec<usize> = order.iter().copied().filter(|&i| is_up(i)).collect();
            if v.is_empty() { order.clone() } else { v }
        }
    };
    if in_use != s.in_use {
        let why = reason.take().unwrap_or_else(|| {
            let down: Vec<&str> = order
                .iter()
                .filter(|&&i| !is_up(i))
                .map(|&i| labels[i].as_str())
                .collect();
            if down.is_empty() {
                "every interface is up".to_string()
            } else {
                format!("down: {}", down.join(", "))
            }
        });
        s.in_use = in_use;
        return Some((previous, why));
    }
    reason.map(|r| (previous, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"{
      "allowed_interfaces": [
        { "name": "eth0", "priority": 2 },
        { "name": "wlan0", "priority": 1 }
      ],
      "traffic_requirements": { "delay": 1 },
      "detection_ms": 100,
      "hold_time_ms": 1000,
      "classes": [
        { "name": "dup", "match": { "protocol": ["udp"] }, "mode": "duplicate" },
        { "name": "backup", "match": { "protocol": ["tcp"] }, "mode": "failover",
          "interfaces": ["eth0", "wlan0"], "hold_time_ms": 500 }
      ]
    }"#;

    fn metrics(up: bool, owd: f64) -> Option<Metrics> {
        Some(Metrics {
            up,
            owd_up_ms: Some(owd),
            owd_down_ms: Some(owd),
            ..Metrics::default()
        })
    }

    fn active(q: &QosManager, class: QosClass) -> Option<usize> {
        q.classes
            .iter()
            .find(|s| s.qos_class == class)
            .and_then(|s| s.active)
    }

    #[test]
    fn fallback_leaves_a_slow_interface_after_detection_and_returns_after_hold() {
        let p = Policy::parse(POLICY, "p.json").unwrap();
        let t0 = Instant::now();
        let mut q = QosManager::new(&p, t0);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let good = [metrics(true, 0.2), metrics(true, 0.2)];
        let d = q.evaluate(ms(0), &good);
        assert_eq!(
            active(&q, QosClass::BestEffort),
            Some(1),
            "Wi-Fi is priority 1"
        );
        assert!(d.iter().any(|d| d.qos_class == "best_effort"));
        // Wi-Fi's delay rises to 1.5 ms: nothing before the detection time...
        let slow = [metrics(true, 0.2), metrics(true, 1.5)];
        assert!(
            q.evaluate(ms(1000), &slow)
                .iter()
                .all(|d| d.qos_class != "best_effort")
        );
        assert!(
            q.evaluate(ms(1090), &slow)
                .iter()
                .all(|d| d.qos_class != "best_effort")
        );
        let d = q.evaluate(ms(1100), &slow);
        assert_eq!(active(&q, QosClass::BestEffort), Some(0));
        let d = d.iter().find(|d| d.qos_class == "best_effort").unwrap();
        assert_eq!(d.from.as_deref(), Some("wlan0"));
        assert_eq!(d.to.as_deref(), Some("eth0"));
        assert!(
            d.reason.contains("one-way delay 1.500 ms > 1.000 ms"),
            "{}",
            d.reason
        );
        // Back at 0.9 ms: inside the limit but not the 20 % margin: stays.
        let hovering = [metrics(true, 0.2), metrics(true, 0.9)];
        for t in (2000..5000).step_by(100) {
            q.evaluate(ms(t), &hovering);
        }
        assert_eq!(active(&q, QosClass::BestEffort), Some(0));
        // Good again: returns after the hold time.
        q.evaluate(ms(5000), &good);
        q.evaluate(ms(5900), &good);
        assert_eq!(active(&q, QosClass::BestEffort), Some(0));
        let d = q.evaluate(ms(6000), &good);
        assert_eq!(active(&q, QosClass::BestEffort), Some(1));
        assert!(d.iter().any(|d| d.reason.contains("hold time 1000 ms")));
    }

    #[test]
    fn failover_and_duplicate_follow_interfaces_up_and_down() {
        let p = Policy::parse(POLICY, "p.json").unwrap();
        let t0 = Instant::now();
        let mut q = QosManager::new(&p, t0);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let both = [metrics(true, 5.0), metrics(true, 5.0)];
        q.evaluate(ms(0), &both);
        assert_eq!(
            active(&q, QosClass::LowLatency),
            Some(0),
            "eth0 first in the class"
        );
        let paths = [Some(0), Some(1)];
        let c = q.stack_config(&paths);
        assert_eq!(c.critical.as_ref().unwrap().mode, QosMode::Duplicate);
        assert_eq!(c.critical.as_ref().unwrap().allowed_paths.len(), 2);
        let eth_down = [metrics(false, 5.0), metrics(true, 5.0)];
        let d = q.evaluate(ms(10), &eth_down);
        assert_eq!(active(&q, QosClass::LowLatency), Some(1));
        assert!(d.iter().any(|d| d.reason.contains("eth0 is down")), "{d:?}");
        let c = q.stack_config(&paths);
        let ll = c.low_latency.as_ref().unwrap();
        assert_eq!(ll.mode, QosMode::Failover);
        assert_eq!(ll.allowed_paths[0].path_id, Some(1));
        assert_eq!(
            c.critical.as_ref().unwrap().allowed_paths.len(),
            1,
            "duplicate drops eth0"
        );
        // The fallback class ignores the 5 ms delay only while nothing better exists: both
        // violate, so it stays where it is.
        q.evaluate(ms(400), &both);
        q.evaluate(ms(899), &both);
        assert_eq!(active(&q, QosClass::LowLatency), Some(1));
        q.evaluate(ms(900), &both);
        assert_eq!(
            active(&q, QosClass::LowLatency),
            Some(0),
            "back after 500 ms"
        );
        assert_eq!(
            q.stack_config(&paths).critical.unwrap().allowed_paths.len(),
            2
        );
    }
}
