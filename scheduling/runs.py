"""What actually ran: JSON lines, Kubernetes Job lists (``kubectl get jobs -A -o json``) or Slurm
``sacct --json`` (docs/contracts.md, "Runs"), as :class:`Run` values in UTC epoch ms.

A run that cannot be used (no start or finish yet, a time that does not parse) is skipped and
listed in ``RunSet.skipped`` with the reason; the shadow report prints how many.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from scheduling.signals import SignalError, to_ms

JOB_LABEL = "carbonspan.io/job"
REGION_LABEL = "topology.kubernetes.io/region"


@dataclass(frozen=True)
class Run:
    job: str
    run_id: str
    submitted: int
    started: int
    finished: int
    region: str | None = None
    energy_kwh: float | None = None
    checkpoint_restore_failed: bool = False
    retry: bool = False


@dataclass
class RunSet:
    runs: list[Run]
    format: str
    skipped: list[str] = field(default_factory=list)


def _run(job: Any, run_id: Any, sub: Any, start: Any, end: Any, where: str, **extra: Any) -> Run:
    if not isinstance(job, str) or not job:
        raise SignalError(f"{where}: field `job` is required (the contract name)")
    times = [to_ms(v, f"{where} field `{n}`") for n, v in (("submitted", sub), ("started", start), ("finished", end))]
    if not times[0] <= times[1] <= times[2]:
        raise SignalError(f"{where}: need submitted <= started <= finished")
    return Run(job, str(run_id), *times, **extra)


def _jsonl(lines: list[bytes], name: str) -> RunSet:
    out = RunSet([], "jsonl")
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{name}:{n}"
        r = orjson.loads(raw)
        missing = [f for f in ("job", "run_id", "submitted", "started", "finished") if r.get(f) is None]
        if missing:
            out.skipped.append(f"{where}: missing {', '.join(missing)}")
            continue
        e = r.get("energy_kwh")
        if e is not None and (not isinstance(e, int | float) or e < 0):
            raise SignalError(f"{where}: field `energy_kwh` {e!r} must be a number >= 0")
        out.runs.append(_run(r["job"], r["run_id"], r["submitted"], r["started"], r["finished"], where,
                             region=r.get("region"), energy_kwh=None if e is None else float(e),
                             checkpoint_restore_failed=bool(r.get("checkpoint_restore_failed", False)),
                             retry=bool(r.get("retry", False))))
    return out


def _k8s_job_name(meta: dict[str, Any]) -> str:
    labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
    for src in (ann, labels):
        if JOB_LABEL in src:
            return str(src[JOB_LABEL])
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "CronJob":
            return str(ref.get("name"))
    return str(meta.get("name", ""))


def _kubernetes(doc: dict[str, Any], name: str) -> RunSet:
    out = RunSet([], "kubernetes")
    for i, item in enumerate(doc.get("items") or []):
        meta, status = item.get("metadata") or {}, item.get("status") or {}
        where = f"{name} items[{i}] {meta.get('namespace', '')}/{meta.get('name', '')}"
        finished = status.get("completionTime")
        if finished is None:
            done = [c for c in status.get("conditions") or [] if c.get("type") in ("Failed", "Complete")]
            finished = done[0].get("lastTransitionTime") if done else None
        if status.get("startTime") is None or finished is None:
            out.skipped.append(f"{where}: not finished (no startTime or completionTime)")
            continue
        out.runs.append(_run(_k8s_job_name(meta), meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}",
                             meta.get("creationTimestamp"), status["startTime"], finished, where,
                             region=(meta.get("labels") or {}).get(REGION_LABEL),
                             retry=int(status.get("failed") or 0) > 0))
    return out


def _slurm_time(v: Any) -> int | None:
    if isinstance(v, dict):  # Slurm >= 23.02: {"set": true, "infinite": false, "number": N}
        return int(v["number"]) if v.get("set") and not v.get("infinite") else None
    return int(v) if isinstance(v, int | float) and v > 0 else None


def _slurm(doc: dict[str, Any], name: str) -> RunSet:
    out = RunSet([], "slurm")
    for i, job in enumerate(doc.get("jobs") or []):
        t = job.get("time") or {}
        sub, start, end = (_slurm_time(t.get(k)) for k in ("submission", "start", "end"))
        where = f"{name} jobs[{i}] {job.get('job_id')}"
        if sub is None or start is None or end is None or end == 0:
            out.skipped.append(f"{where}: not finished (time.submission/start/end unset)")
            continue
        state = job.get("state") or {}
        current = state.get("current") if isinstance(state, dict) else state
        restarts = int(job.get("restart_cnt") or 0)
        out.runs.append(_run(job.get("name"), job.get("job_id"), sub * 1000, start * 1000, end * 1000, where,
                             retry=restarts > 0 or "REQUEUED" in (current or [])))
    return out


def read_runs(path: str | Path) -> RunSet:
    """The runs of a file in any of the three formats (told apart by content)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SignalError(f"runs {p}: cannot read: {exc.strerror}") from None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and "jobs" in doc:
        return _slurm(doc, p.name)
    if isinstance(doc, dict) and "items" in doc:
        return _kubernetes(doc, p.name)
    try:
        return _jsonl(data.splitlines(), p.name)
    except orjson.JSONDecodeError as exc:
        raise SignalError(f"runs {p}: neither JSON lines, a Kubernetes Job list nor sacct --json: {exc}") from None
