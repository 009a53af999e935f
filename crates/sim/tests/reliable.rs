//! Property test: over random loss, reordering, duplication and link outages,
//! every byte sent is delivered exactly once and intact.
//!
//! The transport here is a TEST-ONLY sliding-window protocol with selective
//! acknowledgements and timeout retransmission. It exercises the simulator's
//! reliability-relevant behaviour independently of the QUIC stack (whose own
//! version of this property is in `quic_reliable.rs`); it is not a product
//! feature. It also shows how a custom factory for `kind = "quic"` flows plugs
//! into a run ahead of the built-in QUIC adapter.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;

use bytes::{BufMut, Bytes, BytesMut};
use common::{Impairments, hosts_on_links, impaired_flow, impaired_links, scenario};
use polypath_sim::scenario::FlowKind;
use polypath_sim::{
    Agent, AgentFactory, AgentStats, BuildContext, Datagram, Hooks, Record, RunOptions, SimError,
    SimTime, path_addrs, run_scenario,
};
use proptest::prelude::*;

const MSS: usize = 1000;
const WINDOW: usize = 32;
const RTO_NS: u64 = 150_000_000;
const DATA: u8 = 1;
const ACK: u8 = 2;

fn pattern(offset: u64) -> u8 {
    (offset.wrapping_mul(31).wrapping_add(offset >> 8) % 251) as u8
}

struct Sender {
    paths: Vec<(SocketAddr, SocketAddr)>,
    next_path: usize,
    total: u64,
    next_offset: u64,
    /// offset -> (len, last sent)
    unacked: BTreeMap<u64, (usize, u64)>,
    acked_below: u64,
    queue: Vec<Datagram>,
    started: Option<u64>,
    finished: Option<u64>,
    records: Vec<Record>,
}

impl Sender {
    fn segment(&mut self, offset: u64, len: usize) -> Datagram {
        let (src, dst) = self.paths[self.next_path];
        self.next_path = (self.next_path + 1) % self.paths.len();
        let mut b = BytesMut::with_capacity(9 + len);
        b.put_u8(DATA);
        b.put_u64(offset);
        for i in 0..len as u64 {
            b.put_u8(pattern(offset + i));
        }
        Datagram {
            src,
            dst,
            payload: b.freeze(),
        }
    }

    fn fill(&mut self, now: u64) {
        self.started.get_or_insert(now);
        // Retransmit timed-out segments first.
        let due: Vec<(u64, usize)> = self
            .unacked
            .iter()
            .filter(|(_, (_, t))| now >= t + RTO_NS)
            .map(|(o, (l, _))| (*o, *l))
            .collect();
        for (o, l) in due {
            self.unacked.insert(o, (l, now));
            let d = self.segment(o, l);
            self.queue.push(d);
        }
        while self.unacked.len() < WINDOW && self.next_offset < self.total {
            let len = MSS.min((self.total - self.next_offset) as usize);
            let o = self.next_offset;
            self.next_offset += len as u64;
            self.unacked.insert(o, (len, now));
            let d = self.segment(o, len);
            self.queue.push(d);
        }
    }
}

impl Agent for Sender {
    fn handle_datagram(&mut self, now: SimTime, d: Datagram) {
        let p = &d.payload[..];
        if p.len() < 17 || p[0] != ACK {
            return;
        }
        let cum = u64::from_be_bytes(p[1..9].try_into().unwrap());
        let sel = u64::from_be_bytes(p[9..17].try_into().unwrap());
        self.unacked.remove(&sel);
        self.acked_below = self.acked_below.max(cum);
        let below: Vec<u64> = self.unacked.range(..cum).map(|(o, _)| *o).collect();
        for o in below {
            self.unacked.remove(&o);
        }
        if self.finished.is_none() && self.acked_below >= self.total {
            self.finished = Some(now.0);
            self.records.push(Record::Completion {
                label: "transfer".into(),
                started: SimTime(self.started.unwrap_or(0)),
                finished: now,
                bytes: self.total,
            });
        }
        self.fill(now.0);
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.fill(now.0);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Datagram> {
        if self.started.is_none() {
            self.fill(now.0);
        }
        if self.queue.is_empty() {
            None
        } else {
            Some(self.queue.remove(0))
        }
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        if self.started.is_none() {
            return Some(SimTime(0));
        }
        self.unacked
            .values()
            .map(|(_, t)| SimTime(t + RTO_NS))
            .min()
    }

    fn is_done(&self) -> bool {
        self.finished.is_some()
    }

    fn stats(&self, stats: &mut AgentStats) {
        stats.app_bytes_sent = self.next_offset;
    }

    fn drain_records(&mut self, out: &mut Vec<Record>) {
        out.append(&mut self.records);
    }
}

#[derive(Default)]
struct Received {
    /// Bytes handed to the application, in order.
    app: Vec<u8>,
    /// Corrupted or inconsistent segments seen.
    bad: u64,
}

struct Receiver {
    total: u64,
    out: Rc<RefCell<Received>>,
    /// Out-of-order segments by offset.
    pending: BTreeMap<u64, Bytes>,
    queue: Vec<Datagram>,
}

impl Agent for Receiver {
    fn handle_datagram(&mut self, _now: SimTime, d: Datagram) {
        let p = d.payload.clone();
        if p.len() < 9 || p[0] != DATA {
            return;
        }
        let offset = u64::from_be_bytes(p[1..9].try_into().unwrap());
        let body = p.slice(9..);
        let intact = body
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(offset + i as u64));
        let mut out = self.out.borrow_mut();
        if !intact || offset + body.len() as u64 > self.total {
            out.bad += 1;
            return;
        }
        let delivered = out.app.len() as u64;
        if offset >= delivered {
            self.pending.entry(offset).or_insert(body);
        }
        // Deliver what is now in order, each byte once.
        loop {
            let next = out.app.len() as u64;
            let Some((&o, seg)) = self.pending.iter().next() else {
                break;
            };
            if o > next {
                break;
            }
            let seg = seg.clone();
            self.pending.remove(&o);
            let skip = (next - o) as usize;
            if skip < seg.len() {
                out.app.extend_from_slice(&seg[skip..]);
            }
        }
        let mut ack = BytesMut::with_capacity(17);
        ack.put_u8(ACK);
        ack.put_u64(out.app.len() as u64);
        ack.put_u64(offset);
        self.queue.push(Datagram {
            src: d.dst,
            dst: d.src,
            payload: ack.freeze(),
        });
    }

