"""The pending queue: claims that cannot fit now wait, in arrival order, for what frees space.

``Admission`` decides one claim against the current state and keeps no queue, so a caller
that only wants verdicts (the benchmark, an external scheduler with its own queue) pays
nothing for one. ``AdmissionQueue`` is rule 4 lived out for everyone else: a ``pending``
claim is kept, with the verdict that says what it waits for, and re-decided in arrival order
after every release and window rollover (the only events that free µJ or devices); a
``denied`` claim is never queued, so the queue holds only work that can run some day.

With a ``DecisionLog`` every input and every decision, retries included, is appended in the
format ``admission.log.audit`` replays: the first record is the forest, so the queue builds
its own engine rather than wrapping one that may already hold state the log never saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from admission.claims import Claim, ClaimError, Verdict, Workload
from admission.engine import Admission
from admission.log import DecisionLog
from admission.model import Forest


@dataclass(slots=True, eq=False)
class Waiting:
    """One queued claim (or whole gang), the caller's label for it, and its latest verdict.

    ``wake`` is ``(window, freed µJ, freed devices)``: the entry is re-decided only in a later
    window or once the engine's freed counters reach both figures (``Admission.shortfall``);
    ``any_free`` marks a gang, re-decided after any free at all.
    """

    tag: Any
    claims: list[Claim]
    verdicts: list[Verdict]
    wake: tuple[int, int, int] = (0, 0, 0)
    any_free: bool = False

    @property
    def waits_for(self) -> str:
        return self.verdicts[0].waits_for


class AdmissionQueue:
    """An engine plus its queue of pending claims (and, optionally, the decision log)."""

    def __init__(self, forest: Forest, log: DecisionLog | None = None) -> None:
        self.engine = Admission(forest)
        self.log = log
        # Arrival order is the insertion order of ``_entries``; both maps make finding and
        # withdrawing a claim O(1) however long the queue grows.
        self._entries: dict[int, Waiting] = {}
        self._by_claim: dict[str, int] = {}
        self._next = 0
        if log is not None:
            log.append({"kind": "pools", "pools": forest.to_dicts()})

    @property
    def waiting(self) -> list[Waiting]:
        """The queued entries in arrival order."""
        return list(self._entries.values())

    # ----------------------------------------------------------------- claims
    def submit(self, claim: Claim, tag: Any = None) -> Verdict:
        """Decide ``claim``; if it is pending, queue it. ``tag`` labels it in ``retry`` results."""
        return self._submit([claim], tag)[0]

    def submit_gang(self, claims: Sequence[Claim], tag: Any = None) -> list[Verdict]:
        """Decide a whole gang (rule 2); a pending gang queues as one entry."""
        return self._submit(list(claims), tag)

    def _submit(self, claims: list[Claim], tag: Any) -> list[Verdict]:
        for c in claims:
            entry = self.find(c.id)
            if entry is not None:
                since = f" (since {entry.tag})" if entry.tag is not None else ""
                raise ClaimError(
                    f"claim '{c.id}' is already pending{since}; ids must be unique among pending "
                    "and running claims (withdraw or release it first, or use a new id)"
                )
        verdicts = self._decide(claims)
        if verdicts[0].decision == "pending":
            entry = Waiting(tag, claims, verdicts)
            self._set_wake(entry)
            self._entries[self._next] = entry
            self._by_claim.update((c.id, self._next) for c in claims)
            self._next += 1
        return verdicts

    def _set_wake(self, entry: Waiting) -> None:
        eng = self.engine
        if len(entry.claims) > 1 or entry.claims[0].gang is not None:
            entry.wake, entry.any_free = (eng.window, eng.freed_uj, eng.freed_devices), True
            return
        uj, devices = eng.shortfall(entry.claims[0])
        entry.wake = (eng.window, eng.freed_uj + uj, eng.freed_devices + devices)

    def _may_fit(self, entry: Waiting) -> bool:
        """False only when the entry provably cannot fit yet (nothing enough was freed)."""
        eng = self.engine
        window, uj, devices = entry.wake
        if eng.window != window:
            return True
        if entry.any_free:
            return eng.freed_uj != uj or eng.freed_devices != devices
        return eng.freed_uj >= uj and eng.freed_devices >= devices

    def _decide(self, claims: list[Claim]) -> list[Verdict]:
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
        return verdicts

    def find(self, claim_id: str) -> Waiting | None:
        """The queue entry holding ``claim_id``, if it is pending."""
        key = self._by_claim.get(claim_id)
        return None if key is None else self._entries[key]

    def withdraw(self, claim_id: str) -> bool:
        """Take a pending claim (its whole gang) off the queue; nothing ran, nothing is logged."""
        key = self._by_claim.get(claim_id)
        if key is not None:
            self._drop(key)
        return key is not None

    def _drop(self, key: int) -> None:
        for c in self._entries.pop(key).claims:
            del self._by_claim[c.id]

    def retry(self) -> list[tuple[Any, list[Verdict]]]:
        """Re-decide, in arrival order, every queued entry that may fit now; return ``(tag,
        verdicts)`` of those decided. Entries still pending keep their place and get their new
        verdict; entries that provably cannot fit yet are skipped, which gives the same
        outcome as re-deciding them (they would be pending) at a fraction of the cost, and
        keeps the decision log free of attempts that could not change anything."""
        decided: list[tuple[Any, list[Verdict]]] = []
        for key, entry in list(self._entries.items()):
            if not self._may_fit(entry):
                continue
            # a ClaimError (its id admitted behind the queue's back) leaves the queue intact
            verdicts = self._decide(entry.claims)
            if verdicts[0].decision == "pending":
                entry.verdicts = verdicts
                self._set_wake(entry)
            else:
                self._drop(key)
                decided.append((entry.tag, verdicts))
        return decided

    # ----------------------------------------------------------------- inputs
    def complete(self, workload: str, units: int, uj: int) -> Workload:
        w = self.engine.complete(workload, units, uj)
        self._log({"kind": "complete", "workload": workload, "units": units, "uj": uj})
        return w

    def meter(self, workload: str, uj: int) -> Workload:
        w = self.engine.meter(workload, uj)
        self._log({"kind": "meter", "workload": workload, "uj": uj})
        return w

    def release(self, workload: str) -> list[tuple[Any, list[Verdict]]]:
        """End a running workload (or withdraw a pending claim) and retry the queue."""
        if self.withdraw(workload):
            return []
        self.engine.release(workload)
        self._log({"kind": "release", "workload": workload})
        return self.retry()

    def rollover(self) -> list[tuple[Any, list[Verdict]]]:
        """Start a new window and retry the queue."""
        self.engine.rollover()
        self._log({"kind": "rollover"})
        return self.retry()

    def _log(self, event: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.append(event)
