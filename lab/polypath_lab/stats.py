"""Small statistics over a list of numbers (no numpy needed)."""

from __future__ import annotations

import math


def mean(xs: list[float]) -> float:
    """Arithmetic mean (NaN for no values)."""
    return sum(xs) / len(xs) if xs else float("nan")


def std(xs: list[float]) -> float:
    """Sample standard deviation (0 for fewer than two values)."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation between order statistics."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def describe(xs: list[float]) -> dict[str, float]:
    """Mean, std, min and max, as the LAMP5G paper's Table I gives them."""
    return {
        "mean": mean(xs),
        "std": std(xs),
        "min": min(xs) if xs else float("nan"),
        "max": max(xs) if xs else float("nan"),
        "n": len(xs),
    }


def fmt(x: float | None, digits: int = 2) -> str:
    """A number for a table; a dash for missing values."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"
