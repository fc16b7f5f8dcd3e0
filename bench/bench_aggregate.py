"""Aggregate throughput: local engine vs raw ``orjson.loads`` over the same lines; Dask speed-up.

Generates 100,000 realistic sealed window lines (10 services each over four regions, one in
ten a v1.0 line) as 4 agents x 25 rotated files in a temporary directory, then reports
windows/s and MB/s. Target (issue 4): local engine >= 0.5 of the raw parse rate.

The two rates are measured interleaved, file by file (raw ``orjson.loads`` over the file's
lines, already in memory, then the local engine's fold and merge of that file, which also
reads it from disk; the order alternates), so load from other processes on a shared machine
affects both alike. Wall-clock and CPU (thread) time are both reported; the ratio by CPU time
is the one that does not move with machine load.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import tracemalloc
from datetime import datetime, timedelta
from pathlib import Path

import orjson

from aggregator import synth
from aggregator.engines import fold_file, merge_next, run_dask, run_local
from aggregator.files import discover
from aggregator.fold import AggregateState
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
from schema.chain import seal

N_WINDOWS = int(os.environ.get("BENCH_AGGREGATE_WINDOWS", "100000"))
AGENTS = 4
FILES_PER_AGENT = 25
FIRST = datetime(2026, 11, 1)  # one window a minute per agent from here; the period ends 2026-12-31


def _generate(root: Path) -> int:
    """Write the archive set; returns its size in bytes."""
    templates = [
        r if isinstance(r, dict) else r.model_dump(mode="json")
        for r in synth.realistic(400, seed=11, v1_every=10)
    ]
    per_agent = N_WINDOWS // AGENTS
    if per_agent > 61 * 1440:
        raise SystemExit(f"BENCH_AGGREGATE_WINDOWS={N_WINDOWS}: at most {AGENTS * 61 * 1440:,} "
                         "(one window a minute per agent inside the bench period)")
    per_file = per_agent // FILES_PER_AGENT
    size = 0
    for a in range(AGENTS):
        agent = f"agent-{a}"
        (root / agent).mkdir(parents=True)
        prev, seq = None, 0
        for f in range(FILES_PER_AGENT):
            out = bytearray()
            for _ in range(per_file):
                body = templates[(seq + a) % len(templates)]
                body["window"]["start"] = (FIRST + timedelta(minutes=seq)).strftime("%Y-%m-%dT%H:%M:%SZ")
                body["agent_id"] = agent
                rec = seal(prev, seq, body["window"]["start"], "report", body)
                out += orjson.dumps(rec) + b"\n"
                prev, seq = rec["hash"], seq + 1
            (root / agent / f"windows-20261130-{f:06d}.jsonl").write_bytes(out)
            size += len(out)
    return size


def _interleaved(files, period: Period) -> tuple[AggregateState, dict[str, float]]:
    """Per file: raw parse of its lines and the local engine's work on it, order alternating.
    Returns the engine's state (exactly run_local's) and the summed wall and CPU seconds."""
    spent = dict.fromkeys(("raw_wall", "raw_cpu", "local_wall", "local_cpu"), 0.0)
    total, loads = AggregateState(), orjson.loads
    for i, f in enumerate(files):
        lines = Path(f.url).read_bytes().splitlines()
        for step in ("raw", "local") if i % 2 else ("local", "raw"):
            w0, c0 = time.perf_counter(), time.thread_time()
            if step == "raw":
                for line in lines:
                    loads(line)
            else:
                merge_next(total, fold_file(f, period), lambda known, f=f: fold_file(f, period, known=known))
            spent[f"{step}_wall"] += time.perf_counter() - w0
            spent[f"{step}_cpu"] += time.thread_time() - c0
    return total, spent


def _memory(files, period: Period) -> None:
    """Peak traced memory folding 4 files vs all: streaming means it must not grow with lines."""
    peaks = []
    for subset in (files[:4], files):
        tracemalloc.start()
        run_local(subset, period)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    print(f"peak traced memory:   {peaks[0] / 1e6:.1f} MB folding 4 files, {peaks[1] / 1e6:.1f} MB "
          f"folding all {len(files)} (grows with services, not lines)")


def main() -> None:
    logging.getLogger("carbonspan.aggregate").setLevel(logging.ERROR)  # one fallback warning per file
    period = Period.parse("2026-11-01", "2026-12-31")
    with tempfile.TemporaryDirectory(prefix="bench-aggregate-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        size = _generate(root)
        files = discover([str(root)])
        print(f"generated {N_WINDOWS:,} windows, {size / 1e6:.1f} MB in {len(files)} files "
              f"({time.perf_counter() - t0:.1f} s)")
        runs = [_interleaved(files, period) for _ in range(3)]
        state = runs[-1][0]
        assert state.windows == N_WINDOWS, state.windows
        local_bytes = report_bytes(build_report(state, period))
        for kind in ("wall", "cpu"):
            ratios = sorted(s[f"raw_{kind}"] / s[f"local_{kind}"] for _, s in runs)
            raw_s = min(s[f"raw_{kind}"] for _, s in runs)
            best = min(s[f"local_{kind}"] for _, s in runs)
            raw = N_WINDOWS / raw_s
            print(f"raw orjson.loads ({kind}): {raw:>10,.0f} windows/s  {size / raw_s / 1e6:7.1f} MB/s")
            print(f"local engine ({kind}):     {N_WINDOWS / best:>10,.0f} windows/s  {size / best / 1e6:7.1f} MB/s  "
                  f"ratio {ratios[1]:.2f} of raw (median of 3 interleaved runs: "
                  f"{', '.join(f'{r:.2f}' for r in ratios)}; target >= 0.5)")
        local_wall = min(s["local_wall"] for _, s in runs)
        _memory(files, period)
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as cluster, Client(cluster) as client:
            run_dask(files[:4], period, client=client)  # warm the workers' imports
            t0 = time.perf_counter()
            dstate = run_dask(files, period, client=client)
            dask_s = time.perf_counter() - t0
        same = report_bytes(build_report(dstate, period)) == local_bytes
        print(f"dask engine, 2 workers: {N_WINDOWS / dask_s:>8,.0f} windows/s  {size / dask_s / 1e6:7.1f} MB/s  "
              f"speed-up {local_wall / dask_s:.2f}x over local on {os.cpu_count()} cores; "
              f"report identical to local: {same}")


if __name__ == "__main__":
    main()
