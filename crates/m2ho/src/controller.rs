//! The M2HO controller: the Stable / Preparation / Smoothing state machine (Sec. 4.1) and
//! its state-dependent actions on the device's TCP packets, fed with link-layer events and
//! packets, each with the time it happened. Sans-IO: no clock, no socket, no kernel.
//
//= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.1
//# The core of M2HO is a state machine with three states: 1) Stable state, when no pending
//# handover exists; 2) Preparation state, when a handover is predicted but prior to its
//# execution; and 3) Smoothing state, after handover execution. After the packets buffered
//# before handover are delivered, the state machine goes back to the stable state.

use crate::buffer::{BufferDb, BufferEstimates, BurstDetector};
use crate::config::{Config, PredictorKind, ms_ns};
use crate::conn::{ClosedHole, Conn, ConnKey, ConnTable, Direction, seq_gt};
use crate::packet::{self, ParseError, TcpSegment, flags};
use crate::predict::{Outcome, Prediction, Predictor, Rule, is_mmwave, is_sub6};
use crate::rate::eq2_rwnd;
use polypath_link::{CellId, DownReason, LinkEventKind, MeasEvent, RadioType};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// The controller's state (Sec. 4.1).
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// No pending handover.
    Stable,
    /// A handover is predicted (or commanded) and not yet executed: windows shrink to the
    /// target cell's estimated buffer.
    Preparation,
    /// After random access on the target: duplicate ACKs are suppressed.
    Smoothing,
}

/// What to do with a packet.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Let it pass unmodified.
    Pass,
    /// Let it pass: its window was rewritten in place (old and new field values).
    Rewritten {
        /// The window field the kernel wrote.
        old: u16,
        /// The window field M2HO wrote.
        new: u16,
    },
    /// Drop it (a suppressed duplicate ACK).
    Drop,
    /// Not a TCP segment the shim understands: let it pass unmodified.
    Unparsed(ParseError),
}

/// Why the state changed.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Algorithm 1 (or the configured predictor) predicted a handover.
    Predicted,
    /// A handover command arrived without a prediction.
    Command,
    /// Fallback 1: an A1 report.
    FallbackA1,
    /// Fallback 2: no command within 2·T2.
    FallbackExpired,
    /// Random access on the target completed.
    RandomAccess,
    /// Suppression released: an ACK beyond the highest pre-handover sequence number.
    AckBeyondPreHandover,
    /// Suppression released: the first burst on the target ended.
    FirstBurstEnded,
    /// Suppression released: it lasted `max_suppression_ms`.
    SuppressionTimeout,
    /// The link went down (radio link failure) or preparation outlasted its limit.
    Abandoned,
}

/// A state transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Transition {
    /// When (ns).
    pub t_ns: u64,
    /// From.
    pub from: State,
    /// To.
    pub to: State,
    /// Why.
    pub reason: Reason,
}

/// One handover as the controller saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandoverRecord {
    /// Execution time, or random access time for one without a command (ns).
    pub t_ns: u64,
    /// The cell left.
    pub source: Option<CellId>,
    /// Its type.
    pub source_rat: Option<RadioType>,
    /// The cell joined.
    pub target: CellId,
    /// Its type.
    pub target_rat: Option<RadioType>,
    /// False for a handover without a command (radio link failure, re-establishment).
    pub commanded: bool,
    /// M2HO's Algorithm 1 predicted it (whether or not it drives the controller).
    pub predicted: bool,
    /// HO-Naive predicted it.
    pub naive_predicted: bool,
    /// Execution minus the M2HO prediction (ns), when predicted.
    pub earliness_ns: Option<u64>,
    /// Execution minus the HO-Naive prediction (ns), when predicted.
    pub naive_earliness_ns: Option<u64>,
    /// Execution minus the handover command (ns): the "No Pred." baseline of Table 5.
    pub command_earliness_ns: Option<u64>,
    /// The window budget (bytes, all connections) the preparation state used, if any.
    pub shrink_bytes: Option<u64>,
}

/// Suppression figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SuppressionStats {
    /// Smoothing states entered with suppression on.
    pub episodes: u64,
    /// Duplicate ACKs dropped.
    pub acks_suppressed: u64,
    /// Released by an ACK beyond the highest pre-handover sequence number.
    pub released_by_ack: u64,
    /// Released by the end of the first burst.
    pub released_by_burst: u64,
    /// Released by the time limit.
    pub released_by_timeout: u64,
}

/// A congestion event (three duplicate ACKs) or a shorter run of them, classified after
/// the fact from TCP timestamps (Table 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DupAckEvent {
    /// When the hole opened (ns).
    pub t_ns: u64,
    /// Within `max_suppression_ms` after a handover's random access.
    pub after_handover: bool,
    /// The data was late, not lost: the duplicate ACKs were unnecessary.
    pub reordering: bool,
    /// Duplicate ACKs the device sent.
    pub dup_acks: u32,
    /// Of those, suppressed.
    pub suppressed: u32,
}

