//! `polypath server` and `polypath client` over loopback: verified transfers, the JSON
//! summary, loss injected by a userspace relay, qlog output, two paths and path weights.

mod common;
use common::{Announced, POLYPATH, scratch, spawn_announced};
use polypath_io::relay::{Relay, RelayConfig};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A `polypath server --once` child process, killed if the test ends early.
struct Server {
    child: Child,
    addr: SocketAddr,
    cert: PathBuf,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        Server::spawn(dir, &["--once"], extra)
    }

    /// A server that keeps serving (no --once) until dropped.
    fn serving(dir: &Path, extra: &[&str]) -> Server {
        Server::spawn(dir, &[], extra)
    }

    fn spawn(dir: &Path, once: &[&str], extra: &[&str]) -> Server {
        let cert = dir.join("server-cert.pem");
        // 127.0.0.1 unless `extra` names the address.
        let listen: &[&str] = if extra.contains(&"--listen") {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let Announced {
            child,
            stdout,
            addr,
        } = spawn_announced(
            Command::new(POLYPATH)
                .arg("server")
                .args(listen)
                .args(once)
                .arg("--cert-out")
                .arg(&cert)
                .args(extra),
            "listening on ",
        );
        Server {
            child,
            addr,
            cert,
            stdout,
        }
    }

    /// The server's next report line (one per connection, as each ends).
    fn report(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("report {line:?}: {e}"))
    }

    /// The server's report line of the one client it served; waits for it to exit.
    fn finish(mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "server exited with {status}: {line}");
        serde_json::from_str(&line).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `polypath client` against `connect` (`ADDR` or `HOST:PORT`) and returns its JSON
