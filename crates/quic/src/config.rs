//! Configuration of endpoints and connections.

use crate::cc::{ControllerFactory, CubicConfig};
use crate::crypto::PacketProtection;
use crate::pm::{ManualFactory, PathManagerFactory};
use crate::qlog::QlogFactory;
use crate::sched::{MinRttFactory, SchedulerFactory};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The receive window of a Linux TCP receiver with the default sysctls, for runs that
/// compare polypath with the kernel ("Linux-like" receive limits): receive-buffer
/// autotuning grows the buffer up to `tcp_rmem[2]` = 6 MiB, and with `tcp_adv_win_scale`
/// = 1 (the default before Linux 6.6) half of the buffer is advertised as window: 3 MiB.
/// An MPTCP connection has one such buffer for all its subflows. polypath's own defaults
/// are 16 MiB per connection and 8 MiB per stream.
pub const LINUX_RECEIVE_WINDOW: u64 = 3 * 1024 * 1024;

/// Default [`EndpointConfig::receive_budget`]: 512 MiB of connection receive windows per
/// endpoint, 32 connections at the largest default window (16 MiB) or about 340 at the
/// initial one (1.5 MiB).
pub const DEFAULT_RECEIVE_BUDGET: u64 = 512 * 1024 * 1024;

/// Transport behaviour of a connection: flow-control windows, timers, recovery and the
/// plug-in policies. Shared (in an `Arc`) by all connections created with it.
#[derive(Clone)]
pub struct TransportConfig {
    /// Idle timeout we advertise (max_idle_timeout); `None` disables it on our side.
    pub max_idle_timeout: Option<Duration>,
    /// Send a PING when nothing was sent for this long (keeps NAT bindings and idle
    /// timers alive); `None` disables keep-alives.
    pub keep_alive_interval: Option<Duration>,
    /// Multipath: every this often, send a PING on each usable path with nothing in flight,
    /// so an idle path's RTT estimate follows the path (a scheduler choosing by RTT would
    /// otherwise keep comparing with a sample from when the path last carried data);
    /// `None` (the default) sends none.
    pub idle_path_probe_interval: Option<Duration>,
    /// RTT assumed before the first sample (RFC 9002 section 6.2.2 recommends 333 ms).
    pub initial_rtt: Duration,
    /// max_ack_delay we advertise: how long we may delay acknowledgments.
    pub max_ack_delay: Duration,
    /// ack_delay_exponent we advertise.
    pub ack_delay_exponent: u8,
    /// Acknowledge at the latest after this many ack-eliciting packets (RFC 9000 section
    /// 13.2.2 recommends 2).
    pub ack_eliciting_threshold: u32,
    /// Largest connection-level receive window: how many bytes the peer may send on all
    /// streams together beyond what the application has read, once auto-tuning has grown
    /// the window from `initial_receive_window`.
    pub receive_window: u64,
    /// Largest per-stream receive window auto-tuning may reach.
    pub stream_receive_window: u64,
    /// initial_max_data: the connection window at the start (at most `receive_window`;
    /// equal to it turns auto-tuning of the connection window off). The endpoint's
    /// [`EndpointConfig::receive_budget`] may give a server connection less.
    pub initial_receive_window: u64,
    /// initial_max_stream_data_*: each stream's window at the start (at most
    /// `stream_receive_window`; equal to it turns stream auto-tuning off).
    pub initial_stream_receive_window: u64,
    /// Most bytes of application stream data buffered for sending across all streams.
    pub send_window: u64,
    /// initial_max_streams_bidi.
    pub max_concurrent_bidi_streams: u64,
    /// initial_max_streams_uni.
    pub max_concurrent_uni_streams: u64,
    /// max_datagram_frame_size we advertise (RFC 9221); `None` disables receiving datagrams.
    pub max_datagram_frame_size: Option<u64>,
    /// Bytes of received datagrams kept for the application.
    pub datagram_receive_buffer: usize,
    /// Bytes of outgoing datagrams queued before the oldest are dropped.
    pub datagram_send_buffer: usize,
    /// UDP payload size used before anything larger is known to work; at least 1200.
    pub initial_mtu: u16,
    /// max_udp_payload_size we advertise.
    pub max_udp_payload_size: u16,
    /// Largest UDP payload path MTU discovery probes for; equal to `initial_mtu` disables
    /// discovery.
    pub max_mtu: u16,
    /// active_connection_id_limit we advertise (per path when multipath is in use).
    pub active_connection_id_limit: u64,
    /// Pace packets (RFC 9002 section 7.7).
    pub pacing: bool,
    /// Mark packets ECT(0) on paths that pass ECN validation (RFC 9000 section 13.4;
    /// [`crate::ecn`]). Received ECN marks are reported either way, as the RFC requires.
    pub ecn: bool,
    /// Most packets one [`crate::Transmit`] may carry (UDP GSO segments).
    pub max_gso_segments: usize,
    /// Initiate a 1-RTT key update after this many packets sent with the current keys;
    /// `None` leaves updates to the AEAD limits and [`crate::Connection::force_key_update`].
    pub key_update_interval: Option<u64>,
    /// initial_max_path_id we advertise; `None` disables Multipath QUIC.
    pub initial_max_path_id: Option<u32>,
    /// Congestion controller built for each path.
    pub congestion_controller: Arc<dyn ControllerFactory>,
    /// Packet scheduler of each connection.
    pub scheduler: Arc<dyn SchedulerFactory>,
    /// Path manager of each connection (default: [`crate::pm::Manual`], paths change only
    /// when the application asks).
    pub path_manager: Arc<dyn PathManagerFactory>,
    /// Persistent congestion threshold (RFC 9002 section 7.6.1, recommended 3).
    pub persistent_congestion_threshold: u32,
    /// Server: the address advertised in the preferred_address transport parameter (RFC
    /// 9000 section 9.6), one of its address family (the other family is sent as all
    /// zeros). The I/O layer must receive on it and be able to send from it. `None` (the
    /// default) advertises none. Ignored by clients and by a server with zero-length
    /// connection IDs (which must not advertise one).
    pub preferred_address: Option<std::net::SocketAddr>,
    /// Client: once the handshake is confirmed, validate the server's preferred address
    /// of the family in use and move path 0 to it (RFC 9000 section 9.6.1). On by default,
    /// as in other stacks; `false` stays on the address the connection was opened to.
    pub use_preferred_address: bool,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_idle_timeout: Some(Duration::from_secs(30)),
            keep_alive_interval: None,
            idle_path_probe_interval: None,
            //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.2
            //# When no previous RTT is available, the initial RTT
            //# SHOULD be set to 333 milliseconds.
            initial_rtt: Duration::from_millis(333),
            max_ack_delay: Duration::from_millis(25),
            ack_delay_exponent: 3,
            ack_eliciting_threshold: 2,
            receive_window: 16 * 1024 * 1024,
            stream_receive_window: 8 * 1024 * 1024,
            initial_receive_window: 1536 * 1024,
            initial_stream_receive_window: 1024 * 1024,
            send_window: 16 * 1024 * 1024,
            max_concurrent_bidi_streams: 100,
            max_concurrent_uni_streams: 100,
            //= https://www.rfc-editor.org/rfc/rfc9221#section-3
            //# For most uses of DATAGRAM frames, it is RECOMMENDED to send a value of 65535 in
            //# the max_datagram_frame_size transport parameter to indicate that this endpoint
            //# will accept any DATAGRAM frame that fits inside a QUIC packet.
            max_datagram_frame_size: Some(65535),
            datagram_receive_buffer: 1024 * 1024,
            datagram_send_buffer: 1024 * 1024,
            initial_mtu: 1200,
            max_udp_payload_size: 1472,
            max_mtu: 1452,
            active_connection_id_limit: 4,
            pacing: true,
            ecn: true,
            max_gso_segments: 10,
            key_update_interval: None,
            initial_max_path_id: None,
            congestion_controller: Arc::new(CubicConfig::default()),
            scheduler: Arc::new(MinRttFactory),
            path_manager: Arc::new(ManualFactory),
            persistent_congestion_threshold: 3,
            preferred_address: None,
            use_preferred_address: true,
        }
    }
}

