//! Large-scale channel: TR 38.901 UMi-Street Canyon and UMa path loss, LOS probability and
//! spatially correlated shadow fading for the 3GPP cells; a log-distance model for Wi-Fi; a
//! Lambertian line-of-sight model for LiFi; thermal noise.

use crate::dist::{SmoothGaussMarkov, normal_cdf};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Propagation velocity used by TR 38.901 (Table 7.4.1-1 note 1: c = 3.0×10^8 m/s).
pub const C: f64 = 3.0e8;

/// Shadow-fading standard deviation of UMi-Street Canyon LOS (Table 7.4.1-1): σ_SF = 4 dB.
pub const UMI_SF_STD_LOS_DB: f64 = 4.0;
/// Shadow-fading standard deviation of UMi-Street Canyon NLOS (Table 7.4.1-1): σ_SF = 7.82 dB.
pub const UMI_SF_STD_NLOS_DB: f64 = 7.82;
/// Shadow-fading decorrelation distance, UMi LOS (TR 38.901 Table 7.5-6 part 1): 10 m.
pub const UMI_SF_CORR_LOS_M: f64 = 10.0;
/// Shadow-fading decorrelation distance, UMi NLOS (TR 38.901 Table 7.5-6 part 1): 13 m.
pub const UMI_SF_CORR_NLOS_M: f64 = 13.0;
/// Correlation distance of the LOS/NLOS state, UMi (TR 38.901 Table 7.6.3.1-2): 50 m.
pub const UMI_LOS_CORR_M: f64 = 50.0;
/// The effective environment height h_E of UMi (Table 7.4.1-1 note 1): 1 m.
pub const UMI_H_E: f64 = 1.0;
/// Shadow-fading standard deviation of UMa LOS (Table 7.4.1-1): σ_SF = 4 dB.
pub const UMA_SF_STD_LOS_DB: f64 = 4.0;
/// Shadow-fading standard deviation of UMa NLOS (Table 7.4.1-1): σ_SF = 6 dB.
pub const UMA_SF_STD_NLOS_DB: f64 = 6.0;
/// Shadow-fading decorrelation distance, UMa LOS (TR 38.901 Table 7.5-6 part 1): 37 m.
pub const UMA_SF_CORR_LOS_M: f64 = 37.0;
/// Shadow-fading decorrelation distance, UMa NLOS (TR 38.901 Table 7.5-6 part 1): 50 m.
pub const UMA_SF_CORR_NLOS_M: f64 = 50.0;
/// Correlation distance of the LOS/NLOS state, UMa (TR 38.901 Table 7.6.3.1-2): 50 m.
pub const UMA_LOS_CORR_M: f64 = 50.0;
/// The effective environment height h_E of UMa for a UE below 13 m (Table 7.4.1-1 note 1,
/// where C(d2D, hUT) = 0 and so h_E = 1 m with probability 1).
pub const UMA_H_E: f64 = 1.0;

/// The TR 38.901 deployment scenario whose channel a 3GPP cell's links follow.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    /// Urban Micro, street canyon: small cells below the rooftops (ISD 200 m, 10 m masts).
    #[default]
    Umi,
    /// Urban Macro: macro cells above the rooftops (ISD 500 m, 25 m masts).
    Uma,
}

impl Environment {
    /// Antenna height a cell of this scenario has unless it sets one (Table 7.2-1).
    pub fn default_height_m(self) -> f64 {
        match self {
            Environment::Umi => 10.0,
            Environment::Uma => 25.0,
        }
    }

    /// Path loss in dB of a LOS or NLOS link `d2d` metres apart horizontally.
    pub fn path_loss_db(self, los: bool, d2d: f64, fc_ghz: f64, h_bs: f64, h_ut: f64) -> f64 {
        match (self, los) {
            (Environment::Umi, true) => umi_los_path_loss_db(d2d, fc_ghz, h_bs, h_ut),
            (Environment::Umi, false) => umi_nlos_path_loss_db(d2d, fc_ghz, h_bs, h_ut),
            (Environment::Uma, true) => uma_los_path_loss_db(d2d, fc_ghz, h_bs, h_ut),
            (Environment::Uma, false) => uma_nlos_path_loss_db(d2d, fc_ghz, h_bs, h_ut),
        }
    }

