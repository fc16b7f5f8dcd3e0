"""The hash chain shared by archives, the placement audit log and the admission decision log.

A chained record is a JSON object ``{"ts", "seq", "prev", "hash", <body key>: ...}``.
``hash`` is ``sha256:<hex>`` of the canonical JSON of the record *without* its ``hash`` key,
so for an archive line it covers exactly ``{ts, seq, prev, report}``. The first record's
``prev`` is ``GENESIS_PREV``, the hash of the fixed seed string ``GENESIS_SEED``; each later
record's ``prev`` is the previous record's ``hash`` and its ``seq`` is one more.

These are pure functions over dicts; durable appending lives with each writer
(``agent/archive`` for window lines, ``schema.chainlog`` for small audit logs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from schema.canonical import canonical_json, sha256_tag

GENESIS_SEED = "carbonspan/chain/v1"
GENESIS_PREV = "sha256:" + hashlib.sha256(GENESIS_SEED.encode()).hexdigest()


def record_hash(record: dict[str, Any]) -> str:
    """The hash a record should carry: over its canonical JSON without the ``hash`` key."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return sha256_tag(canonical_json(body))


def seal(prev_hash: str | None, seq: int, ts: str, body_key: str, body: Any) -> dict[str, Any]:
    """Build the next chained record after ``prev_hash`` (``None`` for the first record)."""
    record: dict[str, Any] = {
        "ts": ts,
        "seq": seq,
        "prev": prev_hash if prev_hash is not None else GENESIS_PREV,
        body_key: body,
    }
    record["hash"] = record_hash(record)
    return record


@dataclass(frozen=True, slots=True)
class ChainFinding:
    """One break in a chain, with where it is (``location`` is e.g. ``file.jsonl:12``)."""

    location: str
    kind: str  # "hash_mismatch" | "prev_mismatch" | "seq_gap" | "malformed"
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.kind}: {self.message}"


def verify_chain(
    records: Iterable[tuple[str, dict[str, Any] | None]],
) -> tuple[list[ChainFinding], str | None, int]:
    """Check a chain given ``(location, record)`` pairs in write order.

    A ``None`` record stands for a line that could not be parsed. Returns the findings, the
    last record's hash (``None`` if there was none) and the number of records checked. After a
    break the check resynchronises on the record found, so one edit yields one finding for the
    edited record and one for its successor rather than a cascade.
    """
    findings: list[ChainFinding] = []
    expected_prev = GENESIS_PREV
    expected_seq: int | None = None
    last_hash: str | None = None
    count = 0
    for location, rec in records:
        count += 1
        if not isinstance(rec, dict) or not {"ts", "seq", "prev", "hash"} <= rec.keys():
            findings.append(ChainFinding(location, "malformed", "not a chained record"))
            continue
        try:
            recomputed = record_hash(rec)
        except ValueError as exc:  # not canonical JSON (e.g. nested past 254 levels): no writer made it
            findings.append(ChainFinding(location, "malformed", f"cannot be hashed: {exc}"))
            continue
        if recomputed != rec["hash"]:
            findings.append(
                ChainFinding(location, "hash_mismatch", "content was changed after it was written")
            )
        if rec["prev"] != expected_prev:
            findings.append(
                ChainFinding(
                    location,
                    "prev_mismatch",
                    "does not follow the previous record (a record was deleted, inserted or "
                    "reordered before it)",
                )
            )
        if expected_seq is not None and rec["seq"] != expected_seq:
            findings.append(
                ChainFinding(location, "seq_gap", f"seq {rec['seq']} where {expected_seq} was due")
            )
        expected_prev = rec["hash"]
        last_hash = rec["hash"]
        expected_seq = rec["seq"] + 1 if isinstance(rec["seq"], int) else None
    return findings, last_hash, count
