//! Initials that do not decrypt leave no state at the server (RFC 9000 section 21.2), and a
//! legitimate connection right after a flood of them is as fast as without it.

use super::*;

/// A 1200-byte datagram shaped like a client's first Initial (long header, version 1, a
/// fresh 8-byte DCID and SCID, no token, a Length covering the rest) whose protected part is
/// random bytes, so it cannot decrypt.
pub(crate) fn garbage_initial(rng: &mut impl Rng) -> Vec<u8> {
    let mut d = vec![0xc0 | rng.random_range(0..16u8)];
    d.extend_from_slice(&crate::packet::VERSION_1.to_be_bytes());
    for _ in 0..2 {
        d.push(8);
        d.extend((0..8).map(|_| rng.random::<u8>()));
    }
    d.push(0); // token length
    let rest = 1200 - d.len() - 2;
    d.extend_from_slice(&(0x4000u16 | rest as u16).to_be_bytes());
    d.extend((0..rest).map(|_| rng.random::<u8>()));
    d
}

/// Virtual time a handshake and a 1 MB upload take on `pair`.
fn handshake_and_upload(pair: &mut Pair) -> Duration {
    let start = pair.now;
    pair.handshake();
    let got = pair.transfer(1_000_000, Duration::from_secs(30));
    assert_eq!(
        got,
        expected_payload(1_000_000),
        "the upload arrived intact"
    );
    pair.now - start
}

#[test]
fn undecryptable_initials_leave_no_state() {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(24);
    let baseline = handshake_and_upload(&mut Pair::default_pair());

    let mut pair = Pair::default_pair();
    let now = pair.now;
    for i in 0..5_000u16 {
        let from: SocketAddr = format!("10.9.{}.{}:{}", i / 250, i % 250, 1024 + i)
            .parse()
            .unwrap();
        let dgram = garbage_initial(&mut rng);
        assert_eq!(dgram.len(), 1200);
        assert!(
            pair.server
                .handle(now, server_addr(), from, None, BytesMut::from(&dgram[..]))
                .is_none()
        );
    }
    assert_eq!(pair.server.connection_count(), 0, "no connection");
    assert_eq!(pair.server.routing_entries(), 0, "no connection ID entries");
    assert_eq!(pair.server.poll_timeout(), None, "no timers");
    assert!(pair.server.accept().is_none(), "nothing to accept");
    let mut buf = Vec::new();
    assert!(
        pair.server.poll_transmit(now, &mut buf).is_none(),
        "nothing sent in answer"
    );

    let flooded = handshake_and_upload(&mut pair);
    assert_eq!(pair.server.connection_count(), 1);
    println!("1 MB upload: {baseline:?} without the flood, {flooded:?} after 5000 Initials");
    assert_eq!(
        flooded, baseline,
        "the flood changed nothing (virtual time)"
    );
}

