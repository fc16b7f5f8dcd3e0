"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` on :4317.

Threading model (measured in bench/bench_ingest.py, see docs/operations.md): grpcio's sync
server with a small thread pool. Each handler thread decodes (C extension), scores (numpy) and
queues the WAL record itself, then waits for the group commit: there is no hand-off between
threads on the hot path, and requests waiting on the same fsync are what a group commit
needs. The method is registered with raw-bytes (de)serialisers so no protobuf object is
ever built in Python; gzip request compression is undone by gRPC core, which enforces
``max_receive_message_length`` (= ``max_request_bytes``) on the *decompressed* size. The
client's deadline bounds what is counted: a call taken after it (less ``DEADLINE_MARGIN_S``)
is refused with nothing counted, and its commit wait ends there (docs/operations.md, "A gRPC
client's deadline").
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from agent.daemon_config import AgentSettings
from agent.export import (
    DEADLINE_MARGIN_S,
    ExportHandler,
    Outcome,
    export_response_bytes,
    retry_info_bytes,
    status_bytes,
)
from agent.workers import Worker
from httpserve import load_tls_context

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"

_CODES = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "too_large": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "internal": grpc.StatusCode.INTERNAL,
    "deadline": grpc.StatusCode.DEADLINE_EXCEEDED,
}


class _Backlog(ThreadPoolExecutor):
    """The server's thread pool, counting the RPCs waiting in it for a thread.

    gRPC's sync server hands each RPC to the pool before reading its message (the handler
    reads it), so a waiting RPC holds a stream, not its body; the handler then refuses it at
    once, with RetryInfo, when the backlog behind it is ``limit`` or more. This is the
    admission that sees the RPCs waiting inside the server, which gRPC core's cap
    (``maximum_concurrent_rpcs``) stood for: past it core answered a bare RESOURCE_EXHAUSTED
    (no RetryInfo: the Collector and the Go SDK drop the batch) or CANCELLED."""

    def __init__(self, workers: int) -> None:
        super().__init__(max_workers=workers, thread_name_prefix="grpc")
        self.waiting = 0
        self._lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.waiting += 1
        return super().submit(fn, *args, **kwargs)

    def started(self) -> int:
        """Called by the handler as it starts: how many RPCs still wait behind it."""
        with self._lock:
            self.waiting -= 1
            return self.waiting


#: the trailing metadata key naming the worker that answered (as HTTP's Carbonspan-Worker)
WORKER_KEY = "carbonspan-worker"


class GrpcReceiver:
    """A worker of ``carbonspan agent --workers N`` (agent/workers.py) names itself in the
    trailing metadata of every answer, OK or not: ``carbonspan-worker: k/N <agent id>`` (the
    kernel chose which worker took the connection, so every call on a channel is one
    worker's). Trailing, not initial, metadata: it rides on the status the call ends with
    anyway, where initial metadata would cost a send of its own per call."""

    def __init__(self, handler: ExportHandler, settings: AgentSettings, *,
                 reuse_port: bool = False, worker: Worker | None = None) -> None:
        self.handler = handler
        self.settings = settings
        self.port = 0
        self._retry_info = retry_info_bytes(settings.retry_after_s)
        self._who: tuple[tuple[str, str], ...] = ()
        if worker is not None:
            reuse_port = True  # workers share the port (agent/workers.py)
            self._who = ((WORKER_KEY, f"{worker.label} {settings.agent_id}"),)
        limit = settings.max_request_bytes
        # grpc_workers threads do the work - decode, score, WAL - (the measured sweet spot);
        # the RPCs waiting for one are counted, and past queue_size of them the handler itself
        # refuses (RESOURCE_EXHAUSTED with RetryInfo). No cap inside gRPC core.
        self._pool = _Backlog(settings.grpc_workers)
        self.server = grpc.server(
            self._pool,
            maximum_concurrent_rpcs=None,
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", 1 << 20),
                # a single agent refuses a port in use; workers share theirs (agent/workers.py)
                ("grpc.so_reuseport", 1 if reuse_port else 0),
            ],
        )
        method = grpc.unary_unary_rpc_method_handler(self._export)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Export": method}),)
        )

    def start(self) -> int:
        bind = self.settings.bind
        address = f"[{bind}]:{self.settings.grpc_port}" if ":" in bind else f"{bind}:{self.settings.grpc_port}"
        tls = self.settings.tls
        try:
            if tls.enabled:
                assert tls.cert_file is not None and tls.key_file is not None
                load_tls_context(tls.cert_file, tls.key_file)  # a clear error for a bad key
                creds = grpc.ssl_server_credentials(
                    [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())]
                )
                self.port = self.server.add_secure_port(address, creds)
            else:
                self.port = self.server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio raises this when the port cannot be bound
            raise OSError(f"cannot listen for OTLP/gRPC on {address} ({exc}); is the port in use?") from None
        if self.port == 0:
            raise OSError(f"cannot listen for OTLP/gRPC on {address} (port in use?)")
        self.server.start()
        return self.port

    def _export(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        h = self.handler
        backlog = self._pool.started()
        if self._who:
            context.set_trailing_metadata(self._who)
        if h.token is not None:
            auth = next((v for k, v in context.invocation_metadata() if k == "authorization"), None)
            if not h.authorized(auth if isinstance(auth, str) else None):
                h.count("grpc", "unauthenticated")
                context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'",
                )
        if backlog >= self.settings.queue_size:
            h.count("grpc", "exhausted")
            outcome = Outcome("exhausted", "the agent's queue is full (more than "
                              f"{self.settings.queue_size} requests waiting); retry after the "
                              "delay given")
        else:
            remaining = context.time_remaining()  # None without a deadline
            outcome = h.export(request, "protobuf", "grpc", deadline=None if remaining is None
                               else time.monotonic() + remaining - DEADLINE_MARGIN_S)
        if outcome.code == "ok":
            return export_response_bytes(outcome.rejected, outcome.message)
        code = _CODES[outcome.code]
        if outcome.code in ("exhausted", "unavailable"):
            # RetryInfo twice: as the status details (read by the Collector and the Go SDK,
            # which otherwise treat RESOURCE_EXHAUSTED as permanent and drop the batch) and as
            # its own trailer (read by the Python SDK)
            details = status_bytes(code.value[0], outcome.message, self._retry_info)
            context.set_trailing_metadata((
                ("grpc-status-details-bin", details),
                ("google.rpc.retryinfo-bin", self._retry_info),
                *self._who,
            ))
        context.abort(code, outcome.message)
        raise AssertionError("unreachable")  # context.abort raises

    def stop(self, grace_s: float) -> Any:
        """Stop accepting; in-flight RPCs get ``grace_s`` to finish. Returns a waitable event."""
        return self.server.stop(grace_s)
