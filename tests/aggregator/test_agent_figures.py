"""Figures from a real agent process (issue 11): a service that shares its name with a
configured host (item 3), and energy in a region the intensity table lacks (item 5).

Hosts and services are separate namespaces: the agent writes the service "pg" into the
per-service maps and the database host "pg" as a host row; ``aggregate`` keeps the service
(its energy and carbon are an application's) and charges the host from its row only;
``verify`` passes the honest archive (no ``host_in_services``) and checks the host row's
energy against watts x window length.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_process import AgentProcess

from carbonspan.cli import main

CONFIG = """
[green]
default_region = "eu-west-3"
[[green.hosts]]
name = "pg"
kind = "database"
region = "eu-west-3"
watts = 360.0
"""


def _send(agent: AgentProcess, n: int, service: str = "pg", region: str = "eu-west-3") -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    provider = TracerProvider(resource=Resource.create({"service.name": service, "cloud.region": region}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{agent.http_url}/v1/traces", timeout=5)))
    tracer = provider.get_tracer("t")
    for _ in range(n):
        with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER), \
                tracer.start_as_current_span("SELECT orders", kind=SpanKind.CLIENT,
                                             attributes={"db.system": "postgresql",
                                                         "db.statement": "SELECT * FROM orders"}):
            pass
    provider.shutdown()


def test_a_service_named_like_a_host_is_a_service_for_agent_aggregate_and_verify(tmp_path: Path, capsys):
    root = tmp_path / "archives"
    agent = AgentProcess(root, ["--window-seconds", "1"], {}, CONFIG).wait_ready()
    try:
        _send(agent, 20)
    finally:
        assert agent.stop() == 0
    lines = [r["report"]["green_summary"] for r in agent.records()]
    assert any(gs["per_service_energy_kwh"].get("pg", 0.0) > 0 for gs in lines)  # the service "pg"
    assert all([h["name"] for h in gs["hosts"]] == ["pg"] for gs in lines)  # and the host "pg"
    out = tmp_path / "report.json"
    assert main(["aggregate", str(root), "--from", "2000-01-01", "--to", "2100-01-01", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(root), "--report", str(out)]) == 0, capsys.readouterr().out
    assert "host_in_services" not in capsys.readouterr().out
    report = json.loads(out.read_bytes())
    agg, apps = report["aggregate"], {a["service_name"]: a for a in report["applications"]}
    service_kwh = sum(gs["per_service_energy_kwh"].get("pg", 0.0) for gs in lines)
    host_kwh = sum(h["energy_kwh"] for gs in lines for h in gs["hosts"])
    assert apps["pg"]["energy_kwh"] == pytest.approx(service_kwh) and service_kwh > 0
    assert agg["host_energy_kwh"] == pytest.approx(host_kwh) and host_kwh > 0
    assert agg["host_named_services"] >= 1
    # sum(applications) + hosts = total; the service's carbon is operational, the host's database
    assert sum(a["energy_kwh"] for a in apps.values()) + agg["host_energy_kwh"] == pytest.approx(agg["total_energy_kwh"])
    assert apps["pg"]["carbon_kgco2eq"] == pytest.approx(agg["carbon_breakdown"]["operational_kgco2eq"])
    assert agg["carbon_breakdown"]["database_kgco2eq"] > 0


def test_energy_in_a_region_the_table_lacks_is_reported_not_silently_zero(tmp_path: Path, capsys):
    """default_region = "mars-north-1": the agent records energy_without_carbon_kwh on each
    line; aggregate carries it with the region and service, and warns on the terminal and in
    the HTML; a one-day period with a few seconds of windows is a partial period."""
    root = tmp_path / "archives"
    agent = AgentProcess(root, ["--window-seconds", "1"], {}, '[green]\ndefault_region = "mars-north-1"\n').wait_ready()
    try:
        _send(agent, 10, service="rover", region="mars-north-1")
    finally:
        assert agent.stop() == 0
    lines = [r["report"] for r in agent.records()]
    stated = sum(rep["green_summary"]["energy_without_carbon_kwh"] for rep in lines)
    assert stated > 0
    day = lines[0]["window"]["start"][:10]
    out, html = tmp_path / "report.json", tmp_path / "report.html"
    capsys.readouterr()
    assert main(["aggregate", str(root), "--from", day, "--to", day, "--out", str(out), "--html", str(html)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    report = json.loads(out.read_bytes())
    agg = report["aggregate"]
    assert agg["energy_without_carbon_kwh"] == pytest.approx(stated)
    assert agg["energy_without_carbon_regions"] == ["mars-north-1"]
    assert agg["energy_without_carbon_services"] == ["rover"]
    assert "kWh were counted at 0 gCO2e" in shown and "kWh were counted at 0 gCO2e" in html.read_text()
    assert 0 < agg["temporal_coverage"] < 0.01 and "partial period" in shown
    assert "Partial period" in html.read_text()


def test_host_only_windows_are_idle_not_fallback_and_verify_checks_their_host_energy(tmp_path: Path, capsys):
    """The agent archives host-only windows (no spans: both per-service maps empty) so hosts are
    charged for every second it runs (issue 11, item 1). Such a window has nothing to attribute:
    it is counted in idle_windows, not as a fallback or _unattributed window (no "upgrade the
    agent" warning, --strict-attribution passes), its host energy is in the totals, the windows
    make one unbroken run, and verify checks each host row against watts x window length."""
    root = tmp_path / "archives"
    agent = AgentProcess(root, ["--window-seconds", "1"], {}, CONFIG).wait_ready()
    try:
        _send(agent, 2, service="shop")
        # idle windows: once the open window holds no span, three more close (the first may
        # still be the spans' own, archived just after the swap), so at least two are idle;
        # waited for, not slept for: a loaded machine may tick late
        agent.wait_for(lambda: agent.metric("carbonspan_open_window_spans") == 0,
                       timeout=30, what="the spans' window to be archived")
        written = agent.metric("carbonspan_windows_written_total")
        agent.wait_for(lambda: agent.metric("carbonspan_windows_written_total") >= written + 3,
                       timeout=30, what="two idle windows")
        _send(agent, 2, service="shop")
    finally:
        assert agent.stop() == 0
    lines = [r["report"] for r in agent.records()]
    idle = sum(1 for rep in lines if rep["window"]["spans"] == 0)
    assert idle >= 2
    out = tmp_path / "report.json"
    capsys.readouterr()
    assert main(["aggregate", str(root), "--from", "2000-01-01", "--to", "2100-01-01", "--out", str(out),
                 "--strict-attribution"]) == 0
    err = capsys.readouterr().err
    assert "I/O-proxy fallback" not in err
    assert main(["verify", str(root), "--report", str(out)]) == 0
    agg = json.loads(out.read_bytes())["aggregate"]
    assert agg["idle_windows"] == idle and agg["fallback_windows"] == 0 and agg["unattributed_windows"] == 0
    assert agg["runtime_windows"] + idle == len(lines) and agg["period_coverage"] == 1.0
    host_kwh = sum(h["energy_kwh"] for rep in lines for h in rep["green_summary"]["hosts"])
    assert agg["host_energy_kwh"] == pytest.approx(host_kwh)
    assert [a["runs"] for a in agg["temporal_coverage_by_agent"]] == [1]  # no gap between windows
