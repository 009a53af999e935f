//! 1-RTT packet protection with key updates (RFC 9001 section 6) and AEAD usage limits
//! (RFC 9001 section 6.6), shared by all paths of a multipath connection.
//!
//! Design: the endpoint keeps the current send and receive keys, the *next* generation of
//! both (derived as soon as the current one is installed, so trying them costs the same as
//! any decryption), and after an update the *previous* receive key for a while. As allowed
//! by RFC 9001 section 6.5 and relied on by draft-ietf-quic-multipath-21 section 2.5, the
//! Key Phase bit alone selects the key: a packet whose phase differs from the current one is
//! opened with the previous key while that is retained, and with the next key otherwise.
//! This works with per-path packet number spaces, where packet numbers cannot order
//! packets across paths.

use super::CryptoError;
use super::protect::{open_packet, seal_packet};
use super::simulated::PacketProtection;
use super::switched::SwitchedSecrets;
use crate::shared::PathId;
use rustls::quic::{HeaderProtectionKey, Keys, PacketKey, PacketKeySet, Secrets};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The Key Phase bit of the short header's first byte.
const KEY_PHASE_BIT: u8 = 0x04;

/// Which key generation a received packet's Key Phase bit selects.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub enum KeyPhaseMatch {
    /// The current keys.
    Current,
    /// The keys before the last update (still retained for reordered packets).
    Previous,
    /// The next keys: a successful open means the peer initiated a key update.
    Next,
}

/// A successfully opened 1-RTT packet.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct Opened {
    /// Length of the plaintext payload, which starts right after the header.
    pub payload_len: usize,
    /// Which keys opened it. [`KeyPhaseMatch::Next`] means the peer updated keys and this
    /// object has followed, send keys included.
    pub keys: KeyPhaseMatch,
}

/// Where the keys of the following 1-RTT generations come from.
pub enum UpdateSecrets {
    /// rustls' secrets, for the QUIC version TLS was created for.
    Tls(Secrets),
    /// A client's own, after the server switched to another QUIC version during the
    /// handshake ([`SwitchedSecrets`]).
    Switched(SwitchedSecrets),
}

impl From<Secrets> for UpdateSecrets {
    fn from(secrets: Secrets) -> Self {
        UpdateSecrets::Tls(secrets)
    }
}

impl UpdateSecrets {
    /// The packet keys of the next generation, moving the secrets on by one update.
    fn next_packet_keys(&mut self) -> PacketKeySet {
        match self {
            UpdateSecrets::Tls(secrets) => secrets.next_packet_keys(),
            UpdateSecrets::Switched(secrets) => secrets
                .next_packet_keys()
                .expect("key update of a suite whose first keys were derived"),
        }
    }
}

/// The receive key of the previous key phase.
struct PreviousKey {
    key: Box<dyn PacketKey>,
    /// When a packet protected with the newer keys was first opened; the old key may be
    /// discarded three PTOs later.
    new_keys_confirmed_at: Option<Instant>,
}

/// Lowest and highest packet number opened with the current keys on one path.
#[derive(Copy, Clone)]
struct ReceivedRange {
    lowest: u64,
    highest: u64,
}

/// 1-RTT packet protection keys of one connection, with key update state.
///
/// Path arguments: `None` on a connection without multipath, `Some(path)` for every 1-RTT
/// packet once multipath is negotiated (path 0 included); see [`super::seal_packet`].
pub struct OneRttKeys {
    local_header: Box<dyn HeaderProtectionKey>,
    remote_header: Box<dyn HeaderProtectionKey>,
    local: Box<dyn PacketKey>,
    remote: Box<dyn PacketKey>,
    next: PacketKeySet,
    /// Secrets of the generation after `next`.
    secrets: UpdateSecrets,
    /// How every generation's keys protect packets.
    protection: PacketProtection,
    key_phase: bool,
    generation: u64,
    previous: Option<PreviousKey>,
    /// Lowest packet number sent with the current keys, per path.
    first_sent: BTreeMap<u32, u64>,
    /// Packet numbers opened with the current keys, per path.
    received: BTreeMap<u32, ReceivedRange>,
    /// When an acknowledgment of a packet sent with the current keys was first received.
    current_acked_at: Option<Instant>,
    sealed_with_current: u64,
    failed_decryptions: u64,
    confidentiality_limit: u64,
    integrity_limit: u64,
}

