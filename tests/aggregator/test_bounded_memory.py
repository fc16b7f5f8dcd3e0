"""Streaming: folding grows memory with the number of services, never with the number of lines."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import orjson

from aggregator import synth
from aggregator.engines import run_local
from aggregator.files import discover
from aggregator.read import Period
from schema.chain import seal

WINDOWS_PER_FILE = 500


def _write(root: Path, n_files: int) -> None:
    """One agent, ``n_files`` rotated files of WINDOWS_PER_FILE sealed windows, 10 services each."""
    templates = [
        r if isinstance(r, dict) else r.model_dump(mode="json")
        for r in synth.realistic(50, seed=3, v1_every=10)
    ]
    (root / "agent-a").mkdir(parents=True)
    prev, seq = None, 0
    for f in range(n_files):
        out = bytearray()
        for _ in range(WINDOWS_PER_FILE):
            body = templates[seq % len(templates)]
            body["window"]["start"] = f"2026-11-{1 + seq // 1440:02d}T{seq // 60 % 24:02d}:{seq % 60:02d}:00Z"
            rec = seal(prev, seq, body["window"]["start"], "report", body)
            out += orjson.dumps(rec) + b"\n"
            prev, seq = rec["hash"], seq + 1
        (root / "agent-a" / f"windows-20261130-{f:06d}.jsonl").write_bytes(out)


def _peak_bytes(root: Path) -> tuple[int, int]:
    """(peak traced bytes, windows folded) for a local fold of ``root``."""
    files = discover([str(root)])
    tracemalloc.start()
    try:
        state = run_local(files, Period.parse("2026-11-01", "2026-12-31"))
        return tracemalloc.get_traced_memory()[1], state.windows
    finally:
        tracemalloc.stop()


def test_ten_times_the_lines_do_not_take_ten_times_the_memory(tmp_path):
    _write(tmp_path / "small", 2)  # 1,000 windows
    _write(tmp_path / "large", 20)  # 10,000 windows, same services and regions
    small, small_windows = _peak_bytes(tmp_path / "small")
    large, large_windows = _peak_bytes(tmp_path / "large")
    assert (small_windows, large_windows) == (1_000, 10_000)  # every line was folded
    # A fold that kept lines, windows or per-line objects would grow ~10x here; a streaming fold
    # keeps one file chunk and the per-service state, so the peak stays within 1.5x.
    assert large < 1.5 * small, f"peak {large:,} B for 10,000 windows vs {small:,} B for 1,000"
