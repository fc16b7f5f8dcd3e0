"""``aggregate --csv DIR``: every service of the report, with the report's own figures."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson

from aggregator import synth
from carbonspan.cli import main
from tests.aggregator.conftest import T0

N_SERVICES = 60


def _archive(root: Path) -> Path:
    lines = synth.sealed_lines(synth.realistic(30, seed=3, n_services=N_SERVICES, start=T0))
    synth.write_agent(root, "agent-a", synth.split(lines, 2), gzip_files=[], day="20261110")
    return root


def _run(tmp_path: Path, name: str) -> tuple[dict, Path]:
    out, csv_dir = tmp_path / f"{name}.json", tmp_path / name
    assert main(["aggregate", str(tmp_path / "archives"), "--from", "2026-11-10", "--to", "2026-11-10",
                 "--out", str(out), "--csv", str(csv_dir)]) == 0
    return orjson.loads(out.read_bytes()), csv_dir


def test_every_service_is_in_the_csv_with_the_report_figures(tmp_path):
    _archive(tmp_path / "archives")
    report, csv_dir = _run(tmp_path, "a")
    with (csv_dir / "services.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    apps = report["applications"]
    assert len(apps) >= N_SERVICES and len(rows) == len(apps)
    for row, app in zip(rows, apps, strict=True):
        assert row["service"] == app["service_name"] and row["region"] == app["region"]
        assert float(row["energy_kwh"]) == app["energy_kwh"]
        assert float(row["operational_carbon_kgco2e"]) == app["carbon_kgco2eq"]
        assert int(row["requests"]) == app["requests"]
        assert float(row["share_of_total_carbon_fraction"]) == app["share_of_total"]
        assert float(row["operational_gco2e_per_request"]) == app["carbon_kgco2eq"] * 1000 / app["requests"]
        assert row["energy_model"] == app["energy_model"]
    # full precision: the column sums to the report's operational carbon
    total = sum(float(r["operational_carbon_kgco2e"]) for r in rows)
    assert abs(total - report["aggregate"]["carbon_breakdown"]["operational_kgco2eq"]) < 1e-12
    with (csv_dir / "regions.csv").open(newline="", encoding="utf-8") as f:
        regions = list(csv.DictReader(f))
    assert [r["region"] for r in regions] == [r["region"] for r in report["regions"]]
    for row, reg in zip(regions, report["regions"], strict=True):
        assert float(row["energy_kwh"]) == reg["energy_kwh"]
        assert float(row["carbon_kgco2e"]) == reg["carbon_kgco2eq"]
        assert float(row["grid_intensity_gco2e_per_kwh"]) == reg["grid_intensity_gco2_kwh"]
    # same archives, same bytes
    _, again = _run(tmp_path, "b")
    for name in ("services.csv", "regions.csv"):
        assert (csv_dir / name).read_bytes() == (again / name).read_bytes()


def test_a_service_name_with_commas_quotes_and_newlines_survives(tmp_path, fold):
    from aggregator.read import Period
    from aggregator.render_csv import services_csv
    from aggregator.report import build_report

    report = build_report(fold(_archive(tmp_path / "archives")), Period.everything())
    report.applications[0].service_name = 'a,"b"\nc'
    rows = list(csv.reader(io.StringIO(services_csv(report), newline="")))
    assert rows[1][0] == 'a,"b"\nc' and len(rows) == len(report.applications) + 1
