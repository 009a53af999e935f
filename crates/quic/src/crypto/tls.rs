//! The TLS 1.3 handshake carried in CRYPTO frames (RFC 9001 section 4).

use super::config::ConfigError;
use super::key_update::OneRttKeys;
use super::simulated::PacketProtection;
use super::switched::{SecretLog, Stage, SwitchedSchedule};
use crate::error::{TransportError, TransportErrorCode};
use crate::shared::Side;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::quic::{self, Keys, Version};
use rustls::{AlertDescription, ClientConfig, ServerConfig, SupportedCipherSuite};
use std::collections::VecDeque;
use std::sync::Arc;

/// An encryption level that carries CRYPTO frames. (0-RTT never carries CRYPTO frames: its
/// keys come from [`TlsSession::zero_rtt_keys`].)
//= https://www.rfc-editor.org/rfc/rfc9001#section-4.1.3
//# CRYPTO frames are carried in just three of these levels,
//# omitting the 0-RTT level.
#[derive(Debug, Copy, Clone, Eq, PartialEq, Ord, PartialOrd, Hash)]
pub enum Level {
    /// Initial packets, protected with [`super::initial_keys`].
    Initial,
    /// Handshake packets.
    Handshake,
    /// 1-RTT (short header) packets.
    OneRtt,
}

/// New packet protection keys produced by the handshake.
pub enum KeyChange {
    /// Keys for the Handshake encryption level.
    Handshake(Keys),
    /// 1-RTT keys, with the secrets for key updates.
    ///
    /// A server receives these before the handshake completes; it may send with them but
    /// must not process 1-RTT packets until [`TlsSession::is_handshaking`] turns false.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-5.7
    //# A server MUST NOT process incoming 1-RTT protected
    //# packets before the TLS handshake is complete.
    OneRtt(Box<OneRttKeys>),
}

impl std::fmt::Debug for KeyChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyChange::Handshake(_) => f.write_str("KeyChange::Handshake"),
            KeyChange::OneRtt(_) => f.write_str("KeyChange::OneRtt"),
        }
    }
}

/// The TLS side of one QUIC connection (version 1 or 2).
///
/// Usage: after creating the session and after every [`TlsSession::read_handshake`], call
/// [`TlsSession::write_handshake`] in a loop until it returns `None` with nothing appended.
/// Bytes appended by a call belong to the level [`TlsSession::write_level`] reported
/// *before* that call; a returned [`KeyChange`] takes effect for the following calls.
/// Received CRYPTO data is delivered in order, one level at a time, and only at
/// [`TlsSession::read_level`]: the connection buffers data that arrives for a later level
/// and delivers it once the read level gets there.
pub struct TlsSession {
    conn: quic::Connection,
    side: Side,
    /// For a client, the name it asked for.
    requested_server_name: Option<String>,
    /// Whether TLS has produced Handshake keys (the read level is then Handshake).
    handshake_keys_produced: bool,
    /// The level of the next bytes TLS produces (after everything in `pending`).
    produced_level: Level,
    /// Output taken from TLS but not yet handed to the caller.
    pending: VecDeque<Pending>,
    /// Boundaries of TLS handshake messages in the data received at the read level.
    framing: MessageFraming,
    /// How the Handshake and 1-RTT keys handed out protect packets.
    protection: PacketProtection,
    /// The QUIC version TLS was created for (it selects the key derivation labels).
    version: u32,
    /// Client that may be switched to another version: the secrets TLS logged.
    secret_log: Option<Arc<SecretLog>>,
    /// Client: the version the server switched the connection to, if not `version`.
    switched_to: Option<u32>,
}

/// The rustls key schedule of QUIC `version`, or an error for versions not spoken here.
fn quic_tls_version(version: u32) -> Result<Version, ConfigError> {
    super::tls_version(version).ok_or_else(|| {
        ConfigError::Tls(rustls::Error::General(format!(
            "unsupported QUIC version {version:#010x}"
        )))
    })
}

