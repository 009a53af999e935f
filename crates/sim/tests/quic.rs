//! The real polypath-quic stack inside the simulator: determinism, link utilisation,
//! multipath over the NR-DC scenario, scenario errors, link hints and qlog.

mod common;

use std::time::Duration;

use common::*;
use polypath_sim::scenario::{FlowKind, Scenario};
use polypath_sim::{Hooks, RunOptions, run_scenario};

/// Two paths with loss, jitter and duplication, a 2 MB multipath download.
const TWO_PATHS: &str = r#"
name = "two-path-quic"
[sim]
duration = "20s"
stop_when_done = true
[output]
bin = "100ms"
[[host]]
name = "c"
interfaces = [
  { name = "p1", addr = "10.0.1.1", link = "p1", side = "a" },
  { name = "p2", addr = "10.0.2.1", link = "p2", side = "a" },
]
[[host]]
name = "s"
interfaces = [
  { name = "p1", addr = "10.9.1.1", link = "p1", side = "b" },
  { name = "p2", addr = "10.9.2.1", link = "p2", side = "b" },
]
[[link]]
name = "p1"
rate = "40Mbit/s"
delay = "10ms"
jitter = "2ms"
loss = { model = "gilbert-elliott", mean = 0.01, burst = 2 }
queue = "1bdp"
[[link]]
name = "p2"
rate = "20Mbit/s"
delay = "15ms"
loss = 0.005
duplicate = 0.01
queue = "1bdp"
[[flow]]
name = "dl"
kind = "quic"
from = "c"
to = "s"
bytes = "2MB"
direction = "download"
scheduler = "lamp5g"
cc = "cubic"
[flow.options]
qlog = true
"#;

#[test]
fn same_seed_same_bytes_other_seed_differs() {
    let s = scenario(TWO_PATHS);
    let d1 = tmp("quic-det1");
    let d2 = tmp("quic-det2");
    let (r1, o1) = run_quic(&s, 1, Some(d1.clone()));
    let (r2, _) = run_quic(&s, 1, Some(d2.clone()));
    let (r3, o3) = run_quic(&s, 2, None);
    assert_complete(&o1[0]);
    assert_complete(&o3[0]);
    assert_eq!(o1[0].client_paths, 2, "both paths opened");
    assert_eq!(r1.summary.stopped_by, "done");
    assert_eq!(r1.output_hash, r2.output_hash);
    assert_ne!(r1.output_hash, r3.output_hash);
    let mut names: Vec<String> = r1.files.iter().map(|(n, _)| n.clone()).collect();
    names.push("qlog/dl-0-client.sqlog".into());
    names.push("qlog/dl-0-server.sqlog".into());
    for name in &names {
        let a = std::fs::read(d1.join(name)).unwrap();
        let b = std::fs::read(d2.join(name)).unwrap();
        assert!(!a.is_empty(), "{name} is empty");
        assert!(a == b, "{name} differs between runs with the same seed");
    }
    // Both paths carried data in the data direction (server to client).
    let sent_on = |link: &str| {
        r1.summary
            .links
            .iter()
            .find(|l| l.link == link && l.dir == "down")
            .map(|l| l.bytes)
            .unwrap()
    };
    assert!(sent_on("p1") > 200_000 && sent_on("p2") > 200_000);
    // The per-path series carries the stack's state.
    let paths = std::fs::read_to_string(d1.join("paths.csv")).unwrap();
    let last = paths.lines().last().unwrap().split(',').collect::<Vec<_>>();
    assert!(!last[9].is_empty() && !last[10].is_empty(), "{paths}");
    let completions = std::fs::read_to_string(d1.join("completions.csv")).unwrap();
    assert_eq!(completions.lines().count(), 2, "{completions}");
    assert_eq!(r1.summary.flows[0].app_bytes_received, 2_000_000);
    let _ = std::fs::remove_dir_all(d1);
    let _ = std::fs::remove_dir_all(d2);
}

