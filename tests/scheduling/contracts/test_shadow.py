"""The shadow schedule and its report, worked by hand; all three run formats (docs/contracts.md)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from signal_rows import at, forecast, log, ms, observed, z

from scheduling.contracts import parse_contract
from scheduling.runs import read_runs
from scheduling.shadow import shadow_events, write_log
from scheduling.shadow_report import report
from schema.chainlog import verify

BASE = {"name": "reindex", "class": "flexible", "deadline": "06:00", "timezone": "UTC",
        "max_deferral_minutes": 240, "runtime": {"p50_minutes": 30, "p95_minutes": 60}, "energy_kwh": 10,
        "residency": ["r1"], "home_region": "r1", "checkpoint": "required", "cancellation": "safe"}
C = {"reindex": parse_contract(BASE)}
FC = [300.0] * 12 + [100.0, 100.0] + [300.0] * 10  # 00:00-06:00, the dip 03:00-03:30


def observed_day(dip: float = 100.0, drop: tuple[int, ...] = ()) -> list[dict]:
    """r1 observed 23:00 .. 07:00 in 15-minute intervals; 03:00-03:30 at ``dip``."""
    vals = [300.0] * 4 + [300.0] * 12 + [dip, dip] + [300.0] * 14
    rows = observed("r1", -60, vals)
    return [r for i, r in enumerate(rows) if i not in drop]


def runs_file(tmp_path: Path, runs: list[dict]) -> Path:
    p = tmp_path / "runs.jsonl"
    p.write_bytes(b"\n".join(orjson.dumps(r) for r in runs) + b"\n")
    return p


RUN = {"job": "reindex", "run_id": "r-1", "submitted": z(at(60)), "started": z(at(60)), "finished": z(at(90)),
       "region": "r1", "energy_kwh": 10}


def shadow(tmp_path: Path, sig, runs: list[dict], contracts=C) -> dict:
    evs = shadow_events(contracts, read_runs(runs_file(tmp_path, runs)), sig)
    out = tmp_path / "shadow.log"
    write_log(out, evs)
    assert verify(out) == []
    return report(out)


def test_report_arithmetic_with_an_exact_forecast(tmp_path: Path) -> None:
    doc = shadow(tmp_path, log(observed_day(), forecast("r1", 50, 0, FC)), [RUN])
    t = doc["total"]
    # recommended 03:00. p50 (30 min): 10 kWh x (300 - 100) = 2000 g; p95 (60 min): 10 x (300 - 200) = 1000 g;
    # the forecast equals the observations (MAPE 0), so both ranges are 1.0 .. 2.0 kg
    assert doc["forecast_mape"] == 0
    assert t["avoided_kgco2e_estimated"] == pytest.approx([1.0, 2.0])
    assert t["avoided_kgco2e_measured"] == pytest.approx([1.0, 2.0])
    assert (t["runs"], t["runs_differed"], t["coverage"], t["deadline_risk"]) == (1, 1, 1.0, 0)
    assert t["recommended_delay_minutes"]["max"] == 120 and t["deadline_slack_minutes_min"] == 120
    assert t["signal_sources"] == ["test-grid v1"] and not t["real_evidence"]


def test_report_arithmetic_with_forecast_error(tmp_path: Path) -> None:
    # observed dip 150, forecast dip 100. Interval errors |F - O| / O: actual side 0, 0, 0;
    # recommended p50 50/150, p95 (200 vs 225) 25/225, actual-duration 50/150 -> MAPE = (7/9) / 6 = 7/54
    doc = shadow(tmp_path, log(observed_day(dip=150.0), forecast("r1", 50, 0, FC)), [RUN])
    m = 7 / 54
    assert doc["forecast_mape"] == pytest.approx(m)
    # estimated: p50 2000 +/- 10 x m x 400; p95 1000 +/- 10 x m x 500 -> 1000 - 648.15 .. 2000 + 518.52 g
    lo, hi = doc["total"]["avoided_kgco2e_estimated"]
    assert lo == pytest.approx((1000 - 10 * m * 500) / 1000) and hi == pytest.approx((2000 + 10 * m * 400) / 1000)
    # measured: p50 10 x (300 - 150) = 1500, p95 10 x (300 - 225) = 750, actual 1500 -> 0.75 .. 1.5 kg
    assert doc["total"]["avoided_kgco2e_measured"] == pytest.approx([0.75, 1.5])


def test_a_run_it_cannot_measure_claims_nothing(tmp_path: Path) -> None:
    # the 03:15-03:30 observation is missing: the recommended interval is not covered
    doc = shadow(tmp_path, log(observed_day(drop=(17,)), forecast("r1", 50, 0, FC)), [RUN])
    t = doc["total"]
    assert t["avoided_kgco2e_measured"] is None and t["runs_measured"] == 0 and t["coverage"] == 0
    assert t["runs_not_measured"] == ["r-1"]
    assert ["r1", "2026-03-01T03:15:00Z", "2026-03-01T03:30:00Z"] in t["missing_intervals"]
    # the forecast existed, but a run it could not measure claims nothing, before the fact either
    assert t["avoided_kgco2e_estimated"] is None


def test_estimated_and_measured_cover_the_same_runs(tmp_path: Path) -> None:
    # two runs on two nights; the second night's 03:15-03:30 observation is missing. Only the
    # first is measured, and only its estimate counts: 1.0 .. 2.0 kg each way, not 2.0 .. 4.0
    night = observed_day()
    second = observed("r1", 24 * 60 - 60, [300.0] * 16 + [100.0, 100.0] + [300.0] * 14)
    second = [r for i, r in enumerate(second) if i != 17]
    sig = log(night, forecast("r1", 50, 0, FC), second, forecast("r1", 24 * 60 + 50, 24 * 60, FC))
    run2 = {**RUN, "run_id": "r-2", "submitted": z(at(24 * 60 + 60)), "started": z(at(24 * 60 + 60)),
            "finished": z(at(24 * 60 + 90))}
    t = shadow(tmp_path, sig, [RUN, run2])["total"]
    assert (t["runs"], t["runs_measured"], t["runs_not_measured"]) == (2, 1, ["r-2"])
    assert t["avoided_kgco2e_measured"] == pytest.approx([1.0, 2.0])
    assert t["avoided_kgco2e_estimated"] == pytest.approx([1.0, 2.0])


def test_only_the_jobs_own_restore_failures_count_and_the_kill_switch(tmp_path: Path) -> None:
    other = parse_contract({**BASE, "name": "other"})
    contracts = {**C, "other": other}
    fail = {"checkpoint_restore_failed": True, "region": "r1"}
    runs = [{"job": "other", "run_id": f"o{i}", "submitted": z(at(i)), "started": z(at(i)), "finished": z(at(i + 1)),
             **fail} for i in (10, 20)] + [RUN]
    sig = log(observed_day(), forecast("r1", 50, 0, FC))
    doc = shadow(tmp_path, sig, runs, contracts)
    assert doc["jobs"]["reindex"]["decisions"] == {"soft_objective/lowest_score": 1}
    # now the job's own two failures, earlier the same day: no automatic moves
    own = [{**r, "job": "reindex", "run_id": r["run_id"] + "x"} for r in runs[:2]]
    (tmp_path / "shadow.log").unlink()
    doc = shadow(tmp_path, sig, own + [RUN], contracts)
    assert doc["jobs"]["reindex"]["decisions"]["safety_gates/restore_failures"] == 1
    # queue age: runs started in the last hour waited 61 min on average -> the kill switch
    slow = {"job": "other", "run_id": "slow", "submitted": z(at(-2)), "started": z(at(59)), "finished": z(at(59.5))}
    (tmp_path / "shadow.log").unlink()
    doc = shadow(tmp_path, sig, [slow, RUN], contracts)
    assert doc["jobs"]["reindex"]["decisions"] == {"safety_gates/kill_switch": 1}


def test_three_run_formats(tmp_path: Path) -> None:
    k8s = {"apiVersion": "v1", "kind": "List", "items": [{
        "metadata": {"name": "reindex-29512345", "namespace": "search", "uid": "u-1",
                     "creationTimestamp": z(at(60)), "ownerReferences": [{"kind": "CronJob", "name": "reindex"}],
                     "labels": {"topology.kubernetes.io/region": "r1"}},
        "status": {"startTime": z(at(61)), "completionTime": z(at(90)), "succeeded": 1}},
        {"metadata": {"name": "running", "creationTimestamp": z(at(60))}, "status": {"startTime": z(at(61))}}]}
    (tmp_path / "jobs.json").write_text(json.dumps(k8s))
    rs = read_runs(tmp_path / "jobs.json")
    assert rs.format == "kubernetes" and len(rs.skipped) == 1
    (r,) = rs.runs
    assert (r.job, r.run_id, r.submitted, r.started, r.finished, r.region) == ("reindex", "u-1", ms(60), ms(61), ms(90), "r1")
    sec = ms(60) // 1000
    sacct = {"jobs": [{"job_id": 42, "name": "reindex", "restart_cnt": 1, "state": {"current": ["COMPLETED"]},
                       "time": {"submission": {"set": True, "infinite": False, "number": sec},
                                "start": {"set": True, "infinite": False, "number": sec + 60},
                                "end": {"set": True, "infinite": False, "number": sec + 1800}}},
                      {"job_id": 43, "name": "old", "time": {"submission": sec, "start": sec, "end": sec + 5}},
                      {"job_id": 44, "name": "pending", "time": {"submission": sec, "start": 0, "end": 0}}]}
    (tmp_path / "sacct.json").write_text(json.dumps(sacct))
    rs = read_runs(tmp_path / "sacct.json")
    assert rs.format == "slurm" and [x.run_id for x in rs.runs] == ["42", "43"] and len(rs.skipped) == 1
    assert (rs.runs[0].started, rs.runs[0].finished, rs.runs[0].retry) == (ms(61), ms(90), True)
    rs = read_runs(runs_file(tmp_path, [RUN, {"job": "reindex"}]))
    assert rs.format == "jsonl" and rs.runs[0].energy_kwh == 10 and "missing run_id" in rs.skipped[0]


def test_tampered_shadow_log_is_refused(tmp_path: Path) -> None:
    shadow(tmp_path, log(observed_day(), forecast("r1", 50, 0, FC)), [RUN])
    p = tmp_path / "shadow.log"
    lines = p.read_bytes().splitlines()
    rec = orjson.loads(lines[1])
    rec["event"]["decision"]["start"] = rec["event"]["run"]["submitted"]  # "it would have run at once"
    p.write_bytes(b"\n".join([lines[0], orjson.dumps(rec, option=orjson.OPT_SORT_KEYS), *lines[2:]]) + b"\n")
    with pytest.raises(ValueError, match="failed verification"):
        report(p)


def test_a_run_without_a_known_region_is_measured_at_home_and_counted(tmp_path: Path) -> None:
    doc = shadow(tmp_path, log(observed_day(), forecast("r1", 50, 0, FC)), [{**RUN, "region": "eu-somewhere"}])
    assert doc["total"]["runs_region_substituted"] == 1
    assert doc["total"]["avoided_kgco2e_measured"] == pytest.approx([1.0, 2.0])


def test_the_html_report_holds_every_figure_of_the_report(tmp_path: Path) -> None:
    from scheduling.shadow_report import HTML_COLUMNS, render_html

    doc = shadow(tmp_path, log(observed_day(drop=(17,)), forecast("r1", 50, 0, FC)), [RUN])
    assert {k for k, _ in HTML_COLUMNS} == set(doc["total"])  # docs: "a table of the same figures"
    page = render_html(doc)
    for _, title in HTML_COLUMNS:
        assert f"<th>{title}</th>" in page
    assert "r1 2026-03-01T03:15:00Z .. 2026-03-01T03:30:00Z" in page  # the excluded interval, named
    assert "soft_objective/lowest_score 1" in page and "test-grid v1" in page and "not measured" in page
