"""A gRPC client's deadline bounds what the agent counts (a real agent, a real grpcio client).

On a slow disk (the testing-only ``wal_fsync_delay_ms``: 1 s per group commit) four gRPC
threads each wait through a commit while the other calls wait for a thread. Before the fix a
call that waited past its client's deadline was still decoded, logged and merged when a thread
took it, and answered OK to a client that had given up with DEADLINE_EXCEEDED and would send
the batch again: measured, 11 calls archived (352 spans) of which 4 were acknowledged. Now a
call taken after its deadline is refused with nothing counted, and one whose commit is not
durable ``DEADLINE_MARGIN_S`` before its deadline is abandoned (answered UNAVAILABLE, its
record named void): what is archived is exactly what was acknowledged.
"""

from __future__ import annotations

import threading
from collections import Counter

import grpc

from bench.workload import make_request_bytes

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SPANS = 32


def test_calls_past_their_deadline_are_never_counted(start_agent) -> None:
    agent = start_agent("--window-seconds", "600",
                        env={"CARBONSPAN_ARCHIVE_WAL_FSYNC_DELAY_MS": "1000"})
    outcomes: list[str] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        with grpc.insecure_channel(agent.grpc_target) as channel:
            export = channel.unary_unary(EXPORT, request_serializer=None,
                                         response_deserializer=None)
            try:
                export(make_request_bytes(SPANS, seed=i), timeout=3)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
        with lock:
            outcomes.append(code)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    got = Counter(outcomes)
    assert sum(got.values()) == 40
    assert 0 < got["OK"] < 40, got  # the disk was slow enough for some to miss their deadline
    refused = (agent.metric("carbonspan_requests_total", protocol="grpc", outcome="deadline")
               + agent.metric("carbonspan_requests_total", protocol="grpc", outcome="unavailable"))
    assert refused == 40 - got["OK"], got  # every call the client did not see succeed
    assert agent.stop() == 0
    archived = sum(r["report"]["window"]["spans"] for r in agent.records())
    assert archived == SPANS * got["OK"], got  # nothing counted that the client will resend
