"""Review 19: httpserve's direct body reads (MSG_DONTWAIT at the head, 16 KiB head reads) over
real loopback sockets, against a client that splits its bytes anywhere.

Each answer names the sha256 of the body the application saw, so a byte read twice, dropped,
or read past its body (into the next pipelined request) fails the test.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Iterator

import pytest
from http_wire import post, read_answers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from httpserve import Head, HttpServer, Limits, Request, Response, Route


class Digest:
    def route(self, head: Head) -> Route:
        return Route.INLINE if head.path == "/inline" else Route.WORK

    def check(self, head: Head) -> Response | None:
        return Response(403, b"refused at the head") if head.header("x-refuse") else None

    def handle(self, request: Request) -> Response:
        return Response(200, b"%s %d %s" % (request.path.encode(), len(request.body),
                                            hashlib.sha256(request.body).hexdigest().encode()))

    def refuse(self, head: Head | None, status: int, kind: str, message: str) -> Response:
        return Response(status, f"{kind}: {message}".encode())


@pytest.fixture(scope="module")
def server() -> Iterator[HttpServer]:
    srv = HttpServer(Digest(), Limits(max_body_bytes=4 << 20, request_timeout_s=1.0, tick_s=0.05,
                                      linger_s=0.2), "127.0.0.1", 0)
    srv.start()
    yield srv
    srv.stop()


def _want(path: str, body: bytes) -> bytes:
    return b"%s %d %s" % (path.encode(), len(body), hashlib.sha256(body).hexdigest().encode())


def _read_answers(s: socket.socket, n: int) -> list[tuple[bytes, bytes]]:
    """(status line, body) of the next ``n`` answers."""
    return [(head.split(b"\r\n", 1)[0], body) for head, body in read_answers(s, n)]


def _send_in_pieces(port: int, data: bytes, cuts: list[int], n: int, pause: float = 0.004):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        at = 0
        for cut in [*sorted(set(cuts)), len(data)]:
            if cut > at:
                s.sendall(data[at:cut])
                at = cut
                time.sleep(pause)  # its own segment, and most likely its own read
        return _read_answers(s, n)


def _pair() -> tuple[bytes, list[tuple[bytes, bytes]]]:
    a, b = bytes(range(256)) * 2, b"second body \r\n\r\nGET / HTTP/1.1\r\n\r\n"  # a head inside a body
    data = post("/one", a) + b"GET /inline HTTP/1.1\r\nHost: x\r\n\r\n" + post("/two", b)
    return data, [(b"HTTP/1.1 200 OK", _want("/one", a)), (b"HTTP/1.1 200 OK", _want("/inline", b"")),
                  (b"HTTP/1.1 200 OK", _want("/two", b))]


def test_three_pipelined_requests_split_at_every_byte_are_answered_whole(server) -> None:
    """Every split point of three pipelined requests (heads, bodies, the boundaries between):
    the body read at once never reads into the next request, and every body is whole."""
    direct = _DIRECT
    direct.clear()
    data, want = _pair()
    for cut in range(1, len(data)):
        got = _send_in_pieces(server.port, data, [cut], 3, pause=0.002)
        assert [(h[:15], b) for h, b in got] == want, cut
    assert direct  # cut bodies went through the direct read (found short, or whole by then)


_DIRECT: list[bool] = []


@pytest.fixture(autouse=True)
def _count_direct_reads(monkeypatch) -> None:  # noqa: ANN001
    from httpserve import conn

    real = conn.Connection._read_now

    def counted(self):  # noqa: ANN001, ANN202
        done = real(self)
        _DIRECT.append(done)
        return done

    monkeypatch.setattr(conn.Connection, "_read_now", counted)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(size=st.sampled_from([16 * 1024 - 80, 16 * 1024, 16 * 1024 + 1, 70_000, 600_000]),
       cuts=st.lists(st.floats(0, 1), max_size=4), big_head=st.booleans())
def test_a_large_body_split_anywhere_after_a_long_head_is_read_whole(server, size, cuts, big_head) -> None:
    """Bodies around the 16 KiB head read and past SO_RCVLOWAT's 512 KiB, a head that itself
    takes several 16 KiB reads, the bytes cut anywhere: the digest is the body's, and the next
    request on the connection is answered."""
    body = bytes((i * 131 + i // 253) & 0xFF for i in range(size))
    extra = b"X-Pad: " + b"p" * 40_000 + b"\r\n" if big_head else b""
    data = post("/big", body, extra) + post("/after", b"tail")
    points = [int(f * len(data)) for f in cuts]
    got = _send_in_pieces(server.port, data, points, 2)
    if not points and 16 * 1024 < size <= 70_000:  # sent at once: the body past the head's read is read at once
        assert _DIRECT and _DIRECT[-1], _DIRECT
    assert got[0] == (b"HTTP/1.1 200 OK", _want("/big", body))
    assert got[1] == (b"HTTP/1.1 200 OK", _want("/after", b"tail"))


def test_a_body_shorter_than_its_content_length_times_out_and_a_longer_one_is_malformed(server) -> None:
    """Content-Length mismatches after the direct read: too few bytes (the client then waits)
    is a 408 at the deadline, never an answer built from a partial body; too many is the start
    of a next request that is not HTTP: 400, and the connection closed."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /short HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"s" * 999)
        t = time.monotonic()
        (status, _), = _read_answers(s, 1)
        assert status.startswith(b"HTTP/1.1 408"), status
        assert time.monotonic() - t >= 0.5
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /long HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n" + b"L" * 10 + b"garbage!!\r\n\r\n")
        got = _read_answers(s, 2)
        assert got[0] == (b"HTTP/1.1 200 OK", _want("/long", b"L" * 10))
        assert got[1][0].startswith(b"HTTP/1.1 400")


