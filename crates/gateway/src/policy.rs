//! Gateway policy files: the form of the paper's Fig. 7, extended with traffic classes.
//!
//! A policy is one JSON object. Its top level is the paper's policy (Fig. 7) and describes
//! the **default class**, which carries every packet no other class matches:
//!
//! ```json
//! {
//!   "policy_num": "UC03",
//!   "allowed_interfaces": [
//!     { "type": "Ethernet", "priority": 2, "name": "eth0", "ip": "10.0.1.1",
//!       "metrics": { "delayavg": 0.149524, "packetloss": 0, "throughput": 93 } },
//!     { "type": "Wi-Fi", "priority": 1, "name": "wlan0", "ip": "10.0.2.1" }
//!   ],
//!   "traffic_requirements": { "delay": 1, "throughput": 5, "packetloss": 1 },
//!
//!   "mode": "fallback",
//!   "classes": [
//!     { "name": "control", "match": { "protocol": ["udp"], "dst_ports": ["5000-5010"] },
//!       "mode": "duplicate", "priority": 0 },
//!     { "name": "bulk", "match": { "protocol": ["tcp"], "dst": ["10.99.0.0/24"] },
//!       "mode": "aggregate", "rate_limit": "40Mbit/s", "priority": 5 }
//!   ]
//! }
//! ```
//!
//! The paper's keys: `policy_num` (a label), `allowed_interfaces` (each with `type`,
//! `priority` — lower is preferred, 1 is the primary —, `name`, `ip` and initial
//! `metrics`, which are informational: the gateway measures its own) and
//! `traffic_requirements` (`delay` in ms, compared with the path's measured one-way delay;
//! `throughput` in Mbit/s, compared with the path's measured capacity; `packetloss` in
//! percent). An interface entry is matched with the client gateway's interfaces by `name`,
//! else by `ip`.
//!
//! The extensions, at the top level (for the default class) and in each class:
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `mode` | `select` (path selection: the best-priority interface only), `failover` (primary and backups, switching on total failure), `fallback` (QoS-compliant fallback: also switching when the interface violates the requirements), `duplicate` (every packet on every interface), `aggregate` (all interfaces together) | `fallback` at the top level |
//! | `interfaces` (classes only) | names of `allowed_interfaces` the class may use, in priority order | every allowed interface, by `priority` |
//! | `traffic_requirements` (classes) | as the top level's | none |
//! | `qos_class` | the stack's class the packets are sent as: `best_effort`, `bulk`, `low_latency`, `critical` | `best_effort` for the default class; for a class, from its mode: `critical` (duplicate), `low_latency` (select, failover, fallback), `bulk` (aggregate) |
//! | `priority` | the class's rank in the sending buffer, lower first | 0 for classes, 10 for the default class |
//! | `weight` | its share under `"scheduling": "weighted"` | 1 |
//! | `rate_limit` | a cap on the class's rate (`"20Mbit/s"`) | none |
//! | `hysteresis` | how far inside the requirements an interface must be to be switched back to (a fraction) | 0.2 |
//! | `hold_time_ms` | how long a preferred interface must stay good before traffic returns to it | 1000 |
//! | `transport` (classes) | `datagram` (IP packets in DATAGRAM frames), `stream` (TCP terminated at the client gateway and carried on QUIC streams) or `mptcp` (TCP terminated and relayed over kernel MPTCP) | `datagram` |
//!
//! Top level only: `scheduling` (`strict` or `weighted` priorities between the classes'
//! queues, default `strict`), `detection_ms` (how long an interface may stay silent before
//! it counts as down, default 100) and `probe_interval_ms` (the measurement probes' period
//! per interface, default 20).
//!
//! A class's `match` holds lists, each optional, all of which must match (an item of a
//! list suffices): `protocol` (`tcp`, `udp`, `icmp`, `icmpv6` or a number), `src_ports`,
//! `dst_ports` (`443`, `"5000-5010"`), `src`, `dst` (prefixes), `dscp` (0 to 63). The
//! first class that matches takes the packet.
//!
//! Classes that share a `qos_class` must agree on their mode, interfaces, requirements,
//! hysteresis and hold time: the stack schedules a QoS class with one policy.
//!
//! Errors name the file, the line and the field (`gw.json:14: field `classes[1].mode`:
//! unknown variant ...`).

