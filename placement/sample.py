"""A synthetic demonstration trace that reproduces the design note's published table.

Three regions over eight days, each with a daily five-hour solar dip: ``solar-east`` and
``solar-west`` sit at ~420 and ~430 gCO2e/kWh and dip by 297-330 (at 10-14 h and 14-18 h);
``hydro-north`` sits at ~124, dips only by 38-42 (11-15 h), and is the cleanest *on average*.
60 jobs of mixed flexibility (slack 0, 6, 12 or 24 h; 1-3 h long; homes in turn) are
submitted outside the dips. At submission no dip is under way, so a live spatial policy
(``carbon-aware``) sees hydro-north as cleanest, exactly like ``lowest-average-region``, and
gains nothing over it; a policy that waits for tomorrow's dip by yesterday's pattern
(``forecast-greedy``) only just clears the 5 pp margin and gets almost all the oracle gets.

The structure (regions, dip hours, jobs, seed) is the design note's; four levels
(``HYDRO_BASE``, ``HYDRO_DIP``, ``SOLAR_DIP``, ``NOISE``) were chosen by a grid search so that
the figures reproduce the note's published table (``PUBLISHED``) within 1 pp per row
(docs/placement.md, "The sample trace", shows both). It reproduces the *shape* by
construction; it is not independent evidence for it.

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
SOLAR_BASE = {"solar-east": 420.0, "solar-west": 430.0}
SOLAR_DIP = 330.0  # deepest daily dip of the solar regions (each day: 90-100 % of it)
HYDRO_BASE = 124.0
HYDRO_DIP = 42.0
NOISE = 2.0  # hourly noise, standard deviation, gCO2e/kWh
#: the design note's published reductions (%), issue 13; the sample reproduces each within 1 pp
PUBLISHED: dict[str, float] = {
    "threshold-shift": 9.7,
    "lowest-average-region": 60.4,
    "carbon-aware": 60.4,
    "forecast-greedy": 67.4,
    "oracle": 67.6,
}


def _region(rng: np.random.Generator, base: float, dip_start: int, dip: float) -> list[float]:
    hours = np.arange(DAYS * 24)
    values = np.full(hours.shape, base) + rng.normal(0.0, NOISE, hours.shape)
    in_dip = (hours % 24 >= dip_start) & (hours % 24 < dip_start + 5)
    depth = rng.uniform(0.9 * dip, dip, DAYS)[hours // 24]
    values = np.where(in_dip, values - depth, values)
    return [round(float(v), 1) for v in np.clip(values, 20.0, None)]


def sample_trace() -> dict[str, Any]:
    """The demonstration trace document (same bytes every time)."""
    rng = np.random.default_rng(SEED)
    regions = {
        "solar-east": _region(rng, SOLAR_BASE["solar-east"], 10, SOLAR_DIP),
        "solar-west": _region(rng, SOLAR_BASE["solar-west"], 14, SOLAR_DIP),
        "hydro-north": _region(rng, HYDRO_BASE, 11, HYDRO_DIP),
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
