"""Every export answer names the worker that took it (docs/operations.md, Workers): gRPC in the
trailing metadata ``carbonspan-worker: k/N <id>-w<k>`` (OK and refusals alike), HTTP in the
``Carbonspan-Worker`` header; a single agent (no workers) names none."""

from __future__ import annotations

import urllib.error
import urllib.request

import grpc

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _grpc_call(target: str, body: bytes) -> tuple[grpc.StatusCode, dict[str, str]]:
    """One Export on a new channel (a new connection, so the kernel picks a worker again)."""
    with grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        call = ch.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        try:
            _, info = call.with_call(body, timeout=10)
            return grpc.StatusCode.OK, dict(info.trailing_metadata() or ())
        except grpc.RpcError as exc:
            return exc.code(), dict(exc.trailing_metadata() or ())


def _http_post(url: str, body: bytes) -> tuple[int, str | None]:
    req = urllib.request.Request(f"{url}/v1/traces", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Carbonspan-Worker")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Carbonspan-Worker")


def test_grpc_and_http_export_answers_name_the_worker(start_agent) -> None:
    agent = start_agent("--workers", "2")
    expected = {f"{k}/2 test-agent-w{k}" for k in (0, 1)}
    grpc_seen: set[str] = set()
    http_seen: set[str] = set()
    for _ in range(100):  # each call is a new connection; the kernel picks the worker
        code, trailers = _grpc_call(agent.grpc_target, b"")  # an empty request: OK, 0 spans
        assert code is grpc.StatusCode.OK
        grpc_seen.add(trailers["carbonspan-worker"])
        status, who = _http_post(agent.http_url, b"{}")
        assert status == 200
        http_seen.add(who)
        if grpc_seen == http_seen == expected:
            break
    assert grpc_seen == expected
    assert http_seen == expected
    # a refusal names its worker too (a body that is not protobuf: INVALID_ARGUMENT; not JSON: 400)
    code, trailers = _grpc_call(agent.grpc_target, b"\xff\xff\xff")
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert trailers["carbonspan-worker"] in expected
    status, who = _http_post(agent.http_url, b"not json")
    assert status == 400 and who in expected
    assert agent.stop() == 0


def test_a_single_agent_names_no_worker(start_agent) -> None:
    agent = start_agent()
    code, trailers = _grpc_call(agent.grpc_target, b"")
    assert code is grpc.StatusCode.OK and "carbonspan-worker" not in trailers
    status, who = _http_post(agent.http_url, b"{}")
    assert status == 200 and who is None
    assert agent.stop() == 0
