"""A write-ahead log that fails (the disk fills up) never makes the agent count a batch twice.

The agent runs with RLIMIT_FSIZE, so once ``agent.wal`` passes the limit its writes fail with
EFBIG, exactly as on a full disk. The request whose group commit failed is answered
UNAVAILABLE, so its client retries it; the agent must therefore not have merged it into the
window it archives on shutdown, nor replay it after a restart. The rule checked: archived
spans = spans the client saw acknowledged, before and after the retry.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import grpc
import pytest

from agent.wal import read_records as read_wal
from bench.workload import make_request_bytes
from schema.chain import verify_chain

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SPANS = 64
LIMIT = 24 * 1024  # ~16 WAL records of a 64-span request fit; the window line (~5 KB) too


def _archived(agent) -> int:
    records = agent.records()
    findings, _, count = verify_chain((str(i), r) for i, r in enumerate(records))
    assert findings == [] and [r["seq"] for r in records] == list(range(count))
    return sum(r["report"]["window"]["spans"] for r in records)


def test_failed_wal_write_is_not_counted_and_the_retry_is_counted_once(start_agent) -> None:
    agent = start_agent("--window-seconds", "60", max_file_bytes=LIMIT)
    channel = grpc.insecure_channel(agent.grpc_target)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    acked = 0
    refused: bytes | None = None
    for i in range(200):  # bounded: the limit is reached after ~16 requests
        body = make_request_bytes(SPANS, seed=i)
        try:
            export(body, timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc.details()
            assert "write-ahead log" in exc.details() and "retry" in exc.details()
            refused = body
            break
        acked += SPANS
    assert refused is not None and acked >= SPANS, "the WAL never hit the file-size limit"
    # the agent says it cannot acknowledge anything any more, and keeps serving the answer
    with pytest.raises(grpc.RpcError) as again:
        export(refused, timeout=10)
    assert again.value.code() == grpc.StatusCode.UNAVAILABLE
    channel.close()
    with pytest.raises(urllib.error.HTTPError) as ready:
        urllib.request.urlopen(f"{agent.http_url}/readyz", timeout=5)
    assert ready.value.code == 503
    assert ready.value.read() == b"not ready: the agent is not writing its write-ahead log (see its log)\n"
    # and it is no longer live: a liveness probe on /healthz restarts it (once the disk is fixed)
    with pytest.raises(urllib.error.HTTPError) as live:
        urllib.request.urlopen(f"{agent.http_url}/healthz", timeout=5)
    assert live.value.code == 503 and b"restart the agent" in live.value.read()
    assert agent.metric("carbonspan_spans_accepted_total") == acked
    assert agent.stop() == 0
    assert _archived(agent) == acked  # the refused batches are not in the archived window
    # the failed group commit was cut back off the log: only acknowledged records remain whole
    records, good = read_wal(agent.dir / "agent.wal")
    assert good == (agent.dir / "agent.wal").stat().st_size and len(records) == acked // SPANS
    log = "".join(agent.stderr_text())
    assert "could not make durable" in log
    assert "agent.wal failed ([Errno 27] File too large)" in log  # the cause, for the operator

    # the disk is fixed, the agent restarts, and the client's retry lands exactly once
    fixed = start_agent("--window-seconds", "60", root=agent.root)
    assert "0 partials replayed" in fixed.startup_line
    with urllib.request.urlopen(f"{fixed.http_url}/healthz", timeout=5) as resp:
        assert resp.status == 200
    channel = grpc.insecure_channel(fixed.grpc_target)
    channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)(
        refused, timeout=10)
    channel.close()
    assert fixed.stop() == 0
    assert _archived(fixed) == acked + SPANS


def test_window_that_cannot_be_archived_at_stop_is_archived_on_the_next_start(start_agent) -> None:
    """The archive's disk is full at shutdown (window line over the file-size limit, WAL
    records under it): exit 1 with a message saying where the spans are, and the next start
    archives them from the WAL. Nothing acknowledged is lost."""
    agent = start_agent("--window-seconds", "60", max_file_bytes=4096)
    channel = grpc.insecure_channel(agent.grpc_target)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    for i in range(2):  # two ~1.4 KB WAL records fit; the window line (> 4 KB) does not
        export(make_request_bytes(SPANS, seed=i), timeout=10)
    channel.close()
    assert agent.stop() == 1
    log = "".join(agent.stderr_text())
    assert "could not archive the open window on the way out" in log and "agent.wal" in log
    assert agent.records() == []
    fixed = start_agent("--window-seconds", "60", root=agent.root)
    assert "2 partials replayed" in fixed.startup_line
    assert fixed.stop() == 0
    assert _archived(fixed) == 2 * SPANS