#[test]
fn undecryptable_initials_are_dropped_before_retry_and_limits() {
    let (client_tls, server_tls) = tls_configs();
    let mut server = ServerConfig::new(server_tls);
    server.retry = true;
    server.max_incoming = 1;
    let mut pair = Pair::with_configs(
        ClientConfig::new(client_tls),
        server,
        EndpointConfig::from_seed(1),
    );
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(25);
    let now = pair.now;
    for _ in 0..100 {
        let dgram = garbage_initial(&mut rng);
        pair.server.handle(
            now,
            server_addr(),
            client_addr2(),
            None,
            BytesMut::from(&dgram[..]),
        );
    }
    let mut buf = Vec::new();
    assert!(
        pair.server.poll_transmit(now, &mut buf).is_none(),
        "no Retry for an Initial that does not decrypt"
    );
    assert_eq!(pair.server.connection_count(), 0);
    // With max_incoming = 1, the flood did not use up the one handshake slot.
    pair.handshake();
    assert!(pair.client().retry_scid.is_some(), "went through a Retry");
    assert_eq!(pair.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
}

#[test]
fn decryptable_initial_with_a_failing_handshake_leaves_no_state() {
    // The client offers an ALPN the server does not speak: the server's TLS rejects the
    // first ClientHello. It answers with CONNECTION_CLOSE and keeps nothing.
    let (_, server_tls) = tls_configs();
    let cert =
        crate::crypto::self_signed_certificate_from_seed(&["localhost".into()], &[7; 32]).unwrap();
    let client_tls = crate::crypto::client_config(
        vec![b"other".to_vec()],
        crate::crypto::ServerVerification::Pinned(cert.chain[0].clone()),
        false,
    )
    .unwrap();
    let mut pair = Pair::with_configs(
        ClientConfig::new(client_tls),
        ServerConfig::new(server_tls),
        EndpointConfig::from_seed(1),
    );
    pair.run_until(Duration::from_secs(5), |p| p.client().is_closed());
    assert!(
        pair.client().is_closed(),
        "the client learnt of the failure"
    );
    assert!(
        matches!(
            pair.client().close_reason(),
            Some(ConnectionError::ConnectionClosed(_))
        ),
        "closed by the server: {:?}",
        pair.client().close_reason()
    );
    assert_eq!(pair.server.connection_count(), 0);
    assert_eq!(pair.server.routing_entries(), 0);
}

/// A server with `retry_above = Some(2)` and `clients` other clients' first Initials
/// (decryptable, from their own addresses) received just before the pair's client
/// connects. Returns the pair, handshaken.
fn handshake_under_load(clients: u16) -> Pair {
    let (client_tls, server_tls) = tls_configs();
    let mut server = ServerConfig::new(server_tls);
    server.retry_above = Some(2);
    let mut pair = Pair::with_configs(
        ClientConfig::new(client_tls.clone()),
        server,
        EndpointConfig::from_seed(1),
    );
    let now = pair.now;
    for i in 0..clients {
        let mut other = Endpoint::new(EndpointConfig::from_seed(100 + u64::from(i)), None);
        let from: SocketAddr = format!("10.8.0.{}:4000", i + 1).parse().unwrap();
        other
            .connect(
                now,
                ClientConfig::new(client_tls.clone()),
                from,
                server_addr(),
                "localhost",
            )
            .unwrap();
        let mut buf = Vec::new();
        let t = other.poll_transmit(now, &mut buf).expect("a first Initial");
        buf.truncate(t.size);
        pair.server
            .handle(now, server_addr(), from, None, BytesMut::from(&buf[..]));
    }
    // The other clients' handshakes stay in progress: their answers go nowhere.
    let mut buf = Vec::new();
    while pair.server.poll_transmit(now, &mut buf).is_some() {}
    // The pair's server connection is the next one accepted: the pair's client's.
    while pair.server.accept().is_some() {}
    pair.handshake();
    pair
}

#[test]
fn retry_is_automatic_under_load() {
    let quiet = handshake_under_load(1);
    let busy = handshake_under_load(2);
    println!(
        "retry_above = 2: with 1 handshake in progress the client went through a Retry: {}; \
         with 2: {}",
        quiet
            .client
            .connection(quiet.client_conn)
            .unwrap()
            .retry_scid
            .is_some(),
        busy.client
            .connection(busy.client_conn)
            .unwrap()
            .retry_scid
            .is_some(),
    );
    let mut quiet = quiet;
    let mut busy = busy;
    assert!(
        quiet.client().retry_scid.is_none(),
        "no Retry below the threshold"
    );
    assert!(
        busy.client().retry_scid.is_some(),
        "a Retry at the threshold"
    );
    assert_eq!(
        busy.server.connection_count(),
        3,
        "two waiting and the validated one"
    );
    assert_eq!(busy.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
    assert_eq!(quiet.transfer(10_000, Duration::from_secs(5)).len(), 10_000);
}
