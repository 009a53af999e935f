//! `polypath gw server`: the server gateway. It accepts client gateways' connections,
//! authenticates each with its pre-shared token, gives it an address from its own pool and
//! its policy, and then carries the session's IP packets between the tunnel and its TUN
//! device (routing them on, and masquerading them with `nat`).
//!
//! The configuration file (JSON; errors name the file, line and field):
//!
//! ```json
//! {
//!   "listen": "0.0.0.0:4433",
//!   "pmf_port": 4434,
//!   "mptcp_port": 4435,
//!   "tun": "gw0",
//!   "gateway_ip": "10.200.0.1",
//!   "routes": ["10.99.0.0/24"],
//!   "nat": true,
//!   "mtu": 1380,
//!   "clients": [
//!     { "name": "train-7", "token_sha256": "9f86d08...", "policy": "train-7.json",
//!       "pool": "10.200.7.0/28" }
//!   ]
//! }
//! ```
//!
//! `token_sha256` is the SHA-256 of the client's token in hex (or `token`, the token
//! itself); `policy` is relative to the configuration file; `routes` are the prefixes the
//! clients send into the tunnel; `pool`s must not overlap; `mptcp_port` is the kernel MPTCP
//! relay of classes with `"transport": "mptcp"` (0 turns it off). `SIGHUP` reloads the file: new
//! and removed clients, new tokens and changed policies take effect at once (a changed
//! policy is sent to that client's live sessions; a file that does not load is logged and
//! the old configuration kept).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use polypath_io::{Connection, Endpoint, QosClass, RecvStream, SendStream};
use polypath_quic::sched::{QosMode, QosPolicyConfig};
use polypath_scenario::Prefix;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::control::{self, Control, Decoder};
use crate::framing::{self, DedupWindow, Tunneled};
use crate::pmf::{self, Kind, Probe, TrainReceiver};
use crate::policy::{Policy, PolicyError};
use crate::status::{ClassCounters, SessionStatus, Status};
use crate::tun::{self, Tun};

/// How long a connection has to send its `hello`.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// One client entry of the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientEntry {
    /// The client's name.
    pub name: String,
    /// SHA-256 of its token, hex.
    #[serde(default)]
    pub token_sha256: Option<String>,
    /// Its token (when the file may hold it).
    #[serde(default)]
    pub token: Option<String>,
    /// Its policy file, relative to the configuration.
    pub policy: PathBuf,
    /// Its address pool.
    pub pool: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    #[serde(default = "default_pmf_port")]
    pmf_port: u16,
    #[serde(default = "default_mptcp_port")]
    mptcp_port: u16,
    #[serde(default = "default_tun")]
    tun: String,
    gateway_ip: IpAddr,
    #[serde(default)]
    routes: Vec<String>,
    #[serde(default)]
    nat: bool,
    #[serde(default = "default_mtu")]
    mtu: u16,
    clients: Vec<ClientEntry>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 4433))
}
fn default_pmf_port() -> u16 {
    4434
}
fn default_mptcp_port() -> u16 {
    4435
}
fn default_tun() -> String {
    "gw0".into()
}
fn default_mtu() -> u16 {
    1380
}

/// A client the server knows, with its policy loaded.
#[derive(Debug, Clone)]
struct KnownClient {
    name: String,
    token_hash: [u8; 32],
    policy_text: String,
    policy_name: String,
    policy: Arc<Policy>,
    pool: Prefix,
}

/// The server's configuration, loaded and checked.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where QUIC listens.
    pub listen: SocketAddr,
    /// The measurement port.
    pub pmf_port: u16,
    /// The kernel MPTCP relay's port (0: none).
    pub mptcp_port: u16,
    /// The TUN device's name.
    pub tun: String,
    /// The server's tunnel address.
    pub gateway_ip: IpAddr,
    /// Prefixes the clients route into the tunnel.
    pub routes: Vec<Prefix>,
    /// Masquerade the pools.
    pub nat: bool,
    /// Tunnel MTU.
    pub mtu: u16,
    clients: Vec<KnownClient>,
}

