//! Packet protection: the real AEAD and header protection of RFC 9001, or, for simulations
//! only, a stand-in that keeps the wire format and skips the cryptography.
//!
//! The stand-in is a pair of key types that take the place of rustls's packet and header
//! protection keys wherever a connection installs keys, so nothing else in the stack knows
//! which one it runs:
//!
//! - the payload is left in the clear and the 16-byte tag is still written: the key's
//!   fingerprint (the tag the real key gives an empty message, computed once when the key
//!   is installed) mixed with the packet number, the path ID and the payload length. So
//!   every packet has the size it has with real protection, and a packet opened with the
//!   wrong key generation, path or packet number still fails to open, as it would with the
//!   AEAD;
//! - header protection leaves the first byte and the packet number unmasked, but insists
//!   on the same sample length as the real key.
//!
//! The AEAD usage limits are the real key's, so key updates happen when they would.
//! Initial packets keep real protection (a server checks that a client's first Initial
//! decrypts before it keeps any state, see `endpoint.rs`); Handshake and 1-RTT packets, all
//! of a transfer's data, get the chosen protection. This is no protection at all: the
//! simulator selects it (`[sim] packet_protection`), a network endpoint never should.

use rustls::Error;
use rustls::quic::{DirectionalKeys, HeaderProtectionKey, Keys, PacketKey, PacketKeySet, Tag};

/// How a connection protects its Handshake and 1-RTT packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PacketProtection {
    /// AEAD packet protection and header protection (RFC 9001 section 5). The default,
    /// and the only choice for anything that crosses a network.
    #[default]
    Aead,
    /// For simulations only: the wire format without the cryptography (same header,
    /// sizes and tag length; the payload in the clear, the tag computed from the key's
    /// fingerprint, the path, the packet number and the length). No confidentiality, no
    /// integrity against an attacker: a simulated network has neither.
    Simulated,
}

impl PacketProtection {
    /// The keys packets are protected with: `keys` themselves, or their simulated
    /// stand-ins.
    pub fn keys(self, keys: Keys) -> Keys {
        match self {
            PacketProtection::Aead => keys,
            PacketProtection::Simulated => Keys {
                local: simulated_directional(keys.local),
                remote: simulated_directional(keys.remote),
            },
        }
    }

    /// The keys of one direction (0-RTT keys), as [`Self::keys`].
    pub fn directional_keys(self, keys: DirectionalKeys) -> DirectionalKeys {
        match self {
            PacketProtection::Aead => keys,
            PacketProtection::Simulated => simulated_directional(keys),
        }
    }

    /// The packet keys of a key generation after a key update, as [`Self::keys`].
    pub fn packet_keys(self, keys: PacketKeySet) -> PacketKeySet {
        match self {
            PacketProtection::Aead => keys,
            PacketProtection::Simulated => PacketKeySet {
                local: SimulatedPacketKey::standing_in_for(keys.local),
                remote: SimulatedPacketKey::standing_in_for(keys.remote),
            },
        }
    }
}

fn simulated_directional(keys: DirectionalKeys) -> DirectionalKeys {
    DirectionalKeys {
        header: Box::new(SimulatedHeaderKey {
            sample_len: keys.header.sample_len(),
        }),
        packet: SimulatedPacketKey::standing_in_for(keys.packet),
    }
}

/// Length of the tag the simulated packet key writes.
const SIMULATED_TAG_LEN: usize = 16;

/// A packet key that writes a tag but encrypts nothing (see the module documentation).
struct SimulatedPacketKey {
    /// The real key's tag over an empty message: the same at both ends of a connection for
    /// the same key, different between keys.
    fingerprint: [u8; SIMULATED_TAG_LEN],
    tag_len: usize,
    confidentiality_limit: u64,
    integrity_limit: u64,
}

impl SimulatedPacketKey {
    fn standing_in_for(real: Box<dyn PacketKey>) -> Box<dyn PacketKey> {
        let mut fingerprint = [0u8; SIMULATED_TAG_LEN];
        if let Ok(tag) = real.encrypt_in_place(0, b"polypath simulated protection", &mut []) {
            for (f, t) in fingerprint.iter_mut().zip(tag.as_ref()) {
                *f = *t;
            }
        }
        Box::new(SimulatedPacketKey {
            fingerprint,
            tag_len: real.tag_len(),
            confidentiality_limit: real.confidentiality_limit(),
            integrity_limit: real.integrity_limit(),
        })
    }

