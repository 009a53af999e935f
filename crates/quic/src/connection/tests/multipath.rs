//! Multipath QUIC: negotiation, opening paths, spreading data, abandoning and losing paths.

use super::*;
use crate::sched::{PathStatus, RoundRobinFactory, SchedulerFactory};
use polypath_link::{CellId, DownReason, LinkEvent, LinkEventKind};

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

/// A transfer on a unidirectional stream that the tests drive step by step: an upload
/// (client to server) or, from [`Upload::start_download`], a download.
struct Upload {
    /// The server sends.
    download: bool,
    stream: StreamId,
    payload: Vec<u8>,
    /// Bytes the application hands over per millisecond (it is application-limited, so
    /// every path keeps getting data however fast the network is).
    per_ms: usize,
    started: Instant,
    written: usize,
    finished: bool,
    /// The receiver's side of the stream, once accepted.
    server_stream: Option<StreamId>,
    received: Vec<u8>,
}

impl Upload {
    fn start(pair: &mut Pair, len: usize, per_ms: usize) -> Self {
        Self::open(pair, false, len, per_ms)
    }

    fn start_download(pair: &mut Pair, len: usize, per_ms: usize) -> Self {
        Self::open(pair, true, len, per_ms)
    }

    fn open(pair: &mut Pair, download: bool, len: usize, per_ms: usize) -> Self {
        let sender = if download {
            pair.server()
        } else {
            pair.client()
        };
        let stream = sender.open_stream(Dir::Uni).expect("stream opens");
        Upload {
            download,
            stream,
            payload: expected_payload(len),
            per_ms,
            started: pair.now,
            written: 0,
            finished: false,
            server_stream: None,
            received: Vec::new(),
        }
    }

    /// Writes what the client takes, reads what the server has, and advances virtual time
    /// by at most `step`.
    fn pump(&mut self, pair: &mut Pair, step: Duration) {
        if self.written < self.payload.len() {
            let ms = (pair.now - self.started).as_millis() + 1;
            let allowed =
                usize::try_from(ms).map_or(usize::MAX, |ms| ms.saturating_mul(self.per_ms));
            let end = allowed.min(self.payload.len());
            self.written += self
                .sender(pair)
                .write(self.stream, &self.payload[self.written..end])
                .unwrap_or(0);
        } else if !self.finished {
            self.sender(pair).finish(self.stream).unwrap();
            self.finished = true;
        }
        if self.server_stream.is_none() {
            self.server_stream = self.receiver(pair).accept_stream(Dir::Uni);
        }
        if let Some(sid) = self.server_stream {
            while let Ok(Some(chunk)) = self.receiver(pair).read(sid, usize::MAX) {
                self.received.extend_from_slice(&chunk);
            }
        }
        let limit = pair.now + step;
        if !pair.step_until(Some(limit)) {
            // Nothing scheduled: time passes all the same.
            pair.now = limit;
        }
    }

    fn sender<'p>(&self, pair: &'p mut Pair) -> &'p mut Connection {
        if self.download {
            pair.server()
        } else {
            pair.client()
        }
    }

    fn receiver<'p>(&self, pair: &'p mut Pair) -> &'p mut Connection {
        if self.download {
            pair.client()
        } else {
            pair.server()
        }
    }

    /// Pumps for `span` of virtual time.
    fn pump_for(&mut self, pair: &mut Pair, span: Duration) {
        let end = pair.now + span;
        while pair.now < end {
            self.pump(pair, Duration::from_millis(1));
        }
    }

    fn complete(&self) -> bool {
        self.received == self.payload
    }
}

/// A link event from the client's second interface.
fn second_interface(kind: LinkEventKind) -> LinkEvent {
    LinkEvent::new(0, 0, 1, kind)
}

fn link_lost() -> LinkEventKind {
    LinkEventKind::LinkDown {
        cell: Some(CellId(1)),
        reason: DownReason::NoCoverage,
    }
}

