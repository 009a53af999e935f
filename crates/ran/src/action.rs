//! What the radio model asks of a simulated link: per-path rate changes, interruptions with
//! a bounded target buffer, the source cell's context release, and link up/down.
//!
//! # How a simulator link applies these actions
//!
//! A link for one `(ue, iface)` path keeps a downlink FIFO queue of packets, a serving rate
//! for each direction, a queue limit in bytes and a state (up, interrupted, down). At
//! `change.t_ns` it applies `change.action`:
//!
//! * [`LinkAction::Up`]: the path carries data at `dl_bps` / `ul_bps`; the queue limit
//!   becomes `buffer_limit_bytes` (the serving cell's per-UE buffer). Packets kept during an
//!   interruption (forwarded data) are served first, in queue order, all of them: the limit
//!   only refuses arrivals.
//! * [`LinkAction::Rate`]: new rates while up (channel or load changed). While interrupted
//!   or down, remember them for the next `Up`.
//! * [`LinkAction::Interrupt`]: stop serving both directions but keep the queue — it now
//!   models the *target* cell's buffer: the limit becomes `buffer_limit_bytes`. The source's
//!   backlog is forwarded whole, however far it exceeds the limit; new arrivals that would
//!   exceed it are dropped (drop-tail in bytes: M2HO finding 3, "only new data sent after
//!   the handover commencement, are lost"). Uplink packets sent by the UE are held (not
//!   lost) until `Up`.
//! * [`LinkAction::ContextRelease`]: applied just before the `Interrupt` of a handover
//!   (same timestamp). Call [`ContextRelease::fates`] with the sizes of the packets queued
//!   for downlink, head first, and apply each [`PacketFate`]: deliver now (these overtake
//!   the gap, so the receiver sees packets out of order), move to the head of the queue to
//!   be delivered after the interruption (redelivered by the target, late), drop, or keep
//!   in place (forwarded to the target in order).
//! * [`LinkAction::Down`]: the path is unusable (no coverage, SN released): drop every
//!   queued packet and every new arrival until `Up`.
//!
//! [`crate::reflink::ReferenceLink`] implements exactly this and is used by the tests.

use polypath_link::DownReason;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Slot-level parameters of a path's serving cell, for links that emulate per-slot
/// resource-block scheduling ([`crate::reflink::SlotScheduler`]).
#[derive(Debug, Copy, Clone, PartialEq)]
pub struct SlotParams {
    /// Serving cell.
    pub cell: polypath_link::CellId,
    /// Slot duration (ns).
    pub slot_ns: u64,
    /// Resource blocks in the carrier.
    pub total_rbs: u16,
    /// Downlink bytes one RB carries in one slot at the current MCS and rank (averaged over
    /// the TDD pattern).
    pub dl_bytes_per_rb: f64,
    /// This UE's share of slots when backlogged: ue_share / attached UEs, or 1 / attached
    /// UEs where the cell gives its share as a rate (`share_as = "rate"`, the share then
    /// in `dl_bytes_per_rb`).
    pub share: f64,
    /// Longest burst of slots the cell gives this UE before it serves the others.
    pub max_burst_slots: u32,
}

impl SlotParams {
    /// The downlink rate these parameters give when backlogged: share × RBs × bytes per RB
    /// per slot.
    pub fn dl_bps(&self) -> f64 {
        self.share * self.total_rbs as f64 * self.dl_bytes_per_rb * 8.0 * 1e9
            / self.slot_ns.max(1) as f64
    }
}

/// A change to apply to one path's link at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkChange {
    /// When (ns since start).
    pub t_ns: u64,
    /// UE.
    pub ue: u32,
    /// Interface (path) of the UE.
    pub iface: u16,
    /// What to do.
    pub action: LinkAction,
}

/// One action on a link; see the module documentation for the exact semantics.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkAction {
    /// The path is up at these rates with this queue limit.
    Up {
        /// Downlink rate (bit/s).
        dl_bps: u64,
        /// Uplink rate (bit/s).
        ul_bps: u64,
        /// Queue limit (bytes): the serving cell's per-UE buffer.
        buffer_limit_bytes: u64,
        /// Slot-level parameters.
        slot: SlotParams,
    },
    /// New rates.
    Rate {
        /// Downlink rate (bit/s).
        dl_bps: u64,
        /// Uplink rate (bit/s).
        ul_bps: u64,
        /// Slot-level parameters.
        slot: SlotParams,
    },
    /// Break-before-make interruption: no service, queue kept with a new limit.
    Interrupt {
        /// The target cell's per-UE buffer (bytes).
        buffer_limit_bytes: u64,
        /// Why.
        reason: DownReason,
    },
    /// Source-cell link-layer context release (M2HO finding 2).
    ContextRelease(ContextRelease),
    /// The path is unusable; queue and arrivals are dropped.
    Down {
        /// Why.
        reason: DownReason,
    },
}

