//! Throughput predictors giving a per-path predicted rate T_i (LAMP5G §IV): oracle, noisy
//! and biased oracle, harmonic mean and EWMA of recent delivered rates, and gradient-boosted
//! trees trained offline on the raca5g traces (`crates/ran/model/train_predictor.py`).

use crate::config::{PredictorConfig, PredictorKind};
use crate::dist::std_normal;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::collections::VecDeque;

/// What a predictor may look at when it is asked for the next period's rate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Observation {
    /// Rate delivered (or, without traffic, available) over the period just ended (bit/s).
    pub delivered_bps: f64,
    /// True current capacity of the link (bit/s); only oracles may use it.
    pub capacity_bps: f64,
    /// Serving-cell RSRP (dBm).
    pub rsrp_dbm: f64,
    /// Serving-cell RSRQ (dB).
    pub rsrq_db: f64,
    /// Serving-cell SINR (dB).
    pub sinr_db: f64,
    /// CQI in use.
    pub cqi: f64,
    /// UE speed (m/s).
    pub speed_mps: f64,
    /// Whether the serving cell is 5G NR (else LTE or non-3GPP).
    pub is_5g: bool,
}

/// A throughput predictor: fed one observation per period, answers the next period's rate.
pub trait Predictor {
    /// Records `obs` and returns the predicted rate for the next period (bit/s, ≥ 0).
    fn observe_and_predict(&mut self, obs: &Observation) -> f64;
}

/// The current true capacity.
#[derive(Debug, Clone, Default)]
pub struct Oracle;

impl Predictor for Oracle {
    fn observe_and_predict(&mut self, obs: &Observation) -> f64 {
        obs.capacity_bps.max(0.0)
    }
}

/// The true capacity × `bias` × `exp(σ·N(0,1))`: `bias` < 1 studies under-estimation,
/// > 1 over-estimation; σ adds log-normal noise (median-unbiased).
#[derive(Debug, Clone)]
pub struct NoisyOracle {
    bias: f64,
    sigma: f64,
    rng: ChaCha8Rng,
}

impl NoisyOracle {
    /// A noisy oracle with its own seed.
    pub fn new(bias: f64, sigma: f64, seed: u64) -> Self {
        NoisyOracle {
            bias,
            sigma,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl Predictor for NoisyOracle {
    fn observe_and_predict(&mut self, obs: &Observation) -> f64 {
        let noise = if self.sigma > 0.0 {
            (self.sigma * std_normal(&mut self.rng)).exp()
        } else {
            1.0
        };
        (obs.capacity_bps * self.bias * noise).max(0.0)
    }
}

/// Harmonic mean of the last `window` delivered rates (each floored at `floor_bps` so a
/// zero sample does not force the mean to zero), as in FESTIVE/MPC-style rate estimation.
#[derive(Debug, Clone)]
pub struct HarmonicMean {
    window: usize,
    floor_bps: f64,
    samples: VecDeque<f64>,
}

impl HarmonicMean {
    /// A harmonic-mean predictor over `window` samples.
    pub fn new(window: usize, floor_bps: f64) -> Self {
        HarmonicMean {
            window: window.max(1),
            floor_bps,
            samples: VecDeque::new(),
        }
    }

    /// The harmonic mean of the samples held (0 with none).
    pub fn value(&self) -> f64 {
        if self.samples.is_empty() {
            return 0.0;
        }
        let inv: f64 = self.samples.iter().map(|x| 1.0 / x).sum();
        self.samples.len() as f64 / inv
    }

    /// Adds a sample.
    pub fn push(&mut self, x: f64) {
        if self.samples.len() == self.window {
            self.samples.pop_front();
        }
        self.samples.push_back(x.max(self.floor_bps));
    }
}

impl Predictor for HarmonicMean {
    fn observe_and_predict(&mut self, obs: &Observation) -> f64 {
        self.push(obs.delivered_bps);
        self.value()
    }
}

/// Exponentially weighted moving average of delivered rates, started at the first sample.
#[derive(Debug, Clone)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

impl Ewma {
    /// An EWMA with weight `alpha` on the newest sample.
    pub fn new(alpha: f64) -> Self {
        Ewma { alpha, value: None }
    }

    /// Adds a sample and returns the average.
    pub fn push(&mut self, x: f64) -> f64 {
        let v = match self.value {
            None => x,
            Some(e) => self.alpha * x + (1.0 - self.alpha) * e,
        };
        self.value = Some(v);
        v
    }
}

impl Predictor for Ewma {
    fn observe_and_predict(&mut self, obs: &Observation) -> f64 {
        self.push(obs.delivered_bps).max(0.0)
    }
}

/// A problem loading a model file.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ModelError {
    /// The file.
    pub file: String,
    /// What is wrong (names the field where it can).
    pub message: String,
}

#[derive(Debug, Clone, Deserialize)]
struct TreeJson {
    feature: Vec<i64>,
    threshold: Vec<f64>,
    left: Vec<i64>,
    right: Vec<i64>,
    value: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize)]
struct ModelJson {
    format: String,
    features: Vec<String>,
    ewma_alpha: f64,
    hm_window: usize,
    hm_floor_mbps: f64,
    init: f64,
    learning_rate: f64,
    trees: Vec<TreeJson>,
}

#[derive(Debug, Clone, Copy)]
enum Node {
    Split {
        feature: usize,
        threshold: f64,
        left: usize,
        right: usize,
    },
    Leaf(f64),
}

/// Input features the model can use, by name as in the model file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feature {
    Rsrp,
    Rsrq,
    Snr,
    Cqi,
    SpeedKmh,
    Is5g,
    Lag1,
    Lag2,
    Lag3,
    Hm5,
    Ewma,
}

