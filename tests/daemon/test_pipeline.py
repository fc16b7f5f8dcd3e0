"""The pipeline in-process with the real scorer, archive and WAL: replay rules and window closing."""

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
from agent.score import ScoringContext, WindowPartial, score_batch
from agent.wal import WriteAheadLog
from bench.workload import make_request_bytes
from schema.chain import verify_chain


def _open(d: Path, cfg: Config | None = None, sources=None, stall: Path | None = None,
          **kw) -> tuple[Pipeline, int]:
    """A pipeline on ``d`` with the real scorer (``sources``: a SourceManager or None; ``stall``:
    the WAL's testing-only stall file), after replaying the WAL there; returns it and the
    number of partials replayed."""
    archive = ArchiveWriter(d)
    recovery = archive.open()
    wal = WriteAheadLog(d / WAL_NAME, stall_file=stall)
    p = Pipeline(build_scoring(cfg or Config(), "unit", sources), archive, wal, AgentMetrics(),
                 window_seconds=kw.get("window_seconds", 3600),
                 max_window_spans=kw.get("max_window_spans", 10**9), queue_size=4)
    return p, p.restore(wal.open(), recovery)


def _scaphandre(cfg: Config):
    """A SourceManager with one Scaphandre source, never started (no polling, no network):
    only its op counter is used."""
    from agent.sources.manager import SourceManager

    return SourceManager.from_config(
        {"scaphandre": [{"url": "http://127.0.0.1:9/metrics", "services": {"s": {"exe": "x"}}}]},
        cfg.green)


def _batches(n: int):
    return [decode_protobuf(make_request_bytes(32, seed=s)) for s in range(n)]


def _stalled_request(p: Pipeline, batch) -> tuple[threading.Thread, list]:
    """``p.ingest(batch)`` in a thread of its own, returned once its record waits on the (stalled)
    disk; the list gets None (acknowledged) or the WalError it raised (answered "unavailable")."""
    from agent.wal import WalError

    outcome: list[BaseException | None] = []

    def request() -> None:
        try:
            p.ingest(batch)
            outcome.append(None)
        except WalError as exc:
            outcome.append(exc)

    t = threading.Thread(target=request)
    t.start()
    deadline = time.monotonic() + 10
    while p.wal.pending == 0 and time.monotonic() < deadline:  # its record waits on the disk
        time.sleep(0.01)
    return t, outcome


def _reports(d: Path) -> list[dict]:
    recs = read_records(d)
    assert verify_chain(recs)[0] == []
    return [r["report"] for _, r in recs if r is not None]


def test_replay_rebuilds_the_same_window_as_live_merging(tmp_path: Path) -> None:
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    for d in (live, crashed):
        d.mkdir()
        p, _ = _open(d)
        for b in _batches(5):
            p.ingest(b)
        if d is live:
            p.shutdown()
        else:  # a crash: nothing archived, only the WAL
            p.wal.close()
            p.archive.close()
    p, replayed = _open(crashed)
    assert replayed == 5
    p.shutdown()
    a, b = _reports(live), _reports(crashed)
    assert len(a) == len(b) == 1
    assert a[0]["window"]["spans"] == b[0]["window"]["spans"] == 160
    assert a[0]["green_summary"] == b[0]["green_summary"]  # same partials, same order


def test_crash_after_archiving_but_before_truncating_is_not_counted_twice(tmp_path: Path) -> None:
    p, _ = _open(tmp_path)
    for b in _batches(3):
        p.ingest(b)
    saved = (tmp_path / WAL_NAME).read_bytes()
    p.shutdown()  # archives the window and truncates the log
    (tmp_path / WAL_NAME).write_bytes(saved)  # as if the crash came before the truncation
    p2, replayed = _open(tmp_path)
    assert replayed == 0 and (tmp_path / WAL_NAME).stat().st_size == 0
    p2.shutdown()
    reports = _reports(tmp_path)
    assert len(reports) == 1 and reports[0]["window"]["spans"] == 96


def test_window_closes_at_max_spans_and_empty_windows_write_nothing(tmp_path: Path) -> None:
    p, _ = _open(tmp_path, max_window_spans=64)
    for b in _batches(5):  # 32 spans each: closes after the 2nd and 4th
        p.ingest(b)
    p.close_if_due()  # not due: nothing
    assert len(_reports(tmp_path)) == 2
    p.shutdown()
    reports = _reports(tmp_path)
    assert [r["window"]["spans"] for r in reports] == [64, 64, 32]
    starts = [r["window"]["start"] for r in reports]
    ends = [r["window"]["end"] for r in reports]
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))


