//! Acknowledgments, loss detection and congestion control (RFC 9002, applied per path; path 0
//! also owns the Initial and Handshake spaces).

use super::spaces::{ConnFrame, SentFrames};
use super::*;
use crate::cc::CongestionEvent;
use crate::ecn::{EcnState, EcnVerdict};
use crate::frame::Ack;
use crate::recovery::{LostPackets, SentPacket};

impl Connection {
    /// Processes an ACK or PATH_ACK frame acknowledging packets of `space`.
    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.7
    //# OnAckReceived(ack, pn_space):
    pub(super) fn on_ack_frame(
        &mut self,
        now: Instant,
        space: AckSpace,
        ack: &Ack,
    ) -> Result<(), TransportError> {
        let path_id = space.path();
        let exponent = self
            .peer_params
            .as_ref()
            .map_or(3, |p| p.ack_delay_exponent);
        let delay_us = ack
            .delay
            .checked_shl(u32::from(exponent))
            .filter(|d| d >> exponent == ack.delay)
            .unwrap_or(u64::MAX);
        let ack_delay = Duration::from_micros(delay_us);
        let max_ack_delay = self.peer_max_ack_delay();
        let confirmed = self.handshake_confirmed;
        let largest_before = self
            .space_ref(space)
            .and_then(|s| s.recovery.largest_acked());
        let result = match space {
            AckSpace::Initial | AckSpace::Handshake => {
                let hs = if space == AckSpace::Initial {
                    self.initial.as_mut()
                } else {
                    self.handshake.as_mut()
                };
                let (Some(hs), Some(path)) = (hs, self.paths.get_mut(&PathId::ZERO)) else {
                    return Ok(());
                };
                hs.space.recovery.on_ack_received(
                    now,
                    ack.ranges(),
                    ack_delay,
                    &mut path.rtt,
                    max_ack_delay,
                    confirmed,
                )
            }
            AckSpace::Path(id) => {
                let Some(path) = self.paths.get_mut(&id) else {
                    return Ok(());
                };
                path.space.recovery.on_ack_received(
                    now,
                    ack.ranges(),
                    ack_delay,
                    &mut path.rtt,
                    max_ack_delay,
                    confirmed,
                )
            }
        };
        let outcome = result.map_err(TransportError::from)?;
        if outcome.acked.is_empty() {
            return Ok(());
        }
        if matches!(space, AckSpace::Path(_))
            && let Some(path) = self.paths.get_mut(&path_id)
        {
            path.last_ack_received = Some(now);
            // The link works: a path whose link came back may take data again.
            path.link_probe_pending = false;
        }
        if let (AckSpace::Path(_), Some(keys)) = (space, self.one_rtt.as_mut())
            && let Some((largest, _)) = outcome.acked.last()
        {
            keys.on_packet_acked(now, self.multipath.map(|_| path_id), *largest);
        }
        for (_, packet) in &outcome.acked {
            self.on_frames_acked(now, path_id, space, &packet.payload);
        }
        let app_limited = !self.has_scheduled_work();
        if let Some(path) = self.paths.get_mut(&path_id) {
            let mut acked_packets = 0u64;
            for (_, packet) in &outcome.acked {
                acked_packets += 1;
                if !packet.in_flight {
                    continue;
                }
                path.bytes_in_flight = path.bytes_in_flight.saturating_sub(u64::from(packet.size));
                path.delivery.on_packet_acked(now, packet);
                path.cc.on_ack(
                    now,
                    packet.time_sent,
                    u64::from(packet.size),
                    app_limited,
                    &path.rtt,
                );
            }
            path.record_loss_samples(acked_packets, 0);
        }
        if matches!(space, AckSpace::Path(_)) && largest_before.is_none_or(|l| ack.largest > l) {
            let newly_marked = outcome.acked.iter().filter(|(_, p)| p.payload.ect0).count();
            self.on_ecn_feedback(now, path_id, newly_marked as u64, ack.ecn);
        }
        if let Some(path) = self.paths.get_mut(&path_id) {
            //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.7
            //#   // Reset pto_count unless the client is unsure if
            //#   // the server has validated the client's address.
            //#   if (PeerCompletedAddressValidation()):
            //#     pto_count = 0
            if self.side.is_server()
                || confirmed
                || space == AckSpace::Handshake
                || matches!(space, AckSpace::Path(_))
            {
                path.pto_count = 0;
            }
        }
        self.on_packets_lost(now, path_id, space, outcome.lost);
        if let Some(path) = self.paths.get_mut(&path_id) {
            let sample = path.delivery.generate_sample(path.rtt.min());
            path.cc
                .on_ack_batch_end(now, path.bytes_in_flight, &path.rtt, sample.as_ref());
            path.delivery_rate = path.delivery.delivery_rate();
        }
        if let Some(s) = self.space_mut(space) {
            s.recovery.recycle(outcome.acked);
        }
        self.qlog_metrics(now, path_id);
        Ok(())
    }

