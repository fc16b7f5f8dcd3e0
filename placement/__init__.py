"""Carbon-aware placement that must earn its place: evaluation (R-ec/R-ed), gate, providers.

Public API: :func:`place` and :func:`resolve` (``placement.place``), :func:`run_evaluation`
and :func:`record_evaluation` (``placement.evaluation``), :func:`parse_trace` and
:func:`trace_from_csv` (``placement.trace``), and the policy identity every recorded
evaluation carries (``placement.identity``: :func:`policy_identity`, :func:`builtin_identity`,
:func:`code_digest`; ``placement.evaluation``: :func:`identity_of`). See docs/placement.md.
"""

from placement.evaluation import evaluate_candidate, identity_of, record_evaluation, run_evaluation
from placement.identity import builtin_identity, code_digest, policy_identity
from placement.place import place, resolve
from placement.trace import parse_trace, trace_from_csv

__all__ = [
    "builtin_identity",
    "code_digest",
    "evaluate_candidate",
    "identity_of",
    "place",
    "parse_trace",
    "policy_identity",
    "record_evaluation",
    "resolve",
    "run_evaluation",
    "trace_from_csv",
]
