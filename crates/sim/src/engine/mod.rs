//! The discrete-event core: event queue, hosts, links, agents; the radio model's part of the
//! loop is in the `radio` submodule, the per-bin recording and the summary in `record`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use polypath_link::{CellId, DownReason, LinkEvent, LinkEventKind};
use polypath_scenario::{OutagePolicy, OutageSignal, Route, Scenario, Side, Step};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::agent::{Agent, AgentStats, Datagram, Record};
use crate::error::SimError;
use crate::link::{DropReason, LinkDir};
use crate::link_predict::LinkPredictorRt;
use crate::radio::{EventSink, RadioDl, RadioRt};
use crate::record::{DROP_UNBOUND, DROP_UNROUTED, FlowRec, OutFile, Stream, drop_index};
use crate::source::{LinkChange, LinkDirSel, LinkSource, LinkUpdate};
use crate::time::SimTime;

mod radio;
mod record;

/// Identifies an agent in a [`Simulator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(pub u32);

/// Derives an independent seed from a run seed and a few labels
/// (SplitMix64 over the words), so each link direction and agent has its own
/// random stream regardless of event order.
pub fn derive_seed(seed: u64, labels: &[u64]) -> u64 {
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    for &l in labels {
        x = x
            .wrapping_add(l.wrapping_mul(0xBF58_476D_1CE4_E5B9))
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x = z ^ (z >> 31);
    }
    x
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    Timer(u32),
    Departure {
        dir: u32,
        epoch: u32,
    },
    Arrival {
        pkt: u32,
        dir: u32,
    },
    Schedule(u32),
    Step {
        dir: u32,
        idx: u32,
    },
    Outage {
        dir: u32,
        down: bool,
    },
    Source(u32),
    /// The radio model's next wakeup.
    Radio,
    /// The end of a slot of a radio downlink.
    Slot(u32),
    Sample,
    /// A report of the predictor of a link direction (index into `predictors`).
    Predict(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    time: u64,
    seq: u64,
    ev: Ev,
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Min-heap on (time, seq): earliest first, FIFO among equal times.
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

struct Packet {
    src: SocketAddr,
    dst: SocketAddr,
    payload: Bytes,
    wire: u32,
    sent_at: u64,
    sender: u32,
    path: u32,
    hops: u8,
}

struct IfaceRt {
    addr: IpAddr,
    /// Direction packets leave on.
    dir_out: Option<u32>,
    /// Direction packets arrive from.
    dir_in: Option<u32>,
}

struct HostRt {
    forward: bool,
    ifaces: Vec<IfaceRt>,
    routes: Vec<Route>,
}

struct AgentSlot {
    agent: Box<dyn Agent>,
    host: u32,
    flow: u32,
    instance: u32,
    timer_at: u64,
    done: bool,
    streams: Vec<Stream>,
    /// Sends whole IP packets: the link charges the payload's length alone.
    raw: bool,
}

struct SourceSlot {
    source: Box<dyn LinkSource>,
    pending: Option<LinkUpdate>,
}

/// Why [`Simulator::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The configured duration elapsed.
    Duration,
    /// Every agent was done and no packet was in flight.
    Done,
    /// Nothing was left to happen.
    Idle,
}

impl StopReason {
    fn as_str(self) -> &'static str {
        match self {
            StopReason::Duration => "duration",
            StopReason::Done => "done",
            StopReason::Idle => "idle",
        }
    }
}

/// Outputs of the recorders that are written while running.
pub(crate) struct Outputs {
    pub flows: OutFile,
    pub paths: Option<OutFile>,
    pub links: OutFile,
    pub completions: OutFile,
    pub packets: Option<OutFile>,
    /// `predictions.csv`, when a link direction has a predictor.
    pub predictions: Option<OutFile>,
}

/// The simulator: build it from a scenario, add agents, run.
pub struct Simulator {
    now: u64,
    seq: u64,
    heap: BinaryHeap<Entry>,
    events: u64,
    duration: u64,
    stop_when_done: bool,
    bin: u64,
    last_sample: u64,
    seed: u64,
    scenario_name: String,
    hosts: Vec<HostRt>,
    dirs: Vec<LinkDir>,
    dir_steps: Vec<Vec<Step>>,
    link_names: Vec<String>,
    link_index: BTreeMap<String, u32>,
    far: Vec<Vec<u32>>,
    addr_map: AddrMap<IpAddr, (u32, u32)>,
    bindings: AddrMap<SocketAddr, u32>,
    agents: Vec<AgentSlot>,
    not_done: usize,
    packets: Vec<Packet>,
    free: Vec<u32>,
    in_flight: u64,
    sources: Vec<SourceSlot>,
    flows: Vec<FlowRec>,
    out: Option<Outputs>,
    path_series: bool,
    stats_buf: AgentStats,
    records_buf: Vec<Record>,
    line: String,
    error: Option<SimError>,
    /// The radio model, when the scenario has `[radio]`.
    radio: Option<Box<RadioRt>>,
    /// Link events produced while handling the current event, delivered after it.
    link_events: Vec<LinkEvent>,
    /// Where the link-event stream is written, if anywhere.
    event_sink: Option<EventSink>,
    /// Agents on each host, in id order.
    host_agents: Vec<Vec<u32>>,
    /// Per host: the agent that receives packets addressed to no bound port (the
    /// emulator's bridge to the host's network stack).
    catch_all: Vec<Option<u32>>,
    /// Scratch list of packets served in one slot.
    served: Vec<u32>,
    /// Per link: `None` unless it has `outage_signal`; otherwise whether each direction
    /// (up, down) is in a scheduled outage, and which ends are told.
    outage_signal: Vec<Option<([bool; 2], OutageSignal)>>,
    /// The predictors of link directions (`predictor = { ... }`), in link order.
    predictors: Vec<LinkPredictorRt>,
}

