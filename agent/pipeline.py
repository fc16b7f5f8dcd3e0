"""From decoded batches to archived windows: admission, scoring, the WAL, window closing.

A request's life: :meth:`Pipeline.admit` (bounded: beyond ``queue_size`` requests in flight
the servers answer RESOURCE_EXHAUSTED / 429 so clients back off), decode, :meth:`ingest`
(score outside any lock, then queue the partial for the WAL and park it on the open window
under one lock, so that log order = arrival order), wait for the group commit, merge every
partial the log now holds durably into the window (in log order), answer OK. Only then has
the agent promised anything, and the WAL keeps that promise across ``kill -9``: on restart
:meth:`restore` merges the logged partials, in order, back into the window they belong to.

A partial is merged only once its WAL record is durable. If the log fails (a full or broken
disk), or a commit takes longer than ``COMMIT_WAIT_S`` (a stalled disk), the requests it could
not make durable in time get "unavailable, retry" and their partials are dropped, never merged
(even if their records land later): the client's retry is then the only copy, so nothing is
counted twice in a running agent, and each such record is named in the WAL's void file
(``WriteAheadLog.void``) so that a replay after ``kill -9`` skips it too.

Windows follow each other without a gap: the next starts where the last ended. A window closes
when ``window_seconds`` have passed (monotonic clock), when it reaches ``max_window_spans``, and
on shutdown; closing builds the report, appends it to the archive (fsynced) and only then
truncates the WAL. A window with no spans writes nothing, unless the agent charges
``[[green.hosts]]`` (``Scoring.archive_idle``): hosts draw power whether or not spans arrive, so
then every window is archived and every second the agent runs is charged once.

Each WAL record names the archive ``seq`` its window's line will take; a replay ties records to
the archive by that number, never by the wall clock (docs/archive-format.md).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.archive import ArchiveWriter, RecoveryReport
from agent.batch import SpanBatch
from agent.carbon.partial import WindowAccumulator
from agent.metrics import AgentMetrics
from agent.wal import WalError, WalRecord, WriteAheadLog, unarchived
from schema import times

log = logging.getLogger("carbonspan.agent")

#: longest a request waits for its group commit before it is answered "unavailable, retry":
#: below the Collector's (5 s) and the OpenTelemetry SDKs' (10 s) default export timeouts, so
#: the client still hears the answer and retries instead of giving up on a request we count
COMMIT_WAIT_S = 4.0
#: archived window reports kept for the live page (GET /)
RECENT_WINDOWS = 12
#: /readyz answers 503 once a commit has waited this long (a stalled disk)
STALL_READY_S = 2.0
_STOP = object()  # ends the committer thread
#: how long ingest_later (OTLP/HTTP's event loop) waits for the pipeline's lock: a merge holds
#: it for µs, a window close for ms (seconds on a stalled disk), which the loop must not wait
LATER_LOCK_WAIT_S = 0.005


class ShuttingDown(RuntimeError):
    """The agent is draining: the request was not accepted (clients retry elsewhere/later)."""


class PipelineBusy(RuntimeError):
    """:meth:`Pipeline.ingest_later` found the pipeline's lock held longer than
    ``LATER_LOCK_WAIT_S`` (a window closing, the live page's snapshot): nothing was queued; the
    caller, which must not block, hands the request to a thread that may wait."""


def _within(e: Pending) -> str:
    """How long ``e`` could wait for its commit, for the messages saying it did not make it."""
    limit = e.expires - e.since
    if limit < COMMIT_WAIT_S:
        return f" within {limit:.3g} s (the client's deadline)"
    return f" within {COMMIT_WAIT_S} s"


def now_ns() -> int:
    """Wall-clock ns rounded to microseconds, so a window start survives its RFC 3339 form."""
    return time.time_ns() // 1000 * 1000


@dataclass(slots=True)
class Pending:
    """A partial queued for the WAL: merged once durable, unless abandoned first (its request
    was then answered "unavailable": the commit failed or took longer than COMMIT_WAIT_S)."""

    ticket: int
    partial: Any
    spans: int
    state: str = "pending"  # pending | merged | abandoned
    # a request that did not wait (Pipeline.ingest_later): told once its partial is merged
    # (None) or abandoned (the WalError its client hears), from whichever thread decided it
    done: Callable[[WalError | None], None] | None = None
    since: float = 0.0  # monotonic time of the append
    # monotonic time by which it must be durable, or be abandoned: COMMIT_WAIT_S after the
    # append, sooner when the client's own deadline (gRPC's) is sooner
    expires: float = 0.0
    record_id: tuple[int, int] | None = None  # its WAL record's, named void if abandoned


@dataclass(slots=True)
class OpenWindow:
    """The window being filled, whose line will be archive ``seq``; ``partial`` accumulates the
    merged partials in place (``WindowAccumulator``). ``spans``/``requests``
    count merged (durable) partials only; ``pending`` holds the partials queued for the WAL, in
    log order. ``opened`` is the monotonic time it opened (what ``window_seconds`` counts)."""

    start_ns: int
    partial: Any
    seq: int
    opened: float = field(default_factory=time.monotonic)
    spans: int = 0
    requests: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    pending: deque[Pending] = field(default_factory=deque)
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
    # archive windows without spans too: hosts ([[green.hosts]]) are charged for every second
    archive_idle: bool = False
    # now_ns -> the ScoringContext ``score`` uses (for GET /debug/last-batch's explanation)
    context: Callable[[int], Any] | None = None


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
        self.window_s = float(window_seconds)
        self.max_window_spans = max_window_spans
        self.queue_size = queue_size
        self._lock = threading.Lock()
        self._admit_lock = threading.Lock()
        self._inflight = 0
        self._accepting = True  # admission open; False from the stop signal on
        self._closed = False  # the window is closed for good (shutdown)
        self._window = self._new_window(now_ns())
        self._archived_end_ns: int | None = None  # window.end of the archive head
        self._clock_warned = False
        # the last window close that could not be archived: (monotonic time of the first
        # failure in a row, what failed); None once a line is archived again
        self.archive_failing: tuple[float, str] | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # the ticker's: a stop, or a window full by ingest_later
        self._ticker: threading.Thread | None = None
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_WINDOWS)  # for GET /
        self._deferred = 0  # deferred requests (ingest_later) not yet merged or abandoned
        self._answers: deque[Pending] = deque()  # decided deferred requests, to be told
        self._commits: queue.SimpleQueue = queue.SimpleQueue()  # the writer -> the committer
        self._committer: threading.Thread | None = None  # started by the first ingest_later
        self.voided_skipped = 0  # void WAL records restore() did not replay (startup line)
        wal.on_commit = self._committed
        metrics.queue_capacity.set(queue_size)
        metrics.set_gauge_functions(lambda: self._inflight, lambda: self._window.spans,
                                    wal.oldest_wait_s)

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
    def ingest(self, batch: SpanBatch, wait_s: float | None = None) -> None:
        """Score ``batch``, make its partial durable, then merge it into the open window.

        Returns once the partial is fsynced in the WAL (and merged): the caller may then
        answer OK. Raises ShuttingDown or ``agent.wal.WalError`` (answer "unavailable,
        retry"); in both cases nothing of the batch is in any window. ``wait_s``: the most the
        caller's client will still wait (gRPC's deadline), when sooner than ``COMMIT_WAIT_S``: a
        partial not durable by then is abandoned too, so the agent never counts a batch whose
        client heard no OK and will send it again.
        """
        entry = self._queue(batch, None, True, wait_s)
        if entry is None:
            return
        n = entry.spans
        error: WalError | None = None
        try:
            self.wal.wait(entry.ticket, max(0.0, entry.expires - time.monotonic()))
        except WalError as exc:
            error = exc
        if entry.state == "pending":  # the writer's on_commit merges what is durable
            with self._lock:  # unless it is still on its way: merge it here (and earlier ones)
                self._merge_durable_locked(self._window)
                if entry.state == "pending":  # not durable in time: never merged, even if it lands
                    self._give_up_locked(entry)
                    log.warning("dropped %d spans the write-ahead log could not make durable%s "
                                "(the request was answered 'unavailable, retry')", n,
                                "" if self.wal.failed else _within(entry))
            self._answer()
        if entry.state != "merged":  # timed out, the log failed, or a close gave up on it
            raise error if error is not None and self.wal.failed else WalError(
                f"the write-ahead log {self.wal.path} did not sync{_within(entry)}")
        self.metrics.spans_accepted.inc(n)

    def ingest_later(self, batch: SpanBatch, done: Callable[[WalError | None], None], *,
                     wake: bool = True, wait_s: float | None = None) -> None:
        """:meth:`ingest` without waiting for the group commit: ``done(None)`` once the partial
        is durable and merged (the caller may then answer OK), ``done(error)`` once it never
        will be (the log failed, it was not durable within ``COMMIT_WAIT_S``, or a window close
        gave up on it: answer "unavailable, retry"; nothing of the batch is in any window).
        ``done`` is called exactly once, from the committer thread (most often), the window
        ticker's, or the caller's, never holding the pipeline's lock; it must not block.
        Raises ShuttingDown or WalError before anything is queued (``done`` is then never
        called), or PipelineBusy when the lock was held past ``LATER_LOCK_WAIT_S`` (nothing
        counted or queued: give the batch to a thread that may wait, :meth:`ingest`); a batch
        with nothing to log is done at once. A window it fills to ``max_window_spans`` is
        closed by the ticker (woken at once), not here. With ``wake=False`` the WAL's writer is
        not woken for this record: the caller must call :meth:`wake_wal` soon (OTLP/HTTP's loop
        does, once per turn of the loop, for every export of that turn). ``wait_s`` as in
        :meth:`ingest`."""
        if self._committer is None:
            self._start_committer()
        entry = self._queue(batch, done, wake, wait_s)
        if entry is None:
            done(None)
            return
        self._answer()  # a size close in _queue may have decided some deferred requests

    def _start_committer(self) -> None:
        with self._admit_lock:
            if self._committer is None:
                self._committer = threading.Thread(target=self._commit_loop, name="committer",
                                                   daemon=True)
                self._committer.start()

    def wake_wal(self) -> None:
        """Wake the WAL's writer for the records queued with ``ingest_later(..., wake=False)``."""
        self.wal.wake()

    def _queue(self, batch: SpanBatch, done: Callable[[WalError | None], None] | None,
               wake: bool = True, wait_s: float | None = None) -> Pending | None:
        """Score ``batch`` and queue its partial for the WAL, parked on the open window (log
        order = arrival order); None when there is nothing to log."""
        n = len(batch)
        if n == 0 and not batch.rejected and not any(batch.counters.values()):
            return None  # nothing to score and nothing to count
        partial = self.scoring.score(batch)
        payload = partial.to_bytes()
        if done is None:
            self._lock.acquire()
        elif not self._lock.acquire(timeout=LATER_LOCK_WAIT_S):
            raise PipelineBusy(f"the pipeline was busy for {LATER_LOCK_WAIT_S * 1000:g} ms")
        try:
            self._count_rejections(batch)  # once the batch is sure to be taken or refused here
            if self._closed:
                raise ShuttingDown("the agent is shutting down")
            w = self._window
            if done is not None:  # before the append: the commit that covers it must see it
                self._deferred += 1
            try:
                ticket, record_id = self.wal.append_with_id(w.seq, w.start_ns, payload,
                                                            wake=wake)
            except WalError:  # nothing parked, nothing merged
                if done is not None:
                    self._deferred -= 1
                raise
            now = time.monotonic()
            limit = COMMIT_WAIT_S if wait_s is None else max(0.0, min(COMMIT_WAIT_S, wait_s))
            entry = Pending(ticket, partial, n, "pending", done, now, now + limit, record_id)
            w.pending.append(entry)
            w.pending_spans += n
            if w.spans + w.pending_spans >= self.max_window_spans:
                if done is not None:  # the caller must not wait for a close: the ticker closes
                    self._wake.set()
                else:
                    try:  # closing waits for the window's pending records and merges them
                        self._close_locked(now_ns(), "size")
                    except Exception:  # logged; the window stays open (its records are in the WAL)
                        pass
        finally:
            self._lock.release()
        return entry

    def _committed(self) -> None:
        """The WAL writer, after each group commit (or the log's failure): wake the committer
        if a deferred request is outstanding. The writer itself never takes the pipeline's
        lock: a window close holds it while it waits for the writer's next commit."""
        if self._deferred:
            self._commits.put(None)

    def _commit_loop(self) -> None:
        """The committer thread: after each group commit, merge what is durable now (in log
        order) and answer the deferred requests it decided; a waiting request then finds its
        partial merged and need not take the lock again."""
        get, pending = self._commits.get, self._commits.qsize
        while True:
            if get() is _STOP:
                return
            while pending():  # one merge for every commit signalled since
                if get() is _STOP:
                    return
            try:  # the thread must outlive a failure: every deferred request depends on it
                with self._lock:
                    self._merge_durable_locked(self._window)
            except Exception:
                log.exception("merging a group commit's partials failed")
            self._answer()

    def expire_deferred(self) -> None:
        """Abandon the deferred requests whose record has waited ``COMMIT_WAIT_S`` without
        becoming durable (a stalled disk), and answer them "unavailable, retry": a waiting
        request times itself out, a deferred one is timed out here (the window ticker)."""
        if not self._deferred:
            self._answer()  # any a close by a waiting ingest decided (it tells none itself)
            return
        now = time.monotonic()
        with self._lock:
            self._merge_durable_locked(self._window)
            late = [e for e in self._window.pending if e.done is not None and
                    e.state == "pending" and now >= e.expires]
            for e in late:
                self._give_up_locked(e)
            if late:
                log.warning("dropped %d spans the write-ahead log could not make durable%s "
                            "(their requests were answered 'unavailable, retry')",
                            sum(e.spans for e in late), _within(late[0]))
        self._answer()

    def _give_up_locked(self, e: Pending) -> None:
        """Under the lock: ``e``'s request is (or will be) answered "unavailable, retry"; its
        partial is never merged, and its WAL record, which may yet land (a thawed disk), is
        named void so that a replay never counts it beside the client's retry either."""
        e.state = "abandoned"
        self._decided(e)
        # a failed log was cut back to its durable part: only records past it are gone (failed
        # is read first: durable is final after a failure); one that landed before is voided
        if e.record_id is None or (self.wal.failed and e.ticket > self.wal.durable):
            return
        try:
            self.wal.void(e.record_id)
            self.metrics.wal_records_voided.inc()
        except OSError as exc:
            self.metrics.wal_void_errors.inc()
            log.error("could not mark the write-ahead-log record of a refused batch of %d spans "
                      "void (%s): if the record lands and the agent is killed before its window "
                      "is archived, a restart counts it beside the client's retry", e.spans, exc)

    def _decided(self, e: Pending) -> None:
        """Under the lock: ``e`` was merged or abandoned; a deferred one is answered by
        :meth:`_answer` once the lock is released."""
        if e.done is not None:
            self._deferred -= 1
            self._answers.append(e)

    def _answer(self) -> None:
        """Tell the deferred requests decided so far (no lock held: ``done`` sends answers)."""
        answers = self._answers
        while answers:
            try:
                e = answers.popleft()
            except IndexError:  # another thread took the last one
                return
            done, e.done = e.done, None
            assert done is not None
            if e.state == "merged":
                self.metrics.spans_accepted.inc(e.spans)
                error = None
            elif self.wal.failed:
                error = WalError(f"the write-ahead log {self.wal.path} failed")
            else:
                error = WalError(f"the write-ahead log {self.wal.path} did not make the batch "
                                 f"durable{_within(e)}")
            try:
                done(error)
            except Exception:  # one request's answer must not stop the others'
                log.exception("answering a request of %d spans failed", e.spans)

    def _merge_durable_locked(self, w: OpenWindow) -> None:
        """Merge ``w``'s pending partials whose WAL records are durable, in log order.

        Abandoned ones are skipped, and so are those found durable only after their expiry
        (their requests are answered "unavailable": a late merge would count a batch whose
        client retries it); those are abandoned here. Once the log has failed nothing more
        becomes durable, so the rest are dropped: their requests were (or will be) answered
        "unavailable", and the clients' retries carry them.
        """
        failed = self.wal.failed  # read before durable: after a failure durable is final
        durable = self.wal.durable
        now = time.monotonic()
        while w.pending and (w.pending[0].ticket <= durable or w.pending[0].state == "abandoned"):
            e = w.pending.popleft()
            w.pending_spans -= e.spans
            if e.state == "abandoned":
                continue
            if now > e.expires:  # durable, but too late: its request is (or is being) refused
                self._give_up_locked(e)
                log.warning("dropped %d spans whose write-ahead-log record became durable only "
                            "after their request could wait for it%s (answered 'unavailable, "
                            "retry')", e.spans, _within(e))
                continue
            w.partial.add(e.partial)  # in place: O(batch), not O(window)
            e.state = "merged"
            w.spans += e.spans
            w.requests += 1
            if e.done is not None:
                self._decided(e)
            if self.scoring.accepted is not None:
                try:  # the merge stands (its request is answered OK): said, not raised
                    self.scoring.accepted(e.partial)
                except Exception:
                    log.exception("counting the I/O ops of a merged batch of %d spans failed",
                                  e.spans)
        if failed and w.pending:
            self._abandon_locked(w, "")

    def _abandon_locked(self, w: OpenWindow, why: str) -> None:
        log.warning("dropped %d spans the write-ahead log could not make durable%s (their "
                    "requests were answered 'unavailable, retry')", w.pending_spans, why)
        for e in w.pending:
            if e.state == "pending":
                self._give_up_locked(e)
        w.pending.clear()
        w.pending_spans = 0

    def _count_rejections(self, batch: SpanBatch) -> None:
        self.metrics.spans_received.inc(len(batch) + batch.rejected)
        if batch.rejected:
            # the decode rules reject a span only for an invalid trace id (agent/otlp/rules.py)
            reason = "trace_id_invalid" if batch.counters.get("trace_id_invalid") else "decode"
            self.metrics.spans_rejected.labels(reason).inc(batch.rejected)

    @property
    def stalled_s(self) -> float:
        """Seconds the oldest WAL commit has waited (0 when none waits): a stalled disk."""
        return self.wal.oldest_wait_s()

    # -- windows -----------------------------------------------------------------------
    def _new_window(self, start_ns: int) -> OpenWindow:
        last = self.archive.last_seq
        return OpenWindow(start_ns, WindowAccumulator(self.scoring.empty()),
                          0 if last is None else last + 1)

    def restore(self, records: list[WalRecord], recovery: RecoveryReport) -> int:
        """Archive the WAL's records of windows the archive lacks; returns partials replayed.

        A record belongs to the window whose line is archive ``seq``: a record whose seq is not
        after the archive head's was archived already (a crash after the window line was
        fsynced but before the log was truncated) and is skipped, never counted twice; the
        others are merged, in log order, into their window, which is archived at once, ending
        when its last record was logged (the agent was surely up then; the downtime after it
        is not charged to hosts). Nothing in this depends on the wall clock.
        """
        head_start = recovery.last_window_start
        head_start_ns = times.to_ns(head_start) if head_start else None
        # the void records a replay would have taken (those of archived windows it skips anyway)
        self.voided_skipped = sum(len(g) for g in unarchived(
            self.wal.voided, recovery.last_seq, head_start_ns).values())
        if self.voided_skipped:
            log.warning("skipped %d write-ahead-log records named in %s: their batches were "
                        "answered 'unavailable, retry' (not durable in time), so the clients' "
                        "retries carry them", self.voided_skipped, self.wal.void_path.name)
        if recovery.last_window_end:
            self._archived_end_ns = times.to_ns(recovery.last_window_end)
            self._warn_if_clock_behind()
        groups = unarchived(records, recovery.last_seq, head_start_ns)
        replayed = 0
        with self._lock:
            stuck: OpenWindow | None = None  # a replayed window the archive refused
            for seq in sorted(groups):
                if stuck is None:
                    stuck = self._replay_locked(seq, groups[seq])
                else:  # keep every record in the one open window; it is retried by the ticker
                    for rec in groups[seq]:
                        self._merge_replayed(stuck, rec)
                replayed += len(groups[seq])
            if records and stuck is None:
                self.wal.truncate()  # everything in it is archived now
        return replayed

    def _merge_replayed(self, w: OpenWindow, rec: WalRecord) -> None:
        partial = self.scoring.from_bytes(rec.payload)
        w.partial.add(partial)
        w.spans += int(partial.spans)
        w.requests += 1

    def _replay_locked(self, seq: int, records: list[WalRecord]) -> OpenWindow | None:
        """Archive one window rebuilt from its records; the window if the archive refused it
        (it then stays open, holding the records, and the ticker retries)."""
        fresh = self._window
        w = OpenWindow(records[0].start_ns, WindowAccumulator(self.scoring.empty()), seq)
        for rec in records:
            self._merge_replayed(w, rec)
        end = max(w.start_ns, max(r.appended_ns for r in records) // 1000 * 1000)
        self._window = w
        try:
            self._close_locked(end, "replay", truncate=False)
        except Exception:  # logged in _close_locked
            return w
        self._window = fresh
        fresh.seq = max(fresh.seq, seq + 1)  # the fresh window's line comes after this one
        return None

    def _warn_if_clock_behind(self) -> None:
        now = now_ns()
        if self._archived_end_ns is not None and now < self._archived_end_ns:
            log.warning(
                "the clock is %.1f s behind the archive head (its last window ended %s): "
                "windows are tied to the archive sequence, so nothing is lost, but their times "
                "overlap earlier windows; each such window counts clock_behind_archive",
                (self._archived_end_ns - now) / 1e9, times.format_ns(self._archived_end_ns),
            )

    def close_if_due(self) -> None:
        try:
            with self._lock:
                w = self._window
                if self._closed:
                    pass
                elif time.monotonic() - w.opened >= self.window_s:
                    self._close_locked(now_ns(), "time")
                elif w.spans + w.pending_spans >= self.max_window_spans:  # by ingest_later
                    self._close_locked(now_ns(), "size")
        finally:
            self._answer()  # the close merged (or abandoned) what was pending

    def _close_locked(self, end_ns: int, reason: str, truncate: bool = True) -> None:
        w = self._window
        if w.pending:  # requests still waiting for the group commit: theirs belong here
            try:  # no longer than the oldest of them may still wait: the lock is held
                self.wal.wait(w.pending[-1].ticket,
                              max(0.0, COMMIT_WAIT_S - self.wal.oldest_wait_s()))
            except WalError:
                pass  # the records that did not land are abandoned below
            self._merge_durable_locked(w)
            if w.pending:
                self._abandon_locked(w, f" within {COMMIT_WAIT_S} s")
        # windows follow each other without a gap, unless the clock went back during this one
        self._window = self._new_window(end_ns)
        if end_ns < w.start_ns:
            w.counters["clock_behind_archive"] = w.counters.get("clock_behind_archive", 0) + 1
            end_ns = w.start_ns
        if not (w.spans or w.partial.counters or self.scoring.archive_idle):
            return
        if self._archived_end_ns is not None and w.start_ns < self._archived_end_ns:
            w.counters["clock_behind_archive"] = w.counters.get("clock_behind_archive", 0) + 1
        if w.counters.get("clock_behind_archive") and not self._clock_warned:
            self._clock_warned = True
            log.warning("the wall clock went back: window started %s ended %s, the archive head "
                        "ended %s; counted as clock_behind_archive on each such window",
                        times.format_ns(w.start_ns), times.format_ns(end_ns),
                        times.format_ns(self._archived_end_ns or 0))
        before = self.archive.bytes_written
        try:
            report = self.scoring.report(w.partial.snapshot(), w.start_ns, end_ns, w.counters)
            record = self.archive.append(report, times.now())
        except Exception as exc:
            self._window = w  # keep the spans (they are still in the WAL) and retry later
            since = self.archive_failing[0] if self.archive_failing else time.monotonic()
            self.archive_failing = (since, f"{type(exc).__name__}: {exc}"[:300])
            self.metrics.archive_write_errors.inc()
            log.exception(
                "could not archive the window started %s; will retry", times.format_ns(w.start_ns)
            )
            raise
        self._archived_end_ns = end_ns
        self.archive_failing = None
        self.recent.append(report)
        self._window.seq = record["seq"] + 1
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
        # a failed or busy log is left as it is: on restart its records of this (archived)
        # window are skipped by their seq, not replayed
        if truncate:
            self.wal.truncate_if_idle()

    def live_view(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The open window's report so far (None before a span) and the last archived ones."""
        with self._lock:
            w = self._window
            if not w.spans:
                return None, list(self.recent)
            return self.scoring.report(w.partial.snapshot(), w.start_ns, now_ns(),
                                       dict(w.counters)), list(
                self.recent)

    # -- lifecycle ---------------------------------------------------------------------
    def start_ticker(self) -> None:
        self._ticker = threading.Thread(target=self._tick, name="window-ticker", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        backoff = 0.0
        retry_at = 0.0
        while True:
            self._wake.wait(0.2)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:  # not backed off with the closes: a deferred request's COMMIT_WAIT_S holds
                self.expire_deferred()
            except Exception:
                log.exception("expiring the deferred requests failed")
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
        self._wake.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        try:
            with self._lock:
                self._closed = True
                self._close_locked(now_ns(), "shutdown")
        finally:
            self._answer()
            self.wal.close()
            self.archive.close()
            if self._committer is not None:
                self._commits.put(_STOP)
                self._committer.join(timeout=5)