use polypath_quic::sched::{InterfaceMetrics, QosClass, QosMode, TrafficRequirements};
use polypath_scenario::Prefix;
use serde::Deserialize;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use crate::classify::{PacketInfo, proto};

/// A policy file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The file (or the name the policy came under).
    pub file: String,
    /// The 1-based line, where known.
    pub line: Option<usize>,
    /// The field (`classes[1].match.dst_ports[0]`), where one is to blame.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for PolicyError {}

/// One interface entry of `allowed_interfaces`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceRule {
    /// Access technology (informational), `type` in JSON.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Lower is preferred.
    #[serde(default)]
    pub priority: Option<u32>,
    /// The client gateway's interface name.
    #[serde(default)]
    pub name: Option<String>,
    /// The client gateway's address on it.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Initial measurements (informational).
    #[serde(default)]
    pub metrics: Option<InterfaceMetrics>,
}

impl InterfaceRule {
    /// A name for logs: the interface name, else its type, else its address.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .or_else(|| self.kind.clone())
            .or_else(|| self.ip.map(|i| i.to_string()))
            .unwrap_or_default()
    }
}

/// How a class's TCP flows cross between the gateways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// IP packets in DATAGRAM frames (the default; any protocol).
    Datagram,
    /// TCP terminated at the client gateway and carried on QUIC streams.
    Stream,
    /// TCP terminated at the client gateway and relayed over kernel MPTCP.
    Mptcp,
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange(pub u16, pub u16);

impl PortRange {
    fn contains(self, p: u16) -> bool {
        (self.0..=self.1).contains(&p)
    }
}

/// What a class matches (every given list must match).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Match {
    /// IP protocol numbers.
    pub protocols: Vec<u8>,
    /// Source ports.
    pub src_ports: Vec<PortRange>,
    /// Destination ports.
    pub dst_ports: Vec<PortRange>,
    /// Source prefixes.
    pub src: Vec<Prefix>,
    /// Destination prefixes.
    pub dst: Vec<Prefix>,
    /// DSCP values.
    pub dscp: Vec<u8>,
}

impl Match {
    /// True if the packet matches.
    pub fn matches(&self, p: &PacketInfo) -> bool {
        let any_port = |ranges: &[PortRange], port: Option<u16>| {
            ranges.is_empty() || port.is_some_and(|p| ranges.iter().any(|r| r.contains(p)))
        };
        (self.protocols.is_empty() || self.protocols.contains(&p.protocol))
            && any_port(&self.src_ports, p.ports.map(|x| x.0))
            && any_port(&self.dst_ports, p.ports.map(|x| x.1))
            && (self.src.is_empty() || self.src.iter().any(|n| n.contains(p.src)))
            && (self.dst.is_empty() || self.dst.iter().any(|n| n.contains(p.dst)))
            && (self.dscp.is_empty() || self.dscp.contains(&p.dscp))
    }
}

/// One traffic class (the default class included).
#[derive(Debug, Clone, PartialEq)]
pub struct ClassRule {
    /// The class's name (`default` for the top level).
    pub name: String,
    /// What it matches (empty for the default class: everything).
    pub matcher: Match,
    /// Its scheduling mode.
    pub mode: QosMode,
    /// The stack's class its packets are sent as.
    pub qos_class: QosClass,
    /// Indices into [`Policy::interfaces`], most preferred first.
    pub interfaces: Vec<usize>,
    /// Its requirements (`fallback`).
    pub requirements: TrafficRequirements,
    /// Switch-back margin.
    pub hysteresis: f64,
    /// Switch-back hold time.
    pub hold_time: Duration,
    /// Rank in the sending buffer, lower first.
    pub priority: u32,
    /// Share under weighted scheduling.
    pub weight: u32,
    /// Rate cap in bit/s.
    pub rate_limit: Option<f64>,
    /// How its TCP flows cross.
    pub transport: Transport,
}

