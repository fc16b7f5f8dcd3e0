"""End to end: a real agent's archive and a ``carbonspan backfill`` chain, aggregated together,
give a report whose backfill shares are the split computed by hand from the two chains' lines,
in the JSON, the terminal summary, the CSV and the HTML, and ``verify --report`` re-derives it.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

SERVICES = ("checkout", "ledger")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "carbonspan", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def _send_live(agent) -> int:
    """Spans of both services through the SDK's OTLP/HTTP exporter; returns how many."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    sent = 0
    for service, queries in (("checkout", 3), ("ledger", 1)):
        provider = TracerProvider(resource=Resource.create({"service.name": service, "cloud.region": "eu-west-3"}))
        provider.add_span_processor(SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"{agent.http_url}/v1/traces", timeout=10)))
        tracer = provider.get_tracer("backfill-report-test")
        with tracer.start_as_current_span("POST /order", kind=SpanKind.SERVER):
            for q in range(queries):
                with tracer.start_as_current_span("INSERT", kind=SpanKind.CLIENT, attributes={
                        "db.system": "postgresql", "db.statement": f"INSERT INTO t VALUES ({q})"}):
                    pass
        provider.shutdown()
        sent += queries + 1
    return sent


def _historic(path: Path, at: datetime) -> None:
    """An OTLP JSON export of last hours' spans: checkout 2 selects, ledger 4 updates, over
    three minutes (three backfill windows)."""
    t0 = int(at.timestamp()) * 1_000_000_000
    resources = []
    n = 0
    for service, ops in (("checkout", ["SELECT 1"] * 2), ("ledger", ["UPDATE t SET a = 1"] * 4)):
        spans = []
        for i, statement in enumerate(ops):
            start = t0 + (i % 3) * 60_000_000_000 + n * 1_000_000
            spans.append({"traceId": f"{n + 1:032x}", "spanId": f"{n + 1:016x}", "name": "q", "kind": 3,
                          "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 2_000_000),
                          "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}},
                                         {"key": "db.statement", "value": {"stringValue": statement}}]})
            n += 1
        resources.append({"resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": service}},
            {"key": "cloud.region", "value": {"stringValue": "eu-west-3"}}]},
            "scopeSpans": [{"spans": spans}]})
    path.write_text(json.dumps({"resourceSpans": resources}))


def _sums(directory: Path) -> tuple[dict[str, float], dict[str, int], float, int]:
    """A chain's per-service energy and requests, its total energy and its requests as
    ``total_requests`` counts them (Σ per_service_requests, or the window's traces when
    that is 0), summed from its lines."""
    energy: dict[str, list[float]] = {}
    requests: dict[str, int] = {}
    total: list[float] = []
    total_requests = 0
    for f in sorted(directory.glob("windows-*.jsonl")):
        for line in f.read_text().splitlines():
            report = json.loads(line)["report"]
            gs = report["green_summary"]
            total.append(gs["energy_kwh"])
            for name, kwh in gs["per_service_energy_kwh"].items():
                energy.setdefault(name, []).append(kwh)
            for name, n in gs.get("per_service_requests", {}).items():
                requests[name] = requests.get(name, 0) + n
            total_requests += sum(gs.get("per_service_requests", {}).values()) or report["window"]["traces"]
    return {k: math.fsum(v) for k, v in energy.items()}, requests, math.fsum(total), total_requests


def test_an_agent_chain_and_a_backfill_chain_report_their_split(start_agent, tmp_path):
    agent = start_agent("--window-seconds", "1")
    sent = _send_live(agent)
    deadline = time.monotonic() + 60
    while sum(r["report"]["window"]["spans"] for r in agent.records()) < sent and time.monotonic() < deadline:
        time.sleep(0.2)
    assert agent.stop() == 0
    assert sum(r["report"]["window"]["spans"] for r in agent.records()) == sent

    now = datetime.now(UTC)
    export = tmp_path / "last-hours.json"
    _historic(export, (now - timedelta(hours=2)).replace(second=0, microsecond=0))
    bf = cli("backfill", str(export), "--agent-id", "test-agent-backfill", "--archive-dir", str(agent.root))
    assert bf.returncode == 0, bf.stderr
    assert "backfilled 6 spans into 3 windows" in bf.stdout

    live_e, _, live_total, live_req = _sums(agent.dir)
    hist_e, hist_r, hist_total, hist_req = _sums(agent.root / "test-agent-backfill")
    assert set(live_e) == set(hist_e) == set(SERVICES)

    out, csv_dir, html = tmp_path / "report.json", tmp_path / "csv", tmp_path / "report.html"
    day = timedelta(days=1)
    agg = cli("aggregate", str(agent.root), "--from", (now - day).date().isoformat(),
              "--to", (now + day).date().isoformat(), "--out", str(out), "--csv", str(csv_dir),
              "--html", str(html))
    assert agg.returncode == 0, agg.stderr
    report = json.loads(out.read_text())

    total = report["aggregate"]["backfill"]
    assert total["windows"] == 3 and report["aggregate"]["windows"] == 3 + len(agent.records())
    assert math.isclose(total["energy_kwh"], hist_total, rel_tol=1e-12)
    assert math.isclose(total["energy_share"], hist_total / (live_total + hist_total), rel_tol=1e-12)
    assert (total["requests"], total["requests_share"]) == (hist_req, hist_req / (hist_req + live_req))
    apps = {a["service_name"]: a for a in report["applications"]}
    for name in SERVICES:
        share = hist_e[name] / (live_e[name] + hist_e[name])  # by hand, from the two chains' lines
        assert math.isclose(apps[name]["backfill"]["energy_share"], share, rel_tol=1e-12), name
        assert apps[name]["backfill"]["requests"] == hist_r.get(name, 0)
        assert apps[name]["backfill"]["windows"] == {"checkout": 2, "ledger": 3}[name]  # minutes with its spans
        assert 0.0 < apps[name]["backfill"]["energy_share"] < 1.0

    # every rendering shows it
    assert f"of energy, {total['carbon_share']:.1%} of carbon" in agg.stdout
    assert f"from backfilled chains: {total['energy_share']:.1%} of energy" in agg.stdout
    with (csv_dir / "services.csv").open(newline="") as f:
        rows = {r["service"]: r for r in csv.DictReader(f)}
    for name in SERVICES:
        assert float(rows[name]["backfill_energy_fraction"]) == apps[name]["backfill"]["energy_share"]
    page = html.read_text()
    assert f"From backfill<b>{total['carbon_share']:.1%}</b>" in page

    # an auditor re-derives the report, backfill shares included
    verify = cli("verify", str(agent.root), "--report", str(out))
    assert verify.returncode == 0, verify.stdout + verify.stderr
