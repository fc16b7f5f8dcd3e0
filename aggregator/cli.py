"""``carbonspan aggregate``: fold a period of archives into a disclosure report."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rich.console import Console
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from aggregator import cli_log, cli_output
from aggregator.compare import CompareError, load_previous
from aggregator.engines import run_dask, run_local
from aggregator.files import discover
from aggregator.fold.rules import AttributionError
from aggregator.market import MarketFactorsError, load_market_factors
from aggregator.read import Period
from aggregator.render_csv import write_csv
from aggregator.render_html import generated_at, render_html
from aggregator.report import build_report, report_bytes

#: Exit status when no window starts inside the period (and --allow-empty was not given).
EXIT_EMPTY = 3

EPILOG = """example:
  carbonspan aggregate archives/ --from 2026-11-01 --to 2026-11-30 \\
      --org "ACME Corp" --out report.json --html report.html

  --to includes the whole day it names. Paths may be archive roots, agent directories,
  window files, or fsspec URLs (file://, s3://... when the fsspec backend is installed).
  --engine dask folds files on a Dask cluster: --scheduler tcp://host:8786 to use an
  existing one, or none to start two local workers.

  Market-based Scope 2 beside the location-based figure (GHG Protocol dual reporting):
    carbonspan aggregate archives/ --from 2026-11-01 --to 2026-11-30 --market-factors market.toml
  with market.toml holding
    [market]
    source = "Supplier-specific rate, EDF contract 2026; AIB European Residual Mix 2024 elsewhere"
    [market.regions]        # gCO2e per kWh of the facility's electricity
    eu-west-3 = 0.0
    eu-central-1 = 713.0
  Regions not listed keep their location-based (grid average) carbon.

  Exit status: 0 written; 1 --strict-attribution failed, or --verify found a finding (the report
  is written); 2 bad input; 3 no window starts in the period (nothing written; --allow-empty
  writes the report saying "No data in this period").
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "aggregate",
        help="fold a period of archives into a disclosure report",
        description="Read every archive window file under the paths (plain, rotated, gzip), keep "
        "the windows that start inside the period and write the disclosure report (canonical "
        "JSON), optionally as a single-file HTML page too.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="ARCHIVE_PATH")
    p.add_argument("--from", dest="start", required=True, metavar="DATE",
                   help="first day (YYYY-MM-DD) or time (RFC 3339) of the period")
    p.add_argument("--to", dest="end", required=True, metavar="DATE",
                   help="last day (included) or end time (excluded) of the period")
    p.add_argument("--out", type=Path, help="write the JSON report here ('-': standard output; without "
                   "--out the JSON is not written, only the summary is printed)")
    p.add_argument("--html", type=Path, help="also write a self-contained HTML report here")
    p.add_argument("--csv", type=Path, metavar="DIR",
                   help="also write services.csv, regions.csv and series.csv (units in the headers) into DIR")
    p.add_argument("--org", default="", help="organisation named in the report")
    p.add_argument("--compare", type=Path, metavar="PREVIOUS_JSON",
                   help="compare with the report of an earlier period (a JSON report aggregate wrote): the "
                        "change per service and in total, kept in the report's comparison block")
    p.add_argument("--verify", action="store_true",
                   help="also check the archives' hash chains and window invariants as 'carbonspan verify' does "
                        "(exit 1 on a finding; the report is written all the same)")
    p.add_argument("--format", choices=cli_output.FORMATS, default="table",
                   help="what goes to standard output: the summary table (default), services.csv, or the "
                        "JSON report")
    p.add_argument("--strict-attribution", action="store_true",
                   help="fail on a window that cannot be split between services")
    p.add_argument("--engine", choices=("local", "dask"), default="local")
    p.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler address (with --engine dask)")
    p.add_argument("--market-factors", type=Path, metavar="FILE",
                   help="TOML file of contractual emission factors per region (gCO2e/kWh): adds the "
                        "market-based Scope 2 figure beside the location-based one")
    p.add_argument("--allow-empty", action="store_true",
                   help=f"write the report even when no window starts in the period (else exit {EXIT_EMPTY}, "
                        "writing nothing)")
    p.add_argument("--sign", type=Path, metavar="KEY_FILE",
                   help="sign the report: write an in-toto statement in a DSSE envelope to "
                        "OUT.intoto.json with this key (from 'carbonspan keys generate'; needs --out)")
    p.set_defaults(func=handle)


def _fail(message: str, code: int = 2) -> int:
    print(f"carbonspan aggregate: error: {message}", file=sys.stderr)
    return code


def handle(args: argparse.Namespace) -> int:
    if args.scheduler and args.engine != "dask":
        return _fail("--scheduler needs --engine dask")
    to_stdout = args.out is not None and str(args.out) == "-"
    if to_stdout and args.format != "table":
        return _fail(f"--out - already writes the JSON report to standard output; --format {args.format} "
                     "would write a second document there: give --out FILE, or leave out one of them")
    if args.sign is not None and (args.out is None or to_stdout):
        return _fail("--sign needs --out: the attestation is written beside the report file")
    signer = None
    if args.sign is not None:
        from aggregator.attest import load_signer

        try:
            signer = load_signer(args.sign)
        except ValueError as exc:
            return _fail(str(exc))
    try:
        market = load_market_factors(args.market_factors) if args.market_factors is not None else None
    except MarketFactorsError as exc:
        return _fail(f"--market-factors {exc}")
    try:
        period = Period.parse(args.start, args.end)
        files = discover(args.paths)
    except (ValueError, FileNotFoundError) as exc:
        return _fail(str(exc))
    try:
        previous = load_previous(args.compare, period) if args.compare is not None else None
    except CompareError as exc:
        return _fail(str(exc))
    if not files:
        return _fail(f"no window files (windows-*.jsonl[.gz]) under {', '.join(args.paths)}")
    for flag, path in (("--out", None if to_stdout else args.out), ("--html", args.html), ("--csv", args.csv)):
        if path is not None and not path.resolve().parent.is_dir():
            return _fail(f"{flag} {path}: the directory {path.parent} does not exist; create it or "
                         "write somewhere else (checked before reading the archives)")
    err = Console(stderr=True)
    if not logging.getLogger().handlers:  # warnings print above the progress bar, not through it
        handler = (RichHandler(console=err, show_time=False, show_path=False, highlighter=NullHighlighter())
                   if err.is_terminal else logging.StreamHandler(sys.stderr))
        handler.setFormatter(logging.Formatter("%(message)s" if err.is_terminal else "warning: %(message)s"))
        logging.basicConfig(level=logging.WARNING, handlers=[handler])
    repeats = cli_log.install(logging.getLogger("carbonspan.aggregate"))
    try:
        state = _run(args, files, period, err)
    except AttributionError as exc:
        return _fail(f"strict attribution: {exc}", 1)
    except OSError as exc:  # the Dask scheduler cannot be reached (archive I/O errors are counted)
        return _fail(f"the Dask engine failed: {exc}; check --scheduler (tcp://host:8786) "
                     "or leave it out to start two local workers")
    finally:
        cli_log.finish(logging.getLogger("carbonspan.aggregate"), repeats)
    if state.windows == 0:
        message = (f"No data in this period: no window starts inside it ({state.windows_outside} read "
                   f"outside it, {state.malformed} malformed lines); check --from/--to against the "
                   "archive dates")
        if not args.allow_empty:
            return _fail(f"{message}, or pass --allow-empty to write the empty report anyway", EXIT_EMPTY)
        logging.getLogger("carbonspan.aggregate").warning("%s (written because of --allow-empty)", message)
    report = build_report(state, period, args.org, market, previous)
    if report.aggregate.scope2 is not None and report.aggregate.scope2.unmatched_factor_regions:
        logging.getLogger("carbonspan.aggregate").warning(
            "--market-factors: no window in the period has a region named %s; check the spelling "
            "(the factors are kept in the report's methodology)",
            ", ".join(report.aggregate.scope2.unmatched_factor_regions))
    data = report_bytes(report)
    try:
        if to_stdout:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        elif args.out is not None:
            args.out.write_bytes(data)
        if args.html is not None:
            args.html.write_text(render_html(report, generated_at()), encoding="utf-8")
        if args.csv is not None:
            write_csv(report, args.csv)
        signed = None
        if signer is not None:
            from aggregator.attest import write_attestation

            signed = write_attestation(signer, args.out, data, files)
            print(f"signed: {signed}", file=sys.stderr)
    except OSError as exc:
        return _fail(f"cannot write the report: {exc}")
    cli_output.emit(report, data, args.format, err if to_stdout else Console())
    if args.out is None and args.format != "json":
        print("the JSON report was not written: pass --out FILE (or --out - for standard output)",
              file=sys.stderr)
    if not args.verify:
        print(cli_output.verify_line(args.paths, None if to_stdout else args.out, args.compare, signed),
              file=sys.stderr)
        return 0
    ok, lines = cli_output.verified(files, args.paths)
    print("\n".join(lines), file=sys.stderr)
    return 0 if ok else 1


def _run(args: argparse.Namespace, files: list, period: Period, console: Console):
    engine = run_dask if args.engine == "dask" else run_local
    extra = {"scheduler": args.scheduler} if args.engine == "dask" else {}
    if not console.is_terminal:
        return engine(files, period, args.strict_attribution, **extra)
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("folding archive files", total=len(files))

        def advance(done: int, total: int, f) -> None:
            bar.update(task, completed=done, description=f"folding {f.label}")

        return engine(files, period, args.strict_attribution, progress=advance, **extra)
