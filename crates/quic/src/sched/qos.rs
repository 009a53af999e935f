//! QoS policy scheduling after CHYMP and the MPF-Gateway ("To Poly or Not to Poly:
//! QoS-Aware Multi-Path Networking", Sections III and IV): one of five scheduling modes per
//! QoS class of the waiting data ([`PendingData::class`]):
//!
//! | mode | behaviour |
//! |---|---|
//! | `select` | single path: the highest-priority usable allowed path, or with `metric` set the best allowed path by that metric (switching only when another path is better by the hysteresis margin) |
//! | `failover` | primary/backup: the highest-priority allowed path until it fails (abandoned, not usable, `failure_ptos` probe timeouts in a row, or its link reported down by a link-layer hint), then the next; back to a higher-priority path once it has been healthy for `hold_time_ms` |
//! | `fallback` | QoS-compliant fallback: like `failover`, but the active path is also left when it violates the traffic requirements (delay, throughput, loss); a higher-priority path is taken back only once it meets them with the `hysteresis` margin continuously for `hold_time_ms` |
//! | `duplicate` | every packet on every healthy allowed path (highest priority first), a copy waiting on a path whose window is full |
//! | `aggregate` | all allowed paths: each packet on the path that would deliver it first (minimum RTT plus the bytes ahead of it over the path's delivery rate), so data spreads over the paths in proportion to their rates (the backup rule applies) |
//!
//! In the single-path modes and in `duplicate`, the policy's priorities decide which paths
//! are used, whatever the paths' PATH_STATUS; `aggregate` applies the backup rule. In the
//! single-path modes a full window means waiting, never spilling to another path.
//!
//! # Configuration
//!
//! [`QosPolicyConfig`] deserialises from JSON in the spirit of the paper's policy files
//! (Fig. 7): a `default` policy and optional per-class policies `best_effort`, `bulk`,
//! `low_latency`, `critical` (a class without one uses `default`). Each [`ClassPolicy`]:
//!
//! ```json
//! {
//!   "policy_num": "UC03",
//!   "mode": "fallback",
//!   "allowed_interfaces": [
//!     { "type": "Wi-Fi", "name": "wlp4s0", "ip": "192.168.0.242", "priority": 1 },
//!     { "type": "Ethernet", "path_id": 0, "priority": 2,
//!       "metrics": { "delayavg": 0.149524, "packetloss": 0, "throughput": 93 } }
//!   ],
//!   "traffic_requirements": { "delay": 1, "throughput": 5, "packetloss": 1 },
//!   "metric": "min_rtt",
//!   "hysteresis": 0.2,
//!   "hold_time_ms": 1000,
//!   "failure_ptos": 2
//! }
//! ```
//!
//! - `allowed_interfaces` (or `allowed_paths`): the paths the class may use, each matched by
//!   `path_id` or by `ip` (the path's local or remote IP address), exactly one of the two.
//!   `priority`: lower is preferred (1 is the primary); entries without a priority come after
//!   those with one; ties keep list order. `type`, `name` and `metrics` (initial
//!   measurements) are informational: the scheduler uses live path measurements. Without
//!   the list, every path is allowed and lower path IDs are preferred.
//! - `traffic_requirements`: `delay` in milliseconds, compared with the path's smoothed RTT
//!   (CHYMP measures one-way delay with synchronised clocks; QUIC measures round trips, and
//!   the RTT bounds the one-way delay from above, so a compliant path surely meets the
//!   requirement); `throughput` in Mbit/s, compared with the LAMP5G estimate
//!   [`PathSnapshot::estimated_bandwidth`] (what the path can carry, not what it carries
//!   now); `packetloss` in percent, compared with the path's loss rate. Each is optional. A
//!   path without an RTT sample is presumed to meet the delay and throughput requirements
//!   when the active path fails them (using it is the only way to measure it), but never
//!   counts as good enough to switch back to.
//! - `mode`: `select`, `failover`, `fallback`, `duplicate`, `aggregate` (default).
//! - `metric` (`select` only): `min_rtt`, `max_bandwidth` or `min_loss`.
//! - `hysteresis` (default 0.2): the margin, as a fraction of each requirement, a path must
//!   be inside the requirements to be switched back to (delay and loss at most 80 % of their
//!   limits, throughput at least 120 % of its minimum), and the margin by which another path
//!   must beat the selected one in `select` mode with a metric. 20 % keeps a path whose
//!   measurements hover around a limit from flapping, given RTT and loss estimates that vary
//!   by that much between samples.
//! - `hold_time_ms` (default 1000): how long a higher-priority path must stay good before
//!   traffic returns to it: several RTT samples even on cellular paths (20 to 100 ms), so one
//!   good sample after an outage does not pull traffic back.
//! - `failure_ptos` (default 2): probe timeouts in a row after which a path counts as failed
//!   before it is abandoned. The first probe timeout is often just a lost tail; after two,
//!   nothing was acknowledged for at least three probe periods.
//!
//! [`Scheduler::configure`] takes the key `policy` with a whole [`QosPolicyConfig`] as JSON,
//! a class name (`default`, `best_effort`, `bulk`, `low_latency`, `critical`) with a
//! [`ClassPolicy`] as JSON, or `class.field` shorthands: `mode`, `paths` (path IDs in
//! priority order, `"1,0"`; empty for all paths), `delay_ms`, `throughput_mbps`,
//! `loss_percent` (a number, or `none`), `metric` (or `none`), `hysteresis`, `hold_time_ms`,
//! `failure_ptos`. A shorthand for a class without its own policy starts from a copy of
//! `default`. An invalid value leaves the configuration unchanged.
//
//= To Poly or Not to Poly: QoS-Aware Multi-Path Networking (CHYMP / MPF-Gateway), Section III
//# - **Path selection** for single-path usage,
//# - **Total failure fallback** with designated primary and backup paths,
//# - **QoS-compliant fallback** to switch paths during performance issues,
//# - **Duplication** for high-reliability, low-latency applications by sending packets on
//# multiple paths, and
//# - **Aggregation** to combine path capacities for increased throughput.