/// How the sending buffer serves the classes' queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduling {
    /// The lowest `priority` number with a packet waiting goes first.
    Strict,
    /// Deficit round robin in proportion to `weight`.
    Weighted,
}

/// A parsed and checked policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Where it came from (for messages).
    pub file: String,
    /// The paper's label.
    pub policy_num: Option<String>,
    /// `allowed_interfaces`.
    pub interfaces: Vec<InterfaceRule>,
    /// The default class (the top level).
    pub default: ClassRule,
    /// The classes, in match order.
    pub classes: Vec<ClassRule>,
    /// How the sending buffer serves the classes.
    pub scheduling: Scheduling,
    /// Silence after which an interface counts as down.
    pub detection: Duration,
    /// The measurement probes' period per interface.
    pub probe_interval: Duration,
}

impl Policy {
    /// Every class, the default class first.
    pub fn all_classes(&self) -> impl Iterator<Item = &ClassRule> {
        std::iter::once(&self.default).chain(&self.classes)
    }

    /// The index in [`Policy::all_classes`] of the class of a packet (0: default).
    pub fn classify(&self, p: Option<&PacketInfo>) -> usize {
        let Some(p) = p else { return 0 };
        self.classes
            .iter()
            .position(|c| c.matcher.matches(p))
            .map_or(0, |i| i + 1)
    }

    /// Reads and checks a policy file.
    pub fn load(path: &std::path::Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            file: path.display().to_string(),
            line: None,
            field: None,
            message: e.to_string(),
        })?;
        Policy::parse(&text, &path.display().to_string())
    }

    /// Parses and checks a policy given as text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Policy, PolicyError> {
        let raw: RawPolicy = crate::parse_json(text, file)?;
        raw.check()
            .map_err(|(field, message)| PolicyError {
                file: file.to_string(),
                line: json_line_of(text, &field),
                field: Some(field),
                message,
            })
            .map(|mut p| {
                p.file = file.to_string();
                p
            })
    }
}

/// serde_json's messages end in " at line L column C"; the error carries them apart.
pub(crate) fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    policy_num: Option<String>,
    allowed_interfaces: Vec<InterfaceRule>,
    #[serde(default)]
    traffic_requirements: TrafficRequirements,
    #[serde(default)]
    mode: Option<QosMode>,
    #[serde(default)]
    qos_class: Option<String>,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    weight: Option<u32>,
    #[serde(default)]
    rate_limit: Option<String>,
    #[serde(default)]
    hysteresis: Option<f64>,
    #[serde(default)]
    hold_time_ms: Option<u64>,
    #[serde(default)]
    scheduling: Option<Scheduling>,
    #[serde(default)]
    detection_ms: Option<u64>,
    #[serde(default)]
    probe_interval_ms: Option<u64>,
    #[serde(default)]
    classes: Vec<RawClass>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClass {
    name: String,
    #[serde(rename = "match")]
    matcher: RawMatch,
    mode: QosMode,
    #[serde(default)]
    qos_class: Option<String>,
    #[serde(default)]
    interfaces: Option<Vec<String>>,
    #[serde(default)]
    traffic_requirements: TrafficRequirements,
    #[serde(default)]
    priority: Option<u32>,
    #[serde(default)]
    weight: Option<u32>,
    #[serde(default)]
    rate_limit: Option<String>,
    #[serde(default)]
    hysteresis: Option<f64>,
    #[serde(default)]
    hold_time_ms: Option<u64>,
    #[serde(default)]
    transport: Option<Transport>,
}

/// A number or a string in a list (`443` or `"5000-5010"`, `6` or `"tcp"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Num(u64),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    #[serde(default)]
    protocol: Vec<NumOrText>,
    #[serde(default)]
    src_ports: Vec<NumOrText>,
    #[serde(default)]
    dst_ports: Vec<NumOrText>,
    #[serde(default)]
    src: Vec<String>,
    #[serde(default)]
    dst: Vec<String>,
    #[serde(default)]
    dscp: Vec<u8>,
}

type Check<T> = Result<T, (String, String)>;

