//! rwnd-based rate control with bandwidth estimation (M2HO Sec. 4.5, Eq. 2).
//
//= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.5
//# In every RTT, M2HO counts the bytes received as a conservative bandwidth estimate
//# c_est. rwnd is computed as,
//#
//# rwnd = λ × c_est × RTT_min / RTT     (2)
//#
//# where RTT_min is the minimum RTT value measured by M2HO.

/// Eq. 2 of M2HO: the receive window (bytes) from the bytes received in the last round
/// trip (`c_est_bytes`), the minimum and the current RTT, and the aggressiveness `lambda`.
/// `None` without a usable RTT.
pub fn eq2_rwnd(lambda: f64, c_est_bytes: u64, rtt_min_ns: u64, rtt_ns: u64) -> Option<u64> {
    if rtt_ns == 0 || rtt_min_ns == 0 || !lambda.is_finite() || lambda <= 0.0 {
        return None;
    }
    let w = lambda * c_est_bytes as f64 * (rtt_min_ns as f64 / rtt_ns as f64);
    Some(w.round().min(u64::MAX as f64 / 2.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq2_values() {
        // λ = 2, 100 kB in the last RTT, RTT at its minimum: 200 kB.
        assert_eq!(
            eq2_rwnd(2.0, 100_000, 40_000_000, 40_000_000),
            Some(200_000)
        );
        // Queueing doubles the RTT: half of that.
        assert_eq!(
            eq2_rwnd(2.0, 100_000, 40_000_000, 80_000_000),
            Some(100_000)
        );
        // λ scales linearly.
        assert_eq!(eq2_rwnd(1.0, 100_000, 40_000_000, 80_000_000), Some(50_000));
        // Nothing received: a zero window estimate (the caller applies its floor).
        assert_eq!(eq2_rwnd(2.0, 0, 1, 2), Some(0));
        assert_eq!(eq2_rwnd(2.0, 1, 0, 2), None);
        assert_eq!(eq2_rwnd(2.0, 1, 1, 0), None);
        assert_eq!(eq2_rwnd(f64::NAN, 1, 1, 1), None);
    }

    /// With the link as bottleneck at C bytes/s and queueing delay q, c_est = C·RTT and the
    /// window settles at λ·C·RTT_min: λ bandwidth-delay products whatever the queue.
    #[test]
    fn eq2_fixed_point_is_lambda_bdp() {
        let c = 12_500_000.0; // 100 Mbit/s
        let rtt_min = 40_000_000u64;
        for q in [0u64, 10_000_000, 40_000_000, 200_000_000] {
            let rtt = rtt_min + q;
            let c_est = (c * rtt as f64 / 1e9) as u64;
            let w = eq2_rwnd(2.0, c_est, rtt_min, rtt).unwrap() as f64;
            let bdp = c * rtt_min as f64 / 1e9;
            assert!((w / bdp - 2.0).abs() < 1e-3, "q {q}: {w} vs {bdp}");
        }
    }
}
