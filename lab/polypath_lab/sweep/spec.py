"""Sweep specs: a base scenario, the parameters to vary, and the points they make.

A spec is a TOML file (``lab/sweeps/*.toml``; the format is in ``lab/sweeps/README.md``)::

    name = "lumos5g-aggregation"
    base = "lumos5g-multipath-lamp5g"        # scenarios/NAME.toml, or a .toml path
    seeds = [1, 2]
    metrics = ["aggregation_efficiency"]     # figures computed from each run's files

    [set]                                    # applied to every job first
    "sim.duration" = "60s"

    [at]                                     # short names: name = path or [paths]
    scheduler = "flow[0].scheduler"

    [grid]                                   # every combination
    scheduler = ["minrtt", "lamp5g"]

    [[zip]]                                  # lists of one length, taken together
    drive = ["103", "22"]
    trace = ["../../traces/...103...", "../../traces/...22..."]

``[format]`` sets a path to a template filled with the point's parameters
(``"flow[0].options.scheduler.weights" = "{w_5g},{w_wifi},{w_lifi}"``), after them.

A parameter path names a place in the scenario: dotted keys, and ``[i]`` (an index),
``[name]`` (the element whose ``name`` is that) or ``[*]`` (every element) for arrays of
tables, e.g. ``link[nr].down.rate.trace`` or ``link[*].down.predictor``. A table value is
merged into the table already there; the string ``"<unset>"`` removes the key. Every point
of the grid (the product of the ``[grid]`` lists and of each ``[[zip]]`` group) is run
with every seed; ``[[case]]`` tables split a campaign over several bases (each case has its
own ``base``, ``set`` and ``at``, and the grid is run on every case).

Errors name the spec file, the line and the field.
"""

from __future__ import annotations

import copy
import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sim import REPO, LabError, load_scenario

#: The value that removes a key instead of setting it.
UNSET = "<unset>"
#: Top-level keys of a spec.
SPEC_KEYS = {"name", "description", "base", "seeds", "metrics", "set", "at", "format", "grid",
             "zip", "case", "plot", "quick"}
#: Keys of ``[quick]``: what the reduced campaign replaces.
QUICK_KEYS = {"seeds", "set", "grid", "zip"}
#: Keys of a ``[[case]]``.
CASE_KEYS = {"name", "base", "set", "at", "format", "quick"}
#: Keys of a base given as a lab experiment's scenario builder.
EXPERIMENT_BASE_KEYS = {"experiment", "function", "scenario", "args"}
#: Keys of a ``[[plot]]``.
PLOT_KEYS = {"kind", "x", "y", "value", "stat", "group", "facet", "where", "marks", "title",
             "file", "xlabel", "ylabel"}


class SpecError(LabError):
    """A spec that cannot be used: file, line, field and what is wrong."""


class FieldError(SpecError):
    """A value that cannot be applied to the scenario, with the spec table and key that
    gave it (turned into a :class:`SpecError` with the line when the spec is loaded)."""

    def __init__(self, table: str, key: str, msg: str) -> None:
        super().__init__(f"field `{table}.{key}`: {msg}")
        self.table, self.key, self.msg = table, key, msg


@dataclass
class Case:
    """One base of a campaign with its own fixed settings and parameter places."""

    name: str
    #: The base scenario, trace and other file paths absolute.
    base: dict[str, Any]
    #: Where each named parameter goes (a name absent here is its own path).
    at: dict[str, list[str]]
    #: Fixed settings, applied before the parameters.
    fixed: dict[str, Any]
    #: Path -> template (``str.format`` with the point's parameters), applied last.
    templates: dict[str, str] = field(default_factory=dict)


@dataclass
class Point:
    """One point of the campaign: a case and a value for each swept parameter."""

    case: str
    #: Parameter name -> value, in the spec's order.
    params: dict[str, Any]


@dataclass
class Plot:
    """A plot the campaign asks for (see :mod:`polypath_lab.sweep.plots`)."""

    kind: str
    options: dict[str, Any]


