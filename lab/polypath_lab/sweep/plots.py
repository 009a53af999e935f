"""Plots of a results table, written as PNG next to it (a spec's ``[[plot]]`` tables).

- ``heatmap``: ``x`` by ``y``, each cell the ``stat`` (median by default) of ``value`` over
  the rows with those two values (seeds and the other parameters pooled); the numbers are
  printed in the cells and returned as a table for the report.
- ``cdf``: the distribution of ``value``, one curve per ``group``.
- ``line``: ``y`` (its ``stat`` over the pooled rows) against ``x``, one line per ``group``;
  ``marks = { column, values }`` draws the rows with those values of ``column`` as
  horizontal lines (e.g. simple predictors against a swept oracle bias).

Common keys: ``where = { column = value or [values] }`` keeps matching rows, ``facet`` one
panel per value of a column, ``title``, ``file``, ``xlabel``, ``ylabel``. Only rows with
``status = "ok"`` and a value are plotted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..stats import mean, quantile

#: Plot kinds and the keys each needs.
KINDS = {"heatmap": ("x", "y", "value"), "cdf": ("value",), "line": ("x", "y")}
#: Statistics over pooled rows.
STATS = {
    "median": lambda xs: quantile(xs, 0.5),
    "mean": mean,
    "min": lambda xs: min(xs) if xs else float("nan"),
    "max": lambda xs: max(xs) if xs else float("nan"),
}


@dataclass
class Figure:
    """A written plot: its file (relative to the table's folder), a caption, and the
    numbers drawn as a table (columns and rows of text), if any."""

    file: str
    caption: str
    table: tuple[list[str], list[list[str]]] | None = None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def _matches(row: dict[str, Any], where: dict[str, Any]) -> bool:
    for col, want in where.items():
        wants = want if isinstance(want, list) else [want]
        if row.get(col) not in wants:
            return False
    return True


def _order(values: list[Any]) -> list[Any]:
    """Distinct values in the order of first appearance (the spec's order)."""
    seen: dict[Any, None] = {}
    for v in values:
        seen.setdefault(v, None)
    return list(seen)


def _group_key(row: dict[str, Any], group: Any) -> str:
    cols = group if isinstance(group, list) else [group]
    return ", ".join(f"{c.split('.')[-1]} = {row.get(c)}" for c in cols)


def _file_name(kind: str, opts: dict[str, Any]) -> str:
    if "file" in opts:
        return str(opts["file"])
    parts = [kind, str(opts.get("value") or opts.get("y")), "by",
             str(opts.get("x") or opts.get("group") or "all")]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts)) + ".png"


