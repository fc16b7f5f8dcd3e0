"""``python -m bench.diskfault`` keeps running: a short campaign of two of its faults.

The campaign (docs/operations.md, Durability) is a measurement the lead runs; this runs the
same code on a full write-ahead log (``RLIMIT_FSIZE``) and a kill -9 during a frozen disk, with
the times held under load scaled down, and checks what it concludes, not how long it took.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _campaign(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.diskfault", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=240)


def test_a_short_campaign_loses_no_acknowledged_span() -> None:
    run = _campaign("--faults", "wal_full,kill9_frozen", "--scale", "0.3", "--seed", "3")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {line.split()[0]: line.split() for line in run.stdout.splitlines() if line}
    assert rows["wal_full"][1] == "2" and rows["kill9_frozen"][1] == "2"  # lives
    for fault in ("wal_full", "kill9_frozen"):
        acked = int(rows[fault][2].replace(",", ""))
        assert acked > 0 and rows[fault][5] == "0" and rows[fault][8] == "OK", rows[fault]
    assert "/healthz 503" in run.stdout  # the full log was visible to a liveness probe
    assert run.stdout.splitlines()[-1].endswith("acknowledged lost: 0 -> OK")


def test_an_archive_that_cannot_be_written_turns_readiness_off_until_it_can() -> None:
    """The chain directory turns read-only: window lines cannot be written, so every span
    stays in the WAL; /readyz says so (503, exports refused as retryable) instead of 200 while
    the log grows, and is 200 again once a line is archived. Nothing acknowledged is lost."""
    run = _campaign("--faults", "archive_readonly", "--scale", "0.3", "--seed", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "window close failed" in run.stdout
    assert "/readyz 503 while the archive fails" in run.stdout, run.stdout
    assert "archived again by the retry" in run.stdout and "then /readyz 200" in run.stdout
    assert run.stdout.splitlines()[-1].endswith("acknowledged lost: 0 -> OK")


def test_an_unknown_fault_is_refused_with_the_list() -> None:
    run = _campaign("--faults", "wal_ful")
    assert run.returncode == 2
    assert "unknown fault(s) wal_ful" in run.stderr and "kill9_frozen" in run.stderr
