"""The runtime gate: a policy may place on carbon only with a current, real, winning R-ec
evaluation of *that* policy on record.

Resolving a policy (``carbonspan place``, :func:`placement.place`) first *probes* it: clusters
that differ only in ``carbon_intensity`` are scored; any difference in any score means it
weighs carbon, whatever the plugin declares. A carbon-weighing policy then goes through the
table; only evaluations whose ``policy_identity`` matches the policy's identity now count
(``placement.identity``: an edited formula, an upgraded plugin or changed built-in code is a
different policy):

    latest real evaluation of the policy      what placement does
    none / only synthetic / other identity    carbon-first (carbon-aware) -> carbon-simple;
    / unreadable log / older than the         any other -> runs with its carbon input withheld
    cadence / baseline won
    / its own retirement, since lifted
    the capability retired (latest of any)    carbon input withheld (carbon-simple too)
    candidate won, current                    runs as requested

Retirement is capability-wide: while the latest real evaluation of *any* policy says retire,
every carbon-weighing policy is withheld, its own current win notwithstanding; it does not
expire with age, and only a real evaluation measured after it (by ``evaluated_at``, not by
where it sits in the log; never one dated in the future) that ships lifts it. ``carbon-simple`` is the
simple baseline the gate falls back to, so it runs unless the capability is retired.
``CARBONSPAN_CARBON_POLICY_GATE=warn`` lets the requested policy run and records in the
report what enforce would have done.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from placement.audit import LogState, Recorded
from placement.decision import RETIRE, SHIP_CANDIDATE, Settings, as_written, printed, setting_text
from placement.identity import KEY as IDENTITY_KEY
from placement.identity import describe, same_policy
from placement.providers import CARBON_FIRST, CarbonSimple
from placement.sample import sample_digest

ENV_GATE = "CARBONSPAN_CARBON_POLICY_GATE"
SIMPLE = CarbonSimple.name
AS_REQUESTED, REPLACED, WITHHELD = "as-requested", "replaced", "carbon-withheld"


def gate_mode(env: Mapping[str, str] | None = None) -> str:
    raw = (os.environ if env is None else env).get(ENV_GATE, "enforce").strip().lower() or "enforce"
    if raw not in ("enforce", "warn"):
        raise ValueError(f"{ENV_GATE}={raw!r}: use 'enforce' (the default) or 'warn'")
    return raw


class Withheld:
    """A provider with its carbon input neutralised: every cluster is scored as if it had the
    same intensity (the mean of the declared ones), so its other terms still rank."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def score(self, clusters, job):
        known = [c["carbon_intensity"] for c in clusters if c.get("carbon_intensity") is not None]
        same = float(np.mean(known)) if known else None
        return self.inner.score([{**c, "carbon_intensity": same} for c in clusters], job)


@dataclass(frozen=True, slots=True)
class Decision:
    effective: str
    action: str
    why: str
    evidence: Recorded | None


def _synthetic(rec: Recorded) -> bool:
    """Flagged synthetic, not flagged real, or the sample trace whatever its flag says."""
    trace = rec.event.get("trace")
    if not isinstance(trace, dict) or trace.get("synthetic") is not False:
        return True
    return trace.get("digest") == sample_digest()