impl TransportConfig {
    /// A fixed connection receive window of `bytes` (no auto-tuning), as a receiver with a
    /// fixed buffer, e.g. [`LINUX_RECEIVE_WINDOW`].
    pub fn set_fixed_receive_window(&mut self, bytes: u64) {
        self.receive_window = bytes;
        self.initial_receive_window = bytes;
    }

    /// A fixed per-stream receive window of `bytes` (no auto-tuning).
    pub fn set_fixed_stream_receive_window(&mut self, bytes: u64) {
        self.stream_receive_window = bytes;
        self.initial_stream_receive_window = bytes;
    }
}

impl fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportConfig")
            .field("max_idle_timeout", &self.max_idle_timeout)
            .field("initial_rtt", &self.initial_rtt)
            .field("receive_window", &self.receive_window)
            .field("stream_receive_window", &self.stream_receive_window)
            .field("initial_receive_window", &self.initial_receive_window)
            .field(
                "initial_stream_receive_window",
                &self.initial_stream_receive_window,
            )
            .field("initial_mtu", &self.initial_mtu)
            .field("max_mtu", &self.max_mtu)
            .field("initial_max_path_id", &self.initial_max_path_id)
            .finish_non_exhaustive()
    }
}

/// Settings of an endpoint (one UDP port's worth of connections).
#[derive(Clone)]
pub struct EndpointConfig {
    /// Length of the connection IDs this endpoint issues (1 to 20; routing needs it fixed).
    pub local_cid_len: usize,
    /// Secret from which stateless reset tokens are derived; endpoints that should recognise
    /// each other's resets after a restart must keep it.
    pub reset_key: [u8; 32],
    /// Seed of the endpoint's random number generator (connection IDs, path challenges,
    /// packet-number skips). Fixed seeds make simulated runs reproducible.
    pub rng_seed: u64,
    /// Where to write qlog files, if anywhere.
    pub qlog: Option<Arc<dyn QlogFactory>>,
    /// Largest UDP payload this endpoint accepts.
    pub max_udp_payload_size: u16,
    /// Cap on the connection receive windows of all this endpoint's connections together
    /// (see [`crate::streams::ReceiveBudget`]); `None`: no cap beyond each connection's
    /// own maximum.
    pub receive_budget: Option<u64>,
    /// How the connections protect their Handshake and 1-RTT packets: the AEAD (the
    /// default), or for a simulator only the stand-in that keeps the wire format without
    /// the cryptography ([`PacketProtection::Simulated`]).
    pub packet_protection: PacketProtection,
}