use super::{
    Decision, PathSnapshot, PendingData, QosClass, Scheduler, SchedulerFactory, parse_fraction,
    parse_non_negative, usable_among,
};
use crate::shared::PathId;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// One of the five CHYMP scheduling modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QosMode {
    /// Single-path transmission on a selected path.
    Select,
    /// Primary path with backups, switching on total failure.
    Failover,
    /// Single path, switching when it violates the traffic requirements.
    Fallback,
    /// Every packet on every allowed path.
    Duplicate,
    /// All allowed paths together (earliest expected delivery first).
    #[default]
    Aggregate,
}

impl FromStr for QosMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "select" => Ok(QosMode::Select),
            "failover" => Ok(QosMode::Failover),
            "fallback" => Ok(QosMode::Fallback),
            "duplicate" => Ok(QosMode::Duplicate),
            "aggregate" => Ok(QosMode::Aggregate),
            other => Err(format!(
                "unknown mode {other:?} (select, failover, fallback, duplicate, aggregate)"
            )),
        }
    }
}

/// How `select` mode compares paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathMetric {
    /// Lowest smoothed RTT.
    MinRtt,
    /// Highest estimated bandwidth ([`PathSnapshot::estimated_bandwidth`]).
    MaxBandwidth,
    /// Lowest loss rate.
    MinLoss,
}

impl FromStr for PathMetric {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "min_rtt" => Ok(PathMetric::MinRtt),
            "max_bandwidth" => Ok(PathMetric::MaxBandwidth),
            "min_loss" => Ok(PathMetric::MinLoss),
            other => Err(format!(
                "unknown metric {other:?} (min_rtt, max_bandwidth, min_loss)"
            )),
        }
    }
}

/// Initial measurements of an interface, as the paper's policies carry them (informational).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceMetrics {
    /// Average delay in milliseconds.
    #[serde(default)]
    pub delayavg: Option<f64>,
    /// Packet loss in percent.
    #[serde(default)]
    pub packetloss: Option<f64>,
    /// Throughput in Mbit/s.
    #[serde(default)]
    pub throughput: Option<f64>,
}

/// A path a class may use, with its priority.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedPath {
    /// Matches the path with this ID.
    #[serde(default)]
    pub path_id: Option<u32>,
    /// Matches paths whose local or remote IP address is this one.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Lower is preferred; 1 is the primary.
    #[serde(default)]
    pub priority: Option<u32>,
    /// Interface name (informational).
    #[serde(default)]
    pub name: Option<String>,
    /// Access technology (informational), `type` in JSON.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Initial measurements (informational).
    #[serde(default)]
    pub metrics: Option<InterfaceMetrics>,
}

impl AllowedPath {
    /// An entry matching a path ID.
    pub fn id(path: u32, priority: u32) -> Self {
        AllowedPath {
            path_id: Some(path),
            priority: Some(priority),
            ..Self::default()
        }
    }

    fn matches(&self, p: &PathSnapshot) -> bool {
        self.path_id == Some(p.id.0)
            || self
                .ip
                .is_some_and(|ip| ip == p.local.ip() || ip == p.remote.ip())
    }
}

/// What a class needs from its path; every bound is optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficRequirements {
    /// Largest acceptable delay in milliseconds (compared with the smoothed RTT).
    #[serde(default)]
    pub delay: Option<f64>,
    /// Smallest acceptable throughput in Mbit/s.
    #[serde(default)]
    pub throughput: Option<f64>,
    /// Largest acceptable packet loss in percent.
    #[serde(default)]
    pub packetloss: Option<f64>,
}

impl TrafficRequirements {
    /// True if `p` meets every requirement with `margin` to spare (0.2: delay and loss at
    /// most 80 % of their limits, throughput at least 120 % of its minimum). `presume` makes
    /// a path without an RTT sample pass the delay and throughput tests.
    fn met_by(&self, p: &PathSnapshot, margin: f64, presume: bool) -> bool {
        let unmeasured = !p.has_rtt_sample;
        if unmeasured && !presume {
            return false;
        }
        let delay_ok = self
            .delay
            .is_none_or(|limit| unmeasured || p.srtt.as_secs_f64() * 1e3 <= limit * (1.0 - margin));
        let throughput_ok = self.throughput.is_none_or(|min| {
            unmeasured || p.estimated_bandwidth() * 8.0 / 1e6 >= min * (1.0 + margin)
        });
        let loss_ok = self
            .packetloss
            .is_none_or(|limit| p.loss_rate * 100.0 <= limit * (1.0 - margin));
        delay_ok && throughput_ok && loss_ok
    }
}

fn default_hysteresis() -> f64 {
    0.2
}

fn default_hold_time_ms() -> u64 {
    1000
}

fn default_failure_ptos() -> u32 {
    2
}

/// The policy of one QoS class (see the module documentation for the fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassPolicy {
    /// A label for the policy (the paper's `policy_num`).
    #[serde(default)]
    pub policy_num: Option<String>,
    /// Scheduling mode.
    #[serde(default)]
    pub mode: QosMode,
    /// Allowed paths with priorities; empty allows all paths, lower IDs first.
    #[serde(default, alias = "allowed_interfaces")]
    pub allowed_paths: Vec<AllowedPath>,
    /// Requirements for `fallback` mode.
    #[serde(default)]
    pub traffic_requirements: TrafficRequirements,
    /// Metric of `select` mode; `None` selects by priority.
    #[serde(default)]
    pub metric: Option<PathMetric>,
    /// Switch-back margin, a fraction in [0, 1).
    #[serde(default = "default_hysteresis")]
    pub hysteresis: f64,
    /// How long a higher-priority path must stay good before traffic returns to it, in ms.
    #[serde(default = "default_hold_time_ms")]
    pub hold_time_ms: u64,
    /// Probe timeouts in a row after which a path counts as failed (at least 1).
    #[serde(default = "default_failure_ptos")]
    pub failure_ptos: u32,
}

impl Default for ClassPolicy {
    fn default() -> Self {
        ClassPolicy {
            policy_num: None,
            mode: QosMode::default(),
            allowed_paths: Vec::new(),
            traffic_requirements: TrafficRequirements::default(),
            metric: None,
            hysteresis: default_hysteresis(),
            hold_time_ms: default_hold_time_ms(),
            failure_ptos: default_failure_ptos(),
        }
    }
}

impl ClassPolicy {
    /// A policy of the given mode with default parameters, allowing all paths.
    pub fn new(mode: QosMode) -> Self {
        ClassPolicy {
            mode,
            ..Self::default()
        }
    }

