"""Jaeger JSON and Zipkin v2 JSON score exactly as the same spans sent as OTLP.

- Zipkin: real spans made with the OpenTelemetry SDK, exported once by the SDK's own Zipkin
  JSON exporter to a loopback collector (``POST /api/v2/spans``: the body is saved as the
  user's file) and once as OTLP protobuf; ``carbonspan score`` of each must agree.
- Jaeger: a query-API answer (``GET /api/traces``, tests/otlp/data/jaeger-query-api.json,
  typed tags, 64-bit trace id without leading zeros, OpenTracing ``db.type``) against the
  OTLP/JSON document of the same spans written here by hand; the UI's download shapes (one
  trace, a list of traces) give the same report.
- Bad input: Zipkin v1, a JSON list of something else, and a negative time are refused with a
  message naming the file and what was found.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
T0 = 1773151200_000_000_000  # 2026-03-10T14:00:00Z in ns

#: What must agree between two reports of the same spans (all of the figures).
FIGURES = ("window", "green_summary", "per_endpoint_io_ops", "counters")


def score(*files: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "carbonspan", "score", *map(str, files)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def figures(report: dict) -> dict:
    return {key: report[key] for key in FIGURES}


# --- Zipkin, through the OpenTelemetry SDK's own exporter --------------------------------------


class _Collector(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers["Content-Length"])
        assert self.path == "/api/v2/spans"
        _Collector.bodies.append(self.rfile.read(length))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _make_spans(provider) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    tracer = provider.get_tracer("shop")
    region = {"cloud.region": "eu-west-3"}  # Zipkin carries no resource attributes but the name
    root = tracer.start_span("GET /cart", kind=SpanKind.SERVER, attributes=region, start_time=T0)
    with trace.use_span(root, end_on_exit=False):
        with tracer.start_as_current_span(
            "SELECT cart", kind=SpanKind.CLIENT, start_time=T0 + 1_000_000,
            attributes={**region, "db.system": "postgresql",
                        "db.statement": "SELECT * FROM cart WHERE id = $1"},
        ) as span:
            span.end(end_time=T0 + 3_000_000)
        with tracer.start_as_current_span(
            "UPDATE cart", kind=SpanKind.CLIENT, start_time=T0 + 4_000_000,
            attributes={**region, "db.system": "postgresql",
                        "db.statement": "UPDATE cart SET n = n + 1"},
        ) as span:
            span.end(end_time=T0 + 6_000_000)
        with tracer.start_as_current_span(
            "GET", kind=SpanKind.CLIENT, start_time=T0 + 7_000_000,
            attributes={**region, "http.request.method": "GET",
                        "url.full": "http://pricing:8080/price", "http.response.body.size": 50_000},
        ) as span:
            span.end(end_time=T0 + 9_000_000)
        with tracer.start_as_current_span(
            "cart publish", kind=SpanKind.PRODUCER, start_time=T0 + 10_000_000,
            attributes={**region, "messaging.system": "kafka"},
        ) as span:
            span.end(end_time=T0 + 11_000_000)
    root.end(end_time=T0 + 12_000_000)  # whole microseconds: Zipkin's resolution


def test_zipkin_v2_from_the_sdk_exporter_scores_as_the_same_spans_over_otlp(tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.exporter.zipkin.json import ZipkinExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Collector.bodies = []
    try:
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "cart"}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/api/v2/spans"
        provider.add_span_processor(SimpleSpanProcessor(ZipkinExporter(endpoint=endpoint, timeout=5)))
        _make_spans(provider)
        provider.shutdown()
    finally:
        server.shutdown()
        server.server_close()
    spans = [span for body in _Collector.bodies for span in json.loads(body)]
    assert len(spans) == 5 and spans[0]["localEndpoint"]["serviceName"] == "cart"
    zipkin = tmp_path / "zipkin-export.json"
    zipkin.write_text(json.dumps(spans))
    otlp = tmp_path / "same-spans.pb"
    otlp.write_bytes(encode_spans(memory.get_finished_spans()).SerializeToString())

    from_zipkin, from_otlp = score(zipkin), score(otlp)
    assert figures(from_zipkin) == figures(from_otlp)
    gs = from_zipkin["green_summary"]
    # 0.5 (SELECT) + 1.5 (UPDATE) + 1.2 (HTTP, 50 KB response) + 1.0 (messaging) weighted ops
    assert from_zipkin["window"] == {**from_zipkin["window"], "spans": 5, "io_ops": 4,
                                     "traces": 1, "root_spans": 1}
    assert gs["per_service_region"] == {"cart": "eu-west-3"}
    assert gs["per_service_energy_kwh"]["cart"] == pytest.approx(4.2e-7)
    # a trace file of Zipkin's "GET /api/v2/traces" shape: a list of traces (span lists)
    traces = tmp_path / "zipkin-traces.json"
    traces.write_text(json.dumps([spans[:2], spans[2:]]))
    assert figures(score(traces)) == figures(from_otlp)


# --- Jaeger --------------------------------------------------------------------------------------


def _attr(key: str, value: object) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(name: str, span_id: str, parent: str | None, kind: int, start_us: int, dur_us: int,
          **attrs: object) -> dict:
    span = {
        "traceId": "00000000000000007c9a1e2b3d4f5a60", "spanId": span_id, "name": name,
        "kind": kind, "startTimeUnixNano": str(start_us * 1000),
        "endTimeUnixNano": str((start_us + dur_us) * 1000),
        "attributes": [_attr(k.replace("_", "."), v) for k, v in attrs.items()],
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def _jaeger_as_otlp() -> dict:
    """The OTLP/JSON of the spans in jaeger-query-api.json, written out by hand."""
    t = 1773151200000000
    frontend = [
        _span("GET /checkout", "1a2b3c4d5e6f7081", None, 2, t, 48000),
        _span("POST", "2b3c4d5e6f708192", "1a2b3c4d5e6f7081", 3, t + 2000, 30000,
              url_full="http://orders:8080/orders", **{"http.response.body.size": 20480}),
    ]
    orders = [
        _span("POST /orders", "3c4d5e6f708192a3", "2b3c4d5e6f708192", 2, t + 4000, 25000),
        _span("INSERT orders", "4d5e6f708192a3b4", "3c4d5e6f708192a3", 3, t + 5000, 4000,
              db_system="postgresql", db_statement="INSERT INTO orders VALUES ($1, $2)"),
        _span("SELECT orders", "5e6f708192a3b4c5", "3c4d5e6f708192a3", 3, t + 10000, 2000,
              db_system="postgresql", db_statement="SELECT id FROM orders WHERE id = $1"),
        _span("orders publish", "6f708192a3b4c5d6", "3c4d5e6f708192a3", 4, t + 20000, 1000, messaging_system="kafka"),
    ]

    def resource(name: str, region: str) -> dict:
        return {"attributes": [_attr("service.name", name), _attr("cloud.provider", "aws"),
                               _attr("cloud.region", region)]}

    return {"resourceSpans": [
        {"resource": resource("frontend", "eu-west-3"), "scopeSpans": [{"spans": frontend}]},
        {"resource": resource("orders", "eu-central-1"), "scopeSpans": [{"spans": orders}]},
    ]}


def test_jaeger_query_api_and_ui_exports_score_as_the_same_spans_over_otlp(tmp_path: Path) -> None:
    otlp = tmp_path / "same-spans.json"
    otlp.write_text(json.dumps(_jaeger_as_otlp()))
    expected = figures(score(otlp))
    api = DATA / "jaeger-query-api.json"
    from_api = score(api)
    assert figures(from_api) == expected
    gs = from_api["green_summary"]
    assert set(gs["per_service_energy_kwh"]) == {"frontend", "orders"}
    # frontend: one outgoing HTTP call, 20 KiB response (1.2); orders: INSERT (1.5, from the
    # OpenTracing db.type), SELECT (0.5), a Kafka produce (1.0)
    assert gs["per_service_energy_kwh"]["frontend"] == pytest.approx(1.2e-7)
    assert gs["per_service_energy_kwh"]["orders"] == pytest.approx(3.0e-7)
    assert from_api["window"]["root_spans"] == 1 and from_api["window"]["traces"] == 1

    trace = json.loads(api.read_text())["data"][0]
    one, many = tmp_path / "one-trace.json", tmp_path / "search-results.json"
    one.write_text(json.dumps(trace))
    many.write_text(json.dumps([trace]))
    assert figures(score(one)) == expected and figures(score(many)) == expected


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([{"traceId": "a1", "id": "b2", "annotations": [], "binaryAnnotations": []}],
         "Zipkin v1 JSON (annotations/binaryAnnotations) is not supported"),
        ([1, 2, 3], "a JSON list that holds no Zipkin v2 spans"),
        ([{"traceId": "a1", "id": "b2", "timestamp": -5, "localEndpoint": {"serviceName": "x"}}],
         "Zipkin span 0: timestamp: -5 is negative"),
        ({"data": [{"spans": 3, "processes": {}}]}, "Jaeger trace 0: expected 'spans' (list)"),
    ],
)
def test_unreadable_foreign_documents_are_refused_naming_the_file(tmp_path: Path, content: object,
                                                                  message: str) -> None:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(content))
    proc = subprocess.run(
        [sys.executable, "-m", "carbonspan", "score", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert str(path) in proc.stderr and message in proc.stderr, proc.stderr


def test_a_zipkin_span_without_timestamp_is_counted_not_refusing_the_file(tmp_path: Path) -> None:
    """Zipkin v2 leaves ``timestamp`` and ``duration`` out of an incomplete span (zipkin2-api:
    "possibly absent if incomplete"); the file was refused for it. The span now counts as
    timestamp_absurd, as the same OTLP span with start 0 does, and the others score as before."""
    def span(n: int, **extra: object) -> dict:
        return {"traceId": "5b8aa5a2d2c872e8321cf37308d69df2", "id": f"{n + 1:016x}", "kind": "CLIENT",
                "name": "q", "localEndpoint": {"serviceName": "cart"},
                "tags": {"db.system": "postgresql", "db.statement": "SELECT 1",
                         "cloud.region": "eu-west-3"}, **extra}
    timed = [span(0, timestamp=1773151200000000, duration=1000)]
    whole, partial = tmp_path / "timed.json", tmp_path / "with-incomplete.json"
    whole.write_text(json.dumps(timed))
    partial.write_text(json.dumps(timed + [span(1)]))
    proc = subprocess.run([sys.executable, "-m", "carbonspan", "score", str(partial)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "timestamp_absurd 1" in proc.stderr
    got = json.loads(proc.stdout)
    assert got["counters"] == {"timestamp_absurd": 1} and got["window"]["spans"] == 2
    assert got["green_summary"]["per_service_energy_kwh"]["cart"] == pytest.approx(
        2 * score(whole)["green_summary"]["per_service_energy_kwh"]["cart"])


@pytest.mark.parametrize(("name", "content"), [
    ("spans.csv", "trace_id,span_id,service\n5b8aa5a2,0001,cart\n"),
    ("export.txt", "2026-12-01T10:00:00Z GET /cart 200 12ms\n"),
    ("traces.pb", "not protobuf at all\n"),
])
def test_a_text_file_that_is_no_trace_format_is_refused_as_text(tmp_path: Path, name: str,
                                                                  content: str) -> None:
    """A CSV or a log handed to score was refused with the protobuf parser's words
    ("unsupported group wire type"); it is named as text, with the formats that are read."""
    path = tmp_path / name
    path.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "carbonspan", "score", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"{path}: not a trace file carbonspan reads: it is text" in proc.stderr, proc.stderr
    assert "wire type" not in proc.stderr and "Zipkin v2" in proc.stderr
