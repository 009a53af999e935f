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
    #: The full sets (experiments that have a reduced default run everything; hours of real time).
    full: bool = False
    #: Parameters of the M2HO controller (``KEY=VALUE``, as ``polypath m2ho run --param``)
    #: for the m2ho experiment's replays and daemon; none: the paper's defaults.
    m2ho_params: tuple[str, ...] = ()
    #: The m2ho experiment's emulated environment (``KEY=VALUE``, keys of
    #: ``m2ho.Environment``: ``ue_share``, ``buffer_nr_fr1``, ...); none: its defaults.
    m2ho_env: tuple[str, ...] = ()


def registry() -> dict:
    """Experiment modules by name, in report order."""
    from . import chymp, clarity, coexistence, lamp5g_handover, lamp5g_table1, m2ho

    return {
        m.NAME: m
        for m in (lamp5g_table1, lamp5g_handover, clarity, m2ho, coexistence, chymp)
    }
