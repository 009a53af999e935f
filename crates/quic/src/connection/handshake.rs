//! The handshake: moving TLS messages through CRYPTO streams, installing keys, checking the
//! peer's transport parameters, confirming the handshake and discarding old keys.

use super::*;
use crate::crypto::{KeyChange, Level};
use loss::Requeue;

/// The transport parameters this endpoint sends.
pub(super) fn local_transport_parameters(
    config: &TransportConfig,
    limits: &StreamLimits,
    side: Side,
    original_dcid: &ConnectionId,
    local_cid: &ConnectionId,
    retry_scid: Option<&ConnectionId>,
    reset_token: ResetToken,
) -> TransportParameters {
    let mut tp = TransportParameters {
        max_idle_timeout: config.max_idle_timeout.map_or(0, |d| d.as_millis() as u64),
        max_udp_payload_size: u64::from(config.max_udp_payload_size),
        initial_max_data: limits.max_data,
        initial_max_stream_data_bidi_local: limits.max_stream_data_bidi_local,
        initial_max_stream_data_bidi_remote: limits.max_stream_data_bidi_remote,
        initial_max_stream_data_uni: limits.max_stream_data_uni,
        initial_max_streams_bidi: limits.max_streams_bidi,
        initial_max_streams_uni: limits.max_streams_uni,
        ack_delay_exponent: config.ack_delay_exponent,
        max_ack_delay: config.max_ack_delay.as_millis() as u64,
        active_connection_id_limit: config.active_connection_id_limit,
        initial_source_connection_id: Some(*local_cid),
        max_datagram_frame_size: config.max_datagram_frame_size,
        initial_max_path_id: config.initial_max_path_id.map(PathId),
        ..TransportParameters::default()
    };
    if side.is_server() {
        tp.original_destination_connection_id = Some(*original_dcid);
        tp.retry_source_connection_id = retry_scid.copied();
        tp.stateless_reset_token = Some(reset_token);
    }
    tp
}

impl Connection {
    /// Moves handshake bytes out of TLS into the CRYPTO streams and installs new keys, then
    /// checks what the handshake has produced so far.
    pub(super) fn drive_tls(&mut self, now: Instant) -> Result<(), TransportError> {
        loop {
            let level = self.tls.write_level();
            let mut buf = Vec::new();
            let change = self.tls.write_handshake(&mut buf);
            let wrote = !buf.is_empty();
            if wrote {
                let stream = match level {
                    Level::Initial => self.initial.as_mut().map(|h| &mut h.crypto),
                    Level::Handshake => self.handshake.as_mut().map(|h| &mut h.crypto),
                    Level::OneRtt => Some(&mut self.crypto_1rtt),
                };
                if let Some(stream) = stream {
                    stream.write_bytes(Bytes::from(buf));
                }
            }
            match change {
                Some(KeyChange::Handshake(keys)) => {
                    if let Some(h) = self.handshake.as_mut() {
                        h.keys = Some(keys);
                    }
                    self.qlog_event(
                        now,
                        "key_updated",
                        json!({"key_type": "handshake", "trigger": "tls"}),
                    );
                }
                Some(KeyChange::OneRtt(keys)) => {
                    self.one_rtt = Some(*keys);
                    self.qlog_event(
                        now,
                        "key_updated",
                        json!({"key_type": "1rtt", "trigger": "tls"}),
                    );
                }
                None if !wrote => break,
                None => {}
            }
        }
        // A client resuming a session has the parameters remembered with its ticket until
        // the server's EncryptedExtensions replace them: it takes the server's only once
        // TLS has authenticated the whole handshake.
        let current = self.side.is_server() || !self.tls.is_handshaking();
        if self.peer_params.is_none()
            && current
            && let Some(raw) = self.tls.peer_transport_parameters()
        {
            let raw = raw.to_vec();
            self.on_peer_transport_parameters(now, &raw)?;
        }
        // A server that accepted the ClientHello's early data opens 0-RTT packets from here
        // until the client's first 1-RTT packet.
        if self.side.is_server()
            && self.tls.is_handshaking()
            && !self.early_data_accepted
            && let Some(keys) = self.tls.zero_rtt_keys()
        {
            //= https://www.rfc-editor.org/rfc/rfc9001#section-4.6.2
            //# A server accepts 0-RTT by sending an early_data extension in the
            //# EncryptedExtensions; see {{Section 4.2.10 of TLS13}}.  The server then
            //# processes and acknowledges the 0-RTT packets that it receives.
            self.zero_rtt = Some(keys);
            self.early_data_accepted = true;
            self.qlog_event(
                now,
                "key_updated",
                json!({"key_type": "server_0rtt_secret", "trigger": "tls"}),
            );
        }
        if !self.handshake_complete && !self.tls.is_handshaking() && self.one_rtt.is_some() {
            self.on_handshake_complete(now)?;
        }
        Ok(())
    }