impl ServerConfig {
    /// Loads and checks the configuration file and every policy it names.
    pub fn load(path: &Path) -> Result<ServerConfig, PolicyError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            file: file.clone(),
            line: None,
            field: None,
            message: e.to_string(),
        })?;
        let raw: RawConfig = crate::parse_json(&text, &file)?;
        let err = |field: String, message: String| PolicyError {
            file: file.clone(),
            line: crate::policy::json_line_of(&text, &field),
            field: Some(field),
            message,
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut routes = Vec::new();
        for (i, r) in raw.routes.iter().enumerate() {
            routes.push(r.parse().map_err(|e| err(format!("routes[{i}]"), e))?);
        }
        if raw.mtu < 576 {
            return Err(err(
                "mtu".into(),
                "the tunnel MTU must be at least 576".into(),
            ));
        }
        let mut clients: Vec<KnownClient> = Vec::new();
        for (i, c) in raw.clients.iter().enumerate() {
            let at = format!("clients[{i}]");
            if clients.iter().any(|k| k.name == c.name) {
                return Err(err(
                    format!("{at}.name"),
                    format!("client `{}` is listed twice", c.name),
                ));
            }
            let token_hash = match (&c.token_sha256, &c.token) {
                (Some(h), None) => {
                    let bytes = hex::decode(h.trim()).ok().filter(|b| b.len() == 32);
                    let Some(bytes) = bytes else {
                        return Err(err(
                            format!("{at}.token_sha256"),
                            "expected 64 hex digits (the SHA-256 of the token)".into(),
                        ));
                    };
                    let mut a = [0u8; 32];
                    a.copy_from_slice(&bytes);
                    a
                }
                (None, Some(t)) if !t.is_empty() => Sha256::digest(t.as_bytes()).into(),
                _ => {
                    return Err(err(
                        at.clone(),
                        "give exactly one of `token_sha256` and a non-empty `token`".into(),
                    ));
                }
            };
            let pool: Prefix = c.pool.parse().map_err(|e| err(format!("{at}.pool"), e))?;
            let host_bits = if pool.addr.is_ipv4() { 32 } else { 128 } - u32::from(pool.len);
            if host_bits < 2 {
                return Err(err(
                    format!("{at}.pool"),
                    "a pool needs at least 2 host bits".into(),
                ));
            }
            if pool.contains(raw.gateway_ip) {
                return Err(err(
                    format!("{at}.pool"),
                    "the pool holds the gateway's own address".into(),
                ));
            }
            if let Some(other) = clients
                .iter()
                .find(|k| k.pool.contains(pool.addr) || pool.contains(k.pool.addr))
            {
                return Err(err(
                    format!("{at}.pool"),
                    format!("overlaps the pool of client `{}`", other.name),
                ));
            }
            let policy_path = dir.join(&c.policy);
            let policy_text = std::fs::read_to_string(&policy_path).map_err(|e| {
                err(
                    format!("{at}.policy"),
                    format!("{}: {e}", policy_path.display()),
                )
            })?;
            let policy_name = policy_path.display().to_string();
            let policy = Policy::parse(&policy_text, &policy_name)?;
            clients.push(KnownClient {
                name: c.name.clone(),
                token_hash,
                policy_text,
                policy_name,
                policy: Arc::new(policy),
                pool,
            });
        }
        Ok(ServerConfig {
            listen: raw.listen,
            pmf_port: raw.pmf_port,
            mptcp_port: raw.mptcp_port,
            tun: raw.tun,
            gateway_ip: raw.gateway_ip,
            routes,
            nat: raw.nat,
            mtu: raw.mtu,
            clients,
        })
    }
}

/// What `polypath gw server` was asked to do.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The configuration file.
    pub config: PathBuf,
    /// TLS configuration (certificate and key).
    pub tls: Arc<rustls::ServerConfig>,
    /// Serve `/metrics` and `/status` here.
    pub status: Option<SocketAddr>,
    /// Congestion controller per path.
    pub cc: String,
}