#[test]
fn nrdc_two_path_scenario_runs_multipath_quic() {
    let mut s = Scenario::load(&repo().join("scenarios/nrdc-two-path.toml")).unwrap();
    if let FlowKind::Quic(q) = &mut s.flows[0].kind {
        q.bytes = 8_000_000;
    }
    // What `polypath sim run` does: the built-in factories.
    let r = run(&s, 1);
    assert_eq!(r.summary.stopped_by, "done");
    let f = &r.summary.flows[0];
    assert_eq!(f.app_bytes_received, 8_000_000);
    assert_eq!(f.completions.as_ref().map(|c| c.count), Some(1));
    for link in ["mn", "sn"] {
        let down = r
            .summary
            .links
            .iter()
            .find(|l| l.link == link && l.dir == "down")
            .unwrap();
        assert!(
            down.bytes > 1_000_000,
            "{link} carried {} bytes",
            down.bytes
        );
    }
}

#[test]
fn upload_with_several_instances_to_one_server_host() {
    let src = r#"
[sim]
duration = "20s"
stop_when_done = true
[output]
bin = "100ms"
[[host]]
name = "dev"
count = 3
interfaces = [{ name = "e", addr = "10.0.0.10", link = "l", side = "a" }]
[[host]]
name = "core"
interfaces = [{ name = "e", addr = "10.0.1.1", link = "l", side = "b" }]
[[link]]
name = "l"
rate = "30Mbit/s"
delay = "5ms"
queue = "20ms"
[[flow]]
name = "up"
kind = "quic"
from = "dev"
to = "core"
bytes = "300KB"
cc = "bbr"
scheduler = "wrr"
start_spread = "30ms"
[flow.options]
scheduler = { weights = "1" }
"#;
    let (r, o) = run_quic(&scenario(src), 5, None);
    assert_eq!(o.len(), 3);
    for t in &o {
        assert_complete(t);
        assert_eq!(t.client_paths, 1);
    }
    assert_eq!(r.summary.flows[0].app_bytes_received, 900_000);
    assert_eq!(r.summary.flows[0].completions.as_ref().unwrap().count, 3);
}

#[test]
fn unknown_names_and_options_are_errors_naming_file_and_field() {
    let base = Scenario::load(&repo().join("scenarios/nrdc-two-path.toml")).unwrap();
    type Change = fn(&mut polypath_sim::scenario::QuicFlow);
    let cases: [(&str, Change); 5] = [
        ("flow[0].scheduler", |q| q.scheduler = "fastest".into()),
        ("flow[0].cc", |q| q.cc = "vegas".into()),
        ("flow[0].path_manager", |q| {
            q.path_manager = "ndiffports".into()
        }),
        ("flow[0].options.color", |q| {
            q.options.insert("color".into(), toml::Value::from("red"));
        }),
        ("flow[0].options.scheduler.speed", |q| {
            let mut t = toml::Table::new();
            t.insert("speed".into(), toml::Value::from(3));
            q.options.insert("scheduler".into(), toml::Value::Table(t));
        }),
    ];
    for (field, change) in cases {
        let mut s = base.clone();
        if let FlowKind::Quic(q) = &mut s.flows[0].kind {
            change(q);
        }
        let e = run_scenario(&s, &RunOptions::default(), Hooks::default()).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("nrdc-two-path.toml"), "{msg}");
        assert!(msg.contains(field), "{field}: {msg}");
    }
}

/// WRR weights as a plain list give one weight per path: on the two-path flow of
/// `nrdc-two-path.toml`, three weights or one are refused with the field that gave them (at
/// the start and in a change during the run), two are taken, and path_id=weight pairs fit.
#[test]
fn a_weight_list_must_match_the_flows_paths() {
    let base = Scenario::load(&repo().join("scenarios/nrdc-two-path.toml")).unwrap();
    let with = |weights: &str, at_start: bool| {
        let mut s = base.clone();
        if let FlowKind::Quic(q) = &mut s.flows[0].kind {
            q.scheduler = "wrr".into();
            q.bytes = 100_000;
            let mut params = toml::Table::new();
            params.insert("weights".into(), toml::Value::from(weights));
            if at_start {
                q.options
                    .insert("scheduler".into(), toml::Value::Table(params));
            } else {
                params.insert("at".into(), toml::Value::from("1s"));
                q.options.insert(
                    "scheduler_changes".into(),
                    toml::Value::Array(vec![toml::Value::Table(params)]),
                );
            }
        }
        run_scenario(&s, &RunOptions::default(), Hooks::default()).map_err(|e| e.to_string())
    };
    for (weights, given) in [("1,1,1", "3 weights "), ("1", "1 weight ")] {
        let msg = with(weights, true).unwrap_err();
        assert!(msg.contains("flow[0].options.scheduler.weights"), "{msg}");
        assert!(msg.contains(&format!("{given}for 2 paths")), "{msg}");
        let msg = with(weights, false).unwrap_err();
        assert!(
            msg.contains("flow[0].options.scheduler_changes[0].weights"),
            "{msg}"
        );
    }
    for fits in ["2,1", "1=4"] {
        with(fits, true).unwrap_or_else(|e| panic!("{fits}: {e}"));
    }
}

