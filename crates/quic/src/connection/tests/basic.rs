//! Handshake, transfers, datagrams, key update, closing, timeouts and address handling.

use super::*;

#[test]
fn handshake_completes_and_confirms() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    assert_eq!(pair.client().alpn_protocol(), Some(ALPN));
    assert!(pair.client().stats().handshake_duration.is_some());
    let events: Vec<Event> = std::iter::from_fn(|| pair.client().poll_event()).collect();
    assert!(events.contains(&Event::Connected));
    assert!(events.contains(&Event::HandshakeConfirmed));
}

#[test]
fn stream_transfer_is_intact() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    let got = pair.transfer(2_000_000, Duration::from_secs(30));
    assert_eq!(got.len(), 2_000_000);
    assert!(got == expected_payload(2_000_000));
}

/// Stream data queued on a path while its pacer holds it back leaves in full packets of
/// one STREAM frame each, not a packet's worth plus a sliver of the next chunk.
#[test]
fn queued_stream_data_leaves_one_frame_per_packet() {
    let mut pair = Pair::default_pair();
    pair.delay = Duration::from_millis(20);
    pair.handshake();
    let id = pair.client().open_stream(Dir::Uni).expect("stream");
    let payload = expected_payload(3_000_000);
    let mut written = 0;
    // (packets that carried stream data, of them the ones with more than one frame)
    let (mut with_data, mut split) = (0u64, 0u64);
    let mut seen = std::collections::BTreeSet::new();
    let mut server_stream = None;
    while written < payload.len() || with_data < 1000 {
        if written < payload.len() {
            written += pair.client().write(id, &payload[written..]).unwrap_or(0);
        }
        for (pn, p) in pair.client().paths[&PathId::ZERO]
            .space
            .recovery
            .outstanding()
        {
            if !p.payload.stream.is_empty() && seen.insert(pn) {
                with_data += 1;
                split += u64::from(p.payload.stream.len() > 1);
            }
        }
        server_stream = server_stream.or_else(|| pair.server().accept_stream(Dir::Uni));
        if let Some(sid) = server_stream {
            while let Ok(Some(_)) = pair.server().read(sid, usize::MAX) {}
        }
        assert!(pair.step(), "the transfer stalled");
    }
    assert!(with_data >= 1000, "{with_data} packets with stream data");
    // A packet whose queue ran dry takes a sliver of new data, as it should.
    assert!(
        split * 50 < with_data,
        "{split} of {with_data} packets had more than one STREAM frame"
    );
}

/// The receiver of a one-way transfer with losses elicits an acknowledgment of its ACK
/// frames about once per round trip, so it forgets the gaps the sender has seen instead of
/// reporting them again in every ACK frame.
#[test]
fn a_receiver_that_only_acknowledges_elicits_acks_once_per_round_trip() {
    // Windows large enough that no flow-control update (ack-eliciting) is needed.
    let window = 16 * 1024 * 1024;
    let receiver = TransportConfig {
        receive_window: window,
        initial_receive_window: window,
        stream_receive_window: window,
        initial_stream_receive_window: window,
        ..TransportConfig::default()
    };
    let mut pair = Pair::new(TransportConfig::default(), receiver);
    pair.delay = Duration::from_millis(10);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    pair.drop = Some(Box::new(move |_, _, _| rng.random_bool(0.02)));
    pair.handshake();
    let id = pair.client().open_stream(Dir::Uni).expect("stream");
    let payload = expected_payload(2_000_000);
    let (mut written, mut received) = (0, 0);
    let mut server_stream = None;
    let start = pair.now;
    let stats_before = pair.server().paths[&PathId::ZERO].stats;
    let mut most_ranges = 0;
    while received < payload.len() {
        if written < payload.len() {
            written += pair.client().write(id, &payload[written..]).unwrap_or(0);
        }
        server_stream = server_stream.or_else(|| pair.server().accept_stream(Dir::Uni));
        if let Some(sid) = server_stream {
            while let Ok(Some(chunk)) = pair.server().read(sid, usize::MAX) {
                received += chunk.len();
            }
        }
        let ranges = pair.server().paths[&PathId::ZERO].space.acks.received.len();
        most_ranges = most_ranges.max(ranges);
        assert!(pair.step(), "the transfer stalled");
    }
    assert!(
        pair.client().stats().packets_lost > 20,
        "losses must happen"
    );
    assert!(
        most_ranges <= 16,
        "the receiver tracked {most_ranges} ranges"
    );
    let elapsed = pair.now - start;
    let server = &pair.server().paths[&PathId::ZERO];
    let round_trips = elapsed.as_secs_f64() / server.rtt.min().as_secs_f64();
    let sent = server.stats.packets_sent - stats_before.packets_sent;
    let eliciting = server.stats.ack_eliciting_sent - stats_before.ack_eliciting_sent;
    eprintln!(
        "{round_trips:.0} round trips, {most_ranges} ranges at most, {eliciting} of {sent} packets ack-eliciting"
    );
    assert!(round_trips > 10.0, "{round_trips} round trips");
    // Once per round trip, beside flow-control updates: not every packet.
    assert!(
        (eliciting as f64) < 2.0 * round_trips && eliciting * 4 < sent,
        "{eliciting} of {sent} packets ack-eliciting in {round_trips:.0} round trips"
    );
}

