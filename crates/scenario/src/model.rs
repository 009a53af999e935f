//! The resolved scenario: names turned into indices, host groups expanded,
//! traces loaded, defaults applied. This is what the simulator (and later the
//! emulator and the lab) consume.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::trace::{DeliveryTrace, MAHIMAHI_OPPORTUNITY_BYTES, RateTrace};

/// A whole scenario, resolved.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file it was read from (used in error messages).
    pub file: PathBuf,
    /// `name` from the file, or the file stem.
    pub name: String,
    /// Free-text description.
    pub description: String,
    /// `[sim]`.
    pub sim: SimSettings,
    /// `[output]`.
    pub output: OutputSettings,
    /// Hosts, with groups (`count = N`) expanded to N hosts.
    pub hosts: Vec<Host>,
    /// Links, in file order.
    pub links: Vec<Link>,
    /// Flows, in file order.
    pub flows: Vec<Flow>,
    /// The raw `[radio]` table, for the 5G radio model to interpret.
    pub radio: Option<toml::Table>,
    pub(crate) source: Arc<str>,
}

/// `[sim]`: run control.
#[derive(Debug, Clone, PartialEq)]
pub struct SimSettings {
    /// Hard stop in simulated time.
    pub duration: Duration,
    /// Seed used when the caller gives none (default 0).
    pub seed: u64,
    /// Stop early once every agent reports done and no packet is in flight
    /// (default true).
    pub stop_when_done: bool,
    /// How the simulator's QUIC endpoints protect their packets (`packet_protection`,
    /// default [`PacketProtection::DEFAULT`]).
    pub packet_protection: PacketProtection,
}

/// `[sim] packet_protection`: the QUIC endpoints' packet protection in the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketProtection {
    /// `"aead"`: the real AEAD and header protection of RFC 9001.
    Aead,
    /// `"simulated"`: the same bytes on the wire (headers, sizes, the 16-byte tag) without
    /// the cryptography.
    Simulated,
}

impl PacketProtection {
    /// What a scenario without the key gets.
    pub const DEFAULT: PacketProtection = PacketProtection::Simulated;

    /// The name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            PacketProtection::Aead => "aead",
            PacketProtection::Simulated => "simulated",
        }
    }

    /// The choice named `name` in a scenario file.
    pub fn from_name(name: &str) -> Option<Self> {
        [PacketProtection::Aead, PacketProtection::Simulated]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

/// `[output]`: recorders.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputSettings {
    /// Time-series bin (default 100 ms).
    pub bin: Duration,
    /// Write one row per delivered packet to `packets.csv` (default false).
    pub packet_log: bool,
    /// Write per-path agent samples to `paths.csv` (default true).
    pub path_series: bool,
    /// Serve radio downlinks with per-slot resource-block allocation events in the
    /// link-event stream and to agents (default false: they are voluminous). Service is
    /// per slot either way; this only controls whether the allocations are reported.
    pub rb_events: bool,
}

/// One host.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// Unique name (`ue17` for member 17 of group `ue`).
    pub name: String,
    /// The `[[host]]` entry's name (same as `name` unless `count` was given).
    pub group: String,
    /// Member number within the group (0 for a single host).
    pub index: u32,
    /// Forwards packets not addressed to it, using `routes`.
    pub forward: bool,
    /// Interfaces, in file order.
    pub interfaces: Vec<Interface>,
    /// Forwarding routes, first match wins.
    pub routes: Vec<Route>,
    /// Kernel TCP buffer limits of the host, for real processes in the emulator.
    pub tcp_buffers: TcpBuffers,
}

/// A host's kernel TCP buffer limits (`net.ipv4.tcp_rmem` and `net.ipv4.tcp_wmem`: the
/// minimum, initial and largest buffer in bytes that autotuning gives a socket). The
/// emulator writes them into the host's network namespace, which otherwise copies the
/// machine's own values, so that a result does not depend on the machine it ran on. The
/// simulator has no kernel TCP and ignores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpBuffers {
    /// Receive buffer: the largest one bounds the window the host advertises.
    pub rmem: [u64; 3],
    /// Send buffer.
    pub wmem: [u64; 3],
}