fn bad<T>(field: impl Into<String>, msg: impl Into<String>) -> Check<T> {
    Err((field.into(), msg.into()))
}

impl RawMatch {
    fn check(&self, at: &str) -> Check<Match> {
        let mut m = Match::default();
        for (i, p) in self.protocol.iter().enumerate() {
            let n = match p {
                NumOrText::Num(n) => u8::try_from(*n).ok(),
                NumOrText::Text(t) => match t.to_ascii_lowercase().as_str() {
                    "tcp" => Some(proto::TCP),
                    "udp" => Some(proto::UDP),
                    "icmp" => Some(proto::ICMP),
                    "icmpv6" => Some(proto::ICMPV6),
                    _ => None,
                },
            };
            let Some(n) = n else {
                return bad(
                    format!("{at}.protocol[{i}]"),
                    "expected tcp, udp, icmp, icmpv6 or a protocol number 0 to 255",
                );
            };
            m.protocols.push(n);
        }
        for (key, list, out) in [
            ("src_ports", &self.src_ports, &mut m.src_ports),
            ("dst_ports", &self.dst_ports, &mut m.dst_ports),
        ] {
            for (i, p) in list.iter().enumerate() {
                let field = format!("{at}.{key}[{i}]");
                let range = match p {
                    NumOrText::Num(n) => u16::try_from(*n).ok().map(|n| PortRange(n, n)),
                    NumOrText::Text(t) => {
                        let (a, b) = t.split_once('-').unwrap_or((t, t));
                        match (a.trim().parse::<u16>(), b.trim().parse::<u16>()) {
                            (Ok(a), Ok(b)) if a <= b => Some(PortRange(a, b)),
                            _ => None,
                        }
                    }
                };
                let Some(r) = range else {
                    return bad(
                        field,
                        "expected a port (0 to 65535) or a range \"LOW-HIGH\"",
                    );
                };
                out.push(r);
            }
        }
        for (key, list, out) in [
            ("src", &self.src, &mut m.src),
            ("dst", &self.dst, &mut m.dst),
        ] {
            for (i, p) in list.iter().enumerate() {
                out.push(p.parse().or_else(|e| bad(format!("{at}.{key}[{i}]"), e))?);
            }
        }
        for (i, d) in self.dscp.iter().enumerate() {
            if *d > 63 {
                return bad(
                    format!("{at}.dscp[{i}]"),
                    format!("DSCP {d} is not 0 to 63"),
                );
            }
            m.dscp.push(*d);
        }
        Ok(m)
    }
}

fn check_requirements(r: &TrafficRequirements, at: &str) -> Check<()> {
    for (name, v) in [
        ("delay", r.delay),
        ("throughput", r.throughput),
        ("packetloss", r.packetloss),
    ] {
        if let Some(v) = v
            && !(v.is_finite() && v >= 0.0)
        {
            return bad(
                format!("{at}.{name}"),
                format!("{v} is not a non-negative number"),
            );
        }
    }
    Ok(())
}

fn check_hysteresis(h: Option<f64>, at: &str) -> Check<f64> {
    let h = h.unwrap_or(0.2);
    if !(h.is_finite() && (0.0..1.0).contains(&h)) {
        return bad(at, format!("{h} is not a fraction in [0, 1)"));
    }
    Ok(h)
}

fn check_rate(r: &Option<String>, at: &str) -> Check<Option<f64>> {
    let Some(r) = r else { return Ok(None) };
    match polypath_scenario::units::parse_rate(r) {
        Ok(v) if v > 0.0 => Ok(Some(v)),
        Ok(_) => bad(at, "a rate limit must be above zero"),
        Err(e) => bad(at, e),
    }
}

fn check_qos_class(q: &Option<String>, at: &str, or: QosClass) -> Check<QosClass> {
    match q {
        None => Ok(or),
        Some(name) => name.parse().or_else(|e| bad(at, e)),
    }
}

/// The stack class a class gets when its policy names none.
fn class_for_mode(mode: QosMode) -> QosClass {
    match mode {
        QosMode::Duplicate => QosClass::Critical,
        QosMode::Select | QosMode::Failover | QosMode::Fallback => QosClass::LowLatency,
        QosMode::Aggregate => QosClass::Bulk,
    }
}

