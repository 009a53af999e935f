//! The QUIC Interop Runner's endpoint contract, checked on loopback: runs polypath through
//! `interop/runner/run_endpoint.sh` (the script the runner's container starts) with the
//! directories, port and binary overridden by environment variables, against a noq peer
//! written here, in both directions, and checks each case the way the runner does
//! (downloaded files identical to the served ones, one handshake, a Retry seen, a key
//! update seen, ChaCha20 agreed, IPv6 addresses, a second handshake resumed without a
//! certificate, 0-RTT packets with stream data, ...). A case the script does not support
//! ends with status 127 and is reported as unsupported.
//!
//! The runner judges from a pcap of the network and the endpoints' logs; here the
//! observations come from the noq side (its own counters and a socket that counts Retry
//! packets), from polypath's JSON output and from polypath's qlog files.
//!
//! `connectionmigration` is the runner README's case: the server offers a preferred address
//! (RFC 9000 section 9.6) and the client moves there. It runs polypath against a noq server
//! (a preferred address on a second port; the datagrams noq receives there are counted)
//! and polypath against polypath (127.0.0.2; the server's report and qlog show it moved
//! and received most packets after); noq's client does not move to a preferred address.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use noq::crypto::rustls::QuicServerConfig;
use polypath_quic::crypto::{
    CipherSuites, ServerVerification, client_config_with, self_signed_certificate,
    server_config_with,
};
use serde_json::Value;

use crate::cases::{REBIND_AFTER_BYTES, RESUMPTION_ONE_WAY_DELAY};
use crate::hq::{self, Site};
use crate::nat::{Nat, NatPlan, RebindPlan, Rebinding};
use crate::noq_socket::MultiAddrSocket;
use crate::peer::{CaseError, noq_client_crypto};
use crate::report::Stack;

/// The runner's test cases the harness knows, in the order it runs them: those the script
/// supports, those it refuses (127), and the multipath proposal's cases.
pub const CASES: [&str; 19] = [
    "handshake",
    "transfer",
    "multiplexing",
    "retry",
    "chacha20",
    "keyupdate",
    "ipv6",
    "resumption",
    "zerortt",
    "http3",
    "v2",
    "rebind-port",
    "rebind-addr",
    "connectionmigration",
    "ecn",
    "multipath-handshake",
    "multipath-transfer",
    "multipath-abandon",
    "multipath-backup",
];

/// How one case went in one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every check passed; what was measured.
    Ok(String),
    /// A check failed; why.
    Fail(String),
    /// The script exited with 127.
    Unsupported,
    /// The peer stack cannot play the case (noq has no QUIC v2); why.
    PeerUnsupported(String),
}

impl Outcome {
    /// `ok`, `fail` or `unsupported(127)`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Ok(_) => "ok",
            Outcome::Fail(_) => "fail",
            Outcome::Unsupported => "unsupported(127)",
            Outcome::PeerUnsupported(_) => "unsupported(peer)",
        }
    }
}

/// One row of the harness's table.
#[derive(Debug, Clone)]
pub struct Row {
    /// The runner's test case.
    pub case: String,
    /// The stack playing the client.
    pub client: Stack,
    /// The stack playing the server.
    pub server: Stack,
    /// How it went.
    pub outcome: Outcome,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    /// `run_endpoint.sh`.
    pub script: PathBuf,
    /// The `polypath` binary the script runs.
    pub polypath: PathBuf,
    /// The cases (see [`CASES`]).
    pub cases: Vec<String>,
    /// A run of the script (one side of one case) that takes longer is killed and fails.
    pub timeout: Duration,
    /// Where each case's directories go (removed after a case that passed).
    pub work_dir: PathBuf,
}

impl HarnessOptions {
    /// The script and binary of this checkout: `interop/runner/run_endpoint.sh` beside the
    /// crates, and `polypath` in the target directory the running executable is in (or
    /// `$POLYPATH_BIN`).
    pub fn for_this_checkout() -> HarnessOptions {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let polypath = std::env::var_os("POLYPATH_BIN")
            .map(PathBuf::from)
            .or_else(|| {
                let exe = std::env::current_exe().ok()?;
                // target/<profile>/polypath-interop or target/<profile>/deps/matrix-...
                exe.ancestors()
                    .skip(1)
                    .take(2)
                    .map(|d| d.join("polypath"))
                    .find(|p| p.is_file())
            })
            .unwrap_or_else(|| root.join("target/debug/polypath"));
        HarnessOptions {
            script: root.join("interop/runner/run_endpoint.sh"),
            polypath,
            cases: CASES.iter().map(|c| c.to_string()).collect(),
            timeout: Duration::from_secs(60),
            work_dir: std::env::temp_dir().join(format!("pp-runner-{}", std::process::id())),
        }
    }
}

/// The table: one line per case, a column per direction.
pub fn table(rows: &[Row]) -> String {
    let mut by_case: BTreeMap<usize, (String, Vec<&Row>)> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        let first = rows.iter().position(|r| r.case == row.case).unwrap_or(i);
        by_case
            .entry(first)
            .or_insert_with(|| (row.case.clone(), Vec::new()))
            .1
            .push(row);
    }
    let mut out = format!(
        "{:<21} {:<18} {:<18} {:<18}\n",
        "case", "polypath->noq", "noq->polypath", "polypath->polypath"
    );
    let mut details = String::new();
    for (case, case_rows) in by_case.values() {
        let cell = |client: Stack, server: Stack| {
            case_rows
                .iter()
                .find(|r| r.client == client && r.server == server)
                .map_or("-", |r| r.outcome.label())
        };
        out.push_str(&format!(
            "{case:<21} {:<18} {:<18} {:<18}\n",
            cell(Stack::Polypath, Stack::Noq),
            cell(Stack::Noq, Stack::Polypath),
            cell(Stack::Polypath, Stack::Polypath)
        ));
        for r in case_rows {
            if let Outcome::Ok(d) | Outcome::Fail(d) | Outcome::PeerUnsupported(d) = &r.outcome {
                details.push_str(&format!(
                    "  {case} ({} client, {} server): {d}\n",
                    r.client, r.server
                ));
            }
        }
    }
    let count = |label: &str| rows.iter().filter(|r| r.outcome.label() == label).count();
    out.push_str(&format!(
        "{} ok, {} fail, {} unsupported(127), {} unsupported(peer)\n{details}",
        count("ok"),
        count("fail"),
        count("unsupported(127)"),
        count("unsupported(peer)")
    ));
    out
}

/// Runs every case of `options` in both directions, one after the other.
pub async fn run_harness(options: &HarnessOptions) -> Vec<Row> {
    let mut rows = Vec::new();
    for case in &options.cases {
        // QUIC v2 needs a peer that speaks it, and noq's client does not move to a
        // preferred address: polypath plays both sides too.
        let directions: &[(Stack, Stack)] = if case == "v2" || case == "connectionmigration" {
            &[
                (Stack::Polypath, Stack::Noq),
                (Stack::Noq, Stack::Polypath),
                (Stack::Polypath, Stack::Polypath),
            ]
        } else {
            &crate::DIRECTIONS
        };
        for &(client, server) in directions {
            let dir = options.work_dir.join(format!("{case}-{client}-{server}"));
            let result = if case == "v2" && (client == Stack::Noq || server == Stack::Noq) {
                Err(Outcome::PeerUnsupported(
                    "noq 1.4 speaks QUIC version 1 only".into(),
                ))
            } else if case == "connectionmigration" && client == Stack::Noq {
                Err(Outcome::PeerUnsupported(
                    "noq 1.4's client does not move to a server's preferred address (it only \
                     keeps its connection ID)"
                        .into(),
                ))
            } else if client == server {
                polypath_pair(options, case, &dir)
                    .await
                    .map_err(Outcome::Fail)
            } else {
                run_case(options, case, client, &dir)
                    .await
                    .map_err(Outcome::Fail)
            };
            let outcome = match result {
                Ok(Some(detail)) => Outcome::Ok(detail),
                Ok(None) => Outcome::Unsupported,
                Err(outcome) => outcome,
            };
            if !matches!(outcome, Outcome::Fail(_)) {
                let _ = std::fs::remove_dir_all(&dir);
            }
            rows.push(Row {
                case: case.clone(),
                client,
                server,
                outcome,
            });
        }
    }
    let _ = std::fs::remove_dir(&options.work_dir);
    rows
}

