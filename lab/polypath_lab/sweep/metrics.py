"""Figures a campaign computes from each run's output files (named in a spec's
``metrics``), on the worker that ran it, next to the run report's own figures."""

from __future__ import annotations

from typing import Any, Callable

from ..sim import LabError, RunResult
from ..stats import mean, quantile


def _bin_s(r: RunResult) -> float:
    """The scenario's time-series bin, s (the simulator's default is 100 ms)."""
    return _seconds(r.run.scenario.get("output", {}).get("bin", "100ms"))


def _flow(r: RunResult) -> dict[str, Any]:
    flows = [f for f in r.run.scenario.get("flow", []) if f.get("kind") == "quic"]
    if len(flows) != 1:
        raise LabError(f"needs exactly one quic flow, the scenario has {len(flows)}")
    return flows[0]


def _seconds(text: Any) -> float:
    text = str(text).strip()
    for unit, scale in (("min", 60.0), ("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    if text == "0":
        return 0.0
    raise LabError(f"{text!r}: expected a duration")


def aggregation_efficiency(r: RunResult) -> dict[str, float]:
    """Bytes the (one) QUIC flow delivered to its application over the capacity of the
    links it could use in the same time: ``efficiency`` = goodput bytes from the flow's
    start to the end of the run over the sum, over the links in the direction the data
    flows (``down`` for a download), of each link's rate integrated over those bins.
    Also the two parts in MB and the mean goodput and capacity in Mbit/s. Stream bytes
    carry no headers, so even a perfect aggregator stays a few percent below 1."""
    flow = _flow(r)
    direction = "down" if flow.get("direction") == "download" else "up"
    start = _seconds(flow.get("start", "0s"))
    bin_s = _bin_s(r)
    used_links = set()
    for p in flow.get("paths", []):
        local = p["local"] if isinstance(p, dict) else p
        used_links.add(local)
    # Interfaces name their link; map the client's interface names to links.
    hosts = {h["name"]: h for h in r.run.scenario.get("host", [])}
    client = hosts.get(flow["from"], {})
    iface_link = {i["name"]: i["link"] for i in client.get("interfaces", [])}
    links = {iface_link.get(i, i) for i in used_links} or set(iface_link.values())
    capacity = 0.0
    for row in r.csv("links"):
        t = float(row["time_s"])
        if row["dir"] == direction and row["link"] in links and t > start + 1e-9:
            capacity += float(row["rate_mbps"]) * bin_s
    goodput = 0.0
    bins = 0
    for row in r.csv("flows"):
        t = float(row["time_s"])
        if row["flow"] == flow["name"] and t > start + 1e-9:
            goodput += float(row["goodput_mbps"]) * bin_s
            bins += 1
    if capacity <= 0:
        raise LabError(f"links {sorted(links)} had no {direction} capacity after {start} s")
    span = bins * bin_s
    return {
        "efficiency": goodput / capacity,
        "goodput_mb": goodput / 8,
        "capacity_mb": capacity / 8,
        "goodput_mbps": goodput / span if span else float("nan"),
        "capacity_mbps": capacity / span if span else float("nan"),
    }


def completion_time(r: RunResult) -> dict[str, float | int | None]:
    """The transfers' completion: ``completion_s`` (the longest transfer's duration, from
    its instance's start to its last byte; empty unless every QUIC instance completed) and
    ``transfers_completed``."""
    rows = [row for row in r.csv("completions") if row["label"] == "transfer"]
    expected = sum(f["instances"] for f in r.report["flows"] if f["kind"] == "quic")
    done = len(rows)
    longest = max((float(row["duration_s"]) for row in rows), default=None)
    return {"completion_s": longest if done >= expected and done else None,
            "transfers_completed": done}


def transactions(r: RunResult) -> dict[str, float | int]:
    """Request/response transactions (chunks): count, mean, p95 and max time, s."""
    times = [float(row["duration_s"]) for row in r.csv("completions")
             if row["label"] == "transaction"]
    return {
        "transactions": len(times),
        "transaction_mean_s": mean(times),
        "transaction_p95_s": quantile(times, 0.95),
        "transaction_max_s": max(times) if times else float("nan"),
    }


#: Metric name -> function of a run's result returning columns of the results table.
METRICS: dict[str, Callable[[RunResult], dict[str, Any]]] = {
    "aggregation_efficiency": aggregation_efficiency,
    "completion_time": completion_time,
    "transactions": transactions,
}
