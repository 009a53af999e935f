//! The QUIC connection state machine.
//!
//! A [`Connection`] is driven from outside: the owner ([`crate::Endpoint`]) hands it
//! received datagrams with [`Connection::handle_datagram`], collects datagrams to send with
//! [`Connection::poll_transmit`], arms a timer for [`Connection::poll_timeout`] and calls
//! [`Connection::handle_timeout`] when it fires. The application reads and writes streams
//! and datagrams through the methods below and learns about progress from
//! [`Connection::poll_event`].

mod cids;
mod paths;
mod recv;
mod send;
mod spaces;

pub use cids::{IssuedCid, PeerCid};
pub use paths::PathStats;

use crate::cc::CongestionEvent;
use crate::config::TransportConfig;
use crate::crypto::{OneRttKeys, ResetKey, TlsSession};
use crate::datagrams::{DatagramQueues, SendDatagramError};
use crate::qlog::QlogStream;
use crate::recovery::{AckOutcome, SentPacket, persistent_congestion, pto_duration};
use crate::sched::{Decision, PathEvent, PathSnapshot, PathState, PathStatus, PendingData, Scheduler};
use crate::shared::{ConnectionId, Dir, PathId, ResetToken, Side, StreamId};
use crate::streams::{CryptoStream, ReadError, StreamEvent, Streams, WriteError};
use crate::transport_parameters::TransportParameters;
use crate::{TransportError, TransportErrorCode, VarInt};
use bytes::Bytes;
use cids::{LocalCids, PeerCids};
use paths::{MtuDiscovery, Path};
use rand::{Rng, RngCore};
use rand_chacha::ChaCha20Rng;
use serde_json::json;
use spaces::{AckSpace, ConnFrame, PacketSpace, SentFrames};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A datagram (or a GSO batch of equal-sized datagrams) ready to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it.
    pub destination: SocketAddr,
    /// The local address to send from: the path's local address. Drivers with one socket
    /// per local address pick the socket by it.
    pub source: SocketAddr,
    /// Total number of bytes written to the buffer.
    pub size: usize,
    /// When the buffer holds several datagrams, the size of each (the last may be
    /// shorter), for UDP generic segmentation offload.
    pub segment_size: Option<usize>,
    /// The path this transmit belongs to.
    pub path: PathId,
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// The server supports none of the versions the client offered.
    #[error("no QUIC version in common with the peer")]
    VersionMismatch,
    /// This endpoint closed the connection because the peer broke the protocol.
    #[error("closed locally on a transport error: {0}")]
    TransportError(TransportError),
    /// The peer closed the connection with a transport error.
    #[error("peer closed the connection: {0}")]
    ConnectionClosed(TransportError),
    /// The peer's application closed the connection.
    #[error("peer application closed the connection with code {code}: {reason}")]
    ApplicationClosed {
        /// Application error code.
        code: u64,
        /// Reason phrase (lossily decoded).
        reason: String,
    },
    /// The peer sent a stateless reset.
    #[error("the peer reset the connection (stateless reset)")]
    Reset,
    /// Nothing was received for the idle timeout.
    #[error("the connection timed out")]
    TimedOut,
    /// The local application closed the connection.
    #[error("closed by the local application")]
    LocallyClosed,
}

/// Something the application should know about.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The handshake completed; streams and datagrams can flow.
    Connected,
    /// The handshake is confirmed (RFC 9001 section 4.1.2).
    HandshakeConfirmed,
    /// A stream changed state.
    Stream(StreamEvent),
    /// A datagram arrived; read it with [`Connection::recv_datagram`].
    DatagramReceived,
    /// A path changed state.
    Path(PathEvent),
    /// The connection ended; no more data can be exchanged.
    ConnectionLost(ConnectionError),
}

/// Something the owning endpoint must do for the connection (routing changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EndpointEvent {
    /// Route packets carrying this ID to the connection.
    NewLocalCid(ConnectionId),
    /// Stop routing this ID.
    RetiredLocalCid(ConnectionId),
    /// The connection is gone; forget it.
    Drained,
}

/// Counters of a whole connection.
#[derive(Debug, Default, Clone)]
pub struct ConnectionStats {
    /// Time from creation to handshake completion.
    pub handshake_duration: Option<Duration>,
    /// Packets sent on all paths and spaces.
    pub packets_sent: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Packets received and successfully decrypted.
    pub packets_received: u64,
    /// Datagrams dropped because they could not be parsed or decrypted.
    pub packets_dropped: u64,
    /// 1-RTT key updates completed.
    pub key_updates: u64,
    /// Stream data bytes received in order by the application.
    pub stream_bytes_read: u64,
}

/// How a path looks from outside, for summaries.
#[derive(Debug, Clone)]
pub struct PathInfo {
    /// The scheduler's view of the path.
    pub snapshot: PathSnapshot,
    /// Counters.
    pub stats: PathStats,
}

#[derive(Debug)]
enum State {
    Handshake,
    Established,
    /// We sent CONNECTION_CLOSE; we answer further packets with it until the deadline.
    Closing { deadline: Instant },
    /// The peer closed; we send nothing until the deadline.
    Draining { deadline: Instant },
    Drained,
}

/// The CONNECTION_CLOSE frame we send while closing.
#[derive(Debug, Clone)]
enum CloseFrame {
    Transport(TransportError),
    Application { code: VarInt, reason: Bytes },
}

/// Initial or Handshake packet-number space with its keys and CRYPTO stream.
struct HandshakeSpace {
    space: PacketSpace,
    crypto: CryptoStream,
    keys: Option<rustls::quic::Keys>,
}

impl HandshakeSpace {
    fn new(keys: Option<rustls::quic::Keys>) -> Self {
        HandshakeSpace { space: PacketSpace::new(), crypto: CryptoStream::new(), keys }
    }
}

/// Connection-level frames waiting to be sent (regenerated from current state when sent,
/// so a lost frame is retransmitted with up-to-date values).
#[derive(Debug, Default)]
struct PendingFrames {
    handshake_done: bool,
    new_cids: BTreeSet<(PathId, u64)>,
    retire_cids: BTreeSet<(PathId, u64)>,
    max_path_id: bool,
    paths_blocked: bool,
    path_cids_blocked: BTreeSet<PathId>,
}

/// Multipath negotiation state.
#[derive(Debug, Clone, Copy)]
struct Multipath {
    /// Largest path ID the peer allows us to use.
    peer_max_path_id: u32,
    /// Largest path ID we allow the peer to use.
    local_max_path_id: u32,
}

/// One QUIC connection.
pub struct Connection {
    side: Side,
    config: Arc<TransportConfig>,
    version: u32,
    state: State,
    error: Option<ConnectionError>,
    close: Option<CloseFrame>,
    close_pending: bool,
    created: Instant,
    rng: ChaCha20Rng,
    reset_key: Arc<ResetKey>,
    local_cid_len: usize,

    tls: TlsSession,
    initial: Option<HandshakeSpace>,
    handshake: Option<HandshakeSpace>,
    one_rtt: Option<OneRttKeys>,
    /// CRYPTO data in 1-RTT packets (post-handshake messages such as session tickets).
    crypto_1rtt: CryptoStream,
    handshake_complete: bool,
    handshake_confirmed: bool,
    /// Client: the server's first Initial was processed (its SCID adopted).
    got_server_initial: bool,
    /// Any packet from the peer was successfully processed.
    received_any: bool,
    peer_params: Option<TransportParameters>,
    /// The destination ID the client put in its first Initial.
    original_dcid: ConnectionId,
    /// The source ID the peer used in its first Initial.
    peer_initial_scid: Option<ConnectionId>,
    /// Client: the SCID of a Retry packet it accepted, and the token to echo.
    retry_scid: Option<ConnectionId>,
    retry_token: Bytes,
    local_handshake_cid: ConnectionId,

    local_cids: LocalCids,
    peer_cids: PeerCids,
    paths: BTreeMap<PathId, Path>,
    /// Path IDs no longer usable (abandoned).
    retired_paths: BTreeSet<PathId>,
    /// Peer path status received for paths not open yet: (sequence, status).
    early_peer_status: BTreeMap<PathId, (u64, PathStatus)>,
    /// Destination connection ID of the packet whose frames are being processed.
    current_packet_dcid: ConnectionId,
    multipath: Option<Multipath>,
    scheduler: Box<dyn Scheduler>,

