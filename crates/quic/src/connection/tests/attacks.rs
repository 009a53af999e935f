//! Attack classes against a server (issue 24), each as a deterministic sans-IO test that
//! prints its figures and asserts that the defence holds:
//!
//! - anti-amplification at the handshake, on a migration to a spoofed address and on a
//!   new multipath path from a spoofed address (RFC 9000 sections 8 and 9.3);
//! - PATH_CHALLENGE flooding (bounded responses and state);
//! - NEW_CONNECTION_ID churn with Retire Prior To (bounded state, CONNECTION_ID_LIMIT_ERROR);
//! - repeated opening and abandoning of paths (bounded state);
//! - many tiny out-of-order STREAM fragments (bounded reassembly state).
//!
//! Covered elsewhere: floods of undecryptable Initials (`initial_flood.rs`:
//! `undecryptable_initials_leave_no_state` and the tests after it) and slow clients
//! holding connections (the CLI's `crates/cli/tests/server.rs`: a stalled handshake and a
//! SIGKILLed client do not delay another client beyond the handshake timeout).

use super::*;
use crate::TransportErrorCode as Code;
use crate::frame::{self, Frame};
use crate::sched::PathStatus;
use std::cell::RefCell;
use std::rc::Rc;

/// An address the attacking client does not own (the victim of a reflection).
fn victim() -> SocketAddr {
    "192.0.2.66:443".parse().unwrap()
}

fn multipath() -> TransportConfig {
    TransportConfig {
        initial_max_path_id: Some(3),
        ..TransportConfig::default()
    }
}

fn encode(frames: &[Frame]) -> Vec<u8> {
    let mut buf = Vec::new();
    for f in frames {
        f.encode(&mut buf);
    }
    buf
}

/// Hands `datagram` to the server as if it came from `from`.
fn to_server(pair: &mut Pair, from: SocketAddr, datagram: &[u8]) {
    let now = pair.now;
    pair.server
        .handle(now, server_addr(), from, None, BytesMut::from(datagram));
}

/// Runs the server alone (nothing reaches the client or the victim) for `limit` of virtual
/// time; returns the bytes and datagrams it sent to `to`.
fn server_sends_to(pair: &mut Pair, to: SocketAddr, limit: Duration) -> (u64, u64) {
    let deadline = pair.now + limit;
    let (mut bytes, mut datagrams) = (0u64, 0u64);
    let mut buf = Vec::new();
    loop {
        while let Some(t) = pair.server.poll_transmit(pair.now, &mut buf) {
            if t.destination == to {
                bytes += t.size as u64;
                datagrams += t.size.div_ceil(t.segment_size.unwrap_or(t.size).max(1)) as u64;
            }
        }
        match pair.server.poll_timeout() {
            Some(t) if t <= deadline => {
                pair.now = pair.now.max(t);
                pair.server.handle_timeout(pair.now);
            }
            _ => break,
        }
    }
    (bytes, datagrams)
}

#[test]
fn handshake_amplification_is_at_most_three_times() {
    // A spoofed client: its first Initial reaches the server, nothing else from that
    // address ever does (the victim at that address ignores what the server sends).
    let mut pair = Pair::default_pair();
    let log: Rc<RefCell<(u64, u64, u64)>> = Rc::default();
    let seen = log.clone();
    let mut first_sent = false;
    pair.drop = Some(Box::new(move |data, src, _| {
        let mut l = seen.borrow_mut();
        if src == server_addr() {
            l.1 += data.len() as u64;
            l.2 += 1;
            return true;
        }
        if first_sent {
            return true;
        }
        first_sent = true;
        l.0 += data.len() as u64;
        false
    }));
    pair.run_until(Duration::from_secs(60), |_| false);
    let (received, sent, datagrams) = *log.borrow();
    println!(
        "handshake to a spoofed address: server received {received} B, sent {sent} B in \
         {datagrams} datagrams over 60 s ({:.2}x)",
        sent as f64 / received as f64
    );
    assert_eq!(received, 1200);
    assert!(sent > 0, "the server answered");
    assert!(
        sent <= 3 * received,
        "{sent} B sent for {received} B received"
    );
}