impl Default for TcpBuffers {
    /// Linux's own defaults (Documentation/networking/ip-sysctl.rst: tcp_rmem 4096, 131072,
    /// 6291456; tcp_wmem 4096, 16384, 4194304).
    fn default() -> Self {
        TcpBuffers {
            rmem: [4096, 131_072, 6_291_456],
            wmem: [4096, 16_384, 4_194_304],
        }
    }
}

/// One network interface of a host.
#[derive(Debug, Clone, PartialEq)]
pub struct Interface {
    /// Name, unique within the host.
    pub name: String,
    /// Address (the group's address plus the member number).
    pub addr: IpAddr,
    /// The link side this interface is attached to, if any.
    pub attach: Option<Attachment>,
}

/// Where an interface plugs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attachment {
    /// Index into [`Scenario::links`].
    pub link: usize,
    /// Which end of the link.
    pub side: Side,
}

/// An end of a link. Packets sent from side A travel in the link's `up`
/// direction, packets from side B in its `down` direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// The `a` end.
    A,
    /// The `b` end.
    B,
}

impl Side {
    /// The other end.
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// An address prefix such as `10.0.0.0/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// The network address.
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub len: u8,
}

impl std::fmt::Display for Prefix {
    /// `network/len`, with the host bits of the address cleared (as `ip route` wants it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let net: IpAddr = match self.addr {
            IpAddr::V4(a) => {
                let bits = u32::from(self.len.min(32));
                let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let bits = u32::from(self.len.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        write!(f, "{net}/{}", self.len)
    }
}

impl std::str::FromStr for Prefix {
    type Err = String;

    /// `10.0.0.0/8`, `2001:db8::/32`, or one address (a host prefix).
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| format!("`{s}`: prefix length must be 0..={max}"))?,
        };
        Ok(Prefix { addr, len })
    }
}

impl Prefix {
    /// Whether `ip` falls inside this prefix (never across address families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let bits = u32::from(self.len.min(32));
                let mask = if bits == 0 {
                    0
                } else {
                    u32::MAX << (32 - bits)
                };
                u32::from(net) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let bits = u32::from(self.len.min(128));
                let mask = if bits == 0 {
                    0
                } else {
                    u128::MAX << (128 - bits)
                };
                u128::from(net) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// A forwarding rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Destination prefix.
    pub dst: Prefix,
    /// Optional source prefix (policy routing: pick the path by source).
    pub src: Option<Prefix>,
    /// Outgoing interface (index into the host's interfaces).
    pub via: usize,
}

/// One link: two independent directions.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Unique name.
    pub name: String,
    /// Side A to side B.
    pub up: LinkDirection,
    /// Side B to side A.
    pub down: LinkDirection,
    /// The radio path this link carries, if it is a radio link. Side A is then the UE and
    /// side B the network: `up` is the radio uplink, `down` the radio downlink, and both
    /// have [`RateModel::Radio`].
    pub radio: Option<RadioBinding>,
    /// Which ends of the link learn of its scheduled outages (`outage_signal`; default:
    /// none, outages are silent and the transport must find them itself).
    pub outage_signal: OutageSignal,
}

/// `outage_signal` of a link: whose interfaces know when the link goes down and comes back
/// (a Wi-Fi station losing its association, a LiFi receiver losing the light, a modem
/// leaving RRC connected). The simulator tells the agents on those hosts, with a `LinkDown`
/// link event when the link stops carrying packets for a scheduled outage and a `LinkUp`
/// event when it carries them again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutageSignal {
    /// Nobody (`false`, the default).
    #[default]
    Silent,
    /// The interfaces at both ends (`true`).
    BothEnds,
    /// Only the interfaces at one end (`"a"` or `"b"`), e.g. the device whose radio lost
    /// coverage while its peer's network link stayed up.
    End(Side),
}

/// `radio = { ue = .., iface = .. }` on a link: which radio path of the `[radio]` model
/// drives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RadioBinding {
    /// The UE's `id` in `[[radio.ues]]`.
    pub ue: u32,
    /// The UE's radio path.
    pub path: RadioPathRef,
}

/// A UE's radio path, by number or name. Paths are numbered per UE in the order of its
/// `[[radio.ues.interfaces]]`; a dual-connectivity interface is two paths (MCG, then SCG,
/// named `<name>` and `<name>-scg`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RadioPathRef {
    /// Path number (the `iface` of link events).
    Index(u16),
    /// Path name.
    Name(String),
}

