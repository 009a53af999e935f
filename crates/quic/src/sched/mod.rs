//! Packet schedulers: which path the next packet of application data goes on.
//!
//! A [`Scheduler`] is a plug-in. Before each packet carrying stream data or datagrams, the
//! connection hands it a read-only [`PathSnapshot`] of every open path and a summary of what
//! is waiting ([`PendingData`]), and the scheduler answers with a [`Decision`]: send on one
//! path, duplicate the packet's content on several, or wait. Packets that belong to one path
//! by nature (acknowledgments of that path, PATH_CHALLENGE/PATH_RESPONSE, probe timeouts,
//! MTU probes) are not scheduled: the connection sends them on their own path.
//!
//! Schedulers hear about path lifecycle events through [`Scheduler::on_path_event`], about
//! link-layer events through [`Scheduler::on_link_event`] (the latest hints are also in each
//! snapshot's [`PathSnapshot::link`]) and about every packet they caused through
//! [`Scheduler::on_packet_sent`], so stateful policies (weighted round robin, LAMP5G ranking)
//! keep their own bookkeeping.
//!
//! # The contract: window room chooses, pacing times
//!
//! A scheduler chooses among the paths whose congestion window has room
//! ([`PathSnapshot::can_send`]), MPTCP's rule: a subflow is available while its window is
//! not full. Pacing is not unavailability. A packet given to a path whose pacer is holding
//! back ([`PathSnapshot::pacing_release`] is set) is *queued* on that path: its stream data
//! is taken from the connection's send queue at once and leaves on that path, in order,
//! when the path's pacer releases it; the connection asks the scheduler for the next packet
//! at once. The queued data counts against the path's window room
//! ([`PathSnapshot::queued_bytes`]). This is Linux MPTCP's subflow send queue: the meta
//! socket pushes segments onto a subflow until the segments queued there fill its window,
//! and each subflow transmits its queue at its own pace. Pacing therefore decides *when* a
//! path transmits, never *which* path carries the data. With a bulk transfer every path
//! ends up with its window full, at its own rate, and the schedulers differ in which data
//! each path carries (the receiver's reordering, the transfer's tail); with less data than
//! room, the scheduler's preference decides (minRTT keeps an application-limited flow on the
//! fast path).
//!
//! Queued data goes back to the connection's send queue (as data to retransmit, first in
//! line) when its path stops taking data: abandoned, no longer usable, or held back while
//! its link is unavailable or it is potentially failed. The kernel leaves it on the
//! subflow until the subflow is closed or reinjects it after a timeout.
//!
//! A scheduler may also answer [`Decision::Wait`] to wait for a path whose window is full
//! but will open (ECF, BLEST and true weighted round robin do); the connection asks again
//! after the next acknowledgment, timer or new data. [`Scheduler::on_packet_sent`] is
//! called when a packet is given to a path, whether it leaves at once or is queued.
//! Datagrams are never queued: a datagram's packet waits for its path's pacer.
//!
//! Counting a path whose pacer has not yet released as unable to send would make the
//! schedulers indistinguishable: at most decision points only the one path whose pacer has
//! just released could send, every scheduler would pick it, and the slow path would get
//! packets the fast one was about to send (the head-of-line blocking ECF and BLEST exist to
//! avoid).
//!
//! A [`Decision::Duplicate`] queues the next data on every listed path, whether or not its
//! window has room (at least one must have): each copy leaves when its path's window and
//! pacer allow, and is skipped if another path's copy was acknowledged first.
//!
//! Writing a scheduler outside this crate needs only the items of this module; see the
//! `largest-cwnd` example crate in the repository (`crates/example-largest-cwnd`, package
//! `polypath-example-largest-cwnd`), which builds and tests one against the public API only.
//!
//! # Built-in schedulers
//!
//! | scheduler | policy | source |
//! |---|---|---|
//! | [`MinRtt`] | lowest smoothed RTT among paths with room | Linux MPTCP default |
//! | [`RoundRobin`] | next path in turn with room (`cwnd_limited` Y; N is [`WeightedRoundRobin`] with weights 1) | Linux MPTCP round robin |
//! | [`Redundant`] | every packet on every path with room | Linux MPTCP redundant; 5G-CLARITY Section 3 |
//! | [`WeightedRoundRobin`] | `w_i` packets per path per round, true WRR or cwnd-limited | 5G-CLARITY Section 5 |
//! | [`Ecf`] | fastest path, or wait for it when that completes sooner | Lim et al., CoNEXT 2017 |
//! | [`Blest`] | fastest path, or wait when the slow path would block it | Ferlin et al., IFIP Networking 2016 |
//! | [`Lamp5g`] | stable ranking by `min(cwnd (1 − p) / RTT, T)` | LAMP5G Sections III-A, IV-A |
//! | [`QosPolicy`] | per-class select / failover / fallback / duplicate / aggregate | CHYMP / MPF-Gateway Sections III-IV |
//!
//! [`scheduler_by_name`] builds any of them from its name. A paper is cited by its title and
//! section (`//= <title>, Section V-A`), with the quoted sentence under it.
//
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.5
//# As such, a packet scheduler is needed to decide which path to use
//# for sending the next packet, among those paths with an open congestion window.

