"""Embodied carbon (SCI's M) per distinct trace (the default) or per root span.

Per trace, a request is charged by every window and every agent that sees one of its spans;
per root span, once, by the window and the agent that receive its root span. Each figure below
is worked by hand next to its assertion (docs/carbon-model.md, sections 5 and 8).
"""

from __future__ import annotations

import base64
import random

import orjson
import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agent.carbon.partial import WindowPartial
from agent.config import parse_green
from agent.otlp import decode_json, decode_protobuf
from agent.score import ScoringContext, score_batch
from agent.window import build_report
from schema import WindowReport

T0 = 1_767_268_800_000_000_000  # 2026-01-01T12:00:00Z
MINUTE = 60 * 10**9
PER_REQUEST = 0.001


def green(unit: str, **extra: object) -> dict:
    return {
        "use_hourly_profiles": False,
        "per_operation_coefficients": False,
        "embodied_carbon_per_request_gco2": PER_REQUEST,
        "embodied_per": unit,
        **extra,
    }


def recomputed_m(rep: WindowReport) -> float:
    """M as an auditor recomputes it from the line alone."""
    unit = rep.methodology.get("embodied_per", "trace")  # a line without it was per trace
    count = rep.window.root_spans if unit == "root_span" else rep.window.traces
    return count * float(rep.methodology["embodied_carbon_per_request_gco2"])


@pytest.mark.parametrize(("unit", "m_first", "m_second"), [("trace", 0.001, 0.001), ("root_span", 0.001, 0.0)])
def test_a_trace_split_over_two_windows_counts_twice_per_trace_and_once_per_root_span(h, unit, m_first, m_second):
    # trace 7: its root (a SERVER span) and one SQL span close window 1, a second SQL span
    # opens window 2. Per trace: 1 distinct trace in each window, 1 x 0.001 g twice = 0.002 g.
    # Per root span: 1 root in window 1 (0.001 g), none in window 2 (0 g) = 0.001 g.
    first = [{"region": "eu-west-3", "trace": 7, "entry": True, "root": True},
             {"region": "eu-west-3", "trace": 7, "op": "select"}]  # fmt: skip
    second = [{"region": "eu-west-3", "trace": 7, "op": "insert", "start": T0 + MINUTE + 1}]
    w1 = h.report(first, green(unit), start=T0, end=T0 + MINUTE)
    w2 = h.report(second, green(unit), start=T0 + MINUTE, end=T0 + 2 * MINUTE)
    assert (w1.window.traces, w1.window.root_spans) == (1, 1)
    assert (w2.window.traces, w2.window.root_spans) == (1, 0)
    assert w1.green_summary.co2.embodied_gco2 == pytest.approx(m_first, abs=0)
    assert w2.green_summary.co2.embodied_gco2 == pytest.approx(m_second, abs=0)
    for rep in (w1, w2):
        assert rep.methodology["embodied_per"] == unit
        assert rep.methodology["embodied_carbon_per_request_gco2"] == "0.001"
        assert rep.green_summary.co2.embodied_gco2 == recomputed_m(rep)
        co2 = rep.green_summary.co2
        assert co2.total.mid == pytest.approx(co2.operational_gco2 + co2.embodied_gco2, rel=1e-12)
    # the unit changes M only: 1 SELECT then 1 INSERT at 1e-7 kWh x 41.5 g/kWh x 1.15
    assert w1.green_summary.co2.operational_gco2 == pytest.approx(1e-7 * 41.5 * 1.15, rel=1e-12)
    assert w2.green_summary.co2.operational_gco2 == pytest.approx(1e-7 * 41.5 * 1.15, rel=1e-12)


def test_the_default_is_per_trace_as_issue_2_specifies(h):
    # traces 7, 7, 8 with one root: 2 distinct traces x 0.001 = 0.002 g, not 1 root x 0.001
    spans = [{"trace": 7, "root": True}, {"trace": 7}, {"trace": 8}]
    rep = h.report(spans, {"embodied_carbon_per_request_gco2": PER_REQUEST})
    assert rep.methodology["embodied_per"] == "trace"
    assert (rep.window.traces, rep.window.root_spans) == (2, 1)
    assert rep.green_summary.co2.embodied_gco2 == pytest.approx(0.002, abs=0)


