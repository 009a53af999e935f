"""LAMP5G handover (the LAMP5G paper, Section VI-B and Fig. 5): break-before-make versus
make-before-break.

Setup (``scenarios/handover-mbb.toml``, the paper's geometry): two NR gNBs 400 m apart, UMi
path loss, a UE moving from the source towards the target at 8.3 m/s, a 1.5 GB download.
The cells are narrowed to 40 MHz with one MIMO layer here (about 170 Mbit/s each), so
that, as in the paper's Fig. 5b, the download goes on over the target path after the
source path is removed: at 100 MHz and 4 layers it would finish in 11 s, before the UE
reaches the overlap region, and at 40 MHz and 2 layers (340 Mbit/s) make-before-break
finished before the source path's removal. The paper's own timeline bounds the rate the
same way: with both paths from 29 s to 50 s and the transfer still going after that, 1.5 GB
allows at most about 170 Mbit/s per path if the transfer starts at the figure's time
zero. The cells keep the power per resource element (the transmit power drops with the RB
count), so every RSRP, and with it the join and drop thresholds' position at the paper's
250 m coverage radius, is that of the scenario file.

- Baseline: one modem, single-path QUIC with CUBIC, an A3-triggered break-before-make
  handover (offset 2 dB, hysteresis 1 dB, time to trigger 160 ms) whose interruption is the
  paper's observed one second (Fig. 5a) rather than the model's default 27 ms.
- The cells use separate carriers (3.5 and 3.7 GHz): the paper's RF simulator has no
  inter-cell interference, and with co-channel cells the target's SINR stays below zero
  wherever the source still works, so no path through it could be validated.
- LAMP5G: one modem per gNB (the paper's emulation with two UE instances), Multipath QUIC
  with the LAMP5G scheduler and make-before-break path manager: the target modem's A1 (the
  target above the join threshold) adds a path, the source modem's A2 (below the drop
  threshold) removes the source path once the new one is validated; the window is split at
  addition (Section V-C).

Average throughput is reported two ways. "During the handover" is the paper's claim
(Section I: "During handover, LAMP5G ... achieving 60% higher average throughput than
traditional handover"): the mean goodput while the UE crosses the two cells' 100 m overlap
region, the same interval in both runs, fixed by the geometry alone. "Whole transfer" is the
file size over its completion time; it depends on how much of the transfer falls inside the
overlap, so it has no bar.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from .. import paper
from ..report import Experiment, Table
from ..sim import LabError, Run, RunResult, binned, load_scenario, run_all
from ..stats import fmt, mean
from . import Context
from .plotting import legend_outside, plt, save

NAME = "lamp5g_handover"
SCENARIO = "handover-mbb"
FILE = "1.5GB"
#: Quick mode: a shorter download, the UE starting 225 m from the source gNB: inside the
#: target's coverage (A1 at once), about 1.5 s before the baseline's A3 handover and 4 s
#: before the source drops below the drop threshold, so both handovers (and the removal of
#: the source path) fall inside the transfer.
QUICK_FILE = "400MB"
QUICK_START_M = 225.0
#: Bandwidth (MHz) and MIMO layers of the narrowed cells.
NARROW_MHZ = 40
NARROW_LAYERS = 1
#: The cells' coverage radius in the paper (m): the UE is in both cells' coverage, the
#: "100 m overlap region", from 150 m to 250 m from the source gNB.
COVERAGE_RADIUS_M = 250.0
#: Resource blocks of an NR FR1 carrier at 30 kHz subcarrier spacing, by bandwidth in MHz
#: (TS 38.101-1 Table 5.3.2-1; the simulator's `phy::n_rb`).
N_RB_30KHZ = {40: 106, 100: 273}
#: The A3 event of the break-before-make baseline.
A3_HANDOVER = {"id": 1, "type": "A3", "offset_db": 2.0, "hysteresis_db": 1.0,
               "time_to_trigger_ms": 160, "action": "handover"}


def _narrow_cells(s: dict) -> None:
    for cell in s["radio"]["cells"]:
        # Same power per resource element: RSRP is the power of one resource element, so
        # spreading the same total power over fewer RBs would raise every RSRP by
        # 10·log10(273/106) = 4.1 dB and move the join and drop thresholds (the RSRP at
        # the paper's 250 m coverage radius) out to 316 m from each gNB.
        rbs = _n_rb(cell)
        cell.update(bandwidth_mhz=NARROW_MHZ, mimo_layers=NARROW_LAYERS)
        cell["tx_power_dbm"] -= 10 * math.log10(rbs / _n_rb(cell))
    # Separate carriers: the paper's RF simulator has no inter-cell interference, and with
    # co-channel cells the target's SINR stays below zero wherever the source still works.
    s["radio"]["cells"][1]["carrier_ghz"] = 3.7
    # The paper's break-before-make handover (OAI, N2) left throughput near zero for about
    # one second (Fig. 5a); the model's default interruption is an NR Xn handover's 27 ms.
    s["radio"]["handover"] = dict(s["radio"].get("handover", {}),
                                  interruption={"dist": "constant", "ms": 1000})


def _n_rb(cell: dict) -> int:
    rbs = N_RB_30KHZ.get(cell["bandwidth_mhz"]) if cell.get("scs_khz") == 30 else None
    if rbs is None:
        raise LabError(f"{SCENARIO}: cell {cell['id']}: no RB count for "
                       f"{cell['bandwidth_mhz']} MHz at {cell.get('scs_khz')} kHz")
    return rbs


def _quick(s: dict) -> None:
    """The UE starts where both handovers come within seconds (``QUICK_START_M``)."""
    for ue in s["radio"]["ues"]:
        ue["mobility"] = dict(ue["mobility"], **{"from": [QUICK_START_M, 0.0]})


def mbb(base: dict, size: str, quick: bool) -> dict:
    """The LAMP5G make-before-break scenario."""
    s = copy.deepcopy(base)
    _narrow_cells(s)
    if quick:
        _quick(s)
    s["flow"][0].update(bytes=size)
    s["sim"] = dict(s["sim"], duration="200s")
    return s


def bbm(base: dict, size: str, quick: bool) -> dict:
    """The single-modem break-before-make baseline: the second modem, its link and its
    interfaces are removed; the first modem hands over on A3."""
    s = mbb(base, size, quick)
    s["radio"]["ues"] = [s["radio"]["ues"][0]]
    s["radio"]["ues"][0]["interfaces"][0]["events"] = [dict(A3_HANDOVER)]
    second = {"ran2"}
    s["link"] = [link for link in s["link"] if link["name"] not in second]
    for host in s["host"]:
        host["interfaces"] = [i for i in host["interfaces"] if i["link"] not in second]
        if "routes" in host:
            kept = {i["name"] for i in host["interfaces"]}
            host["routes"] = [r for r in host["routes"] if r["via"] in kept]
    flow = s["flow"][0]
    flow.update(paths=flow["paths"][:1], scheduler="default", path_manager="default")
    flow.pop("options", None)
    return s


def run(ctx: Context) -> Experiment:
    """Runs both approaches over the seeds."""
    base = load_scenario(SCENARIO)
    size = QUICK_FILE if ctx.quick else FILE
    runs = [Run(f"{key}-s{seed}", build(base, size, ctx.quick), seed, {"key": key})
            for key, build in (("bbm", bbm), ("mbb", mbb)) for seed in ctx.seeds]
    results = run_all(runs, ctx.work / NAME, "LAMP5G handover", ctx.jobs, ctx.progress)
    e = Experiment(
        NAME,
        f"LAMP5G handover: {size} download while moving between two gNBs"
        + (" (quick)" if ctx.quick else ""),
        "Seed paper 000 (LAMP5G), Section VI-B and Fig. 5. Two NR gNBs (3.5 GHz, "
        f"{NARROW_MHZ} MHz, {NARROW_LAYERS} layer) 400 m apart, UMi path loss, UE at 8.3 m/s "
        f"(`scenarios/{SCENARIO}.toml`); CUBIC on every path; seeds {list(ctx.seeds)}. "
        "Average throughput during the handover: mean goodput while the UE is within "
        f"{COVERAGE_RADIUS_M:.0f} m of both gNBs (the paper's claim is about this period); "
        "over the whole transfer: the file size over its completion time.",
    )
    window = overlap_window(results[0].run.scenario) if results else (0.0, 0.0)
    tput: dict[str, list[float]] = {}
    during: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {}
    completion: dict[str, list[float]] = {}
    #: Make-before-break: seconds between the source path's last downlink delivery and
    #: the end of the transfer (zero if the transfer ended before the source was removed).
    after_source: list[float] = []
    #: Completion times that fall inside the handover window (the window average would
    #: then count the idle end of the run).
    cut_short: list[str] = []
    for r in results:
        key = r.run.labels["key"]
        done = r.completion_time()
        received = sum(f["app_bytes_received"] for f in r.report["flows"])
        elapsed = done if done is not None else r.report["sim_time_s"]
        tput.setdefault(key, []).append(received * 8 / elapsed / 1e6)
        completion.setdefault(key, []).append(elapsed)
        t, goodput = binned(r.csv("flows"), "goodput_mbps")
        during.setdefault(key, []).append(window_mean(t, goodput, *window))
        if elapsed < window[1]:
            cut_short.append(f"{r.run.name} ended at {elapsed:.1f} s")
        gaps.setdefault(key, []).append(longest_zero_gap(r, elapsed))
        if key == "mbb":
            after_source.append(max(elapsed - last_delivery(r, "ran1", elapsed), 0.0))
    ratio = _ratio(tput)
    during_ratio = _ratio(during)
    bbm_gap, mbb_gap = min(gaps.get("bbm", [0.0])), max(gaps.get("mbb", [0.0]))
    rows = [
        ["single path, A3 break-before-make", "1.0", fmt(mean(during.get("bbm", [])), 1),
         "1.00", fmt(mean(tput.get("bbm", [])), 1), "1.00",
         fmt(max(gaps.get("bbm", [0.0])) * 1000, 0)],
        ["MPQUIC, LAMP5G make-before-break", f"≈{paper.LAMP5G_HANDOVER_RATIO}",
         fmt(mean(during.get("mbb", [])), 1), fmt(during_ratio, 2),
         fmt(mean(tput.get("mbb", [])), 1), fmt(ratio, 2), fmt(mbb_gap * 1000, 0)],
    ]
    e.tables.append(Table(
        f"Average throughput during the handover ({window[0]:.1f}–{window[1]:.1f} s, the UE "
        "in both cells' coverage) and over the whole transfer, Mbit/s, and the longest "
        "stretch without delivery",
        ["approach", "paper ratio", "polypath Mbit/s, handover", "ratio",
         "polypath Mbit/s, whole transfer", "ratio", "longest zero-delivery stretch, ms"],
        rows,
        {"handover_window_s": list(window), "handover_throughput_mbps": during,
         "handover_ratio": during_ratio, "throughput_mbps": tput, "ratio": ratio,
         "completion_s": completion, "longest_zero_gap_s": gaps, "mbb_transfer_after_source_removal_s": after_source}))
    e.check("both transfers last through the handover region", not cut_short,
            "; ".join(cut_short) or f"the region ends at {window[1]:.1f} s")
    versus = (f"{during_ratio:.2f}x ({fmt(mean(during.get('mbb', [])), 1)} vs "
              f"{fmt(mean(during.get('bbm', [])), 1)} Mbit/s; over the whole transfer "
              f"{ratio:.2f}x)")
    if ctx.quick:
        # The reduced run starts inside the overlap region, so the ratios say nothing about
        # the paper's; only their direction is checked.
        e.check("make-before-break above the break-before-make baseline's average "
                "throughput, during the handover and over the whole transfer",
                during_ratio > 1.0 and ratio > 1.0, versus)
        shortest = min(after_source, default=0.0)
        e.check("make-before-break: the source path is removed during the transfer",
                shortest >= 0.5, f"the transfer went on {shortest:.1f} s after the source "
                "path's last delivery")
    else:
        e.check(f"make-before-break at least {paper.LAMP5G_HANDOVER_RATIO}x the "
                "break-before-make baseline's average throughput during the handover",
                during_ratio >= paper.LAMP5G_HANDOVER_RATIO, versus)
    e.check("make-before-break: no 100 ms window without delivery", mbb_gap < 0.1,
            f"longest stretch {mbb_gap * 1000:.0f} ms")
    e.check("break-before-make: the handover leaves a 100 ms window without delivery",
            bbm_gap >= 0.1, f"shortest of the runs' longest stretches {bbm_gap * 1000:.0f} ms")
    e.notes.append(
        "The whole-transfer ratio depends on how much of the transfer falls inside the "
        "overlap region, where make-before-break has both cells: it would be about 2x for a "
        "file that just fits the overlap and tends to 1x as the file grows. Here the UE "
        f"spends {window[1] - window[0]:.1f} s in the overlap out of a "
        f"make-before-break transfer of {mean(completion.get('mbb', [])):.1f} s. "
        "The paper's own Fig. 5 timeline (both paths from 29 s to 50 s, the transfer going "
        "on over path 2 afterwards, the baseline losing about 2.5 s of transfer in its "
        "handover) allows at most (71 + 2.5) / 50 = 1.47x over the whole transfer if the "
        "transfer starts at the figure's time zero and the two paths carry the same rate, "
        "so its ~1.6x is the average during the handover, as its Section I says.")
    by = {r.run.name: r for r in results}
    png = "lamp5g_handover_fig5.png"
    seed = ctx.seeds[0]
    plot_fig5(ctx.out / png, by.get(f"bbm-s{seed}"), by.get(f"mbb-s{seed}"), window)
    e.plots.append((png, f"Throughput per path and congestion windows over time (seed {seed}), "
                         "like the paper's Fig. 5: (a) break-before-make, (b) LAMP5G "
                         "make-before-break, (c) the sender's congestion windows. Shaded: "
                         "the UE in both cells' coverage (the handover region)."))
    return e


def _ratio(tput: dict[str, list[float]]) -> float:
    """Mean make-before-break throughput over the mean baseline throughput."""
    base = mean(tput.get("bbm", []))
    return mean(tput.get("mbb", [])) / base if base else float("nan")


def overlap_window(s: dict) -> tuple[float, float]:
    """Seconds after the start during which radio UE 0 (straight-line mobility) is within
    ``COVERAGE_RADIUS_M`` of every cell: the handover region, the same in both runs."""
    mob = s["radio"]["ues"][0]["mobility"]
    if mob.get("type") != "line":
        raise LabError(f"{SCENARIO}: radio UE 0: the handover window needs line mobility")
    (x0, y0), (x1, y1) = mob["from"], mob["to"]
    length = math.hypot(x1 - x0, y1 - y0)
    ux, uy = (x1 - x0) / length, (y1 - y0) / length
    lo, hi = 0.0, length
    for cell in s["radio"]["cells"]:
        cx, cy = cell["position"][0] - x0, cell["position"][1] - y0
        along = cx * ux + cy * uy
        off2 = cx * cx + cy * cy - along * along
        if off2 > COVERAGE_RADIUS_M ** 2:
            raise LabError(f"{SCENARIO}: the UE's path never enters cell {cell['id']}")
        half = math.sqrt(COVERAGE_RADIUS_M ** 2 - off2)
        lo, hi = max(lo, along - half), min(hi, along + half)
    if lo >= hi:
        raise LabError(f"{SCENARIO}: the UE's path has no point in every cell's coverage")
    return lo / mob["speed_mps"], hi / mob["speed_mps"]


def window_mean(t: list[float], v: list[float], start: float, end: float,
                bin_s: float = 0.1) -> float:
    """Mean of a binned series (``t`` the bins' ends) over ``[start, end]``, each bin
    weighted by its overlap with the interval; bins with no row count as zero."""
    total = sum(x * max(0.0, min(ti, end) - max(ti - bin_s, start))
                for ti, x in zip(t, v) if not math.isnan(x))
    return total / (end - start)


def longest_zero_gap(r: RunResult, end: float) -> float:
    """The longest run of 100 ms bins with no application bytes delivered, up to ``end``."""
    t, v = binned(r.csv("flows"), "goodput_mbps")
    longest = run_len = 0.0
    for ti, x in zip(t, v):
        if ti > end:
            break
        run_len = run_len + 0.1 if x == 0 else 0.0
        longest = max(longest, run_len)
    return longest


def last_delivery(r: RunResult, link: str, end: float) -> float:
    """The end of the last 100 ms bin, up to ``end``, in which ``link`` delivered at least
    1 Mbit/s downlink (0 if none)."""
    t, v = binned(r.csv("links"), "delivered_mbps", link=link, dir="down")
    return max((ti for ti, x in zip(t, v) if ti <= end + 0.1 and x >= 1.0), default=0.0)


def plot_fig5(path: Path, bbm_run: RunResult | None, mbb_run: RunResult | None,
              window: tuple[float, float]) -> None:
    """Per-link downlink throughput of both runs and the server's cwnd per path, with the
    handover region shaded."""
    fig, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    for ax in axes:
        ax.axvspan(*window, color="0.9", zorder=0)
    for ax, (r, title) in zip(axes[:2], [(bbm_run, "(a) single path, A3 break-before-make"),
                                         (mbb_run, "(b) MPQUIC, LAMP5G make-before-break")]):
        if r is None:
            continue
        rows = r.csv("links")
        for link, name in [("ran1", "path 1 (source gNB)"), ("ran2", "path 2 (target gNB)")]:
            t, v = binned(rows, "delivered_mbps", link=link, dir="down")
            if t:
                ax.plot(t, v, lw=0.8, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("Mbit/s")
        legend_outside(ax)
    ax = axes[2]
    # One colour per run; BBM dotted and drawn over MBB, whose path 1 it follows until
    # the handover.
    for r, style, color, label, z in [(mbb_run, "-", "tab:blue", "MBB", 2),
                                       (bbm_run, ":", "tab:red", "BBM", 3)]:
        if r is None:
            continue
        rows = [row for row in r.csv("paths")
                if row["local"].endswith(":4433") and row["path"].isdigit()]
        for pid in sorted({row["path"] for row in rows}):
            t, v = binned(rows, "cwnd", path=pid)
            ax.plot(t, [x / 1e3 for x in v], style, color=color, zorder=z,
                    lw=1.4 if style == ":" else 0.8, alpha=1.0 if pid == "0" else 0.6,
                    label=f"{label} path {int(pid) + 1}")
    ax.set_title("(c) the server's congestion window per path", fontsize=9)
    ax.set_ylabel("cwnd (kB)")
    ax.set_xlabel("time (s)")
    legend_outside(ax)
    fig.tight_layout()
    save(fig, path)
