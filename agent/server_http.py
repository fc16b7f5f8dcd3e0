"""OTLP/HTTP receiver on :4318: ``POST /v1/traces``, plus ``/metrics``, ``/healthz``, ``/readyz``.

Follows the OTLP/HTTP spec: protobuf (``application/x-protobuf``) or JSON
(``application/json``) bodies, ``Content-Encoding: gzip|deflate``, the response in the
request's content type (an ``ExportTraceServiceResponse`` on success, a ``google.rpc.Status``
on failure), 429/503 with ``Retry-After`` so exporters back off, 400 for malformed input,
413 past ``max_request_bytes`` (checked on the declared length before reading and again while
inflating). The standard library's threading server is enough here: gRPC carries the bulk.

Connections are capped at ``max_connections`` (one thread each; a keep-alive connection holds
its thread until it has been idle ``_Handler.timeout`` seconds). Past the cap a connection is
answered 503 + ``Retry-After`` + ``Connection: close`` by a short-lived thread with a 2-second
socket timeout, and past twice the cap it is closed at once, so neither idle keep-alives nor
a flood of slow clients can make the agent grow threads without bound.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from agent.daemon_config import AgentSettings
from agent.export import (
    BadEncoding,
    ExportHandler,
    TooLarge,
    export_response_bytes,
    inflate,
    status_bytes,
)
from agent.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

log = logging.getLogger("carbonspan.agent")

_STATUS = {"invalid": 400, "too_large": 413, "exhausted": 429, "unavailable": 503, "internal": 500}
_RPC_CODE = {400: 3, 401: 16, 404: 5, 411: 3, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}
_FORMATS = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",  # seen from some clients; same body
    "application/json": "json",
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    handler: ExportHandler
    settings: AgentSettings
    slots: threading.BoundedSemaphore  # connections served
    spare: threading.BoundedSemaphore  # connections being told "busy"

    def process_request(self, request: Any, client_address: Any) -> None:
        """Runs on the accept thread: serve, answer "busy", or close, without blocking."""
        if self.slots.acquire(blocking=False):
            self.handler.metrics.http_connections.inc()
            return super().process_request(request, client_address)
        self.handler.metrics.http_connections_refused.inc()
        if self.spare.acquire(blocking=False):
            threading.Thread(target=self._busy, args=(request, client_address),
                             name="http-busy", daemon=True).start()
        else:
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.handler.metrics.http_connections.dec()
            self.slots.release()

    def _busy(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(_Busy.timeout)
            _Busy(request, client_address, self)
        except Exception:  # a slow or broken client: nothing to tell it any more
            pass
        finally:
            self.shutdown_request(request)
            self.spare.release()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "carbonspan-agent"
    # TCP_NODELAY: a reply is two writes (headers, then body); with Nagle the body waits for
    # the client's delayed ACK of the headers (up to ~40 ms). Measured with bench ingest
    # --http-json: p50 52 -> 18 ms, 78,000 -> 221,000 spans/s.
    disable_nagle_algorithm = True
    timeout = 30  # a client that stalls mid-request loses its connection, not a thread forever
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("http %s " + format, self.client_address[0], *args)

    # -- GET -------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        h = self.server.handler
        if path == "/healthz":
            if h.is_alive():
                self._reply(200, b"ok\n", "text/plain; charset=utf-8")
            else:
                self._reply(503, b"unhealthy: the write-ahead log failed, so nothing more can be "
                                 b"acknowledged; fix the disk (see the agent's log) and restart the agent\n",
                            "text/plain; charset=utf-8")
        elif path == "/readyz":
            ready = h.is_ready()
            self._reply(
                200 if ready else 503,
                b"ready\n" if ready else f"not ready: the agent is {h.state()}\n".encode(),
                "text/plain; charset=utf-8",
            )
        elif path == "/metrics":
            self._reply(200, h.metrics.exposition(), METRICS_CONTENT_TYPE)
        else:
            self._reply(
                404,
                b"not found: try POST /v1/traces, GET /metrics, /healthz, /readyz\n",
                "text/plain; charset=utf-8",
            )

    # -- POST ------------------------------------------------------------------------
    def do_POST(self) -> None:
        h = self.server.handler
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        fmt = _FORMATS.get(ctype)
        reply_type = ctype if fmt else "application/json"
        if self.path.split("?", 1)[0] != "/v1/traces":
            return self._error(
                404,
                f"no such endpoint {self.path!r}; OTLP traces go to /v1/traces",
                reply_type,
                drain=True,
            )
        if not h.authorized(self.headers.get("Authorization")):
            h.count("http", "unauthenticated")
            return self._error(
                401,
                "missing or wrong bearer token: send 'Authorization: Bearer <token>'",
                reply_type,
                drain=True,
                extra={"WWW-Authenticate": 'Bearer realm="carbonspan"'},
            )
        if fmt is None:
            h.count("http", "invalid")
            return self._error(
                415,
                f"Content-Type {ctype or '(none)'!r} is not OTLP; use "
                "application/x-protobuf or application/json",
                reply_type,
                drain=True,
            )
        body = self._read_body(reply_type)
        if body is None:
            return
        try:
            data = inflate(body, self.headers.get("Content-Encoding") or "", h.max_request_bytes)
        except TooLarge as exc:
            h.count("http", "too_large")
            return self._error(413, str(exc), reply_type)
        except BadEncoding as exc:
            h.count("http", "invalid")
            return self._error(400, str(exc), reply_type)
        outcome = h.export(data, fmt, "http")
        if outcome.code != "ok":
            return self._error(_STATUS[outcome.code], outcome.message, reply_type)
        if fmt == "protobuf":
            payload = export_response_bytes(outcome.rejected, outcome.message)
        elif outcome.rejected:
            payload = orjson.dumps(
                {
                    "partialSuccess": {
                        "rejectedSpans": str(outcome.rejected),
                        "errorMessage": outcome.message,
                    }
                }
            )
        else:
            payload = b"{}"
        self._reply(200, payload, reply_type)

    def _read_body(self, reply_type: str) -> bytes | None:
        h = self.server.handler
        raw = self.headers.get("Content-Length")
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked(reply_type)
        if raw is None or not raw.strip().isdigit():
            h.count("http", "invalid")
            self._error(411, "a Content-Length header (or chunked encoding) is required",
                        reply_type, close=True)
            return None
        length = int(raw)
        if length > h.max_request_bytes:  # refuse without holding any of it in memory
            h.count("http", "too_large")
            close = not self._discard(length)
            self._error(
                413,
                f"request body is {length} bytes; the limit is "
                f"{h.max_request_bytes} (max_request_bytes): send smaller batches",
                reply_type,
                close=close,
            )
            return None
        return self.rfile.read(length)

    def _read_chunked(self, reply_type: str) -> bytes | None:
        """A chunked body, refused (413) once it passes ``max_request_bytes``; the rest of a
        refused body is read and dropped (up to 4x the limit) so the client sees the 413."""
        h = self.server.handler
        limit = h.max_request_bytes
        out = bytearray()
        total = 0
        try:
            while total <= 4 * limit:
                size = int(self.rfile.readline(1024).split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers: ignored
                    break
                total += size
                if total <= limit:
                    out += self.rfile.read(size)
                elif not self._discard(size, bound=4 * limit):
                    break
                self.rfile.readline(3)  # the CRLF after each chunk
        except ValueError:
            h.count("http", "invalid")
            self._error(400, "malformed chunked encoding", reply_type, close=True)
            return None
        if total > limit:
            h.count("http", "too_large")
            self._error(413, f"chunked request body passes the limit of {limit} bytes "
                        "(max_request_bytes): send smaller batches", reply_type,
                        close=total > 4 * limit)
            return None
        return bytes(out)

    def _discard(self, length: int, bound: int | None = None) -> bool:
        """Read and drop a refused body in small chunks when it is not absurdly large, so the
        client (still sending) reads our 413 instead of a connection reset. True if drained."""
        if length > (bound or 4 * self.server.handler.max_request_bytes):
            return False
        left = length
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                return False
            left -= len(chunk)
        return True

    def _error(
        self,
        status: int,
        message: str,
        reply_type: str,
        *,
        drain: bool = False,
        close: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        if drain:  # keep the connection usable: consume (and drop) a body we will not use
            raw = self.headers.get("Content-Length") or ""
            close = close or not (raw.isdigit() and self._discard(int(raw)))
        code = _RPC_CODE.get(status, 2)
        if _FORMATS.get(reply_type) == "protobuf":
            payload = status_bytes(code, message)
        else:
            payload = orjson.dumps({"code": code, "message": message})
        headers = dict(extra or {})
        if status in (429, 503):
            headers["Retry-After"] = str(self.server.settings.retry_after_s)
        self._reply(status, payload, reply_type, headers, close)

    def _reply(
        self,
        status: int,
        payload: bytes,
        ctype: str,
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)


class _Busy(_Handler):
    """Over ``max_connections``: one request answered 503 + Retry-After, then closed."""

    timeout = 2

    def handle(self) -> None:
        self.handle_one_request()

    def handle_one_request(self) -> None:
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline or not self.parse_request():
            return
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        raw = self.headers.get("Content-Length") or ""
        if raw.isdigit():  # read a small body so closing does not reset the connection
            self._discard(int(raw), bound=1 << 20)
        limit = self.server.settings.max_connections
        self._error(
            503,
            f"the agent is serving its limit of {limit} HTTP connections (max_connections); "
            "retry after the delay given, or reuse fewer connections",
            ctype if _FORMATS.get(ctype) else "application/json",
            close=True,
        )


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpReceiver:
    def __init__(self, handler: ExportHandler, settings: AgentSettings) -> None:
        cls = _Server6 if ":" in settings.bind else _Server
        try:
            self.server = cls((settings.bind, settings.http_port), _Handler)
        except OSError as exc:  # name what could not be bound, not just errno's words
            raise OSError(
                f"cannot listen for OTLP/HTTP on {settings.bind}:{settings.http_port} "
                f"({exc.strerror or exc}); check [agent] bind and http_port - is the port in use?"
            ) from None
        self.server.handler = handler
        self.server.settings = settings
        self.server.slots = threading.BoundedSemaphore(settings.max_connections)
        self.server.spare = threading.BoundedSemaphore(settings.max_connections)
        tls = settings.tls
        if tls.enabled:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
            # the handshake happens on first read, in the connection's thread, so a slow client
            # cannot stall the accept loop
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True,
                                                 do_handshake_on_connect=False)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="http",
            daemon=True,
        )

    def start(self) -> int:
        self._thread.start()
        return self.port

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
