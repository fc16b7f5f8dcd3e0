"""The one-sided windows' warning has its files listed in the JSON, with a count per file
(``inputs.one_sided_files``, ``inputs.files[].one_sided_windows``), as the fallback warning has
``inputs.fallback_files``; the terminal's summary line of the repeated warning points there,
and the Dask engine gives the local engine's bytes."""

from __future__ import annotations

import gzip
import logging
from datetime import timedelta

import orjson
import pytest
from distributed import Client, LocalCluster

from aggregator import synth
from aggregator.engines import run_dask, run_local
from aggregator.files import discover
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
from aggregator.verify_inputs import named_as_stated
from carbonspan.cli import main
from tests.aggregator.conftest import T0

PERIOD = Period.parse("2026-11-10", "2026-11-10")


def _one_sided(minute: int) -> dict:
    """One window of "api" whose per-service carbon map is empty (energy map full)."""
    start = T0 + timedelta(minutes=minute)
    iso = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return {"window": {"start": iso(start), "end": iso(start + timedelta(minutes=1)), "traces": 1},
            "green_summary": {"energy_kwh": 3e-7, "total_io_ops": 3,
                              "co2": {"operational_gco2": 8.06e-5, "total": {"mid": 8.06e-5}},
                              "per_service_energy_kwh": {"api": 3e-7}, "per_service_carbon_kgco2eq": {}},
            "per_endpoint_io_ops": [{"service": "api", "endpoint": "GET /", "io_ops": 3}]}


def _archive(root):
    """agent-a: file 0 one one-sided window, file 1 two, file 2 none (a runtime window)."""
    reports = [_one_sided(0), _one_sided(1), _one_sided(2),
               synth.window_report(T0 + timedelta(minutes=3), [synth.Svc("api")])]
    sealed = synth.sealed_lines(reports)
    return synth.write_agent(root, "agent-a", [sealed[:1], sealed[1:3], sealed[3:]], day="20261110")


def test_the_json_lists_the_files_with_one_sided_windows_and_their_counts(tmp_path):
    paths = _archive(tmp_path / "archives")
    report = build_report(run_local(discover([str(tmp_path / "archives")]), PERIOD), PERIOD)
    inp = report.inputs
    assert [f.one_sided_windows for f in inp.files] == [1, 2, 0]
    assert inp.one_sided_files == [f"agent-a/{paths[0].name}", f"agent-a/{paths[1].name}"]
    assert sum(f.one_sided_windows for f in inp.files) == report.aggregate.one_sided_windows == 3
    warning = [w for w in report.warnings if w.code == "one_sided_windows"]
    assert len(warning) == 1 and "inputs.one_sided_files" in warning[0].message


def test_the_summary_line_of_the_repeated_warning_points_to_those_files(tmp_path, caplog):
    _archive(tmp_path / "archives")
    out = tmp_path / "r.json"
    with caplog.at_level(logging.WARNING, logger="carbonspan.aggregate"):
        assert main(["aggregate", str(tmp_path / "archives"), "--from", "2026-11-10", "--to", "2026-11-10",
                     "--out", str(out)]) == 0
    lines = [r.getMessage() for r in caplog.records if "only one of per_service" in r.getMessage()]
    assert len(lines) == 2 and lines[1].startswith("... and 1 more warning(s) like")
    assert "inputs.one_sided_files" in lines[1] and "inputs.files[].one_sided_windows" in lines[1]
    assert "inputs.fallback_files" not in lines[1]
    listed = orjson.loads(out.read_bytes())["inputs"]
    assert len(listed["one_sided_files"]) == 2  # the files the line counts: the first and 1 more


def test_a_rotated_file_keeps_its_name_in_one_sided_files(tmp_path):
    paths = _archive(tmp_path / "archives")
    stated = orjson.loads(report_bytes(build_report(run_local(discover([str(tmp_path / "archives")]), PERIOD),
                                                    PERIOD)))
    gz = paths[1].with_name(paths[1].name + ".gz")  # rotation compresses file 1 after the report
    gz.write_bytes(gzip.compress(paths[1].read_bytes(), mtime=0))
    paths[1].unlink()
    fresh = orjson.loads(report_bytes(build_report(run_local(discover([str(tmp_path / "archives")]), PERIOD),
                                                   PERIOD)))
    assert fresh["inputs"]["one_sided_files"][1] == f"agent-a/{gz.name}"
    relabelled, renames = named_as_stated(fresh, stated)
    assert relabelled["inputs"]["one_sided_files"] == stated["inputs"]["one_sided_files"] and len(renames) == 1


@pytest.mark.timeout(120)
def test_dask_gives_the_local_bytes(tmp_path):
    _archive(tmp_path / "archives")
    files = discover([str(tmp_path / "archives")])
    local = report_bytes(build_report(run_local(files, PERIOD), PERIOD))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        assert report_bytes(build_report(run_dask(files, PERIOD, client=client), PERIOD)) == local