impl Feature {
    fn parse(s: &str) -> Option<Feature> {
        Some(match s {
            "rsrp" => Feature::Rsrp,
            "rsrq" => Feature::Rsrq,
            "snr" => Feature::Snr,
            "cqi" => Feature::Cqi,
            "speed_kmh" => Feature::SpeedKmh,
            "is_5g" => Feature::Is5g,
            "lag1" => Feature::Lag1,
            "lag2" => Feature::Lag2,
            "lag3" => Feature::Lag3,
            "hm5" => Feature::Hm5,
            "ewma" => Feature::Ewma,
            _ => return None,
        })
    }
}

/// A gradient-boosted regression-tree ensemble exported by `train_predictor.py`
/// (scikit-learn `GradientBoostingRegressor`, squared error): prediction =
/// `init + learning_rate · Σ_t tree_t(x)`, where each tree goes left when
/// `float32(x[feature]) <= threshold` (scikit-learn evaluates trees on float32 inputs).
#[derive(Debug, Clone)]
pub struct GbtModel {
    features: Vec<Feature>,
    init: f64,
    learning_rate: f64,
    trees: Vec<Vec<Node>>,
    ewma_alpha: f64,
    hm_window: usize,
    hm_floor_mbps: f64,
}

/// The model shipped with the crate (trained on raca5g; see `model/NOTICE`).
pub const BUNDLED_MODEL_JSON: &str = include_str!("../model/gbt_raca5g.json");