mod blest;
mod ecf;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod harness;
mod lamp5g;
mod min_rtt;
mod qos;
mod redundant;
mod round_robin;
mod wrr;

pub use blest::{Blest, BlestFactory, BlestParams};
pub use ecf::{Ecf, EcfFactory};
pub use lamp5g::{Lamp5g, Lamp5gFactory, Lamp5gThresholds};
pub use min_rtt::{MinRtt, MinRttFactory};
pub use qos::{
    AllowedPath, ClassPolicy, InterfaceMetrics, PathMetric, QosMode, QosPolicy, QosPolicyConfig,
    QosPolicyFactory, TrafficRequirements,
};
pub use redundant::{Redundant, RedundantFactory};
pub use round_robin::{RoundRobin, RoundRobinFactory};
pub use wrr::{WeightedRoundRobin, WrrFactory, check_weight_count};

pub use crate::link_hints::{LinkHints, RrcEventHint};

use crate::shared::PathId;
use polypath_link::LinkEvent;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
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

/// A read-only view of one path, rebuilt before every scheduling decision. New fields may
/// be added: build one outside this crate with [`PathSnapshot::new`] (or the test harness's
/// `testing::scheduler::snapshot`) and set the fields that matter.
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// True if the path may take a full-sized packet: it is usable (and not held back for
    /// an unavailable link) and its congestion window has room for one more packet beside
    /// the [queued](Self::queued_bytes) data. The pacer does not enter into it: see
    /// [`Self::pacing_release`] and the module's contract.
    pub can_send: bool,
    /// When the pacer will next allow a packet on this path, if it is holding one back now;
    /// `None` if a packet may leave at once (or the window is full). A packet given to a
    /// path with a release time is queued on it and leaves then.
    pub pacing_release: Option<Instant>,
    /// Bytes of stream data given to this path that wait for its pacer (its send queue).
    /// They count against the window room and are not yet in [`Self::bytes_in_flight`].
    pub queued_bytes: u64,
    /// Packets sent on this path.
    pub packets_sent: u64,
    /// Packets on this path declared lost.
    pub packets_lost: u64,
    /// Payload bytes of stream and datagram frames sent on this path.
    pub bytes_sent: u64,
    /// Latest link-layer predicted throughput for the path, in bits per second, if a
    /// link-hint source supplied one.
    pub predicted_throughput: Option<u64>,
    /// Probe timeouts that fired on this path since it last received an acknowledgment
    /// (the RFC 9002 `pto_count` of the path; 0 while the path is being acknowledged).
    /// Failover policies treat a path with repeated probe timeouts as failed before the
    /// path manager abandons it, like Linux MPTCP's "potentially failed" subflows.
    pub pto_count: u32,
    /// Since when the path has been waiting for an acknowledgment: `None` while no
    /// ack-eliciting packet is in flight on it, otherwise the later of the last time an
    /// acknowledgment for the path arrived and the time the oldest ack-eliciting packet
    /// still in flight was sent. A path that works keeps this within about one RTT of now;
    /// failover path managers treat a long wait as a dead path.
    pub awaiting_ack_since: Option<Instant>,
    /// The latest link-layer hints (signal, serving cell, link up/down, last RRC event) for
    /// the interface the path sends from, as given to
    /// [`crate::Connection::handle_link_event`].
    pub link: LinkHints,
    /// True while the interface the path sends from has its link lost
    /// ([`LinkHints::link_lost`]), and after it came back until an acknowledgment arrived on
    /// the path (the connection probes it with a PING first). The connection gives such a
    /// path no new data while another path works.
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.9
    //# If a path was not actively used for a while and no keep-alives have been sent,
    //# an endpoint can probe it before switching to active use if there are still other paths
    //# that are currently usable.
    pub link_unavailable: bool,
}

