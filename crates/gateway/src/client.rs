//! `polypath gw client`: the client gateway. It connects to the server gateway over its
//! first interface and opens a QUIC path over each further one, authenticates, takes the
//! tunnel address, routes and policy the server gives it, and then carries the IP packets
//! its TUN device receives (what the routes send there) through the tunnel, measuring every
//! interface (PMF) and steering each class with its QoS manager.
//!
//! It prints one JSON line when the tunnel is up (`{"ready": ...}`: tunnel address, MTU,
//! paths), logs every QoS decision (and with `--decision-log FILE` writes them as JSON
//! lines), and exits with an error when the session ends otherwise than by SIGINT or
//! SIGTERM, printing a JSON summary of its counters either way.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polypath_io::{Connection, Endpoint, PathStatus as QuicPathStatus, QosClass, SendStream};
use polypath_link::{LinkEvent, LinkEventKind};
use polypath_quic::sched::{PathState, QosMode};
use serde::Serialize;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::control::{self, Control, Decoder, InterfaceInfo};
use crate::framing::{self, DedupWindow, Tunneled};
use crate::pmf::{self, ClockMode, IfaceStats, Kind, Probe};
use crate::policy::{Policy, Transport};
use crate::qos::{Decision, QosManager};
use crate::queue::SendBuffer;
use crate::status::{ClassCounters, IfaceStatus, PathStatus, SessionStatus, Status};
use crate::tun::Tun;

/// One interface of the client gateway as given (`--interface NAME[=LOCAL][@REMOTE]`);
/// [`InterfaceArg::resolve`] finds a device's address when none is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceArg {
    /// Its name, as the policies name it (and, without `=LOCAL`, the network device whose
    /// address is used).
    pub name: String,
    /// Its address, if given.
    pub local: Option<IpAddr>,
    /// The server's address to reach over it (the server address of `--server` if
    /// absent).
    pub remote: Option<IpAddr>,
}

impl std::str::FromStr for InterfaceArg {
    type Err = String;

    /// `NAME=LOCAL_IP`, `NAME=LOCAL_IP@SERVER_IP`, or `NAME` / `NAME@SERVER_IP` for the
    /// address of the network device NAME (looked up when the gateway starts).
    fn from_str(s: &str) -> Result<Self, String> {
        let (spec, remote) = match s.split_once('@') {
            Some((l, r)) => (l, Some(r)),
            None => (s, None),
        };
        let (name, local) = match spec.split_once('=') {
            Some((n, l)) => (
                n,
                Some(
                    l.parse()
                        .map_err(|_| format!("{s:?}: `{l}` is not an IP address"))?,
                ),
            ),
            None => (spec, None),
        };
        if name.is_empty() {
            return Err(format!("{s:?}: the interface needs a name"));
        }
        Ok(InterfaceArg {
            name: name.to_string(),
            local,
            remote: remote
                .map(|r| {
                    r.parse()
                        .map_err(|_| format!("{s:?}: `{r}` is not an IP address"))
                })
                .transpose()?,
        })
    }
}

impl InterfaceArg {
    /// The interface with its address: the one given, or network device NAME's.
    pub fn resolve(&self) -> Result<Interface, String> {
        Ok(Interface {
            name: self.name.clone(),
            local: match self.local {
                Some(a) => a,
                None => device_address(&self.name)?,
            },
            remote: self.remote,
        })
    }
}

/// One interface of the client gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name, as the policies name it.
    pub name: String,
    /// Its address: the local address of its QUIC path and of its probes.
    pub local: IpAddr,
    /// The server's address to reach over it (the server address of `--server` if
    /// absent).
    pub remote: Option<IpAddr>,
}

/// The address of network device `dev` (its first IPv4 address, else its first IPv6 one).
pub fn device_address(dev: &str) -> Result<IpAddr, String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(format!(
            "cannot list the interfaces: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut found: Vec<IpAddr> = Vec::new();
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated name from getifaddrs.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if name.to_bytes() != dev.as_bytes() {
            continue;
        }
        // SAFETY: `ifa_addr` points to a sockaddr of the family it announces.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found.push(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()));
        } else if family == libc::AF_INET6 {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            found.push(IpAddr::from(a.sin6_addr.s6_addr));
        }
    }
    // SAFETY: the list from getifaddrs above.
    unsafe { libc::freeifaddrs(list) };
    found
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| found.first())
        .copied()
        .ok_or_else(|| format!("network device `{dev}` has no address (give NAME=ADDRESS)"))
}

