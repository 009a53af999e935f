//! The QUIC connection state machine.
//!
//! A [`Connection`] is driven from outside: its [`crate::Endpoint`] hands it received
//! datagrams, collects datagrams to send with [`Connection::poll_transmit`], arms a timer
//! for [`Connection::poll_timeout`] and calls [`Connection::handle_timeout`] when it fires.
//! The application reads and writes streams and datagrams through the methods below and
//! learns about progress from [`Connection::poll_event`].
//!
//! The implementation is split by concern: `handshake` (TLS, keys, transport parameters),
//! `loss` (acknowledgments, loss detection, congestion control), `timers`, `paths` (per-path
//! state and the path lifecycle), `path_manager` (link hints and the path manager's
//! actions), `recv` (packets and frames in) and `send` (packets out).

mod cids;
mod handshake;
mod loss;
mod path_manager;
mod path_map;
mod paths;
mod qlog_frames;
mod recv;
mod send;
mod spaces;
mod timers;

pub use paths::{MigrateError, OpenPathError, PathStats};

use crate::config::TransportConfig;
use crate::crypto::{OneRttKeys, PacketProtection, ResetKey, TlsSession};
use crate::datagrams::{DatagramQueues, SendDatagramError};
use crate::ecn::{EcnCodepoint, EcnPathInfo};
use crate::link_hints::LinkHints;
use crate::pm::{PathAction, PathManager};
use crate::qlog::QlogStream;
use crate::sched::{PathEvent, PathSnapshot, PathState, PathStatus, QosClass, Scheduler};
use crate::shared::{ConnectionId, Dir, PathId, ResetToken, Side, StreamId};
use crate::streams::{
    CryptoStream, ReadError, ReceiveBudget, StreamEvent, StreamLimits, Streams, WriteError,
};
use crate::transport_parameters::TransportParameters;
use crate::{TransportError, TransportErrorCode, VarInt};
use bytes::Bytes;
use cids::{LocalCids, PeerCids};
use path_map::PathMap;
use paths::Path;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::json;
use spaces::{AckSpace, PacketSpace};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
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
    /// The ECN codepoint to set in the IP header of its datagrams ([`crate::ecn`]).
    pub ecn: Option<EcnCodepoint>,
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
    /// The client's first packets were answered by ICMP "port unreachable": the host is
    /// there, but nothing listens on that UDP port.
    #[error("{0} answered that nothing listens on the port (ICMP port unreachable)")]
    PortUnreachable(IpAddr),
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
    /// Packets dropped because they could not be parsed or decrypted, or were duplicates.
    pub packets_dropped: u64,
    /// 1-RTT key updates (initiated by either side).
    pub key_updates: u64,
    /// Peer address changes this endpoint followed on an existing path (RFC 9000 section
    /// 9.3: a NAT rebinding or a migration of the peer), each one validated anew with
    /// PATH_CHALLENGE. Servers only.
    pub peer_address_changes: u64,
    /// Of those, the new addresses validated (PATH_RESPONSE received).
    pub peer_addresses_validated: u64,
    /// Of those, the new addresses whose validation failed, after which the server went
    /// back to the last validated one (RFC 9000 section 9.3.2).
    pub peer_address_reverts: u64,
    /// Active migrations of this endpoint to a new local address
    /// ([`Connection::migrate`]). Clients only.
    pub migrations: u64,
    /// Of those, the ones whose new path validated (PATH_RESPONSE received).
    pub migrations_validated: u64,
    /// Stream data bytes read in order by the application.
    pub stream_bytes_read: u64,
    /// How often the scheduler's top path changed: among the decisions where it chose one
    /// path for stream data ([`crate::sched::Decision::Send`]) while every usable path had
    /// room for a packet (so nothing but its own ranking constrained the choice), how many
    /// chose another path than the previous such decision. Spills onto a further path
    /// because the chosen one is full do not count. Counted at the sender.
    pub top_path_switches: u64,
    /// Moves of path 0 to the server's preferred address (RFC 9000 section 9.6): at a
    /// client, after it validated the address; at a server, when it began sending from
    /// it (after a non-probing packet arrived there and the path from there validated).
    pub preferred_address_migrations: u64,
}

/// How a path looks from outside, for summaries.
#[derive(Debug, Clone)]
pub struct PathInfo {
    /// The scheduler's view of the path.
    pub snapshot: PathSnapshot,
    /// Counters.
    pub stats: PathStats,
    /// ECN on the path: what this endpoint marks and what the peer reports back.
    pub ecn: EcnPathInfo,
}

#[derive(Debug)]
enum State {
    Handshake,
    Established,
    /// We sent CONNECTION_CLOSE; we answer further packets with it until the deadline.
    Closing {
        deadline: Instant,
    },
    /// The peer closed; we send nothing until the deadline.
    Draining {
        deadline: Instant,
    },
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
    fn new(kind: crate::recovery::SpaceKind, keys: Option<rustls::quic::Keys>) -> Self {
        HandshakeSpace {
            space: PacketSpace::new(kind),
            crypto: CryptoStream::new(),
            keys,
        }
    }
}

