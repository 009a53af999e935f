//! Building polypath-quic configurations from command-line options: transport policies,
//! qlog output, TLS certificates and verification, key logging.

use clap::Args;
use polypath_io::{Connection, QlogDir};
use polypath_quic::crypto::{
    CipherSuites, ServerVerification, client_config_with, load_certificate_chain, load_private_key,
    self_signed_certificate, server_config_with,
};
use polypath_quic::pm::{PathManager, PathManagerFactory};
use polypath_quic::registry::{self, PathManagerTraits, Policy};
use polypath_quic::sched::{Scheduler, SchedulerFactory, check_weight_count};
use polypath_quic::{EndpointConfig, TransportConfig};
use polypath_sim::traffic::AppRate;
use rustls::pki_types::CertificateDer;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Highest path ID both sides allow when multipath is on (up to 9 paths).
pub const MAX_PATH_ID: u32 = 8;

/// Options shared by `server` and `client`.
#[derive(Debug, Args, Clone)]
pub struct TransportArgs {
    /// Packet scheduler: minrtt, rr, redundant, wrr, ecf, blest, lamp5g, qos.
    #[arg(long, default_value = "minrtt")]
    pub scheduler: String,
    /// Congestion controller: cubic, newreno, bbr, lia, olia.
    #[arg(long, default_value = "cubic")]
    pub cc: String,
    /// Path manager: default (also manual: the client opens one path per --local address),
    /// backup (the same, paths after the first as backups), fullmesh (the connection opens
    /// and re-opens them itself), lamp5g (also mbb), lamp5g_throughput, failover (abandon a
    /// path that stopped acknowledging while another works). The names are the simulator's
    /// (the policy registry, `polypath_quic::registry`).
    #[arg(long, default_value = "default")]
    pub path_manager: String,
    /// A parameter of the path manager, `KEY=VALUE`, repeatable: e.g. `add_on=A1` for
    /// lamp5g with one modem per cell (the target modem's A1 adds the path; by default A4
    /// and B1 add, A2 removes), `trigger=throughput`, `split_window=n`. The client's lamp5g
    /// opens paths from its --local addresses; the server's lamp5g splits the window of
    /// every path the client adds (`split_peer_paths=y`, as in the simulator).
    #[arg(long = "path-manager-param", value_name = "KEY=VALUE")]
    pub path_manager_params: Vec<String>,
    /// Path weights for schedulers that take them (wrr): one per path in path-ID order,
    /// e.g. `30,100,1`, or `path_id=weight` pairs such as `1=30,0=100`.
    #[arg(long, value_name = "LIST")]
    pub weights: Option<String>,
    /// Change the weights of a running connection: `TIME=LIST`, e.g. `2s=1,3` or
    /// `500ms=30,100,1`, TIME counted from the connection's establishment; repeatable.
    #[arg(long = "weights-at", value_name = "TIME=LIST", value_parser = parse_weight_change)]
    pub weights_at: Vec<WeightChange>,
    /// Write one qlog file (JSON-SEQ, .sqlog) per connection into this directory.
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<PathBuf>,
    /// A fixed connection-level receive window this endpoint advertises and keeps granting
    /// (initial_max_data): a size such as `256kB` or `3MiB`, or `linux` for what a Linux TCP
    /// receiver advertises at most with default sysctls (3 MiB). Default: auto-tuned, from
    /// 1.5 MiB up to 16 MiB.
    #[arg(long, value_name = "SIZE", value_parser = polypath_sim::quic::parse_receive_window)]
    pub receive_window: Option<u64>,
    /// A fixed per-stream receive window (initial_max_stream_data_*), as --receive-window.
    /// Default: auto-tuned, from 1 MiB up to 8 MiB.
    #[arg(long, value_name = "SIZE", value_parser = polypath_sim::quic::parse_receive_window)]
    pub stream_receive_window: Option<u64>,
    /// The sending application's rate limit (e.g. `100Mbit/s`): the side that sends the
    /// object (the client on an upload, the server on a download) writes it no faster,
    /// like a rate-limited iperf client. Default: unlimited.
    #[arg(long, value_name = "RATE", value_parser = parse_app_rate)]
    pub rate: Option<f64>,
    /// With --rate: the sender writes messages of this size (e.g. 100B, a device's
    /// message) instead of a millisecond's worth at a time.
    #[arg(long, value_name = "SIZE", value_parser = crate::transfer::parse_size,
          requires = "rate")]
    pub message_size: Option<u64>,
    /// Never mark packets ECT(0) (ECN, RFC 9000 section 13.4; by default each path marks
    /// once it passes ECN validation). Received marks are reported either way.
    #[arg(long)]
    pub no_ecn: bool,
    /// TLS cipher suites offered (client) or accepted (server): `all`, or `chacha20` for
    /// ChaCha20-Poly1305 only.
    #[arg(long, value_enum, default_value_t = Cipher::All)]
    pub cipher: Cipher,
    /// Start a 1-RTT key update every N packets sent (RFC 9001 section 6), besides those
    /// the AEAD limits require.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub key_update: Option<u64>,
    /// QUIC versions, comma-separated, most preferred first: `v1`, `v2` (RFC 9369). The
    /// client sends its first Initial in the first one and offers them all
    /// (version_information, RFC 9368); the server accepts these and answers a client that
    /// offers one it prefers in that version (compatible version negotiation). Default:
    /// `v1` for the client (no version_information, as a v1-only endpoint), `v1,v2` for
    /// the server (both accepted, no switch).
    #[arg(long, value_name = "LIST", value_parser = parse_quic_versions)]
    pub quic_version: Option<QuicVersions>,
}

