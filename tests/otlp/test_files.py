"""read_trace_file on real files: JSON, NDJSON, protobuf, sniffed content, gzip, errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest
from google.protobuf.json_format import MessageToDict

import agent
from agent.batch import OP_HTTP, OP_MESSAGING, OP_SQL_INSERT, OP_SQL_SELECT, OP_SQL_UPDATE
from agent.otlp import (
    OtlpDecodeError,
    concat_batches,
    decode_json,
    decode_protobuf,
    read_trace_file,
)
from agent.otlp.reference import parse_request

EXAMPLE = Path(agent.__file__).parent / "examples" / "example-spans.otlp.json"


def _json_line(data: bytes) -> bytes:
    return orjson.dumps(MessageToDict(parse_request(data)))  # base64 ids, as proto3 JSON writes


def test_the_bundled_example_has_what_the_docs_promise():
    batch = read_trace_file(EXAMPLE)
    assert 35 <= len(batch) <= 45
    assert batch.services == ["frontend", "checkout", "cart", "payments"]
    assert set(batch.regions) == {"eu-west-3", "eu-central-1", "pl"}
    ops = set(batch.op_class.tolist())
    assert {OP_SQL_SELECT, OP_SQL_INSERT, OP_SQL_UPDATE, OP_HTTP, OP_MESSAGING} <= ops
    assert (batch.response_bytes[batch.op_class == OP_HTTP] > 0).all()
    assert batch.is_entry.any() and not batch.counters and batch.rejected == 0


def test_protobuf_files_by_suffix_and_by_content(tmp_path, sdk_request_bytes, assert_same):
    want = decode_protobuf(sdk_request_bytes)
    for name in ("spans.pb", "spans.bin", "spans.dat", "spans"):
        (tmp_path / name).write_bytes(sdk_request_bytes)
        assert_same(read_trace_file(tmp_path / name), want)
    (tmp_path / "spans.pb.gz").write_bytes(gzip.compress(sdk_request_bytes))
    assert_same(read_trace_file(str(tmp_path / "spans.pb.gz")), want)


def test_json_files_by_suffix_and_by_content(tmp_path, sdk_request_bytes, assert_same):
    want = decode_protobuf(sdk_request_bytes)
    text = _json_line(sdk_request_bytes)
    for name in ("spans.json", "spans.txt", "spans.otlp"):
        (tmp_path / name).write_bytes(b"\n  " + text)
        assert_same(read_trace_file(tmp_path / name), want)
    (tmp_path / "spans.json.gz").write_bytes(gzip.compress(text))
    assert_same(read_trace_file(tmp_path / "spans.json.gz"), want)


def test_ndjson_files_hold_one_request_per_line(tmp_path, workload, assert_same):
    parts = [workload.make_request_bytes(20, seed) for seed in range(3)]
    lines = b"\n".join(_json_line(p) for p in parts) + b"\n\n"
    want = concat_batches([decode_protobuf(p) for p in parts])
    for name in ("spans.ndjson", "spans.jsonl", "collector-export.json", "sniffed"):
        (tmp_path / name).write_bytes(lines)
        assert_same(read_trace_file(tmp_path / name), want)
    assert_same(want, decode_protobuf(b"".join(parts)))


def test_a_bad_line_names_the_file_and_line(tmp_path, sdk_request_bytes):
    good = _json_line(sdk_request_bytes)
    path = tmp_path / "spans.ndjson"
    path.write_bytes(good + b"\n\n" + good + b"\n" + b'{"resourceSpans": 3}\n')
    with pytest.raises(OtlpDecodeError, match=r"spans\.ndjson, line 4: resourceSpans: expected a list"):
        read_trace_file(path)
    path.write_bytes(good + b"\n{oops\n")
    with pytest.raises(OtlpDecodeError, match=r"spans\.ndjson, line 2: not valid JSON"):
        read_trace_file(path)


def test_bad_files_name_the_file(tmp_path):
    (tmp_path / "bad.pb").write_bytes(b"\x0a\x05\x12")
    with pytest.raises(OtlpDecodeError, match=r"bad\.pb: malformed OTLP ExportTraceServiceRequest"):
        read_trace_file(tmp_path / "bad.pb")
    (tmp_path / "bad.json").write_bytes(b'{"resourceSpans": [1]}')
    with pytest.raises(OtlpDecodeError, match=r"bad\.json: resourceSpans\[0\]: expected an object"):
        read_trace_file(tmp_path / "bad.json")
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(OtlpDecodeError, match="looks gzip-compressed but cannot be read"):
        read_trace_file(tmp_path / "bad.gz")
    with pytest.raises(FileNotFoundError):
        read_trace_file(tmp_path / "missing.json")


def test_an_empty_protobuf_file_is_an_empty_batch(tmp_path):
    (tmp_path / "empty.pb").write_bytes(b"")
    batch = read_trace_file(tmp_path / "empty.pb")
    assert len(batch) == 0 and batch.rejected == 0


def test_concat_of_nothing_and_of_one(sdk_request_bytes, assert_same):
    assert len(concat_batches([])) == 0
    one = decode_json(_json_line(sdk_request_bytes))
    assert_same(concat_batches([one]), one)
    two = concat_batches([one, one])
    assert two.services == one.services and two.rejected == 2 * one.rejected
    assert np.array_equal(two.service_id, np.concatenate([one.service_id] * 2))
