"""The lab's reduced experiments (seconds, not minutes): each asserts the shapes the full
reproduction must show, so a regression in the stack, the simulator or the lab fails CI."""

from __future__ import annotations

import json
import math
import os

import pytest

from polypath_lab.__main__ import main
from polypath_lab.experiments import Context, registry
from polypath_lab.report import Experiment, Table, write_report
from polypath_lab.stats import describe, quantile


def test_stats():
    d = describe([28.931, 31.756, 29.1])
    assert math.isclose(d["mean"], 29.929, abs_tol=1e-3)
    assert d["min"] == 28.931 and d["max"] == 31.756
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert math.isnan(describe([])["mean"])


def test_report_writes_markdown_and_json_without_nan(tmp_path):
    e = Experiment("x", "X", "setup")
    e.tables.append(Table("t", ["a", "b"], [["1", "2"]], {"v": float("nan"), "w": 2.0}))
    e.check("c", True, "fine")
    index = write_report([e], tmp_path, {"seeds": [1], "mode": "quick"})
    assert "| a | b |" in index.read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["experiments"]["x"]["tables"]["t"] == {"v": None, "w": 2.0}


def test_unknown_experiment_and_bad_seeds_are_errors(capsys):
    with pytest.raises(SystemExit):
        main(["run", "no-such-experiment"])
    assert "unknown experiment" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "all", "--seeds", "one"])
    assert "--seeds" in capsys.readouterr().err


@pytest.fixture(scope="module")
def quick_experiment(tmp_path_factory):
    """Runs each quick experiment once per module: ``quick_experiment(name)`` returns the
    experiment and its report directory."""
    done: dict[str, tuple[Experiment, object]] = {}

    def run(name: str):
        if name not in done:
            out = tmp_path_factory.mktemp(name)
            ctx = Context(seeds=[1], quick=True, out=out, work=out / "runs", jobs=2,
                          progress=False)
            done[name] = (registry()[name].run(ctx), out)
        return done[name]

    return run


@pytest.mark.parametrize("name", list(registry()))
def test_quick_experiment_shapes(name, quick_experiment):
    if name == "chymp" and os.geteuid() != 0:
        pytest.skip("chymp runs the emulator, which needs root")
    e, out = quick_experiment(name)
    for c in e.checks:
        print(f"{name}: [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.measured}")
    assert e.checks, "every experiment checks something"
    failed = [f"{c.name}: {c.measured}" for c in e.checks if not c.ok]
    assert not failed, failed
    for png, _ in e.plots:
        assert (out / png).stat().st_size > 1000, png


def test_quick_handover_includes_both_handovers(quick_experiment):
    """The reduced LAMP5G handover run goes through the baseline's A3 handover and through
    make-before-break's removal of the source path, and shows the paper's shapes: the
    baseline's handover stops delivery for at least one 100 ms window, make-before-break
    never does, and make-before-break's average throughput is the higher."""
    e, _ = quick_experiment("lamp5g_handover")
    data = e.tables[0].data
    tput, gaps = data["throughput_mbps"], data["longest_zero_gap_s"]
    assert min(data["mbb_transfer_after_source_removal_s"]) >= 0.5, data
    assert min(gaps["bbm"]) >= 0.1, gaps
    assert max(gaps["mbb"]) < 0.1, gaps
    assert min(tput["mbb"]) > max(tput["bbm"]), tput


def test_quick_table1_hinted_cases(quick_experiment):
    """The cases with link hints: in the blockage case LAMP5G with the oracle's hints runs
    differently from minRTT and from itself without hints; on the Lumos5G drive (oracle
    predictors on both downlinks told to the server) every approach fetches every chunk at
    both loads, and LAMP5G with the hints does not produce minRTT's run (their output hashes
    differ; the predictions file is the same in both, so only the schedulers' decisions can
    make them differ)."""
    from polypath_lab.experiments import lamp5g_table1 as t1

    e, _ = quick_experiment("lamp5g_table1")
    blockage = next(t for t in e.tables if t.title.startswith("A blockage"))
    drive = next(t for t in e.tables if t.title.startswith("Lumos5G multipath drive"))
    for table in (blockage, drive):
        for row in table.rows:
            print(" | ".join(row))
    b = blockage.data
    assert b["lamp5g-oracle"]["output_hash"] != b["minrtt"]["output_hash"], b
    assert b["lamp5g-oracle"]["output_hash"] != b["lamp5g-none"]["output_hash"], b
    for load, _, _, _, count in t1.DRIVE_LOADS:
        for key, _, _, _ in t1.HINT_APPROACHES:
            assert drive.data[f"{load}/{key}"]["chunks"] == count, (load, key)
        assert drive.data[f"{load}/lamp5g_oracle_differs_from_minrtt"] is True, load


