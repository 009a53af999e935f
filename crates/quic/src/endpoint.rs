//! The endpoint: the connections behind one set of UDP sockets. It routes each received
//! datagram to its connection by destination connection ID, accepts new connections as a
//! server, and answers what no connection can: Version Negotiation, Retry and stateless
//! resets.

use crate::config::{ClientConfig, EndpointConfig, ServerConfig};
use crate::connection::{
    Connection, ConnectionParams, EndpointEvent, Event, TlsSessionBuilder, Transmit,
};
use crate::crypto::{ResetKey, TokenKey};
use crate::ecn::EcnCodepoint;
use crate::packet::{self, Header, LongType};
use crate::qlog::QlogStream;
use crate::shared::{ConnectionId, PathId, Side};
use crate::streams::ReceiveBudget;
use bytes::BytesMut;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Identifies a connection within its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionHandle(pub u64);

/// Why a client connection could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The remote address cannot be used (port 0 or unspecified IP).
    #[error("invalid remote address {0}")]
    InvalidRemoteAddress(SocketAddr),
    /// TLS refused the configuration or server name.
    #[error("TLS setup failed: {0}")]
    Tls(crate::TransportError),
}

/// What the endpoint knows of the first packet of a datagram that may open a connection.
struct InitialPacket {
    /// The Destination Connection ID (the Initial keys derive from it).
    dcid: ConnectionId,
    /// The client's Source Connection ID.
    client_scid: ConnectionId,
    /// The QUIC version.
    version: u32,
    /// Offset of the protected Packet Number field.
    pn_offset: usize,
    /// Length of the packet within the datagram.
    len: usize,
}

/// The payload of the first packet of `data`, an Initial described by `first`, if it
/// decrypts with the server's Initial keys. The keys derive from the packet's Destination
/// Connection ID: the client's random one, or after a Retry the Retry's Source Connection
/// ID (RFC 9001 section 5.2).
fn open_initial(data: &[u8], first: &InitialPacket) -> Option<Vec<u8>> {
    let keys = crate::crypto::initial_keys(first.version, &first.dcid, Side::Server)?;
    open_first_packet(&keys, data.get(..first.len)?, first.pn_offset)
}

/// The payload of `packet`, the first one received in its packet number space, if it
/// decrypts with `keys`; decrypted on a copy so that nothing is changed or kept.
pub(crate) fn open_first_packet(
    keys: &crate::crypto::Keys,
    packet: &[u8],
    pn_offset: usize,
) -> Option<Vec<u8>> {
    let mut packet = packet.to_vec();
    let unprotected =
        packet::remove_header_protection(&mut packet, pn_offset, keys.remote.header.as_ref())
            .ok()?;
    // No packet number was received before it.
    let pn = packet::decode_packet_number(
        None,
        u64::from(unprotected.truncated_pn),
        unprotected.pn_nbits(),
    );
    let header_len = pn_offset + unprotected.pn_len;
    let payload_len = crate::crypto::open_packet(
        keys.remote.packet.as_ref(),
        None,
        pn,
        &mut packet,
        header_len,
    )
    .ok()?;
    packet
        .get(header_len..header_len + payload_len)
        .map(<[u8]>::to_vec)
}

/// How long Retry tokens stay valid.
const RETRY_TOKEN_LIFETIME: Duration = Duration::from_secs(30);

/// The connections behind one set of local addresses.
pub struct Endpoint {
    config: Arc<EndpointConfig>,
    server: Option<Arc<ServerConfig>>,
    rng: ChaCha20Rng,
    reset_key: Arc<ResetKey>,
    token_key: TokenKey,
    connections: BTreeMap<ConnectionHandle, Connection>,
    next_handle: u64,
    /// Local connection IDs in use, to route short-header packets.
    cid_map: BTreeMap<ConnectionId, ConnectionHandle>,
    /// Client-chosen destination IDs of connections still in the handshake (server side).
    initial_map: BTreeMap<ConnectionId, ConnectionHandle>,
    /// The key of each connection's entry in `initial_map`, to drop it in one lookup when
    /// the handshake ends (not a walk over every handshake in progress per packet).
    initial_dcid: BTreeMap<ConnectionHandle, ConnectionId>,
    incoming: VecDeque<ConnectionHandle>,
    /// Datagrams the endpoint itself sends (Version Negotiation, Retry, stateless reset).
    stateless: VecDeque<(Transmit, Vec<u8>)>,
    /// Connection served last by poll_transmit (round robin).
    last_served: Option<ConnectionHandle>,
    /// Time base for Retry tokens (their lifetime is checked against it).
    epoch: Option<Instant>,
    /// The cap on all connections' receive windows.
    receive_budget: Option<Arc<ReceiveBudget>>,
    /// Which connections may have something to send, and when each needs its timers run.
    agenda: Agenda,
    /// The connections whose timers expired, kept from one timeout to the next.
    due_scratch: Vec<ConnectionHandle>,
}

