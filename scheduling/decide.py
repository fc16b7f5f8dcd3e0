"""One decision for one job, in four ordered layers (docs/contracts.md, "Decisions").

1. **Hard constraints** (``hard_constraints``): residency, deadline feasibility, capacity,
   accelerator, security class, maximum cost, the region-move licence. An option that fails
   one never reaches scoring, however clean its grid.
2. **Safety gates** (``safety_gates``): the deadline guard (run at once when the time left is
   under ``deadline_factor`` x p95), a stale or missing signal, failed checkpoint restores, the
   kill switch (queue age, retry rate), the release cap.
3. **Soft objective** (``soft_objective``): ``score = w_carbon carbon + w_cost cost +
   w_capacity capacity + w_locality locality`` over min-max normalised terms, lowest wins.
4. **Fallback** (``fallback``): the contract's fallback when a layer above says so.

:func:`decide` is pure: the contract, the decision instant, the signal log (read only as of
that instant), the operations state and the guard settings in; a :class:`Decision` out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduling.contracts import MINUTE_MS, Window, WorkloadContract, local_day, window
from scheduling.signals import SignalLog, iso

HARD, SAFETY, SCORE, FALLBACK = "hard_constraints", "safety_gates", "soft_objective", "fallback"
SHADOW_DAYS_FOR_MOVES = 14


@dataclass(frozen=True)
class Guards:
    """Safety-gate defaults (configurable; docs/contracts.md, "Guards")."""

    deadline_factor: float = 2.0
    stale_minutes: float = 60.0
    restore_failures: int = 2
    max_queue_age_minutes: float = 60.0
    max_retry_rate: float = 0.2
    release_cap: int = 50
    slot_minutes: int = 15
    w_carbon: float = 0.45
    w_cost: float = 0.25
    w_capacity: float = 0.20
    w_locality: float = 0.10


@dataclass(frozen=True)
class Ops:
    """The operations state a decision reads (all optional; absent means unconstrained)."""

    queue_age_minutes: float = 0.0
    retry_rate: float = 0.0
    restore_failures: tuple[int, ...] = ()  # instants of this job's failed checkpoint restores
    released: dict[tuple[str, int], int] = field(default_factory=dict)  # (region, slot) -> jobs
    capacity: dict[str, float] | None = None  # free fraction per region; 0 means full
    accelerators: dict[str, tuple[str, ...]] | None = None
    security_classes: dict[str, tuple[str, ...]] | None = None
    cost_per_kwh: dict[str, float] | None = None
    shadow_days: float = 0.0
    regions: tuple[str, ...] = ()  # candidate regions besides the signal log's


@dataclass(frozen=True)
class Decision:
    job: str
    decided_at: int
    start: int
    region: str
    layer: str
    reason: str
    action: str  # "start_now" | "defer" | "move" | the contract's fallback
    deadline: int | None
    runtime_p95_ms: int
    vetoes: tuple[tuple[str, int, str, str], ...] = ()  # (region, start, layer, reason)
    signal: dict[str, Any] = field(default_factory=dict)
    forecast: dict[str, Any] = field(default_factory=dict)

    @property
    def deferral_minutes(self) -> float:
        return (self.start - self.decided_at) / MINUTE_MS

    @property
    def slack_minutes(self) -> float | None:
        """Deadline minus the p95 finish of the decided start."""
        if self.deadline is None:
            return None
        return (self.deadline - self.start - self.runtime_p95_ms) / MINUTE_MS

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "decided_at": iso(self.decided_at), "start": iso(self.start),
                "region": self.region, "layer": self.layer, "reason": self.reason, "action": self.action,
                "deferral_minutes": self.deferral_minutes, "deadline": None if self.deadline is None else iso(self.deadline),
                "deadline_slack_minutes": self.slack_minutes, "signal": self.signal, "forecast": self.forecast,
                "vetoes": [{"region": r, "start": iso(s), "layer": la, "reason": re} for r, s, la, re in self.vetoes]}


def _signal_state(sig: SignalLog, region: str, now: int, g: Guards) -> tuple[str | None, dict[str, Any]]:
    latest = sig.latest(region)
    if latest is None:
        return "signal_stale", {"region": region, "status": "missing"}
    end, value, source, version = latest
    age = (now - end) / MINUTE_MS
    info = {"region": region, "value": value, "interval_end": iso(end), "staleness_minutes": max(0.0, age),
            "source": source, "version": version, "signal_type": sig.signal_type}
    return ("signal_stale" if age >= g.stale_minutes else None), info


def _fallback_start(c: WorkloadContract, now: int, g: Guards, w: Window) -> int:
    if c.fallback != "run_by_deadline":
        return now
    latest = w.latest_start
    if w.deadline is not None:
        latest = min(latest, w.deadline - int(g.deadline_factor * c.runtime.p95_minutes * MINUTE_MS))
    return max(now, w.earliest if latest < w.earliest else latest)


def _made(c: WorkloadContract, w: Window, start: int, region: str, layer: str, reason: str, action: str,
          **extra: Any) -> Decision:
    return Decision(c.name, w.submit, start, region, layer, reason, action, w.deadline,
                    int(c.runtime.p95_minutes * MINUTE_MS), **extra)


def _gate(c: WorkloadContract, now: int, sig: SignalLog, ops: Ops, g: Guards, w: Window) -> tuple[str, str, dict] | None:
    """Job-level layers 1 and 2: (layer, reason, signal info) when one decides without scoring."""
    if c.job_class == "immediate":
        return HARD, "immediate", {}
    if not c.may_wait:
        return HARD, "no_deferral_allowed", {}
    if ops.queue_age_minutes > g.max_queue_age_minutes or ops.retry_rate > g.max_retry_rate:
        return SAFETY, "kill_switch", {}
    if w.deadline is not None and w.deadline - now < g.deadline_factor * c.runtime.p95_minutes * MINUTE_MS:
        return SAFETY, "deadline_guard", {}
    today = local_day(c, now)
    if sum(1 for t in ops.restore_failures if t <= now and local_day(c, t) == today) >= g.restore_failures:
        return SAFETY, "restore_failures", {}
    stale, info = _signal_state(sig, c.home_region, now, g)
    if stale:
        return SAFETY, stale, info
    if c.carbon_policy == "ignore":
        return HARD, "carbon_policy_ignore", info
    return None


def _region_veto(c: WorkloadContract, region: str, ops: Ops) -> str | None:
    """Layer 1 for a region: residency first, then the region-move licence and the region's limits."""
    if region not in c.residency:
        return "residency"
    if region != c.home_region and not (
        c.allow_region_move and c.may_pause_or_move and region in c.input_data_regions
        and c.checkpoint_ids == "region_independent" and c.recovery_to_home
        and ops.shadow_days >= SHADOW_DAYS_FOR_MOVES
    ):
        return "region_move"
    if ops.capacity is not None and ops.capacity.get(region, 1.0) <= 0:
        return "capacity"
    if c.accelerator != "none" and ops.accelerators is not None and c.accelerator not in ops.accelerators.get(region, ()):
        return "accelerator"
    if c.security_class and ops.security_classes is not None and c.security_class not in ops.security_classes.get(region, ()):
        return "security_class"
    if c.max_cost is not None and ops.cost_per_kwh is not None and c.energy_kwh is not None:
        if ops.cost_per_kwh.get(region, 0.0) * c.energy_kwh > c.max_cost:
            return "max_cost"
    return None


