"""Carbon-aware placement that must earn its place: evaluation (R-ec/R-ed), gate, providers.

Public API: :func:`place` and :func:`resolve` (``placement.place``), :func:`run_evaluation`
and :func:`record_evaluation` (``placement.evaluation``), :func:`parse_trace` and
:func:`trace_from_csv` (``placement.trace``). See docs/placement.md.
"""

from placement.evaluation import record_evaluation, run_evaluation
from placement.place import place, resolve
from placement.trace import parse_trace, trace_from_csv

__all__ = ["place", "parse_trace", "record_evaluation", "resolve", "run_evaluation", "trace_from_csv"]
