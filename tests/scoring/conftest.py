"""Shared helpers for the scoring tests: build SpanBatch values directly, score and report.

Spans are dicts; only the keys a test cares about need be given:
``service`` ("svc"), ``region`` (None: no cloud.region on span or resource), ``op`` (None |
"select" | "insert" | "update" | "delete" | "db" | "http" | "messaging"), ``resp`` (HTTP
response bytes, -1 unknown), ``start`` (ns, 0 = absurd), ``dur`` (ns), ``trace`` (int),
``entry`` (bool), ``root`` (bool: no parent span id), ``endpoint`` (span name).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from agent.batch import (
    OP_HTTP,
    OP_MESSAGING,
    OP_NONE,
    OP_SQL_DELETE,
    OP_SQL_INSERT,
    OP_SQL_OTHER,
    OP_SQL_SELECT,
    OP_SQL_UPDATE,
    SpanBatch,
)
from agent.config import GreenConfig, parse_green
from agent.score import ScoringContext, score_batch
from agent.window import build_report

OPS = {
    None: OP_NONE,
    "select": OP_SQL_SELECT,
    "insert": OP_SQL_INSERT,
    "update": OP_SQL_UPDATE,
    "delete": OP_SQL_DELETE,
    "db": OP_SQL_OTHER,
    "http": OP_HTTP,
    "messaging": OP_MESSAGING,
}
T0 = 1_767_268_800_000_000_000  # 2026-01-01T12:00:00Z


def build_batch(spans: list[dict]) -> SpanBatch:
    services: dict[str, int] = {}
    regions: dict[str, int] = {}
    endpoints: dict[str, int] = {}
    cols: dict[str, list] = {
        k: [] for k in ("svc", "reg", "ep", "op", "resp", "start", "dur", "trace", "entry", "root")
    }
    for i, s in enumerate(spans):
        cols["svc"].append(services.setdefault(s.get("service", "svc"), len(services)))
        region = s.get("region")
        cols["reg"].append(-1 if region is None else regions.setdefault(region, len(regions)))
        cols["ep"].append(endpoints.setdefault(s.get("endpoint", "op"), len(endpoints)))
        cols["op"].append(OPS[s.get("op")])
        cols["resp"].append(s.get("resp", -1))
        cols["start"].append(s.get("start", T0 + i * 1_000_000))
        cols["dur"].append(s.get("dur", 1_000_000))
        cols["trace"].append(s.get("trace", i))
        cols["entry"].append(s.get("entry", False))
        cols["root"].append(s.get("root", False))
    return SpanBatch(
        services=list(services),
        regions=list(regions),
        endpoints=list(endpoints),
        service_id=np.array(cols["svc"], dtype=np.int32),
        region_id=np.array(cols["reg"], dtype=np.int32),
        endpoint_id=np.array(cols["ep"], dtype=np.int32),
        op_class=np.array(cols["op"], dtype=np.uint8),
        response_bytes=np.array(cols["resp"], dtype=np.int64),
        start_ns=np.array(cols["start"], dtype=np.int64),
        duration_ns=np.array(cols["dur"], dtype=np.int64),
        trace_lo=np.array(cols["trace"], dtype=np.uint64),
        is_entry=np.array(cols["entry"], dtype=np.bool_),
        is_root=np.array(cols["root"], dtype=np.bool_),
    )


def context(green: dict | GreenConfig | None = None, **kw) -> ScoringContext:
    cfg = green if isinstance(green, GreenConfig) else parse_green(green or {})
    kw.setdefault("now_ns", T0 + 60 * 10**9)
    return ScoringContext.from_config(cfg, **kw)


#: the golden-test config: coefficients and profiles off, embodied 0
PLAIN = {
    "use_hourly_profiles": False,
    "per_operation_coefficients": False,
    "embodied_carbon_per_request_gco2": 0.0,
}


def report(spans: list[dict], green: dict | None = None, start=T0, end=T0 + 60 * 10**9, **kw):
    ctx = context(green, **kw)
    return build_report(score_batch(build_batch(spans), ctx), ctx, start, end)


class Helpers:
    build_batch: Callable = staticmethod(build_batch)
    context: Callable = staticmethod(context)
    report: Callable = staticmethod(report)
    PLAIN = PLAIN
    T0 = T0


@pytest.fixture(scope="session")
def h() -> type[Helpers]:
    return Helpers


@pytest.fixture(scope="session")
def workload() -> ModuleType:
    """``bench/workload.py`` loaded by path (the bench package is not installed)."""
    path = Path(__file__).resolve().parents[2] / "bench" / "workload.py"
    spec = importlib.util.spec_from_file_location("scoring_test_workload", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
