"""The decode rules of ``agent/batch.py``, written once in Python for every Python decoder.

The reference protobuf decoder and the JSON decoder turn their input into the same neutral
calls (``BatchBuilder.resource`` then ``BatchBuilder.add_span``), so the normative rules live
in exactly one Python place. The C decoder (``_wire.c``) mirrors this file line for line; the
differential tests in ``tests/otlp`` hold the two to the same answers.

Attribute values reach the rules as ``str`` (a string value), ``int`` (an int value) or
``OTHER`` (any other kind, or a key with no value). Duplicate keys: the last one wins, as
when a protobuf message is merged. Counters count spans affected, once per span and reason:

- ``service_name_invalid``: the span's resource has no string ``service.name`` (missing,
  another value kind, or empty); the span's service is ``"unknown_service"``.
- ``region_invalid``: a ``cloud.region`` consulted for the span (its own, then its resource's
  when its own is missing or invalid) was not 1-64 ASCII letters, digits, ``-`` or ``_``.
- ``end_before_start``: end < start; the span keeps its start and gets duration 0.
- ``timestamp_absurd``: start is 0 or at/after ``MAX_TIMESTAMP_NS`` (2201-01-01, i.e. beyond
  year 2200): ``start_ns`` 0, duration 0; or end is at/after that bound: duration 0.
- ``trace_id_invalid`` (the span is *rejected*: no row, ``rejected`` += 1): the trace id is
  not 16 bytes or is all zero (an invalid id per the OTLP spec), so it cannot be counted.
- ``parent_span_id_invalid``: the parent span id is present but not 8 bytes, or all zero (an
  invalid span id per the OTLP spec). The span keeps its row (its energy does not depend on
  its parent) and is not a root: only a span with no parent id at all is (``is_root``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import numpy as np

from agent.batch import (
    OP_HTTP,
    OP_MESSAGING,
    OP_NONE,
    OP_SQL_DELETE,
    OP_SQL_INSERT,
    OP_SQL_OTHER,
    OP_SQL_SELECT,
    OP_SQL_UPDATE,
    SpanBatch,
)
from schema.constants import REGION_RE

MAX_TIMESTAMP_NS: Final = int(datetime(2201, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000_000
#: Bumped with every change of a rule; the C decoder reports its own and ``agent.otlp.fast``
#: refuses a build that disagrees (2: SERVER/CONSUMER spans are never database/messaging I/O;
#: 3: the ``is_root`` column and ``parent_span_id_invalid``; 4: a database span's class comes
#: from ``db.operation.name``/``db.operation`` first, then the query text's first keyword).
RULES_VERSION: Final = 4
UNKNOWN_SERVICE: Final = "unknown_service"
KIND_SERVER, KIND_CLIENT, KIND_PRODUCER, KIND_CONSUMER = 2, 3, 4, 5

#: Counter names, in the order the C decoder reports them.
COUNTER_NAMES: Final = (
    "region_invalid",
    "service_name_invalid",
    "end_before_start",
    "timestamp_absurd",
    "trace_id_invalid",
    "parent_span_id_invalid",
)


class _Other:
    """An attribute value that is neither a string nor an int (or no value at all)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "OTHER"


OTHER: Final = _Other()
AttrValue = str | int | _Other

RESOURCE_KEYS: Final = frozenset({"service.name", "cloud.region"})
#: Span attributes the rules read, old and new semantic conventions side by side.
SPAN_KEYS: Final = frozenset(
    {
        "cloud.region",
        "db.system", "db.system.name",
        "db.operation.name", "db.operation",
        "db.statement", "db.query.text",
        "messaging.system",
        "http.url", "url.full",
        "server.address", "net.peer.name",
        "http.method", "http.request.method",
        "http.response.body.size", "http.response_content_length",
    }
)  # fmt: skip

_SQL_KEYWORDS: Final = {
    "SELECT": OP_SQL_SELECT,
    "INSERT": OP_SQL_INSERT,
    "UPDATE": OP_SQL_UPDATE,
    "DELETE": OP_SQL_DELETE,
}
_SKIPPED: Final = " \t\n\r\f\v("  # blanks and opening parentheses
_LETTERS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def valid_region(value: AttrValue) -> bool:
    return isinstance(value, str) and REGION_RE.fullmatch(value) is not None


def _first_word(text: str, i: int = 0) -> tuple[int, int] | None:
    """``(start, end)`` of the first run of ASCII letters at or after ``i``, after blanks, ``(``
    and comments; ``None`` when a comment is unterminated."""
    n = len(text)
    while i < n:
        c = text[i]
        if c in _SKIPPED:
            i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return None
            i = end + 2
        elif text.startswith("--", i):
            end = text.find("\n", i + 2)
            if end < 0:
                return None
            i = end + 1
        else:
            break
    j = i
    while j < n and text[j] in _LETTERS:
        j += 1
    return i, j