impl PathSnapshot {
    /// A validated, available path between `local` and `remote` before any traffic: the
    /// initial RTT of RFC 9002 (333 ms) and no sample yet, an empty window, a 1200-byte MTU,
    /// no hints. Drivers and tests set the fields that matter.
    pub fn new(id: PathId, local: SocketAddr, remote: SocketAddr) -> Self {
        let initial_rtt = crate::recovery::K_INITIAL_RTT;
        PathSnapshot {
            id,
            local,
            remote,
            state: PathState::Validated,
            local_status: PathStatus::Available,
            peer_status: None,
            srtt: initial_rtt,
            rttvar: initial_rtt / 2,
            min_rtt: initial_rtt,
            latest_rtt: initial_rtt,
            has_rtt_sample: false,
            cwnd: 0,
            bytes_in_flight: 0,
            mtu: 1200,
            loss_rate: 0.0,
            delivery_rate: None,
            can_send: false,
            pacing_release: None,
            queued_bytes: 0,
            packets_sent: 0,
            packets_lost: 0,
            bytes_sent: 0,
            predicted_throughput: None,
            pto_count: 0,
            awaiting_ack_since: None,
            link: LinkHints::default(),
            link_unavailable: false,
        }
    }

    /// Bytes the congestion window still admits.
    pub fn window_room(&self) -> u64 {
        self.cwnd.saturating_sub(self.bytes_in_flight)
    }

    /// True if the path may carry application data at all (validated and not abandoned).
    pub fn is_usable(&self) -> bool {
        self.state == PathState::Validated
    }

    /// True once [`POTENTIALLY_FAILED_PTOS`] probe timeouts fired in a row on the path, or
    /// while its link is unavailable ([`PathSnapshot::link_unavailable`]): either way the
    /// path cannot be counted on now.
    pub fn is_potentially_failed(&self) -> bool {
        potentially_failed(self.pto_count, self.link_unavailable)
    }

    /// True if either side marked the path as backup.
    pub fn is_backup(&self) -> bool {
        self.local_status == PathStatus::Backup || self.peer_status == Some(PathStatus::Backup)
    }

    /// The "estimated loss-free end-to-end bandwidth" `cwnd * (1 - p) / RTT` in bytes per
    /// second, from the congestion window, the loss rate and the smoothed RTT (an RTT below
    /// one microsecond counts as one microsecond).
    pub fn loss_free_bandwidth(&self) -> f64 {
        let rtt = self.srtt.as_secs_f64().max(1e-6);
        let p = self.loss_rate.clamp(0.0, 1.0);
        self.cwnd as f64 * (1.0 - p) / rtt
    }

    /// The LAMP5G path estimate in bytes per second: [`Self::loss_free_bandwidth`], capped
    /// by the link-layer predicted throughput when a link hint supplied one.
    pub fn estimated_bandwidth(&self) -> f64 {
        let transport = self.loss_free_bandwidth();
        match self.predicted_throughput {
            Some(bits_per_second) => transport.min(bits_per_second as f64 / 8.0),
            None => transport,
        }
    }
}

