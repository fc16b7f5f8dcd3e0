"""A shadow report as evidence for the placement gate, and the gate's licence for ``carbonspan run
--enforce`` (docs/contracts.md, "Evidence and licence").

Each job of a report becomes one ``r-ec-evaluation`` event of policy ``shadow:<job>`` in the
placement audit log, with that job's shadow identity (:func:`shadow_identity`: the deciding code,
the guards and the job's contract, so an edited contract or changed code has no licence until it
is shadow-tested again). It
is real evidence (``trace.synthetic: false``) only when the report spans at least 14 days; its
verdict ships the candidate only when the measured avoided range lies wholly above zero, no
recommendation would have missed a deadline, and at least one run was measured. The licence is
``placement.gate.decide_gate`` itself: a current real win of that identity, not retired.
This module and ``evaluate.py`` are the only ones in scheduling/ that reach into placement.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schema.canonical import canonical_json, sha256_tag

if TYPE_CHECKING:
    from scheduling.contracts import WorkloadContract
    from scheduling.decide import Guards

METHOD = "carbonspan-shadow"


def deciding_code() -> tuple[Any, ...]:
    """The code a shadow test is evidence for: the layers (``decide.py``), the contract's parsing
    and semantics (``contracts.py``: fields, windows, local days), the signal log's as-of reading
    (``signals.py`` and the row checks of ``schema.signal_log``) and the forecast provider it uses
    (``forecast.Recorded``)."""
    from scheduling import contracts, decide, signals
    from scheduling.forecast import Recorded
    from schema.signal_log import check_row, to_ms

    return (decide, contracts, signals, Recorded, check_row, to_ms)


def code_version() -> str:
    """``placement.identity.code_digest`` of :func:`deciding_code` (comments and layout aside)."""
    from placement.identity import code_digest

    return code_digest(*deciding_code())


def contract_content(c: WorkloadContract) -> dict[str, Any]:
    """The contract's canonical content: every field with its value as parsed (defaults filled in),
    so YAML layout, key order or an explicit default change nothing, and any other edit does."""
    return c.model_dump(by_alias=True, mode="json")


def policy_identity(guards: Guards) -> str:
    """sha256 over the deciding code and the guards (the part every job of a shadow log shares)."""
    return sha256_tag(canonical_json({"code": code_version(), "guards": asdict(guards)}))


def shadow_identity(c: WorkloadContract, guards: Guards) -> str:
    """What a shadow test of job ``c`` is evidence for: sha256 over the deciding code, the guards
    and the contract's canonical content."""
    return sha256_tag(canonical_json({"code": code_version(), "guards": asdict(guards),
                                      "contract": contract_content(c)}))


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
    idents = doc.get("job_identities")
    if not isinstance(idents, dict) or set(doc["jobs"]) - set(idents):
        raise ValueError("this shadow log predates per-job identities (the contract in the identity) or lacks "
                         "a job's; run `carbonspan shadow run` again to make evidence that can license a job")
    out = {}
    for job, a in doc["jobs"].items():
        name = policy_name(job)
        verdict, delta = _verdict(a, name)
        event = {"type": EVENT_TYPE, "policy": name, KEY: identity(job, idents[job]),
                 "trace": {"digest": idents[job], "method": METHOD, "synthetic": not a["real_evidence"],
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
