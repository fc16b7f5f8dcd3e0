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
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduling.contracts import ContractError, WorkloadContract, load_contracts
from scheduling.signals import SignalError, SignalLog, iso, read_signal_log

if TYPE_CHECKING:
    from scheduling.decide import Decision

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
    p.add_argument("--ops", type=Path, help="JSON the platform writes for the kill switch: queue_age_minutes, "
                   "retry_rate, observed_at")
    p.add_argument("--recheck-seconds", type=float, default=60.0,
                   help="while waiting under --enforce, re-check the licence this often (default 60)")
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


def _record(log: Path, event: dict[str, Any], held: bool = False) -> str | None:
    """Append ``event`` to the chain under the log's flock (``held``: the caller holds it) and
    return where it went, ``PATH:LINE``; None (reported) when the log cannot be written."""
    from scheduling.run_ops import locked
    from schema.chainlog import append

    def append_here() -> str:
        append(log, event)
        with log.open("rb") as fh:  # the line just appended is the last, still under the flock
            return f"{log.absolute()}:{sum(1 for _ in fh)}"

    try:
        if held:
            return append_here()
        with locked(log):
            return append_here()
    except (OSError, ValueError) as exc:
        _say(f"cannot write the decision log {log}: {exc}; the command still runs")
        return None


def _decision_line(d: Decision, now: int, signal_path: Path | None, waits: bool) -> str:
    """The decision in one line, from its own fields: the start (now, or the one decided; "would"
    unless the wrapper waits for it), the region, the action, layer/reason, why the signal was
    unusable, the forecast it chose on."""
    when = (f"{'starts' if waits else 'would start'} {iso(d.start)} in {d.region}, "
            f"{d.deferral_minutes:.0f} min from now" if d.start > now else f"start now in {d.region}")
    why = f"{d.action}; {d.layer}/{d.reason}"
    if d.reason == "signal_stale":
        info = d.signal
        if signal_path is None:
            why += ": no --signal given, optimisation is off"
        elif info.get("status") == "missing":
            why += f": {signal_path} holds no observation of {info.get('region')}"
        else:
            why += (f": the latest observation of {info.get('region')} ended {info.get('interval_end')}, "
                    f"{info.get('staleness_minutes', 0.0):.0f} min ago")
    ci = d.forecast.get("intensity_at_decision")
    if ci is not None:
        why += f"; forecast {ci:.0f} gCO2e/kWh over the run"
    return f"{d.job}: {when} ({why})"


def _metrics(path: Path, log: Path) -> None:
    from scheduling.contract_metrics import write
    from schema.chainlog import events

    try:
        write(path, [e["decision"] for e in events(log) if e.get("type") == "run-decision" and "decision" in e])
    except (OSError, ValueError) as exc:
        _say(f"cannot write the metrics file {path}: {exc}; the command still runs")


def _wait(until_ms: int, recheck: Callable[[], bool], every_s: float) -> str:
    """Sleep until ``until_ms``: ``"start"``; ``"sigterm"`` if SIGTERM arrived first;
    ``"withdrawn"`` if ``recheck()`` (every ``every_s`` and at the end) says the licence is gone."""
    stop = threading.Event()
    old = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    next_check = time.monotonic() + every_s
    try:
        while not stop.is_set():
            left = until_ms / 1000 - time.time()
            if left <= 0:
                return "start" if recheck() else "withdrawn"
            if time.monotonic() >= next_check:
                if not recheck():
                    return "withdrawn"
                next_check = time.monotonic() + every_s
            stop.wait(max(0.0, min(left, 1.0, next_check - time.monotonic())))
        return "sigterm"
    finally:
        signal.signal(signal.SIGTERM, old)


def _execute(command: list[str], env: dict[str, str] | None = None) -> int:
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        _say(f"cannot start {command[0]!r}: {exc.strerror}")
        return 127
    old = signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, old)
    return 128 - code if code < 0 else code


def _history(log: Path) -> list[dict[str, Any]]:
    from schema.chainlog import events

    if not log.exists() or not log.stat().st_size:
        return []
    return events(log)  # raises ValueError naming the first break of a tampered log