/// A live, authenticated session.
struct Session {
    id: String,
    client: String,
    conn: Connection,
    tunnel_ip: IpAddr,
    pool: Prefix,
    policy: Arc<Policy>,
    policy_text: String,
    /// Sequence numbers of duplicated classes (downlink).
    next_seq: u64,
    counters: Vec<ClassCounters>,
    dedup: DedupWindow,
    session_key: u64,
    trains: HashMap<u8, TrainReceiver>,
}

#[derive(Default)]
struct Registry {
    config: Option<ServerConfig>,
    /// Sessions by their tunnel address.
    sessions: BTreeMap<IpAddr, Session>,
    /// Tunnel addresses by session key (the measurement probes' session field).
    by_key: HashMap<u64, IpAddr>,
}

type Shared = Arc<Mutex<Registry>>;

fn lock(r: &Shared) -> MutexGuard<'_, Registry> {
    r.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the server gateway until SIGINT or SIGTERM.
pub async fn run(opts: ServerOptions) -> Result<(), String> {
    let config = ServerConfig::load(&opts.config).map_err(|e| e.to_string())?;
    let transport = crate::transport_config(&opts.cc)?;
    let mut server = polypath_quic::ServerConfig::new(opts.tls.clone());
    server.transport = transport;
    let endpoint = Endpoint::server(
        config.listen,
        polypath_quic::EndpointConfig::random(),
        server,
    )
    .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let tun = Arc::new(
        Tun::create(&config.tun, config.mtu, config.gateway_ip)
            .map_err(|e| format!("TUN device {}: {e}", config.tun))?,
    );
    tun::enable_forwarding().map_err(|e| format!("cannot turn on forwarding: {e}"))?;
    let mut nats = Vec::new();
    for c in &config.clients {
        tun.route(&c.pool.to_string(), Some(config.gateway_ip))
            .map_err(|e| e.to_string())?;
        if config.nat {
            nats.push(
                tun::Nat::masquerade(&c.pool.to_string(), &config.tun)
                    .map_err(|e| e.to_string())?,
            );
        }
    }
    let pmf_addr = SocketAddr::new(config.listen.ip(), config.pmf_port);
    let pmf = Arc::new(
        tokio::net::UdpSocket::bind(pmf_addr)
            .await
            .map_err(|e| format!("measurement port {pmf_addr}: {e}"))?,
    );
    let relay = if config.mptcp_port != 0 {
        let addr = SocketAddr::new(config.listen.ip(), config.mptcp_port);
        Some(crate::proxy::mptcp_listen(addr).map_err(|e| format!("MPTCP relay {addr}: {e}"))?)
    } else {
        None
    };
    let status = Status::new("server");
    let mut _status_task = None;
    if let Some(addr) = opts.status {
        let (bound, task) = status
            .serve(addr)
            .await
            .map_err(|e| format!("status {addr}: {e}"))?;
        info!(%bound, "status and metrics");
        _status_task = Some(task);
    }
    let shared: Shared = Arc::new(Mutex::new(Registry {
        config: Some(config.clone()),
        ..Registry::default()
    }));
    println!(
        "listening on {} (measurement {}, tunnel {} {} mtu {})",
        endpoint
            .local_addrs()
            .first()
            .copied()
            .unwrap_or(config.listen),
        pmf_addr,
        config.tun,
        config.gateway_ip,
        config.mtu
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let downlink = tokio::spawn(downlink(tun.clone(), shared.clone(), status.clone()));
    let prober = tokio::spawn(answer_probes(pmf.clone(), shared.clone()));
    let publisher = tokio::spawn(publish(shared.clone(), status.clone()));
    let relayer = relay.map(|l| tokio::spawn(mptcp_relay(l, shared.clone())));
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| e.to_string())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(conn) = incoming else { break };
                tokio::spawn(session(conn, shared.clone(), tun.clone(), status.clone()));
            }
            _ = hup.recv() => reload(&opts.config, &shared),
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    info!("shutting down");
    endpoint.close(control::CLOSE_SHUTDOWN, b"server shutting down");
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    downlink.abort();
    prober.abort();
    publisher.abort();
    if let Some(r) = relayer {
        r.abort();
    }
    drop(nats);
    Ok(())
}

