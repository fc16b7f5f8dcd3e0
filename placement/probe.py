"""The probe: does a policy's choice depend on carbon intensity? Measured, never declared.

The probe scores the same clusters many times, changing nothing but ``carbon_intensity``,
and compares each cluster's score across those runs. Any difference, in any score, means
the policy weighs carbon (a policy whose scores are not reproducible counts as weighing it).
Comparing a cluster with itself, never with another cluster, means names, regions and other
fields cannot make a carbon-blind policy look carbon-aware, and the stand-in clusters look
like ordinary clusters, so nothing announces a probe.

Two sets of runs:

- **stand-ins** (always): three clusters identical but for name and region, swept over
  ``PROBE_LEVELS``, 0 to 10,000 gCO2e/kWh (real grids reach about 1,100; 2,000 and beyond
  catch thresholds set above them): all three at each level, and the first at each level
  while the others sit at 0, 500 or 2,500 (so rank-based policies and thresholds show);
- **the real clusters** (when placing): the clusters being placed on, with the job being
  placed, at their own intensities, each one moved by ±1 g and ±10 %, all of them at each
  one's value, and the values reversed, so a dependence near the real values is seen
  however narrow.

The stand-ins' answer for a built-in or a formula (a pure function of what its identity
digest covers) is kept per digest, so placing many jobs sweeps it once; plugins are swept
every time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from placement.identity import policy_identity
from placement.providers import cluster_arrays

#: gCO2e/kWh levels the stand-ins are swept over: fine where grids are, then coarser, and beyond
PROBE_LEVELS: tuple[float, ...] = tuple(float(v) for v in sorted(
    {0, 1, 2, 5, *range(10, 100, 10), *range(100, 2001, 25), 2250, 2500, 5000, 10000}))
#: the others' levels while the first stand-in sweeps
PROBE_OTHERS: tuple[float, ...] = (0.0, 500.0, 2500.0)
STAND_INS: tuple[tuple[str, str], ...] = (("eu-west-1a", "IE"), ("eu-central-1b", "DE"),
                                          ("us-east-2c", "US-MIDA-PJM"))
STAND_IN_JOB: dict[str, Any] = {"id": "nightly-etl", "size": 1}


def _stand_in_rows() -> tuple[list[dict[str, Any]], np.ndarray]:
    clusters = [{"name": n, "region": r, "carbon_intensity": 0.0, "cost_per_hour": 1.0,
                 "capacity": 16.0, "used": 4.0} for n, r in STAND_INS]
    lv = np.array(PROBE_LEVELS)
    rows = [np.repeat(lv[:, None], len(clusters), axis=1)]
    for other in PROBE_OTHERS:
        block = np.full((lv.size, len(clusters)), other)
        block[:, 0] = lv
        rows.append(block)
    return clusters, np.vstack(rows)


def _real_rows(clusters: Sequence[Mapping[str, Any]]) -> np.ndarray:
    ci = [c.get("carbon_intensity") for c in clusters]
    base = np.array([np.nan if x is None else float(x) for x in ci], np.float64)
    known = base
    rows = [base]
    for i in range(len(clusters)):
        x = 0.0 if np.isnan(known[i]) else known[i]
        for moved in (x - 1.0, x + 1.0, x * 0.9, x * 1.1 + 1.0):
            r = base.copy()
            r[i] = max(moved, 0.0)
            rows.append(r)
        if not np.isnan(known[i]):
            rows.append(np.full(len(clusters), known[i]))
    rows.append(base[::-1].copy())
    return np.vstack(rows)


def _scores(provider: Any, clusters: Sequence[Mapping[str, Any]], job: Mapping[str, Any],
            intensities: np.ndarray) -> np.ndarray:
    """Scores (rows, clusters) of the clusters at each row of intensities (NaN: unknown)."""
    if hasattr(provider, "score_arrays"):  # built-ins and formulas: one array call
        f = {k: np.broadcast_to(a, intensities.shape) for k, a in cluster_arrays(clusters, job).items()}
        f["carbon_intensity"] = intensities
        return np.asarray(provider.score_arrays(f), np.float64)
    out = np.empty(intensities.shape)
    for k, row in enumerate(intensities):
        variant = [{**c, "carbon_intensity": None if np.isnan(x) else float(x)}
                   for c, x in zip(clusters, row, strict=True)]
        out[k] = [np.nan if s is None else s for s in provider.score(variant, job)]
    return out


def _varies(scores: np.ndarray) -> bool:
    first = scores[0]
    same = (scores == first) | (np.isnan(scores) & np.isnan(first))
    return not bool(same.all())


#: stand-in verdicts of array providers (built-ins, formulas) by identity digest: their scores
#: are a pure function of what the digest covers, so the sweep's answer cannot change
_SWEPT: dict[str, bool] = {}


def _stand_ins_vary(provider: Any) -> bool:
    digest = policy_identity(provider).get("digest") if hasattr(provider, "score_arrays") else None
    if isinstance(digest, str) and digest in _SWEPT:
        return _SWEPT[digest]
    stand_ins, rows = _stand_in_rows()
    varies = _varies(_scores(provider, stand_ins, STAND_IN_JOB, rows))
    if isinstance(digest, str):
        if len(_SWEPT) > 4096:
            _SWEPT.clear()
        _SWEPT[digest] = varies
    return varies


def weighs_carbon(
    provider: Any,
    clusters: Sequence[Mapping[str, Any]] | None = None,
    job: Mapping[str, Any] | None = None,
) -> bool:
    """Does ``provider``'s score of any cluster change when only intensities change?"""
    if clusters:  # first, so a plugin that fails says so about the clusters it was given
        real = [dict(c) for c in clusters]
        if _varies(_scores(provider, real, job or STAND_IN_JOB, _real_rows(real))):
            return True
    return _stand_ins_vary(provider)