/// A small, fast, deterministic hasher for address lookups (the maps are only
/// ever looked up, never iterated, so order cannot leak into results).
#[derive(Default, Clone, Copy)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }

    fn write_u16(&mut self, x: u16) {
        self.write_u64(u64::from(x));
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn finish(&self) -> u64 {
        // Final avalanche so low bits (the bucket index) depend on every
        // input bit: addresses in one subnet differ only in high bytes.
        let mut z = self.0;
        z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        z ^ (z >> 33)
    }
}

type AddrMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<AddrHasher>>;

/// The stream of `streams` on `path`, created on first use.
fn stream(
    streams: &mut Vec<Stream>,
    path: u32,
    local: SocketAddr,
    remote: SocketAddr,
) -> &mut Stream {
    let pos = match streams.iter().position(|s| s.path == path) {
        Some(i) => i,
        None => {
            streams.push(Stream::new(path, local, remote));
            streams.len() - 1
        }
    };
    &mut streams[pos]
}

fn overhead(ip: IpAddr) -> u32 {
    if ip.is_ipv4() { 28 } else { 48 }
}

impl Simulator {
    /// Builds hosts and links of `scenario` with the run `seed`. Agents are
    /// added afterwards with [`add_agent`](Self::add_agent).
    pub fn new(scenario: &Scenario, seed: u64) -> Result<Self, SimError> {
        let mut dirs = Vec::with_capacity(scenario.links.len() * 2);
        let mut dir_steps = Vec::new();
        let mut link_index = BTreeMap::new();
        for (i, l) in scenario.links.iter().enumerate() {
            let up_rng = ChaCha8Rng::seed_from_u64(derive_seed(seed, &[1, i as u64, 0]));
            let down_rng = ChaCha8Rng::seed_from_u64(derive_seed(seed, &[1, i as u64, 1]));
            let up_delay = u64::try_from(l.up.delay.as_nanos()).unwrap_or(u64::MAX);
            let down_delay = u64::try_from(l.down.delay.as_nanos()).unwrap_or(u64::MAX);
            dirs.push(LinkDir::new(&l.up, down_delay, up_rng));
            dirs.push(LinkDir::new(&l.down, up_delay, down_rng));
            dir_steps.push(l.up.steps.clone());
            dir_steps.push(l.down.steps.clone());
            link_index.insert(l.name.clone(), i as u32);
        }
        let mut far = vec![Vec::new(); dirs.len()];
        let mut hosts = Vec::with_capacity(scenario.hosts.len());
        let mut addr_map = AddrMap::default();
        for (hi, h) in scenario.hosts.iter().enumerate() {
            let mut ifaces = Vec::with_capacity(h.interfaces.len());
            for (ii, iface) in h.interfaces.iter().enumerate() {
                let (dir_out, dir_in) = match iface.attach {
                    Some(a) => {
                        let base = a.link as u32 * 2;
                        match a.side {
                            Side::A => (Some(base), Some(base + 1)),
                            Side::B => (Some(base + 1), Some(base)),
                        }
                    }
                    None => (None, None),
                };
                if let Some(d) = dir_in
                    && let Some(f) = far.get_mut(d as usize)
                {
                    f.push(hi as u32);
                }
                addr_map.insert(iface.addr, (hi as u32, ii as u32));
                ifaces.push(IfaceRt {
                    addr: iface.addr,
                    dir_out,
                    dir_in,
                });
            }
            hosts.push(HostRt {
                forward: h.forward,
                ifaces,
                routes: h.routes.clone(),
            });
        }
        let flows = scenario
            .flows
            .iter()
            .map(|f| FlowRec::new(f.name.clone(), f.kind.name(), f.instances.len() as u32))
            .collect();
        let radio = RadioRt::build(scenario, seed)?.map(Box::new);
        if let Some(r) = &radio {
            for (pi, p) in r.paths.iter().enumerate() {
                let Some(link) = p.link else { continue };
                // Side B to side A: the radio downlink.
                if let Some(d) = dirs.get_mut(link as usize * 2 + 1) {
                    let s = derive_seed(seed, &[5, u64::from(link)]);
                    d.radio = Some(Box::new(RadioDl::new(pi as u32, s)));
                }
            }
        }
        let radio_wakeup = radio.as_ref().map(|r| r.model.next_wakeup_ns());
        let predictors = crate::link_predict::build(scenario, seed)?;
        let mut sim = Simulator {
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            events: 0,
            duration: u64::try_from(scenario.sim.duration.as_nanos()).unwrap_or(u64::MAX),
            stop_when_done: scenario.sim.stop_when_done,
            bin: u64::try_from(scenario.output.bin.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            last_sample: 0,
            seed,
            scenario_name: scenario.name.clone(),
            hosts,
            dirs,
            dir_steps,
            link_names: scenario.links.iter().map(|l| l.name.clone()).collect(),
            link_index,
            far,
            addr_map,
            bindings: AddrMap::default(),
            agents: Vec::new(),
            not_done: 0,
            packets: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            sources: Vec::new(),
            flows,
            out: None,
            path_series: scenario.output.path_series,
            stats_buf: AgentStats::default(),
            records_buf: Vec::new(),
            line: String::with_capacity(256),
            error: None,
            radio,
            link_events: Vec::new(),
            event_sink: None,
            host_agents: vec![Vec::new(); scenario.hosts.len()],
            catch_all: vec![None; scenario.hosts.len()],
            served: Vec::new(),
            outage_signal: scenario
                .links
                .iter()
                .map(|l| {
                    (l.outage_signal != OutageSignal::Silent)
                        .then_some(([false, false], l.outage_signal))
                })
                .collect(),
            predictors,
        };
        for i in 0..sim.predictors.len() {
            let t = sim.predictors[i].first_report_ns();
            sim.push(t, Ev::Predict(i as u32));
        }
        if let Some(t) = radio_wakeup.filter(|t| *t != u64::MAX) {
            sim.push(t, Ev::Radio);
        }
        // Link schedules, steps and outages.
        for (i, l) in scenario.links.iter().enumerate() {
            for (k, d) in [&l.up, &l.down].into_iter().enumerate() {
                let dir = (i * 2 + k) as u32;
                sim.schedule_next_rate(dir);
                for (idx, s) in d.steps.iter().enumerate() {
                    sim.push(
                        u64::try_from(s.at.as_nanos()).unwrap_or(u64::MAX),
                        Ev::Step {
                            dir,
                            idx: idx as u32,
                        },
                    );
                }
                for o in &d.outages {
                    let at = u64::try_from(o.at.as_nanos()).unwrap_or(u64::MAX);
                    let end =
                        at.saturating_add(u64::try_from(o.duration.as_nanos()).unwrap_or(u64::MAX));
                    sim.push(at, Ev::Outage { dir, down: true });
                    sim.push(end, Ev::Outage { dir, down: false });
                }
            }
        }
        sim.push(sim.bin, Ev::Sample);
        Ok(sim)
    }

    /// The run seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Current simulated time.
    pub fn now(&self) -> SimTime {
        SimTime(self.now)
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Number of agents.
    pub fn agent_count(&self) -> usize {
        self.agents.len()
    }

    /// Adds an agent on `host` bound to `port` on every interface address of
    /// that host, attributed to scenario flow `flow`, instance `instance`.
    pub fn add_agent(
        &mut self,
        host: usize,
        port: u16,
        flow: usize,
        instance: u32,
        agent: Box<dyn Agent>,
    ) -> Result<AgentId, SimError> {
        let h = self
            .hosts
            .get(host)
            .ok_or_else(|| SimError::Build(format!("no host #{host}")))?;
        if flow >= self.flows.len() {
            return Err(SimError::Build(format!("no flow #{flow}")));
        }
        let id = self.agents.len() as u32;
        for iface in &h.ifaces {
            let sa = SocketAddr::new(iface.addr, port);
            if self.bindings.insert(sa, id).is_some() {
                return Err(SimError::Build(format!("address {sa} is bound twice")));
            }
        }
        Ok(self.push_agent(host, flow, instance, agent, false))
    }

    /// Adds an agent on `host` that exchanges whole IP packets and is bound to no port,
    /// attributed to flow `flow`, instance `instance`: what it sends (through
    /// [`inject`](Self::inject) or [`Agent::poll_transmit`]) is a [`Datagram`] whose
    /// payload is the IP packet and whose addresses are the packet's, charged to the link
    /// at the payload's length. With `catch_all`, it also receives every packet that
    /// reaches `host`, is addressed to it and finds no agent bound to its destination
    /// (one such agent per host; the last one added wins).
    pub fn add_raw_agent(
        &mut self,
        host: usize,
        flow: usize,
        instance: u32,
        agent: Box<dyn Agent>,
        catch_all: bool,
    ) -> Result<AgentId, SimError> {
        if host >= self.hosts.len() {
            return Err(SimError::Build(format!("no host #{host}")));
        }
        if flow >= self.flows.len() {
            return Err(SimError::Build(format!("no flow #{flow}")));
        }
        let id = self.push_agent(host, flow, instance, agent, true);
        if catch_all && let Some(c) = self.catch_all.get_mut(host) {
            *c = Some(id.0);
        }
        Ok(id)
    }

    fn push_agent(
        &mut self,
        host: usize,
        flow: usize,
        instance: u32,
        agent: Box<dyn Agent>,
        raw: bool,
    ) -> AgentId {
        let id = self.agents.len() as u32;
        let done = agent.is_done();
        if !done {
            self.not_done += 1;
        }
        if let Some(list) = self.host_agents.get_mut(host) {
            list.push(id);
        }
        self.agents.push(AgentSlot {
            agent,
            host: host as u32,
            flow: flow as u32,
            instance,
            timer_at: u64::MAX,
            done,
            streams: Vec::new(),
            raw,
        });
        AgentId(id)
    }

    /// Adds a flow record that no scenario flow stands for (the emulator's traffic that
    /// matches no flow); returns its index for [`add_raw_agent`](Self::add_raw_agent).
    pub fn add_flow(&mut self, name: &str, kind: &'static str) -> usize {
        self.flows.push(FlowRec::new(name.to_string(), kind, 1));
        self.flows.len() - 1
    }

    /// Whether `port` is bound on any interface of `host`.
    pub fn is_bound(&self, host: usize, port: u16) -> bool {
        self.hosts.get(host).is_some_and(|h| {
            h.ifaces
                .iter()
                .any(|i| self.bindings.contains_key(&SocketAddr::new(i.addr, port)))
        })
    }

    /// Attaches an external link source (e.g. the radio model).
    pub fn add_source(&mut self, mut source: Box<dyn LinkSource>) {
        let idx = self.sources.len() as u32;
        let pending = source.next_update();
        if let Some(u) = &pending {
            self.push(u.at.0, Ev::Source(idx));
        }
        self.sources.push(SourceSlot { source, pending });
    }

    /// Names of external sources that links expect but that are not attached.
    pub fn missing_sources(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, d) in self.dirs.iter().enumerate() {
            if let Some(src) = &d.external
                && !self.sources.iter().any(|s| s.source.name() == src)
            {
                out.push((self.link_names[i / 2].clone(), src.clone()));
            }
        }
        out.dedup();
        out
    }

    pub(crate) fn set_outputs(&mut self, out: Outputs) {
        self.out = Some(out);
    }

    pub(crate) fn take_outputs(&mut self) -> Option<Outputs> {
        self.out.take()
    }

    pub(crate) fn set_event_sink(&mut self, sink: EventSink) {
        self.event_sink = Some(sink);
    }

    pub(crate) fn take_event_sink(&mut self) -> Option<EventSink> {
        self.event_sink.take()
    }

    fn push(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry {
            time,
            seq: self.seq,
            ev,
        });
    }