#[test]
fn transfer_survives_five_percent_loss() {
    let mut pair = Pair::default_pair();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    pair.drop = Some(Box::new(move |_, _, _| rng.random_bool(0.05)));
    pair.handshake();
    let got = pair.transfer(1_000_000, Duration::from_secs(120));
    assert_eq!(got.len(), 1_000_000);
    assert!(got == expected_payload(1_000_000));
    assert!(
        pair.client().stats().packets_lost > 0,
        "loss must actually have happened"
    );
}

#[test]
fn datagrams_flow_both_ways() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    let max = pair
        .client()
        .max_datagram_size()
        .expect("peer accepts datagrams");
    assert!(max >= 1000, "max datagram size {max}");
    for i in 0..100u32 {
        pair.client()
            .send_datagram(Bytes::from(i.to_be_bytes().to_vec()))
            .unwrap();
    }
    pair.server()
        .send_datagram(Bytes::from_static(b"pong"))
        .unwrap();
    let mut got = Vec::new();
    let mut client_got = None;
    pair.run_until(Duration::from_secs(2), |p| {
        while let Some(d) = p.server().recv_datagram() {
            got.push(d);
        }
        if client_got.is_none() {
            client_got = p.client().recv_datagram();
        }
        got.len() == 100 && client_got.is_some()
    });
    assert_eq!(got.len(), 100, "all datagrams arrive on a lossless path");
    assert_eq!(got[42].as_ref(), 42u32.to_be_bytes());
    assert_eq!(client_got.as_deref(), Some(&b"pong"[..]));
    let too_big = Bytes::from(vec![0u8; max + 1]);
    assert!(matches!(
        pair.client().send_datagram(too_big),
        Err(SendDatagramError::TooLarge { .. })
    ));
}

/// Runs the pair without new data for `d` (long enough for the 3 x PTO key-update wait).
fn idle_for(pair: &mut Pair, d: Duration) {
    let until = pair.now + d;
    pair.run_until(d, |p| p.now >= until);
}

#[test]
fn key_update_mid_transfer() {
    key_updates_mid_transfer(&mut Pair::default_pair());
}

/// Simulated packet protection (the simulator's) goes through the same key updates as the
/// AEAD, with datagrams of the same sizes; and it does leave the payload in the clear.
#[test]
fn simulated_protection_updates_keys_and_keeps_datagram_sizes() {
    use crate::crypto::PacketProtection;
    let runs = [PacketProtection::Aead, PacketProtection::Simulated].map(|protection| {
        let mut pair = Pair::with_packet_protection(protection);
        key_updates_mid_transfer(&mut pair);
        pair.client_sent.clone()
    });
    let sizes = |sent: &[Vec<u8>]| sent.iter().map(Vec::len).collect::<Vec<_>>();
    assert!(runs[0].len() > 100, "{} datagrams", runs[0].len());
    assert_eq!(sizes(&runs[0]), sizes(&runs[1]));
    // The client's request travels in the clear only under simulated protection.
    let clear = |sent: &[Vec<u8>]| {
        sent.iter()
            .any(|d| d.windows(8).any(|w| w == &expected_payload(1_000)[..8]))
    };
    assert!(!clear(&runs[0]));
    assert!(clear(&runs[1]));
}

pub(super) fn key_updates_mid_transfer(pair: &mut Pair) {
    pair.handshake();
    // Exchange some data so a packet of the current key phase is acknowledged, then wait
    // the three PTOs draft-ietf-quic-multipath-21 section 2.5 recommends.
    assert_eq!(
        pair.transfer(100_000, Duration::from_secs(5)).len(),
        100_000
    );
    idle_for(pair, Duration::from_secs(1));
    let now = pair.now;
    assert!(
        pair.client().force_key_update(now),
        "update allowed once current-phase packets were acknowledged"
    );
    let now = pair.now;
    assert!(
        !pair.client().force_key_update(now),
        "no second update before the new phase is acknowledged"
    );

    let got = pair.transfer(500_000, Duration::from_secs(10));
    assert!(got == expected_payload(500_000));
    assert_eq!(pair.client().stats().key_updates, 1);
    assert_eq!(
        pair.server().stats().key_updates,
        1,
        "the server followed the client's key phase"
    );
    idle_for(pair, Duration::from_secs(1));
    let now = pair.now;
    assert!(
        pair.server().force_key_update(now),
        "the server may update too"
    );
    let got = pair.transfer(200_000, Duration::from_secs(10));
    assert_eq!(got.len(), 200_000);
    assert_eq!(pair.client().stats().key_updates, 2);
}

