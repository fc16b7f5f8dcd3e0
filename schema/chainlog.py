"""A small durable hash-chained JSON-lines log for audit events (placement, admission).

Each line is a record sealed by ``schema.chain.seal`` with body key ``"event"``. Appends are
whole lines, flushed and fsynced. This is for low-rate audit logs; window archives have their
own writer with rotation, locking and recovery in ``agent/archive``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from schema import times
from schema.chain import ChainFinding, seal, verify_chain

BODY_KEY = "event"


def read_records(path: Path) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Yield ``("file:line", record or None)`` for every non-empty line of ``path``."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                rec = None
            yield f"{path.name}:{lineno}", rec if isinstance(rec, dict) else None


def verify(path: Path) -> list[ChainFinding]:
    findings, _, _ = verify_chain(read_records(path))
    return findings


def events(path: Path) -> list[dict[str, Any]]:
    """The events of a log, in order; raises ValueError naming the first break if tampered."""
    findings = verify(path)
    if findings:
        raise ValueError(f"audit log {path} failed verification: {findings[0]}")
    return [rec[BODY_KEY] for _, rec in read_records(path) if rec is not None]


def append(path: Path, event: dict[str, Any], ts: str | None = None) -> dict[str, Any]:
    """Append ``event`` as the next sealed record of the log at ``path`` and fsync it.

    Refuses to extend a log whose chain is broken (it would hide the break).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    last: dict[str, Any] | None = None
    findings, _, _ = verify_chain(read_records(path))
    if findings:
        raise ValueError(f"refusing to append to {path}: chain broken at {findings[0]}")
    for _, rec in read_records(path):
        last = rec
    seq = 0 if last is None else int(last["seq"]) + 1
    record = seal(None if last is None else last["hash"], seq, ts or times.now(), BODY_KEY, event)
    append_line(path, orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
    return record


def append_line(path: Path, line: bytes) -> None:
    """Append ``line`` (whole, newline included) with one write on an O_APPEND descriptor, then
    fsync: the durable append every small log uses (audit logs, checkpoints, witness logs)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
