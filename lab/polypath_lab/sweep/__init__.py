"""Parameter sweeps: ``python -m polypath_lab sweep SPEC.toml [--backend local|ray]
[--address ADDR] [--out DIR]``.

A spec (:mod:`.spec`, format in ``lab/sweeps/README.md``) names a base scenario and the
parameters to vary; every point with every seed is a job (:mod:`.jobs`) that writes its
scenario, runs the simulator and returns its summary. Jobs run in a local process pool or
as Ray tasks (:mod:`.backends`), are journalled as they finish and skipped when the
campaign runs again (:mod:`.table`), and end up in one table (Parquet and CSV) with plots
(:mod:`.plots`) and an ``index.md`` (:mod:`.campaign`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..sim import REPO, LabError

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``sweep`` subcommand's arguments."""
    p.add_argument("spec", type=Path, help="sweep spec (lab/sweeps/*.toml)")
    p.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local: a process pool on this machine (default); ray: one Ray task "
                        "per job")
    p.add_argument("--address", help="Ray cluster to join (auto, HOST:6379 or "
                                     "ray://HOST:10001); default: start a local Ray instance")
    p.add_argument("--out", type=Path,
                   help="campaign folder (default: sweeps-out/NAME[-quick] under the "
                        "repository)")
    p.add_argument("--jobs", type=int, help="local processes, or the CPUs of a local Ray "
                                            "instance (default: one per core)")
    p.add_argument("--ship", action="store_true",
                   help="ray: send the binary, traces and lab code in Ray's runtime "
                        "environment (nodes without a shared file system)")
    p.add_argument("--quick", action="store_true",
                   help="the reduced campaign (the spec's [quick] table)")
    p.add_argument("--retry-failed", action="store_true",
                   help="run the jobs that failed before again")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(a: argparse.Namespace) -> int:
    """Runs the campaign the arguments name; prints where the table and plots are."""
    from . import campaign, spec as spec_mod

    try:
        spec = spec_mod.load(a.spec, a.quick)
        out = a.out or REPO / "sweeps-out" / (spec.name + ("-quick" if a.quick else ""))
        if a.jobs is not None and a.jobs < 1:
            raise LabError(f"--jobs {a.jobs}: at least 1")
        outcome = campaign.run(spec, out, a.backend, a.address, a.jobs, a.ship,
                               a.retry_failed, not a.no_progress)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for f in outcome.figures:
        if f.table:
            cols, body = f.table
            widths = [max(len(r[i]) for r in [cols] + body) for i in range(len(cols))]
            print(f"\n{f.caption}")
            for r in [cols] + body:
                print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print(f"\n{outcome.jobs} jobs: {outcome.ran} run now, {outcome.skipped} finished before, "
          f"{outcome.failed} not ok; {outcome.wall_s} s")
    print(f"table: {outcome.parquet} and {outcome.csv.name}; report: {outcome.index}")
    return 0
