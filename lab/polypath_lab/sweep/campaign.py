"""Running a campaign: the jobs of a spec not finished before, on a backend, with a progress
bar; then the results table, the plots and ``index.md`` (counts, the plots' numbers, the
parameters that changed nothing, the failures)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..progress import Progress
from ..sim import LabError, polypath_binary
from . import backends, plots, table
from .jobs import Job, make_jobs, sha256_file
from .spec import Spec


@dataclass
class Outcome:
    """What a campaign run did."""

    out: Path
    jobs: int
    #: Jobs finished before this run (skipped).
    skipped: int
    #: Jobs run now.
    ran: int
    #: Rows whose status is not ok (now or before).
    failed: int
    wall_s: float
    #: Time to start or join the backend (Ray's start-up; 0 for the local pool), s.
    startup_s: float
    #: From the campaign's start to its last job's record, s.
    jobs_s: float
    parquet: Path
    csv: Path
    figures: list[plots.Figure] = field(default_factory=list)
    index: Path | None = None


def run(spec: Spec, out: Path, backend: str = "local", address: str | None = None,
        workers: int | None = None, ship: bool = False, retry_failed: bool = False,
        progress: bool = True) -> Outcome:
    """Runs the campaign ``spec`` into ``out`` (``runs/KEY/`` per job, ``jobs.jsonl``,
    ``results.parquet``, ``results.csv``, the plots and ``index.md``)."""
    if backend not in backends.BACKENDS:
        raise LabError(f"unknown backend {backend!r}; one of {', '.join(backends.BACKENDS)}")
    if ship and backend != "ray":
        raise LabError("--ship is for the ray backend (local jobs use this machine's files)")
    start = time.monotonic()
    binary = polypath_binary().resolve()
    binary_sha = sha256_file(binary)
    jobs = make_jobs(spec, binary_sha)
    out.mkdir(parents=True, exist_ok=True)
    journal = table.Journal(out / "jobs.jsonl")
    todo = [j for j in jobs if not journal.finished(j.key, retry_failed)]
    skipped = len(jobs) - len(todo)
    where = backend + (f" at {address}" if address else "") + (" (shipped)" if ship else "")
    print(f"{spec.name}: {len(jobs)} jobs ({len(spec.points)} points x {len(spec.seeds)} "
          f"seeds), {skipped} finished before (skipped), {len(todo)} to run on {where}",
          flush=True)
    work = out / "runs"
    timings: dict[str, float] = {}
    jobs_s = 0.0
    if todo:
        bar = Progress(len(todo), spec.name, progress)
        if backend == "local":
            records = backends.run_local(todo, binary, work, workers)
        else:
            records = backends.run_ray(todo, binary, work, address, workers, ship,
                                       out / ".ship", timings)
        by_key = {j.key: j for j in todo}
        for rec in records:
            rec["backend"] = backend
            journal.append(rec)
            job = by_key[rec["key"]]
            bar.step(_describe(job), failed=rec["status"] != table.OK)
        jobs_s = time.monotonic() - start
    rows = table.build_rows(jobs, journal, with_case=any(c.name for c in spec.cases))
    meta = {"spec": str(spec.path), "name": spec.name, "binary_sha256": binary_sha}
    parquet, path_csv = table.write(rows, out, meta)
    figures = []
    for p in spec.plots:
        try:
            figures.append(plots.draw(p.kind, p.options, rows, out))
        except (ValueError, KeyError, TypeError) as e:
            raise LabError(f"{spec.path}: plot {p.kind} {p.options}: {e}") from e
    failed = sum(1 for r in rows if r["status"] != table.OK)
    outcome = Outcome(out, len(jobs), skipped, len(todo), failed,
                      round(time.monotonic() - start, 1), timings.get("startup_s", 0.0), jobs_s,
                      parquet, path_csv, figures)
    outcome.index = write_index(spec, jobs, rows, outcome)
    return outcome


def _describe(job: Job) -> str:
    parts = [job.case] if job.case else []
    for k, v in job.params.items():
        if isinstance(v, dict):
            v = ",".join(f"{a}={b}" for a, b in v.items())
        parts.append(f"{k}={v}")
    parts.append(f"seed={job.seed}")
    return " ".join(str(p) for p in parts)


def _value(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={x}" for k, x in v.items()) + "}"
    return str(v)


def ties(spec: Spec, jobs: list[Job], rows: list[dict[str, Any]],
         column: str = "output_hash") -> list[str]:
    """For each swept parameter, the values that gave the same ``column`` (a digest of the
    run's outputs) with everything else equal: a knob that changed nothing there. One line
    per parameter: which values tied, and in how many of the comparable groups."""
    lines = []
    for name in spec.param_names:
        groups: dict[str, dict[str, list[str]]] = {}
        for job, row in zip(jobs, rows):
            h = row.get(column)
            if row.get("status") != table.OK or not h:
                continue
            rest = json.dumps([job.case, job.seed, {k: v for k, v in job.params.items()
                                                   if k != name}], sort_keys=True, default=str)
            values = groups.setdefault(rest, {}).setdefault(h, [])
            if _value(job.params[name]) not in values:
                values.append(_value(job.params[name]))
        comparable = [g for g in groups.values() if sum(len(v) for v in g.values()) > 1]
        tied: dict[str, int] = {}
        for g in comparable:
            for values in g.values():
                if len(values) > 1:
                    tied[" = ".join(values)] = tied.get(" = ".join(values), 0) + 1
        if tied:
            parts = [f"{k} (in {n} of {len(comparable)} groups)" for k, n in
                     sorted(tied.items(), key=lambda kv: -kv[1])]
            lines.append(f"`{name}`: " + "; ".join(parts))
        elif comparable:
            lines.append(f"`{name}`: every value gave a different run in all "
                         f"{len(comparable)} groups")
    return lines


def write_index(spec: Spec, jobs: list[Job], rows: list[dict[str, Any]],
                outcome: Outcome) -> Path:
    """``index.md`` next to the table: what ran, the plots with their numbers, the ties and
    the failures."""
    md = [f"# Sweep {spec.name}", ""]
    if spec.description:
        md += [spec.description, ""]
    mode = "quick (the spec's [quick] table)" if spec.quick else "full"
    md += [f"Spec: `{spec.path}`, {mode}. {outcome.jobs} jobs ({len(spec.points)} points x seeds "
           f"{spec.seeds}); this run: {outcome.ran} run, {outcome.skipped} finished before; "
           f"{outcome.failed} not ok. Table: `results.parquet`, `results.csv` (one row per "
           "job).", ""]
    for f in outcome.figures:
        md += [f"![{f.caption}]({f.file})", "", f"*{f.caption}*", ""]
        if f.table:
            cols, body = f.table
            md += ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
            md += ["| " + " | ".join(r) + " |" for r in body]
            md.append("")
    for column, what in (("output_hash", "byte-identical output files"),
                         ("decisions_hash", "the same link and completion series "
                                            "(`links.csv`, `completions.csv`)")):
        tie_lines = ties(spec, jobs, rows, column)
        if tie_lines:
            md += [f"Values of a parameter that gave {what} (`{column}`), everything else "
                   "equal:", ""]
            md += [f"- {t}" for t in tie_lines] + [""]
    bad = [r for r in rows if r["status"] != table.OK]
    if bad:
        md += ["Jobs not ok:", ""]
        for r in bad:
            err = (r.get("error") or "").strip().splitlines()
            md.append(f"- job {r['job']} ({r['status']}): {err[-1] if err else ''}")
        md.append("")
    path = outcome.out / "index.md"
    path.write_text("\n".join(md))
    return path