/// Quality-of-service class of waiting data, set by the application per stream
/// ([`crate::Connection::set_stream_class`]) or per datagram
/// ([`crate::Connection::send_datagram_with_class`]); everything is [`QosClass::BestEffort`]
/// unless the application says otherwise.
///
/// The connection asks the scheduler for one class at a time: the most demanding class
/// with data waiting first ([`QosClass::BY_DEMAND`]), and, when the scheduler answers
/// [`Decision::Wait`] for it, the next one, so a class waiting for its own path does not
/// hold back the others. A packet scheduled for a class carries data of that class only
/// (stream data queued on a path earlier and control frames aside).
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

impl QosClass {
    /// Every class, most demanding first: the order in which the connection serves the
    /// classes that have data waiting.
    pub const BY_DEMAND: [QosClass; 4] = [
        QosClass::Critical,
        QosClass::LowLatency,
        QosClass::BestEffort,
        QosClass::Bulk,
    ];

    /// A dense index (0 to 3) for per-class tables, in declaration order.
    pub fn index(self) -> usize {
        match self {
            QosClass::BestEffort => 0,
            QosClass::Bulk => 1,
            QosClass::LowLatency => 2,
            QosClass::Critical => 3,
        }
    }

    /// The class's configuration name: `best_effort`, `bulk`, `low_latency`, `critical`.
    pub fn name(self) -> &'static str {
        match self {
            QosClass::BestEffort => "best_effort",
            QosClass::Bulk => "bulk",
            QosClass::LowLatency => "low_latency",
            QosClass::Critical => "critical",
        }
    }
}

impl std::str::FromStr for QosClass {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        QosClass::BY_DEMAND
            .into_iter()
            .find(|c| c.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                format!("unknown QoS class {s:?} (best_effort, bulk, low_latency, critical)")
            })
    }
}

/// What is waiting to be sent, summarised for the scheduler. New fields may be added: build
/// one outside this crate from [`PendingData::default`] and set the fields that matter.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PendingData {
    /// Bytes of stream data never sent yet.
    pub new_stream_bytes: u64,
    /// Bytes of stream data declared lost and waiting for retransmission.
    pub retransmit_bytes: u64,
    /// Number of queued datagrams (of this decision's class).
    pub datagrams: usize,
    /// Bytes of those queued datagrams.
    pub datagram_bytes: u64,
    /// The QoS class of the data this decision is for: the fields above count that
    /// class's data only (see [`QosClass`] for the order in which classes are asked about).
    pub class: QosClass,
    /// Bytes of new stream data the peer's connection-level flow control still admits: the
    /// peer's MAX_DATA limit minus the stream bytes sent so far. `None` if the connection
    /// does not report it. Together with the bytes in flight on every path this is the
    /// connection-level send window that [`Blest`] protects (MPTCP's meta send window).
    pub flow_credit: Option<u64>,
}

impl PendingData {
    /// True if nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.new_stream_bytes == 0 && self.retransmit_bytes == 0 && self.datagrams == 0
    }

    /// All waiting bytes: new and retransmitted stream data plus queued datagrams (the
    /// connection-level send buffer that [`Ecf`] reasons about).
    pub fn total_bytes(&self) -> u64 {
        self.new_stream_bytes
            .saturating_add(self.retransmit_bytes)
            .saturating_add(self.datagram_bytes)
    }
}

/// A scheduler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Send the next packet on this path.
    Send(PathId),
    /// Send the next packet's data on every listed path (redundant scheduling), each copy
    /// when its path's window and pacer allow; at least one listed path must have window
    /// room, or this is a wait. The first copy to be acknowledged counts: the others are
    /// skipped if not yet sent, and the receiver discards the duplicates it gets.
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
///
/// The contract (see the [module documentation](self)): [`Scheduler::schedule`] chooses
/// among paths whose congestion window has room ([`PathSnapshot::can_send`]); a path whose
/// pacer is holding packets back can still be chosen, and the packet's data is then queued
/// on it and leaves when that pacer releases it. A scheduler may return [`Decision::Wait`] to wait
/// for a path whose window is full; a [`Decision::Send`] naming a path that cannot send is
/// also a wait.
pub trait Scheduler: Send + fmt::Debug {
    /// A short name for logs and summaries.
    fn name(&self) -> &str;