/// The `--quic-version` list: QUIC version numbers, most preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicVersions(pub Vec<u32>);

/// Parses `--quic-version`: `v1`, `v2` or a comma-separated list of them.
fn parse_quic_versions(text: &str) -> Result<QuicVersions, String> {
    let mut versions = Vec::new();
    for name in text.split(',') {
        let version = match name.trim() {
            "v1" | "1" => polypath_quic::VERSION_1,
            "v2" | "2" => polypath_quic::VERSION_2,
            other => return Err(format!("unknown QUIC version {other:?}: v1 or v2")),
        };
        if !versions.contains(&version) {
            versions.push(version);
        }
    }
    Ok(QuicVersions(versions))
}

/// `--cipher`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cipher {
    /// AES-128-GCM, AES-256-GCM and ChaCha20-Poly1305.
    All,
    /// ChaCha20-Poly1305 only.
    Chacha20,
}

impl Cipher {
    /// The library's cipher suite set.
    pub fn suites(self) -> CipherSuites {
        match self {
            Cipher::All => CipherSuites::All,
            Cipher::Chacha20 => CipherSuites::ChaCha20Only,
        }
    }
}

/// Parses `--rate`, bit/s.
fn parse_app_rate(text: &str) -> Result<f64, String> {
    let bits = polypath_sim::scenario::units::parse_rate(text)?;
    if bits <= 0.0 {
        return Err(format!("rate {text:?} must be positive"));
    }
    Ok(bits)
}

/// A change of the scheduler's weights during a connection (`--weights-at`).
#[derive(Debug, Clone, PartialEq)]
pub struct WeightChange {
    /// When, after the connection was established.
    pub after: Duration,
    /// The new weights, as `--weights` takes them.
    pub weights: String,
}

/// Parses `TIME=LIST`: TIME a duration with its unit (`2s`, `500ms`).
fn parse_weight_change(text: &str) -> Result<WeightChange, String> {
    let (time, weights) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected TIME=LIST, e.g. 2s=1,3"))?;
    let after = polypath_scenario::units::parse_duration(time)?;
    if weights.is_empty() {
        return Err(format!("{text:?}: no weights after `=`"));
    }
    Ok(WeightChange {
        after,
        weights: weights.to_string(),
    })
}

/// One `--weights-at` change as it went, for the summaries.
#[derive(Debug, Clone, Serialize)]
pub struct WeightChangeReport {
    /// The new weights.
    pub weights: String,
    /// When it was due, seconds after the connection was established.
    pub due_s: f64,
    /// Whether it was applied (a change due after the transfer ended is not).
    pub applied: bool,
    /// Payload bytes each path had sent when it was applied, in path-ID order.
    pub path_bytes_sent: Vec<u64>,
}

/// The task applying `--weights-at` changes; stops it when dropped.
pub struct WeightChanges {
    task: Option<tokio::task::JoinHandle<()>>,
    planned: Vec<WeightChange>,
    applied: Arc<Mutex<Vec<WeightChangeReport>>>,
}

