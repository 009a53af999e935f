//! Path managers: which paths a connection has.
//!
//! A [`PathManager`] is a plug-in, one per connection, that decides when paths are opened
//! and abandoned, which status they carry and, at path changes, what their congestion
//! windows are. It never touches the connection: it *hears*
//!
//! - link-layer events ([`PathManager::on_link_event`]), with the local IP address of the
//!   interface each concerns, as given to [`crate::Connection::handle_link_event`];
//! - path events ([`PathManager::on_path_event`]): opened, validated, abandoned, status and
//!   congestion changes, throughput predictions;
//! - periodic path state ([`PathManager::on_tick`]), at the times it asks for with
//!   [`PathManager::next_tick`];
//!
//! each time with a read-only [`PathSnapshot`] of every path the connection still holds
//! (abandoned ones included until they are discarded), and *asks* by pushing
//! [`PathAction`]s. The connection applies the actions in order: right after a link event
//! or a tick, and for path events (which may arise in the middle of processing a packet, or
//! from the application's own calls) before it next sends. It logs each action in qlog with
//! its reason (the `trigger` field, next to `path_manager`) and reports those it cannot
//! carry out to [`PathManager::on_action_failed`]. The application keeps its own controls
//! ([`crate::Connection::open_path`], [`crate::Connection::abandon_path`], ...); a path
//! manager only adds to them.
//!
//! # Built-in path managers
//!
//! | path manager | policy | source |
//! |---|---|---|
//! | [`Manual`] | nothing beyond what the application asks | — |
//! | [`FullMesh`] | a path from every configured local address; abandoned on link down, re-opened on link up | Linux MPTCP fullmesh |
//! | [`MakeBeforeBreak`] | add a path through the target cell on A4 (or high predicted throughput), abandon the source on A2 (or low predicted throughput) once the new path is validated; split the window at addition | LAMP5G Section V |
//! | [`FastFailover`] | abandon a path that stopped acknowledging while another works, so its data moves at once | Linux MPTCP "potentially failed" subflows |
//!
//! [`path_manager_by_name`] builds any of them from its name.
//!
//! # Link events and local addresses
//!
//! Link-layer events name a UE interface (`iface`); the driver that owns the interfaces
//! maps each to the local IP address of that interface and passes it with the event. Path
//! managers therefore reason per local IP address: the paths an event concerns are those
//! whose [`PathSnapshot::local`] has that IP. In the simulator every radio path of a UE
//! (each cell group of NR-DC, each radio of a multi-RAT UE) is a separate interface with its
//! own address. A handover target cell is reached through the interface the event names:
//! an A4 event on the secondary cell group's interface means a new path from that
//! interface's address goes through the target cell. When opening a path needs a local
//! *socket* address and only the IP is known, the built-ins use a configured local socket
//! address with that IP, or else the port of the connection's existing paths (drivers such as
//! the simulator bind the same port on every interface).
//
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3
//# However, this document does not specify when a client decides to initiate or close a path,
//# or how multiple open paths are used for sending.

mod failover;
mod full_mesh;
mod make_before_break;
mod manual;

pub use failover::{FastFailover, FastFailoverFactory, FastFailoverParams};
pub use full_mesh::{FULL_MESH_RETRY_INTERVAL, FullMesh, FullMeshFactory};
pub use make_before_break::{
    MakeBeforeBreak, MakeBeforeBreakFactory, PathTrigger, RrcEventTrigger, ThroughputTrigger,
    TriggerVerdict,
};
pub use manual::{Manual, ManualFactory};

use crate::connection::OpenPathError;
use crate::error::TransportErrorCode;
use crate::sched::{PathEvent, PathSnapshot, PathState, PathStatus};
use crate::shared::PathId;
use polypath_link::LinkEvent;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// Something a path manager asks the connection to do. Every action carries a short
/// `reason` that qlog records as the event's `trigger`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathAction {
    /// Open a new path from `local` (client only) and validate it.
    Open {
        /// The local socket address packets on the path leave from.
        local: SocketAddr,
        /// The peer address; `None` for the peer's address on the connection's first open
        /// path.
        remote: Option<SocketAddr>,
        /// The status to announce for the new path.
        status: PathStatus,
        /// Why.
        reason: String,
    },
    /// Abandon a path (PATH_ABANDON with `code`). Abandoning the last open path closes the
    /// connection (draft-ietf-quic-multipath-21 section 3.4), so the built-ins never do.
    Abandon {
        /// The path.
        path: PathId,
        /// The error code sent in PATH_ABANDON.
        code: TransportErrorCode,
        /// What happens to the data in flight on the path. `false`: it goes back to the send
        /// queues at once, for the other paths to carry (a path that failed). `true`: the
        /// path still works, so its in-flight packets are left to be acknowledged (through
        /// the other paths) and only what is still unacknowledged one PTO later is sent
        /// again elsewhere; retransmitting at once would spend the other paths' windows on
        /// duplicates of packets about to arrive (a make-before-break handover source).
        drain: bool,
        /// Why.
        reason: String,
    },
    /// Change our status of a path (PATH_STATUS_AVAILABLE / PATH_STATUS_BACKUP).
    SetStatus {
        /// The path.
        path: PathId,
        /// The new status.
        status: PathStatus,
        /// Why.
        reason: String,
    },
    /// Set a path's congestion window (see [`crate::cc::CongestionController::set_window`]).
    SetWindow {
        /// The path.
        path: PathId,
        /// The window in bytes.
        bytes: u64,
        /// Why.
        reason: String,
    },
}