/// Connection-level frames waiting to be sent (regenerated from current state when sent,
/// so a lost frame is retransmitted with up-to-date values).
#[derive(Debug, Default)]
struct PendingFrames {
    handshake_done: bool,
    new_cids: BTreeSet<(PathId, u64)>,
    retire_cids: BTreeSet<(PathId, u64)>,
    /// Peer connection IDs we retired whose RETIRE_CONNECTION_ID is not acknowledged yet
    /// (waiting in `retire_cids` or in flight).
    retire_unacked: BTreeSet<(PathId, u64)>,
    max_path_id: bool,
    paths_blocked: bool,
    path_cids_blocked: BTreeSet<PathId>,
}

/// Path IDs no longer usable (abandoned), as ranges: a peer that opens and abandons path
/// after path leaves one range behind, not one entry per path.
#[derive(Debug, Default)]
struct RetiredPaths(crate::range_set::RangeSet);

impl RetiredPaths {
    fn contains(&self, id: &PathId) -> bool {
        self.0.contains(u64::from(id.0))
    }

    /// Adds a path ID; false if it was retired already.
    fn insert(&mut self, id: PathId) -> bool {
        self.0.insert_one(u64::from(id.0))
    }

    /// Number of disjoint ranges held (the state's size).
    #[cfg(test)]
    fn ranges(&self) -> usize {
        self.0.len()
    }
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
    /// The version of the handshake and later packets (after a switch, the negotiated one).
    version: u32,
    /// The version of the client's first Initial (RFC 9368's client chosen version).
    initial_version: u32,
    /// The version_information this endpoint sent, if any; its available versions are the
    /// versions a client accepts a switch to.
    local_version_info: Option<crate::transport_parameters::VersionInformation>,
    /// Server that switched versions: the Initial keys of the client's version, for the
    /// client Initials sent before it learned of the switch.
    original_initial_keys: Option<crate::crypto::Keys>,
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
    /// 0-RTT packet protection keys (RFC 9001 section 4.6): the client's to seal its early
    /// data, the server's to open it; dropped once no longer of use.
    zero_rtt: Option<rustls::quic::DirectionalKeys>,
    /// Client: the server's transport parameters remembered with the session ticket, which
    /// its 0-RTT packets honour, until the handshake completes.
    remembered_params: Option<TransportParameters>,
    /// Early data: the client's 0-RTT packets sent, or the 0-RTT packets the server opened.
    zero_rtt_packets: u64,
    /// Whether the server accepted early data (the client learns it when the handshake
    /// completes; the server when it reads the ClientHello).
    early_data_accepted: bool,
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
    /// Client: the SCID of a Retry packet it accepted; server: the SCID of the Retry it sent.
    retry_scid: Option<ConnectionId>,
    /// Client: the token from the Retry, echoed in Initial packets.
    retry_token: Bytes,
    local_handshake_cid: ConnectionId,

    local_cids: LocalCids,
    peer_cids: PeerCids,
    paths: PathMap,
    /// Path IDs no longer usable (abandoned).
    retired_paths: RetiredPaths,
    /// Peer path status received for paths not open yet: (sequence, status).
    early_peer_status: BTreeMap<PathId, (u64, PathStatus)>,
    /// Destination connection ID of the packet whose frames are being processed.
    current_packet_dcid: ConnectionId,
    /// The (local, remote) addresses and the size of the datagram being processed.
    current_datagram: (SocketAddr, SocketAddr, u64),
    multipath: Option<Multipath>,
    scheduler: Box<dyn Scheduler>,
    /// Decides which paths exist (see [`crate::pm`]).
    path_manager: Box<dyn PathManager>,
    /// Actions the path manager asked for that are not applied yet.
    pm_actions: Vec<PathAction>,
    /// The path manager is owed a tick (the handshake was confirmed, or the peer made a new
    /// path ID usable).
    pm_tick_due: bool,
    /// When the path manager was last ticked.
    pm_last_tick: Option<Instant>,
    /// The latest link hints and throughput prediction per local interface address.
    link_hints: BTreeMap<IpAddr, (LinkHints, Option<u64>)>,
    /// Builds the congestion controller of each new path of this connection.
    cc_factory: Arc<dyn crate::cc::ControllerFactory>,

    streams: Streams,
    datagrams: DatagramQueues,
    pending: PendingFrames,

    idle_timeout: Option<Duration>,
    idle_deadline: Option<Instant>,
    /// Whether an ack-eliciting packet was sent since the last packet was received
    /// (idle-timer restart rule of RFC 9000 section 10.1).
    sent_ack_eliciting_since_receive: bool,
    /// Whether the packets of the transmit being built are marked ECT(0): decided by the
    /// path's ECN validation at its first packet, so every datagram of a GSO batch agrees
    /// with the record of its packets.
    batch_ecn: Option<bool>,
    keep_alive_deadline: Option<Instant>,
    /// When idle paths are probed next ([`TransportConfig::idle_path_probe_interval`]).
    idle_path_probe_deadline: Option<Instant>,
    packets_since_key_update: u64,

