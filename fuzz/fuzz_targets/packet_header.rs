//! Decodes the headers of a datagram, walking coalesced packets, and removes header
//! protection from each protected packet found. The first input byte picks the local
//! connection ID length used for short headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polypath_quic::packet::{
    Header, decode_header, peek_dcid, remove_header_protection, stateless_reset_token_candidate,
};
use rustls::quic::{Keys, Version};
use std::sync::OnceLock;

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
            .tls13()
            .and_then(|s| s.quic_suite())
            .expect("TLS13_AES_128_GCM_SHA256 supports QUIC");
        suite.keys(&[0x83, 0x94, 0xc8, 0xf0], rustls::Side::Server, Version::V1)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, datagram)) = data.split_first() else {
        return;
    };
    let local_cid_len = usize::from(selector % 21);
    let _ = peek_dcid(datagram, local_cid_len);
    let _ = stateless_reset_token_candidate(datagram);
    let hp = keys().remote.header.as_ref();
    let mut rest = datagram;
    while !rest.is_empty() {
        let Ok(hdr) = decode_header(rest, local_cid_len) else {
            break;
        };
        assert!(hdr.packet_len > 0 && hdr.packet_len <= rest.len());
        match &hdr.header {
            Header::Long {
                token, pn_offset, ..
            } => {
                assert!(token.end <= *pn_offset);
                assert!(pn_offset + 20 <= hdr.packet_len);
            }
            Header::Short { pn_offset } => assert!(pn_offset + 20 <= hdr.packet_len),
            Header::Retry {
                token,
                integrity_tag,
                ..
            } => {
                assert!(!token.is_empty() && token.end == integrity_tag.start);
                assert_eq!(integrity_tag.end, rest.len());
            }
            Header::VersionNegotiation { .. } => {}
        }
        if let Some(pn_offset) = hdr.pn_offset() {
            let mut packet = rest[..hdr.packet_len].to_vec();
            let un = remove_header_protection(&mut packet, pn_offset, hp)
                .expect("decode_header guarantees room for the sample");
            assert!((1..=4).contains(&un.pn_len));
        }
        rest = &rest[hdr.packet_len..];
    }
});
