"""The fold's per-window rules as plain functions and constants (docs/report-format.md).

Each window takes one of two paths:

- **runtime** - the line carries both per-service maps, each non-empty: sum them per service;
- **proxy** - no maps (a v1.0 line), or only one of the two (a *one-sided* window): split the
  window's application energy and carbon by each service's share of I/O ops
  (:func:`proxy_energy`, :func:`proxy_kg`); with nothing to split by the window goes to the
  ``_unattributed`` bucket (or fails under strict attribution).

A line is *backfilled* (:func:`is_backfill`) when ``methodology.backfill`` is the string
``"true"``. Windows go to time buckets of a UTC grid (:func:`series_grid`,
:func:`bucket_start`: aggregate.series). Nothing here holds state; the reference fold
(``aggregator/fold/reference.py``) applies these rules, and the C accelerator
(``_fold.c``) mirrors the few it needs, pinned by ``FOLD_VERSION``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from schema.constants import ENERGY_PER_IO_OP_KWH
from schema.totals import less_unattributed

if TYPE_CHECKING:
    from aggregator.read import Period

UNATTRIBUTED = "_unattributed"
MAX_SERVICES = 4096
MAX_ENERGY_MODELS = 64
MAX_REGIONS = 1024
MAX_SAMPLES = 100
MAX_LAYOUTS = 4096
MAX_METHOD_KEYS = 32
MAX_METHOD_VALUES = 8
MAX_METHOD_VALUE_BYTES = 2048

HOUR = 3600
DAY = 86400
HOURLY_UP_TO_S = 2 * DAY  # a period at most this long is bucketed by the hour
MAX_BUCKETS = 400  # daily up to 400 days touched; longer periods take buckets of k whole days


class AttributionError(Exception):
    """Strict attribution: a window had nothing to split its energy and carbon by."""


def is_backfill(meta: object) -> bool:
    """Whether a line's ``methodology`` marks it as backfilled (``backfill = "true"``)."""
    if type(meta) is not dict:
        return False
    value = meta.get("backfill")
    return type(value) is str and value == "true"


def proxy_energy(energy_kwh: float, host_energy: float, total_io_ops: int, io_total: int) -> float:
    """A proxy window's application energy: ``energy_kwh`` less host energy when it is > 0,
    else ``total_io_ops`` (or the I/O rows' total) x ``ENERGY_PER_IO_OP_KWH``."""
    if energy_kwh > 0.0:
        return max(0.0, energy_kwh - host_energy)
    return (total_io_ops or io_total) * ENERGY_PER_IO_OP_KWH


def proxy_kg(operational_g: float, mid_g: float, *unattributed_g: float) -> float:
    """A proxy window's application carbon (kg): the operational figure, or the midpoint less
    the terms no service carries (``unattributed_g``, one per ``schema.totals.UNATTRIBUTED_TERMS``
    in that order: :func:`~schema.totals.less_unattributed`), never below 0."""
    return (operational_g or max(0.0, less_unattributed(mid_g, *unattributed_g))) / 1000.0


def add_methodology(methodology: dict[str, list[str]], meta: dict) -> bool:
    """Add a window's methodology block (key -> distinct string values, first seen; at most
    32 keys x 8 values of <= 2 KiB). Returns whether a new key was refused at the key cap."""
    refused = False
    for key, value in meta.items():
        if type(value) is not str or len(value) > MAX_METHOD_VALUE_BYTES:
            continue
        values = methodology.get(key)
        if values is None:
            if len(key) > 64:
                continue
            if len(methodology) >= MAX_METHOD_KEYS:
                refused = True
                continue
            values = methodology[key] = []
        if value not in values and len(values) < MAX_METHOD_VALUES:
            values.append(value)
    return refused


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
    first guess by division is corrected by comparisons, so the cache check ``lo <= t < hi``
    agrees with it on every double)."""
    lo = origin + math.floor((t - origin) / width) * width
    if lo > t:
        lo -= width
    elif lo + width <= t:
        lo += width
    return lo
