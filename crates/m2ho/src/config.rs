//! M2HO's parameters, with the paper's values as defaults.

use crate::buffer::BurstThresholds;
use serde::{Deserialize, Serialize};

/// Which handover predictor drives the controller.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PredictorKind {
    /// M2HO's Algorithm 1 with its fallbacks (Sec. 4.2).
    #[default]
    M2ho,
    /// HO-Naive: any measurement report predicts a handover (Sec. 6.1's baseline).
    Naive,
    /// No prediction: react to the handover command ("No Pred." of Table 5).
    Command,
}

/// Every parameter of the controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The predictor that starts the preparation state.
    pub predictor: PredictorKind,
    /// T2 before any handover taught it, ms: the mean report-to-command interval M2HO
    /// measured (178.9 ms report to execution less 32.7 ms command to execution, Sec. 4.2
    /// and 4.3).
    pub initial_t2_ms: f64,
    /// Fallback 1: an A1 report cancels a prediction (Sec. 4.2).
    pub fallback_a1: bool,
    /// Preemptive window shrinking in the preparation state (Sec. 4.3).
    pub shrink: bool,
    /// Burst thresholds of the buffer estimation (Sec. 4.3, footnote 3).
    pub burst: BurstThresholds,
    /// Learn a cell's buffer from its first burst after a commanded handover too. That
    /// burst clears the data the source forwarded (Sec. 4.4), which the target holds
    /// whatever its own buffer, so it is no lower bound of that buffer; the paper updates
    /// the estimate "in every burst" (Sec. 4.3). Default `false`: the first burst only
    /// releases the suppression.
    pub learn_from_forwarded_burst: bool,
    /// The buffer assumed for a target of which nothing is known (no burst seen on any cell
    /// of its type), bytes; `None`: no shrinking then. Not from the paper, which starts
    /// from a history of cells.
    pub default_buffer_bytes: Option<u64>,
    /// Duplicate-ACK suppression in the smoothing state (Sec. 4.4).
    pub suppress_dup_acks: bool,
    /// Longest suppression, ms, should neither release condition come (a guard against the
    /// sender's retransmission timeout; not from the paper).
    pub max_suppression_ms: f64,
    /// rwnd rate control after a vertical handover to sub-6 GHz (Sec. 4.5).
    pub rate_control: bool,
    /// λ of Eq. 2 (Sec. 4.5: 2).
    pub lambda: f64,
    /// Smallest window M2HO advertises, bytes (never a zero window).
    pub min_rwnd_bytes: u64,
    /// Advertise at most this window on every connection, whatever the state (for tests
    /// and experiments; `None` in normal operation).
    pub clamp_rwnd_bytes: Option<u64>,
    /// Widen a window M2HO sets by at most twice the bytes that arrived since the last ACK
    /// (not from the paper): its right edge then moves with the data delivered, and a
    /// sender held to it never gets a wider window in one step to send in one burst. A
    /// window M2HO stops setting (a handover done, an A1, rate control released) widens
    /// back to the kernel's the same way.
    pub limit_widening: bool,
    /// Reopen a window that stalls its sender (not from the paper): after a retraction
    /// (the shrink of Sec. 4.3, Eq. 2 of Sec. 4.5), a sender whose data beyond the new
    /// right edge was lost can retransmit nothing beyond the window but its first
    /// unacknowledged segment, and the device, receiving nothing, sends no ACK: the sender
    /// waits for its retransmission timeout. With this on, M2HO then sends a window update.
    pub reopen_stalled: bool,
    /// Round trips (the device's smallest RTT sample) without data after which a connection
    /// behind a retracted window counts as stalled.
    pub reopen_after_rtts: f64,
    /// The shortest stall, ms (and the stall without an RTT sample).
    pub reopen_min_ms: f64,
    /// Longest the preparation state waits for the handover's execution after its command,
    /// ms, before giving up (not from the paper).
    pub max_preparation_ms: f64,
    /// Most connections tracked at once.
    pub max_connections: usize,
    /// Connections idle this long are forgotten, s.
    pub idle_timeout_s: f64,
    /// Records kept in the statistics' lists (transitions, predictions, handovers).
    pub max_records: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            predictor: PredictorKind::M2ho,
            initial_t2_ms: 146.2,
            fallback_a1: true,
            shrink: true,
            burst: BurstThresholds::default(),
            learn_from_forwarded_burst: false,
            default_buffer_bytes: None,
            suppress_dup_acks: true,
            max_suppression_ms: 200.0,
            rate_control: true,
            lambda: 2.0,
            min_rwnd_bytes: 2 * 1448,
            clamp_rwnd_bytes: None,
            limit_widening: true,
            reopen_stalled: true,
            reopen_after_rtts: 3.0,
            reopen_min_ms: 150.0,
            max_preparation_ms: 1000.0,
            max_connections: 4096,
            idle_timeout_s: 120.0,
            max_records: 100_000,
        }
    }
}

/// Milliseconds to nanoseconds (negative and non-finite values are zero).
pub(crate) fn ms_ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6) as u64
    } else {
        0
    }
}

impl Config {
    /// Checks values that would make the controller meaningless; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{name}: must be a positive number, not {v}"))
            }
        };
        positive("initial_t2_ms", self.initial_t2_ms)?;
        positive("max_suppression_ms", self.max_suppression_ms)?;
        positive("lambda", self.lambda)?;
        positive("max_preparation_ms", self.max_preparation_ms)?;
        positive("reopen_after_rtts", self.reopen_after_rtts)?;
        positive("reopen_min_ms", self.reopen_min_ms)?;
        positive("idle_timeout_s", self.idle_timeout_s)?;
        let b = self.burst;
        if !(0.0..=1.0).contains(&b.partial)
            || !(0.0..=1.0).contains(&b.full)
            || b.partial >= b.full
        {
            return Err(format!(
                "burst: need 0 <= partial < full <= 1, not partial {} full {}",
                b.partial, b.full
            ));
        }
        if self.max_connections == 0 {
            return Err("max_connections: must be at least 1".into());
        }
        Ok(())
    }
}
