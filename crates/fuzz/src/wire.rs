//! The QUIC wire decoders: packet headers, frames, transport parameters.

use bytes::Bytes;
use polypath_quic::frame::{Frame, FrameIter};
use polypath_quic::packet::{
    Header, decode_header, peek_dcid, remove_header_protection, stateless_reset_token_candidate,
};
use polypath_quic::transport_parameters::TransportParameters;
use polypath_quic::{Side, TransportError, TransportErrorCode};
use rustls::quic::{Keys, Version};
use std::sync::OnceLock;

/// Decodes a packet payload to completion; every frame that decodes must re-encode to bytes
/// that decode to the same frame, with `encoded_len` matching, and every error must carry
/// FRAME_ENCODING_ERROR or PROTOCOL_VIOLATION. Returns the number of frames decoded.
pub fn frames(data: &[u8]) -> usize {
    let mut decoded = 0;
    for result in FrameIter::new(Bytes::copy_from_slice(data)) {
        match result {
            Ok(frame) => {
                let _ = frame.ty().is_ack_eliciting();
                let mut out = Vec::new();
                frame.encode(&mut out);
                assert_eq!(out.len(), frame.encoded_len());
                let again: Vec<Frame> = FrameIter::new(Bytes::from(out))
                    .collect::<Result<_, _>>()
                    .expect("a re-encoded frame decodes");
                assert_eq!(again, [frame]);
                decoded += 1;
            }
            Err(e) => {
                let code = TransportError::from(e).code;
                assert!(
                    code == TransportErrorCode::FRAME_ENCODING_ERROR
                        || code == TransportErrorCode::PROTOCOL_VIOLATION,
                    "frame error code {code:?}"
                );
            }
        }
    }
    decoded
}

/// Fixed Initial keys (the RFC 9001 appendix A connection ID) for header protection.
fn initial_keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
            .tls13()
            .and_then(|s| s.quic_suite())
            .expect("TLS13_AES_128_GCM_SHA256 supports QUIC");
        suite.keys(
            &[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08],
            rustls::Side::Server,
            Version::V1,
        )
    })
}

/// Decodes the headers of a datagram, walking coalesced packets, and removes header
/// protection from each protected packet found; offsets must stay within the packet. The
/// first input byte picks the local connection ID length used for short headers. Returns
/// the number of packets decoded.
pub fn packet_header(data: &[u8]) -> usize {
    let Some((&selector, datagram)) = data.split_first() else {
        return 0;
    };
    let local_cid_len = usize::from(selector % 21);
    let _ = peek_dcid(datagram, local_cid_len);
    let _ = stateless_reset_token_candidate(datagram);
    let hp = initial_keys().remote.header.as_ref();
    let mut rest = datagram;
    let mut decoded = 0;
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
        decoded += 1;
    }
    decoded
}

/// Decodes transport parameters as sent by either side; whatever decodes must re-encode to
/// an encoding that decodes to the same parameters, and every error must carry
/// TRANSPORT_PARAMETER_ERROR. Returns the number of sides for which the input decoded.
pub fn transport_parameters(data: &[u8]) -> usize {
    let mut decoded = 0;
    for side in [Side::Client, Side::Server] {
        match TransportParameters::decode(side, data) {
            Ok(params) => {
                let mut out = Vec::new();
                params.encode(&mut out);
                let again = TransportParameters::decode(side, &out).expect("re-encoded decodes");
                assert_eq!(again, params);
                decoded += 1;
            }
            Err(e) => assert_eq!(e.code, TransportErrorCode::TRANSPORT_PARAMETER_ERROR),
        }
    }
    decoded
}
