"""One scoring pass: SpanBatch + ScoringContext -> WindowPartial, in numpy columns.

For each span (docs/carbon-model.md has the formulas and the worked arithmetic):

    region    = span cloud.region | resource cloud.region (decoder) | [green.service_regions]
                | default_region | "unknown"
    energy    = measured kWh/op (fresh source)  |  1e-7 x weight(op) x calibration(service)
    carbon    = energy x intensity(region, month, hour | live) x PUE(region)

and the figures are added to a (service, region) cell. Every per-span step is a numpy gather
or ``np.bincount`` over integer columns; the only Python loops run over the batch's small
string tables (services, regions, endpoints). ``WindowPartial`` (agent.carbon.partial) holds the
cells and merges in order, so scoring batches one by one and merging equals scoring their
concatenation.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from agent.batch import OP_HTTP, OP_NONE, SpanBatch
from agent.carbon.cells import span_cells
from agent.carbon.model import (
    ANNUAL_COLUMN,
    ENERGY_PER_IO_OP_KWH,
    KIND_ANNUAL,
    KIND_REAL_TIME,
    MAX_INTENSITY_GCO2_KWH,
    MAX_KWH_PER_OP,
    PROXY_TAG_BY_KIND,
    CarbonModel,
    http_weights,
    op_weight_table,
)
from agent.carbon.names import all_short, intern_table
from agent.carbon.partial import MAX_ENDPOINTS, MAX_REGIONS, UNKNOWN, WindowPartial, bump
from agent.carbon.signals import Signals
from agent.carbon.tagcodes import CODE, SOURCE_TAGS, TAGS, proxy_code
from agent.config import Config, GreenConfig
from schema.constants import REGION_RE
from schema.tags import LIVE_INTENSITY_TAGS, is_measured

__all__ = ["MAX_ENDPOINTS", "MAX_REGIONS", "ScoringContext", "WindowPartial", "score_batch"]

#: [calibrated][KIND_*] -> tag code of a proxy-scored span
PROXY_CODES = np.array(
    [[proxy_code(PROXY_TAG_BY_KIND[k], c) for k in range(4)] for c in (False, True)], dtype=np.int8
)
#: per tag code: a meter, counted in per_service_measured_ratio (not cloud SPECpower, a model)
METERED = np.array([is_measured(t) for t in TAGS])


@dataclass(frozen=True)
class ScoringContext:
    """What scoring reads besides the batch: config, model, live signals and the clock.

    ``now_ns`` is the window's clock: it judges signal freshness and stands in for absurd
    span timestamps. ``None`` reads the wall clock for freshness and scores spans without a
    timestamp at the annual value (so a context without a clock stays deterministic).
    """

    config: GreenConfig
    model: CarbonModel
    signals: Signals = field(default_factory=Signals)
    now_ns: int | None = None

    @classmethod
    def from_config(
        cls,
        cfg: Config | GreenConfig | None = None,
        signals: Signals | None = None,
        now_ns: int | None = None,
        model: CarbonModel | None = None,
    ) -> ScoringContext:
        green = cfg.green if isinstance(cfg, Config) else (cfg or GreenConfig())
        return cls(green, model or CarbonModel.default(), signals or Signals(), now_ns)

    def now_s(self) -> float:
        return self.now_ns / 1e9 if self.now_ns is not None else time.time()


def score_batch(batch: SpanBatch, ctx: ScoringContext) -> WindowPartial:
    """Score one batch as a window partial of its own (merge it into the window's)."""
    n = len(batch)
    counters = {k: int(v) for k, v in batch.counters.items() if v}
    if batch.rejected:
        bump(counters, "spans_rejected", int(batch.rejected))
    if n == 0:
        return WindowPartial.empty(counters)
    keys, span_key = _service_keys(batch, counters)
    region_names, span_reg = _resolve_regions(batch, keys, span_key, ctx.config, counters)
    keys, span_key, first_key_row = _first_seen(keys, span_key)
    region_names, span_reg, _ = _first_seen(region_names, span_reg)
    return _accumulate(batch, ctx, keys, span_key, first_key_row, region_names, span_reg, counters)


def _service_keys(batch: SpanBatch, counters: dict) -> tuple[list[str], np.ndarray]:
    """Lowercased, bounded service keys (table order) and each span's key index."""
    if all_short(batch.services, lowercased=True):  # usual: nothing to cut
        index: dict[str, int] = {}
        of_table = np.array(
            [index.setdefault(name.lower(), len(index)) for name in batch.services], np.int64
        )
        return list(index), of_table[batch.service_id]
    keys, of_table, cut = intern_table(batch.services, str.lower)
    if cut:  # counted per span, so the count is the same however a window is batched
        bump(counters, "service_name_truncated", int(np.isin(batch.service_id, cut).sum()))
    return keys, of_table[batch.service_id]


def _resolve_regions(
    batch: SpanBatch, keys: list[str], span_key: np.ndarray, cfg: GreenConfig, counters: dict
) -> tuple[list[str], np.ndarray]:
    """Each span's region: its own (decoder) else the service's configured/default/unknown."""
    names: list[str] = []
    index: dict[str, int] = {}

    def intern(name: str) -> int:
        if name not in index:
            index[name] = len(names)
            names.append(name)
        return index[name]

    own_table = np.full(len(batch.regions) + 1, -1, dtype=np.int64)  # [-1] serves region_id -1
    invalid: list[int] = []
    for i, raw in enumerate(batch.regions):
        if REGION_RE.fullmatch(raw):
            own_table[i] = intern(raw.lower())
        else:  # the decoder filters these; a hand-built batch might not
            invalid.append(i)
    fallback = cfg.default_region or UNKNOWN
    by_service = np.array(
        [intern(cfg.service_regions.get(key, fallback)) for key in keys], dtype=np.int64
    )
    own = own_table[batch.region_id]
    if invalid:
        bump(counters, "region_invalid", int(np.isin(batch.region_id, invalid).sum()))
    return names, np.where(own >= 0, own, by_service[span_key])


def _first_seen(names: list[str], idx: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Renumber ``idx`` so that ids follow first appearance in row order; drop unused names."""
    first_of = np.full(len(names), len(idx), dtype=np.int64)
    np.minimum.at(first_of, idx, np.arange(len(idx)))
    used = np.flatnonzero(first_of < len(idx))
    first = first_of[used]
    order = np.argsort(first, kind="stable")
    remap = np.full(len(names), -1, dtype=np.int64)
    remap[used[order]] = np.arange(len(used))
    return [names[i] for i in used[order]], remap[idx], first[order]


@dataclass(slots=True)
class _RegionPlan:
    rows: np.ndarray  # (R, 289) intensity per month x hour cell, last column annual
    pue: np.ndarray  # (R,)
    kind: np.ndarray  # (R,) KIND_* the region uses when a span has a timestamp
    live_code: np.ndarray  # (R,) tag code of a fresh live signal, 0 if none
    estimated: np.ndarray  # (R,) bool
    stale: np.ndarray  # (R,) bool: a live signal was there but stale or invalid


def _plan_regions(names: list[str], ctx: ScoringContext) -> _RegionPlan:
    """Intensity rows, PUE, kind and live tag of the batch's few regions."""
    r = len(names)
    plan = _RegionPlan(
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


def _measured(keys: list[str], ctx: ScoringContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def _accumulate(
    batch: SpanBatch,
    ctx: ScoringContext,
    keys: list[str],
    span_key: np.ndarray,
    first_key_row: np.ndarray,
    regions: list[str],
    span_reg: np.ndarray,
    counters: dict,
) -> WindowPartial:
    s, r = len(keys), len(regions)
    plan = _plan_regions(regions, ctx)
    op = batch.op_class
    io = op != OP_NONE
    # intensity of each span's region at its month x hour
    has_profile = any(KIND_ANNUAL < k < KIND_REAL_TIME for k in plan.kind.tolist())
    cell_t, known = span_cells(batch.start_ns, ctx.now_ns, has_profile)
    # the span's kind: real time, or its region's profile kind when it has a time, else annual
    reg_kind = plan.kind[span_reg]
    span_kind = (
        reg_kind
        if known is None
        else np.where(known | (reg_kind == KIND_REAL_TIME), reg_kind, KIND_ANNUAL)
    )
    energy, measured, etag = _energy(batch, ctx, keys, span_key, io, span_kind, counters)
    if plan.stale.any():  # counted per span, so counters add up the same however batched
        bump(counters, "live_intensity_stale_spans", int(plan.stale[span_reg].sum()))
    carbon = energy * plan.rows[span_reg, cell_t] * plan.pue[span_reg]
    cell, n_cells, cell_code = _cells(span_key * r + span_reg, s * r)
    ops = np.bincount(cell[io], minlength=n_cells)
    cell_etag = np.zeros(n_cells, dtype=np.int8)
    np.maximum.at(cell_etag, cell[io], etag[io])
    if known is None:  # every span used its region's kind (every listed region has spans)
        region_kind = plan.kind.copy()
    else:
        region_kind = np.zeros(r, dtype=np.int8)
        np.maximum.at(region_kind, span_reg, span_kind.astype(np.int8))
    cell_reg = cell_code % r
    return WindowPartial(
        services=keys,
        service_region=span_reg[first_key_row].tolist(),
        regions=regions,
        region_kind=region_kind,
        region_estimated=plan.estimated,
        cell_svc=cell_code // r,
        cell_reg=cell_reg,
        energy=np.bincount(cell, energy, minlength=n_cells),
        carbon=np.bincount(cell, carbon, minlength=n_cells),
        ops=ops.astype(np.int64),
        measured_ops=np.zeros(n_cells, dtype=np.int64)
        if measured is None
        else np.bincount(cell[measured], minlength=n_cells).astype(np.int64),
        span_count=np.bincount(cell, minlength=n_cells).astype(np.int64),
        etag=cell_etag,
        ltag=np.where(ops > 0, plan.live_code[cell_reg], 0).astype(np.int8),
        requests=np.bincount(span_key[batch.is_entry], minlength=s).astype(np.int64),
        endpoints=_endpoints(batch, keys, span_key, io, counters),
        # distinct ids are folded lazily (WindowPartial.trace_ids), so a batch skips the sort
        traces=np.zeros(0, np.uint64),
        pending_traces=[batch.trace_lo.astype(np.uint64)],
        spans=len(batch),
        counters=counters,
        root_spans=int(np.count_nonzero(batch.is_root)),
    )


def _cells(code: np.ndarray, space: int) -> tuple[np.ndarray, int, np.ndarray]:
    """Each span's cell index, the number of cells, and each cell's code (ascending)."""
    if space <= 1 << 16:  # usual: few services x regions, counted without sorting
        present = np.flatnonzero(np.bincount(code, minlength=space))
        index = np.zeros(space, dtype=np.int64)
        index[present] = np.arange(present.size)
        return index[code], present.size, present
    present, cell = np.unique(code, return_inverse=True)
    return cell, present.size, present


def _energy(
    batch: SpanBatch,
    ctx: ScoringContext,
    keys: list[str],
    span_key: np.ndarray,
    io: np.ndarray,
    span_kind: np.ndarray,
    counters: dict,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Each span's kWh, which spans' energy a meter measured (what per_service_measured_ratio
    counts: ``schema.tags.is_measured``, so not cloud SPECpower, a model; None: none), and its
    energy-tag code."""
    cfg = ctx.config
    weight = op_weight_table(cfg.per_operation_coefficients)[batch.op_class]
    if cfg.per_operation_coefficients:
        weight = np.where(batch.op_class == OP_HTTP, http_weights(batch.response_bytes), weight)
    energy = ENERGY_PER_IO_OP_KWH * weight  # OP_NONE has weight 0
    calibrated = np.zeros(len(keys), dtype=np.int64)
    if cfg.calibration:
        cal = np.array([cfg.calibration.get(k, 1.0) for k in keys])
        calibrated = np.array([k in cfg.calibration for k in keys], dtype=np.int64)
        energy = energy * cal[span_key]
    etag = PROXY_CODES[calibrated[span_key], span_kind]
    if not ctx.signals.measured:
        return energy, None, etag
    rate, meas_code, meas_stale = _measured(keys, ctx)
    bump(counters, "measured_stale_spans", int((io & meas_stale[span_key]).sum()))
    measured = io & ~np.isnan(rate)[span_key]
    if not measured.any():
        return energy, None, etag
    energy = np.where(measured, np.nan_to_num(rate)[span_key], energy)
    metered = measured & METERED[meas_code][span_key]
    return energy, metered if metered.any() else None, np.where(measured, meas_code[span_key], etag)


def _endpoints(
    batch: SpanBatch, keys: list[str], span_key: np.ndarray, io: np.ndarray, counters: dict
) -> dict[tuple[str, str], int]:
    """I/O ops per (service, span name), in first-seen order (uncapped: merges cap)."""
    if not io.any():
        return {}
    ep_id = batch.endpoint_id[io].astype(np.int64)
    eps = batch.endpoints
    if not all_short(eps):  # some span name may be too long: cut, merge and count
        eps, of_table, cut = intern_table(eps)
        bump(counters, "endpoint_name_truncated", int(np.isin(ep_id, cut).sum()))
        ep_id = of_table[ep_id]
    ne = max(len(eps), 1)
    code = span_key[io] * ne + ep_id
    if len(keys) * ne <= 1 << 16:  # usual: a small code space, counted without sorting
        counts_all = np.bincount(code, minlength=len(keys) * ne)
        first_all = np.full(counts_all.size, code.size, dtype=np.int64)
        np.minimum.at(first_all, code, np.arange(code.size))
        uniq = np.flatnonzero(counts_all)
        first, count = first_all[uniq], counts_all[uniq]
    else:
        uniq, first, count = np.unique(code, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    svc, ep = np.divmod(uniq[order], ne)
    return {
        (keys[a], eps[b]): n
        for a, b, n in zip(svc.tolist(), ep.tolist(), count[order].tolist(), strict=True)
    }