    /// Probability of line of sight at horizontal distance `d2d` for a UE at `h_ut`.
    pub fn los_probability(self, d2d: f64, h_ut: f64) -> f64 {
        match self {
            Environment::Umi => umi_los_probability(d2d),
            Environment::Uma => uma_los_probability(d2d, h_ut),
        }
    }

    /// Shadow-fading standard deviation (dB) in the LOS or NLOS state.
    pub fn shadowing_std_db(self, los: bool) -> f64 {
        match (self, los) {
            (Environment::Umi, true) => UMI_SF_STD_LOS_DB,
            (Environment::Umi, false) => UMI_SF_STD_NLOS_DB,
            (Environment::Uma, true) => UMA_SF_STD_LOS_DB,
            (Environment::Uma, false) => UMA_SF_STD_NLOS_DB,
        }
    }

    /// Shadow-fading correlation distances (LOS, NLOS) in metres.
    pub fn shadowing_corr_m(self) -> (f64, f64) {
        match self {
            Environment::Umi => (UMI_SF_CORR_LOS_M, UMI_SF_CORR_NLOS_M),
            Environment::Uma => (UMA_SF_CORR_LOS_M, UMA_SF_CORR_NLOS_M),
        }
    }

    /// Correlation distance of the LOS state variable in metres.
    pub fn los_corr_m(self) -> f64 {
        match self {
            Environment::Umi => UMI_LOS_CORR_M,
            Environment::Uma => UMA_LOS_CORR_M,
        }
    }
}

/// 3D distance between a base station at height `h_bs` and a UE at height `h_ut`, `d2d`
/// apart horizontally.
pub fn d3d(d2d: f64, h_bs: f64, h_ut: f64) -> f64 {
    (d2d * d2d + (h_bs - h_ut) * (h_bs - h_ut)).sqrt()
}

//= 3GPP TR 38.901 V17 Table 7.4.1-1 note 1
//# d'BP = 4 h'BS h'UT fc / c, where fc is the centre frequency in Hz, c = 3.0×10^8 m/s,
//# h'BS = hBS − hE and h'UT = hUT − hE, hE = 1.0 m (UMi)
/// Breakpoint distance d'_BP in metres for carrier `fc_ghz`.
pub fn umi_breakpoint_m(fc_ghz: f64, h_bs: f64, h_ut: f64) -> f64 {
    breakpoint_m(fc_ghz, h_bs, h_ut, UMI_H_E)
}

/// d'_BP for an effective environment height `h_e`.
fn breakpoint_m(fc_ghz: f64, h_bs: f64, h_ut: f64, h_e: f64) -> f64 {
    4.0 * (h_bs - h_e) * (h_ut - h_e) * fc_ghz * 1e9 / C
}

//= 3GPP TR 38.901 V17 Table 7.4.1-1, UMi-Street Canyon, LOS
//# PL_UMi-LOS = PL1 for 10 m ≤ d2D ≤ d'BP, PL2 for d'BP ≤ d2D ≤ 5 km
//# PL1 = 32.4 + 21 log10(d3D) + 20 log10(fc)
//# PL2 = 32.4 + 40 log10(d3D) + 20 log10(fc) − 9.5 log10((d'BP)^2 + (hBS − hUT)^2)
/// UMi-Street Canyon LOS path loss in dB. `d2d` is clamped to the model's validity range
/// [10 m, 5 km]; `fc_ghz` in GHz, heights in metres.
pub fn umi_los_path_loss_db(d2d: f64, fc_ghz: f64, h_bs: f64, h_ut: f64) -> f64 {
    let bp = umi_breakpoint_m(fc_ghz, h_bs, h_ut);
    two_slope_los_db(d2d, fc_ghz, h_bs, h_ut, bp, (32.4, 21.0, 9.5))
}

/// The LOS path loss both TR 38.901 street scenarios share in shape: `a + n1·log10(d3D) +
/// 20·log10(fc)` up to the breakpoint `bp`, `a + 40·log10(d3D) + 20·log10(fc) −
/// k·log10(bp² + (hBS − hUT)²)` beyond it, with `(a, n1, k)` the scenario's coefficients and
/// `d2d` clamped to [10 m, 5 km].
fn two_slope_los_db(
    d2d: f64,
    fc_ghz: f64,
    h_bs: f64,
    h_ut: f64,
    bp: f64,
    (a, n1, k): (f64, f64, f64),
) -> f64 {
    let d2d = d2d.clamp(10.0, 5000.0);
    let d3 = d3d(d2d, h_bs, h_ut);
    if d2d <= bp {
        a + n1 * d3.log10() + 20.0 * fc_ghz.log10()
    } else {
        a + 40.0 * d3.log10() + 20.0 * fc_ghz.log10()
            - k * (bp * bp + (h_bs - h_ut) * (h_bs - h_ut)).log10()
    }
}

