//! The send path: deciding what to send, building packets and protecting them.

use super::paths::MtuDiscovery;
use super::spaces::{ConnFrame, SentFrames, StreamRange};
use super::*;
use crate::frame::{self, EcnCounts, Frame};
use crate::packet::{self, LongType};
use crate::recovery::SentPacket;
use crate::sched::{Decision, PathSnapshot, PendingData, QosClass};
use crate::streams::ControlFrame;

/// The bytes of a 1-RTT packet that are not frames, at most: the short header with a
/// 20-byte connection ID and a 4-byte packet number, and the AEAD tag. Data queued on a
/// path is cut to a full packet's frame room with it.
const SHORT_PACKET_OVERHEAD: usize = 1 + 20 + 4 + 16;

/// The smallest datagram that may carry an ack-eliciting Initial packet, and the size
/// datagrams with PATH_CHALLENGE are expanded to.
//= https://www.rfc-editor.org/rfc/rfc9000#section-14.1
//# A client MUST expand the payload of all UDP datagrams carrying Initial
//# packets to at least the smallest allowed maximum datagram size of
//# 1200 bytes by adding PADDING frames to the Initial packet or by
//# coalescing the Initial packet; see Section 12.2.
const MIN_DATAGRAM: usize = 1200;

/// AEAD tag length of every QUIC v1 cipher suite.
const TAG_LEN: usize = 16;

/// Smallest room worth starting a packet in.
const MIN_PACKET_ROOM: usize = 48;

/// Bytes of duplicated datagram copies a path holds before the duplicated class waits.
const DATAGRAM_COPIES_BYTES: usize = 64 * 1024;

/// What kind of packet to build.
#[derive(Debug, Clone, Copy, Default)]
struct BuildOptions {
    /// Pad so the datagram reaches at least this many bytes.
    pad_datagram_to: Option<usize>,
    /// May carry stream data and datagrams.
    allow_data: bool,
    /// Must be ack-eliciting: add a PING if nothing else elicits an acknowledgment.
    probe: bool,
    /// Only frames that belong to this path (acknowledgments, path validation).
    path_only: bool,
    /// A PMTU probe of exactly this size.
    mtu_probe: Option<u16>,
    /// Take new stream data and datagrams of this class only (any class when `None`).
    data_class: Option<QosClass>,
    /// A probe on the path's other 4-tuple ([`super::paths::OffPathProbe`]): its
    /// PATH_CHALLENGE and PATH_RESPONSE frames only, to the connection ID the path takes
    /// next.
    off_path: bool,
}

/// Where the header of a packet being built lies in the buffer.
#[derive(Debug, Clone, Copy)]
struct HeaderLayout {
    start: usize,
    pn: u64,
    pn_offset: usize,
    pn_len: usize,
    long: Option<packet::LongHeaderLayout>,
}

