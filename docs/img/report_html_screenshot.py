"""Makes docs/img/report-html.png: the HTML report of two synthetic agents for one day,
rendered by the real renderer and screenshotted by headless Chromium (Debian's ``chromium``).

    .venv/bin/python docs/img/report_html_screenshot.py [OUT.png]   # default docs/img/report-html.png

Two agents (``aggregator.synth.realistic``: 12 and 6 services, ``svc-00`` ..), a 20-minute
window every 20 minutes on 2026-11-10, agent-b down from 02:00 to 05:00; folded by the local
engine for that day and rendered with ``SOURCE_DATE_EPOCH`` = 2026-12-02T08:00:00Z, so the same
code gives the same picture. The window is 1100 px wide and tall enough to reach the charts
over time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from aggregator import synth  # noqa: E402
from aggregator.engines import run_local  # noqa: E402
from aggregator.files import discover  # noqa: E402
from aggregator.read import Period  # noqa: E402
from aggregator.render_html import render_html  # noqa: E402
from aggregator.report import build_report  # noqa: E402

DAY = datetime(2026, 11, 10, tzinfo=UTC)
GENERATED = "2026-12-02T08:00:00Z"
SIZE = (1100, 3400)


def _agent(root: Path, agent: str, n_services: int, seed: int, down: tuple[int, int] = (0, 0)) -> None:
    reports = []
    for i, minute in enumerate(range(0, 1440, 20)):
        if down[0] <= minute < down[1]:
            continue
        rep = synth.realistic(1, seed=seed + i, n_services=n_services, agent_id=agent)[0]
        start = DAY + timedelta(minutes=minute)
        rep.window.start = start.strftime("%Y-%m-%dT%H:%M:%SZ")
        rep.window.end = (start + timedelta(minutes=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
        reports.append(rep)
    synth.write_agent(root, agent, synth.split(synth.sealed_lines(reports), 2), day="20261110")


def main(out: Path = ROOT / "docs" / "img" / "report-html.png") -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("needs chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _agent(work / "archives", "agent-a", 12, 1)
        _agent(work / "archives", "agent-b", 6, 2, down=(120, 300))
        period = Period.parse("2026-11-10", "2026-11-10")
        report = build_report(run_local(discover([str(work / "archives")]), period), period, "ACME")
        page = work / "report.html"
        page.write_text(render_html(report, GENERATED), encoding="utf-8")
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={work / 'profile'}", f"--screenshot={out}",
                        f"--window-size={SIZE[0]},{SIZE[1]}", page.as_uri()],
                       check=True, capture_output=True, timeout=120, env=dict(os.environ))
        print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img" / "report-html.png")
