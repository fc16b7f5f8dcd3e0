"""A synthetic demonstration trace that reproduces the shape of the paper's finding.

Three regions over eight days, each with a daily solar dip: ``solar-east`` and ``solar-west``
sit at ~420 gCO2e/kWh and dip by 300-340 (at 10-14 h and 14-18 h); ``hydro-north`` sits at ~240,
dips only by 36-40 (11-15 h), and is the cleanest *on average*. 60 jobs of mixed flexibility
(slack 0, 6, 12 or 24 h; 1-3 h long) are submitted outside the dips. At submission no dip is under way, so a live spatial policy
(``carbon-aware``) sees hydro-north as cleanest, exactly like ``lowest-average-region``, and
gains nothing over it; a policy that waits for tomorrow's dip by yesterday's pattern
(``forecast-greedy``) gets most of what the oracle gets. Sukprasert et al. (EuroSys 2024)
find the same shape on real grids: spatial choice by average captures most of the easy
reduction, and temporal shifting pays only where there is a daily cycle to exploit.

Deterministic (seeded) and marked ``"synthetic": true``; evaluations over it are recorded as
synthetic and never gate.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from placement.trace import trace_digest

DAYS = 8
SEED = 2024


def _region(rng: np.random.Generator, base: float, dip_start: int, dip: float) -> list[float]:
    hours = np.arange(DAYS * 24)
    values = np.full(hours.shape, base) + rng.normal(0.0, 6.0, hours.shape)
    in_dip = (hours % 24 >= dip_start) & (hours % 24 < dip_start + 5)
    depth = rng.uniform(0.9 * dip, dip, DAYS)[hours // 24]
    values = np.where(in_dip, values - depth, values)
    return [round(float(v), 1) for v in np.clip(values, 20.0, None)]


def sample_trace() -> dict[str, Any]:
    """The demonstration trace document (same bytes every time)."""
    rng = np.random.default_rng(SEED)
    regions = {
        "solar-east": _region(rng, 420.0, 10, 340.0),
        "solar-west": _region(rng, 430.0, 14, 340.0),
        "hydro-north": _region(rng, 240.0, 11, 40.0),
    }
    names = list(regions)
    slacks = (0, 6, 12, 24)
    jobs = []
    for k in range(60):
        day = 1 + k % (DAYS - 2)  # days 1..6: a day of history, and room for 24 h of slack
        hour = int(rng.choice([0, 2, 4, 6, 8, 20, 22]))  # outside both dips
        jobs.append(
            {
                "id": f"job-{k:02d}",
                "submit": day * 24 + hour,
                "duration": int(rng.integers(1, 4)),
                "energy_kwh": round(float(rng.uniform(5.0, 50.0)), 2),
                "slack": slacks[k % len(slacks)],
                "home": names[k % 3],
            }
        )
    return {"method": "average", "synthetic": True, "regions": regions, "jobs": jobs}


@cache
def sample_digest() -> str:
    """The sample's digest: a trace with it is synthetic even if the flag was removed."""
    return trace_digest(sample_trace())
