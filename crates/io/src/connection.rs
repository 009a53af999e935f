//! Async handles on one connection and its streams.

use crate::error::{DatagramError, PathError, ReadError, WriteError};
use crate::state::{ConnWaiters, PathTimes, Shared, State, dir_index, register};
use bytes::Bytes;
use polypath_link::LinkEvent;
use polypath_quic::connection::OpenPathError;
use polypath_quic::sched::{PathEvent, PathStatus, QosClass};
use polypath_quic::streams::{ReadError as CoreReadError, WriteError as CoreWriteError};
use polypath_quic::{
    ConnectionError, ConnectionHandle, ConnectionStats, Dir, PathId, PathInfo, StreamId,
    TransportErrorCode, VarInt,
};
use std::future::poll_fn;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How long [`Connection::open_path`] waits for a free path ID with connection IDs on both
/// sides (they arrive in NEW_CONNECTION_ID / PATH_NEW_CONNECTION_ID frames shortly after
/// the handshake) before it reports [`OpenPathError::NoPathId`].
const PATH_ID_WAIT: Duration = Duration::from_secs(2);

/// A QUIC connection. Clones (and the streams) share it; when the last handle is dropped
/// an open connection is closed with application code 0, so keep a handle until the peer
/// has what it needs (for example until [`SendStream::finished`] or an application-level
/// reply).
#[derive(Debug, Clone)]
pub struct Connection {
    inner: Arc<ConnRef>,
}

/// Counts as one application reference for the driver.
#[derive(Debug)]
struct ConnRef {
    shared: Arc<Shared>,
    handle: ConnectionHandle,
}

impl Drop for ConnRef {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        let Some(w) = state.conns.get_mut(&self.handle) else {
            return;
        };
        w.refs = w.refs.saturating_sub(1);
        if w.refs > 0 {
            return;
        }
        let drained = state
            .quic
            .connection(self.handle)
            .is_none_or(|c| c.is_drained());
        if drained {
            state.forget(self.handle);
        } else {
            state.close_connection(self.handle, 0, b"");
        }
        state.wake_driver();
    }
}

/// What an operation found, under the lock.
type Parts<'a> = (
    &'a mut polypath_quic::Connection,
    &'a mut ConnWaiters,
    &'a Option<Waker>,
);

impl Connection {
    pub(crate) fn new(shared: Arc<Shared>, handle: ConnectionHandle) -> Self {
        Connection {
            inner: Arc::new(ConnRef { shared, handle }),
        }
    }

    fn handle(&self) -> ConnectionHandle {
        self.inner.handle
    }