/// What spares a busy endpoint from asking every connection on every datagram: the
/// connections touched (by a datagram, a timer, a link event or the application) since
/// they last had nothing to send, and every connection's next deadline, indexed by time.
/// A connection that has nothing to send keeps having nothing until one of those touches
/// it: its pacer and loss timers are deadlines too.
#[derive(Debug, Default)]
struct Agenda {
    /// Connections that may have something to send.
    active: BTreeSet<ConnectionHandle>,
    /// Connections whose deadline may have changed since it was indexed.
    stale: BTreeSet<ConnectionHandle>,
    /// Connections touched since [`Endpoint::take_touched`] was last called.
    touched: BTreeSet<ConnectionHandle>,
    /// Each connection's indexed deadline.
    deadline: BTreeMap<ConnectionHandle, Instant>,
    /// The same deadlines, in time order.
    timers: BTreeSet<(Instant, ConnectionHandle)>,
}

impl Agenda {
    /// `handle` may have something to send and its deadline may have moved.
    fn touch(&mut self, handle: ConnectionHandle) {
        self.active.insert(handle);
        self.stale.insert(handle);
        self.touched.insert(handle);
    }

    fn forget(&mut self, handle: ConnectionHandle) {
        self.active.remove(&handle);
        self.stale.remove(&handle);
        if let Some(t) = self.deadline.remove(&handle) {
            self.timers.remove(&(t, handle));
        }
    }

    /// Indexes the deadlines of the stale connections again.
    fn refresh(&mut self, connections: &BTreeMap<ConnectionHandle, Connection>) {
        // Emptied in place: the set keeps its node for the next touch.
        while let Some(h) = self.stale.pop_first() {
            let now_due = connections.get(&h).and_then(Connection::poll_timeout);
            // One lookup of the indexed deadline, changed in place when it moved.
            let indexed = match (self.deadline.entry(h), now_due) {
                (Entry::Occupied(e), _) if Some(*e.get()) == now_due => continue,
                (Entry::Occupied(mut e), Some(t)) => Some(e.insert(t)),
                (Entry::Occupied(e), None) => Some(e.remove()),
                (Entry::Vacant(e), Some(t)) => {
                    e.insert(t);
                    None
                }
                (Entry::Vacant(_), None) => continue,
            };
            if let Some(t) = indexed {
                self.timers.remove(&(t, h));
            }
            if let Some(t) = now_due {
                self.timers.insert((t, h));
            }
        }
    }

    /// The earliest deadline: of the connections indexed as they are, and of the stale
    /// ones as they are now (their index entries are out of date, too early or too late).
    fn earliest(&self, connections: &BTreeMap<ConnectionHandle, Connection>) -> Option<Instant> {
        let indexed = self
            .timers
            .iter()
            .find(|(_, h)| !self.stale.contains(h))
            .map(|(t, _)| *t);
        let fresh = self
            .stale
            .iter()
            .filter_map(|h| connections.get(h)?.poll_timeout())
            .min();
        [indexed, fresh].into_iter().flatten().min()
    }

    /// The active connection after `after` in handle order, wrapping around.
    fn next_active(&self, after: Option<ConnectionHandle>) -> Option<ConnectionHandle> {
        after
            .and_then(|a| {
                self.active
                    .range((Bound::Excluded(a), Bound::Unbounded))
                    .next()
            })
            .or_else(|| self.active.first())
            .copied()
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("connections", &self.connections.len())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Creates an endpoint; pass a [`ServerConfig`] to accept connections.
    pub fn new(config: EndpointConfig, server: Option<ServerConfig>) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(config.rng_seed);
        let reset_key = Arc::new(ResetKey::new(&config.reset_key));
        let mut token_secret = [0u8; 32];
        rng.fill_bytes(&mut token_secret);
        Endpoint {
            receive_budget: config
                .receive_budget
                .map(|limit| Arc::new(ReceiveBudget::new(limit))),
            agenda: Agenda::default(),
            due_scratch: Vec::new(),
            config: Arc::new(config),
            server: server.map(Arc::new),
            rng,
            reset_key,
            token_key: TokenKey::new(&token_secret),
            connections: BTreeMap::new(),
            next_handle: 0,
            cid_map: BTreeMap::new(),
            initial_map: BTreeMap::new(),
            initial_dcid: BTreeMap::new(),
            incoming: VecDeque::new(),
            stateless: VecDeque::new(),
            last_served: None,
            epoch: None,
        }
    }

