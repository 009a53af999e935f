//! Stable-toolchain robustness test for the wire decoders: about 100,000 random and mutated
//! inputs (from a seeded RNG, so every run sees the same inputs) are fed to the packet
//! header decoder, header protection removal, the frame decoder and the transport
//! parameter decoder. Nothing may panic, and whatever decodes must satisfy basic
//! invariants (offsets in bounds, frames re-encode to the same frame).
//!
//! The cargo-fuzz targets in `fuzz/` explore the same code coverage-guided on nightly.

use bytes::Bytes;
use polypath_quic::frame::{Frame, FrameIter};
use polypath_quic::packet::{
    self, Header, LongType, VERSION_1, decode_header, peek_dcid, remove_header_protection,
    stateless_reset_token_candidate, write_long_header, write_short_header,
};
use polypath_quic::transport_parameters::TransportParameters;
use polypath_quic::{ConnectionId, Side, TransportErrorCode};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ITERATIONS: usize = 34_000;

/// Applies a few random mutations: bit flips, byte overwrites, truncation, insertion,
/// deletion, duplication of a slice.
fn mutate(rng: &mut ChaCha8Rng, input: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..=4) {
        let len = input.len();
        match rng.random_range(0..7) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] = *[0x00, 0x3f, 0x40, 0x7f, 0x80, 0xbf, 0xc0, 0xff]
                    .get(rng.random_range(0..8))
                    .unwrap_or(&0);
            }
            2 if len > 0 => input.truncate(rng.random_range(0..len)),
            3 => {
                let i = rng.random_range(0..=len);
                input.insert(i, rng.random());
            }
            4 if len > 0 => {
                input.remove(rng.random_range(0..len));
            }
            5 if len > 1 => {
                let a = rng.random_range(0..len);
                let b = rng.random_range(a..len);
                let copy = input[a..=b].to_vec();
                let at = rng.random_range(0..=input.len());
                input.splice(at..at, copy);
            }
            _ => {
                let i = rng.random_range(0..=len);
                let mut extra = vec![0u8; rng.random_range(0..8)];
                rng.fill_bytes(&mut extra);
                input.splice(i..i, extra);
            }
        }
    }
}

fn random_bytes(rng: &mut ChaCha8Rng, max: usize) -> Vec<u8> {
    let mut v = vec![0u8; rng.random_range(0..max)];
    rng.fill_bytes(&mut v);
    v
}

fn packet_seeds() -> Vec<Vec<u8>> {
    let dcid = ConnectionId::new(&[0xaa; 8]);
    let scid = ConnectionId::new(&[0xbb; 4]);
    let mut seeds = Vec::new();
    for ty in [LongType::Initial, LongType::ZeroRtt, LongType::Handshake] {
        let mut buf = Vec::new();
        let token: &[u8] = if ty == LongType::Initial { b"tok" } else { &[] };
        let layout = write_long_header(&mut buf, ty, VERSION_1, &dcid, &scid, token, 9, 2);
        buf.resize(buf.len() + 30, 0x11);
        packet::set_long_header_length(&mut buf, &layout, 32);
        seeds.push(buf);
    }
    // A coalesced datagram: Initial + Handshake + 1-RTT.
    let mut coalesced = seeds[0].clone();
    coalesced.extend_from_slice(&seeds[2]);
    write_short_header(&mut coalesced, true, false, &dcid, 77, 1);
    coalesced.resize(coalesced.len() + 24, 0x22);
    seeds.push(coalesced);
    let mut vn = Vec::new();
    packet::write_version_negotiation(&mut vn, 0, &scid, &dcid, &[VERSION_1], Some(0x1a2a3a4a));
    seeds.push(vn);
    let mut retry = Vec::new();
    packet::write_retry(&mut retry, 0, VERSION_1, &scid, &dcid, b"retry-token");
    retry.extend_from_slice(&[0x33; 16]);
    seeds.push(retry);
    seeds
}

