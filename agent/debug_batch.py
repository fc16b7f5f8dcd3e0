"""``GET /debug/last-batch``: what carbonspan extracted from the last acknowledged batch.

Off by default; on with ``[agent] debug_last_batch = true`` (or ``CARBONSPAN_DEBUG_LAST_BATCH``).
It shows span names and the attributes that decided each span's class (a SQL statement, a
URL), so it is behind the ingest token when auth is on, and meant for a first look at an
exporter, not for a shared port left open.

Ingest pays nothing for it but one reference: when a request is acknowledged (its partial is
durable in the WAL), :meth:`LastBatch.keep` stores the decompressed body the request already
holds, its format and the time - no copy, no decode, no scoring. The explanation is made only
when the page is asked for: the body is decoded again by the Python rules into an
``agent.explain.RecordingBuilder`` (the rules the C decoders mirror, tested to give the same
batch), and each span is scored by ``agent.explain`` with the agent's scoring context - the
per-span rows of ``carbonspan score --explain --json``. Live signals (``[sources]``) are the
ones current at that moment, which may have moved since the batch was scored.

Bounded: the first ``MAX_ROWS`` spans get a row; the answer says when the batch held more
(``batch.capped``, and a line above the table). One body is held at most (the last one), of
at most ``max_request_bytes``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schema import times

MAX_ROWS = 1000
ENABLE_HINT = ("GET /debug/last-batch is off: set [agent] debug_last_batch = true (or "
               "CARBONSPAN_DEBUG_LAST_BATCH=1) and restart the agent; it shows span names and "
               "attributes, behind the ingest token when auth is on (docs/operations.md)")


@dataclass(frozen=True, slots=True)
class Kept:
    """The last acknowledged request, as it arrived (decompressed)."""

    body: bytes | bytearray
    fmt: str  # protobuf | json
    protocol: str  # grpc | http
    at_ns: int


class LastBatch:
    """The reference to the last acknowledged batch, and its explanation on demand."""

    def __init__(self, context: Callable[[int], Any], max_rows: int = MAX_ROWS) -> None:
        self.context = context  # now_ns -> ScoringContext (the agent's, with live signals)
        self.max_rows = max_rows
        self._kept: Kept | None = None

    def keep(self, body: bytes | bytearray, fmt: str, protocol: str) -> None:
        """Called once per acknowledged request (one attribute store: the hot path)."""
        self._kept = Kept(body, fmt, protocol, time.time_ns())

    def view(self, as_table: bool) -> bytes:
        """The explanation of the last acknowledged batch: JSON, or a table."""
        from agent.explain import explain, render

        kept = self._kept
        if kept is None:
            batch: dict[str, Any] = {"acknowledged": False, "note": "no batch acknowledged since the agent started"}
            return render([], not as_table, batch, (f"{batch['note']}",))
        recorder = self._decode(kept)
        rows = explain(recorder, self.context(kept.at_ns))
        capped = recorder.rows > len(rows)
        batch = {
            "acknowledged": True,
            "acknowledged_at": times.format_ns(kept.at_ns),
            "protocol": kept.protocol,
            "format": kept.fmt,
            "body_bytes": len(kept.body),
            "spans": recorder.rows,
            "rows": len(rows),
            "capped": capped,
            "max_rows": self.max_rows,
        }
        notes = [f"last batch acknowledged {batch['acknowledged_at']} over {kept.protocol} "
                 f"({kept.fmt}, {len(kept.body):,} bytes): {recorder.rows:,} spans"]
        if capped:
            notes.append(f"CAPPED: only the first {len(rows):,} of {recorder.rows:,} spans are "
                         f"listed (at most {self.max_rows:,} rows); the totals are of those rows")
        return render(rows, not as_table, batch, tuple(notes))

    def _decode(self, kept: Kept) -> Any:
        from agent.explain import RecordingBuilder

        recorder = RecordingBuilder(limit=self.max_rows)
        body = bytes(kept.body)
        if kept.fmt == "protobuf":
            from agent.otlp.reference import decode_request, parse_request

            decode_request(parse_request(body), recorder)
        else:
            from agent.otlp.jsonfmt import WALK_BUDGET, decode_json_into, parse_json

            with WALK_BUDGET.hold(len(body)):  # the agent's bound on orjson objects held at once
                decode_json_into(recorder, parse_json(body))
        return recorder
