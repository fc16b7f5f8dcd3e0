"""``carbonspan score`` end to end: real OTLP JSON/NDJSON/protobuf files, a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format

CLI = Path(sys.executable).parent / "carbonspan"
T0 = 1_767_268_800_000_000_000  # 2026-01-01T12:00:00Z
PLAIN_TOML = """
[green]
use_hourly_profiles = false
per_operation_coefficients = false
embodied_carbon_per_request_gco2 = 0.0
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "score", *args], capture_output=True, text=True, timeout=120)


def _attr(key: str, value: str) -> dict:
    return {"key": key, "value": {"stringValue": value}}


def six_sql_request(region: str = "eu-west-3") -> dict:
    """OTLP/JSON as the spec writes it: hex ids, nanosecond strings, camelCase fields."""
    spans = [
        {
            "traceId": f"{0xABC0 + i:032x}",
            "spanId": f"{i + 1:016x}",
            "name": "SELECT orders",
            "kind": 3,  # CLIENT
            "startTimeUnixNano": str(T0 + i * 1_000_000),
            "endTimeUnixNano": str(T0 + i * 1_000_000 + 500_000),
            "attributes": [
                _attr("db.system", "postgresql"),
                _attr("db.statement", "SELECT * FROM orders"),
            ],
        }
        for i in range(6)
    ]
    resource = {"attributes": [_attr("service.name", "checkout"), _attr("cloud.region", region)]}
    return {
        "resourceSpans": [
            {"resource": resource, "scopeSpans": [{"scope": {"name": "psycopg"}, "spans": spans}]}
        ]
    }


@pytest.fixture()
def plain_config(tmp_path: Path) -> Path:
    path = tmp_path / "carbonspan.toml"
    path.write_text(PLAIN_TOML)
    return path


def test_golden_six_sql_spans_from_an_otlp_json_file(tmp_path, plain_config):
    # 6 x 1e-7 kWh x 41.5 g/kWh x 1.15 = 2.8635e-5 g, window = min start .. max end
    trace = tmp_path / "traces.json"
    trace.write_text(json.dumps(six_sql_request()))
    proc = run("--config", str(plain_config), str(trace))
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    gs = rep["green_summary"]
    assert gs["co2"]["operational_gco2"] == pytest.approx(2.8635e-5, rel=1e-12)
    assert gs["per_service_region"] == {"checkout": "eu-west-3"}
    assert rep["window"] == {
        "start": "2026-01-01T12:00:00.000000Z",
        "end": "2026-01-01T12:00:00.005500Z",
        "spans": 6,
        "traces": 6,
        "root_spans": 6,  # the spans carry no parentSpanId
        "io_ops": 6,
    }


def test_json_ndjson_and_protobuf_files_give_the_same_report(tmp_path, workload):
    make_request = workload.make_request
    req = make_request(n_spans=300, seed=3)
    pb = tmp_path / "export.pb"
    pb.write_bytes(req.SerializeToString())
    js = tmp_path / "export.json"
    js.write_text(json_format.MessageToJson(req))  # base64 ids, as protobuf's JSON mapping writes
    unnamed = tmp_path / "export.data"  # detected by content
    unnamed.write_bytes(req.SerializeToString())
    reports = []
    for path in (pb, js, unnamed):
        proc = run(str(path))
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(proc.stdout))
    assert reports[0] == reports[1] == reports[2]
    gs = reports[0]["green_summary"]
    assert reports[0]["window"]["spans"] == 300 and gs["total_io_ops"] > 0
    assert {r["region"] for r in gs["regions"]} >= {"eu-west-3", "eu-central-1", "pl"}
    assert sum(gs["per_service_carbon_kgco2eq"].values()) * 1000 == pytest.approx(
        gs["co2"]["operational_gco2"], rel=1e-9
    )
    # two requests as NDJSON = the two files scored together
    a, b = make_request(n_spans=40, seed=1), make_request(n_spans=40, seed=2)
    nd = tmp_path / "both.ndjson"
    nd.write_text(
        json_format.MessageToJson(a, indent=None)
        + "\n"
        + json_format.MessageToJson(b, indent=None)
        + "\n"
    )
    (tmp_path / "a.pb").write_bytes(a.SerializeToString())
    (tmp_path / "b.pb").write_bytes(b.SerializeToString())
    one = run(str(nd))
    two = run(str(tmp_path / "a.pb"), str(tmp_path / "b.pb"))
    assert one.returncode == two.returncode == 0
    assert json.loads(one.stdout) == json.loads(two.stdout)
    assert json.loads(one.stdout)["window"]["spans"] == 80


def run_with_config(tmp_path: Path, toml: str) -> subprocess.CompletedProcess:
    """``carbonspan score --config <toml> <six SQL spans>``."""
    cfg = tmp_path / "carbonspan-test.toml"
    cfg.write_text(toml)
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(six_sql_request()))
    return run("--config", str(cfg), str(trace))


def test_bad_config_names_the_key(tmp_path):
    proc = run_with_config(tmp_path, '[green]\nuse_hourly_profiles = "yes"\n')
    assert proc.returncode == 2 and proc.stdout == ""
    assert '[green] use_hourly_profiles: expected true or false, got "yes"' in proc.stderr


