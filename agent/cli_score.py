"""``carbonspan score``: score OTLP trace files as one window and print the window report.

The window runs from the earliest span start to the latest span end across all files; that
window's end is also the scoring clock (signal freshness, spans with absurd timestamps). The
report is the same ``WindowReport`` the agent archives, printed as one JSON document.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import orjson

from agent.config import Config, GreenConfig

EPILOG = """\
example:
  carbonspan score --explain traces.json          # per span: what was extracted and why
  carbonspan score --config carbonspan.toml traces.json export.pb

  # carbonspan.toml
  [green]
  default_region = "eu-west-3"
  use_hourly_profiles = true
  [green.service_regions]
  checkout = "eu-west-3"

Files are OTLP JSON (one ExportTraceServiceRequest object, or NDJSON: one per line; hex or
base64 ids) or binary protobuf ExportTraceServiceRequest: .json/.ndjson are read as JSON,
.pb/.bin as protobuf, anything else is detected by content. Jaeger JSON (the query API's
{"data": [...]} or the UI's download) and Zipkin v2 JSON (a span list) are recognised by
content and scored as the OTLP spans they carry (docs/carbon-model.md section 9).

The report goes to stdout; warnings (ignored input, configured regions missing from the
intensity table) go to stderr. Exit status 0, or 2 when the configuration or a file cannot
be used (the message names the key or the file). docs/carbon-model.md explains every figure.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "score",
        help="score OTLP trace files as one window and print the report",
        description="Score the spans of OTLP trace files as one window and print the window "
        "report (per-service energy and carbon, regions, totals) as one JSON document.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files", nargs="+", metavar="FILE",
        help="OTLP JSON/NDJSON or protobuf, Jaeger JSON or Zipkin v2 JSON file"
    )
    parser.add_argument("--config", metavar="PATH", help="carbonspan.toml ([green] table)")
    parser.add_argument("--agent-id", default="", help="agent_id to stamp on the report")
    parser.add_argument(
        "--explain", action="store_true",
        help="instead of the report, list per span what was extracted and why: service, kind, "
        "I/O class and the attributes that decided it, weight, region and where it came from, "
        "energy, carbon (a table; JSON with --json)",
    )
    parser.add_argument("--json", action="store_true", help="with --explain: JSON, not a table")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from agent.config import ConfigError, load_config
    from agent.otlp import OtlpDecodeError, concat_batches, read_trace_file
    from agent.score import ScoringContext, score_batch
    from agent.window import build_report

    try:
        cfg = load_config(args.config)
        check_other_tables(cfg)
    except ConfigError as exc:
        print(f"carbonspan score: {exc}", file=sys.stderr)
        return 2
    for warning in config_region_warnings(cfg.green):
        print(f"carbonspan score: warning: {warning}", file=sys.stderr)
    from agent.explain import RecordingBuilder

    recorder = RecordingBuilder() if args.explain else None
    batches = []
    for path in args.files:
        try:
            batches.append(read_trace_file(path, recorder))
        except FileNotFoundError:
            print(f"carbonspan score: {path}: no such file", file=sys.stderr)
            return 2
        except IsADirectoryError:
            print(
                f"carbonspan score: {path}: is a directory; pass the trace files in it",
                file=sys.stderr,
            )
            return 2
        except OSError as exc:
            print(f"carbonspan score: {path}: cannot read ({exc.strerror})", file=sys.stderr)
            return 2
        except OtlpDecodeError as exc:  # the message already names the file (and line)
            print(
                f"carbonspan score: {exc}\n  (expected a trace export: OTLP JSON, NDJSON or "
                "protobuf ExportTraceServiceRequest, Jaeger JSON or Zipkin v2 JSON)",
                file=sys.stderr,
            )
            return 2
    for path, one in zip(args.files, batches, strict=True):
        if len(one) == 0 and not one.counters:  # valid OTLP, but nothing in it to score
            print(
                f"carbonspan score: warning: {path}: no spans in it (an OTLP trace export holds "
                "them under resourceSpans[].scopeSpans[].spans[]; is this the right file?)",
                file=sys.stderr,
            )
    batch = concat_batches(batches) if recorder is None else recorder.build()
    start_ns, end_ns = window_bounds(batch.start_ns, batch.duration_ns)
    ctx = ScoringContext.from_config(cfg, now_ns=end_ns or None)
    if recorder is not None:
        import shutil

        from agent.explain import explain, render

        if batch.counters:  # refused spans have no row: say so, as the report would
            counts = ", ".join(f"{k} {v}" for k, v in sorted(batch.counters.items()))
            print(f"carbonspan score: warning: some input was ignored or refused ({counts}); "
                  "those spans have no row", file=sys.stderr)
        # on a terminal the table fits it (rich folds long cells); elsewhere 200 columns
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 200
        return _write(render(explain(recorder, ctx), as_json=args.json, width=width))
    report = build_report(score_batch(batch, ctx), ctx, start_ns, end_ns, agent_id=args.agent_id)
    if report.counters:  # input that was refused or ignored: say so, not only in the JSON
        counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counters.items()))
        print(
            f"carbonspan score: warning: some input was ignored or refused ({counts}); "
            'the report\'s "counters" hold the same figures',
            file=sys.stderr,
        )
    return _write(orjson.dumps(report.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n")


def _write(data: bytes) -> int:
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `| head`: the reader has what it wanted
        # point stdout at /dev/null so the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def check_other_tables(cfg: Config) -> None:
    """Validate ``[agent]``/``[sources]`` too: score does not use them, but one file serves
    the agent and score, and a typo there should not pass here only to fail at start-up."""
    if "agent" in cfg.sections:
        from agent.daemon_config import parse_agent

        parse_agent(cfg.sections["agent"])
    if "sources" in cfg.sections:
        from agent.sources.config import parse_sources

        parse_sources(cfg.sections["sources"])


def config_region_warnings(green: GreenConfig) -> list[str]:
    """A configured region missing from the intensity table scores 0 g: say so up front.

    It is not an error (a region the table lacks is honestly ``out_of_table``), but a typo
    such as "eu-west3" would otherwise only show as a 0 g row at the end.
    """
    from agent.carbon.model import CarbonModel

    model = CarbonModel.default()
    named = [("[green] default_region", green.default_region)]
    named += [(f"[green.service_regions] {k}", v) for k, v in green.service_regions.items()]
    named += [(f"[[green.hosts]] {h.name} region", h.region) for h in green.hosts]
    return [
        f'{where} "{region}" is not in the intensity table: its carbon is 0 g (out_of_table)'
        for where, region in named
        if region is not None and region != "unknown" and model.region(region) is None
    ]


def window_bounds(start_ns: np.ndarray, duration_ns: np.ndarray) -> tuple[int, int]:
    """(min start, max end) over spans with a known start; (0, 0) when there is none."""
    known = start_ns > 0
    if not known.any():
        return 0, 0
    starts = start_ns[known]
    return int(starts.min()), int((starts + duration_ns[known]).max())
