//! The async endpoint: sockets, a driver task, and the connections behind them.

use crate::connection::Connection;
use crate::driver::{Driver, watch_errors};
use crate::error::{ConnectError, IoError};
use crate::socket::Socket;
use crate::state::{ConnWaiters, Shared, State, register, wake_all};
use polypath_quic::{ClientConfig, EndpointConfig, ServerConfig};
use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

/// A QUIC endpoint on one or more local UDP addresses, driven by a Tokio task.
///
/// Clones share the endpoint. The driver task runs until every `Endpoint` handle is
/// dropped and every connection is closed, drained and dropped; call
/// [`Endpoint::wait_idle`] before leaving the runtime so that closing connections get their
/// CONNECTION_CLOSE out (and their qlog files flushed).
#[derive(Debug, Clone)]
pub struct Endpoint {
    inner: Arc<EndpointRef>,
}

/// Counts as one live endpoint handle for the driver.
#[derive(Debug)]
struct EndpointRef {
    shared: Arc<Shared>,
}

impl Drop for EndpointRef {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.endpoint_refs = state.endpoint_refs.saturating_sub(1);
        state.wake_driver();
    }
}

impl Endpoint {
    /// A client endpoint with one socket per address in `locals` (port 0 picks a free
    /// port). Multipath connections open one path per local address. Must be called inside
    /// a Tokio runtime.
    pub fn client(locals: &[SocketAddr], config: EndpointConfig) -> Result<Self, IoError> {
        Self::new(locals, config, None)
    }

    /// A server endpoint listening on `listen` (a wildcard address works: replies leave
    /// from the address each datagram arrived on), and on the preferred address of its
    /// transport settings ([`polypath_quic::TransportConfig::preferred_address`]) too
    /// unless `listen` covers it. Must be called inside a Tokio runtime.
    pub fn server(
        listen: SocketAddr,
        config: EndpointConfig,
        server: ServerConfig,
    ) -> Result<Self, IoError> {
        let mut locals = vec![listen];
        if let Some(preferred) = server.transport.preferred_address
            && !covers(listen, preferred)
        {
            locals.push(preferred);
        }
        Self::new(&locals, config, Some(server))
    }