/// What `polypath gw client` was asked to do.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The server gateway (reached over the first interface).
    pub server: SocketAddr,
    /// The interfaces, the first carrying the handshake.
    pub interfaces: Vec<InterfaceArg>,
    /// The client's name.
    pub name: String,
    /// Its pre-shared token.
    pub token: String,
    /// TLS (how the server's certificate is checked).
    pub tls: Arc<rustls::ClientConfig>,
    /// The TUN device's name.
    pub tun: String,
    /// Serve `/metrics` and `/status` here.
    pub status: Option<SocketAddr>,
    /// Write QoS decisions here as JSON lines.
    pub decision_log: Option<PathBuf>,
    /// A link-event feed to apply (interfaces reported down count as down at once).
    pub link_events: Option<PathBuf>,
    /// How one-way delays treat the clocks.
    pub clock: ClockMode,
    /// Congestion controller per path.
    pub cc: String,
}

/// [`ClientOptions`] with every interface's address known.
struct ResolvedOptions {
    server: SocketAddr,
    interfaces: Vec<Interface>,
    name: String,
    token: String,
    tls: Arc<rustls::ClientConfig>,
    tun: String,
    status: Option<SocketAddr>,
    decision_log: Option<PathBuf>,
    link_events: Option<PathBuf>,
    clock: ClockMode,
    cc: String,
}

/// The client's session state, shared by its tasks.
struct State {
    policy: Arc<Policy>,
    manager: QosManager,
    buffer: SendBuffer,
    /// The QUIC path over each policy interface.
    path_of: Vec<Option<u32>>,
    /// Client interface index of each policy interface.
    iface_of: Vec<Option<usize>>,
    stats: Vec<IfaceStats>,
    counters: Vec<ClassCounters>,
    /// Interfaces each stack class uses now (by policy class index: the count).
    in_use: Vec<usize>,
    dedup: DedupWindow,
    next_seq: u64,
    decisions: VecDeque<Decision>,
    bad_datagrams: u64,
    /// Interfaces (client index) reported down by the link-event feed.
    link_down: Vec<bool>,
    /// Interfaces (client index) the stack was told are down (a link-down hint).
    hinted_down: Vec<bool>,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The stack's view of each path of `conn`, for the status endpoints.
pub fn path_status(conn: &Connection) -> Vec<PathStatus> {
    conn.paths()
        .into_iter()
        .map(|p| PathStatus {
            id: p.snapshot.id.0,
            local: p.snapshot.local.to_string(),
            remote: p.snapshot.remote.to_string(),
            state: match p.snapshot.state {
                PathState::Validating => "validating",
                PathState::Validated => "validated",
                PathState::Abandoned => "abandoned",
            },
            srtt_ms: p.snapshot.srtt.as_secs_f64() * 1e3,
            loss_rate: p.snapshot.loss_rate,
            delivery_rate_bps: p.snapshot.delivery_rate.map(|r| r as f64 * 8.0),
            cwnd: p.snapshot.cwnd,
            bytes_sent: p.stats.udp_bytes_sent,
            packets_sent: p.stats.packets_sent,
            packets_lost: p.stats.packets_lost,
        })
        .collect()
}

/// The stack's copies of duplicated datagrams beyond the first, by QoS class.
pub fn stack_copies(conn: &Connection) -> BTreeMap<&'static str, u64> {
    QosClass::BY_DEMAND
        .into_iter()
        .map(|c| (c.name(), conn.datagram_copies(c)))
        .collect()
}

/// Maps the policy's interfaces to the client's (by name, else by address).
fn map_interfaces(
    policy: &Policy,
    ifaces: &[Interface],
    paths: &[Option<u32>],
) -> (Vec<Option<usize>>, Vec<Option<u32>>) {
    let iface_of: Vec<Option<usize>> = policy
        .interfaces
        .iter()
        .map(|r| {
            ifaces
                .iter()
                .position(|i| r.name.as_deref() == Some(i.name.as_str()))
                .or_else(|| ifaces.iter().position(|i| r.ip == Some(i.local)))
        })
        .collect();
    let path_of = iface_of
        .iter()
        .map(|i| i.and_then(|i| paths.get(i).copied().flatten()))
        .collect();
    (iface_of, path_of)
}

/// A JSON summary line of the client's counters (printed at exit).
#[derive(Debug, Serialize)]
struct Summary<'a> {
    ended: &'a str,
    classes: Vec<(&'a str, ClassCounters)>,
    decisions: usize,
    bad_datagrams: u64,
}

