"""Run one R-ec evaluation end to end: trace -> every policy's figures -> verdict -> event.

This is what ``carbonspan policy evaluate`` and the Python API call. The candidate is either
the built-in ``forecast-greedy`` or any placement provider (built-in, entry point or YAML),
evaluated the way it behaves in production (``evaluate.provider_policy``). The candidate's
identity (``placement.identity``) is taken from the very provider that was evaluated and is
recorded with the event, so the evidence belongs to that policy and not to its name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from placement import audit
from placement import evaluate as _evaluate
from placement.decision import Settings, audit_event, decide, result_json, settings_from_env
from placement.evaluate import (
    FORECAST_GREEDY,
    RESERVED,
    Placement,
    evaluate_policies,
    forecast_greedy,
    provider_policy,
)
from placement.identity import KEY as IDENTITY_KEY
from placement.identity import builtin_identity, code_digest, policy_identity
from placement.registry import get_provider
from placement.sample import sample_digest
from placement.trace import Trace
from schema import times


def forecast_greedy_identity() -> dict[str, Any]:
    """forecast-greedy's identity: the digest of the code that makes its choices."""
    return builtin_identity(FORECAST_GREEDY, code_digest(
        _evaluate.forecast_greedy, _evaluate._argmin_window, _evaluate.prefix_sums))


def candidate_identity(name: str) -> dict[str, Any]:
    """The identity of candidate ``name`` as it resolves now."""
    return _candidate(name)[2]


def identity_of(name: str) -> dict[str, Any]:
    """The identity of the policy ``name`` resolves to now (``forecast-greedy`` included): the
    public name of :func:`candidate_identity`, here because resolving a name needs the registry
    and the reference policies, which ``placement.identity`` sits below."""
    return candidate_identity(name)


def candidate_policy(name: str) -> tuple[str, Callable[..., Placement]]:
    """The candidate's name as recorded and its policy function."""
    recorded, policy, _ = _candidate(name)
    return recorded, policy


def _candidate(name: str) -> tuple[str, Callable[..., Placement], dict[str, Any]]:
    if name in RESERVED:
        raise ValueError(
            f"{name!r} is a reference policy, always evaluated; name a candidate instead "
            f"({FORECAST_GREEDY!r} or a placement provider such as 'carbon-aware')"
        )
    if name == FORECAST_GREEDY:
        return name, forecast_greedy, forecast_greedy_identity()
    provider = get_provider(name)
    if provider.name in RESERVED or provider.name == FORECAST_GREEDY:
        raise ValueError(
            f"provider {name!r} calls itself {provider.name!r}, the name of a built-in policy; "
            "rename it so its figures cannot be confused with the reference"
        )
    return provider.name, provider_policy(provider), policy_identity(provider)


def mark_synthetic(trace: Trace) -> Trace:
    """The sample trace is synthetic whatever its flag says (its digest gives it away)."""
    if not trace.synthetic and trace.digest == sample_digest():
        return replace(trace, synthetic=True)
    return trace


def evaluate_candidate(
    trace: Trace, name: str, settings: Settings | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Evaluate candidate ``name`` on ``trace``: the ``--json`` document and the identity of
    the policy that was evaluated (pass both to :func:`record_evaluation`)."""
    settings = settings or settings_from_env()
    trace = mark_synthetic(trace)
    candidate, policy, identity = _candidate(name)
    policies = evaluate_policies(trace, candidate, policy)
    verdict = decide(policies, candidate, settings)
    return result_json(trace, policies, candidate, verdict, settings), identity


def run_evaluation(
    trace: Trace, name: str, settings: Settings | None = None
) -> dict[str, Any]:
    """Evaluate candidate ``name`` on ``trace``; returns the ``--json`` document."""
    return evaluate_candidate(trace, name, settings)[0]


def record_evaluation(
    path: Path,
    trace: Trace,
    result: Mapping[str, Any],
    settings: Settings | None = None,
    evaluated_at: str | None = None,
    identity: Mapping[str, Any] | None = None,
) -> audit.Recorded:
    """Append ``result`` to the audit log as an R-ec evaluation event, with the policy's
    identity under ``policy_identity``: ``identity`` as :func:`evaluate_candidate` returned
    it, or (None) the identity the candidate's name resolves to now. Evaluating, changing the
    policy and then recording without ``identity`` would pin the figures on the new policy."""
    settings = settings or settings_from_env()
    event = audit_event(result, mark_synthetic(trace), settings, evaluated_at or times.now())
    event[IDENTITY_KEY] = dict(identity) if identity is not None else candidate_identity(result["candidate"])
    return audit.record(path, event)