#[test]
fn migration_to_a_spoofed_address_respects_the_amplification_limit() {
    // The client (the attacker) sends authenticated packets with a non-probing frame from
    // the victim's address: the server treats that as a migration, and may send the
    // victim at most three times what it received from it.
    let mut pair = Pair::default_pair();
    pair.handshake();
    let mut received = 0u64;
    for _ in 0..3 {
        let ping = encode(&[Frame::Ping]);
        let dgram = seal_frames(pair.client(), PathId::ZERO, &ping).expect("sealed");
        received += dgram.len() as u64;
        to_server(&mut pair, victim(), &dgram);
    }
    let (sent, datagrams) = server_sends_to(&mut pair, victim(), Duration::from_secs(30));
    let server = pair.server();
    let path = &server.paths[&PathId::ZERO];
    println!(
        "migration to a spoofed address: victim sent {received} B, server sent it {sent} B \
         in {datagrams} datagrams over 30 s; the server now sends to {}",
        path.remote
    );
    // It followed the migration, validated the victim's address in vain, and went back
    // to the client's validated address (RFC 9000 section 9.3.2).
    assert!(sent > 0, "the server never followed the migration");
    assert_eq!(path.remote, crate::testing::client_addr(), "reverted");
    assert!(path.address_validated);
    assert_eq!(server.stats().peer_address_reverts, 1);
    assert!(
        sent <= 3 * received,
        "{sent} B sent for {received} B received"
    );
}

#[test]
fn new_path_from_a_spoofed_address_respects_the_amplification_limit() {
    // Multipath: the attacker opens path 1 from the victim's address with a
    // PATH_CHALLENGE (which the server must answer) and a PING.
    let mut pair = Pair::new(multipath(), multipath());
    pair.handshake();
    pair.run_until(Duration::from_millis(100), |_| false);
    // The client opens path 1 (so that it has its keys' packet space and a connection ID
    // for it), but its packets on it claim to come from the victim.
    let now = pair.now;
    let path1 = pair
        .client()
        .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
        .expect("path 1 opens");
    let mut received = 0u64;
    for i in 0..4u8 {
        let frames = encode(&[Frame::PathChallenge([i; 8]), Frame::Ping]);
        let dgram = seal_frames(pair.client(), path1, &frames).expect("sealed");
        received += dgram.len() as u64;
        to_server(&mut pair, victim(), &dgram);
    }
    assert!(
        pair.server().paths.contains_key(&path1),
        "the server opened path 1"
    );
    let (sent, datagrams) = server_sends_to(&mut pair, victim(), Duration::from_secs(30));
    println!(
        "new path from a spoofed address: victim sent {received} B, server sent it {sent} B \
         in {datagrams} datagrams over 30 s ({:.2}x)",
        sent as f64 / received as f64
    );
    assert!(sent > 0, "the server probed the new path");
    assert!(
        sent <= 3 * received,
        "{sent} B sent for {received} B received"
    );
}

