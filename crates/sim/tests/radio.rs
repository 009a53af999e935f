//! The simulator driven by the 5G radio model: scenarios with `[radio]` run end to end,
//! radio links serve at the model's rates and apply its interruptions, context releases
//! and target buffers, link events reach the JSON-lines stream and the agents.

mod common;

use std::cell::RefCell;
use std::net::IpAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use polypath_link::{LinkEvent, LinkEventKind, MeasEvent};
use polypath_sim::ran::{LinkAction, RadioModel, RadioOutput};
use polypath_sim::scenario::{FlowKind, Scenario};
use polypath_sim::{
    Agent, AgentFactory, AgentStats, BuildContext, Datagram, Hooks, RunOptions, RunReport,
    SimError, SimTime, UdpTrafficFactory, radio_config, run_scenario,
};

fn load(name: &str) -> Scenario {
    Scenario::load(&repo().join("scenarios").join(name)).unwrap_or_else(|e| panic!("{e}"))
}

fn run_opts(s: &Scenario, seed: u64, out: Option<&Path>, events: Option<&Path>) -> RunReport {
    let opts = RunOptions {
        seed: Some(seed),
        out_dir: out.map(Path::to_path_buf),
        progress: false,
        events: events.map(Path::to_path_buf),
    };
    run_scenario(s, &opts, Hooks::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn read_events(path: &Path) -> Vec<LinkEvent> {
    let text = std::fs::read_to_string(path).unwrap();
    polypath_link::jsonl::from_str(&text).unwrap_or_else(|e| panic!("{e}"))
}

/// Sets the rate of the CBR flow `name`.
fn set_cbr_rate(s: &mut Scenario, name: &str, rate: f64) {
    let f = s.flows.iter_mut().find(|f| f.name == name).unwrap();
    match &mut f.kind {
        FlowKind::Cbr(c) => c.rate = rate,
        _ => panic!("{name} is not cbr"),
    }
}

/// The radio model of `s` on its own, with the run seed.
fn model_of(s: &Scenario, seed: u64) -> RadioModel {
    let cfg = radio_config(s).unwrap().unwrap();
    RadioModel::new(&cfg, seed).unwrap()
}

#[test]
fn handover_two_gnb_writes_a_time_ordered_event_stream() {
    let s = load("handover-two-gnb.toml");
    let dir = tmp("radio-events");
    let file = dir.join("events.jsonl");
    let r = run_opts(&s, 1, None, Some(&file));
    let evs = read_events(&file);
    assert!(!evs.is_empty());
    assert!(evs.windows(2).all(|w| w[0].t_ns <= w[1].t_ns), "time order");
    assert!(evs.iter().all(|e| e.t_ns <= 32_000_000_000));
    let radio = r.summary.radio.as_ref().unwrap();
    assert_eq!(radio.link_events, evs.len() as u64);
    let at = |f: &dyn Fn(&LinkEventKind) -> bool| {
        evs.iter()
            .find(|e| e.ue == 0 && e.iface == 0 && f(&e.event))
            .map(|e| e.t_ns as f64 / 1e9)
    };
    let a3 = at(&|k| {
        matches!(
            k,
            LinkEventKind::MeasurementReport {
                event: MeasEvent::A3,
                ..
            }
        )
    })
    .expect("A3 report");
    let cmd = at(&|k| matches!(k, LinkEventKind::HandoverCommand { .. })).expect("command");
    let exec = at(&|k| matches!(k, LinkEventKind::HandoverExecution { .. })).expect("exec");
    let ra = evs
        .iter()
        .find(|e| {
            e.ue == 0 && e.t_ns > 0 && matches!(e.event, LinkEventKind::RandomAccessComplete { .. })
        })
        .map(|e| e.t_ns as f64 / 1e9)
        .expect("random access");
    // The LAMP5G geometry (crates/ran/tests/lamp5g_geometry.rs): A3 at 27.5 s, then the
    // command, the execution and random access within a few hundred ms.
    assert!((27.0..28.0).contains(&a3), "{a3}");
    assert!(
        a3 < cmd && cmd < exec && exec < ra && ra < a3 + 0.5,
        "{a3} {cmd} {exec} {ra}"
    );
    assert!(
        evs.iter()
            .any(|e| matches!(e.event, LinkEventKind::PredictedThroughput { .. }))
    );
    // The stream equals what the model produces on its own with the same seed.
    let mut m = model_of(&s, 1);
    let own: Vec<LinkEvent> = m
        .advance(32_000_000_000)
        .into_iter()
        .filter_map(|o| match o {
            RadioOutput::Event(e) => Some(e),
            RadioOutput::Link(_) => None,
        })
        .collect();
    let strip = |v: &[LinkEvent]| -> Vec<LinkEvent> {
        v.iter()
            .filter(|e| !matches!(e.event, LinkEventKind::PredictedThroughput { .. }))
            .cloned()
            .collect()
    };
    // Predictions differ: in the simulator they see what the links delivered.
    assert_eq!(strip(&evs), strip(&own));
    assert_eq!(radio.handovers, 2, "UE 0 and UE 1's MCG");
    let _ = std::fs::remove_dir_all(dir);
}

/// One static UE near one cell: constant rates in both directions.
fn static_ue(dl_rate: f64, ul_rate: f64, duration: &str) -> String {
    format!(
        r#"
[sim]
duration = "{duration}"
stop_when_done = false

[output]
bin = "100ms"

[[host]]
name = "ue"
interfaces = [{{ name = "nr0", addr = "10.0.0.2", link = "nr", side = "a" }}]

[[host]]
name = "server"
interfaces = [{{ name = "eth0", addr = "10.0.0.1", link = "nr", side = "b" }}]

[[link]]
name = "nr"
radio = {{ ue = 0, iface = 0 }}
delay = "5ms"

[[flow]]
name = "down"
kind = "cbr"
from = "server"
to = "ue"
rate = "{dl_rate}bit/s"

[[flow]]
name = "up"
kind = "cbr"
from = "ue"
to = "server"
rate = "{ul_rate}bit/s"

[radio.channel]
los = "los"
shadowing = false

[[radio.cells]]
id = 1
type = "nr_fr1"
position = [0.0, 0.0]
bandwidth_mhz = 20

[[radio.ues]]
id = 0
mobility = {{ type = "static", position = [80.0, 0.0] }}

[[radio.ues.interfaces]]
name = "nr0"
kind = "cellular"
"#
    )
}

/// Delivered bytes of a link direction from `links.csv` in bins ending after `from_s`.
fn delivered_after(dir: &Path, link: &str, d: &str, from_s: f64) -> f64 {
    let text = std::fs::read_to_string(dir.join("links.csv")).unwrap();
    let mut prev = 0.0;
    let mut bytes = 0.0;
    for l in text.lines().skip(1) {
        let c: Vec<&str> = l.split(',').collect();
        if c[1] != link || c[2] != d {
            continue;
        }
        let t: f64 = c[0].parse().unwrap();
        let mbps: f64 = c[4].parse().unwrap();
        if prev >= from_s {
            bytes += mbps * 1e6 / 8.0 * (t - prev);
        }
        prev = t;
    }
    bytes
}

#[test]
fn radio_link_delivers_the_model_rate_both_ways() {
    // The model's rates for this geometry.
    let probe = scenario(&static_ue(1e6, 1e6, "1s"));
    let mut m = model_of(&probe, 1);
    let (dl, ul) = m
        .advance(0)
        .into_iter()
        .find_map(|o| match o {
            RadioOutput::Link(c) => match c.action {
                LinkAction::Up { dl_bps, ul_bps, .. } => Some((dl_bps as f64, ul_bps as f64)),
                _ => None,
            },
            _ => None,
        })
        .unwrap();
    assert!(dl > 50e6 && ul > 5e6, "{dl} {ul}");
    // Saturate both directions by 20 %.
    let s = scenario(&static_ue(dl * 1.2, ul * 1.2, "2s"));
    let dir = tmp("radio-rate");
    let r = run_opts(&s, 1, Some(&dir), None);
    let got_dl = delivered_after(&dir, "nr", "down", 0.5) * 8.0 / 1.5;
    let got_ul = delivered_after(&dir, "nr", "up", 0.5) * 8.0 / 1.5;
    assert!(
        (got_dl / dl - 1.0).abs() < 0.01,
        "downlink {got_dl} vs {dl}"
    );
    assert!((got_ul / ul - 1.0).abs() < 0.01, "uplink {got_ul} vs {ul}");
    // The downlink queue is the cell's buffer (1 MB for FR1): overflow beyond it.
    let down = r
        .summary
        .links
        .iter()
        .find(|l| l.link == "nr" && l.dir == "down")
        .unwrap();
    assert!(down.drops_queue > 0);
    assert!(
        down.max_queue_bytes <= 1_000_000,
        "{}",
        down.max_queue_bytes
    );
    assert!(down.max_queue_bytes > 990_000, "{}", down.max_queue_bytes);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rb_allocations_account_for_the_served_bytes() {
    let src = static_ue(30e6, 1e6, "1s").replace("[output]\n", "[output]\nrb_events = true\n");
    let s = scenario(&src);
    assert!(s.output.rb_events);
    let dir = tmp("radio-rb");
    let file = dir.join("events.jsonl");
    let r = run_opts(&s, 3, None, Some(&file));
    let evs = read_events(&file);
    let mut granted = 0u64;
    let mut slots = Vec::new();
    for e in &evs {
        if let LinkEventKind::RbAllocation {
            slot,
            rbs,
            total_rbs,
            bytes,
            ..
        } = e.event
        {
            assert!(rbs <= total_rbs);
            assert_eq!(rbs == 0, bytes == 0);
            granted += u64::from(bytes);
            slots.push((slot, e.t_ns));
        }
    }
    assert!(slots.len() > 100, "{}", slots.len());
    // One event per slot, at its end (30 kHz: 0.5 ms slots), in order.
    assert!(slots.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(slots.iter().all(|(k, t)| (k + 1) * 500_000 == *t));
    let served = r
        .summary
        .links
        .iter()
        .find(|l| l.link == "nr" && l.dir == "down")
        .unwrap()
        .bytes;
    // Granted bytes are served bytes, up to a partly served packet at the end.
    assert!(
        granted >= served && granted < served + 1500,
        "{granted} {served}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn nothing_is_delivered_during_the_interruption() {
    let mut s = load("handover-two-gnb.toml");
    s.sim.duration = Duration::from_millis(28_500);
    s.output.packet_log = true;
    let dir = tmp("radio-gap");
    let file = dir.join("events.jsonl");
    run_opts(&s, 1, Some(&dir), Some(&file));
    let evs = read_events(&file);
    let t = |f: &dyn Fn(&LinkEventKind) -> bool| {
        evs.iter()
            .find(|e| e.ue == 0 && e.t_ns > 0 && f(&e.event))
            .map(|e| e.t_ns as f64 / 1e9)
            .unwrap()
    };
    let exec = t(&|k| matches!(k, LinkEventKind::HandoverExecution { .. }));
    let ra = t(&|k| matches!(k, LinkEventKind::RandomAccessComplete { .. }));
    let delay = 0.010;
    let rx: Vec<f64> = packets(&dir)
        .into_iter()
        .filter(|p| p.2 == "steady" || p.2 == "loaded")
        .map(|p| p.0)
        .collect();
    assert!(rx.iter().any(|&t| t < exec + delay), "traffic before");
    assert!(
        !rx.iter().any(|&t| t > exec + delay && t <= ra + delay),
        "nothing arrives between {} and {}",
        exec + delay,
        ra + delay
    );
    // The packets held in the target cell's buffer follow at once.
    assert!(rx.iter().any(|&t| t > ra + delay && t < ra + delay + 0.002));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_loaded_sender_loses_what_exceeds_the_target_buffer() {
    // The target cell (2) has a 200 kB buffer; the sender keeps the source cell's 1 MB
    // buffer full, so the forwarded backlog alone fills the target's buffer and the target
    // drops every new arrival of the interruption.
    let text = std::fs::read_to_string(repo().join("scenarios/handover-two-gnb.toml")).unwrap();
    let marker = "id = 2\ntype = \"nr_fr1\"\n";
    assert!(text.contains(marker));
    let text = text.replace(marker, &format!("{marker}buffer_bytes = 200000\n"));
    let mut s = Scenario::parse(&text, &repo().join("scenarios/handover-two-gnb.toml")).unwrap();
    s.sim.duration = Duration::from_millis(28_500);
    let r = run_opts(&s, 1, None, None);
    let radio = r.summary.radio.as_ref().unwrap();
    let recs: Vec<_> = radio
        .interruptions
        .iter()
        .filter(|x| x.link.is_some() && x.target == Some(2))
        .collect();
    assert_eq!(recs.len(), 2);
    const LIMIT: u64 = 200_000;
    const P: u64 = 1500;
    let mut total = 0;
    for x in &recs {
        // Drop-tail in bytes (crates/ran/src/action.rs): what the context release left is
        // forwarded whole, then arrivals that do not fit are dropped.
        let kept = x.queued_packets - x.delivered_now - x.context_release_lost;
        let room = LIMIT.saturating_sub(kept * P) / P;
        let expected = x.arrivals - x.arrivals.min(room);
        assert_eq!(x.target_buffer_drops, expected, "{x:?}");
        assert_eq!(x.target_buffer_drop_bytes, expected * P);
        total += expected;
    }
    let ue0 = recs.iter().find(|x| x.ue == 0).unwrap();
    assert!(ue0.queued_bytes > 900_000, "loaded: {ue0:?}");
    // Its forwarded backlog (about 1 MB) fills the 200 kB buffer: every arrival is lost,
    // and none of the backlog.
    assert!(ue0.arrivals > 100, "{ue0:?}");
    assert_eq!(ue0.target_buffer_drops, ue0.arrivals, "{ue0:?}");
    assert_eq!(radio.target_buffer_drops, total);
    let link_drops: u64 = r.summary.links.iter().map(|l| l.drops_target_buffer).sum();
    let flow_drops: u64 = r.summary.flows.iter().map(|f| f.drops_target_buffer).sum();
    assert_eq!(link_drops, total);
    assert_eq!(flow_drops, total);
}

#[test]
fn same_seed_same_output_with_radio() {
    let mut s = load("handover-two-gnb.toml");
    s.output.rb_events = true;
    s.sim.duration = Duration::from_secs(2);
    let dir = tmp("radio-det");
    let (e1, e2, e3) = (
        dir.join("1.jsonl"),
        dir.join("2.jsonl"),
        dir.join("3.jsonl"),
    );
    let r1 = run_opts(&s, 5, None, Some(&e1));
    let r2 = run_opts(&s, 5, None, Some(&e2));
    let r3 = run_opts(&s, 6, None, Some(&e3));
    assert_eq!(r1.output_hash, r2.output_hash);
    assert_ne!(r1.output_hash, r3.output_hash);
    assert_eq!(std::fs::read(&e1).unwrap(), std::fs::read(&e2).unwrap());
    assert!(r1.files.iter().any(|(n, _)| n == "events.jsonl"));
    assert!(
        read_events(&e1)
            .iter()
            .any(|e| matches!(e.event, LinkEventKind::RbAllocation { .. }))
    );
    // The whole handover run, without RB events.
    let s = load("handover-two-gnb.toml");
    assert_eq!(
        run_opts(&s, 1, None, None).output_hash,
        run_opts(&s, 1, None, None).output_hash
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn driving_summary_reports_m2ho_handover_interval() {
    let mut s = load("driving-m2ho.toml");
    s.sim.duration = Duration::from_secs(200);
    set_cbr_rate(&mut s, "down", 2e6);
    let r = run_opts(&s, 3, None, None);
    let radio = r.summary.radio.as_ref().unwrap();
    let mean = radio.mean_handover_interval_s.unwrap();
    println!(
        "driving: {} handovers in 200 s, mean interval {mean:.1} s (M2HO 9.2 s)",
        radio.handovers
    );
    assert!(radio.handovers >= 12, "{}", radio.handovers);
    assert!((4.6..=18.4).contains(&mean), "{mean}");
    // Exactly the model's handovers.
    let mut m = model_of(&s, 3);
    let n = m
        .advance(200_000_000_000)
        .iter()
        .filter(|o| {
            matches!(o, RadioOutput::Event(e) if matches!(e.event, LinkEventKind::HandoverExecution { .. }))
        })
        .count();
    assert_eq!(radio.handovers, n as u64);
    assert!(radio.loaded_handovers > 0);
    let json = serde_json::to_value(&r.summary).unwrap();
    assert!(json["radio"]["mean_handover_interval_s"].is_number());
    assert!(json["radio"]["target_buffer_drops"].is_number());
    assert!(json["radio"]["context_release_lost"].is_number());
}

/// Link events an agent got: (time, event, local address).
type Seen = Rc<RefCell<Vec<(SimTime, LinkEvent, Option<IpAddr>)>>>;

/// Records the link events a host's agent gets.
struct Recorder {
    seen: Seen,
}

impl Agent for Recorder {
    fn handle_datagram(&mut self, _now: SimTime, _datagram: Datagram) {}
    fn handle_timeout(&mut self, _now: SimTime) {}
    fn poll_transmit(&mut self, _now: SimTime) -> Option<Datagram> {
        None
    }
    fn poll_timeout(&mut self) -> Option<SimTime> {
        None
    }
    fn is_done(&self) -> bool {
        true
    }
    fn stats(&self, _stats: &mut AgentStats) {}
    fn handle_link_event(&mut self, now: SimTime, event: &LinkEvent, local: Option<IpAddr>) {
        self.seen.borrow_mut().push((now, event.clone(), local));
    }
}

/// Puts a [`Recorder`] next to the sink of every flow's receiver.
struct RecordingFactory {
    seen: Vec<(String, Seen)>,
}

impl AgentFactory for RecordingFactory {
    fn build(
        &mut self,
        ctx: &mut BuildContext<'_>,
        flow: usize,
        instance: usize,
    ) -> Result<bool, SimError> {
        if !UdpTrafficFactory.build(ctx, flow, instance)? {
            return Ok(false);
        }
        let s = ctx.scenario();
        let to = s.flows[flow].instances[instance].to;
        let index = s.flows[flow].instances[instance].index;
        let host = s.hosts[to].name.clone();
        if !self.seen.iter().any(|(h, _)| *h == host) {
            let seen = Rc::new(RefCell::new(Vec::new()));
            let rec_port = ctx.alloc_port(to)?;
            ctx.add_agent(
                to,
                rec_port,
                flow,
                index,
                Box::new(Recorder { seen: seen.clone() }),
            )?;
            self.seen.push((host, seen));
        }
        Ok(true)
    }
}

#[test]
fn link_events_reach_the_agents_of_the_ue_host() {
    let mut s = load("handover-two-gnb.toml");
    s.sim.duration = Duration::from_secs(29);
    let mut factory = RecordingFactory { seen: Vec::new() };
    let dir = tmp("radio-agents");
    let file = dir.join("events.jsonl");
    let opts = RunOptions {
        seed: Some(1),
        events: Some(file.clone()),
        ..RunOptions::default()
    };
    let hooks = Hooks {
        agents: Some(&mut factory),
        sources: Vec::new(),
    };
    run_scenario(&s, &opts, hooks).unwrap();
    let all = read_events(&file);
    let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
    for (host, ue, addrs) in [
        ("ue", 0u32, vec![ip("10.0.0.2")]),
        ("ue-dc", 1, vec![ip("10.0.1.2"), ip("10.0.2.2")]),
    ] {
        let seen = factory
            .seen
            .iter()
            .find(|(h, _)| h == host)
            .map(|(_, v)| v.borrow().clone())
            .unwrap();
        let mine: Vec<LinkEvent> = all.iter().filter(|e| e.ue == ue).cloned().collect();
        assert!(!mine.is_empty());
        assert_eq!(
            seen.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
            mine,
            "{host} gets exactly its UE's events, in order"
        );
        for (now, e, local) in &seen {
            assert_eq!(now.as_nanos(), e.t_ns);
            assert_eq!(*local, addrs[e.iface as usize], "{host} iface {}", e.iface);
        }
    }
    // Predictions reach the agents; the history-based one learns what the link
    // delivered (10 Mbit/s of traffic), not the path's capacity (several 100 Mbit/s).
    let ue0 = &factory.seen.iter().find(|(h, _)| h == "ue").unwrap().1;
    let pred = |name: &str| {
        ue0.borrow()
            .iter()
            .filter_map(|(_, e, _)| match &e.event {
                LinkEventKind::PredictedThroughput { bps, predictor, .. }
                    if predictor == name && (5e9..6e9).contains(&(e.t_ns as f64)) =>
                {
                    Some(*bps)
                }
                _ => None,
            })
            .next_back()
            .unwrap()
    };
    let (oracle, hm) = (pred("oracle"), pred("harmonic_mean"));
    assert!(oracle > 200e6, "{oracle}");
    assert!((8e6..12e6).contains(&hm), "{hm}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn radio_errors_name_file_line_and_field() {
    let path = repo().join("scenarios/handover-two-gnb.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let line_of = |src: &str, pat: &str| src.lines().position(|l| l.contains(pat)).unwrap() + 1;
    let err = |src: &str| -> SimError {
        let s = Scenario::parse(src, &path).unwrap_or_else(|e| panic!("{e}"));
        match run_scenario(&s, &RunOptions::default(), Hooks::default()) {
            Err(e) => e,
            Ok(_) => panic!("expected an error"),
        }
    };
    // A type error inside [radio].
    let bad = text.replacen("bandwidth_mhz = 100", "bandwidth_mhz = \"wide\"", 1);
    let e = err(&bad).to_string();
    let line = line_of(&bad, "\"wide\"");
    assert!(
        e.contains(&format!(
            "handover-two-gnb.toml:{line}: field `radio.cells[0].bandwidth_mhz`"
        )),
        "{e}"
    );
    // An unknown key.
    let bad = text.replacen("period_ms = 40", "period_ms = 40\nperiod_s = 1", 1);
    let e = err(&bad).to_string();
    let line = line_of(&bad, "period_s = 1");
    assert!(e.contains(&format!(":{line}: ")), "{e}");
    assert!(e.contains("radio.measurement"), "{e}");
    // A validation error of the model.
    let bad = text.replacen("period_ms = 40", "period_ms = 0", 1);
    let e = err(&bad).to_string();
    let line = line_of(&bad, "period_ms = 0");
    assert!(
        e.contains(&format!(":{line}: field `radio.measurement.period_ms`")),
        "{e}"
    );
    // A link bound to a path the model does not have.
    let bad = text.replacen(
        "radio = { ue = 1, iface = \"nr0-scg\" }",
        "radio = { ue = 1, iface = \"lte\" }",
        1,
    );
    let e = err(&bad).to_string();
    let line = line_of(&bad, "iface = \"lte\"");
    assert!(
        e.contains(&format!(":{line}: field `link[2].radio`")),
        "{e}"
    );
    assert!(e.contains("nr0-scg"), "lists the paths: {e}");
    // Two interfaces on the UE side.
    let bad = text.replacen(
        "{ name = \"mcg\", addr = \"10.0.1.1\", link = \"dc-mcg\", side = \"b\" }",
        "{ name = \"mcg\", addr = \"10.0.1.1\", link = \"dc-mcg\", side = \"a\" }",
        1,
    );
    let e = err(&bad).to_string();
    assert!(e.contains("link[1].radio") && e.contains("found 2"), "{e}");
}

#[test]
fn external_sources_cannot_drive_radio_links() {
    use polypath_sim::{LinkChange, LinkDirSel, LinkUpdate, ScheduledSource};
    let s = scenario(&static_ue(1e6, 1e6, "1s"));
    let source = ScheduledSource::new(
        "x",
        vec![LinkUpdate {
            at: SimTime(1000),
            link: "nr".into(),
            dir: LinkDirSel::Both,
            change: LinkChange::Down,
        }],
    );
    let hooks = Hooks {
        agents: None,
        sources: vec![Box::new(source)],
    };
    let e = run_scenario(&s, &RunOptions::default(), hooks).unwrap_err();
    assert!(e.to_string().contains("radio model drives"), "{e}");
}
