//! `polypath tcp recv` and `polypath tcp send` over loopback: both JSON reports, the CSV
//! rows and the errors for a bad congestion controller.

mod common;
use common::{Announced, POLYPATH, scratch, spawn_announced};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// A `polypath tcp recv --once` child, killed if the test ends early.
struct Receiver {
    child: Child,
    addr: SocketAddr,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Receiver {
    fn start(extra: &[&str]) -> Receiver {
        let Announced {
            child,
            stdout,
            addr,
        } = spawn_announced(
            Command::new(POLYPATH)
                .args(["tcp", "recv", "--listen", "127.0.0.1:0", "--once"])
                .args(extra),
            "listening on ",
        );
        Receiver {
            child,
            addr,
            stdout,
        }
    }

    /// Takes over a spawned `tcp recv`: `None` (with its stderr printed) if it exited
    /// instead of listening because the kernel has no MPTCP.
    fn adopt(mut child: Child) -> Option<Receiver> {
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        if line.is_empty() {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            let status = child.wait().unwrap();
            assert!(
                stderr.contains("MPTCP is not available")
                    && stderr.contains("Protocol not supported"),
                "receiver exited with {status}: {stderr}"
            );
            eprintln!("{stderr}");
            return None;
        }
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Some(Receiver {
            child,
            addr,
            stdout,
        })
    }

    /// The rest of its stdout once it has exited successfully.
    fn finish(mut self) -> String {
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "receiver exited with {status}: {rest}");
        rest
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn send(addr: SocketAddr, extra: &[&str]) -> std::process::Output {
    Command::new(POLYPATH)
        .args(["tcp", "send", "--connect", &addr.to_string()])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn recv_once_and_send_print_json_reports() {
    let dir = scratch("json");
    let csv = dir.join("send.csv");
    let receiver = Receiver::start(&["--json", "--cc", "reno", "--interval", "100ms"]);
    let out = send(
        receiver.addr,
        &[
            "--bytes",
            "5MB",
            "--cc",
            "reno",
            "--json",
            "--interval",
            "100ms",
            "--csv",
            csv.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "send failed: {stderr}");
    let sent: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("send output is not JSON ({e}): {:?}", out.stdout));
    let received: Value = serde_json::from_str(receiver.finish().trim()).unwrap();
    eprintln!("send: {sent}\nrecv: {received}");
    assert_eq!(sent["role"], "send");
    assert_eq!(received["role"], "recv");
    assert_eq!(sent["bytes"], 5_000_000u64);
    assert_eq!(received["bytes"], 5_000_000u64);
    assert_eq!(sent["cc"], "reno");
    assert_eq!(received["cc"], "reno");
    assert_eq!(sent["mptcp"], false);
    assert!(sent["rtt_ms"].as_f64().unwrap() > 0.0);
    assert!(sent["cwnd_bytes"].as_u64().unwrap() > 0);
    assert!(sent["retransmits"].as_u64().is_some());
    assert!(sent["goodput_mbps"].as_f64().unwrap() > 0.0);
    assert!(sent["subflows"].is_null());
    for r in [&sent, &received] {
        assert!(!r["intervals"].as_array().unwrap().is_empty());
    }
    let rows = std::fs::read_to_string(&csv).unwrap();
    let mut lines = rows.lines();
    assert_eq!(
        lines.next(),
        Some(
            "t_s,bytes,goodput_mbps,rtt_ms,cwnd_bytes,retrans,rwnd_limited_ms,rtos,sndbuf_limited_ms"
        )
    );
    let csv_bytes: u64 = lines
        .map(|l| l.split(',').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(csv_bytes, 5_000_000);
}

#[test]
fn mptcp_recv_and_send_report_subflows() {
    let probe = Command::new(POLYPATH)
        .args([
            "tcp",
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--once",
            "--mptcp",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The receiver either listens (MPTCP works) or exits at once naming MPTCP.
    let mut receiver = Receiver::adopt(probe);
    let Some(addr) = receiver.as_ref().map(|r| r.addr) else {
        eprintln!("SKIPPED: no MPTCP listener could be opened");
        return;
    };
    let out = send(addr, &["--mptcp", "--bytes", "2MB", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "send failed: {stderr}");
    let sent: Value = serde_json::from_slice(&out.stdout).unwrap();
    let received = receiver.take().unwrap().finish();
    eprintln!("send: {sent}\nrecv: {received}");
    assert_eq!(sent["mptcp"], true);
    assert_eq!(sent["bytes"], 2_000_000u64);
    assert!(received.contains("2000000 bytes"), "{received}");
    assert!(received.contains("MPTCP"), "{received}");
    if !sent["subflows"].is_null() {
        assert!(sent["subflows"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn human_output_without_json() {
    let receiver = Receiver::start(&[]);
    let out = send(receiver.addr, &["--bytes", "1MB"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "send failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stderr}{stdout}");
    assert!(stdout.starts_with("sent to 127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("1000000 bytes"), "{stdout}");
    assert!(stderr.contains("Mbit/s"), "{stderr}");
    let summary = receiver.finish();
    assert!(summary.starts_with("received from 127.0.0.1:"), "{summary}");
}

#[test]
fn unknown_congestion_controller_fails_naming_it() {
    let out = Command::new(POLYPATH)
        .args([
            "tcp",
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--once",
            "--cc",
            "no-such-cc",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(stderr.contains("\"no-such-cc\""), "{stderr}");
    assert!(stderr.contains("available:"), "{stderr}");
}
