"""httpserve's TLS, over real loopback sockets: counted from accept, upgraded with start_tls.

The listener accepts plain TCP and each connection upgrades itself, so these pin what that
must keep: requests that arrive in the same read as the client's last handshake message are
answered (they reach the connection before ``start_tls`` has returned), a connection that
never handshakes counts against ``max_connections`` and is evicted oldest first, and every
handshake that does not finish is told to ``on_event`` by reason. The certificate is made by
the ``openssl`` CLI for 127.0.0.1 (tests/_shared/tls_cert.py).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_cert import self_signed

from httpserve import Head, HttpServer, Limits, Request, Response, Route, load_tls_context


class Echo:
    def route(self, head: Head) -> Route:
        return Route.INLINE if head.path == "/inline" else Route.WORK

    def check(self, head: Head) -> Response | None:
        return None

    def handle(self, request: Request) -> Response:
        return Response(200, b"%s %s %d" % (request.head.method.encode(),
                                            request.path.encode(), len(request.body)))

    def refuse(self, head: Head | None, status: int, kind: str, message: str) -> Response:
        return Response(status, f"{kind}: {message}".encode())


@pytest.fixture(scope="module")
def cert_files(tmp_path_factory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


def _server(cert_files: tuple[Path, Path], handshake_timeout_s: float) -> HttpServer:
    events: list[str] = []
    srv = HttpServer(Echo(), Limits(max_connections=4, handshake_timeout_s=handshake_timeout_s,
                                    tick_s=0.05),
                     "127.0.0.1", 0, ssl_context=load_tls_context(*cert_files),
                     on_event=events.append)
    srv.events = events  # type: ignore[attr-defined]
    srv.start()
    return srv


@pytest.fixture()
def server(cert_files) -> Iterator[HttpServer]:
    srv = _server(cert_files, 5.0)
    yield srv
    srv.stop()


@pytest.fixture()
def quick(cert_files) -> Iterator[HttpServer]:
    """Handshakes time out after 0.5 s."""
    srv = _server(cert_files, 0.5)
    yield srv
    srv.stop()


def _client_ctx(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def _read_answers(tls: ssl.SSLSocket, n: int) -> list[bytes]:
    buf, out = b"", []
    while len(out) < n:
        chunk = tls.recv(65536)
        assert chunk, f"closed after {out!r} + {buf!r}"
        buf += chunk
        while b"\r\n\r\n" in buf:
            head, rest = buf.split(b"\r\n\r\n", 1)
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            if len(rest) < length:
                break
            out.append(rest[:length])
            buf = rest[length:]
    return out


def _wait(pred, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_requests_sent_with_the_last_handshake_message_are_answered(server, cert_files) -> None:
    """The client's Finished and three pipelined requests leave in one write (a MemoryBIO
    client), so the server's TLS layer hands the requests over in the read that ends the
    handshake, before start_tls has returned to the connection."""
    ctx = _client_ctx(cert_files[0])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    body = b"x" * 70_000  # larger than the server's 64 KiB scratch buffer
    requests = (b"GET /inline HTTP/1.1\r\nHost: x\r\n\r\n"
                + b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
                + b"GET /inline HTTP/1.1\r\nHost: x\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    s.sendall(outgoing.read())
                data = s.recv(65536)
                assert data, "closed during the handshake"
                incoming.write(data)
        tls.write(requests)
        s.sendall(outgoing.read())  # client Finished + the requests: one write
        got = b""
        while got.count(b"HTTP/1.1 200") < 3:
            data = s.recv(65536)
            assert data, f"closed after {got!r}"
            incoming.write(data)
            try:
                while True:
                    got += tls.read(65536)
            except ssl.SSLWantReadError:
                pass
    assert got.count(b"GET /inline 0") == 2 and b"POST /a 70000" in got
    assert got.index(b"GET /inline 0") < got.index(b"POST /a") < got.rindex(b"GET /inline 0")


def test_silent_connections_count_from_accept_and_are_evicted_oldest_first(
        server, cert_files) -> None:
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(6)]
    try:
        _wait(lambda: server.events.count("evicted_handshake") >= 2)
        assert len(server.conns) == 4
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, \
                _client_ctx(cert_files[0]).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /inline HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_answers(tls, 1) == [b"GET /inline 0"]
        assert server.events.count("evicted_handshake") == 3
        # the oldest went first: the first three are closed by the server, the last three not
        for s in silent[:3]:
            s.settimeout(2)
            assert s.recv(1) == b""
        # an eviction is not a failed handshake
        assert not any(e.startswith("handshake_") for e in server.events), server.events
    finally:
        for s in silent:
            s.close()


def test_handshakes_that_do_not_finish_are_told_by_reason(quick) -> None:
    server = quick
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        _wait(lambda: "handshake_timeout" in server.events, timeout=3)  # 0.5 s here
        s.settimeout(2)
        assert s.recv(1) == b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP to a TLS port
        _wait(lambda: "handshake_error" in server.events)
    socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
    _wait(lambda: "handshake_closed" in server.events)
    _wait(lambda: not server.conns)  # none is left counted
    assert server.events.count("opened") == server.events.count("closed") == 3