//= 3GPP TR 38.901 V17 Table 7.4.1-1, UMi-Street Canyon, NLOS
//# PL_UMi-NLOS = max(PL_UMi-LOS, PL'_UMi-NLOS) for 10 m ≤ d2D ≤ 5 km
//# PL'_UMi-NLOS = 35.3 log10(d3D) + 22.4 + 21.3 log10(fc) − 0.3 (hUT − 1.5)
/// UMi-Street Canyon NLOS path loss in dB (same clamping as the LOS formula).
pub fn umi_nlos_path_loss_db(d2d: f64, fc_ghz: f64, h_bs: f64, h_ut: f64) -> f64 {
    let d2c = d2d.clamp(10.0, 5000.0);
    let d3 = d3d(d2c, h_bs, h_ut);
    let nlos = 35.3 * d3.log10() + 22.4 + 21.3 * fc_ghz.log10() - 0.3 * (h_ut - 1.5);
    nlos.max(umi_los_path_loss_db(d2d, fc_ghz, h_bs, h_ut))
}

//= 3GPP TR 38.901 V17 Table 7.4.2-1, UMi-Street Canyon
//# Pr_LOS = 1 for d2D-out ≤ 18 m;
//# Pr_LOS = 18/d2D-out + exp(−d2D-out/36) (1 − 18/d2D-out) for 18 m < d2D-out
/// Probability that a UE at horizontal distance `d2d` has line of sight to a UMi cell.
pub fn umi_los_probability(d2d: f64) -> f64 {
    if d2d <= 18.0 {
        1.0
    } else {
        18.0 / d2d + (-d2d / 36.0).exp() * (1.0 - 18.0 / d2d)
    }
}

//= 3GPP TR 38.901 V17 Table 7.4.1-1 note 1
//# d'BP = 4 h'BS h'UT fc / c, where fc is the centre frequency in Hz, c = 3.0×10^8 m/s,
//# h'BS = hBS − hE and h'UT = hUT − hE
/// UMa breakpoint distance d'_BP in metres for carrier `fc_ghz`, with h_E = 1 m: exact for a
/// UE below 13 m; above 13 m TR 38.901 sometimes draws a higher h_E, which this model does
/// not (the UE on a high floor then keeps the 1 m value).
pub fn uma_breakpoint_m(fc_ghz: f64, h_bs: f64, h_ut: f64) -> f64 {
    breakpoint_m(fc_ghz, h_bs, h_ut, UMA_H_E)
}

//= 3GPP TR 38.901 V17 Table 7.4.1-1, UMa, LOS
//# PL_UMa-LOS = PL1 for 10 m ≤ d2D ≤ d'BP, PL2 for d'BP ≤ d2D ≤ 5 km
//# PL1 = 28.0 + 22 log10(d3D) + 20 log10(fc)
//# PL2 = 28.0 + 40 log10(d3D) + 20 log10(fc) − 9 log10((d'BP)^2 + (hBS − hUT)^2)
/// UMa LOS path loss in dB. `d2d` is clamped to the model's validity range [10 m, 5 km];
/// `fc_ghz` in GHz, heights in metres.
pub fn uma_los_path_loss_db(d2d: f64, fc_ghz: f64, h_bs: f64, h_ut: f64) -> f64 {
    let bp = uma_breakpoint_m(fc_ghz, h_bs, h_ut);
    two_slope_los_db(d2d, fc_ghz, h_bs, h_ut, bp, (28.0, 22.0, 9.0))
}

