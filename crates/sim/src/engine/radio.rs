//! The radio model inside the event loop: the model's wakeups, the link changes it makes
//! (rates, outages, handover interruptions and context releases), the slot scheduler of
//! radio downlinks, and the link events it hands to the UEs' agents.

use polypath_link::{LinkEvent, LinkEventKind};
use polypath_ran::reflink::SlotGrant;
use polypath_ran::{LinkAction, PacketFate, RadioOutput};
use polypath_scenario::OutagePolicy;

use super::{Ev, Simulator};
use crate::link::{DropReason, Service};
use crate::radio::{RadioState, is_handover};
use crate::record::drop_index;
use crate::time::SimTime;

impl Simulator {
    /// The radio model's wakeup: tell its predictors what the radio downlinks delivered,
    /// advance it to now, and apply what it produced (all stamped now).
    pub(super) fn on_radio(&mut self) {
        let now = self.now;
        let Some(r) = self.radio.as_mut() else {
            return;
        };
        for p in &r.paths {
            let Some(link) = p.link else { continue };
            if let Some(x) = self
                .dirs
                .get_mut(link as usize * 2 + 1)
                .and_then(|d| d.radio.as_mut())
                && x.unreported > 0
            {
                r.model.report_delivered(p.ue, p.iface, x.unreported);
                x.unreported = 0;
            }
        }
        let outs = r.model.advance(now);
        let next = r.model.next_wakeup_ns();
        for out in outs {
            match out {
                RadioOutput::Link(c) => self.apply_radio(c),
                RadioOutput::Event(e) => {
                    if let LinkEventKind::HandoverExecution { source, target } = e.event
                        && let Some(r) = self.radio.as_mut()
                        && let Some(pi) = r.path_of(e.ue, e.iface)
                        && let Some(p) = r.paths.get_mut(pi as usize)
                    {
                        p.last_exec = Some((source.0, target.0));
                    }
                    self.link_events.push(e);
                }
            }
        }
        if next != u64::MAX {
            self.push(next.max(now), Ev::Radio);
        }
    }

