"""``carbonspan score --explain``: per span, what was extracted and why, adding up to the report.

Run as a user would (the real CLI on files): each row's class, deciding attributes, weight and
region origin are checked against the rules written in docs/carbon-model.md, and the rows'
energy and carbon must add up to the window report of the same files, per service and in
total, so the explanation can never drift from the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

T0 = 1773151200_000_000_000
EXAMPLE = Path(__file__).resolve().parents[2] / "agent" / "examples" / "example-spans.otlp.json"


def _attr(key: str, value: object) -> dict:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(n: int, kind: int, name: str, **attrs: object) -> dict:
    return {
        "traceId": f"{n + 1:032x}", "spanId": f"{n + 1:016x}", "name": name, "kind": kind,
        "startTimeUnixNano": str(T0 + n * 1_000_000), "endTimeUnixNano": str(T0 + n * 1_000_000 + 500),
        "attributes": [_attr(k, v) for k, v in attrs.items()],
    }


def _resource(service: str, region: str | None, spans: list[dict]) -> dict:
    attrs = [_attr("service.name", service)] + ([_attr("cloud.region", region)] if region else [])
    return {"resource": {"attributes": attrs}, "scopeSpans": [{"spans": spans}]}


DOC = {"resourceSpans": [
    _resource("cart", "eu-west-3", [
        _span(0, 2, "GET /cart"),
        _span(1, 3, "HMSET", **{"db.system.name": "redis", "db.operation.name": "UPDATE",
                                "cloud.region": "eu-central-1"}),
        _span(2, 3, "GET", **{"url.full": "http://pricing/p", "http.response.body.size": 50_000}),
    ]),
    _resource("search", None, [_span(3, 3, "SELECT", **{"db.system": "postgresql",
                                                        "db.statement": "SELECT 1"})]),
    _resource("mailer", None, [_span(4, 4, "send", **{"messaging.system": "rabbitmq"})]),
]}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "carbonspan", "score", *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    traces, config = tmp_path / "traces.json", tmp_path / "carbonspan.toml"
    traces.write_text(json.dumps(DOC))
    config.write_text('[green]\ndefault_region = "eu-west-3"\n[green.service_regions]\n'
                      'search = "eu-north-1"\n')
    return traces, config


def explained(*args: str) -> dict:
    proc = run("--explain", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_each_span_says_what_decided_its_class_weight_and_region(files) -> None:
    traces, config = files
    rows = explained("--config", str(config), str(traces))["spans"]
    by_span = {r["span"]: r for r in rows}
    assert (by_span["GET /cart"]["io_class"], by_span["GET /cart"]["decided_by"]) == ("none", [])
    assert by_span["GET /cart"]["region_from"] == "resource"
    redis = by_span["HMSET"]
    assert redis["io_class"] == "update" and redis["weight"] == 1.5
    assert redis["decided_by"] == ["db.system.name=redis", "db.operation.name=UPDATE"]
    assert (redis["region"], redis["region_from"]) == ("eu-central-1", "span")
    http = by_span["GET"]
    assert http["io_class"] == "http" and http["weight"] == 1.2  # 50 KB: the 10 KiB-1 MiB band
    assert http["decided_by"] == ["url.full=http://pricing/p", "http.response.body.size=50000"]
    search = by_span["SELECT"]
    assert (search["weight"], search["region"], search["region_from"]) == (0.5, "eu-north-1",
                                                                          "config")
    mailer = by_span["send"]
    assert (mailer["io_class"], mailer["region"], mailer["region_from"]) == (
        "messaging", "eu-west-3", "default")
    assert by_span["GET"]["energy_model"].startswith("io_proxy")
    # without a default region the mailer's energy has no region: the unknown row
    unknown = {r["span"]: r for r in explained(str(traces))["spans"]}["send"]
    assert (unknown["region"], unknown["region_from"], unknown["carbon_gco2"]) == (
        "unknown", "unknown", 0.0)


@pytest.mark.parametrize("use_config", [True, False])
def test_the_rows_add_up_to_the_window_report(files, use_config: bool) -> None:
    traces, config = files
    args = ["--config", str(config)] if use_config else []
    for inputs in ([str(traces)], [str(EXAMPLE)], [str(traces), str(EXAMPLE)]):
        doc = explained(*args, *inputs)
        report = run(*args, *inputs)
        assert report.returncode == 0, report.stderr
        gs = json.loads(report.stdout)["green_summary"]
        energy, carbon = defaultdict(float), defaultdict(float)
        for row in doc["spans"]:
            energy[row["service"]] += row["energy_kwh"]
            carbon[row["service"]] += row["carbon_gco2"]
        assert energy.keys() == gs["per_service_energy_kwh"].keys()
        for service, kwh in gs["per_service_energy_kwh"].items():
            assert energy[service] == pytest.approx(kwh, rel=1e-12)
            assert carbon[service] / 1000 == pytest.approx(
                gs["per_service_carbon_kgco2eq"][service], rel=1e-12)
        assert doc["totals"]["carbon_gco2"] == pytest.approx(gs["co2"]["operational_gco2"],
                                                             rel=1e-12)
        assert doc["totals"]["spans"] == json.loads(report.stdout)["window"]["spans"]


def test_the_table_names_every_span_and_the_totals(files) -> None:
    traces, config = files
    proc = run("--explain", "--config", str(config), str(traces))
    assert proc.returncode == 0, proc.stderr
    for text in ("cart", "search", "mailer", "HMSET", "db.operation.name=UPDATE",
                 "eu-north-1 (config)", "5 spans, 4 I/O:"):
        assert text in proc.stdout, text


def test_the_table_shows_the_users_text_verbatim_and_says_what_was_refused(tmp_path: Path) -> None:
    """Span names and attribute values are the user's text, never rich markup: "[/x]" in a
    statement was a MarkupError traceback, "[eu]" vanished from a name. A refused span has no
    row, and the table says so on stderr, as the report does."""
    statement = "SELECT '[/x]', '[b]'"
    bad = {**_span(1, 3, "bad id"), "traceId": "not-hex"}
    doc = {"resourceSpans": [_resource("shop[eu]", "eu-west-3", [
        _span(0, 3, "[red]q[/red] :smile:", **{"db.system": "postgresql", "db.statement": statement}),
        bad,
    ])]}
    traces = tmp_path / "markup.json"
    traces.write_text(json.dumps(doc))
    proc = run("--explain", str(traces))
    assert proc.returncode == 0, proc.stderr
    for text in ("shop[eu]", "[red]q[/red] :smile:", "db.statement=SELECT '[/x]', '[b]'",
                 "1 spans, 1 I/O:"):
        assert text in proc.stdout, (text, proc.stdout)
    assert "trace_id_invalid 1" in proc.stderr and "no row" in proc.stderr, proc.stderr
