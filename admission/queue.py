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


@dataclass(slots=True)
class Waiting:
    """One queued claim (or whole gang), the caller's label for it, and its latest verdict."""

    tag: Any
    claims: list[Claim]
    verdicts: list[Verdict]

    @property
    def waits_for(self) -> str:
        return self.verdicts[0].waits_for


class AdmissionQueue:
    """An engine plus its queue of pending claims (and, optionally, the decision log)."""

    def __init__(self, forest: Forest, log: DecisionLog | None = None) -> None:
        self.engine = Admission(forest)
        self.log = log
        self.waiting: list[Waiting] = []
        if log is not None:
            log.append({"kind": "pools", "pools": forest.to_dicts()})

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
            self.waiting.append(Waiting(tag, claims, verdicts))
        return verdicts

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
        for entry in self.waiting:
            if any(c.id == claim_id for c in entry.claims):
                return entry
        return None

    def withdraw(self, claim_id: str) -> bool:
        """Take a pending claim (its whole gang) off the queue; nothing ran, nothing is logged."""
        entry = self.find(claim_id)
        if entry is not None:
            self.waiting.remove(entry)
        return entry is not None

    def retry(self) -> list[tuple[Any, list[Verdict]]]:
        """Re-decide every queued entry in arrival order; return ``(tag, verdicts)`` of those
        decided now. Entries still pending keep their place and get their new verdict."""
        decided: list[tuple[Any, list[Verdict]]] = []
        queue, self.waiting = self.waiting, []
        for i, entry in enumerate(queue):
            try:
                verdicts = self._decide(entry.claims)
            except ClaimError:  # e.g. its id was admitted behind the queue's back: lose nothing
                self.waiting.extend(queue[i:])
                raise
            if verdicts[0].decision == "pending":
                entry.verdicts = verdicts
                self.waiting.append(entry)
            else:
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
