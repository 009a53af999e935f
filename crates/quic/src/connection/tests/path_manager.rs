//! Link hints and path managers in a running connection: hints reach snapshots, scheduler
//! and path manager; full mesh; LAMP5G make-before-break handover; fast failover.

use super::*;
use crate::pm::{
    FastFailoverFactory, FastFailoverParams, FullMeshFactory, MakeBeforeBreakFactory,
    ManualFactory, PathManagerFactory,
};
use crate::sched::{RoundRobinFactory, SchedulerFactory};
use polypath_link::{CellId, CellMeasurement, DownReason, LinkEvent, LinkEventKind, MeasEvent};
use std::net::IpAddr;
use std::sync::Mutex;

fn transport(
    scheduler: Arc<dyn SchedulerFactory>,
    path_manager: Arc<dyn PathManagerFactory>,
) -> TransportConfig {
    TransportConfig {
        initial_max_path_id: Some(4),
        scheduler,
        path_manager,
        ..TransportConfig::default()
    }
}

fn ip(addr: SocketAddr) -> Option<IpAddr> {
    Some(addr.ip())
}

fn event(iface: u16, kind: LinkEventKind) -> LinkEvent {
    LinkEvent::new(0, 0, iface, kind)
}

fn rrc(event_type: MeasEvent) -> LinkEventKind {
    LinkEventKind::RrcEventEntered {
        meas_id: 1,
        event: event_type,
        serving: CellId(1),
        cell: event_type.has_neighbour().then_some(CellId(2)),
    }
}

fn snapshot_of(conn: &Connection, id: PathId) -> Option<PathSnapshot> {
    conn.paths()
        .into_iter()
        .find(|p| p.snapshot.id == id)
        .map(|p| p.snapshot)
}

fn bytes_on(conn: &Connection, id: PathId) -> u64 {
    conn.paths()
        .iter()
        .find(|p| p.snapshot.id == id)
        .map_or(0, |p| p.stats.payload_bytes_sent)
}

/// A qlog sink shared with the test.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Collect {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Collects the client's qlog only.
struct ClientQlog(Collect);

impl crate::qlog::QlogFactory for ClientQlog {
    fn create(&self, side: Side, _: &ConnectionId) -> Option<Box<dyn std::io::Write + Send>> {
        side.is_client()
            .then(|| Box::new(self.0.clone()) as Box<dyn std::io::Write + Send>)
    }
}

/// A multipath pair whose client uses `path_manager` (and writes qlog to the returned
/// sink); the server uses none.
fn pair_with(
    scheduler: Arc<dyn SchedulerFactory>,
    path_manager: Arc<dyn PathManagerFactory>,
) -> (Pair, Collect) {
    let (client_tls, server_tls) = tls_configs();
    let mut client = ClientConfig::new(client_tls);
    client.transport = Arc::new(transport(scheduler.clone(), path_manager));
    let mut server = ServerConfig::new(server_tls);
    server.transport = Arc::new(transport(scheduler, Arc::new(ManualFactory)));
    let qlog = Collect::default();
    let mut endpoint = EndpointConfig::from_seed(1);
    endpoint.qlog = Some(Arc::new(ClientQlog(qlog.clone())));
    let mut pair = Pair::with_configs(client, server, endpoint);
    pair.handshake();
    // Let the connection IDs for new paths arrive.
    pair.run_until(Duration::from_millis(100), |_| false);
    (pair, qlog)
}

fn qlog_records(sink: &Collect) -> Vec<serde_json::Value> {
    let bytes = sink.0.lock().unwrap().clone();
    crate::qlog::parse_json_seq(&bytes).unwrap()
}

fn wait_validated(pair: &mut Pair, id: PathId) -> bool {
    pair.run_until(Duration::from_secs(2), |p| {
        snapshot_of(p.client(), id).is_some_and(|s| s.state == PathState::Validated)
    })
}

