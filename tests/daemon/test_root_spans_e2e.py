"""Root spans end to end: the OpenTelemetry SDK's OTLP exporters (gRPC and HTTP) into a real
agent with ``[green] embodied_per = "root_span"``; the archive lines carry ``window.root_spans``
and charge embodied carbon per root span (the SDK sets parent span ids as the spec says)."""

from __future__ import annotations

import signal

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

CONFIG = """
[green]
embodied_per = "root_span"
embodied_carbon_per_request_gco2 = 0.5
"""


def test_root_spans_reach_the_archive_line(start_agent):
    agent = start_agent("--window-seconds", "60", config=CONFIG)
    for exporter in (GrpcExporter(endpoint=agent.grpc_target, insecure=True),
                     HttpExporter(endpoint=f"{agent.http_url}/v1/traces")):  # fmt: skip
        provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("carbonspan-test")
        for _ in range(3):  # 3 requests of 3 spans: one root each
            with tracer.start_as_current_span("GET /cart", kind=SpanKind.SERVER):
                with tracer.start_as_current_span("SELECT", kind=SpanKind.CLIENT) as db:
                    db.set_attributes({"db.system": "postgresql", "db.statement": "SELECT 1"})
                with tracer.start_as_current_span("render", kind=SpanKind.INTERNAL):
                    pass
        provider.shutdown()
    assert agent.stop(signal.SIGTERM) == 0
    windows = [rec["report"] for rec in agent.records()]
    assert sum(w["window"]["spans"] for w in windows) == 18
    assert sum(w["window"]["root_spans"] for w in windows) == 6
    # 6 root spans x 0.5 g, recorded with its unit so that it can be recomputed from the line
    assert sum(w["green_summary"]["co2"]["embodied_gco2"] for w in windows) == 3.0
    assert all(w["methodology"]["embodied_per"] == "root_span" for w in windows)
