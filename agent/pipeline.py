"""From decoded batches to archived windows: admission, scoring, the WAL, window closing.

A request's life: :meth:`Pipeline.admit` (bounded: beyond ``queue_size`` requests in flight
the servers answer RESOURCE_EXHAUSTED / 429 so clients back off), decode, :meth:`ingest`
(score outside any lock, then queue the partial for the WAL and park it on the open window
under one lock, so that log order = arrival order), wait for the group commit, merge every
partial the log now holds durably into the window (in log order), answer OK. Only then has
the agent promised anything, and the WAL keeps that promise across ``kill -9``: on restart
:meth:`restore` merges the logged partials, in order, back into the window they belong to.

A partial is merged only once its WAL record is durable. If the log fails (a full or broken
disk), the requests it could not make durable get "unavailable, retry" and their partials are
dropped, never merged: the client's retry is then the only copy, so nothing is counted twice.

A window closes when ``window_seconds`` have passed, when it reaches ``max_window_spans``, and
on shutdown; closing builds the report, appends it to the archive (fsynced) and only then
truncates the WAL. A window with no spans writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agent.archive import ArchiveWriter, RecoveryReport, utc_rfc3339
from agent.batch import SpanBatch
from agent.metrics import AgentMetrics
from agent.wal import WalError, WriteAheadLog

log = logging.getLogger("carbonspan.agent")


class Partial(Protocol):
    """What the pipeline needs of ``agent.score.WindowPartial``."""

    spans: int

    def merge(self, other: Any) -> Any: ...
    def to_bytes(self) -> bytes: ...


class ShuttingDown(RuntimeError):
    """The agent is draining: the request was not accepted (clients retry elsewhere/later)."""


def now_ns() -> int:
    """Wall-clock ns rounded to microseconds, so a window start survives its RFC 3339 form."""
    return time.time_ns() // 1000 * 1000


def rfc3339_to_ns(text: str) -> int:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


@dataclass(slots=True)
class OpenWindow:
    """The window being filled. ``spans``/``requests`` count merged (durable) partials only;
    ``pending`` holds ``(wal ticket, partial, spans)`` queued for the WAL, in log order."""

    start_ns: int
    partial: Any
    spans: int = 0
    requests: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    pending: deque[tuple[int, Any, int]] = field(default_factory=deque)
    pending_spans: int = 0


@dataclass(frozen=True, slots=True)
class Scoring:
    """The scoring functions the pipeline calls (real ones from ``agent.score``/``agent.window``)."""

    score: Callable[[SpanBatch], Any]  # batch -> WindowPartial
    empty: Callable[[], Any]  # -> WindowPartial.empty()
    from_bytes: Callable[[bytes], Any]  # WAL payload -> WindowPartial
    report: Callable[[Any, int, int, dict[str, int]], dict[str, Any]]  # -> report dict
    # called with each live partial once it is durable and merged (never on WAL replay): the
    # measured sources count I/O ops here, so they divide energy by acknowledged ops only
    accepted: Callable[[Any], None] | None = None


class Pipeline:
    def __init__(
        self,
        scoring: Scoring,
        archive: ArchiveWriter,
        wal: WriteAheadLog,
        metrics: AgentMetrics,
        *,
        window_seconds: float,
        max_window_spans: int,
        queue_size: int,
    ) -> None:
        self.scoring = scoring
        self.archive = archive
        self.wal = wal
        self.metrics = metrics
        self.window_ns = int(window_seconds * 1e9)
        self.max_window_spans = max_window_spans
        self.queue_size = queue_size
        self._lock = threading.Lock()
        self._admit_lock = threading.Lock()
        self._inflight = 0
        self._accepting = True  # admission open; False from the stop signal on
        self._closed = False  # the window is closed for good (shutdown)
        self._window = OpenWindow(now_ns(), scoring.empty())
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        metrics.queue_capacity.set(queue_size)
        metrics.set_gauge_functions(lambda: self._inflight, lambda: self._window.spans)

    # -- admission ---------------------------------------------------------------------
    def admit(self) -> bool:
        """Take a queue slot without waiting; False means "answer 429/RESOURCE_EXHAUSTED"."""
        with self._admit_lock:
            if self._inflight >= self.queue_size or not self._accepting:
                return False
            self._inflight += 1
            return True

    def release(self) -> None:
        with self._admit_lock:
            self._inflight -= 1

    @property
    def draining(self) -> bool:
        """True once stop_accepting was called: admitted requests finish, no new ones come in."""
        return not self._accepting

    @property
    def inflight(self) -> int:
        return self._inflight

    # -- ingest ------------------------------------------------------------------------
    def ingest(self, batch: SpanBatch) -> None:
        """Score ``batch``, make its partial durable, then merge it into the open window.

        Returns once the partial is fsynced in the WAL (and merged): the caller may then
        answer OK. Raises ShuttingDown or ``agent.wal.WalError`` (answer "unavailable,
        retry"); in both cases nothing of the batch is in any window.
        """
        self._count_rejections(batch)
        n = len(batch)
        if n == 0 and not batch.rejected and not any(batch.counters.values()):
            return  # nothing to score and nothing to count
        partial = self.scoring.score(batch)
        payload = partial.to_bytes()
        with self._lock:
            if self._closed:
                raise ShuttingDown("the agent is shutting down")
            w = self._window
            ticket = self.wal.append(w.start_ns, payload)  # WalError: nothing parked, nothing merged
            w.pending.append((ticket, partial, n))
            w.pending_spans += n
            if w.spans + w.pending_spans >= self.max_window_spans:
                try:  # closing waits for the window's pending records and merges them
                    self._close_locked(now_ns(), "size")
                except Exception:  # logged; the window stays open (its records are in the WAL)
                    pass
        try:
            self.wal.wait(ticket)
        finally:
            with self._lock:  # merge what is durable now (ours, and any earlier ticket's)
                self._merge_durable_locked(self._window)
        self.metrics.spans_accepted.inc(n)

    def _merge_durable_locked(self, w: OpenWindow) -> None:
        """Merge ``w``'s pending partials whose WAL records are durable, in log order.

        Once the log has failed nothing more becomes durable, so the rest are dropped: their
        requests were (or will be) answered "unavailable", and the clients' retries carry them.
        """
        failed = self.wal.failed  # read before durable: after a failure durable is final
        durable = self.wal.durable
        while w.pending and w.pending[0][0] <= durable:
            _, partial, n = w.pending.popleft()
            w.partial = w.partial.merge(partial)
            if self.scoring.accepted is not None:
                self.scoring.accepted(partial)
            w.spans += n
            w.pending_spans -= n
            w.requests += 1
        if failed and w.pending:
            log.warning("dropped %d spans the write-ahead log could not make durable (their "
                        "requests were answered 'unavailable, retry')", w.pending_spans)
            w.pending.clear()
            w.pending_spans = 0

    def _count_rejections(self, batch: SpanBatch) -> None:
        self.metrics.spans_received.inc(len(batch) + batch.rejected)
        if batch.rejected:
            # the decode rules reject a span only for an invalid trace id (agent/otlp/rules.py)
            reason = "trace_id_invalid" if batch.counters.get("trace_id_invalid") else "decode"
            self.metrics.spans_rejected.labels(reason).inc(batch.rejected)

    # -- windows -----------------------------------------------------------------------
    def restore(self, records: list[tuple[int, bytes]], recovery: RecoveryReport) -> int:
        """Replay WAL records into the windows they belong to; returns partials replayed.

        Records of a window the archive already holds (a crash after the window line was
        fsynced but before the log was truncated) are skipped, never counted twice.
        """
        archived = rfc3339_to_ns(recovery.last_window_start) if recovery.last_window_start else None
        replayed = 0
        with self._lock:
            current: OpenWindow | None = None
            for start_ns, payload in records:
                if archived is not None and start_ns <= archived:
                    continue
                partial = self.scoring.from_bytes(payload)
                if current is not None and current.start_ns != start_ns:
                    self._window = current  # an older window left whole in the log: archive it
                    self._close_locked(start_ns, "replay", truncate=False)
                if current is None or current.start_ns != start_ns:
                    current = OpenWindow(start_ns, self.scoring.empty())
                current.partial = current.partial.merge(partial)
                current.spans += int(partial.spans)
                current.requests += 1
                replayed += 1
            if current is not None:
                self._window = current
            elif records:
                self.wal.truncate()  # everything in it was archived already
        return replayed

    def close_if_due(self) -> None:
        with self._lock:
            due = self._window.start_ns + self.window_ns
            now = now_ns()
            if now >= due and not self._closed:
                # a window restored from the WAL after long downtime ends when it was due
                self._close_locked(now if now - due < self.window_ns else due, "time")

    def _close_locked(self, end_ns: int, reason: str, truncate: bool = True) -> None:
        w = self._window
        if w.pending:  # requests still waiting for the group commit: theirs belong here
            try:
                self.wal.wait(w.pending[-1][0])
            except WalError:
                pass  # the records that did not land are dropped by the merge below
            self._merge_durable_locked(w)
        next_start = end_ns if reason == "replay" else now_ns()
        self._window = OpenWindow(next_start, self.scoring.empty())
        if w.spans == 0:
            return
        before = self.archive.bytes_written
        try:
            report = self.scoring.report(w.partial, w.start_ns, max(end_ns, w.start_ns), w.counters)
            record = self.archive.append(report, utc_rfc3339())
        except Exception:
            self._window = w  # keep the spans (they are still in the WAL) and retry later
            log.exception(
                "could not archive the window started %s; will retry", utc_rfc3339(w.start_ns)
            )
            raise
        log.info("archived window seq=%d spans=%d (%s)", record["seq"], w.spans, reason)
        self.metrics.windows_written.inc()
        self.metrics.archive_bytes.inc(self.archive.bytes_written - before)
        gs = report.get("green_summary", {})
        self.metrics.record_window(
            gs.get("per_service_energy_kwh", {}),
            gs.get("per_service_carbon_kgco2eq", {}),
            end_ns / 1e9,
        )
        self.metrics.record_totals(gs)
        if truncate and not self.wal.failed:  # a failed log is left as it is: on restart its
            self.wal.truncate()  # records of this (archived) window are skipped, not replayed

    # -- lifecycle ---------------------------------------------------------------------
    def start_ticker(self) -> None:
        self._ticker = threading.Thread(target=self._tick, name="window-ticker", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        backoff = 0.0
        retry_at = 0.0
        while not self._stop.wait(0.2):
            if time.monotonic() < retry_at:
                continue
            try:
                self.close_if_due()
                backoff = 0.0
            except Exception:  # logged in _close_locked; the window stays open for a retry
                backoff = min(30.0, max(1.0, backoff * 2))  # e.g. a full disk: retry, not spam
                retry_at = time.monotonic() + backoff

    def stop_accepting(self) -> None:
        with self._admit_lock:
            self._accepting = False

    def drain(self, timeout_s: float) -> bool:
        """Wait for admitted requests to finish (bounded). True when none is left."""
        deadline = time.monotonic() + timeout_s
        while self._inflight > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        return self._inflight == 0

    def shutdown(self) -> None:
        """Close and archive the open window, then flush the WAL and release the archive.

        If the window cannot be archived (a full disk) this raises after closing both files:
        the window's partials stay in the WAL and the next start archives them.
        """
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        try:
            with self._lock:
                self._closed = True
                if self._window.spans:
                    self._close_locked(now_ns(), "shutdown")
        finally:
            self.wal.close()
            self.archive.close()
