//! The real-time emulator against real processes: kernel TCP, ping, the UDP generator,
//! the link-event feed and the cleanup. These tests need root (network namespaces, TUN
//! devices); without it each says so and returns. They run one at a time (they measure
//! in real time) and each removes everything it created.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use polypath_emu::{EmuOptions, EmuReport};
use polypath_sim::scenario::Scenario;
use serde_json::Value;

const POLYPATH: &str = env!("CARGO_BIN_EXE_polypath");

/// Emulations measure in real time: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the emulator can run here; prints why not.
fn can_emulate() -> bool {
    match polypath_emu::available() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIPPED: the emulator cannot run here: {why}");
            false
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("polypath-emu-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn emulate(dir: &Path, toml: &str) -> EmuReport {
    let path = dir.join("scenario.toml");
    std::fs::write(&path, toml).unwrap();
    let scenario = Scenario::load(&path).unwrap();
    let opts = EmuOptions {
        out_dir: Some(dir.join("out")),
        polypath_bin: Some(PathBuf::from(POLYPATH)),
        ..EmuOptions::default()
    };
    let report = polypath_emu::run_scenario(&scenario, &opts).unwrap();
    let r = &report.summary.realtime;
    eprintln!(
        "emulator: {:.2} s wall, late p50 {:.0} us p99 {:.0} us max {:.0} us, engine {:.0} % \
         of a core, rt priority {}{}",
        r.wall_s,
        r.lateness.p50_us,
        r.lateness.p99_us,
        r.lateness.max_us,
        r.engine_cpu_share * 100.0,
        r.realtime_priority,
        if r.overloaded { ", OVERLOADED" } else { "" }
    );
    report
}

/// Two hosts `a` (10.0.0.1) and `b` (10.0.0.2) on one link `l`.
fn two_hosts(duration: &str, link: &str, flows: &str) -> String {
    format!(
        r#"
[sim]
duration = "{duration}"
[[host]]
name = "a"
interfaces = [{{ name = "x", addr = "10.0.0.1", link = "l", side = "a" }}]
[[host]]
name = "b"
interfaces = [{{ name = "y", addr = "10.0.0.2", link = "l", side = "b" }}]
[[link]]
name = "l"
{link}
{flows}
"#
    )
}

fn link_summary<'a>(report: &'a EmuReport, link: &str, dir: &str) -> &'a polypath_sim::LinkSummary {
    report
        .summary
        .sim
        .links
        .iter()
        .find(|l| l.link == link && l.dir == dir)
        .unwrap()
}

/// The JSON report a process printed last (after any `listening on` line).
fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = text.find('{').unwrap_or(0);
    serde_json::from_str(&text[start..])
        .unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