impl RawPolicy {
    fn check(self) -> Check<Policy> {
        if self.allowed_interfaces.is_empty() {
            return bad("allowed_interfaces", "at least one interface is needed");
        }
        for (i, a) in self.allowed_interfaces.iter().enumerate() {
            if a.name.is_none() && a.ip.is_none() {
                return bad(
                    format!("allowed_interfaces[{i}]"),
                    "an interface needs a `name` or an `ip` to be matched with the gateway's interfaces",
                );
            }
            if let Some(n) = &a.name
                && self.allowed_interfaces[..i]
                    .iter()
                    .any(|b| b.name.as_ref() == Some(n))
            {
                return bad(
                    format!("allowed_interfaces[{i}].name"),
                    format!("interface `{n}` is listed twice"),
                );
            }
        }
        // Every interface, by priority (entries without one last, ties in list order).
        let mut by_priority: Vec<usize> = (0..self.allowed_interfaces.len()).collect();
        by_priority.sort_by_key(|&i| (self.allowed_interfaces[i].priority.unwrap_or(u32::MAX), i));
        check_requirements(&self.traffic_requirements, "traffic_requirements")?;
        let mode = self.mode.unwrap_or(QosMode::Fallback);
        let default = ClassRule {
            name: "default".into(),
            matcher: Match::default(),
            mode,
            qos_class: check_qos_class(&self.qos_class, "qos_class", QosClass::BestEffort)?,
            interfaces: by_priority.clone(),
            requirements: self.traffic_requirements.clone(),
            hysteresis: check_hysteresis(self.hysteresis, "hysteresis")?,
            hold_time: Duration::from_millis(self.hold_time_ms.unwrap_or(1000)),
            priority: self.priority.unwrap_or(10),
            weight: self.weight.unwrap_or(1),
            rate_limit: check_rate(&self.rate_limit, "rate_limit")?,
            transport: Transport::Datagram,
        };
        check_mode(&default, "mode")?;
        if default.weight == 0 {
            return bad("weight", "a weight must be at least 1");
        }
        let mut classes = Vec::with_capacity(self.classes.len());
        for (i, c) in self.classes.iter().enumerate() {
            let at = format!("classes[{i}]");
            if c.name.is_empty() || c.name == "default" {
                return bad(
                    format!("{at}.name"),
                    "a class needs a name other than `default`",
                );
            }
            if self.classes[..i].iter().any(|o| o.name == c.name) {
                return bad(
                    format!("{at}.name"),
                    format!("class `{}` is defined twice", c.name),
                );
            }
            let interfaces = match &c.interfaces {
                None => by_priority.clone(),
                Some(names) => {
                    let mut v = Vec::new();
                    for (k, n) in names.iter().enumerate() {
                        let found = self.allowed_interfaces.iter().position(|a| {
                            a.name.as_deref() == Some(n.as_str())
                                || a.kind.as_deref() == Some(n.as_str())
                        });
                        match found {
                            Some(idx) if !v.contains(&idx) => v.push(idx),
                            Some(_) => {
                                return bad(
                                    format!("{at}.interfaces[{k}]"),
                                    format!("`{n}` is listed twice"),
                                );
                            }
                            None => {
                                return bad(
                                    format!("{at}.interfaces[{k}]"),
                                    format!("no allowed interface is named `{n}`"),
                                );
                            }
                        }
                    }
                    if v.is_empty() {
                        return bad(format!("{at}.interfaces"), "a class needs an interface");
                    }
                    v
                }
            };
            check_requirements(
                &c.traffic_requirements,
                &format!("{at}.traffic_requirements"),
            )?;
            let matcher = c.matcher.check(&format!("{at}.match"))?;
            let transport = c.transport.unwrap_or(Transport::Datagram);
            if transport != Transport::Datagram && matcher.protocols != [proto::TCP] {
                return bad(
                    format!("{at}.transport"),
                    "stream and mptcp transports carry TCP: the class must match `\"protocol\": [\"tcp\"]` only",
                );
            }
            let rule = ClassRule {
                name: c.name.clone(),
                matcher,
                mode: c.mode,
                qos_class: check_qos_class(
                    &c.qos_class,
                    &format!("{at}.qos_class"),
                    class_for_mode(c.mode),
                )?,
                interfaces,
                requirements: c.traffic_requirements.clone(),
                hysteresis: check_hysteresis(c.hysteresis, &format!("{at}.hysteresis"))?,
                hold_time: Duration::from_millis(c.hold_time_ms.unwrap_or(1000)),
                priority: c.priority.unwrap_or(0),
                weight: c.weight.unwrap_or(1),
                rate_limit: check_rate(&c.rate_limit, &format!("{at}.rate_limit"))?,
                transport,
            };
            if rule.weight == 0 {
                return bad(format!("{at}.weight"), "a weight must be at least 1");
            }
            check_mode(&rule, &format!("{at}.mode"))?;
            classes.push(rule);
        }
        // Classes sharing a stack class must share its policy.
        let all: Vec<&ClassRule> = std::iter::once(&default).chain(&classes).collect();
        for (i, c) in all.iter().enumerate() {
            if let Some(other) = all[..i].iter().find(|o| {
                o.qos_class == c.qos_class
                    && (o.mode != c.mode
                        || o.interfaces != c.interfaces
                        || o.requirements != c.requirements
                        || o.hysteresis != c.hysteresis
                        || o.hold_time != c.hold_time)
            }) {
                let field = if i == 0 {
                    "qos_class".to_string()
                } else {
                    format!("classes[{}].qos_class", i - 1)
                };
                return bad(
                    field,
                    format!(
                        "class `{}` is sent as `{}`, like class `{}`, but with another mode, \
                         interface list, requirements, hysteresis or hold time; give it its \
                         own qos_class (best_effort, bulk, low_latency, critical)",
                        c.name,
                        c.qos_class.name(),
                        other.name
                    ),
                );
            }
        }
        let ms = |v: Option<u64>, d: u64, field: &str| -> Check<Duration> {
            match v.unwrap_or(d) {
                0 => bad(field, "must be at least 1 ms"),
                n => Ok(Duration::from_millis(n)),
            }
        };
        Ok(Policy {
            file: String::new(),
            policy_num: self.policy_num,
            interfaces: self.allowed_interfaces,
            default,
            classes,
            scheduling: self.scheduling.unwrap_or(Scheduling::Strict),
            detection: ms(self.detection_ms, 100, "detection_ms")?,
            probe_interval: ms(self.probe_interval_ms, 20, "probe_interval_ms")?,
        })
    }
}

