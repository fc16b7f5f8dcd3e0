"""The reference protobuf decoder: protobuf objects in, SpanBatch out, plainly.

It is the specification the fast C decoder (``_wire.c``) is tested against and the fallback
when the extension is not built. Speed is not its job: it parses the whole request with the
protobuf runtime, then walks the objects once, handing each resource and span to the shared
rules in ``agent.otlp.rules``.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from agent.batch import SpanBatch
from agent.otlp.errors import OtlpDecodeError
from agent.otlp.rules import OTHER, RESOURCE_KEYS, SPAN_KEYS, AttrValue, BatchBuilder


def _value(value: AnyValue) -> AttrValue:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    return OTHER


def _attrs(kvs: Iterable[KeyValue], wanted: frozenset[str]) -> dict[str, AttrValue]:
    """The wanted attributes; a repeated key keeps its last value."""
    return {kv.key: _value(kv.value) for kv in kvs if kv.key in wanted}


def parse_request(data: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except DecodeError as exc:
        raise OtlpDecodeError(
            f"not a valid OTLP ExportTraceServiceRequest ({len(data)} bytes): {exc}"
        ) from None
    return request


def decode_request(
    request: ExportTraceServiceRequest, builder: BatchBuilder | None = None
) -> SpanBatch:
    """The request's batch; ``builder`` (default: a new one) receives the spans, so a caller
    can watch each span the rules see (``agent.explain``)."""
    builder = BatchBuilder() if builder is None else builder
    for rs in request.resource_spans:
        res = builder.resource(_attrs(rs.resource.attributes, RESOURCE_KEYS))
        for ss in rs.scope_spans:
            for span in ss.spans:
                builder.add_span(
                    res,
                    span.trace_id,
                    span.parent_span_id,
                    span.name,
                    span.kind,
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                    _attrs(span.attributes, SPAN_KEYS),
                )
    return builder.build()


def decode_protobuf_reference(data: bytes) -> SpanBatch:
    """Decode a serialized ``ExportTraceServiceRequest`` with the protobuf runtime."""
    return decode_request(parse_request(data))
