"""A real overload: queue of one request and a slow WAL (``wal_fsync_delay_ms``).

While one request waits on its group commit, the next is refused with 429 + Retry-After (HTTP)
or RESOURCE_EXHAUSTED + RetryInfo (gRPC). The SDK's exporters then back off and retry, and in
the end every span they sent is archived: refused is never dropped.
"""

from __future__ import annotations

import signal
import threading
import urllib.error
import urllib.request

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from bench.workload import make_request_bytes

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture(scope="module")
def agent(start_agent):
    return start_agent(
        "--window-seconds", "60",
        config="[agent]\nqueue_size = 1\nretry_after_s = 1\n[agent.archive]\nwal_fsync_delay_ms = 1000\n",
    )


def _hold_the_queue(agent) -> tuple[threading.Thread, list]:
    """Start one gRPC export that occupies the only queue slot for ~1 s."""
    result: list = []
    channel = grpc.insecure_channel(agent.grpc_target)
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)

    def run() -> None:
        result.append(call(make_request_bytes(16, seed=1), timeout=30))
        channel.close()

    t = threading.Thread(target=run)
    t.start()
    agent.wait_for(lambda: agent.metric("carbonspan_queue_depth") >= 1, timeout=10,
                   what="the first request to occupy the queue")
    return t, result


def test_http_gets_429_with_retry_after_while_queue_is_full(agent) -> None:
    t, result = _hold_the_queue(agent)
    req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=make_request_bytes(4, seed=2),
                                 headers={"Content-Type": "application/x-protobuf"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    t.join(timeout=30)
    assert info.value.code == 429 and info.value.headers["Retry-After"] == "1"
    assert result == [b""]  # the request holding the slot was answered OK


def test_grpc_gets_resource_exhausted_with_retry_info(agent) -> None:
    t, result = _hold_the_queue(agent)
    channel = grpc.insecure_channel(agent.grpc_target)
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as info:
        call(make_request_bytes(4, seed=3), timeout=10)
    channel.close()
    t.join(timeout=30)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "queue is full" in info.value.details()
    trailers = dict(info.value.trailing_metadata())
    assert RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds == 1
    assert result == [b""]


def test_sdk_exporters_back_off_and_nothing_is_lost(agent) -> None:
    before = agent.metric("carbonspan_requests_total", protocol="grpc", outcome="exhausted")

    def service(name: str) -> None:
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(SimpleSpanProcessor(
            GrpcExporter(endpoint=agent.grpc_target, insecure=True, timeout=30)))
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("GET /", kind=SpanKind.SERVER):
            pass
        provider.shutdown()

    threads = [threading.Thread(target=service, args=(f"bp-{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert agent.metric("carbonspan_requests_total", protocol="grpc", outcome="exhausted") > before


def test_sigterm_drains_in_flight_requests_and_archives_them(agent) -> None:
    t, result = _hold_the_queue(agent)  # in the WAL's slow fsync for ~1 s
    agent.proc.send_signal(signal.SIGTERM)

    def readyz() -> int:
        try:
            with urllib.request.urlopen(f"{agent.http_url}/readyz", timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code

    assert agent.wait_for(lambda: readyz() == 503, timeout=10, what="/readyz to say draining")
    t.join(timeout=30)
    assert result == [b""]  # admitted before the signal: answered OK during the drain
    assert agent.proc.wait(timeout=30) == 0
    requests: dict[str, int] = {}
    spans = 0
    for rec in agent.records():
        spans += rec["report"]["window"]["spans"]
        for svc, n in rec["report"]["green_summary"]["per_service_requests"].items():
            requests[svc] = requests.get(svc, 0) + n
    assert {k: v for k, v in requests.items() if k.startswith("bp-")} == {f"bp-{i}": 1 for i in range(3)}
    assert spans == 3 * 16 + 3  # three 16-span requests that held the queue + the SDK's spans