def test_drive_scenario_sets_scheduler_predictors_and_window():
    """The drive variants: the scheduler and start/count on the flow, the predictor on both
    downlinks (or none), and a duration that covers every chunk."""
    from polypath_lab.experiments import lamp5g_table1 as t1
    from polypath_lab.sim import load_scenario

    base = load_scenario(t1.DRIVE_SCENARIO)
    s = t1.drive_scenario(base, "minrtt", "ewma", "500kB", "100ms", 600)
    flow = s["flow"][0]
    assert (flow["scheduler"], flow["start"], flow["response_size"], flow["interval"],
            flow["count"]) == ("minrtt", "120s", "500kB", "100ms", 600)
    assert [link["down"]["predictor"] for link in s["link"]] == [
        {"kind": "ewma", "period": "1s"}] * 2
    assert s["sim"]["duration"] == "200s"
    bare = t1.drive_scenario(base, "lamp5g", None, "1MB", "500ms", 120)
    assert all("predictor" not in link["down"] for link in bare["link"])
    assert "predictor" in base["link"][0]["down"], "the base is not modified"


def test_handover_window_is_the_overlap_region():
    """The handover window is the UE's time within 250 m of both gNBs (150 m to 250 m from
    the source at 8.3 m/s), and a window mean weighs the bins it cuts by their overlap."""
    from polypath_lab.experiments import lamp5g_handover as ho
    from polypath_lab.sim import load_scenario

    start, end = ho.overlap_window(load_scenario(ho.SCENARIO))
    assert math.isclose(start, 150 / 8.3) and math.isclose(end, 250 / 8.3), (start, end)
    assert math.isclose(ho.window_mean([0.1, 0.2, 0.3], [10.0, 20.0, 30.0], 0.05, 0.25),
                        (10 * 0.05 + 20 * 0.1 + 30 * 0.05) / 0.2)


def test_handover_narrowed_cells_keep_rsrp():
    """Narrowing the handover cells keeps the power per resource element, so the join and
    drop thresholds (the RSRP at the 250 m coverage radius) stay where the scenario puts
    them."""
    from polypath_lab.experiments import lamp5g_handover as ho
    from polypath_lab.sim import load_scenario

    base = load_scenario(ho.SCENARIO)
    for build in (ho.mbb, ho.bbm):
        narrowed = build(base, "1MB", False)
        for before, after in zip(base["radio"]["cells"], narrowed["radio"]["cells"]):
            per_re = [c["tx_power_dbm"] - 10 * math.log10(12 * ho.N_RB_30KHZ[c["bandwidth_mhz"]])
                      for c in (before, after)]
            assert after["bandwidth_mhz"] == ho.NARROW_MHZ
            assert math.isclose(per_re[0], per_re[1], abs_tol=1e-9), (before, after)


def test_quick_clarity_linux_like_headline(quick_experiment):
    """5G-CLARITY Section 6.2 under the Linux-like configuration (1000-packet link queues,
    OLIA): WRR 30/100/1 moves at least three times what the default scheduler does, and
    round robin with CWND_LIMITED N stays within ``RR_N_BAND`` of the slowest path (LiFi
    alone, same configuration). Both ratios come from this one run; the paper's figures
    are printed beside them."""
    from polypath_lab import paper
    from polypath_lab.experiments import clarity

    e, _ = quick_experiment("clarity")
    data = e.tables[0].data
    for key, row in data.items():
        print(f"{key}: paper {row['paper']} polypath {row['polypath']} "
              f"Linux-like {row['linux_like']}")
    linux = {k: row["linux_like"] for k, row in data.items() if row["linux_like"] is not None}
    assert set(clarity.LINUX_LIKE_KEYS) <= set(linux), linux
    assert linux["wrr_30_100_1"] >= 3 * linux["default"], (linux, paper.CLARITY_THROUGHPUT)
    lo, hi = clarity.RR_N_BAND
    assert lo * linux["lifi"] <= linux["rr_n"] <= hi * linux["lifi"], linux
