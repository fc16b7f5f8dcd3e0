"""The one exception every OTLP decoder raises for input it cannot read."""

from __future__ import annotations


class OtlpDecodeError(ValueError):
    """The bytes are not a readable OTLP trace export.

    The message says what was wrong and where (a byte offset and a field path for protobuf,
    a JSON path such as ``resourceSpans[0].scopeSpans[0].spans[3].startTimeUnixNano`` for
    JSON, and the file and line for trace files), so the sender can fix its exporter. The
    receiver answers the request with a client error and keeps serving.
    """
