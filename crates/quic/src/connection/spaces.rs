//! Packet-number-space state: what was received (for acknowledgments) and what was sent
//! (for loss recovery), plus what each sent packet carried so it can be retransmitted.

use crate::frame::EcnCounts;
use crate::range_set::RangeSet;
use crate::recovery::{SpaceKind, SpaceRecovery};
use crate::shared::{PathId, StreamId};
use crate::streams::ControlFrame;
use smallvec::SmallVec;
use std::time::{Duration, Instant};

/// Tracks received packet numbers of one space and decides when to acknowledge them.
#[derive(Debug, Default)]
pub(crate) struct AckTracker {
    /// Packet numbers received and not yet known to be acknowledged by the peer's
    /// acknowledgment of our ACK frames.
    pub received: RangeSet,
    /// Packet numbers below this are treated as duplicates: their ranges were pruned once
    /// our ACK covering them was itself acknowledged.
    floor: u64,
    /// Largest packet number received and when.
    pub largest: Option<(u64, Instant)>,
    /// Ack-eliciting packets received since we last sent an ACK.
    pub ack_eliciting_since_ack: u32,
    /// True if something arrived that needs acknowledging (even without delay pressure).
    pub has_new: bool,
    /// Send an ACK as soon as possible.
    pub immediate: bool,
    /// Latest time an ACK may wait until.
    pub deadline: Option<Instant>,
    /// ECN codepoints of the packets received, reported in ACK frames.
    pub ecn: EcnCounts,
}

impl AckTracker {
    /// True if `pn` was already received (or is too old to tell, and treated as such).
    pub fn is_duplicate(&self, pn: u64) -> bool {
        pn < self.floor || self.received.contains(pn)
    }

    /// Records a received packet.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.1
    //# An endpoint MUST acknowledge all ack-eliciting Initial and Handshake
    //# packets immediately and all ack-eliciting 0-RTT and 1-RTT packets
    //# within its advertised max_ack_delay, with the following exception.
    //
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.2
    //# A receiver SHOULD send an ACK frame after receiving at least two
    //# ack-eliciting packets.
    //
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.1
    //# In order to assist loss detection at the sender, an endpoint SHOULD
    //# generate and send an ACK frame without delay when it receives an ack-
    //# eliciting packet either:
    //#
    //# *  when the received packet has a packet number less than another
    //#    ack-eliciting packet that has been received, or
    //#
    //# *  when the packet has a packet number larger than the highest-
    //#    numbered ack-eliciting packet that has been received and there are
    //#    missing packets between that packet and this packet.
    pub fn on_packet(
        &mut self,
        now: Instant,
        pn: u64,
        ack_eliciting: bool,
        immediate_space: bool,
        max_ack_delay: Duration,
        threshold: u32,
    ) {
        let out_of_order = match self.largest {
            Some((largest, _)) => pn < largest || pn > largest + 1,
            None => false,
        };
        self.received.insert_one(pn);
        if self.largest.is_none_or(|(l, _)| pn > l) {
            self.largest = Some((pn, now));
        }
        if !ack_eliciting {
            return;
        }
        self.has_new = true;
        self.ack_eliciting_since_ack += 1;
        if immediate_space || out_of_order || self.ack_eliciting_since_ack >= threshold {
            self.immediate = true;
        } else if self.deadline.is_none() {
            self.deadline = Some(now + max_ack_delay);
        }
    }

    /// True if an ACK frame should go out now.
    pub fn ack_due(&self, now: Instant) -> bool {
        self.has_new && (self.immediate || self.deadline.is_some_and(|d| d <= now))
    }

    /// True if there is anything the peer has not seen acknowledged (worth including in an
    /// outgoing packet opportunistically).
    pub fn can_ack(&self) -> bool {
        !self.received.is_empty() && (self.has_new || self.ack_eliciting_since_ack > 0)
    }

    /// Called after an ACK frame for this space was written.
    pub fn on_ack_sent(&mut self) {
        self.has_new = false;
        self.immediate = false;
        self.deadline = None;
        self.ack_eliciting_since_ack = 0;
    }

    /// The peer acknowledged a packet of ours that carried an ACK frame whose largest
    /// acknowledged was `largest`: ranges up to it need not be acknowledged again.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.4
    //# When a packet containing an ACK frame is acknowledged, the receiver can stop
    //# acknowledging packets less than or equal to the Largest Acknowledged
    //# field in the sent ACK frame.
    pub fn on_ack_acked(&mut self, largest: u64) {
        // Keep the range holding `largest` itself so the next ACK still reports a sensible
        // Largest Acknowledged; drop everything strictly before it.
        let prune_below = self
            .received
            .iter()
            .find(|r| r.contains(&largest))
            .map_or(largest + 1, |r| r.start);
        if prune_below > self.floor {
            self.received.remove(0..prune_below);
            self.floor = prune_below;
        }
    }

    /// The ack delay to report for the largest packet, scaled by the ack delay exponent.
    pub fn ack_delay(&self, now: Instant, exponent: u8) -> u64 {
        self.largest.map_or(0, |(_, t)| {
            now.saturating_duration_since(t).as_micros() as u64 >> exponent
        })
    }
}