def sql_class(statement: str) -> int:
    """Class of a SQL statement by its first keyword, after blanks, ``(`` and comments.

    Leading ``/* ... */`` and ``-- ...`` comments are skipped because ORM and sqlcommenter
    tags put them there; an unterminated comment or any other first word is ``OP_SQL_OTHER``.
    """
    word = _first_word(statement)
    if word is None:
        return OP_SQL_OTHER
    return _SQL_KEYWORDS.get(statement[word[0] : word[1]].upper(), OP_SQL_OTHER)


def operation_class(name: str) -> int:
    """Class of a ``db.operation.name`` by its first word, case-insensitive, as ``sql_class``.

    A batch of one operation is named ``BATCH <op>`` by the conventions and takes ``<op>``'s
    class (``BATCH INSERT`` is INSERT); a mixed batch (``BATCH``) or any other name (Redis
    ``HMSET``, MongoDB ``findAndModify``) is ``OP_SQL_OTHER``.
    """
    word = _first_word(name)
    if word is not None and name[word[0] : word[1]].upper() == "BATCH":
        word = _first_word(name, word[1])
    if word is None:
        return OP_SQL_OTHER
    return _SQL_KEYWORDS.get(name[word[0] : word[1]].upper(), OP_SQL_OTHER)


def db_class(attrs: dict[str, AttrValue]) -> int:
    """Class of a database span: ``db.operation.name`` (or the older ``db.operation``) when it
    names SELECT/INSERT/UPDATE/DELETE, else the first keyword of ``db.query.text`` (or the older
    ``db.statement``), else ``OP_SQL_OTHER``. Many instrumentations (Redis, MongoDB, most
    drivers with query capture off) send an operation name and no query text."""
    return db_class_why(attrs)[0]


def db_class_why(attrs: dict[str, AttrValue]) -> tuple[int, str | None]:
    """:func:`db_class` and the attribute that decided it (None: neither was usable)."""
    key = _key(attrs, "db.operation.name", "db.operation")
    if key is not None:
        op = operation_class(attrs[key])  # type: ignore[arg-type]  # _key: a non-empty str
        if op != OP_SQL_OTHER:
            return op, key
    statement = _key(attrs, "db.query.text", "db.statement")
    if statement is None:
        return OP_SQL_OTHER, key
    return sql_class(attrs[statement]), statement  # type: ignore[arg-type]


def _text(attrs: dict[str, AttrValue], *keys: str) -> str | None:
    """The first of ``keys`` holding a non-empty string."""
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _key(attrs: dict[str, AttrValue], *keys: str) -> str | None:
    """The first of ``keys`` holding a non-empty string (the key, not its value)."""
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return key
    return None


def classify(kind: int, attrs: dict[str, AttrValue]) -> tuple[int, int]:
    """``(op_class, response_bytes)`` of a span: database > messaging > outgoing HTTP.

    Only the calling side of an operation is I/O. A SERVER or CONSUMER span is the receiving
    side (a database proxy serving its clients, a Kafka/Celery consumer handling a message the
    producer already counted), so counting it too would count the same operation twice: such
    spans are requests (``is_entry``), never I/O, whatever ``db.*``/``messaging.*`` they carry.
    """
    op, size, _ = classify_why(kind, attrs)
    return op, size


def classify_why(kind: int, attrs: dict[str, AttrValue]) -> tuple[int, int, tuple[str, ...]]:
    """:func:`classify` and the attribute keys that decided it, in the order they were read
    (empty for a span that is no I/O); what ``carbonspan score --explain`` shows."""
    if kind != KIND_SERVER and kind != KIND_CONSUMER:
        system = _key(attrs, "db.system", "db.system.name")
        if system is not None:
            op, by = db_class_why(attrs)
            return op, -1, (system,) if by is None else (system, by)
        messaging = _key(attrs, "messaging.system")
        if messaging is not None:
            return OP_MESSAGING, -1, (messaging,)
    if kind == KIND_CLIENT:
        url = _key(attrs, "url.full", "http.url")
        if url is not None:
            return OP_HTTP, _size(attrs), (url, *_size_key(attrs))
        address = _key(attrs, "server.address", "net.peer.name")
        method = _key(attrs, "http.request.method", "http.method")
        if address is not None and method is not None:
            return OP_HTTP, _size(attrs), (address, method, *_size_key(attrs))
    return OP_NONE, -1, ()


def _size(attrs: dict[str, AttrValue]) -> int:
    for key in ("http.response.body.size", "http.response_content_length"):
        value = attrs.get(key)
        if type(value) is int and value >= 0:
            return value
    return -1


def _size_key(attrs: dict[str, AttrValue]) -> tuple[str, ...]:
    for key in ("http.response.body.size", "http.response_content_length"):
        value = attrs.get(key)
        if type(value) is int and value >= 0:
            return (key,)
    return ()