impl std::fmt::Debug for OneRttKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneRttKeys")
            .field("key_phase", &self.key_phase)
            .field("generation", &self.generation)
            .field("has_old_key", &self.previous.is_some())
            .field("sealed_with_current", &self.sealed_with_current)
            .field("failed_decryptions", &self.failed_decryptions)
            .finish_non_exhaustive()
    }
}

fn path_key(path: Option<PathId>) -> u32 {
    path.map_or(0, |p| p.0)
}

impl OneRttKeys {
    /// Builds the key state from the first 1-RTT keys and the secrets of the next
    /// generation, as rustls hands them out (`rustls::quic::KeyChange::OneRtt`).
    pub fn new(keys: Keys, next: Secrets) -> Self {
        Self::with_protection(keys, next, PacketProtection::Aead)
    }

    /// As [`OneRttKeys::new`], with every key generation protecting packets as
    /// `protection` says.
    pub fn with_protection(
        keys: Keys,
        next: impl Into<UpdateSecrets>,
        protection: PacketProtection,
    ) -> Self {
        let keys = protection.keys(keys);
        let mut secrets = next.into();
        //= https://www.rfc-editor.org/rfc/rfc9001#section-6.3
        //# Endpoints are generally expected to have current and next receive packet
        //# protection keys available.
        let next = protection.packet_keys(secrets.next_packet_keys());
        let confidentiality_limit = keys.local.packet.confidentiality_limit();
        let integrity_limit = keys.remote.packet.integrity_limit();
        OneRttKeys {
            local_header: keys.local.header,
            remote_header: keys.remote.header,
            local: keys.local.packet,
            remote: keys.remote.packet,
            next,
            secrets,
            protection,
            //= https://www.rfc-editor.org/rfc/rfc9001#section-6
            //# The Key Phase bit is initially set to 0 for the first set of 1-RTT
            //# packets and toggled to signal each subsequent key update.
            key_phase: false,
            generation: 0,
            previous: None,
            first_sent: BTreeMap::new(),
            received: BTreeMap::new(),
            current_acked_at: None,
            sealed_with_current: 0,
            failed_decryptions: 0,
            confidentiality_limit,
            integrity_limit,
        }
    }

    /// The current Key Phase bit.
    pub fn key_phase(&self) -> bool {
        self.key_phase
    }

    /// Number of key updates so far (0 for the keys from the handshake).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Header protection key for packets we send. It never changes with key updates.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-5.4
    //# The same header protection key is used for the duration of the connection, with
    //# the value not changing after a key update (see {{key-update}}).
    pub fn local_header(&self) -> &dyn HeaderProtectionKey {
        &*self.local_header
    }

    /// Header protection key for packets we receive.
    pub fn remote_header(&self) -> &dyn HeaderProtectionKey {
        &*self.remote_header
    }

    /// Length of the AEAD tag to reserve at the end of each packet.
    pub fn tag_len(&self) -> usize {
        self.local.tag_len()
    }

    /// Which keys a received short-header packet (header protection removed) selects.
    pub fn recognise(&self, first_byte: u8) -> KeyPhaseMatch {
        let phase = first_byte & KEY_PHASE_BIT != 0;
        if phase == self.key_phase {
            KeyPhaseMatch::Current
        } else if self.previous.is_some() {
            KeyPhaseMatch::Previous
        } else {
            KeyPhaseMatch::Next
        }
    }