/// A chunk of TLS output: bytes at one level, then possibly new keys.
struct Pending {
    level: Level,
    bytes: Vec<u8>,
    change: Option<quic::KeyChange>,
}

/// Follows the framing of TLS handshake messages (1-byte type, 3-byte length, body) so that
/// received data can be handed to TLS one message at a time.
#[derive(Default)]
struct MessageFraming {
    header: [u8; 4],
    header_len: usize,
    body_remaining: usize,
}

impl MessageFraming {
    /// How many leading bytes of `data` belong to the current message, and whether they
    /// complete it.
    fn split(&mut self, data: &[u8]) -> (usize, bool) {
        let mut taken = 0;
        while self.header_len < self.header.len() {
            let Some(&byte) = data.get(taken) else {
                return (taken, false);
            };
            self.header[self.header_len] = byte;
            self.header_len += 1;
            taken += 1;
        }
        if taken > 0 {
            let [_, a, b, c] = self.header;
            self.body_remaining = u32::from_be_bytes([0, a, b, c]) as usize;
        }
        let body = (data.len() - taken).min(self.body_remaining);
        self.body_remaining -= body;
        taken += body;
        if self.body_remaining == 0 {
            self.header_len = 0;
            (taken, true)
        } else {
            (taken, false)
        }
    }
}

impl std::fmt::Debug for TlsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSession")
            .field("side", &self.side)
            .field("read_level", &self.read_level())
            .field("write_level", &self.write_level())
            .field("handshaking", &self.is_handshaking())
            .finish()
    }
}

impl TlsSession {
    fn new(
        conn: quic::Connection,
        side: Side,
        requested_server_name: Option<String>,
        version: u32,
    ) -> Self {
        TlsSession {
            version,
            secret_log: None,
            switched_to: None,
            conn,
            side,
            requested_server_name,
            handshake_keys_produced: false,
            produced_level: Level::Initial,
            pending: VecDeque::new(),
            framing: MessageFraming::default(),
            protection: PacketProtection::Aead,
        }
    }

    /// Protects the packets of the Handshake and 1-RTT keys handed out from now on with
    /// `protection` ([`PacketProtection::Aead`] unless set).
    pub fn set_packet_protection(&mut self, protection: PacketProtection) {
        self.protection = protection;
    }

    /// Starts a QUIC version 1 client handshake with `server_name` (a DNS name or an IP
    /// address), sending the encoded `transport_parameters` in the
    /// quic_transport_parameters extension.
    pub fn client(
        config: Arc<ClientConfig>,
        server_name: &str,
        transport_parameters: Vec<u8>,
    ) -> Result<Self, ConfigError> {
        Self::client_for_version(
            config,
            server_name,
            transport_parameters,
            crate::packet::VERSION_1,
            false,
        )
    }

