//! A reference implementation of a radio link that applies [`LinkAction`]s, serving its
//! downlink queue slot by slot with a burst-clearing cell scheduler. It is the executable
//! specification of how a simulator link should apply the radio model's actions, and what the
//! tests use to show target-buffer overflow, context-release reordering and RB bursts.

use crate::action::{LinkAction, LinkChange, PacketFate, SlotParams};
use polypath_link::{LinkEvent, LinkEventKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// Resource blocks and bytes granted to the UE in one slot.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Default)]
pub struct SlotGrant {
    /// Resource blocks allocated.
    pub rbs: u16,
    /// Bytes that fit into them (capped by what is queued).
    pub bytes: u64,
}

/// A cell's downlink scheduler as seen by one UE (M2HO §4.3, after BurstTracker): when the
/// UE has data and it is its turn, the cell allocates all RBs in consecutive slots until the
/// UE's buffer is cleared; the burst ends with a partially allocated slot. The cell then
/// serves other UEs for a number of slots chosen so that, when backlogged, this UE gets
/// `share` of the slots on average (gap = burst length · (1 − share) / share, jittered
/// ±50 %). A burst is cut after the cell's `max_burst_slots` to give the others their turn.
#[derive(Debug, Clone)]
pub struct SlotScheduler {
    rng: ChaCha8Rng,
    others_left: u32,
    burst_len: u32,
}

impl SlotScheduler {
    /// A scheduler with its own seed.
    pub fn new(seed: u64) -> Self {
        SlotScheduler {
            rng: ChaCha8Rng::seed_from_u64(seed),
            others_left: 0,
            burst_len: 0,
        }
    }

    fn end_burst(&mut self, share: f64) {
        if self.burst_len > 0 && share < 1.0 {
            let mean = self.burst_len as f64 * (1.0 - share) / share.max(1e-3);
            let jitter = 0.5 + self.rng.random::<f64>();
            self.others_left = (mean * jitter).round() as u32;
        }
        self.burst_len = 0;
    }

    /// True when the scheduler is between bursts with no other UEs' turn pending: a slot
    /// with nothing queued then changes nothing (no allocation, no random draw), so an
    /// event-driven link need not visit idle slots.
    pub fn is_idle(&self) -> bool {
        self.others_left == 0 && self.burst_len == 0
    }

    /// Allocation in the next slot when `queued_bytes` wait for this UE.
    pub fn slot(&mut self, p: &SlotParams, queued_bytes: u64) -> SlotGrant {
        if self.others_left > 0 {
            self.others_left -= 1;
            return SlotGrant::default();
        }
        if queued_bytes == 0 || p.dl_bytes_per_rb <= 0.0 {
            self.end_burst(p.share);
            return SlotGrant::default();
        }
        let full = p.total_rbs as f64 * p.dl_bytes_per_rb;
        self.burst_len += 1;
        if queued_bytes as f64 >= full {
            if self.burst_len >= p.max_burst_slots {
                self.end_burst(p.share);
            }
            SlotGrant {
                rbs: p.total_rbs,
                bytes: full.floor() as u64,
            }
        } else {
            let rbs = ((queued_bytes as f64 / p.dl_bytes_per_rb).ceil() as u16).min(p.total_rbs);
            self.end_burst(p.share);
            SlotGrant {
                rbs,
                bytes: queued_bytes,
            }
        }
    }
}

/// Why a packet was dropped by the reference link.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub enum DropCause {
    /// Queue full while up.
    Overflow,
    /// Target buffer full during a handover interruption (M2HO finding 3).
    TargetBufferOverflow,
    /// Lost in the source's context release (M2HO finding 2).
    ContextRelease,
    /// The link was down.
    Down,
}

#[derive(Debug, Clone, Copy)]
struct Pkt {
    id: u64,
    size: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Up,
    Interrupted,
    Down,
}