/// Everything about one direction of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkDirection {
    /// Service rate.
    pub rate: RateModel,
    /// Propagation delay.
    pub delay: Duration,
    /// Extra random delay per packet.
    pub jitter: Jitter,
    /// Let jitter reorder packets (default false: a packet never overtakes the
    /// one before it).
    pub reorder: bool,
    /// Random loss.
    pub loss: LossModel,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Drop-tail queue limit (for a radio downlink, [`QueueLimit::Unlimited`]: the radio
    /// model sets the serving cell's buffer as the limit).
    pub queue: QueueLimit,
    /// Scheduled down intervals.
    pub outages: Vec<Outage>,
    /// What happens to queued and arriving packets while down.
    pub outage_policy: OutagePolicy,
    /// Scheduled step changes, sorted by time.
    pub steps: Vec<Step>,
    /// A throughput predictor for this direction, whose predictions the simulator delivers
    /// to the hosts at the ends of the link as link hints (`predictor = { ... }`).
    pub predictor: Option<LinkPredictor>,
}

/// `predictor = { ... }` of a link direction: predicted throughput of this direction,
/// reported every `period` the way a modem reports its estimates, and delivered to the
/// connections of the told hosts as `predicted_throughput` link events.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkPredictor {
    /// Where the predictions come from.
    pub source: PredictorSource,
    /// Time between reports (default 1 s); also the prediction's horizon.
    pub period: Duration,
    /// Name in the events (default: the kind, or `file`).
    pub name: String,
    /// Which end(s) of the link are told.
    pub tell: PredictionTell,
    /// What the history-based rules average.
    pub observe: PredictionInput,
    /// The key path it was written at (`link[0].down.predictor`), for errors about it.
    pub at: String,
}

/// Where a link direction's predictions come from.
#[derive(Debug, Clone, PartialEq)]
pub enum PredictorSource {
    /// One of the simulator's predictor rules (`polypath_ran::predict`), by kind name as in
    /// `[[radio.predictors]]` (`oracle`, `noisy_oracle`, `harmonic_mean`, `ewma`), with the
    /// parameters written (the simulator applies the rule's defaults and checks ranges).
    Rule(PredictorRule),
    /// A prediction file: one predicted rate per step (one second by default), the k-th
    /// sample being the prediction for `[k * step, (k + 1) * step)`.
    File {
        /// The file, as resolved against the scenario's folder.
        path: PathBuf,
        /// The predictions.
        trace: Arc<RateTrace>,
    },
}

/// A predictor rule and the parameters the scenario gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictorRule {
    /// The rule's kind name.
    pub kind: String,
    /// Noisy oracle: multiplicative bias.
    pub bias: Option<f64>,
    /// Noisy oracle: σ of the log-normal noise.
    pub noise_sigma: Option<f64>,
    /// Harmonic mean: number of samples.
    pub window: Option<u64>,
    /// EWMA: weight of the newest sample.
    pub alpha: Option<f64>,
}

/// `tell` of a predictor: which hosts' agents get the predictions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PredictionTell {
    /// The interfaces that send into this direction (the default: the sender schedules on
    /// the direction, as LAMP5G's sender does with its modem's estimate).
    #[default]
    Sender,
    /// The interfaces that receive from it (a UE learning its own downlink's prediction).
    Receiver,
    /// Both ends.
    Both,
}

/// `observe` of a predictor: the rate samples its history-based rules (EWMA, harmonic
/// mean) average.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PredictionInput {
    /// The direction's capacity over each period (what a saturating flow would get, as the
    /// traces measure it). The default.
    #[default]
    Capacity,
    /// The bytes the direction actually delivered over each period.
    Delivered,
}