fn frame_seeds() -> Vec<Vec<u8>> {
    // One payload with a wide mix of frame types, plus a few singletons.
    let hex = [
        "0001",                                                     // PADDING, PING
        "02050001000100",                                           // ACK with ranges
        "033e020000010203",                                         // ACK_ECN
        "04010203",                                                 // RESET_STREAM
        "050102",                                                   // STOP_SENDING
        "060003616263",                                             // CRYPTO
        "070274ff",                                                 // NEW_TOKEN
        "0f0405020268",                                             // STREAM OFF|LEN|FIN
        "100511010212031304140515010216031700",                     // limits and blocked
        "18020108aaaaaaaaaaaaaaaa00000000000000000000000000000000", // NEW_CONNECTION_ID
        "1903",                                                     // RETIRE_CONNECTION_ID
        "1a0102030405060708",                                       // PATH_CHALLENGE
        "1b0102030405060708",                                       // PATH_RESPONSE
        "1c0a0802ff41",                                             // CONNECTION_CLOSE
        "1d070141",                                                 // APPLICATION_CLOSE
        "1e",                                                       // HANDSHAKE_DONE
        "31026869",                                                 // DATAGRAM with length
        "3e0105000000",                                             // PATH_ACK
        "7e750200",                                                 // PATH_ABANDON
        "7e760301",                                                 // PATH_STATUS_BACKUP
        "7e770302",                                                 // PATH_STATUS_AVAILABLE
        "7e7801030104bbbbbbbb00000000000000000000000000000000",     // PATH_NEW_CONNECTION_ID
        "7e790100",                                                 // PATH_RETIRE_CONNECTION_ID
        "7e7a05",                                                   // MAX_PATH_ID
        "7e7b05",                                                   // PATHS_BLOCKED
        "7e7c0102",                                                 // PATH_CIDS_BLOCKED
        "300102",                                                   // DATAGRAM to the end
    ];
    let all: Vec<u8> = hex.iter().flat_map(|h| unhex(h)).collect();
    // The seeds are valid, so mutations start from meaningful frames.
    let decoded: Vec<Frame> = FrameIter::new(Bytes::from(all.clone()))
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(decoded.len() > hex.len());
    let mut seeds = vec![all];
    seeds.extend(hex.iter().map(|h| unhex(h)));
    seeds
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn check_packet(datagram: &[u8], hp: &dyn rustls::quic::HeaderProtectionKey) -> usize {
    let _ = peek_dcid(datagram, 8);
    let _ = stateless_reset_token_candidate(datagram);
    let mut rest = datagram;
    let mut decoded = 0;
    while !rest.is_empty() {
        let Ok(hdr) = decode_header(rest, 8) else {
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
            let mut copy = rest[..hdr.packet_len].to_vec();
            let un = remove_header_protection(&mut copy, pn_offset, hp).unwrap();
            assert!((1..=4).contains(&un.pn_len));
        }
        rest = &rest[hdr.packet_len..];
        decoded += 1;
    }
    decoded
}

fn check_frames(payload: &[u8]) -> usize {
    let mut decoded = 0;
    for result in FrameIter::new(Bytes::copy_from_slice(payload)) {
        match result {
            Ok(frame) => {
                let mut out = Vec::new();
                frame.encode(&mut out);
                assert_eq!(out.len(), frame.encoded_len());
                let again: Vec<Frame> = FrameIter::new(Bytes::from(out))
                    .collect::<Result<_, _>>()
                    .unwrap();
                assert_eq!(again, [frame]);
                decoded += 1;
            }
            Err(e) => {
                let code = polypath_quic::TransportError::from(e).code;
                assert!(
                    code == TransportErrorCode::FRAME_ENCODING_ERROR
                        || code == TransportErrorCode::PROTOCOL_VIOLATION
                );
            }
        }
    }
    decoded
}

fn check_transport_parameters(input: &[u8]) -> usize {
    let mut decoded = 0;
    for side in [Side::Client, Side::Server] {
        match TransportParameters::decode(side, input) {
            Ok(params) => {
                let mut out = Vec::new();
                params.encode(&mut out);
                assert_eq!(TransportParameters::decode(side, &out).unwrap(), params);
                decoded += 1;
            }
            Err(e) => assert_eq!(e.code, TransportErrorCode::TRANSPORT_PARAMETER_ERROR),
        }
    }
    decoded
}

#[test]
fn decoders_survive_random_and_mutated_input() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x706f_6c79_7061_7468);
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(|s| s.quic_suite())
        .unwrap();
    let keys = suite.keys(&[0xaa; 8], rustls::Side::Server, rustls::quic::Version::V1);
    let hp = keys.remote.header.as_ref();

    let packets = packet_seeds();
    let frames = frame_seeds();
    let mut params_seed = Vec::new();
    TransportParameters {
        initial_source_connection_id: Some(ConnectionId::new(&[1, 2, 3])),
        initial_max_data: 1 << 20,
        max_datagram_frame_size: Some(1200),
        initial_max_path_id: Some(polypath_quic::PathId(4)),
        ..Default::default()
    }
    .encode(&mut params_seed);

    // How many packets, frames and parameter sets decoded successfully: the mutations must
    // leave plenty of valid inputs, or the invariant checks would be vacuous.
    let (mut packets_ok, mut frames_ok, mut params_ok) = (0, 0, 0);
    for i in 0..ITERATIONS {
        // Packet headers: mutated seeds half the time, pure noise otherwise.
        let mut datagram = if i % 2 == 0 {
            packets[rng.random_range(0..packets.len())].clone()
        } else {
            random_bytes(&mut rng, 120)
        };
        mutate(&mut rng, &mut datagram);
        packets_ok += check_packet(&datagram, hp);

        let mut payload = if i % 2 == 0 {
            frames[rng.random_range(0..frames.len())].clone()
        } else {
            random_bytes(&mut rng, 120)
        };
        mutate(&mut rng, &mut payload);
        frames_ok += check_frames(&payload);

        let mut params = if i % 2 == 0 {
            params_seed.clone()
        } else {
            random_bytes(&mut rng, 80)
        };
        mutate(&mut rng, &mut params);
        params_ok += check_transport_parameters(&params);
    }
    assert!(packets_ok > ITERATIONS / 10, "{packets_ok} packets decoded");
    assert!(frames_ok > ITERATIONS / 4, "{frames_ok} frames decoded");
    assert!(
        params_ok > ITERATIONS / 10,
        "{params_ok} parameter sets decoded"
    );
}
