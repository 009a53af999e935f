//! The receive path: splitting datagrams into packets, removing protection, and handling
//! every frame.

use super::*;
use crate::crypto::{KeyPhaseMatch, Level};
use crate::ecn::{self, EcnCodepoint};
use crate::frame::{Frame, FrameIter};
use crate::packet::{self, Header, LongType, PacketHeader, PacketKind};
use bytes::BytesMut;

/// What processing a packet's frames found out.
#[derive(Debug, Default)]
struct FrameSummary {
    ack_eliciting: bool,
    /// Contained a frame other than PATH_CHALLENGE, PATH_RESPONSE, NEW_CONNECTION_ID
    /// and PADDING (RFC 9000 section 9.1).
    non_probing: bool,
}

/// What the handling of each packet needs to know of the datagram that carried it.
struct DatagramFacts {
    /// The datagram's size.
    len: usize,
    /// Its trailing 16 bytes, if it is long enough to be a Stateless Reset.
    reset_token: Option<[u8; crate::shared::RESET_TOKEN_SIZE]>,
    /// The ECN codepoint of its IP header.
    ecn: Option<EcnCodepoint>,
}

impl Connection {
    /// Processes one received UDP datagram that the endpoint routed to this connection.
    pub(crate) fn handle_datagram(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        ecn: Option<EcnCodepoint>,
        mut data: BytesMut,
    ) {
        match self.state {
            State::Draining { .. } | State::Drained => return,
            State::Closing { .. } => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-10.2.1
                //# An endpoint in the closing state sends a packet containing a
                //# CONNECTION_CLOSE frame in response to any incoming packet that it
                //# attributes to the connection.
                self.close_pending = true;
                return;
            }
            _ => {}
        }
        // What the packets need of the whole datagram; no copy of it.
        let datagram = DatagramFacts {
            len: data.len(),
            reset_token: packet::stateless_reset_token_candidate(&data).copied(),
            ecn,
        };
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
            let packet = data.split_to(header.packet_len.min(data.len()));
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.2
            //# Receivers SHOULD ignore any subsequent packets with a different
            //# Destination Connection ID than the first packet in the datagram.
            if *first_dcid.get_or_insert(header.dcid) != header.dcid {
                self.stats.packets_dropped += 1;
                continue;
            }
            let result =
                self.handle_packet(now, local, remote, header, packet, &datagram, &mut counted);
            if let Err(error) = result {
                self.close_on_error(now, error);
                return;
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
        header: PacketHeader,
        mut packet: BytesMut,
        datagram: &DatagramFacts,
        counted: &mut bool,
    ) -> Result<(), TransportError> {
        let (kind, pn_offset) = match &header.header {
            Header::VersionNegotiation { versions, .. } => {
                self.on_version_negotiation(now, versions);
                return Ok(());
            }
            Header::Retry { scid, token, .. } => {
                self.on_retry(now, scid, token.clone(), &packet);
                return Ok(());
            }
            Header::Long {
                ty,
                version,
                pn_offset,
                ..
            } => {
                if *version != self.version
                    && !self.accept_other_version(now, *ty, *version, &packet, *pn_offset)
                {
                    self.stats.packets_dropped += 1;
                    return Ok(());
                }
                let kind = match ty {
                    LongType::Initial => PacketKind::Initial,
                    LongType::Handshake => PacketKind::Handshake,
                    // Only a server opens 0-RTT packets (with the keys of early data it
                    // accepted; without them the packet is dropped below).
                    LongType::ZeroRtt if self.side.is_server() => PacketKind::ZeroRtt,
                    LongType::ZeroRtt | LongType::Retry => {
                        self.stats.packets_dropped += 1;
                        return Ok(());
                    }
                };
                (kind, *pn_offset)
            }
            Header::Short { pn_offset } => (PacketKind::OneRtt, *pn_offset),
        };
        let space = match kind {
            PacketKind::Initial => AckSpace::Initial,
            PacketKind::Handshake => AckSpace::Handshake,
            // Multipath applies to 1-RTT packets only: 0-RTT is on path 0.
            PacketKind::ZeroRtt => AckSpace::Path(PathId::ZERO),
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
                if self.retired_paths.contains(&path_id) && !self.paths.contains_key(&path_id) {
                    self.stats.packets_dropped += 1;
                    return Ok(());
                }
                AckSpace::Path(path_id)
            }
        };
        let path_id = space.path();
        // A server that switched versions opens the client's Initials of the original
        // version with that version's keys.
        let original_keys = match &header.header {
            Header::Long { version, .. } if *version != self.version => {
                self.original_initial_keys.as_ref()
            }
            _ => None,
        };