def test_partials_round_trip_through_the_wal_bytes() -> None:
    batch = _batches(1)[0]
    part = score_batch(batch, ScoringContext.from_config(Config()))
    again = WindowPartial.from_bytes(part.to_bytes())
    assert again.to_bytes() == part.to_bytes() and again.spans == 32


def test_hosts_get_power_times_the_window_length(tmp_path: Path) -> None:
    from agent.config import parse_config
    from schema.times import to_ns as rfc3339_to_ns

    cfg = parse_config({"green": {"hosts": [{"name": "pg", "kind": "database",
                                             "region": "eu-west-3", "watts": 100.0, "count": 2}]}})
    p, _ = _open(tmp_path, cfg)
    p.ingest(_batches(1)[0])
    p.shutdown()
    rep = _reports(tmp_path)[0]
    seconds = (rfc3339_to_ns(rep["window"]["end"]) - rfc3339_to_ns(rep["window"]["start"])) / 1e9
    host = rep["green_summary"]["hosts"][0]
    assert seconds > 0 and host["name"] == "pg"
    # 100 W x 2 hosts x window length (s) / 3600 s/h / 1000 W/kW
    assert host["energy_kwh"] == pytest.approx(200.0 * seconds / 3600 / 1000, rel=1e-3)


def test_live_batches_feed_the_sources_op_counter_and_replay_does_not(tmp_path: Path) -> None:
    """Measured sources divide energy by the I/O ops the daemon counted in the same stretch
    of time; replaying the WAL after a crash re-merges old partials and must not add their
    ops again (they were counted before the crash, in another process's interval)."""
    cfg = Config()
    live = _scaphandre(cfg)
    p, _ = _open(tmp_path, cfg, live)
    batches = _batches(2)
    for b in batches:
        p.ingest(b)
    ops = sum(live.ops.totals().values())
    expected = sum(score_batch(b, ScoringContext.from_config(cfg.green)).io_ops for b in batches)
    assert ops == expected > 0
    p.wal.close()  # a crash: the window only in the WAL
    p.archive.close()
    restarted = _scaphandre(cfg)
    p2, replayed = _open(tmp_path, cfg, restarted)
    assert replayed == 2 and restarted.ops.totals() == {}
    p2.shutdown()
    assert _reports(tmp_path)[0]["window"]["spans"] == 64


def test_a_batch_the_wal_cannot_make_durable_is_neither_merged_nor_counted(tmp_path: Path) -> None:
    """The log's descriptor turned into /dev/full (every write fails with ENOSPC, as on a
    full disk): the request fails with WalError, and neither the window nor the sources' op
    counter holds its batch (the client's retry will bring it)."""
    from agent.wal import WalError

    cfg = Config()
    manager = _scaphandre(cfg)
    p, _ = _open(tmp_path, cfg, manager)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, p.wal._fd)  # the same descriptor number now writes to a full "disk"
    os.close(full)
    with pytest.raises(WalError, match="No space left on device"):
        p.ingest(_batches(1)[0])
    with pytest.raises(WalError):  # the log stays failed: nothing more is acknowledged
        p.ingest(_batches(1)[0])
    assert p._window.spans == 0 and not p._window.pending
    assert manager.ops.totals() == {}
    p.shutdown()
    assert _reports(tmp_path) == []  # nothing unacknowledged was archived


def test_concurrent_ingest_with_windows_closing_under_it_archives_every_span(tmp_path: Path) -> None:
    """Four threads ingest while windows close by size (in ingest) and by time (the ticker),
    so closes often find partials still waiting for their group commit: every acknowledged
    span must land in exactly one archived window, in a chain that verifies."""

    p, _ = _open(tmp_path, max_window_spans=96, window_seconds=0.05)
    p.start_ticker()
    batches = _batches(4)
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            for i in range(25):
                p.ingest(batches[(i + k) % 4])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    p.shutdown()
    assert errors == []
    reports = _reports(tmp_path)
    assert len(reports) > 4
    assert sum(r["window"]["spans"] for r in reports) == 4 * 25 * 32
    assert sum(sum(r["green_summary"]["per_service_requests"].values()) for r in reports) == sum(
        sum(score_batch(batches[i % 4], ScoringContext.from_config(Config().green))
            .requests.tolist()) for i in range(100))
    assert (tmp_path / WAL_NAME).stat().st_size == 0


