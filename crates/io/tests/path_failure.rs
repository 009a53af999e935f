//! A two-path transfer where one path dies mid-transfer: the client's second local address
//! is blackholed in a relay the test owns, and the transfer finishes intact on the other
//! path. The receiver timestamps every delivery; the longest gap is the stall.

use polypath_io::relay::{Relay, RelayConfig};
use polypath_io::{Endpoint, PathStatus};
mod common;
use common::{addr, tls_pair};
use polypath_quic::{ClientConfig, EndpointConfig, ServerConfig, TransportConfig};
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZE: usize = 30_000_000;

/// What the receiver saw.
struct Delivery {
    data: Vec<u8>,
    /// Longest time between two deliveries of stream data, and when it ended.
    stall: Duration,
    stall_ended_at: usize,
}

/// Uploads `SIZE` bytes over two paths (127.0.0.1 and 127.0.0.2, through one relay) and
/// blackholes the path from `dying` once 40% have arrived.
async fn transfer_losing_a_path(dying: IpAddr) {
    let (server_tls, client_tls) = tls_pair();
    let transport = Arc::new(TransportConfig {
        initial_max_path_id: Some(4),
        scheduler: polypath_quic::sched::scheduler_by_name("rr").unwrap(),
        ..TransportConfig::default()
    });
    let mut server_config = ServerConfig::new(server_tls);
    server_config.transport = transport.clone();
    let server =
        Endpoint::server(addr("127.0.0.1:0"), EndpointConfig::random(), server_config).unwrap();
    let relay = Relay::start(RelayConfig {
        listen: addr("127.0.0.1:0"),
        upstream: server.local_addrs()[0],
        loss: 0.0,
        seed: 0,
        one_way_delay: std::time::Duration::ZERO,
    })
    .await
    .unwrap();
    let client = Endpoint::client(
        &[addr("127.0.0.1:0"), addr("127.0.0.2:0")],
        EndpointConfig::random(),
    )
    .unwrap();
    let locals = client.local_addrs();
    let mut cc = ClientConfig::new(client_tls);
    cc.transport = transport;

    let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
    let receiver = tokio::spawn(async move {
        let conn = server.accept().await.unwrap();
        let (_send, mut recv) = conn.accept_bi().await.unwrap();
        let mut data = Vec::with_capacity(SIZE);
        let mut kill = Some(kill_tx);
        let mut last = None::<Instant>;
        let (mut stall, mut stall_ended_at) = (Duration::ZERO, 0);
        while let Some(chunk) = recv.read_chunk(usize::MAX).await.unwrap() {
            let now = Instant::now();
            if let Some(last) = last
                && now - last > stall
            {
                stall = now - last;
                stall_ended_at = data.len();
            }
            last = Some(now);
            data.extend_from_slice(&chunk);
            if data.len() >= SIZE * 4 / 10
                && let Some(kill) = kill.take()
            {
                let _ = kill.send(());
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.closed()).await;
        Delivery {
            data,
            stall,
            stall_ended_at,
        }
    });

    let conn = client
        .connect_from(locals[0], cc, relay.local_addr(), "localhost")
        .await
        .unwrap();
    let second = conn
        .open_path(locals[1], PathStatus::Available)
        .await
        .unwrap();
    while conn.paths().iter().any(|p| {
        p.snapshot.id == second && p.snapshot.state != polypath_quic::sched::PathState::Validated
    }) {
        conn.path_event().await.unwrap();
    }
    let data: Vec<u8> = (0..SIZE)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8 ^ (i >> 16) as u8)
        .collect();
    let expected = Sha256::digest(&data);
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    let writer = async {
        for chunk in data.chunks(1 << 20) {
            send.write_all(chunk).await.unwrap();
        }
        send.finish().unwrap();
    };
    let killer = async {
        kill_rx.await.unwrap();
        let before: Vec<(u32, u64)> = conn
            .paths()
            .iter()
            .map(|p| (p.snapshot.id.0, p.stats.payload_bytes_sent))
            .collect();
        relay.blackhole(dying);
        eprintln!("blackholed {dying}; bytes sent per path so far: {before:?}");
        before
    };
    let ((), before) = tokio::join!(writer, killer);
    let delivery = tokio::time::timeout(Duration::from_secs(60), receiver)
        .await
        .expect("transfer did not finish within 60 s after the path died")
        .unwrap();
    let after: Vec<(u32, u64, String)> = conn
        .paths()
        .iter()
        .map(|p| {
            (
                p.snapshot.id.0,
                p.stats.payload_bytes_sent,
                format!("{:?}", p.snapshot.state),
            )
        })
        .collect();
    eprintln!(
        "path {dying} died: longest gap between deliveries {:?} (ended at byte {}), \
         paths at the end {after:?}, relay {:?}",
        delivery.stall,
        delivery.stall_ended_at,
        relay.stats()
    );
    assert_eq!(delivery.data.len(), SIZE);
    assert!(Sha256::digest(&delivery.data) == expected, "data corrupted");
    // Both paths carried data before one died.
    assert_eq!(before.len(), 2);
    assert!(before.iter().all(|&(_, b)| b > 1_000_000), "{before:?}");
    assert!(relay.stats().blackholed > 0);
    assert!(
        delivery.stall < Duration::from_secs(1),
        "stall of {:?}",
        delivery.stall
    );
    conn.close(0, b"done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_path_dies_mid_transfer_and_the_first_finishes_it() {
    transfer_losing_a_path("127.0.0.2".parse().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_path_dies_mid_transfer_and_the_second_finishes_it() {
    transfer_losing_a_path("127.0.0.1".parse().unwrap()).await;
}
