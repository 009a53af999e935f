//! LAMP5G make-before-break path management for seamless handover (LAMP5G Section V).
//
//= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section V
//# Once the link quality of the target gNB becomes suitable for data transmission, the UE
//# initiates the creation of a new path through the target gNB.
//
//= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section V
//# After creating the new path, both paths are utilized concurrently, as long as their link
//# qualities remain acceptable. When the link quality of the source gNB degrades below a
//# usable threshold, the corresponding path is removed.

use super::{PathAction, PathManager, PathManagerFactory, local_socket_for, open_paths_on};
use crate::error::TransportErrorCode;
use crate::sched::{PathEvent, PathSnapshot, PathState, PathStatus, parse_flag};
use crate::shared::PathId;
use polypath_link::{LinkEvent, LinkEventKind, MeasEvent};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// What a [`PathTrigger`] reads in a link event for the interface it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerVerdict {
    /// The link through the interface (its target cell) is good enough to carry a path: add
    /// one if the interface has none.
    Add {
        /// Why (recorded in qlog).
        reason: String,
    },
    /// The interface's serving link degraded below use: remove its paths once another path
    /// is validated.
    Remove {
        /// Why (recorded in qlog).
        reason: String,
    },
}

/// A policy that turns link-layer events into path addition and removal (LAMP5G Section
/// V-A: "The path addition and removal mechanism in LAMP5G is independent of the specific
/// triggering strategy used for handover decisions").
pub trait PathTrigger: Send + Sync + fmt::Debug {
    /// The verdict on one event, or `None` if it says nothing about adding or removing.
    fn verdict(&self, event: &LinkEventKind) -> Option<TriggerVerdict>;
}

/// Event-driven triggering (LAMP5G Section V-A (1)): an RRC measurement event entering
/// (or its measurement report) adds or removes paths.
//
//= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section V-A
//# A4 triggers path addition when a neighboring cell exceeds a predefined signal threshold,
//# while A2 triggers path removal when the serving gNB's signal quality falls below a
//# threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RrcEventTrigger {
    /// Events that add a path: A4 (neighbour better than threshold) and B1 (its inter-RAT
    /// counterpart) by default.
    pub add_on: Vec<MeasEvent>,
    /// Events that remove a path: A2 (serving worse than threshold) by default.
    pub remove_on: Vec<MeasEvent>,
}

impl Default for RrcEventTrigger {
    fn default() -> Self {
        RrcEventTrigger {
            add_on: vec![MeasEvent::A4, MeasEvent::B1],
            remove_on: vec![MeasEvent::A2],
        }
    }
}

impl PathTrigger for RrcEventTrigger {
    fn verdict(&self, event: &LinkEventKind) -> Option<TriggerVerdict> {
        let event = match event {
            LinkEventKind::RrcEventEntered { event, .. } => *event,
            LinkEventKind::MeasurementReport {
                event,
                on_leave: false,
                ..
            } => *event,
            _ => return None,
        };
        let reason = format!("rrc_{}", event.to_string().to_ascii_lowercase());
        if self.add_on.contains(&event) {
            Some(TriggerVerdict::Add { reason })
        } else if self.remove_on.contains(&event) {
            Some(TriggerVerdict::Remove { reason })
        } else {
            None
        }
    }
}

/// Predicted-throughput triggering (LAMP5G Section V-A (2)): a prediction above
/// `add_above_bps` adds a path, one below `remove_below_bps` removes it; in between nothing
/// changes (hysteresis). The paper gives no values; the defaults (10 and 2 Mbit/s) suit the
/// project's NR scenarios and are meant to be configured.
//
//= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section V-A
//# The UE adds a new path when the predicted throughput of a target link exceeds a
//# predefined threshold, and removes an existing path when its predicted throughput falls
//# below a threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputTrigger {
    /// Add a path when the prediction is at least this many bit/s.
    pub add_above_bps: f64,
    /// Remove the paths when the prediction is at most this many bit/s.
    pub remove_below_bps: f64,
}

