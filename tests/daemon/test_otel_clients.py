"""The OpenTelemetry SDK's own OTLP exporters (gRPC and HTTP, plain and gzip) against a real agent.

One agent for the module, closing windows every second. Each test sends a workload from its own
services and waits until the archive holds exactly what it sent for them: per-service request
counts, first-seen regions, I/O energy present. The last test stops the agent cleanly and checks
the whole archive: total span count = spans sent by every test, chain intact.
"""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import urllib.request
from collections import Counter

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from schema.chain import verify_chain

SENT: Counter[str] = Counter()  # spans sent per service by every test of this module


@pytest.fixture(scope="module")
def agent(start_agent):
    return start_agent("--window-seconds", "1")


def run_workload(make_exporter, services: dict[str, str], requests: int, batch: bool = True) -> dict:
    """Each service handles ``requests`` SERVER spans, each with a SQL and an HTTP client child.

    Returns what the archive must show per service: requests and region.
    """
    expect = {}
    for svc, region in services.items():
        provider = TracerProvider(resource=Resource.create({"service.name": svc, "cloud.region": region}))
        exporter = make_exporter()  # provider.shutdown() shuts its exporter down too
        proc = BatchSpanProcessor(exporter, max_export_batch_size=64) if batch else SimpleSpanProcessor(exporter)
        provider.add_span_processor(proc)
        tracer = provider.get_tracer("carbonspan-test")
        for i in range(requests):
            with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
                with tracer.start_as_current_span("SELECT orders", kind=SpanKind.CLIENT) as s:
                    s.set_attribute("db.system", "postgresql")
                    s.set_attribute("db.statement", f"SELECT * FROM orders WHERE id = {i}")
                with tracer.start_as_current_span("POST", kind=SpanKind.CLIENT) as s:
                    s.set_attribute("http.request.method", "POST")
                    s.set_attribute("url.full", "http://payments.internal/charge")
                    s.set_attribute("http.response.body.size", 2048)
        assert provider.force_flush(10_000)
        provider.shutdown()
        SENT[svc] += requests * 3
        expect[svc] = {"requests": requests, "region": region.lower(), "spans": requests * 3}
    return expect


def archived_per_service(agent) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for rec in agent.records():
        gs = rec["report"]["green_summary"]
        for svc, n in gs.get("per_service_requests", {}).items():
            row = out.setdefault(svc, {"requests": 0, "region": gs["per_service_region"].get(svc),
                                       "energy": 0.0, "regions": set()})
            row["requests"] += n
        for svc, e in gs.get("per_service_energy_kwh", {}).items():
            out.setdefault(svc, {"requests": 0, "region": gs["per_service_region"].get(svc),
                                 "energy": 0.0, "regions": set()})["energy"] += e
        seen = set(gs.get("per_service_requests", {})) | set(gs.get("per_service_energy_kwh", {}))
        for r in gs.get("regions", []):  # the window's true region split, seen by its services
            for svc in seen:
                out[svc]["regions"].add(r["region"])
    return out


def check_archive(agent, expect: dict) -> None:
    def arrived():
        got = archived_per_service(agent)
        return all(got.get(s, {}).get("requests") == e["requests"] for s, e in expect.items()) and got
    got = agent.wait_for(arrived, timeout=30, what=f"windows for {sorted(expect)}")
    for svc, e in expect.items():
        assert got[svc]["requests"] == e["requests"], svc
        assert got[svc]["region"] == e["region"], svc
        assert got[svc]["energy"] > 0, f"{svc}: SQL/HTTP client spans must carry I/O energy"
        assert e["region"] in got[svc]["regions"]


def test_grpc_exporter_several_services(agent) -> None:
    expect = run_workload(lambda: GrpcExporter(endpoint=agent.grpc_target, insecure=True), {"checkout": "eu-west-3", "cart": "us-east-1",
                                     "search": "eu-central-1"}, requests=20)
    check_archive(agent, expect)


def test_grpc_exporter_gzip(agent) -> None:
    expect = run_workload(lambda: GrpcExporter(endpoint=agent.grpc_target, insecure=True,
                                               compression=grpc.Compression.Gzip), {"gz-billing": "EU-WEST-3", "gz-auth": "pl"}, requests=15,
                          batch=False)
    check_archive(agent, expect)


def test_http_exporter_protobuf(agent) -> None:
    expect = run_workload(lambda: HttpExporter(endpoint=f"{agent.http_url}/v1/traces"), {"http-catalog": "us-east-1", "http-users": "eu-west-3"},
                          requests=12)
    check_archive(agent, expect)


def test_http_exporter_gzip(agent) -> None:
    expect = run_workload(lambda: HttpExporter(endpoint=f"{agent.http_url}/v1/traces",
                                               compression=HttpCompression.Gzip), {"httpgz-mail": "eu-central-1"}, requests=10, batch=False)
    check_archive(agent, expect)


