//! One face for both stacks: endpoints, connections and streams of polypath (through
//! polypath-io) and of noq, so that every case is written once and runs in both
//! directions.

use std::future::poll_fn;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_core::Stream;
use noq::crypto::rustls::{HandshakeData, QuicClientConfig, QuicServerConfig};
use polypath_quic::crypto::{
    CipherSuites, ServerVerification, client_config_with, self_signed_certificate, server_config,
};
use sha2::{Digest, Sha256};

use crate::nat::{Nat, NatPlan};
use crate::noq_socket::MultiAddrSocket;
use crate::noq_window::{CappedCubic, MULTIPATH_WINDOW_CAP};
use crate::report::Stack;

/// The ALPN protocol both sides offer (and the only one).
pub const ALPN: &[u8] = b"polypath-interop";
/// The server name the client asks for; the certificate carries it.
pub const SERVER_NAME: &str = "localhost";
/// Paths each side allows when multipath is on (initial_max_path_id = this − 1).
pub const MAX_PATHS: u32 = 4;
/// The client's first local address.
pub const FIRST_LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
/// The client's second local address, for the second path.
pub const SECOND_LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A failure inside a case, as text for the report.
pub type CaseError = String;

/// TLS configurations shared by all connections of a run: one self-signed certificate,
/// pinned by the clients of both stacks.
#[derive(Clone)]
pub struct Tls {
    client: Arc<rustls::ClientConfig>,
    server: Arc<rustls::ServerConfig>,
}

impl Tls {
    /// A fresh self-signed certificate for [`SERVER_NAME`] and configs offering [`ALPN`].
    pub fn new() -> Result<Self, CaseError> {
        Tls::with_alpn(ALPN)
    }

    /// A fresh self-signed certificate for [`SERVER_NAME`] and configs offering `alpn`.
    pub fn with_alpn(alpn: &[u8]) -> Result<Self, CaseError> {
        Tls::with(alpn, CipherSuites::All)
    }

    /// Like [`Tls::with_alpn`], the client offering only the cipher suites `client_suites`
    /// (the server accepts all).
    pub fn with(alpn: &[u8], client_suites: CipherSuites) -> Result<Self, CaseError> {
        let err = |e: polypath_quic::crypto::ConfigError| format!("TLS setup: {e}");
        let cert = self_signed_certificate(&[SERVER_NAME.into()]).map_err(err)?;
        let server =
            server_config(cert.chain.clone(), cert.key, vec![alpn.to_vec()], false).map_err(err)?;
        let client = client_config_with(
            vec![alpn.to_vec()],
            ServerVerification::Pinned(cert.chain[0].clone()),
            false,
            client_suites,
        )
        .map_err(err)?;
        Ok(Tls { client, server })
    }

    /// [`Tls::new`] with a server whose session tickets allow 0-RTT and a client that sends
    /// early data when it resumes with one.
    pub fn with_zero_rtt() -> Result<Self, CaseError> {
        let mut tls = Tls::new()?;
        let mut server = Arc::unwrap_or_clone(tls.server);
        polypath_quic::crypto::enable_zero_rtt(&mut server);
        tls.server = Arc::new(server);
        let mut client = Arc::unwrap_or_clone(tls.client);
        polypath_quic::crypto::enable_early_data(&mut client);
        tls.client = Arc::new(client);
        Ok(tls)
    }

    /// [`Tls::new`] with a server that sends a session ticket on every connection
    /// ([`polypath_quic::crypto::enable_session_tickets`]).
    pub fn with_session_tickets() -> Result<Self, CaseError> {
        let mut tls = Tls::new()?;
        let mut server = Arc::unwrap_or_clone(tls.server);
        polypath_quic::crypto::enable_session_tickets(&mut server);
        tls.server = Arc::new(server);
        Ok(tls)
    }
}

/// How the connection of a case is set up.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Offer the multipath extension (both sides), and give the client a second local
    /// address ([`SECOND_LOCAL`]).
    pub multipath: bool,
    /// The server validates the client's address with a Retry before accepting it.
    pub retry: bool,
    /// Paths each side allows at once with multipath, if not [`MAX_PATHS`].
    pub max_paths: Option<u32>,
    /// Small flow-control windows and stream limits on both sides ([`SMALL_WINDOWS`]).
    pub small_windows: bool,
    /// Both sides on IPv6 loopback (`::1`) instead of 127.0.0.1.
    pub ipv6: bool,
    /// The client can migrate ([`Pair::migrate_client`]): a polypath client binds a second
    /// local address ([`SECOND_LOCAL`]) for it (without multipath).
    pub migration: bool,
    /// The client reaches the server through a NAT that rebinds or delays as this says
    /// ([`crate::nat`]).
    pub nat: Option<NatPlan>,
}

/// The limits of [`Setup::small_windows`]: (connection receive window, stream receive
/// window, bidirectional streams the peer may open at once).
pub const SMALL_WINDOWS: (u32, u32, u32) = (64 * 1024, 16 * 1024, 10);

fn polypath_transport(setup: &Setup) -> Arc<polypath_quic::TransportConfig> {
    let mut t = polypath_quic::TransportConfig::default();
    if setup.multipath {
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.1
        //# For example, if initial_max_path_id is set to 1, only connection IDs
        //# associated with path IDs 0 and 1 should be issued by the peer.
        t.initial_max_path_id = Some(setup.max_paths.unwrap_or(MAX_PATHS).max(1) - 1);
        // Round robin, so that both paths carry data whatever their RTT estimates.
        if let Some(rr) = polypath_quic::sched::scheduler_by_name("rr") {
            t.scheduler = rr;
        }
    }
    if setup.small_windows {
        let (conn, stream, streams) = SMALL_WINDOWS;
        t.set_fixed_receive_window(conn.into());
        t.set_fixed_stream_receive_window(stream.into());
        t.max_concurrent_bidi_streams = streams.into();
    }
    Arc::new(t)
}

