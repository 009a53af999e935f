//! Sent-packet tracking, acknowledgment processing and loss detection for one
//! packet-number space (RFC 9002 section 6 and Appendix A).

use super::delivery_rate::DeliveryStamp;
use super::window::PacketWindow;
use super::{K_PACKET_THRESHOLD, RttEstimator, pto_duration};
use crate::error::TransportError;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

/// How long a packet declared lost is remembered so that a late acknowledgment of it can be
/// reported as a spurious loss, in PTO periods (without `max_ack_delay` and backoff).
const LOST_RETENTION_PTOS: u32 = 3;

/// Which kind of packet-number space a [`SpaceRecovery`] tracks.
///
/// With the multipath extension there is one application-data space per path; Initial and
/// Handshake exist only on the first path.
#[derive(Debug, Copy, Clone, Eq, PartialEq, Hash)]
pub enum SpaceKind {
    /// Initial packets.
    Initial,
    /// Handshake packets.
    Handshake,
    /// 0-RTT and 1-RTT packets of one path.
    ApplicationData,
}

/// What a sender remembers about one packet until it is acknowledged, declared lost or
/// discarded (RFC 9002 Appendix A.1.1), plus the connection's own `payload` (typically the
/// list of frames to retransmit if the packet is lost).
///
/// Every packet number that is used, including ACK-only packets (`ack_eliciting` and
/// `in_flight` false), must be reported to [`SpaceRecovery::on_packet_sent`], and packet
/// numbers that are deliberately not used must be left as gaps or reported with
/// [`SpaceRecovery::skip_packet_number`]: acknowledgments of anything else are rejected
/// as acknowledgments of packets never sent.
#[derive(Debug, Clone)]
pub struct SentPacket<T> {
    /// time_sent: when the packet was sent.
    pub time_sent: Instant,
    /// sent_bytes: the size of the packet including QUIC header and AEAD overhead, without
    /// UDP or IP overhead.
    pub size: u16,
    /// Whether the packet contains ack-eliciting frames (anything but ACK, PADDING and
    /// CONNECTION_CLOSE).
    pub ack_eliciting: bool,
    /// Whether the packet counts toward bytes in flight (ack-eliciting or containing
    /// PADDING).
    pub in_flight: bool,
    /// Delivery-rate state stamped by the path's
    /// [`super::DeliveryRateEstimator::on_packet_sent`]; `None` for packets that do not
    /// count toward bytes in flight or when delivery-rate estimation is not used.
    pub delivery: Option<DeliveryStamp>,
    /// The connection's retransmission bookkeeping for this packet.
    pub payload: T,
}

/// An outstanding packet as stored in a [`SpaceRecovery`].
#[derive(Debug, Clone)]
struct Entry<T> {
    packet: SentPacket<T>,
    /// True if some packet number between the previous still-tracked packet (in packet
    /// number order) and this one has been acknowledged. Maintained so that persistent
    /// congestion can be decided exactly (RFC 9002 section 7.6.2).
    acked_before: bool,
}

/// Why a packet was declared lost (the qlog `packet_lost` trigger).
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub enum LossReason {
    /// kPacketThreshold packets sent later were acknowledged (qlog
    /// `reordering_threshold`).
    PacketThreshold,
    /// The packet was sent more than the time threshold before an acknowledged one (qlog
    /// `time_threshold`).
    TimeThreshold,
}

impl LossReason {
    /// The qlog `packet_lost` trigger name.
    pub fn qlog_trigger(self) -> &'static str {
        match self {
            LossReason::PacketThreshold => "reordering_threshold",
            LossReason::TimeThreshold => "time_threshold",
        }
    }
}

/// One packet declared lost.
#[derive(Debug, Clone)]
pub struct LostPacket<T> {
    /// Its packet number.
    pub pn: u64,
    /// What was recorded when it was sent.
    pub packet: SentPacket<T>,
    /// Which threshold declared it lost.
    pub reason: LossReason,
    /// Whether an acknowledged packet number lies between the previous packet of the same
    /// batch and this one (meaningless for the first packet of a batch).
    acked_since_previous: bool,
}

/// The packets declared lost by one run of loss detection on one space, in ascending packet
/// number order.
#[derive(Debug, Clone)]
pub struct LostPackets<T> {
    packets: Vec<LostPacket<T>>,
}

impl<T> Default for LostPackets<T> {
    fn default() -> Self {
        LostPackets {
            packets: Vec::new(),
        }
    }
}

