"""The seam: which fold runs. ``fold_line`` is the reference fold with the C accelerator in
front of it where the extension is built; ``ACCELERATED`` says whether it is.

A current archive's lines almost all look like the one before them: the same services with the
same tags, no host rows, clean figures. For such a line the state's cached layout (the
services' accumulators and their cells in the current time bucket) is handed to the C
``fold_plain`` (``_fold.c``), which checks the line against it and adds the per-service sums,
or changes nothing and declines; the window's deltas it returns are added to the totals by the
reference fold's own functions. Everything else - a new layout (the service set changed), a
new time bucket, a leaf the sanitiser must count, host rows, measured ratios, a backfilled or a
v1.0 line - is folded by the reference (``reference.py``), which the accelerator is held to
byte for byte (tests/aggregator/test_fold_accel.py). Without the build (``ext.EXT`` is None)
``fold_line`` *is* the reference.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from aggregator.fold.ext import EXT, FOLD_VERSION
from aggregator.fold.reference import (
    add_totals,
    add_window,
    add_window_counts,
    count_tags,
    fold_regions,
    note_methodology,
)
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.state import AggregateState
from aggregator.fold.sums import Bucket, Cell, Layout

#: Folds a line from its bytes if it can: (state, raw, period start, period end) -> (start, end, hash) | None.
RawFold = Callable[[AggregateState, "bytes | memoryview", float, float], "tuple[float, float | None, str] | None"]

#: Whether the C accelerator is in use (a test asserts it is, so a broken build fails loudly).
ACCELERATED = EXT is not None


def usable_layout(state: AggregateState, start: float) -> tuple[Layout, Bucket] | None:
    """The previous window's layout and the current time bucket, when a line starting at
    ``start`` with that layout can be folded in C: the bucket holds ``start`` and the layout's
    cells are in it, every entry goes to a kept service of known region, and no host names."""
    layout: Layout | None = state._last_layout  # type: ignore[assignment]
    lo, hi, bucket = state._bcache
    if (layout is None or not lo <= start < hi or layout.cells_for is not bucket or not layout.simple
            or layout.unknown or layout.hosts):
        return None
    return layout, bucket


def add_deltas(state: AggregateState, layout: Layout | None, bucket: Bucket, start: float, deltas: tuple,
               meta: dict | None) -> str:
    """Add what the C ``fold_plain`` / ``fold_raw`` returned for a window of ``layout`` (``None``:
    the C fold counted the entries' tags itself) and its methodology block, if any, to the
    totals, with the reference's functions in the reference's order; returns the line's hash."""
    app_energy, app_carbon, requests, traces, embodied, database, messaging, rows, root, without, _, h = deltas
    state.runtime_windows += 1
    if layout is not None:
        count_tags(state, layout)
    add_totals(state, bucket, app_energy + 0.0, app_carbon, requests)  # + host energy: none
    add_window(state, bucket, start, 0.0, embodied, database, messaging)
    add_window_counts(state, traces, root, without, fold_regions(state, rows) if rows else 0.0)
    if meta is not None:
        note_methodology(state, meta)
    return h


def _fold_line_accelerated(state: AggregateState, rec: dict, start: float, location: str,
                           strict: bool = False) -> str:
    """:func:`~aggregator.fold.reference.fold_line`, the common lines checked and summed in C."""
    usable = usable_layout(state, start)
    if usable is not None:
        layout, bucket = usable
        deltas = _plain(rec, layout.names, layout.tags, layout.targets, layout.cells, state.regions)
        if deltas is not None:
            return add_deltas(state, layout, bucket, start, deltas, deltas[10])
    return fold_line_reference(state, rec, start, location, strict)


def fold_raw(state: AggregateState, raw: bytes | memoryview, period_lo: float,
             period_hi: float) -> tuple[float, float | None, str] | None:
    """Fold a plain line straight from its bytes when its window starts in the period and in
    the cached time bucket: ``(start, end, hash)``; else ``None`` having changed nothing (the
    caller then loads it and calls :func:`fold_line`). Its services are the cached layout's
    when they are its names with its tags; else each is looked up (it must be one the state
    holds, of known region, with a tag the tag set and the service hold), so a window whose
    service set changed is folded here too. The C scan reads only what the fold needs and
    checks that the rest is JSON orjson reads the same way (``_fold.c``, "from the bytes")."""
    lo, hi, bucket = state._bcache
    layout: Layout | None = state._last_layout  # type: ignore[assignment]
    if layout is not None and (layout.cells_for is not bucket or not layout.simple or layout.unknown or layout.hosts):
        layout = None
    got = _raw(raw, *((layout.names, layout.tags, layout.targets, layout.cells) if layout is not None else _NO_LAYOUT),
               state.regions, lo, hi, period_lo, period_hi, state.services, state.models,
               bucket.services if bucket is not None else None, Cell)
    if got is None:
        return None
    start, end, deltas, cached = got
    block = deltas[10]  # the methodology's bytes (a non-empty object), or None
    meta = None
    if block is not None and block != state._last_meta_raw:  # the same bytes: noted already
        meta = orjson.loads(block)
        state._last_meta_raw = block
    return start, end, add_deltas(state, layout if cached else None, bucket, start, deltas, meta)


_NO_LAYOUT = (None, None, None, None)


if EXT is not None:
    _plain, _raw = EXT.fold_plain, EXT.fold_raw
    fold_line = _fold_line_accelerated
    RAW_FOLD: RawFold | None = fold_raw
else:
    fold_line = fold_line_reference
    RAW_FOLD = None

__all__ = ["ACCELERATED", "FOLD_VERSION", "RAW_FOLD", "add_deltas", "fold_line", "fold_line_reference", "fold_raw",
           "usable_layout"]
