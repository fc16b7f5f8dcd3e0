"""The decode rules of agent/batch.py, one example each, through all three decoders.

Every test runs against the C decoder, the reference decoder and the JSON decoder (the same
request rendered as OTLP/JSON with hex ids), so a rule holds everywhere or fails by name.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import orjson
import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

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
from agent.otlp import decode_json
from agent.otlp.fast import decode_protobuf_fast
from agent.otlp.reference import decode_protobuf_reference
from agent.otlp.rules import MAX_TIMESTAMP_NS

T0 = 1_773_151_200_000_000_000  # 2026-03-10T14:00:00Z
TRACE = bytes(range(1, 17))
CLIENT, SERVER, PRODUCER, CONSUMER, INTERNAL = 3, 2, 4, 5, 1


def attrs(**values: str | int | AnyValue | None) -> list[KeyValue]:
    """KeyValues from keyword arguments; ``__`` in a name stands for ``.``."""
    out = []
    for key, value in values.items():
        key = key.replace("__", ".")
        if value is None:
            out.append(KeyValue(key=key))
        elif isinstance(value, AnyValue):
            out.append(KeyValue(key=key, value=value))
        elif isinstance(value, int):
            out.append(KeyValue(key=key, value=AnyValue(int_value=value)))
        else:
            out.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    return out


def span(kind: int = INTERNAL, name: str = "op", trace_id: bytes = TRACE, start: int = T0,
         end: int = T0 + 1000, parent: bytes = b"", **values: str | int | AnyValue | None) -> Span:  # fmt: skip
    return Span(trace_id=trace_id, span_id=b"\x01" * 8, parent_span_id=parent, name=name, kind=kind,
                start_time_unix_nano=start, end_time_unix_nano=end, attributes=attrs(**values))  # fmt: skip


def request(*resources: tuple[list[KeyValue], list[Span]]) -> bytes:
    req = ExportTraceServiceRequest()
    for res_attrs, spans in resources:
        req.resource_spans.append(
            ResourceSpans(resource=Resource(attributes=res_attrs), scope_spans=[ScopeSpans(spans=spans)])
        )
    return req.SerializeToString()


def one(*spans: Span, **resource: str | int | AnyValue | None) -> bytes:
    res = {"service__name": "cart", **resource}
    return request((attrs(**res), list(spans)))


def _via_json(data: bytes) -> SpanBatch:
    req = ExportTraceServiceRequest()
    req.ParseFromString(data)
    doc = MessageToDict(req, use_integers_for_enums=True)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                s["traceId"] = base64.b64decode(s.get("traceId", "")).hex()
                for key in ("spanId", "parentSpanId"):  # OTLP/JSON ids are hex
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return decode_json(orjson.dumps(doc))


@pytest.fixture(params=["fast", "reference", "json"])
def decode(request: pytest.FixtureRequest) -> Callable[[bytes], SpanBatch]:
    return {"fast": decode_protobuf_fast, "reference": decode_protobuf_reference, "json": _via_json}[request.param]


@pytest.mark.parametrize(
    ("statement", "op"),
    [
        ("SELECT * FROM t", OP_SQL_SELECT),
        ("  select 1", OP_SQL_SELECT),
        ("(SELECT 1) UNION (SELECT 2)", OP_SQL_SELECT),
        ("/* controller='cart' */ INSERT INTO t VALUES (1)", OP_SQL_INSERT),
        ("-- tag\nUpdate t SET a = 1", OP_SQL_UPDATE),
        ("DELETE FROM sessions", OP_SQL_DELETE),
        ("WITH x AS (SELECT 1) SELECT * FROM x", OP_SQL_OTHER),  # first keyword is WITH
        ("SELECTED", OP_SQL_OTHER),
        ("/* never closed SELECT", OP_SQL_OTHER),
        ("", OP_SQL_OTHER),
    ],
)
def test_database_spans_are_classed_by_first_keyword(decode, statement, op):
    old = span(CLIENT, db__system="postgresql", db__statement=statement)
    new = span(CLIENT, db__system__name="mysql", db__query__text=statement)
    assert decode(one(old, new)).op_class.tolist() == [op, op]


def test_database_without_statement_is_db_other_and_new_text_wins(decode):
    batch = decode(one(
        span(CLIENT, db__system="redis"),
        span(CLIENT, db__system="pg", db__statement="DELETE x", db__query__text="SELECT 1"),
    ))  # fmt: skip
    assert batch.op_class.tolist() == [OP_SQL_OTHER, OP_SQL_SELECT]


@pytest.mark.parametrize(
    ("operation", "op"),
    [
        ("UPDATE", OP_SQL_UPDATE),  # issue 11: was weighted as "other" (1.0)
        ("SELECT", OP_SQL_SELECT),
        ("insert", OP_SQL_INSERT),  # MongoDB names its commands in lower case
        ("Delete", OP_SQL_DELETE),
        ("BATCH INSERT", OP_SQL_INSERT),  # a batch of one operation: "BATCH " + its name
        ("BATCH", OP_SQL_OTHER),  # a mixed batch
        ("HMSET", OP_SQL_OTHER),
        ("findAndModify", OP_SQL_OTHER),
        ("UPDATED", OP_SQL_OTHER),
        ("", OP_SQL_OTHER),  # empty: as if absent
    ],
)
def test_database_operation_name_is_read_without_query_text(decode, operation, op):
    new = span(CLIENT, db__system__name="redis", db__operation__name=operation)
    old = span(CLIENT, db__system="mongodb", db__operation=operation)  # the deprecated name
    assert decode(one(new, old)).op_class.tolist() == [op, op]


def test_operation_name_wins_and_query_text_fills_in_an_unknown_name(decode):
    batch = decode(one(
        # both known and disagreeing: the operation name wins
        span(CLIENT, db__system__name="postgresql", db__operation__name="DELETE",
             db__query__text="SELECT 1"),
        # an operation name naming no class leaves the query text's first keyword
        span(CLIENT, db__system__name="postgresql", db__operation__name="EXECUTE",
             db__query__text="UPDATE t SET a = 1"),
        # the new name wins over the deprecated one
        span(CLIENT, db__system="pg", db__operation="SELECT", db__operation__name="INSERT"),
        # not a database span: an operation name alone classes nothing
        span(CLIENT, db__operation__name="UPDATE"),
        # a server span is still the receiving side
        span(SERVER, db__system__name="redis", db__operation__name="UPDATE"),
    ))  # fmt: skip
    assert batch.op_class.tolist() == [OP_SQL_DELETE, OP_SQL_UPDATE, OP_SQL_INSERT, OP_NONE, OP_NONE]


def test_database_wins_over_messaging_over_http(decode):
    batch = decode(one(
        span(CLIENT, db__system="pg", messaging__system="kafka", url__full="https://x"),
        span(PRODUCER, messaging__system="kafka", url__full="https://x"),
        span(CLIENT, messaging__system="", url__full="https://x"),  # empty: not messaging
    ))  # fmt: skip
    assert batch.op_class.tolist() == [OP_SQL_OTHER, OP_MESSAGING, OP_HTTP]


UNSPECIFIED = 0


def test_a_consumed_message_is_a_request_not_a_second_io_op(decode):
    """The producer counted the message; its consumer handling it is a request (no double count)."""
    batch = decode(one(
        span(PRODUCER, messaging__system="kafka"),
        span(CONSUMER, messaging__system="kafka"),
        span(CONSUMER, messaging__system="kafka", db__system="pg", url__full="https://x"),
        span(SERVER, messaging__system="rabbitmq"),
    ))  # fmt: skip
    assert batch.op_class.tolist() == [OP_MESSAGING, OP_NONE, OP_NONE, OP_NONE]
    assert batch.is_entry.tolist() == [False, True, True, True]


def test_publishing_from_a_client_internal_or_unspecified_span_is_messaging(decode):
    batch = decode(one(*(span(k, messaging__system="celery") for k in (CLIENT, INTERNAL, UNSPECIFIED, 7))))
    assert batch.op_class.tolist() == [OP_MESSAGING] * 4
    assert not batch.is_entry.any()


def test_a_database_server_span_is_a_request_not_a_second_io_op(decode):
    """A database proxy's SERVER span receives the query its client already counted."""
    batch = decode(one(
        span(CLIENT, db__system="postgresql", db__statement="INSERT INTO t"),
        span(SERVER, db__system="postgresql", db__statement="INSERT INTO t"),
        span(SERVER, db__system__name="mysql", messaging__system="kafka"),
        span(CONSUMER, db__system__name="redis"),
    ))  # fmt: skip
    assert batch.op_class.tolist() == [OP_SQL_INSERT, OP_NONE, OP_NONE, OP_NONE]
    assert batch.is_entry.tolist() == [False, True, True, True]