/// Runs the client gateway until the session ends (an error) or SIGINT / SIGTERM (a
/// clean exit).
pub async fn run(opts: ClientOptions) -> Result<(), String> {
    if opts.interfaces.is_empty() {
        return Err("at least one --interface is needed".into());
    }
    let resolved = opts
        .interfaces
        .iter()
        .map(InterfaceArg::resolve)
        .collect::<Result<Vec<Interface>, String>>()?;
    let opts = ResolvedOptions {
        interfaces: resolved,
        server: opts.server,
        name: opts.name,
        token: opts.token,
        tls: opts.tls,
        tun: opts.tun,
        status: opts.status,
        decision_log: opts.decision_log,
        link_events: opts.link_events,
        clock: opts.clock,
        cc: opts.cc,
    };
    let locals: Vec<SocketAddr> = opts
        .interfaces
        .iter()
        .map(|i| SocketAddr::new(i.local, 0))
        .collect();
    let endpoint = Endpoint::client(&locals, polypath_quic::EndpointConfig::random())
        .map_err(|e| format!("cannot bind the interfaces' addresses: {e}"))?;
    let bound = endpoint.local_addrs();
    let mut config = polypath_quic::ClientConfig::new(opts.tls.clone());
    config.transport = crate::transport_config(&opts.cc)?;
    let conn = endpoint
        .connect_from(bound[0], config, opts.server, &opts.server.ip().to_string())
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", opts.server))?;
    // A path over every further interface.
    let mut paths: Vec<Option<u32>> = vec![Some(0)];
    for (k, i) in opts.interfaces.iter().enumerate().skip(1) {
        let remote = SocketAddr::new(i.remote.unwrap_or(opts.server.ip()), opts.server.port());
        match conn
            .open_path_to(bound[k], Some(remote), QuicPathStatus::Available)
            .await
        {
            Ok(id) => paths.push(Some(id.0)),
            Err(e) => {
                warn!(iface = %i.name, error = %e, "cannot open a path over this interface");
                paths.push(None);
            }
        }
    }
    // The control stream: hello, then welcome or refusal.
    let (mut ctl_send, mut ctl_recv) = conn
        .open_bi()
        .await
        .map_err(|e| format!("control stream: {e}"))?;
    let _ = ctl_send.set_class(QosClass::Critical);
    let hello = Control::Hello {
        version: control::VERSION,
        client: opts.name.clone(),
        token: opts.token.clone(),
        interfaces: opts
            .interfaces
            .iter()
            .zip(&paths)
            .map(|(i, p)| InterfaceInfo {
                name: i.name.clone(),
                ip: i.local,
                path_id: *p,
            })
            .collect(),
    };
    ctl_send
        .write_all(&hello.encode())
        .await
        .map_err(|e| format!("control stream: {e}"))?;
    let mut decoder = Decoder::default();
    let reply = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(m) = decoder.next_message().map_err(|e| e.to_string())? {
                return Ok::<Control, String>(m);
            }
            match ctl_recv.read_chunk(16 * 1024).await {
                Ok(Some(c)) => decoder.push(&c),
                Ok(None) => return Err("the server closed the control stream".to_string()),
                Err(e) => {
                    return Err(match conn.close_reason() {
                        Some(r) => format!("the server ended the session: {r}"),
                        None => format!("control stream: {e}"),
                    });
                }
            }
        }
    })
    .await
    .map_err(|_| "no answer to hello within 10 s".to_string())??;
    let (session, tunnel_ip, routes, mtu, pmf_port, relay_port, policy_text, policy_name) =
        match reply {
            Control::Welcome {
                session,
                tunnel_ip,
                routes,
                mtu,
                pmf_port,
                relay_port,
                policy,
                policy_name,
                ..
            } => (
                session,
                tunnel_ip,
                routes,
                mtu,
                pmf_port,
                relay_port,
                policy,
                policy_name,
            ),
            Control::Refused { reason } => return Err(format!("refused by the server: {reason}")),
            other => {
                conn.close(control::CLOSE_PROTOCOL, b"expected welcome");
                return Err(format!("expected welcome, got {}", other.kind()));
            }
        };
    let session_key = u64::from_str_radix(&session, 16)
        .map_err(|_| format!("the server's session id {session:?} is not hex"))?;
    let policy = Arc::new(Policy::parse(&policy_text, &policy_name).map_err(|e| {
        conn.close(control::CLOSE_PROTOCOL, b"bad policy");
        format!("the server's policy: {e}")
    })?);
    let now = Instant::now();
    let (iface_of, path_of) = map_interfaces(&policy, &opts.interfaces, &paths);
    let classes = policy.all_classes().count();
    let state: Shared = Arc::new(Mutex::new(State {
        manager: QosManager::new(&policy, now),
        buffer: SendBuffer::new(&policy, now),
        path_of,
        iface_of,
        stats: vec![IfaceStats::default(); opts.interfaces.len()],
        counters: vec![ClassCounters::default(); classes],
        in_use: vec![0; classes],
        dedup: DedupWindow::default(),
        next_seq: 0,
        decisions: VecDeque::new(),
        bad_datagrams: 0,
        link_down: vec![false; opts.interfaces.len()],
        hinted_down: vec![false; opts.interfaces.len()],
        policy,
    }));

    // The tunnel MTU: the server's, or less if the paths carry less (after path MTU
    // discovery has had a moment).
    let deadline = Instant::now() + Duration::from_secs(1);
    let want = usize::from(mtu) + framing::MAX_OVERHEAD;
    while conn.max_datagram_size().unwrap_or(0) < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fits = conn
        .max_datagram_size()
        .unwrap_or(0)
        .saturating_sub(framing::MAX_OVERHEAD);
    let tun_mtu = u16::try_from(fits).unwrap_or(u16::MAX).min(mtu).max(576);
    let tun = Arc::new(
        Tun::create(&opts.tun, tun_mtu, tunnel_ip)
            .map_err(|e| format!("TUN device {}: {e}", opts.tun))?,
    );
    for r in &routes {
        tun.route(r, Some(tunnel_ip))
            .map_err(|e| format!("route {r}: {e}"))?;
    }

    let status = Status::new("client");
    let mut tasks = Vec::new();
    // Classes whose TCP is terminated here and carried on QUIC streams or kernel MPTCP.
    let mut _redirect = None;
    {
        let policy = lock(&state).policy.clone();
        let mut rules = Vec::new();
        for (c, rule) in policy.all_classes().enumerate() {
            if rule.transport == Transport::Datagram {
                continue;
            }
            if rule.transport == Transport::Mptcp {
                if relay_port == 0 {
                    return Err(format!(
                        "class `{}` wants kernel MPTCP but the server has no relay",
                        rule.name
                    ));
                }
                let ifaces: Vec<(String, IpAddr)> = opts
                    .interfaces
                    .iter()
                    .map(|i| (i.name.clone(), i.local))
                    .collect();
                crate::proxy::add_mptcp_endpoints(&ifaces);
            }
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| format!("proxy listener: {e}"))?;
            let port = listener.local_addr().map_err(|e| e.to_string())?.port();
            rules.push((rule.matcher.clone(), port));
            tasks.push(tokio::spawn(proxy_accept(
                listener,
                Proxied {
                    transport: rule.transport,
                    conn: conn.clone(),
                    class: c,
                    qos_class: rule.qos_class,
                    session: session_key,
                    relay: SocketAddr::new(opts.server.ip(), relay_port),
                    state: state.clone(),
                },
            )));
            info!(class = %rule.name, transport = ?rule.transport, port, "TCP of the class is proxied");
        }
        if !rules.is_empty() {
            let mut exempt: Vec<IpAddr> = vec![opts.server.ip()];
            exempt.extend(opts.interfaces.iter().filter_map(|i| i.remote));
            _redirect =
                Some(crate::proxy::Redirect::install(&rules, &exempt).map_err(|e| e.to_string())?);
        }
    }
    if let Some(addr) = opts.status {
        let (bound, task) = status
            .serve(addr)
            .await
            .map_err(|e| format!("status {addr}: {e}"))?;
        info!(%bound, "status and metrics");
        tasks.push(task);
    }
    let mut decision_log = match &opts.decision_log {
        Some(p) => Some(
            std::fs::File::create(p).map_err(|e| format!("decision log {}: {e}", p.display()))?,
        ),
        None => None,
    };
    // Measurement sockets, one per interface.
    let mut probes = Vec::new();
    for i in &opts.interfaces {
        let sock = tokio::net::UdpSocket::bind(SocketAddr::new(i.local, 0))
            .await
            .map_err(|e| format!("measurement socket on {}: {e}", i.local))?;
        sock.connect(SocketAddr::new(
            i.remote.unwrap_or(opts.server.ip()),
            pmf_port,
        ))
        .await
        .map_err(|e| format!("measurement socket on {}: {e}", i.local))?;
        probes.push(Arc::new(sock));
    }
    let notify = Arc::new(Notify::new());
    tasks.push(tokio::spawn(uplink(
        tun.clone(),
        state.clone(),
        notify.clone(),
    )));
    tasks.push(tokio::spawn(dispatch(
        conn.clone(),
        state.clone(),
        notify.clone(),
        tun.clone(),
        tunnel_ip,
    )));
    tasks.push(tokio::spawn(downlink(
        conn.clone(),
        tun.clone(),
        state.clone(),
    )));
    for (k, sock) in probes.iter().enumerate() {
        tasks.push(tokio::spawn(probe_answers(
            sock.clone(),
            k,
            state.clone(),
            opts.clock,
        )));
    }
    tasks.push(tokio::spawn(policy_updates(
        conn.clone(),
        state.clone(),
        opts.interfaces.clone(),
        paths.clone(),
    )));
    if let Some(feed) = &opts.link_events {
        tasks.push(tokio::spawn(link_feed(
            feed.clone(),
            conn.clone(),
            state.clone(),
            opts.interfaces.clone(),
        )));
    }
    let ready = serde_json::json!({
        "ready": {
            "session": session,
            "tunnel_ip": tunnel_ip,
            "mtu": tun_mtu,
            "routes": routes,
            "paths": opts.interfaces.iter().zip(&paths).map(|(i, p)| serde_json::json!({"iface": i.name, "local": i.local, "path_id": p})).collect::<Vec<_>>(),
        }
    });
    println!("{ready}");
    let _ = std::io::stdout().flush();
    info!(%session, %tunnel_ip, mtu = tun_mtu, "tunnel up");

    // The measurement and QoS loop runs here, beside the end conditions.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let interval = lock(&state).policy.probe_interval;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut seq = 0u64;
    let mut was_up = vec![false; opts.interfaces.len()];
    let ended: Result<(), String> = loop {
        // When an interface that is up will have been silent for the detection time: the
        // manager looks then, not at the next probe tick.
        let detect_at = {
            let s = lock(&state);
            let now_ns = pmf::wall_ns();
            let (detection, interval) = (s.policy.detection, s.policy.probe_interval);
            s.stats
                .iter()
                .zip(&was_up)
                .filter(|(_, up)| **up)
                .filter_map(|(st, _)| {
                    let limit = st.silence_limit(detection, interval).as_nanos() as u64;
                    st.last_answer_ns.map(|t| t + limit + 1)
                })
                .min()
                .map(|due| {
                    tokio::time::Instant::now() + Duration::from_nanos(due.saturating_sub(now_ns))
                })
        };
        let detection_timer = async {
            match detect_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = detection_timer => {
                let trains = qos_step(&conn, &state, &mut ctl_send, &mut decision_log, &opts.interfaces, &mut was_up).await;
                for k in trains {
                    send_train(&probes[k], session_key, k as u8, seq, &state);
                }
            }
            _ = tick.tick() => {
                seq += 1;
                let now_ns = pmf::wall_ns();
                for (k, sock) in probes.iter().enumerate() {
                    let p = Probe { kind: Kind::Probe, session: session_key, iface: k as u8, seq, t1: pmf::wall_ns(), t2: 0, t3: 0, extra: 0 };
                    lock(&state).stats[k].on_sent(seq, now_ns);
                    let _ = sock.try_send(&p.encode(0));
                }
                let trains = qos_step(&conn, &state, &mut ctl_send, &mut decision_log, &opts.interfaces, &mut was_up).await;
                for k in trains {
                    send_train(&probes[k], session_key, k as u8, seq, &state);
                }
                refresh_status(&status, &conn, &state, &opts.interfaces, &session, tunnel_ip);
            }
            e = conn.closed() => break Err(format!("the session ended: {e}")),
            _ = term.recv() => break Ok(()),
            _ = tokio::signal::ctrl_c() => break Ok(()),
        }
    };
    if ended.is_ok() {
        conn.close(control::CLOSE_OK, b"client gateway stopping");
    }
    for t in tasks {
        t.abort();
    }
    {
        let s = lock(&state);
        let names: Vec<&str> = s.policy.all_classes().map(|c| c.name.as_str()).collect();
        let summary = Summary {
            ended: match &ended {
                Ok(()) => "signal",
                Err(e) => e.as_str(),
            },
            classes: names
                .iter()
                .copied()
                .zip(s.counters.iter().copied())
                .collect(),
            decisions: s.decisions.len(),
            bad_datagrams: s.bad_datagrams,
        };
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    ended
}

