"""The terminal side of ``aggregate``: whole names off a TTY, no JSON dump unless asked,
repeated warnings summarised in one line with a count."""

from __future__ import annotations

import io
import logging

import orjson
from rich.console import Console

from aggregator.read import Period
from aggregator.render import print_summary
from aggregator.report import build_report
from carbonspan.cli import main

LONG = "checkout-service-production-europe-west-frankfurt-blue-green-canary-" + "x" * 60


def test_off_a_terminal_every_service_and_every_name_is_whole(mixed_archive, fold):
    report = build_report(fold(mixed_archive), Period.everything())
    report.applications[-1].service_name = LONG
    buf = io.StringIO()
    print_summary(report, Console(file=buf, width=80))
    text = buf.getvalue()
    assert LONG in text  # on one line, neither cut nor folded
    for app in report.applications:
        assert app.service_name in text
    assert "more" not in text.split("total ")[0]  # no "... N more" row


def test_without_out_no_json_on_stdout_and_with_out_dash_the_json(mixed_archive, capsys, caplog):
    args = ["aggregate", str(mixed_archive), "--from", "2026-11-10", "--to", "2026-11-10"]
    with caplog.at_level(logging.WARNING, logger="carbonspan.aggregate"):
        assert main(args) == 0
    out, err = capsys.readouterr()
    assert '"schema_version"' not in out and "carbon disclosure" in out
    assert f"the archives' hash chains were not verified by this run: carbonspan verify {mixed_archive} (or aggregate --verify)\n" in err
    assert "share of total carbon" in out
    assert "the JSON report was not written: pass --out FILE (or --out - for standard output)" in err
    fallback = [r.getMessage() for r in caplog.records if "I/O-proxy fallback" in r.getMessage()]
    # agent-a's three files each used the fallback: one shown, the other two in one line
    assert len(fallback) == 2 and fallback[1].startswith("... and 2 more warning(s) like")
    assert "inputs.fallback_files" in fallback[1]
    assert main([*args, "--out", "-"]) == 0
    out, err = capsys.readouterr()
    report = orjson.loads(out)
    assert "carbon disclosure" in err  # the summary goes to standard error when the JSON is on stdout
    assert report["inputs"]["fallback_files"] and len(report["inputs"]["fallback_files"]) == 3


def test_with_out_the_verify_line_names_the_report(mixed_archive, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["aggregate", str(mixed_archive), "--from", "2026-11-10", "--to", "2026-11-10",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"carbonspan verify {mixed_archive} --report {out}" in err and out.is_file()


def test_a_column_keeps_one_unit(mixed_archive, fold):
    report = build_report(fold(mixed_archive), Period.everything())
    report.applications[0].carbon_kgco2eq = 2.5  # kg, while the others are grams
    report.applications[0].energy_kwh = 1500.0  # MWh, while the others are Wh
    buf = io.StringIO()
    print_summary(report, Console(file=buf, width=80))
    rows = [line for line in buf.getvalue().splitlines() if any(a.service_name in line for a in report.applications)]
    assert len(rows) == len(report.applications)
    assert all(" MWh " in r and " kg " in r and " g " not in r and " Wh " not in r for r in rows)
    assert "2.500 kg" in rows[0] and "1.500 MWh" in rows[0]


def test_a_repeated_warning_points_to_where_the_json_lists_its_files(tmp_path, caplog):
    # two files with one-sided windows: the summary line must not send the reader to
    # inputs.fallback_files, which does not list them (the fallback's own line does), but to
    # inputs.one_sided_files (tests/aggregator/test_report_one_sided_files.py)
    from tests.aggregator.test_totals_props import _one_sided

    root = tmp_path / "archives"
    for i in range(3):
        (root / "agent-a").mkdir(parents=True, exist_ok=True)
        (root / "agent-a" / f"windows-20261110-{i:06d}.jsonl").write_bytes(b"".join(_one_sided("per_service_carbon_kgco2eq")))
    with caplog.at_level(logging.WARNING, logger="carbonspan.aggregate"):
        assert main(["aggregate", str(root), "--from", "2026-11-10", "--to", "2026-11-10"]) == 0
    lines = [r.getMessage() for r in caplog.records if "only one of per_service" in r.getMessage()]
    assert len(lines) == 2 and lines[1].startswith("... and 2 more warning(s) like")
    assert "inputs.fallback_files" not in lines[1] and "inputs.one_sided_files" in lines[1]
