//! ECN (RFC 9000 section 13.4, RFC 9002 section 7.1) end to end over the test network:
//! validation on a network that keeps the marks, failure where they are bleached, and
//! congestion events where a router marks CE.

use super::*;
use crate::ecn::{EcnCodepoint, EcnState, TESTING_PACKETS};

/// The client's view of ECN on its one path after a 2 MB upload over `pair`.
fn upload(pair: &mut Pair) -> crate::ecn::EcnPathInfo {
    pair.handshake();
    let got = pair.transfer(2_000_000, Duration::from_secs(60));
    assert_eq!(got.len(), 2_000_000);
    let paths = pair.client().paths();
    assert_eq!(paths.len(), 1);
    paths[0].ecn
}

#[test]
fn a_network_that_keeps_the_marks_validates_ecn() {
    let mut pair = Pair::default_pair();
    let client = upload(&mut pair);
    assert_eq!(client.state, EcnState::Capable, "{client:?}");
    // Validated, the path marks every packet, not only the testing ones.
    assert!(client.marked_sent > 10 * TESTING_PACKETS, "{client:?}");
    assert!(client.peer_reported_ect0 > TESTING_PACKETS, "{client:?}");
    assert_eq!(client.peer_reported_ce, 0);
    let server = pair.server().paths()[0].ecn;
    assert!(server.received_ect0 > 10 * TESTING_PACKETS, "{server:?}");
    assert_eq!((server.received_ect1, server.received_ce), (0, 0));
    // The server validated its own marks (its acknowledgments and the ACKs it elicits).
    assert_eq!(server.state, EcnState::Capable, "{server:?}");
}

#[test]
fn bleached_marks_fail_validation_and_marking_stops() {
    let mut pair = Pair::default_pair();
    pair.ecn = Some(Box::new(|_, _, _| None));
    let client = upload(&mut pair);
    assert_eq!(client.state, EcnState::Failed, "{client:?}");
    assert_eq!(
        client.failure,
        Some("an acknowledgment of marked packets carried no ECN counts")
    );
    assert_eq!(client.marked_sent, TESTING_PACKETS);
    assert_eq!(pair.server().paths()[0].ecn.received_ect0, 0);
}

#[test]
fn a_network_that_remarks_to_ect1_fails_validation() {
    let mut pair = Pair::default_pair();
    pair.ecn = Some(Box::new(|e, _, _| e.map(|_| EcnCodepoint::Ect1)));
    let client = upload(&mut pair);
    assert_eq!(client.state, EcnState::Failed, "{client:?}");
}

#[test]
fn ce_marks_are_congestion_events_that_losses_need_not_cause() {
    // A router marks CE on one datagram in 100 of the client's, without dropping any.
    let mut marked = Pair::default_pair();
    let mut n = 0u64;
    let client = client_addr();
    marked.ecn = Some(Box::new(move |e, src, _| {
        n += 1;
        if src == client && e.is_some() && n.is_multiple_of(100) {
            Some(EcnCodepoint::Ce)
        } else {
            e
        }
    }));
    let with_ce = upload(&mut marked);
    let events_with_ce = marked.client().paths()[0].stats.congestion_events;
    let lost_with_ce = marked.client().stats().packets_lost;
    let mut plain = Pair::default_pair();
    let without = upload(&mut plain);
    let events_without = plain.client().paths()[0].stats.congestion_events;
    assert_eq!(with_ce.state, EcnState::Capable, "{with_ce:?}");
    assert!(with_ce.peer_reported_ce > 0, "{with_ce:?}");
    assert_eq!(without.peer_reported_ce, 0);
    assert_eq!(lost_with_ce, 0, "no datagram was dropped");
    assert!(
        events_with_ce > events_without,
        "CE marks: {events_with_ce} congestion events, none: {events_without}"
    );
    assert!(marked.server().paths()[0].ecn.received_ce > 0);
}

#[test]
fn with_ecn_off_nothing_is_marked_but_received_marks_are_reported() {
    let client_config = TransportConfig {
        ecn: false,
        ..TransportConfig::default()
    };
    let mut pair = Pair::new(client_config, TransportConfig::default());
    let client = upload(&mut pair);
    assert_eq!(client.state, EcnState::Disabled);
    assert_eq!(client.marked_sent, 0);
    assert_eq!(pair.server().paths()[0].ecn.received_ect0, 0);
    // The server still marks; the client reports what it received, so the server's
    // marks validate.
    let server = pair.server().paths()[0].ecn;
    assert_eq!(server.state, EcnState::Capable, "{server:?}");
    assert!(pair.client().paths()[0].ecn.received_ect0 > 0);
}
