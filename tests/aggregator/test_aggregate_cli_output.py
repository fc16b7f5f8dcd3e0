"""What ``carbonspan aggregate`` prints, run as the real CLI in a subprocess over real sealed
archive files: ``--format table|csv|json``, whole names off a TTY (and capped, wrapped rows on
one, through a pseudo-terminal), no JSON dump without ``--out``, repeated warnings in one line
with a count, ``--verify`` or the one line saying the chains were not verified, and the HTML
page's provenance (version, content hash, generation time)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from aggregator import synth
from aggregator.render import MAX_ROWS
from aggregator.synth import Svc
from carbonspan import __version__
from tests.aggregator.conftest import T0

ROOT = Path(__file__).resolve().parents[2]
LONG = "checkout-service-production-europe-west-frankfurt-blue-green-canary-" + "x" * 60
DAY = ("--from", "2026-11-10", "--to", "2026-11-10")


def carbonspan(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "carbonspan", *map(str, args)], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300,
                          check=False)


def _archive(root: Path, long_kwh: float) -> Path:
    """30 services, one with a 128-character name (``long_kwh`` each window), over 6 windows."""
    services = [Svc(f"svc-{i:02d}", energy_kwh=1e-4 * (i + 1)) for i in range(29)] + [Svc(LONG, energy_kwh=long_kwh)]
    lines = synth.sealed_lines([synth.window_report(T0 + timedelta(minutes=i), services) for i in range(6)])
    synth.write_agent(root, "agent-a", synth.split(lines, 2), day="20261110")
    return root


@pytest.fixture
def wide(tmp_path: Path) -> Path:
    """The long name is the smallest service."""
    return _archive(tmp_path / "archives", 5e-5)


def test_format_json_and_csv_put_one_document_on_stdout(wide, tmp_path):
    out, csv_dir = tmp_path / "r.json", tmp_path / "csv"
    run = carbonspan("aggregate", wide, *DAY, "--format", "json", "--out", out, "--csv", csv_dir)
    assert run.returncode == 0, run.stderr
    assert run.stdout.encode() == out.read_bytes()  # the same bytes as the file, and nothing else
    assert "not verified by this run" in run.stderr and "carbon disclosure" not in run.stdout
    run = carbonspan("aggregate", wide, *DAY, "--format", "csv")
    assert run.returncode == 0 and run.stdout == (csv_dir / "services.csv").read_text(encoding="utf-8")
    assert "the JSON report was not written" in run.stderr
    run = carbonspan("aggregate", wide, *DAY, "--format", "json")  # the JSON on stdout is the report asked for
    assert orjson.loads(run.stdout)["aggregate"]["windows"] == 6 and "was not written" not in run.stderr
    run = carbonspan("aggregate", wide, *DAY, "--out", "-", "--format", "csv")
    assert run.returncode == 2 and "--out - already writes the JSON report to standard output" in run.stderr


def test_off_a_terminal_every_name_whole_and_no_json_dump(wide):
    run = carbonspan("aggregate", wide, *DAY, env={"COLUMNS": "80"})
    assert run.returncode == 0, run.stderr
    assert '"schema_version"' not in run.stdout and "carbon disclosure" in run.stdout
    assert any(LONG in line for line in run.stdout.splitlines())  # on one line: neither cut nor wrapped
    assert all(f"svc-{i:02d}" in run.stdout for i in range(29)) and "more" not in run.stdout.split("total ")[0]
    assert "share of total carbon" in run.stdout
    assert "the JSON report was not written: pass --out FILE (or --out - for standard output)" in run.stderr
    assert f"carbonspan verify {wide} (or aggregate --verify)" in run.stderr


def _on_a_tty(*args: str | Path, columns: int = 160) -> str:
    """Run the CLI with standard output on a pseudo-terminal (``columns`` wide); what it printed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "carbonspan", *map(str, args)], cwd=ROOT, stdout=slave,
                            stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm"})
    os.close(slave)
    chunks, deadline = [], time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))  # no colours


def test_on_a_terminal_the_first_rows_with_names_wrapped_never_cut(tmp_path):
    text = _on_a_tty("aggregate", _archive(tmp_path / "archives", 1.0), *DAY)  # the long name first
    assert f"... {30 - MAX_ROWS} more" in text  # the 30 services do not all show on a terminal
    assert LONG not in text  # 128 characters do not fit a 100-column terminal on one line ...
    first_cells = [line.split("\u2502")[1].strip() for line in text.splitlines() if line.startswith("\u2502")]
    assert LONG in "".join(first_cells)  # ... so the name wraps in its cell, every character kept
    assert "svc-28" in text and "svc-00" not in text  # the largest shown, the smallest not
    assert "6.000 kWh" in text and "columns left out" not in text
    # a narrow terminal: model and region are left out (and said), figures stay whole
    text = _on_a_tty("aggregate", _archive(tmp_path / "narrow", 1.0), *DAY, columns=80)
    assert "columns left out to fit this terminal: model, region" in " ".join(text.split())
    assert "6.000 kWh" in text and "286.350 g" in text and "4.772 g" in text
    first_cells = [line.split("\u2502")[1].strip() for line in text.splitlines() if line.startswith("\u2502")]
    assert LONG in "".join(first_cells)


