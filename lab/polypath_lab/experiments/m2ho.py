"""M2HO (seed paper 001): handover prediction (Table 4) and its earliness (Table 5) on the
radio model's driving and walking scenarios.

Setup: ``scenarios/driving-m2ho.toml`` (a 6 km loop at 12 m/s through a sub-6 GHz grid with
mmWave small cells along the road) and ``scenarios/walking-m2ho.toml`` (1.4 m/s around a
block with dense mmWave cells), simulated with their link-event streams (``polypath sim
run --events``). Each stream goes through the M2HO controller (``polypath m2ho replay``),
which runs Algorithm 1 with both fallbacks (an A1 after the prediction, no command within
2·T2 with T2 learnt) and HO-Naive (any measurement report predicts a handover) side by side,
on the model's imperfections: handovers the network drops when the mmWave cell recovers (A1
before the command) and mmWave radio link failures that fall back without a report
(T310 1000 ms). A prediction is correct when a handover command follows while it stands;
recall counts every handover, with or without a command. Earliness is execution minus
prediction; "No Pred." is execution minus the command.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .. import paper
from ..report import Experiment, Table
from ..sim import LabError, Run, load_scenario, polypath_binary, run_all, variant
from ..stats import fmt, mean
from . import Context
from .plotting import plt

NAME = "m2ho"
TYPES = ["sub6-sub6", "sub6-mmW", "mmW-mmW", "mmW-sub6"]
#: Simulated seconds per scenario (full, quick).
DURATION_S = {"driving-m2ho": (900, 300), "walking-m2ho": (2000, 600)}


def _kind(rat: str | None) -> str:
    return "mmW" if rat == "nr_fr2" else "sub6"


def _prediction_type(p: dict) -> str:
    """The handover type a prediction announces: serving type to the report's cell type
    (an A2 from mmWave names no cell: a sub-6 target)."""
    src = _kind(p["serving_rat"])
    if p.get("target_hint_rat"):
        dst = _kind(p["target_hint_rat"])
    elif p.get("rule") == "a2_from_mmwave":
        dst = "sub6"
    else:
        dst = src
    return f"{src}-{dst}"


def _replay(events: Path) -> dict:
    cmd = [str(polypath_binary()), "m2ho", "replay", str(events)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
    return json.loads(proc.stdout)["stats"]


def _tally(stats: list[dict]) -> dict:
    """Precision, recall and earliness by handover type over all replays."""
    t: dict = {k: {"ho": 0, "m2ho_hit": 0, "naive_hit": 0, "uncommanded": 0,
                   "m2ho_pred": 0, "m2ho_ok": 0, "naive_pred": 0, "naive_ok": 0,
                   "earliness": [], "command_earliness": []} for k in TYPES + ["total"]}
    for s in stats:
        for h in s["handovers"]:
            k = f"{_kind(h['source_rat'])}-{_kind(h['target_rat'])}"
            for key in (k, "total"):
                x = t[key]
                x["ho"] += 1
                x["m2ho_hit"] += h["predicted"]
                x["naive_hit"] += h["naive_predicted"]
                x["uncommanded"] += not h["commanded"]
                if h["earliness_ns"] is not None:
                    x["earliness"].append(h["earliness_ns"] / 1e6)
                if h["command_earliness_ns"] is not None:
                    x["command_earliness"].append(h["command_earliness_ns"] / 1e6)
        for name, preds in (("m2ho", s["predictions"]), ("naive", s["naive_predictions"])):
            for p in preds:
                for key in (_prediction_type(p), "total"):
                    t[key][f"{name}_pred"] += 1
                    t[key][f"{name}_ok"] += p["outcome"] == "handover"
    for x in t.values():
        pct = lambda a, b: 100.0 * a / b if b else float("nan")  # noqa: E731
        x["m2ho_p"] = pct(x["m2ho_ok"], x["m2ho_pred"])
        x["m2ho_r"] = pct(x["m2ho_hit"], x["ho"])
        x["naive_p"] = pct(x["naive_ok"], x["naive_pred"])
        x["naive_r"] = pct(x["naive_hit"], x["ho"])
    return t


def run(ctx: Context) -> Experiment:
    runs = []
    for name, (full_s, quick_s) in DURATION_S.items():
        base = load_scenario(name)
        dur = quick_s if ctx.quick else full_s
        s = variant(base, sim={**base["sim"], "duration": f"{dur}s"})
        for seed in ctx.seeds:
            runs.append(Run(f"{name}-s{seed}", s, seed, {"scenario": name}, events=True))
    results = run_all(runs, ctx.work / NAME, "m2ho prediction", ctx.jobs, ctx.progress)
    stats = [_replay(r.out / "events.jsonl") for r in results]
    t = _tally(stats)

    e = Experiment(
        NAME,
        "M2HO: handover prediction (Tables 4 and 5)",
        (__doc__ or "").strip() + f"\n\nRuns: {len(runs)} ({', '.join(r.name for r in runs)});"
        f" {t['total']['ho']} handovers ("
        + ", ".join(f"{k} {t[k]['ho']}" for k in TYPES)
        + f"), of them {t['total']['uncommanded']} without a command (radio link failure).",
    )
    rows = []
    for who in ("naive", "m2ho"):
        for k in TYPES + ["total"]:
            pp, pr = paper.M2HO_TABLE_4[who][k]
            rows.append([{"naive": "HO-Naive", "m2ho": "M2HO"}[who], k,
                         fmt(pp, 1), fmt(t[k][f"{who}_p"], 1), fmt(pr, 1),
                         fmt(t[k][f"{who}_r"], 1), str(t[k]["ho"])])
    e.tables.append(Table(
        "Table 4: prediction precision p and recall r (%), paper vs polypath",
        ["predictor", "type", "p paper", "p polypath", "r paper", "r polypath", "handovers"],
        rows,
        {k: {who: {"precision": t[k][f"{who}_p"], "recall": t[k][f"{who}_r"]}
             for who in ("m2ho", "naive")} | {"handovers": t[k]["ho"]}
         for k in TYPES + ["total"]},
    ))
    rows5 = []
    for k in TYPES:
        pm, pc = paper.M2HO_TABLE_5[k]
        rows5.append([k, fmt(pm, 1), fmt(mean(t[k]["earliness"]), 1), fmt(pc, 1),
                      fmt(mean(t[k]["command_earliness"]), 1), str(len(t[k]["earliness"]))])
    e.tables.append(Table(
        "Table 5: earliness (ms), M2HO's prediction vs the handover command (No Pred.)",
        ["type", "M2HO paper", "M2HO polypath", "No Pred. paper", "No Pred. polypath",
         "predicted handovers"],
        rows5,
        {k: {"m2ho_ms": mean(t[k]["earliness"]),
             "command_ms": mean(t[k]["command_earliness"])} for k in TYPES},
    ))

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("earliness", "M2HO prediction"), ("command_earliness", "handover command")):
        xs = sorted(t["total"][key])
        if xs:
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=label)
    ax.set_xlabel("time before handover execution (ms)")
    ax.set_ylabel("CDF")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = "m2ho_earliness.png"
    fig.savefig(ctx.out / png, dpi=120)
    plt.close(fig)
    e.plots.append((png, "Earliness: how long before each handover's execution M2HO "
                         "predicted it, and when its command came"))

    tot = t["total"]
    e.check("M2HO precision >= 85 %", tot["m2ho_p"] >= 85.0, f"{tot['m2ho_p']:.1f} %")
    e.check("M2HO recall >= 85 %", tot["m2ho_r"] >= 85.0, f"{tot['m2ho_r']:.1f} %")
    e.check("M2HO precision clearly above HO-Naive's (+20 points)",
            tot["m2ho_p"] >= tot["naive_p"] + 20.0,
            f"{tot['m2ho_p']:.1f} % vs {tot['naive_p']:.1f} %")
    e.check("M2HO recall at least HO-Naive's", tot["m2ho_r"] >= tot["naive_r"],
            f"{tot['m2ho_r']:.1f} % vs {tot['naive_r']:.1f} %")
    early = [k for k in TYPES if t[k]["earliness"]]
    e.check("earliness above the handover command's for every type seen",
            bool(early) and all(mean(t[k]["earliness"]) > mean(t[k]["command_earliness"])
                                for k in early),
            ", ".join(f"{k} {mean(t[k]['earliness']):.0f} vs "
                      f"{mean(t[k]['command_earliness']):.0f} ms" for k in early))
    e.notes += [
        "HO-Naive here credits a prediction whenever any command follows within 2·T2 of "
        "the report, whatever the report was; that is why its recall is close to M2HO's "
        "(most handovers have some report shortly before them) while the paper's is 39 %. "
        "Its precision is what tells the two apart.",
        "The misses are the handovers without a command (radio link failures on mmWave "
        f"cells: {tot['uncommanded']} of {tot['ho']}) and handovers whose prediction the "
        "A1 fallback cancelled. With T310 = 200 ms instead of 1000 ms, radio link failures "
        "are about eight times as frequent on the driving loop (crates/ran/tests/"
        "m2ho_stats.rs) and recall falls accordingly; the paper does not give the "
        "networks' T310.",
        "The command-to-execution delay is the model's (32.7 ms mean, from M2HO Sec. 4.2), "
        "so No Pred.'s earliness is about that for every type; the paper's Table 5 has "
        "43.8 to 144.3 ms, which its own 32.7 ms average does not explain.",
        "Throughput around handovers (Table 2), duplicate-ACK handling (Table 3) and "
        "the no-loss share (Fig. 13) need the emulator with the daemon on kernel TCP: not "
        "part of this experiment yet.",
    ]
    return e