//= 3GPP TR 38.901 V17 Table 7.4.1-1, UMa, NLOS
//# PL_UMa-NLOS = max(PL_UMa-LOS, PL'_UMa-NLOS) for 10 m ≤ d2D ≤ 5 km
//# PL'_UMa-NLOS = 13.54 + 39.08 log10(d3D) + 20 log10(fc) − 0.6 (hUT − 1.5)
/// UMa NLOS path loss in dB (same clamping as the LOS formula).
pub fn uma_nlos_path_loss_db(d2d: f64, fc_ghz: f64, h_bs: f64, h_ut: f64) -> f64 {
    let d2c = d2d.clamp(10.0, 5000.0);
    let d3 = d3d(d2c, h_bs, h_ut);
    let nlos = 13.54 + 39.08 * d3.log10() + 20.0 * fc_ghz.log10() - 0.6 * (h_ut - 1.5);
    nlos.max(uma_los_path_loss_db(d2d, fc_ghz, h_bs, h_ut))
}

//= 3GPP TR 38.901 V17 Table 7.4.2-1, UMa
//# Pr_LOS = 1 for d2D-out ≤ 18 m;
//# Pr_LOS = [18/d2D-out + exp(−d2D-out/63) (1 − 18/d2D-out)]
//# (1 + C'(hUT) 5/4 (d2D-out/100)^3 exp(−d2D-out/150)) for 18 m < d2D-out,
//# C'(hUT) = 0 for hUT ≤ 13 m, ((hUT − 13)/10)^1.5 for 13 m < hUT ≤ 23 m
/// Probability that a UE at horizontal distance `d2d` and height `h_ut` has line of sight to
/// a UMa cell.
pub fn uma_los_probability(d2d: f64, h_ut: f64) -> f64 {
    if d2d <= 18.0 {
        return 1.0;
    }
    let c = if h_ut <= 13.0 {
        0.0
    } else {
        ((h_ut.min(23.0) - 13.0) / 10.0).powf(1.5)
    };
    (18.0 / d2d + (-d2d / 63.0).exp() * (1.0 - 18.0 / d2d))
        * (1.0 + c * 1.25 * (d2d / 100.0).powi(3) * (-d2d / 150.0).exp())
}

/// Thermal noise power in dBm over `bandwidth_hz` with receiver noise figure `nf_db`
/// (−174 dBm/Hz at 290 K).
pub fn thermal_noise_dbm(bandwidth_hz: f64, nf_db: f64) -> f64 {
    -174.0 + 10.0 * bandwidth_hz.max(1.0).log10() + nf_db
}

/// Log-distance path loss for Wi-Fi: free-space loss at 1 m plus `10·n·log10(d)`,
/// `PL(d) = 20·log10(4π·f/c) + 10·n·log10(max(d, 1 m))`. A simple indoor/outdoor
/// model (n = 2 free space, about 3 indoors through walls); shadowing is added separately.
pub fn wifi_path_loss_db(d3d_m: f64, fc_ghz: f64, exponent: f64) -> f64 {
    let fspl_1m = 20.0 * (4.0 * std::f64::consts::PI * fc_ghz * 1e9 / C).log10();
    fspl_1m + 10.0 * exponent * d3d_m.max(1.0).log10()
}

/// Parameters of a LiFi access point (a downward-facing LED luminaire) and its receiver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifiParams {
    /// Transmitted optical power in watts.
    #[serde(default = "LifiParams::default_power")]
    pub optical_power_w: f64,
    /// LED semi-angle at half power Φ½ in degrees (Lambertian order m = −ln 2 / ln cos Φ½).
    #[serde(default = "LifiParams::default_semi_angle")]
    pub semi_angle_deg: f64,
    /// Receiver field of view (half angle) in degrees: the light cone. Outside it there is no
    /// link at all.
    #[serde(default = "LifiParams::default_fov")]
    pub fov_deg: f64,
    /// Photodetector area in cm².
    #[serde(default = "LifiParams::default_area")]
    pub detector_area_cm2: f64,
    /// Photodetector responsivity in A/W.
    #[serde(default = "LifiParams::default_responsivity")]
    pub responsivity_a_per_w: f64,
    /// Receiver noise power spectral density in A²/Hz (shot plus thermal noise).
    #[serde(default = "LifiParams::default_noise")]
    pub noise_a2_per_hz: f64,
}

impl LifiParams {
    fn default_power() -> f64 {
        1.0
    }
    fn default_semi_angle() -> f64 {
        60.0
    }
    fn default_fov() -> f64 {
        60.0
    }
    fn default_area() -> f64 {
        1.0
    }
    fn default_responsivity() -> f64 {
        0.53
    }
    fn default_noise() -> f64 {
        1e-21
    }