def test_missing_and_undecodable_files_are_clear_errors(tmp_path):
    proc = run(str(tmp_path / "nope.json"))
    assert proc.returncode == 2 and "nope.json" in proc.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    proc = run(str(junk))
    assert proc.returncode == 2 and "junk.json" in proc.stderr and "Traceback" not in proc.stderr


def test_help_shows_an_example():
    proc = subprocess.run([str(CLI), "score", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "carbonspan score --config carbonspan.toml" in proc.stdout


def test_spans_encoded_by_the_opentelemetry_sdk(tmp_path, plain_config):
    # real SDK spans, encoded by the SDK's own OTLP encoder: 3 db client spans in pl and one
    # server span; 3 x 1e-7 x 590.8 x 1.5 = 2.6586e-4 g
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "Orders", "cloud.region": "pl"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
        for _ in range(3):
            with tracer.start_as_current_span("SELECT", kind=SpanKind.CLIENT) as span:
                span.set_attribute("db.system", "postgresql")
                span.set_attribute("db.statement", "SELECT 1")
    provider.shutdown()
    path = tmp_path / "sdk.bin"
    path.write_bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())
    proc = run("--config", str(plain_config), str(path))
    assert proc.returncode == 0, proc.stderr
    gs = json.loads(proc.stdout)["green_summary"]
    assert gs["co2"]["operational_gco2"] == pytest.approx(2.6586e-4, rel=1e-12)
    assert gs["per_service_requests"] == {"orders": 1} and gs["total_io_ops"] == 3


def test_file_errors_name_the_file_once_and_say_what_to_do(tmp_path):
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"\xff\xff\xff")
    proc = run(str(junk))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("junk.pb") == 1  # the decoder names it; the CLI does not repeat it
    assert "expected a trace export: OTLP JSON" in proc.stderr
    proc = run(str(tmp_path))
    assert proc.returncode == 2 and "is a directory; pass the trace files in it" in proc.stderr
    assert "Traceback" not in proc.stderr and "Errno" not in proc.stderr


def test_a_reader_that_stops_early_is_not_an_error(tmp_path, plain_config):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(six_sql_request()))
    # `carbonspan score ... | head -c 10`: the pipe closes before the report is written
    proc = subprocess.Popen(
        [str(CLI), "score", "--config", str(plain_config), str(trace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "BrokenPipeError" not in err and "Traceback" not in err


def test_configured_regions_missing_from_the_table_are_warned_about(tmp_path):
    toml = '[green]\ndefault_region = "eu-west3"\n[green.service_regions]\nCart = "pl"\n'
    proc = run_with_config(tmp_path, toml)
    assert proc.returncode == 0 and json.loads(proc.stdout)["window"]["spans"] == 6
    assert (
        'warning: [green] default_region "eu-west3" is not in the intensity table: '
        "its carbon is 0 g (out_of_table)" in proc.stderr
    )
    assert "pl" not in proc.stderr  # a table region is not warned about


def test_refused_spans_are_reported_on_stderr_too(tmp_path):
    doc = six_sql_request()
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "0" * 32  # invalid id
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    proc = run(str(trace))
    assert proc.returncode == 0
    report = json.loads(proc.stdout)
    assert report["window"]["spans"] == 5 and report["counters"]["spans_rejected"] == 1
    assert "warning: some input was ignored or refused (spans_rejected 1, trace_id_invalid 1)" in (
        proc.stderr
    )


def test_the_agent_and_sources_tables_of_the_same_file_are_validated_too(tmp_path):
    proc = run_with_config(tmp_path, "[agent]\nwindow_secnds = 60\n")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "window_secnds" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_with_config(tmp_path, "[sources]\nbogus = 1\n")
    assert proc.returncode == 2 and "bogus" in proc.stderr
    proc = run_with_config(tmp_path, '[agent]\nwindow_seconds = 60\n[green]\ndefault_region = "pl"\n')
    assert proc.returncode == 0 and json.loads(proc.stdout)["window"]["spans"] == 6


def test_a_file_with_no_spans_is_scored_as_zero_with_a_warning_naming_it(tmp_path):
    """Valid OTLP/JSON but nothing to score (a wrong file, an empty export): the report is the
    empty window (exit 0, as OTLP allows an empty request) and stderr names the file."""
    empty, full = tmp_path / "empty.json", tmp_path / "full.json"
    empty.write_text('{"resourceSpans": []}')
    full.write_text(json.dumps(six_sql_request()))
    proc = run(str(empty), str(full))
    assert proc.returncode == 0 and json.loads(proc.stdout)["window"]["spans"] == 6
    assert f"warning: {empty}: no spans in it" in proc.stderr and str(full) not in proc.stderr


def test_a_json_document_that_is_no_trace_format_is_refused_naming_its_keys(tmp_path):
    """Not OTLP, Jaeger or Zipkin (here: some other JSON): exit 2 naming the file and what it
    holds, never an empty report dated 1970."""
    other = tmp_path / "metrics.json"
    other.write_text('{"resourceMetrics": [], "x": 1}')
    proc = run(str(other))
    assert proc.returncode == 2 and proc.stdout == ""
    assert str(other) in proc.stderr and "[resourceMetrics, x]" in proc.stderr
