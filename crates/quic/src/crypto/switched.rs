//! Packet protection keys for a client whose server switched QUIC versions during the
//! handshake (compatible version negotiation, RFC 9368).
//!
//! rustls fixes a connection's QUIC version, which selects the HKDF labels of the Handshake
//! and 1-RTT keys ("quic key" or "quicv2 key", ...), when the connection is created. A
//! client creates it before it sends its first Initial, so before it knows which version
//! the server picks. The TLS secrets themselves do not depend on the version; the client
//! takes them from rustls' key log and derives the packet protection keys of the
//! negotiated version here (RFC 9001 section 5.1 with the labels of RFC 9369 section
//! 3.3.2), with the same AEADs rustls uses.

use crate::packet::VERSION_2;
use ring::aead;
use rustls::crypto::cipher::{Iv, NONCE_LEN, Nonce};
use rustls::crypto::tls13::{HkdfExpander, OkmBlock};
use rustls::quic::{DirectionalKeys, HeaderProtectionKey, Keys, PacketKey, PacketKeySet, Tag};
use rustls::{CipherSuite, Tls13CipherSuite};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The HKDF labels of packet protection for one QUIC version.
#[derive(Debug, Clone, Copy)]
struct Labels {
    key: &'static [u8],
    iv: &'static [u8],
    hp: &'static [u8],
    ku: &'static [u8],
}

/// The labels of `version` (1 or 2).
//= https://www.rfc-editor.org/rfc/rfc9369#section-3.3.2
//# change from
//# "quic key" to "quicv2 key", from "quic iv" to "quicv2 iv", from "quic hp" to
//# "quicv2 hp", and from "quic ku" to "quicv2 ku" to meet the guidance for new
//# versions
fn labels(version: u32) -> Labels {
    if version == VERSION_2 {
        Labels {
            key: b"quicv2 key",
            iv: b"quicv2 iv",
            hp: b"quicv2 hp",
            ku: b"quicv2 ku",
        }
    } else {
        Labels {
            key: b"quic key",
            iv: b"quic iv",
            hp: b"quic hp",
            ku: b"quic ku",
        }
    }
}

/// HKDF-Expand-Label (RFC 8446 section 7.1) with an empty context, `len` bytes.
fn expand_label(expander: &dyn HkdfExpander, label: &[u8], len: usize) -> Option<Vec<u8>> {
    let out_len = u16::try_from(len).ok()?.to_be_bytes();
    let label_len = [u8::try_from(6 + label.len()).ok()?];
    let mut out = vec![0; len];
    expander
        .expand_slice(&[&out_len, &label_len, b"tls13 ", label, &[0]], &mut out)
        .ok()?;
    Some(out)
}

/// The secrets a TLS key log reported for one connection, by label.
#[derive(Debug)]
pub(crate) struct SecretLog {
    secrets: Mutex<HashMap<String, Vec<u8>>>,
    /// The key log of the configuration, which also gets every secret.
    inner: Arc<dyn rustls::KeyLog>,
}

impl SecretLog {
    /// A log that also forwards to `inner` (the configuration's own key log).
    pub(crate) fn new(inner: Arc<dyn rustls::KeyLog>) -> Self {
        SecretLog {
            secrets: Mutex::default(),
            inner,
        }
    }

    /// The secret logged under `label`, if any.
    fn get(&self, label: &str) -> Option<OkmBlock> {
        let secrets = self.secrets.lock().ok()?;
        secrets.get(label).map(|s| OkmBlock::new(s))
    }
}

impl rustls::KeyLog for SecretLog {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        if let Ok(mut secrets) = self.secrets.lock() {
            secrets.insert(label.to_owned(), secret.to_vec());
        }
        if self.inner.will_log(label) {
            self.inner.log(label, client_random, secret);
        }
    }

    fn will_log(&self, _label: &str) -> bool {
        true
    }
}

/// The key schedule of a switched client: the TLS suite, the negotiated version and the
/// logged secrets.
pub(crate) struct SwitchedSchedule {
    suite: &'static Tls13CipherSuite,
    version: u32,
    log: Arc<SecretLog>,
}

