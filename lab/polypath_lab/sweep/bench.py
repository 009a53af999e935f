"""Benchmark: jobs per minute of the local and the Ray backend on this machine.

``python -m polypath_lab.sweep.bench [--size 20MB] [--seeds 3] [--rounds 2] [--address ADDR]``
runs the same campaign (the NR-DC scenario, four schedulers x two congestion controllers x
the seeds, a download of ``--size`` each) with each backend into fresh folders, the two
alternating first over the rounds. For each run it prints the time from the campaign's
start to its last job and the jobs per minute, how much of Ray's time went into starting it
(a local instance, or joining ``--address``) and the rate without it; at the end, whether
the two backends' tables were identical. The machine's load average is printed with each
round: on a shared machine the figures are only comparable within a round.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ..sim import LabError
from . import campaign, spec

SPEC = """
name = "bench"
base = "nrdc-two-path"
seeds = {seeds}
metrics = ["completion_time"]
[set]
"flow[0].bytes" = "{size}"
"sim.duration" = "60s"
[grid]
"flow[0].scheduler" = ["minrtt", "roundrobin", "ecf", "lamp5g"]
"flow[0].cc" = ["cubic", "bbr"]
"""


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark and prints its figures."""
    p = argparse.ArgumentParser(prog="python -m polypath_lab.sweep.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="20MB", help="download size of each job")
    p.add_argument("--seeds", type=int, default=3, help="seeds per point (8 points)")
    p.add_argument("--address", help="Ray cluster to join instead of a local instance")
    p.add_argument("--rounds", type=int, default=2,
                   help="rounds of both backends (the first one first in odd rounds)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="polypath-sweep-bench-") as tmp:
        root = Path(tmp)
        path = root / "bench.toml"
        path.write_text(SPEC.format(seeds=list(range(1, a.seeds + 1)), size=a.size))
        same = True
        try:
            s = spec.load(path)
            print(f"bench: {len(s.points) * len(s.seeds)} jobs (nrdc-two-path, {a.size} each) "
                  f"per backend and round, {a.rounds} rounds, the backends alternating; "
                  f"{os.cpu_count()} cores; load average {_load()}", flush=True)
            for n in range(1, a.rounds + 1):
                order = ("local", "ray") if n % 2 else ("ray", "local")
                results = {b: campaign.run(s, root / f"{b}{n}", b,
                                           a.address if b == "ray" else None, progress=False)
                           for b in order}
                for backend in order:
                    out = results[backend]
                    line = (f"round {n} {backend:5s}: {out.ran} jobs ({out.failed} not ok) in "
                            f"{out.jobs_s:.1f} s: {out.ran / out.jobs_s * 60:.1f} jobs/min")
                    if out.startup_s:
                        line += (f"; {out.startup_s:.1f} s of it starting Ray, without which "
                                 f"{out.ran / (out.jobs_s - out.startup_s) * 60:.1f} jobs/min")
                    print(line, flush=True)
                same &= ((root / f"local{n}" / "results.csv").read_bytes()
                         == (root / f"ray{n}" / "results.csv").read_bytes())
                ratio = results["ray"].jobs_s / results["local"].jobs_s
                print(f"round {n}: ray / local time {ratio:.2f}; load average {_load()}",
                      flush=True)
        except LabError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"tables identical (local and Ray, every round): {same}")
    return 0 if same else 2


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
