//! Multipath QUIC: negotiation, opening paths, spreading data, abandoning and losing paths.

use super::*;
use crate::sched::{PathStatus, RoundRobinFactory, SchedulerFactory};

fn mp_transport(scheduler: Arc<dyn SchedulerFactory>) -> TransportConfig {
    TransportConfig {
        initial_max_path_id: Some(4),
        scheduler,
        ..TransportConfig::default()
    }
}

/// A handshaken multipath pair with a second path from `client_addr2()` validated.
fn two_paths(scheduler: Arc<dyn SchedulerFactory>) -> (Pair, PathId) {
    let mut pair = Pair::new(mp_transport(scheduler.clone()), mp_transport(scheduler));
    pair.handshake();
    assert!(pair.client().is_multipath() && pair.server().is_multipath());
    // Let the connection IDs for new paths arrive.
    pair.run_until(Duration::from_millis(100), |_| false);
    let now = pair.now;
    let id = pair
        .client()
        .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
        .expect("path opens");
    assert_ne!(id, PathId::ZERO);
    let validated = pair.run_until(Duration::from_secs(2), |p| {
        let c = p
            .client()
            .paths()
            .iter()
            .any(|i| i.snapshot.id == id && i.snapshot.state == PathState::Validated);
        let s = p
            .server()
            .paths()
            .iter()
            .any(|i| i.snapshot.id == id && i.snapshot.state == PathState::Validated);
        c && s
    });
    assert!(validated, "both sides validate the new path");
    (pair, id)
}

fn bytes_on(conn: &mut Connection, id: PathId) -> u64 {
    conn.paths()
        .iter()
        .find(|p| p.snapshot.id == id)
        .map_or(0, |p| p.stats.payload_bytes_sent)
}

#[test]
fn multipath_is_negotiated_only_when_both_want_it() {
    let mut pair = Pair::new(
        mp_transport(Arc::new(RoundRobinFactory)),
        TransportConfig::default(),
    );
    pair.handshake();
    assert!(!pair.client().is_multipath());
    let now = pair.now;
    assert_eq!(
        pair.client()
            .open_path(now, client_addr2(), server_addr(), PathStatus::Available),
        Err(super::super::OpenPathError::MultipathNotNegotiated)
    );
}

#[test]
fn round_robin_spreads_data_over_both_paths() {
    let (mut pair, id) = two_paths(Arc::new(RoundRobinFactory));
    let got = pair.transfer(3_000_000, Duration::from_secs(20));
    assert!(got == expected_payload(3_000_000));
    let (p0, p1) = (
        bytes_on(pair.client(), PathId::ZERO),
        bytes_on(pair.client(), id),
    );
    assert!(
        p0 > 500_000 && p1 > 500_000,
        "both paths carried data: {p0} and {p1}"
    );
    assert!(
        pair.server()
            .paths()
            .iter()
            .all(|p| p.stats.packets_received > 0)
    );
}

#[test]
fn min_rtt_prefers_the_faster_path() {
    let (mut pair, id) = two_paths(Arc::new(crate::sched::MinRttFactory));
    pair.extra_delay
        .insert(client_addr2(), Duration::from_millis(40));
    // A transfer small enough that the fast path's window suffices most of the time.
    for _ in 0..5 {
        let got = pair.transfer(100_000, Duration::from_secs(10));
        assert_eq!(got.len(), 100_000);
    }
    let (fast, slow) = (
        bytes_on(pair.client(), PathId::ZERO),
        bytes_on(pair.client(), id),
    );
    assert!(
        fast > 4 * slow,
        "minRTT keeps data on the 10 ms path: {fast} vs {slow}"
    );
}

#[test]
fn transfer_survives_a_path_dying_mid_transfer() {
    transfer_survives_losing(client_addr2());
}

/// The handshake path dies: its in-flight data and the peer's flow-control credit must move
/// to the second path, or the sender stays blocked until the idle timeout.
#[test]
fn transfer_survives_the_handshake_path_dying_mid_transfer() {
    transfer_survives_losing(client_addr());
}