/// Which packet keys to derive.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stage {
    /// Handshake keys.
    Handshake,
    /// The first 1-RTT keys.
    OneRtt,
}

impl SwitchedSchedule {
    /// A schedule for `version` over the secrets in `log`, for a connection that
    /// negotiated `suite`.
    pub(crate) fn new(suite: &'static Tls13CipherSuite, version: u32, log: Arc<SecretLog>) -> Self {
        SwitchedSchedule {
            suite,
            version,
            log,
        }
    }

    /// The client's keys for `stage` (local = client), with the secrets to derive the
    /// next 1-RTT generation from.
    pub(crate) fn client_keys(&self, stage: Stage) -> Option<(Keys, SwitchedSecrets)> {
        let (client, server) = match stage {
            Stage::Handshake => (
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
                "SERVER_HANDSHAKE_TRAFFIC_SECRET",
            ),
            Stage::OneRtt => ("CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0"),
        };
        let secrets = SwitchedSecrets {
            suite: self.suite,
            labels: labels(self.version),
            client: self.log.get(client)?,
            server: self.log.get(server)?,
        };
        let keys = Keys {
            local: secrets.directional(&secrets.client)?,
            remote: secrets.directional(&secrets.server)?,
        };
        Some((keys, secrets))
    }
}

/// A client's pair of traffic secrets for one key generation, and how to derive keys
/// from them.
pub struct SwitchedSecrets {
    suite: &'static Tls13CipherSuite,
    labels: Labels,
    client: OkmBlock,
    server: OkmBlock,
}

impl SwitchedSecrets {
    fn expander(&self, secret: &OkmBlock) -> Box<dyn HkdfExpander> {
        self.suite.hkdf_provider.expander_for_okm(secret)
    }

    fn aead(&self) -> Option<(&'static aead::Algorithm, &'static aead::quic::Algorithm)> {
        match self.suite.common.suite {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => {
                Some((&aead::AES_128_GCM, &aead::quic::AES_128))
            }
            CipherSuite::TLS13_AES_256_GCM_SHA384 => {
                Some((&aead::AES_256_GCM, &aead::quic::AES_256))
            }
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => {
                Some((&aead::CHACHA20_POLY1305, &aead::quic::CHACHA20))
            }
            _ => None,
        }
    }

    fn packet_key(&self, secret: &OkmBlock) -> Option<Box<dyn PacketKey>> {
        let (alg, _) = self.aead()?;
        let expander = self.expander(secret);
        let key = expand_label(expander.as_ref(), self.labels.key, alg.key_len())?;
        let iv = expand_label(expander.as_ref(), self.labels.iv, NONCE_LEN)?;
        let key = aead::UnboundKey::new(alg, &key).ok()?;
        Some(Box::new(SwitchedPacketKey {
            key: aead::LessSafeKey::new(key),
            iv: Iv::copy(&iv),
            chacha: alg == &aead::CHACHA20_POLY1305,
        }))
    }

    fn directional(&self, secret: &OkmBlock) -> Option<DirectionalKeys> {
        let (alg, hp_alg) = self.aead()?;
        let expander = self.expander(secret);
        let hp = expand_label(expander.as_ref(), self.labels.hp, alg.key_len())?;
        let hp = aead::quic::HeaderProtectionKey::new(hp_alg, &hp).ok()?;
        Some(DirectionalKeys {
            header: Box::new(SwitchedHeaderKey(hp)),
            packet: self.packet_key(secret)?,
        })
    }

    /// The packet keys of the next generation, moving the secrets on by one update.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-6.1
    //# secret_<n+1> = HKDF-Expand-Label(secret_<n>, "quic ku",
    //#                                  "", Hash.length)
    pub(crate) fn next_packet_keys(&mut self) -> Option<PacketKeySet> {
        let len = self.suite.common.hash_provider.output_len();
        let next = |secret: &OkmBlock| {
            expand_label(self.expander(secret).as_ref(), self.labels.ku, len)
                .map(|s| OkmBlock::new(&s))
        };
        let (client, server) = (next(&self.client)?, next(&self.server)?);
        self.client = client;
        self.server = server;
        Some(PacketKeySet {
            local: self.packet_key(&self.client)?,
            remote: self.packet_key(&self.server)?,
        })
    }
}

