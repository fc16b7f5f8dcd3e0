"""Claims in, verdicts out, and the admitted workloads in between.

Plain slotted classes rather than pydantic models: the engine creates one verdict per claim
and must reach tens of thousands a second. Validation happens once, when a claim is built
(``Claim.__post_init__``), so the engine can trust every field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Grade = Literal["measured", "modelled", "estimator"]
Decision = Literal["admitted", "pending", "denied"]
GRADES: tuple[str, ...] = ("measured", "modelled", "estimator")

#: Which step of the normative order (rule 5) decided a verdict.
STEPS: tuple[str, ...] = ("impossibility", "devices", "guarantee", "borrowing")


class ClaimError(ValueError):
    """A claim that cannot be evaluated as written; the message says which field and why."""


#: The largest integer a figure may take: the canonical JSON of the decision log and the
#: archives holds 64-bit integers (2^63 - 1 µJ is about 9.2 TJ, some 2.5 GWh, per figure).
MAX_INT = 2**63 - 1


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` if it is an integer in ``[minimum, MAX_INT]``, else a ClaimError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ClaimError(f"'{name}' must be an integer >= {minimum}, got {value!r}")
    if value > MAX_INT:
        raise ClaimError(f"'{name}' must be at most {MAX_INT} (64-bit), got {value}")
    return value


@dataclass(slots=True)
class Claim:
    """A request to run one workload in a leaf pool for the current window.

    ``estimate_uj`` is what the workload is expected to spend, and ``grade`` says how much
    that figure deserves to be believed: ``measured`` (metered on this workload before),
    ``modelled`` (SPECpower, the I/O proxy) or ``estimator`` (nobody measured or modelled it).
    """

    id: str
    pool: str
    devices: int
    estimate_uj: int
    grade: str = "estimator"
    priority: int = 0
    gang: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ClaimError(f"'id' must be a non-empty string, got {self.id!r}")
        if not isinstance(self.pool, str) or not self.pool:
            raise ClaimError(f"'pool' must be a pool name, got {self.pool!r}")
        check_int("devices", self.devices, 0)
        check_int("estimate_uj", self.estimate_uj, 0)
        check_int("priority", self.priority, -MAX_INT - 1)
        if self.grade not in GRADES:
            raise ClaimError(f"'grade' must be one of {', '.join(GRADES)}, got {self.grade!r}")
        if self.gang is not None and (not isinstance(self.gang, str) or not self.gang):
            raise ClaimError(f"'gang' must be a non-empty string or absent, got {self.gang!r}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "pool": self.pool,
            "devices": self.devices,
            "estimate_uj": self.estimate_uj,
            "grade": self.grade,
            "priority": self.priority,
        }
        if self.gang is not None:
            out["gang"] = self.gang
        return out


@dataclass(slots=True)
class Verdict:
    """The answer to one claim.

    ``step`` is the step of the normative order that decided it; ``waits_for`` says what a
    ``pending`` claim is waiting for; ``preempted`` lists the workloads reclaimed to honour
    the claim's own guarantee (empty unless a borrower had to give back).
    """

    claim: str
    decision: str
    reason: str
    grade: str
    step: str
    from_guarantee_uj: int = 0
    borrowed_uj: int = 0
    devices: int = 0
    waits_for: str = ""
    preempted: list[str] = field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return self.decision == "admitted"

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "decision": self.decision,
            "reason": self.reason,
            "grade": self.grade,
            "step": self.step,
            "from_guarantee_uj": self.from_guarantee_uj,
            "borrowed_uj": self.borrowed_uj,
            "devices": self.devices,
            "waits_for": self.waits_for,
            "preempted": list(self.preempted),
        }


@dataclass(slots=True)
class Workload:
    """An admitted claim while it runs: its reservation, what it spent, what it completed."""

    id: str
    pool: Any  # admission.model.Pool (kept untyped to avoid an import cycle on the hot path)
    devices: int
    priority: int
    grade: str
    seq: int  # admission order; later admissions are reclaimed first among equals
    reserved_uj: int
    spent_uj: int = 0
    units: int = 0
    gang: str | None = None

    @property
    def uj_per_completed_unit(self) -> int | None:
        """µJ spent per completed unit (floor), or ``None`` before the first completed unit.

        ``None`` rather than 0 or infinity: zero would rank new work as the most efficient
        (never reclaimed), infinity as the most wasteful (always reclaimed first). Work that
        has completed nothing is unmeasured, and rule 3 orders it by declared priority.
        """
        if self.units <= 0:
            return None
        return self.spent_uj // self.units
