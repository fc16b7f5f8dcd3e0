"""The report over time (``aggregate.series``), built from the state's time buckets.

Each window goes, by its ``window.start``, to one bucket of a UTC grid (``series_grid`` in
aggregator/fold/rules.py): hourly when the period is at most two days, daily otherwise
(whole days of k > 1 only past ``MAX_BUCKETS`` days). A bucket holds the same window-level
sums as the state's totals (energy, host energy, the four carbon terms, entries dropped past
the service cap, requests, windows) and one :class:`~aggregator.fold.sums.Cell` per service
credited in it (energy, operational carbon, requests). The fold adds into the current bucket
exactly what it adds into the totals, in the same order; buckets merge like the rest of the
state (aggregator/fold/state.py), so the engines stay byte-identical, and the state grows
with services x buckets, never with lines. docs/report-format.md, "Over time".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from aggregator.fold.rules import DAY, HOUR, bucket_start, series_grid
from aggregator.fold.sums import Bucket, Cell
from schema.report import Series, SeriesBucket, SeriesService
from schema.times import period_label
from schema.totals import HOST_TERMS, sum_of, total_of

if TYPE_CHECKING:
    from aggregator.fold.state import AggregateState
    from aggregator.read import Period
    from schema.report import Application


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
            start=period_label(lo), end=period_label(hi), windows=b.windows, requests=b.requests, energy_kwh=b.energy,
            host_energy_kwh=b.host_energy,
            carbon_kgco2eq=total_of(b, ""),  # a bucket names the terms bare (schema.totals)
            operational_kgco2eq=b.operational, embodied_kgco2eq=b.embodied,
            host_carbon_kgco2eq=sum_of(b, "", HOST_TERMS), dropped_energy_kwh=b.dropped_energy,
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