fn snapshot(conn: &mut Connection, id: PathId) -> crate::sched::PathSnapshot {
    conn.paths()
        .into_iter()
        .find(|p| p.snapshot.id == id)
        .map(|p| p.snapshot)
        .expect("path exists")
}

/// Every datagram from or to the client's second address is dropped while `cut` holds;
/// returns the switch.
fn cut_second_interface(pair: &mut Pair) -> Arc<std::sync::atomic::AtomicBool> {
    let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cut.clone();
    pair.drop = Some(Box::new(move |_, src, dst| {
        flag.load(std::sync::atomic::Ordering::Relaxed)
            && (src == client_addr2() || dst == client_addr2())
    }));
    cut
}

/// Round robin would give the second path every other packet; once its interface reports
/// the link lost, it gets no new stream data (not even the retransmissions of what was in
/// flight on it), the other path carries the whole upload, and the path is kept.
#[test]
fn a_lost_link_takes_no_new_data_while_another_path_works() {
    let (mut pair, id) = two_paths(Arc::new(RoundRobinFactory));
    let cut = cut_second_interface(&mut pair);
    let mut upload = Upload::start(&mut pair, 6_000_000, usize::MAX);
    let start = pair.now;
    while upload.received.len() < 1_000_000 && pair.now < start + Duration::from_secs(10) {
        upload.pump(&mut pair, Duration::from_millis(1));
    }
    let before = bytes_on(pair.client(), id);
    assert!(
        before > 200_000,
        "round robin used the second path: {before}"
    );
    cut.store(true, std::sync::atomic::Ordering::Relaxed);
    let now = pair.now;
    pair.client().handle_link_event(
        now,
        &second_interface(link_lost()),
        Some(client_addr2().ip()),
    );
    let at_loss = upload.received.len();
    upload.pump_for(&mut pair, Duration::from_secs(2));
    let on_lost = bytes_on(pair.client(), id) - before;
    let moved = upload.received.len() - at_loss;
    println!("after the loss: {moved} bytes delivered, {on_lost} sent on the lost path");
    assert_eq!(on_lost, 0, "stream data went on the lost path");
    assert!(
        moved > 1_000_000,
        "the other path carried on: {moved} bytes"
    );
    let lost = snapshot(pair.client(), id);
    assert_eq!(lost.state, PathState::Validated, "the path is kept");
    assert!(lost.link.link_lost);
    while !upload.complete() && pair.now < now + Duration::from_secs(30) {
        upload.pump(&mut pair, Duration::from_millis(1));
    }
    assert!(upload.complete(), "the upload completes on the other path");
}

/// Two paths under round robin, a transfer of 20 kB per millisecond (160 Mbit/s, for 4 s;
/// a download from the server if `download`), and after 300 ms a 3 s outage of the
/// client's second interface that the client's interface reports as a lost link. Returns
/// the pair, the second path's ID, the outage switch (still on) and the transfer.
fn three_second_outage_of_second_path(
    download: bool,
) -> (Pair, PathId, Arc<std::sync::atomic::AtomicBool>, Upload) {
    let (mut pair, id) = two_paths(Arc::new(RoundRobinFactory));
    let cut = cut_second_interface(&mut pair);
    let mut transfer = if download {
        Upload::start_download(&mut pair, 80_000_000, 20_000)
    } else {
        Upload::start(&mut pair, 80_000_000, 20_000)
    };
    transfer.pump_for(&mut pair, Duration::from_millis(300));
    cut.store(true, std::sync::atomic::Ordering::Relaxed);
    let now = pair.now;
    pair.client().handle_link_event(
        now,
        &second_interface(link_lost()),
        Some(client_addr2().ip()),
    );
    transfer.pump_for(&mut pair, Duration::from_secs(3));
    (pair, id, cut, transfer)
}