    /// Replaces the server configuration (for example a new certificate).
    pub fn set_server_config(&mut self, server: Option<ServerConfig>) {
        self.server = server.map(Arc::new);
    }

    /// Starts a client connection from `local` to `remote`.
    pub fn connect(
        &mut self,
        now: Instant,
        config: ClientConfig,
        local: SocketAddr,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<ConnectionHandle, ConnectError> {
        if remote.port() == 0 || remote.ip().is_unspecified() {
            return Err(ConnectError::InvalidRemoteAddress(remote));
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.2
        //# When an Initial packet is sent by a client that has not previously
        //# received an Initial or Retry packet from the server, the client
        //# populates the Destination Connection ID field with an unpredictable
        //# value.  This Destination Connection ID MUST be at least 8 bytes in
        //# length.
        let dcid = ConnectionId::random(&mut self.rng, 8.max(self.config.local_cid_len));
        let scid = self.new_local_cid();
        let handle = self.next_handle();
        let qlog = self.qlog_for(now, Side::Client, &dcid);
        let params = ConnectionParams {
            side: Side::Client,
            config: config.transport.clone(),
            version: config.version,
            initial_version: config.version,
            available_versions: config.available_versions.clone(),
            now,
            local,
            remote,
            tls: TlsSessionBuilder::Client {
                config: config.tls.clone(),
                server_name: server_name.to_owned(),
            },
            rng_seed: self.rng.next_u64(),
            reset_key: self.reset_key.clone(),
            local_cid_len: self.config.local_cid_len,
            original_dcid: dcid,
            local_cid: scid,
            remote_cid: dcid,
            retry_scid: None,
            qlog,
            receive_budget: self.receive_budget.clone(),
            packet_protection: self.config.packet_protection,
        };
        let conn = Connection::new(params).map_err(ConnectError::Tls)?;
        self.connections.insert(handle, conn);
        self.agenda.touch(handle);
        self.drain_endpoint_events(handle);
        Ok(handle)
    }

    /// Processes a datagram received on `local` from `remote` with the ECN codepoint `ecn`
    /// of its IP header (`None` for Not-ECT, or when the driver cannot read it). Returns the
    /// connection it was delivered to, if any.
    pub fn handle(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        ecn: Option<EcnCodepoint>,
        data: BytesMut,
    ) -> Option<ConnectionHandle> {
        let header = match packet::decode_header(&data, self.config.local_cid_len) {
            Ok(h) => h,
            Err(packet::PacketDecodeError::UnsupportedVersion { dcid, scid, .. }) => {
                let (Some(dcid), Some(scid)) = (data.get(dcid), data.get(scid)) else {
                    return None;
                };
                let (dcid, scid) = (dcid.to_vec(), scid.to_vec());
                self.send_version_negotiation(local, remote, &dcid, &scid, data.len());
                return None;
            }
            Err(_) => return None,
        };
        let routed = self
            .cid_map
            .get(&header.dcid)
            .or_else(|| match &header.header {
                Header::Long {
                    ty: LongType::Initial | LongType::ZeroRtt,
                    ..
                } => self.initial_map.get(&header.dcid),
                _ => None,
            });
        if let Some(&handle) = routed
            && let Some(conn) = self.connections.get_mut(&handle)
        {
            conn.handle_datagram(now, local, remote, ecn, data);
            self.agenda.touch(handle);
            self.drain_endpoint_events(handle);
            return Some(handle);
        }
        match &header.header {
            Header::Long {
                ty: LongType::Initial,
                version,
                scid,
                token,
                pn_offset,
            } => {
                let (version, scid, token) = (*version, *scid, token.clone());
                let token_bytes = data.get(token).map(|t| t.to_vec()).unwrap_or_default();
                let first = InitialPacket {
                    dcid: header.dcid,
                    client_scid: scid,
                    version,
                    pn_offset: *pn_offset,
                    len: header.packet_len,
                };
                self.on_new_initial(now, local, remote, ecn, data, &first, &token_bytes)
            }
            Header::Short { .. } => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.1
                //# However,
                //# the comparison MUST be performed when the first packet in an incoming datagram
                //# either cannot be associated with a connection or cannot be decrypted.
                let reset = self
                    .connections
                    .iter_mut()
                    .find_map(|(h, c)| c.handle_possible_reset(now, &data).then_some(*h));
                if let Some(handle) = reset {
                    self.agenda.touch(handle);
                    self.drain_endpoint_events(handle);
                    return Some(handle);
                }
                self.send_stateless_reset(local, remote, &header.dcid, data.len());
                None
            }
            _ => None,
        }
    }

    /// A datagram whose first packet is an Initial that matches no connection: the server
    /// creates a connection for it only once that packet decrypts and its frames were
    /// processed without a connection error. Anything else is dropped without leaving
    /// state behind (no connection, routing entry, timer or qlog file).
    #[allow(clippy::too_many_arguments)]
    fn on_new_initial(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        ecn: Option<EcnCodepoint>,
        data: BytesMut,
        first: &InitialPacket,
        token: &[u8],
    ) -> Option<ConnectionHandle> {
        let server = self.server.clone()?;
        let InitialPacket {
            dcid,
            client_scid,
            version,
            ..
        } = *first;
        if !server.versions.contains(&version) {
            self.send_version_negotiation(local, remote, &dcid, &client_scid, data.len());
            return None;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-14.1
        //# A server MUST discard an Initial packet that is carried in a UDP
        //# datagram with a payload that is smaller than the smallest allowed
        //# maximum datagram size of 1200 bytes.
        if data.len() < 1200 {
            return None;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.2
        //# This Destination Connection ID MUST be at least 8 bytes in
        //# length.
        if dcid.len() < 8 && token.is_empty() {
            return None;
        }
        if self.handshaking_count() >= server.max_incoming {
            return None;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-21.2
        //# Packets that cannot be
        //# authenticated are discarded.
        //= https://www.rfc-editor.org/rfc/rfc9001#section-5.2
        //# Initial packets apply the packet protection process, but use a secret derived
        //# from the Destination Connection ID field from the client's first Initial
        //# packet.
        let Some(payload) = open_initial(&data, first) else {
            tracing::trace!(%remote, "dropping an Initial that does not decrypt");
            return None;
        };
        let epoch = *self.epoch.get_or_insert(now);
        let since_epoch = now.saturating_duration_since(epoch);
        //= https://www.rfc-editor.org/rfc/rfc9000#section-8.1.2
        //# A server can also use a Retry packet to defer the state and processing
        //# costs of connection establishment.
        let under_load = server
            .retry_above
            .is_some_and(|n| self.handshaking_count() >= n);
        let validate = server.retry || under_load;
        let tokens_accepted = server.retry || server.retry_above.is_some();
        let opened = (tokens_accepted && !token.is_empty()).then(|| {
            self.token_key
                .open_retry_token(token, remote, since_epoch, RETRY_TOKEN_LIFETIME)
        });
        let (original_dcid, retry_scid) = match opened {
            Some(Ok(t)) if t.retry_scid == dcid => (t.original_dcid, Some(dcid)),
            //= https://www.rfc-editor.org/rfc/rfc9000#section-8.1.2
            //# Upon receiving the client's Initial packet, the server can request address
            //# validation by sending a Retry packet (Section 17.2.5) containing a token.
            _ if validate => {
                self.send_retry(local, remote, version, &dcid, &client_scid, since_epoch);
                return None;
            }
            //= https://www.rfc-editor.org/rfc/rfc9000#section-8.1.3
            //# If the token is invalid, then the server SHOULD proceed as if the client
            //# did not have a validated address, including potentially sending a Retry
            //# packet.
            _ => (dcid, None),
        };
        //= https://www.rfc-editor.org/rfc/rfc9368#section-2.3
        //# When the server can parse the client's first flight using the client's Chosen
        //# Version, it can extract the client's Version Information structure
        let offer = crate::version_negotiation::client_offer(&payload);
        let negotiated =
            crate::version_negotiation::negotiate(&server.versions, version, offer.as_ref());
        let local_cid = self.new_local_cid();
        let handle = self.next_handle();
        let qlog = self.qlog_for(now, Side::Server, &original_dcid);
        let params = ConnectionParams {
            side: Side::Server,
            config: server.transport.clone(),
            version: negotiated,
            initial_version: version,
            available_versions: server.versions.clone(),
            now,
            local,
            remote,
            tls: TlsSessionBuilder::Server {
                config: server.tls.clone(),
            },
            rng_seed: self.rng.next_u64(),
            reset_key: self.reset_key.clone(),
            local_cid_len: self.config.local_cid_len,
            original_dcid,
            local_cid,
            remote_cid: client_scid,
            retry_scid,
            qlog,
            receive_budget: self.receive_budget.clone(),
            packet_protection: self.config.packet_protection,
        };
        let mut conn = match Connection::new(params) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "refusing connection");
                return None;
            }
        };
        // Initial packets are keyed by the client's DCID; after a Retry that is our SCID.
        conn.handle_datagram(now, local, remote, ecn, data);
        if !conn.received_any() {
            // Decrypted above, but dropped by the connection (a duplicate or coalesced
            // packets it could not use): nothing to keep.
            return None;
        }
        if conn.is_closed() {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-11.1
            //# As the AEAD for Initial packets does not provide strong authentication, an
            //# endpoint MAY discard an invalid Initial packet.
            // The first Initial already failed (a malformed frame, a TLS alert such as no
            // common ALPN): answer with the connection's CONNECTION_CLOSE, as a stateless
            // packet, and keep nothing.
            let mut buf = Vec::new();
            if let Some(t) = conn.poll_transmit(now, &mut buf) {
                buf.truncate(t.size);
                self.queue_stateless(t.source, t.destination, buf);
            }
            return None;
        }
        self.connections.insert(handle, conn);
        self.agenda.touch(handle);
        self.initial_map.insert(dcid, handle);
        self.initial_dcid.insert(handle, dcid);
        self.drain_endpoint_events(handle);
        self.incoming.push_back(handle);
        Some(handle)
    }

    /// Number of connections this endpoint holds (handshaking, established, closing or
    /// draining), for tests and monitoring.
    pub fn connection_count(&self) -> usize {
        self.connections.len()
    }

    /// The cap on all connections' receive windows and how much of it is in use.
    pub fn receive_budget(&self) -> Option<&ReceiveBudget> {
        self.receive_budget.as_deref()
    }

    /// Number of entries in the endpoint's routing tables (local connection IDs and the
    /// client-chosen IDs of connections in their handshake), for tests and monitoring.
    #[doc(hidden)]
    pub fn routing_entries(&self) -> usize {
        self.cid_map.len() + self.initial_map.len()
    }

    fn handshaking_count(&self) -> usize {
        self.connections
            .values()
            .filter(|c| c.is_handshaking() && !c.is_closed())
            .count()
    }

    /// Takes the next connection a client opened to this server.
    pub fn accept(&mut self) -> Option<ConnectionHandle> {
        while let Some(h) = self.incoming.pop_front() {
            if self.connections.contains_key(&h) {
                return Some(h);
            }
        }
        None
    }

    /// The connection with this handle.
    pub fn connection(&self, handle: ConnectionHandle) -> Option<&Connection> {
        self.connections.get(&handle)
    }

    /// The connection with this handle, for reading, writing and closing.
    pub fn connection_mut(&mut self, handle: ConnectionHandle) -> Option<&mut Connection> {
        let conn = self.connections.get_mut(&handle)?;
        self.agenda.touch(handle);
        Some(conn)
    }

    /// Handles of all live connections.
    pub fn connection_handles(&self) -> Vec<ConnectionHandle> {
        self.connections.keys().copied().collect()
    }

    /// Takes the next application event of any connection. Connections that are drained and
    /// have reported everything are removed.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        let mut gone = Vec::new();
        let mut found = None;
        for (h, conn) in self.connections.iter_mut() {
            if let Some(e) = conn.poll_event() {
                found = Some((*h, e));
                break;
            }
            if conn.is_drained() {
                gone.push(*h);
            }
        }
        for h in gone {
            self.remove(h);
        }
        found
    }

