//! Round-trip time estimation (RFC 9002 section 5), one estimator per path.

use super::{
    K_GRANULARITY, K_PERSISTENT_CONGESTION_THRESHOLD, K_TIME_THRESHOLD_DENOMINATOR,
    K_TIME_THRESHOLD_NUMERATOR,
};
use std::time::{Duration, Instant};

/// The RTT estimator of one network path: min_rtt, smoothed_rtt, rttvar and latest_rtt as
/// defined in RFC 9002 section 5 and Appendix A.
///
//= https://www.rfc-editor.org/rfc/rfc9002#section-5
//# An endpoint computes the
//# following three values for each path: the minimum value over a period of time
//# (min_rtt), an exponentially weighted moving average (smoothed_rtt), and the mean
//# deviation (referred to as "variation" in the rest of this document) in the
//# observed RTT samples (rttvar).
///
/// In a multipath connection every path has its own estimator. PATH_ACK frames may arrive
/// on another path than the one that carried the acknowledged packets; samples are fed to
/// the estimator of the path that *sent* the packets, which makes the estimate "the sum of
/// two one-way delays" as described in
/// <https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-5.4>.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    /// The RTT assumed before the first sample (kInitialRtt or a path-specific value).
    initial: Duration,
    /// latest_rtt; zero before the first sample.
    latest: Duration,
    /// smoothed_rtt.
    smoothed: Duration,
    /// rttvar.
    var: Duration,
    /// min_rtt; zero before the first sample.
    min: Duration,
    /// first_rtt_sample: when the first sample since (re)initialisation was taken.
    first_sample_time: Option<Instant>,
}

impl RttEstimator {
    /// A fresh estimator that assumes `initial_rtt` until the first sample.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-5.3
    //# smoothed_rtt and rttvar are initialized as follows, where kInitialRtt contains
    //# the initial RTT value:
    //#
    //# ~~~pseudocode
    //# smoothed_rtt = kInitialRtt
    //# rttvar = kInitialRtt / 2
    //# ~~~
    pub fn new(initial_rtt: Duration) -> Self {
        RttEstimator {
            initial: initial_rtt,
            latest: Duration::ZERO,
            smoothed: initial_rtt,
            var: initial_rtt / 2,
            min: Duration::ZERO,
            first_sample_time: None,
        }
    }

    /// Forgets all samples and starts again from `initial_rtt`, as when a path's RTT
    /// estimator is reset after a change of peer address (RFC 9000 section 9.4).
    pub fn reset(&mut self, initial_rtt: Duration) {
        *self = RttEstimator::new(initial_rtt);
    }

    /// Replaces the initial RTT used until the first sample, e.g. with the delay between
    /// sending PATH_CHALLENGE and receiving PATH_RESPONSE on a new path. Ignored once a
    /// sample exists.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.2.2
    //# A connection MAY use the delay between sending a PATH_CHALLENGE and receiving a
    //# PATH_RESPONSE to set the initial RTT (see kInitialRtt in
    //# {{constants-of-interest}}) for a new path, but the delay SHOULD NOT be
    //# considered an RTT sample.
    pub fn set_initial_rtt(&mut self, initial_rtt: Duration) {
        if !self.has_sample() {
            *self = RttEstimator::new(initial_rtt);
        }
    }

