"""Span start times -> cells of an intensity row: month x hour (0..287) or the annual column.

A region's intensity row (``CarbonModel.intensity_row``) has 288 month-major month x hour
cells, then the annual value in column 288. Each span reads the cell of its start time in
UTC; a span without a usable time (start 0: absurd or unknown, see ``agent/batch.py``) takes
the window's clock ``now_ns`` when there is one, else the annual column.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache

import numpy as np

from agent.carbon.model import ANNUAL_COLUMN

NS_PER_HOUR = 3_600_000_000_000
NS_PER_DAY = 24 * NS_PER_HOUR


def span_cells(
    start_ns: np.ndarray, now_ns: int | None, has_profile: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each span's month x hour cell (0..287), or ANNUAL_COLUMN without a usable time.

    The second value says which spans have a usable time; ``None`` means all of them (the
    usual case, kept to a handful of whole-batch operations: this runs once per request).
    """
    start = start_ns.astype(np.int64, copy=False)
    if start.size and now_ns is not None and start.min() <= 0:
        start = np.where(start <= 0, now_ns, start)
    if start.size and start.min() > 0:  # usual: every span has a time
        if not has_profile:
            return np.full(start.shape, ANNUAL_COLUMN, dtype=np.int64), None
        hour = (start // NS_PER_HOUR) % 24
        lo, hi = int(start.min()) // NS_PER_DAY, int(start.max()) // NS_PER_DAY
        first_month = _month_of_day(lo)
        if first_month == _month_of_day(hi):  # usual: the whole batch is in one month
            return hour + (first_month % 12) * 24, None
        return _month_of(start, lo, hi) * 24 + hour, None
    known = start > 0
    if not (has_profile and known.any()):
        return np.full(start.shape, ANNUAL_COLUMN, dtype=np.int64), known
    safe = np.where(known, start, int(start[known][0]))  # any known time: masked out below
    lo, hi = int(safe.min()) // NS_PER_DAY, int(safe.max()) // NS_PER_DAY
    cell = _month_of(safe, lo, hi) * 24 + (safe // NS_PER_HOUR) % 24
    return np.where(known, cell, ANNUAL_COLUMN), known


def _month_of(start: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Month (0-11) of each start; ``lo``/``hi`` are the first and last day of the batch."""
    day = start // NS_PER_DAY
    if hi - lo < 400:  # a few days across a month end: month of each day from a small table
        days = np.arange(lo, hi + 1).astype("datetime64[D]")
        month_of = days.astype("datetime64[M]").astype(np.int64) % 12
        return month_of[np.clip(day - lo, 0, hi - lo)]
    return start.astype("datetime64[ns]").astype("datetime64[M]").astype(np.int64) % 12


@lru_cache(maxsize=64)
def _month_of_day(day: int) -> int:
    """Months since 1970-01 of a day counted from 1970-01-01 (cached: a window sees few days)."""
    dt = datetime.fromtimestamp(max(day, 0) * 86400, UTC)
    return (dt.year - 1970) * 12 + dt.month - 1
