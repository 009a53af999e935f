//! The state shared by the driver task and the application handles: the sans-IO endpoint,
//! the sockets, and per connection the wakers of tasks waiting for something to happen.
//!
//! Every access goes through one mutex. The driver feeds datagrams and timeouts to the
//! sans-IO endpoint and then, in the same critical section, turns the connections' events
//! into wake-ups ([`State::dispatch_events`]). An application call that finds nothing to do
//! registers its waker in the same critical section in which it looked, so no event can
//! slip between the look and the registration.

use crate::socket::Socket;
use polypath_quic::sched::PathEvent;
use polypath_quic::streams::StreamEvent;
use polypath_quic::{ConnectionError, ConnectionHandle, Dir, Event, PathId, StreamId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Waker};
use std::time::Instant;

/// Path events kept for [`crate::Connection::path_event`] before the oldest are dropped.
const PATH_EVENT_BACKLOG: usize = 256;

/// The mutex-protected state and nothing else: handles hold an `Arc<Shared>`.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    pub fn new(state: State) -> Self {
        Shared {
            state: Mutex::new(state),
        }
    }

    /// Locks the state. A panic while the lock was held (a bug) leaves the state as it was;
    /// later users carry on with it rather than propagate the panic.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Everything behind the mutex.
#[derive(Debug)]
pub(crate) struct State {
    pub quic: polypath_quic::Endpoint,
    pub sockets: Vec<Arc<Socket>>,
    /// The sockets queue ICMP errors (client endpoints), see [`Socket::bind`].
    pub transport_errors: bool,
    /// The tasks waiting for each socket's ICMP errors; stopped with the driver.
    pub error_watchers: Vec<tokio::task::AbortHandle>,
    pub conns: BTreeMap<ConnectionHandle, ConnWaiters>,
    /// Server connections not yet taken by [`crate::Endpoint::accept`].
    pub incoming: VecDeque<ConnectionHandle>,
    pub accept_wakers: Vec<Waker>,
    /// Tasks waiting in [`crate::Endpoint::wait_idle`].
    pub idle_wakers: Vec<Waker>,
    pub driver_waker: Option<Waker>,
    /// Live [`crate::Endpoint`] handles; the driver stops once this is zero and no
    /// connection is left.
    pub endpoint_refs: usize,
    /// Set by [`crate::Endpoint::close`]: no more connections are accepted.
    pub closed: bool,
    /// The driver task ended (endpoint dropped, or the runtime went away).
    pub driver_gone: bool,
}

impl State {
    pub fn new(
        quic: polypath_quic::Endpoint,
        sockets: Vec<Arc<Socket>>,
        transport_errors: bool,
    ) -> Self {
        State {
            quic,
            sockets,
            transport_errors,
            error_watchers: Vec::new(),
            conns: BTreeMap::new(),
            incoming: VecDeque::new(),
            accept_wakers: Vec::new(),
            idle_wakers: Vec::new(),
            driver_waker: None,
            endpoint_refs: 1,
            closed: false,
            driver_gone: false,
        }
    }

    /// Asks the driver to run: the application queued data, closed something, or opened a
    /// path.
    pub fn wake_driver(&self) {
        if let Some(w) = &self.driver_waker {
            w.wake_by_ref();
        }
    }

    /// The socket bound to `addr`: an exact match, or a wildcard socket on the same port.
    pub fn socket_for(&self, addr: SocketAddr) -> Option<&Arc<Socket>> {
        self.sockets
            .iter()
            .find(|s| s.local_addr() == addr)
            .or_else(|| {
                self.sockets.iter().find(|s| {
                    let l = s.local_addr();
                    l.ip().is_unspecified()
                        && l.port() == addr.port()
                        && l.is_ipv4() == addr.is_ipv4()
                })
            })
    }

    /// Registers the connections the sans-IO endpoint accepted since the last call.
    pub fn take_new_incoming(&mut self) {
        while let Some(h) = self.quic.accept() {
            self.conns.insert(h, ConnWaiters::default());
            if self.closed {
                self.close_connection(h, 0, b"endpoint closed");
                continue;
            }
            self.incoming.push_back(h);
            wake_all(&mut self.accept_wakers);
        }
    }

