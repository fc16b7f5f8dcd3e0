"""Memory of ``aggregate.series``: it grows with services x buckets, never with lines.

Writes one agent's archive (4 files) of contiguous runtime windows spread evenly over a daily
period, folds it with the local engine under ``tracemalloc`` and prints, per case, the peak of
traced memory during the fold and what the folded state keeps (traced bytes still held with
the state alive). The cases vary the lines (x10), the services (x4) and the days (x4) one at
a time; the extra bytes per (service, bucket) cell are what the time series costs.
tests/aggregator/test_series_memory.py asserts the same properties on smaller cases.

    .venv/bin/python -m bench series_memory
"""

from __future__ import annotations

import gc
import tempfile
import tracemalloc
from datetime import date, timedelta
from pathlib import Path

import orjson

from aggregator.engines import run_local
from aggregator.files import discover
from aggregator.read import Period
from schema.archive import BODY_KEY, window_file_name
from schema.chain import seal
from schema.times import to_epoch

FILES = 4
FIRST_DAY = date(2026, 1, 1)


def write_archive(root: Path, services: int, days: int, windows: int) -> Period:
    """``windows`` contiguous windows of ``services`` services over ``days`` days (each window
    lasts until the next starts, so coverage keeps one run); returns the period."""
    names = [f"svc-{i:04d}" for i in range(services)]
    gs = {"energy_kwh": 0.0, "total_io_ops": 0,
          "co2": {"operational_gco2": 0.0, "embodied_gco2": 0.25, "total": {"mid": 0.0}},
          "per_service_energy_kwh": dict.fromkeys(names, 1e-6),
          "per_service_carbon_kgco2eq": dict.fromkeys(names, 2e-7),
          "per_service_requests": dict.fromkeys(names, 3),
          "per_service_region": dict.fromkeys(names, "eu-west-3"),
          "per_service_energy_model": dict.fromkeys(names, "scaphandre_rapl")}
    gs["energy_kwh"] = 1e-6 * services
    gs["co2"]["operational_gco2"] = 2e-4 * services
    start = to_epoch(f"{FIRST_DAY.isoformat()}T00:00:00Z")
    step = days * 86400 / windows
    (root / "agent-a").mkdir(parents=True)
    prev, per_file = None, -(-windows // FILES)
    for f in range(FILES):
        out = bytearray()
        for seq in range(f * per_file, min(windows, (f + 1) * per_file)):
            t0, t1 = start + seq * step, start + (seq + 1) * step
            window = {"start": _iso(t0), "end": _iso(t1), "traces": 3 * services}
            rec = seal(prev, seq, window["start"], BODY_KEY, {"window": window, "green_summary": gs})
            out += orjson.dumps(rec) + b"\n"
            prev = rec["hash"]
        (root / "agent-a" / window_file_name("20260101", f)).write_bytes(out)
    last = FIRST_DAY + timedelta(days=days - 1)
    return Period.parse(FIRST_DAY.isoformat(), last.isoformat())


def _iso(t: float) -> str:
    from schema.times import period_label

    return period_label(float(int(t)))


def measure(root: Path, period: Period) -> tuple[int, int, int, int]:
    """(peak traced bytes during the fold, bytes the folded state keeps, windows, buckets)."""
    files = discover([str(root)])
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        state = run_local(files, period)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return peak, kept, state.windows, len(state.series)


CASES = (  # (services, days, windows)
    (20, 40, 2_000),
    (20, 40, 20_000),  # x10 lines
    (80, 40, 2_000),  # x4 services
    (20, 160, 2_000),  # x4 days (buckets)
)


def main() -> None:
    print(f"{'services':>8} {'days':>5} {'windows':>8} {'buckets':>7} {'peak KiB':>9} {'state KiB':>10}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (services, days, windows) in enumerate(CASES):
            root = Path(tmp) / f"case-{i}"
            period = write_archive(root, services, days, windows)
            peak, kept, folded, buckets = measure(root, period)
            rows.append((services, buckets, kept))
            print(f"{services:>8} {days:>5} {folded:>8,} {buckets:>7} {peak / 1024:>9,.0f} {kept / 1024:>10,.0f}")
    base_s, base_b, base = rows[0]
    for services, buckets, kept in rows[2:]:
        cells = services * buckets - base_s * base_b
        print(f"x{services * buckets // (base_s * base_b)} services x buckets: {(kept - base) / cells:,.0f} B "
              "more state per added (service, bucket) cell")


if __name__ == "__main__":
    main()
