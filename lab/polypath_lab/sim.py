"""Running the polypath simulator from Python.

A :class:`Run` is one scenario variant and one seed. :func:`run_all` writes each variant's
scenario next to its outputs, runs ``polypath sim run SCENARIO --seed S --out DIR --json
--quiet`` (two processes at a time by default, one per core), and returns
:class:`RunResult`\\ s with the JSON summary and readers for the CSV series.
"""

from __future__ import annotations

import concurrent.futures
import copy
import csv
import json
import os
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from .progress import Progress

#: The repository root (``lab/`` sits directly under it).
REPO = Path(__file__).resolve().parents[2]


class LabError(Exception):
    """A run that could not be carried out, with what went wrong."""


def polypath_binary() -> Path:
    """The ``polypath`` binary: ``$POLYPATH_BIN``, else the release build, else the debug
    build of this checkout."""
    env = os.environ.get("POLYPATH_BIN")
    if env:
        path = Path(env)
        if not path.is_file():
            raise LabError(f"POLYPATH_BIN={env} is not a file")
        return path
    for profile in ("release", "debug"):
        path = REPO / "target" / profile / "polypath"
        if path.is_file():
            return path
    raise LabError(
        "no polypath binary: run `make build` (or `cargo build --release -p polypath`) first"
    )


def load_scenario(name: str | Path) -> dict[str, Any]:
    """Reads ``scenarios/NAME.toml`` (or the file at a :class:`~pathlib.Path`) into a dict
    (the base the experiments vary). The links' trace and prediction files are made
    absolute (they are relative to the scenario's folder, and the variants are written
    elsewhere)."""
    path = name if isinstance(name, Path) else REPO / "scenarios" / f"{name}.toml"
    try:
        with path.open("rb") as f:
            scenario = tomllib.load(f)
    except OSError as e:
        raise LabError(f"{path}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise LabError(f"{path}: {e}") from e
    for link in scenario.get("link", []):
        for table in (link, link.get("up"), link.get("down")):
            if not isinstance(table, dict):
                continue
            for key, field_name in (("rate", "trace"), ("predictor", "file")):
                value = table.get(key)
                if isinstance(value, dict) and isinstance(value.get(field_name), str):
                    value[field_name] = str((path.parent / value[field_name]).resolve())
    return scenario


def variant(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with top-level keys replaced."""
    out = copy.deepcopy(base)
    out.update(changes)
    return out


@dataclass
class Run:
    """One simulator run: a scenario (as a dict) and a seed."""

    #: Short unique name; also the output directory's name.
    name: str
    #: The scenario.
    scenario: dict[str, Any]
    #: The seed.
    seed: int
    #: Free-form labels the experiment groups results by (scheduler, cc, ...).
    labels: dict[str, Any] = field(default_factory=dict)
    #: Also write the link-event stream (``events.jsonl`` in the output directory).
    events: bool = False


@dataclass
class RunResult:
    """What one run produced."""

    run: Run
    #: Output directory (scenario.toml, the CSV files, summary.json).
    out: Path
    #: The run report printed by ``--json`` (summary plus wall time and hashes).
    report: dict[str, Any]

    def csv(self, name: str) -> list[dict[str, str]]:
        """The rows of ``NAME.csv`` in the output directory."""
        with (self.out / f"{name}.csv").open(newline="") as f:
            return list(csv.DictReader(f))

    def completions(self, label: str = "transfer") -> list[float]:
        """End times (s) of the completions with ``label``."""
        return [float(r["end_s"]) for r in self.csv("completions") if r["label"] == label]

    def completion_time(self) -> float | None:
        """When the last transfer of the run completed (s), if every QUIC flow instance
        completed; ``None`` otherwise."""
        ends = self.completions()
        expected = sum(
            f["instances"] for f in self.report["flows"] if f["kind"] == "quic"
        )
        if len(ends) < expected or not ends:
            return None
        return max(ends)


def run_one(run: Run, work: Path, binary: Path) -> RunResult:
    """Runs one run with ``binary`` under ``work/NAME`` (its scenario written there as
    ``scenario.toml``) and returns its result. A failed run raises :class:`LabError` with
    the simulator's message."""
    out = work / run.name
    out.mkdir(parents=True, exist_ok=True)
    scenario_path = out / "scenario.toml"
    with scenario_path.open("wb") as f:
        tomli_w.dump(run.scenario, f)
    cmd = [str(binary), "sim", "run", str(scenario_path), "--seed", str(run.seed),
           "--out", str(out), "--json", "--quiet"]
    if run.events:
        cmd += ["--events", str(out / "events.jsonl")]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise LabError(f"run {run.name}: cannot start {binary}: {e}") from e
    if proc.returncode != 0:
        raise LabError(f"run {run.name} failed ({' '.join(cmd)}):\n{proc.stderr.strip()}")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise LabError(f"run {run.name}: the simulator's JSON did not parse: {e}") from e
    return RunResult(run, out, report)


def run_all(runs: list[Run], work: Path, label: str, jobs: int = 2,
            progress: bool = True) -> list[RunResult]:
    """Runs every run (``jobs`` at a time) under ``work/NAME`` and returns their results in
    the order given. A failed run raises :class:`LabError` with the simulator's message."""
    binary = polypath_binary()
    work.mkdir(parents=True, exist_ok=True)
    bar = Progress(len(runs), label, progress)
    results: list[RunResult | None] = [None] * len(runs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        futures = {pool.submit(run_one, r, work, binary): i for i, r in enumerate(runs)}
        for fut in concurrent.futures.as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            bar.step(runs[i].name)
    return [r for r in results if r is not None]


def binned(rows: list[dict[str, str]], value: str, **match: str) -> tuple[list[float], list[float]]:
    """``(time_s, value)`` series of the CSV rows whose columns equal ``match``."""
    ts, vs = [], []
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            ts.append(float(r["time_s"]))
            cell = r[value]
            vs.append(float(cell) if cell else float("nan"))
    return ts, vs