fn noq_transport(setup: &Setup) -> Arc<noq::TransportConfig> {
    let mut t = noq::TransportConfig::default();
    if setup.multipath {
        t.max_concurrent_multipath_paths(setup.max_paths.unwrap_or(MAX_PATHS));
        // So that a noq sender's path 0 fills and path 1 carries data too.
        t.congestion_controller_factory(Arc::new(CappedCubic::new(MULTIPATH_WINDOW_CAP)));
    }
    if setup.small_windows {
        let (conn, stream, streams) = SMALL_WINDOWS;
        t.receive_window(conn.into());
        t.stream_receive_window(stream.into());
        t.max_concurrent_bidi_streams(streams.into());
    }
    Arc::new(t)
}

/// The environment variable naming a directory for the qlog files of every polypath
/// endpoint of the matrix (one `ODCID-client.sqlog` / `ODCID-server.sqlog` per
/// connection); unset, no qlog is written. A debugging aid for rare failures.
pub const QLOG_ENV: &str = "POLYPATH_INTEROP_QLOG";

/// A polypath endpoint configuration with fresh secrets, writing qlog to the directory of
/// [`QLOG_ENV`] if it is set.
fn polypath_endpoint_config() -> Result<polypath_quic::EndpointConfig, CaseError> {
    let mut config = polypath_quic::EndpointConfig::random();
    if let Some(dir) = std::env::var_os(QLOG_ENV) {
        let qlog = polypath_io::QlogDir::new(&dir)
            .map_err(|e| format!("{QLOG_ENV}={}: {e}", dir.to_string_lossy()))?;
        config.qlog = Some(Arc::new(qlog));
    }
    Ok(config)
}

/// An endpoint of either stack; kept alive for as long as its connection is used.
pub enum Endpoint {
    /// A polypath-io endpoint.
    Polypath(polypath_io::Endpoint),
    /// A noq endpoint.
    Noq(noq::Endpoint),
}

impl Endpoint {
    /// Closes the endpoint and waits (at most two seconds) for its connections to drain.
    pub async fn shutdown(&self) {
        match self {
            Endpoint::Polypath(e) => {
                e.close(0, b"");
                let _ = tokio::time::timeout(Duration::from_secs(2), e.wait_idle()).await;
            }
            Endpoint::Noq(e) => {
                e.close(0u32.into(), b"");
                let _ = tokio::time::timeout(Duration::from_secs(2), e.wait_idle()).await;
            }
        }
    }
}

/// A client and a server connection of one case, with their endpoints.
pub struct Pair {
    /// The client's connection.
    pub client: Conn,
    /// The server's connection.
    pub server: Conn,
    /// The client's second local address, when multipath is set up.
    pub second_local: Option<SocketAddr>,
    /// The server's address.
    pub server_addr: SocketAddr,
    /// The NAT between client and server, if the setup asked for one; the client's
    /// packets reach the server from [`crate::nat::NatLog::outside`].
    pub nat: Option<Nat>,
    /// How long the client waited for its handshake.
    pub handshake_time: Duration,
    /// Connection attempts a noq server answered with a Retry (`None` for polypath
    /// servers, whose Retry is stateless and not counted).
    pub server_retries: Option<u32>,
    client_endpoint: Endpoint,
    server_endpoint: Endpoint,
}

impl Pair {
    /// Starts a server of stack `server` on 127.0.0.1, connects a client of stack `client`
    /// to it, and waits for both handshakes.
    pub async fn connect(
        client: Stack,
        server: Stack,
        tls: &Tls,
        setup: Setup,
    ) -> Result<Pair, CaseError> {
        let first_local = if setup.ipv6 {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            FIRST_LOCAL
        };
        let listen = SocketAddr::new(first_local, 0);
        let (server_endpoint, server_addr) = match server {
            Stack::Polypath => {
                let mut config = polypath_quic::ServerConfig::new(tls.server.clone());
                config.transport = polypath_transport(&setup);
                config.retry = setup.retry;
                let e = polypath_io::Endpoint::server(listen, polypath_endpoint_config()?, config)
                    .map_err(|e| format!("polypath server endpoint: {e}"))?;
                let addr = e
                    .local_addrs()
                    .first()
                    .copied()
                    .ok_or("polypath server endpoint has no address")?;
                (Endpoint::Polypath(e), addr)
            }
            Stack::Noq => {
                let crypto = QuicServerConfig::try_from(tls.server.clone())
                    .map_err(|e| format!("noq server TLS: {e}"))?;
                let mut config = noq::ServerConfig::with_crypto(Arc::new(crypto));
                config.transport_config(noq_transport(&setup));
                let e = noq::Endpoint::server(config, listen)
                    .map_err(|e| format!("noq server endpoint: {e}"))?;
                let addr = e
                    .local_addr()
                    .map_err(|e| format!("noq server address: {e}"))?;
                (Endpoint::Noq(e), addr)
            }
        };
        let nat = match setup.nat.clone() {
            Some(plan) => Some(
                Nat::start(server_addr, plan)
                    .await
                    .map_err(|e| format!("NAT: {e}"))?,
            ),
            None => None,
        };
        // Where the client sends: the NAT's front, or the server itself.
        let server_addr = nat.as_ref().map_or(server_addr, Nat::front);
        let mut locals = vec![SocketAddr::new(first_local, 0)];
        if setup.multipath || (setup.migration && client == Stack::Polypath) {
            locals.push(SocketAddr::new(SECOND_LOCAL, 0));
        }
        let started = Instant::now();
        let accept = accept(&server_endpoint, setup.retry);
        let (client_endpoint, second_local) = match client {
            Stack::Polypath => {
                let e = polypath_io::Endpoint::client(&locals, polypath_endpoint_config()?)
                    .map_err(|e| format!("polypath client endpoint: {e}"))?;
                let second = e.local_addrs().get(1).copied();
                (Endpoint::Polypath(e), second)
            }
            Stack::Noq => {
                let socket = MultiAddrSocket::bind(&locals)
                    .map_err(|e| format!("noq client sockets: {e}"))?;
                let second = socket.local_addrs().get(1).copied();
                let e = noq::Endpoint::new_with_abstract_socket(
                    noq::EndpointConfig::default(),
                    None,
                    Box::new(socket),
                    Arc::new(noq::TokioRuntime),
                )
                .map_err(|e| format!("noq client endpoint: {e}"))?;
                (Endpoint::Noq(e), second)
            }
        };
        let (client_conn, server_conn) = tokio::join!(
            connect_client(&client_endpoint, tls, &setup, server_addr),
            accept
        );
        let (client_conn, (server_conn, server_retries)) = (client_conn?, server_conn?);
        Ok(Pair {
            client: client_conn,
            server: server_conn,
            second_local,
            server_addr,
            nat,
            handshake_time: started.elapsed(),
            server_retries,
            client_endpoint,
            server_endpoint,
        })
    }

