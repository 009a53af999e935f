//! Packet schedulers: which path the next packet of application data goes on.
//!
//! A [`Scheduler`] is a plug-in. Before each packet carrying stream data or datagrams, the
//! connection hands it a read-only [`PathSnapshot`] of every open path and a summary of what
//! is waiting ([`PendingData`]), and the scheduler answers with a [`Decision`]: send on one
//! path, duplicate the packet's content on several, or wait. Packets that belong to one path
//! by nature (acknowledgments of that path, PATH_CHALLENGE/PATH_RESPONSE, probe timeouts,
//! MTU probes) are not scheduled: the connection sends them on their own path.
//!
//! Schedulers hear about path lifecycle events through [`Scheduler::on_path_event`] and
//! about every packet they caused through [`Scheduler::on_packet_sent`], so stateful
//! policies (weighted round robin, LAMP5G ranking) keep their own bookkeeping.
//!
//! Writing a scheduler outside this crate needs only the items of this module; see the
//! `largest-cwnd` example crate in the repository.
//
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.5
//# As such, a packet scheduler is needed to decide which path to use
//# for sending the next packet, among those paths with an open congestion window.

mod min_rtt;
mod round_robin;

pub use min_rtt::{MinRtt, MinRttFactory};
pub use round_robin::{RoundRobin, RoundRobinFactory};

use crate::shared::PathId;
use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How a path should be used, as signalled with PATH_STATUS_AVAILABLE / PATH_STATUS_BACKUP.
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.3
//# PATH_STATUS_BACKUP suggests that a path should only be used as backup, i.e., that no traffic
//# should be sent on that path if another path is available and usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathStatus {
    /// Use the path as the scheduler sees fit.
    Available,
    /// Use the path only when no available path can send.
    Backup,
}

/// Where a path is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathState {
    /// Path validation (PATH_CHALLENGE/PATH_RESPONSE) is in progress; only probing traffic
    /// and data within the anti-amplification limit may be sent.
    Validating,
    /// The peer's address on this path is validated.
    Validated,
    /// The path is being closed (PATH_ABANDON sent or received); nothing new is sent on it.
    Abandoned,
}

/// A read-only view of one path, rebuilt before every scheduling decision.
#[derive(Debug, Clone)]
pub struct PathSnapshot {
    /// The path's identifier (0 for the path of the handshake).
    pub id: PathId,
    /// Local address packets on this path leave from.
    pub local: SocketAddr,
    /// The peer's address on this path.
    pub remote: SocketAddr,
    /// Validation and lifecycle state.
    pub state: PathState,
    /// Our own preference for the path.
    pub local_status: PathStatus,
    /// The peer's preference, if it sent one.
    pub peer_status: Option<PathStatus>,
    /// Smoothed RTT (RFC 9002 section 5.3); the initial RTT before any sample.
    pub srtt: Duration,
    /// RTT variation.
    pub rttvar: Duration,
    /// Minimum RTT seen; the initial RTT before any sample.
    pub min_rtt: Duration,
    /// Most recent RTT sample.
    pub latest_rtt: Duration,
    /// True once at least one RTT sample was taken on this path.
    pub has_rtt_sample: bool,
    /// Congestion window in bytes.
    pub cwnd: u64,
    /// Bytes sent and neither acknowledged nor declared lost.
    pub bytes_in_flight: u64,
    /// Largest UDP payload currently used on the path.
    pub mtu: u16,
    /// Fraction of packets declared lost, recent (exponentially weighted, 0.0 to 1.0).
    pub loss_rate: f64,
    /// Latest delivery-rate estimate in bytes per second, if any.
    pub delivery_rate: Option<u64>,
    /// True if a full-sized packet can leave on this path now: the path is usable, the
    /// congestion window has room and the pacer allows it.
    pub can_send: bool,
    /// When the pacer will next allow a packet, if it is holding one back.
    pub pacing_release: Option<Instant>,
    /// Packets sent on this path.
    pub packets_sent: u64,
    /// Packets on this path declared lost.
    pub packets_lost: u64,
    /// Payload bytes of stream and datagram frames sent on this path.
    pub bytes_sent: u64,
    /// Latest link-layer predicted throughput for the path, in bits per second, if a
    /// link-hint source supplied one.
    pub predicted_throughput: Option<u64>,
}

impl PathSnapshot {
    /// Bytes the congestion window still admits.
    pub fn window_room(&self) -> u64 {
        self.cwnd.saturating_sub(self.bytes_in_flight)
    }

    /// True if the path may carry application data at all (validated and not abandoned).
    pub fn is_usable(&self) -> bool {
        self.state == PathState::Validated
    }

    /// True if either side marked the path as backup.
    pub fn is_backup(&self) -> bool {
        self.local_status == PathStatus::Backup || self.peer_status == Some(PathStatus::Backup)
    }
}

/// Quality-of-service class of waiting data, set by the application per stream or datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum QosClass {
    /// Ordinary data.
    #[default]
    BestEffort,
    /// Bulk transfers that value throughput over latency.
    Bulk,
    /// Interactive or real-time data that values latency.
    LowLatency,
    /// Data that must survive the loss of a path (candidates for duplication).
    Critical,
}