    streams: Streams,
    datagrams: DatagramQueues,
    pending: PendingFrames,

    idle_timeout: Option<Duration>,
    idle_deadline: Option<Instant>,
    /// Whether an ack-eliciting packet was sent since the last packet was received
    /// (idle-timer restart rule of RFC 9000 section 10.1).
    sent_ack_eliciting_since_receive: bool,
    keep_alive_deadline: Option<Instant>,
    /// Drop the previous 1-RTT remote keys at this time.
    key_discard_deadline: Option<Instant>,
    packets_since_key_update: u64,

    events: VecDeque<Event>,
    endpoint_events: VecDeque<EndpointEvent>,
    qlog: Option<QlogStream>,
    stats: ConnectionStats,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("side", &self.side)
            .field("state", &self.state)
            .field("paths", &self.paths.len())
            .finish_non_exhaustive()
    }
}

/// Everything the endpoint passes when creating a connection.
pub(crate) struct ConnectionParams {
    pub side: Side,
    pub config: Arc<TransportConfig>,
    pub version: u32,
    pub now: Instant,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub tls: TlsSessionBuilder,
    pub rng_seed: u64,
    pub reset_key: Arc<ResetKey>,
    pub local_cid_len: usize,
    /// Client: the random DCID of its first Initial. Server: the DCID the client chose.
    pub original_dcid: ConnectionId,
    /// Our first source connection ID.
    pub local_cid: ConnectionId,
    /// Server: the client's SCID (our first destination). Client: same as original_dcid.
    pub remote_cid: ConnectionId,
    /// Server: the SCID of the Retry we sent, if the client came through one.
    pub retry_scid: Option<ConnectionId>,
    pub qlog: Option<QlogStream>,
}

/// How to build the TLS session once the transport parameters are known.
pub(crate) enum TlsSessionBuilder {
    Client { config: Arc<rustls::ClientConfig>, server_name: String },
    Server { config: Arc<rustls::ServerConfig> },
}

impl Connection {
    pub(crate) fn new(p: ConnectionParams) -> Result<Self, TransportError> {
        let mut rng = <ChaCha20Rng as rand::SeedableRng>::seed_from_u64(p.rng_seed);
        let config = p.config;
        let local_reset = p.reset_key.token(&p.local_cid);
        let params = Self::local_transport_parameters(
            &config,
            p.side,
            &p.original_dcid,
            &p.local_cid,
            p.retry_scid.as_ref(),
            local_reset,
        );
        let mut encoded = Vec::new();
        params.encode(&mut encoded);
        let tls = match p.tls {
            TlsSessionBuilder::Client { config, server_name } => TlsSession::client(config, &server_name, encoded)?,
            TlsSessionBuilder::Server { config } => TlsSession::server(config, encoded)?,
        };
        let initial_keys = crate::crypto::initial_keys(p.version, &p.original_dcid, p.side);

        let cc = config.congestion_controller.build(p.now, PathId::ZERO, config.initial_mtu);
        let mut path0 = Path::new(PathId::ZERO, p.local, p.remote, config.initial_rtt, cc, config.initial_mtu, p.side.is_client());
        // A server that sent a Retry already validated the client's address.
        if p.side.is_server() && p.retry_scid.is_some() {
            path0.address_validated = true;
        }
        let mut paths = BTreeMap::new();
        paths.insert(PathId::ZERO, path0);

        let mut local_cids = LocalCids::default();
        local_cids.issue(PathId::ZERO, p.local_cid, local_reset);
        let mut peer_cids = PeerCids::new(config.active_connection_id_limit);
        peer_cids.set_handshake_cid(p.remote_cid, None);

        let streams = Streams::new(p.side, Self::stream_limits(&config));
        let datagrams = DatagramQueues::new(
            config.max_datagram_frame_size.map(|_| config.datagram_receive_buffer),
            config.datagram_send_buffer,
        );
        let scheduler = config.scheduler.build();
        let idle_timeout = config.max_idle_timeout;
        let mut conn = Connection {
            side: p.side,
            version: p.version,
            state: State::Handshake,
            error: None,
            close: None,
            close_pending: false,
            created: p.now,
            reset_key: p.reset_key,
            local_cid_len: p.local_cid_len,
            tls,
            initial: Some(HandshakeSpace::new(Some(initial_keys))),
            handshake: Some(HandshakeSpace::new(None)),
            one_rtt: None,
            crypto_1rtt: CryptoStream::new(),
            handshake_complete: false,
            handshake_confirmed: false,
            got_server_initial: false,
            received_any: false,
            peer_params: None,
            original_dcid: p.original_dcid,
            peer_initial_scid: p.side.is_server().then_some(p.remote_cid),
            retry_scid: p.retry_scid,
            retry_token: Bytes::new(),
            local_handshake_cid: p.local_cid,
            local_cids,
            peer_cids,
            paths,
            retired_paths: BTreeSet::new(),
            early_peer_status: BTreeMap::new(),
            current_packet_dcid: p.local_cid,
            multipath: None,
            scheduler,
            streams,
            datagrams,
            pending: PendingFrames::default(),
            idle_timeout,
            idle_deadline: idle_timeout.map(|t| p.now + t),
            sent_ack_eliciting_since_receive: false,
            keep_alive_deadline: None,
            key_discard_deadline: None,
            packets_since_key_update: 0,
            events: VecDeque::new(),
            endpoint_events: VecDeque::new(),
            qlog: p.qlog,
            stats: ConnectionStats::default(),
            config,
        };
        conn.endpoint_events.push_back(EndpointEvent::NewLocalCid(p.local_cid));
        let _ = rng.next_u32();
        conn.rng = rng;
        conn.qlog_event(p.now, "connection_started", json!({
            "local": { "ip_v4": p.local.ip().to_string(), "port_v4": p.local.port() },
            "remote": { "ip_v4": p.remote.ip().to_string(), "port_v4": p.remote.port() },
        }));
        conn.qlog_parameters(p.now, "local", &params);
        conn.drive_tls(p.now)?;
        Ok(conn)
    }

    fn stream_limits(config: &TransportConfig) -> crate::streams::StreamLimits {
        crate::streams::StreamLimits {
            max_data: config.receive_window,
            max_stream_data_bidi_local: config.stream_receive_window,
            max_stream_data_bidi_remote: config.stream_receive_window,
            max_stream_data_uni: config.stream_receive_window,
            max_streams_bidi: config.max_concurrent_bidi_streams,
            max_streams_uni: config.max_concurrent_uni_streams,
            send_buffer: config.send_window,
        }
    }

    fn local_transport_parameters(
        config: &TransportConfig,
        side: Side,
        original_dcid: &ConnectionId,
        local_cid: &ConnectionId,
        retry_scid: Option<&ConnectionId>,
        reset_token: ResetToken,
    ) -> TransportParameters {
        let mut tp = TransportParameters {
            max_idle_timeout: config.max_idle_timeout.map_or(0, |d| d.as_millis() as u64),
            max_udp_payload_size: u64::from(config.max_udp_payload_size),
            initial_max_data: config.receive_window,
            initial_max_stream_data_bidi_local: config.stream_receive_window,
            initial_max_stream_data_bidi_remote: config.stream_receive_window,
            initial_max_stream_data_uni: config.stream_receive_window,
            initial_max_streams_bidi: config.max_concurrent_bidi_streams,
            initial_max_streams_uni: config.max_concurrent_uni_streams,
            ack_delay_exponent: u64::from(config.ack_delay_exponent),
            max_ack_delay: config.max_ack_delay.as_millis() as u64,
            active_connection_id_limit: config.active_connection_id_limit,
            initial_source_connection_id: Some(*local_cid),
            max_datagram_frame_size: config.max_datagram_frame_size,
            initial_max_path_id: config.initial_max_path_id,
            ..TransportParameters::default()
        };
        if side.is_server() {
            tp.original_destination_connection_id = Some(*original_dcid);
            tp.retry_source_connection_id = retry_scid.copied();
            tp.stateless_reset_token = Some(reset_token);
        }
        tp
    }