impl PathAction {
    /// The action's reason.
    pub fn reason(&self) -> &str {
        match self {
            PathAction::Open { reason, .. }
            | PathAction::Abandon { reason, .. }
            | PathAction::SetStatus { reason, .. }
            | PathAction::SetWindow { reason, .. } => reason,
        }
    }

    /// The path the action concerns, for all but [`PathAction::Open`].
    pub fn path(&self) -> Option<PathId> {
        match self {
            PathAction::Open { .. } => None,
            PathAction::Abandon { path, .. }
            | PathAction::SetStatus { path, .. }
            | PathAction::SetWindow { path, .. } => Some(*path),
        }
    }
}

/// Why the connection could not carry out a [`PathAction`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// Opening the path failed.
    #[error("cannot open the path: {0}")]
    Open(#[from] OpenPathError),
    /// The connection has no such path, or it is already abandoned.
    #[error("no open path {0}")]
    NoSuchPath(PathId),
    /// Multipath QUIC was not negotiated, so paths cannot be abandoned or given a status.
    #[error("multipath is not negotiated")]
    NotMultipath,
    /// No peer address is known to open a path to.
    #[error("no peer address known")]
    NoRemote,
}

/// A path manager for one connection. See the [module documentation](self).
///
/// Every callback gets the current snapshots of all paths (in path ID order) and a list to
/// push actions to; the defaults do nothing.
pub trait PathManager: Send + fmt::Debug {
    /// A short name for logs and summaries.
    fn name(&self) -> &str;

    /// A link-layer event concerning the interface with local address `local` (`None` when
    /// the driver could not map the event to a local address). The connection has already
    /// folded it into the paths' [`PathSnapshot::link`] hints.
    fn on_link_event(
        &mut self,
        _now: Instant,
        _event: &LinkEvent,
        _local: Option<IpAddr>,
        _paths: &[PathSnapshot],
        _actions: &mut Vec<PathAction>,
    ) {
    }

    /// A path event (also when it was caused by this path manager's own actions).
    fn on_path_event(
        &mut self,
        _now: Instant,
        _event: &PathEvent,
        _paths: &[PathSnapshot],
        _actions: &mut Vec<PathAction>,
    ) {
    }

    /// Periodic path state: called once when the handshake is confirmed, whenever the peer
    /// makes a new path ID usable (issues connection IDs for it), and at the time
    /// [`PathManager::next_tick`] returns.
    fn on_tick(&mut self, _now: Instant, _paths: &[PathSnapshot], _actions: &mut Vec<PathAction>) {}

    /// When [`PathManager::on_tick`] should next be called, if at all. Asked after every
    /// callback; a time not after the previous tick counts as none.
    fn next_tick(&self) -> Option<Instant> {
        None
    }

    /// An action this path manager asked for could not be carried out.
    fn on_action_failed(
        &mut self,
        _now: Instant,
        _action: &PathAction,
        _error: &ActionError,
        _actions: &mut Vec<PathAction>,
    ) {
    }

    /// Applies a run-time parameter given as `key=value`; returns an error message for keys
    /// or values the path manager does not understand.
    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        Err(format!(
            "path manager {} has no parameter {key} (value {value})",
            self.name()
        ))
    }
}

/// Builds one path manager per connection.
pub trait PathManagerFactory: Send + Sync {
    /// A new path manager for a connection.
    fn build(&self) -> Box<dyn PathManager>;
}