    /// Received optical power (dBm) and electrical SNR (dB) of a receiver at horizontal
    /// distance `r_m` from the luminaire, `dh_m` below it, over `bandwidth_hz`; `None`
    /// outside the light cone.
    ///
    /// Lambertian line-of-sight gain (Kahn & Barry 1997; Komine & Nakagawa 2004):
    /// `H = (m+1)·A / (2π·d²) · cos^m(φ) · cos(ψ)` for `ψ ≤ FOV`, 0 otherwise, where φ is
    /// the emission angle and ψ the incidence angle (equal for a downward LED and an
    /// upward receiver); `SNR = (R·H·P)² / (N0·B)`.
    pub fn receive(&self, r_m: f64, dh_m: f64, bandwidth_hz: f64) -> Option<(f64, f64)> {
        if dh_m <= 0.0 {
            return None;
        }
        let d = (r_m * r_m + dh_m * dh_m).sqrt();
        let cos_psi = dh_m / d;
        if cos_psi < self.fov_deg.to_radians().cos() {
            return None;
        }
        let m = -(2f64.ln()) / self.semi_angle_deg.to_radians().cos().ln();
        let area = self.detector_area_cm2 * 1e-4;
        let h = (m + 1.0) * area / (2.0 * std::f64::consts::PI * d * d) * cos_psi.powf(m) * cos_psi;
        let p_rx = h * self.optical_power_w;
        let i = self.responsivity_a_per_w * p_rx;
        let snr = i * i / (self.noise_a2_per_hz * bandwidth_hz.max(1.0));
        (snr > 0.0).then(|| (10.0 * (p_rx * 1e3).log10(), 10.0 * snr.log10()))
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !(pos(self.optical_power_w)
            && pos(self.detector_area_cm2)
            && pos(self.responsivity_a_per_w)
            && pos(self.noise_a2_per_hz))
        {
            return Err("LiFi powers, area, responsivity and noise must be positive".into());
        }
        if !(self.semi_angle_deg > 0.0 && self.semi_angle_deg < 90.0) {
            return Err("semi_angle_deg must be in (0, 90)".into());
        }
        if !(self.fov_deg > 0.0 && self.fov_deg < 90.0) {
            return Err("fov_deg must be in (0, 90)".into());
        }
        Ok(())
    }
}

impl Default for LifiParams {
    fn default() -> Self {
        LifiParams {
            optical_power_w: Self::default_power(),
            semi_angle_deg: Self::default_semi_angle(),
            fov_deg: Self::default_fov(),
            detector_area_cm2: Self::default_area(),
            responsivity_a_per_w: Self::default_responsivity(),
            noise_a2_per_hz: Self::default_noise(),
        }
    }
}

/// How the LOS state of 3GPP links is chosen.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LosMode {
    /// Drawn from the TR 38.901 LOS probability with a spatially consistent (50 m correlated)
    /// random variable, as in TR 38.901 §7.6.3.1. The variable is smooth along the UE's
    /// path ([`SmoothGaussMarkov`]), so the state changes once where a street corner or a
    /// building edge would change it, not in a burst of 40 ms flips around each change.
    #[default]
    Stochastic,
    /// Always line of sight.
    Los,
    /// Never line of sight.
    Nlos,
}

/// The slowly varying, spatially correlated part of one UE–cell channel: the LOS state
/// variable and the LOS and NLOS shadow-fading processes, all driven by the distance the UE
/// travels. Each is a [`SmoothGaussMarkov`] with the TR 38.901 correlation distance (1/e
/// there, as the exponential model has) but differentiable along the path: shadowing comes
/// from buildings and terrain metres across, so it cannot change by the exponential model's
/// σ·√(2·Δ/d) within a few tens of centimetres (2.1 dB rms in NLOS over the 0.5 m a
/// vehicle covers in one 40 ms measurement period, against 0.6 dB for the smooth process).
#[derive(Debug, Clone)]
pub struct LargeScale {
    los_state: SmoothGaussMarkov,
    sf_los: SmoothGaussMarkov,
    sf_nlos: SmoothGaussMarkov,
}

