"""What a scoring pass reads per table entry, not per span: each region name's intensity row,
PUE, kind and live tag; each service key's measured rate; the tag codes of proxy-scored spans.

Both scorers use these (``agent.score``'s numpy reference and ``agent.score_fast``'s C pass):
the tables are small (the batch's distinct regions and services), so this is Python; the
per-span work is theirs. ``ctx`` is an ``agent.carbon.context.ScoringContext``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from agent.carbon.model import (
    ANNUAL_COLUMN,
    KIND_REAL_TIME,
    MAX_INTENSITY_GCO2_KWH,
    MAX_KWH_PER_OP,
    PROXY_TAG_BY_KIND,
)
from agent.carbon.partial import bump
from agent.carbon.tagcodes import CODE, SOURCE_TAGS, TAGS, proxy_code
from schema.tags import LIVE_INTENSITY_TAGS, is_measured

if TYPE_CHECKING:
    from agent.batch import SpanBatch
    from agent.carbon.context import ScoringContext

#: [calibrated][KIND_*] -> tag code of a proxy-scored span
PROXY_CODES = np.array(
    [[proxy_code(PROXY_TAG_BY_KIND[k], c) for k in range(4)] for c in (False, True)], dtype=np.int8
)
#: per tag code: a meter, counted in per_service_measured_ratio (not cloud SPECpower, a model)
METERED = np.array([is_measured(t) for t in TAGS])


def batch_counters(batch: SpanBatch) -> dict[str, int]:
    """The counters a batch's partial starts with: the decoder's (non-zero), spans rejected."""
    counters = {k: int(v) for k, v in batch.counters.items() if v}
    if batch.rejected:
        bump(counters, "spans_rejected", int(batch.rejected))
    return counters


@dataclass(slots=True)
class RegionPlan:
    rows: np.ndarray  # (R, 289) intensity per month x hour cell, last column annual
    pue: np.ndarray  # (R,)
    kind: np.ndarray  # (R,) KIND_* the region uses when a span has a timestamp
    live_code: np.ndarray  # (R,) tag code of a fresh live signal, 0 if none
    estimated: np.ndarray  # (R,) bool
    stale: np.ndarray  # (R,) bool: a live signal was there but stale or invalid


def plan_regions(names: list[str], ctx: ScoringContext) -> RegionPlan:
    """Intensity rows, PUE, kind and live tag of the batch's few regions."""
    r = len(names)
    plan = RegionPlan(
        rows=np.zeros((r, ANNUAL_COLUMN + 1)),
        pue=np.ones(r),
        kind=np.zeros(r, dtype=np.int8),
        live_code=np.zeros(r, dtype=np.int8),
        estimated=np.zeros(r, dtype=np.bool_),
        stale=np.zeros(r, dtype=np.bool_),
    )
    use_profiles = ctx.config.use_hourly_profiles
    sig = ctx.signals
    for i, name in enumerate(names):
        if ctx.model.region(name) is None:  # unknown or out of table: energy counted, 0 g
            continue
        plan.pue[i] = ctx.model.pue_of(name)
        live = sig.live_intensity.get(name)
        if live is not None:
            if live_ok(live, ctx.now_s(), sig.max_signal_age_s):
                plan.rows[i] = live.gco2_kwh
                plan.kind[i] = KIND_REAL_TIME
                plan.live_code[i] = CODE[live.tag]
                plan.estimated[i] = bool(live.estimated)
                continue
            plan.stale[i] = plan.estimated[i] = True
        plan.rows[i] = ctx.model.intensity_row(name, use_profiles)
        plan.kind[i] = ctx.model.profile_kind(name, use_profiles)
    return plan


def live_ok(live, now_s: float, max_age_s: float) -> bool:
    """A usable live reading: a known tag, a plausible value, and no older (nor further in the
    future) than its source's own bound if it has one (ENTSO-E publishes an hour late), else
    ``max_age_s`` (``[sources] max_signal_age_s``)."""
    value = live.gco2_kwh
    own = getattr(live, "max_age_s", None)
    if own is not None:
        max_age_s = own
    return (
        live.tag in LIVE_INTENSITY_TAGS
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0 <= value <= MAX_INTENSITY_GCO2_KWH
        and -max_age_s <= now_s - live.taken_at <= max_age_s  # a future date is no fresher
    )


def measured_rates(keys: list[str], ctx: ScoringContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per service key: fresh measured kWh/op (or NaN), its tag code, and "stale/invalid"."""
    rate = np.full(len(keys), np.nan)
    code = np.zeros(len(keys), dtype=np.int8)
    stale = np.zeros(len(keys), dtype=np.bool_)
    now = ctx.now_s()
    for k, key in enumerate(keys):
        m = ctx.signals.measured.get(key)
        if m is None:
            continue
        ok = (
            m.tag in SOURCE_TAGS
            and math.isfinite(m.kwh_per_op)
            and 0 <= m.kwh_per_op <= MAX_KWH_PER_OP
            and abs(now - m.taken_at) <= 3 * m.interval_s  # nor stuck in the future
        )
        if ok:
            rate[k], code[k] = m.kwh_per_op, CODE[m.tag]
        else:
            stale[k] = True
    return rate, code, stale