/// A transfer of `len` bytes from client to server, stepping at most `tick` of virtual time
/// at once and calling `hook` before each step (to inject link events, kill a path, ...).
/// Returns when everything arrived or `limit` passed: the bytes received and, for each
/// read, when and how many bytes the server had by then.
fn transfer_with(
    pair: &mut Pair,
    len: usize,
    limit: Duration,
    tick: Duration,
    mut hook: impl FnMut(&mut Pair),
) -> (Vec<u8>, Vec<(Instant, usize)>) {
    let stream = pair.client().open_stream(Dir::Uni).unwrap();
    let payload = expected_payload(len);
    let (mut written, mut finished) = (0, false);
    let mut received = Vec::with_capacity(len);
    let mut progress = Vec::new();
    let mut server_stream = None;
    let deadline = pair.now + limit;
    while pair.now < deadline {
        hook(pair);
        if written < len {
            written += pair
                .client()
                .write(stream, &payload[written..])
                .unwrap_or(0);
        } else if !finished {
            pair.client().finish(stream).unwrap();
            finished = true;
        }
        if server_stream.is_none() {
            server_stream = pair.server().accept_stream(Dir::Uni);
        }
        if let Some(sid) = server_stream {
            loop {
                match pair.server().read(sid, usize::MAX) {
                    Ok(Some(chunk)) => {
                        received.extend_from_slice(&chunk);
                        progress.push((pair.now, received.len()));
                    }
                    Ok(None) => return (received, progress),
                    Err(_) => break,
                }
            }
        }
        let limit = pair.now + tick;
        if !pair.step_until(Some(limit)) {
            break;
        }
    }
    (received, progress)
}

/// Path events of the client, with the time they were seen.
fn drain_path_events(pair: &mut Pair, into: &mut Vec<(Instant, PathEvent)>) {
    let now = pair.now;
    while let Some(e) = pair.client().poll_event() {
        if let Event::Path(e) = e {
            into.push((now, e));
        }
    }
}

/// A path manager that records what it hears.
#[derive(Debug, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl crate::pm::PathManager for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn on_link_event(
        &mut self,
        _: Instant,
        event: &LinkEvent,
        local: Option<IpAddr>,
        paths: &[PathSnapshot],
        _: &mut Vec<crate::pm::PathAction>,
    ) {
        let rsrp: Vec<_> = paths.iter().map(|p| p.link.rsrp_dbm).collect();
        self.0
            .lock()
            .unwrap()
            .push(format!("link {} {local:?} {rsrp:?}", event.event.name()));
    }
    fn on_path_event(
        &mut self,
        _: Instant,
        event: &PathEvent,
        _: &[PathSnapshot],
        _: &mut Vec<crate::pm::PathAction>,
    ) {
        self.0.lock().unwrap().push(format!("path {event:?}"));
    }
    fn on_tick(&mut self, _: Instant, paths: &[PathSnapshot], _: &mut Vec<crate::pm::PathAction>) {
        self.0.lock().unwrap().push(format!("tick {}", paths.len()));
    }
}

struct RecorderFactory(Arc<Mutex<Vec<String>>>);

impl PathManagerFactory for RecorderFactory {
    fn build(&self) -> Box<dyn crate::pm::PathManager> {
        Box::new(Recorder(self.0.clone()))
    }
}

#[test]
fn link_events_reach_snapshots_scheduler_and_path_manager() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let (mut pair, _) = pair_with(
        Arc::new(RoundRobinFactory),
        Arc::new(RecorderFactory(heard.clone())),
    );
    assert_eq!(pair.client().path_manager_name(), "recorder");
    let now = pair.now;
    let measurement = LinkEventKind::Measurement {
        serving: Some(CellId(7)),
        cells: vec![CellMeasurement {
            cell: CellId(7),
            rat: polypath_link::RadioType::NrFr1,
            rsrp_dbm: -84.5,
            rsrq_db: -11.0,
            sinr_db: 17.0,
        }],
    };
    pair.client()
        .handle_link_event(now, &event(0, measurement), ip(client_addr()));
    let prediction = LinkEventKind::PredictedThroughput {
        bps: 48e6,
        predictor: "oracle".into(),
        horizon_ms: 100,
    };
    pair.client()
        .handle_link_event(now, &event(1, prediction), ip(client_addr2()));
    let p0 = snapshot_of(pair.client(), PathId::ZERO).unwrap();
    assert_eq!(p0.link.rsrp_dbm, Some(-84.5));
    assert_eq!(p0.link.serving_cell, Some(CellId(7)));
    assert_eq!(p0.link.updated_at, Some(now));
    assert_eq!(
        p0.predicted_throughput, None,
        "the prediction was for iface 1"
    );
    // A path opened later from the second interface starts with its hints.
    let id = pair
        .client()
        .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
        .unwrap();
    let p1 = snapshot_of(pair.client(), id).unwrap();
    assert_eq!(p1.predicted_throughput, Some(48_000_000));
    assert_eq!(p1.link.rsrp_dbm, None);
    // The path manager heard the events with their addresses, after the hints were applied,
    // and was ticked once the handshake was confirmed.
    let heard = heard.lock().unwrap().clone();
    assert!(heard.iter().any(|h| h.starts_with("tick")), "{heard:?}");
    assert!(
        heard.contains(&"link measurement Some(10.0.0.1) [Some(-84.5)]".to_string()),
        "{heard:?}"
    );
    assert!(
        heard
            .iter()
            .any(|h| h.starts_with("link predicted_throughput Some(10.0.1.1)")),
        "{heard:?}"
    );
    assert!(heard.contains(&format!("path Opened({id:?})")), "{heard:?}");
}

