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

/// `x` solving `(1 + x)·exp(−x) = exp(−1)`: where the correlation of a
/// [`SmoothGaussMarkov`] with scale `L` falls to 1/e is `x·L`.
const SMOOTH_E_FOLD_IN_SCALES: f64 = 2.146_193_220_620_582_5;

/// A stationary Gaussian process over travelled distance with unit variance, for the
/// spatially consistent LOS state and shadow fading of TR 38.901 §7.6.3: the first-order
/// (exponential) process passed once more through the same first-order filter, so its
/// autocorrelation is `(1 + |Δx|/L)·exp(−|Δx|/L)`, with `L` chosen to fall to 1/e at the
/// given correlation distance, where the exponential model falls to 1/e.
///
/// Why not the exponential process itself: its paths are nowhere differentiable. A state
/// decided by a threshold on it (LOS or not) crosses the threshold again and again around
/// each crossing, more often the finer it is sampled; a path of this process crosses at
/// isolated points (Rice: `1/(π·L)` crossings per metre at the median), the same however
/// finely it is sampled. A shadowing value made from it does not jump by σ·√(2·Δ/d) over
/// every short step Δ.
#[derive(Debug, Clone)]
pub struct SmoothGaussMarkov {
    /// The first-order process that drives the filter (unit variance).
    driver: f64,
    /// The filter's output (variance 1/2, covariance 1/2 with `driver`).
    filtered: f64,
    scale_m: f64,
}

impl SmoothGaussMarkov {
    /// Starts the process at a draw from its stationary distribution.
    pub fn new<R: Rng + ?Sized>(corr_dist_m: f64, rng: &mut R) -> Self {
        let driver = std_normal(rng);
        let filtered = 0.5 * driver + 0.5 * std_normal(rng);
        SmoothGaussMarkov {
            driver,
            filtered,
            scale_m: corr_dist_m.max(0.0) / SMOOTH_E_FOLD_IN_SCALES,
        }
    }

    /// Current value (unit variance).
    pub fn value(&self) -> f64 {
        std::f64::consts::SQRT_2 * self.filtered
    }

    /// Moves the coordinate on by `delta_m` metres: the exact transition of the pair
    /// (driver, filtered) over that distance, whatever its length.
    pub fn advance<R: Rng + ?Sized>(&mut self, delta_m: f64, rng: &mut R) {
        if delta_m <= 0.0 || !delta_m.is_finite() {
            return;
        }
        if self.scale_m <= 0.0 {
            *self = SmoothGaussMarkov::new(0.0, rng);
            return;
        }
        let r = delta_m / self.scale_m;
        let e = (-r).exp();
        let e2 = e * e;
        // Mean: exp(A·Δ) with A = [[−1, 0], [1, −1]] / L.
        let driver = e * self.driver;
        let filtered = e * (r * self.driver + self.filtered);
        // Covariance of the noise picked up over Δ (driving intensity 2/L), and its
        // Cholesky factor.
        let q11 = 1.0 - e2;
        let q12 = 0.5 * (1.0 - e2 * (1.0 + 2.0 * r));
        let q22 = 0.5 * (1.0 - e2 * (1.0 + 2.0 * r + 2.0 * r * r));
        let a = q11.sqrt();
        let b = if a > 0.0 { q12 / a } else { 0.0 };
        let c = (q22 - b * b).max(0.0).sqrt();
        let (n1, n2) = (std_normal(rng), std_normal(rng));
        self.driver = driver + a * n1;
        self.filtered = filtered + b * n1 + c * n2;
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

    /// The first-order (exponential, Gudmundson) process TR 38.901 §7.6.3 describes, as a
    /// reference for what [`SmoothGaussMarkov`] avoids.
    struct GaussMarkov {
        value: f64,
        corr_dist_m: f64,
    }

    impl GaussMarkov {
        fn new(corr_dist_m: f64, rng: &mut ChaCha8Rng) -> Self {
            GaussMarkov {
                value: std_normal(rng),
                corr_dist_m,
            }
        }

        fn value(&self) -> f64 {
            self.value
        }

        fn advance(&mut self, delta_m: f64, rng: &mut ChaCha8Rng) {
            let rho = (-delta_m / self.corr_dist_m).exp();
            self.value = rho * self.value + (1.0 - rho * rho).sqrt() * std_normal(rng);
        }
    }

    /// Correlation of a process's values `lag_m` apart, over many independent steps.
    fn lag_correlation(mut step: impl FnMut() -> (f64, f64)) -> f64 {
        let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
        for _ in 0..50_000 {
            let (x, y) = step();
            sxy += x * y;
            sxx += x * x;
            syy += y * y;
        }
        sxy / (sxx * syy).sqrt()
    }

    #[test]
    fn smooth_gauss_markov_has_unit_variance_and_the_e_fold_distance() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut g = SmoothGaussMarkov::new(50.0, &mut rng);
        let (mut n, mut s2) = (0.0, 0.0);
        let rho = lag_correlation(|| {
            let x = g.value();
            g.advance(50.0, &mut rng);
            n += 1.0;
            s2 += x * x;
            (x, g.value())
        });
        assert!((rho - (-1.0f64).exp()).abs() < 0.02, "{rho}");
        assert!((s2 / n - 1.0).abs() < 0.03, "{}", s2 / n);
        // Two halves of a step give the same transition as the whole step.
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let mut g = SmoothGaussMarkov::new(50.0, &mut rng);
        let rho = lag_correlation(|| {
            let x = g.value();
            g.advance(25.0, &mut rng);
            g.advance(25.0, &mut rng);
            (x, g.value())
        });
        assert!((rho - (-1.0f64).exp()).abs() < 0.02, "{rho}");
    }

    /// Crossings of zero per kilometre over 20 km sampled every `step_m`.
    fn zero_crossings_per_km(mut value: impl FnMut(f64) -> f64, step_m: f64) -> f64 {
        let steps = (20_000.0 / step_m) as usize;
        let mut prev = value(0.0);
        let mut crossings = 0;
        for _ in 0..steps {
            let v = value(step_m);
            if (v < 0.0) != (prev < 0.0) {
                crossings += 1;
            }
            prev = v;
        }
        crossings as f64 / 20.0
    }

    #[test]
    fn smooth_gauss_markov_crossings_do_not_depend_on_the_sampling() {
        // A threshold on the first-order process is crossed more the finer it is sampled;
        // on the smooth one the count stays at Rice's 1/(π·L) per metre.
        let rice_per_km = 1000.0 * SMOOTH_E_FOLD_IN_SCALES / (std::f64::consts::PI * 50.0);
        let mut counts = Vec::new();
        for step in [0.05, 0.5] {
            let crossings = |smooth: bool| {
                let mut rng = ChaCha8Rng::seed_from_u64(9);
                let mut s = SmoothGaussMarkov::new(50.0, &mut rng);
                let mut r = GaussMarkov::new(50.0, &mut rng);
                zero_crossings_per_km(
                    |d| {
                        if smooth {
                            s.advance(d, &mut rng);
                            s.value()
                        } else {
                            r.advance(d, &mut rng);
                            r.value()
                        }
                    },
                    step,
                )
            };
            let (s, r) = (crossings(true), crossings(false));
            assert!((s / rice_per_km - 1.0).abs() < 0.25, "{s} vs {rice_per_km}");
            counts.push((s, r));
        }
        let (fine, coarse) = (counts[0], counts[1]);
        assert!((fine.0 / coarse.0 - 1.0).abs() < 0.25, "{counts:?}");
        assert!(fine.1 > 2.0 * coarse.1, "{counts:?}");
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
