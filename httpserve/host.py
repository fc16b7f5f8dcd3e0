"""The two seams of the server, as protocols: what it needs from its application (``App``) and
what a connection needs from the server that accepted it (``Host``).

``HttpServer`` (``server.py``) is the one ``Host``; it imports the connection (``conn.py``),
and the connection knows the server only as this protocol, so neither imports the other both
ways. A connection reads the server's limits, application and TLS context, shares its loop,
scratch buffer, body budget and pools, and tells it what happened (``opened``, ``closed``,
``event``); the server's deadlines and evictions call the connection back (``tick``,
``state_key``, ``close``). tests/http_server/test_httpserve.py holds the server to ``Host`` and
the connection to what ``Host`` names.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from httpserve.message import Head, Later, Limits, Request, Response, Route

C = TypeVar("C")  # the connection type (httpserve.conn.Connection)


class App(Protocol):
    """What a server needs from its application (all but ``handle`` run on the loop)."""

    def route(self, head: Head) -> Route: ...

    def check(self, head: Head) -> Response | None:
        """A WORK request's refusal decided from its head alone (auth, type), or None."""

    def handle(self, request: Request) -> Response | Later:
        """The answer, or a ``Later`` answered from any thread (not on an INLINE route)."""

    def refuse(self, head: Head | None, status: int, kind: str, message: str) -> Response:
        """The answer for a refusal by the server itself: ``kind`` is ``malformed`` (400),
        ``too_large`` (413), ``timeout`` (408), ``busy`` (503), ``head_too_large`` (431) or
        ``internal`` (500); ``head`` is None when the request line was not readable."""


@runtime_checkable
class Host(Protocol[C]):
    """What a connection of type ``C`` needs from the server that accepted it (all on the
    loop's thread but ``run``'s calls, ``finished.append`` and ``loop.call_soon_threadsafe``)."""

    limits: Limits
    app: App
    name: str
    ssl_context: ssl.SSLContext | None  # None: plain; else the connection upgrades itself
    loop: asyncio.AbstractEventLoop
    log: logging.Logger
    scratch: memoryview  # what every connection reads its heads into (the parser copies)
    finished: deque[tuple[C, Any, Response]]  # answered in full by a pool thread: drain_finished
    work_on_loop: bool  # WORK requests handled on the loop (``Limits.work_threads`` < 0)

    def opened(self, conn: C) -> None:
        """Count ``conn`` (at accept); may evict another connection, or close this one."""

    def closed(self, conn: C) -> None: ...

    def drain_finished(self) -> None:
        """Finish the requests in ``finished`` (on the loop)."""

    def reserve(self, n: int) -> bool:
        """Hold ``n`` bytes of request body; False past the body budget."""

    def release(self, n: int) -> None: ...

    def body_buffer(self, n: int) -> bytearray: ...

    def spare_buffer(self, buf: bytearray) -> None: ...

    def acquire(self, route: Route) -> bool:
        """A slot of the route's pool; False when it is at its limit."""

    def run(self, route: Route, fn: Callable[..., None], *args: object) -> None:
        """Hand ``fn(*args)`` to the route's pool (after :meth:`acquire`)."""

    def done(self, route: Route) -> None: ...

    def event(self, name: str) -> None: ...

    def log_exception(self, head: Head, exc: BaseException) -> None: ...
