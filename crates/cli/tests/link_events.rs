//! `polypath client` and `polypath server` with `--link-events SOCKET`: the test serves
//! the link-event feed on a Unix socket, as the emulator does, and checks that LAMP5G
//! make-before-break runs from it (`--path-manager lamp5g --initial-paths first`) and that
//! malformed lines are skipped.

mod common;
use common::{Announced, POLYPATH, scratch, spawn_announced};
use polypath_link::feed::FeedEvent;
use polypath_link::{CellId, LinkEvent, LinkEventKind, MeasEvent};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Generous bound for anything the test waits for (never reached when things work).
const PATIENCE: Duration = Duration::from_secs(60);

/// The feed line of an RRC measurement event entering on `iface`, for the interface with
/// address `local`.
fn rrc_line(t_s: u64, iface: u16, event: MeasEvent, local: &str) -> String {
    FeedEvent {
        event: LinkEvent::new(
            t_s * 1_000_000_000,
            0,
            iface,
            LinkEventKind::RrcEventEntered {
                meas_id: u32::from(iface) + 1,
                event,
                serving: CellId(u32::from(iface) + 1),
                cell: event
                    .has_neighbour()
                    .then_some(CellId(u32::from(iface) + 2)),
            },
        ),
        local: Some(local.parse().unwrap()),
    }
    .to_line()
    .unwrap()
}

fn prediction_line(local: &str, mbps: f64) -> String {
    FeedEvent {
        event: LinkEvent::new(
            0,
            0,
            0,
            LinkEventKind::PredictedThroughput {
                bps: mbps * 1e6,
                predictor: "oracle".into(),
                horizon_ms: 100,
            },
        ),
        local: Some(local.parse().unwrap()),
    }
    .to_line()
    .unwrap()
}

/// A child process killed if the test ends early.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `polypath server --once` with extra arguments and environment; returns it with its
/// address, certificate and stdout.
fn server(
    dir: &Path,
    extra: &[&str],
    env: &[(&str, &Path)],
) -> (
    Proc,
    SocketAddr,
    PathBuf,
    BufReader<std::process::ChildStdout>,
) {
    let cert = dir.join("server-cert.pem");
    let mut cmd = Command::new(POLYPATH);
    cmd.args(["server", "--listen", "127.0.0.1:0", "--once", "--cert-out"])
        .arg(&cert)
        .args(extra)
        .env_remove("POLYPATH_LINK_EVENTS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let Announced {
        child,
        stdout,
        addr,
    } = spawn_announced(&mut cmd, "listening on ");
    (Proc(child), addr, cert, stdout)
}

/// The server's report line; waits for it to exit.
fn server_report(mut proc: Proc, mut stdout: BufReader<std::process::ChildStdout>) -> Value {
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let status = proc.0.wait().unwrap();
    assert!(status.success(), "server exited with {status}: {line}");
    serde_json::from_str(&line).unwrap()
}

/// Starts `polypath client` (info logs on stderr, forwarded line by line to the returned
/// channel).
fn start_client(
    connect: SocketAddr,
    cert: &Path,
    extra: &[&str],
    env: &[(&str, &Path)],
) -> (Proc, mpsc::Receiver<String>) {
    let mut cmd = Command::new(POLYPATH);
    cmd.args(["client", "--connect", &connect.to_string(), "--pin"])
        .arg(cert)
        .args(extra)
        .env_remove("POLYPATH_LINK_EVENTS")
        .env("RUST_LOG", "polypath=info,polypath_io=info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("client: {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (Proc(child), rx)
}

/// Waits for the client to exit and returns its JSON summary.
fn client_summary(mut proc: Proc) -> Value {
    let mut out = Vec::new();
    proc.0.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let status = proc.0.wait().unwrap();
    assert!(status.success(), "client exited with {status}");
    serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "summary is not JSON ({e}): {}",
            String::from_utf8_lossy(&out)
        )
    })
}

/// Accepts the one connection a process makes to the feed socket.
fn accept(listener: &UnixListener) -> UnixStream {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                return stream;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("nobody connected to the feed: {e}"),
        }
    }
}

/// Waits for a stderr line containing `text`; returns every line seen.
fn wait_for_line(rx: &mpsc::Receiver<String>, text: &str) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(text);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(_) => panic!("no {text:?} from the client; it said {seen:#?}"),
        }
    }
}