/// One unit of stream data carried by a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamRange {
    pub id: StreamId,
    pub offset: u64,
    pub len: u64,
    pub fin: bool,
}

/// Connection-level control frames a packet carried, retransmitted if it is lost (as a
/// fresh frame with current values, not as a copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnFrame {
    HandshakeDone,
    NewConnectionId { path: PathId, sequence: u64 },
    RetireConnectionId { path: PathId, sequence: u64 },
    PathAbandon { path: PathId, code: u64 },
    PathStatus { path: PathId, sequence: u64 },
    MaxPathId,
    PathsBlocked,
    PathCidsBlocked { path: PathId },
}

/// What a sent packet carried, kept until it is acknowledged or declared lost.
#[derive(Debug, Default, Clone)]
pub(crate) struct SentFrames {
    /// STREAM data; held inline (no allocation per packet) when the packet carries one
    /// frame, as nearly every data packet does.
    pub stream: SmallVec<[StreamRange; 1]>,
    /// CRYPTO data (offset, length) of the packet's space.
    pub crypto: Vec<(u64, u64)>,
    pub stream_control: Vec<ControlFrame>,
    pub conn: Vec<ConnFrame>,
    /// For each ACK/PATH_ACK frame carried: the acknowledged space and its largest
    /// acknowledged packet number (for pruning once this packet is acknowledged).
    pub acks: SmallVec<[(AckSpace, u64); 1]>,
    /// Bytes of DATAGRAM payload (not retransmitted; counted for statistics).
    pub datagram_bytes: u64,
    /// The packet was a PMTU probe of this size.
    pub mtu_probe: Option<u16>,
    /// The packet left marked ECT(0).
    pub ect0: bool,
}

impl SentFrames {
    /// Stream and datagram payload bytes, the "application bytes" of the packet.
    pub fn payload_bytes(&self) -> u64 {
        self.stream.iter().map(|s| s.len).sum::<u64>() + self.datagram_bytes
    }
}

/// A packet-number space: Initial, Handshake, or the 1-RTT space of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AckSpace {
    Initial,
    Handshake,
    Path(PathId),
}

impl AckSpace {
    /// The path whose RTT estimator and congestion controller the space's packets count
    /// against (Initial and Handshake belong to path 0).
    pub fn path(self) -> PathId {
        match self {
            AckSpace::Path(id) => id,
            _ => PathId::ZERO,
        }
    }
}

/// Sending and receiving state of one packet-number space.
#[derive(Debug)]
pub(crate) struct PacketSpace {
    /// Next packet number to send.
    pub next_pn: u64,
    /// Loss detection state of sent packets.
    pub recovery: SpaceRecovery<SentFrames>,
    /// Received packets to acknowledge.
    pub acks: AckTracker,
    /// Probe packets owed after a PTO.
    pub probes_owed: u8,
    /// Send a PING in the next packet (for example to elicit an ACK).
    pub ping_pending: bool,
}

impl PacketSpace {
    pub fn new(kind: SpaceKind) -> Self {
        PacketSpace {
            next_pn: 0,
            recovery: SpaceRecovery::new(kind),
            acks: AckTracker::default(),
            probes_owed: 0,
            ping_pending: false,
        }
    }

    /// Takes the next packet number.
    pub fn take_pn(&mut self) -> u64 {
        let pn = self.next_pn;
        self.next_pn += 1;
        pn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_every_second_packet_and_on_reordering() {
        let now = Instant::now();
        let delay = Duration::from_millis(25);
        let mut t = AckTracker::default();
        t.on_packet(now, 0, true, false, delay, 2);
        assert!(!t.ack_due(now));
        assert_eq!(t.deadline, Some(now + delay));
        assert!(t.ack_due(now + delay));
        t.on_packet(now, 1, true, false, delay, 2);
        assert!(t.ack_due(now));
        t.on_ack_sent();
        t.on_packet(now, 3, true, false, delay, 2);
        assert!(t.ack_due(now), "a gap triggers an immediate ACK");
        t.on_ack_sent();
        t.on_packet(now, 2, true, false, delay, 2);
        assert!(t.ack_due(now), "a late packet triggers an immediate ACK");
        assert!(t.is_duplicate(2));
        assert!(!t.is_duplicate(4));
    }

    #[test]
    fn non_ack_eliciting_packets_do_not_trigger_acks() {
        let now = Instant::now();
        let mut t = AckTracker::default();
        t.on_packet(now, 0, false, true, Duration::ZERO, 2);
        assert!(!t.ack_due(now));
        assert!(t.received.contains(0));
    }

    #[test]
    fn pruning_after_ack_of_ack() {
        let now = Instant::now();
        let mut t = AckTracker::default();
        for pn in [0, 1, 2, 5, 6, 9] {
            t.on_packet(now, pn, true, false, Duration::ZERO, 2);
        }
        t.on_ack_acked(6);
        assert!(
            t.is_duplicate(1),
            "pruned packet numbers count as duplicates"
        );
        assert!(t.received.contains(5) && t.received.contains(9));
        assert!(!t.received.contains(2));
    }
}