    /// Picks the path(s) for the next packet carrying application data. `paths` lists every
    /// path that is not yet fully closed, in path ID order; `pending` describes the data.
    /// It is asked only while some usable path has window room for another packet.
    /// Pacing is not the scheduler's concern: choose by window room, RTT, weights and so
    /// on, and the connection sends on the chosen path when its pacer allows.
    fn schedule(&mut self, now: Instant, paths: &[PathSnapshot], pending: &PendingData)
    -> Decision;

    /// Told when a packet the scheduler asked for is given to `path`: it left at once, with
    /// `payload_bytes` of stream and datagram payload, or `payload_bytes` of stream data
    /// were queued on the path to leave when its pacer releases them.
    fn on_packet_sent(&mut self, _now: Instant, _path: PathId, _payload_bytes: u64) {}

    /// Told about path lifecycle events.
    fn on_path_event(&mut self, _now: Instant, _event: &PathEvent) {}

    /// Told about a link-layer event given to the connection. `paths` lists the open paths
    /// that send from the local address the event concerns (empty when it concerns none).
    /// The connection has already folded the event into those paths'
    /// [`PathSnapshot::link`] hints (and a throughput prediction into
    /// [`PathSnapshot::predicted_throughput`], also announced as
    /// [`PathEvent::PredictedThroughput`]).
    fn on_link_event(&mut self, _now: Instant, _event: &LinkEvent, _paths: &[PathId]) {}

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

/// Probe timeouts in a row after which a path counts as potentially failed: it stops
/// keeping backup paths idle, like a Linux MPTCP subflow marked stale after retransmission
/// timeouts. Two, because one PTO is often only a tail loss.
pub const POTENTIALLY_FAILED_PTOS: u32 = 2;

/// The one definition of a potentially failed path, for schedulers
/// ([`PathSnapshot::is_potentially_failed`]) and the connection (which keeps its own frames
/// off such a path): [`POTENTIALLY_FAILED_PTOS`] probe timeouts in a row, or a link the
/// link layer reports unavailable.
pub(crate) fn potentially_failed(pto_count: u32, link_unavailable: bool) -> bool {
    pto_count >= POTENTIALLY_FAILED_PTOS || link_unavailable
}

/// The paths a scheduler counts as its own whether or not their windows have room now,
/// applying the backup rule: the usable paths not marked backup; or, when none of those is
/// working (each is unusable or [potentially failed](PathSnapshot::is_potentially_failed)),
/// every usable path, backup ones included. Schedulers that wait for a full path (true
/// weighted round robin, ECF, BLEST) use this; [`preferred_paths`] then tells which of them
/// can take a packet now.
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.3
//# PATH_STATUS_BACKUP suggests that a path should only be used as backup, i.e., that no traffic
//# should be sent on that path if another path is available and usable.
pub fn usable_paths(paths: &[PathSnapshot]) -> impl Iterator<Item = &PathSnapshot> {
    usable_among(paths.iter())
}

/// [`usable_paths`] among some of the paths (for example those a traffic class may use).
pub fn usable_among<'a, I>(paths: I) -> impl Iterator<Item = &'a PathSnapshot>
where
    I: Iterator<Item = &'a PathSnapshot> + Clone,
{
    let working = |p: &PathSnapshot| p.is_usable() && !p.is_backup() && !p.is_potentially_failed();
    let any_working = paths.clone().any(working);
    paths.filter(move |p| {
        if any_working {
            working(p)
        } else {
            p.is_usable()
        }
    })
}

/// The paths of [`usable_paths`] whose congestion window has room for a full-sized packet
/// ([`PathSnapshot::can_send`]; pacing aside). A backup path is not among them merely
/// because the available paths' windows are full.
pub fn preferred_paths(paths: &[PathSnapshot]) -> impl Iterator<Item = &PathSnapshot> {
    usable_paths(paths).filter(|p| p.can_send)
}

/// The built-in scheduler factory that `name` selects in [`crate::registry::SCHEDULERS`] (the
/// names, aliases and summaries), with default parameters; `None` for any other name.
/// Parameters are then set per connection with [`Scheduler::configure`], or by building the
/// factory directly.
pub fn scheduler_by_name(name: &str) -> Option<Arc<dyn SchedulerFactory>> {
    crate::registry::find(crate::registry::SCHEDULERS, name).map(|p| p.build())
}

/// Parses a boolean parameter value: `y`, `yes`, `true`, `1`, `on` or `n`, `no`, `false`, `0`,
/// `off` (case-insensitive).
pub(crate) fn parse_flag(key: &str, value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "true" | "1" | "on" => Ok(true),
        "n" | "no" | "false" | "0" | "off" => Ok(false),
        other => Err(format!("{key}: expected y or n, got {other:?}")),
    }
}

