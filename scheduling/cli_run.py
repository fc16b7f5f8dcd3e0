"""``carbonspan run``: wrap a cron or CI job under its workload contract (docs/contracts.md, "carbonspan run").

Shadow mode (the default) runs the command at once and records the decision carbonspan would
have made. ``--enforce`` waits until the decided start, but only while the placement gate
licenses this job's shadow policy (a current real shadow win); otherwise it runs at once and
says why. The exit status is the command's. SIGTERM while waiting runs nothing, records that
and exits 143; SIGTERM while the command runs is passed on to it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from scheduling.contracts import ContractError, WorkloadContract, load_contracts
from scheduling.signals import SignalError, SignalLog, iso, read_signal_log

EPILOG = """\
examples:
  carbonspan run --contract reindex.yaml -- ./reindex.sh --full
  carbonspan run --contract jobs.yaml --job nightly-search-reindex --signal signals.jsonl -- make reindex
  carbonspan run --contract reindex.yaml --signal signals.jsonl --enforce -- ./reindex.sh

In a crontab:  0 0 * * *  carbonspan run --contract /etc/carbonspan/reindex.yaml --signal /var/lib/carbonspan/signals.jsonl -- /opt/reindex
"""
ENV_LOG = "CARBONSPAN_RUN_LOG"


def default_log() -> Path:
    raw = os.environ.get(ENV_LOG)
    if raw:
        return Path(raw)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "carbonspan" / "run-decisions.log"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run", help="run a command under its workload contract (shadow by default, --enforce to wait)",
        description="Run COMMAND under a workload contract: record the decision (shadow mode) or wait "
        "for the decided start when the placement gate licenses it (--enforce).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contract", required=True, type=Path, help="workload contract YAML")
    p.add_argument("--job", help="the contract name (needed when the file holds several)")
    p.add_argument("--signal", type=Path, help="the signal log; without one, optimisation is off (signal_stale)")
    p.add_argument("--guards", type=Path, help="YAML of guard settings")
    p.add_argument("--log", type=Path, help=f"decision log (default: ${ENV_LOG} or $XDG_STATE_HOME/carbonspan/run-decisions.log)")
    p.add_argument("--enforce", action="store_true", help="wait for the decided start if the gate licenses this job")
    p.add_argument("--audit-log", type=Path, help="the placement audit log the licence is read from")
    p.add_argument("--metrics", type=Path, help="rewrite this Prometheus text file from every decision in the log")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    p.set_defaults(func=cmd_run)


def _say(msg: str) -> None:
    print(f"carbonspan run: {msg}", file=sys.stderr, flush=True)


def _contract(args: argparse.Namespace) -> WorkloadContract:
    contracts = load_contracts(args.contract)
    if args.job is None:
        if len(contracts) != 1:
            raise ContractError(f"{args.contract} holds {len(contracts)} contracts; name one with --job")
        return next(iter(contracts.values()))
    if args.job not in contracts:
        raise ContractError(f"--job {args.job!r}: not in {args.contract} ({', '.join(sorted(contracts))})")
    return contracts[args.job]


def _record(log: Path, event: dict[str, Any]) -> None:
    from schema.chainlog import append

    try:
        append(log, event)
    except (OSError, ValueError) as exc:
        _say(f"cannot write the decision log {log}: {exc}; the command still runs")


def _metrics(path: Path, log: Path) -> None:
    from scheduling.contract_metrics import write
    from schema.chainlog import events

    try:
        write(path, [e["decision"] for e in events(log) if e.get("type") == "run-decision" and "decision" in e])
    except (OSError, ValueError) as exc:
        _say(f"cannot write the metrics file {path}: {exc}; the command still runs")


def _wait(until_ms: int) -> bool:
    """Sleep until ``until_ms``; False if SIGTERM arrived first."""
    stop = threading.Event()
    old = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.is_set():
            left = until_ms / 1000 - time.time()
            if left <= 0:
                return True
            stop.wait(min(left, 1.0))
        return False
    finally:
        signal.signal(signal.SIGTERM, old)


def _execute(command: list[str]) -> int:
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        _say(f"cannot start {command[0]!r}: {exc.strerror}")
        return 127
    old = signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, old)
    return 128 - code if code < 0 else code


def cmd_run(args: argparse.Namespace) -> int:
    from scheduling.cli_shadow import load_guards
    from scheduling.decide import decide
    from scheduling.shadow import policy_identity

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        _say("give the command after --, e.g. carbonspan run --contract c.yaml -- ./job.sh")
        return 2
    log = args.log or default_log()
    now = int(time.time() * 1000)
    try:
        c = _contract(args)
        guards = load_guards(args.guards)
        sig = read_signal_log(args.signal) if args.signal else SignalLog({}, {})
        d = decide(c, now, sig, None, guards)
    except (ContractError, SignalError, OSError, ValueError) as exc:
        _say(f"{exc}; running the command at once, undecided")
        _record(log, {"type": "run-decision", "mode": "error", "error": str(exc), "command": command[0]})
        return _run_and_record(log, args.job, command)
    event = {"type": "run-decision", "mode": "enforce" if args.enforce else "shadow", "decision": d.to_json(),
             "command": command[0], "policy_identity": policy_identity(guards)}
    wait = False
    if args.enforce:
        from scheduling.shadow_evidence import licence

        licensed, why = licence(c.name, event["policy_identity"], args.audit_log)
        event["licensed"], event["licence"] = licensed, why
        wait = licensed and d.start > now
        if not licensed:
            _say(f"not licensed for {c.name}: {why}; running at once")
    event["action"] = f"wait until {iso(d.start)}" if wait else "run at once"
    _record(log, event)
    if args.metrics:
        _metrics(args.metrics, log)
    if wait:
        _say(f"{c.name}: waiting until {iso(d.start)} ({d.layer}/{d.reason}, region {d.region})")
        if not _wait(d.start):
            _record(log, {"type": "run-outcome", "job": c.name, "outcome": "cancelled_while_waiting",
                          "signal": "SIGTERM", "ran": False})
            _say("SIGTERM while waiting: nothing ran")
            return 143
    return _run_and_record(log, c.name, command)


def _run_and_record(log: Path, job: str | None, command: list[str]) -> int:
    """Run the command and append its ``run-outcome`` (also when no decision could be made)."""
    started = int(time.time() * 1000)
    code = _execute(command)
    _record(log, {"type": "run-outcome", "job": job, "outcome": "ran", "exit_status": code,
                  "started": iso(started), "finished": iso(int(time.time() * 1000)), "ran": True})
    return code
