//! The driver over real loopback UDP: streams, datagrams, paths, close, qlog.

use polypath_io::{Connection, Endpoint, WriteError};
mod common;
use common::{addr, tls_pair};
use polypath_quic::{ClientConfig, EndpointConfig, ServerConfig, TransportConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn transport(multipath: bool) -> Arc<TransportConfig> {
    Arc::new(TransportConfig {
        initial_max_path_id: multipath.then_some(4),
        scheduler: polypath_quic::sched::scheduler_by_name("rr").unwrap(),
        ..TransportConfig::default()
    })
}

/// A server endpoint on 127.0.0.1 and a client endpoint on `client_locals`.
fn pair(
    client_locals: &[&str],
    multipath: bool,
    qlog: Option<polypath_io::QlogDir>,
) -> (Endpoint, Endpoint, ClientConfig) {
    let (server_tls, client_tls) = tls_pair();
    let mut server_config = ServerConfig::new(server_tls);
    server_config.transport = transport(multipath);
    let mut server_ep = EndpointConfig::random();
    server_ep.qlog = qlog.clone().map(|q| Arc::new(q) as _);
    let server = Endpoint::server(addr("127.0.0.1:0"), server_ep, server_config).unwrap();
    let locals: Vec<SocketAddr> = client_locals.iter().map(|s| addr(s)).collect();
    let mut client_ep = EndpointConfig::random();
    client_ep.qlog = qlog.map(|q| Arc::new(q) as _);
    let client = Endpoint::client(&locals, client_ep).unwrap();
    let mut cc = ClientConfig::new(client_tls);
    cc.transport = transport(multipath);
    (server, client, cc)
}

async fn connect(
    server: &Endpoint,
    client: &Endpoint,
    cc: ClientConfig,
) -> (Connection, Connection) {
    let server_addr = server.local_addrs()[0];
    let (c, s) = tokio::join!(client.connect(cc, server_addr, "localhost"), async {
        let s = server.accept().await.unwrap();
        s.handshake().await.unwrap();
        s
    });
    (c.unwrap(), s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_upload_over_one_stream() {
    let (server, client, cc) = pair(&["127.0.0.1:0"], false, None);
    let (c, s) = connect(&server, &client, cc).await;
    let size = 8 * 1024 * 1024;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    let receiver = tokio::spawn(async move {
        let (_, mut recv) = s.accept_bi().await.unwrap();
        recv.read_to_end(usize::MAX).await.unwrap()
    });
    let start = Instant::now();
    let (mut send, _recv) = c.open_bi().await.unwrap();
    send.write_all(&data).await.unwrap();
    send.finish().unwrap();
    let got = receiver.await.unwrap();
    eprintln!("{} bytes in {:?}", got.len(), start.elapsed());
    assert!(got == data, "received data differs");
    send.finished().await.unwrap();
    c.close(0, b"done");
    drop((send, _recv, c));
    tokio::time::timeout(Duration::from_secs(5), client.wait_idle())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_both_ways_and_a_clean_close() {
    let (server, client, cc) = pair(&["127.0.0.1:0"], false, None);
    let (c, s) = connect(&server, &client, cc).await;
    assert!(c.max_datagram_size().is_some_and(|n| n >= 1000));
    let echo = tokio::spawn(async move {
        let mut echoed = 0;
        while let Ok(d) = s.recv_datagram().await {
            let mut reply = d.to_vec();
            reply.reverse();
            s.send_datagram(reply.into()).unwrap();
            echoed += 1;
        }
        (echoed, s.close_reason())
    });
    let mut replies = 0;
    for i in 0..200u32 {
        let payload = format!("datagram {i:05}").into_bytes();
        c.send_datagram(payload.clone().into()).unwrap();
        // Pace to one in flight: loopback does not lose them, the receiver might if flooded.
        let reply = tokio::time::timeout(Duration::from_secs(2), c.recv_datagram())
            .await
            .expect("echo within 2 s")
            .unwrap();
        let mut expected = payload;
        expected.reverse();
        assert_eq!(&reply[..], &expected[..]);
        replies += 1;
    }
    assert_eq!(replies, 200);
    c.close(7, b"bye");
    let (echoed, reason) = tokio::time::timeout(Duration::from_secs(5), echo)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(echoed, 200);
    assert!(
        matches!(
            &reason,
            Some(polypath_io::ConnectionError::ApplicationClosed { code: 7, reason }) if reason == "bye"
        ),
        "server saw {reason:?}"
    );
    drop(c);
    tokio::time::timeout(Duration::from_secs(5), client.wait_idle())
        .await
        .unwrap();
}

/// A connection the peer closed after its handshake completed reports the handshake as
/// completed, not failed (issue 24, item 4: completion is checked before loss).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_then_peer_close_is_a_completed_handshake() {
    let (server, client, cc) = pair(&["127.0.0.1:0"], false, None);
    let server_addr = server.local_addrs()[0];
    let c = client.connect(cc, server_addr, "localhost").await.unwrap();
    let s = server.accept().await.unwrap();
    c.close(0, b"done");
    // The server looks at the connection only after the client closed it.
    let reason = tokio::time::timeout(Duration::from_secs(5), s.closed())
        .await
        .unwrap();
    println!("server saw: {reason}");
    s.handshake()
        .await
        .expect("a handshake that completed is reported as completed after the close");
}

/// A receiving half dropped before its end (the request's FIN never read) still closes
/// the stream, so the peer gets MAX_STREAMS and can open more than the limit at once:
/// 3 x the default limit of 100 request streams, each answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_whose_receiving_half_is_dropped_unread_free_their_slot() {
    let (server, client, cc) = pair(&["127.0.0.1:0"], false, None);
    let (c, s) = connect(&server, &client, cc).await;
    const STREAMS: usize = 300;
    let serve = tokio::spawn(async move {
        for _ in 0..STREAMS {
            let (mut send, mut recv) = s.accept_bi().await.unwrap();
            // Read the one-byte request, not its FIN, and drop the receiving half.
            let request = recv.read_chunk(1).await.unwrap().unwrap();
            drop(recv);
            send.write_all(&request).await.unwrap();
            send.finish().unwrap();
        }
        s
    });
    let ask = async {
        for i in 0..STREAMS {
            let (mut send, mut recv) = c.open_bi().await.unwrap();
            send.write_all(&[i as u8]).await.unwrap();
            // The server may have read the byte and stopped the stream already (a busy
            // machine can hold this task between the write and the FIN): then the FIN is
            // rightly refused, and the answer still comes.
            match send.finish() {
                Ok(()) | Err(WriteError::Stopped(_)) => {}
                Err(e) => panic!("finish: {e}"),
            }
            assert_eq!(recv.read_to_end(16).await.unwrap(), vec![i as u8]);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), ask)
        .await
        .expect("the client waited for stream credit that never came");
    let _s = serve.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ecn_marks_cross_loopback_and_validate() {
    use polypath_quic::ecn::EcnState;
    let (server, client, cc) = pair(&["127.0.0.1:0"], false, None);
    let (c, s) = connect(&server, &client, cc).await;
    let data = vec![7u8; 1 << 20];
    let server_side = s.clone();
    let receiver = tokio::spawn(async move {
        let (_, mut recv) = server_side.accept_bi().await.unwrap();
        recv.read_to_end(usize::MAX).await.unwrap()
    });
    let (mut send, _recv) = c.open_bi().await.unwrap();
    send.write_all(&data).await.unwrap();
    send.finish().unwrap();
    assert_eq!(receiver.await.unwrap().len(), data.len());
    send.finished().await.unwrap();
    // The kernel keeps the IP header's ECT(0) on loopback and the driver reads it, so the
    // server counts the client's marks and reports them, and the client's path validates.
    let sent = c.paths()[0].ecn;
    let received = s.paths()[0].ecn;
    eprintln!("client {sent:?}\nserver {received:?}");
    assert_eq!(sent.state, EcnState::Capable, "{sent:?}");
    assert!(sent.marked_sent > polypath_quic::ecn::TESTING_PACKETS);
    assert!(received.received_ect0 > polypath_quic::ecn::TESTING_PACKETS);
    assert_eq!(received.received_ce, 0);
}

/// The server's preferred address (RFC 9000 section 9.6) over real sockets: the server
/// endpoint listens on 127.0.0.1 and on its preferred address 127.0.0.2 (a second
/// socket); the client connects to the first, validates the second once the handshake is
/// confirmed and moves there, and an upload completes; both sides count the move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_moves_to_the_server_preferred_address() {
    let (server_tls, client_tls) = tls_pair();
    // A free port on 127.0.0.2 for the preferred address (it must be known up front).
    let preferred = std::net::UdpSocket::bind("127.0.0.2:0")
        .and_then(|s| s.local_addr())
        .unwrap();
    let mut server_config = ServerConfig::new(server_tls);
    server_config.transport = Arc::new(TransportConfig {
        preferred_address: Some(preferred),
        ..TransportConfig::default()
    });
    let server =
        Endpoint::server(addr("127.0.0.1:0"), EndpointConfig::random(), server_config).unwrap();
    assert_eq!(server.local_addrs().len(), 2);
    assert_eq!(server.local_addrs()[1], preferred);
    let client = Endpoint::client(&[addr("127.0.0.1:0")], EndpointConfig::random()).unwrap();
    let cc = ClientConfig::new(client_tls);
    let (c, s) = connect(&server, &client, cc).await;
    let size = 1024 * 1024;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    let receiver = tokio::spawn(async move {
        let (_, mut recv) = s.accept_bi().await.unwrap();
        let got = recv.read_to_end(usize::MAX).await.unwrap();
        (got, s)
    });
    // The move happens after the handshake is confirmed; wait for it before the upload
    // so the data goes to the preferred address.
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.stats().preferred_address_migrations == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(c.stats().preferred_address_migrations, 1);
    assert_eq!(c.remote_address(), Some(preferred));
    let (mut send, _recv) = c.open_bi().await.unwrap();
    send.write_all(&data).await.unwrap();
    send.finish().unwrap();
    let (got, s) = receiver.await.unwrap();
    assert!(got == data, "received data differs");
    send.finished().await.unwrap();
    assert_eq!(s.stats().preferred_address_migrations, 1);
    let server_local = s.paths().first().map(|p| p.snapshot.local);
    assert_eq!(server_local, Some(preferred));
    c.close(0, b"done");
    drop((send, _recv, c, s));
    tokio::time::timeout(Duration::from_secs(5), client.wait_idle())
        .await
        .unwrap();
}