/// Parses a finite, non-negative number parameter value.
pub(crate) fn parse_non_negative(key: &str, value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{key}: expected a non-negative number, got {value:?}"
        )),
    }
}

/// Parses a fraction parameter value in `[0, 1)`.
pub(crate) fn parse_fraction(key: &str, value: &str) -> Result<f64, String> {
    match parse_non_negative(key, value) {
        Ok(v) if v < 1.0 => Ok(v),
        _ => Err(format!(
            "{key}: expected a fraction in [0, 1), got {value:?}"
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    pub(crate) use crate::sched::harness::{Sim, snapshot};

    #[test]
    fn backup_paths_only_when_no_available_path_works() {
        let mut backup = snapshot(1, 5, true);
        backup.peer_status = Some(PathStatus::Backup);
        let available = snapshot(0, 50, true);
        let ids: Vec<_> = preferred_paths(&[available.clone(), backup.clone()])
            .map(|p| p.id)
            .collect();
        assert_eq!(ids, vec![PathId(0)]);
        // A full window does not open the backup path...
        let blocked = snapshot(0, 50, false);
        let ids: Vec<_> = preferred_paths(&[blocked.clone(), backup.clone()])
            .map(|p| p.id)
            .collect();
        assert!(ids.is_empty(), "{ids:?}");
        // ...repeated probe timeouts do.
        let mut failing = blocked;
        failing.pto_count = POTENTIALLY_FAILED_PTOS;
        let ids: Vec<_> = preferred_paths(&[failing, backup.clone()])
            .map(|p| p.id)
            .collect();
        assert_eq!(ids, vec![PathId(1)]);
        // ...and so does a link the interface reported lost, before any timeout (the
        // connection reports such a path unable to send).
        let mut lost = snapshot(0, 50, false);
        lost.link_unavailable = true;
        let ids: Vec<_> = preferred_paths(&[lost, backup]).map(|p| p.id).collect();
        assert_eq!(ids, vec![PathId(1)]);
    }

    #[test]
    fn usable_paths_ignore_windows_but_apply_backup_rule() {
        let mut backup = snapshot(1, 5, true);
        backup.local_status = PathStatus::Backup;
        let full = snapshot(0, 50, false);
        let ids: Vec<_> = usable_paths(&[full.clone(), backup.clone()])
            .map(|p| p.id)
            .collect();
        assert_eq!(ids, vec![PathId(0)]);
        let mut gone = full;
        gone.state = PathState::Abandoned;
        let ids: Vec<_> = usable_paths(&[gone, backup]).map(|p| p.id).collect();
        assert_eq!(ids, vec![PathId(1)]);
    }

    #[test]
    fn bandwidth_estimates_use_bytes_per_second() {
        let mut p = snapshot(0, 100, true);
        p.cwnd = 100_000;
        p.loss_rate = 0.2;
        // 100 kB * 0.8 / 0.1 s = 800 kB/s.
        assert!((p.loss_free_bandwidth() - 800_000.0).abs() < 1e-6);
        assert!((p.estimated_bandwidth() - 800_000.0).abs() < 1e-6);
        // 1.6 Mbit/s = 200 kB/s caps it.
        p.predicted_throughput = Some(1_600_000);
        assert!((p.estimated_bandwidth() - 200_000.0).abs() < 1e-6);
        // An over-estimate does not raise it.
        p.predicted_throughput = Some(1_000_000_000);
        assert!((p.estimated_bandwidth() - 800_000.0).abs() < 1e-6);
    }

    #[test]
    fn schedulers_by_name() {
        let cases = [
            ("minrtt", "minrtt"),
            ("MinRTT", "minrtt"),
            ("roundrobin", "roundrobin"),
            ("RR", "roundrobin"),
            ("redundant", "redundant"),
            ("wrr", "wrr"),
            ("ECF", "ecf"),
            ("blest", "blest"),
            ("LAMP5G", "lamp5g"),
            ("qos", "qos"),
        ];
        for (name, built) in cases {
            let factory = scheduler_by_name(name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(factory.build().name(), built, "{name}");
        }
        assert!(scheduler_by_name("fastest").is_none());
        assert!(scheduler_by_name("").is_none());
    }

    #[test]
    fn parameter_parsers() {
        assert_eq!(parse_flag("k", " Y "), Ok(true));
        assert_eq!(parse_flag("k", "no"), Ok(false));
        assert!(parse_flag("k", "maybe").is_err());
        assert_eq!(parse_non_negative("k", "0.5"), Ok(0.5));
        assert!(parse_non_negative("k", "-1").is_err());
        assert!(parse_non_negative("k", "NaN").is_err());
        assert!(parse_non_negative("k", "inf").is_err());
        assert!(parse_fraction("k", "1").is_err());
        assert_eq!(parse_fraction("k", "0"), Ok(0.0));
    }

    /// The paths a decision sends on.
    fn sent_on(d: &Decision) -> Vec<PathId> {
        match d {
            Decision::Send(id) => vec![*id],
            Decision::Duplicate(ids) => ids.clone(),
            _ => Vec::new(),
        }
    }

    /// Every built-in scheduler (the registry's) follows the draft's backup rule as
    /// [`usable_paths`] defines it: a backup path gets nothing while an available path is
    /// working, even one whose window is full; it takes packets once the available path is
    /// potentially failed or not usable.
    #[test]
    fn every_scheduler_follows_the_backup_rule() {
        let pending = PendingData {
            new_stream_bytes: 1_000_000,
            ..PendingData::default()
        };
        let mut backup = snapshot(1, 5, true);
        backup.local_status = PathStatus::Backup;
        let mut full = snapshot(0, 20, false);
        full.cwnd = 12_000;
        let mut failing = snapshot(0, 20, true);
        failing.pto_count = POTENTIALLY_FAILED_PTOS;
        let mut closing = snapshot(0, 20, true);
        closing.state = PathState::Abandoned;
        let now = Instant::now();
        // Ten decisions, each packet reported sent; the paths each decision used.
        let decisions = |policy: &crate::registry::Policy<dyn SchedulerFactory>,
                         paths: &[PathSnapshot]| {
            let mut s = policy.build().build();
            (0..10u64)
                .map(|i| {
                    let t = now + Duration::from_millis(i);
                    let d = s.schedule(t, paths, &pending);
                    for id in sent_on(&d) {
                        s.on_packet_sent(t, id, 1200);
                    }
                    d
                })
                .collect::<Vec<_>>()
        };
        for policy in crate::registry::SCHEDULERS {
            let ds = decisions(policy, &[full.clone(), backup.clone()]);
            assert!(
                ds.iter().all(|d| !sent_on(d).contains(&PathId(1))),
                "{}: {ds:?} uses the backup while the available path works",
                policy.name
            );
            for working_not in [&failing, &closing] {
                let ds = decisions(policy, &[working_not.clone(), backup.clone()]);
                assert!(
                    ds.iter().any(|d| sent_on(d).contains(&PathId(1))),
                    "{}: {ds:?} leaves the backup idle with path 0 {:?}, {} PTOs",
                    policy.name,
                    working_not.state,
                    working_not.pto_count
                );
            }
        }
    }
}