    /// Seals a short-header packet with the current keys (layout as for
    /// [`super::seal_packet`]); sets the Key Phase bit of `packet[0]` first, as it is part
    /// of the authenticated header. Header protection is applied afterwards by the caller
    /// with [`OneRttKeys::local_header`].
    ///
    /// Fails with [`CryptoError::AeadLimit`] once the confidentiality limit of the current
    /// key is reached; [`OneRttKeys::update_wanted`] warns well before.
    pub fn seal(
        &mut self,
        path: Option<PathId>,
        packet_number: u64,
        packet: &mut [u8],
        header_len: usize,
    ) -> Result<(), CryptoError> {
        //= https://www.rfc-editor.org/rfc/rfc9001#section-6.6
        //# If the total number of encrypted packets with the same key exceeds the
        //# confidentiality limit for the selected AEAD, the endpoint MUST stop using those
        //# keys.
        if self.sealed_with_current >= self.confidentiality_limit {
            return Err(CryptoError::AeadLimit);
        }
        if header_len == 0 {
            return Err(CryptoError::ShortPacket);
        }
        let first = packet.first_mut().ok_or(CryptoError::ShortPacket)?;
        *first = if self.key_phase {
            *first | KEY_PHASE_BIT
        } else {
            *first & !KEY_PHASE_BIT
        };
        seal_packet(&*self.local, path, packet_number, packet, header_len)?;
        //= https://www.rfc-editor.org/rfc/rfc9001#section-6.6
        //# Endpoints MUST count the number of encrypted packets for each set of keys.
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-7.3
        //# The limits as discussed on {{Appendix B of QUIC-TLS}}
        //# apply to the total number of packets sent on all paths,
        //# not each path separately.
        self.sealed_with_current += 1;
        //= https://www.rfc-editor.org/rfc/rfc9001#section-6.1
        //# This can be implemented by tracking the lowest packet number sent with each key
        //# phase and the highest acknowledged packet number in the 1-RTT space: once the
        //# latter is higher than or equal to the former, another key update can be
        //# initiated.
        self.first_sent
            .entry(path_key(path))
            .and_modify(|pn| *pn = (*pn).min(packet_number))
            .or_insert(packet_number);
        Ok(())
    }

    /// Opens a short-header packet whose header protection was removed with
    /// [`OneRttKeys::remote_header`]; `packet_number` is the full reconstructed number.
    ///
    /// The Key Phase bit of `packet[0]` selects the keys ([`OneRttKeys::recognise`]). When
    /// the next keys open the packet, the peer has initiated a key update and this object
    /// switches to the new generation for sending and receiving.
    ///
    /// Errors: [`CryptoError::ShortPacket`] and [`CryptoError::Decrypt`] mean "drop the
    /// packet"; [`CryptoError::AeadLimit`] (integrity limit exceeded) and
    /// [`CryptoError::KeyUpdate`] mean "close the connection" (see
    /// [`CryptoError::transport_error`]).
    pub fn open(
        &mut self,
        now: Instant,
        path: Option<PathId>,
        packet_number: u64,
        packet: &mut [u8],
        header_len: usize,
    ) -> Result<Opened, CryptoError> {
        //= https://www.rfc-editor.org/rfc/rfc9001#section-6.6
        //# If the total number of received packets that fail authentication within the
        //# connection, across all keys, exceeds the integrity limit for the selected AEAD,
        //# the endpoint MUST immediately close the connection with a connection error of
        //# type AEAD_LIMIT_REACHED and not process any more packets.
        if self.failed_decryptions > self.integrity_limit {
            return Err(CryptoError::AeadLimit);
        }
        let first = *packet.first().ok_or(CryptoError::ShortPacket)?;
        if header_len == 0 || packet.len() < header_len.saturating_add(self.remote.tag_len()) {
            return Err(CryptoError::ShortPacket);
        }
        let keys = self.recognise(first);
        let key: &dyn PacketKey = match (keys, &self.previous) {
            (KeyPhaseMatch::Current, _) => &*self.remote,
            (KeyPhaseMatch::Previous, Some(previous)) => &*previous.key,
            //= https://www.rfc-editor.org/rfc/rfc9001#section-6.2
            //# To process this packet, the endpoint uses the next
            //# packet protection key and IV.
            (KeyPhaseMatch::Previous, None) | (KeyPhaseMatch::Next, _) => &*self.next.remote,
        };
        let payload_len = match open_packet(key, path, packet_number, packet, header_len) {
            Ok(len) => len,
            Err(err) => {
                //= https://www.rfc-editor.org/rfc/rfc9001#section-6.6
                //# In addition to counting packets sent, endpoints MUST count the number of
                //# received packets that fail authentication during the lifetime of a
                //# connection.
                self.failed_decryptions += 1;
                if self.failed_decryptions > self.integrity_limit {
                    return Err(CryptoError::AeadLimit);
                }
                return Err(err);
            }
        };
        let path = path_key(path);
        let range = self.received.get(&path).copied();
        match keys {
            KeyPhaseMatch::Current => {
                self.note_received(path, packet_number);
                //= https://www.rfc-editor.org/rfc/rfc9001#section-6.5
                //# An endpoint SHOULD retain old read keys for no more than three times the
                //# PTO after having received a packet protected using the new keys.
                if let Some(previous) = &mut self.previous {
                    previous.new_keys_confirmed_at.get_or_insert(now);
                }
            }
            KeyPhaseMatch::Previous => {
                //= https://www.rfc-editor.org/rfc/rfc9001#section-6.4
                //# An endpoint that successfully removes protection with old keys when newer
                //# keys were used for packets with lower packet numbers MUST treat this as a
                //# connection error of type KEY_UPDATE_ERROR.
                if range.is_some_and(|r| packet_number > r.lowest) {
                    return Err(CryptoError::KeyUpdate(
                        "packet protected with old keys after a lower-numbered packet with new keys",
                    ));
                }
            }
            KeyPhaseMatch::Next => {
                //= https://www.rfc-editor.org/rfc/rfc9001#section-6.4
                //# Packets with higher packet numbers MUST be protected with either the same
                //# or newer packet protection keys than packets with lower packet numbers.
                if range.is_some_and(|r| packet_number < r.highest) {
                    return Err(CryptoError::KeyUpdate(
                        "packet protected with new keys before a higher-numbered packet with old keys",
                    ));
                }
                //= https://www.rfc-editor.org/rfc/rfc9001#section-6.2
                //# If a packet is successfully processed using the next key and IV, then the
                //# peer has initiated a key update.  The endpoint MUST update its send keys
                //# to the corresponding key phase in response, as described in
                //# {{key-update-initiate}}.
                self.rotate(Some(now));
                self.note_received(path, packet_number);
            }
        }
        Ok(Opened { payload_len, keys })
    }

