"""The seam: which fold runs. ``fold_line`` is the reference fold with the C accelerator in
front of it where the extension is built; ``ACCELERATED`` says whether it is.

Two C paths, both held to the reference (``reference.py``) byte for byte
(tests/aggregator/test_fold_accel*.py, test_fold_c_edges.py):

- **from the bytes** (:func:`fold_raw`, the engine's first try for every line): a per-file C
  ``Folder`` (:func:`folder`) scans the line, reading only what the fold needs and checking that
  the rest is JSON orjson reads the same way, and folds a runtime window into the state's
  services, cells, tags and regions - whatever its service set: the previous window's, another,
  new services (made as the reference makes them), services past the cap (dropped into the
  "(other)" row), a new time bucket. The window's totals are then added here by the reference's
  own functions. No ``orjson.loads``.
- **from the loaded line** (``fold_plain``): a line the byte path declined but whose layout is
  the state's cached one is checked and summed in C on the dict.

Everything else - a leaf the sanitiser must count, host rows, measured ratios, a backfilled or
a v1.0 line, a name twice - is folded by the reference. Without the build (``ext.EXT`` is
None) ``fold_line`` *is* the reference and there is no byte path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial

import orjson

from aggregator.fold.ext import EXT, FOLD_VERSION
from aggregator.fold.reference import (
    add_totals,
    add_window,
    add_window_counts,
    count_tags,
    enter_bucket,
    fold_regions,
    note_methodology,
)
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.state import AggregateState
from aggregator.fold.sums import Bucket, Cell, Layout, make_service

#: Folds a line from its bytes if it can: (state, raw, period start, period end, folder) -> (start, end, hash) | None.
RawFold = Callable[[AggregateState, "bytes | memoryview", float, float, object], "tuple[float, float | None, str] | None"]

#: Lines this process folded from their bytes, lines the byte path declined (folded the long
#: way) and files on which it was given up (engines.GIVE_UP_AFTER): summed by engines.fold_lines
#: per file; the aggregate bench prints them.
BYTE_PATH: Counter[str] = Counter()

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


def folder(state: AggregateState) -> object | None:
    """A C ``Folder`` for ``state`` (``_fold.c``, "the Folder"): it folds lines straight from
    their bytes into the state's services, cells, tags and regions, with its own table of the
    services it has met; one per fold of a file (``engines.fold_lines``). None without the build."""
    if EXT is None:
        return None
    return EXT.Folder(state.services, state.models, state.regions, make_service, Cell, partial(_enter, state),
                      state.max_services, state.max_models)


def _enter(state: AggregateState, start: float) -> tuple:
    """Make the bucket holding ``start`` the current one (the reference's enter_bucket)."""
    enter_bucket(state, start)
    return state._bcache


def fold_raw(state: AggregateState, raw: bytes | memoryview, period_lo: float, period_hi: float,
             fold: object | None = None) -> tuple[float, float | None, str] | None:
    """Fold a runtime line straight from its bytes with ``fold`` (:func:`folder` of ``state``;
    a fresh one when not given, as a test may call it) when its window starts in the period:
    ``(start, end, hash)``; else ``None`` having changed
    nothing (the caller then loads it and calls :func:`fold_line`). The C scan reads only what
    the fold needs and checks that the rest is JSON orjson reads the same way; its services may
    be new, change from line to line or be past the service cap (``_fold.c``, "the Folder");
    the window's totals are added here by the reference's own functions, in its order."""
    if fold is None:
        fold = folder(state)
    lo, hi, bucket = state._bcache
    got = fold.fold(raw, lo, hi, bucket, period_lo, period_hi, state.dropped_energy, state.dropped_carbon)  # type: ignore[attr-defined]
    if got is None:
        return None
    (start, end, bucket, app_energy, app_carbon, requests, traces, embodied, database, messaging, root, without,
     block, rows, line_hash, dropped, dropped_energy, dropped_carbon, flags) = got
    state.runtime_windows += 1
    if dropped:  # entries past the service cap (reference._drop, in entry order in C)
        state.dropped_services += dropped
        state.dropped_energy, state.dropped_carbon = dropped_energy, dropped_carbon
    if flags:
        if flags & EXT.FOLD_OVERFLOWED:  # type: ignore[union-attr]
            state.overflowed = True
        if flags & EXT.FOLD_CALIBRATED:  # type: ignore[union-attr]
            state.calibration_applied = True
    add_totals(state, bucket, app_energy + 0.0, app_carbon, requests)  # + host energy: none
    add_window(state, bucket, start, 0.0, embodied, database, messaging)
    add_window_counts(state, traces, root, without, fold_regions(state, orjson.loads(rows)) if rows else 0.0)
    if block is not None:  # None too when the bytes are the last ones the Folder returned (noted already)
        note_methodology(state, orjson.loads(block))
    return start, end, line_hash


if EXT is not None:
    _plain = EXT.fold_plain
    fold_line = _fold_line_accelerated
    RAW_FOLD: RawFold | None = fold_raw
else:
    fold_line = fold_line_reference
    RAW_FOLD = None

__all__ = ["ACCELERATED", "BYTE_PATH", "FOLD_VERSION", "RAW_FOLD", "add_deltas", "fold_line", "fold_line_reference", "fold_raw", "folder",
           "usable_layout"]