    /// Feeds one RTT sample, taken at `now` from an ACK whose ACK Delay field decoded to
    /// `ack_delay` (RFC 9002 Appendix A.7 `UpdateRtt`).
    ///
    /// `latest_rtt` is `now - time_sent` of the largest newly acknowledged packet (see
    /// [`super::SpaceRecovery::on_ack_received`], which calls this for you).
    /// `max_ack_delay` is the peer's transport parameter; it only caps `ack_delay` once
    /// `handshake_confirmed` is true.
    pub fn update(
        &mut self,
        now: Instant,
        ack_delay: Duration,
        latest_rtt: Duration,
        max_ack_delay: Duration,
        handshake_confirmed: bool,
    ) {
        self.latest = latest_rtt;
        if self.first_sample_time.is_none() {
            //= https://www.rfc-editor.org/rfc/rfc9002#section-5.2
            //# min_rtt MUST be set to the latest_rtt on the first RTT sample.
            self.min = latest_rtt;
            //= https://www.rfc-editor.org/rfc/rfc9002#section-5.3
            //# On the first RTT sample after initialization, smoothed_rtt and rttvar are set as
            //# follows:
            //#
            //# ~~~pseudocode
            //# smoothed_rtt = latest_rtt
            //# rttvar = latest_rtt / 2
            //# ~~~
            self.smoothed = latest_rtt;
            self.var = latest_rtt / 2;
            self.first_sample_time = Some(now);
            return;
        }

        //= https://www.rfc-editor.org/rfc/rfc9002#section-5.2
        //# min_rtt MUST be
        //# set to the lesser of min_rtt and latest_rtt ({{latest-rtt}}) on all other
        //# samples.
        self.min = self.min.min(latest_rtt);

        //= https://www.rfc-editor.org/rfc/rfc9002#section-5.3
        //# - SHOULD ignore the peer's max_ack_delay until the handshake is confirmed;
        //#
        //# - MUST use the lesser of the acknowledgment delay and the peer's max_ack_delay
        //#   after the handshake is confirmed; and
        let ack_delay = if handshake_confirmed {
            ack_delay.min(max_ack_delay)
        } else {
            ack_delay
        };

        //= https://www.rfc-editor.org/rfc/rfc9002#section-5.3
        //# - MUST NOT subtract the acknowledgment delay from the RTT sample if the
        //#   resulting value is smaller than the min_rtt.  This limits the underestimation
        //#   of the smoothed_rtt due to a misreporting peer.
        let adjusted = if latest_rtt >= self.min.saturating_add(ack_delay) {
            latest_rtt - ack_delay
        } else {
            latest_rtt
        };

        // Appendix A.7 order: rttvar uses the smoothed_rtt from before this sample.
        //= https://www.rfc-editor.org/rfc/rfc9002#section-5.3
        //# smoothed_rtt = 7/8 * smoothed_rtt + 1/8 * adjusted_rtt
        //# rttvar_sample = abs(smoothed_rtt - adjusted_rtt)
        //# rttvar = 3/4 * rttvar + 1/4 * rttvar_sample
        let var_sample = self.smoothed.abs_diff(adjusted);
        self.var = (self.var * 3 + var_sample) / 4;
        self.smoothed = (self.smoothed * 7 + adjusted) / 8;
    }

    /// Applies the RFC 9002 advice for after persistent congestion: min_rtt restarts from
    /// the newest sample.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-5.2
    //# Endpoints SHOULD set the min_rtt to the newest RTT sample after persistent
    //# congestion is established.
    pub fn on_persistent_congestion(&mut self) {
        if self.has_sample() {
            self.min = self.latest;
        }
    }

    /// smoothed_rtt (the initial RTT before the first sample).
    pub fn smoothed(&self) -> Duration {
        self.smoothed
    }

    /// rttvar (half the initial RTT before the first sample).
    pub fn rttvar(&self) -> Duration {
        self.var
    }

    /// min_rtt; [`Duration::ZERO`] before the first sample.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// latest_rtt; [`Duration::ZERO`] before the first sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// The RTT this estimator was initialised with.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// Whether at least one sample has been taken since (re)initialisation.
    pub fn has_sample(&self) -> bool {
        self.first_sample_time.is_some()
    }

    /// first_rtt_sample: when the first sample since (re)initialisation was taken.
    pub fn first_sample_time(&self) -> Option<Instant> {
        self.first_sample_time
    }

    /// `smoothed_rtt + max(4*rttvar, kGranularity)`: the PTO period without
    /// `max_ack_delay` and without backoff (see [`super::pto_duration`]).
    pub fn pto_base(&self) -> Duration {
        self.smoothed
            .saturating_add(self.var.saturating_mul(4).max(K_GRANULARITY))
    }

    /// The time-threshold loss delay: `max(kTimeThreshold * max(smoothed_rtt,
    /// latest_rtt), kGranularity)`.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-6.1.2
    //# ~~~pseudocode
    //# max(kTimeThreshold * max(smoothed_rtt, latest_rtt), kGranularity)
    //# ~~~
    pub fn loss_delay(&self) -> Duration {
        let rtt = self.smoothed.max(self.latest);
        (rtt.saturating_mul(K_TIME_THRESHOLD_NUMERATOR) / K_TIME_THRESHOLD_DENOMINATOR)
            .max(K_GRANULARITY)
    }