def cmd_run(args: argparse.Namespace) -> int:
    from scheduling.cli_shadow import load_guards
    from scheduling.decide import decide
    from scheduling.run_ops import OpsError, locked, ops_from_log, read_ops_file, slot_of
    from scheduling.shadow_evidence import licence, shadow_identity

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        _say("give the command after --, e.g. carbonspan run --contract c.yaml -- ./job.sh")
        return 2
    log = args.log or default_log()
    run_id = uuid.uuid4().hex
    mode = "enforce" if args.enforce else "shadow"
    try:
        c = _contract(args)
        guards = load_guards(args.guards)
        sig = read_signal_log(args.signal) if args.signal else SignalLog({}, {})
        identity = shadow_identity(c, guards)
        licensed, why = licence(c.name, identity, args.audit_log) if args.enforce else (False, "")
        with locked(log):  # read, decide and record as one step: concurrent wrappers see each other's releases
            now = int(time.time() * 1000)
            platform = read_ops_file(args.ops, now, guards) if args.ops else None
            ops, ops_doc = ops_from_log(_history(log), c, mode, now, guards, platform)
            d = decide(c, now, sig, ops, guards)
            wait = args.enforce and licensed and d.start > now
            start = d.start if (wait or not args.enforce) else now
            region = d.region if (wait or not args.enforce) else c.home_region
            event = {"type": "run-decision", "run_id": run_id, "mode": mode, "decision": d.to_json(),
                     "command": command[0], "policy_identity": identity, "ops": ops_doc,
                     "released": {"region": region, "slot": iso(slot_of(start, guards))}}
            if args.enforce:
                event["licensed"], event["licence"] = licensed, why
            event["action"] = f"wait until {iso(d.start)}" if wait else "run at once"
            where = _record(log, event, held=True)
    except (ContractError, SignalError, OpsError, OSError, ValueError) as exc:
        _say(f"{exc}; running the command at once, undecided")
        where = _record(log, {"type": "run-decision", "run_id": run_id, "mode": "error", "error": str(exc),
                              "command": command[0]})
        if where:
            _say(f"recorded (mode error) in {where}")
        return _run_and_record(log, args.job, command, run_id)
    _say(_decision_line(d, now, args.signal, wait))
    recorded = f"; decision recorded in {where}" if where else ""
    if not args.enforce:
        later = ", not at the decided start (pass --enforce to wait for it)" if d.start > now else ""
        _say(f"shadow mode: the command runs now{later}{recorded}")
    elif not licensed:
        _say(f"enforce: not licensed for {c.name}: {why}; the command runs now{recorded}")
    elif not wait:
        _say(f"enforce: licensed; the decided start is now, the command runs now{recorded}")
    else:
        _say(f"enforce: licensed; waiting until {iso(d.start)} to start in {d.region} (licence re-checked "
             f"every {max(1.0, args.recheck_seconds):g} s; SIGTERM cancels){recorded}")
    if args.metrics:
        _metrics(args.metrics, log)
    if wait:
        lost: list[str] = []

        def still_licensed() -> bool:
            ok, reason = licence(c.name, identity, args.audit_log)
            if not ok:
                lost.append(reason)
            return ok

        how = _wait(d.start, still_licensed, max(1.0, args.recheck_seconds))
        if how == "sigterm":
            _record(log, {"type": "run-outcome", "run_id": run_id, "job": c.name, "outcome": "cancelled_while_waiting",
                          "signal": "SIGTERM", "ran": False})
            _say("SIGTERM while waiting: nothing ran")
            return 143
        if how == "withdrawn":
            _record(log, {"type": "run-licence-withdrawn", "run_id": run_id, "job": c.name, "licence": lost[-1],
                          "at": iso(int(time.time() * 1000))})
            _say(f"licence for {c.name} withdrawn while waiting: {lost[-1]}; running at once")
    return _run_and_record(log, c.name, command, run_id)


def _run_and_record(log: Path, job: str | None, command: list[str], run_id: str) -> int:
    """Run the command and append its ``run-outcome`` (also when no decision could be made).
    The command finds in ``$CARBONSPAN_RESTORE_FAILED_FILE`` a path to create when its checkpoint
    restore failed; the outcome then records ``checkpoint_restore_failed`` (the restore gate)."""
    from scheduling.run_ops import ENV_RESTORE_FAILED

    with tempfile.TemporaryDirectory(prefix="carbonspan-run-") as tmp:
        flag = Path(tmp) / "restore-failed"
        started = int(time.time() * 1000)
        code = _execute(command, {**os.environ, ENV_RESTORE_FAILED: str(flag)})
        failed = flag.exists()
    if failed:
        _say(f"{job}: the command reported a failed checkpoint restore (${ENV_RESTORE_FAILED})")
    _record(log, {"type": "run-outcome", "run_id": run_id, "job": job, "outcome": "ran", "exit_status": code,
                  "started": iso(started), "finished": iso(int(time.time() * 1000)), "ran": True,
                  "checkpoint_restore_failed": failed})
    return code