def test_a_close_that_gives_up_on_a_stalled_commit_abandons_it_for_good(tmp_path: Path) -> None:
    """The disk freezes (the WAL's testing-only stall file) while a request waits for its
    commit and the window closes: the close gives up after COMMIT_WAIT_S, the request is
    answered "unavailable" (WalError), and when the disk thaws and the record lands it is in
    no window: not the archived one, not the next, and a restart skips it by its seq."""

    from agent.pipeline import COMMIT_WAIT_S
    from agent.wal import WalError

    stall = tmp_path / "stall"
    p, _ = _open(tmp_path, stall=stall)
    first, stalled = _batches(2)
    p.ingest(first)  # 32 spans, durable and merged
    stall.touch()
    t, outcome = _stalled_request(p, stalled)
    with p._lock:
        p._close_locked(p._window.start_ns + 10**9, "time")  # gives up after the wait
    stall.unlink()
    t.join(timeout=COMMIT_WAIT_S + 10)
    assert isinstance(outcome[0], WalError)
    deadline = time.monotonic() + 10
    while p.wal.pending and time.monotonic() < deadline:  # the record lands
        time.sleep(0.01)
    p.wal.close()  # kill -9 before any later close could empty the log
    p.archive.close()
    reports = _reports(tmp_path)
    assert [r["window"]["spans"] for r in reports] == [32]  # the abandoned batch nowhere
    # its record landed after the close (the log was busy, so not truncated): a restart
    # ties it to the archived window's seq and skips it; it is void too, but not counted
    # as a void record skipped, since no replay would have taken it
    p2, replayed = _open(tmp_path)
    assert replayed == 0
    assert p2.wal.voided_on_open == 1 and p2.voided_skipped == 0
    p2.shutdown()
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [32]


@pytest.mark.parametrize("deferred", [False, True], ids=["waiting", "deferred"])
def test_a_batch_refused_on_a_stalled_disk_is_not_replayed_when_its_record_lands(
        tmp_path: Path, monkeypatch, deferred: bool) -> None:
    """A request's commit outlasts COMMIT_WAIT_S (the disk frozen), it is answered
    "unavailable", the disk thaws and its record lands in the open window's log; the agent is
    then killed before the window closes. The restart replays the batches acknowledged
    before and after, never the refused one (its client's retry is its only copy), whether it
    waited for its commit (gRPC's threads) or was deferred (OTLP/HTTP's loop, timed out by
    the ticker's expire_deferred). Without the void entry it was replayed: 96 spans, not 64."""

    from agent import pipeline
    from agent.wal import WalError

    monkeypatch.setattr(pipeline, "COMMIT_WAIT_S", 0.3)
    stall = tmp_path / "stall"
    p, _ = _open(tmp_path, stall=stall)
    before, refused, after = _batches(3)
    p.ingest(before)
    stall.touch()
    answers: list[WalError | None] = []
    if deferred:
        p.ingest_later(refused, answers.append)
        deadline = time.monotonic() + 10
        while not answers and time.monotonic() < deadline:
            time.sleep(0.35)
            p.expire_deferred()  # the ticker's call
    else:
        try:
            p.ingest(refused)
        except WalError as exc:
            answers.append(exc)
    assert len(answers) == 1 and isinstance(answers[0], WalError)
    assert p.metrics.wal_records_voided._value.get() == 1
    stall.unlink()  # the record lands now
    t = threading.Thread(target=p.ingest, args=(after,))
    t.start()
    t.join(timeout=10)
    assert p._window.spans == 64  # live: the refused batch was never merged
    from agent.wal import read_records as wal_records

    assert len(wal_records(tmp_path / WAL_NAME)[0]) == 3  # the refused batch's record landed
    p.wal.close()  # kill -9: nothing archived, the log and its void file as they are
    p.archive.close()
    p2, replayed = _open(tmp_path)
    assert replayed == 2 and p2.wal.voided_on_open == p2.voided_skipped == 1
    p2.shutdown()
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [64]


