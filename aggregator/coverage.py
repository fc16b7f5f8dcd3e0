"""Temporal coverage: how much of the period the windows of each agent actually cover.

``aggregate.period_coverage`` says how many windows carried the agent's own per-service
attribution; it says nothing about *time*. Twenty-five seconds of windows in a one-day period
is 100 % attributed and 0.03 % covered. This module keeps, per agent, the time its windows
span as a short sorted list of disjoint runs ``[lo, hi]`` (epoch seconds), and derives

    temporal_coverage(agent) = Σ_runs |[lo, hi] ∩ period| / period seconds
    temporal_coverage        = Σ_agents covered seconds / (agents × period seconds)

with the largest gaps (between runs, and between the period's edges and the first / last
run). Consecutive windows closer than ``GAP_TOLERANCE_S`` are one run: the instant between an
agent closing a window and opening the next is not downtime. Runs are a union, so merging the
runs of two partitions in any order gives the same list (the Dask and local engines give the
same bytes); memory grows with an agent's gaps, not its lines (at most ``MAX_RUNS`` per agent:
past it a new run joins its neighbour, counted in ``coverage_gaps_joined``).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from schema.archive import BODY_KEY
from schema.times import to_epoch

#: A gap between two windows of one agent shorter than this is not a gap (seconds).
GAP_TOLERANCE_S = 1.0
#: Runs kept per agent; past it a new run is joined to its neighbour (counted).
MAX_RUNS = 4096
#: Gaps listed in the report (the largest, over all agents).
MAX_GAPS = 10

Runs = list[list[float]]  # sorted, disjoint, separated by more than GAP_TOLERANCE_S


def window_end(rec: dict) -> float | None:
    """Epoch seconds of ``report.window.end`` (``report`` and ``window`` are objects: the
    start was read first), or None when it is absent or not an RFC 3339 time."""
    end = rec[BODY_KEY]["window"].get("end")
    if type(end) is not str:
        return None
    try:
        return to_epoch(end)
    except ValueError:
        return None


def add_run(runs: Runs, lo: float, hi: float) -> int:
    """Put ``[lo, hi]`` into ``runs`` (in place), joining every run it touches; returns 1 when
    the cap made it join a run it does not touch (a gap lost, to be counted), else 0."""
    i = bisect_right(runs, lo, key=lambda r: r[0])  # runs[:i] start at or before lo
    if i and runs[i - 1][1] + GAP_TOLERANCE_S >= lo:  # touches the run before it
        i -= 1
        runs[i][1] = max(runs[i][1], hi)
    elif i < len(runs) and hi + GAP_TOLERANCE_S >= runs[i][0]:  # touches the run after it
        runs[i][0] = lo
        runs[i][1] = max(runs[i][1], hi)
    elif len(runs) >= MAX_RUNS:
        j = i - 1 if i else 0
        runs[j][0], runs[j][1] = min(runs[j][0], lo), max(runs[j][1], hi)
        i, joined = j, 1
        _absorb(runs, i)
        return joined
    else:
        runs.insert(i, [lo, hi])
        return 0
    _absorb(runs, i)
    return 0


def _absorb(runs: Runs, i: int) -> None:
    """Join the runs after ``runs[i]`` that it now touches."""
    run = runs[i]
    while i + 1 < len(runs) and run[1] + GAP_TOLERANCE_S >= runs[i + 1][0]:
        run[1] = max(run[1], runs[i + 1][1])
        del runs[i + 1]


def merge_runs(left: dict[str, Runs], right: dict[str, Runs]) -> int:
    """Add every run of ``right`` into ``left`` (in place); returns the gaps the cap joined."""
    joined = 0
    for agent, runs in right.items():
        mine = left.get(agent)
        if mine is None:
            left[agent] = [list(r) for r in runs]
            continue
        for lo, hi in runs:
            joined += add_run(mine, lo, hi)
    return joined


def _bounds(spans: dict[str, Runs], start: float, end: float) -> tuple[float, float]:
    """The period to measure against: its bounds, or where open the windows' own extent."""
    los = [runs[0][0] for runs in spans.values() if runs]
    his = [runs[-1][1] for runs in spans.values() if runs]
    lo = start if start != float("-inf") else min(los, default=0.0)
    hi = end if end != float("inf") else max(his, default=0.0)
    return lo, hi


def coverage(spans: dict[str, Runs], start: float, end: float) -> dict[str, Any]:
    """The report's figures: period seconds, overall coverage, per agent (name order: agent,
    covered seconds, coverage, runs) and the largest gaps as (agent, from, to, seconds)."""
    lo, hi = _bounds(spans, start, end)
    period = max(0.0, hi - lo)
    agents, gaps = [], []
    for agent in sorted(spans):
        runs = spans[agent]
        covered = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in runs)
        agents.append((agent, covered, covered / period if period > 0.0 else 0.0, len(runs)))
        edges = [lo, *(x for run in runs for x in run), hi]  # gap i: edges[2i] .. edges[2i+1]
        for i in range(0, len(edges), 2):
            g_lo, g_hi = max(lo, edges[i]), min(hi, edges[i + 1])
            if g_hi - g_lo >= GAP_TOLERANCE_S:
                gaps.append((agent, g_lo, g_hi, g_hi - g_lo))
    gaps.sort(key=lambda g: (-g[3], g[0], g[1]))
    total = sum(a[1] for a in agents)
    overall = total / (period * len(agents)) if period > 0.0 and agents else 0.0
    return {"period_seconds": period, "coverage": overall, "agents": agents, "gaps": gaps[:MAX_GAPS]}
