//! The Retry Integrity Tag (RFC 9001 section 5.8).

use crate::packet::{VERSION_1, VERSION_2};
use crate::shared::ConnectionId;
use ring::aead;

/// Length of the Retry Integrity Tag at the end of a Retry packet.
pub const RETRY_INTEGRITY_TAG_LEN: usize = 16;

//= https://www.rfc-editor.org/rfc/rfc9001#section-5.8
//# - The secret key, K, is 128 bits equal to 0xbe0c690b9f66575a1d766b54e368c84e.
const RETRY_KEY_V1: [u8; 16] = [
    0xbe, 0x0c, 0x69, 0x0b, 0x9f, 0x66, 0x57, 0x5a, 0x1d, 0x76, 0x6b, 0x54, 0xe3, 0x68, 0xc8, 0x4e,
];
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.8
//# - The nonce, N, is 96 bits equal to 0x461599d35d632bf2239825bb.
const RETRY_NONCE_V1: [u8; 12] = [
    0x46, 0x15, 0x99, 0xd3, 0x5d, 0x63, 0x2b, 0xf2, 0x23, 0x98, 0x25, 0xbb,
];

//= https://www.rfc-editor.org/rfc/rfc9369#section-3.3.3
//# The key and nonce used for the Retry Integrity Tag ({{Section 5.8 of QUIC-TLS}})
//# change to:
//#
//# key = 0x8fb4b01b56ac48e260fbcbcead7ccc92
//# nonce = 0xd86969bc2d7c6d9990efb04a
const RETRY_KEY_V2: [u8; 16] = [
    0x8f, 0xb4, 0xb0, 0x1b, 0x56, 0xac, 0x48, 0xe2, 0x60, 0xfb, 0xcb, 0xce, 0xad, 0x7c, 0xcc, 0x92,
];
const RETRY_NONCE_V2: [u8; 12] = [
    0xd8, 0x69, 0x69, 0xbc, 0x2d, 0x7c, 0x6d, 0x99, 0x90, 0xef, 0xb0, 0x4a,
];

/// Builds the Retry pseudo-packet: ODCID length, ODCID, then the Retry packet without tag.
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.8
//# The Retry Pseudo-Packet is not sent over the wire. It is computed by taking
//# the transmitted Retry packet, removing the Retry Integrity Tag, and prepending
//# the two following fields:
fn pseudo_packet(original_dcid: &ConnectionId, retry_without_tag: &[u8]) -> Vec<u8> {
    let mut pseudo = Vec::with_capacity(1 + original_dcid.len() + retry_without_tag.len());
    // A ConnectionId holds at most 20 bytes, so its length fits in the 8-bit field.
    pseudo.push(original_dcid.len() as u8);
    pseudo.extend_from_slice(original_dcid);
    pseudo.extend_from_slice(retry_without_tag);
    pseudo
}

/// The Retry Integrity Tag's AEAD key and nonce for `version`.
fn retry_key(version: u32) -> Option<(aead::LessSafeKey, [u8; 12])> {
    let (key, nonce) = match version {
        VERSION_1 => (&RETRY_KEY_V1, RETRY_NONCE_V1),
        VERSION_2 => (&RETRY_KEY_V2, RETRY_NONCE_V2),
        _ => return None,
    };
    let key = aead::UnboundKey::new(&aead::AES_128_GCM, key).ok()?;
    Some((aead::LessSafeKey::new(key), nonce))
}

/// Computes the Retry Integrity Tag for a Retry packet of `version` (without its tag) sent
/// in response to an Initial whose Destination Connection ID was `original_dcid`.
///
/// Returns `None` for versions other than 1 and 2.
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.8
//# The Retry Integrity Tag is a 128-bit field that is computed as the output of
//# AEAD_AES_128_GCM {{!AEAD}} used with the following inputs:
pub fn retry_integrity_tag(
    version: u32,
    original_dcid: &ConnectionId,
    retry_without_tag: &[u8],
) -> Option<[u8; RETRY_INTEGRITY_TAG_LEN]> {
    let (key, nonce) = retry_key(version)?;
    let pseudo = pseudo_packet(original_dcid, retry_without_tag);
    //= https://www.rfc-editor.org/rfc/rfc9001#section-5.8
    //# - The plaintext, P, is empty.
    let tag = key
        .seal_in_place_separate_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(&pseudo),
            &mut [],
        )
        .ok()?;
    tag.as_ref().try_into().ok()
}

