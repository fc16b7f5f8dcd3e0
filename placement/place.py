"""The Python API: resolve a policy through the gate and place one job.

    from placement import place
    report = place({"id": "etl-7", "size": 2}, clusters, policy="carbon-aware")
    report["cluster"], report["reason"], report["objectives"]["placement_policy"]

Every placement says what happened: ``reason`` (``[placement policy: carbon-aware ->
carbon-simple: no R-ec evaluation ...]``) and ``objectives.placement_policy`` with the requested
and effective policy, the action, the reason and the audit event relied on.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from placement.audit import read_log, resolve_log_path
from placement.decision import settings_from_env
from placement.gate import (
    AS_REQUESTED,
    REPLACED,
    SIMPLE,
    WITHHELD,
    Withheld,
    decide_gate,
    gate_mode,
)
from placement.identity import policy_identity
from placement.probe import weighs_carbon
from placement.providers import choose, fits
from placement.registry import get_provider


@dataclass(frozen=True, slots=True)
class Resolution:
    """The policy placement will actually run, and why."""

    requested: str
    effective: str
    action: str
    reason: str
    mode: str
    weighs_carbon: bool
    evidence: dict[str, Any] | None
    would_have: dict[str, Any] | None
    provider: Any
    identity: dict[str, Any] | None = None

    def objective(self) -> dict[str, Any]:
        out = {
            "requested": self.requested,
            "effective": self.effective,
            "action": self.action,
            "reason": self.reason,
            "mode": self.mode,
            "weighs_carbon": self.weighs_carbon,
            "evidence": self.evidence,
            "identity": self.identity,
        }
        if self.would_have is not None:
            out["would_have"] = self.would_have
        return out


def _reason(name: str, effective: str, action: str, why: str) -> str:
    if action == REPLACED:
        return f"[placement policy: {name} -> {effective}: {why}]"
    if action == WITHHELD:
        return f"[placement policy: {name} (carbon input withheld): {why}]"
    return f"[placement policy: {name}: {why}]"


def resolve(
    policy: str | Any,
    *,
    audit_log: str | Path | None = None,
    now: datetime | None = None,
    env: Mapping[str, str] | None = None,
    clusters: Sequence[Mapping[str, Any]] | None = None,
    job: Mapping[str, Any] | None = None,
) -> Resolution:
    """Probe ``policy`` (a name, a YAML path or a provider object) and apply the gate.

    ``clusters`` and ``job`` (what :func:`place` is placing) add probe runs around the real
    clusters' own intensities (``placement.probe``)."""
    env = os.environ if env is None else env
    mode = gate_mode(env)
    provider = get_provider(policy) if isinstance(policy, str) else policy
    name = provider.name
    identity = policy_identity(provider)
    if not weighs_carbon(provider, clusters, job):
        why = "does not weigh carbon (probe); runs as requested"
        return Resolution(name, name, AS_REQUESTED, _reason(name, name, AS_REQUESTED, why),
                          mode, False, None, None, provider, identity)
    log = read_log(resolve_log_path(audit_log))
    d = decide_gate(name, log, settings_from_env(env), now or datetime.now(UTC), identity)
    evidence = d.evidence.cite() if d.evidence else None
    reason = _reason(name, d.effective, d.action, d.why)
    if mode == "warn" and d.action != AS_REQUESTED:
        would = {"effective": d.effective, "action": d.action, "reason": reason}
        why = f"gate in warn mode, runs as requested; enforce would: {reason}"
        return Resolution(name, name, "warn", _reason(name, name, "warn", why), mode, True,
                          evidence, would, provider, identity)
    runner = {AS_REQUESTED: provider, WITHHELD: Withheld(provider)}.get(d.action)
    if d.action == REPLACED:
        runner = get_provider(SIMPLE)
    return Resolution(name, d.effective, d.action, reason, mode, True, evidence, None, runner, identity)


def _number_ge0(v: Any) -> bool:
    """A finite number >= 0 that a float can hold (numpy's isfinite cannot take an int past
    64 bits, and float() of one past 1e308 overflows: both are refused with the message)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(float(v)) and v >= 0
    except OverflowError:
        return False


def validate_clusters(clusters: Any) -> list[dict[str, Any]]:
    """Check the cluster list; errors say which cluster and field to fix."""
    if isinstance(clusters, Mapping) and "clusters" in clusters:
        clusters = clusters["clusters"]
    if not isinstance(clusters, Sequence) or isinstance(clusters, str) or not clusters:
        raise ValueError("clusters must be a non-empty list of cluster objects")
    out = []
    for i, c in enumerate(clusters):
        if not isinstance(c, Mapping):
            raise ValueError(f"clusters[{i}] must be an object, got {type(c).__name__}")
        label = f"cluster {c.get('name', f'#{i}')!r}"
        for key in ("name", "region"):
            if not isinstance(c.get(key), str) or not c[key]:
                raise ValueError(f"{label}: {key!r} must be a non-empty string")
        for key, nullable in (("capacity", False), ("used", False), ("cost_per_hour", False),
                              ("carbon_intensity", True)):
            v = c.get(key)
            ok = (v is None and nullable) or _number_ge0(v)
            if not ok:
                what = "a number >= 0" + (" or null (unknown)" if nullable else "")
                raise ValueError(f"{label}: {key!r} must be {what}, got {v!r}")
        out.append(dict(c))
    return out


def validate_job(job: Any) -> dict[str, Any]:
    """Check the job; ``size`` (its demand, default 1) must be a finite number >= 0."""
    if not isinstance(job, Mapping):
        raise ValueError("the job must be an object like {\"id\": \"etl-7\", \"size\": 2}")
    size = job.get("size", 1)
    if not _number_ge0(size):
        raise ValueError(
            f"job {job.get('id')!r}: 'size' must be a number >= 0 (capacity units), got {size!r}"
        )
    return dict(job)


def place(
    job: Mapping[str, Any],
    clusters: Any,
    policy: str | Any = "carbon-aware",
    *,
    audit_log: str | Path | None = None,
    now: datetime | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Place one job on the best fitting cluster under the gated policy; returns the report."""
    cl = validate_clusters(clusters)
    job = validate_job(job)
    res = resolve(policy, audit_log=audit_log, now=now, env=env, clusters=cl, job=job)
    ok = fits(cl, job)
    if not any(ok):
        raise ValueError(
            f"no cluster has room for job {job.get('id')!r} (size {job.get('size', 1)}); "
            "free capacity or lower the job's size"
        )
    scores = res.provider.score(cl, job)
    row = np.array([[np.nan if s is None else s for s in scores]], np.float64)
    best = int(choose(row, np.array([ok]))[0])
    return {
        "job": job.get("id"),
        "cluster": cl[best]["name"],
        "region": cl[best]["region"],
        "reason": res.reason,
        "objectives": {"placement_policy": res.objective()},
    }