def _starts(w: Window, g: Guards) -> np.ndarray:
    step = g.slot_minutes * MINUTE_MS
    first_slot = -(-w.earliest // step) * step
    later = np.arange(first_slot, w.latest_start + 1, step, dtype=np.int64)
    return np.unique(np.concatenate([[w.earliest], later[later > w.earliest]]))


def _norm(x: np.ndarray) -> np.ndarray:
    span = float(x.max() - x.min()) if x.size else 0.0
    return np.zeros_like(x) if span == 0 else (x - x.min()) / span


def _slot_vetoes(region: str, starts: np.ndarray, carbon: np.ndarray, deadline: int | None, p95: float,
                 guard_ms: float, ops: Ops, g: Guards) -> list[tuple[str, str] | None]:
    """Per start: None (eligible) or the (layer, reason) of the first rule that vetoes it."""
    out: list[tuple[str, str] | None] = [None] * starts.size
    step = g.slot_minutes * MINUTE_MS
    rules = []
    if deadline is not None:
        rules += [(starts + p95 > deadline, (HARD, "deadline_infeasible")),
                  (deadline - starts < guard_ms, (SAFETY, "deadline_guard"))]
    if ops.released:
        used = np.array([ops.released.get((region, s - s % step), 0) for s in starts.tolist()])
        rules.append((used >= g.release_cap, (SAFETY, "herd_cap")))
    rules.append((np.isnan(carbon), (SCORE, "forecast_missing")))
    for mask, verdict in rules:
        for i in np.flatnonzero(mask).tolist():
            if out[i] is None:
                out[i] = verdict
    return out


def decide(c: WorkloadContract, now: int, signals: SignalLog, ops: Ops | None = None,
           g: Guards | None = None) -> Decision:
    """The decision for ``c`` submitted (or reconsidered) at ``now`` (UTC epoch ms)."""
    ops, g = ops or Ops(), g or Guards()
    sig = signals.as_of(now)
    w = window(c, now)
    gate = _gate(c, now, sig, ops, g, w)
    if gate is not None:
        layer, reason, info = gate
        if reason in ("immediate", "no_deferral_allowed", "deadline_guard", "kill_switch"):
            return _made(c, w, now, c.home_region, layer, reason, "start_now", signal=info)
        return _made(c, w, _fallback_start(c, now, g, w), c.home_region, layer, reason, c.fallback, signal=info)
    _, home_info = _signal_state(sig, c.home_region, now, g)
    p95 = c.runtime.p95_minutes * MINUTE_MS
    guard_ms = g.deadline_factor * p95
    vetoes: list[tuple[str, int, str, str]] = []
    regions = sorted({c.home_region, *sig.observed, *ops.regions})
    starts = _starts(w, g)
    step = g.slot_minutes * MINUTE_MS
    n_samples = max(1, int(-(-c.runtime.p50_minutes * MINUTE_MS // step)))
    options: list[tuple[str, int, float]] = []
    providers: dict[str, tuple[str, str | None]] = {}
    for region in regions:
        veto = _region_veto(c, region, ops)
        if veto is None and region != c.home_region and _signal_state(sig, region, now, g)[0]:
            veto = "signal_stale"
        if veto is not None:
            vetoes.append((region, int(starts[0]), SAFETY if veto == "signal_stale" else HARD, veto))
            continue
        t = starts[:, None] + step * np.arange(n_samples)[None, :]
        pred, name = sig.predicted(region, now, t.ravel())
        providers[region] = (name, sig.forecast_issue(region, now) if name == "recorded" else None)
        carbon = pred.reshape(t.shape).mean(axis=1)
        verdicts = _slot_vetoes(region, starts, carbon, w.deadline, p95, guard_ms, ops, g)
        for s, ci, v in zip(starts.tolist(), carbon.tolist(), verdicts, strict=True):
            if v is None:
                options.append((region, s, ci))
            else:
                vetoes.append((region, s, *v))
    if not options:
        return _made(c, w, _fallback_start(c, now, g, w), c.home_region, FALLBACK, "no_eligible_option",
                     c.fallback, vetoes=tuple(vetoes), signal=home_info)
    return _score(c, w, options, ops, g, tuple(vetoes), home_info, providers)


def _score(c: WorkloadContract, w: Window, options: list[tuple[str, int, float]], ops: Ops, g: Guards,
           vetoes: tuple, info: dict, providers: dict[str, tuple[str, str | None]]) -> Decision:
    reg = [o[0] for o in options]
    carbon = np.array([o[2] for o in options])
    cost = np.array([(ops.cost_per_kwh or {}).get(r, 0.0) for r in reg])
    capacity = np.array([1.0 - (ops.capacity or {}).get(r, 1.0) for r in reg])
    locality = np.array([0.0 if r == c.home_region else 1.0 for r in reg])
    score = (g.w_carbon * _norm(carbon) + g.w_cost * _norm(cost) + g.w_capacity * _norm(capacity)
             + g.w_locality * _norm(locality))
    starts = np.array([o[1] for o in options])
    best = int(np.lexsort((locality, starts, np.round(score, 12)))[0])  # ties: earlier, then home
    region, start, ci = options[best]
    fc = {"provider": providers[region][0], "issued_at": providers[region][1], "intensity_at_decision": ci,
          "score": float(score[best])}
    action = "move" if region != c.home_region else ("defer" if start > w.submit else "start_now")
    return _made(c, w, start, region, SCORE, "lowest_score", action, vetoes=vetoes, signal=info, forecast=fc)
