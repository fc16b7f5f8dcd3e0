"""``carbonspan verify``: the auditor's check of archives and, optionally, a report."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from aggregator.files import discover
from aggregator.report import load_report
from aggregator.verify import verify_archives, verify_report

EPILOG = """example:
  carbonspan verify archives/ --report report.json

  Exit status 0 when every chain, every window invariant and (with --report) the report's
  content hash hold; 1 with one finding per line otherwise; 2 when an input cannot be read.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify",
        help="auditor: check hash chains, invariants and a report",
        description="Check each agent's hash chain across its archive files, each window's "
        "invariants, and with --report re-derive the report from the archives and compare "
        "content hashes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="ARCHIVE_PATH")
    p.add_argument("--report", type=Path, help="a disclosure report (JSON) to re-derive and compare")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        files = discover(args.paths)
    except (OSError, ValueError) as exc:
        print(f"carbonspan verify: error: {exc}", file=sys.stderr)
        return 2
    report = None
    if args.report is not None:
        try:
            report = load_report(args.report.read_bytes())
        except OSError as exc:
            print(f"carbonspan verify: error: cannot read --report {args.report}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        except ValueError as exc:
            print(f"carbonspan verify: error: --report {args.report} is not a disclosure report ({exc}); "
                  "give the JSON file written by 'carbonspan aggregate --out'", file=sys.stderr)
            return 2
    if not files:
        print(f"carbonspan verify: error: no window files under {', '.join(args.paths)}", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="note: %(message)s", stream=sys.stderr)
    findings, chains = verify_archives(files)
    if report is not None:
        findings.extend(verify_report(files, report))
    for chain in chains:
        print(f"chain {chain.agent}: {chain.records} records, last {chain.last_hash or '-'}")
    if not findings:
        extra = " and the report re-derives to the same content hash" if report is not None else ""
        print(f"OK: {len(files)} files, every chain and window invariant holds{extra}")
        return 0
    print(f"FAILED: {len(findings)} finding(s)")
    for finding in findings:
        print(f"  {finding}")
    return 1