/// After the peer's key update, an endpoint that only acknowledges has no packet of the
/// new key phase the peer would acknowledge, so it may not start an update of its own
/// (RFC 9001 section 6.1); a PING gets one acknowledged, and then it may.
#[test]
fn a_ping_gets_the_current_key_phase_acknowledged_after_the_peers_update() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    assert_eq!(pair.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
    idle_for(&mut pair, Duration::from_secs(1));
    let now = pair.now;
    assert!(pair.server().force_key_update(now));
    assert!(pair.server().ping(PathId(0)));
    idle_for(&mut pair, Duration::from_secs(1));
    assert_eq!(pair.client().stats().key_updates, 1, "the client followed");
    let now = pair.now;
    assert!(
        !pair.client().force_key_update(now),
        "nothing of the new phase was acknowledged yet"
    );
    assert!(pair.client().ping(PathId(0)));
    assert!(!pair.client().ping(PathId(7)), "no such path");
    idle_for(&mut pair, Duration::from_secs(1));
    let now = pair.now;
    assert!(pair.client().force_key_update(now));
    assert_eq!(pair.client().stats().key_updates, 2);
}

#[test]
fn application_close_reaches_peer() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    let now = pair.now;
    pair.client().close(now, VarInt::from_u32(42), b"bye");
    pair.run_until(Duration::from_secs(1), |p| p.server().is_closed());
    assert_eq!(
        pair.server().close_reason(),
        Some(&ConnectionError::ApplicationClosed {
            code: 42,
            reason: "bye".into()
        })
    );
    assert_eq!(
        pair.client().close_reason(),
        Some(&ConnectionError::LocallyClosed)
    );
    // Both sides drain and the endpoints forget the connections.
    pair.run_until(Duration::from_secs(10), |p| {
        p.client.connection_handles().is_empty() || p.client().is_drained()
    });
    assert!(
        pair.client
            .connection(pair.client_conn)
            .is_none_or(Connection::is_drained)
    );
}

#[test]
fn idle_timeout_closes_silently() {
    let transport = TransportConfig {
        max_idle_timeout: Some(Duration::from_secs(2)),
        ..TransportConfig::default()
    };
    let mut pair = Pair::new(transport.clone(), transport);
    pair.handshake();
    pair.drop = Some(Box::new(|_, _, _| true));
    let start = pair.now;
    pair.run_until(Duration::from_secs(30), |p| p.client().is_drained());
    assert_eq!(
        pair.client().close_reason(),
        Some(&ConnectionError::TimedOut)
    );
    let elapsed = pair.now - start;
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(5),
        "timed out after {elapsed:?}"
    );
}

#[test]
fn port_unreachable_ends_only_an_attempt_that_heard_nothing() {
    let mut pair = Pair::default_pair();
    let now = pair.now;
    let server_ip = server_addr().ip();
    // Another host's ICMP is not about this connection.
    assert!(
        !pair
            .client()
            .handle_port_unreachable(now, client_addr2().ip())
    );
    assert!(pair.client().handle_port_unreachable(now, server_ip));
    assert!(pair.client().is_drained());
    assert_eq!(
        pair.client().close_reason(),
        Some(&ConnectionError::PortUnreachable(server_ip))
    );
    // Once the server has answered, ICMP (unauthenticated) ends nothing, on either side.
    let mut pair = Pair::default_pair();
    pair.handshake();
    let now = pair.now;
    assert!(!pair.client().handle_port_unreachable(now, server_ip));
    assert!(
        !pair
            .server()
            .handle_port_unreachable(now, client_addr().ip())
    );
    assert!(!pair.client().is_closed() && !pair.server().is_closed());
}

#[test]
fn server_answers_unknown_versions_with_version_negotiation() {
    let (_, server_tls) = tls_configs();
    let mut server = Endpoint::new(
        EndpointConfig::from_seed(2),
        Some(ServerConfig::new(server_tls)),
    );
    // A long header with version 0x1a2a3a4a, DCID 0x11 x8, SCID 0x22 x4, padded to 1200.
    let mut dgram = vec![0xc0, 0x1a, 0x2a, 0x3a, 0x4a, 8];
    dgram.extend_from_slice(&[0x11; 8]);
    dgram.push(4);
    dgram.extend_from_slice(&[0x22; 4]);
    dgram.resize(1200, 0);
    let now = Instant::now();
    assert!(
        server
            .handle(
                now,
                server_addr(),
                client_addr(),
                None,
                BytesMut::from(&dgram[..])
            )
            .is_none()
    );
    let mut buf = Vec::new();
    let t = server
        .poll_transmit(now, &mut buf)
        .expect("a Version Negotiation packet");
    assert_eq!(t.destination, client_addr());
    let header = crate::packet::decode_header(&buf[..t.size], 8).expect("parses");
    assert_eq!(
        header.dcid,
        ConnectionId::new(&[0x22; 4]),
        "DCID echoes the client's SCID"
    );
    let crate::packet::Header::VersionNegotiation { scid, versions } = header.header else {
        panic!("not VN")
    };
    assert_eq!(scid, ConnectionId::new(&[0x11; 8]));
    assert!(versions.contains(&crate::packet::VERSION_1));
    // Short datagrams get no answer (RFC 9000 section 14.1).
    dgram.truncate(1000);
    server.handle(
        now,
        server_addr(),
        client_addr(),
        None,
        BytesMut::from(&dgram[..]),
    );
    assert!(server.poll_transmit(now, &mut buf).is_none());
}

