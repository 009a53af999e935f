"""The journal of finished jobs and the results table built from it.

Every job's record is appended to ``OUT/jobs.jsonl`` as soon as it finishes (one JSON line,
flushed), so an interrupted campaign loses nothing it finished and a re-run skips those
jobs. The results table has one row per job of the spec, in the spec's order: ``job``
(position), ``key``, ``case`` (with ``[[case]]`` tables), every parameter (a table value as
one column per key, ``NAME.KEY``), ``seed``, ``status``, ``error``, then every figure of the
run report and of the metrics. Wall times stay in the journal: the table holds only what
the simulator determines, so two backends give the same table. It is written as
``results.parquet`` and ``results.csv``.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

from .jobs import Job

#: A record's status: the run and its metrics succeeded.
OK = "ok"
#: The simulator (or a metric) refused or failed the job: deterministic, not run again.
FAILED = "failed"
#: The job never returned (a worker died, a task was cancelled): run again next time.
LOST = "lost"


class Journal:
    """``jobs.jsonl``: the finished jobs' records, by key (a later line wins)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        if path.exists():
            with path.open() as f:
                for n, line in enumerate(f, start=1):
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        rec = json.loads(line)
                        self.records[rec["key"]] = rec
                    except (json.JSONDecodeError, KeyError, TypeError):
                        # A line cut short by an interrupted write: that job runs again.
                        print(f"{path}:{n}: unreadable journal line, ignored", file=sys.stderr)

    def finished(self, key: str, retry_failed: bool = False) -> bool:
        """Whether the job with ``key`` need not run again."""
        rec = self.records.get(key)
        if rec is None or rec.get("status") == LOST:
            return False
        return not (retry_failed and rec.get("status") == FAILED)

    def append(self, record: dict[str, Any]) -> None:
        """Adds a finished job's record (written at once)."""
        self.records[record["key"]] = record
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(_finite(record), sort_keys=True) + "\n")
            f.flush()


def _finite(x: Any) -> Any:
    """``x`` with NaN and infinities as ``None`` (JSON has no such numbers)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def param_columns(params: dict[str, Any]) -> dict[str, Any]:
    """A point's parameters as columns: a table value gives ``NAME.KEY`` per key."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if isinstance(value, dict):
            for k, v in value.items():
                out[f"{name}.{k}"] = v
        else:
            out[name] = value
    return out


def build_rows(jobs: list[Job], journal: Journal, with_case: bool) -> list[dict[str, Any]]:
    """The table's rows, in job order; a job without a record is ``status = "missing"``."""
    rows = []
    for job in jobs:
        rec = journal.records.get(job.key, {"status": "missing", "error": "", "figures": {}})
        row: dict[str, Any] = {"job": job.index, "key": job.key}
        if with_case:
            row["case"] = job.case
        row.update(param_columns(job.params))
        row.update(seed=job.seed, status=rec.get("status"), error=rec.get("error", ""))
        for k, v in (rec.get("figures") or {}).items():
            row.setdefault(k, v)
        rows.append(row)
    return rows


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every column, in the order of first appearance."""
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            seen.setdefault(k, None)
    return list(seen)


def column_type(values: list[Any]) -> str:
    """``bool``, ``int``, ``float`` or ``str``: what the non-empty values of a column fit."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "bool"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float"
    return "str"


def _cell(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "float":
        return float(value)
    if kind == "str" and not isinstance(value, str):
        return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
    return value


def write(rows: list[dict[str, Any]], out: Path, metadata: dict[str, str]) -> tuple[Path, Path]:
    """Writes ``results.parquet`` and ``results.csv`` under ``out``; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = columns(rows)
    types = {n: column_type([r.get(n) for r in rows]) for n in names}
    arrow = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
    data = {n: [_cell(r.get(n), types[n]) for r in rows] for n in names}
    schema = pa.schema([(n, arrow[types[n]]) for n in names],
                       metadata={k: str(v) for k, v in metadata.items()})
    table = pa.Table.from_pydict(data, schema=schema)
    out.mkdir(parents=True, exist_ok=True)
    parquet = out / "results.parquet"
    pq.write_table(table, parquet)
    path_csv = out / "results.csv"
    with path_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        for i in range(len(rows)):
            w.writerow(["" if data[n][i] is None else
                        (repr(data[n][i]) if types[n] == "float" else data[n][i])
                        for n in names])
    return parquet, path_csv


def read(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``results.parquet``."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