    /// Moves the client to [`SECOND_LOCAL`] (an active migration, RFC 9000 section 9.2):
    /// polypath migrates path 0 to its second socket ([`Setup::migration`]); noq switches
    /// its endpoint to a new socket there (`Endpoint::rebind`). Returns the new address.
    pub fn migrate_client(&self) -> Result<SocketAddr, CaseError> {
        match (&self.client, &self.client_endpoint) {
            (Conn::Polypath(c), _) => {
                let local = self
                    .second_local
                    .ok_or("the polypath client has no second local address")?;
                c.migrate(polypath_quic::PathId::ZERO, local)
                    .map_err(|e| format!("polypath migrate: {e}"))?;
                Ok(local)
            }
            (_, Endpoint::Noq(e)) => {
                let socket = MultiAddrSocket::bind(&[SocketAddr::new(SECOND_LOCAL, 0)])
                    .map_err(|e| format!("noq client socket: {e}"))?;
                let local = socket.local_addrs()[0];
                e.rebind_abstract(Box::new(socket))
                    .map_err(|e| format!("noq rebind: {e}"))?;
                Ok(local)
            }
            _ => Err("the client's connection and endpoint are of different stacks".into()),
        }
    }

    /// Closes the client's connection and connects again from the same client endpoint to
    /// the same server (with `tls`, whose client session store keeps what the first
    /// connection received, such as a session ticket); the new connections replace the old.
    pub async fn reconnect(&mut self, tls: &Tls, setup: &Setup) -> Result<(), CaseError> {
        self.client.close(0, b"reconnecting");
        let started = Instant::now();
        let (client, server) = tokio::join!(
            connect_client(&self.client_endpoint, tls, setup, self.server_addr),
            accept(&self.server_endpoint, false)
        );
        self.client = client?;
        self.server = server?.0;
        self.handshake_time = started.elapsed();
        Ok(())
    }

    /// Like [`Pair::reconnect`], the client writing `request` on a bidirectional stream
    /// (and finishing it) in early data, before its handshake completes. Returns what the
    /// server read on that stream and whether the server accepted the early data (as the
    /// client learned at the end of the handshake).
    pub async fn reconnect_early(
        &mut self,
        tls: &Tls,
        setup: &Setup,
        request: &[u8],
    ) -> Result<(Vec<u8>, bool), CaseError> {
        self.client.close(0, b"reconnecting");
        let started = Instant::now();
        let server_addr = self.server_addr;
        let client = async {
            let result: Result<(Conn, bool), CaseError> = match &self.client_endpoint {
                Endpoint::Polypath(e) => {
                    let mut config = polypath_quic::ClientConfig::new(tls.client.clone());
                    config.transport = polypath_transport(setup);
                    let local = e
                        .local_addrs()
                        .first()
                        .copied()
                        .ok_or("polypath client endpoint has no address")?;
                    let conn = e
                        .connect_early_from(local, config, server_addr, SERVER_NAME)
                        .await
                        .map_err(|e| format!("polypath client connect: {e}"))?;
                    if !conn.is_sending_early_data() {
                        return Err("the polypath client cannot send early data".to_string());
                    }
                    let (mut send, _recv) = conn
                        .open_bi()
                        .await
                        .map_err(|e| format!("polypath open_bi in 0-RTT: {e}"))?;
                    send.write_all(request)
                        .await
                        .map_err(|e| format!("polypath write in 0-RTT: {e}"))?;
                    send.finish()
                        .map_err(|e| format!("polypath finish in 0-RTT: {e}"))?;
                    conn.handshake()
                        .await
                        .map_err(|e| format!("polypath client handshake: {e}"))?;
                    let accepted = conn.is_early_data_accepted();
                    Ok((Conn::polypath(conn), accepted))
                }
                Endpoint::Noq(e) => {
                    let crypto = noq_client_crypto(&tls.client)?;
                    let mut config = noq::ClientConfig::new(Arc::new(crypto));
                    config.transport_config(noq_transport(setup));
                    let (conn, accepted) = e
                        .connect_with(config, server_addr, SERVER_NAME)
                        .map_err(|e| format!("noq client connect: {e}"))?
                        .into_0rtt()
                        .map_err(|_| "the noq client cannot send early data")?;
                    let (mut send, _recv) = conn
                        .open_bi()
                        .await
                        .map_err(|e| format!("noq open_bi in 0-RTT: {e}"))?;
                    send.write_all(request)
                        .await
                        .map_err(|e| format!("noq write in 0-RTT: {e}"))?;
                    send.finish()
                        .map_err(|e| format!("noq finish in 0-RTT: {e}"))?;
                    let accepted = accepted.await;
                    Ok((Conn::noq(conn), accepted))
                }
            };
            result
        };
        let (client, server) = tokio::join!(client, accept(&self.server_endpoint, false));
        let (client, accepted) = client?;
        self.client = client;
        self.server = server?.0;
        self.handshake_time = started.elapsed();
        let (_send, mut recv) = self.server.accept_bi().await?;
        let mut received = Vec::new();
        while let Some(chunk) = recv.read_chunk().await? {
            received.extend_from_slice(&chunk);
        }
        Ok((received, accepted))
    }

