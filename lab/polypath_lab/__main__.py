"""``python -m polypath_lab run EXPERIMENT|all [--seeds 1,2,3] [--quick | --full] [--out report]``."""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

from . import sweep
from .experiments import Context, registry
from .experiments.m2ho import UE_SHARE, parse_environment
from .report import print_tables, write_report
from .sim import REPO, LabError


#: Seeds of the default (reduced) runs, and of ``--full``.
DEFAULT_SEEDS = [1, 2]
FULL_SEEDS = [1, 2, 3, 4, 5]


def pick_seeds(given: str | None, full: bool) -> list[int]:
    """The seeds of ``--seeds`` (a comma-separated list), or the default set's (the full
    set's with ``--full``) when none are given; ``ValueError`` names what is wrong."""
    if given is None:
        return list(FULL_SEEDS if full else DEFAULT_SEEDS)
    try:
        seeds = [int(s) for s in given.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds: {given!r} is not a comma-separated list of integers")
    if not seeds:
        raise ValueError("--seeds: give at least one seed")
    return seeds


def main(argv: list[str] | None = None) -> int:
    """Runs the named experiments, prints their tables and writes the report."""
    experiments = registry()
    p = argparse.ArgumentParser(prog="python -m polypath_lab", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the experiments")
    r = sub.add_parser("run", help="run experiments and write the report")
    r.add_argument("experiment", nargs="+", help=f"all, or of: {', '.join(experiments)}")
    r.add_argument("--seeds", help="comma-separated seeds (default "
                   f"{','.join(map(str, DEFAULT_SEEDS))}; with --full {','.join(map(str, FULL_SEEDS))})")
    r.add_argument("--quick", action="store_true", help="reduced versions (seconds)")
    r.add_argument("--full", action="store_true",
                   help="full sets where an experiment runs a reduced one by default (five "
                        "seeds instead of two; 5G-CLARITY: static runs of 6 s instead of 4, 12 s "
                        "windows in the dynamic experiment instead of 4, three seeds of "
                        "recovery instead of two; m2ho: "
                        "300 s of the driving and of the walking scenario emulated per variant "
                        "instead of 80 and 12; coexistence: 30 s "
                        "measured per run instead of 5, "
                        "every case, pairing and configuration; chymp: 100 000 duplicated "
                        "packets per loss pair and a third pair)")
    r.add_argument("--m2ho-param", action="append", default=[], metavar="KEY=VALUE",
                   help="m2ho: a parameter of the M2HO controller for its replays and its "
                        "daemon (polypath m2ho run --param; repeatable), e.g. lambda=1.5 or "
                        "rate_control=false; the report names the ones set")
    r.add_argument("--m2ho-env", action="append", default=[], metavar="KEY=VALUE",
                   help="m2ho: the emulated environment (repeatable): ue_share (the UE's "
                        f"share of each cell, default {UE_SHARE}: rates and buffers scale "
                        "with it), buffer_nr_fr1 / buffer_nr_fr2 (per-UE cell buffer at full "
                        "rate, bytes; default the scenario's or the model's), rate_hold_ms "
                        "(hold each capacity this long, e.g. 1000 as a per-second trace "
                        "replay; default 0), redeliver_probability (a context-release "
                        "gap's packets delivered late rather than lost; default the "
                        "model's), max_burst_slots (every cell's longest burst to the UE; "
                        "default 40), share_as (slots: the share as bursts of whole slots "
                        "between other UEs' turns, the model's; rate: every slot at the "
                        "share of its bytes), correlation_scale (multiplies the channel's "
                        "correlation distances, default 1: TR 38.901's); the report "
                        "names them")
    r.add_argument("--out", type=Path, default=REPO / "report", help="report directory")
    r.add_argument("--jobs", type=int, default=2, help="simulator processes at a time")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    sweep.add_arguments(sub.add_parser("sweep", help="run a parameter sweep (lab/sweeps)"))
    a = p.parse_args(argv)
    if a.cmd == "sweep":
        return sweep.main(a)
    if a.cmd == "list":
        for name, m in experiments.items():
            print(f"{name}\n{describe(m)}\n")
        return 0
    names = list(experiments) if "all" in a.experiment else a.experiment
    unknown = [n for n in names if n not in experiments]
    if unknown:
        p.error(f"unknown experiment(s) {', '.join(unknown)}; known: {', '.join(experiments)}")
    try:
        seeds = pick_seeds(a.seeds, a.full)
    except ValueError as e:
        p.error(str(e))
    if a.quick and a.full:
        p.error("--quick and --full exclude each other")
    bad = [x for x in a.m2ho_param if "=" not in x or not x.split("=", 1)[0].strip()]
    if bad:
        p.error(f"--m2ho-param {bad[0]!r}: needs KEY=VALUE")
    try:
        parse_environment(a.m2ho_env)
    except ValueError as e:
        p.error(str(e))
    ctx = Context(seeds, a.quick, a.out, a.out / "runs", a.jobs, not a.no_progress, a.full,
                  tuple(a.m2ho_param), tuple(a.m2ho_env))
    a.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = []
    took = {}
    try:
        for n in names:
            began = time.monotonic()
            done.append(experiments[n].run(ctx))
            took[n] = round(time.monotonic() - began, 1)
            print(f"{n}: {took[n]} s", file=sys.stderr)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    meta = {"seeds": seeds, "mode": "quick" if a.quick else ("full" if a.full else "default"),
            "wall_s": round(time.monotonic() - start, 1), "experiment_wall_s": took}
    index = write_report(done, a.out, meta, order=list(experiments))
    print_tables(done)
    print(f"\nreport: {index} ({meta['wall_s']} s)")
    failed = [c.name for e in done for c in e.checks if not c.ok]
    if failed:
        print(f"{len(failed)} check(s) failed: {'; '.join(failed)}", file=sys.stderr)
        return 2
    return 0


def describe(module) -> str:
    """An experiment's summary for ``list``: the first paragraph of its module docstring,
    whole, wrapped and indented."""
    first = (module.__doc__ or "").strip().split("\n\n", 1)[0]
    # Lines break between words only: a hyphenated word ("real-time") stays whole.
    return textwrap.fill(" ".join(first.split()), width=88, initial_indent="    ",
                         subsequent_indent="    ", break_on_hyphens=False)


if __name__ == "__main__":
    sys.exit(main())
