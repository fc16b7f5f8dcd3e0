"""Replay an events file through the engine: claims, completions, meter readings, releases.

Events are JSON lines with a ``type``:

- ``claim``: ``id``, ``pool``, ``devices``, ``estimate_uj``, ``grade``, ``priority``, and
  optionally ``gang`` + ``gang_size`` (members wait until the whole gang has arrived) or
  ``service`` (estimate and grade from the archives, see ``admission.grades``);
- ``complete``: ``workload``, ``units``, ``uj``;  ``meter``: ``workload``, ``uj``;
- ``release``: ``workload`` (a pending claim is withdrawn);  ``rollover``: a new window.

The whole file is checked before anything runs, so a malformed line stops the replay with its
``file:line`` and what was wrong, instead of half a run. Pending claims are retried, in arrival
order, after each release and rollover, as a queueing scheduler would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from admission.claims import Claim, ClaimError, Verdict
from admission.engine import Admission
from admission.grades import ServiceEstimate
from admission.log import DecisionLog
from admission.model import Forest

EventSource = Callable[[str], ServiceEstimate]
_CLAIM_KEYS = {"type", "id", "pool", "devices", "estimate_uj", "grade", "priority", "gang", "gang_size", "service"}
_KEYS = {
    "claim": _CLAIM_KEYS,
    "complete": {"type", "workload", "units", "uj"},
    "meter": {"type", "workload", "uj"},
    "release": {"type", "workload"},
    "rollover": {"type"},
}


class EventsError(ValueError):
    """The events file is malformed; the message lists each bad ``file:line`` and why."""


@dataclass(slots=True)
class Event:
    where: str  # "events.jsonl:12"
    type: str
    data: dict[str, Any]
    claim: Claim | None = None
    gang_size: int = 0


@dataclass
class Outcome:
    verdicts: list[tuple[str, Verdict]] = field(default_factory=list)  # (where, verdict)
    errors: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    pending: list[tuple[str, str]] = field(default_factory=list)  # (where, claim) still queued at the end


def _fault(where: str, msg: str) -> str:
    return f"{where}: {msg}"


def _check_int(data: dict[str, Any], key: str, minimum: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ClaimError(f"'{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def _claim(data: dict[str, Any], forest: Forest, estimates: EventSource | None) -> Claim:
    pool = data.get("pool")
    if pool not in forest:
        raise ClaimError(f"unknown pool {pool!r}; it is not defined in the pools file")
    estimate, grade = data.get("estimate_uj"), data.get("grade", "estimator")
    service = data.get("service")
    if service is not None:
        if estimates is None:
            raise ClaimError(f"claim names service {service!r}; pass --archives DIR to grade it")
        found = estimates(str(service))
        if found.windows:
            estimate, grade = found.estimate_uj, found.grade
        elif estimate is None:
            raise ClaimError(
                f"service {service!r} has no usable window in the archives; add 'estimate_uj'"
            )
        else:
            grade = "estimator"  # nobody measured or modelled it: the declared figure is a guess
    if estimate is None:
        raise ClaimError("missing 'estimate_uj' (integer µJ) and no 'service' to estimate it from")
    return Claim(
        id=data.get("id"),  # type: ignore[arg-type]
        pool=pool,
        devices=data.get("devices", 0),
        estimate_uj=estimate,
        grade=grade,
        priority=data.get("priority", 0),
        gang=data.get("gang"),
    )


def parse_events(path: Path, forest: Forest, estimates: EventSource | None = None) -> list[Event]:
    """Read and check every line; raise EventsError listing the bad ones (at most 20)."""
    events: list[Event] = []
    faults: list[str] = []
    try:
        raw_lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise EventsError(f"{path}: cannot read the events file: {exc.strerror}") from None
    for lineno, raw in enumerate(raw_lines, start=1):
        where = f"{path.name}:{lineno}"
        if not raw.strip():
            continue
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            faults.append(_fault(where, f"not valid JSON ({exc}); each line must be one JSON object"))
            continue
        if not isinstance(data, dict):
            faults.append(_fault(where, f"expected a JSON object, got {type(data).__name__}"))
            continue
        kind = data.get("type")
        if kind not in _KEYS:
            faults.append(_fault(where, f"unknown event type {kind!r}; expected one of {', '.join(_KEYS)}"))
            continue
        extra = set(data) - _KEYS[kind]
        if extra:
            faults.append(_fault(where, f"unknown key(s) {sorted(extra)} for a {kind} event"))
            continue
        try:
            ev = Event(where, kind, data)
            if kind == "claim":
                ev.claim = _claim(data, forest, estimates)
                if ev.claim.gang is not None:
                    ev.gang_size = _check_int(data, "gang_size", 1)
            elif kind != "rollover":
                if not isinstance(data.get("workload"), str):
                    raise ClaimError(f"'workload' must be a workload id, got {data.get('workload')!r}")
                if kind in ("complete", "meter"):
                    _check_int(data, "uj", 0)
                if kind == "complete":
                    _check_int(data, "units", 0)
            events.append(ev)
        except ClaimError as exc:
            faults.append(_fault(where, str(exc)))
    if faults:
        more = f"\n... and {len(faults) - 20} more" if len(faults) > 20 else ""
        raise EventsError("malformed events:\n" + "\n".join(faults[:20]) + more)
    return events


class Simulator:
    """Drives an engine from parsed events, keeping the pending queue and gang buffers."""

    def __init__(self, forest: Forest, log: DecisionLog | None = None) -> None:
        self.engine = Admission(forest)
        self.log = log
        self.pending: list[tuple[str, list[Claim]]] = []  # (where, claims) in arrival order
        self.gangs: dict[str, tuple[int, list[Claim]]] = {}
        self.out = Outcome()
        if log is not None:
            log.append({"kind": "pools", "pools": forest.to_dicts()})

    def _decide(self, where: str, claims: list[Claim], retry: bool) -> list[Verdict]:
        gang = claims[0].gang is not None
        verdicts = self.engine.admit_gang(claims) if gang else [self.engine.admit(claims[0])]
        if self.log is not None:
            self.log.append(
                {
                    "kind": "gang" if gang else "claim",
                    "claims": [c.to_dict() for c in claims],
                    "verdicts": [v.to_dict() for v in verdicts],
                }
            )
        if not retry or verdicts[0].decision != "pending":
            for v in verdicts:
                self.out.verdicts.append((where, v))
                self.out.preempted.extend(v.preempted)
        if not retry and verdicts[0].decision == "pending":
            self.pending.append((where, claims))
        return verdicts

    def _retry(self, trigger: str) -> None:
        """Re-decide every pending claim in arrival order; a claim stays queued until decided."""
        queue, self.pending = self.pending, []
        for where, claims in queue:
            try:
                if self._decide(f"{where}@{trigger}", claims, retry=True)[0].decision == "pending":
                    self.pending.append((where, claims))
            except ClaimError as exc:  # one bad entry must not drop the rest of the queue
                self.out.errors.append(f"{where}: {exc}; dropped from the pending queue")

    def _input(self, ev: Event) -> None:
        d = ev.data
        if ev.type == "complete":
            self.engine.complete(d["workload"], d["units"], d["uj"])
        elif ev.type == "meter":
            self.engine.meter(d["workload"], d["uj"])
        elif ev.type == "release":
            before = len(self.pending)
            self.pending = [p for p in self.pending if d["workload"] not in {c.id for c in p[1]}]
            if len(self.pending) < before:
                return  # withdrawn while pending: nothing ran, nothing to log
            self.engine.release(d["workload"])
        else:
            self.engine.rollover()
        if self.log is not None:
            self.log.append({"kind": ev.type, **{k: v for k, v in d.items() if k != "type"}})

    def _waiting(self, claim_id: str) -> str:
        """Where ``claim_id`` already is, if it is pending or a gang member still gathering."""
        for where, claims in self.pending:
            if any(c.id == claim_id for c in claims):
                return f"pending (since {where})"
        for name, (_, members) in self.gangs.items():
            if any(c.id == claim_id for c in members):
                return f"waiting for the rest of gang '{name}'"
        return ""

    def run(self, events: list[Event]) -> Outcome:
        for ev in events:
            try:
                if ev.type == "claim":
                    self._claim(ev)
                    continue
                self._input(ev)
                if ev.type in ("release", "rollover"):
                    self._retry(ev.where.rsplit(':', 1)[-1])
            except ClaimError as exc:
                self.out.errors.append(f"{ev.where}: {exc}; event skipped")
        for name, (size, members) in self.gangs.items():
            self.out.errors.append(
                f"gang '{name}': only {len(members)} of {size} members arrived; never evaluated"
            )
        self.out.pending = [(where, c.id) for where, claims in self.pending for c in claims]
        return self.out

    def _claim(self, ev: Event) -> None:
        claim = ev.claim
        assert claim is not None
        waiting = self._waiting(claim.id)
        if waiting:
            raise ClaimError(
                f"claim '{claim.id}' is already {waiting}; ids must be unique among pending and "
                "running claims (release it first, or use a new id)"
            )
        if claim.gang is None:
            self._decide(ev.where, [claim], retry=False)
            return
        size, members = self.gangs.setdefault(claim.gang, (ev.gang_size, []))
        if size != ev.gang_size:
            raise ClaimError(f"gang '{claim.gang}' was declared with gang_size {size}, not {ev.gang_size}")
        members.append(claim)
        if len(members) == size:
            del self.gangs[claim.gang]
            self._decide(ev.where, members, retry=False)