/// A 12 MB transfer over two paths (more than the 8 MiB stream window, so flow-control
/// credit must reach the sender after the path died) in which every datagram from or to
/// the client address `dying` is dropped once 40% arrived: the data arrives intact and
/// never stalls for 1 s.
fn transfer_survives_losing(dying: SocketAddr) {
    let (mut pair, _) = two_paths(Arc::new(RoundRobinFactory));
    let start = pair.now;
    let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = dead.clone();
    pair.drop = Some(Box::new(move |_, src, dst| {
        flag.load(std::sync::atomic::Ordering::Relaxed) && (src == dying || dst == dying)
    }));
    // Kill the path once 40% of the data arrived.
    let killer = dead.clone();
    let id_stream = pair.client().open_stream(Dir::Uni).unwrap();
    let payload = expected_payload(12_000_000);
    let mut written = 0;
    let mut received = Vec::new();
    let mut server_stream = None;
    let mut last_progress = pair.now;
    let mut longest_gap = Duration::ZERO;
    let mut finished = false;
    let mut killed_after = None;
    while pair.now < start + Duration::from_secs(30) {
        if received.len() >= payload.len() * 4 / 10 && killed_after.is_none() {
            killer.store(true, std::sync::atomic::Ordering::Relaxed);
            killed_after = Some(received.len());
        }
        if written < payload.len() {
            written += pair
                .client()
                .write(id_stream, &payload[written..])
                .unwrap_or(0);
        } else if !finished {
            pair.client().finish(id_stream).unwrap();
            finished = true;
        }
        if server_stream.is_none() {
            server_stream = pair.server().accept_stream(Dir::Uni);
        }
        let mut done = false;
        if let Some(sid) = server_stream {
            loop {
                match pair.server().read(sid, usize::MAX) {
                    Ok(Some(chunk)) => {
                        received.extend_from_slice(&chunk);
                        longest_gap = longest_gap.max(pair.now - last_progress);
                        last_progress = pair.now;
                    }
                    Ok(None) => {
                        done = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        if done || !pair.step_until(Some(pair.now + Duration::from_millis(5))) {
            break;
        }
    }
    eprintln!("path from {dying} died after {killed_after:?} bytes; longest gap {longest_gap:?}");
    assert!(
        killed_after.is_some_and(|b| b < payload.len()),
        "the path died mid-transfer"
    );
    assert!(
        received == payload,
        "delivered intact ({} of {} bytes)",
        received.len(),
        payload.len()
    );
    assert!(
        longest_gap < Duration::from_secs(1),
        "stall of {longest_gap:?} after the path from {dying} died"
    );
}

#[test]
fn abandoning_a_path_mid_transfer_keeps_the_connection() {
    let (mut pair, id) = two_paths(Arc::new(RoundRobinFactory));
    assert_eq!(
        pair.transfer(500_000, Duration::from_secs(10)).len(),
        500_000
    );
    let now = pair.now;
    assert!(
        pair.client()
            .abandon_path(now, id, TransportErrorCode::APPLICATION_ABANDON_PATH)
    );
    let got = pair.transfer(1_000_000, Duration::from_secs(10));
    assert!(got == expected_payload(1_000_000));
    pair.run_until(Duration::from_secs(3), |_| false);
    assert!(
        pair.client().paths().iter().all(|p| p.snapshot.id != id),
        "the client dropped the abandoned path"
    );
    assert!(
        pair.server().paths().iter().all(|p| p.snapshot.id != id),
        "the server answered with PATH_ABANDON and dropped it"
    );
    assert!(!pair.client().is_closed());
}

#[test]
fn backup_path_is_used_only_when_the_primary_cannot_send() {
    let (mut pair, id) = two_paths(Arc::new(crate::sched::MinRttFactory));
    let now = pair.now;
    assert!(pair.client().set_path_status(now, id, PathStatus::Backup));
    // Even though the backup path is faster, the available path carries the data.
    pair.extra_delay
        .insert(client_addr(), Duration::from_millis(20));
    let before = bytes_on(pair.client(), id);
    for _ in 0..3 {
        assert_eq!(pair.transfer(50_000, Duration::from_secs(10)).len(), 50_000);
    }
    let on_backup = bytes_on(pair.client(), id) - before;
    let on_primary = bytes_on(pair.client(), PathId::ZERO);
    assert!(
        on_backup * 10 < on_primary,
        "backup path carried {on_backup} vs primary {on_primary}"
    );
    // The server learned the status too.
    let peer_status = pair
        .server()
        .paths()
        .iter()
        .find(|p| p.snapshot.id == id)
        .and_then(|p| p.snapshot.peer_status);
    assert_eq!(peer_status, Some(PathStatus::Backup));
}

#[test]
fn wrr_weights_change_at_run_time_through_the_connection() {
    // True WRR, weights 1:1 from the factory; the application re-weights the paths of a
    // live connection with `Connection::configure_scheduler`, between two transfers. The
    // second path is 30 ms slower, so only the weights can explain the proportions.
    let (mut pair, id) = two_paths(Arc::new(crate::sched::WrrFactory::new()));
    pair.extra_delay
        .insert(client_addr2(), Duration::from_millis(30));
    let ratio_after = |pair: &mut Pair, weights: Option<&str>| {
        if let Some(w) = weights {
            assert_eq!(pair.client().configure_scheduler("weights", w), Ok(()));
        }
        let before = (
            bytes_on(pair.client(), PathId::ZERO),
            bytes_on(pair.client(), id),
        );
        let got = pair.transfer(2_000_000, Duration::from_secs(30));
        assert!(got == expected_payload(2_000_000));
        let sent = (
            bytes_on(pair.client(), PathId::ZERO) - before.0,
            bytes_on(pair.client(), id) - before.1,
        );
        sent.0 as f64 / sent.1 as f64
    };
    let even = ratio_after(&mut pair, None);
    let three_to_one = ratio_after(&mut pair, Some("3,1"));
    let one_to_three = ratio_after(&mut pair, Some("1,3"));
    println!(
        "payload bytes path 0 / path 1: 1:1 {even:.3}, 3:1 {three_to_one:.3}, 1:3 {one_to_three:.3}"
    );
    assert!((0.9..1.1).contains(&even), "1:1 gave {even}");
    assert!(
        (2.7..3.3).contains(&three_to_one),
        "3:1 gave {three_to_one}"
    );
    assert!(
        (1.0 / 3.3..1.0 / 2.7).contains(&one_to_three),
        "1:3 gave {one_to_three}"
    );
    // A bad value is refused and changes nothing.
    assert!(pair.client().configure_scheduler("weights", "0,1").is_err());
    assert_eq!(pair.client().scheduler_name(), "wrr");
}

/// With two paths allowed, a path abandoned by both sides gives its path ID back as soon as
/// the PATH_ABANDON frames have crossed (MAX_PATH_ID), not only when its state is dropped
/// three PTOs later, so a new path can be opened at once. (Found by the noq interop
/// matrix: after an abandonment noq waited seconds for MAX_PATH_ID when polypath had no RTT
/// sample on the abandoned path, whose initial-RTT PTO then set the discard time.)
#[test]
fn abandoned_path_id_is_given_back_once_both_sides_abandoned_it() {
    let transport = || TransportConfig {
        initial_max_path_id: Some(1),
        scheduler: Arc::new(RoundRobinFactory),
        ..TransportConfig::default()
    };
    let mut pair = Pair::new(transport(), transport());
    pair.handshake();
    pair.run_until(Duration::from_millis(100), |_| false);
    let now = pair.now;
    let first = pair
        .client()
        .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
        .expect("path 1 opens");
    assert!(pair.run_until(Duration::from_secs(2), |p| {
        p.server()
            .paths()
            .iter()
            .any(|i| i.snapshot.id == first && i.snapshot.state == PathState::Validated)
    }));
    let now = pair.now;
    assert!(
        pair.client()
            .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
            .is_err(),
        "only two paths are allowed"
    );
    assert!(
        pair.client()
            .abandon_path(now, first, TransportErrorCode::APPLICATION_ABANDON_PATH)
    );
    let abandoned_at = pair.now;
    // The PATH_ABANDON frames cross in one round trip (20 ms here), MAX_PATH_ID and the new
    // path's connection IDs in one more; three PTOs are well over 100 ms.
    let mut second = None;
    let reopened = pair.run_until(Duration::from_millis(100), |p| {
        let now = p.now;
        if let Ok(id) =
            p.client()
                .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
        {
            second = Some(id);
        }
        second.is_some()
    });
    assert!(
        reopened,
        "no new path within 100 ms of the abandonment (at {:?})",
        pair.now - abandoned_at
    );
    let second = second.unwrap();
    assert!(second.0 > first.0);
    assert!(pair.run_until(Duration::from_secs(2), |p| {
        p.client()
            .paths()
            .iter()
            .any(|i| i.snapshot.id == second && i.snapshot.state == PathState::Validated)
    }));
    assert_eq!(
        pair.transfer(200_000, Duration::from_secs(10)).len(),
        200_000
    );
    assert!(!pair.client().is_closed() && !pair.server().is_closed());
}
