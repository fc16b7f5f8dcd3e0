"""``aggregate --compare PREVIOUS.json``: the change per service and in total, in the JSON,
the terminal, the CSV and the HTML; PREVIOUS refused when it is not a report, was edited or
does not come before; ``verify --report`` re-derives the comparison (with or without
``--previous``). Every run is the real CLI in a subprocess over real sealed archive files."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from aggregator import synth
from aggregator.report import content_hash
from aggregator.synth import Svc
from schema.canonical import canonical_json
from tests.aggregator.conftest import T0

ROOT = Path(__file__).resolve().parents[2]
DAY1 = [Svc("api", energy_kwh=0.002), Svc("pay", "eu-central-1", 0.001),
        Svc("idle", energy_kwh=0.0, requests=0), Svc("old", energy_kwh=0.0005)]
DAY2 = [Svc("api", energy_kwh=0.003), Svc("pay", "eu-central-1", 0.001),
        Svc("idle", energy_kwh=0.0001, requests=3), Svc("new", energy_kwh=0.0007)]
N = 5  # windows a day


def carbonspan(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "carbonspan", *map(str, args)], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """One agent's chain over two days: 2026-11-10 (DAY1) then 2026-11-11 (DAY2), one file each."""
    root = tmp_path / "archives"
    reports = [synth.window_report(T0 + timedelta(minutes=i), DAY1, embodied_g=0.1) for i in range(N)]
    reports += [synth.window_report(T0 + timedelta(days=1, minutes=i), DAY2, embodied_g=0.1) for i in range(N)]
    lines = synth.sealed_lines(reports)
    synth.write_agent(root, "agent-a", [lines[:N]], day="20261110")
    synth.write_agent(root, "agent-a", [lines[N:]], day="20261111")
    return root


def _day(archive: Path, day: str, out: Path, *extra: str | Path) -> subprocess.CompletedProcess[str]:
    return carbonspan("aggregate", archive, "--from", day, "--to", day, "--out", out, *extra)


def _kg(svc: Svc) -> float:
    intensity, pue = synth.REGIONS[svc.region]
    return N * svc.energy_kwh * intensity * pue / 1000.0


def _line(table: str, name: str) -> str:
    """The row of a printed table whose first cell is ``name``."""
    return next(x for x in table.splitlines() if x.count("\u2502") > 1 and x.split("\u2502")[1].strip() == name)