    events: VecDeque<Event>,
    endpoint_events: VecDeque<EndpointEvent>,
    qlog: Option<QlogStream>,
    stats: ConnectionStats,
    /// The path last chosen for stream data while every usable path had room (for
    /// [`ConnectionStats::top_path_switches`]).
    last_top_path: Option<PathId>,
    /// Reused by every scheduling decision for the paths' snapshots.
    snapshot_scratch: Vec<PathSnapshot>,
    /// Reused by every `poll_transmit` and `handle_timeout` for the path IDs.
    path_id_scratch: Vec<PathId>,
    /// Reused by every scheduling decision for the held-back paths (see
    /// `Connection::held_back_paths`), which a link outage makes non-empty for every packet.
    held_back_scratch: Vec<PathId>,
    /// Reused by every `poll_transmit` for the paths whose queued data goes back.
    trim_scratch: Vec<(PathId, bool)>,
    /// The data of the STREAM frame being written from a path's queue (kept from one frame
    /// to the next).
    stream_parts_scratch: Vec<Bytes>,
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
    /// The version to send in: the client's chosen version, the server's negotiated one.
    pub version: u32,
    /// The version of the client's first Initial.
    pub initial_version: u32,
    /// The versions this endpoint speaks, most preferred first, for version_information
    /// (empty: only `version`).
    pub available_versions: Vec<u32>,
    pub now: Instant,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub tls: TlsSessionBuilder,
    pub rng_seed: u64,
    pub reset_key: Arc<ResetKey>,
    pub local_cid_len: usize,
    /// Client: the random DCID of its first Initial. Server: the DCID the client chose
    /// (before any Retry).
    pub original_dcid: ConnectionId,
    /// Our first source connection ID.
    pub local_cid: ConnectionId,
    /// Server: the client's SCID (our first destination). Client: same as original_dcid.
    pub remote_cid: ConnectionId,
    /// Server: the SCID of the Retry it sent, if the client came through one. Initial keys
    /// are then derived from it.
    pub retry_scid: Option<ConnectionId>,
    pub qlog: Option<QlogStream>,
    /// The endpoint's cap on connection receive windows.
    pub receive_budget: Option<Arc<ReceiveBudget>>,
    /// How Handshake and 1-RTT packets are protected.
    pub packet_protection: PacketProtection,
}

/// How to build the TLS session once the transport parameters are known.
pub(crate) enum TlsSessionBuilder {
    Client {
        config: Arc<rustls::ClientConfig>,
        server_name: String,
    },
    Server {
        config: Arc<rustls::ServerConfig>,
    },
}

