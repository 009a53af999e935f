//! A two-path transfer with the largest-cwnd scheduler against round robin, through the
//! public API and the `polypath_quic::testing` network.

use polypath_example_largest_cwnd::LargestCwndFactory;
use polypath_quic::sched::{PathState, PathStatus, RoundRobinFactory, SchedulerFactory};
use polypath_quic::testing::{Pair, client_addr2, expected_payload, server_addr};
use polypath_quic::{PathId, TransportConfig};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of stream payload each path carried in a 3 MB transfer over two equal paths;
/// with `path1_window`, path 1 starts the transfer with that congestion window.
fn split(scheduler: Arc<dyn SchedulerFactory>, path1_window: Option<u64>) -> (u64, u64) {
    let transport = TransportConfig {
        initial_max_path_id: Some(4),
        scheduler,
        ..TransportConfig::default()
    };
    let mut pair = Pair::new(transport.clone(), transport);
    pair.handshake();
    // Let the connection IDs for new paths arrive.
    pair.run_until(Duration::from_millis(100), |_| false);
    let now = pair.now;
    let id = pair
        .client()
        .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
        .expect("path opens");
    let validated = pair.run_until(Duration::from_secs(2), |p| {
        p.client()
            .paths()
            .iter()
            .any(|i| i.snapshot.id == id && i.snapshot.state == PathState::Validated)
    });
    assert!(validated);
    if let Some(bytes) = path1_window {
        pair.client().set_path_window(id, bytes);
    }
    let got = pair.transfer(3_000_000, Duration::from_secs(30));
    assert!(got == expected_payload(3_000_000), "transfer intact");
    let sent = |pair: &mut Pair, path: PathId| {
        pair.client()
            .paths()
            .iter()
            .find(|i| i.snapshot.id == path)
            .map_or(0, |i| i.stats.payload_bytes_sent)
    };
    (sent(&mut pair, PathId(0)), sent(&mut pair, id))
}

#[test]
fn largest_cwnd_keeps_to_the_largest_window_where_round_robin_alternates() {
    let share1 = |(a, b): (u64, u64)| 100.0 * b as f64 / (a + b) as f64;
    let rr = split(Arc::new(RoundRobinFactory), None);
    let lc = split(Arc::new(LargestCwndFactory), None);
    // The scheduler follows the window, not the path ID: give path 1 the larger one.
    let lc_bigger1 = split(Arc::new(LargestCwndFactory), Some(400_000));
    println!(
        "share of path 1: round robin {:.1} % {rr:?}, largest-cwnd {:.1} % {lc:?}, \
         largest-cwnd with path 1's window raised {:.1} % {lc_bigger1:?}",
        share1(rr),
        share1(lc),
        share1(lc_bigger1)
    );
    assert!(
        (25.0..75.0).contains(&share1(rr)),
        "round robin spreads over both paths"
    );
    assert!(share1(lc) < 2.0, "largest-cwnd keeps to path 0");
    assert!(share1(lc_bigger1) > 98.0, "largest-cwnd keeps to path 1");
}
