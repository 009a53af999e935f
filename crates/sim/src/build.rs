//! Turning scenario flows into agents.

use std::net::SocketAddr;

use polypath_scenario::{FlowInstance, FlowKind, PeriodDist, Scenario};

use crate::agent::Agent;
use crate::engine::{AgentId, Simulator, derive_seed};
use crate::error::SimError;
use crate::time::SimTime;
use crate::traffic::{CbrSource, OnOffSource, PathAddrs, RequestClient, ResponseServer, Sink};

/// First port handed out by [`BuildContext::alloc_port`].
pub const FIRST_EPHEMERAL_PORT: u16 = 10000;

/// What an [`AgentFactory`] gets to place agents for one flow instance.
pub struct BuildContext<'a> {
    sim: &'a mut Simulator,
    scenario: &'a Scenario,
    next_port: Vec<u16>,
}

impl<'a> BuildContext<'a> {
    pub(crate) fn new(sim: &'a mut Simulator, scenario: &'a Scenario) -> Self {
        Self {
            next_port: vec![FIRST_EPHEMERAL_PORT; scenario.hosts.len()],
            sim,
            scenario,
        }
    }

    /// The scenario being built.
    pub fn scenario(&self) -> &'a Scenario {
        self.scenario
    }

    /// The run seed.
    pub fn seed(&self) -> u64 {
        self.sim.seed()
    }

    /// A seed for one agent's own randomness, independent of other agents.
    pub fn agent_seed(&self, flow: usize, instance: u32, role: u64) -> u64 {
        derive_seed(
            self.sim.seed(),
            &[2, flow as u64, u64::from(instance), role],
        )
    }

    /// A port not yet bound on `host` (from 10000 upward).
    pub fn alloc_port(&mut self, host: usize) -> Result<u16, SimError> {
        let h = self
            .scenario
            .hosts
            .get(host)
            .ok_or_else(|| SimError::Build(format!("no host #{host}")))?;
        let next = self
            .next_port
            .get_mut(host)
            .ok_or_else(|| SimError::Build(format!("no host #{host}")))?;
        loop {
            let p = *next;
            if p == u16::MAX {
                return Err(SimError::Build(format!(
                    "host `{}` ran out of ports",
                    h.name
                )));
            }
            *next += 1;
            if !self.sim.is_bound(host, p) {
                return Ok(p);
            }
        }
    }

    /// Whether `port` is already bound on `host`.
    pub fn is_bound(&self, host: usize, port: u16) -> bool {
        self.sim.is_bound(host, port)
    }

    /// Places an agent that exchanges whole IP packets on `host`
    /// ([`Simulator::add_raw_agent`]).
    pub fn add_raw_agent(
        &mut self,
        host: usize,
        flow: usize,
        instance: u32,
        agent: Box<dyn Agent>,
        catch_all: bool,
    ) -> Result<AgentId, SimError> {
        self.sim
            .add_raw_agent(host, flow, instance, agent, catch_all)
    }

    /// Places `agent` on `host`, bound to `port` on all its interfaces.
    pub fn add_agent(
        &mut self,
        host: usize,
        port: u16,
        flow: usize,
        instance: u32,
        agent: Box<dyn Agent>,
    ) -> Result<AgentId, SimError> {
        self.sim.add_agent(host, port, flow, instance, agent)
    }
}

/// Builds agents for scenario flows. The simulator has one built in for the
/// raw-UDP kinds ([`UdpTrafficFactory`]); the QUIC adapter is another.
pub trait AgentFactory {
    /// Places the agents of instance `instance` of flow `flow`. Returns
    /// `Ok(false)` if this factory does not handle the flow's kind.
    fn build(
        &mut self,
        ctx: &mut BuildContext<'_>,
        flow: usize,
        instance: usize,
    ) -> Result<bool, SimError>;
}

/// Socket address pairs for the paths of `inst`, with the given ports.
pub fn path_addrs(inst: &FlowInstance, local_port: u16, remote_port: u16) -> Vec<PathAddrs> {
    inst.paths
        .iter()
        .map(|p| {
            (
                SocketAddr::new(p.local, local_port),
                SocketAddr::new(p.remote, remote_port),
            )
        })
        .collect()
}

