"""One export request, protocol-neutral: auth, bounded inflate, admit, decode, ingest, outcome.

Both servers (``server_grpc``, ``server_http``) call :class:`ExportHandler` and only map its
:class:`Outcome` to their status codes, so the rules live in one place:

- auth: the bearer token is compared with ``hmac.compare_digest`` (constant time);
- size: ``max_request_bytes`` bounds the body *after* decompression, enforced while inflating
  (``zlib`` with ``max_length``), so a gzip bomb is refused after at most limit+1 bytes;
- admission before any work, so overload costs almost nothing and is said out loud;
- decode errors are the client's (INVALID_ARGUMENT / 400 with the decoder's message);
- the answer is OK only once the batch's partial is durable in the write-ahead log.
"""

from __future__ import annotations

import hmac
import logging
import time
import zlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agent import pipeline as pipeline_module
from agent.batch import SpanBatch
from agent.metrics import AgentMetrics
from agent.otlp.jsonfmt import WalkExpired
from agent.pipeline import STALL_READY_S, Pipeline, PipelineBusy, ShuttingDown
from agent.wal import WalError

if TYPE_CHECKING:
    from agent.debug_batch import LastBatch

log = logging.getLogger("carbonspan.agent")

Code = Literal["ok", "invalid", "too_large", "exhausted", "unavailable", "internal", "deadline"]


@dataclass(frozen=True, slots=True)
class Outcome:
    code: Code
    message: str = ""
    accepted: int = 0
    rejected: int = 0


class TooLarge(ValueError):
    pass


class BadEncoding(ValueError):
    pass


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """Decompress ``body`` (``gzip``, ``deflate`` or ``identity``) producing at most ``limit`` bytes.

    Raises TooLarge as soon as the output would pass ``limit`` (nothing past limit+1 bytes is
    ever held), BadEncoding for an unknown encoding or a damaged stream.
    """
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        if len(body) > limit:
            raise TooLarge(f"request body is {len(body)} bytes; the limit is {limit}")
        return body
    if enc == "gzip":
        wbits = [16 + zlib.MAX_WBITS]
    elif enc == "deflate":  # RFC 9110 says zlib-wrapped; some clients send raw deflate
        wbits = [zlib.MAX_WBITS, -zlib.MAX_WBITS]
    else:
        raise BadEncoding(
            f"Content-Encoding {encoding!r} is not supported; use gzip, deflate or none"
        )
    last: zlib.error | None = None
    for bits in wbits:
        try:
            return _inflate_stream(body, bits, limit)
        except zlib.error as exc:
            last = exc
    raise BadEncoding(f"the {enc} body could not be decompressed: {last}")


MAX_GZIP_MEMBERS = 64  # a gzip body may hold several members (RFC 1952 2.2); clients send one
_FIRST_FEED = 256  # input bytes given to a fresh member's decompressor, doubled while it runs


def _inflate_stream(body: bytes, wbits: int, limit: int) -> bytes:
    """Inflate every member of ``body`` in time linear in its size.

    Each member's decompressor is fed growing slices (256 bytes, doubling to 1 MiB) of a
    memoryview instead of the whole rest of the body: zlib copies what follows a member's end
    into ``unused_data``, so handing it the whole rest made a body of many small members cost
    quadratic time (200,000 empty members, 4 MB: 24 s). More than ``MAX_GZIP_MEMBERS``
    members is refused (BadEncoding, 400): no client needs them.
    """
    view = memoryview(body)
    out: list[bytes] = []
    size = pos = members = 0
    while pos < len(view):
        members += 1
        if members > MAX_GZIP_MEMBERS:
            raise BadEncoding(
                f"the gzip body holds more than {MAX_GZIP_MEMBERS} members; "
                "compress the request as one gzip stream"
            )
        d = zlib.decompressobj(wbits)
        feed = _FIRST_FEED
        while not d.eof and pos < len(view):
            piece = view[pos : pos + feed]
            chunk = d.decompress(piece, limit - size + 1)
            size += len(chunk)
            if size > limit or d.unconsumed_tail:
                raise TooLarge(
                    f"request inflates past the limit of {limit} bytes; send smaller batches"
                )
            out.append(chunk)
            pos += len(piece) - len(d.unused_data)
            feed = min(feed * 2, 1 << 20)
        if not d.eof:
            raise zlib.error("the compressed stream is truncated")
        if wbits <= 16:  # only gzip may hold several members
            break
    return b"".join(out)


