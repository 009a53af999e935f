//! Full mesh: a path from every configured local address.

use super::{
    ActionError, PathAction, PathManager, PathManagerFactory, open_paths_on, parse_socket_list,
};
use crate::connection::OpenPathError;
use crate::error::TransportErrorCode;
use crate::sched::{PathEvent, PathSnapshot, PathState, PathStatus};
use polypath_link::{LinkEvent, LinkEventKind};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// How long the full mesh waits before trying again to open a path that could not be
/// opened (typically because the peer had not yet issued connection IDs for a new path ID).
pub const FULL_MESH_RETRY_INTERVAL: Duration = Duration::from_millis(50);

/// Where one configured local address stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// It should get a path; the next attempt is not before `retry_at`.
    Open { retry_at: Option<Instant> },
    /// It has (or had) a path; a new one is opened only after a link up.
    Have,
    /// Its interface is down.
    Down,
}

/// A path from every configured local address to the peer, like Linux MPTCP's `fullmesh`
/// path manager.
///
/// - Once the handshake is confirmed, it opens a path from each configured local address
///   (matched by IP) that has none, retrying every `retry_interval` until the connection
///   accepts the path.
/// - A [`LinkEventKind::LinkDown`] for an interface abandons the paths from its address
///   (`PATH_UNSTABLE_OR_POOR`), except when no other path is usable: abandoning the last path
///   would close the connection, so it is kept and may resume when the link returns.
/// - A [`LinkEventKind::LinkUp`] for an interface whose path was abandoned or lost opens a
///   new one at once. A path lost without link events (the peer abandoned it, validation
///   failed) is re-opened only after the next link up on its interface, so a broken
///   interface does not burn a path ID per retry.
///
/// Parameters ([`PathManager::configure`]): `locals` (comma-separated socket addresses),
/// `remote` (the peer address, default the first path's), `retry_ms`.
#[derive(Debug, Clone)]
pub struct FullMesh {
    locals: Vec<(SocketAddr, Want)>,
    remote: Option<SocketAddr>,
    retry_interval: Duration,
    /// The handshake is confirmed (the first tick came).
    connected: bool,
    /// The connection cannot open paths (a server, or multipath not negotiated).
    disabled: bool,
    next: Option<Instant>,
}

impl FullMesh {
    /// A full mesh over `locals`, to `remote` (`None`: the peer's address on the first path).
    pub fn new(locals: Vec<SocketAddr>, remote: Option<SocketAddr>) -> Self {
        FullMesh {
            locals: locals
                .into_iter()
                .map(|a| (a, Want::Open { retry_at: None }))
                .collect(),
            remote,
            retry_interval: FULL_MESH_RETRY_INTERVAL,
            connected: false,
            disabled: false,
            next: None,
        }
    }

    /// The configured local addresses.
    pub fn locals(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.locals.iter().map(|(a, _)| *a)
    }

    /// Opens the paths that are wanted and due.
    fn ensure(&mut self, now: Instant, paths: &[PathSnapshot], actions: &mut Vec<PathAction>) {
        self.next = None;
        if !self.connected || self.disabled {
            return;
        }
        for (local, want) in &mut self.locals {
            let Want::Open { retry_at } = *want else {
                continue;
            };
            if open_paths_on(paths, local.ip()).next().is_some() {
                *want = Want::Have;
                continue;
            }
            if retry_at.is_some_and(|t| t > now) {
                continue;
            }
            actions.push(PathAction::Open {
                local: *local,
                remote: self.remote,
                status: PathStatus::Available,
                reason: "full_mesh".into(),
            });
            *want = Want::Open {
                retry_at: Some(now + self.retry_interval),
            };
        }
        self.next = self
            .locals
            .iter()
            .filter_map(|(_, w)| match w {
                Want::Open { retry_at } => *retry_at,
                _ => None,
            })
            .min();
    }

    fn on_link_down(&mut self, ip: IpAddr, paths: &[PathSnapshot], actions: &mut Vec<PathAction>) {
        for (local, want) in &mut self.locals {
            if local.ip() == ip {
                *want = Want::Down;
            }
        }
        let other_usable = paths
            .iter()
            .any(|p| p.local.ip() != ip && p.state == PathState::Validated);
        if !other_usable {
            return;
        }
        for p in open_paths_on(paths, ip) {
            actions.push(PathAction::Abandon {
                path: p.id,
                code: TransportErrorCode::PATH_UNSTABLE_OR_POOR,
                drain: false,
                reason: "link_down".into(),
            });
        }
    }

    fn on_link_up(&mut self, ip: IpAddr, paths: &[PathSnapshot]) {
        let has_path = open_paths_on(paths, ip).next().is_some();
        for (local, want) in &mut self.locals {
            if local.ip() == ip {
                *want = if has_path {
                    Want::Have
                } else {
                    Want::Open { retry_at: None }
                };
            }
        }
    }
}