/// How fast a link direction serves bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum RateModel {
    /// A fixed rate in bit/s.
    Constant(f64),
    /// Piecewise constant: `(start, bit/s)` points sorted by start, the first at
    /// zero. Traces given as per-second rates (Lumos5G, CSV columns) are turned
    /// into schedules. With `period`, the schedule repeats every `period`;
    /// without it the last rate holds forever (a trace that must stop ends with
    /// a 0 bit/s point).
    Schedule {
        /// `(start offset, bits per second)`.
        points: Vec<(Duration, f64)>,
        /// Loop period, if the schedule repeats.
        period: Option<Duration>,
    },
    /// Mahimahi delivery opportunities; each carries `1500 * scale` bytes.
    Deliveries {
        /// The loaded trace (shared).
        trace: Arc<DeliveryTrace>,
        /// Bytes-per-opportunity multiplier.
        scale: f64,
        /// Repeat the trace (`true`, Mahimahi's behaviour) or stop serving at its end.
        looped: bool,
    },
    /// Rate and availability come from an external source at run time, named
    /// `source`; `initial` holds until its first update.
    External {
        /// Source name.
        source: String,
        /// Rate before the first update, bit/s.
        initial: f64,
    },
    /// Rate, availability and (downlink) queue limit come from the radio path named by
    /// [`Link::radio`]; the link is down until the radio model first brings it up.
    Radio,
}

impl LinkDirection {
    /// The bits this direction can carry over `[from, to)` by its rate model, steps that set
    /// a rate, and scheduled outages (nothing while down): the ground truth an oracle
    /// predictor reads. `None` for rates known only at run time (external sources, radio).
    pub fn capacity_bits(&self, from: Duration, to: Duration) -> Option<f64> {
        if to <= from {
            return Some(0.0);
        }
        // Boundaries where the governing rule may change: rate steps and outage edges.
        let mut cuts = vec![from, to];
        for s in self.steps.iter().filter(|s| s.rate.is_some()) {
            cuts.push(s.at);
        }
        for o in &self.outages {
            cuts.push(o.at);
            cuts.push(o.at.saturating_add(o.duration));
        }
        cuts.retain(|c| *c >= from && *c <= to);
        cuts.sort_unstable();
        cuts.dedup();
        let mut bits = 0.0;
        for w in cuts.windows(2) {
            let [a, b] = [w[0], w[1]];
            let down = self
                .outages
                .iter()
                .any(|o| o.at <= a && a < o.at.saturating_add(o.duration));
            if down {
                continue;
            }
            let stepped = self
                .steps
                .iter()
                .filter(|s| s.at <= a)
                .filter_map(|s| s.rate)
                .next_back();
            bits += match stepped {
                Some(r) => r * (b - a).as_secs_f64(),
                None => self.rate.bits_between(a, b)?,
            };
        }
        Some(bits)
    }
}

impl RateModel {
    /// The bits this rate model serves over `[from, to)` (ignoring steps and outages; see
    /// [`LinkDirection::capacity_bits`]); `None` for rates known only at run time.
    pub fn bits_between(&self, from: Duration, to: Duration) -> Option<f64> {
        if to <= from {
            return Some(0.0);
        }
        match self {
            RateModel::Constant(r) => Some(r * (to - from).as_secs_f64()),
            RateModel::Schedule { points, period } => {
                Some(schedule_bits(points, *period, from, to))
            }
            RateModel::Deliveries {
                trace,
                scale,
                looped,
            } => {
                let ops = delivery_count(trace, *looped, from, to);
                Some(ops as f64 * MAHIMAHI_OPPORTUNITY_BYTES as f64 * 8.0 * scale)
            }
            RateModel::External { .. } | RateModel::Radio => None,
        }
    }

    /// The rate in force at time zero, in bit/s (the mean rate for Mahimahi
    /// traces, which have no instantaneous rate).
    pub fn initial_bps(&self) -> f64 {
        match self {
            RateModel::Constant(r) => *r,
            RateModel::Schedule { points, .. } => points.first().map(|p| p.1).unwrap_or(0.0),
            RateModel::Deliveries { trace, scale, .. } => trace.mean_bps() * scale,
            RateModel::External { initial, .. } => *initial,
            RateModel::Radio => 0.0,
        }
    }
}

