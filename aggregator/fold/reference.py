"""The reference fold: one sanitised window (``aggregator.read.Window``) into an AggregateState.

This is the fold, in Python, written once; ``fast.py`` hands the common lines to the C
accelerator, which makes exactly these additions in exactly this order (the property tests
hold it to this module, byte for byte), and everything else comes here. The path rules are in
``rules.py``: runtime (sum the per-service maps) or proxy (split by I/O share).

What a window adds to the totals it adds to its time bucket too (aggregate.series), and a
backfilled window's additions also go to the backfill term: per service (energy, operational
carbon, requests, windows) in ``backfill_services`` and in total in ``backfill`` - the very
values added to the figures, so the term equals the fold of the backfilled lines alone and a
share is never above 1. An entry the fold drops (past the service cap, an unusable name) is
not in the term.

Which service an entry goes to, and what its tag does to the tag set, depends only on
(names, tags, host names): that :class:`~aggregator.fold.sums.Layout` is worked out once and
reused, so a steady stream of windows costs a tight loop over figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import repeat
from operator import attrgetter, itemgetter

from aggregator.fold.rules import (
    MAX_LAYOUTS,
    UNATTRIBUTED,
    AttributionError,
    bucket_start,
    is_backfill,
    proxy_energy,
    proxy_kg,
)
from aggregator.fold.state import AggregateState
from aggregator.fold.sums import (
    BackfillSums,
    Bucket,
    Cell,
    HostRegionAcc,
    Layout,
    RegionAcc,
    ServiceAcc,
)
from aggregator.read import HostRows, Window, clean_counts, clean_values, parse_window
from aggregator.sanitize import (
    MAX_COUNT,
    MAX_FIGURE,
    Tally,
    clean_count,
    clean_float,
    clean_name,
    clean_tag,
)
from schema.tags import CAL_SUFFIX
from schema.totals import UNATTRIBUTED_TERMS

_UNCOUNTED = Tally()  # a sink: a value sanitised a second time is counted once, where it is added
_UNSET = object()  # the proxy loop's tag before its first credit
_REGION_FIELDS = itemgetter("region", "io_ops", "energy_kwh", "co2_gco2")
#: The terms of a total no service carries (schema.totals), as a Window holds them (gCO2e) and
#: as the state and the backfill totals do (kg); a bucket names them bare.
_unattributed_g = attrgetter(*(term + "_g" for term in UNATTRIBUTED_TERMS))
_STATE_KG = tuple(term + "_kg" for term in UNATTRIBUTED_TERMS)


def _term_adder(terms: tuple[str, ...]) -> Callable[..., None]:
    """``add(state, bucket, *grams)``: one gCO2e value per term of ``terms``, in that order,
    added as kg to the state's ``<term>_kg`` and the bucket's ``<term>``. Written out for the
    contract's terms when the module loads, as a dataclass writes its methods: a loop of
    getattr/setattr cost 0.7 us more per window, this 0.15 us (timeit, 2026-12-02, load 4)."""
    source = f"def add(state, bucket, {', '.join(f'{t}_g' for t in terms)}):\n" + "".join(
        f"    kg = {t}_g / 1000.0\n    state.{t}_kg += kg\n    bucket.{t} += kg\n" for t in terms)
    namespace: dict[str, Callable[..., None]] = {}
    exec(source, namespace)  # noqa: S102 - the source is made of the contract's term names only
    return namespace["add"]


_add_unattributed = _term_adder(UNATTRIBUTED_TERMS)


def fold_line(state: AggregateState, rec: dict, start: float, location: str, strict: bool = False) -> str:
    """Fold a loaded line whose ``report.window.start`` is ``start``; returns its hash (``""``
    when unusable). Raises ``Malformed`` having changed nothing when the line cannot be read."""
    w = parse_window(rec, start, state.tally)
    process_window(state, w, location, strict)
    return w.line_hash


def process_window(state: AggregateState, w: Window, location: str, strict: bool = False) -> None:
    """Fold one window in; ``location`` (``agent/file:line``) names it in errors."""
    lo, hi, bucket = state._bcache
    if not lo <= w.start < hi:
        bucket = enter_bucket(state, w.start)
    backfill = is_backfill(w.methodology)
    if w.names is not None:
        added = _runtime(state, bucket, w, backfill)
    else:
        if w.one_sided:
            state.one_sided_windows += 1
        added = _proxy(state, bucket, w, location, strict, backfill)
    if backfill:
        _backfill_window(state, w, *added)
    add_window(state, bucket, w.start, w.host_energy, *_unattributed_g(w))
    if w.host_rows:
        _host_regions(state, w.host_rows)
    without = fold_regions(state, w.regions) if w.regions else 0.0
    for region, kwh, co2, _ in w.host_rows:  # a host charged 0 g with energy: no intensity known
        if kwh > 0.0 and co2 == 0.0:
            without += kwh
            state.note_without_carbon(clean_name(region) or "unknown", kwh)
    add_window_counts(state, w.traces, w.root_spans, w.energy_without_carbon, without)
    if w.methodology:
        note_methodology(state, w.methodology)


# -- what every window adds (fold_plain's path calls these; the C Folder adds the same, in this order) --


def add_totals(state: AggregateState, bucket: Bucket, energy: float, carbon_kg: float, requests: int) -> None:
    """A window's energy (application + host), operational carbon and requests, to the totals
    and to its bucket."""
    state.energy += energy
    state.operational_kg += carbon_kg
    state.requests += requests
    bucket.energy += energy
    bucket.operational += carbon_kg
    bucket.requests += requests


def add_window(state: AggregateState, bucket: Bucket, start: float, host_energy: float,
               *unattributed_g: float) -> None:
    """A window's count, time extent, host energy and the terms of its total no service carries
    (``unattributed_g``: gCO2e, one per ``schema.totals.UNATTRIBUTED_TERMS`` in that order)."""
    state.windows += 1
    bucket.windows += 1
    if start < state.first_start:
        state.first_start = start
    if start > state.last_start:
        state.last_start = start
    state.host_energy += host_energy
    bucket.host_energy += host_energy
    _add_unattributed(state, bucket, *unattributed_g)


def add_window_counts(state: AggregateState, traces: int, root_spans: int | None, stated: float | None,
                      derived: float) -> None:
    """Traces beside root spans (where the line records them), and the energy counted at 0 g:
    the line's ``energy_without_carbon_kwh``, or for lines without it what its rows say."""
    if root_spans is not None:
        state.traces_counted += traces
        state.root_spans += root_spans
    without = derived if stated is None else stated
    if without:
        state.energy_without_carbon += without