/// summary.
fn client(server: &Server, connect: impl ToString, extra: &[&str]) -> Value {
    let out = Command::new(POLYPATH)
        .args(["client", "--connect", &connect.to_string(), "--pin"])
        .arg(&server.cert)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed: {stderr}");
    eprint!("{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("summary is not JSON ({e}): {:?}", out.stdout))
}

fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks the fields every summary has: the transfer's, then the sending side's
/// connection report.
fn check_summary(s: &Value, bytes: u64) {
    assert_eq!(s["bytes"], bytes);
    assert_eq!(s["verified"], true);
    assert_eq!(s["sha256"].as_str().unwrap().len(), 64);
    assert!(s["seconds"].as_f64().unwrap() > 0.0);
    assert!(s["goodput_mbps"].as_f64().unwrap() > 0.0);
    assert!(s["handshake_ms"].as_f64().unwrap() > 0.0);
    let sender = &s["sender"];
    let expected_side = if s["direction"] == "upload" {
        "client"
    } else {
        "server"
    };
    assert_eq!(sender["side"], expected_side, "{s}");
    check_connection_report(sender);
    let sent = sender["packets_sent"].as_u64().unwrap();
    assert!(sent > bytes / 1500, "{sent} packets for {bytes} bytes");
    let paths = sender["paths"].as_array().unwrap();
    let path_bytes: u64 = paths.iter().map(|p| p["bytes"].as_u64().unwrap()).sum();
    assert!(path_bytes >= bytes, "paths carried {path_bytes} of {bytes}");
}

/// Checks a connection report (the client's `sender`, the server's `connection`): its
/// figures are there, and `lost_fraction` is lost / sent, for the connection and each path.
fn check_connection_report(r: &Value) {
    assert!(r["handshake_ms"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["cwnd"].as_u64().unwrap() > 0);
    assert!(r["srtt_ms"].as_f64().unwrap() > 0.0);
    let fraction = |v: &Value| {
        let (lost, sent) = (
            v["packets_lost"].as_u64().unwrap(),
            v["packets_sent"].as_u64().unwrap(),
        );
        let f = v["lost_fraction"].as_f64().unwrap();
        assert!((f - lost as f64 / sent.max(1) as f64).abs() < 1e-12, "{v}");
    };
    fraction(r);
    let paths = r["paths"].as_array().unwrap();
    assert!(!paths.is_empty());
    for p in paths {
        for field in ["bytes", "packets_sent", "cwnd", "packets_lost"] {
            assert!(p[field].as_u64().is_some(), "path field {field}: {p}");
        }
        for field in ["srtt_ms", "recent_loss_rate"] {
            assert!(p[field].as_f64().is_some(), "path field {field}: {p}");
        }
        fraction(p);
    }
}

#[test]
fn hundred_megabytes_upload_verified_with_json_summary() {
    let dir = scratch("upload100");
    let server = Server::start(&dir, &[]);
    let summary = client(&server, server.addr, &["--size", "100MB"]);
    eprintln!("{summary:#}");
    check_summary(&summary, 100_000_000);
    assert_eq!(summary["direction"], "upload");
    assert_eq!(summary["sender"]["side"], "client");
    let served = server.finish();
    assert_eq!(served["verified"], true);
    assert_eq!(served["bytes"], 100_000_000u64);
    // The server's line has its own view of the connection.
    assert!(served["goodput_mbps"].as_f64().unwrap() > 0.0);
    assert_eq!(served["connection"]["side"], "server");
    check_connection_report(&served["connection"]);
    assert!(
        served["connection"]["paths"][0]["packets_received"]
            .as_u64()
            .unwrap()
            > 100_000_000 / 1500
    );
    // ECN over loopback (RFC 9000 section 13.4): the client's marks reach the server,
    // which reports them, so the client's path validates and keeps marking.
    let sent = &summary["sender"]["paths"][0];
    let received = &served["connection"]["paths"][0];
    assert_eq!(sent["ecn"], "capable", "{sent}");
    assert!(sent["ecn_marked"].as_u64().unwrap() > 100_000_000 / 1500 / 2);
    assert!(received["ecn_ect0_received"].as_u64().unwrap() > 100_000_000 / 1500 / 2);
}

/// With one local address the client offers Multipath QUIC (initial_max_path_id) only
/// when asked (--multipath); the server always offers it, so the summary tells.
#[test]
fn multipath_is_offered_with_a_single_local_address_on_request() {
    let dir = scratch("mp-single");
    for (extra, expected) in [(&["--multipath"][..], true), (&[][..], false)] {
        let server = Server::start(&dir, &[]);
        let mut args = vec!["--size", "100kB", "--local", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let summary = client(&server, server.addr, &args);
        check_summary(&summary, 100_000);
        assert_eq!(summary["multipath"], expected, "{extra:?}: {summary}");
        assert_eq!(summary["client_paths"].as_array().unwrap().len(), 1);
        assert_eq!(server.finish()["verified"], true);
    }
}

/// `--migrate-to`: a download whose client moves to 127.0.0.2 after 2 MB; the server
/// follows and validates the new address, the client validates its new path, and the
/// download completes verified.
#[test]
fn client_migrates_to_a_new_local_address_mid_download() {
    let dir = scratch("migrate");
    let server = Server::start(&dir, &[]);
    let summary = client(
        &server,
        server.addr,
        &[
            "--size",
            "20MB",
            "--download",
            "--local",
            "127.0.0.1:0",
            "--migrate-to",
            "127.0.0.2:0@2MB",
        ],
    );
    check_summary(&summary, 20_000_000);
    let report = server.finish();
    assert_eq!(report["verified"], true, "{report}");
    let server_side = &report["connection"];
    assert_eq!(server_side["peer_address_changes"], 1, "{report}");
    assert_eq!(server_side["peer_addresses_validated"], 1, "{report}");
    let remote = server_side["paths"][0]["remote"].as_str().unwrap();
    assert!(
        remote.starts_with("127.0.0.2:"),
        "the server sends to {remote}"
    );
    let paths = summary["client_paths"].as_array().unwrap();
    assert_eq!(paths.len(), 1, "{summary}");
    let local = paths[0]["local"].as_str().unwrap();
    assert!(
        local.starts_with("127.0.0.2:"),
        "the client's path left from {local}"
    );
}

/// `server --preferred-address`: the server listens on 127.0.0.1 and advertises
/// 127.0.0.2; the client moves there after the handshake and the download completes from
/// there (both reports count the move, the server's path leaves from the preferred
/// address); a client with `--no-preferred-address` stays.
#[test]
fn client_moves_to_the_server_preferred_address() {
    let dir = scratch("preferred");
    let preferred = std::net::UdpSocket::bind("127.0.0.2:0")
        .and_then(|s| s.local_addr())
        .unwrap()
        .to_string();
    let mut server = Server::serving(&dir, &["--preferred-address", &preferred]);
    let args = ["--size", "5MB", "--download"];
    let summary = client(&server, server.addr, &args);
    check_summary(&summary, 5_000_000);
    // A download's summary has the sender's (the server's) report; the client's path
    // shows where it sent.
    assert_eq!(summary["sender"]["preferred_address_migrations"], 1);
    assert_eq!(
        summary["client_paths"][0]["remote"].as_str(),
        Some(preferred.as_str()),
        "{summary}"
    );
    let report = server.report();
    assert_eq!(report["verified"], true, "{report}");
    let server_side = &report["connection"];
    assert_eq!(server_side["preferred_address_migrations"], 1, "{report}");
    assert_eq!(
        server_side["paths"][0]["local"].as_str(),
        Some(preferred.as_str()),
        "{report}"
    );
    let stays = client(
        &server,
        server.addr,
        &["--size", "1MB", "--download", "--no-preferred-address"],
    );
    check_summary(&stays, 1_000_000);
    assert_eq!(
        stays["client_paths"][0]["remote"].as_str(),
        Some(server.addr.to_string().as_str()),
        "{stays}"
    );
    let report = server.report();
    assert_eq!(
        report["connection"]["preferred_address_migrations"], 0,
        "{report}"
    );
    assert_eq!(
        report["connection"]["paths"][0]["local"].as_str(),
        Some(server.addr.to_string().as_str()),
        "{report}"
    );
}

/// hq-interop through the command line: `server --www` and `client --url`; the files land
/// in --downloads byte for byte; the server offers both protocols, and a transfer-protocol
/// client still works against it.
#[test]
fn hq_interop_downloads_files_from_a_served_directory() {
    let dir = scratch("hq");
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("sub")).unwrap();
    let big: Vec<u8> = (0..2_000_003u32).map(|i| (i * 31 % 253) as u8).collect();
    std::fs::write(www.join("big"), &big).unwrap();
    std::fs::write(www.join("sub/small"), b"hello").unwrap();
    let server = Server::start(&dir, &["--www", www.to_str().unwrap()]);
    let downloads = dir.join("downloads");
    let base = format!("https://{}", server.addr);
    let summary = client(
        &server,
        server.addr,
        &[
            "--url",
            &format!("{base}/big"),
            "--url",
            &format!("{base}/sub/small"),
            "--downloads",
            downloads.to_str().unwrap(),
        ],
    );
    assert_eq!(summary["protocol"], "hq-interop", "{summary}");
    assert_eq!(summary["bytes"], 2_000_008u64);
    assert_eq!(std::fs::read(downloads.join("big")).unwrap(), big);
    assert_eq!(
        std::fs::read(downloads.join("sub/small")).unwrap(),
        b"hello"
    );
    let served = server.finish();
    assert_eq!(served["protocol"], "hq-interop", "{served}");
    assert_eq!(served["files"], 2);
    assert_eq!(served["verified"], true);

    let server = Server::start(&dir, &["--www", www.to_str().unwrap()]);
    let summary = client(&server, server.addr, &["--size", "10kB"]);
    check_summary(&summary, 10_000);
    assert_eq!(server.finish()["protocol"], "polypath-transfer/1");

    // --resume: the first URL on a first connection, the other on a second one that
    // resumes the first's TLS session with the server's ticket.
    let mut server = Server::serving(&dir, &["--www", www.to_str().unwrap()]);
    let resumed = dir.join("resumed");
    let base = format!("https://{}", server.addr);
    let summary = client(
        &server,
        server.addr,
        &[
            "--resume",
            "--url",
            &format!("{base}/sub/small"),
            "--url",
            &format!("{base}/big"),
            "--downloads",
            resumed.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(resumed.join("big")).unwrap(), big);
    assert_eq!(
        summary["earlier_connections"][0]["resumed"], false,
        "{summary}"
    );
    assert_eq!(summary["connection"]["resumed"], true, "{summary}");
    let (first, second) = (server.report(), server.report());
    assert_eq!(
        (first["files"].clone(), second["files"].clone()),
        (1.into(), 1.into())
    );
    assert_eq!(first["connection"]["resumed"], false, "{first}");
    assert_eq!(second["connection"]["resumed"], true, "{second}");
    assert_eq!(second["connection"]["zero_rtt_packets"], 0, "{second}");
    drop(server);

    // --zero-rtt on both sides: the second connection's request leaves in 0-RTT packets,
    // which the server opens and accepts. Through a relay adding 25 ms each way: early data
    // is what the client writes before the handshake completes, and on bare loopback a
    // busy machine can delay the client's writes past that (then they rightly go in 1-RTT).
    let mut server = Server::serving(&dir, &["--www", www.to_str().unwrap(), "--zero-rtt"]);
    let relay = RelayProcess::start(server.addr, &["--delay", "25ms"]);
    let early = dir.join("early");
    let base = format!("https://{}", relay.addr);
    let summary = client(
        &server,
        relay.addr,
        &[
            "--zero-rtt",
            "--url",
            &format!("{base}/sub/small"),
            "--url",
            &format!("{base}/big"),
            "--downloads",
            early.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(early.join("big")).unwrap(), big);
    let connection = &summary["connection"];
    assert_eq!(connection["early_data_accepted"], true, "{summary}");
    assert!(
        connection["zero_rtt_packets"].as_u64() > Some(0),
        "{summary}"
    );
    let (_, second) = (server.report(), server.report());
    assert_eq!(
        second["connection"]["early_data_accepted"], true,
        "{second}"
    );
    assert!(
        second["connection"]["zero_rtt_packets"].as_u64() > Some(0),
        "{second}"
    );
}

/// The interop runner's handshake variants from the command line, over IPv6 loopback: a
/// server that sends Retry, a client offering ChaCha20-Poly1305 only and updating its 1-RTT
/// keys every 10 packets. Both sides report the suite and the key updates; the client's
/// qlog shows the Retry.
#[test]
fn chacha20_key_updates_and_retry_over_ipv6() {
    let dir = scratch("variants");
    let qlog_dir = dir.join("qlog");
    let server = Server::start(&dir, &["--listen", "[::1]:0", "--retry"]);
    assert!(server.addr.is_ipv6(), "{}", server.addr);
    let summary = client(
        &server,
        server.addr,
        &[
            "--size",
            "40MB",
            "--cipher",
            "chacha20",
            "--key-update",
            "10",
            "--qlog",
            qlog_dir.to_str().unwrap(),
        ],
    );
    check_summary(&summary, 40_000_000);
    let sender = &summary["sender"];
    assert_eq!(sender["cipher_suite"], "TLS13_CHACHA20_POLY1305_SHA256");
    assert!(sender["key_updates"].as_u64().unwrap() >= 1, "{sender}");
    let local = summary["client_paths"][0]["local"].as_str().unwrap();
    assert!(local.starts_with('['), "an IPv6 local address: {local}");
    let served = server.finish();
    assert_eq!(
        served["connection"]["cipher_suite"],
        "TLS13_CHACHA20_POLY1305_SHA256"
    );
    assert!(served["connection"]["key_updates"].as_u64().unwrap() >= 1);
    let client_log = std::fs::read_dir(&qlog_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("-client.sqlog"))
        .unwrap();
    let records = polypath_quic::qlog::parse_json_seq(&std::fs::read(client_log).unwrap()).unwrap();
    assert!(
        records
            .iter()
            .any(|r| r["data"]["header"]["packet_type"] == "retry"),
        "no Retry in the client's qlog"
    );
    // Without the options: another suite, no key update in so short a transfer.
    let server = Server::start(&dir, &["--listen", "[::1]:0"]);
    let summary = client(&server, server.addr, &["--size", "1MB"]);
    assert_ne!(
        summary["sender"]["cipher_suite"],
        "TLS13_CHACHA20_POLY1305_SHA256"
    );
    assert_eq!(summary["sender"]["key_updates"], 0);
    server.finish();
}

#[test]
fn file_upload_and_download_hash_to_what_the_test_computes() {
    let dir = scratch("files");
    // Upload: the summary's digest is the file's, and the server verified it.
    let data: Vec<u8> = (0..3_000_017u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let file = dir.join("object.bin");
    std::fs::write(&file, &data).unwrap();
    let server = Server::start(&dir, &[]);
    let up = client(&server, server.addr, &["--file", file.to_str().unwrap()]);
    check_summary(&up, data.len() as u64);
    assert_eq!(up["sha256"], sha256_hex(&data));
    assert_eq!(server.finish()["verified"], true);

    // Download into a file: what landed on disk hashes to the verified digest.
    let server = Server::start(&dir, &[]);
    let out = dir.join("downloaded.bin");
    let down = client(
        &server,
        server.addr,
        &[
            "--download",
            "--size",
            "2MB",
            "--file",
            out.to_str().unwrap(),
        ],
    );
    check_summary(&down, 2_000_000);
    assert_eq!(down["sender"]["side"], "server");
    // The sender's addresses are the server's: its local port is the one the client
    // connected to.
    assert_eq!(
        down["sender"]["paths"][0]["local"].as_str().unwrap(),
        down["client_paths"][0]["remote"].as_str().unwrap()
    );
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), 2_000_000);
    assert_eq!(down["sha256"], sha256_hex(&got));
    assert_eq!(server.finish()["verified"], true);
}

#[test]
fn hundred_megabytes_through_a_relay_losing_five_percent() {
    let dir = scratch("lossy");
    let server = Server::start(&dir, &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let relay = runtime
        .block_on(Relay::start(RelayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: server.addr,
            loss: 0.05,
            seed: 7,
            one_way_delay: std::time::Duration::ZERO,
        }))
        .unwrap();
    let relay_addr = relay.local_addr();
    // The relay runs on a thread of its own while the client process transfers.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let relay_thread = std::thread::spawn(move || {
        runtime.block_on(async {
            let _ = stop_rx.await;
        });
        let stats = relay.stats();
        drop(relay);
        stats
    });
    let summary = client(&server, relay_addr, &["--size", "100MB"]);
    let _ = stop_tx.send(());
    let stats = relay_thread.join().unwrap();
    eprintln!("{summary:#}\nrelay: {stats:?}");
    check_summary(&summary, 100_000_000);
    assert_eq!(server.finish()["verified"], true);
    let seen = stats.forwarded + stats.dropped;
    let rate = stats.dropped as f64 / seen as f64;
    assert!((0.04..0.06).contains(&rate), "relay dropped {rate}");
    // The sender's lost fraction is the relay's drop rate (give or take spurious and
    // missed loss declarations), one definition for the connection and its one path.
    let lost = summary["sender"]["lost_fraction"].as_f64().unwrap();
    assert!((0.02..0.10).contains(&lost), "lost fraction {lost}");
    let path_lost = summary["sender"]["paths"][0]["lost_fraction"]
        .as_f64()
        .unwrap();
    assert!(
        (0.02..0.10).contains(&path_lost),
        "path lost fraction {path_lost}"
    );
}

#[test]
fn qlog_of_a_transfer_is_json_seq_with_packet_and_metrics_events() {
    let dir = scratch("qlog");
    let qlog_dir = dir.join("qlog");
    let server = Server::start(&dir, &["--qlog", qlog_dir.to_str().unwrap()]);
    let summary = client(
        &server,
        server.addr,
        &["--size", "2MB", "--qlog", qlog_dir.to_str().unwrap()],
    );
    check_summary(&summary, 2_000_000);
    assert_eq!(server.finish()["verified"], true);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&qlog_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut total_sent = 0;
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        //= https://www.rfc-editor.org/rfc/rfc7464#section-2.2
        //# Each JSON text MUST be preceded by an ASCII Record Separator
        assert_eq!(bytes.first(), Some(&0x1e), "{}", file.display());
        let records: Vec<Value> = bytes
            .split(|&b| b == 0x1e)
            .skip(1)
            .map(|r| serde_json::from_slice(r).unwrap())
            .collect();
        assert_eq!(
            records[0]["file_schema"],
            "urn:ietf:params:qlog:file:sequential"
        );
        let count = |suffix: &str| {
            records
                .iter()
                .filter(|r| r["name"].as_str().is_some_and(|n| n.ends_with(suffix)))
                .count()
        };
        let (sent, received, metrics) = (
            count(":packet_sent"),
            count(":packet_received"),
            count("metrics_updated"),
        );
        eprintln!(
            "{}: {} records, {sent} packet_sent, {received} packet_received, {metrics} metrics_updated",
            file.display(),
            records.len()
        );
        assert!(sent > 0 && received > 0 && metrics > 0);
        total_sent += sent;
    }
    // Each side logs what it sent: together at least one packet per 1400 bytes moved.
    assert!(
        total_sent > 2_000_000 / 1400,
        "{total_sent} packet_sent events"
    );
}

