"""``verify``'s reading of archive lines: every line becomes a record for the chain check or a
reason it cannot be one, and what a record holds that no agent writes is a finding.

The rules (docs/auditors-guide.md, "Lines verify cannot accept"):

- a line past ``MAX_LINE_BYTES``, one that is not JSON or not UTF-8, not an object, or nested
  past canonical JSON's 254 levels cannot be a chained record: the chain check reports it as
  ``malformed`` with the reason, and goes on from the record before it;
- ``duplicate_key``: an object holds one key twice. orjson and Python keep the last value, a
  first-wins reader sees the other, so the line is refused even when its hash verifies (the
  hash is checked over the last-wins reading, so the chain does not break);
- ``non_finite_number``: ``NaN``, ``Infinity`` or a number past the double range. Canonical JSON
  cannot hold one, so no agent wrote the line as it is; ``aggregate`` counts each as 0 in
  ``sanitised_values``. The chain is checked over the record with those numbers at 0.

A line written by orjson (every agent's) is proven free of duplicate keys by serialising the
parsed record again: the same bytes come back only if no key was dropped. Any other line is
parsed a second time by the tolerant reader, which sees every key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from aggregator.files import ArchiveFile, ArchiveReadError, LongLine, iter_lines
from aggregator.lines import Malformed, tolerant
from schema.canonical import MAX_DEPTH

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class LineFinding:
    """What ``verify`` says about one line besides the chain and the invariants."""

    location: str
    kind: str  # "duplicate_key" | "non_finite_number" | "truncated"
    message: str


def load_line(raw: bytes) -> tuple[Record | None, str, list[tuple[str, str]]]:
    """``(record or None, why it is None, [(kind, message)] findings about the record)``."""
    if type(raw) is LongLine:
        return None, raw.reason(), []
    try:
        rec, fixed, duplicate = orjson.loads(raw), 0, None
    except orjson.JSONDecodeError:
        try:
            rec, fixed, duplicate = tolerant(raw, refuse_duplicates=False)
        except Malformed as exc:
            return None, str(exc), []
    if type(rec) is not dict:
        return None, "not a JSON object", []
    try:
        again = orjson.dumps(rec)
    except TypeError:  # orjson.JSONEncodeError: nested past its 254 levels
        return None, (f"nested deeper than {MAX_DEPTH} levels: canonical JSON cannot hold it, so it "
                      "cannot be a chained record"), []
    if duplicate is None and not fixed and again != raw.rstrip(b"\r\n"):
        _, _, duplicate = tolerant(raw, refuse_duplicates=False)  # not orjson's bytes: look again
    found = []
    if duplicate is not None:
        found.append(("duplicate_key", f"key {duplicate!r} appears twice in one object: readers "
                      "disagree on which value counts (the last one was checked); refused"))
    if fixed:
        found.append(("non_finite_number", f"{fixed} number(s) NaN, Infinity or past the double "
                      "range: canonical JSON cannot hold them, so no agent wrote this line as it is; "
                      "aggregate counts each as 0 in sanitised_values"))
    return rec, "", found


def read_records(files: Sequence[ArchiveFile], found: list[LineFinding],
                 reasons: dict[str, str]) -> Iterator[tuple[str, Record | None]]:
    """``(location, record or None)`` over ``files`` in order, for ``schema.chain.verify_chain``.
    Findings about readable lines go to ``found``; why a line is None goes to ``reasons``."""
    for f in files:
        lineno = 0
        try:
            for lineno, raw in enumerate(iter_lines(f), start=1):  # noqa: B007
                if not raw.strip():
                    continue
                location = f"{f.label}:{lineno}"
                rec, reason, line_found = load_line(raw)
                if rec is None:
                    reasons[location] = reason
                found.extend(LineFinding(location, kind, message) for kind, message in line_found)
                yield location, rec
        except ArchiveReadError as exc:
            found.append(LineFinding(f"{f.label}:{lineno + 1}", "truncated", str(exc)))
