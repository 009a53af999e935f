//! The send path: deciding what to send, building and protecting packets.

use super::*;
use crate::frame::{self, FrameType};
use crate::packet::{self, LongType};
use crate::recovery::SentPacket;

/// The smallest datagram that may carry an ack-eliciting Initial packet.
//= https://www.rfc-editor.org/rfc/rfc9000#section-14.1
//# A client MUST expand the payload of all UDP datagrams carrying Initial
//# packets to at least the smallest allowed maximum datagram size of
//# 1200 bytes by adding PADDING frames to the Initial packet or by
//# coalescing the Initial packet; see Section 12.2.
const MIN_INITIAL_DATAGRAM: usize = 1200;

/// AEAD tag length of every QUIC v1 cipher suite.
const TAG_LEN: usize = 16;

/// What kind of packet to build.
#[derive(Debug, Clone, Copy, Default)]
struct BuildOptions {
    /// Pad the packet so the datagram reaches at least this many bytes.
    pad_datagram_to: Option<usize>,
    /// Carry stream data and datagrams.
    allow_data: bool,
    /// Must be ack-eliciting (probe): add a PING if nothing else elicits an ACK.
    probe: bool,
    /// Only frames that belong to this path (ACKs, path validation), nothing else.
    path_only: bool,
    /// Build a PMTU probe of exactly this size.
    mtu_probe: Option<u16>,
}

/// Result of building one packet.
#[derive(Debug, Clone, Copy)]
struct Built {
    size: usize,
    ack_eliciting: bool,
}

