//! Virtual time.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in simulated time: nanoseconds since the start of the run.
///
/// Nothing inside the simulated world reads the wall clock. An adapter that
/// needs `std::time::Instant` (the QUIC stack) takes one anchor `Instant` at
/// construction and maps `t` to `anchor + t.as_duration()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(pub u64);

impl SimTime {
    /// The start of the run.
    pub const ZERO: SimTime = SimTime(0);
    /// Never.
    pub const NEVER: SimTime = SimTime(u64::MAX);

    /// From a duration since the start (saturating).
    pub fn from_duration(d: Duration) -> SimTime {
        SimTime(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The duration since the start.
    pub fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// Nanoseconds since the start.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the start, as a float.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: SimTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for SimTime {
    type Output = SimTime;
    fn add(self, d: Duration) -> SimTime {
        SimTime(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

impl Sub<SimTime> for SimTime {
    type Output = Duration;
    fn sub(self, other: SimTime) -> Duration {
        self.saturating_since(other)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic() {
        let t = SimTime::ZERO + Duration::from_millis(5);
        assert_eq!(t.as_nanos(), 5_000_000);
        assert_eq!(t - SimTime(1_000_000), Duration::from_millis(4));
        assert_eq!(SimTime(1) - t, Duration::ZERO);
        assert_eq!(SimTime::NEVER + Duration::from_secs(1), SimTime::NEVER);
        assert_eq!(t.to_string(), "0.005000000s");
    }
}