def test_database_spans_of_internal_producer_or_unspecified_kind_are_io(decode):
    """Some DB instrumentations emit INTERNAL spans; only SERVER/CONSUMER are excluded."""
    batch = decode(one(*(
        span(k, db__system="mongodb", db__query__text="delete") for k in (INTERNAL, UNSPECIFIED, PRODUCER)
    )))  # fmt: skip
    assert batch.op_class.tolist() == [OP_SQL_DELETE] * 3


def test_outgoing_http_needs_a_client_span_and_a_target(decode):
    batch = decode(one(
        span(CLIENT, url__full="https://a/b"),
        span(CLIENT, http__url="https://a/b"),
        span(CLIENT, server__address="a", http__request__method="GET"),
        span(CLIENT, net__peer__name="a", http__method="GET"),
        span(CLIENT, server__address="a"),  # a gRPC call: no HTTP method
        span(SERVER, url__full="https://a/b", http__method="GET"),  # incoming, not outgoing
        span(CLIENT, url__full=5),  # not a string
    ))  # fmt: skip
    assert batch.op_class.tolist() == [OP_HTTP] * 4 + [OP_NONE] * 3


def test_response_size_is_read_for_http_spans_only(decode):
    batch = decode(one(
        span(CLIENT, url__full="u", http__response__body__size=20_480),
        span(CLIENT, url__full="u", http__response_content_length=3),
        span(CLIENT, url__full="u", http__response__body__size=7, http__response_content_length=9),
        span(CLIENT, url__full="u", http__response__body__size=-1),
        span(CLIENT, url__full="u", http__response__body__size="20480"),  # a string is unknown
        span(CLIENT, url__full="u", http__response__body__size=-5, http__response_content_length=4),
        span(SERVER, http__response__body__size=100),
    ))  # fmt: skip
    assert batch.response_bytes.tolist() == [20_480, 3, 7, -1, -1, 4, -1]