    /// Closes both endpoints and waits briefly for them to drain.
    pub async fn shutdown(self) {
        let Pair {
            client,
            server,
            client_endpoint,
            server_endpoint,
            ..
        } = self;
        // Connection handles keep a polypath-io endpoint busy: drop them first.
        drop((client, server));
        tokio::join!(client_endpoint.shutdown(), server_endpoint.shutdown());
    }
}

/// Connects a client of `endpoint`'s stack to `server_addr` and waits for its handshake.
async fn connect_client(
    endpoint: &Endpoint,
    tls: &Tls,
    setup: &Setup,
    server_addr: SocketAddr,
) -> Result<Conn, CaseError> {
    match endpoint {
        Endpoint::Polypath(e) => {
            let mut config = polypath_quic::ClientConfig::new(tls.client.clone());
            config.transport = polypath_transport(setup);
            e.connect(config, server_addr, SERVER_NAME)
                .await
                .map(Conn::polypath)
                .map_err(|e| format!("polypath client connect: {e}"))
        }
        Endpoint::Noq(e) => {
            let crypto = noq_client_crypto(&tls.client)?;
            let mut config = noq::ClientConfig::new(Arc::new(crypto));
            config.transport_config(noq_transport(setup));
            e.connect_with(config, server_addr, SERVER_NAME)
                .map_err(|e| format!("noq client connect: {e}"))?
                .await
                .map(Conn::noq)
                .map_err(|e| format!("noq client handshake: {e}"))
        }
    }
}

/// noq's client TLS from a rustls config. The Initial packets are always protected with
/// AES-128-GCM (RFC 9001 section 5.2), which a ChaCha20-only config does not list, so it is
/// given to noq separately.
pub fn noq_client_crypto(
    config: &Arc<rustls::ClientConfig>,
) -> Result<QuicClientConfig, CaseError> {
    let initial = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(|s| s.quic_suite())
        .ok_or("ring has no QUIC AES-128-GCM suite")?;
    QuicClientConfig::with_initial(config.clone(), initial)
        .map_err(|e| format!("noq client TLS: {e}"))
}

/// Waits for the next connection on a server endpoint and its handshake. With `retry`, a
/// noq server answers attempts whose address is not yet validated with a Retry (polypath
/// servers do this by configuration); returns the connection and, for noq, how many Retry
/// packets it sent.
async fn accept(endpoint: &Endpoint, retry: bool) -> Result<(Conn, Option<u32>), CaseError> {
    match endpoint {
        Endpoint::Polypath(e) => {
            let conn = e
                .accept()
                .await
                .ok_or("polypath server endpoint closed before a connection came")?;
            conn.handshake()
                .await
                .map_err(|e| format!("polypath server handshake: {e}"))?;
            Ok((Conn::polypath(conn), None))
        }
        Endpoint::Noq(e) => {
            let mut retries = 0;
            loop {
                let incoming = e
                    .accept()
                    .await
                    .ok_or("noq server endpoint closed before a connection came")?;
                if retry && !incoming.remote_address_validated() {
                    incoming
                        .retry()
                        .map_err(|_| "noq server could not send a Retry")?;
                    retries += 1;
                    continue;
                }
                let conn = incoming
                    .await
                    .map_err(|e| format!("noq server handshake: {e}"))?;
                return Ok((Conn::noq(conn), Some(retries)));
            }
        }
    }
}

/// How the peer ended a connection, as one side saw it.
#[derive(Debug, Clone)]
pub struct CloseSeen {
    /// The application error code, if the peer's application closed the connection.
    pub app_code: Option<u64>,
    /// The reason phrase of an application close.
    pub reason: String,
    /// The whole error, as text.
    pub text: String,
}

/// Byte counters of one path, from one side's point of view.
#[derive(Debug, Clone, Copy)]
pub struct PathBytes {
    /// The path ID (0 is the handshake path).
    pub id: u32,
    /// UDP payload bytes sent on the path.
    pub udp_tx: u64,
    /// UDP payload bytes received on the path.
    pub udp_rx: u64,
    /// Stream data sent on the path: payload bytes (polypath) or STREAM frames (noq, which
    /// counts frames, not bytes, per path).
    pub stream_tx: u64,
}

/// A connection of either stack.
pub enum Conn {
    /// polypath through polypath-io.
    Polypath(polypath_io::Connection),
    /// noq, with its path event stream (subscribed as soon as the connection exists, so
    /// that no event is missed).
    Noq {
        /// The connection.
        conn: noq::Connection,
        /// Its path events.
        path_events: Mutex<noq::PathEvents>,
    },
}