@dataclass(slots=True)
class Resource:
    """What a resource contributes to its spans (raw values; validated per span)."""

    service: str | None  # a non-empty string service.name, else None
    region: str | None  # a valid cloud.region
    region_invalid: bool  # a cloud.region was present but invalid


class BatchBuilder:
    """Accumulates rows and interns strings in first-use order, then builds a SpanBatch."""

    def __init__(self) -> None:
        self._tables: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
        self._rows: list[tuple[int, int, int, int, int, int, int, int, bool, bool]] = []
        self.counters: dict[str, int] = {}
        self.rejected = 0

    def count(self, reason: str) -> None:
        self.counters[reason] = self.counters.get(reason, 0) + 1

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.count(reason)

    @staticmethod
    def resource(attrs: dict[str, AttrValue]) -> Resource:
        service = attrs.get("service.name")
        region = attrs.get("cloud.region")
        return Resource(
            service=service if isinstance(service, str) and service else None,
            region=region if valid_region(region) else None,
            region_invalid="cloud.region" in attrs and not valid_region(region),
        )

    def _intern(self, table: int, text: str) -> int:
        ids = self._tables[table]
        found = ids.get(text)
        if found is None:
            found = ids[text] = len(ids)
        return found

    def add_span(
        self,
        res: Resource,
        trace_id: bytes,
        parent_span_id: bytes | None,
        name: str,
        kind: int,
        start: int,
        end: int,
        attrs: dict[str, AttrValue],
    ) -> None:
        """One span's row. ``parent_span_id`` is its parent's id as sent (``b""``: none, a root),
        or None when the encoding held something that is not an id at all (JSON only)."""
        if len(trace_id) != 16 or not any(trace_id):
            self.reject("trace_id_invalid")
            return
        is_root = parent_span_id == b""
        if not is_root and (
            parent_span_id is None or len(parent_span_id) != 8 or not any(parent_span_id)
        ):
            self.count("parent_span_id_invalid")
        service = res.service
        if service is None:
            service = UNKNOWN_SERVICE
            self.count("service_name_invalid")
        own = attrs.get("cloud.region", None)
        region = own if valid_region(own) else res.region
        if ("cloud.region" in attrs and not valid_region(own)) or (
            region is None and res.region_invalid
        ):
            self.count("region_invalid")
        if start == 0 or start >= MAX_TIMESTAMP_NS:
            self.count("timestamp_absurd")
            start, duration = 0, 0
        elif end >= MAX_TIMESTAMP_NS:
            self.count("timestamp_absurd")
            duration = 0
        elif end < start:
            self.count("end_before_start")
            duration = 0
        else:
            duration = end - start
        op, size = classify(kind, attrs)
        self._rows.append(
            (
                self._intern(0, service),
                -1 if region is None else self._intern(1, region),
                self._intern(2, name),
                op,
                size,
                start,
                duration,
                int.from_bytes(trace_id[8:], "big"),
                kind in (KIND_SERVER, KIND_CONSUMER),
                is_root,
            )
        )

    def build(self) -> SpanBatch:
        services, regions, endpoints = (list(t) for t in self._tables)
        if not self._rows:
            batch = SpanBatch.empty()
            batch.counters, batch.rejected = dict(self.counters), self.rejected
            return batch
        cols = list(zip(*self._rows, strict=True))
        return SpanBatch(
            services=services,
            regions=regions,
            endpoints=endpoints,
            service_id=np.array(cols[0], np.int32),
            region_id=np.array(cols[1], np.int32),
            endpoint_id=np.array(cols[2], np.int32),
            op_class=np.array(cols[3], np.uint8),
            response_bytes=np.array(cols[4], np.int64),
            start_ns=np.array(cols[5], np.int64),
            duration_ns=np.array(cols[6], np.int64),
            trace_lo=np.array(cols[7], np.uint64),
            is_entry=np.array(cols[8], np.bool_),
            is_root=np.array(cols[9], np.bool_),
            counters=dict(self.counters),
            rejected=self.rejected,
        )


_C_DTYPES = (
    np.int32, np.int32, np.int32, np.uint8, np.int64, np.int64, np.int64, np.uint64, np.bool_, np.bool_,
)  # fmt: skip


def batch_from_columns(out: tuple, extra_counters: dict[str, int] | None = None) -> SpanBatch:
    """The SpanBatch of a C decoder's output (``_wire.decode``, ``_jsonwalk.decode``): the three
    string tables, one bytearray per column (wrapped as numpy arrays without copying), the
    counts in ``COUNTER_NAMES`` order and the rejected count."""
    counters = {name: n for name, n in zip(COUNTER_NAMES, out[13], strict=True) if n}
    counters.update(extra_counters or {})
    return SpanBatch(
        out[0],
        out[1],
        out[2],
        *(np.frombuffer(buf, dtype) for buf, dtype in zip(out[3:13], _C_DTYPES, strict=True)),
        counters=counters,
        rejected=out[14],
    )