/// During a 3 s outage the second path's probe timeout backs off (three or more PTOs in a
/// row, so the next one would come hundreds of milliseconds later). When the interface
/// reports the link back, a PING leaves on the path at once, without waiting for that
/// timeout, and the path carries stream data again within a few round trips.
#[test]
fn a_regained_link_is_probed_at_once_and_carries_data_again() {
    let (mut pair, id, cut, mut upload) = three_second_outage_of_second_path(false);
    let sent_from_second = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let backed_off = snapshot(pair.client(), id).pto_count;
    assert!(
        backed_off >= 3,
        "the PTO backed off: pto_count {backed_off}"
    );

    // The link is back. Without the signal nothing leaves on the path now: the next probe
    // waits for the backed-off timeout.
    let counter = sent_from_second.clone();
    let flag = cut.clone();
    pair.drop = Some(Box::new(move |_, src, dst| {
        if src == client_addr2() {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        flag.load(std::sync::atomic::Ordering::Relaxed)
            && (src == client_addr2() || dst == client_addr2())
    }));
    cut.store(false, std::sync::atomic::Ordering::Relaxed);
    pair.send_all();
    assert_eq!(
        sent_from_second.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "nothing was due on the path"
    );
    let back = pair.now;
    pair.client().handle_link_event(
        back,
        &second_interface(LinkEventKind::LinkUp { cell: CellId(1) }),
        Some(client_addr2().ip()),
    );
    pair.send_all();
    assert!(
        sent_from_second.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "a probe left on the path as the link came back"
    );
    assert_eq!(snapshot(pair.client(), id).pto_count, 0);

    // The path takes stream data again once the PING is acknowledged, one round trip
    // (20 ms here) later; data sent on it is acknowledged one round trip after that.
    let acked_on = |pair: &mut Pair| {
        pair.client()
            .paths()
            .into_iter()
            .find(|p| p.snapshot.id == id)
            .map_or(0, |p| p.stats.payload_bytes_acked)
    };
    let sent_before = bytes_on(pair.client(), id);
    let (mut sent_at, mut acked_at) = (None, None);
    while pair.now < back + Duration::from_millis(200) {
        upload.pump(&mut pair, Duration::from_millis(1));
        if sent_at.is_none() && bytes_on(pair.client(), id) > sent_before {
            sent_at = Some(pair.now - back);
        }
        // More acknowledged than was ever sent before: new data went through.
        if acked_at.is_none() && acked_on(&mut pair) > sent_before {
            acked_at = Some(pair.now - back);
        }
    }
    println!(
        "pto_count {backed_off} before; stream data sent on the path {sent_at:?} and acknowledged {acked_at:?} after the link came back"
    );
    let sent_at = sent_at.expect("the path carries stream data again");
    let acked_at = acked_at.expect("stream data on the path is acknowledged");
    assert!(
        sent_at >= Duration::from_millis(20),
        "no stream data before the probe was acknowledged ({sent_at:?})"
    );
    assert!(
        acked_at <= Duration::from_millis(60),
        "stream data acknowledged on the path {acked_at:?} after the link came back"
    );
    let after = bytes_on(pair.client(), id) - sent_before;
    assert!(after > 20_000, "the path is in use again: {after} bytes");
}

/// Only the client's interface knows of the outage (the server's own link never went down),
/// and the server sends. During a 3 s outage the server's probe timeout on the second path
/// backs off. When the client's interface reports the link back, the client's PING reaches
/// the server after a silence longer than a probe timeout: the server takes it as the path
/// being back, restarts its backoff and probes at once, so its stream data flows on the path
/// again within a few round trips (20 ms each) instead of at its next backed-off timeout.
#[test]
fn the_peer_of_a_regained_link_probes_the_path_when_its_packets_resume() {
    let (mut pair, id, cut, mut download) = three_second_outage_of_second_path(true);
    let backed_off = snapshot(pair.server(), id).pto_count;
    assert!(
        backed_off >= 3,
        "the server's PTO backed off: pto_count {backed_off}"
    );
    cut.store(false, std::sync::atomic::Ordering::Relaxed);
    let back = pair.now;
    pair.client().handle_link_event(
        back,
        &second_interface(LinkEventKind::LinkUp { cell: CellId(1) }),
        Some(client_addr2().ip()),
    );
    let sent_before = bytes_on(pair.server(), id);
    let mut resumed_at = None;
    while pair.now < back + Duration::from_millis(300) && resumed_at.is_none() {
        download.pump(&mut pair, Duration::from_millis(1));
        if bytes_on(pair.server(), id) > sent_before {
            resumed_at = Some(pair.now - back);
        }
    }
    println!(
        "server pto_count {backed_off} during the outage; its stream data on the path resumed {resumed_at:?} after the client's link came back"
    );
    let resumed_at = resumed_at.expect("the server sends on the path again");
    assert!(
        resumed_at <= Duration::from_millis(60),
        "the server resumed {resumed_at:?} after the link came back"
    );
    assert_eq!(snapshot(pair.server(), id).pto_count, 0);
    download.pump_for(&mut pair, Duration::from_millis(200));
    let after = bytes_on(pair.server(), id) - sent_before;
    assert!(after > 20_000, "the path is in use again: {after} bytes");
}

/// The QoS policy scheduler with per-class modes: `low_latency` on the second path only,
/// `critical` duplicated over both, everything else (best effort) on the first path only.
fn class_policy() -> Arc<dyn SchedulerFactory> {
    let config = crate::sched::QosPolicyConfig::from_json(
        r#"{
          "default": { "mode": "select", "allowed_paths": [{ "path_id": 0, "priority": 1 }] },
          "low_latency": { "mode": "select", "allowed_paths": [{ "path_id": 1, "priority": 1 }] },
          "critical": { "mode": "duplicate" }
        }"#,
    )
    .unwrap();
    Arc::new(crate::sched::QosPolicyFactory::new(config).unwrap())
}

