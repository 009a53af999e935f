//! Predicted throughput for links without the radio model: a link direction's
//! `predictor = { ... }` (a rule of `polypath_ran::predict` or a prediction file) reports
//! every `period`, like a modem reporting its throughput estimate, and each report reaches
//! the agents of the told hosts as a `predicted_throughput` link event, the way the radio
//! model's `[[radio.predictors]]` reach a UE. LAMP5G (the LAMP5G paper, Section IV-A) reads
//! it as the path's predicted link throughput `T_i`.
//!
//! The rules are the radio model's own predictor implementations
//! ([`polypath_ran::predict::AnyPredictor`]); only their inputs differ: the truth an oracle
//! reads is the direction's capacity over the coming period, computed from the scenario
//! ([`LinkDirection::capacity_bits`]), and the history rules average the capacity (or, with
//! `observe = "delivered"`, the delivered bytes) of each period just ended.

use std::net::IpAddr;
use std::sync::Arc;

use polypath_ran::config::{PredictorConfig, PredictorKind};
use polypath_ran::predict::{AnyPredictor, Observation, Predictor};
use polypath_scenario::trace::RateTrace;
use polypath_scenario::{
    LinkDirection, PredictionInput, PredictionTell, PredictorSource, Scenario, Side,
};

use crate::engine::derive_seed;
use crate::error::SimError;

/// Where a link direction's predictions come from, at run time.
pub(crate) enum PredSource {
    /// A predictor rule; `history` when it needs a period of observations first (EWMA,
    /// harmonic mean), so it first reports at the end of its first period.
    Rule {
        predictor: Box<AnyPredictor>,
        history: bool,
    },
    /// A prediction file: sample `k` holds for `[k * step, (k + 1) * step)`.
    File(Arc<RateTrace>),
}

/// One link direction's predictor.
pub(crate) struct LinkPredictorRt {
    /// The direction (`link * 2` for up, `+ 1` for down).
    pub dir: u32,
    /// Its description in the scenario.
    pub spec: LinkDirection,
    /// Report period, ns.
    pub period_ns: u64,
    /// Name in the events.
    pub name: String,
    /// The rule or file the predictions come from.
    pub source: PredSource,
    /// What the history rules average.
    pub observe: PredictionInput,
    /// Told interfaces: (host, interface index, address), hosts and interfaces in file
    /// order.
    pub told: Vec<(u32, u16, IpAddr)>,
    /// The direction's delivered bytes at the previous report.
    pub last_delivered: u64,
}

impl LinkPredictorRt {
    /// The time of the first report, ns: at once for oracles and files (they predict the
    /// coming period), after one period for the history rules.
    pub fn first_report_ns(&self) -> u64 {
        match &self.source {
            PredSource::Rule { history: true, .. } => self.period_ns,
            _ => 0,
        }
    }

    /// The prediction at `now_ns` (bit/s) given the bytes the direction has delivered so
    /// far, or `None` once a prediction file has run out. Also returns the direction's
    /// true mean capacity over the coming period (bit/s), if it is known ahead.
    pub fn report(&mut self, now_ns: u64, delivered_total: u64) -> (Option<f64>, Option<f64>) {
        let period = self.period_ns.max(1);
        let secs = period as f64 / 1e9;
        let at = |ns: u64| std::time::Duration::from_nanos(ns);
        let ahead = self
            .spec
            .capacity_bits(at(now_ns), at(now_ns.saturating_add(period)))
            .map(|b| b / secs);
        let delivered_bytes = delivered_total.saturating_sub(self.last_delivered);
        self.last_delivered = delivered_total;
        let bps = match &mut self.source {
            PredSource::File(trace) => {
                let step = u64::try_from(trace.step.as_nanos())
                    .unwrap_or(u64::MAX)
                    .max(1);
                usize::try_from(now_ns / step)
                    .ok()
                    .and_then(|k| trace.rates_bps.get(k).copied())
            }
            PredSource::Rule { predictor, .. } => {
                let past = self
                    .spec
                    .capacity_bits(at(now_ns.saturating_sub(period)), at(now_ns))
                    .map(|b| b / secs)
                    .unwrap_or(0.0);
                let obs = Observation {
                    delivered_bps: match self.observe {
                        PredictionInput::Capacity => past,
                        PredictionInput::Delivered => delivered_bytes as f64 * 8.0 / secs,
                    },
                    capacity_bps: ahead.unwrap_or(0.0),
                    ..Observation::default()
                };
                Some(predictor.observe_and_predict(&obs))
            }
        };
        (
            bps.map(|b| if b.is_finite() { b.max(0.0) } else { 0.0 }),
            ahead,
        )
    }
}

