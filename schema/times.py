"""The window time format, decided once (docs/archive-format.md, "Times").

Every time the agent writes on a window line (``ts``, ``report.window.start`` and ``.end``) and
every audit-log ``ts`` is RFC 3339 in UTC with microseconds and ``Z``, 27 characters:
``2026-11-30T10:00:00.000000Z`` (:data:`WINDOW_TIME_FORMAT`). A reader accepts any RFC 3339
time Python's ``datetime.fromisoformat`` reads, takes one without an offset as UTC, and so also
reads the 20-character ``2026-11-30T10:00:00Z`` that older tools and synthetic lines carry.

The disclosure report's period labels are the same form with whole seconds shortened to
``...:00Z`` (:func:`period_label`), and ``""`` for an open end.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

#: ``strftime`` form of a window time; always 27 characters.
WINDOW_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
WINDOW_TIME_LENGTH = len("2026-11-30T10:00:00.000000Z")
_NS = 1_000_000_000


def format_ns(ns: int) -> str:
    """The window time of integer nanoseconds since the epoch, truncated to microseconds
    (integer arithmetic: no float rounding)."""
    seconds, rem = divmod(int(ns), _NS)
    return f"{datetime.fromtimestamp(seconds, UTC):%Y-%m-%dT%H:%M:%S}.{rem // 1000:06d}Z"


def format_datetime(dt: datetime) -> str:
    """The window time of ``dt`` (naive: UTC)."""
    return (dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)).strftime(WINDOW_TIME_FORMAT)


def now() -> str:
    """The window time of the wall clock now."""
    return datetime.now(UTC).strftime(WINDOW_TIME_FORMAT)


def parse(text: str) -> datetime:
    """An RFC 3339 time as an aware UTC datetime (no offset: UTC). Raises ValueError."""
    dt = datetime.fromisoformat(text)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def to_epoch(text: str) -> float:
    """Epoch seconds of an RFC 3339 time (no offset: UTC). Raises ValueError."""
    return parse(text).timestamp()


def to_ns(text: str) -> int:
    """Integer epoch nanoseconds of an RFC 3339 time, to the microsecond it carries; the
    inverse of :func:`format_ns` on every time it writes. Raises ValueError."""
    dt = parse(text)
    whole = dt.replace(microsecond=0)
    return int(whole.timestamp()) * _NS + dt.microsecond * 1000


def utc_day(text: str) -> str:
    """``YYYYMMDD`` of an RFC 3339 time in UTC (the day a window file is named by). Raises
    ValueError."""
    return parse(text).strftime("%Y%m%d")


def period_label(t: float) -> str:
    """The report's label of epoch seconds ``t``: the window time form, ``...:00Z`` for whole
    seconds, ``""`` for an open end (an infinity)."""
    if math.isinf(t):
        return ""
    return datetime.fromtimestamp(t, UTC).strftime(WINDOW_TIME_FORMAT).replace(".000000Z", "Z")
