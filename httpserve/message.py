"""The values an application sees and returns: request head, request, response, limits."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus


class Route(enum.Enum):
    """Where a request is handled once it has been read whole.

    ``INLINE``: on the event loop itself, at once (must be quick and never block: health and
    readiness, which therefore answer whatever the other load). ``CONTROL``: in a small pool of
    its own (e.g. a metrics scrape). ``WORK``: in the bounded work pool (e.g. ingest), or on the
    loop itself when ``Limits.work_threads`` < 0, where the application must only start the
    work and answer with a :class:`Later` (or answer at once)."""

    INLINE = "inline"
    CONTROL = "control"
    WORK = "work"


@dataclass(frozen=True, slots=True)
class Head:
    """A request line and its headers (names in lower case; repeated headers joined by ", ")."""

    method: str
    target: str
    headers: Mapping[str, str]
    client: str = ""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)

    @property
    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    @property
    def content_length(self) -> int | None:
        """The declared length, or None; ValueError unless it is one ASCII decimal number
        (``int()`` alone would take ``"²"``, ``" 7"`` or ``"-1"``)."""
        raw = self.headers.get("content-length")
        if raw is None:
            return None
        if not (raw.isascii() and raw.isdigit()):
            raise ValueError(raw)
        return int(raw)


@dataclass(frozen=True, slots=True)
class Request:
    head: Head
    body: bytes | bytearray  # a body of declared length is the buffer it was read into
    received: float = 0.0  # monotonic time its last byte was read (0: made by hand)

    @property
    def path(self) -> str:
        return self.head.path


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False  # send "Connection: close" and close once written

    def render(self, keep_alive: bool) -> bytes:
        """The whole response as one buffer (one write: no Nagle delay between head and body).
        The head around the length is kept per (status, type, headers, close): an answer of a
        kind already sent costs a dict look-up and one join."""
        close = self.close or not keep_alive
        key = (self.status, self.content_type, self.headers, close)
        parts = _HEADS.get(key)
        if parts is None:
            parts = _head_parts(*key)
        body = self.body
        return b"".join((parts[0], str(len(body)).encode("ascii"), parts[1], body))


#: (status, content type, headers, close) -> the head before and after the Content-Length value
_HEADS: dict[tuple, tuple[bytes, bytes]] = {}
_HEADS_MAX = 512  # kinds of answers kept; the rest are rendered each time


def _head_parts(status: int, content_type: str, headers: tuple[tuple[str, str], ...],
                close: bool) -> tuple[bytes, bytes]:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    before = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: "
    after = "".join(f"\r\n{k}: {v}" for k, v in headers) + ("\r\nConnection: close" if close
                                                            else "") + "\r\n\r\n"
    parts = (before.encode("latin-1"), after.encode("latin-1"))
    if len(_HEADS) < _HEADS_MAX:
        _HEADS[(status, content_type, headers, close)] = parts
    return parts


class Later:
    """An answer the application gives later, from any thread: ``handle`` returns a ``Later``
    and whoever learns the answer calls :meth:`answer` with the ``Response`` (once). The loop
    (``Limits.work_threads`` < 0) or pool thread that ran ``handle`` is then free for the next
    request instead of blocking until the answer is known (the agent answers an export once its
    group commit is durable). The
    request keeps its place in the WORK bound (``Limits.workers``) until it is answered; an
    application must answer every ``Later`` it returns, or the connection waits until it is
    closed."""

    __slots__ = ("_lock", "_response", "_send")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._response: Response | None = None
        self._send: Callable[[Response], None] | None = None

    def answer(self, response: Response) -> None:
        """Send ``response`` (from any thread; it must not block the caller long: a plain
        socket's answer is written at once when it fits, else the loop writes it)."""
        with self._lock:
            if self._response is not None:
                raise RuntimeError("this request was answered already")
            self._response, send = response, self._send
        if send is not None:
            send(response)

    def bind(self, send: Callable[[Response], None]) -> None:
        """The server's side: ``send`` is called once with the answer (at once if known)."""
        with self._lock:
            self._send, response = send, self._response
        if response is not None:
            send(response)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one server holds at most, and for how long (docs/operations.md, HTTP connections).

    ``max_connections``: open connections, counted from their accept (TLS ones before their
    handshake); a new one past it closes the longest-idle keep-alive connection, else the oldest
    whose request is still arriving or whose TLS handshake is not done (never one whose request
    is being handled), else it is closed at once. ``handshake_timeout_s``: a TLS handshake. ``request_timeout_s``: one deadline for a whole
    request, head and body, from its first byte (a client trickling bytes gains nothing);
    ``idle_timeout_s``: a keep-alive connection with no request. ``max_body_bytes``: a larger
    declared ``Content-Length`` is refused before any of the body is read, a chunked body as
    soon as it passes it. ``body_budget_bytes``: bodies held at once by all connections
    (arriving or being handled); a request that does not fit is refused as busy. ``workers``:
    WORK requests admitted at once, being handled or waiting for a thread (more are refused as
    busy); ``work_threads``: of those, how many are handled at once (0: ``workers``), the rest
    wait in the pool's queue in arrival order, their bodies held (and counted in the budget);
    below 0, WORK requests are handled on the loop (each still counted in ``workers`` until it
    is answered, a ``Later`` included)."""

    max_connections: int = 512
    request_timeout_s: float = 30.0
    idle_timeout_s: float = 30.0
    handshake_timeout_s: float = 10.0
    max_head_bytes: int = 64 * 1024
    max_body_bytes: int = 16 * 1024 * 1024
    body_budget_bytes: int = 128 * 1024 * 1024
    workers: int = 64
    work_threads: int = 0
    control_workers: int = 2
    max_control: int = 8  # CONTROL requests at once (handled or waiting for the pool)
    linger_s: float = 2.0  # after a refusal with close: read and drop what the client still sends
    tick_s: float = 0.25  # how often deadlines are checked