    /// Applies one radio action to the link bound to its path, as
    /// `polypath_ran::action` specifies (and `reflink::ReferenceLink` implements).
    fn apply_radio(&mut self, c: polypath_ran::LinkChange) {
        let now = self.now;
        let Some(r) = self.radio.as_mut() else {
            return;
        };
        let Some(pi) = r.path_of(c.ue, c.iface) else {
            return;
        };
        let link = r.paths.get(pi as usize).and_then(|p| p.link);
        let (ul, dl) = match link {
            Some(l) => (l * 2, l * 2 + 1),
            None => (u32::MAX, u32::MAX),
        };
        match &c.action {
            LinkAction::ContextRelease(_) | LinkAction::Interrupt { .. } => {
                let queued = self
                    .dirs
                    .get(dl as usize)
                    .map(|d| (d.queue.len() as u64, d.queued_bytes))
                    .unwrap_or((0, 0));
                let name = link
                    .and_then(|l| self.link_names.get(l as usize))
                    .map(String::as_str);
                r.open_record(pi, now, is_handover(&c.action), name, queued);
            }
            LinkAction::Up { .. } | LinkAction::Down { .. } => r.close_record(pi, now),
            LinkAction::Rate { .. } => {}
        }
        if link.is_none() {
            return;
        }
        match c.action {
            LinkAction::Up {
                dl_bps,
                ul_bps,
                buffer_limit_bytes,
                slot,
            } => {
                if let Some(d) = self.dirs.get_mut(dl as usize)
                    && let Some(x) = d.radio.as_mut()
                {
                    x.state = RadioState::Up;
                    x.limit = buffer_limit_bytes;
                    x.slot = Some(slot);
                    d.service = Service::Fluid(dl_bps as f64);
                    d.up = true;
                }
                // Kept (forwarded) packets are served first, all of them: the limit
                // refuses arrivals only (crates/ran/src/action.rs).
                self.ensure_slot(dl);
                self.apply_rate(ul, ul_bps as f64);
                self.go_up(ul);
            }
            LinkAction::Rate {
                dl_bps,
                ul_bps,
                slot,
            } => {
                if let Some(d) = self.dirs.get_mut(dl as usize)
                    && let Some(x) = d.radio.as_mut()
                {
                    x.slot = Some(slot);
                    d.service = Service::Fluid(dl_bps as f64);
                }
                self.ensure_slot(dl);
                // While the uplink is down this only remembers the rate.
                self.apply_rate(ul, ul_bps as f64);
            }
            LinkAction::Interrupt {
                buffer_limit_bytes, ..
            } => {
                if let Some(d) = self.dirs.get_mut(dl as usize)
                    && let Some(x) = d.radio.as_mut()
                {
                    x.state = RadioState::Interrupted;
                    x.limit = buffer_limit_bytes;
                    d.up = false;
                }
                // The queue is now the target cell's buffer. The source's backlog is
                // forwarded whole; arrivals beyond the limit are dropped (M2HO finding 3:
                // only data sent after the handover commencement is lost).
                self.ensure_slot(dl);
                // The uplink holds what the UE sends until the path is up again.
                if let Some(d) = self.dirs.get_mut(ul as usize) {
                    d.policy = OutagePolicy::Hold;
                }
                self.go_down(ul);
            }
            LinkAction::ContextRelease(cr) => self.context_release(dl, &cr),
            LinkAction::Down { .. } => {
                let mut dropped = Vec::new();
                if let Some(d) = self.dirs.get_mut(dl as usize)
                    && let Some(x) = d.radio.as_mut()
                {
                    x.state = RadioState::Down;
                    x.head_sent = 0;
                    d.up = false;
                    dropped.extend(d.queue.drain(..));
                    d.queued_bytes = 0;
                }
                for p in dropped {
                    let wire = self.packets.get(p as usize).map(|p| p.wire).unwrap_or(0);
                    self.radio_drop(dl, p, wire, DropReason::Down);
                }
                self.ensure_slot(dl);
                let Some(d) = self.dirs.get_mut(ul as usize) else {
                    return;
                };
                d.policy = OutagePolicy::Drop;
                if d.up {
                    self.go_down(ul);
                } else {
                    // Interrupted before: the held packets are lost now.
                    let held: Vec<u32> = d.queue.drain(..).collect();
                    d.queued_bytes = 0;
                    d.stats.drops_down += held.len() as u64;
                    d.stats.bin_drops += held.len() as u64;
                    for p in held {
                        self.drop_packet(p, drop_index(DropReason::Down));
                    }
                }
            }
        }
    }