/// The files a case serves: (request path, size).
fn case_files(case: &str) -> Vec<(String, usize)> {
    let sized = |sizes: &[usize]| {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| (format!("/file{i}"), s))
            .collect()
    };
    match case {
        "handshake" | "retry" | "chacha20" | "ipv6" | "multipath-handshake" => sized(&[1000]),
        "transfer" | "ecn" => sized(&[1_000_000, 3_000_000, 5_000_000]),
        // Long enough for both rebindings of [`REBIND_AFTER_BYTES`] and more after them.
        "rebind-port" | "rebind-addr" => sized(&[10_000_000]),
        // The runner's size: the client moves to the preferred address early in it.
        "connectionmigration" => sized(&[2_000_000]),
        "multiplexing" => (0..200)
            .map(|i| (format!("/m{i:03}"), 1000 + i * 37))
            .collect(),
        // Long enough for a key update (polypath may start one three PTOs after the
        // previous keys were acknowledged).
        "keyupdate" => sized(&[30_000_000]),
        // The first file on the first connection, the others on the resumed one.
        "resumption" | "zerortt" => sized(&[5000, 10_000, 20_000]),
        "multipath-transfer" | "multipath-abandon" | "multipath-backup" => sized(&[20_000_000]),
        _ => sized(&[1000]),
    }
}

/// What the case needs of the noq peer.
#[derive(Debug, Clone, Copy, Default)]
struct PeerSetup {
    ipv6: bool,
    retry: bool,
    chacha20: bool,
    key_update: bool,
    multipath: bool,
    /// The client reaches the server through a NAT that rebinds ([`crate::nat`]).
    rebind: Option<Rebinding>,
    /// Two connections, the second resuming the first's TLS session.
    resumption: bool,
    /// With `resumption`: the second connection sends its requests in 0-RTT.
    zero_rtt: bool,
}

fn peer_setup(case: &str) -> PeerSetup {
    PeerSetup {
        ipv6: case == "ipv6",
        retry: case == "retry",
        chacha20: case == "chacha20",
        key_update: case == "keyupdate",
        multipath: case.starts_with("multipath-"),
        rebind: match case {
            "rebind-port" => Some(Rebinding::Port),
            "rebind-addr" => Some(Rebinding::Address),
            _ => None,
        },
        resumption: case == "resumption" || case == "zerortt",
        zero_rtt: case == "zerortt",
    }
}