def _json_request(service: str, region: str, n: int, hex_ids: bool = True) -> bytes:
    spans = []
    for i in range(n):
        tid = f"{i + 1:032x}" if hex_ids else "AAAAAAAAAAAAAAAAAAAAAQ=="
        spans.append({"traceId": tid, "spanId": f"{i + 1:016x}" if hex_ids else "AAAAAAAAAAE=",
                      "name": "GET /json", "kind": 2, "startTimeUnixNano": "1764496800000000000",
                      "endTimeUnixNano": "1764496800100000000"})
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": service}},
            {"key": "cloud.region", "value": {"stringValue": region}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}).encode()


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_http_json_hex_and_base64_answer_in_json(agent, encoding: str) -> None:
    expect = {}
    for svc, hex_ids in ((f"json-{encoding}-hex", True), (f"json-{encoding}-b64", False)):
        body = _json_request(svc, "us-east-1", 4, hex_ids)
        headers = {"Content-Type": "application/json"}
        if encoding == "gzip":
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=body, headers=headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "application/json"
            assert json.loads(resp.read()) == {}
        SENT[svc] += 4
        expect[svc] = {"requests": 4, "region": "us-east-1"}
    got = agent.wait_for(lambda: all(archived_per_service(agent).get(s, {}).get("requests") == 4
                               for s in expect) and archived_per_service(agent), what="json spans")
    assert all(got[s]["region"] == "us-east-1" for s in expect)


def test_metrics_match_the_archive(agent) -> None:
    """Every span sent so far is archived (previous tests waited for it): no window is pending."""
    records = agent.records()
    assert agent.metric("carbonspan_windows_written_total") == len(records)
    size = sum(p.stat().st_size for p in agent.dir.glob("windows-*.jsonl"))
    assert agent.metric("carbonspan_archive_bytes_total") == size
    assert agent.metric("carbonspan_spans_accepted_total") == sum(SENT.values())
    assert agent.metric("carbonspan_spans_received_total") == sum(SENT.values())  # none refused
    assert agent.metric("carbonspan_queue_depth") == 0  # nothing in flight between tests
    last = records[-1]["report"]["green_summary"]
    for svc, kwh in last["per_service_energy_kwh"].items():
        assert agent.metric("carbonspan_last_window_energy_kwh", service=svc) == pytest.approx(kwh)
        assert agent.metric("carbonspan_last_window_carbon_gco2", service=svc) == pytest.approx(
            last["per_service_carbon_kgco2eq"][svc] * 1000)
    assert agent.metric("carbonspan_open_window_spans") == 0
    # the cumulative counters hold every archived window (a handful of services: all labelled)
    summaries = [r["report"]["green_summary"] for r in records]
    for svc in {s for gs in summaries for s in gs["per_service_energy_kwh"]}:
        assert agent.metric("carbonspan_service_energy_kwh_total", service=svc) == pytest.approx(
            sum(gs["per_service_energy_kwh"].get(svc, 0.0) for gs in summaries), rel=1e-9)
        assert agent.metric("carbonspan_service_carbon_gco2_total", service=svc) == pytest.approx(
            sum(gs["per_service_carbon_kgco2eq"].get(svc, 0.0) for gs in summaries) * 1000, rel=1e-9)
    assert agent.metric("carbonspan_energy_kwh_total") == pytest.approx(
        sum(gs["energy_kwh"] for gs in summaries), rel=1e-9)
    assert agent.metric("carbonspan_carbon_gco2_total") == pytest.approx(
        sum(gs["co2"]["total"]["mid"] for gs in summaries), rel=1e-9)
    for row in summaries[-1]["regions"]:
        assert agent.metric("carbonspan_grid_intensity_gco2_per_kwh", region=row["region"]) == pytest.approx(
            row["grid_intensity_gco2_kwh"])


def test_clean_stop_archives_everything_and_chain_is_intact(agent) -> None:
    assert agent.stop(signal.SIGTERM) == 0
    records = agent.records()
    findings, _, count = verify_chain((str(i), r) for i, r in enumerate(records))
    assert findings == [] and count == len(records) > 0
    assert sum(r["report"]["window"]["spans"] for r in records) == sum(SENT.values())
    assert all(r["report"]["agent_id"] == "test-agent" for r in records)
    starts = [r["report"]["window"]["start"] for r in records]
    assert starts == sorted(starts)
    assert not list(agent.dir.glob("*.corrupt"))
    assert (agent.dir / "agent.wal").stat().st_size == 0  # everything archived, log truncated


def test_auditor_verifies_the_agents_archive(agent) -> None:
    """The aggregator's auditor (a separate reader of the same format) accepts what we wrote."""
    out = subprocess.run([sys.executable, "-m", "carbonspan", "verify", str(agent.root)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