    /// As [`TlsSession::client`], for a connection that starts in `version`. With
    /// `may_switch`, the server may switch it to another compatible version during the
    /// handshake ([`TlsSession::switch_version`]); the session then keeps the TLS secrets
    /// to derive that version's keys.
    pub fn client_for_version(
        config: Arc<ClientConfig>,
        server_name: &str,
        transport_parameters: Vec<u8>,
        version: u32,
        may_switch: bool,
    ) -> Result<Self, ConfigError> {
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|_| ConfigError::InvalidServerName(server_name.to_owned()))?;
        let tls_version = quic_tls_version(version)?;
        let (config, secret_log) = if may_switch {
            let log = Arc::new(SecretLog::new(config.key_log.clone()));
            let mut own = (*config).clone();
            own.key_log = log.clone();
            (Arc::new(own), Some(log))
        } else {
            (config, None)
        };
        let conn = quic::ClientConnection::new(config, tls_version, name, transport_parameters)?;
        let mut session = Self::new(
            conn.into(),
            Side::Client,
            Some(server_name.to_owned()),
            version,
        );
        session.secret_log = secret_log;
        Ok(session)
    }

    /// Prepares a QUIC version 1 server handshake that will send the encoded
    /// `transport_parameters`.
    pub fn server(
        config: Arc<ServerConfig>,
        transport_parameters: Vec<u8>,
    ) -> Result<Self, ConfigError> {
        Self::server_for_version(config, transport_parameters, crate::packet::VERSION_1)
    }

    /// As [`TlsSession::server`], for a connection in `version` (the server chooses the
    /// version before it creates the session).
    pub fn server_for_version(
        config: Arc<ServerConfig>,
        transport_parameters: Vec<u8>,
        version: u32,
    ) -> Result<Self, ConfigError> {
        let tls_version = quic_tls_version(version)?;
        let conn = quic::ServerConnection::new(config, tls_version, transport_parameters)?;
        Ok(Self::new(conn.into(), Side::Server, None, version))
    }

    /// Client: the server switched the connection to `version` (compatible version
    /// negotiation). The Handshake and 1-RTT keys handed out from now on are that
    /// version's. False, and nothing changes, if the session was not created to allow a
    /// switch or its Handshake keys were already handed out.
    pub fn switch_version(&mut self, version: u32) -> bool {
        if self.secret_log.is_none()
            || self.handshake_keys_produced
            || super::tls_version(version).is_none()
        {
            return false;
        }
        self.switched_to = (version != self.version).then_some(version);
        true
    }

    /// The key schedule of a switched client, once the cipher suite is known.
    fn switched_schedule(&self) -> Option<SwitchedSchedule> {
        let version = self.switched_to?;
        let log = self.secret_log.clone()?;
        let rustls::SupportedCipherSuite::Tls13(suite) = self.conn.negotiated_cipher_suite()?
        else {
            return None;
        };
        Some(SwitchedSchedule::new(suite, version, log))
    }

    /// Which side of the connection this session is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The level at which TLS currently expects CRYPTO data from the peer.
    pub fn read_level(&self) -> Level {
        if !self.conn.is_handshaking() {
            Level::OneRtt
        } else if self.handshake_keys_produced {
            Level::Handshake
        } else {
            Level::Initial
        }
    }

    /// The level that bytes produced by the next [`TlsSession::write_handshake`] belong to.
    pub fn write_level(&self) -> Level {
        self.pending
            .front()
            .map_or(self.produced_level, |pending| pending.level)
    }

    /// Moves everything TLS wants to send into `pending`, tracking levels.
    fn drain_tls(&mut self) {
        loop {
            let mut bytes = Vec::new();
            let change = self.conn.write_hs(&mut bytes);
            if bytes.is_empty() && change.is_none() {
                return;
            }
            let level = self.produced_level;
            match &change {
                Some(quic::KeyChange::Handshake { .. }) => {
                    self.handshake_keys_produced = true;
                    self.produced_level = Level::Handshake;
                }
                Some(quic::KeyChange::OneRtt { .. }) => self.produced_level = Level::OneRtt,
                None => {}
            }
            match self.pending.back_mut() {
                Some(last) if last.level == level && last.change.is_none() => {
                    last.bytes.extend_from_slice(&bytes);
                    last.change = change;
                }
                _ => self.pending.push_back(Pending {
                    level,
                    bytes,
                    change,
                }),
            }
        }
    }

    /// Delivers in-order CRYPTO data received at `level`.
    ///
    /// Fails with `PROTOCOL_VIOLATION` if `level` is not [`TlsSession::read_level`] or if the
    /// data continues past the message after which TLS moved to a higher level, and with
    /// `CRYPTO_ERROR` (0x100 + TLS alert) if TLS rejects the data; the connection then
    /// closes with that error.
    pub fn read_handshake(&mut self, level: Level, data: &[u8]) -> Result<(), TransportError> {
        let expected = self.read_level();
        if level != expected {
            return Err(TransportError::protocol_violation(format!(
                "CRYPTO data at level {level:?} while TLS reads at {expected:?}"
            )));
        }
        let mut rest = data;
        while !rest.is_empty() {
            let (take, complete) = self.framing.split(rest);
            let (message, tail) = rest.split_at(take);
            self.conn
                .read_hs(message)
                .map_err(|err| self.tls_error(err))?;
            rest = tail;
            if complete {
                self.drain_tls();
                //= https://www.rfc-editor.org/rfc/rfc9001#section-4.1.3
                //# When TLS provides keys for a higher encryption level,
                //# if there is data from a previous encryption level that TLS has not consumed,
                //# this MUST be treated as a connection error of type PROTOCOL_VIOLATION.
                if !rest.is_empty() && self.read_level() != level {
                    return Err(TransportError::protocol_violation(format!(
                        "CRYPTO data at level {level:?} continues after TLS moved to {:?}",
                        self.read_level()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Maps a TLS failure to the QUIC error to close with.
    fn tls_error(&self, err: rustls::Error) -> TransportError {
        //= https://www.rfc-editor.org/rfc/rfc9001#section-4.8
        //# A TLS alert is converted into a QUIC connection error.  The AlertDescription
        //# value is
        //# added to 0x0100 to produce a QUIC error code from the range reserved for
        //# CRYPTO_ERROR; see {{Section 20.1 of QUIC-TRANSPORT}}.
        //= https://www.rfc-editor.org/rfc/rfc9001#section-4.8
        //# For TLS alerts, this includes replacing any
        //# alert with a generic alert, such as handshake_failure (0x0128 in QUIC).
        let alert = self
            .conn
            .alert()
            .unwrap_or(AlertDescription::HandshakeFailure);
        TransportError::new(
            TransportErrorCode::crypto(u8::from(alert)),
            format!("TLS: {err}"),
        )
    }

    /// Appends handshake bytes to send at [`TlsSession::write_level`] to `buf`, and returns
    /// new keys when TLS moves to the next level.
    pub fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<KeyChange> {
        self.drain_tls();
        let pending = self.pending.pop_front()?;
        buf.extend_from_slice(&pending.bytes);
        let change = pending.change?;
        if let Some(schedule) = self.switched_schedule() {
            // The version rustls was created for is not the connection's: its keys are
            // replaced by the negotiated version's, from the same secrets.
            let stage = match change {
                quic::KeyChange::Handshake { .. } => Stage::Handshake,
                quic::KeyChange::OneRtt { .. } => Stage::OneRtt,
            };
            let (keys, secrets) = schedule
                .client_keys(stage)
                .expect("TLS logs its secrets before it hands out their keys");
            return Some(match stage {
                Stage::Handshake => KeyChange::Handshake(self.protection.keys(keys)),
                Stage::OneRtt => {
                    let next = super::UpdateSecrets::Switched(secrets);
                    KeyChange::OneRtt(Box::new(OneRttKeys::with_protection(
                        keys,
                        next,
                        self.protection,
                    )))
                }
            });
        }
        Some(match change {
            quic::KeyChange::Handshake { keys } => KeyChange::Handshake(self.protection.keys(keys)),
            quic::KeyChange::OneRtt { keys, next } => KeyChange::OneRtt(Box::new(
                OneRttKeys::with_protection(keys, next, self.protection),
            )),
        })
    }

    /// True until TLS has both sent its Finished and verified the peer's.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-4.1.1
    //# In this document, the TLS handshake is considered complete when the TLS stack
    //# has reported that the handshake is complete.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// The peer's encoded transport parameters, once received. They are authenticated
    /// only when the handshake completes.
    pub fn peer_transport_parameters(&self) -> Option<&[u8]> {
        self.conn.quic_transport_parameters()
    }

    /// The negotiated ALPN protocol. The configs from [`super::client_config`] and
    /// [`super::server_config`] fail the handshake with no_application_protocol (0x178) when
    /// ALPN is configured and no protocol matches.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-8.1
    //# When using ALPN, endpoints MUST immediately close a connection (see
    //# {{Section 10.2 of QUIC-TRANSPORT}}) with a no_application_protocol TLS alert
    //# (QUIC error code 0x0178; see {{tls-errors}}) if an application protocol is not
    //# negotiated.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// The certificate chain the peer presented, end-entity first.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.conn.peer_certificates()
    }

    /// For a client, the server name it connected to; for a server, the name the client
    /// sent in SNI (if any, once the ClientHello has been processed).
    pub fn server_name(&self) -> Option<&str> {
        match &self.conn {
            quic::Connection::Client(_) => self.requested_server_name.as_deref(),
            quic::Connection::Server(conn) => conn.server_name(),
        }
    }

    /// Whether the handshake resumed an earlier session (a PSK from a session ticket, RFC
    /// 8446 section 2.2) instead of authenticating with a certificate; `None` until known.
    pub fn resumed(&self) -> Option<bool> {
        self.conn
            .handshake_kind()
            .map(|k| k == rustls::HandshakeKind::Resumed)
    }

    /// The 0-RTT packet protection keys (RFC 9001 section 4.6), protected as the other keys
    /// ([`TlsSession::set_packet_protection`]): for a client, from the start when it
    /// resumes with a ticket that allows early data and its configuration enables it (the
    /// client seals with them); for a server, once it has read a ClientHello whose early
    /// data it accepts (the server opens with them). `None` otherwise.
    pub fn zero_rtt_keys(&self) -> Option<rustls::quic::DirectionalKeys> {
        self.conn
            .zero_rtt_keys()
            .map(|k| self.protection.directional_keys(k))
    }

    /// For a client: whether the server accepted its early data (known once the handshake
    /// completes); `None` for a server.
    pub fn early_data_accepted(&self) -> Option<bool> {
        match &self.conn {
            quic::Connection::Client(c) => Some(c.is_early_data_accepted()),
            quic::Connection::Server(_) => None,
        }
    }

    /// The negotiated cipher suite, once known.
    pub fn cipher_suite(&self) -> Option<SupportedCipherSuite> {
        self.conn.negotiated_cipher_suite()
    }

    /// Fills `output` with keying material exported from the handshake (RFC 5705 / RFC 8446
    /// section 7.5). Fails before the handshake completes.
    pub fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: Option<&[u8]>,
    ) -> Result<(), rustls::Error> {
        self.conn
            .export_keying_material(output, label, context)
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{alpn, configs, handshake, handshake_chunked, handshake_err};
    use super::*;
    use crate::shared::PathId;

    #[test]
    fn handshake_delivers_alpn_parameters_and_matching_keys() {
        let (client_cfg, server_cfg) = configs(alpn(&["polypath"]), alpn(&["h3", "polypath"]));
        let mut client =
            TlsSession::client(client_cfg, "localhost", b"client-tp".to_vec()).unwrap();
        let mut server = TlsSession::server(server_cfg, b"server-tp".to_vec()).unwrap();
        assert_eq!(client.side(), Side::Client);
        assert_eq!(server.side(), Side::Server);
        let out = handshake(&mut client, &mut server).unwrap();

        assert!(!client.is_handshaking() && !server.is_handshaking());
        assert_eq!(client.read_level(), Level::OneRtt);
        assert_eq!(server.write_level(), Level::OneRtt);
        assert_eq!(client.alpn_protocol(), Some(&b"polypath"[..]));
        assert_eq!(server.alpn_protocol(), Some(&b"polypath"[..]));
        assert_eq!(client.peer_transport_parameters(), Some(&b"server-tp"[..]));
        assert_eq!(server.peer_transport_parameters(), Some(&b"client-tp"[..]));
        assert_eq!(client.server_name(), Some("localhost"));
        assert_eq!(server.server_name(), Some("localhost"));
        assert_eq!(client.peer_certificates().map(|c| c.len()), Some(1));
        assert!(server.peer_certificates().is_none());
        assert_eq!(
            client.cipher_suite().map(|s| s.suite()),
            server.cipher_suite().map(|s| s.suite())
        );

        // CRYPTO data went out at the expected levels.
        assert_eq!(out.client_levels, vec![Level::Initial, Level::Handshake]);
        assert_eq!(out.server_levels, vec![Level::Initial, Level::Handshake]);

        // Handshake keys match in both directions.
        let (ck, sk) = (out.client_handshake, out.server_handshake);
        for (tx, rx) in [(&ck, &sk), (&sk, &ck)] {
            let mut pkt = b"\xe0handshake".to_vec();
            pkt.resize(pkt.len() + 16, 0);
            crate::crypto::seal_packet(&*tx.local.packet, None, 3, &mut pkt, 1).unwrap();
            assert_eq!(
                crate::crypto::open_packet(&*rx.remote.packet, None, 3, &mut pkt, 1),
                Ok(9)
            );
            assert_eq!(&pkt[1..10], b"handshake");
        }

        // 1-RTT keys match in both directions, with and without a path ID.
        let (mut c1, mut s1) = (out.client_one_rtt, out.server_one_rtt);
        let now = std::time::Instant::now();
        for path in [None, Some(PathId(0)), Some(PathId(5))] {
            let mut pkt = vec![0x40, 0xaa, 0x01, 0x02, 0x03, 0x04, 0x05];
            pkt.resize(pkt.len() + 16, 0);
            c1.seal(path, 1, &mut pkt, 2).unwrap();
            let opened = s1.open(now, path, 1, &mut pkt, 2).unwrap();
            assert_eq!(opened.payload_len, 5);
            let mut pkt = vec![0x40, 0xbb, 0x09, 0x08, 0x07, 0x06];
            pkt.resize(pkt.len() + 16, 0);
            s1.seal(path, 1, &mut pkt, 2).unwrap();
            assert_eq!(c1.open(now, path, 1, &mut pkt, 2).unwrap().payload_len, 4);
        }

        // Exported keying material agrees.
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        client
            .export_keying_material(&mut a, b"EXPORTER-test", None)
            .unwrap();
        server
            .export_keying_material(&mut b, b"EXPORTER-test", None)
            .unwrap();
        assert_eq!(a, b);
        assert_ne!(a, [0; 32]);
    }

    #[test]
    fn alpn_mismatch_fails_with_no_application_protocol() {
        let (client_cfg, server_cfg) = configs(alpn(&["other"]), alpn(&["polypath"]));
        let err = handshake_err(client_cfg, server_cfg);
        assert_eq!(err.code, TransportErrorCode(0x178));
    }

    #[test]
    fn client_without_alpn_is_refused_by_server_with_alpn() {
        let (client_cfg, server_cfg) = configs(Vec::new(), alpn(&["polypath"]));
        let err = handshake_err(client_cfg, server_cfg);
        assert_eq!(err.code, TransportErrorCode(0x178));
    }

    #[test]
    fn wrong_level_is_a_protocol_violation() {
        let (client_cfg, server_cfg) = configs(alpn(&["x"]), alpn(&["x"]));
        let mut client = TlsSession::client(client_cfg, "localhost", vec![]).unwrap();
        let mut server = TlsSession::server(server_cfg, vec![]).unwrap();
        let mut hello = Vec::new();
        assert!(client.write_handshake(&mut hello).is_none());
        let err = server.read_handshake(Level::Handshake, &hello).unwrap_err();
        assert_eq!(err.code, TransportErrorCode::PROTOCOL_VIOLATION);
        server.read_handshake(Level::Initial, &hello).unwrap();
    }

    #[test]
    fn byte_by_byte_delivery_works() {
        let (client_cfg, server_cfg) = configs(alpn(&["x"]), alpn(&["x"]));
        let mut client = TlsSession::client(client_cfg, "localhost", vec![1; 50]).unwrap();
        let mut server = TlsSession::server(server_cfg, vec![2; 50]).unwrap();
        let out = handshake_chunked(&mut client, &mut server, 1).unwrap();
        assert_eq!(out.client_levels, vec![Level::Initial, Level::Handshake]);
        assert!(!client.is_handshaking() && !server.is_handshaking());
        assert_eq!(client.peer_transport_parameters(), Some(&[2u8; 50][..]));
    }

    #[test]
    fn messages_spanning_levels_are_a_protocol_violation() {
        let (client_cfg, server_cfg) = configs(alpn(&["x"]), alpn(&["x"]));
        let mut client = TlsSession::client(client_cfg, "localhost", vec![]).unwrap();
        let mut server = TlsSession::server(server_cfg, vec![]).unwrap();
        let mut hello = Vec::new();
        assert!(client.write_handshake(&mut hello).is_none());
        server.read_handshake(Level::Initial, &hello).unwrap();
        assert_eq!(server.read_level(), Level::Handshake);
        assert_eq!(server.write_level(), Level::Initial);
        let mut initial = Vec::new();
        let change = server.write_handshake(&mut initial);
        assert!(matches!(change, Some(KeyChange::Handshake(_))));
        assert_eq!(server.write_level(), Level::Handshake);
        let mut handshake = Vec::new();
        let change = server.write_handshake(&mut handshake);
        assert!(matches!(change, Some(KeyChange::OneRtt(_))));
        assert_eq!(server.write_level(), Level::OneRtt);
        // The server's EncryptedExtensions..Finished sent as if they were Initial data.
        initial.extend_from_slice(&handshake);
        let err = client.read_handshake(Level::Initial, &initial).unwrap_err();
        assert_eq!(err.code, TransportErrorCode::PROTOCOL_VIOLATION);
    }

    #[test]
    fn message_framing_tracks_boundaries() {
        let mut framing = MessageFraming::default();
        // Two messages (bodies of 2 and 0 bytes) and the start of a third.
        let data = [1, 0, 0, 2, 9, 9, 2, 0, 0, 0, 3, 0];
        assert_eq!(framing.split(&data), (6, true));
        assert_eq!(framing.split(&data[6..]), (4, true));
        assert_eq!(framing.split(&data[10..]), (2, false));
        assert_eq!(framing.split(&[0, 5]), (2, false));
        assert_eq!(framing.split(&[1, 2, 3, 4, 5, 6]), (5, true));
        assert_eq!(framing.split(&[]), (0, false));
    }

    #[test]
    fn garbage_is_a_crypto_error() {
        let (_, server_cfg) = configs(alpn(&["x"]), alpn(&["x"]));
        let mut server = TlsSession::server(server_cfg, vec![]).unwrap();
        // A handshake message of type 0xff with length 4: unexpected message.
        let err = server
            .read_handshake(Level::Initial, &[0xff, 0, 0, 4, 1, 2, 3, 4])
            .unwrap_err();
        assert!((0x100..0x200).contains(&err.code.0), "{err}");
    }

    #[test]
    fn invalid_server_name_is_an_error() {
        let (client_cfg, _) = configs(alpn(&["x"]), alpn(&["x"]));
        assert!(matches!(
            TlsSession::client(client_cfg, "not a name!", vec![]),
            Err(ConfigError::InvalidServerName(_))
        ));
    }

    #[test]
    fn pinned_certificate_must_match() {
        use crate::crypto::{ServerVerification, client_config, self_signed_certificate};
        let other = self_signed_certificate(&["localhost".into()]).unwrap();
        let (_, server_cfg) = configs(alpn(&["x"]), alpn(&["x"]));
        let client_cfg = client_config(
            alpn(&["x"]),
            ServerVerification::Pinned(other.chain[0].clone()),
            false,
        )
        .unwrap();
        let err = handshake_err(client_cfg, server_cfg);
        // unknown_ca (48)
        assert_eq!(err.code, TransportErrorCode::crypto(48));
    }
}