/// Re-reads the configuration (SIGHUP): clients, tokens and policies.
fn reload(path: &Path, shared: &Shared) {
    let config = match ServerConfig::load(path) {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "reload refused; the configuration in force stays");
            return;
        }
    };
    let mut reg = lock(shared);
    let mut updates = 0;
    for s in reg.sessions.values_mut() {
        let Some(c) = config.clients.iter().find(|c| c.name == s.client) else {
            info!(client = %s.client, "client removed from the configuration: session closed");
            s.conn.close(control::CLOSE_REFUSED, b"client removed");
            continue;
        };
        if c.policy_text != s.policy_text {
            s.policy = c.policy.clone();
            s.policy_text = c.policy_text.clone();
            s.counters
                .resize(s.policy.all_classes().count(), ClassCounters::default());
            let msg = Control::Policy {
                policy: c.policy_text.clone(),
                policy_name: c.policy_name.clone(),
            };
            let conn = s.conn.clone();
            tokio::spawn(async move {
                // Policy updates go on a stream of their own (the control stream is read
                // by the session task).
                if let Ok(mut send) = conn.open_uni().await {
                    let _ = send.set_class(QosClass::Critical);
                    let _ = send.write_all(&msg.encode()).await;
                    let _ = send.finish();
                }
            });
            updates += 1;
        }
    }
    info!(
        sessions_updated = updates,
        clients = config.clients.len(),
        "configuration reloaded"
    );
    reg.config = Some(config);
}