/// The certificate the polypath server loads from CERTS_DIR (and the noq server uses too).
struct Certs {
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn write_certs(dir: &Path) -> Result<Certs, CaseError> {
    let names = ["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    let cert = self_signed_certificate(&names).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let pem_cert = pem_block("CERTIFICATE", &cert.chain[0]);
    let pem_key = pem_block("PRIVATE KEY", cert.key.secret_der());
    std::fs::write(dir.join("cert.pem"), pem_cert).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("priv.key"), pem_key).map_err(|e| e.to_string())?;
    Ok(Certs {
        chain: cert.chain,
        key: cert.key,
    })
}

fn pem_block(label: &str, der: &[u8]) -> String {
    pem::encode(&pem::Pem::new(label, der.to_vec()))
}

/// The script's environment for `role` in `dir`.
fn script_command(options: &HarnessOptions, case: &str, role: &str, dir: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(&options.script)
        .env("ROLE", role)
        .env("TESTCASE", case)
        .env("SSLKEYLOGFILE", dir.join("keys.log"))
        .env("QLOGDIR", dir.join("qlog"))
        .env("WWW_DIR", dir.join("site/www"))
        .env("DOWNLOADS_DIR", dir.join("downloads"))
        .env("CERTS_DIR", dir.join("certs"))
        .env("POLYPATH", &options.polypath)
        .env("SETUP", "")
        .env("WAIT_FOR", "")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if case.starts_with("multipath-") {
        cmd.env("FIRST_LOCAL", "127.0.0.1:0")
            .env("SECOND_LOCAL", "127.0.0.2:0");
    }
    cmd
}

/// The script as the client of `case`, asking `server` (`https://ADDR/PATH`, IPv6 in
/// brackets) for every file of `site` (REQUESTS).
fn client_command(
    options: &HarnessOptions,
    case: &str,
    dir: &Path,
    site: &Site,
    server: SocketAddr,
) -> Command {
    let requests: Vec<String> = site
        .paths()
        .iter()
        .map(|p| format!("https://{server}{p}"))
        .collect();
    let mut cmd = script_command(options, case, "client", dir);
    cmd.env("REQUESTS", requests.join(" "));
    cmd
}

/// A running script, killed when dropped.
struct Script {
    child: Child,
    stdout: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// The thread forwarding standard output; it ends when the script's output closes.
    stdout_reader: Option<std::thread::JoinHandle<()>>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Script {
    fn spawn(mut cmd: Command) -> Result<Script, CaseError> {
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run the script: {e}"))?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let stdout_reader = child.stdout.take().map(|out| {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            })
        });
        let err = child.stderr.take();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(err) = err {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    text.push_str(&line);
                    text.push('\n');
                }
            }
            text
        });
        Ok(Script {
            child,
            stdout: rx,
            stdout_reader,
            stderr: Some(stderr),
        })
    }

    /// Waits for the exit status (polling, so that the runtime keeps serving the noq side).
    async fn wait(&mut self, timeout: Duration) -> Result<i32, CaseError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Ok(status.code().unwrap_or(-1));
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return Err(format!("the script ran longer than {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The next line of standard output, if one comes within `timeout`.
    async fn line(&mut self, timeout: Duration) -> Option<String> {
        tokio::time::timeout(timeout, self.stdout.recv())
            .await
            .ok()
            .flatten()
    }

    /// Everything printed on standard output so far, and standard error (once it ended).
    fn output(mut self) -> (String, String) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The script execs polypath, so its output closes when it ends: every line is
        // forwarded once the reader thread has ended.
        if let Some(reader) = self.stdout_reader.take() {
            let _ = reader.join();
        }
        let mut out = String::new();
        while let Ok(line) = self.stdout.try_recv() {
            out.push_str(&line);
            out.push('\n');
        }
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        (out, err)
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the script as a server and waits for its `listening on ADDR` line; `Ok(None)`
/// if it exits with 127 (a case it does not support).
async fn start_server(
    options: &HarnessOptions,
    cmd: Command,
) -> Result<Option<(Script, SocketAddr)>, CaseError> {
    let mut script = Script::spawn(cmd)?;
    let first = script.line(options.timeout).await;
    let addr = first
        .as_deref()
        .and_then(|l| l.strip_prefix("listening on "))
        .and_then(|a| a.parse::<SocketAddr>().ok());
    if let Some(addr) = addr {
        return Ok(Some((script, addr)));
    }
    let status = script.wait(Duration::from_secs(5)).await;
    let (_, stderr) = script.output();
    match status {
        Ok(127) => Ok(None),
        other => Err(format!(
            "the server did not start ({other:?}): {}",
            last_lines(&stderr)
        )),
    }
}

/// Runs one case in one direction; `Ok(None)` if unsupported.
async fn run_case(
    options: &HarnessOptions,
    case: &str,
    client: Stack,
    dir: &Path,
) -> Result<Option<String>, CaseError> {
    let _ = std::fs::remove_dir_all(dir);
    let site = Site::create(dir.join("site"), &case_files(case))?;
    let certs = write_certs(&dir.join("certs"))?;
    let setup = peer_setup(case);
    let result = match client {
        Stack::Polypath => polypath_client(options, case, dir, &site, &certs, setup).await,
        Stack::Noq => noq_client(options, case, dir, &site, &certs, setup).await,
    };
    // The site's files are compared; it is removed with its directory.
    drop(site);
    result
}

fn loopback(setup: PeerSetup) -> IpAddr {
    if setup.ipv6 {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    }
}

/// What the noq server saw.
#[derive(Debug, Default)]
struct NoqServerLog {
    handshakes: u64,
    retries_sent: u64,
    peers: Vec<SocketAddr>,
    /// The peer's address of each connection's first path when it ended.
    last_peers: Vec<Option<SocketAddr>>,
    served: Vec<polypath_cli::hq::Served>,
    /// Connection-wide frame counts (sent, received) of each connection.
    frames: Vec<(noq::FrameStats, noq::FrameStats)>,
    /// Per path of each connection: (path ID, UDP bytes received).
    path_rx: Vec<Vec<(u32, u64)>>,
    /// Paths whose local status the server set to backup because the client did.
    mirrored_backup: u64,
}

/// Makes a noq connection honour its peer's path status. noq schedules by a path's local
/// status only and reports the peer's PATH_STATUS_AVAILABLE / PATH_STATUS_BACKUP as an
/// event, leaving it "up to the application to update the local status" (noq's
/// `PathEvent::RemoteStatus`); the harness's noq server is that application. Counts in
/// `backups` the paths it set to backup.
fn mirror_peer_status(
    conn: &noq::Connection,
    backups: Arc<std::sync::atomic::AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let conn = conn.clone();
    let events = std::sync::Mutex::new(conn.path_events());
    tokio::spawn(async move {
        while let Ok(event) = crate::peer::next_noq_event(&events).await {
            if let noq::PathEvent::RemoteStatus { id, status, .. } = event
                && let Some(path) = conn.path(id)
                && path.set_status(status).is_ok()
                && status == noq::PathStatus::Backup
            {
                backups.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

fn noq_transport(setup: PeerSetup) -> Arc<noq::TransportConfig> {
    let mut t = noq::TransportConfig::default();
    t.max_concurrent_bidi_streams(1000u32.into());
    if setup.multipath {
        t.max_concurrent_multipath_paths(crate::peer::MAX_PATHS);
    }
    Arc::new(t)
}

/// polypath client (the script) against a noq server.
async fn polypath_client(
    options: &HarnessOptions,
    case: &str,
    dir: &Path,
    site: &Site,
    certs: &Certs,
    setup: PeerSetup,
) -> Result<Option<String>, CaseError> {
    let suites = if setup.chacha20 {
        CipherSuites::ChaCha20Only
    } else {
        CipherSuites::All
    };
    let mut tls = server_config_with(
        certs.chain.clone(),
        certs.key.clone_key(),
        vec![hq::ALPN.to_vec()],
        false,
        suites,
    )
    .map_err(|e| e.to_string())?;
    if setup.resumption {
        let mut with_tickets = Arc::unwrap_or_clone(tls);
        if setup.zero_rtt {
            polypath_quic::crypto::enable_zero_rtt(&mut with_tickets);
        } else {
            polypath_quic::crypto::enable_session_tickets(&mut with_tickets);
        }
        tls = Arc::new(with_tickets);
    }
    let initial = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(|s| s.quic_suite())
        .ok_or("no QUIC AES-128-GCM suite")?;
    let crypto = QuicServerConfig::with_initial(tls, initial).map_err(|e| e.to_string())?;
    let mut config = noq::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(noq_transport(setup));
    // connectionmigration: noq's server advertises a preferred address, a second socket on
    // another port of the same IP, and counts the datagrams each socket receives. (Another
    // IP cannot work: noq 1.4's server drops a packet that arrives on a local IP other than
    // its path's, and it names only the IP of the socket to send from, so its answers
    // leave from the first socket.)
    let (endpoint, preferred) = if case == "connectionmigration" {
        let ip = loopback(setup);
        let socket = MultiAddrSocket::bind(&[SocketAddr::new(ip, 0), SocketAddr::new(ip, 0)])
            .map_err(|e| format!("noq server sockets: {e}"))?;
        let SocketAddr::V4(preferred) = socket.local_addrs()[1] else {
            return Err("the preferred address is IPv4 here".into());
        };
        config.preferred_address_v4(Some(preferred));
        let received = socket.received_by_socket();
        let endpoint = noq::Endpoint::new_with_abstract_socket(
            noq::EndpointConfig::default(),
            Some(config),
            Box::new(socket),
            Arc::new(noq::TokioRuntime),
        )
        .map_err(|e| format!("noq server: {e}"))?;
        (endpoint, Some((preferred, received)))
    } else {
        let endpoint = noq::Endpoint::server(config, SocketAddr::new(loopback(setup), 0))
            .map_err(|e| format!("noq server: {e}"))?;
        (endpoint, None)
    };
    let addr = endpoint.local_addr().map_err(|e| e.to_string())?;
    let www = site.www();
    let server = {
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let mut log = NoqServerLog::default();
            while let Some(incoming) = endpoint.accept().await {
                if setup.retry && !incoming.remote_address_validated() {
                    if incoming.retry().is_ok() {
                        log.retries_sent += 1;
                    }
                    continue;
                }
                // The connection before its handshake completes (a server's 0.5-RTT
                // handle), so that the path-status mirror subscribes to the path events
                // before any can come (noq keeps none for late subscribers: a client that
                // marks its path backup right after the handshake was missed in one CI
                // run); then the handshake.
                let Ok(connecting) = incoming.accept() else {
                    continue;
                };
                let Ok((conn, _)) = connecting.into_0rtt() else {
                    continue;
                };
                let backups = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let mirror = setup
                    .multipath
                    .then(|| mirror_peer_status(&conn, backups.clone()));
                if conn.handshake_confirmed().await.is_err() {
                    continue;
                }
                log.handshakes += 1;
                if let Some(peer) = conn
                    .path(noq::PathId::ZERO)
                    .and_then(|p| p.remote_address().ok())
                {
                    log.peers.push(peer);
                }
                if let Ok(served) = hq::noq_serve(&conn, &www).await {
                    log.served.push(served);
                }
                if let Some(task) = mirror {
                    task.abort();
                }
                log.mirrored_backup += backups.load(Ordering::Relaxed);
                log.last_peers.push(
                    conn.path(noq::PathId::ZERO)
                        .and_then(|p| p.remote_address().ok()),
                );
                let s = conn.stats();
                log.frames.push((s.frame_tx, s.frame_rx));
                log.path_rx.push(
                    (0..2 * crate::peer::MAX_PATHS)
                        .filter_map(|i| {
                            conn.path_stats(noq::PathId::from(i))
                                .map(|p| (i, p.udp_rx.bytes))
                        })
                        .collect(),
                );
            }
            log
        })
    };
    let nat = start_nat(setup, addr).await?;
    // The client asks the NAT's front, if there is one.
    let target = nat.as_ref().map_or(addr, Nat::front);
    let mut script = Script::spawn(client_command(options, case, dir, site, target))?;
    let status = script.wait(options.timeout).await;
    let (stdout, stderr) = script.output();
    // The client closed its connection: the server's connection ends; then the endpoint.
    tokio::time::sleep(Duration::from_millis(200)).await;
    endpoint.close(0u32.into(), b"");
    let log = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .map_err(|_| "the noq server did not end".to_string())?
        .map_err(|e| format!("the noq server failed: {e}"))?;
    let status = status?;
    if status == 127 {
        return Ok(None);
    }
    if status != 0 {
        return Err(format!(
            "the client exited with {status}: {}",
            last_lines(&stderr)
        ));
    }
    let summary: Value = serde_json::from_str(&stdout)
        .map_err(|e| format!("the client's summary is not JSON ({e}): {stdout}"))?;
    let bytes = site.check_downloads(&dir.join("downloads"))?;
    let mut checks = vec![format!("{} files ({bytes} B) identical", site.files.len())];
    let expected_handshakes = if setup.resumption { 2 } else { 1 };
    if log.handshakes != expected_handshakes {
        return Err(format!(
            "{} handshakes, expected {expected_handshakes}",
            log.handshakes
        ));
    }
    checks.push(format!("{expected_handshakes} handshake(s)"));
    check_keylog(dir, &mut checks)?;
    let qlogs = check_qlog(dir)?;
    checks.push(format!("{} qlog file(s) parse", qlogs.len()));
    let connection = &summary["connection"];
    match case {
        "retry" => {
            let seen = qlogs.iter().any(|records| {
                records
                    .iter()
                    .any(|r| r["data"]["header"]["packet_type"] == "retry")
            });
            if log.retries_sent == 0 || !seen {
                return Err(format!(
                    "noq sent {} Retry; polypath's qlog shows one: {seen}",
                    log.retries_sent
                ));
            }
            checks.push(format!(
                "noq sent {} Retry, the client's qlog has it",
                log.retries_sent
            ));
        }
        "chacha20" => check_chacha(connection, &mut checks)?,
        "resumption" => {
            let first = &summary["earlier_connections"][0];
            check_resumed(first, connection, &mut checks)?;
            checks.push(check_no_certificate(&qlogs, "client", certs)?);
        }
        "zerortt" => {
            let first = &summary["earlier_connections"][0];
            check_resumed(first, connection, &mut checks)?;
            checks.push(check_zero_rtt(connection, &qlogs, "client", "packet_sent")?);
            checks.push(check_early_secret(dir)?);
        }
        "keyupdate" => check_key_updates(connection, "client", &mut checks)?,
        "ecn" => check_ecn(connection, "client", &mut checks)?,
        "ipv6" => {
            if !log.peers.iter().all(|p| p.is_ipv6()) {
                return Err(format!("noq saw the client at {:?}", log.peers));
            }
            checks.push(format!("noq saw the client at {:?}", log.peers));
        }
        "connectionmigration" => {
            let (preferred, received) = preferred.ok_or("no preferred address")?;
            let at_original = received[0].load(Ordering::Relaxed);
            let at_preferred = received[1].load(Ordering::Relaxed);
            checks.push(check_moved_to_preferred(connection, "client")?);
            // The client's packets after the handshake (its acknowledgments of the whole
            // download) went to the preferred address: most of them, since only the
            // handshake and the requests come before the move.
            if at_preferred <= at_original {
                return Err(format!(
                    "noq received {at_preferred} datagrams at its preferred address \
                     {preferred}, {at_original} at its original one"
                ));
            }
            checks.push(format!(
                "noq received {at_preferred} datagrams at its preferred address {preferred}, \
                 {at_original} at its original one"
            ));
        }
        "rebind-port" | "rebind-addr" => {
            let last = log.last_peers.first().copied().flatten();
            let challenges = log.frames.first().map_or(0, |(tx, _)| tx.path_challenge);
            checks.push(check_rebinding(nat.as_ref(), last)?);
            if challenges < REBIND_AFTER_BYTES.len() as u64 {
                return Err(format!(
                    "noq sent {challenges} PATH_CHALLENGE for {} new addresses",
                    REBIND_AFTER_BYTES.len()
                ));
            }
            checks.push(format!("noq sent {challenges} PATH_CHALLENGE"));
        }
        c if c.starts_with("multipath-") => {
            let noq = log
                .frames
                .first()
                .map(|(tx, rx)| {
                    format!(
                        "noq sent PATH_ABANDON {} received PATH_ABANDON {} PATH_STATUS_BACKUP {} \
                         (its application set {} path(s) to backup in turn)",
                        tx.path_abandon,
                        rx.path_abandon,
                        rx.path_status_backup,
                        log.mirrored_backup
                    )
                })
                .unwrap_or_default();
            checks.push(check_multipath(c, &qlogs, "client").map_err(|e| format!("{e}; {noq}"))?);
            checks.push(noq);
        }
        _ => {}
    }
    Ok(Some(checks.join("; ")))
}

/// The polypath client against the polypath server, both through the script (the v2 case:
/// noq has no QUIC v2). Checked from both sides' qlogs as the runner checks its pcap: the
/// client's first Initial in version 1, everything the server sent in version 2, and the
/// client's Handshake packets in version 2.
async fn polypath_pair(
    options: &HarnessOptions,
    case: &str,
    dir: &Path,
) -> Result<Option<String>, CaseError> {
    let _ = std::fs::remove_dir_all(dir);
    let site = Site::create(dir.join("site"), &case_files(case))?;
    write_certs(&dir.join("certs"))?;
    let server_dir = dir.join("server");
    let mut cmd = script_command(options, case, "server", dir);
    cmd.env("LISTEN", "127.0.0.1:0")
        .env("QLOGDIR", server_dir.join("qlog"))
        .env("SSLKEYLOGFILE", server_dir.join("keys.log"));
    // connectionmigration: the server's preferred address, on a second loopback address.
    let preferred = if case == "connectionmigration" {
        let free = std::net::UdpSocket::bind("127.0.0.2:0")
            .and_then(|s| s.local_addr())
            .map_err(|e| format!("no free port on 127.0.0.2: {e}"))?;
        cmd.env("PREFERRED_ADDRESS", free.to_string());
        Some(free)
    } else {
        None
    };
    let Some((server, addr)) = start_server(options, cmd).await? else {
        return Ok(None);
    };
    let mut client = Script::spawn(client_command(options, case, dir, &site, addr))?;
    let status = client.wait(options.timeout).await;
    let (client_out, client_err) = client.output();
    // The server's connection ends with the client's; its qlog and report are then
    // complete.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (server_out, _) = server.output();
    let status = status?;
    if status == 127 {
        return Ok(None);
    }
    if status != 0 {
        return Err(format!(
            "the client exited with {status}: {}",
            last_lines(&client_err)
        ));
    }
    let bytes = site.check_downloads(&dir.join("downloads"))?;
    let mut checks = vec![format!("{} files ({bytes} B) identical", site.files.len())];
    check_keylog(dir, &mut checks)?;
    let client_qlogs = check_qlog(dir)?;
    let server_qlogs = check_qlog(&server_dir)?;
    if client_qlogs.len() != 1 || server_qlogs.len() != 1 {
        return Err(format!(
            "{} client and {} server connections, expected 1 each",
            client_qlogs.len(),
            server_qlogs.len()
        ));
    }
    match preferred {
        Some(preferred) => {
            let client: Value = serde_json::from_str(&client_out)
                .map_err(|e| format!("the client's summary is not JSON ({e}): {client_out}"))?;
            checks.push(check_moved_to_preferred(&client["connection"], "client")?);
            let served: Value = server_out
                .lines()
                .find(|l| l.starts_with('{'))
                .and_then(|l| serde_json::from_str(l).ok())
                .ok_or_else(|| format!("no report from the server: {server_out}"))?;
            checks.push(check_moved_to_preferred(&served["connection"], "server")?);
            checks.push(check_server_moved(&server_qlogs[0], preferred)?);
        }
        None => checks.push(check_v2(&client_qlogs[0], &server_qlogs[0])?),
    }
    Ok(Some(checks.join("; ")))
}

/// The connectionmigration check of one side's report: it moved to the server's preferred
/// address once (the client after validating it, the server once it sent from it).
fn check_moved_to_preferred(connection: &Value, side: &str) -> Result<String, CaseError> {
    let moved = connection["preferred_address_migrations"]
        .as_u64()
        .unwrap_or(0);
    if moved != 1 {
        return Err(format!(
            "the {side} moved to the preferred address {moved} times, expected once"
        ));
    }
    Ok(format!("the {side} moved to the preferred address"))
}

/// The connectionmigration check of the server's qlog: after the move, the client's
/// packets arrive at the preferred address (the server moves only once a non-probing
/// packet of the client arrived there and the path from there validated), and most of
/// the client's packets come after it.
fn check_server_moved(server: &[Value], preferred: SocketAddr) -> Result<String, CaseError> {
    let qlog = QlogView::new(server);
    let moved_at = qlog
        .events("migration_state_updated")
        .find(|r| {
            r["data"]["new"] == "migration_complete"
                && r["data"]["local"] == preferred.to_string().as_str()
        })
        .and_then(|r| r["time"].as_f64())
        .ok_or_else(|| format!("the server's qlog shows no move to {preferred}"))?;
    let received = |after: bool| {
        qlog.events("packet_received")
            .filter(|r| r["data"]["header"]["packet_type"] == "1RTT")
            .filter(|r| r["time"].as_f64().is_some_and(|t| (t > moved_at) == after))
            .count()
    };
    let (before, after) = (received(false), received(true));
    if after <= before {
        return Err(format!(
            "the server received {before} 1-RTT packets before moving to {preferred} and \
             {after} after"
        ));
    }
    Ok(format!(
        "the server moved to {preferred} at {moved_at:.1} ms: {before} 1-RTT packets \
         received before, {after} after"
    ))
}

/// The runner's v2 checks, from the client's and the server's qlog: (versions seen).
fn check_v2(client: &[Value], server: &[Value]) -> Result<String, CaseError> {
    const V1: &str = "00000001";
    const V2: &str = "6b3343cf";
    let versions = |records: &[Value], event: &'static str, packet_type: &str| -> Vec<String> {
        QlogView::new(records)
            .events(event)
            .filter(|r| r["data"]["header"]["packet_type"] == packet_type)
            .filter_map(|r| r["data"]["header"]["version"].as_str().map(str::to_owned))
            .collect()
    };
    let client_initials = versions(client, "packet_sent", "initial");
    if client_initials.first().map(String::as_str) != Some(V1) {
        return Err(format!(
            "the client's first Initial is not version 1: {client_initials:?}"
        ));
    }
    let server_sent: Vec<String> = ["initial", "handshake"]
        .iter()
        .flat_map(|t| versions(server, "packet_sent", t))
        .collect();
    if server_sent.is_empty() || server_sent.iter().any(|v| v != V2) {
        return Err(format!("the server sent long headers in {server_sent:?}"));
    }
    let client_handshake = versions(client, "packet_sent", "handshake");
    if client_handshake.is_empty() || client_handshake.iter().any(|v| v != V2) {
        return Err(format!(
            "the client's Handshake packets are in {client_handshake:?}"
        ));
    }
    Ok(format!(
        "client Initials {:?} -> v2; server's {} long header packets and the client's {} \
         Handshake packets in v2",
        client_initials
            .iter()
            .map(|v| if v == V1 { "v1" } else { "v2" })
            .collect::<Vec<_>>(),
        server_sent.len(),
        client_handshake.len()
    ))
}

/// noq client against the polypath server (the script).
async fn noq_client(
    options: &HarnessOptions,
    case: &str,
    dir: &Path,
    site: &Site,
    certs: &Certs,
    setup: PeerSetup,
) -> Result<Option<String>, CaseError> {
    let mut cmd = script_command(options, case, "server", dir);
    cmd.env("LISTEN", SocketAddr::new(loopback(setup), 0).to_string());
    let Some((mut script, addr)) = start_server(options, cmd).await? else {
        return Ok(None);
    };
    let suites = if setup.chacha20 {
        CipherSuites::ChaCha20Only
    } else {
        CipherSuites::All
    };
    let mut client_tls = client_config_with(
        vec![hq::ALPN.to_vec()],
        ServerVerification::Pinned(certs.chain[0].clone()),
        false,
        suites,
    )
    .map_err(|e| e.to_string())?;
    if setup.zero_rtt {
        let mut early = Arc::unwrap_or_clone(client_tls);
        polypath_quic::crypto::enable_early_data(&mut early);
        client_tls = Arc::new(early);
    }
    let mut locals = vec![SocketAddr::new(loopback(setup), 0)];
    if setup.multipath {
        locals.push(SocketAddr::new(crate::peer::SECOND_LOCAL, 0));
    }
    let socket = MultiAddrSocket::bind(&locals).map_err(|e| format!("noq client socket: {e}"))?;
    let retries = socket.retries_received();
    let second_local = socket.local_addrs().get(1).copied();
    let endpoint = noq::Endpoint::new_with_abstract_socket(
        noq::EndpointConfig::default(),
        None,
        Box::new(socket),
        Arc::new(noq::TokioRuntime),
    )
    .map_err(|e| format!("noq client endpoint: {e}"))?;
    let mut config = noq::ClientConfig::new(Arc::new(noq_client_crypto(&client_tls)?));
    config.transport_config(noq_transport(setup));
    let downloads = dir.join("downloads");
    let mut paths = site.paths();
    // resumption: the first file on a first connection, which gets the session ticket
    // (kept in the client configuration's session store) and is closed before the second
    // connection resumes the session for the other files.
    let first_paths = if setup.resumption {
        paths.drain(..1).collect()
    } else {
        Vec::new()
    };
    let nat = start_nat(setup, addr).await?;
    let target = nat.as_ref().map_or(addr, Nat::front);
    let fetched = async {
        if !first_paths.is_empty() {
            let conn = endpoint
                .connect_with(config.clone(), target, "localhost")
                .map_err(|e| format!("noq connect: {e}"))?
                .await
                .map_err(|e| format!("noq handshake (first connection): {e}"))?;
            hq::noq_fetch(&conn, &first_paths, &downloads)
                .await
                .map_err(|e| format!("first connection: {e}"))?;
            conn.close(0u32.into(), b"done");
            conn.closed().await;
        }
        let connecting = endpoint
            .connect_with(config, target, "localhost")
            .map_err(|e| format!("noq connect: {e}"))?;
        // zerortt: the requests leave in 0-RTT packets; whether the server accepted them
        // is known once the handshake completes.
        let (conn, zero_rtt) = if setup.zero_rtt {
            match connecting.into_0rtt() {
                Ok((conn, accepted)) => (conn, Some(accepted)),
                Err(_) => return Err("the noq client could not send 0-RTT (no ticket?)".into()),
            }
        } else {
            let conn = connecting
                .await
                .map_err(|e| format!("noq handshake: {e}"))?;
            (conn, None)
        };
        let key_updates = async {
            if !setup.key_update {
                return std::future::pending().await;
            }
            // noq ignores the request while it still holds the previous keys; asking
            // every 20 ms keeps updates coming during the transfer.
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                conn.force_key_update();
            }
        };
        let (mp_log, abandon) = noq_client_paths(case, &conn, second_local, addr).await?;
        // The downloads decide the end; the abandonment may never come (if the server
        // never uses the path, which the checks then report).
        let downloads_and_abandon = async {
            let fetch = async {
                if setup.zero_rtt {
                    hq::noq_fetch_early(&conn, &paths, &downloads).await
                } else {
                    hq::noq_fetch(&conn, &paths, &downloads).await
                }
            };
            tokio::pin!(fetch, abandon);
            let mut abandon_done = false;
            loop {
                tokio::select! {
                    r = &mut fetch => break r,
                    () = &mut abandon, if !abandon_done => abandon_done = true,
                }
            }
        };
        let result = tokio::select! {
            r = downloads_and_abandon => r,
            never = key_updates => never,
        };
        // What noq had received, for a failure's report.
        let stats = conn.stats();
        let received = format!(
            "noq received {} UDP datagrams ({} B), {} STREAM frames, sent {} MAX_STREAM_DATA",
            stats.udp_rx.datagrams,
            stats.udp_rx.bytes,
            stats.frame_rx.stream,
            stats.frame_tx.max_stream_data
        );
        let accepted = match zero_rtt {
            Some(accepted) => Some(accepted.await),
            None => None,
        };
        conn.close(0u32.into(), b"done");
        if accepted == Some(false) {
            return Err("the polypath server rejected the noq client's 0-RTT".into());
        }
        result
            .map(|files| {
                let stalls: u32 = files.iter().map(|f| f.stalls).sum();
                if stalls > 0 {
                    format!(
                        "{mp_log}; noq's reading task was not woken {stalls} times although \
                         data was there (a new read found it)"
                    )
                } else {
                    mp_log
                }
            })
            .map_err(|e| format!("{e} ({received})"))
    };
    let fetched = tokio::time::timeout(options.timeout, fetched)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the downloads took longer than {:?}",
                options.timeout
            ))
        });
    endpoint.close(0u32.into(), b"");
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    // The server prints one JSON line per connection once it ends: at once if it saw the
    // client's CONNECTION_CLOSE, else after its idle timeout (30 s), which is noted.
    let connections = if setup.resumption { 2 } else { 1 };
    let mut reports = Vec::new();
    let waited = Instant::now();
    let mut report = None;
    for _ in 0..connections {
        report = script.line(Duration::from_secs(45)).await;
        reports.extend(report.clone());
    }
    let report_wait = waited.elapsed();
    let (_, stderr) = script.output();
    let mp_log = fetched.map_err(|e| format!("{e}; server: {}", last_lines(&stderr)))?;
    let report: Value = report
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| format!("the server's report is not JSON: {e}"))?
        .ok_or_else(|| format!("the server printed no report: {}", last_lines(&stderr)))?;
    let bytes = site.check_downloads(&downloads)?;
    let mut checks = vec![format!("{} files ({bytes} B) identical", site.files.len())];
    if report_wait > Duration::from_secs(10) {
        checks.push(format!(
            "NOTE: the server ended the connection {:.0} s after the client closed it (it \
             missed the CONNECTION_CLOSE)",
            report_wait.as_secs_f64()
        ));
    }
    check_keylog(dir, &mut checks)?;
    let qlogs = check_qlog(dir)?;
    let servers = qlogs
        .iter()
        .filter(|r| {
            r.first()
                .is_some_and(|h| h["trace"]["vantage_point"]["type"] == "server")
        })
        .count();
    if servers != connections {
        return Err(format!(
            "{servers} server connections in the qlog, expected {connections} handshake(s)"
        ));
    }
    checks.push(format!(
        "{connections} handshake(s) ({connections} server qlog), the qlog of the killed \
         server parses"
    ));
    let connection = &report["connection"];
    match case {
        "retry" => {
            let n = retries.load(Ordering::Relaxed);
            if n == 0 {
                return Err("the noq client received no Retry".into());
            }
            checks.push(format!("the noq client received {n} Retry"));
        }
        "chacha20" => check_chacha(connection, &mut checks)?,
        "resumption" | "zerortt" => {
            let first: Value = reports
                .first()
                .and_then(|l| serde_json::from_str(l).ok())
                .unwrap_or_default();
            check_resumed(&first["connection"], connection, &mut checks)?;
            if case == "zerortt" {
                checks.push(check_zero_rtt(
                    connection,
                    &qlogs,
                    "server",
                    "packet_received",
                )?);
                checks.push(check_early_secret(dir)?);
            } else {
                checks.push(check_no_certificate(&qlogs, "server", certs)?);
            }
        }
        "keyupdate" => check_key_updates(connection, "server", &mut checks)?,
        "ecn" => check_ecn(connection, "server", &mut checks)?,
        "ipv6" => {
            let peer = report["peer"].as_str().unwrap_or_default();
            if !peer.starts_with('[') {
                return Err(format!("the server saw the client at {peer}"));
            }
            checks.push(format!("the server saw the client at {peer}"));
        }
        "rebind-port" | "rebind-addr" => {
            let last = connection["paths"][0]["remote"]
                .as_str()
                .and_then(|a| a.parse().ok());
            checks.push(check_rebinding(nat.as_ref(), last)?);
            let planned = REBIND_AFTER_BYTES.len() as u64;
            let changes = connection["peer_address_changes"].as_u64().unwrap_or(0);
            let validated = connection["peer_addresses_validated"].as_u64().unwrap_or(0);
            let challenges = sent_frames(&qlogs, "server", "path_challenge");
            if changes != planned || validated != planned || challenges < planned {
                return Err(format!(
                    "the server followed {changes} address changes and validated {validated} \
                     ({challenges} PATH_CHALLENGE in its qlog); the NAT made {planned}"
                ));
            }
            checks.push(format!(
                "the server followed {changes} address changes, validated {validated}, its \
                 qlog has {challenges} PATH_CHALLENGE"
            ));
        }
        c if c.starts_with("multipath-") => {
            checks.push(check_multipath(c, &qlogs, "server")?);
            checks.push(mp_log);
        }
        _ => {}
    }
    Ok(Some(checks.join("; ")))
}

