//! The scenario file exactly as written (serde layer). Resolution into the
//! public model happens in `resolve.rs`.

use std::fmt;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::units::{Dur, Rate, Size, parse_duration, parse_size};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScenario {
    pub name: Option<String>,
    pub description: Option<String>,
    pub sim: RawSim,
    #[serde(default)]
    pub output: RawOutput,
    #[serde(default)]
    pub host: Vec<RawHost>,
    #[serde(default)]
    pub link: Vec<RawLink>,
    #[serde(default)]
    pub flow: Vec<RawFlow>,
    pub radio: Option<toml::Table>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSim {
    pub duration: Dur,
    pub seed: Option<u64>,
    pub stop_when_done: Option<bool>,
    pub packet_protection: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOutput {
    pub bin: Option<Dur>,
    pub packet_log: Option<bool>,
    pub path_series: Option<bool>,
    pub rb_events: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHost {
    pub name: String,
    pub count: Option<u32>,
    pub forward: Option<bool>,
    pub tcp_rmem: Option<Vec<u64>>,
    pub tcp_wmem: Option<Vec<u64>>,
    #[serde(default)]
    pub interfaces: Vec<RawIface>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIface {
    pub name: String,
    pub addr: String,
    pub link: Option<String>,
    pub side: Option<RawSide>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawSide {
    A,
    B,
}

/// `outage_signal = true | false | "a" | "b"`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawOutageSignal {
    Both(bool),
    Side(RawSide),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoute {
    pub dst: String,
    pub src: Option<String>,
    pub via: String,
}

/// One link; the direction fields at top level apply to both directions,
/// `up` (side a to side b) and `down` (b to a) override them field by field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLink {
    pub name: String,
    pub rate: Option<RawRate>,
    pub delay: Option<Dur>,
    pub jitter: Option<Dur>,
    pub jitter_dist: Option<RawJitterDist>,
    pub reorder: Option<bool>,
    pub loss: Option<RawLoss>,
    pub duplicate: Option<f64>,
    pub queue: Option<RawQueue>,
    pub outages: Option<Vec<RawOutage>>,
    pub outage_policy: Option<RawOutagePolicy>,
    pub steps: Option<Vec<RawStep>>,
    pub up: Option<RawDir>,
    pub down: Option<RawDir>,
    pub radio: Option<RawRadioBinding>,
    pub outage_signal: Option<RawOutageSignal>,
    pub predictor: Option<RawPredictor>,
}

/// `predictor = { kind = "oracle", period = "1s" }` or `predictor = { file = "pred.txt" }`
/// on a link direction: predicted throughput delivered to the hosts as link hints.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPredictor {
    pub kind: Option<String>,
    pub file: Option<String>,
    pub format: Option<RawPredictionFormat>,
    pub column: Option<i64>,
    pub interval: Option<Dur>,
    pub period: Option<Dur>,
    pub name: Option<String>,
    pub tell: Option<RawTell>,
    pub observe: Option<RawObserve>,
    pub bias: Option<f64>,
    pub noise_sigma: Option<f64>,
    pub window: Option<i64>,
    pub alpha: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawPredictionFormat {
    Lumos5g,
    Npy,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawTell {
    Sender,
    Receiver,
    Both,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawObserve {
    Capacity,
    Delivered,
}

/// `radio = { ue = 0, iface = 0 }` or `radio = { ue = 1, iface = "nr0-scg" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRadioBinding {
    pub ue: u32,
    pub iface: RawRadioIface,
}

/// A radio path of a UE by number or by name.
#[derive(Debug, Clone)]
pub(crate) enum RawRadioIface {
    Index(i64),
    Name(String),
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDir {
    pub rate: Option<RawRate>,
    pub delay: Option<Dur>,
    pub jitter: Option<Dur>,
    pub jitter_dist: Option<RawJitterDist>,
    pub reorder: Option<bool>,
    pub loss: Option<RawLoss>,
    pub duplicate: Option<f64>,
    pub queue: Option<RawQueue>,
    pub outages: Option<Vec<RawOutage>>,
    pub outage_policy: Option<RawOutagePolicy>,
    pub steps: Option<Vec<RawStep>>,
    pub predictor: Option<RawPredictor>,
}

impl RawLink {
    /// The fields shared by both directions.
    pub fn base(&self) -> RawDir {
        RawDir {
            rate: self.rate.clone(),
            delay: self.delay,
            jitter: self.jitter,
            jitter_dist: self.jitter_dist,
            reorder: self.reorder,
            loss: self.loss.clone(),
            duplicate: self.duplicate,
            queue: self.queue,
            outages: self.outages.clone(),
            outage_policy: self.outage_policy,
            steps: self.steps.clone(),
            predictor: self.predictor.clone(),
        }
    }
}

impl RawDir {
    /// Whether `field` is set in this table.
    pub fn has(&self, field: &str) -> bool {
        match field {
            "rate" => self.rate.is_some(),
            "delay" => self.delay.is_some(),
            "jitter" => self.jitter.is_some(),
            "jitter_dist" => self.jitter_dist.is_some(),
            "reorder" => self.reorder.is_some(),
            "loss" => self.loss.is_some(),
            "duplicate" => self.duplicate.is_some(),
            "queue" => self.queue.is_some(),
            "outages" => self.outages.is_some(),
            "outage_policy" => self.outage_policy.is_some(),
            "steps" => self.steps.is_some(),
            "predictor" => self.predictor.is_some(),
            _ => false,
        }
    }

    /// `self` with every unset field taken from `base`.
    pub fn over(&self, base: &RawDir) -> RawDir {
        RawDir {
            rate: self.rate.clone().or_else(|| base.rate.clone()),
            delay: self.delay.or(base.delay),
            jitter: self.jitter.or(base.jitter),
            jitter_dist: self.jitter_dist.or(base.jitter_dist),
            reorder: self.reorder.or(base.reorder),
            loss: self.loss.clone().or_else(|| base.loss.clone()),
            duplicate: self.duplicate.or(base.duplicate),
            queue: self.queue.or(base.queue),
            outages: self.outages.clone().or_else(|| base.outages.clone()),
            outage_policy: self.outage_policy.or(base.outage_policy),
            steps: self.steps.clone().or_else(|| base.steps.clone()),
            predictor: self.predictor.clone().or_else(|| base.predictor.clone()),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawJitterDist {
    Uniform,
    Normal,
    Exponential,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawOutagePolicy {
    Drop,
    Hold,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOutage {
    pub at: Dur,
    pub duration: Dur,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStep {
    pub at: Dur,
    pub rate: Option<Rate>,
    pub delay: Option<Dur>,
    pub loss: Option<RawLoss>,
}

/// `rate = "100Mbit/s"` or `rate = { ... }`.
#[derive(Debug, Clone)]
pub(crate) enum RawRate {
    Constant(f64),
    Table(Box<RawRateTable>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRateTable {
    pub schedule: Option<Vec<RawSchedulePoint>>,
    pub period: Option<Dur>,
    pub trace: Option<String>,
    pub format: Option<RawTraceFormat>,
    pub column: Option<RawColumn>,
    pub unit: Option<String>,
    pub interval: Option<Dur>,
    pub missing: Option<RawMissing>,
    pub scale: Option<f64>,
    #[serde(rename = "loop")]
    pub looped: Option<bool>,
    pub source: Option<String>,
    pub initial: Option<Rate>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSchedulePoint {
    pub at: Dur,
    pub rate: Rate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawTraceFormat {
    Lumos5g,
    Mahimahi,
    Csv,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawMissing {
    Hold,
    Zero,
    Skip,
}

/// A column given by header name or by 1-based number.
#[derive(Debug, Clone)]
pub(crate) enum RawColumn {
    Name(String),
    Number(i64),
}

/// `loss = 0.01` or `loss = { model = ..., ... }`.
#[derive(Debug, Clone)]
pub(crate) enum RawLoss {
    Probability(f64),
    Table(RawLossTable),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLossTable {
    pub model: RawLossKind,
    pub p: Option<f64>,
    pub r: Option<f64>,
    pub k: Option<f64>,
    pub h: Option<f64>,
    pub mean: Option<f64>,
    pub burst: Option<f64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RawLossKind {
    Bernoulli,
    GilbertElliott,
}

/// `queue = "64KB" | "20ms" | "1bdp" | "unlimited" | 65536`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RawQueue {
    Unlimited,
    Bytes(u64),
    Time(std::time::Duration),
    Bdp(f64),
}

fn parse_queue(s: &str) -> Result<RawQueue, String> {
    let t = s.trim();
    if t == "unlimited" || t == "inf" {
        return Ok(RawQueue::Unlimited);
    }
    if let Some(n) = t.strip_suffix("bdp").or_else(|| t.strip_suffix("BDP")) {
        let v: f64 = n
            .trim()
            .parse()
            .map_err(|_| format!("queue `{t}`: `{n}` is not a number"))?;
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("queue `{t}`: the BDP multiple must be positive"));
        }
        return Ok(RawQueue::Bdp(v));
    }
    if t.ends_with('s') || t.ends_with("min") || t.ends_with('h') {
        return parse_duration(t).map(RawQueue::Time);
    }
    parse_size(t).map(RawQueue::Bytes).map_err(|e| {
        format!("{e}; a queue is a size (\"64KB\"), a time at the current rate (\"20ms\"), a BDP multiple (\"1bdp\") or \"unlimited\"")
    })
}

/// One path of a flow: `"nr"` (local interface) or `{ local = "nr", remote = "eth1" }`.
#[derive(Debug, Clone)]
pub(crate) struct RawPath {
    pub local: String,
    pub remote: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPathTable {
    local: String,
    remote: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawFlowKind {
    Quic,
    Cbr,
    Onoff,
    Reqresp,
    Command,
    Tcp,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawDist {
    Fixed,
    Exponential,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawDirection {
    Upload,
    Download,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFlow {
    pub name: String,
    pub kind: RawFlowKind,
    pub from: String,
    pub to: String,
    pub paths: Option<Vec<RawPath>>,
    pub start: Option<Dur>,
    pub start_spread: Option<Dur>,
    pub stop: Option<Dur>,
    // quic
    pub bytes: Option<Size>,
    pub direction: Option<RawDirection>,
    pub scheduler: Option<String>,
    pub cc: Option<String>,
    pub path_manager: Option<String>,
    pub stack: Option<String>,
    pub port: Option<u16>,
    pub options: Option<toml::Table>,
    // udp traffic
    pub rate: Option<Rate>,
    pub packet_size: Option<Size>,
    pub on: Option<Dur>,
    pub off: Option<Dur>,
    pub dist: Option<RawDist>,
    pub request_size: Option<Size>,
    pub response_size: Option<Size>,
    pub interval: Option<Dur>,
    pub count: Option<u64>,
    // command
    pub command: Option<String>,
    // tcp
    pub mptcp: Option<bool>,
    // cbr
    pub devices: Option<u32>,
    // tcp, quic
    pub message_size: Option<Size>,
}

// ---- string-or-table deserializers ----------------------------------------

struct RateVisitor;

impl<'de> Visitor<'de> for RateVisitor {
    type Value = RawRate;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a rate such as \"100Mbit/s\" or a table with schedule, trace or source")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawRate, E> {
        crate::units::parse_rate(v)
            .map(RawRate::Constant)
            .map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawRate, E> {
        self.visit_f64(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawRate, E> {
        self.visit_f64(v as f64)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawRate, E> {
        if v == 0.0 {
            Ok(RawRate::Constant(0.0))
        } else {
            Err(E::custom(crate::units::bare_number("rate", "Mbit/s", v)))
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawRate, A::Error> {
        RawRateTable::deserialize(MapAccessDeserializer::new(map))
            .map(|t| RawRate::Table(Box::new(t)))
    }
}

impl<'de> Deserialize<'de> for RawRate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RateVisitor)
    }
}

struct LossVisitor;

impl<'de> Visitor<'de> for LossVisitor {
    type Value = RawLoss;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a loss probability (0.01) or a table with model = \"bernoulli\" | \"gilbert-elliott\"",
        )
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawLoss, E> {
        Ok(RawLoss::Probability(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawLoss, E> {
        Ok(RawLoss::Probability(v as f64))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawLoss, A::Error> {
        RawLossTable::deserialize(MapAccessDeserializer::new(map)).map(RawLoss::Table)
    }
}

impl<'de> Deserialize<'de> for RawLoss {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LossVisitor)
    }
}

struct QueueVisitor;

impl<'de> Visitor<'de> for QueueVisitor {
    type Value = RawQueue;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a queue limit: \"64KB\", \"20ms\", \"1bdp\", \"unlimited\" or a byte count")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawQueue, E> {
        parse_queue(v).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawQueue, E> {
        u64::try_from(v)
            .map(RawQueue::Bytes)
            .map_err(|_| E::custom("queue size is negative"))
    }
}

impl<'de> Deserialize<'de> for RawQueue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(QueueVisitor)
    }
}

struct ColumnVisitor;

impl<'de> Visitor<'de> for ColumnVisitor {
    type Value = RawColumn;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a column header name or a 1-based column number")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawColumn, E> {
        Ok(RawColumn::Name(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawColumn, E> {
        Ok(RawColumn::Number(v))
    }
}

impl<'de> Deserialize<'de> for RawColumn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ColumnVisitor)
    }
}

struct RadioIfaceVisitor;

impl<'de> Visitor<'de> for RadioIfaceVisitor {
    type Value = RawRadioIface;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a radio path number (0, 1, ...) or a radio path name (\"nr0\", \"nr0-scg\")")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawRadioIface, E> {
        Ok(RawRadioIface::Name(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawRadioIface, E> {
        Ok(RawRadioIface::Index(v))
    }
}

impl<'de> Deserialize<'de> for RawRadioIface {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RadioIfaceVisitor)
    }
}

struct PathVisitor;

impl<'de> Visitor<'de> for PathVisitor {
    type Value = RawPath;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a local interface name or { local = \"...\", remote = \"...\" }")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawPath, E> {
        Ok(RawPath {
            local: v.to_string(),
            remote: None,
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawPath, A::Error> {
        let t = RawPathTable::deserialize(MapAccessDeserializer::new(map))?;
        Ok(RawPath {
            local: t.local,
            remote: t.remote,
        })
    }
}

impl<'de> Deserialize<'de> for RawPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PathVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_forms() {
        assert!(matches!(parse_queue("1bdp"), Ok(RawQueue::Bdp(v)) if v == 1.0));
        assert!(matches!(parse_queue("20ms"), Ok(RawQueue::Time(d)) if d.as_millis() == 20));
        assert!(matches!(parse_queue("64KB"), Ok(RawQueue::Bytes(64000))));
        assert!(matches!(parse_queue("unlimited"), Ok(RawQueue::Unlimited)));
        assert!(parse_queue("0bdp").is_err());
        assert!(parse_queue("lots").is_err());
    }
}
