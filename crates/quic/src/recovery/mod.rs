//! Loss detection and the per-path measurement machinery of RFC 9002, arranged for Multipath
//! QUIC.
//!
//! The pieces, and who owns them in a multipath connection:
//!
//! | piece | scope | what it does |
//! |---|---|---|
//! | [`RttEstimator`] | one per path | min/smoothed/latest RTT and variation (RFC 9002 §5) |
//! | [`SpaceRecovery`] | one per packet-number space | sent packets, ACK processing, loss detection (§6, Appendix A) |
//! | [`DeliveryRateEstimator`] | one per path | delivery-rate samples (draft-cheng-iccrg-delivery-rate-estimation) |
//! | [`Pacer`] | one per path | token-bucket pacing (§7.7) |
//! | [`crate::cc::CongestionController`] | one per path | congestion window (§7) |
//!
//! With the multipath extension each path has its own 1-RTT packet-number space, so a path
//! owns exactly one application-data [`SpaceRecovery`]; the Initial and Handshake spaces
//! belong to the first path (path ID 0), which therefore feeds three spaces into one
//! [`RttEstimator`], one congestion controller and one pacer.
//!
//! # Composing the loss-detection timer (RFC 9002 Appendix A.8)
//!
//! The connection owns the timer and the PTO backoff counter (`pto_count`, one per path in
//! a multipath connection: loss detection runs "on each individual path", see
//! <https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.7>).
//! Per path it needs:
//!
//! - `GetLossTimeAndSpace`: the earliest [`SpaceRecovery::loss_time`] over the path's spaces;
//!   when it fires, call [`SpaceRecovery::detect_lost`] on that space.
//! - `GetPtoTimeAndSpace`: the earliest [`SpaceRecovery::pto_time`] over the path's spaces
//!   that have [`SpaceRecovery::has_ack_eliciting_in_flight`], skipping the application
//!   data space until the handshake is confirmed. The anti-deadlock PTO of a client uses
//!   `now + pto_duration(rtt, Duration::ZERO, pto_count)` (see [`pto_duration`]).
//! - `pto_count` is incremented by the caller when a PTO fires and reset when an ACK is
//!   received (subject to the client address-validation exception), and on key discard.
//!
//! Nothing here reads a clock: every time is an [`std::time::Instant`] passed in.

use std::time::Duration;

mod delivery_rate;
mod pacing;
mod rtt;
mod sent;
mod window;

pub use delivery_rate::{DeliveryRateEstimator, DeliveryStamp, RateSample};
pub use pacing::{Pacer, PacerConfig};
pub use rtt::RttEstimator;
pub use sent::{
    AckError, AckOutcome, LossReason, LostPacket, LostPackets, SentPacket, SpaceKind,
    SpaceRecovery, SpuriousLoss,
};

//= https://www.rfc-editor.org/rfc/rfc9002#section-6.1.1
//# The RECOMMENDED initial value for the packet reordering threshold
//# (kPacketThreshold) is 3, based on best practices for TCP loss detection
//# {{?RFC5681}} {{?RFC6675}}.
/// kPacketThreshold: maximum reordering in packets before a packet is declared lost.
pub const K_PACKET_THRESHOLD: u64 = 3;

//= https://www.rfc-editor.org/rfc/rfc9002#section-6.1.2
//# The RECOMMENDED time threshold (kTimeThreshold), expressed as an RTT multiplier,
//# is 9/8.
/// Numerator of kTimeThreshold (9/8), the time reordering threshold as an RTT multiplier.
pub const K_TIME_THRESHOLD_NUMERATOR: u32 = 9;
/// Denominator of kTimeThreshold (9/8).
pub const K_TIME_THRESHOLD_DENOMINATOR: u32 = 8;

//= https://www.rfc-editor.org/rfc/rfc9002#section-6.1.2
//# The RECOMMENDED value of the timer granularity (kGranularity) is 1
//# millisecond.
/// kGranularity: the local timer granularity.
pub const K_GRANULARITY: Duration = Duration::from_millis(1);

//= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.2
//# When no previous RTT is available, the initial RTT SHOULD be set to 333 milliseconds.
/// kInitialRtt: the RTT used before an RTT sample is taken.
pub const K_INITIAL_RTT: Duration = Duration::from_millis(333);

//= https://www.rfc-editor.org/rfc/rfc9002#section-7.6.1
//# The RECOMMENDED value for kPersistentCongestionThreshold is 3, which results in
//# behavior that is approximately equivalent to a TCP sender declaring an RTO after
//# two TLPs.
/// kPersistentCongestionThreshold: the persistent congestion period as a PTO multiplier.
pub const K_PERSISTENT_CONGESTION_THRESHOLD: u32 = 3;

/// The largest PTO backoff exponent applied; larger `pto_count` values saturate here.
/// 2^24 times even a 1 ms PTO is over four hours, far beyond any idle timeout, so the
/// saturation is never observable in a live connection.
const MAX_PTO_BACKOFF_EXPONENT: u32 = 24;

/// The probe timeout period for a packet-number space with the given backoff.
///
/// `max_ack_delay` is the peer's `max_ack_delay` for the application data space and
/// [`Duration::ZERO`] for the Initial and Handshake spaces (and for the client's
/// anti-deadlock PTO); [`SpaceRecovery::pto_time`] chooses it from the space's
/// [`SpaceKind`]. `pto_count` is the caller's PTO backoff counter for the path.
///
/// The result is `(smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay) *
/// 2^pto_count`, saturating for absurdly large `pto_count`.
pub fn pto_duration(rtt: &RttEstimator, max_ack_delay: Duration, pto_count: u32) -> Duration {
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.1
    //# When an ack-eliciting packet is transmitted, the sender schedules a timer for
    //# the PTO period as follows:
    //#
    //# ~~~pseudocode
    //# PTO = smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay
    //# ~~~
    let base = rtt.pto_base().saturating_add(max_ack_delay);
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.1
    //# When a PTO timer expires, the PTO backoff MUST be increased, resulting in the
    //# PTO period being set to twice its current value.
    let factor = 1u32 << pto_count.min(MAX_PTO_BACKOFF_EXPONENT);
    base.saturating_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn pto_duration_backoff_and_max_ack_delay() {
        let now = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.update(
            now,
            Duration::ZERO,
            Duration::from_millis(100),
            Duration::ZERO,
            true,
        );
        // smoothed 100, rttvar 50 -> base 300 ms.
        assert_eq!(
            pto_duration(&rtt, Duration::ZERO, 0),
            Duration::from_millis(300)
        );
        assert_eq!(
            pto_duration(&rtt, Duration::from_millis(25), 0),
            Duration::from_millis(325)
        );
        assert_eq!(
            pto_duration(&rtt, Duration::from_millis(25), 3),
            Duration::from_millis(2600)
        );
        // Saturates instead of overflowing.
        assert_eq!(
            pto_duration(&rtt, Duration::ZERO, 1000),
            pto_duration(&rtt, Duration::ZERO, MAX_PTO_BACKOFF_EXPONENT)
        );
    }

    #[test]
    fn initial_pto_is_one_second() {
        //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.2
        //# This results in handshakes starting with a PTO of 1 second, as recommended for
        //# TCP's initial RTO; see {{Section 2 of RFC6298}}.
        let rtt = RttEstimator::new(K_INITIAL_RTT);
        assert_eq!(
            pto_duration(&rtt, Duration::ZERO, 0),
            Duration::from_millis(999)
        );
    }
}