        // Remove header protection.
        let hp: Option<&dyn rustls::quic::HeaderProtectionKey> = match space {
            AckSpace::Initial => original_keys
                .or_else(|| self.initial.as_ref().and_then(|h| h.keys.as_ref()))
                .map(|k| k.remote.header.as_ref()),
            AckSpace::Handshake => self
                .handshake
                .as_ref()
                .and_then(|h| h.keys.as_ref())
                .map(|k| k.remote.header.as_ref()),
            AckSpace::Path(_) if kind == PacketKind::ZeroRtt => {
                self.zero_rtt.as_ref().map(|k| k.header.as_ref())
            }
            //= https://www.rfc-editor.org/rfc/rfc9001#section-5.7
            //# Even though 1-RTT keys are available to a server after receiving the first
            //# handshake messages from a client, it is missing assurances on the client
            //# state:
            AckSpace::Path(_) if self.side.is_server() && self.tls.is_handshaking() => None,
            AckSpace::Path(_) => self.one_rtt.as_ref().map(|k| k.remote_header()),
        };
        let Some(hp) = hp else {
            self.stats.packets_dropped += 1;
            return Ok(());
        };
        let Ok(unprotected) = packet::remove_header_protection(&mut packet, pn_offset, hp) else {
            self.stats.packets_dropped += 1;
            return Ok(());
        };
        let largest_received = self
            .space_ref(space)
            .and_then(|s| s.acks.largest.map(|(pn, _)| pn));
        let pn = packet::decode_packet_number(
            largest_received,
            u64::from(unprotected.truncated_pn),
            unprotected.pn_nbits(),
        );
        let header_len = pn_offset + unprotected.pn_len;