def note_methodology(state: AggregateState, meta: dict) -> None:
    """Record a window's methodology block; a block seen before adds nothing."""
    try:
        if meta == state._last_meta:  # the usual case: the same block as the previous window
            return
    except RecursionError:  # a hostile block nested past the recursion limit: add it anew
        pass  # (note_methodology gives the same result when a block is added again)
    state._last_meta = meta
    try:
        seen = tuple(meta.items())
        if seen in state._seen_meta:
            return
        if len(state._seen_meta) < MAX_LAYOUTS:
            state._seen_meta.add(seen)
    except TypeError:  # an unhashable (hostile) value: record it the long way
        pass
    state.note_methodology(meta)


def enter_bucket(state: AggregateState, start: float) -> Bucket:
    """The bucket of a window starting at ``start`` (created empty), now the current one."""
    width = state.series_width
    lo = bucket_start(state.series_origin, width, start)
    bucket = state.series.get(lo)
    if bucket is None:
        bucket = state.series[lo] = Bucket()
    state._bcache = (float(lo), float(lo + width), bucket)
    return bucket


def layout_cells(layout: Layout, bucket: Bucket) -> list[Cell | None]:
    """The layout's targets' cells in ``bucket`` (None past the cap), cached on the layout
    until the bucket changes."""
    if layout.cells_for is not bucket:
        layout.cells = [None if t is None else bucket.cell(name) for name, t in zip(layout.names, layout.targets,
                                                                                      strict=True)]
        layout.cells_for = bucket
    return layout.cells