#[test]
fn path_challenge_flood_gets_bounded_responses() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    let challenges: Vec<Frame> = (0..100u8).map(|i| Frame::PathChallenge([i; 8])).collect();
    let payload = encode(&challenges);
    let (mut received, mut sent, mut peak_queue) = (0u64, 0u64, 0usize);
    let mut datagrams = 0u64;
    let mut buf = Vec::new();
    let packets = 1000u64;
    for _ in 0..packets {
        let dgram = seal_frames(pair.client(), PathId::ZERO, &payload).expect("sealed");
        received += dgram.len() as u64;
        to_server(&mut pair, client_addr(), &dgram);
        let queue = pair.server().paths[&PathId::ZERO].responses.len();
        peak_queue = peak_queue.max(queue);
        let now = pair.now;
        while let Some(t) = pair.server.poll_transmit(now, &mut buf) {
            sent += t.size as u64;
            datagrams += t.size.div_ceil(t.segment_size.unwrap_or(t.size).max(1)) as u64;
        }
        pair.now += Duration::from_millis(1);
        pair.server.handle_timeout(pair.now);
    }
    println!(
        "PATH_CHALLENGE flood: 100 000 challenges in {packets} packets ({received} B); \
         server sent {datagrams} datagrams ({sent} B, responses padded to 1 200 B on the \
         validated path); at most {peak_queue} responses queued"
    );
    assert!(
        pair.server().close_reason().is_none(),
        "no error for a legal frame"
    );
    assert!(peak_queue <= 4, "{peak_queue} responses queued");
    // At most one datagram (of at most four PATH_RESPONSEs) per packet of 100 challenges.
    assert!(
        datagrams <= packets,
        "{datagrams} datagrams for {packets} packets"
    );
}

#[test]
fn new_connection_id_churn_is_bounded() {
    // The attacker keeps issuing connection IDs, each retiring all earlier ones, and never
    // acknowledges the server's RETIRE_CONNECTION_ID frames.
    let mut pair = Pair::default_pair();
    pair.handshake();
    let limit = TransportConfig::default().active_connection_id_limit;
    let mut accepted = 0u64;
    for seq in 10..10_000u64 {
        let frame = Frame::NewConnectionId(frame::NewConnectionId {
            path_id: None,
            sequence: seq,
            retire_prior_to: seq,
            id: ConnectionId::new(&seq.to_be_bytes()),
            reset_token: crate::ResetToken([seq as u8; 16]),
        });
        let dgram = seal_frames(pair.client(), PathId::ZERO, &encode(&[frame])).expect("sealed");
        to_server(&mut pair, client_addr(), &dgram);
        let mut buf = Vec::new();
        let now = pair.now;
        while pair.server.poll_transmit(now, &mut buf).is_some() {}
        if pair.server().is_closed() {
            break;
        }
        accepted += 1;
        let server = pair.server();
        assert!(server.pending.retire_unacked.len() as u64 <= 2 * limit);
    }
    let reason = pair.server().close_reason().cloned();
    println!(
        "NEW_CONNECTION_ID churn without acknowledgments: {accepted} IDs accepted, then the \
         server closed with {reason:?}"
    );
    match reason {
        Some(ConnectionError::TransportError(e)) => {
            assert_eq!(e.code, Code::CONNECTION_ID_LIMIT_ERROR)
        }
        other => panic!("the server did not close on churn: {other:?}"),
    }
    assert!(accepted <= 2 * limit + 1);
}

#[test]
fn connection_ids_beyond_the_limit_are_connection_id_limit_error() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    let mut frames = Vec::new();
    for seq in 10..20u64 {
        frames.push(Frame::NewConnectionId(frame::NewConnectionId {
            path_id: None,
            sequence: seq,
            retire_prior_to: 0,
            id: ConnectionId::new(&seq.to_be_bytes()),
            reset_token: crate::ResetToken([seq as u8; 16]),
        }));
    }
    let dgram = seal_frames(pair.client(), PathId::ZERO, &encode(&frames)).expect("sealed");
    to_server(&mut pair, client_addr(), &dgram);
    match pair.server().close_reason() {
        Some(ConnectionError::TransportError(e)) => {
            assert_eq!(e.code, Code::CONNECTION_ID_LIMIT_ERROR)
        }
        other => panic!("the server did not close: {other:?}"),
    }
}

