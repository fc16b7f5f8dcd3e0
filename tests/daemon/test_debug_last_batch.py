"""``GET /debug/last-batch``: the explain view of the last acknowledged batch, when enabled.

Real agent processes take spans from the OpenTelemetry SDK's OTLP exporters (HTTP protobuf
and gRPC); the page must list exactly the rows ``carbonspan score --explain --json`` gives for
the same spans (encoded by the SDK's own encoder into a file), as JSON or as a table, capped
past 1,000 spans and saying so, behind the ingest token when auth is on, and 404 saying how
to enable it when it is off (the default).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

GREEN = '[green]\nuse_hourly_profiles = false\ndefault_region = "eu-west-3"\n'  # figures independent of the hour


def _provider(service: str, region: str | None = "eu-west-3"):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    attrs = {"service.name": service, **({"cloud.region": region} if region else {})}
    provider = TracerProvider(resource=Resource.create(attrs))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _spans(provider) -> None:
    from opentelemetry.trace import SpanKind

    tracer = provider.get_tracer("debug-last-batch-test")
    with tracer.start_as_current_span("GET /cart", kind=SpanKind.SERVER):
        with tracer.start_as_current_span("SELECT", kind=SpanKind.CLIENT, attributes={
                "db.system": "postgresql", "db.statement": "SELECT * FROM carts WHERE id = 7"}):
            pass
        with tracer.start_as_current_span("publish", kind=SpanKind.PRODUCER, attributes={
                "messaging.system": "kafka", "cloud.region": "eu-central-1"}):
            pass


def _http_exporter(agent, token: str | None = None):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    headers = {"authorization": f"Bearer {token}"} if token else None
    return OTLPSpanExporter(endpoint=f"{agent.http_url}/v1/traces", timeout=10, headers=headers)


def _get(agent, query: str = "", token: str | None = None, accept: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if accept:
        headers["Accept"] = accept
    req = urllib.request.Request(f"{agent.http_url}/debug/last-batch{query}", headers=headers)
    return urllib.request.urlopen(req, timeout=30)


def _explained_by_score(tmp_path: Path, spans, config: Path) -> dict:
    """The same spans as the SDK's encoder writes them, through ``carbonspan score --explain``."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    pb = tmp_path / f"spans-{len(list(tmp_path.iterdir()))}.pb"
    pb.write_bytes(encode_spans(spans).SerializeToString())
    proc = subprocess.run([sys.executable, "-m", "carbonspan", "score", "--explain", "--json",
                           "--config", str(config), str(pb)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def green(tmp_path: Path) -> Path:
    path = tmp_path / "green.toml"
    path.write_text(GREEN)
    return path


def test_the_last_http_and_grpc_batches_are_explained_as_score_explains_them(start_agent, tmp_path, green):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )
    from opentelemetry.sdk.trace.export import SpanExportResult

    agent = start_agent(env={"CARBONSPAN_DEBUG_LAST_BATCH": "1"}, config=GREEN)
    before = json.loads(_get(agent).read())
    assert before["batch"] == {"acknowledged": False, "note": "no batch acknowledged since the agent started"}
    assert before["spans"] == [] and before["totals"]["spans"] == 0

    provider, memory = _provider("cart")
    _spans(provider)
    spans = memory.get_finished_spans()
    assert _http_exporter(agent).export(spans) is SpanExportResult.SUCCESS  # one batch of 3 spans
    with _get(agent) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        assert resp.headers["Cache-Control"] == "no-store"
        doc = json.loads(resp.read())
    batch = doc["batch"]
    assert (batch["acknowledged"], batch["protocol"], batch["format"], batch["spans"], batch["rows"],
            batch["capped"], batch["max_rows"]) == (True, "http", "protobuf", 3, 3, False, 1000)
    expected = _explained_by_score(tmp_path, spans, green)
    assert doc["spans"] == expected["spans"] and doc["totals"] == expected["totals"]
    rows = {r["span"]: r for r in doc["spans"]}
    assert rows["SELECT"]["io_class"] == "select" and rows["SELECT"]["kind"] == "client"
    assert any(d.startswith("db.statement=SELECT") for d in rows["SELECT"]["decided_by"])
    assert (rows["SELECT"]["region"], rows["SELECT"]["region_from"]) == ("eu-west-3", "resource")
    assert (rows["publish"]["region"], rows["publish"]["region_from"]) == ("eu-central-1", "span")
    assert rows["SELECT"]["energy_kwh"] > 0 and rows["SELECT"]["carbon_gco2"] > 0
    assert rows["GET /cart"]["io_class"] == "none"

    # the same page as a table: ?format=table, or Accept: text/plain
    for query, accept in (("?format=table", None), ("", "text/plain")):
        with _get(agent, query, accept=accept) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = resp.read().decode()
        assert "what carbonspan extracted from each span" in text
        assert "last batch acknowledged" in text and "over http (protobuf" in text
        assert "SELECT" in text and "eu-central-1 (span)" in text and "3 spans, 2 I/O" in text
    with pytest.raises(urllib.error.HTTPError) as bad:
        _get(agent, "?format=xml")
    assert bad.value.code == 400 and "format=table" in json.loads(bad.value.read())["message"]

    # the next acknowledged batch replaces it: over gRPC, another service, no resource region
    provider, memory = _provider("search", region=None)
    _spans(provider)
    grpc_spans = memory.get_finished_spans()
    assert GrpcExporter(endpoint=agent.grpc_target, insecure=True, timeout=10).export(
        grpc_spans) is SpanExportResult.SUCCESS
    doc = json.loads(_get(agent).read())
    assert (doc["batch"]["protocol"], doc["batch"]["format"]) == ("grpc", "protobuf")
    assert doc["spans"] == _explained_by_score(tmp_path, grpc_spans, green)["spans"]
    assert {r["service"] for r in doc["spans"]} == {"search"}
    assert {r["span"]: r["region_from"] for r in doc["spans"]}["SELECT"] == "default"


def test_a_batch_past_the_row_cap_is_listed_capped_and_says_so(start_agent):
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.trace import SpanKind

    agent = start_agent(env={"CARBONSPAN_DEBUG_LAST_BATCH": "true"})
    provider, memory = _provider("bulk")
    tracer = provider.get_tracer("cap")
    for i in range(1005):
        with tracer.start_as_current_span(f"q{i}", kind=SpanKind.CLIENT, attributes={"db.system": "redis"}):
            pass
    assert _http_exporter(agent).export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    doc = json.loads(_get(agent).read())
    assert (doc["batch"]["spans"], doc["batch"]["rows"], doc["batch"]["capped"]) == (1005, 1000, True)
    assert len(doc["spans"]) == 1000 and doc["totals"]["spans"] == 1000
    assert [r["span"] for r in doc["spans"]] == [f"q{i}" for i in range(1000)]
    text = _get(agent, "?format=table").read().decode()
    assert "CAPPED: only the first 1,000 of 1,005 spans are listed" in text


def test_with_auth_on_it_needs_the_ingest_token(start_agent, tmp_path):
    from opentelemetry.sdk.trace.export import SpanExportResult

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    agent = start_agent(config=f'[agent]\ndebug_last_batch = true\n[agent.auth]\ntoken_file = "{token}"\n')
    provider, memory = _provider("cart")
    _spans(provider)
    assert _http_exporter(agent, "s3cret").export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    for bad in (None, "wrong"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(agent, token=bad)
        assert refused.value.code == 401 and "Bearer" in refused.value.headers["WWW-Authenticate"]
        assert b"SELECT" not in refused.value.read()
    doc = json.loads(_get(agent, token="s3cret").read())
    assert doc["batch"]["spans"] == 3 and {r["span"] for r in doc["spans"]} == {"GET /cart", "SELECT", "publish"}


def test_off_by_default_it_is_404_saying_how_to_enable_it(start_agent, tmp_path):
    from opentelemetry.sdk.trace.export import SpanExportResult

    agent = start_agent()
    provider, memory = _provider("cart")
    _spans(provider)
    assert _http_exporter(agent).export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    with pytest.raises(urllib.error.HTTPError) as off:
        _get(agent)
    assert off.value.code == 404
    message = json.loads(off.value.read())["message"]
    assert "debug_last_batch = true" in message and "CARBONSPAN_DEBUG_LAST_BATCH" in message
    # off and auth on: the token is asked for first, then the same 404
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    locked = start_agent(config=f'[agent.auth]\ntoken_file = "{token}"\n')
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(locked)
    assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as off:
        _get(locked, token="t0ken")
    assert off.value.code == 404
