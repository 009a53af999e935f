//! Per-path state — addresses, validation, the path's 1-RTT packet-number space, RTT
//! estimation, congestion control, pacing, statistics — and the path lifecycle: opening,
//! validating, changing status, abandoning and discarding paths.
//!
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.3
//# With the multipath extension, multiple paths can be used simultaneously,
//# therefore separate congestion control state is maintained for each path.

use super::loss::Requeue;
use super::path_manager::Origin;
use super::spaces::{PacketSpace, SentFrames};
use super::*;
use crate::cc::CongestionController;
use crate::ecn::EcnValidation;
use crate::recovery::{DeliveryRateEstimator, Pacer, PacerConfig, RttEstimator, SpaceKind};

/// Statistics of one path, reported in summaries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PathStats {
    /// Packets sent.
    pub packets_sent: u64,
    /// Of them, ack-eliciting packets.
    pub ack_eliciting_sent: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Packets received.
    pub packets_received: u64,
    /// UDP payload bytes sent.
    pub udp_bytes_sent: u64,
    /// UDP payload bytes received.
    pub udp_bytes_received: u64,
    /// Stream and datagram payload bytes sent (including retransmissions).
    pub payload_bytes_sent: u64,
    /// Stream and datagram payload bytes acknowledged.
    pub payload_bytes_acked: u64,
    /// Congestion events (recovery periods entered).
    pub congestion_events: u64,
}

/// Outstanding path validation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Challenge {
    pub token: [u8; 8],
    /// When the current challenge was sent; `None` while one is owed.
    pub sent_at: Option<Instant>,
    /// When validation gives up.
    pub give_up_at: Instant,
}

/// Probing of another 4-tuple of a path, whose packets carry probing frames only (RFC
/// 9000 section 9.1) while the path's other packets keep to its own addresses: the client
/// validating the server's preferred address (section 9.6.1), the server answering it there
/// and validating the client from there before it sends anything else from it (section
/// 9.6.2), and PATH_RESPONSEs owed to a PATH_CHALLENGE that came on another 4-tuple.
//= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.2
//# A PATH_RESPONSE frame MUST be sent on the network path where the PATH_CHALLENGE
//# frame was received.
#[derive(Debug, Clone)]
pub(crate) struct OffPathProbe {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Our challenge on this 4-tuple, while validating it.
    pub challenge: Option<Challenge>,
    /// PATH_RESPONSE payloads owed on this 4-tuple.
    pub responses: VecDeque<[u8; 8]>,
    /// Challenges sent so far (each retry waits twice as long as the one before).
    pub attempts: u32,
    /// A PATH_RESPONSE to our challenge arrived.
    pub validated: bool,
    /// Server: a non-probing packet arrived on this 4-tuple (at the preferred address).
    pub non_probing_seen: bool,
    /// Bytes received on and sent to this 4-tuple (the server's anti-amplification
    /// limit toward an address it has not validated).
    pub received: u64,
    pub sent: u64,
}

impl OffPathProbe {
    pub fn new(local: SocketAddr, remote: SocketAddr) -> Self {
        OffPathProbe {
            local,
            remote,
            challenge: None,
            responses: VecDeque::new(),
            attempts: 0,
            validated: false,
            non_probing_seen: false,
            received: 0,
            sent: 0,
        }
    }

    /// Something to send: a response owed or a challenge not sent yet.
    pub fn has_frames(&self) -> bool {
        !self.responses.is_empty() || self.challenge.is_some_and(|c| c.sent_at.is_none())
    }
}

/// State of path MTU discovery (a single probe up to the configured maximum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MtuDiscovery {
    /// Nothing to probe (at the maximum already, or discovery disabled).
    Done,
    /// A probe of this size should be sent.
    Pending { size: u16, attempts: u8 },
    /// A probe of this size is in flight.
    InFlight { size: u16, attempts: u8 },
}

/// Probes of one size before path MTU discovery gives up.
const MTU_PROBE_ATTEMPTS: u8 = 3;

/// Weight of a new sample in the loss-rate average (about the last 100 packets).
const LOSS_RATE_GAIN: f64 = 0.01;

