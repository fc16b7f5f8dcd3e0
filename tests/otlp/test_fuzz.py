"""Hostile bytes never crash the C decoder: it returns a sane batch or raises OtlpDecodeError.

Inputs are mutations of real requests (the OpenTelemetry SDK's own encoding and the bench
workload): truncations, byte flips, inserted and deleted runs, forged lengths and varints.
Where the protobuf runtime also accepts the mutated bytes, both decoders must agree.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from byte_fuzz import mutate

from agent.batch import OP_CLASS_COUNT, SpanBatch
from agent.otlp import OtlpDecodeError
from agent.otlp.fast import decode_protobuf_fast
from agent.otlp.reference import decode_protobuf_reference
from agent.otlp.rules import MAX_TIMESTAMP_NS


def _check_sane(batch: SpanBatch) -> None:
    n = len(batch)
    for name in ("region_id", "endpoint_id", "op_class", "response_bytes", "start_ns",
                 "duration_ns", "trace_lo", "is_entry", "is_root"):  # fmt: skip
        assert getattr(batch, name).shape == (n,), name
    if n:
        assert 0 <= batch.service_id.min() and batch.service_id.max() < len(batch.services)
        assert -1 <= batch.region_id.min() and batch.region_id.max() < len(batch.regions)
        assert 0 <= batch.endpoint_id.min() and batch.endpoint_id.max() < len(batch.endpoints)
        assert batch.op_class.max() < OP_CLASS_COUNT
        assert batch.duration_ns.min() >= 0
        assert batch.start_ns.min() >= 0 and batch.start_ns.max() < MAX_TIMESTAMP_NS
    assert all(isinstance(s, str) for s in batch.services + batch.regions + batch.endpoints)
    assert batch.rejected >= 0 and all(v > 0 for v in batch.counters.values())


def _decode_or_error(data: bytes) -> SpanBatch | None:
    try:
        batch = decode_protobuf_fast(data)
    except OtlpDecodeError as exc:
        assert " at byte " in str(exc)
        return None
    _check_sane(batch)
    return batch


def test_mutated_requests_never_crash(sdk_request_bytes, workload, assert_same):
    rng = random.Random(20260310)
    seeds = [sdk_request_bytes, workload.make_request_bytes(12, seed=1)]
    decoded = agreed = 0
    for i in range(2000):
        data = mutate(rng, seeds[i % 2])
        batch = _decode_or_error(data)
        if batch is None:
            continue
        decoded += 1
        try:
            want = decode_protobuf_reference(data)
        except OtlpDecodeError:
            continue  # e.g. a broken message inside a field the fast decoder skips unread
        assert_same(batch, want)
        agreed += 1
    print(f"{decoded} of 2000 mutations decoded, {agreed} also by the protobuf runtime")
    assert decoded > 100 and agreed > 50  # the mutations exercise both outcomes


def test_every_truncation_is_an_error_or_a_prefix(sdk_request_bytes):
    for end in range(len(sdk_request_bytes)):
        _decode_or_error(sdk_request_bytes[:end])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x0a\x02\x12\x03", "truncated length-delimited field (3 bytes declared, 0 left) at byte 2 in resource_spans[0]"),
        (b"\x0a" + b"\xff" * 11, "varint longer than 10 bytes at byte 1 in the request"),
        (b"\x0a\xff\xff\xff\xff\x0f", "truncated length-delimited field (4294967295 bytes declared, 0 left) at byte 0 in the request"),
        (b"\x0b\x0c", "unsupported group wire type 3 at byte 0 in the request"),
        (b"\x00", "invalid field number 0 at byte 0 in the request"),
        (b"\x0f", "invalid wire type 7 at byte 0"),
        (b"\x0a\x04\x12\x02\x12\x80", "truncated varint at byte 5 in resource_spans[0].scope_spans[0]"),
        (b"\x0a\x06\x12\x04\x12\x02\x39\x00", "truncated 64-bit field at byte 7 in resource_spans[0].scope_spans[0].spans[0]"),
    ],
)
def test_malformed_bytes_say_what_and_where(data, message):
    with pytest.raises(OtlpDecodeError, match="malformed OTLP ExportTraceServiceRequest") as info:
        decode_protobuf_fast(data)
    assert message in str(info.value)


def test_error_path_names_the_attribute(workload):
    """A broken attribute deep in the second resource is located by index."""
    data = workload.make_request(8, seed=3)
    assert len(data.resource_spans) >= 2
    data.resource_spans[1].scope_spans[0].spans[0].attributes[0].key = "the-marked-key"
    raw = data.SerializeToString()
    marker = raw.find(b"\x0a\x0ethe-marked-key")  # the key field: its length now runs past the end
    assert marker > 0
    broken = raw[:marker] + b"\x0a\x7f" + raw[marker + 2 :]
    with pytest.raises(OtlpDecodeError) as info:
        decode_protobuf_fast(broken)
    assert "resource_spans[1].scope_spans[0].spans[0].attributes[0]" in str(info.value)


def test_many_distinct_strings_intern_in_first_use_order(workload, assert_same):
    """Thousands of span names grow the C hash tables; ids stay in first-use order."""
    request = workload.make_request(3000, seed=4)
    for rs in request.resource_spans:
        for i, span in enumerate(rs.scope_spans[0].spans):
            span.name = f"op {i % 1700} {rs.resource.attributes[0].value.string_value}"
    data = request.SerializeToString()
    got = decode_protobuf_fast(data)
    assert len(got.endpoints) > 2000
    assert_same(got, decode_protobuf_reference(data))
    first_use = list(dict.fromkeys(np.array(got.endpoints)[got.endpoint_id].tolist()))
    assert first_use == got.endpoints


def test_invalid_utf8_in_a_span_name_is_an_error(sdk_request_bytes):
    name = b"\x0a\x08GET /cart"[2:]
    at = sdk_request_bytes.find(name)
    assert at > 0
    broken = sdk_request_bytes[:at] + b"\xff" + sdk_request_bytes[at + 1 :]
    with pytest.raises(OtlpDecodeError, match="invalid UTF-8 in a span name"):
        decode_protobuf_fast(broken)
