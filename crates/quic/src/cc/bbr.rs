//! BBR version 1 (Cardwell et al., ACM Queue 2016;
//! draft-cardwell-iccrg-bbr-congestion-control-00): see [`Bbr`].
//!
//! The draft is not vendored in the project, so the comments below cite its sections by
//! URL and paraphrase them rather than quoting.

use super::{
    CongestionController, CongestionEvent, CongestionMetrics, CongestionState, ControllerFactory,
    RecoveryPeriod, initial_window, minimum_window,
};
use crate::recovery::{RateSample, RttEstimator};
use crate::shared::PathId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

//= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.2
// Paraphrase: BBRHighGain = 2/ln(2) ~= 2.89, the smallest gain that lets the sending rate
// double every round trip; Startup uses it for both the pacing and the cwnd gain.
/// Startup's pacing and window gain, 2/ln 2.
pub const HIGH_GAIN: f64 = 2.0 / std::f64::consts::LN_2;

//= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.3
// Paraphrase: Drain uses the inverse of the Startup gain to drain the queue Startup built
// in about one round trip.
/// Drain's pacing gain, ln 2 / 2.
pub const DRAIN_GAIN: f64 = 1.0 / HIGH_GAIN;

//= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.4
// Paraphrase: ProbeBW cycles through eight phases of one min-RTT each, with pacing gains
// 5/4, 3/4 and six times 1, and uses a cwnd gain of 2.
/// ProbeBW's pacing gains, one phase per min-RTT.
pub const PACING_GAIN_CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// ProbeBW's window gain.
pub const CWND_GAIN: f64 = 2.0;

//= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.1.1.2
// Paraphrase: BtlBw is the maximum delivery rate over a window of BtlBwFilterLen = 10
// packet-timed round trips.
/// Length of the bandwidth filter, in round trips.
pub const BTL_BW_FILTER_LEN: u64 = 10;

//= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.1.2.2
// Paraphrase: RTprop is the minimum RTT over a window of RTpropFilterLen = 10 seconds.
/// Length of the min-RTT filter.
pub const RTPROP_FILTER_LEN: Duration = Duration::from_secs(10);

//= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.5
// Paraphrase: ProbeRTT holds the window at BBRMinPipeCwnd for at least ProbeRTTDuration =
// 200 ms and one round trip.
/// How long ProbeRTT holds the window at the minimum.
pub const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);

//= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.3
// Paraphrase: BBRMinPipeCwnd = 4 packets keeps enough data in flight for delayed and
// stretched ACKs to keep the pipe going.
/// The smallest window BBR uses outside loss recovery, in packets.
pub const MIN_PIPE_CWND_PACKETS: u64 = 4;

/// Startup ends after this many round trips without ...
const FULL_BW_COUNT: u32 = 3;
/// ... this much growth of the bandwidth estimate.
const FULL_BW_GROWTH: f64 = 1.25;

/// Pacing rates below this (1.2 Mbit/s, in bytes per second) use one-packet quanta.
const LOW_RATE_QUANTUM_THRESHOLD: f64 = 150_000.0;
/// Pacing rates below this (24 Mbit/s, in bytes per second) use two-packet quanta.
const HIGH_RATE_QUANTUM_THRESHOLD: f64 = 3_000_000.0;
/// The largest send quantum, bytes.
const MAX_SEND_QUANTUM: f64 = 65_536.0;

/// BBR's state machine modes (draft section 4.3).
#[derive(Debug, Copy, Clone, PartialEq, Eq)]
pub enum BbrMode {
    /// Exponential search for the bottleneck bandwidth.
    Startup,
    /// Draining the queue Startup created.
    Drain,
    /// Steady state: cycling the pacing gain around the bandwidth estimate.
    ProbeBw,
    /// Briefly cutting the data in flight to re-measure the minimum RTT.
    ProbeRtt,
}

impl BbrMode {
    /// The name used in logs (qlog `congestion_state_updated`).
    pub fn as_str(self) -> &'static str {
        match self {
            BbrMode::Startup => "bbr_startup",
            BbrMode::Drain => "bbr_drain",
            BbrMode::ProbeBw => "bbr_probe_bw",
            BbrMode::ProbeRtt => "bbr_probe_rtt",
        }
    }
}

/// BBR settings; also the factory of [`Bbr`] controllers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BbrConfig {
    /// Initial window in bytes; `None` for the RFC 9002 value ([`super::initial_window`]).
    pub initial_window: Option<u64>,
    /// Seed of the generator that picks the first ProbeBW phase; the factory mixes in the
    /// path ID so that paths do not cycle in lockstep.
    pub seed: u64,
}

impl ControllerFactory for BbrConfig {
    fn build(
        &self,
        _now: Instant,
        path_id: PathId,
        max_datagram_size: u16,
    ) -> Box<dyn CongestionController> {
        let seed = self.seed ^ u64::from(path_id.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Box::new(Bbr::new(BbrConfig { seed, ..*self }, max_datagram_size))
    }
}

/// Exact windowed maximum of the delivery rate over the last [`BTL_BW_FILTER_LEN`] rounds:
/// the largest sample of each round, in a ring indexed by round number. Like the draft's
/// filter it only moves when a sample is accepted, so application-limited stretches
/// neither lower nor expire it.
#[derive(Debug, Clone)]
struct MaxBwFilter {
    /// `(round, max rate that round)`.
    slots: [Option<(u64, u64)>; BTL_BW_FILTER_LEN as usize],
    best: u64,
}

impl MaxBwFilter {
    fn new() -> Self {
        MaxBwFilter {
            slots: [None; BTL_BW_FILTER_LEN as usize],
            best: 0,
        }
    }

    fn update(&mut self, round: u64, rate: u64) {
        let slot = &mut self.slots[(round % BTL_BW_FILTER_LEN) as usize];
        match slot {
            Some((r, v)) if *r == round => *v = (*v).max(rate),
            _ => *slot = Some((round, rate)),
        }
        self.best = self
            .slots
            .iter()
            .flatten()
            .filter(|(r, _)| r.saturating_add(BTL_BW_FILTER_LEN) > round)
            .map(|&(_, v)| v)
            .max()
            .unwrap_or(0);
    }

