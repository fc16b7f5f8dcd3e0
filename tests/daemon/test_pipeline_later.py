"""``Pipeline.ingest_later``: an export that does not wait for its group commit (OTLP/HTTP's
event loop) is told exactly once, by the pipeline's committer, that its partial is durable
and merged (``done(None)``) or never will be (``done(WalError)``), with the same windows, WAL
records and counts as a waiting ``ingest``. In-process with the real scorer, archive and WAL."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from agent.archive import WAL_NAME, ArchiveWriter, read_records
from agent.config import Config
from agent.daemon import build_scoring
from agent.metrics import AgentMetrics
from agent.otlp import decode_protobuf
from agent.pipeline import Pipeline
from agent.wal import WalError, WriteAheadLog
from bench.workload import make_request_bytes
from schema.chain import verify_chain


def _open(d: Path, stall: Path | None = None, **kw) -> Pipeline:
    archive = ArchiveWriter(d)
    recovery = archive.open()
    wal = WriteAheadLog(d / WAL_NAME, stall_file=stall)
    p = Pipeline(build_scoring(Config(), "unit", None), archive, wal, AgentMetrics(),
                 window_seconds=kw.get("window_seconds", 3600),
                 max_window_spans=kw.get("max_window_spans", 10**9), queue_size=64)
    p.restore(wal.open(), recovery)
    return p


def _batches(n: int):
    return [decode_protobuf(make_request_bytes(32, seed=s)) for s in range(n)]


class Told:
    """Records each ``done`` call, with the thread it came from."""

    def __init__(self) -> None:
        self.calls: list[tuple[WalError | None, str]] = []
        self.all = threading.Event()
        self.expect = 1

    def __call__(self, error: WalError | None) -> None:
        self.calls.append((error, threading.current_thread().name))
        if len(self.calls) >= self.expect:
            self.all.set()


def _reports(d: Path) -> list[dict]:
    recs = read_records(d)
    assert verify_chain(recs)[0] == []
    return [r["report"] for _, r in recs if r is not None]


def test_a_deferred_export_is_told_once_by_the_committer_and_equals_a_waiting_one(
        tmp_path: Path) -> None:
    later_dir, wait_dir = tmp_path / "later", tmp_path / "wait"
    later_dir.mkdir()
    wait_dir.mkdir()
    batches = _batches(6)
    p = _open(later_dir)
    told = [Told() for _ in batches]
    for b, t in zip(batches, told, strict=True):
        p.ingest_later(b, t)
    for t in told:
        assert t.all.wait(10)
    time.sleep(0.1)  # a second call would come now
    assert [len(t.calls) for t in told] == [1] * 6
    assert all(err is None for t in told for err, _ in t.calls)
    assert {name for t in told for _, name in t.calls} <= {"committer", "MainThread"}
    assert p.metrics.spans_accepted._value.get() == 6 * 32
    p.shutdown()
    q = _open(wait_dir)
    for b in batches:
        q.ingest(b)
    q.shutdown()
    a, b = _reports(later_dir), _reports(wait_dir)
    assert [r["window"]["spans"] for r in a] == [r["window"]["spans"] for r in b] == [192]
    assert a[0]["green_summary"] == b[0]["green_summary"]


def test_a_deferred_export_is_answered_unavailable_when_the_log_fails(tmp_path: Path) -> None:
    p = _open(tmp_path)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, p.wal._fd)  # every write now fails with ENOSPC, as on a full disk
    os.close(full)
    told = Told()
    p.ingest_later(_batches(1)[0], told)
    assert told.all.wait(10)
    (error, _), = told.calls
    assert isinstance(error, WalError) and "failed" in str(error)
    assert p._window.spans == 0 and not p._window.pending
    with pytest.raises(WalError):  # the log stays failed: refused before anything is queued
        p.ingest_later(_batches(1)[0], Told())
    p.shutdown()
    assert _reports(tmp_path) == []


def test_a_deferred_export_on_a_frozen_disk_expires_after_the_commit_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window ticker abandons a deferred export whose record has not become durable
    within COMMIT_WAIT_S (here 0.3 s) and answers it; when the disk thaws, the record is
    in no window."""
    import agent.pipeline as pipeline

    monkeypatch.setattr(pipeline, "COMMIT_WAIT_S", 0.3)
    stall = tmp_path / "stall"
    p = _open(tmp_path, stall)
    p.start_ticker()
    first, stalled = _batches(2)
    p.ingest(first)
    stall.touch()
    told = Told()
    p.ingest_later(stalled, told)
    assert told.all.wait(10)
    (error, name), = told.calls
    assert isinstance(error, WalError) and "0.3 s" in str(error)
    assert name != "committer"  # the ticker timed it out: no commit came
    stall.unlink()
    p.shutdown()
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [32]
    assert len(told.calls) == 1


