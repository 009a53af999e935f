"""Benchmark: jobs per minute of the local and the Ray backend on this machine.

``python -m polypath_lab.sweep.bench [--size 20MB] [--seeds 3] [--address ADDR]`` runs the
same campaign (the NR-DC scenario, four schedulers x two congestion controllers x the
seeds, a download of ``--size`` each) once with each backend into fresh folders, and prints
each backend's wall time and jobs per minute, Ray's start-up time (a local instance, or
joining ``--address``) and whether the two tables are identical. The machine's load
average is printed before and after: on a shared machine the figures are only comparable
within one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
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
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="polypath-sweep-bench-") as tmp:
        root = Path(tmp)
        path = root / "bench.toml"
        path.write_text(SPEC.format(seeds=list(range(1, a.seeds + 1)), size=a.size))
        try:
            s = spec.load(path)
            print(f"bench: {len(s.points) * len(s.seeds)} jobs (nrdc-two-path, {a.size} each) "
                  f"per backend; {os.cpu_count()} cores; load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
            results = {}
            for backend in ("local", "ray"):
                start = time.monotonic()
                out = campaign.run(s, root / backend, backend,
                                   a.address if backend == "ray" else None, progress=False)
                wall = time.monotonic() - start
                results[backend] = (out, wall)
        except LabError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        startup = None if a.address else _ray_startup()
        for backend, (out, wall) in results.items():
            line = (f"{backend:5s}: {out.ran} jobs ({out.failed} not ok) in {wall:.1f} s: "
                    f"{out.ran / wall * 60:.1f} jobs/min")
            if backend == "ray" and startup is not None and wall > startup:
                line += (f"; without Ray's start-up and shutdown ({startup:.1f} s, measured "
                         f"alone) {out.ran / (wall - startup) * 60:.1f} jobs/min")
            print(line)
        same = ((root / "local" / "results.csv").read_bytes()
                == (root / "ray" / "results.csv").read_bytes())
        lw, rw = results["local"][1], results["ray"][1]
        print(f"ray / local wall time: {rw / lw:.2f}; tables identical: {same}; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if same else 2


def _ray_startup() -> float:
    """Seconds to start a local Ray instance as the ray backend does and stop it again."""
    import ray

    from .backends import cores

    start = time.monotonic()
    ray.init(num_cpus=cores(), include_dashboard=False, logging_level="WARNING")
    ray.shutdown()
    return time.monotonic() - start


if __name__ == "__main__":
    sys.exit(main())