#[test]
fn client_gives_up_on_version_negotiation_without_common_version() {
    let mut pair = Pair::default_pair();
    let now = pair.now;
    let client_scid = pair.client().local_handshake_cid;
    let server_dcid = pair.client().original_dcid;
    let deliver = |pair: &mut Pair, vn: &[u8]| {
        pair.client
            .handle(now, client_addr(), server_addr(), None, BytesMut::from(vn))
    };
    let mut vn = Vec::new();
    // Listing the version the client uses: ignored.
    crate::packet::write_version_negotiation(
        &mut vn,
        0,
        &client_scid,
        &server_dcid,
        &[crate::packet::VERSION_1, 0xff00_001d],
        None,
    );
    deliver(&mut pair, &vn);
    assert!(!pair.client().is_closed());
    vn.clear();
    crate::packet::write_version_negotiation(
        &mut vn,
        0,
        &client_scid,
        &server_dcid,
        &[0xff00_001d],
        None,
    );
    deliver(&mut pair, &vn);
    assert_eq!(
        pair.client().close_reason(),
        Some(&ConnectionError::VersionMismatch)
    );
}

#[test]
fn retry_then_handshake() {
    let (client_tls, server_tls) = tls_configs();
    let mut server = ServerConfig::new(server_tls);
    server.retry = true;
    let mut pair = Pair::with_configs(
        ClientConfig::new(client_tls),
        server,
        EndpointConfig::from_seed(1),
    );
    pair.handshake();
    assert!(
        pair.client().retry_scid.is_some(),
        "the client went through a Retry"
    );
    assert_eq!(pair.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
}

#[test]
fn stateless_reset_is_recognised() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    let handle = pair.server_conn.take().unwrap();
    // The server loses all state of the connection (as after a restart with the same key).
    pair.server.remove(handle);
    let now = pair.now;
    let id = pair.client().open_stream(Dir::Bi).unwrap();
    pair.client().write(id, b"hello?").unwrap();
    let _ = now;
    pair.run_until(Duration::from_secs(5), |p| p.client().is_drained());
    assert_eq!(pair.client().close_reason(), Some(&ConnectionError::Reset));
}

#[test]
fn nat_rebinding_migrates_and_continues() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    assert_eq!(
        pair.transfer(200_000, Duration::from_secs(5)).len(),
        200_000
    );
    assert_eq!(pair.server().stats().peer_address_changes, 0);
    let new_addr: SocketAddr = "10.9.9.9:6000".parse().unwrap();
    pair.rewrite_client_source = Some(new_addr);
    let got = pair.transfer(300_000, Duration::from_secs(10));
    assert!(got == expected_payload(300_000));
    assert_eq!(
        pair.server().remote_address(),
        Some(new_addr),
        "the server follows the new address"
    );
    assert_eq!(pair.server().stats().peer_address_changes, 1);
    assert_eq!(pair.server().stats().peer_addresses_validated, 1);
    assert_eq!(pair.client().stats().peer_address_changes, 0);
    assert!(pair.server().paths()[0].stats.udp_bytes_sent > 0);
}

