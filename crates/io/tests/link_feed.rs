//! Link events from a Unix-socket feed drive a live connection's LAMP5G make-before-break
//! path manager over loopback: the target interface's A4 adds a path from the second
//! local address, the source interface's A2 abandons the first path once the new one is
//! validated, and the transfer carries on over the new path.

use polypath_io::link_feed::LinkFeed;
use polypath_io::{Connection, Endpoint, PathEvent, PathId};
use polypath_link::feed::FeedEvent;
use polypath_link::{CellId, LinkEvent, LinkEventKind, MeasEvent};
mod common;
use common::{addr, tls_pair};
use polypath_quic::pm::MakeBeforeBreakFactory;
use polypath_quic::{ClientConfig, EndpointConfig, ServerConfig, TransportConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Generous bound for anything the test waits for (never reached when things work).
const PATIENCE: Duration = Duration::from_secs(30);

/// The feed line of an RRC measurement event entering on `iface`, for the interface with
/// address `local`.
fn rrc_line(t_s: u64, iface: u16, event: MeasEvent, local: &str) -> String {
    FeedEvent {
        event: LinkEvent::new(
            t_s * 1_000_000_000,
            0,
            iface,
            LinkEventKind::RrcEventEntered {
                meas_id: u32::from(iface) + 1,
                event,
                serving: CellId(u32::from(iface) + 1),
                cell: event
                    .has_neighbour()
                    .then_some(CellId(u32::from(iface) + 2)),
            },
        ),
        local: Some(local.parse().unwrap()),
    }
    .to_line()
    .unwrap()
}

fn socket_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("polypath-io-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("feed.sock")
}

/// Waits for a path event matching `want`, giving up after `limit`.
async fn wait_for(
    conn: &Connection,
    limit: Duration,
    want: impl Fn(&PathEvent) -> bool,
) -> Option<PathEvent> {
    tokio::time::timeout(limit, async {
        loop {
            match conn.path_event().await {
                Ok(e) if want(&e) => return Some(e),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feed_events_drive_make_before_break_on_a_live_connection() {
    let (server_tls, client_tls) = tls_pair();
    let mut sc = ServerConfig::new(server_tls);
    sc.transport = Arc::new(TransportConfig {
        initial_max_path_id: Some(4),
        ..TransportConfig::default()
    });
    let server = Endpoint::server(addr("127.0.0.1:0"), EndpointConfig::random(), sc).unwrap();
    let client = Endpoint::client(
        &[addr("127.0.0.1:0"), addr("127.0.0.2:0")],
        EndpointConfig::random(),
    )
    .unwrap();
    let bound = client.local_addrs();
    let mut cc = ClientConfig::new(client_tls);
    cc.transport = Arc::new(TransportConfig {
        initial_max_path_id: Some(4),
        path_manager: Arc::new(MakeBeforeBreakFactory {
            locals: bound.clone(),
            ..MakeBeforeBreakFactory::default()
        }),
        ..TransportConfig::default()
    });

    // The feed: the test is the emulator.
    let path = socket_path("mbb");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();

    let server_addr = server.local_addrs()[0];
    let (c, s) = tokio::join!(client.connect(cc, server_addr, "localhost"), async {
        let s = server.accept().await.unwrap();
        s.handshake().await.unwrap();
        s
    });
    let c = c.unwrap();
    assert!(c.is_multipath());
    assert_eq!(c.paths().len(), 1, "only the first path at the start");

    let feed_conn = c.clone();
    let feed_path = path.clone();
    let applier = tokio::spawn(async move {
        let mut feed = LinkFeed::connect(&feed_path).await.unwrap();
        let mut applied = 0;
        while let Some(ev) = feed.next_event().await {
            feed_conn.handle_link_event(&ev.event, ev.local).unwrap();
            applied += 1;
        }
        (applied, feed.skipped())
    });
    let (mut emulator, _) = tokio::time::timeout(PATIENCE, listener.accept())
        .await
        .unwrap()
        .unwrap();

    let half = 4 * 1024 * 1024;
    let data: Vec<u8> = (0..2 * half).map(|i| (i * 13 % 251) as u8).collect();
    let receiver = tokio::spawn(async move {
        let (_, mut recv) = s.accept_bi().await.unwrap();
        let got = recv.read_to_end(usize::MAX).await.unwrap();
        (got, s)
    });
    let (mut send, _recv) = c.open_bi().await.unwrap();
    send.write_all(&data[..half]).await.unwrap();

    // A malformed line first: skipped, the feed goes on.
    emulator.write_all(b"{\"t_ns\":oops}\n").await.unwrap();
    // The target interface's A4: add a path from 127.0.0.2. Sent again until the path
    // opens (the peer's connection IDs for a new path may still be on their way).
    let add = rrc_line(1, 1, MeasEvent::A4, "127.0.0.2");
    eprintln!("add line: {}", add.trim_end());
    let mut opened = None;
    for _ in 0..(PATIENCE.as_millis() / 200) {
        emulator.write_all(add.as_bytes()).await.unwrap();
        opened = wait_for(
            &c,
            Duration::from_millis(200),
            |e| matches!(e, PathEvent::Opened(id) if *id != PathId(0)),
        )
        .await;
        if opened.is_some() {
            break;
        }
    }
    let Some(PathEvent::Opened(new)) = opened else {
        panic!("the A4 never opened a path: {:?}", c.paths());
    };
    // The source interface's A2 at once: make before break, the first path goes only when
    // the new one is validated.
    let remove = rrc_line(2, 0, MeasEvent::A2, "127.0.0.1");
    eprintln!("remove line: {}", remove.trim_end());
    emulator.write_all(remove.as_bytes()).await.unwrap();
    wait_for(&c, PATIENCE, |e| *e == PathEvent::Abandoned(PathId(0)))
        .await
        .unwrap_or_else(|| panic!("the A2 never abandoned path 0: {:?}", c.paths()));

    send.write_all(&data[half..]).await.unwrap();
    send.finish().unwrap();
    tokio::time::timeout(PATIENCE, send.finished())
        .await
        .unwrap()
        .unwrap();
    let (got, _s) = receiver.await.unwrap();
    assert!(got == data, "the data arrived intact");

    let times = c.path_times();
    eprintln!("{times:#?}");
    let t = |id: PathId| times.iter().find(|t| t.id == id).copied().unwrap();
    let (first, second) = (t(PathId(0)), t(new));
    assert_eq!(second.local.map(|a| a.ip()), Some(bound[1].ip()));
    let validated = second.validated.expect("the new path was validated");
    let abandoned = first.abandoned.expect("the first path was abandoned");
    assert!(second.opened <= validated && validated <= abandoned);
    let carried = c
        .paths()
        .iter()
        .find(|p| p.snapshot.id == new)
        .map_or(0, |p| p.stats.payload_bytes_sent);
    assert!(
        carried >= half as u64 / 2,
        "the new path carried {carried} bytes"
    );

    drop(emulator);
    let (applied, skipped) = tokio::time::timeout(PATIENCE, applier)
        .await
        .unwrap()
        .unwrap();
    assert!(applied >= 2, "{applied} events applied");
    assert_eq!(skipped, 1);
    let _ = std::fs::remove_file(&path);
}