/// A NAT in front of `server` if the case rebinds ([`REBIND_AFTER_BYTES`]) or resumes
/// ([`RESUMPTION_ONE_WAY_DELAY`]).
async fn start_nat(setup: PeerSetup, server: SocketAddr) -> Result<Option<Nat>, CaseError> {
    let rebind = setup.rebind.map(|kind| RebindPlan {
        kind,
        after_bytes: REBIND_AFTER_BYTES.to_vec(),
    });
    if rebind.is_none() && !setup.resumption {
        return Ok(None);
    }
    let plan = NatPlan {
        rebind,
        one_way_delay: if setup.resumption {
            RESUMPTION_ONE_WAY_DELAY
        } else {
            Duration::ZERO
        },
    };
    Nat::start(server, plan)
        .await
        .map(Some)
        .map_err(|e| format!("NAT: {e}"))
}

/// The rebinding cases' common check: the NAT rebound as planned and the server's last
/// view of the client (`last_peer`) is the NAT's last outside address.
fn check_rebinding(nat: Option<&Nat>, last_peer: Option<SocketAddr>) -> Result<String, CaseError> {
    let nat = nat.ok_or("the case has no NAT")?;
    let log = nat.log();
    if let Some(e) = &log.error {
        return Err(format!("the NAT failed: {e}"));
    }
    if nat.rebindings() != REBIND_AFTER_BYTES.len() {
        return Err(format!(
            "the NAT rebound {} times, not {}",
            nat.rebindings(),
            REBIND_AFTER_BYTES.len()
        ));
    }
    let addrs: Vec<String> = log.outside.iter().map(|a| a.to_string()).collect();
    if last_peer != log.outside.last().copied() {
        return Err(format!(
            "the server ended with the client at {last_peer:?}; the NAT used {}",
            addrs.join(" -> ")
        ));
    }
    Ok(format!(
        "the NAT rebound {} times ({}), the server followed",
        nat.rebindings(),
        addrs.join(" -> ")
    ))
}