def _age_days(rec: Recorded, now: datetime) -> float:
    try:
        when = datetime.fromisoformat(str(rec.event.get("evaluated_at") or rec.ts).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")  # an undated measurement licenses nothing
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (now - when).total_seconds() / 86400.0


def _real(log: LogState, policy: str | None) -> tuple[list[Recorded], int]:
    """The real evaluations (of ``policy``, or of any), oldest first, and how many synthetic."""
    mine = [r for r in log.evaluations if policy is None or r.event.get("policy") == policy]
    real = [r for r in mine if not _synthetic(r)]
    return real, len(mine) - len(real)


def _retirement(log: LogState, now: datetime) -> Recorded | None:
    """The current retirement: the latest-measured real evaluation of any policy (by its
    date, then its place in the log), if it says retire. An evaluation dated before the
    retirement (back-dated, or recorded late) is not newer, and one dated more than a day
    ahead of this clock licenses nothing, so neither lifts a retirement; an undated one
    counts as the oldest."""
    real, _ = _real(log, None)
    says_retire = [(r.event.get("verdict") or {}).get("action") == RETIRE for r in real]
    dated = [(-_age_days(r, now), r.seq, r) for r, ret in zip(real, says_retire, strict=True)
             if ret or _age_days(r, now) >= -1.0]
    latest = max(dated, key=lambda t: (t[0], t[1]))[2] if dated else None
    if latest is not None and (latest.event.get("verdict") or {}).get("action") == RETIRE:
        return latest
    return None


def _fallback(name: str, why: str, evidence: Recorded | None) -> Decision:
    if name in CARBON_FIRST:
        return Decision(SIMPLE, REPLACED, why, evidence)
    return Decision(name, WITHHELD, why, evidence)


def _retired(name: str, retired: Recorded) -> Decision:
    """A current retirement withholds carbon from every carbon-weighing policy, whatever its
    own evidence says: the verdict says placement stops using carbon."""
    why = (f"carbon-aware placement retired by evaluation seq {retired.seq} of "
           f"{retired.event.get('policy')!r} ({retired.ts}): "
           f"{(retired.event.get('verdict') or {}).get('reason', '')}; only a real "
           "evaluation measured after it that ships lifts it")
    return Decision(name, WITHHELD, why, retired)


def _this_policy(name: str, mine: list[Recorded], identity: Mapping[str, Any] | None):
    """The evaluations of exactly this policy, or why there are none (identity mismatch)."""
    same = [r for r in mine if identity is not None and same_policy(r.event.get(IDENTITY_KEY), identity)]
    if same or not mine:
        return same, None
    latest = mine[-1]
    return [], (f"the evaluated {name} (seq {latest.seq}) had {describe(latest.event.get(IDENTITY_KEY))}; "
                f"this one has {describe(identity)}: a changed policy has no evaluation until it "
                "is re-evaluated")


def decide_gate(
    name: str, log: LogState, settings: Settings, now: datetime,
    identity: Mapping[str, Any] | None = None,
) -> Decision:
    """Apply the gate table to a carbon-weighing policy ``name`` whose identity (see
    ``placement.identity``) is ``identity``; only evaluations of that identity count."""
    if log.problem:
        why = f"{log.problem}; treated as no evaluation (fail closed)"
        return Decision(SIMPLE, AS_REQUESTED, why, None) if name == SIMPLE else _fallback(name, why, None)
    retired = _retirement(log, now)
    if retired is not None:
        return _retired(name, retired)
    if name == SIMPLE:
        return Decision(name, AS_REQUESTED, f"{SIMPLE} is the simple baseline; not retired", None)
    mine, n_synth = _real(log, name)
    same, changed = _this_policy(name, mine, identity)
    if changed:
        return _fallback(name, changed, mine[-1])
    if not same:
        why = f"no R-ec evaluation of {name} recorded in {log.path}"
        if n_synth:
            why = f"only synthetic R-ec evaluations of {name} ({n_synth}); synthetic evaluations never gate"
        why += (f"; to license it, record a win on a real trace (not 'policy sample'): "
                f"carbonspan policy evaluate {name} --trace TRACE.json --record")
        return _fallback(name, why, None)
    latest = same[-1]
    verdict = latest.event.get("verdict") or {}
    cite = f"evaluation seq {latest.seq} ({latest.ts})"
    age = _age_days(latest, now)
    if age < -1.0:  # more than a day ahead of this clock: skew or a forged date
        why = f"latest real {cite} is dated {-age:.0f} days in the future; treated as no evaluation"
        return _fallback(name, why, latest)
    if age == float("inf") or printed(age) > as_written(settings.retest_days):  # as printed
        why = f"re-test overdue: latest real {cite} is {age:.2f} days old > cadence {setting_text(settings.retest_days)} days"
        return _fallback(name, why, latest)
    if verdict.get("action") != SHIP_CANDIDATE or verdict.get("ships") != name:
        why = f"simple baseline {verdict.get('ships')} won {cite}: {verdict.get('reason', '')}"
        if verdict.get("action") == RETIRE:  # its own retirement, since lifted: no licence either
            why = (f"{cite} did not ship {name}: retired carbon-aware placement (since lifted by "
                   f"a newer evaluation): {verdict.get('reason', '')}")
        return _fallback(name, why, latest)
    why = f"won {cite}, delta {latest.event.get('delta_pp', float('nan')):.2f} pp, {age:.0f} days old"
    return Decision(name, AS_REQUESTED, why, latest)