/// What happens to one queued packet at a context release.
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub enum PacketFate {
    /// Delivered to the receiver now (released from the reordering buffer).
    DeliverNow,
    /// Part of the gap: delivered by the target after the interruption (moved to the queue
    /// head, in original order).
    Redeliver,
    /// Part of the gap and lost.
    Drop,
    /// Not in the source's window: forwarded to the target and kept in queue order.
    Forward,
}

/// The context release of one handover: a deterministic recipe (its own seed) so that the
/// same handover has the same effect whatever the caller's RNG state.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextRelease {
    /// Whether this handover leaves a gap at all.
    pub gap: bool,
    /// Bytes at the head of the queue in the source's window.
    pub window_bytes: u64,
    /// Largest gap length in packets.
    pub max_gap_packets: u32,
    /// Probability that a gap packet is redelivered rather than lost.
    pub redeliver_probability: f64,
    /// Seed for the per-packet choices.
    pub seed: u64,
}

impl ContextRelease {
    /// The fate of each queued packet (sizes in bytes, head of queue first).
    ///
    /// Packets whose start lies within the first `window_bytes` form the window. Without a
    /// gap all are [`PacketFate::Forward`] (the target delivers them in order). With a gap, a
    /// run of 1..=`max_gap_packets` consecutive packets starting at a random window position
    /// is the gap (each redelivered with `redeliver_probability`, else dropped); window
    /// packets after the gap are [`PacketFate::DeliverNow`] — they had reached the UE and are
    /// released to the upper layer regardless of order ("delivered to upper layer due to
    /// context release", M2HO §3.3); window packets before the gap were already delivered in
    /// order and are also `DeliverNow`.
    pub fn fates(&self, queued_sizes: &[u32]) -> Vec<PacketFate> {
        let mut fates = vec![PacketFate::Forward; queued_sizes.len()];
        if !self.gap || queued_sizes.is_empty() {
            return fates;
        }
        let mut in_window = 0usize;
        let mut acc = 0u64;
        for s in queued_sizes {
            if acc >= self.window_bytes {
                break;
            }
            acc += *s as u64;
            in_window += 1;
        }
        if in_window == 0 {
            return fates;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let start = rng.random_range(0..in_window);
        let len = rng.random_range(1..=self.max_gap_packets.max(1)) as usize;
        let end = (start + len).min(in_window);
        for (i, f) in fates.iter_mut().enumerate().take(in_window) {
            *f = if (start..end).contains(&i) {
                if rng.random::<f64>() < self.redeliver_probability {
                    PacketFate::Redeliver
                } else {
                    PacketFate::Drop
                }
            } else {
                PacketFate::DeliverNow
            };
        }
        fates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gap_forwards_everything() {
        let cr = ContextRelease {
            gap: false,
            window_bytes: 10_000,
            max_gap_packets: 4,
            redeliver_probability: 1.0,
            seed: 1,
        };
        assert!(
            cr.fates(&[1200; 20])
                .iter()
                .all(|f| *f == PacketFate::Forward)
        );
    }

    #[test]
    fn gap_is_contiguous_within_window() {
        for seed in 0..50 {
            let cr = ContextRelease {
                gap: true,
                window_bytes: 6000,
                max_gap_packets: 3,
                redeliver_probability: 0.5,
                seed,
            };
            let f = cr.fates(&[1200; 20]);
            // Window = 5 packets; beyond it everything is forwarded.
            assert!(f[5..].iter().all(|x| *x == PacketFate::Forward));
            let gap: Vec<usize> = (0..5)
                .filter(|i| matches!(f[*i], PacketFate::Redeliver | PacketFate::Drop))
                .collect();
            assert!(!gap.is_empty() && gap.len() <= 3);
            assert!(gap.windows(2).all(|w| w[1] == w[0] + 1));
            assert_eq!(cr.fates(&[1200; 20]), f, "deterministic");
        }
    }

    #[test]
    fn slot_params_rate() {
        let p = SlotParams {
            cell: polypath_link::CellId(1),
            slot_ns: 500_000,
            total_rbs: 106,
            dl_bytes_per_rb: 100.0,
            share: 0.5,
            max_burst_slots: crate::config::DEFAULT_MAX_BURST_SLOTS,
        };
        // 0.5 · 106 · 100 B · 8 / 0.5 ms = 84.8 Mbit/s.
        assert!((p.dl_bps() - 84.8e6).abs() < 1.0);
    }
}