    /// Client: when TLS offers early data (a ticket that allows it, and a configuration
    /// that enables it), takes the 0-RTT keys and the server's transport parameters
    /// remembered with the ticket, whose limits the early data honours.
    pub(super) fn start_zero_rtt(&mut self, now: Instant) -> Result<(), TransportError> {
        if !self.side.is_client() {
            return Ok(());
        }
        let Some(keys) = self.tls.zero_rtt_keys() else {
            return Ok(());
        };
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.4.1
        //# A client that attempts to send 0-RTT data MUST remember all other transport
        //# parameters used by the server that it is able to process.
        let Some(raw) = self.tls.peer_transport_parameters() else {
            return Ok(());
        };
        let remembered = TransportParameters::decode(self.side.peer(), raw)?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.4.1
        //# When sending frames in 0-RTT packets, a client MUST only use remembered
        //# transport parameters;
        self.streams
            .set_peer_limits(stream_limits_of(&remembered))?;
        self.remembered_params = Some(remembered);
        self.zero_rtt = Some(keys);
        self.qlog_event(
            now,
            "key_updated",
            json!({"key_type": "client_0rtt_secret", "trigger": "tls"}),
        );
        Ok(())
    }

    /// Client, at the end of a handshake that offered early data: drops the 0-RTT keys and
    /// learns whether the server accepted the early data. Accepted, the server's new
    /// transport parameters must not lower the remembered limits; rejected, everything
    /// the 0-RTT packets carried is sent again in 1-RTT packets.
    fn finish_zero_rtt(&mut self, now: Instant) -> Result<(), TransportError> {
        let Some(remembered) = self.remembered_params.take() else {
            return Ok(());
        };
        //= https://www.rfc-editor.org/rfc/rfc9001#section-4.9.3
        //# Therefore, a client SHOULD discard 0-RTT keys as soon as it installs 1-RTT
        //# keys as they have no use after that moment.
        self.zero_rtt = None;
        self.qlog_event(
            now,
            "key_discarded",
            json!({"key_type": "client_0rtt_secret"}),
        );
        self.early_data_accepted = self.tls.early_data_accepted() == Some(true);
        if self.early_data_accepted {
            let new = self.peer_params.as_ref().map(stream_limits_of);
            let old = stream_limits_of(&remembered);
            let new_cid_limit = self
                .peer_params
                .as_ref()
                .map_or(0, |p| p.active_connection_id_limit);
            //= https://www.rfc-editor.org/rfc/rfc9000#section-7.4.1
            //# If 0-RTT data is accepted by the server, the server MUST NOT reduce any
            //# limits or alter any values that might be violated by the client with its
            //# 0-RTT data.
            let reduced = new.is_none_or(|new| {
                new.max_data < old.max_data
                    || new.max_stream_data_bidi_local < old.max_stream_data_bidi_local
                    || new.max_stream_data_bidi_remote < old.max_stream_data_bidi_remote
                    || new.max_stream_data_uni < old.max_stream_data_uni
                    || new.max_streams_bidi < old.max_streams_bidi
                    || new.max_streams_uni < old.max_streams_uni
            }) || new_cid_limit < remembered.active_connection_id_limit;
            if reduced {
                return Err(TransportError::protocol_violation(
                    "the server accepted 0-RTT but lowered a remembered limit",
                ));
            }
            return Ok(());
        }
        //= https://www.rfc-editor.org/rfc/rfc9001#section-4.6.2
        //# A server rejects 0-RTT by sending the EncryptedExtensions without an early_data
        //# extension.
        //
        //= https://www.rfc-editor.org/rfc/rfc9001#section-4.6.2
        //# When rejecting 0-RTT, a server MUST NOT process any 0-RTT
        //# packets, even if it could.
        //
        // Every packet of the application data space so far was a 0-RTT packet (no 1-RTT
        // packet leaves before this point): none will be acknowledged, so their frames are
        // queued again as if lost, without a congestion signal, and leave in 1-RTT packets
        // at the same stream offsets (the server holds no state for those streams).
        let space = AckSpace::Path(PathId::ZERO);
        let sent = self
            .space_mut(space)
            .map(|s| s.recovery.discard())
            .unwrap_or_default();
        let bytes: u64 = sent
            .iter()
            .filter(|(_, p)| p.in_flight)
            .map(|(_, p)| u64::from(p.size))
            .sum();
        if let Some(path) = self.paths.get_mut(&PathId::ZERO) {
            path.bytes_in_flight = path.bytes_in_flight.saturating_sub(bytes);
        }
        for (_, packet) in &sent {
            self.requeue_frames(space, &packet.payload, Requeue::Lost);
        }
        Ok(())
    }