        // Remove packet protection.
        let opened = match space {
            AckSpace::Initial | AckSpace::Handshake => {
                let hs = if space == AckSpace::Initial {
                    self.initial.as_ref()
                } else {
                    self.handshake.as_ref()
                };
                let keys = match space {
                    AckSpace::Initial => original_keys,
                    _ => None,
                }
                .or_else(|| hs.and_then(|h| h.keys.as_ref()));
                match keys {
                    Some(keys) => crate::crypto::open_packet(
                        keys.remote.packet.as_ref(),
                        None,
                        pn,
                        &mut packet,
                        header_len,
                    ),
                    None => return Ok(()),
                }
            }
            AckSpace::Path(_) if kind == PacketKind::ZeroRtt => match self.zero_rtt.as_ref() {
                Some(keys) => crate::crypto::open_packet(
                    keys.packet.as_ref(),
                    None,
                    pn,
                    &mut packet,
                    header_len,
                ),
                None => return Ok(()),
            },
            AckSpace::Path(_) => {
                let path_nonce = self.multipath.map(|_| path_id);
                let Some(keys) = self.one_rtt.as_mut() else {
                    return Ok(());
                };
                match keys.open(now, path_nonce, pn, &mut packet, header_len) {
                    Ok(o) => {
                        if o.keys == KeyPhaseMatch::Next {
                            self.stats.key_updates += 1;
                            self.qlog_event(
                                now,
                                "key_updated",
                                json!({"key_type": "1rtt", "trigger": "remote_update"}),
                            );
                        }
                        Ok(o.payload_len)
                    }
                    Err(e) => {
                        if let Some(fatal) = e.transport_error() {
                            return Err(fatal);
                        }
                        Err(e)
                    }
                }
            }
        };
        let payload_len = match opened {
            Ok(len) => len,
            Err(_) => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.1
                //# An endpoint detects a potential Stateless Reset using the trailing 16
                //# bytes of the UDP datagram.
                if kind == PacketKind::OneRtt
                    && let Some(token) = &datagram.reset_token
                    && self.peer_cids.is_reset_token(token)
                {
                    self.qlog_event(
                        now,
                        "packet_received",
                        json!({"header": {"packet_type": "stateless_reset"}}),
                    );
                    self.enter_draining(now, ConnectionError::Reset);
                    self.drain_now();
                    return Ok(());
                }
                self.stats.packets_dropped += 1;
                return Ok(());
            }
        };

        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
        //# An endpoint MUST treat receipt of a packet that has a non-zero value for these
        //# bits after removing both packet and header protection as a connection error
        //# of type PROTOCOL_VIOLATION.
        if unprotected.reserved_bits_set() {
            return Err(TransportError::protocol_violation(
                "reserved header bits set",
            ));
        }
        if self
            .space_ref(space)
            .is_some_and(|s| s.acks.is_duplicate(pn))
        {
            self.stats.packets_dropped += 1;
            return Ok(());
        }

        if matches!(space, AckSpace::Path(_)) {
            self.on_path_packet(now, path_id, local, remote)?;
        }
        if !*counted && let Some(path) = self.paths.get_mut(&path_id) {
            *counted = true;
            path.on_datagram_received(datagram.len as u64);
            if let Some(probe) = path
                .off_path
                .as_mut()
                .filter(|p| (p.local, p.remote) == (local, remote))
            {
                probe.received += datagram.len as u64;
            }
            // The peer's packets resume on a path whose probe timeouts have backed off,
            // after a silence longer than a probe timeout: the path was out (an outage only
            // the peer's side saw, or one that ended before our next backed-off probe), so
            // probe it now rather than at the backed-off time.
            let resumed = path.pto_count > 0
                && path.state == PathState::Validated
                && path
                    .last_received
                    .is_some_and(|t| now.saturating_duration_since(t) > path.rtt.pto_base());
            path.last_received = Some(now);
            if resumed {
                self.reprobe_path(now, path_id);
            }
        }
        self.received_any = true;
        self.stats.packets_received += 1;
        match kind {
            PacketKind::ZeroRtt => self.zero_rtt_packets += 1,
            //= https://www.rfc-editor.org/rfc/rfc9001#section-4.9.3
            //# Additionally, a server MAY discard 0-RTT keys as soon as it receives a 1-RTT
            //# packet.
            PacketKind::OneRtt if self.side.is_server() && self.zero_rtt.take().is_some() => {
                self.qlog_event(
                    now,
                    "key_discarded",
                    json!({"key_type": "server_0rtt_secret"}),
                );
            }
            _ => {}
        }

        if kind == PacketKind::Initial
            && self.side.is_client()
            && !self.got_server_initial
            && let Header::Long { scid, .. } = &header.header
        {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-7.2
            //# Upon first receiving an Initial or Retry packet from the server, the client uses
            //# the Source Connection ID supplied by the server as the Destination Connection ID
            //# for subsequent packets, including any 0-RTT packets.
            self.got_server_initial = true;
            self.peer_initial_scid = Some(*scid);
            self.peer_cids.set_handshake_cid(*scid, None);
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
                if p.state == PathState::Validating {
                    p.state = PathState::Validated;
                }
            }
        }

        self.current_packet_dcid = header.dcid;
        self.current_datagram = (local, remote, datagram.len as u64);
        let _header = packet.split_to(header_len);
        packet.truncate(payload_len);
        let version = match &header.header {
            Header::Long { version, .. } => *version,
            _ => self.version,
        };
        let summary = self.handle_frames(now, kind, space, pn, version, packet.freeze())?;

        let max_ack_delay = self.config.max_ack_delay;
        let threshold = self.config.ack_eliciting_threshold;
        if let Some(s) = self.space_mut(space) {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.1
            //# ECN counts are only incremented when QUIC packets from the received IP
            //# packet are processed.
            if let Some(codepoint) = datagram.ecn {
                ecn::count(&mut s.acks.ecn, codepoint);
            }
            let immediate = !matches!(space, AckSpace::Path(_));
            s.acks.on_packet(
                now,
                pn,
                summary.ack_eliciting,
                immediate,
                max_ack_delay,
                threshold,
            );
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
        //# An endpoint restarts its idle timer when a packet from its peer is
        //# received and processed successfully.
        self.reset_idle_timer(now);
        self.sent_ack_eliciting_since_receive = false;
        if summary.non_probing && kind == PacketKind::OneRtt {
            self.maybe_migrate(now, path_id, local, remote, pn, datagram.len as u64);
        }
        Ok(())
    }

    /// Checks a datagram the endpoint could not route against the stateless reset tokens
    /// the peer gave us; on a match the connection is over. Returns whether it matched.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.1
    //# An endpoint detects a potential Stateless Reset using the trailing 16
    //# bytes of the UDP datagram.
    pub(crate) fn handle_possible_reset(&mut self, now: Instant, datagram: &[u8]) -> bool {
        if self.is_drained() {
            return false;
        }
        let Some(token) = packet::stateless_reset_token_candidate(datagram) else {
            return false;
        };
        if !self.peer_cids.is_reset_token(token) {
            return false;
        }
        self.qlog_event(
            now,
            "packet_received",
            json!({"header": {"packet_type": "stateless_reset"}}),
        );
        self.enter_draining(now, ConnectionError::Reset);
        self.drain_now();
        true
    }

    /// A 1-RTT packet on a path ID we have no state for opens that path (multipath).
    fn on_path_packet(
        &mut self,
        now: Instant,
        path_id: PathId,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<(), TransportError> {
        if self.paths.contains_key(&path_id) {
            return Ok(());
        }
        let Some(mp) = self.multipath else {
            return Ok(());
        };
        if path_id.0 > mp.local_max_path_id {
            return Err(TransportError::protocol_violation(
                "packet on a path ID above our limit",
            ));
        }
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
        //# After receiving packets from the
        //# client on a new path, if the server decides to use the new path,
        //# the server MUST validate the peer's address before sending any data
        //# as described in ({{Section 8.2 of QUIC-TRANSPORT}}),
        //# unless it has previously validated the 4-tuple used for that path.
        let cc = self.cc_factory.build(now, path_id, self.config.initial_mtu);
        let mut path = Path::new(path_id, local, remote, &self.config, cc, false);
        if self.peer_cids.activate(path_id).is_none() {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.1
            //# An endpoint that has no active connection ID for this path or
            //# lacks other resources to immediately configure a new path could
            //# delay sending the PATH_RESPONSE until sufficient resources are available.
            self.pending.path_cids_blocked.insert(path_id);
        }
        path.challenge = Some(paths::Challenge {
            token: self.random_token(),
            sent_at: None,
            give_up_at: now + self.path_validation_timeout(),
        });
        if let Some(peer) = self.peer_params.as_ref() {
            path.plan_mtu_discovery(
                self.config
                    .max_mtu
                    .min(u16::try_from(peer.max_udp_payload_size).unwrap_or(u16::MAX)),
            );
        }
        if let Some((sequence, status)) = self.early_peer_status.remove(&path_id) {
            path.peer_status_sequence = Some(sequence);
            path.peer_status = Some(status);
        }
        self.inherit_link_hints(&mut path);
        self.paths.insert(path);
        self.qlog_event(now, "path_assigned", json!({"path_id": path_id.0, "local": local.to_string(), "remote": remote.to_string(), "initiator": "remote"}));
        self.qlog_tuple_assigned(now, path_id, local, remote);
        self.path_event(now, PathEvent::Opened(path_id), true);
        Ok(())
    }

    /// Handles a peer's address change on an existing path (server side).
    //= https://www.rfc-editor.org/rfc/rfc9000#section-9.3
    //# Receiving a packet from a new peer address containing a non-probing
    //# frame indicates that the peer has migrated to that address.
    fn maybe_migrate(
        &mut self,
        now: Instant,
        path_id: PathId,
        local: SocketAddr,
        remote: SocketAddr,
        pn: u64,
        datagram_len: u64,
    ) {
        if self.side.is_client() || !self.handshake_confirmed {
            return;
        }
        let timeout = self.path_validation_timeout();
        let Some(path) = self.paths.get(&path_id) else {
            return;
        };
        if path.remote == remote && path.local == local {
            return;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.3
        //# An endpoint only changes the address to which it sends packets in
        //# response to the highest-numbered non-probing packet.
        if path.space.acks.largest.is_some_and(|(l, _)| pn < l) {
            return;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.2
        //# The server MUST send non-probing packets from its
        //# original address until it receives a non-probing packet from the client at its
        //# preferred address and until the server has validated the new path.
        if path.local != local {
            let token = self.random_token();
            let give_up_at = now + timeout;
            let Some(path) = self.paths.get_mut(&path_id) else {
                return;
            };
            let (probe, _) = path.off_path_probe(local, remote, datagram_len);
            probe.non_probing_seen = true;
            if probe.validated {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.2
                //# Once the server has completed its path validation and has received a non-probing
                //# packet with a new largest packet number on its preferred address, the server
                //# begins sending non-probing packets to the client exclusively from its preferred
                //# IP address.
                self.move_to_off_path(now, path_id);
            } else if probe.challenge.is_none() {
                probe.challenge = Some(paths::Challenge {
                    token,
                    sent_at: None,
                    give_up_at,
                });
            }
            return;
        }
        let port_only = path.remote.ip() == remote.ip();
        // Back to the address validated before (the peer's packets from a spurious or
        // short-lived address stopped): no new validation is needed.
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9
        //# An endpoint MUST perform path validation ({{migrate-validate}}) if it
        //# detects any change to a peer's address, unless it has previously validated that
        //# address.
        let back_to_validated = path.last_validated == Some((local, remote));
        let previously_validated = if path.address_validated {
            Some((path.local, path.remote))
        } else {
            path.last_validated
        };
        let token = self.random_token();
        let cc = (!port_only).then(|| self.cc_factory.build(now, path_id, self.config.initial_mtu));
        let initial_rtt = self.config.initial_rtt;
        let Some(path) = self.paths.get_mut(&path_id) else {
            return;
        };
        let from = path.remote;
        path.remote = remote;
        path.local = local;
        // Responses owed to the new address's probes go with the path now.
        if let Some(probe) = path
            .off_path
            .take_if(|p| (p.local, p.remote) == (local, remote))
        {
            path.responses.extend(probe.responses);
        }
        self.stats.peer_address_changes += 1;
        if back_to_validated {
            path.address_validated = true;
            path.last_validated = None;
            path.challenge = None;
            self.rotate_peer_cid(path_id);
            self.qlog_event(
                now,
                "migration_state_updated",
                json!({"new": "probing_abandoned", "path_id": path_id.0, "remote": from.to_string(), "reverted_to": remote.to_string()}),
            );
            return;
        }
        path.last_validated = previously_validated;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.3.1
        //# Until a peer's address is deemed valid, an endpoint limits the amount
        //# of data it sends to that address; see Section 8.
        path.address_validated = false;
        // The datagram that came from the new address counts: without it the budget is
        // zero, so not even the PATH_CHALLENGE could go out, and a peer with nothing
        // ack-eliciting in flight (a receiver that only acknowledges) sends nothing more:
        // the connection would sit silent until its idle timeout.
        path.unvalidated_received = datagram_len;
        path.unvalidated_sent = 0;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.4
        //# On confirming a peer's ownership of its new address, an endpoint MUST
        //# immediately reset the congestion controller and round-trip time
        //# estimator for the new path to initial values (see Appendices A.3 and
        //# B.3 of [QUIC-RECOVERY]) unless the only change in the peer's address
        //# is its port number.
        if let Some(cc) = cc {
            path.restart_on_new_network_path(cc, initial_rtt);
        }
        path.challenge = Some(paths::Challenge {
            token,
            sent_at: None,
            give_up_at: now + timeout,
        });
        self.rotate_peer_cid(path_id);
        self.qlog_event(
            now,
            "migration_state_updated",
            json!({"new": "probing_started", "path_id": path_id.0, "remote": remote.to_string()}),
        );
    }

    /// Sends on a path with the peer's next connection ID, retiring the current one; kept
    /// if the peer has given no spare.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-9.5
    //# An endpoint MUST NOT reuse a connection ID when sending to
    //# more than one destination address.
    pub(super) fn rotate_peer_cid(&mut self, path_id: PathId) {
        if let Some(Some(retired)) = self.peer_cids.rotate(path_id) {
            self.queue_retire_cid(path_id, retired);
        }
    }

    /// Whether a long header `packet` of `version`, not the connection's, is processed: a
    /// client follows a server that switched to a compatible version it offered, once the
    /// server's first Initial decrypts in that version; a server that switched still
    /// takes the client's Initials in the original version.
    //= https://www.rfc-editor.org/rfc/rfc9369#section-4.1
    //# The client learns the negotiated version by observing the first long header
    //# Version field that differs from the original version.
    fn accept_other_version(
        &mut self,
        now: Instant,
        ty: LongType,
        version: u32,
        packet: &[u8],
        pn_offset: usize,
    ) -> bool {
        if ty != LongType::Initial {
            return false;
        }
        if self.side.is_server() {
            return version == self.initial_version && self.original_initial_keys.is_some();
        }
        let offered = self
            .local_version_info
            .as_ref()
            .is_some_and(|info| info.available.contains(&version));
        if self.got_server_initial
            || !offered
            || !crate::packet::is_compatible(self.version, version)
        {
            return false;
        }
        let secret_cid = self.retry_scid.unwrap_or(self.original_dcid);
        let Some(keys) = crate::crypto::initial_keys(version, &secret_cid, self.side) else {
            return false;
        };
        // Only a packet that authenticates switches: a forged header cannot.
        if crate::endpoint::open_first_packet(&keys, packet, pn_offset).is_none()
            || !self.tls.switch_version(version)
        {
            return false;
        }
        let Some(initial) = self.initial.as_mut() else {
            return false;
        };
        initial.keys = Some(keys);
        let from = self.version;
        self.version = version;
        self.qlog_version_information(now, Some(from));
        true
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
        self.events
            .push_back(Event::ConnectionLost(ConnectionError::VersionMismatch));
        self.drain_now();
    }

    /// Client handling of a Retry packet.
    fn on_retry(
        &mut self,
        now: Instant,
        scid: &ConnectionId,
        token: std::ops::Range<usize>,
        packet: &[u8],
    ) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5.2
        //# A client MUST accept and process at most one Retry packet for each
        //# connection attempt.  After the client has received and processed an
        //# Initial or Retry packet from the server, it MUST discard any
        //# subsequent Retry packets that it receives.
        if self.side.is_server() || self.received_any || self.retry_scid.is_some() {
            return;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5.2
        //# Clients MUST discard Retry packets that have a Retry Integrity Tag
        //# that cannot be validated
        if !crate::crypto::verify_retry_integrity(self.version, &self.original_dcid, packet) {
            self.stats.packets_dropped += 1;
            return;
        }
        let Some(token) = packet.get(token).filter(|t| !t.is_empty()) else {
            return;
        };
        let Some(keys) = crate::crypto::initial_keys(self.version, scid, self.side) else {
            return;
        };
        self.qlog_event(
            now,
            "packet_received",
            json!({"header": {"packet_type": "retry", "scid": scid.to_string()}}),
        );
        self.retry_scid = Some(*scid);
        self.retry_token = Bytes::copy_from_slice(token);
        self.peer_cids.set_handshake_cid(*scid, None);
        //= https://www.rfc-editor.org/rfc/rfc9001#section-5.2
        //# Initial packets apply the packet protection process, but use a secret derived
        //# from the Destination Connection ID field from the client's first Initial
        //# packet.
        // (after a Retry, the Initial secrets derive from the Retry's SCID: RFC 9000 7.2)
        let Some(initial) = self.initial.as_mut() else {
            return;
        };
        initial.keys = Some(keys);
        //= https://www.rfc-editor.org/rfc/rfc9002#section-6.3
        //# Clients that receive a Retry packet reset congestion control and loss
        //# recovery state, including resetting any pending timers.
        let lost = initial.space.recovery.discard();
        let mut bytes = 0;
        for (_, p) in &lost {
            for &(offset, len) in &p.payload.crypto {
                initial.crypto.on_lost(offset, len);
            }
            if p.in_flight {
                bytes += u64::from(p.size);
            }
        }
        if let Some(path) = self.paths.get_mut(&PathId::ZERO) {
            path.bytes_in_flight = path.bytes_in_flight.saturating_sub(bytes);
            path.pto_count = 0;
        }
    }

    /// Processes `payload` as the frames of a 1-RTT packet on path 0, closing the connection
    /// on a protocol violation as a real packet would (tests and fuzzing only).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn inject_frames(&mut self, now: Instant, payload: &[u8]) {
        let pn = self
            .paths
            .get(&PathId::ZERO)
            .and_then(|p| p.space.acks.largest)
            .map_or(0, |(pn, _)| pn + 1);
        if let Err(e) = self.handle_frames(
            now,
            PacketKind::OneRtt,
            AckSpace::Path(PathId::ZERO),
            pn,
            self.version,
            Bytes::copy_from_slice(payload),
        ) {
            self.close_on_error(now, e);
        }
    }

    /// Handles the frames of one packet.
    fn handle_frames(
        &mut self,
        now: Instant,
        kind: PacketKind,
        space: AckSpace,
        pn: u64,
        version: u32,
        payload: Bytes,
    ) -> Result<FrameSummary, TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
        //# An endpoint MUST treat receipt of a packet containing no frames as a
        //# connection error of type PROTOCOL_VIOLATION.
        if payload.is_empty() {
            return Err(TransportError::protocol_violation("packet without frames"));
        }
        let mut summary = FrameSummary::default();
        let mut qlog_frames = self.qlog.is_some().then(Vec::new);
        for frame in FrameIter::new(payload) {
            let frame = frame.map_err(TransportError::from)?;
            let ty = frame.ty();
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
            //# An endpoint MUST treat receipt of
            //# a frame in a packet type that is not permitted as a connection error of type
            //# PROTOCOL_VIOLATION.
            if !ty.allowed_in(kind) {
                return Err(TransportError::protocol_violation(format!(
                    "{} frame not allowed in {kind:?} packets",
                    ty.name().unwrap_or("unknown")
                ))
                .in_frame(ty.0));
            }
            summary.ack_eliciting |= ty.is_ack_eliciting();
            summary.non_probing |= !ty.is_probing();
            if let Some(list) = qlog_frames.as_mut() {
                list.push(qlog_frames::frame_json(&frame));
            }
            self.handle_frame(now, space, frame).map_err(|e| {
                if e.frame_type.is_none() {
                    e.in_frame(ty.0)
                } else {
                    e
                }
            })?;
            if self.is_closed() {
                break;
            }
        }
        if let Some(frames) = qlog_frames {
            let data = json!({
                "header": self.qlog_header(space, pn, version, kind == PacketKind::ZeroRtt),
                "frames": frames,
            });
            self.qlog_event(now, "packet_received", data);
        }
        Ok(summary)
    }

    fn handle_frame(
        &mut self,
        now: Instant,
        space: AckSpace,
        frame: Frame,
    ) -> Result<(), TransportError> {
        let path_id = space.path();
        match frame {
            Frame::Padding(_) | Frame::Ping => {}
            Frame::Ack(ack) => {
                let target = match (ack.path_id, space) {
                    (None, _) => space,
                    (Some(id), _) => {
                        self.require_path_id(id)?;
                        if !self.paths.contains_key(&id) {
                            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4.3
                            //# PATH_ACK frames received with an abandoned path ID are silently ignored,
                            //# as specified in {{frames}}.
                            if self.retired_paths.contains(&id) {
                                return Ok(());
                            }
                            return Err(TransportError::protocol_violation(
                                "PATH_ACK for a path without a packet number space",
                            ));
                        }
                        AckSpace::Path(id)
                    }
                };
                // Without a path ID, an ACK in a 1-RTT packet acknowledges path 0
                // (draft-ietf-quic-multipath-21 section 2.3).
                let target = match target {
                    AckSpace::Path(_) if ack.path_id.is_none() => AckSpace::Path(PathId::ZERO),
                    other => other,
                };
                self.on_ack_frame(now, target, &ack)?;
            }
            Frame::Crypto(c) => {
                let level = match space {
                    AckSpace::Initial => Level::Initial,
                    AckSpace::Handshake => Level::Handshake,
                    AckSpace::Path(_) => Level::OneRtt,
                };
                self.on_crypto_frame(now, level, c.offset, c.data)?;
            }
            Frame::HandshakeDone => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.20
                //# A server MUST
                //# treat receipt of a HANDSHAKE_DONE frame as a connection error of type
                //# PROTOCOL_VIOLATION.
                if self.side.is_server() {
                    return Err(TransportError::protocol_violation(
                        "HANDSHAKE_DONE sent by a client",
                    ));
                }
                //= https://www.rfc-editor.org/rfc/rfc9001#section-4.1.2
                //# At the client, the handshake is
                //# considered confirmed when a HANDSHAKE_DONE frame is received.
                self.on_handshake_confirmed(now);
            }
            Frame::Stream(s) => self.streams.on_stream(s.id, s.offset, s.data, s.fin)?,
            Frame::ResetStream(r) => {
                self.streams
                    .on_reset_stream(r.id, r.error_code, r.final_size)?
            }
            Frame::StopSending(s) => self.streams.on_stop_sending(s.id, s.error_code)?,
            Frame::MaxData(max) => self.streams.on_max_data(max),
            Frame::MaxStreamData { id, max } => self.streams.on_max_stream_data(id, max)?,
            Frame::MaxStreams { dir, count } => self.streams.on_max_streams(dir, count)?,
            Frame::DataBlocked(limit) => self.streams.on_data_blocked(limit),
            Frame::StreamDataBlocked { id, limit } => {
                self.streams.on_stream_data_blocked(id, limit)?
            }
            Frame::StreamsBlocked { dir, limit } => self.streams.on_streams_blocked(dir, limit)?,
            Frame::NewToken(_) => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.7
                //# A server MUST treat receipt
                //# of a NEW_TOKEN frame as a connection error of type
                //# PROTOCOL_VIOLATION.
                if self.side.is_server() {
                    return Err(TransportError::protocol_violation(
                        "NEW_TOKEN sent by a client",
                    ));
                }
            }
            Frame::NewConnectionId(f) => {
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2
                //# However, the use of NEW_CONNECTION_ID and RETIRE_CONNECTION_ID
                //# is still valid and endpoints need to process these frames
                //# as corresponding to path ID 0.
                let target = f.path_id.unwrap_or(PathId::ZERO);
                if f.path_id.is_some() {
                    self.require_path_id(target)?;
                    if self.retired_paths.contains(&target) {
                        return Ok(());
                    }
                }
                self.on_new_connection_id(
                    target,
                    f.sequence,
                    f.retire_prior_to,
                    f.id,
                    f.reset_token,
                )?;
            }
            Frame::RetireConnectionId {
                path_id: target,
                sequence,
            } => {
                let target = match target {
                    Some(id) => {
                        self.require_path_id(id)?;
                        id
                    }
                    None => PathId::ZERO,
                };
                self.on_retire_connection_id(target, sequence)?;
            }
            Frame::PathChallenge(token) => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.2
                //# On receiving a PATH_CHALLENGE frame, an endpoint MUST respond by
                //# echoing the data contained in the PATH_CHALLENGE frame in a
                //# PATH_RESPONSE frame.
                let (local, remote, len) = self.current_datagram;
                let server = self.side.is_server();
                let our_token = self.random_token();
                let give_up_at = now + self.path_validation_timeout();
                if let Some(path) = self.paths.get_mut(&path_id) {
                    let responses = if (path.local, path.remote) == (local, remote) {
                        &mut path.responses
                    } else {
                        //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.2
                        //# A PATH_RESPONSE frame MUST be sent on the network path where the PATH_CHALLENGE
                        //# frame was received.
                        let (probe, fresh) = path.off_path_probe(local, remote, len);
                        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.2
                        //# The server MUST probe on the path toward the client from its preferred address.
                        //
                        //= https://www.rfc-editor.org/rfc/rfc9000#section-9.6.3
                        //# Servers SHOULD initiate path validation to the client's new address upon
                        //# receiving a probe packet from a different address; see {{address-validation}}.
                        if fresh && server {
                            probe.challenge = Some(paths::Challenge {
                                token: our_token,
                                sent_at: None,
                                give_up_at,
                            });
                        }
                        &mut probe.responses
                    };
                    if responses.len() >= 4 {
                        responses.pop_front();
                    }
                    responses.push_back(token);
                }
            }
            Frame::PathResponse(token) => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-8.2.3
                //# A PATH_RESPONSE frame received on any network path validates the path
                //# on which the PATH_CHALLENGE was sent.
                let validated = self
                    .paths
                    .values()
                    .find(|p| p.challenge.is_some_and(|c| c.token == token))
                    .map(|p| p.id);
                if let Some(id) = validated {
                    self.on_path_validated(now, id);
                }
                let off_path = self
                    .paths
                    .values()
                    .find(|p| {
                        p.off_path
                            .as_ref()
                            .and_then(|o| o.challenge)
                            .is_some_and(|c| c.token == token)
                    })
                    .map(|p| p.id);
                if let Some(id) = off_path {
                    self.on_off_path_validated(now, id);
                }
            }
            Frame::ConnectionClose(close) => {
                let error = TransportError::from(&close);
                self.enter_draining(now, ConnectionError::ConnectionClosed(error));
            }
            Frame::ApplicationClose(close) => {
                let reason = close.reason_lossy().into_owned();
                self.enter_draining(
                    now,
                    ConnectionError::ApplicationClosed {
                        code: close.error_code.into_inner(),
                        reason,
                    },
                );
            }
            Frame::Datagram(d) => {
                let len = crate::datagrams::datagram_frame_len(d.data.len());
                if self.datagrams.on_datagram_frame(
                    d.data,
                    len,
                    self.config.max_datagram_frame_size,
                )? {
                    self.events.push_back(Event::DatagramReceived);
                }
            }
            Frame::PathAbandon {
                path_id: target, ..
            } => {
                self.require_path_id(target)?;
                self.on_path_abandon(now, target);
            }
            Frame::PathStatus {
                path_id: target,
                status,
                sequence,
            } => {
                self.require_path_id(target)?;
                self.on_path_status(now, target, sequence, status);
            }
            Frame::MaxPathId(max) => {
                let mp = self.require_multipath()?;
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.6
                //# The Maximum Path Identifier value MUST NOT be lower than the value
                //# advertised in the initial_max_path_id transport parameter.
                //#
                //# Receipt of an invalid Maximum Path Identifier value MUST be treated as a
                //# connection error of type PROTOCOL_VIOLATION.
                let initial = self
                    .peer_params
                    .as_ref()
                    .and_then(|p| p.initial_max_path_id)
                    .map_or(0, |p| p.0);
                if max.0 < initial {
                    return Err(TransportError::protocol_violation(
                        "MAX_PATH_ID below the peer's initial_max_path_id",
                    ));
                }
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.6
                //# MAX_PATH_ID frames that do not increase the path limit MUST be ignored.
                if max.0 > mp.peer_max_path_id {
                    if let Some(m) = self.multipath.as_mut() {
                        m.peer_max_path_id = max.0;
                    }
                    self.issue_connection_ids();
                }
            }
            Frame::PathsBlocked(max) => {
                let mp = self.require_multipath()?;
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.7
                //# Receipt of a value of Maximum Path Identifier or Path Identifier that is higher than
                //# the local maximum value MUST be treated as a connection error of type PROTOCOL_VIOLATION.
                if max.0 > mp.local_max_path_id {
                    return Err(TransportError::protocol_violation(
                        "PATHS_BLOCKED above our maximum path ID",
                    ));
                }
            }
            Frame::PathCidsBlocked {
                path_id: target,
                next_sequence,
            } => {
                self.require_path_id(target)?;
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.7
                //# Receipt of a value of Next Sequence Number that is higher than
                //# the sequence number of the next expected to be issued connection ID for this path
                //# MUST be treated as a connection error of type PROTOCOL_VIOLATION.
                if next_sequence > self.local_cids.next_sequence(target) {
                    return Err(TransportError::protocol_violation(
                        "PATH_CIDS_BLOCKED with a sequence number never issued",
                    ));
                }
            }
        }
        Ok(())
    }

    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4
    //# All frames defined in this document MUST only be sent in 1-RTT packets.
    //# If an endpoint receives a multipath-specific frame in a different packet type,
    //# it MUST close the connection with an error of type PROTOCOL_VIOLATION.
    fn require_multipath(&self) -> Result<Multipath, TransportError> {
        self.multipath.ok_or_else(|| {
            TransportError::protocol_violation("multipath frame without multipath negotiated")
        })
    }

    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4
    //# Receipt of multipath-specific frames
    //# that use a path ID that is greater than the announced Maximum Paths value
    //# in the MAX_PATH_ID frame or in the initial_max_path_id transport parameter,
    //# if no MAX_PATH_ID frame was received yet,
    //# MUST be treated as a connection error of type PROTOCOL_VIOLATION.
    fn require_path_id(&self, id: PathId) -> Result<(), TransportError> {
        let mp = self.require_multipath()?;
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
        if self
            .peer_cids
            .active(PathId::ZERO)
            .is_some_and(|c| c.cid.is_empty())
        {
            return Err(TransportError::protocol_violation(
                "NEW_CONNECTION_ID while using zero-length connection IDs",
            ));
        }
        let outcome =
            self.peer_cids
                .on_new_cid(path_id, sequence, retire_prior_to, cid, reset_token)?;
        for seq in outcome.to_retire {
            self.queue_retire_cid(path_id, seq);
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-5.1.2
        //# An endpoint SHOULD limit the number of connection IDs it has retired locally for
        //# which RETIRE_CONNECTION_ID frames have not yet been acknowledged. An endpoint
        //# SHOULD allow for sending and tracking a number of RETIRE_CONNECTION_ID frames of
        //# at least twice the value of the active_connection_id_limit transport parameter.
        //# An endpoint MUST NOT forget a connection ID without retiring it, though it MAY
        //# choose to treat having connection IDs in need of retirement that exceed this
        //# limit as a connection error of type CONNECTION_ID_LIMIT_ERROR.
        let unacked = self
            .pending
            .retire_unacked
            .range((path_id, 0)..=(path_id, u64::MAX))
            .count() as u64;
        let limit = 2 * self.config.active_connection_id_limit.max(2);
        if unacked > limit {
            return Err(TransportError::connection_id_limit(format!(
                "{unacked} retired connection IDs of {path_id:?} not acknowledged, limit {limit}"
            )));
        }
        if self.peer_cids.active(path_id).is_some() {
            self.pending.path_cids_blocked.remove(&path_id);
        }
        if path_id != PathId::ZERO
            && !self.paths.contains_key(&path_id)
            && !self.retired_paths.contains(&path_id)
        {
            // A path ID the path manager may now open a path with.
            self.pm_tick_due = true;
        }
        Ok(())
    }

    /// Retires a connection ID the peer issued: a RETIRE_CONNECTION_ID frame is queued and
    /// the ID counts as unacknowledged until a packet carrying that frame is acknowledged.
    pub(super) fn queue_retire_cid(&mut self, path: PathId, sequence: u64) {
        self.pending.retire_cids.insert((path, sequence));
        self.pending.retire_unacked.insert((path, sequence));
    }

    fn on_retire_connection_id(
        &mut self,
        path_id: PathId,
        sequence: u64,
    ) -> Result<(), TransportError> {
        let dcid = self.current_packet_dcid;
        if let Some(retired) = self.local_cids.on_retire(path_id, sequence, &dcid)? {
            self.endpoint_events
                .push_back(EndpointEvent::RetiredLocalCid(retired.cid));
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2.2
            //# As such, when receiving a PATH_RETIRE_CONNECTION_ID frame, an endpoint
            //# SHOULD provide new connection IDs for that path, if still open, using PATH_NEW_CONNECTION_ID frames.
            if !self.retired_paths.contains(&path_id) {
                self.issue_connection_ids();
            }
        }
        Ok(())
    }

    /// Handles PATH_STATUS_BACKUP / PATH_STATUS_AVAILABLE.
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.3
    //# A peer MUST ignore an incoming
    //# PATH_STATUS_AVAILABLE or
    //# PATH_STATUS_BACKUP frame if it previously received another PATH_STATUS_BACKUP frame
    //# or PATH_STATUS_AVAILABLE frame for the same path ID with a Path Status sequence number
    //# equal to or higher than the Path Status sequence number of the incoming frame.
    fn on_path_status(&mut self, now: Instant, id: PathId, sequence: u64, status: PathStatus) {
        let Some(path) = self.paths.get_mut(&id) else {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.3
            //# All path IDs below the maximum path ID limit can be indicated,
            //# even if the path is not in active use yet.
            let newer = self
                .early_peer_status
                .get(&id)
                .is_none_or(|(s, _)| sequence > *s);
            if newer && !self.retired_paths.contains(&id) {
                self.early_peer_status.insert(id, (sequence, status));
            }
            return;
        };
        if path.peer_status_sequence.is_some_and(|s| s >= sequence) {
            return;
        }
        path.peer_status_sequence = Some(sequence);
        path.peer_status = Some(status);
        let event = PathEvent::StatusChanged {
            path: id,
            local: path.local_status,
            peer: Some(status),
        };
        self.path_event(now, event, true);
    }

    fn on_path_abandon(&mut self, now: Instant, id: PathId) {
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
        //# When an endpoint receives a PATH_ABANDON frame, it MUST send a corresponding
        //# PATH_ABANDON frame, if it has not already done so, and respectively treat all
        //# connection IDs received from the peer for that path as immediately
        //# retired.
        match self.paths.get(&id) {
            Some(p) if p.state == PathState::Abandoned => self.return_path_id(id),
            Some(_) => {
                self.abandon_path_internal(
                    now,
                    id,
                    TransportErrorCode::NO_ERROR.0,
                    super::path_manager::Origin::Protocol("peer_abandoned"),
                    super::paths::InFlightOnAbandon::Retransmit,
                );
                self.return_path_id(id);
            }
            None => {
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
                //# It is also possible that an endpoint will receive a PATH_ABANDON frame
                //# before receiving or sending any traffic on a path.
                if self.retired_paths.insert(id) {
                    for seq in self.peer_cids.retire_path(id) {
                        self.queue_retire_cid(id, seq);
                    }
                }
            }
        }
    }
}
