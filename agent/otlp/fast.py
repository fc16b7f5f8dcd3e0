"""The fast protobuf decoder: ``_wire.decode`` (C) output -> SpanBatch.

The C scan returns the three string tables, one bytearray per column and the counters; this
wraps the bytearrays as numpy arrays without copying (bytearrays are writable, so the
columns are ordinary arrays) and turns the C error into ``OtlpDecodeError``.
"""

from __future__ import annotations

from agent.batch import SpanBatch
from agent.otlp import _wire
from agent.otlp.errors import OtlpDecodeError
from agent.otlp.rules import MAX_TIMESTAMP_NS, RULES_VERSION, batch_from_columns

# The C mirror of rules.py must agree: a stale build would decode by old rules.
if (
    _wire.MAX_TIMESTAMP_NS != MAX_TIMESTAMP_NS
    or getattr(_wire, "RULES_VERSION", None) != RULES_VERSION
):
    raise ImportError(
        f"agent.otlp._wire ({_wire.__file__}) is out of date with agent.otlp.rules "
        f"(rules version {getattr(_wire, 'RULES_VERSION', 'none')}, expected {RULES_VERSION}): "
        "rebuild it with `.venv/bin/pip install -e '.[test]'`"
    )

def decode_protobuf_fast(data: bytes | bytearray | memoryview) -> SpanBatch:
    """Decode a serialized ``ExportTraceServiceRequest`` straight from the wire format."""
    try:
        out = _wire.decode(data)
    except _wire.WireError as exc:
        raise OtlpDecodeError(f"malformed OTLP ExportTraceServiceRequest: {exc}") from None
    return batch_from_columns(out)
