"""Run one R-ec evaluation end to end: trace -> every policy's figures -> verdict -> event.

This is what ``carbonspan policy evaluate`` and the Python API call. The candidate is either
the built-in ``forecast-greedy`` or any placement provider (built-in, entry point or YAML),
evaluated the way it behaves in production (``evaluate.provider_policy``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from placement import audit
from placement.decision import Settings, audit_event, decide, result_json, settings_from_env
from placement.evaluate import (
    FORECAST_GREEDY,
    RESERVED,
    Placement,
    evaluate_policies,
    forecast_greedy,
    provider_policy,
)
from placement.registry import get_provider
from placement.sample import sample_digest
from placement.trace import Trace
from schema.chainlog import utc_now


def candidate_policy(name: str) -> tuple[str, Callable[..., Placement]]:
    """The candidate's name as recorded and its policy function."""
    if name in RESERVED:
        raise ValueError(
            f"{name!r} is a reference policy, always evaluated; name a candidate instead "
            f"({FORECAST_GREEDY!r} or a placement provider such as 'carbon-aware')"
        )
    if name == FORECAST_GREEDY:
        return name, forecast_greedy
    provider = get_provider(name)
    if provider.name in RESERVED or provider.name == FORECAST_GREEDY:
        raise ValueError(
            f"provider {name!r} calls itself {provider.name!r}, the name of a built-in policy; "
            "rename it so its figures cannot be confused with the reference"
        )
    return provider.name, provider_policy(provider)


def mark_synthetic(trace: Trace) -> Trace:
    """The sample trace is synthetic whatever its flag says (its digest gives it away)."""
    if not trace.synthetic and trace.digest == sample_digest():
        return replace(trace, synthetic=True)
    return trace


def run_evaluation(
    trace: Trace, name: str, settings: Settings | None = None
) -> dict[str, Any]:
    """Evaluate candidate ``name`` on ``trace``; returns the ``--json`` document."""
    settings = settings or settings_from_env()
    trace = mark_synthetic(trace)
    candidate, policy = candidate_policy(name)
    policies = evaluate_policies(trace, candidate, policy)
    verdict = decide(policies, candidate, settings)
    return result_json(trace, policies, candidate, verdict, settings)


def record_evaluation(
    path: Path,
    trace: Trace,
    result: Mapping[str, Any],
    settings: Settings | None = None,
    evaluated_at: str | None = None,
) -> audit.Recorded:
    """Append ``result`` to the audit log as an R-ec evaluation event."""
    settings = settings or settings_from_env()
    event = audit_event(result, mark_synthetic(trace), settings, evaluated_at or utc_now())
    return audit.record(path, event)