impl PathManager for FullMesh {
    fn name(&self) -> &str {
        "fullmesh"
    }

    fn on_link_event(
        &mut self,
        now: Instant,
        event: &LinkEvent,
        local: Option<IpAddr>,
        paths: &[PathSnapshot],
        actions: &mut Vec<PathAction>,
    ) {
        let Some(ip) = local else {
            return;
        };
        match event.event {
            LinkEventKind::LinkDown { .. } => self.on_link_down(ip, paths, actions),
            LinkEventKind::LinkUp { .. } => self.on_link_up(ip, paths),
            _ => return,
        }
        self.ensure(now, paths, actions);
    }

    fn on_path_event(
        &mut self,
        now: Instant,
        event: &PathEvent,
        paths: &[PathSnapshot],
        actions: &mut Vec<PathAction>,
    ) {
        if matches!(event, PathEvent::Opened(_) | PathEvent::Abandoned(_)) {
            self.ensure(now, paths, actions);
        }
    }

    fn on_tick(&mut self, now: Instant, paths: &[PathSnapshot], actions: &mut Vec<PathAction>) {
        self.connected = true;
        self.ensure(now, paths, actions);
    }

    fn next_tick(&self) -> Option<Instant> {
        self.next
    }

    fn on_action_failed(
        &mut self,
        _now: Instant,
        action: &PathAction,
        error: &ActionError,
        _actions: &mut Vec<PathAction>,
    ) {
        if let (
            PathAction::Open { .. },
            ActionError::Open(OpenPathError::NotClient | OpenPathError::MultipathNotNegotiated),
        ) = (action, error)
            && self.connected
        {
            // Nothing will change that; stop trying.
            self.disabled = true;
            self.next = None;
        }
    }

    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "locals" => {
                *self = FullMesh {
                    retry_interval: self.retry_interval,
                    connected: self.connected,
                    ..FullMesh::new(parse_socket_list(key, value)?, self.remote)
                };
                Ok(())
            }
            "remote" => {
                self.remote = Some(super::parse_socket_addr(key, value)?);
                Ok(())
            }
            "retry_ms" => {
                let ms = crate::sched::parse_non_negative(key, value)?;
                self.retry_interval = Duration::from_secs_f64(ms.max(1.0) / 1000.0);
                Ok(())
            }
            _ => Err(format!("fullmesh has no parameter {key} (value {value})")),
        }
    }
}

/// Builds [`FullMesh`] path managers.
#[derive(Debug, Clone, Default)]
pub struct FullMeshFactory {
    /// The local socket addresses to open paths from.
    pub locals: Vec<SocketAddr>,
    /// The peer address; `None` for the peer's address on the first path.
    pub remote: Option<SocketAddr>,
    /// Wait between attempts to open a path ([`FULL_MESH_RETRY_INTERVAL`] if `None`).
    pub retry_interval: Option<Duration>,
}