    /// The connections touched (by a datagram, a timer, a link event, a transmit or
    /// [`Endpoint::connection_mut`]) since the last call: the only ones whose events or
    /// state can have changed in between.
    pub fn take_touched(&mut self) -> BTreeSet<ConnectionHandle> {
        std::mem::take(&mut self.agenda.touched)
    }

    /// Events of one connection.
    pub fn poll_connection_event(&mut self, handle: ConnectionHandle) -> Option<Event> {
        self.connections.get_mut(&handle)?.poll_event()
    }

    /// Forgets a connection immediately (its state and routing entries).
    pub fn remove(&mut self, handle: ConnectionHandle) {
        self.connections.remove(&handle);
        self.agenda.forget(handle);
        self.cid_map.retain(|_, h| *h != handle);
        self.forget_initial_dcid(handle);
    }

    /// Stops routing by the client's first destination connection ID to `handle`.
    fn forget_initial_dcid(&mut self, handle: ConnectionHandle) {
        if let Some(dcid) = self.initial_dcid.remove(&handle)
            && self.initial_map.get(&dcid) == Some(&handle)
        {
            self.initial_map.remove(&dcid);
        }
    }

    /// Gives a link-layer event to every connection of this endpoint (see
    /// [`Connection::handle_link_event`]); `local` is the local IP address of the interface
    /// the event concerns.
    pub fn handle_link_event(
        &mut self,
        now: Instant,
        event: &polypath_link::LinkEvent,
        local: Option<std::net::IpAddr>,
    ) {
        for h in self.connection_handles() {
            if let Some(conn) = self.connections.get_mut(&h) {
                conn.handle_link_event(now, event, local);
                self.agenda.touch(h);
            }
            self.drain_endpoint_events(h);
        }
    }

