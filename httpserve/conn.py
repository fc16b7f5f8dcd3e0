"""One HTTP/1.1 connection on the event loop: httptools (llhttp) parses, the server's limits apply.

A connection is in one of five states, which is what the server's deadlines and evictions
look at: *handshaking* (TLS only: accepted, counted, its handshake not yet done; bounded by
``handshake_timeout_s``), *idle* (no request begun: a keep-alive connection, or a new one that
has sent nothing), *reading* (a request has begun and is not yet whole: its deadline runs from
its first byte), *busy* (a request is being handled or its answer written: never evicted), and
*lingering* (a refusal with ``Connection: close`` was sent; what the client still sends is
read and dropped for ``linger_s``, so it reads the refusal instead of a connection reset).
Pipelined requests are answered in order; reading pauses while one is being handled.

TLS: the listener accepts plain TCP, so a connection counts against ``max_connections`` from
its accept, and the connection upgrades itself with ``loop.start_tls`` (asyncio's
``create_server(ssl=...)`` tells the protocol only once the handshake is done, so a flood of
connections that never send a ClientHello held files uncounted and unevictable).
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import sys
import time
from collections import deque
from typing import Any, NamedTuple

import httptools

from httpserve.host import Host
from httpserve.message import Head, Later, Request, Response, Route

# a refused body is read and dropped (keeping the connection) only when it is this small
_DRAIN_MAX = 1 << 20
# while a body of declared length arrives, the loop is woken only once this much of it (or
# all that is left, if less) is in the socket: one read per 512 KiB instead of one per
# loopback segment, each of which costs the loop a wake-up and a turn at the GIL
_LOWAT_MAX = 512 * 1024
# what a plain connection reads while it waits for a request's head (heads are ~0.3-1 KiB; a
# longer one, or pipelined requests, take more reads)
_HEAD_READ = 16 * 1024
# SO_RCVLOWAT holds epoll's "readable" until that much has arrived on Linux (and its window
# grows to fit); elsewhere the loop reads as the bytes come
_LOWAT = sys.platform.startswith("linux") and hasattr(socket, "SO_RCVLOWAT")


class _Refuse(Exception):
    """Raised inside a parser callback: answer, then close (and linger)."""

    def __init__(self, status: int, kind: str, message: str,
                 response: Response | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.response = status, kind, message, response


class _Ready(NamedTuple):
    request: Request
    route: Route
    early: Response | None  # refused at its head; the body was dropped
    keep_alive: bool
    reserved: int  # body-budget bytes this request holds


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: Host[Connection]) -> None:
        self.server = server
        self.limits = server.limits
        self.app = server.app
        self.transport: Any = None
        self.parser = httptools.HttpRequestParser(self)
        self.ready: deque[_Ready] = deque()
        self.busy = False
        self.closed = False
        self.counted = False  # in the server's open-connection count
        self.client = ""
        self.idle_since = time.monotonic()
        self.reading_since: float | None = None
        self.linger_until: float | None = None
        self._paused = False
        self._raw: socket.socket | None = None
        self._final: Response | None = None  # a closing refusal waiting for earlier answers
        self._write_paused = False  # the transport's write buffer is past its high-water mark
        self._write_paused_since: float | None = None
        # TLS: while the handshake runs, the TCP transport (closed to evict) and the time it
        # began; bytes the TLS layer hands over before start_tls has returned wait in _tls_early
        self.handshaking = False
        self.handshake_since = 0.0
        self._tcp: Any = None
        self._tls_early: list[bytes] | None = None
        self._gone = False  # the server has been told this connection is closed
        self._eof = False  # the client shut its write side: answer what came whole, then close
        self._lowat_n = 1  # the socket's SO_RCVLOWAT
        self._new_request()

    def _new_request(self) -> None:
        self._url = b""
        self._headers: dict[str, str] = {}
        self._repeated: dict[str, list[str]] = {}  # joined once, at the end of the head
        self._head_bytes = 0
        self._head: Head | None = None
        self._route = Route.INLINE
        self._body: list[bytes] = []  # a chunked body's pieces
        self._buf: bytearray | None = None  # a body of declared length, read into in place
        self._filled = 0
        self._direct = False  # the rest of _buf comes straight from the socket, not the parser
        self._keep = True
        self._size = 0
        self._reserved = 0
        self._early: Response | None = None

    # -- asyncio ---------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        """A TCP connection, just accepted: counted at once (TLS ones too, before their
        handshake), then served (plain) or upgraded (``_upgrade``)."""
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if peer else ""
        sock = transport.get_extra_info("socket")
        inet = sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6)
        if inet:
            # the answer is one write, but a pipelined client must not wait on delayed ACKs
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctx = self.server.ssl_context
        if ctx is not None:
            transport.pause_reading()  # start_tls reads from here on
            self._tcp = transport
            self.handshaking = True
            self.handshake_since = time.monotonic()
            self._tls_early = []
            self.server.opened(self)  # may evict another connection, or close this one
            if self.closed:  # refused at the cap: nothing could be evicted
                self.handshaking, self._tls_early, self._tcp = False, None, None
            else:
                self.server.loop.create_task(self._upgrade(ctx))
            return
        self.transport = transport
        if inet:
            # the pool threads' own handle on the socket (a dup: asyncio's is the loop's);
            # none at the open-file limit (the loop then writes the answers): raising here
            # left the connection open but unknown to the server, beyond its limits
            try:
                self._raw = socket.socket(fileno=os.dup(sock.fileno()))
            except OSError:
                self._raw = None
        self.server.opened(self)

    async def _upgrade(self, ctx: ssl.SSLContext) -> None:
        """The TLS handshake, bounded by ``handshake_timeout_s``; a failed one is counted
        (``handshake_timeout``, ``handshake_error``, ``handshake_closed``) unless the server
        closed the connection itself (an eviction, counted there)."""
        if self.closed:  # evicted before the handshake could begin
            self._handshake_failed("closed")
            return
        try:
            app = await self.server.loop.start_tls(
                self._tcp, self, ctx, server_side=True,
                ssl_handshake_timeout=self.limits.handshake_timeout_s)
        except ConnectionAbortedError:  # asyncio's handshake timeout (or an abort)
            took = time.monotonic() - self.handshake_since
            self._handshake_failed(
                "timeout" if took >= 0.9 * self.limits.handshake_timeout_s else "closed")
            return
        except ssl.SSLError:  # not TLS (plain HTTP to the TLS port), no shared cipher, ...
            self._handshake_failed("error")
            return
        except OSError:  # reset or closed by the client mid-handshake
            self._handshake_failed("closed")
            return
        except Exception as exc:  # a bug: said, and the connection is not left counted
            self.server.log.error("%s: TLS handshake failed", self.server.name, exc_info=exc)
            self._handshake_failed("error")
            return
        if app is None or self.closed:  # closed during the handshake (start_tls gives None)
            self._handshake_failed("closed")  # aborts the TCP transport under the TLS one
            return
        self.handshaking = False
        self._tcp = None
        self.transport = app
        self.idle_since = time.monotonic()  # idle from here: the handshake has its own clock
        early, self._tls_early = self._tls_early or [], None
        for chunk in early:  # what the TLS layer handed over in the handshake's last read
            self._feed(chunk)

    def _feed(self, data: bytes) -> None:
        """``data`` as the transport would have given it, through get_buffer/buffer_updated."""
        view = memoryview(data)
        while view and not self.closed:
            buf = self.get_buffer(len(view))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            view = view[n:]
            self.buffer_updated(n)

    def _handshake_failed(self, reason: str) -> None:
        evicted = self.closed  # closed by the server (an eviction or stop) before it failed
        self.handshaking = False
        self._tls_early = None
        if self._tcp is not None:
            self._tcp.abort()
            self._tcp = None
        if not evicted:
            self.server.event(f"handshake_{reason}")
        self.closed = True
        self._lost()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.handshaking:
            return  # the handshake failed or was cut: _upgrade sees to it
        self._lost()

    def _lost(self) -> None:
        if self._gone:
            return
        self._gone = True
        self.closed = True
        if not self.busy:
            self._close_raw()  # else once the pool thread is done with it (_finish)
        self.server.closed(self)
        self.server.release(self._reserved + sum(r.reserved for r in self.ready))
        self._reserved = 0
        self.ready.clear()
        self.transport = None

    def eof_received(self) -> bool | None:
        """The client shut its write side (``shutdown(SHUT_WR)``, a half-close, as ``nc -N``
        and some proxies do after a request): the requests it sent whole are still answered,
        then the connection is closed. With none, or on TLS (asyncio closes a TLS transport at
        EOF whatever this says), it closes now, asyncio's default. A request still being read
        never completes and is dropped."""
        if self.server.finished:
            self.server.drain_finished()  # answers already sent whole: finished now, not at the tick
        if self.closed or self._raw is None or self.linger_until is not None \
                or not (self.busy or self.ready):
            return None
        self._eof = True
        return True

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next bytes go: straight into the body of declared length once its head
        has been parsed (one copy, kernel to body, the old server's cost), else the server's
        scratch buffer, which the parser reads (the loop is one thread)."""
        if self._direct and self._buf is not None:
            return memoryview(self._buf)[self._filled:]
        if self._head is None and self._raw is not None:
            # a plain connection awaiting a head: a short read, so that a large body comes
            # straight from the socket (``_read_now``) instead of through the parser, which
            # copies it twice under the GIL (into a bytes object, then into the body)
            return self.server.scratch[:_HEAD_READ]
        return self.server.scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._tls_early is not None:  # the handshake is done, start_tls has not returned yet
            self._tls_early.append(bytes(self.server.scratch[:nbytes]))
            return
        if not self._direct:
            self.data_received(self.server.scratch[:nbytes])
            return
        self._filled += nbytes
        if self._buf is not None and self._filled >= len(self._buf):
            self._body_read()
            self._next()
        elif self._buf is not None and len(self._buf) - self._filled < self._lowat_n:
            self._lowat(len(self._buf) - self._filled)  # never wait for more than is to come

    def _body_read(self) -> None:
        """A body of declared length is whole in its buffer: the request is ready."""
        self._direct = False
        self._lowat(1)
        # the parser saw the head only; a fresh one reads the next request
        self.parser = httptools.HttpRequestParser(self)
        self._complete(self._keep)

    def _read_now(self) -> bool:
        """Read what of the body is already in the socket, straight into its buffer and without
        waiting (plain sockets: the loop's own thread, so asyncio's reads never interleave):
        True when that was all of it. A body sent at once is mostly in the socket by the time
        its head is parsed, and reading it now spares the loop a turn (``SO_RCVLOWAT`` set and
        reset, another wait, another read) before the request can be handed on."""
        raw, buf = self._raw, self._buf
        if raw is None or buf is None:
            return False
        size = len(buf)
        with memoryview(buf) as view:
            while self._filled < size:
                try:
                    n = raw.recv_into(view[self._filled:], 0, socket.MSG_DONTWAIT)
                except OSError:  # nothing more yet (or an error asyncio's read will meet)
                    return False
                if not n:  # the client closed: asyncio's read sees it
                    return False
                self._filled += n
        self._body_read()
        return True

    def data_received(self, data: bytes | memoryview) -> None:
        if self.linger_until is not None or self.closed:
            return  # lingering: read and drop
        if self.reading_since is None:
            self.reading_since = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse_close(400, "malformed", "protocol upgrades are not supported here")
        except httptools.HttpParserError as exc:
            why = exc.__context__
            if isinstance(why, _Refuse):
                self._refuse_close(why.status, why.kind, why.message, why.response)
            elif why is not None:  # the application's route() or check() failed: a bug
                self.server.log_exception(self._head or Head("?", "?", {}), why)
                self._refuse_close(500, "internal", f"the request could not be handled "
                                   f"({type(why).__name__})")
            else:
                self._refuse_close(400, "malformed", f"malformed HTTP/1.1 request ({exc}); "
                                   "send a valid request line, headers and body")
        else:
            if self._buf is not None and self._filled < len(self._buf):
                self._direct = True  # the head is parsed, the body is still to come
                if not self._read_now():
                    self._lowat(min(len(self._buf) - self._filled, _LOWAT_MAX))
        self._next()

    # -- httptools callbacks ---------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.reading_since is None:
            self.reading_since = time.monotonic()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        # + 4: the ": " and CRLF, so thousands of empty headers count as what they cost
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > self.limits.max_head_bytes:
            self._count_head(0)  # raises
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key not in self._headers:
            self._headers[key] = text
        else:  # a list, joined once: joining at each repeat is quadratic in the repeats
            self._repeated.setdefault(key, [self._headers[key]]).append(text)

    def _count_head(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > self.limits.max_head_bytes:
            raise _Refuse(431, "head_too_large", f"the request line and headers pass "
                          f"{self.limits.max_head_bytes} bytes")

    def on_headers_complete(self) -> None:
        if self._repeated:
            for key, values in self._repeated.items():
                self._headers[key] = ", ".join(values)
            self._repeated = {}
        head = Head(self.parser.get_method().decode("ascii", "replace"),
                    self._url.decode("latin-1"), self._headers, self.client)
        self._head = head
        self._route = self.app.route(head)
        limit = self.limits.max_body_bytes if self._route is Route.WORK else _DRAIN_MAX
        try:
            declared = head.content_length
        except ValueError:
            raise _Refuse(400, "malformed", "Content-Length is not one decimal number") from None
        if declared is not None and declared > limit:  # refused before reading any of it
            raise _Refuse(413, "too_large", f"request body is {declared} bytes; the limit is {limit}")
        early = self.app.check(head) if self._route is Route.WORK else None
        if early is not None:
            if (declared or 0) > _DRAIN_MAX or head.chunked:
                raise _Refuse(early.status, "early", "", early)
            self._early = early  # answered once its (small) body has been read and dropped
            return
        if declared and not self._reserve(declared):
            raise _Refuse(503, "busy", "the server holds its limit of request bodies in memory")
        if declared and not head.chunked:
            self._buf = self.server.body_buffer(declared)
            self._keep = self.parser.should_keep_alive()
        if head.header("expect").lower() == "100-continue" and not self.busy and not self.ready:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._early is not None:
            return
        self._size += len(body)
        limit = self.limits.max_body_bytes if self._route is Route.WORK else _DRAIN_MAX
        if self._size > limit:
            raise _Refuse(413, "too_large", f"chunked request body passes the limit of {limit} bytes")
        if self._buf is not None:
            end = self._filled + len(body)
            self._buf[self._filled:end] = body
            self._filled = end
            return
        if not self._reserve(len(body)):
            raise _Refuse(503, "busy", "the server holds its limit of request bodies in memory")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete(self.parser.should_keep_alive())

    def _complete(self, keep_alive: bool) -> None:
        assert self._head is not None
        if self._buf is not None:
            body: bytes | bytearray = self._buf
        else:
            body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self.ready.append(_Ready(Request(self._head, body, time.monotonic()), self._route, self._early,
                                 keep_alive, self._reserved))
        self._reserved = 0
        self._new_request()
        self.reading_since = None
        if (self.busy or len(self.ready) > 1) and not self._paused and self.transport is not None:
            self.transport.pause_reading()  # more pipelined requests wait in the socket
            self._paused = True

    def _reserve(self, n: int) -> bool:
        if not self.server.reserve(n):
            return False
        self._reserved += n
        return True

    # -- answering -------------------------------------------------------------------
    def _next(self) -> None:
        """Answer what is ready, in order: a loop, not recursion (thousands of pipelined
        INLINE requests can arrive in one read), and never past a full write buffer (a client
        that does not read its answers holds at most the transport's high-water mark)."""
        if self.server.finished:
            self.server.drain_finished()
        while not (self.busy or self.closed or self._write_paused):
            if not self.ready:
                if self._final is not None:
                    self._write_final()
                elif self._eof:  # the client half-closed: what it sent whole is answered
                    self.close()
                elif self._paused and self.linger_until is None and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                return
            item = self.ready.popleft()
            self.busy = True
            if item.early is not None:
                self._finish(item, item.early, then_next=False)
                continue
            if item.route is Route.INLINE:
                try:
                    response = self.app.handle(item.request)
                    if type(response) is Later:  # the loop cannot wait: an app's bug, said
                        raise TypeError("an INLINE route must answer at once, not with Later")
                except Exception as exc:
                    response = self._internal(item.request.head, exc)
                self._finish(item, response, then_next=False)
                continue
            if not self.server.acquire(item.route):
                what = "work" if item.route is Route.WORK else "control"
                item = item._replace(route=Route.INLINE)  # holds no pool slot
                self._finish(item, self.app.refuse(
                    item.request.head, 503, "busy",
                    f"the server is handling its limit of {what} requests at once"),
                    then_next=False)
                continue
            if item.route is Route.WORK and self.server.work_on_loop:
                try:
                    response = self.app.handle(item.request)
                except Exception as exc:
                    response = self._internal(item.request.head, exc)
                if type(response) is Later:  # busy until answered, from whichever thread
                    response.bind(lambda answer, item=item: self._answer(item, answer))
                    return
                self._finish(item, response, then_next=False)
                continue
            self.server.run(item.route, self._handle_in_pool, item)
            return

    # -- write backpressure (asyncio calls these around the transport's high-water mark) --
    def pause_writing(self) -> None:
        self._write_paused = True
        self._write_paused_since = time.monotonic()
        if not self._paused and self.transport is not None:
            self.transport.pause_reading()  # no more requests while answers pile up
            self._paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._write_paused_since = None
        self._next()

    def _handle_in_pool(self, item: _Ready) -> None:
        """In a pool thread: handle, then send the answer from here when the socket is plain
        and nothing else is queued on it (one wake-up of the loop fewer before the client has
        its answer); the loop does the rest, at its next turn when the answer went whole."""
        try:
            response = self.app.handle(item.request)
        except Exception as exc:  # the loop words it (app.refuse runs on the loop)
            self.server.loop.call_soon_threadsafe(self._failed, item, exc)
            return
        if type(response) is Later:  # answered by whichever thread learns the answer
            response.bind(lambda answer: self._answer(item, answer))
            return
        self._answer(item, response)

    def _answer(self, item: _Ready, response: Response) -> None:
        """Off the loop (a pool thread, or whoever answers a ``Later``): send the answer."""
        data = response.render(item.keep_alive)
        sent = 0
        raw, transport = self._raw, self.transport
        if raw is not None and transport is not None and not self.closed \
                and not transport.get_write_buffer_size():
            try:
                sent = raw.send(data)
            except OSError:  # would block, or the client left: the loop's write sees to it
                sent = 0
        if sent == len(data) and item.keep_alive and not response.close:
            # answered in full: the loop finishes it when it next runs (the client's next
            # request wakes it, else the tick), not woken for it now. Then, unless the loop
            # has something waiting on this finish: it set that before it last drained
            # (seen below) or it will drain after setting it (_next drains first)
            self.server.finished.append((self, item, response))
            if self.ready or self._paused or self._final is not None or self.closed:
                self.server.loop.call_soon_threadsafe(self.server.drain_finished)
            return
        self.server.loop.call_soon_threadsafe(self._finish, item, response, data[sent:])

    def _failed(self, item: _Ready, exc: BaseException) -> None:
        self._finish(item, self._internal(item.request.head, exc))

    def _internal(self, head: Head, exc: BaseException) -> Response:
        self.server.log_exception(head, exc)
        return self.app.refuse(head, 500, "internal",
                               f"the request could not be handled ({type(exc).__name__})")

    def _finish(self, item: _Ready, response: Response, data: bytes | None = None,
                then_next: bool = True) -> None:
        """On the loop: write what is left of the answer, then the next request (unless
        ``_next`` called: it loops) or idle."""
        if item.route is not Route.INLINE and item.early is None:
            self.server.done(item.route)
        self.server.release(item.reserved)
        self._recycle(item)
        self.busy = False
        if self.closed or self.transport is None:
            self._close_raw()
            return
        if data is None:
            data = response.render(item.keep_alive)
        if data:
            self.transport.write(data)
        if response.close or not item.keep_alive:
            self.close()
            return
        self.idle_since = time.monotonic()
        if then_next:
            self._next()

    def _lowat(self, n: int) -> None:
        """Wake the loop for this socket only once ``n`` bytes can be read (``SO_RCVLOWAT``;
        a closing peer still wakes it, and the deadline is the tick's, not a read's). Plain
        sockets only: a TLS record's bytes are not the body's."""
        if self._raw is not None and _LOWAT and n != self._lowat_n:
            try:
                self._raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
                self._lowat_n = n
            except OSError:
                pass

    def _recycle(self, item: _Ready) -> None:
        """Give a handled body's buffer back for the next body, if nothing but ``item`` holds
        the request and its body (CPython's reference counts: the request's slot in ``item``
        or the body's in the request, the local name, getrefcount's argument): an application
        that kept the request, its body or a view of it keeps them as they were."""
        request = item.request
        body = request.body
        if type(body) is bytearray and sys.getrefcount(request) == 3 \
                and sys.getrefcount(body) == 3:
            self.server.spare_buffer(body)

    def _close_raw(self) -> None:
        if self._raw is not None:
            self._raw.close()  # the dup only
            self._raw = None

    def _refuse_close(self, status: int, kind: str, message: str,
                      response: Response | None = None) -> None:
        """Answer ``status`` with ``Connection: close``, after any earlier pipelined answers;
        the parser is done with this connection. ``response``: the application's own."""
        if response is None:
            self.server.event(f"refused_{kind}")
            response = self.app.refuse(self._head, status, kind, message)
        self._final = Response(response.status, response.body, response.content_type,
                               response.headers, close=True)
        self.server.release(self._reserved)
        self._reserved = 0
        if self._direct:
            self._lowat(1)
        self._direct, self._buf = False, None  # what still comes is dropped, not a body
        self.reading_since = None
        self.linger_until = float("inf")  # stop parsing; the clock starts once it is written
        self._next()

    def _write_final(self) -> None:
        assert self._final is not None and self.transport is not None
        self.transport.write(self._final.render(False))
        self._final = None
        self.linger_until = time.monotonic() + self.limits.linger_s
        if self._paused:  # keep reading (and dropping) so the client can finish sending
            self._paused = False
            self.transport.resume_reading()

    # -- the server's clock ----------------------------------------------------------
    def state_key(self) -> tuple[int, float] | None:
        """Eviction order: idle first (longest idle), then lingering, reading or handshaking
        (oldest first); None while busy (never evicted)."""
        if self.busy or self.ready or self.closed:
            return None
        if self.handshaking:
            return (1, self.handshake_since)
        if self.linger_until is not None:
            return (1, 0.0)
        if self.reading_since is not None:
            return (1, self.reading_since)
        return (0, self.idle_since)

    def eviction_reason(self) -> str:
        """What an eviction of this connection is counted as: ``idle``, ``handshake`` or
        ``slow`` (a request arriving, or a refusal lingering)."""
        if self.handshaking:
            return "handshake"
        key = self.state_key()
        return "idle" if key is not None and key[0] == 0 else "slow"

    def tick(self, now: float) -> None:
        if self.handshaking:
            return  # start_tls holds the handshake's deadline
        if self._write_paused_since is not None and not self.closed and \
                now - self._write_paused_since > self.limits.request_timeout_s:
            self.server.event("refused_timeout")
            if self.transport is not None:
                self.transport.abort()  # the client reads nothing: its answers are dropped
            self.closed = True
            return
        if self.closed or self.busy or self.ready:
            return
        if self.linger_until is not None:
            if now >= self.linger_until:
                self.close()
        elif self.reading_since is not None:
            if now - self.reading_since > self.limits.request_timeout_s:
                self._refuse_close(408, "timeout", f"the request did not arrive whole within "
                                   f"{self.limits.request_timeout_s:g} s")
        elif now - self.idle_since > self.limits.idle_timeout_s:
            self.close()

    def close(self) -> None:
        if self.handshaking and not self.closed and self._tcp is not None:
            self._tcp.abort()  # nothing to send; start_tls then ends, and _upgrade tells the server
        elif self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