impl Connection {
    pub(crate) fn new(p: ConnectionParams) -> Result<Self, TransportError> {
        let config = p.config;
        let mut limits = stream_limits(&config);
        if let Some(budget) = &p.receive_budget {
            limits.max_data = budget.grant_initial(limits.max_data);
        }
        // Created first: dropping it (also on the errors below) returns the window granted.
        let mut streams = Streams::new(p.side, limits);
        if let Some(budget) = p.receive_budget {
            streams.set_receive_budget(budget);
        }
        streams.set_receive_window_limits(config.receive_window, config.stream_receive_window);
        streams.set_send_window(config.send_window);
        let local_reset = p.reset_key.token(&p.local_cid);
        let mut params = handshake::local_transport_parameters(
            &config,
            &limits,
            p.side,
            &p.original_dcid,
            &p.local_cid,
            p.retry_scid.as_ref(),
            local_reset,
        );
        let mut rng = ChaCha20Rng::seed_from_u64(p.rng_seed);
        let preferred = p
            .side
            .is_server()
            .then(|| preferred_address_parameter(&config, &mut rng, &p.reset_key, p.local_cid_len))
            .flatten();
        params.preferred_address = preferred;
        let local_version_info =
            crate::version_negotiation::local_information(p.version, &p.available_versions);
        params.version_information = local_version_info.clone();
        let mut encoded = Vec::new();
        params.encode(&mut encoded);
        let mut tls = match p.tls {
            TlsSessionBuilder::Client {
                config,
                server_name,
            } => {
                let may_switch = p
                    .available_versions
                    .iter()
                    .any(|&v| v != p.version && crate::packet::is_compatible(p.version, v));
                TlsSession::client_for_version(config, &server_name, encoded, p.version, may_switch)
            }
            TlsSessionBuilder::Server { config } => {
                TlsSession::server_for_version(config, encoded, p.version)
            }
        }
        .map_err(|e| TransportError::internal(format!("TLS setup: {e}")))?;
        tls.set_packet_protection(p.packet_protection);
        // Initial keys come from the client's first DCID, or after a Retry from the Retry's
        // SCID (RFC 9001 section 5.2).
        let initial_secret_cid = p.retry_scid.unwrap_or(p.original_dcid);
        let initial_keys = crate::crypto::initial_keys(p.version, &initial_secret_cid, p.side)
            .ok_or_else(|| {
                TransportError::internal(format!("unsupported version {:#x}", p.version))
            })?;
        let original_initial_keys = (p.initial_version != p.version)
            .then(|| crate::crypto::initial_keys(p.initial_version, &initial_secret_cid, p.side))
            .flatten();

        let cc_factory = config
            .congestion_controller
            .for_connection()
            .unwrap_or_else(|| config.congestion_controller.clone());
        let cc = cc_factory.build(p.now, PathId::ZERO, config.initial_mtu);
        let mut path0 = Path::new(
            PathId::ZERO,
            p.local,
            p.remote,
            &config,
            cc,
            p.side.is_client(),
        );
        // A server that sent a Retry already validated the client's address.
        if p.side.is_server() && p.retry_scid.is_some() {
            path0.address_validated = true;
            path0.state = PathState::Validated;
        }
        let mut paths = PathMap::default();
        paths.insert(path0);

        let mut local_cids = LocalCids::default();
        local_cids.issue(PathId::ZERO, p.local_cid, local_reset);
        if let Some(pa) = &preferred {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-5.1.1
            //# If the preferred_address transport parameter is
            //# sent, the sequence number of the supplied connection ID is 1.
            local_cids.issue(PathId::ZERO, pa.connection_id, pa.stateless_reset_token);
        }
        let mut peer_cids = PeerCids::new(config.active_connection_id_limit);
        peer_cids.set_handshake_cid(p.remote_cid, None);

        let datagrams = DatagramQueues::new(
            config
                .max_datagram_frame_size
                .map(|_| config.datagram_receive_buffer),
            config.datagram_send_buffer,
        );
        let scheduler = config.scheduler.build();
        let path_manager = config.path_manager.build();
        let idle_timeout = config.max_idle_timeout;
        use crate::recovery::SpaceKind;
        let mut conn = Connection {
            side: p.side,
            version: p.version,
            initial_version: p.initial_version,
            local_version_info,
            original_initial_keys,
            state: State::Handshake,
            error: None,
            close: None,
            close_pending: false,
            created: p.now,
            rng,
            reset_key: p.reset_key,
            local_cid_len: p.local_cid_len,
            tls,
            initial: Some(HandshakeSpace::new(SpaceKind::Initial, Some(initial_keys))),
            handshake: Some(HandshakeSpace::new(SpaceKind::Handshake, None)),
            one_rtt: None,
            zero_rtt: None,
            remembered_params: None,
            zero_rtt_packets: 0,
            early_data_accepted: false,
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
            retired_paths: RetiredPaths::default(),
            early_peer_status: BTreeMap::new(),
            current_packet_dcid: p.local_cid,
            current_datagram: (p.local, p.remote, 0),
            multipath: None,
            scheduler,
            path_manager,
            pm_actions: Vec::new(),
            pm_tick_due: false,
            pm_last_tick: None,
            link_hints: BTreeMap::new(),
            cc_factory,
            streams,
            datagrams,
            pending: PendingFrames::default(),
            idle_timeout,
            idle_deadline: idle_timeout.map(|t| p.now + t),
            sent_ack_eliciting_since_receive: false,
            batch_ecn: None,
            keep_alive_deadline: None,
            idle_path_probe_deadline: None,
            packets_since_key_update: 0,
            events: VecDeque::new(),
            endpoint_events: VecDeque::new(),
            qlog: p.qlog,
            stats: ConnectionStats::default(),
            last_top_path: None,
            config,
            snapshot_scratch: Vec::new(),
            path_id_scratch: Vec::new(),
            held_back_scratch: Vec::new(),
            trim_scratch: Vec::new(),
            stream_parts_scratch: Vec::new(),
        };
        conn.endpoint_events
            .push_back(EndpointEvent::NewLocalCid(p.local_cid));
        if let Some(pa) = &preferred {
            conn.endpoint_events
                .push_back(EndpointEvent::NewLocalCid(pa.connection_id));
        }
        conn.qlog_event(
            p.now,
            "connection_started",
            json!({ "local": qlog_tuple(p.local), "remote": qlog_tuple(p.remote) }),
        );
        conn.qlog_version_information(p.now, None);
        conn.qlog_parameters(p.now, "local", &params);
        conn.drive_tls(p.now)?;
        conn.start_zero_rtt(p.now)?;
        Ok(conn)
    }

    // ----------------------------------------------------------------------------------
    // State and statistics
    // ----------------------------------------------------------------------------------

    /// Which side of the connection this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The QUIC version the connection uses (after compatible version negotiation, the
    /// negotiated one).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// True until the handshake completes.
    pub fn is_handshaking(&self) -> bool {
        !self.handshake_complete
    }

    /// True once a packet from the peer was decrypted and processed.
    pub(crate) fn received_any(&self) -> bool {
        self.received_any
    }

    /// True once the handshake is confirmed (RFC 9001 section 4.1.2).
    pub fn is_handshake_confirmed(&self) -> bool {
        self.handshake_confirmed
    }

    /// True once the connection is closing, draining or gone.
    pub fn is_closed(&self) -> bool {
        matches!(
            self.state,
            State::Closing { .. } | State::Draining { .. } | State::Drained
        )
    }

    /// True once the connection has no state left to keep.
    pub fn is_drained(&self) -> bool {
        matches!(self.state, State::Drained)
    }

    /// Why the connection ended, once it has.
    pub fn close_reason(&self) -> Option<&ConnectionError> {
        self.error.as_ref()
    }

