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


def test_one_experiment_run_keeps_the_others_in_the_report(tmp_path):
    def experiment(name, value):
        e = Experiment(name, name.upper(), "setup")
        e.tables.append(Table("t", ["a"], [[str(value)]], {"v": value}))
        e.plots.append((f"{name}.png", f"plot of {name}"))
        return e

    write_report([experiment("x", 1), experiment("y", 2)], tmp_path,
                 {"seeds": [1, 2], "mode": "full"}, order=["y", "x"])
    # Running x again alone replaces x's section and keeps y's, plot links included.
    index = write_report([experiment("x", 3)], tmp_path, {"seeds": [7], "mode": "quick"},
                         order=["y", "x"])
    text = index.read_text()
    assert text.index("## Y") < text.index("## X")
    assert "y.png" in text and "x.png" in text
    assert "| 3 |" in text and "| 1 |" not in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["experiments"]["x"]["tables"]["t"] == {"v": 3}
    assert summary["experiments"]["x"]["meta"]["seeds"] == [7]
    assert summary["experiments"]["y"]["meta"] == {"seeds": [1, 2], "mode": "full"}


def test_list_gives_each_experiment_its_whole_summary(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name, module in registry().items():
        first = " ".join((module.__doc__ or "").strip().split("\n\n", 1)[0].split())
        # Every word of the first paragraph, ending where its sentence ends.
        assert name in out and " ".join(out.split()).count(first) == 1, (name, out)
        assert first.endswith("."), first


def test_default_and_full_sets_take_their_own_seeds():
    from polypath_lab.__main__ import DEFAULT_SEEDS, FULL_SEEDS, pick_seeds

    assert pick_seeds(None, False) == DEFAULT_SEEDS
    assert pick_seeds(None, True) == FULL_SEEDS
    assert len(FULL_SEEDS) > len(DEFAULT_SEEDS)
    assert pick_seeds("4, 2", True) == [4, 2]


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
    from polypath_lab import emu

    if name in ("coexistence", "chymp") and emu.unavailable():
        pytest.skip(f"{name} runs in the emulator: {emu.unavailable()}")
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


def test_quick_m2ho_prediction_tables(quick_experiment):
    """M2HO's predictor against HO-Naive on the same event streams: a handful of handovers
    of every kind the driving loop has, M2HO predicting fewer times (only Algorithm 1's
    events) and far more precisely, and its earliness above the command's."""
    e, _ = quick_experiment("m2ho")
    t4, t5 = e.tables[0].data, e.tables[1].data
    for row in e.tables[0].rows + e.tables[1].rows:
        print(" | ".join(row))
    assert t4["total"]["handovers"] >= 30, t4["total"]
    for k in ("sub6-sub6", "sub6-mmW", "mmW-mmW", "mmW-sub6"):
        assert t4[k]["handovers"] > 0, k
    assert t4["total"]["m2ho"]["precision"] > t4["total"]["naive"]["precision"] + 20
    assert t5["mmW-mmW"]["m2ho_ms"] > 2 * t5["mmW-mmW"]["command_ms"], t5

def test_quick_m2ho_emulates_driving_and_walking(quick_experiment):
    """The emulated throughput covers both scenarios the issue names: Table 2 pools the
    handovers of the driving and the walking stretch and gives each stretch's total, and
    every handover row says which stretch it came from."""
    from polypath_lab import emu

    if emu.unavailable():
        pytest.skip(f"the emulated stretches need the emulator: {emu.unavailable()}")
    e, _ = quick_experiment("m2ho")
    t2 = next(t for t in e.tables if t.title.startswith("Table 2:"))
    each = next(t for t in e.tables if t.title.startswith("Each handover:"))
    driving, walking = t2.data["total driving"], t2.data["total walking"]
    assert driving["handovers"] > 0 and walking["handovers"] > 0, t2.data
    assert t2.data["total"]["handovers"] == driving["handovers"] + walking["handovers"]
    # The headroom beside the ratio: the radio's capacity in the same windows, and the
    # ratio a sender using all of it would reach over plain CUBIC.
    for row in (driving, walking, t2.data["total"]):
        assert row["capacity_mbps"] > 0, row
        assert row["ceiling"] == pytest.approx(row["capacity_mbps"] / row["tput_mbps"]["cubic"])
    assert {x["scenario"] for x in each.data} == {"driving-m2ho", "walking-m2ho"}
    # Fig. 13: the (0, 5] s after a handover are within its [-5, 5] s, so no variant is
    # loss-free around more handovers than after them; the predicted handovers are some
    # of M2HO's.
    fig13 = next(t for t in e.tables if t.title.startswith("Fig. 13:")).data
    for v in ("cubic", "m2ho"):
        assert fig13[v]["handovers"] == t2.data["total"]["handovers"], fig13
        assert fig13[v]["after_pct"] >= fig13[v]["around_pct"], fig13
    assert 0 < fig13["m2ho, predicted handovers"]["handovers"] <= fig13["m2ho"]["handovers"]


def test_m2ho_emulated_cells_scale_buffers_with_rates():
    """The emulated M2HO stretches scale the network down: every cell's per-UE buffer
    shrinks with its rate (same share), so it stays as many round trips deep as at full
    rate, the phone's TCP receive buffer (the UE host's tcp_rmem) and its uplink buffer
    (the radio link's queue) shrink with them, and the scenario the prediction runs use
    keeps the model's buffers."""
    from polypath_lab.experiments import m2ho
    from polypath_lab.sim import load_scenario

    base = load_scenario("driving-m2ho")
    s = m2ho.emu_scenario(base, 20, "cubic", False)
    for before, after in zip(base["radio"]["cells"], s["radio"]["cells"]):
        full = m2ho.MODEL_BUFFER_BYTES[before["type"]]
        assert after["ue_share"] == m2ho.UE_SHARE
        assert after["buffer_bytes"] == round(m2ho.UE_SHARE * full), after
    assert all("buffer_bytes" not in c for c in base["radio"]["cells"]), "base not modified"
    ue = next(h for h in s["host"] if h["name"] == "ue")
    assert ue["tcp_rmem"] == [round(m2ho.UE_SHARE * b) for b in m2ho.UE_TCP_RMEM], ue
    recv = next(f for f in s["flow"] if f["name"] == "recv")
    assert recv["from"] == "ue"
    assert all("tcp_rmem" not in h for h in base["host"]), "base not modified"
    nr = next(link for link in s["link"] if link.get("radio"))
    assert nr["queue"] == f"{round(m2ho.UE_SHARE * m2ho.UE_UPLINK_BUFFER_BYTES)}B", nr
    assert all("queue" not in link for link in base["link"]), "base not modified"


def test_m2ho_environment_sets_the_share_and_the_buffers(tmp_path):
    """``--m2ho-env`` changes what the emulated stretches assume: the share scales every
    rate and buffer (cells, tcp_rmem, uplink queue), a buffer replaces the one of its cell
    type only, a rate hold, the context release's redelivery, the longest burst, how the
    share is given and the channel's correlation scale go to the radio model (and by
    default nothing does); unknown
    keys and values out of range are refused on the command line."""
    from polypath_lab.experiments import m2ho
    from polypath_lab.sim import load_scenario

    env = m2ho.parse_environment(["ue_share=0.3", "buffer_nr_fr1=2000000",
                                  "rate_hold_ms=1000", "redeliver_probability=1",
                                  "max_burst_slots=8", "share_as=rate",
                                  "correlation_scale=3"])
    assert env.changed() == ["ue_share=0.3", "buffer_nr_fr1=2000000", "rate_hold_ms=1000.0",
                             "redeliver_probability=1.0", "max_burst_slots=8",
                             "share_as=rate", "correlation_scale=3.0"]
    assert m2ho.parse_environment([]).changed() == []
    s = m2ho.emu_scenario(load_scenario("driving-m2ho"), 20, "cubic", False, (), env)
    buffers = {c["type"]: set() for c in s["radio"]["cells"]}
    for c in s["radio"]["cells"]:
        assert c["ue_share"] == 0.3
        assert c["max_burst_slots"] == 8
        assert c["share_as"] == "rate"
        buffers[c["type"]].add(c["buffer_bytes"])
    assert buffers == {"nr_fr1": {600_000}, "nr_fr2": {1_200_000}}, buffers
    ue = next(h for h in s["host"] if h["name"] == "ue")
    assert ue["tcp_rmem"] == [round(0.3 * b) for b in m2ho.UE_TCP_RMEM], ue
    nr = next(link for link in s["link"] if link.get("radio"))
    assert nr["queue"] == f"{round(0.3 * m2ho.UE_UPLINK_BUFFER_BYTES)}B", nr
    assert s["radio"]["measurement"]["rate_hold_ms"] == 1000.0
    assert s["radio"]["handover"]["context_release"]["redeliver_probability"] == 1.0
    assert s["radio"]["handover"]["cancel_on_a1"], "the scenario's handover settings stay"
    assert s["radio"]["channel"]["correlation_scale"] == 3.0
    assert s["radio"]["channel"]["los"] == "stochastic", "the scenario's channel stays"
    plain = m2ho.emu_scenario(load_scenario("driving-m2ho"), 20, "cubic", False)
    assert "rate_hold_ms" not in plain["radio"].get("measurement", {}), "the model's default"
    assert "context_release" not in plain["radio"]["handover"], "the model's default"
    assert "correlation_scale" not in plain["radio"]["channel"], "the model's default"
    assert all("max_burst_slots" not in c and "share_as" not in c
               for c in plain["radio"]["cells"])
    for bad, why in (("ue_share=0", "share"), ("ue_share=1.5", "share"),
                     ("rate_hold_ms=-1", "hold"), ("rate_hold_ms=inf", "hold"),
                     ("rate_hold_ms=nan", "hold"), ("redeliver_probability=1.5", "probability"),
                     ("redeliver_probability=nan", "probability"),
                     ("max_burst_slots=0", "slots"), ("max_burst_slots=2.5", "slots"),
                     ("correlation_scale=0", "scale"), ("correlation_scale=inf", "scale"),
                     ("correlation_scale=nan", "scale"),
                     ("buffer_nr_fr1=-1", "positive"), ("buffer_nr_fr2=1.5", "whole"),
                     ("buffer_lte=1", "KEY one of"), ("ue_share", "KEY one of"),
                     ("ue_share=a", "not a number"), ("share_as=time", "one of slots")):
        with pytest.raises(ValueError, match=why):
            m2ho.parse_environment([bad])
        with pytest.raises(SystemExit) as exit_:
            main(["run", "m2ho", "--m2ho-env", bad, "--out", str(tmp_path / "r")])
        assert exit_.value.code == 2


def test_m2ho_plots_a_whole_sub6_to_mmwave_handover():
    """The throughput and cwnd plot shows the first sub6→mmW handover whose [-5, 5] s
    window lies in the stretch, else the first handover."""
    from polypath_lab.experiments import m2ho

    hos = [(3.4, "mmW-mmW"), (32.1, "mmW-sub6"), (47.2, "sub6-mmW"), (76.0, "sub6-mmW")]
    assert m2ho._plotted_handover(hos, 80) == (47.2, "sub6-mmW")
    assert m2ho._plotted_handover(hos[:2] + [(47.2, "sub6-mmW")], 50) == (3.4, "mmW-mmW")
    assert m2ho._plotted_handover([(2.0, "sub6-mmW"), (9.0, "sub6-mmW")], 20) == (9.0, "sub6-mmW")


def test_m2ho_params_reach_the_replays_and_the_daemon(tmp_path):
    """``--m2ho-param KEY=VALUE`` goes to the controller of the replays and to the daemon of
    the M2HO variant (quoted for the shell, braces doubled for the emulator), not to the
    other variants; a key the controller does not take fails in the replays, before any
    emulation, naming it; a parameter without ``=`` is refused."""
    from polypath_lab.experiments import m2ho
    from polypath_lab.sim import LabError, load_scenario

    base = load_scenario("driving-m2ho")
    params = ("lambda=1.5", 'burst={"full":1.0,"partial":0.4}')
    recv = next(f for f in m2ho.emu_scenario(base, 20, "cubic", True, params)["flow"]
                if f["name"] == "recv")["command"]
    assert " --param lambda=1.5 --param 'burst={{\"full\":1.0,\"partial\":0.4}}' " in recv, recv
    plain = m2ho.emu_scenario(base, 20, "cubic", False, params)
    assert all("--param" not in f["command"] for f in plain["flow"]), plain["flow"]
    events = tmp_path / "events.jsonl"
    events.write_text("")
    assert m2ho._replay(events, params)["handovers"] == []
    with pytest.raises(LabError, match="lamda"):
        m2ho._replay(events, ("lamda=1.5",))
    with pytest.raises(SystemExit) as exit_:
        main(["run", "m2ho", "--m2ho-param", "lambda", "--out", str(tmp_path / "r")])
    assert exit_.value.code == 2


def test_m2ho_window_use_by_hand(tmp_path):
    """The table of what held each sender back splits each sender's intervals by the
    serving cell's type (the target of the last handover before them, the source of the
    first one before any) and sums the time the receiver's window stalled it, and the
    sender's timeouts, those within TIMEOUT_AFTER_HO_S after a handover apart; a kernel
    that does not count timeouts gives none."""
    from polypath_lab.experiments import m2ho
    from polypath_lab.report import Experiment

    out, old_kernel = tmp_path / "emu-m2ho", tmp_path / "emu-cubic"
    out.mkdir()
    old_kernel.mkdir()
    # Sender time t_s is model time - 1 s; a handover to mmWave at 3.0 s (model time).
    iv = [{"t_s": 1.0, "seconds": 1.0, "rwnd_limited_ms": 250.0, "cwnd_bytes": 100_000,
           "rtos": 1, "sndbuf_limited_ms": 300.0},
          {"t_s": 1.5, "seconds": 0.5, "rwnd_limited_ms": 500.0, "cwnd_bytes": 200_000,
           "rtos": 0, "sndbuf_limited_ms": 0.0},
          {"t_s": 3.0, "seconds": 1.0, "rwnd_limited_ms": 0.0, "cwnd_bytes": 900_000,
           "rtos": 2, "sndbuf_limited_ms": 250.0},
          {"t_s": 9.0, "seconds": 1.0, "rwnd_limited_ms": 1000.0, "cwnd_bytes": 1,
           "rtos": 5, "sndbuf_limited_ms": 1000.0}]
    (out / "send.json").write_text(json.dumps({"intervals": iv}))
    # A report without timeouts (kernels before 6.7) and, for the table's dash, without the
    # send buffer's stalls.
    (old_kernel / "send.json").write_text(json.dumps(
        {"intervals": [{k: v for k, v in i.items() if k not in ("rtos", "sndbuf_limited_ms")}
                       for i in iv]}))
    e = Experiment("m2ho", "M2HO", "by hand")
    data = m2ho._window_use(e, {"m2ho": {"out": out}, "cubic": {"out": old_kernel}},
                            [(3.0, "sub6-mmW")], seconds=5, where="by hand")
    sub6, mmw = data["m2ho"]["sub6"], data["m2ho"]["mmW"]
    assert sub6["seconds"] == 1.5 and sub6["rwnd_limited_pct"] == 50.0
    assert sub6["sndbuf_limited_pct"] == 20.0 and sub6["cwnd_kb"] == 150.0
    # The interval past the emulated stretch (10 s > 5 s) is left out.
    assert mmw["seconds"] == 1.0 and mmw["rwnd_limited_pct"] == 0.0 and mmw["cwnd_kb"] == 900.0
    assert mmw["sndbuf_limited_pct"] == 25.0
    assert math.isnan(data["cubic"]["sub6"]["sndbuf_limited_pct"])
    # The sub-6 timeout came before the handover; the mmWave ones 1 s after it.
    assert (sub6["timeouts"], sub6["timeouts_after_handover"]) == (1, 0)
    assert (mmw["timeouts"], mmw["timeouts_after_handover"]) == (2, 2)
    assert data["cubic"]["mmW"]["timeouts"] is None
    assert e.tables[-1].rows == [
        ["m2ho", "2", "50", "20", "150", "1", "0", "25", "900", "1 (0)", "2 (2)"],
        ["cubic", "2", "50", "–", "150", "1", "0", "–", "900", "–", "–"]]


def test_m2ho_rate_collapses_by_hand():
    """A bin is in a collapse when the cell's rate fell below half its highest over the
    0.5 s before, or the link is down; the drops there against all drops, and the collapses
    that begin outside every handover's [-5, 5] s window, a minute of the time outside."""
    from polypath_lab.experiments import m2ho

    def bins(rates, drops, down=()):
        return [{"time_s": f"{i / 10:.1f}", "rate_mbps": str(r), "drops": str(d),
                 "up": "0" if i in down else "1"} for i, (r, d) in enumerate(zip(rates, drops))]

    # 20 s of 100 Mbit/s with a handover at 15.0 s (the link down in its bin): 10 s (0.0
    # to 9.9 s) lie outside its window. There the rate falls to 40 from 1.0 s to 1.9 s (a
    # collapse: drops 30 + 20 in it, 10 at a steady rate before); at 12.0 s it falls to 30
    # for 0.5 s (15 drops), the cell degrading 3 s before the handover: the handover's.
    rates = [100] * 10 + [40] * 10 + [100] * 100 + [30] * 5 + [100] * 75
    drops = [0] * 200
    drops[5], drops[10], drops[11], drops[121], drops[150] = 10, 30, 20, 15, 5
    got = m2ho._rate_collapses(bins(rates, drops, down={150}), [(15.0, "mmW-sub6")])
    assert got["drops"] == 80 and abs(got["at_collapse_pct"] - 100 * 70 / 80) < 1e-9, got
    assert (got["collapses"], got["collapses_away"]) == (3, 1), got
    assert abs(got["away_s"] - 10.0) < 1e-9 and abs(got["away_per_min"] - 6.0) < 1e-9, got
    # A decline in steps 0.6 s apart, each to 70 % of the one before, is no collapse,
    # though it ends below half of where it began.
    slow = [100] * 6 + [70] * 6 + [45] * 6
    got = m2ho._rate_collapses(bins(slow, [0] * 17 + [5]), [])
    assert got["away_per_min"] == 0 and got["at_collapse_pct"] == 0, got


def test_m2ho_sub6_stays_by_hand(tmp_path):
    """A sub-6 stay runs from a mmW→sub6 handover to the next sub6→mmW one (sub6→sub6 ones
    within it); each sender's window entering it (the second before), lowest in it and
    leaving it, its retransmissions there, and its throughput back on mmWave up to the
    next handover; a sender kept its window when the lowest is at least KEPT_SHARE of
    the entering one."""
    from polypath_lab.experiments import m2ho
    from polypath_lab.report import Experiment

    def write(name, iv, delivered):
        out = tmp_path / name
        out.mkdir()
        (out / "send.json").write_text(json.dumps({"intervals": iv}))
        rows = ["link,dir,time_s,delivered_mbps,rate_mbps"]
        rows += [f"nr,down,{t / 2:.1f},{delivered},50" for t in range(1, 20)]
        rows += [f"nr,up,{t / 2:.1f},99,99" for t in range(1, 20)]
        (out / "links.csv").write_text("\n".join(rows) + "\n")
        return {"out": out}

    # Sender time t_s is model time - 1 s.
    iv = lambda cws, rx: [{"t_s": t - 1.0, "seconds": 0.1, "cwnd_bytes": c, "retrans": r}  # noqa: E731
                          for t, c, r in zip((1.5, 2.5, 5.5), cws, rx)]
    runs = {"cubic": write("emu-cubic", iv((600_000, 100_000, 200_000), (0, 7, 0)), 10),
            "m2ho": write("emu-m2ho", iv((600_000, 500_000, 550_000), (0, 0, 0)), 20)}
    hos = [(2.0, "mmW-sub6"), (3.0, "sub6-sub6"), (6.0, "sub6-mmW"), (8.0, "mmW-mmW")]
    e = Experiment("m2ho", "M2HO", "by hand")
    stays = m2ho._sub6_stays(e, runs, hos, seconds=10, where="by hand",
                              env=m2ho.Environment())["stays"]
    assert len(stays) == 1 and stays[0]["seconds"] == 4.0
    assert stays[0]["m2ho"]["kept"] and not stays[0]["cubic"]["kept"]
    # Back on mmWave: the bins ending in (6, 8] s, up to the next handover.
    assert stays[0]["m2ho"]["return_mbps"] == 20.0 and stays[0]["cubic"]["return_mbps"] == 10.0
    assert e.tables[-1].rows == [["2.0", "4.0", "600 / 100 / 200", "7", "10.0",
                                  "600 / 500 / 550", "0", "20.0"]]
    assert "through 1 of 1 stays (plain CUBIC through 0)" in e.notes[-1], e.notes[-1]
    assert "2.00x CUBIC's after the stays it kept" in e.notes[-1], e.notes[-1]
    # A stay that has not ended within the stretch is not one.
    e = Experiment("m2ho", "M2HO", "by hand")
    assert m2ho._sub6_stays(e, runs, hos[:2], seconds=10, where="by hand",
                            env=m2ho.Environment()) == {"stays": []}


def test_jain_index_by_hand():
    from polypath_lab.netmetrics import jain

    assert jain([5.0, 5.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5
    assert jain([3.0, 1.0]) == 16 / 20
    assert math.isnan(jain([])) and math.isnan(jain([0.0, 0.0]))
    # The paper's Table 2 from its Tables 4 and 5 (symmetric BBR-BBR): TN1 from the two
    # protocols' means on TN1, total from their sums over both links.
    assert round(jain([289.89, 206.83]), 4) == 0.9728
    assert round(jain([289.89 + 300.76, 206.83 + 195.97]), 4) == 0.9655


def test_rfc3550_jitter_by_hand():
    from polypath_lab.netmetrics import rfc3550_jitter

    # Transits 10, 12, 11, 11 ms: |D| = 2, 1, 0; J += (|D| - J) / 16.
    j = rfc3550_jitter([10.0, 12.0, 11.0, 11.0])
    assert j == [0.0, 0.125, 0.125 + (1 - 0.125) / 16, (0.125 + (1 - 0.125) / 16) * 15 / 16]
    assert rfc3550_jitter([]) == []
    # A constant transit time (however large) has no jitter.
    assert rfc3550_jitter([40.0] * 5) == [0.0] * 5


def test_bins_and_loss_by_hand():
    from polypath_lab.netmetrics import binned_rate_mbps, loss_percent

    events = [(0.05, 1250.0), (0.15, 2500.0), (0.16, 1250.0), (0.31, 99.0), (-0.01, 99.0)]
    assert binned_rate_mbps(events, 0.0, 0.3, 0.1) == pytest.approx([0.1, 0.3, 0.0])
    assert loss_percent([99, 0, 50], [1, 0, 50]) == [1.0, 50.0]


def test_coexistence_scenario_scales_rates_and_sets_the_pairing():
    from polypath_lab.experiments import coexistence as cx
    from polypath_lab.sim import load_scenario

    base = load_scenario(cx.SCENARIOS["asymmetric"])
    s = cx.scenario_for(base, cx.Config("reno", "olia", "rr"), 10.0, 0.125)
    assert [link["rate"] for link in s["link"]] == ["62.7175Mbit/s", "54.5538Mbit/s"]
    assert [link["queue"] for link in s["link"]] == ["15.92ms", "17.50ms"]
    flows = {f["name"]: f for f in s["flow"]}
    assert (flows["mptcp"]["cc"], flows["mptcp"]["rate"], flows["mptcp"]["mptcp"]) == (
        "reno", "12.5Mbit/s", True)
    assert (flows["mpquic"]["cc"], flows["mpquic"]["scheduler"], flows["mpquic"]["rate"]) == (
        "olia", "rr", "12.5Mbit/s")
    send_s = cx.WARMUP_S + 10.0
    assert flows["mpquic"]["bytes"] == int(12.5e6 / 8 * send_s)
    assert flows["mpquic"]["stop"] == flows["mptcp"]["stop"] == f"{cx.START_S + send_s}s"
    assert s["output"]["packet_log"] is True
    assert base["link"][0]["rate"] == "501.74Mbit/s", "the base is not modified"
    ue = cx.address_links(s)
    assert (ue["10.1.0.15"], ue["10.2.1.10"], len(ue)) == ("tn1", "tn2", 24)


def test_coexistence_metrics_of_a_synthetic_run(tmp_path):
    """The whole analysis on hand-made outputs: per link and protocol 1250-byte packets
    every 10 ms (1 Mbit/s; MPQUIC twice as often on TN1), a transit time alternating
    between 10 and 12 ms on one MPTCP connection, drops in one bin."""
    from polypath_lab.experiments import coexistence as cx
    from polypath_lab.sim import Run, RunResult, load_scenario

    scenario = cx.scenario_for(load_scenario(cx.SCENARIOS["symmetric"]), cx.Config("bbr", "bbr"),
                               1.0, 1.0)
    t0 = cx.START_S + cx.WARMUP_S
    rows = ["recv_s,send_s,flow,instance,src,dst,bytes,owd_ms,jitter_ms"]
    drops = ["time_s,flow,instance,agent,path,local,remote,delivered_mbps,dropped_pkts,"
             "srtt_ms,cwnd,bytes_in_flight,lost_packets,sent_packets"]
    for k in range(100):
        t = t0 + k * 0.01 + 0.001
        owd = 10.0 if k % 2 == 0 else 12.0
        rows.append(f"{t:.6f},{t - owd / 1e3:.6f},mptcp,0,10.1.0.10:1000,10.1.200.1:5201,"
                    f"1250,{owd},0")
        rows.append(f"{t:.6f},{t - 0.01:.6f},mptcp,1,10.2.0.11:1000,10.2.200.1:5202,1250,10,0")
        for dt in (0.0, 0.005):
            rows.append(f"{t + dt:.6f},{t:.6f},mpquic,0,10.1.1.10:1000,10.1.200.1:4433,1250,10,0")
        rows.append(f"{t:.6f},{t - 0.01:.6f},mpquic,0,10.2.1.10:1000,10.2.200.1:4433,1250,10,0")
        # An acknowledgement on the way back: not uplink, not counted.
        rows.append(f"{t:.6f},{t:.6f},mptcp,0,10.1.200.1:5201,10.1.0.10:1000,52,10,0")
    (tmp_path / "packets.csv").write_text("\n".join(rows) + "\n")
    for b in range(10):
        t = t0 + (b + 1) * 0.1
        drops.append(f"{t:.6f},mptcp,0,0,s0,10.1.0.10:1000,10.1.200.1:5201,0,"
                     f"{10 if b == 3 else 0},,,,,")
    (tmp_path / "paths.csv").write_text("\n".join(drops) + "\n")
    report = {"realtime": {"lateness": {"p50_us": 1.0, "p99_us": 2.0, "max_us": 3.0},
                           "engine_cpu_share": 0.1, "overloaded": False}}
    m = cx.analyse(RunResult(Run("x", scenario, 1), tmp_path, report), 1.0, 1.0)
    assert not (tmp_path / "packets.csv").exists()
    tput = m["throughput"]
    assert tput["tn1/mptcp"]["mean"] == pytest.approx(1.0)
    assert tput["tn1/mpquic"]["mean"] == pytest.approx(2.0)
    assert tput["tn2/mptcp"]["mean"] == tput["tn2/mpquic"]["mean"] == pytest.approx(1.0)
    assert (tput["tn1/mptcp"]["min"], tput["tn1/mptcp"]["std"]) == (pytest.approx(1.0), 0.0)
    assert m["jain"]["tn1"] == pytest.approx(9 / 10)
    assert m["jain"]["tn2"] == pytest.approx(1.0)
    assert m["jain"]["total"] == pytest.approx(25 / 26)
    # The alternating connection: |D| = 2 ms each packet, its jitter approaches 2 ms.
    assert 1.0 < m["jitter"]["tn1/mptcp"] < 2.0
    assert m["jitter"]["tn2/mptcp"] == m["jitter"]["tn2/mpquic"] == 0.0
    # 20 MPTCP packets a bin (two connections of 10), 10 drops in one of ten bins: a
    # third of what arrived there.
    assert m["loss"]["mptcp"]["max"] == pytest.approx(100 / 3)
    assert m["loss"]["mptcp"]["mean"] == pytest.approx(10 / 3)
    assert m["loss"]["mpquic"]["max"] == 0.0


def test_quick_coexistence_carries_the_emulators_figures(quick_experiment):
    """Every quick coexistence result sits beside the emulator's lateness figures, and the
    tables hold the paper's figures beside polypath's for every pairing run."""
    from polypath_lab import emu
    from polypath_lab.experiments import coexistence as cx

    if emu.unavailable():
        pytest.skip(f"coexistence runs in the emulator: {emu.unavailable()}")
    e, _ = quick_experiment("coexistence")
    jain = next(t for t in e.tables if t.title.startswith("Table 2"))
    assert set(jain.data) == {cx.Config(a, b).key for a, b in cx.QUICK_PAIRINGS}
    for key, row in jain.data.items():
        rt = row["realtime"]
        print(key, row["paper"], row["polypath"], rt)
        assert rt["late_p99_us"] is not None and rt["late_max_us"] >= rt["late_p99_us"]
        assert row["paper"][2] is not None and 0.5 <= row["polypath"]["total"] <= 1.0
    for title in ("Table 3", "Table 4", "Table 5", "Table 6"):
        assert any(t.title.startswith(title) for t in e.tables), title


def test_coexistence_refuses_a_run_that_did_not_apply_its_configuration(tmp_path):
    """The lab checks the command lines the emulator ran and what the kernel reported, so
    a configuration that changed nothing cannot pass for one that did."""
    from polypath_lab.experiments import coexistence as cx
    from polypath_lab.sim import LabError, Run, RunResult

    sender_out = tmp_path / "send.stdout"
    procs = [{"role": "tcp_sender", "flow": "mptcp", "stdout": str(sender_out),
              "command": "polypath tcp send --connect 10.1.200.1:5201 --mptcp --cc cubic"},
             {"role": "quic_client", "flow": "mpquic", "stdout": str(tmp_path / "c"),
              "command": "polypath client --scheduler roundrobin --cc bbr --path-manager default"}]
    run = RunResult(Run("x", {}, 1), tmp_path, {"processes": procs})
    cx.check_applied(run, cx.Config("cubic", "bbr", "rr"))
    for wrong in (cx.Config("reno", "bbr", "rr"), cx.Config("cubic", "bbr"),
                  cx.Config("cubic", "bbr2", "rr")):
        with pytest.raises(LabError):
            cx.check_applied(run, wrong)
    sender_out.write_text('{"cc": "reno", "mptcp": true}')
    with pytest.raises(LabError, match="reports cc 'reno'"):
        cx.check_applied(run, cx.Config("cubic", "bbr", "rr"))
    with pytest.raises(LabError, match="no"):
        cx.check_applied(RunResult(Run("y", {}, 1), tmp_path, {"processes": procs[:1]}),
                         cx.Config("cubic", "bbr", "rr"))