    /// The source cell's context release on the downlink `dl`: each queued packet is
    /// delivered now, moved to the head for redelivery, dropped, or kept in place.
    fn context_release(&mut self, dl: u32, cr: &polypath_ran::ContextRelease) {
        let Some(d) = self.dirs.get_mut(dl as usize) else {
            return;
        };
        let Some(x) = d.radio.as_mut() else {
            return;
        };
        let packets = &self.packets;
        let wire = |p: u32| packets.get(p as usize).map(|p| p.wire).unwrap_or(0);
        let sizes: Vec<u32> = d.queue.iter().map(|&p| wire(p)).collect();
        let fates = cr.fates(&sizes);
        let old: Vec<(u32, u32)> = d.queue.drain(..).zip(sizes).collect();
        let (mut now_list, mut lost, mut forward) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (p, w)) in old.into_iter().enumerate() {
            match fates.get(i).copied().unwrap_or(PacketFate::Forward) {
                PacketFate::DeliverNow => now_list.push((p, w)),
                PacketFate::Redeliver => d.queue.push_back(p),
                PacketFate::Drop => lost.push((p, w)),
                PacketFate::Forward => forward.push(p),
            }
        }
        let redelivered = d.queue.len() as u64;
        d.queue.extend(forward);
        d.queued_bytes = d.queue.iter().map(|&p| u64::from(wire(p))).sum();
        x.head_sent = 0;
        x.unreported += now_list.iter().map(|&(_, w)| u64::from(w)).sum::<u64>();
        let path = x.path;
        if let Some(rec) = self.radio.as_mut().and_then(|r| r.record_mut(path)) {
            rec.delivered_now += now_list.len() as u64;
            rec.redelivered += redelivered;
        }
        // Released from the reordering buffer: they overtake the gap.
        for (p, w) in now_list {
            self.transmit(dl, p, w);
        }
        for (p, w) in lost {
            self.radio_drop(dl, p, w, DropReason::ContextRelease);
        }
    }

    /// Counts and drops `pkt` of the radio downlink `dir`.
    fn radio_drop(&mut self, dir: u32, pkt: u32, wire: u32, reason: DropReason) {
        if let Some(d) = self.dirs.get_mut(dir as usize) {
            let s = &mut d.stats;
            match reason {
                DropReason::Queue => s.drops_queue += 1,
                DropReason::Loss => s.drops_loss += 1,
                DropReason::Down => s.drops_down += 1,
                DropReason::TargetBuffer => s.drops_target_buffer += 1,
                DropReason::ContextRelease => s.drops_context_release += 1,
            }
            s.bin_drops += 1;
            if let Some(path) = d.radio.as_ref().map(|x| x.path)
                && let Some(rec) = self.radio.as_mut().and_then(|r| r.record_mut(path))
            {
                match reason {
                    DropReason::TargetBuffer => {
                        rec.target_buffer_drops += 1;
                        rec.target_buffer_drop_bytes += u64::from(wire);
                    }
                    DropReason::ContextRelease => {
                        rec.context_release_lost += 1;
                        rec.context_release_lost_bytes += u64::from(wire);
                    }
                    _ => {}
                }
            }
        }
        self.drop_packet(pkt, drop_index(reason));
    }

    /// A packet reaches the radio downlink `dir` (drop-tail in bytes against the cell
    /// buffer; nothing is accepted while down).
    pub(super) fn radio_enqueue(&mut self, dir: u32, pkt: u32, wire: u32) {
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        let Some(x) = d.radio.as_ref() else {
            return;
        };
        let over = d.queued_bytes.saturating_add(u64::from(wire)) > x.limit;
        let state = x.state;
        if state == RadioState::Interrupted
            && let Some(rec) = self.radio.as_mut().and_then(|r| r.record_mut(x.path))
        {
            rec.arrivals += 1;
            rec.arrival_bytes += u64::from(wire);
        }
        let cause = match state {
            RadioState::Down => Some(DropReason::Down),
            RadioState::Interrupted if over => Some(DropReason::TargetBuffer),
            RadioState::Up if over => Some(DropReason::Queue),
            _ => None,
        };
        if let Some(c) = cause {
            self.radio_drop(dir, pkt, wire, c);
            return;
        }
        d.queue.push_back(pkt);
        d.queued_bytes += u64::from(wire);
        d.stats.max_queue_bytes = d.stats.max_queue_bytes.max(d.queued_bytes);
        if state == RadioState::Up {
            self.ensure_slot(dir);
        }
    }

    /// Schedules the end of the current slot of the radio downlink `dir` if that slot can
    /// change anything and none is pending. Slots are aligned to multiples of the slot
    /// length since the start of the run.
    fn ensure_slot(&mut self, dir: u32) {
        let now = self.now;
        let Some(d) = self.dirs.get_mut(dir as usize) else {
            return;
        };
        let q = d.queued_bytes;
        let Some(x) = d.radio.as_mut() else {
            return;
        };
        if x.ticking || !x.needs_slot(q) {
            return;
        }
        let Some(p) = x.slot else {
            return;
        };
        let l = p.slot_ns.max(1);
        x.ticking = true;
        self.push((now / l).saturating_add(1).saturating_mul(l), Ev::Slot(dir));
    }

    /// The end of a slot of the radio downlink `dir`: the cell's scheduler grants RBs
    /// for what is queued; packets whose last byte is granted leave now.
    pub(super) fn on_slot(&mut self, dir: u32) {
        let now = self.now;
        let rb_events = self.radio.as_ref().is_some_and(|r| r.rb_events);
        let mut served = std::mem::take(&mut self.served);
        served.clear();
        let mut event = None;
        if let Some(d) = self.dirs.get_mut(dir as usize)
            && let Some(x) = d.radio.as_mut()
            && let Some(p) = x.slot
        {
            x.ticking = false;
            let grant = if x.state == RadioState::Up {
                x.sched.slot(&p, d.queued_bytes.saturating_sub(x.head_sent))
            } else {
                SlotGrant::default()
            };
            let alloc = grant.rbs > 0;
            if rb_events && (alloc || x.prev_alloc) {
                event = Some((
                    x.path,
                    LinkEventKind::RbAllocation {
                        cell: p.cell,
                        slot: now.saturating_sub(1) / p.slot_ns.max(1),
                        rbs: grant.rbs,
                        total_rbs: p.total_rbs,
                        bytes: u32::try_from(grant.bytes).unwrap_or(u32::MAX),
                    },
                ));
            }
            x.prev_alloc = alloc;
            let mut budget = grant.bytes;
            while budget > 0 {
                let Some(&head) = d.queue.front() else {
                    break;
                };
                let size = self
                    .packets
                    .get(head as usize)
                    .map(|p| u64::from(p.wire))
                    .unwrap_or(0);
                let left = size.saturating_sub(x.head_sent);
                if budget >= left {
                    budget -= left;
                    d.queue.pop_front();
                    d.queued_bytes = d.queued_bytes.saturating_sub(size);
                    x.head_sent = 0;
                    x.unreported += size;
                    served.push(head);
                } else {
                    x.head_sent += budget;
                    budget = 0;
                }
            }
        }
        for &pkt in &served {
            let wire = self.packets.get(pkt as usize).map(|p| p.wire).unwrap_or(0);
            self.transmit(dir, pkt, wire);
        }
        self.served = served;
        if let Some((path, kind)) = event
            && let Some(p) = self.radio.as_ref().and_then(|r| r.paths.get(path as usize))
        {
            self.link_events
                .push(LinkEvent::new(now, p.ue, p.iface, kind));
        }
        self.ensure_slot(dir);
    }

    /// Writes the link events produced by the last handled event and hands each to the
    /// agents on its UE's host.
    pub(super) fn flush_link_events(&mut self) {
        let now = SimTime(self.now);
        while !self.link_events.is_empty() {
            let mut events = std::mem::take(&mut self.link_events);
            for ev in &events {
                if let Some(sink) = self.event_sink.as_mut()
                    && let Err(e) = sink.write(ev)
                    && self.error.is_none()
                {
                    self.error = Some(e);
                }
                let Some(r) = self.radio.as_mut() else {
                    continue;
                };
                r.events += 1;
                let Some(&host) = r.ue_host.get(&ev.ue) else {
                    continue;
                };
                let addr = r.addr_of(ev.ue, ev.iface);
                let n = self.host_agents.get(host as usize).map_or(0, Vec::len);
                for k in 0..n {
                    let Some(&a) = self.host_agents.get(host as usize).and_then(|l| l.get(k))
                    else {
                        break;
                    };
                    if let Some(slot) = self.agents.get_mut(a as usize) {
                        slot.agent.handle_link_event(now, ev, addr);
                    }
                    self.drive(a);
                }
            }
            events.clear();
            if self.link_events.is_empty() {
                self.link_events = events;
            }
        }
    }
}