/// What is waiting to be sent, summarised for the scheduler.
#[derive(Debug, Clone, Default)]
pub struct PendingData {
    /// Bytes of stream data never sent yet.
    pub new_stream_bytes: u64,
    /// Bytes of stream data declared lost and waiting for retransmission.
    pub retransmit_bytes: u64,
    /// Number of queued datagrams.
    pub datagrams: usize,
    /// Bytes of queued datagrams.
    pub datagram_bytes: u64,
    /// The most demanding QoS class among the waiting data.
    pub class: QosClass,
}

impl PendingData {
    /// True if nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.new_stream_bytes == 0 && self.retransmit_bytes == 0 && self.datagrams == 0
    }
}

/// A scheduler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Send the next packet on this path.
    Send(PathId),
    /// Send the next packet's data on every listed path (redundant scheduling); the first
    /// copy to be acknowledged counts, the receiver discards the others as duplicates.
    Duplicate(Vec<PathId>),
    /// Send nothing now; the connection asks again after the next event (acknowledgment,
    /// timer, new data).
    Wait,
}

/// Something that happened to a path.
#[derive(Debug, Clone, PartialEq)]
pub enum PathEvent {
    /// A path was opened (by us or the peer) and is being validated.
    Opened(PathId),
    /// Path validation succeeded.
    Validated(PathId),
    /// The local or peer status of a path changed.
    StatusChanged {
        /// The path.
        path: PathId,
        /// Our status for it.
        local: PathStatus,
        /// The peer's status for it, if known.
        peer: Option<PathStatus>,
    },
    /// The path was abandoned and will carry nothing more.
    Abandoned(PathId),
    /// The path's congestion controller reacted to loss.
    CongestionEvent {
        /// The path.
        path: PathId,
        /// Congestion window before the reaction.
        cwnd_before: u64,
        /// Congestion window after it.
        cwnd_after: u64,
    },
    /// New link-layer predicted throughput for a path, in bits per second.
    PredictedThroughput {
        /// The path.
        path: PathId,
        /// Predicted rate in bit/s.
        bits_per_second: u64,
    },
}

/// A packet scheduler for one connection.
pub trait Scheduler: Send + fmt::Debug {
    /// A short name for logs and summaries.
    fn name(&self) -> &str;

    /// Picks the path(s) for the next packet carrying application data. `paths` lists every
    /// path that is not yet fully closed, in path ID order; `pending` describes the data.
    fn schedule(&mut self, now: Instant, paths: &[PathSnapshot], pending: &PendingData)
    -> Decision;

    /// Told after a packet the scheduler asked for left on `path`, with the bytes of stream
    /// and datagram payload it carried.
    fn on_packet_sent(&mut self, _now: Instant, _path: PathId, _payload_bytes: u64) {}

    /// Told about path lifecycle events.
    fn on_path_event(&mut self, _now: Instant, _event: &PathEvent) {}

    /// Applies run-time parameters (for example path weights), given as `key=value` pairs;
    /// returns an error message for keys or values the scheduler does not understand.
    fn configure(&mut self, key: &str, value: &str) -> Result<(), String> {
        Err(format!(
            "scheduler {} has no parameter {key} (value {value})",
            self.name()
        ))
    }
}

/// Builds one scheduler per connection.
pub trait SchedulerFactory: Send + Sync {
    /// A new scheduler for a connection.
    fn build(&self) -> Box<dyn Scheduler>;
}

/// The paths a scheduler should choose among, applying the backup rule: paths marked backup
/// (by either side) are candidates only when no available path can send now.
pub fn preferred_paths(paths: &[PathSnapshot]) -> impl Iterator<Item = &PathSnapshot> {
    let any_available_can_send = paths
        .iter()
        .any(|p| p.is_usable() && !p.is_backup() && p.can_send);
    paths
        .iter()
        .filter(move |p| p.is_usable() && p.can_send && (any_available_can_send != p.is_backup()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    /// A usable path with the given RTT and window room.
    pub(crate) fn snapshot(id: u32, srtt_ms: u64, can_send: bool) -> PathSnapshot {
        let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4433));
        PathSnapshot {
            id: PathId(id),
            local: addr,
            remote: addr,
            state: PathState::Validated,
            local_status: PathStatus::Available,
            peer_status: None,
            srtt: Duration::from_millis(srtt_ms),
            rttvar: Duration::from_millis(srtt_ms / 2),
            min_rtt: Duration::from_millis(srtt_ms),
            latest_rtt: Duration::from_millis(srtt_ms),
            has_rtt_sample: true,
            cwnd: 12_000,
            bytes_in_flight: if can_send { 0 } else { 12_000 },
            mtu: 1200,
            loss_rate: 0.0,
            delivery_rate: None,
            can_send,
            pacing_release: None,
            packets_sent: 0,
            packets_lost: 0,
            bytes_sent: 0,
            predicted_throughput: None,
        }
    }

    #[test]
    fn backup_paths_only_when_no_available_path_can_send() {
        let mut backup = snapshot(1, 5, true);
        backup.peer_status = Some(PathStatus::Backup);
        let available = snapshot(0, 50, true);
        let ids: Vec<_> = preferred_paths(&[available.clone(), backup.clone()])
            .map(|p| p.id)
            .collect();
        assert_eq!(ids, vec![PathId(0)]);
        let blocked = snapshot(0, 50, false);
        let ids: Vec<_> = preferred_paths(&[blocked, backup]).map(|p| p.id).collect();
        assert_eq!(ids, vec![PathId(1)]);
    }
}