#[test]
fn repeated_path_open_and_abandon_keeps_state_bounded() {
    let mut pair = Pair::new(multipath(), multipath());
    pair.handshake();
    pair.run_until(Duration::from_millis(200), |_| false);
    let cycles = 100;
    let mut peak = (0usize, 0usize, 0usize);
    let mut opened = 0;
    for i in 0..cycles {
        let now = pair.now;
        let local: SocketAddr = format!("10.0.1.{}:5000", 1 + i % 200).parse().unwrap();
        let Ok(id) = pair
            .client()
            .open_path(now, local, server_addr(), PathStatus::Available)
        else {
            pair.run_until(Duration::from_millis(500), |_| false);
            continue;
        };
        opened += 1;
        pair.run_until(Duration::from_secs(2), |p| {
            p.server()
                .paths
                .get(&id)
                .is_some_and(|x| x.address_validated)
        });
        let open_paths = pair.server().paths.len();
        peak.0 = peak.0.max(open_paths);
        let now = pair.now;
        pair.client()
            .abandon_path(now, id, Code::APPLICATION_ABANDON_PATH);
        pair.run_until(Duration::from_secs(5), |p| {
            !p.client().paths.contains_key(&id) && !p.server().paths.contains_key(&id)
        });
        let s = pair.server();
        peak = (
            peak.0.max(s.paths.len()),
            peak.1.max(s.retired_paths.ranges()),
            peak.2.max(pair.server.routing_entries()),
        );
    }
    let s = pair.server();
    println!(
        "{opened} of {cycles} path open/abandon cycles: server peaks at {} paths, {} ranges \
         of retired path IDs, {} routing entries; max path ID now {}",
        peak.0,
        peak.1,
        peak.2,
        s.multipath.map_or(0, |m| m.local_max_path_id)
    );
    assert!(s.close_reason().is_none(), "{:?}", s.close_reason());
    assert!(opened >= cycles * 9 / 10, "paths kept opening: {opened}");
    assert!((2..=4).contains(&peak.0), "paths held: {}", peak.0);
    assert!(peak.1 <= 2, "retired path ID ranges: {}", peak.1);
    assert!(peak.2 <= 4 * 4 + 2, "routing entries: {}", peak.2);
}

#[test]
fn tiny_out_of_order_stream_fragments_are_bounded() {
    // One-byte STREAM frames at every other offset of one stream: each is its own piece
    // of the reassembly, with a hole on either side.
    let mut pair = Pair::default_pair();
    pair.handshake();
    let id = StreamId::new(Side::Client, Dir::Uni, 0);
    let window = TransportConfig::default().initial_stream_receive_window;
    let (mut frames_sent, mut peak_segments, mut peak_buffered) = (0u64, 0usize, 0u64);
    let mut offset = 1u64;
    for _ in 0..4000 {
        let mut payload = Vec::new();
        while payload.len() < 1150 {
            Frame::Stream(frame::Stream {
                id,
                offset,
                fin: false,
                data: Bytes::from_static(b"x"),
            })
            .encode(&mut payload);
            offset += 2;
            frames_sent += 1;
        }
        let dgram = seal_frames(pair.client(), PathId::ZERO, &payload).expect("sealed");
        to_server(&mut pair, client_addr(), &dgram);
        let server = pair.server();
        if server.is_closed() {
            break;
        }
        if let Some((segments, buffered)) = server.streams.recv_fragmentation(id) {
            peak_segments = peak_segments.max(segments);
            peak_buffered = peak_buffered.max(buffered);
        }
    }
    let reason = pair.server().close_reason().cloned();
    println!(
        "tiny fragments: {frames_sent} one-byte STREAM frames; reassembly peaked at \
         {peak_segments} pieces ({peak_buffered} B of data, about {} KB with per-piece \
         overhead, window {} KB), then {reason:?}",
        peak_segments * 80 / 1000,
        window / 1000
    );
    assert!(
        peak_segments <= crate::streams::max_segments(window),
        "{peak_segments} pieces"
    );
    match reason {
        Some(ConnectionError::TransportError(e)) => {
            assert_eq!(e.code, Code::PROTOCOL_VIOLATION)
        }
        other => panic!("the server did not stop the fragmentation: {other:?}"),
    }
}