/// A server killed (SIGKILL) in the middle of a download leaves a qlog file that parses:
/// whole records only, the handshake's events, and packets of the transfer (written out
/// periodically while it ran, not only when the connection ends).
#[test]
fn a_server_killed_mid_transfer_leaves_a_parseable_qlog() {
    let dir = scratch("qlog-kill");
    let qlog_dir = dir.join("qlog");
    // The server sends at 20 Mbit/s: a 1 GB download would take minutes.
    let mut server = Server::start(
        &dir,
        &["--qlog", qlog_dir.to_str().unwrap(), "--rate", "20Mbit/s"],
    );
    let mut client = Command::new(POLYPATH)
        .args(["client", "--connect", &server.addr.to_string(), "--pin"])
        .arg(&server.cert)
        .args(["--download", "--size", "1GB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server_file = || {
        std::fs::read_dir(&qlog_dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.to_string_lossy().ends_with("-server.sqlog"))
    };
    let stream_bytes_sent = |records: &[Value]| -> u64 {
        records
            .iter()
            .filter(|r| r["name"] == "quic:packet_sent")
            .flat_map(|r| r["data"]["frames"].as_array().cloned().unwrap_or_default())
            .filter(|f| f["frame_type"] == "stream")
            .map(|f| f["length"].as_u64().unwrap_or(0))
            .sum()
    };
    // Wait (at most a minute, however busy the machine) until the file shows 1 MB of the
    // transfer sent: the buffered records were written out while the transfer runs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let before = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the server's qlog never showed 1 MB sent"
        );
        assert!(
            client.try_wait().unwrap().is_none(),
            "the client ended before the kill"
        );
        if let Some(file) = server_file() {
            let records = polypath_quic::qlog::parse_json_seq(&std::fs::read(&file).unwrap())
                .unwrap_or_else(|e| panic!("{} while running: {e}", file.display()));
            if stream_bytes_sent(&records) >= 1_000_000 {
                break records;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    let _ = client.kill();
    let _ = client.wait();
    let file = server_file().unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let records = polypath_quic::qlog::parse_json_seq(&bytes)
        .unwrap_or_else(|e| panic!("{} after SIGKILL: {e}", file.display()));
    assert_eq!(bytes.last(), Some(&b'\n'), "the last record is whole");
    assert_eq!(records[0]["trace"]["vantage_point"]["type"], "server");
    let states: Vec<&str> = records
        .iter()
        .filter(|r| r["name"] == "quic:connection_state_updated")
        .filter_map(|r| r["data"]["new"].as_str())
        .collect();
    assert!(
        states.contains(&"handshake_complete") && states.contains(&"handshake_confirmed"),
        "{states:?}"
    );
    assert!(records.len() >= before.len());
    let sent = stream_bytes_sent(&records);
    assert!(
        (1_000_000..1_000_000_000).contains(&sent),
        "{sent} stream bytes"
    );
    assert!(
        !records
            .iter()
            .any(|r| r["name"] == "quic:connection_closed"),
        "the connection was not closed: the process was killed"
    );
    eprintln!(
        "{}: {} records, {} bytes, {sent} stream bytes sent, after SIGKILL",
        file.display(),
        records.len(),
        bytes.len()
    );
}

/// A server killed (SIGKILL) after a short, failed handshake leaves the handshake in its
/// qlog file (it once left 0 bytes: everything was still buffered).
#[test]
fn a_server_killed_after_a_failed_handshake_leaves_its_qlog() {
    let dir = scratch("qlog-fail");
    let qlog_dir = dir.join("qlog");
    let mut server = Server::start(&dir, &["--qlog", qlog_dir.to_str().unwrap()]);
    // The certificate names localhost and 127.0.0.1, not example.org: the client refuses it.
    let out = Command::new(POLYPATH)
        .args(["client", "--connect", &server.addr.to_string(), "--ca"])
        .arg(&server.cert)
        .args(["--server-name", "example.org", "--size", "1kB"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the client accepted a wrong name");
    // The server's --once connection is over but the server still waits (--read-timeout)
    // for the client's close: kill it then, waiting (bounded) for its log of the close.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let file = loop {
        let file = std::fs::read_dir(&qlog_dir)
            .ok()
            .and_then(|mut d| d.find_map(|e| e.ok().map(|e| e.path())));
        if let Some(file) = file
            && std::fs::read(&file)
                .is_ok_and(|b| String::from_utf8_lossy(&b).contains("quic:connection_closed"))
        {
            break file;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no connection_closed in the server's qlog within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server exited early"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let records = polypath_quic::qlog::parse_json_seq(&std::fs::read(&file).unwrap())
        .unwrap_or_else(|e| panic!("{} after SIGKILL: {e}", file.display()));
    let names: Vec<&str> = records.iter().filter_map(|r| r["name"].as_str()).collect();
    for name in [
        "quic:connection_started",
        "quic:packet_received",
        "quic:packet_sent",
        "quic:connection_closed",
    ] {
        assert!(names.contains(&name), "{name} missing: {names:?}");
    }
}

fn path_bytes(summary: &Value) -> Vec<u64> {
    summary["sender"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["bytes"].as_u64().unwrap())
        .collect()
}

/// A 20 MB upload from 127.0.0.1 and 127.0.0.2 under weighted round robin with the given
/// weight options; returns the client's summary after checking it and the server's verdict.
fn wrr_two_path_upload(name: &str, weight_args: &[&str]) -> Value {
    let dir = scratch(name);
    let server = Server::start(&dir, &["--scheduler", "wrr"]);
    let mut args = vec![
        "--size",
        "20MB",
        "--local",
        "127.0.0.1:0",
        "--local",
        "127.0.0.2:0",
        "--scheduler",
        "wrr",
    ];
    args.extend_from_slice(weight_args);
    let summary = client(&server, server.addr, &args);
    check_summary(&summary, 20_000_000);
    assert_eq!(server.finish()["verified"], true);
    summary
}

#[test]
fn two_paths_from_two_local_addresses_both_carry_data() {
    let summary = wrr_two_path_upload("twopaths", &[]);
    eprintln!("{summary:#}");
    assert_eq!(summary["multipath"], true);
    let paths = summary["sender"]["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2);
    assert!(
        paths[0]["local"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:")
    );
    assert!(
        paths[1]["local"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.2:")
    );
    // Weighted round robin with its default weights (1 each) waits for the path whose turn
    // it is, so both paths carry about half.
    let bytes = path_bytes(&summary);
    eprintln!("bytes per path: {bytes:?}");
    for b in bytes {
        assert!(b > 6_000_000, "a path carried only {b} bytes: {summary}");
    }
}

/// Path 1's share of the bytes of [`wrr_two_path_upload`].
fn wrr_share_of_path_1(name: &str, weight_args: &[&str]) -> f64 {
    let bytes = path_bytes(&wrr_two_path_upload(name, weight_args));
    let share = bytes[1] as f64 / (bytes[0] + bytes[1]) as f64;
    eprintln!("path bytes {bytes:?}: share of path 1 {share:.3} ({weight_args:?})");
    share
}

#[test]
fn weights_set_the_split_of_weighted_round_robin() {
    let share = wrr_share_of_path_1("weights", &["--weights", "1,3"]);
    assert!(
        (0.6..0.9).contains(&share),
        "path 1 carried {share} of the data"
    );
}

/// `--weights-at` re-weights the running connection: weights 3,1 at the start, changed to
/// 1,3 as soon as the connection is up, so the split is the second one's (without the
/// change path 1 would carry about a quarter).
#[test]
fn weights_change_on_a_running_connection() {
    let summary = wrr_two_path_upload(
        "weights-at",
        &[
            "--weights",
            "3,1",
            "--weights-at",
            "0s=1,3",
            "--weights-at",
            "1h=3,1",
        ],
    );
    let bytes = path_bytes(&summary);
    let share = bytes[1] as f64 / (bytes[0] + bytes[1]) as f64;
    assert!(
        (0.6..0.9).contains(&share),
        "path 1 carried {share} of the data"
    );
    // The summary says which changes were applied: the first at once, not the one due
    // after the transfer.
    let changes = summary["weight_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{summary}");
    assert_eq!(
        (
            changes[0]["weights"].as_str(),
            changes[0]["applied"].as_bool()
        ),
        (Some("1,3"), Some(true))
    );
    assert_eq!(changes[0]["path_bytes_sent"].as_array().unwrap().len(), 2);
    assert_eq!(
        (
            changes[1]["due_s"].as_f64(),
            changes[1]["applied"].as_bool()
        ),
        (Some(3600.0), Some(false))
    );
}

/// Runs `polypath client` with `args`, expecting it to fail; returns its standard error.
fn failing_client(args: &[&str]) -> String {
    let out = Command::new(POLYPATH)
        .arg("client")
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "client succeeded: {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_closed_port_is_reported_by_its_address_without_waiting() {
    // A port nothing listens on: the kernel answers the Initial with ICMP port
    // unreachable, and the client says so instead of waiting out its handshake timeout
    // (an hour here, so only the ICMP report can end the attempt).
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let connect = format!("127.0.0.1:{port}");
    let stderr = failing_client(&[
        "--connect",
        &connect,
        "--insecure",
        "--handshake-timeout",
        "1h",
    ]);
    assert!(stderr.contains(&connect), "{stderr}");
    assert!(stderr.contains("port unreachable"), "{stderr}");
}

#[test]
fn a_silent_address_gives_up_after_the_handshake_timeout() {
    // A socket that reads and never answers: no ICMP, so the handshake timeout ends it.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let connect = silent.local_addr().unwrap().to_string();
    let stderr = failing_client(&[
        "--connect",
        &connect,
        "--insecure",
        "--handshake-timeout",
        "300ms",
    ]);
    assert!(stderr.contains(&connect), "{stderr}");
    assert!(stderr.contains("no handshake within 300ms"), "{stderr}");
    let mut buf = [0u8; 1500];
    silent.set_nonblocking(true).unwrap();
    assert!(silent.recv(&mut buf).is_ok(), "the client sent nothing");
}

#[test]
fn host_names_are_resolved() {
    let dir = scratch("hostname");
    let server = Server::start(&dir, &[]);
    // `localhost` resolves (IPv4 first, where the server listens).
    let summary = client(
        &server,
        format!("localhost:{}", server.addr.port()),
        &["--size", "1MB"],
    );
    check_summary(&summary, 1_000_000);
    assert_eq!(server.finish()["verified"], true);
    let stderr = failing_client(&["--connect", "no-such-host.invalid:4433", "--insecure"]);
    assert!(
        stderr.contains("cannot resolve \"no-such-host.invalid\""),
        "{stderr}"
    );
    let stderr = failing_client(&["--connect", "localhost", "--insecure"]);
    assert!(stderr.contains("expected HOST:PORT"), "{stderr}");
}

#[test]
fn bench_loopback_reports_both_stacks_and_the_two_path_run() {
    let out = Command::new(POLYPATH)
        .args([
            "bench", "loopback", "--bytes", "5MB", "--paths", "2", "--repeat", "3", "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{report:#}");
    assert_eq!(report["size_bytes"], 5_000_000u64);
    assert_eq!(report["rounds"], 3);
    // Every stack ran every round; the median is the middle run, within the range.
    let goodputs = |k: &str| -> Vec<f64> {
        let runs = report[k]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3, "{k}");
        let mut g: Vec<f64> = runs
            .iter()
            .map(|r| r["goodput_mbps"].as_f64().unwrap())
            .collect();
        g.sort_by(f64::total_cmp);
        assert!(g[0] > 0.0);
        assert_eq!(report[k]["median_mbps"].as_f64().unwrap(), g[1], "{k}");
        assert_eq!(report[k]["min_mbps"].as_f64().unwrap(), g[0], "{k}");
        assert_eq!(report[k]["max_mbps"].as_f64().unwrap(), g[2], "{k}");
        g
    };
    let (polypath, noq) = (goodputs("polypath"), goodputs("noq"));
    goodputs("polypath_two_paths");
    let ratio = &report["ratio"];
    assert!((ratio["of_medians"].as_f64().unwrap() - polypath[1] / noq[1]).abs() < 1e-9);
    let (lo, hi) = (
        ratio["round_min"].as_f64().unwrap(),
        ratio["round_max"].as_f64().unwrap(),
    );
    assert!(lo <= hi && lo > 0.0, "{ratio}");
    for run in report["polypath_two_paths"]["runs"].as_array().unwrap() {
        let bytes: u64 = run["path_bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .sum();
        assert!(bytes >= 5_000_000);
    }
}

/// A `polypath relay` process (its `addr` is where clients send), killed when dropped.
struct RelayProcess(Announced);

impl RelayProcess {
    /// Starts `polypath relay --to to` with `extra` arguments.
    fn start(to: SocketAddr, extra: &[&str]) -> RelayProcess {
        RelayProcess(spawn_announced(
            Command::new(POLYPATH)
                .args(["relay", "--to", &to.to_string()])
                .args(extra),
            "relaying ",
        ))
    }
}

impl std::ops::Deref for RelayProcess {
    type Target = Announced;
    fn deref(&self) -> &Announced {
        &self.0
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
    }
}

#[test]
fn relay_subcommand_loses_datagrams_and_keylog_file_gets_secrets() {
    let dir = scratch("relaycmd");
    let server = Server::start(&dir, &[]);
    let mut relay = RelayProcess::start(
        server.addr,
        &["--loss=0.02", "--seed=3", "--delay=2ms", "--duration=6"],
    );
    let relay_addr = relay.addr;
    let keylog = dir.join("keys.log");
    let out = Command::new(POLYPATH)
        .args(["client", "--connect", &relay_addr.to_string(), "--pin"])
        .arg(&server.cert)
        .args(["--size", "5MB"])
        .env("SSLKEYLOGFILE", &keylog)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_summary(&summary, 5_000_000);
    // 2 ms each way: no round trip measures less than 4 ms, nor does their average.
    let srtt = summary["sender"]["srtt_ms"].as_f64();
    assert!(srtt >= Some(4.0), "{summary}");
    assert_eq!(server.finish()["verified"], true);
    let mut line = String::new();
    relay.0.stdout.read_line(&mut line).unwrap();
    assert!(relay.0.child.wait().unwrap().success());
    let stats: Value = serde_json::from_str(&line).unwrap();
    eprintln!("relay: {stats}");
    let (forwarded, dropped) = (
        stats["forwarded"].as_u64().unwrap(),
        stats["dropped"].as_u64().unwrap(),
    );
    assert!(forwarded > 3_000 && dropped > 0, "{stats}");
    // NSS key log format, which Wireshark reads to decrypt the capture.
    let keys = std::fs::read_to_string(&keylog).unwrap();
    for label in ["CLIENT_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0"] {
        assert!(keys.contains(label), "{label} missing from {keys}");
    }
}

#[test]
fn fullmesh_path_manager_opens_the_second_path_itself() {
    let dir = scratch("fullmesh");
    let server = Server::start(&dir, &["--scheduler", "wrr"]);
    let summary = client(
        &server,
        server.addr,
        &[
            "--size",
            "10MB",
            "--local",
            "127.0.0.1:0",
            "--local",
            "127.0.0.2:0",
            "--path-manager",
            "fullmesh",
            "--scheduler",
            "wrr",
        ],
    );
    check_summary(&summary, 10_000_000);
    let paths = summary["sender"]["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2, "{summary}");
    assert!(
        paths[1]["local"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.2:")
    );
    assert!(path_bytes(&summary)[1] > 1_000_000, "{summary}");
    assert_eq!(server.finish()["verified"], true);
}