fn datagram_bytes_received(pair: &mut Pair) -> Vec<Bytes> {
    std::iter::from_fn(|| pair.server().recv_datagram()).collect()
}

#[test]
fn each_datagram_takes_its_class_path() {
    use crate::sched::QosClass;
    let (mut pair, id) = two_paths(class_policy());
    let (b0, b1) = (
        bytes_on(pair.client(), PathId::ZERO),
        bytes_on(pair.client(), id),
    );
    for k in 0..50u8 {
        let class = if k % 2 == 0 {
            QosClass::LowLatency
        } else {
            QosClass::BestEffort
        };
        pair.client()
            .send_datagram_with_class(Bytes::from(vec![k; 500]), class)
            .unwrap();
    }
    assert_eq!(pair.client().datagram_queued_bytes(), 50 * 500);
    assert_eq!(
        pair.client().datagram_queued_bytes_of(QosClass::LowLatency),
        25 * 500
    );
    pair.run_until(Duration::from_secs(2), |p| {
        p.client().datagram_queued_bytes() == 0
    });
    // The last ones are still on their way.
    pair.run_until(Duration::from_millis(200), |_| false);
    let got = datagram_bytes_received(&mut pair);
    assert_eq!(got.len(), 50, "every datagram arrived once");
    let (d0, d1) = (
        bytes_on(pair.client(), PathId::ZERO) - b0,
        bytes_on(pair.client(), id) - b1,
    );
    // 25 x 500 bytes on each path, nothing of one class on the other's path.
    assert!((12_500..13_500).contains(&d0), "path 0 carried {d0}");
    assert!((12_500..13_500).contains(&d1), "path 1 carried {d1}");
}