impl DupAckEvent {
    /// At least three duplicate ACKs: what the sender would take for a loss.
    pub fn is_congestion_event(&self) -> bool {
        self.dup_acks >= 3
    }

    /// M2HO kept the sender from seeing three duplicate ACKs.
    pub fn prevented(&self) -> bool {
        self.is_congestion_event() && self.dup_acks - self.suppressed < 3
    }
}

/// Counters of packets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PacketStats {
    /// Outbound TCP segments seen.
    pub outbound: u64,
    /// Inbound TCP segments seen.
    pub inbound: u64,
    /// Packets passed unmodified because they could not be parsed, by reason.
    pub unparsed: BTreeMap<String, u64>,
    /// Windows rewritten.
    pub rewritten: u64,
    /// Duplicate ACKs seen going out.
    pub dup_acks: u64,
    /// Segments that wanted a rewrite on a connection whose window scale is unknown (its
    /// handshake was not seen): passed unmodified.
    pub unknown_scale: u64,
    /// Segments of connections beyond the tracking limit: passed unmodified.
    pub untracked: u64,
    /// Window updates M2HO made for connections stalled behind a retracted window
    /// ([`Config::reopen_stalled`]).
    pub windows_reopened: u64,
}

/// Everything the controller counts and records.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Packets.
    pub packets: PacketStats,
    /// Link events handled.
    pub link_events: u64,
    /// Measurement reports handled.
    pub reports: u64,
    /// State transitions.
    pub transitions: Vec<Transition>,
    /// M2HO's (Algorithm 1) predictions and their outcomes.
    pub predictions: Vec<Prediction>,
    /// HO-Naive's predictions and their outcomes.
    pub naive_predictions: Vec<Prediction>,
    /// Handovers.
    pub handovers: Vec<HandoverRecord>,
    /// Duplicate-ACK suppression.
    pub suppression: SuppressionStats,
    /// Hole episodes with duplicate ACKs (Table 3's material).
    pub dup_ack_events: Vec<DupAckEvent>,
    /// Buffer estimates per cell.
    pub buffers: BufferEstimates,
    /// T2 as learnt (ns).
    pub t2_ns: u64,
    /// Records dropped because a list reached `max_records`.
    pub records_dropped: u64,
}

/// A handover in progress.
#[derive(Debug, Clone)]
struct Pending {
    command_ns: Option<u64>,
    exec_ns: Option<u64>,
    source: Option<CellId>,
    target: Option<CellId>,
    target_rat: Option<RadioType>,
    predicted: Option<Prediction>,
    naive: Option<Prediction>,
}

/// The controller.
#[derive(Debug, Clone)]
pub struct Controller {
    cfg: Config,
    state: State,
    m2ho: Predictor,
    naive: Predictor,
    pending: Option<Pending>,
    serving: Option<(CellId, Option<RadioType>)>,
    lost_link: bool,
    shrink_bytes: Option<u64>,
    rate_control: bool,
    suppression_since: Option<u64>,
    smoothing_cell: Option<CellId>,
    /// The cell whose next burst clears the data forwarded to it at a handover.
    forwarded_burst_cell: Option<CellId>,
    pre_handover_high: BTreeMap<ConnKey, u32>,
    handover_ra_ns: Option<u64>,
    conns: ConnTable,
    bursts: BurstDetector,
    stats: Stats,
    /// Window updates to send, made by [`Controller::poll`].
    window_updates: Vec<Vec<u8>>,
    /// The window updates made and not yet seen leaving (connection, ACK, window field),
    /// oldest first, at most [`UPDATES_REMEMBERED`].
    updates_in_flight: VecDeque<(ConnKey, u32, u16)>,
    /// When the connections were last checked for stalls (ns).
    stalls_checked_ns: Option<u64>,
}

/// How often [`Controller::poll`] checks the connections for stalls behind a retracted
/// window (ns): every packet calls it.
const STALL_CHECK_NS: u64 = 1_000_000;

/// Most window updates remembered until they are seen leaving (one the caller could not
/// send is never seen).
const UPDATES_REMEMBERED: usize = 64;

impl Controller {
    /// A controller with `cfg` (check it with [`Config::validate`] first).
    pub fn new(cfg: Config) -> Self {
        let t2 = ms_ns(cfg.initial_t2_ms);
        Controller {
            m2ho: Predictor::new(false, t2, cfg.fallback_a1),
            naive: Predictor::new(true, t2, false),
            state: State::Stable,
            pending: None,
            serving: None,
            lost_link: false,
            shrink_bytes: None,
            rate_control: false,
            suppression_since: None,
            smoothing_cell: None,
            forwarded_burst_cell: None,
            pre_handover_high: BTreeMap::new(),
            handover_ra_ns: None,
            conns: ConnTable::new(cfg.max_connections, (cfg.idle_timeout_s * 1e9) as u64),
            bursts: BurstDetector::new(cfg.burst),
            stats: Stats {
                t2_ns: t2,
                ..Stats::default()
            },
            window_updates: Vec::new(),
            updates_in_flight: VecDeque::new(),
            stalls_checked_ns: None,
            cfg,
        }
    }