/// Checks the Retry Integrity Tag that ends `retry_packet` (a complete Retry packet of
/// `version`), given the Destination Connection ID of the client's original Initial.
///
/// False for a wrong tag, a packet shorter than the tag, or an unsupported version. The tag
/// comparison is done by the AEAD and is constant-time.
pub fn verify_retry_integrity(
    version: u32,
    original_dcid: &ConnectionId,
    retry_packet: &[u8],
) -> bool {
    let Some(split) = retry_packet.len().checked_sub(RETRY_INTEGRITY_TAG_LEN) else {
        return false;
    };
    let Some((key, nonce)) = retry_key(version) else {
        return false;
    };
    let (without_tag, tag) = retry_packet.split_at(split);
    let pseudo = pseudo_packet(original_dcid, without_tag);
    // Opening an empty ciphertext followed by the tag authenticates the pseudo-packet.
    let mut tag = tag.to_vec();
    key.open_in_place(
        aead::Nonce::assume_unique_for_key(nonce),
        aead::Aad::from(&pseudo),
        &mut tag,
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    //= https://www.rfc-editor.org/rfc/rfc9001#appendix-A.4
    //# ff000000010008f067a5502a4262b574 6f6b656e04a265ba2eff4d829058fb3f
    //# 0f2496ba
    const RETRY: &str = "ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba";
    const ODCID: [u8; 8] = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];

    #[test]
    fn rfc9001_a4_retry_tag() {
        let retry = hex::decode(RETRY).unwrap();
        let odcid = ConnectionId::new(&ODCID);
        let (body, tag) = retry.split_at(retry.len() - 16);
        assert_eq!(retry_integrity_tag(VERSION_1, &odcid, body).unwrap(), tag);
        assert!(verify_retry_integrity(VERSION_1, &odcid, &retry));
    }

    //= https://www.rfc-editor.org/rfc/rfc9369#appendix-A.4
    //# cf6b3343cf0008f067a5502a4262b574 6f6b656ec8646ce8bfe33952d9555436
    //# 65dcc7b6
    const RETRY_V2: &str =
        "cf6b3343cf0008f067a5502a4262b5746f6b656ec8646ce8bfe33952d955543665dcc7b6";

    #[test]
    fn rfc9369_a4_retry_tag() {
        let retry = hex::decode(RETRY_V2).unwrap();
        let odcid = ConnectionId::new(&ODCID);
        let (body, tag) = retry.split_at(retry.len() - 16);
        assert_eq!(retry_integrity_tag(VERSION_2, &odcid, body).unwrap(), tag);
        assert!(verify_retry_integrity(VERSION_2, &odcid, &retry));
        // The version 1 key does not authenticate it, nor the version 2 key a v1 Retry.
        assert!(!verify_retry_integrity(VERSION_1, &odcid, &retry));
        // The type bits of a v2 Retry are 0b00 (first byte 0xcf, not v1's 0xff).
        let hdr = crate::packet::decode_header(&retry, 0).unwrap();
        assert!(matches!(
            hdr.header,
            crate::packet::Header::Retry {
                version: VERSION_2,
                ..
            }
        ));
    }

    #[test]
    fn retry_tag_rejects_changes() {
        let retry = hex::decode(RETRY).unwrap();
        let odcid = ConnectionId::new(&ODCID);
        for i in 0..retry.len() {
            let mut bad = retry.clone();
            bad[i] ^= 0x01;
            assert!(!verify_retry_integrity(VERSION_1, &odcid, &bad), "byte {i}");
        }
        let other = ConnectionId::new(&[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x09]);
        assert!(!verify_retry_integrity(VERSION_1, &other, &retry));
        assert!(!verify_retry_integrity(0x6b33_43cf, &odcid, &retry));
        assert!(retry_integrity_tag(2, &odcid, &retry).is_none());
        for len in 0..=16 {
            assert!(!verify_retry_integrity(VERSION_1, &odcid, &retry[..len]));
        }
    }
}