impl WeightChanges {
    /// Every planned change, applied or not, in time order. Changes not applied are also
    /// reported on standard error: an example that changes nothing should say so.
    pub fn report(&self) -> Vec<WeightChangeReport> {
        let applied = self
            .applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut all = applied.clone();
        for change in self.planned.iter().skip(applied.len()) {
            eprintln!(
                "warning: --weights-at {}s={} was not applied: the transfer ended before",
                change.after.as_secs_f64(),
                change.weights
            );
            all.push(WeightChangeReport {
                weights: change.weights.clone(),
                due_s: change.after.as_secs_f64(),
                applied: false,
                path_bytes_sent: Vec::new(),
            });
        }
        all
    }
}

impl Drop for WeightChanges {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A scheduler factory whose schedulers get run-time parameters (such as `weights`) before
/// the connection's first packet.
struct ConfiguredScheduler {
    inner: Arc<dyn SchedulerFactory>,
    params: Vec<(&'static str, String)>,
}

impl SchedulerFactory for ConfiguredScheduler {
    fn build(&self) -> Box<dyn Scheduler> {
        let mut scheduler = self.inner.build();
        for (key, value) in &self.params {
            // Checked in `TransportArgs::transport` on a scheduler of the same factory.
            if let Err(e) = scheduler.configure(key, value) {
                tracing::warn!(key, value, error = %e, "scheduler parameter refused");
            }
        }
        scheduler
    }
}

/// A path manager factory whose path managers get parameters (`--path-manager-param`, and
/// the implied ones) when they are built.
struct ConfiguredPathManager {
    inner: Arc<dyn PathManagerFactory>,
    params: Vec<(String, String)>,
}

impl PathManagerFactory for ConfiguredPathManager {
    fn build(&self) -> Box<dyn PathManager> {
        let mut pm = self.inner.build();
        for (key, value) in &self.params {
            // Checked in `TransportArgs::transport` on a path manager of the same factory.
            if let Err(e) = pm.configure(key, value) {
                tracing::warn!(key, value, error = %e, "path manager parameter refused");
            }
        }
        pm
    }
}

/// Which end a transport configuration is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `polypath client`.
    Client,
    /// `polypath server` (and the server of `bench`).
    Server,
}

impl TransportArgs {
    /// The `--quic-version` list, or `end`'s default.
    pub fn quic_versions(&self, end: End) -> Vec<u32> {
        use polypath_quic::{VERSION_1, VERSION_2};
        self.quic_version
            .clone()
            .map(|v| v.0)
            .unwrap_or_else(|| match end {
                End::Client => vec![VERSION_1],
                End::Server => vec![VERSION_1, VERSION_2],
            })
    }

    /// The sending application's pacing (`--rate`, `--message-size`), if any.
    pub fn app_rate(&self) -> Option<AppRate> {
        self.rate
            .and_then(|r| AppRate::with_message(r, self.message_size))
    }

