"""The seam: which fold runs. ``fold_line`` is the reference fold with the C accelerator in
front of it where the extension is built; ``ACCELERATED`` says whether it is.

Two C paths, both held to the reference (``reference.py``) byte for byte
(tests/aggregator/test_fold_accel*.py, test_fold_c_edges.py):

- **from the bytes** (the engine's first try for every line; :func:`fold_raw` line by line): a
  per-file C ``Folder`` (:func:`folder`) scans the line, reading only what the fold needs and
  checking that the rest is JSON orjson reads the same way, and folds a runtime window into the
  state's services, cells, tags, regions and time bucket - whatever its service set: the
  previous window's, another, new services (made as the reference makes them), services past
  the cap (dropped into the "(other)" row), a new time bucket. The window's totals it adds, in
  the order of the reference's add_totals / add_window / add_window_counts, to copies of the
  state's totals it holds until ``sync`` writes them back (before any line folded the long way
  and at the end of a file; tests/aggregator/test_fold_held_totals.py). No ``orjson.loads``,
  and no Python per line but the engine's loop; a line's new methodology block or region rows
  that are not all plain are left to :func:`finish`.
- **from the loaded line** (``fold_plain``): a line the byte path declined but whose layout is
  the state's cached one is checked and summed in C on the dict.

Everything else - a leaf the sanitiser must count, host rows, measured ratios, a backfilled or
a v1.0 line, a name twice - is folded by the reference. Without the build (``ext.EXT`` is
None) ``fold_line`` *is* the reference and there is no byte path.
"""

from __future__ import annotations

from collections import Counter
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
from aggregator.fold.sums import Bucket, Cell, Layout, ServiceAcc

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
    their bytes into the state's services, cells, tags, regions and time buckets, with its own
    table of the services it has met, and adds each window's totals to copies of the state's it
    holds until :func:`sync` writes them back; one per fold of a file (``engines.fold_lines``).
    None without the build."""
    if EXT is None:
        return None
    return EXT.Folder(state.services, state.models, state.regions, ServiceAcc, Cell, partial(_enter, state),
                      state.max_services, state.max_models, state)


def _enter(state: AggregateState, start: float) -> tuple:
    """Make the bucket holding ``start`` the current one (the reference's enter_bucket)."""
    enter_bucket(state, start)
    return state._bcache


def finish(state: AggregateState, fold: object, extra: tuple) -> None:
    """What a line the Folder took leaves to Python (``take``'s ``extra``, when not None), in the
    reference's order: its region rows when they are not all plain (the reference's
    fold_regions, and the energy they count at 0 g when the line states none: ``derive``) and
    its methodology block when it is not the one noted last."""
    block, rows, derive = extra
    if rows is not None:
        without = fold_regions(state, orjson.loads(rows))
        if derive and without:
            fold.sync()  # type: ignore[attr-defined]  # the held totals first: this adds to one
            state.energy_without_carbon += without
    if block is not None:
        note_methodology(state, orjson.loads(block))


def fold_raw(state: AggregateState, raw: bytes | memoryview, period_lo: float, period_hi: float,
             fold: object | None = None) -> tuple[float, float | None, str] | None:
    """Fold a runtime line straight from its bytes with ``fold`` (:func:`folder` of ``state``;
    a fresh one when not given) when its window starts in the period, the state's totals
    written back at once: ``(start, end, hash)``; else ``None`` having changed nothing (the
    caller then loads it and calls :func:`fold_line`). The line by line form of what
    ``engines.fold_lines`` does with ``take`` and one ``sync`` per file; the tests drive it.
    The C scan reads only what the fold needs and checks that the rest is JSON orjson reads
    the same way; its services may be new, change from line to line or be past the service
    cap (``_fold.c``, "the Folder"), and the window's totals are added in the reference's order."""
    if fold is None:
        fold = folder(state)
    got = fold.take(raw, period_lo, period_hi)  # type: ignore[attr-defined]
    if got is None:
        return None
    start, end, line_hash, extra = got
    if extra is not None:
        finish(state, fold, extra)
    fold.sync()  # type: ignore[attr-defined]
    return start, end, line_hash


if EXT is not None:
    _plain = EXT.fold_plain
    fold_line = _fold_line_accelerated
else:
    fold_line = fold_line_reference

__all__ = ["ACCELERATED", "BYTE_PATH", "FOLD_VERSION", "add_deltas", "finish", "fold_line", "fold_line_reference",
           "fold_raw", "folder", "usable_layout"]
