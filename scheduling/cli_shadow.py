"""``carbonspan shadow``: run a shadow schedule beside the real one, report it, or make one decision."""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import orjson
import yaml

from scheduling.contracts import ContractError, load_contracts
from scheduling.decide import Guards, decide
from scheduling.signals import SignalError, read_signal_log, to_ms

#: guard settings that count something (failures, jobs, minutes of the slot grid)
WHOLE_GUARDS = ("restore_failures", "release_cap", "slot_minutes")

EPILOG = """\
examples:
  carbonspan shadow run --contracts contracts.yaml --runs runs.jsonl --signal signals.jsonl --log shadow.log
  kubectl get jobs -A -o json > jobs.json && carbonspan shadow run --contracts c.yaml --runs jobs.json --signal s.jsonl --log shadow.log
  sacct --json > sacct.json && carbonspan shadow run --contracts c.yaml --runs sacct.json --signal s.jsonl --log shadow.log
  carbonspan shadow report shadow.log --json
  carbonspan shadow report shadow.log --html report.html --record
  carbonspan shadow run --contracts c.yaml --runs runs.jsonl --signal s.jsonl --archives /var/lib/carbonspan --log shadow.log
  carbonspan shadow signals --gb fw48h.json --fetched-at 2026-03-01T00:05:00Z --out signals.jsonl
  carbonspan shadow signals --rte eco2mix.json --fetched-at 2026-03-01T00:20:00Z --region eu-west-3 --out signals.jsonl
  carbonspan shadow decide --contracts contracts.yaml --job nightly-search-reindex --at 2026-03-01T15:00:00Z --signal signals.jsonl

Nothing moves in shadow mode: carbonspan records what it would have decided at each run's
submission, beside what actually ran (docs/contracts.md).
"""


def load_guards(path: Path | None) -> Guards:
    """Guard settings from a YAML mapping of Guards fields (docs/contracts.md, "Guards")."""
    if path is None:
        return Guards()
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ContractError(f"{path}: expected a mapping of guard settings (docs/contracts.md, \"Guards\")")
    known = {f.name: f.type for f in fields(Guards)}
    unknown = sorted(set(data) - set(known), key=str)
    if unknown:
        raise ContractError(f"{path}: unknown guard setting(s) {unknown}; known: {', '.join(known)}")
    bad = [k for k, v in data.items() if not isinstance(v, int | float) or isinstance(v, bool)
           or not math.isfinite(v) or v < 0]
    if bad:
        raise ContractError(f"{path}: guard setting(s) {bad} must be finite numbers >= 0")
    whole = [k for k in WHOLE_GUARDS if k in data and data[k] != int(data[k])]
    if whole:
        raise ContractError(f"{path}: guard setting(s) {whole} must be whole numbers")
    if data.get("slot_minutes", 1) < 1:
        raise ContractError(f"{path}: slot_minutes {data['slot_minutes']!r} must be at least 1 "
                            "(the grid of candidate starts, in minutes)")
    return Guards(**{k: int(v) if k in WHOLE_GUARDS else v for k, v in data.items()})


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "shadow", help="shadow schedule: what carbonspan would have decided, beside what ran",
        description="Shadow schedule for workload contracts: decisions beside the real runs, "
        "measured savings with a range, and single decisions for scripts.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=lambda _a: (parser.print_help(), 2)[1])
    sub = parser.add_subparsers(dest="shadow_command", metavar="ACTION")
    run = _action(sub, "run", "decide for every actual run at its submission; write the hash-chained shadow log")
    run.add_argument("--contracts", required=True, type=Path, help="workload contract YAML")
    run.add_argument("--runs", required=True, type=Path, help="JSON lines, a Kubernetes Job list or sacct --json")
    run.add_argument("--signal", required=True, type=Path, help="the signal log (JSON lines)")
    run.add_argument("--log", required=True, type=Path, help="the shadow log to write (a new file)")
    run.add_argument("--guards", type=Path, help="YAML of guard settings (default: the documented defaults)")
    run.add_argument("--archives", type=Path, help="carbonspan archive root: energy per run for contracts with `service`")
    run.add_argument("--metrics", type=Path, help="also write the decision metrics as a Prometheus text file")
    run.set_defaults(func=cmd_run)
    rep = _action(sub, "report", "per job and in total: avoided kgCO2e estimated and measured, with ranges")
    rep.add_argument("log", type=Path, help="a shadow log written by `carbonspan shadow run`")
    rep.add_argument("--json", action="store_true", help="print the report as JSON")
    rep.add_argument("--html", type=Path, help="also write the report as HTML to this file")
    rep.add_argument("--record", action="store_true", help="record the report as evidence in the placement audit log")
    rep.add_argument("--audit-log", type=Path, help="the placement audit log (default: placement's)")
    rep.set_defaults(func=cmd_report)
    sg = _action(sub, "signals", "append saved GB grid operator, Electricity Maps or RTE answers to a signal log")
    src = sg.add_mutually_exclusive_group(required=True)
    src.add_argument("--gb", type=Path, help="a saved GB Carbon Intensity API answer (/intensity/..., fw48h)")
    src.add_argument("--electricitymaps", type=Path, help="a saved Electricity Maps v3 latest, history or forecast answer")
    src.add_argument("--rte", type=Path, help="a saved RTE éCO2mix answer (ODRÉ eco2mix-national-tr records)")
    sg.add_argument("--fetched-at", help="with --gb and --rte: when the answer was fetched (RFC 3339); values were known then")
    sg.add_argument("--region", help="the region to file the rows under (default: GB, FR, or the answer's zone)")
    sg.add_argument("--out", required=True, type=Path, help="the signal log to append to")
    sg.set_defaults(func=cmd_signals)
    one = _action(sub, "decide", "one decision: start time, region, layer and reason code")
    one.add_argument("--contracts", required=True, type=Path, help="workload contract YAML")
    one.add_argument("--job", required=True, help="the contract name")
    one.add_argument("--at", required=True, help="the decision time, RFC 3339 (e.g. 2026-03-01T15:00:00Z)")
    one.add_argument("--signal", required=True, type=Path, help="the signal log (JSON lines)")
    one.add_argument("--guards", type=Path, help="YAML of guard settings")
    one.add_argument("--json", action="store_true", help="print the decision as JSON")
    one.set_defaults(func=cmd_decide)