/// Reads control messages from `recv` into `decoder` until one is complete.
async fn next_message(
    recv: &mut RecvStream,
    decoder: &mut Decoder,
) -> Result<Option<Control>, String> {
    loop {
        match decoder.next_message() {
            Ok(Some(m)) => return Ok(Some(m)),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        match recv.read_chunk(16 * 1024).await {
            Ok(Some(chunk)) => decoder.push(&chunk),
            Ok(None) => return decoder.finish().map(|()| None).map_err(|e| e.to_string()),
            Err(e) => return Err(format!("control stream: {e}")),
        }
    }
}

/// Sends `msg` on the control stream.
async fn send_message(send: &mut SendStream, msg: &Control) -> Result<(), String> {
    send.write_all(&msg.encode())
        .await
        .map_err(|e| format!("control stream: {e}"))
}

/// One connection: authentication, then the session's control and uplink.
async fn session(conn: Connection, shared: Shared, tun: Arc<Tun>, status: Status) {
    let peer = conn
        .remote_address()
        .map_or_else(|| "?".to_string(), |a| a.to_string());
    if conn.handshake().await.is_err() {
        return;
    }
    // Datagrams that arrive before the session is authenticated are dropped.
    let refuse = |reason: &str, close: u64| {
        warn!(%peer, reason, "session refused");
        *status.lock().refused.entry(reason.to_string()).or_default() += 1;
        conn.close(close, reason.as_bytes());
    };
    let dropped_early = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let drop_early = {
        let conn = conn.clone();
        let dropped = dropped_early.clone();
        tokio::spawn(async move {
            while conn.recv_datagram().await.is_ok() {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let stream = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi()).await;
    let (mut send, mut recv) = match stream {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => return,
        Err(_) => {
            refuse("no hello in time", control::CLOSE_TIMEOUT);
            return;
        }
    };
    let mut decoder = Decoder::default();
    let hello = tokio::time::timeout(HELLO_TIMEOUT, next_message(&mut recv, &mut decoder)).await;
    let (client, token, interfaces) = match hello {
        Err(_) => return refuse("no hello in time", control::CLOSE_TIMEOUT),
        Ok(Err(e)) if e.starts_with("malformed") => return refuse(&e, control::CLOSE_PROTOCOL),
        Ok(Err(e)) => {
            return refuse(
                &format!("malformed control message: {e}"),
                control::CLOSE_PROTOCOL,
            );
        }
        Ok(Ok(None)) => {
            return refuse("control stream ended before hello", control::CLOSE_PROTOCOL);
        }
        Ok(Ok(Some(Control::Hello {
            version,
            client,
            token,
            interfaces,
        }))) => {
            if version != control::VERSION {
                return refuse(
                    &format!("unsupported control version {version}"),
                    control::CLOSE_PROTOCOL,
                );
            }
            (client, token, interfaces)
        }
        Ok(Ok(Some(other))) => {
            return refuse(
                &format!("expected hello, got {}", other.kind()),
                control::CLOSE_PROTOCOL,
            );
        }
    };
    // Authenticate and allocate.
    let token_hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let admitted = {
        let mut reg = lock(&shared);
        let Some(config) = reg.config.clone() else {
            return;
        };
        let known = config.clients.iter().find(|c| c.name == client).cloned();
        match known {
            None => Err("unknown client"),
            Some(k) if !control::secrets_match(&k.token_hash, &token_hash) => Err("bad token"),
            Some(k) => match allocate(&reg.sessions, k.pool) {
                None => Err("address pool exhausted"),
                Some(ip) => {
                    let key: u64 = rand::random();
                    let id = format!("{key:016x}");
                    let classes = k.policy.all_classes().count();
                    reg.by_key.insert(key, ip);
                    reg.sessions.insert(
                        ip,
                        Session {
                            id: id.clone(),
                            client: client.clone(),
                            conn: conn.clone(),
                            tunnel_ip: ip,
                            pool: k.pool,
                            policy: k.policy.clone(),
                            policy_text: k.policy_text.clone(),
                            next_seq: 0,
                            counters: vec![ClassCounters::default(); classes],
                            dedup: DedupWindow::default(),
                            session_key: key,
                            trains: HashMap::new(),
                        },
                    );
                    Ok((id, ip, k, config))
                }
            },
        }
    };
    let (id, tunnel_ip, known, config) = match admitted {
        Ok(a) => a,
        Err(reason) => {
            // The client hears only that its credentials were refused.
            let _ = send_message(
                &mut send,
                &Control::Refused {
                    reason: if reason == "address pool exhausted" {
                        reason.to_string()
                    } else {
                        "invalid credentials".to_string()
                    },
                },
            )
            .await;
            let _ = send.finish();
            let _ = tokio::time::timeout(Duration::from_millis(500), send.finished()).await;
            refuse(
                &format!("{reason} (client `{client}`)"),
                control::CLOSE_REFUSED,
            );
            return;
        }
    };
    // From here on the uplink reads the datagrams (one taken by the dropper as it stops
    // is lost, as any datagram may be).
    drop_early.abort();
    let early = dropped_early.load(Ordering::Relaxed);
    info!(
        %peer, client = %client, session = %id, tunnel_ip = %tunnel_ip,
        interfaces = interfaces.len(), dropped_before_auth = early,
        "session authenticated"
    );
    let welcome = Control::Welcome {
        session: id.clone(),
        tunnel_ip,
        gateway_ip: config.gateway_ip,
        routes: config.routes.iter().map(ToString::to_string).collect(),
        mtu: config.mtu,
        pmf_port: config.pmf_port,
        relay_port: config.mptcp_port,
        policy: known.policy_text.clone(),
        policy_name: known.policy_name.clone(),
    };
    let ended = async {
        send_message(&mut send, &welcome).await?;
        let _ = send.set_class(QosClass::Critical);
        let uplink = uplink(conn.clone(), shared.clone(), tun.clone(), tunnel_ip);
        let control = async {
            loop {
                match next_message(&mut recv, &mut decoder).await {
                    Ok(Some(Control::Steer { scheduler, reason })) => {
                        let config: QosPolicyConfig = serde_json::from_value(scheduler.clone())
                            .map_err(|e| format!("malformed control message: steer: {e}"))?;
                        config
                            .validate()
                            .map_err(|e| format!("malformed control message: steer: {e}"))?;
                        conn.configure_scheduler("policy", &scheduler.to_string())
                            .map_err(|e| format!("steer refused: {e}"))?;
                        info!(session = %id, reason = %reason, "steered by the client");
                    }
                    Ok(Some(other)) => {
                        return Err(format!(
                            "malformed control message: unexpected {} from a client",
                            other.kind()
                        ));
                    }
                    Ok(None) => return Ok::<(), String>(()),
                    Err(e) => return Err(e),
                }
            }
        };
        let proxies = proxy_streams(conn.clone(), shared.clone(), tunnel_ip);
        tokio::select! {
            r = control => r,
            r = uplink => r,
            r = proxies => r,
            e = conn.closed() => Err(format!("connection ended: {e}")),
        }
    }
    .await;
    match ended {
        Ok(()) => info!(session = %id, "session ended"),
        Err(reason) if reason.starts_with("malformed") || reason.starts_with("steer refused") => {
            warn!(session = %id, client = %client, %reason, "session ended: bad control message");
            conn.close(control::CLOSE_PROTOCOL, reason.as_bytes());
        }
        Err(reason) => info!(session = %id, %reason, "session ended"),
    }
    let ended = {
        let mut reg = lock(&shared);
        let s = reg.sessions.remove(&tunnel_ip);
        if let Some(s) = &s {
            reg.by_key.remove(&s.session_key);
        }
        s
    };
    if let Some(s) = ended {
        let mut st = status.lock();
        st.sessions.remove(&s.id);
        while st.ended.len() >= crate::status::ENDED_KEPT {
            let Some(oldest) = st.ended.keys().next().cloned() else {
                break;
            };
            st.ended.remove(&oldest);
        }
        st.ended.insert(s.id.clone(), session_status(&s));
    }
}

/// A session's status, as `/status` shows it.
fn session_status(s: &Session) -> SessionStatus {
    SessionStatus {
        client: s.client.clone(),
        tunnel_ip: s.tunnel_ip.to_string(),
        policy: s.policy.file.clone(),
        classes: s.policy.all_classes().map(|c| c.name.clone()).collect(),
        counters: s.counters.clone(),
        paths: crate::client::path_status(&s.conn),
        stack_datagrams_dropped: s.conn.datagrams_dropped(),
        stack_datagram_copies: crate::client::stack_copies(&s.conn),
        ..SessionStatus::default()
    }
}

/// The first address of `pool` that no session holds (neither the network address nor,
/// for IPv4, the broadcast address).
fn allocate(sessions: &BTreeMap<IpAddr, Session>, pool: Prefix) -> Option<IpAddr> {
    let net = pool.to_string();
    let base: Prefix = net.parse().ok()?;
    let host_bits = if base.addr.is_ipv4() { 32 } else { 128 } - u32::from(base.len);
    let count: u128 = 1u128.checked_shl(host_bits).unwrap_or(u128::MAX);
    for k in 1..count.saturating_sub(1).min(65536) {
        let ip = match base.addr {
            IpAddr::V4(a) => IpAddr::V4((u32::from(a).checked_add(k as u32)?).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a).checked_add(k)?).into()),
        };
        if !sessions.contains_key(&ip) {
            return Some(ip);
        }
    }
    None
}

/// The session's uplink: tunnel datagrams to the TUN device.
async fn uplink(
    conn: Connection,
    shared: Shared,
    tun: Arc<Tun>,
    tunnel_ip: IpAddr,
) -> Result<(), String> {
    loop {
        let d = conn
            .recv_datagram()
            .await
            .map_err(|e| format!("connection ended: {e}"))?;
        let mut reg = lock(&shared);
        let Some(s) = reg.sessions.get_mut(&tunnel_ip) else {
            return Ok(());
        };
        let (seq, packet) = match framing::decode(&d) {
            Ok(Tunneled::Packet { seq, packet }) => (seq, packet),
            Ok(Tunneled::UnknownContext(_)) | Err(_) => continue,
        };
        let info = crate::classify::parse(&packet);
        let class = s.policy.classify(info.as_ref());
        if let Some(seq) = seq
            && !s.dedup.accept(seq)
        {
            if let Some(c) = s.counters.get_mut(class) {
                c.duplicates_discarded += 1;
            }
            continue;
        }
        // A client sends from its own pool only.
        if !info.is_some_and(|i| s.pool.contains(i.src)) {
            continue;
        }
        if let Some(c) = s.counters.get_mut(class) {
            c.packets_up += 1;
            c.bytes_up += packet.len() as u64;
        }
        drop(reg);
        tun.send(&packet).map_err(|e| format!("TUN write: {e}"))?;
    }
}

/// The downlink of every session: packets from the TUN device to their session's tunnel.
async fn downlink(tun: Arc<Tun>, shared: Shared, _status: Status) {
    let mut buf = vec![0u8; 65536];
    loop {
        let n = match tun.recv(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, "TUN read failed; the downlink stops");
                return;
            }
        };
        let packet = &buf[..n];
        let Some(info) = crate::classify::parse(packet) else {
            continue;
        };
        let mut reg = lock(&shared);
        let gateway_ip = reg.config.as_ref().map(|c| c.gateway_ip);
        let Some(s) = reg.sessions.get_mut(&info.dst) else {
            continue;
        };
        let class = s.policy.classify(Some(&info));
        let Some(rule) = s.policy.all_classes().nth(class) else {
            continue;
        };
        let seq = (rule.mode == QosMode::Duplicate).then(|| {
            s.next_seq += 1;
            s.next_seq
        });
        let qos_class = rule.qos_class;
        let framed = framing::encode(packet, seq);
        let max = s.conn.max_datagram_size().unwrap_or(0);
        if framed.len() > max {
            if let (Some(me), Ok(mtu)) = (
                gateway_ip,
                u16::try_from(max.saturating_sub(framing::MAX_OVERHEAD)),
            ) && let Some(icmp) = crate::icmp::packet_too_big(packet, mtu, me)
            {
                drop(reg);
                let _ = tun.send(&icmp);
            }
            continue;
        }
        if let Some(c) = s.counters.get_mut(class) {
            c.packets_down += 1;
            c.bytes_down += n as u64;
            if seq.is_some() {
                c.duplicates_sent += u64::from(rule.interfaces.len() as u32).saturating_sub(1);
            }
        }
        let _ = s.conn.send_datagram_with_class(framed, qos_class);
    }
}

