"""Scoring throughput: ``score_batch`` alone on decoded batches, merge cost, report cost.

Batches come from ``bench/workload.py`` requests decoded by ``agent.otlp`` (realistic:
several services and regions, db/http/messaging spans), so the figures are for the columns
the agent really scores. Decode time is not included here (bench_decode measures it).

    python -m bench score
"""

from __future__ import annotations

import time

from agent.config import GreenConfig
from agent.otlp import concat_batches, decode_protobuf
from agent.score import ScoringContext, WindowPartial, score_batch
from agent.window import build_report
from bench.workload import make_request_bytes

NOW_NS = 1_773_151_260_000_000_000


def _best_rate(fn, units: int, repeat: int = 5, min_s: float = 0.3) -> float:
    """Best of ``repeat`` timings of enough calls to last ``min_s``; units per second."""
    best = float("inf")
    for _ in range(repeat):
        calls, t0 = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_s:
                break
        best = min(best, elapsed / calls)
    return units / best


def main() -> None:
    ctx = ScoringContext.from_config(None, now_ns=NOW_NS)
    small = decode_protobuf(make_request_bytes(512, seed=1))
    big = concat_batches([decode_protobuf(make_request_bytes(512, seed=s)) for s in range(200)])
    for label, batch in (("512-span batch", small), (f"{len(big):,}-span batch", big)):
        rate = _best_rate(lambda b=batch: score_batch(b, ctx), len(batch))
        print(f"score_batch, {label}: {rate / 1e6:.2f} M spans/s")
    ctx_annual = ScoringContext.from_config(GreenConfig(use_hourly_profiles=False), now_ns=NOW_NS)
    rate = _best_rate(lambda: score_batch(big, ctx_annual), len(big))
    print(f"score_batch, {len(big):,}-span batch, profiles off: {rate / 1e6:.2f} M spans/s")

    parts = [score_batch(decode_protobuf(make_request_bytes(512, seed=s)), ctx) for s in range(50)]

    def merge_all() -> WindowPartial:
        acc = WindowPartial.empty()
        for p in parts:
            acc = acc.merge(p)
        return acc

    rate = _best_rate(merge_all, len(parts))
    print(f"WindowPartial.merge (512-span partials into a window): {1e6 / rate:.1f} us per merge")
    window = merge_all()
    blob = window.to_bytes()
    rate = _best_rate(lambda: WindowPartial.from_bytes(window.to_bytes()), 1)
    print(
        f"to_bytes + from_bytes of a {window.spans:,}-span window ({len(blob):,} B): {1e3 / rate:.2f} ms"
    )
    rate = _best_rate(lambda: build_report(window, ctx, NOW_NS - 60 * 10**9, NOW_NS), 1)
    print(f"build_report: {1e3 / rate:.2f} ms per window")