/// An AEAD packet key of a switched client.
struct SwitchedPacketKey {
    key: aead::LessSafeKey,
    iv: Iv,
    chacha: bool,
}

impl SwitchedPacketKey {
    fn seal(&self, nonce: Nonce, header: &[u8], payload: &mut [u8]) -> Result<Tag, rustls::Error> {
        let tag = self
            .key
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key(nonce.0),
                aead::Aad::from(header),
                payload,
            )
            .map_err(|_| rustls::Error::EncryptError)?;
        Ok(Tag::from(tag.as_ref()))
    }

    fn open<'a>(
        &self,
        nonce: Nonce,
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], rustls::Error> {
        let plain = self
            .key
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce.0),
                aead::Aad::from(header),
                payload,
            )
            .map_err(|_| rustls::Error::DecryptError)?;
        Ok(plain)
    }
}

impl PacketKey for SwitchedPacketKey {
    fn encrypt_in_place(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, rustls::Error> {
        self.seal(Nonce::new(&self.iv, packet_number), header, payload)
    }

    fn encrypt_in_place_for_path(
        &self,
        path_id: u32,
        packet_number: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, rustls::Error> {
        let nonce = Nonce::for_path(path_id, &self.iv, packet_number);
        self.seal(nonce, header, payload)
    }

    fn decrypt_in_place<'a>(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], rustls::Error> {
        self.open(Nonce::new(&self.iv, packet_number), header, payload)
    }

    fn decrypt_in_place_for_path<'a>(
        &self,
        path_id: u32,
        packet_number: u64,
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], rustls::Error> {
        let nonce = Nonce::for_path(path_id, &self.iv, packet_number);
        self.open(nonce, header, payload)
    }

    fn tag_len(&self) -> usize {
        self.key.algorithm().tag_len()
    }

    //= https://www.rfc-editor.org/rfc/rfc9001#section-6.6
    //# For AEAD_AES_128_GCM and AEAD_AES_256_GCM, the confidentiality limit is
    //# 2<sup>23</sup> encrypted packets; see {{gcm-bounds}}. For
    //# AEAD_CHACHA20_POLY1305, the confidentiality limit is greater than the number of
    //# possible packets (2<sup>62</sup>) and so can be disregarded.
    fn confidentiality_limit(&self) -> u64 {
        if self.chacha { u64::MAX } else { 1 << 23 }
    }

    //= https://www.rfc-editor.org/rfc/rfc9001#section-6.6
    //# For AEAD_AES_128_GCM and AEAD_AES_256_GCM, the integrity limit is 2<sup>52</sup>
    //# invalid packets; see {{gcm-bounds}}. For AEAD_CHACHA20_POLY1305, the integrity
    //# limit is 2<sup>36</sup> invalid packets; see {{AEBounds}}.
    fn integrity_limit(&self) -> u64 {
        if self.chacha { 1 << 36 } else { 1 << 52 }
    }
}

/// A header protection key of a switched client.
struct SwitchedHeaderKey(aead::quic::HeaderProtectionKey);

impl SwitchedHeaderKey {
    /// XORs the mask into the first byte's protected bits and the packet number bytes.
    /// The packet number length comes from the unprotected first byte: before masking
    /// when protecting, after it when removing protection.
    fn xor(
        &self,
        sample: &[u8],
        first: &mut u8,
        packet_number: &mut [u8],
        masked: bool,
    ) -> Result<(), rustls::Error> {
        let mask = self
            .0
            .new_mask(sample)
            .map_err(|_| rustls::Error::General("header protection sample".into()))?;
        //= https://www.rfc-editor.org/rfc/rfc9001#section-5.4.1
        //# if (packet[0] & 0x80) == 0x80:
        //#    # Long header: 4 bits masked
        //#    packet[0] ^= mask[0] & 0x0f
        //# else:
        //#    # Short header: 5 bits masked
        //#    packet[0] ^= mask[0] & 0x1f
        let bits = if *first & 0x80 != 0 { 0x0f } else { 0x1f };
        let pn_len_of = |b: u8| usize::from(b & 0x03) + 1;
        let pn_len = if masked {
            pn_len_of(*first ^ (mask[0] & bits))
        } else {
            pn_len_of(*first)
        };
        if packet_number.len() < pn_len {
            return Err(rustls::Error::General("packet number too short".into()));
        }
        *first ^= mask[0] & bits;
        for (b, m) in packet_number[..pn_len].iter_mut().zip(&mask[1..]) {
            *b ^= m;
        }
        Ok(())
    }
}