/// One measurement and QoS step: the manager's view of every interface, its decisions
/// applied (scheduler, server, log), link hints for interfaces that went down or came up.
/// Returns the interfaces that came (back) up, for a capacity train.
async fn qos_step(
    conn: &Connection,
    state: &Shared,
    ctl: &mut SendStream,
    log: &mut Option<std::fs::File>,
    ifaces: &[Interface],
    was_up: &mut [bool],
) -> Vec<usize> {
    let now = Instant::now();
    let now_ns = pmf::wall_ns();
    let (decisions, config, transitions) = {
        let mut s = lock(state);
        let (detection, interval) = (s.policy.detection, s.policy.probe_interval);
        let per_client: Vec<_> = (0..s.stats.len())
            .map(|k| {
                let mut m = s.stats[k].metrics(now_ns, detection, interval);
                m.up &= !s.link_down[k];
                m
            })
            .collect();
        let metrics: Vec<_> = s
            .iter_map()
            .map(|i| i.and_then(|k| per_client.get(k).copied()))
            .collect();
        let mut transitions = Vec::new();
        for (k, m) in per_client.iter().enumerate() {
            if m.up != was_up[k] {
                // The stack hears of an interface coming up only after it heard it go down
                // (a link-up hint makes it probe the path before using it again).
                transitions.push((k, m.up, !m.up || s.hinted_down[k]));
                s.hinted_down[k] = !m.up;
                was_up[k] = m.up;
                if !m.up {
                    s.stats[k].reset_delays();
                }
            }
        }
        let mut decisions = s.manager.evaluate(now, &metrics);
        for d in &mut decisions {
            d.unix_s = now_ns as f64 / 1e9;
        }
        let config = (!decisions.is_empty()).then(|| s.manager.stack_config(&s.path_of));
        for d in &decisions {
            let names = d.classes.clone();
            for (c, rule) in s.policy.clone().all_classes().enumerate() {
                if names.contains(&rule.name) {
                    s.counters[c].switches += 1;
                    s.in_use[c] = d.interfaces.len();
                }
            }
            if s.decisions.len() == crate::status::DECISIONS_KEPT {
                s.decisions.pop_front();
            }
            s.decisions.push_back(d.clone());
        }
        (decisions, config, transitions)
    };
    let mut trains = Vec::new();
    for (k, up, hint) in transitions {
        let event = if up {
            trains.push(k);
            LinkEventKind::LinkUp {
                cell: polypath_link::CellId(k as u32),
            }
        } else {
            LinkEventKind::LinkDown {
                cell: Some(polypath_link::CellId(k as u32)),
                reason: polypath_link::DownReason::NoCoverage,
            }
        };
        info!(iface = %ifaces[k].name, up, "interface {}", if up { "up" } else { "down" });
        if hint {
            let _ = conn.handle_link_event(
                &LinkEvent::new(now_ns, 0, k as u16, event),
                Some(ifaces[k].local),
            );
        }
    }
    if let Some(config) = config {
        let json = serde_json::to_value(&config).unwrap_or_default();
        if let Err(e) = conn.configure_scheduler("policy", &json.to_string()) {
            warn!(error = %e, "the scheduler refused the QoS manager's configuration");
        }
        let reason = decisions
            .iter()
            .map(|d| format!("{}: {}", d.qos_class, d.reason))
            .collect::<Vec<_>>()
            .join("; ");
        let steer = Control::Steer {
            scheduler: json,
            reason: reason.clone(),
        };
        if let Err(e) = ctl.write_all(&steer.encode()).await {
            warn!(error = %e, "cannot steer the server");
        }
        for d in &decisions {
            info!(
                qos_class = d.qos_class,
                classes = %d.classes.join(","),
                from = ?d.from,
                to = ?d.to,
                interfaces = %d.interfaces.join(","),
                reason = %d.reason,
                "QoS decision"
            );
            if let Some(f) = log.as_mut() {
                let _ = writeln!(f, "{}", serde_json::to_string(d).unwrap_or_default());
                let _ = f.flush();
            }
        }
    }
    trains
}

