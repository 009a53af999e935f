//! The gateway (`polypath gw`) in the real-time emulator, with the scenarios of
//! `scenarios/gateway/` (the lab's `chymp` experiment runs the same files): unmodified
//! applications cross the gateways byte-exact. These tests need root (network namespaces,
//! TUN devices) and nftables; without them each says why and returns. They run one at a
//! time (they measure in real time) and the emulator removes everything they created.

mod common;
use common::{POLYPATH, scratch};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use polypath_emu::{EmuOptions, EmuReport};
use polypath_sim::scenario::Scenario;
use serde_json::Value;

/// Emulations measure in real time: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The gateway scenarios' folder.
fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/gateway")
}

/// Takes the emulator (one test at a time) and a fresh folder `name`; `None` (after saying
/// why) when the emulator or nftables is missing.
fn testbed(name: &str) -> Option<(std::sync::MutexGuard<'static, ()>, PathBuf)> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(why) = polypath_emu::available() {
        eprintln!("SKIPPED: the emulator cannot run here: {why}");
        return None;
    }
    if std::process::Command::new("nft")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: nftables (`nft`) is not installed: the server gateway's NAT needs it");
        return None;
    }
    Some((guard, scratch(name)))
}

/// Runs scenario `file` (of `scenarios/gateway/`) with its outputs in `dir/out`.
fn emulate(dir: &Path, file: &str) -> (EmuReport, PathBuf) {
    let scenario = Scenario::load(&scenarios().join(file)).unwrap();
    let out = dir.join("out");
    let opts = EmuOptions {
        out_dir: Some(out.clone()),
        polypath_bin: Some(PathBuf::from(POLYPATH)),
        ..EmuOptions::default()
    };
    let report = polypath_emu::run_scenario(&scenario, &opts).unwrap();
    let r = &report.summary.realtime;
    eprintln!(
        "emulator: {:.2} s wall, late p50 {:.0} us p99 {:.0} us max {:.0} us, engine {:.0} % \
         of a core{}",
        r.wall_s,
        r.lateness.p50_us,
        r.lateness.p99_us,
        r.lateness.max_us,
        r.engine_cpu_share * 100.0,
        if r.overloaded { ", OVERLOADED" } else { "" }
    );
    (report, out)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The JSON object a tool printed last (after any `listening on` line).
fn read_json(path: &Path) -> Value {
    let text = read(path);
    let start = text.find('{').unwrap_or(0);
    serde_json::from_str(&text[start..])
        .unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

/// What went wrong, from the processes' logs, for a failed assertion.
fn logs(out: &Path) -> String {
    let mut s = String::new();
    for f in [
        "gwc-basic.log",
        "gws.log",
        "curl.log",
        "tcp-send.log",
        "tcp-recv.log",
    ] {
        if let Ok(t) = std::fs::read_to_string(out.join(f)) {
            let tail: Vec<&str> = t.lines().rev().take(8).collect();
            s += &format!(
                "--- {f}\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
    s
}

fn sha256(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(path).unwrap_or_default()))
}

#[test]
fn applications_cross_the_gateways_byte_exact() {
    let Some((_g, dir)) = testbed("basic") else {
        return;
    };
    let (report, out) = emulate(&dir, "basic.toml");
    let why = logs(&out);
    // Every process ended by itself (the workload finished, the others followed).
    for p in &report.summary.processes {
        assert!(
            !p.stopped_by_emulator,
            "{} was still running at the end\n{why}",
            p.flow
        );
        assert_eq!(p.exit_code, Some(0), "{} failed\n{why}", p.flow);
    }
    // ping: every echo answered, and ping checks the payload of each reply.
    let ping = read(&out.join("ping.txt"));
    let replies = ping.lines().filter(|l| l.contains("bytes from")).count();
    assert!(
        replies >= 19,
        "{replies} of 20 pings answered\n{ping}\n{why}"
    );
    assert!(!ping.contains("wrong data"), "{ping}");
    // curl against python3 -m http.server: the same 5 MB.
    assert_eq!(read(&out.join("curl.rc")).trim(), "0", "{why}");
    let (served, got) = (out.join("www/blob.bin"), out.join("got.bin"));
    assert_eq!(
        std::fs::metadata(&served).map(|m| m.len()).ok(),
        Some(5_000_000)
    );
    assert_eq!(sha256(&served), sha256(&got), "the download differs\n{why}");
    // A 20 MB TCP bulk transfer: every byte where the pattern says.
    let recv = read_json(&out.join("tcp-recv.json"));
    assert_eq!(recv["bytes"], 20_000_000, "{recv}\n{why}");
    assert_eq!(recv["mismatched_bytes"], 0, "{recv}");
    // They went through the tunnel: the client's tunnel address is their source...
    let ready = read(&out.join("gwc-basic.out"));
    let tunnel_ip = ready
        .lines()
        .find_map(|l| {
            serde_json::from_str::<Value>(l).ok()?["ready"]["tunnel_ip"]
                .as_str()
                .map(String::from)
        })
        .unwrap_or_else(|| panic!("no ready line: {ready}"));
    let send = read_json(&out.join("tcp-send.json"));
    assert!(
        send["local"]
            .as_str()
            .is_some_and(|l| l.starts_with(&format!("{tunnel_ip}:"))),
        "{send}"
    );
    // ...and the gateways counted them (server metrics, per class and direction).
    let metrics = read(&out.join("gws-metrics.txt"));
    let up: f64 = metrics
        .lines()
        .find(|l| l.starts_with("polypath_gw_class_bytes_total") && l.contains("dir=\"up\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(up > 20e6, "the server counted {up} bytes up\n{metrics}");
    eprintln!(
        "ping {replies}/20, curl 5 MB identical, TCP 20 MB exact at {:.1} Mbit/s; server counted {:.1} MB up",
        send["goodput_mbps"].as_f64().unwrap_or(0.0),
        up / 1e6
    );
}