fn noq_path_id(id: noq::PathId) -> u32 {
    // noq's PathId shows its number and has no other public accessor.
    id.to_string().parse().unwrap_or(u32::MAX)
}

impl Conn {
    fn polypath(conn: polypath_io::Connection) -> Conn {
        Conn::Polypath(conn)
    }

    pub(crate) fn noq(conn: noq::Connection) -> Conn {
        let path_events = Mutex::new(conn.path_events());
        Conn::Noq { conn, path_events }
    }

    /// The stack of this side.
    pub fn stack(&self) -> Stack {
        match self {
            Conn::Polypath(_) => Stack::Polypath,
            Conn::Noq { .. } => Stack::Noq,
        }
    }

    /// The ALPN protocol agreed in the handshake.
    pub fn alpn(&self) -> Option<Vec<u8>> {
        match self {
            Conn::Polypath(c) => c.alpn_protocol(),
            Conn::Noq { conn, .. } => conn
                .handshake_data()
                .and_then(|d| d.downcast::<HandshakeData>().ok())
                .and_then(|d| d.protocol),
        }
    }

    /// Opens a unidirectional stream.
    pub async fn open_uni(&self) -> Result<SendS, CaseError> {
        match self {
            Conn::Polypath(c) => c
                .open_uni()
                .await
                .map(SendS::Polypath)
                .map_err(|e| format!("polypath open_uni: {e}")),
            Conn::Noq { conn, .. } => conn
                .open_uni()
                .await
                .map(SendS::Noq)
                .map_err(|e| format!("noq open_uni: {e}")),
        }
    }

    /// Accepts the peer's next unidirectional stream.
    pub async fn accept_uni(&self) -> Result<RecvS, CaseError> {
        match self {
            Conn::Polypath(c) => c
                .accept_uni()
                .await
                .map(RecvS::Polypath)
                .map_err(|e| format!("polypath accept_uni: {e}")),
            Conn::Noq { conn, .. } => conn
                .accept_uni()
                .await
                .map(RecvS::Noq)
                .map_err(|e| format!("noq accept_uni: {e}")),
        }
    }

    /// Opens a bidirectional stream.
    pub async fn open_bi(&self) -> Result<(SendS, RecvS), CaseError> {
        match self {
            Conn::Polypath(c) => c
                .open_bi()
                .await
                .map(|(s, r)| (SendS::Polypath(s), RecvS::Polypath(r)))
                .map_err(|e| format!("polypath open_bi: {e}")),
            Conn::Noq { conn, .. } => conn
                .open_bi()
                .await
                .map(|(s, r)| (SendS::Noq(s), RecvS::Noq(r)))
                .map_err(|e| format!("noq open_bi: {e}")),
        }
    }

    /// Accepts the peer's next bidirectional stream.
    pub async fn accept_bi(&self) -> Result<(SendS, RecvS), CaseError> {
        match self {
            Conn::Polypath(c) => c
                .accept_bi()
                .await
                .map(|(s, r)| (SendS::Polypath(s), RecvS::Polypath(r)))
                .map_err(|e| format!("polypath accept_bi: {e}")),
            Conn::Noq { conn, .. } => conn
                .accept_bi()
                .await
                .map(|(s, r)| (SendS::Noq(s), RecvS::Noq(r)))
                .map_err(|e| format!("noq accept_bi: {e}")),
        }
    }

    /// Largest datagram the peer accepts now, if it accepts any.
    pub fn max_datagram_size(&self) -> Option<usize> {
        match self {
            Conn::Polypath(c) => c.max_datagram_size(),
            Conn::Noq { conn, .. } => conn.max_datagram_size(),
        }
    }

    /// Losses this side has seen as a sender: packets declared lost, plus datagrams its
    /// send queue dropped (polypath counts them; noq does not).
    pub fn losses(&self) -> u64 {
        match self {
            Conn::Polypath(c) => c.stats().packets_lost + c.datagrams_dropped(),
            Conn::Noq { conn, .. } => conn.stats().lost_packets,
        }
    }

    /// Queues one datagram.
    pub fn send_datagram(&self, data: Bytes) -> Result<(), CaseError> {
        match self {
            Conn::Polypath(c) => c
                .send_datagram(data)
                .map_err(|e| format!("polypath send_datagram: {e}")),
            Conn::Noq { conn, .. } => conn
                .send_datagram(data)
                .map_err(|e| format!("noq send_datagram: {e}")),
        }
    }

    /// Waits for the next datagram.
    pub async fn recv_datagram(&self) -> Result<Bytes, CaseError> {
        match self {
            Conn::Polypath(c) => c
                .recv_datagram()
                .await
                .map_err(|e| format!("polypath recv_datagram: {e}")),
            Conn::Noq { conn, .. } => conn
                .read_datagram()
                .await
                .map_err(|e| format!("noq read_datagram: {e}")),
        }
    }

    /// Starts a 1-RTT key update. polypath says whether one started (it refuses while the
    /// previous update is unacknowledged); noq's API does not say, so `true`.
    pub fn force_key_update(&self) -> bool {
        match self {
            Conn::Polypath(c) => c.force_key_update(),
            Conn::Noq { conn, .. } => {
                conn.force_key_update();
                true
            }
        }
    }

    /// Makes this side send an ack-eliciting packet now (a PING on path 0).
    pub fn ping(&self) {
        match self {
            Conn::Polypath(c) => {
                c.ping(polypath_quic::PathId(0));
            }
            Conn::Noq { conn, .. } => {
                if let Some(path) = conn.path(noq::PathId::ZERO) {
                    let _ = path.ping();
                }
            }
        }
    }