    /// The transport configuration: the named policies, Multipath QUIC allowed when
    /// `multipath` is set. `locals` are the local addresses a path manager that opens paths
    /// itself (fullmesh, lamp5g) opens them from.
    pub fn transport(
        &self,
        multipath: bool,
        locals: &[SocketAddr],
        end: End,
    ) -> Result<Arc<TransportConfig>, String> {
        let mut scheduler = registry::find(registry::SCHEDULERS, &self.scheduler)
            .ok_or_else(|| {
                format!(
                    "unknown scheduler {:?} (known: {})",
                    self.scheduler,
                    registry::known(registry::SCHEDULERS)
                )
            })?
            .build();
        let congestion_controller = registry::find(registry::CONGESTION_CONTROLLERS, &self.cc)
            .ok_or_else(|| {
                format!(
                    "unknown congestion controller {:?} (known: {})",
                    self.cc,
                    registry::known(registry::CONGESTION_CONTROLLERS)
                )
            })?
            .build();
        // The client knows its paths (one per --local address); the server's come from the
        // client, so only the client can hold a plain weight list to its number of paths.
        let check_count = |weights: &str| match end {
            End::Client => check_weight_count(weights, locals.len().max(1)),
            End::Server => Ok(()),
        };
        if let Some(weights) = &self.weights {
            scheduler
                .build()
                .configure("weights", weights)
                .and_then(|()| check_count(weights))
                .map_err(|e| format!("--weights {weights}: {e}"))?;
            scheduler = Arc::new(ConfiguredScheduler {
                inner: scheduler,
                params: vec![("weights", weights.clone())],
            });
        }
        for change in &self.weights_at {
            scheduler
                .build()
                .configure("weights", &change.weights)
                .and_then(|()| check_count(&change.weights))
                .map_err(|e| format!("--weights-at {}: {e}", change.weights))?;
        }
        let policy = self.path_manager_policy()?;
        let mut path_manager = policy.build();
        let mut params: Vec<(String, String)> = Vec::new();
        // As the simulator sets them up: the client's path manager opens paths from the
        // client's bound addresses (which may have different ports); a path manager the
        // server runs too splits the window of the paths the client adds.
        match end {
            End::Client if policy.traits.takes_locals && !locals.is_empty() => {
                let list: Vec<String> = locals.iter().map(ToString::to_string).collect();
                params.push(("locals".into(), list.join(",")));
            }
            End::Server if policy.traits.at_server => {
                params.push(("split_peer_paths".into(), "y".into()));
            }
            End::Client | End::Server => {}
        }
        for param in &self.path_manager_params {
            let (key, value) = param.split_once('=').ok_or_else(|| {
                format!("--path-manager-param {param:?}: expected KEY=VALUE, e.g. add_on=A1")
            })?;
            params.push((key.trim().to_string(), value.trim().to_string()));
        }
        if !params.is_empty() {
            let mut probe = path_manager.build();
            for (key, value) in &params {
                probe
                    .configure(key, value)
                    .map_err(|e| format!("--path-manager-param {key}={value}: {e}"))?;
            }
            path_manager = Arc::new(ConfiguredPathManager {
                inner: path_manager,
                params,
            });
        }
        let mut transport = TransportConfig {
            scheduler,
            congestion_controller,
            path_manager,
            initial_max_path_id: multipath.then_some(MAX_PATH_ID),
            ecn: !self.no_ecn,
            key_update_interval: self.key_update,
            ..TransportConfig::default()
        };
        if let Some(window) = self.receive_window {
            transport.set_fixed_receive_window(window);
        }
        if let Some(window) = self.stream_receive_window {
            transport.set_fixed_stream_receive_window(window);
        }
        Ok(Arc::new(transport))
    }

    /// The `--path-manager` in the policy registry, or an error listing the known names.
    pub fn path_manager_policy(
        &self,
    ) -> Result<&'static Policy<dyn PathManagerFactory, PathManagerTraits>, String> {
        registry::find(registry::PATH_MANAGERS, &self.path_manager).ok_or_else(|| {
            format!(
                "unknown path manager {:?} (known: {})",
                self.path_manager,
                registry::known(registry::PATH_MANAGERS)
            )
        })
    }

    /// Applies the `--weights-at` changes to `conn` at their times (from now: the server
    /// calls it when the connection is established, the client once its initial paths are
    /// open), in a task that ends with the returned guard.
    pub fn schedule_weight_changes(&self, conn: &Connection) -> WeightChanges {
        let mut planned = self.weights_at.clone();
        planned.sort_by_key(|c| c.after);
        let applied = Arc::new(Mutex::new(Vec::new()));
        let task = (!planned.is_empty()).then(|| {
            let (conn, changes, log) = (conn.clone(), planned.clone(), applied.clone());
            let start = tokio::time::Instant::now();
            tokio::spawn(async move {
                for change in changes {
                    tokio::time::sleep_until(start + change.after).await;
                    let result = conn.configure_scheduler("weights", &change.weights);
                    if let Err(e) = &result {
                        tracing::warn!(weights = %change.weights, error = %e, "weight change refused");
                    }
                    log.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(WeightChangeReport {
                            weights: change.weights,
                            due_s: change.after.as_secs_f64(),
                            applied: result.is_ok(),
                            path_bytes_sent: conn
                                .paths()
                                .iter()
                                .map(|p| p.stats.payload_bytes_sent)
                                .collect(),
                        });
                }
            })
        });
        WeightChanges {
            task,
            planned,
            applied,
        }
    }

    /// An endpoint configuration with fresh secrets and, with `--qlog`, a qlog directory.
    pub fn endpoint(&self) -> Result<EndpointConfig, String> {
        let mut config = EndpointConfig::random();
        if let Some(dir) = &self.qlog {
            let qlog =
                QlogDir::new(dir).map_err(|e| format!("qlog directory {}: {e}", dir.display()))?;
            config.qlog = Some(Arc::new(qlog));
        }
        Ok(config)
    }
}