#[test]
fn lamp5g_adds_the_target_path_and_abandons_the_source_on_feed_events() {
    let dir = scratch("mbb");
    let sock = dir.join("feed.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let (srv, addr, cert, srv_out) = server(&dir, &["--path-manager", "lamp5g"], &[]);
    let sock_arg = sock.to_str().unwrap();
    let (client, rx) = start_client(
        addr,
        &cert,
        &[
            "--size",
            "100MB",
            "--local",
            "127.0.0.1:0",
            "--local",
            "127.0.0.2:0",
            "--path-manager",
            "lamp5g",
            "--initial-paths",
            "first",
            "--link-events",
            sock_arg,
        ],
        &[],
    );
    let mut feed = accept(&listener);
    wait_for_line(&rx, "client connected");
    // Once the connection is up: the target interface (iface 1, 127.0.0.2) reports A4, the
    // source interface (iface 0, 127.0.0.1) A2. Both are idempotent, so they are repeated
    // until the client exits, in case the first A4 came before the peer's connection IDs
    // for a second path.
    let add = rrc_line(1, 1, MeasEvent::A4, "127.0.0.2");
    let remove = rrc_line(2, 0, MeasEvent::A2, "127.0.0.1");
    println!("add line:    {}", add.trim_end());
    println!("remove line: {}", remove.trim_end());
    let writer = std::thread::spawn(move || {
        let pair = format!("{add}{remove}");
        let mut sent = 0;
        while feed.write_all(pair.as_bytes()).is_ok() {
            sent += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        sent
    });
    let summary = client_summary(client);
    println!("{summary:#}");
    assert!(writer.join().unwrap() >= 1);
    assert_eq!(summary["verified"], true);
    assert_eq!(summary["bytes"], 100_000_000u64);
    assert_eq!(summary["multipath"], true);
    let paths = summary["client_paths"].as_array().unwrap();
    let first = paths.iter().find(|p| p["id"] == 0).unwrap();
    let second = paths
        .iter()
        .find(|p| {
            p["local"]
                .as_str()
                .is_some_and(|l| l.starts_with("127.0.0.2:"))
        })
        .unwrap_or_else(|| panic!("no path from 127.0.0.2: {summary:#}"));
    let abandoned = first["abandoned_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("path 0 was not abandoned: {summary:#}"));
    let opened = second["opened_s"].as_f64().unwrap();
    let validated = second["validated_s"].as_f64().unwrap();
    assert!(
        opened <= validated && validated <= abandoned,
        "make before break: target opened {opened} s, validated {validated} s, source abandoned {abandoned} s"
    );
    let carried = second["bytes_sent"].as_u64().unwrap();
    assert!(
        carried > 1_000_000,
        "the target path carried {carried} bytes"
    );
    assert!(summary["link_events"]["applied"].as_u64().unwrap() >= 2);
    let served = server_report(srv, srv_out);
    assert_eq!(served["verified"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_feed_lines_are_skipped_and_the_transfer_completes() {
    let dir = scratch("malformed");
    let server_sock = dir.join("server.sock");
    let client_sock = dir.join("client.sock");
    let server_listener = UnixListener::bind(&server_sock).unwrap();
    let client_listener = UnixListener::bind(&client_sock).unwrap();
    // The server's feed through --link-events, the client's through the environment.
    let (srv, addr, cert, srv_out) =
        server(&dir, &["--link-events", server_sock.to_str().unwrap()], &[]);
    let (client, rx) = start_client(
        addr,
        &cert,
        &[
            "--size",
            "20MB",
            "--local",
            "127.0.0.1:0",
            "--local",
            "127.0.0.2:0",
        ],
        &[("POLYPATH_LINK_EVENTS", &client_sock)],
    );
    let garbage = [
        "this is not JSON\n",
        "{\"t_ns\":1,\"ue\":0,\"iface\":\"zero\",\"event\":{\"link_up\":{\"cell\":2}}}\n",
        "{\"t_ns\":1,\"ue\":0,\"iface\":0,\"event\":{\"link_up\":{\"cell\":2}},\"local\":\"no-ip\"}\n",
    ];
    for (listener, local) in [
        (&server_listener, "127.0.0.1"),
        (&client_listener, "127.0.0.2"),
    ] {
        let mut feed = accept(listener);
        for line in garbage {
            feed.write_all(line.as_bytes()).unwrap();
        }
        feed.write_all(prediction_line(local, 50.0).as_bytes())
            .unwrap();
        // Closing the feed ends it quietly.
    }
    let summary = client_summary(client);
    println!("{summary:#}");
    assert_eq!(summary["verified"], true);
    assert_eq!(summary["link_events"]["skipped_lines"], 3u64);
    assert_eq!(summary["link_events"]["events"], 1u64);
    let logs: Vec<String> = rx.try_iter().collect();
    for n in 1..=3 {
        assert!(
            logs.iter()
                .any(|l| l.contains("malformed link-event feed line skipped")
                    && l.contains(&format!("line={n}"))),
            "no warning for line {n}: {logs:#?}"
        );
    }
    assert!(
        logs.iter().any(|l| l.contains("field=local")),
        "the warning names the field: {logs:#?}"
    );
    let served = server_report(srv, srv_out);
    assert_eq!(served["verified"], true);
    let _ = std::fs::remove_dir_all(&dir);
}
