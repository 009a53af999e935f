//! Seeded random helpers and configurable delay distributions.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// One standard normal sample (Box–Muller), from any seeded RNG.
pub fn std_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    // u1 in (0, 1] so that ln(u1) is finite.
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Standard normal cumulative distribution function, via `erf` (Abramowitz & Stegun 7.1.26,
/// absolute error below 1.5e-7; enough to turn a Gaussian process into a uniform one).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

fn erf(x: f64) -> f64 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    sign * (1.0 - poly * (-x * x).exp())
}

/// A delay distribution in milliseconds, as written in a scenario:
/// `{ dist = "normal", mean_ms = 27.0, std_ms = 6.0, min_ms = 12.0, max_ms = 42.0 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum DelayDist {
    /// Always the same value.
    Constant {
        /// The delay.
        ms: f64,
    },
    /// Uniform between `min_ms` and `max_ms`.
    Uniform {
        /// Lower bound.
        min_ms: f64,
        /// Upper bound.
        max_ms: f64,
    },
    /// Normal with the given mean and standard deviation, truncated to `[min_ms, max_ms]` by
    /// rejection (a bound symmetric about the mean keeps the mean unchanged).
    Normal {
        /// Mean.
        mean_ms: f64,
        /// Standard deviation.
        std_ms: f64,
        /// Lower bound.
        min_ms: f64,
        /// Upper bound.
        max_ms: f64,
    },
    /// Drawn uniformly from a list of measured values.
    Empirical {
        /// The measured delays.
        samples_ms: Vec<f64>,
    },
}

impl DelayDist {
    /// A truncated normal with bounds symmetric about the mean (`mean ± half_range`).
    pub fn normal_symmetric(mean_ms: f64, std_ms: f64, half_range_ms: f64) -> Self {
        DelayDist::Normal {
            mean_ms,
            std_ms,
            min_ms: (mean_ms - half_range_ms).max(0.0),
            max_ms: mean_ms + half_range_ms,
        }
    }

    /// Checks the parameters; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        match self {
            DelayDist::Constant { ms } if ok(*ms) => Ok(()),
            DelayDist::Uniform { min_ms, max_ms } if ok(*min_ms) && ok(*max_ms) && min_ms <= max_ms => {
                Ok(())
            }
            DelayDist::Normal {
                mean_ms,
                std_ms,
                min_ms,
                max_ms,
            } if ok(*mean_ms) && ok(*std_ms) && ok(*min_ms) && ok(*max_ms) && min_ms <= max_ms => {
                Ok(())
            }
            DelayDist::Empirical { samples_ms } if !samples_ms.is_empty() && samples_ms.iter().all(|v| ok(*v)) => {
                Ok(())
            }
            _ => Err(
                "delay distribution needs finite non-negative values (min <= max, at least one sample)"
                    .into(),
            ),
        }
    }

    /// The mean of the distribution as configured (for the truncated normal: the untruncated
    /// mean clamped to the bounds).
    pub fn mean_ms(&self) -> f64 {
        match self {
            DelayDist::Constant { ms } => *ms,
            DelayDist::Uniform { min_ms, max_ms } => 0.5 * (min_ms + max_ms),
            DelayDist::Normal {
                mean_ms,
                min_ms,
                max_ms,
                ..
            } => mean_ms.clamp(*min_ms, *max_ms),
            DelayDist::Empirical { samples_ms } => {
                samples_ms.iter().sum::<f64>() / samples_ms.len().max(1) as f64
            }
        }
    }

    /// Draws one delay in nanoseconds.
    pub fn sample_ns<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let ms = match self {
            DelayDist::Constant { ms } => *ms,
            DelayDist::Uniform { min_ms, max_ms } => {
                min_ms + (max_ms - min_ms) * rng.random::<f64>()
            }
            DelayDist::Normal {
                mean_ms,
                std_ms,
                min_ms,
                max_ms,
            } => {
                let mut v = mean_ms.clamp(*min_ms, *max_ms);
                for _ in 0..64 {
                    let x = mean_ms + std_ms * std_normal(rng);
                    if (*min_ms..=*max_ms).contains(&x) {
                        v = x;
                        break;
                    }
                }
                v
            }
            DelayDist::Empirical { samples_ms } => {
                let i = rng.random_range(0..samples_ms.len().max(1));
                samples_ms.get(i).copied().unwrap_or(0.0)
            }
        };
        ms_to_ns(ms)
    }
}

/// Milliseconds (non-negative, finite) to integer nanoseconds.
pub fn ms_to_ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}

/// A stationary Gaussian process over a scalar coordinate (distance travelled) with an
/// exponential autocorrelation `R(Δx) = exp(-|Δx| / d_corr)` and unit variance: the
/// first-order (Gudmundson) model TR 38.901 7.4.4 / 7.6.3 uses for spatially consistent
/// shadow fading and LOS state.
#[derive(Debug, Clone)]
pub struct GaussMarkov {
    value: f64,
    corr_dist_m: f64,
}

impl GaussMarkov {
    /// Starts the process at a fresh N(0, 1) draw.
    pub fn new<R: Rng + ?Sized>(corr_dist_m: f64, rng: &mut R) -> Self {
        GaussMarkov {
            value: std_normal(rng),
            corr_dist_m,
        }
    }

    /// Current value (unit variance).
    pub fn value(&self) -> f64 {
        self.value
    }

    /// Moves the coordinate on by `delta_m` metres.
    pub fn advance<R: Rng + ?Sized>(&mut self, delta_m: f64, rng: &mut R) {
        if delta_m <= 0.0 || !delta_m.is_finite() {
            return;
        }
        let rho = if self.corr_dist_m > 0.0 {
            (-delta_m / self.corr_dist_m).exp()
        } else {
            0.0
        };
        self.value = rho * self.value + (1.0 - rho * rho).sqrt() * std_normal(rng);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn normal_cdf_values() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.0) - 0.841_344_746).abs() < 1e-6);
        assert!((normal_cdf(-1.96) - 0.024_997_9).abs() < 1e-6);
    }

    #[test]
    fn truncated_normal_respects_bounds_and_mean() {
        let d = DelayDist::normal_symmetric(27.0, 6.0, 15.0);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let n = 20_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let v = d.sample_ns(&mut rng) as f64 / 1e6;
            assert!((12.0..=42.0).contains(&v));
            sum += v;
        }
        assert!((sum / n as f64 - 27.0).abs() < 0.2);
    }

    #[test]
    fn gauss_markov_correlation() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        // Empirical lag-1 correlation at a step equal to the correlation distance: exp(-1).
        let mut g = GaussMarkov::new(10.0, &mut rng);
        let (mut sxy, mut sxx) = (0.0, 0.0);
        let mut prev = g.value();
        for _ in 0..50_000 {
            g.advance(10.0, &mut rng);
            sxy += prev * g.value();
            sxx += prev * prev;
            prev = g.value();
        }
        assert!((sxy / sxx - (-1.0f64).exp()).abs() < 0.02);
    }

    #[test]
    fn invalid_dists_rejected() {
        assert!(
            DelayDist::Uniform {
                min_ms: 5.0,
                max_ms: 1.0
            }
            .validate()
            .is_err()
        );
        assert!(
            DelayDist::Empirical { samples_ms: vec![] }
                .validate()
                .is_err()
        );
        assert!(DelayDist::Constant { ms: f64::NAN }.validate().is_err());
    }
}