    /// Checks the values; the error names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        for (i, a) in self.allowed_paths.iter().enumerate() {
            if a.path_id.is_some() == a.ip.is_some() {
                return Err(format!(
                    "allowed_paths[{i}]: give exactly one of path_id and ip"
                ));
            }
        }
        if !(self.hysteresis.is_finite() && (0.0..1.0).contains(&self.hysteresis)) {
            return Err(format!(
                "hysteresis: {} is not a fraction in [0, 1)",
                self.hysteresis
            ));
        }
        let r = &self.traffic_requirements;
        for (name, v) in [
            ("delay", r.delay),
            ("throughput", r.throughput),
            ("packetloss", r.packetloss),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!(
                    "traffic_requirements.{name}: {v} is not a non-negative number"
                ));
            }
        }
        if self.failure_ptos == 0 {
            return Err("failure_ptos: must be at least 1".to_string());
        }
        Ok(())
    }

    /// Where `p` stands in this policy's preference order, if it is allowed at all.
    fn rank_of(&self, p: &PathSnapshot) -> Option<(u32, usize)> {
        if self.allowed_paths.is_empty() {
            return Some((0, 0));
        }
        self.allowed_paths
            .iter()
            .enumerate()
            .find(|(_, a)| a.matches(p))
            .map(|(i, a)| (a.priority.unwrap_or(u32::MAX), i))
    }

    /// Usable, fewer than `failure_ptos` probe timeouts in a row, and its link not reported
    /// unavailable ([`PathSnapshot::link_unavailable`]: a link-down hint, or a link that
    /// came back and is not yet acknowledged).
    fn healthy(&self, p: &PathSnapshot) -> bool {
        p.is_usable() && p.pto_count < self.failure_ptos && !p.link_unavailable
    }
}

/// The classes, in the order of the per-class state ([`QosClass::index`]).
const CLASSES: [QosClass; 4] = [
    QosClass::BestEffort,
    QosClass::Bulk,
    QosClass::LowLatency,
    QosClass::Critical,
];

/// The policies of all classes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosPolicyConfig {
    /// Policy of classes without their own.
    #[serde(default)]
    pub default: ClassPolicy,
    /// Policy of [`QosClass::BestEffort`] data.
    #[serde(default)]
    pub best_effort: Option<ClassPolicy>,
    /// Policy of [`QosClass::Bulk`] data.
    #[serde(default)]
    pub bulk: Option<ClassPolicy>,
    /// Policy of [`QosClass::LowLatency`] data.
    #[serde(default)]
    pub low_latency: Option<ClassPolicy>,
    /// Policy of [`QosClass::Critical`] data.
    #[serde(default)]
    pub critical: Option<ClassPolicy>,
}

impl QosPolicyConfig {
    /// Parses and validates a JSON policy document; errors carry the JSON line and column
    /// or the offending field.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let config: QosPolicyConfig =
            serde_json::from_str(text).map_err(|e| format!("QoS policy: {e}"))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every class policy; the error names the class and field.
    pub fn validate(&self) -> Result<(), String> {
        self.default
            .validate()
            .map_err(|e| format!("default.{e}"))?;
        for (name, policy) in CLASSES.iter().map(|c| c.name()).zip(self.classes()) {
            if let Some(p) = policy {
                p.validate().map_err(|e| format!("{name}.{e}"))?;
            }
        }
        Ok(())
    }

    /// The policy that applies to `class`.
    pub fn policy(&self, class: QosClass) -> &ClassPolicy {
        self.classes()[class.index()].unwrap_or(&self.default)
    }

    fn classes(&self) -> [Option<&ClassPolicy>; 4] {
        [
            self.best_effort.as_ref(),
            self.bulk.as_ref(),
            self.low_latency.as_ref(),
            self.critical.as_ref(),
        ]
    }

    /// The policy named by a configuration key (`default` or a class name), created from a
    /// copy of `default` for a class without one.
    fn policy_mut(&mut self, name: &str) -> Option<&mut ClassPolicy> {
        let default = self.default.clone();
        let slot = match name {
            "default" => return Some(&mut self.default),
            "best_effort" => &mut self.best_effort,
            "bulk" => &mut self.bulk,
            "low_latency" => &mut self.low_latency,
            "critical" => &mut self.critical,
            _ => return None,
        };
        Some(slot.get_or_insert(default))
    }
}

/// One class's single-path state.
#[derive(Debug, Clone, Copy, Default)]
struct ClassState {
    /// The path in use (single-path modes).
    active: Option<PathId>,
    /// A better path seen good since this time (switch-back hold timer).
    candidate: Option<(PathId, Instant)>,
}

/// A usable allowed path: (priority, list position, path ID, index in the snapshot slice).
type Candidate = (u32, usize, PathId, usize);

/// Per-class QoS policy scheduler (CHYMP's five modes).
#[derive(Debug, Default)]
pub struct QosPolicy {
    config: QosPolicyConfig,
    states: [ClassState; 4],
    scratch: Vec<Candidate>,
}

impl QosPolicy {
    /// A scheduler applying `config` (validated first).
    pub fn new(config: QosPolicyConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(QosPolicy {
            config,
            ..Self::default()
        })
    }

    /// The policies in force.
    pub fn config(&self) -> &QosPolicyConfig {
        &self.config
    }

    /// The path a single-path mode currently uses for `class`.
    pub fn active_path(&self, class: QosClass) -> Option<PathId> {
        self.states[class.index()].active
    }

    fn set_config(&mut self, config: QosPolicyConfig) -> Result<(), String> {
        config.validate()?;
        for (state, class) in self.states.iter_mut().zip(CLASSES) {
            if config.policy(class) != self.config.policy(class) {
                *state = ClassState::default();
            }
        }
        self.config = config;
        Ok(())
    }
}

/// Fills `out` with the usable paths `policy` allows, most preferred first.
fn candidates(policy: &ClassPolicy, paths: &[PathSnapshot], out: &mut Vec<Candidate>) {
    out.clear();
    for (idx, p) in paths.iter().enumerate() {
        if !p.is_usable() {
            continue;
        }
        if let Some((priority, position)) = policy.rank_of(p) {
            out.push((priority, position, p.id, idx));
        }
    }
    out.sort_unstable();
}

