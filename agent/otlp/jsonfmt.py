"""OTLP/JSON trace exports -> SpanBatch.

Follows the OTLP/HTTP JSON encoding (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding):
lowerCamelCase field names (snake_case accepted too), trace ids as 32 hex digits and span ids
as 16 (base64 of 16 and 8 bytes accepted too, as proto3 JSON writers emit), 64-bit integers as
decimal strings or
numbers, enums as integers (the ``SPAN_KIND_*`` names accepted too), unknown fields ignored.

Three kinds of problem, three outcomes:

- The request cannot be read: invalid JSON, or a field of the wrong shape (an object that is
  a list, ``startTimeUnixNano`` that is not an integer, a span ``name`` that is not a string,
  a string or int attribute value of the wrong type for an attribute carbonspan reads).
  ``OtlpDecodeError`` names the path, e.g.
  ``resourceSpans[0].scopeSpans[0].spans[3].startTimeUnixNano: expected an integer or
  integer string, got 1.5``. Values of attributes carbonspan does not read are not checked.
- One span cannot be counted: it is rejected (no row, ``batch.rejected`` += 1) with a
  counter: ``trace_id_invalid`` (missing, not a string, not 32 hex digits nor base64 of 16
  bytes, or all zero) or ``timestamp_out_of_range`` (a timestamp below 0 or >= 2**64, which
  the protobuf encoding cannot carry).
- A field is ignored with a counter, exactly as for protobuf: see ``agent.otlp.rules``. A
  ``parentSpanId`` that is absent, ``null`` or ``""`` makes a root span; one that is not a
  span id (not a string, not 16 hex digits nor base64 of 8 bytes, or all zero) is counted
  (``parent_span_id_invalid``) and the span is not a root.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from agent.batch import SpanBatch
from agent.otlp.errors import OtlpDecodeError
from agent.otlp.jsonfast import decode_json_fast
from agent.otlp.rules import OTHER, RESOURCE_KEYS, SPAN_KEYS, AttrValue, BatchBuilder

_INT_RE = re.compile(r"-?[0-9]+")
_HEX_RE = {16: re.compile(r"[0-9a-fA-F]{32}"), 8: re.compile(r"[0-9a-fA-F]{16}")}
_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_INT32 = (-(2**31), 2**31)
_UINT64_END = 2**64
_URLSAFE = str.maketrans("-_", "+/")


def _snake(camel: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


_SNAKE = {
    name: _snake(name)
    for name in (
        "resourceSpans", "scopeSpans", "traceId", "parentSpanId", "startTimeUnixNano",
        "endTimeUnixNano", "stringValue", "intValue",
    )
}  # fmt: skip


def _field(obj: dict[str, Any], name: str) -> Any:
    """``obj[name]`` under its lowerCamelCase or snake_case name; None when absent."""
    value = obj.get(name)
    if value is None and name in _SNAKE:
        value = obj.get(_SNAKE[name])
    return value


def _fail(path: str, expected: str, got: Any) -> OtlpDecodeError:
    shown = repr(got)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return OtlpDecodeError(f"{path}: expected {expected}, got {shown}")


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, "an object", value)
    return value


def _list(obj: dict[str, Any], name: str, path: str) -> list[Any]:
    value = _field(obj, name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(f"{path}.{name}" if path else name, "a list", value)
    return value


def _integer(value: Any, path: str) -> int:
    """A JSON int64/uint64: a number without fraction, or a decimal string."""
    if value is None:
        return 0
    if type(value) is int:
        return value
    if isinstance(value, str) and _INT_RE.fullmatch(value):
        return int(value)
    raise _fail(path, "an integer or integer string", value)


def _attr_value(value: Any, path: str) -> AttrValue:
    if value is None:
        return OTHER
    value = _object(value, path)
    text = _field(value, "stringValue")
    if text is not None:
        if not isinstance(text, str):
            raise _fail(f"{path}.stringValue", "a string", text)
        return text
    number = _field(value, "intValue")
    if number is not None:
        return _integer(number, f"{path}.intValue")
    return OTHER


def _attrs(obj: dict[str, Any], wanted: frozenset[str], path: str) -> dict[str, AttrValue]:
    """The wanted attributes (the last of a repeated key wins); paths are built on error only."""
    found: dict[str, AttrValue] = {}
    for i, kv in enumerate(_list(obj, "attributes", path)):
        if type(kv) is not dict:
            raise _fail(f"{path}.attributes[{i}]", "an object", kv)
        key = kv.get("key", "")
        if type(key) is not str:
            raise _fail(f"{path}.attributes[{i}].key", "a string", key)
        if key in wanted:
            found[key] = _attr_value(kv.get("value"), f"{path}.attributes[{i}].value")
    return found


def id_bytes(value: Any, size: int) -> bytes | None:
    """``size`` bytes from a hex (OTLP/JSON) or base64 (proto3 JSON) id, else None."""
    if not isinstance(value, str):
        return None
    if _HEX_RE[size].fullmatch(value):
        return bytes.fromhex(value)
    try:
        raw = base64.b64decode(value.translate(_URLSAFE), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == size else None


def trace_id_bytes(value: Any) -> bytes | None:
    """16 bytes from a hex (OTLP/JSON) or base64 (proto3 JSON) trace id, else None."""
    return id_bytes(value, 16)


def parent_span_id_bytes(value: Any) -> bytes | None:
    """``b""`` for no parent (absent, null or ""), else its 8 bytes, else None (not an id)."""
    return b"" if value is None or value == "" else id_bytes(value, 8)


def _kind(value: Any, path: str) -> int:
    if value is None:
        return 0
    if type(value) is int and _INT32[0] <= value < _INT32[1]:
        return value
    if isinstance(value, str) and value in _KIND_NAMES:
        return _KIND_NAMES[value]
    raise _fail(path, "a span kind (an integer such as 2, or 'SPAN_KIND_SERVER')", value)


def _span(builder: BatchBuilder, res: Any, span: Any, path: str) -> None:
    span = _object(span, path)
    name = span.get("name", "")
    if name is None:
        name = ""
    if not isinstance(name, str):
        raise _fail(f"{path}.name", "a string", name)
    kind = _kind(span.get("kind"), f"{path}.kind")
    start = _integer(_field(span, "startTimeUnixNano"), f"{path}.startTimeUnixNano")
    end = _integer(_field(span, "endTimeUnixNano"), f"{path}.endTimeUnixNano")
    attrs = _attrs(span, SPAN_KEYS, path)
    trace_id = trace_id_bytes(_field(span, "traceId"))
    parent = parent_span_id_bytes(_field(span, "parentSpanId"))
    if trace_id is None or not any(trace_id):
        builder.reject("trace_id_invalid")
    elif not (0 <= start < _UINT64_END and 0 <= end < _UINT64_END):
        builder.reject("timestamp_out_of_range")
    else:
        builder.add_span(res, trace_id, parent, name, kind, start, end, attrs)


def decode_json_into(builder: BatchBuilder, doc: Any, where: str = "") -> None:
    """Add one parsed ``ExportTraceServiceRequest`` JSON object to ``builder``."""
    doc = _object(doc, where or "the request")
    for r, rs in enumerate(_list(doc, "resourceSpans", where.rstrip(". "))):
        rpath = f"{where}resourceSpans[{r}]"
        rs = _object(rs, rpath)
        resource = rs.get("resource")
        resource = {} if resource is None else _object(resource, f"{rpath}.resource")
        res = builder.resource(_attrs(resource, RESOURCE_KEYS, f"{rpath}.resource"))
        for s, ss in enumerate(_list(rs, "scopeSpans", rpath)):
            spath = f"{rpath}.scopeSpans[{s}]"
            ss = _object(ss, spath)
            for i, span in enumerate(_list(ss, "spans", spath)):
                _span(builder, res, span, f"{spath}.spans[{i}]")


def parse_json(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise OtlpDecodeError(f"not valid JSON: {exc}") from None


def decode_json_python(data: bytes | str) -> SpanBatch:
    """Decode one OTLP/JSON ``ExportTraceServiceRequest`` object with orjson and this walk.

    The specification the C walker (``agent.otlp.jsonfast``) is tested against, and what
    decodes every request the C walker leaves alone.
    """
    builder = BatchBuilder()
    decode_json_into(builder, parse_json(data))
    return builder.build()


class WalkExpired(Exception):
    """A walk waited for the budget past its request's answer time (``deadline``): it was not
    walked; its request is refused with nothing counted (agent/export.py, ``deadline``)."""


class WalkBudget:
    """Bytes of request body walked in Python at once.

    orjson's objects for a request cost about eight times its bytes (twelve concurrent
    15.5 MB snake_case bodies took an agent to 1,314 MB), so the Python walk takes a share of
    ``limit`` bytes for its body and waits while the others' shares leave no room; one walk
    always runs, whatever its size. The wait is bounded by the walks ahead of it (each a few
    seconds at most at the largest body) and the requests waiting hold admission slots, so
    past ``queue_size`` clients are refused as usual (429 / RESOURCE_EXHAUSTED + RetryInfo).
    Each walk is told to ``on_walk(waited)`` (the agent counts them:
    ``carbonspan_json_python_walks_total{waited}``).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.on_walk: Callable[[bool], None] | None = None
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, n: int, deadline: float | None = None) -> Iterator[None]:
        """Hold ``n`` bytes of the budget while walking; with ``deadline`` (monotonic), a wait
        for room that would outlast it raises WalkExpired instead of walking a body whose
        answer would come too late to count (the walks ahead are not slowed by it)."""
        with self._cond:
            waited = bool(self.held and self.held + n > self.limit)
            if waited:
                room = lambda: not self.held or self.held + n <= self.limit  # noqa: E731
                if deadline is None:
                    self._cond.wait_for(room)
                elif not self._cond.wait_for(room, max(0.0, deadline - time.monotonic())):
                    raise WalkExpired(f"waited for the Python walk past the answer time "
                                      f"({n} bytes behind {self.held} being walked)")
            self.held += n
        if self.on_walk is not None:
            self.on_walk(waited)
        try:
            yield
        finally:
            with self._cond:
                self.held -= n
                self._cond.notify_all()


WALK_BUDGET = WalkBudget(16 << 20)  # ~130 MB of orjson objects at most (docs/operations.md)


def decode_json(data: bytes | str, deadline: float | None = None) -> SpanBatch:
    """Decode one OTLP/JSON ``ExportTraceServiceRequest`` object (C walker first, if built;
    the Python walk within ``WALK_BUDGET``, raising WalkExpired if its wait for the budget
    would pass ``deadline``)."""
    batch = decode_json_fast(data)
    if batch is not None:
        return batch
    with WALK_BUDGET.hold(len(data), deadline):
        return decode_json_python(data)