impl Connection {
    /// Writes the next datagram(s) to send into `buf` (cleared first) and describes them,
    /// or returns `None` when there is nothing to send now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        match self.state {
            State::Drained | State::Draining { .. } => return None,
            State::Closing { .. } => return self.poll_close(now, buf),
            _ => {}
        }
        if let Some(interval) = self.config.key_update_interval
            && self.packets_since_key_update >= interval
            && self.force_key_update()
        {
            self.qlog_event(now, "key_updated", json!({"key_type": "client_1rtt_secret", "trigger": "local_update"}));
        }
        if (self.initial.is_some() || self.handshake.is_some())
            && let Some(t) = self.poll_handshake_datagram(now, buf)
        {
            return Some(t);
        }
        if self.one_rtt.is_none() {
            return None;
        }
        let ids: Vec<PathId> = self.paths.keys().copied().collect();
        for id in ids {
            if let Some(t) = self.poll_path_specific(now, id, buf) {
                return Some(t);
            }
        }
        self.poll_scheduled(now, buf)
    }

    /// Datagram carrying Initial and/or Handshake packets (and coalesced 1-RTT) on path 0.
    fn poll_handshake_datagram(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let path0 = self.paths.get(&PathId::ZERO)?;
        let mtu = usize::from(path0.mtu);
        let budget = path0.amplification_budget().min(mtu as u64) as usize;
        let wants_initial = self.initial.as_ref().is_some_and(|h| h.keys.is_some() && Self::space_wants_to_send(&h.space, &h.crypto, now));
        let wants_handshake =
            self.handshake.as_ref().is_some_and(|h| h.keys.is_some() && Self::space_wants_to_send(&h.space, &h.crypto, now));
        if !wants_initial && !wants_handshake {
            return None;
        }
        // Client Initials, and server datagrams with ack-eliciting Initials, are padded.
        let needs_padding = wants_initial
            && (self.side.is_client() || self.initial.as_ref().is_some_and(|h| h.crypto.has_pending() || h.space.probes_owed > 0));
        if needs_padding && budget < MIN_INITIAL_DATAGRAM {
            return None;
        }
        let wants_1rtt = self.handshake_complete && self.one_rtt.is_some() && self.has_1rtt_content(PathId::ZERO, now);
        let mut built_any = false;
        if wants_initial {
            let last = !wants_handshake && !wants_1rtt;
            let opts = BuildOptions { pad_datagram_to: (needs_padding && last).then_some(MIN_INITIAL_DATAGRAM), ..Default::default() };
            if self.build_packet(now, AckSpace::Initial, PathId::ZERO, buf, budget, opts).is_some() {
                built_any = true;
            }
        }
        if wants_handshake && budget.saturating_sub(buf.len()) > 64 {
            let last = !wants_1rtt;
            let opts = BuildOptions { pad_datagram_to: (needs_padding && last).then_some(MIN_INITIAL_DATAGRAM), ..Default::default() };
            if self.build_packet(now, AckSpace::Handshake, PathId::ZERO, buf, budget, opts).is_some() {
                built_any = true;
                //= https://www.rfc-editor.org/rfc/rfc9001#section-4.9.1
                //# a client MUST discard Initial keys when it first sends a Handshake packet
                if self.side.is_client() {
                    self.discard_space(now, AckSpace::Initial);
                }
            }
        }
        if wants_1rtt && budget.saturating_sub(buf.len()) > 64 {
            let opts = BuildOptions {
                pad_datagram_to: needs_padding.then_some(MIN_INITIAL_DATAGRAM),
                allow_data: self.paths.get(&PathId::ZERO).is_some_and(Path::is_usable),
                ..Default::default()
            };
            if self.build_packet(now, AckSpace::Path(PathId::ZERO), PathId::ZERO, buf, budget, opts).is_some() {
                built_any = true;
            }
        }
        if !built_any {
            return None;
        }
        self.finish_transmit(PathId::ZERO, buf.len(), None)
    }

    fn space_wants_to_send(space: &PacketSpace, crypto: &CryptoStream, now: Instant) -> bool {
        space.acks.ack_due(now) || crypto.has_pending() || space.probes_owed > 0 || space.ping_pending
    }

    /// Whether a 1-RTT packet on `id` has anything worth sending apart from scheduled data.
    fn has_1rtt_content(&self, id: PathId, now: Instant) -> bool {
        let Some(path) = self.paths.get(&id) else { return false };
        path.space.acks.ack_due(now)
            || !path.responses.is_empty()
            || path.challenge.is_some_and(|c| c.sent_at.is_none())
            || path.space.probes_owed > 0
            || path.space.ping_pending
            || self.has_control_frames()
    }

    fn has_control_frames(&self) -> bool {
        self.pending.handshake_done
            || !self.pending.new_cids.is_empty()
            || !self.pending.retire_cids.is_empty()
            || self.pending.max_path_id
            || self.pending.paths_blocked
            || !self.pending.path_cids_blocked.is_empty()
            || self.paths.values().any(|p| p.abandon_pending.is_some() || p.status_frame_pending)
            || self.streams.has_control()
            || self.crypto_1rtt.has_pending()
    }

    /// Packets that belong to one path: path validation, PTO probes, due ACKs (when no data
    /// packet will carry them), PMTU probes.
    fn poll_path_specific(&mut self, now: Instant, id: PathId, buf: &mut Vec<u8>) -> Option<Transmit> {
        let path = self.paths.get(&id)?;
        if self.peer_cids.active(id).is_none() {
            return None;
        }
        let mtu = usize::from(path.mtu);
        let budget = path.amplification_budget().min(mtu as u64) as usize;
        if budget < 64 {
            return None;
        }
        let validating = !path.responses.is_empty() || path.challenge.is_some_and(|c| c.sent_at.is_none());
        if validating {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.1
            //# An endpoint MUST expand datagrams that contain a PATH_CHALLENGE frame
            //# to at least the smallest allowed maximum datagram size of 1200 bytes,
            //# unless the anti-amplification limit for the path does not permit
            //# sending a datagram of this size.
            let pad = (budget >= MIN_INITIAL_DATAGRAM).then_some(MIN_INITIAL_DATAGRAM);
            let opts = BuildOptions { pad_datagram_to: pad, path_only: true, ..Default::default() };
            self.build_packet(now, AckSpace::Path(id), id, buf, budget, opts)?;
            return self.finish_transmit(id, buf.len(), None);
        }
        if path.space.probes_owed > 0 {
            let opts = BuildOptions { probe: true, allow_data: path.is_usable(), ..Default::default() };
            self.build_packet(now, AckSpace::Path(id), id, buf, budget, opts)?;
            if let Some(p) = self.paths.get_mut(&id) {
                p.space.probes_owed = p.space.probes_owed.saturating_sub(1);
            }
            return self.finish_transmit(id, buf.len(), None);
        }
        if let MtuDiscovery::Pending { size, attempts } = path.mtu_discovery
            && path.is_usable()
            && self.handshake_confirmed
            && path.window_room() >= u64::from(size)
            && usize::from(size) <= path.amplification_budget() as usize
        {
            let opts = BuildOptions { mtu_probe: Some(size), path_only: true, ..Default::default() };
            let built = self.build_packet(now, AckSpace::Path(id), id, buf, usize::from(size), opts)?;
            if let Some(p) = self.paths.get_mut(&id) {
                p.mtu_discovery = MtuDiscovery::InFlight { size, attempts: attempts + 1 };
            }
            return self.finish_transmit(id, built.size, None);
        }
        // An ACK that is due, a keep-alive PING or control frames, when no scheduled data
        // packet on this path will carry them.
        let path = self.paths.get(&id)?;
        let data_coming = path.is_usable() && self.has_scheduled_work() && self.path_can_send_data(now, path);
        let needs_ack = path.space.acks.ack_due(now);
        let needs_ping = path.space.ping_pending;
        let control = path.is_usable() && self.has_control_frames() && !data_coming;
        if (needs_ack || needs_ping || control) && !data_coming {
            let opts = BuildOptions { path_only: !control, ..Default::default() };
            self.build_packet(now, AckSpace::Path(id), id, buf, budget, opts)?;
            return self.finish_transmit(id, buf.len(), None);
        }
        None
    }

    fn has_scheduled_work(&self) -> bool {
        self.streams.has_pending() || self.datagrams.has_outgoing()
    }

    /// True if congestion control and pacing let a full-sized data packet leave now.
    fn path_can_send_data(&self, now: Instant, path: &Path) -> bool {
        let mtu = u64::from(path.mtu);
        if path.bytes_in_flight + mtu > path.cc.window() {
            return false;
        }
        !self.config.pacing || path.pacer.release_time().is_none_or(|t| t <= now)
    }

    /// Scheduled application data, batched for GSO when consecutive packets go to the same
    /// path.
    fn poll_scheduled(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.handshake_complete || !self.has_scheduled_work() && !self.has_control_frames() {
            return None;
        }
        let mut segment: Option<(PathId, usize)> = None;
        let mut count = 0;
        loop {
            let (decision, pending) = self.schedule(now);
            let targets = match decision {
                Decision::Send(id) => vec![id],
                Decision::Duplicate(ids) => ids,
                Decision::Wait => break,
            };
            let Some(&first) = targets.first() else { break };
            if let Some((seg_path, _)) = segment
                && (seg_path != first || targets.len() > 1)
            {
                break;
            }
            let Some(path) = self.paths.get(&first) else { break };
            if !path.is_usable() || !self.path_can_send_data(now, path) {
                break;
            }
            let mtu = usize::from(path.mtu);
            let start = buf.len();
            let opts = BuildOptions { allow_data: true, ..Default::default() };
            let payload_before = self.paths.get(&first).map_or(0, |p| p.stats.payload_bytes_sent);
            let Some(built) = self.build_packet(now, AckSpace::Path(first), first, buf, start + mtu, opts) else {
                break;
            };
            let payload = self.paths.get(&first).map_or(0, |p| p.stats.payload_bytes_sent) - payload_before;
            self.scheduler.on_packet_sent(now, first, payload);
            if targets.len() > 1 {
                // Redundant scheduling: the same data goes out on the other paths as well,
                // each copy as its own transmit later (the content is re-queued as if lost
                // on those paths, which the stream layer keeps idempotent).
                self.duplicate_last_packet(first, &targets[1..]);
            }
            count += 1;
            match segment {
                None => segment = Some((first, built.size)),
                Some((_, seg)) if built.size < seg => break,
                Some(_) => {}
            }
            let seg = segment.map_or(built.size, |(_, s)| s);
            let _ = pending;
            if built.size < seg || built.size < mtu || count >= self.config.max_gso_segments || targets.len() > 1 {
                break;
            }
        }
        let (id, seg) = segment?;
        let segment_size = (count > 1).then_some(seg);
        self.finish_transmit(id, buf.len(), segment_size)
    }

    /// Asks the scheduler where the next data packet goes.
    fn schedule(&mut self, now: Instant) -> (Decision, PendingData) {
        let pending = PendingData {
            new_stream_bytes: self.streams.pending_new_bytes(),
            retransmit_bytes: self.streams.pending_retransmit_bytes(),
            datagrams: usize::from(self.datagrams.has_outgoing()),
            datagram_bytes: self.datagrams.next_outgoing_len().unwrap_or(0) as u64,
            class: Default::default(),
        };
        let snapshots: Vec<PathSnapshot> = self
            .paths
            .values()
            .filter(|p| p.state != PathState::Abandoned && self.peer_cids.active(p.id).is_some())
            .map(|p| {
                let can_send = p.is_usable() && self.path_can_send_data(now, p);
                p.snapshot(can_send, p.pacer.release_time())
            })
            .collect();
        let decision = if pending.is_empty() && self.has_control_frames() {
            // Control frames only: any usable path that can send.
            snapshots.iter().find(|s| s.can_send).map_or(Decision::Wait, |s| Decision::Send(s.id))
        } else {
            self.scheduler.schedule(now, &snapshots, &pending)
        };
        (decision, pending)
    }

    /// Re-queues the data of the packet just sent on `path` so that the next packets on
    /// `others` carry copies (redundant scheduler). Implemented by marking the stream
    /// ranges for retransmission on the other paths.
    fn duplicate_last_packet(&mut self, path: PathId, others: &[PathId]) {
        let Some(p) = self.paths.get(&path) else { return };
        let Some(frames) = p.space.recovery.newest().map(|s| s.payload.clone()) else { return };
        for other in others {
            if let Some(o) = self.paths.get_mut(other) {
                o.space.probes_owed = o.space.probes_owed.max(1);
            }
        }
        for s in &frames.stream {
            self.streams.on_stream_lost(s.id, s.offset, s.len, s.fin);
        }
    }

    /// CONNECTION_CLOSE while closing.
    fn poll_close(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.close_pending {
            return None;
        }
        self.close_pending = false;
        let close = self.close.clone()?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.2.3
        //# When sending a CONNECTION_CLOSE frame in a connection that is not yet
        //# confirmed, an endpoint ... SHOULD send it in packets of every
        //# packet number space it has keys for ...
        let id = self
            .paths
            .values()
            .find(|p| p.is_usable() && self.peer_cids.active(p.id).is_some())
            .map_or(PathId::ZERO, |p| p.id);
        let path = self.paths.get(&id)?;
        let budget = path.amplification_budget().min(u64::from(path.mtu)) as usize;
        let mut spaces = Vec::new();
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
            self.build_close_packet(now, space, id, buf, budget, &close);
        }
        if buf.is_empty() {
            return None;
        }
        self.finish_transmit(id, buf.len(), None)
    }

    fn build_close_packet(&mut self, now: Instant, space: AckSpace, path_id: PathId, buf: &mut Vec<u8>, limit: usize, close: &CloseFrame) {
        let Some((start, header_len, pn, pn_offset, pn_len, length_offset)) = self.write_header(space, path_id, buf) else {
            return;
        };
        let room = limit.saturating_sub(buf.len() + TAG_LEN);
        match (close, space) {
            (CloseFrame::Transport(e), _) => {
                frame::encode_connection_close(buf, e.code.0, e.frame_type.unwrap_or(0), e.reason.as_bytes(), room);
            }
            (CloseFrame::Application { code, reason }, AckSpace::Path(_)) => {
                frame::encode_application_close(buf, code.into_inner(), reason, room);
            }
            //= https://www.rfc-editor.org/rfc/rfc9000#section-10.2.3
            //# Sending a CONNECTION_CLOSE of type 0x1d in an Initial or Handshake
            //# packet could expose application state or be used to alter application
            //# state.  A CONNECTION_CLOSE of type 0x1d MUST be replaced by a
            //# CONNECTION_CLOSE of type 0x1c when sending the frame in Initial or
            //# Handshake packets.
            (CloseFrame::Application { .. }, _) => {
                frame::encode_connection_close(buf, TransportErrorCode::APPLICATION_ERROR.0, 0, &[], room);
            }
        }
        let _ = header_len;
        self.protect_packet(now, space, path_id, buf, start, pn, pn_offset, pn_len, length_offset, None);
    }

    /// Writes the packet header for `space` on `path_id` at the end of `buf`; returns
    /// (packet start, header length, packet number, pn offset, pn length, long-header
    /// length-field offset).
    #[allow(clippy::type_complexity)]
    fn write_header(&mut self, space: AckSpace, path_id: PathId, buf: &mut Vec<u8>) -> Option<(usize, usize, u64, usize, usize, Option<usize>)> {
        let dcid = self.peer_cids.active(path_id)?.cid;
        let start = buf.len();
        let version = self.version;
        let scid = self.local_handshake_cid;
        let token = self.retry_token.clone();
        let side = self.side;
        let key_phase = self.one_rtt.as_ref().is_some_and(|k| k.local_key_phase());
        let space_state = self.space_mut(space)?;
        let largest_acked = space_state.recovery.largest_acked();
        let pn = space_state.take_pn();
        let pn_len = packet::packet_number_len(pn, largest_acked);
        match space {
            AckSpace::Initial | AckSpace::Handshake => {
                let ty = if space == AckSpace::Initial { LongType::Initial } else { LongType::Handshake };
                let token: &[u8] = if ty == LongType::Initial && side.is_client() { &token } else { &[] };
                let layout = packet::write_long_header(buf, ty, version, &dcid, &scid, token, pn, pn_len);
                Some((start, buf.len() - start, pn, layout.pn_offset - start, pn_len, Some(layout.length_offset)))
            }
            AckSpace::Path(_) => {
                let pn_offset = packet::write_short_header(buf, false, key_phase, &dcid, pn, pn_len);
                Some((start, buf.len() - start, pn, pn_offset - start, pn_len, None))
            }
        }
    }

    /// Builds one packet of `space` on `path_id` at the end of `buf`, not letting the
    /// datagram exceed `datagram_limit` bytes in total.
    fn build_packet(
        &mut self,
        now: Instant,
        space: AckSpace,
        path_id: PathId,
        buf: &mut Vec<u8>,
        datagram_limit: usize,
        opts: BuildOptions,
    ) -> Option<Built> {
        if datagram_limit <= buf.len() + 64 {
            return None;
        }
        let (start, _header_len, pn, pn_offset, pn_len, length_offset) = self.write_header(space, path_id, buf)?;
        let limit = match opts.mtu_probe {
            Some(size) => start + usize::from(size),
            None => datagram_limit,
        };
        // Frames are written up to `limit - TAG_LEN`.
        let end = limit.saturating_sub(TAG_LEN);
        let mut sent = SentFrames::default();
        let mut ack_eliciting = false;

        // ACKs.
        self.write_acks(now, space, path_id, buf, end, &mut sent);

        if let AckSpace::Initial | AckSpace::Handshake = space {
            let crypto = match space {
                AckSpace::Initial => self.initial.as_mut().map(|h| &mut h.crypto),
                _ => self.handshake.as_mut().map(|h| &mut h.crypto),
            };
            if let Some(crypto) = crypto {
                while let Some((offset, data)) = crypto.poll_transmit(end.saturating_sub(buf.len())) {
                    frame::encode_crypto(buf, offset, &data);
                    sent.crypto.push((offset, data.len() as u64));
                    ack_eliciting = true;
                }
            }
        } else {
            ack_eliciting |= self.write_path_frames(now, path_id, buf, end, &mut sent);
            if !opts.path_only {
                ack_eliciting |= self.write_control_frames(now, path_id, buf, end, &mut sent);
            }
            if opts.allow_data && !opts.path_only {
                ack_eliciting |= self.write_data_frames(path_id, buf, end, &mut sent);
            }
        }

        let probe_ping = opts.probe
            || opts.mtu_probe.is_some()
            || self.space_mut(space).is_some_and(|s| s.ping_pending || s.probes_owed > 0);
        if probe_ping && !ack_eliciting && buf.len() < end {
            frame::encode_ping(buf);
            ack_eliciting = true;
        }
        if ack_eliciting && let Some(s) = self.space_mut(space) {
            s.ping_pending = false;
        }

        // Nothing at all to send: roll back (packet numbers may be skipped, which is allowed).
        let header_end = start + pn_offset + pn_len;
        if buf.len() == header_end {
            buf.truncate(start);
            return None;
        }

        // Padding: to the requested datagram size, to the probe size, or the minimum needed
        // for the header protection sample.
        let mut target = header_end + 4usize.saturating_sub(pn_len).max(0);
        if let Some(pad) = opts.pad_datagram_to {
            target = target.max(pad.saturating_sub(TAG_LEN).min(end));
        }
        if let Some(size) = opts.mtu_probe {
            target = target.max(start + usize::from(size) - TAG_LEN);
        }
        if buf.len() < target {
            buf.resize(target, 0);
        }
        let size = buf.len() + TAG_LEN - start;
        sent.mtu_probe = opts.mtu_probe;
        let in_flight = ack_eliciting || opts.pad_datagram_to.is_some();
        self.protect_packet(now, space, path_id, buf, start, pn, pn_offset, pn_len, length_offset, Some((sent, ack_eliciting, in_flight)));
        Some(Built { size, ack_eliciting })
    }

    /// Writes ACK / PATH_ACK frames that are due or useful in this packet.
    fn write_acks(&mut self, now: Instant, space: AckSpace, path_id: PathId, buf: &mut Vec<u8>, end: usize, sent: &mut SentFrames) {
        let exponent = self.config.ack_delay_exponent;
        let multipath = self.multipath.is_some();
        let mut targets: Vec<AckSpace> = Vec::with_capacity(2);
        match space {
            AckSpace::Initial | AckSpace::Handshake => targets.push(space),
            AckSpace::Path(_) => {
                targets.push(AckSpace::Path(path_id));
                // Acknowledgments of paths that cannot carry their own (abandoned, or not yet
                // able to send) go on whichever path is sending.
                for (id, p) in &self.paths {
                    if *id != path_id
                        && p.space.acks.ack_due(now)
                        && (p.state == PathState::Abandoned || self.peer_cids.active(*id).is_none())
                    {
                        targets.push(AckSpace::Path(*id));
                    }
                }
            }
        }
        for target in targets {
            let Some(s) = self.space_mut(target) else { continue };
            if !s.acks.can_ack() || s.acks.received.is_empty() {
                continue;
            }
            let delay = s.acks.ack_delay(now, exponent);
            let room = end.saturating_sub(buf.len());
            let path_field = match target {
                AckSpace::Path(id) if multipath => Some(id.0),
                _ => None,
            };
            let before = buf.len();
            let Some(largest) = frame::encode_ack(buf, path_field, &s.acks.received, delay, None, room) else { continue };
            if buf.len() == before {
                continue;
            }
            s.acks.on_ack_sent();
            sent.acks.push((target, largest));
        }
    }

    /// PATH_RESPONSE and PATH_CHALLENGE frames of this path. Returns true if any was
    /// written (both are ack-eliciting).
    fn write_path_frames(&mut self, now: Instant, path_id: PathId, buf: &mut Vec<u8>, end: usize, _sent: &mut SentFrames) -> bool {
        let Some(path) = self.paths.get_mut(&path_id) else { return false };
        let mut wrote = false;
        while let Some(token) = path.responses.front().copied() {
            if buf.len() + 9 > end {
                break;
            }
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
            //# If an endpoint sends a PATH_RESPONSE ({{Section 19.18 of QUIC-TRANSPORT}}), it MUST be sent on the same path
            //# as used by the packet that contained the PATH_CHALLENGE frame ({{Section 19.17 of QUIC-TRANSPORT}}),
            //# using a connection ID associated with the same path ID.
            frame::encode_path_response(buf, &token);
            path.responses.pop_front();
            wrote = true;
        }
        if let Some(ch) = path.challenge.as_mut()
            && ch.sent_at.is_none()
            && buf.len() + 9 <= end
        {
            frame::encode_path_challenge(buf, &ch.token);
            ch.sent_at = Some(now);
            ch.attempts += 1;
            wrote = true;
        }
        wrote
    }

    /// Connection-level control frames. Returns true if any was written.
    fn write_control_frames(&mut self, _now: Instant, path_id: PathId, buf: &mut Vec<u8>, end: usize, sent: &mut SentFrames) -> bool {
        let mut wrote = false;
        let multipath = self.multipath.is_some();
        if self.pending.handshake_done && buf.len() < end {
            frame::encode_handshake_done(buf);
            self.pending.handshake_done = false;
            sent.conn.push(ConnFrame::HandshakeDone);
            wrote = true;
        }
        // Retire first: it frees the peer to issue more.
        while let Some(&(path, sequence)) = self.pending.retire_cids.iter().next() {
            let room = end.saturating_sub(buf.len());
            let ok = if path == PathId::ZERO && !multipath {
                frame::encode_retire_connection_id(buf, None, sequence, room)
            } else {
                frame::encode_retire_connection_id(buf, Some(path.0), sequence, room)
            };
            if !ok {
                break;
            }
            self.pending.retire_cids.remove(&(path, sequence));
            sent.conn.push(ConnFrame::RetireConnectionId { path, sequence });
            wrote = true;
        }
        while let Some(&(path, sequence)) = self.pending.new_cids.iter().next() {
            let Some(issued) = self.local_cids.get(path, sequence).copied() else {
                self.pending.new_cids.remove(&(path, sequence));
                continue;
            };
            let room = end.saturating_sub(buf.len());
            let retire_prior_to = self.local_cids.retire_prior_to(path);
            let path_field = (path != PathId::ZERO || multipath).then_some(path.0);
            if !frame::encode_new_connection_id(buf, path_field, sequence, retire_prior_to, &issued.cid, &issued.reset_token, room) {
                break;
            }
            self.pending.new_cids.remove(&(path, sequence));
            sent.conn.push(ConnFrame::NewConnectionId { path, sequence });
            wrote = true;
        }
        let abandons: Vec<(PathId, u64)> = self.paths.values().filter_map(|p| p.abandon_pending.map(|c| (p.id, c))).collect();
        for (path, code) in abandons {
            if !frame::encode_path_abandon(buf, path.0, code, end.saturating_sub(buf.len())) {
                break;
            }
            if let Some(p) = self.paths.get_mut(&path) {
                p.abandon_pending = None;
            }
            sent.conn.push(ConnFrame::PathAbandon { path });
            wrote = true;
        }
        let statuses: Vec<(PathId, u64, PathStatus)> = self
            .paths
            .values()
            .filter(|p| p.status_frame_pending)
            .map(|p| (p.id, p.local_status_sequence, p.local_status))
            .collect();
        for (path, sequence, status) in statuses {
            if !frame::encode_path_status(buf, path.0, sequence, status == PathStatus::Backup, end.saturating_sub(buf.len())) {
                break;
            }
            if let Some(p) = self.paths.get_mut(&path) {
                p.status_frame_pending = false;
            }
            sent.conn.push(ConnFrame::PathStatus { path, sequence });
            wrote = true;
        }
        if let Some(mp) = self.multipath {
            if self.pending.max_path_id && frame::encode_max_path_id(buf, mp.local_max_path_id, end.saturating_sub(buf.len())) {
                self.pending.max_path_id = false;
                sent.conn.push(ConnFrame::MaxPathId);
                wrote = true;
            }
            if self.pending.paths_blocked && frame::encode_paths_blocked(buf, mp.peer_max_path_id, end.saturating_sub(buf.len())) {
                self.pending.paths_blocked = false;
                sent.conn.push(ConnFrame::PathsBlocked);
                wrote = true;
            }
            while let Some(&path) = self.pending.path_cids_blocked.iter().next() {
                let next = self.peer_cids.next_expected_sequence(path);
                if !frame::encode_path_cids_blocked(buf, path.0, next, end.saturating_sub(buf.len())) {
                    break;
                }
                self.pending.path_cids_blocked.remove(&path);
                sent.conn.push(ConnFrame::PathCidsBlocked { path });
                wrote = true;
            }
        }
        while let Some(control) = self.streams.poll_control(end.saturating_sub(buf.len())) {
            frame::encode_stream_control(buf, &control);
            sent.stream_control.push(control);
            wrote = true;
        }
        while let Some((offset, data)) = self.crypto_1rtt.poll_transmit(end.saturating_sub(buf.len())) {
            frame::encode_crypto(buf, offset, &data);
            sent.crypto.push((offset, data.len() as u64));
            wrote = true;
        }
        let _ = path_id;
        wrote
    }

    /// DATAGRAM and STREAM frames. Returns true if any was written.
    fn write_data_frames(&mut self, path_id: PathId, buf: &mut Vec<u8>, end: usize, sent: &mut SentFrames) -> bool {
        let mut wrote = false;
        while let Some(data) = self.datagrams.pop_outgoing_if_fits(end.saturating_sub(buf.len())) {
            frame::encode_datagram(buf, &data);
            sent.datagram_bytes += data.len() as u64;
            wrote = true;
        }
        loop {
            let room = end.saturating_sub(buf.len());
            if room < 8 {
                break;
            }
            let Some(chunk) = self.streams.poll_stream_data(room) else { break };
            frame::encode_stream(buf, chunk.id, chunk.offset, &chunk.data, chunk.fin, true);
            sent.stream.push(spaces::StreamRange { id: chunk.id, offset: chunk.offset, len: chunk.data.len() as u64, fin: chunk.fin });
            wrote = true;
        }
        if let Some(p) = self.paths.get_mut(&path_id) {
            p.stats.payload_bytes_sent += sent.payload_bytes();
        }
        wrote
    }

    /// Encrypts and header-protects the packet at `buf[start..]` and records it as sent.
    #[allow(clippy::too_many_arguments)]
    fn protect_packet(
        &mut self,
        now: Instant,
        space: AckSpace,
        path_id: PathId,
        buf: &mut Vec<u8>,
        start: usize,
        pn: u64,
        pn_offset: usize,
        pn_len: usize,
        length_offset: Option<usize>,
        record: Option<(SentFrames, bool, bool)>,
    ) {
        let header_len = pn_offset + pn_len;
        if let Some(off) = length_offset {
            let len = buf.len() - (start + pn_offset) + TAG_LEN;
            packet::set_long_header_length(buf, off, len);
        }
        let multipath_path = self.multipath.is_some().then_some(path_id.0);
        let result = match space {
            AckSpace::Initial | AckSpace::Handshake => {
                let keys = match space {
                    AckSpace::Initial => self.initial.as_ref().and_then(|h| h.keys.as_ref()),
                    _ => self.handshake.as_ref().and_then(|h| h.keys.as_ref()),
                };
                match keys {
                    Some(k) => crate::crypto::seal_packet(k.local.packet.as_ref(), None, pn, buf, start, header_len)
                        .and_then(|()| packet::apply_header_protection(&mut buf[start..], pn_offset, pn_len, k.local.header.as_ref())),
                    None => Err(crate::crypto::CryptoError::MissingKeys),
                }
            }
            AckSpace::Path(_) => match self.one_rtt.as_mut() {
                Some(k) => k.seal(multipath_path, pn, buf, start, header_len).and_then(|()| {
                    packet::apply_header_protection(&mut buf[start..], pn_offset, pn_len, k.local_header())
                }),
                None => Err(crate::crypto::CryptoError::MissingKeys),
            },
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "failed to protect a packet");
            buf.truncate(start);
            return;
        }
        let size = (buf.len() - start) as u16;
        self.stats.packets_sent += 1;
        if matches!(space, AckSpace::Path(_)) {
            self.packets_since_key_update += 1;
        }
        let Some((frames, ack_eliciting, in_flight)) = record else { return };
        if self.qlog.is_some() {
            let data = json!({
                "header": { "packet_type": space_packet_type(space), "packet_number": pn, "path_id": path_id.0 },
                "raw": { "length": size },
                "frames": crate::qlog_frames::sent_frames_json(&frames),
            });
            self.qlog_event(now, "packet_sent", data);
        }
        let Some(path) = self.paths.get_mut(&path_id) else { return };
        path.stats.packets_sent += 1;
        if in_flight {
            path.bytes_in_flight += u64::from(size);
            path.cc.on_packet_sent(now, u64::from(size), path.bytes_in_flight);
            if self.config.pacing {
                let rate = path.cc.pacing_rate();
                path.pacer.on_sent(now, u64::from(size), path.mtu, path.cc.window(), path.rtt.smoothed(), rate);
            }
        }
        if ack_eliciting {
            path.last_ack_eliciting_sent = Some(now);
            //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
            //# An endpoint also restarts its
            //# idle timer when sending an ack-eliciting packet if no other ack-
            //# eliciting packets have been sent since last receiving and processing
            //# a packet.
            if !self.sent_ack_eliciting_since_receive {
                self.sent_ack_eliciting_since_receive = true;
                self.idle_deadline = self.idle_timeout.map(|t| now + t.max(3 * self.largest_pto()));
            }
        }
        let app_limited = !self.has_scheduled_work();
        let packet = SentPacket::new(now, size, ack_eliciting, in_flight, frames, app_limited);
        let space_state = match space {
            AckSpace::Initial => self.initial.as_mut().map(|h| &mut h.space),
            AckSpace::Handshake => self.handshake.as_mut().map(|h| &mut h.space),
            AckSpace::Path(id) => self.paths.get_mut(&id).map(|p| &mut p.space),
        };
        if let Some(s) = space_state {
            s.recovery.on_packet_sent(pn, packet);
        }
    }

    /// Accounts a finished datagram (or GSO batch) and describes it.
    fn finish_transmit(&mut self, path_id: PathId, size: usize, segment_size: Option<usize>) -> Option<Transmit> {
        if size == 0 {
            return None;
        }
        let path = self.paths.get_mut(&path_id)?;
        path.on_datagram_sent(size as u64);
        Some(Transmit { destination: path.remote, source: path.local, size, segment_size, path: path_id })
    }

    /// Frame type helper kept for qlog: the type of the first frame written at `offset`.
    #[allow(dead_code)]
    fn frame_type_at(buf: &[u8], offset: usize) -> Option<FrameType> {
        let mut slice = buf.get(offset..)?;
        crate::VarInt::decode(&mut slice).ok().map(|v| FrameType(v.into_inner()))
    }
}