/// Answers the clients' measurement probes (live sessions only) and times their capacity
/// trains.
async fn answer_probes(socket: Arc<tokio::net::UdpSocket>, shared: Shared) {
    let mut buf = vec![0u8; 2048];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            return;
        };
        let t2 = pmf::wall_ns();
        let Some(p) = Probe::decode(&buf[..n]) else {
            continue;
        };
        let reply = {
            let mut reg = lock(&shared);
            let Some(ip) = reg.by_key.get(&p.session).copied() else {
                continue;
            };
            let Some(s) = reg.sessions.get_mut(&ip) else {
                continue;
            };
            match p.kind {
                Kind::Probe => Some(Probe {
                    kind: Kind::Answer,
                    t2,
                    t3: 0,
                    ..p
                }),
                Kind::Train => {
                    let r = s.trains.entry(p.iface).or_default();
                    r.on_packet(&p, n, t2).then(|| r.report(p.session, p.iface))
                }
                Kind::Answer | Kind::TrainReport => None,
            }
        };
        if let Some(mut r) = reply {
            if r.kind == Kind::Answer {
                r.t3 = pmf::wall_ns();
            }
            let _ = socket.send_to(&r.encode(0), from).await;
        }
    }
}

/// Refreshes the status snapshot every 200 ms.
async fn publish(shared: Shared, status: Status) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let sessions: BTreeMap<String, SessionStatus> = {
            let reg = lock(&shared);
            reg.sessions
                .values()
                .map(|s| (s.id.clone(), session_status(s)))
                .collect()
        };
        status.lock().sessions = sessions;
    }
}

