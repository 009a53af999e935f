//! Predicted throughput of trace-driven links (`predictor = { ... }` of a link direction):
//! each rule's reports against the trace it predicts, prediction files, determinism, and
//! errors that name the scenario's line and field.

mod common;

use std::path::Path;

use common::*;
use polypath_sim::scenario::Scenario;
use polypath_sim::scenario::trace::load_lumos5g;
use polypath_sim::{Hooks, RunOptions, run_scenario};

/// The bundled Lumos5G multipath drive (5G column 1, the second link column 2).
const DRIVE: &str = "../traces/lumos5g/multipath/5g_trace_103_drivingmultipath";

/// Two hosts on one link per predictor, each link's down direction (b to a) replaying the
/// drive's first column and carrying `predictor = <p>`; no traffic.
fn scenario_with(predictors: &[(&str, &str)], seconds: u32) -> String {
    let mut hosts_a = Vec::new();
    let mut hosts_b = Vec::new();
    let mut links = String::new();
    for (i, (name, p)) in predictors.iter().enumerate() {
        hosts_a.push(format!(
            "{{ name = \"{name}\", addr = \"10.0.{i}.1\", link = \"{name}\", side = \"a\" }}"
        ));
        hosts_b.push(format!(
            "{{ name = \"{name}\", addr = \"10.9.{i}.1\", link = \"{name}\", side = \"b\" }}"
        ));
        links.push_str(&format!(
            "[[link]]\nname = \"{name}\"\nrate = \"50Mbit/s\"\n[link.down]\n\
             rate = {{ trace = \"{DRIVE}\", format = \"lumos5g\", column = 1 }}\npredictor = {p}\n"
        ));
    }
    format!(
        "[sim]\nduration = \"{seconds}s\"\nstop_when_done = false\n\
         [[host]]\nname = \"a\"\ninterfaces = [{}]\n[[host]]\nname = \"b\"\ninterfaces = [{}]\n{links}",
        hosts_a.join(", "),
        hosts_b.join(", ")
    )
}

/// `predictions.csv` rows of link `link`: (time s, predicted Mbit/s, true Mbit/s).
fn predictions(dir: &Path, link: &str) -> Vec<(f64, f64, f64)> {
    let text = std::fs::read_to_string(dir.join("predictions.csv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (c[1] == link && c[2] == "down").then(|| {
                (
                    c[0].parse().unwrap(),
                    c[4].parse().unwrap(),
                    c[5].parse().unwrap(),
                )
            })
        })
        .collect()
}

