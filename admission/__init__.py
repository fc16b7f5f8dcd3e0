"""pool/1: energy-accounted multi-tenant admission in microjoules and devices.

``load_pools`` builds the pool forest from TOML; ``Admission(forest).admit(claim)`` returns a
``Verdict`` (admitted / pending with what it waits for / denied with the reason);
``admit_gang``, ``complete``, ``meter``, ``release``, ``rollover`` and ``reclaim_order`` keep
and read the state; ``estimate_service`` grades a service from carbonspan archives;
``AdmissionQueue`` keeps pending claims and retries them after releases and rollovers;
``DecisionLog`` and ``audit`` write and replay the hash-chained decision log. The model, the
six rules and the surplus formula are in docs/admission.md.
"""

from admission.claims import Claim, ClaimError, Verdict, Workload
from admission.engine import Admission
from admission.grades import ServiceEstimate, estimate_service
from admission.log import DecisionLog, audit
from admission.model import Forest, Pool, PoolConfigError, build_forest, load_pools
from admission.queue import AdmissionQueue, Waiting

__all__ = [
    "Admission",
    "AdmissionQueue",
    "Claim",
    "ClaimError",
    "DecisionLog",
    "Forest",
    "Pool",
    "PoolConfigError",
    "ServiceEstimate",
    "Verdict",
    "Waiting",
    "Workload",
    "audit",
    "build_forest",
    "estimate_service",
    "load_pools",
]
