"""httpserve with WORK requests handled on the loop (``Limits.work_threads`` < 0) and answered
later (``httpserve.Later``), over real loopback sockets: what the agent's OTLP/HTTP exports
rely on. The handler runs on the loop's thread and returns at once; another thread answers a
moment later; answers keep their order on a connection, the loop serves other connections
(and INLINE requests) in the meantime, and a request keeps its place in ``Limits.workers``
until it is answered."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from http_wire import post, read_answers

from httpserve import Head, HttpServer, Later, Limits, Request, Response, Route


class Slow:
    """Answers each WORK request 1 s later from a timer thread, naming the thread that ran
    ``handle``; ``/now`` is answered at once, ``/inline-later`` is an INLINE route answering
    with a Later (an application bug: 500)."""

    def __init__(self) -> None:
        self.handled_on: list[str] = []

    def route(self, head: Head) -> Route:
        return Route.INLINE if head.path.startswith("/inline") else Route.WORK

    def check(self, head: Head) -> Response | None:
        return None

    def handle(self, request: Request) -> Response | Later:
        self.handled_on.append(threading.current_thread().name)
        if request.path == "/inline-later":
            return Later()
        body = b"%s %d" % (request.path.encode(), len(request.body))
        if request.path in ("/now", "/inline"):
            return Response(200, body)
        later = Later()
        threading.Timer(1.0, later.answer, (Response(200, body),)).start()
        return later

    def refuse(self, head: Head | None, status: int, kind: str, message: str) -> Response:
        return Response(status, f"{kind}: {message}".encode())


@pytest.fixture()
def served() -> Iterator[tuple[HttpServer, Slow]]:
    app = Slow()
    srv = HttpServer(app, Limits(work_threads=-1, workers=3, tick_s=0.05), "127.0.0.1", 0)
    srv.start()
    yield srv, app
    srv.stop()


def _answers(port: int, data: bytes, n: int) -> list[bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        return [body for _, body in read_answers(s, n)]


def test_work_on_the_loop_is_answered_later_in_order(served) -> None:
    srv, app = served
    out = _answers(srv.port, post("/a", b"x" * 10) + post("/now", b"y") + post("/b", b"zz"), 3)
    assert out == [b"/a 10", b"/now 1", b"/b 2"]  # in order, though /now was ready at once
    assert set(app.handled_on) == {srv._thread.name}  # the loop's thread, no pool's


def test_the_loop_serves_other_connections_while_answers_wait(served) -> None:
    srv, _ = served
    waiting = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    waiting.sendall(post("/slow", b"s"))
    time.sleep(0.05)
    assert _answers(srv.port, b"GET /inline HTTP/1.1\r\nHost: x\r\n\r\n", 1) == [b"/inline 0"]
    assert _answers(srv.port, post("/now", b"q"), 1) == [b"/now 1"]
    waiting.setblocking(False)
    with pytest.raises(BlockingIOError):  # both answered while the first still waits
        waiting.recv(1)
    waiting.setblocking(True)
    assert [body for _, body in read_answers(waiting, 1)] == [b"/slow 1"]
    waiting.close()


def test_a_request_waiting_for_its_answer_keeps_its_place_in_workers(served) -> None:
    srv, _ = served
    socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(4)]
    for s in socks:
        s.sendall(post("/w", b"w"))
        time.sleep(0.02)
    answers = [read_answers(s, 1)[0] for s in socks]
    heads = sorted(head.split(b"\r\n")[0] for head, _ in answers)
    assert heads == [b"HTTP/1.1 200 OK"] * 3 + [b"HTTP/1.1 503 Service Unavailable"]  # workers=3
    for s in socks:
        s.close()


def test_an_inline_route_answering_later_is_a_500(served) -> None:
    srv, _ = served
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"GET /inline-later HTTP/1.1\r\nHost: x\r\n\r\n")
        (head, body), = read_answers(s, 1)
    assert head.startswith(b"HTTP/1.1 500") and b"internal" in body


def test_a_pool_thread_may_answer_later_too() -> None:
    """WORK in the pool (work_threads > 0): a handler returning a Later frees its thread, and
    the answer sent from the timer thread keeps the connection's order."""
    app = Slow()
    srv = HttpServer(app, Limits(work_threads=1, workers=3, tick_s=0.05), "127.0.0.1", 0)
    srv.start()
    try:
        out = _answers(srv.port, post("/a", b"x") + post("/b", b"yy"), 2)
        assert out == [b"/a 1", b"/b 2"]
        assert app.handled_on and srv._thread.name not in app.handled_on  # pool threads
    finally:
        srv.stop()