def test_repeated_warnings_print_once_with_a_count(mixed_archive):
    run = carbonspan("aggregate", mixed_archive, *DAY)
    assert run.returncode == 0, run.stderr
    fallback = [line for line in run.stderr.splitlines() if "I/O-proxy fallback" in line]
    assert len(fallback) == 2 and "... and 2 more warning(s) like" in fallback[1]
    assert "inputs.fallback_files" in fallback[1]


def test_verify_in_the_same_run(wide, tmp_path):
    out = tmp_path / "r.json"
    run = carbonspan("aggregate", wide, *DAY, "--out", out, "--verify")
    assert run.returncode == 0 and "verified: 1 chain(s), 6 records in 2 files" in run.stderr, run.stderr
    assert "not verified by this run" not in run.stderr
    first = sorted((wide / "agent-a").iterdir())[0]
    lines = first.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[1])
    record["report"]["window"]["traces"] += 1  # an edit the hash chain catches
    lines[1] = orjson.dumps(record) + b"\n"
    first.write_bytes(b"".join(lines))
    out.unlink()
    run = carbonspan("aggregate", wide, *DAY, "--out", out, "--verify")
    assert run.returncode == 1 and "NOT verified: " in run.stderr and "agent-a/" in run.stderr, run.stderr
    assert out.is_file()  # the report is written all the same


def test_the_html_says_when_and_by_what_it_was_made(wide, tmp_path):
    html, out = tmp_path / "r.html", tmp_path / "r.json"
    epoch = {"SOURCE_DATE_EPOCH": "1796169600"}  # 2026-12-02T00:00:00Z
    assert carbonspan("aggregate", wide, *DAY, "--out", out, "--html", html, env=epoch).returncode == 0
    page = html.read_text(encoding="utf-8")
    report = orjson.loads(out.read_bytes())
    assert f"Generated 2026-12-02T00:00:00Z by carbonspan {__version__} from the report with content hash" in page
    assert f"<code>{report['integrity']['content_hash']}</code>" in page
    assert "generated 2026-12-02T00:00:00Z" in page.split("</style>")[0]  # on every printed page
    assert "Generated" not in out.read_text()  # never in the JSON report
    again = tmp_path / "again.html"
    assert carbonspan("aggregate", wide, *DAY, "--html", again, env=epoch).returncode == 0
    assert again.read_bytes() == html.read_bytes()  # SOURCE_DATE_EPOCH: the same bytes
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    before = time.strftime("%Y-%m-%dT", time.gmtime())
    proc = subprocess.run([sys.executable, "-m", "carbonspan", "aggregate", str(wide), *DAY, "--html", str(again)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and f"Generated {before}" in again.read_text(encoding="utf-8")


BRACKETED = ("pay[/bold]svc", "[red]alert[/red]-svc", "[green]")


def test_names_with_square_brackets_print_as_they_are(tmp_path):
    # Service names are untrusted: rich must not read them as markup. "pay[/bold]svc" made the
    # summary raise MarkupError after the files were written; "[red]alert[/red]-svc" lost its tags.
    def archive(root: Path, start, names) -> Path:
        lines = synth.sealed_lines([synth.window_report(start + timedelta(minutes=i), [Svc(n) for n in names])
                                    for i in range(3)])
        synth.write_agent(root, "agent-a", [lines], day=start.strftime("%Y%m%d"))
        return root

    before = archive(tmp_path / "before", T0 - timedelta(days=1), ["svc-a", "[old]gone[/old]"])
    prev = tmp_path / "prev.json"
    run = carbonspan("aggregate", before, "--from", "2026-11-09", "--to", "2026-11-09", "--out", prev)
    assert run.returncode == 0, run.stderr
    now = archive(tmp_path / "now", T0, ["svc-a", *BRACKETED])
    run = carbonspan("aggregate", now, *DAY, "--compare", prev, "--org", "[b]ACME[/i]")
    assert run.returncode == 0, run.stderr
    for name in BRACKETED:
        assert sum(line.count(name) for line in run.stdout.splitlines()) >= 2, name  # summary and comparison
    assert "[b]ACME[/i]" in run.stdout and "disappeared 1 ([old]gone[/old])" in run.stdout