def count_tags(state: AggregateState, layout: Layout) -> None:
    """What a window of ``layout`` does to the tag set (worked out once, when it was new)."""
    for tag, count in layout.tag_counts.items():
        state.models[tag] += count
    state.rejected_models += layout.rejected


# -- services and tags --------------------------------------------------------------------


def accept_model(state: AggregateState, tag: str | None) -> str | None:
    """The bare tag if the model set takes it (cap, +cal merge), else None (counted)."""
    if tag is None:
        return None
    if clean_tag(tag) is None:  # longer than 64 bytes
        state.rejected_models += 1
        return None
    if tag.endswith(CAL_SUFFIX):
        tag = tag[: -len(CAL_SUFFIX)]
        state.calibration_applied = True
    count = state.models.get(tag)
    if count is not None:
        state.models[tag] = count + 1
        return tag
    if len(state.models) >= state.max_models or not tag:
        state.rejected_models += 1
        state.overflowed = state.overflowed or bool(tag)
        return None
    state.models[tag] = 1
    return tag


def _service(state: AggregateState, name: str, region: str) -> ServiceAcc | None:
    """The service's accumulator; None when it is new past the cap or its name is unusable."""
    acc = state.services.get(name)
    if acc is None and clean_name(name):
        if len(state.services) < state.max_services:
            acc = state.services[name] = ServiceAcc(region)
        else:
            state.overflowed = True
    return acc


def _drop(state: AggregateState, bucket: Bucket, energy: float, carbon: float) -> None:
    """An entry of a service past the service cap: counted as dropped, in the totals and in
    its bucket (the report's dropped_services and the "other" figures)."""
    state.dropped_services += 1
    state.dropped_energy += energy
    state.dropped_carbon += carbon
    bucket.dropped_energy += energy
    bucket.dropped_carbon += carbon


def _credit(state: AggregateState, bucket: Bucket, name: str, region: str, energy: float, carbon: float,
            requests: int, model: str | None) -> str | None:
    """Credit one entry; returns what the tag set made of ``model`` (see accept_model)."""
    acc = state.unattributed if name == UNATTRIBUTED else _service(state, name, region)
    if acc is None:
        _drop(state, bucket, energy, carbon)
        return accept_model(state, model)
    if acc.region == "unknown":
        acc.region = region  # first *known* region wins: proxy windows know none
    acc.energy += energy
    acc.carbon += carbon
    acc.requests += requests
    acc.windows += 1
    cell = bucket.cell(name)
    cell.energy += energy
    cell.carbon += carbon
    cell.requests += requests
    tag = accept_model(state, model)
    if tag is not None:
        acc.models[tag] = None
    return tag


# -- the runtime path ---------------------------------------------------------------------


def _runtime(state: AggregateState, bucket: Bucket, w: Window, backfill: bool) -> tuple[float, float, int]:
    """Sum the per-service maps; returns what was added to the energy, operational carbon and
    request totals (a ``backfill`` window's entries also go to the backfill term)."""
    state.runtime_windows += 1
    layout = _layout(state, w)
    state.host_named_services += layout.host_named
    cells = layout_cells(layout, bucket)
    if w.raw and layout.simple and not backfill:
        app_energy, app_carbon, app_requests = _credit_raw(state.tally, layout, cells, w.energies, w.carbons,
                                                           w.requests)
    else:
        if w.raw:  # the general loop takes sanitised lists
            w.energies = clean_values(list(w.energies), state.tally)
            w.carbons = clean_values(list(w.carbons), state.tally)
            w.requests = clean_counts(list(w.requests), state.tally) if w.requests else None
        app_energy, app_carbon, app_requests = _credit_mixed(state, bucket, layout, cells, w)
        if backfill:
            _backfill_entries(state, w.names or (), layout.targets, w.energies, w.carbons, w.requests)
    if layout.unknown:
        layout.unknown = _upgrade_regions(layout, w)
    if w.measured is not None:
        _credit_measured(layout, w)
    energy, requests = app_energy + w.host_energy, app_requests if app_requests else w.traces
    add_totals(state, bucket, energy, app_carbon, requests)
    return energy, app_carbon, requests