impl LargeScale {
    /// Draws a fresh channel of `env`. `sf_corr_m` overrides both shadow-fading correlation
    /// distances (used for Wi-Fi); `scale` multiplies every correlation distance.
    pub fn new<R: Rng + ?Sized>(
        env: Environment,
        sf_corr_m: Option<f64>,
        scale: f64,
        rng: &mut R,
    ) -> Self {
        let (los_m, nlos_m) = env.shadowing_corr_m();
        LargeScale {
            los_state: SmoothGaussMarkov::new(scale * env.los_corr_m(), rng),
            sf_los: SmoothGaussMarkov::new(scale * sf_corr_m.unwrap_or(los_m), rng),
            sf_nlos: SmoothGaussMarkov::new(scale * sf_corr_m.unwrap_or(nlos_m), rng),
        }
    }

    /// The UE moved `delta_m` metres.
    pub fn advance<R: Rng + ?Sized>(&mut self, delta_m: f64, rng: &mut R) {
        self.los_state.advance(delta_m, rng);
        self.sf_los.advance(delta_m, rng);
        self.sf_nlos.advance(delta_m, rng);
    }

    //= 3GPP TR 38.901 V17 §7.6.3.1
    //# the LOS state is determined by comparing a spatially consistent uniform random
    //# variable with the LOS probability
    /// Whether the link is LOS at horizontal distance `d2d` (UE at `h_ut`) in `env` under
    /// `mode`.
    pub fn is_los(&self, env: Environment, d2d: f64, h_ut: f64, mode: LosMode) -> bool {
        match mode {
            LosMode::Los => true,
            LosMode::Nlos => false,
            LosMode::Stochastic => {
                normal_cdf(self.los_state.value()) < env.los_probability(d2d, h_ut)
            }
        }
    }

    /// The unit-variance shadow-fading variable of the given state.
    pub fn shadow_unit(&self, los: bool) -> f64 {
        if los {
            self.sf_los.value()
        } else {
            self.sf_nlos.value()
        }
    }

