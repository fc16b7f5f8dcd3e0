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


#: ``"MM:SS"`` -> seconds into the hour, for every minute and second of an hour.
_MINUTE_SECOND = {f"{m:02d}:{s:02d}": m * 60 + s for m in range(60) for s in range(60)}
#: ``"YYYY-MM-DDTHH:"`` -> integer epoch seconds of that hour (bounded: cleared past 4,096).
_HOURS: dict[str, int] = {}
_SHORT_LENGTH = len("2026-11-30T10:00:00Z")


def _hour(prefix: str) -> int | None:
    """Epoch seconds of ``prefix`` (``YYYY-MM-DDTHH:``) at minute 0, or None when it is not
    that form exactly (written back the same) - the caller then parses the whole text."""
    try:
        dt = parse(prefix + "00:00Z")
    except ValueError:
        return None
    if dt.strftime("%Y-%m-%dT%H:") != prefix:  # another form fromisoformat reads (a week date)
        return None
    if len(_HOURS) >= 4096:  # a long archive walks through many hours
        _HOURS.clear()
    epoch = _HOURS[prefix] = int(dt.timestamp())
    return epoch


def to_epoch(text: str) -> float:
    """Epoch seconds of an RFC 3339 time (no offset: UTC). Raises ValueError.

    The two forms lines carry, the window time (27 characters) and the 20-character
    ``...:SSZ``, are read without a parse: the hour's epoch is parsed once and cached, and the
    minutes, seconds and microseconds are added in integers and divided once, which is exactly
    what ``datetime.timestamp()`` computes (total microseconds / 10**6, correctly rounded).
    Any other text is parsed."""
    n = len(text)
    if ((n == _SHORT_LENGTH or n == WINDOW_TIME_LENGTH and text[19] == "." and text[20:26].isdigit()
         and text[20:26].isascii()) and text[10] == "T" and text[13] == ":" and text[-1] == "Z"):
        offset = _MINUTE_SECOND.get(text[14:19])
        if offset is not None:
            hour = _HOURS.get(text[:14])
            if hour is None:
                hour = _hour(text[:14])
            if hour is not None:
                if n == _SHORT_LENGTH:
                    return float(hour + offset)
                return ((hour + offset) * 1_000_000 + int(text[20:26])) / 1_000_000
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