    fn get(&self) -> u64 {
        self.best
    }
}

/// State saved when a loss starts a recovery period, to undo a spurious one.
#[derive(Debug, Clone, Copy)]
struct Undo {
    cwnd: u64,
    prior_cwnd: u64,
    recovery: RecoveryPeriod,
    packet_conservation: bool,
}

/// The BBR version 1 congestion controller, as published: N. Cardwell, Y. Cheng,
/// C. S. Gunn, S. H. Yeganeh, V. Jacobson, "BBR: Congestion-Based Congestion Control",
/// ACM Queue 14(5), 2016, and
/// <https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00>
/// (July 2017), whose pseudocode this implementation follows.
///
/// **Version choice.** This is BBRv1, not BBRv3 (draft-ietf-ccwg-bbr): Startup paces at
/// 2/ln 2 times the bandwidth estimate and leaves after three round trips without 25 %
/// bandwidth growth, Drain paces at ln 2/2, ProbeBW cycles pacing gains
/// 5/4, 3/4, 1, 1, 1, 1, 1, 1 with a window of twice the estimated BDP, ProbeRTT runs
/// after 10 s without a new minimum RTT and holds 4 packets in flight for 200 ms and one
/// round trip; the bandwidth estimate is a windowed maximum over 10 round trips and the
/// RTT estimate a windowed minimum over 10 s. Loss does not enter the model: the only
/// response is packet conservation for one round trip after a loss followed by a restore
/// of the previous window (draft section 4.2.3.4). BBRv3's loss- and ECN-based bounds
/// (`inflight_hi`/`inflight_lo`) are *not* implemented.
///
/// # QUIC translation
///
/// - Sizes are bytes (QUIC packet sizes); "packets" in the draft become multiples of the
///   path's maximum datagram size (`mds`).
/// - Delivery-rate samples and round trips come from the path's
///   [`crate::recovery::DeliveryRateEstimator`], through the [`RateSample`] passed to
///   [`CongestionController::on_ack_batch_end`]: a round starts when `RateSample::round`
///   increases, and the draft's `packet.delivered`/`C.delivered` are
///   `RateSample::prior_delivered` and `prior_delivered + delivered`. No change to the
///   estimator was needed.
/// - The RTT sample of an ACK is `now - sent_time` of the newest packet it acknowledges
///   (the smallest over the packets of the ACK), like TCP BBR's, without subtracting the
///   peer's ACK delay.
/// - ProbeRTT's "mark the connection application-limited" (so that its low-rate samples
///   do not lower the bandwidth estimate) is done inside the controller: samples of
///   packets sent from ProbeRTT entry until the data in flight at its last ACK has been
///   delivered are treated as application-limited.
/// - TCP's fast recovery becomes QUIC's recovery period (RFC 9002 section 7.3.2): it
///   starts with the first loss of a packet sent after the previous period started and
///   ends, one round trip later, with the first acknowledgment of a packet sent after it
///   started. Packet conservation covers that round trip; at its end the window is
///   restored (`BBRRestoreCwnd`). The window never drops below RFC 9002's two-datagram
///   minimum in response to loss (the draft allows one packet).
/// - Persistent congestion (QUIC's analogue of TCP's retransmission timeout) collapses
///   the window to the minimum as RFC 9002 section 7.6.2 requires; unlike the draft's
///   RTO recovery, the previous window is not restored afterwards: BBR's own growth rule
///   rebuilds it towards the model's target.
/// - ECN-CE marks are ignored, as in BBRv1.
/// - The random choice of the first ProbeBW phase uses a ChaCha8 generator seeded from
///   [`BbrConfig::seed`] and the path ID, so runs are reproducible.
#[derive(Debug, Clone)]
pub struct Bbr {
    config: BbrConfig,
    /// max_datagram_size.
    mds: u16,
    rng: ChaCha8Rng,
    mode: BbrMode,
    /// cwnd, bytes.
    cwnd: u64,
    /// BBR.prior_cwnd.
    prior_cwnd: u64,
    /// BBR.pacing_rate, bytes per second (set through [`Bbr::set_pacing_rate`]).
    pacing_rate: f64,
    /// `pacing_rate` rounded to whole bytes per second (at least 1), as the pacer is
    /// given it.
    pacing_rate_whole: u64,
    pacing_gain: f64,
    cwnd_gain: f64,
    /// BBR.send_quantum, bytes.
    send_quantum: u64,
    btl_bw: MaxBwFilter,
    /// The latest round count seen in a rate sample.
    round: u64,
    /// BBR.RTprop; `None` (infinite) before the first RTT sample.
    rtprop: Option<Duration>,
    /// BBR.rtprop_stamp.
    rtprop_stamp: Option<Instant>,
    /// BBR.rtprop_expired, as of the latest ACK.
    rtprop_expired: bool,
    /// BBR.filled_pipe.
    filled_pipe: bool,
    /// BBR.full_bw, bytes per second.
    full_bw: u64,
    /// BBR.full_bw_count.
    full_bw_count: u32,
    /// BBR.cycle_index.
    cycle_index: usize,
    /// BBR.cycle_stamp.
    cycle_stamp: Option<Instant>,
    /// BBR.probe_rtt_done_stamp.
    probe_rtt_done_stamp: Option<Instant>,
    /// BBR.probe_rtt_round_done.
    probe_rtt_round_done: bool,
    /// Delivered count whose packets end ProbeRTT's round (the draft's reset of
    /// `next_round_delivered`).
    probe_rtt_round_mark: u64,
    /// Delivered-count range `[from, until]` of packets whose rate samples are treated as
    /// application-limited because they were sent during (or just after) ProbeRTT.
    probe_rtt_app_limited: Option<(u64, u64)>,
    /// BBR.idle_restart.
    idle_restart: bool,
    /// Bytes acknowledged so far (`C.delivered` for the initial-window rule).
    delivered: u64,
    /// The delivery-rate estimator's delivered count as of the latest sample.
    est_delivered: u64,
    recovery: RecoveryPeriod,
    /// BBR.packet_conservation.
    packet_conservation: bool,
    /// Whether the pacing rate has been initialised from the first RTT sample.
    pacing_from_rtt: bool,
    /// Bytes in flight as last known (kept current between ACKs for loss entry).
    inflight: u64,
    /// Bytes acknowledged by the ACK being processed.
    ack_acked: u64,
    /// Bytes declared lost since the last send or ACK end (the losses of the ACK being
    /// processed).
    ack_lost: u64,
    /// The ACK's RTT sample (its newest packet's).
    ack_rtt: Option<Duration>,
    /// A recovery period started with the ACK being processed.
    recovery_entered: bool,
    /// The recovery period ended with the ACK being processed.
    recovery_exited: bool,
    /// Whether the latest acknowledgment came while application-limited.
    app_limited: bool,
    /// Whether anything has been acknowledged or lost yet (for MTU updates).
    touched: bool,
    undo: Option<Undo>,
    congestion_events: u64,
    persistent_congestion_events: u64,
    spurious_undos: u64,
}

impl Bbr {
    /// A controller for a path whose maximum datagram size is `max_datagram_size`.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.1
    // Paraphrase: at initialisation the BtlBw filter is empty, RTprop is infinite with its
    // stamp at now, the round counters and Startup's full-pipe state are reset, the pacing
    // rate starts at high_gain * InitialCwnd / SRTT (1 ms without an RTT sample) and BBR
    // enters Startup.
    pub fn new(config: BbrConfig, max_datagram_size: u16) -> Self {
        let mds = max_datagram_size.max(1);
        let cwnd = config
            .initial_window
            .unwrap_or_else(|| initial_window(mds))
            .max(minimum_window(mds));
        let mut bbr = Bbr {
            config,
            mds,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            mode: BbrMode::Startup,
            cwnd,
            prior_cwnd: 0,
            //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.1
            // Paraphrase: BBRInitPacingRate uses InitialCwnd over the smoothed RTT, or over
            // 1 ms when no RTT sample exists yet.
            pacing_rate: 0.0,
            pacing_rate_whole: 1,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            send_quantum: 0,
            btl_bw: MaxBwFilter::new(),
            round: 0,
            rtprop: None,
            rtprop_stamp: None,
            rtprop_expired: false,
            filled_pipe: false,
            full_bw: 0,
            full_bw_count: 0,
            cycle_index: 0,
            cycle_stamp: None,
            probe_rtt_done_stamp: None,
            probe_rtt_round_done: false,
            probe_rtt_round_mark: 0,
            probe_rtt_app_limited: None,
            idle_restart: false,
            delivered: 0,
            est_delivered: 0,
            recovery: RecoveryPeriod::new(),
            packet_conservation: false,
            pacing_from_rtt: false,
            inflight: 0,
            ack_acked: 0,
            ack_lost: 0,
            ack_rtt: None,
            recovery_entered: false,
            recovery_exited: false,
            app_limited: false,
            touched: false,
            undo: None,
            congestion_events: 0,
            persistent_congestion_events: 0,
            spurious_undos: 0,
        };
        bbr.set_pacing_rate(HIGH_GAIN * cwnd as f64 / 0.001);
        bbr.enter_startup();
        bbr.set_send_quantum();
        bbr
    }