    /// Whether the handshake resumed a session from an earlier connection's ticket
    /// ([`crate::crypto::enable_session_tickets`]); false until the handshake completes.
    pub fn is_resumed(&self) -> bool {
        self.tls.resumed().unwrap_or(false)
    }

    /// Whether the server accepted early data (0-RTT, see
    /// [`crate::crypto::enable_zero_rtt`]): on a client, known once the handshake completes
    /// (false before, and when it sent none); on a server, from the ClientHello on.
    pub fn is_early_data_accepted(&self) -> bool {
        self.early_data_accepted
    }

    /// True while a client can send early data: it resumes with a ticket that allows 0-RTT
    /// and the handshake has not completed. Streams opened and written meanwhile leave in
    /// 0-RTT packets, within the limits remembered with the ticket.
    pub fn is_sending_early_data(&self) -> bool {
        self.sends_zero_rtt()
    }

    /// 0-RTT packets the client sent, or the server opened.
    pub fn zero_rtt_packets(&self) -> u64 {
        self.zero_rtt_packets
    }

    /// Client with 0-RTT keys and no 1-RTT keys yet: its application data packets are
    /// 0-RTT packets.
    fn sends_zero_rtt(&self) -> bool {
        self.side.is_client() && self.one_rtt.is_none() && self.zero_rtt.is_some()
    }