def test_span_region_wins_then_resource_region_and_invalid_ones_are_counted(decode):
    batch = decode(request(
        (attrs(service__name="a", cloud__region="eu-west-3"), [
            span(cloud__region="pl"),
            span(),
            span(cloud__region="eu west 3"),  # invalid: falls back to the resource, counted
            span(cloud__region=7),  # not a string: same
        ]),
        (attrs(service__name="b", cloud__region="x" * 65), [
            span(),  # invalid resource region consulted: counted
            span(cloud__region="EU-Central-1"),  # valid own region: resource not consulted
            span(cloud__region=""),  # both invalid: counted once
        ]),
        (attrs(service__name="c"), [span(cloud__region="a" * 64)]),
    ))  # fmt: skip
    assert batch.regions == ["pl", "eu-west-3", "EU-Central-1", "a" * 64]
    assert batch.region_id.tolist() == [0, 1, 1, 1, -1, 2, -1, 3]
    assert batch.counters == {"region_invalid": 4}


def test_service_name_must_be_a_non_empty_string(decode):
    batch = decode(request(
        (attrs(service__name=12), [span(), span()]),
        (attrs(), [span()]),
        (attrs(service__name=""), [span()]),
        (attrs(service__name="unknown_service"), [span()]),  # a real name that happens to match
        (attrs(service__name="Cart"), [span()]),
        (attrs(service__name="idle"), []),  # no spans: never interned
        (attrs(service__name="Cart", service__name_x="y"), [span()]),
    ))  # fmt: skip
    assert batch.services == ["unknown_service", "Cart"]  # kept as sent; the scorer lowercases
    assert batch.service_id.tolist() == [0, 0, 0, 0, 0, 1, 1]
    assert batch.counters == {"service_name_invalid": 4}


def test_repeated_attribute_keys_keep_the_last_value(decode):
    s = span(CLIENT)
    s.attributes.extend(attrs(db__system="pg", db__statement="SELECT 1"))
    s.attributes.extend(attrs(db__statement="INSERT INTO t"))
    assert decode(one(s)).op_class.tolist() == [OP_SQL_INSERT]