def _action(sub: Any, name: str, summary: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                          epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)


def _fail(msg: str) -> int:
    print(f"carbonspan shadow: {msg}", file=sys.stderr)
    return 2


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return "sha256:" + h.hexdigest()


def cmd_run(args: argparse.Namespace) -> int:
    from scheduling.archive_energy import ArchiveError, read_archives
    from scheduling.runs import read_runs
    from scheduling.shadow import shadow_events, write_log
    from scheduling.signals import signal_files

    try:
        contracts = load_contracts(args.contracts)
        runs = read_runs(args.runs)
        sig = read_signal_log(args.signal)
        guards = load_guards(args.guards)
        archives = read_archives(args.archives) if args.archives is not None else None
        inputs = {"contracts": _digest(args.contracts), "runs": _digest(args.runs),
                  "signal": _digest(*signal_files(args.signal))}
        events = shadow_events(contracts, runs, sig, guards, inputs, archives)
        n = write_log(args.log, events)
        if args.metrics:
            from scheduling.contract_metrics import write

            write(args.metrics, [e["decision"] for e in events[1:]])
    except (ContractError, SignalError, ArchiveError, OSError, ValueError) as exc:
        return _fail(str(exc))
    head = events[0]
    print(f"{n - 1} decisions for {len(runs.runs)} runs ({runs.format}) -> {args.log}")
    if runs.skipped:
        print(f"skipped {len(runs.skipped)} run(s): {runs.skipped[0]}{' ...' if len(runs.skipped) > 1 else ''}")
    if head["jobs_without_contract"]:
        print(f"no contract for: {', '.join(head['jobs_without_contract'])} (their runs are left out)")
    energy = [e["energy"] for e in events[1:]]
    from_archives = sum(1 for e in energy if e["source"] == "archives" and e["kwh"] is not None)
    unmeasured = [e for e in energy if e["kwh"] is None]
    if archives is not None:
        print(f"energy from archives ({len(archives)} agent chain(s) verified): {from_archives} run(s)")
    if unmeasured:
        print(f"energy not measured for {len(unmeasured)} run(s), left out of the savings: {unmeasured[0]['reason']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from scheduling.shadow_report import render_html, render_text, report

    try:
        doc = report(args.log)
        if args.record:
            from scheduling.shadow_evidence import record

            doc["recorded"] = record(doc, args.audit_log)
        if args.html:
            args.html.write_text(render_html(doc), encoding="utf-8")
    except (ValueError, OSError) as exc:
        return _fail(str(exc))
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(render_text(doc), end="")
        for job, rec in (doc.get("recorded") or {}).items():
            print(f"recorded {job}: seq {rec['seq']} {rec['hash']} ({rec['verdict']})")
    return 0


def cmd_signals(args: argparse.Namespace) -> int:
    from scheduling.signals import parse_lines
    from schema.signal_log import SignalLogWriter, encode
    from schema.signal_sources import from_electricitymaps, from_gb, from_rte

    try:
        if args.gb is not None or args.rte is not None:
            flag = "--gb" if args.gb is not None else "--rte"
            if not args.fetched_at:
                return _fail(f"{flag} needs --fetched-at: the API gives no publication times")
            fetched = to_ms(args.fetched_at, "--fetched-at")
            if args.gb is not None:
                rows, counts = from_gb(orjson.loads(args.gb.read_bytes()), fetched, args.region or "GB")
            else:
                rows, counts = from_rte(orjson.loads(args.rte.read_bytes()), fetched, args.region or "FR")
        else:
            rows, counts = from_electricitymaps(orjson.loads(args.electricitymaps.read_bytes()), args.region)
        parse_lines([encode(r) for r in rows], "the converted rows")  # every row must read back
        writer = SignalLogWriter(args.out)
        try:
            done = writer.append(rows)
        finally:
            writer.close()
    except (SignalError, OSError, ValueError) as exc:
        return _fail(str(exc))
    print(f"appended {done.observations + done.forecasts} rows to {args.out} ({done.unchanged} already in it"
          f"{', rotated the old file to ' + args.out.name + '.1' if done.rotated else ''}): "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    try:
        contracts = load_contracts(args.contracts)
        if args.job not in contracts:
            return _fail(f"--job {args.job!r}: no such contract in {args.contracts} ({', '.join(sorted(contracts))})")
        at = to_ms(args.at, "--at")
        sig, guards = read_signal_log(args.signal), load_guards(args.guards)
        d = decide(contracts[args.job], at, sig, None, guards)
    except (ContractError, SignalError, OSError, ValueError) as exc:
        return _fail(str(exc))
    doc = d.to_json()
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    print(f"{doc['job']}: start {doc['start']} in {doc['region']} ({doc['action']}); "
          f"layer {doc['layer']}, reason {doc['reason']}; deferral {doc['deferral_minutes']:.0f} min, "
          f"slack {doc['deadline_slack_minutes']} min")
    if doc["reason"] == "signal_stale":
        print(f"  {_stale_why(doc['signal'], sig, args.signal, guards.stale_minutes)}")
    return 0


def _stale_why(info: dict[str, Any], sig: Any, path: Path, stale_minutes: float) -> str:
    """What signal_stale means for this decision: no observation of the region at all (and
    what the log holds instead), or the latest one too old."""
    region = info.get("region")
    if info.get("status") == "missing":
        observed = sorted(r for r, rows in sig.observed.items() if rows.start.size)
        forecast = sorted(r for r, rows in sig.forecasts.items() if rows.start.size)
        holds = (f"observations of {', '.join(observed) or 'no region'}"
                 f"{'; forecasts of ' + ', '.join(forecast) if forecast else ''}")
        return (f"signal_stale: {path} holds no observed intensity of {region} ({holds}); the decision "
                "needs an observation of the region it runs in (shadow signals --region, or the "
                "agent's [agent.signal_log])")
    return (f"signal_stale: the latest observation of {region} ended {info.get('interval_end')}, "
            f"{info.get('staleness_minutes', 0.0):.0f} min before the decision, at least the guards' "
            f"stale_minutes {stale_minutes:g}")