_NO_SLOT: AbstractContextManager[object] = nullcontext()  # reusable: holds no state


class ExportHandler:
    def __init__(
        self,
        pipeline: Pipeline,
        metrics: AgentMetrics,
        decoders: dict[str, Callable[[bytes], SpanBatch]],
        decode_error: type[Exception],
        token: bytes | None,
        max_request_bytes: int,
        loop_decoders: Mapping[str, Callable[[bytes], SpanBatch | None]] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.metrics = metrics
        self.decoders = decoders
        # export_later's: None for a body the full decoder must take (the JSON Python walk)
        self.loop_decoders = loop_decoders or decoders
        self.decode_error = decode_error
        self.token = token
        self.max_request_bytes = max_request_bytes
        self.ready = False
        # the sources' freshness for the live page (SourceManager.health); None: no [sources]
        self.sources_health: Callable[[], dict] | None = None
        # GET /debug/last-batch ([agent] debug_last_batch): None, so nothing is kept, when off
        self.last_batch: LastBatch | None = None

    def is_ready(self) -> bool:
        """Ready: recovered, not draining, the WAL can still make acknowledgements true, and no
        commit has waited STALL_READY_S or more (a stalled disk acknowledges nothing: the
        load balancer should send the traffic elsewhere, and new exports get "unavailable"),
        and the last window close was archived (a chain directory that cannot be written
        leaves every span in the WAL, which then grows until the archive is writable again)."""
        return (
            self.ready
            and not self.pipeline.draining
            and not self.pipeline.wal.failed
            and self.pipeline.stalled_s < STALL_READY_S
            and self.pipeline.archive_failing is None
        )

    def is_alive(self) -> bool:
        """Live (``/healthz`` 200) unless the WAL failed: after a failed write or fsync nothing
        more can be acknowledged until a restart (an fsync error may have dropped dirty pages,
        so retrying it proves nothing - PostgreSQL restarts for the same reason), so the
        orchestrator's liveness probe should restart the agent, and it keeps restarting it
        until the disk is fixed."""
        return not self.pipeline.wal.failed

    def state(self) -> str:
        """Why the agent is not ready (or ``ready``), for /readyz and refusals."""
        if self.pipeline.draining:
            return "shutting down"
        if self.pipeline.wal.failed:
            return "not writing its write-ahead log (see its log)"
        stalled = self.pipeline.stalled_s
        if stalled >= STALL_READY_S:
            return (f"stalled: a write-ahead-log commit has waited {stalled:.1f} s (is the disk "
                    "frozen?)")
        failing = self.pipeline.archive_failing
        if failing is not None:
            return (f"failing to archive its windows for {time.monotonic() - failing[0]:.0f} s "
                    f"({failing[1]}); acknowledged spans are kept in the write-ahead log, which "
                    "grows until a window line can be written: fix the archive directory (space, "
                    "permissions; see the agent's log)")
        return "ready" if self.ready else "starting"

    def authorized(self, header: str | None) -> bool:
        """True when auth is off, or ``header`` is ``Bearer <token>`` (constant-time compare)."""
        if self.token is None:
            return True
        if not header or not header[:7].lower() == "bearer ":
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self.token)

    def count(self, protocol: str, outcome: str) -> None:
        self.metrics.requests.labels(protocol, outcome).inc()

    def export(
        self,
        body: bytes,
        fmt: str,
        protocol: str,
        work_slot: AbstractContextManager[object] = _NO_SLOT,
        deadline: float | None = None,
    ) -> Outcome:
        """Handle one decompressed request body in ``fmt`` (``protobuf`` or ``json``).

        Admission comes first and costs nothing, so a request past ``queue_size`` is refused
        at once; an admitted one then holds ``work_slot`` (gRPC: one of ``grpc_workers``) while
        it is decoded, scored and made durable. ``deadline`` (monotonic; gRPC's, less
        ``DEADLINE_MARGIN_S``, or ``COMMIT_WAIT_S`` after the arrival of an OTLP/HTTP request
        that waited for a thread): the time after which the client may no longer hear an answer. A
        request taken after it is refused with nothing counted (``deadline``), and a partial not
        durable by then is abandoned ("unavailable"): the agent never counts a batch whose
        client heard no OK, since that client sends it again."""
        if deadline is not None and deadline <= time.monotonic():
            return self._done(protocol, _late())
        refused = self._admit()
        if refused is not None:
            return self._done(protocol, refused)
        try:
            with work_slot:
                outcome = self._export(body, fmt, deadline)
            if self.last_batch is not None and outcome.code == "ok":
                self.last_batch.keep(body, fmt, protocol)  # a reference, explained on request
            return self._done(protocol, outcome)
        finally:
            self.pipeline.release()

    def export_later(self, body: bytes, fmt: str, protocol: str,
                     answer: Callable[[Outcome], None], *, wake: bool = True) -> str | None:
        """:meth:`export` without waiting for the group commit, for a caller that must not
        block (OTLP/HTTP's event loop). Why not, with nothing done and ``answer`` never called:
        ``"python_walk"`` when ``loop_decoders`` leave the body to the full decoder, or
        ``"pipeline_busy"`` (a window closing): hand the request to a thread that calls
        :meth:`export`. Else None, and ``answer(outcome)``
        is called exactly once: here at once for a refusal or a request with nothing to log,
        else from the thread that learns the partial is durable and merged (the pipeline's
        committer) or never will be (``Pipeline.ingest_later``)."""
        refused = self._admit()
        if refused is not None:
            answer(self._done(protocol, refused))
            return None
        try:
            batch = self._decode(body, fmt, self.loop_decoders)
        except _Refused as exc:
            self.pipeline.release()
            answer(self._done(protocol, exc.outcome))
            return None
        if batch is None:  # the full decoder's: not here
            self.pipeline.release()
            return "python_walk"

        def durable(error: WalError | None) -> None:
            self.pipeline.release()
            if error is not None:
                answer(self._done(protocol, Outcome("unavailable", f"{error}; retry")))
                return
            if self.last_batch is not None:
                self.last_batch.keep(body, fmt, protocol)  # a reference, explained on request
            answer(self._done(protocol, _accepted(batch)))

        try:
            self.pipeline.ingest_later(batch, durable, wake=wake)
        except PipelineBusy:  # a window closing: nothing counted or queued, to a thread
            self.pipeline.release()
            return "pipeline_busy"
        except Exception as exc:  # nothing queued: durable is never called
            self.pipeline.release()
            answer(self._done(protocol, _not_ingested(exc, batch)))
        return None

    def _admit(self) -> Outcome | None:
        """Readiness, then admission (costs nothing): the refusal, or None once admitted (the
        caller then owes ``pipeline.release()``)."""
        if not self.is_ready():
            return Outcome("unavailable", f"the agent is {self.state()}; retry")
        if not self.pipeline.admit():
            return Outcome("exhausted", f"the agent's queue is full ({self.pipeline.queue_size} "
                           "requests in flight); retry after the delay given")
        return None

    def _decode(self, body: bytes, fmt: str,
                decoders: Mapping[str, Callable[..., SpanBatch | None]] | None = None,
                deadline: float | None = None) -> SpanBatch | None:
        decoder = (decoders or self.decoders)[fmt]
        try:
            if deadline is not None and fmt == "json":  # the Python walk may wait its turn
                return decoder(body, deadline=deadline)
            return decoder(body)
        except WalkExpired:  # not walked: its answer would have come too late to count
            raise _Refused(_late()) from None
        except self.decode_error as exc:
            raise _Refused(Outcome("invalid", str(exc))) from None
        except Exception as exc:  # a decoder bug must not take the agent down: say it, log it
            log.exception("decoder failed on a %d-byte %s request", len(body), fmt)
            raise _Refused(Outcome(
                "invalid", f"the request could not be decoded ({type(exc).__name__})")) from None

    def _export(self, body: bytes, fmt: str, deadline: float | None = None) -> Outcome:
        try:
            batch = self._decode(body, fmt, deadline=deadline)
        except _Refused as exc:
            return exc.outcome
        assert batch is not None  # the full decoders always give a batch
        wait_s = None
        if deadline is not None:
            wait_s = deadline - time.monotonic()
            if wait_s <= 0:  # decoding took the client's last moment: nothing counted
                return _late()
        try:
            self.pipeline.ingest(batch, wait_s)
        except Exception as exc:
            return _not_ingested(exc, batch)
        return _accepted(batch)

    def _done(self, protocol: str, outcome: Outcome) -> Outcome:
        self.count(protocol, outcome.code)
        return outcome


