"""The fast OTLP/JSON decoder: ``_jsonwalk.decode`` (C) output -> SpanBatch, or None.

The C walker scans the JSON text itself (orjson's objects alone cost more than the target
allows) and decodes the well-formed common case: lowerCamelCase fields, hex or base64 trace
ids, int64s as strings or numbers, kinds as numbers or ``SPAN_KIND_*`` names, escapes and
unicode in strings. Anything else (invalid JSON, a shape error, snake_case names, a repeated
field, odd ids, big numbers, ...) makes it return None, and ``agent.otlp.jsonfmt`` decodes the
request in Python, which raises today's errors with today's JSON paths. ``FAST_JSON`` says
whether the extension is in use (a test asserts it, so a broken build fails loudly).
"""

from __future__ import annotations

from agent.batch import SpanBatch
from agent.otlp.rules import MAX_TIMESTAMP_NS, RULES_VERSION, batch_from_columns

try:
    from agent.otlp import _jsonwalk
except ImportError:  # not built (no C compiler): jsonfmt's Python walk gives the same batches
    _jsonwalk = None

# A stale build would decode by old rules: use the Python walk instead (tests catch it).
FAST_JSON = (
    _jsonwalk is not None
    and getattr(_jsonwalk, "RULES_VERSION", None) == RULES_VERSION
    and _jsonwalk.MAX_TIMESTAMP_NS == MAX_TIMESTAMP_NS
)


def decode_json_fast(data: bytes | bytearray | memoryview | str) -> SpanBatch | None:
    """The batch of one OTLP/JSON request, or None when the Python walk must decode it."""
    if not FAST_JSON:
        return None
    if isinstance(data, str):
        try:
            data = data.encode()
        except UnicodeEncodeError:  # lone surrogates: orjson's error message says where
            return None
    out = _jsonwalk.decode(data)
    if out is None:
        return None
    cols, out_of_range = out
    return batch_from_columns(cols, {"timestamp_out_of_range": out_of_range} if out_of_range else None)