/// Bits of a piecewise-constant schedule over `[from, to)`: each point's rate holds until
/// the next point, the last one until the period's end (or forever without a period).
fn schedule_bits(
    points: &[(Duration, f64)],
    period: Option<Duration>,
    from: Duration,
    to: Duration,
) -> f64 {
    // Bits over [a, b) within one pass of the points (times relative to its start), the
    // last point holding until `end`.
    let pass = |a: Duration, b: Duration| {
        let mut bits = 0.0;
        for (i, &(at, rate)) in points.iter().enumerate() {
            let next = points.get(i + 1).map_or(Duration::MAX, |p| p.0);
            let (lo, hi) = (at.max(a), next.min(b));
            if hi > lo {
                bits += rate * (hi - lo).as_secs_f64();
            }
        }
        bits
    };
    match period.filter(|p| !p.is_zero()) {
        None => pass(from, to),
        Some(p) => {
            let p_ns = p.as_nanos();
            let mut bits = 0.0;
            let mut cycle = from.as_nanos() / p_ns;
            loop {
                let start = cycle.saturating_mul(p_ns);
                let end = start.saturating_add(p_ns);
                let (lo, hi) = (from.as_nanos().max(start), to.as_nanos().min(end));
                if lo >= to.as_nanos() {
                    break;
                }
                if hi > lo {
                    let rel = |n: u128| {
                        Duration::from_nanos(u64::try_from(n - start).unwrap_or(u64::MAX))
                    };
                    bits += pass(rel(lo), rel(hi));
                }
                cycle += 1;
            }
            bits
        }
    }
}

/// Mahimahi delivery opportunities with a timestamp in `[from, to)`.
fn delivery_count(trace: &DeliveryTrace, looped: bool, from: Duration, to: Duration) -> u64 {
    let ops = &trace.opportunities_ms;
    // Opportunities of one pass at offsets (ms) in [a, b).
    let count = |a: u128, b: u128| {
        let lo = ops.partition_point(|&m| u128::from(m) < a);
        let hi = ops.partition_point(|&m| u128::from(m) < b);
        (hi - lo) as u64
    };
    // Millisecond boundaries: an opportunity at ms m lies in [from, to) when
    // from <= m ms < to, i.e. m in [ceil(from), ceil(to)).
    let ms_ceil = |d: Duration| d.as_nanos().div_ceil(1_000_000);
    let (a, b) = (ms_ceil(from), ms_ceil(to));
    let period = u128::from(trace.period_ms);
    if !looped || period == 0 {
        return count(a, b);
    }
    // A pass's stamps run from 0 to the period inclusive: the pass before `a`'s may reach it.
    let mut n = 0;
    let mut cycle = (a / period).saturating_sub(1);
    while cycle.saturating_mul(period) < b {
        let start = cycle * period;
        n += count(a.saturating_sub(start), b - start);
        cycle += 1;
    }
    n
}

/// Extra per-packet delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jitter {
    /// Scale of the distribution (zero disables jitter).
    pub amount: Duration,
    /// Shape.
    pub dist: JitterDist,
}

/// Jitter distributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitterDist {
    /// Uniform in `[0, amount]`.
    Uniform,
    /// Normal with mean 0 and standard deviation `amount`, clipped so the total
    /// delay is never negative.
    Normal,
    /// Exponential with mean `amount`.
    Exponential,
}

/// Random loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossModel {
    /// No random loss.
    None,
    /// Each packet lost independently with probability `p`.
    Bernoulli(f64),
    /// Two-state Gilbert-Elliott chain, stepped once per packet: from Good to
    /// Bad with probability `p`, from Bad to Good with `r`; a packet survives
    /// with probability `k` in Good and `h` in Bad.
    GilbertElliott {
        /// P(Good -> Bad).
        p: f64,
        /// P(Bad -> Good).
        r: f64,
        /// P(delivered | Good).
        k: f64,
        /// P(delivered | Bad).
        h: f64,
    },
}

impl LossModel {
    /// The long-run loss probability.
    pub fn mean_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli(p) => p,
            LossModel::GilbertElliott { p, r, k, h } => {
                if p + r == 0.0 {
                    1.0 - k
                } else {
                    let pi_bad = p / (p + r);
                    (1.0 - pi_bad) * (1.0 - k) + pi_bad * (1.0 - h)
                }
            }
        }
    }
}

/// Drop-tail queue limit (bytes waiting, not counting the packet being sent).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QueueLimit {
    /// Never drop for lack of space.
    Unlimited,
    /// A fixed number of bytes.
    Bytes(u64),
    /// As many bytes as the current rate sends in this time.
    Time(Duration),
    /// This multiple of the current rate times the link's round trip (this
    /// direction's delay plus the reverse direction's delay).
    Bdp(f64),
}

