"""Shared fixtures for the OTLP decoding tests: batch comparison and real request bytes."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from agent.batch import SpanBatch

ROOT = Path(__file__).resolve().parents[2]


def _assert_same(got: SpanBatch, want: SpanBatch) -> None:
    """Every column (values and dtype), table, counter and the rejected count agree."""
    for name in SpanBatch.__slots__:
        a, b = getattr(got, name), getattr(want, name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype, f"{name}: dtype {a.dtype} != {b.dtype}"
            assert a.shape == b.shape, f"{name}: shape {a.shape} != {b.shape}"
            assert np.array_equal(a, b), f"{name}: {a!r} != {b!r}"
        else:
            assert a == b, f"{name}: {a!r} != {b!r}"


@pytest.fixture(scope="session")
def assert_same() -> Callable[[SpanBatch, SpanBatch], None]:
    return _assert_same


@pytest.fixture(scope="session")
def workload() -> ModuleType:
    """``bench/workload.py`` (the bench package is not installed, so load it by path)."""
    spec = importlib.util.spec_from_file_location("otlp_test_workload", ROOT / "bench" / "workload.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def sdk_request_bytes() -> bytes:
    """An export request encoded by the OpenTelemetry SDK's own OTLP encoder from real spans."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "checkout", "cloud.region": "eu-west-3"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.otlp")
    with tracer.start_as_current_span("GET /cart", kind=SpanKind.SERVER) as span:
        span.set_attribute("http.request.method", "GET")
        with tracer.start_as_current_span("SELECT", kind=SpanKind.CLIENT) as db:
            db.set_attributes({"db.system": "postgresql", "db.statement": "SELECT * FROM cart"})
        with tracer.start_as_current_span("GET", kind=SpanKind.CLIENT) as http:
            http.set_attributes(
                {"url.full": "https://api.example.org/x", "http.response.body.size": 20480}
            )
        with tracer.start_as_current_span("publish", kind=SpanKind.PRODUCER) as msg:
            msg.set_attributes({"messaging.system": "kafka", "cloud.region": "pl"})
            msg.add_event("sent", {"size": 3})
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()
