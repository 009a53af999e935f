//! Operations: the counters both gateways keep, a Prometheus `/metrics` endpoint and a JSON
//! `/status` endpoint, served by a small HTTP/1.1 server on an address of the operator's
//! choosing (`--status ADDR`).
//!
//! Metrics (per path, per interface and per class; `*_total` are counters):
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `polypath_gw_class_packets_total` | `session`, `class`, `dir` (`up`, `down`) | IP packets carried |
//! | `polypath_gw_class_bytes_total` | `session`, `class`, `dir` | IP bytes carried (rate() is the class's throughput) |
//! | `polypath_gw_class_dropped_total` | `session`, `class` | packets the sending buffer dropped (queue full) |
//! | `polypath_gw_duplicates_sent_total` | `session`, `class` | copies asked for beyond the first (duplicate mode), sent or not |
//! | `polypath_gw_stack_datagram_copies_total` | `session`, `qos_class` | copies the stack queued on paths beyond the first (what duplication sent) |
//! | `polypath_gw_duplicates_discarded_total` | `session`, `class` | copies the receiver discarded |
//! | `polypath_gw_switches_total` | `session`, `class` | QoS manager decisions that changed a class's interfaces |
//! | `polypath_gw_path_bytes_sent_total` | `session`, `path` | UDP bytes the path sent |
//! | `polypath_gw_path_srtt_ms` | `session`, `path` | the stack's smoothed RTT |
//! | `polypath_gw_path_loss_ratio` | `session`, `path` | the stack's recent loss rate |
//! | `polypath_gw_path_delivery_rate_bps` | `session`, `path` | the stack's delivery-rate estimate |
//! | `polypath_gw_iface_owd_ms` | `session`, `iface`, `dir` | PMF one-way delay (median) |
//! | `polypath_gw_iface_loss_ratio` | `session`, `iface` | PMF probe loss |
//! | `polypath_gw_iface_capacity_bps` | `session`, `iface` | PMF capacity estimate |
//! | `polypath_gw_iface_up` | `session`, `iface` | 1 while the interface answers probes |
//! | `polypath_gw_sessions` | | live sessions (server) |
//! | `polypath_gw_refused_total` | `reason` | sessions refused (server) |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::pmf::Metrics;
use crate::qos::Decision;

/// Counters of one traffic class.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ClassCounters {
    /// Packets from the local side into the tunnel.
    pub packets_up: u64,
    /// Their bytes.
    pub bytes_up: u64,
    /// Packets from the tunnel to the local side.
    pub packets_down: u64,
    /// Their bytes.
    pub bytes_down: u64,
    /// Dropped by the sending buffer.
    pub dropped: u64,
    /// Copies asked of the stack beyond the first: one per further interface the class
    /// uses (client) or lists (server), sent or not. The stack sends a copy only on a
    /// validated path its scheduler holds healthy: [`SessionStatus::stack_datagram_copies`]
    /// counts those.
    pub duplicates_sent: u64,
    /// Copies received and discarded.
    pub duplicates_discarded: u64,
    /// QoS decisions that changed the class's interfaces.
    pub switches: u64,
}

/// One QUIC path as the stack reports it.
#[derive(Debug, Clone, Serialize)]
pub struct PathStatus {
    /// Path ID.
    pub id: u32,
    /// Local address.
    pub local: String,
    /// Remote address.
    pub remote: String,
    /// Where the path is in its life: "validating" (its PATH_CHALLENGE unanswered: it
    /// carries no application data yet), "validated" or "abandoned".
    pub state: &'static str,
    /// Smoothed RTT, ms.
    pub srtt_ms: f64,
    /// Recent loss rate, 0 to 1.
    pub loss_rate: f64,
    /// Delivery-rate estimate, bit/s.
    pub delivery_rate_bps: Option<f64>,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// UDP bytes sent.
    pub bytes_sent: u64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
}

/// One interface as PMF measures it.
#[derive(Debug, Clone, Serialize)]
pub struct IfaceStatus {
    /// Interface name.
    pub name: String,
    /// Its address.
    pub ip: String,
    /// The QUIC path over it.
    pub path_id: Option<u32>,
    /// PMF's figures.
    pub metrics: Metrics,
}

/// One session's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionStatus {
    /// The client's name.
    pub client: String,
    /// The client's tunnel address.
    pub tunnel_ip: String,
    /// The policy file.
    pub policy: String,
    /// Traffic class names, in policy order (the default class first).
    pub classes: Vec<String>,
    /// Counters per class, in the same order.
    pub counters: Vec<ClassCounters>,
    /// Which interfaces each stack class uses, by class name.
    pub in_use: BTreeMap<String, Vec<String>>,
    /// The QUIC paths.
    pub paths: Vec<PathStatus>,
    /// The interfaces (client side).
    pub interfaces: Vec<IfaceStatus>,
    /// The latest QoS decisions, oldest first.
    pub decisions: Vec<Decision>,
    /// Datagrams received that did not decode (unknown context, not IP).
    pub bad_datagrams: u64,
    /// Outgoing datagrams the stack dropped (its queue full, or a path holding duplicated
    /// copies could not keep up).
    pub stack_datagrams_dropped: u64,
    /// Copies of duplicated datagrams the stack queued on paths beyond the first of each,
    /// by stack QoS class: what duplication really sent, where a class's
    /// `duplicates_sent` counts the copies asked for.
    pub stack_datagram_copies: BTreeMap<&'static str, u64>,
}