    /// The qlog packet type of a packet of `space`; `zero_rtt` for the packets of the
    /// application data space sent or received with 0-RTT keys.
    fn qlog_packet_type(space: AckSpace, zero_rtt: bool) -> &'static str {
        if zero_rtt && matches!(space, AckSpace::Path(_)) {
            "0RTT"
        } else {
            space_packet_type(space)
        }
    }

    /// The negotiated ALPN protocol.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.tls.alpn_protocol()
    }

    /// The negotiated TLS cipher suite (e.g. `TLS13_CHACHA20_POLY1305_SHA256`), once known.
    pub fn cipher_suite(&self) -> Option<rustls::CipherSuite> {
        self.tls.cipher_suite().map(|s| s.suite())
    }

    /// The peer's address on the first open path.
    pub fn remote_address(&self) -> Option<SocketAddr> {
        self.paths.values().next().map(|p| p.remote)
    }

    /// True if both sides negotiated Multipath QUIC.
    pub fn is_multipath(&self) -> bool {
        self.multipath.is_some()
    }

    /// Counters of the connection.
    pub fn stats(&self) -> ConnectionStats {
        self.stats.clone()
    }

    /// How many paths [`Connection::paths`] lists (open ones and those being closed),
    /// without building their snapshots.
    pub fn path_count(&self) -> usize {
        self.paths.len()
    }

    /// The state and counters of every path (open ones and those being closed).
    pub fn paths(&self) -> Vec<PathInfo> {
        self.paths
            .values()
            .map(|p| PathInfo {
                snapshot: p.snapshot(false),
                stats: p.stats,
                ecn: EcnPathInfo {
                    state: p.ecn.state(),
                    failure: p.ecn.failure(),
                    marked_sent: p.ecn.marked(),
                    peer_reported_ect0: p.ecn.reported().ect0,
                    peer_reported_ce: p.ecn.reported().ce,
                    received_ect0: p.space.acks.ecn.ect0,
                    received_ect1: p.space.acks.ecn.ect1,
                    received_ce: p.space.acks.ecn.ce,
                },
            })
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

    // ----------------------------------------------------------------------------------
    // Streams and datagrams
    // ----------------------------------------------------------------------------------

    /// Opens a new stream, or `None` if the peer's stream limit is reached (or the
    /// handshake has not delivered the peer's limits yet).
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

    /// Writes a prefix of `data` without copying, advancing `data` past what was taken.
    pub fn write_bytes(&mut self, id: StreamId, data: &mut Bytes) -> Result<usize, WriteError> {
        self.streams.write_bytes(id, data)
    }

    /// Bytes a write to this stream would accept now.
    pub fn writable(&self, id: StreamId) -> u64 {
        self.streams.writable(id)
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

    /// The connection-level receive window now: auto-tuning grows it from
    /// [`TransportConfig::initial_receive_window`] towards
    /// [`TransportConfig::receive_window`].
    pub fn receive_window(&self) -> u64 {
        self.streams.receive_window()
    }

    /// Reads up to `max` bytes of in-order data; `Ok(None)` at the end of the stream.
    pub fn read(&mut self, id: StreamId, max: usize) -> Result<Option<Bytes>, ReadError> {
        let r = self.streams.read(id, max);
        if let Ok(Some(b)) = &r {
            self.stats.stream_bytes_read += b.len() as u64;
        }
        r
    }

    /// Queues an unreliable datagram (RFC 9221) of class [`QosClass::BestEffort`].
    pub fn send_datagram(&mut self, data: Bytes) -> Result<(), SendDatagramError> {
        self.send_datagram_with_class(data, QosClass::BestEffort)
    }

    /// Queues an unreliable datagram (RFC 9221) of QoS class `class`: the scheduler
    /// decides its path under that class's policy (see [`crate::sched::QosClass`]).
    pub fn send_datagram_with_class(
        &mut self,
        data: Bytes,
        class: QosClass,
    ) -> Result<(), SendDatagramError> {
        let max = self.max_datagram_size();
        self.datagrams.push_outgoing_class(data, class, max)
    }

    /// Bytes of datagrams queued for sending and not yet sent (copies queued on paths by
    /// a duplicating scheduler included): how far the application is ahead of the paths.
    pub fn datagram_queued_bytes(&self) -> usize {
        self.datagrams.queued_bytes()
            + self
                .paths
                .values()
                .map(|p| p.datagram_queue_bytes)
                .sum::<usize>()
    }

    /// Bytes of datagrams of `class` queued for sending (copies queued on paths aside).
    pub fn datagram_queued_bytes_of(&self, class: QosClass) -> usize {
        self.datagrams.queued_bytes_of(class)
    }

    /// Outgoing datagrams dropped so far: the send buffer was full, or a path holding a
    /// duplicated copy stopped taking data.
    pub fn datagrams_dropped(&self) -> u64 {
        self.datagrams.dropped_outgoing
    }

    /// Copies of duplicated datagrams of `class` queued on paths beyond the first of each
    /// (a copy its path then dropped is in [`Self::datagrams_dropped`] too). A datagram the
    /// scheduler sends on one path only, e.g. while the class's other path is validating,
    /// adds none.
    pub fn datagram_copies(&self, class: QosClass) -> u64 {
        self.datagrams.copies_queued[class.index()]
    }

    /// Sets the QoS class of stream `id`'s data from its next frame on (all streams start as
    /// [`QosClass::BestEffort`]); false if the stream does not exist or has no sending part.
    pub fn set_stream_class(&mut self, id: StreamId, class: QosClass) -> bool {
        self.streams.set_class(id, class)
    }

    /// The QoS class of stream `id`'s data, if the stream exists.
    pub fn stream_class(&self, id: StreamId) -> Option<QosClass> {
        self.streams.class(id)
    }

    /// Takes the oldest received datagram.
    pub fn recv_datagram(&mut self) -> Option<Bytes> {
        self.datagrams.recv()
    }

    /// Largest datagram payload that fits in one packet on every usable path, or `None` if
    /// the peer does not accept datagrams.
    pub fn max_datagram_size(&self) -> Option<usize> {
        let peer_max = self
            .peer_params
            .as_ref()?
            .max_datagram_frame_size
            .filter(|v| *v > 0)?;
        let mtu = self
            .paths
            .values()
            .filter(|p| p.is_usable())
            .map(|p| p.mtu)
            .min()
            .unwrap_or(self.config.initial_mtu);
        // Short header with the longest connection ID, 4-byte packet number, AEAD tag,
        // and the DATAGRAM frame's type and length fields.
        let overhead = 1 + crate::shared::MAX_CID_SIZE + 4 + 16 + 1 + 2;
        let by_packet = usize::from(mtu).saturating_sub(overhead);
        let by_frame = usize::try_from(peer_max)
            .unwrap_or(usize::MAX)
            .saturating_sub(1 + 8);
        Some(by_packet.min(by_frame))
    }

    // ----------------------------------------------------------------------------------
    // Control
    // ----------------------------------------------------------------------------------

    /// Closes the connection with an application error code.
    pub fn close(&mut self, now: Instant, code: VarInt, reason: &[u8]) {
        if self.is_closed() {
            return;
        }
        self.error = Some(ConnectionError::LocallyClosed);
        self.enter_closing(
            now,
            CloseFrame::Application {
                code,
                reason: Bytes::copy_from_slice(reason),
            },
        );
    }

    /// The network answered a datagram sent to `remote` with ICMP "port unreachable". ICMP
    /// is not authenticated, so this only ends a client's connection attempt that has not
    /// heard from the server at all yet, the way a refused SYN ends a TCP connect (a hard
    /// error, RFC 1122 section 4.2.3.9); returns whether it did. The connection is gone at
    /// once: there is no peer to send CONNECTION_CLOSE to.
    pub fn handle_port_unreachable(&mut self, now: Instant, remote: IpAddr) -> bool {
        if self.side != Side::Client
            || self.received_any
            || self.is_closed()
            || !self.paths.values().any(|p| p.remote.ip() == remote)
        {
            return false;
        }
        self.qlog_event(
            now,
            "connection_closed",
            json!({"owner": "local", "trigger": "unspecified", "reason": "ICMP port unreachable"}),
        );
        let error = ConnectionError::PortUnreachable(remote);
        self.error = Some(error.clone());
        self.events.push_back(Event::ConnectionLost(error));
        self.drain_now();
        true
    }

    /// Sends a PING frame on path `id` with its next packet, which the peer then
    /// acknowledges: to check that the path still carries, or to have a packet of the
    /// current key phase acknowledged so that [`Connection::force_key_update`] may start
    /// one (after a peer's key update, an endpoint that sends only acknowledgments has
    /// nothing the peer would acknowledge). Returns false for an unknown path.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-19.2
    //# Endpoints can use PING frames (type=0x01) to verify that their peers are still alive
    //# or to check reachability to the peer.
    pub fn ping(&mut self, id: PathId) -> bool {
        if self.is_closed() {
            return false;
        }
        let Some(path) = self.paths.get_mut(&id) else {
            return false;
        };
        path.space.ping_pending = true;
        true
    }

    /// Starts a 1-RTT key update now, if one is allowed (the handshake is confirmed and the
    /// previous update was acknowledged). Returns whether it started.
    pub fn force_key_update(&mut self, now: Instant) -> bool {
        if !self.handshake_confirmed {
            return false;
        }
        let three_pto = 3 * self.largest_pto();
        let Some(keys) = self.one_rtt.as_mut() else {
            return false;
        };
        if keys.initiate_update(now, three_pto).is_err() {
            return false;
        }
        self.packets_since_key_update = 0;
        self.stats.key_updates += 1;
        self.qlog_event(
            now,
            "key_updated",
            json!({"key_type": "client_1rtt_secret", "trigger": "local_update"}),
        );
        true
    }

    /// Passes a run-time parameter to the scheduler (see [`Scheduler::configure`]).
    pub fn configure_scheduler(&mut self, key: &str, value: &str) -> Result<(), String> {
        self.scheduler.configure(key, value)
    }

    /// Name of the scheduler in use.
    pub fn scheduler_name(&self) -> &str {
        self.scheduler.name()
    }

    /// Passes a run-time parameter to the path manager (see
    /// [`PathManager::configure`]).
    pub fn configure_path_manager(&mut self, key: &str, value: &str) -> Result<(), String> {
        self.path_manager.configure(key, value)
    }

    /// Name of the path manager in use.
    pub fn path_manager_name(&self) -> &str {
        self.path_manager.name()
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
        let reason = ConnectionError::TransportError(error.clone());
        self.error = Some(reason.clone());
        self.events.push_back(Event::ConnectionLost(reason));
        self.enter_closing(now, CloseFrame::Transport(error));
    }

    fn enter_draining(&mut self, now: Instant, reason: ConnectionError) {
        if matches!(self.state, State::Draining { .. } | State::Drained) {
            return;
        }
        let deadline = now + 3 * self.largest_pto();
        if self.error.is_none()
            || matches!(self.state, State::Closing { .. })
                && self.error == Some(ConnectionError::LocallyClosed)
        {
            if self.error.is_none() {
                self.events.push_back(Event::ConnectionLost(reason.clone()));
            }
            self.error.get_or_insert(reason);
        }
        self.state = State::Draining { deadline };
        self.qlog_event(now, "connection_closed", json!({"owner": "remote"}));
    }

    fn drain_now(&mut self) {
        self.state = State::Drained;
        self.endpoint_events.push_back(EndpointEvent::Drained);
    }

    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.6
    //# When this specification is used, these states SHOULD instead persist for at least three
    //# times the largest PTO among all paths.
    fn largest_pto(&self) -> Duration {
        // The PTO grows with its base (the rest is common to every path): the path with
        // the largest base has the largest PTO, worked out once.
        self.paths
            .values()
            .map(|p| &p.rtt)
            .max_by_key(|rtt| rtt.pto_base())
            .map_or(self.config.initial_rtt * 3, |rtt| {
                crate::recovery::pto_duration(rtt, self.peer_max_ack_delay(), 0)
            })
    }

    fn peer_max_ack_delay(&self) -> Duration {
        self.peer_params
            .as_ref()
            .map_or(Duration::from_millis(25), |p| {
                Duration::from_millis(p.max_ack_delay)
            })
    }

    // ----------------------------------------------------------------------------------
    // qlog helpers (the events after which the file is flushed: [`QLOG_FLUSH_AFTER`])
    // ----------------------------------------------------------------------------------

    fn qlog_event(&mut self, now: Instant, name: &str, data: serde_json::Value) {
        if let Some(q) = self.qlog.as_mut() {
            q.event(now, name, data);
            if QLOG_FLUSH_AFTER.contains(&name) {
                q.flush();
            }
        }
    }

    /// Logs the addresses of a new path. The QUIC events draft calls a path's 4-tuple a
    /// tuple; the path ID serves as its TupleID.
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-qlog-quic-events#section-4.7
    //# This event is used to associate a single TupleID's value with other parameters
    //# that describe a unique network tuple.
    fn qlog_tuple_assigned(
        &mut self,
        now: Instant,
        id: PathId,
        local: SocketAddr,
        remote: SocketAddr,
    ) {
        self.qlog_event(
            now,
            "tuple_assigned",
            json!({
                "tuple_id": id.0.to_string(),
                "tuple_local": qlog_tuple(local),
                "tuple_remote": qlog_tuple(remote),
            }),
        );
    }

    /// A qlog event outside the QUIC event schema, in the `polypath` namespace.
    fn qlog_polypath_event(&mut self, now: Instant, name: &str, data: serde_json::Value) {
        if let Some(q) = self.qlog.as_mut() {
            q.event_in(now, "polypath", name, data);
        }
    }

    fn qlog_metrics(&mut self, now: Instant, path_id: PathId) {
        if self.qlog.is_none() {
            return;
        }
        let Some(path) = self.paths.get(&path_id) else {
            return;
        };
        let data = json!({
            "path_id": path_id.0,
            "min_rtt": ms(path.rtt.min()),
            "smoothed_rtt": ms(path.rtt.smoothed()),
            "latest_rtt": ms(path.rtt.latest()),
            "rtt_variance": ms(path.rtt.rttvar()),
            "congestion_window": path.cc.window(),
            "bytes_in_flight": path.bytes_in_flight,
            "ssthresh": path.cc.ssthresh(),
            "pto_count": path.pto_count,
        });
        self.qlog_event(now, "recovery_metrics_updated", data);
    }

    /// Logs `version_information` (the qlog QUIC event schema): this side's versions, and
    /// the version in use. `switched_from` is the client's version before a switch.
    fn qlog_version_information(&mut self, now: Instant, switched_from: Option<u32>) {
        if self.qlog.is_none() {
            return;
        }
        let hex = |v: &u32| format!("{v:08x}");
        let ours: Vec<String> = self.local_version_info.as_ref().map_or_else(
            || vec![hex(&self.version)],
            |i| i.available.iter().map(hex).collect(),
        );
        let key = if self.side.is_client() {
            "client_versions"
        } else {
            "server_versions"
        };
        let mut data = json!({ key: ours, "chosen_version": hex(&self.version) });
        if let Some(from) = switched_from {
            data["switched_from"] = json!(hex(&from));
        }
        self.qlog_event(now, "version_information", data);
    }

    /// The qlog `header` of a packet of `space`; long headers (Initial, Handshake) also
    /// name their `version`.
    fn qlog_header(
        &self,
        space: AckSpace,
        pn: u64,
        version: u32,
        zero_rtt: bool,
    ) -> serde_json::Value {
        let packet_type = Self::qlog_packet_type(space, zero_rtt);
        let mut header =
            json!({ "packet_type": packet_type, "packet_number": pn, "path_id": space.path().0 });
        if zero_rtt || matches!(space, AckSpace::Initial | AckSpace::Handshake) {
            header["version"] = json!(format!("{version:08x}"));
        }
        header
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
            "initial_max_path_id": p.initial_max_path_id.map(|id| id.0),
        });
        self.qlog_event(now, "parameters_set", data);
    }
}