/// Builds the predictors of the scenario's link directions. Errors (an unknown rule, a
/// parameter out of range) name the scenario file, the line and the field.
pub(crate) fn build(scenario: &Scenario, seed: u64) -> Result<Vec<LinkPredictorRt>, SimError> {
    let mut out = Vec::new();
    for (li, l) in scenario.links.iter().enumerate() {
        for (k, d) in [&l.up, &l.down].into_iter().enumerate() {
            let Some(p) = &d.predictor else { continue };
            let dir = (li * 2 + k) as u32;
            let source = match &p.source {
                PredictorSource::File { trace, .. } => PredSource::File(trace.clone()),
                PredictorSource::Rule(rule) => {
                    let err = |key: &str, msg: String| -> SimError {
                        scenario.error_at(&format!("{}.{key}", p.at), msg).into()
                    };
                    let kind: PredictorKind = toml::Value::String(rule.kind.clone())
                        .try_into()
                        .map_err(|_| {
                            err(
                                "kind",
                                format!(
                                    "unknown predictor `{}`; a link takes oracle, noisy_oracle, harmonic_mean or ewma",
                                    rule.kind
                                ),
                            )
                        })?;
                    if kind == PredictorKind::Gbt {
                        return Err(err(
                            "kind",
                            "the learned model (gbt) reads the radio model's measurements, \
                             which a link without `radio` does not have; use oracle, \
                             noisy_oracle, harmonic_mean or ewma, or a prediction `file`"
                                .into(),
                        ));
                    }
                    let mut cfg = PredictorConfig::new(kind);
                    cfg.period_ms = p.period.as_secs_f64() * 1e3;
                    if let Some(v) = rule.bias {
                        cfg.bias = v;
                    }
                    if let Some(v) = rule.noise_sigma {
                        cfg.noise_sigma = v;
                    }
                    if let Some(v) = rule.window {
                        cfg.window = usize::try_from(v).unwrap_or(usize::MAX);
                    }
                    if let Some(v) = rule.alpha {
                        cfg.alpha = v;
                    }
                    if let Err((key, msg)) = cfg.check() {
                        let key = if key == "period_ms" { "period" } else { key };
                        return Err(err(key, msg.into()));
                    }
                    let s = derive_seed(seed, &[9, li as u64, k as u64]);
                    let predictor = AnyPredictor::from_config(&cfg, s, None)
                        .ok_or_else(|| err("kind", "cannot build this predictor".into()))?;
                    PredSource::Rule {
                        predictor: Box::new(predictor),
                        history: matches!(kind, PredictorKind::Ewma | PredictorKind::HarmonicMean),
                    }
                }
            };
            // Side A sends in the up direction (k = 0), side B in the down direction.
            let sender = if k == 0 { Side::A } else { Side::B };
            let told_sides: &[Side] = match p.tell {
                PredictionTell::Sender => &[sender],
                PredictionTell::Receiver => &[sender.other()],
                PredictionTell::Both => &[Side::A, Side::B],
            };
            let mut told = Vec::new();
            for (hi, h) in scenario.hosts.iter().enumerate() {
                for (ii, iface) in h.interfaces.iter().enumerate() {
                    if iface
                        .attach
                        .is_some_and(|a| a.link == li && told_sides.contains(&a.side))
                    {
                        told.push((hi as u32, u16::try_from(ii).unwrap_or(u16::MAX), iface.addr));
                    }
                }
            }
            out.push(LinkPredictorRt {
                dir,
                spec: d.clone(),
                period_ns: u64::try_from(p.period.as_nanos())
                    .unwrap_or(u64::MAX)
                    .max(1),
                name: p.name.clone(),
                source,
                observe: p.observe,
                told,
                last_delivered: 0,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(tell: &str) -> Scenario {
        let src = format!(
            "[sim]\nduration = \"1s\"\n\
             [[host]]\nname = \"ue\"\ninterfaces = [{{ name = \"x\", addr = \"10.0.0.9\" }}, \
             {{ name = \"nr\", addr = \"10.0.0.1\", link = \"l\", side = \"a\" }}]\n\
             [[host]]\nname = \"srv\"\ninterfaces = [{{ name = \"e\", addr = \"10.9.0.1\", link = \"l\", side = \"b\" }}]\n\
             [[link]]\nname = \"l\"\nrate = \"10Mbit/s\"\n\
             [link.down]\npredictor = {{ kind = \"oracle\", tell = \"{tell}\", period = \"250ms\" }}\n"
        );
        Scenario::parse(&src, std::path::Path::new("t.toml")).unwrap()
    }

    /// The down direction (side b sends) tells side b's interfaces by default, side a's
    /// with `receiver`, both with `both`; hosts and interfaces in file order.
    #[test]
    fn told_interfaces_follow_tell() {
        let told = |tell: &str| {
            let p = build(&scenario(tell), 1).unwrap();
            assert_eq!((p.len(), p[0].dir, p[0].period_ns), (1, 1, 250_000_000));
            p[0].told.clone()
        };
        let ue = (0, 1, "10.0.0.1".parse().unwrap());
        let srv = (1, 0, "10.9.0.1".parse().unwrap());
        assert_eq!(told("sender"), vec![srv]);
        assert_eq!(told("receiver"), vec![ue]);
        assert_eq!(told("both"), vec![ue, srv]);
    }

    /// An oracle reports at once and every period the capacity of the coming period; the
    /// delivered bytes do not matter to it.
    #[test]
    fn oracle_reports_the_coming_capacity() {
        let mut p = build(&scenario("sender"), 1).unwrap().remove(0);
        assert_eq!(p.first_report_ns(), 0);
        let (bps, truth) = p.report(0, 0);
        assert_eq!((bps, truth), (Some(10e6), Some(10e6)));
        assert_eq!(p.report(250_000_000, 123_456).0, Some(10e6));
    }
}
