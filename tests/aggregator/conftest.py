"""Shared fixtures: real archive files written with aggregator.synth (sealed, rotated, gzip)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from aggregator import synth
from aggregator.engines import run_local
from aggregator.files import discover
from aggregator.fold.state import AggregateState
from aggregator.read import Period
from schema.chain import seal

T0 = datetime(2026, 11, 10, tzinfo=UTC)


@pytest.fixture
def write_lines() -> Callable[..., Path]:
    """Write raw byte lines (already serialised, possibly hostile) as one window file."""

    def write(root: Path, lines: list[bytes], agent: str = "agent-a", name: str = "windows-20261110-000000.jsonl") -> Path:
        path = root / agent / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines))
        return path

    return write


def fold_paths(*paths: Path | str, period: Period | None = None, strict: bool = False) -> AggregateState:
    return run_local(discover([str(p) for p in paths]), period or Period.everything(), strict)


@pytest.fixture
def fold() -> Callable[..., AggregateState]:
    """Fold archive paths with the local engine (whole time range unless a period is given)."""
    return fold_paths


@pytest.fixture
def record() -> Callable[..., bytes]:
    """Seal one report dict as an archive line (bytes)."""

    def make(report: dict[str, Any], seq: int = 0, prev: str | None = None) -> bytes:
        return orjson.dumps(seal(prev, seq, "2026-11-10T00:01:00Z", "report", report))

    return make


@pytest.fixture
def mixed_archive(tmp_path: Path) -> Path:
    """Two agents: agent-a mixes v1.0 and runtime lines over 3 rotated files (first gzipped),
    agent-b is runtime only over 2 files (second gzipped). 60 + 40 windows."""
    root = tmp_path / "archives"
    a = synth.sealed_lines(synth.realistic(60, seed=1, agent_id="agent-a", start=T0, v1_every=4))
    b = synth.sealed_lines(synth.realistic(40, seed=2, n_services=6, agent_id="agent-b", start=T0))
    synth.write_agent(root, "agent-a", synth.split(a, 3), gzip_files=[0], day="20261110")
    synth.write_agent(root, "agent-b", synth.split(b, 2), gzip_files=[1], day="20261110")
    (root / "agent-a" / "agent.wal").write_bytes(b"not a window file\n")
    (root / "agent-a" / "agent.lock").write_bytes(b"")
    (root / "agent-b" / "windows-20261110-000009.jsonl.corrupt").write_bytes(b'{"torn')
    return root
