"""The operations state ``carbonspan run`` decides with (docs/contracts.md, "Operations state of
the wrapper"), built from what a wrapper has:

- its own hash-chained run log: the job's failed checkpoint restores (``run-outcome`` events with
  ``checkpoint_restore_failed``) and every job's releases per region and slot (``run-decision``
  events' ``released``, less the runs cancelled while waiting), for the restore gate and the
  herd cap;
- an optional ``--ops FILE`` JSON the platform writes (``queue_age_minutes``, ``retry_rate``,
  ``observed_at``) for the kill switch: a wrapper sees only the runs it wrapped, whose wait is
  carbonspan's own deferral, not the platform's queue, and it sees no retries.

Concurrent wrappers serialise on an exclusive ``fcntl.flock`` of the log around reading it,
deciding and recording (:func:`locked`), so they cannot race past the herd cap, and every append
to the chain happens under that lock.
"""

from __future__ import annotations

import fcntl
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from scheduling.contracts import MINUTE_MS, WorkloadContract
from scheduling.decide import Guards, Ops
from scheduling.signals import SignalError, iso, to_ms

ENV_RESTORE_FAILED = "CARBONSPAN_RESTORE_FAILED_FILE"
OPS_FIELDS = ("queue_age_minutes", "retry_rate", "observed_at")


class OpsError(ValueError):
    pass


@contextmanager
def locked(log: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``log`` (created empty if missing) for the block."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def read_ops_file(path: Path, now_ms: int, g: Guards) -> dict[str, Any]:
    """The platform's kill-switch signals; a file that is malformed, or older than
    ``stale_minutes`` (``observed_at``), is an error naming what is wrong."""
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise OpsError(f"--ops {path}: cannot read: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise OpsError(f"--ops {path}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise OpsError(f"--ops {path}: expected an object with {', '.join(OPS_FIELDS)}")
    unknown = sorted(set(doc) - set(OPS_FIELDS))
    if unknown:
        raise OpsError(f"--ops {path}: unknown field(s) {unknown}; known: {', '.join(OPS_FIELDS)}")
    missing = [k for k in OPS_FIELDS if k not in doc]
    if missing:
        raise OpsError(f"--ops {path}: field(s) {missing} required")
    for k in ("queue_age_minutes", "retry_rate"):
        v = doc[k]
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise OpsError(f"--ops {path}: field `{k}` {v!r} must be a finite number >= 0")
    try:
        seen = to_ms(doc["observed_at"], f"--ops {path} field `observed_at`")
    except SignalError as exc:
        raise OpsError(str(exc)) from None
    age = (now_ms - seen) / MINUTE_MS
    if age >= g.stale_minutes:
        raise OpsError(f"--ops {path}: observed_at {iso(seen)} is {age:.0f} minutes old (stale_minutes "
                       f"{g.stale_minutes:g}); the platform must rewrite it")
    return {"queue_age_minutes": float(doc["queue_age_minutes"]), "retry_rate": float(doc["retry_rate"]),
            "observed_at": iso(seen), "age_minutes": max(0.0, age)}


def slot_of(t_ms: int, g: Guards) -> int:
    step = g.slot_minutes * MINUTE_MS
    return t_ms - t_ms % step


def ops_from_log(history: list[dict[str, Any]], c: WorkloadContract, mode: str, now_ms: int, g: Guards,
                 platform: dict[str, Any] | None) -> tuple[Ops, dict[str, Any]]:
    """The Ops for a decision of ``c`` at ``now_ms`` and a summary for the log event.

    Restore failures: the finish instants of this job's runs that reported one (the decision
    counts those in the current local day). Releases: per (region, slot) from ``now``'s slot on,
    the decisions of the same ``mode`` (shadow decisions count the shadow schedule, enforce
    decisions where enforced jobs really start), less runs cancelled while waiting."""
    cancelled = {e.get("run_id") for e in history
                 if e.get("type") == "run-outcome" and e.get("outcome") == "cancelled_while_waiting"}
    failures = []
    for e in history:
        if e.get("type") == "run-outcome" and e.get("job") == c.name and e.get("checkpoint_restore_failed"):
            failures.append(to_ms(e["finished"], "run log run-outcome `finished`"))
    released: dict[tuple[str, int], int] = {}
    first = slot_of(now_ms, g)
    for e in history:
        rel = e.get("released")
        if e.get("type") != "run-decision" or e.get("mode") != mode or not isinstance(rel, dict):
            continue
        if e.get("run_id") in cancelled:
            continue
        slot = to_ms(rel["slot"], "run log run-decision `released.slot`")
        if slot >= first:
            key = (str(rel["region"]), slot)
            released[key] = released.get(key, 0) + 1
    p = platform or {}
    ops = Ops(queue_age_minutes=p.get("queue_age_minutes", 0.0), retry_rate=p.get("retry_rate", 0.0),
              restore_failures=tuple(failures), released=released)
    summary = {"restore_failures": [iso(t) for t in failures if t <= now_ms and t > now_ms - 2 * 86_400_000],
               "released_slots": {f"{r} {iso(s)}": n for (r, s), n in sorted(released.items())},
               "platform": platform}
    return ops, summary
