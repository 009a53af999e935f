"""What an experiment returns, and the report written from it.

An experiment returns an :class:`Experiment`: tables whose columns put the paper's figure
next to polypath's reproduction and polypath's best configuration, plots (PNG files in the
report directory), shape checks (the claims the issue asks the lab to show, each with the
measured value) and notes. :func:`write_report` keeps each experiment's section (Markdown,
and its numbers as JSON) in ``report/sections/``, and renders ``report/index.md`` and
``report/summary.json`` from every section there: running one experiment replaces its own
section and keeps the others.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Table:
    """A Markdown table."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    #: The numbers behind the table, as they go to summary.json.
    data: Any = None

    def markdown(self) -> str:
        """The table in GitHub Markdown."""
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(lines)

    def text(self) -> str:
        """The table for a terminal, columns aligned."""
        cells = [self.columns] + self.rows
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.columns))]
        out = [self.title]
        for j, r in enumerate(cells):
            out.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)))
            if j == 0:
                out.append("  ".join("-" * w for w in widths))
        return "\n".join(out)


@dataclass
class Check:
    """One claim with the value measured for it."""

    name: str
    ok: bool
    measured: str


@dataclass
class Experiment:
    """The outcome of one experiment."""

    name: str
    title: str
    #: Where in the paper, and what the setup is.
    setup: str
    tables: list[Table] = field(default_factory=list)
    #: PNG file names (relative to the report directory) with captions.
    plots: list[tuple[str, str]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    #: Differences from the paper and why.
    notes: list[str] = field(default_factory=list)

    def check(self, name: str, ok: bool, measured: str) -> None:
        """Records a shape check."""
        self.checks.append(Check(name, bool(ok), measured))


def write_report(experiments: list[Experiment], out: Path, meta: dict[str, Any],
                 order: list[str] | None = None) -> Path:
    """Writes the sections of ``experiments`` under ``out/sections`` (replacing earlier
    runs of the same experiments), then ``index.md`` and ``summary.json`` from every
    section in ``out``, in ``order`` (experiment names; others after them, by name);
    returns the index path. ``meta`` (seeds, mode, wall time) is recorded per section."""
    sections = out / "sections"
    sections.mkdir(parents=True, exist_ok=True)
    for e in experiments:
        (sections / f"{e.name}.md").write_text(_section(e, meta))
        data = {"title": e.title, "meta": meta,
                "tables": {t.title: t.data for t in e.tables},
                "plots": [p for p, _ in e.plots],
                "checks": [c.__dict__ for c in e.checks]}
        (sections / f"{e.name}.json").write_text(
            json.dumps(_clean(data), indent=2, allow_nan=False))
    rank = {name: i for i, name in enumerate(order or [])}
    names = sorted((p.stem for p in sections.glob("*.json")),
                   key=lambda n: (rank.get(n, len(rank)), n))
    md = ["# polypath lab report", "",
          "Reproductions of the papers' experiments on the polypath simulator (the real "
          "polypath-quic stack over simulated links), side by side with the papers' figures. "
          "Each section says which seeds and mode it ran with.", ""]
    summary: dict[str, Any] = {"experiments": {}}
    for name in names:
        md += [(sections / f"{name}.md").read_text(), ""]
        summary["experiments"][name] = json.loads((sections / f"{name}.json").read_text())
    index = out / "index.md"
    index.write_text("\n".join(md))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False))
    return index


def _section(e: Experiment, meta: dict[str, Any]) -> str:
    """One experiment's part of ``index.md``."""
    md = [f"## {e.title}", "",
          f"*Run with seeds {meta.get('seeds')}, mode {meta.get('mode')}.*", "",
          e.setup, ""]
    for t in e.tables:
        md += [t.markdown(), ""]
    for png, caption in e.plots:
        md += [f"![{caption}]({png})", "", f"*{caption}*", ""]
    if e.checks:
        md += ["Checks:", ""]
        md += [f"- {'✅' if c.ok else '❌'} {c.name}: {c.measured}" for c in e.checks]
        md.append("")
    if e.notes:
        md += ["Notes:", ""] + [f"- {n}" for n in e.notes] + [""]
    return "\n".join(md)


def _clean(x: Any) -> Any:
    """``x`` with NaN and infinities (no JSON for them) turned into ``None``."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def print_tables(experiments: list[Experiment]) -> None:
    """Prints every table and check to standard output."""
    for e in experiments:
        print(f"\n== {e.title}")
        for t in e.tables:
            print(t.text())
            print()
        for c in e.checks:
            print(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.measured}")