/// The built-in path manager factories by name, with their default parameters
/// (case-insensitive):
///
/// | name | path manager |
/// |---|---|
/// | `none` (also `default`, `manual`) | [`Manual`] |
/// | `fullmesh` (also `full_mesh`) | [`FullMesh`] without local addresses (set them with the `locals` parameter) |
/// | `lamp5g` (also `make_before_break`, `mbb`) | [`MakeBeforeBreak`] with the RRC event trigger (A4 adds, A2 removes) |
/// | `lamp5g_throughput` | [`MakeBeforeBreak`] with [`ThroughputTrigger::default`] |
/// | `failover` (also `fast_failover`) | [`FastFailover`], [`FastFailoverParams::default`] |
///
/// Returns `None` for any other name.
pub fn path_manager_by_name(name: &str) -> Option<Arc<dyn PathManagerFactory>> {
    let factory: Arc<dyn PathManagerFactory> = match name.to_ascii_lowercase().as_str() {
        "none" | "default" | "manual" => Arc::new(ManualFactory),
        "fullmesh" | "full_mesh" => Arc::new(FullMeshFactory::default()),
        "lamp5g" | "make_before_break" | "mbb" => Arc::new(MakeBeforeBreakFactory::default()),
        "lamp5g_throughput" => Arc::new(MakeBeforeBreakFactory::with_triggers(vec![Arc::new(
            ThroughputTrigger::default(),
        )])),
        "failover" | "fast_failover" => Arc::new(FastFailoverFactory::default()),
        _ => return None,
    };
    Some(factory)
}

/// The paths not yet abandoned that send from `ip`.
pub fn open_paths_on(paths: &[PathSnapshot], ip: IpAddr) -> impl Iterator<Item = &PathSnapshot> {
    paths
        .iter()
        .filter(move |p| p.local.ip() == ip && p.state != PathState::Abandoned)
}

/// The local socket address to open a path from the interface with address `ip`: a
/// configured one with that IP, else `ip` with the port of the connection's first path
/// (drivers that bind one port on every interface, like the simulator).
pub fn local_socket_for(
    ip: IpAddr,
    configured: &[SocketAddr],
    paths: &[PathSnapshot],
) -> Option<SocketAddr> {
    configured
        .iter()
        .find(|a| a.ip() == ip)
        .copied()
        .or_else(|| paths.first().map(|p| SocketAddr::new(ip, p.local.port())))
}

/// Parses a comma-separated list of socket addresses (`10.0.0.1:5000,10.0.1.1:5000`).
pub(crate) fn parse_socket_list(key: &str, value: &str) -> Result<Vec<SocketAddr>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<SocketAddr>()
                .map_err(|_| format!("{key}: {s:?} is not a socket address (ip:port)"))
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sched::tests::snapshot;
    use polypath_link::LinkEventKind;

    /// A validated path sending from `local` with the given window.
    pub(crate) fn path_on(id: u32, local: &str, cwnd: u64) -> PathSnapshot {
        let mut p = snapshot(id, 20, true);
        p.local = local.parse().unwrap();
        p.remote = "10.9.9.9:4433".parse().unwrap();
        p.cwnd = cwnd;
        p
    }

    /// A link event on interface `iface`.
    pub(crate) fn link_event(iface: u16, kind: LinkEventKind) -> LinkEvent {
        LinkEvent::new(0, 0, iface, kind)
    }

    #[test]
    fn path_managers_by_name() {
        for (name, built) in [
            ("none", "none"),
            ("DEFAULT", "none"),
            ("fullmesh", "fullmesh"),
            ("lamp5g", "lamp5g"),
            ("mbb", "lamp5g"),
            ("lamp5g_throughput", "lamp5g"),
            ("failover", "failover"),
        ] {
            let factory = path_manager_by_name(name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(factory.build().name(), built, "{name}");
        }
        assert!(path_manager_by_name("ndiffports").is_none());
    }

    #[test]
    fn local_sockets_are_resolved_by_ip() {
        let paths = [path_on(0, "10.0.0.1:5000", 10_000)];
        let ip: IpAddr = "10.0.1.1".parse().unwrap();
        assert_eq!(
            local_socket_for(ip, &[], &paths),
            Some("10.0.1.1:5000".parse().unwrap())
        );
        let configured = ["10.0.1.1:6000".parse().unwrap()];
        assert_eq!(
            local_socket_for(ip, &configured, &paths),
            Some(configured[0])
        );
        assert_eq!(local_socket_for(ip, &[], &[]), None);
        assert_eq!(
            parse_socket_list("locals", "10.0.0.1:1, 10.0.0.2:2")
                .unwrap()
                .len(),
            2
        );
        assert!(parse_socket_list("locals", "10.0.0.1").is_err());
    }
}