/// Everything a connection knows about one path.
pub(crate) struct Path {
    pub id: PathId,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: PathState,
    pub local_status: PathStatus,
    /// Sequence number of the last PATH_STATUS_* frame we sent (or are about to send).
    pub local_status_sequence: u64,
    pub status_frame_pending: bool,
    pub peer_status: Option<PathStatus>,
    pub peer_status_sequence: Option<u64>,
    /// The path's 1-RTT packet-number space (for path 0 the Application Data space).
    pub space: PacketSpace,
    pub rtt: RttEstimator,
    pub cc: Box<dyn CongestionController>,
    pub pacer: Pacer,
    pub delivery: DeliveryRateEstimator,
    pub mtu: u16,
    pub mtu_discovery: MtuDiscovery,
    /// Consecutive PTO expirations (RFC 9002 pto_count).
    pub pto_count: u32,
    /// Bytes counted in flight on this path, all spaces together.
    pub bytes_in_flight: u64,
    /// Our challenge, while validating.
    pub challenge: Option<Challenge>,
    /// PATH_RESPONSE payloads owed to the peer on this path.
    pub responses: VecDeque<[u8; 8]>,
    /// Probing of another 4-tuple of this path (the server's preferred address).
    pub off_path: Option<OffPathProbe>,
    /// True once the peer's address is validated (anti-amplification lifted).
    pub address_validated: bool,
    /// While the peer's new address is validated after it moved (server side): the
    /// path's (local, remote) addresses when they were last validated, to go back to if
    /// the validation fails.
    pub last_validated: Option<(SocketAddr, SocketAddr)>,
    /// Bytes received on the path before its address was validated.
    pub unvalidated_received: u64,
    /// Bytes sent on the path before its address was validated.
    pub unvalidated_sent: u64,
    /// PATH_ABANDON frame owed to the peer, with its error code.
    pub abandon_pending: Option<u64>,
    /// When the path's state is dropped after abandonment.
    pub discard_at: Option<Instant>,
    /// The path's ID was given back to the peer (the maximum path ID raised by one).
    pub path_id_returned: bool,
    /// For a path abandoned while it still worked: when the data still unacknowledged on
    /// it goes back to the send queues (see [`InFlightOnAbandon::Drain`]).
    pub drain_until: Option<Instant>,
    /// Last time an ack-eliciting packet was sent on the path.
    pub last_ack_eliciting_sent: Option<Instant>,
    /// Exponentially weighted fraction of packets lost.
    pub loss_rate: f64,
    /// Latest delivery-rate estimate in bytes per second.
    pub delivery_rate: Option<u64>,
    /// Latest link-layer throughput prediction in bit/s.
    pub predicted_throughput: Option<u64>,
    /// Latest link hints of the interface the path sends from.
    pub link: LinkHints,
    /// The path is back from an outage (its interface reported the link back,
    /// [`LinkHints::link_lost`] cleared, or the peer's packets resumed after a silence) and
    /// no acknowledgment arrived on it since: a PING is out to confirm the path works.
    pub link_probe_pending: bool,
    /// When an acknowledgment of a packet of this path last arrived.
    pub last_ack_received: Option<Instant>,
    /// When a packet last arrived on this path.
    pub last_received: Option<Instant>,
    /// When the pacer next allows a packet, as of the last check.
    pub pacing_release: Option<Instant>,
    /// Stream data the scheduler gave this path that waits for its pacer (the subflow send
    /// queue of MPTCP); it leaves on this path before any other data. See the contract in
    /// [`crate::sched`].
    pub queue: std::collections::VecDeque<crate::streams::StreamChunk>,
    /// Copies of datagrams a [`crate::sched::Decision::Duplicate`] gave this path: they
    /// leave on it, before any other data, when its window and pacer allow, and are dropped
    /// if it stops taking data (datagrams are never retransmitted).
    pub datagram_queue: std::collections::VecDeque<bytes::Bytes>,
    /// Bytes of the copies in [`Self::datagram_queue`].
    pub datagram_queue_bytes: usize,
    /// The QoS class of the data last queued on the path; the packets that carry the queued
    /// data are filled up with data of that class only.
    pub queue_class: Option<crate::sched::QosClass>,
    /// Bytes of stream data in [`Self::queue`] and of datagrams in
    /// [`Self::datagram_queue`].
    pub queued_bytes: u64,
    pub stats: PathStats,
    /// ECN validation of what this endpoint sends on the path.
    pub ecn: EcnValidation,
}