#[test]
fn stop_time_ends_an_unfinished_transfer() {
    let src = pair(
        "rate = \"10Mbit/s\"\ndelay = \"10ms\"",
        "[[flow]]\nname = \"f\"\nkind = \"quic\"\nfrom = \"a\"\nto = \"b\"\nbytes = \"50MB\"\nstop = \"1s\"\n",
        "duration = \"5s\"\nstop_when_done = true",
    );
    let (r, o) = run_quic(&scenario(&src), 1, None);
    assert_eq!(r.summary.stopped_by, "done");
    assert!(r.summary.sim_time_s < 2.0);
    assert!(o[0].completed.is_none());
    assert!(o[0].client_error.as_deref().unwrap().contains("stop"));
    assert!(o[0].received > 100_000 && o[0].received < 2_000_000);
    assert_eq!(o[0].corrupt, 0);
}

/// A `rate` holds the sending application to it: 1 MB at 8 Mbit/s takes about a second
/// over a 100 Mbit/s link that carries it unlimited in a tenth of that, in both directions,
/// and the data arrives intact.
#[test]
fn rate_limits_the_sending_application() {
    let mut took = Vec::new();
    for (direction, rate) in [
        ("upload", ""),
        ("upload", "rate = \"8Mbit/s\"\n"),
        ("download", "rate = \"8Mbit/s\"\n"),
    ] {
        let src = pair(
            "rate = \"100Mbit/s\"\ndelay = \"5ms\"",
            &format!(
                "[[flow]]\nname = \"f\"\nkind = \"quic\"\nfrom = \"a\"\nto = \"b\"\nbytes = \"1MB\"\ndirection = \"{direction}\"\n{rate}"
            ),
            "duration = \"5s\"\nstop_when_done = true",
        );
        let (_, o) = run_quic(&scenario(&src), 1, None);
        assert_eq!(
            (o[0].corrupt, o[0].received),
            (0, 1_000_000),
            "{direction} {rate}"
        );
        let done = o[0].completed.expect("completed").as_secs_f64();
        println!("{direction} {}: {done:.3} s", rate.trim());
        took.push(done);
    }
    assert!(took[0] < 0.3, "unlimited: {took:?}");
    for t in &took[1..] {
        // 1 s of pieces plus the handshake and the last piece's trip.
        assert!((1.0..1.2).contains(t), "8 Mbit/s: {took:?}");
    }
}

#[test]
fn multipath_download_over_the_radio_model() {
    // The bundled two-gNB scenario with its raw-UDP flows replaced by a QUIC download to
    // the NR-DC UE over both cell groups; the client gets the UE's link events.
    let text = std::fs::read_to_string(repo().join("scenarios/handover-two-gnb.toml")).unwrap();
    let flows_at = text.find("# A steady 10 Mbit/s").unwrap();
    let radio_at = text.find("\n[radio.").unwrap();
    let src = format!(
        "{}\n[[flow]]\nname = \"dl\"\nkind = \"quic\"\nfrom = \"ue-dc\"\nto = \"server\"\npaths = [\"mcg\", \"scg\"]\nbytes = \"3MB\"\ndirection = \"download\"\nscheduler = \"lamp5g\"\n{}",
        &text[..flows_at],
        &text[radio_at..]
    );
    let mut s = scenario(&src);
    s.sim.duration = Duration::from_secs(10);
    s.sim.stop_when_done = true;
    let (r, o) = run_quic(&s, 1, None);
    assert_complete(&o[0]);
    assert_eq!(o[0].client_paths, 2);
    assert!(
        r.summary
            .radio
            .as_ref()
            .is_some_and(|radio| radio.link_events > 0)
    );
}