    /// The tag of a packet: the fingerprint mixed with what identifies the packet.
    fn tag(&self, path: u32, packet_number: u64, payload_len: usize) -> [u8; SIMULATED_TAG_LEN] {
        let mut tag = self.fingerprint;
        let mut mix = [0u8; SIMULATED_TAG_LEN];
        mix[..8].copy_from_slice(&packet_number.to_be_bytes());
        mix[8..12].copy_from_slice(&path.to_be_bytes());
        mix[12..].copy_from_slice(&(payload_len as u32).to_be_bytes());
        for (t, m) in tag.iter_mut().zip(mix) {
            *t ^= m;
        }
        tag
    }

    fn seal(&self, path: u32, packet_number: u64, payload: &[u8]) -> Result<Tag, Error> {
        if self.tag_len != SIMULATED_TAG_LEN {
            return Err(Error::EncryptError);
        }
        Ok(Tag::from(&self.tag(path, packet_number, payload.len())[..]))
    }

    fn open<'a>(
        &self,
        path: u32,
        packet_number: u64,
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        let len = payload
            .len()
            .checked_sub(SIMULATED_TAG_LEN)
            .ok_or(Error::DecryptError)?;
        let (plain, tag) = payload.split_at(len);
        if tag != self.tag(path, packet_number, len) {
            return Err(Error::DecryptError);
        }
        Ok(plain)
    }
}

impl PacketKey for SimulatedPacketKey {
    fn encrypt_in_place(
        &self,
        packet_number: u64,
        _header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, Error> {
        // Without multipath the nonce is path 0's, as with the AEAD (draft-ietf-quic-
        // multipath-21 section 2.4: path 0's nonce is the single-path one).
        self.seal(0, packet_number, payload)
    }

    fn encrypt_in_place_for_path(
        &self,
        path_id: u32,
        packet_number: u64,
        _header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, Error> {
        self.seal(path_id, packet_number, payload)
    }

    fn decrypt_in_place<'a>(
        &self,
        packet_number: u64,
        _header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        self.open(0, packet_number, payload)
    }

    fn decrypt_in_place_for_path<'a>(
        &self,
        path_id: u32,
        packet_number: u64,
        _header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        self.open(path_id, packet_number, payload)
    }

    fn tag_len(&self) -> usize {
        self.tag_len
    }

    fn confidentiality_limit(&self) -> u64 {
        self.confidentiality_limit
    }

    fn integrity_limit(&self) -> u64 {
        self.integrity_limit
    }
}

/// Header protection that masks nothing but wants the real key's sample.
struct SimulatedHeaderKey {
    sample_len: usize,
}

impl SimulatedHeaderKey {
    fn check(&self, sample: &[u8], packet_number: &[u8]) -> Result<(), Error> {
        if sample.len() != self.sample_len || packet_number.len() > 4 {
            return Err(Error::General(
                "header protection sample or packet number".into(),
            ));
        }
        Ok(())
    }
}

impl HeaderProtectionKey for SimulatedHeaderKey {
    fn encrypt_in_place(
        &self,
        sample: &[u8],
        _first: &mut u8,
        packet_number: &mut [u8],
    ) -> Result<(), Error> {
        self.check(sample, packet_number)
    }

    fn decrypt_in_place(
        &self,
        sample: &[u8],
        _first: &mut u8,
        packet_number: &mut [u8],
    ) -> Result<(), Error> {
        self.check(sample, packet_number)
    }

    fn sample_len(&self) -> usize {
        self.sample_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{
        QUIC_VERSION_1, initial_keys, open_packet, protect_header, seal_packet, unprotect_header,
    };
    use crate::shared::{ConnectionId, PathId, Side};

    fn pair(protection: PacketProtection) -> (Keys, Keys) {
        let dcid = ConnectionId::new(&[9; 8]);
        let client = initial_keys(QUIC_VERSION_1, &dcid, Side::Client).unwrap();
        let server = initial_keys(QUIC_VERSION_1, &dcid, Side::Server).unwrap();
        (protection.keys(client), protection.keys(server))
    }

    /// A protected packet: short header with a 2-byte packet number, payload, tag space.
    fn packet(payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x41, 0x12, 0x34];
        p.extend_from_slice(payload);
        p.resize(p.len() + 16, 0);
        p
    }