/// An application protocol of `polypath server` and `polypath client`, chosen by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AppProtocol {
    /// `polypath-transfer/1`: one verified upload or download (see [`crate::transfer`]).
    #[serde(rename = "polypath-transfer/1")]
    Transfer,
    /// `hq-interop`: HTTP/0.9, files of a directory (see [`polypath_cli::hq`]).
    #[serde(rename = "hq-interop")]
    Hq,
}

impl AppProtocol {
    /// Every protocol.
    pub const ALL: [AppProtocol; 2] = [AppProtocol::Transfer, AppProtocol::Hq];

    /// The ALPN protocol ID.
    pub fn alpn(self) -> &'static [u8] {
        match self {
            AppProtocol::Transfer => crate::transfer::ALPN,
            AppProtocol::Hq => polypath_cli::hq::ALPN,
        }
    }

    /// The protocol a connection agreed on, if one of these.
    pub fn of(conn: &Connection) -> Option<AppProtocol> {
        let agreed = conn.alpn_protocol()?;
        AppProtocol::ALL.into_iter().find(|p| p.alpn() == agreed)
    }
}

/// Parses `--alpn`: `polypath-transfer/1` (or `transfer`) or `hq-interop` (or `hq`).
pub fn parse_alpn(text: &str) -> Result<AppProtocol, String> {
    match text {
        "polypath-transfer/1" | "transfer" => Ok(AppProtocol::Transfer),
        "hq-interop" | "hq" => Ok(AppProtocol::Hq),
        _ => Err(format!(
            "unknown application protocol {text:?} (known: polypath-transfer/1, hq-interop)"
        )),
    }
}

/// True when `SSLKEYLOGFILE` names a file: TLS secrets are then appended to it (NSS key
/// log format, which Wireshark reads to decrypt QUIC).
pub fn keylog_enabled() -> bool {
    std::env::var_os("SSLKEYLOGFILE").is_some_and(|v| !v.is_empty())
}

/// The server's TLS configuration: the certificate and key from `--cert`/`--key`, or a
/// fresh self-signed certificate for `localhost` and the listening IP. Returns the
/// self-signed certificate too, for `--cert-out`.
pub fn server_tls(
    cert: Option<&Path>,
    key: Option<&Path>,
    listen: SocketAddr,
    protocols: &[AppProtocol],
    suites: CipherSuites,
) -> Result<(Arc<rustls::ServerConfig>, Option<CertificateDer<'static>>), String> {
    let alpns: Vec<&[u8]> = protocols.iter().map(|p| p.alpn()).collect();
    server_tls_for(cert, key, listen, &alpns, suites)
}

/// [`server_tls`] for the application protocols `alpns` (in the server's preference order).
pub fn server_tls_for(
    cert: Option<&Path>,
    key: Option<&Path>,
    listen: SocketAddr,
    alpns: &[&[u8]],
    suites: CipherSuites,
) -> Result<(Arc<rustls::ServerConfig>, Option<CertificateDer<'static>>), String> {
    let (chain, key, generated) = match (cert, key) {
        (Some(cert), Some(key)) => (
            load_certificate_chain(cert).map_err(|e| e.to_string())?,
            load_private_key(key).map_err(|e| e.to_string())?,
            None,
        ),
        (None, None) => {
            let mut names = vec!["localhost".to_string()];
            if !listen.ip().is_unspecified() {
                names.push(listen.ip().to_string());
            }
            let generated = self_signed_certificate(&names).map_err(|e| e.to_string())?;
            let first = generated.chain[0].clone();
            (generated.chain, generated.key, Some(first))
        }
        _ => return Err("--cert and --key go together".into()),
    };
    let alpns = alpns.iter().map(|a| a.to_vec()).collect();
    let config = server_config_with(chain, key, alpns, keylog_enabled(), suites)
        .map_err(|e| e.to_string())?;
    Ok((config, generated))
}

