"""The HTTP port serves at most ``max_connections`` connections (one thread each).

Two idle keep-alive sockets take both slots of an agent started with
``CARBONSPAN_MAX_CONNECTIONS=2``; the next client is told 503 with ``Retry-After`` and a
message naming the setting (not left hanging, not served by an unbounded new thread). Once the
idle sockets close, the port serves again, and /metrics counts the refusals.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from bench.workload import make_request_bytes


def _status(url: str, data: bytes | None = None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=data,
                                 headers={"Content-Type": "application/x-protobuf"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_connections_past_the_cap_get_503_and_the_port_recovers(start_agent) -> None:
    agent = start_agent(env={"CARBONSPAN_MAX_CONNECTIONS": "2", "CARBONSPAN_RETRY_AFTER_S": "3"})
    idle = [socket.create_connection(("127.0.0.1", agent.http_port), timeout=5) for _ in range(2)]
    try:
        status, headers, body = agent.wait_for(
            lambda: (r := _status(f"{agent.http_url}/healthz"))[0] == 503 and r,
            timeout=10, what="the third connection to be refused")
        assert headers["Retry-After"] == "3" and headers["Connection"] == "close"
        assert b"limit of 2 HTTP connections (max_connections)" in body
        status, headers, body = _status(f"{agent.http_url}/v1/traces", make_request_bytes(8))
        assert status == 503 and headers["Content-Type"] == "application/x-protobuf"
        assert b"max_connections" in body  # a google.rpc.Status, in the request's type
    finally:
        for s in idle:
            s.close()
    agent.wait_for(lambda: _status(f"{agent.http_url}/healthz")[0] == 200, timeout=10,
                   what="the port to serve again once the idle connections closed")
    assert agent.metric("carbonspan_http_connections_refused_total") >= 2
    assert _status(f"{agent.http_url}/v1/traces", make_request_bytes(8))[0] == 200
    assert agent.stop() == 0


def test_replies_are_not_held_back_by_nagle() -> None:
    # a reply is two writes (headers, body); with Nagle the body waits for the client's delayed
    # ACK, ~40 ms per request (bench ingest --http-json measures it: p50 52 ms -> 18 ms)
    from agent.server_http import _Handler

    assert _Handler.disable_nagle_algorithm is True