fn check_mode(c: &ClassRule, field: &str) -> Check<()> {
    if matches!(c.mode, QosMode::Duplicate) && c.interfaces.len() < 2 {
        return bad(field, "duplicate needs at least two interfaces");
    }
    Ok(())
}

/// The 1-based line on which the value at `path` (`classes[1].match.dst[0]`) starts in the
/// JSON `text`, or the line of its deepest ancestor that exists.
pub fn json_line_of(text: &str, path: &str) -> Option<usize> {
    let want = split_path(path);
    let mut best: Option<usize> = None;
    let mut best_depth = 0;
    let mut walker = Walker {
        s: text.as_bytes(),
        i: 0,
    };
    let mut stack: Vec<PathPart> = Vec::new();
    walker.value(&mut stack, &mut |stack: &[PathPart], offset| {
        let depth = stack.len();
        if depth <= want.len() && stack == &want[..depth] && (best.is_none() || depth > best_depth)
        {
            best = Some(offset);
            best_depth = depth;
        }
    });
    best.map(|off| text[..off].matches('\n').count() + 1)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PathPart {
    Key(String),
    Index(usize),
}

fn split_path(path: &str) -> Vec<PathPart> {
    let mut out = Vec::new();
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (key, rest) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        if !key.is_empty() {
            out.push(PathPart::Key(key.to_string()));
        }
        for idx in rest.split('[').filter(|s| !s.is_empty()) {
            if let Ok(n) = idx.trim_end_matches(']').parse() {
                out.push(PathPart::Index(n));
            }
        }
    }
    out
}