def _credit_raw(tally: Tally, layout: Layout, cells: list, energies: Iterable, carbons: Iterable,
                requests: Iterable | None) -> tuple[float, float, int]:
    """The hot loop: every entry is a known service; values are sanitised inline."""
    app_energy = app_carbon = 0.0
    app_requests = 0
    for acc, cell, e, c, r in zip(layout.targets, cells, energies, carbons,  # repeat(0) is endless
                                  requests if requests is not None else repeat(0), strict=False):
        if type(e) is not float or not 0.0 <= e <= MAX_FIGURE:
            e = clean_float(e, tally)
        if type(c) is not float or not 0.0 <= c <= MAX_FIGURE:
            c = clean_float(c, tally)
        if type(r) is not int or not 0 <= r <= MAX_COUNT:
            r = clean_count(r, tally)
        acc.energy += e  # type: ignore[union-attr]
        acc.carbon += c  # type: ignore[union-attr]
        acc.requests += r  # type: ignore[union-attr]
        acc.windows += 1  # type: ignore[union-attr]
        cell.energy += e
        cell.carbon += c
        cell.requests += r
        app_energy += e
        app_carbon += c
        app_requests += r
    return app_energy, app_carbon, app_requests


def _credit_mixed(state: AggregateState, bucket: Bucket, layout: Layout, cells: list,
                  w: Window) -> tuple[float, float, int]:
    """The general loop over sanitised lists: entries may be past the service cap (dropped,
    counted)."""
    app_energy = app_carbon = 0.0
    app_requests = 0
    requests = w.requests or [0] * len(w.energies)
    for acc, cell, e, c, r in zip(layout.targets, cells, w.energies, w.carbons, requests, strict=True):
        app_energy += e
        app_carbon += c
        app_requests += r
        if acc is None:
            _drop(state, bucket, e, c)
            continue
        acc.energy += e
        acc.carbon += c
        acc.requests += r
        acc.windows += 1
        cell.energy += e
        cell.carbon += c
        cell.requests += r
    return app_energy, app_carbon, app_requests


def _credit_measured(layout: Layout, w: Window) -> None:
    """Each service's measured energy: its energy in the window x its measured ratio (the
    energies as credited: a raw value is sanitised again, uncounted, as _credit_raw did)."""
    ratios = w.measured or {}
    for name, acc, e in zip(w.names or (), layout.targets, w.energies, strict=False):
        r = ratios.get(name)
        if r is None or acc is None:
            continue
        if type(e) is not float or not 0.0 <= e <= MAX_FIGURE:
            e = clean_float(e, _UNCOUNTED)
        acc.measured += e * r


def _upgrade_regions(layout: Layout, w: Window) -> bool:
    """First *known* region wins; returns whether any target is still unknown."""
    still = False
    for name, acc in zip(w.names or (), layout.targets, strict=True):
        if isinstance(acc, ServiceAcc) and acc.region == "unknown":
            acc.region = clean_name(w.region_map.get(name)) or "unknown"
            still = still or acc.region == "unknown"
    return still


def _layout(state: AggregateState, w: Window) -> Layout:
    names = w.names or ()
    models = w.model_map
    tags = tuple(models.values()) if tuple(models) == names else tuple(models.get(n) for n in names)
    key = (names, tags, w.host_names)
    if key == state._last_key:  # the usual case: the previous window's layout (no hashing)
        layout = state._last_layout
    else:
        try:
            layout = state._layouts.get(key)
        except TypeError:  # an unhashable (hostile) tag value: no caching for this window
            key, layout = None, None
        if layout is not None:
            state._last_key, state._last_layout = key, layout
    if layout is not None:
        count_tags(state, layout)  # type: ignore[arg-type]
        return layout  # type: ignore[return-value]
    layout = _new_layout(state, w, names, tags)
    if key is not None and len(state._layouts) < MAX_LAYOUTS:
        state._layouts[key] = layout
        state._last_key, state._last_layout = key, layout
    return layout