impl<T> LostPackets<T> {
    /// Whether no packet was declared lost.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// How many packets were declared lost.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// The lost packets, in ascending packet-number order.
    pub fn iter(&self) -> std::slice::Iter<'_, LostPacket<T>> {
        self.packets.iter()
    }

    /// The total size of the lost packets that counted toward bytes in flight. The caller
    /// removes this from the path's bytes in flight.
    pub fn in_flight_bytes(&self) -> u64 {
        self.packets
            .iter()
            .filter(|p| p.packet.in_flight)
            .map(|p| u64::from(p.packet.size))
            .sum()
    }

    /// `sent_time_of_last_loss` of RFC 9002 Appendix B.8: the send time of the newest lost
    /// packet that was in flight, or `None` if no in-flight packet was lost (then there is
    /// no congestion event).
    pub fn newest_in_flight_sent_time(&self) -> Option<Instant> {
        self.packets
            .iter()
            .filter(|p| p.packet.in_flight)
            .map(|p| p.packet.time_sent)
            .max()
    }

    /// Whether this batch establishes persistent congestion (RFC 9002 section 7.6.2).
    ///
    /// True when two ack-eliciting packets of the batch, both sent after the path's first
    /// RTT sample, are more than the persistent congestion duration apart and no packet
    /// sent between them was acknowledged. `rtt` is the estimator of the path the space
    /// belongs to; `max_ack_delay` is the peer's, included irrespective of the space.
    ///
    /// Assumptions, documented per the brief:
    /// - Only this space's packets are considered. RFC 9002 allows this ("MAY use state
    ///   for just the packet number space that was acknowledged"); it can only err towards
    ///   declaring persistent congestion. In a multipath connection every path other than
    ///   the first has a single space, so this is exact there.
    /// - As in Appendix B.8, only packets of this batch count as the two endpoints; packets
    ///   between them that were declared lost earlier, skipped or never acknowledged do
    ///   not interrupt the period, an acknowledged one does. [`SpaceRecovery`] tracks
    ///   acknowledged packet numbers precisely for this.
    ///
    /// When this returns true the caller reports it to the congestion controller
    /// ([`crate::cc::CongestionEvent::persistent_congestion`]) and calls
    /// [`RttEstimator::on_persistent_congestion`].
    pub fn in_persistent_congestion(&self, rtt: &RttEstimator, max_ack_delay: Duration) -> bool {
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.6.2
        //# The persistent congestion period SHOULD NOT start until there is at least one
        //# RTT sample.
        let Some(first_sample) = rtt.first_sample_time() else {
            return false;
        };
        let threshold = rtt.persistent_congestion_duration(max_ack_delay);
        // Send time of the earliest ack-eliciting packet of the current run of lost packets
        // with no acknowledged packet in between.
        let mut run_start: Option<Instant> = None;
        for lost in &self.packets {
            //= https://www.rfc-editor.org/rfc/rfc9002#section-7.6.2
            //# * a prior RTT sample existed when these two packets were sent.
            if lost.packet.time_sent <= first_sample {
                continue;
            }
            //= https://www.rfc-editor.org/rfc/rfc9002#section-7.6.2
            //# * across all packet number spaces, none of the packets sent between the send
            //#   times of these two packets are acknowledged;
            if lost.acked_since_previous {
                run_start = None;
            }
            //= https://www.rfc-editor.org/rfc/rfc9002#section-7.6.2
            //# These two packets MUST be ack-eliciting, since a receiver is required to
            //# acknowledge only ack-eliciting packets within its maximum acknowledgment delay;
            if !lost.packet.ack_eliciting {
                continue;
            }
            match run_start {
                None => run_start = Some(lost.packet.time_sent),
                //= https://www.rfc-editor.org/rfc/rfc9002#section-7.6.2
                //# * the duration between the send times of these two packets exceeds the
                //#   persistent congestion duration ({{pc-duration}}); and
                Some(start) => {
                    if lost.packet.time_sent.saturating_duration_since(start) > threshold {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// The lost packets as a vector, in ascending packet-number order.
    pub fn into_vec(self) -> Vec<LostPacket<T>> {
        self.packets
    }
}

impl<T> IntoIterator for LostPackets<T> {
    type Item = LostPacket<T>;
    type IntoIter = std::vec::IntoIter<LostPacket<T>>;
    fn into_iter(self) -> Self::IntoIter {
        self.packets.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a LostPackets<T> {
    type Item = &'a LostPacket<T>;
    type IntoIter = std::slice::Iter<'a, LostPacket<T>>;
    fn into_iter(self) -> Self::IntoIter {
        self.packets.iter()
    }
}

/// A packet that was acknowledged after having been declared lost.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct SpuriousLoss {
    /// Its packet number.
    pub pn: u64,
    /// When it was sent.
    pub time_sent: Instant,
    /// When it was declared lost.
    pub declared_lost: Instant,
    /// Its size.
    pub size: u16,
}

/// Remembered about a packet declared lost, to recognise a late acknowledgment.
#[derive(Debug, Copy, Clone)]
struct LostRecord {
    time_sent: Instant,
    declared_lost: Instant,
    size: u16,
}

/// The result of processing one ACK (or PATH_ACK) frame for a space.
#[derive(Debug, Clone)]
pub struct AckOutcome<T> {
    /// The newly acknowledged packets, in ascending packet-number order.
    pub acked: Vec<(u64, SentPacket<T>)>,
    /// The RTT sample taken from this ACK, if it newly acknowledged the largest
    /// acknowledged packet and at least one ack-eliciting packet (RFC 9002 section 5.1).
    /// When set, the estimator passed to [`SpaceRecovery::on_ack_received`] has already
    /// been updated with it.
    pub rtt_sample: Option<Duration>,
    /// Whether any newly acknowledged packet was ack-eliciting.
    pub includes_ack_eliciting: bool,
    /// The packets declared lost by the loss detection that ran after the acknowledgments
    /// were applied (RFC 9002 Appendix A.7).
    pub lost: LostPackets<T>,
    /// Packets acknowledged after having been declared lost (retained for three PTO
    /// periods after the declaration). The connection may use these to undo a congestion
    /// response ([`crate::cc::CongestionController::on_spurious_congestion`]).
    pub spurious: Vec<SpuriousLoss>,
}

impl<T> AckOutcome<T> {
    fn empty() -> Self {
        AckOutcome {
            acked: Vec::new(),
            rtt_sample: None,
            includes_ack_eliciting: false,
            lost: LostPackets::default(),
            spurious: Vec::new(),
        }
    }

    /// Total size of the newly acknowledged packets that counted toward bytes in flight.
    pub fn acked_in_flight_bytes(&self) -> u64 {
        self.acked
            .iter()
            .filter(|(_, p)| p.in_flight)
            .map(|(_, p)| u64::from(p.size))
            .sum()
    }
}

/// An ACK frame acknowledged a packet number that was never sent in this space.
///
//= https://www.rfc-editor.org/rfc/rfc9000#section-13.1
//# An endpoint SHOULD treat receipt of an acknowledgment for a packet it did not
//# send as a connection error of type PROTOCOL_VIOLATION, if it is able to detect
//# the condition.
#[derive(Debug, Clone, Copy, Eq, PartialEq, thiserror::Error)]
pub enum AckError {
    /// The acknowledged packet number is above the largest one sent.
    #[error("acknowledgment of packet {pn}, which has not been sent")]
    NotYetSent {
        /// The offending packet number.
        pn: u64,
    },
    /// The acknowledged packet number was deliberately skipped by the sender.
    #[error("acknowledgment of skipped packet number {pn}")]
    Skipped {
        /// The offending packet number.
        pn: u64,
    },
}

impl From<AckError> for TransportError {
    fn from(e: AckError) -> Self {
        TransportError::protocol_violation(e.to_string())
    }
}

/// Loss-detection state of one packet-number space (RFC 9002 Appendix A), generic over the
/// retransmission payload `T` the connection stores with each packet.
///
/// The space does not own an RTT estimator, congestion controller or timer: the path that
/// the space belongs to owns those, and the connection composes the loss-detection timer
/// from [`SpaceRecovery::loss_time`], [`SpaceRecovery::pto_time`] and
/// [`SpaceRecovery::has_ack_eliciting_in_flight`] of the path's spaces (see the
/// [module documentation](super)).
#[derive(Debug, Clone)]
pub struct SpaceRecovery<T> {
    kind: SpaceKind,
    /// sent_packets, keyed by packet number.
    sent: PacketWindow<Entry<T>>,
    /// The largest packet number sent or skipped.
    largest_sent: Option<u64>,
    /// Packet numbers never sent: start -> inclusive end, disjoint, pruned once they fall
    /// below everything still tracked.
    skipped: BTreeMap<u64, u64>,
    /// largest_acked_packet.
    largest_acked: Option<u64>,
    /// Send time of the packet numbered `largest_acked`, if it was sent by us.
    largest_acked_time_sent: Option<Instant>,
    /// loss_time.
    loss_time: Option<Instant>,
    /// time_of_last_ack_eliciting_packet.
    time_of_last_ack_eliciting: Option<Instant>,
    /// Number of tracked packets that are ack-eliciting (hence in flight).
    ack_eliciting_in_flight: u64,
    /// Sum of the sizes of tracked packets that are in flight.
    bytes_in_flight: u64,
    /// Packets recently declared lost, for spurious-loss detection.
    recently_lost: BTreeMap<u64, LostRecord>,
    /// No record in `recently_lost` was declared lost before this (the earliest
    /// declaration, or earlier once that record is gone): until the retention horizon
    /// passes it, pruning has nothing to drop and skips its walk over the records.
    oldest_lost_record: Option<Instant>,
    /// The ranges of the acknowledgment being processed, decoded once per frame into a
    /// buffer kept from one frame to the next.
    ack_ranges: Vec<RangeInclusive<u64>>,
    /// The emptied list of acknowledged packets of an earlier outcome, handed back with
    /// [`SpaceRecovery::recycle`]: the next outcome's list reuses its allocation.
    spare_acked: Vec<(u64, SentPacket<T>)>,
}

impl<T> SpaceRecovery<T> {
    /// Empty state for a space of the given kind.
    pub fn new(kind: SpaceKind) -> Self {
        SpaceRecovery {
            kind,
            sent: PacketWindow::default(),
            largest_sent: None,
            skipped: BTreeMap::new(),
            largest_acked: None,
            largest_acked_time_sent: None,
            loss_time: None,
            time_of_last_ack_eliciting: None,
            ack_eliciting_in_flight: 0,
            bytes_in_flight: 0,
            recently_lost: BTreeMap::new(),
            oldest_lost_record: None,
            ack_ranges: Vec::new(),
            spare_acked: Vec::new(),
        }
    }

    /// The kind of space.
    pub fn kind(&self) -> SpaceKind {
        self.kind
    }

    /// Records a sent packet (RFC 9002 Appendix A.5 `OnPacketSent`, without the
    /// congestion-control and timer parts, which belong to the caller).
    ///
    /// Packet numbers must increase. Any packet numbers between the previous largest sent
    /// (or skipped) one and `pn` are treated as skipped. Reusing a packet number is a bug in
    /// the caller; it is caught by a debug assertion, and in release builds the earlier
    /// packet is replaced.
    pub fn on_packet_sent(&mut self, pn: u64, packet: SentPacket<T>) {
        match self.largest_sent {
            Some(largest) if pn <= largest => {
                debug_assert!(
                    pn > largest,
                    "packet number {pn} reused (largest {largest})"
                );
                if let Some(old) = self.sent.remove(pn) {
                    self.forget(&old.packet);
                }
            }
            Some(largest) => {
                if pn > largest + 1 {
                    self.add_skipped(largest + 1, pn - 1);
                }
                self.largest_sent = Some(pn);
            }
            None => {
                if pn > 0 {
                    self.add_skipped(0, pn - 1);
                }
                self.largest_sent = Some(pn);
            }
        }
        //= https://www.rfc-editor.org/rfc/rfc9002#section-a.5
        //# if (in_flight):
        //#   if (ack_eliciting):
        //#     time_of_last_ack_eliciting_packet[pn_space] = now()
        if packet.in_flight {
            self.bytes_in_flight += u64::from(packet.size);
            if packet.ack_eliciting {
                self.time_of_last_ack_eliciting = Some(packet.time_sent);
            }
        }
        if packet.ack_eliciting {
            self.ack_eliciting_in_flight += 1;
        }
        self.sent.insert(
            pn,
            Entry {
                packet,
                acked_before: false,
            },
        );
    }

    /// Marks `pn` as deliberately not used, so that an acknowledgment of it is a
    /// PROTOCOL_VIOLATION. Equivalent to leaving a gap before the next
    /// [`SpaceRecovery::on_packet_sent`]. `pn` must be above every packet number used so
    /// far (checked by a debug assertion; ignored otherwise).
    ///
    //= https://www.rfc-editor.org/rfc/rfc9000#section-21.4
    //# An endpoint MAY skip packet numbers when sending packets to detect
    //# this behavior.
    pub fn skip_packet_number(&mut self, pn: u64) {
        let from = match self.largest_sent {
            Some(largest) if pn <= largest => {
                debug_assert!(
                    pn > largest,
                    "skipping used packet number {pn} (largest {largest})"
                );
                return;
            }
            Some(largest) => largest + 1,
            None => 0,
        };
        self.add_skipped(from, pn);
        self.largest_sent = Some(pn);
    }

    /// Records `start..=end` as skipped, merging with the previous range when adjacent.
    fn add_skipped(&mut self, start: u64, end: u64) {
        if let Some((_, last_end)) = self.skipped.iter_mut().next_back()
            && last_end.checked_add(1) == Some(start)
        {
            *last_end = end;
            return;
        }
        self.skipped.insert(start, end);
    }

    /// Checks one acknowledged range against what was sent.
    fn validate_range(&self, range: &RangeInclusive<u64>) -> Result<(), AckError> {
        let (start, end) = (*range.start(), *range.end());
        match self.largest_sent {
            Some(largest) if end <= largest => {}
            _ => return Err(AckError::NotYetSent { pn: end }),
        }
        // Skipped ranges are disjoint and sorted, so only the last one starting at or
        // below `end` can intersect `start..=end` (none if the first starts above it).
        if self
            .skipped
            .first_key_value()
            .is_none_or(|(&first, _)| end < first)
        {
            return Ok(());
        }
        if let Some((&s_start, &s_end)) = self.skipped.range(..=end).next_back()
            && s_end >= start
        {
            return Err(AckError::Skipped {
                pn: s_start.max(start),
            });
        }
        Ok(())
    }

    /// Takes back the list of acknowledged packets of an outcome the caller is done
    /// with, emptied, so that the next acknowledgment fills it without allocating.
    pub fn recycle(&mut self, mut acked: Vec<(u64, SentPacket<T>)>) {
        acked.clear();
        self.spare_acked = acked;
    }

    /// Processes the acknowledged ranges of one ACK frame for this space (RFC 9002
    /// Appendix A.7 `OnAckReceived`), then runs loss detection.
    ///
    /// - `ranges`: the acknowledged packet numbers as decoded from the frame (any order;
    ///   frames list them in descending order). The iterator is walked twice: once to
    ///   validate everything before any state changes, once to apply it.
    /// - `ack_delay`: the decoded ACK Delay (ignored for the Initial space, whose
    ///   acknowledgments are not delayed).
    /// - `rtt`: the estimator of the path this space belongs to; updated here when the ACK
    ///   yields an RTT sample, before loss detection runs.
    /// - `max_ack_delay`, `handshake_confirmed`: see [`RttEstimator::update`].
    ///
    /// Returns an error, without changing any state, if a range acknowledges a packet
    /// number that was never sent (above the largest sent, or skipped); the connection
    /// closes with PROTOCOL_VIOLATION ([`AckError`] converts into a [`TransportError`]).
    ///
    /// Left to the caller: ECN processing (use [`SpaceRecovery::largest_acked_time_sent`]),
    /// informing the congestion controller of `acked` and `lost`, persistent congestion
    /// ([`LostPackets::in_persistent_congestion`]), resetting `pto_count` and re-arming
    /// the loss-detection timer.
    pub fn on_ack_received<I>(
        &mut self,
        now: Instant,
        ranges: I,
        ack_delay: Duration,
        rtt: &mut RttEstimator,
        max_ack_delay: Duration,
        handshake_confirmed: bool,
    ) -> Result<AckOutcome<T>, AckError>
    where
        I: IntoIterator<Item = RangeInclusive<u64>>,
    {
        // Decoded once (a frame repeats up to 64 older ranges with every acknowledgment),
        // then validated and applied from the buffer.
        let mut buffer = std::mem::take(&mut self.ack_ranges);
        buffer.clear();
        buffer.extend(ranges.into_iter().filter(|r| !r.is_empty()));
        let result = self.apply_ack_ranges(
            now,
            &buffer,
            ack_delay,
            rtt,
            max_ack_delay,
            handshake_confirmed,
        );
        self.ack_ranges = buffer;
        result
    }

    /// [`SpaceRecovery::on_ack_received`] for non-empty `ranges`.
    fn apply_ack_ranges(
        &mut self,
        now: Instant,
        ranges: &[RangeInclusive<u64>],
        ack_delay: Duration,
        rtt: &mut RttEstimator,
        max_ack_delay: Duration,
        handshake_confirmed: bool,
    ) -> Result<AckOutcome<T>, AckError> {
        let mut largest_in_frame: Option<u64> = None;
        for range in ranges {
            self.validate_range(range)?;
            largest_in_frame = largest_in_frame.max(Some(*range.end()));
        }
        let Some(largest_in_frame) = largest_in_frame else {
            return Ok(AckOutcome::empty());
        };

        self.prune_lost_records(now, rtt);

        //= https://www.rfc-editor.org/rfc/rfc9002#section-a.7
        //# if (largest_acked_packet[pn_space] == infinite):
        //#   largest_acked_packet[pn_space] = ack.largest_acked
        //# else:
        //#   largest_acked_packet[pn_space] =
        //#       max(largest_acked_packet[pn_space], ack.largest_acked)
        self.largest_acked = self.largest_acked.max(Some(largest_in_frame));

        // DetectAndRemoveAckedPackets.
        // As frames list them: each range below the one before. Then once a range is below
        // every tracked packet and lost record, so are all after it.
        let descending = ranges.windows(2).all(|w| w[1].end() < w[0].start());
        let mut outcome = AckOutcome::empty();
        outcome.acked = std::mem::take(&mut self.spare_acked);
        // The numbers of the lost-packet records span at most this (it only shrinks while
        // the ranges are applied): ranges outside it cost no search of the records.
        let lost_span = self
            .recently_lost
            .first_key_value()
            .zip(self.recently_lost.last_key_value())
            .map(|((&first, _), (&last, _))| first..=last);
        for range in ranges {
            let end = *range.end();
            // A frame repeats older ranges (up to 64) with every acknowledgment: those below
            // every tracked packet and lost record cost no searches.
            let below = |first: Option<u64>| first.is_none_or(|pn| end < pn);
            if below(self.sent.first_pn()) && below(lost_span.as_ref().map(|s| *s.start())) {
                // As below: the next tracked packet has an acknowledged one before it.
                if let Some(entry) = self.sent.first_mut() {
                    entry.acked_before = true;
                }
                if descending {
                    break;
                }
                continue;
            }
            let mut sent = std::mem::take(&mut self.sent);
            sent.remove_range(range, |pn, entry| {
                self.forget(&entry.packet);
                outcome.includes_ack_eliciting |= entry.packet.ack_eliciting;
                outcome.acked.push((pn, entry.packet));
            });
            self.sent = sent;
            // The next tracked packet now has an acknowledged packet number before it.
            if let Some(next) = end.checked_add(1)
                && let Some(entry) = self.sent.first_from_mut(next)
            {
                entry.acked_before = true;
            }
            let may_hold_lost = lost_span
                .as_ref()
                .is_some_and(|s| *s.start() <= end && *range.start() <= *s.end());
            while may_hold_lost
                && let Some((&pn, _)) = self.recently_lost.range(range.clone()).next()
            {
                if let Some(rec) = self.recently_lost.remove(&pn) {
                    outcome.spurious.push(SpuriousLoss {
                        pn,
                        time_sent: rec.time_sent,
                        declared_lost: rec.declared_lost,
                        size: rec.size,
                    });
                }
            }
        }
        outcome.spurious.sort_unstable_by_key(|s| s.pn);

        //= https://www.rfc-editor.org/rfc/rfc9002#section-a.7
        //# // Nothing to do if there are no newly acked packets.
        //# if (newly_acked_packets.empty()):
        //#   return
        if outcome.acked.is_empty() {
            self.prune_skipped();
            return Ok(outcome);
        }
        outcome.acked.sort_unstable_by_key(|(pn, _)| *pn);

        if let Some((largest_pn, largest)) = outcome.acked.last()
            && *largest_pn == largest_in_frame
        {
            // A reordered, older ACK does not move the space's largest acknowledged.
            if self.largest_acked == Some(largest_in_frame) {
                self.largest_acked_time_sent = Some(largest.time_sent);
            }
            //= https://www.rfc-editor.org/rfc/rfc9002#section-5.1
            //# An endpoint generates an RTT sample on receiving an ACK frame that meets the
            //# following two conditions:
            //#
            //# - the largest acknowledged packet number is newly acknowledged, and
            //#
            //# - at least one of the newly acknowledged packets was ack-eliciting.
            if outcome.includes_ack_eliciting {
                //= https://www.rfc-editor.org/rfc/rfc9002#section-5.1
                //# ~~~pseudocode
                //# latest_rtt = ack_time - send_time_of_largest_acked
                //# ~~~
                let latest_rtt = now.saturating_duration_since(largest.time_sent);
                //= https://www.rfc-editor.org/rfc/rfc9002#section-5.3
                //# - MAY ignore the acknowledgment delay for Initial packets, since these
                //#   acknowledgments are not delayed by the peer ({{Section 13.2.1 of
                //#   QUIC-TRANSPORT}});
                let ack_delay = if self.kind == SpaceKind::Initial {
                    Duration::ZERO
                } else {
                    ack_delay
                };
                rtt.update(
                    now,
                    ack_delay,
                    latest_rtt,
                    max_ack_delay,
                    handshake_confirmed,
                );
                outcome.rtt_sample = Some(latest_rtt);
            }
        }

        outcome.lost = self.detect_lost(now, rtt);
        Ok(outcome)
    }

    /// Declares lost the packets that meet the packet or time threshold (RFC 9002
    /// Appendix A.10 `DetectAndRemoveLostPackets`) and recomputes
    /// [`SpaceRecovery::loss_time`]. Called by [`SpaceRecovery::on_ack_received`] and, by
    /// the connection, when the loss-detection timer fires for this space's `loss_time`.
    ///
    /// Returns no packets before anything has been acknowledged in this space.
    pub fn detect_lost(&mut self, now: Instant, rtt: &RttEstimator) -> LostPackets<T> {
        self.loss_time = None;
        let Some(largest_acked) = self.largest_acked else {
            return LostPackets::default();
        };
        //= https://www.rfc-editor.org/rfc/rfc9002#section-a.10
        //# loss_delay = kTimeThreshold * max(latest_rtt, smoothed_rtt)
        //#
        //# // Minimum time of kGranularity before packets are deemed lost.
        //# loss_delay = max(loss_delay, kGranularity)
        //#
        //# // Packets sent before this time are deemed lost.
        //# lost_send_time = now() - loss_delay
        let loss_delay = rtt.loss_delay();
        let lost_send_time = now.checked_sub(loss_delay);

        // (pn, reason, acknowledged packet between the previous lost packet and this one)
        let mut lost: Vec<(u64, LossReason, bool)> = Vec::new();
        let mut loss_time: Option<Instant> = None;
        // OR of `acked_before` over entries visited since the previous lost packet.
        let mut acked_since_lost = false;
        // OR of `acked_before` over lost entries not yet folded into a surviving entry.
        let mut carry = false;
        for (pn, entry) in self.sent.up_to_mut(largest_acked) {
            acked_since_lost |= entry.acked_before;
            //= https://www.rfc-editor.org/rfc/rfc9002#section-a.10
            //# if (unacked.time_sent <= lost_send_time ||
            //#     largest_acked_packet[pn_space] >=
            //#       unacked.packet_number + kPacketThreshold):
            let by_packets = pn
                .checked_add(K_PACKET_THRESHOLD)
                .is_some_and(|t| largest_acked >= t);
            let by_time = lost_send_time.is_some_and(|t| entry.packet.time_sent <= t);
            if by_packets || by_time {
                let reason = if by_packets {
                    LossReason::PacketThreshold
                } else {
                    LossReason::TimeThreshold
                };
                lost.push((pn, reason, acked_since_lost));
                acked_since_lost = false;
                carry |= entry.acked_before;
            } else {
                if carry {
                    entry.acked_before = true;
                    carry = false;
                }
                //= https://www.rfc-editor.org/rfc/rfc9002#section-6.1.2
                //# If packets sent prior to the largest acknowledged packet cannot yet be declared
                //# lost, then a timer SHOULD be set for the remaining time.
                if let Some(t) = entry.packet.time_sent.checked_add(loss_delay) {
                    loss_time = Some(loss_time.map_or(t, |lt| lt.min(t)));
                }
            }
        }
        if carry
            && let Some(next) = largest_acked.checked_add(1)
            && let Some(entry) = self.sent.first_from_mut(next)
        {
            entry.acked_before = true;
        }
        self.loss_time = loss_time;

        let mut packets = Vec::with_capacity(lost.len());
        for (pn, reason, acked_since_previous) in lost {
            let Some(entry) = self.sent.remove(pn) else {
                continue;
            };
            self.forget(&entry.packet);
            if entry.packet.in_flight {
                self.oldest_lost_record = Some(self.oldest_lost_record.map_or(now, |t| t.min(now)));
                self.recently_lost.insert(
                    pn,
                    LostRecord {
                        time_sent: entry.packet.time_sent,
                        declared_lost: now,
                        size: entry.packet.size,
                    },
                );
            }
            packets.push(LostPacket {
                pn,
                packet: entry.packet,
                reason,
                acked_since_previous,
            });
        }
        self.prune_skipped();
        self.prune_lost_records(now, rtt);
        LostPackets { packets }
    }

    /// Removes every tracked packet and resets the timers of this space, returning the
    /// removed packets in ascending packet-number order.
    ///
    /// Used when the space's keys are discarded (the caller removes the packets from bytes
    /// in flight without informing the congestion controller of a loss, and resets
    /// `pto_count`), and when all state of an abandoned path is deleted (the caller then
    /// treats the packets as lost and retransmits their frames elsewhere).
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.4
    //# The sender MUST discard all recovery state associated with those packets
    //# and MUST remove them from the count of bytes in flight.
    //
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4.3
    //# When an endpoint finally deletes all state associated with the path,
    //# the packets sent over the path and not yet acknowledged MUST be considered lost.
    pub fn discard(&mut self) -> Vec<(u64, SentPacket<T>)> {
        //= https://www.rfc-editor.org/rfc/rfc9002#section-a.11
        //# sent_packets[pn_space].clear()
        //# // Reset the loss detection and PTO timer
        //# time_of_last_ack_eliciting_packet[pn_space] = 0
        //# loss_time[pn_space] = 0
        let sent = self.sent.take_all();
        self.time_of_last_ack_eliciting = None;
        self.loss_time = None;
        self.ack_eliciting_in_flight = 0;
        self.bytes_in_flight = 0;
        self.recently_lost.clear();
        self.oldest_lost_record = None;
        sent.into_iter().map(|(pn, e)| (pn, e.packet)).collect()
    }

    /// When the PTO for this space expires, or `None` if no ack-eliciting packet is in
    /// flight here (RFC 9002 Appendix A.8 `GetPtoTimeAndSpace`, one space): the send time
    /// of the last ack-eliciting packet plus [`pto_duration`], which includes
    /// `max_ack_delay` only for the application data space.
    ///
    /// The caller applies the remaining rules: no PTO for the application data space
    /// before the handshake is confirmed, the client's anti-deadlock PTO, and no PTO while
    /// a loss time is set. Also `None` if the deadline is not representable, which only a
    /// runaway `pto_count` can cause (the idle timeout bounds consecutive PTOs).
    pub fn pto_time(
        &self,
        rtt: &RttEstimator,
        max_ack_delay: Duration,
        pto_count: u32,
    ) -> Option<Instant> {
        if self.ack_eliciting_in_flight == 0 {
            return None;
        }
        //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.1
        //# When the PTO is armed for Initial or Handshake packet number spaces, the
        //# max_ack_delay in the PTO period computation is set to 0, since the peer is
        //# expected to not delay these packets intentionally; see {{Section 13.2.1 of
        //# QUIC-TRANSPORT}}.
        let max_ack_delay = match self.kind {
            SpaceKind::ApplicationData => max_ack_delay,
            SpaceKind::Initial | SpaceKind::Handshake => Duration::ZERO,
        };
        self.time_of_last_ack_eliciting?
            .checked_add(pto_duration(rtt, max_ack_delay, pto_count))
    }

    /// loss_time: when the earliest outstanding packet below the largest acknowledged one
    /// can be declared lost by the time threshold, if any.
    pub fn loss_time(&self) -> Option<Instant> {
        self.loss_time
    }

    /// time_of_last_ack_eliciting_packet, cleared when the space is discarded.
    pub fn time_of_last_ack_eliciting_packet(&self) -> Option<Instant> {
        self.time_of_last_ack_eliciting
    }

    /// Whether any ack-eliciting packet of this space is in flight.
    pub fn has_ack_eliciting_in_flight(&self) -> bool {
        self.ack_eliciting_in_flight != 0
    }

    /// The number of ack-eliciting packets of this space in flight.
    pub fn ack_eliciting_in_flight(&self) -> u64 {
        self.ack_eliciting_in_flight
    }

    /// This space's contribution to the path's bytes in flight.
    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    /// largest_acked_packet: the largest packet number acknowledged so far.
    pub fn largest_acked(&self) -> Option<u64> {
        self.largest_acked
    }

    /// The send time of the largest acknowledged packet, for ECN processing (RFC 9002
    /// Appendix B.7 `ProcessECN`).
    pub fn largest_acked_time_sent(&self) -> Option<Instant> {
        self.largest_acked_time_sent
    }

    /// The largest packet number sent or skipped so far.
    pub fn largest_sent(&self) -> Option<u64> {
        self.largest_sent
    }

    /// Whether `pn` is recorded as skipped (and not yet pruned).
    pub fn is_skipped(&self, pn: u64) -> bool {
        self.skipped
            .range(..=pn)
            .next_back()
            .is_some_and(|(_, &end)| end >= pn)
    }

    /// The number of packets still tracked (neither acknowledged, lost nor discarded).
    pub fn outstanding_len(&self) -> usize {
        self.sent.len()
    }

    /// The tracked packets in ascending packet-number order, e.g. to choose data for a
    /// probe packet or to retransmit the frames of a path whose PTO expired on another
    /// path (draft-ietf-quic-multipath-21 section 5.7).
    pub fn outstanding(&self) -> impl DoubleEndedIterator<Item = (u64, &SentPacket<T>)> {
        self.sent.iter().map(|(pn, e)| (pn, &e.packet))
    }

    /// Like [`SpaceRecovery::outstanding`], with mutable payloads (the bookkeeping fields
    /// of the packets stay read-only).
    pub fn outstanding_payloads_mut(&mut self) -> impl DoubleEndedIterator<Item = (u64, &mut T)> {
        self.sent
            .iter_mut()
            .map(|(pn, e)| (pn, &mut e.packet.payload))
    }

    /// Undoes the accounting of a packet leaving `sent`.
    fn forget(&mut self, packet: &SentPacket<T>) {
        if packet.in_flight {
            self.bytes_in_flight = self.bytes_in_flight.saturating_sub(u64::from(packet.size));
        }
        if packet.ack_eliciting {
            self.ack_eliciting_in_flight = self.ack_eliciting_in_flight.saturating_sub(1);
        }
    }

    /// Drops skipped ranges that lie below everything still tracked: no honest
    /// acknowledgment can name them any more, and keeping them would grow without bound.
    fn prune_skipped(&mut self) {
        let floor = match self.sent.first_pn() {
            Some(smallest) => smallest,
            None => self.largest_acked.unwrap_or(0),
        };
        while let Some((&start, &end)) = self.skipped.iter().next()
            && end < floor
        {
            self.skipped.remove(&start);
        }
    }

    /// Drops lost-packet records older than the retention period.
    fn prune_lost_records(&mut self, now: Instant, rtt: &RttEstimator) {
        if let Some(horizon) = now.checked_sub(rtt.pto_base().saturating_mul(LOST_RETENTION_PTOS))
            && self.oldest_lost_record.is_some_and(|t| t < horizon)
        {
            self.recently_lost.retain(|_, r| r.declared_lost >= horizon);
            self.oldest_lost_record = self.recently_lost.values().map(|r| r.declared_lost).min();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TransportErrorCode;
    use crate::recovery::{K_GRANULARITY, K_INITIAL_RTT};
    use proptest::prelude::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn pkt(time_sent: Instant, size: u16) -> SentPacket<u64> {
        SentPacket {
            time_sent,
            size,
            ack_eliciting: true,
            in_flight: true,
            delivery: None,
            payload: 0,
        }
    }

    fn ack_only(time_sent: Instant) -> SentPacket<u64> {
        SentPacket {
            time_sent,
            size: 40,
            ack_eliciting: false,
            in_flight: false,
            delivery: None,
            payload: 0,
        }
    }

    fn ack(
        space: &mut SpaceRecovery<u64>,
        now: Instant,
        ranges: &[RangeInclusive<u64>],
        rtt: &mut RttEstimator,
    ) -> Result<AckOutcome<u64>, AckError> {
        space.on_ack_received(
            now,
            ranges.iter().cloned(),
            Duration::ZERO,
            rtt,
            ms(25),
            true,
        )
    }

    fn pns<T>(lost: &LostPackets<T>) -> Vec<u64> {
        lost.iter().map(|l| l.pn).collect()
    }

    #[test]
    fn ack_of_unsent_packet_is_protocol_violation() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        assert_eq!(
            ack(&mut space, t0, &[0..=0], &mut rtt).unwrap_err(),
            AckError::NotYetSent { pn: 0 }
        );
        for pn in 0..3 {
            space.on_packet_sent(pn, pkt(t0, 1200));
        }
        let err = ack(&mut space, t0, &[3..=3, 0..=1], &mut rtt).unwrap_err();
        assert_eq!(err, AckError::NotYetSent { pn: 3 });
        // Nothing changed.
        assert_eq!(space.outstanding_len(), 3);
        assert_eq!(space.largest_acked(), None);
        let te: TransportError = err.into();
        assert_eq!(te.code, TransportErrorCode::PROTOCOL_VIOLATION);
    }

    #[test]
    fn ack_of_skipped_packet_is_protocol_violation() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        space.on_packet_sent(0, pkt(t0, 1200));
        space.skip_packet_number(1);
        space.on_packet_sent(2, pkt(t0, 1200));
        // Implicit gap: 3 and 4 never used.
        space.on_packet_sent(5, pkt(t0, 1200));
        assert!(space.is_skipped(1) && space.is_skipped(3) && space.is_skipped(4));
        assert!(!space.is_skipped(2) && !space.is_skipped(5));
        assert_eq!(
            ack(&mut space, t0, &[0..=2], &mut rtt).unwrap_err(),
            AckError::Skipped { pn: 1 }
        );
        assert_eq!(
            ack(&mut space, t0, &[5..=5, 4..=4, 2..=2], &mut rtt).unwrap_err(),
            AckError::Skipped { pn: 4 }
        );
        assert_eq!(space.outstanding_len(), 3);
        let out = ack(&mut space, t0, &[5..=5, 2..=2, 0..=0], &mut rtt).unwrap();
        assert_eq!(
            out.acked.iter().map(|(pn, _)| *pn).collect::<Vec<_>>(),
            [0, 2, 5]
        );
        // Everything resolved: the skipped numbers are pruned.
        assert!(!space.is_skipped(1));
    }

    #[test]
    fn first_packet_number_above_zero_skips_the_rest() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        space.on_packet_sent(2, pkt(t0, 1200));
        assert_eq!(
            ack(&mut space, t0, &[0..=0], &mut rtt).unwrap_err(),
            AckError::Skipped { pn: 0 }
        );
    }

    #[test]
    fn duplicate_and_empty_acks_are_harmless() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        space.on_packet_sent(0, pkt(t0, 1200));
        let first = ack(&mut space, t0 + ms(50), &[0..=0], &mut rtt).unwrap();
        assert_eq!(first.acked.len(), 1);
        assert_eq!(first.rtt_sample, Some(ms(50)));
        let again = ack(&mut space, t0 + ms(70), &[0..=0], &mut rtt).unwrap();
        assert!(again.acked.is_empty() && again.rtt_sample.is_none());
        assert_eq!(rtt.latest(), ms(50));
        let none = ack(&mut space, t0 + ms(70), &[], &mut rtt).unwrap();
        assert!(none.acked.is_empty());
    }

    #[test]
    fn rtt_sample_rules() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        space.on_packet_sent(0, pkt(t0, 1200));
        space.on_packet_sent(1, pkt(t0 + ms(1), 1200));
        space.on_packet_sent(2, ack_only(t0 + ms(2)));
        // Largest (1) newly acked, ack-eliciting: sample from packet 1.
        let out = ack(&mut space, t0 + ms(41), &[1..=1], &mut rtt).unwrap();
        assert_eq!(out.rtt_sample, Some(ms(40)));
        assert!(out.includes_ack_eliciting);
        // Largest not newly acked: no sample even though packet 0 is ack-eliciting.
        let out = ack(&mut space, t0 + ms(90), &[0..=1], &mut rtt).unwrap();
        assert_eq!(out.acked.len(), 1);
        assert_eq!(out.rtt_sample, None);
        // Only a non-ack-eliciting packet newly acked: no sample.
        //= https://www.rfc-editor.org/rfc/rfc9002#section-5.1
        //# An RTT sample MUST NOT be generated on receiving an ACK frame that does not
        //# newly acknowledge at least one ack-eliciting packet.
        let out = ack(&mut space, t0 + ms(95), &[2..=2], &mut rtt).unwrap();
        assert_eq!(out.acked.len(), 1);
        assert!(!out.includes_ack_eliciting);
        assert_eq!(out.rtt_sample, None);
        assert_eq!(rtt.latest(), ms(40));
        assert_eq!(space.largest_acked_time_sent(), Some(t0 + ms(2)));
    }

    #[test]
    fn reordered_ack_keeps_largest_acked_time() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        space.on_packet_sent(0, pkt(t0, 1200));
        space.on_packet_sent(1, pkt(t0 + ms(1), 1200));
        ack(&mut space, t0 + ms(40), &[1..=1], &mut rtt).unwrap();
        // An older ACK frame (largest 0) arrives late: it still yields an RTT sample
        // (its largest is newly acknowledged) but the space's largest stays 1.
        let out = ack(&mut space, t0 + ms(45), &[0..=0], &mut rtt).unwrap();
        assert_eq!(out.rtt_sample, Some(ms(45)));
        assert_eq!(space.largest_acked(), Some(1));
        assert_eq!(space.largest_acked_time_sent(), Some(t0 + ms(1)));
    }

    #[test]
    fn initial_space_ignores_ack_delay() {
        let t0 = Instant::now();
        for (kind, expected) in [
            (SpaceKind::Initial, Duration::from_micros(102_500)),
            (SpaceKind::Handshake, Duration::from_micros(101_250)),
        ] {
            let mut rtt = RttEstimator::new(K_INITIAL_RTT);
            let mut space = SpaceRecovery::new(kind);
            space.on_packet_sent(0, pkt(t0, 1200));
            space.on_packet_sent(1, pkt(t0 + ms(200), 1200));
            ack(&mut space, t0 + ms(100), &[0..=0], &mut rtt).unwrap();
            // 120 ms sample with a 10 ms ack delay: subtracted except for Initial.
            space
                .on_ack_received(t0 + ms(320), [1..=1], ms(10), &mut rtt, ms(25), false)
                .unwrap();
            assert_eq!(rtt.smoothed(), expected, "{kind:?}");
        }
    }

    #[test]
    fn packet_threshold_loss() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        for pn in 0..6 {
            space.on_packet_sent(pn, pkt(t0 + ms(pn), 1000));
        }
        assert_eq!(space.bytes_in_flight(), 6000);
        // Ack 3: 0 is 3 below -> lost; 1 and 2 wait for the time threshold.
        let out = ack(&mut space, t0 + ms(20), &[3..=3], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), [0]);
        assert_eq!(
            out.lost.iter().next().unwrap().reason,
            LossReason::PacketThreshold
        );
        assert_eq!(out.lost.in_flight_bytes(), 1000);
        assert_eq!(out.lost.newest_in_flight_sent_time(), Some(t0));
        // rtt after one sample of 17 ms: loss delay 9/8 * 17 ms, timer from packet 1.
        assert_eq!(space.loss_time(), Some(t0 + ms(1) + rtt.loss_delay()));
        assert_eq!(space.bytes_in_flight(), 4000);
        assert_eq!(space.ack_eliciting_in_flight(), 4);
        // Ack 5: 1 and 2 are now 3 below.
        let out = ack(&mut space, t0 + ms(22), &[5..=5], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), [1, 2]);
        assert_eq!(space.loss_time(), Some(t0 + ms(4) + rtt.loss_delay()));
        assert_eq!(
            space.outstanding().map(|(pn, _)| pn).collect::<Vec<_>>(),
            [4]
        );
    }

    #[test]
    fn time_threshold_loss_and_timer() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        space.on_packet_sent(0, pkt(t0, 1000));
        space.on_packet_sent(1, pkt(t0 + ms(10), 1000));
        let out = ack(&mut space, t0 + ms(90), &[1..=1], &mut rtt).unwrap();
        // latest 80 ms: loss delay 90 ms; packet 0 sent at t0 is 90 ms old: lost exactly at
        // the threshold (time_sent <= now - loss_delay).
        assert_eq!(rtt.loss_delay(), ms(90));
        assert_eq!(pns(&out.lost), [0]);
        assert_eq!(
            out.lost.iter().next().unwrap().reason,
            LossReason::TimeThreshold
        );
        assert_eq!(space.loss_time(), None);

        space.on_packet_sent(2, pkt(t0 + ms(100), 1000));
        space.on_packet_sent(3, pkt(t0 + ms(110), 1000));
        let out = ack(&mut space, t0 + ms(185), &[3..=3], &mut rtt).unwrap();
        assert!(out.lost.is_empty());
        let loss_time = space.loss_time().unwrap();
        assert_eq!(loss_time, t0 + ms(100) + rtt.loss_delay());
        // Timer fires early: nothing yet, timer unchanged.
        assert!(space.detect_lost(loss_time - ms(1), &rtt).is_empty());
        assert_eq!(space.loss_time(), Some(loss_time));
        let lost = space.detect_lost(loss_time, &rtt);
        assert_eq!(pns(&lost), [2]);
        assert_eq!(space.loss_time(), None);
        assert_eq!(space.outstanding_len(), 0);
        assert_eq!(space.bytes_in_flight(), 0);
    }

    #[test]
    fn nothing_lost_before_first_ack() {
        let t0 = Instant::now();
        let rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        space.on_packet_sent(0, pkt(t0, 1000));
        assert!(
            space
                .detect_lost(t0 + Duration::from_secs(100), &rtt)
                .is_empty()
        );
        assert_eq!(space.loss_time(), None);
    }

    #[test]
    fn pto_time_per_space_kind() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.update(t0, Duration::ZERO, ms(100), ms(25), true);
        let mut data = SpaceRecovery::new(SpaceKind::ApplicationData);
        let mut hs = SpaceRecovery::new(SpaceKind::Handshake);
        assert_eq!(data.pto_time(&rtt, ms(25), 0), None);
        data.on_packet_sent(0, pkt(t0, 1000));
        data.on_packet_sent(1, ack_only(t0 + ms(5)));
        hs.on_packet_sent(0, pkt(t0, 1000));
        assert_eq!(data.time_of_last_ack_eliciting_packet(), Some(t0));
        assert_eq!(data.pto_time(&rtt, ms(25), 0), Some(t0 + ms(325)));
        assert_eq!(data.pto_time(&rtt, ms(25), 2), Some(t0 + ms(1300)));
        assert_eq!(hs.pto_time(&rtt, ms(25), 0), Some(t0 + ms(300)));
    }

    #[test]
    fn discard_returns_everything_and_resets_timers() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::Handshake);
        for pn in 0..5 {
            space.on_packet_sent(pn, pkt(t0 + ms(pn), 1000));
        }
        let out = ack(&mut space, t0 + ms(50), &[4..=4], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), [0, 1]);
        assert!(space.loss_time().is_some());
        let removed = space.discard();
        assert_eq!(
            removed.iter().map(|(pn, _)| *pn).collect::<Vec<_>>(),
            [2, 3]
        );
        assert_eq!(space.bytes_in_flight(), 0);
        assert!(!space.has_ack_eliciting_in_flight());
        assert_eq!(space.loss_time(), None);
        assert_eq!(space.time_of_last_ack_eliciting_packet(), None);
        assert_eq!(space.pto_time(&rtt, ms(25), 0), None);
    }

    #[test]
    fn spurious_loss_reported_on_late_ack() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        for pn in 0..5 {
            space.on_packet_sent(pn, pkt(t0 + ms(pn), 1000));
        }
        let out = ack(&mut space, t0 + ms(50), &[3..=4], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), [0, 1]);
        let out = ack(&mut space, t0 + ms(52), &[3..=4, 0..=0], &mut rtt).unwrap();
        assert!(out.acked.is_empty());
        assert_eq!(
            out.spurious,
            [SpuriousLoss {
                pn: 0,
                time_sent: t0,
                declared_lost: t0 + ms(50),
                size: 1000
            }]
        );
        // Reported once only.
        let out = ack(&mut space, t0 + ms(53), &[0..=0], &mut rtt).unwrap();
        assert!(out.spurious.is_empty());
        // Forgotten after the retention period.
        let late = t0 + ms(50) + rtt.pto_base() * LOST_RETENTION_PTOS + ms(1);
        space.on_packet_sent(5, pkt(late, 1000));
        let out = ack(&mut space, late + ms(40), &[5..=5, 1..=1], &mut rtt).unwrap();
        assert!(out.spurious.is_empty());
    }

    /// The example of RFC 9002 section 7.6.3, with one time unit = 1 s.
    fn rfc_example(ack_of_5: bool) -> bool {
        let t0 = Instant::now() + Duration::from_secs(10);
        let at = |tenths: u64| t0 + Duration::from_millis(tenths * 100);
        // smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay = 2:
        // first sample 0.4 s (rttvar 0.2 s) and max_ack_delay 0.8 s, taken before t=0.
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.update(t0 - ms(500), Duration::ZERO, ms(400), Duration::ZERO, true);
        let max_ack_delay = ms(800);
        assert_eq!(rtt.persistent_congestion_duration(max_ack_delay), ms(6000));

        let mut space = SpaceRecovery::<u64>::new(SpaceKind::ApplicationData);
        let sends = [
            (1, 0),
            (2, 10),
            (3, 20),
            (4, 30),
            (5, 40),
            (6, 50),
            (7, 60),
            (8, 80),
        ];
        space.on_packet_sent(0, pkt(t0 - ms(600), 1000));
        space.on_packet_sent(1, pkt(at(0), 1000));
        space.on_packet_sent(2, pkt(at(10), 1000));
        // Keep the RTT estimate fixed: acknowledge with explicit ranges but restore rtt.
        let frozen = rtt.clone();
        let out = space
            .on_ack_received(
                at(12),
                [0..=1],
                Duration::ZERO,
                &mut rtt,
                max_ack_delay,
                true,
            )
            .unwrap();
        assert!(out.lost.is_empty());
        rtt = frozen.clone();
        for &(pn, t) in &sends[2..] {
            space.on_packet_sent(pn, pkt(at(t), 1000));
        }
        space.on_packet_sent(9, pkt(at(120), 1000));
        // Variant: the same ACK frame also acknowledges #5.
        let ranges = if ack_of_5 {
            vec![9..=9, 5..=5]
        } else {
            vec![9..=9]
        };
        let out = space
            .on_ack_received(
                at(122),
                ranges,
                Duration::ZERO,
                &mut rtt,
                max_ack_delay,
                true,
            )
            .unwrap();
        let expected: Vec<u64> = if ack_of_5 {
            vec![2, 3, 4, 6, 7, 8]
        } else {
            (2..=8).collect()
        };
        assert_eq!(pns(&out.lost), expected);
        // The sample from #9 (0.2 s) changed the estimator; judge with the example's values.
        out.lost.in_persistent_congestion(&frozen, max_ack_delay)
    }

    #[test]
    fn persistent_congestion_rfc_example() {
        assert!(rfc_example(false));
    }

    #[test]
    fn acknowledged_packet_in_between_prevents_persistent_congestion() {
        // 2..4 span 2 s and 6..8 span 2 s: neither exceeds 6 s.
        assert!(!rfc_example(true));
    }

    #[test]
    fn persistent_congestion_needs_prior_rtt_sample_and_duration() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(ms(100));
        let mut space = SpaceRecovery::<u64>::new(SpaceKind::ApplicationData);
        for pn in 0..10 {
            space.on_packet_sent(pn, pkt(t0 + ms(100 * pn), 1000));
        }
        // The first sample arrives with the ack of 9 (sent at 900 ms, acked at 1000 ms):
        // everything before was sent before any sample existed.
        let out = ack(&mut space, t0 + ms(1000), &[9..=9], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), (0..9).collect::<Vec<_>>());
        assert!(!out.lost.in_persistent_congestion(&rtt, ms(0)));

        // With an earlier sample (srtt 100 ms, rttvar 50 ms: threshold 3 * 300 ms = 900 ms)
        // and sends 300 ms apart, the lost packets 0..=4 span 1200 ms.
        let mut rtt = RttEstimator::new(ms(100));
        rtt.update(t0, Duration::ZERO, ms(100), ms(0), true);
        let mut space = SpaceRecovery::<u64>::new(SpaceKind::ApplicationData);
        for pn in 0..6 {
            space.on_packet_sent(pn, pkt(t0 + ms(1) + ms(300 * pn), 1000));
        }
        let frozen = rtt.clone();
        let out = ack(&mut space, t0 + ms(1600), &[5..=5], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), [0, 1, 2, 3, 4]);
        // Threshold 900 ms; 0..4 span 1200 ms.
        assert!(out.lost.in_persistent_congestion(&frozen, Duration::ZERO));
        // With max_ack_delay 150 ms the threshold is 1350 ms: not exceeded.
        assert!(!out.lost.in_persistent_congestion(&frozen, ms(150)));
    }

    #[test]
    fn non_ack_eliciting_packets_cannot_anchor_persistent_congestion() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(ms(100));
        rtt.update(t0, Duration::ZERO, ms(100), ms(0), true);
        let frozen = rtt.clone();
        let mut space = SpaceRecovery::<u64>::new(SpaceKind::ApplicationData);
        space.on_packet_sent(0, ack_only(t0 + ms(1)));
        space.on_packet_sent(1, pkt(t0 + ms(500), 1000));
        space.on_packet_sent(2, ack_only(t0 + ms(2000)));
        space.on_packet_sent(3, pkt(t0 + ms(2001), 1000));
        space.on_packet_sent(4, pkt(t0 + ms(2002), 1000));
        space.on_packet_sent(5, pkt(t0 + ms(2003), 1000));
        space.on_packet_sent(6, pkt(t0 + ms(2004), 1000));
        let out = ack(&mut space, t0 + ms(2100), &[6..=6], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), [0, 1, 2, 3]);
        // Ack-eliciting endpoints 1 (500 ms) and 3 (2001 ms): 1501 ms > 900 ms.
        assert!(out.lost.in_persistent_congestion(&frozen, Duration::ZERO));
        // Without packet 3 the only ack-eliciting lost packet is 1.
        let only_one = LostPackets {
            packets: out.lost.into_vec().into_iter().take(3).collect(),
        };
        assert!(!only_one.in_persistent_congestion(&frozen, Duration::ZERO));
    }

    #[test]
    fn earlier_ack_between_lost_packets_is_remembered() {
        // Packet 2 is acknowledged in an earlier ACK than the one that declares 1 and 3
        // lost; the two lost packets span more than the threshold (90 ms) but the
        // acknowledgment in between must prevent persistent congestion.
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(ms(100));
        rtt.update(t0, Duration::ZERO, ms(10), ms(0), true);
        let frozen = rtt.clone();
        // An estimator with a 10 s RTT for the first ACK, so that packet 1 survives it.
        let mut slow = RttEstimator::new(ms(100));
        slow.update(t0, Duration::ZERO, Duration::from_secs(10), ms(0), true);
        let send_all = |with_2: bool| {
            let mut space = SpaceRecovery::<u64>::new(SpaceKind::ApplicationData);
            space.on_packet_sent(1, pkt(t0 + ms(1), 1000));
            if with_2 {
                space.on_packet_sent(2, pkt(t0 + ms(100), 1000));
            }
            space.on_packet_sent(3, pkt(t0 + ms(200), 1000));
            space.on_packet_sent(4, pkt(t0 + ms(201), 1000));
            space.on_packet_sent(5, pkt(t0 + ms(202), 1000));
            space
        };
        let mut space = send_all(true);
        ack(&mut space, t0 + ms(101), &[2..=2], &mut slow).unwrap();
        assert_eq!(space.outstanding_len(), 4);
        // 10 ms sample: loss delay 11.25 ms, so 1 (packet threshold) and 3 (time) are
        // lost, 4 is not.
        let out = ack(&mut space, t0 + ms(212), &[5..=5], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), [1, 3]);
        assert!(!out.lost.in_persistent_congestion(&frozen, Duration::ZERO));
        // Sanity: the same losses with no acknowledgment in between are persistent.
        let mut rtt = frozen.clone();
        let mut space = send_all(false);
        let out = ack(&mut space, t0 + ms(212), &[5..=5], &mut rtt).unwrap();
        assert_eq!(pns(&out.lost), [1, 3]);
        assert!(out.lost.in_persistent_congestion(&frozen, Duration::ZERO));
    }

    #[test]
    fn granularity_floor_on_loss_delay() {
        let t0 = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        let mut space = SpaceRecovery::new(SpaceKind::ApplicationData);
        space.on_packet_sent(0, pkt(t0, 1000));
        space.on_packet_sent(1, pkt(t0 + Duration::from_micros(10), 1000));
        let out = ack(
            &mut space,
            t0 + Duration::from_micros(110),
            &[1..=1],
            &mut rtt,
        )
        .unwrap();
        assert!(out.lost.is_empty());
        assert_eq!(space.loss_time(), Some(t0 + K_GRANULARITY));
    }

    proptest! {
        /// Random sends (with skips), random valid ACK ranges and timer firings: every
        /// sent packet ends up exactly once as acknowledged, lost or outstanding, and the
        /// in-flight counters always match the outstanding packets.
        #[test]
        fn accounting_invariants(
            ops in proptest::collection::vec((0u8..4, 0u64..8, 0u64..8, 1u64..30), 1..200)
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut rtt = RttEstimator::new(ms(50));
            let mut space = SpaceRecovery::<u64>::new(SpaceKind::ApplicationData);
            let mut next_pn = 0u64;
            let mut sent = std::collections::BTreeSet::new();
            let mut skipped = std::collections::BTreeSet::new();
            let mut acked = std::collections::BTreeSet::new();
            let mut lost = std::collections::BTreeSet::new();
            for (op, a, b, dt) in ops {
                now += ms(dt);
                match op {
                    0 | 1 => {
                        if a == 0 {
                            space.skip_packet_number(next_pn);
                            skipped.insert(next_pn);
                            next_pn += 1;
                        }
                        let mut p = pkt(now, 100 + a as u16);
                        p.ack_eliciting = b != 0;
                        p.in_flight = b != 0 || a == 1;
                        p.payload = next_pn;
                        space.on_packet_sent(next_pn, p);
                        sent.insert(next_pn);
                        next_pn += 1;
                    }
                    2 if next_pn > 0 => {
                        let hi = next_pn - 1 - (a % next_pn);
                        let lo = hi.saturating_sub(b);
                        let ranges: Vec<RangeInclusive<u64>> = vec![hi..=hi, lo..=lo];
                        let ranges: Vec<_> = ranges.into_iter().filter(|r| !skipped.contains(r.start())).collect();
                        let res = space.on_ack_received(now, ranges.iter().cloned(), Duration::ZERO, &mut rtt, ms(25), true);
                        let out = res.expect("valid ranges accepted");
                        for (pn, p) in &out.acked {
                            prop_assert_eq!(*pn, p.payload);
                            prop_assert!(sent.contains(pn));
                            prop_assert!(acked.insert(*pn));
                            prop_assert!(!lost.contains(pn));
                        }
                        for l in &out.lost {
                            prop_assert!(lost.insert(l.pn));
                            prop_assert!(!acked.contains(&l.pn));
                        }
                    }
                    _ => {
                        for l in &space.detect_lost(now, &rtt) {
                            prop_assert!(lost.insert(l.pn));
                        }
                    }
                }
                let outstanding: Vec<(u64, &SentPacket<u64>)> = space.outstanding().collect();
                prop_assert_eq!(outstanding.len() + acked.len() + lost.len(), sent.len());
                let bif: u64 = outstanding.iter().filter(|(_, p)| p.in_flight).map(|(_, p)| u64::from(p.size)).sum();
                prop_assert_eq!(bif, space.bytes_in_flight());
                let ae = outstanding.iter().filter(|(_, p)| p.ack_eliciting).count() as u64;
                prop_assert_eq!(ae, space.ack_eliciting_in_flight());
                if let Some(&s) = skipped.iter().next_back() {
                    // A skipped number is rejected as long as it is still remembered.
                    if space.is_skipped(s) {
                        prop_assert!(space.on_ack_received(now, [s..=s], Duration::ZERO, &mut rtt, ms(25), true).is_err());
                    }
                }
            }
        }
    }
}