    /// The window updates made since the last call (whole IP packets, each the last ACK of
    /// its connection with a wider window): the caller sends them as the device's.
    pub fn take_window_updates(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.window_updates)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Whether rwnd rate control (Sec. 4.5) is on.
    pub fn rate_control_active(&self) -> bool {
        self.rate_control
    }

    /// The window budget of the preparation state (bytes, all connections), if one is set.
    pub fn shrink_bytes(&self) -> Option<u64> {
        self.shrink_bytes
    }

    /// Takes the buffer estimates a [`BufferDb`] remembers from earlier runs (Sec. 4.3's
    /// "local database"); what this run learns is in [`Stats::buffers`]
    /// ([`BufferEstimates::to_db`] to store it).
    pub fn remember_buffers(&mut self, db: &BufferDb) {
        self.stats.buffers.remember(db);
    }

    /// The statistics so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The connections tracked.
    pub fn connections(&self) -> &ConnTable {
        &self.conns
    }

    fn push<T>(list: &mut Vec<T>, item: T, max: usize, dropped: &mut u64) {
        if list.len() < max {
            list.push(item);
        } else {
            *dropped += 1;
        }
    }

    fn record_prediction(&mut self, p: Prediction, naive: bool) {
        let max = self.cfg.max_records;
        let list = if naive {
            &mut self.stats.naive_predictions
        } else {
            &mut self.stats.predictions
        };
        // A standing prediction is recorded when made and updated when it ends.
        if let Some(old) = list
            .iter_mut()
            .rev()
            .find(|q| q.t_ns == p.t_ns && q.outcome.is_none())
        {
            *old = p;
            return;
        }
        Self::push(list, p, max, &mut self.stats.records_dropped);
    }

    fn go(&mut self, now: u64, to: State, reason: Reason) {
        if self.state == to {
            return;
        }
        let t = Transition {
            t_ns: now,
            from: self.state,
            to,
            reason,
        };
        self.state = to;
        if to == State::Stable {
            self.shrink_bytes = None;
            self.suppression_since = None;
            self.smoothing_cell = None;
        }
        let max = self.cfg.max_records;
        Self::push(
            &mut self.stats.transitions,
            t,
            max,
            &mut self.stats.records_dropped,
        );
    }

    fn rat_of(&self, cell: CellId) -> Option<RadioType> {
        self.stats.buffers.cell_rat.get(&cell).copied()
    }

    /// The window budget for a handover to `target` of type `rat` (Sec. 4.3).
    fn shrink_for(&self, target: Option<CellId>, rat: Option<RadioType>) -> Option<u64> {
        if !self.cfg.shrink {
            return None;
        }
        self.stats
            .buffers
            .estimate(target, rat)
            .or(self.cfg.default_buffer_bytes)
    }

    /// Handles timers due by `now`: fallback 2, the suppression limit, a preparation that
    /// outlasted its limit, connections stalled behind a retracted window. Called by every
    /// other input too.
    pub fn poll(&mut self, now: u64) {
        self.reopen_stalled(now);
        if let Some(p) = self.m2ho.expire(now) {
            self.prediction_ended(p, now);
        }
        if let Some(p) = self.naive.expire(now) {
            self.record_prediction(p, true);
        }
        if self.state == State::Smoothing
            && let Some(since) = self.suppression_since
            && now >= since + ms_ns(self.cfg.max_suppression_ms)
        {
            self.stats.suppression.released_by_timeout += 1;
            self.go(now, State::Stable, Reason::SuppressionTimeout);
        }
        if self.state == State::Preparation
            && let Some(p) = &self.pending
            && let Some(cmd) = p.command_ns
            && now >= cmd + ms_ns(self.cfg.max_preparation_ms)
        {
            self.pending = None;
            self.go(now, State::Stable, Reason::Abandoned);
        }
    }

