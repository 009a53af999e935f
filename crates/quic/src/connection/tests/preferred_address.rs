//! The server's preferred address (RFC 9000 section 9.6): the client validates it after
//! the handshake and moves path 0 there; the server answers there, and sends non-probing
//! packets from it only once a non-probing packet arrived there and it validated the path.

use super::*;
use std::cell::RefCell;
use std::rc::Rc;

/// The server's preferred address in these tests, `10.0.0.3:4433`.
fn preferred() -> SocketAddr {
    "10.0.0.3:4433".parse().unwrap()
}

/// A datagram seen on the test network: source, destination, size.
type Seen = (SocketAddr, SocketAddr, usize);

/// A pair whose server advertises [`preferred`]; the client uses it when `use_it`.
fn pair(use_it: bool) -> Pair {
    let client = TransportConfig {
        use_preferred_address: use_it,
        ..TransportConfig::default()
    };
    let server = TransportConfig {
        preferred_address: Some(preferred()),
        ..TransportConfig::default()
    };
    Pair::new(client, server)
}

/// Records every datagram on the network (dropping those `drop` says to) into the
/// returned log.
fn watch(
    pair: &mut Pair,
    mut drop: impl FnMut(SocketAddr, SocketAddr) -> bool + 'static,
) -> Rc<RefCell<Vec<Seen>>> {
    let log: Rc<RefCell<Vec<Seen>>> = Rc::default();
    let sink = log.clone();
    pair.drop = Some(Box::new(move |d, from, to| {
        sink.borrow_mut().push((from, to, d.len()));
        drop(from, to)
    }));
    log
}

/// The server advertises the address with a connection ID of sequence number 1; the
/// client validates it once the handshake is confirmed, moves path 0 there with that
/// connection ID, and an upload continues there; the server moves too.
#[test]
fn client_moves_to_the_preferred_address_and_data_continues() {
    let mut pair = pair(true);
    let log = watch(&mut pair, |_, _| false);
    pair.handshake();
    let pa = pair
        .client()
        .peer_params
        .as_ref()
        .and_then(|p| p.preferred_address)
        .expect("the server advertised a preferred address");
    assert_eq!(pa.ipv4.map(SocketAddr::V4), Some(preferred()));
    assert_eq!(pa.ipv6, None);
    let issued = pair.server().local_cids.get(PathId::ZERO, 1).copied();
    assert_eq!(issued.map(|c| c.cid), Some(pa.connection_id));
    assert!(pair.run_until(Duration::from_secs(5), |p| {
        p.client().stats().preferred_address_migrations == 1
    }));
    assert_eq!(pair.client().remote_address(), Some(preferred()));
    assert_eq!(
        pair.client().peer_cids.active(PathId::ZERO).map(|c| c.cid),
        Some(pa.connection_id)
    );
    log.borrow_mut().clear();
    let got = pair.transfer(300_000, Duration::from_secs(10));
    assert!(got == expected_payload(300_000), "{} bytes", got.len());
    let seen = log.borrow();
    let to_server: Vec<_> = seen.iter().filter(|d| d.0 == client_addr()).collect();
    assert!(to_server.len() > 100, "{} datagrams", to_server.len());
    assert!(
        to_server.iter().all(|d| d.1 == preferred()),
        "the client still sent to the original address"
    );
    // The server sends from its preferred address too, once it validated the path.
    assert_eq!(pair.server().stats().preferred_address_migrations, 1);
    assert_eq!(pair.server().paths[&PathId::ZERO].local, preferred());
    let last_from_server = seen.iter().rev().find(|d| d.1 == client_addr());
    assert_eq!(last_from_server.map(|d| d.0), Some(preferred()));
}

/// Validation of the preferred address fails (nothing gets there): the client keeps
/// sending to the original address, and the connection carries on.
#[test]
fn failed_validation_keeps_the_original_address() {
    let mut pair = pair(true);
    let log = watch(&mut pair, |from, to| {
        from == preferred() || to == preferred()
    });
    pair.handshake();
    let got = pair.transfer(200_000, Duration::from_secs(20));
    assert!(got == expected_payload(200_000), "{} bytes", got.len());
    // Past the validation timeout.
    pair.run_until(Duration::from_secs(5), |_| false);
    assert!(pair.client().paths[&PathId::ZERO].off_path.is_none());
    assert_eq!(pair.client().remote_address(), Some(server_addr()));
    assert_eq!(pair.client().stats().preferred_address_migrations, 0);
    let probes = log.borrow().iter().filter(|d| d.1 == preferred()).count();
    assert!(probes >= 1, "the client never probed the preferred address");
    assert!(
        probes < 10,
        "{probes} datagrams to the preferred address: not probes only"
    );
    let got = pair.transfer(50_000, Duration::from_secs(10));
    assert_eq!(got.len(), 50_000);
}