impl GbtModel {
    /// Parses and checks a model (every child index in range, no cycles possible because
    /// children must come after their parent, every feature known).
    pub fn from_json(text: &str, file: &str) -> Result<GbtModel, ModelError> {
        let err = |m: String| ModelError {
            file: file.into(),
            message: m,
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let raw: ModelJson = parse_model_json(&mut de).map_err(err)?;
        if raw.format != "polypath-gbt-v1" {
            return Err(err(format!("format: unsupported {:?}", raw.format)));
        }
        let features = raw
            .features
            .iter()
            .enumerate()
            .map(|(i, f)| {
                Feature::parse(f)
                    .ok_or_else(|| err(format!("features[{i}]: unknown feature {f:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !(raw.init.is_finite() && raw.learning_rate.is_finite()) {
            return Err(err("init / learning_rate: must be finite".into()));
        }
        if raw.hm_window == 0 || !(raw.ewma_alpha > 0.0 && raw.ewma_alpha <= 1.0) {
            return Err(err("hm_window / ewma_alpha: out of range".into()));
        }
        let mut trees = Vec::with_capacity(raw.trees.len());
        for (ti, t) in raw.trees.iter().enumerate() {
            let n = t.feature.len();
            if n == 0
                || t.threshold.len() != n
                || t.left.len() != n
                || t.right.len() != n
                || t.value.len() != n
            {
                return Err(err(format!(
                    "trees[{ti}]: arrays must be non-empty and of equal length"
                )));
            }
            let mut nodes = Vec::with_capacity(n);
            for i in 0..n {
                let (l, r) = (t.left[i], t.right[i]);
                if l < 0 && r < 0 {
                    if !t.value[i].is_finite() {
                        return Err(err(format!("trees[{ti}].value[{i}]: not finite")));
                    }
                    nodes.push(Node::Leaf(t.value[i]));
                    continue;
                }
                let ok = |c: i64| c > i as i64 && (c as usize) < n;
                let f = t.feature[i];
                if !ok(l)
                    || !ok(r)
                    || f < 0
                    || f as usize >= features.len()
                    || !t.threshold[i].is_finite()
                {
                    return Err(err(format!(
                        "trees[{ti}] node {i}: bad child, feature or threshold"
                    )));
                }
                nodes.push(Node::Split {
                    feature: f as usize,
                    threshold: t.threshold[i],
                    left: l as usize,
                    right: r as usize,
                });
            }
            trees.push(nodes);
        }
        Ok(GbtModel {
            features,
            init: raw.init,
            learning_rate: raw.learning_rate,
            trees,
            ewma_alpha: raw.ewma_alpha,
            hm_window: raw.hm_window,
            hm_floor_mbps: raw.hm_floor_mbps,
        })
    }

    /// The model shipped with the crate.
    pub fn bundled() -> Result<GbtModel, ModelError> {
        Self::from_json(BUNDLED_MODEL_JSON, "model/gbt_raca5g.json")
    }

    /// Number of input features.
    pub fn n_features(&self) -> usize {
        self.features.len()
    }

    /// Feature names in input order.
    pub fn feature_names(&self) -> Vec<&'static str> {
        self.features
            .iter()
            .map(|f| match f {
                Feature::Rsrp => "rsrp",
                Feature::Rsrq => "rsrq",
                Feature::Snr => "snr",
                Feature::Cqi => "cqi",
                Feature::SpeedKmh => "speed_kmh",
                Feature::Is5g => "is_5g",
                Feature::Lag1 => "lag1",
                Feature::Lag2 => "lag2",
                Feature::Lag3 => "lag3",
                Feature::Hm5 => "hm5",
                Feature::Ewma => "ewma",
            })
            .collect()
    }

    /// Raw model output for a feature vector in the model's feature order (missing
    /// trailing values count as 0).
    pub fn predict(&self, x: &[f64]) -> f64 {
        let mut sum = 0.0;
        for t in &self.trees {
            let mut i = 0usize;
            // Children always have larger indices, so this walk ends within t.len() steps.
            for _ in 0..t.len() {
                match t.get(i) {
                    Some(Node::Split {
                        feature,
                        threshold,
                        left,
                        right,
                    }) => {
                        // scikit-learn trees compare inputs converted to float32.
                        let v = x.get(*feature).copied().unwrap_or(0.0) as f32 as f64;
                        i = if v <= *threshold { *left } else { *right };
                    }
                    Some(Node::Leaf(v)) => {
                        sum += v;
                        break;
                    }
                    None => break,
                }
            }
        }
        self.init + self.learning_rate * sum
    }
}

fn parse_model_json(
    de: &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
) -> Result<ModelJson, String> {
    let v = ModelJson::deserialize(&mut *de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(v)
}

/// The learned predictor: keeps the rate history (in Mbit/s, the model's unit) and builds
/// the model's features from it and the observation.
#[derive(Debug, Clone)]
pub struct GbtPredictor {
    model: GbtModel,
    history: VecDeque<f64>,
    ewma: Ewma,
}

impl GbtPredictor {
    /// Wraps a model.
    pub fn new(model: GbtModel) -> Self {
        let ewma = Ewma::new(model.ewma_alpha);
        GbtPredictor {
            model,
            history: VecDeque::new(),
            ewma,
        }
    }

    /// Feeds an observation and returns the feature vector (model order) it yields.
    pub fn features(&mut self, obs: &Observation) -> Vec<f64> {
        let mbps = obs.delivered_bps / 1e6;
        let e = self.ewma.push(mbps);
        let keep = self.model.hm_window.max(3);
        if self.history.len() == keep {
            self.history.pop_front();
        }
        self.history.push_back(mbps);
        let lag = |k: usize| {
            let n = self.history.len();
            // With a short history, the oldest sample stands in for the missing ones.
            self.history
                .get(n.saturating_sub(k))
                .or(self.history.front())
                .copied()
                .unwrap_or(0.0)
        };
        let w = self.model.hm_window.min(self.history.len()).max(1);
        // Oldest to newest, in the same order as the training script sums.
        let inv: f64 = self
            .history
            .iter()
            .skip(self.history.len() - w)
            .map(|x| 1.0 / x.max(self.model.hm_floor_mbps))
            .sum();
        let hm = w as f64 / inv;
        self.model
            .features
            .iter()
            .map(|f| match f {
                Feature::Rsrp => obs.rsrp_dbm,
                Feature::Rsrq => obs.rsrq_db,
                Feature::Snr => obs.sinr_db,
                Feature::Cqi => obs.cqi,
                Feature::SpeedKmh => obs.speed_mps * 3.6,
                Feature::Is5g => f64::from(u8::from(obs.is_5g)),
                Feature::Lag1 => lag(1),
                Feature::Lag2 => lag(2),
                Feature::Lag3 => lag(3),
                Feature::Hm5 => hm,
                Feature::Ewma => e,
            })
            .collect()
    }
}

impl Predictor for GbtPredictor {
    fn observe_and_predict(&mut self, obs: &Observation) -> f64 {
        let x = self.features(obs);
        (self.model.predict(&x) * 1e6).max(0.0)
    }
}

/// Any of the predictors, built from a [`PredictorConfig`].
#[derive(Debug, Clone)]
pub enum AnyPredictor {
    /// [`Oracle`].
    Oracle(Oracle),
    /// [`NoisyOracle`].
    NoisyOracle(Box<NoisyOracle>),
    /// [`HarmonicMean`].
    HarmonicMean(HarmonicMean),
    /// [`Ewma`].
    Ewma(Ewma),
    /// [`GbtPredictor`].
    Gbt(Box<GbtPredictor>),
}

impl AnyPredictor {
    /// Builds the predictor a configuration describes; `model` is the loaded GBT model for
    /// `gbt` predictors.
    pub fn from_config(cfg: &PredictorConfig, seed: u64, model: Option<&GbtModel>) -> Option<Self> {
        Some(match cfg.kind {
            PredictorKind::Oracle => AnyPredictor::Oracle(Oracle),
            PredictorKind::NoisyOracle => AnyPredictor::NoisyOracle(Box::new(NoisyOracle::new(
                cfg.bias,
                cfg.noise_sigma,
                seed,
            ))),
            PredictorKind::HarmonicMean => {
                AnyPredictor::HarmonicMean(HarmonicMean::new(cfg.window, 1e3))
            }
            PredictorKind::Ewma => AnyPredictor::Ewma(Ewma::new(cfg.alpha)),
            PredictorKind::Gbt => AnyPredictor::Gbt(Box::new(GbtPredictor::new(model?.clone()))),
        })
    }
}

impl Predictor for AnyPredictor {
    fn observe_and_predict(&mut self, obs: &Observation) -> f64 {
        match self {
            AnyPredictor::Oracle(p) => p.observe_and_predict(obs),
            AnyPredictor::NoisyOracle(p) => p.observe_and_predict(obs),
            AnyPredictor::HarmonicMean(p) => p.observe_and_predict(obs),
            AnyPredictor::Ewma(p) => p.observe_and_predict(obs),
            AnyPredictor::Gbt(p) => p.observe_and_predict(obs),
        }
    }
}

/// Error summary of a predictor against actual rates.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ErrorStats {
    /// Number of predictions.
    pub n: usize,
    /// Mean absolute error (same unit as the inputs).
    pub mae: f64,
    /// Share of predictions below half the actual rate (large under-estimates): relative
    /// error `(pred − actual) / max(actual, floor)` < −0.5.
    pub large_under: f64,
    /// Share of predictions above 1.5 × the actual rate (relative error > +0.5).
    pub large_over: f64,
}

impl ErrorStats {
    /// Computes the statistics; `floor` keeps the relative error finite at zero rates.
    pub fn compute(pairs: &[(f64, f64)], floor: f64) -> ErrorStats {
        let n = pairs.len();
        if n == 0 {
            return ErrorStats::default();
        }
        let mut abs = 0.0;
        let (mut under, mut over) = (0usize, 0usize);
        for (pred, actual) in pairs {
            abs += (pred - actual).abs();
            let rel = (pred - actual) / actual.max(floor);
            if rel < -0.5 {
                under += 1;
            } else if rel > 0.5 {
                over += 1;
            }
        }
        ErrorStats {
            n,
            mae: abs / n as f64,
            large_under: under as f64 / n as f64,
            large_over: over as f64 / n as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(bps: f64) -> Observation {
        Observation {
            delivered_bps: bps,
            capacity_bps: bps,
            ..Default::default()
        }
    }

    #[test]
    fn harmonic_mean_and_ewma_by_hand() {
        let mut h = HarmonicMean::new(3, 1.0);
        h.observe_and_predict(&obs(10.0));
        h.observe_and_predict(&obs(20.0));
        // 2 / (1/10 + 1/20) = 13.333
        assert!((h.value() - 40.0 / 3.0).abs() < 1e-9);
        h.observe_and_predict(&obs(40.0));
        h.observe_and_predict(&obs(40.0)); // window drops the 10
        assert!((h.value() - 3.0 / (1.0 / 20.0 + 2.0 / 40.0)).abs() < 1e-9);
        let mut e = Ewma::new(0.5);
        assert_eq!(e.observe_and_predict(&obs(10.0)), 10.0);
        assert_eq!(e.observe_and_predict(&obs(20.0)), 15.0);
    }

    #[test]
    fn noisy_oracle_bias() {
        let mut o = NoisyOracle::new(0.5, 0.0, 1);
        assert_eq!(o.observe_and_predict(&obs(100.0)), 50.0);
        let mut n = NoisyOracle::new(1.0, 0.3, 1);
        let v: Vec<f64> = (0..2000)
            .map(|_| n.observe_and_predict(&obs(100.0)))
            .collect();
        let mut s = v.clone();
        s.sort_by(f64::total_cmp);
        assert!((s[1000] / 100.0 - 1.0).abs() < 0.05, "median-unbiased");
        assert_eq!(Oracle.observe_and_predict(&obs(7.0)), 7.0);
    }

    #[test]
    fn error_stats() {
        let s = ErrorStats::compute(&[(10.0, 10.0), (4.0, 10.0), (16.0, 10.0), (0.0, 0.0)], 1.0);
        assert_eq!(s.n, 4);
        assert!((s.mae - 3.0).abs() < 1e-12);
        assert_eq!(s.large_under, 0.25);
        assert_eq!(s.large_over, 0.25);
    }

    #[test]
    fn model_rejects_bad_input() {
        assert!(GbtModel::from_json("{", "x").is_err());
        let bad_child = r#"{"format":"polypath-gbt-v1","features":["rsrp"],"ewma_alpha":0.3,
            "hm_window":5,"hm_floor_mbps":0.001,"init":1.0,"learning_rate":0.1,
            "trees":[{"feature":[0,-2],"threshold":[1.0,-2.0],"left":[0,-1],"right":[1,-1],"value":[0.0,1.0]}]}"#;
        assert!(GbtModel::from_json(bad_child, "x").is_err());
        let unknown = bad_child.replace("\"rsrp\"", "\"foo\"");
        assert!(
            GbtModel::from_json(&unknown, "x")
                .unwrap_err()
                .to_string()
                .contains("features[0]")
        );
        let ok = r#"{"format":"polypath-gbt-v1","features":["rsrp"],"ewma_alpha":0.3,
            "hm_window":5,"hm_floor_mbps":0.001,"init":1.0,"learning_rate":0.5,
            "trees":[{"feature":[0,-2,-2],"threshold":[-90.0,-2.0,-2.0],"left":[1,-1,-1],"right":[2,-1,-1],"value":[0.0,2.0,4.0]}]}"#;
        let m = GbtModel::from_json(ok, "x").unwrap();
        assert_eq!(m.predict(&[-95.0]), 2.0);
        assert_eq!(m.predict(&[-90.0]), 2.0, "<= goes left");
        assert_eq!(m.predict(&[-80.0]), 3.0);
    }

    #[test]
    fn bundled_model_loads() {
        let m = GbtModel::bundled().unwrap();
        assert_eq!(m.n_features(), 11);
        assert_eq!(m.feature_names()[6], "lag1");
    }
}