    fn note_received(&mut self, path: u32, packet_number: u64) {
        self.received
            .entry(path)
            .and_modify(|r| {
                r.lowest = r.lowest.min(packet_number);
                r.highest = r.highest.max(packet_number);
            })
            .or_insert(ReceivedRange {
                lowest: packet_number,
                highest: packet_number,
            });
    }

    /// Reports that the peer acknowledged 1-RTT packet `packet_number` on `path` (calling it
    /// with the largest acknowledged number of each ACK/PATH_ACK frame is enough).
    pub fn on_packet_acked(&mut self, now: Instant, path: Option<PathId>, packet_number: u64) {
        if self.current_acked_at.is_none()
            && self
                .first_sent
                .get(&path_key(path))
                .is_some_and(|&first| packet_number >= first)
        {
            self.current_acked_at = Some(now);
        }
    }

    /// Whether a locally initiated key update is allowed now: a packet sent with the current
    /// keys has been acknowledged, at least `three_pto` ago (three times the largest PTO of
    /// all paths; pass `Duration::ZERO` to skip that recommended wait).
    ///
    /// The caller must also only update once the handshake is confirmed.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-6.1
    //# An endpoint MUST NOT initiate a subsequent
    //# key update unless it has received an acknowledgment for a packet that was sent
    //# protected with keys from the current key phase.
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.5
    //# When this specification is used, endpoints SHOULD wait for at least three times
    //# the largest Probe Timeout (PTO) (see {{Section 6.2 of QUIC-RECOVERY}})
    //# among all the paths before initiating a new key update
    //# after receiving an acknowledgment that confirms the receipt of the previous key
    //# update.
    pub fn update_permitted(&self, now: Instant, three_pto: Duration) -> bool {
        self.current_acked_at
            .and_then(|at| at.checked_add(three_pto))
            .is_some_and(|allowed| now >= allowed)
    }

    /// Initiates a key update: new send and receive keys, flipped Key Phase bit. The old
    /// receive key is kept for reordered packets until [`OneRttKeys::discard_old_key`].
    ///
    /// Fails with [`CryptoError::KeyUpdateNotPermitted`] unless
    /// [`OneRttKeys::update_permitted`].
    //= https://www.rfc-editor.org/rfc/rfc9001#section-6.1
    //# An endpoint initiates a key update by updating its packet protection write secret
    //# and using that to protect new packets.
    pub fn initiate_update(
        &mut self,
        now: Instant,
        three_pto: Duration,
    ) -> Result<(), CryptoError> {
        if !self.update_permitted(now, three_pto) {
            return Err(CryptoError::KeyUpdateNotPermitted);
        }
        //= https://www.rfc-editor.org/rfc/rfc9001#section-6.1
        //# The endpoint that initiates a key update also updates the keys that it uses for
        //# receiving packets.
        //= https://www.rfc-editor.org/rfc/rfc9001#section-6.1
        //# An endpoint MUST retain old keys until it has successfully unprotected a packet
        //# sent using the new keys.
        self.rotate(None);
        Ok(())
    }

