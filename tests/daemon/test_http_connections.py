"""Connections cannot take the HTTP port, or its health endpoints, down (issue 12 item 1).

Each case is one the issue reproduced on a real agent with 128 as the connection cap: 130 idle
sockets, a slowloris, 128 ordinary SDK keep-alive connections (and, in test_auth_tls.py, 130
TLS connections that never handshake). Before, every one of them made the next connection,
``/healthz`` included, get 503 for as long as they were held. Now idle keep-alive connections
are evicted to make room, a request has one deadline for its head and body, and health is
answered on the event loop whatever the ingest load.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind

from bench.workload import make_request_bytes

CAP = 128


def _status(url: str, data: bytes | None = None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=data,
                                 headers={"Content-Type": "application/x-protobuf"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _connect(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]


def _close(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


@pytest.fixture(scope="module")
def agent(start_agent):
    return start_agent("--window-seconds", "60", env={
        "CARBONSPAN_MAX_CONNECTIONS": str(CAP), "CARBONSPAN_HTTP_REQUEST_TIMEOUT_S": "2"})


def test_130_idle_sockets_leave_health_and_ingest_up(agent) -> None:
    idle = _connect(agent.http_port, CAP + 2)
    try:
        time.sleep(0.3)  # let the agent accept all of them
        assert _status(f"{agent.http_url}/healthz")[0] == 200
        assert _status(f"{agent.http_url}/readyz")[0] == 200
        assert _status(f"{agent.http_url}/v1/traces", make_request_bytes(8))[0] == 200
        assert agent.metric("carbonspan_http_connections") <= CAP
    finally:
        _close(idle)
    assert agent.metric("carbonspan_http_connections_evicted_total", reason="idle") >= 3


def test_a_slowloris_is_cut_at_the_request_deadline_and_health_answers(agent) -> None:
    """130 connections sending a header line a byte at a time: each request has one deadline
    (2 s here) for its head and body, not 30 s per recv; health answers meanwhile."""
    before = agent.metric("carbonspan_http_request_timeouts_total")
    slow = _connect(agent.http_port, CAP + 2)
    try:
        for s in slow:
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            assert _status(f"{agent.http_url}/healthz")[0] == 200
            for s in slow[-20:]:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass  # evicted to make room for the health probe: as designed
            time.sleep(0.2)
        survivor = slow[-1]
        survivor.settimeout(6)
        answer = b""
        while b"\r\n\r\n" not in answer:  # the agent answers 408 at the deadline, then closes
            chunk = survivor.recv(4096)
            if not chunk:
                break
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"http_request_timeout_s" in answer
    finally:
        _close(slow)
    agent.wait_for(lambda: agent.metric("carbonspan_http_request_timeouts_total") >= before + 1,
                   timeout=10, what="the timeouts to be counted")


def test_a_body_trickled_in_is_cut_at_the_deadline_too(agent) -> None:
    s = socket.create_connection(("127.0.0.1", agent.http_port), timeout=8)
    try:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n")
        t0 = time.monotonic()
        answer = b""
        while time.monotonic() - t0 < 8 and not answer:
            try:
                s.sendall(b"{")  # one byte every 0.2 s: no single recv ever waits long
            except OSError:
                break
            s.settimeout(0.2)
            try:
                answer = s.recv(4096)
            except TimeoutError:
                pass
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert time.monotonic() - t0 < 6  # the 2 s deadline (checked every 0.25 s), not 30 s
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["code"] == 4  # DEADLINE_EXCEEDED
    finally:
        s.close()


def _exporter(url: str) -> tuple[OTLPSpanExporter, requests.Session]:
    session = requests.Session()
    session.trust_env = False
    return OTLPSpanExporter(endpoint=url, session=session, timeout=10), session


def _export_one(exporter: OTLPSpanExporter, service: str) -> SpanExportResult:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    results: list[SpanExportResult] = []

    class Keep:
        def export(self, spans):
            results.append(exporter.export(spans))
            return results[-1]

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    provider.add_span_processor(SimpleSpanProcessor(Keep()))
    with provider.get_tracer("t").start_as_current_span("GET /", kind=SpanKind.SERVER):
        pass
    provider.shutdown()
    return results[0]


def test_128_sdk_keep_alive_connections_do_not_lock_out_the_next_client(agent) -> None:
    url = f"{agent.http_url}/v1/traces"
    clients = [_exporter(url) for _ in range(CAP)]
    try:
        assert {_export_one(e, "keepalive") for e, _ in clients} == {SpanExportResult.SUCCESS}
        assert agent.metric("carbonspan_http_connections") >= CAP - 1  # all held open
        assert _status(f"{agent.http_url}/healthz")[0] == 200
        newcomer, session = _exporter(url)
        assert _export_one(newcomer, "newcomer") == SpanExportResult.SUCCESS
        session.close()
        # the evicted clients reconnect by themselves (urllib3 sees the closed socket)
        assert {_export_one(e, "keepalive") for e, _ in clients[:8]} == {SpanExportResult.SUCCESS}
    finally:
        for _, s in clients:
            s.close()


def test_idle_keep_alive_connections_are_closed_after_the_idle_timeout(start_agent) -> None:
    agent = start_agent(env={"CARBONSPAN_HTTP_IDLE_TIMEOUT_S": "1"})
    s = socket.create_connection(("127.0.0.1", agent.http_port), timeout=5)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        assert s.recv(4096) == b""  # closed by the agent after 1 s idle (recv timeout 5 s)
    finally:
        s.close()
    assert agent.stop() == 0


def test_the_listen_backlog_is_the_os_maximum(agent) -> None:
    out = subprocess.run(["ss", "-ltnH", f"sport = :{agent.http_port}"], capture_output=True,
                         text=True, timeout=10, check=True).stdout.split()
    backlog = int(out[2])  # Send-Q of a listening socket is its backlog
    with open("/proc/sys/net/core/somaxconn") as fh:
        assert backlog == min(socket.SOMAXCONN, int(fh.read())) > 5


def test_with_nothing_to_evict_the_newcomer_is_closed_and_counted(start_agent) -> None:
    """Two connections whose requests are being handled (a slow WAL) fill a cap of 2: they are
    never evicted, and the third connection is closed at once, counted."""
    agent = start_agent(env={"CARBONSPAN_MAX_CONNECTIONS": "2",
                             "CARBONSPAN_ARCHIVE_WAL_FSYNC_DELAY_MS": "1500"})
    body = make_request_bytes(8)
    busy = _connect(agent.http_port, 2)
    try:
        for s in busy:
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf"
                      b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.5)
        extra = socket.create_connection(("127.0.0.1", agent.http_port), timeout=5)
        assert extra.recv(1) == b""  # closed, not served by an unbounded new thread
        extra.close()
        for s in busy:  # the two in flight are answered
            s.settimeout(10)
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        _close(busy)
    assert agent.metric("carbonspan_http_connections_refused_total") >= 1
    assert agent.stop() == 0
