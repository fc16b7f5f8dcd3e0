"""A measured power source through a real agent: Scaphandre -> kWh per I/O op -> the archive.

A loopback HTTP server serves a Scaphandre ``/metrics`` exposition (the format
``scaphandre prometheus`` writes: per-process power gauges in microwatts, labelled
``exe``/``cmdline``); ``[sources.scaphandre]`` maps ``exe="checkout"`` to the service
``checkout``. The OpenTelemetry SDK's gRPC exporter sends spans with SQL client children for
``checkout`` and for an unmapped ``cart``. The daemon feeds the I/O ops of every scored batch
to the sources' OpCounter; after two polls the source publishes checkout's kWh per op, and the
archived windows must then tag checkout's energy ``scaphandre_rapl`` (all of its I/O ops
measured) while cart keeps the I/O proxy.
"""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

EXPOSITION = b"""\
# HELP scaph_host_power_microwatts Power measurement on the whole host, in microwatts
# TYPE scaph_host_power_microwatts gauge
scaph_host_power_microwatts 30000000
# HELP scaph_process_power_consumption_microwatts Power consumption due to the process, measured on at the topology level, in microwatts
# TYPE scaph_process_power_consumption_microwatts gauge
scaph_process_power_consumption_microwatts{pid="1234",exe="checkout",cmdline="/usr/bin/checkout --port 8080"} 12000000
scaph_process_power_consumption_microwatts{pid="1",exe="systemd",cmdline="/sbin/init"} 100000
"""


@pytest.fixture(scope="module")
def scaphandre(loopback_http):
    def answer(path: str, _headers) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4", EXPOSITION
        return 404, "text/plain", b"not found\n"

    return loopback_http(answer) + "/metrics"


def _send(agent, service: str, requests: int) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "cloud.region": "eu-west-3"}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=agent.grpc_target, insecure=True, timeout=5)))
    tracer = provider.get_tracer("carbonspan-test")
    for i in range(requests):
        with tracer.start_as_current_span("GET /cart", kind=SpanKind.SERVER):
            with tracer.start_as_current_span("SELECT cart", kind=SpanKind.CLIENT) as s:
                s.set_attribute("db.system", "postgresql")
                s.set_attribute("db.statement", f"SELECT * FROM cart WHERE id = {i}")
    provider.shutdown()


def test_scaphandre_power_tags_the_mapped_service_in_the_archive(start_agent, scaphandre) -> None:
    agent = start_agent(
        "--window-seconds", "0.5",
        config=f'[green]\ndefault_region = "eu-west-3"\n'
               f'[[sources.scaphandre]]\nurl = "{scaphandre}"\ninterval_s = 0.3\n'
               f'[sources.scaphandre.services]\ncheckout = {{ exe = "^checkout$" }}\n',
    )

    def measured_window():
        _send(agent, "checkout", 5)  # keeps checkout's ops flowing between polls
        _send(agent, "cart", 2)
        for rec in agent.records():
            gs = rec["report"]["green_summary"]
            if gs["per_service_energy_model"].get("checkout") == "scaphandre_rapl" \
                    and gs["per_service_measured_ratio"].get("checkout") == 1.0:
                return gs
        return None

    gs = agent.wait_for(measured_window, timeout=30, what="a window with checkout measured")
    assert gs["per_service_energy_kwh"]["checkout"] > 0
    assert agent.metric("carbonspan_source_up", source="scaphandre") == 1
    assert agent.stop() == 0
    # each span is its own export (SimpleSpanProcessor), so a window can hold cart's server
    # span without its database span: no I/O, no energy, and then no model tag (""), which is
    # what the line says for a service it charged nothing; every window that charged cart
    # energy names the I/O proxy
    lines = [rec["report"]["green_summary"] for rec in agent.records()]
    cart = {gs["per_service_energy_model"]["cart"] for gs in lines
            if gs["per_service_energy_kwh"].get("cart", 0.0) > 0}
    assert cart and all(tag.startswith("io_proxy") for tag in cart), cart
    assert all(gs["per_service_energy_model"]["cart"] == "" for gs in lines
               if gs["per_service_energy_kwh"].get("cart") == 0.0)