/// Frames of `frame_type` in the `packet_sent` events of `side`'s qlog files.
fn sent_frames(qlogs: &[Vec<Value>], side: &str, frame_type: &str) -> u64 {
    qlogs
        .iter()
        .filter(|r| {
            r.first()
                .is_some_and(|h| h["trace"]["vantage_point"]["type"] == side)
        })
        .map(|records| {
            QlogView::new(records)
                .events("packet_sent")
                .filter_map(|r| r["data"]["frames"].as_array())
                .flatten()
                .filter(|f| f["frame_type"] == frame_type)
                .count() as u64
        })
        .sum()
}

/// The multipath proposal's checks (interop/MULTIPATH-CASES.md), from the qlog of the
/// polypath side (`side`, the only one of the case's connections): what the peer sent
/// shows in its `packet_received` events, what it sent itself in `packet_sent`.
fn check_multipath(case: &str, qlogs: &[Vec<Value>], side: &str) -> Result<String, CaseError> {
    let records = qlogs
        .iter()
        .find(|r| {
            r.first()
                .is_some_and(|h| h["trace"]["vantage_point"]["type"] == side)
        })
        .ok_or_else(|| format!("no {side} qlog"))?;
    let view = QlogView::new(records);
    let (mp_local, mp_remote) = (
        view.initial_max_path_id("local"),
        view.initial_max_path_id("remote"),
    );
    if mp_local.is_none() || mp_remote.is_none() {
        return Err(format!(
            "initial_max_path_id: local {mp_local:?}, remote {mp_remote:?}"
        ));
    }
    let mut detail = format!(
        "initial_max_path_id local {} remote {}",
        mp_local.unwrap_or_default(),
        mp_remote.unwrap_or_default()
    );
    // The server sends the files: stream data it sent (polypath server) or the client
    // received (polypath client), per path.
    let data_event = if side == "server" {
        "packet_sent"
    } else {
        "packet_received"
    };
    // Frames of the client: sent by the client (polypath client) or received by the
    // server (polypath server); the peer's answers the other way.
    let (client_event, server_event) = if side == "client" {
        ("packet_sent", "packet_received")
    } else {
        ("packet_received", "packet_sent")
    };
    let bytes = view.stream_bytes(data_event, f64::INFINITY);
    let on = |id: u32| bytes.get(&id).copied().unwrap_or(0);
    let total: u64 = bytes.values().sum();
    match case {
        "multipath-handshake" => {}
        "multipath-transfer" => {
            // polypath's server spreads by round robin: it must put MIN_BYTES_PER_PATH on
            // each path. noq's fills path 0 before it uses path 1, and on a busy machine
            // has put as little as 15 154 B of 20 MB there (its first window): as the
            // client, polypath must receive stream data on both paths.
            let need = if side == "server" {
                crate::MIN_BYTES_PER_PATH
            } else {
                1
            };
            if on(0) < need || on(1) < need {
                return Err(format!(
                    "{detail}; stream bytes from the server by path {bytes:?}: need >= {need} on paths 0 and 1"
                ));
            }
            let _ = std::fmt::Write::write_fmt(
                &mut detail,
                format_args!("; stream bytes from the server by path {bytes:?}"),
            );
        }
        "multipath-abandon" => {
            let sent = view.frame_time(client_event, "path_abandon", 1);
            let answered = view.frame_time(server_event, "path_abandon", 1);
            let (Some(at), Some(_)) = (sent, answered) else {
                return Err(format!(
                    "{detail}; PATH_ABANDON for path 1 from the client: {sent:?} ms, answered by \
                     the server: {answered:?} ms"
                ));
            };
            let before = view.stream_bytes(data_event, at);
            let after = view.stream_bytes(data_event, f64::INFINITY);
            let after_on_0 =
                after.get(&0).copied().unwrap_or(0) - before.get(&0).copied().unwrap_or(0);
            let before_on_1 = before.get(&1).copied().unwrap_or(0);
            if before_on_1 == 0 || after_on_0 == 0 {
                return Err(format!(
                    "{detail}; path 1 abandoned at {at:.1} ms: it carried {before_on_1} B \
                     before, path 0 {after_on_0} B after: not a path in use mid-transfer"
                ));
            }
            let _ = std::fmt::Write::write_fmt(
                &mut detail,
                format_args!(
                    "; PATH_ABANDON(1) at {at:.1} ms, answered; path 1 carried {before_on_1} B \
                     before, path 0 {after_on_0} B after"
                ),
            );
        }
        "multipath-backup" => {
            let Some(at) = view.frame_time(client_event, "path_status_backup", 1) else {
                return Err(format!(
                    "{detail}; no PATH_STATUS_BACKUP for path 1 from the client"
                ));
            };
            // Allowed on the backup path: 1% of the data (what was in flight before the
            // status arrived).
            if on(1) * 100 > total {
                return Err(format!(
                    "{detail}; PATH_STATUS_BACKUP(1) at {at:.1} ms, yet path 1 carried {} of \
                     {total} stream bytes",
                    on(1)
                ));
            }
            let _ = std::fmt::Write::write_fmt(
                &mut detail,
                format_args!(
                    "; PATH_STATUS_BACKUP(1) at {at:.1} ms; stream bytes from the server by \
                     path {bytes:?}"
                ),
            );
        }
        other => return Err(format!("no checks for {other}")),
    }
    Ok(detail)
}

