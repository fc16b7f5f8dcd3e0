"""The real console script, run as a subprocess: carbonspan policy ... and carbonspan place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CARBONSPAN = str(Path(sys.executable).parent / "carbonspan")
JSON_KEYS = {"trace", "policies", "best_simple", "candidate", "delta_pp", "margin_pp", "verdict"}


def run(*args, env_extra=None, check=True):
    env = dict(os.environ, **(env_extra or {}))
    proc = subprocess.run([CARBONSPAN, *args], capture_output=True, text=True, env=env, timeout=60)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def write(path: Path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def test_sample_then_evaluate_json_has_exactly_the_issue_shape(tmp_path, audit_log):
    out = tmp_path / "sample.json"
    run("policy", "sample", "--out", str(out))
    res = json.loads(run("policy", "evaluate", "forecast-greedy", "--trace", str(out), "--json",
                         "--record").stdout)
    assert set(res) == JSON_KEYS
    assert set(res["trace"]) == {"digest", "method", "synthetic"} and res["trace"]["synthetic"] is True
    assert set(res["verdict"]) == {"ships", "action", "reason"}
    assert all(set(v) == {"emissions_g", "reduction_pct"} for v in res["policies"].values())
    assert res["verdict"]["ships"] == "forecast-greedy" and res["margin_pp"] == 5.0
    listing = run("policy", "list").stdout
    assert "synthetic" in listing and "forecast-greedy" in listing


def test_record_status_place_round_trip(tmp_path, audit_log, spatial_win_doc):
    trace = write(tmp_path / "grid.json", spatial_win_doc)
    job = write(tmp_path / "job.json", {"id": "etl-7", "size": 2})
    clusters = write(tmp_path / "clusters.json", [
        {"name": "a", "region": "DE", "carbon_intensity": 380, "cost_per_hour": 1.2, "capacity": 8, "used": 3},
        {"name": "b", "region": "FR", "carbon_intensity": 60, "cost_per_hour": 1.5, "capacity": 8, "used": 5},
    ])
    before = json.loads(run("place", "--job", job, "--clusters", clusters, "--policy", "cost-aware",
                            "--json").stdout)
    assert before["cluster"] == "a"  # unmeasured: carbon withheld, cost decides
    assert before["objectives"]["placement_policy"]["action"] == "carbon-withheld"
    dry = run("policy", "evaluate", "carbon-aware", "--trace", trace)
    assert "decision figure" in dry.stdout and "ship-candidate" in dry.stdout
    assert "replaced" in run("policy", "status", "carbon-aware").stdout  # a dry run records nothing
    run("policy", "evaluate", "carbon-aware", "--trace", trace, "--record")
    status = json.loads(run("policy", "status", "carbon-aware", "--json").stdout)
    assert status["action"] == "as-requested" and status["evidence"]["seq"] == 0
    placed = run("place", "--job", job, "--clusters", clusters, "--policy", "carbon-aware")
    assert placed.stdout.startswith("job etl-7 -> cluster b (region FR)")
    assert "[placement policy: carbon-aware: won evaluation seq 0" in placed.stdout
    warn = run("policy", "status", "cost-aware", env_extra={"CARBONSPAN_CARBON_POLICY_GATE": "warn"})
    assert "enforce would" in warn.stdout


def test_tampered_log_fails_closed_in_every_command(tmp_path, audit_log, spatial_win_doc):
    trace = write(tmp_path / "grid.json", spatial_win_doc)
    run("policy", "evaluate", "carbon-aware", "--trace", trace, "--record")
    audit_log.write_text(audit_log.read_text().replace('"ship-candidate"', '"ship-CANDIDATE"'))
    listing = run("policy", "list", check=False)
    assert listing.returncode == 1 and "chain is broken" in listing.stderr
    status = run("policy", "status", "carbon-aware").stdout
    assert "carbon-simple" in status and "fail closed" in status
    rec = run("policy", "evaluate", "carbon-aware", "--trace", trace, "--record", check=False)
    assert rec.returncode == 1 and "refusing to append" in rec.stderr


def test_bad_input_is_a_clear_error(tmp_path, flat_doc):
    flat_doc["jobs"][0]["slack"] = 100
    trace = write(tmp_path / "bad.json", flat_doc)
    proc = run("policy", "evaluate", "carbon-aware", "--trace", trace, check=False)
    assert proc.returncode == 2 and "job 'only'" in proc.stderr and "runs past the trace" in proc.stderr
    flat_doc["jobs"][0]["slack"] = 0
    proc = run("policy", "evaluate", "oracle", "--trace", write(tmp_path / "ok.json", flat_doc), check=False)
    assert proc.returncode == 2 and "reference policy" in proc.stderr
    proc = run("place", "--job", str(tmp_path / "missing.json"), "--clusters", trace, check=False)
    assert proc.returncode == 2 and "cannot read job" in proc.stderr


def test_cli_places_with_an_entry_point_provider(tmp_path):
    site = tmp_path / "site"
    (site / "cs_cliplugin").mkdir(parents=True)
    (site / "cs_cliplugin" / "__init__.py").write_text(
        "class Cheapest:\n    name = 'cheapest'\n"
        "    def score(self, clusters, job):\n        return [-c['cost_per_hour'] for c in clusters]\n")
    info = site / "cs_cliplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cs-cliplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[carbonspan.placement_policies]\ncheapest = cs_cliplugin:Cheapest\n")
    job = write(tmp_path / "job.json", {"id": "j"})
    clusters = write(tmp_path / "c.json", [
        {"name": "x", "region": "A", "carbon_intensity": 10, "cost_per_hour": 3, "capacity": 4, "used": 0},
        {"name": "y", "region": "B", "carbon_intensity": 900, "cost_per_hour": 1, "capacity": 4, "used": 0},
    ])
    proc = run("place", "--job", job, "--clusters", clusters, "--policy", "cheapest",
               env_extra={"PYTHONPATH": str(site)})
    assert "cluster y" in proc.stdout and "does not weigh carbon" in proc.stdout


def test_malformed_trace_unknown_policy_and_bad_clusters_are_clear_errors(tmp_path, flat_doc):
    bad = tmp_path / "bad.json"
    bad.write_text('{"method": "average", "regions": {"A": [1, 2')
    proc = run("policy", "evaluate", "forecast-greedy", "--trace", str(bad), check=False)
    assert proc.returncode == 2 and f"trace {bad} is not valid JSON" in proc.stderr
    assert "Traceback" not in proc.stderr
    ok = write(tmp_path / "ok.json", flat_doc)
    proc = run("policy", "evaluate", "nope", "--trace", ok, check=False)
    assert proc.returncode == 2 and "no placement policy named 'nope'; available: carbon-aware" in proc.stderr
    job = write(tmp_path / "job.json", {"id": "j"})
    good = [{"name": "a", "region": "DE", "carbon_intensity": 10, "cost_per_hour": 1, "capacity": 2, "used": 0}]
    proc = run("place", "--job", job, "--clusters", write(tmp_path / "c.json", good), "--policy", "nope",
               check=False)
    assert proc.returncode == 2 and "no placement policy named 'nope'" in proc.stderr
    worse = [dict(good[0], carbon_intensity="high")]
    proc = run("place", "--job", job, "--clusters", write(tmp_path / "w.json", worse), check=False)
    assert proc.returncode == 2
    assert "cluster 'a': 'carbon_intensity' must be a number >= 0 or null (unknown), got 'high'" in proc.stderr
    big = write(tmp_path / "big.json", {"id": "j", "size": "big"})
    proc = run("place", "--job", big, "--clusters", write(tmp_path / "c2.json", good), check=False)
    assert proc.returncode == 2 and "job 'j': 'size' must be a number >= 0" in proc.stderr


def test_evaluate_notes_jobs_forecast_greedy_cannot_forecast(tmp_path, flat_doc, capsys):
    import argparse

    from placement.cli import _evaluate

    flat_doc["jobs"].append({"id": "early", "submit": 3, "duration": 1, "energy_kwh": 1.0})
    args = argparse.Namespace(trace=write(tmp_path / "t.json", flat_doc), name="forecast-greedy",
                              record=False, json=True, audit_log=None)
    assert _evaluate(args) == 0
    err = capsys.readouterr().err
    assert "1 of 2 jobs are submitted before hour 24" in err and "at once at home" in err
    args.name = "carbon-aware"  # the note is about forecast-greedy only
    assert _evaluate(args) == 0 and "note:" not in capsys.readouterr().err


def test_the_summary_prints_the_margin_the_verdict_is_decided_on(tmp_path):
    """A margin of 7.15000001 pp: Δ +7.15 is short of it, and the summary line must not say
    'margin 7.15 pp' (as :g did) beside a verdict that says short of the margin."""
    out = tmp_path / "sample.json"
    run("policy", "sample", "--out", str(out))
    text = run("policy", "evaluate", "forecast-greedy", "--trace", str(out),
               env_extra={"CARBONSPAN_CARBON_POLICY_MARGIN_PP": "7.15000001"}).stdout
    assert "delta +7.15 pp  margin 7.15000001 pp" in text, text
    assert "short of the margin 7.15000001 pp" in text


def test_place_and_policy_help_say_what_r_ec_and_r_ed_are():
    for command in ("place", "policy"):
        text = " ".join(run(command, "--help").stdout.split())
        assert "R-ec: a carbon-aware policy places on carbon only if it beats the better simple baseline" in text
        assert "R-ed: if what ships reduces emissions by less than CARBONSPAN_CARBON_POLICY_RETIRE_BELOW_PCT" in text
