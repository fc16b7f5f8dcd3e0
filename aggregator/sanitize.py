"""Sanitisers for values read from archive lines, which are untrusted disk state.

Every figure the aggregator adds up passes through here. The rules (docs/report-format.md):
NaN, +-Inf, negatives and values past ``MAX_FIGURE`` become 0 and are counted as
*sanitised*; a value of the wrong type (a string, ``null``, a boolean, a list) is *missing*:
it counts as 0 and is counted too. A field that is simply absent is not counted: a v1.0 line
has no runtime maps and that is not an error. So a sum of sanitised values is always finite.
"""

from __future__ import annotations

from schema.constants import MAX_NAME_BYTES as SCHEMA_MAX_NAME_BYTES

#: Largest figure accepted in one field of one window (1e15 kWh is a petawatt-hour, far above
#: any real window); larger values are sanitised so that sums can never overflow to Inf.
MAX_FIGURE = 1e15
#: Largest accepted count (I/O ops, requests): exactly representable as a float.
MAX_COUNT = 2**53
#: Energy-model tags longer than this (UTF-8 bytes) are rejected.
MAX_TAG_BYTES = 64
#: Service and region names longer than this (UTF-8 bytes) are refused (schema/constants.py).
MAX_NAME_BYTES = SCHEMA_MAX_NAME_BYTES


class Tally:
    """Counts of sanitised and missing values; one per fold state."""

    __slots__ = ("sanitised", "missing")

    def __init__(self) -> None:
        self.sanitised = 0
        self.missing = 0

    def merge(self, other: Tally) -> None:
        self.sanitised += other.sanitised
        self.missing += other.missing


def clean_float(value: object, tally: Tally) -> float:
    """A finite, non-negative figure from ``value``, or 0.0 (counted)."""
    kind = type(value)
    if kind is float:
        if 0.0 <= value <= MAX_FIGURE:  # type: ignore[operator]  # NaN fails both comparisons
            return value  # type: ignore[return-value]
        tally.sanitised += 1
        return 0.0
    if kind is int:
        if 0 <= value <= MAX_FIGURE:  # type: ignore[operator]
            return float(value)  # type: ignore[arg-type]
        tally.sanitised += 1
        return 0.0
    tally.missing += 1
    return 0.0


def clean_count(value: object, tally: Tally) -> int:
    """A non-negative integer count from ``value`` (an integral float is accepted), or 0."""
    kind = type(value)
    if kind is int:
        if 0 <= value <= MAX_COUNT:  # type: ignore[operator]
            return value  # type: ignore[return-value]
        tally.sanitised += 1
        return 0
    if kind is float:
        if 0.0 <= value <= MAX_COUNT and value == int(value):  # type: ignore[operator,call-overload]
            return int(value)  # type: ignore[call-overload]
        tally.sanitised += 1
        return 0
    tally.missing += 1
    return 0


def _bounded(value: object, max_bytes: int) -> str | None:
    """``value`` if it is a non-empty string of at most ``max_bytes`` UTF-8 bytes, else None.
    (A string of n characters has at most 4n bytes, so short strings skip the encoding.)"""
    if type(value) is not str or not value:
        return None
    if len(value) > max_bytes // 4 and len(value.encode("utf-8", "replace")) > max_bytes:
        return None
    return value


def clean_name(value: object) -> str | None:
    """A usable service or region name (at most MAX_NAME_BYTES bytes), or None."""
    return _bounded(value, MAX_NAME_BYTES)


def clean_tag(value: object) -> str | None:
    """An energy-model tag of at most MAX_TAG_BYTES bytes, or None (rejected)."""
    return _bounded(value, MAX_TAG_BYTES)
