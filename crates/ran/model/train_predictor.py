#!/usr/bin/env python3
"""Train the learned throughput predictor of polypath-ran (gradient-boosted regression trees)
on the raca5g traces and export it as JSON for the Rust side.

Target: the mean downlink rate (Mbit/s) of the next second. Features per second:
radio link state (RSRP, RSRQ, SNR, CQI, speed, 5G/LTE) and the recent delivered-rate history
(last three one-second rates, harmonic mean of the last five, EWMA with alpha 0.3). The Rust
predictor (`polypath_ran::predict::GbtPredictor`) computes exactly these features.

Split: whole trace files are held out (every fourth file in name order), so no second of a
held-out drive is seen in training. Everything is deterministic (fixed random_state).

Usage:
    python3 -m venv .venv && .venv/bin/pip install numpy pandas scikit-learn
    .venv/bin/python crates/ran/model/train_predictor.py [--traces DIR]

Writes, next to this script:
    gbt_raca5g.json       the model (trees, thresholds, leaf values, feature names)
    heldout_raca5g.csv    held-out rows: trace, second, raw inputs, features, target, prediction
and prints the held-out error of the model.

Data: raca5g (Raca et al., "Beyond throughput, the next generation: a 5G dataset with channel
and context metrics", MMSys 2020), GPL-3.0, see NOTICE.
"""

import argparse
import json
import os
import sys

import numpy as np
import pandas as pd
from sklearn.ensemble import GradientBoostingRegressor

HERE = os.path.dirname(os.path.abspath(__file__))
FEATURES = ["rsrp", "rsrq", "snr", "cqi", "speed_kmh", "is_5g", "lag1", "lag2", "lag3", "hm5", "ewma"]
EWMA_ALPHA = 0.3
HM_WINDOW = 5
HM_FLOOR = 0.001  # Mbit/s: samples are floored before the harmonic mean (a zero would make it 0)
SEED = 20260422


def load_trace(path):
    df = pd.read_csv(path, na_values=["-"])
    df = df[["Timestamp", "Speed", "NetworkMode", "RSRP", "RSRQ", "SNR", "CQI", "DL_bitrate"]]
    for c in ["RSRP", "RSRQ", "SNR", "CQI"]:
        df[c] = df[c].ffill()
    df = df.dropna()
    # Rows share one-second stamps: one sample per second = mean rate, last radio state.
    g = df.groupby("Timestamp", sort=False)
    sec = pd.DataFrame(
        {
            "rsrp": g["RSRP"].last().astype(float),
            "rsrq": g["RSRQ"].last().astype(float),
            "snr": g["SNR"].last().astype(float),
            "cqi": g["CQI"].last().astype(float),
            "speed_kmh": g["Speed"].last().astype(float),
            "is_5g": (g["NetworkMode"].last() == "5G").astype(float),
            "thr": g["DL_bitrate"].mean().astype(float) / 1000.0,
        }
    ).reset_index(drop=True)
    return sec


def add_features(sec):
    """History features at second i use rates up to and including i; the target is the rate
    at i + 1. Short histories are padded exactly as the Rust predictor does: a missing lag is
    the oldest sample, the harmonic mean runs over the samples there are."""
    thr = sec["thr"].to_numpy()
    rows = []
    hist = []
    e = None
    for i in range(len(thr) - 1):
        x = float(thr[i])
        e = x if e is None else EWMA_ALPHA * x + (1.0 - EWMA_ALPHA) * e
        hist.append(x)

        def lag(k):
            return hist[-k] if len(hist) >= k else hist[0]

        w = hist[-HM_WINDOW:]
        inv = 0.0
        for v in w:
            inv += 1.0 / max(v, HM_FLOOR)
        rows.append((i, lag(1), lag(2), lag(3), len(w) / inv, e, float(thr[i + 1])))
    f = pd.DataFrame(rows, columns=["second", "lag1", "lag2", "lag3", "hm5", "ewma", "target"])
    radio = sec.iloc[f["second"].to_numpy()][["rsrp", "rsrq", "snr", "cqi", "speed_kmh", "is_5g"]]
    return pd.concat([f.reset_index(drop=True), radio.reset_index(drop=True)], axis=1)


def export(model, path):
    trees = []
    for est in model.estimators_[:, 0]:
        t = est.tree_
        trees.append(
            {
                "feature": [int(v) for v in t.feature],
                "threshold": [float(v) for v in t.threshold],
                "left": [int(v) for v in t.children_left],
                "right": [int(v) for v in t.children_right],
                "value": [float(v) for v in t.value[:, 0, 0]],
            }
        )
    doc = {
        "format": "polypath-gbt-v1",
        "description": "GradientBoostingRegressor predicting next-second downlink Mbit/s (raca5g)",
        "features": FEATURES,
        "ewma_alpha": EWMA_ALPHA,
        "hm_window": HM_WINDOW,
        "hm_floor_mbps": HM_FLOOR,
        "output_unit": "mbit_per_s",
        "init": float(model.init_.constant_[0][0]),
        "learning_rate": float(model.learning_rate),
        "trees": trees,
    }
    with open(path, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
        fh.write("\n")


def main():
    ap = argparse.ArgumentParser()
    default_traces = os.path.normpath(os.path.join(HERE, "../../../traces/raca5g"))
    if not os.path.isdir(default_traces):
        default_traces = "/work/shared/traces/raca5g"
    ap.add_argument("--traces", default=default_traces)
    args = ap.parse_args()
    files = sorted(f for f in os.listdir(args.traces) if f.endswith(".csv"))
    if not files:
        sys.exit(f"no CSV files in {args.traces}")
    train, held = [], []
    for k, name in enumerate(files):
        f = add_features(load_trace(os.path.join(args.traces, name)))
        f.insert(0, "trace", name)
        (held if k % 4 == 3 else train).append(f)
    train = pd.concat(train, ignore_index=True)
    held = pd.concat(held, ignore_index=True)
    model = GradientBoostingRegressor(
        n_estimators=200, max_depth=4, learning_rate=0.05, subsample=0.8, random_state=SEED
    )
    model.fit(train[FEATURES].to_numpy(), train["target"].to_numpy())
    held["pred"] = model.predict(held[FEATURES].to_numpy())
    export(model, os.path.join(HERE, "gbt_raca5g.json"))
    cols = ["trace", "second", "rsrp", "rsrq", "snr", "cqi", "speed_kmh", "is_5g"]
    cols += ["lag1", "lag2", "lag3", "hm5", "ewma", "target", "pred"]
    held[cols].to_csv(os.path.join(HERE, "heldout_raca5g.csv"), index=False, float_format="%.17g")
    err = held["pred"] - held["target"]
    print(f"train rows {len(train)}, held-out rows {len(held)} from {held['trace'].nunique()} traces")
    print(f"held-out MAE {np.mean(np.abs(err)):.3f} Mbit/s (target mean {held['target'].mean():.3f})")


if __name__ == "__main__":
    main()