/// The single-path modes with a switch-back rule: keep the active path while `ok`, else move
/// to the first `ok` candidate; return to a higher-priority candidate once it has been `good`
/// for the hold time.
fn single_path(
    state: &mut ClassState,
    cands: &[Candidate],
    paths: &[PathSnapshot],
    now: Instant,
    policy: &ClassPolicy,
    ok: impl Fn(&PathSnapshot) -> bool,
    good: impl Fn(&PathSnapshot) -> bool,
) -> Option<PathId> {
    let hold = Duration::from_millis(policy.hold_time_ms);
    let healthy = |p: &PathSnapshot| policy.healthy(p);
    let snap = |c: &Candidate| paths.get(c.3);
    let position = state
        .active
        .and_then(|id| cands.iter().position(|c| c.2 == id));
    let active_ok = position
        .and_then(|i| cands.get(i))
        .and_then(snap)
        .is_some_and(&ok);
    let Some(pos) = position.filter(|_| active_ok) else {
        // Leave the active path: the first candidate that is ok; if none is, stay on the
        // active path while it is healthy, else the first healthy candidate, else the first.
        let next = cands
            .iter()
            .find(|c| snap(c).is_some_and(&ok))
            .or_else(|| {
                position
                    .and_then(|i| cands.get(i))
                    .filter(|c| snap(c).is_some_and(&healthy))
            })
            .or_else(|| cands.iter().find(|c| snap(c).is_some_and(&healthy)))
            .or_else(|| cands.first());
        state.active = next.map(|c| c.2);
        state.candidate = None;
        return state.active;
    };
    // The active path is fine; is a higher-priority one good enough to return to?
    let better = cands
        .iter()
        .take(pos)
        .find(|c| snap(c).is_some_and(&good))
        .map(|c| c.2);
    match (better, state.candidate) {
        (None, _) => state.candidate = None,
        (Some(b), Some((id, since))) if id == b => {
            if now.saturating_duration_since(since) >= hold {
                state.active = Some(b);
                state.candidate = None;
            }
        }
        (Some(b), _) => {
            if hold.is_zero() {
                state.active = Some(b);
                state.candidate = None;
            } else {
                state.candidate = Some((b, now));
            }
        }
    }
    state.active
}

/// When a packet given to `p` now would be delivered, in seconds from now: the path's
/// minimum RTT (its propagation and processing time, a round trip, as every path is
/// measured alike) plus the time its rate needs for the bytes ahead of the packet and the
/// packet itself. The rate is the path's delivery-rate estimate, or its window over its
/// smoothed RTT before there is one. Choosing the smallest spreads data over the paths in
/// proportion to their rates once the fastest path has a backlog, whether or not its window
/// is full: a path's window bounds the data in flight but not the queue at its bottleneck,
/// so a sender whose window stays open (a tunnel carrying congestion-controlled traffic)
/// would otherwise keep every packet on the path with the smallest RTT.
///
/// A path with no more than a packet in flight (nothing queued) is not being given data: its
/// latest rate sample measures what it was given (idle probes, say, after its link came
/// back), not what it can carry, and trusting it alone would keep it idle for good. Its
/// rate is then at least its window over its smoothed RTT, until the data it is given
/// yields real samples. (A busier path keeps its measured rate: its window may stay open
/// far beyond what its bottleneck carries.)
fn expected_delivery(p: &PathSnapshot) -> f64 {
    let window_rate = p.cwnd as f64 / p.srtt.as_secs_f64().max(1e-6);
    let starved = p.bytes_in_flight + p.queued_bytes < 2 * u64::from(p.mtu);
    let rate = match p.delivery_rate.filter(|r| *r > 0).map(|r| r as f64) {
        Some(measured) if !starved => measured,
        Some(measured) => measured.max(window_rate),
        None => window_rate,
    }
    .max(1.0);
    let ahead = (p.bytes_in_flight + p.queued_bytes + u64::from(p.mtu)) as f64;
    p.min_rtt.as_secs_f64() + ahead / rate
}

/// `select` with a metric: the best candidate, switching only past the hysteresis margin.
fn select_by_metric(
    state: &mut ClassState,
    cands: &[Candidate],
    paths: &[PathSnapshot],
    metric: PathMetric,
    margin: f64,
) -> Option<PathId> {
    // Larger is better for every metric in this form.
    let value = |p: &PathSnapshot| match metric {
        PathMetric::MinRtt => -p.srtt.as_secs_f64(),
        PathMetric::MaxBandwidth => p.estimated_bandwidth(),
        PathMetric::MinLoss => -p.loss_rate,
    };
    let best = cands
        .iter()
        .filter_map(|c| paths.get(c.3))
        .max_by(|a, b| value(a).total_cmp(&value(b)).then(b.id.cmp(&a.id)))?;
    let current = state
        .active
        .and_then(|id| cands.iter().find(|c| c.2 == id))
        .and_then(|c| paths.get(c.3));
    let switch = match current {
        None => true,
        Some(cur) => {
            let (vb, vc) = (value(best), value(cur));
            // Beat the current value by the margin (relative to its magnitude).
            vb > vc + margin * vc.abs()
        }
    };
    if switch {
        state.active = Some(best.id);
    }
    state.active
}

impl Scheduler for QosPolicy {
    fn name(&self) -> &str {
        "qos"
    }

