"""Workload contracts (docs/contracts.md, "Figures"): decisions per second for 10,000 contracts
over a day of 15-minute signals, and ``shadow run`` + ``shadow report`` over a month of runs.

Signals: the 2022 NL 15-minute trace OpenDC ships (Electricity Maps, copied under
scheduling/data/opendc), written as a signal log: each interval observed a minute after its end;
decisions read persistence (the day before) as their forecast. Contracts vary in runtime
(p50 30-120 min), deferral (60-480 min) and submission (spread over the day), seeded.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from scheduling.contracts import parse_contract
from scheduling.decide import decide
from scheduling.runs import read_runs
from scheduling.shadow import shadow_events, write_log
from scheduling.shadow_report import report
from scheduling.signals import iso, parse_lines

TRACE = Path(__file__).resolve().parents[1] / "scheduling" / "data" / "opendc" / "carbon_traces" / \
    "2022-09-01_2022-11-30_NL.parquet"
MIN = 60_000
DAY = 1440 * MIN


def signal_lines(days: int) -> tuple[list[bytes], int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(TRACE)
    ts = t.column("timestamp").cast(pa.int64()).to_numpy()
    v = t.column("carbon_intensity").to_numpy()
    n = days * 96
    lines = [orjson.dumps({"region": "NL", "start": iso(int(ts[i])), "end": iso(int(ts[i]) + 15 * MIN),
                           "value": float(v[i]), "observed_at": iso(int(ts[i]) + 16 * MIN), "source": "electricitymaps",
                           "signal_type": "average", "version": "2022"}) for i in range(n)]
    return lines, int(ts[0])


def contract(i: int, rng: np.random.Generator) -> dict:
    p50 = int(rng.integers(30, 121))
    return {"name": f"job-{i}", "class": "flexible", "deadline": "23:45", "timezone": "Europe/Amsterdam",
            "max_deferral_minutes": int(rng.integers(60, 481)), "runtime": {"p50_minutes": p50, "p95_minutes": p50 * 1.5},
            "energy_kwh": float(rng.uniform(1, 50)), "residency": ["NL"], "home_region": "NL",
            "checkpoint": "optional", "cancellation": "safe", "fallback": "run_by_deadline"}


def bench_decisions(n: int = 10_000) -> None:
    lines, t0 = signal_lines(2)
    sig = parse_lines(lines)
    rng = np.random.default_rng(0)
    contracts = [parse_contract(contract(i, rng)) for i in range(n)]
    submits = t0 + DAY + rng.integers(0, 16 * 60, n) * MIN  # through the second day, until 16:00
    t = time.perf_counter()
    reasons: dict[str, int] = {}
    for c, s in zip(contracts, submits.tolist(), strict=True):
        d = decide(c, s, sig)
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
    dt = time.perf_counter() - t
    print(f"decide: {n:,} contracts over a day of 15-minute NL signals in {dt:.2f} s = {n / dt:,.0f} decisions/s")
    print(f"  by reason: {dict(sorted(reasons.items()))}")


def bench_shadow(days: int = 30, jobs: int = 50) -> None:
    lines, t0 = signal_lines(days + 1)
    sig = parse_lines(lines)
    rng = np.random.default_rng(1)
    contracts = {f"job-{i}": parse_contract(contract(i, rng)) for i in range(jobs)}
    runs = []
    for k in range(1, days + 1):
        for i in range(jobs):
            sub = t0 + k * DAY + int(rng.integers(0, 12 * 60)) * MIN
            dur = int(contracts[f"job-{i}"].runtime.p50_minutes * rng.uniform(0.8, 1.4)) * MIN
            runs.append({"job": f"job-{i}", "run_id": f"{k}-{i}", "submitted": iso(sub), "started": iso(sub + MIN),
                         "finished": iso(sub + MIN + dur), "region": "NL"})
    with tempfile.TemporaryDirectory() as tmp:
        rp = Path(tmp) / "runs.jsonl"
        rp.write_bytes(b"\n".join(orjson.dumps(r) for r in runs))
        t = time.perf_counter()
        evs = shadow_events(contracts, read_runs(rp), sig)
        write_log(Path(tmp) / "shadow.log", evs)
        t_run = time.perf_counter() - t
        t = time.perf_counter()
        doc = report(Path(tmp) / "shadow.log")
        t_rep = time.perf_counter() - t
    tot = doc["total"]
    print(f"shadow run: {len(runs):,} runs ({days} days x {jobs} jobs) in {t_run:.2f} s = {len(runs) / t_run:,.0f} runs/s")
    print(f"shadow report: {t_rep:.2f} s; measured avoided {tot['avoided_kgco2e_measured']} kgCO2e, "
          f"estimated {tot['avoided_kgco2e_estimated']}, coverage {tot['coverage']:.2f}, "
          f"forecast MAPE {doc['forecast_mape']:.3f}")


def main() -> None:
    bench_decisions()
    bench_shadow()


if __name__ == "__main__":
    main()
