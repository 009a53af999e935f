"""Running the real-time emulator from Python.

:func:`emulate_all` writes each :class:`~polypath_lab.sim.Run`'s scenario next to its
outputs and runs ``polypath emu run SCENARIO --seed S --out DIR --json`` one run at a time
(an emulation measures in real time: two at once would share the cores and make each
other late). It returns :class:`~polypath_lab.sim.RunResult`\\ s whose report has the
emulator's own figures under ``realtime`` (lateness of deliveries, engine CPU share,
``overloaded``), which every result the lab derives from an emulation carries along.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import tomli_w

from .progress import Progress
from .sim import LabError, Run, RunResult, polypath_binary


def unavailable() -> str | None:
    """Why the emulator cannot run here (it needs root for network namespaces and TUN
    devices, and ``ip``), or ``None`` when it can."""
    if os.geteuid() != 0:
        return "the emulator needs root (network namespaces, TUN devices)"
    if not Path("/dev/net/tun").exists():
        return "no /dev/net/tun"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


def emulate_all(runs: list[Run], work: Path, label: str, progress: bool = True,
                keep: tuple[str, ...] = ()) -> list[RunResult]:
    """Emulates every run, one after the other, under ``work/NAME``; a run that fails
    raises :class:`LabError` with the emulator's message. ``keep`` names output files to
    keep beyond the defaults (the caller reads and removes large ones such as
    ``packets.csv`` itself)."""
    why = unavailable()
    if why:
        raise LabError(f"cannot emulate: {why}")
    binary = polypath_binary()
    work.mkdir(parents=True, exist_ok=True)
    bar = Progress(len(runs), label, progress)
    results = []
    for run in runs:
        out = work / run.name
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        scenario_path = out / "scenario.toml"
        with scenario_path.open("wb") as f:
            tomli_w.dump(run.scenario, f)
        cmd = [str(binary), "emu", "run", str(scenario_path), "--seed", str(run.seed),
               "--out", str(out), "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        (out / "emu.stderr").write_text(proc.stderr)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
            raise LabError(f"emulation {run.name} failed ({' '.join(cmd)}):\n{tail}")
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError as e:
            raise LabError(f"emulation {run.name}: the emulator's JSON did not parse: {e}") \
                from e
        results.append(RunResult(run, out, report))
        rt = report.get("realtime", {})
        lat = rt.get("lateness", {})
        bar.step(f"{run.name} (late p99 {lat.get('p99_us', float('nan')):.0f} us"
                 f"{', OVERLOADED' if rt.get('overloaded') else ''})")
    return results


def realtime_figures(r: RunResult) -> dict:
    """The emulator's figures of one run: lateness p50 / p99 / max (µs), engine CPU share,
    whether it was overloaded and why."""
    rt = r.report.get("realtime", {})
    lat = rt.get("lateness", {})
    return {
        "late_p50_us": lat.get("p50_us"),
        "late_p99_us": lat.get("p99_us"),
        "late_max_us": lat.get("max_us"),
        "engine_cpu_share": rt.get("engine_cpu_share"),
        "overloaded": bool(rt.get("overloaded")),
        "warnings": list(rt.get("warnings", [])),
    }
