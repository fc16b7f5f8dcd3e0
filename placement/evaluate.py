"""The placement model C(j, r, t) and the five policies, over whole job columns.

Model (issue 6; the idealisation of Sukprasert et al., EuroSys 2024, §3): job j needs d_j
whole hours and E_j kWh spread evenly; started in region r at hour t it emits

    C(j, r, t) = E_j / d_j × Σ_{h=t}^{t+d_j−1} I_r(h)        [gCO2e]

No capacity limits and no migration cost. With P_r the prefix sum of I_r (P_r[0] = 0) every
window sum is P_r[t+d] − P_r[t], O(1) per candidate, so a policy scores all of its
(job, region, start) candidates as one gather over arrays, in job chunks to bound memory.

Policies: ``carbon-agnostic`` (home, at submission), ``lowest-average-region`` (lowest mean
intensity over the trace, at submission), ``threshold-shift`` (home; first start whose window
mean is ≤ the 30th percentile of the home region's hourly values over the trace, else at once), ``oracle`` (lowest C over the whole
window, perfect foresight) and the candidate: ``forecast-greedy`` or a placement provider.
The baselines use whole-trace statistics (mean, percentile) — an idealisation that can only
make them stronger, so a candidate that beats them has beaten a generous bar.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement.providers import choose
from placement.trace import Trace

AGNOSTIC = "carbon-agnostic"
LOWEST_AVERAGE = "lowest-average-region"
THRESHOLD = "threshold-shift"
ORACLE = "oracle"
FORECAST_GREEDY = "forecast-greedy"
SIMPLE_BASELINES = (LOWEST_AVERAGE, THRESHOLD)
RESERVED = frozenset({AGNOSTIC, LOWEST_AVERAGE, THRESHOLD, ORACLE})
THRESHOLD_PERCENTILE = 30.0
PERSISTENCE_HOURS = 24
CHUNK = 4096


@dataclass(frozen=True, slots=True)
class Placement:
    """Where (region index) and when (start hour) each job runs; aligned with the trace."""

    region: np.ndarray
    start: np.ndarray


def prefix_sums(trace: Trace) -> np.ndarray:
    """P with P[r, 0] = 0 and P[r, h+1] = Σ_{k<=h} I_r(k), shape (regions, hours + 1)."""
    p = np.zeros((trace.intensity.shape[0], trace.hours + 1), np.float64)
    np.cumsum(trace.intensity, axis=1, out=p[:, 1:])
    return p


def job_emissions(trace: Trace, placement: Placement, p: np.ndarray | None = None) -> np.ndarray:
    """C(j, π(j)) for every job, in gCO2e."""
    p = prefix_sums(trace) if p is None else p
    r, t, d = placement.region, placement.start, trace.duration
    if (t < trace.submit).any() or (t > trace.submit + trace.slack).any():
        k = int(np.argmax((t < trace.submit) | (t > trace.submit + trace.slack)))
        raise ValueError(f"job {trace.job_ids[k]!r}: start {t[k]} is outside its window")
    return trace.energy_kwh / d * (p[r, t + d] - p[r, t])


def _chunks(n: int):
    for lo in range(0, n, CHUNK):
        yield slice(lo, min(n, lo + CHUNK))


def agnostic(trace: Trace, p: np.ndarray) -> Placement:
    return Placement(trace.home.copy(), trace.submit.copy())


def lowest_average_region(trace: Trace, p: np.ndarray) -> Placement:
    mean = trace.intensity.mean(axis=1)
    masked = np.where(trace.allowed, mean[None, :], np.inf)
    return Placement(np.argmin(masked, axis=1), trace.submit.copy())


def threshold_shift(trace: Trace, p: np.ndarray) -> Placement:
    """Home region; the first start whose run-window mean is ≤ the threshold, else at once.

    The threshold is the 30th percentile of the home region's *hourly* values over the whole
    trace (numpy's default linear interpolation), the same for every job in that region; it
    is compared with each candidate run-window's mean intensity.
    """
    thresholds = np.percentile(trace.intensity, THRESHOLD_PERCENTILE, axis=1)
    k = np.arange(int(trace.slack.max()) + 1)
    start = trace.submit.copy()
    for sl in _chunks(len(start)):
        h, s, d = trace.home[sl, None], trace.submit[sl, None], trace.duration[sl, None]
        t = s + np.minimum(k[None, :], trace.slack[sl, None])
        mean = (p[h, t + d] - p[h, t]) / d
        ok = (mean <= thresholds[h]) & (k[None, :] <= trace.slack[sl, None])
        first = np.argmax(ok, axis=1)
        start[sl] = np.where(ok.any(axis=1), trace.submit[sl] + first, trace.submit[sl])
    return Placement(trace.home.copy(), start)


def _argmin_window(
    trace: Trace, sums: Callable[[slice, np.ndarray], np.ndarray]
) -> Placement:
    """Per job, the (region, start) minimising ``sums`` (J, K, R) over allowed candidates.

    Ties go to the earliest start, then the first region. ``sums(sl, t)`` gets the job slice
    and the (J, K) start hours (clipped into each job's window; the mask drops the clipped).
    """
    k = np.arange(int(trace.slack.max()) + 1)
    n_regions = trace.intensity.shape[0]
    region = np.empty(len(trace.submit), np.int64)
    start = np.empty(len(trace.submit), np.int64)
    for sl in _chunks(len(region)):
        slack = trace.slack[sl, None]
        t = trace.submit[sl, None] + np.minimum(k[None, :], slack)
        w = sums(sl, t)
        if not ((slack == k[-1]).all() and trace.allowed[sl].all()):  # skip a no-op mask
            valid = (k[None, :] <= slack)[:, :, None] & trace.allowed[sl, None, :]
            w = np.where(valid, w, np.inf)
        best = np.argmin(w.reshape(t.shape[0], -1), axis=1)
        kk, region[sl] = np.divmod(best, n_regions)
        start[sl] = trace.submit[sl] + kk
    return Placement(region, start)


def oracle(trace: Trace, p: np.ndarray) -> Placement:
    """The lowest-emission (r, t) with perfect foresight: a bound, not a deployable policy."""

    pt = np.ascontiguousarray(p.T)  # (hours + 1, regions): one gather yields (J, K, R)

    def sums(sl: slice, t: np.ndarray) -> np.ndarray:
        return pt[t + trace.duration[sl, None]] - pt[t]

    return _argmin_window(trace, sums)


def forecast_greedy(trace: Trace, p: np.ndarray) -> Placement:
    """The oracle's search over a 24-hour persistence forecast made at submission.

    Hour h ≥ s is forecast as the most recent same-hour value observed before submission,
    I(s − 24 + ((h − s) mod 24)): the last 24 observed hours, repeated. With base b = s − 24
    and T = P[b + 24] − P[b], the forecast sum over offsets [a, a+d) is
    ((a+d)//24 − a//24)·T + P[b + (a+d) % 24] − P[b + a % 24]: O(1), and it reads only
    hours < s. A job submitted before hour 24 has less than a day of history, so some hours
    have no same-hour observation to forecast from; rather than invent one, it runs at once
    at home (exactly carbon-agnostic: no credit from jobs it cannot forecast, no invented data).
    """
    day = PERSISTENCE_HOURS
    young = trace.submit < day
    if young.all():  # also every trace shorter than a day: nothing to forecast from
        return Placement(trace.home.copy(), trace.submit.copy())
    pt = np.ascontiguousarray(p.T)

    def sums(sl: slice, t: np.ndarray) -> np.ndarray:
        s = trace.submit[sl, None]
        base = np.maximum(s - day, 0)
        a = t - s
        b = a + trace.duration[sl, None]
        whole = (pt[base + day] - pt[base])  # (J, 1, R): the last 24 observed hours
        laps = (b // day - a // day)[:, :, None].astype(np.float64)
        f = pt[base + b % day] - pt[base + a % day]
        f += laps * whole
        return f

    placed = _argmin_window(trace, sums)
    return Placement(
        np.where(young, trace.home, placed.region), np.where(young, trace.submit, placed.start)
    )


def provider_fields(trace: Trace, rows: slice) -> dict[str, np.ndarray]:
    """Each job's allowed regions as identical clusters but for the intensity at submission."""
    ci = trace.intensity[:, trace.submit[rows]].T
    ones = np.ones_like(ci)
    return {
        "carbon_intensity": ci,
        "cost_per_hour": ones,
        "capacity": ones,
        "used": np.zeros_like(ci),
        "size": np.zeros_like(ci),
        "headroom": ones,
    }


def _row_clusters(
    trace: Trace, f: dict[str, np.ndarray], i: int, cols: np.ndarray
) -> list[dict[str, Any]]:
    return [
        {"name": trace.region_names[j], "region": trace.region_names[j],
         **{k: float(v[i, j]) for k, v in f.items() if k not in ("size", "headroom")}}
        for j in cols
    ]


def _score_rows(provider: Any, trace: Trace, f: dict[str, np.ndarray], sl: slice) -> np.ndarray:
    """Per job, ``provider.score`` over its *allowed* regions only (a third-party score may
    depend on which clusters are offered); disallowed columns stay NaN (never chosen)."""
    scores = np.full(f["carbon_intensity"].shape, np.nan)
    allowed = trace.allowed[sl]
    for i in range(scores.shape[0]):
        cols = np.flatnonzero(allowed[i])
        s = provider.score(_row_clusters(trace, f, i, cols), {"size": 0.0})
        scores[i, cols] = [np.nan if v is None else v for v in s]
    return scores


def provider_policy(provider: Any) -> Callable[[Trace, np.ndarray], Placement]:
    """A provider as it behaves in production: at submission it scores every allowed region
    as a cluster, identical except for that region's current intensity, and the job runs at
    once in the best-scoring one.

    Built-ins and formulas score all regions in one array call: their orders are per-cluster
    (formulas) or dense-rank lexicographic, so the best allowed column is the same as if only
    the allowed ones were offered. Any other provider is called per job with its allowed
    regions only."""

    def place(trace: Trace, p: np.ndarray) -> Placement:
        region = np.empty(len(trace.submit), np.int64)
        for sl in _chunks(len(region)):
            f = provider_fields(trace, sl)
            if hasattr(provider, "score_arrays"):
                scores = np.asarray(provider.score_arrays(f), np.float64)
            else:
                scores = _score_rows(provider, trace, f, sl)
            region[sl] = choose(scores, trace.allowed[sl])
        return Placement(region, trace.submit.copy())

    return place


BASELINES: dict[str, Callable[[Trace, np.ndarray], Placement]] = {
    AGNOSTIC: agnostic,
    LOWEST_AVERAGE: lowest_average_region,
    THRESHOLD: threshold_shift,
    ORACLE: oracle,
}


def evaluate_policies(
    trace: Trace, candidate: str, candidate_policy: Callable[[Trace, np.ndarray], Placement]
) -> dict[str, dict[str, float]]:
    """Every policy's total emissions (g) and reduction (%) versus carbon-agnostic."""
    p = prefix_sums(trace)
    totals: dict[str, float] = {}
    for name, policy in [*BASELINES.items(), (candidate, candidate_policy)]:
        totals[name] = float(job_emissions(trace, policy(trace, p), p).sum())
    ref = totals[AGNOSTIC]
    if not ref > 0:
        raise ValueError(
            "carbon-agnostic emits nothing on this trace (zero energy or zero intensity), so "
            "no reduction can be measured; give the jobs energy and the regions intensities"
        )
    return {
        n: {"emissions_g": c, "reduction_pct": 100.0 * (1.0 - c / ref)} for n, c in totals.items()
    }
