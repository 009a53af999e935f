//! Link hints in, path-manager actions out: [`Connection::handle_link_event`], the path
//! event fan-out to scheduler, path manager and application, the path manager's ticks, and
//! the application of the [`PathAction`]s it asks for.

use super::paths::{InFlightOnAbandon, Path};
use super::*;
use crate::pm::ActionError;
use polypath_link::{LinkEvent, LinkEventKind};

/// Rounds of actions applied in one go: actions cause path events, which the path manager
/// may answer with more actions. A path manager still asking after this many rounds is
/// looping; the rest of its actions are dropped.
const MAX_ACTION_ROUNDS: usize = 8;

/// Who asked for a path change, recorded in qlog as the event's `trigger` (and, for a path
/// manager, its name).
#[derive(Debug, Clone, Copy)]
pub(super) enum Origin<'a> {
    /// The application, through the connection API.
    Application,
    /// The protocol itself (failed validation, the peer's PATH_ABANDON).
    Protocol(&'static str),
    /// The path manager, for the given reason.
    PathManager(&'a str),
}

impl Connection {
    /// Gives the connection a link-layer event (link hint).
    ///
    /// `local` is the local IP address of the interface the event concerns (the driver maps
    /// the event's UE interface to it); the event applies to every open path sending from
    /// that address and to paths opened from it later. `None` (an interface without an
    /// address) still reaches the scheduler and the path manager but no path.
    ///
    /// The connection keeps, per local address, the latest [`crate::sched::LinkHints`] (signal
    /// of the serving cell, link up/down, last RRC event), shown in
    /// [`PathSnapshot::link`], and the latest throughput prediction, shown in
    /// [`PathSnapshot::predicted_throughput`] (and announced to the scheduler and path manager as
    /// [`PathEvent::PredictedThroughput`]). It then tells the scheduler
    /// ([`Scheduler::on_link_event`]) and the path manager
    /// ([`PathManager::on_link_event`]), and applies the actions the path manager asks for.
    /// The event's own timestamp is not used: `now` is the connection's clock.
    pub fn handle_link_event(&mut self, now: Instant, event: &LinkEvent, local: Option<IpAddr>) {
        if self.is_closed() {
            return;
        }
        let mut concerned = Vec::new();
        let (mut lost, mut regained) = (Vec::new(), Vec::new());
        let mut prediction = None;
        if let Some(ip) = local {
            let (hints, predicted) = self.link_hints.entry(ip).or_default();
            hints.apply(now, &event.event);
            if let LinkEventKind::PredictedThroughput { bps, .. } = &event.event
                && bps.is_finite()
                && *bps >= 0.0
            {
                // Saturating conversion; fractions of a bit per second do not matter.
                *predicted = Some(*bps as u64);
                prediction = *predicted;
            }
            let hints = *hints;
            for path in self
                .paths
                .values_mut()
                .filter(|p| p.local.ip() == ip && p.state != PathState::Abandoned)
            {
                match (path.link.link_lost, hints.link_lost) {
                    (false, true) => lost.push(path.id),
                    (true, false) => regained.push(path.id),
                    _ => {}
                }
                path.link = hints;
                concerned.push(path.id);
            }
        }
        if let Some(bps) = prediction {
            for &id in &concerned {
                self.set_predicted_throughput(now, id, Some(bps));
            }
        }
        for id in lost {
            self.on_link_lost(id);
        }
        // The interface has its link back.
        for id in regained {
            self.reprobe_path(now, id);
        }
        if !matches!(
            event.event,
            LinkEventKind::Measurement { .. }
                | LinkEventKind::RbAllocation { .. }
                | LinkEventKind::PredictedThroughput { .. }
        ) && self.qlog.is_some()
        {
            let data = json!({
                "iface": event.iface,
                "local": local.map(|ip| ip.to_string()),
                "paths": concerned.iter().map(|id| id.0).collect::<Vec<_>>(),
                "event": serde_json::to_value(&event.event).unwrap_or_default(),
            });
            self.qlog_polypath_event(now, "link_event", data);
        }
        self.scheduler.on_link_event(now, event, &concerned);
        let snapshots = self.path_manager_snapshots();
        self.path_manager
            .on_link_event(now, event, local, &snapshots, &mut self.pm_actions);
        self.run_path_manager(now);
    }

    /// The interface of path `id` lost its link ([`crate::sched::LinkHints::link_lost`]):
    /// while another path works, the path takes no new data (see `Connection::is_stalled`)
    /// and what is in flight on it goes back to the send queues at once, for the other paths
    /// to carry, rather than after the probe timeouts the outage would cause. The path is
    /// kept, so that it can be used again when the link comes back.
    fn on_link_lost(&mut self, id: PathId) {
        if self.multipath.is_none() || !self.is_stalled(id) {
            return;
        }
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.7
        //# Endpoints could take advantage of the multipath extension, and retransmit the content
        //# of the delayed packets on other available paths if the congestion control window on these
        //# paths allows.
        self.requeue_in_flight_elsewhere(id);
    }

    /// Path `id` is back from an outage (its interface reported the link back, or the
    /// peer's packets resumed on it after a silence): the probe timeouts that fired during
    /// the outage no longer stand for congestion, so the PTO backoff restarts and a PING
    /// leaves on the path now; once it is acknowledged, the path takes data again (until
    /// then it is held back as while the link was lost, if another path works).
    pub(super) fn reprobe_path(&mut self, now: Instant, id: PathId) {
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.1
        //# This exponential reduction in the sender's rate is important because consecutive
        //# PTOs might be caused by loss of packets or acknowledgments due to severe
        //# congestion.
        let backed_off = path.pto_count;
        path.pto_count = 0;
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.3
        //# If the endpoints do not want to close the path immediately, as connectivity
        //# could be re-established, PING frames can potentially be used to quickly detect
        //# connectivity changes and switch back in a timely way.
        path.space.ping_pending = true;
        path.link_probe_pending = true;
        if backed_off > 0 {
            self.qlog_event(
                now,
                "recovery_metrics_updated",
                json!({ "pto_count": 0, "path_id": id.0 }),
            );
        }
    }

    /// Gives a new path the latest hints of its local interface.
    pub(super) fn inherit_link_hints(&self, path: &mut Path) {
        if let Some((hints, predicted)) = self.link_hints.get(&path.local.ip()) {
            path.link = *hints;
            path.predicted_throughput = *predicted;
        }
    }

    /// Tells the scheduler, the path manager and, if `to_app`, the application about a path
    /// event. The path manager's answer is applied later (see
    /// [`Connection::run_path_manager`]), since this may run in the middle of processing a
    /// packet.
    pub(super) fn path_event(&mut self, now: Instant, event: PathEvent, to_app: bool) {
        self.scheduler.on_path_event(now, &event);
        let snapshots = self.path_manager_snapshots();
        self.path_manager
            .on_path_event(now, &event, &snapshots, &mut self.pm_actions);
        if to_app {
            self.events.push_back(Event::Path(event));
        }
    }

    /// Snapshots of every path the connection holds, for the path manager. `can_send` tells
    /// whether the congestion window has room for a full-sized packet (pacing aside).
    fn path_manager_snapshots(&self) -> Vec<PathSnapshot> {
        self.paths
            .values()
            .map(|p| p.snapshot(p.is_usable() && p.window_has_room()))
            .collect()
    }

    /// When the path manager wants its next tick, if that is after its last one and the
    /// handshake is confirmed.
    pub(super) fn path_manager_deadline(&self) -> Option<Instant> {
        if !self.handshake_confirmed || self.is_closed() {
            return None;
        }
        self.path_manager
            .next_tick()
            .filter(|t| self.pm_last_tick.is_none_or(|last| *t > last))
    }

    /// Ticks the path manager if a tick is due and applies the actions it asked for.
    /// Called when timers fire, before sending, and after link events.
    pub(super) fn run_path_manager(&mut self, now: Instant) {
        if self.is_closed() {
            self.pm_actions.clear();
            return;
        }
        let tick_due = self.handshake_confirmed
            && (self.pm_tick_due || self.path_manager_deadline().is_some_and(|t| t <= now));
        if tick_due {
            self.pm_tick_due = false;
            self.pm_last_tick = Some(now);
            let snapshots = self.path_manager_snapshots();
            self.path_manager
                .on_tick(now, &snapshots, &mut self.pm_actions);
        }
        for _ in 0..MAX_ACTION_ROUNDS {
            if self.pm_actions.is_empty() {
                return;
            }
            for action in std::mem::take(&mut self.pm_actions) {
                if self.is_closed() {
                    self.pm_actions.clear();
                    return;
                }
                self.apply_path_action(now, action);
            }
        }
        if !self.pm_actions.is_empty() {
            tracing::warn!(
                path_manager = self.path_manager.name(),
                dropped = self.pm_actions.len(),
                "path manager keeps asking; actions dropped"
            );
            self.pm_actions.clear();
        }
    }

    fn apply_path_action(&mut self, now: Instant, action: PathAction) {
        let result = match &action {
            PathAction::Open {
                local,
                remote,
                status,
                reason,
            } => match remote.or_else(|| self.default_remote()) {
                Some(remote) => self
                    .open_path_for(now, *local, remote, *status, Origin::PathManager(reason))
                    .map(|_| ())
                    .map_err(ActionError::from),
                None => Err(ActionError::NoRemote),
            },
            PathAction::Abandon {
                path,
                code,
                drain,
                reason,
            } => self.require_open_path(*path).map(|()| {
                let in_flight = if *drain {
                    InFlightOnAbandon::Drain
                } else {
                    InFlightOnAbandon::Retransmit
                };
                self.abandon_path_internal(
                    now,
                    *path,
                    code.0,
                    Origin::PathManager(reason),
                    in_flight,
                );
            }),
            PathAction::SetStatus {
                path,
                status,
                reason,
            } => self.require_open_path(*path).map(|()| {
                self.set_path_status_for(now, *path, *status, Origin::PathManager(reason));
            }),
            PathAction::SetWindow {
                path: id,
                bytes,
                reason,
            } => match self.paths.get_mut(id) {
                Some(path) if path.state != PathState::Abandoned => {
                    path.cc.set_window(*bytes);
                    let window = path.cc.window();
                    let mut data = json!({"path_id": id.0, "congestion_window": window});
                    self.add_origin(&mut data, Origin::PathManager(reason));
                    self.qlog_event(now, "recovery_metrics_updated", data);
                    Ok(())
                }
                _ => Err(ActionError::NoSuchPath(*id)),
            },
        };
        if let Err(error) = result {
            tracing::debug!(?action, %error, "path manager action failed");
            let mut data = json!({"action": format!("{action:?}"), "error": error.to_string()});
            self.add_origin(&mut data, Origin::PathManager(action.reason()));
            self.qlog_polypath_event(now, "path_manager_action_failed", data);
            self.path_manager
                .on_action_failed(now, &action, &error, &mut self.pm_actions);
        }
    }

    /// Whether `id` can be abandoned or given a status.
    fn require_open_path(&self, id: PathId) -> Result<(), ActionError> {
        if self.multipath.is_none() {
            return Err(ActionError::NotMultipath);
        }
        match self.paths.get(&id) {
            Some(p) if p.state != PathState::Abandoned => Ok(()),
            _ => Err(ActionError::NoSuchPath(id)),
        }
    }

    /// The peer's address on the first path not abandoned (or on any path).
    fn default_remote(&self) -> Option<SocketAddr> {
        self.paths
            .values()
            .find(|p| p.state != PathState::Abandoned)
            .or_else(|| self.paths.values().next())
            .map(|p| p.remote)
    }

    /// Adds who asked for a path change to a qlog event's data.
    pub(super) fn add_origin(&self, data: &mut serde_json::Value, origin: Origin<'_>) {
        if self.qlog.is_none() {
            return;
        }
        let serde_json::Value::Object(map) = data else {
            return;
        };
        let trigger = match origin {
            Origin::Application => "application",
            Origin::Protocol(why) => why,
            Origin::PathManager(why) => {
                map.insert("path_manager".into(), self.path_manager.name().into());
                why
            }
        };
        map.insert("trigger".into(), trigger.into());
    }
}