    /// Makes a window update for each connection stalled behind a retracted window
    /// ([`Config::reopen_stalled`]). The shrink (Sec. 4.3) and Eq. 2 (Sec. 4.5) move the
    /// right edge below what the sender was offered, which the paper takes as harmless: "if
    /// packet loss indeed occurs, the sending rate after handover will be decided by cwnd".
    /// A sender whose data beyond the new edge was lost (the tail of what overflowed a
    /// buffer) cannot retransmit it, nor send anything new; the device, receiving nothing,
    /// sends no ACK that could widen the window, and the sender waits for its timeout. The
    /// update (the last ACK with a wider window) moves the edge a little beyond where the
    /// sender's flight likely ended (the data received beyond the acknowledgment point plus
    /// a round trip's bytes): its next segment, or its probe of the last one, shows it the
    /// loss by SACK, as without M2HO, and no burst of a whole window follows. Should that
    /// fall short, a second update after another stall goes beyond the highest edge ever
    /// offered. Never beyond the kernel's own window; not in the preparation state, whose
    /// shrink is meant to stop the sender, nor after a radio link failure, when nothing can
    /// arrive. Once data flows, the budget rules again: a window never ends below data held
    /// beyond a hole, so the sender can repair it.
    fn reopen_stalled(&mut self, now: u64) {
        if !self.cfg.reopen_stalled
            || self.state == State::Preparation
            || self.lost_link
            || self
                .stalls_checked_ns
                .is_some_and(|t| now < t + STALL_CHECK_NS)
        {
            return;
        }
        self.stalls_checked_ns = Some(now);
        let (after_rtts, min_ns) = (self.cfg.reopen_after_rtts, ms_ns(self.cfg.reopen_min_ms));
        // The interruption of a handover is no stall: the clock starts again at its end.
        let could_receive = self.handover_ra_ns.unwrap_or(0);
        let stalled: Vec<ConnKey> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                let by_rtt = c.rtt_min_ns.map_or(0, |r| (r as f64 * after_rtts) as u64);
                c.stalled_behind_window(now, by_rtt.max(min_ns), could_receive)
            })
            .map(|(k, _)| *k)
            .collect();
        let extra = self.cfg.min_rwnd_bytes;
        for key in stalled {
            let Some(c) = self.conns.get_mut(&key) else {
                continue;
            };
            c.reopened_ns = Some(now);
            c.reopen_attempts += 1;
            let (Some((ack, kernel_window)), Some(offered), Some(last), Some(shift)) =
                (c.last_ack, c.offered_edge, c.last_edge, c.local_shift())
            else {
                continue;
            };
            let to_offered = u64::from(offered.wrapping_sub(ack));
            let held = c
                .rcv_high
                .filter(|h| seq_gt(*h, ack))
                .map_or(0, |h| u64::from(h.wrapping_sub(ack)));
            let flight_end = held
                .saturating_add(c.flight_bytes.unwrap_or(0))
                .min(to_offered);
            let first = (c.reopen_attempts == 1).then_some(flight_end);
            // Never beyond what the kernel offers: its receive buffer is the limit.
            let kernel_room = u64::from(kernel_window) << shift;
            let Some(raw) = first
                .into_iter()
                .chain([to_offered])
                .map(|beyond| {
                    let raw = (beyond + extra)
                        .min(kernel_room)
                        .div_ceil(1u64 << shift)
                        .min(u64::from(u16::MAX)) as u16;
                    (raw, ack.wrapping_add(u32::from(raw) << shift))
                })
                .find(|(_, edge)| seq_gt(*edge, last))
                .map(|(raw, _)| raw)
            else {
                continue; // the kernel's own window is no wider
            };
            let mut packet = c.last_ack_packet.clone();
            let Ok(seg) = packet::parse(&packet) else {
                continue;
            };
            if seg.ack != ack || packet::set_window(&mut packet, &seg, raw).is_none() {
                continue;
            }
            c.note_sent_ack(ack, raw, shift, Some(&packet));
            self.stats.packets.windows_reopened += 1;
            self.window_updates.push(packet);
            if self.updates_in_flight.len() == UPDATES_REMEMBERED {
                self.updates_in_flight.pop_front();
            }
            self.updates_in_flight.push_back((key, ack, raw));
        }
    }

    /// When [`Controller::poll`] next has something to do, if anything is pending.
    pub fn next_timer_ns(&self) -> Option<u64> {
        let mut t = [self.m2ho.deadline_ns(), self.naive.deadline_ns()]
            .into_iter()
            .flatten()
            .min();
        if self.state == State::Smoothing
            && let Some(since) = self.suppression_since
        {
            let s = since + ms_ns(self.cfg.max_suppression_ms);
            t = Some(t.map_or(s, |x| x.min(s)));
        }
        t
    }

    /// A prediction of M2HO's predictor ended without a handover.
    fn prediction_ended(&mut self, p: Prediction, now: u64) {
        let reason = match p.outcome {
            Some(Outcome::CancelledByA1) => Reason::FallbackA1,
            _ => Reason::FallbackExpired,
        };
        self.record_prediction(p, false);
        if self.cfg.predictor == PredictorKind::M2ho
            && self.state == State::Preparation
            && self.pending.as_ref().is_none_or(|x| x.command_ns.is_none())
        {
            self.pending = None;
            self.go(now, State::Stable, reason);
        }
    }

    fn naive_ended(&mut self, p: Prediction, now: u64) {
        self.record_prediction(p, true);
        if self.cfg.predictor == PredictorKind::Naive
            && self.state == State::Preparation
            && self.pending.as_ref().is_none_or(|x| x.command_ns.is_none())
        {
            self.pending = None;
            self.go(now, State::Stable, Reason::FallbackExpired);
        }
    }

    /// Enters the preparation state for a handover expected to `target` of type `rat`.
    fn prepare(
        &mut self,
        now: u64,
        target: Option<CellId>,
        rat: Option<RadioType>,
        reason: Reason,
    ) {
        let source = self.serving.map(|s| s.0);
        let p = self.pending.get_or_insert(Pending {
            command_ns: None,
            exec_ns: None,
            source,
            target: None,
            target_rat: None,
            predicted: None,
            naive: None,
        });
        p.target = target.or(p.target);
        p.target_rat = rat.or(p.target_rat);
        let (t, r) = (p.target, p.target_rat);
        if self.state == State::Stable {
            self.go(now, State::Preparation, reason);
        }
        if self.state == State::Preparation {
            self.shrink_bytes = self.shrink_for(t, r);
        }
    }

    /// A link-layer event at `now` (the controller's clock, not the event's `t_ns`).
    pub fn on_link_event(&mut self, now: u64, event: &LinkEventKind) {
        self.poll(now);
        self.stats.link_events += 1;
        match event {
            LinkEventKind::Measurement { serving, cells } => {
                for c in cells {
                    self.stats.buffers.learn_rat(c.cell, c.rat);
                }
                if let Some(s) = serving {
                    self.serving = Some((*s, self.rat_of(*s)));
                }
            }
            LinkEventKind::MeasurementReport {
                event,
                serving,
                neighbours,
                on_leave,
                ..
            } => {
                self.stats.reports += 1;
                self.stats.buffers.learn_rat(serving.cell, serving.rat);
                for n in neighbours {
                    self.stats.buffers.learn_rat(n.cell, n.rat);
                }
                self.serving = Some((serving.cell, Some(serving.rat)));
                let measured = neighbours.first().map(|m| (m.cell, m.rat));
                // HO-Naive: any report.
                let (new, ended) =
                    self.naive
                        .on_report(now, *event, serving.cell, serving.rat, measured);
                if let Some(p) = ended {
                    self.naive_ended(p, now);
                }
                if let Some(p) = new {
                    self.record_prediction(p.clone(), true);
                    if self.cfg.predictor == PredictorKind::Naive {
                        self.prepare(now, p.target_hint, p.target_hint_rat, Reason::Predicted);
                    }
                }
                // Algorithm 1 ignores reports of cells leaving the triggered list.
                if *on_leave && *event != MeasEvent::A1 {
                    return;
                }
                let (new, ended) =
                    self.m2ho
                        .on_report(now, *event, serving.cell, serving.rat, measured);
                if let Some(p) = ended {
                    self.prediction_ended(p, now);
                }
                if let Some(p) = new {
                    self.record_prediction(p.clone(), false);
                    if self.cfg.predictor == PredictorKind::M2ho {
                        // An A2 from mmWave names no cell: the target is a sub-6 GHz cell.
                        let rat = p.target_hint_rat.or(match p.rule {
                            Some(Rule::A2FromMmwave) => Some(RadioType::NrFr1),
                            _ => None,
                        });
                        self.prepare(now, p.target_hint, rat, Reason::Predicted);
                    }
                }
            }
            LinkEventKind::HandoverCommand {
                source,
                target,
                target_rat,
                ..
            } => {
                self.stats.buffers.learn_rat(*target, *target_rat);
                let (hit, expired) = self.m2ho.on_command(now);
                if let Some(p) = expired {
                    self.record_prediction(p, false);
                }
                let (naive_hit, naive_expired) = self.naive.on_command(now);
                if let Some(p) = naive_expired {
                    self.record_prediction(p, true);
                }
                if let Some(p) = &hit {
                    self.record_prediction(p.clone(), false);
                }
                if let Some(p) = &naive_hit {
                    self.record_prediction(p.clone(), true);
                }
                let predicted_here = match self.cfg.predictor {
                    PredictorKind::M2ho => hit.is_some(),
                    PredictorKind::Naive => naive_hit.is_some(),
                    PredictorKind::Command => false,
                };
                if self.state == State::Stable || !predicted_here {
                    // No prediction stood: react to the command (the "No Pred." way).
                    self.pending = None;
                }
                self.prepare(now, Some(*target), Some(*target_rat), Reason::Command);
                if let Some(p) = self.pending.as_mut() {
                    p.command_ns = Some(now);
                    p.source = Some(*source);
                    p.predicted = hit;
                    p.naive = naive_hit;
                }
                self.stats.t2_ns = self.m2ho.t2_ns();
            }
            LinkEventKind::HandoverExecution { source, target } => {
                // The highest sequence number of each connection before the handover
                // (Sec. 4.4's first release condition).
                self.pre_handover_high = self
                    .conns
                    .iter()
                    .filter_map(|(k, c)| c.rcv_high.map(|h| (*k, h)))
                    .collect();
                let p = self.pending.get_or_insert(Pending {
                    command_ns: None,
                    exec_ns: None,
                    source: Some(*source),
                    target: Some(*target),
                    target_rat: None,
                    predicted: None,
                    naive: None,
                });
                p.exec_ns = Some(now);
                p.target = Some(*target);
            }
            LinkEventKind::LinkDown {
                reason: DownReason::NoCoverage,
                ..
            } => {
                // Radio link failure: whatever was predicted will not happen as such.
                self.lost_link = true;
                if let Some(p) = self.m2ho.abandon(now) {
                    self.record_prediction(p, false);
                }
                if let Some(p) = self.naive.abandon(now) {
                    self.record_prediction(p, true);
                }
                self.pending = None;
                self.go(now, State::Stable, Reason::Abandoned);
            }
            LinkEventKind::RandomAccessComplete { cell } => self.random_access(now, *cell),
            LinkEventKind::RbAllocation {
                cell,
                slot,
                rbs,
                total_rbs,
                bytes,
            } => {
                if let Some(burst) = self.bursts.slot(*cell, *slot, *rbs, *total_rbs, *bytes) {
                    let forwarded = self.forwarded_burst_cell.take_if(|c| *c == *cell).is_some();
                    if !forwarded || self.cfg.learn_from_forwarded_burst {
                        self.stats.buffers.record(&burst);
                    }
                    //= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.4
                    //# Second, the suppression ends when M2HO observes the end of the first
                    //# burst period.
                    if self.state == State::Smoothing && self.smoothing_cell == Some(*cell) {
                        self.stats.suppression.released_by_burst += 1;
                        self.go(now, State::Stable, Reason::FirstBurstEnded);
                    }
                }
            }
            _ => {}
        }
    }

    fn random_access(&mut self, now: u64, cell: CellId) {
        let rat = self.rat_of(cell);
        let previous = self.serving;
        self.serving = Some((cell, rat));
        self.bursts.reset();
        let pending = self.pending.take();
        let lost_link = std::mem::replace(&mut self.lost_link, false);
        let (source, source_rat, commanded) = match &pending {
            Some(p) if p.exec_ns.is_some() => {
                let s = p.source.or(previous.map(|x| x.0));
                (s, s.and_then(|c| self.rat_of(c)), p.command_ns.is_some())
            }
            _ => {
                // Re-establishment after a radio link failure (no command, no report): a
                // handover if the cell changed. The first attach is none.
                match previous {
                    Some((prev, prat)) if prev != cell || lost_link => (Some(prev), prat, false),
                    _ => return,
                }
            }
        };
        if source == Some(cell) && !commanded && !lost_link {
            return;
        }
        let exec = pending.as_ref().and_then(|p| p.exec_ns).unwrap_or(now);
        let predicted = pending.as_ref().and_then(|p| p.predicted.clone());
        let naive = pending.as_ref().and_then(|p| p.naive.clone());
        let rec = HandoverRecord {
            t_ns: exec,
            source,
            source_rat,
            target: cell,
            target_rat: rat,
            commanded,
            predicted: predicted.is_some(),
            naive_predicted: naive.is_some(),
            earliness_ns: predicted.map(|p| exec.saturating_sub(p.t_ns)),
            naive_earliness_ns: naive.map(|p| exec.saturating_sub(p.t_ns)),
            command_earliness_ns: pending
                .as_ref()
                .and_then(|p| p.command_ns)
                .map(|c| exec.saturating_sub(c)),
            shrink_bytes: self.shrink_bytes,
        };
        let max = self.cfg.max_records;
        Self::push(
            &mut self.stats.handovers,
            rec,
            max,
            &mut self.stats.records_dropped,
        );
        //= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.5
        //# To ensure a fast cwnd convergence after an abrupt bandwidth increase, M2HO opts
        //# to control the sending rate using rwnd after a vertical handover to a sub-6GHz
        //# cell.
        let was_rate_control = self.rate_control;
        if self.cfg.rate_control {
            if source_rat.is_some_and(is_mmwave) && rat.is_some_and(is_sub6) {
                self.rate_control = true;
            } else if rat.is_some_and(is_mmwave) {
                // "When the UE hands over back to a mmWave cell, M2HO releases rwnd control".
                self.rate_control = false;
            }
        }
        self.handover_ra_ns = Some(now);
        //= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.5
        //# As the sending rate in sub-6GHz cells is throttled by rwnd, it cannot be set
        //# arbitrarily but needs to faithfully reflect the channel capacity.
        // The bytes of the last round trip came from the source cell (a mmWave cell after
        // a vertical handover): c_est starts again on the new cell. Until its first round
        // trip there is counted, Eq. 2 has no estimate, and the window stays where the
        // handover left it: the preparation state's budget for the target's buffer (Sec.
        // 4.3), or, within rate control, the source cell's Eq. 2 window if that is smaller.
        // Releasing it at once would let the sender's whole cwnd into the target's buffer
        // behind the forwarded backlog. Without either (a re-establishment with no command,
        // or no buffer estimate yet), the kernel's window stands (Sec. 4.3: "the sending
        // rate after handover will be decided by cwnd").
        let budget = self.connection_budget(now);
        let (rate_control, lambda) = (self.rate_control, self.cfg.lambda);
        for (_, c) in self.conns.iter_mut() {
            let source_window = was_rate_control
                .then(|| eq2_window(lambda, c).or(c.held_rwnd))
                .flatten();
            let hold = rate_control
                .then(|| min_some(budget, source_window))
                .flatten();
            c.restart_rate_estimate(hold);
        }
        //= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.4
        //# M2HO confirms handover execution completion by finding random access procedure
        //# messages at the link layer, and subsequently enters the smoothing state.
        // A commanded handover forwards the source's backlog, cleared by the first burst.
        self.forwarded_burst_cell = commanded.then_some(cell);
        if self.cfg.suppress_dup_acks && commanded {
            self.go(now, State::Smoothing, Reason::RandomAccess);
            self.suppression_since = Some(now);
            self.smoothing_cell = Some(cell);
            self.stats.suppression.episodes += 1;
        } else {
            self.go(now, State::Stable, Reason::RandomAccess);
        }
    }

    /// Each connection's share of the preparation state's budget, if one is set: the
    /// target cell's buffer is shared by the device's connections.
    fn connection_budget(&self, now: u64) -> Option<u64> {
        self.shrink_bytes
            .map(|b| b / self.conns.active(now, 1_000_000_000) as u64)
    }

    /// The window (bytes from `ack`) for connection `key` now, if any applies.
    fn target_window(&self, key: &ConnKey, ack: u32, now: u64) -> Option<u64> {
        let conn = self.conns.get(key);
        let mut target = self.cfg.clamp_rwnd_bytes;
        if matches!(self.state, State::Preparation | State::Smoothing) {
            target = min_some(target, self.connection_budget(now));
        }
        if self.rate_control
            && let Some(c) = conn
        {
            target = min_some(target, eq2_window(self.cfg.lambda, c).or(c.held_rwnd));
        }
        // A window M2HO no longer holds (a handover done, rate control released) widens back
        // to the kernel's as any window M2HO sets does: at once, it would let the sender
        // send its whole cwnd beyond the flight in one burst into the cell's buffer.
        if target.is_none() && conn.is_some_and(|c| c.window_narrowed) {
            target = Some(u64::MAX);
        }
        // The budget limits what is in the network. Bytes the device already holds beyond a
        // hole are out of it, and a right edge below them would only stop the sender from
        // retransmitting into the hole (a sender retransmits nothing beyond the window but
        // its first unacknowledged segment), leaving it to a timeout.
        let held_beyond_ack = conn
            .and_then(|c| c.rcv_high)
            .filter(|h| seq_gt(*h, ack))
            .map_or(0, |h| u64::from(h.wrapping_sub(ack)));
        target.map(|t| {
            conn.filter(|_| self.cfg.limit_widening)
                .and_then(|c| widening_limit(c, ack))
                .map_or(t, |most| t.min(most))
                .max(held_beyond_ack + self.cfg.min_rwnd_bytes)
        })
    }

    /// A packet going `dir` at `now`, modified in place when M2HO rewrites its window.
    pub fn on_packet(&mut self, now: u64, dir: Direction, packet: &mut [u8]) -> Verdict {
        let len = packet.len();
        self.on_capture(now, dir, packet, len)
    }

    /// The first bytes of a packet of `wire_len` bytes (an NFQUEUE copy range cut after
    /// the headers): tracked as [`Controller::on_packet`] does, never rewritten when cut.
    pub fn on_capture(
        &mut self,
        now: u64,
        dir: Direction,
        packet: &mut [u8],
        wire_len: usize,
    ) -> Verdict {
        self.poll(now);
        let whole = wire_len <= packet.len();
        let seg = match packet::parse_captured(packet, wire_len) {
            Ok(s) => s,
            Err(e) => {
                *self
                    .stats
                    .packets
                    .unparsed
                    .entry(e.to_string())
                    .or_insert(0) += 1;
                return Verdict::Unparsed(e);
            }
        };
        match dir {
            Direction::Inbound => {
                self.stats.packets.inbound += 1;
                self.inbound(now, &seg);
                Verdict::Pass
            }
            Direction::Outbound => {
                self.stats.packets.outbound += 1;
                self.outbound(now, &seg, packet, whole)
            }
        }
    }

    fn inbound(&mut self, now: u64, seg: &TcpSegment) {
        let key = ConnKey::of(seg, Direction::Inbound);
        let Some(c) = self.conns.entry(key, now) else {
            self.stats.packets.untracked += 1;
            return;
        };
        if let Some(closed) = c.on_inbound(seg, now) {
            self.closed_hole(closed);
        }
    }

    fn closed_hole(&mut self, h: ClosedHole) {
        if h.episode.dup_acks == 0 {
            return;
        }
        let window = ms_ns(self.cfg.max_suppression_ms);
        let after = self.handover_ra_ns.is_some_and(|ra| {
            h.episode.start_ns + window >= ra && h.episode.start_ns <= ra + window
        });
        let ev = DupAckEvent {
            t_ns: h.episode.start_ns,
            after_handover: after,
            reordering: h.reordering,
            dup_acks: h.episode.dup_acks,
            suppressed: h.episode.suppressed,
        };
        let max = self.cfg.max_records;
        Self::push(
            &mut self.stats.dup_ack_events,
            ev,
            max,
            &mut self.stats.records_dropped,
        );
    }

    fn outbound(&mut self, now: u64, seg: &TcpSegment, packet: &mut [u8], whole: bool) -> Verdict {
        let key = ConnKey::of(seg, Direction::Outbound);
        // A window update of ours on its way out: noted when it was made, and no duplicate
        // ACK to suppress (its window is new to the sender).
        if let Some(i) = self
            .updates_in_flight
            .iter()
            .position(|u| *u == (key, seg.ack, seg.window))
        {
            self.updates_in_flight.remove(i);
            return Verdict::Pass;
        }
        let Some(c) = self.conns.entry(key, now) else {
            self.stats.packets.untracked += 1;
            return Verdict::Pass;
        };
        let dup = c.on_outbound(seg, now);
        let shift = c.local_shift();
        if dup {
            self.stats.packets.dup_acks += 1;
        }
        if self.state == State::Smoothing && self.suppression_since.is_some() && seg.has(flags::ACK)
        {
            //= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.4
            //# First, if M2HO sees an outgoing ACK with a larger sequence number (SN) than the
            //# largest SN before handover, all data tunneled to the new cell has been
            //# delivered.
            if self
                .pre_handover_high
                .get(&key)
                .is_some_and(|high| seq_gt(seg.ack, *high))
            {
                self.stats.suppression.released_by_ack += 1;
                self.go(now, State::Stable, Reason::AckBeyondPreHandover);
            } else if dup {
                self.stats.suppression.acks_suppressed += 1;
                if let Some(h) = self.conns.entry(key, now).and_then(|c| c.hole.as_mut()) {
                    h.suppressed += 1;
                }
                return Verdict::Drop;
            }
        }
        // The window field of a SYN is never scaled (RFC 7323 2.2): left alone.
        if seg.has(flags::SYN) || !seg.has(flags::ACK) || !whole {
            return Verdict::Pass;
        }
        let verdict = match (self.target_window(&key, seg.ack, now), shift) {
            (None, _) => Verdict::Pass,
            (Some(_), None) => {
                self.stats.packets.unknown_scale += 1;
                Verdict::Pass
            }
            (Some(target), Some(shift)) => {
                // Round up so that the advertised window is never below the target.
                let raw = target.div_ceil(1u64 << shift).min(u64::from(u16::MAX)) as u16;
                // Only ever shrink what the kernel offers: the socket buffer is its limit.
                match (raw < seg.window)
                    .then(|| packet::set_window(packet, seg, raw))
                    .flatten()
                {
                    Some(old) => {
                        self.stats.packets.rewritten += 1;
                        Verdict::Rewritten { old, new: raw }
                    }
                    None => Verdict::Pass,
                }
            }
        };
        if let Some(shift) = shift
            && let Some(c) = self.conns.get_mut(&key)
        {
            let window = match verdict {
                Verdict::Rewritten { new, .. } => new,
                _ => seg.window,
            };
            c.window_narrowed = window < seg.window;
            c.note_sent_ack(
                seg.ack,
                window,
                shift,
                seg.is_pure_ack().then_some(&*packet),
            );
        }
        verdict
    }
}