def _new_layout(state: AggregateState, w: Window, names: tuple[str, ...], tags: tuple) -> Layout:
    layout = Layout(names, tags, w.host_names)
    for name, raw_tag in zip(names, tags, strict=True):
        if name in w.host_names:
            layout.host_named += 1  # still a service: hosts are only their rows
        tag_in = raw_tag if type(raw_tag) is str and raw_tag else None
        tag = accept_model(state, tag_in)
        if tag is not None:
            layout.tag_counts[tag] = layout.tag_counts.get(tag, 0) + 1
        elif tag_in is not None:
            layout.rejected += 1
        region = clean_name(w.region_map.get(name)) or "unknown"
        acc = state.unattributed if name == UNATTRIBUTED else _service(state, name, region)
        if acc is not None and tag is not None:
            acc.models[tag] = None
        if acc is not None and acc.region == "unknown":
            acc.region = region
            layout.unknown = layout.unknown or region == "unknown"
        layout.targets.append(acc)
    layout.simple = all(isinstance(t, ServiceAcc) for t in layout.targets)
    return layout


# -- the proxy path -----------------------------------------------------------------------


def _proxy(state: AggregateState, bucket: Bucket, w: Window, location: str, strict: bool,
           backfill: bool) -> tuple[float, float, int]:
    """Split the window by I/O share; returns what was added to the energy, operational
    carbon and request totals (a ``backfill`` window's credits also go to the backfill term)."""
    io_total = sum(w.io_split.values())
    app_energy = proxy_energy(w.energy_kwh, w.host_energy, w.total_io_ops, io_total)
    app_kg = proxy_kg(w.operational_g, w.mid_g, *_unattributed_g(w))
    added = (app_energy + w.host_energy, app_kg, w.traces)
    add_totals(state, bucket, *added)
    if io_total == 0 and app_energy == 0.0 and app_kg == 0.0 and not w.one_sided:
        state.idle_windows += 1  # a host-only window: nothing to attribute, not a fallback
        return added
    state.fallback_windows += 1
    if io_total == 0:
        if strict:
            raise AttributionError(
                f"{location}: window has no per-service maps and no I/O ops to split "
                f"{app_energy:g} kWh by; drop --strict-attribution to book it as "
                f"{UNATTRIBUTED}, or fix the agent that wrote it"
            )
        _credit(state, bucket, UNATTRIBUTED, "unknown", app_energy, app_kg, 0, w.model)
        if backfill:
            _backfill_credit(state, UNATTRIBUTED, app_energy, app_kg, 0)
        return added
    if w.host_names:
        state.host_named_services += sum(1 for name in w.io_split if name in w.host_names)
    _split_proxy(state, bucket, w.io_split, io_total, app_energy, app_kg, w.model)
    if backfill:
        for name, ops in w.io_split.items():  # the split as credited, if the fold holds the service
            if name == UNATTRIBUTED or name in state.services:
                share = ops / io_total
                _backfill_credit(state, name, app_energy * share, app_kg * share, 0)
    return added


def _split_proxy(state: AggregateState, bucket: Bucket, io_split: dict[str, int], io_total: int,
                 app_energy: float, app_kg: float, model: str | None) -> None:
    """Credit each service its share of I/O ops (``io_total`` > 0). Every entry carries the
    window's one model, so after the first credit the tag set's answer is known: accepted
    (count one more) or rejected (count one more rejection)."""
    services, tag = state.services, _UNSET
    for name, ops in io_split.items():
        share = ops / io_total
        acc = services.get(name)
        if acc is None or tag is _UNSET:  # a new or dropped service, or the first entry
            answer = _credit(state, bucket, name, "unknown", app_energy * share, app_kg * share, 0, model)
            tag = answer if tag is _UNSET else tag
            continue
        acc.energy += app_energy * share  # a known service (proxy windows know no region)
        acc.carbon += app_kg * share
        acc.windows += 1
        cell = bucket.cell(name)
        cell.energy += app_energy * share
        cell.carbon += app_kg * share
        if tag is not None:
            state.models[tag] += 1  # type: ignore[index]
            acc.models[tag] = None  # type: ignore[index]
        elif model is not None:
            state.rejected_models += 1


# -- the backfill term --------------------------------------------------------------------