/// The class counters a proxied connection to `dst` of session `tunnel_ip` counts into.
fn proxy_class(shared: &Shared, tunnel_ip: IpAddr, dst: SocketAddr) -> Option<usize> {
    let reg = lock(shared);
    let s = reg.sessions.get(&tunnel_ip)?;
    let info = crate::classify::PacketInfo {
        src: tunnel_ip,
        dst: dst.ip(),
        protocol: crate::classify::proto::TCP,
        dscp: 0,
        ports: Some((0, dst.port())),
        len: 0,
    };
    Some(s.policy.classify(Some(&info)))
}

/// Adds a finished proxied connection's bytes to its class.
fn count_proxied(shared: &Shared, tunnel_ip: IpAddr, class: Option<usize>, up: u64, down: u64) {
    let mut reg = lock(shared);
    if let (Some(s), Some(c)) = (reg.sessions.get_mut(&tunnel_ip), class)
        && let Some(c) = s.counters.get_mut(c)
    {
        c.bytes_up += up;
        c.bytes_down += down;
    }
}

/// The TCP connections the client carries on QUIC streams: each further bidirectional
/// stream opens with a proxy header; the server connects to its destination and relays.
async fn proxy_streams(conn: Connection, shared: Shared, tunnel_ip: IpAddr) -> Result<(), String> {
    loop {
        let (send, recv) = conn
            .accept_bi()
            .await
            .map_err(|e| format!("connection ended: {e}"))?;
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut stream = crate::proxy::quic_stream(send, recv);
            let header =
                match tokio::time::timeout(HELLO_TIMEOUT, crate::proxy::Header::read(&mut stream))
                    .await
                {
                    Ok(Ok(h)) => h,
                    _ => return,
                };
            let class = proxy_class(&shared, tunnel_ip, header.dst);
            let tcp =
                tokio::time::timeout(HELLO_TIMEOUT, tokio::net::TcpStream::connect(header.dst))
                    .await;
            let Ok(Ok(mut tcp)) = tcp else {
                let _ = crate::proxy::answer(&mut stream, false).await;
                return;
            };
            let _ = tcp.set_nodelay(true);
            if crate::proxy::answer(&mut stream, true).await.is_err() {
                return;
            }
            if let Ok((up, down)) = crate::proxy::relay(&mut stream, &mut tcp).await {
                count_proxied(&shared, tunnel_ip, class, up, down);
            }
        });
    }
}