@dataclass
class Spec:
    """A parsed sweep spec."""

    path: Path
    name: str
    description: str
    seeds: list[int]
    metrics: list[str]
    cases: list[Case]
    #: Swept parameter names, grid first then each zip group, in the spec's order.
    param_names: list[str]
    points: list[Point]
    #: The reduced campaign (the spec's ``[quick]`` applied).
    quick: bool = False
    #: Parameter name -> the spec table it is swept in ("grid" or "zip").
    param_tables: dict[str, str] = field(default_factory=dict)
    plots: list[Plot] = field(default_factory=list)

    def scenario(self, point: Point) -> dict[str, Any]:
        """The scenario of one point: the case's base with its fixed settings, then the
        point's values, applied; relative file paths resolved against the spec's folder."""
        case = next(c for c in self.cases if c.name == point.case)
        s = copy.deepcopy(case.base)
        for name, value in case.fixed.items():
            try:
                apply(s, name, value)
            except SpecError as e:
                raise FieldError("case.set" if case.name else "set", name, str(e)) from e
        for name, value in point.params.items():
            for p in case.at.get(name, [name]):
                try:
                    apply(s, p, value)
                except SpecError as e:
                    where = f"{point.case}: " if point.case else ""
                    raise FieldError(self.param_tables.get(name, "grid"), name,
                                     f"{where}{e} (value {value!r})") from e
        for path, template in case.templates.items():
            try:
                apply(s, path, template.format_map(point.params))
            except (KeyError, IndexError, ValueError) as e:
                raise FieldError("format", path, f"template {template!r}: {e!r} (parameters: "
                                 f"{', '.join(point.params)})") from e
            except SpecError as e:
                raise FieldError("format", path, str(e)) from e
        resolve_files(s, self.path.parent)
        return s


def _line_of(text: str, table: str | None, key: str) -> int | None:
    """The line (1-based) where ``key`` is set in ``[table]`` (or at the top level), found
    by reading the file's lines: tomllib gives no positions."""
    current: str | None = None
    key_re = re.compile(r'^\s*("?)' + re.escape(key) + r'\1\s*=')
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    for n, line in enumerate(text.splitlines(), start=1):
        m = header.match(line)
        if m:
            current = m.group(1)
            if table is not None and current == table and key == "":
                return n
            continue
        if current == table and key_re.match(line):
            return n
    return None