    /// Turns the events of the connections touched since the last call into wake-ups and
    /// forgets connections that are drained and no longer referenced by the application.
    pub fn dispatch_events(&mut self) {
        self.take_new_incoming();
        let mut gone = Vec::new();
        for h in self.quic.take_touched() {
            let Some(waiters) = self.conns.get_mut(&h) else {
                continue;
            };
            let mut path_changed = false;
            // Whatever touched the connection (a transmit, an acknowledgment) may have
            // drained its datagram queue.
            wake_all(&mut waiters.datagram_senders);
            while let Some(event) = self.quic.poll_connection_event(h) {
                path_changed |= matches!(
                    event,
                    Event::Path(
                        PathEvent::Opened(_) | PathEvent::Validated(_) | PathEvent::Abandoned(_)
                    )
                );
                waiters.on_event(event);
            }
            if path_changed && let Some(conn) = self.quic.connection(h) {
                waiters.timeline.learn_addresses(conn);
            }
            let drained = self.quic.connection(h).is_none_or(|c| c.is_drained());
            if drained {
                if waiters.lost.is_none() {
                    let reason = self
                        .quic
                        .connection(h)
                        .and_then(|c| c.close_reason().cloned())
                        .unwrap_or(ConnectionError::LocallyClosed);
                    waiters.on_event(Event::ConnectionLost(reason));
                }
                if waiters.refs == 0 {
                    gone.push(h);
                }
            }
        }
        for h in gone {
            self.forget(h);
        }
    }

    /// Removes a connection everywhere.
    pub fn forget(&mut self, h: ConnectionHandle) {
        self.quic.remove(h);
        self.conns.remove(&h);
        self.incoming.retain(|i| *i != h);
        if self.conns.is_empty() {
            wake_all(&mut self.idle_wakers);
        }
    }

    /// Closes a connection on behalf of the application (or of a dropped handle).
    pub fn close_connection(&mut self, h: ConnectionHandle, code: u64, reason: &[u8]) {
        let now = std::time::Instant::now();
        let code = polypath_quic::VarInt::saturating(code);
        if let Some(conn) = self.quic.connection_mut(h) {
            conn.close(now, code, reason);
        }
        if let Some(w) = self.conns.get_mut(&h)
            && w.lost.is_none()
        {
            w.on_event(Event::ConnectionLost(ConnectionError::LocallyClosed));
        }
        self.wake_driver();
    }

    /// True when the driver has nothing left to do: no endpoint handle and no connection.
    pub fn is_finished(&self) -> bool {
        self.endpoint_refs == 0 && self.conns.is_empty()
    }
}

/// Who waits for what on one connection, and what the application was told.
#[derive(Debug, Default)]
pub(crate) struct ConnWaiters {
    /// Live application handles ([`crate::Connection`] and its streams share one).
    pub refs: usize,
    pub connected: bool,
    pub lost: Option<ConnectionError>,
    pub handshake: Vec<Waker>,
    pub readers: BTreeMap<StreamId, Waker>,
    pub writers: BTreeMap<StreamId, Waker>,
    /// Streams whose data and FIN were all acknowledged.
    pub finished: BTreeSet<StreamId>,
    pub finishers: BTreeMap<StreamId, Waker>,
    /// Accept (index 0: bidirectional, 1: unidirectional).
    pub accept: [Vec<Waker>; 2],
    /// Open (waiting for the peer's stream limit).
    pub open: [Vec<Waker>; 2],
    pub datagrams: Vec<Waker>,
    /// Tasks waiting for the connection's outgoing datagram queue to drain
    /// ([`crate::Connection::datagram_room`]); woken whenever the connection is touched.
    pub datagram_senders: Vec<Waker>,
    pub path_events: VecDeque<PathEvent>,
    pub path_waiters: Vec<Waker>,
    /// Woken whenever a datagram for the connection was processed (for retries that
    /// depend on frames without events of their own, such as new connection IDs).
    pub progress: Vec<Waker>,
    pub closed: Vec<Waker>,
    /// When each path was opened, validated and abandoned.
    pub timeline: Timeline,
}

/// When the paths of one connection were opened, validated and abandoned, as the driver
/// dispatched their events.
#[derive(Debug)]
pub(crate) struct Timeline {
    /// When the application handle's state was created: the first path's opening.
    pub start: Instant,
    pub paths: BTreeMap<PathId, PathTimes>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            start: Instant::now(),
            paths: BTreeMap::new(),
        }
    }
}

impl Timeline {
    fn on_path_event(&mut self, event: &PathEvent) {
        let now = Instant::now();
        match *event {
            PathEvent::Opened(id) => {
                self.entry(id, now);
            }
            PathEvent::Validated(id) => {
                self.entry(id, now).validated.get_or_insert(now);
            }
            PathEvent::Abandoned(id) => {
                self.entry(id, now).abandoned.get_or_insert(now);
            }
            _ => {}
        }
    }

    /// The times of path `id`, opened at `now` if it is new (the first path: at the start).
    fn entry(&mut self, id: PathId, now: Instant) -> &mut PathTimes {
        let opened = if id == PathId(0) { self.start } else { now };
        self.paths.entry(id).or_insert(PathTimes {
            id,
            local: None,
            remote: None,
            opened,
            validated: None,
            abandoned: None,
            stats_at_abandon: None,
        })
    }