/// Facts read from one connection's qlog records.
struct QlogView<'a> {
    records: &'a [Value],
}

impl<'a> QlogView<'a> {
    fn new(records: &'a [Value]) -> Self {
        QlogView { records }
    }

    fn events(&self, name: &'static str) -> impl Iterator<Item = &'a Value> {
        let full = format!("quic:{name}");
        self.records
            .iter()
            .filter(move |r| r["name"] == full.as_str())
    }

    /// The initial_max_path_id of the `owner` (`local` or `remote`) transport parameters.
    fn initial_max_path_id(&self, owner: &str) -> Option<u64> {
        self.events("parameters_set")
            .find(|r| r["data"]["owner"] == owner)
            .and_then(|r| r["data"]["initial_max_path_id"].as_u64())
    }

    /// CRYPTO bytes in the Handshake packets of `event` (`packet_sent`, `packet_received`).
    fn handshake_crypto_bytes(&self, event: &'static str) -> u64 {
        self.frame_bytes(event, "handshake", "crypto")
    }

    /// Bytes of the `frame_type` frames in the `packet_type` packets of `event`.
    fn frame_bytes(&self, event: &'static str, packet_type: &str, frame_type: &str) -> u64 {
        self.events(event)
            .filter(|r| r["data"]["header"]["packet_type"] == packet_type)
            .flat_map(|r| r["data"]["frames"].as_array().into_iter().flatten())
            .filter(|f| f["frame_type"] == frame_type)
            .filter_map(|f| f["length"].as_u64())
            .sum()
    }

    /// Stream bytes per path in `event` packets logged before `until` (ms).
    fn stream_bytes(&self, event: &'static str, until: f64) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for r in self.events(event) {
            if r["time"].as_f64().unwrap_or(0.0) >= until {
                continue;
            }
            let path = r["data"]["header"]["path_id"].as_u64().unwrap_or(0) as u32;
            let bytes: u64 = r["data"]["frames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| f["frame_type"] == "stream")
                .filter_map(|f| f["length"].as_u64())
                .sum();
            if bytes > 0 {
                *out.entry(path).or_insert(0) += bytes;
            }
        }
        out
    }

    /// When the first `event` packet carrying a `frame_type` frame for `path_id` was
    /// logged (ms).
    fn frame_time(&self, event: &'static str, frame_type: &str, path_id: u64) -> Option<f64> {
        self.events(event)
            .find(|r| {
                r["data"]["frames"].as_array().is_some_and(|frames| {
                    frames
                        .iter()
                        .any(|f| f["frame_type"] == frame_type && f["path_id"] == path_id)
                })
            })
            .and_then(|r| r["time"].as_f64())
    }
}

/// Bytes a path must have received before the client of multipath-abandon abandons it
/// (the script's `--abandon-path 1@8kB`): the path is in use. Small, because a noq server
/// puts little of a transfer on its second path over loopback (it fills path 0 first): in
/// some runs less than 64 kB of 20 MB.
pub const ABANDON_AFTER_BYTES: u64 = 8 * 1024;

/// The noq client's part of a multipath case: opens the second path from `second_local`
/// (as a backup in multipath-backup) and waits until it is validated; returns what it did
/// and, for multipath-abandon, the abandonment of that path once it has received
/// [`ABANDON_AFTER_BYTES`] (to run beside the downloads).
async fn noq_client_paths(
    case: &str,
    conn: &noq::Connection,
    second_local: Option<SocketAddr>,
    server: SocketAddr,
) -> Result<(String, impl Future<Output = ()>), CaseError> {
    let wrapped = crate::peer::Conn::noq(conn.clone());
    let opened = match case {
        "multipath-transfer" | "multipath-abandon" | "multipath-backup" => {
            let local = second_local.ok_or("the noq client has no second address")?;
            let id = wrapped.open_path(local, server).await?;
            if case == "multipath-backup" {
                // noq keeps a path opened with status backup to itself (it sends no
                // PATH_STATUS_BACKUP for it): the status is set, and signalled, after.
                wrapped.set_path_backup(id, true)?;
            }
            Some((id, local))
        }
        _ => None,
    };
    let log = match opened {
        Some((id, local)) => format!(
            "the noq client opened path {id} from {local}{}",
            if case == "multipath-backup" {
                " as a backup"
            } else {
                ""
            }
        ),
        None => format!(
            "the noq client's multipath: {}",
            conn.is_multipath_enabled()
        ),
    };
    let abandon = async move {
        if let (Some((id, _)), "multipath-abandon") = (opened, case) {
            while wrapped
                .path_bytes()
                .iter()
                .find(|p| p.id == id)
                .is_some_and(|p| p.udp_rx < ABANDON_AFTER_BYTES)
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if let Err(e) = wrapped.abandon_path(id) {
                eprintln!("noq client: abandoning path {id}: {e}");
            }
        }
    };
    Ok((log, abandon))
}

fn check_keylog(dir: &Path, checks: &mut Vec<String>) -> Result<(), CaseError> {
    let keys = std::fs::read_to_string(dir.join("keys.log")).unwrap_or_default();
    let secrets = keys
        .lines()
        .filter(|l| l.starts_with("CLIENT_TRAFFIC_SECRET_0"))
        .count();
    if secrets == 0 {
        return Err("SSLKEYLOGFILE holds no CLIENT_TRAFFIC_SECRET_0".into());
    }
    checks.push("SSLKEYLOGFILE written".into());
    Ok(())
}

/// Every qlog file of the case, parsed.
fn check_qlog(dir: &Path) -> Result<Vec<Vec<Value>>, CaseError> {
    let qlog_dir = dir.join("qlog");
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&qlog_dir).map_err(|e| format!("QLOGDIR: {e}"))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(
            polypath_quic::qlog::parse_json_seq(&bytes)
                .map_err(|e| format!("{}: {e}", path.display()))?,
        );
    }
    if out.is_empty() {
        return Err("QLOGDIR holds no qlog file".into());
    }
    Ok(out)
}