    /// Applies the acknowledgment of one packet's content.
    fn on_frames_acked(
        &mut self,
        now: Instant,
        path_id: PathId,
        space: AckSpace,
        frames: &SentFrames,
    ) {
        for s in &frames.stream {
            self.streams.on_stream_acked(s.id, s.offset, s.len, s.fin);
        }
        for &(offset, len) in &frames.crypto {
            if let Some(stream) = self.crypto_stream(space) {
                stream.on_acked(offset, len);
            }
        }
        for c in &frames.stream_control {
            self.streams.on_control_acked(*c);
        }
        for c in &frames.conn {
            if let ConnFrame::RetireConnectionId { path, sequence } = *c {
                self.pending.retire_unacked.remove(&(path, sequence));
            }
        }
        for &(acked_space, largest) in &frames.acks {
            if let Some(s) = self.space_mut(acked_space) {
                s.acks.on_ack_acked(largest);
            }
        }
        if let Some(path) = self.paths.get_mut(&path_id) {
            path.stats.payload_bytes_acked += frames.payload_bytes();
            if let Some(size) = frames.mtu_probe {
                path.on_mtu_probe_acked(size);
                self.qlog_event(
                    now,
                    "mtu_updated",
                    json!({ "new": size, "done": true, "path_id": path_id.0 }),
                );
            }
        }
    }

    /// Reacts to packets declared lost: statistics, congestion control, retransmission.
    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-B.8
    //# OnPacketsLost(lost_packets):
    pub(super) fn on_packets_lost(
        &mut self,
        now: Instant,
        path_id: PathId,
        space: AckSpace,
        lost: LostPackets<SentFrames>,
    ) {
        if lost.is_empty() {
            return;
        }
        let max_ack_delay = self.peer_max_ack_delay();
        let persistent = self
            .paths
            .get(&path_id)
            .is_some_and(|p| lost.in_persistent_congestion(&p.rtt, max_ack_delay));
        let mut congestion_bytes = 0u64;
        let mut newest_sent: Option<Instant> = None;
        let mut mtu_probe_lost = false;
        let mut marked_lost = 0u64;
        let count = lost.len() as u64;
        for l in lost.into_vec() {
            self.stats.packets_lost += 1;
            if let Some(path) = self.paths.get_mut(&path_id) {
                path.delivery.on_packet_lost(&l.packet);
                if l.packet.in_flight {
                    path.bytes_in_flight = path
                        .bytes_in_flight
                        .saturating_sub(u64::from(l.packet.size));
                }
            }
            marked_lost += u64::from(l.packet.payload.ect0);
            if l.packet.payload.mtu_probe.is_some() {
                // A lost PMTU probe is not a congestion signal.
                //= https://www.rfc-editor.org/rfc/rfc9000#section-14.4
                //# Loss of a QUIC packet that is carried in a PMTU probe is therefore not a
                //# reliable indication of congestion and SHOULD NOT trigger a congestion
                //# control reaction; see Item 7 in Section 3 of [DPLPMTUD].
                mtu_probe_lost = true;
            } else if l.packet.in_flight {
                congestion_bytes += u64::from(l.packet.size);
                newest_sent = newest_sent.max(Some(l.packet.time_sent));
            }
            if self.qlog.is_some() {
                let data = json!({
                    "header": { "packet_number": l.pn, "packet_type": space_packet_type(space), "path_id": path_id.0 },
                    "trigger": l.reason.qlog_trigger(),
                });
                self.qlog_event(now, "packet_lost", data);
            }
            self.requeue_frames(space, &l.packet.payload, Requeue::Lost);
        }
        let Some(path) = self.paths.get_mut(&path_id) else {
            return;
        };
        path.stats.packets_lost += count;
        path.record_loss_samples(0, count);
        if mtu_probe_lost {
            path.on_mtu_probe_lost();
        }
        if marked_lost > 0 {
            let before = path.ecn.state();
            path.ecn.on_marked_lost(marked_lost);
            self.qlog_ecn_state(now, path_id, before);
        }
        let Some(sent_time) = newest_sent else { return };
        let event = CongestionEvent {
            sent_time,
            lost_bytes: congestion_bytes,
            persistent_congestion: persistent,
            ecn: false,
        };
        self.on_congestion_event(now, path_id, &event);
    }

