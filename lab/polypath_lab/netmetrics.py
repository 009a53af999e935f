"""Network metrics of the coexistence study ("Joint Congestion Control Evaluation
for MPTCP and MPQUIC over Multi-Link Backhauls"): Jain's fairness index, RFC 3550
interarrival jitter, per-bin throughput and loss.

These work on plain lists so they can be checked against hand-computed values
(``lab/tests/test_lab.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def jain(xs: Iterable[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when every share is equal, 1/n
    when one takes everything (R. Jain, D. Chiu, W. Hawe, "A Quantitative Measure of
    Fairness and Discrimination for Resource Allocation in Shared Computer Systems", DEC
    TR-301, 1984). NaN for no values or all zeros."""
    xs = [float(x) for x in xs]
    squares = sum(x * x for x in xs)
    if not xs or squares == 0.0:
        return float("nan")
    return sum(xs) ** 2 / (len(xs) * squares)


def rfc3550_jitter(transits: Iterable[float]) -> list[float]:
    """The RFC 3550 interarrival jitter after each packet of one stream, given the packets'
    transit times (arrival - send) in arrival order; the first packet's value is 0.

    RFC 3550, Section 6.4.1: "D(i,j) = (Rj - Ri) - (Sj - Si) = (Rj - Sj) - (Ri - Si)" and
    "J(i) = J(i-1) + (|D(i-1,i)| - J(i-1))/16" (the simulator's recorder applies the same
    rule to its per-stream jitter)."""
    out: list[float] = []
    jitter = 0.0
    last: float | None = None
    for transit in transits:
        if last is not None:
            jitter += (abs(transit - last) - jitter) / 16.0
        last = transit
        out.append(jitter)
    return out


def bin_index(t: float, start: float, width: float) -> int:
    """The bin of time ``t`` among bins of ``width`` from ``start`` (``[start + k w,
    start + (k+1) w)``)."""
    return int(math.floor((t - start) / width + 1e-9))


def binned_rate_mbps(events: Iterable[tuple[float, float]], start: float, end: float,
                     width: float = 0.1) -> list[float]:
    """Mbit/s per bin of ``width`` seconds over ``[start, end)`` from ``(time_s, bytes)``
    events; empty bins count as 0."""
    n = max(bin_index(end, start, width), 0)
    total = [0.0] * n
    for t, size in events:
        k = bin_index(t, start, width)
        if 0 <= k < n:
            total[k] += size
    return [b * 8.0 / width / 1e6 for b in total]


def loss_percent(delivered: list[int], dropped: list[int]) -> list[float]:
    """Per bin, packets dropped over packets delivered or dropped, in percent (bins with
    neither are left out)."""
    return [100.0 * d / (d + k) for k, d in zip(delivered, dropped) if d + k > 0]
