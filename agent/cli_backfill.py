"""``carbonspan backfill``: score historic trace files into a chain of window lines of its own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EPILOG = """\
example:
  carbonspan backfill jaeger-export.json tempo-*.json --agent-id shop-backfill \\
      --archive-dir archives --window-seconds 3600 --config carbonspan.toml
  carbonspan backfill --from-jaeger http://jaeger:16686 --from 2026-11-01 --to 2026-12-01 \\
      --agent-id shop-nov --window-seconds 3600
  carbonspan aggregate archives --from 2026-11-01 --to 2026-11-30

Files are anything `carbonspan score` reads (OTLP JSON/NDJSON/protobuf, Jaeger JSON, Zipkin v2
JSON). Spans go into windows by their start time; the chain is written to
<archive-dir>/<agent-id>/, which must not hold a chain yet. Every line's methodology says
backfill = true with the source files' SHA-256, and that hosts are not charged (their running
time is not known from spans). docs/archive-format.md, "Backfilled chains".
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "backfill",
        help="score historic trace files into a chain of window lines of its own",
        description="Score the spans of historic trace files into windows by span start time "
        "and seal them as a hash chain of their own, marked as backfilled, so that aggregate "
        "and verify read them like any agent's chain.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="*", type=Path, metavar="FILE", help="trace files")
    p.add_argument("--from-jaeger", metavar="URL",
                   help="also fetch the period's traces from a Jaeger query service")
    p.add_argument("--from-tempo", metavar="URL",
                   help="also fetch the period's traces from a Tempo query frontend")
    p.add_argument("--from", dest="start", metavar="TIME",
                   help="with --from-jaeger/--from-tempo: start (RFC 3339 or date, UTC)")
    p.add_argument("--to", dest="end", metavar="TIME",
                   help="with --from-jaeger/--from-tempo: end (RFC 3339 or date, UTC)")
    p.add_argument("--limit", type=int, default=1000,
                   help="most traces one search may return (default 1000); a search that "
                   "returns this many is an error, since more may exist")
    p.add_argument("--agent-id", required=True,
                   help="the new chain's name (a directory under --archive-dir)")
    p.add_argument("--archive-dir", type=Path, default=Path("archives"),
                   help="archive root (default archives)")
    p.add_argument("--window-seconds", type=float, default=60.0,
                   help="window length in seconds (default 60, as the agent; at least 0.001)")
    p.add_argument("--config", type=Path, default=None, help="carbonspan.toml ([green] table)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from agent.archive import ArchiveError
    from agent.backfill import BackfillError, backfill, check_target
    from agent.config import ConfigError, load_config
    from agent.daemon_config import _AGENT_ID_RE
    from agent.otlp import OtlpDecodeError

    if not _AGENT_ID_RE.match(args.agent_id):
        print(f"carbonspan backfill: --agent-id {args.agent_id!r} is not a valid chain name "
              "(letters, digits, '.', '_', '-')", file=sys.stderr)
        return 2
    from agent.fetch import FetchError

    try:
        cfg = load_config(args.config)
        check_target(args.archive_dir, args.agent_id, args.window_seconds)  # before fetching
        files = list(args.files) + _fetch(args)
        if not files:
            raise BackfillError("no input: give trace files, --from-jaeger URL or --from-tempo URL")
        result = backfill(files, cfg, args.archive_dir, args.agent_id, args.window_seconds)
    except (ConfigError, BackfillError, OtlpDecodeError, ArchiveError, FetchError) as exc:
        print(f"carbonspan backfill: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"carbonspan backfill: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    if result.untimed_spans:
        print(f"carbonspan backfill: warning: {result.untimed_spans} spans had no usable start "
              "time and are in no window (counted as backfill_untimed_spans)", file=sys.stderr)
    print(f"backfilled {result.spans} spans into {result.windows} windows "
          f"({result.first_start} .. {result.last_end}) at {result.directory}")
    return 0


def _epoch(text: str | None, flag: str) -> float:
    from datetime import UTC, datetime

    from agent.backfill import BackfillError

    if not text:
        raise BackfillError(f"{flag} is required with --from-jaeger/--from-tempo")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BackfillError(f"{flag} {text!r}: expected an RFC 3339 time or a date") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _fetch(args: argparse.Namespace) -> list[Path]:
    """Fetch from the query APIs into <archive-dir>/<agent-id>/sources/; the files fetched."""
    from agent.backfill import BackfillError
    from agent.fetch import from_jaeger, from_tempo

    if not (args.from_jaeger or args.from_tempo):
        return []
    start, end = _epoch(args.start, "--from"), _epoch(args.end, "--to")
    if end <= start:
        raise BackfillError(f"--to ({args.end}) must be after --from ({args.start})")
    if args.limit < 1:
        raise BackfillError(f"--limit must be at least 1, got {args.limit}")
    sources = args.archive_dir / args.agent_id / "sources"
    files: list[Path] = []
    for url, fetch in ((args.from_jaeger, from_jaeger), (args.from_tempo, from_tempo)):
        if not url:
            continue
        got = fetch(url, start, end, sources, args.limit)
        if got.truncated:
            raise BackfillError(
                f"{got.truncated[0]} returned --limit ({args.limit}) traces, so more may exist "
                "in the period: raise --limit or fetch a shorter period (no chain was written)"
            )
        print(f"fetched {got.traces} traces from {url} into {sources}", file=sys.stderr)
        files += got.files
    return files