    /// The persistent congestion duration:
    /// `(smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay) *
    /// kPersistentCongestionThreshold`.
    ///
    //= https://www.rfc-editor.org/rfc/rfc9002#section-7.6.1
    //# Unlike the PTO computation in {{pto}}, this duration includes the max_ack_delay
    //# irrespective of the packet number spaces in which losses are established.
    pub fn persistent_congestion_duration(&self, max_ack_delay: Duration) -> Duration {
        self.pto_base()
            .saturating_add(max_ack_delay)
            .saturating_mul(K_PERSISTENT_CONGESTION_THRESHOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::K_INITIAL_RTT;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn initial_state() {
        let rtt = RttEstimator::new(K_INITIAL_RTT);
        assert_eq!(rtt.smoothed(), ms(333));
        assert_eq!(rtt.rttvar(), Duration::from_micros(166_500));
        assert_eq!(rtt.min(), Duration::ZERO);
        assert_eq!(rtt.latest(), Duration::ZERO);
        assert!(!rtt.has_sample());
        assert_eq!(rtt.first_sample_time(), None);
    }

    #[test]
    fn first_sample_resets_estimator() {
        let now = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        // Ack delay is ignored on the first sample.
        rtt.update(now, ms(20), ms(100), ms(25), true);
        assert_eq!(rtt.smoothed(), ms(100));
        assert_eq!(rtt.rttvar(), ms(50));
        assert_eq!(rtt.min(), ms(100));
        assert_eq!(rtt.latest(), ms(100));
        assert_eq!(rtt.first_sample_time(), Some(now));
    }

    #[test]
    fn ewma_and_ack_delay_adjustment() {
        let now = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.update(now, Duration::ZERO, ms(100), ms(25), true);
        // 140 - 20 = 120 >= min 100: adjusted 120.
        rtt.update(now + ms(10), ms(20), ms(140), ms(25), true);
        assert_eq!(rtt.smoothed(), Duration::from_micros(102_500)); // (700+120)/8
        assert_eq!(rtt.rttvar(), Duration::from_micros(42_500)); // (150+20)/4
        assert_eq!(rtt.min(), ms(100));
        assert_eq!(rtt.latest(), ms(140));
        assert_eq!(rtt.first_sample_time(), Some(now));
    }

    #[test]
    fn ack_delay_not_subtracted_below_min_rtt() {
        let now = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.update(now, Duration::ZERO, ms(100), ms(25), true);
        // 110 - 20 = 90 < min 100: the delay is not subtracted, adjusted stays 110.
        rtt.update(now, ms(20), ms(110), ms(25), true);
        assert_eq!(rtt.smoothed(), Duration::from_micros(101_250)); // (700+110)/8
    }

    #[test]
    fn max_ack_delay_only_after_confirmation() {
        let now = Instant::now();
        let mut before = RttEstimator::new(K_INITIAL_RTT);
        before.update(now, Duration::ZERO, ms(100), ms(25), false);
        let mut after = before.clone();
        // 200 ms sample with a 60 ms ack delay and max_ack_delay 25 ms.
        before.update(now, ms(60), ms(200), ms(25), false); // adjusted 140
        after.update(now, ms(60), ms(200), ms(25), true); // adjusted 175
        assert_eq!(before.smoothed(), ms(105)); // (700+140)/8
        assert_eq!(after.smoothed(), Duration::from_micros(109_375)); // (700+175)/8
    }

    #[test]
    fn min_rtt_tracks_lowest_and_persistent_congestion_resets_it() {
        let now = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.update(now, Duration::ZERO, ms(100), ms(25), true);
        rtt.update(now, Duration::ZERO, ms(60), ms(25), true);
        rtt.update(now, Duration::ZERO, ms(300), ms(25), true);
        assert_eq!(rtt.min(), ms(60));
        rtt.on_persistent_congestion();
        assert_eq!(rtt.min(), ms(300));
    }

    #[test]
    fn pto_base_and_loss_delay() {
        let now = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.update(now, Duration::ZERO, ms(80), ms(25), true);
        assert_eq!(rtt.pto_base(), ms(80 + 160));
        assert_eq!(rtt.loss_delay(), ms(90));
        assert_eq!(
            rtt.persistent_congestion_duration(ms(25)),
            ms((80 + 160 + 25) * 3)
        );
        // latest above smoothed drives the loss delay.
        rtt.update(now, Duration::ZERO, ms(160), ms(25), true);
        assert_eq!(rtt.loss_delay(), ms(180));
        // Tiny RTTs: both floors are kGranularity.
        let mut tiny = RttEstimator::new(K_INITIAL_RTT);
        tiny.update(now, Duration::ZERO, Duration::from_micros(100), ms(0), true);
        assert_eq!(tiny.loss_delay(), K_GRANULARITY);
        assert_eq!(tiny.pto_base(), Duration::from_micros(100) + K_GRANULARITY);
    }

    #[test]
    fn set_initial_rtt_only_before_samples() {
        let now = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.set_initial_rtt(ms(40));
        assert_eq!(rtt.smoothed(), ms(40));
        assert!(!rtt.has_sample());
        rtt.update(now, Duration::ZERO, ms(50), ms(25), true);
        rtt.set_initial_rtt(ms(10));
        assert_eq!(rtt.smoothed(), ms(50));
        rtt.reset(ms(70));
        assert_eq!(rtt.smoothed(), ms(70));
        assert!(!rtt.has_sample());
    }

    #[test]
    fn huge_ack_delay_does_not_panic() {
        let now = Instant::now();
        let mut rtt = RttEstimator::new(K_INITIAL_RTT);
        rtt.update(now, Duration::ZERO, ms(100), ms(25), false);
        rtt.update(now, Duration::MAX, ms(100), ms(25), false);
        assert_eq!(rtt.smoothed(), ms(100));
    }
}
