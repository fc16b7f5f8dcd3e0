"""Shared fixtures for the admission tests: forests, claims and real archive files."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest

from admission.claims import Claim
from admission.engine import Admission
from admission.model import build_forest
from schema.chain import seal


def _forest(spec: list[tuple[str, str | None, int, int, int]]):
    """(name, parent, energy_uj, devices, weight) tuples -> Forest."""
    return build_forest(
        [{"name": n, "parent": p, "energy_uj": e, "devices": d, "weight": w} for n, p, e, d, w in spec]
    )


@pytest.fixture
def forest():
    return _forest


@pytest.fixture
def engine():
    def make(spec):
        return Admission(_forest(spec))

    return make


@pytest.fixture
def claim():
    def make(id, pool, devices=1, uj=0, grade="estimator", priority=0, gang=None):
        return Claim(id, pool, devices, uj, grade, priority, gang)

    return make


def write_archive(path: Path, windows: list[dict[str, Any]], gz: bool = False) -> None:
    """Write window lines sealed with schema.chain.seal, as the agent's archive does."""
    prev = None
    lines = []
    for seq, w in enumerate(windows):
        report = {
            "version": "1.1",
            "agent_id": path.parent.name,
            "window": {"start": w["ts"], "end": w["ts"]},
            "green_summary": {
                "per_service_energy_kwh": w["energy"],
                "per_service_energy_model": w["model"],
            },
        }
        rec = seal(prev, seq, w["ts"], "report", report)
        prev = rec["hash"]
        lines.append(orjson.dumps(rec, option=orjson.OPT_SORT_KEYS) + b"\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(lines)
    path.write_bytes(gzip.compress(data) if gz else data)


@pytest.fixture
def archive():
    return write_archive
