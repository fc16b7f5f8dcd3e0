"""The worked example of docs/placement.md, on the packaged real 2022 traces.

    python -m placement.worked_example

Two workloads of 2,000 jobs each over 2022 (seeded): submitted at random hours, 1-6 h long,
1-20 kWh, slack 0, 6, 12 or 24 h in turn. *temporal*: each job may run only in its home
zone (DE, GB, NL, ES or US-CAL-CISO). *spatial*: each may run in any of DE, NL, GB, ES, PL.
Each is evaluated for ``forecast-greedy`` and for the live ``carbon-aware`` provider.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from placement.decision import Settings
from placement.evaluation import run_evaluation
from placement.trace import parse_trace, trace_from_csv

TEMPORAL_HOMES = ("DE", "GB", "NL", "ES", "US-CAL-CISO")
SPATIAL_SET = ("DE", "NL", "GB", "ES", "PL")
N_JOBS = 2000


def jobs(kind: str, n: int = N_JOBS, seed: int = 22) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        home = (TEMPORAL_HOMES if kind == "temporal" else SPATIAL_SET)[k % 5]
        job = {
            "id": f"{kind}-{k:04d}",
            "submit": int(rng.integers(24, 8760 - 24 - 6)),
            "duration": int(rng.integers(1, 7)),
            "energy_kwh": round(float(rng.uniform(1.0, 20.0)), 3),
            "slack": (0, 6, 12, 24)[k % 4],
            "home": home,
            "regions": [home] if kind == "temporal" else list(SPATIAL_SET),
        }
        out.append(job)
    return out


def evaluate(kind: str) -> dict[str, dict[str, Any]]:
    zones = TEMPORAL_HOMES if kind == "temporal" else SPATIAL_SET
    trace = parse_trace(trace_from_csv(jobs(kind), zones=list(dict.fromkeys(zones))))
    return {c: run_evaluation(trace, c, Settings()) for c in ("forecast-greedy", "carbon-aware")}


def main() -> None:
    for kind in ("temporal", "spatial"):
        results = evaluate(kind)
        fg = results["forecast-greedy"]
        print(f"\n{kind}: trace {fg['trace']['digest'][:19]}… method {fg['trace']['method']}")
        for name, v in fg["policies"].items():
            print(f"  {name:<22} {v['emissions_g'] / 1000:10.1f} kg  {v['reduction_pct']:6.2f} %")
        ca = results["carbon-aware"]["policies"]["carbon-aware"]
        print(f"  {'carbon-aware':<22} {ca['emissions_g'] / 1000:10.1f} kg  {ca['reduction_pct']:6.2f} %")
        for c, r in results.items():
            v = r["verdict"]
            print(f"  {c}: best simple {r['best_simple']}, delta {r['delta_pp']:+.2f} pp -> "
                  f"{v['action']} ({v['ships']})")


if __name__ == "__main__":
    main()
