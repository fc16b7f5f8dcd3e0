"""Window figures a real agent must not lose or hide: the service cap and energy without carbon.

Spans are built as the SDK's ``ReadableSpan`` and sent with the SDK's own OTLP/gRPC exporter
(one export, many resources: what a Collector forwarding a whole cluster sends).
"""

from __future__ import annotations

import random

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from agent.carbon.partial import MAX_SERVICES, OTHER_SERVICE


def db_span(service: str, rng: random.Random, region: str | None = None) -> ReadableSpan:
    """One database CLIENT span of ``service`` (an I/O op: 1e-7 kWh x its weight)."""
    attrs = {"service.name": service} | ({"cloud.region": region} if region else {})
    ctx = SpanContext(rng.getrandbits(128) or 1, rng.getrandbits(64) or 1, is_remote=False,
                      trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return ReadableSpan(
        name="SELECT orders", context=ctx, parent=None, resource=Resource(attrs),
        kind=SpanKind.CLIENT, start_time=1_000, end_time=2_000,
        attributes={"db.system": "postgresql", "db.statement": "SELECT * FROM orders"},
    )


def export(agent, spans: list[ReadableSpan]) -> None:
    exporter = OTLPSpanExporter(endpoint=agent.grpc_target, insecure=True, timeout=10)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def test_services_past_the_cap_fold_into_other_with_their_energy_and_carbon(start_agent) -> None:
    agent = start_agent("--window-seconds", "60")  # one window, closed by SIGTERM
    rng = random.Random(5)
    extra = 9
    names = [f"pod-{i:05d}" for i in range(MAX_SERVICES - 1 + extra)]
    export(agent, [db_span(n, rng, "eu-west-3") for n in names])
    export(agent, [db_span(n, rng, "eu-west-3") for n in names[-3:]])  # folded again
    assert agent.stop() == 0
    (rec,) = agent.records()
    gs, counters = rec["report"]["green_summary"], rec["report"]["counters"]
    assert len(gs["per_service_energy_kwh"]) == MAX_SERVICES  # 4,095 named + "(other)"
    assert counters["service_overflow"] == extra + 3
    each = gs["per_service_energy_kwh"][names[0]]
    assert each > 0 and gs["per_service_carbon_kgco2eq"][names[0]] > 0
    # nothing lost: (other) holds the folded spans' energy and carbon, totals add up
    assert abs(gs["per_service_energy_kwh"][OTHER_SERVICE] - (extra + 3) * each) < 1e-15
    assert abs(gs["per_service_carbon_kgco2eq"][OTHER_SERVICE]
               - (extra + 3) * gs["per_service_carbon_kgco2eq"][names[0]]) < 1e-15
    assert abs(sum(gs["per_service_energy_kwh"].values()) - gs["energy_kwh"]) < 1e-12
    assert rec["report"]["window"]["spans"] == len(names) + 3


def test_unknown_regions_warn_at_start_and_lines_record_energy_without_carbon(start_agent) -> None:
    config = """
[green]
default_region = "mars-north-1"
[green.service_regions]
billing = "eu-west-3"
ledger = "venus-1"
[[green.hosts]]
name = "pg-main"
kind = "database"
watts = 100.0
"""
    agent = start_agent("--window-seconds", "60", config=config)
    rng = random.Random(6)
    export(agent, [db_span("checkout", rng), db_span("billing", rng), db_span("ledger", rng),
                   db_span("search", rng, "eu-west-3")])
    assert agent.stop() == 0
    err = "".join(agent.stderr_text())
    assert "[green] default_region: 'mars-north-1' is not in the intensity table" in err
    assert "[green.service_regions] ledger: 'venus-1' is not in the intensity table" in err
    assert "[[green.hosts]] pg-main region: no region" in err
    assert "billing" not in err  # a region of the table gets no warning
    (rec,) = agent.records()
    gs = rec["report"]["green_summary"]
    status = {r["region"]: r["status"] for r in gs["regions"]}
    assert status == {"mars-north-1": "out_of_table", "eu-west-3": "resolved",
                      "venus-1": "out_of_table"}
    (host,) = gs["hosts"]
    assert host["energy_kwh"] > 0 and host["co2_gco2"] == 0.0
    zero_g = gs["per_service_energy_kwh"]["checkout"] + gs["per_service_energy_kwh"]["ledger"]
    assert abs(gs["energy_without_carbon_kwh"] - (zero_g + host["energy_kwh"])) < 1e-15
    assert gs["energy_without_carbon_kwh"] < gs["energy_kwh"]