impl State {
    /// The client interface of each policy interface.
    fn iter_map(&self) -> impl Iterator<Item = Option<usize>> + '_ {
        self.iface_of.iter().copied()
    }
}

/// Sends a capacity train on interface `k`.
fn send_train(sock: &tokio::net::UdpSocket, session: u64, k: u8, seq: u64, state: &Shared) {
    lock(state).stats[usize::from(k)].trains += 1;
    for i in 0..pmf::TRAIN_PACKETS {
        let p = Probe {
            kind: Kind::Train,
            session,
            iface: k,
            seq,
            t1: pmf::wall_ns(),
            t2: 0,
            t3: 0,
            extra: i,
        };
        let _ = sock.try_send(&p.encode(pmf::TRAIN_PACKET_SIZE));
    }
}

/// Reads the answers and train reports of interface `k`.
async fn probe_answers(
    sock: Arc<tokio::net::UdpSocket>,
    k: usize,
    state: Shared,
    clock: ClockMode,
) {
    let mut buf = vec![0u8; 2048];
    while let Ok(n) = sock.recv(&mut buf).await {
        let t4 = pmf::wall_ns();
        let Some(p) = Probe::decode(&buf[..n]) else {
            continue;
        };
        let mut s = lock(&state);
        match p.kind {
            Kind::Answer => s.stats[k].on_answer(&p, t4, clock),
            Kind::TrainReport => s.stats[k].on_train_report(&p),
            Kind::Probe | Kind::Train => {}
        }
    }
}

