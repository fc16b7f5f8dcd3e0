"""A shadow report as evidence for the placement gate, and the gate's licence for ``carbonspan run
--enforce`` (docs/contracts.md, "Evidence and licence").

Each job of a report becomes one ``r-ec-evaluation`` event of policy ``shadow:<job>`` in the
placement audit log, with the shadow policy's identity (the deciding code and the guards). It
is real evidence (``trace.synthetic: false``) only when the report spans at least 14 days; its
verdict ships the candidate only when the measured avoided range lies wholly above zero, no
recommendation would have missed a deadline, and at least one run was measured. The licence is
``placement.gate.decide_gate`` itself: a current real win of that identity, not retired.
This module and ``evaluate.py`` are the only ones in scheduling/ that reach into placement.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

METHOD = "carbonspan-shadow"


def policy_name(job: str) -> str:
    return f"shadow:{job}"


def identity(job: str, shadow_identity: str) -> dict[str, Any]:
    from placement.identity import builtin_identity

    return builtin_identity(policy_name(job), shadow_identity)


def _verdict(a: dict[str, Any], name: str) -> tuple[dict[str, str], float]:
    from placement.decision import SHIP_BASELINE, SHIP_CANDIDATE

    meas = a["avoided_kgco2e_measured"]
    total = a["emissions_kgco2e_measured_runs"]
    delta = 100.0 * meas[0] / total if meas and total > 0 else 0.0
    if not a["real_evidence"]:
        why = f"{a['days']:.1f} days of shadow comparison < 14: not yet evidence"
    elif meas is None:
        why = "no run could be measured (incomplete signal)"
    elif a["would_miss_deadline"]:
        why = f"{a['would_miss_deadline']} recommendation(s) would have missed the deadline"
    elif meas[0] <= 0:
        why = f"measured avoided {meas[0]:.3f} .. {meas[1]:.3f} kgCO2e includes zero: no win"
    else:
        return {"action": SHIP_CANDIDATE, "ships": name,
                "reason": f"measured avoided {meas[0]:.3f} .. {meas[1]:.3f} kgCO2e over {a['days']:.1f} days"}, delta
    return {"action": SHIP_BASELINE, "ships": "default-schedule", "reason": why}, delta


def record(doc: dict[str, Any], audit_log: Path | None) -> dict[str, dict[str, Any]]:
    """Write one evaluation event per job of the report; returns each job's citation."""
    from placement import audit
    from placement.decision import EVENT_TYPE
    from placement.identity import KEY

    path = audit.resolve_log_path(audit_log)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = {}
    for job, a in doc["jobs"].items():
        name = policy_name(job)
        verdict, delta = _verdict(a, name)
        event = {"type": EVENT_TYPE, "policy": name, KEY: identity(job, doc["policy_identity"]),
                 "trace": {"digest": doc["policy_identity"], "method": METHOD, "synthetic": not a["real_evidence"],
                           "basis": "shadow-schedule", "jobs": a["runs"], "days": a["days"]},
                 "shadow": {k: a[k] for k in ("avoided_kgco2e_estimated", "avoided_kgco2e_measured", "coverage",
                                              "runs_measured", "deadline_risk", "would_miss_deadline")},
                 "verdict": verdict, "delta_pp": delta, "evaluated_at": now}
        rec = audit.record(path, event)
        out[job] = {**rec.cite(), "verdict": verdict["action"]}
    return out


def licence(job: str, shadow_identity: str, audit_log: Path | None, now: datetime | None = None) -> tuple[bool, str]:
    """(licensed, why) from the placement gate for this job's shadow policy."""
    from placement.audit import read_log, resolve_log_path
    from placement.decision import settings_from_env
    from placement.gate import AS_REQUESTED, decide_gate

    log = read_log(resolve_log_path(audit_log))
    d = decide_gate(policy_name(job), log, settings_from_env(), now or datetime.now(UTC), identity(job, shadow_identity))
    return d.action == AS_REQUESTED, d.why