#[test]
fn full_mesh_opens_every_interface_and_reopens_after_link_up() {
    let mesh = FullMeshFactory {
        locals: vec![client_addr(), client_addr2()],
        ..FullMeshFactory::default()
    };
    let (mut pair, qlog) = pair_with(Arc::new(RoundRobinFactory), Arc::new(mesh));
    // The application opened nothing: the path manager did.
    let opened = pair.run_until(Duration::from_secs(1), |p| {
        p.client()
            .paths()
            .iter()
            .any(|i| i.snapshot.local == client_addr2() && i.snapshot.state == PathState::Validated)
    });
    assert!(opened, "full mesh opened a path from the second address");
    let first = pair
        .client()
        .paths()
        .iter()
        .find(|i| i.snapshot.local == client_addr2())
        .unwrap()
        .snapshot
        .id;
    assert_eq!(
        pair.transfer(300_000, Duration::from_secs(10)).len(),
        300_000
    );
    assert!(bytes_on(pair.client(), first) > 50_000);

    // Interface 1 goes down: its path is abandoned; traffic continues on path 0.
    let now = pair.now;
    let down = LinkEventKind::LinkDown {
        cell: Some(CellId(2)),
        reason: DownReason::NoCoverage,
    };
    pair.client()
        .handle_link_event(now, &event(1, down), ip(client_addr2()));
    assert_eq!(
        snapshot_of(pair.client(), first).map(|s| s.state),
        Some(PathState::Abandoned)
    );
    assert!(pair.transfer(200_000, Duration::from_secs(10)) == expected_payload(200_000));
    pair.run_until(Duration::from_millis(500), |_| false);
    assert!(
        pair.client()
            .paths()
            .iter()
            .all(|i| i.snapshot.local != client_addr2()),
        "no path on the downed interface"
    );

    // It comes back: a new path (a new path ID) is opened from it.
    let now = pair.now;
    let up = LinkEventKind::LinkUp { cell: CellId(3) };
    pair.client()
        .handle_link_event(now, &event(1, up), ip(client_addr2()));
    let reopened = pair
        .client()
        .paths()
        .iter()
        .find(|i| i.snapshot.local == client_addr2() && i.snapshot.state != PathState::Abandoned)
        .map(|i| i.snapshot.id)
        .expect("re-opened at once");
    assert_ne!(reopened, first);
    assert!(wait_validated(&mut pair, reopened));
    assert_eq!(
        pair.transfer(300_000, Duration::from_secs(10)).len(),
        300_000
    );
    // Round robin gives the young path a packet per turn while its window has room.
    assert!(bytes_on(pair.client(), reopened) > 10_000);
    assert!(!pair.client().is_closed());

    // qlog tells who did it and why.
    let records = qlog_records(&qlog);
    let by_pm = |name: &str, trigger: &str| {
        records.iter().any(|r| {
            r["name"] == name
                && r["data"]["path_manager"] == "fullmesh"
                && r["data"]["trigger"] == trigger
        })
    };
    assert!(by_pm("quic:path_assigned", "full_mesh"));
    assert!(by_pm("quic:path_abandoned", "link_down"));
    assert!(
        records.iter().any(
            |r| r["name"] == "polypath:link_event" && r["data"]["event"]["link_up"].is_object()
        )
    );
}