    fn seal(keys: &Keys, path: Option<PathId>, pn: u64, payload: &[u8]) -> Vec<u8> {
        let mut p = packet(payload);
        seal_packet(&*keys.local.packet, path, pn, &mut p, 3).unwrap();
        protect_header(&*keys.local.header, &mut p, 1).unwrap();
        p
    }

    fn open(keys: &Keys, path: Option<PathId>, pn: u64, mut p: Vec<u8>) -> Option<Vec<u8>> {
        unprotect_header(&*keys.remote.header, &mut p, 1).ok()?;
        let len = open_packet(&*keys.remote.packet, path, pn, &mut p, 3).ok()?;
        Some(p[3..3 + len].to_vec())
    }

    /// Simulated protection writes exactly as many bytes as the AEAD, leaves the header
    /// and payload readable, and opens what the peer sealed.
    #[test]
    fn simulated_keeps_the_wire_format() {
        let payload = b"stream data for the simulator, forty bytes".to_vec();
        let (rc, rs) = pair(PacketProtection::Aead);
        let (sc, ss) = pair(PacketProtection::Simulated);
        for path in [None, Some(PathId(0)), Some(PathId(3))] {
            let real = seal(&rc, path, 7, &payload);
            let sim = seal(&sc, path, 7, &payload);
            assert_eq!(real.len(), sim.len());
            assert_ne!(real[3..], sim[3..]);
            assert_eq!(&sim[..3], &[0x41, 0x12, 0x34], "header left unmasked");
            assert_eq!(
                &sim[3..3 + payload.len()],
                &payload[..],
                "payload in the clear"
            );
            assert_eq!(open(&rs, path, 7, real), Some(payload.clone()));
            assert_eq!(open(&ss, path, 7, sim), Some(payload.clone()));
        }
    }

    /// As with the AEAD, a packet opened with the wrong packet number, path, key or
    /// length does not open; the tag depends on nothing else, so it is deterministic.
    #[test]
    fn simulated_tag_binds_key_path_and_packet_number() {
        let payload = b"0123456789abcdef0123".to_vec();
        let (sc, ss) = pair(PacketProtection::Simulated);
        let p = seal(&sc, Some(PathId(1)), 99, &payload);
        assert_eq!(p, seal(&sc, Some(PathId(1)), 99, &payload));
        assert!(open(&ss, Some(PathId(1)), 99, p.clone()).is_some());
        assert!(open(&ss, Some(PathId(2)), 99, p.clone()).is_none());
        assert!(open(&ss, Some(PathId(1)), 98, p.clone()).is_none());
        assert!(open(&ss, None, 99, p.clone()).is_none());
        // The client's own receive key is the server's send key, not this one.
        assert!(open(&sc, Some(PathId(1)), 99, p.clone()).is_none());
        let mut cut = p.clone();
        cut.remove(5);
        assert!(open(&ss, Some(PathId(1)), 99, cut).is_none());
        // Keys from another connection's secrets.
        let other = PacketProtection::Simulated
            .keys(initial_keys(QUIC_VERSION_1, &ConnectionId::new(&[1; 8]), Side::Server).unwrap());
        assert!(open(&other, Some(PathId(1)), 99, p).is_none());
    }

    /// The simulated keys keep the real keys' lengths and AEAD limits.
    #[test]
    fn simulated_keeps_lengths_and_limits() {
        let (real, _) = pair(PacketProtection::Aead);
        let (sim, _) = pair(PacketProtection::Simulated);
        assert_eq!(sim.local.packet.tag_len(), real.local.packet.tag_len());
        assert_eq!(
            sim.local.header.sample_len(),
            real.local.header.sample_len()
        );
        assert_eq!(
            sim.local.packet.confidentiality_limit(),
            real.local.packet.confidentiality_limit()
        );
        assert_eq!(
            sim.remote.packet.integrity_limit(),
            real.remote.packet.integrity_limit()
        );
        let mut short = vec![0u8; 10];
        assert!(open_packet(&*sim.remote.packet, None, 0, &mut short, 3).is_err());
    }
}