impl std::fmt::Debug for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Path")
            .field("id", &self.id)
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Path {
    /// Starts the path's congestion state afresh for a new network path: the congestion
    /// controller `cc`, an RTT estimator at `initial_rtt`, and ECN validated again (the new
    /// path may not support the old rate, delay or marking).
    pub(crate) fn restart_on_new_network_path(
        &mut self,
        cc: Box<dyn CongestionController>,
        initial_rtt: Duration,
    ) {
        self.cc = cc;
        self.rtt = RttEstimator::new(initial_rtt);
        self.ecn.revalidate();
    }

    /// The probe of the other 4-tuple (`local`, `remote`), started if there is none with
    /// the `received` bytes that came on it counted; a probe of yet another 4-tuple is
    /// dropped (one is kept at a time). The bool is true if the probe is new.
    pub(crate) fn off_path_probe(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        received: u64,
    ) -> (&mut OffPathProbe, bool) {
        let fresh = self
            .off_path
            .as_ref()
            .is_none_or(|p| (p.local, p.remote) != (local, remote));
        if fresh {
            self.off_path = None;
        }
        let probe = self.off_path.get_or_insert_with(|| {
            let mut probe = OffPathProbe::new(local, remote);
            probe.received = received;
            probe
        });
        (probe, fresh)
    }

    pub fn new(
        id: PathId,
        local: SocketAddr,
        remote: SocketAddr,
        config: &TransportConfig,
        cc: Box<dyn CongestionController>,
        validated: bool,
    ) -> Self {
        Path {
            id,
            local,
            remote,
            state: if validated {
                PathState::Validated
            } else {
                PathState::Validating
            },
            local_status: PathStatus::Available,
            local_status_sequence: 0,
            status_frame_pending: false,
            peer_status: None,
            peer_status_sequence: None,
            space: PacketSpace::new(SpaceKind::ApplicationData),
            rtt: RttEstimator::new(config.initial_rtt),
            cc,
            pacer: Pacer::new(PacerConfig::default()),
            delivery: DeliveryRateEstimator::new(),
            mtu: config.initial_mtu,
            mtu_discovery: MtuDiscovery::Done,
            pto_count: 0,
            bytes_in_flight: 0,
            challenge: None,
            responses: VecDeque::new(),
            off_path: None,
            address_validated: validated,
            last_validated: None,
            unvalidated_received: 0,
            unvalidated_sent: 0,
            abandon_pending: None,
            discard_at: None,
            path_id_returned: false,
            drain_until: None,
            last_ack_eliciting_sent: None,
            loss_rate: 0.0,
            delivery_rate: None,
            predicted_throughput: None,
            link: LinkHints::default(),
            link_probe_pending: false,
            last_ack_received: None,
            last_received: None,
            pacing_release: None,
            queue: Default::default(),
            datagram_queue: Default::default(),
            datagram_queue_bytes: 0,
            queue_class: None,
            queued_bytes: 0,
            stats: PathStats::default(),
            ecn: EcnValidation::new(config.ecn),
        }
    }

    /// Bytes that may still be sent before the anti-amplification limit.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-8
    //# Prior to validating the client address, servers MUST NOT send more
    //# than three times as many bytes as the number of bytes they have
    //# received.
    pub fn amplification_budget(&self) -> u64 {
        if self.address_validated {
            u64::MAX
        } else {
            (3 * self.unvalidated_received).saturating_sub(self.unvalidated_sent)
        }
    }

    /// Records a datagram sent on the path.
    pub fn on_datagram_sent(&mut self, bytes: u64) {
        if !self.address_validated {
            self.unvalidated_sent += bytes;
        }
        self.stats.udp_bytes_sent += bytes;
    }

    /// Records a datagram received on the path.
    pub fn on_datagram_received(&mut self, bytes: u64) {
        if !self.address_validated {
            self.unvalidated_received += bytes;
        }
        self.stats.udp_bytes_received += bytes;
        self.stats.packets_received += 1;
    }

    /// Folds acknowledged and lost packets into the loss-rate average.
    pub fn record_loss_samples(&mut self, delivered: u64, lost: u64) {
        let keep = 1.0 - LOSS_RATE_GAIN;
        self.loss_rate *= keep.powi(i32::try_from(delivered.min(10_000)).unwrap_or(10_000));
        for _ in 0..lost.min(256) {
            self.loss_rate = self.loss_rate * keep + LOSS_RATE_GAIN;
        }
    }

    /// The path may carry new application data.
    pub fn is_usable(&self) -> bool {
        self.state == PathState::Validated && self.abandon_pending.is_none()
    }

    /// See [`PathSnapshot::link_unavailable`].
    pub fn link_unavailable(&self) -> bool {
        self.link.link_lost || self.link_probe_pending
    }

    /// True if the congestion window has room for a full-sized packet (pacing aside).
    pub fn window_has_room(&self) -> bool {
        self.bytes_in_flight + u64::from(self.mtu) <= self.cc.window()
    }

    /// False if [`Connection`](super::Connection)'s probing (off-path PATH_CHALLENGE and
    /// PATH_RESPONSE frames, path validation, PTO probes, PMTU probes) has nothing to send
    /// on this path; true if it may.
    pub(super) fn may_probe(&self) -> bool {
        self.off_path.as_ref().is_some_and(OffPathProbe::has_frames)
            || !self.responses.is_empty()
            || self.challenge.is_some_and(|c| c.sent_at.is_none())
            || self.space.probes_owed > 0
            || matches!(self.mtu_discovery, MtuDiscovery::Pending { .. })
    }

    /// True if the path owes a packet of its own even without data: an acknowledgment due,
    /// a PING or a PATH_ABANDON.
    pub(super) fn owes_leftovers(&self, now: Instant) -> bool {
        self.space.acks.ack_due(now) || self.space.ping_pending || self.abandon_pending.is_some()
    }

    /// True if stream data or datagram copies wait in the path's own queues.
    pub fn has_queued_data(&self) -> bool {
        !self.queue.is_empty() || !self.datagram_queue.is_empty()
    }

    /// True if the scheduler may give this path one more packet: its window has room for
    /// it beside the data already [queued](Self::queue) on it.
    pub fn can_take_packet(&self) -> bool {
        self.bytes_in_flight + self.queued_bytes + u64::from(self.mtu) <= self.cc.window()
    }

    /// True if congestion control and pacing let a full-sized packet leave now; updates
    /// the cached pacing release time.
    pub fn can_send_data(&mut self, now: Instant, pacing: bool) -> bool {
        let mtu = u64::from(self.mtu);
        if !self.window_has_room() {
            self.pacing_release = None;
            return false;
        }
        if !pacing {
            return true;
        }
        let release = self.pacer.delay_until(
            now,
            mtu,
            self.mtu,
            self.cc.window(),
            self.rtt.smoothed(),
            self.cc.pacing_rate(),
            self.cc.send_quantum(),
        );
        self.pacing_release = release;
        release.is_none()
    }

    /// Plans path MTU discovery up to `target` bytes.
    pub fn plan_mtu_discovery(&mut self, target: u16) {
        if target > self.mtu {
            self.mtu_discovery = MtuDiscovery::Pending {
                size: target,
                attempts: 0,
            };
        }
    }

    pub fn on_mtu_probe_acked(&mut self, size: u16) {
        if size > self.mtu {
            self.mtu = size;
            self.cc.on_mtu_update(size);
        }
        self.mtu_discovery = MtuDiscovery::Done;
    }

    pub fn on_mtu_probe_lost(&mut self) {
        self.mtu_discovery = match self.mtu_discovery {
            MtuDiscovery::InFlight { size, attempts } if attempts < MTU_PROBE_ATTEMPTS => {
                MtuDiscovery::Pending { size, attempts }
            }
            _ => MtuDiscovery::Done,
        };
    }

    /// Builds the read-only view handed to schedulers.
    pub fn snapshot(&self, can_send: bool) -> PathSnapshot {
        PathSnapshot {
            id: self.id,
            local: self.local,
            remote: self.remote,
            state: self.state,
            local_status: self.local_status,
            peer_status: self.peer_status,
            srtt: self.rtt.smoothed(),
            rttvar: self.rtt.rttvar(),
            min_rtt: self.rtt.min(),
            latest_rtt: self.rtt.latest(),
            has_rtt_sample: self.rtt.has_sample(),
            cwnd: self.cc.window(),
            bytes_in_flight: self.bytes_in_flight,
            mtu: self.mtu,
            loss_rate: self.loss_rate,
            delivery_rate: self.delivery_rate,
            can_send,
            pacing_release: self.pacing_release,
            queued_bytes: self.queued_bytes,
            packets_sent: self.stats.packets_sent,
            packets_lost: self.stats.packets_lost,
            bytes_sent: self.stats.payload_bytes_sent,
            predicted_throughput: self.predicted_throughput,
            pto_count: self.pto_count,
            awaiting_ack_since: self.awaiting_ack_since(),
            link: self.link,
            link_unavailable: self.link_unavailable(),
        }
    }

    /// See [`PathSnapshot::awaiting_ack_since`].
    fn awaiting_ack_since(&self) -> Option<Instant> {
        let recovery = &self.space.recovery;
        if !recovery.has_ack_eliciting_in_flight() {
            return None;
        }
        let oldest = recovery
            .outstanding()
            .find(|(_, p)| p.ack_eliciting && p.in_flight)
            .map(|(_, p)| p.time_sent);
        match (oldest, self.last_ack_received) {
            (Some(sent), Some(acked)) => Some(sent.max(acked)),
            (sent, acked) => sent.or(acked),
        }
    }
}

