"""Start-up recovery never crashes on what it reads (issue 12 item 7): a last archive line nested
1,000 levels deep (valid for orjson) made the agent exit 1 at start with RecursionError."""

from __future__ import annotations

from pathlib import Path

import grpc
import orjson

from agent.archive import ArchiveWriter, _check_line, window_files
from bench.workload import make_request_bytes
from schema.chain import verify_chain

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _deep_record_line(depth: int = 1000) -> bytes:
    """A chained-looking record whose report nests ``depth`` lists: orjson reads it (its limit
    is 1024 levels), canonical JSON cannot hold it (254), so its hash can never verify."""
    nested = b"[" * depth + b"]" * depth
    return (b'{"hash":"sha256:00","prev":"sha256:00","report":{"window":{"start":"2026-11-10T00:00:00Z"},'
            b'"x":' + nested + b'},"seq":7,"ts":"2026-11-10T00:01:00Z"}')


def test_a_deeply_nested_line_is_refused_with_a_reason_not_a_recursion_error() -> None:
    raw = _deep_record_line()
    assert isinstance(orjson.loads(raw), dict)  # valid JSON for orjson
    rec, why = _check_line(raw)
    assert rec is None and "nested deeper than 254 levels" in why


def test_recovery_moves_a_deep_last_line_aside_and_names_why(tmp_path: Path) -> None:
    writer = ArchiveWriter(tmp_path)
    writer.open()
    writer.append({"window": {"start": "2026-11-10T00:00:00Z"}}, ts="2026-11-10T00:01:00Z")
    writer.close()
    path = window_files(tmp_path)[-1]
    good = path.read_bytes()
    path.write_bytes(good + _deep_record_line() + b"\n")
    again = ArchiveWriter(tmp_path)
    rec = again.open()
    again.close()
    assert rec.last_seq == 0 and path.read_bytes() == good
    assert rec.corrupt_file is not None and rec.corrupt_file.read_bytes() == _deep_record_line() + b"\n"
    assert "nested deeper than 254 levels" in rec.corrupt_reason


def test_agent_starts_on_a_deep_last_line_moves_it_aside_and_says_so(start_agent) -> None:
    agent = start_agent("--window-seconds", "60")
    channel = grpc.insecure_channel(agent.grpc_target)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    export(make_request_bytes(64, seed=1), timeout=10)
    channel.close()
    assert agent.stop() == 0
    path = window_files(agent.dir)[-1]
    good = path.read_bytes()
    deep = _deep_record_line() + b"\n"
    path.write_bytes(good + deep)

    again = start_agent("--window-seconds", "60", root=agent.root)  # wait_ready: it is serving
    channel = grpc.insecure_channel(again.grpc_target)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    export(make_request_bytes(64, seed=2), timeout=10)
    channel.close()
    assert again.stop() == 0
    err = "".join(again.stderr_text())
    assert "RecursionError" not in err and "Traceback" not in err
    assert "unreadable tail" in err and "nested deeper than 254 levels" in err and "moved to" in err
    corrupt = list(again.dir.glob("*.corrupt"))
    assert len(corrupt) == 1 and corrupt[0].read_bytes() == deep
    records = again.records()
    findings, _, count = verify_chain((str(i), r) for i, r in enumerate(records))
    assert findings == [] and count == 2  # the chain goes on from the last good record


def test_a_deep_last_line_of_a_compressed_file_is_left_for_verify_and_the_chain_goes_on(tmp_path: Path) -> None:
    import gzip

    writer = ArchiveWriter(tmp_path)
    writer.open()
    for i in range(2):
        writer.append({"window": {"start": f"2026-11-10T00:0{i}:00Z"}}, ts="2026-11-10T00:01:00Z")
    writer.close()
    path = window_files(tmp_path)[-1]
    gz = path.with_name(path.name + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes() + _deep_record_line() + b"\n"))
    path.unlink()
    again = ArchiveWriter(tmp_path)
    rec = again.open()  # this raised ArchiveError (and RecursionError before that): no start
    assert rec.last_seq == 1 and rec.skipped_lines == 1
    assert gz.name in rec.skipped_reason and "nested deeper than 254 levels" in rec.skipped_reason
    again.append({"window": {"start": "2026-11-10T00:02:00Z"}}, ts="2026-11-10T00:03:00Z")
    again.close()
    records = []
    for p in window_files(tmp_path):
        for line in gzip.decompress(p.read_bytes()).splitlines() if p.name.endswith(".gz") else p.read_bytes().splitlines():
            rec2, _ = _check_line(line)
            records.append((p.name, rec2))
    findings, _, count = verify_chain(records)
    # the deep line is the one finding, and the appended line follows the last good record
    assert [f.kind for f in findings] == ["malformed"] and count == 4