def test_a_slow_body_after_the_direct_read_is_read_whole(server: HttpServer) -> None:
    """The head and the first bytes arrive, the rest trickles in (the direct read finds the
    socket empty, the loop then waits): the whole body, under the deadline."""
    body = bytes(range(256)) * 40
    data = post("/slow", body)
    head_end = data.index(b"\r\n\r\n") + 4
    cuts = [head_end + 1, head_end + 100, *range(head_end + 1000, len(data), 1500)]
    got = _send_in_pieces(server.port, data, cuts, 1, pause=0.03)
    assert got == [(b"HTTP/1.1 200 OK", _want("/slow", body))]


def test_a_client_that_half_closes_after_its_requests_is_answered_then_closed(server) -> None:
    """Requests sent whole, then the client's write side shut (a half-close, as ``nc -N`` and
    some proxies do): each is answered, then the server closes. Before, the EOF closed the
    connection with the answers unsent (whether an answer got out was a race with the pool)."""
    for size in (1, 5000, 100_000, 1_500_000):
        body = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
        for _ in range(3):  # one request alone: the EOF is read while the pool handles it
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                s.sendall(post("/alone", body))
                s.shutdown(socket.SHUT_WR)
                assert _read_answers(s, 1) == [(b"HTTP/1.1 200 OK", _want("/alone", body))]
                assert s.recv(1) == b""
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:  # pipelined
            s.sendall(post("/closing", body) + b"GET /inline HTTP/1.1\r\nHost: x\r\n\r\n"
                      + post("/last", b"end"))
            s.shutdown(socket.SHUT_WR)
            assert _read_answers(s, 3) == [(b"HTTP/1.1 200 OK", _want("/closing", body)),
                                           (b"HTTP/1.1 200 OK", _want("/inline", b"")),
                                           (b"HTTP/1.1 200 OK", _want("/last", b"end"))]
            assert s.recv(1) == b""  # then closed
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /cut HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"c" * 50)
        s.shutdown(socket.SHUT_WR)  # half a body: never a request, closed at once
        t = time.monotonic()
        assert s.recv(65536) == b"" and time.monotonic() - t < 0.9
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.shutdown(socket.SHUT_WR)  # nothing sent: closed
        assert s.recv(1) == b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(post("/still", b"up"))
        assert _read_answers(s, 1) == [(b"HTTP/1.1 200 OK", _want("/still", b"up"))]