/// The kernel MPTCP relay: each connection opens with a proxy header naming a live session
/// (anything else is closed at once); the server connects to the destination and relays.
async fn mptcp_relay(listener: tokio::net::TcpListener, shared: Shared) {
    while let Ok((mut sock, peer)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = sock.set_nodelay(true);
            let header =
                match tokio::time::timeout(HELLO_TIMEOUT, crate::proxy::Header::read(&mut sock))
                    .await
                {
                    Ok(Ok(h)) => h,
                    _ => {
                        warn!(%peer, "MPTCP relay: no valid header; closed");
                        return;
                    }
                };
            let tunnel_ip = lock(&shared).by_key.get(&header.session).copied();
            let Some(tunnel_ip) = tunnel_ip else {
                warn!(%peer, "MPTCP relay: unknown session; closed");
                return;
            };
            let class = proxy_class(&shared, tunnel_ip, header.dst);
            let tcp =
                tokio::time::timeout(HELLO_TIMEOUT, tokio::net::TcpStream::connect(header.dst))
                    .await;
            let Ok(Ok(mut tcp)) = tcp else {
                let _ = crate::proxy::answer(&mut sock, false).await;
                return;
            };
            let _ = tcp.set_nodelay(true);
            if crate::proxy::answer(&mut sock, true).await.is_err() {
                return;
            }
            if let Ok((up, down)) = crate::proxy::relay(&mut sock, &mut tcp).await {
                count_proxied(&shared, tunnel_ip, class, up, down);
            }
        });
    }
}
