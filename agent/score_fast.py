"""The scoring pass with its per-span loop in C (``agent/_score.c``), the GIL released.

``agent.score.score_batch_reference`` (numpy) is the specification. This module does the
reference's per-table work in Python, exactly as it does (service keys lowercased and
bounded, region names interned, each region's intensity row/PUE/kind/live tag and each
service's calibration and measured rate: ``agent.carbon.plan``), then hands the span columns
and those small tables to ``_score.score``, which runs the per-span pass without the GIL, so
that the agent's request threads score in parallel instead of queueing for the interpreter.

``FAST_SCORER`` says whether the C pass is in use, ``STATUS`` why not: the extension is not
built (no C compiler: the reference scores, same answers, slower) or is a stale build whose
``SCORE_VERSION`` differs from ``agent.carbon.ext``'s (refused, with a warning). ``score`` returns None
for a batch the C pass does not take (a column of another dtype, an id outside its string
table, an op class with no weight: hand-built batches, never a decoder's), and the caller
scores it with the reference; each such fallback is counted under one of a fixed set of
reasons (``agent.carbon.ext.FALLBACK_REASONS``; ``fallbacks()``), the first of each logged
with its detail.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from agent.carbon import ext as _ext
from agent.carbon.ext import SCORE_VERSION  # noqa: F401 - re-exported: the version this pass expects
from agent.carbon.ext import fallback as _fallback
from agent.carbon.ext import fallbacks as fallbacks
from agent.carbon.model import (
    ENERGY_PER_IO_OP_KWH,
    HTTP_EDGES,
    HTTP_WEIGHT_BY_BUCKET,
    op_weight_table,
)
from agent.carbon.names import MAX_NAME_BYTES, all_short, bounded, intern_table
from agent.carbon.partial import UNKNOWN, WindowPartial, bump, cell_columns
from agent.carbon.plan import (
    METERED,
    PROXY_CODES,
    RegionPlan,
    batch_counters,
    measured_rates,
    plan_regions,
)
from schema.constants import REGION_RE

if TYPE_CHECKING:
    from agent.batch import SpanBatch
    from agent.carbon.context import ScoringContext
    from agent.config import GreenConfig

log = logging.getLogger("carbonspan.score")

#: the C extension (``agent.carbon.ext``: None when not built or a stale build) and why not
_score, STATUS = _ext.EXT, _ext.STATUS
FAST_SCORER = _score is not None

#: the span columns the C pass reads, with the dtype it reads them as
_COLUMNS = (
    ("service_id", np.int32), ("region_id", np.int32), ("endpoint_id", np.int32),
    ("op_class", np.uint8), ("response_bytes", np.int64), ("start_ns", np.int64),
    ("is_entry", np.bool_), ("is_root", np.bool_),
)  # fmt: skip
_NONE = {np.dtype(np.int64): np.zeros(0, np.int64), np.dtype(np.uint8): np.zeros(0, np.uint8),
         np.dtype(np.float64): np.zeros(0, np.float64), np.dtype(np.int8): np.zeros(0, np.int8)}
# the reference's E x weight, per op class (coefficients off, on) and per HTTP size bucket
_E_OP = {c: ENERGY_PER_IO_OP_KWH * op_weight_table(c) for c in (False, True)}
_E_HTTP = ENERGY_PER_IO_OP_KWH * HTTP_WEIGHT_BY_BUCKET
_PROXY = np.ascontiguousarray(PROXY_CODES.ravel())


def score(batch: SpanBatch, ctx: ScoringContext) -> WindowPartial | None:
    """The reference's partial of ``batch``, computed by the C pass; None: use the reference."""
    counters = batch_counters(batch)
    n = len(batch)
    if n == 0:
        return WindowPartial.empty(counters)
    cols = []
    for name, dtype in _COLUMNS:
        col = getattr(batch, name)
        if not isinstance(col, np.ndarray) or col.dtype != dtype or col.shape != (n,):
            _fallback("column", f"column {name} is not {np.dtype(dtype).name}[{n}]")
            return None
        cols.append(np.ascontiguousarray(col))
    cfg = ctx.config
    keys, key_of_svc, svc_cut, names, name_of_reg, name_of_key = _keys_and_regions(batch, cfg)
    plan = _plan(names, ctx)
    cal, calibrated = _calibration(keys, cfg.calibration)
    if cal is None:
        _fallback("calibration", "a calibration factor is not a number")
        return None
    rate, mcode = _NONE[np.dtype(np.float64)], _NONE[np.dtype(np.int8)]
    mstale = metered = _NONE[np.dtype(np.uint8)]
    if ctx.signals.measured:
        rate, mcode, mstale = measured_rates(keys, ctx)
        metered = METERED[mcode].astype(np.uint8)
    eps, ep_of_table, ep_cut = _endpoint_names(batch.endpoints)
    buffers = (
        *cols, key_of_svc, svc_cut, name_of_reg, name_of_key,
        plan.rows, plan.pue, plan.kind, plan.live_code, plan.stale.view(np.uint8),
        cal, calibrated, rate, mcode, mstale.view(np.uint8), metered,
        _E_OP[bool(cfg.per_operation_coefficients)],
        _E_HTTP if cfg.per_operation_coefficients else _NONE[np.dtype(np.float64)],
        HTTP_EDGES, _PROXY, ep_of_table, ep_cut,
    )  # fmt: skip
    if ctx.now_ns is not None and type(ctx.now_ns) is not int:
        _fallback("clock", "the clock is not an int of ns")
        return None
    out = _score.score(buffers, keys, names, eps if type(eps) is list else list(eps),
                       len(batch.endpoints), ctx.now_ns)
    if out is None:
        _fallback("table", "an id outside its table, an unknown op class or a clock past int64")
        return None
    return _partial(batch, out, plan.estimated, counters)