impl HeaderProtectionKey for SwitchedHeaderKey {
    fn encrypt_in_place(
        &self,
        sample: &[u8],
        first: &mut u8,
        packet_number: &mut [u8],
    ) -> Result<(), rustls::Error> {
        self.xor(sample, first, packet_number, false)
    }

    fn decrypt_in_place(
        &self,
        sample: &[u8],
        first: &mut u8,
        packet_number: &mut [u8],
    ) -> Result<(), rustls::Error> {
        self.xor(sample, first, packet_number, true)
    }

    fn sample_len(&self) -> usize {
        self.0.algorithm().sample_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derivation here matches rustls' own for the same version: from the Initial
    /// secrets, our keys and rustls' Initial keys (same version) interoperate, and a
    /// version's keys differ from the other version's.
    #[test]
    fn matches_rustls_initial_keys_for_both_versions() {
        use crate::packet::VERSION_1;
        use crate::shared::{ConnectionId, Side};
        let suite = match rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256 {
            rustls::SupportedCipherSuite::Tls13(s) => s,
            _ => unreachable!(),
        };
        let dcid = ConnectionId::new(&[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08]);
        for (version, salt) in [
            (VERSION_1, "38762cf7f55934b34d179ae6a4c80cadccbb7f0a"),
            (VERSION_2, "0dede3def700a6db819381be6e269dcbf9bd2ed9"),
        ] {
            // The Initial secrets by hand (RFC 9001 section 5.2), then our key derivation.
            let salt = hex::decode(salt).unwrap();
            let initial = suite.hkdf_provider.extract_from_secret(Some(&salt), &dcid);
            let secret =
                |label: &[u8]| OkmBlock::new(&expand_label(initial.as_ref(), label, 32).unwrap());
            let ours = SwitchedSecrets {
                suite,
                labels: labels(version),
                client: secret(b"client in"),
                server: secret(b"server in"),
            };
            let local = ours.directional(&ours.client).unwrap();
            let theirs = crate::crypto::initial_keys(version, &dcid, Side::Client).unwrap();
            // Same keys: what one seals the other opens, and header masks agree.
            let header = [0xc3, 0, 0, 0, 1];
            let mut payload = b"switched versions".to_vec();
            let tag = local
                .packet
                .encrypt_in_place(7, &header, &mut payload)
                .unwrap();
            payload.extend_from_slice(tag.as_ref());
            let server = crate::crypto::initial_keys(version, &dcid, Side::Server).unwrap();
            let plain = server
                .remote
                .packet
                .decrypt_in_place(7, &header, &mut payload)
                .unwrap();
            assert_eq!(plain, b"switched versions");
            let sample = [0x5a; 16];
            let (mut a, mut b) = ([0xc3u8, 1, 2, 3, 4], [0xc3u8, 1, 2, 3, 4]);
            let (fa, pa) = a.split_at_mut(1);
            local
                .header
                .encrypt_in_place(&sample, &mut fa[0], pa)
                .unwrap();
            let (fb, pb) = b.split_at_mut(1);
            theirs
                .local
                .header
                .encrypt_in_place(&sample, &mut fb[0], pb)
                .unwrap();
            assert_eq!(a, b);
            let other = if version == VERSION_2 {
                VERSION_1
            } else {
                VERSION_2
            };
            let mut wrong = {
                let mut p = b"switched versions".to_vec();
                let tag = local.packet.encrypt_in_place(7, &header, &mut p).unwrap();
                p.extend_from_slice(tag.as_ref());
                p
            };
            let other_server = crate::crypto::initial_keys(other, &dcid, Side::Server).unwrap();
            assert!(
                other_server
                    .remote
                    .packet
                    .decrypt_in_place(7, &header, &mut wrong)
                    .is_err()
            );
        }
    }
}
