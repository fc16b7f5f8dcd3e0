"""The shadow schedule: for every run that actually happened, the decision carbonspan would have
made at its submission, beside what ran (docs/contracts.md, "Shadow schedule").

:func:`shadow_run` writes a hash-chained log (``schema.chain``): a ``shadow-header`` event
(policy identity, guards, inputs' digests) then one ``shadow-decision`` per run with the
decision, the signal values and timestamps it used, and the arithmetic inputs of the report:
forecast means (before the fact) and observed means (after the fact) over the actual and the
recommended intervals for each duration of the runtime band. The report (``shadow_report.py``)
is pure arithmetic over that log.
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from scheduling.archive_energy import Chain, provenance, run_energy
from scheduling.contracts import DAY_MS, MINUTE_MS, WorkloadContract
from scheduling.decide import Decision, Guards, Ops, decide
from scheduling.runs import Run, RunSet
from scheduling.shadow_evidence import code_version, policy_identity, shadow_identity
from scheduling.signals import SignalLog, iso
from schema import times
from schema.chain import seal

HEADER, DECISION = "shadow-header", "shadow-decision"
#: operations windows of the kill switch: queue age over runs started in the last hour, retry
#: rate over runs finished in the last day (at least RETRY_MIN_RUNS of them)
QUEUE_WINDOW_MS = 60 * MINUTE_MS
RETRY_WINDOW_MS = DAY_MS
RETRY_MIN_RUNS = 5


def _ops(run: Run, history: list[Run], released: dict, first_seen: int) -> Ops:
    now = run.submitted
    failures = tuple(r.finished for r in history if r.job == run.job and r.checkpoint_restore_failed
                     and r.finished <= now)
    queued = [r.started - r.submitted for r in history if now - QUEUE_WINDOW_MS <= r.started <= now]
    done = [r for r in history if now - RETRY_WINDOW_MS <= r.finished <= now]
    retry = sum(r.retry for r in done) / len(done) if len(done) >= RETRY_MIN_RUNS else 0.0
    return Ops(queue_age_minutes=(float(np.mean(queued)) / MINUTE_MS) if queued else 0.0, retry_rate=retry,
               restore_failures=failures, released=released, shadow_days=(now - first_seen) / DAY_MS)


def _means(sig: SignalLog, region: str, start: int, minutes: float, now: int | None) -> tuple[float | None, list]:
    """Mean intensity over [start, start + minutes), sampled per minute: forecast as of ``now``
    (``now`` given) or observed (after the fact). None, with the uncovered spans, if any gap."""
    t = start + MINUTE_MS * np.arange(max(1, int(round(minutes))), dtype=np.int64)
    v = sig.predicted(region, now, t)[0] if now is not None else sig.covered(region, t)
    gaps = np.isnan(v)
    if not gaps.any():
        return float(v.mean()), []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], gaps.astype(np.int8), [0]])))
    spans = [[region, iso(int(t[a])), iso(int(t[b - 1]) + MINUTE_MS)] for a, b in zip(edges[::2], edges[1::2], strict=True)]
    return None, spans


def evaluate_run(c: WorkloadContract, run: Run, d: Decision, sig: SignalLog) -> dict[str, Any]:
    """Forecast and observed means over the actual and the recommended interval, per duration."""
    actual_min = (run.finished - run.started) / MINUTE_MS
    region = run.region if run.region in c.residency else c.home_region
    durations = {"p50": c.runtime.p50_minutes, "p95": c.runtime.p95_minutes, "actual": actual_min}
    out: dict[str, Any] = {"durations_minutes": durations, "actual_region": region, "forecast": {}, "observed": {},
                           "missing": [], "region_substituted": region != run.region}
    seen = sig.as_of(d.decided_at)
    for name, minutes in durations.items():
        for kind, view, at in (("forecast", seen, d.decided_at), ("observed", sig, None)):
            ran, g1 = _means(view, region, run.started, minutes, at)
            rec, g2 = _means(view, d.region, d.start, minutes, at)
            out[kind][name] = {"actual": ran, "recommended": rec}
            if kind == "observed":
                out["missing"] += [s for s in g1 + g2 if s not in out["missing"]]
    return out


def run_energy_of(c: WorkloadContract, run: Run, archives: dict[str, Chain] | None) -> tuple[Run, dict[str, Any]]:
    """The run's energy and where it came from: the run's own ``energy_kwh``, else the service's
    energy in the archives over the run (contract ``service``, with ``archives``), else the
    contract's ``energy_kwh``; else not measured (``kwh`` None, with the reason), never zero."""
    if run.energy_kwh is not None:
        return run, {"source": "run", "kwh": run.energy_kwh, "status": "measured"}
    why = ""
    if c.service is not None:
        if archives is None:
            why = (f"contract {c.name!r} takes its energy from the archives of service {c.service!r}; "
                   "give --archives DIR")
        else:
            e = run_energy(archives, c.service, run.started, run.finished)
            if e.kwh is not None:
                return replace(run, energy_kwh=e.kwh), e.to_json(c.service)
            if c.energy_kwh is None:
                return run, e.to_json(c.service)
            why = e.reason
    if c.energy_kwh is not None:
        doc: dict[str, Any] = {"source": "contract", "kwh": c.energy_kwh, "status": "declared"}
        return run, {**doc, "archives": why} if why else doc
    return run, {"source": "archives", "service": c.service, "kwh": None, "status": "not_measured", "reason": why}