impl EndpointConfig {
    /// A configuration with secrets and seed drawn from `seed` (deterministic).
    pub fn from_seed(seed: u64) -> Self {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
        let mut reset_key = [0; 32];
        rng.fill_bytes(&mut reset_key);
        EndpointConfig {
            local_cid_len: 8,
            reset_key,
            rng_seed: rng.next_u64(),
            qlog: None,
            max_udp_payload_size: 1472,
            receive_budget: Some(DEFAULT_RECEIVE_BUDGET),
            packet_protection: PacketProtection::Aead,
        }
    }

    /// A configuration with secrets from the operating system's random source.
    pub fn random() -> Self {
        Self::from_seed(rand::random())
    }
}

impl fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("local_cid_len", &self.local_cid_len)
            .field("qlog", &self.qlog.is_some())
            .field("receive_budget", &self.receive_budget)
            .field("packet_protection", &self.packet_protection)
            .finish_non_exhaustive()
    }
}

/// What a server needs to accept connections.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Transport settings of accepted connections.
    pub transport: Arc<TransportConfig>,
    /// TLS settings (certificate, ALPN), see [`crate::crypto`] for helpers.
    pub tls: Arc<rustls::ServerConfig>,
    /// Answer new connections with a Retry to validate the client address first
    /// (RFC 9000 section 8.1.2).
    pub retry: bool,
    /// Most connections in the handshake at once; further Initials are refused.
    pub max_incoming: usize,
    /// Automatic address validation under load: when `retry` is off, answer new
    /// connections with a Retry while at least this many connections are in their
    /// handshake (`None`: never). Initials carrying a valid Retry token are accepted
    /// whatever the load.
    pub retry_above: Option<usize>,
    /// The QUIC versions accepted, most preferred first (a subset of
    /// [`crate::SUPPORTED_VERSIONS`]). Initials of other versions are answered
    /// with Version Negotiation. A client Initial whose version_information offers a
    /// compatible version the server prefers is answered in that version (compatible
    /// version negotiation, RFC 9368). With more than version 1 listed, the server sends
    /// version_information. Default: version 1 only.
    pub versions: Vec<u32>,
}

impl ServerConfig {
    /// A server configuration with default transport settings.
    pub fn new(tls: Arc<rustls::ServerConfig>) -> Self {
        ServerConfig {
            transport: Arc::new(TransportConfig::default()),
            tls,
            retry: false,
            max_incoming: 1 << 16,
            retry_above: None,
            versions: vec![crate::packet::VERSION_1],
        }
    }
}

/// What a client needs to open a connection.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Transport settings.
    pub transport: Arc<TransportConfig>,
    /// TLS settings (trust roots, ALPN), see [`crate::crypto`] for helpers.
    pub tls: Arc<rustls::ClientConfig>,
    /// QUIC version of the first Initial (the chosen version of RFC 9368).
    pub version: u32,
    /// Every version the client speaks, most preferred first, sent in the
    /// version_information transport parameter; the server may switch the connection to
    /// one of them that is compatible with `version` (RFC 9368). Empty: `version` only,
    /// and a version 1 client then sends no version_information (as a v1-only endpoint).
    pub available_versions: Vec<u32>,
}

impl ClientConfig {
    /// A client configuration with default transport settings.
    pub fn new(tls: Arc<rustls::ClientConfig>) -> Self {
        ClientConfig {
            transport: Arc::new(TransportConfig::default()),
            tls,
            version: crate::packet::VERSION_1,
            available_versions: Vec::new(),
        }
    }
}