/// The stream limits we advertise at the start, from the transport configuration: the
/// initial receive windows, never above the largest ones.
fn stream_limits(config: &TransportConfig) -> StreamLimits {
    let stream = config
        .initial_stream_receive_window
        .min(config.stream_receive_window);
    StreamLimits {
        max_data: config.initial_receive_window.min(config.receive_window),
        max_stream_data_bidi_local: stream,
        max_stream_data_bidi_remote: stream,
        max_stream_data_uni: stream,
        max_streams_bidi: config.max_concurrent_bidi_streams,
        max_streams_uni: config.max_concurrent_uni_streams,
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A TupleEndpointInfo of the QUIC events draft.
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-qlog-quic-events#section-8.5
//# TupleEndpointInfo = {
//#     ? ip_v4: IPAddress
//#     ? port_v4: uint16
//#     ? ip_v6: IPAddress
//#     ? port_v6: uint16
fn qlog_tuple(addr: SocketAddr) -> serde_json::Value {
    match addr {
        SocketAddr::V4(a) => json!({ "ip_v4": a.ip().to_string(), "port_v4": a.port() }),
        SocketAddr::V6(a) => json!({ "ip_v6": a.ip().to_string(), "port_v6": a.port() }),
    }
}

fn space_packet_type(space: AckSpace) -> &'static str {
    match space {
        AckSpace::Initial => "initial",
        AckSpace::Handshake => "handshake",
        AckSpace::Path(_) => "1RTT",
    }
}

/// qlog events after which a connection's log is written out at once (besides every event
/// until the handshake is confirmed, see [`QlogStream::set_eager`]): state changes, new and
/// abandoned paths, and the end of the connection, so that a killed process leaves them.
const QLOG_FLUSH_AFTER: [&str; 4] = [
    "connection_state_updated",
    "path_assigned",
    "path_abandoned",
    "connection_closed",
];

/// The server's preferred_address transport parameter from `config`, with a new
/// connection ID (to be issued with sequence number 1) and its stateless reset token.
//= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
//# A server that chooses
//# a zero-length connection ID MUST NOT provide a preferred address.
fn preferred_address_parameter(
    config: &TransportConfig,
    rng: &mut ChaCha20Rng,
    reset_key: &ResetKey,
    local_cid_len: usize,
) -> Option<crate::transport_parameters::PreferredAddress> {
    let addr = config.preferred_address?;
    if local_cid_len == 0 {
        tracing::warn!("no preferred address with zero-length connection IDs");
        return None;
    }
    let connection_id = ConnectionId::random(rng, local_cid_len);
    let (ipv4, ipv6) = match addr {
        SocketAddr::V4(a) => (Some(a), None),
        SocketAddr::V6(a) => (None, Some(a)),
    };
    Some(crate::transport_parameters::PreferredAddress {
        ipv4,
        ipv6,
        connection_id,
        stateless_reset_token: reset_key.token(&connection_id),
    })
}

#[cfg(test)]
mod tests;