    /// The current mode.
    pub fn mode(&self) -> BbrMode {
        self.mode
    }

    /// BBR.BtlBw, the bottleneck bandwidth estimate in bytes per second (0 before the
    /// first delivery-rate sample).
    pub fn btl_bw(&self) -> u64 {
        self.btl_bw.get()
    }

    /// BBR.RTprop, the round-trip propagation time estimate (`None` before the first RTT
    /// sample).
    pub fn min_rtt(&self) -> Option<Duration> {
        self.rtprop
    }

    /// The estimated bandwidth-delay product `BtlBw * RTprop`, bytes.
    pub fn bdp(&self) -> Option<u64> {
        self.rtprop
            .map(|rtprop| (self.btl_bw.get() as f64 * rtprop.as_secs_f64()) as u64)
    }

    /// The current pacing gain.
    pub fn pacing_gain(&self) -> f64 {
        self.pacing_gain
    }

    /// The current window gain.
    pub fn cwnd_gain(&self) -> f64 {
        self.cwnd_gain
    }

    /// BBR.send_quantum: the burst the pacer may send at once, bytes.
    pub fn send_quantum(&self) -> u64 {
        self.send_quantum
    }

    /// Whether Startup has concluded that the pipe is full.
    pub fn filled_pipe(&self) -> bool {
        self.filled_pipe
    }

    /// The round-trip count of the latest rate sample.
    pub fn round_count(&self) -> u64 {
        self.round
    }

    fn min_pipe_cwnd(&self) -> u64 {
        MIN_PIPE_CWND_PACKETS * u64::from(self.mds)
    }

    fn minimum_window(&self) -> u64 {
        minimum_window(self.mds)
    }

    fn initial_cwnd(&self) -> u64 {
        self.config
            .initial_window
            .unwrap_or_else(|| initial_window(self.mds))
            .max(self.minimum_window())
    }

    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.2
    // Paraphrase: BBREnterStartup sets the state to Startup and both gains to
    // BBRHighGain.
    fn enter_startup(&mut self) {
        self.mode = BbrMode::Startup;
        self.pacing_gain = HIGH_GAIN;
        self.cwnd_gain = HIGH_GAIN;
    }

    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.3
    // Paraphrase: BBREnterDrain sets the pacing gain to 1/BBRHighGain and keeps the cwnd
    // gain at BBRHighGain.
    fn enter_drain(&mut self) {
        self.mode = BbrMode::Drain;
        self.pacing_gain = DRAIN_GAIN;
        self.cwnd_gain = HIGH_GAIN;
    }

    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.4.2
    // Paraphrase: on entering ProbeBW the phase is chosen uniformly at random among all
    // phases except the 3/4 one (cycle_index = len - 1 - random(0..=6), then advance), so
    // that flows desynchronise and a new flow does not start by draining.
    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = BbrMode::ProbeBw;
        self.pacing_gain = 1.0;
        self.cwnd_gain = CWND_GAIN;
        let r = self.rng.random_range(0..=6usize);
        self.cycle_index = PACING_GAIN_CYCLE.len() - 1 - r;
        self.advance_cycle_phase(now);
    }

    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.4.3
    // Paraphrase: BBRAdvanceCyclePhase stamps the phase start and moves to the next gain
    // of the cycle.
    fn advance_cycle_phase(&mut self, now: Instant) {
        self.cycle_stamp = Some(now);
        self.cycle_index = (self.cycle_index + 1) % PACING_GAIN_CYCLE.len();
        self.pacing_gain = PACING_GAIN_CYCLE[self.cycle_index];
    }

    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.5
    // Paraphrase: BBREnterProbeRTT sets both gains to 1.
    fn enter_probe_rtt(&mut self) {
        self.mode = BbrMode::ProbeRtt;
        self.pacing_gain = 1.0;
        self.cwnd_gain = 1.0;
    }

    /// BBRInflight(gain): the window that keeps `gain` BDPs plus three send quanta in
    /// flight.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.2
    // Paraphrase: the target is gain * BtlBw * RTprop plus 3 * send_quantum (to allow for
    // offload and delayed ACKs); InitialCwnd while RTprop is still infinite.
    fn inflight(&self, gain: f64) -> u64 {
        match self.rtprop {
            None => self.initial_cwnd(),
            Some(rtprop) => {
                let bdp = self.btl_bw.get() as f64 * rtprop.as_secs_f64();
                (gain * bdp) as u64 + 3 * self.send_quantum
            }
        }
    }

    /// BBRSaveCwnd: the window to restore after recovery or ProbeRTT.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.4
    // Paraphrase: outside loss recovery and ProbeRTT the current cwnd is remembered;
    // otherwise the larger of it and the previously remembered value.
    fn save_cwnd(&self) -> u64 {
        let in_recovery = self.recovery.is_active() || self.packet_conservation;
        if !in_recovery && self.mode != BbrMode::ProbeRtt {
            self.cwnd
        } else {
            self.prior_cwnd.max(self.cwnd)
        }
    }

    /// BBRRestoreCwnd.
    fn restore_cwnd(&mut self) {
        self.cwnd = self.cwnd.max(self.prior_cwnd);
    }

    /// BBRSetPacingRateWithGain.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.1
    // Paraphrase: the pacing rate is pacing_gain * BtlBw, except that before the pipe is
    // filled it is never lowered (so Startup keeps its initial rate until the estimate
    // exceeds it).
    fn set_pacing_rate_with_gain(&mut self, gain: f64) {
        let rate = gain * self.btl_bw.get() as f64;
        if rate > 0.0 && (self.filled_pipe || rate > self.pacing_rate) {
            self.set_pacing_rate(rate);
        }
    }

    /// Sets BBR.pacing_rate, and the whole bytes per second the pacer is given.
    fn set_pacing_rate(&mut self, rate: f64) {
        self.pacing_rate = rate;
        self.pacing_rate_whole = (rate.round() as u64).max(1);
    }

    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.2
    // Paraphrase: below 1.2 Mbit/s the send quantum is one packet, below 24 Mbit/s two
    // packets, and above that 1 ms worth of the pacing rate, at most 64 KB.
    fn set_send_quantum(&mut self) {
        let mds = f64::from(self.mds);
        let quantum = if self.pacing_rate < LOW_RATE_QUANTUM_THRESHOLD {
            mds
        } else if self.pacing_rate < HIGH_RATE_QUANTUM_THRESHOLD {
            2.0 * mds
        } else {
            (self.pacing_rate * 0.001).min(MAX_SEND_QUANTUM)
        };
        self.send_quantum = quantum as u64;
    }