def _sdk_requests() -> tuple[bytes, bytes]:
    """Two requests through a shop on two hosts, traced by the OpenTelemetry SDK, one export
    per host: request 1 enters at ``frontend`` (host A) and calls ``payments`` (host B);
    request 2 enters at ``payments`` directly (its root is on host B)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.propagate import extract, inject
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    def host(service: str, region: str):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": service, "cloud.region": region}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return provider, exporter, provider.get_tracer("tests.scoring")

    a, a_spans, frontend = host("frontend", "us-east-1")
    b, b_spans, payments = host("payments", "pl")

    def pay(headers: dict[str, str] | None) -> None:
        ctx = extract(headers) if headers is not None else None
        with payments.start_as_current_span("POST /pay", kind=SpanKind.SERVER, context=ctx):
            with payments.start_as_current_span("INSERT", kind=SpanKind.CLIENT) as db:
                db.set_attributes({"db.system": "postgresql", "db.statement": "INSERT INTO payments"})

    with frontend.start_as_current_span("GET /checkout", kind=SpanKind.SERVER):
        with frontend.start_as_current_span("POST", kind=SpanKind.CLIENT) as call:
            call.set_attributes({"http.request.method": "POST", "url.full": "http://payments/pay"})
            headers: dict[str, str] = {}
            inject(headers)
            pay(headers)
    pay(None)
    a.shutdown()
    b.shutdown()
    return (encode_spans(a_spans.get_finished_spans()).SerializeToString(),
            encode_spans(b_spans.get_finished_spans()).SerializeToString())  # fmt: skip


def _as_otlp_json(data: bytes) -> bytes:
    """The request as OTLP/JSON (hex ids), as the JavaScript exporter sends it."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(data)
    doc = MessageToDict(req, use_integers_for_enums=True)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return orjson.dumps(doc)


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
@pytest.mark.parametrize(("unit", "want"), [("trace", 0.003), ("root_span", 0.002)])
def test_two_agents_charge_a_request_once_per_root_span(encoding, unit, want):
    # 2 requests. Agent A sees request 1 (its root and its client call); agent B sees request
    # 1's server and SQL spans and all of request 2. Per trace: A 1 + B 2 distinct traces =
    # 3 x 0.001 = 0.003 g (request 1 charged twice). Per root span: A 1 + B 1 = 0.002 g.
    decode = decode_protobuf if encoding == "protobuf" else (lambda d: decode_json(_as_otlp_json(d)))
    ctx = ScoringContext.from_config(parse_green(green(unit)), now_ns=T0)
    reports = []
    for agent, data in zip(("host-a", "host-b"), _sdk_requests(), strict=True):
        batch = decode(data)
        assert not batch.counters  # the SDK sets valid parent ids
        reports.append(build_report(score_batch(batch, ctx), ctx, T0, T0 + MINUTE, agent_id=agent))
    a, b = reports
    assert (a.window.spans, a.window.traces, a.window.root_spans) == (2, 1, 1)
    assert (b.window.spans, b.window.traces, b.window.root_spans) == (4, 2, 1)
    total = sum(r.green_summary.co2.embodied_gco2 for r in reports)
    assert total == pytest.approx(want, rel=1e-12)
    assert all(r.green_summary.co2.embodied_gco2 == recomputed_m(r) for r in reports)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=12),  # children per request
    places=st.integers(1, 4),  # windows x agents the spans are spread over
    seed=st.integers(0, 2**32 - 1),
)
def test_per_root_span_charges_each_request_once_wherever_its_spans_go(h, shape, places, seed):
    # Each request is a root span plus its children, each span landing in one of `places`
    # (window, agent) buckets at random. Summed over the buckets, M per root span is exactly
    # requests x 0.001; M per trace is (distinct (bucket, request) pairs) x 0.001.
    rng = random.Random(seed)
    buckets: list[list[dict]] = [[] for _ in range(places)]
    for trace, children in enumerate(shape):
        for i in range(children + 1):
            buckets[rng.randrange(places)].append({"trace": trace, "root": i == 0})
    pairs = sum(len({s["trace"] for s in bucket}) for bucket in buckets)
    for unit, count in (("root_span", len(shape)), ("trace", pairs)):
        reports = [h.report(bucket, green(unit)) for bucket in buckets]
        assert sum(r.window.root_spans for r in reports) == len(shape)
        assert sum(r.green_summary.co2.embodied_gco2 for r in reports) == pytest.approx(
            count * PER_REQUEST, rel=1e-12
        )


def test_root_spans_merge_by_addition_and_survive_the_write_ahead_log(h):
    ctx = h.context(green("root_span"))
    a = score_batch(h.build_batch([{"trace": 1, "root": True}, {"trace": 1}]), ctx)
    b = score_batch(h.build_batch([{"trace": 2, "root": True}, {"trace": 3, "root": True}]), ctx)
    assert (a.root_spans, b.root_spans, a.merge(b).root_spans) == (1, 2, 3)
    assert WindowPartial.from_bytes(a.merge(b).to_bytes()).root_spans == 3
    # a log written before root spans were counted has none (and such a window was per trace)
    doc = orjson.loads(a.to_bytes())
    del doc["root_spans"]
    assert WindowPartial.from_bytes(orjson.dumps(doc)).root_spans == 0