    /// An endpoint on `locals`, accepting connections if `server` is given.
    pub fn new(
        locals: &[SocketAddr],
        config: EndpointConfig,
        server: Option<ServerConfig>,
    ) -> Result<Self, IoError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| IoError::NoRuntime)?;
        if locals.is_empty() {
            return Err(IoError::NoLocalAddress);
        }
        // A client hears of a closed port at once (ICMP port unreachable) instead of waiting
        // out its handshake; a server has no use for it.
        let transport_errors = server.is_none();
        let sockets = locals
            .iter()
            .map(|&addr| {
                Socket::bind(addr, transport_errors)
                    .map(Arc::new)
                    .map_err(|source| IoError::Bind { addr, source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for s in &sockets {
            tracing::debug!(socket = ?s, "bound");
        }
        let max_udp_payload = usize::from(config.max_udp_payload_size).max(1500);
        let quic = polypath_quic::Endpoint::new(config, server);
        let shared = Arc::new(Shared::new(State::new(
            quic,
            sockets.clone(),
            transport_errors,
        )));
        if transport_errors {
            let _entered = runtime.enter();
            let watchers = sockets
                .into_iter()
                .map(|s| watch_errors(&shared, s))
                .collect();
            shared.lock().error_watchers = watchers;
        }
        runtime.spawn(Driver::new(shared.clone(), max_udp_payload));
        Ok(Endpoint {
            inner: Arc::new(EndpointRef { shared }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The bound local addresses, in the order they were bound.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.shared()
            .lock()
            .sockets
            .iter()
            .map(|s| s.local_addr())
            .collect()
    }

    /// Binds one more local address (for a new path); returns the bound address.
    pub fn bind(&self, addr: SocketAddr) -> Result<SocketAddr, IoError> {
        let mut state = self.shared().lock();
        let socket = Arc::new(
            Socket::bind(addr, state.transport_errors)
                .map_err(|source| IoError::Bind { addr, source })?,
        );
        let local = socket.local_addr();
        if state.transport_errors {
            let watcher = watch_errors(self.shared(), socket.clone());
            state.error_watchers.push(watcher);
        }
        state.sockets.push(socket);
        state.wake_driver();
        Ok(local)
    }

    /// Connects to `remote` from the first local address of the same IP family and waits
    /// for the handshake to complete.
    pub async fn connect(
        &self,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<Connection, ConnectError> {
        let local = self
            .local_addrs()
            .into_iter()
            .find(|l| l.is_ipv4() == remote.is_ipv4())
            .ok_or(ConnectError::NoLocalAddress(remote))?;
        self.connect_from(local, config, remote, server_name).await
    }

    /// Connects to `remote` from the bound local address `local` and waits for the
    /// handshake to complete.
    pub async fn connect_from(
        &self,
        local: SocketAddr,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<Connection, ConnectError> {
        let conn = self.start_connection(local, config, remote, server_name)?;
        conn.handshake().await.map_err(ConnectError::Handshake)?;
        Ok(conn)
    }

    /// Like [`Endpoint::connect_from`], but returns at once when the connection can send
    /// early data (0-RTT: it resumes a session whose ticket allows it, and `config`'s TLS
    /// configuration enables it, see `polypath_quic::crypto::enable_early_data`): streams
    /// opened and written before the handshake completes then leave in 0-RTT packets.
    /// Otherwise waits for the handshake as `connect_from` does. Await
    /// [`Connection::handshake`] before trusting the server, and check
    /// [`Connection::is_early_data_accepted`] then: if the server rejected the early data,
    /// the connection has sent it again (the server saw it once, after the handshake).
    pub async fn connect_early_from(
        &self,
        local: SocketAddr,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<Connection, ConnectError> {
        let conn = self.start_connection(local, config, remote, server_name)?;
        if !conn.is_sending_early_data() {
            conn.handshake().await.map_err(ConnectError::Handshake)?;
        }
        Ok(conn)
    }

    /// Starts a connection to `remote` from the bound local address `local`.
    fn start_connection(
        &self,
        local: SocketAddr,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<Connection, ConnectError> {
        let handle = {
            let mut state = self.shared().lock();
            if state.closed || state.driver_gone {
                return Err(ConnectError::EndpointClosed);
            }
            let local = state
                .socket_for(local)
                .map(|s| s.local_addr())
                .ok_or(ConnectError::NoLocalAddress(local))?;
            let handle = state
                .quic
                .connect(Instant::now(), config, local, remote, server_name)
                .map_err(ConnectError::Start)?;
            state.conns.insert(
                handle,
                ConnWaiters {
                    refs: 1,
                    ..ConnWaiters::default()
                },
            );
            state.wake_driver();
            handle
        };
        Ok(Connection::new(self.shared().clone(), handle))
    }

    /// Waits for the next connection a client opened (server endpoints). The connection is
    /// returned while its handshake may still be running: await
    /// [`Connection::handshake`] before trusting it. Returns `None` once the endpoint is
    /// closed.
    pub async fn accept(&self) -> Option<Connection> {
        let handle = poll_fn(|cx| {
            let mut state = self.shared().lock();
            if let Some(h) = state.incoming.pop_front() {
                if let Some(w) = state.conns.get_mut(&h) {
                    w.refs += 1;
                }
                return Poll::Ready(Some(h));
            }
            if state.closed || state.driver_gone {
                return Poll::Ready(None);
            }
            register(&mut state.accept_wakers, cx);
            Poll::Pending
        })
        .await?;
        Some(Connection::new(self.shared().clone(), handle))
    }

    /// Closes every connection with `code` and `reason` and stops accepting new ones.
    pub fn close(&self, code: u64, reason: &[u8]) {
        let mut state = self.shared().lock();
        state.closed = true;
        let handles: Vec<_> = state.conns.keys().copied().collect();
        for h in handles {
            state.close_connection(h, code, reason);
        }
        wake_all(&mut state.accept_wakers);
        state.wake_driver();
    }

    /// Waits until the endpoint has no connection left (all closed, drained and dropped).
    pub async fn wait_idle(&self) {
        poll_fn(|cx| {
            let mut state = self.shared().lock();
            if state.conns.is_empty() || state.driver_gone {
                return Poll::Ready(());
            }
            register(&mut state.idle_wakers, cx);
            Poll::Pending
        })
        .await
    }

    /// Number of connections the endpoint still holds (including closing ones).
    pub fn connection_count(&self) -> usize {
        self.shared().lock().conns.len()
    }
}

/// True if a socket bound to `bound` receives datagrams sent to `addr`.
fn covers(bound: SocketAddr, addr: SocketAddr) -> bool {
    bound == addr
        || (bound.ip().is_unspecified()
            && bound.port() == addr.port()
            && bound.is_ipv4() == addr.is_ipv4())
}
