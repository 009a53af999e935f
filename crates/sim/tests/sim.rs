//! Simulator behaviour and validation tests (raw-UDP agents; QUIC ones in quic.rs).

mod common;

use std::time::Duration;

use common::*;
use polypath_sim::scenario::Scenario;
use polypath_sim::scenario::trace::{Missing, load_csv_column, load_lumos5g, load_mahimahi};
use polypath_sim::{
    Hooks, LinkChange, LinkDirSel, LinkUpdate, RunOptions, ScheduledSource, SimError, SimTime,
    run_scenario,
};

const CBR: &str = r#"
[[flow]]
name = "f"
kind = "cbr"
from = "a"
to = "b"
"#;

fn link_bytes(r: &polypath_sim::RunReport, link: &str, dir: &str) -> u64 {
    r.summary
        .links
        .iter()
        .find(|l| l.link == link && l.dir == dir)
        .map(|l| l.bytes)
        .unwrap()
}

fn busy_scenario() -> Scenario {
    let src = pair(
        r#"rate = "20Mbit/s"
delay = "5ms"
jitter = "3ms"
jitter_dist = "normal"
loss = { model = "gilbert-elliott", mean = 0.02, burst = 3 }
duplicate = 0.01
queue = "20ms""#,
        r#"
[[flow]]
name = "video"
kind = "onoff"
from = "a"
to = "b"
rate = "15Mbit/s"
on = "300ms"
off = "200ms"
dist = "exponential"

[[flow]]
name = "rpc"
kind = "reqresp"
from = "b"
to = "a"
request_size = "300B"
response_size = "20KB"
interval = "50ms"
"#,
        "duration = \"3s\"",
    );
    scenario(&src.replace(
        "[output]\nbin = \"100ms\"",
        "[output]\nbin = \"100ms\"\npacket_log = true",
    ))
}

#[test]
fn same_seed_same_bytes_other_seed_differs() {
    let s = busy_scenario();
    let d1 = tmp("det1");
    let d2 = tmp("det2");
    let r1 = run_with_out(&s, 1, Some(d1.clone()));
    let r2 = run_with_out(&s, 1, Some(d2.clone()));
    let r3 = run(&s, 2);
    assert_eq!(r1.output_hash, r2.output_hash);
    assert_ne!(r1.output_hash, r3.output_hash);
    for (name, _) in &r1.files {
        let a = std::fs::read(d1.join(name)).unwrap();
        let b = std::fs::read(d2.join(name)).unwrap();
        assert!(a == b, "{name} differs between runs with the same seed");
    }
    // Without an output directory the hash is the same.
    assert_eq!(run(&s, 1).output_hash, r1.output_hash);
    assert!(r1.summary.flows.iter().all(|f| f.packets_delivered > 0));
    let _ = std::fs::remove_dir_all(d1);
    let _ = std::fs::remove_dir_all(d2);
}

#[test]
fn lumos5g_replay_mean_within_2_percent() {
    let trace_path = repo().join("traces/lumos5g/5G/5g_trace_59_driving");
    let trace = load_lumos5g(&trace_path, 1).unwrap();
    let secs = trace.rates_bps.len();
    // Jumbo packets keep the event count low; the served rate does not
    // depend on the packet size.
    let src = pair(
        r#"rate = { trace = "../traces/lumos5g/5G/5g_trace_59_driving", format = "lumos5g", loop = false }
delay = "10ms"
queue = "50ms""#,
        &format!("{CBR}rate = \"1.5Gbit/s\"\npacket_size = 60000\n"),
        &format!("duration = \"{secs}s\""),
    );
    let r = run(&scenario(&src), 1);
    let measured = link_bytes(&r, "l", "up") as f64 * 8.0 / secs as f64;
    let mean = trace.mean_bps();
    let err = (measured - mean).abs() / mean;
    println!(
        "lumos5g replay: {:.3} Mbit/s vs trace mean {:.3} Mbit/s: {:.3} % off",
        measured / 1e6,
        mean / 1e6,
        err * 100.0
    );
    assert!(
        err < 0.02,
        "measured {measured} vs trace mean {mean} ({:.3} %)",
        err * 100.0
    );
}