#[test]
fn make_before_break_handover_adds_and_validates_before_removing() {
    let (mut pair, qlog) = pair_with(
        Arc::new(crate::sched::MinRttFactory),
        Arc::new(MakeBeforeBreakFactory::default()),
    );
    assert_eq!(pair.client().path_manager_name(), "lamp5g");
    let start = pair.now;
    // The A4 comes once 1 MB has arrived, the A2 2 ms later.
    let mut a4_at: Option<Instant> = None;
    let mut a2_at: Option<Instant> = None;
    let mut events = Vec::new();
    // Windows seen in the first snapshots after path 1 was validated.
    let mut split_seen: Option<(u64, u64)> = None;
    let mut source_open_at_validation = None;
    let (got, progress) = transfer_with(
        &mut pair,
        6_000_000,
        Duration::from_secs(30),
        Duration::from_millis(2),
        |p| {
            let now = p.now;
            if a4_at.is_none() && p.server().stats().stream_bytes_read >= 1_000_000 {
                // The target cell, reached through interface 1, is better than the A4
                // threshold: a path is added through it.
                p.client().handle_link_event(
                    now,
                    &event(1, rrc(MeasEvent::A4)),
                    ip(client_addr2()),
                );
                a4_at = Some(now);
            }
            if a2_at.is_none() && a4_at.is_some_and(|t| now >= t + Duration::from_millis(2)) {
                // The source cell falls below the A2 threshold before the new path is
                // validated: the removal must wait.
                p.client()
                    .handle_link_event(now, &event(0, rrc(MeasEvent::A2)), ip(client_addr()));
                a2_at = Some(now);
            }
            let before = events.len();
            drain_path_events(p, &mut events);
            for (_, e) in &events[before..] {
                if let PathEvent::Validated(id) = e
                    && *id != PathId::ZERO
                {
                    let source = snapshot_of(p.client(), PathId::ZERO).unwrap();
                    let new = snapshot_of(p.client(), *id).unwrap();
                    split_seen = Some((source.cwnd, new.cwnd));
                    source_open_at_validation = Some(source.state);
                }
            }
        },
    );
    assert!(got == expected_payload(6_000_000), "transfer intact");
    drain_path_events(&mut pair, &mut events);
    let (a4_at, a2_at) = (a4_at.expect("A4 sent"), a2_at.expect("A2 sent"));

    let when = |wanted: &dyn Fn(&PathEvent) -> bool| {
        events
            .iter()
            .position(|(_, e)| wanted(e))
            .map(|i| (i, events[i].0))
    };
    let opened = when(&|e| matches!(e, PathEvent::Opened(id) if *id != PathId::ZERO))
        .expect("a path was added on A4");
    let new_id = match events[opened.0].1 {
        PathEvent::Opened(id) => id,
        _ => unreachable!(),
    };
    let validated = when(&|e| *e == PathEvent::Validated(new_id)).expect("validated");
    let abandoned = when(&|e| *e == PathEvent::Abandoned(PathId::ZERO)).expect("source removed");
    assert!(
        opened.0 < validated.0 && validated.0 < abandoned.0,
        "{events:?}"
    );
    assert!(opened.1 >= a4_at && abandoned.1 >= validated.1);
    assert!(
        validated.1 > a2_at,
        "the A2 arrived before validation, so the removal had to wait"
    );
    assert_eq!(source_open_at_validation, Some(PathState::Abandoned));
    println!(
        "make-before-break: A4 at +{:?}, path {} opened at +{:?}, validated at +{:?}, path 0 abandoned at +{:?}",
        a4_at - start,
        new_id.0,
        opened.1 - start,
        validated.1 - start,
        abandoned.1 - start
    );

    // The window split is visible in the snapshots: the source's window at addition was
    // divided evenly.
    let (source_cwnd, new_cwnd) = split_seen.expect("snapshots after validation");
    println!("window split at validation: source {source_cwnd} B, new path {new_cwnd} B");
    assert!(
        source_cwnd.abs_diff(new_cwnd) <= 1,
        "{source_cwnd} vs {new_cwnd}"
    );
    assert!(
        new_cwnd > 2 * 14_720,
        "more than the initial window: {new_cwnd}"
    );

    // ... and in qlog, with the path manager and its reasons.
    let records = qlog_records(&qlog);
    let with = |name: &str, pred: &dyn Fn(&serde_json::Value) -> bool| {
        records
            .iter()
            .filter(|r| r["name"] == name && pred(&r["data"]))
            .cloned()
            .collect::<Vec<_>>()
    };
    let assigned = with("quic:path_assigned", &|d| {
        d["path_manager"] == "lamp5g" && d["trigger"] == "rrc_a4"
    });
    assert_eq!(assigned.len(), 1);
    assert_eq!(assigned[0]["data"]["local"], client_addr2().to_string());
    let splits = with("quic:recovery_metrics_updated", &|d| {
        d["trigger"]
            .as_str()
            .is_some_and(|t| t.starts_with("lamp5g_window_split"))
    });
    let split: Vec<(u64, u64)> = splits
        .iter()
        .map(|r| {
            (
                r["data"]["path_id"].as_u64().unwrap(),
                r["data"]["congestion_window"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        split,
        vec![(u64::from(new_id.0), new_cwnd), (0, source_cwnd)],
        "qlog shows the split"
    );
    let removed = with("quic:path_abandoned", &|d| {
        d["path_id"] == 0 && d["trigger"] == "rrc_a2" && d["path_manager"] == "lamp5g"
    });
    assert_eq!(removed.len(), 1);
    // Make before break: no interruption of the transfer around the handover. The source's
    // in-flight data drains (it is acknowledged through the new path) instead of being sent
    // again, so the new path's window carries new data at once.
    let longest_gap = |after: bool| {
        progress
            .windows(2)
            // Leave out the transfer's first round trip.
            .filter(|w| w[0].1 >= 100_000 && (w[1].0 >= a4_at) == after)
            .map(|w| w[1].0 - w[0].0)
            .max()
            .unwrap_or_default()
    };
    println!(
        "longest gap in delivery: {:?} before the A4, {:?} after it",
        longest_gap(false),
        longest_gap(true)
    );
    assert!(
        longest_gap(true) < pair.delay,
        "an interruption of {:?}",
        longest_gap(true)
    );
    // The connection lives on the new path alone.
    pair.run_until(Duration::from_secs(2), |_| false);
    let ids: Vec<_> = pair
        .client()
        .paths()
        .iter()
        .map(|p| p.snapshot.id)
        .collect();
    assert_eq!(ids, vec![new_id]);
    assert_eq!(
        pair.transfer(200_000, Duration::from_secs(5)).len(),
        200_000
    );
}

/// What [`blackhole_run`] measured, as offsets from the start of the blackhole.
#[derive(Debug)]
struct Blackhole {
    /// When the blackholed path was abandoned, if it was.
    abandoned: Option<Duration>,
    /// Its smoothed RTT then.
    dead_srtt: Duration,
    /// The surviving path's smoothed RTT then (or at the end).
    survivor_srtt: Duration,
    /// When the longest delivery stall after the blackhole ended.
    stall_end: Duration,
    /// How long it was.
    stall: Duration,
}

/// Runs a round-robin transfer over two paths and blackholes the second one after 1 MB.
fn blackhole_run(path_manager: Arc<dyn PathManagerFactory>) -> Blackhole {
    let (mut pair, _) = pair_with(Arc::new(RoundRobinFactory), path_manager);
    let now = pair.now;
    let id = pair
        .client()
        .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
        .unwrap();
    assert!(wait_validated(&mut pair, id));
    // Both paths measured before the transfer.
    assert_eq!(
        pair.transfer(200_000, Duration::from_secs(5)).len(),
        200_000
    );
    let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = dead.clone();
    pair.drop = Some(Box::new(move |_, src, dst| {
        flag.load(std::sync::atomic::Ordering::Relaxed)
            && (src == client_addr2() || dst == client_addr2())
    }));
    // The blackhole starts once 1 MB has arrived.
    let mut kill_at: Option<Instant> = None;
    let mut abandoned_at = None;
    let mut srtt0 = Duration::ZERO;
    let mut dead_srtt = Duration::ZERO;
    let mut events = Vec::new();
    let (got, progress) = transfer_with(
        &mut pair,
        8_000_000,
        Duration::from_secs(30),
        Duration::from_millis(1),
        |p| {
            if kill_at.is_none() && p.server().stats().stream_bytes_read >= 1_000_000 {
                dead.store(true, std::sync::atomic::Ordering::Relaxed);
                kill_at = Some(p.now);
            }
            drain_path_events(p, &mut events);
            if abandoned_at.is_none() && events.iter().any(|(_, e)| *e == PathEvent::Abandoned(id))
            {
                abandoned_at = Some(p.now);
                srtt0 = snapshot_of(p.client(), PathId::ZERO).unwrap().srtt;
                let dead_path = snapshot_of(p.client(), id).unwrap();
                dead_srtt = dead_path.srtt;
                assert_eq!(
                    dead_path.pto_count, 0,
                    "the failover acted before the first probe timeout"
                );
            }
        },
    );
    assert!(got == expected_payload(8_000_000), "transfer intact");
    let kill_at = kill_at.expect("the path was blackholed mid-transfer");
    let (stall_end, stall) = progress
        .windows(2)
        .filter(|w| w[1].0 > kill_at)
        .map(|w| (w[1].0, w[1].0 - w[0].0))
        .max_by_key(|(_, gap)| *gap)
        .unwrap();
    if srtt0.is_zero() {
        srtt0 = snapshot_of(pair.client(), PathId::ZERO).unwrap().srtt;
    }
    Blackhole {
        abandoned: abandoned_at.map(|t| t - kill_at),
        dead_srtt,
        survivor_srtt: srtt0,
        stall_end: stall_end - kill_at,
        stall,
    }
}

#[test]
fn fast_failover_moves_traffic_within_three_srtt_of_the_survivor() {
    let params = FastFailoverParams {
        k: 2.0,
        floor: Duration::from_millis(30),
        ..FastFailoverParams::default()
    };
    let run = blackhole_run(Arc::new(FastFailoverFactory { params }));
    let abandoned = run
        .abandoned
        .expect("the failover abandoned the blackholed path");
    let allowed = (2 * run.dead_srtt).max(params.floor);
    let srtt0 = run.survivor_srtt;
    println!(
        "failover: blackhole at 0, path abandoned at +{abandoned:?} (allowed wait \
         max(2 x {:?}, 30 ms) = {allowed:?}), delivery stalled {:?} until +{:?}; traffic \
         moved {:?} after detection; srtt of the surviving path {srtt0:?} (3 x srtt = {:?})",
        run.dead_srtt,
        run.stall,
        run.stall_end,
        run.stall_end.saturating_sub(abandoned),
        3 * srtt0
    );
    // The dead path waited since about the blackhole: its last acknowledgment arrived at
    // most one one-way delay (10 ms) after it, its oldest lost packet left at most one
    // before it. Ticks are exact; the test loop steps by 1 ms.
    let slack = Duration::from_millis(10 + 1);
    assert!(
        abandoned + slack >= allowed && abandoned <= allowed + slack,
        "abandoned {abandoned:?} after the blackhole, expected {allowed:?} +- {slack:?}"
    );
    assert!(
        run.stall_end <= abandoned + 3 * srtt0,
        "delivery resumed {:?} after detection, more than 3 x {srtt0:?}",
        run.stall_end - abandoned
    );
}

#[test]
fn without_failover_the_blackholed_path_is_kept() {
    let run = blackhole_run(Arc::new(ManualFactory));
    println!(
        "no path manager: delivery stalled {:?} until +{:?} after the blackhole (srtt of path \
         0 {:?}); path abandoned: {:?}",
        run.stall, run.stall_end, run.survivor_srtt, run.abandoned
    );
    assert_eq!(run.abandoned, None);
}

#[test]
fn an_interface_that_flaps_gets_a_new_path_each_time_beyond_the_initial_path_ids() {
    let mesh = FullMeshFactory {
        locals: vec![client_addr(), client_addr2()],
        ..FullMeshFactory::default()
    };
    let (client_tls, server_tls) = tls_configs();
    let limited = |pm: Arc<dyn PathManagerFactory>| TransportConfig {
        // Path IDs 0 to 2 only, at first.
        initial_max_path_id: Some(2),
        path_manager: pm,
        ..TransportConfig::default()
    };
    let mut client = ClientConfig::new(client_tls);
    client.transport = Arc::new(limited(Arc::new(mesh)));
    let mut server = ServerConfig::new(server_tls);
    server.transport = Arc::new(limited(Arc::new(ManualFactory)));
    let mut pair = Pair::with_configs(client, server, EndpointConfig::from_seed(1));
    pair.handshake();
    let mut ids = Vec::new();
    for round in 0..6 {
        let on_second = |p: &mut Pair| {
            p.client()
                .paths()
                .iter()
                .find(|i| {
                    i.snapshot.local == client_addr2() && i.snapshot.state == PathState::Validated
                })
                .map(|i| i.snapshot.id)
        };
        assert!(
            pair.run_until(Duration::from_secs(3), |p| on_second(p).is_some()),
            "round {round}: a path on the second interface"
        );
        let id = on_second(&mut pair).unwrap();
        ids.push(id.0);
        assert_eq!(pair.transfer(50_000, Duration::from_secs(5)).len(), 50_000);
        let now = pair.now;
        let down = LinkEventKind::LinkDown {
            cell: None,
            reason: DownReason::NoCoverage,
        };
        pair.client()
            .handle_link_event(now, &event(1, down), ip(client_addr2()));
        pair.run_until(Duration::from_millis(30), |_| false);
        let now = pair.now;
        pair.client().handle_link_event(
            now,
            &event(1, LinkEventKind::LinkUp { cell: CellId(1) }),
            ip(client_addr2()),
        );
    }
    println!("path IDs of the second interface: {ids:?}");
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 6]);
    assert!(!pair.client().is_closed() && !pair.server().is_closed());
}

/// Each frame of a sent packet is logged under its own type in `packet_sent` (PATH_ACK,
/// PATH_CHALLENGE and PATH_RESPONSE were once logged as "ack, ping"), and the packet that
/// carries CONNECTION_CLOSE is logged too.
#[test]
fn qlog_logs_each_sent_frame_under_its_own_type() {
    let (mut pair, qlog) = pair_with(Arc::new(RoundRobinFactory), Arc::new(ManualFactory));
    let now = pair.now;
    let id = pair
        .client()
        .open_path(now, client_addr2(), server_addr(), PathStatus::Available)
        .expect("path opens");
    assert!(wait_validated(&mut pair, id));
    pair.run_until(Duration::from_millis(200), |_| false);
    let now = pair.now;
    assert!(pair.client().set_path_status(now, id, PathStatus::Backup));
    pair.run_until(Duration::from_millis(200), |_| false);
    let now = pair.now;
    assert!(
        pair.client()
            .abandon_path(now, id, TransportErrorCode::APPLICATION_ABANDON_PATH)
    );
    pair.run_until(Duration::from_millis(200), |_| false);
    let now = pair.now;
    pair.client().close(now, VarInt::from_u32(7), b"bye");
    pair.run_until(Duration::from_millis(100), |_| false);
    drop(pair);
    let records = qlog_records(&qlog);
    let frames: Vec<serde_json::Value> = records
        .iter()
        .filter(|r| r["name"] == "quic:packet_sent")
        .flat_map(|r| r["data"]["frames"].as_array().cloned().unwrap_or_default())
        .collect();
    let types: std::collections::BTreeSet<&str> = frames
        .iter()
        .filter_map(|f| f["frame_type"].as_str())
        .collect();
    for ty in [
        "crypto",
        "padding",
        "path_ack",
        "path_challenge",
        "path_response",
        "path_new_connection_id",
        "path_status_backup",
        "path_abandon",
        "connection_close",
    ] {
        assert!(
            types.contains(ty),
            "{ty} missing from the sent frames {types:?}"
        );
    }
    assert!(!types.contains("unknown"), "{types:?}");
    let close = frames
        .iter()
        .find(|f| f["frame_type"] == "connection_close")
        .expect("checked above");
    assert_eq!(
        (
            &close["error_space"],
            &close["error_code"],
            &close["reason"]
        ),
        (
            &serde_json::json!("application"),
            &serde_json::json!(7),
            &serde_json::json!("bye")
        )
    );
}
