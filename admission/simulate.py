"""Replay an events file through the engine: claims, completions, meter readings, releases.

Events are JSON lines with a ``type``:

- ``claim``: ``id``, ``pool``, ``devices``, ``estimate_uj``, ``grade``, ``priority``, and
  optionally ``gang`` + ``gang_size`` (members wait until the whole gang has arrived) or
  ``service`` (estimate and grade from the archives, see ``admission.grades``);
- ``complete``: ``workload``, ``units``, ``uj``;  ``meter``: ``workload``, ``uj``;
- ``release``: ``workload`` (a pending claim is withdrawn);  ``rollover``: a new window.

The whole file is checked before anything runs, so a malformed line stops the replay with its
``file:line`` and what was wrong, instead of half a run. Pending claims wait in an
``admission.queue.AdmissionQueue`` and are retried, in arrival order, after each release and
rollover.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from admission.claims import Claim, ClaimError, Verdict, check_int
from admission.grades import ServiceEstimate
from admission.log import DecisionLog
from admission.model import Forest
from admission.queue import AdmissionQueue

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
    return check_int(key, data.get(key), minimum)


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
    """Drives an ``AdmissionQueue`` from parsed events, and gathers gang members until the
    whole gang has arrived. Verdicts are labelled ``file:line`` (``file:line@line`` when a
    queued claim is decided on a retry)."""

    def __init__(self, forest: Forest, log: DecisionLog | None = None) -> None:
        self.queue = AdmissionQueue(forest, log)
        self.engine = self.queue.engine
        self.log = log
        self.gangs: dict[str, tuple[int, list[Claim]]] = {}
        self.out = Outcome()

    def _record(self, where: str, verdicts: list[Verdict]) -> None:
        for v in verdicts:
            self.out.verdicts.append((where, v))
            self.out.preempted.extend(v.preempted)

    def _retried(self, decided: list[tuple[Any, list[Verdict]]], trigger: str) -> None:
        for where, verdicts in decided:
            self._record(f"{where}@{trigger}", verdicts)

    def _input(self, ev: Event) -> None:
        d = ev.data
        if ev.type == "complete":
            self.queue.complete(d["workload"], d["units"], d["uj"])
        elif ev.type == "meter":
            self.queue.meter(d["workload"], d["uj"])
        else:
            trigger = ev.where.rsplit(":", 1)[-1]
            if ev.type == "release":
                self._retried(self.queue.release(d["workload"]), trigger)
            else:
                self._retried(self.queue.rollover(), trigger)

    def run(self, events: list[Event]) -> Outcome:
        for ev in events:
            try:
                if ev.type == "claim":
                    self._claim(ev)
                else:
                    self._input(ev)
            except ClaimError as exc:
                self.out.errors.append(f"{ev.where}: {exc}; event skipped")
        for name, (size, members) in self.gangs.items():
            self.out.errors.append(
                f"gang '{name}': only {len(members)} of {size} members arrived; never evaluated"
            )
        self.out.pending = [(w.tag, c.id) for w in self.queue.waiting for c in w.claims]
        return self.out

    def _claim(self, ev: Event) -> None:
        claim = ev.claim
        assert claim is not None
        for name, (_, gathered) in self.gangs.items():
            if any(c.id == claim.id for c in gathered):
                raise ClaimError(
                    f"claim '{claim.id}' is already waiting for the rest of gang '{name}'; "
                    "ids must be unique among pending and running claims"
                )
        if claim.gang is None:
            self._record(ev.where, [self.queue.submit(claim, ev.where)])
            return
        entry = self.queue.find(claim.id)
        if entry is not None:  # refuse the member now, before its gang is complete
            raise ClaimError(f"claim '{claim.id}' is already pending (since {entry.tag}); ids must be unique")
        size, members = self.gangs.setdefault(claim.gang, (ev.gang_size, []))
        if size != ev.gang_size:
            raise ClaimError(f"gang '{claim.gang}' was declared with gang_size {size}, not {ev.gang_size}")
        members.append(claim)
        if len(members) == size:
            del self.gangs[claim.gang]
            self._record(ev.where, self.queue.submit_gang(members, ev.where))