#[test]
fn a_stream_of_a_class_takes_its_class_path() {
    use crate::sched::QosClass;
    let (mut pair, id) = two_paths(class_policy());
    let b1 = bytes_on(pair.client(), id);
    let s = pair.client().open_stream(Dir::Uni).unwrap();
    assert_eq!(pair.client().stream_class(s), Some(QosClass::BestEffort));
    assert!(pair.client().set_stream_class(s, QosClass::LowLatency));
    assert_eq!(pair.client().stream_class(s), Some(QosClass::LowLatency));
    let data = vec![7u8; 200_000];
    let mut written = 0;
    while written < data.len() {
        written += pair.client().write(s, &data[written..]).unwrap();
        pair.run_until(Duration::from_millis(20), |_| false);
    }
    pair.client().finish(s).unwrap();
    pair.run_until(Duration::from_secs(3), |_| false);
    let d1 = bytes_on(pair.client(), id) - b1;
    assert!(
        d1 >= 200_000,
        "the low-latency stream went on path 1: {d1} bytes"
    );
    let d0 = pair
        .client()
        .paths()
        .iter()
        .find(|p| p.snapshot.id == PathId::ZERO)
        .map_or(0, |p| p.stats.payload_bytes_sent);
    assert!(d0 < 20_000, "little stream data on path 0: {d0}");
}

#[test]
fn a_duplicated_class_sends_each_datagram_on_both_paths() {
    use crate::sched::QosClass;
    let (mut pair, id) = two_paths(class_policy());
    let (b0, b1) = (
        bytes_on(pair.client(), PathId::ZERO),
        bytes_on(pair.client(), id),
    );
    for k in 0..40u8 {
        pair.client()
            .send_datagram_with_class(Bytes::from(vec![k; 300]), QosClass::Critical)
            .unwrap();
        pair.run_until(Duration::from_millis(5), |_| false);
    }
    pair.run_until(Duration::from_secs(2), |p| {
        p.client().datagram_queued_bytes() == 0
    });
    // The last ones are still on their way.
    pair.run_until(Duration::from_millis(200), |_| false);
    let got = datagram_bytes_received(&mut pair);
    assert_eq!(got.len(), 80, "two copies of each datagram arrived");
    let (d0, d1) = (
        bytes_on(pair.client(), PathId::ZERO) - b0,
        bytes_on(pair.client(), id) - b1,
    );
    assert!(
        d0 >= 12_000 && d1 >= 12_000,
        "both paths carried every datagram: {d0}, {d1}"
    );
    // Copies are dropped, not kept, when a path stops taking data: none waits now.
    assert_eq!(pair.client().datagrams_dropped(), 0);
    // One copy beyond the first of each, counted for its class alone.
    assert_eq!(pair.client().datagram_copies(QosClass::Critical), 40);
    assert_eq!(pair.client().datagram_copies(QosClass::BestEffort), 0);
}

#[test]
fn idle_paths_are_probed_when_asked() {
    let transport = |probe: Option<Duration>| TransportConfig {
        idle_path_probe_interval: probe,
        ..mp_transport(Arc::new(crate::sched::MinRttFactory))
    };
    for probe in [None, Some(Duration::from_millis(50))] {
        let mut pair = Pair::new(transport(probe), transport(probe));
        pair.handshake();
        pair.run_until(Duration::from_millis(100), |_| false);
        let now = pair.now;
        let id = pair
            .client()
            .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
            .unwrap();
        pair.run_until(Duration::from_millis(500), |_| false);
        let sent = |pair: &mut Pair| {
            pair.client()
                .paths()
                .iter()
                .find(|p| p.snapshot.id == id)
                .map_or(0, |p| p.stats.packets_sent)
        };
        let before = sent(&mut pair);
        pair.run_until(Duration::from_secs(1), |_| false);
        let probes = sent(&mut pair) - before;
        match probe {
            None => assert!(probes <= 1, "{probes} packets on an idle path"),
            Some(_) => assert!(probes >= 15, "only {probes} probes in 1 s at 50 ms"),
        }
    }
}
