"""Clients the issue-12 attacks did not name, on a real agent: thousands of pipelined requests
in one write, a client that never reads its answers, and a head of thousands of repeated
headers. Each broke the HTTP layer before: a RecursionError reset the pipelined connection
after a few hundred answers, the unread answers piled up in the agent's memory without bound
(one connection sending 4 MiB of ``GET /metrics``: about 7 MB of RSS a second, for as long as
it was held) and 16,000 empty repeated headers cost quadratic time on the event loop."""

from __future__ import annotations

import re
import socket
import urllib.request
from pathlib import Path

import pytest

PIPELINED = 5000


@pytest.fixture(scope="module")
def agent(start_agent):
    return start_agent("--window-seconds", "60", env={"CARBONSPAN_HTTP_REQUEST_TIMEOUT_S": "2"})


def _healthz(agent) -> int:
    with urllib.request.urlopen(f"{agent.http_url}/healthz", timeout=10) as resp:
        return resp.status


def _peak_rss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1))


def _read_all(sock: socket.socket, cap: int) -> tuple[bytes, bool]:
    """What the connection sends until it ends (True) or ``cap`` bytes have come (False)."""
    out = bytearray()
    try:
        while len(out) < cap:
            data = sock.recv(65536)
            if not data:
                return bytes(out), True
            out += data
    except ConnectionResetError:
        return bytes(out), True
    return bytes(out), False


def test_thousands_of_pipelined_requests_in_one_write_are_all_answered(agent) -> None:
    with socket.create_connection(("127.0.0.1", agent.http_port), timeout=20) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * (PIPELINED - 1)
                     + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data, ended = _read_all(sock, 64 << 20)
    assert ended
    assert data.count(b"HTTP/1.1 200 OK\r\n") == PIPELINED
    assert _healthz(agent) == 200


def test_a_client_that_never_reads_holds_bounded_memory_and_is_closed(agent) -> None:
    before = _peak_rss_kib(agent.proc.pid)
    sock = socket.create_connection(("127.0.0.1", agent.http_port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    sent, burst = 0, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 100
    try:
        while sent < 4 << 20:
            sent += sock.send(burst)
    except BlockingIOError:
        pass  # the agent stopped reading: its answers are not being read
    except ConnectionResetError:
        pass
    sock.setblocking(True)
    sock.settimeout(30)
    # each answer is several KB: the old server wrote them all, ~1 GB for these requests
    data, ended = _read_all(sock, 32 << 20)
    sock.close()
    assert ended, f"the connection was still answering after {len(data)} bytes"
    assert _peak_rss_kib(agent.proc.pid) - before < 64 << 10
    assert _healthz(agent) == 200
    assert agent.metric("carbonspan_http_request_timeouts_total") >= 1


def test_thousands_of_repeated_headers_are_a_head_too_large(agent) -> None:
    # 20,000 empty headers are 80 KB on the wire, past the 64 KiB head limit
    with socket.create_connection(("127.0.0.1", agent.http_port), timeout=20) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n" + b"a:\r\n" * 20_000 + b"\r\n")
        data, _ = _read_all(sock, 1 << 20)
    assert data.startswith(b"HTTP/1.1 431 ")
    # fewer of them are joined once (linear), and the request is answered
    with socket.create_connection(("127.0.0.1", agent.http_port), timeout=20) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n" + b"a: b\r\n" * 8_000
                     + b"\r\n")
        data, _ = _read_all(sock, 1 << 20)
    assert data.startswith(b"HTTP/1.1 200 ")
    assert _healthz(agent) == 200