/// The widest window (bytes from `ack`) M2HO may offer connection `c` in an ACK
/// acknowledging up to `ack` ([`Config::limit_widening`]): a right edge beyond the last
/// ACK's by at most twice the bytes that arrived since. A sender held to the window then
/// sends at most two segments for each that reached the device, as in slow start, and the
/// window at most doubles in a round trip; an edge moved further at once would let the
/// sender send the difference in one burst, at the speed of the wired path, into the
/// cell's buffer. (Counted by arrivals, not by how far the acknowledgment moves: the
/// segment that fills a hole moves it past everything received beyond the hole, which the
/// sender's SACK scoreboard already held as delivered.) Narrowing is not limited: the
/// shrink of Sec. 4.3 is meant to stop the sender at once. `None` before the device sent
/// an ACK.
fn widening_limit(c: &Conn, ack: u32) -> Option<u64> {
    let edge = c.last_edge?;
    let arrived = c.bytes_received.saturating_sub(c.received_at_last_edge);
    // From `ack` to the last edge (negative when `ack` is past it), then the widening.
    let to_edge = i64::from(edge.wrapping_sub(ack) as i32);
    Some(u64::try_from(to_edge + 2 * arrived as i64).unwrap_or(0))
}

/// Eq. 2's window for connection `c`, once it has counted a round trip and has an RTT.
fn eq2_window(lambda: f64, c: &Conn) -> Option<u64> {
    match (c.bytes_last_rtt, c.rtt_min_ns, c.rtt_ns) {
        (Some(bytes), Some(min), Some(rtt)) => eq2_rwnd(lambda, bytes, min, rtt),
        _ => None,
    }
}

/// The smaller of two optional limits (none where neither applies).
fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}