    /// Moves to the next key generation. `received_at` is set when the update was caused by
    /// a packet that the new keys opened.
    fn rotate(&mut self, received_at: Option<Instant>) {
        let following = self.protection.packet_keys(self.secrets.next_packet_keys());
        let next = std::mem::replace(&mut self.next, following);
        let old_remote = std::mem::replace(&mut self.remote, next.remote);
        self.local = next.local;
        self.previous = Some(PreviousKey {
            key: old_remote,
            new_keys_confirmed_at: received_at,
        });
        self.key_phase = !self.key_phase;
        self.generation += 1;
        self.first_sent.clear();
        self.received.clear();
        self.current_acked_at = None;
        self.sealed_with_current = 0;
    }

    /// True once the current send key has sealed enough packets that a key update should be
    /// initiated (7/8 of the AEAD confidentiality limit) as soon as it is permitted.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-6.6
    //# Endpoints MUST initiate a key update before sending more protected packets
    //# than the confidentiality limit for the selected AEAD permits.
    pub fn update_wanted(&self) -> bool {
        self.sealed_with_current >= self.confidentiality_limit - self.confidentiality_limit / 8
    }

    /// True while the previous generation's receive key is retained.
    pub fn has_old_key(&self) -> bool {
        self.previous.is_some()
    }

    /// When the previous receive key should be discarded: `three_pto` after the first packet
    /// opened with the newer keys. `None` if there is no old key or no such packet yet.
    pub fn old_key_deadline(&self, three_pto: Duration) -> Option<Instant> {
        self.old_key_confirmed_at()?.checked_add(three_pto)
    }

    /// When the first packet opened with the newer keys arrived, while the previous receive
    /// key is retained: the start of [`OneRttKeys::old_key_deadline`]'s wait.
    pub fn old_key_confirmed_at(&self) -> Option<Instant> {
        self.previous.as_ref()?.new_keys_confirmed_at
    }

    /// Discards the previous receive key if its deadline ([`OneRttKeys::old_key_deadline`])
    /// has passed; returns whether it did. Afterwards, packets with the other Key Phase
    /// value are tried with the next keys, so the peer may update again.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-6.5
    //# After this period,
    //# old read keys and their corresponding secrets SHOULD be discarded.
    pub fn discard_old_key(&mut self, now: Instant, three_pto: Duration) -> bool {
        if self.old_key_deadline(three_pto).is_some_and(|d| now >= d) {
            self.previous = None;
            true
        } else {
            false
        }
    }

    /// Packets sealed with the current send key.
    pub fn sealed_with_current_key(&self) -> u64 {
        self.sealed_with_current
    }

    /// 1-RTT packets that failed authentication over the connection's lifetime.
    pub fn failed_decryptions(&self) -> u64 {
        self.failed_decryptions
    }

    /// Lowers the AEAD confidentiality and integrity limits (values above the AEAD's own
    /// limits are ignored), e.g. to exercise key updates in tests or simulations.
    pub fn lower_aead_limits(&mut self, confidentiality: u64, integrity: u64) {
        self.confidentiality_limit = self.confidentiality_limit.min(confidentiality);
        self.integrity_limit = self.integrity_limit.min(integrity);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::one_rtt_pair;
    use super::*;

    const HEADER_LEN: usize = 3;
    const PTO3: Duration = Duration::from_millis(300);

    /// A short-header packet: first byte, two bytes standing in for DCID and packet number,
    /// then `payload` and room for the tag.
    fn packet(payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x41, 0xcc, 0x00];
        p.extend_from_slice(payload);
        p.resize(p.len() + 16, 0);
        p
    }

    fn send(tx: &mut OneRttKeys, path: Option<PathId>, pn: u64) -> Vec<u8> {
        let mut p = packet(&pn.to_be_bytes());
        tx.seal(path, pn, &mut p, HEADER_LEN).unwrap();
        p
    }

    fn recv(
        rx: &mut OneRttKeys,
        now: Instant,
        path: Option<PathId>,
        pn: u64,
        mut p: Vec<u8>,
    ) -> Result<KeyPhaseMatch, CryptoError> {
        let opened = rx.open(now, path, pn, &mut p, HEADER_LEN)?;
        assert_eq!(opened.payload_len, 8);
        assert_eq!(&p[HEADER_LEN..HEADER_LEN + 8], &pn.to_be_bytes());
        Ok(opened.keys)
    }

