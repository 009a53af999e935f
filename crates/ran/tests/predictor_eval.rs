//! Must-show 5: the learned predictor (gradient-boosted trees trained by
//! `crates/ran/model/train_predictor.py` on raca5g) evaluated on the held-out traces next to
//! the simple predictors, and checked against the Python predictions. Run with
//! `--nocapture` for the error table.

use polypath_ran::predict::{
    ErrorStats, Ewma, GbtModel, GbtPredictor, HarmonicMean, NoisyOracle, Observation, Oracle,
    Predictor,
};
use std::collections::BTreeMap;

struct Row {
    trace: String,
    second: u64,
    raw: [f64; 6], // rsrp, rsrq, snr, cqi, speed_kmh, is_5g
    features: Vec<f64>,
    target: f64,
    py_pred: f64,
}

fn load() -> Vec<Row> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/model/heldout_raca5g.csv");
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        header,
        [
            "trace",
            "second",
            "rsrp",
            "rsrq",
            "snr",
            "cqi",
            "speed_kmh",
            "is_5g",
            "lag1",
            "lag2",
            "lag3",
            "hm5",
            "ewma",
            "target",
            "pred"
        ]
    );
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let n = |i: usize| f[i].parse::<f64>().unwrap();
            Row {
                trace: f[0].to_string(),
                second: f[1].parse().unwrap(),
                raw: [n(2), n(3), n(4), n(5), n(6), n(7)],
                features: (2..13).map(n).collect(),
                target: n(13),
                py_pred: n(14),
            }
        })
        .collect()
}

fn obs(r: &Row) -> Observation {
    Observation {
        delivered_bps: r.features[6] * 1e6, // lag1: the rate of the second just ended
        capacity_bps: r.target * 1e6,       // the oracle sees the truth
        rsrp_dbm: r.raw[0],
        rsrq_db: r.raw[1],
        sinr_db: r.raw[2],
        cqi: r.raw[3],
        speed_mps: r.raw[4] / 3.6,
        is_5g: r.raw[5] > 0.5,
    }
}

#[test]
fn rust_gbt_matches_python_on_held_out_rows() {
    let model = GbtModel::bundled().unwrap();
    let rows = load();
    assert!(rows.len() > 1000);
    let mut worst: f64 = 0.0;
    for r in &rows {
        let p = model.predict(&r.features);
        worst = worst.max((p - r.py_pred).abs() / r.py_pred.abs().max(1.0));
    }
    println!(
        "max relative difference Rust vs Python over {} rows: {worst:.2e}",
        rows.len()
    );
    assert!(worst < 1e-9, "{worst}");
}

#[test]
fn rust_feature_pipeline_matches_training_features() {
    let model = GbtModel::bundled().unwrap();
    let rows = load();
    let mut by_trace: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        by_trace.entry(&r.trace).or_default().push(r);
    }
    let mut worst: f64 = 0.0;
    for rs in by_trace.values() {
        assert!(
            rs.windows(2).all(|w| w[1].second == w[0].second + 1),
            "consecutive seconds"
        );
        let mut p = GbtPredictor::new(model.clone());
        for r in rs {
            let x = p.features(&obs(r));
            for (a, b) in x.iter().zip(&r.features) {
                worst = worst.max((a - b).abs() / b.abs().max(1.0));
            }
        }
    }
    assert!(worst < 1e-9, "{worst}");
}

#[test]
fn error_table_on_held_out_traces() {
    let model = GbtModel::bundled().unwrap();
    let rows = load();
    let mut by_trace: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        by_trace.entry(&r.trace).or_default().push(r);
    }
    type Mk = Box<dyn Fn() -> Box<dyn Predictor>>;
    let predictors: Vec<(&str, Mk)> = vec![
        ("oracle", Box::new(|| Box::new(Oracle))),
        (
            "oracle x0.7 (under)",
            Box::new(|| Box::new(NoisyOracle::new(0.7, 0.0, 1))),
        ),
        (
            "oracle x1.3 (over)",
            Box::new(|| Box::new(NoisyOracle::new(1.3, 0.0, 1))),
        ),
        (
            "oracle, noise sigma 0.3",
            Box::new(|| Box::new(NoisyOracle::new(1.0, 0.3, 1))),
        ),
        (
            "last value",
            Box::new(|| Box::new(HarmonicMean::new(1, 1e3))),
        ),
        (
            "harmonic mean (5 s)",
            Box::new(|| Box::new(HarmonicMean::new(5, 1e3))),
        ),
        ("EWMA (alpha 0.3)", Box::new(|| Box::new(Ewma::new(0.3)))),
        (
            "GBT (learned)",
            Box::new({
                let m = model.clone();
                move || Box::new(GbtPredictor::new(m.clone()))
            }),
        ),
    ];
    println!(
        "held-out raca5g: {} one-second predictions from {} traces; rates in Mbit/s",
        rows.len(),
        by_trace.len()
    );
    println!(
        "{:<26}{:>9}{:>16}{:>15}",
        "predictor", "MAE", "under <-50%", "over >+50%"
    );
    let mut stats = BTreeMap::new();
    for (name, mk) in &predictors {
        let mut pairs = Vec::new();
        for rs in by_trace.values() {
            let mut p = mk();
            for r in rs {
                let pred = p.observe_and_predict(&obs(r)) / 1e6;
                pairs.push((pred, r.target));
            }
        }
        let s = ErrorStats::compute(&pairs, 1.0);
        println!(
            "{name:<26}{:>9.2}{:>15.1}%{:>14.1}%",
            s.mae,
            100.0 * s.large_under,
            100.0 * s.large_over
        );
        stats.insert(*name, s);
    }
    let gbt = stats["GBT (learned)"];
    assert_eq!(stats["oracle"].mae, 0.0);
    assert!(
        gbt.mae < stats["harmonic mean (5 s)"].mae,
        "the learned model beats the harmonic mean"
    );
    assert!(gbt.mae < stats["EWMA (alpha 0.3)"].mae, "and the EWMA");
}