    /// Feeds received CRYPTO data of `level` to TLS.
    pub(super) fn on_crypto_frame(
        &mut self,
        now: Instant,
        level: Level,
        offset: u64,
        data: Bytes,
    ) -> Result<(), TransportError> {
        let stream = match level {
            Level::Initial => self.initial.as_mut().map(|h| &mut h.crypto),
            Level::Handshake => self.handshake.as_mut().map(|h| &mut h.crypto),
            Level::OneRtt => Some(&mut self.crypto_1rtt),
        };
        // CRYPTO data for a space whose keys are already discarded is a retransmission
        // the peer sent before learning we were done; it is ignored.
        let Some(stream) = stream else { return Ok(()) };
        stream.on_crypto(offset, data)?;
        let mut received = Vec::new();
        while let Some(chunk) = stream.read(usize::MAX) {
            received.push(chunk);
        }
        for chunk in received {
            self.tls.read_handshake(level, &chunk)?;
        }
        self.drive_tls(now)
    }

    fn on_peer_transport_parameters(
        &mut self,
        now: Instant,
        raw: &[u8],
    ) -> Result<(), TransportError> {
        let params = TransportParameters::decode(self.side.peer(), raw)?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.3
        //# An endpoint MUST treat the absence of the
        //# initial_source_connection_id transport parameter from either endpoint
        //# or the absence of the original_destination_connection_id transport
        //# parameter from the server as a connection error of type
        //# TRANSPORT_PARAMETER_ERROR.
        //
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.3
        //# An endpoint MUST treat the following as a connection error of type
        //# TRANSPORT_PARAMETER_ERROR or PROTOCOL_VIOLATION:
        //#
        //# *  absence of the retry_source_connection_id transport parameter from
        //#    the server after receiving a Retry packet,
        //#
        //# *  presence of the retry_source_connection_id transport parameter
        //#    when no Retry packet was received, or
        //#
        //# *  a mismatch between values received from a peer in these transport
        //#    parameters and the value sent in the corresponding Destination or
        //#    Source Connection ID fields of Initial packets.
        if params.initial_source_connection_id.is_none()
            || params.initial_source_connection_id != self.peer_initial_scid
        {
            return Err(TransportError::transport_parameter(
                "initial_source_connection_id missing or mismatched",
            ));
        }
        crate::version_negotiation::check_peer(
            self.side,
            self.initial_version,
            self.version,
            self.local_version_info.as_ref(),
            params.version_information.as_ref(),
        )?;
        if self.side.is_client() {
            if params.original_destination_connection_id != Some(self.original_dcid) {
                return Err(TransportError::transport_parameter(
                    "original_destination_connection_id missing or mismatched",
                ));
            }
            if params.retry_source_connection_id != self.retry_scid {
                return Err(TransportError::transport_parameter(
                    "retry_source_connection_id mismatch",
                ));
            }
            if let Some(token) = params.stateless_reset_token {
                self.peer_cids.set_handshake_reset_token(token);
            }
            if let Some(pa) = &params.preferred_address {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-5.1.1
                //# If the preferred_address transport parameter is
                //# sent, the sequence number of the supplied connection ID is 1.
                //
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.2
                //# A such, the path ID for
                //# the connection ID specified in the preferred_address transport parameter is 0.
                self.peer_cids.on_new_cid(
                    PathId::ZERO,
                    1,
                    0,
                    pa.connection_id,
                    pa.stateless_reset_token,
                )?;
            }
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-10.1
        //# Each endpoint advertises a max_idle_timeout, but the effective value
        //# at an endpoint is computed as the minimum of the two advertised
        //# values (or the sole advertised value, if only one endpoint advertises
        //# a non-zero value).
        let peer_idle =
            (params.max_idle_timeout > 0).then(|| Duration::from_millis(params.max_idle_timeout));
        self.idle_timeout = match (self.config.max_idle_timeout, peer_idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.reset_idle_timer(now);
        self.streams.set_peer_limits(stream_limits_of(&params))?;
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2
        //# If both endpoints advertise the initial_max_path_id transport parameter, once the handshake is completed
        //# a new AEAD usage applies to all 1-RTT packets, as specified in {{nonce}},
        //# and new paths can be used, as specified in {{path-management}}.
        if let (Some(local), Some(peer)) =
            (self.config.initial_max_path_id, params.initial_max_path_id)
        {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.1
            //# If an initial_max_path_id transport
            //# parameter is received and the carrying packet contains a zero-length
            //# connection ID, the receiver MUST treat this as a connection error of type
            //# PROTOCOL_VIOLATION and close the connection.
            if self.peer_initial_scid.is_some_and(|c| c.is_empty()) {
                return Err(TransportError::protocol_violation(
                    "initial_max_path_id with a zero-length connection ID",
                ));
            }
            self.multipath = Some(Multipath {
                peer_max_path_id: peer.0,
                local_max_path_id: local,
            });
        }
        let peer_mtu = u16::try_from(params.max_udp_payload_size).unwrap_or(u16::MAX);
        for path in self.paths.values_mut() {
            path.plan_mtu_discovery(self.config.max_mtu.min(peer_mtu));
        }
        self.qlog_parameters(now, "remote", &params);
        self.peer_params = Some(params);
        Ok(())
    }

    fn on_handshake_complete(&mut self, now: Instant) -> Result<(), TransportError> {
        if self.peer_params.is_none() {
            return Err(TransportError::transport_parameter(
                "peer sent no transport parameters",
            ));
        }
        self.handshake_complete = true;
        self.state = State::Established;
        self.finish_zero_rtt(now)?;
        self.stats.handshake_duration = Some(now.saturating_duration_since(self.created));
        self.events.push_back(Event::Connected);
        self.qlog_event(
            now,
            "connection_state_updated",
            json!({"new": "handshake_complete"}),
        );
        if self.side.is_server() {
            //= https://www.rfc-editor.org/rfc/rfc9001#section-4.1.2
            //# the TLS handshake is considered confirmed at the
            //# server when the handshake completes.
            //
            //= https://www.rfc-editor.org/rfc/rfc9001#section-4.1.2
            //# The server MUST send a HANDSHAKE_DONE
            //# frame as soon as the handshake is complete.
            self.pending.handshake_done = true;
            self.on_handshake_confirmed(now);
        }
        self.issue_connection_ids();
        Ok(())
    }

    pub(super) fn on_handshake_confirmed(&mut self, now: Instant) {
        if self.handshake_confirmed {
            return;
        }
        self.handshake_confirmed = true;
        self.pm_tick_due = true;
        //= https://www.rfc-editor.org/rfc/rfc9001#section-4.9.2
        //# An endpoint MUST discard its Handshake keys when the TLS handshake is
        //# confirmed (Section 4.1.2).
        self.discard_space(now, AckSpace::Initial);
        self.discard_space(now, AckSpace::Handshake);
        self.events.push_back(Event::HandshakeConfirmed);
        self.qlog_event(
            now,
            "connection_state_updated",
            json!({"new": "handshake_confirmed"}),
        );
        // From here on the qlog is buffered (see `QlogStream`).
        if let Some(q) = self.qlog.as_mut() {
            q.set_eager(false);
        }
        self.issue_connection_ids();
        self.probe_preferred_address(now);
    }

    /// Drops the keys and state of the Initial or Handshake space.
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.4
    //# When Initial and Handshake packet protection keys are discarded
    //# (see Section 4.9 of [QUIC-TLS]), all packets that were sent with those keys
    //# can no longer be acknowledged because their acknowledgments cannot be processed.
    //# The sender MUST discard all recovery state associated with those packets
    //# and MUST remove them from the count of bytes in flight.
    //
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.2
    //# When Initial or Handshake keys are discarded, the PTO and loss
    //# detection timers MUST be reset
    pub(super) fn discard_space(&mut self, now: Instant, space: AckSpace) {
        let removed = match space {
            AckSpace::Initial => self.initial.take(),
            AckSpace::Handshake => self.handshake.take(),
            AckSpace::Path(_) => None,
        };
        let Some(mut removed) = removed else { return };
        let bytes: u64 = removed
            .space
            .recovery
            .discard()
            .iter()
            .filter(|(_, p)| p.in_flight)
            .map(|(_, p)| u64::from(p.size))
            .sum();
        if let Some(path) = self.paths.get_mut(&PathId::ZERO) {
            path.bytes_in_flight = path.bytes_in_flight.saturating_sub(bytes);
            path.pto_count = 0;
        }
        let key_type = if space == AckSpace::Initial {
            "initial"
        } else {
            "handshake"
        };
        self.qlog_event(now, "key_discarded", json!({ "key_type": key_type }));
    }

    /// Issues connection IDs so the peer can rotate and, with multipath, open paths.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-5.1.1
    //# An endpoint SHOULD ensure that its peer has a sufficient number of
    //# available and unused connection IDs.
    pub(super) fn issue_connection_ids(&mut self) {
        let Some(peer) = self.peer_params.as_ref() else {
            return;
        };
        let limit = peer.active_connection_id_limit.clamp(2, 8) as usize;
        let mut path_ids = vec![PathId::ZERO];
        if let Some(mp) = self.multipath
            && self.handshake_confirmed
        {
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2.1
            //# In order to let the peer open new paths, it is RECOMMENDED to proactively
            //# issue at least one Connection ID for each unused path ID up to the
            //# minimum of the peer's and the local maximum path ID limits.
            let max = mp.peer_max_path_id.min(mp.local_max_path_id);
            path_ids.extend(
                (1..=max)
                    .map(PathId)
                    .filter(|id| !self.retired_paths.contains(id))
                    .take(MAX_PROACTIVE_PATHS),
            );
        }
        for path_id in path_ids {
            let want = if path_id == PathId::ZERO {
                limit
            } else {
                limit.min(2)
            };
            while self.local_cids.active_count(path_id) < want {
                let cid = ConnectionId::random(&mut self.rng, self.local_cid_len);
                let token = self.reset_key.token(&cid);
                let issued = self.local_cids.issue(path_id, cid, token);
                self.pending.new_cids.insert((path_id, issued.sequence));
                self.endpoint_events
                    .push_back(EndpointEvent::NewLocalCid(cid));
            }
        }
    }
}

/// The stream limits a peer's transport parameters give.
fn stream_limits_of(params: &TransportParameters) -> StreamLimits {
    StreamLimits {
        max_data: params.initial_max_data,
        max_stream_data_bidi_local: params.initial_max_stream_data_bidi_local,
        max_stream_data_bidi_remote: params.initial_max_stream_data_bidi_remote,
        max_stream_data_uni: params.initial_max_stream_data_uni,
        max_streams_bidi: params.initial_max_streams_bidi,
        max_streams_uni: params.initial_max_streams_uni,
    }
}

/// Path IDs not yet retired for which connection IDs are issued ahead of use (bounding the
/// state a peer with a huge initial_max_path_id can make us keep).
const MAX_PROACTIVE_PATHS: usize = 8;