/// resumption: the polypath side reports a full handshake on the first connection and a
/// resumed one on the second.
fn check_resumed(first: &Value, second: &Value, checks: &mut Vec<String>) -> Result<(), CaseError> {
    if first["resumed"] != false || second["resumed"] != true {
        return Err(format!(
            "resumed: first connection {}, second {} (expected false, true)",
            first["resumed"], second["resumed"]
        ));
    }
    checks.push("the second connection resumed, the first did not".into());
    Ok(())
}

/// resumption: of the two connections in the qlogs of `side` (the polypath end), one
/// carried the certificate in its Handshake packets (the server's Handshake CRYPTO data
/// at least as long as the certificate) and the other could not have (shorter than it):
/// the runner's check that the second handshake has no Certificate message.
fn check_no_certificate(
    qlogs: &[Vec<Value>],
    side: &str,
    certs: &Certs,
) -> Result<String, CaseError> {
    // The server's CRYPTO data: sent by a polypath server, received by a polypath client.
    let event = if side == "server" {
        "packet_sent"
    } else {
        "packet_received"
    };
    let mut sizes: Vec<u64> = qlogs
        .iter()
        .filter(|r| {
            r.first()
                .is_some_and(|h| h["trace"]["vantage_point"]["type"] == side)
        })
        .map(|r| QlogView::new(r).handshake_crypto_bytes(event))
        .collect();
    sizes.sort_unstable();
    let cert = certs.chain.iter().map(|c| c.len() as u64).sum::<u64>();
    match sizes[..] {
        [resumed, full] if resumed < cert && full >= cert => Ok(format!(
            "server Handshake CRYPTO {full} B (full, certificate {cert} B) and {resumed} B \
             (resumed: no certificate)"
        )),
        _ => Err(format!(
            "server Handshake CRYPTO bytes per connection {sizes:?}: expected one at least the \
             certificate's {cert} B and one below it"
        )),
    }
}