    fn handle_timeout(&mut self, _now: SimTime) {}

    fn poll_transmit(&mut self, _now: SimTime) -> Option<Datagram> {
        if self.queue.is_empty() {
            None
        } else {
            Some(self.queue.remove(0))
        }
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        None
    }

    fn is_done(&self) -> bool {
        true
    }

    fn stats(&self, stats: &mut AgentStats) {
        stats.app_bytes_received = self.out.borrow().app.len() as u64;
    }
}

/// Builds the test transport for `kind = "quic"` flows (upload direction).
struct TestTransport {
    results: Vec<Rc<RefCell<Received>>>,
}

impl AgentFactory for TestTransport {
    fn build(
        &mut self,
        ctx: &mut BuildContext<'_>,
        flow: usize,
        instance: usize,
    ) -> Result<bool, SimError> {
        let f = &ctx.scenario().flows[flow];
        let FlowKind::Quic(q) = &f.kind else {
            return Ok(false);
        };
        let total = q.bytes;
        let inst = f.instances[instance].clone();
        let port = q.port;
        let lp = ctx.alloc_port(inst.from)?;
        let out = Rc::new(RefCell::new(Received::default()));
        self.results.push(out.clone());
        ctx.add_agent(
            inst.to,
            port,
            flow,
            inst.index,
            Box::new(Receiver {
                total,
                out,
                pending: BTreeMap::new(),
                queue: Vec::new(),
            }),
        )?;
        ctx.add_agent(
            inst.from,
            lp,
            flow,
            inst.index,
            Box::new(Sender {
                paths: path_addrs(&inst, lp, port),
                next_path: 0,
                total,
                next_offset: 0,
                unacked: BTreeMap::new(),
                acked_below: 0,
                queue: Vec::new(),
                started: None,
                finished: None,
                records: Vec::new(),
            }),
        )?;
        Ok(true)
    }
}

fn impairments() -> impl Strategy<Value = Impairments> {
    (
        0.0..0.25f64,
        proptest::option::of(1.0..5.0f64),
        0u32..20,
        any::<bool>(),
        0.0..0.2f64,
        0u32..1500,
        0u32..1200,
        any::<bool>(),
        any::<bool>(),
        1u64..150_000,
    )
        .prop_map(
            |(
                loss,
                burst,
                jitter_ms,
                reorder,
                duplicate,
                outage_at_ms,
                outage_ms,
                hold,
                two_paths,
                bytes,
            )| {
                Impairments {
                    loss,
                    burst,
                    jitter_ms,
                    reorder,
                    duplicate,
                    outage_at_ms,
                    outage_ms,
                    hold,
                    two_paths,
                    download: false,
                    bytes,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn every_byte_is_delivered_once_and_intact(imp in impairments(), seed in any::<u64>()) {
        let flow = impaired_flow(&imp, "");
        let s = scenario(&hosts_on_links(&impaired_links(&imp), &flow, "600s"));
        let mut factory = TestTransport { results: Vec::new() };
        let opts = RunOptions { seed: Some(seed), out_dir: None, progress: false, events: None };
        let report = run_scenario(&s, &opts, Hooks { agents: Some(&mut factory), sources: Vec::new() })
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(report.summary.stopped_by.as_str(), "done");
        let got = factory.results[0].borrow();
        prop_assert_eq!(got.bad, 0);
        prop_assert_eq!(got.app.len() as u64, imp.bytes);
        let expected: Vec<u8> = (0..imp.bytes).map(pattern).collect();
        prop_assert!(got.app == expected, "delivered bytes differ from sent bytes");
        let c = report.summary.flows[0].completions.clone();
        prop_assert_eq!(c.map(|c| c.count), Some(1));
        prop_assert_eq!(report.summary.flows[0].app_bytes_received, imp.bytes);
    }
}
