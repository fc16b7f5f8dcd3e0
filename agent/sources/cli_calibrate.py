"""``carbonspan calibrate``: per-service calibration factors from power readings and archives."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

EPILOG = """\
example:
  carbonspan calibrate --readings power.csv --archives archives/ --out calibration.toml

  # power.csv (power samples, integrated with the trapezoid rule)
  timestamp,service,power_watts
  2026-11-30T10:00:00Z,checkout,12.0
  2026-11-30T10:00:05Z,checkout,12.0

  # or energy per interval (each row: kWh since that service's previous row)
  timestamp,service,energy_kwh

factor = (measured kWh / ops archived in the readings' time range) / 1e-7 kWh per op, where
ops are weighted ops (Σ op weight: what the uncalibrated proxy charged / 1e-7) whenever the
archived windows carry them, so the calibrated proxy reproduces the meter; plain I/O ops
otherwise (windows already calibrated, measured, or v1.0), said per service.
The output is a [green.calibration] table to paste into carbonspan.toml; the agent then
scales the I/O proxy by it and tags the figures io_proxy_v*+cal. A measured source for the
service (Scaphandre, Kepler, ...) wins over calibration.

Exit status 0 when at least one service got a factor (a service without one is named on stderr
and as a comment in the table); 1 when none did, or the readings, the archives or --out cannot
be used (the message says which).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="derive per-service calibration factors",
        description="Derive per-service calibration factors for the I/O proxy from power or "
        "energy readings and the I/O ops the agent archived over the same time range.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--readings",
        required=True,
        metavar="CSV",
        help="timestamp,service,power_watts or timestamp,service,energy_kwh",
    )
    parser.add_argument(
        "--archives", required=True, metavar="DIR", help="archive root (or one agent's directory)"
    )
    parser.add_argument(
        "--out", metavar="TOML", help="write the [green.calibration] table here (default: stdout)"
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from agent.sources.calibrate import (
        CalibrationError,
        compute_factors,
        read_readings,
        scan_archives,
        to_toml,
    )

    try:
        measured = read_readings(Path(args.readings))
        scan = scan_archives(
            Path(args.archives), {s: (m.start_s, m.end_s) for s, m in measured.items()}
        )
    except CalibrationError as exc:
        print(f"carbonspan calibrate: {exc}", file=sys.stderr)
        return 1
    if scan.files == 0:
        print(
            f"carbonspan calibrate: {args.archives}: no windows-*.jsonl[.gz] files found; "
            "give the agent's archive directory",
            file=sys.stderr,
        )
        return 1
    factors = compute_factors(measured, scan)
    err = sys.stderr
    print(
        f"read {scan.windows} windows from {scan.files} files ({scan.bad_lines} unreadable lines skipped)",
        file=err,
    )
    print(
        f"{'service':<24} {'kWh':>12} {'ops':>12} {'basis':>8} {'kWh/op':>12} {'factor':>10}",
        file=err,
    )
    for f in factors:
        basis = "weighted" if f.weighted else "plain"
        print(
            f"{f.service:<24} {f.kwh:>12.6g} {f.ops:>12.6g} {basis:>8} {f.kwh_per_op:>12.6g} "
            f"{f.factor:>10.4g}",
            file=err,
        )
        if f.note:
            print(f"note: {f.service}: {f.note}", file=err)
        if f.warning:
            print(f"warning: {f.service}: {f.warning}", file=err)
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = to_toml(
        factors, note=f"readings {args.readings}, archives {args.archives}, generated {when}"
    )
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            print(
                f"carbonspan calibrate: cannot write {args.out} ({exc.strerror or exc}); "
                "give a writable path, or leave out --out to print the table",
                file=err,
            )
            return 1
        print(f"wrote {args.out}", file=err)
    else:
        sys.stdout.write(text)
    return 0 if any(f.factor == f.factor for f in factors) else 1