/// A downlink radio link driven by [`LinkChange`]s and served per slot.
#[derive(Debug, Clone)]
pub struct ReferenceLink {
    ue: u32,
    iface: u16,
    state: State,
    slot: Option<SlotParams>,
    limit: u64,
    queue: VecDeque<Pkt>,
    queued_bytes: u64,
    head_sent: u64,
    sched: SlotScheduler,
    next_slot_ns: Option<u64>,
    prev_alloc: bool,
    /// `(t_ns, packet id)` of every delivered packet, in delivery order.
    pub delivered: Vec<(u64, u64)>,
    /// `(t_ns, packet id, cause)` of every dropped packet.
    pub dropped: Vec<(u64, u64, DropCause)>,
    /// RB allocation events (allocated slots and the first empty slot after each).
    pub rb_events: Vec<LinkEvent>,
}

impl ReferenceLink {
    /// A link that starts down.
    pub fn new(ue: u32, iface: u16, seed: u64) -> Self {
        ReferenceLink {
            ue,
            iface,
            state: State::Down,
            slot: None,
            limit: 0,
            queue: VecDeque::new(),
            queued_bytes: 0,
            head_sent: 0,
            sched: SlotScheduler::new(seed),
            next_slot_ns: None,
            prev_alloc: false,
            delivered: Vec::new(),
            dropped: Vec::new(),
            rb_events: Vec::new(),
        }
    }

    /// Bytes waiting in the queue.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Serves slots up to `t_ns`, then applies a change (changes must come in time order).
    pub fn apply(&mut self, change: &LinkChange) {
        self.run_until(change.t_ns);
        let t = change.t_ns;
        match &change.action {
            LinkAction::Up {
                buffer_limit_bytes,
                slot,
                ..
            } => {
                self.state = State::Up;
                self.limit = *buffer_limit_bytes;
                self.slot = Some(*slot);
            }
            LinkAction::Rate { slot, .. } => self.slot = Some(*slot),
            LinkAction::Interrupt {
                buffer_limit_bytes, ..
            } => {
                // The backlog is forwarded whole; the limit refuses arrivals only.
                self.state = State::Interrupted;
                self.limit = *buffer_limit_bytes;
            }
            LinkAction::ContextRelease(cr) => {
                let sizes: Vec<u32> = self.queue.iter().map(|p| p.size).collect();
                let fates = cr.fates(&sizes);
                let old: Vec<Pkt> = self.queue.drain(..).collect();
                let mut redeliver = Vec::new();
                let mut forward = Vec::new();
                for (p, f) in old.into_iter().zip(fates) {
                    match f {
                        PacketFate::DeliverNow => self.delivered.push((t, p.id)),
                        PacketFate::Redeliver => redeliver.push(p),
                        PacketFate::Drop => self.dropped.push((t, p.id, DropCause::ContextRelease)),
                        PacketFate::Forward => forward.push(p),
                    }
                }
                self.queue.extend(redeliver);
                self.queue.extend(forward);
                self.queued_bytes = self.queue.iter().map(|p| p.size as u64).sum();
                self.head_sent = 0;
            }
            LinkAction::Down { .. } => {
                self.state = State::Down;
                for p in self.queue.drain(..) {
                    self.dropped.push((t, p.id, DropCause::Down));
                }
                self.queued_bytes = 0;
                self.head_sent = 0;
            }
        }
    }

    /// A packet arrives from the sender at `t_ns`; returns whether it was queued.
    pub fn enqueue(&mut self, t_ns: u64, id: u64, size: u32) -> bool {
        self.run_until(t_ns);
        let cause = match self.state {
            State::Down => Some(DropCause::Down),
            State::Interrupted if self.queued_bytes + size as u64 > self.limit => {
                Some(DropCause::TargetBufferOverflow)
            }
            State::Up if self.queued_bytes + size as u64 > self.limit => Some(DropCause::Overflow),
            _ => None,
        };
        if let Some(c) = cause {
            self.dropped.push((t_ns, id, c));
            return false;
        }
        self.queue.push_back(Pkt { id, size });
        self.queued_bytes += size as u64;
        true
    }