/// Each rule reports what its definition gives over the drive: the oracle the trace's rate
/// of the coming second, a biased oracle half of it, EWMA and harmonic mean the averages of
/// the seconds before (first report one second in), a prediction file its own lines. Runs
/// twice with the same seed to the same output hash (the noisy oracle draws from the run's
/// seed), and with another seed to another one.
#[test]
fn rules_and_files_predict_the_drive_as_defined() {
    let trace = load_lumos5g(
        &repo().join("traces/lumos5g/multipath/5g_trace_103_drivingmultipath"),
        1,
    )
    .unwrap()
    .rates_bps;
    let dir = tmp("link-predictors");
    // A prediction file: the drive's own rates one second late (a naive "last second" rule).
    let lagged: String = std::iter::once(trace[0])
        .chain(trace.iter().copied())
        .take(20)
        .enumerate()
        .map(|(i, r)| format!("{i}\t{}\n", r / 1e6))
        .collect();
    let file = dir.join("lagged.txt");
    std::fs::write(&file, lagged).unwrap();
    let file_key = format!("{{ file = \"{}\" }}", file.display());
    let src = scenario_with(
        &[
            ("oracle", "{ kind = \"oracle\" }"),
            ("half", "{ kind = \"noisy_oracle\", bias = 0.5 }"),
            ("noisy", "{ kind = \"noisy_oracle\", noise_sigma = 0.3 }"),
            ("ewma", "{ kind = \"ewma\", alpha = 0.5 }"),
            ("hm", "{ kind = \"harmonic_mean\", window = 3 }"),
            ("file", &file_key),
        ],
        30,
    );
    let s = scenario(&src);
    let out = dir.join("out");
    let r1 = run_with_out(&s, 1, Some(out.clone()));
    let mbps: Vec<f64> = trace.iter().map(|r| r / 1e6).collect();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-5 * b.max(1.0);

    let oracle = predictions(&out, "oracle");
    assert_eq!(
        oracle.len(),
        31,
        "reports at 0, 1, ..., 30 s (the run's end included)"
    );
    for (k, (t, p, truth)) in oracle.iter().enumerate() {
        assert!(close(*t, k as f64));
        assert!(
            close(*p, mbps[k]) && close(*truth, mbps[k]),
            "{k}: {p} vs {}",
            mbps[k]
        );
    }
    for (k, (_, p, _)) in predictions(&out, "half").iter().enumerate() {
        assert!(close(*p, mbps[k] / 2.0), "{k}");
    }
    let noisy = predictions(&out, "noisy");
    assert!(
        noisy.iter().zip(&mbps).any(|((_, p, _), m)| !close(*p, *m)),
        "noise"
    );
    let ewma = predictions(&out, "ewma");
    assert!(
        close(ewma[0].0, 1.0) && close(ewma[0].1, mbps[0]),
        "{:?}",
        ewma[0]
    );
    let mut e = mbps[0];
    for (k, (_, p, _)) in ewma.iter().enumerate().skip(1) {
        e = 0.5 * mbps[k] + 0.5 * e;
        assert!(close(*p, e), "ewma at {} s: {p} vs {e}", k + 1);
    }
    let hm = predictions(&out, "hm");
    let (a, b, c) = (mbps[2], mbps[3], mbps[4]);
    assert!(
        close(hm[4].1, 3.0 / (1.0 / a + 1.0 / b + 1.0 / c)),
        "{:?}",
        hm[4]
    );
    let file_rows = predictions(&out, "file");
    assert_eq!(
        file_rows.len(),
        20,
        "the file's 20 lines, then no more reports"
    );
    for (k, (_, p, truth)) in file_rows.iter().enumerate().skip(1) {
        assert!(close(*p, mbps[k - 1]) && close(*truth, mbps[k]), "{k}");
    }
    println!(
        "first 5 s of the drive, Mbit/s: truth {:?}; ewma {:?}; noisy {:?}",
        &mbps[..5],
        ewma.iter().take(5).map(|r| r.1).collect::<Vec<_>>(),
        noisy.iter().take(5).map(|r| r.1).collect::<Vec<_>>()
    );

    let r2 = run_with_out(&s, 1, Some(dir.join("again")));
    assert_eq!(r1.output_hash, r2.output_hash, "same seed, same outputs");
    let r3 = run_with_out(&s, 2, Some(dir.join("other")));
    assert_ne!(
        r1.output_hash, r3.output_hash,
        "the noisy oracle follows the seed"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Predictor rules the simulator cannot build are errors naming the scenario file, the
/// line and the field.
#[test]
fn bad_predictor_rules_name_the_line_and_field() {
    for (p, field, says) in [
        ("{ kind = \"crystal_ball\" }", "kind", "unknown predictor"),
        ("{ kind = \"gbt\" }", "kind", "radio model's measurements"),
        ("{ kind = \"ewma\", alpha = 1.5 }", "alpha", "(0, 1]"),
        (
            "{ kind = \"noisy_oracle\", bias = 0.0 }",
            "bias",
            "positive",
        ),
        (
            "{ kind = \"noisy_oracle\", noise_sigma = -1.0 }",
            "noise_sigma",
            "at least 0",
        ),
    ] {
        let src = scenario_with(&[("l", p)], 1);
        let s = scenario(&src);
        let opts = RunOptions {
            seed: Some(1),
            out_dir: None,
            progress: false,
            events: None,
        };
        let e = run_scenario(&s, &opts, Hooks::default())
            .err()
            .unwrap_or_else(|| panic!("{p}: no error"))
            .to_string();
        let line = src
            .lines()
            .position(|l| l.starts_with("predictor"))
            .unwrap()
            + 1;
        assert!(
            e.starts_with(&format!(
                "{}:{line}: field `link[0].down.predictor.{field}`",
                s.file.display()
            )),
            "{p}: {e}"
        );
        assert!(e.contains(says), "{p}: {e}");
    }
    // Not the scenario's own checks: an external rate has nothing to predict from.
    let src = scenario_with(&[("l", "{ kind = \"oracle\" }")], 1).replace(
        &format!("rate = {{ trace = \"{DRIVE}\", format = \"lumos5g\", column = 1 }}"),
        "rate = { source = \"feed\" }",
    );
    let e = Scenario::parse(&src, &repo().join("scenarios/inline-test.toml")).unwrap_err();
    assert_eq!(
        e.field.as_deref(),
        Some("link[0].down.predictor.kind"),
        "{e}"
    );
}