/// Writes a certificate as PEM.
pub fn write_certificate(path: &Path, cert: &CertificateDer<'_>) -> Result<(), String> {
    let text = pem::encode(&pem::Pem::new("CERTIFICATE", cert.to_vec()));
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// How the client checks the server's certificate.
#[derive(Debug, Args, Clone)]
pub struct VerifyArgs {
    /// Accept exactly the certificate in this PEM file (the server's self-signed
    /// certificate, written by `polypath server --cert-out FILE`).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ca", "insecure"])]
    pub pin: Option<PathBuf>,
    /// Verify the server's chain against the certificates in this PEM file and check the
    /// server name.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// Accept any certificate. Insecure: for labs and quick tries only.
    #[arg(long)]
    pub insecure: bool,
}

/// The client's TLS configuration.
pub fn client_tls(
    verify: &VerifyArgs,
    protocol: AppProtocol,
    suites: CipherSuites,
) -> Result<Arc<rustls::ClientConfig>, String> {
    client_tls_for(verify, protocol.alpn(), suites)
}

/// [`client_tls`] for the application protocol `alpn`.
pub fn client_tls_for(
    verify: &VerifyArgs,
    alpn: &[u8],
    suites: CipherSuites,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let verification = if let Some(pin) = &verify.pin {
        let chain = load_certificate_chain(pin).map_err(|e| e.to_string())?;
        ServerVerification::Pinned(chain[0].clone())
    } else if let Some(ca) = &verify.ca {
        let mut roots = rustls::RootCertStore::empty();
        for cert in load_certificate_chain(ca).map_err(|e| e.to_string())? {
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        ServerVerification::Roots(roots)
    } else if verify.insecure {
        ServerVerification::Insecure
    } else {
        return Err(
            "cannot verify the server: pass --pin FILE (the server's self-signed certificate, \
             see `polypath server --cert-out`), --ca FILE, or --insecure"
                .into(),
        );
    };
    client_config_with(vec![alpn.to_vec()], verification, keylog_enabled(), suites)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use polypath_scenario::{FlowKind, Scenario};
    use polypath_sim::{Hooks, RunOptions, run_scenario};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        transport: TransportArgs,
    }

    /// Which policy a name is given for.
    #[derive(Clone, Copy, Debug)]
    enum Kind {
        Scheduler,
        Cc,
        PathManager,
    }

    fn cli_accepts(kind: Kind, name: &str) -> bool {
        let flag = match kind {
            Kind::Scheduler => "--scheduler",
            Kind::Cc => "--cc",
            Kind::PathManager => "--path-manager",
        };
        let cli = Cli::try_parse_from(["polypath", flag, name]).expect("parses");
        let locals = [
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.2:0".parse().unwrap(),
        ];
        [End::Client, End::Server]
            .iter()
            .all(|&end| cli.transport.transport(true, &locals, end).is_ok())
    }

    fn sim_accepts(kind: Kind, name: &str) -> bool {
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scenarios/nrdc-two-path.toml"
        );
        let mut s = Scenario::load(std::path::Path::new(file)).expect("bundled scenario");
        s.sim.duration = std::time::Duration::from_secs(2);
        if let FlowKind::Quic(q) = &mut s.flows[0].kind {
            q.bytes = 20_000;
            let field = match kind {
                Kind::Scheduler => &mut q.scheduler,
                Kind::Cc => &mut q.cc,
                Kind::PathManager => &mut q.path_manager,
            };
            *field = name.to_string();
        }
        run_scenario(&s, &RunOptions::default(), Hooks::default()).is_ok()
    }

    /// The command line and the simulator accept exactly the registry's names and aliases
    /// (in any case), and both refuse names outside it.
    #[test]
    fn the_cli_and_the_simulator_take_the_registrys_names() {
        let lists = [
            (
                Kind::Scheduler,
                registry::all_names(registry::SCHEDULERS),
                "fastest",
            ),
            (
                Kind::Cc,
                registry::all_names(registry::CONGESTION_CONTROLLERS),
                "vegas",
            ),
            (
                Kind::PathManager,
                registry::all_names(registry::PATH_MANAGERS),
                "ndiffports",
            ),
        ];
        for (kind, names, stranger) in lists {
            for name in &names {
                let upper = name.to_ascii_uppercase();
                for n in [*name, upper.as_str()] {
                    assert!(cli_accepts(kind, n), "the CLI refuses {kind:?} {n}");
                    assert!(sim_accepts(kind, n), "the simulator refuses {kind:?} {n}");
                }
            }
            let near = format!("{}x", names[0]);
            for n in [stranger, near.as_str()] {
                assert!(!cli_accepts(kind, n), "the CLI takes {kind:?} {n}");
                assert!(!sim_accepts(kind, n), "the simulator takes {kind:?} {n}");
            }
        }
    }
}
