"""The placement audit log: recorded R-ec evaluations as a hash-chained JSON-lines file.

Built on ``schema.chainlog`` (the same canonical JSON and chain as the archives), so editing,
deleting or reordering an event breaks the chain and is detected. The path defaults to
``$XDG_STATE_HOME/carbonspan/placement-audit.jsonl`` (``~/.local/state/...``), overridden by
``CARBONSPAN_PLACEMENT_AUDIT_LOG`` or a ``--audit-log`` flag.

Reading for the gate never raises: a log that cannot be read, or whose chain is broken, is
reported as a :class:`LogState` with ``problem`` set, and the gate treats it as holding no
evaluation (fail closed: a tampered log can only take a licence away, never grant one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement.decision import EVENT_TYPE
from schema import chainlog

ENV_AUDIT_LOG = "CARBONSPAN_PLACEMENT_AUDIT_LOG"


def default_log_path() -> Path:
    raw = os.environ.get(ENV_AUDIT_LOG)
    if raw:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "carbonspan" / "placement-audit.jsonl"


def resolve_log_path(flag: str | Path | None) -> Path:
    return Path(flag).expanduser() if flag else default_log_path()


@dataclass(frozen=True, slots=True)
class Recorded:
    """One recorded evaluation with where it sits in the chain (what a placement cites)."""

    seq: int
    hash: str
    ts: str
    event: dict[str, Any]

    def cite(self) -> dict[str, Any]:
        return {"seq": self.seq, "hash": self.hash, "ts": self.ts, "log_event": EVENT_TYPE}


@dataclass(frozen=True, slots=True)
class LogState:
    path: Path
    evaluations: list[Recorded] = field(default_factory=list)
    problem: str | None = None


def record(path: Path, event: dict[str, Any]) -> Recorded:
    """Append an evaluation event; refuses (ValueError) to extend a broken chain."""
    try:
        rec = chainlog.append(path, event, ts=event.get("evaluated_at"))
    except OSError as exc:
        raise ValueError(
            f"cannot write the placement audit log {path}: {exc.strerror}; pass --audit-log "
            f"or set {ENV_AUDIT_LOG} to a writable file"
        ) from None
    return Recorded(rec["seq"], rec["hash"], rec["ts"], rec["event"])


def _malformed(ev: dict[str, Any]) -> str | None:
    """What is wrong with an evaluation event's shape, or None. A chain only proves the log
    was not edited after writing; a hand-appended event of the wrong shape must not crash the
    gate or be half-believed, so the reader refuses the whole log (fail closed)."""
    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    verdict = ev.get("verdict")
    checks = (
        ("policy", isinstance(ev.get("policy"), str)),
        ("trace", isinstance(ev.get("trace"), dict)),
        ("verdict", isinstance(verdict, dict) and isinstance(verdict.get("action"), str)
         and isinstance(verdict.get("ships"), str)),
        ("delta_pp", number(ev.get("delta_pp"))),
        ("evaluated_at", isinstance(ev.get("evaluated_at"), str)),
        # absent on events recorded before identities were (they match no policy); present,
        # it must be an object with a digest, or it could be half-believed
        ("policy_identity", "policy_identity" not in ev or (
            isinstance(ev["policy_identity"], dict)
            and isinstance(ev["policy_identity"].get("digest"), str | None))),
    )
    bad = [k for k, ok in checks if not ok]
    return f"missing or malformed {', '.join(bad)}" if bad else None


def read_log(path: Path) -> LogState:
    """All recorded evaluations, or the reason none can be trusted."""
    if not path.exists():
        return LogState(path)
    try:
        findings = chainlog.verify(path)
        records = [r for _, r in chainlog.read_records(path)]
    except OSError as exc:
        return LogState(path, problem=f"audit log {path} is unreadable ({exc.strerror or exc})")
    if findings:
        return LogState(path, problem=f"audit log {path} chain is broken at {findings[0]}")
    out = []
    for rec in records:
        ev = rec.get(chainlog.BODY_KEY) if rec else None
        if isinstance(ev, dict) and ev.get("type") == EVENT_TYPE:
            wrong = _malformed(ev)
            if wrong:
                return LogState(path, problem=f"audit log {path} event seq {rec['seq']} is not "
                                f"a well-formed R-ec evaluation ({wrong})")
            out.append(Recorded(int(rec["seq"]), str(rec["hash"]), str(rec["ts"]), ev))
    return LogState(path, out)