/// What happens to the data in flight on a path when it is abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InFlightOnAbandon {
    /// It goes back to the send queues at once for the other paths to carry (the path
    /// failed, or nothing is known about it).
    Retransmit,
    /// The path still works (a make-before-break handover source): its in-flight packets
    /// are left to be acknowledged (PATH_ACKs ride on the other paths) or declared lost by
    /// acknowledgments of later packets, and only what is still unacknowledged one PTO of
    /// the path later is retransmitted elsewhere. Retransmitting at once would spend the
    /// new path's window on duplicates of packets about to arrive.
    Drain,
}

/// Why a path could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenPathError {
    /// Multipath QUIC was not negotiated (or the handshake is not confirmed yet).
    #[error("multipath is not negotiated (or the handshake is not confirmed yet)")]
    MultipathNotNegotiated,
    /// Only clients open paths (draft-ietf-quic-multipath-21 section 3).
    #[error("only the client opens paths")]
    NotClient,
    /// No path ID below both sides' limits is free and has connection IDs on both sides.
    #[error("no usable path ID: limits reached or the peer has not issued connection IDs")]
    NoPathId,
    /// The connection is closing.
    #[error("the connection is closed")]
    Closed,
}

/// Why [`Connection::migrate`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MigrateError {
    /// Only clients migrate (RFC 9000 section 9).
    #[error("only the client migrates")]
    NotClient,
    /// The handshake is not confirmed yet.
    #[error("the handshake is not confirmed yet")]
    HandshakeNotConfirmed,
    /// The peer sent disable_active_migration.
    #[error("the peer disabled active migration (disable_active_migration)")]
    PeerDisabledMigration,
    /// No such path, or it is abandoned.
    #[error("no such path")]
    UnknownPath,
    /// The path already leaves from that address.
    #[error("the path already uses that local address")]
    SameAddress,
    /// The peer has issued no spare connection ID for the path.
    #[error("no spare connection ID from the peer for the new address")]
    NoConnectionId,
    /// The connection is closing.
    #[error("the connection is closed")]
    Closed,
}