def test_timestamps(decode):
    batch = decode(one(
        span(start=T0, end=T0 + 250),
        span(start=T0, end=T0 - 1),  # end before start: duration 0, start kept
        span(start=0, end=T0),  # absurd start: start 0 (the scorer uses its clock)
        span(start=MAX_TIMESTAMP_NS, end=MAX_TIMESTAMP_NS + 5),  # beyond year 2200
        span(start=MAX_TIMESTAMP_NS - 1, end=MAX_TIMESTAMP_NS - 1),  # the last sane instant
        span(start=T0, end=2**64 - 1),  # absurd end: duration 0
    ))  # fmt: skip
    assert batch.start_ns.tolist() == [T0, T0, 0, 0, MAX_TIMESTAMP_NS - 1, T0]
    assert batch.duration_ns.tolist() == [250, 0, 0, 0, 0, 0]
    assert batch.counters == {"end_before_start": 1, "timestamp_absurd": 3}


def test_invalid_trace_ids_reject_the_span(decode):
    batch = decode(one(
        span(trace_id=b""), span(trace_id=bytes(16)), span(trace_id=b"\x01" * 15), span(name="kept"),
    ))  # fmt: skip
    assert len(batch) == 1 and batch.endpoints == ["kept"]
    assert batch.rejected == 3 and batch.counters == {"trace_id_invalid": 3}


def test_a_root_span_has_no_parent_and_an_invalid_parent_is_counted_not_a_root(decode):
    """No parent id: a root. A parent id of 8 bytes (not all zero) is a child; one of another
    length or all zero is not a valid span id (OTLP): counted, kept, and not a root. A span
    rejected for its trace id counts only trace_id_invalid."""
    batch = decode(one(
        span(name="root"), span(name="child", parent=b"\x5a" * 8), span(name="zero", parent=bytes(8)),
        span(name="short", parent=b"\x01" * 7), span(name="long", parent=b"\x01" * 16),
        span(name="child2", parent=b"\x00" * 7 + b"\x01"), span(name="gone", trace_id=b"", parent=bytes(3)),
    ))  # fmt: skip
    assert batch.endpoints == ["root", "child", "zero", "short", "long", "child2"]
    assert batch.is_root.tolist() == [True, False, False, False, False, False]
    assert batch.counters == {"parent_span_id_invalid": 3, "trace_id_invalid": 1}
    assert batch.rejected == 1


def test_trace_lo_is_the_low_64_bits_and_entries_are_server_or_consumer(decode):
    batch = decode(one(*(span(kind=k) for k in (0, 1, 2, 3, 4, 5))))
    assert batch.trace_lo.tolist() == [0x090A0B0C0D0E0F10] * 6  # bytes 9..16, big-endian
    assert batch.is_entry.tolist() == [False, False, True, False, False, True]


def test_tables_are_in_first_use_order(decode):
    batch = decode(request(
        (attrs(service__name="b", cloud__region="r2"), [span(name="y"), span(name="x", cloud__region="r1")]),
        (attrs(service__name="a"), [span(name="x", cloud__region="r2"), span(name="")]),
    ))  # fmt: skip
    assert (batch.services, batch.regions, batch.endpoints) == (["b", "a"], ["r2", "r1"], ["y", "x", ""])
    assert batch.endpoint_id.tolist() == [0, 1, 1, 2]
    assert batch.region_id.tolist() == [0, 1, 0, -1]


def test_a_message_traced_by_the_sdk_is_one_io_op(decode):
    """Real SDK spans: the message is published once (PRODUCER) and handled once (CONSUMER,
    in the producer's trace, as messaging instrumentations propagate it): one I/O op, one
    request. Before, the consumer counted it a second time."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.propagate import extract, inject
    from opentelemetry.sdk.resources import Resource as SdkResource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=SdkResource.create({"service.name": "orders"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.otlp")
    headers: dict[str, str] = {}
    with tracer.start_as_current_span("orders publish", kind=SpanKind.PRODUCER) as span:
        span.set_attributes({"messaging.system": "kafka", "messaging.destination.name": "orders"})
        inject(headers)
    with tracer.start_as_current_span("orders process", kind=SpanKind.CONSUMER, context=extract(headers)) as span:
        span.set_attributes({"messaging.system": "kafka", "messaging.destination.name": "orders"})
    provider.shutdown()
    batch = decode(encode_spans(exporter.get_finished_spans()).SerializeToString())
    assert batch.endpoints == ["orders publish", "orders process"]
    assert batch.op_class.tolist() == [OP_MESSAGING, OP_NONE]
    assert batch.is_entry.tolist() == [False, True]
    assert len(set(batch.trace_lo.tolist())) == 1
    assert batch.is_root.tolist() == [True, False]  # the SDK sets the consumer's parent
