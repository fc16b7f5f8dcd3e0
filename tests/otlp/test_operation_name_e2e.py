"""``db.operation.name`` end to end (issue 11, item 10): the OpenTelemetry SDK's OTLP exporters
(gRPC and HTTP) send database spans that carry an operation name and no query text, as Redis
and MongoDB instrumentations do, to a real agent process; the archived energy uses the
operation's weight (UPDATE 1.5, SELECT 0.5), not the "other" weight 1.0."""

from __future__ import annotations

import signal

import pytest
from agent_process import AgentProcess
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

CONFIG = """
[green]
default_region = "eu-west-3"
use_hourly_profiles = false
embodied_carbon_per_request_gco2 = 0.0
"""


def _send(exporter, service: str, operation: str, count: int) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("carbonspan-test")
    for _ in range(count):
        with tracer.start_as_current_span(operation, kind=SpanKind.CLIENT) as span:
            span.set_attributes({"db.system.name": "redis", "db.operation.name": operation})
    provider.shutdown()


def test_operation_name_sets_the_weight_in_a_real_agent(tmp_path):
    agent = AgentProcess(tmp_path / "archives", ["--window-seconds", "60"], {}, CONFIG)
    try:
        agent.wait_ready()
        _send(GrpcExporter(endpoint=agent.grpc_target, insecure=True), "cache", "UPDATE", 2)
        _send(HttpExporter(endpoint=f"{agent.http_url}/v1/traces"), "cache", "UPDATE", 2)
        _send(HttpExporter(endpoint=f"{agent.http_url}/v1/traces"), "reader", "SELECT", 2)
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        if agent.proc.poll() is None:
            agent.kill9()
    windows = [rec["report"] for rec in agent.records()]
    energy: dict[str, float] = {}
    carbon: dict[str, float] = {}
    for w in windows:
        for name, kwh in w["green_summary"]["per_service_energy_kwh"].items():
            energy[name] = energy.get(name, 0.0) + kwh
        for name, kg in w["green_summary"]["per_service_carbon_kgco2eq"].items():
            carbon[name] = carbon.get(name, 0.0) + kg
    # 4 UPDATEs x 1e-7 kWh x 1.5 = 6e-7 kWh (1.0 per op, 4e-7, before db.operation.name was read)
    assert energy["cache"] == pytest.approx(6e-7, rel=1e-9)
    # 2 SELECTs x 1e-7 x 0.5 = 1e-7 kWh
    assert energy["reader"] == pytest.approx(1e-7, rel=1e-9)
    # carbon: 6e-7 kWh x 41.5 g/kWh (Ember 2024, France) x PUE 1.15 = 2.8635e-5 g = 2.8635e-8 kg
    assert carbon["cache"] == pytest.approx(2.8635e-8, rel=1e-9)
