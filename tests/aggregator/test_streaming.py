"""Streaming (issue 4, Scale): the fold's memory grows with services, not with lines.

The same ten services over 300 windows and over 12,000 windows (40x the lines, ~40 MB of
archive) must fold within the same peak traced memory; a fold that kept lines, parsed
records or a per-window list would grow with the larger set and fail here. The 1 GB figure
(`BENCH_AGGREGATE_WINDOWS=300000`, max RSS) is in docs/report-format.md.
"""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from aggregator import synth
from aggregator.engines import run_local
from aggregator.files import discover
from aggregator.read import Period
from schema.chain import seal

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _archive(root: Path, files: int, per_file: int) -> Path:
    """One agent, ``files`` rotated files of ``per_file`` sealed one-minute windows (the same
    ten services throughout, one line in ten a v1.0 line)."""
    templates = [
        r if isinstance(r, dict) else r.model_dump(mode="json")
        for r in synth.realistic(40, seed=3, v1_every=10)
    ]
    directory = root / "agent-a"
    directory.mkdir(parents=True)
    prev, seq = None, 0
    for f in range(files):
        out = bytearray()
        for _ in range(per_file):
            body = templates[seq % len(templates)]
            start = T0 + timedelta(minutes=seq)
            body["window"]["start"] = start.strftime("%Y-%m-%dT%H:%M:%SZ")
            body["window"]["end"] = (start + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
            rec = seal(prev, seq, body["window"]["end"], "report", body)
            out += orjson.dumps(rec) + b"\n"
            prev, seq = rec["hash"], seq + 1
        (directory / f"windows-20261101-{f:06d}.jsonl").write_bytes(out)
    return root


def _peak_fold(root: Path) -> tuple[int, int, int]:
    """(peak traced bytes, windows folded, archive bytes) for a local fold of ``root``."""
    files = discover([str(root)])
    size = sum(Path(f.url).stat().st_size for f in files)
    tracemalloc.start()
    try:
        state = run_local(files, Period.everything())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, state.windows, size


def test_fold_memory_grows_with_services_not_lines(tmp_path: Path) -> None:
    small_peak, small_windows, small_size = _peak_fold(_archive(tmp_path / "small", 2, 150))
    large_peak, large_windows, large_size = _peak_fold(_archive(tmp_path / "large", 8, 1500))
    assert (small_windows, large_windows) == (300, 12_000)  # every line was folded
    assert large_size > 30_000_000 > 40 * small_peak // 10  # the large set dwarfs the fold's memory
    # 40x the lines in 4x the files: the same peak, give or take the per-file buffers.
    assert large_peak < 1.5 * small_peak + 512 * 1024, (small_peak, large_peak)
