//! The real-time emulator against real processes: kernel TCP, ping, the UDP generator,
//! the link-event feed and the cleanup. These tests need root (network namespaces, TUN
//! devices); without it each says so and returns. They run one at a time (they measure
//! in real time) and each removes everything it created.

mod common;
use common::{POLYPATH, Scratch, scratch};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use polypath_emu::{EmuOptions, EmuReport};
use polypath_sim::scenario::Scenario;
use serde_json::Value;

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

/// Takes the emulator (one test at a time) and a fresh folder `name`; `None` (after saying
/// why) when the emulator cannot run here.
fn testbed(name: &str) -> Option<(std::sync::MutexGuard<'static, ()>, Scratch)> {
    let guard = serial();
    if !can_emulate() {
        return None;
    }
    Some((guard, scratch(name)))
}

fn emulate(dir: &Path, toml: &str) -> EmuReport {
    emulate_with(dir, toml, false)
}

/// Emulates `toml` in `dir`, with pcap files of every interface when `pcap`.
fn emulate_with(dir: &Path, toml: &str, pcap: bool) -> EmuReport {
    let path = dir.join("scenario.toml");
    std::fs::write(&path, toml).unwrap();
    let scenario = Scenario::load(&path).unwrap();
    let opts = EmuOptions {
        out_dir: Some(dir.join("out")),
        polypath_bin: Some(PathBuf::from(POLYPATH)),
        pcap,
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

/// A `command` flow `name` run on host `from` (`{remote}` is `to`'s address).
fn command_flow(name: &str, from: &str, to: &str, command: &str) -> String {
    assert!(!command.contains('\''), "a TOML literal string: {command}");
    format!(
        "[[flow]]\nname = \"{name}\"\nkind = \"command\"\nfrom = \"{from}\"\nto = \"{to}\"\n\
         command = '{command}'\n"
    )
}

/// Every process of the run exited with status 0.
fn assert_all_exited_cleanly(report: &EmuReport) {
    let failed: Vec<_> = report
        .summary
        .processes
        .iter()
        .filter(|p| p.exit_code != Some(0))
        .collect();
    assert!(failed.is_empty(), "processes that failed: {failed:?}");
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
    let Some((_g, dir)) = testbed("ping") else {
        return;
    };
    let toml = two_hosts(
        "30s",
        "rate = \"100Mbit/s\"\ndelay = \"20ms\"",
        &command_flow("ping", "a", "b", "ping -n -c 40 -i 0.05 {remote}"),
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

/// Each namespace gets its host's TCP buffer limits: the scenario's where set, Linux's own
/// where not, whatever the machine's are (a new namespace copies those).
#[test]
fn hosts_get_their_tcp_buffer_limits() {
    let Some((_g, dir)) = testbed("tcpbuf") else {
        return;
    };
    let show = "cat /proc/sys/net/ipv4/tcp_rmem /proc/sys/net/ipv4/tcp_wmem";
    let flows = command_flow("show-a", "a", "b", show) + &command_flow("show-b", "b", "a", show);
    let toml = two_hosts("5s", "rate = \"10Mbit/s\"\ndelay = \"1ms\"", &flows).replacen(
        "name = \"a\"",
        "name = \"a\"\ntcp_rmem = [8192, 65536, 1000000]",
        1,
    );
    let report = emulate(&dir, &toml);
    let shown = |flow: &str| -> Vec<Vec<u64>> {
        let out = std::fs::read_to_string(dir.join(format!("out/procs/{flow}-0.stdout"))).unwrap();
        out.lines()
            .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
            .collect()
    };
    assert_eq!(
        shown("show-a"),
        [vec![8192, 65536, 1_000_000], vec![4096, 16384, 4_194_304]]
    );
    assert_eq!(
        shown("show-b"),
        [vec![4096, 131_072, 6_291_456], vec![4096, 16384, 4_194_304]]
    );
    assert_all_exited_cleanly(&report);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lumos5g_trace_delivers_its_mean_under_saturation() {
    let Some((_g, dir)) = testbed("lumos") else {
        return;
    };
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
            // A deep queue keeps the link busy through the sender's pauses on a busy machine
            // (a real process, descheduled for a few hundred ms at worst).
            "rate = {{ trace = \"{}\", format = \"lumos5g\", scale = {scale} }}\nqueue = \"500ms\"",
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
    let Some((_g, dir)) = testbed("loss") else {
        return;
    };
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
    let Some((_g, dir)) = testbed("outage") else {
        return;
    };
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
    let Some((_g, dir)) = testbed("refuse") else {
        return;
    };
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
    // A QUIC flow option the polypath client has no counterpart for.
    let toml = two_hosts(
        "1s",
        "rate = \"10Mbit/s\"",
        r#"
[[flow]]
name = "q"
kind = "quic"
from = "a"
to = "b"
bytes = "1MB"
[flow.options]
idle_timeout = "60s"
"#,
    );
    std::fs::write(&path, toml).unwrap();
    let msg = polypath_emu::run(&path, &EmuOptions::default())
        .unwrap_err()
        .to_string();
    eprintln!("{msg}");
    assert!(msg.contains("flow[0].options.idle_timeout"), "{msg}");
    // Nothing was created for refused scenarios (by this process: other emulator runs on the
    // machine have namespaces of their own).
    let ours = format!("{}{}x", polypath_emu::PREFIX, std::process::id());
    let left: Vec<String> = netns_list()
        .into_iter()
        .filter(|n| n.starts_with(&ours))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
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
    let Some((_g, dir)) = testbed("cubic") else {
        return;
    };
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
    let Some((_g, dir)) = testbed("mptcp") else {
        return;
    };
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
    assert_all_exited_cleanly(&report);
    assert!(r1 + r2 >= 90.0, "aggregate {:.1} Mbit/s < 90", r1 + r2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tcp` flows (kernel MPTCP with a congestion controller and a rate) and a
/// rate-limited `quic` flow: the emulator runs the TCP tool's receiver and sender with the
/// flow's options, and both senders keep to their rates over links that could carry far
/// more.
#[test]
fn tcp_flow_and_rate_limited_quic_flow() {
    let Some((_g, dir)) = testbed("tcp-kind") else {
        return;
    };
    let toml = r#"
[sim]
duration = "10s"
[[host]]
name = "a"
interfaces = [
  { name = "x1", addr = "10.1.0.1", link = "l1", side = "a" },
  { name = "x2", addr = "10.2.0.1", link = "l2", side = "a" },
]
[[host]]
name = "b"
interfaces = [
  { name = "y1", addr = "10.1.0.2", link = "l1", side = "b" },
  { name = "y2", addr = "10.2.0.2", link = "l2", side = "b" },
]
[[link]]
name = "l1"
rate = "50Mbit/s"
delay = "5ms"
[[link]]
name = "l2"
rate = "50Mbit/s"
delay = "5ms"
[[flow]]
name = "t"
kind = "tcp"
from = "a"
to = "b"
mptcp = true
cc = "bbr"
rate = "8Mbit/s"
start = "500ms"
stop = "3500ms"
[[flow]]
name = "q"
kind = "quic"
from = "a"
to = "b"
bytes = "3MB"
rate = "8Mbit/s"
start = "500ms"
"#;
    let report = emulate(&dir, toml);
    let procs = dir.join("out/procs");
    let send = read_json(&procs.join("t-0-send.stdout"));
    let recv = read_json(&procs.join("t-0-recv.stdout"));
    let quic = read_json(&procs.join("q-0-client.stdout"));
    let sent = send["bytes"].as_u64().unwrap_or(0);
    let quic_s = quic["seconds"].as_f64().unwrap_or(0.0);
    eprintln!(
        "tcp flow: {} {} bytes in {:.2} s over {} subflows; quic 3 MB at 8 Mbit/s in {quic_s:.2} s",
        send["cc"], sent, send["seconds"], send["subflows"]
    );
    for p in &report.summary.processes {
        assert!(
            p.exit_code == Some(0) || p.stopped_by_emulator,
            "{} {:?} exited {:?}",
            p.flow,
            p.role,
            p.exit_code
        );
    }
    assert_eq!(send["cc"], "bbr");
    assert_eq!(
        (send["mptcp"].as_bool(), recv["mptcp"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(recv["bytes"].as_u64(), Some(sent));
    // 3 s at 8 Mbit/s is 3 MB; the links could take 30 MB.
    assert!((2_400_000..=3_100_000).contains(&sent), "{sent} bytes");
    assert!((2.9..5.0).contains(&quic_s), "3 MB took {quic_s} s");
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
/// namespaces exist; returns the child (the caller signals and waits for it) and the
/// namespaces it made.
#[allow(clippy::zombie_processes)]
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
    let mut child = std::process::Command::new(POLYPATH)
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
                .is_ok_and(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .any(|p| {
                            std::fs::read_to_string(format!("/proc/{p}/comm"))
                                .is_ok_and(|c| c.trim() == "sleep")
                        })
                })
        });
        if made.len() == 2 && running {
            return (child, made);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the emulator did not set up its namespaces: {made:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn nothing_is_left_after_sigterm_or_sigkill_and_clean() {
    let Some((_g, dir)) = testbed("cleanup") else {
        return;
    };
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
    // The processes still in the run's namespaces: none once the kernel has delivered
    // their parent-death signal; `emu clean` kills whatever is left in any case.
    let pids_inside = || -> Vec<String> {
        made.iter()
            .flat_map(|n| {
                let o = std::process::Command::new("ip")
                    .args(["netns", "pids", n])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    let survivors = pids_inside();
    eprintln!(
        "processes left in the namespaces 0.5 s after SIGKILL: {}",
        survivors.len()
    );
    let out = std::process::Command::new(POLYPATH)
        .args(["emu", "clean"])
        .output()
        .unwrap();
    eprintln!("emu clean: {}", String::from_utf8_lossy(&out.stdout).trim());
    assert!(out.status.success());
    assert_eq!(netns_list(), before, "emu clean left namespaces");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while survivors
        .iter()
        .any(|p| Path::new(&format!("/proc/{p}")).exists())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "processes {survivors:?} outlived emu clean"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `scenarios/handover-mbb.toml` as the lab's quick LAMP5G handover runs it (the
/// `lamp5g_handover` experiment): cells narrowed to 40 MHz and one layer at the same power
/// per resource element (about 170 Mbit/s each, separate carriers, a 1 s break-before-make
/// interruption), the UE starting at 225 m so both handovers come within seconds, and a
/// `size` download. With `bbm`, the single-modem break-before-make baseline (A3 handover).
fn handover_scenario(size: &str, bbm: bool) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/handover-mbb.toml");
    let mut s: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
    let radio = s["radio"].as_table_mut().unwrap();
    for (k, cell) in radio["cells"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        let c = cell.as_table_mut().unwrap();
        c.insert("bandwidth_mhz".into(), 40.into());
        c.insert("mimo_layers".into(), 1.into());
        let p = c["tx_power_dbm"]
            .as_float()
            .or(c["tx_power_dbm"].as_integer().map(|i| i as f64));
        c.insert(
            "tx_power_dbm".into(),
            (p.unwrap() - 10.0 * (273.0f64 / 106.0).log10()).into(),
        );
        if k == 1 {
            c.insert("carrier_ghz".into(), 3.7.into());
        }
    }
    let mut interruption = toml::Table::new();
    interruption.insert("dist".into(), "constant".into());
    interruption.insert("ms".into(), 1000.into());
    let mut handover = toml::Table::new();
    handover.insert("interruption".into(), interruption.into());
    radio.insert("handover".into(), handover.into());
    for ue in radio["ues"].as_array_mut().unwrap() {
        let m = ue["mobility"].as_table_mut().unwrap();
        m.insert(
            "from".into(),
            toml::Value::Array(vec![225.0.into(), 0.0.into()]),
        );
    }
    s["sim"]
        .as_table_mut()
        .unwrap()
        .insert("duration".into(), "40s".into());
    let flow = &mut s["flow"].as_array_mut().unwrap()[0];
    flow.as_table_mut()
        .unwrap()
        .insert("bytes".into(), size.into());
    if bbm {
        let radio = s["radio"].as_table_mut().unwrap();
        let ues = radio["ues"].as_array_mut().unwrap();
        ues.truncate(1);
        let mut a3 = toml::Table::new();
        a3.insert("id".into(), 1.into());
        a3.insert("type".into(), "A3".into());
        a3.insert("offset_db".into(), 2.0.into());
        a3.insert("hysteresis_db".into(), 1.0.into());
        a3.insert("time_to_trigger_ms".into(), 160.into());
        a3.insert("action".into(), "handover".into());
        ues[0]["interfaces"][0]
            .as_table_mut()
            .unwrap()
            .insert("events".into(), toml::Value::Array(vec![a3.into()]));
        s["link"]
            .as_array_mut()
            .unwrap()
            .retain(|l| l["name"].as_str() != Some("ran2"));
        for h in s["host"].as_array_mut().unwrap() {
            let h = h.as_table_mut().unwrap();
            h["interfaces"]
                .as_array_mut()
                .unwrap()
                .retain(|i| i["link"].as_str() != Some("ran2"));
            if let Some(r) = h.get_mut("routes") {
                r.as_array_mut()
                    .unwrap()
                    .retain(|r| r["via"].as_str() != Some("gnb2"));
            }
        }
        let f = s["flow"].as_array_mut().unwrap()[0].as_table_mut().unwrap();
        f["paths"].as_array_mut().unwrap().truncate(1);
        f.insert("scheduler".into(), "default".into());
        f.insert("path_manager".into(), "default".into());
        f.remove("options");
    }
    toml::to_string(&s).unwrap()
}

/// The longest stretch (s) of 100 ms bins in which the radio downlinks delivered nothing,
/// between the first and the last bin that delivered.
fn longest_delivery_gap(out: &Path) -> f64 {
    let text = std::fs::read_to_string(out.join("links.csv")).unwrap();
    let mut bins: std::collections::BTreeMap<u64, f64> = std::collections::BTreeMap::new();
    for l in text.lines().skip(1) {
        let c: Vec<&str> = l.split(',').collect();
        if c[1].starts_with("ran") && c[2] == "down" {
            let t = (c[0].parse::<f64>().unwrap() * 10.0).round() as u64;
            *bins.entry(t).or_default() += c[4].parse::<f64>().unwrap();
        }
    }
    let active: Vec<(u64, f64)> = bins.into_iter().collect();
    let first = active.iter().position(|b| b.1 > 0.0).unwrap_or(0);
    let last = active.iter().rposition(|b| b.1 > 0.0).unwrap_or(0);
    let (mut longest, mut run) = (0u32, 0u32);
    for b in &active[first..=last] {
        run = if b.1 == 0.0 { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    f64::from(longest) * 0.1
}

#[test]
fn lamp5g_make_before_break_with_real_processes() {
    let Some((_g, dir)) = testbed("mbb") else {
        return;
    };
    let report = emulate(&dir, &handover_scenario("300MB", false));
    let client = report
        .summary
        .processes
        .iter()
        .find(|p| p.role == polypath_emu::Role::QuicClient)
        .unwrap();
    let json = read_json(Path::new(&client.stdout));
    let paths = json["client_paths"].as_array().unwrap();
    let opened = |id: u64| {
        paths
            .iter()
            .find(|p| p["id"] == id)
            .and_then(|p| p["opened_s"].as_f64())
    };
    let abandoned = paths
        .iter()
        .find(|p| p["id"] == 0)
        .and_then(|p| p["abandoned_s"].as_f64());
    let gap = longest_delivery_gap(&dir.join("out"));
    eprintln!(
        "make-before-break: target path opened at {:?} s, source path abandoned at {:?} s, \
         longest delivery gap {:.0} ms, transfer {} in {:?} s, link events {}",
        opened(1),
        abandoned,
        gap * 1000.0,
        json["verified"],
        client.ended_s.zip(client.started_s).map(|(e, s)| e - s),
        json["link_events"]
    );
    assert_eq!(json["verified"], true);
    let (Some(added), Some(removed)) = (opened(1), abandoned) else {
        panic!("the target path was not added or the source not abandoned: {paths:?}");
    };
    assert!(
        added < removed,
        "target added at {added} s, source abandoned at {removed} s"
    );
    assert!(
        gap < 0.1,
        "a {:.0} ms stretch without delivery",
        gap * 1000.0
    );

    // The single-modem break-before-make baseline shows the interruption.
    let dir = scratch("bbm");
    let report = emulate(&dir, &handover_scenario("300MB", true));
    let gap = longest_delivery_gap(&dir.join("out"));
    let handovers = report.summary.sim.radio.as_ref().map_or(0, |r| r.handovers);
    eprintln!(
        "break-before-make: {handovers} handover(s), longest delivery gap {:.0} ms",
        gap * 1000.0
    );
    assert!(handovers >= 1);
    assert!(
        gap >= 0.8,
        "the handover interruption left only a {:.0} ms gap",
        gap * 1000.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nrdc_two_path_quic_completes_as_in_the_simulator() {
    let Some((_g, dir)) = testbed("nrdc") else {
        return;
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/nrdc-two-path.toml");
    let toml = std::fs::read_to_string(path)
        .unwrap()
        .replace("bytes = \"1GB\"", "bytes = \"100MB\"")
        .replace("duration = \"120s\"", "duration = \"60s\"");
    assert!(toml.contains("100MB"));
    std::fs::write(dir.join("scenario.toml"), &toml).unwrap();
    let scenario = Scenario::load(&dir.join("scenario.toml")).unwrap();
    let sim = polypath_sim::run_scenario(
        &scenario,
        &polypath_sim::RunOptions::default(),
        polypath_sim::Hooks::default(),
    )
    .unwrap();
    let sim_s = sim.summary.flows[0].completions.as_ref().unwrap().mean_s;
    let emu = emulate(&dir, &toml);
    let emu_s = emu.summary.sim.flows[0]
        .completions
        .as_ref()
        .expect("the emulated transfer did not complete")
        .mean_s;
    eprintln!(
        "nrdc-two-path, 100 MB download, lamp5g + CUBIC, seed 1: simulator {sim_s:.3} s, \
         emulator (real polypath processes) {emu_s:.3} s ({:+.1} %)",
        (emu_s / sim_s - 1.0) * 100.0
    );
    assert!(
        (emu_s / sim_s - 1.0).abs() <= 0.15,
        "emulated {emu_s:.3} s against simulated {sim_s:.3} s"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The packets of a pcap file the emulator wrote (raw IP, link type 101).
fn pcap_packets(path: &Path) -> Vec<Vec<u8>> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        u32::from_le_bytes(data[20..24].try_into().unwrap()),
        101,
        "raw IP"
    );
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= data.len() {
        let len = u32::from_le_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(data[at + 16..at + 16 + len].to_vec());
        at += 16 + len;
    }
    out
}

/// Must-show 2 of M2HO: `polypath m2ho run` on the UE host of an emulation rewrites the
/// advertised window of a live kernel TCP download (visible in the pcap of what the UE
/// sent, with checksums that verify), the 10 MB arrive byte-exact, and no nftables rules
/// remain after a clean stop, after SIGKILL and `m2ho clean`, or after SIGKILL and the
/// next start.
#[test]
fn m2ho_daemon_rewrites_the_window_of_a_live_transfer() {
    use polypath_m2ho::packet;
    let Some((_g, dir)) = testbed("m2ho") else {
        return;
    };
    if std::process::Command::new("iptables")
        .arg("-V")
        .output()
        .is_err()
    {
        eprintln!(
            "SKIPPED: `iptables` (Debian package iptables) is not installed; `make test` installs it"
        );
        return;
    }
    const CLAMP: u64 = 60_000;
    const BYTES: u64 = 10_000_000;
    // The UE (b) runs the daemon around the receiver, then checks the rules as it stops,
    // is killed and cleaned up; the server (a) sends.
    let script = format!(
        r#"P=$1; O=$2; UE=$3
rules() {{ iptables -S; ip6tables -S; }}
wait_ready() {{ i=0; while ! grep -q ready $1 && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; }}
$P m2ho run --local $UE --param clamp_rwnd_bytes={CLAMP} --stats $O/m2ho.json --stats-interval 200ms --csv $O/m2ho.csv > $O/d1.out 2> $O/d1.err &
D=$!; wait_ready $O/d1.out
rules > $O/t-running.txt
$P tcp recv --listen $UE:5201 --once --json > $O/recv.json
kill -TERM $D; wait $D; echo "exit $?" >> $O/d1.out
rules > $O/t-stopped.txt
$P m2ho run > $O/d2.out 2>&1 & D=$!; wait_ready $O/d2.out; kill -9 $D; wait $D
rules > $O/t-killed.txt
$P m2ho clean > $O/clean.txt
rules > $O/t-cleaned.txt
$P m2ho run > $O/d3.out 2>&1 & D=$!; wait_ready $O/d3.out; kill -9 $D; wait $D
rules > $O/t-killed2.txt
echo '{{"cells": [{{"cell": 7, "rat": "nr_fr1", "bytes": 150000}}]}}' > $O/buffers.json
$P m2ho run --duration 300ms --buffer-db $O/buffers.json > $O/d4.out 2>&1
rules > $O/t-restarted.txt
"#
    );
    let script_path = dir.join("ue.sh");
    std::fs::write(&script_path, &script).unwrap();
    let flows = format!(
        r#"
[[flow]]
name = "ue"
kind = "command"
from = "b"
to = "a"
port = 5201
command = "sh {} {{polypath}} {{out}} {{addr:b}}"

[[flow]]
name = "send"
kind = "command"
from = "a"
to = "b"
port = 5201
start = "1500ms"
command = "{{polypath}} tcp send --connect {{addr:b}}:5201 --bytes {BYTES} --cc cubic --json > {{out}}/send.json"
"#,
        script_path.display()
    );
    let toml = two_hosts(
        "40s",
        "rate = \"50Mbit/s\"\ndelay = \"10ms\"\nqueue = \"1bdp\"",
        &flows,
    );
    let report = emulate_with(&dir, &toml, true);
    let out = dir.join("out");
    let text =
        |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    eprintln!("daemon 1: {}{}", text("d1.out"), text("d1.err"));
    let recv = read_json(&out.join("recv.json"));
    let send = read_json(&out.join("send.json"));
    eprintln!(
        "download of {BYTES} bytes with the window clamped to {CLAMP} bytes: {} Mbit/s over \
         50 Mbit/s, 20 ms",
        recv["goodput_mbps"]
    );
    assert_eq!(send["bytes"], BYTES);
    assert_eq!(recv["bytes"], BYTES);
    assert_eq!(recv["pattern_ok"], true, "the stream arrived byte-exact");

    // The daemon's own account.
    let stats = read_json(&out.join("m2ho.json"));
    assert_eq!(stats["stopped_by"], "signal");
    let rewritten = stats["queues"]["rewritten"].as_u64().unwrap();
    eprintln!(
        "daemon: {} packets, {rewritten} rewritten, {} unparsed",
        stats["queues"]["packets"], stats["queues"]["unparsed"]
    );
    assert!(rewritten > 100, "{rewritten} windows rewritten");
    // The last daemon read the buffer database it was given and wrote it back: the history
    // outlives the run (M2HO Sec. 4.3).
    assert_eq!(
        read_json(&out.join("buffers.json")),
        serde_json::json!({"cells": [{"cell": 7, "rat": "nr_fr1", "bytes": 150000}]})
    );

    // What the UE sent, as the emulator captured it after the kernel and the daemon.
    let tx = std::fs::read_dir(out.join("pcap"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("b-") && n.ends_with("-tx.pcap")
        })
        .expect("the UE's tx pcap");
    let mut shift = None;
    let (mut acks, mut clamped) = (0u64, 0u64);
    for p in pcap_packets(&tx) {
        let Ok(seg) = packet::parse(&p) else { continue };
        if seg.src_port != 5201 {
            continue;
        }
        assert!(
            packet::tcp_checksum_ok(&p, &seg),
            "a checksum the kernel would drop"
        );
        if seg.has(packet::flags::SYN) {
            shift = seg.options.window_scale;
            continue;
        }
        let shift = shift.expect("the UE's SYN-ACK announced a window scale");
        let bytes = u64::from(seg.window) << shift;
        acks += 1;
        if !seg.has(packet::flags::FIN) {
            assert!(
                bytes < CLAMP + (1 << shift),
                "window {bytes} bytes above the clamp"
            );
            clamped += u64::from(bytes >= CLAMP);
        }
    }
    eprintln!("pcap: {acks} segments from the UE, {clamped} at the clamp ({CLAMP} bytes)");
    assert!(clamped > 100);
    // The kernel offered more than the clamp: the log has its windows and M2HO's.
    let csv = text("m2ho.csv");
    let offered_more = csv
        .lines()
        .filter(|l| l.contains(",out,") && l.contains(",rewritten,"))
        .count();
    assert!(
        offered_more as u64 >= rewritten.min(1000) / 2,
        "{offered_more} rewritten rows"
    );

    // The rules: installed while running, gone after each way of stopping.
    // `--local` (IPv4): two chains, two jumps and two queue rules in iptables.
    let ours = |f: &str| {
        text(f)
            .lines()
            .filter(|l| l.contains("POLYPATH_M2HO_"))
            .count()
    };
    assert_eq!(ours("t-running.txt"), 6, "{}", text("t-running.txt"));
    assert_eq!(
        ours("t-stopped.txt"),
        0,
        "clean stop: {}",
        text("t-stopped.txt")
    );
    // Without `--local`: the same in iptables and ip6tables.
    assert_eq!(ours("t-killed.txt"), 12, "SIGKILL leaves the rules");
    assert_eq!(
        ours("t-cleaned.txt"),
        0,
        "`m2ho clean` removed them: {}",
        text("clean.txt")
    );
    assert_eq!(ours("t-killed2.txt"), 12);
    assert_eq!(
        ours("t-restarted.txt"),
        0,
        "the next start removed them: {}",
        text("d4.out")
    );
    assert!(text("d4.out").contains("removed the rules of daemons that are gone"));
    if report.summary.realtime.overloaded {
        eprintln!(
            "note: the emulator reported itself overloaded: {:?}",
            report.summary.realtime.warnings
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