/// A client that does not use the preferred address (the knob off) never sends there.
#[test]
fn client_with_the_knob_off_stays() {
    let mut pair = pair(false);
    let log = watch(&mut pair, |_, _| false);
    pair.handshake();
    let got = pair.transfer(100_000, Duration::from_secs(10));
    assert_eq!(got.len(), 100_000);
    pair.run_until(Duration::from_secs(2), |_| false);
    assert!(
        log.borrow()
            .iter()
            .all(|d| d.1 != preferred() && d.0 != preferred())
    );
    assert_eq!(pair.client().remote_address(), Some(server_addr()));
    assert_eq!(pair.client().stats().preferred_address_migrations, 0);
}

/// RFC 9000 section 9.6.2: non-probing packets arrive at the preferred address (a client
/// that sends there without validating it first), but the path from there does not
/// validate (the server's packets from there are lost): the server keeps sending
/// everything but its probes from the original address, and the upload completes. Once
/// its challenge gets through, the server moves.
#[test]
fn server_sends_from_the_preferred_address_only_after_validating() {
    let mut pair = pair(false);
    let blocked = Rc::new(RefCell::new(true));
    let gate = blocked.clone();
    let log = watch(&mut pair, move |from, _| {
        from == preferred() && *gate.borrow()
    });
    pair.handshake();
    if let Some(path) = pair.client().paths.get_mut(&PathId::ZERO) {
        path.remote = preferred();
    }
    let got = pair.transfer(300_000, Duration::from_secs(10));
    assert!(got == expected_payload(300_000), "{} bytes", got.len());
    {
        let seen = log.borrow();
        let to_preferred = seen.iter().filter(|d| d.1 == preferred()).count();
        let from_preferred: Vec<_> = seen.iter().filter(|d| d.0 == preferred()).collect();
        let from_original = seen.iter().filter(|d| d.0 == server_addr()).count();
        assert!(to_preferred > 100, "{to_preferred}");
        assert!(!from_preferred.is_empty(), "the server never probed");
        // Probes only: few, each padded to 1200 bytes.
        assert!(from_preferred.len() < 10, "{}", from_preferred.len());
        assert!(from_preferred.iter().all(|d| d.2 >= 1200));
        assert!(from_original > 50, "{from_original}");
    }
    assert_eq!(pair.server().paths[&PathId::ZERO].local, server_addr());
    assert_eq!(pair.server().stats().preferred_address_migrations, 0);
    // Now the path works: the server's challenge gets through, and it moves.
    *blocked.borrow_mut() = false;
    let got = pair.transfer(100_000, Duration::from_secs(10));
    assert_eq!(got.len(), 100_000);
    assert!(pair.run_until(Duration::from_secs(5), |p| {
        p.server().stats().preferred_address_migrations == 1
    }));
    assert_eq!(pair.server().paths[&PathId::ZERO].local, preferred());
}

/// RFC 9000 section 9.6.3: the client migrates to a new local address before it moved
/// to the preferred address; it validates the preferred address from the new address
/// and ends up there, and so does the server.
#[test]
fn client_migration_before_the_move_probes_from_the_new_address() {
    let mut pair = pair(true);
    pair.handshake();
    assert!(pair.client().paths[&PathId::ZERO].off_path.is_some());
    let now = pair.now;
    pair.client()
        .migrate(now, PathId::ZERO, client_addr2())
        .unwrap();
    assert_eq!(
        pair.client().paths[&PathId::ZERO]
            .off_path
            .as_ref()
            .map(|p| p.local),
        Some(client_addr2())
    );
    assert!(pair.run_until(Duration::from_secs(5), |p| {
        p.client().stats().preferred_address_migrations == 1
    }));
    let got = pair.transfer(200_000, Duration::from_secs(10));
    assert!(got == expected_payload(200_000), "{} bytes", got.len());
    let path = &pair.client().paths[&PathId::ZERO];
    assert_eq!((path.local, path.remote), (client_addr2(), preferred()));
    assert!(pair.run_until(Duration::from_secs(5), |p| {
        p.server().stats().preferred_address_migrations == 1
    }));
    let path = &pair.server().paths[&PathId::ZERO];
    assert_eq!((path.local, path.remote), (preferred(), client_addr2()));
}

/// With multipath, the preferred address is a migration of path 0 (draft-ietf-quic-
/// multipath-21 section 2.2): the client moves path 0 there and can still open a second
/// path.
#[test]
fn multipath_client_moves_path_zero() {
    let client = TransportConfig {
        initial_max_path_id: Some(4),
        ..TransportConfig::default()
    };
    let server = TransportConfig {
        initial_max_path_id: Some(4),
        preferred_address: Some(preferred()),
        ..TransportConfig::default()
    };
    let mut pair = Pair::new(client, server);
    pair.handshake();
    assert!(pair.client().is_multipath());
    assert!(pair.run_until(Duration::from_secs(5), |p| {
        p.client().stats().preferred_address_migrations == 1
    }));
    assert_eq!(pair.client().paths[&PathId::ZERO].remote, preferred());
    let now = pair.now;
    let second = pair
        .client()
        .open_path(now, client_addr2(), preferred(), PathStatus::Available)
        .unwrap();
    assert!(pair.run_until(Duration::from_secs(5), |p| {
        p.client().paths[&second].state == PathState::Validated
    }));
    let got = pair.transfer(200_000, Duration::from_secs(10));
    assert!(got == expected_payload(200_000), "{} bytes", got.len());
}