#: region plans by (model, use_hourly_profiles, region names): (model, plan), bounded
_PLANS: dict[tuple, tuple[object, RegionPlan]] = {}
_MAX_PLANS = 256


def _plan(names: list[str], ctx: ScoringContext) -> RegionPlan:
    """``plan_regions(names, ctx)``, cached when no region has a live reading: the plan is then
    a function of the model (whose tables do not change; it caches its rows the same way), the
    profile switch and the names alone, and a batch no longer rebuilds its regions' 289-value
    rows. A region with a live reading is planned afresh: its freshness depends on the clock."""
    live = ctx.signals.live_intensity
    if live and any(name in live for name in names):
        return plan_regions(names, ctx)
    key = (id(ctx.model), bool(ctx.config.use_hourly_profiles), *names)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is ctx.model:
        return hit[1]
    plan = plan_regions(names, ctx)
    for a in (plan.rows, plan.pue, plan.kind, plan.live_code, plan.estimated, plan.stale):
        a.setflags(write=False)  # shared by every batch of these regions
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = (ctx.model, plan)
    return plan


def _slow_key(raw: str) -> tuple[str, bool]:
    """The key of a service name that is not short ASCII: lowercased, bounded, and was it cut."""
    full = raw.lower()  # first: lowercasing can lengthen a string ("İ" -> "i̇")
    name = bounded(full)
    return name, name is not full


def _keys_and_regions(
    batch: SpanBatch, cfg: GreenConfig
) -> tuple[list[str], np.ndarray, np.ndarray, list[str], np.ndarray, np.ndarray]:
    """Service keys as the reference makes them (lowercased, bounded; table order), each table
    entry's key and cut flag; region names as the reference interns them (the batch's valid
    regions lowercased, then each key's configured or default region), each region entry's
    name (-1: invalid) and each key's name."""
    names: list[str] = []
    index: dict[str, int] = {}
    own = []
    for raw in batch.regions:  # a handful per batch
        if REGION_RE.fullmatch(raw):
            name = raw.lower()
            if name not in index:
                index[name] = len(names)
                names.append(name)
            own.append(index[name])
        else:
            own.append(-1)
    fallback = cfg.default_region or UNKNOWN
    services, regions_of = batch.services, cfg.service_regions
    keys, of, cut, by_key = _score.keys(
        services if type(services) is list else list(services),
        regions_of if type(regions_of) is dict else dict(regions_of),
        fallback, index, names, _slow_key, MAX_NAME_BYTES,
    )
    return (keys, np.frombuffer(of, np.int64), np.frombuffer(cut, np.uint8), names,
            np.array(own, np.int64), np.frombuffer(by_key, np.int64))


def _calibration(keys: list[str], table: dict) -> tuple[np.ndarray | None, np.ndarray]:
    """Each key's calibration factor and whether it has one (empty: no calibration)."""
    if not table:
        return _NONE[np.dtype(np.float64)], _NONE[np.dtype(np.uint8)]
    cal = np.array([table.get(k, 1.0) for k in keys])  # as the reference builds it
    if cal.dtype.kind not in "fiub":
        return None, _NONE[np.dtype(np.uint8)]
    return cal.astype(np.float64), np.array([k in table for k in keys], np.uint8)


def _endpoint_names(endpoints: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Endpoint names (bounded), each table entry's name and cut flags (empty: as they are)."""
    if all_short(endpoints):
        return endpoints, _NONE[np.dtype(np.int64)], _NONE[np.dtype(np.uint8)]
    eps, of_table, cut = intern_table(endpoints)
    flags = np.zeros(len(endpoints), np.uint8)
    flags[cut] = 1
    return eps, of_table, flags


def _partial(batch: SpanBatch, out: tuple, estimated: np.ndarray, counters: dict) -> WindowPartial:
    (services, regions, service_region, name_order, region_kind, cell_svc, cell_reg, energy,
     carbon, ops, measured_ops, span_count, etag, ltag, requests, endpoints, counts) = out
    svc_cut, reg_invalid, meas_stale, live_stale, ep_cut, root_spans = counts
    # in the reference's order of first mention, so that the WAL record's bytes are the same
    bump(counters, "service_name_truncated", svc_cut)
    bump(counters, "region_invalid", reg_invalid)
    bump(counters, "measured_stale_spans", meas_stale)
    bump(counters, "live_intensity_stale_spans", live_stale)
    bump(counters, "endpoint_name_truncated", ep_cut)
    return WindowPartial(
        services=services,
        service_region=service_region,
        regions=regions,
        region_kind=np.frombuffer(region_kind, np.int8),
        region_estimated=estimated[np.frombuffer(name_order, np.int64)],
        **cell_columns(cell_svc, cell_reg, energy, carbon, ops, measured_ops, span_count, etag, ltag),
        requests=np.frombuffer(requests, np.int64),
        endpoints=endpoints,
        traces=np.zeros(0, np.uint64),
        pending_traces=[batch.trace_lo.astype(np.uint64)],
        spans=len(batch),
        counters=counters,
        root_spans=root_spans,
    )