def test_the_comparison_per_service_and_in_total_in_every_rendering(archive, tmp_path):
    prev, cur, csv_dir, html = tmp_path / "prev.json", tmp_path / "cur.json", tmp_path / "csv", tmp_path / "r.html"
    assert _day(archive, "2026-11-10", prev).returncode == 0
    run = _day(archive, "2026-11-11", cur, "--compare", prev, "--csv", csv_dir, "--html", html)
    assert run.returncode == 0, run.stderr
    previous, report = orjson.loads(prev.read_bytes()), orjson.loads(cur.read_bytes())
    assert "comparison" not in previous  # without --compare the block is absent
    c = report["comparison"]
    assert c["previous"]["content_hash"] == previous["integrity"]["content_hash"]
    assert c["previous"]["period"] == previous["period"] and c["gap_seconds"] == 0.0
    by = {s["service_name"]: s for s in c["services"]}
    assert [s["service_name"] for s in c["services"]] == [a["service_name"] for a in report["applications"]] + ["old"]
    assert {k: s["status"] for k, s in by.items()} == {"api": "both", "pay": "both", "idle": "both",
                                                      "new": "appeared", "old": "disappeared"}
    assert c["appeared"] == ["new"] and c["disappeared"] == ["old"]
    api = by["api"]["carbon_kgco2eq"]
    assert api["previous"] == pytest.approx(_kg(DAY1[0])) and api["current"] == pytest.approx(_kg(DAY2[0]))
    assert api["change"] == api["current"] - api["previous"] and api["change_percent"] == pytest.approx(50.0)
    assert by["old"]["carbon_kgco2eq"]["change_percent"] == -100.0 and by["old"]["energy_kwh"]["current"] == 0.0
    # a previous 0 has no percentage: null, counted, never 0 % or a division by zero
    for name in ("new", "idle"):
        assert by[name]["carbon_kgco2eq"]["previous"] == 0.0 and by[name]["carbon_kgco2eq"]["change_percent"] is None
        assert by[name]["requests"]["change_percent"] is None
    nulls = [ch for s in c["services"] for ch in (s["energy_kwh"], s["carbon_kgco2eq"], s["requests"])
             if ch["change_percent"] is None]
    assert c["undefined_percent"] == len(nulls) == 6
    t = c["total"]
    assert t["carbon_kgco2eq"]["previous"] == previous["aggregate"]["total_carbon_kgco2eq"]
    assert t["carbon_kgco2eq"]["current"] == report["aggregate"]["total_carbon_kgco2eq"]
    assert t["requests"]["previous"] == 150 and t["requests"]["current"] == 165
    sci = t["sci_gco2e_per_request"]
    b = report["aggregate"]["carbon_breakdown"]
    assert sci["current"] == (b["operational_kgco2eq"] + b["embodied_kgco2eq"]) * 1000.0 / 165
    assert any("cover" in n for n in c["notes"])  # a few minutes of each day: coverage is said
    # terminal: both tables, the undefined percentages said in words, the verify line names --previous
    out = run.stdout
    assert "against the previous period 2026-11-10T00:00:00Z up to 2026-11-11T00:00:00Z" in out
    assert "n/a (was 0)" in out and "appeared 1 (new); disappeared 1 (old)" in out
    assert "6 change(s) have no percentage" in out and "+50.0 %" in out and "-100.0 %" in out
    assert f"--report {cur} --previous {prev}" in run.stderr
    # energy per service too: its change and %, "n/a (was 0)" where it was 0 (idle)
    assert "energy change %" in out and "carbon change %" in out
    per = out.split("per service, before and now")[1]
    api_line = _line(per, "api")
    assert "+5.000 Wh" in api_line and api_line.count("+50.0 %") == 2, api_line  # 10 Wh -> 15 Wh; carbon alike
    idle_line = _line(per, "idle")
    assert "+0.500 Wh" in idle_line and idle_line.count("n/a (was 0)") == 3, idle_line  # energy, carbon, requests
    # requests per service too: the change and its % (0 -> 15 for idle; 50 -> 0 for old)
    cells = lambda line: [c.strip() for c in line.split("\u2502")][1:-1]  # noqa: E731
    assert "requests change %" in out and cells(idle_line)[-2:] == ["+15", "n/a (was 0)"], idle_line
    assert cells(_line(per, "old"))[-4:] == ["50", "0", "-50", "-100.0 %"]
    assert "columns left out" not in out  # off a terminal every column
    # the new/gone column has a header, in the terminal and the HTML
    assert re.search(r"┃ service +┃ new/gone ┃ energy", out), out
    # CSV: every service, the report's figures in full precision, empty where undefined
    with (csv_dir / "comparison.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["service"] for r in rows] == [s["service_name"] for s in c["services"]]
    for row, s in zip(rows, c["services"], strict=True):
        assert row["status"] == s["status"]
        assert float(row["carbon_change_kgco2e"]) == s["carbon_kgco2eq"]["change"]
        pct = s["carbon_kgco2eq"]["change_percent"]
        assert row["carbon_change_percent"] == ("" if pct is None else repr(pct))
    with (csv_dir / "comparison_total.csv").open(newline="", encoding="utf-8") as f:
        totals = {r["figure"]: r for r in csv.DictReader(f)}
    assert float(totals["carbon_kgco2eq"]["change"]) == t["carbon_kgco2eq"]["change"]
    assert totals["requests"]["previous"] == "150" and totals["sci_gco2e_per_request"]["unit"] == "gCO2e/request"
    # HTML: the section with every service
    page = html.read_text(encoding="utf-8")
    section = page.split("<h2>Against the previous period</h2>")[1].split("<h2>")[0]
    assert previous["integrity"]["content_hash"] in section and "n/a (was 0)" in section
    for name in by:
        assert f'<td class="name" title="{name}">{name}</td>' in section
    assert '<th>service</th><th>new/gone</th><th class="n">energy before</th>' in section
    assert "Appeared (1): new." in section and "Disappeared (1): old." in section
    assert '<th class="n">energy change</th><th class="n">energy change %</th>' in section
    api_row = section.split('title="api">api</td>')[1].split("</tr>")[0]
    assert '<td class="n">+5.000 Wh</td><td class="n">+50.0 %</td>' in api_row, api_row
    idle_row = section.split('title="idle">idle</td>')[1].split("</tr>")[0]
    assert '<td class="n">+0.500 Wh</td><td class="n">n/a (was 0)</td>' in idle_row, idle_row
    old_row = section.split('title="old">old</td>')[1].split("</tr>")[0]
    assert '<td class="n">-2.500 Wh</td><td class="n">-100.0 %</td>' in old_row, old_row
    assert '<th class="n">requests change</th><th class="n">requests change %</th>' in section
    assert old_row.endswith('<td class="n">-50</td><td class="n">-100.0 %</td>'), old_row
    assert idle_row.endswith('<td class="n">+15</td><td class="n">n/a (was 0)</td>'), idle_row
    assert api_row.endswith('<td class="n">+0</td><td class="n">+0.0 %</td>'), api_row


def test_a_previous_report_that_cannot_be_compared_is_refused_before_reading(archive, tmp_path):
    prev, cur = tmp_path / "prev.json", tmp_path / "cur.json"
    assert _day(archive, "2026-11-10", prev).returncode == 0
    data = orjson.loads(prev.read_bytes())
    cases: dict[str, tuple[bytes, str]] = {
        "html.json": (b"<!DOCTYPE html><html>", "is not JSON"),
        "other.json": (b'{"resourceSpans": []}', "is not a carbonspan disclosure report"),
        "broken.json": (orjson.dumps({**data, "aggregate": {"windows": "many"}}), "not a disclosure report this carbonspan can read"),
    }
    edited = {**data, "aggregate": {**data["aggregate"], "total_carbon_kgco2eq": 0.0}}
    cases["edited.json"] = (canonical_json(edited), "was changed after it was written")
    for name, (body, message) in cases.items():
        (tmp_path / name).write_bytes(body)
        run = _day(archive, "2026-11-11", cur, "--compare", tmp_path / name)
        assert run.returncode == 2 and message in run.stderr, (name, run.stderr)
        assert not cur.exists()
    # the same report re-hashed after an edit is a report again (the check is the hash, not the bytes)
    edited["integrity"]["content_hash"] = content_hash(edited)
    (tmp_path / "rehashed.json").write_bytes(canonical_json(edited))
    assert _day(archive, "2026-11-11", cur, "--compare", tmp_path / "rehashed.json").returncode == 0
    cur.unlink()
    # periods: overlapping (the same day, or a two-day period over it) and following are refused
    for frm, to, message in (("2026-11-10", "2026-11-10", "T00:00:00Z) by 86,400 s (1.00 days)"),
                             ("2026-11-09", "2026-11-10", "2026-11-11T00:00:00Z) by 86,400 s"),
                             ("2026-11-01", "2026-11-09", "after this period")):
        run = carbonspan("aggregate", archive, "--from", frm, "--to", to, "--out", cur, "--compare", prev)
        assert run.returncode == 2 and message in run.stderr, run.stderr
        assert ("overlaps this period" in run.stderr) == ("by 86,400 s" in message)
        assert not cur.exists()
    run = carbonspan("aggregate", archive, "--from", "2026-11-12", "--to", "2026-11-12", "--compare", prev,
                     "--allow-empty", "--format", "json")
    assert run.returncode == 0  # a gap between the periods is allowed, and said
    gap = orjson.loads(run.stdout)["comparison"]
    assert gap["gap_seconds"] == 86400.0 and any("in neither report" in n for n in gap["notes"])


def test_verify_re_derives_the_comparison_with_or_without_the_previous_report(archive, tmp_path):
    prev, cur, other = tmp_path / "prev.json", tmp_path / "cur.json", tmp_path / "other.json"
    assert _day(archive, "2026-11-10", prev).returncode == 0
    assert _day(archive, "2026-11-11", cur, "--compare", prev).returncode == 0
    run = carbonspan("verify", archive, "--report", cur)
    assert run.returncode == 0 and "re-derives to the same content hash" in run.stdout, run.stdout + run.stderr
    assert "re-derived from the previous figures this report states" in run.stderr and "--previous" in run.stderr
    run = carbonspan("verify", archive, "--report", cur, "--previous", prev)
    assert run.returncode == 0 and "re-derived from the previous figures" not in run.stderr, run.stdout
    # another report given as --previous: named, and the one to give is said
    assert carbonspan("aggregate", archive, "--from", "2026-11-01", "--to", "2026-11-09", "--allow-empty",
                      "--out", other).returncode == 0
    run = carbonspan("verify", archive, "--report", cur, "--previous", other)
    assert run.returncode == 1 and "comparison_previous_mismatch" in run.stdout
    assert orjson.loads(prev.read_bytes())["integrity"]["content_hash"] in run.stdout
    # a comparison edited (and the report re-hashed) does not re-derive, whatever --previous
    report = orjson.loads(cur.read_bytes())
    report["comparison"]["services"][0]["carbon_kgco2eq"]["previous"] = 0.5
    report["integrity"]["content_hash"] = content_hash(report)
    cur.write_bytes(canonical_json(report))
    for extra in ((), ("--previous", prev)):
        run = carbonspan("verify", archive, "--report", cur, *extra)
        assert run.returncode == 1 and "rederivation_mismatch" in run.stdout and "comparison" in run.stdout


def test_the_compared_carbon_totals_carry_their_sci_band_before_and_now(archive, tmp_path):
    from aggregator.render import band

    prev, cur, html = tmp_path / "prev.json", tmp_path / "cur.json", tmp_path / "r.html"
    assert _day(archive, "2026-11-10", prev).returncode == 0
    run = _day(archive, "2026-11-11", cur, "--compare", prev, "--html", html)
    assert run.returncode == 0, run.stderr
    t = orjson.loads(cur.read_bytes())["comparison"]["total"]
    section = html.read_text(encoding="utf-8").split("<h2>Against the previous period</h2>")[1].split("<h2>")[0]
    for label, key in (("carbon (total)", "carbon_kgco2eq"), ("operational carbon", "operational_kgco2eq"),
                       ("embodied carbon", "embodied_kgco2eq")):
        bands = f"{band(t[key]['previous'])} / {band(t[key]['current'])}"
        line = next(x for x in run.stdout.splitlines() if f" {label} " in x)
        assert bands in line, line
        assert f'<td class="n">{bands}</td>' in section.split(f"<td>{label}</td>")[1].split("</tr>")[0]
    assert "SCI band before / now (x0.5 to x2)" in run.stdout and "SCI band before / now" in section


def test_on_a_narrow_terminal_the_per_service_comparison_leaves_out_before_and_now_first(archive, tmp_path):
    from tests.aggregator import test_aggregate_cli_output as tty  # its pseudo-terminal runner

    prev, cur = tmp_path / "prev.json", tmp_path / "cur.json"
    assert _day(archive, "2026-11-10", prev).returncode == 0
    args = ("aggregate", archive, "--from", "2026-11-11", "--to", "2026-11-11", "--out", cur, "--compare", prev)
    wide = tty._on_a_tty(*args, columns=220)
    assert "columns left out to fit" not in wide and "requests" in wide.split("per service, before and now")[1]
    narrow = tty._on_a_tty(*args, columns=100)
    per = narrow.split("per service, before and now")[1]
    said = " ".join(per.split())
    assert "columns left out to fit this terminal: requests before/now, energy before/now" in said, per
    for line in per.splitlines():  # no row wider than the terminal: nothing wraps, every change whole
        assert len(line) <= 100, line
    assert re.search(r"┃ +┃ new/ ┃", per) and re.search(r"┃ service +┃ gone ┃", per), per  # its header, 2 lines
    api = _line(per, "api")
    assert "+5.000 Wh" in api and api.count("+50.0 %") == 2, api
    assert "n/a (was 0)" in per and "10.000 Wh" not in per  # energy before/now left out, its change kept