class _Refused(Exception):
    """A request refused before anything was queued, with its outcome."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


#: seconds kept back from a gRPC client's deadline for the answer to reach it: a request is
#: made durable by ``deadline - DEADLINE_MARGIN_S`` or refused, so the OK is never sent so late
#: that the client has already given up (and will send the batch again)
DEADLINE_MARGIN_S = 0.25


def _late() -> Outcome:
    return Outcome("deadline", "the request's deadline (the gRPC client's, or "
                   f"{pipeline_module.COMMIT_WAIT_S:g} s after an OTLP/HTTP request that waited "
                   "for a thread arrived) had (all but) passed before the agent could take it, "
                   "so nothing of it was counted; retry (with a longer deadline, or when the "
                   "agent is less busy)")


def _accepted(batch: SpanBatch) -> Outcome:
    return Outcome("ok", _rejected_message(batch), len(batch), batch.rejected)


def _not_ingested(exc: Exception, batch: SpanBatch) -> Outcome:
    """The answer for a batch the pipeline did not take: ShuttingDown and WalError are "retry";
    anything else is a scoring bug, logged."""
    if isinstance(exc, (ShuttingDown, WalError)):
        return Outcome("unavailable", f"{exc}; retry")
    log.exception("scoring a batch of %d spans failed", len(batch))
    return Outcome("internal", f"the batch could not be scored ({type(exc).__name__})")


def _rejected_message(batch: SpanBatch) -> str:
    if not batch.rejected:
        return ""
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(batch.counters.items()) if v)
    return f"{batch.rejected} spans rejected" + (f" ({reasons})" if reasons else "")


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def retry_info_bytes(seconds: int) -> bytes:
    """``google.rpc.RetryInfo{retry_delay: Duration{seconds}}`` in wire form, by hand.

    RetryInfo.retry_delay is field 1 (length-delimited), Duration.seconds field 1 (varint);
    the OTel exporters read it from the ``google.rpc.retryinfo-bin`` trailer to back off.
    """
    duration = b"\x08" + encode_varint(seconds)
    return b"\x0a" + encode_varint(len(duration)) + duration


RETRY_INFO_TYPE_URL = b"type.googleapis.com/google.rpc.RetryInfo"


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def export_response_bytes(rejected: int, message: str) -> bytes:
    """``ExportTraceServiceResponse`` wire bytes; empty when nothing was rejected.

    partial_success is field 1; inside it rejected_spans is field 1 (int64 varint) and
    error_message field 2 (string), per opentelemetry-proto collector/trace/v1.
    """
    if not rejected and not message:
        return b""
    msg = message.encode()
    inner = b"\x08" + encode_varint(rejected) + b"\x12" + encode_varint(len(msg)) + msg
    return b"\x0a" + encode_varint(len(inner)) + inner


def status_bytes(code: int, message: str, retry_info: bytes | None = None) -> bytes:
    """``google.rpc.Status{code, message[, details: [Any(RetryInfo)]]}`` wire bytes: the
    OTLP/HTTP error body for protobuf, and the gRPC ``grpc-status-details-bin`` trailer.

    The OTLP spec lets a client retry RESOURCE_EXHAUSTED only when the server sends RetryInfo;
    the Collector's exporter and the Go SDK look for it in the status details (gRPC's rich
    error model), the Python SDK in the ``google.rpc.retryinfo-bin`` trailer, so a gRPC refusal
    sends both. Status: code field 1 (varint), message field 2, details field 3 (repeated Any);
    Any: type_url field 1, value field 2.
    """
    out = b"\x08" + encode_varint(code) + _field(2, message.encode())
    if retry_info is not None:
        out += _field(3, _field(1, RETRY_INFO_TYPE_URL) + _field(2, retry_info))
    return out