def test_a_client_deadline_shorter_than_the_commit_wait_bounds_it_even_when_the_record_lands(
        tmp_path: Path) -> None:
    """``wait_s`` (a gRPC client's deadline) bounds the wait for the commit: a deferred request
    is expired by the ticker at it, not at COMMIT_WAIT_S; and one whose record is durable only
    after it is abandoned when the commit is merged, not counted late (its client has given
    up and resends it), with its record named void."""

    from agent.wal import WalError
    from agent.wal import read_records as wal_records

    stall = tmp_path / "stall"
    p, _ = _open(tmp_path, stall=stall)
    expired, late, kept = _batches(3)
    stall.touch()
    answers: dict[str, list] = {"expired": [], "late": []}
    p.ingest_later(expired, answers["expired"].append, wait_s=0.2)
    time.sleep(0.3)
    p.expire_deferred()  # the ticker's call, long before COMMIT_WAIT_S (4 s)
    assert len(answers["expired"]) == 1 and "within 0.2 s (the client's deadline)" in str(
        answers["expired"][0])
    p.ingest_later(late, answers["late"].append, wait_s=0.2)
    time.sleep(0.3)  # no ticker: the record lands after its deadline, and is merged by no one
    stall.unlink()
    deadline = time.monotonic() + 10
    while not answers["late"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(answers["late"][0], WalError)
    p.ingest(kept)
    assert p._window.spans == 32
    assert p.metrics.wal_records_voided._value.get() == 2
    assert len(wal_records(tmp_path / WAL_NAME)[0]) == 3  # all three landed
    p.wal.close()  # kill -9
    p.archive.close()
    p2, replayed = _open(tmp_path)
    assert replayed == 1 and p2.wal.voided_on_open == 2
    p2.shutdown()
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [32]


def test_a_record_that_landed_before_the_log_failed_is_voided_when_its_request_gives_up(
        tmp_path: Path, monkeypatch) -> None:
    """The give-up's race with the writer: the request's merge reads ``durable`` just before its
    commit lands, the writer's next commit then fails, and only then is the request given up.
    Its record is in the log (a failure cuts back to what was durable, which includes it), so
    it must be voided although the log has failed; skipping every void once ``wal.failed``
    replayed it beside the client's retry."""

    from agent import pipeline
    from agent.wal import WalError

    monkeypatch.setattr(pipeline, "COMMIT_WAIT_S", 0.3)
    stall = tmp_path / "stall"
    p, _ = _open(tmp_path, stall=stall)
    first, raced = _batches(2)
    p.ingest(first)
    stall.touch()
    real_merge = Pipeline._merge_durable_locked
    calls = []

    def merge_then_race(self, w):
        real_merge(self, w)  # durable read: the raced record is not on disk yet
        if calls:
            return
        calls.append(1)
        stall.unlink()  # it lands now ...
        deadline = time.monotonic() + 10
        while self.wal.durable < self.wal._queued and time.monotonic() < deadline:
            time.sleep(0.01)
        self.wal._error = OSError(5, "Input/output error")  # ... and the next commit fails

    monkeypatch.setattr(Pipeline, "_merge_durable_locked", merge_then_race)
    with pytest.raises(WalError):
        p.ingest(raced)
    monkeypatch.setattr(Pipeline, "_merge_durable_locked", real_merge)
    p.wal._error = None
    p.wal.close()  # kill -9
    p.archive.close()
    p2, replayed = _open(tmp_path)
    assert replayed == 1 and p2.wal.voided_on_open == 1
    p2.shutdown()
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [32]


def test_a_close_that_gives_up_and_cannot_archive_voids_the_abandoned_record(
        tmp_path: Path, monkeypatch) -> None:
    """A close gives up on a stalled commit (_abandon_locked) and then cannot archive the
    window (a full disk): the window stays open under its seq, so the abandoned record, once
    it lands, is of an unarchived window and only its void entry keeps a replay after kill -9
    from counting it beside the client's retry."""

    from agent import pipeline
    from agent.wal import WalError
    from agent.wal import read_records as read_wal

    monkeypatch.setattr(pipeline, "COMMIT_WAIT_S", 0.3)
    stall = tmp_path / "stall"
    p, _ = _open(tmp_path, stall=stall)
    first, stalled, after = _batches(3)
    p.ingest(first)
    stall.touch()
    t, outcome = _stalled_request(p, stalled)

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(p.archive, "append", full)
    with p._lock, pytest.raises(OSError):
        p._close_locked(p._window.start_ns + 10**9, "time")  # gives up, then cannot archive
    t.join(timeout=10)
    assert isinstance(outcome[0], WalError)
    stall.unlink()
    monkeypatch.undo()
    monkeypatch.setattr(pipeline, "COMMIT_WAIT_S", 0.3)
    p.ingest(after)  # the stalled record landed before it, in the still open window
    assert p._window.spans == 64 and len(read_wal(tmp_path / WAL_NAME)[0]) == 3
    p.wal.close()  # kill -9
    p.archive.close()
    p2, replayed = _open(tmp_path)
    assert replayed == 2 and p2.wal.voided_on_open == 1
    p2.shutdown()
    assert [r["window"]["spans"] for r in _reports(tmp_path)] == [64]