def shadow_events(contracts: dict[str, WorkloadContract], runs: RunSet, sig: SignalLog,
                  guards: Guards | None = None, inputs: dict[str, str] | None = None,
                  archives: dict[str, Chain] | None = None) -> list[dict[str, Any]]:
    """The shadow log's events (pure: no clock, no files; ``archives`` already read)."""
    g = guards or Guards()
    order = sorted(runs.runs, key=lambda r: (r.submitted, r.job, r.run_id))
    unknown = sorted({r.job for r in order if r.job not in contracts})
    header = {"type": HEADER, "policy_identity": policy_identity(g), "code_version": code_version(),
              "job_identities": {job: shadow_identity(c, g) for job, c in sorted(contracts.items())},
              "guards": asdict(g),
              "signal_type": sig.signal_type, "runs_format": runs.format, "runs": len(order),
              "runs_skipped": runs.skipped, "jobs_without_contract": unknown, "inputs": inputs or {}}
    if archives is not None:
        header["archives"] = provenance(archives)
    events = [header]
    released: dict[tuple[str, int], int] = {}
    first: dict[str, int] = {}
    step = g.slot_minutes * MINUTE_MS
    for i, run in enumerate(order):
        c = contracts.get(run.job)
        if c is None:
            continue
        first.setdefault(run.job, run.submitted)
        run, energy = run_energy_of(c, run, archives)
        d = decide(c, run.submitted, sig, _ops(run, order[:i], released, first[run.job]), g)
        slot = (d.region, d.start - d.start % step)
        released[slot] = released.get(slot, 0) + 1
        events.append({"type": DECISION, "run": {**asdict(run), **{k: iso(getattr(run, k)) for k in
                                                                    ("submitted", "started", "finished")}},
                       "decision": d.to_json(), "contract": {"energy_kwh": c.energy_kwh, "p50_minutes": c.runtime.p50_minutes,
                                                             "p95_minutes": c.runtime.p95_minutes,
                                                             "home_region": c.home_region},
                       "energy": energy, "evaluation": evaluate_run(c, run, d, sig)})
    return events


def write_log(path: Path, events: list[dict[str, Any]]) -> int:
    """Seal ``events`` as a new hash-chained log (``schema.chain``, body key ``event``)."""
    if path.exists() and path.stat().st_size:
        raise FileExistsError(f"{path} exists; give a new --log path (a shadow log is never rewritten)")
    prev, ts = None, times.now()
    lines = []
    for seq, ev in enumerate(events):
        rec = seal(prev, seq, ts, "event", ev)
        prev = rec["hash"]
        lines.append(orjson.dumps(rec, option=orjson.OPT_SORT_KEYS))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"\n".join(lines) + b"\n")
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    tmp.replace(path)
    return len(lines)