impl Connection {
    /// Writes the next datagram(s) to send into `buf` (cleared first) and describes them,
    /// or returns `None` when there is nothing to send now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        self.batch_ecn = None;
        match self.state {
            State::Drained | State::Draining { .. } => return None,
            State::Closing { .. } => return self.poll_close(now, buf),
            _ => {}
        }
        if let Some(interval) = self.config.key_update_interval
            && self.packets_since_key_update >= interval
        {
            self.force_key_update(now);
        }
        if (self.initial.is_some() || self.handshake.is_some())
            && let Some(t) = self.poll_handshake_datagram(now, buf)
        {
            return Some(t);
        }
        if self.sends_zero_rtt() {
            return self.poll_zero_rtt(now, buf);
        }
        if self.one_rtt.is_none() || !self.handshake_complete {
            return None;
        }
        self.run_path_manager(now);
        if self.is_closed() {
            return self.poll_close(now, buf);
        }
        // Receive windows are tuned against the longest round trip of the paths in use:
        // data sent on the slowest one must fit in the window too.
        if let Some(rtt) = self
            .paths
            .values()
            .filter(|p| p.is_usable() && p.rtt.has_sample())
            .map(|p| p.rtt.smoothed())
            .max()
        {
            self.streams.tune_receive_windows(now, rtt);
        }
        // The path IDs' vector is kept from one call to the next (several per packet).
        let mut ids = std::mem::take(&mut self.path_id_scratch);
        ids.clear();
        ids.extend(self.paths.keys().copied());
        let transmit = self.poll_paths(now, &ids, buf);
        self.path_id_scratch = ids;
        transmit
    }

    /// The next datagram of the paths `ids`: a probe, else scheduled data, else
    /// acknowledgments and control frames.
    fn poll_paths(&mut self, now: Instant, ids: &[PathId], buf: &mut Vec<u8>) -> Option<Transmit> {
        // One pass over the paths tells whether any may have a probe to send (rarely).
        if self.paths.values().any(Path::may_probe) {
            for &id in ids {
                if let Some(t) = self.poll_off_path(now, id, buf) {
                    return Some(t);
                }
            }
            for &id in ids {
                if let Some(t) = self.poll_path_probes(now, id, buf) {
                    return Some(t);
                }
            }
        }
        if let Some(t) = self.poll_scheduled(now, buf) {
            return Some(t);
        }
        // No data packet is leaving now (or none could take them): acknowledgments and
        // control frames go on their own.
        let control_waiting = self.has_control_frames();
        if !control_waiting && !self.paths.values().any(|p| p.owes_leftovers(now)) {
            return None;
        }
        for &id in ids {
            if let Some(t) = self.poll_path_leftovers(now, id, buf, control_waiting) {
                return Some(t);
            }
        }
        None
    }

    /// A datagram with Initial and/or Handshake packets (and a coalesced 1-RTT packet) on
    /// path 0.
    fn poll_handshake_datagram(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let path0 = self.paths.get(&PathId::ZERO)?;
        let mtu = usize::from(path0.mtu);
        let budget = usize::try_from(path0.amplification_budget().min(mtu as u64)).unwrap_or(mtu);
        let wants = |h: &Option<HandshakeSpace>| {
            h.as_ref().is_some_and(|h| {
                h.keys.is_some()
                    && (h.space.acks.ack_due(now)
                        || h.crypto.has_pending()
                        || h.space.probes_owed > 0
                        || h.space.ping_pending)
            })
        };
        let wants_initial = wants(&self.initial);
        let wants_handshake = wants(&self.handshake);
        if !wants_initial && !wants_handshake {
            return None;
        }
        // Client datagrams with Initial packets, and server datagrams with ack-eliciting
        // Initial packets, are padded to 1200 bytes.
        let initial_eliciting = self.initial.as_ref().is_some_and(|h| {
            h.crypto.has_pending() || h.space.probes_owed > 0 || h.space.ping_pending
        });
        let needs_padding = wants_initial && (self.side.is_client() || initial_eliciting);
        if needs_padding && budget < MIN_DATAGRAM {
            return None;
        }
        let wants_1rtt = self.handshake_complete && self.has_1rtt_content(now, PathId::ZERO);
        let mut built_any = false;
        // Handshake datagrams are not marked: ECN is validated on 1-RTT packets only.
        self.batch_ecn = Some(false);
        if wants_initial {
            let last = !wants_handshake && !wants_1rtt;
            let opts = BuildOptions {
                pad_datagram_to: (needs_padding && last).then_some(MIN_DATAGRAM),
                ..Default::default()
            };
            built_any |= self
                .build_packet(now, AckSpace::Initial, buf, budget, opts)
                .is_some();
        }
        if wants_handshake && budget.saturating_sub(buf.len()) > MIN_PACKET_ROOM {
            let last = !wants_1rtt;
            let opts = BuildOptions {
                pad_datagram_to: (needs_padding && last).then_some(MIN_DATAGRAM),
                ..Default::default()
            };
            if self
                .build_packet(now, AckSpace::Handshake, buf, budget, opts)
                .is_some()
            {
                built_any = true;
                //= https://www.rfc-editor.org/rfc/rfc9001#section-4.9.1
                //# a client MUST discard Initial keys when it first sends a Handshake packet
                if self.side.is_client() {
                    self.discard_space(now, AckSpace::Initial);
                }
            }
        }
        if wants_1rtt && budget.saturating_sub(buf.len()) > MIN_PACKET_ROOM {
            let opts = BuildOptions {
                pad_datagram_to: needs_padding.then_some(MIN_DATAGRAM),
                ..Default::default()
            };
            built_any |= self
                .build_packet(now, AckSpace::Path(PathId::ZERO), buf, budget, opts)
                .is_some();
        }
        if !built_any {
            return None;
        }
        self.finish_transmit(PathId::ZERO, buf.len(), None)
    }

    /// A client's 0-RTT packet on path 0: stream data (and datagrams) within the limits
    /// remembered with the ticket and the path's congestion window. 0-RTT packets leave
    /// in datagrams of their own, after the datagram of the Initial packet.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-4.6.1
    //# A client that wishes to send 0-RTT packets uses the early_data extension in the
    //# ClientHello message of a subsequent handshake; see {{Section 4.2.10 of TLS13}}.
    //# It then sends application data in 0-RTT packets.
    fn poll_zero_rtt(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        // The congestion window only, no pacing: early data is a burst within the initial
        // window, sent with the first flight (the pacer's timer is not armed before the
        // handshake completes).
        let path = self.paths.get_mut(&PathId::ZERO)?;
        if !path.can_send_data(now, false) {
            return None;
        }
        let mtu = usize::from(path.mtu);
        self.batch_ecn = Some(false);
        let opts = BuildOptions {
            allow_data: true,
            ..Default::default()
        };
        self.build_packet(now, AckSpace::Path(PathId::ZERO), buf, mtu, opts)?;
        self.zero_rtt_packets += 1;
        self.finish_transmit(PathId::ZERO, buf.len(), None)
    }

    /// Whether a 1-RTT packet on `id` would carry anything apart from scheduled data.
    fn has_1rtt_content(&self, now: Instant, id: PathId) -> bool {
        let Some(path) = self.paths.get(&id) else {
            return false;
        };
        path.space.acks.ack_due(now)
            || !path.responses.is_empty()
            || path.challenge.is_some_and(|c| c.sent_at.is_none())
            || path.space.probes_owed > 0
            || path.space.ping_pending
            || (path.is_usable() && !self.is_stalled(id) && self.has_control_frames())
    }

    /// True when path `id` timed out [`crate::sched::POTENTIALLY_FAILED_PTOS`] probes in a
    /// row, or its link is unavailable ([`crate::sched::PathSnapshot::link_unavailable`]),
    /// while another usable path has neither: connection-level frames then avoid it, and
    /// its probes carry PING only.
    pub(super) fn is_stalled(&self, id: PathId) -> bool {
        let failing = |p: &super::paths::Path| {
            crate::sched::potentially_failed(p.pto_count, p.link_unavailable())
        };
        self.paths.get(&id).is_some_and(failing)
            && self
                .paths
                .values()
                .any(|p| p.id != id && p.is_usable() && !failing(p))
    }

    fn has_control_frames(&self) -> bool {
        self.pending.handshake_done
            || !self.pending.new_cids.is_empty()
            || !self.pending.retire_cids.is_empty()
            || self.pending.max_path_id
            || self.pending.paths_blocked
            || !self.pending.path_cids_blocked.is_empty()
            || self
                .paths
                .values()
                .any(|p| p.abandon_pending.is_some() || p.status_frame_pending)
            || self.streams.has_control()
            || self.crypto_1rtt.has_pending()
    }

    /// The path `id` with the bytes a packet on it may take now (the MTU, or less under the
    /// anti-amplification limit), if it has a connection ID to send on and room for a packet.
    fn sendable_path(&self, id: PathId) -> Option<(&Path, usize)> {
        self.peer_cids.active(id)?;
        let path = self.paths.get(&id)?;
        let mtu = usize::from(path.mtu);
        let budget = usize::try_from(path.amplification_budget().min(mtu as u64)).unwrap_or(mtu);
        (budget >= MIN_PACKET_ROOM).then_some((path, budget))
    }

    /// A probing packet on the other 4-tuple path `id` probes (the server's preferred
    /// address): PATH_CHALLENGE and PATH_RESPONSE frames, in a datagram padded to 1200
    /// bytes unless a server's anti-amplification limit toward an address it has not
    /// validated forbids.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-9.1
    //# An endpoint MAY probe for peer reachability from a new local address using path
    //# validation ({{migrate-validate}}) prior to migrating the connection to the new
    //# local address.
    fn poll_off_path(&mut self, now: Instant, id: PathId, buf: &mut Vec<u8>) -> Option<Transmit> {
        let probe = self.paths.get(&id)?.off_path.as_ref()?;
        if !probe.has_frames() {
            return None;
        }
        let budget = if self.side.is_server() && !probe.validated {
            (3 * probe.received).saturating_sub(probe.sent)
        } else {
            u64::MAX
        };
        let limit = usize::try_from(budget.min(MIN_DATAGRAM as u64)).unwrap_or(MIN_DATAGRAM);
        if limit < MIN_PACKET_ROOM {
            return None;
        }
        let opts = BuildOptions {
            pad_datagram_to: (limit >= MIN_DATAGRAM).then_some(MIN_DATAGRAM),
            path_only: true,
            off_path: true,
            ..Default::default()
        };
        self.build_packet(now, AckSpace::Path(id), buf, limit, opts)?;
        self.batch_ecn = None;
        let size = buf.len();
        let path = self.paths.get_mut(&id)?;
        path.stats.udp_bytes_sent += size as u64;
        let probe = path.off_path.as_mut()?;
        probe.sent += size as u64;
        Some(Transmit {
            destination: probe.remote,
            source: probe.local,
            size,
            segment_size: None,
            path: id,
            ecn: None,
        })
    }

    /// Packets that belong to one path and go before any data: path validation, PTO probes
    /// and PMTU probes.
    fn poll_path_probes(
        &mut self,
        now: Instant,
        id: PathId,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let (path, budget) = self.sendable_path(id)?;
        let validating =
            !path.responses.is_empty() || path.challenge.is_some_and(|c| c.sent_at.is_none());
        if validating {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.1
            //# An endpoint MUST expand datagrams that contain a PATH_CHALLENGE frame
            //# to at least the smallest allowed maximum datagram size of 1200 bytes,
            //# unless the anti-amplification limit for the path does not permit
            //# sending a datagram of this size.
            let pad = (budget >= MIN_DATAGRAM).then_some(MIN_DATAGRAM);
            let opts = BuildOptions {
                pad_datagram_to: pad,
                path_only: true,
                ..Default::default()
            };
            self.build_packet(now, AckSpace::Path(id), buf, budget, opts)?;
            return self.finish_transmit(id, buf.len(), None);
        }
        if path.space.probes_owed > 0 && path.state != PathState::Abandoned {
            // A path that keeps timing out probes with PING only while another path works:
            // the data and control frames the PTO queued again then leave on the working
            // paths instead of being sent into the stalled one again.
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.7
            //# Endpoints could take advantage of the multipath extension, and retransmit the content
            //# of the delayed packets on other available paths if the congestion control window on these
            //# paths allows.
            let stalled = self.is_stalled(id);
            let opts = BuildOptions {
                probe: true,
                allow_data: path.is_usable() && !stalled,
                path_only: stalled,
                ..Default::default()
            };
            if self
                .build_packet(now, AckSpace::Path(id), buf, budget, opts)
                .is_none()
            {
                // Nothing could be built (no keys or no room): give up on this probe.
                if let Some(p) = self.paths.get_mut(&id) {
                    p.space.probes_owed = 0;
                }
                return None;
            }
            return self.finish_transmit(id, buf.len(), None);
        }
        if let MtuDiscovery::Pending { size, attempts } = path.mtu_discovery
            && path.is_usable()
            && self.handshake_confirmed
            && path.bytes_in_flight + u64::from(size) <= path.cc.window()
            && u64::from(size) <= path.amplification_budget()
        {
            let opts = BuildOptions {
                mtu_probe: Some(size),
                path_only: true,
                ..Default::default()
            };
            self.build_packet(now, AckSpace::Path(id), buf, usize::from(size), opts)?;
            if let Some(p) = self.paths.get_mut(&id) {
                p.mtu_discovery = MtuDiscovery::InFlight {
                    size,
                    attempts: attempts + 1,
                };
            }
            return self.finish_transmit(id, buf.len(), None);
        }
        None
    }

    /// A packet for acknowledgments, a keep-alive PING, PATH_ABANDON or other control frames
    /// (`control_waiting`: some wait) on one path, when no data packet carried them.
    fn poll_path_leftovers(
        &mut self,
        now: Instant,
        id: PathId,
        buf: &mut Vec<u8>,
        control_waiting: bool,
    ) -> Option<Transmit> {
        let (path, budget) = self.sendable_path(id)?;
        let usable = path.is_usable();
        let own = path.owes_leftovers(now);
        let abandoning = path.abandon_pending.is_some();
        let orphan_acks = usable && self.orphan_acks_due(now, id).next().is_some();
        let control = usable && control_waiting && !self.is_stalled(id);
        if !(own || orphan_acks || control) {
            return None;
        }
        let opts = BuildOptions {
            path_only: !(control || abandoning),
            ..Default::default()
        };
        self.build_packet(now, AckSpace::Path(id), buf, budget, opts)?;
        self.finish_transmit(id, buf.len(), None)
    }

    /// Scheduled application data, batched for GSO while consecutive packets go to the
    /// same path.
    fn poll_scheduled(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.trim_queues();
        let mut batch: Option<(PathId, usize)> = None;
        let mut count = 0;
        loop {
            if !self.has_scheduled_work() && !self.has_control_frames() {
                break;
            }
            let Some((target, data_class)) = self.next_data_path(now, batch.map(|(id, _)| id))
            else {
                break;
            };
            if batch.is_some_and(|(id, _)| id != target) {
                break;
            }
            let Some(path) = self.paths.get_mut(&target) else {
                break;
            };
            if !(path.is_usable() && path.can_send_data(now, self.config.pacing)) {
                break;
            }
            let mtu = usize::from(path.mtu);
            let start = buf.len();
            let payload_before = path.stats.payload_bytes_sent;
            let queued_earlier = path.has_queued_data();
            let opts = BuildOptions {
                allow_data: true,
                data_class,
                ..Default::default()
            };
            let Some(size) = self.build_packet(now, AckSpace::Path(target), buf, start + mtu, opts)
            else {
                break;
            };
            if !queued_earlier {
                let payload = self
                    .paths
                    .get(&target)
                    .map_or(0, |p| p.stats.payload_bytes_sent - payload_before);
                self.scheduler.on_packet_sent(now, target, payload);
            }
            count += 1;
            let segment = *batch.get_or_insert((target, size));
            if size < segment.1 || size < mtu || count >= self.config.max_gso_segments {
                break;
            }
        }
        let (id, segment) = batch?;
        self.finish_transmit(id, buf.len(), (count > 1).then_some(segment))
    }

    /// The path the next data packet leaves on now, with the class of the data it takes, or
    /// `None` to wait (the contract of [`crate::sched`]). A path whose pacer releases data
    /// queued on it earlier goes first (only `batch`'s path while a GSO batch is being
    /// built). Otherwise the scheduler chooses, asked about the classes with data waiting
    /// one at a time, most demanding first, until it does not answer
    /// [`Decision::Wait`]: a chosen path that can transmit at once (nothing queued, pacer
    /// released) is returned; otherwise the next stream data of the class is queued on the
    /// chosen path (on every listed path for [`Decision::Duplicate`], which also queues a
    /// copy of the class's next datagram on each) and the loop goes on, until a path can
    /// transmit now, the scheduler waits, or nothing is left to queue.
    fn next_data_path(
        &mut self,
        now: Instant,
        batch: Option<PathId>,
    ) -> Option<(PathId, Option<QosClass>)> {
        let pacing = self.config.pacing;
        // Queuing data on a path changes no path's window or pacer: after the scheduler's
        // single path took a chunk (that path cannot send now, or it would have gone), the
        // paths with data queued are not checked again. Copies go on paths whose pacer
        // was not asked, so after those they are.
        let mut check_queued = true;
        loop {
            if std::mem::take(&mut check_queued) {
                for path in self.paths.values_mut() {
                    // Every path with queued data is checked, so each sets its pacing timer.
                    if path.has_queued_data()
                        && path.is_usable()
                        && path.can_send_data(now, pacing)
                        && batch.is_none_or(|id| id == path.id)
                    {
                        return Some((path.id, path.queue_class));
                    }
                }
            }
            if !self
                .paths
                .values()
                .any(|p| p.is_usable() && p.can_take_packet())
            {
                return None;
            }
            let mut chosen = None;
            for class in self.waiting_classes() {
                let pending = self.pending_data(class);
                match self.schedule(now, &pending) {
                    Decision::Wait => continue,
                    decision => {
                        chosen = Some((decision, pending, class));
                        break;
                    }
                }
            }
            let (decision, pending, class) = chosen?;
            let duplicate = matches!(decision, Decision::Duplicate(_));
            let (one, many);
            let targets: &[PathId] = match decision {
                Decision::Send(id) => {
                    // The scheduler's own choice (not the control-frame fallback) with
                    // every usable path able to take the packet: its top path.
                    let unconstrained = !pending.is_empty()
                        && self
                            .paths
                            .values()
                            .filter(|p| p.is_usable())
                            .all(|p| p.can_take_packet());
                    let path = self.paths.get_mut(&id)?;
                    if !(path.is_usable() && path.can_take_packet()) {
                        return None;
                    }
                    if unconstrained && self.last_top_path.replace(id).is_some_and(|l| l != id) {
                        self.stats.top_path_switches += 1;
                    }
                    if !path.has_queued_data() && path.can_send_data(now, pacing) {
                        return Some((id, Some(class)));
                    }
                    one = [id];
                    &one
                }
                Decision::Duplicate(ids) => {
                    // A copy on every listed path, each sent when that path's window and
                    // pacer allow (skipped there if another path's copy was acknowledged
                    // first), as MPTCP's redundant scheduler does; at least one path must
                    // have room, or the copies would pile up.
                    let room = |id: &PathId| {
                        self.paths
                            .get(id)
                            .is_some_and(|p| p.is_usable() && p.can_take_packet())
                    };
                    if !ids.iter().any(room) {
                        return None;
                    }
                    many = ids;
                    &many
                }
                Decision::Wait => return None,
            };
            check_queued = duplicate;
            if duplicate && self.datagrams.queued(class) > 0 {
                // While a listed path holds its share of copies already, the datagrams wait
                // in the class's queue (and the application's): every copy is sent, at the
                // pace of the slowest listed path, rather than one path dropping its copies.
                let full = targets.iter().any(|id| {
                    self.paths
                        .get(id)
                        .is_some_and(|p| p.datagram_queue_bytes >= DATAGRAM_COPIES_BYTES)
                });
                if full {
                    return None;
                }
                // Datagrams go before stream data in a packet, so the class's next datagram
                // is what gets duplicated.
                let data = self
                    .datagrams
                    .pop_outgoing_if_fits(usize::MAX, Some(class))?;
                let len = data.len() as u64;
                let mut copies = 0u64;
                for &id in targets {
                    if let Some(path) = self.paths.get_mut(&id).filter(|p| p.is_usable()) {
                        copies += 1;
                        path.datagram_queue_bytes += data.len();
                        path.queued_bytes += len;
                        path.datagram_queue.push_back(data.clone());
                        path.queue_class = Some(class);
                        self.scheduler.on_packet_sent(now, id, len);
                    }
                }
                self.datagrams.copies_queued[class.index()] += copies.saturating_sub(1);
                continue;
            }
            // Stream data only: datagrams and control frames wait for a pacer instead.
            let mtu = targets
                .iter()
                .filter_map(|id| self.paths.get(id))
                .map(|p| usize::from(p.mtu))
                .min()?;
            let chunk = self
                .streams
                .poll_stream_data(mtu.saturating_sub(SHORT_PACKET_OVERHEAD), Some(class))?;
            let len = chunk.data.len() as u64;
            for &id in targets {
                if let Some(path) = self.paths.get_mut(&id).filter(|p| p.is_usable()) {
                    path.queued_bytes += len;
                    path.queue.push_back(chunk.clone());
                    path.queue_class = Some(class);
                    self.scheduler.on_packet_sent(now, id, len);
                }
            }
        }
    }

    /// Gives the data queued on paths that stopped taking data back to the connection's
    /// send queue: paths no longer usable, and paths held back (their link unavailable, or
    /// potentially failed) while another path works. Clears the pacing release of paths
    /// with nothing queued (this poll sets those it waits for).
    fn trim_queues(&mut self) {
        let mut held_back = std::mem::take(&mut self.held_back_scratch);
        self.held_back_paths(&mut held_back);
        let mut dropped = std::mem::take(&mut self.trim_scratch);
        dropped.clear();
        dropped.extend(
            self.paths
                .values()
                .filter(|p| p.has_queued_data())
                .filter(|p| !p.is_usable() || held_back.contains(&p.id) || self.is_stalled(p.id))
                .map(|p| (p.id, !p.is_usable() || held_back.contains(&p.id))),
        );
        self.held_back_scratch = held_back;
        for &(id, gone) in &dropped {
            if gone {
                self.return_queued_data(id);
            } else if let Some(path) = self.paths.get_mut(&id) {
                // A stalled path keeps its datagram copies (another path carries the
                // other copy; this one may still arrive); its stream data goes back.
                let copies = path.datagram_queue_bytes as u64;
                let chunks = std::mem::take(&mut path.queue);
                path.queued_bytes = copies;
                for chunk in chunks {
                    let len = chunk.data.len() as u64;
                    self.streams
                        .on_stream_lost(chunk.id, chunk.offset, len, chunk.fin);
                }
            }
        }
        self.trim_scratch = dropped;
        for path in self.paths.values_mut() {
            if !path.has_queued_data() {
                // A release left from an earlier poll could lie in the past.
                path.pacing_release = None;
            }
        }
    }

    /// Puts the stream data queued on path `id` back in the connection's send queue, as
    /// data to retransmit (it goes out before new data, on whichever path is chosen), and
    /// drops the datagram copies queued on it.
    pub(super) fn return_queued_data(&mut self, id: PathId) {
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        path.queued_bytes = 0;
        self.datagrams.dropped_outgoing += path.datagram_queue.len() as u64;
        path.datagram_queue.clear();
        path.datagram_queue_bytes = 0;
        for chunk in std::mem::take(&mut path.queue) {
            let len = chunk.data.len() as u64;
            self.streams
                .on_stream_lost(chunk.id, chunk.offset, len, chunk.fin);
        }
    }

    /// Paths whose link is unavailable take no new data while another path works: put
    /// in `out` (cleared first; a buffer kept from one packet to the next).
    fn held_back_paths(&self, out: &mut Vec<PathId>) {
        out.clear();
        out.extend(
            self.paths
                .values()
                .filter(|p| p.link_unavailable())
                .map(|p| p.id)
                .filter(|id| self.is_stalled(*id)),
        );
    }

    /// The classes with stream data or datagrams waiting, most demanding first; just
    /// [`QosClass::BestEffort`] when nothing waits (the scheduler is then asked about control
    /// frames only).
    fn waiting_classes(&self) -> impl Iterator<Item = QosClass> + use<> {
        let waiting =
            |c: QosClass| self.datagrams.queued(c) > 0 || self.streams.has_stream_data_of(c);
        // Without allocating: this runs for every packet.
        let mut classes = QosClass::BY_DEMAND.map(|c| waiting(c).then_some(c));
        if classes.iter().all(Option::is_none) {
            classes[0] = Some(QosClass::BestEffort);
        }
        classes.into_iter().flatten()
    }

    /// What of `class` waits to be sent, as the scheduler sees it.
    fn pending_data(&self, class: QosClass) -> PendingData {
        let (new_stream_bytes, retransmit_bytes) = self.streams.pending_bytes(Some(class));
        PendingData {
            new_stream_bytes,
            retransmit_bytes,
            datagrams: self.datagrams.queued(class),
            datagram_bytes: self.datagrams.queued_bytes_of(class) as u64,
            class,
            flow_credit: Some(self.streams.send_credit()),
        }
    }

    /// Asks the scheduler where the next data packet goes.
    fn schedule(&mut self, now: Instant, pending: &PendingData) -> Decision {
        let pacing = self.config.pacing;
        let mut held_back = std::mem::take(&mut self.held_back_scratch);
        self.held_back_paths(&mut held_back);
        // The snapshots' vector is kept from one decision to the next (one per packet).
        let mut snapshots = std::mem::take(&mut self.snapshot_scratch);
        snapshots.clear();
        for path in self.paths.values_mut() {
            if path.state == PathState::Abandoned || self.peer_cids.active(path.id).is_none() {
                continue;
            }
            // `can_send` is window room only; the pacer's verdict is `pacing_release`.
            let can_send = if held_back.contains(&path.id) {
                // Not waiting for the pacer either (no pacing wake-up for this path).
                path.pacing_release = None;
                false
            } else if path.is_usable() && path.window_has_room() {
                path.can_send_data(now, pacing);
                path.can_take_packet()
            } else {
                path.pacing_release = None;
                false
            };
            snapshots.push(path.snapshot(can_send));
        }
        let decision = if pending.is_empty() {
            // Control frames only: the first working path that can send now (the backup
            // rule and potentially failed paths as for data), else the first path that can.
            let now_ready = |s: &&PathSnapshot| s.can_send && s.pacing_release.is_none();
            crate::sched::preferred_paths(&snapshots)
                .find(now_ready)
                .or_else(|| snapshots.iter().find(now_ready))
                .map_or(Decision::Wait, |s| Decision::Send(s.id))
        } else {
            self.scheduler.schedule(now, &snapshots, pending)
        };
        self.snapshot_scratch = snapshots;
        self.held_back_scratch = held_back;
        decision
    }

    /// CONNECTION_CLOSE while closing.
    fn poll_close(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.close_pending {
            return None;
        }
        self.close_pending = false;
        let close = self.close.clone()?;
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.6
        //# They can be sent on any open path.
        let id = self
            .paths
            .values()
            .find(|p| p.is_usable() && self.peer_cids.active(p.id).is_some())
            .map_or(PathId::ZERO, |p| p.id);
        let path = self.paths.get(&id)?;
        let budget = usize::try_from(path.amplification_budget().min(u64::from(path.mtu)))
            .unwrap_or(MIN_DATAGRAM);
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.2.3
        //# However, prior to
        //# confirming the handshake, it is possible that more advanced packet protection
        //# keys are not available to the peer, so another CONNECTION_CLOSE frame MAY be
        //# sent in a packet that uses a lower packet protection level.
        let mut spaces = Vec::with_capacity(3);
        if self.initial.as_ref().is_some_and(|h| h.keys.is_some()) {
            spaces.push(AckSpace::Initial);
        }
        if self.handshake.as_ref().is_some_and(|h| h.keys.is_some()) {
            spaces.push(AckSpace::Handshake);
        }
        if self.one_rtt.is_some() && self.handshake_complete {
            spaces.push(AckSpace::Path(id));
        }
        for space in spaces {
            let Some(layout) = self.write_header(space, buf, false) else {
                continue;
            };
            let room = budget.saturating_sub(buf.len() + TAG_LEN);
            let frame = match (&close, space) {
                (CloseFrame::Transport(e), _) => {
                    let mut c = frame::ConnectionClose::from(e.clone());
                    c.truncate_to(room);
                    Frame::ConnectionClose(c)
                }
                (CloseFrame::Application { code, reason }, AckSpace::Path(_)) => {
                    let mut c = frame::ApplicationClose {
                        error_code: *code,
                        reason: reason.clone(),
                    };
                    c.truncate_to(room);
                    Frame::ApplicationClose(c)
                }
                //= https://www.rfc-editor.org/rfc/rfc9000#section-10.2.3
                //# A CONNECTION_CLOSE of type 0x1d MUST be replaced by a
                //# CONNECTION_CLOSE of type 0x1c when sending the frame in Initial or
                //# Handshake packets.
                (CloseFrame::Application { .. }, _) => {
                    Frame::ConnectionClose(frame::ConnectionClose {
                        error_code: TransportErrorCode::APPLICATION_ERROR,
                        frame_type: None,
                        reason: Bytes::new(),
                    })
                }
            };
            if buf.len() + frame.encoded_len() + TAG_LEN > budget {
                buf.truncate(layout.start);
                continue;
            }
            frame.encode(buf);
            self.pad_for_sample(buf, layout, None);
            let frames = self.qlog_frames_of(buf, layout);
            if !self.protect(space, buf, layout) {
                buf.truncate(layout.start);
                continue;
            }
            self.qlog_packet_sent(now, space, layout.pn, buf.len() - layout.start, frames);
        }
        if buf.is_empty() {
            return None;
        }
        self.finish_transmit(id, buf.len(), None)
    }

    /// Writes the header of the next packet of `space` at the end of `buf`.
    fn write_header(
        &mut self,
        space: AckSpace,
        buf: &mut Vec<u8>,
        off_path: bool,
    ) -> Option<HeaderLayout> {
        let path_id = space.path();
        let active = self.peer_cids.active(path_id)?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.5
        //# An endpoint MUST NOT reuse a connection ID when sending to
        //# more than one destination address.
        let dcid = match self.peer_cids.next_spare(path_id) {
            Some(spare) if off_path => spare.cid,
            _ => active.cid,
        };
        let start = buf.len();
        let (version, scid, side) = (self.version, self.local_handshake_cid, self.side);
        let key_phase = self.one_rtt.as_ref().is_some_and(|k| k.key_phase());
        let zero_rtt = self.sends_zero_rtt();
        let token = self.retry_token.clone();
        let s = self.space_mut(space)?;
        let largest_acked = s.recovery.largest_acked();
        let pn = s.take_pn();
        let pn_len = packet::packet_number_len(pn, largest_acked);
        // The long header types: Initial, Handshake, and 0-RTT for a client's early data.
        let long_type = match space {
            AckSpace::Initial => Some(LongType::Initial),
            AckSpace::Handshake => Some(LongType::Handshake),
            AckSpace::Path(_) if zero_rtt => Some(LongType::ZeroRtt),
            AckSpace::Path(_) => None,
        };
        match long_type {
            Some(ty) => {
                let token: &[u8] = if ty == LongType::Initial && side.is_client() {
                    &token
                } else {
                    &[]
                };
                let layout =
                    packet::write_long_header(buf, ty, version, &dcid, &scid, token, pn, pn_len);
                Some(HeaderLayout {
                    start,
                    pn,
                    pn_offset: layout.pn_offset,
                    pn_len,
                    long: Some(layout),
                })
            }
            None => {
                let pn_offset =
                    packet::write_short_header(buf, false, key_phase, &dcid, pn, pn_len);
                Some(HeaderLayout {
                    start,
                    pn,
                    pn_offset,
                    pn_len,
                    long: None,
                })
            }
        }
    }

    /// Builds one packet of `space` at the end of `buf`, keeping the datagram within
    /// `datagram_limit` bytes. Returns the packet's size, or `None` if there was nothing to
    /// send (the buffer is left as it was; the packet number is skipped).
    fn build_packet(
        &mut self,
        now: Instant,
        space: AckSpace,
        buf: &mut Vec<u8>,
        datagram_limit: usize,
        opts: BuildOptions,
    ) -> Option<usize> {
        if datagram_limit < buf.len() + MIN_PACKET_ROOM {
            return None;
        }
        let layout = self.write_header(space, buf, opts.off_path)?;
        let limit = opts
            .mtu_probe
            .map_or(datagram_limit, |size| layout.start + usize::from(size));
        let end = limit.saturating_sub(TAG_LEN);
        let path_id = space.path();
        let mut sent = SentFrames::default();
        let mut ack_eliciting = false;

        let zero_rtt = matches!(space, AckSpace::Path(_)) && self.sends_zero_rtt();
        // An off-path probe carries probing frames only (an ACK is not one).
        if !zero_rtt && !opts.off_path {
            self.write_acks(now, space, buf, end, &mut sent);
        }
        match space {
            AckSpace::Initial | AckSpace::Handshake => {
                ack_eliciting |= self.write_crypto_frames(space, buf, end, &mut sent);
            }
            // Application data only: a 0-RTT packet has no acknowledgments (nothing of the
            // application data space has arrived), no CRYPTO, and no connection-level
            // frames of the handshake to come.
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.5
            //# Note that it is not possible to send the following frames in 0-RTT packets for
            //# various reasons: ACK, CRYPTO, HANDSHAKE_DONE, NEW_TOKEN, PATH_RESPONSE, and
            //# RETIRE_CONNECTION_ID.
            AckSpace::Path(_) if zero_rtt => {
                ack_eliciting |= self.write_data_frames(path_id, buf, end, &mut sent, None);
            }
            AckSpace::Path(_) if opts.off_path => {
                ack_eliciting |= self.write_path_frames(now, path_id, buf, end, true);
            }
            AckSpace::Path(_) => {
                ack_eliciting |= self.write_path_frames(now, path_id, buf, end, false);
                if !opts.path_only {
                    ack_eliciting |= self.write_control_frames(buf, end, &mut sent);
                    ack_eliciting |= self.write_crypto_frames(space, buf, end, &mut sent);
                }
                if opts.allow_data && !opts.path_only {
                    ack_eliciting |=
                        self.write_data_frames(path_id, buf, end, &mut sent, opts.data_class);
                }
            }
        }
        let wants_ping = opts.probe
            || opts.mtu_probe.is_some()
            || self
                .space_ref(space)
                .is_some_and(|s| s.ping_pending || s.probes_owed > 0)
            || (!ack_eliciting && self.should_elicit_ack(now, space, &sent));
        if wants_ping && !ack_eliciting && buf.len() < end {
            Frame::Ping.encode(buf);
            ack_eliciting = true;
        }
        if ack_eliciting && let Some(s) = self.space_mut(space) {
            s.ping_pending = false;
            s.probes_owed = s.probes_owed.saturating_sub(1);
        }
        if buf.len() == layout.start + layout.pn_offset + layout.pn_len {
            // Nothing to send after all (the skipped packet number is harmless).
            buf.truncate(layout.start);
            if let Some(s) = self.space_mut(space) {
                s.recovery.skip_packet_number(layout.pn);
            }
            return None;
        }
        let mut pad_to = opts
            .pad_datagram_to
            .map(|p| p.saturating_sub(TAG_LEN).min(end));
        if opts.mtu_probe.is_some() {
            pad_to = Some(end);
        }
        let padded = self.pad_for_sample(buf, layout, pad_to);
        let frames = self.qlog_frames_of(buf, layout);
        if !self.protect(space, buf, layout) {
            buf.truncate(layout.start);
            return None;
        }
        let size = buf.len() - layout.start;
        sent.mtu_probe = opts.mtu_probe;
        let in_flight = ack_eliciting || padded;
        self.qlog_packet_sent(now, space, layout.pn, size, frames);
        self.stats.packets_sent += 1;
        if matches!(space, AckSpace::Path(_)) {
            self.packets_since_key_update += 1;
        }
        if ack_eliciting && !self.sent_ack_eliciting_since_receive {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
            //# An endpoint also restarts its
            //# idle timer when sending an ack-eliciting packet if no other ack-
            //# eliciting packets have been sent since last receiving and processing
            //# a packet.
            self.sent_ack_eliciting_since_receive = true;
            self.reset_idle_timer(now);
        }
        let size16 = u16::try_from(size).unwrap_or(u16::MAX);
        let packet = SentPacket {
            time_sent: now,
            size: size16,
            ack_eliciting,
            in_flight,
            delivery: None,
            payload: sent,
        };
        self.on_packet_sent(space, layout.pn, packet);
        Some(size)
    }

    /// The qlog frames of the packet being built (its plaintext payload, before
    /// protection), decoded by the same parser as received packets so that each frame is
    /// logged under its own type; `None` without qlog.
    fn qlog_frames_of(&self, buf: &[u8], layout: HeaderLayout) -> Option<Vec<serde_json::Value>> {
        self.qlog.as_ref()?;
        let payload = buf.get(layout.start + layout.pn_offset + layout.pn_len..)?;
        Some(qlog_frames::payload_json(payload))
    }

    /// Logs `packet_sent` with the frames from [`Connection::qlog_frames_of`].
    fn qlog_packet_sent(
        &mut self,
        now: Instant,
        space: AckSpace,
        pn: u64,
        size: usize,
        frames: Option<Vec<serde_json::Value>>,
    ) {
        if let Some(frames) = frames {
            let zero_rtt = self.sends_zero_rtt();
            let data = json!({
                "header": self.qlog_header(space, pn, self.version, zero_rtt),
                "raw": { "length": size },
                "frames": frames,
            });
            self.qlog_event(now, "packet_sent", data);
        }
    }

    /// Pads the packet being built with PADDING up to `pad_to` (an absolute buffer offset)
    /// and at least far enough for the header-protection sample. Returns true if padding
    /// was requested.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-5.4.2
    //# To ensure that sufficient data is available for sampling, packets are
    //# padded so that the combined lengths of the encoded packet number and
    //# protected payload is at least 4 bytes longer than the sample required
    //# for header protection.
    fn pad_for_sample(
        &self,
        buf: &mut Vec<u8>,
        layout: HeaderLayout,
        pad_to: Option<usize>,
    ) -> bool {
        let min_end = layout.start + layout.pn_offset + 4 + packet::HP_SAMPLE_LEN - TAG_LEN;
        let target = pad_to.unwrap_or(0).max(min_end);
        if buf.len() < target {
            buf.resize(target, 0);
        }
        pad_to.is_some()
    }

    /// Sets the Length field, encrypts the packet (an application data packet with the
    /// 0-RTT keys while the client sends early data) and applies header protection.
    /// Returns false if protection failed (the packet must not be sent).
    fn protect(&mut self, space: AckSpace, buf: &mut Vec<u8>, layout: HeaderLayout) -> bool {
        let zero_rtt = self.sends_zero_rtt();
        buf.resize(buf.len() + TAG_LEN, 0);
        if let Some(long) = layout.long.as_ref() {
            let len = buf.len() - (layout.start + layout.pn_offset);
            packet::set_long_header_length(buf, long, len);
        }
        let header_len = layout.pn_offset + layout.pn_len;
        let packet = &mut buf[layout.start..];
        // Sealing and header protection with one level's keys.
        let seal = |packet: &mut [u8],
                    key: &dyn rustls::quic::PacketKey,
                    hp: &dyn rustls::quic::HeaderProtectionKey| {
            crate::crypto::seal_packet(key, None, layout.pn, packet, header_len).is_ok()
                && packet::apply_header_protection(packet, layout.pn_offset, layout.pn_len, hp)
                    .is_ok()
        };
        let result = match space {
            AckSpace::Initial | AckSpace::Handshake => {
                let hs = if space == AckSpace::Initial {
                    self.initial.as_ref()
                } else {
                    self.handshake.as_ref()
                };
                let Some(keys) = hs.and_then(|h| h.keys.as_ref()) else {
                    return false;
                };
                seal(
                    packet,
                    keys.local.packet.as_ref(),
                    keys.local.header.as_ref(),
                )
            }
            AckSpace::Path(_) if zero_rtt => {
                let Some(keys) = self.zero_rtt.as_ref() else {
                    return false;
                };
                seal(packet, keys.packet.as_ref(), keys.header.as_ref())
            }
            AckSpace::Path(id) => {
                let nonce_path = self.multipath.map(|_| id);
                let Some(keys) = self.one_rtt.as_mut() else {
                    return false;
                };
                keys.seal(nonce_path, layout.pn, packet, header_len).is_ok()
                    && packet::apply_header_protection(
                        packet,
                        layout.pn_offset,
                        layout.pn_len,
                        keys.local_header(),
                    )
                    .is_ok()
            }
        };
        if !result {
            tracing::error!(?space, "failed to protect a packet");
        }
        result
    }

    /// Paths other than `own` whose acknowledgments are due but which cannot carry them
    /// themselves (abandoned, or without a connection ID to send on): their PATH_ACKs ride
    /// on another path's packets.
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4.3
    //# PATH_ACK frames have to be sent on a different path than the path being abandoned
    //# after sending the PATH_ABANDON frame as connection IDs are immediately retired.
    fn orphan_acks_due(&self, now: Instant, own: PathId) -> impl Iterator<Item = PathId> + '_ {
        self.paths.values().filter_map(move |p| {
            (p.id != own
                && p.space.acks.ack_due(now)
                && (p.state == PathState::Abandoned || self.peer_cids.active(p.id).is_none()))
            .then_some(p.id)
        })
    }

    /// Whether a packet of `space` that would carry only acknowledgments (`sent`) should
    /// elicit one: once per round trip on its path, while an acknowledged space reports
    /// gaps that only the peer's acknowledgment of our ACK frames lets it drop. Without it
    /// a receiver of a one-way transfer repeats up to [`frame::MAX_ACK_RANGES`] old ranges
    /// in every ACK, and the sender processes them all each time.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.4
    //# This could cause the
    //# receiver to maintain state for a large number of ACK frames for a long period of
    //# time, and ACK frames it sends could be unnecessarily large.  In such a case, a
    //# receiver could send a PING or other small ack-eliciting frame occasionally,
    //# such as once per round trip, to elicit an ACK from the peer.
    //
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.1
    //# In that case, an endpoint
    //# MUST NOT send an ack-eliciting frame in all packets that would otherwise be
    //# non-ack-eliciting, to avoid an infinite feedback loop of acknowledgments.
    fn should_elicit_ack(&self, now: Instant, space: AckSpace, sent: &SentFrames) -> bool {
        let gaps = sent.acks.iter().any(|(target, _)| {
            self.space_ref(*target)
                .is_some_and(|s| s.acks.received.len() > 1)
        });
        let AckSpace::Path(id) = space else {
            return false;
        };
        gaps && self.paths.get(&id).is_some_and(|p| {
            p.rtt.has_sample()
                && p.last_ack_eliciting_sent
                    .is_none_or(|t| now >= t + p.rtt.smoothed())
        })
    }

    /// ACK / PATH_ACK frames for this packet: the packet's own space, plus (in 1-RTT
    /// packets) due acknowledgments of paths that cannot carry their own.
    fn write_acks(
        &mut self,
        now: Instant,
        space: AckSpace,
        buf: &mut Vec<u8>,
        end: usize,
        sent: &mut SentFrames,
    ) {
        let exponent = self.config.ack_delay_exponent;
        let multipath = self.multipath.is_some();
        // The spaces of abandoned paths with acknowledgments due ride along (rarely any:
        // collecting none allocates nothing).
        let orphans: Vec<AckSpace> = match space {
            AckSpace::Path(own) => self.orphan_acks_due(now, own).map(AckSpace::Path).collect(),
            _ => Vec::new(),
        };
        for target in std::iter::once(space).chain(orphans) {
            let Some(s) = self.space_mut(target) else {
                continue;
            };
            if !s.acks.can_ack() {
                continue;
            }
            let delay = s.acks.ack_delay(now, exponent);
            let path_field = match target {
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.3
                //# After the handshake concludes with support for the multipath extension,
                //# endpoints SHOULD use PATH_ACK frames instead of ACK frames,
                //# including for so far unacknowledged 0-RTT packets using path ID 0.
                AckSpace::Path(id) if multipath => Some(id),
                _ => None,
            };
            let room = end.saturating_sub(buf.len());
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.1
            //# Even if an endpoint does not set an ECT field in packets it sends, the endpoint
            //# MUST provide feedback about ECN markings it receives, if these are accessible.
            let ecn = (s.acks.ecn != EcnCounts::default()).then_some(&s.acks.ecn);
            let Some(encoded) =
                frame::encode_ack(buf, path_field, &s.acks.received, delay, ecn, room)
            else {
                continue;
            };
            s.acks.on_ack_sent();
            sent.acks.push((target, encoded.largest));
        }
    }

    /// CRYPTO frames of the space's stream. Returns true if any was written.
    fn write_crypto_frames(
        &mut self,
        space: AckSpace,
        buf: &mut Vec<u8>,
        end: usize,
        sent: &mut SentFrames,
    ) -> bool {
        let Some(stream) = self.crypto_stream(space) else {
            return false;
        };
        let mut wrote = false;
        while let Some((offset, data)) = stream.poll_transmit(end.saturating_sub(buf.len())) {
            sent.crypto.push((offset, data.len() as u64));
            frame::Crypto { offset, data }.encode(buf);
            wrote = true;
        }
        wrote
    }

    /// PATH_RESPONSE and PATH_CHALLENGE frames of a path, or with `off_path` of the other
    /// 4-tuple it probes. Returns true if any was written.
    fn write_path_frames(
        &mut self,
        now: Instant,
        path_id: PathId,
        buf: &mut Vec<u8>,
        end: usize,
        off_path: bool,
    ) -> bool {
        let Some(path) = self.paths.get_mut(&path_id) else {
            return false;
        };
        let (responses, challenge, attempts) = if off_path {
            let Some(probe) = path.off_path.as_mut() else {
                return false;
            };
            (
                &mut probe.responses,
                &mut probe.challenge,
                Some(&mut probe.attempts),
            )
        } else {
            (&mut path.responses, &mut path.challenge, None)
        };
        let mut wrote = false;
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
        //# If an endpoint sends a PATH_RESPONSE ({{Section 19.18 of QUIC-TRANSPORT}}), it MUST be sent on the same path
        //# as used by the packet that contained the PATH_CHALLENGE frame ({{Section 19.17 of QUIC-TRANSPORT}}),
        //# using a connection ID associated with the same path ID.
        while let Some(&token) = responses.front() {
            if !put_frame(buf, end, &Frame::PathResponse(token)) {
                break;
            }
            responses.pop_front();
            wrote = true;
        }
        if let Some(ch) = challenge.as_mut()
            && ch.sent_at.is_none()
            && put_frame(buf, end, &Frame::PathChallenge(ch.token))
        {
            ch.sent_at = Some(now);
            if let Some(attempts) = attempts {
                *attempts += 1;
            }
            wrote = true;
        }
        wrote
    }

    /// Connection-level control frames. Returns true if any was written.
    fn write_control_frames(
        &mut self,
        buf: &mut Vec<u8>,
        end: usize,
        sent: &mut SentFrames,
    ) -> bool {
        let mut wrote = false;
        let multipath = self.multipath.is_some();
        if self.pending.handshake_done && put_frame(buf, end, &Frame::HandshakeDone) {
            self.pending.handshake_done = false;
            sent.conn.push(ConnFrame::HandshakeDone);
            wrote = true;
        }
        while let Some(&(path, sequence)) = self.pending.retire_cids.first() {
            let path_field = (path != PathId::ZERO || multipath).then_some(path);
            if !put_frame(
                buf,
                end,
                &Frame::RetireConnectionId {
                    path_id: path_field,
                    sequence,
                },
            ) {
                break;
            }
            self.pending.retire_cids.remove(&(path, sequence));
            sent.conn
                .push(ConnFrame::RetireConnectionId { path, sequence });
            wrote = true;
        }
        while let Some(&(path, sequence)) = self.pending.new_cids.first() {
            let Some(issued) = self.local_cids.get(path, sequence).copied() else {
                self.pending.new_cids.remove(&(path, sequence));
                continue;
            };
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2
            //# Endpoints SHOULD also use PATH_NEW_CONNECTION_ID and
            //# PATH_RETIRE_CONNECTION_ID for the initial path with path ID 0.
            let f = frame::NewConnectionId {
                path_id: (path != PathId::ZERO || multipath).then_some(path),
                sequence,
                retire_prior_to: self.local_cids.retire_prior_to(path),
                id: issued.cid,
                reset_token: issued.reset_token,
            };
            if !put_frame(buf, end, &Frame::NewConnectionId(f)) {
                break;
            }
            self.pending.new_cids.remove(&(path, sequence));
            sent.conn
                .push(ConnFrame::NewConnectionId { path, sequence });
            wrote = true;
        }
        for path in self.paths.values_mut() {
            if let Some(code) = path.abandon_pending {
                let f = Frame::PathAbandon {
                    path_id: path.id,
                    error_code: TransportErrorCode(code),
                };
                if !put_frame(buf, end, &f) {
                    break;
                }
                path.abandon_pending = None;
                sent.conn.push(ConnFrame::PathAbandon {
                    path: path.id,
                    code,
                });
                wrote = true;
            }
            if path.status_frame_pending {
                let f = Frame::PathStatus {
                    path_id: path.id,
                    status: path.local_status,
                    sequence: path.local_status_sequence,
                };
                if !put_frame(buf, end, &f) {
                    break;
                }
                path.status_frame_pending = false;
                sent.conn.push(ConnFrame::PathStatus {
                    path: path.id,
                    sequence: path.local_status_sequence,
                });
                wrote = true;
            }
        }
        if let Some(mp) = self.multipath {
            if self.pending.max_path_id
                && put_frame(buf, end, &Frame::MaxPathId(PathId(mp.local_max_path_id)))
            {
                self.pending.max_path_id = false;
                sent.conn.push(ConnFrame::MaxPathId);
                wrote = true;
            }
            if self.pending.paths_blocked
                && put_frame(buf, end, &Frame::PathsBlocked(PathId(mp.peer_max_path_id)))
            {
                self.pending.paths_blocked = false;
                sent.conn.push(ConnFrame::PathsBlocked);
                wrote = true;
            }
            while let Some(&path) = self.pending.path_cids_blocked.first() {
                let next_sequence = self.peer_cids.next_expected_sequence(path);
                if !put_frame(
                    buf,
                    end,
                    &Frame::PathCidsBlocked {
                        path_id: path,
                        next_sequence,
                    },
                ) {
                    break;
                }
                self.pending.path_cids_blocked.remove(&path);
                sent.conn.push(ConnFrame::PathCidsBlocked { path });
                wrote = true;
            }
        }
        while let Some(control) = self.streams.poll_control(end.saturating_sub(buf.len())) {
            control_frame(&control).encode(buf);
            sent.stream_control.push(control);
            wrote = true;
        }
        wrote
    }

    /// DATAGRAM and STREAM frames. Returns true if any was written.
    fn write_data_frames(
        &mut self,
        path_id: PathId,
        buf: &mut Vec<u8>,
        end: usize,
        sent: &mut SentFrames,
        class: Option<QosClass>,
    ) -> bool {
        let mut wrote = false;
        let mut copies = false;
        if let Some(path) = self.paths.get_mut(&path_id) {
            while let Some(data) = path.datagram_queue.front() {
                if crate::datagrams::datagram_frame_len(data.len()) > end.saturating_sub(buf.len())
                {
                    break;
                }
                let Some(data) = path.datagram_queue.pop_front() else {
                    break;
                };
                path.queued_bytes -= data.len() as u64;
                path.datagram_queue_bytes -= data.len();
                sent.datagram_bytes += data.len() as u64;
                frame::Datagram { data }.encode(true, buf);
                wrote = true;
                copies = true;
            }
            while let Some(chunk) = path.queue.pop_front() {
                path.queued_bytes -= chunk.data.len() as u64;
                let len = chunk.data.len() as u64;
                if !self.streams.is_sending(chunk.id)
                    || self
                        .streams
                        .is_acked(chunk.id, chunk.offset, len, chunk.fin)
                {
                    // Reset since it was queued (no further STREAM frames for it), or a
                    // redundant copy whose data another path delivered first.
                    continue;
                }
                let room = end.saturating_sub(buf.len());
                let (now_part, rest) = chunk.split_to_fit(room);
                if let Some(rest) = rest {
                    path.queued_bytes += rest.data.len() as u64;
                    path.queue.push_front(rest);
                }
                let Some(part) = now_part else {
                    break;
                };
                // The chunks queued after this one that continue it go in its frame: one
                // frame for the peer to process and acknowledge rather than a sliver of
                // the next chunk in a frame of its own in every packet.
                let mut parts = std::mem::take(&mut self.stream_parts_scratch);
                parts.clear();
                let (id, offset, mut fin) = (part.id, part.offset, part.fin);
                let mut len = part.data.len();
                parts.push(part.data);
                while !fin
                    && let Some(next) = path.queue.front()
                    && next.id == id
                    && next.offset == offset + len as u64
                    && !self
                        .streams
                        .is_acked(id, next.offset, next.data.len() as u64, next.fin)
                {
                    let header =
                        frame::stream_frame_header_len(id, offset, len + next.data.len(), true);
                    let room = end.saturating_sub(buf.len() + header + len);
                    let take = room.min(next.data.len());
                    if take == 0 && !(next.data.is_empty() && next.fin) {
                        break;
                    }
                    let Some(mut next) = path.queue.pop_front() else {
                        break;
                    };
                    path.queued_bytes -= next.data.len() as u64;
                    if take < next.data.len() {
                        let head = next.data.split_to(take);
                        next.offset += take as u64;
                        path.queued_bytes += next.data.len() as u64;
                        path.queue.push_front(next);
                        len += head.len();
                        parts.push(head);
                        break;
                    }
                    len += next.data.len();
                    fin = next.fin;
                    parts.push(next.data);
                }
                write_stream_frame(id, offset, fin, &parts, buf, sent);
                self.stream_parts_scratch = parts;
                wrote = true;
            }
        }
        // A packet carrying duplicated datagrams takes nothing else new: what it would take
        // would leave on this path alone. A packet of no class (a probe) takes datagrams of
        // the default class only: any other class's datagrams wait for a packet whose path
        // that class's policy chose.
        if !copies {
            while let Some(data) = self.datagrams.pop_outgoing_if_fits(
                end.saturating_sub(buf.len()),
                Some(class.unwrap_or(QosClass::BestEffort)),
            ) {
                sent.datagram_bytes += data.len() as u64;
                frame::Datagram { data }.encode(true, buf);
                wrote = true;
            }
            while let Some(chunk) = self
                .streams
                .poll_stream_data(end.saturating_sub(buf.len()), class)
            {
                write_stream_frame(chunk.id, chunk.offset, chunk.fin, &[chunk.data], buf, sent);
                wrote = true;
            }
        }
        if let Some(p) = self.paths.get_mut(&path_id) {
            p.stats.payload_bytes_sent += sent.payload_bytes();
        }
        wrote
    }

    /// Accounts a finished datagram (or GSO batch) and describes it.
    fn finish_transmit(
        &mut self,
        path_id: PathId,
        size: usize,
        segment_size: Option<usize>,
    ) -> Option<Transmit> {
        if size == 0 {
            return None;
        }
        let path = self.paths.get_mut(&path_id)?;
        path.on_datagram_sent(size as u64);
        Some(Transmit {
            destination: path.remote,
            source: path.local,
            size,
            segment_size,
            path: path_id,
            ecn: self
                .batch_ecn
                .take()
                .unwrap_or(false)
                .then_some(EcnCodepoint::Ect0),
        })
    }
}

