"""The report over time (``aggregate.series``): time buckets kept as mergeable fold state.

Each window goes, by its ``window.start``, to one bucket of a UTC grid: hourly when the
period is at most two days, daily otherwise (whole days of k > 1 only past ``MAX_BUCKETS``
days). A bucket holds the same window-level sums as the state's totals (energy, host energy,
the four carbon terms, entries dropped past the service cap, requests, windows) and one
:class:`~aggregator.accumulators.Cell` per service credited in it (energy, operational
carbon, requests). Every fold path (general, Python fast paths, the C fold) adds into the
current bucket exactly what it adds into the totals, in the same order; buckets merge like
the rest of the state (``merge_series``), so the engines stay byte-identical, and the state
grows with services x buckets, never with lines. docs/report-format.md, "Over time".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from aggregator.accumulators import Bucket, Cell, _Layout
from aggregator.read import _iso
from schema.report import Series, SeriesBucket, SeriesService

if TYPE_CHECKING:
    from aggregator.fold import AggregateState
    from aggregator.read import Period
    from schema.report import Application

HOUR = 3600
DAY = 86400
HOURLY_UP_TO_S = 2 * DAY  # a period at most this long is bucketed by the hour
MAX_BUCKETS = 400  # daily up to 400 days touched; longer periods take buckets of k whole days
UNATTRIBUTED = "_unattributed"
NO_BUCKET: tuple = (math.inf, -math.inf, None)  # the bucket cache before any window


def series_grid(period: Period) -> tuple[int, int]:
    """``(origin, width)`` in epoch seconds: buckets are ``[origin + i*width, origin + (i+1)*width)``.

    The origin is the UTC midnight at or before the period's start. Width: an hour when the
    period lasts at most two days, else a day; when the period touches more than
    ``MAX_BUCKETS`` UTC days, ``k`` days with ``k`` the smallest that gives at most that many
    buckets. An open period (the Python API's ``Period.everything()``) is bucketed by the day
    from 1970-01-01."""
    start, end = period.start, period.end
    if not (math.isfinite(start) and math.isfinite(end)):
        return 0, DAY
    origin = math.floor(start / DAY) * DAY
    if end - start <= HOURLY_UP_TO_S:
        return origin, HOUR
    days = math.ceil((end - origin) / DAY)
    return origin, DAY * max(1, math.ceil(days / MAX_BUCKETS))


def bucket_start(origin: int, width: int, t: float) -> int:
    """The start of the bucket holding ``t``: the largest grid point <= ``t`` (exact: the
    first guess by division is corrected by comparisons, so the C fold's cache check
    ``lo <= t < hi`` agrees with it on every double)."""
    lo = origin + math.floor((t - origin) / width) * width
    if lo > t:
        lo -= width
    elif lo + width <= t:
        lo += width
    return lo


class SeriesFold:
    """The bucket part of AggregateState (a mixin): the state provides ``series``,
    ``series_origin``, ``series_width``, ``services`` and the cache ``_bcache``
    (``(lo, hi, bucket)`` of the bucket being folded into)."""

    series: dict[int, Bucket]
    series_origin: int
    series_width: int
    _bcache: tuple

    def set_grid(self, period: Period) -> None:
        """Bucket this state's windows by ``period``'s grid (before any window is folded)."""
        grid = series_grid(period)
        if (self.series_origin, self.series_width) == grid:
            return
        if self.series:
            raise ValueError(f"this state already holds buckets of {self.series_width} s from "
                             f"{self.series_origin}; fold the period {period} into a new state")
        self.series_origin, self.series_width = grid
        self._bcache = NO_BUCKET

    def _enter_bucket(self, start: float) -> Bucket:
        """The bucket of a window starting at ``start`` (created empty), now the current one."""
        width = self.series_width
        lo = bucket_start(self.series_origin, width, start)
        bucket = self.series.get(lo)
        if bucket is None:
            bucket = self.series[lo] = Bucket()
        self._bcache = (float(lo), float(lo + width), bucket)
        return bucket

    def _bucket_for(self, start: float) -> Bucket:
        lo, hi, bucket = self._bcache
        return bucket if lo <= start < hi else self._enter_bucket(start)

    def _layout_cells(self, layout: _Layout) -> list[Cell | None]:
        """The layout's targets' cells in the current bucket (None past the cap), cached on
        the layout until the bucket changes."""
        bucket = self._bcache[2]
        layout.cells = [None if t is None else bucket.cell(name) for name, t in zip(layout.names, layout.targets,
                                                                                      strict=True)]
        layout.cells_for = bucket
        return layout.cells


def merge_series(left: AggregateState, right: AggregateState) -> None:
    """Add ``right``'s buckets into ``left``'s (after ``left.services`` took ``right``'s): a
    cell of a service the left side dropped at its cap goes to the bucket's dropped sums, as
    the entries would have in one sequential fold."""
    if not right.series:
        return
    if not left.series:
        left.series_origin, left.series_width = right.series_origin, right.series_width
    elif (left.series_origin, left.series_width) != (right.series_origin, right.series_width):
        raise ValueError("cannot merge states bucketed on different grids (folded for different periods)")
    kept = left.services
    for key, theirs in right.series.items():
        mine = left.series.get(key)
        if mine is None:
            mine = left.series[key] = Bucket()
        mine.add(theirs)
        for name, cell in theirs.services.items():
            if name == UNATTRIBUTED or name in kept:
                own = mine.cell(name)
                own.energy += cell.energy
                own.carbon += cell.carbon
                own.requests += cell.requests
            else:
                mine.dropped_energy += cell.energy
                mine.dropped_carbon += cell.carbon


def _keys(state: AggregateState, period: Period, origin: int, width: int) -> list[int]:
    """Every bucket of the period (empty ones too), or of the windows' extent when open."""
    keys = set(state.series)
    if math.isfinite(period.start) and math.isfinite(period.end):
        lo = bucket_start(origin, width, period.start)
        keys.update(range(lo, math.ceil(period.end), width))
        keys = {k for k in keys if k < period.end}
    elif keys:
        keys.update(range(min(keys), max(keys) + 1, width))
    return sorted(keys)


def build_series(state: AggregateState, period: Period, apps: list[Application]) -> Series:
    """``aggregate.series``: every bucket of the period in time order (zeros where no window
    started), and per service (the report's ``applications[]`` order) one value per bucket."""
    origin, width = (state.series_origin, state.series_width) if state.series else series_grid(period)
    keys = _keys(state, period, origin, width)
    empty = Bucket()
    buckets = []
    for key in keys:
        b = state.series.get(key, empty)
        lo, hi = max(float(key), period.start), min(float(key + width), period.end)
        buckets.append(SeriesBucket(
            start=_iso(lo), end=_iso(hi), windows=b.windows, requests=b.requests, energy_kwh=b.energy,
            host_energy_kwh=b.host_energy,
            carbon_kgco2eq=b.operational + b.embodied + b.database + b.messaging,
            operational_kgco2eq=b.operational, embodied_kgco2eq=b.embodied,
            host_carbon_kgco2eq=b.database + b.messaging, dropped_energy_kwh=b.dropped_energy,
            dropped_carbon_kgco2eq=b.dropped_carbon))
    services = []
    zero = Cell()
    for app in apps:
        cells = [state.series[k].services.get(app.service_name, zero) if k in state.series else zero for k in keys]
        services.append(SeriesService(service_name=app.service_name, energy_kwh=[c.energy for c in cells],
                                      carbon_kgco2eq=[c.carbon for c in cells],
                                      requests=[c.requests for c in cells]))
    return Series(bucket="hour" if width == HOUR else "day" if width == DAY else f"{width // DAY} days",
                  bucket_seconds=width, buckets=buckets, services=services)