impl Default for ThroughputTrigger {
    fn default() -> Self {
        ThroughputTrigger {
            add_above_bps: 10e6,
            remove_below_bps: 2e6,
        }
    }
}

impl PathTrigger for ThroughputTrigger {
    fn verdict(&self, event: &LinkEventKind) -> Option<TriggerVerdict> {
        let LinkEventKind::PredictedThroughput { bps, .. } = event else {
            return None;
        };
        if !bps.is_finite() {
            return None;
        }
        if *bps >= self.add_above_bps {
            Some(TriggerVerdict::Add {
                reason: "predicted_throughput_above".into(),
            })
        } else if *bps <= self.remove_below_bps {
            Some(TriggerVerdict::Remove {
                reason: "predicted_throughput_below".into(),
            })
        } else {
            None
        }
    }
}

/// LAMP5G make-before-break path management (Section V).
///
/// For each link event with a local address, the triggers give a verdict for that
/// interface:
///
/// - **Add**: if no path sends from the interface's address (and none is being added), open
///   one from it (the target cell is reached through the interface the event names, see the
///   [module documentation](super)). When the new path is validated, the window of the
///   existing path with the largest congestion window (the source) is split evenly between
///   the two (Section V-C), if `split_window` is on. The split happens at validation, the
///   moment the new path joins the paths that carry data: before that it sends nothing, so
///   halving the source's window earlier would only idle half of it for a validation round
///   trip.
/// - **Remove**: abandon the interface's paths (`PATH_UNSTABLE_OR_POOR`) as soon as a path
///   from another address is validated — at once if one is, otherwise when one becomes
///   validated (make before break: the source is never removed before its replacement
///   works). A later Add verdict for the interface cancels a removal still waiting.
///
/// Events without a local address are ignored. Parameters ([`PathManager::configure`]):
/// `trigger` (`rrc`, `throughput` or `both`: replaces the triggers by the built-in ones),
/// `add_above_mbps` and `remove_below_mbps` (thresholds of the built-in throughput trigger,
/// in effect whenever it is selected, in whichever order the parameters come),
/// `add_on` and `remove_on` (comma-separated RRC events of the built-in RRC trigger, e.g.
/// `A4,B1` and `A2`; they also select it when no `trigger` was given), `split_window`
/// (y/n), `split_peer_paths` (y/n, below), `locals` (socket addresses to open paths from),
/// `remote`.
///
/// `split_peer_paths = y` is for the endpoint that *sends* the data but does not manage the
/// paths, such as the server of a download whose client runs the handover: paths reach it
/// opened by the peer, so it never adds one itself, yet its windows are the ones that
/// matter. With it, every path the peer opened is split with the local path of the largest
/// window when it is validated, as the client does for the paths it adds (Section V-C).
///
/// `add_on = "A1"` suits a UE with one modem per cell (the LAMP5G emulation of Section
/// VI-B, two UE instances): the target cell is the *serving* cell of the modem that will
/// carry the new path, so "target above the join threshold" is that modem's A1, the same
/// measurement a single modem would report as A4.
#[derive(Debug, Clone)]
pub struct MakeBeforeBreak {
    triggers: Vec<Arc<dyn PathTrigger>>,
    /// The built-in triggers chosen with the `trigger` parameter (RRC, throughput), if any.
    builtin: Option<(bool, bool)>,
    /// Thresholds of the built-in throughput trigger.
    thresholds: ThroughputTrigger,
    /// Events of the built-in RRC trigger.
    rrc_events: RrcEventTrigger,
    locals: Vec<SocketAddr>,
    remote: Option<SocketAddr>,
    split_window: bool,
    /// Also split at the validation of paths the peer opened.
    split_peer_paths: bool,
    /// Paths the peer opened that are not validated yet (with `split_peer_paths`).
    peer_paths: BTreeSet<PathId>,
    /// Interfaces with a path being added, and its ID once opened.
    additions: BTreeMap<IpAddr, Option<PathId>>,
    /// Interfaces whose paths wait for a replacement before they are removed, with the
    /// reason.
    removals: BTreeMap<IpAddr, String>,
}

