"""What ``carbonspan aggregate`` writes to standard output (``--format``) and its last line.

- ``table`` (default): the summary table and, with ``--compare``, the comparison tables; on a
  terminal the first rows, elsewhere every row with whole names (``render.print_summary``);
- ``csv``: ``services.csv`` (as ``--csv DIR`` writes it), nothing else;
- ``json``: the JSON report, the bytes ``--out`` writes.

Messages (warnings, "not verified", "not written") go to standard error in every format, so
standard output holds one document a program can read.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from rich.console import Console

from aggregator.render import MAX_ROWS, PLAIN_WIDTH, print_summary
from aggregator.render_compare import terminal_tables
from aggregator.render_csv import services_csv
from schema.report import DisclosureReport

FORMATS = ("table", "csv", "json")


def emit(report: DisclosureReport, data: bytes, fmt: str, console: Console) -> None:
    """``report`` on standard output as ``fmt`` (``data``: its JSON bytes); the table goes to
    ``console`` (standard error when ``--out -`` holds standard output)."""
    if fmt == "json":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    if fmt == "csv":
        sys.stdout.write(services_csv(report))
        sys.stdout.flush()
        return
    print_summary(report, console)
    if report.comparison is not None and not console.is_terminal:  # whole names in these tables too
        longest = max((len(s.service_name) for s in report.comparison.services), default=0)
        console.width = max(console.width, min(PLAIN_WIDTH, longest + 160))
    terminal = console.is_terminal
    for part, width in terminal_tables(report, MAX_ROWS if terminal else None, console.width if terminal else None):
        if width is None or width <= console.width:
            console.print(part)
            continue
        narrow = console.width  # laid out as wide as it needs (on a terminal, the terminal wraps it)
        console.width = width
        try:
            console.print(part)
        finally:
            console.width = narrow


def verify_line(paths: list[str], out: Path | None, previous: Path | None,
                attestation: Path | None = None) -> str:
    """The one line saying this run did not check the archives' hash chains, with the command
    that does (quoted for a POSIX shell) and the flag that does it in the same run; for a signed
    report the command checks its attestation too, against the auditor's pinned keys."""
    words = ["carbonspan", "verify", *paths]
    if out is not None:
        words += ["--report", str(out)]
        if previous is not None:
            words += ["--previous", str(previous)]
        if attestation is not None:
            words += ["--trust", "keys.toml", "--attestation", str(attestation)]
    return ("the archives' hash chains were not verified by this run: "
            + " ".join(shlex.quote(w) for w in words) + " (or aggregate --verify)")


def verified(files: list, paths: list[str], most: int = 10) -> tuple[bool, list[str]]:
    """``aggregate --verify``: the chains and window invariants of the files just folded, as
    ``carbonspan verify`` checks them; (all hold, lines to print)."""
    from aggregator.verify import verify_archives

    findings, chains = verify_archives(files)
    records = sum(c.records for c in chains)
    if not findings:
        return True, [f"verified: {len(chains):,} chain(s), {records:,} records in {len(files):,} files; every "
                      "hash chain and window invariant holds"]
    lines = [f"NOT verified: {len(findings):,} finding(s) in the archives' chains or windows "
             "(docs/auditors-guide.md explains each kind):"]
    lines += [f"  {f}" for f in findings[:most]]
    if len(findings) > most:
        lines.append(f"  ... and {len(findings) - most:,} more: carbonspan verify "
                     + " ".join(shlex.quote(p) for p in paths))
    return False, lines