/// A NAT rebinding while the client only acknowledges (a download), where the client's
/// only datagram from its new address is one ACK: that datagram must count towards the
/// server's anti-amplification budget there, or the server cannot send even its
/// PATH_CHALLENGE and, the client having nothing more to say, the connection goes silent
/// until its idle timeout.
#[test]
fn nat_rebinding_of_a_receiver_that_only_acknowledges() {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut pair = Pair::default_pair();
    pair.handshake();
    let len = 400_000;
    let payload = expected_payload(len);
    let id = pair.server().open_stream(Dir::Uni).unwrap();
    let old = crate::testing::client_addr();
    let new: SocketAddr = "10.9.9.9:6000".parse().unwrap();
    let to_new = Rc::new(Cell::new(0u32));
    let mut written = 0;
    let mut received = Vec::new();
    let mut client_stream = None;
    let mut rebound_at = None;
    let deadline = pair.now + Duration::from_secs(5);
    while pair.now < deadline && received.len() < len {
        if written < len {
            written += pair.server().write(id, &payload[written..]).unwrap_or(0);
            if written == len {
                pair.server().finish(id).unwrap();
            }
        }
        if client_stream.is_none() {
            client_stream = pair.client().accept_stream(Dir::Uni);
        }
        if let Some(sid) = client_stream {
            while let Ok(Some(chunk)) = pair.client().read(sid, usize::MAX) {
                received.extend_from_slice(&chunk);
            }
        }
        if received.len() >= len / 4 && rebound_at.is_none() {
            // The NAT's old mapping is gone (what the server still sends there is lost),
            // and of the client's datagrams from the new address only the first passes.
            rebound_at = Some(pair.now);
            pair.rewrite_client_source = Some(new);
            let mut passed = false;
            let counter = to_new.clone();
            pair.drop = Some(Box::new(move |_, from, to| {
                if to == new {
                    counter.set(counter.get() + 1);
                }
                // (The filter sees the client's datagrams before the NAT rewrites them.)
                if from == old {
                    let drop = passed;
                    passed = true;
                    return drop;
                }
                to == old
            }));
        }
        if rebound_at.is_some_and(|t| pair.now >= t + Duration::from_secs(1)) && to_new.get() > 0 {
            // The server answered the lone datagram: let the rest through.
            pair.drop = Some(Box::new(move |_, _, to| to == old));
        }
        if !pair.step() {
            break;
        }
    }
    assert!(
        to_new.get() > 0,
        "the server sent nothing to the client's new address"
    );
    assert!(
        received == payload,
        "received {} of {len} bytes",
        received.len()
    );
    assert_eq!(pair.server().stats().peer_address_changes, 1);
    assert!(pair.server().stats().peer_addresses_validated >= 1);
}

/// Active migration (RFC 9000 section 9.2): the client moves path 0 to a new local
/// address mid-upload; the server follows and validates the new address, the client
/// validates the new path, and the upload completes. The refusals come first.
#[test]
fn client_migrates_to_a_new_local_address() {
    use crate::testing::{client_addr, client_addr2};
    let mut pair = Pair::default_pair();
    let now = pair.now;
    assert_eq!(
        pair.client().migrate(now, PathId::ZERO, client_addr2()),
        Err(MigrateError::HandshakeNotConfirmed)
    );
    pair.handshake();
    let now = pair.now;
    assert_eq!(
        pair.server().migrate(now, PathId::ZERO, client_addr2()),
        Err(MigrateError::NotClient)
    );
    assert_eq!(
        pair.client().migrate(now, PathId::ZERO, client_addr()),
        Err(MigrateError::SameAddress)
    );
    assert_eq!(
        pair.client().migrate(now, PathId(7), client_addr2()),
        Err(MigrateError::UnknownPath)
    );
    if let Some(p) = pair.client().peer_params.as_mut() {
        p.disable_active_migration = true;
    }
    assert_eq!(
        pair.client().migrate(now, PathId::ZERO, client_addr2()),
        Err(MigrateError::PeerDisabledMigration)
    );
    if let Some(p) = pair.client().peer_params.as_mut() {
        p.disable_active_migration = false;
    }
    assert_eq!(
        pair.transfer(100_000, Duration::from_secs(5)).len(),
        100_000
    );
    let dcid_before = pair.client().paths[&PathId::ZERO].remote;
    let now = pair.now;
    assert_eq!(
        pair.client().migrate(now, PathId::ZERO, client_addr2()),
        Ok(())
    );
    let got = pair.transfer(300_000, Duration::from_secs(10));
    assert!(got == expected_payload(300_000));
    assert_eq!(pair.server().remote_address(), Some(client_addr2()));
    assert_eq!(pair.client().remote_address(), Some(dcid_before));
    let (client, server) = (pair.client().stats(), pair.server().stats());
    assert_eq!((client.migrations, client.migrations_validated), (1, 1));
    assert_eq!(
        (server.peer_address_changes, server.peer_addresses_validated),
        (1, 1)
    );
    // The client's last datagrams left from the new address with a new connection ID.
    let last = pair.client_sent.iter().rev().find(|d| d[0] & 0x80 == 0);
    let cid = |d: &Vec<u8>| d[1..9].to_vec();
    let early = pair.client_sent.iter().find(|d| d[0] & 0x80 == 0).map(cid);
    assert_ne!(last.map(cid), early, "the connection ID did not change");
}

