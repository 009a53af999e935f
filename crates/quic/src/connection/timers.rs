//! Timers: idle timeout, keep-alive, key discard, and per path the loss-detection/PTO timer
//! (RFC 9002 Appendix A.8/A.9), acknowledgment delay, pacing, path validation and path
//! discard.

use super::loss::Requeue;
use super::*;
use crate::recovery::pto_duration;

/// The packet number spaces whose packets count against one path (see
/// `Connection::spaces_of`): Initial and Handshake for path 0 while they exist, then the
/// path's own.
struct SpacesOf<'a> {
    spaces: [(AckSpace, &'a PacketSpace); 3],
    n: usize,
}

impl<'a> SpacesOf<'a> {
    fn push(&mut self, space: (AckSpace, &'a PacketSpace)) {
        self.spaces[self.n] = space;
        self.n += 1;
    }
}

impl<'a> std::ops::Deref for SpacesOf<'a> {
    type Target = [(AckSpace, &'a PacketSpace)];
    fn deref(&self) -> &Self::Target {
        &self.spaces[..self.n]
    }
}

impl Connection {
    /// The earliest time [`Connection::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Closing { deadline } | State::Draining { deadline } => return Some(deadline),
            State::Drained => return None,
            _ => {}
        }
        let mut t = earliest(self.idle_deadline, self.keep_alive_deadline);
        t = earliest(t, self.idle_path_probe_deadline);
        t = earliest(t, self.key_discard_deadline());
        t = earliest(t, self.path_manager_deadline());
        let data_waiting = self.has_scheduled_work();
        for path in self.paths.values() {
            t = earliest(t, self.loss_detection_deadline(path));
            if path.space.acks.has_new {
                t = earliest(t, path.space.acks.deadline);
            }
            if let Some(ch) = path.challenge {
                t = earliest(t, Some(ch.give_up_at));
                t = earliest(
                    t,
                    ch.sent_at.map(|s| s + self.challenge_retry_interval(path)),
                );
            }
            if let Some(probe) = path.off_path.as_ref()
                && let Some(ch) = probe.challenge
            {
                t = earliest(t, Some(ch.give_up_at));
                t = earliest(t, ch.sent_at.map(|s| s + off_path_retry(path, probe)));
            }
            t = earliest(t, path.discard_at);
            t = earliest(t, path.drain_until);
            if data_waiting && path.is_usable() {
                t = earliest(t, path.pacing_release);
            }
        }
        t
    }

    /// Handles timer expiry; call when the time from [`Connection::poll_timeout`] passes.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Closing { deadline } | State::Draining { deadline } => {
                if now >= deadline {
                    let cids: Vec<ConnectionId> = self.local_cids.all().map(|c| c.cid).collect();
                    for cid in cids {
                        self.endpoint_events
                            .push_back(EndpointEvent::RetiredLocalCid(cid));
                    }
                    self.drain_now();
                }
                return;
            }
            State::Drained => return,
            _ => {}
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
        //# If a max_idle_timeout is specified by either endpoint in its
        //# transport parameters (Section 18.2), the connection is silently
        //# closed and its state is discarded when it remains idle for longer
        //# than the minimum of the max_idle_timeout value advertised by both
        //# endpoints.
        if self.idle_deadline.is_some_and(|d| now >= d) {
            self.qlog_event(
                now,
                "connection_closed",
                json!({"owner": "local", "trigger": "idle_timeout"}),
            );
            self.error = Some(ConnectionError::TimedOut);
            self.events
                .push_back(Event::ConnectionLost(ConnectionError::TimedOut));
            self.drain_now();
            return;
        }
        if self.keep_alive_deadline.is_some_and(|d| now >= d) {
            self.keep_alive_deadline = self.config.keep_alive_interval.map(|k| now + k);
            if let Some(path) = self.paths.values_mut().find(|p| p.is_usable()) {
                path.space.ping_pending = true;
            }
        }
        if self.idle_path_probe_deadline.is_some_and(|d| now >= d) {
            self.idle_path_probe_deadline = self.config.idle_path_probe_interval.map(|k| now + k);
            if self.paths.len() > 1 {
                for path in self.paths.values_mut() {
                    if path.is_usable() && path.bytes_in_flight == 0 {
                        path.space.ping_pending = true;
                    }
                }
            }
        }
        if self.key_discard_deadline().is_some_and(|d| now >= d) {
            let three_pto = 3 * self.largest_pto();
            if let Some(keys) = self.one_rtt.as_mut() {
                keys.discard_old_key(now, three_pto);
            }
        }
        let mut ids = std::mem::take(&mut self.path_id_scratch);
        ids.clear();
        ids.extend(self.paths.keys().copied());
        for &id in &ids {
            self.handle_path_timers(now, id);
        }
        self.path_id_scratch = ids;
        self.run_path_manager(now);
    }

    fn key_discard_deadline(&self) -> Option<Instant> {
        let keys = self.one_rtt.as_ref()?;
        //= https://www.rfc-editor.org/rfc/rfc9001#section-6.5
        //# An endpoint SHOULD retain old read keys for no more than three times the PTO
        //# after having received a packet protected using the new keys.
        // The PTO is only worked out while an old key waits to be discarded.
        keys.old_key_confirmed_at()?;
        keys.old_key_deadline(3 * self.largest_pto())
    }

    fn handle_path_timers(&mut self, now: Instant, id: PathId) {
        let Some(path) = self.paths.get(&id) else {
            return;
        };
        if path.discard_at.is_some_and(|d| now >= d) {
            self.discard_path(now, id);
            return;
        }
        if path.drain_until.is_some_and(|d| now >= d) {
            self.end_path_drain(id);
        }
        let Some(path) = self.paths.get(&id) else {
            return;
        };
        if let Some(ch) = path.challenge {
            if now >= ch.give_up_at {
                self.on_path_validation_failed(now, id);
            } else if ch
                .sent_at
                .is_some_and(|s| now >= s + self.challenge_retry_interval(path))
                && let Some(ch) = self.paths.get_mut(&id).and_then(|p| p.challenge.as_mut())
            {
                // Send the challenge again (with the same data; a late response still counts).
                ch.sent_at = None;
            }
        }
        let Some(path) = self.paths.get(&id) else {
            return;
        };
        if let Some(probe) = path.off_path.as_ref()
            && let Some(ch) = probe.challenge
        {
            if now >= ch.give_up_at {
                self.on_off_path_failed(now, id);
            } else if ch
                .sent_at
                .is_some_and(|s| now >= s + off_path_retry(path, probe))
                && let Some(ch) = self
                    .paths
                    .get_mut(&id)
                    .and_then(|p| p.off_path.as_mut())
                    .and_then(|o| o.challenge.as_mut())
            {
                ch.sent_at = None;
            }
        }
        let Some(path) = self.paths.get(&id) else {
            return;
        };
        if self.loss_detection_deadline(path).is_some_and(|d| now >= d) {
            self.on_loss_detection_timeout(now, id);
        }
    }

    /// How long to wait before repeating a PATH_CHALLENGE.
    fn challenge_retry_interval(&self, path: &Path) -> Duration {
        pto_duration(&path.rtt, Duration::ZERO, 0)
    }

    /// The spaces whose packets count against `path`.
    fn spaces_of<'a>(&'a self, path: &'a Path) -> SpacesOf<'a> {
        // On the stack: this runs for every path whenever a deadline is computed.
        let own = (AckSpace::Path(path.id), &path.space);
        let mut spaces = SpacesOf {
            spaces: [own; 3],
            n: 0,
        };
        if path.id == PathId::ZERO {
            if let Some(h) = self.initial.as_ref() {
                spaces.push((AckSpace::Initial, &h.space));
            }
            if let Some(h) = self.handshake.as_ref() {
                spaces.push((AckSpace::Handshake, &h.space));
            }
        }
        spaces.push(own);
        spaces
    }

    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.8
    //# SetLossDetectionTimer():
    fn loss_detection_deadline(&self, path: &Path) -> Option<Instant> {
        if path.state == PathState::Abandoned {
            return None;
        }
        let spaces = self.spaces_of(path);
        if let Some(t) = spaces
            .iter()
            .filter_map(|(_, s)| s.recovery.loss_time())
            .min()
        {
            return Some(t);
        }
        //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.2.1
        //# If no additional data can be sent, the server's PTO timer MUST NOT be armed until
        //# datagrams have been received from the client
        if self.side.is_server() && path.amplification_budget() == 0 {
            return None;
        }
        let in_flight = spaces
            .iter()
            .any(|(_, s)| s.recovery.has_ack_eliciting_in_flight());
        if !in_flight && self.peer_completed_address_validation() {
            return None;
        }
        self.pto_deadline(path, &spaces)
    }

    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.6
    //# PeerCompletedAddressValidation():
    //#   // Assume clients validate the server's address implicitly.
    //#   if (endpoint is server):
    //#     return true
    //#   // Servers complete address validation when a
    //#   // protected packet is received.
    //#   return has received Handshake ACK ||
    //#        handshake confirmed
    fn peer_completed_address_validation(&self) -> bool {
        self.side.is_server()
            || self.handshake_confirmed
            || self
                .handshake
                .as_ref()
                .is_none_or(|h| h.space.recovery.largest_acked().is_some())
    }

    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.8
    //# GetPtoTimeAndSpace():
    fn pto_deadline(&self, path: &Path, spaces: &[(AckSpace, &PacketSpace)]) -> Option<Instant> {
        let backoff = path.pto_count.min(16);
        let base = pto_duration(&path.rtt, Duration::ZERO, backoff);
        if !spaces
            .iter()
            .any(|(_, s)| s.recovery.has_ack_eliciting_in_flight())
        {
            // Anti-deadlock PTO of a client whose address is not yet validated.
            return Some(path.last_ack_eliciting_sent.unwrap_or(self.created) + base);
        }
        let mut best: Option<Instant> = None;
        for (space, s) in spaces {
            if !s.recovery.has_ack_eliciting_in_flight() {
                continue;
            }
            let mut duration = base;
            if matches!(space, AckSpace::Path(_)) {
                //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.1
                //# An endpoint MUST NOT set its PTO timer for the Application Data
                //# packet number space until the handshake is confirmed.
                if !self.handshake_confirmed {
                    continue;
                }
                duration += self.peer_max_ack_delay() * (1u32 << backoff);
            }
            best = earliest(
                best,
                s.recovery
                    .time_of_last_ack_eliciting_packet()
                    .map(|t| t + duration),
            );
        }
        best
    }

    //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.9
    //# OnLossDetectionTimeout():
    fn on_loss_detection_timeout(&mut self, now: Instant, id: PathId) {
        let Some(path) = self.paths.get(&id) else {
            return;
        };
        let spaces: Vec<(AckSpace, bool, bool)> = self
            .spaces_of(path)
            .iter()
            .map(|(sp, s)| {
                (
                    *sp,
                    s.recovery.loss_time().is_some_and(|t| t <= now),
                    s.recovery.has_ack_eliciting_in_flight(),
                )
            })
            .collect();
        if let Some((space, _, _)) = spaces.iter().find(|(_, due, _)| *due) {
            let rtt = path.rtt.clone();
            let lost = match self.space_mut(*space) {
                Some(s) => s.recovery.detect_lost(now, &rtt),
                None => return,
            };
            self.on_packets_lost(now, id, *space, lost);
            return;
        }
        let target = match spaces.iter().find(|(_, _, in_flight)| *in_flight) {
            Some((space, _, _)) => *space,
            //= https://www.rfc-editor.org/rfc/rfc9002#appendix-A.9
            //#     // Client sends an anti-deadlock packet: Initial is padded
            //#     // to earn more anti-amplification credit,
            //#     // a Handshake packet proves address ownership.
            None if self.handshake.as_ref().is_some_and(|h| h.keys.is_some()) => {
                AckSpace::Handshake
            }
            None if self.initial.is_some() => AckSpace::Initial,
            None => AckSpace::Path(id),
        };
        let Some(path) = self.paths.get_mut(&id) else {
            return;
        };
        path.pto_count += 1;
        let pto_count = path.pto_count;
        //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.4
        //# When a PTO timer expires, a sender MUST send at least one ack-
        //# eliciting packet in the packet number space as a probe.  An endpoint
        //# MAY send up to two full-sized datagrams containing ack-eliciting
        //# packets to avoid an expensive consecutive PTO expiration due to a
        //# single lost datagram or to transmit data from multiple packet number
        //# spaces.
        if let Some(space) = self.space_mut(target) {
            space.probes_owed = 2;
        }
        self.requeue_oldest_for_probe(target);
        if matches!(target, AckSpace::Path(_)) && self.multipath.is_some() {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.7
            //# Endpoints could take advantage of the multipath extension, and retransmit the content
            //# of the delayed packets on other available paths if the congestion control window on these
            //# paths allows.
            self.requeue_in_flight_elsewhere(id);
        }
        self.qlog_event(
            now,
            "recovery_metrics_updated",
            json!({ "pto_count": pto_count, "path_id": id.0 }),
        );
    }

    /// After a PTO on one path (or its interface losing the link), queue all its in-flight
    /// frames again so other paths can carry them (the copies on the stalled path are
    /// ignored if they arrive later).
    pub(super) fn requeue_in_flight_elsewhere(&mut self, id: PathId) {
        if !self.paths.values().any(|p| p.id != id && p.is_usable()) {
            return;
        }
        let Some(path) = self.paths.get(&id) else {
            return;
        };
        let frames: Vec<_> = path
            .space
            .recovery
            .outstanding()
            .map(|(_, p)| p.payload.clone())
            .collect();
        for f in &frames {
            self.requeue_frames(AckSpace::Path(id), f, Requeue::Stalled);
        }
    }

    pub(super) fn reset_idle_timer(&mut self, now: Instant) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
        //# To avoid excessively small idle timeout periods, endpoints MUST
        //# increase the idle timeout period to be at least three times the
        //# current Probe Timeout (PTO).
        self.idle_deadline = self
            .idle_timeout
            .map(|t| now + t.max(3 * self.largest_pto()));
        self.keep_alive_deadline = self.config.keep_alive_interval.map(|k| now + k);
        if self.idle_path_probe_deadline.is_none() {
            self.idle_path_probe_deadline = self.config.idle_path_probe_interval.map(|k| now + k);
        }
    }
}

/// How long to wait before repeating a PATH_CHALLENGE on a path's other 4-tuple: the
/// path's PTO, doubled after each attempt (the other 4-tuple's round trip is unknown).
//= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.1
//# An endpoint SHOULD NOT probe a new path with packets containing a PATH_CHALLENGE
//# frame more frequently than it would send an Initial packet.
fn off_path_retry(path: &Path, probe: &super::paths::OffPathProbe) -> Duration {
    pto_duration(
        &path.rtt,
        Duration::ZERO,
        probe.attempts.saturating_sub(1).min(6),
    )
}
