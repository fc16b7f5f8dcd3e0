"""OTLP/HTTP receiver on :4318: ``POST /v1/traces``, plus ``/metrics``, ``/healthz``, ``/readyz``,
``/`` (the live page) and, when enabled, ``/debug/last-batch`` (agent/debug_batch.py).

Follows the OTLP/HTTP spec: protobuf (``application/x-protobuf``) or JSON
(``application/json``) bodies, ``Content-Encoding: gzip|deflate``, the response in the
request's content type (an ``ExportTraceServiceResponse`` on success, a ``google.rpc.Status``
on failure), 429/503 with ``Retry-After`` so exporters back off, 400 for malformed input,
413 past ``max_request_bytes`` (refused on the declared length before any of the body is read,
and again while inflating).

The connections are ``httpserve``'s (one event loop, httptools' parser): at most
``max_connections`` open, TLS ones counted from their accept (before the handshake), the
longest-idle (then the oldest still arriving or handshaking) evicted to make room for a new
one, one deadline of ``http_request_timeout_s`` for each request's head and body. ``/healthz``
and ``/readyz`` are answered on the loop itself, so they answer whatever the ingest load;
``/metrics`` has a pool of its own. An export (``http_workers = 0``, the default) is decoded,
scored and queued for the WAL on the loop itself, and answered once its group commit is durable
(``httpserve.Later``, answered by the pipeline's committer thread): no thread hand-off and no
thread sleeping through the fsync per request. The WAL's writer is woken once per turn of the
loop, after the turn's reads, not once per export: the exports that arrived together share one
wake-up (a context switch and a turn at the GIL each) and one group commit. Bodies over ``LOOP_MAX_BYTES`` on the wire (or
4 x that inflated), JSON the C walker leaves to the Python walk and exports that find the
pipeline busy for 5 ms (a window closing) go to ``SLOW_THREADS`` threads
of the agent's own, which wait for the commit as before. ``http_workers = N`` > 0 runs every
export in a pool of N threads instead (as gRPC's ``grpc_workers``). At most ``queue_size``
exports are admitted (handled, or waiting for their commit or a thread), past which the answer
is 429.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, urlsplit

import orjson

from agent import pipeline
from agent.daemon_config import AgentSettings
from agent.export import (
    BadEncoding,
    ExportHandler,
    Outcome,
    TooLarge,
    export_response_bytes,
    inflate,
    status_bytes,
)
from agent.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from agent.otlp.jsonfmt import WALK_BUDGET
from agent.workers import Worker
from httpserve import Head, HttpServer, Later, Limits, Request, Response, Route, load_tls_context

log = logging.getLogger("carbonspan.agent")

_STATUS = {"invalid": 400, "too_large": 413, "exhausted": 429, "unavailable": 503, "internal": 500,
           "deadline": 503}  # waited for a thread past COMMIT_WAIT_S from its arrival: retry
_RPC_CODE = {400: 3, 401: 16, 404: 5, 408: 4, 411: 3, 413: 8, 415: 3, 429: 8, 431: 8, 500: 13,
             503: 14}
_FORMATS = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",  # seen from some clients; same body
    "application/json": "json",
}
_TEXT = "text/plain; charset=utf-8"
_INGEST = "/v1/traces"
_DEBUG = "/debug/last-batch"  # agent/debug_batch.py, when [agent] debug_last_batch is on
# the server's own refusals, as ExportHandler outcomes (for carbonspan_requests_total)
_KIND_OUTCOME = {"malformed": "invalid", "too_large": "too_large", "timeout": "invalid",
                 "busy": "exhausted", "head_too_large": "invalid", "internal": "internal"}


def _content_type(head: Head | None) -> str:
    """The media type of the request's Content-Type, lower case (each request reads it three
    times, so the few raw values clients send are kept, at most ``_CTYPES_MAX`` of them)."""
    if head is None:
        return ""
    raw = head.headers.get("content-type", "")
    ctype = _CTYPES.get(raw)
    if ctype is None:
        ctype = raw.split(";", 1)[0].strip().lower()
        if len(_CTYPES) < _CTYPES_MAX:
            _CTYPES[raw] = ctype
    return ctype


_CTYPES: dict[str, str] = {}
_CTYPES_MAX = 64


def _answer_by(request: Request) -> float:
    """When an export waiting for a thread must be answered: ``COMMIT_WAIT_S`` after it arrived,
    however long it waited. Later its client (the Collector's default timeout is 5 s) may have
    given up and will send it again, so an OK then would count it twice."""
    return (request.received or time.monotonic()) + pipeline.COMMIT_WAIT_S


class OtlpHttpApp:
    """The agent's routes, on top of ``httpserve`` (see ``httpserve.App``).

    A worker of ``carbonspan agent --workers N`` (agent/workers.py) names itself in a
    ``Carbonspan-Worker: k/N <agent id>`` header on every answer and in the bodies of
    ``/healthz`` and ``/readyz``: the kernel chose which worker took the connection."""

    def __init__(self, handler: ExportHandler, settings: AgentSettings,
                 worker: Worker | None = None) -> None:
        self.handler = handler
        self.settings = settings
        self.worker = worker
        self.on_loop = on_loop(settings)
        # started with the first export the loop hands off
        self._slow: ThreadPoolExecutor | None = None
        self._wake_due = False  # a wake of the WAL's writer is scheduled on the loop
        self._who = b""
        self._headers: tuple[tuple[str, str], ...] = ()
        if worker is not None:
            self._who = f" (worker {worker.label}, {settings.agent_id}, pid {os.getpid()})".encode()
            self._headers = (("Carbonspan-Worker", f"{worker.label} {settings.agent_id}"),)

    def route(self, head: Head) -> Route:
        path = head.path
        if path == _INGEST and head.method == "POST":
            return Route.WORK
        return Route.CONTROL if path in ("/metrics", "/", _DEBUG) else Route.INLINE

    def check(self, head: Head) -> Response | None:
        """Refusals known from the head: no body is read (or held) for them."""
        h = self.handler
        if not h.authorized(head.headers.get("authorization")):
            h.count("http", "unauthenticated")
            return self.error(head, 401, "missing or wrong bearer token: send "
                              "'Authorization: Bearer <token>'",
                              extra=(("WWW-Authenticate", 'Bearer realm="carbonspan"'),))
        ctype = _content_type(head)
        if ctype not in _FORMATS:
            h.count("http", "invalid")
            return self.error(head, 415, f"Content-Type {ctype or '(none)'!r} is not OTLP; use "
                              "application/x-protobuf or application/json")
        if "content-length" not in head.headers and not head.chunked:
            h.count("http", "invalid")
            return self.error(head, 411, "a Content-Length header (or chunked encoding) is "
                              "required", close=True)
        return None

    def handle(self, request: Request) -> Response | Later:
        head = request.head
        if head.method == "POST" and head.path == _INGEST:  # the hot path first
            return self._export(request)
        if head.method == "GET" and head.path in ("/healthz", "/readyz", "/metrics"):
            return self._get(head.path)
        if head.method == "GET" and head.path == "/":
            return self._page(head)
        if head.method == "GET" and head.path == _DEBUG:
            return self._last_batch(head)
        hint = ("OTLP traces go to POST /v1/traces; also GET /, /metrics, /healthz, /readyz"
                + (f", {_DEBUG}" if self.handler.last_batch is not None else ""))
        return self.error(head, 404, f"no such endpoint {head.method} {head.target!r}: {hint}")

    def _get(self, path: str) -> Response:
        h = self.handler
        who, headers = self._who, self._headers
        if path == "/healthz":
            if h.is_alive():
                return Response(200, b"ok" + who + b"\n", _TEXT, headers)
            return Response(503, b"unhealthy" + who + b": the write-ahead log failed, so nothing "
                                 b"more can be acknowledged; fix the disk (see the agent's log) "
                                 b"and restart the agent\n", _TEXT, headers)
        if path == "/readyz":
            if h.is_ready():
                return Response(200, b"ready" + who + b"\n", _TEXT, headers)
            return Response(503, b"not ready" + who + f": the agent is {h.state()}\n".encode(),
                            _TEXT, headers)
        return Response(200, h.metrics.scrape(), METRICS_CONTENT_TYPE, headers)

    def _page(self, head: Head) -> Response:
        """The live page (agent/livepage.py), behind the ingest token when auth is on."""
        h = self.handler
        if not h.authorized(head.headers.get("authorization")):
            return self.error(head, 401, "missing or wrong bearer token: send "
                              "'Authorization: Bearer <token>'",
                              extra=(("WWW-Authenticate", 'Bearer realm="carbonspan"'),))
        from agent.livepage import render

        open_report, recent = h.pipeline.live_view()
        health = h.sources_health() if h.sources_health is not None else None
        state = "ready" if h.is_ready() else h.state()
        share, workers = h.metrics.share, None
        if share is not None:  # --workers N: every worker's figures (agent/metrics_share.py)
            from agent.metrics_share import compact

            share.want_live()  # in memory: the publisher thread touches the file
            workers = [{"worker": share.index, "agent_id": self.settings.agent_id,
                        "state": state, "age": 0.0,
                        "open": None if open_report is None else compact(open_report),
                        "recent": [compact(r) for r in recent]}]
            workers += [share.peer_live(k) for k in range(share.count) if k != share.index]
            workers.sort(key=lambda w: w["worker"])
        page = render(self.settings.agent_id, state, open_report, recent, health, workers,
                      share.index if share is not None else 0)
        return Response(200, page, "text/html; charset=utf-8",
                        (("Cache-Control", "no-store"), *self._headers))

    def _last_batch(self, head: Head) -> Response:
        """The explain view of the last acknowledged batch (agent/debug_batch.py): behind the
        ingest token when auth is on; 404 saying how to enable it when it is off."""
        h = self.handler
        if not h.authorized(head.headers.get("authorization")):
            return self.error(head, 401, "missing or wrong bearer token: send "
                              "'Authorization: Bearer <token>'",
                              extra=(("WWW-Authenticate", 'Bearer realm="carbonspan"'),))
        if h.last_batch is None:
            from agent.debug_batch import ENABLE_HINT

            return self.error(head, 404, ENABLE_HINT)
        query = parse_qs(urlsplit(head.target).query)
        fmt = query.get("format", [""])[-1].lower()
        accept = head.header("accept").lower()
        if fmt not in ("", "json", "table"):
            return self.error(head, 400, f"format={fmt!r}: use format=json (the default) or format=table")
        as_table = fmt == "table" or (not fmt and "text/plain" in accept and "json" not in accept)
        try:
            body = h.last_batch.view(as_table)
        except Exception as exc:  # the batch was acknowledged, so this is ours: say it, log it
            log.exception("explaining the last batch failed")
            return self.error(head, 500, f"the last batch could not be explained ({type(exc).__name__}: {exc})")
        return Response(200, body, _TEXT if as_table else "application/json",
                        (("Cache-Control", "no-store"),))

    def _export(self, request: Request) -> Response | Later:
        """On the loop (``http_workers = 0``): decode, score and queue the batch for the WAL,
        and answer once its group commit is durable (``ExportHandler.export_later``); what the
        loop should not decode goes to the slow threads. In an ``http_workers`` thread: all of
        it here, waiting for the commit."""
        if not self.on_loop:  # answered within COMMIT_WAIT_S of its arrival, as a hand-off is
            return self._export_here(request, _answer_by(request))
        head = request.head
        if len(request.body) > LOOP_MAX_BYTES:
            return self._hand_off(request, "large")
        data = request.body
        encoding = head.header("content-encoding")
        if encoding:  # a gzip body (the Collector's default) is inflated here while it is small
            try:
                data = inflate(data, encoding, min(LOOP_MAX_BYTES * 4, self.handler.max_request_bytes))
            except TooLarge:  # the thread inflates it again up to max_request_bytes (or 413)
                return self._hand_off(request, "large")
            except BadEncoding as exc:
                self.handler.count("http", "invalid")
                return self.error(head, 400, str(exc))
        fmt = _FORMATS[_content_type(head)]
        later = Later()
        not_here = self.handler.export_later(
            data, fmt, "http",
            lambda outcome: later.answer(self._answer(head, fmt, outcome)), wake=False)
        if not_here is not None:
            return self._hand_off(request, not_here)
        if not self._wake_due:  # one wake of the writer per turn of the loop, after its reads
            self._wake_due = True
            asyncio.get_running_loop().call_soon(self._wake_wal)
        return later

    def _wake_wal(self) -> None:
        """On the loop, after the turn's exports: wake the WAL's writer once for all their
        records (appended with ``wake=False``), so they share one wake-up and one group commit."""
        self._wake_due = False
        self.handler.pipeline.wake_wal()

    def _hand_off(self, request: Request, reason: str) -> Later:
        """Export ``request`` in a slow thread (from the loop); answered from there."""
        self.handler.metrics.http_handed_off.labels(reason).inc()
        if self._slow is None:
            self._slow = ThreadPoolExecutor(SLOW_THREADS, "http-slow")
        later = Later()
        deadline = _answer_by(request)

        def run() -> None:
            try:
                response = self._export_here(request, deadline)
            except Exception as exc:  # the request must be answered whatever happened
                log.exception("an OTLP/HTTP export failed")
                response = self.error(request.head, 500, "the request could not be handled "
                                      f"({type(exc).__name__})")
            later.answer(response)

        self._slow.submit(run)
        return later

    def close(self) -> None:
        """Stop the slow threads (their exports already answered or failing with the pipeline)."""
        if self._slow is not None:
            self._slow.shutdown(wait=False, cancel_futures=False)

    def _export_here(self, request: Request, deadline: float | None = None) -> Response:
        h = self.handler
        head = request.head
        fmt = _FORMATS[_content_type(head)]
        try:
            data = inflate(request.body, head.header("content-encoding"), h.max_request_bytes)
        except TooLarge as exc:
            h.count("http", "too_large")
            return self.error(head, 413, f"{exc} (max_request_bytes)")
        except BadEncoding as exc:
            h.count("http", "invalid")
            return self.error(head, 400, str(exc))
        return self._answer(head, fmt, h.export(data, fmt, "http", deadline=deadline))

    def _answer(self, head: Head, fmt: str, outcome: Outcome) -> Response:
        if outcome.code != "ok":
            return self.error(head, _STATUS[outcome.code], outcome.message)
        if fmt == "protobuf":
            payload = export_response_bytes(outcome.rejected, outcome.message)
        elif outcome.rejected:
            payload = orjson.dumps({"partialSuccess": {"rejectedSpans": str(outcome.rejected),
                                                       "errorMessage": outcome.message}})
        else:
            payload = b"{}"
        return Response(200, payload, _content_type(head), self._headers)

    def refuse(self, head: Head | None, status: int, kind: str, message: str) -> Response:
        """The server's own refusals, counted and worded for OTLP clients."""
        if head is not None and head.method == "POST" and head.path == _INGEST:
            self.handler.count("http", _KIND_OUTCOME.get(kind, "invalid"))
        if kind == "busy":
            status = 429 if head is not None and head.path == _INGEST else 503
            message += "; retry after the delay given"
        elif kind == "too_large":
            message += f" (max_request_bytes = {self.handler.max_request_bytes}): send smaller batches"
        elif kind == "timeout":
            message += " (http_request_timeout_s): send the whole request at once, or retry"
        return self.error(head, status, message)

    def error(self, head: Head | None, status: int, message: str, *, close: bool = False,
              extra: tuple[tuple[str, str], ...] = ()) -> Response:
        """A refusal in the request's content type: ``google.rpc.Status`` for protobuf, else
        JSON ``{code, message}``; 429 and 503 carry ``Retry-After``."""
        ctype = _content_type(head)
        code = _RPC_CODE.get(status, 2)
        if _FORMATS.get(ctype) == "protobuf":
            payload = status_bytes(code, message)
        else:
            ctype = "application/json"
            payload = orjson.dumps({"code": code, "message": message})
        if status in (429, 503):
            extra = (*extra, ("Retry-After", str(self.settings.retry_after_s)))
        return Response(status, payload, ctype, extra + self._headers, close)


#: an export body larger than this on the wire, or than 4 x this inflated, is handled off the
#: loop (decoding it would hold every other connection back longer than a few ms)
LOOP_MAX_BYTES = 1 << 20
#: threads for the exports the loop hands off (large or compressed bodies, JSON for the Python
#: walk); each waits through its group commit, as an ``http_workers`` thread does
SLOW_THREADS = 4


def on_loop(settings: AgentSettings) -> bool:
    """Exports decoded on the event loop: ``http_workers = 0`` and the C protobuf decoder built
    (without it every decode is the Python reference's, too slow for the loop)."""
    from agent.otlp import FAST_DECODER

    return settings.http_workers == 0 and FAST_DECODER


def http_limits(settings: AgentSettings) -> Limits:
    """The agent's settings as the server's limits (docs/operations.md, HTTP connections)."""
    return Limits(
        max_connections=settings.max_connections,
        request_timeout_s=settings.http_request_timeout_s,
        idle_timeout_s=settings.http_idle_timeout_s,
        max_body_bytes=settings.max_request_bytes,
        # bodies held at once: eight of the largest, and never less than 64 MiB
        body_budget_bytes=max(8 * settings.max_request_bytes, 64 << 20),
        workers=settings.queue_size,  # admitted: handled, or waiting for one of
        # -1: exports on the loop (http_workers 0 with the C decoder), else N threads
        work_threads=-1 if on_loop(settings) else settings.http_workers,
    )


class HttpReceiver:
    def __init__(self, handler: ExportHandler, settings: AgentSettings,
                 worker: Worker | None = None) -> None:
        tls = settings.tls
        ctx = None
        if tls.enabled:
            assert tls.cert_file is not None and tls.key_file is not None
            ctx = load_tls_context(tls.cert_file, tls.key_file)
        metrics = handler.metrics
        WALK_BUDGET.on_walk = lambda waited: metrics.json_python_walks.labels(
            "true" if waited else "false").inc()

        def on_event(name: str) -> None:
            if name == "opened":
                metrics.http_connections.inc()
            elif name == "closed":
                metrics.http_connections.dec()
            elif name.startswith("evicted_"):
                metrics.http_connections_evicted.labels(name[len("evicted_"):]).inc()
            elif name.startswith("handshake_"):
                metrics.http_tls_handshake_failures.labels(name[len("handshake_"):]).inc()
            elif name == "accept_failed":
                metrics.http_accept_failed.inc()
            elif name == "refused_full":
                metrics.http_connections_refused.inc()
            elif name == "refused_timeout":
                metrics.http_request_timeouts.inc()

        try:
            self.app = OtlpHttpApp(handler, settings, worker)
            self.server = HttpServer(self.app,
                                     http_limits(settings), settings.bind, settings.http_port,
                                     ssl_context=ctx, on_event=on_event,
                                     reuse_port=worker is not None)
        except OSError as exc:  # name what could not be bound, not just errno's words
            raise OSError(
                f"cannot listen for OTLP/HTTP on {settings.bind}:{settings.http_port} "
                f"({exc.strerror or exc}); check [agent] bind and http_port - is the port in use?"
            ) from None
        self.port = self.server.port

    def start(self) -> int:
        return self.server.start()

    def stop(self) -> None:
        self.server.stop()
        self.app.close()