/// The noq peer stack runs the same transfer over the same two lossy paths
/// (`stack = "noq"`, built with the `noq` feature), and polypath's own run of the scenario
/// delivers the same bytes, so the two can be compared under identical conditions.
#[cfg(feature = "noq")]
#[test]
fn noq_peer_stack_completes_the_same_transfer() {
    let src = TWO_PATHS
        .replace(
            "scheduler = \"lamp5g\"",
            "scheduler = \"default\"\nstack = \"noq\"",
        )
        .replace("[flow.options]\nqlog = true\n", "");
    let s = scenario(&src);
    let (r1, o1) = run_quic(&s, 7, None);
    let (r2, _) = run_quic(&s, 7, None);
    assert_complete(&o1[0]);
    assert_eq!(r1.summary.flows[0].app_bytes_received, 2_000_000);
    assert_eq!(
        r1.output_hash, r2.output_hash,
        "noq runs are deterministic too"
    );
    let (_, polypath) = run_quic(&scenario(TWO_PATHS), 7, None);
    assert_complete(&polypath[0]);
    println!(
        "2 MB over two lossy paths: noq {:?}, polypath {:?}",
        o1[0].completed, polypath[0].completed
    );
}

/// `scheduler_changes` reconfigures the scheduler of a running transfer: true WRR over two
/// equal 40 Mbit/s paths sends 1:1 until 3 s, then 1:3 (weights "1,3"), so the first
/// path's share of the delivered bytes drops from about 1/2 to about 1/4.
#[test]
fn scheduler_changes_apply_at_their_time() {
    let src = TWO_PATHS
        .replace("rate = \"20Mbit/s\"", "rate = \"40Mbit/s\"")
        .replace("delay = \"15ms\"", "delay = \"10ms\"")
        .replace("bytes = \"2MB\"", "bytes = \"1GB\"")
        .replace("duration = \"20s\"", "duration = \"6s\"")
        .replace("scheduler = \"lamp5g\"", "scheduler = \"wrr\"")
        .replace(
            "[flow.options]\nqlog = true\n",
            "[flow.options]\nscheduler = { weights = \"1,1\", cwnd_limited = false }\nscheduler_changes = [{ at = \"3s\", weights = \"1,3\" }]\n",
        );
    let dir = tmp("sched-changes");
    let (_, o) = run_quic(&scenario(&src), 1, Some(dir.clone()));
    assert_eq!(o[0].client_error, None, "{o:?}");
    let links = std::fs::read_to_string(dir.join("links.csv")).unwrap();
    // Mean delivered Mbit/s on link `l` (data flows down: server to client) in (from, to].
    let mean = |l: &str, from: f64, to: f64| {
        let v: Vec<f64> = links
            .lines()
            .skip(1)
            .filter_map(|row| {
                let c: Vec<&str> = row.split(',').collect();
                let t: f64 = c[0].parse().ok()?;
                (c[1] == l && c[2] == "down" && t > from && t <= to).then(|| c[4].parse().ok())?
            })
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let share = |from, to| mean("p1", from, to) / (mean("p1", from, to) + mean("p2", from, to));
    let (before, after) = (share(1.0, 3.0), share(4.0, 6.0));
    println!("first path's share: {before:.3} before the change, {after:.3} after");
    assert!((before - 0.5).abs() < 0.08, "before {before}");
    assert!((after - 0.25).abs() < 0.08, "after {after}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Transactions over the two lossy paths: 200 requests of 100 bytes, one every 20 ms,
/// each answered with 3000 bytes (three packets). All complete with every byte checked;
/// each transaction takes at least the lowest round-trip time of the paths (20 ms) and
/// the last completes after the last request was issued (at 3.98 s after the first). With
/// noq as the stack (feature `noq`) the same application runs over noq.
#[test]
fn transactions_with_an_interval_and_a_count_complete() {
    let mut stacks = vec!["polypath"];
    if cfg!(feature = "noq") {
        stacks.push("noq");
    }
    for stack in stacks {
        let src = TWO_PATHS
            .replace(
                "bytes = \"2MB\"\ndirection = \"download\"",
                &format!(
                    "request_size = 100\nresponse_size = 3000\ninterval = \"20ms\"\ncount = 200\nstack = \"{stack}\""
                ),
            )
            .replace("scheduler = \"lamp5g\"", "scheduler = \"default\"")
            .replace("[flow.options]\nqlog = true\n", "");
        let dir = tmp(&format!("txn-{stack}"));
        let (r, o) = run_quic(&scenario(&src), 3, Some(dir.clone()));
        assert_eq!(o[0].client_error, None, "{stack}: {:?}", o[0]);
        assert_eq!(o[0].server_error, None, "{stack}: {:?}", o[0]);
        assert_eq!(o[0].corrupt, 0);
        assert_eq!(o[0].received, 200 * 3000);
        // Both ends' application bytes: the responses and the requests.
        assert_eq!(r.summary.flows[0].app_bytes_received, 200 * (3000 + 100));
        let text = std::fs::read_to_string(dir.join("completions.csv")).unwrap();
        let rows: Vec<(f64, f64)> = text
            .lines()
            .filter(|l| l.contains(",transaction,"))
            .map(|l| {
                let c: Vec<&str> = l.split(',').collect();
                (c[4].parse().unwrap(), c[6].parse().unwrap())
            })
            .collect();
        assert_eq!(rows.len(), 200, "{stack}");
        let first = rows[0].0;
        for (i, (start, duration)) in rows.iter().enumerate() {
            assert!(
                (start - first - 0.02 * i as f64).abs() < 1e-6,
                "{stack}: request {i} issued at {start}"
            );
            assert!(
                *duration >= 0.020,
                "{stack}: transaction {i} took {duration}"
            );
        }
        let mean = rows.iter().map(|r| r.1).sum::<f64>() / 200.0;
        println!("{stack}: 200 transactions, mean {:.2} ms", mean * 1e3);
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Milliseconds from `back_s` to the start of the first 10 ms bin after it in which link
/// `link` delivered at least one full-sized packet (1.2 Mbit/s over 10 ms) in its `down`
/// direction: the link carries data again, not only a probe (`links.csv`).
fn recovery_ms(links_csv: &str, link: &str, back_s: f64) -> f64 {
    links_csv
        .lines()
        .skip(1)
        .find_map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            let t: f64 = c[0].parse().ok()?;
            let mbps: f64 = c[4].parse().ok()?;
            (c[1] == link && c[2] == "down" && t > back_s + 1e-9 && mbps >= 1.2)
                .then_some((t - 0.01 - back_s) * 1000.0)
        })
        .unwrap_or(f64::INFINITY)
}

/// A two-path download where link `a` (the faster one, 10 ms one way) is down from 1 s to
/// 6 s, dropping everything. With `outage_signal = "a"` only the client (the device at the
/// link's `a` end) learns when the link goes and comes back; the server, which sends, learns
/// it from the client's PING arriving after the silence. The path carries data again within
/// `3 × RTT + one 10 ms bin` = 70 ms of the link's return: the client's PING reaches the
/// server after one one-way delay, the server's own probe and its acknowledgment take one
/// RTT (20 ms), the first data one more one-way delay; the rest is margin for the outage's
/// packets being declared lost and the window reopening. Without the signal the path waits
/// for the server's next probe timeout, backed off through the outage, which must come
/// clearly later (here more than three times later). The qlogs show the link events
/// reaching the client, and only the client, at the outage's start and end.
#[test]
fn outage_signal_brings_the_path_back_within_a_few_rtts() {
    let run_with = |signal: &str, name: &str| {
        let links = vec![
            (
                "a",
                format!(
                    "rate = \"20Mbit/s\"\ndelay = \"10ms\"\nqueue = \"1bdp\"\n\
                     outages = [{{ at = \"1s\", duration = \"5s\" }}]\noutage_signal = {signal}"
                ),
            ),
            (
                "b",
                "rate = \"20Mbit/s\"\ndelay = \"15ms\"\nqueue = \"1bdp\"".to_string(),
            ),
        ];
        let flow = "[[flow]]\nname = \"dl\"\nkind = \"quic\"\nfrom = \"c\"\nto = \"s\"\n\
                    bytes = \"100MB\"\ndirection = \"download\"\nscheduler = \"minrtt\"\n\
                    cc = \"cubic\"\n[flow.options]\nqlog = true\n";
        let src = hosts_on_links(&links, flow, "10s").replace("bin = \"100ms\"", "bin = \"10ms\"");
        let dir = tmp(name);
        let (_, o) = run_quic(&scenario(&src), 1, Some(dir.clone()));
        assert_eq!(o[0].client_error, None, "{:?}", o[0]);
        assert_eq!(o[0].server_error, None, "{:?}", o[0]);
        let links_csv = std::fs::read_to_string(dir.join("links.csv")).unwrap();
        (recovery_ms(&links_csv, "a", 6.0), dir)
    };
    let (with, dir_with) = run_with("\"a\"", "outage-signal-on");
    let (without, dir_without) = run_with("false", "outage-signal-off");
    println!(
        "link a back at 6 s: data again after {with:.0} ms with the signal, {without:.0} ms without"
    );
    assert!(with <= 70.0, "{with} ms with the signal");
    assert!(
        without > 3.0 * with.max(10.0),
        "{without} ms without the signal is not clearly longer than {with} ms"
    );
    // The client got link down at 1 s and link up at 6 s for its address on `a`; the
    // server, at the other end, nothing.
    for (side, local) in [("client", "10.0.1.1"), ("server", "10.9.1.1")] {
        let text =
            std::fs::read_to_string(dir_with.join(format!("qlog/dl-0-{side}.sqlog"))).unwrap();
        let events: Vec<(String, f64)> = text
            .split('\u{1e}')
            .filter_map(|r| serde_json::from_str::<serde_json::Value>(r.trim()).ok())
            .filter(|r| r["name"] == "polypath:link_event")
            .map(|r| {
                assert_eq!(r["data"]["local"], local, "{r}");
                let kind = r["data"]["event"]
                    .as_object()
                    .and_then(|o| o.keys().next().cloned())
                    .unwrap_or_default();
                (kind, r["time"].as_f64().unwrap_or(f64::NAN))
            })
            .collect();
        let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
        if side == "server" {
            assert!(kinds.is_empty(), "the server was not told: {events:?}");
            continue;
        }
        assert_eq!(kinds, ["link_down", "link_up"], "{side}: {events:?}");
        let times: Vec<f64> = events.iter().map(|(_, t)| t).copied().collect();
        println!("{side} link events at {times:?} ms (its qlog clock)");
        assert!(
            (times[1] - times[0] - 5000.0).abs() < 1e-6,
            "{side}: {times:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir_with);
    let _ = std::fs::remove_dir_all(dir_without);
}

/// The simulator's packet protection (`[sim] packet_protection = "simulated"`, the default)
/// skips the cryptography but changes no output: the same `output_hash` as the AEAD for
/// several schedulers and congestion controllers, both directions, with random and bursty
/// loss, jitter and duplication. The variants differ from each other, so the comparison
/// has something to compare.
#[test]
fn simulated_packet_protection_gives_the_outputs_of_the_aead() {
    use polypath_sim::scenario::PacketProtection;
    let two_paths = |scheduler: &str, cc: &str, direction: &str| {
        let mut s = scenario(TWO_PATHS);
        if let FlowKind::Quic(q) = &mut s.flows[0].kind {
            q.scheduler = scheduler.into();
            q.cc = cc.into();
            q.options.remove("qlog");
            q.direction = match direction {
                "upload" => polypath_sim::scenario::TransferDirection::Upload,
                _ => polypath_sim::scenario::TransferDirection::Download,
            };
        }
        s
    };
    let mut nrdc = Scenario::load(&repo().join("scenarios/nrdc-two-path.toml")).unwrap();
    if let FlowKind::Quic(q) = &mut nrdc.flows[0].kind {
        q.bytes = 3_000_000;
        q.cc = "bbr".into();
    }
    let variants = [
        ("lamp5g, CUBIC", two_paths("lamp5g", "cubic", "download")),
        ("minRTT, BBR", two_paths("minrtt", "bbr", "download")),
        (
            "round robin, OLIA, upload",
            two_paths("rr", "olia", "upload"),
        ),
        (
            "redundant, NewReno",
            two_paths("redundant", "newreno", "download"),
        ),
        ("NR-DC, LAMP5G, BBR", nrdc),
    ];
    let mut hashes = Vec::new();
    for (name, mut s) in variants {
        let mut outputs = Vec::new();
        for protection in [PacketProtection::Aead, PacketProtection::Simulated] {
            s.sim.packet_protection = protection;
            let (r, o) = run_quic(&s, 3, None);
            assert_complete(&o[0]);
            outputs.push(r.output_hash);
        }
        assert_eq!(outputs[0], outputs[1], "{name}: AEAD and simulated differ");
        hashes.push(outputs.swap_remove(0));
    }
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), 5, "every variant is a different run");
}
