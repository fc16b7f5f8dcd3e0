"""Canonical JSON: the byte form every hash in carbonspan is computed over.

Rules (documented in docs/archive-format.md):
- object keys sorted (recursively), no insignificant white space;
- UTF-8, non-ASCII characters written as themselves;
- floats in the shortest form that round-trips (orjson's), integers as integers;
- NaN and infinities are not JSON: they are refused, never written as ``null``;
- integers must fit in 64 bits;
- at most ``MAX_DEPTH`` (254) nested objects/lists: orjson's own serialisation limit, checked
  first so that a hostile record never recurses past it (a ``ValueError``, not RecursionError).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS

#: Deepest nesting canonical JSON holds: orjson.dumps refuses a 255th level.
MAX_DEPTH = 254
#: The largest integer canonical JSON holds: orjson.dumps writes integers up to 2**64 - 1.
MAX_INT = 2**64 - 1


def _check_finite(obj: Any, path: str = "$", depth: int = 0) -> None:
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"canonical JSON cannot hold {obj!r} at {path}; sanitise it first")
    elif isinstance(obj, dict | list | tuple):
        if depth >= MAX_DEPTH:
            raise ValueError(f"canonical JSON cannot hold objects nested deeper than {MAX_DEPTH} "
                             f"levels (at {path[:80]})")
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        fmt = "{}.{}" if isinstance(obj, dict) else "{}[{}]"
        for k, v in items:
            if isinstance(v, float | dict | list | tuple):
                _check_finite(v, fmt.format(path, k), depth + 1)


def canonical_json(obj: Any) -> bytes:
    """Return the canonical JSON bytes of ``obj`` (sorted keys, compact, finite numbers)."""
    _check_finite(obj)
    try:
        return orjson.dumps(obj, option=_OPTS)
    except TypeError as exc:  # integers past 64 bits, non-JSON types
        raise ValueError(f"canonical JSON cannot hold this value: {exc}") from exc


def sha256_tag(data: bytes) -> str:
    """``"sha256:<hex>"`` of ``data``: the form hashes take in archives, reports and logs."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