    /// ECN feedback from an ACK frame of `path_id`'s space that raised its largest
    /// acknowledged: validation, and a congestion event for new ECN-CE reports.
    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-B.7
    //# ProcessECN(ack, pn_space):
    fn on_ecn_feedback(
        &mut self,
        now: Instant,
        path_id: PathId,
        newly_marked: u64,
        counts: Option<crate::frame::EcnCounts>,
    ) {
        let Some(path) = self.paths.get_mut(&path_id) else {
            return;
        };
        let before = path.ecn.state();
        let verdict = path.ecn.on_ack(newly_marked, counts);
        let sent_time = path.space.recovery.largest_acked_time_sent();
        self.qlog_ecn_state(now, path_id, before);
        if let (EcnVerdict::Congestion(_), Some(sent_time)) = (verdict, sent_time) {
            let event = CongestionEvent {
                sent_time,
                lost_bytes: 0,
                persistent_congestion: false,
                ecn: true,
            };
            self.on_congestion_event(now, path_id, &event);
        }
    }

    /// Logs a change of `path_id`'s ECN validation from `before` (qlog
    /// `ecn_state_updated`).
    fn qlog_ecn_state(&mut self, now: Instant, path_id: PathId, before: EcnState) {
        let Some(path) = self.paths.get(&path_id) else {
            return;
        };
        let after = path.ecn.state();
        if after != before {
            let data = json!({"old": before.name(), "new": after.name(), "path_id": path_id.0});
            self.qlog_event(now, "ecn_state_updated", data);
        }
    }

    /// Gives `path_id`'s congestion controller a congestion event (losses or ECN-CE) and
    /// records it if the controller entered a new recovery period.
    fn on_congestion_event(&mut self, now: Instant, path_id: PathId, event: &CongestionEvent) {
        let Some(path) = self.paths.get_mut(&path_id) else {
            return;
        };
        let before = path.cc.metrics().congestion_events;
        let cwnd_before = path.cc.window();
        path.cc.on_congestion_event(now, event);
        if event.persistent_congestion {
            path.rtt.on_persistent_congestion();
        }
        if path.cc.metrics().congestion_events > before {
            path.stats.congestion_events += 1;
            let event = PathEvent::CongestionEvent {
                path: path_id,
                cwnd_before,
                cwnd_after: path.cc.window(),
            };
            self.path_event(now, event, false);
            self.qlog_event(
                now,
                "congestion_state_updated",
                json!({"new": "recovery", "path_id": path_id.0}),
            );
        }
        self.qlog_metrics(now, path_id);
    }

    /// Puts the retransmittable content of a packet back in the send queues. Stream data
    /// goes back to connection-wide queues, so with multipath any path can carry it.
    pub(super) fn requeue_frames(&mut self, space: AckSpace, frames: &SentFrames, why: Requeue) {
        for s in &frames.stream {
            self.streams.on_stream_lost(s.id, s.offset, s.len, s.fin);
        }
        for &(offset, len) in &frames.crypto {
            if let Some(stream) = self.crypto_stream(space) {
                stream.on_lost(offset, len);
            }
        }
        if why == Requeue::Probe {
            // Control frames are sent again only when really lost.
            return;
        }
        for c in &frames.stream_control {
            self.streams.on_control_lost(*c);
        }
        for c in &frames.conn {
            match *c {
                ConnFrame::HandshakeDone => self.pending.handshake_done = true,
                ConnFrame::NewConnectionId { path, sequence } => {
                    if self.local_cids.get(path, sequence).is_some() {
                        self.pending.new_cids.insert((path, sequence));
                    }
                }
                ConnFrame::RetireConnectionId { path, sequence } => {
                    self.pending.retire_cids.insert((path, sequence));
                }
                ConnFrame::PathAbandon { path, code } => {
                    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.2
                    //# If a packet containing
                    //# a PATH_ABANDON frame is considered lost, the peer SHOULD repeat it.
                    if let Some(p) = self.paths.get_mut(&path) {
                        p.abandon_pending.get_or_insert(code);
                    }
                }
                ConnFrame::PathStatus { path, sequence } => {
                    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.3
                    //# If a packet containing a
                    //# PATH_STATUS_BACKUP or PATH_STATUS_AVAILABLE frame is considered lost, the peer SHOULD resend the frame
                    //# only if it contains the last status sent for that path -- as indicated
                    //# by the sequence number.
                    if let Some(p) = self.paths.get_mut(&path)
                        && p.local_status_sequence == sequence
                    {
                        p.status_frame_pending = true;
                    }
                }
                ConnFrame::MaxPathId => self.pending.max_path_id = true,
                ConnFrame::PathsBlocked => self.pending.paths_blocked = true,
                ConnFrame::PathCidsBlocked { path } => {
                    self.pending.path_cids_blocked.insert(path);
                }
            }
        }
    }