def _backfill_credit(state: AggregateState, name: str, energy: float, carbon: float, requests: int) -> None:
    sums = state.backfill_services.get(name)
    if sums is None:
        sums = state.backfill_services[name] = BackfillSums()
    sums.energy += energy
    sums.carbon += carbon
    sums.requests += requests
    sums.windows += 1


def _backfill_entries(state: AggregateState, names: Iterable[str], targets: Iterable[object],
                      energies: Iterable[float], carbons: Iterable[float], requests: Iterable[int] | None) -> None:
    """A runtime window's entries as credited (a ``None`` target was dropped by the cap)."""
    for name, acc, e, c, r in zip(names, targets, energies, carbons,
                                  requests if requests is not None else repeat(0), strict=False):
        if acc is not None:
            _backfill_credit(state, name, e, c, r)


def _backfill_window(state: AggregateState, w: Window, energy: float, operational_kg: float, requests: int) -> None:
    """The window's totals, as the fold added them."""
    b = state.backfill
    b.windows += 1
    b.energy += energy
    b.operational_kg += operational_kg
    b.requests += requests
    for kg_name, g in zip(_STATE_KG, _unattributed_g(w), strict=True):
        setattr(b, kg_name, getattr(b, kg_name) + g / 1000.0)


# -- region and host rows -----------------------------------------------------------------


def _host_regions(state: AggregateState, rows: HostRows) -> None:
    """In-totals host rows ``(region, kWh, gCO2e, PUE)`` summed per region (for the
    market-based figure). At most ``max_regions`` host regions; a row past it stays
    location-based, counted."""
    accs = state.host_regions
    for region, energy, co2, pue in rows:
        name = clean_name(region) or "unknown"
        acc = accs.get(name)
        if acc is None:
            if len(accs) >= state.max_regions:
                state.dropped_host_rows += 1
                state.overflowed = True
                continue
            acc = accs[name] = HostRegionAcc()
        acc.energy += energy
        acc.carbon += co2 / 1000.0
        acc.rows += 1
        if acc.pue is None:
            acc.pue = pue


def fold_regions(state: AggregateState, rows: list[dict]) -> float:
    """Fold a window's region rows (each an object; the first row of a region fixes its
    status, intensity, PUE and source); returns the energy of rows whose status is not
    ``resolved`` (counted at 0 g), which is also summed per region in ``ewc_regions``."""
    tally, regions = state.tally, state.regions
    without = 0.0
    for row in rows:
        try:
            name, io, energy, co2 = _REGION_FIELDS(row)
            acc = regions.get(name) if type(name) is str else None
        except KeyError:  # a field is absent: take the defaults
            name = row.get("region")
            io, energy, co2 = row.get("io_ops", 0), row.get("energy_kwh", 0.0), row.get("co2_gco2", 0.0)
            acc = regions.get(name) if type(name) is str else None
        if acc is None:
            acc = _new_region(state, row)
            if acc is None:
                continue
        acc.rows += 1
        acc.io_ops += io if type(io) is int and 0 <= io <= MAX_COUNT else clean_count(io, tally)
        if not (type(energy) is float and 0.0 <= energy <= MAX_FIGURE):
            energy = clean_float(energy, tally)
        acc.energy += energy
        acc.carbon += (co2 if type(co2) is float and 0.0 <= co2 <= MAX_FIGURE else clean_float(co2, tally)) / 1000.0
        if energy and row.get("status") != "resolved":
            without += energy
            state.note_without_carbon(name, energy)
    return without


def _new_region(state: AggregateState, row: dict) -> RegionAcc | None:
    name = clean_name(row.get("region"))
    if name is None:
        state.tally.missing += 1
        return None
    if len(state.regions) >= state.max_regions:
        state.dropped_regions += 1
        state.overflowed = True
        return None
    status, source = row.get("status"), row.get("intensity_source")
    acc = state.regions[name] = RegionAcc(
        status if type(status) is str and len(status) <= 32 else "unresolved",
        clean_float(row.get("grid_intensity_gco2_kwh", 0.0), state.tally),
        clean_float(row.get("pue", 1.0), state.tally),
        source if type(source) is str and len(source) <= 32 else "unknown",
    )
    return acc
