"""Aggregate throughput: local engine vs raw ``orjson.loads`` over the same lines; Dask speed-up.

The lines are the agent's own (``bench/agent_lines.py``: windows made by the agent's decode,
score, merge and report code, replicated with fresh window times in the agent's 27-character
format and re-sealed as the agent seals; a test holds their shape to a real agent process's
lines). Two scenarios, each as 4 agents' chains in a temporary directory, cut into files two ways
(``LAYOUTS``): as the agent rotates them by its defaults (a file per UTC day and before 100 MiB,
``agent.archive.ArchiveWriter``) and into 25 small files per agent (what many restarts or a small
``max_size_mb`` leave; the per-file costs weigh more):

- ``10 services``: 30,000 windows (``BENCH_AGGREGATE_WINDOWS``), the same ten services in each;
- ``1,000 services, changing``: 600 windows (``BENCH_AGGREGATE_WIDE_WINDOWS``), each a different
  draw of about 1,000 services from 1,500 (the service set changes every window).

Reported per scenario: windows/s and MB/s, the ratio to raw ``orjson.loads`` of the same bytes
(target, issue 18: >= 2, i.e. the fold at least twice as fast as parsing the lines), and
microseconds per line and per service entry; and how many lines the C byte path folded and
declined (``aggregator.fold.fast.BYTE_PATH``: a declined line is loaded and folded the long way).

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
from pathlib import Path

import orjson

from aggregator.engines import fold_file, merge_next, run_dask, run_local
from aggregator.files import discover
from aggregator.fold.fast import BYTE_PATH
from aggregator.fold.state import AggregateState
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
from bench.agent_lines import window_bodies, write_archive

N_WINDOWS = int(os.environ.get("BENCH_AGGREGATE_WINDOWS", "30000"))
N_WIDE = int(os.environ.get("BENCH_AGGREGATE_WIDE_WINDOWS", "600"))
AGENTS = 4
FILES_PER_AGENT = 25
#: How each scenario's chains are cut into files: as the agent rotates them by its defaults (a
#: file per UTC day, and before 100 MiB: per-file costs spread over ~1,440 lines of a minute's
#: windows, ~150 at 1,000 services), and into many small files (per-file costs over 30, resp. 6).
LAYOUTS = (("files as the agent rotates them", None), (f"{FILES_PER_AGENT} files per agent", FILES_PER_AGENT))


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


def _ratios(name: str, files, period: Period, windows: int, size: int, entries: int):
    """The interleaved measurement of one scenario, printed; returns the state and local wall s."""
    before = dict(BYTE_PATH)
    runs = [_interleaved(files, period) for _ in range(3)]
    taken = {k: BYTE_PATH[k] - before.get(k, 0) for k in ("folded", "declined", "given_up")}
    state = runs[-1][0]
    assert state.windows == windows, (state.windows, windows)
    print(f"{name}: {windows:,} windows, {size / 1e6:.1f} MB in {len(files)} files, "
          f"{entries / windows:,.0f} service entries per window; byte path: {taken['folded']:,} lines folded, "
          f"{taken['declined']:,} declined, {taken['given_up']} files given up")
    for kind in ("wall", "cpu"):
        ratios = sorted(s[f"raw_{kind}"] / s[f"local_{kind}"] for _, s in runs)
        raw_s = min(s[f"raw_{kind}"] for _, s in runs)
        best = min(s[f"local_{kind}"] for _, s in runs)
        print(f"  raw orjson.loads ({kind}): {windows / raw_s:>10,.0f} windows/s  {size / raw_s / 1e6:7.1f} MB/s"
              f"  {raw_s / windows * 1e6:8.1f} us/line")
        print(f"  local engine ({kind}):     {windows / best:>10,.0f} windows/s  {size / best / 1e6:7.1f} MB/s"
              f"  {best / windows * 1e6:8.1f} us/line  {best / entries * 1e6:6.2f} us/service entry  "
              f"ratio {ratios[1]:.2f} of raw (median of 3 interleaved runs: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; target >= 2)")
    return state, min(s["local_wall"] for _, s in runs)


def main() -> None:
    logging.getLogger("carbonspan.aggregate").setLevel(logging.ERROR)  # one fallback warning per file
    period = Period.parse("2026-11-01", "2026-12-31")
    per_agent = max(N_WINDOWS, N_WIDE) // AGENTS
    if per_agent > 61 * 1440:
        raise SystemExit(f"at most {AGENTS * 61 * 1440:,} windows (one a minute per agent inside "
                         "the bench period)")
    with tempfile.TemporaryDirectory(prefix="bench-aggregate-") as tmp:
        t0 = time.perf_counter()
        narrow, wide = window_bodies(10, 8), window_bodies(1000, 4, changing=True)
        print(f"agent windows built by the agent's code: 8 of 10 services, 4 of ~1,000 "
              f"({time.perf_counter() - t0:.1f} s)")
        results = {}
        for name, bodies, count in (("10 services", narrow, N_WINDOWS),
                                    ("1,000 services, changing", wide, N_WIDE)):
            for layout, per_agent_files in LAYOUTS:
                root = Path(tmp) / f"{name.split()[0].replace(',', '')}-{per_agent_files or 'agent'}"
                size = write_archive(root, bodies, count, AGENTS, per_agent_files)
                files = discover([str(root)])
                windows = (count // AGENTS) * AGENTS
                per_line = [len(b["green_summary"]["per_service_energy_kwh"]) for b in bodies]
                entries = sum(per_line[i % len(per_line)] for i in range(count // AGENTS)) * AGENTS
                label = f"{name}, {layout}"
                results[label] = (files, *_ratios(label, files, period, windows, size, entries))
        files, state, local_wall = results[f"10 services, {LAYOUTS[1][0]}"]
        local_bytes = report_bytes(build_report(state, period))
        _memory(files, period)
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
            run_dask(files[:4], period, client=client)  # warm the workers' imports
            t0 = time.perf_counter()
            dstate = run_dask(files, period, client=client)
            dask_s = time.perf_counter() - t0
        same = report_bytes(build_report(dstate, period)) == local_bytes
        print(f"dask engine, 2 workers (10 services): {state.windows / dask_s:>8,.0f} windows/s  "
              f"speed-up {local_wall / dask_s:.2f}x over local on {os.cpu_count()} cores; "
              f"report identical to local: {same}")


if __name__ == "__main__":
    main()