    /// Re-queues the data of the oldest unacknowledged packets of `space` so the probes a
    /// PTO sends carry data, not only PING.
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.4
    //# When there is no data to send, the sender SHOULD send
    //# a PING or other ack-eliciting frame in a single packet, rearming the
    //# PTO timer.
    pub(super) fn requeue_oldest_for_probe(&mut self, space: AckSpace) {
        let frames: Vec<SentFrames> = match self.space_mut(space) {
            Some(s) => s
                .recovery
                .outstanding()
                .filter(|(_, p)| p.ack_eliciting)
                .take(2)
                .map(|(_, p)| p.payload.clone())
                .collect(),
            None => return,
        };
        for f in &frames {
            self.requeue_frames(space, f, Requeue::Probe);
        }
    }

    /// Records a packet just sent, for loss detection and congestion control; stamps its
    /// delivery-rate state.
    pub(super) fn on_packet_sent(
        &mut self,
        space: AckSpace,
        pn: u64,
        mut packet: SentPacket<SentFrames>,
    ) {
        let path_id = space.path();
        let app_limited = !self.has_scheduled_work();
        let pacing = self.config.pacing;
        let Some(path) = self.paths.get_mut(&path_id) else {
            return;
        };
        let (now, size) = (packet.time_sent, u64::from(packet.size));
        path.stats.packets_sent += 1;
        if packet.in_flight {
            packet.delivery = Some(path.delivery.on_packet_sent(now, path.bytes_in_flight));
            path.bytes_in_flight += size;
            path.cc.on_packet_sent(now, size, path.bytes_in_flight);
            if pacing {
                path.pacer.on_sent(now, size);
            }
            if app_limited && path.bytes_in_flight < path.cc.window() {
                path.delivery.on_app_limited(path.bytes_in_flight);
            }
        }
        if packet.ack_eliciting {
            path.last_ack_eliciting_sent = Some(now);
            path.stats.ack_eliciting_sent += 1;
        }
        if matches!(space, AckSpace::Path(_))
            && *self.batch_ecn.get_or_insert_with(|| path.ecn.marking())
        {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2
            //# The endpoint sets an ECT(0) codepoint in the IP header of early outgoing
            //# packets sent on a new path to the peer
            packet.payload.ect0 = true;
            path.ecn.on_marked_sent();
        }
        match space {
            AckSpace::Initial | AckSpace::Handshake => {
                if let Some(s) = self.space_mut(space) {
                    s.recovery.on_packet_sent(pn, packet);
                }
            }
            AckSpace::Path(_) => path.space.recovery.on_packet_sent(pn, packet),
        }
    }

    pub(super) fn crypto_stream(&mut self, space: AckSpace) -> Option<&mut CryptoStream> {
        match space {
            AckSpace::Initial => self.initial.as_mut().map(|h| &mut h.crypto),
            AckSpace::Handshake => self.handshake.as_mut().map(|h| &mut h.crypto),
            AckSpace::Path(_) => Some(&mut self.crypto_1rtt),
        }
    }

    pub(super) fn space_mut(&mut self, space: AckSpace) -> Option<&mut PacketSpace> {
        match space {
            AckSpace::Initial => self.initial.as_mut().map(|h| &mut h.space),
            AckSpace::Handshake => self.handshake.as_mut().map(|h| &mut h.space),
            AckSpace::Path(id) => self.paths.get_mut(&id).map(|p| &mut p.space),
        }
    }

    pub(super) fn space_ref(&self, space: AckSpace) -> Option<&PacketSpace> {
        match space {
            AckSpace::Initial => self.initial.as_ref().map(|h| &h.space),
            AckSpace::Handshake => self.handshake.as_ref().map(|h| &h.space),
            AckSpace::Path(id) => self.paths.get(&id).map(|p| &p.space),
        }
    }

    /// True if stream data or datagrams wait to be sent.
    pub(super) fn has_scheduled_work(&self) -> bool {
        self.streams.has_stream_data()
            || self.datagrams.has_outgoing()
            || self.paths.values().any(|p| p.has_queued_data())
    }
}

/// Why content is put back in the send queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Requeue {
    /// The packet was declared lost (or its path discarded): everything is re-sent.
    Lost,
    /// A probe wants data to carry: only stream and CRYPTO data are re-sent.
    Probe,
    /// The packet's path timed out probes while another path works: everything is re-sent,
    /// so that the other paths carry it (flow-control credit included, without which the
    /// peer could stay blocked); the packet itself stays in flight on its path.
    Stalled,
}