    // ---- running --------------------------------------------------------

    /// Runs until the duration, until everything is done (if the scenario
    /// asks to stop when done), or until nothing is left to happen. `tick` is
    /// called every few thousand events with the current time (for progress).
    pub fn run(&mut self, mut tick: impl FnMut(SimTime)) -> Result<StopReason, SimError> {
        self.start();
        let reason = loop {
            if let Some(r) = self.step(u64::MAX, &mut tick)? {
                break r;
            }
        };
        self.finish()?;
        Ok(reason)
    }

    /// Starts a run driven from outside (the emulator's real-time loop): polls every agent
    /// once at the current time. Then call [`advance`](Self::advance) as time passes and
    /// [`finish`](Self::finish) at the end; [`run`](Self::run) does all three on the
    /// virtual clock.
    pub fn start(&mut self) {
        for a in 0..self.agents.len() as u32 {
            self.drive(a);
        }
    }

    /// Handles every event due at or before `until` (nanoseconds of the run's clock) and
    /// moves the clock to `until`. Returns why the run is over, if it is: the duration
    /// passed, or (with `stop_when_done`) every agent is done and no packet is in flight.
    /// Running out of events is not an end here: the caller may still inject packets.
    pub fn advance(&mut self, until: u64) -> Result<Option<StopReason>, SimError> {
        let until = until.max(self.now);
        loop {
            match self.step(until, &mut |_| {})? {
                Some(StopReason::Idle) => break,
                Some(r) => return Ok(Some(r)),
                None => {}
            }
        }
        if until > self.duration {
            self.now = self.duration;
            return Ok(Some(StopReason::Duration));
        }
        self.now = until;
        Ok(None)
    }

