"""Jobs: one point of a campaign with one seed, its key, and how a worker runs it.

A job's key is the SHA-256 of its scenario (every file it names replaced by the SHA-256 of
the file's content, so the key does not depend on where the files are), its seed and the
simulator binary's SHA-256 (its version). Two jobs with the same key produce the same
outputs (the simulator is deterministic), so a finished key is never run again.

:func:`execute` is what a worker runs (a local process or a Ray task): it writes the
scenario, runs ``polypath sim run`` through :func:`polypath_lab.sim.run_one`, flattens the
run's JSON report into columns and adds the campaign's metrics. A failure is a record with
its error, not an exception, so a campaign goes on past it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sim import LabError, Run, run_one
from .spec import Spec, file_refs

#: Columns of the run report that differ between two runs of the same job (wall time and
#: what is computed from it): kept in the journal, never in the results table.
TIMING_KEYS = ("wall_time_s", "speedup", "events_per_s")
#: Length of a job key (hex digits of the SHA-256).
KEY_LEN = 20


@dataclass
class Job:
    """One run of a campaign."""

    #: Content hash of scenario, seed and binary (see the module documentation).
    key: str
    #: Position in the campaign (point order, then seed): the table's row order.
    index: int
    case: str
    params: dict[str, Any]
    seed: int
    scenario: dict[str, Any]
    #: Metric names (:data:`polypath_lab.sweep.metrics.METRICS`) to add to the row.
    metrics: list[str]
    #: SHA-256 of each file the scenario names, by its path on the driver.
    files: dict[str, str]


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's content, hex."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def job_key(scenario: dict[str, Any], seed: int, files: dict[str, str], binary_sha: str) -> str:
    """The key of a run of ``scenario`` with ``seed`` on the binary with ``binary_sha``."""
    s = copy.deepcopy(scenario)
    for table, key in file_refs(s):
        table[key] = "sha256:" + files[table[key]]
    text = json.dumps({"scenario": s, "seed": seed, "binary": binary_sha},
                      sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LEN]


def make_jobs(spec: Spec, binary_sha: str) -> list[Job]:
    """Every job of a campaign, in table order. A file the scenarios name that cannot be
    read is an error naming it."""
    hashes: dict[str, str] = {}
    jobs = []
    for point in spec.points:
        scenario = spec.scenario(point)
        files = {}
        for table, key in file_refs(scenario):
            path = table[key]
            if path not in hashes:
                try:
                    hashes[path] = sha256_file(Path(path))
                except OSError as e:
                    raise LabError(f"{spec.path}: case {point.case or '-'}, {point.params}: "
                                   f"{key} {path}: {e}") from e
            files[path] = hashes[path]
        for seed in spec.seeds:
            key = job_key(scenario, seed, files, binary_sha)
            jobs.append(Job(key, len(jobs), point.case, point.params, seed, scenario,
                            spec.metrics, files))
    seen: dict[str, int] = {}
    for j in jobs:
        if j.key in seen:
            raise LabError(f"{spec.path}: jobs {seen[j.key]} and {j.index} are the same run "
                           f"(same scenario and seed): {jobs[seen[j.key]].params} and "
                           f"{j.params}; a parameter changes nothing in the scenario")
        seen[j.key] = j.index
    return jobs


#: The output files whose digests make ``decisions_hash``: what each link carried when,
#: and when each transfer or transaction completed. Unlike ``output_hash`` it leaves out
#: ``predictions.csv`` (which differs whenever the predictor does) and the files that
#: also show when agents were polled (a hint's delivery polls them).
DECISION_FILES = ("links.csv", "completions.csv")


def flatten_report(report: dict[str, Any]) -> dict[str, Any]:
    """The run report's figures as columns: scalars by name, each flow's as
    ``flow.NAME.FIELD``, each link direction's as ``link.NAME.DIR.FIELD``, each output
    file's digest as ``file.NAME`` and ``decisions_hash`` (see :data:`DECISION_FILES`);
    other lists of records (interruptions) are left out, their digest is in
    ``output_hash``."""
    out: dict[str, Any] = {}
    files = {name: digest for name, digest in report.get("files", [])}
    for name, digest in sorted(files.items()):
        out[f"file.{name}"] = digest
    if all(f in files for f in DECISION_FILES):
        joined = ",".join(files[f] for f in DECISION_FILES)
        out["decisions_hash"] = hashlib.sha256(joined.encode()).hexdigest()

    def put(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list):
            return
        else:
            out[prefix] = value

    for key, value in report.items():
        if key in TIMING_KEYS or key == "files":
            continue
        if key == "flows" and isinstance(value, list):
            for f in value:
                put(f"flow.{f.get('name', '?')}", {k: v for k, v in f.items() if k != "name"})
        elif key == "links" and isinstance(value, list):
            for link in value:
                name = f"link.{link.get('link', '?')}.{link.get('dir', '?')}"
                put(name, {k: v for k, v in link.items() if k not in ("link", "dir")})
        else:
            put(key, value)
    return out


def execute(job: Job, binary: str, work: str, shipped: bool, keep: bool) -> dict[str, Any]:
    """Runs one job (in a worker) and returns its record: ``key``, ``status`` (``ok`` or
    ``failed``), ``error``, ``figures`` (the flattened report and the metrics), ``wall_s``
    and ``host``.

    ``shipped``: the binary and the files came through Ray's runtime environment into the
    worker's working directory (``bin/polypath``, ``files/SHA256``), so the scenario's file
    names are rewritten to them. ``keep``: leave the run's output folder (``work/KEY``);
    otherwise it is removed once the metrics are read."""
    from .metrics import METRICS

    start = time.monotonic()
    scenario = job.scenario
    if shipped:
        scenario = copy.deepcopy(job.scenario)
        here = Path.cwd()
        for table, key in file_refs(scenario):
            table[key] = str(here / "files" / job.files[table[key]])
        binary = str(here / "bin" / Path(binary).name)
    record: dict[str, Any] = {"key": job.key, "status": "ok", "error": "", "figures": {},
                              "host": socket.gethostname(), "pid": os.getpid()}
    try:
        result = run_one(Run(job.key, scenario, job.seed), Path(work), Path(binary))
        figures = flatten_report(result.report)
        record["timing"] = {k: result.report.get(k) for k in TIMING_KEYS}
        for name in job.metrics:
            try:
                figures.update(METRICS[name](result))
            except (OSError, ValueError, KeyError, LabError) as e:
                record.update(status="failed", error=f"metric {name}: {e}")
        record["figures"] = figures
    except LabError as e:
        # Without this machine's paths, so every backend records the same error.
        msg = str(e).replace(str(Path(work) / job.key), "<run>").replace(binary, "polypath")
        record.update(status="failed", error=msg)
    finally:
        if not keep:
            shutil.rmtree(Path(work) / job.key, ignore_errors=True)
    record["wall_s"] = round(time.monotonic() - start, 3)
    return record
