"""Bounded names: service keys and endpoint names as the window report may hold them.

A ``service.name`` or span name is whatever a client sent. The aggregator drops a service
whose name is longer than 256 UTF-8 bytes (``aggregator.sanitize.MAX_NAME_BYTES``), so an
unbounded name would lose that service's carbon at disclosure time, and a hostile one could
make an archive line megabytes long. The scorer therefore cuts names to ``MAX_NAME_BYTES`` at
a character boundary and counts the spans affected (the figures stay, under the cut name).
Tables are small (one entry per distinct name in a batch), so this is a loop over strings,
never over spans.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from schema.constants import MAX_NAME_BYTES  # shared with the aggregator

__all__ = ["MAX_NAME_BYTES"]


def bounded(name: str) -> str:
    """``name`` cut to at most MAX_NAME_BYTES UTF-8 bytes, never inside a character."""
    if len(name) <= MAX_NAME_BYTES // 4:  # a character is at most 4 bytes: surely short
        return name
    data = name.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_NAME_BYTES:
        return name
    return data[:MAX_NAME_BYTES].decode("utf-8", "ignore")


def all_short(table: list[str], lowercased: bool = False) -> bool:
    """True when no entry can exceed the bound (the usual case: a C-speed length scan).

    A character is at most 4 UTF-8 bytes, and lowercasing at most doubles the characters
    ("İ" -> "i̇"), so 64 (or, to be lowercased, 32) characters always fit in 256 bytes.
    """
    limit = MAX_NAME_BYTES // (8 if lowercased else 4)
    return not table or max(map(len, table)) <= limit


def intern_table(
    table: list[str], normalise: Callable[[str], str] = str
) -> tuple[list[str], np.ndarray, list[int]]:
    """Distinct bounded, normalised names (first-use order), each entry's index, cut entries.

    Two entries that normalise (e.g. lowercase) or cut to the same name share one index.
    """
    index: dict[str, int] = {}
    of_table = np.empty(len(table), dtype=np.int64)
    cut: list[int] = []
    for i, raw in enumerate(table):
        full = normalise(raw)  # first: lowercasing can lengthen a string ("İ" -> "i̇")
        name = bounded(full)
        if name is not full:
            cut.append(i)
        of_table[i] = index.setdefault(name, len(index))
    return list(index), of_table, cut