/// TUN to the sending buffer.
async fn uplink(tun: Arc<Tun>, state: Shared, notify: Arc<Notify>) {
    let mut buf = vec![0u8; 65536];
    loop {
        let n = match tun.recv(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, "TUN read failed; the uplink stops");
                return;
            }
        };
        let packet = Bytes::copy_from_slice(&buf[..n]);
        let info = crate::classify::parse(&packet);
        let mut s = lock(&state);
        let class = s.policy.classify(info.as_ref());
        if !s.buffer.push(class, packet) {
            s.counters[class].dropped += 1;
        }
        drop(s);
        notify.notify_one();
    }
}

/// The sending buffer to the connection, as fast as the stack takes each class.
async fn dispatch(
    conn: Connection,
    state: Shared,
    notify: Arc<Notify>,
    tun: Arc<Tun>,
    tunnel_ip: IpAddr,
) {
    loop {
        let mut too_big = Vec::new();
        let (blocked, release) = {
            let mut s = lock(&state);
            let policy = s.policy.clone();
            let stack_class = |c: usize| policy.all_classes().nth(c).map(|r| r.qos_class);
            let mut blocked: Option<QosClass> = None;
            loop {
                let now = Instant::now();
                let ready = |c: usize| {
                    stack_class(c).is_some_and(|q| {
                        conn.datagram_queued_bytes_of(q) < crate::STACK_QUEUE_BYTES
                    })
                };
                let Some((c, packet)) = s.buffer.pop(now, ready) else {
                    break;
                };
                let Some(rule) = policy.all_classes().nth(c) else {
                    continue;
                };
                let seq = (rule.mode == QosMode::Duplicate).then(|| {
                    s.next_seq += 1;
                    s.next_seq
                });
                let framed = framing::encode(&packet, seq);
                let copies = (s.in_use[c] as u64).saturating_sub(1);
                let counters = &mut s.counters[c];
                counters.packets_up += 1;
                counters.bytes_up += packet.len() as u64;
                if seq.is_some() {
                    counters.duplicates_sent += copies;
                }
                match conn.send_datagram_with_class(framed, rule.qos_class) {
                    Ok(()) => {}
                    Err(polypath_io::DatagramError::Refused(
                        polypath_quic::datagrams::SendDatagramError::TooLarge { max, .. },
                    )) => {
                        // The paths carry less than the TUN device's MTU now: the sender
                        // hears the size that fits.
                        s.counters[c].dropped += 1;
                        let mtu = u16::try_from(max.saturating_sub(framing::MAX_OVERHEAD))
                            .unwrap_or(u16::MAX);
                        if let Some(icmp) = crate::icmp::packet_too_big(&packet, mtu, tunnel_ip) {
                            too_big.push(icmp);
                        }
                    }
                    Err(_) => s.counters[c].dropped += 1,
                }
            }
            // Which class is waiting for the stack (the first queued one), if any.
            if !s.buffer.is_empty() {
                blocked = policy
                    .all_classes()
                    .map(|r| r.qos_class)
                    .find(|q| conn.datagram_queued_bytes_of(*q) >= crate::STACK_QUEUE_BYTES);
            }
            (blocked, s.buffer.next_release(Instant::now()))
        };
        for icmp in too_big {
            let _ = tun.send(&icmp);
        }
        let room = async {
            match blocked {
                Some(q) => conn.datagram_room(Some(q), crate::STACK_QUEUE_BYTES).await,
                None => std::future::pending().await,
            }
        };
        let timer = async {
            match release {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = notify.notified() => {}
            r = room => if r.is_err() { return },
            _ = timer => {}
        }
    }
}

/// Tunnel datagrams to the TUN device.
async fn downlink(conn: Connection, tun: Arc<Tun>, state: Shared) {
    while let Ok(d) = conn.recv_datagram().await {
        let mut s = lock(&state);
        let (seq, packet) = match framing::decode(&d) {
            Ok(Tunneled::Packet { seq, packet }) => (seq, packet),
            Ok(Tunneled::UnknownContext(_)) | Err(_) => {
                s.bad_datagrams += 1;
                continue;
            }
        };
        let info = crate::classify::parse(&packet);
        let class = s.policy.classify(info.as_ref());
        if let Some(seq) = seq
            && !s.dedup.accept(seq)
        {
            s.counters[class].duplicates_discarded += 1;
            continue;
        }
        s.counters[class].packets_down += 1;
        s.counters[class].bytes_down += packet.len() as u64;
        drop(s);
        if let Err(e) = tun.send(&packet) {
            warn!(error = %e, "TUN write failed; the downlink stops");
            return;
        }
    }
}

/// Policy updates the server sends on unidirectional streams.
async fn policy_updates(
    conn: Connection,
    state: Shared,
    ifaces: Vec<Interface>,
    paths: Vec<Option<u32>>,
) {
    while let Ok(mut recv) = conn.accept_uni().await {
        let mut decoder = Decoder::default();
        let msg = loop {
            match decoder.next_message() {
                Ok(Some(m)) => break Some(m),
                Ok(None) => {}
                Err(e) => {
                    warn!(error = %e, "malformed policy update");
                    break None;
                }
            }
            match recv.read_chunk(16 * 1024).await {
                Ok(Some(c)) => decoder.push(&c),
                _ => break None,
            }
        };
        let Some(Control::Policy {
            policy,
            policy_name,
        }) = msg
        else {
            continue;
        };
        match Policy::parse(&policy, &policy_name) {
            Ok(p) => {
                let now = Instant::now();
                let mut s = lock(&state);
                let (iface_of, path_of) = map_interfaces(&p, &ifaces, &paths);
                let classes = p.all_classes().count();
                s.manager = QosManager::new(&p, now);
                s.buffer = SendBuffer::new(&p, now);
                s.iface_of = iface_of;
                s.path_of = path_of;
                s.counters.resize(classes, ClassCounters::default());
                s.in_use.resize(classes, 0);
                s.policy = Arc::new(p);
                info!(policy = %policy_name, "policy reloaded by the server");
            }
            Err(e) => warn!(error = %e, "the server's new policy does not load; the old one stays"),
        }
    }
}

/// Applies the host's link-event feed: to the connection (link hints) and to the QoS
/// manager (an interface whose link is down is down).
async fn link_feed(path: PathBuf, conn: Connection, state: Shared, ifaces: Vec<Interface>) {
    let Ok(mut feed) = polypath_io::link_feed::LinkFeed::connect(&path).await else {
        warn!(feed = %path.display(), "cannot read the link-event feed");
        return;
    };
    while let Some(ev) = feed.next_event().await {
        let Some(k) = ifaces.iter().position(|i| Some(i.local) == ev.local) else {
            continue;
        };
        match ev.event.event {
            LinkEventKind::LinkDown { .. } => lock(&state).link_down[k] = true,
            LinkEventKind::LinkUp { .. } => lock(&state).link_down[k] = false,
            _ => {}
        }
        let _ = conn.handle_link_event(&ev.event, ev.local);
    }
}

/// Refreshes the status snapshot.
fn refresh_status(
    status: &Status,
    conn: &Connection,
    state: &Shared,
    ifaces: &[Interface],
    session: &str,
    tunnel_ip: IpAddr,
) {
    let paths = path_status(conn);
    let now_ns = pmf::wall_ns();
    let mut s = lock(state);
    let (detection, interval) = (s.policy.detection, s.policy.probe_interval);
    let interfaces = ifaces
        .iter()
        .enumerate()
        .map(|(k, i)| IfaceStatus {
            name: i.name.clone(),
            ip: i.local.to_string(),
            path_id: s
                .iface_of
                .iter()
                .position(|x| *x == Some(k))
                .and_then(|p| s.path_of[p]),
            metrics: s.stats[k].metrics(now_ns, detection, interval),
        })
        .collect();
    let mut counters = s.counters.clone();
    for (c, q) in counters.iter_mut().zip(s.buffer.stats()) {
        c.dropped = c.dropped.max(q.dropped);
    }
    let sess = SessionStatus {
        client: String::new(),
        tunnel_ip: tunnel_ip.to_string(),
        policy: s.policy.file.clone(),
        classes: s.policy.all_classes().map(|c| c.name.clone()).collect(),
        counters,
        in_use: s
            .decisions
            .iter()
            .map(|d| (d.qos_class.to_string(), d.interfaces.clone()))
            .collect(),
        paths,
        interfaces,
        decisions: s.decisions.iter().cloned().collect(),
        bad_datagrams: s.bad_datagrams,
        stack_datagrams_dropped: conn.datagrams_dropped(),
        stack_datagram_copies: stack_copies(conn),
    };
    drop(s);
    status.lock().sessions.insert(session.to_string(), sess);
}

/// What a proxy listener needs.
#[derive(Clone)]
struct Proxied {
    transport: Transport,
    conn: Connection,
    class: usize,
    qos_class: QosClass,
    session: u64,
    relay: SocketAddr,
    state: Shared,
}

/// Accepts the redirected TCP connections of one class and carries each on a QUIC stream or
/// an MPTCP connection to the server gateway.
async fn proxy_accept(listener: tokio::net::TcpListener, p: Proxied) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while let Ok((mut app, _)) = listener.accept().await {
        let p = p.clone();
        tokio::spawn(async move {
            let Ok(dst) = crate::proxy::original_destination(&app) else {
                return;
            };
            let _ = app.set_nodelay(true);
            let header = crate::proxy::Header {
                session: p.session,
                dst,
            }
            .encode();
            let relayed = match p.transport {
                Transport::Stream => {
                    let Ok((send, recv)) = p.conn.open_bi().await else {
                        return;
                    };
                    let _ = send.set_class(p.qos_class);
                    let mut s = crate::proxy::quic_stream(send, recv);
                    let mut answer = [0u8; 1];
                    if s.write_all(&header).await.is_err()
                        || s.read_exact(&mut answer).await.is_err()
                        || answer[0] != crate::proxy::OK
                    {
                        return;
                    }
                    crate::proxy::relay(&mut app, &mut s).await
                }
                Transport::Mptcp => {
                    let Ok(mut s) = crate::proxy::mptcp_connect(p.relay).await else {
                        warn!(relay = %p.relay, "cannot reach the server's MPTCP relay");
                        return;
                    };
                    let mut answer = [0u8; 1];
                    if s.write_all(&header).await.is_err()
                        || s.read_exact(&mut answer).await.is_err()
                        || answer[0] != crate::proxy::OK
                    {
                        return;
                    }
                    crate::proxy::relay(&mut app, &mut s).await
                }
                Transport::Datagram => return,
            };
            if let Ok((up, down)) = relayed {
                let mut s = lock(&p.state);
                if let Some(c) = s.counters.get_mut(p.class) {
                    c.bytes_up += up;
                    c.bytes_down += down;
                }
            }
        });
    }
}