    /// BBRUpdateBtlBw, with the round-trip bookkeeping of BBRUpdateRound. Returns whether
    /// a round started and whether the sample counts as application-limited.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.1.1.5
    // Paraphrase: a sample updates the max filter if it is not application-limited, or if
    // it is at least the current estimate (it then proves the path can do at least that).
    fn update_btl_bw(&mut self, sample: &RateSample) -> (bool, bool) {
        //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.1.1.3
        // Paraphrase: a packet-timed round trip ends when a packet sent after the previous
        // round ended is acknowledged; the delivery-rate estimator counts them and stamps
        // the count on each sample.
        let round_start = sample.round > self.round;
        self.round = self.round.max(sample.round);
        self.est_delivered = self
            .est_delivered
            .max(sample.prior_delivered.saturating_add(sample.delivered));
        let probe_rtt_limited = self
            .probe_rtt_app_limited
            .is_some_and(|(from, until)| (from..=until).contains(&sample.prior_delivered));
        let app_limited = sample.is_app_limited || probe_rtt_limited;
        if sample.delivery_rate >= self.btl_bw.get() || !app_limited {
            self.btl_bw.update(sample.round, sample.delivery_rate);
        }
        (round_start, app_limited)
    }

    /// BBRCheckCyclePhase / BBRIsNextCyclePhase.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.4.3
    // Paraphrase: a phase lasts at least RTprop. The gain-1 phases end after exactly that;
    // the probing (5/4) phase also waits until losses occur or the data in flight before
    // the ACK reaches BBRInflight(5/4); the draining (3/4) phase ends early once the data
    // in flight before the ACK is down to BBRInflight(1).
    fn check_cycle_phase(&mut self, now: Instant, prior_inflight: u64) {
        if self.mode != BbrMode::ProbeBw {
            return;
        }
        let full_length = match (self.cycle_stamp, self.rtprop) {
            (Some(stamp), Some(rtprop)) => now.saturating_duration_since(stamp) > rtprop,
            _ => true,
        };
        let next = if self.pacing_gain == 1.0 {
            full_length
        } else if self.pacing_gain > 1.0 {
            full_length && (self.ack_lost > 0 || prior_inflight >= self.inflight(self.pacing_gain))
        } else {
            full_length || prior_inflight <= self.inflight(1.0)
        };
        if next {
            self.advance_cycle_phase(now);
        }
    }

    /// BBRCheckFullPipe.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.2.2
    // Paraphrase: once per round trip (on non-application-limited samples), if BtlBw grew
    // by at least 25 % over the recorded baseline, record the new baseline; otherwise
    // count a round without growth, and after three such rounds the pipe is full.
    fn check_full_pipe(&mut self, round_start: bool, app_limited: bool) {
        if self.filled_pipe || !round_start || app_limited {
            return;
        }
        let bw = self.btl_bw.get();
        if bw as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
            self.full_bw = bw;
            self.full_bw_count = 0;
            return;
        }
        self.full_bw_count += 1;
        if self.full_bw_count >= FULL_BW_COUNT {
            self.filled_pipe = true;
        }
    }

    /// BBRCheckDrain.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.3
    // Paraphrase: Startup moves to Drain once the pipe is full; Drain moves to ProbeBW once
    // the data in flight is down to BBRInflight(1.0), one estimated BDP.
    fn check_drain(&mut self, now: Instant, bytes_in_flight: u64) {
        if self.mode == BbrMode::Startup && self.filled_pipe {
            self.enter_drain();
        }
        if self.mode == BbrMode::Drain && bytes_in_flight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }
    }

    /// BBRUpdateRTprop.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.1.2.3
    // Paraphrase: the estimate expires RTpropFilterLen after it was last set or confirmed;
    // an RTT sample replaces it if it is not larger, or if the estimate has expired.
    fn update_rtprop(&mut self, now: Instant) {
        self.rtprop_expired = self
            .rtprop_stamp
            .is_some_and(|stamp| now > stamp + RTPROP_FILTER_LEN);
        if let Some(rtt) = self.ack_rtt
            && (self.rtprop.is_none_or(|rtprop| rtt <= rtprop) || self.rtprop_expired)
        {
            self.rtprop = Some(rtt);
            self.rtprop_stamp = Some(now);
        }
    }

    /// BBRCheckProbeRTT / BBRHandleProbeRTT.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.5
    // Paraphrase: when the RTprop estimate has expired (and BBR is not restarting from
    // idle) BBR enters ProbeRTT, remembering its cwnd. In ProbeRTT, once the data in flight
    // is at most BBRMinPipeCwnd, it waits 200 ms and at least one round trip, then
    // refreshes the RTprop stamp, restores the cwnd and returns to ProbeBW (or Startup if
    // the pipe was never filled). Samples taken meanwhile are marked application-limited
    // so that the low delivery rate does not lower BtlBw.
    fn check_probe_rtt(&mut self, now: Instant, bytes_in_flight: u64, sample: Option<&RateSample>) {
        if self.mode != BbrMode::ProbeRtt && self.rtprop_expired && !self.idle_restart {
            self.enter_probe_rtt();
            self.prior_cwnd = self.save_cwnd();
            self.probe_rtt_done_stamp = None;
            self.probe_rtt_app_limited = Some((self.est_delivered, self.est_delivered));
        }
        if self.mode == BbrMode::ProbeRtt {
            // C.app_limited = C.delivered + packets_in_flight.
            let until = self.est_delivered.saturating_add(bytes_in_flight).max(1);
            if let Some((_, u)) = self.probe_rtt_app_limited.as_mut() {
                *u = until;
            }
            if self.probe_rtt_done_stamp.is_none() && bytes_in_flight <= self.min_pipe_cwnd() {
                self.probe_rtt_done_stamp = Some(now + PROBE_RTT_DURATION);
                self.probe_rtt_round_done = false;
                self.probe_rtt_round_mark = self.est_delivered;
            } else if let Some(done) = self.probe_rtt_done_stamp {
                if sample.is_some_and(|s| s.prior_delivered >= self.probe_rtt_round_mark) {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done && now > done {
                    self.rtprop_stamp = Some(now);
                    self.restore_cwnd();
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.enter_startup();
                    }
                }
            }
        }
        self.idle_restart = false;
    }

    /// BBRSetCwnd with BBRModulateCwndForRecovery and BBRModulateCwndForProbeRTT.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.6
    // Paraphrase: during packet conservation the cwnd is at least the data in flight plus
    // what this ACK delivered. Otherwise, once the pipe is full the cwnd grows by the
    // delivered data up to the target cwnd_gain * BDP + quanta; before that it grows by
    // the delivered data while below the target or while less than InitialCwnd has been
    // delivered. It is never below BBRMinPipeCwnd, except that ProbeRTT caps it there.
    fn set_cwnd(&mut self, bytes_in_flight: u64) {
        let target = self.inflight(self.cwnd_gain);
        //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.4
        // Paraphrase: on entering recovery the cwnd becomes the data still in flight plus
        // what the ACK delivered (at least one packet) and packet conservation starts;
        // on leaving recovery conservation stops and the remembered cwnd is restored.
        if self.recovery_entered {
            self.cwnd = bytes_in_flight + self.ack_acked.max(u64::from(self.mds));
        }
        if self.recovery_exited {
            self.packet_conservation = false;
            self.restore_cwnd();
        }
        if self.packet_conservation {
            self.cwnd = self.cwnd.max(bytes_in_flight + self.ack_acked);
        } else {
            if self.filled_pipe {
                self.cwnd = (self.cwnd + self.ack_acked).min(target);
            } else if self.cwnd < target || self.delivered < self.initial_cwnd() {
                self.cwnd += self.ack_acked;
            }
            self.cwnd = self.cwnd.max(self.min_pipe_cwnd());
        }
        //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.5
        // Paraphrase: in ProbeRTT the cwnd is capped at BBRMinPipeCwnd.
        if self.mode == BbrMode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.min_pipe_cwnd());
        }
        self.cwnd = self.cwnd.max(self.minimum_window());
    }
}

