"""The ``carbonspan`` console script: one entry point, one subcommand per job.

Each subcommand lives with the part of the project it drives and is imported only when used,
so ``carbonspan verify`` never loads gRPC and the agent never loads Dask. A subcommand module
provides ``register(subparsers) -> None`` (adds its parser, sets ``func``) and its handler
returns a process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from carbonspan import __version__

#: subcommand -> (module providing ``register``, one-line summary)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "score": ("agent.cli_score", "score OTLP trace files as one window and print the report"),
    "backfill": ("agent.cli_backfill", "score historic trace files into a chain of its own"),
    "agent": ("agent.cli_agent", "run the OTLP agent (gRPC :4317, HTTP :4318) writing archives"),
    "demo": ("carbonspan.demo", "run the main job end to end on embedded defaults"),
    "aggregate": ("aggregator.cli", "fold a period of archives into a disclosure report"),
    "verify": ("aggregator.cli_verify", "auditor: check hash chains, invariants and a report"),
    "keys": ("carbonspan.cli_keys", "make and show Ed25519 signing keys (agents, witnesses, reports)"),
    "witness": ("witness.cli", "run a witness that cosigns consistent checkpoints (C2SP tlog-witness)"),
    "calibrate": ("agent.sources.cli_calibrate", "derive per-service calibration factors"),
    "policy": ("placement.cli", "evaluate and gate carbon-aware placement policies"),
    "place": ("placement.cli_place", "place one job through the policy gate"),
    "admit": ("admission.cli", "energy-accounted multi-tenant admission (pool/1)"),
    "simulate": ("scheduling.cli", "simulate a cluster from OpenDC experiment files (energy, carbon, shifting)"),
    "shadow": ("scheduling.cli_shadow", "shadow schedule: what carbonspan would have decided, beside what ran"),
    "run": ("scheduling.cli_run", "run a command under its workload contract (shadow by default, --enforce to wait)"),
}


def accelerators() -> dict[str, bool]:
    """Which optional C accelerators this install uses (False: the pure-Python path, same
    answers, slower; e.g. installed without a C compiler, or a stale build refused)."""
    found: dict[str, bool] = {}
    try:
        from agent.otlp import FAST_DECODER
        from agent.otlp.jsonfast import FAST_JSON

        found["otlp-protobuf"], found["otlp-json"] = bool(FAST_DECODER), bool(FAST_JSON)
    except ImportError:
        found["otlp-protobuf"] = found["otlp-json"] = False
    try:
        from agent.score import FAST_SCORER

        found["score"] = bool(FAST_SCORER)
    except ImportError:
        found["score"] = False
    try:
        from aggregator.fold.fast import ACCELERATED

        found["aggregate-fold"] = ACCELERATED
    except ImportError:
        found["aggregate-fold"] = False
    return found


class _VersionAction(argparse.Action):
    """``--version``: the version, then one word per accelerator (``C`` or ``python``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        parts = ", ".join(f"{k} {'C' if v else 'python'}" for k, v in accelerators().items())
        print(f"carbonspan {__version__} (decoders, scorer and fold: {parts})")
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="carbonspan",
        description="Per-service energy and carbon from OpenTelemetry traces, "
        "with hash-chained archives and auditable disclosure reports.",
        epilog="Run 'carbonspan COMMAND --help' for a command's options and an example.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the version and which C accelerators are in use, then exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, summary) in SUBCOMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=summary)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not module_name.startswith(exc.name or "\0"):
                raise
            sub.add_parser(name, help=f"{summary} (not available in this build)")
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(only=command if command in SUBCOMMANDS else None)
    args = parser.parse_args(args_list)
    func = getattr(args, "func", None)
    if func is None:
        if args.command:
            print(f"carbonspan: '{args.command}' is not available in this build", file=sys.stderr)
            return 2
        parser.print_help()
        return 0
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130