impl MakeBeforeBreak {
    /// A path manager with the given triggers, splitting windows at addition.
    pub fn new(triggers: Vec<Arc<dyn PathTrigger>>) -> Self {
        MakeBeforeBreak {
            triggers,
            builtin: None,
            thresholds: ThroughputTrigger::default(),
            rrc_events: RrcEventTrigger::default(),
            locals: Vec::new(),
            remote: None,
            split_window: true,
            split_peer_paths: false,
            peer_paths: BTreeSet::new(),
            additions: BTreeMap::new(),
            removals: BTreeMap::new(),
        }
    }

    /// Interfaces whose paths wait for a validated replacement before removal.
    pub fn pending_removals(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.removals.keys().copied()
    }

    fn add(
        &mut self,
        ip: IpAddr,
        reason: String,
        paths: &[PathSnapshot],
        out: &mut Vec<PathAction>,
    ) {
        self.removals.remove(&ip);
        if open_paths_on(paths, ip).next().is_some() || self.additions.contains_key(&ip) {
            return;
        }
        let Some(local) = local_socket_for(ip, &self.locals, paths) else {
            return;
        };
        self.additions.insert(ip, None);
        out.push(PathAction::Open {
            local,
            remote: self.remote,
            status: PathStatus::Available,
            reason,
        });
    }

    fn remove(
        &mut self,
        ip: IpAddr,
        reason: String,
        paths: &[PathSnapshot],
        out: &mut Vec<PathAction>,
    ) {
        if open_paths_on(paths, ip).next().is_none() {
            return;
        }
        self.removals.insert(ip, reason);
        self.process_removals(paths, out);
    }

    /// Abandons the paths of interfaces waiting for removal once another path is validated.
    fn process_removals(&mut self, paths: &[PathSnapshot], out: &mut Vec<PathAction>) {
        self.removals.retain(|ip, reason| {
            let replaced = paths
                .iter()
                .any(|p| p.local.ip() != *ip && p.state == PathState::Validated);
            if !replaced {
                return true;
            }
            for p in open_paths_on(paths, *ip) {
                out.push(PathAction::Abandon {
                    path: p.id,
                    code: TransportErrorCode::PATH_UNSTABLE_OR_POOR,
                    drain: true,
                    reason: reason.clone(),
                });
            }
            false
        });
    }

    /// Splits the source path's window between it and the new path `id`.
    //
    //= LAMP5G: A Link-Aware Multipath QUIC Scheduler for Heterogeneous and Disruption-Prone 5G Cellular Networks, Section V-C
    //# we treat the existing path's congestion window at path addition as the total window
    //# budget and split it evenly across the two paths.
    fn split_window(
        &self,
        id: PathId,
        ip: IpAddr,
        paths: &[PathSnapshot],
        out: &mut Vec<PathAction>,
    ) {
        let source = paths
            .iter()
            .filter(|p| {
                p.id != id
                    && (p.local.ip() != ip || self.split_peer_paths)
                    && p.state == PathState::Validated
            })
            .max_by(|a, b| a.cwnd.cmp(&b.cwnd).then(b.id.cmp(&a.id)));
        let Some(source) = source else {
            return;
        };
        let new = source.cwnd / 2;
        let reason = format!("lamp5g_window_split from path {}", source.id.0);
        out.push(PathAction::SetWindow {
            path: id,
            bytes: new,
            reason: reason.clone(),
        });
        out.push(PathAction::SetWindow {
            path: source.id,
            bytes: source.cwnd - new,
            reason,
        });
    }
}

impl PathManager for MakeBeforeBreak {
    fn name(&self) -> &str {
        "lamp5g"
    }