    /// The network answered a datagram sent to `remote` with ICMP "port unreachable": ends
    /// the connection attempts to `remote` that have heard nothing yet (see
    /// [`Connection::handle_port_unreachable`]).
    pub fn handle_port_unreachable(&mut self, now: Instant, remote: std::net::IpAddr) {
        for h in self.connection_handles() {
            if let Some(conn) = self.connections.get_mut(&h)
                && conn.handle_port_unreachable(now, remote)
            {
                self.agenda.touch(h);
                self.drain_endpoint_events(h);
            }
        }
    }

    /// Writes the next datagram to send into `buf`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some((t, data)) = self.stateless.pop_front() {
            buf.clear();
            buf.extend_from_slice(&data);
            return Some(t);
        }
        // Round robin over the connections that may have something to send, starting
        // after the one served last; one with nothing leaves the agenda until touched.
        let mut cursor = self.last_served;
        while let Some(h) = self.agenda.next_active(cursor) {
            let Some(conn) = self.connections.get_mut(&h) else {
                self.agenda.forget(h);
                continue;
            };
            let transmit = conn.poll_transmit(now, buf);
            self.agenda.stale.insert(h);
            self.agenda.touched.insert(h);
            self.drain_endpoint_events(h);
            if transmit.is_some() {
                self.last_served = Some(h);
                return transmit;
            }
            self.agenda.active.remove(&h);
            cursor = Some(h);
        }
        // Nothing left to send: the deadlines are indexed as the connections are now, once
        // per round of polls rather than before every poll.
        self.agenda.refresh(&self.connections);
        None
    }

    /// The earliest deadline of any connection.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.agenda.earliest(&self.connections)
    }

    /// Runs every connection's expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.agenda.refresh(&self.connections);
        let mut due = std::mem::take(&mut self.due_scratch);
        due.clear();
        due.extend(
            self.agenda
                .timers
                .iter()
                .take_while(|(t, _)| *t <= now)
                .map(|(_, h)| *h),
        );
        for &h in &due {
            if let Some(conn) = self.connections.get_mut(&h) {
                conn.handle_timeout(now);
                self.agenda.touch(h);
            } else {
                self.agenda.forget(h);
            }
            self.drain_endpoint_events(h);
        }
        self.due_scratch = due;
    }

    fn drain_endpoint_events(&mut self, handle: ConnectionHandle) {
        let Some(conn) = self.connections.get_mut(&handle) else {
            return;
        };
        let mut handshake_done = !conn.is_handshaking();
        let mut events = Vec::new();
        while let Some(e) = conn.poll_endpoint_event() {
            events.push(e);
        }
        if conn.is_closed() {
            handshake_done = true;
        }
        for e in events {
            match e {
                EndpointEvent::NewLocalCid(cid) => {
                    self.cid_map.insert(cid, handle);
                }
                EndpointEvent::RetiredLocalCid(cid) => {
                    if self.cid_map.get(&cid) == Some(&handle) {
                        self.cid_map.remove(&cid);
                    }
                }
                EndpointEvent::Drained => {
                    self.cid_map.retain(|_, h| *h != handle);
                    self.forget_initial_dcid(handle);
                }
            }
        }
        if handshake_done {
            self.forget_initial_dcid(handle);
        }
    }

    fn next_handle(&mut self) -> ConnectionHandle {
        let h = ConnectionHandle(self.next_handle);
        self.next_handle += 1;
        h
    }

    fn new_local_cid(&mut self) -> ConnectionId {
        loop {
            let cid = ConnectionId::random(&mut self.rng, self.config.local_cid_len);
            if !self.cid_map.contains_key(&cid) {
                return cid;
            }
        }
    }

    fn qlog_for(&self, now: Instant, side: Side, odcid: &ConnectionId) -> Option<QlogStream> {
        let factory = self.config.qlog.as_ref()?;
        let out = factory.create(side, odcid)?;
        Some(QlogStream::new(out, now, side, odcid))
    }

    //= https://www.rfc-editor.org/rfc/rfc9000#section-6.1
    //# If the version selected by the client is not acceptable to the
    //# server, the server responds with a Version Negotiation packet; see
    //# Section 17.2.1.
    fn send_version_negotiation(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        dcid: &[u8],
        scid: &[u8],
        len: usize,
    ) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-6.1
        //# A server MAY limit the number of Version Negotiation packets it sends.
        //
        //= https://www.rfc-editor.org/rfc/rfc9000#section-5.2.2
        //# Servers MUST drop incoming packets under all other circumstances.
        let Some(server) = self.server.clone() else {
            return;
        };
        if len < 1200 {
            return;
        }
        let mut buf = Vec::new();
        let first: u8 = self.rng.random();
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.1
        //# The server MUST include the value from the Source Connection ID field
        //# of the packet it receives in the Destination Connection ID field.
        let grease = packet::grease_version(self.rng.random());
        packet::write_version_negotiation(
            &mut buf,
            first,
            scid,
            dcid,
            &server.versions,
            Some(grease),
        );
        self.queue_stateless(local, remote, buf);
    }

    fn send_retry(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        version: u32,
        client_dcid: &ConnectionId,
        client_scid: &ConnectionId,
        since_epoch: Duration,
    ) {
        let retry_scid = self.new_local_cid();
        let token = self.token_key.seal_retry_token(
            &mut self.rng,
            remote,
            client_dcid,
            &retry_scid,
            since_epoch,
        );
        let mut buf = Vec::new();
        let unused: u8 = self.rng.random();
        packet::write_retry(&mut buf, unused, version, client_scid, &retry_scid, &token);
        let Some(tag) = crate::crypto::retry_integrity_tag(version, client_dcid, &buf) else {
            return;
        };
        buf.extend_from_slice(&tag);
        self.queue_stateless(local, remote, buf);
    }

    //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3
    //# An endpoint that receives packets that it cannot process sends a
    //# packet in the following layout (see Section 17.2):
    fn send_stateless_reset(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        dcid: &ConnectionId,
        received_len: usize,
    ) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.3
        //# An endpoint MUST ensure that every Stateless Reset that it sends is smaller than
        //# the packet that triggered it, unless it maintains state sufficient to prevent
        //# looping.
        const MIN_RESET: usize = 21;
        if received_len <= MIN_RESET || dcid.is_empty() {
            return;
        }
        let len = (received_len - 1).min(43);
        let mut buf = vec![0u8; len - 16];
        self.rng.fill_bytes(&mut buf);
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3
        //# A Stateless Reset uses an entire UDP datagram, starting with the first two bits
        //# of the packet header.  The remainder of the first byte and an arbitrary number
        //# of bytes following it are set to values that SHOULD be indistinguishable
        //# from random.
        buf[0] = (buf[0] & 0x3f) | 0x40;
        let token = self.reset_key.token(dcid);
        buf.extend_from_slice(&token.0);
        self.queue_stateless(local, remote, buf);
    }

    fn queue_stateless(&mut self, local: SocketAddr, remote: SocketAddr, data: Vec<u8>) {
        if self.stateless.len() >= 64 {
            return;
        }
        let t = Transmit {
            destination: remote,
            source: local,
            size: data.len(),
            segment_size: None,
            path: PathId::ZERO,
            ecn: None,
        };
        self.stateless.push_back((t, data));
    }
}
