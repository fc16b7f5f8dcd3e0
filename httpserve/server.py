"""The listener and its event loop: connections, limits, deadlines, evictions, the pools.

One asyncio loop in its own thread holds every connection (an idle one costs a socket and a
few hundred bytes, not a thread), parses with httptools, answers INLINE routes itself and hands
whole requests to the pools; an application's handler never sees a partial request. The
listen backlog is the OS's (``socket.SOMAXCONN``), accepted ``ACCEPT_BATCH`` at a time. With
TLS the listener still accepts plain TCP: every connection counts against ``max_connections``
from its accept, and upgrades itself on the loop (``loop.start_tls``, bounded by
``handshake_timeout_s``), so connections that never handshake are evicted like slow requests
instead of holding files beyond the cap.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from httpserve.conn import Connection
from httpserve.host import App
from httpserve.message import Head, Limits, Route

log = logging.getLogger("httpserve")
_ACCEPT_LOG_S = 10.0  # at most one log line per this many seconds about failed accepts
#: connections accepted per turn of the loop. asyncio accepts as many at a time as the
#: ``backlog`` given to create_server (and listens with it); at the OS's 4,096 a flood was
#: accepted whole before any connection was counted, so the open-file limit was reached before
#: one eviction could free a file. Small turns let evictions keep up; the socket listens with
#: the OS's backlog all the same (set again after create_server).
ACCEPT_BATCH = 16
_SPARES, _SPARE_BYTES = 16, 16 << 20  # handled bodies' buffers kept for reuse: at most


class _Pool:
    """At most ``size`` threads taking calls from one queue, started as the calls in hand
    need them: what ``ThreadPoolExecutor`` does without a Future, its condition and three
    locks per call (the loop pays for each hand-off). A call that raises is logged."""

    def __init__(self, size: int, name: str) -> None:
        self.size, self.name = size, name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._stopped = False

    def submit(self, in_hand: int, fn: Callable[..., None], args: tuple) -> None:
        """Queue ``fn(*args)``; ``in_hand`` calls (this one included) are queued or running,
        so that many threads (at most ``size``) are enough for none to wait for another."""
        self._queue.put((fn, args))
        if len(self._threads) < min(in_hand, self.size) and not self._stopped:
            t = threading.Thread(target=self._work, name=f"{self.name}_{len(self._threads)}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            call = get()
            if call is None or self._stopped:
                return
            fn, args = call
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001 - a pool thread must outlive its calls
                log.exception("%s: a call in the pool failed", self.name)
            del call, fn, args

    def shutdown(self) -> None:
        """Drop what is queued; each thread ends once its call (if any) returns."""
        self._stopped = True
        for _ in self._threads:
            self._queue.put(None)


class TlsError(OSError):
    """A certificate or key that cannot be used, said with the file and what to do."""


def load_tls_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context from PEM files; a passphrase-protected key is refused by name (a
    daemon cannot type one, and OpenSSL's own prompt ends in "[Errno 22] Invalid argument")."""

    class Encrypted(Exception):
        pass

    def no_passphrase() -> str:
        raise Encrypted

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(str(cert_file), str(key_file), password=no_passphrase)
    except Encrypted:
        raise TlsError(
            f"the TLS key {key_file} is protected by a passphrase, which a server cannot ask "
            f"for: write an unencrypted copy readable only by this service's user (openssl pkey "
            f"-in {key_file} -out <new file>; chmod 600 it) and point key_file at it") from None
    except ssl.SSLError as exc:
        raise TlsError(
            f"the TLS certificate {cert_file} and key {key_file} cannot be used together "
            f"({exc.reason or exc}): both must be PEM, and the key the certificate's") from None
    except OSError as exc:
        raise TlsError(f"cannot read the TLS certificate {cert_file} or key {key_file} "
                       f"({exc.strerror or exc})") from None
    return ctx


