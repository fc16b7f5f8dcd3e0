"""One archive line -> a dict: the fast parse, the tolerant parse, and what makes a line unreadable.

``orjson.loads`` is the first parse of every line, and the only one a clean archive pays for.
A line orjson refuses goes to :func:`tolerant`, which accepts what Python's ``json.dumps``
writes by default and orjson does not: the literals ``NaN``, ``Infinity`` and ``-Infinity``,
and numbers past the double range (``1e400``). Each becomes ``0.0`` and is counted (the caller
adds the count to ``sanitised_values`` when it keeps the window), so one bad figure no longer
loses the window's other figures. What orjson refuses for any other reason (not JSON, not
UTF-8, a lone surrogate, nesting past 1024 levels) the tolerant parse refuses too.

The tolerant parse also sees duplicate keys (``{"a": 1, "a": 2}``), which both parsers read
last-wins: it reports the first one. ``verify`` refuses every line with a duplicate key
(docs/auditors-guide.md); the aggregator refuses one only where it is seen for free, on this
slow path (proving a line orjson accepted free of duplicates costs another pass over its bytes,
+10-25 % of the fold: docs/report-format.md).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from aggregator.files import LongLine


class Malformed(Exception):
    """The line cannot be read as a window line; ``str(exc)`` says why."""


class _Duplicate(Exception):
    pass


#: A ``\uD800``-``\uDFFF`` escape: Python's parser accepts a lone one, orjson does not.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1


class _Reader:
    """One tolerant parse: counts what it sanitised and remembers the first duplicate key."""

    __slots__ = ("fixed", "duplicate", "refuse_duplicates")

    def __init__(self, refuse_duplicates: bool) -> None:
        self.fixed = 0
        self.duplicate: str | None = None
        self.refuse_duplicates = refuse_duplicates

    def constant(self, _name: str) -> float:
        self.fixed += 1
        return 0.0

    def number(self, text: str) -> float:
        value = float(text)
        if math.isinf(value):
            self.fixed += 1
            return 0.0
        return value

    def integer(self, text: str) -> int | float:
        """As orjson: an integer within 64 bits stays one, a longer one is a float (or 0.0,
        counted, past the double range). ``float`` has no digit limit, unlike ``int``."""
        if len(text) <= 21:
            value = int(text)
            if _INT64_MIN <= value <= _UINT64_MAX:
                return value
        return self.number(text)

    def pairs(self, items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items) and self.duplicate is None:
            seen: set[str] = set()
            self.duplicate = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
            if self.refuse_duplicates:
                raise _Duplicate
        return obj


def _strings_encodable(value: Any) -> bool:
    """Whether every string (key or value) in ``value`` is valid UTF-8 (no lone surrogate)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        elif type(item) is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return True


def tolerant(raw: bytes | memoryview, refuse_duplicates: bool = True) -> tuple[Any, int, str | None]:
    """``(value, numbers sanitised to 0, first duplicate key or None)`` of a line orjson
    refused, or :class:`Malformed` saying why. ``refuse_duplicates``: a duplicate key is
    Malformed (the aggregator) rather than reported (``verify``)."""
    if type(raw) is LongLine:
        raise Malformed(raw.reason())
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"not UTF-8 (byte {exc.start}); truncated or not a window file?") from None
    reader = _Reader(refuse_duplicates)
    try:
        value = json.loads(text, parse_constant=reader.constant, parse_float=reader.number,
                           parse_int=reader.integer, object_pairs_hook=reader.pairs)
    except json.JSONDecodeError as exc:
        raise Malformed(f"not JSON ({exc.msg} at byte {len(text[:exc.pos].encode())}; truncated?)") from None
    except RecursionError:
        raise Malformed("nested too deeply to read (orjson's limit is 1024 levels)") from None
    except _Duplicate:
        raise Malformed(f"duplicate key {reader.duplicate!r} in one object (readers disagree on "
                        "which value counts: refused)") from None
    if _SURROGATE_ESCAPE.search(text) and not _strings_encodable(value):
        raise Malformed("a string holds a lone UTF-16 surrogate escape (not valid Unicode)")
    return value, reader.fixed, reader.duplicate