impl CongestionController for Bbr {
    fn name(&self) -> &str {
        "bbr"
    }

    fn on_packet_sent(&mut self, _now: Instant, bytes: u64, bytes_in_flight: u64) {
        //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.3.4.4
        // Paraphrase: when sending restarts from idle while application-limited, BBR notes
        // the restart (so ProbeRTT is not entered on its first ACK) and, in ProbeBW, paces
        // at exactly BtlBw.
        if bytes_in_flight <= bytes && self.app_limited {
            self.idle_restart = true;
            if self.mode == BbrMode::ProbeBw {
                self.set_pacing_rate_with_gain(1.0);
            }
        }
        self.inflight = bytes_in_flight;
        self.ack_lost = 0;
        self.recovery_entered = false;
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent_time: Instant,
        bytes: u64,
        app_limited: bool,
        _rtt: &RttEstimator,
    ) {
        self.touched = true;
        self.delivered = self.delivered.saturating_add(bytes);
        self.ack_acked = self.ack_acked.saturating_add(bytes);
        self.inflight = self.inflight.saturating_sub(bytes);
        self.app_limited = app_limited;
        let sample = now.saturating_duration_since(sent_time);
        self.ack_rtt = Some(self.ack_rtt.map_or(sample, |r| r.min(sample)));
        let was_active = self.recovery.is_active();
        self.recovery.on_ack(sent_time);
        if was_active && !self.recovery.is_active() {
            self.recovery_exited = true;
        }
    }

    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-3.5.3
    // Paraphrase: on every ACK BBR updates its model and state machine (BtlBw, cycle
    // phase, full pipe, drain, RTprop, ProbeRTT) and then its control parameters (pacing
    // rate, send quantum, cwnd).
    fn on_ack_batch_end(
        &mut self,
        now: Instant,
        bytes_in_flight: u64,
        rtt: &RttEstimator,
        sample: Option<&RateSample>,
    ) {
        self.touched = true;
        if !self.pacing_from_rtt && rtt.has_sample() && self.btl_bw.get() == 0 {
            // BBRInitPacingRate once an RTT sample exists (as TCP BBR does when its first
            // RTT sample arrives).
            let srtt = rtt.smoothed().as_secs_f64().max(1e-6);
            self.set_pacing_rate(HIGH_GAIN * self.cwnd as f64 / srtt);
            self.pacing_from_rtt = true;
        }
        let prior_inflight = bytes_in_flight + self.ack_acked + self.ack_lost;
        let (round_start, app_limited) = match sample {
            Some(s) => self.update_btl_bw(s),
            None => (false, false),
        };
        self.check_cycle_phase(now, prior_inflight);
        self.check_full_pipe(round_start, app_limited);
        self.check_drain(now, bytes_in_flight);
        self.update_rtprop(now);
        self.check_probe_rtt(now, bytes_in_flight, sample);

        self.set_pacing_rate_with_gain(self.pacing_gain);
        self.set_send_quantum();
        self.set_cwnd(bytes_in_flight);

        self.inflight = bytes_in_flight;
        self.ack_acked = 0;
        self.ack_lost = 0;
        self.ack_rtt = None;
        self.recovery_entered = false;
        self.recovery_exited = false;
    }

    fn on_congestion_event(&mut self, now: Instant, event: &CongestionEvent) {
        self.touched = true;
        if event.ecn {
            // BBRv1 does not react to ECN.
            return;
        }
        let lost = event.lost_bytes;
        self.inflight = self.inflight.saturating_sub(lost);
        self.ack_lost = self.ack_lost.saturating_add(lost);
        let before = self.cwnd;
        let saved = self.save_cwnd();
        //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.4
        // Paraphrase: whenever packets are marked lost, the cwnd is reduced by the lost
        // amount (here never below RFC 9002's minimum window).
        self.cwnd = self.cwnd.saturating_sub(lost).max(self.minimum_window());
        if !self.recovery.contains(event.sent_time) {
            self.undo = Some(Undo {
                cwnd: before,
                prior_cwnd: self.prior_cwnd,
                recovery: self.recovery,
                packet_conservation: self.packet_conservation,
            });
            //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.4
            // Paraphrase: on entering loss recovery BBR remembers its cwnd (as it was before
            // the losses), sets it to the data in flight plus one packet (refined when the
            // ACK's delivered data is known) and starts packet conservation.
            self.prior_cwnd = saved;
            self.recovery.enter(now);
            self.packet_conservation = true;
            self.recovery_entered = true;
            self.cwnd = (self.inflight + u64::from(self.mds)).max(self.minimum_window());
            self.congestion_events += 1;
        }
        if event.persistent_congestion {
            //= https://www.rfc-editor.org/rfc/rfc9002#section-7.6.2
            //# When persistent congestion is declared, the sender's congestion window MUST be
            //# reduced to the minimum congestion window (kMinimumWindow), similar to a TCP
            //# sender's response on an RTO {{RFC5681}}.
            self.cwnd = self.minimum_window();
            self.recovery.reset();
            self.packet_conservation = false;
            self.recovery_entered = false;
            self.prior_cwnd = 0;
            self.undo = None;
            self.persistent_congestion_events += 1;
        }
    }

    fn on_spurious_congestion(&mut self, _now: Instant) {
        if let Some(undo) = self.undo.take() {
            //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.3.4
            // Paraphrase: when recovery is undone, BBR restores the best known cwnd.
            self.cwnd = self.cwnd.max(undo.cwnd);
            self.prior_cwnd = undo.prior_cwnd;
            self.recovery = undo.recovery;
            self.packet_conservation = undo.packet_conservation;
            self.spurious_undos += 1;
        }
    }