    #[test]
    fn full_key_update_cycle() {
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        assert!(!c.key_phase() && !s.key_phase());

        // No update before anything sent with the current keys is acknowledged.
        assert_eq!(
            c.initiate_update(t0, Duration::ZERO),
            Err(CryptoError::KeyUpdateNotPermitted)
        );
        let p0 = send(&mut c, None, 0);
        assert_eq!(p0[0] & KEY_PHASE_BIT, 0);
        assert_eq!(recv(&mut s, t0, None, 0, p0), Ok(KeyPhaseMatch::Current));
        let late_from_c = send(&mut c, None, 1); // delayed in the network
        let late_from_s = send(&mut s, None, 0); // delayed in the network
        c.on_packet_acked(t0, None, 0);
        assert!(c.update_permitted(t0, Duration::ZERO));
        assert!(!c.update_permitted(t0, PTO3));
        assert_eq!(
            c.initiate_update(t0, PTO3),
            Err(CryptoError::KeyUpdateNotPermitted)
        );

        // The client initiates.
        let t1 = t0 + PTO3;
        c.initiate_update(t1, PTO3).unwrap();
        assert!(c.key_phase());
        assert_eq!(c.generation(), 1);
        assert!(c.has_old_key());
        assert_eq!(c.old_key_deadline(PTO3), None); // nothing received with new keys yet
        assert!(!c.update_permitted(t1 + PTO3, PTO3));

        // The server recognises the flipped phase and follows.
        let p2 = send(&mut c, None, 2);
        assert_eq!(p2[0] & KEY_PHASE_BIT, KEY_PHASE_BIT);
        assert_eq!(s.recognise(p2[0]), KeyPhaseMatch::Next);
        assert_eq!(recv(&mut s, t1, None, 2, p2), Ok(KeyPhaseMatch::Next));
        assert!(s.key_phase());
        assert_eq!(s.generation(), 1);
        assert_eq!(s.old_key_deadline(PTO3), Some(t1 + PTO3));

        // Reordered old packets still open with the previous keys, both ways.
        assert_eq!(s.recognise(late_from_c[0]), KeyPhaseMatch::Previous);
        assert_eq!(
            recv(&mut s, t1, None, 1, late_from_c),
            Ok(KeyPhaseMatch::Previous)
        );
        assert_eq!(
            recv(&mut c, t1, None, 0, late_from_s),
            Ok(KeyPhaseMatch::Previous)
        );
        assert_eq!(c.old_key_deadline(PTO3), None);

        // The server answers with new keys; the client now starts its discard clock.
        let t2 = t1 + Duration::from_millis(10);
        let s1 = send(&mut s, None, 1);
        assert_eq!(s1[0] & KEY_PHASE_BIT, KEY_PHASE_BIT);
        assert_eq!(recv(&mut c, t2, None, 1, s1), Ok(KeyPhaseMatch::Current));
        assert_eq!(c.old_key_deadline(PTO3), Some(t2 + PTO3));

        // Acks for packets of the old phase do not permit another update; acks for the new
        // phase do.
        c.on_packet_acked(t2, None, 1);
        assert!(!c.update_permitted(t2 + PTO3, Duration::ZERO));
        c.on_packet_acked(t2, None, 2);
        assert!(c.update_permitted(t2, Duration::ZERO));

        // Old keys go away after their deadline only.
        assert!(!s.discard_old_key(t1 + PTO3 - Duration::from_millis(1), PTO3));
        assert!(s.discard_old_key(t1 + PTO3, PTO3));
        assert!(!s.has_old_key());
        assert!(c.discard_old_key(t2 + PTO3, PTO3));

        // Second update, initiated by the server this time.
        s.on_packet_acked(t2, None, 1);
        let t3 = t2 + 2 * PTO3;
        s.initiate_update(t3, PTO3).unwrap();
        assert!(!s.key_phase());
        let s2 = send(&mut s, None, 2);
        assert_eq!(c.recognise(s2[0]), KeyPhaseMatch::Next);
        assert_eq!(recv(&mut c, t3, None, 2, s2), Ok(KeyPhaseMatch::Next));
        assert_eq!((c.generation(), s.generation()), (2, 2));
        let c3 = send(&mut c, None, 3);
        assert_eq!(recv(&mut s, t3, None, 3, c3), Ok(KeyPhaseMatch::Current));
        assert_eq!(c.failed_decryptions() + s.failed_decryptions(), 0);
    }