    /// Whether the run ends once every agent is done and no packet is in flight (the
    /// scenario's `stop_when_done`). A driver whose agents stand for processes it watches
    /// itself turns it off.
    pub fn set_stop_when_done(&mut self, on: bool) {
        self.stop_when_done = on;
    }

    /// The time of the next event, if any (nanoseconds of the run's clock).
    pub fn next_event_at(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.time)
    }

    /// Sends `datagram` from agent `agent` now, as if the agent had returned it from
    /// [`Agent::poll_transmit`]: the emulator's way to put a packet read from a host's
    /// network stack on the link its source address picks.
    pub fn inject(&mut self, agent: AgentId, datagram: Datagram) {
        self.send(agent.0, datagram);
    }

    /// Ends a run driven from outside: takes the last sample of the recorders.
    pub fn finish(&mut self) -> Result<(), SimError> {
        self.final_sample()
    }

    /// Handles the next event if it is due at or before `limit`. `Some(Idle)` when none
    /// is.
    fn step(
        &mut self,
        limit: u64,
        tick: &mut impl FnMut(SimTime),
    ) -> Result<Option<StopReason>, SimError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.stop_when_done && self.not_done == 0 && self.in_flight == 0 {
            return Ok(Some(StopReason::Done));
        }
        let Some(top) = self.heap.peek() else {
            return Ok(Some(StopReason::Idle));
        };
        if top.time > self.duration {
            self.now = self.duration;
            return Ok(Some(StopReason::Duration));
        }
        if top.time > limit {
            return Ok(Some(StopReason::Idle));
        }
        let Some(e) = self.heap.pop() else {
            return Ok(Some(StopReason::Idle));
        };
        self.now = e.time;
        self.events += 1;
        if self.events & 0x3fff == 0 {
            tick(SimTime(self.now));
        }
        self.dispatch(e.ev)?;
        Ok(None)
    }

    fn dispatch(&mut self, ev: Ev) -> Result<(), SimError> {
        match ev {
            Ev::Timer(a) => self.on_timer(a),
            Ev::Departure { dir, epoch } => self.on_departure(dir, epoch),
            Ev::Arrival { pkt, dir } => self.on_arrival(pkt, dir),
            Ev::Schedule(dir) => self.on_schedule(dir),
            Ev::Step { dir, idx } => self.on_step(dir, idx),
            Ev::Outage { dir, down } => {
                if down {
                    self.go_down(dir)
                } else {
                    self.go_up(dir)
                }
                self.signal_outage(dir, down);
            }
            Ev::Source(i) => self.on_source(i)?,
            Ev::Radio => self.on_radio(),
            Ev::Slot(dir) => self.on_slot(dir),
            Ev::Predict(i) => self.on_predict(i)?,
            Ev::Sample => {
                self.sample()?;
                let next = self.now.saturating_add(self.bin);
                if next <= self.duration {
                    self.push(next, Ev::Sample);
                }
            }
        }
        if !self.link_events.is_empty() {
            self.flush_link_events();
        }
        Ok(())
    }

    // ---- agents ---------------------------------------------------------

    fn drive(&mut self, a: u32) {
        let now = SimTime(self.now);
        loop {
            let Some(slot) = self.agents.get_mut(a as usize) else {
                return;
            };
            let Some(dg) = slot.agent.poll_transmit(now) else {
                break;
            };
            self.send(a, dg);
        }
        let Some(slot) = self.agents.get_mut(a as usize) else {
            return;
        };
        if let Some(t) = slot.agent.poll_timeout() {
            let t = t.0.max(self.now);
            if t < slot.timer_at {
                slot.timer_at = t;
                self.push(t, Ev::Timer(a));
            }
        }
        let Some(slot) = self.agents.get_mut(a as usize) else {
            return;
        };
        let done = slot.agent.is_done();
        if done != slot.done {
            slot.done = done;
            if done {
                self.not_done -= 1;
            } else {
                self.not_done += 1;
            }
        }
    }

    fn on_timer(&mut self, a: u32) {
        let now = self.now;
        let Some(slot) = self.agents.get_mut(a as usize) else {
            return;
        };
        if slot.timer_at != now {
            return;
        }
        slot.timer_at = u64::MAX;
        if slot.agent.poll_timeout().is_some_and(|t| t.0 <= now) {
            slot.agent.handle_timeout(SimTime(now));
        }
        self.drive(a);
    }

    fn alloc(&mut self, p: Packet) -> u32 {
        self.in_flight += 1;
        if let Some(i) = self.free.pop()
            && let Some(slot) = self.packets.get_mut(i as usize)
        {
            *slot = p;
            return i;
        }
        self.packets.push(p);
        (self.packets.len() - 1) as u32
    }

    fn release(&mut self, pkt: u32) -> Option<Bytes> {
        let slot = self.packets.get_mut(pkt as usize)?;
        let payload = std::mem::take(&mut slot.payload);
        self.free.push(pkt);
        self.in_flight -= 1;
        Some(payload)
    }

    fn drop_packet(&mut self, pkt: u32, kind: usize) {
        if let Some(p) = self.packets.get(pkt as usize)
            && let Some(slot) = self.agents.get_mut(p.sender as usize)
        {
            stream(&mut slot.streams, p.path, p.src, p.dst).bin_drops += 1;
            if let Some(f) = self.flows.get_mut(slot.flow as usize) {
                if let Some(d) = f.drops.get_mut(kind) {
                    *d += 1;
                }
                f.bin_dropped += 1;
            }
        }
        self.release(pkt);
    }

    fn route(&self, host: u32, src: IpAddr, dst: IpAddr) -> Option<u32> {
        let h = self.hosts.get(host as usize)?;
        let r = h
            .routes
            .iter()
            .find(|r| r.dst.contains(dst) && r.src.is_none_or(|s| s.contains(src)))?;
        Some(r.via as u32)
    }

    fn send(&mut self, a: u32, mut dg: Datagram) {
        let Some(slot) = self.agents.get(a as usize) else {
            return;
        };
        let host = slot.host;
        let flow = slot.flow as usize;
        let wire = if slot.raw {
            dg.payload.len() as u32
        } else {
            dg.payload.len() as u32 + overhead(dg.dst.ip())
        };
        if let Some(f) = self.flows.get_mut(flow) {
            f.sent_pkts += 1;
            f.sent_bytes += u64::from(wire);
            f.bin_sent_bytes += u64::from(wire);
            f.bin_sent_pkts += 1;
            f.first_send_ns.get_or_insert(self.now);
        }
        let iface = match self.addr_map.get(&dg.src.ip()) {
            Some(&(h, i)) if h == host => Some(i),
            _ if dg.src.ip().is_unspecified() => {
                let i = self.route(host, dg.src.ip(), dg.dst.ip());
                if let Some(addr) = i
                    .and_then(|i| self.hosts[host as usize].ifaces.get(i as usize))
                    .map(|f| f.addr)
                {
                    dg.src.set_ip(addr);
                }
                i
            }
            _ => None,
        };
        let dir = iface
            .and_then(|i| self.hosts[host as usize].ifaces.get(i as usize))
            .and_then(|f| f.dir_out);
        let pkt = self.alloc(Packet {
            src: dg.src,
            dst: dg.dst,
            payload: dg.payload,
            wire,
            sent_at: self.now,
            sender: a,
            path: dir.unwrap_or(u32::MAX),
            hops: 0,
        });
        match dir {
            Some(d) => self.enqueue(d, pkt),
            None => self.drop_packet(pkt, DROP_UNROUTED),
        }
    }

    // ---- links ------------------------------------------------------------

    fn enqueue(&mut self, dir: u32, pkt: u32) {
        let Some(wire) = self.packets.get(pkt as usize).map(|p| p.wire) else {
            return;
        };
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        if d.radio.is_some() {
            self.radio_enqueue(dir, pkt, wire);
            return;
        }
        if !d.up && d.policy == OutagePolicy::Drop {
            d.stats.drops_down += 1;
            d.stats.bin_drops += 1;
            self.drop_packet(pkt, drop_index(DropReason::Down));
            return;
        }
        if d.in_service.is_none() && d.up && d.queue.is_empty() {
            if let Some(t) = d.begin(pkt, wire, self.now) {
                let epoch = d.epoch;
                self.push(t, Ev::Departure { dir, epoch });
            }
            return;
        }
        if d.admits(wire) {
            d.queue.push_back(pkt);
            d.queued_bytes += u64::from(wire);
            d.stats.max_queue_bytes = d.stats.max_queue_bytes.max(d.queued_bytes);
        } else {
            d.stats.drops_queue += 1;
            d.stats.bin_drops += 1;
            self.drop_packet(pkt, drop_index(DropReason::Queue));
        }
    }

    fn start_service(&mut self, dir: u32) {
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        if d.in_service.is_some() || !d.up {
            return;
        }
        let Some(pkt) = d.queue.pop_front() else {
            return;
        };
        let Some(wire) = self.packets.get(pkt as usize).map(|p| p.wire) else {
            return;
        };
        d.queued_bytes -= u64::from(wire);
        if let Some(t) = d.begin(pkt, wire, self.now) {
            let epoch = d.epoch;
            self.push(t, Ev::Departure { dir, epoch });
        }
    }

    fn on_departure(&mut self, dir: u32, epoch: u32) {
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        if d.epoch != epoch || !d.up {
            return;
        }
        let Some(pkt) = d.in_service.take() else {
            return;
        };
        let wire = d.in_service_bytes;
        self.transmit(dir, pkt, wire);
        self.start_service(dir);
    }

    /// `pkt` (of `wire` bytes) leaves the queue of `dir` now: random loss, then the
    /// propagation delay (with jitter, and perhaps a duplicate) to the far end.
    fn transmit(&mut self, dir: u32, pkt: u32, wire: u32) {
        let now = self.now;
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        if d.lose() {
            d.stats.drops_loss += 1;
            d.stats.bin_drops += 1;
            self.drop_packet(pkt, drop_index(DropReason::Loss));
            return;
        }
        d.stats.delivered_pkts += 1;
        d.stats.delivered_bytes += u64::from(wire);
        d.stats.bin_bytes += u64::from(wire);
        let at = d.arrival(now);
        let dup = d.duplicates();
        if dup {
            d.stats.duplicates += 1;
        }
        self.push(at, Ev::Arrival { pkt, dir });
        if dup && let Some(p) = self.packets.get(pkt as usize) {
            let copy = Packet {
                src: p.src,
                dst: p.dst,
                payload: p.payload.clone(),
                wire: p.wire,
                sent_at: p.sent_at,
                sender: p.sender,
                path: p.path,
                hops: p.hops,
            };
            let c = self.alloc(copy);
            self.push(at, Ev::Arrival { pkt: c, dir });
        }
    }

    fn on_arrival(&mut self, pkt: u32, dir: u32) {
        let Some(p) = self.packets.get(pkt as usize) else {
            return;
        };
        let dst = p.dst.ip();
        let owner = self.addr_map.get(&dst).copied();
        let target = match owner {
            Some((h, i))
                if self.hosts[h as usize]
                    .ifaces
                    .get(i as usize)
                    .and_then(|f| f.dir_in)
                    == Some(dir) =>
            {
                Some(h)
            }
            _ => match self.far.get(dir as usize).map(Vec::as_slice) {
                Some([only]) => Some(*only),
                _ => None,
            },
        };
        match target {
            Some(h) => self.at_host(h, pkt, owner.map(|o| o.0)),
            None => self.drop_packet(pkt, DROP_UNROUTED),
        }
    }

    /// `pkt` reached `host`; `owner` is the host owning its destination address.
    fn at_host(&mut self, host: u32, pkt: u32, owner: Option<u32>) {
        let Some(p) = self.packets.get_mut(pkt as usize) else {
            return;
        };
        let (src, dst) = (p.src, p.dst);
        if owner == Some(host) {
            let catch_all = self.catch_all.get(host as usize).copied().flatten();
            match self.bindings.get(&dst).copied().or(catch_all) {
                Some(a) => self.deliver(a, pkt),
                None => self.drop_packet(pkt, DROP_UNBOUND),
            }
            return;
        }
        let forward = self.hosts.get(host as usize).is_some_and(|h| h.forward);
        p.hops = p.hops.saturating_add(1);
        if !forward || p.hops > 64 {
            self.drop_packet(pkt, DROP_UNROUTED);
            return;
        }
        let dir = self
            .route(host, src.ip(), dst.ip())
            .and_then(|i| self.hosts[host as usize].ifaces.get(i as usize))
            .and_then(|f| f.dir_out);
        match dir {
            Some(d) => self.enqueue(d, pkt),
            None => self.drop_packet(pkt, DROP_UNROUTED),
        }
    }

    fn deliver(&mut self, a: u32, pkt: u32) {
        let now = self.now;
        let Some(p) = self.packets.get(pkt as usize) else {
            return;
        };
        let (src, dst, wire, sent_at, sender, path) =
            (p.src, p.dst, p.wire, p.sent_at, p.sender, p.path);
        let owd = now.saturating_sub(sent_at);
        let mut jitter = 0.0;
        let mut flow_idx = u32::MAX;
        let mut instance = 0;
        if let Some(s) = self.agents.get_mut(sender as usize) {
            flow_idx = s.flow;
            instance = s.instance;
            let st = stream(&mut s.streams, path, src, dst);
            st.update(owd as i64);
            st.bin_bytes += u64::from(wire);
            jitter = st.jitter;
        }
        if let Some(f) = self.flows.get_mut(flow_idx as usize) {
            f.delivered_pkts += 1;
            f.delivered_bytes += u64::from(wire);
            f.bin_delivered_bytes += u64::from(wire);
            f.bin_delivered_pkts += 1;
            f.owd_sum_ns += u128::from(owd);
            f.bin_owd_sum_ns += u128::from(owd);
            f.owd_min_ns = f.owd_min_ns.min(owd);
            f.owd_max_ns = f.owd_max_ns.max(owd);
            f.owd_hist.add(owd);
            f.last_delivery_ns = now;
        }
        if let Some(out) = self.out.as_mut().and_then(|o| o.packets.as_mut()) {
            self.line.clear();
            let name = self
                .flows
                .get(flow_idx as usize)
                .map(|f| f.name.as_str())
                .unwrap_or("");
            let _ = writeln!(
                self.line,
                "{:.9},{:.9},{},{},{},{},{},{:.6},{:.6}",
                now as f64 / 1e9,
                sent_at as f64 / 1e9,
                name,
                instance,
                src,
                dst,
                wire,
                owd as f64 / 1e6,
                jitter / 1e6
            );
            if let Err(e) = out.write(&self.line) {
                self.error = Some(e);
            }
        }
        let Some(payload) = self.release(pkt) else {
            return;
        };
        if let Some(slot) = self.agents.get_mut(a as usize) {
            slot.agent
                .handle_datagram(SimTime(now), Datagram { src, dst, payload });
        }
        self.drive(a);
    }

    fn schedule_next_rate(&mut self, dir: u32) {
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        let Some(cur) = d.schedule.as_mut() else {
            return;
        };
        if let Some((t, r)) = cur.next_change() {
            d.pending_rate = r;
            self.push(t, Ev::Schedule(dir));
        }
    }

    fn apply_rate(&mut self, dir: u32, rate: f64) {
        let now = self.now;
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        if let Some(t) = d.set_rate(rate, now) {
            let epoch = d.epoch;
            self.push(t, Ev::Departure { dir, epoch });
        }
    }

    fn on_schedule(&mut self, dir: u32) {
        let Some(d) = self.dirs.get(dir as usize) else {
            return;
        };
        if d.schedule.is_none() {
            return;
        }
        let r = d.pending_rate;
        self.apply_rate(dir, r);
        self.schedule_next_rate(dir);
    }

    fn on_step(&mut self, dir: u32, idx: u32) {
        let Some(step) = self
            .dir_steps
            .get(dir as usize)
            .and_then(|s| s.get(idx as usize))
            .cloned()
        else {
            return;
        };
        if let Some(r) = step.rate {
            if let Some(d) = self.dirs.get_mut(dir as usize) {
                d.schedule = None;
            }
            self.apply_rate(dir, r);
        }
        if let Some(d) = self.dirs.get_mut(dir as usize) {
            if let Some(delay) = step.delay {
                d.delay_ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
            }
            if let Some(l) = step.loss {
                d.loss = crate::link::LossState::new(l);
            }
        }
    }

    fn go_down(&mut self, dir: u32) {
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        if !d.up {
            return;
        }
        d.up = false;
        d.epoch = d.epoch.wrapping_add(1);
        let mut dropped = Vec::new();
        match d.policy {
            OutagePolicy::Drop => {
                dropped.extend(d.in_service.take());
                dropped.extend(d.queue.drain(..));
                d.queued_bytes = 0;
                d.stats.drops_down += dropped.len() as u64;
                d.stats.bin_drops += dropped.len() as u64;
            }
            OutagePolicy::Hold => {
                if let Some(p) = d.in_service.take() {
                    d.queue.push_front(p);
                    d.queued_bytes += u64::from(d.in_service_bytes);
                }
            }
        }
        for p in dropped {
            self.drop_packet(p, drop_index(DropReason::Down));
        }
    }

    fn go_up(&mut self, dir: u32) {
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        if d.up {
            return;
        }
        d.up = true;
        self.start_service(dir);
    }

    /// With `outage_signal` on the link of `dir`: tells the agents on the hosts at the told
    /// end(s) of the link when the link stops carrying packets (the first direction entering
    /// a scheduled outage) and when it carries them again (the last direction leaving it).
    fn signal_outage(&mut self, dir: u32, down: bool) {
        let link = dir / 2;
        let Some(Some((state, told))) = self.outage_signal.get_mut(link as usize) else {
            return;
        };
        let told = *told;
        let was_up = state == &[false, false];
        if let Some(d) = state.get_mut((dir % 2) as usize) {
            *d = down;
        }
        let is_up = state == &[false, false];
        if was_up == is_up {
            return;
        }
        let cell = CellId(link);
        let kind = if is_up {
            LinkEventKind::LinkUp { cell }
        } else {
            LinkEventKind::LinkDown {
                cell: Some(cell),
                reason: DownReason::NoCoverage,
            }
        };
        // Every interface on the link, hosts and interfaces in scenario order.
        let mut ends = Vec::new();
        for (hi, h) in self.hosts.iter().enumerate() {
            for (ii, iface) in h.ifaces.iter().enumerate() {
                // An interface on side A sends in the link's up direction (even index).
                let side = |d: u32| {
                    if d.is_multiple_of(2) {
                        Side::A
                    } else {
                        Side::B
                    }
                };
                let concerned = |d: u32| match told {
                    OutageSignal::End(end) => side(d) == end,
                    _ => true,
                };
                if iface.dir_out.is_some_and(|d| d / 2 == link && concerned(d)) {
                    ends.push((hi, ii, iface.addr));
                }
            }
        }
        for (hi, ii, addr) in ends {
            let event = LinkEvent::new(
                self.now,
                hi as u32,
                u16::try_from(ii).unwrap_or(u16::MAX),
                kind.clone(),
            );
            self.tell_host(hi as u32, &event, Some(addr));
        }
    }

    /// Hands `event` (about the host's interface with address `addr`) to every agent on
    /// host `host`, in id order, driving each after it.
    fn tell_host(&mut self, host: u32, event: &LinkEvent, addr: Option<IpAddr>) {
        let now = SimTime(self.now);
        let n = self.host_agents.get(host as usize).map_or(0, Vec::len);
        for k in 0..n {
            let Some(&a) = self.host_agents.get(host as usize).and_then(|l| l.get(k)) else {
                break;
            };
            if let Some(slot) = self.agents.get_mut(a as usize) {
                slot.agent.handle_link_event(now, event, addr);
            }
            self.drive(a);
        }
    }

    /// A report of link predictor `i`: the prediction goes to `predictions.csv` and, as a
    /// `predicted_throughput` link event, to the agents of the told interfaces' hosts (in
    /// file order); the next report is due a period later. A prediction file that has run
    /// out reports no more.
    fn on_predict(&mut self, i: u32) -> Result<(), SimError> {
        let now = self.now;
        let Some(p) = self.predictors.get_mut(i as usize) else {
            return Ok(());
        };
        let delivered = self
            .dirs
            .get(p.dir as usize)
            .map_or(0, |d| d.stats.delivered_bytes);
        let (bps, truth) = p.report(now, delivered);
        let Some(bps) = bps else {
            return Ok(());
        };
        let (dir, period, name) = (p.dir, p.period_ns, p.name.clone());
        let told = p.told.clone();
        self.push(now.saturating_add(period), Ev::Predict(i));
        if let Some(f) = self.out.as_mut().and_then(|o| o.predictions.as_mut()) {
            self.line.clear();
            let link = self
                .link_names
                .get((dir / 2) as usize)
                .map(String::as_str)
                .unwrap_or("");
            let truth = truth.map(|t| format!("{:.6}", t / 1e6)).unwrap_or_default();
            let _ = writeln!(
                self.line,
                "{:.9},{link},{},{},{:.6},{truth}",
                now as f64 / 1e9,
                if dir % 2 == 0 { "up" } else { "down" },
                name.replace(',', ";"),
                bps / 1e6,
            );
            f.write(&self.line)?;
        }
        let kind = LinkEventKind::PredictedThroughput {
            bps,
            predictor: name,
            horizon_ms: u32::try_from(period / 1_000_000).unwrap_or(u32::MAX),
        };
        for (host, iface, addr) in told {
            let event = LinkEvent::new(now, host, iface, kind.clone());
            self.tell_host(host, &event, Some(addr));
        }
        Ok(())
    }

    fn on_source(&mut self, i: u32) -> Result<(), SimError> {
        let Some(slot) = self.sources.get_mut(i as usize) else {
            return Ok(());
        };
        let Some(u) = slot.pending.take() else {
            return Ok(());
        };
        let next = slot.source.next_update();
        if let Some(n) = &next {
            let t = n.at.0.max(self.now);
            slot.pending = next;
            self.push(t, Ev::Source(i));
        }
        let link = *self.link_index.get(&u.link).ok_or_else(|| {
            SimError::Build(format!(
                "link source `{}` updates link `{}`, which the scenario does not have",
                self.sources[i as usize].source.name(),
                u.link
            ))
        })?;
        let dirs: &[u32] = match u.dir {
            LinkDirSel::Up => &[0],
            LinkDirSel::Down => &[1],
            LinkDirSel::Both => &[0, 1],
        };
        if self
            .dirs
            .get(link as usize * 2)
            .is_some_and(|d| d.radio_driven)
        {
            return Err(SimError::Build(format!(
                "link source `{}` updates link `{}`, which the radio model drives",
                self.sources[i as usize].source.name(),
                u.link
            )));
        }
        for &k in dirs {
            let dir = link * 2 + k;
            match &u.change {
                LinkChange::Rate(r) => {
                    if let Some(d) = self.dirs.get_mut(dir as usize) {
                        d.schedule = None;
                    }
                    self.apply_rate(dir, *r);
                }
                LinkChange::Up => self.go_up(dir),
                LinkChange::Down => self.go_down(dir),
                LinkChange::Delay(delay) => {
                    if let Some(d) = self.dirs.get_mut(dir as usize) {
                        d.delay_ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
                    }
                }
                LinkChange::Loss(l) => {
                    if let Some(d) = self.dirs.get_mut(dir as usize) {
                        d.loss = crate::link::LossState::new(*l);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_orders_by_time_then_fifo() {
        let mut h = BinaryHeap::new();
        h.push(Entry {
            time: 5,
            seq: 2,
            ev: Ev::Sample,
        });
        h.push(Entry {
            time: 5,
            seq: 1,
            ev: Ev::Timer(1),
        });
        h.push(Entry {
            time: 3,
            seq: 3,
            ev: Ev::Timer(2),
        });
        let order: Vec<u64> = std::iter::from_fn(|| h.pop().map(|e| e.seq)).collect();
        assert_eq!(order, vec![3, 1, 2]);
    }

    #[test]
    fn derived_seeds_differ() {
        assert_ne!(derive_seed(1, &[1, 0, 0]), derive_seed(1, &[1, 0, 1]));
        assert_ne!(derive_seed(1, &[1, 0, 0]), derive_seed(2, &[1, 0, 0]));
        assert_eq!(derive_seed(1, &[3]), derive_seed(1, &[3]));
    }
}
