"""Concatenate SpanBatches into one, as if their requests had been decoded together."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from agent.batch import SpanBatch

_COLUMNS = (
    "op_class", "response_bytes", "start_ns", "duration_ns", "trace_lo", "is_entry", "is_root",
)  # fmt: skip


def _merge_table(merged: dict[str, int], table: list[str]) -> np.ndarray:
    """Add ``table``'s new strings in order; return old id -> new id, with a trailing -1.

    The trailing -1 makes ``remap[ids]`` send the "none" id -1 to -1 again.
    """
    remap = np.empty(len(table) + 1, np.int32)
    for old, text in enumerate(table):
        new = merged.get(text)
        if new is None:
            new = merged[text] = len(merged)
        remap[old] = new
    remap[-1] = -1
    return remap


def concat_batches(batches: Iterable[SpanBatch]) -> SpanBatch:
    """One batch holding every row of ``batches`` in order.

    Tables keep first-seen order across the batches, so the result equals decoding the
    concatenated requests; counters and ``rejected`` add up.
    """
    batches = list(batches)
    if not batches:
        return SpanBatch.empty()
    tables: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
    ids: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    counters: dict[str, int] = {}
    for batch in batches:
        for merged, parts, table, column in zip(
            tables,
            ids,
            (batch.services, batch.regions, batch.endpoints),
            (batch.service_id, batch.region_id, batch.endpoint_id),
            strict=True,
        ):
            parts.append(_merge_table(merged, table)[column])
        for reason, n in batch.counters.items():
            counters[reason] = counters.get(reason, 0) + n
    services, regions, endpoints = (list(t) for t in tables)
    return SpanBatch(
        services=services,
        regions=regions,
        endpoints=endpoints,
        service_id=np.concatenate(ids[0]).astype(np.int32, copy=False),
        region_id=np.concatenate(ids[1]).astype(np.int32, copy=False),
        endpoint_id=np.concatenate(ids[2]).astype(np.int32, copy=False),
        **{c: np.concatenate([getattr(b, c) for b in batches]) for c in _COLUMNS},
        counters=counters,
        rejected=sum(b.rejected for b in batches),
    )