#[test]
fn mahimahi_replay_mean_within_2_percent() {
    let trace = load_mahimahi(&repo().join("traces/mahimahi/ATT-LTE-driving-2016.down")).unwrap();
    let src = pair(
        r#"rate = { trace = "../traces/mahimahi/ATT-LTE-driving-2016.down", format = "mahimahi" }
queue = "2MB""#,
        // The trace has millisecond bursts far above its mean; the sender and
        // the queue must keep the link busy through them.
        &format!("{CBR}rate = \"60Mbit/s\"\n"),
        &format!("duration = \"{}ms\"", trace.period_ms),
    );
    let r = run(&scenario(&src), 1);
    let measured = link_bytes(&r, "l", "up") as f64 * 8.0 / (trace.period_ms as f64 / 1e3);
    let err = (measured - trace.mean_bps()).abs() / trace.mean_bps();
    assert!(err < 0.02, "measured {measured} vs {}", trace.mean_bps());
}

#[test]
fn csv_column_replay_mean_within_2_percent() {
    let path = repo().join("traces/raca5g/Download_Driving__B_2020.01.16_12.10.03.csv");
    let trace = load_csv_column(
        &path,
        "DL_bitrate",
        1e3,
        Duration::from_secs(1),
        Missing::Hold,
    )
    .unwrap();
    let secs = trace.rates_bps.len();
    let src = pair(
        r#"rate = { trace = "../traces/raca5g/Download_Driving__B_2020.01.16_12.10.03.csv", format = "csv", column = "DL_bitrate", unit = "kbit/s", loop = false }
queue = "5MB""#,
        &format!("{CBR}rate = \"500Mbit/s\"\npacket_size = 60000\n"),
        &format!("duration = \"{secs}s\""),
    );
    let r = run(&scenario(&src), 1);
    let measured = link_bytes(&r, "l", "up") as f64 * 8.0 / secs as f64;
    let err = (measured - trace.mean_bps()).abs() / trace.mean_bps();
    assert!(err < 0.02, "measured {measured} vs {}", trace.mean_bps());
}

#[test]
fn saturated_constant_link_delivers_its_rate_and_respects_the_queue() {
    let src = pair(
        "rate = \"100Mbit/s\"\ndelay = \"10ms\"\nqueue = \"30KB\"",
        &format!("{CBR}rate = \"150Mbit/s\"\n"),
        "duration = \"5s\"",
    );
    let r = run(&scenario(&src), 1);
    let l = &r.summary.links[0];
    let mbps = l.bytes as f64 * 8.0 / 5.0 / 1e6;
    assert!((mbps - 100.0).abs() < 0.5, "{mbps}");
    assert!(l.drops_queue > 0);
    assert!(l.max_queue_bytes <= 30_000);
    // One-way delay: 10 ms + up to 20 packets of queue (2.4 ms) + serialization.
    let owd = r.summary.flows[0].owd_ms.clone().unwrap();
    assert!(owd.min >= 10.0 && owd.max < 12.7, "{owd:?}");
}

