"""The protocol-neutral pieces of an export: bounded inflate and the hand-written wire messages."""

from __future__ import annotations

import gzip
import zlib

import pytest
from google.protobuf.duration_pb2 import Duration
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from agent.export import (
    MAX_GZIP_MEMBERS,
    BadEncoding,
    TooLarge,
    export_response_bytes,
    inflate,
    retry_info_bytes,
    status_bytes,
)

LIMIT = 4096


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=2 * LIMIT), enc=st.sampled_from(["gzip", "deflate", "raw", "identity"]))
def test_inflate_round_trips_or_refuses_past_the_limit(data: bytes, enc: str) -> None:
    if enc == "gzip":
        body, header = gzip.compress(data), "gzip"
    elif enc == "deflate":
        body, header = zlib.compress(data), "deflate"
    elif enc == "raw":  # raw deflate, as some clients send for "deflate"
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body, header = c.compress(data) + c.flush(), "deflate"
    else:
        body, header = data, "identity"
    if len(data) <= LIMIT:
        assert inflate(body, header, LIMIT) == data
    else:
        with pytest.raises(TooLarge):
            inflate(body, header, LIMIT)


@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(max_size=256), enc=st.sampled_from(["gzip", "deflate", "GZIP", " gzip "]))
def test_inflate_of_garbage_is_a_clear_error_or_bytes(garbage: bytes, enc: str) -> None:
    try:
        out = inflate(garbage, enc, LIMIT)
    except (BadEncoding, TooLarge) as exc:
        assert str(exc)
    else:
        assert len(out) <= LIMIT


def test_multi_member_gzip_and_unknown_encodings() -> None:
    assert inflate(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", LIMIT) == b"abcd"
    with pytest.raises(TooLarge):
        inflate(gzip.compress(b"a" * 3000) + gzip.compress(b"b" * 3000), "gzip", LIMIT)
    with pytest.raises(BadEncoding, match="'br' is not supported"):
        inflate(b"x", "br", LIMIT)
    with pytest.raises(BadEncoding, match="truncated"):
        inflate(gzip.compress(b"x" * 100)[:-12], "gzip", LIMIT)


def test_gzip_members_are_bounded_and_each_is_read_whole() -> None:
    # issue 12 item 3: each member used to be handed the whole rest of the body, which zlib
    # copies into unused_data at the member's end: 200,000 empty members (4 MB) took 24.5 s
    members = [gzip.compress(bytes([65 + i % 26]) * (i * 37 % 700)) for i in range(MAX_GZIP_MEMBERS)]
    assert inflate(b"".join(members), "gzip", 1 << 20) == b"".join(gzip.decompress(m) for m in members)
    with pytest.raises(BadEncoding, match=f"more than {MAX_GZIP_MEMBERS} members"):
        inflate(gzip.compress(b"") * 200_000, "gzip", 1 << 20)
    big = gzip.compress(bytes(range(256)) * 12_000)  # one member fed in growing slices
    assert inflate(gzip.compress(b"x") + big, "gzip", 4 << 20) == b"x" + bytes(range(256)) * 12_000
    with pytest.raises(BadEncoding, match="truncated"):  # a second member cut short
        inflate(gzip.compress(b"ab") + big[:-9], "gzip", 4 << 20)


@given(seconds=st.integers(0, 10**6))
def test_retry_info_is_what_the_otel_exporter_parses(seconds: int) -> None:
    assert RetryInfo.FromString(retry_info_bytes(seconds)).retry_delay == Duration(seconds=seconds)


@given(code=st.integers(0, 16), message=st.text(max_size=200), seconds=st.integers(0, 10**6))
def test_status_with_retry_info_is_what_grpc_rich_errors_parse(code: int, message: str, seconds: int) -> None:
    """The grpc-status-details-bin trailer: Status{code, message, details: [Any(RetryInfo)]},
    as the Collector's exporter and the Go SDK unpack it."""
    status = status_pb2.Status.FromString(status_bytes(code, message, retry_info_bytes(seconds)))
    assert (status.code, status.message, len(status.details)) == (code, message, 1)
    info = RetryInfo()
    assert status.details[0].Unpack(info) and info.retry_delay == Duration(seconds=seconds)
    assert not status_pb2.Status.FromString(status_bytes(code, message)).details


@given(rejected=st.integers(0, 2**62), message=st.text(max_size=200))
def test_export_response_and_status_match_the_protobuf_classes(rejected: int, message: str) -> None:
    resp = ExportTraceServiceResponse.FromString(export_response_bytes(rejected, message))
    assert resp.partial_success.rejected_spans == rejected
    assert resp.partial_success.error_message == message
    st_ = status_pb2.Status.FromString(status_bytes(3, message))
    assert (st_.code, st_.message) == (3, message)
    assert export_response_bytes(0, "") == b""  # a full success is the empty message