    fn on_mtu_update(&mut self, max_datagram_size: u16) {
        let old_initial = self.initial_cwnd();
        self.mds = max_datagram_size.max(1);
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.2
        //# If the maximum datagram size changes during the connection, the initial
        //# congestion window SHOULD be recalculated with the new size.
        if !self.touched && self.cwnd == old_initial {
            self.cwnd = self.initial_cwnd();
            if !self.pacing_from_rtt {
                self.set_pacing_rate(HIGH_GAIN * self.cwnd as f64 / 0.001);
            }
        }
        self.cwnd = self.cwnd.max(self.minimum_window());
        self.set_send_quantum();
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn ssthresh(&self) -> Option<u64> {
        None
    }

    fn in_slow_start(&self) -> bool {
        self.mode == BbrMode::Startup
    }

    fn pacing_rate(&self) -> Option<u64> {
        Some(self.pacing_rate_whole)
    }

    //= https://datatracker.ietf.org/doc/html/draft-cardwell-iccrg-bbr-congestion-control-00#section-4.2.2
    // Paraphrase: BBR chooses the maximum size of the aggregates a sender schedules and
    // transmits together, to amortize per-packet costs.
    fn send_quantum(&self) -> Option<u64> {
        Some(self.send_quantum)
    }

    /// Sets the window to `bytes` (at least the minimum window). BBR's window follows its
    /// model: a value above the target `cwnd_gain * BDP + quanta` is brought back to the
    /// target by the next ACK once the pipe is full, and a value below it grows back by
    /// the acknowledged bytes per ACK. The pacing rate, which governs BBR's sending rate,
    /// is not changed.
    fn set_window(&mut self, bytes: u64) {
        self.cwnd = bytes.max(self.minimum_window());
    }

    fn metrics(&self) -> CongestionMetrics {
        CongestionMetrics {
            window: self.cwnd,
            ssthresh: None,
            state: CongestionState::Other(self.mode.as_str()),
            pacing_rate: self.pacing_rate(),
            congestion_events: self.congestion_events,
            persistent_congestion_events: self.persistent_congestion_events,
            spurious_undos: self.spurious_undos,
            extra: vec![
                ("btl_bw", self.btl_bw.get() as f64),
                (
                    "min_rtt_ms",
                    self.rtprop.map_or(f64::INFINITY, |r| r.as_secs_f64() * 1e3),
                ),
                ("pacing_gain", self.pacing_gain),
                ("cwnd_gain", self.cwnd_gain),
                ("round", self.round as f64),
                ("full_bw", self.full_bw as f64),
                ("send_quantum", self.send_quantum as f64),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::test_net::{Bottleneck, Net, PathSpec};

    const MDS: u16 = 1200;
    const M: u64 = MDS as u64;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// One BBR sender over a bottleneck of `rate` bytes/s, propagation RTT `rtt`.
    fn net(rate: u64, rtt: Duration, buffer: Option<u64>, loss: f64) -> Net<Bbr> {
        let mut net = Net::with_bottlenecks(vec![Bottleneck::new(Some(rate), buffer, loss, 1)]);
        net.add_path(
            Box::new(Bbr::new(BbrConfig::default(), MDS)),
            PathSpec::lossy(rtt, 0),
        );
        net
    }

    /// The RTT of a packet through an empty queue: propagation plus serialisation.
    fn base_rtt(rate: u64, rtt: Duration) -> Duration {
        rtt + Duration::from_nanos((M * 1_000_000_000).div_ceil(rate))
    }

    #[test]
    fn startup_drain_probe_bw_on_a_clean_link() {
        // 100 Mbit/s, 40 ms: a BDP of 500 kB (about 417 packets), unlimited buffer.
        let rate = 12_500_000u64;
        let mut net = net(rate, ms(40), None, 0.0);
        let t0 = net.now;
        let true_rtt = base_rtt(rate, ms(40));
        let true_bdp = rate as f64 * true_rtt.as_secs_f64();

        let mut startup_bw_per_round: Vec<u64> = Vec::new();
        let mut last_round = 0;
        let mut startup_end: Option<(Instant, u64)> = None; // (time, round)
        let mut drain_end: Option<(Instant, u64)> = None; // (time, bytes in flight)
        let mut gains: Vec<(Instant, f64)> = Vec::new();
        let mut max_rtt_in_probe_bw = Duration::ZERO;
        let mut delivered_at_1s = None;
        let mut entered_probe_rtt = false;
        net.run_until(t0 + Duration::from_secs(3), |net, _| {
            let p = &net.paths[0];
            let cc = &*p.cc;
            entered_probe_rtt |= cc.mode() == BbrMode::ProbeRtt;
            match cc.mode() {
                BbrMode::Startup => {
                    // The pacing rate is 2/ln2 times the bandwidth estimate once that
                    // exceeds the initial rate (it is never lowered in Startup).
                    let paced = HIGH_GAIN * cc.btl_bw() as f64;
                    let rate = cc.pacing_rate().unwrap() as f64;
                    assert!(rate >= paced - 1.0, "{rate} < {paced}");
                    if cc.round_count() != last_round && cc.btl_bw() > 0 {
                        last_round = cc.round_count();
                        startup_bw_per_round.push(cc.btl_bw());
                    }
                }
                BbrMode::Drain => {
                    if startup_end.is_none() {
                        startup_end = Some((net.now, cc.round_count()));
                        assert!(cc.filled_pipe());
                        assert_eq!(cc.pacing_gain(), DRAIN_GAIN);
                    }
                }
                BbrMode::ProbeBw => {
                    if drain_end.is_none() {
                        drain_end = Some((net.now, p.bytes_in_flight));
                    }
                    if gains.last().is_none_or(|&(_, g)| g != cc.pacing_gain()) {
                        gains.push((net.now, cc.pacing_gain()));
                    }
                    if net.now > t0 + Duration::from_secs(1) {
                        max_rtt_in_probe_bw = max_rtt_in_probe_bw.max(p.last_rtt_sample);
                        delivered_at_1s.get_or_insert(p.delivered);
                    }
                }
                BbrMode::ProbeRtt => {}
            }
        });
        let p = &net.paths[0];
        let cc = &*p.cc;
        assert!(!entered_probe_rtt);

        // Startup: the bandwidth estimate roughly doubles every round trip while far from
        // the link rate (the 2/ln 2 gain is what lets an ACK-clocked rate double per
        // round), then plateaus at the link rate. The first two rounds are skipped: their
        // samples cover only the first packet and the initial window.
        let growth: Vec<f64> = startup_bw_per_round
            .windows(2)
            .skip(2)
            .filter(|w| (w[1] as f64) < 0.4 * rate as f64)
            .map(|w| w[1] as f64 / w[0] as f64)
            .collect();
        assert!(growth.len() >= 3, "{startup_bw_per_round:?}");
        let mean = growth
            .iter()
            .product::<f64>()
            .powf(1.0 / growth.len() as f64);
        assert!(
            growth.iter().all(|&g| (1.5..=3.0).contains(&g)) && (1.8..=2.3).contains(&mean),
            "{growth:?} {startup_bw_per_round:?}"
        );
        // Startup ended three rounds after the estimate stopped growing by 25 %.
        let (_, exit_round) = startup_end.expect("left Startup");
        let plateau_round = startup_bw_per_round
            .iter()
            .position(|&bw| bw as f64 >= 0.8 * rate as f64)
            .expect("reached the link rate") as u64;
        let first_round = exit_round - startup_bw_per_round.len() as u64;
        let rounds_at_plateau = exit_round - (first_round + plateau_round);
        assert!(
            (3..=4).contains(&rounds_at_plateau),
            "{rounds_at_plateau} {startup_bw_per_round:?}"
        );
        // The bandwidth estimate is the link rate.
        let bw = cc.btl_bw() as f64;
        assert!((bw - rate as f64).abs() < 0.02 * rate as f64, "{bw}");
        assert_eq!(cc.min_rtt(), Some(true_rtt));

        // Drain ended with about one BDP in flight.
        let (_, inflight) = drain_end.expect("reached ProbeBW");
        let quanta = 3.0 * 2.0 * M as f64;
        assert!(
            (inflight as f64) <= 1.02 * true_bdp + quanta && (inflight as f64) > 0.7 * true_bdp,
            "{inflight} vs BDP {true_bdp}"
        );

        // ProbeBW cycles 5/4, 3/4, then six phases of 1: the 1.0 stretches last six
        // min-RTTs, the probing phase at least one min-RTT, the draining one at most one.
        let rtprop = true_rtt.as_secs_f64();
        let mut seen = [0usize; 3];
        for w in gains.windows(3) {
            let (t1, g) = w[1];
            let (t2, _) = w[2];
            let (prev, next) = (w[0].1, w[2].1);
            let len = (t2 - t1).as_secs_f64() / rtprop;
            if g == 1.25 {
                assert_eq!((prev, next), (1.0, 0.75));
                assert!((1.0..=3.0).contains(&len), "probe phase {len}");
                seen[0] += 1;
            } else if g == 0.75 {
                assert_eq!((prev, next), (1.25, 1.0));
                assert!(len <= 1.05, "drain phase {len}");
                seen[1] += 1;
            } else {
                assert_eq!(g, 1.0);
                assert_eq!((prev, next), (0.75, 1.25));
                assert!((6.0..=6.3).contains(&len), "cruise {len}");
                seen[2] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n >= 3), "{seen:?} {gains:?}");

        // Steady state: the window is twice the BDP plus three quanta, the link is
        // nearly fully used, and the queue stays small.
        assert_eq!(cc.mode(), BbrMode::ProbeBw);
        let target = CWND_GAIN * cc.btl_bw() as f64 * rtprop + 3.0 * cc.send_quantum() as f64;
        assert!(
            (cc.window() as f64 - target).abs() <= M as f64,
            "{} vs {target}",
            cc.window()
        );
        let ratio = cc.window() as f64 / true_bdp;
        assert!((2.0..=2.15).contains(&ratio), "cwnd/BDP = {ratio}");
        let used = (p.delivered - delivered_at_1s.unwrap()) as f64 / (rate as f64 * 2.0);
        assert!(used >= 0.95, "utilisation {used}");
        assert!(
            max_rtt_in_probe_bw.as_secs_f64() <= 1.5 * rtprop,
            "{max_rtt_in_probe_bw:?}"
        );
    }

    #[test]
    fn probe_rtt_after_ten_seconds_without_a_new_min_rtt() {
        // 20 Mbit/s, 30 ms; at 2 s the path's delay grows to 45 ms for good. (Even
        // without that change, the three send quanta BBR keeps above one BDP leave a
        // small standing queue in ProbeBW, so the minimum is not seen again after
        // Startup/Drain and ProbeRTT is due 10 s later.)
        let rate = 2_500_000u64;
        let mut net = net(rate, ms(30), None, 0.0);
        let t0 = net.now;
        let mut last_min_sample = t0;
        net.run_until(t0 + Duration::from_secs(2), |net, _| {
            let p = &net.paths[0];
            if Some(p.last_rtt_sample) == p.cc.min_rtt() {
                last_min_sample = net.now;
            }
        });
        assert_eq!(net.paths[0].cc.mode(), BbrMode::ProbeBw);
        net.paths[0].spec.base_rtt = ms(45);

        let mut entered: Option<Instant> = None;
        let mut exited: Option<Instant> = None;
        let mut min_inflight = u64::MAX;
        let mut max_cwnd_in_probe_rtt = 0;
        let mut gain_in_probe_rtt = None;
        let mut delivered_at_13s = None;
        net.run_until(t0 + Duration::from_secs(14), |net, _| {
            let p = &net.paths[0];
            let cc = &*p.cc;
            if cc.mode() == BbrMode::ProbeRtt {
                if entered.is_none() {
                    entered = Some(net.now);
                    // The expired estimate was replaced by the current RTT.
                    assert!(cc.min_rtt().unwrap() >= ms(45));
                }
                min_inflight = min_inflight.min(p.bytes_in_flight);
                max_cwnd_in_probe_rtt = max_cwnd_in_probe_rtt.max(cc.window());
                gain_in_probe_rtt = Some((cc.pacing_gain(), cc.cwnd_gain()));
            } else if entered.is_some() && exited.is_none() {
                exited = Some(net.now);
                assert_eq!(cc.mode(), BbrMode::ProbeBw);
            }
            if net.now >= t0 + Duration::from_secs(13) {
                delivered_at_13s.get_or_insert(p.delivered);
            }
        });
        let entered = entered.expect("entered ProbeRTT");
        let exited = exited.expect("left ProbeRTT");
        // Exactly when the 10 s old minimum expired (at the first ACK after).
        let since = entered - last_min_sample;
        assert!(
            since > RTPROP_FILTER_LEN && since < RTPROP_FILTER_LEN + ms(5),
            "{since:?}"
        );
        // At most four packets, for at least 200 ms plus a round trip.
        assert_eq!(max_cwnd_in_probe_rtt, MIN_PIPE_CWND_PACKETS * M);
        assert!(min_inflight <= MIN_PIPE_CWND_PACKETS * M);
        assert_eq!(gain_in_probe_rtt, Some((1.0, 1.0)));
        let held = exited - entered;
        assert!(held >= PROBE_RTT_DURATION + ms(45), "{held:?}");
        assert!(held <= PROBE_RTT_DURATION + ms(200), "{held:?}");
        // Back to full speed with the new RTT and a window of about two BDPs.
        let p = &net.paths[0];
        let new_rtt = base_rtt(rate, ms(45));
        assert_eq!(p.cc.min_rtt(), Some(new_rtt));
        let used = (p.delivered - delivered_at_13s.unwrap()) as f64 / rate as f64;
        assert!(used >= 0.93, "utilisation {used}");
        let bdp = rate as f64 * new_rtt.as_secs_f64();
        let ratio = p.cc.window() as f64 / bdp;
        assert!((2.0..=2.2).contains(&ratio), "{ratio}");
    }

    /// BBRv1 does not treat loss as a congestion signal: with 1 % random loss it still
    /// fills the link, where a loss-based controller would collapse.
    #[test]
    fn random_loss_barely_matters() {
        let rate = 1_250_000u64;
        let mut net = net(rate, ms(40), Some(100 * M), 0.01);
        net.run_for(Duration::from_secs(2));
        let before = net.paths[0].delivered;
        net.run_for(Duration::from_secs(5));
        let p = &net.paths[0];
        let goodput = (p.delivered - before) as f64 / 5.0;
        assert!(goodput >= 0.85 * rate as f64, "{goodput}");
        assert!(p.lost > 0);
        assert!(p.cc.metrics().congestion_events > 10);
    }

    /// Drives the controller to steady state, then feeds one loss by hand.
    #[test]
    fn loss_starts_packet_conservation_then_restores() {
        let rate = 1_250_000u64;
        let mut net = net(rate, ms(40), None, 0.0);
        net.run_for(Duration::from_secs(2));
        let now = net.now;
        let p = &mut net.paths[0];
        let rtt = p.rtt.clone();
        let cc = &mut *p.cc;
        assert_eq!(cc.mode(), BbrMode::ProbeBw);
        let cwnd = cc.window();
        let inflight = 40 * M;
        // An ACK acknowledging two packets reveals the loss of three: the window becomes
        // what is still in flight plus what the ACK delivered.
        cc.on_packet_sent(now - ms(30), M, inflight + 5 * M);
        cc.on_congestion_event(
            now,
            &CongestionEvent {
                sent_time: now - ms(50),
                lost_bytes: 3 * M,
                persistent_congestion: false,
                ecn: false,
            },
        );
        cc.on_ack(now, now - ms(45), M, false, &rtt);
        cc.on_ack(now, now - ms(44), M, false, &rtt);
        cc.on_ack_batch_end(now, inflight, &rtt, None);
        assert_eq!(cc.window(), inflight + 2 * M);
        assert_eq!(cc.metrics().congestion_events, 1);
        // Conservation: each ACK lets out what it delivered, no more.
        cc.on_ack(now + ms(1), now - ms(43), M, false, &rtt);
        cc.on_ack_batch_end(now + ms(1), inflight - M, &rtt, None);
        assert_eq!(cc.window(), inflight + 2 * M);
        // Losses of packets sent before recovery started do not start a new episode.
        cc.on_congestion_event(
            now + ms(2),
            &CongestionEvent {
                sent_time: now - ms(42),
                lost_bytes: M,
                persistent_congestion: false,
                ecn: false,
            },
        );
        cc.on_ack_batch_end(now + ms(2), inflight - 2 * M, &rtt, None);
        assert_eq!(cc.metrics().congestion_events, 1);
        assert_eq!(cc.window(), inflight + M);
        // A packet sent after recovery started is acknowledged: the window is restored
        // (capped at the model's target).
        cc.on_ack(now + ms(45), now + ms(3), M, false, &rtt);
        cc.on_ack_batch_end(now + ms(45), inflight - 3 * M, &rtt, None);
        assert_eq!(cc.window(), cwnd);
        // ECN is ignored.
        cc.on_congestion_event(
            now + ms(50),
            &CongestionEvent {
                sent_time: now + ms(49),
                lost_bytes: 0,
                persistent_congestion: false,
                ecn: true,
            },
        );
        assert_eq!(cc.window(), cwnd);
        assert_eq!(cc.metrics().congestion_events, 1);
    }

    #[test]
    fn spurious_loss_is_undone_and_persistent_congestion_collapses() {
        let rate = 1_250_000u64;
        let mut net = net(rate, ms(40), None, 0.0);
        net.run_for(Duration::from_secs(2));
        let now = net.now;
        let cc = &mut *net.paths[0].cc;
        let cwnd = cc.window();
        let loss = |persistent| CongestionEvent {
            sent_time: now - ms(10),
            lost_bytes: 2 * M,
            persistent_congestion: persistent,
            ecn: false,
        };
        cc.on_packet_sent(now - ms(1), M, 10 * M);
        cc.on_congestion_event(now, &loss(false));
        assert!(cc.window() < cwnd);
        cc.on_spurious_congestion(now + ms(1));
        assert_eq!(cc.window(), cwnd);
        assert_eq!(cc.metrics().spurious_undos, 1);
        cc.on_congestion_event(now + ms(100), &loss(true));
        assert_eq!(cc.window(), 2 * M);
        assert_eq!(cc.metrics().persistent_congestion_events, 1);
        // The model survives; the window regrows by BBR's own rule (no restore).
        assert!(cc.btl_bw() > 0);
        let rtt = net.paths[0].rtt.clone();
        let cc = &mut *net.paths[0].cc;
        cc.on_ack(now + ms(150), now + ms(110), M, false, &rtt);
        cc.on_ack_batch_end(now + ms(150), M, &rtt, None);
        assert_eq!(cc.window(), MIN_PIPE_CWND_PACKETS * M);
    }

    #[test]
    fn bandwidth_filter_is_a_ten_round_window_max() {
        let mut f = MaxBwFilter::new();
        f.update(1, 100);
        f.update(1, 80);
        assert_eq!(f.get(), 100);
        for r in 2..=10 {
            f.update(r, 50);
        }
        assert_eq!(f.get(), 100);
        // Round 11: round 1 leaves the window.
        f.update(11, 60);
        assert_eq!(f.get(), 60);
        f.update(30, 10);
        assert_eq!(f.get(), 10);
    }

    #[test]
    fn probe_bw_never_starts_in_the_draining_phase() {
        let mut bbr = Bbr::new(
            BbrConfig {
                seed: 7,
                ..BbrConfig::default()
            },
            MDS,
        );
        let now = Instant::now();
        let mut starts = [0usize; 8];
        for _ in 0..700 {
            bbr.enter_probe_bw(now);
            starts[bbr.cycle_index] += 1;
        }
        assert_eq!(starts[1], 0);
        assert!(
            starts.iter().enumerate().all(|(i, &n)| i == 1 || n > 50),
            "{starts:?}"
        );
        // Same seed, same choices.
        let mut again = Bbr::new(
            BbrConfig {
                seed: 7,
                ..BbrConfig::default()
            },
            MDS,
        );
        let mut first = Bbr::new(
            BbrConfig {
                seed: 7,
                ..BbrConfig::default()
            },
            MDS,
        );
        for _ in 0..20 {
            again.enter_probe_bw(now);
            first.enter_probe_bw(now);
            assert_eq!(again.cycle_index, first.cycle_index);
        }
    }

    #[test]
    fn initial_state_set_window_mtu_and_factory() {
        let f = BbrConfig::default();
        let mut cc = f.build(Instant::now(), PathId(2), MDS);
        assert_eq!(cc.name(), "bbr");
        assert_eq!(cc.window(), 12_000);
        assert!(cc.in_slow_start());
        assert_eq!(cc.ssthresh(), None);
        // Before an RTT sample: high gain times the initial window per millisecond.
        let expected = (HIGH_GAIN * 12_000.0 / 0.001).round() as u64;
        assert_eq!(cc.pacing_rate(), Some(expected));
        assert_eq!(cc.metrics().state.as_str(), "bbr_startup");
        cc.on_mtu_update(1452);
        assert_eq!(cc.window(), 14_520);
        cc.set_window(100);
        assert_eq!(cc.window(), 2 * 1452);
        cc.set_window(1_000_000);
        assert_eq!(cc.window(), 1_000_000);
        assert!((HIGH_GAIN - 2.885_390_081_777_927).abs() < 1e-12);
        assert!((DRAIN_GAIN * HIGH_GAIN - 1.0).abs() < 1e-12);
    }
}