/// A scheduled down interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// When the link goes down.
    pub at: Duration,
    /// How long it stays down.
    pub duration: Duration,
}

/// What a down link does with packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutagePolicy {
    /// Flush the queue when going down and drop arrivals while down (default).
    Drop,
    /// Keep queueing (drop-tail still applies) and resume service when up.
    Hold,
}

/// A step change at a point in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When.
    pub at: Duration,
    /// New constant rate, bit/s (replaces any schedule or trace).
    pub rate: Option<f64>,
    /// New propagation delay.
    pub delay: Option<Duration>,
    /// New loss model.
    pub loss: Option<LossModel>,
}

/// One `[[flow]]` entry with its instances.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// Unique name.
    pub name: String,
    /// Traffic type and its parameters.
    pub kind: FlowKind,
    /// One instance per sending host of the `from` group.
    pub instances: Vec<FlowInstance>,
}

/// One instance of a flow: a sender host, a receiver host and their paths.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowInstance {
    /// Member number within the flow.
    pub index: u32,
    /// Host index of the `from` side (the QUIC client; the UDP sender; the
    /// requester).
    pub from: usize,
    /// Host index of the `to` side (the QUIC server; the UDP receiver).
    pub to: usize,
    /// Paths, one per local interface used.
    pub paths: Vec<FlowPath>,
    /// Start time.
    pub start: Duration,
    /// Optional stop time.
    pub stop: Option<Duration>,
}

/// One path of a flow instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPath {
    /// Interface index on the `from` host.
    pub local_iface: usize,
    /// Interface index on the `to` host.
    pub remote_iface: usize,
    /// The local interface's address.
    pub local: IpAddr,
    /// The remote interface's address.
    pub remote: IpAddr,
}

/// Traffic types.
#[derive(Debug, Clone, PartialEq)]
pub enum FlowKind {
    /// A QUIC transfer, run by the QUIC agent adapter.
    Quic(QuicFlow),
    /// Constant bit rate raw UDP.
    Cbr(CbrFlow),
    /// On/off raw UDP.
    OnOff(OnOffFlow),
    /// Request/response over raw UDP.
    RequestResponse(RequestResponseFlow),
    /// A command line run on the `from` host by the emulator (the simulator refuses it).
    Command(CommandFlow),
    /// A kernel TCP or MPTCP bulk transfer, run by the emulator with its TCP tool
    /// (`polypath tcp`); the simulator refuses it.
    Tcp(TcpFlow),
}

impl FlowKind {
    /// The `kind = "..."` string.
    pub fn name(&self) -> &'static str {
        match self {
            FlowKind::Quic(_) => "quic",
            FlowKind::Cbr(_) => "cbr",
            FlowKind::OnOff(_) => "onoff",
            FlowKind::RequestResponse(_) => "reqresp",
            FlowKind::Command(_) => "command",
            FlowKind::Tcp(_) => "tcp",
        }
    }
}

/// Which way a QUIC transfer's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferDirection {
    /// From the client (`from`) to the server (`to`).
    Upload,
    /// From the server to the client.
    Download,
}

/// `kind = "quic"` parameters (interpreted by the QUIC adapter).
#[derive(Debug, Clone, PartialEq)]
pub struct QuicFlow {
    /// Bytes to transfer (0 for a transactions flow).
    pub bytes: u64,
    /// Transfer direction (default upload; upload for a transactions flow).
    pub direction: TransferDirection,
    /// Request/response transactions instead of a bulk transfer (set by `request_size`
    /// and `response_size`).
    pub transactions: Option<QuicTransactions>,
    /// Scheduler name (default `"default"`).
    pub scheduler: String,
    /// Congestion controller name (default `"cubic"`).
    pub cc: String,
    /// Path manager name (default `"default"`).
    pub path_manager: String,
    /// QUIC implementation: `"polypath"` (default) or a peer stack for comparisons
    /// (`"noq"`).
    pub stack: String,
    /// Server UDP port (default 4433).
    pub port: u16,
    /// The sending application's rate limit, bit/s of stream data (unlimited if unset):
    /// the sender hands the stream its bytes no faster than this, as a rate-limited
    /// source such as `iperf -b` does.
    pub rate: Option<f64>,
    /// With `rate`: the size of the application's writes (a device's message), bytes;
    /// default: a millisecond's worth at the rate, at least 1200 bytes.
    pub message_size: Option<u64>,
    /// Free-form `[flow.options]` for the adapter.
    pub options: toml::Table,
}

