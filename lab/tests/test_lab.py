"""The lab's reduced experiments (seconds, not minutes): each asserts the shapes the full
reproduction must show, so a regression in the stack, the simulator or the lab fails CI."""

from __future__ import annotations

import json
import math

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


@pytest.mark.parametrize("name", list(registry()))
def test_quick_experiment_shapes(name, tmp_path):
    ctx = Context(seeds=[1], quick=True, out=tmp_path, work=tmp_path / "runs", jobs=2,
                  progress=False)
    e = registry()[name].run(ctx)
    for c in e.checks:
        print(f"{name}: [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.measured}")
    assert e.checks, "every experiment checks something"
    failed = [f"{c.name}: {c.measured}" for c in e.checks if not c.ok]
    assert not failed, failed
    for png, _ in e.plots:
        assert (tmp_path / png).stat().st_size > 1000, png