    fn on_link_event(
        &mut self,
        _now: Instant,
        event: &LinkEvent,
        local: Option<IpAddr>,
        paths: &[PathSnapshot],
        actions: &mut Vec<PathAction>,
    ) {
        let Some(ip) = local else {
            return;
        };
        let verdict = self.triggers.iter().find_map(|t| t.verdict(&event.event));
        match verdict {
            Some(TriggerVerdict::Add { reason }) => self.add(ip, reason, paths, actions),
            Some(TriggerVerdict::Remove { reason }) => self.remove(ip, reason, paths, actions),
            None => {}
        }
    }

    fn on_path_event(
        &mut self,
        _now: Instant,
        event: &PathEvent,
        paths: &[PathSnapshot],
        actions: &mut Vec<PathAction>,
    ) {
        let ip_of = |id: PathId| paths.iter().find(|p| p.id == id).map(|p| p.local.ip());
        match event {
            PathEvent::Opened(id) => {
                if let Some(slot) = ip_of(*id).and_then(|ip| self.additions.get_mut(&ip))
                    && slot.is_none()
                {
                    *slot = Some(*id);
                } else if self.split_peer_paths && paths.iter().any(|p| p.id != *id) {
                    // Not one of ours, and not the connection's first path.
                    self.peer_paths.insert(*id);
                }
            }
            PathEvent::Validated(id) => {
                if let Some(ip) = ip_of(*id)
                    && self.additions.get(&ip) == Some(&Some(*id))
                {
                    self.additions.remove(&ip);
                    if self.split_window {
                        self.split_window(*id, ip, paths, actions);
                    }
                } else if let Some(ip) = ip_of(*id)
                    && self.peer_paths.remove(id)
                    && self.split_window
                {
                    self.split_window(*id, ip, paths, actions);
                }
                self.process_removals(paths, actions);
            }
            PathEvent::Abandoned(id) => {
                // A path being added that failed validation: a later trigger may try again.
                self.additions.retain(|_, slot| *slot != Some(*id));
                self.peer_paths.remove(id);
            }
            _ => {}
        }
    }

    fn on_action_failed(
        &mut self,
        _now: Instant,
        action: &PathAction,
        _error: &super::ActionError,
        _actions: &mut Vec<PathAction>,
    ) {
        if let PathAction::Open { local, .. } = action {
            self.additions.remove(&local.ip());
        }
    }

    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        let mbps = |v: &str| crate::sched::parse_non_negative(key, v).map(|m| m * 1e6);
        match key {
            "trigger" => {
                let (rrc, throughput) = match value.trim().to_ascii_lowercase().as_str() {
                    "rrc" => (true, false),
                    "throughput" => (false, true),
                    "both" => (true, true),
                    other => {
                        return Err(format!(
                            "trigger: expected rrc, throughput or both, got {other:?}"
                        ));
                    }
                };
                self.builtin = Some((rrc, throughput));
                self.rebuild_triggers();
                Ok(())
            }
            "add_above_mbps" | "remove_below_mbps" => {
                let v = mbps(value)?;
                let mut t = self.thresholds;
                if key == "add_above_mbps" {
                    t.add_above_bps = v;
                } else {
                    t.remove_below_bps = v;
                }
                if t.remove_below_bps > t.add_above_bps {
                    return Err(format!(
                        "{key}: remove_below ({} Mbit/s) must not exceed add_above ({} Mbit/s)",
                        t.remove_below_bps / 1e6,
                        t.add_above_bps / 1e6
                    ));
                }
                self.thresholds = t;
                self.rebuild_triggers();
                Ok(())
            }
            "add_on" | "remove_on" => {
                let events = parse_events(key, value)?;
                if key == "add_on" {
                    self.rrc_events.add_on = events;
                } else {
                    self.rrc_events.remove_on = events;
                }
                if self.builtin.is_none() {
                    self.builtin = Some((true, false));
                }
                self.rebuild_triggers();
                Ok(())
            }
            "split_window" => {
                self.split_window = parse_flag(key, value)?;
                Ok(())
            }
            "split_peer_paths" => {
                self.split_peer_paths = parse_flag(key, value)?;
                Ok(())
            }
            "locals" => {
                self.locals = super::parse_socket_list(key, value)?;
                Ok(())
            }
            "remote" => {
                let addr = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("remote: {value:?} is not a socket address"))?;
                self.remote = Some(addr);
                Ok(())
            }
            _ => Err(format!("lamp5g has no parameter {key} (value {value})")),
        }
    }
}