    /// Serves every slot that ends at or before `t_ns`.
    pub fn run_until(&mut self, t_ns: u64) {
        let Some(p) = self.slot else {
            return;
        };
        let slot_ns = p.slot_ns.max(1);
        // Slots are aligned to multiples of the slot length since the start of the run.
        let mut next = *self.next_slot_ns.get_or_insert((t_ns / slot_ns) * slot_ns);
        while next + slot_ns <= t_ns {
            let t_end = next + slot_ns;
            let index = next / slot_ns;
            next = t_end;
            self.next_slot_ns = Some(next);
            let grant = if self.state == State::Up {
                self.sched.slot(&p, self.queued_bytes - self.head_sent)
            } else {
                SlotGrant::default()
            };
            let alloc = grant.rbs > 0;
            if alloc || self.prev_alloc {
                self.rb_events.push(LinkEvent::new(
                    t_end,
                    self.ue,
                    self.iface,
                    LinkEventKind::RbAllocation {
                        cell: p.cell,
                        slot: index,
                        rbs: grant.rbs,
                        total_rbs: p.total_rbs,
                        bytes: grant.bytes.min(u32::MAX as u64) as u32,
                    },
                ));
            }
            self.prev_alloc = alloc;
            let mut budget = grant.bytes;
            while budget > 0 {
                let Some(head) = self.queue.front() else {
                    break;
                };
                let left = head.size as u64 - self.head_sent;
                if budget >= left {
                    budget -= left;
                    self.queued_bytes -= head.size as u64;
                    self.delivered.push((t_end, head.id));
                    self.queue.pop_front();
                    self.head_sent = 0;
                } else {
                    self.head_sent += budget;
                    budget = 0;
                }
            }
        }
    }

