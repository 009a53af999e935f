//! The receive path: splitting datagrams into packets, removing protection, and handling
//! every frame.

use super::*;
use crate::frame::{Frame, FrameIter};
use crate::packet::{self, Header, LongType};
use bytes::BytesMut;

/// Which kind of packet a frame arrived in, for the frame-type rules of RFC 9000 section
/// 12.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PacketKind {
    Initial,
    Handshake,
    ZeroRtt,
    OneRtt,
}

/// What processing a packet's frames found out.
#[derive(Debug, Default)]
struct FrameSummary {
    ack_eliciting: bool,
    /// Contained a frame other than PATH_CHALLENGE, PATH_RESPONSE, NEW_CONNECTION_ID
    /// and PADDING (RFC 9000 section 9.1).
    non_probing: bool,
}

impl Connection {
    /// Processes one received UDP datagram that the endpoint routed to this connection.
    pub(crate) fn handle_datagram(&mut self, now: Instant, local: SocketAddr, remote: SocketAddr, mut data: BytesMut) {
        if matches!(self.state, State::Draining { .. } | State::Drained) {
            return;
        }
        let datagram_len = data.len() as u64;
        let full = data.clone().freeze();
        let mut first_dcid: Option<ConnectionId> = None;
        let mut counted = false;
        while !data.is_empty() {
            let header = match packet::decode_header(&data, self.local_cid_len) {
                Ok(h) => h,
                Err(e) => {
                    tracing::trace!(error = %e, "dropping undecodable packet");
                    self.stats.packets_dropped += 1;
                    break;
                }
            };
            let packet_len = header.packet_len.min(data.len());
            let packet = data.split_to(packet_len);
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.2
            //# Receivers SHOULD ignore any subsequent packets with a different
            //# Destination Connection ID than the first packet in the datagram.
            match first_dcid {
                Some(d) if d != header.dcid => {
                    self.stats.packets_dropped += 1;
                    continue;
                }
                Some(_) => {}
                None => first_dcid = Some(header.dcid),
            }
            match self.handle_packet(now, local, remote, header, packet, &full, &mut counted, datagram_len) {
                Ok(()) => {}
                Err(error) => {
                    self.close_on_error(now, error);
                    return;
                }
            }
            if self.is_closed() {
                return;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_packet(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        header: Header,
        mut packet: BytesMut,
        datagram: &Bytes,
        counted: &mut bool,
        datagram_len: u64,
    ) -> Result<(), TransportError> {
        let (kind, version) = match &header.form {
            packet::HeaderForm::VersionNegotiation { versions, .. } => {
                self.on_version_negotiation(now, versions);
                return Ok(());
            }
            packet::HeaderForm::Retry { .. } => {
                self.on_retry(now, &header, &packet);
                return Ok(());
            }
            packet::HeaderForm::Long { ty, version, .. } => {
                let kind = match ty {
                    LongType::Initial => PacketKind::Initial,
                    LongType::Handshake => PacketKind::Handshake,
                    LongType::ZeroRtt => PacketKind::ZeroRtt,
                    LongType::Retry => return Ok(()),
                };
                (kind, Some(*version))
            }
            packet::HeaderForm::Short => (PacketKind::OneRtt, None),
        };
        if version.is_some_and(|v| v != self.version) {
            self.stats.packets_dropped += 1;
            return Ok(());
        }
        if kind == PacketKind::ZeroRtt {
            // 0-RTT is not offered; such packets cannot be decrypted.
            self.stats.packets_dropped += 1;
            return Ok(());
        }
        // Which packet-number space and path.
        let (space, path_id) = match kind {
            PacketKind::Initial => (AckSpace::Initial, PathId::ZERO),
            PacketKind::Handshake => (AckSpace::Handshake, PathId::ZERO),
            _ => {
                let path_id = if self.multipath.is_some() {
                    match self.local_cids.path_of(&header.dcid) {
                        Some(id) => id,
                        None => {
                            self.stats.packets_dropped += 1;
                            return Ok(());
                        }
                    }
                } else {
                    PathId::ZERO
                };
                (AckSpace::Path(path_id), path_id)
            }
        };
        if self.retired_paths.contains(&path_id) && !self.paths.contains_key(&path_id) {
            self.stats.packets_dropped += 1;
            return Ok(());
        }

        // Remove header protection.
        let pn_offset = header.pn_offset;
        let unprotected = {
            let hp: Option<&dyn rustls::quic::HeaderProtectionKey> = match space {
                AckSpace::Initial => self.initial.as_ref().and_then(|h| h.keys.as_ref()).map(|k| k.remote.header.as_ref()),
                AckSpace::Handshake => {
                    self.handshake.as_ref().and_then(|h| h.keys.as_ref()).map(|k| k.remote.header.as_ref())
                }
                AckSpace::Path(_) => self.one_rtt.as_ref().map(|k| k.remote_header()),
            };
            let Some(hp) = hp else {
                self.stats.packets_dropped += 1;
                return Ok(());
            };
            match packet::remove_header_protection(&mut packet, pn_offset, hp) {
                Ok(u) => u,
                Err(_) => {
                    self.stats.packets_dropped += 1;
                    return Ok(());
                }
            }
        };
        let largest_received = self.space_mut(space).and_then(|s| s.acks.largest.map(|(pn, _)| pn));
        let pn = packet::decode_packet_number(largest_received, u64::from(unprotected.truncated_pn), unprotected.pn_len * 8);
        let header_len = pn_offset + unprotected.pn_len;

        // Decrypt.
        let multipath_nonce = self.multipath.is_some().then_some(path_id.0);
        let payload = match space {
            AckSpace::Initial | AckSpace::Handshake => {
                let keys = match space {
                    AckSpace::Initial => self.initial.as_ref().and_then(|h| h.keys.as_ref()),
                    _ => self.handshake.as_ref().and_then(|h| h.keys.as_ref()),
                };
                let Some(keys) = keys else { return Ok(()) };
                crate::crypto::open_packet(keys.remote.packet.as_ref(), None, pn, &mut packet, header_len)
                    .map(|len| len)
            }
            AckSpace::Path(_) => {
                let key_phase = unprotected.first_byte & 0x04 != 0;
                let Some(keys) = self.one_rtt.as_mut() else { return Ok(()) };
                keys.open(key_phase, multipath_nonce, pn, &mut packet, header_len, now)
                    .map(|(len, updated)| {
                        if updated {
                            self.stats.key_updates += 1;
                        }
                        len
                    })
            }
        };
        let payload_len = match payload {
            Ok(len) => len,
            Err(_) => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.1
                //# An endpoint detects a potential Stateless Reset using the trailing 16
                //# bytes of the UDP datagram.
                if kind == PacketKind::OneRtt
                    && let Some(token) = packet::stateless_reset_token(datagram)
                    && self.peer_cids.is_reset_token(token)
                {
                    self.qlog_event(now, "packet_received", json!({"header": {"packet_type": "stateless_reset"}}));
                    self.enter_draining(now, ConnectionError::Reset);
                    self.state = State::Drained;
                    self.endpoint_events.push_back(EndpointEvent::Drained);
                    return Ok(());
                }
                if let Some(keys) = self.one_rtt.as_mut()
                    && kind == PacketKind::OneRtt
                    && keys.integrity_limit_exceeded()
                {
                    return Err(TransportError::aead_limit("AEAD integrity limit reached"));
                }
                self.stats.packets_dropped += 1;
                return Ok(());
            }
        };

        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
        //# An endpoint MUST treat receipt of a packet that has a non-zero value for these
        //# bits after removing both packet and header protection as a connection error
        //# of type PROTOCOL_VIOLATION.
        if unprotected.reserved_bits_set {
            return Err(TransportError::protocol_violation("reserved header bits set"));
        }

        if self.space_mut(space).is_some_and(|s| s.acks.is_duplicate(pn)) {
            self.stats.packets_dropped += 1;
            return Ok(());
        }

        // A packet that opens a new path (multipath) or arrives from a new address.
        if matches!(space, AckSpace::Path(_)) {
            self.on_path_packet(now, path_id, local, remote)?;
        }
        if !*counted {
            *counted = true;
            if let Some(path) = self.paths.get_mut(&path_id) {
                path.on_datagram_received(now, datagram_len);
            }
        }

        self.received_any = true;
        self.stats.packets_received += 1;
        if let Some(path) = self.paths.get_mut(&path_id) {
            path.stats.packets_received += 1;
        }
        if kind == PacketKind::Initial && self.side.is_client() && !self.got_server_initial {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-7.2
            //# Upon receiving the first Initial packet from the server, the client uses the
            //# Source Connection ID supplied by the server as the Destination Connection ID
            //# for subsequent packets
            if let packet::HeaderForm::Long { scid, .. } = &header.form {
                self.got_server_initial = true;
                self.peer_initial_scid = Some(*scid);
                self.peer_cids.set_handshake_cid(*scid, None);
            }
        }
        if kind == PacketKind::Handshake && self.side.is_server() {
            //= https://www.rfc-editor.org/rfc/rfc9001#section-4.9.1
            //# a server MUST discard Initial keys when it first successfully processes a
            //# Handshake packet.
            self.discard_space(now, AckSpace::Initial);
            //= https://www.rfc-editor.org/rfc/rfc9000#section-8.1
            //# In particular, receipt of a packet protected with Handshake keys
            //# confirms that the peer successfully processed an Initial packet.
            if let Some(p) = self.paths.get_mut(&PathId::ZERO) {
                p.address_validated = true;
            }
        }

        self.current_packet_dcid = header.dcid;
        let _header_bytes = packet.split_to(header_len);
        packet.truncate(payload_len);
        let payload = packet.freeze();
        let qlog_frames = self.qlog.is_some().then(Vec::new);
        let summary = self.handle_frames(now, kind, space, path_id, payload, qlog_frames)?;

        if let Some(s) = self.space_mut(space) {
            let immediate = !matches!(space, AckSpace::Path(_));
            let max_ack_delay = self.config.max_ack_delay;
            let threshold = self.config.ack_eliciting_threshold;
            s.acks.on_packet(now, pn, summary.ack_eliciting, immediate, max_ack_delay, threshold);
        }

        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
        //# An endpoint restarts its idle timer when a packet from its peer is
        //# received and processed successfully.
        self.reset_idle_timer(now);
        self.sent_ack_eliciting_since_receive = false;

        if summary.non_probing && matches!(space, AckSpace::Path(_)) {
            self.maybe_migrate(now, path_id, local, remote, pn)?;
        }
        if matches!(space, AckSpace::Initial | AckSpace::Handshake) || kind == PacketKind::OneRtt {
            self.drive_tls(now)?;
        }
        Ok(())
    }

    /// Checks a 1-RTT packet against the path it claims: a first packet on a new path ID
    /// opens that path (multipath).
    fn on_path_packet(&mut self, now: Instant, path_id: PathId, local: SocketAddr, remote: SocketAddr) -> Result<(), TransportError> {
        if self.paths.contains_key(&path_id) {
            return Ok(());
        }
        let Some(mp) = self.multipath else { return Ok(()) };
        if path_id.0 > mp.local_max_path_id {
            return Err(TransportError::protocol_violation("packet on a path ID above our limit"));
        }
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
        //# After receiving packets from the
        //# client on a new path, if the server decides to use the new path,
        //# the server MUST validate the peer's address before sending any data
        //# as described in ({{Section 8.2 of QUIC-TRANSPORT}}),
        //# unless it has previously validated the 4-tuple used for that path.
        let cc = self.config.congestion_controller.build(now, path_id, self.config.initial_mtu);
        let mut path = Path::new(path_id, local, remote, self.config.initial_rtt, cc, self.config.initial_mtu, false);
        if self.peer_cids.activate(path_id).is_none() {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
            //# An endpoint that has no active connection ID for this path or
            //# lacks other resources to immediately configure a new path could
            //# delay sending the PATH_RESPONSE until sufficient resources are available.
            self.pending.path_cids_blocked.insert(path_id);
        }
        let token: [u8; 8] = self.rng.random();
        path.challenge = Some(paths::Challenge {
            token,
            sent_at: None,
            give_up_at: now + self.path_validation_timeout(&path),
            attempts: 0,
        });
        if let Some(size) = self.peer_params.as_ref().map(|p| p.max_udp_payload_size) {
            let target = self.config.max_mtu.min(size.min(u64::from(u16::MAX)) as u16);
            if target > path.mtu {
                path.mtu_discovery = MtuDiscovery::Pending { size: target, attempts: 0 };
            }
        }
        if let Some((sequence, status)) = self.early_peer_status.remove(&path_id) {
            path.peer_status_sequence = Some(sequence);
            path.peer_status = Some(status);
        }
        self.paths.insert(path_id, path);
        self.scheduler.on_path_event(now, &PathEvent::Opened(path_id));
        self.events.push_back(Event::Path(PathEvent::Opened(path_id)));
        self.qlog_event(now, "path_assigned", json!({"path_id": path_id.0, "local": local.to_string(), "remote": remote.to_string(), "initiator": "remote"}));
        Ok(())
    }

    /// Validation gives up after three PTOs (at least 6 initial RTTs), per RFC 9000
    /// section 8.2.4.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.4
    //# Endpoints SHOULD abandon path validation based on a timer.  When
    //# setting this timer, implementations are cautioned that the new path
    //# could have a longer round-trip time than the original.  A value of
    //# three times the larger of the current PTO or the PTO for the new path
    //# (using kInitialRtt, as defined in [QUIC-RECOVERY]) is RECOMMENDED.
    pub(crate) fn path_validation_timeout(&self, path: &Path) -> Duration {
        let new_path = pto_duration(&path.rtt, Duration::ZERO, 0).max(self.config.initial_rtt * 2);
        3 * self.largest_pto().max(new_path)
    }

    /// Handles a peer's address change on an existing path (RFC 9000 section 9.3).
    //= https://www.rfc-editor.org/rfc/rfc9000#section-9.3
    //# Receiving a packet from a new peer address containing a non-probing
    //# frame indicates that the peer has migrated to that address.
    fn maybe_migrate(&mut self, now: Instant, path_id: PathId, local: SocketAddr, remote: SocketAddr, pn: u64) -> Result<(), TransportError> {
        if self.side.is_client() {
            return Ok(());
        }
        let is_largest = self.paths.get(&path_id).and_then(|p| p.space.acks.largest).is_none_or(|(l, _)| pn >= l);
        let Some(path) = self.paths.get(&path_id) else { return Ok(()) };
        if path.remote == remote && path.local == local {
            return Ok(());
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.3
        //# An endpoint only changes the address to which it sends packets in
        //# response to the highest-numbered non-probing packet.
        if !is_largest {
            return Ok(());
        }
        if self.peer_params.as_ref().is_some_and(|p| p.disable_active_migration) && path.local != local {
            return Ok(());
        }
        let port_only = path.remote.ip() == remote.ip();
        let timeout = self.path_validation_timeout(path);
        let token: [u8; 8] = self.rng.random();
        let cc = (!port_only).then(|| self.config.congestion_controller.build(now, path_id, self.config.initial_mtu));
        let initial_rtt = self.config.initial_rtt;
        let Some(path) = self.paths.get_mut(&path_id) else { return Ok(()) };
        path.remote = remote;
        path.local = local;
        path.address_validated = false;
        path.unvalidated_received = 0;
        path.unvalidated_sent = 0;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.4
        //# Until a peer's address is deemed valid, an endpoint limits the amount
        //# of data it sends to that address; see Section 8.
        //
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.4
        //# On confirming a peer's ownership of its new address, an endpoint MUST
        //# immediately reset the congestion controller and round-trip time
        //# estimator for the new path to initial values (see Appendices A.3 and
        //# B.3 of [QUIC-RECOVERY]) unless the only change in the peer's address
        //# is its port number.
        if let Some(cc) = cc {
            path.cc = cc;
            path.rtt = crate::recovery::RttEstimator::new(initial_rtt);
        }
        path.challenge = Some(paths::Challenge { token, sent_at: None, give_up_at: now + timeout, attempts: 0 });
        // A new peer address gets a fresh destination connection ID where one is spare.
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.5
        //# An endpoint MUST NOT reuse a connection ID when sending to
        //# more than one destination address.
        if let Some(Some(retired)) = self.peer_cids.rotate(path_id) {
            self.pending.retire_cids.insert((path_id, retired));
        }
        self.qlog_event(now, "migration_state_updated", json!({"new": "probing_started", "path_id": path_id.0, "remote": remote.to_string()}));
        Ok(())
    }

    fn on_version_negotiation(&mut self, now: Instant, versions: &[u32]) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-6.2
        //# A client MUST discard any Version Negotiation packet if it has
        //# received and successfully processed any other packet, including an
        //# earlier Version Negotiation packet.  A client MUST discard a Version
        //# Negotiation packet that lists the QUIC version selected by the
        //# client.
        if self.side.is_server() || self.received_any || versions.contains(&self.version) {
            return;
        }
        self.received_any = true;
        self.qlog_event(now, "packet_received", json!({"header": {"packet_type": "version_negotiation"}, "supported_versions": versions}));
        self.error = Some(ConnectionError::VersionMismatch);
        self.events.push_back(Event::ConnectionLost(ConnectionError::VersionMismatch));
        self.state = State::Drained;
        self.endpoint_events.push_back(EndpointEvent::Drained);
    }

    /// Client handling of a Retry packet (RFC 9000 section 17.2.5.2).
    fn on_retry(&mut self, now: Instant, header: &Header, packet: &[u8]) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5.2
        //# A client MUST accept and process at most one Retry packet for each
        //# connection attempt.  After the client has received and processed an
        //# Initial or Retry packet from the server, it MUST discard any
        //# subsequent Retry packets that it receives.
        if self.side.is_server() || self.received_any || self.retry_scid.is_some() {
            return;
        }
        let packet::HeaderForm::Retry { scid, token, .. } = &header.form else { return };
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5.2
        //# Clients MUST discard Retry packets that have a Retry Integrity Tag
        //# that cannot be validated
        if !crate::crypto::is_valid_retry(self.version, &self.original_dcid, packet) {
            self.stats.packets_dropped += 1;
            return;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5.1
        //# A client MUST discard a Retry packet with a zero-length Retry Token field.
        let Some(token_bytes) = packet.get(token.clone()) else { return };
        if token_bytes.is_empty() {
            return;
        }
        self.qlog_event(now, "packet_received", json!({"header": {"packet_type": "retry", "scid": scid.to_string()}}));
        self.retry_scid = Some(*scid);
        self.retry_token = Bytes::copy_from_slice(token_bytes);
        self.peer_cids.set_handshake_cid(*scid, None);
        //= https://www.rfc-editor.org/rfc/rfc9001#section-5.2
        //# The Destination Connection ID field used is the value
        //# of the Destination Connection ID field in the Initial packet after a
        //# Retry ...
        // Initial keys change to ones derived from the new destination ID; everything sent
        // so far is considered lost and sent again with the new keys (RFC 9002 6.3).
        if let Some(initial) = self.initial.as_mut() {
            initial.keys = Some(crate::crypto::initial_keys(self.version, scid, self.side));
            let lost = initial.space.recovery.discard_all();
            for (_, p) in &lost {
                for (offset, len) in &p.payload.crypto {
                    initial.crypto.on_lost(*offset, *len);
                }
            }
            let bytes: u64 = lost.iter().filter(|(_, p)| p.in_flight).map(|(_, p)| u64::from(p.size)).sum();
            if let Some(path) = self.paths.get_mut(&PathId::ZERO) {
                path.bytes_in_flight = path.bytes_in_flight.saturating_sub(bytes);
            }
        }
    }

    /// Handles the frames of one packet.
    fn handle_frames(
        &mut self,
        now: Instant,
        kind: PacketKind,
        space: AckSpace,
        path_id: PathId,
        payload: Bytes,
        mut qlog_frames: Option<Vec<serde_json::Value>>,
    ) -> Result<FrameSummary, TransportError> {
        let mut summary = FrameSummary::default();
        if payload.is_empty() {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
            //# An endpoint MUST treat receipt of a packet containing no frames as a
            //# connection error of type PROTOCOL_VIOLATION.
            return Err(TransportError::protocol_violation("packet without frames"));
        }
        for frame in FrameIter::new(payload) {
            let frame = frame.map_err(TransportError::from)?;
            let ty = frame.ty();
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
            //# An endpoint MUST treat
            //# receipt of a frame in a packet type that is not permitted as a
            //# connection error of type PROTOCOL_VIOLATION.
            if !ty.allowed_in(kind.into()) {
                return Err(TransportError::protocol_violation(format!("frame {ty:?} not allowed in {kind:?} packets")).in_frame(ty.0));
            }
            if ty.is_ack_eliciting() {
                summary.ack_eliciting = true;
            }
            if !ty.is_probing() {
                summary.non_probing = true;
            }
            if let Some(list) = qlog_frames.as_mut() {
                list.push(crate::qlog_frames::frame_json(&frame));
            }
            self.handle_frame(now, kind, space, path_id, frame).map_err(|e| if e.frame_type.is_none() { e.in_frame(ty.0) } else { e })?;
            if self.is_closed() {
                break;
            }
        }
        if let Some(frames) = qlog_frames {
            self.qlog_event(now, "packet_received", json!({
                "header": { "packet_type": space_packet_type(space), "path_id": path_id.0 },
                "frames": frames,
            }));
        }
        Ok(summary)
    }

    fn handle_frame(&mut self, now: Instant, kind: PacketKind, space: AckSpace, path_id: PathId, frame: Frame) -> Result<(), TransportError> {
        match frame {
            Frame::Padding { .. } | Frame::Ping => {}
            Frame::Ack(ack) => {
                let ranges: Vec<_> = ack.ranges().collect();
                // Without multipath, ACK acknowledges the Application Data space (path 0);
                // with it, ACK frames still refer to path 0 (draft section 2.3).
                self.on_ack_frame(now, space, &ranges, ack.delay)?;
            }
            Frame::PathAck(ack) => {
                let mp = self.multipath.ok_or_else(|| TransportError::protocol_violation("PATH_ACK without multipath"))?;
                let target = PathId(ack.path_id);
                self.check_path_id(mp, target)?;
                if !self.paths.contains_key(&target) {
                    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4.3
                    //# PATH_ACK frames received with an abandoned path ID are silently ignored,
                    //# as specified in {{frames}}.
                    if self.retired_paths.contains(&target) {
                        return Ok(());
                    }
                    return Err(TransportError::protocol_violation("PATH_ACK for a path with no packet number space"));
                }
                let ranges: Vec<_> = ack.ranges().collect();
                self.on_ack_frame(now, AckSpace::Path(target), &ranges, ack.delay)?;
            }
            Frame::Crypto { offset, data } => {
                let stream = match space {
                    AckSpace::Initial => self.initial.as_mut().map(|h| &mut h.crypto),
                    AckSpace::Handshake => self.handshake.as_mut().map(|h| &mut h.crypto),
                    AckSpace::Path(_) => Some(&mut self.crypto_1rtt),
                };
                let Some(stream) = stream else { return Ok(()) };
                stream.on_frame(offset, data)?;
                while let Some(chunk) = stream.read() {
                    self.tls.read_handshake(&chunk)?;
                }
            }
            Frame::HandshakeDone => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.20
                //# A server MUST
                //# treat receipt of a HANDSHAKE_DONE frame as a connection error of type
                //# PROTOCOL_VIOLATION.
                if self.side.is_server() {
                    return Err(TransportError::protocol_violation("HANDSHAKE_DONE sent by a client"));
                }
                //= https://www.rfc-editor.org/rfc/rfc9001#section-4.1.2
                //# At the client, the handshake is
                //# considered confirmed when a HANDSHAKE_DONE frame is received.
                self.on_handshake_confirmed(now);
            }
            Frame::Stream(s) => self.streams.on_stream(s.id, s.offset, s.data, s.fin)?,
            Frame::ResetStream { id, error_code, final_size } => self.streams.on_reset_stream(id, error_code, final_size)?,
            Frame::StopSending { id, error_code } => self.streams.on_stop_sending(id, error_code)?,
            Frame::MaxData(max) => self.streams.on_max_data(max),
            Frame::MaxStreamData { id, max } => self.streams.on_max_stream_data(id, max)?,
            Frame::MaxStreams { dir, count } => self.streams.on_max_streams(dir, count)?,
            Frame::DataBlocked { limit } => self.streams.on_data_blocked(limit),
            Frame::StreamDataBlocked { id, limit } => self.streams.on_stream_data_blocked(id, limit)?,
            Frame::StreamsBlocked { dir, limit } => self.streams.on_streams_blocked(dir, limit)?,
            Frame::NewToken { .. } => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.7
                //# A server MUST treat receipt
                //# of a NEW_TOKEN frame as a connection error of type
                //# PROTOCOL_VIOLATION.
                if self.side.is_server() {
                    return Err(TransportError::protocol_violation("NEW_TOKEN sent by a client"));
                }
            }
            Frame::NewConnectionId(f) => {
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2
                //# However, the use of NEW_CONNECTION_ID and RETIRE_CONNECTION_ID
                //# is still valid and endpoints need to process these frames
                //# as corresponding to path ID 0.
                self.on_new_connection_id(PathId::ZERO, f.sequence, f.retire_prior_to, f.cid, f.reset_token)?;
            }
            Frame::PathNewConnectionId(f) => {
                let mp = self.multipath.ok_or_else(|| TransportError::protocol_violation("PATH_NEW_CONNECTION_ID without multipath"))?;
                let target = PathId(f.path_id);
                self.check_path_id(mp, target)?;
                if self.retired_paths.contains(&target) {
                    return Ok(());
                }
                self.on_new_connection_id(target, f.sequence, f.retire_prior_to, f.cid, f.reset_token)?;
            }
            Frame::RetireConnectionId { sequence } => self.on_retire_connection_id(now, PathId::ZERO, sequence)?,
            Frame::PathRetireConnectionId { path_id: target, sequence } => {
                let mp = self.multipath.ok_or_else(|| TransportError::protocol_violation("PATH_RETIRE_CONNECTION_ID without multipath"))?;
                self.check_path_id(mp, PathId(target))?;
                self.on_retire_connection_id(now, PathId(target), sequence)?;
            }
            Frame::PathChallenge(token) => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.2
                //# On receiving a PATH_CHALLENGE frame, an endpoint MUST respond by
                //# echoing the data contained in the PATH_CHALLENGE frame in a
                //# PATH_RESPONSE frame.
                if let Some(path) = self.paths.get_mut(&path_id) {
                    if path.responses.len() >= 4 {
                        path.responses.pop_front();
                    }
                    path.responses.push_back(token);
                }
            }
            Frame::PathResponse(token) => self.on_path_response(now, token),
            Frame::ConnectionClose(close) => {
                let error = TransportError {
                    code: TransportErrorCode(close.error_code),
                    frame_type: close.frame_type,
                    reason: String::from_utf8_lossy(&close.reason).into_owned(),
                };
                self.enter_draining(now, ConnectionError::ConnectionClosed(error));
            }
            Frame::ApplicationClose(close) => {
                let reason = String::from_utf8_lossy(&close.reason).into_owned();
                self.enter_draining(now, ConnectionError::ApplicationClosed { code: close.error_code, reason });
            }
            Frame::Datagram(data) => {
                let len = crate::datagrams::datagram_frame_len(data.len());
                if self.datagrams.on_datagram_frame(data, len, self.config.max_datagram_frame_size)? {
                    self.events.push_back(Event::DatagramReceived);
                }
            }
            Frame::PathAbandon { path_id: target, error_code } => {
                let mp = self.multipath.ok_or_else(|| TransportError::protocol_violation("PATH_ABANDON without multipath"))?;
                let target = PathId(target);
                self.check_path_id(mp, target)?;
                self.on_path_abandon(now, target, error_code);
            }
            Frame::PathStatusBackup { path_id: target, sequence } => {
                self.on_path_status(now, PathId(target), sequence, PathStatus::Backup)?
            }
            Frame::PathStatusAvailable { path_id: target, sequence } => {
                self.on_path_status(now, PathId(target), sequence, PathStatus::Available)?
            }
            Frame::MaxPathId(max) => {
                let mp = self.multipath.ok_or_else(|| TransportError::protocol_violation("MAX_PATH_ID without multipath"))?;
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.6
                //# MAX_PATH_ID frames that do not increase the path limit MUST be ignored.
                if max > mp.peer_max_path_id {
                    if let Some(m) = self.multipath.as_mut() {
                        m.peer_max_path_id = max;
                    }
                    self.issue_connection_ids(now);
                }
            }
            Frame::PathsBlocked(max) => {
                let mp = self.multipath.ok_or_else(|| TransportError::protocol_violation("PATHS_BLOCKED without multipath"))?;
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.7
                //# Receipt of a value of Maximum Path Identifier or Path Identifier that is higher than
                //# the local maximum value MUST be treated as a connection error of type PROTOCOL_VIOLATION.
                if max > mp.local_max_path_id {
                    return Err(TransportError::protocol_violation("PATHS_BLOCKED above our maximum path ID"));
                }
            }
            Frame::PathCidsBlocked { path_id: target, next_sequence } => {
                let mp = self.multipath.ok_or_else(|| TransportError::protocol_violation("PATH_CIDS_BLOCKED without multipath"))?;
                self.check_path_id(mp, PathId(target))?;
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.7
                //# Receipt of a value of Next Sequence Number that is higher than
                //# the sequence number of the next expected to be issued connection ID for this path
                //# MUST be treated as a connection error of type PROTOCOL_VIOLATION.
                if next_sequence > self.local_cids.next_sequence(PathId(target)) {
                    return Err(TransportError::protocol_violation("PATH_CIDS_BLOCKED with an unissued sequence number"));
                }
            }
        }
        let _ = kind;
        Ok(())
    }

    /// Multipath frames must name a path ID within the limit we advertised.
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4
    //# Receipt of multipath-specific frames
    //# that use a path ID that is greater than the announced Maximum Paths value
    //# in the MAX_PATH_ID frame or in the initial_max_path_id transport parameter,
    //# if no MAX_PATH_ID frame was received yet,
    //# MUST be treated as a connection error of type PROTOCOL_VIOLATION.
    fn check_path_id(&self, mp: Multipath, id: PathId) -> Result<(), TransportError> {
        if id.0 > mp.local_max_path_id {
            return Err(TransportError::protocol_violation(format!(
                "path ID {} above our maximum {}",
                id.0, mp.local_max_path_id
            )));
        }
        Ok(())
    }

    fn on_new_connection_id(
        &mut self,
        path_id: PathId,
        sequence: u64,
        retire_prior_to: u64,
        cid: ConnectionId,
        reset_token: ResetToken,
    ) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.15
        //# An endpoint that is sending packets with a zero-length Destination
        //# Connection ID MUST treat receipt of a NEW_CONNECTION_ID frame as a
        //# connection error of type PROTOCOL_VIOLATION.
        if self.peer_cids.active(PathId::ZERO).is_some_and(|c| c.cid.is_empty()) {
            return Err(TransportError::protocol_violation("NEW_CONNECTION_ID while using zero-length connection IDs"));
        }
        let outcome = self.peer_cids.on_new_cid(path_id, sequence, retire_prior_to, cid, reset_token)?;
        for seq in outcome.to_retire {
            self.pending.retire_cids.insert((path_id, seq));
        }
        if self.pending.path_cids_blocked.contains(&path_id) && self.peer_cids.active(path_id).is_some() {
            self.pending.path_cids_blocked.remove(&path_id);
        }
        Ok(())
    }

    fn on_retire_connection_id(&mut self, now: Instant, path_id: PathId, sequence: u64) -> Result<(), TransportError> {
        let dcid = self.current_packet_dcid;
        if let Some(retired) = self.local_cids.on_retire(path_id, sequence, &dcid)? {
            self.endpoint_events.push_back(EndpointEvent::RetiredLocalCid(retired.cid));
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2.2
            //# As such, when receiving a PATH_RETIRE_CONNECTION_ID frame, an endpoint
            //# SHOULD provide new connection IDs for that path, if still open, using PATH_NEW_CONNECTION_ID frames.
            if !self.retired_paths.contains(&path_id) {
                self.issue_connection_ids(now);
            }
        }
        Ok(())
    }

    fn on_path_response(&mut self, now: Instant, token: [u8; 8]) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.2
        //# A PATH_RESPONSE frame received on any network path validates the path
        //# on which the PATH_CHALLENGE was sent.
        let Some((&id, _)) = self.paths.iter().find(|(_, p)| p.challenge.is_some_and(|c| c.token == token)) else {
            return;
        };
        let Some(path) = self.paths.get_mut(&id) else { return };
        path.challenge = None;
        path.address_validated = true;
        if path.state == PathState::Validating {
            path.state = PathState::Validated;
        }
        self.scheduler.on_path_event(now, &PathEvent::Validated(id));
        self.events.push_back(Event::Path(PathEvent::Validated(id)));
        self.qlog_event(now, "path_validated", json!({"path_id": id.0}));
    }

    /// Handles PATH_STATUS_BACKUP / PATH_STATUS_AVAILABLE.
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.3
    //# A peer MUST ignore an incoming
    //# PATH_STATUS_AVAILABLE or
    //# PATH_STATUS_BACKUP frame if it previously received another PATH_STATUS_BACKUP frame
    //# or PATH_STATUS_AVAILABLE frame for the same path ID with a Path Status sequence number
    //# equal to or higher than the Path Status sequence number of the incoming frame.
    fn on_path_status(&mut self, now: Instant, id: PathId, sequence: u64, status: PathStatus) -> Result<(), TransportError> {
        let mp = self.multipath.ok_or_else(|| TransportError::protocol_violation("PATH_STATUS frame without multipath"))?;
        self.check_path_id(mp, id)?;
        let Some(path) = self.paths.get_mut(&id) else {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.3
            //# All path IDs below the maximum path ID limit can be indicated,
            //# even if the path is not in active use yet.
            let newer = self.early_peer_status.get(&id).is_none_or(|(s, _)| sequence > *s);
            if newer && !self.retired_paths.contains(&id) {
                self.early_peer_status.insert(id, (sequence, status));
            }
            return Ok(());
        };
        if path.peer_status_sequence.is_some_and(|s| s >= sequence) {
            return Ok(());
        }
        path.peer_status_sequence = Some(sequence);
        path.peer_status = Some(status);
        let event = PathEvent::StatusChanged { path: id, local: path.local_status, peer: Some(status) };
        self.scheduler.on_path_event(now, &event);
        self.events.push_back(Event::Path(event));
        Ok(())
    }

    fn on_path_abandon(&mut self, now: Instant, id: PathId, error_code: u64) {
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
        //# When an endpoint receives a PATH_ABANDON frame, it MUST send a corresponding
        //# PATH_ABANDON frame, if it has not already done so, and respectively treat all
        //# connection IDs received from the peer for that path as immediately
        //# retired.
        if !self.paths.contains_key(&id) {
            self.retired_paths.insert(id);
            for seq in self.peer_cids.retire_path(id) {
                self.pending.retire_cids.insert((id, seq));
            }
            return;
        }
        if self.paths.get(&id).is_some_and(|p| p.state == PathState::Abandoned) {
            return;
        }
        let _ = error_code;
        self.abandon_path_internal(now, id, TransportErrorCode::NO_ERROR.0);
    }
}

impl From<PacketKind> for crate::frame::PacketKind {
    fn from(k: PacketKind) -> Self {
        match k {
            PacketKind::Initial => crate::frame::PacketKind::Initial,
            PacketKind::Handshake => crate::frame::PacketKind::Handshake,
            PacketKind::ZeroRtt => crate::frame::PacketKind::ZeroRtt,
            PacketKind::OneRtt => crate::frame::PacketKind::OneRtt,
        }
    }
}