impl Connection {
    /// Moves a path to a new local address (an active migration, RFC 9000 section 9.2):
    /// from now on the path's packets leave from `local`, with a new connection ID, a fresh
    /// congestion controller and RTT estimate, ECN validated again, and a PATH_CHALLENGE to
    /// check that the peer is reachable from there. The peer follows when it sees the
    /// non-probing packets from the new address. Client only, once the handshake is
    /// confirmed; the I/O layer must be able to send from `local`.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-9.2
    //# An endpoint can migrate a connection to a new local address by sending packets
    //# containing non-probing frames from that address.
    pub fn migrate(
        &mut self,
        now: Instant,
        id: PathId,
        local: SocketAddr,
    ) -> Result<(), MigrateError> {
        if self.is_closed() {
            return Err(MigrateError::Closed);
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9
        //# Clients are responsible for initiating all
        //# migrations.
        if !self.side.is_client() {
            return Err(MigrateError::NotClient);
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9
        //# An endpoint MUST NOT initiate connection migration
        //# before the handshake is confirmed, as defined in {{Section 4.1.2 of QUIC-TLS}}.
        if !self.handshake_confirmed {
            return Err(MigrateError::HandshakeNotConfirmed);
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9
        //# If the peer sent the disable_active_migration transport parameter, an endpoint
        //# also MUST NOT send packets (including probing packets; see {{probing}}) from a
        //# different local address to the address the peer used during the handshake,
        if self
            .peer_params
            .as_ref()
            .is_some_and(|p| p.disable_active_migration)
        {
            return Err(MigrateError::PeerDisabledMigration);
        }
        let Some(path) = self.paths.get(&id) else {
            return Err(MigrateError::UnknownPath);
        };
        if path.state == PathState::Abandoned {
            return Err(MigrateError::UnknownPath);
        }
        if path.local == local {
            return Err(MigrateError::SameAddress);
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.5
        //# An endpoint MUST NOT reuse a connection ID when sending from more than one local
        //# address -- for example, when initiating connection migration as described in
        //# {{initiating-migration}} or when probing a new network path as described in
        //# {{probing}}.
        if !self.peer_cids.has_spare(id) {
            return Err(MigrateError::NoConnectionId);
        }
        self.rotate_peer_cid(id);
        let cc = self.cc_factory.build(now, id, self.config.initial_mtu);
        let token = self.random_token();
        let off_path_token = self.random_token();
        let timeout = self.path_validation_timeout();
        let initial_rtt = self.config.initial_rtt;
        let Some(path) = self.paths.get_mut(&id) else {
            return Err(MigrateError::UnknownPath);
        };
        let from = path.local;
        path.local = local;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.2
        //# When migrating, the new path might not support the endpoint's current sending
        //# rate. Therefore, the endpoint resets its congestion controller and RTT estimate,
        //# as described in {{migration-cc}}.
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.2
        //# The new path might not have the same ECN capability. Therefore, the endpoint
        //# validates ECN capability as described in {{ecn}}.
        path.restart_on_new_network_path(cc, initial_rtt);
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.2
        //# To establish reachability on the new path, an endpoint initiates path
        //# validation ({{migrate-validate}}) on the new path.
        path.challenge = Some(Challenge {
            token,
            sent_at: None,
            give_up_at: now + timeout,
        });
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.3
        //# A client might need to perform a connection migration before it has
        //# migrated to the server's preferred address.  In this case, the client
        //# SHOULD perform path validation to both the original and preferred
        //# server address from the client's new address concurrently.
        if let Some(probe) = path.off_path.as_mut().filter(|p| p.challenge.is_some()) {
            probe.local = local;
            probe.attempts = 0;
            probe.challenge = Some(Challenge {
                token: off_path_token,
                sent_at: None,
                give_up_at: now + timeout,
            });
        }
        self.stats.migrations += 1;
        self.qlog_event(
            now,
            "migration_state_updated",
            json!({"new": "started", "path_id": id.0, "old_local": from.to_string(), "local": local.to_string()}),
        );
        Ok(())
    }

    /// Client, once the handshake is confirmed: starts validating the server's preferred
    /// address of the family path 0 uses, from path 0's local address, with the connection
    /// ID the server gave with it (the path's next spare one), unless
    /// [`TransportConfig::use_preferred_address`] is off. With multipath this is a
    /// migration of path 0 too.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.1
    //# Once the handshake is confirmed, the client SHOULD select one of the two
    //# addresses provided by the server and initiate path validation (see
    //# {{migrate-validate}}).  A client constructs packets using any previously unused
    //# active connection ID, taken from either the preferred_address transport
    //# parameter or a NEW_CONNECTION_ID frame.
    //
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.2
    //# Use of the preferred address with the same local address is considered as a migration event
    //# that does not change the path ID.
    pub(super) fn probe_preferred_address(&mut self, now: Instant) {
        if !self.side.is_client() || !self.config.use_preferred_address {
            return;
        }
        let Some(pa) = self.peer_params.as_ref().and_then(|p| p.preferred_address) else {
            return;
        };
        if self.peer_cids.next_spare(PathId::ZERO).is_none() {
            return;
        }
        let token = self.random_token();
        let give_up_at = now + self.path_validation_timeout();
        let Some(path) = self.paths.get_mut(&PathId::ZERO) else {
            return;
        };
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.3
        //# A client that migrates to a new address SHOULD use a preferred address from the
        //# same address family for the server.
        let remote = match path.remote {
            SocketAddr::V4(_) => pa.ipv4.map(SocketAddr::V4),
            SocketAddr::V6(_) => pa.ipv6.map(SocketAddr::V6),
        };
        let Some(remote) = remote.filter(|r| *r != path.remote) else {
            return;
        };
        let mut probe = OffPathProbe::new(path.local, remote);
        probe.challenge = Some(Challenge {
            token,
            sent_at: None,
            give_up_at,
        });
        path.off_path = Some(probe);
        self.qlog_event(
            now,
            "migration_state_updated",
            json!({"new": "probing_started", "path_id": 0, "remote": remote.to_string(), "preferred_address": true}),
        );
    }

    /// The 4-tuple a path probed answered our PATH_CHALLENGE.
    pub(super) fn on_off_path_validated(&mut self, now: Instant, id: PathId) {
        let client = self.side.is_client();
        let Some(probe) = self.paths.get_mut(&id).and_then(|p| p.off_path.as_mut()) else {
            return;
        };
        probe.challenge = None;
        probe.validated = true;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.1
        //# As soon as path validation succeeds, the client SHOULD begin sending all
        //# future packets to the new server address using the new connection ID and
        //# discontinue use of the old server address.
        if client || probe.non_probing_seen {
            self.move_to_off_path(now, id);
        }
    }

    /// Validation of the 4-tuple a path probed gave up: the path stays where it is.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.1
    //# If path validation fails, the client
    //# MUST continue sending all future packets to the server's original IP address.
    pub(super) fn on_off_path_failed(&mut self, now: Instant, id: PathId) {
        let Some(probe) = self.paths.get_mut(&id).and_then(|p| p.off_path.take()) else {
            return;
        };
        tracing::debug!(?id, remote = %probe.remote, local = %probe.local, "off-path validation failed");
        self.qlog_event(
            now,
            "migration_state_updated",
            json!({"new": "probing_abandoned", "path_id": id.0, "local": probe.local.to_string(), "remote": probe.remote.to_string()}),
        );
    }

    /// Moves path `id` to the 4-tuple it validated (the server's preferred address): a new
    /// path as far as congestion control, RTT and ECN go, with the connection ID the
    /// probes used.
    pub(super) fn move_to_off_path(&mut self, now: Instant, id: PathId) {
        let cc = self.cc_factory.build(now, id, self.config.initial_mtu);
        let initial_rtt = self.config.initial_rtt;
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        let Some(probe) = path.off_path.take() else {
            return;
        };
        let from = path.remote;
        let old_local = path.local;
        path.local = probe.local;
        path.remote = probe.remote;
        path.address_validated = true;
        path.last_validated = None;
        path.responses.extend(probe.responses);
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.4
        //# On confirming a peer's ownership of its new address, an endpoint MUST
        //# immediately reset the congestion controller and round-trip time
        //# estimator for the new path to initial values (see Appendices A.3 and
        //# B.3 of [QUIC-RECOVERY]) unless the only change in the peer's address
        //# is its port number.
        path.restart_on_new_network_path(cc, initial_rtt);
        self.rotate_peer_cid(id);
        self.stats.preferred_address_migrations += 1;
        self.qlog_event(
            now,
            "migration_state_updated",
            json!({"new": "migration_complete", "path_id": id.0, "old_local": old_local.to_string(), "old_remote": from.to_string(), "local": probe.local.to_string(), "remote": probe.remote.to_string()}),
        );
    }

    /// Opens a new path from `local` to `remote` (Multipath QUIC, client only) and starts
    /// validating it. Returns the path ID.
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
    //# To open a new path, an endpoint MUST use a new connection ID associated
    //# with an unused path ID.
    pub fn open_path(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        status: PathStatus,
    ) -> Result<PathId, OpenPathError> {
        self.open_path_for(now, local, remote, status, Origin::Application)
    }

    pub(super) fn open_path_for(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        status: PathStatus,
        origin: Origin<'_>,
    ) -> Result<PathId, OpenPathError> {
        if self.is_closed() {
            return Err(OpenPathError::Closed);
        }
        if self.side.is_server() {
            return Err(OpenPathError::NotClient);
        }
        let Some(mp) = self.multipath.filter(|_| self.handshake_confirmed) else {
            return Err(OpenPathError::MultipathNotNegotiated);
        };
        let limit = mp.peer_max_path_id.min(mp.local_max_path_id);
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2.1
        //# Similarly, endpoints SHOULD consume path IDs in a continuous way, i.e., when
        //# creating paths.
        let candidate = (1..=limit).map(PathId).find(|id| {
            !self.paths.contains_key(id)
                && !self.retired_paths.contains(id)
                && self.peer_cids.has_spare(*id)
                && self.local_cids.active_count(*id) > 0
        });
        let Some(id) = candidate else {
            if (1..=limit).all(|i| {
                self.paths.contains_key(&PathId(i)) || self.retired_paths.contains(&PathId(i))
            }) {
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2.1
                //# When an endpoint cannot open a path because there are no unused path IDs,
                //# it SHOULD either send a MAX_PATH_ID frame to increase the maximum path ID limit
                //# (when limited by the sender) or a PATHS_BLOCKED frame
                self.pending.paths_blocked = true;
            }
            return Err(OpenPathError::NoPathId);
        };
        self.peer_cids.activate(id);
        let cc = self.cc_factory.build(now, id, self.config.initial_mtu);
        let mut path = Path::new(id, local, remote, &self.config, cc, false);
        // The client trusts the server's address (it chose it); validation is still needed
        // to know the path works in both directions.
        path.address_validated = true;
        path.challenge = Some(Challenge {
            token: self.random_token(),
            sent_at: None,
            give_up_at: now + self.path_validation_timeout(),
        });
        if status == PathStatus::Backup {
            path.local_status = PathStatus::Backup;
            path.status_frame_pending = true;
        }
        if let Some(peer) = self.peer_params.as_ref() {
            let target = self
                .config
                .max_mtu
                .min(u16::try_from(peer.max_udp_payload_size).unwrap_or(u16::MAX));
            path.plan_mtu_discovery(target);
        }
        self.inherit_link_hints(&mut path);
        self.paths.insert(path);
        let mut data = json!({"path_id": id.0, "local": local.to_string(), "remote": remote.to_string(), "initiator": "local"});
        self.add_origin(&mut data, origin);
        self.qlog_event(now, "path_assigned", data);
        self.qlog_tuple_assigned(now, id, local, remote);
        self.path_event(now, PathEvent::Opened(id), true);
        Ok(id)
    }

    /// Abandons a path (PATH_ABANDON), for example because its interface went away.
    pub fn abandon_path(&mut self, now: Instant, id: PathId, code: TransportErrorCode) -> bool {
        if self.multipath.is_none() || !self.paths.contains_key(&id) {
            return false;
        }
        self.abandon_path_internal(
            now,
            id,
            code.0,
            Origin::Application,
            InFlightOnAbandon::Retransmit,
        );
        true
    }

    /// Changes our status for a path and tells the peer (PATH_STATUS_AVAILABLE / _BACKUP).
    pub fn set_path_status(&mut self, now: Instant, id: PathId, status: PathStatus) -> bool {
        self.set_path_status_for(now, id, status, Origin::Application)
    }

    pub(super) fn set_path_status_for(
        &mut self,
        now: Instant,
        id: PathId,
        status: PathStatus,
        origin: Origin<'_>,
    ) -> bool {
        if self.multipath.is_none() {
            return false;
        }
        let Some(path) = self.paths.get_mut(&id) else {
            return false;
        };
        if path.local_status == status && path.local_status_sequence > 0 {
            return true;
        }
        path.local_status = status;
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.3
        //# The sequence number space is common to the two frame types,
        //# and monotonically increasing values MUST be used when sending PATH_STATUS_AVAILABLE or
        //# PATH_STATUS_BACKUP frames for a given path ID.
        path.local_status_sequence += 1;
        path.status_frame_pending = true;
        let event = PathEvent::StatusChanged {
            path: id,
            local: status,
            peer: path.peer_status,
        };
        let mut data = json!({
            "path_id": id.0,
            "status": match status {
                PathStatus::Available => "available",
                PathStatus::Backup => "backup",
            },
        });
        self.add_origin(&mut data, origin);
        self.qlog_polypath_event(now, "path_status_updated", data);
        self.path_event(now, event, true);
        true
    }

    /// Records a link-layer throughput prediction for a path (bits per second), which
    /// schedulers see in [`PathSnapshot::predicted_throughput`].
    pub fn set_predicted_throughput(
        &mut self,
        now: Instant,
        id: PathId,
        bits_per_second: Option<u64>,
    ) {
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        path.predicted_throughput = bits_per_second;
        if let Some(bps) = bits_per_second {
            let event = PathEvent::PredictedThroughput {
                path: id,
                bits_per_second: bps,
            };
            self.path_event(now, event, false);
        }
    }

    /// Sets a path's congestion window (for path managers that split a window between an
    /// old and a new path, LAMP5G section V-C).
    pub fn set_path_window(&mut self, id: PathId, bytes: u64) {
        if let Some(path) = self.paths.get_mut(&id) {
            path.cc.set_window(bytes);
        }
    }

    pub(super) fn random_token(&mut self) -> [u8; 8] {
        use rand::Rng;
        self.rng.random()
    }

    /// Validation gives up after three PTOs (at least six initial RTTs).
    //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.4
    //# Endpoints SHOULD abandon path validation based on a timer.  When
    //# setting this timer, implementations are cautioned that the new path
    //# could have a longer round-trip time than the original.  A value of
    //# three times the larger of the current PTO or the PTO for the new path
    //# (using kInitialRtt, as defined in [QUIC-RECOVERY]) is RECOMMENDED.
    pub(super) fn path_validation_timeout(&self) -> Duration {
        let new_path = RttEstimator::new(self.config.initial_rtt).pto_base();
        3 * self.largest_pto().max(new_path)
    }

    pub(super) fn on_path_validated(&mut self, now: Instant, id: PathId) {
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        path.challenge = None;
        path.address_validated = true;
        path.last_validated = None;
        if path.state != PathState::Validating {
            // A path that was in use: the peer's new address (see `maybe_migrate`), or ours
            // (see `migrate`).
            if self.side.is_client() {
                self.stats.migrations_validated += 1;
            } else {
                self.stats.peer_addresses_validated += 1;
            }
            self.qlog_event(
                now,
                "migration_state_updated",
                json!({"new": "probing_successful", "path_id": id.0}),
            );
            return;
        }
        path.state = PathState::Validated;
        self.qlog_event(now, "path_validated", json!({"path_id": id.0}));
        self.path_event(now, PathEvent::Validated(id), true);
    }

    pub(super) fn on_path_validation_failed(&mut self, now: Instant, id: PathId) {
        tracing::debug!(?id, "path validation failed");
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        path.challenge = None;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.3.2
        //# To protect the connection from failing due to such a spurious migration, an
        //# endpoint MUST revert to using the last validated peer address when validation
        //# of a new peer address fails.
        if let Some((local, remote)) = path.last_validated.take() {
            let to = path.remote;
            path.local = local;
            path.remote = remote;
            path.address_validated = true;
            self.stats.peer_address_reverts += 1;
            self.rotate_peer_cid(id);
            self.qlog_event(
                now,
                "migration_state_updated",
                json!({"new": "probing_abandoned", "path_id": id.0, "remote": to.to_string(), "reverted_to": remote.to_string()}),
            );
            return;
        }
        if self.multipath.is_none() {
            // A failed validation of the only path leaves it as it was: there is nothing
            // else to fall back to.
            return;
        }
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
        //# If validation fails, the client MUST NOT use the path and can
        //# remove any status associated to the path initiation attempt.
        //# As the used path ID is consumed either way,
        //# the endpoint MUST explicitly close the path, as specified in
        //# {{path-close}}.
        self.abandon_path_internal(
            now,
            id,
            TransportErrorCode::PATH_UNSTABLE_OR_POOR.0,
            Origin::Protocol("path_validation_failed"),
            InFlightOnAbandon::Retransmit,
        );
    }

    pub(super) fn abandon_path_internal(
        &mut self,
        now: Instant,
        id: PathId,
        code: u64,
        origin: Origin<'_>,
        in_flight_data: InFlightOnAbandon,
    ) {
        let discard_at = now + 3 * self.largest_pto();
        let max_ack_delay = self.peer_max_ack_delay();
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        if path.state == PathState::Abandoned {
            return;
        }
        path.state = PathState::Abandoned;
        path.challenge = None;
        path.responses.clear();
        path.abandon_pending = Some(code);
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
        //# Therefore, knowledge of the
        //# connection IDs issued to the peer and of the state
        //# of the number space associated to the path SHOULD be retained for
        //# 3 PTO after the PATH_ABANDON frame has been received.
        path.discard_at = Some(discard_at);
        let in_flight: Vec<SentFrames> = match in_flight_data {
            // Data in flight on the path goes back to the queues at once, so the other paths
            // carry it without waiting for loss detection.
            InFlightOnAbandon::Retransmit => path
                .space
                .recovery
                .outstanding()
                .map(|(_, p)| p.payload.clone())
                .collect(),
            InFlightOnAbandon::Drain => {
                path.drain_until =
                    Some(now + crate::recovery::pto_duration(&path.rtt, max_ack_delay, 0));
                Vec::new()
            }
        };
        self.retired_paths.insert(id);
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
        //# Endpoints that send a PATH_ABANDON frame MUST treat all connection
        //# IDs received from the peer for the path ID indicated in the PATH_ABANDON as immediately
        //# retired, and subsequently cannot send any packet on that path anymore.
        for seq in self.peer_cids.retire_path(id) {
            self.queue_retire_cid(id, seq);
        }
        for frames in &in_flight {
            self.requeue_frames(AckSpace::Path(id), frames, Requeue::Probe);
        }
        let mut data = json!({"path_id": id.0, "error_code": code});
        self.add_origin(&mut data, origin);
        self.qlog_event(now, "path_abandoned", data);
        self.path_event(now, PathEvent::Abandoned(id), true);
        if self.paths.values().all(|p| p.state == PathState::Abandoned) {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
            //# If a PATH_ABANDON frame is received for the only open path of a QUIC
            //# connection, the receiving peer SHOULD send a CONNECTION_CLOSE frame
            //# and enter the closing state.
            self.close_on_error(
                now,
                TransportError::new(TransportErrorCode::NO_VIABLE_PATH, "no open path left"),
            );
        }
    }

    /// The end of a drained path's grace period: what is still unacknowledged on it goes
    /// back to the send queues.
    pub(super) fn end_path_drain(&mut self, id: PathId) {
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        path.drain_until = None;
        let in_flight: Vec<SentFrames> = path
            .space
            .recovery
            .outstanding()
            .map(|(_, p)| p.payload.clone())
            .collect();
        for frames in &in_flight {
            self.requeue_frames(AckSpace::Path(id), frames, Requeue::Probe);
        }
    }

    pub(super) fn discard_path(&mut self, now: Instant, id: PathId) {
        self.return_queued_data(id);
        let Some(mut path) = self.paths.remove(&id) else {
            return;
        };
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4.3
        //# When an endpoint finally deletes all state associated with the path,
        //# the packets sent over the path and not yet acknowledged MUST be considered lost.
        for (_, p) in path.space.recovery.discard() {
            self.requeue_frames(AckSpace::Path(id), &p.payload, Requeue::Lost);
        }
        for issued in self.local_cids.remove_path(id) {
            self.endpoint_events
                .push_back(EndpointEvent::RetiredLocalCid(issued.cid));
        }
        self.qlog_event(now, "path_discarded", json!({"path_id": id.0}));
        if !path.path_id_returned {
            self.raise_max_path_id();
        }
    }

    /// Gives the ID of path `id` back to the peer once both sides have abandoned it (we
    /// received the peer's PATH_ABANDON, and ours is sent or queued): neither side uses the
    /// ID again, so the peer may open one more path. Waiting for the path's state to be
    /// dropped (three PTOs later, and an unsampled path's PTO is about a second) would keep
    /// a peer that wants a new path waiting for nothing. Done once per path; a path that
    /// the peer never abandons gives its ID back when discarded.
    pub(super) fn return_path_id(&mut self, id: PathId) {
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        if path.state != PathState::Abandoned || path.path_id_returned {
            return;
        }
        path.path_id_returned = true;
        self.raise_max_path_id();
    }

    /// A path ID is used up for good; allow the peer one more, so that as many paths as
    /// initially agreed can be open at once however many came and went (handovers,
    /// interfaces going down and up).
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.1
    //# As such to allow for the use of more paths later,
    //# endpoints can send the MAX_PATH_ID frame to increase the maximum allowed path ID.
    fn raise_max_path_id(&mut self) {
        if let Some(mp) = self.multipath.as_mut()
            && mp.local_max_path_id < u32::MAX
        {
            mp.local_max_path_id += 1;
            self.pending.max_path_id = true;
            self.issue_connection_ids();
        }
    }
}