#[test]
fn gilbert_elliott_link_matches_mean_loss_and_burst_within_10_percent() {
    // 1 Mbit/s of 125-byte packets: one packet per ms, 200 000 packets.
    let src = pair(
        "rate = \"10Mbit/s\"\nloss = { model = \"gilbert-elliott\", mean = 0.02, burst = 4 }",
        &format!("{CBR}rate = \"1Mbit/s\"\npacket_size = 125\n"),
        "duration = \"200s\"",
    );
    let src = src.replace(
        "bin = \"100ms\"",
        "bin = \"10s\"\npacket_log = true\npath_series = false",
    );
    let dir = tmp("ge");
    let r = run_with_out(&scenario(&src), 3, Some(dir.clone()));
    let f = &r.summary.flows[0];
    let loss = f.drops_loss as f64 / f.packets_sent as f64;
    println!(
        "gilbert-elliott: mean loss {:.4} vs 0.02 ({:.2} % off)",
        loss,
        (loss - 0.02).abs() / 0.02 * 100.0
    );
    assert!((loss - 0.02).abs() / 0.02 < 0.10, "mean loss {loss}");
    // Bursts: gaps in the send times of delivered packets (1 ms apart).
    let rows = packets(&dir);
    let (mut lost, mut bursts) = (0u64, 0u64);
    for w in rows.windows(2) {
        let gap = ((w[1].1 - w[0].1) * 1000.0).round() as u64;
        if gap > 1 {
            bursts += 1;
            lost += gap - 1;
        }
    }
    let burst = lost as f64 / bursts as f64;
    println!(
        "gilbert-elliott: mean burst {burst:.3} vs 4 ({:.2} % off)",
        (burst - 4.0).abs() / 4.0 * 100.0
    );
    assert!((burst - 4.0).abs() / 4.0 < 0.10, "mean burst {burst}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn jitter_keeps_order_unless_reordering_is_asked_for() {
    for reorder in [false, true] {
        let src = pair(
            &format!(
                "rate = \"100Mbit/s\"\ndelay = \"5ms\"\njitter = \"4ms\"\nreorder = {reorder}"
            ),
            &format!("{CBR}rate = \"10Mbit/s\"\n"),
            "duration = \"1s\"",
        )
        .replace("bin = \"100ms\"", "bin = \"100ms\"\npacket_log = true");
        let dir = tmp(&format!("reorder{reorder}"));
        run_with_out(&scenario(&src), 1, Some(dir.clone()));
        let rows = packets(&dir);
        let inversions = rows.windows(2).filter(|w| w[1].1 < w[0].1).count();
        if reorder {
            assert!(inversions > 0);
        } else {
            assert_eq!(inversions, 0);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn outages_drop_or_hold() {
    for (policy, expect_drops) in [("drop", true), ("hold", false)] {
        let src = pair(
            &format!(
                "rate = \"10Mbit/s\"\ndelay = \"1ms\"\nqueue = \"unlimited\"\noutages = [{{ at = \"1s\", duration = \"1s\" }}]\noutage_policy = \"{policy}\""
            ),
            &format!("{CBR}rate = \"1Mbit/s\"\nstop = \"3s\"\n"),
            "duration = \"5s\"",
        );
        let r = run(&scenario(&src), 1);
        let f = &r.summary.flows[0];
        let owd = f.owd_ms.clone().unwrap();
        if expect_drops {
            // About one second of 1 Mbit/s in 1500-byte packets.
            assert!((80..=86).contains(&f.drops_down), "{}", f.drops_down);
            assert!(owd.max < 5.0);
        } else {
            assert_eq!(f.drops_down, 0);
            assert_eq!(f.packets_delivered, f.packets_sent);
            assert!(owd.max > 990.0, "{owd:?}");
        }
        assert_eq!(r.summary.stopped_by, "done");
    }
}

#[test]
fn steps_and_schedules_change_the_rate() {
    let src = pair(
        r#"rate = { schedule = [{ at = "0s", rate = "10Mbit/s" }, { at = "1s", rate = "30Mbit/s" }], period = "2s" }
steps = [{ at = "4s", rate = "5Mbit/s" }]"#,
        &format!("{CBR}rate = \"50Mbit/s\"\npacket_size = 1000\n"),
        "duration = \"6s\"",
    );
    let r = run(&scenario(&src), 1);
    // 10 + 30 + 10 + 30 for four seconds, then 5 + 5.
    let expect = (10.0 + 30.0 + 10.0 + 30.0 + 5.0 + 5.0) * 1e6 / 8.0;
    let got = link_bytes(&r, "l", "up") as f64;
    assert!((got - expect).abs() / expect < 0.005, "{got} vs {expect}");
}

#[test]
fn duplication_and_bernoulli_loss_rates() {
    let src = pair(
        "rate = \"100Mbit/s\"\nloss = 0.05\nduplicate = 0.1",
        &format!("{CBR}rate = \"10Mbit/s\"\npacket_size = 200\n"),
        "duration = \"10s\"",
    );
    let r = run(&scenario(&src), 5);
    let f = &r.summary.flows[0];
    let l = &r.summary.links[0];
    let sent = f.packets_sent as f64;
    assert!((f.drops_loss as f64 / sent - 0.05).abs() < 0.005);
    assert!((l.duplicates as f64 / l.packets as f64 - 0.1).abs() < 0.01);
    assert_eq!(f.packets_delivered, l.packets + l.duplicates);
}

#[test]
fn hosts_share_a_bottleneck() {
    let src = r#"
[sim]
duration = "5s"
[[host]]
name = "dev"
count = 2
interfaces = [{ name = "e", addr = "10.0.0.1", link = "bh", side = "a" }]
[[host]]
name = "core"
interfaces = [{ name = "e", addr = "10.9.0.1", link = "bh", side = "b" }]
[[link]]
name = "bh"
rate = "100Mbit/s"
delay = "5ms"
queue = "10ms"
[[flow]]
name = "up"
kind = "cbr"
from = "dev"
to = "core"
rate = "80Mbit/s"
start_spread = "1ms"
"#;
    let dir = tmp("share");
    let r = run_with_out(&scenario(src), 1, Some(dir.clone()));
    let f = &r.summary.flows[0];
    let total = f.bytes_delivered as f64 * 8.0 / 5.0 / 1e6;
    assert!((total - 100.0).abs() < 1.0, "{total}");
    assert_eq!(f.instances, 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn routers_forward_by_destination_and_source() {
    let s = Scenario::load(&repo().join("scenarios/two-hop-router.toml")).unwrap();
    let r = run(&s, 1);
    let bh1 = link_bytes(&r, "bh1", "up") as f64 * 8.0 / 10.0 / 1e6;
    let bh2 = link_bytes(&r, "bh2", "up") as f64 * 8.0 / 10.0 / 1e6;
    assert!(
        (bh1 - 40.0).abs() < 1.0 && (bh2 - 40.0).abs() < 1.0,
        "{bh1} {bh2}"
    );
    assert_eq!(r.summary.flows[0].drops_unrouted, 0);
}

fn radio_scenario() -> Scenario {
    scenario(&pair(
        "rate = { source = \"radio\", initial = \"10Mbit/s\" }\nqueue = \"unlimited\"",
        &format!("{CBR}rate = \"100Mbit/s\"\npacket_size = 1000\n"),
        "duration = \"4s\"\nstop_when_done = false",
    ))
}

#[test]
fn external_sources_drive_rate_and_availability() {
    let s = radio_scenario();
    let upd = |ms: u64, change| LinkUpdate {
        at: SimTime(ms * 1_000_000),
        link: "l".into(),
        dir: LinkDirSel::Up,
        change,
    };
    let source = ScheduledSource::new(
        "radio",
        vec![
            upd(2000, LinkChange::Down),
            upd(1000, LinkChange::Rate(50e6)),
            upd(3000, LinkChange::Up),
        ],
    );
    let hooks = Hooks {
        agents: None,
        sources: vec![Box::new(source)],
    };
    let r = run_scenario(&s, &RunOptions::default(), hooks).unwrap();
    let got = link_bytes(&r, "l", "up") as f64 * 8.0 / 1e6;
    // 10 Mbit in the first second, 50 in the second, nothing while down
    // (arrivals dropped), 50 in the last second.
    assert!((got - 110.0).abs() < 0.5, "{got}");
    assert!(r.summary.flows[0].drops_down > 0);
}

#[test]
fn a_missing_source_or_an_unknown_link_is_an_error() {
    let s = radio_scenario();
    let e = run_scenario(&s, &RunOptions::default(), Hooks::default()).unwrap_err();
    assert!(e.to_string().contains("no such source"), "{e}");
    let bad = ScheduledSource::new(
        "radio",
        vec![LinkUpdate {
            at: SimTime(5),
            link: "nope".into(),
            dir: LinkDirSel::Both,
            change: LinkChange::Up,
        }],
    );
    let hooks = Hooks {
        agents: None,
        sources: vec![Box::new(bad)],
    };
    let e = run_scenario(&s, &RunOptions::default(), hooks).unwrap_err();
    assert!(matches!(e, SimError::Build(_)), "{e}");
}

#[test]
fn request_response_records_completions() {
    let src = pair(
        "rate = \"50Mbit/s\"\ndelay = \"10ms\"",
        r#"
[[flow]]
name = "rpc"
kind = "reqresp"
from = "a"
to = "b"
request_size = "2KB"
response_size = "30KB"
interval = "100ms"
count = 10
"#,
        "duration = \"5s\"",
    );
    let dir = tmp("rr");
    let r = run_with_out(&scenario(&src), 1, Some(dir.clone()));
    let c = r.summary.flows[0].completions.clone().unwrap();
    assert_eq!(c.count, 10);
    // Two one-way delays plus serialization of 2 KB and 30 KB at 50 Mbit/s.
    assert!(c.min_s > 0.020 && c.max_s < 0.030, "{c:?}");
    assert_eq!(r.summary.stopped_by, "done");
    let rows = std::fs::read_to_string(dir.join("completions.csv")).unwrap();
    assert_eq!(rows.lines().count(), 11);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bundled_scenarios_parse_and_run() {
    let mut n = 0;
    for entry in std::fs::read_dir(repo().join("scenarios")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            let mut s = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
            // Keep the test fast: the first half second of each.
            s.sim.duration = s.sim.duration.min(Duration::from_millis(500));
            let emulator_only = s.flows.iter().position(|f| {
                matches!(
                    f.kind,
                    polypath_sim::scenario::FlowKind::Tcp(_)
                        | polypath_sim::scenario::FlowKind::Command(_)
                )
            });
            if let Some(i) = emulator_only {
                // Only the emulator runs it; the simulator says which flow and why.
                let e = run_scenario(&s, &RunOptions::default(), Hooks::default())
                    .err()
                    .unwrap_or_else(|| panic!("{}: the simulator ran it", p.display()));
                let text = e.to_string();
                assert!(
                    text.contains(&format!("flow[{i}].kind")) && text.contains("emulator"),
                    "{text}"
                );
                continue;
            }
            let r = run(&s, 1);
            assert!(r.summary.events > 0, "{}", p.display());
        }
    }
    assert!(n >= 6);
}

#[test]
fn backhaul_3000_builds_all_agents() {
    let mut s = Scenario::load(&repo().join("scenarios/backhaul-3000.toml")).unwrap();
    s.sim.duration = Duration::from_millis(200);
    let r = run(&s, 1);
    assert_eq!(r.summary.agents, 2 * 3006);
    assert_eq!(r.summary.flows[0].instances, 3000);
    assert_eq!(
        r.summary.flows[0].drops_unbound + r.summary.flows[0].drops_unrouted,
        0
    );
}

#[test]
fn multipath_sender_gets_per_path_series() {
    let src = r#"
[sim]
duration = "2s"
[output]
bin = "500ms"
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
rate = "100Mbit/s"
delay = "5ms"
[[link]]
name = "p2"
rate = "10Mbit/s"
delay = "8ms"
[[flow]]
name = "mp"
kind = "cbr"
from = "c"
to = "s"
rate = "40Mbit/s"
"#;
    let dir = tmp("paths");
    run_with_out(&scenario(src), 1, Some(dir.clone()));
    let text = std::fs::read_to_string(dir.join("paths.csv")).unwrap();
    // Rows at 1.0 s: path 1 carries its 20 Mbit/s half, path 2 only its 10 Mbit/s.
    let at_1s: Vec<Vec<String>> = text
        .lines()
        .filter(|l| l.starts_with("1.000000,"))
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    assert_eq!(at_1s.len(), 2, "{text}");
    let rate = |local: &str| -> f64 {
        let row = at_1s.iter().find(|r| r[5].starts_with(local)).unwrap();
        row[7].parse().unwrap()
    };
    assert!((rate("10.0.1.1") - 20.0).abs() < 0.5);
    assert!((rate("10.0.2.1") - 10.0).abs() < 0.5);
    let drops: u64 = at_1s.iter().map(|r| r[8].parse::<u64>().unwrap()).sum();
    assert!(drops > 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn readme_example_runs() {
    let text = std::fs::read_to_string(repo().join("scenarios/README.md")).unwrap();
    let after = text.split("## A complete example").nth(1).unwrap();
    let block = after
        .split("```toml")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let mut s = scenario(block);
    assert_eq!(s.name, "two-paths");
    s.sim.duration = Duration::from_secs(1);
    let r = run(&s, 1);
    assert!(r.summary.flows[0].packets_delivered > 0);
}

/// Records what it receives, for the driven-from-outside test below.
struct Recorder(std::rc::Rc<std::cell::RefCell<Vec<(u64, usize)>>>);

impl polypath_sim::Agent for Recorder {
    fn handle_datagram(&mut self, now: polypath_sim::SimTime, d: polypath_sim::Datagram) {
        self.0.borrow_mut().push((now.as_nanos(), d.payload.len()));
    }
    fn handle_timeout(&mut self, _: polypath_sim::SimTime) {}
    fn poll_transmit(&mut self, _: polypath_sim::SimTime) -> Option<polypath_sim::Datagram> {
        None
    }
    fn poll_timeout(&mut self) -> Option<polypath_sim::SimTime> {
        None
    }
    fn is_done(&self) -> bool {
        true
    }
    fn stats(&self, _: &mut polypath_sim::AgentStats) {}
}

/// What the emulator relies on: a run driven from outside (`start`, `advance`, `inject`)
/// carries injected whole IP packets, charged at their own length, to the catch-all agent
/// of the destination host when the model says so, and not before.
#[test]
fn a_run_driven_from_outside_delivers_injected_packets_on_time() {
    let sc = Scenario::parse(
        r#"
[sim]
duration = "1s"
[[host]]
name = "a"
interfaces = [{ name = "x", addr = "10.0.0.1", link = "l", side = "a" }]
[[host]]
name = "b"
interfaces = [{ name = "y", addr = "10.0.0.2", link = "l", side = "b" }]
[[link]]
name = "l"
rate = "8Mbit/s"
delay = "5ms"
"#,
        std::path::Path::new("driven.toml"),
    )
    .unwrap();
    let mut sim = polypath_sim::Simulator::new(&sc, 1).unwrap();
    sim.set_stop_when_done(false);
    let other = sim.add_flow("other", "other");
    let got = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let tap_a = sim
        .add_raw_agent(0, other, 0, Box::new(Recorder(got.clone())), true)
        .unwrap();
    sim.add_raw_agent(1, other, 0, Box::new(Recorder(got.clone())), true)
        .unwrap();
    sim.start();
    assert_eq!(sim.advance(2_000_000).unwrap(), None);
    // A 1000-byte IP packet at 2 ms: 1 ms on the wire at 8 Mbit/s, then 5 ms of delay.
    sim.inject(
        tap_a,
        polypath_sim::Datagram {
            src: "10.0.0.1:1".parse().unwrap(),
            dst: "10.0.0.2:2".parse().unwrap(),
            payload: bytes::Bytes::from(vec![0u8; 1000]),
        },
    );
    assert_eq!(sim.next_event_at(), Some(3_000_000));
    sim.advance(7_999_999).unwrap();
    assert!(got.borrow().is_empty());
    sim.advance(8_000_000).unwrap();
    assert_eq!(got.borrow().as_slice(), &[(8_000_000, 1000)]);
    assert_eq!(
        sim.advance(2_000_000_000).unwrap(),
        Some(polypath_sim::StopReason::Duration)
    );
    sim.finish().unwrap();
    let s = sim.summary(polypath_sim::StopReason::Duration);
    assert_eq!(s.links[0].bytes, 1000);
    assert_eq!(s.flows.last().unwrap().bytes_delivered, 1000);
}
