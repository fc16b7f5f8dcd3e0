"""pool/1 grades from the energy side of archive lines only (issue 13, item 6).

Real parts: spans made by the OpenTelemetry SDK and encoded by its own OTLP encoder, decoded,
scored and windowed by the agent's own code under live Electricity Maps intensity and a
Scaphandre and a cloud-SPECpower rate, written by the agent's ArchiveWriter, then graded.
"""

from __future__ import annotations

import time

import pytest

from admission.claims import Claim
from admission.grades import estimate_service, grade_of_window

SERVICES = {"checkout": 4, "orders": 2, "billing": 3}  # I/O spans per service


def _payload() -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    spans = []
    for service, n in SERVICES.items():  # one provider (and resource) per service
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create(
            {"service.name": service, "cloud.region": "eu-west-3"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("tests.admission")
        for _ in range(n):
            with tracer.start_as_current_span("SELECT orders", kind=SpanKind.CLIENT) as span:
                span.set_attributes({"db.system": "postgresql", "db.statement": "SELECT 1"})
        spans.extend(exporter.get_finished_spans())
        provider.shutdown()
    return encode_spans(spans).SerializeToString()


def _archive(root, live: bool):
    """One window line as the agent writes it; returns its green summary."""
    from agent.archive import ArchiveWriter
    from agent.carbon.signals import LiveIntensity, MeasuredRate, Signals
    from agent.config import GreenConfig
    from agent.otlp import decode_protobuf
    from agent.score import ScoringContext, score_batch
    from agent.window import build_report

    now = time.time()
    signals = Signals(
        measured={"checkout": MeasuredRate(3e-7, "scaphandre_rapl", now - 5, 30.0),
                  "billing": MeasuredRate(2e-7, "cloud_specpower", now - 5, 30.0)},
        live_intensity={"eu-west-3": LiveIntensity(20.0, "electricity_maps_api", now - 5)} if live else {},
    )
    ctx = ScoringContext.from_config(GreenConfig(), signals=signals, now_ns=int(now * 1e9))
    end = int(now * 1e9)
    report = build_report(score_batch(decode_protobuf(_payload()), ctx), ctx, end - 60 * 10**9, end)
    writer = ArchiveWriter(root / "agent-1")
    writer.open()
    try:
        writer.append(report.model_dump(mode="json"), ts="2026-11-30T10:00:00Z")
    finally:
        writer.close()
    return report.green_summary


def test_live_intensity_does_not_turn_measured_energy_into_a_guess(tmp_path):
    gs = _archive(tmp_path, live=True)
    # the line as issue 13 found it: every tag raised to the live-intensity source
    assert set(gs.per_service_energy_model.values()) == {"electricity_maps_api"}
    assert gs.per_service_measured_ratio == {"checkout": 1.0, "orders": 0.0, "billing": 0.0}
    grades = {s: estimate_service(tmp_path, s).grade for s in SERVICES}
    # Scaphandre-measured: measured; the proxy and SPECpower (a model): modelled; none a guess
    assert grades == {"checkout": "measured", "orders": "modelled", "billing": "modelled"}


def test_cloud_specpower_is_modelled_everywhere(tmp_path):
    gs = _archive(tmp_path, live=False)
    assert gs.per_service_energy_model["billing"] == "cloud_specpower"
    # the agent does not count a SPECpower span as measured, and pool/1 grades it modelled
    assert gs.per_service_measured_ratio["billing"] == 0.0
    assert gs.per_service_energy_model["checkout"] == "scaphandre_rapl"
    assert gs.per_service_measured_ratio["checkout"] == 1.0
    est = estimate_service(tmp_path, "billing")
    assert est.grade == "modelled" and est.measured_ratios == (0.0,)
    assert estimate_service(tmp_path, "checkout").grade == "measured"


def test_a_measured_service_under_live_intensity_may_borrow(tmp_path, engine):
    _archive(tmp_path, live=True)
    est = estimate_service(tmp_path, "checkout")
    eng = engine([("org", None, 10 * est.estimate_uj, 8, 1), ("team", "org", est.estimate_uj // 2, 4, 1)])
    v = eng.admit(Claim("c1", "team", 1, est.estimate_uj, est.grade))
    assert (v.decision, v.step) == ("admitted", "borrowing")  # not "borrowing on a guess"


@pytest.mark.parametrize("tag, ratio, grade", [
    ("electricity_maps_api", 1.0, "measured"),
    ("grid_operator_api", 1.0, "measured"),
    ("electricity_maps_api", 0.5, "modelled"),
    ("grid_operator_api", 0.0, "modelled"),
    ("electricity_maps_api", None, "modelled"),  # no ratio: the energy under it is unknown
    ("scaphandre_rapl", 1.0, "measured"),
    ("scaphandre_rapl", None, "measured"),  # a line from before the ratio was written
    ("kepler_ebpf", 0.75, "modelled"),  # a quarter of the spans fell back to the proxy
    ("cloud_specpower", 1.0, "modelled"),  # an older agent counted SPECpower as measured
    ("cloud_specpower", None, "modelled"),
    ("io_proxy_v3+cal", 0.0, "modelled"),
    ("mystery", 1.0, "estimator"),
    ("", 1.0, "estimator"),
])
def test_grade_of_window(tag, ratio, grade):
    assert grade_of_window(tag, ratio) == grade


def test_a_ratio_that_is_not_a_share_skips_the_line(tmp_path):
    path = tmp_path / "a" / "windows-0001.jsonl"
    path.parent.mkdir()
    line = (b'{"ts":"2026-11-30T10:0%d:00Z","report":{"green_summary":{"per_service_energy_kwh":'
            b'{"s":0.001},"per_service_energy_model":{"s":"electricity_maps_api"},'
            b'"per_service_measured_ratio":{"s":%s}}}}')
    path.write_bytes(b"\n".join(line % (i, v) for i, v in enumerate([b"1.0", b"1.5", b'"all"', b"-1"])))
    est = estimate_service(tmp_path, "s")
    assert (est.grade, est.windows, est.ignored) == ("measured", 1, 3)