/// The request/response application of a `quic` flow with `request_size` and
/// `response_size`: transactions in the style of netperf's TCP_RR test over one
/// bidirectional stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicTransactions {
    /// Request size in bytes (stream data).
    pub request: u64,
    /// Response size in bytes (stream data).
    pub response: u64,
    /// Time between request starts; back to back (the next request when the response
    /// to the previous one has been read) if unset.
    pub interval: Option<Duration>,
    /// Number of transactions (until the flow's `stop` or the end of the run if unset).
    pub count: Option<u64>,
}

/// `kind = "command"` parameters: a process the emulator runs in the `from` host's network
/// namespace from the instance's start until it exits or the instance's stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFlow {
    /// The command line, run with `sh -c` after the emulator's substitutions
    /// (`{out}`, `{from}`, `{to}`, `{local}`, `{remote}`, `{addr:HOST}`,
    /// `{addr:HOST.IFACE}`, `{polypath}`).
    pub command: String,
    /// A port the command's traffic uses (source or destination), so the emulator can
    /// count its packets as this flow's.
    pub port: Option<u16>,
}

/// `kind = "tcp"` parameters: a kernel TCP (or MPTCP) bulk transfer from `from` to `to`,
/// run by the emulator as `polypath tcp recv` on `to` and `polypath tcp send` on `from`.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpFlow {
    /// Open the sockets with `IPPROTO_MPTCP` (default false: plain TCP).
    pub mptcp: bool,
    /// Congestion controller of the sender's socket (`TCP_CONGESTION`, e.g. `cubic`,
    /// `reno`, `bbr`); the host's default when unset.
    pub cc: Option<String>,
    /// The sending application's rate limit, bit/s of stream data (unlimited if unset).
    pub rate: Option<f64>,
    /// With `rate`: the size of the application's writes (a device's message), bytes;
    /// default: a millisecond's worth at the rate, at least 1200 bytes.
    pub message_size: Option<u64>,
    /// Bytes to send; without it the sender sends until the instance's `stop` (or the end
    /// of the run).
    pub bytes: Option<u64>,
    /// The receiver's TCP port (default 5201; the next free one above it when another
    /// instance already listens there on the same host).
    pub port: u16,
}

/// `kind = "cbr"` parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct CbrFlow {
    /// Rate in bit/s, counting whole IP packets (per device with `devices`).
    pub rate: f64,
    /// How many devices one sender stands for (default 1): each sends `rate` with its own
    /// phase (`polypath_sim::traffic::CbrSource::devices`).
    pub devices: u32,
    /// IP packet size in bytes (IP and UDP headers included; default 1500).
    pub packet_size: u32,
    /// Stop after this many bytes (IP packet bytes), if set.
    pub bytes: Option<u64>,
}

/// `kind = "onoff"` parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct OnOffFlow {
    /// Rate while on, bit/s.
    pub rate: f64,
    /// IP packet size in bytes.
    pub packet_size: u32,
    /// Mean on period.
    pub on: Duration,
    /// Mean off period.
    pub off: Duration,
    /// Period lengths: fixed or exponential with the given means.
    pub dist: PeriodDist,
    /// Stop after this many bytes, if set.
    pub bytes: Option<u64>,
}

/// On/off period distributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeriodDist {
    /// Always the mean.
    Fixed,
    /// Exponential with the given mean.
    Exponential,
}

/// `kind = "reqresp"` parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestResponseFlow {
    /// Request size in bytes (UDP payload).
    pub request_size: u64,
    /// Response size in bytes (UDP payload).
    pub response_size: u64,
    /// Time between request starts.
    pub interval: Duration,
    /// Number of requests (unbounded if unset).
    pub count: Option<u64>,
    /// Largest IP packet to send (default 1500).
    pub packet_size: u32,
}
