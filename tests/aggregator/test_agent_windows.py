"""Windows scored by the real agent (pinned interfaces: decode, score, build_report) are
archived in the pinned layout, then aggregated and verified: invariants hold, figures agree."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agent.config import load_config, parse_green
from agent.otlp import decode_protobuf
from agent.score import ScoringContext, score_batch
from agent.window import build_report
from aggregator import synth
from carbonspan.cli import main


def _workload():
    """``bench/workload.py`` loaded by path (the bench package is not installed)."""
    path = Path(__file__).resolve().parents[2] / "bench" / "workload.py"
    spec = importlib.util.spec_from_file_location("aggregator_test_workload", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

T0_NS = 1_764_460_800 * 10**9  # 2025-11-30T00:00:00Z


def test_real_agent_windows_aggregate_and_verify(tmp_path, capsys):
    ctx = ScoringContext.from_config(load_config(None).green)
    make_request_bytes = _workload().make_request_bytes
    reports = []
    for i in range(12):
        partial = score_batch(decode_protobuf(make_request_bytes(n_spans=128, seed=i)), ctx)
        start = T0_NS + i * 60 * 10**9
        reports.append(build_report(partial, ctx, start, start + 60 * 10**9, agent_id="node-a"))
    root = tmp_path / "archives"
    synth.write_agent(root, "node-a", synth.split(synth.sealed_lines(reports), 3), gzip_files=[0])
    out = tmp_path / "report.json"
    assert main(["aggregate", str(root), "--from", "2025-11-30", "--to", "2025-11-30", "--out", str(out)]) == 0
    assert main(["verify", str(root), "--report", str(out)]) == 0
    assert "re-derives to the same content hash" in capsys.readouterr().out
    report = json.loads(out.read_bytes())
    agg = report["aggregate"]
    assert agg["runtime_windows"] == 12 and agg["fallback_windows"] == 0
    assert agg["sanitised_values"] == 0 and agg["missing_values"] == 0
    app_energy = sum(r.green_summary.application_energy_kwh() for r in reports)
    assert sum(a["energy_kwh"] for a in report["applications"]) == pytest.approx(app_energy)
    operational_kg = sum(r.green_summary.co2.operational_gco2 for r in reports) / 1000
    assert agg["carbon_breakdown"]["operational_kgco2eq"] == pytest.approx(operational_kg)
    embodied_kg = sum(r.green_summary.co2.embodied_gco2 for r in reports) / 1000
    assert agg["carbon_breakdown"]["embodied_kgco2eq"] == pytest.approx(embodied_kg)


def test_windows_per_root_span_and_older_lines_without_it_aggregate_and_verify(tmp_path, capsys):
    """An agent switched to embodied_per = "root_span" midway: its older lines have no
    window.root_spans and no methodology.embodied_per (charged per trace). The aggregator
    adds each line's embodied carbon as written and lists both units in the methodology."""
    make_request = _workload().make_request
    lines, roots = [], []
    for i in range(8):
        unit = "trace" if i < 4 else "root_span"
        ctx = ScoringContext.from_config(parse_green({"embodied_per": unit}))
        request, seen = make_request(n_spans=128, seed=i), set()
        for span in (s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans):
            if span.trace_id not in seen:  # the workload's spans all have parents: give each
                seen.add(span.trace_id)  # trace a root, its first span in the request
                span.parent_span_id = b""
        roots.append(len(seen))
        partial = score_batch(decode_protobuf(request.SerializeToString()), ctx)
        start = T0_NS + i * 60 * 10**9
        line = build_report(partial, ctx, start, start + 60 * 10**9, agent_id="node-a").model_dump(mode="json")
        if unit == "trace":  # as an agent before root spans were counted wrote it
            del line["window"]["root_spans"]
            del line["methodology"]["embodied_per"], line["methodology"]["embodied_carbon_per_request_gco2"]
        lines.append(line)
    root = tmp_path / "archives"
    synth.write_agent(root, "node-a", synth.split(synth.sealed_lines(lines), 2))
    out = tmp_path / "report.json"
    assert main(["aggregate", str(root), "--from", "2025-11-30", "--to", "2025-11-30", "--out", str(out)]) == 0
    assert main(["verify", str(root), "--report", str(out)]) == 0
    assert "re-derives to the same content hash" in capsys.readouterr().out
    report = json.loads(out.read_bytes())
    assert report["aggregate"]["runtime_windows"] == 8 and report["aggregate"]["sanitised_values"] == 0
    embodied_kg = sum(line["green_summary"]["co2"]["embodied_gco2"] for line in lines) / 1000
    assert report["aggregate"]["carbon_breakdown"]["embodied_kgco2eq"] == pytest.approx(embodied_kg)
    assert report["methodology"]["window_methodology"]["embodied_per"] == ["root_span"]
    for line, n in zip(lines, roots, strict=True):  # here every trace has its root in its window
        assert line["window"]["traces"] == n
        assert line["green_summary"]["co2"]["embodied_gco2"] == pytest.approx(n * 0.001, rel=1e-12)
    assert [line["window"]["root_spans"] for line in lines[4:]] == roots[4:]