#[test]
fn ping_rtt_matches_the_configured_delay() {
    let _g = serial();
    if !can_emulate() {
        return;
    }
    let dir = scratch("ping");
    let toml = two_hosts(
        "30s",
        "rate = \"100Mbit/s\"\ndelay = \"20ms\"",
        r#"
[[flow]]
name = "ping"
kind = "command"
from = "a"
to = "b"
command = "ping -n -c 40 -i 0.05 {remote}"
"#,
    );
    let report = emulate(&dir, &toml);
    let out = std::fs::read_to_string(dir.join("out/procs/ping-0.stdout")).unwrap();
    let mut rtts: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(
        rtts.len() >= 38,
        "ping answered {} of 40: {out}",
        rtts.len()
    );
    rtts.sort_by(f64::total_cmp);
    let median = rtts[rtts.len() / 2];
    eprintln!(
        "ping over 2 x 20 ms: median {median:.3} ms, min {:.3}, max {:.3} ({} replies)",
        rtts[0],
        rtts[rtts.len() - 1],
        rtts.len()
    );
    assert!(
        (median - 40.0).abs() <= 0.5,
        "median RTT {median:.3} ms is not within 0.5 ms of 40 ms"
    );
    assert_eq!(report.summary.processes[0].exit_code, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lumos5g_trace_delivers_its_mean_under_saturation() {
    let _g = serial();
    if !can_emulate() {
        return;
    }
    let dir = scratch("lumos");
    let trace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces/lumos5g/5G/5g_trace_59_driving")
        .canonicalize()
        .unwrap();
    let scale = 0.2;
    let seconds = 10usize;
    let text = std::fs::read_to_string(&trace).unwrap();
    let samples: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .take(seconds)
        .collect();
    let mean_mbps = samples.iter().sum::<f64>() / seconds as f64 * scale;
    let peak = samples.iter().cloned().fold(0.0, f64::max) * scale;
    let toml = two_hosts(
        &format!("{seconds}s"),
        &format!(
            "rate = {{ trace = \"{}\", format = \"lumos5g\", scale = {scale} }}",
            trace.display()
        ),
        &format!(
            r#"
[[flow]]
name = "udp"
kind = "cbr"
from = "a"
to = "b"
rate = "{:.0}Mbit/s"
"#,
            peak * 1.25
        ),
    );
    let report = emulate(&dir, &toml);
    let up = link_summary(&report, "l", "up");
    let delivered_mbps = up.bytes as f64 * 8.0 / seconds as f64 / 1e6;
    let flow = &report.summary.sim.flows[0];
    let received_mbps = flow.app_bytes_received as f64 * 8.0 / seconds as f64 / 1e6;
    eprintln!(
        "Lumos5G trace 59 x {scale} over {seconds} s: trace mean {mean_mbps:.2} Mbit/s, \
         delivered {delivered_mbps:.2} Mbit/s ({:+.2} %), UDP payload received \
         {received_mbps:.2} Mbit/s, queue drops {}",
        (delivered_mbps / mean_mbps - 1.0) * 100.0,
        up.drops_queue
    );
    assert!(up.drops_queue > 0, "the load did not saturate the link");
    assert!(
        (delivered_mbps / mean_mbps - 1.0).abs() <= 0.03,
        "delivered {delivered_mbps:.2} Mbit/s against the trace's {mean_mbps:.2}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bernoulli_loss_is_measured_within_its_tolerance() {
    let _g = serial();
    if !can_emulate() {
        return;
    }
    let dir = scratch("loss");
    let p = 0.01;
    let toml = two_hosts(
        "6s",
        &format!("rate = \"100Mbit/s\"\ndelay = \"5ms\"\nloss = {p}"),
        r#"
[[flow]]
name = "udp"
kind = "cbr"
from = "a"
to = "b"
rate = "20Mbit/s"
packet_size = 1000
stop = "5s"
"#,
    );
    let report = emulate(&dir, &toml);
    let flow = &report.summary.sim.flows[0];
    // What the generator sent and what the receiving socket got (payload bytes).
    let payload = 1000.0 - 28.0;
    let sent = (flow.app_bytes_sent as f64 / payload).round();
    let received = (flow.app_bytes_received as f64 / payload).round();
    let lost = (sent - received) / sent;
    let sigma = (p * (1.0 - p) / sent).sqrt();
    eprintln!(
        "1 % Bernoulli loss: {sent} datagrams sent, {received} received, {:.3} % lost \
         (4 sigma = {:.3} %); the model counted {} random losses",
        lost * 100.0,
        4.0 * sigma * 100.0,
        link_summary(&report, "l", "up").drops_loss
    );
    assert!(sent > 10_000.0, "only {sent} datagrams were sent");
    assert!(
        (lost - p).abs() <= 4.0 * sigma,
        "measured loss {lost:.4} is outside 1 % +- 4 sigma ({sigma:.4})"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A command that copies its host's link-event feed to `{out}/feed-<host>.jsonl`.
fn feed_reader(host: &str, to: &str) -> String {
    format!(
        r#"
[[flow]]
name = "feed-{host}"
kind = "command"
from = "{host}"
to = "{to}"
command = "python3 -u -c 'import os,socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(os.environ[\"POLYPATH_LINK_EVENTS\"]); f=open(sys.argv[1],\"wb\"); [(f.write(b), f.flush()) for b in iter(lambda: s.recv(65536), b\"\")]' {{out}}/feed-{host}.jsonl"
"#
    )
}

#[test]
fn outage_signal_reaches_the_feed() {
    let _g = serial();
    if !can_emulate() {
        return;
    }
    let dir = scratch("outage");
    let mut flows = feed_reader("a", "b");
    flows.push_str(&feed_reader("b", "a"));
    let toml = two_hosts(
        "3s",
        "rate = \"10Mbit/s\"\ndelay = \"5ms\"\noutages = [{ at = \"1s\", duration = \"1s\" }]\noutage_signal = \"a\"",
        &flows,
    );
    let report = emulate(&dir, &toml);
    let lines = std::fs::read_to_string(dir.join("out/feed-a.jsonl")).unwrap();
    let events: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    eprintln!("feed of host a: {lines}");
    let kinds: Vec<String> = events
        .iter()
        .filter_map(|e| e["event"].as_object()?.keys().next().cloned())
        .collect();
    assert_eq!(kinds, ["link_down", "link_up"], "{lines}");
    assert_eq!(events[0]["t_ns"], 1_000_000_000u64);
    assert_eq!(events[1]["t_ns"], 2_000_000_000u64);
    assert_eq!(events[0]["local"], "10.0.0.1");
    // Only the told end hears it.
    let b = std::fs::read_to_string(dir.join("out/feed-b.jsonl")).unwrap_or_default();
    assert!(b.is_empty(), "host b was not told, yet its feed has {b}");
    assert_eq!(report.summary.realtime.feed_events, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refuses_what_it_cannot_honour() {
    let _g = serial();
    if !can_emulate() {
        return;
    }
    let dir = scratch("refuse");
    let toml = two_hosts(
        "1s",
        "rate = { source = \"feed\", initial = \"10Mbit/s\" }",
        "",
    );
    let path = dir.join("scenario.toml");
    std::fs::write(&path, toml).unwrap();
    let e = polypath_emu::run(&path, &EmuOptions::default()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("scenario.toml:") && msg.contains("link[0].rate"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `polypath tcp` receiver on `to` and a sender on `from` (after 0.3 s), flow `tcp`.
fn tcp_flows(from: &str, to: &str, recv_args: &str, send_args: &str) -> String {
    format!(
        r#"
[[flow]]
name = "tcp"
kind = "command"
from = "{to}"
to = "{from}"
port = 5201
command = "{{polypath}} tcp recv --listen {{addr:{to}}}:5201 --once {recv_args} --json > {{out}}/recv.json"

[[flow]]
name = "tcp-send"
kind = "command"
from = "{from}"
to = "{to}"
port = 5201
start = "300ms"
command = "{{polypath}} tcp send --connect {{addr:{to}}}:5201 {send_args} --json > {{out}}/send.json"
"#
    )
}

/// Mean delivered rate of link `link` direction `dir` over `[from_s, to_s)`, from
/// `links.csv`.
fn link_rate(dir_out: &Path, link: &str, dir: &str, from_s: f64, to_s: f64) -> f64 {
    let text = std::fs::read_to_string(dir_out.join("links.csv")).unwrap();
    let rates: Vec<f64> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            let t: f64 = c[0].parse().ok()?;
            (c[1] == link && c[2] == dir && t > from_s && t <= to_s)
                .then(|| c[4].parse().ok())
                .flatten()
        })
        .collect();
    rates.iter().sum::<f64>() / rates.len().max(1) as f64
}

#[test]
fn kernel_tcp_cubic_fills_a_one_bdp_link() {
    let _g = serial();
    if !can_emulate() {
        return;
    }
    let dir = scratch("cubic");
    let toml = two_hosts(
        "20s",
        "rate = \"100Mbit/s\"\ndelay = \"20ms\"\nqueue = \"1bdp\"",
        &tcp_flows("a", "b", "", "--time 8s --cc cubic"),
    );
    let report = emulate(&dir, &toml);
    let send = read_json(&dir.join("out/send.json"));
    let recv = read_json(&dir.join("out/recv.json"));
    let util = link_rate(&dir.join("out"), "l", "up", 2.0, 8.0) / 100.0;
    eprintln!(
        "kernel TCP {} over 100 Mbit/s, 20 ms, 1 BDP: link utilisation {:.1} % (2-8 s), \
         receiver goodput {:.1} Mbit/s, {} retransmits, queue drops {}",
        send["cc"],
        util * 100.0,
        recv["goodput_mbps"].as_f64().unwrap_or(0.0),
        send["retransmits"],
        link_summary(&report, "l", "up").drops_queue
    );
    assert_eq!(send["cc"], "cubic");
    assert!(util >= 0.9, "utilisation {:.1} % < 90 %", util * 100.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kernel_mptcp_aggregates_two_links() {
    let _g = serial();
    if !can_emulate() {
        return;
    }
    let dir = scratch("mptcp");
    let toml = format!(
        r#"
[sim]
duration = "20s"
[[host]]
name = "a"
interfaces = [
  {{ name = "x1", addr = "10.1.0.1", link = "l1", side = "a" }},
  {{ name = "x2", addr = "10.2.0.1", link = "l2", side = "a" }},
]
[[host]]
name = "b"
interfaces = [
  {{ name = "y1", addr = "10.1.0.2", link = "l1", side = "b" }},
  {{ name = "y2", addr = "10.2.0.2", link = "l2", side = "b" }},
]
[[link]]
name = "l1"
rate = "50Mbit/s"
delay = "10ms"
queue = "1bdp"
[[link]]
name = "l2"
rate = "50Mbit/s"
delay = "10ms"
queue = "1bdp"
{}
"#,
        tcp_flows("a", "b", "--mptcp", "--time 8s --mptcp")
    );
    let report = emulate(&dir, &toml);
    let send = read_json(&dir.join("out/send.json"));
    let recv = read_json(&dir.join("out/recv.json"));
    let out = dir.join("out");
    let (r1, r2) = (
        link_rate(&out, "l1", "up", 2.0, 8.0),
        link_rate(&out, "l2", "up", 2.0, 8.0),
    );
    eprintln!(
        "kernel MPTCP over 2 x 50 Mbit/s: {r1:.1} + {r2:.1} = {:.1} Mbit/s on the links \
         (2-8 s), receiver goodput {:.1} Mbit/s, {} subflows",
        r1 + r2,
        recv["goodput_mbps"].as_f64().unwrap_or(0.0),
        send["subflows"]
    );
    assert!(
        report
            .summary
            .processes
            .iter()
            .all(|p| p.exit_code == Some(0))
    );
    assert!(r1 + r2 >= 90.0, "aggregate {:.1} Mbit/s < 90", r1 + r2);
    let _ = std::fs::remove_dir_all(&dir);
}

fn netns_list() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    v.sort();
    v
}

/// Starts `polypath emu run` on a scenario whose command sleeps, and waits until its
/// namespaces exist; returns the child and the namespaces it made.
fn start_sleeping_emulator(dir: &Path, before: &[String]) -> (std::process::Child, Vec<String>) {
    let toml = two_hosts(
        "60s",
        "rate = \"10Mbit/s\"",
        r#"
[[flow]]
name = "sleep"
kind = "command"
from = "a"
to = "b"
command = "sleep 60"
"#,
    );
    let path = dir.join("scenario.toml");
    std::fs::write(&path, toml).unwrap();
    let child = std::process::Command::new(POLYPATH)
        .args(["emu", "run", "--quiet"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let made: Vec<String> = netns_list()
            .into_iter()
            .filter(|n| !before.contains(n))
            .collect();
        // Both hosts' namespaces, and the command running in one of them.
        let running = made.iter().any(|n| {
            std::process::Command::new("ip")
                .args(["netns", "pids", n])
                .output()
                .is_ok_and(|o| !o.stdout.is_empty())
        });
        if made.len() == 2 && running {
            return (child, made);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the emulator did not set up its namespaces: {made:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn nothing_is_left_after_sigterm_or_sigkill_and_clean() {
    let _g = serial();
    if !can_emulate() {
        return;
    }
    let dir = scratch("cleanup");
    let before = netns_list();
    // SIGTERM: the emulator removes everything itself.
    let (mut child, made) = start_sleeping_emulator(&dir, &before);
    eprintln!("emulator namespaces: {made:?}");
    assert!(made.iter().all(|n| n.starts_with(polypath_emu::PREFIX)));
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert_eq!(netns_list(), before, "SIGTERM left namespaces ({status})");
    // SIGKILL: the namespaces stay, the command dies with the emulator, and `emu clean`
    // removes the rest.
    let (mut child, made) = start_sleeping_emulator(&dir, &before);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_ne!(netns_list(), before, "a SIGKILLed run cannot clean up");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while made.iter().any(|n| {
        std::process::Command::new("ip")
            .args(["netns", "pids", n])
            .output()
            .is_ok_and(|o| !o.stdout.is_empty())
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the command outlived its emulator"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = std::process::Command::new(POLYPATH)
        .args(["emu", "clean"])
        .output()
        .unwrap();
    eprintln!("emu clean: {}", String::from_utf8_lossy(&out.stdout).trim());
    assert!(out.status.success());
    assert_eq!(netns_list(), before, "emu clean left namespaces");
    let _ = std::fs::remove_dir_all(&dir);
}