    /// Current slot parameters, if the link has been up.
    pub fn slot_params(&self) -> Option<SlotParams> {
        self.slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::ContextRelease;
    use polypath_link::{CellId, DownReason};

    fn params(share: f64) -> SlotParams {
        SlotParams {
            cell: CellId(1),
            slot_ns: 500_000,
            total_rbs: 106,
            dl_bytes_per_rb: 100.0,
            share,
            max_burst_slots: crate::config::DEFAULT_MAX_BURST_SLOTS,
        }
    }

    fn up(t: u64, share: f64, limit: u64) -> LinkChange {
        LinkChange {
            t_ns: t,
            ue: 0,
            iface: 0,
            action: LinkAction::Up {
                dl_bps: params(share).dl_bps() as u64,
                ul_bps: 0,
                buffer_limit_bytes: limit,
                slot: params(share),
            },
        }
    }

    #[test]
    fn bursts_drain_the_buffer_and_end_partial() {
        let mut l = ReferenceLink::new(0, 0, 1);
        l.apply(&up(0, 0.5, 1_000_000));
        // 50 kB arrive at once: 10 600 B per full slot -> 4 full slots and a partial one.
        for i in 0..50 {
            l.enqueue(1_000, i, 1000);
        }
        l.run_until(20_000_000);
        assert_eq!(l.delivered.len(), 50);
        let rbs: Vec<u16> = l
            .rb_events
            .iter()
            .map(|e| match e.event {
                LinkEventKind::RbAllocation { rbs, .. } => rbs,
                _ => 0,
            })
            .collect();
        assert_eq!(&rbs[..4], &[106, 106, 106, 106]);
        assert!(rbs[4] > 0 && rbs[4] < 106, "{rbs:?}");
        assert_eq!(rbs[5], 0);
        // The bytes of the burst equal what was queued before it (M2HO's buffer estimate).
        let burst: u64 = l
            .rb_events
            .iter()
            .map(|e| match e.event {
                LinkEventKind::RbAllocation { bytes, .. } => bytes as u64,
                _ => 0,
            })
            .sum();
        assert_eq!(burst, 50_000);
    }

    #[test]
    fn idle_slots_change_nothing() {
        let p = params(0.3);
        let mut a = SlotScheduler::new(9);
        let mut b = SlotScheduler::new(9);
        // A burst, then the others' turn, then idle.
        for q in [30_000u64, 30_000, 5_000, 0, 0] {
            assert_eq!(a.slot(&p, q), b.slot(&p, q));
        }
        while !a.is_idle() {
            assert_eq!(a.slot(&p, 0), SlotGrant::default());
            b.slot(&p, 0);
        }
        // `b` visits a thousand more idle slots, `a` none: both allocate alike afterwards.
        for _ in 0..1000 {
            assert_eq!(b.slot(&p, 0), SlotGrant::default());
            assert!(b.is_idle());
        }
        for q in [40_000u64, 40_000, 40_000, 100, 0, 0, 0, 50_000, 50_000] {
            assert_eq!(a.slot(&p, q), b.slot(&p, q));
        }
    }

    /// Longest run of slots with a grant and longest run without, over `slots` slots of a
    /// UE that always has data queued.
    fn longest_burst_and_gap(p: &SlotParams, slots: usize) -> (usize, usize, f64) {
        let mut sched = SlotScheduler::new(5);
        let (mut burst, mut gap, mut longest_burst, mut longest_gap, mut served) =
            (0, 0, 0, 0, 0usize);
        for _ in 0..slots {
            if sched.slot(p, u64::MAX).rbs > 0 {
                (burst, gap, served) = (burst + 1, 0, served + 1);
            } else {
                (burst, gap) = (0, gap + 1);
            }
            longest_burst = longest_burst.max(burst);
            longest_gap = longest_gap.max(gap);
        }
        (longest_burst, longest_gap, served as f64 / slots as f64)
    }

    #[test]
    fn max_burst_slots_bounds_bursts_and_the_gaps_after_them() {
        let mut p = params(0.15);
        let (burst, gap, share) = longest_burst_and_gap(&p, 200_000);
        assert_eq!(burst, 40);
        // A 40-slot burst is followed by 40 · 0.85 / 0.15 = 227 slots of others (±50 %).
        assert!(gap > 227 && gap <= 340, "{gap}");
        assert!((share - 0.15).abs() < 0.01, "{share}");
        p.max_burst_slots = 4;
        let (burst, gap, share) = longest_burst_and_gap(&p, 200_000);
        assert_eq!(burst, 4);
        assert!(gap > 23 && gap <= 34, "{gap}");
        assert!((share - 0.15).abs() < 0.01, "the share stays: {share}");
    }

    #[test]
    fn a_share_given_as_rate_has_no_gaps() {
        // `share_as = "rate"` at 0.15: every slot, 15 % of the bytes per RB.
        let mut p = params(1.0);
        p.dl_bytes_per_rb *= 0.15;
        let (burst, gap, share) = longest_burst_and_gap(&p, 20_000);
        assert_eq!((burst, gap), (20_000, 0), "served in every slot");
        assert_eq!(share, 1.0);
        // A queue that drains still ends its burst with a partial slot: 5 000 bytes are
        // three full slots of 1 590 and a partial one of 230, then nothing.
        let mut sched = SlotScheduler::new(5);
        let mut queued = 5_000u64;
        let mut rbs = Vec::new();
        for _ in 0..6 {
            let g = sched.slot(&p, queued);
            queued -= g.bytes;
            rbs.push(g.rbs);
        }
        assert_eq!(rbs, [106, 106, 106, 16, 0, 0]);
    }

    #[test]
    fn backlogged_share_is_respected() {
        let mut l = ReferenceLink::new(0, 0, 3);
        l.apply(&up(0, 0.25, u64::MAX));
        for i in 0..200_000 {
            l.enqueue(0, i, 1000);
        }
        l.run_until(2_000_000_000);
        let bytes = l.delivered.len() as f64 * 1000.0;
        let expect = params(0.25).dl_bps() / 8.0 * 2.0;
        assert!((bytes / expect - 1.0).abs() < 0.1, "{bytes} vs {expect}");
    }

    #[test]
    fn interruption_limits_to_target_buffer_and_down_drops() {
        let mut l = ReferenceLink::new(0, 0, 1);
        l.apply(&up(0, 1.0, 100_000));
        l.apply(&LinkChange {
            t_ns: 1_000_000,
            ue: 0,
            iface: 0,
            action: LinkAction::Interrupt {
                buffer_limit_bytes: 5_000,
                reason: DownReason::Handover,
            },
        });
        let accepted = (0..10).filter(|i| l.enqueue(2_000_000, *i, 1000)).count();
        assert_eq!(accepted, 5);
        assert_eq!(
            l.dropped
                .iter()
                .filter(|d| d.2 == DropCause::TargetBufferOverflow)
                .count(),
            5
        );
        l.apply(&up(30_000_000, 1.0, 100_000));
        l.run_until(40_000_000);
        assert_eq!(l.delivered.len(), 5);
        l.apply(&LinkChange {
            t_ns: 50_000_000,
            ue: 0,
            iface: 0,
            action: LinkAction::Down {
                reason: DownReason::NoCoverage,
            },
        });
        assert!(!l.enqueue(60_000_000, 99, 1000));
    }

    /// M2HO finding 3: the source's backlog reaches the target whole, however far it
    /// exceeds the target's buffer; only what arrives while the queue is over the limit is
    /// lost, until it drains below it.
    #[test]
    fn a_backlog_beyond_the_target_buffer_is_kept_and_arrivals_dropped() {
        let mut l = ReferenceLink::new(0, 0, 1);
        l.apply(&up(0, 1.0, 100_000));
        assert!((0..8).all(|i| l.enqueue(0, i, 1000)));
        l.apply(&LinkChange {
            t_ns: 0,
            ue: 0,
            iface: 0,
            action: LinkAction::Interrupt {
                buffer_limit_bytes: 5_000,
                reason: DownReason::Handover,
            },
        });
        assert_eq!(l.queued_bytes(), 8_000);
        assert!(!l.enqueue(1_000_000, 8, 1000));
        // Up on the target with its 5 kB buffer: the backlog is still whole.
        l.apply(&up(30_000_000, 1.0, 5_000));
        assert_eq!(l.queued_bytes(), 8_000);
        assert!(!l.enqueue(30_000_000, 9, 1000));
        l.run_until(40_000_000);
        assert_eq!(l.queued_bytes(), 0);
        assert!(l.enqueue(40_000_000, 10, 1000));
        let dropped: Vec<_> = l.dropped.iter().map(|d| (d.1, d.2)).collect();
        assert_eq!(
            dropped,
            [
                (8, DropCause::TargetBufferOverflow),
                (9, DropCause::Overflow)
            ]
        );
        let delivered: Vec<u64> = l.delivered.iter().map(|d| d.1).collect();
        assert_eq!(delivered, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn context_release_reorders() {
        let mut l = ReferenceLink::new(0, 0, 1);
        l.apply(&up(0, 1.0, 1_000_000));
        // Interrupt first so nothing is served, then queue, then release with a gap.
        l.apply(&LinkChange {
            t_ns: 0,
            ue: 0,
            iface: 0,
            action: LinkAction::Interrupt {
                buffer_limit_bytes: 1_000_000,
                reason: DownReason::Handover,
            },
        });
        for i in 0..40 {
            l.enqueue(10, i, 1000);
        }
        l.apply(&LinkChange {
            t_ns: 100,
            ue: 0,
            iface: 0,
            action: LinkAction::ContextRelease(ContextRelease {
                gap: true,
                window_bytes: 20_000,
                max_gap_packets: 4,
                redeliver_probability: 1.0,
                seed: 5,
            }),
        });
        l.apply(&up(30_000_000, 1.0, 1_000_000));
        l.run_until(100_000_000);
        let order: Vec<u64> = l.delivered.iter().map(|d| d.1).collect();
        assert_eq!(order.len(), 40, "all redelivered");
        assert!(
            order.windows(2).any(|w| w[1] < w[0]),
            "out of order: {order:?}"
        );
    }
}