    /// The negotiated TLS cipher suite as polypath saw it; `None` on the noq side (noq
    /// does not expose it).
    pub fn cipher_suite(&self) -> Option<rustls::CipherSuite> {
        match self {
            Conn::Polypath(c) => c.cipher_suite(),
            Conn::Noq { .. } => None,
        }
    }

    /// For polypath: ECN on the first path, and the packets received on it.
    pub fn ecn(&self) -> Option<(polypath_quic::ecn::EcnPathInfo, u64)> {
        match self {
            Conn::Polypath(c) => {
                let paths = c.paths();
                let first = paths.first()?;
                Some((first.ecn, first.stats.packets_received))
            }
            Conn::Noq { .. } => None,
        }
    }

    /// The peer's address (of the first path).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            Conn::Polypath(c) => c.remote_address(),
            Conn::Noq { conn, .. } => conn.path(noq::PathId::ZERO)?.remote_address().ok(),
        }
    }

    /// Key updates this side took part in (started or followed); polypath counts them,
    /// noq does not expose a count.
    pub fn key_updates(&self) -> Option<u64> {
        match self {
            Conn::Polypath(c) => Some(c.stats().key_updates),
            Conn::Noq { .. } => None,
        }
    }

    /// Whether the handshake resumed a TLS session (polypath tells; noq does not: `None`).
    pub fn is_resumed(&self) -> Option<bool> {
        match self {
            Conn::Polypath(c) => Some(c.is_resumed()),
            Conn::Noq { .. } => None,
        }
    }

    /// 0-RTT packets polypath sent (a client) or opened (a server); `None` for noq.
    pub fn zero_rtt_packets(&self) -> Option<u64> {
        match self {
            Conn::Polypath(c) => Some(c.zero_rtt_packets()),
            Conn::Noq { .. } => None,
        }
    }

    /// Closes the connection with an application error code and reason.
    pub fn close(&self, code: u32, reason: &[u8]) {
        match self {
            Conn::Polypath(c) => c.close(u64::from(code), reason),
            Conn::Noq { conn, .. } => conn.close(code.into(), reason),
        }
    }

    /// Waits for the connection to end and says how.
    pub async fn closed(&self) -> CloseSeen {
        match self {
            Conn::Polypath(c) => {
                let e = c.closed().await;
                let text = e.to_string();
                match e {
                    polypath_quic::ConnectionError::ApplicationClosed { code, reason } => {
                        CloseSeen {
                            app_code: Some(code),
                            reason,
                            text,
                        }
                    }
                    _ => CloseSeen {
                        app_code: None,
                        reason: String::new(),
                        text,
                    },
                }
            }
            Conn::Noq { conn, .. } => {
                let e = conn.closed().await;
                let text = e.to_string();
                match e {
                    noq::ConnectionError::ApplicationClosed(a) => CloseSeen {
                        app_code: Some(a.error_code.into_inner()),
                        reason: String::from_utf8_lossy(&a.reason).into_owned(),
                        text,
                    },
                    _ => CloseSeen {
                        app_code: None,
                        reason: String::new(),
                        text,
                    },
                }
            }
        }
    }

    /// Whether both sides negotiated the multipath extension.
    pub fn is_multipath(&self) -> bool {
        match self {
            Conn::Polypath(c) => c.is_multipath(),
            Conn::Noq { conn, .. } => conn.is_multipath_enabled(),
        }
    }

    /// Opens a path from `local` (a bound local address) to the peer at `remote` and waits
    /// until it is validated; returns its path ID. (polypath opens it towards the address
    /// of its first path, which is `remote` here.)
    pub async fn open_path(&self, local: SocketAddr, remote: SocketAddr) -> Result<u32, CaseError> {
        self.open_path_with(local, remote, false).await
    }

    /// [`Conn::open_path`], the path opened with status backup if `backup`.
    pub async fn open_path_with(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<u32, CaseError> {
        match self {
            Conn::Polypath(c) => {
                let status = if backup {
                    polypath_io::PathStatus::Backup
                } else {
                    polypath_io::PathStatus::Available
                };
                let id = c
                    .open_path(local, status)
                    .await
                    .map_err(|e| format!("polypath open_path: {e}"))?;
                loop {
                    if c.paths().iter().any(|p| {
                        p.snapshot.id == id
                            && p.snapshot.state == polypath_quic::sched::PathState::Validated
                    }) {
                        return Ok(id.0);
                    }
                    match c.path_event().await {
                        Ok(polypath_io::PathEvent::Validated(v)) if v == id => return Ok(id.0),
                        Ok(polypath_io::PathEvent::Abandoned(v)) if v == id => {
                            return Err(format!(
                                "polypath: path {} abandoned before validation",
                                id.0
                            ));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            return Err(format!("polypath: connection lost opening a path: {e}"));
                        }
                    }
                }
            }
            Conn::Noq { conn, .. } => {
                // The peer may issue the connection IDs for new paths only once the
                // handshake is confirmed, so wait for that, and for up to two seconds
                // more while none has come or the path ID limit is reached (as
                // polypath-io does for its own paths).
                conn.handshake_confirmed()
                    .await
                    .map_err(|e| format!("noq handshake confirmation: {e}"))?;
                let tuple = noq::FourTuple::new(remote, Some(local.ip()));
                let asked = Instant::now();
                loop {
                    let status = if backup {
                        noq::PathStatus::Backup
                    } else {
                        noq::PathStatus::Available
                    };
                    match conn.open_path(tuple, status).await {
                        Ok(path) => return Ok(noq_path_id(path.id())),
                        Err(
                            noq::PathError::RemoteCidsExhausted | noq::PathError::MaxPathIdReached,
                        ) if asked.elapsed() < Duration::from_secs(2) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(e) => return Err(format!("noq open_path: {e}")),
                    }
                }
            }
        }
    }

    /// Waits until the peer has opened a path other than path 0 and it is usable here;
    /// returns its ID.
    pub async fn peer_opened_path(&self) -> Result<u32, CaseError> {
        match self {
            Conn::Polypath(c) => loop {
                if let Some(p) = c.paths().iter().find(|p| {
                    p.snapshot.id.0 != 0
                        && p.snapshot.state == polypath_quic::sched::PathState::Validated
                }) {
                    return Ok(p.snapshot.id.0);
                }
                c.path_event()
                    .await
                    .map_err(|e| format!("polypath: connection lost waiting for a path: {e}"))?;
            },
            Conn::Noq { path_events, .. } => loop {
                match next_noq_event(path_events).await? {
                    noq::PathEvent::Established { id, .. } if noq_path_id(id) != 0 => {
                        return Ok(noq_path_id(id));
                    }
                    _ => {}
                }
            },
        }
    }

    /// Waits until path `id` is abandoned (by either side) as seen here.
    pub async fn path_abandoned(&self, id: u32) -> Result<(), CaseError> {
        match self {
            Conn::Polypath(c) => loop {
                if !c.paths().iter().any(|p| {
                    p.snapshot.id.0 == id
                        && p.snapshot.state != polypath_quic::sched::PathState::Abandoned
                }) {
                    return Ok(());
                }
                match c.path_event().await {
                    Ok(polypath_io::PathEvent::Abandoned(v)) if v.0 == id => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(format!("polypath: connection lost: {e}")),
                }
            },
            Conn::Noq { path_events, .. } => loop {
                match next_noq_event(path_events).await? {
                    noq::PathEvent::Abandoned { id: v, .. }
                    | noq::PathEvent::Discarded { id: v, .. }
                        if noq_path_id(v) == id =>
                    {
                        return Ok(());
                    }
                    _ => {}
                }
            },
        }
    }

    /// Sets this side's status for path `id` (PATH_STATUS_BACKUP or
    /// PATH_STATUS_AVAILABLE to the peer).
    pub fn set_path_backup(&self, id: u32, backup: bool) -> Result<(), CaseError> {
        match self {
            Conn::Polypath(c) => {
                let status = if backup {
                    polypath_io::PathStatus::Backup
                } else {
                    polypath_io::PathStatus::Available
                };
                c.set_path_status(polypath_quic::PathId(id), status)
                    .map_err(|e| format!("polypath set_path_status: {e}"))
            }
            Conn::Noq { conn, .. } => {
                let status = if backup {
                    noq::PathStatus::Backup
                } else {
                    noq::PathStatus::Available
                };
                conn.path(noq::PathId::from(id))
                    .ok_or_else(|| format!("noq: no path {id}"))?
                    .set_status(status)
                    .map(|_| ())
                    .map_err(|e| format!("noq set_status: {e}"))
            }
        }
    }

    /// Waits until the peer's status for path `id`, as seen here, is backup (`true`) or
    /// available (`false`).
    pub async fn peer_path_status(&self, id: u32, backup: bool) -> Result<(), CaseError> {
        match self {
            Conn::Polypath(c) => {
                let want = if backup {
                    polypath_io::PathStatus::Backup
                } else {
                    polypath_io::PathStatus::Available
                };
                loop {
                    if c.paths()
                        .iter()
                        .any(|p| p.snapshot.id.0 == id && p.snapshot.peer_status == Some(want))
                    {
                        return Ok(());
                    }
                    c.path_event()
                        .await
                        .map_err(|e| format!("polypath: connection lost: {e}"))?;
                }
            }
            Conn::Noq { path_events, .. } => {
                let want = if backup {
                    noq::PathStatus::Backup
                } else {
                    noq::PathStatus::Available
                };
                loop {
                    if let noq::PathEvent::RemoteStatus { id: v, status, .. } =
                        next_noq_event(path_events).await?
                        && noq_path_id(v) == id
                        && status == want
                    {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Abandons path `id` (PATH_ABANDON, no error).
    pub fn abandon_path(&self, id: u32) -> Result<(), CaseError> {
        match self {
            Conn::Polypath(c) => c
                .abandon_path(polypath_quic::PathId(id), 0)
                .map_err(|e| format!("polypath abandon_path: {e}")),
            Conn::Noq { conn, .. } => conn
                .path(noq::PathId::from(id))
                .ok_or_else(|| format!("noq: no path {id} to abandon"))?
                .close()
                .map_err(|e| format!("noq path close: {e}")),
        }
    }

    /// noq's connection-wide frame counters (sent, received); `None` on the polypath side.
    pub fn noq_frame_stats(&self) -> Option<(noq::FrameStats, noq::FrameStats)> {
        match self {
            Conn::Polypath(_) => None,
            Conn::Noq { conn, .. } => {
                let s = conn.stats();
                Some((s.frame_tx, s.frame_rx))
            }
        }
    }

    /// Byte counters of every path this side still knows.
    pub fn path_bytes(&self) -> Vec<PathBytes> {
        match self {
            Conn::Polypath(c) => c
                .paths()
                .iter()
                .map(|p| PathBytes {
                    id: p.snapshot.id.0,
                    udp_tx: p.stats.udp_bytes_sent,
                    udp_rx: p.stats.udp_bytes_received,
                    stream_tx: p.stats.payload_bytes_sent,
                })
                .collect(),
            Conn::Noq { conn, .. } => (0..2 * MAX_PATHS)
                .filter_map(|i| {
                    let s = conn.path_stats(noq::PathId::from(i))?;
                    Some(PathBytes {
                        id: i,
                        udp_tx: s.udp_tx.bytes,
                        udp_rx: s.udp_rx.bytes,
                        stream_tx: s.frame_tx.stream,
                    })
                })
                .collect(),
        }
    }
}

pub(crate) async fn next_noq_event(
    events: &Mutex<noq::PathEvents>,
) -> Result<noq::PathEvent, CaseError> {
    let item = poll_fn(|cx| {
        let mut events = match events.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        Pin::new(&mut *events).poll_next(cx)
    })
    .await;
    match item {
        Some(Ok(e)) => Ok(e),
        Some(Err(lagged)) => Err(format!("noq path events lagged by {}", lagged.0)),
        None => Err("noq path events ended (connection gone)".into()),
    }
}

/// The sending half of a stream of either stack.
pub enum SendS {
    /// polypath.
    Polypath(polypath_io::SendStream),
    /// noq.
    Noq(noq::SendStream),
}

impl SendS {
    /// Writes all of `data`.
    pub async fn write_all(&mut self, data: &[u8]) -> Result<(), CaseError> {
        match self {
            SendS::Polypath(s) => s
                .write_all(data)
                .await
                .map_err(|e| format!("polypath write: {e}")),
            SendS::Noq(s) => s
                .write_all(data)
                .await
                .map_err(|e| format!("noq write: {e}")),
        }
    }

    /// Ends the stream (FIN).
    pub fn finish(&mut self) -> Result<(), CaseError> {
        match self {
            SendS::Polypath(s) => s.finish().map_err(|e| format!("polypath finish: {e}")),
            SendS::Noq(s) => s.finish().map_err(|e| format!("noq finish: {e}")),
        }
    }

    /// Abandons the stream (RESET_STREAM with `code`).
    pub fn reset(&mut self, code: u32) -> Result<(), CaseError> {
        match self {
            SendS::Polypath(s) => s
                .reset(u64::from(code))
                .map_err(|e| format!("polypath reset: {e}")),
            SendS::Noq(s) => s.reset(code.into()).map_err(|e| format!("noq reset: {e}")),
        }
    }

    /// Waits until the peer stops the stream (STOP_SENDING) and returns its code; `None`
    /// if the stream ended otherwise (all data acknowledged).
    pub async fn stopped(&mut self) -> Result<Option<u64>, CaseError> {
        match self {
            SendS::Polypath(s) => match s.finished().await {
                Ok(()) => Ok(None),
                Err(polypath_io::WriteError::Stopped(code)) => Ok(Some(code.into_inner())),
                Err(e) => Err(format!("polypath stream: {e}")),
            },
            SendS::Noq(s) => s
                .stopped()
                .await
                .map(|c| c.map(|c| c.into_inner()))
                .map_err(|e| format!("noq stopped: {e}")),
        }
    }
}

/// The receiving half of a stream of either stack.
pub enum RecvS {
    /// polypath.
    Polypath(polypath_io::RecvStream),
    /// noq.
    Noq(noq::RecvStream),
}

impl RecvS {
    /// The next chunk of data in order, or `None` at the end of the stream.
    pub async fn read_chunk(&mut self) -> Result<Option<Bytes>, CaseError> {
        const MAX: usize = 64 * 1024;
        match self {
            RecvS::Polypath(s) => s
                .read_chunk(MAX)
                .await
                .map_err(|e| format!("polypath read: {e}")),
            RecvS::Noq(s) => s.read_chunk(MAX).await.map_err(|e| match e {
                // noq's text for a lost connection leaves out why.
                noq::ReadError::ConnectionLost(why) => format!("noq read: connection lost: {why}"),
                e => format!("noq read: {e}"),
            }),
        }
    }

    /// Asks the peer to stop sending (STOP_SENDING with `code`).
    pub fn stop(&mut self, code: u32) -> Result<(), CaseError> {
        match self {
            RecvS::Polypath(s) => s
                .stop(u64::from(code))
                .map_err(|e| format!("polypath stop: {e}")),
            RecvS::Noq(s) => s.stop(code.into()).map_err(|e| format!("noq stop: {e}")),
        }
    }

    /// Reads until the stream ends; returns the bytes read and the reset code if the peer
    /// reset the stream (`None` for a clean end).
    pub async fn read_until_reset(&mut self) -> Result<(u64, Option<u64>), CaseError> {
        let mut len = 0u64;
        loop {
            let chunk = match self {
                RecvS::Polypath(s) => match s.read_chunk(64 * 1024).await {
                    Ok(c) => c,
                    Err(polypath_io::ReadError::Reset(code)) => {
                        return Ok((len, Some(code.into_inner())));
                    }
                    Err(e) => return Err(format!("polypath read: {e}")),
                },
                RecvS::Noq(s) => match s.read_chunk(64 * 1024).await {
                    Ok(c) => c,
                    Err(noq::ReadError::Reset(code)) => {
                        return Ok((len, Some(code.into_inner())));
                    }
                    Err(e) => return Err(format!("noq read: {e}")),
                },
            };
            match chunk {
                Some(c) => len += c.len() as u64,
                None => return Ok((len, None)),
            }
        }
    }

    /// Reads to the end of the stream; returns the length and SHA-256 of what came.
    pub async fn read_hashed(&mut self) -> Result<(u64, [u8; 32]), CaseError> {
        let mut hash = Sha256::new();
        let mut len = 0u64;
        while let Some(chunk) = self.read_chunk().await? {
            len += chunk.len() as u64;
            hash.update(&chunk);
        }
        Ok((len, hash.finalize().into()))
    }
}
