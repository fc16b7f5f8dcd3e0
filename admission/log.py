"""The decision log: every input and verdict, hash-chained like the archives, written in batches.

Records use the chain of ``schema.chain`` with body key ``"event"``, exactly the format of
``schema.chainlog``, so ``schema.chainlog.verify`` and ``schema.chainlog.events`` read it.
``schema.chainlog.append`` fsyncs once per record, which is right for a low-rate audit log
and far too slow for replaying 100,000 claims; ``DecisionLog`` seals records one by one but
writes and fsyncs them once per ``flush`` (every ``batch`` records and on close).

The first event of a log is ``{"kind": "pools", "pools": [...]}``, the forest definition; then
one event per input (``claim``/``gang`` with their verdicts, ``complete``, ``meter``,
``release``, ``rollover``). ``audit`` rebuilds the engine from the pools event, replays the
inputs and reports every verdict that does not match the one recorded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from admission.claims import Claim
from admission.engine import Admission
from admission.model import PoolConfigError, build_forest
from schema import chainlog, times
from schema.chain import seal, verify_chain


class DecisionLog:
    """A batched appender for one hash-chained decision log (continues an existing chain)."""

    def __init__(self, path: str | Path, batch: int = 4096) -> None:
        self.path = Path(path)
        self.batch = batch
        findings, last_hash, _ = verify_chain(chainlog.read_records(self.path))
        if findings:
            raise ValueError(f"refusing to append to {self.path}: chain broken at {findings[0]}")
        last = None
        for _, rec in chainlog.read_records(self.path):
            last = rec
        self._prev = last_hash
        self._seq = 0 if last is None else int(last["seq"]) + 1
        self._buf: list[bytes] = []

    def append(self, event: dict[str, Any], ts: str | None = None) -> dict[str, Any]:
        """Seal ``event`` as the next record; it reaches the disk at the next flush."""
        record = seal(self._prev, self._seq, ts or times.now(), chainlog.BODY_KEY, event)
        self._prev = record["hash"]
        self._seq += 1
        self._buf.append(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
        if len(self._buf) >= self.batch:
            self.flush()
        return record

    def flush(self) -> None:
        """Write every sealed record and fsync once."""
        if not self._buf:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = b"".join(self._buf)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        self._buf.clear()

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def audit(path: str | Path) -> list[str]:
    """Replay a decision log and list every difference from what it recorded (empty: clean).

    Raises ValueError if the chain itself is broken (``schema.chainlog.events`` names where).
    """
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such decision log; write one with 'admit simulate --log'")
    events = chainlog.events(Path(path))
    first = events[0] if events else None
    if not isinstance(first, dict) or first.get("kind") != "pools":
        return ["the log does not start with a 'pools' event; it cannot be replayed"]
    tables = first.get("pools")
    if not isinstance(tables, list):
        return ["event 1: the 'pools' event holds no list of pools; it cannot be replayed"]
    try:
        engine = Admission(build_forest(tables, source="event 1 (pools)"))
    except PoolConfigError as exc:
        return [f"{exc}; the log cannot be replayed"]
    problems: list[str] = []
    for i, ev in enumerate(events[1:], start=2):
        if not isinstance(ev, dict):
            problems.append(f"event {i}: expected an object, got {type(ev).__name__}")
            continue
        kind = ev.get("kind")
        try:
            if kind in ("claim", "gang"):
                claims = [Claim(**c) for c in ev["claims"]]
                got = engine.admit_gang(claims) if kind == "gang" else [engine.admit(claims[0])]
                want = ev["verdicts"]
                if [v.to_dict() for v in got] != want:
                    problems.append(f"event {i}: replayed verdicts differ from the recorded ones")
            elif kind == "complete":
                engine.complete(ev["workload"], ev["units"], ev["uj"])
            elif kind == "meter":
                engine.meter(ev["workload"], ev["uj"])
            elif kind == "release":
                engine.release(ev["workload"])
            elif kind == "rollover":
                engine.rollover()
            else:
                problems.append(f"event {i}: unknown kind {kind!r}")
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"event {i}: cannot replay {kind!r}: {exc}")
    return problems