impl MakeBeforeBreak {
    /// Replaces the triggers by the built-in ones chosen with the `trigger` parameter.
    fn rebuild_triggers(&mut self) {
        let Some((rrc, throughput)) = self.builtin else {
            return;
        };
        self.triggers.clear();
        if rrc {
            self.triggers.push(Arc::new(self.rrc_events.clone()));
        }
        if throughput {
            self.triggers.push(Arc::new(self.thresholds));
        }
    }
}

/// Parses a comma-separated list of RRC events (`A1` ... `A5`, `B1`, `B2`; may be empty).
fn parse_events(key: &str, value: &str) -> Result<Vec<MeasEvent>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.to_ascii_uppercase().as_str() {
            "A1" => Ok(MeasEvent::A1),
            "A2" => Ok(MeasEvent::A2),
            "A3" => Ok(MeasEvent::A3),
            "A4" => Ok(MeasEvent::A4),
            "A5" => Ok(MeasEvent::A5),
            "B1" => Ok(MeasEvent::B1),
            "B2" => Ok(MeasEvent::B2),
            _ => Err(format!(
                "{key}: {s:?} is not an RRC event (A1 to A5, B1, B2)"
            )),
        })
        .collect()
}

/// Builds [`MakeBeforeBreak`] path managers.
#[derive(Debug, Clone)]
pub struct MakeBeforeBreakFactory {
    /// The triggers, asked in order; the first verdict counts.
    pub triggers: Vec<Arc<dyn PathTrigger>>,
    /// Split the source's window with a new path when it is validated (Section V-C).
    pub split_window: bool,
    /// Local socket addresses to open paths from (see [`local_socket_for`]).
    pub locals: Vec<SocketAddr>,
    /// The peer address; `None` for the peer's address on the first path.
    pub remote: Option<SocketAddr>,
}

impl MakeBeforeBreakFactory {
    /// A factory with the given triggers and the default settings otherwise.
    pub fn with_triggers(triggers: Vec<Arc<dyn PathTrigger>>) -> Self {
        MakeBeforeBreakFactory {
            triggers,
            ..Default::default()
        }
    }
}

impl Default for MakeBeforeBreakFactory {
    /// The RRC event trigger (A4/B1 add, A2 removes), window split on.
    fn default() -> Self {
        MakeBeforeBreakFactory {
            triggers: vec![Arc::new(RrcEventTrigger::default())],
            split_window: true,
            locals: Vec::new(),
            remote: None,
        }
    }
}