/// Everything the endpoints show.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// `client` or `server`.
    pub role: String,
    /// Live sessions, by a key (the session ID).
    pub sessions: BTreeMap<String, SessionStatus>,
    /// Sessions that ended, with their final counters (the latest [`ENDED_KEPT`]).
    pub ended: BTreeMap<String, SessionStatus>,
    /// Sessions refused, by reason.
    pub refused: BTreeMap<String, u64>,
}

/// Labelled figures of one interface's measurements.
type IfaceFigures = dyn Fn(&Metrics) -> Vec<(&'static str, Option<f64>)>;

/// Ended sessions kept for `/status` and `/metrics`.
pub const ENDED_KEPT: usize = 100;

/// Decisions kept per session for `/status`.
pub const DECISIONS_KEPT: usize = 100;

/// The shared, lock-protected status of a gateway.
#[derive(Debug, Clone, Default)]
pub struct Status {
    inner: Arc<Mutex<Snapshot>>,
}

impl Status {
    /// A status for a `role` gateway.
    pub fn new(role: &str) -> Status {
        let s = Status::default();
        s.lock().role = role.to_string();
        s
    }

    /// Locks the snapshot (a panic elsewhere leaves it usable).
    pub fn lock(&self) -> MutexGuard<'_, Snapshot> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The JSON document of `/status`.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&*self.lock()).unwrap_or_else(|_| "{}".into())
    }

    /// The Prometheus text of `/metrics`.
    pub fn prometheus(&self) -> String {
        let s = self.lock();
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, v) in rows {
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {v}");
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {v}");
                }
            }
        };
        let esc = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
        let per_class = |f: &dyn Fn(&ClassCounters) -> Vec<(&'static str, u64)>| {
            let mut rows = Vec::new();
            for (id, sess) in s.sessions.iter().chain(&s.ended) {
                for (name, c) in sess.classes.iter().zip(&sess.counters) {
                    for (extra, v) in f(c) {
                        rows.push((
                            format!("session=\"{}\",class=\"{}\"{extra}", esc(id), esc(name)),
                            v as f64,
                        ));
                    }
                }
            }
            rows
        };
        family(
            "polypath_gw_class_packets_total",
            "counter",
            "IP packets carried per class and direction",
            per_class(&|c| {
                vec![
                    (",dir=\"up\"", c.packets_up),
                    (",dir=\"down\"", c.packets_down),
                ]
            }),
        );
        family(
            "polypath_gw_class_bytes_total",
            "counter",
            "IP bytes carried per class and direction",
            per_class(&|c| vec![(",dir=\"up\"", c.bytes_up), (",dir=\"down\"", c.bytes_down)]),
        );
        family(
            "polypath_gw_class_dropped_total",
            "counter",
            "packets the sending buffer dropped",
            per_class(&|c| vec![("", c.dropped)]),
        );
        family(
            "polypath_gw_duplicates_sent_total",
            "counter",
            "copies asked for beyond the first, sent or not",
            per_class(&|c| vec![("", c.duplicates_sent)]),
        );
        family(
            "polypath_gw_stack_datagram_copies_total",
            "counter",
            "copies of duplicated datagrams the stack queued on paths beyond the first",
            s.sessions
                .iter()
                .chain(&s.ended)
                .flat_map(|(id, sess)| {
                    sess.stack_datagram_copies.iter().map(move |(class, v)| {
                        (
                            format!("session=\"{}\",qos_class=\"{class}\"", esc(id)),
                            *v as f64,
                        )
                    })
                })
                .collect(),
        );
        family(
            "polypath_gw_duplicates_discarded_total",
            "counter",
            "copies received and discarded",
            per_class(&|c| vec![("", c.duplicates_discarded)]),
        );
        family(
            "polypath_gw_switches_total",
            "counter",
            "QoS decisions that changed a class's interfaces",
            per_class(&|c| vec![("", c.switches)]),
        );
        let per_path = |f: &dyn Fn(&PathStatus) -> Option<f64>| {
            let mut rows = Vec::new();
            for (id, sess) in s.sessions.iter().chain(&s.ended) {
                for p in &sess.paths {
                    if let Some(v) = f(p) {
                        rows.push((format!("session=\"{}\",path=\"{}\"", esc(id), p.id), v));
                    }
                }
            }
            rows
        };
        family(
            "polypath_gw_path_bytes_sent_total",
            "counter",
            "UDP bytes sent on the path",
            per_path(&|p| Some(p.bytes_sent as f64)),
        );
        family(
            "polypath_gw_path_srtt_ms",
            "gauge",
            "smoothed RTT of the path (stack)",
            per_path(&|p| Some(p.srtt_ms)),
        );
        family(
            "polypath_gw_path_loss_ratio",
            "gauge",
            "recent loss rate of the path (stack)",
            per_path(&|p| Some(p.loss_rate)),
        );
        family(
            "polypath_gw_path_delivery_rate_bps",
            "gauge",
            "delivery-rate estimate of the path (stack)",
            per_path(&|p| p.delivery_rate_bps),
        );
        let per_iface = |f: &IfaceFigures| {
            let mut rows = Vec::new();
            for (id, sess) in s.sessions.iter().chain(&s.ended) {
                for i in &sess.interfaces {
                    for (extra, v) in f(&i.metrics) {
                        if let Some(v) = v {
                            rows.push((
                                format!(
                                    "session=\"{}\",iface=\"{}\"{extra}",
                                    esc(id),
                                    esc(&i.name)
                                ),
                                v,
                            ));
                        }
                    }
                }
            }
            rows
        };
        family(
            "polypath_gw_iface_owd_ms",
            "gauge",
            "PMF one-way delay (median of recent probes)",
            per_iface(&|m| {
                vec![
                    (",dir=\"up\"", m.owd_up_ms),
                    (",dir=\"down\"", m.owd_down_ms),
                ]
            }),
        );
        family(
            "polypath_gw_iface_loss_ratio",
            "gauge",
            "PMF probe loss",
            per_iface(&|m| vec![("", m.loss_pct.map(|l| l / 100.0))]),
        );
        family(
            "polypath_gw_iface_capacity_bps",
            "gauge",
            "PMF capacity estimate",
            per_iface(&|m| vec![("", m.capacity_mbps.map(|c| c * 1e6))]),
        );
        family(
            "polypath_gw_iface_up",
            "gauge",
            "1 while the interface answers probes",
            per_iface(&|m| vec![("", Some(f64::from(u8::from(m.up))))]),
        );
        family(
            "polypath_gw_sessions",
            "gauge",
            "live sessions",
            vec![(String::new(), s.sessions.len() as f64)],
        );
        family(
            "polypath_gw_refused_total",
            "counter",
            "sessions refused",
            s.refused
                .iter()
                .map(|(r, n)| (format!("reason=\"{}\"", esc(r)), *n as f64))
                .collect(),
        );
        out
    }

    /// Serves `/metrics` and `/status` on `addr` until the task is dropped; returns the
    /// bound address.
    pub async fn serve(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let status = self.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let status = status.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 2048];
                    let mut got = 0;
                    // The request line and headers, up to the blank line (bounded).
                    while got < buf.len() {
                        match tokio::time::timeout(
                            std::time::Duration::from_secs(2),
                            sock.read(&mut buf[got..]),
                        )
                        .await
                        {
                            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                            Ok(Ok(n)) => got += n,
                        }
                        if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                    let request = String::from_utf8_lossy(&buf[..got]);
                    let path = request.split_whitespace().nth(1).unwrap_or("");
                    let (code, kind, body) = match path {
                        "/metrics" => ("200 OK", "text/plain; version=0.0.4", status.prometheus()),
                        "/status" => ("200 OK", "application/json", status.json()),
                        _ => (
                            "404 Not Found",
                            "text/plain",
                            "try /metrics or /status\n".into(),
                        ),
                    };
                    let head = format!(
                        "HTTP/1.1 {code}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = sock.write_all(head.as_bytes()).await;
                    let _ = sock.write_all(body.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        Ok((local, task))
    }
}

impl SessionStatus {
    /// Keeps `d` among the latest decisions.
    pub fn push_decision(&mut self, d: Decision) {
        if self.decisions.len() == DECISIONS_KEPT {
            self.decisions.remove(0);
        }
        self.decisions.push(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoints_serve_metrics_and_status() {
        let status = Status::new("server");
        {
            let mut s = status.lock();
            let mut sess = SessionStatus {
                client: "c1".into(),
                classes: vec!["default".into(), "voice".into()],
                counters: vec![ClassCounters::default(); 2],
                ..SessionStatus::default()
            };
            sess.counters[1].duplicates_discarded = 7;
            sess.counters[0].bytes_up = 1234;
            s.sessions.insert("ab12".into(), sess);
            s.refused.insert("bad token".into(), 2);
        }
        let (addr, task) = status.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let get = |path: &'static str| async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).await.unwrap();
            out
        };
        let m = get("/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200 OK"), "{m}");
        assert!(
            m.contains(
                "polypath_gw_duplicates_discarded_total{session=\"ab12\",class=\"voice\"} 7"
            ),
            "{m}"
        );
        assert!(m.contains(
            "polypath_gw_class_bytes_total{session=\"ab12\",class=\"default\",dir=\"up\"} 1234"
        ));
        assert!(m.contains("polypath_gw_refused_total{reason=\"bad token\"} 2"));
        assert!(m.contains("\npolypath_gw_sessions 1\n"));
        let s = get("/status").await;
        let body = &s[s.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["sessions"]["ab12"]["client"], "c1");
        assert!(get("/nope").await.starts_with("HTTP/1.1 404"));
        task.abort();
    }
}
