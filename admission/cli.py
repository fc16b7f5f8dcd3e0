"""``carbonspan admit``: replay claims through pool/1 and audit its decision log."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from admission.grades import DEFAULT_WINDOWS, estimate_service
from admission.log import DecisionLog, audit
from admission.model import PoolConfigError, load_pools
from admission.simulate import EventsError, Outcome, Simulator, parse_events

EPILOG = """\
example:
  carbonspan admit simulate --pools pools.toml --events events.jsonl
  carbonspan admit simulate --pools pools.toml --events events.jsonl --json --log decisions.jsonl
  carbonspan admit simulate --pools pools.toml --events events.jsonl --archives archives/
  carbonspan admit audit --log decisions.jsonl

pools.toml holds [[pool]] tables (name, parent, energy_uj, devices, weight); events.jsonl
holds one event per line: claim, complete, meter, release or rollover (docs/admission.md).
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "admit",
        help="energy-accounted multi-tenant admission (pool/1)",
        description="Decide admission in microjoules and devices over a forest of pools: "
        "estimator claims never borrow, gangs are all-or-nothing, surplus is shared by weight.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    sub = parser.add_subparsers(dest="admit_command", metavar="ACTION")
    sim = _action(
        sub, "simulate", "replay an events file and print each verdict and the per-pool usage",
        "Replay claims, completions, meter readings, releases and rollovers; print each verdict "
        "and the final per-pool energy usage against budget.",
    )
    sim.add_argument("--pools", required=True, type=Path, help="pool forest (TOML)")
    sim.add_argument("--events", required=True, type=Path, help="events (JSON lines)")
    sim.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    sim.add_argument("--log", type=Path, help="append every input and verdict to this hash-chained log")
    sim.add_argument("--archives", type=Path, help="carbonspan archive directory for claims naming a service")
    sim.add_argument("--agent-id", help="only this agent's archives (default: all)")
    sim.add_argument(
        "--windows", type=_positive, default=DEFAULT_WINDOWS,
        help=f"recent archive windows per service estimate (default {DEFAULT_WINDOWS})",
    )
    sim.set_defaults(func=run_simulate)
    aud = _action(
        sub, "audit", "verify a decision log's chain and replay its verdicts",
        "Check the hash chain of a decision log, rebuild the pools it records and replay every "
        "input; any verdict that differs is reported.",
    )
    aud.add_argument("--log", required=True, type=Path, help="decision log written by simulate --log")
    aud.set_defaults(func=run_audit)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of windows >= 1, got {text!r}")
    return value


def _action(sub: Any, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name, help=summary, description=description, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def run_simulate(args: argparse.Namespace) -> int:
    try:
        forest = load_pools(args.pools)
    except PoolConfigError as exc:
        print(f"carbonspan admit: {exc}", file=sys.stderr)
        return 2
    estimates = None
    if args.archives is not None:
        estimates = partial(estimate_service, args.archives, agent_id=args.agent_id, windows=args.windows)
    try:
        events = parse_events(args.events, forest, estimates)
    except EventsError as exc:
        print(f"carbonspan admit: {exc}\nnothing was replayed; fix these lines and run again", file=sys.stderr)
        return 2
    try:
        log = _open_log(args.log) if args.log else None
    except ValueError as exc:
        print(f"carbonspan admit: {exc}", file=sys.stderr)
        return 2
    sim = Simulator(forest, log)
    try:
        outcome = sim.run(events)
    finally:
        if log is not None:
            log.close()
    usage = sim.engine.usage()
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(_as_json(outcome, usage), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(_render(outcome, usage))
    for err in outcome.errors:
        print(f"carbonspan admit: {err}", file=sys.stderr)
    return 1 if outcome.errors else 0


def _open_log(path: Path) -> DecisionLog:
    """Open the decision log, failing before the replay (not at its first flush) if it cannot
    be written, so no verdict is decided that the log would then miss."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab"):
            pass
        return DecisionLog(path)
    except OSError as exc:
        raise ValueError(
            f"{path}: cannot write the decision log: {exc.strerror}; pass a writable file to --log"
        ) from None


def run_audit(args: argparse.Namespace) -> int:
    try:
        problems = audit(args.log)
    except (ValueError, OSError) as exc:
        print(f"carbonspan admit: {exc}", file=sys.stderr)
        return 1
    for p in problems:
        print(f"carbonspan admit: {args.log.name}: {p}", file=sys.stderr)
    if not problems:
        print(f"{args.log}: chain intact; every recorded verdict replays identically")
    return 1 if problems else 0


def _as_json(outcome: Outcome, usage: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "verdicts": [{"event": where, **v.to_dict()} for where, v in outcome.verdicts],
        "preempted": outcome.preempted,
        "pending": [{"event": where, "claim": claim} for where, claim in outcome.pending],
        "pools": usage,
        "errors": outcome.errors,
    }


def _table(headers: list[str], rows: list[list[str]], right: frozenset[int] = frozenset()) -> str:
    """Columns two spaces apart; those in ``right`` (the figures) right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def _uj(value: int) -> str:
    """An integer figure with its thousands grouped (``5,400,000,000``), as the rest of the CLI prints counts."""
    return f"{value:,}"


def _render(outcome: Outcome, usage: list[dict[str, Any]]) -> str:
    vrows = [
        [
            where, v.claim, v.decision, v.step, v.grade, _uj(v.from_guarantee_uj),
            _uj(v.borrowed_uj), str(v.devices),
            v.reason + (f"; waits for {v.waits_for}" if v.waits_for else "")
            + (f"; preempted {', '.join(v.preempted)}" if v.preempted else ""),
        ]
        for where, v in outcome.verdicts
    ]
    prow = [
        [
            "  " * u["depth"] + u["pool"], _uj(u["guarantee_uj"]), _uj(u["spent_uj"]),
            _uj(u["reserved_uj"]), _uj(u["used_uj"]), _uj(u["borrowed_uj"]), _uj(u["cap_uj"]),
            f"{100 * u['used_uj'] / u['guarantee_uj']:.1f}%" if u["guarantee_uj"] else "-",
            f"{u['devices_used']}/{u['devices']}",
        ]
        for u in usage
    ]
    return "\n".join(
        [
            "verdicts",
            _table(["event", "claim", "decision", "step", "grade", "own_uj", "borrowed_uj", "devices", "reason"], vrows,
                   frozenset({5, 6, 7})),
            "",
            "still pending at the end: "
            + (", ".join(f"{claim} ({where})" for where, claim in outcome.pending) or "none"),
            "",
            "pools (energy in µJ this window)",
            _table(["pool", "guarantee", "spent", "reserved", "used", "borrowed", "cap_now", "used/guar", "devices"], prow,
                   frozenset(range(1, 9))),
        ]
    )