    fn schedule(
        &mut self,
        now: Instant,
        paths: &[PathSnapshot],
        pending: &PendingData,
    ) -> Decision {
        let policy = self.config.policy(pending.class);
        let state = &mut self.states[pending.class.index()];
        candidates(policy, paths, &mut self.scratch);
        let cands = self.scratch.as_slice();
        let can_send = |id: PathId| paths.iter().any(|p| p.id == id && p.can_send);
        let single = |chosen: Option<PathId>| match chosen {
            Some(id) if can_send(id) => Decision::Send(id),
            _ => Decision::Wait,
        };
        match policy.mode {
            //= To Poly or Not to Poly: QoS-Aware Multi-Path Networking (CHYMP / MPF-Gateway), Section IV
            //# - Single-interface transmission, allowing users to select a preferred interface.
            QosMode::Select => match policy.metric {
                None => {
                    state.active = cands.first().map(|c| c.2);
                    single(state.active)
                }
                Some(metric) => single(select_by_metric(
                    state,
                    cands,
                    paths,
                    metric,
                    policy.hysteresis,
                )),
            },
            //= To Poly or Not to Poly: QoS-Aware Multi-Path Networking (CHYMP / MPF-Gateway), Section IV
            //# - Single-interface transmission with a backup interface, ensuring continuity in
            //# case of complete failure.
            QosMode::Failover => single(single_path(
                state,
                cands,
                paths,
                now,
                policy,
                |p| policy.healthy(p),
                |p| policy.healthy(p) && p.pto_count == 0,
            )),
            //= To Poly or Not to Poly: QoS-Aware Multi-Path Networking (CHYMP / MPF-Gateway), Section IV
            //# - QoS-aware single-interface transmission with a backup, switching paths as
            //# needed for compliance.
            QosMode::Fallback => {
                let req = &policy.traffic_requirements;
                single(single_path(
                    state,
                    cands,
                    paths,
                    now,
                    policy,
                    |p| policy.healthy(p) && req.met_by(p, 0.0, true),
                    |p| {
                        policy.healthy(p)
                            && p.pto_count == 0
                            && req.met_by(p, policy.hysteresis, false)
                    },
                ))
            }
            //= To Poly or Not to Poly: QoS-Aware Multi-Path Networking (CHYMP / MPF-Gateway), Section IV
            //# - Reliable transfer through packet duplication to enhance reliability.
            QosMode::Duplicate => {
                // Every healthy allowed path gets a copy, whether its window has room now
                // or not (the copy waits on the path, the contract of
                // `Decision::Duplicate`): skipping a path whose window is full for a moment
                // would send that packet once only. A failed path gets none.
                let healthy: Vec<PathId> = cands
                    .iter()
                    .filter(|c| paths.get(c.3).is_some_and(|p| policy.healthy(p)))
                    .map(|c| c.2)
                    .collect();
                let ids = if healthy.is_empty() {
                    cands.iter().map(|c| c.2).collect()
                } else {
                    healthy
                };
                match ids.as_slice() {
                    _ if !ids.iter().any(|id| can_send(*id)) => Decision::Wait,
                    [only] => Decision::Send(*only),
                    _ => Decision::Duplicate(ids),
                }
            }
            //= To Poly or Not to Poly: QoS-Aware Multi-Path Networking (CHYMP / MPF-Gateway), Section IV
            //# - Throughput increase by aggregating capacity across multiple paths.
            QosMode::Aggregate => {
                let allowed = cands.iter().filter_map(|c| paths.get(c.3));
                usable_among(allowed)
                    .filter(|p| p.can_send)
                    .min_by(|a, b| {
                        expected_delivery(a)
                            .total_cmp(&expected_delivery(b))
                            .then(a.id.cmp(&b.id))
                    })
                    .map_or(Decision::Wait, |p| Decision::Send(p.id))
            }
        }
    }

    /// Keys: `policy` (a whole [`QosPolicyConfig`] as JSON), a class name (a
    /// [`ClassPolicy`] as JSON) or `class.field` shorthands; see the module documentation.
    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        let mut config = self.config.clone();
        if key == "policy" {
            config = QosPolicyConfig::from_json(value)?;
        } else if let Some(slot) = config.policy_mut(key) {
            *slot = serde_json::from_str(value).map_err(|e| format!("{key}: {e}"))?;
        } else if let Some((class, field)) = key.split_once('.') {
            let policy = config
                .policy_mut(class)
                .ok_or_else(|| format!("{key}: unknown class {class:?}"))?;
            set_field(policy, field, value).map_err(|e| format!("{class}.{e}"))?;
        } else {
            return Err(format!("scheduler qos has no parameter {key}"));
        }
        self.set_config(config)
    }
}

/// Applies one `class.field` shorthand.
fn set_field(policy: &mut ClassPolicy, field: &str, value: &str) -> Result<(), String> {
    let optional = |v: &str| -> Result<Option<f64>, String> {
        if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("none") {
            Ok(None)
        } else {
            parse_non_negative(field, v).map(Some)
        }
    };
    let integer = |v: &str| {
        v.trim()
            .parse::<u64>()
            .map_err(|_| format!("{field}: {v:?} is not a non-negative integer"))
    };
    match field {
        "mode" => policy.mode = value.parse().map_err(|e| format!("mode: {e}"))?,
        "paths" => {
            let mut allowed = Vec::new();
            for (i, item) in value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .enumerate()
            {
                let id = item
                    .parse::<u32>()
                    .map_err(|_| format!("paths: {item:?} is not a path ID"))?;
                let priority = u32::try_from(i + 1).map_err(|_| "paths: too many".to_string())?;
                allowed.push(AllowedPath::id(id, priority));
            }
            policy.allowed_paths = allowed;
        }
        "delay_ms" => policy.traffic_requirements.delay = optional(value)?,
        "throughput_mbps" => policy.traffic_requirements.throughput = optional(value)?,
        "loss_percent" => policy.traffic_requirements.packetloss = optional(value)?,
        "metric" => {
            policy.metric = if value.trim().eq_ignore_ascii_case("none") {
                None
            } else {
                Some(value.parse().map_err(|e| format!("metric: {e}"))?)
            }
        }
        "hysteresis" => policy.hysteresis = parse_fraction(field, value)?,
        "hold_time_ms" => policy.hold_time_ms = integer(value)?,
        "failure_ptos" => {
            policy.failure_ptos = u32::try_from(integer(value)?)
                .map_err(|_| format!("failure_ptos: {value:?} is too large"))?
        }
        _ => return Err(format!("{field}: unknown field")),
    }
    policy.validate()
}

impl fmt::Display for QosMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QosMode::Select => "select",
            QosMode::Failover => "failover",
            QosMode::Fallback => "fallback",
            QosMode::Duplicate => "duplicate",
            QosMode::Aggregate => "aggregate",
        })
    }
}

/// Builds [`QosPolicy`] schedulers sharing one configuration.
#[derive(Debug, Clone, Default)]
pub struct QosPolicyFactory {
    config: QosPolicyConfig,
}

impl QosPolicyFactory {
    /// A factory for `config` (validated first).
    pub fn new(config: QosPolicyConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(QosPolicyFactory { config })
    }

    /// The configuration new schedulers start with.
    pub fn config(&self) -> &QosPolicyConfig {
        &self.config
    }
}

