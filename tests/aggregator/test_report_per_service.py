"""Per-service SCI and measured share: every service row has gCO2e per request (operational
and SCI (O+M)/R) and the share of its energy a meter measured, in the JSON, the terminal, the
CSV and the HTML. Windows are scored by the real agent (a Scaphandre-style measured rate for
one service in half the windows), archived, and aggregated by the real CLI in a subprocess."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from agent.carbon.signals import MeasuredRate, Signals
from agent.config import load_config
from agent.otlp import decode_protobuf
from agent.score import ScoringContext, score_batch
from agent.window import build_report as window_report
from aggregator import synth
from aggregator.engines import fold_lines
from aggregator.fold.fast import fold_line
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.state import AggregateState
from aggregator.read import Period
from aggregator.render_html_services import fmt_g
from aggregator.report import build_report, report_bytes
from aggregator.synth import Svc
from tests.aggregator.conftest import T0

ROOT = Path(__file__).resolve().parents[2]
T0_NS = 1_764_460_800 * 10**9  # 2025-11-30T00:00:00Z
DAY = ("--from", "2025-11-30", "--to", "2025-11-30")


def carbonspan(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "carbonspan", *map(str, args)], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300, check=False)


def _make_request_bytes():
    path = ROOT / "bench" / "workload.py"
    spec = importlib.util.spec_from_file_location("aggregator_test_workload_sci", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_request_bytes


@pytest.fixture
def metered(tmp_path: Path) -> tuple[Path, list[dict]]:
    """12 one-minute windows of the real agent; in the first 6 a meter measures checkout."""
    green = load_config(None).green
    make = _make_request_bytes()
    lines = []
    for i in range(12):
        start = T0_NS + i * 60 * 10**9
        rate = MeasuredRate(kwh_per_op=3e-7, tag="scaphandre_rapl", taken_at=start / 1e9, interval_s=600.0)
        signals = Signals(measured={"checkout": rate}) if i < 6 else Signals()
        ctx = ScoringContext.from_config(green, signals=signals, now_ns=start + 30 * 10**9)
        partial = score_batch(decode_protobuf(make(n_spans=128, seed=i)), ctx)
        lines.append(window_report(partial, ctx, start, start + 60 * 10**9, agent_id="node-a").model_dump(mode="json"))
    assert lines[0]["green_summary"]["per_service_measured_ratio"]["checkout"] > 0  # the meter was used
    assert lines[-1]["green_summary"]["per_service_measured_ratio"]["checkout"] == 0.0
    root = tmp_path / "archives"
    synth.write_agent(root, "node-a", synth.split(synth.sealed_lines(lines), 3), gzip_files=[1])
    return root, lines


def test_every_rendering_has_per_request_figures_and_the_measured_share(metered, tmp_path):
    root, lines = metered
    out, csv_dir, html = tmp_path / "r.json", tmp_path / "csv", tmp_path / "r.html"
    run = carbonspan("aggregate", root, *DAY, "--out", out, "--csv", csv_dir, "--html", html)
    assert run.returncode == 0, run.stderr
    report = orjson.loads(out.read_bytes())
    apps = {a["service_name"]: a for a in report["applications"]}
    # measured energy: each window's energy of the service x the share of its I/O spans metered
    for name, app in apps.items():
        gs = [line["green_summary"] for line in lines]
        measured = sum(g["per_service_energy_kwh"].get(name, 0.0) * g["per_service_measured_ratio"].get(name, 0.0)
                       for g in gs)
        assert app["measured_energy_kwh"] == pytest.approx(measured, rel=1e-12, abs=1e-18)
        assert app["measured_share"] == pytest.approx(measured / app["energy_kwh"], rel=1e-12)
    assert 0.0 < apps["checkout"]["measured_share"] < 1.0 and apps["cart"]["measured_share"] == 0.0
    # SCI (O + M) / R per service: the period's embodied carbon allocated by requests
    embodied = report["aggregate"]["carbon_breakdown"]["embodied_kgco2eq"]
    requests = sum(a["requests"] for a in apps.values())
    assert embodied > 0 and sum(a["embodied_kgco2eq"] for a in apps.values()) == pytest.approx(embodied, rel=1e-12)
    for app in apps.values():
        assert app["embodied_kgco2eq"] == pytest.approx(embodied * app["requests"] / requests, rel=1e-12)
        assert app["operational_gco2e_per_request"] == pytest.approx(app["carbon_kgco2eq"] * 1000 / app["requests"])
        assert app["sci_gco2e_per_request"] == pytest.approx(
            (app["carbon_kgco2eq"] + app["embodied_kgco2eq"]) * 1000 / app["requests"])
        assert app["sci_gco2e_per_request"] > app["operational_gco2e_per_request"]
    # terminal: the columns, one unit for each per-request column
    head = next(line for line in run.stdout.splitlines() if "service" in line and "region" in line)
    assert "CO2e per request" in head and "SCI per request" in head and "measured energy" in head
    rows = [line for line in run.stdout.splitlines() if any(f" {n} " in line for n in apps)]
    assert len(rows) == len(apps) and all(line.count(" mg ") + line.count(" µg ") + line.count(" g ") >= 2
                                          for line in rows)
    assert f"{apps['checkout']['measured_share']:.0%}" in next(r for r in rows if " checkout " in r)
    # CSV: the report's figures in full precision
    with (csv_dir / "services.csv").open(newline="", encoding="utf-8") as f:
        by = {r["service"]: r for r in csv.DictReader(f)}
    for name, app in apps.items():
        assert float(by[name]["sci_gco2e_per_request"]) == app["sci_gco2e_per_request"]
        assert float(by[name]["embodied_kgco2e_allocated"]) == app["embodied_kgco2eq"]
        assert float(by[name]["measured_energy_kwh"]) == app["measured_energy_kwh"]
        assert float(by[name]["measured_share_fraction"]) == app["measured_share"]
    # HTML: both per-request figures and the share in every service's row
    page = html.read_text(encoding="utf-8")
    for name, app in apps.items():
        row = page.split(f'<td class="name" title="{name}">{name}</td>', 1)[1].split("</tr>", 1)[0]
        assert fmt_g(app["operational_gco2e_per_request"]) in row and fmt_g(app["sci_gco2e_per_request"]) in row
        assert f">{app['measured_share']:.0%}<" in row
    # and an auditor re-derives it
    run = carbonspan("verify", root, "--report", out)
    assert run.returncode == 0 and "re-derives to the same content hash" in run.stdout, run.stdout


def test_metered_lines_fold_alike_on_every_path(metered):
    """The C fold declines a line with a non-zero ratio (the general path adds it); the bytes
    are those of the general path alone and of the Python fast path."""
    root, _ = metered
    raw = b"".join(p.read_bytes() if p.suffix != ".gz" else gzip.decompress(p.read_bytes())
                   for p in sorted((root / "node-a").iterdir())).splitlines()
    out = []
    for fold in (fold_line_reference, fold_line):
        state = AggregateState()
        _, stat = fold_lines(raw, "node-a/w.jsonl", "node-a", Period.everything(), state=state, fold=fold)
        state.files.append(stat)
        out.append(report_bytes(build_report(state, Period.everything())))
    assert out[0] == out[1] and b'"measured_share":0.' in out[0]


def test_without_requests_or_energy_no_made_up_figure(tmp_path, fold):
    services = [Svc("api", energy_kwh=0.002), Svc("cron", energy_kwh=0.001, requests=0),
                Svc("noop", energy_kwh=0.0, requests=4)]
    lines = synth.sealed_lines([synth.window_report(T0 + timedelta(minutes=i), services, embodied_g=0.5)
                                for i in range(3)])
    synth.write_agent(tmp_path / "archives", "agent-a", [lines], day="20261110")
    out, csv_dir, html = tmp_path / "r.json", tmp_path / "csv", tmp_path / "r.html"
    run = carbonspan("aggregate", tmp_path / "archives", "--from", "2026-11-10", "--to", "2026-11-10",
                     "--out", out, "--csv", csv_dir, "--html", html)
    assert run.returncode == 0, run.stderr
    apps = {a["service_name"]: a for a in orjson.loads(out.read_bytes())["applications"]}
    cron, noop = apps["cron"], apps["noop"]
    assert cron["operational_gco2e_per_request"] is None and cron["sci_gco2e_per_request"] is None
    assert cron["embodied_kgco2eq"] == 0.0 and cron["measured_share"] == 0.0  # energy, none of it metered
    assert noop["measured_share"] is None and noop["sci_gco2e_per_request"] > 0  # embodied only
    with (csv_dir / "services.csv").open(newline="", encoding="utf-8") as f:
        by = {r["service"]: r for r in csv.DictReader(f)}
    assert by["cron"]["sci_gco2e_per_request"] == "" and by["cron"]["operational_gco2e_per_request"] == ""
    assert by["noop"]["measured_share_fraction"] == ""
    page = html.read_text(encoding="utf-8")
    row = page.split('<td class="name" title="cron">cron</td>', 1)[1].split("</tr>", 1)[0]
    assert row.count('<td class="n">-</td>') == 2  # both per-request figures
    cron_line = next(line for line in run.stdout.splitlines() if " cron " in line)
    assert cron_line.count(" - ") >= 2


def test_a_per_request_column_keeps_one_unit(tmp_path, fold):
    import io

    from rich.console import Console

    from aggregator.render import print_summary

    services = [Svc(f"s{i}", energy_kwh=1e-4 * (i + 1), requests=50) for i in range(4)]
    lines = synth.sealed_lines([synth.window_report(T0 + timedelta(minutes=i), services) for i in range(2)])
    synth.write_agent(tmp_path / "archives", "agent-a", [lines], day="20261110")
    report = build_report(fold(tmp_path / "archives"), Period.everything())
    assert all(a.operational_gco2e_per_request < 1e-3 for a in report.applications)  # µg each
    report.applications[0].operational_gco2e_per_request = 2.5  # g, while the others are µg
    buf = io.StringIO()
    print_summary(report, Console(file=buf, width=80))
    rows = [line for line in buf.getvalue().splitlines() if any(f" {a.service_name} " in line for a in report.applications)]
    assert len(rows) == 4 and "2.500 g" in rows[0]
    # the column is in g on every row, as is carbon (the SCI column beside it keeps its own unit, µg)
    assert all(" mg " not in r and r.count(" \u00b5g ") == 1 and r.count(" g ") == 2 for r in rows), rows