class _Reader:
    """Reads one spec file, with errors that name its file, line and field."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.text = path.read_text()
        except OSError as e:
            raise SpecError(f"{path}: {e}") from e
        try:
            self.doc = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"{path}: {e}") from e

    def error(self, table: str | None, key: str, msg: str) -> SpecError:
        line = None
        if key:
            line = (_line_of(self.text, table, key)
                    or _line_of(self.text, table, key.split(".")[0].split("[")[0]))
        if line is None and table is not None:
            line = _line_of(self.text, table, "")
        field_name = f"{table}.{key}" if table and key else (table or key)
        where = f"{self.path}:{line}" if line else str(self.path)
        return SpecError(f"{where}: field `{field_name}`: {msg}")


def load(path: Path, quick: bool = False) -> Spec:
    """Reads and checks a spec, and expands its points. ``quick``: the reduced campaign,
    the spec's ``[quick]`` table replacing ``seeds``, the ``grid`` lists it names, the
    ``set`` entries it names and (if it has any) every ``[[zip]]`` group; a case's
    ``[case.quick.set]`` entries replace its own ``set`` entries."""
    path = Path(path).resolve()
    r = _Reader(path)
    doc = r.doc
    for key in doc:
        if key not in SPEC_KEYS:
            raise r.error(None, key, f"unknown key; a spec takes {', '.join(sorted(SPEC_KEYS))}")
    reduced = doc.get("quick", {})
    if not isinstance(reduced, dict):
        raise r.error("quick", "", "a table")
    for key in reduced:
        if key not in QUICK_KEYS:
            raise r.error("quick", key, f"unknown key; [quick] takes {', '.join(sorted(QUICK_KEYS))}")
    if quick:
        if not reduced:
            raise r.error(None, "quick", "no [quick] table: this spec has no reduced campaign")
        doc = dict(doc)
        for key in ("set", "grid"):
            if isinstance(reduced.get(key), dict):
                doc[key] = dict(doc.get(key, {}), **reduced[key])
        for key in ("seeds", "zip"):
            if key in reduced:
                doc[key] = reduced[key]
        r.doc = doc
    name = doc.get("name", path.stem)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise r.error(None, "name", "a name of letters, digits, `-`, `_` and `.`")
    seeds = doc.get("seeds", [1])
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise r.error(None, "seeds", "a non-empty list of non-negative integers")
    if len(set(seeds)) != len(seeds):
        raise r.error(None, "seeds", "a seed is listed twice")
    from .metrics import METRICS

    metrics = doc.get("metrics", [])
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise r.error(None, "metrics", "a list of metric names")
    for m in metrics:
        if m not in METRICS:
            raise r.error(None, "metrics", f"unknown metric {m!r}; known: {', '.join(METRICS)}")

    cases = _cases(r, quick)
    grid = doc.get("grid", {})
    if not isinstance(grid, dict):
        raise r.error("grid", "", "a table of parameter = [values]")
    dims: list[list[dict[str, Any]]] = []
    names: list[str] = []
    for pname, values in grid.items():
        if not isinstance(values, list) or not values:
            raise r.error("grid", pname, "a non-empty list of values")
        dims.append([{pname: v} for v in values])
        names.append(pname)
    zips = doc.get("zip", [])
    if not isinstance(zips, list):
        raise r.error(None, "zip", "an array of tables: [[zip]]")
    for i, group in enumerate(zips):
        lengths = {k: len(v) if isinstance(v, list) else -1 for k, v in group.items()}
        if not group or any(n <= 0 for n in lengths.values()):
            raise r.error("zip", next(iter(group), ""),
                          f"zip group {i}: each parameter a non-empty list of values")
        if len(set(lengths.values())) != 1:
            raise r.error("zip", next(iter(group)),
                          f"zip group {i}: lists of different lengths {lengths}")
        dims.append([dict(zip(group, vals)) for vals in zip(*group.values())])
        names.extend(group)
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise r.error("grid", sorted(dup)[0], "a parameter is swept twice (grid and zip)")
    combos = [dict(kv for part in combo for kv in part.items())
              for combo in itertools.product(*dims)] if dims else [{}]
    points = [Point(c.name, params) for c in cases for params in combos]

    tables = {n: "grid" for n in grid}
    tables.update({n: "zip" for group in zips for n in group})
    spec = Spec(path, name, str(doc.get("description", "")), list(seeds), list(metrics),
                cases, names, points, quick, tables, _plots(r))
    # Build every scenario once now, so a bad path or value fails before any job runs.
    for p in points:
        try:
            spec.scenario(p)
        except FieldError as e:
            raise r.error(e.table, e.key, e.msg) from e
    return spec


def _cases(r: _Reader, quick: bool) -> list[Case]:
    doc = r.doc
    top_at = _at(r, "at", doc.get("at", {}))
    top_set = _table(r, "set", doc.get("set", {}))
    top_fmt = _templates(r, "format", doc.get("format", {}))
    raw_cases = doc.get("case")
    if raw_cases is None:
        if "base" not in doc:
            raise r.error(None, "base", "missing: a scenario name, a .toml path or an "
                                         "experiment table (or [[case]] tables with a base each)")
        return [Case("", _base(r, None, doc["base"]), top_at, top_set, top_fmt)]
    if "base" in doc:
        raise r.error(None, "base", "give the base in each [[case]], not at the top level")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise r.error(None, "case", "an array of tables: [[case]]")
    cases = []
    for i, c in enumerate(raw_cases):
        for key in c:
            if key not in CASE_KEYS:
                raise r.error("case", key, f"case {i}: unknown key; a case takes "
                                           f"{', '.join(sorted(CASE_KEYS))}")
        name = c.get("name")
        if not isinstance(name, str) or not name:
            raise r.error("case", "name", f"case {i}: a name is required")
        if "base" not in c:
            raise r.error("case", "name", f"case {name}: no base")
        at = dict(top_at, **_at(r, "case.at", c.get("at", {})))
        fixed = dict(top_set, **_table(r, "case.set", c.get("set", {})))
        reduced = c.get("quick", {})
        if not isinstance(reduced, dict) or set(reduced) - {"set"}:
            raise r.error("case.quick", "", f"case {name}: [case.quick] takes only `set`")
        if quick:
            fixed.update(_table(r, "case.quick.set", reduced.get("set", {})))
        fmt = dict(top_fmt, **_templates(r, "case.format", c.get("format", {})))
        cases.append(Case(name, _base(r, "case", c["base"]), at, fixed, fmt))
    if len({c.name for c in cases}) != len(cases):
        raise r.error("case", "name", "two cases have the same name")
    return cases


def _table(r: _Reader, where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise r.error(where, "", "a table of path = value")
    for key in value:
        try:
            parse_path(key)
        except ValueError as e:
            raise r.error(where, key, str(e)) from e
    return value


def _templates(r: _Reader, where: str, value: Any) -> dict[str, str]:
    table = _table(r, where, value)
    for key, template in table.items():
        if not isinstance(template, str):
            raise r.error(where, key, "a template string, e.g. \"{w_5g},{w_wifi},{w_lifi}\"")
    return table


def _at(r: _Reader, where: str, value: Any) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        raise r.error(where, "", "a table of name = path or [paths]")
    out = {}
    for name, paths in value.items():
        if isinstance(paths, str):
            paths = [paths]
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise r.error(where, name, "a path or a list of paths ([] for a column only)")
        for p in paths:
            try:
                parse_path(p)
            except ValueError as e:
                raise r.error(where, name, str(e)) from e
        out[name] = paths
    return out


def _base(r: _Reader, table: str | None, value: Any) -> dict[str, Any]:
    """The base scenario: ``scenarios/NAME.toml``, a ``.toml`` path relative to the spec,
    or ``{ experiment, function, scenario, args }``: the scenario a lab experiment's
    builder makes, ``function(load_scenario(scenario), **args)``."""
    if isinstance(value, str):
        path = ((r.path.parent / value).resolve() if value.endswith(".toml")
                else REPO / "scenarios" / f"{value}.toml")
        try:
            scenario = load_scenario(path)
        except LabError as e:
            raise r.error(table, "base", str(e)) from e
        resolve_files(scenario, path.parent)
        return scenario
    if not isinstance(value, dict):
        raise r.error(table, "base", "a scenario name, a .toml path or an experiment table")
    for key in value:
        if key not in EXPERIMENT_BASE_KEYS:
            raise r.error(table, "base", f"unknown key {key!r}; an experiment base takes "
                                         f"{', '.join(sorted(EXPERIMENT_BASE_KEYS))}")
    from ..experiments import registry

    experiments = registry()
    name = value.get("experiment")
    if name not in experiments:
        raise r.error(table, "base", f"experiment {name!r}: known {', '.join(experiments)}")
    module = experiments[name]
    fn_name = value.get("function")
    fn = getattr(module, fn_name, None) if isinstance(fn_name, str) else None
    if not callable(fn):
        raise r.error(table, "base", f"experiment {name}: no scenario builder {fn_name!r}")
    scenario = value.get("scenario", getattr(module, "SCENARIO", None))
    args = value.get("args", {})
    if not isinstance(scenario, str) or not isinstance(args, dict):
        raise r.error(table, "base", "`scenario` a name, `args` a table")
    try:
        out = fn(load_scenario(scenario), **args)
        resolve_files(out, REPO / "scenarios")
    except LabError as e:
        raise r.error(table, "base", str(e)) from e
    except TypeError as e:
        raise r.error(table, "base", f"{name}.{fn_name}: {e}") from e
    if not isinstance(out, dict):
        raise r.error(table, "base", f"{name}.{fn_name} did not return a scenario")
    return out


def _plots(r: _Reader) -> list[Plot]:
    from .plots import KINDS

    plots = []
    raw = r.doc.get("plot", [])
    if not isinstance(raw, list):
        raise r.error(None, "plot", "an array of tables: [[plot]]")
    for i, p in enumerate(raw):
        for key in p:
            if key not in PLOT_KEYS:
                raise r.error("plot", key, f"plot {i}: unknown key; a plot takes "
                                           f"{', '.join(sorted(PLOT_KEYS))}")
        kind = p.get("kind")
        if kind not in KINDS:
            raise r.error("plot", "kind", f"plot {i}: kind {kind!r}; one of {', '.join(KINDS)}")
        missing = [k for k in KINDS[kind] if k not in p]
        if missing:
            raise r.error("plot", "kind", f"plot {i} ({kind}): needs {', '.join(missing)}")
        plots.append(Plot(kind, {k: v for k, v in p.items() if k != "kind"}))
    return plots


_SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)(?:\[([^\]]+)\])?$")


def parse_path(path: str) -> list[tuple[str, str | None]]:
    """``link[nr].down.rate`` -> ``[("link", "nr"), ("down", None), ("rate", None)]``."""
    if not path:
        raise ValueError("an empty parameter path")
    out = []
    for seg in path.split("."):
        m = _SEGMENT.match(seg)
        if not m:
            raise ValueError(f"{path!r}: bad path segment {seg!r} (key, key[index], "
                             "key[name] or key[*])")
        out.append((m.group(1), m.group(2)))
    return out


def _select(items: list, sel: str, path: str) -> list[int]:
    if sel == "*":
        return list(range(len(items)))
    if re.fullmatch(r"-?\d+", sel):
        i = int(sel)
        if not -len(items) <= i < len(items):
            raise LabError(f"{path}: index {i} out of range ({len(items)} elements)")
        return [i % len(items)]
    found = [i for i, x in enumerate(items) if isinstance(x, dict) and x.get("name") == sel]
    if not found:
        names = [x.get("name") for x in items if isinstance(x, dict)]
        raise LabError(f"{path}: no element named {sel!r} (names: {names})")
    return found


def apply(scenario: dict[str, Any], path: str, value: Any) -> None:
    """Sets ``path`` in ``scenario`` to ``value`` (tables merge into tables, ``UNSET``
    removes the key)."""
    try:
        segments = parse_path(path)
    except ValueError as e:
        raise SpecError(str(e)) from e
    targets: list[Any] = [scenario]
    for depth, (key, sel) in enumerate(segments):
        last = depth == len(segments) - 1
        nxt = []
        for t in targets:
            if not isinstance(t, dict):
                raise SpecError(f"{path}: {key!r} is not inside a table")
            if sel is None:
                if isinstance(t.get(key), list) and not (last and not isinstance(value, dict)):
                    raise SpecError(f"{path}: {key!r} is an array of tables: select with "
                                    f"{key}[index], {key}[name] or {key}[*]")
                if last:
                    _set(t, key, value)
                else:
                    nxt.append(t.setdefault(key, {}))
                continue
            items = t.get(key)
            if not isinstance(items, list):
                raise SpecError(f"{path}: {key!r} is not an array of tables")
            try:
                idx = _select(items, sel, path)
            except LabError as e:
                raise SpecError(str(e)) from e
            for i in idx:
                if last:
                    if isinstance(value, dict) and isinstance(items[i], dict):
                        _merge(items[i], value)
                    else:
                        items[i] = copy.deepcopy(value)
                else:
                    nxt.append(items[i])
        targets = nxt


def _set(table: dict[str, Any], key: str, value: Any) -> None:
    if isinstance(value, str) and value == UNSET:
        table.pop(key, None)
    elif isinstance(value, dict) and isinstance(table.get(key), dict):
        _merge(table[key], value)
    else:
        table[key] = copy.deepcopy(value)


def _merge(into: dict[str, Any], value: dict[str, Any]) -> None:
    for k, v in value.items():
        _set(into, k, v)


def file_refs(scenario: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """The places in a scenario that name a file, as ``(table, key)``: a link direction's
    rate ``trace`` and predictor ``file``, a radio UE's GPS track ``file``, a radio
    predictor's ``model``."""
    out: list[tuple[dict[str, Any], str]] = []
    for link in scenario.get("link", []):
        for t in (link, link.get("up"), link.get("down")):
            if not isinstance(t, dict):
                continue
            for holder, key in (("rate", "trace"), ("predictor", "file")):
                v = t.get(holder)
                if isinstance(v, dict) and isinstance(v.get(key), str):
                    out.append((v, key))
    radio = scenario.get("radio")
    if isinstance(radio, dict):
        for ue in radio.get("ues", []):
            mob = ue.get("mobility") if isinstance(ue, dict) else None
            if isinstance(mob, dict) and isinstance(mob.get("file"), str):
                out.append((mob, "file"))
        for p in radio.get("predictors", []):
            if isinstance(p, dict) and isinstance(p.get("model"), str):
                out.append((p, "model"))
    return out


def resolve_files(scenario: dict[str, Any], base_dir: Path) -> None:
    """Makes every relative file name in ``scenario`` absolute, against ``base_dir``."""
    for table, key in file_refs(scenario):
        p = Path(table[key])
        if not p.is_absolute():
            table[key] = str((base_dir / p).resolve())