/// A minimal JSON walker that reports where each value starts (for text that already
/// parsed: it never fails, it stops at what it does not understand).
struct Walker<'a> {
    s: &'a [u8],
    i: usize,
}

impl Walker<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn string(&mut self) -> String {
        let start = self.i + 1;
        self.i += 1;
        while let Some(&c) = self.s.get(self.i) {
            match c {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    break;
                }
                _ => self.i += 1,
            }
        }
        String::from_utf8_lossy(
            &self.s[start.min(self.s.len())..self.i.saturating_sub(1).max(start).min(self.s.len())],
        )
        .into_owned()
    }

    fn value(&mut self, stack: &mut Vec<PathPart>, seen: &mut dyn FnMut(&[PathPart], usize)) {
        self.ws();
        seen(stack, self.i);
        match self.s.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                loop {
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b'"') => {
                            let key = self.string();
                            self.ws();
                            if self.s.get(self.i) == Some(&b':') {
                                self.i += 1;
                            }
                            stack.push(PathPart::Key(key));
                            self.value(stack, seen);
                            stack.pop();
                        }
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return;
                        }
                        _ => return,
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut n = 0;
                loop {
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b']') => {
                            self.i += 1;
                            return;
                        }
                        Some(b',') => self.i += 1,
                        Some(_) => {
                            stack.push(PathPart::Index(n));
                            self.value(stack, seen);
                            stack.pop();
                            n += 1;
                        }
                        None => return,
                    }
                }
            }
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
                {
                    self.i += 1;
                }
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::tests::ipv4;

    /// The paper's Fig. 7, verbatim (the QoS scheduler's tests read the same file).
    pub(crate) const FIG7: &str = include_str!("../../quic/src/sched/qos_fig7.json");

    #[test]
    fn the_papers_policy_is_a_fallback_default_class() {
        let p = Policy::parse(FIG7, "fig7.json").unwrap();
        assert_eq!(p.policy_num.as_deref(), Some("UC03"));
        assert_eq!(p.default.mode, QosMode::Fallback);
        // Wi-Fi (priority 1) first.
        assert_eq!(p.default.interfaces, vec![1, 0]);
        assert_eq!(p.default.requirements.delay, Some(1.0));
        assert!(p.classes.is_empty());
        assert_eq!(p.classify(None), 0);
    }

    const CLASSES: &str = r#"{
  "allowed_interfaces": [
    { "name": "eth0", "priority": 1 },
    { "name": "wlan0", "priority": 2 }
  ],
  "mode": "aggregate",
  "classes": [
    { "name": "voice", "match": { "protocol": ["udp"], "dst_ports": ["5000-5010", 6000], "dscp": [46] },
      "mode": "duplicate" },
    { "name": "web", "match": { "protocol": ["tcp"], "dst": ["10.99.0.0/24"] },
      "mode": "fallback", "interfaces": ["wlan0", "eth0"],
      "traffic_requirements": { "delay": 1 }, "rate_limit": "20Mbit/s", "priority": 3 }
  ]
}"#;

    #[test]
    fn classes_match_packets() {
        let p = Policy::parse(CLASSES, "c.json").unwrap();
        assert_eq!(p.classes[0].qos_class, QosClass::Critical);
        assert_eq!(p.classes[1].qos_class, QosClass::LowLatency);
        assert_eq!(p.default.qos_class, QosClass::BestEffort);
        assert_eq!(p.classes[1].interfaces, vec![1, 0]);
        assert_eq!(p.classes[1].rate_limit, Some(20e6));
        let info = |proto, port, dscp, dst| {
            crate::classify::parse(&ipv4([10, 0, 0, 1], dst, proto, (1234, port), dscp, 60))
        };
        let voice = info(proto::UDP, 5004, 46, [1, 2, 3, 4]);
        assert_eq!(p.classify(voice.as_ref()), 1);
        let not_ef = info(proto::UDP, 5004, 0, [1, 2, 3, 4]);
        assert_eq!(p.classify(not_ef.as_ref()), 0);
        let port_6000 = info(proto::UDP, 6000, 46, [1, 2, 3, 4]);
        assert_eq!(p.classify(port_6000.as_ref()), 1);
        let web = info(proto::TCP, 80, 0, [10, 99, 0, 7]);
        assert_eq!(p.classify(web.as_ref()), 2);
        let elsewhere = info(proto::TCP, 80, 0, [10, 98, 0, 7]);
        assert_eq!(p.classify(elsewhere.as_ref()), 0);
    }

    fn err(text: &str) -> PolicyError {
        Policy::parse(text, "bad.json").unwrap_err()
    }

    #[test]
    fn bad_files_name_file_line_and_field() {
        // A type error: serde's path and line.
        let e = err(&CLASSES.replace("\"duplicate\"", "\"triplicate\""));
        assert_eq!(e.field.as_deref(), Some("classes[0].mode"), "{e}");
        assert_eq!(e.line, Some(9), "{e}");
        assert!(
            e.to_string()
                .starts_with("bad.json:9: field `classes[0].mode`:"),
            "{e}"
        );
        // A check after parsing: the located field.
        let e = err(&CLASSES.replace("\"5000-5010\"", "\"5010-5000\""));
        assert_eq!(e.field.as_deref(), Some("classes[0].match.dst_ports[0]"));
        assert_eq!(e.line, Some(8));
        let e = err(&CLASSES.replace("[\"wlan0\", \"eth0\"]", "[\"wlan0\", \"lte0\"]"));
        assert_eq!(e.field.as_deref(), Some("classes[1].interfaces[1]"));
        assert_eq!(e.line, Some(11));
        assert!(e.message.contains("lte0"), "{e}");
        let e = err(&CLASSES.replace("\"10.99.0.0/24\"", "\"10.99.0.0/33\""));
        assert_eq!(e.field.as_deref(), Some("classes[1].match.dst[0]"));
        assert_eq!(e.line, Some(10));
        let e = err(&CLASSES.replace("\"20Mbit/s\"", "\"20 parsecs\""));
        assert_eq!(e.field.as_deref(), Some("classes[1].rate_limit"));
        assert_eq!(e.line, Some(12));
        // An unknown key.
        let e = err(&CLASSES.replace("\"priority\": 3", "\"prio\": 3"));
        assert!(e.message.contains("unknown field `prio`"), "{e}");
        assert_eq!(e.line, Some(12));
        // Syntax.
        let e = err("{\n  \"allowed_interfaces\": [,]\n}");
        assert_eq!(e.line, Some(2));
        // Two classes on one stack class with different modes.
        let e = err(&CLASSES.replace(
            "\"mode\": \"fallback\"",
            "\"mode\": \"fallback\", \"qos_class\": \"critical\"",
        ));
        assert_eq!(e.field.as_deref(), Some("classes[1].qos_class"));
        // Duplication over one interface.
        let e = err(&CLASSES.replace(
            "\"mode\": \"duplicate\"",
            "\"mode\": \"duplicate\", \"interfaces\": [\"eth0\"]",
        ));
        assert_eq!(e.field.as_deref(), Some("classes[0].mode"));
        let e = err(&FIG7.replace("\"delay\": 1", "\"delay\": -1"));
        assert_eq!(e.field.as_deref(), Some("traffic_requirements.delay"));
        assert_eq!(e.line, Some(28));
        let e = err("{\"allowed_interfaces\": []}");
        assert_eq!(e.field.as_deref(), Some("allowed_interfaces"));
    }

    #[test]
    fn json_lines_of_paths() {
        let text = "{\n \"a\": [\n  1,\n  {\"b\": \"x\"}\n ],\n \"c\": 2\n}";
        assert_eq!(json_line_of(text, "a"), Some(2));
        assert_eq!(json_line_of(text, "a[1].b"), Some(4));
        assert_eq!(json_line_of(text, "a[1].missing"), Some(4));
        assert_eq!(json_line_of(text, "c"), Some(6));
        assert_eq!(json_line_of(text, "z"), Some(1));
    }
}