/// RFC 9000 section 9.3.2: an attacker replays one genuine client packet from a spoofed
/// address ahead of the original. The server moves to the spoofed address and validates
/// it; the spoofed host cannot answer. With the client silent (its packets lost) until the
/// validation gives up, the server reverts to the client's validated address; with the
/// client's next packet arriving at once, the server goes back to it without a new
/// validation. Either way the connection carries on.
#[test]
fn spurious_migration_reverts_to_the_validated_address() {
    use crate::testing::{client_addr, server_addr};
    use std::cell::RefCell;
    use std::rc::Rc;
    for client_silent in [true, false] {
        let mut pair = Pair::default_pair();
        pair.handshake();
        assert_eq!(pair.transfer(50_000, Duration::from_secs(5)).len(), 50_000);
        let spoofed: SocketAddr = "10.66.6.6:6666".parse().unwrap();
        // The client's next datagram is taken off the wire...
        let taken: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
        let slot = taken.clone();
        pair.drop = Some(Box::new(move |d, from, _| {
            if from == client_addr() && slot.borrow().is_none() {
                *slot.borrow_mut() = Some(d.to_vec());
                return true;
            }
            false
        }));
        let id = pair.client().open_stream(Dir::Uni).unwrap();
        pair.client().write(id, b"hello").unwrap();
        pair.client().finish(id).unwrap();
        pair.run_until(Duration::from_secs(1), |_| taken.borrow().is_some());
        let datagram = taken.borrow_mut().take().expect("the client sent nothing");
        // ...and replayed from the spoofed address, which never answers.
        let silent_until = pair.now + Duration::from_secs(10);
        pair.drop = Some(Box::new(move |_, from, to| {
            to == spoofed || (client_silent && from == client_addr())
        }));
        let now = pair.now;
        pair.server.handle(
            now,
            server_addr(),
            spoofed,
            None,
            BytesMut::from(&datagram[..]),
        );
        assert_eq!(pair.server().remote_address(), Some(spoofed));
        if client_silent {
            pair.run_until(Duration::from_secs(10), |p| {
                p.server().stats().peer_address_reverts > 0
            });
            assert!(pair.now < silent_until, "the validation never gave up");
        }
        pair.drop = Some(Box::new(move |_, _, to| to == spoofed));
        let stats = pair.server().stats();
        // The replayed packet's "hello" arrives (once), then a transfer passes.
        let mut hello = Vec::new();
        let mut stream = None;
        pair.run_until(Duration::from_secs(5), |p| {
            if stream.is_none() {
                stream = p.server().accept_stream(Dir::Uni);
            }
            let Some(sid) = stream else { return false };
            loop {
                match p.server().read(sid, usize::MAX) {
                    Ok(Some(chunk)) => hello.extend_from_slice(&chunk),
                    Ok(None) => return true,
                    Err(_) => return false,
                }
            }
        });
        assert_eq!(hello, b"hello");
        assert_eq!(
            pair.transfer(100_000, Duration::from_secs(10)).len(),
            100_000
        );
        assert_eq!(pair.server().remote_address(), Some(client_addr()));
        assert!(pair.server().paths[&PathId::ZERO].address_validated);
        let after = pair.server().stats();
        if client_silent {
            assert_eq!(
                (stats.peer_address_changes, stats.peer_address_reverts),
                (1, 1)
            );
            assert_eq!(after.peer_address_changes, 1, "no further move");
        } else {
            // Moved to the spoofed address, then back with the client's next packet.
            assert_eq!(
                (after.peer_address_changes, after.peer_address_reverts),
                (2, 0)
            );
        }
        assert_eq!(after.peer_addresses_validated, 0);
    }
}

#[test]
fn endpoint_survives_garbage_then_transfers() {
    let mut pair = Pair::default_pair();
    pair.handshake();
    assert_eq!(pair.transfer(50_000, Duration::from_secs(5)).len(), 50_000);
    let captured = pair.client_sent.clone();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(99);
    let now = pair.now;
    for i in 0..100_000u32 {
        let mut data: Vec<u8> = if i % 2 == 0 || captured.is_empty() {
            let len = rng.random_range(0..1500);
            (0..len).map(|_| rng.random()).collect()
        } else {
            let mut d = captured[rng.random_range(0..captured.len())].clone();
            for _ in 0..rng.random_range(1..8) {
                if d.is_empty() {
                    break;
                }
                let at = rng.random_range(0..d.len());
                d[at] ^= 1 << rng.random_range(0..8);
            }
            if rng.random_bool(0.1) {
                d.truncate(rng.random_range(0..d.len().max(1)));
            }
            d
        };
        if !data.is_empty() && i % 7 == 0 {
            data[0] |= 0x80;
        }
        pair.server.handle(
            now,
            server_addr(),
            client_addr(),
            None,
            BytesMut::from(&data[..]),
        );
        let mut buf = Vec::new();
        while pair.server.poll_transmit(now, &mut buf).is_some() {}
    }
    assert!(
        !pair.server().is_closed(),
        "garbage must not close the connection"
    );
    let got = pair.transfer(200_000, Duration::from_secs(10));
    assert!(
        got == expected_payload(200_000),
        "a normal transfer still works afterwards"
    );
}

