//! Per-path state: addresses, validation, the path's 1-RTT packet-number space, RTT
//! estimation, congestion control, pacing and statistics.
//!
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.3
//# With the multipath extension, multiple paths can be used simultaneously,
//# therefore separate congestion control state is maintained for each path.

use super::spaces::PacketSpace;
use crate::cc::CongestionController;
use crate::recovery::{Pacer, RttEstimator};
use crate::sched::{PathSnapshot, PathState, PathStatus};
use crate::shared::PathId;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Statistics of one path, reported in summaries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PathStats {
    /// Packets sent.
    pub packets_sent: u64,
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
    /// When the current challenge was (or is to be) sent; `None` while a new one is owed.
    pub sent_at: Option<Instant>,
    /// When validation gives up.
    pub give_up_at: Instant,
    /// Challenges sent so far.
    pub attempts: u32,
}

/// State of PMTU discovery on a path (a single probe up to the configured maximum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MtuDiscovery {
    /// Nothing to probe (already at the maximum, or discovery disabled).
    Done,
    /// A probe of this size should be sent when the path is idle enough.
    Pending { size: u16, attempts: u8 },
    /// A probe of this size is in flight.
    InFlight { size: u16, attempts: u8 },
}

/// Everything a connection knows about one path.
pub(crate) struct Path {
    pub id: PathId,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: PathState,
    pub local_status: PathStatus,
    pub local_status_sequence: u64,
    pub status_frame_pending: bool,
    pub peer_status: Option<PathStatus>,
    pub peer_status_sequence: Option<u64>,
    /// The path's 1-RTT packet-number space (for path 0 this is the Application Data space).
    pub space: PacketSpace,
    pub rtt: RttEstimator,
    pub cc: Box<dyn CongestionController>,
    pub pacer: Pacer,
    pub mtu: u16,
    pub mtu_discovery: MtuDiscovery,
    /// Consecutive PTO expirations (RFC 9002 pto_count).
    pub pto_count: u32,
    /// Bytes counted in flight on this path, all spaces together.
    pub bytes_in_flight: u64,
    /// When the first RTT sample was taken (for persistent congestion, RFC 9002 7.6.2).
    pub first_rtt_sample: Option<Instant>,
    /// Our challenge, while validating.
    pub challenge: Option<Challenge>,
    /// PATH_RESPONSE payloads owed to the peer on this path.
    pub responses: VecDeque<[u8; 8]>,
    /// True once the peer's address is validated (anti-amplification lifted).
    pub address_validated: bool,
    /// Bytes received on the path before its address was validated.
    pub unvalidated_received: u64,
    /// Bytes sent on the path before its address was validated.
    pub unvalidated_sent: u64,
    /// PATH_ABANDON frame owed to the peer.
    pub abandon_pending: Option<u64>,
    /// Both sides are done with the path; its state is dropped at this time.
    pub discard_at: Option<Instant>,
    /// Last time an ack-eliciting packet was sent on the path.
    pub last_ack_eliciting_sent: Option<Instant>,
    /// Last time anything was received on the path.
    pub last_received: Option<Instant>,
    /// Exponentially weighted fraction of packets lost.
    pub loss_rate: f64,
    /// Latest delivery rate estimate in bytes per second.
    pub delivery_rate: Option<u64>,
    /// Latest link-layer throughput prediction in bit/s.
    pub predicted_throughput: Option<u64>,
    pub stats: PathStats,
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

/// Weight of a new sample in the loss-rate average (about the last 100 packets).
const LOSS_RATE_GAIN: f64 = 0.01;

impl Path {
    pub fn new(
        id: PathId,
        local: SocketAddr,
        remote: SocketAddr,
        initial_rtt: Duration,
        cc: Box<dyn CongestionController>,
        mtu: u16,
        validated: bool,
    ) -> Self {
        Path {
            id,
            local,
            remote,
            state: if validated { PathState::Validated } else { PathState::Validating },
            local_status: PathStatus::Available,
            local_status_sequence: 0,
            status_frame_pending: false,
            peer_status: None,
            peer_status_sequence: None,
            space: PacketSpace::new(),
            rtt: RttEstimator::new(initial_rtt),
            cc,
            pacer: Pacer::default(),
            mtu,
            mtu_discovery: MtuDiscovery::Done,
            pto_count: 0,
            bytes_in_flight: 0,
            first_rtt_sample: None,
            challenge: None,
            responses: VecDeque::new(),
            address_validated: validated,
            unvalidated_received: 0,
            unvalidated_sent: 0,
            abandon_pending: None,
            discard_at: None,
            last_ack_eliciting_sent: None,
            last_received: None,
            loss_rate: 0.0,
            delivery_rate: None,
            predicted_throughput: None,
            stats: PathStats::default(),
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

    /// Records `bytes` sent on the path for anti-amplification accounting.
    pub fn on_datagram_sent(&mut self, bytes: u64) {
        if !self.address_validated {
            self.unvalidated_sent += bytes;
        }
        self.stats.udp_bytes_sent += bytes;
    }

    /// Records `bytes` received on the path.
    pub fn on_datagram_received(&mut self, now: Instant, bytes: u64) {
        if !self.address_validated {
            self.unvalidated_received += bytes;
        }
        self.stats.udp_bytes_received += bytes;
        self.last_received = Some(now);
    }

    /// Room in the congestion window.
    pub fn window_room(&self) -> u64 {
        self.cc.window().saturating_sub(self.bytes_in_flight)
    }

    /// Folds the outcome of `packets` packets into the loss-rate average.
    pub fn record_loss_samples(&mut self, delivered: u64, lost: u64) {
        for _ in 0..delivered.min(256) {
            self.loss_rate *= 1.0 - LOSS_RATE_GAIN;
        }
        for _ in 0..lost.min(256) {
            self.loss_rate = self.loss_rate * (1.0 - LOSS_RATE_GAIN) + LOSS_RATE_GAIN;
        }
    }

    /// The path may carry new application data.
    pub fn is_usable(&self) -> bool {
        self.state == PathState::Validated && self.abandon_pending.is_none()
    }

    /// Builds the read-only view handed to schedulers and path managers.
    pub fn snapshot(&self, can_send: bool, pacing_release: Option<Instant>) -> PathSnapshot {
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
            has_rtt_sample: self.first_rtt_sample.is_some(),
            cwnd: self.cc.window(),
            bytes_in_flight: self.bytes_in_flight,
            mtu: self.mtu,
            loss_rate: self.loss_rate,
            delivery_rate: self.delivery_rate,
            can_send,
            pacing_release,
            packets_sent: self.stats.packets_sent,
            packets_lost: self.stats.packets_lost,
            bytes_sent: self.stats.payload_bytes_sent,
            predicted_throughput: self.predicted_throughput,
        }
    }
}