/// zerortt: the polypath side (`side`) reports early data accepted on its second
/// connection, with 0-RTT packets, and its qlog shows them (`event`: `packet_sent` by a
/// client, `packet_received` by a server) with STREAM frames in them.
fn check_zero_rtt(
    connection: &Value,
    qlogs: &[Vec<Value>],
    side: &str,
    event: &'static str,
) -> Result<String, CaseError> {
    let packets = connection["zero_rtt_packets"].as_u64().unwrap_or(0);
    if connection["early_data_accepted"] != true || packets == 0 {
        return Err(format!(
            "early data accepted {}, {packets} 0-RTT packets (expected accepted, some)",
            connection["early_data_accepted"]
        ));
    }
    let stream_bytes: u64 = qlogs
        .iter()
        .filter(|r| {
            r.first()
                .is_some_and(|h| h["trace"]["vantage_point"]["type"] == side)
        })
        .map(|r| QlogView::new(r).frame_bytes(event, "0RTT", "stream"))
        .sum();
    if stream_bytes == 0 {
        return Err(format!(
            "no STREAM data in 0-RTT packets in the {side}'s qlog"
        ));
    }
    Ok(format!(
        "early data accepted: {packets} 0-RTT packets, {stream_bytes} B of STREAM data in \
         them in the {side}'s qlog"
    ))
}

/// zerortt: SSLKEYLOGFILE holds the 0-RTT secret (what the runner decrypts the 0-RTT
/// packets of its pcap with).
fn check_early_secret(dir: &Path) -> Result<String, CaseError> {
    let keys = std::fs::read_to_string(dir.join("keys.log")).unwrap_or_default();
    if keys
        .lines()
        .any(|l| l.starts_with("CLIENT_EARLY_TRAFFIC_SECRET"))
    {
        Ok("SSLKEYLOGFILE has CLIENT_EARLY_TRAFFIC_SECRET".into())
    } else {
        Err("SSLKEYLOGFILE holds no CLIENT_EARLY_TRAFFIC_SECRET".into())
    }
}

fn check_chacha(connection: &Value, checks: &mut Vec<String>) -> Result<(), CaseError> {
    let suite = connection["cipher_suite"].as_str().unwrap_or_default();
    if suite != "TLS13_CHACHA20_POLY1305_SHA256" {
        return Err(format!("cipher suite {suite:?}"));
    }
    checks.push(format!("{suite} agreed"));
    Ok(())
}

fn check_key_updates(
    connection: &Value,
    side: &str,
    checks: &mut Vec<String>,
) -> Result<(), CaseError> {
    let n = connection["key_updates"].as_u64().unwrap_or(0);
    if n == 0 {
        return Err(format!("the polypath {side} saw no key update"));
    }
    checks.push(format!("the polypath {side} went through {n} key updates"));
    Ok(())
}

/// The runner's ECN case, from the polypath side's report: the peer's packets arrived
/// marked (it sets ECT), and polypath's own marks validated (the peer reported ECN counts
/// in its acknowledgments, and they add up).
fn check_ecn(connection: &Value, side: &str, checks: &mut Vec<String>) -> Result<(), CaseError> {
    let path = &connection["paths"][0];
    let state = path["ecn"].as_str().unwrap_or_default();
    let received = path["ecn_ect0_received"].as_u64().unwrap_or(0);
    if state != "capable" {
        return Err(format!(
            "the polypath {side}'s marks did not validate: {state} ({})",
            path["ecn_failure"].as_str().unwrap_or("no reason given")
        ));
    }
    if received == 0 {
        return Err(format!(
            "no packet reached the polypath {side} marked ECT(0)"
        ));
    }
    checks.push(format!(
        "the polypath {side}'s {} ECT(0) marks validated; {received} of the peer's packets \
         arrived marked ECT(0)",
        path["ecn_marked"]
    ));
    Ok(())
}

fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
