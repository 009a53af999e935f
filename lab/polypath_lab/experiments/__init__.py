"""The experiments, by name. Each module has ``NAME`` and ``run(ctx) -> Experiment``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Context:
    """How to run: seeds, reduced sizes or not, where to write, parallelism."""

    #: Seeds; the first one's runs are the ones plotted.
    seeds: list[int]
    #: Reduced versions (seconds, not minutes) for tests.
    quick: bool
    #: Report directory (PNG files go here).
    out: Path
    #: Where runs write their outputs.
    work: Path
    #: Simulator processes at a time.
    jobs: int = 2
    #: Draw progress bars.
    progress: bool = True


def registry() -> dict:
    """Experiment modules by name, in report order."""
    from . import chymp, clarity, lamp5g_handover, lamp5g_table1

    return {m.NAME: m for m in (lamp5g_table1, lamp5g_handover, clarity, chymp)}
