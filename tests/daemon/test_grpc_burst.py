"""A burst of gRPC exports beyond the queue: every refusal is the handler's own, with RetryInfo.

The OTLP rule is that a client retries RESOURCE_EXHAUSTED only when it carries RetryInfo; the
Collector and the Go SDK read it from the status details. Before the handler could answer, a
burst larger than its few threads queued inside gRPC core, whose concurrency cap refuses with a
bare RESOURCE_EXHAUSTED ("Concurrent RPC limit exceeded") that those clients drop for good.
Here 8 simultaneous requests meet queue_size = 4 and one worker behind a slow WAL: every one
must be either accepted or refused with RetryInfo in its status details.
"""

from __future__ import annotations

import threading

import grpc
import pytest
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo

from bench.workload import make_request_bytes

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
BURST = 8


@pytest.fixture(scope="module")
def agent(start_agent):
    return start_agent("--window-seconds", "60", config=(
        "[agent]\nqueue_size = 4\ngrpc_workers = 1\nretry_after_s = 1\n"
        "[agent.archive]\nwal_fsync_delay_ms = 500\n"))


def test_a_burst_past_the_queue_is_refused_with_retry_info_only(agent) -> None:
    go = threading.Barrier(BURST)
    outcomes: list[grpc.RpcError | bytes] = []
    lock = threading.Lock()

    def export(seed: int) -> None:
        channel = grpc.insecure_channel(agent.grpc_target)
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        body = make_request_bytes(8, seed=seed)
        go.wait(timeout=10)
        try:
            result: grpc.RpcError | bytes = call(body, timeout=30)
        except grpc.RpcError as err:
            result = err
        finally:
            channel.close()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=export, args=(i,)) for i in range(BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(outcomes) == BURST
    refused = [o for o in outcomes if isinstance(o, grpc.RpcError)]
    assert refused and len(refused) < BURST  # the burst overflowed the queue, and was served
    for err in refused:
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
        details = dict(err.trailing_metadata() or ()).get("grpc-status-details-bin")
        assert details is not None, f"refused without status details: {err.details()!r}"
        status = status_pb2.Status.FromString(details)
        assert [d.Is(RetryInfo.DESCRIPTOR) for d in status.details] == [True]
    exhausted = agent.metric("carbonspan_requests_total", protocol="grpc", outcome="exhausted")
    assert exhausted == len(refused)  # every refusal was the handler's, counted


def test_a_2000_rpc_burst_gets_only_retryable_refusals(start_agent) -> None:
    """issue 12 item 10: a 2,000-RPC burst past gRPC core's concurrency cap got 14-239 bare
    RESOURCE_EXHAUSTED ("Concurrent RPC limit exceeded!", no RetryInfo: the Collector and the
    Go SDK drop the batch) and 112-155 CANCELLED. Every answer must now be OK, RESOURCE_EXHAUSTED
    with RetryInfo in its status details, or UNAVAILABLE."""
    agent = start_agent("--window-seconds", "60", config=(
        "[agent]\nqueue_size = 8\ngrpc_workers = 2\n[agent.archive]\nwal_fsync_delay_ms = 20\n"))
    channels = [grpc.insecure_channel(agent.grpc_target) for _ in range(4)]
    calls = [c.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
             for c in channels]
    bodies = [make_request_bytes(64, seed=s) for s in range(8)]
    calls[0](bodies[0], timeout=30)
    futures = [calls[i % 4].future(bodies[i % 8], timeout=60) for i in range(2000)]
    seen: dict[str, int] = {}
    accepted = 0
    for f in futures:
        try:
            f.result()
            accepted += 1
            continue
        except grpc.RpcError as err:
            code = err.code()
            details = dict(err.trailing_metadata() or ()).get("grpc-status-details-bin")
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                assert details is not None, f"bare RESOURCE_EXHAUSTED: {err.details()!r}"
                status = status_pb2.Status.FromString(details)
                assert [d.Is(RetryInfo.DESCRIPTOR) for d in status.details] == [True]
            else:
                assert code == grpc.StatusCode.UNAVAILABLE, (code, err.details())
            seen[code.name] = seen.get(code.name, 0) + 1
    for c in channels:
        c.close()
    assert accepted > 0 and seen.get("RESOURCE_EXHAUSTED", 0) > 0  # the burst did overflow
    assert agent.metric("carbonspan_requests_total", protocol="grpc", outcome="exhausted") == \
        seen.get("RESOURCE_EXHAUSTED", 0)
    assert agent.stop() == 0