impl PathManagerFactory for FullMeshFactory {
    fn build(&self) -> Box<dyn PathManager> {
        let mut pm = FullMesh::new(self.locals.clone(), self.remote);
        if let Some(r) = self.retry_interval {
            pm.retry_interval = r;
        }
        Box::new(pm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pm::tests::{link_event, path_on};
    use crate::shared::PathId;
    use polypath_link::{CellId, DownReason};

    fn mesh() -> FullMesh {
        FullMesh::new(
            vec![
                "10.0.0.1:5000".parse().unwrap(),
                "10.0.1.1:5000".parse().unwrap(),
            ],
            None,
        )
    }

    fn opened_from(actions: &[PathAction]) -> Vec<SocketAddr> {
        actions
            .iter()
            .filter_map(|a| match a {
                PathAction::Open { local, .. } => Some(*local),
                _ => None,
            })
            .collect()
    }

    fn down() -> LinkEventKind {
        LinkEventKind::LinkDown {
            cell: Some(CellId(1)),
            reason: DownReason::NoCoverage,
        }
    }

    #[test]
    fn opens_a_path_per_local_address_once_connected() {
        let t0 = Instant::now();
        let mut pm = mesh();
        let mut actions = Vec::new();
        let mut paths = vec![path_on(0, "10.0.0.1:5000", 12_000)];
        // Nothing before the handshake is confirmed.
        pm.on_path_event(t0, &PathEvent::Validated(PathId(0)), &paths, &mut actions);
        assert!(actions.is_empty());
        pm.on_tick(t0, &paths, &mut actions);
        assert_eq!(
            opened_from(&actions),
            vec!["10.0.1.1:5000".parse().unwrap()]
        );
        // Not again before the retry interval...
        actions.clear();
        assert_eq!(pm.next_tick(), Some(t0 + FULL_MESH_RETRY_INTERVAL));
        pm.on_tick(t0 + Duration::from_millis(10), &paths, &mut actions);
        assert!(actions.is_empty());
        // ...and not at all once the path exists.
        let mut new = path_on(1, "10.0.1.1:5000", 12_000);
        new.state = PathState::Validating;
        paths.push(new);
        pm.on_path_event(t0, &PathEvent::Opened(PathId(1)), &paths, &mut actions);
        assert!(actions.is_empty());
        assert_eq!(pm.next_tick(), None);
    }

    #[test]
    fn link_down_abandons_and_link_up_reopens() {
        let t0 = Instant::now();
        let mut pm = mesh();
        let mut actions = Vec::new();
        let mut paths = vec![
            path_on(0, "10.0.0.1:5000", 12_000),
            path_on(1, "10.0.1.1:5000", 12_000),
        ];
        pm.on_tick(t0, &paths, &mut actions);
        assert!(actions.is_empty(), "{actions:?}");
        let ip1: IpAddr = "10.0.1.1".parse().unwrap();
        pm.on_link_event(t0, &link_event(1, down()), Some(ip1), &paths, &mut actions);
        assert_eq!(
            actions,
            vec![PathAction::Abandon {
                path: PathId(1),
                code: TransportErrorCode::PATH_UNSTABLE_OR_POOR,
                drain: false,
                reason: "link_down".into()
            }]
        );
        actions.clear();
        paths[1].state = PathState::Abandoned;
        pm.on_path_event(t0, &PathEvent::Abandoned(PathId(1)), &paths, &mut actions);
        pm.on_tick(t0 + Duration::from_secs(1), &paths, &mut actions);
        assert!(actions.is_empty(), "no re-open while the link is down");
        let up = LinkEventKind::LinkUp { cell: CellId(2) };
        pm.on_link_event(t0, &link_event(1, up), Some(ip1), &paths, &mut actions);
        assert_eq!(
            opened_from(&actions),
            vec!["10.0.1.1:5000".parse().unwrap()]
        );
    }

    #[test]
    fn a_path_lost_without_link_events_waits_for_link_up() {
        let t0 = Instant::now();
        let mut pm = mesh();
        let mut actions = Vec::new();
        let mut paths = vec![
            path_on(0, "10.0.0.1:5000", 12_000),
            path_on(1, "10.0.1.1:5000", 12_000),
        ];
        pm.on_tick(t0, &paths, &mut actions);
        paths[1].state = PathState::Abandoned;
        pm.on_path_event(t0, &PathEvent::Abandoned(PathId(1)), &paths, &mut actions);
        pm.on_tick(t0 + Duration::from_secs(1), &paths, &mut actions);
        assert!(actions.is_empty(), "{actions:?}");
        let up = LinkEventKind::LinkUp { cell: CellId(2) };
        let ip1: IpAddr = "10.0.1.1".parse().unwrap();
        pm.on_link_event(t0, &link_event(1, up), Some(ip1), &paths, &mut actions);
        assert_eq!(opened_from(&actions).len(), 1);
    }

    #[test]
    fn the_last_path_is_kept_on_link_down() {
        let t0 = Instant::now();
        let mut pm = mesh();
        let mut actions = Vec::new();
        let paths = vec![path_on(0, "10.0.0.1:5000", 12_000)];
        let ip0: IpAddr = "10.0.0.1".parse().unwrap();
        pm.on_link_event(t0, &link_event(0, down()), Some(ip0), &paths, &mut actions);
        assert!(actions.is_empty(), "{actions:?}");
    }

    #[test]
    fn gives_up_when_paths_cannot_be_opened() {
        let t0 = Instant::now();
        let mut pm = mesh();
        let mut actions = Vec::new();
        let paths = vec![path_on(0, "10.0.0.1:5000", 12_000)];
        pm.on_tick(t0, &paths, &mut actions);
        let open = actions.pop().unwrap();
        pm.on_action_failed(
            t0,
            &open,
            &ActionError::Open(OpenPathError::NotClient),
            &mut actions,
        );
        assert_eq!(pm.next_tick(), None);
        pm.on_tick(t0 + Duration::from_secs(1), &paths, &mut actions);
        assert!(actions.is_empty());
    }

    #[test]
    fn configuration() {
        let mut pm = FullMesh::new(Vec::new(), None);
        pm.configure("locals", "10.0.0.1:5000, 10.0.1.1:5000")
            .unwrap();
        assert_eq!(pm.locals().count(), 2);
        pm.configure("remote", "10.0.0.2:4433").unwrap();
        pm.configure("retry_ms", "20").unwrap();
        assert!(pm.configure("locals", "nonsense").is_err());
        assert!(pm.configure("weights", "1").is_err());
    }
}