def test_deferred_exports_across_closing_windows_archive_every_span(tmp_path: Path) -> None:
    """Windows close by size and by time (the ticker) while deferred exports wait for their
    commits: each is told once, one that finds a close holding the lock is refused with
    PipelineBusy and taken by a waiting ingest (as the HTTP server's slow threads do), and
    every span accepted lands in exactly one archived window."""
    from agent.pipeline import PipelineBusy

    p = _open(tmp_path, max_window_spans=96, window_seconds=0.05)
    p.start_ticker()
    batches = _batches(4)
    told = Told()
    waited = 0
    for i in range(200):
        try:
            p.ingest_later(batches[i % 4], told)
        except PipelineBusy:
            p.ingest(batches[i % 4])
            waited += 1
        if i % 16 == 15:
            time.sleep(0.01)
    told.expect = 200 - waited
    assert told.all.wait(30) or len(told.calls) == told.expect
    p.shutdown()
    ok = sum(1 for err, _ in told.calls if err is None)
    assert len(told.calls) == ok == 200 - waited
    assert sum(r["window"]["spans"] for r in _reports(tmp_path)) == 200 * 32
    assert (tmp_path / WAL_NAME).stat().st_size == 0


def test_shutdown_tells_the_deferred_exports_it_still_holds(tmp_path: Path) -> None:
    """A shutdown while deferred exports wait for a frozen disk answers every one of them
    (merged when their record landed in time, else unavailable), none left unanswered."""
    import agent.pipeline as pipeline

    stall = tmp_path / "stall"
    p = _open(tmp_path, stall)
    stall.touch()
    told = Told()
    told.expect = 3
    for b in _batches(3):
        p.ingest_later(b, told)
    threading.Timer(0.2, stall.unlink).start()  # thaws while the shutdown waits
    p.shutdown()
    assert told.all.wait(pipeline.COMMIT_WAIT_S + 10)
    assert len(told.calls) == 3
    merged = [err is None for err, _ in told.calls]
    archived = sum(r["window"]["spans"] for r in _reports(tmp_path))
    assert archived == 32 * sum(merged)


def test_a_busy_pipeline_refuses_a_deferred_export_without_counting_it(tmp_path: Path) -> None:
    """While another thread holds the pipeline's lock (a window closing), ingest_later gives
    up after LATER_LOCK_WAIT_S with PipelineBusy, having counted and queued nothing: the
    caller hands the batch to a thread, whose ingest counts it once."""
    from agent.pipeline import PipelineBusy

    p = _open(tmp_path)
    batch = _batches(1)[0]
    received = p.metrics.spans_received._value.get
    with p._lock:
        with pytest.raises(PipelineBusy):
            p.ingest_later(batch, Told())
    assert p.wal.pending == 0 and not p._window.pending and p._deferred == 0
    assert received() == 0  # not counted: the thread's ingest counts it
    p.ingest(batch)
    assert received() == 32  # once, not twice
    p.shutdown()
    (report,) = _reports(tmp_path)
    assert report["window"]["spans"] == 32


def test_a_window_a_deferred_export_fills_is_closed_by_the_ticker(tmp_path: Path) -> None:
    """ingest_later never closes a window itself (the loop must not wait for it): a window
    it fills to max_window_spans is closed by the ticker, woken at once, long before the
    window's hour is up."""
    p = _open(tmp_path, max_window_spans=64)
    p.start_ticker()
    batches = _batches(4)
    for half in (batches[:2], batches[2:]):
        n = len(_reports(tmp_path)) + 1
        told = Told()
        told.expect = 2
        for b in half:
            p.ingest_later(b, told)
        assert told.all.wait(10)
        deadline = time.monotonic() + 10
        while len(_reports(tmp_path)) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_reports(tmp_path)) == n  # closed by size, the hour far off
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [64, 64]
    p.shutdown()