    // ----------------------------------------------------------------------------------
    // Public API
    // ----------------------------------------------------------------------------------

    /// Which side of the connection this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// True until the handshake completes.
    pub fn is_handshaking(&self) -> bool {
        !self.handshake_complete
    }

    /// True once the connection is closing, draining or gone.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closing { .. } | State::Draining { .. } | State::Drained)
    }

    /// True once the connection has no state left to keep.
    pub fn is_drained(&self) -> bool {
        matches!(self.state, State::Drained)
    }

    /// Why the connection ended, once it has.
    pub fn close_reason(&self) -> Option<&ConnectionError> {
        self.error.as_ref()
    }

    /// The negotiated ALPN protocol.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.tls.alpn_protocol()
    }

    /// The peer's address on path 0 (or the first open path).
    pub fn remote_address(&self) -> SocketAddr {
        self.paths.values().next().map_or_else(|| ([0, 0, 0, 0], 0).into(), |p| p.remote)
    }

    /// True if both sides negotiated Multipath QUIC.
    pub fn is_multipath(&self) -> bool {
        self.multipath.is_some()
    }

    /// Counters of the connection.
    pub fn stats(&self) -> ConnectionStats {
        self.stats.clone()
    }

    /// The state and counters of every path (open ones and those being closed).
    pub fn paths(&self) -> Vec<PathInfo> {
        self.paths
            .values()
            .map(|p| PathInfo { snapshot: p.snapshot(false, None), stats: p.stats })
            .collect()
    }

    /// Takes the next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        self.streams.poll_event().map(Event::Stream)
    }

    pub(crate) fn poll_endpoint_event(&mut self) -> Option<EndpointEvent> {
        self.endpoint_events.pop_front()
    }

    /// Opens a new stream, or `None` if the peer's stream limit is reached.
    pub fn open_stream(&mut self, dir: Dir) -> Option<StreamId> {
        if self.is_closed() {
            return None;
        }
        self.streams.open(dir)
    }

    /// Takes the next stream the peer opened.
    pub fn accept_stream(&mut self, dir: Dir) -> Option<StreamId> {
        self.streams.accept(dir)
    }

    /// Writes to a stream; returns how many bytes were accepted (flow control and the send
    /// buffer may accept fewer than offered).
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, WriteError> {
        self.streams.write(id, data)
    }

    /// Writes a `Bytes` chunk without copying when the whole chunk fits.
    pub fn write_bytes(&mut self, id: StreamId, data: Bytes) -> Result<usize, WriteError> {
        self.streams.write_bytes(id, data)
    }

    /// Marks the end of a stream's data.
    pub fn finish(&mut self, id: StreamId) -> Result<(), WriteError> {
        self.streams.finish(id)
    }

    /// Abandons sending on a stream (RESET_STREAM).
    pub fn reset_stream(&mut self, id: StreamId, code: VarInt) -> Result<(), WriteError> {
        self.streams.reset(id, code)
    }

    /// Asks the peer to stop sending on a stream (STOP_SENDING).
    pub fn stop_sending(&mut self, id: StreamId, code: VarInt) -> Result<(), ReadError> {
        self.streams.stop(id, code)
    }

    /// Reads up to `max` bytes of in-order data; `Ok(None)` at the end of the stream.
    pub fn read(&mut self, id: StreamId, max: usize) -> Result<Option<Bytes>, ReadError> {
        let r = self.streams.read(id, max);
        if let Ok(Some(b)) = &r {
            self.stats.stream_bytes_read += b.len() as u64;
        }
        r
    }

    /// Queues an unreliable datagram (RFC 9221).
    pub fn send_datagram(&mut self, data: Bytes) -> Result<(), SendDatagramError> {
        if self.config.max_datagram_frame_size.is_none() && self.peer_max_datagram_frame().is_none() {
            return Err(SendDatagramError::Disabled);
        }
        let max = self.max_datagram_size();
        self.datagrams.push_outgoing(data, max)
    }

    /// Takes the oldest received datagram.
    pub fn recv_datagram(&mut self) -> Option<Bytes> {
        self.datagrams.recv()
    }

    /// Largest datagram payload that fits in one packet on every path now, or `None` if the
    /// peer does not accept datagrams.
    pub fn max_datagram_size(&self) -> Option<usize> {
        let peer_max = self.peer_max_datagram_frame()?;
        let mtu = self.paths.values().filter(|p| p.is_usable()).map(|p| p.mtu).min().unwrap_or(self.config.initial_mtu);
        let overhead = 1 + 20 + 4 + 16 + 1 + 8; // short header, max CID, pn, tag, frame type and length
        let by_packet = usize::from(mtu).saturating_sub(overhead);
        let by_frame = (peer_max as usize).saturating_sub(1 + 8);
        Some(by_packet.min(by_frame))
    }

    fn peer_max_datagram_frame(&self) -> Option<u64> {
        self.peer_params.as_ref()?.max_datagram_frame_size.filter(|v| *v > 0)
    }

    /// Closes the connection with an application error code.
    pub fn close(&mut self, now: Instant, code: VarInt, reason: &[u8]) {
        if self.is_closed() {
            return;
        }
        self.error = Some(ConnectionError::LocallyClosed);
        self.enter_closing(now, CloseFrame::Application { code, reason: Bytes::copy_from_slice(reason) });
    }

    /// Starts a 1-RTT key update now (if one is allowed: the previous update must have been
    /// acknowledged). Returns false if not possible yet.
    pub fn force_key_update(&mut self) -> bool {
        if !self.handshake_confirmed {
            return false;
        }
        match self.one_rtt.as_mut() {
            Some(keys) => {
                let ok = keys.initiate_update().is_ok();
                if ok {
                    self.packets_since_key_update = 0;
                }
                ok
            }
            None => false,
        }
    }

    /// Replaces the scheduler's parameters at run time (see [`Scheduler::configure`]).
    pub fn configure_scheduler(&mut self, key: &str, value: &str) -> Result<(), String> {
        self.scheduler.configure(key, value)
    }

    /// Name of the scheduler in use.
    pub fn scheduler_name(&self) -> &str {
        self.scheduler.name()
    }

    // ----------------------------------------------------------------------------------
    // Timers
    // ----------------------------------------------------------------------------------

    /// The earliest time [`Connection::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Closing { deadline } | State::Draining { deadline } => return Some(deadline),
            State::Drained => return None,
            _ => {}
        }
        let mut t = earliest(self.idle_deadline, self.keep_alive_deadline);
        t = earliest(t, self.key_discard_deadline);
        for path in self.paths.values() {
            t = earliest(t, self.loss_detection_deadline(path));
            t = earliest(t, path.space.acks.deadline.filter(|_| path.space.acks.has_new));
            t = earliest(t, path.challenge.map(|c| c.give_up_at));
            t = earliest(t, path.challenge.and_then(|c| c.sent_at).map(|s| s + self.path_challenge_interval(path)));
            t = earliest(t, path.discard_at);
            if self.has_sendable_for(path) {
                t = earliest(t, path.pacer.release_time());
            }
        }
        t
    }

    /// Handles timer expiry; call when the time from [`Connection::poll_timeout`] passes.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Closing { deadline } | State::Draining { deadline } => {
                if now >= deadline {
                    self.state = State::Drained;
                    self.endpoint_events.push_back(EndpointEvent::Drained);
                    for cid in self.local_cids.all().map(|c| c.cid).collect::<Vec<_>>() {
                        self.endpoint_events.push_back(EndpointEvent::RetiredLocalCid(cid));
                    }
                }
                return;
            }
            State::Drained => return,
            _ => {}
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
        //# If a max_idle_timeout is specified by either endpoint in its
        //# transport parameters (Section 18.2), the connection is silently
        //# closed and its state is discarded when it remains idle for longer
        //# than the minimum of the max_idle_timeout value advertised by both
        //# endpoints.
        if self.idle_deadline.is_some_and(|d| now >= d) {
            self.qlog_event(now, "connection_closed", json!({"owner": "local", "trigger": "idle_timeout"}));
            self.error = Some(ConnectionError::TimedOut);
            self.events.push_back(Event::ConnectionLost(ConnectionError::TimedOut));
            self.state = State::Drained;
            self.endpoint_events.push_back(EndpointEvent::Drained);
            return;
        }
        if self.keep_alive_deadline.is_some_and(|d| now >= d) {
            self.keep_alive_deadline = None;
            if let Some(path) = self.paths.values_mut().find(|p| p.is_usable()) {
                path.space.ping_pending = true;
            }
        }
        if self.key_discard_deadline.is_some_and(|d| now >= d) {
            self.key_discard_deadline = None;
            if let Some(keys) = self.one_rtt.as_mut() {
                keys.discard_previous();
            }
        }
        let ids: Vec<PathId> = self.paths.keys().copied().collect();
        for id in ids {
            self.handle_path_timers(now, id);
        }
    }

    fn handle_path_timers(&mut self, now: Instant, id: PathId) {
        let Some(path) = self.paths.get(&id) else { return };
        if path.discard_at.is_some_and(|d| now >= d) {
            self.discard_path(now, id);
            return;
        }
        if let Some(ch) = path.challenge {
            if now >= ch.give_up_at {
                self.on_path_validation_failed(now, id);
                return;
            }
            if ch.sent_at.is_some_and(|s| now >= s + self.path_challenge_interval(path))
                && let Some(path) = self.paths.get_mut(&id)
                && let Some(ch) = path.challenge.as_mut()
            {
                ch.sent_at = None;
            }
        }
        let Some(path) = self.paths.get(&id) else { return };
        if self.loss_detection_deadline(path).is_some_and(|d| now >= d) {
            self.on_loss_detection_timeout(now, id);
        }
    }

    /// How long to wait before repeating a PATH_CHALLENGE.
    fn path_challenge_interval(&self, path: &Path) -> Duration {
        pto_duration(&path.rtt, Duration::ZERO, path.pto_count.min(6)).max(Duration::from_millis(1))
    }

    // ----------------------------------------------------------------------------------
    // Loss detection (RFC 9002 Appendix A, per path; path 0 also owns the Initial and
    // Handshake spaces)
    // ----------------------------------------------------------------------------------

    fn max_ack_delay_of_peer(&self) -> Duration {
        self.peer_params.as_ref().map_or(Duration::from_millis(25), |p| Duration::from_millis(p.max_ack_delay))
    }

    /// The spaces of a path, as (space, recovery) pairs: for path 0 the Initial and
    /// Handshake spaces too.
    fn handshake_spaces(&self) -> impl Iterator<Item = (AckSpace, &PacketSpace)> {
        let initial = self.initial.as_ref().map(|s| (AckSpace::Initial, &s.space));
        let handshake = self.handshake.as_ref().map(|s| (AckSpace::Handshake, &s.space));
        initial.into_iter().chain(handshake)
    }

    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.8
    //# SetLossDetectionTimer():
    fn loss_detection_deadline(&self, path: &Path) -> Option<Instant> {
        let hs: Vec<&PacketSpace> =
            if path.id == PathId::ZERO { self.handshake_spaces().map(|(_, s)| s).collect() } else { Vec::new() };
        let all = hs.iter().copied().chain(std::iter::once(&path.space));
        if let Some(t) = all.clone().filter_map(|s| s.recovery.loss_time()).min() {
            return Some(t);
        }
        if self.side.is_server() && !path.address_validated && path.amplification_budget() == 0 {
            //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.2.1
            //# If no additional data can be sent, the server's PTO timer MUST NOT be armed until
            //# datagrams have been received from the client
            return None;
        }
        let ack_eliciting_in_flight = all.clone().any(|s| s.recovery.ack_eliciting_in_flight() > 0);
        let peer_validated_us = self.side.is_server() || self.handshake_confirmed || self.handshake_keys_available_and_acked();
        if !ack_eliciting_in_flight && peer_validated_us {
            return None;
        }
        self.pto_deadline(path)
    }

    fn handshake_keys_available_and_acked(&self) -> bool {
        //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.6
        //# PeerCompletedAddressValidation():
        //#   // Assume clients validate the server's address implicitly.
        //#   if (endpoint is server):
        //#     return true
        //#   // Servers complete address validation when a
        //#   // protected packet is received.
        //#   return has received Handshake ACK ||
        //#        handshake confirmed
        self.handshake.as_ref().is_some_and(|h| h.space.recovery.largest_acked().is_some())
            || self.handshake.is_none()
    }

    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.8
    //# GetPtoTimeAndSpace():
    fn pto_deadline(&self, path: &Path) -> Option<Instant> {
        let backoff = path.pto_count.min(16);
        let base = pto_duration(&path.rtt, Duration::ZERO, backoff);
        let mut spaces: Vec<(bool, &PacketSpace)> = Vec::new();
        if path.id == PathId::ZERO {
            spaces.extend(self.handshake_spaces().map(|(_, s)| (false, s)));
        }
        spaces.push((true, &path.space));
        let in_flight = spaces.iter().any(|(_, s)| s.recovery.ack_eliciting_in_flight() > 0);
        if !in_flight {
            // Anti-deadlock PTO of a client that has not had its address validated.
            return Some(path.last_ack_eliciting_sent.unwrap_or(self.created) + base);
        }
        let mut best: Option<Instant> = None;
        for (is_data, space) in spaces {
            if space.recovery.ack_eliciting_in_flight() == 0 {
                continue;
            }
            let mut duration = base;
            if is_data {
                //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.1
                //# An endpoint MUST NOT set its PTO timer for the Application Data
                //# packet number space until the handshake is confirmed.
                if !self.handshake_confirmed {
                    continue;
                }
                duration += self.max_ack_delay_of_peer() * (1u32 << backoff);
            }
            let Some(last) = space.recovery.time_of_last_ack_eliciting() else { continue };
            best = earliest(best, Some(last + duration));
        }
        best
    }

    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.9
    //# OnLossDetectionTimeout():
    fn on_loss_detection_timeout(&mut self, now: Instant, id: PathId) {
        // Time-threshold losses first.
        let spaces = self.spaces_of(id);
        for space in &spaces {
            let due = self.space_mut(*space).is_some_and(|s| s.recovery.loss_time().is_some_and(|t| t <= now));
            if due {
                let lost = match self.space_mut(*space) {
                    Some(s) => {
                        let rtt = self.paths.get(&id).map(|p| p.rtt.clone());
                        match rtt {
                            Some(rtt) => s.recovery.detect_lost(now, &rtt),
                            None => Vec::new(),
                        }
                    }
                    None => Vec::new(),
                };
                self.on_packets_lost(now, id, *space, lost, None);
                return;
            }
        }
        // Probe timeout.
        let Some(path) = self.paths.get_mut(&id) else { return };
        let in_flight: Vec<AckSpace> = spaces
            .iter()
            .copied()
            .filter(|s| match s {
                AckSpace::Initial => self.initial.as_ref().is_some_and(|h| h.space.recovery.ack_eliciting_in_flight() > 0),
                AckSpace::Handshake => {
                    self.handshake.as_ref().is_some_and(|h| h.space.recovery.ack_eliciting_in_flight() > 0)
                }
                AckSpace::Path(_) => path.space.recovery.ack_eliciting_in_flight() > 0,
            })
            .collect();
        path.pto_count += 1;
        let pto_count = path.pto_count;
        let target = if in_flight.is_empty() {
            //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.9
            //#     // Client sends an anti-deadlock packet: Initial is padded
            //#     // to earn more anti-amplification credit,
            //#     // a Handshake packet proves address ownership.
            if self.handshake.as_ref().is_some_and(|h| h.keys.is_some()) {
                AckSpace::Handshake
            } else if self.initial.is_some() {
                AckSpace::Initial
            } else {
                AckSpace::Path(id)
            }
        } else {
            // The space whose PTO fired: the earliest of those in flight (handshake spaces
            // before application data).
            in_flight[0]
        };
        //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.4
        //# When a PTO timer expires, a sender MUST send at least one ack-
        //# eliciting packet in the packet number space as a probe.  An endpoint
        //# MAY send up to two full-sized datagrams containing ack-eliciting
        //# packets to avoid an expensive consecutive PTO expiration due to a
        //# single lost datagram or to transmit data from multiple packet number
        //# spaces.
        if let Some(space) = self.space_mut(target) {
            space.probes_owed = 2;
        }
        // Make the probes useful: queue the oldest unacknowledged data of the space again.
        self.requeue_oldest_for_probe(id, target);
        self.qlog_event(now, "recovery_metrics_updated", json!({ "pto_count": pto_count, "path_id": id.0 }));
    }

    /// Re-queues the content of the oldest in-flight packets of a space so PTO probes carry
    /// data rather than only PING (RFC 9002 section 6.2.4 "MAY ... send data previously
    /// sent").
    fn requeue_oldest_for_probe(&mut self, id: PathId, space: AckSpace) {
        let frames: Vec<SentFrames> = match self.space_mut(space) {
            Some(s) => s.recovery.oldest_unacked(2).map(|p| p.payload.clone()).collect(),
            None => return,
        };
        for f in frames {
            self.requeue_frames(id, space, &f, true);
        }
    }

    fn spaces_of(&self, id: PathId) -> Vec<AckSpace> {
        let mut v = Vec::with_capacity(3);
        if id == PathId::ZERO {
            if self.initial.is_some() {
                v.push(AckSpace::Initial);
            }
            if self.handshake.is_some() {
                v.push(AckSpace::Handshake);
            }
        }
        v.push(AckSpace::Path(id));
        v
    }

    fn space_mut(&mut self, space: AckSpace) -> Option<&mut PacketSpace> {
        match space {
            AckSpace::Initial => self.initial.as_mut().map(|h| &mut h.space),
            AckSpace::Handshake => self.handshake.as_mut().map(|h| &mut h.space),
            AckSpace::Path(id) => self.paths.get_mut(&id).map(|p| &mut p.space),
        }
    }

    /// The path whose congestion controller and RTT a space's packets count against.
    fn path_of_space(space: AckSpace) -> PathId {
        match space {
            AckSpace::Path(id) => id,
            _ => PathId::ZERO,
        }
    }

    /// Processes an ACK or PATH_ACK frame for `space`.
    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.7
    //# OnAckReceived(ack, pn_space):
    pub(crate) fn on_ack_frame(
        &mut self,
        now: Instant,
        space: AckSpace,
        ranges: &[std::ops::RangeInclusive<u64>],
        ack_delay_raw: u64,
    ) -> Result<(), TransportError> {
        let path_id = Self::path_of_space(space);
        let exponent = self.peer_params.as_ref().map_or(3, |p| p.ack_delay_exponent);
        let ack_delay = Duration::from_micros(ack_delay_raw.checked_shl(exponent as u32).unwrap_or(u64::MAX >> 1));
        let Some(recovery) = self.space_mut(space).map(|s| &mut s.recovery) else { return Ok(()) };
        let rtt_snapshot = match self.paths.get(&path_id) {
            Some(p) => p.rtt.clone(),
            None => return Ok(()),
        };
        let recovery = match self.space_mut(space) {
            Some(s) => &mut s.recovery,
            None => return Ok(()),
        };
        let _ = &recovery;
        let outcome: AckOutcome<SentFrames> = recovery
            .on_ack_received(now, ranges.iter().cloned(), &rtt_snapshot)
            .map_err(|e| TransportError::protocol_violation(format!("{e}")))?;
        if outcome.newly_acked.is_empty() {
            return Ok(());
        }
        let is_data_space = matches!(space, AckSpace::Path(_));
        let max_ack_delay = self.max_ack_delay_of_peer();
        let confirmed = self.handshake_confirmed;
        if let Some(path) = self.paths.get_mut(&path_id) {
            if let Some(sample) = outcome.rtt_sample {
                //= https://www.rfc-editor.org/rfc/rfc9002#section-5.3
                //# *  MUST ignore the acknowledgment delay for Initial packets, since
                //#    these acknowledgments are not delayed by the peer (Section 13.2.1
                //#    of [QUIC-TRANSPORT]);
                let delay = if is_data_space { ack_delay } else { Duration::ZERO };
                path.rtt.update(delay, sample, max_ack_delay, confirmed);
                if path.first_rtt_sample.is_none() {
                    path.first_rtt_sample = Some(now);
                }
            }
        }
        // Acknowledged content.
        let mut acked_bytes_in_flight = 0u64;
        let mut acked_packets = 0u64;
        for (_pn, packet) in &outcome.newly_acked {
            acked_packets += 1;
            if packet.in_flight {
                acked_bytes_in_flight += u64::from(packet.size);
            }
            self.on_frames_acked(now, path_id, space, &packet.payload);
        }
        if let Some(path) = self.paths.get_mut(&path_id) {
            path.bytes_in_flight = path.bytes_in_flight.saturating_sub(acked_bytes_in_flight);
            let rtt = path.rtt.clone();
            for (_, packet) in &outcome.newly_acked {
                if packet.in_flight {
                    path.cc.on_ack(now, packet.time_sent, u64::from(packet.size), outcome.app_limited, &rtt);
                }
            }
            path.cc.on_ack_batch_end(now, path.bytes_in_flight, &rtt);
            if let Some(rate) = outcome.delivery_rate {
                path.delivery_rate = Some(rate);
            }
            path.record_loss_samples(acked_packets, 0);
            //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.7
            //#   // Reset pto_count unless the client is unsure if
            //#   // the server has validated the client's address.
            if self.side.is_server() || self.handshake_confirmed || space != AckSpace::Initial {
                path.pto_count = 0;
            }
        }
        if !outcome.lost.is_empty() {
            self.on_packets_lost(now, path_id, space, outcome.lost, Some(&rtt_snapshot));
        }
        self.qlog_metrics(now, path_id);
        Ok(())
    }

    fn on_frames_acked(&mut self, now: Instant, path_id: PathId, space: AckSpace, frames: &SentFrames) {
        for s in &frames.stream {
            self.streams.on_stream_acked(s.id, s.offset, s.len, s.fin);
        }
        for (offset, len) in &frames.crypto {
            match space {
                AckSpace::Initial => {
                    if let Some(h) = self.initial.as_mut() {
                        h.crypto.on_acked(*offset, *len);
                    }
                }
                AckSpace::Handshake => {
                    if let Some(h) = self.handshake.as_mut() {
                        h.crypto.on_acked(*offset, *len);
                    }
                }
                AckSpace::Path(_) => self.crypto_1rtt.on_acked(*offset, *len),
            }
        }
        for c in &frames.stream_control {
            self.streams.on_control_acked(c);
        }
        for (acked_space, largest) in &frames.acks {
            if let Some(s) = self.space_mut(*acked_space) {
                s.acks.on_ack_acked(*largest);
            }
        }
        if let Some(size) = frames.mtu_probe
            && let Some(path) = self.paths.get_mut(&path_id)
        {
            path.mtu = path.mtu.max(size);
            path.mtu_discovery = MtuDiscovery::Done;
            path.cc.on_mtu_update(path.mtu);
            let mtu = path.mtu;
            self.qlog_event(now, "mtu_updated", json!({ "new": mtu, "done": true, "path_id": path_id.0 }));
        }
        if let Some(path) = self.paths.get_mut(&path_id) {
            path.stats.payload_bytes_acked += frames.payload_bytes();
        }
        if frames.conn.contains(&ConnFrame::HandshakeDone) {
            self.pending.handshake_done = false;
        }
        // Key update confirmation: an acknowledged 1-RTT packet of the current phase lets a
        // later update start.
        if matches!(space, AckSpace::Path(_))
            && let Some(keys) = self.one_rtt.as_mut()
        {
            keys.on_packet_acked_in_current_phase();
        }
    }

    /// Handles packets declared lost: statistics, congestion control and retransmission.
    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-B.8
    //# OnPacketsLost(lost_packets):
    fn on_packets_lost(
        &mut self,
        now: Instant,
        path_id: PathId,
        space: AckSpace,
        lost: Vec<(u64, SentPacket<SentFrames>)>,
        rtt: Option<&crate::recovery::RttEstimator>,
    ) {
        if lost.is_empty() {
            return;
        }
        let mut lost_in_flight = 0u64;
        let mut newest_lost_sent: Option<Instant> = None;
        let mut congestion_lost = 0u64;
        for (pn, packet) in &lost {
            self.stats.packets_lost += 1;
            if packet.in_flight {
                lost_in_flight += u64::from(packet.size);
                // A lost PMTU probe is not a congestion signal (RFC 9000 section 14.4).
                if packet.payload.mtu_probe.is_none() {
                    congestion_lost += u64::from(packet.size);
                    newest_lost_sent = newest_lost_sent.max(Some(packet.time_sent));
                }
            }
            self.qlog_event(now, "packet_lost", json!({
                "header": { "packet_number": pn, "packet_type": space_packet_type(space), "path_id": path_id.0 },
                "trigger": "reordering_threshold",
            }));
        }
        let persistent = match (rtt, self.paths.get(&path_id)) {
            (Some(rtt), Some(path)) => {
                let lost_ack_eliciting: Vec<(u64, Instant)> = lost
                    .iter()
                    .filter(|(_, p)| p.ack_eliciting)
                    .map(|(pn, p)| (*pn, p.time_sent))
                    .collect();
                persistent_congestion(
                    &lost_ack_eliciting,
                    rtt,
                    self.max_ack_delay_of_peer(),
                    path.first_rtt_sample,
                    self.config.persistent_congestion_threshold,
                )
            }
            _ => false,
        };
        let mut mtu_probe_lost = None;
        for (_, packet) in &lost {
            if let Some(size) = packet.payload.mtu_probe {
                mtu_probe_lost = Some(size);
            }
            self.requeue_frames(path_id, space, &packet.payload, false);
        }
        if let Some(path) = self.paths.get_mut(&path_id) {
            path.bytes_in_flight = path.bytes_in_flight.saturating_sub(lost_in_flight);
            path.stats.packets_lost += lost.len() as u64;
            path.record_loss_samples(0, lost.len() as u64);
            if let Some(size) = mtu_probe_lost {
                path.mtu_discovery = match path.mtu_discovery {
                    MtuDiscovery::InFlight { attempts, .. } if attempts < 3 => {
                        MtuDiscovery::Pending { size, attempts }
                    }
                    _ => MtuDiscovery::Done,
                };
            }
            if let Some(sent) = newest_lost_sent {
                let before = path.cc.window();
                let reacted = path.cc.on_congestion_event(now, sent, persistent, congestion_lost);
                let after = path.cc.window();
                if reacted == CongestionEvent::NewRecoveryPeriod {
                    path.stats.congestion_events += 1;
                    let event = PathEvent::CongestionEvent { path: path_id, cwnd_before: before, cwnd_after: after };
                    self.scheduler.on_path_event(now, &event);
                }
            }
        }
        self.qlog_metrics(now, path_id);
    }

    /// Puts the retransmittable content of a lost (or probed) packet back in the queues.
    /// With multipath, stream data goes back to the connection-wide queues, so the next
    /// packet on any path can carry it.
    fn requeue_frames(&mut self, path_id: PathId, space: AckSpace, frames: &SentFrames, probe: bool) {
        for s in &frames.stream {
            self.streams.on_stream_lost(s.id, s.offset, s.len, s.fin);
        }
        for (offset, len) in &frames.crypto {
            match space {
                AckSpace::Initial => {
                    if let Some(h) = self.initial.as_mut() {
                        h.crypto.on_lost(*offset, *len);
                    }
                }
                AckSpace::Handshake => {
                    if let Some(h) = self.handshake.as_mut() {
                        h.crypto.on_lost(*offset, *len);
                    }
                }
                AckSpace::Path(_) => self.crypto_1rtt.on_lost(*offset, *len),
            }
        }
        if probe {
            // Control frames are re-sent only when really lost.
            return;
        }
        for c in &frames.stream_control {
            self.streams.on_control_lost(c);
        }
        for c in &frames.conn {
            match *c {
                ConnFrame::HandshakeDone => {
                    if self.side.is_server() {
                        self.pending.handshake_done = true;
                    }
                }
                ConnFrame::NewConnectionId { path, sequence } => {
                    if self.local_cids.get(path, sequence).is_some() {
                        self.pending.new_cids.insert((path, sequence));
                    }
                }
                ConnFrame::RetireConnectionId { path, sequence } => {
                    self.pending.retire_cids.insert((path, sequence));
                }
                ConnFrame::PathAbandon { path } => {
                    if let Some(p) = self.paths.get_mut(&path)
                        && p.abandon_pending.is_none()
                        && p.state == PathState::Abandoned
                        && p.discard_at.is_some()
                    {
                        p.abandon_pending = Some(TransportErrorCode::NO_ERROR.0);
                    }
                }
                ConnFrame::PathStatus { path, sequence } => {
                    if let Some(p) = self.paths.get_mut(&path)
                        && p.local_status_sequence == sequence
                    {
                        p.status_frame_pending = true;
                    }
                }
                ConnFrame::MaxPathId => self.pending.max_path_id = true,
                ConnFrame::PathsBlocked => self.pending.paths_blocked = true,
                ConnFrame::PathCidsBlocked { path } => {
                    self.pending.path_cids_blocked.insert(path);
                }
            }
        }
        let _ = path_id;
    }

    // ----------------------------------------------------------------------------------
    // Handshake and keys
    // ----------------------------------------------------------------------------------

    /// Moves handshake bytes out of TLS into the CRYPTO streams and installs new keys.
    fn drive_tls(&mut self, now: Instant) -> Result<(), TransportError> {
        loop {
            let mut buf = Vec::new();
            let change = self.tls.write_handshake(&mut buf);
            if !buf.is_empty() {
                let level_space = if self.one_rtt.is_some() {
                    None
                } else if self.handshake.as_ref().is_some_and(|h| h.keys.is_some()) {
                    self.handshake.as_mut()
                } else {
                    self.initial.as_mut()
                };
                match level_space {
                    Some(h) => h.crypto.write(Bytes::from(buf)),
                    None => self.crypto_1rtt.write(Bytes::from(buf)),
                }
            }
            match change {
                Some(crate::crypto::KeyChange::Handshake { keys }) => {
                    if let Some(h) = self.handshake.as_mut() {
                        h.keys = Some(keys);
                    }
                    self.qlog_event(now, "key_updated", json!({"key_type": "client_handshake_secret", "trigger": "tls"}));
                }
                Some(crate::crypto::KeyChange::OneRtt { keys }) => {
                    self.one_rtt = Some(keys);
                    self.qlog_event(now, "key_updated", json!({"key_type": "client_1rtt_secret", "trigger": "tls"}));
                }
                None => {
                    if buf_is_empty_marker(&buf) {
                        break;
                    }
                }
            }
        }
        if let Some(alert) = self.tls.alert() {
            return Err(TransportError::new(TransportErrorCode::crypto(alert), "TLS alert"));
        }
        if self.peer_params.is_none()
            && let Some(raw) = self.tls.peer_transport_parameters()
        {
            let raw = raw.to_vec();
            self.on_peer_transport_parameters(now, &raw)?;
        }
        if !self.handshake_complete && !self.tls.is_handshaking() && self.one_rtt.is_some() {
            self.on_handshake_complete(now)?;
        }
        Ok(())
    }

    fn on_peer_transport_parameters(&mut self, now: Instant, raw: &[u8]) -> Result<(), TransportError> {
        let params = TransportParameters::decode(self.side.peer(), raw)?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.3
        //# An endpoint MUST treat the absence of the
        //# initial_source_connection_id transport parameter from either endpoint
        //# or the absence of the original_destination_connection_id transport
        //# parameter from the server as a connection error of type
        //# TRANSPORT_PARAMETER_ERROR.
        //
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.3
        //# An endpoint MUST treat the following as a connection error of type
        //# TRANSPORT_PARAMETER_ERROR or PROTOCOL_VIOLATION:
        //#
        //# *  absence of the retry_source_connection_id transport parameter from
        //#    the server after receiving a Retry packet,
        //#
        //# *  presence of the retry_source_connection_id transport parameter
        //#    when no Retry packet was received, or
        //#
        //# *  a mismatch between values received from a peer in these transport
        //#    parameters and the value sent in the corresponding Destination or
        //#    Source Connection ID fields of Initial packets.
        if params.initial_source_connection_id.is_none() || params.initial_source_connection_id != self.peer_initial_scid {
            return Err(TransportError::transport_parameter("initial_source_connection_id missing or mismatched"));
        }
        if self.side.is_client() {
            if params.original_destination_connection_id != Some(self.original_dcid) {
                return Err(TransportError::transport_parameter(
                    "original_destination_connection_id missing or mismatched",
                ));
            }
            if params.retry_source_connection_id != self.retry_scid {
                return Err(TransportError::transport_parameter("retry_source_connection_id mismatch"));
            }
            if let Some(token) = params.stateless_reset_token {
                self.peer_cids.set_handshake_reset_token(token);
            }
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
        //# Each endpoint advertises a max_idle_timeout, but the effective value
        //# at an endpoint is computed as the minimum of the two advertised
        //# values (or the sole advertised value, if only one endpoint advertises
        //# a non-zero value).
        let peer_idle = (params.max_idle_timeout > 0).then(|| Duration::from_millis(params.max_idle_timeout));
        self.idle_timeout = match (self.config.max_idle_timeout, peer_idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.reset_idle_timer(now);
        self.streams.set_peer_limits(crate::streams::StreamLimits {
            max_data: params.initial_max_data,
            max_stream_data_bidi_local: params.initial_max_stream_data_bidi_local,
            max_stream_data_bidi_remote: params.initial_max_stream_data_bidi_remote,
            max_stream_data_uni: params.initial_max_stream_data_uni,
            max_streams_bidi: params.initial_max_streams_bidi,
            max_streams_uni: params.initial_max_streams_uni,
            send_buffer: self.config.send_window,
        });
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2
        //# If both endpoints advertise the initial_max_path_id transport parameter, once the handshake is completed
        //# a new AEAD usage applies to all 1-RTT packets, as specified in {{nonce}},
        //# and new paths can be used, as specified in {{path-management}}.
        if let (Some(local), Some(peer)) = (self.config.initial_max_path_id, params.initial_max_path_id) {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.1
            //# If an initial_max_path_id transport
            //# parameter is received and the carrying packet contains a zero-length
            //# connection ID, the receiver MUST treat this as a connection error of type
            //# PROTOCOL_VIOLATION and close the connection.
            if self.peer_initial_scid.is_some_and(|c| c.is_empty()) {
                return Err(TransportError::protocol_violation(
                    "initial_max_path_id with a zero-length connection ID",
                ));
            }
            self.multipath = Some(Multipath { peer_max_path_id: peer, local_max_path_id: local });
        }
        let peer_mtu = params.max_udp_payload_size.min(u64::from(u16::MAX)) as u16;
        for path in self.paths.values_mut() {
            let target = self.config.max_mtu.min(peer_mtu);
            if target > path.mtu {
                path.mtu_discovery = MtuDiscovery::Pending { size: target, attempts: 0 };
            }
        }
        self.qlog_parameters(now, "remote", &params);
        self.peer_params = Some(params);
        Ok(())
    }

    fn on_handshake_complete(&mut self, now: Instant) -> Result<(), TransportError> {
        if self.peer_params.is_none() {
            return Err(TransportError::transport_parameter("peer sent no transport parameters"));
        }
        self.handshake_complete = true;
        self.state = State::Established;
        self.stats.handshake_duration = Some(now.saturating_duration_since(self.created));
        self.events.push_back(Event::Connected);
        self.qlog_event(now, "connection_state_updated", json!({"new": "handshake_complete"}));
        if self.side.is_server() {
            //= https://www.rfc-editor.org/rfc/rfc9001#section-4.1.2
            //# the TLS handshake is considered confirmed at the
            //# server when the handshake completes.
            self.pending.handshake_done = true;
            self.on_handshake_confirmed(now);
        }
        self.issue_connection_ids(now);
        Ok(())
    }

    fn on_handshake_confirmed(&mut self, now: Instant) {
        if self.handshake_confirmed {
            return;
        }
        self.handshake_confirmed = true;
        //= https://www.rfc-editor.org/rfc/rfc9001#section-4.9.2
        //# An endpoint MUST discard its Handshake keys when the TLS handshake is
        //# confirmed (Section 4.1.2).
        self.discard_space(now, AckSpace::Handshake);
        self.discard_space(now, AckSpace::Initial);
        self.events.push_back(Event::HandshakeConfirmed);
        self.qlog_event(now, "connection_state_updated", json!({"new": "handshake_confirmed"}));
        if let Some(mp) = self.multipath {
            let _ = mp;
            self.issue_connection_ids(now);
        }
    }

    /// Drops the keys and state of the Initial or Handshake space.
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.4
    //# When Initial or Handshake keys are discarded, packets sent with those keys can
    //# no longer be acknowledged, so they are removed from bytes in flight and
    //# the PTO and loss detection timers are reset.
    fn discard_space(&mut self, now: Instant, space: AckSpace) {
        let removed = match space {
            AckSpace::Initial => self.initial.take(),
            AckSpace::Handshake => self.handshake.take(),
            AckSpace::Path(_) => None,
        };
        let Some(mut removed) = removed else { return };
        let bytes: u64 = removed.space.recovery.discard_all().iter().filter(|(_, p)| p.in_flight).map(|(_, p)| u64::from(p.size)).sum();
        if let Some(path) = self.paths.get_mut(&PathId::ZERO) {
            path.bytes_in_flight = path.bytes_in_flight.saturating_sub(bytes);
            path.pto_count = 0;
        }
        let key_type = if matches!(space, AckSpace::Initial) { "client_initial_secret" } else { "client_handshake_secret" };
        self.qlog_event(now, "key_discarded", json!({"key_type": key_type}));
    }

    /// Issues connection IDs so the peer can rotate and (with multipath) open paths.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-5.1.1
    //# An endpoint SHOULD ensure that its peer has a sufficient number of
    //# available and unused connection IDs.
    fn issue_connection_ids(&mut self, _now: Instant) {
        let Some(peer) = self.peer_params.as_ref() else { return };
        let limit = peer.active_connection_id_limit.clamp(2, 8) as usize;
        let mut path_ids = vec![PathId::ZERO];
        if let Some(mp) = self.multipath
            && self.handshake_confirmed
        {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2.1
            //# In order to let the peer open new paths, it is RECOMMENDED to proactively
            //# issue at least one Connection ID for each unused path ID up to the
            //# minimum of the peer's and the local maximum path ID limits.
            let max = mp.peer_max_path_id.min(mp.local_max_path_id).min(16);
            path_ids.extend((1..=max).map(PathId).filter(|id| !self.retired_paths.contains(id)));
        }
        for path_id in path_ids {
            let want = if path_id == PathId::ZERO { limit } else { limit.min(2) };
            while self.local_cids.active_count(path_id) < want {
                let cid = ConnectionId::random(&mut self.rng, self.local_cid_len);
                let token = self.reset_key.token(&cid);
                let issued = self.local_cids.issue(path_id, cid, token);
                self.pending.new_cids.insert((path_id, issued.sequence));
                self.endpoint_events.push_back(EndpointEvent::NewLocalCid(cid));
            }
        }
    }

    // ----------------------------------------------------------------------------------
    // Closing
    // ----------------------------------------------------------------------------------

    fn enter_closing(&mut self, now: Instant, frame: CloseFrame) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.2
        //# The closing and draining connection states exist to ensure that
        //# connections close cleanly and that delayed or reordered packets are
        //# properly discarded.  These states SHOULD persist for at least three
        //# times the current PTO interval as defined in [QUIC-RECOVERY].
        let deadline = now + 3 * self.largest_pto();
        self.close = Some(frame);
        self.close_pending = true;
        self.state = State::Closing { deadline };
        self.qlog_event(now, "connection_closed", json!({"owner": "local"}));
    }

    /// Closes because of a protocol error detected locally.
    pub(crate) fn close_on_error(&mut self, now: Instant, error: TransportError) {
        if self.is_closed() {
            return;
        }
        tracing::debug!(side = ?self.side, %error, "closing connection on transport error");
        self.error = Some(ConnectionError::TransportError(error.clone()));
        self.events.push_back(Event::ConnectionLost(ConnectionError::TransportError(error.clone())));
        self.enter_closing(now, CloseFrame::Transport(error));
    }

    fn enter_draining(&mut self, now: Instant, reason: ConnectionError) {
        if matches!(self.state, State::Draining { .. } | State::Drained) {
            return;
        }
        let deadline = now + 3 * self.largest_pto();
        if self.error.is_none() {
            self.error = Some(reason.clone());
            self.events.push_back(Event::ConnectionLost(reason));
        }
        self.state = State::Draining { deadline };
        self.qlog_event(now, "connection_closed", json!({"owner": "remote"}));
    }

    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.6
    //# When this specification is used, these states SHOULD instead persist for at least three
    //# times the largest PTO among all paths.
    fn largest_pto(&self) -> Duration {
        self.paths
            .values()
            .map(|p| pto_duration(&p.rtt, self.max_ack_delay_of_peer(), 0))
            .max()
            .unwrap_or(self.config.initial_rtt * 3)
    }

    fn reset_idle_timer(&mut self, now: Instant) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
        //# To avoid excessively small idle timeout periods, endpoints MUST
        //# increase the idle timeout period to be at least three times the
        //# current Probe Timeout (PTO).
        self.idle_deadline = self.idle_timeout.map(|t| now + t.max(3 * self.largest_pto()));
        self.keep_alive_deadline = self.config.keep_alive_interval.map(|k| now + k);
    }

    // ----------------------------------------------------------------------------------
    // Paths
    // ----------------------------------------------------------------------------------

    fn on_path_validation_failed(&mut self, now: Instant, id: PathId) {
        tracing::debug!(?id, "path validation failed");
        if id == PathId::ZERO && !self.is_multipath() {
            // Migration failed on the only path: nothing better to do than keep it.
            if let Some(p) = self.paths.get_mut(&id) {
                p.challenge = None;
            }
            return;
        }
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
        //# If validation fails, the client MUST NOT use the path and can
        //# remove any status associated to the path initiation attempt.
        //# As the used path ID is consumed either way,
        //# the endpoint MUST explicitly close the path, as specified in
        //# {{path-close}}.
        self.abandon_path_internal(now, id, TransportErrorCode::PATH_UNSTABLE_OR_POOR.0);
    }

    fn abandon_path_internal(&mut self, now: Instant, id: PathId, code: u64) {
        let pto = self.largest_pto();
        let Some(path) = self.paths.get_mut(&id) else { return };
        if path.state == PathState::Abandoned {
            return;
        }
        path.state = PathState::Abandoned;
        path.challenge = None;
        path.abandon_pending = Some(code);
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
        //# Therefore, knowledge of the
        //# connection IDs issued to the peer and of the state
        //# of the number space associated to the path SHOULD be retained for
        //# 3 PTO after the PATH_ABANDON frame has been received.
        path.discard_at = Some(now + 3 * pto);
        self.retired_paths.insert(id);
        for seq in self.peer_cids.retire_path(id) {
            self.pending.retire_cids.insert((id, seq));
        }
        // Data in flight on the path goes back to the queues at once so other paths carry it.
        let frames: Vec<SentFrames> = self
            .paths
            .get(&id)
            .map(|p| p.space.recovery.in_flight_payloads().cloned().collect())
            .unwrap_or_default();
        for f in &frames {
            self.requeue_frames(id, AckSpace::Path(id), f, true);
        }
        self.scheduler.on_path_event(now, &PathEvent::Abandoned(id));
        self.events.push_back(Event::Path(PathEvent::Abandoned(id)));
        self.qlog_event(now, "path_abandoned", json!({"path_id": id.0, "error_code": code}));
        if !self.paths.values().any(|p| p.state != PathState::Abandoned) {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
            //# If a PATH_ABANDON frame is received for the only open path of a QUIC
            //# connection, the receiving peer SHOULD send a CONNECTION_CLOSE frame
            //# and enter the closing state.
            self.close_on_error(now, TransportError::new(TransportErrorCode::NO_VIABLE_PATH, "no open path left"));
        }
    }

    fn discard_path(&mut self, now: Instant, id: PathId) {
        let Some(path) = self.paths.remove(&id) else { return };
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4.3
        //# When an endpoint finally deletes all state associated with the path,
        //# the packets sent over the path and not yet acknowledged MUST be considered lost.
        let mut space = path.space;
        for (_, p) in space.recovery.discard_all() {
            self.requeue_frames(id, AckSpace::Path(id), &p.payload, false);
        }
        for issued in self.local_cids.remove_path(id) {
            self.endpoint_events.push_back(EndpointEvent::RetiredLocalCid(issued.cid));
        }
        self.qlog_event(now, "path_discarded", json!({"path_id": id.0}));
    }

    /// True if the path has something it could send as soon as the pacer allows.
    fn has_sendable_for(&self, path: &Path) -> bool {
        path.is_usable() && (self.streams.has_pending() || self.datagrams.has_outgoing())
    }

    // ----------------------------------------------------------------------------------
    // qlog helpers
    // ----------------------------------------------------------------------------------

    fn qlog_event(&mut self, now: Instant, name: &str, data: serde_json::Value) {
        if let Some(q) = self.qlog.as_mut() {
            q.event(now, name, data);
        }
    }

    fn qlog_metrics(&mut self, now: Instant, path_id: PathId) {
        if self.qlog.is_none() {
            return;
        }
        let Some(path) = self.paths.get(&path_id) else { return };
        let data = json!({
            "path_id": path_id.0,
            "min_rtt": path.rtt.min().as_secs_f64() * 1000.0,
            "smoothed_rtt": path.rtt.smoothed().as_secs_f64() * 1000.0,
            "latest_rtt": path.rtt.latest().as_secs_f64() * 1000.0,
            "rtt_variance": path.rtt.rttvar().as_secs_f64() * 1000.0,
            "congestion_window": path.cc.window(),
            "bytes_in_flight": path.bytes_in_flight,
            "ssthresh": path.cc.ssthresh(),
            "pto_count": path.pto_count,
        });
        self.qlog_event(now, "recovery_metrics_updated", data);
    }

    fn qlog_parameters(&mut self, now: Instant, owner: &str, p: &TransportParameters) {
        if self.qlog.is_none() {
            return;
        }
        let data = json!({
            "owner": owner,
            "max_idle_timeout": p.max_idle_timeout,
            "max_udp_payload_size": p.max_udp_payload_size,
            "initial_max_data": p.initial_max_data,
            "initial_max_stream_data_bidi_local": p.initial_max_stream_data_bidi_local,
            "initial_max_stream_data_bidi_remote": p.initial_max_stream_data_bidi_remote,
            "initial_max_stream_data_uni": p.initial_max_stream_data_uni,
            "initial_max_streams_bidi": p.initial_max_streams_bidi,
            "initial_max_streams_uni": p.initial_max_streams_uni,
            "ack_delay_exponent": p.ack_delay_exponent,
            "max_ack_delay": p.max_ack_delay,
            "active_connection_id_limit": p.active_connection_id_limit,
            "max_datagram_frame_size": p.max_datagram_frame_size,
            "initial_max_path_id": p.initial_max_path_id,
        });
        self.qlog_event(now, "parameters_set", data);
    }

    /// A random 64-bit value from the connection's seeded generator.
    fn random_u64(&mut self) -> u64 {
        self.rng.random()
    }
}

fn buf_is_empty_marker(buf: &[u8]) -> bool {
    buf.is_empty()
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn space_packet_type(space: AckSpace) -> &'static str {
    match space {
        AckSpace::Initial => "initial",
        AckSpace::Handshake => "handshake",
        AckSpace::Path(_) => "1RTT",
    }
}

#[cfg(test)]
mod tests;