def fmt(v: float | None, digits: int = 3) -> str:
    """A number for a table cell."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}g}" if abs(v) >= 1e4 else f"{v:.{digits}f}"


def draw(kind: str, opts: dict[str, Any], rows: list[dict[str, Any]], out: Path) -> Figure:
    """Draws one plot of ``rows`` into ``out``."""
    from ..experiments.plotting import plt

    known = {k for r in rows for k in r}
    named = [opts.get(k) for k in ("x", "y", "value", "facet")]
    for k in ("group",):
        named += opts[k] if isinstance(opts.get(k), list) else [opts.get(k)]
    named += list(opts.get("where", {}))
    named.append((opts.get("marks") or {}).get("column"))
    missing = [c for c in named if c is not None and c not in known]
    if rows and missing:
        raise ValueError(f"no column {', '.join(map(repr, missing))} in the table "
                         f"(columns: {', '.join(sorted(known))})")
    rows = [r for r in rows if r.get("status") == "ok" and _matches(r, opts.get("where", {}))]
    stat_name = opts.get("stat", "median")
    if stat_name not in STATS:
        raise ValueError(f"plot stat {stat_name!r}: one of {', '.join(STATS)}")
    stat = STATS[stat_name]
    facet = opts.get("facet")
    facets = _order([r.get(facet) for r in rows]) if facet else [None]
    if not facets:
        facets = [None]
    name = _file_name(kind, opts)
    fig, axes = plt.subplots(1, len(facets), figsize=(6.4 * len(facets), 4.6), squeeze=False)
    table = None
    for ax, fv in zip(axes[0], facets):
        sub = [r for r in rows if facet is None or r.get(facet) == fv]
        if kind == "heatmap":
            table = _heatmap(ax, fig, opts, sub, stat, stat_name, table, fv if facet else None)
        elif kind == "cdf":
            _cdf(ax, opts, sub)
        else:
            _line(ax, opts, sub, stat)
        title = opts.get("title", "")
        if facet:
            title = f"{title}{': ' if title else ''}{facet} = {fv}"
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    what = opts.get("value") or opts.get("y")
    caption = {"heatmap": f"{stat_name} {what} by {opts.get('x')} and {opts.get('y')}",
               "cdf": f"CDF of {what}" + (f" per {opts['group']}" if opts.get("group") else ""),
               "line": f"{stat_name} {what} against {opts.get('x')}"
               + (f" per {opts['group']}" if opts.get("group") else "")}[kind]
    return Figure(name, opts.get("title", caption), table)


def _heatmap(ax, fig, opts, rows, stat, stat_name, table, facet_value):
    x, y, value = opts["x"], opts["y"], opts["value"]
    xs = _order([r.get(x) for r in rows])
    ys = _order([r.get(y) for r in rows])
    grid = []
    for yv in ys:
        line = []
        for xv in xs:
            vals = [v for r in rows if r.get(x) == xv and r.get(y) == yv
                    if (v := _num(r.get(value))) is not None]
            line.append(stat(vals) if vals else float("nan"))
        grid.append(line)
    im = ax.imshow(grid, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(xs)), [str(v) for v in xs], rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(ys)), [str(v) for v in ys], fontsize=8)
    ax.set_xlabel(opts.get("xlabel", x))
    ax.set_ylabel(opts.get("ylabel", y))
    finite = [v for line in grid for v in line if not math.isnan(v)]
    mid = (min(finite) + max(finite)) / 2 if finite else 0
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            ax.text(j, i, fmt(v, 2), ha="center", va="center", fontsize=7,
                    color="black" if not math.isnan(v) and v > mid else "white")
    fig.colorbar(im, ax=ax, label=f"{stat_name} {value}")
    prefix = f"{facet_value}: " if facet_value is not None else ""
    cols = [f"{prefix}{y} \\ {x}"] + [str(v) for v in xs]
    body = [[str(yv)] + [fmt(v) for v in line] for yv, line in zip(ys, grid)]
    if table is None:
        return (cols, body)
    return (table[0], table[1] + [cols] + body)


def _cdf(ax, opts, rows):
    value, group = opts["value"], opts.get("group")
    groups = _order([_group_key(r, group) for r in rows]) if group else [None]
    for g in groups:
        vals = sorted(v for r in rows if group is None or _group_key(r, group) == g
                      if (v := _num(r.get(value))) is not None)
        if not vals:
            continue
        ys = [0.0] + [(i + 1) / len(vals) for i in range(len(vals))]
        ax.step([vals[0]] + vals, ys, where="post", label=str(g) if g is not None else value,
                lw=1.2)
    ax.set_xlabel(opts.get("xlabel", value))
    ax.set_ylabel(opts.get("ylabel", "fraction of runs"))
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if group:
        ax.legend(fontsize=7)


def _line(ax, opts, rows, stat):
    x, y, group = opts["x"], opts["y"], opts.get("group")
    marks = opts.get("marks")
    mark_rows: list[dict[str, Any]] = []
    if marks:
        col, values = marks["column"], marks["values"]
        mark_rows = [r for r in rows if r.get(col) in values]
        rows = [r for r in rows if r.get(col) not in values]
    rows = [r for r in rows if _num(r.get(x)) is not None]
    groups = _order([_group_key(r, group) for r in rows]) if group else [None]
    for g in groups:
        sub = [r for r in rows if group is None or _group_key(r, group) == g]
        xs = sorted({_num(r.get(x)) for r in sub})
        ys = [stat([v for r in sub if _num(r.get(x)) == xv
                    if (v := _num(r.get(y))) is not None]) for xv in xs]
        ax.plot(xs, ys, marker="o", ms=4, lw=1.2, label=str(g) if g is not None else y)
    if marks:
        col = marks["column"]
        styles = ["--", ":", "-.", (0, (5, 1)), (0, (1, 3))]
        labels = marks.get("labels", {})
        for i, mv in enumerate(marks["values"]):
            vals = [v for r in mark_rows if r.get(col) == mv
                    if (v := _num(r.get(y))) is not None]
            label = labels.get(mv, str(mv))
            if not vals:
                ax.plot([], [], ls=styles[i % len(styles)], color="grey",
                        label=f"{label}: no successful run")
                continue
            yv = stat(vals)
            ax.axhline(yv, ls=styles[i % len(styles)], color="C%d" % (len(groups) + i),
                       lw=1.2, label=f"{label}: {fmt(yv)}")
    ax.set_xlabel(opts.get("xlabel", x))
    ax.set_ylabel(opts.get("ylabel", y))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