def test_a_deferred_export_expires_while_the_ticker_backs_off_a_failing_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window close that cannot be archived makes the ticker back off (1 s, 2 s, ... up to
    30 s) before it retries the close; the deferred exports' COMMIT_WAIT_S expiry must not
    back off with it. A deferred export on a frozen disk is answered "unavailable" within
    COMMIT_WAIT_S (plus a tick), not when the backoff ends: by then the client has given up
    (the Collector's 5 s) and retried, and a record that lands later would be merged as well
    as the retry - counted twice."""
    import agent.pipeline as pipeline

    monkeypatch.setattr(pipeline, "COMMIT_WAIT_S", 0.3)
    stall = tmp_path / "stall"
    p = _open(tmp_path, stall, window_seconds=0.05)
    first, stalled = _batches(2)
    p.ingest(first)  # a window with spans: its close reaches the archive

    def refuse(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(p.archive, "append", refuse)
    p.start_ticker()
    errors = p.metrics.archive_write_errors._value.get
    deadline = time.monotonic() + 10
    while errors() < 2 and time.monotonic() < deadline:  # the ticker now backs off for 2 s
        time.sleep(0.01)
    assert errors() == 2
    stall.touch()
    told = Told()
    p.ingest_later(stalled, told)
    assert told.all.wait(1.0), "a deferred export waited out the ticker's backoff"
    (error, _), = told.calls
    assert isinstance(error, WalError) and "0.3 s" in str(error)
    stall.unlink()
    monkeypatch.undo()
    p.shutdown()
    assert len(told.calls) == 1
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [32]


def test_export_later_does_not_wait_for_the_log_truncation_of_a_window_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window close truncates the WAL (``ftruncate`` + ``fsync``, a large log on a busy or
    freezing disk: long) holding the log's condition. ``export_later`` runs on OTLP/HTTP's
    event loop, and its readiness check reads the log's oldest wait (``stalled_s``): it must
    not wait for that truncation, or ``/healthz``, ``/readyz`` and every connection wait with
    it. A close holding the pipeline's lock costs the loop at most ``LATER_LOCK_WAIT_S``
    (PipelineBusy: the request goes to a thread)."""
    from agent.export import ExportHandler
    from agent.otlp import OtlpDecodeError

    p = _open(tmp_path, window_seconds=0.05)
    handler = ExportHandler(p, p.metrics, {"protobuf": decode_protobuf}, OtlpDecodeError, None,
                            16 << 20)
    handler.ready = True
    p.ingest(_batches(1)[0])
    truncating = threading.Event()
    real = WriteAheadLog._truncate_locked

    def slow_truncate(self: WriteAheadLog) -> None:
        truncating.set()
        time.sleep(1.0)  # the fsync of a truncation on a slow disk
        real(self)

    monkeypatch.setattr(WriteAheadLog, "_truncate_locked", slow_truncate)
    time.sleep(0.06)
    closer = threading.Thread(target=p.close_if_due)
    closer.start()
    assert truncating.wait(5)
    answers: list = []
    t0 = time.monotonic()
    not_here = handler.export_later(make_request_bytes(32, seed=9), "protobuf", "http",
                                    answers.append)
    took = time.monotonic() - t0
    closer.join()
    assert took < 0.2, f"the loop waited {took:.2f} s for a WAL truncation"
    if not_here is not None:  # PipelineBusy: the thread's export
        assert not_here == "pipeline_busy" and not answers
    monkeypatch.undo()
    p.shutdown()


def test_a_failing_accepted_hook_neither_kills_the_committer_nor_loses_a_request(
        tmp_path: Path) -> None:
    """``Scoring.accepted`` (the measured sources' op count) raising in a merge must not end
    the committer thread (every later deferred export then waits for the ticker, and the
    writer's signals pile up unread) nor leave the merged request untold: its partial is in the
    window, so it is answered OK, once, and its admission comes back (``_deferred`` to 0)."""
    import dataclasses

    p = _open(tmp_path)
    seen = []

    def accepted(partial) -> None:
        seen.append(partial)
        if len(seen) == 1:
            raise RuntimeError("a measured source's bug")

    p.scoring = dataclasses.replace(p.scoring, accepted=accepted)
    first, second = _batches(2)
    told_first, told_second = Told(), Told()
    p.ingest_later(first, told_first)
    assert told_first.all.wait(5), "the request whose merge failed was never told"
    p.ingest_later(second, told_second)  # no ticker: only the committer can tell it
    assert told_second.all.wait(5), "the committer died"
    assert [e for e, _ in told_first.calls + told_second.calls] == [None, None]
    assert p._deferred == 0 and p._committer is not None and p._committer.is_alive()
    p.shutdown()
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [64]