    /// Shadow fading in dB for the given state: σ · (√ρ · common + √(1 − ρ) · own), where
    /// `common` is the UE's site-independent component (of the same environment) and ρ the
    /// inter-site correlation (0.5 in 3GPP system-level calibrations, e.g. TR 36.814 Table
    /// A.2.1.1.2-3).
    pub fn shadow_db(&self, los: bool, sigma: f64, common: &LargeScale, rho: f64) -> f64 {
        let rho = rho.clamp(0.0, 1.0);
        sigma * (rho.sqrt() * common.shadow_unit(los) + (1.0 - rho).sqrt() * self.shadow_unit(los))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 0.01, "{a} vs {b}");
    }

    // Hand computations from TR 38.901 Table 7.4.1-1, hBS = 10 m, hUT = 1.5 m (so
    // hBS − hUT = 8.5 m, h'BS = 9 m, h'UT = 0.5 m).
    #[test]
    fn umi_breakpoint_by_hand() {
        // d'BP = 4 · 9 · 0.5 · 3.5e9 / 3e8 = 210 m; at 28 GHz: 1680 m.
        close(umi_breakpoint_m(3.5, 10.0, 1.5), 210.0);
        close(umi_breakpoint_m(28.0, 10.0, 1.5), 1680.0);
    }

    #[test]
    fn umi_los_by_hand() {
        // d2D = 100 m, 3.5 GHz: d3D = sqrt(100² + 8.5²) = 100.3606;
        // PL1 = 32.4 + 21·log10(100.3606) + 20·log10(3.5) = 32.4 + 42.0329 + 10.8814 = 85.3142.
        close(umi_los_path_loss_db(100.0, 3.5, 10.0, 1.5), 85.3142);
        // d2D = 250 m > d'BP = 210 m, 3.5 GHz: d3D = 250.1445;
        // PL2 = 32.4 + 40·log10(250.1445) + 10.8814 − 9.5·log10(210² + 8.5²)
        //     = 32.4 + 95.9292 + 10.8814 − 9.5·4.64515 (= 44.1289) = 95.0817 (to rounding).
        close(umi_los_path_loss_db(250.0, 3.5, 10.0, 1.5), 95.0801);
        // d2D = 100 m, 28 GHz (d'BP = 1680 m, so PL1): 32.4 + 42.0329 + 20·log10(28)
        //     = 32.4 + 42.0329 + 28.9432 = 103.3761.
        close(umi_los_path_loss_db(100.0, 28.0, 10.0, 1.5), 103.376);
        // d2D = 400 m, 28 GHz: d3D = 400.0903; 32.4 + 21·2.602158 + 28.9432 = 115.9885.
        close(umi_los_path_loss_db(400.0, 28.0, 10.0, 1.5), 115.9885);
    }

    #[test]
    fn umi_nlos_by_hand() {
        // d2D = 200 m, 3.5 GHz: d3D = 200.1805;
        // PL' = 35.3·log10(200.1805) + 22.4 + 21.3·log10(3.5) − 0
        //     = 35.3·2.301422 + 22.4 + 21.3·0.544068 = 81.2402 + 22.4 + 11.5887 = 115.2289;
        // PL_LOS(200) = 91.6112 < PL', so PL_NLOS = 115.2289.
        close(umi_nlos_path_loss_db(200.0, 3.5, 10.0, 1.5), 115.2288);
        // d2D = 50 m, 28 GHz: d3D = 50.7174;
        // PL' = 35.3·1.705157 + 22.4 + 21.3·1.447158 = 60.1920 + 22.4 + 30.8245 = 113.4165.
        close(umi_nlos_path_loss_db(50.0, 28.0, 10.0, 1.5), 113.4165);
        // d2D = 100 m, 3.5 GHz: 35.3·2.001563 + 22.4 + 11.5887 = 104.6438.
        close(umi_nlos_path_loss_db(100.0, 3.5, 10.0, 1.5), 104.6438);
        // hUT correction: −0.3·(hUT − 1.5): a 11.5 m UE loses 3 dB less (before the max).
        let a = 35.3 * d3d(300.0, 10.0, 11.5).log10() + 22.4 + 21.3 * 3.5f64.log10() - 3.0;
        close(umi_nlos_path_loss_db(300.0, 3.5, 10.0, 11.5), a);
    }

    #[test]
    fn nlos_never_below_los() {
        for d in [10.0, 30.0, 100.0, 300.0, 1000.0, 4000.0] {
            for f in [0.7, 3.5, 28.0, 60.0] {
                assert!(
                    umi_nlos_path_loss_db(d, f, 10.0, 1.5) >= umi_los_path_loss_db(d, f, 10.0, 1.5)
                );
            }
        }
    }

    #[test]
    fn umi_los_probability_by_hand() {
        close(umi_los_probability(10.0), 1.0);
        close(umi_los_probability(18.0), 1.0);
        // 18/100 + exp(−100/36)·(1 − 0.18) = 0.18 + 0.062210·0.82 = 0.23098.
        assert!((umi_los_probability(100.0) - 0.230_985).abs() < 1e-5);
        // 18/200 + exp(−200/36)·0.91 = 0.09 + 0.003866·0.91 = 0.093518.
        assert!((umi_los_probability(200.0) - 0.093_518).abs() < 1e-5);
    }

    // Hand computations from TR 38.901 Table 7.4.1-1 and Table 7.4.2-1 for UMa, hBS = 25 m,
    // hUT = 1.5 m (hBS − hUT = 23.5 m, h'BS = 24 m, h'UT = 0.5 m), fc = 3.5 GHz.
    #[test]
    fn uma_by_hand() {
        // d'BP = 4 · 24 · 0.5 · 3.5e9 / 3e8 = 560 m.
        close(uma_breakpoint_m(3.5, 25.0, 1.5), 560.0);
        // PL1 = 28 + 22·log10(√(100² + 23.5²)) + 20·log10(3.5) = 28 + 44.2568 + 10.8814.
        close(uma_los_path_loss_db(100.0, 3.5, 25.0, 1.5), 83.1382);
        // Beyond the breakpoint: 28 + 40·log10(1000.276) + 10.8814 − 9·log10(560² + 23.5²).
        close(uma_los_path_loss_db(1000.0, 3.5, 25.0, 1.5), 109.4119);
        // PL' = 13.54 + 39.08·log10(201.376) + 10.8814, above the LOS value (89.5).
        close(uma_nlos_path_loss_db(200.0, 3.5, 25.0, 1.5), 114.4620);
        // 18/100 + exp(−100/63)·0.82 = 0.18 + 0.204486·0.82; a UE at 18 m sees more LOS:
        // C' = 0.5^1.5, × (1 + 0.353553·1.25·exp(−2/3)).
        assert!((uma_los_probability(100.0, 1.5) - 0.347_671).abs() < 1e-5);
        assert!((uma_los_probability(100.0, 18.0) - 0.426_558).abs() < 1e-5);
        close(uma_los_probability(18.0, 1.5), 1.0);
        let env = Environment::Uma;
        close(env.path_loss_db(false, 200.0, 3.5, 25.0, 1.5), 114.4620);
        close(env.shadowing_std_db(false), 6.0);
        assert_eq!(env.shadowing_corr_m(), (37.0, 50.0));
        close(env.default_height_m(), 25.0);
    }

    #[test]
    fn shadowing_keeps_its_correlation_distance_and_moves_smoothly_within_a_period() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (mut far, mut near, mut n) = ((0.0, 0.0), 0.0, 0.0);
        for _ in 0..20_000 {
            let mut ch = LargeScale::new(Environment::Umi, None, 1.0, &mut rng);
            let x = ch.shadow_unit(false);
            // One 40 ms measurement period at 12 m/s.
            ch.advance(0.48, &mut rng);
            let y = ch.shadow_unit(false);
            near += (y - x) * (y - x);
            ch.advance(UMI_SF_CORR_NLOS_M - 0.48, &mut rng);
            far.0 += x * ch.shadow_unit(false);
            far.1 += x * x;
            n += 1.0;
        }
        // 1/e at the TR 38.901 correlation distance (13 m in UMi NLOS).
        let rho = far.0 / far.1;
        assert!((rho - (-1.0f64).exp()).abs() < 0.03, "{rho}");
        // Over 0.48 m the smooth process moves by √(2·(1 − (1 + r)·e^(−r))) = 0.077 σ
        // (r = 0.48 m · 2.146 / 13 m); the exponential one would move by
        // √(2·(1 − e^(−0.48/13))) = 0.27 σ, 2.1 dB of the 7.82 dB.
        let rms = (near / n).sqrt();
        assert!((rms / 0.0772 - 1.0).abs() < 0.1, "{rms}");
    }

    #[test]
    fn a_correlation_scale_stretches_every_correlation_distance() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let scale = 3.0;
        let (mut los, mut sf) = ((0.0, 0.0), (0.0, 0.0));
        for _ in 0..20_000 {
            let mut ch = LargeScale::new(Environment::Umi, None, scale, &mut rng);
            let (l, x) = (ch.los_state.value(), ch.shadow_unit(false));
            ch.advance(scale * UMI_SF_CORR_NLOS_M, &mut rng);
            sf.0 += x * ch.shadow_unit(false);
            sf.1 += x * x;
            ch.advance(scale * (UMI_LOS_CORR_M - UMI_SF_CORR_NLOS_M), &mut rng);
            los.0 += l * ch.los_state.value();
            los.1 += l * l;
        }
        // 1/e at three times TR 38.901's 13 m (shadowing, NLOS) and 50 m (LOS state).
        for rho in [sf.0 / sf.1, los.0 / los.1] {
            assert!((rho - (-1.0f64).exp()).abs() < 0.03, "{rho}");
        }
    }

    #[test]
    fn noise_and_wifi() {
        // −174 + 10·log10(100e6) + 9 = −174 + 80 + 9.
        close(thermal_noise_dbm(100e6, 9.0), -85.0);
        // 5 GHz, 1 m: 20·log10(4π·5e9/3e8) = 46.4205; 10 m at n = 3: +30.
        close(wifi_path_loss_db(1.0, 5.0, 3.0), 46.4205);
        close(wifi_path_loss_db(10.0, 5.0, 3.0), 76.4205);
    }

    #[test]
    fn lifi_cone() {
        let p = LifiParams::default();
        // Directly below at 2.25 m: m = 1, H = 2·1e-4/(2π·2.25²) = 6.288e-6,
        // I = 0.53·6.288e-6 = 3.333e-6 A, SNR = I²/(1e-21·20e6) = 555.4 -> 27.45 dB.
        let (rx_dbm, snr) = p.receive(0.0, 2.25, 20e6).unwrap();
        // P_rx = 6.288e-6 W = -22.01 dBm.
        assert!((rx_dbm + 22.01).abs() < 0.02, "{rx_dbm}");
        assert!((snr - 27.45).abs() < 0.02, "{snr}");
        // At the cone edge (60°) r = 2.25·tan 60° = 3.897 m; just outside there is nothing.
        assert!(p.receive(3.89, 2.25, 20e6).is_some());
        assert!(p.receive(3.91, 2.25, 20e6).is_none());
    }
}
