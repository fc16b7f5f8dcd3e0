"""``carbonspan backfill``: historic spans become a verified chain of their own that aggregate
folds, with the same figures as scoring the same files, every line marked as backfilled.

Run through the real CLI on real files (OTLP JSON and a Jaeger query-API export) and against
loopback servers answering Jaeger's and Tempo's query APIs, then read back with the real
``verify`` and ``aggregate``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

JAEGER = Path(__file__).resolve().parents[1] / "otlp" / "data" / "jaeger-query-api.json"
T0 = 1773151200_000_000_000  # 2026-03-10T14:00:00Z


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "carbonspan", *args], capture_output=True,
                          text=True, timeout=180, check=False)


def _span(n: int, at_s: int, statement: str) -> dict:
    return {
        "traceId": f"{n + 100:032x}", "spanId": f"{n + 1:016x}", "name": "q", "kind": 3,
        "startTimeUnixNano": str(T0 + at_s * 1_000_000_000),
        "endTimeUnixNano": str(T0 + at_s * 1_000_000_000 + 1_000_000),
        "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}},
                       {"key": "db.statement", "value": {"stringValue": statement}}],
    }


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    """Spans in minutes 0, 1 and 2 of the hour (OTLP), plus the Jaeger trace (minute 0)."""
    otlp = tmp_path / "otlp-export.json"
    spans = [_span(0, 5, "SELECT 1"), _span(1, 70, "INSERT INTO t VALUES (1)"),
             _span(2, 75, "UPDATE t SET a = 1"), _span(3, 130, "DELETE FROM t")]
    otlp.write_text(json.dumps({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "ledger"}},
            {"key": "cloud.region", "value": {"stringValue": "eu-west-2"}}]},
        "scopeSpans": [{"spans": spans}]}]}))
    config = tmp_path / "carbonspan.toml"
    config.write_text('[green]\n[[green.hosts]]\nname = "pg-primary"\nkind = "database"\n'
                      'region = "eu-west-2"\nwatts = 400\n')
    return otlp, config


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def _lines(directory: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("windows-*.jsonl"))
            for line in f.read_text().splitlines()]


def test_backfill_writes_a_verified_chain_with_the_same_figures_as_score(tmp_path, inputs):
    otlp, config = inputs
    archive = tmp_path / "archives"
    proc = cli("backfill", str(otlp), str(JAEGER), "--agent-id", "ledger-backfill",
               "--archive-dir", str(archive), "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    assert "backfilled 10 spans into 3 windows" in proc.stdout

    lines = _lines(archive / "ledger-backfill")
    starts = [ln["report"]["window"]["start"] for ln in lines]
    assert starts == ["2026-03-10T14:00:00.000000Z", "2026-03-10T14:01:00.000000Z",
                      "2026-03-10T14:02:00.000000Z"]  # by span start time, 60 s windows
    digests = ",".join(sorted(f"sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}"
                              for p in (otlp, JAEGER)))
    for ln in lines:
        m = ln["report"]["methodology"]
        assert (m["backfill"], m["backfill_sources"], m["backfill_hosts"]) == (
            "true", digests, "not charged")
        assert ln["report"]["green_summary"]["hosts"] == []  # never charged for span windows

    verify = cli("verify", str(archive))
    assert verify.returncode == 0, verify.stdout + verify.stderr

    scored = json.loads(cli("score", "--config", str(config), str(otlp), str(JAEGER)).stdout)
    per_service: dict[str, float] = {}
    for ln in lines:
        for service, kwh in ln["report"]["green_summary"]["per_service_energy_kwh"].items():
            per_service[service] = per_service.get(service, 0.0) + kwh
    expected = scored["green_summary"]["per_service_energy_kwh"]
    assert per_service.keys() == expected.keys()
    for service, kwh in expected.items():
        assert per_service[service] == pytest.approx(kwh, rel=1e-12)

    out = tmp_path / "report.json"
    agg = cli("aggregate", str(archive), "--from", "2026-03-10", "--to", "2026-03-10",
              "--out", str(out))
    assert agg.returncode == 0, agg.stderr
    report = json.loads(out.read_text())
    assert report["aggregate"]["windows"] == 3
    assert report["aggregate"]["total_energy_kwh"] == pytest.approx(
        sum(expected.values()), rel=1e-12)


def test_backfill_refuses_to_write_into_an_existing_chain_and_names_bad_input(tmp_path, inputs):
    otlp, _ = inputs
    archive = tmp_path / "archives"
    assert cli("backfill", str(otlp), "--agent-id", "b", "--archive-dir", str(archive)).returncode == 0
    again = cli("backfill", str(otlp), "--agent-id", "b", "--archive-dir", str(archive))
    assert again.returncode == 2 and "already holds a chain" in again.stderr
    assert "b-backfill" in again.stderr
    assert len(_lines(archive / "b")) == 3  # what was written stays as it was

    bad = tmp_path / "bad.json"
    bad.write_text('{"spans": 1}')
    proc = cli("backfill", str(bad), "--agent-id", "c", "--archive-dir", str(archive))
    assert proc.returncode == 2 and str(bad) in proc.stderr
    assert not (archive / "c").exists() or not list((archive / "c").glob("windows-*"))
    zero = cli("backfill", str(otlp), "--agent-id", "d", "--archive-dir", str(archive),
               "--window-seconds", "0")
    assert zero.returncode == 2 and "--window-seconds must be positive" in zero.stderr
    for odd in ("nan", "inf", "1e-12"):  # a traceback, a traceback, one 1970 window of 0 ns
        proc = cli("backfill", str(otlp), "--agent-id", "e", "--archive-dir", str(archive),
                   f"--window-seconds={odd}")
        assert proc.returncode == 2 and "must be positive, finite and at least 0.001 s" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and not list((archive / "e").glob("windows-*"))
    slash = cli("backfill", str(otlp), "--agent-id", "../x", "--archive-dir", str(archive))
    assert slash.returncode == 2 and "not a valid chain name" in slash.stderr


# --- fetching from Jaeger and Tempo query APIs on loopback ---------------------------------------

class _QueryApi(BaseHTTPRequestHandler):
    """Jaeger's query service and Tempo's query frontend, answering their documented JSON."""

    routes: dict[str, object] = {}
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        _QueryApi.seen.append(self.path)
        key = url.path if url.path != "/api/traces" else f"/api/traces?{parse_qs(url.query)['service'][0]}"
        body = json.dumps(_QueryApi.routes[key]).encode() if key in _QueryApi.routes else b"{}"
        self.send_response(200 if key in _QueryApi.routes else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def query_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _QueryApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _QueryApi.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_backfill_from_a_jaeger_query_service_keeps_each_trace_once(tmp_path, query_api):
    trace = json.loads(JAEGER.read_text())["data"][0]
    # the trace reaches both services, so Jaeger answers it for each of them
    _QueryApi.routes = {"/api/services": {"data": ["frontend", "orders"]},
                        "/api/traces?frontend": {"data": [trace]},
                        "/api/traces?orders": {"data": [trace]}}
    archive = tmp_path / "archives"
    proc = cli("backfill", "--from-jaeger", query_api, "--from", "2026-03-10T00:00:00Z",
               "--to", "2026-03-11", "--agent-id", "j", "--archive-dir", str(archive))
    assert proc.returncode == 0, proc.stderr
    searches = [p for p in _QueryApi.seen if p.startswith("/api/traces?")]
    assert len(searches) == 2 and all("start=1773100800000000" in p and "end=1773187200000000"
                                      in p and "limit=1000" in p for p in searches)
    expected = json.loads(cli("score", str(JAEGER)).stdout)["green_summary"]
    lines = _lines(archive / "j")
    got: dict[str, float] = {}
    for ln in lines:
        for service, kwh in ln["report"]["green_summary"]["per_service_energy_kwh"].items():
            got[service] = got.get(service, 0.0) + kwh
    assert got == pytest.approx(expected["per_service_energy_kwh"], rel=1e-12)
    saved = sorted((archive / "j" / "sources").glob("*.json"))
    digests = {f"sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in saved}
    assert set(lines[0]["report"]["methodology"]["backfill_sources"].split(",")) == digests
    assert cli("verify", str(archive)).returncode == 0

    # fetching again into the same chain is refused before anything is fetched: the saved
    # answers the lines' digests name stay as they were (they were overwritten, then refused)
    _QueryApi.routes = {**_QueryApi.routes, "/api/traces?frontend": {"data": []}}
    before, seen = {p: p.read_bytes() for p in saved}, len(_QueryApi.seen)
    again = cli("backfill", "--from-jaeger", query_api, "--from", "2026-03-10T00:00:00Z",
                "--to", "2026-03-11", "--agent-id", "j", "--archive-dir", str(archive))
    assert again.returncode == 2 and "already holds a chain" in again.stderr, again.stderr
    assert len(_QueryApi.seen) == seen and {p: p.read_bytes() for p in saved} == before


def test_backfill_from_tempo_reads_batches_and_refuses_a_truncated_search(tmp_path, query_api,
                                                                          inputs):
    otlp, _ = inputs
    resource_spans = json.loads(otlp.read_text())["resourceSpans"]
    old_style = [{**rs, "instrumentationLibrarySpans": rs["scopeSpans"]} for rs in resource_spans]
    for rs in old_style:
        del rs["scopeSpans"]
        for scope in rs["instrumentationLibrarySpans"]:
            # as Tempo writes them (gogo jsonpb of its proto, grafana/tempo#5437): ids are the
            # bytes in base64 (its search answers hex), kinds the enum names
            scope["spans"] = [{**span, "traceId": _b64(span["traceId"]), "spanId": _b64(span["spanId"]),
                               "kind": "SPAN_KIND_CLIENT"} for span in scope["spans"]]
    short_id = "64"  # Tempo drops leading zeros of a trace id
    _QueryApi.routes = {"/api/search": {"traces": [{"traceID": short_id, "rootServiceName": "ledger"}]},
                        f"/api/traces/{short_id}": {"batches": old_style}}
    archive = tmp_path / "archives"
    args = ["--from-tempo", query_api, "--from", "2026-03-10", "--to", "2026-03-11",
            "--archive-dir", str(archive)]
    proc = cli("backfill", *args, "--agent-id", "t")
    assert proc.returncode == 0, proc.stderr
    assert any(p.startswith("/api/search?start=1773100800&end=1773187200") for p in _QueryApi.seen)
    expected = json.loads(cli("score", str(otlp)).stdout)["green_summary"]["per_service_energy_kwh"]
    total = sum(ln["report"]["green_summary"]["per_service_energy_kwh"]["ledger"]
                for ln in _lines(archive / "t"))
    assert total == pytest.approx(expected["ledger"], rel=1e-12)

    truncated = cli("backfill", *args, "--agent-id", "t2", "--limit", "1")
    assert truncated.returncode == 2 and "raise --limit" in truncated.stderr
    assert not list((archive / "t2").glob("windows-*"))
    down = cli("backfill", "--from-tempo", "http://127.0.0.1:9", "--from", "2026-03-10",
               "--to", "2026-03-11", "--agent-id", "t3", "--archive-dir", str(archive))
    assert down.returncode == 2 and "cannot connect" in down.stderr