/// The two ends of one instance of a raw-UDP flow (`cbr`, `onoff`, `reqresp`), as
/// [`udp_agents`] builds them.
pub struct UdpPair {
    /// The sender (or requester), on the `from` host.
    pub sender: Box<dyn Agent + Send>,
    /// Its port on every interface of the `from` host.
    pub sender_port: u16,
    /// The receiver ([`Sink`] or [`ResponseServer`]), on the `to` host.
    pub receiver: Box<dyn Agent + Send>,
    /// Its port on every interface of the `to` host.
    pub receiver_port: u16,
}

/// Builds the agents of instance `instance` of raw-UDP flow `flow` on fresh ports: the
/// generator the simulator runs ([`UdpTrafficFactory`]) and the emulator runs over real
/// sockets. `None` for the other kinds.
pub fn udp_agents(
    ctx: &mut BuildContext<'_>,
    flow: usize,
    instance: usize,
) -> Result<Option<UdpPair>, SimError> {
    let scenario = ctx.scenario;
    let Some(f) = scenario.flows.get(flow) else {
        return Ok(None);
    };
    let Some(inst) = f.instances.get(instance) else {
        return Ok(None);
    };
    let start = SimTime::from_duration(inst.start);
    let stop = inst.stop.map(SimTime::from_duration);
    let idx = inst.index;
    if matches!(
        f.kind,
        FlowKind::Quic(_) | FlowKind::Command(_) | FlowKind::Tcp(_)
    ) {
        return Ok(None);
    }
    let lp = ctx.alloc_port(inst.from)?;
    let rp = ctx.alloc_port(inst.to)?;
    let paths = path_addrs(inst, lp, rp);
    let (sender, receiver): (Box<dyn Agent + Send>, Box<dyn Agent + Send>) = match &f.kind {
        FlowKind::Quic(_) | FlowKind::Command(_) | FlowKind::Tcp(_) => return Ok(None),
        FlowKind::Cbr(c) => (
            Box::new(CbrSource::devices(
                paths,
                c.rate,
                c.packet_size,
                c.devices,
                ctx.agent_seed(flow, idx, 0),
                start,
                stop,
                c.bytes,
            )),
            Box::new(Sink::new()),
        ),
        FlowKind::OnOff(o) => (
            Box::new(OnOffSource::new(
                paths,
                o.rate,
                o.packet_size,
                o.on,
                o.off,
                o.dist == PeriodDist::Exponential,
                start,
                stop,
                o.bytes,
                ctx.agent_seed(flow, idx, 0),
            )),
            Box::new(Sink::new()),
        ),
        FlowKind::RequestResponse(r) => (
            Box::new(RequestClient::new(
                &paths,
                r.request_size,
                r.response_size,
                r.interval,
                r.count,
                r.packet_size,
                start,
                stop,
            )),
            Box::new(ResponseServer::new(
                r.request_size,
                r.response_size,
                r.packet_size,
            )),
        ),
    };
    Ok(Some(UdpPair {
        sender,
        sender_port: lp,
        receiver,
        receiver_port: rp,
    }))
}

/// Builds `cbr`, `onoff` and `reqresp` flows: a sender on the `from` host and
/// a receiver ([`Sink`] or [`ResponseServer`]) on the `to` host, on fresh ports.
#[derive(Debug, Default, Clone, Copy)]
pub struct UdpTrafficFactory;

impl AgentFactory for UdpTrafficFactory {
    fn build(
        &mut self,
        ctx: &mut BuildContext<'_>,
        flow: usize,
        instance: usize,
    ) -> Result<bool, SimError> {
        let Some(pair) = udp_agents(ctx, flow, instance)? else {
            return Ok(false);
        };
        let Some(inst) = ctx
            .scenario
            .flows
            .get(flow)
            .and_then(|f| f.instances.get(instance))
        else {
            return Ok(false);
        };
        let (from, to, idx) = (inst.from, inst.to, inst.index);
        ctx.add_agent(to, pair.receiver_port, flow, idx, pair.receiver)?;
        ctx.add_agent(from, pair.sender_port, flow, idx, pair.sender)?;
        Ok(true)
    }
}