impl PathManagerFactory for MakeBeforeBreakFactory {
    fn build(&self) -> Box<dyn PathManager> {
        let mut pm = MakeBeforeBreak::new(self.triggers.clone());
        pm.split_window = self.split_window;
        pm.locals = self.locals.clone();
        pm.remote = self.remote;
        Box::new(pm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pm::ActionError;
    use crate::pm::tests::{link_event, path_on};
    use polypath_link::CellId;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn rrc(event: MeasEvent) -> LinkEventKind {
        LinkEventKind::RrcEventEntered {
            meas_id: 1,
            event,
            serving: CellId(1),
            cell: event.has_neighbour().then_some(CellId(2)),
        }
    }

    fn prediction(mbps: f64) -> LinkEventKind {
        LinkEventKind::PredictedThroughput {
            bps: mbps * 1e6,
            predictor: "oracle".into(),
            horizon_ms: 100,
        }
    }

    fn abandoned(actions: &[PathAction]) -> Vec<PathId> {
        actions
            .iter()
            .filter_map(|a| match a {
                PathAction::Abandon { path, .. } => Some(*path),
                _ => None,
            })
            .collect()
    }

    /// The `(path, bytes)` of `out`'s actions, all of which must be `SetWindow`.
    fn set_windows(out: &[PathAction]) -> Vec<(u32, u64)> {
        out.iter()
            .map(|a| match a {
                PathAction::SetWindow { path, bytes, .. } => (path.0, *bytes),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    fn validating(id: u32, local: &str) -> PathSnapshot {
        let mut p = path_on(id, local, 14_720);
        p.state = PathState::Validating;
        p
    }

    #[test]
    fn the_sending_peer_splits_its_window_with_paths_the_client_opens() {
        let now = Instant::now();
        // A server: every path has its one local address; the client opens path 1.
        let mut pm = MakeBeforeBreak::new(vec![Arc::new(RrcEventTrigger::default())]);
        let mut out = Vec::new();
        let mut paths = vec![path_on(0, "10.9.0.2:4433", 800_001)];
        pm.on_path_event(now, &PathEvent::Opened(PathId(0)), &paths, &mut out);
        paths.push(validating(1, "10.9.0.2:4433"));
        pm.on_path_event(now, &PathEvent::Opened(PathId(1)), &paths, &mut out);
        paths[1].state = PathState::Validated;
        pm.on_path_event(now, &PathEvent::Validated(PathId(1)), &paths, &mut out);
        assert!(out.is_empty(), "off by default: {out:?}");
        pm.configure("split_peer_paths", "y").unwrap();
        paths.push(validating(2, "10.9.0.2:4433"));
        pm.on_path_event(now, &PathEvent::Opened(PathId(2)), &paths, &mut out);
        paths[2].state = PathState::Validated;
        pm.on_path_event(now, &PathEvent::Validated(PathId(2)), &paths, &mut out);
        let windows = set_windows(&out);
        assert_eq!(windows, vec![(2, 400_000), (0, 400_001)]);
    }

    #[test]
    fn a4_adds_a_path_whose_window_is_split_from_the_source_at_validation() {
        let now = Instant::now();
        let mut pm = MakeBeforeBreak::new(vec![Arc::new(RrcEventTrigger::default())]);
        let mut out = Vec::new();
        let mut paths = vec![
            path_on(0, "10.0.0.1:5000", 100_001),
            // A smaller path elsewhere is not the source.
            path_on(2, "10.0.2.1:5000", 30_000),
        ];
        pm.on_link_event(
            now,
            &link_event(1, rrc(MeasEvent::A4)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        assert_eq!(
            out,
            vec![PathAction::Open {
                local: "10.0.1.1:5000".parse().unwrap(),
                remote: None,
                status: PathStatus::Available,
                reason: "rrc_a4".into(),
            }]
        );
        out.clear();
        // A second A4 while the path is being added changes nothing.
        pm.on_link_event(
            now,
            &link_event(1, rrc(MeasEvent::A4)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        assert!(out.is_empty());
        paths.insert(1, validating(1, "10.0.1.1:5000"));
        pm.on_path_event(now, &PathEvent::Opened(PathId(1)), &paths, &mut out);
        assert!(out.is_empty(), "{out:?}");
        paths[1].state = PathState::Validated;
        pm.on_path_event(now, &PathEvent::Validated(PathId(1)), &paths, &mut out);
        let windows = set_windows(&out);
        assert_eq!(windows, vec![(1, 50_000), (0, 50_001)]);
        assert!(out[0].reason().starts_with("lamp5g_window_split"));
    }

    #[test]
    fn a2_abandons_the_source_only_after_the_new_path_is_validated() {
        let now = Instant::now();
        let mut pm = MakeBeforeBreak::new(vec![Arc::new(RrcEventTrigger::default())]);
        let mut out = Vec::new();
        let mut paths = vec![path_on(0, "10.0.0.1:5000", 80_000)];
        // A2 on the only path: nothing to fall back to yet, so the removal waits.
        pm.on_link_event(
            now,
            &link_event(0, rrc(MeasEvent::A2)),
            ip("10.0.0.1"),
            &paths,
            &mut out,
        );
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(pm.pending_removals().count(), 1);
        pm.on_link_event(
            now,
            &link_event(1, rrc(MeasEvent::A4)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        assert_eq!(out.len(), 1);
        out.clear();
        paths.push(validating(1, "10.0.1.1:5000"));
        pm.on_path_event(now, &PathEvent::Opened(PathId(1)), &paths, &mut out);
        assert!(abandoned(&out).is_empty(), "not before validation");
        paths[1].state = PathState::Validated;
        pm.on_path_event(now, &PathEvent::Validated(PathId(1)), &paths, &mut out);
        assert_eq!(abandoned(&out), vec![PathId(0)]);
        // The split comes first, then the removal.
        assert!(matches!(out[0], PathAction::SetWindow { .. }));
        assert!(matches!(
            out.last(),
            Some(PathAction::Abandon { code, reason, drain: true, .. })
                if *code == TransportErrorCode::PATH_UNSTABLE_OR_POOR && reason == "rrc_a2"
        ));
        assert_eq!(pm.pending_removals().count(), 0);
    }

    #[test]
    fn a2_with_a_working_other_path_abandons_at_once_and_a4_cancels_a_waiting_removal() {
        let now = Instant::now();
        let mut pm = MakeBeforeBreak::new(vec![Arc::new(RrcEventTrigger::default())]);
        let mut out = Vec::new();
        let mut paths = vec![
            path_on(0, "10.0.0.1:5000", 80_000),
            validating(1, "10.0.1.1:5000"),
        ];
        pm.on_link_event(
            now,
            &link_event(0, rrc(MeasEvent::A2)),
            ip("10.0.0.1"),
            &paths,
            &mut out,
        );
        assert!(out.is_empty());
        // The source recovers (A4 on its own interface) before path 1 validates.
        pm.on_link_event(
            now,
            &link_event(0, rrc(MeasEvent::A4)),
            ip("10.0.0.1"),
            &paths,
            &mut out,
        );
        paths[1].state = PathState::Validated;
        pm.on_path_event(now, &PathEvent::Validated(PathId(1)), &paths, &mut out);
        assert!(abandoned(&out).is_empty(), "{out:?}");
        // With path 1 validated, an A2 on path 1's interface removes it at once.
        pm.on_link_event(
            now,
            &link_event(1, rrc(MeasEvent::A2)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        assert_eq!(abandoned(&out), vec![PathId(1)]);
    }

    #[test]
    fn predicted_throughput_thresholds_trigger_addition_and_removal() {
        let now = Instant::now();
        let trigger = ThroughputTrigger {
            add_above_bps: 20e6,
            remove_below_bps: 5e6,
        };
        let mut pm = MakeBeforeBreak::new(vec![Arc::new(trigger)]);
        let mut out = Vec::new();
        let mut paths = vec![path_on(0, "10.0.0.1:5000", 60_000)];
        // RRC events mean nothing to this trigger; a prediction between the thresholds
        // neither.
        pm.on_link_event(
            now,
            &link_event(1, rrc(MeasEvent::A4)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        pm.on_link_event(
            now,
            &link_event(1, prediction(12.0)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        assert!(out.is_empty(), "{out:?}");
        pm.on_link_event(
            now,
            &link_event(1, prediction(25.0)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        assert!(matches!(
            &out[..],
            [PathAction::Open { reason, .. }] if reason == "predicted_throughput_above"
        ));
        out.clear();
        paths.push(validating(1, "10.0.1.1:5000"));
        pm.on_path_event(now, &PathEvent::Opened(PathId(1)), &paths, &mut out);
        pm.on_link_event(
            now,
            &link_event(0, prediction(4.0)),
            ip("10.0.0.1"),
            &paths,
            &mut out,
        );
        assert!(abandoned(&out).is_empty());
        paths[1].state = PathState::Validated;
        pm.on_path_event(now, &PathEvent::Validated(PathId(1)), &paths, &mut out);
        assert_eq!(abandoned(&out), vec![PathId(0)]);
        assert_eq!(
            out.iter()
                .filter(|a| matches!(a, PathAction::SetWindow { bytes: 30_000, .. }))
                .count(),
            2
        );
    }

    #[test]
    fn ignores_events_it_cannot_place_and_retries_after_a_failed_open() {
        let now = Instant::now();
        let mut pm = MakeBeforeBreak::new(vec![Arc::new(RrcEventTrigger::default())]);
        let mut out = Vec::new();
        let paths = vec![path_on(0, "10.0.0.1:5000", 60_000)];
        pm.on_link_event(
            now,
            &link_event(1, rrc(MeasEvent::A4)),
            None,
            &paths,
            &mut out,
        );
        // A4 on the interface that already has a path: nothing to add.
        pm.on_link_event(
            now,
            &link_event(0, rrc(MeasEvent::A4)),
            ip("10.0.0.1"),
            &paths,
            &mut out,
        );
        assert!(out.is_empty());
        pm.on_link_event(
            now,
            &link_event(1, rrc(MeasEvent::A4)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        let open = out.pop().unwrap();
        pm.on_action_failed(
            now,
            &open,
            &ActionError::Open(crate::connection::OpenPathError::NoPathId),
            &mut out,
        );
        pm.on_link_event(
            now,
            &link_event(1, rrc(MeasEvent::A4)),
            ip("10.0.1.1"),
            &paths,
            &mut out,
        );
        assert_eq!(out, vec![open]);
    }

    #[test]
    fn configuration() {
        let mut pm = MakeBeforeBreak::new(vec![Arc::new(RrcEventTrigger::default())]);
        pm.configure("add_above_mbps", "30").unwrap();
        pm.configure("trigger", "both").unwrap();
        assert_eq!(pm.triggers.len(), 2);
        let verdict = pm.triggers[1].verdict(&prediction(25.0));
        assert_eq!(verdict, None, "the configured 30 Mbit/s threshold is used");
        assert!(pm.configure("remove_below_mbps", "40").is_err());
        pm.configure("split_window", "n").unwrap();
        assert!(!pm.split_window);
        assert!(pm.configure("trigger", "a3").is_err());
        pm.configure("trigger", "rrc").unwrap();
        assert_eq!(pm.triggers.len(), 1);
        assert!(pm.configure("hysteresis", "1").is_err());
    }

    #[test]
    fn rrc_events_are_configurable() {
        // One modem per cell: the target modem's A1 adds, the source modem's A2 removes.
        let mut pm = MakeBeforeBreak::new(Vec::new());
        pm.configure("add_on", "a1").unwrap();
        assert_eq!(pm.triggers.len(), 1, "add_on selects the RRC trigger");
        let verdict = |pm: &MakeBeforeBreak, e| pm.triggers[0].verdict(&rrc(e));
        assert!(matches!(
            verdict(&pm, MeasEvent::A1),
            Some(TriggerVerdict::Add { .. })
        ));
        assert_eq!(verdict(&pm, MeasEvent::A4), None);
        assert!(matches!(
            verdict(&pm, MeasEvent::A2),
            Some(TriggerVerdict::Remove { .. })
        ));
        pm.configure("remove_on", "A2, A5").unwrap();
        assert!(matches!(
            verdict(&pm, MeasEvent::A5),
            Some(TriggerVerdict::Remove { .. })
        ));
        // Switching to both triggers keeps the configured events.
        pm.configure("trigger", "both").unwrap();
        assert!(matches!(
            verdict(&pm, MeasEvent::A1),
            Some(TriggerVerdict::Add { .. })
        ));
        assert!(pm.configure("add_on", "A6").is_err());
        assert!(pm.configure("remove_on", "A2,x").is_err());
    }
}