    /// Runs `f` under the lock with the connection, its waiters and the driver's waker.
    /// Fails with the reason the connection ended if it is gone.
    fn with<T>(&self, f: impl FnOnce(Parts<'_>) -> T) -> Result<T, ConnectionError> {
        let mut guard = self.inner.shared.lock();
        let State {
            quic,
            conns,
            driver_waker,
            ..
        } = &mut *guard;
        let h = self.inner.handle;
        match (quic.connection_mut(h), conns.get_mut(&h)) {
            (Some(conn), Some(w)) => Ok(f((conn, w, driver_waker))),
            (_, w) => Err(w
                .and_then(|w| w.lost.clone())
                .unwrap_or(ConnectionError::LocallyClosed)),
        }
    }

    /// Like [`Connection::with`] for poll functions: a gone connection is a ready error.
    fn poll_with<T, E>(
        &self,
        lost: impl FnOnce(ConnectionError) -> E,
        f: impl FnOnce(Parts<'_>) -> Poll<Result<T, E>>,
    ) -> Poll<Result<T, E>> {
        match self.with(f) {
            Ok(p) => p,
            Err(e) => Poll::Ready(Err(lost(e))),
        }
    }

    /// Waits for the handshake to complete.
    ///
    /// Succeeds if the handshake completed, even when the connection has ended since (a
    /// peer that completed its handshake, did its work and closed is not a failed
    /// handshake); fails with the reason the connection ended if it ended before.
    pub async fn handshake(&self) -> Result<(), ConnectionError> {
        poll_fn(|cx| {
            let mut guard = self.inner.shared.lock();
            let State { quic, conns, .. } = &mut *guard;
            let h = self.inner.handle;
            let conn = quic.connection(h);
            let Some(w) = conns.get_mut(&h) else {
                return Poll::Ready(Err(ConnectionError::LocallyClosed));
            };
            // Completion is checked before loss.
            if w.connected || conn.is_some_and(|c| !c.is_handshaking()) {
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = &w.lost {
                return Poll::Ready(Err(e.clone()));
            }
            if conn.is_none() {
                return Poll::Ready(Err(ConnectionError::LocallyClosed));
            }
            register(&mut w.handshake, cx);
            Poll::Pending
        })
        .await
    }

    fn poll_open(&self, cx: &mut Context<'_>, dir: Dir) -> Poll<Result<StreamId, ConnectionError>> {
        self.poll_with(
            |e| e,
            |(conn, w, driver)| {
                if let Some(e) = &w.lost {
                    return Poll::Ready(Err(e.clone()));
                }
                match conn.open_stream(dir) {
                    Some(id) => {
                        wake(driver);
                        Poll::Ready(Ok(id))
                    }
                    None => {
                        register(&mut w.open[dir_index(dir)], cx);
                        Poll::Pending
                    }
                }
            },
        )
    }

    fn poll_accept(
        &self,
        cx: &mut Context<'_>,
        dir: Dir,
    ) -> Poll<Result<StreamId, ConnectionError>> {
        self.poll_with(
            |e| e,
            |(conn, w, driver)| {
                if let Some(id) = conn.accept_stream(dir) {
                    // Accepting may raise the peer's stream limit (MAX_STREAMS).
                    wake(driver);
                    return Poll::Ready(Ok(id));
                }
                if let Some(e) = &w.lost {
                    return Poll::Ready(Err(e.clone()));
                }
                register(&mut w.accept[dir_index(dir)], cx);
                Poll::Pending
            },
        )
    }

    /// Opens a bidirectional stream, waiting while the peer's stream limit is reached.
    pub async fn open_bi(&self) -> Result<(SendStream, RecvStream), ConnectionError> {
        let id = poll_fn(|cx| self.poll_open(cx, Dir::Bi)).await?;
        Ok((self.send_stream(id), self.recv_stream(id)))
    }

    /// Opens a unidirectional stream, waiting while the peer's stream limit is reached.
    pub async fn open_uni(&self) -> Result<SendStream, ConnectionError> {
        let id = poll_fn(|cx| self.poll_open(cx, Dir::Uni)).await?;
        Ok(self.send_stream(id))
    }

    /// Waits for the next bidirectional stream the peer opens.
    pub async fn accept_bi(&self) -> Result<(SendStream, RecvStream), ConnectionError> {
        let id = poll_fn(|cx| self.poll_accept(cx, Dir::Bi)).await?;
        Ok((self.send_stream(id), self.recv_stream(id)))
    }

    /// Waits for the next unidirectional stream the peer opens.
    pub async fn accept_uni(&self) -> Result<RecvStream, ConnectionError> {
        let id = poll_fn(|cx| self.poll_accept(cx, Dir::Uni)).await?;
        Ok(self.recv_stream(id))
    }

    fn send_stream(&self, id: StreamId) -> SendStream {
        SendStream {
            conn: self.clone(),
            id,
        }
    }

    fn recv_stream(&self, id: StreamId) -> RecvStream {
        RecvStream {
            conn: self.clone(),
            id,
        }
    }

    /// Queues an unreliable datagram (RFC 9221) of class [`QosClass::BestEffort`].
    pub fn send_datagram(&self, data: Bytes) -> Result<(), DatagramError> {
        self.send_datagram_with_class(data, QosClass::BestEffort)
    }

    /// Queues an unreliable datagram (RFC 9221) of QoS class `class`, which the
    /// connection's scheduler schedules under that class's policy.
    pub fn send_datagram_with_class(
        &self,
        data: Bytes,
        class: QosClass,
    ) -> Result<(), DatagramError> {
        self.with(|(conn, w, driver)| {
            if let Some(e) = &w.lost {
                return Err(DatagramError::ConnectionLost(e.clone()));
            }
            conn.send_datagram_with_class(data, class)
                .map_err(DatagramError::Refused)?;
            wake(driver);
            Ok(())
        })
        .map_err(DatagramError::ConnectionLost)?
    }

    /// Bytes of datagrams queued in the connection and not yet sent.
    pub fn datagram_queued_bytes(&self) -> usize {
        self.with(|(conn, _, _)| conn.datagram_queued_bytes())
            .unwrap_or(0)
    }

    /// Outgoing datagrams the connection dropped so far (its send buffer was full).
    pub fn datagrams_dropped(&self) -> u64 {
        self.with(|(conn, _, _)| conn.datagrams_dropped())
            .unwrap_or(0)
    }

    /// Copies of duplicated datagrams of `class` the stack queued on paths beyond the first
    /// of each (see the stack's `Connection::datagram_copies`).
    pub fn datagram_copies(&self, class: QosClass) -> u64 {
        self.with(|(conn, _, _)| conn.datagram_copies(class))
            .unwrap_or(0)
    }

    /// Waits until fewer than `limit` bytes of datagrams (of `class` only, when given) are
    /// queued in the connection, so that an application keeping its own queues
    /// (priorities, rate limits) hands the connection only what it is about to send.
    /// Fails with the reason the connection ended if it has.
    pub async fn datagram_room(
        &self,
        class: Option<QosClass>,
        limit: usize,
    ) -> Result<(), ConnectionError> {
        poll_fn(|cx| {
            self.poll_with(
                |e| e,
                |(conn, w, _)| {
                    if let Some(e) = &w.lost {
                        return Poll::Ready(Err(e.clone()));
                    }
                    let queued = match class {
                        Some(c) => conn.datagram_queued_bytes_of(c),
                        None => conn.datagram_queued_bytes(),
                    };
                    if queued < limit {
                        return Poll::Ready(Ok(()));
                    }
                    register(&mut w.datagram_senders, cx);
                    Poll::Pending
                },
            )
        })
        .await
    }

    /// Bytes of datagrams of `class` queued in the connection and not yet sent.
    pub fn datagram_queued_bytes_of(&self, class: QosClass) -> usize {
        self.with(|(conn, _, _)| conn.datagram_queued_bytes_of(class))
            .unwrap_or(0)
    }

    /// Largest datagram payload the peer accepts on every path now, if it accepts any.
    pub fn max_datagram_size(&self) -> Option<usize> {
        self.with(|(conn, _, _)| conn.max_datagram_size())
            .ok()
            .flatten()
    }

    /// Waits for the next datagram from the peer.
    pub async fn recv_datagram(&self) -> Result<Bytes, ConnectionError> {
        poll_fn(|cx| {
            self.poll_with(
                |e| e,
                |(conn, w, _)| {
                    if let Some(d) = conn.recv_datagram() {
                        return Poll::Ready(Ok(d));
                    }
                    if let Some(e) = &w.lost {
                        return Poll::Ready(Err(e.clone()));
                    }
                    register(&mut w.datagrams, cx);
                    Poll::Pending
                },
            )
        })
        .await
    }

    /// Opens a new path (Multipath QUIC, client only) from the bound local address `local`
    /// to the peer's address, and returns its ID; validation then runs in the background
    /// (watch [`Connection::path_event`] or [`Connection::paths`]). Waits for the handshake
    /// to be confirmed and, for up to two seconds, for connection IDs for a new path.
    pub async fn open_path(
        &self,
        local: SocketAddr,
        status: PathStatus,
    ) -> Result<PathId, PathError> {
        self.open_path_to(local, None, status).await
    }

    /// As [`Connection::open_path`], to the peer's address `remote` (the address the
    /// connection was made to when `None`): a path to another of the server's
    /// interfaces.
    pub async fn open_path_to(
        &self,
        local: SocketAddr,
        remote: Option<SocketAddr>,
        status: PathStatus,
    ) -> Result<PathId, PathError> {
        let attempt = poll_fn(|cx| self.poll_open_path(cx, local, remote, status));
        match tokio::time::timeout(PATH_ID_WAIT, attempt).await {
            Ok(result) => result,
            Err(_) => self
                .with(|(conn, _, driver)| {
                    let remote = remote
                        .or_else(|| conn.remote_address())
                        .ok_or(PathError::Open(OpenPathError::Closed))?;
                    let id = conn
                        .open_path(Instant::now(), local, remote, status)
                        .map_err(PathError::Open)?;
                    wake(driver);
                    Ok(id)
                })
                .map_err(PathError::ConnectionLost)?,
        }
    }

    fn poll_open_path(
        &self,
        cx: &mut Context<'_>,
        local: SocketAddr,
        remote: Option<SocketAddr>,
        status: PathStatus,
    ) -> Poll<Result<PathId, PathError>> {
        let mut guard = self.inner.shared.lock();
        let state = &mut *guard;
        let Some(local) = state.socket_for(local).map(|_| local) else {
            return Poll::Ready(Err(PathError::NoSocket(local)));
        };
        let h = self.inner.handle;
        let (Some(conn), Some(w)) = (state.quic.connection_mut(h), state.conns.get_mut(&h)) else {
            return Poll::Ready(Err(PathError::ConnectionLost(
                ConnectionError::LocallyClosed,
            )));
        };
        if let Some(e) = &w.lost {
            return Poll::Ready(Err(PathError::ConnectionLost(e.clone())));
        }
        let Some(remote) = remote.or_else(|| conn.remote_address()) else {
            return Poll::Ready(Err(PathError::Open(OpenPathError::Closed)));
        };
        match conn.open_path(Instant::now(), local, remote, status) {
            Ok(id) => {
                wake(&state.driver_waker);
                Poll::Ready(Ok(id))
            }
            Err(OpenPathError::NoPathId) => {
                register(&mut w.progress, cx);
                Poll::Pending
            }
            Err(OpenPathError::MultipathNotNegotiated) if !conn.is_handshake_confirmed() => {
                register(&mut w.progress, cx);
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(PathError::Open(e))),
        }
    }

    /// Changes our status for a path and tells the peer.
    pub fn set_path_status(&self, id: PathId, status: PathStatus) -> Result<(), PathError> {
        self.with(|(conn, _, driver)| {
            if !conn.set_path_status(Instant::now(), id, status) {
                return Err(PathError::UnknownPath(id));
            }
            wake(driver);
            Ok(())
        })
        .map_err(PathError::ConnectionLost)?
    }

    /// Moves a path to a new local address (an active migration, RFC 9000 section 9.2;
    /// client only). The endpoint must have a socket bound to `local` (one of the addresses
    /// it was created with).
    pub fn migrate(&self, id: PathId, local: SocketAddr) -> Result<(), PathError> {
        let mut guard = self.inner.shared.lock();
        let state = &mut *guard;
        if state.socket_for(local).is_none() {
            return Err(PathError::NoSocket(local));
        }
        let conn = state
            .quic
            .connection_mut(self.inner.handle)
            .ok_or(PathError::ConnectionLost(ConnectionError::LocallyClosed))?;
        conn.migrate(Instant::now(), id, local)
            .map_err(PathError::Migrate)?;
        wake(&state.driver_waker);
        Ok(())
    }

    /// Abandons a path (PATH_ABANDON) with a transport error code (0 for no error).
    pub fn abandon_path(&self, id: PathId, code: u64) -> Result<(), PathError> {
        self.with(|(conn, _, driver)| {
            if !conn.abandon_path(Instant::now(), id, TransportErrorCode(code)) {
                return Err(PathError::UnknownPath(id));
            }
            wake(driver);
            Ok(())
        })
        .map_err(PathError::ConnectionLost)?
    }

    /// Waits for the next path event (opened, validated, status changed, abandoned,
    /// congestion). The last 256 events are kept for a reader that comes late.
    pub async fn path_event(&self) -> Result<PathEvent, ConnectionError> {
        poll_fn(|cx| {
            self.poll_with(
                |e| e,
                |(_, w, _)| {
                    if let Some(e) = w.path_events.pop_front() {
                        return Poll::Ready(Ok(e));
                    }
                    if let Some(e) = &w.lost {
                        return Poll::Ready(Err(e.clone()));
                    }
                    register(&mut w.path_waiters, cx);
                    Poll::Pending
                },
            )
        })
        .await
    }

    /// Gives the connection a link-layer event (link hint) from the host's link-event feed
    /// (see [`crate::link_feed`]): `local` is the host's address on the interface the event
    /// concerns. The sans-IO [`polypath_quic::Connection::handle_link_event`] runs at once,
    /// under the endpoint's lock with the current time, exactly as the simulator applies its
    /// radio model's events: the paths from `local` take the hints (predicted throughput,
    /// link up or down), and the scheduler and the path manager hear the event. The driver
    /// is then woken, so that paths the path manager opens or abandons, and anything else the
    /// event makes sendable, go out without waiting for the next timer.
    ///
    /// Fails with the reason the connection ended if it is gone.
    pub fn handle_link_event(
        &self,
        event: &LinkEvent,
        local: Option<IpAddr>,
    ) -> Result<(), ConnectionError> {
        self.with(|(conn, w, driver)| {
            if let Some(e) = &w.lost {
                return Err(e.clone());
            }
            conn.handle_link_event(Instant::now(), event, local);
            wake(driver);
            Ok(())
        })?
    }

    /// When each path of the connection was opened, validated and abandoned, in path ID
    /// order (times are those at which the driver dispatched the path events). Empty once
    /// the connection is forgotten.
    pub fn path_times(&self) -> Vec<PathTimes> {
        let state = self.inner.shared.lock();
        state
            .conns
            .get(&self.handle())
            .map(|w| w.timeline.all())
            .unwrap_or_default()
    }

    /// Counters of the whole connection.
    pub fn stats(&self) -> ConnectionStats {
        self.with(|(conn, _, _)| conn.stats()).unwrap_or_default()
    }

    /// State and counters of every path.
    pub fn paths(&self) -> Vec<PathInfo> {
        self.with(|(conn, _, _)| conn.paths()).unwrap_or_default()
    }

    /// The ALPN protocol agreed in the handshake, if any.
    pub fn alpn_protocol(&self) -> Option<Vec<u8>> {
        self.with(|(conn, _, _)| conn.alpn_protocol().map(<[u8]>::to_vec))
            .ok()
            .flatten()
    }

    /// The negotiated TLS cipher suite, once known.
    pub fn cipher_suite(&self) -> Option<rustls::CipherSuite> {
        self.with(|(conn, _, _)| conn.cipher_suite()).ok().flatten()
    }

    /// True if the handshake resumed an earlier TLS session (a session ticket, RFC 8446
    /// section 2.2): no certificate was sent.
    pub fn is_resumed(&self) -> bool {
        self.with(|(conn, _, _)| conn.is_resumed()).unwrap_or(false)
    }

    /// While a client can send early data (0-RTT), before its handshake completes.
    pub fn is_sending_early_data(&self) -> bool {
        self.with(|(conn, _, _)| conn.is_sending_early_data())
            .unwrap_or(false)
    }

    /// Whether the server accepted early data (a client knows once the handshake
    /// completes).
    pub fn is_early_data_accepted(&self) -> bool {
        self.with(|(conn, _, _)| conn.is_early_data_accepted())
            .unwrap_or(false)
    }

    /// 0-RTT packets a client sent, or a server opened.
    pub fn zero_rtt_packets(&self) -> u64 {
        self.with(|(conn, _, _)| conn.zero_rtt_packets())
            .unwrap_or(0)
    }

    /// True if both sides negotiated Multipath QUIC.
    pub fn is_multipath(&self) -> bool {
        self.with(|(conn, _, _)| conn.is_multipath())
            .unwrap_or(false)
    }

    /// The peer's address on the first open path.
    pub fn remote_address(&self) -> Option<SocketAddr> {
        self.with(|(conn, _, _)| conn.remote_address())
            .ok()
            .flatten()
    }

    /// Name of the packet scheduler in use.
    pub fn scheduler_name(&self) -> String {
        self.with(|(conn, _, _)| conn.scheduler_name().to_owned())
            .unwrap_or_default()
    }

    /// Passes a run-time parameter to the scheduler.
    pub fn configure_scheduler(&self, key: &str, value: &str) -> Result<(), String> {
        self.with(|(conn, _, driver)| {
            let r = conn.configure_scheduler(key, value);
            wake(driver);
            r
        })
        .map_err(|e| e.to_string())?
    }

    /// Sends a PING on path `id` with its next packet (see
    /// `polypath_quic::Connection::ping`); returns false for an unknown path.
    pub fn ping(&self, id: PathId) -> bool {
        self.with(|(conn, _, driver)| {
            let queued = conn.ping(id);
            wake(driver);
            queued
        })
        .unwrap_or(false)
    }

    /// Starts a 1-RTT key update if one is allowed now; returns whether it started.
    pub fn force_key_update(&self) -> bool {
        self.with(|(conn, _, driver)| {
            let started = conn.force_key_update(Instant::now());
            wake(driver);
            started
        })
        .unwrap_or(false)
    }

    /// Closes the connection with an application error code and reason.
    pub fn close(&self, code: u64, reason: &[u8]) {
        self.inner
            .shared
            .lock()
            .close_connection(self.handle(), code, reason);
    }

    /// Why the connection ended, once it has.
    pub fn close_reason(&self) -> Option<ConnectionError> {
        let state = self.inner.shared.lock();
        state.conns.get(&self.handle()).and_then(|w| w.lost.clone())
    }

    /// Waits until the connection ends and returns why.
    pub async fn closed(&self) -> ConnectionError {
        poll_fn(|cx| {
            let mut state = self.inner.shared.lock();
            let Some(w) = state.conns.get_mut(&self.handle()) else {
                return Poll::Ready(ConnectionError::LocallyClosed);
            };
            if let Some(e) = &w.lost {
                return Poll::Ready(e.clone());
            }
            register(&mut w.closed, cx);
            Poll::Pending
        })
        .await
    }
}

fn wake(driver: &Option<Waker>) {
    if let Some(w) = driver {
        w.wake_by_ref();
    }
}

/// The sending half of a stream.
#[derive(Debug)]
pub struct SendStream {
    conn: Connection,
    id: StreamId,
}

fn write_error(e: CoreWriteError) -> WriteError {
    match e {
        CoreWriteError::Stopped(code) => WriteError::Stopped(code),
        CoreWriteError::ClosedStream | CoreWriteError::UnknownStream | CoreWriteError::Blocked => {
            WriteError::ClosedStream
        }
    }
}

impl SendStream {
    /// Sets the QoS class of the stream's data from its next frame on (every stream starts
    /// as [`QosClass::BestEffort`]): the scheduler schedules it under that class's policy.
    pub fn set_class(&self, class: QosClass) -> Result<(), WriteError> {
        self.conn
            .with(|(conn, _, driver)| {
                conn.set_stream_class(self.id, class);
                wake(driver);
            })
            .map_err(WriteError::ConnectionLost)
    }

    /// The stream's ID.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Writes a prefix of `data`, waiting until flow control admits at least one byte;
    /// returns how many bytes were taken.
    pub async fn write(&mut self, data: &[u8]) -> Result<usize, WriteError> {
        poll_fn(|cx| self.poll_write_some(cx, data)).await
    }

    fn poll_write_some(
        &self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<Result<usize, WriteError>> {
        self.conn
            .poll_with(WriteError::ConnectionLost, |(conn, w, driver)| {
                if let Some(e) = &w.lost {
                    return Poll::Ready(Err(WriteError::ConnectionLost(e.clone())));
                }
                match conn.write(self.id, data) {
                    Ok(n) => {
                        wake(driver);
                        Poll::Ready(Ok(n))
                    }
                    Err(CoreWriteError::Blocked) => {
                        w.writers.insert(self.id, cx.waker().clone());
                        Poll::Pending
                    }
                    Err(e) => Poll::Ready(Err(write_error(e))),
                }
            })
    }

    /// Writes all of `data`.
    pub async fn write_all(&mut self, mut data: &[u8]) -> Result<(), WriteError> {
        while !data.is_empty() {
            let n = self.write(data).await?;
            data = &data[n..];
        }
        Ok(())
    }

    /// Writes all of `data` without copying it.
    pub async fn write_chunk(&mut self, mut data: Bytes) -> Result<(), WriteError> {
        while !data.is_empty() {
            poll_fn(|cx| {
                self.conn
                    .poll_with(WriteError::ConnectionLost, |(conn, w, driver)| {
                        if let Some(e) = &w.lost {
                            return Poll::Ready(Err(WriteError::ConnectionLost(e.clone())));
                        }
                        match conn.write_bytes(self.id, &mut data) {
                            Ok(_) => {
                                wake(driver);
                                Poll::Ready(Ok(()))
                            }
                            Err(CoreWriteError::Blocked) => {
                                w.writers.insert(self.id, cx.waker().clone());
                                Poll::Pending
                            }
                            Err(e) => Poll::Ready(Err(write_error(e))),
                        }
                    })
            })
            .await?;
        }
        Ok(())
    }

    /// Ends the stream: a FIN follows the data written so far.
    pub fn finish(&mut self) -> Result<(), WriteError> {
        self.conn
            .with(|(conn, _, driver)| {
                conn.finish(self.id).map_err(write_error)?;
                wake(driver);
                Ok(())
            })
            .map_err(WriteError::ConnectionLost)?
    }

    /// Abandons the stream (RESET_STREAM) with an application error code.
    pub fn reset(&mut self, code: u64) -> Result<(), WriteError> {
        self.conn
            .with(|(conn, _, driver)| {
                conn.reset_stream(self.id, VarInt::saturating(code))
                    .map_err(write_error)?;
                wake(driver);
                Ok(())
            })
            .map_err(WriteError::ConnectionLost)?
    }

    /// Waits until the peer acknowledged every byte and the FIN (call after
    /// [`SendStream::finish`]).
    pub async fn finished(&mut self) -> Result<(), WriteError> {
        poll_fn(|cx| {
            self.conn
                .poll_with(WriteError::ConnectionLost, |(conn, w, _)| {
                    if w.finished.remove(&self.id) {
                        return Poll::Ready(Ok(()));
                    }
                    if let Some(e) = &w.lost {
                        return Poll::Ready(Err(WriteError::ConnectionLost(e.clone())));
                    }
                    // A write of nothing reports whether the peer stopped the stream.
                    if let Err(CoreWriteError::Stopped(code)) = conn.write(self.id, &[]) {
                        return Poll::Ready(Err(WriteError::Stopped(code)));
                    }
                    w.finishers.insert(self.id, cx.waker().clone());
                    Poll::Pending
                })
        })
        .await
    }
}

impl Drop for SendStream {
    fn drop(&mut self) {
        let _ = self.conn.with(|(_, w, _)| {
            w.finished.remove(&self.id);
            w.finishers.remove(&self.id);
            w.writers.remove(&self.id);
        });
    }
}

/// The receiving half of a stream.
#[derive(Debug)]
pub struct RecvStream {
    conn: Connection,
    id: StreamId,
}

impl RecvStream {
    /// The stream's ID.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Reads the next in-order bytes (at most `max`), waiting until some arrive;
    /// `Ok(None)` at the end of the stream.
    pub async fn read_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ReadError> {
        poll_fn(|cx| self.poll_read_chunk(cx, max)).await
    }

    fn poll_read_chunk(
        &self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<Option<Bytes>, ReadError>> {
        self.conn
            .poll_with(ReadError::ConnectionLost, |(conn, w, driver)| {
                match conn.read(self.id, max) {
                    Ok(chunk) => {
                        // Reading may open flow-control windows (MAX_STREAM_DATA).
                        wake(driver);
                        Poll::Ready(Ok(chunk))
                    }
                    Err(CoreReadError::Blocked) => {
                        if let Some(e) = &w.lost {
                            return Poll::Ready(Err(ReadError::ConnectionLost(e.clone())));
                        }
                        w.readers.insert(self.id, cx.waker().clone());
                        Poll::Pending
                    }
                    Err(CoreReadError::Reset(code)) => Poll::Ready(Err(ReadError::Reset(code))),
                    Err(CoreReadError::ClosedStream | CoreReadError::UnknownStream) => {
                        Poll::Ready(Err(ReadError::ClosedStream))
                    }
                }
            })
    }

    /// Reads into `buf`, waiting until some bytes arrive; returns how many, or `Ok(None)`
    /// at the end of the stream.
    pub async fn read(&mut self, buf: &mut [u8]) -> Result<Option<usize>, ReadError> {
        if buf.is_empty() {
            return Ok(Some(0));
        }
        Ok(self.read_chunk(buf.len()).await?.map(|chunk| {
            buf[..chunk.len()].copy_from_slice(&chunk);
            chunk.len()
        }))
    }

    /// Reads the whole stream, failing if it holds more than `limit` bytes.
    pub async fn read_to_end(&mut self, limit: usize) -> Result<Vec<u8>, ReadError> {
        let mut out = Vec::new();
        while let Some(chunk) = self.read_chunk(usize::MAX).await? {
            if out.len() + chunk.len() > limit {
                return Err(ReadError::TooLong(limit));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Asks the peer to stop sending (STOP_SENDING) with an application error code.
    pub fn stop(&mut self, code: u64) -> Result<(), ReadError> {
        self.conn
            .with(|(conn, _, driver)| {
                conn.stop_sending(self.id, VarInt::saturating(code))
                    .map_err(|_| ReadError::ClosedStream)?;
                wake(driver);
                Ok(())
            })
            .map_err(ReadError::ConnectionLost)?
    }
}

/// Dropping a receiving half before its end abandons reading, as [`RecvStream::stop`]
/// with code 0 does: without it a stream whose FIN (or rest) is never read would never be
/// closed, and a peer opening many such streams would wait forever for MAX_STREAMS.
impl Drop for RecvStream {
    fn drop(&mut self) {
        let _ = self.conn.with(|(conn, w, driver)| {
            w.readers.remove(&self.id);
            // An error means the stream was read to its end (or reset) already.
            if conn.stop_sending(self.id, VarInt::from_u32(0)).is_ok() {
                wake(driver);
            }
        });
    }
}

/// Tokio's byte-stream interface on a stream's sending half: `poll_write` takes what flow
/// control admits, `poll_flush` has nothing to do (written bytes are the connection's to
/// send), `poll_shutdown` finishes the stream (FIN).
impl tokio::io::AsyncWrite for SendStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_some(cx, buf)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::BrokenPipe, e.to_string()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(match self.finish() {
            Ok(()) | Err(WriteError::ClosedStream) => Ok(()),
            Err(e) => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                e.to_string(),
            )),
        })
    }
}

/// Tokio's byte-stream interface on a stream's receiving half (end of stream reads as 0).
impl tokio::io::AsyncRead for RecvStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        match self.poll_read_chunk(cx, buf.remaining()) {
            Poll::Ready(Ok(Some(chunk))) => {
                buf.put_slice(&chunk);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Ok(None)) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                e.to_string(),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}