    /// Notes the addresses of the connection's paths (and any path not seen yet).
    fn learn_addresses(&mut self, conn: &polypath_quic::Connection) {
        let now = Instant::now();
        for p in conn.paths() {
            let times = self.entry(p.snapshot.id, now);
            times.local.get_or_insert(p.snapshot.local);
            times.remote.get_or_insert(p.snapshot.remote);
            if times.abandoned.is_some() && times.stats_at_abandon.is_none() {
                times.stats_at_abandon = Some(p.stats);
            }
        }
    }

    /// Every path's times, the first path included even without events of its own.
    pub fn all(&self) -> Vec<PathTimes> {
        let mut out: Vec<PathTimes> = self.paths.values().copied().collect();
        if !self.paths.contains_key(&PathId(0)) {
            out.insert(
                0,
                PathTimes {
                    id: PathId(0),
                    local: None,
                    remote: None,
                    opened: self.start,
                    validated: None,
                    abandoned: None,
                    stats_at_abandon: None,
                },
            );
        }
        out
    }
}

/// When a path was opened, validated and abandoned (as the driver saw the connection's path
/// events; see [`crate::Connection::path_times`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathTimes {
    /// The path.
    pub id: PathId,
    /// Its local address, once known.
    pub local: Option<SocketAddr>,
    /// The peer's address, once known.
    pub remote: Option<SocketAddr>,
    /// When it was opened; for the first path (ID 0), when the connection was created
    /// (connect or accept).
    pub opened: Instant,
    /// When its validation succeeded, if it did (the first path has no such event).
    pub validated: Option<Instant>,
    /// When it was abandoned (by either side), if it was.
    pub abandoned: Option<Instant>,
    /// The path's counters when it was abandoned: a path is discarded (and gone from
    /// [`crate::Connection::paths`]) shortly after.
    pub stats_at_abandon: Option<polypath_quic::PathStats>,
}

impl ConnWaiters {
    fn on_event(&mut self, event: Event) {
        match event {
            Event::Connected => {
                self.connected = true;
                wake_all(&mut self.handshake);
                wake_all(&mut self.open[0]);
                wake_all(&mut self.open[1]);
                wake_all(&mut self.progress);
            }
            Event::HandshakeConfirmed => wake_all(&mut self.progress),
            Event::Stream(e) => self.on_stream_event(e),
            Event::DatagramReceived => wake_all(&mut self.datagrams),
            Event::Path(e) => {
                self.timeline.on_path_event(&e);
                if self.path_events.len() == PATH_EVENT_BACKLOG {
                    self.path_events.pop_front();
                }
                self.path_events.push_back(e);
                wake_all(&mut self.path_waiters);
                wake_all(&mut self.progress);
            }
            Event::ConnectionLost(reason) => {
                self.lost.get_or_insert(reason);
                self.wake_everyone();
            }
        }
    }

    fn on_stream_event(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Opened { dir } => wake_all(&mut self.accept[dir_index(dir)]),
            StreamEvent::Available { dir } => wake_all(&mut self.open[dir_index(dir)]),
            StreamEvent::Readable { id } => wake_one(&mut self.readers, id),
            StreamEvent::Writable { id } => wake_one(&mut self.writers, id),
            StreamEvent::Finished { id } => {
                self.finished.insert(id);
                wake_one(&mut self.finishers, id);
            }
            StreamEvent::Stopped { id, .. } => {
                wake_one(&mut self.writers, id);
                wake_one(&mut self.finishers, id);
            }
        }
    }

    fn wake_everyone(&mut self) {
        wake_all(&mut self.handshake);
        for (_, w) in std::mem::take(&mut self.readers) {
            w.wake();
        }
        for (_, w) in std::mem::take(&mut self.writers) {
            w.wake();
        }
        for (_, w) in std::mem::take(&mut self.finishers) {
            w.wake();
        }
        for list in self.accept.iter_mut().chain(self.open.iter_mut()) {
            wake_all(list);
        }
        wake_all(&mut self.datagrams);
        wake_all(&mut self.datagram_senders);
        wake_all(&mut self.path_waiters);
        wake_all(&mut self.progress);
        wake_all(&mut self.closed);
    }
}

/// Index of a direction in the per-direction arrays.
pub(crate) fn dir_index(dir: Dir) -> usize {
    match dir {
        Dir::Bi => 0,
        Dir::Uni => 1,
    }
}

pub(crate) fn wake_all(wakers: &mut Vec<Waker>) {
    for w in wakers.drain(..) {
        w.wake();
    }
}

fn wake_one(wakers: &mut BTreeMap<StreamId, Waker>, id: StreamId) {
    if let Some(w) = wakers.remove(&id) {
        w.wake();
    }
}

/// Adds the current task's waker to a list unless it is there already.
pub(crate) fn register(wakers: &mut Vec<Waker>, cx: &Context<'_>) {
    if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
        wakers.push(cx.waker().clone());
    }
}