    #[test]
    fn retained_old_key_blocks_early_second_update() {
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        recv(&mut s, t0, None, 0, send(&mut c, None, 0)).unwrap();
        c.on_packet_acked(t0, None, 0);
        c.initiate_update(t0, Duration::ZERO).unwrap();
        recv(&mut s, t0, None, 1, send(&mut c, None, 1)).unwrap();
        recv(&mut c, t0, None, 0, send(&mut s, None, 0)).unwrap();
        // The client updates again at once (only the MUST is respected), but the server
        // still holds the previous key for that phase: the packet cannot be opened.
        c.on_packet_acked(t0, None, 1);
        c.initiate_update(t0, Duration::ZERO).unwrap();
        let early = send(&mut c, None, 2);
        assert_eq!(s.recognise(early[0]), KeyPhaseMatch::Previous);
        assert_eq!(
            recv(&mut s, t0, None, 2, early.clone()),
            Err(CryptoError::Decrypt)
        );
        assert_eq!(s.failed_decryptions(), 1);
        // Once the old key is discarded, the same phase means "next" and it opens.
        assert!(s.discard_old_key(t0 + PTO3, PTO3));
        let again = send(&mut c, None, 3);
        assert_eq!(recv(&mut s, t0, None, 3, again), Ok(KeyPhaseMatch::Next));
        assert_eq!(s.generation(), 2);
    }

    #[test]
    fn old_keys_after_new_keys_is_a_key_update_error() {
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        recv(&mut s, t0, None, 0, send(&mut c, None, 0)).unwrap();
        let old_high = send(&mut c, None, 10);
        c.on_packet_acked(t0, None, 0);
        c.initiate_update(t0, Duration::ZERO).unwrap();
        // A misbehaving sender: new keys on packet 5, old keys on packet 10.
        assert_eq!(
            recv(&mut s, t0, None, 5, send(&mut c, None, 5)),
            Ok(KeyPhaseMatch::Next)
        );
        let err = recv(&mut s, t0, None, 10, old_high).unwrap_err();
        assert!(matches!(err, CryptoError::KeyUpdate(_)));
        assert!(err.is_fatal());
        assert_eq!(
            err.transport_error().unwrap().code,
            crate::TransportErrorCode::KEY_UPDATE_ERROR
        );
    }

    #[test]
    fn new_keys_below_old_keys_is_a_key_update_error() {
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        recv(&mut s, t0, None, 10, send(&mut c, None, 10)).unwrap();
        c.on_packet_acked(t0, None, 10);
        c.initiate_update(t0, Duration::ZERO).unwrap();
        let err = recv(&mut s, t0, None, 3, send(&mut c, None, 3)).unwrap_err();
        assert!(matches!(err, CryptoError::KeyUpdate(_)));
        // The server did not switch keys.
        assert_eq!(s.generation(), 0);
    }

    #[test]
    fn multipath_packet_numbers_are_tracked_per_path() {
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        let (p0, p1) = (Some(PathId(0)), Some(PathId(1)));
        recv(&mut s, t0, p0, 0, send(&mut c, p0, 0)).unwrap();
        recv(&mut s, t0, p1, 0, send(&mut c, p1, 0)).unwrap();
        // The wrong path ID (nonce) fails authentication.
        assert_eq!(
            recv(&mut s, t0, p0, 1, send(&mut c, p1, 1)),
            Err(CryptoError::Decrypt)
        );
        let late_path0 = send(&mut c, p0, 7);
        // An ack on path 1 confirms the phase.
        c.on_packet_acked(t0, p1, 0);
        c.initiate_update(t0, Duration::ZERO).unwrap();
        // New keys on path 1 with a low number, old keys on path 0 with a higher one: fine,
        // the packet number spaces are independent.
        assert_eq!(
            recv(&mut s, t0, p1, 1, send(&mut c, p1, 1)),
            Ok(KeyPhaseMatch::Next)
        );
        assert_eq!(
            recv(&mut s, t0, p0, 7, late_path0),
            Ok(KeyPhaseMatch::Previous)
        );
        // But on the same path it is an error.
        let late_path1 = {
            // Sealed with the previous generation's key, as a misbehaving peer would.
            let mut p = packet(&9u64.to_be_bytes());
            let old = s.previous.as_ref().unwrap();
            p[0] &= !KEY_PHASE_BIT;
            // The server's previous *receive* key equals the client's previous send key.
            seal_packet(&*old.key, p1, 9, &mut p, HEADER_LEN).unwrap();
            p
        };
        assert!(matches!(
            recv(&mut s, t0, p1, 9, late_path1),
            Err(CryptoError::KeyUpdate(_))
        ));
    }

