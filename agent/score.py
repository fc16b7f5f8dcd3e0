"""One scoring pass: SpanBatch + ScoringContext -> WindowPartial, in numpy columns.

For each span (docs/carbon-model.md has the formulas and the worked arithmetic):

    region    = span cloud.region | resource cloud.region (decoder) | [green.service_regions]
                | default_region | "unknown"
    energy    = measured kWh/op (fresh source)  |  1e-7 x weight(op) x calibration(service)
    carbon    = energy x intensity(region, month, hour | live) x PUE(region)

and the figures are added to a (service, region) cell. Every per-span step is a numpy gather
or ``np.bincount`` over integer columns; the only Python loops run over the batch's small
string tables (services, regions, endpoints). That numpy pass is the reference; the agent
runs the same pass in C with the GIL released (``agent/_score.c``, see ``score_batch``), so
that scoring in one request thread no longer stalls the others. ``WindowPartial`` (agent.carbon.partial) holds the
cells and merges in order, so scoring batches one by one and merging equals scoring their
concatenation.
"""

from __future__ import annotations

import numpy as np

from agent import score_fast
from agent.batch import OP_HTTP, OP_NONE, SpanBatch
from agent.carbon.cells import span_cells
from agent.carbon.context import ScoringContext
from agent.carbon.model import (
    ENERGY_PER_IO_OP_KWH,
    KIND_ANNUAL,
    KIND_REAL_TIME,
    http_weights,
    op_weight_table,
)
from agent.carbon.names import all_short, intern_table
from agent.carbon.partial import MAX_ENDPOINTS, MAX_REGIONS, UNKNOWN, WindowPartial, bump
from agent.carbon.plan import (
    METERED,
    PROXY_CODES,
    batch_counters,
    live_ok,
    measured_rates,
    plan_regions,
)
from agent.config import GreenConfig
from schema.constants import REGION_RE

__all__ = [
    "FAST_SCORER",
    "MAX_ENDPOINTS",
    "MAX_REGIONS",
    "ScoringContext",
    "WindowPartial",
    "live_ok",
    "score_batch",
    "score_batch_reference",
    "scorer_fallbacks",
]

#: True when the C per-span pass (agent/_score.c via agent.score_fast) scores batches; False:
#: the numpy reference below does (not built, or a stale build: ``SCORER_STATUS`` says which)
FAST_SCORER = score_fast.FAST_SCORER
SCORER_STATUS = score_fast.STATUS
scorer_fallbacks = score_fast.fallbacks


def score_batch(batch: SpanBatch, ctx: ScoringContext) -> WindowPartial:
    """Score one batch as a window partial of its own (merge it into the window's).

    The C pass when it is built and takes the batch (a decoder's batch always fits it), else
    the reference; both give the same partial, byte for byte (tests/scoring/test_score_fast.py).
    """
    if FAST_SCORER:
        partial = score_fast.score(batch, ctx)
        if partial is not None:
            return partial
    return score_batch_reference(batch, ctx)


def score_batch_reference(batch: SpanBatch, ctx: ScoringContext) -> WindowPartial:
    """The specification of a scoring pass, in numpy: what the C pass must equal."""
    n = len(batch)
    counters = batch_counters(batch)
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
    plan = plan_regions(regions, ctx)
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
    rate, meas_code, meas_stale = measured_rates(keys, ctx)
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
