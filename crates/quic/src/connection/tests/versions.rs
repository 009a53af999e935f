//! QUIC version 2 (RFC 9369) and compatible version negotiation (RFC 9368) end to end.

use super::basic::key_updates_mid_transfer;
use super::*;
use crate::packet::{VERSION_1, VERSION_2};
use std::cell::RefCell;
use std::rc::Rc;

/// The version of every long header packet seen, in order: (from the client, version,
/// first byte). Coalesced packets after the first are not split (the first one's header
/// is what the tests look at).
type Seen = Rc<RefCell<Vec<(bool, u32, u8)>>>;

/// A pair whose client starts in `client_version` listing `client_offers`, against a
/// server accepting `server_versions`; it records long header versions on the wire.
fn pair(
    client_version: u32,
    client_offers: &[u32],
    server_versions: &[u32],
    retry: bool,
) -> (Pair, Seen) {
    let (client_tls, server_tls) = tls_configs();
    let mut client = ClientConfig::new(client_tls);
    client.version = client_version;
    client.available_versions = client_offers.to_vec();
    let mut server = ServerConfig::new(server_tls);
    server.versions = server_versions.to_vec();
    server.retry = retry;
    let mut pair = Pair::with_configs(client, server, EndpointConfig::from_seed(1));
    let seen: Seen = Rc::default();
    let log = seen.clone();
    pair.drop = Some(Box::new(move |data, from, _| {
        if data.len() >= 5 && data[0] & 0x80 != 0 {
            let version = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
            log.borrow_mut()
                .push((from == client_addr(), version, data[0]));
        }
        false
    }));
    (pair, seen)
}

fn versions(seen: &Seen, from_client: bool) -> Vec<u32> {
    seen.borrow()
        .iter()
        .filter(|(c, ..)| *c == from_client)
        .map(|&(_, v, _)| v)
        .collect()
}

#[test]
fn version_2_from_the_start_completes_transfers_and_updates_keys() {
    let (mut pair, seen) = pair(VERSION_2, &[], &[VERSION_1, VERSION_2], false);
    key_updates_mid_transfer(&mut pair);
    assert_eq!(pair.client().version(), VERSION_2);
    assert_eq!(pair.server().version(), VERSION_2);
    let client = versions(&seen, true);
    let server = versions(&seen, false);
    assert!(!client.is_empty() && !server.is_empty());
    assert!(client.iter().chain(&server).all(|&v| v == VERSION_2));
    // The client's first Initial carries version 2's Initial type bits, 0b01.
    let first = seen.borrow()[0];
    assert_eq!((first.0, first.2 & 0x30), (true, 0x10));
}

#[test]
fn server_preferring_v2_switches_a_v1_client_that_offers_it() {
    let (mut pair, seen) = pair(
        VERSION_1,
        &[VERSION_2, VERSION_1],
        &[VERSION_2, VERSION_1],
        false,
    );
    // Key updates also exercise the switched client's own key schedule.
    key_updates_mid_transfer(&mut pair);
    assert_eq!(pair.client().version(), VERSION_2);
    assert_eq!(pair.server().version(), VERSION_2);
    let client = versions(&seen, true);
    let server = versions(&seen, false);
    assert_eq!(client[0], VERSION_1, "the client starts in version 1");
    assert!(
        server.iter().all(|&v| v == VERSION_2),
        "the server answers in version 2 only: {server:x?}"
    );
    // Once the server's first packet arrived the client sends version 2 only.
    let switched = client.iter().position(|&v| v == VERSION_2).expect("switch");
    assert!(
        client[switched..].iter().all(|&v| v == VERSION_2),
        "{client:x?}"
    );
}

#[test]
fn server_preferring_v1_keeps_version_1() {
    let (mut pair, seen) = pair(
        VERSION_1,
        &[VERSION_2, VERSION_1],
        &[VERSION_1, VERSION_2],
        false,
    );
    pair.handshake();
    assert_eq!(pair.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
    assert_eq!(pair.client().version(), VERSION_1);
    assert!(seen.borrow().iter().all(|&(_, v, _)| v == VERSION_1));
}

#[test]
fn v1_only_client_is_not_switched() {
    // No version_information from the client: the server cannot know it speaks v2.
    let (mut pair, seen) = pair(VERSION_1, &[], &[VERSION_2, VERSION_1], false);
    pair.handshake();
    assert_eq!(pair.server().version(), VERSION_1);
    assert!(seen.borrow().iter().all(|&(_, v, _)| v == VERSION_1));
}

#[test]
fn retry_in_version_2() {
    let (mut pair, seen) = pair(VERSION_2, &[], &[VERSION_2], true);
    pair.handshake();
    assert!(pair.client().retry_scid.is_some(), "went through a Retry");
    assert_eq!(pair.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
    // The Retry: a v2 long header whose type bits are 0b00.
    assert!(
        seen.borrow()
            .iter()
            .any(|&(c, v, b)| !c && v == VERSION_2 && b & 0x30 == 0),
        "a version 2 Retry was sent"
    );
}

#[test]
fn retry_then_compatible_switch() {
    let (mut pair, seen) = pair(
        VERSION_1,
        &[VERSION_2, VERSION_1],
        &[VERSION_2, VERSION_1],
        true,
    );
    pair.handshake();
    assert!(pair.client().retry_scid.is_some());
    assert_eq!(pair.client().version(), VERSION_2);
    assert_eq!(pair.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
    // The Retry answers the client's version 1 Initial in version 1.
    assert_eq!(versions(&seen, false)[0], VERSION_1);
}

#[test]
fn v1_only_server_answers_a_v2_client_with_version_negotiation() {
    let (mut pair, _) = pair(VERSION_2, &[], &[VERSION_1], false);
    pair.run_until(Duration::from_secs(2), |p| p.client().is_closed());
    assert_eq!(
        pair.client().close_reason(),
        Some(&ConnectionError::VersionMismatch)
    );
}

#[test]
fn a_forged_version_2_initial_does_not_switch_the_client() {
    let (mut pair, _) = pair(
        VERSION_1,
        &[VERSION_2, VERSION_1],
        &[VERSION_2, VERSION_1],
        false,
    );
    let now = pair.now;
    let client_cid = pair.client().local_handshake_cid;
    let mut forged = Vec::new();
    let layout = crate::packet::write_long_header(
        &mut forged,
        crate::packet::LongType::Initial,
        VERSION_2,
        &client_cid,
        &ConnectionId::new(&[7; 8]),
        &[],
        0,
        2,
    );
    forged.resize(1200, 0x5a);
    crate::packet::set_long_header_length(&mut forged, &layout, 1200 - layout.pn_offset);
    pair.client.handle(
        now,
        client_addr(),
        server_addr(),
        None,
        BytesMut::from(&forged[..]),
    );
    assert_eq!(
        pair.client().version(),
        VERSION_1,
        "an unauthenticated header switched"
    );
    // The real server's answer still switches it.
    pair.handshake();
    assert_eq!(pair.client().version(), VERSION_2);
}