/// Test and fuzzing support: packets with arbitrary frames, as a misbehaving peer sends.
#[cfg(any(test, feature = "testing"))]
impl Connection {
    /// Builds one 1-RTT packet on path `path` whose payload is `payload` (any bytes, taken
    /// as frames by the receiver), protected with the current keys and the next packet
    /// number, as this endpoint would send it. The packet is not recorded as sent (it is
    /// never retransmitted). `None` before the handshake completes, for a path without a
    /// peer connection ID, or if the payload does not fit a datagram.
    pub(crate) fn seal_raw_frames(&mut self, path: PathId, payload: &[u8]) -> Option<Vec<u8>> {
        if !self.handshake_complete || self.one_rtt.is_none() || payload.len() > 1400 {
            return None;
        }
        let space = AckSpace::Path(path);
        self.space_ref(space)?;
        let mut buf = Vec::new();
        let layout = self.write_header(space, &mut buf, false)?;
        buf.extend_from_slice(payload);
        self.pad_for_sample(&mut buf, layout, None);
        self.protect(space, &mut buf, layout).then_some(buf)
    }
}

/// Writes a STREAM frame (with a Length field) carrying `parts`, the contiguous data of
/// stream `id` from `offset`, and records it in `sent` for retransmission.
fn write_stream_frame(
    id: StreamId,
    offset: u64,
    fin: bool,
    parts: &[Bytes],
    buf: &mut Vec<u8>,
    sent: &mut SentFrames,
) {
    let len: usize = parts.iter().map(Bytes::len).sum();
    sent.stream.push(StreamRange {
        id,
        offset,
        len: len as u64,
        fin,
    });
    frame::encode_stream_header(id, offset, Some(len), fin, buf);
    for data in parts {
        buf.extend_from_slice(data);
    }
}

/// Writes `frame` if it fits before `end`.
fn put_frame(buf: &mut Vec<u8>, end: usize, frame: &Frame) -> bool {
    if buf.len() + frame.encoded_len() > end {
        return false;
    }
    frame.encode(buf);
    true
}

/// The wire frame for a stream-layer control frame.
fn control_frame(c: &ControlFrame) -> Frame {
    match *c {
        ControlFrame::ResetStream {
            id,
            error_code,
            final_size,
        } => Frame::ResetStream(frame::ResetStream {
            id,
            error_code,
            final_size,
        }),
        ControlFrame::StopSending { id, error_code } => {
            Frame::StopSending(frame::StopSending { id, error_code })
        }
        ControlFrame::MaxData { max } => Frame::MaxData(max),
        ControlFrame::MaxStreamData { id, max } => Frame::MaxStreamData { id, max },
        ControlFrame::MaxStreams { dir, count } => Frame::MaxStreams { dir, count },
        ControlFrame::DataBlocked { limit } => Frame::DataBlocked(limit),
        ControlFrame::StreamDataBlocked { id, limit } => Frame::StreamDataBlocked { id, limit },
        ControlFrame::StreamsBlocked { dir, limit } => Frame::StreamsBlocked { dir, limit },
    }
}