impl SchedulerFactory for QosPolicyFactory {
    fn build(&self) -> Box<dyn Scheduler> {
        Box::new(QosPolicy {
            config: self.config.clone(),
            ..QosPolicy::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::PathState;
    use crate::sched::tests::{Sim, snapshot};
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

    /// The policy of the paper's Fig. 7, verbatim (shared with the gateway's tests).
    const FIG7: &str = include_str!("qos_fig7.json");

    fn low_latency() -> PendingData {
        PendingData {
            new_stream_bytes: 1_000_000,
            class: QosClass::LowLatency,
            ..PendingData::default()
        }
    }

    fn with_policy(class: &str, policy: ClassPolicy) -> QosPolicy {
        let mut s = QosPolicy::default();
        let json = match serde_json::to_string(&policy) {
            Ok(j) => j,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(s.configure(class, &json), Ok(()));
        s
    }

    /// Fallback between Wi-Fi (path 1, priority 1) and Ethernet (path 0, priority 2) with a
    /// 20 ms delay requirement, 20 % hysteresis and a 100 ms hold time.
    fn fallback() -> QosPolicy {
        let mut policy = ClassPolicy::new(QosMode::Fallback);
        policy.allowed_paths = vec![AllowedPath::id(1, 1), AllowedPath::id(0, 2)];
        policy.traffic_requirements.delay = Some(20.0);
        policy.hold_time_ms = 100;
        with_policy("low_latency", policy)
    }

    fn decide(s: &mut QosPolicy, now: Instant, paths: &[PathSnapshot]) -> Decision {
        s.schedule(now, paths, &low_latency())
    }

    #[test]
    fn fig7_policy_parses() {
        let policy: ClassPolicy = match serde_json::from_str(FIG7) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(policy.policy_num.as_deref(), Some("UC03"));
        assert_eq!(policy.mode, QosMode::Aggregate);
        assert_eq!(policy.allowed_paths.len(), 2);
        assert_eq!(policy.allowed_paths[1].priority, Some(1));
        assert_eq!(policy.allowed_paths[1].kind.as_deref(), Some("Wi-Fi"));
        assert_eq!(
            policy.traffic_requirements,
            TrafficRequirements {
                delay: Some(1.0),
                throughput: Some(5.0),
                packetloss: Some(1.0)
            }
        );
        assert_eq!(policy.validate(), Ok(()));
        let doc = format!(r#"{{ "low_latency": {} }}"#, FIG7);
        let config = match QosPolicyConfig::from_json(&doc) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(config.policy(QosClass::LowLatency), &policy);
        assert_eq!(config.policy(QosClass::Bulk), &ClassPolicy::default());
    }

    #[test]
    fn fig7_interfaces_match_by_ip() {
        let mut policy: ClassPolicy = match serde_json::from_str(FIG7) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        policy.mode = QosMode::Failover;
        let mut s = with_policy("default", policy);
        let at = |ip: [u8; 4]| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), 4433));
        let mut ethernet = snapshot(0, 1, true);
        ethernet.local = at([192, 168, 1, 12]);
        let mut wifi = snapshot(1, 1, true);
        wifi.local = at([192, 168, 0, 242]);
        let mut other = snapshot(2, 1, true);
        other.local = at([10, 0, 0, 1]);
        let now = Instant::now();
        let pending = PendingData::default();
        let paths = [ethernet.clone(), wifi.clone(), other.clone()];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(1)));
        wifi.state = PathState::Abandoned;
        let paths = [ethernet, wifi, other];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(0)));
    }

    #[test]
    fn invalid_policies_are_rejected_with_their_field() {
        let cases = [
            (r#"{"default": {"mode": "teleport"}}"#, "unknown variant"),
            (r#"{"default": {"colour": 1}}"#, "unknown field"),
            (r#"{"urgent": {}}"#, "unknown field"),
            (
                r#"{"bulk": {"allowed_paths": [{"path_id": 1, "ip": "10.0.0.1"}]}}"#,
                "bulk.allowed_paths[0]",
            ),
            (
                r#"{"critical": {"allowed_paths": [{}]}}"#,
                "critical.allowed_paths[0]",
            ),
            (r#"{"default": {"hysteresis": 1.5}}"#, "default.hysteresis"),
            (
                r#"{"low_latency": {"traffic_requirements": {"delay": -1}}}"#,
                "low_latency.traffic_requirements.delay",
            ),
            (
                r#"{"default": {"failure_ptos": 0}}"#,
                "default.failure_ptos",
            ),
            ("{\n  \"default\": {\n    \"mode\": 3\n  }\n}", "line 3"),
        ];
        for (doc, expected) in cases {
            match QosPolicyConfig::from_json(doc) {
                Ok(_) => panic!("accepted {doc}"),
                Err(e) => assert!(e.contains(expected), "{doc}: {e}"),
            }
        }
        assert!(
            QosPolicy::new(QosPolicyConfig {
                default: ClassPolicy {
                    hysteresis: f64::NAN,
                    ..ClassPolicy::default()
                },
                ..QosPolicyConfig::default()
            })
            .is_err()
        );
    }

    #[test]
    fn fallback_switches_on_delay_and_back_only_past_the_hysteresis() {
        let mut s = fallback();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut paths = [snapshot(0, 15, true), snapshot(1, 10, true)];
        // Wi-Fi, the priority-1 path, meets the 20 ms requirement.
        assert_eq!(decide(&mut s, t0, &paths), Decision::Send(PathId(1)));
        paths[1].srtt = ms(20);
        assert_eq!(decide(&mut s, t0, &paths), Decision::Send(PathId(1)));
        // Induced latency: 25 ms > 20 ms, switch to Ethernet.
        paths[1].srtt = ms(25);
        assert_eq!(
            decide(&mut s, t0 + ms(1), &paths),
            Decision::Send(PathId(0))
        );
        assert_eq!(s.active_path(QosClass::LowLatency), Some(PathId(0)));
        // Back within the limit but not past the 20 % margin (16 ms): stay, however long.
        paths[1].srtt = ms(18);
        for t in [2, 100, 1000, 10_000] {
            assert_eq!(
                decide(&mut s, t0 + ms(t), &paths),
                Decision::Send(PathId(0))
            );
        }
        // Past the margin: return after holding for 100 ms.
        let t1 = t0 + ms(20_000);
        paths[1].srtt = ms(15);
        assert_eq!(decide(&mut s, t1, &paths), Decision::Send(PathId(0)));
        assert_eq!(
            decide(&mut s, t1 + ms(60), &paths),
            Decision::Send(PathId(0))
        );
        // A relapse within the hold time restarts it.
        paths[1].srtt = ms(17);
        assert_eq!(
            decide(&mut s, t1 + ms(70), &paths),
            Decision::Send(PathId(0))
        );
        paths[1].srtt = ms(15);
        assert_eq!(
            decide(&mut s, t1 + ms(80), &paths),
            Decision::Send(PathId(0))
        );
        assert_eq!(
            decide(&mut s, t1 + ms(170), &paths),
            Decision::Send(PathId(0))
        );
        assert_eq!(
            decide(&mut s, t1 + ms(180), &paths),
            Decision::Send(PathId(1))
        );
        // Other classes are unaffected: best effort aggregates over both paths.
        let best_effort = PendingData::default();
        paths[1].can_send = false;
        assert_eq!(
            s.schedule(t1 + ms(180), &paths, &best_effort),
            Decision::Send(PathId(0))
        );
        // Fallback itself never spills: a full active path means waiting.
        assert_eq!(decide(&mut s, t1 + ms(181), &paths), Decision::Wait);
    }

    #[test]
    fn fallback_checks_throughput_and_loss() {
        let mut s = fallback();
        assert_eq!(s.configure("low_latency.delay_ms", "none"), Ok(()));
        assert_eq!(s.configure("low_latency.throughput_mbps", "5"), Ok(()));
        assert_eq!(s.configure("low_latency.loss_percent", "1"), Ok(()));
        assert_eq!(s.configure("low_latency.hold_time_ms", "0"), Ok(()));
        let now = Instant::now();
        // 12 000 B / 10 ms = 1.2 MB/s = 9.6 Mbit/s.
        let mut paths = [snapshot(0, 10, true), snapshot(1, 10, true)];
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(1)));
        paths[1].loss_rate = 0.02;
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(0)));
        // 0.9 % loss is within the limit but not 20 % inside it.
        paths[1].loss_rate = 0.009;
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(0)));
        paths[1].loss_rate = 0.005;
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(1)));
        // A predicted 4 Mbit/s caps path 1 below the 5 Mbit/s requirement.
        paths[1].predicted_throughput = Some(4_000_000);
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(0)));
        // 5.5 Mbit/s complies but is not 20 % above 5: no return.
        paths[1].predicted_throughput = Some(5_500_000);
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(0)));
        paths[1].predicted_throughput = Some(6_500_000);
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(1)));
    }

    #[test]
    fn fallback_tries_an_unmeasured_path_and_stays_when_nothing_complies() {
        let mut s = fallback();
        let now = Instant::now();
        let mut paths = [snapshot(0, 333, true), snapshot(1, 10, true)];
        paths[0].has_rtt_sample = false;
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(1)));
        // Wi-Fi violates; Ethernet was never measured: try it.
        paths[1].srtt = Duration::from_millis(30);
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(0)));
        // Ethernet measures 40 ms: nothing complies, stay where we are.
        paths[0].has_rtt_sample = true;
        paths[0].srtt = Duration::from_millis(40);
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(0)));
        // Wi-Fi complies again (at the limit): the violating active path is left for it.
        paths[1].srtt = Duration::from_millis(20);
        assert_eq!(decide(&mut s, now, &paths), Decision::Send(PathId(1)));
    }

    #[test]
    fn failover_switches_on_primary_failure_and_returns_after_hold() {
        let mut s = with_policy("default", {
            let mut p = ClassPolicy::new(QosMode::Failover);
            p.allowed_paths = vec![AllowedPath::id(0, 1), AllowedPath::id(1, 2)];
            p.hold_time_ms = 500;
            p
        });
        let pending = PendingData::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut sim = Sim::new(&[(10, 10), (50, 10)]);
        // The primary carries everything, even though the backup has room.
        sim.run(&mut s, 100);
        assert_eq!((sim.sent(0), sim.sent(1)), (100, 0));
        let mut paths = sim.snapshots();
        for p in &mut paths {
            p.can_send = true;
        }
        // One probe timeout is not a failure; two are.
        paths[0].pto_count = 1;
        assert_eq!(s.schedule(t0, &paths, &pending), Decision::Send(PathId(0)));
        paths[0].pto_count = 2;
        assert_eq!(s.schedule(t0, &paths, &pending), Decision::Send(PathId(1)));
        // The primary is acknowledged again: back after 500 ms of health.
        paths[0].pto_count = 0;
        assert_eq!(
            s.schedule(t0 + ms(10), &paths, &pending),
            Decision::Send(PathId(1))
        );
        assert_eq!(
            s.schedule(t0 + ms(500), &paths, &pending),
            Decision::Send(PathId(1))
        );
        assert_eq!(
            s.schedule(t0 + ms(510), &paths, &pending),
            Decision::Send(PathId(0))
        );
        // A link-down hint fails over at once, before any probe timeout.
        paths[0].link_unavailable = true;
        assert_eq!(
            s.schedule(t0 + ms(520), &paths, &pending),
            Decision::Send(PathId(1))
        );
        paths[0].link_unavailable = false;
        // Abandoning the primary fails over at once.
        paths[0].state = PathState::Abandoned;
        assert_eq!(
            s.schedule(t0 + ms(600), &paths, &pending),
            Decision::Send(PathId(1))
        );
        // The backup's full window means waiting, not using a disallowed path.
        paths[1].can_send = false;
        assert_eq!(s.schedule(t0 + ms(601), &paths, &pending), Decision::Wait);
        assert_eq!(s.schedule(t0, &[], &pending), Decision::Wait);
    }

    #[test]
    fn select_by_priority_or_metric() {
        let mut s = QosPolicy::default();
        assert_eq!(s.configure("default.mode", "select"), Ok(()));
        assert_eq!(s.configure("default.paths", "2, 0"), Ok(()));
        let now = Instant::now();
        let pending = PendingData::default();
        let mut paths = [
            snapshot(0, 10, true),
            snapshot(1, 5, true),
            snapshot(2, 30, true),
        ];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(2)));
        paths[2].can_send = false;
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Wait);
        // By metric, among the allowed paths (path 1 is not allowed).
        assert_eq!(s.configure("default.metric", "min_rtt"), Ok(()));
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(0)));
        // Path 2 at 9 ms is better, but not by 20 %; at 7 ms it is.
        paths[2].srtt = Duration::from_millis(9);
        paths[2].can_send = true;
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(0)));
        paths[2].srtt = Duration::from_millis(7);
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(2)));
        assert_eq!(s.configure("default.metric", "max_bandwidth"), Ok(()));
        paths[0].cwnd = 100_000;
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(0)));
        assert_eq!(s.configure("default.metric", "min_loss"), Ok(()));
        paths[0].loss_rate = 0.1;
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(2)));
    }

    #[test]
    fn duplicate_per_class_and_aggregate_by_default() {
        let mut s = QosPolicy::default();
        assert_eq!(s.configure("critical.mode", "duplicate"), Ok(()));
        assert_eq!(s.configure("critical.paths", "1,0"), Ok(()));
        let now = Instant::now();
        let critical = PendingData {
            class: QosClass::Critical,
            ..PendingData::default()
        };
        let mut paths = [
            snapshot(0, 10, true),
            snapshot(1, 30, true),
            snapshot(2, 5, true),
        ];
        assert_eq!(
            s.schedule(now, &paths, &critical),
            Decision::Duplicate(vec![PathId(1), PathId(0)])
        );
        // Other classes aggregate over every path (minimum RTT first).
        assert_eq!(
            s.schedule(now, &paths, &PendingData::default()),
            Decision::Send(PathId(2))
        );
        // A full window keeps a path's copy waiting on it: still both paths.
        paths[1].can_send = false;
        assert_eq!(
            s.schedule(now, &paths, &critical),
            Decision::Duplicate(vec![PathId(1), PathId(0)])
        );
        // A failed path gets no copy.
        paths[1].pto_count = 2;
        assert_eq!(
            s.schedule(now, &paths, &critical),
            Decision::Send(PathId(0))
        );
        paths[1].pto_count = 0;
        paths[0].can_send = false;
        assert_eq!(s.schedule(now, &paths, &critical), Decision::Wait);
        // In a loop, critical data goes out on both allowed paths.
        let mut sim = Sim::new(&[(10, 10), (30, 10), (5, 10)]);
        sim.pending.class = QosClass::Critical;
        assert_eq!(sim.run(&mut s, 50), 50);
        assert_eq!(sim.sent(2), 0);
        assert!(sim.sent(0) >= 50 && sim.sent(1) > 0);
    }

    #[test]
    fn aggregate_gives_an_idle_path_data_despite_a_stale_low_rate() {
        // After an outage, a path's latest rate sample is its idle probes' (11 kB/s here)
        // while the other path is busy at 2 MB/s: the idle path, its window open, gets data.
        let mut s = QosPolicy::default();
        let now = Instant::now();
        let pending = PendingData::default();
        let mut busy = snapshot(0, 9, true);
        busy.cwnd = 55_000;
        busy.bytes_in_flight = 50_000;
        busy.delivery_rate = Some(2_000_000);
        let mut idle = snapshot(1, 8, true);
        idle.cwnd = 9_000;
        idle.bytes_in_flight = 0;
        idle.delivery_rate = Some(11_000);
        let mut paths = [busy, idle];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(1)));
        // Once it carries more than a packet, its own samples count again.
        paths[1].bytes_in_flight = 2_400;
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(0)));
    }

    #[test]
    fn aggregate_applies_the_backup_rule() {
        let mut s = QosPolicy::default();
        let now = Instant::now();
        let pending = PendingData::default();
        let mut backup = snapshot(1, 5, true);
        backup.local_status = crate::sched::PathStatus::Backup;
        let mut paths = [snapshot(0, 10, true), backup];
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(0)));
        // A full window is no failure: the backup stays idle (the draft's backup rule).
        paths[0].can_send = false;
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Wait);
        // A potentially failed path is: the backup carries the traffic.
        paths[0].can_send = true;
        paths[0].pto_count = crate::sched::POTENTIALLY_FAILED_PTOS;
        assert_eq!(s.schedule(now, &paths, &pending), Decision::Send(PathId(1)));
    }

    #[test]
    fn configuration_keys() {
        let mut s = QosPolicy::default();
        let before = s.config().clone();
        for (key, value) in [
            ("low_latency.mode", "teleport"),
            ("low_latency.paths", "1,x"),
            ("low_latency.delay_ms", "-3"),
            ("low_latency.metric", "fastest"),
            ("low_latency.hysteresis", "1"),
            ("low_latency.hold_time_ms", "soon"),
            ("low_latency.failure_ptos", "0"),
            ("low_latency.colour", "red"),
            ("urgent.mode", "select"),
            ("urgent", "{}"),
            ("low_latency", "{\"mode\": 1}"),
            ("policy", "{\"default\": "),
        ] {
            assert!(s.configure(key, value).is_err(), "{key}={value}");
        }
        assert_eq!(s.config(), &before);
        // A class shorthand starts from the default policy.
        assert_eq!(s.configure("default.hold_time_ms", "250"), Ok(()));
        assert_eq!(s.configure("bulk.mode", "FAILOVER"), Ok(()));
        let bulk = s.config().policy(QosClass::Bulk);
        assert_eq!((bulk.mode, bulk.hold_time_ms), (QosMode::Failover, 250));
        assert_eq!(s.configure("bulk.paths", ""), Ok(()));
        assert!(s.config().policy(QosClass::Bulk).allowed_paths.is_empty());
        assert_eq!(
            s.configure("policy", r#"{"critical": {"mode": "duplicate"}}"#),
            Ok(())
        );
        assert_eq!(s.config().policy(QosClass::Bulk), &ClassPolicy::default());
        assert_eq!(
            s.config().policy(QosClass::Critical).mode,
            QosMode::Duplicate
        );
        for mode in ["select", "failover", "fallback", "duplicate", "aggregate"] {
            let parsed: QosMode = match mode.parse() {
                Ok(m) => m,
                Err(e) => panic!("{e}"),
            };
            assert_eq!(parsed.to_string(), mode);
            assert_eq!(
                serde_json::to_string(&parsed).ok(),
                Some(format!("\"{mode}\""))
            );
        }
        let factory = match QosPolicyFactory::new(s.config().clone()) {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(factory.config(), s.config());
        assert_eq!(factory.build().name(), "qos");
    }
}
