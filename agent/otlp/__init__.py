"""OTLP trace exports -> SpanBatch (columns plus interned string tables).

``decode_protobuf`` reads the protobuf wire format directly with a small C extension
(``_wire.c``), touching only the fields the rules in ``agent/batch.py`` name and skipping the
rest by wire type; when the extension is not built it falls back to the reference decoder
(``reference.py``), which gives the same batches, only slower. ``FAST_DECODER`` says which
one is in use (a test asserts the extension is loaded, so a broken build fails loudly).
"""

from __future__ import annotations

from agent.otlp.concat import concat_batches
from agent.otlp.errors import OtlpDecodeError
from agent.otlp.files import read_trace_file
from agent.otlp.jsonfmt import decode_json
from agent.otlp.reference import decode_protobuf_reference

try:
    from agent.otlp.fast import decode_protobuf_fast
except ImportError:  # the C extension is not built: same answers, slower
    FAST_DECODER = False
    decode_protobuf = decode_protobuf_reference
else:
    FAST_DECODER = True
    decode_protobuf = decode_protobuf_fast

__all__ = [
    "FAST_DECODER",
    "OtlpDecodeError",
    "concat_batches",
    "decode_json",
    "decode_protobuf",
    "decode_protobuf_reference",
    "read_trace_file",
]