class HttpServer:
    """``HttpServer(app, limits, host, port).start()`` -> the bound port; ``stop()`` ends it.

    ``on_event(name)`` is told ``opened`` (at accept, before any TLS handshake), ``closed``,
    ``evicted_idle``, ``evicted_slow``, ``evicted_handshake`` (a TLS connection whose handshake
    had not finished), ``refused_full`` (a connection closed at once: nothing could be
    evicted), ``accept_failed`` (a connection the OS would not give a file for: at the
    open-file limit), ``handshake_timeout`` / ``handshake_error`` / ``handshake_closed`` (a TLS
    handshake that took past ``handshake_timeout_s``, failed, or was cut by the client) and
    ``refused_<kind>`` for the server's own refusals (``timeout``, ``malformed``, ...)."""

    def __init__(self, app: App, limits: Limits, host: str, port: int, *,
                 ssl_context: ssl.SSLContext | None = None, name: str = "http",
                 on_event: Callable[[str], None] | None = None, reuse_port: bool = False) -> None:
        self.app, self.limits, self.name = app, limits, name
        self._on_event = on_event
        self.ssl_context = ssl_context  # the connections upgrade themselves with it
        self.log = log
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family, backlog=socket.SOMAXCONN,
                                         reuse_port=reuse_port)
        self.port = int(self.sock.getsockname()[1])
        self.conns: set[Connection] = set()
        # what every connection reads its heads into (the loop is one thread; the parser
        # copies what it keeps)
        self.scratch = memoryview(bytearray(64 * 1024))
        self.body_bytes = 0
        # buffers of handled bodies, kept for the next bodies (no allocation, zero-filling or
        # page faults per request); at most _SPARE_BYTES of them
        self._spares: list[bytearray] = []
        self._spare_bytes = 0
        self._inflight = {Route.WORK: 0, Route.CONTROL: 0}
        self._cap = {Route.WORK: limits.workers, Route.CONTROL: limits.max_control}
        # work_threads < 0: WORK requests are handled on the loop (an app answering with Later)
        self.work_on_loop = limits.work_threads < 0
        self._pools = {Route.WORK: _Pool(max(1, limits.work_threads or limits.workers), f"{name}-work"),
                       Route.CONTROL: _Pool(limits.control_workers, f"{name}-control")}
        # (connection, item, response) a pool thread answered in full itself: the loop does
        # the rest (_finish) when it next runs, without being woken for it (Connection.done)
        self.finished: deque = deque()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._listener: asyncio.AbstractServer | None = None
        self._accept_errors = 0  # since the last log line about them
        self._accept_logged = 0.0

    # -- life ------------------------------------------------------------------------
    def start(self) -> int:
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            raise self._error
        return self.port

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(self._loop_error)
        try:  # plain TCP even with TLS: see the module's docstring
            self._listener = self.loop.run_until_complete(self.loop.create_server(
                lambda: Connection(self), sock=self.sock, backlog=ACCEPT_BATCH))
            self.sock.listen(socket.SOMAXCONN)  # create_server listened with ACCEPT_BATCH
        except BaseException as exc:  # noqa: BLE001 - handed to start()'s caller
            self._error = exc
            self._started.set()
            return
        self.loop.call_later(self.limits.tick_s, self._tick)
        self._started.set()
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and close every connection (handlers still running finish unseen)."""
        if not self._thread.is_alive():
            self.sock.close()
            return

        def close_all() -> None:
            if self._listener is not None:
                self._listener.close()
            for conn in list(self.conns):
                conn.close()
            self.loop.call_later(0.05, self.loop.stop)  # let the closes reach the sockets

        self.loop.call_soon_threadsafe(close_all)
        self._thread.join(timeout)
        for pool in self._pools.values():
            pool.shutdown()

    # -- connections -----------------------------------------------------------------
    def opened(self, conn: Connection) -> None:
        if len(self.conns) >= self.limits.max_connections:
            victim = min((c for c in self.conns if c.state_key() is not None),
                         key=lambda c: c.state_key() or (9, 0.0), default=None)
            if victim is None:
                self.event("refused_full")
                conn.close()
                return
            reason = victim.eviction_reason()
            self.conns.discard(victim)
            victim.close()
            self.event(f"evicted_{reason}")
        self.conns.add(conn)
        conn.counted = True
        self.event("opened")

    def closed(self, conn: Connection) -> None:
        self.conns.discard(conn)
        if conn.counted:
            conn.counted = False
            self.event("closed")

    def drain_finished(self) -> None:
        """On the loop: finish the requests pool threads answered in full themselves."""
        finished = self.finished
        while finished:
            conn, item, response = finished.popleft()
            conn._finish(item, response, b"")

    def _tick(self) -> None:
        self.drain_finished()
        now = time.monotonic()
        for conn in list(self.conns):
            conn.tick(now)
        self.loop.call_later(self.limits.tick_s, self._tick)

    # -- shared budgets --------------------------------------------------------------
    def reserve(self, n: int) -> bool:
        """Hold ``n`` bytes of request body; False past ``body_budget_bytes`` (one request
        always fits when nothing else is held)."""
        if self.body_bytes and self.body_bytes + n > self.limits.body_budget_bytes:
            return False
        self.body_bytes += n
        return True

    def release(self, n: int) -> None:
        self.body_bytes -= n

    def body_buffer(self, n: int) -> bytearray:
        """A buffer of ``n`` bytes to read a body into (on the loop): a spare one resized, or a
        new one. Its old bytes are all overwritten before the body is handed to anyone."""
        if not self._spares:
            return bytearray(n)
        buf = self._spares.pop()  # the last given back: the likeliest still in the cache
        self._spare_bytes -= len(buf)
        have = len(buf)
        if have > n:
            del buf[n:]
        elif have < n:
            buf.extend(bytes(n - have))
        return buf

    def spare_buffer(self, buf: bytearray) -> None:
        """Keep a buffer nothing else holds for :meth:`body_buffer` (on the loop)."""
        if len(self._spares) < _SPARES and self._spare_bytes + len(buf) <= _SPARE_BYTES:
            self._spares.append(buf)
            self._spare_bytes += len(buf)

    def acquire(self, route: Route) -> bool:
        """A slot of the route's pool (on the loop); False when it is at its limit."""
        if self._inflight[route] >= self._cap[route]:
            return False
        self._inflight[route] += 1
        return True

    def run(self, route: Route, fn: Callable[..., None], *args: object) -> None:
        """Hand ``fn(*args)`` to the route's pool (on the loop, after :meth:`acquire`)."""
        self._pools[route].submit(self._inflight[route], fn, args)

    def done(self, route: Route) -> None:
        self._inflight[route] -= 1

    def event(self, name: str) -> None:
        if self._on_event is not None:
            try:
                self._on_event(name)
            except Exception:  # a metrics glitch must never stop the server
                log.exception("on_event(%r) failed", name)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """asyncio's accept loop meets EMFILE once per pending connection in a batch of up to
        the listen backlog, and logs a traceback for each (tens of thousands of lines a second
        while the open-file limit is reached): counted (``accept_failed``), logged once per
        ``_ACCEPT_LOG_S``."""
        if context.get("message") != "socket.accept() out of system resource":
            loop.default_exception_handler(context)
            return
        self.event("accept_failed")
        self._accept_errors += 1
        now = time.monotonic()
        if now - self._accept_logged >= _ACCEPT_LOG_S:
            log.error("%s: %d connection(s) could not be accepted (%s): the process is at its "
                      "open-file limit; raise it (ulimit -n, LimitNOFILE) well above "
                      "max_connections", self.name, self._accept_errors,
                      context.get("exception"))
            self._accept_errors, self._accept_logged = 0, now

    def log_exception(self, head: Head, exc: BaseException) -> None:
        log.error("%s %s %s failed", self.name, head.method, head.path, exc_info=exc)