    #[test]
    fn confidentiality_limit_forces_an_update() {
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        c.lower_aead_limits(16, u64::MAX);
        let mut pn = 0;
        while !c.update_wanted() {
            recv(&mut s, t0, None, pn, send(&mut c, None, pn)).unwrap();
            pn += 1;
        }
        assert_eq!(c.sealed_with_current_key(), 14);
        send(&mut c, None, pn);
        send(&mut c, None, pn + 1);
        let mut p = packet(b"12345678");
        let err = c.seal(None, pn + 2, &mut p, HEADER_LEN).unwrap_err();
        assert_eq!(err, CryptoError::AeadLimit);
        assert_eq!(
            err.transport_error().unwrap().code,
            crate::TransportErrorCode::AEAD_LIMIT_REACHED
        );
        // Updating keys resets the count.
        c.on_packet_acked(t0, None, 0);
        c.initiate_update(t0, Duration::ZERO).unwrap();
        assert!(!c.update_wanted());
        let p = send(&mut c, None, pn + 2);
        assert_eq!(recv(&mut s, t0, None, pn + 2, p), Ok(KeyPhaseMatch::Next));
    }

    #[test]
    fn integrity_limit_closes_the_connection() {
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        s.lower_aead_limits(u64::MAX, 2);
        for pn in 0..2 {
            let mut p = send(&mut c, None, pn);
            p[HEADER_LEN] ^= 0xff;
            assert_eq!(recv(&mut s, t0, None, pn, p), Err(CryptoError::Decrypt));
        }
        let mut p = send(&mut c, None, 2);
        p[HEADER_LEN] ^= 0xff;
        assert_eq!(recv(&mut s, t0, None, 2, p), Err(CryptoError::AeadLimit));
        // No more packets are processed, even valid ones.
        let p = send(&mut c, None, 3);
        assert_eq!(recv(&mut s, t0, None, 3, p), Err(CryptoError::AeadLimit));
        assert_eq!(s.failed_decryptions(), 3);
    }

    #[test]
    fn short_packets_are_errors_not_panics() {
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        for len in 0..HEADER_LEN + 16 {
            let mut p = vec![0x40; len];
            assert_eq!(
                s.open(t0, None, 0, &mut p, HEADER_LEN),
                Err(CryptoError::ShortPacket)
            );
            assert_eq!(
                c.seal(None, 0, &mut p, HEADER_LEN),
                Err(CryptoError::ShortPacket)
            );
        }
        assert_eq!(
            c.seal(None, 0, &mut [0; 40], 0),
            Err(CryptoError::ShortPacket)
        );
        assert_eq!(s.failed_decryptions(), 0);
        assert_eq!(c.tag_len(), 16);
    }

    #[test]
    fn header_protection_keys_survive_updates() {
        use crate::crypto::{protect_header, unprotect_header};
        let (mut c, mut s) = one_rtt_pair();
        let t0 = Instant::now();
        recv(&mut s, t0, None, 0, send(&mut c, None, 0)).unwrap();
        c.on_packet_acked(t0, None, 0);
        c.initiate_update(t0, Duration::ZERO).unwrap();
        let mut p = packet(&[1, 2, 3, 4, 5, 6, 7, 8]);
        c.seal(None, 1, &mut p, HEADER_LEN).unwrap();
        let clear_first = p[0];
        protect_header(c.local_header(), &mut p, 2).unwrap();
        assert_eq!(unprotect_header(s.remote_header(), &mut p, 2), Ok(2));
        assert_eq!(p[0], clear_first);
        assert_eq!(s.recognise(p[0]), KeyPhaseMatch::Next);
        assert_eq!(
            s.open(t0, None, 1, &mut p, HEADER_LEN).map(|o| o.keys),
            Ok(KeyPhaseMatch::Next)
        );
    }
}
