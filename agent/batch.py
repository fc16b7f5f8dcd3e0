"""SpanBatch: the columnar form of one OTLP export request, produced by ``agent.otlp``.

This is the contract between decoding and scoring. One row per span; string-valued facts
are ids into small per-batch string tables (interned while decoding), so scoring is numpy
work over integer columns. Decoders classify what the scorer needs and nothing more:

- ``op_class``: what kind of I/O a span is (``OP_*`` below). ``OP_NONE`` spans are requests,
  not energy. Only the calling side of an operation is I/O, so that one operation is counted
  once: a SERVER or CONSUMER span (a database proxy serving its clients, a consumer handling a
  message its producer already counted) is never database or messaging I/O. Database client
  spans are ``db.system``/``db.system.name`` spans of any other kind (CLIENT, INTERNAL and
  UNSPECIFIED: some DB instrumentations emit INTERNAL); their class is the first keyword of
  ``db.statement``/``db.query.text`` (``OP_SQL_OTHER`` when there is none). Outgoing HTTP is
  a CLIENT span with ``http.url``/``url.full`` or a server address
  (``server.address``/``net.peer.name``) plus an HTTP method; messaging is a
  ``messaging.system`` span that is neither SERVER nor CONSUMER (PRODUCER, CLIENT — publish
  over a client API — INTERNAL, UNSPECIFIED). Database wins over messaging over HTTP.
- ``region_id``: the span's ``cloud.region`` else its resource's ``cloud.region``, as an id
  into ``regions``; -1 when neither carries a valid one. A region string that is not 1-64
  ASCII letters, digits, ``-`` or ``_`` is ignored and counted (``counters["region_invalid"]``).
  Strings are kept as sent; the scorer lowercases.
- ``service_id``: resource ``service.name`` (a string value); a missing or non-string
  ``service.name`` is ``"unknown_service"`` and counted (``service_name_invalid``).
- ``response_bytes``: ``http.response.body.size``/``http.response_content_length`` for HTTP
  spans, -1 when unknown.
- ``trace_lo``: the low 64 bits of the trace id (distinct traces are counted with it).
- ``is_entry``: SERVER or CONSUMER span kind: one request for ``per_service_requests``.
- ``is_root``: the span has no parent: protobuf ``parent_span_id`` empty; OTLP/JSON
  ``parentSpanId`` absent, ``null`` or ``""``. One root span begins one request wherever the
  rest of its trace goes (the ``root_span`` unit of embodied carbon). A parent id that is
  present but not a valid span id (not 8 bytes, or all zero: invalid per the OTLP spec; in
  JSON, not 16 hex digits nor base64 of 8 bytes, or not a string) is not a root and is
  counted (``counters["parent_span_id_invalid"]``); the span keeps its row.
- ``endpoint_id``: the span name, id into ``endpoints`` (for ``per_endpoint_io_ops``).
- Timestamps are ns since the Unix epoch (UTC). A span whose end is before its start keeps
  its start and gets duration 0 (``counters["end_before_start"]``); a start of 0 or beyond
  year 2200 is an absurd timestamp: ``start_ns`` is 0 there and the scorer uses the window's
  clock (``counters["timestamp_absurd"]``).

``counters`` holds per-reason counts of ignored fields and rejected spans found while
decoding; ``rejected`` is the number of spans refused outright (they have no row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

OP_NONE = 0
OP_SQL_SELECT = 1
OP_SQL_INSERT = 2
OP_SQL_UPDATE = 3
OP_SQL_DELETE = 4
OP_SQL_OTHER = 5  # database span whose statement is missing or starts with another keyword
OP_HTTP = 6
OP_MESSAGING = 7
OP_CLASS_COUNT = 8

OP_CLASS_NAMES = ("none", "select", "insert", "update", "delete", "db_other", "http", "messaging")


#: The per-span columns of a SpanBatch, in field order.
SPAN_COLUMNS = ("service_id", "region_id", "endpoint_id", "op_class", "response_bytes",
                "start_ns", "duration_ns", "trace_lo", "is_entry", "is_root")


@dataclass(slots=True)
class SpanBatch:
    services: list[str]
    regions: list[str]
    endpoints: list[str]
    service_id: np.ndarray  # int32
    region_id: np.ndarray  # int32, -1 = none
    endpoint_id: np.ndarray  # int32
    op_class: np.ndarray  # uint8, OP_*
    response_bytes: np.ndarray  # int64, -1 = unknown
    start_ns: np.ndarray  # int64, 0 = absurd/unknown
    duration_ns: np.ndarray  # int64, >= 0
    trace_lo: np.ndarray  # uint64
    is_entry: np.ndarray  # bool
    is_root: np.ndarray  # bool: no parent span id
    counters: dict[str, int] = field(default_factory=dict)
    rejected: int = 0

    def __len__(self) -> int:
        return int(self.service_id.shape[0])

    def take(self, rows: np.ndarray | slice) -> SpanBatch:
        """The spans at ``rows`` (indices, a mask or a slice) as a batch of their own, sharing
        the string tables; counters and the rejected count stay with the whole batch."""
        return SpanBatch(self.services, self.regions, self.endpoints,
                         *(getattr(self, name)[rows] for name in SPAN_COLUMNS))

    @classmethod
    def empty(cls) -> SpanBatch:
        return cls(
            services=[],
            regions=[],
            endpoints=[],
            service_id=np.zeros(0, np.int32),
            region_id=np.zeros(0, np.int32),
            endpoint_id=np.zeros(0, np.int32),
            op_class=np.zeros(0, np.uint8),
            response_bytes=np.zeros(0, np.int64),
            start_ns=np.zeros(0, np.int64),
            duration_ns=np.zeros(0, np.int64),
            trace_lo=np.zeros(0, np.uint64),
            is_entry=np.zeros(0, np.bool_),
            is_root=np.zeros(0, np.bool_),
        )