#[test]
fn qlog_holds_packet_and_metrics_events() {
    use std::sync::Mutex;
    #[derive(Default)]
    struct Collect(Arc<Mutex<Vec<u8>>>);
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl crate::qlog::QlogFactory for Collect {
        fn create(&self, _: Side, _: &ConnectionId) -> Option<Box<dyn std::io::Write + Send>> {
            Some(Box::new(Sink(self.0.clone())))
        }
    }
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut endpoint = EndpointConfig::from_seed(1);
    endpoint.qlog = Some(Arc::new(Collect(log.clone())));
    let (client_tls, server_tls) = tls_configs();
    let mut pair = Pair::with_configs(
        ClientConfig::new(client_tls),
        ServerConfig::new(server_tls),
        endpoint,
    );
    pair.handshake();
    pair.transfer(100_000, Duration::from_secs(5));
    let bytes = log.lock().unwrap().clone();
    let records = crate::qlog::parse_json_seq(&bytes).unwrap();
    let names: std::collections::BTreeSet<String> = records
        .iter()
        .skip(1)
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect();
    for name in [
        "quic:packet_sent",
        "quic:packet_received",
        "quic:recovery_metrics_updated",
        "quic:parameters_set",
    ] {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
}

#[test]
fn receive_window_grows_with_need_and_keeps_pace_with_a_fixed_large_one() {
    // 8 MB over a 20 ms round trip with no rate limit: the sender's window soon exceeds
    // the initial 1.5 MiB receive window, which auto-tuning then grows; it finishes
    // (in simulated time) about as soon as with a fixed 16 MiB window, and much sooner
    // than with the initial window kept fixed.
    let run = |transport: TransportConfig| {
        let mut pair = Pair::new(transport.clone(), transport);
        pair.handshake();
        let start = pair.now;
        let got = pair.transfer(8_000_000, Duration::from_secs(60));
        assert_eq!(got.len(), 8_000_000);
        let window = pair.server().receive_window();
        (pair.now - start, window)
    };
    let tuned = run(TransportConfig::default());
    let mut large = TransportConfig::default();
    large.set_fixed_receive_window(large.receive_window);
    large.set_fixed_stream_receive_window(large.stream_receive_window);
    let large = run(large);
    let mut small = TransportConfig::default();
    small.set_fixed_receive_window(small.initial_receive_window);
    small.set_fixed_stream_receive_window(small.initial_stream_receive_window);
    let small = run(small);
    println!(
        "8 MB, 20 ms RTT: auto-tuned {:?} (window grew to {} kB), fixed 16 MiB {:?}, \
         fixed 1.5 MiB {:?}",
        tuned.0,
        tuned.1 / 1024,
        large.0,
        small.0
    );
    let initial = TransportConfig::default().initial_receive_window;
    assert!(tuned.1 > initial, "the window did not grow");
    assert!(tuned.0.as_secs_f64() < 1.2 * large.0.as_secs_f64());
    assert!(small.0.as_secs_f64() > 1.3 * tuned.0.as_secs_f64());
}

/// A second connection with the same client configuration resumes the first one's session
/// when the server sends tickets, and does a full handshake when it does not.
#[test]
fn a_second_connection_resumes_with_the_servers_ticket() {
    for tickets in [true, false] {
        let (client_tls, server_tls) = tls_configs();
        let mut server_tls = (*server_tls).clone();
        if tickets {
            crate::crypto::enable_session_tickets(&mut server_tls);
        }
        let client_config = ClientConfig::new(client_tls);
        let mut pair = Pair::with_configs(
            client_config.clone(),
            ServerConfig::new(Arc::new(server_tls)),
            EndpointConfig::from_seed(1),
        );
        pair.handshake();
        assert_eq!(pair.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
        assert!(!pair.client().is_resumed());
        let now = pair.now;
        pair.client().close(now, VarInt::from_u32(0), b"");
        pair.run_until(Duration::from_secs(5), |p| p.client().is_closed());
        // The second connection, from the same client endpoint and configuration.
        pair.client_conn = pair
            .client
            .connect(
                now,
                client_config.clone(),
                client_addr(),
                server_addr(),
                "localhost",
            )
            .unwrap();
        pair.server_conn = None;
        pair.handshake();
        assert_eq!(pair.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
        assert_eq!(pair.client().is_resumed(), tickets);
        assert_eq!(pair.server().is_resumed(), tickets);
    }
}

/// A client configuration that sends early data and a server configuration whose tickets
/// allow it.
fn zero_rtt_configs() -> (ClientConfig, rustls::ServerConfig) {
    let (client_tls, server_tls) = tls_configs();
    let mut client_tls = (*client_tls).clone();
    crate::crypto::enable_early_data(&mut client_tls);
    let mut server_tls = (*server_tls).clone();
    crate::crypto::enable_zero_rtt(&mut server_tls);
    (ClientConfig::new(Arc::new(client_tls)), server_tls)
}

/// A first connection of `client` to a server with `server_tls`, long enough for the
/// session ticket to arrive. It has no ticket to use, so it sends no 0-RTT.
fn connect_for_ticket(client: &ClientConfig, server_tls: &rustls::ServerConfig) {
    let server = ServerConfig::new(Arc::new(server_tls.clone()));
    let mut pair = Pair::with_configs(client.clone(), server, EndpointConfig::from_seed(1));
    assert!(!pair.client().is_sending_early_data());
    pair.handshake();
    pair.run_until(Duration::from_millis(200), |_| false);
    assert_eq!(pair.client().zero_rtt_packets(), 0);
    assert!(!pair.client().is_early_data_accepted());
}

/// A second connection to a server with `server_tls`: the client writes a request on a
/// stream before any packet left; runs until the server has read it all. Returns the
/// pair and whether the server was still handshaking when the request was complete.
fn early_request(client: ClientConfig, server_tls: rustls::ServerConfig) -> (Pair, bool) {
    let server = ServerConfig::new(Arc::new(server_tls));
    let mut pair = Pair::with_configs(client, server, EndpointConfig::from_seed(3));
    let request = b"GET /early\r\n";
    let id = pair
        .client()
        .open_stream(Dir::Bi)
        .expect("the remembered limits allow a stream");
    assert_eq!(pair.client().write(id, request).unwrap(), request.len());
    pair.client().finish(id).unwrap();
    let mut stream = None;
    let mut received = Vec::new();
    let mut handshaking = false;
    let done = pair.run_until(Duration::from_secs(5), |p| {
        if p.server_conn.is_none() {
            return false;
        }
        let server = p.server();
        if stream.is_none() {
            stream = server.accept_stream(Dir::Bi);
        }
        if let Some(sid) = stream {
            while let Ok(Some(chunk)) = server.read(sid, usize::MAX) {
                if chunk.is_empty() {
                    break;
                }
                received.extend_from_slice(&chunk);
                handshaking = server.is_handshaking();
            }
        }
        received.len() == request.len()
    });
    assert!(done, "the server never got the request");
    assert_eq!(received, request);
    pair.handshake();
    (pair, handshaking)
}

/// 0-RTT accepted: the request arrives in 0-RTT packets, before the server's handshake
/// completes; both ends report the early data accepted and the session resumed.
#[test]
fn zero_rtt_data_arrives_before_the_handshake_completes() {
    let (client, server_tls) = zero_rtt_configs();
    connect_for_ticket(&client, &server_tls);
    let (mut pair, handshaking) = early_request(client, server_tls);
    assert!(handshaking, "the request arrived after the handshake");
    for client in [true, false] {
        let side = if client { pair.client() } else { pair.server() };
        assert!(side.is_early_data_accepted());
        assert!(side.is_resumed());
        assert!(side.zero_rtt_packets() > 0);
        assert!(!side.is_sending_early_data());
    }
}

/// 0-RTT rejected (the server resumes the session but takes no early data): the server
/// opens none of the 0-RTT packets, and the client sends the request again in 1-RTT
/// packets, which arrive after the handshake.
#[test]
fn rejected_zero_rtt_data_is_sent_again_in_1rtt() {
    let (client, server_tls) = zero_rtt_configs();
    connect_for_ticket(&client, &server_tls);
    // The same session store (the ticket stays good), early data refused.
    let mut refusing = server_tls.clone();
    refusing.max_early_data_size = 0;
    let (mut pair, handshaking) = early_request(client, refusing);
    assert!(!handshaking, "the server read 0-RTT data it had rejected");
    assert!(pair.client().zero_rtt_packets() > 0);
    assert!(!pair.client().is_early_data_accepted());
    assert_eq!(pair.server().zero_rtt_packets(), 0);
    assert!(pair.client().is_resumed() && pair.server().is_resumed());
}

/// No 0-RTT without a ticket that allows it: a server that sends plain session tickets
/// gets a resumption but no early data.
#[test]
fn no_zero_rtt_without_a_ticket_that_allows_it() {
    let (client, server_tls) = zero_rtt_configs();
    let mut tickets_only = server_tls.clone();
    crate::crypto::enable_session_tickets(&mut tickets_only);
    connect_for_ticket(&client, &tickets_only);
    let server = ServerConfig::new(Arc::new(tickets_only));
    let mut pair = Pair::with_configs(client, server, EndpointConfig::from_seed(3));
    assert!(!pair.client().is_sending_early_data());
    pair.handshake();
    assert!(pair.client().is_resumed());
    assert_eq!(pair.client().zero_rtt_packets(), 0);
    assert!(!pair.client().is_early_data_accepted());
}
