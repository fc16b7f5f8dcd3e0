"""The write-ahead log on real files: group commit, replay, torn tails, truncation."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.wal import HEADER_V2, WriteAheadLog, read_records


def test_concurrent_appends_share_fsyncs_and_all_replay_in_order(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "agent.wal", fsync_delay_s=0.02)
    assert wal.open() == []
    n_threads, per_thread = 16, 5
    order: list[bytes] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        for i in range(per_thread):
            payload = f"t{t}-{i}".encode()
            with lock:  # the pipeline holds its lock around append: log order = merge order
                ticket = wal.append(3, 1000, payload)
                order.append(payload)
            wal.wait(ticket)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    wal.close()
    assert wal.fsyncs < n_threads * per_thread / 2  # grouped: far fewer fsyncs than records
    records, good = read_records(tmp_path / "agent.wal")
    assert [r.payload for r in records] == order
    assert all((r.seq, r.start_ns) == (3, 1000) for r in records)
    assert good == (tmp_path / "agent.wal").stat().st_size


@settings(max_examples=40, deadline=None)
@given(payloads=st.lists(st.binary(max_size=64), min_size=1, max_size=8),
       cut=st.integers(min_value=1, max_value=200))
def test_torn_tail_drops_only_the_unfinished_record(tmp_path_factory, payloads, cut) -> None:
    path = tmp_path_factory.mktemp("wal") / "agent.wal"
    wal = WriteAheadLog(path)
    wal.open()
    for p in payloads:
        wal.wait(wal.append(0, 7, p))
    wal.close()
    data = path.read_bytes()
    cut = min(cut, HEADER_V2.size + len(payloads[-1]))  # cut into the last record only
    path.write_bytes(data[: len(data) - cut])
    wal2 = WriteAheadLog(path)
    replay = wal2.open()
    wal2.close()
    assert [r.payload for r in replay] == payloads[:-1]
    assert path.stat().st_size == len(data) - HEADER_V2.size - len(payloads[-1])


def test_corrupt_crc_stops_replay(tmp_path: Path) -> None:
    path = tmp_path / "agent.wal"
    wal = WriteAheadLog(path)
    wal.open()
    for p in (b"one", b"two", b"three"):
        wal.wait(wal.append(0, 1, p))
    wal.close()
    data = bytearray(path.read_bytes())
    data[HEADER_V2.size * 2 + 3 + 1] ^= 0xFF  # flip a byte of "two"
    path.write_bytes(bytes(data))
    records, _ = read_records(path)
    assert [r.payload for r in records] == [b"one"]


def test_truncate_empties_the_log_after_pending_records_land(tmp_path: Path) -> None:
    path = tmp_path / "agent.wal"
    wal = WriteAheadLog(path, fsync_delay_s=0.01)
    wal.open()
    tickets = [wal.append(0, 5, b"x" * 10) for _ in range(3)]
    wal.truncate()
    for t in tickets:
        wal.wait(t, timeout=1)  # already durable: truncate waited for them
    assert path.stat().st_size == 0
    wal.wait(wal.append(1, 6, b"after"))
    wal.close()
    ((seq, start, appended, payload, _crc),) = read_records(path)[0]
    assert (seq, start, payload) == (1, 6, b"after") and appended > 0


def test_a_corrupt_seq_in_the_header_stops_replay(tmp_path: Path) -> None:
    """The CRC covers the header's seq, start and time too: a flipped seq bit would tie the
    record to another window."""
    path = tmp_path / "agent.wal"
    wal = WriteAheadLog(path)
    wal.open()
    for p in (b"one", b"two"):
        wal.wait(wal.append(4, 1, p))
    wal.close()
    data = bytearray(path.read_bytes())
    data[HEADER_V2.size + 3 + 16] ^= 0x01  # the seq field of the second record
    path.write_bytes(bytes(data))
    assert [r.payload for r in read_records(path)[0]] == [b"one"]


def test_v1_records_of_an_older_agent_are_still_read(tmp_path: Path) -> None:
    import struct
    import zlib

    path = tmp_path / "agent.wal"
    path.write_bytes(b"".join(struct.pack("<IIq", len(p), zlib.crc32(p), 9) + p
                              for p in (b"old", b"older")))
    records, good = read_records(path)
    assert [(r.seq, r.start_ns, r.payload) for r in records] == [(None, 9, b"old"),
                                                                (None, 9, b"older")]
    assert good == path.stat().st_size


def test_oldest_wait_shows_a_frozen_disk_and_clears_when_it_thaws(tmp_path: Path) -> None:
    import time

    stall = tmp_path / "stall"
    stall.touch()
    wal = WriteAheadLog(tmp_path / "agent.wal", stall_file=stall)
    wal.open()
    assert wal.oldest_wait_s() == 0.0
    ticket = wal.append(0, 1, b"x")
    time.sleep(0.3)
    assert wal.oldest_wait_s() >= 0.3 and wal.durable < ticket
    stall.unlink()
    wal.wait(ticket, timeout=10)
    assert wal.oldest_wait_s() == 0.0
    wal.close()


def test_unarchived_ties_records_to_the_archive_seq_not_the_clock() -> None:
    from agent.wal import WalRecord, unarchived

    recs = [WalRecord(4, 900, 1, b"a"), WalRecord(5, 100, 2, b"b"), WalRecord(5, 100, 3, b"c"),
            WalRecord(None, 50, 0, b"v1-old"), WalRecord(None, 950, 0, b"v1-new")]
    # head seq 4 (its window started at 900): seq 5 is replayed however early its start
    got = unarchived(recs, 4, 900)
    assert {k: [r.payload for r in v] for k, v in got.items()} == {5: [b"b", b"c", b"v1-new"]}
    assert [r.payload for r in unarchived(recs, None, None)[4]] == [b"a"]  # empty archive


def _voluntary_switches(native_id: int) -> int:
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("voluntary_ctxt_switches")))


def test_an_append_wakes_the_writer_alone_and_a_commit_only_the_waiters_it_covers(
        tmp_path: Path) -> None:
    """Waiting request threads sleep through other requests' appends (one shared condition
    woke every waiter at every append and every commit: a context switch and a turn at the
    GIL each), and each returns once its own record is durable."""
    import sys
    import time

    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("counts context switches in /proc")
    stall = tmp_path / "stall"
    stall.touch()  # every commit waits: records queue up behind the first
    wal = WriteAheadLog(tmp_path / "agent.wal", stall_file=stall)
    wal.open()
    ids: list[int] = []
    seen: list[tuple[int, int]] = []  # (ticket, durable when wait returned)
    ready = threading.Barrier(9)

    def waiter() -> None:
        ids.append(threading.get_native_id())
        ticket = wal.append(0, 1, b"w")
        ready.wait()
        wal.wait(ticket, timeout=30)
        seen.append((ticket, wal.durable))

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for th in threads:
        th.start()
    ready.wait()
    time.sleep(0.2)  # every waiter is asleep in wait()
    before = {i: _voluntary_switches(i) for i in ids}
    for _ in range(50):  # spaced, so that a waiter woken by one has the time to run
        wal.append(0, 1, b"other")
        time.sleep(0.005)
    time.sleep(0.1)
    woken = {i: _voluntary_switches(i) - before[i] for i in ids}
    stall.unlink()
    for th in threads:
        th.join(timeout=30)
    wal.close()
    assert max(woken.values()) <= 3, woken  # it was about 50 each
    assert len(seen) == 8 and all(durable >= ticket for ticket, durable in seen)


def test_a_wait_that_times_out_leaves_nothing_behind_and_later_waits_still_return(
        tmp_path: Path) -> None:
    import pytest

    from agent.wal import WalError

    stall = tmp_path / "stall"
    stall.touch()
    wal = WriteAheadLog(tmp_path / "agent.wal", stall_file=stall)
    wal.open()
    ticket = wal.append(0, 1, b"x")
    with pytest.raises(WalError, match="did not sync within 0.2 s"):
        wal.wait(ticket, timeout=0.2)
    assert wal._sleepers == []  # the timed-out waiter is no longer listed
    stall.unlink()
    wal.wait(ticket, timeout=10)
    wal.wait(wal.append(0, 1, b"y"), timeout=10)
    wal.close()


def test_a_void_record_is_dropped_on_open_whether_it_landed_before_or_after_its_entry(
        tmp_path: Path) -> None:
    """The pipeline names a record void when its request was answered "unavailable" (not
    durable in time); the record may land later still (a thawed disk). Either order, a
    reopen (a restart after kill -9) returns every other record, in log order, and not it."""
    from agent.wal import VOID_SUFFIX

    stall = tmp_path / "stall"
    wal = WriteAheadLog(tmp_path / "agent.wal", stall_file=stall)
    wal.open()
    wal.wait(wal.append(0, 1, b"kept-1"))
    t_landed, id_landed = wal.append_with_id(0, 1, b"voided-after-landing")
    wal.wait(t_landed)
    wal.void(id_landed)  # the race: durable just after the pipeline gave up on it
    stall.touch()  # the disk freezes
    t_stuck, id_stuck = wal.append_with_id(0, 1, b"voided-before-landing")
    wal.void(id_stuck)  # written at once, not behind the stalled writer
    assert (tmp_path / ("agent.wal" + VOID_SUFFIX)).stat().st_size == 32
    stall.unlink()  # it thaws: the record lands after its void entry
    wal.wait(t_stuck, timeout=10)
    wal.wait(wal.append(0, 1, b"kept-2"))
    wal.close()  # as a kill -9 leaves the files (both written, neither truncated)
    again = WriteAheadLog(tmp_path / "agent.wal")
    assert [r.payload for r in again.open()] == [b"kept-1", b"kept-2"]
    assert again.voided_on_open == 2
    again.truncate()  # the window is archived: the log and its void file empty together
    assert (tmp_path / "agent.wal").stat().st_size == 0
    assert (tmp_path / ("agent.wal" + VOID_SUFFIX)).stat().st_size == 0
    again.close()


def test_a_torn_void_entry_is_skipped_and_stale_entries_go_with_an_empty_log(
        tmp_path: Path) -> None:
    from agent.wal import VOID_SUFFIX, read_voids, void_entry

    void = tmp_path / ("agent.wal" + VOID_SUFFIX)
    wal = WriteAheadLog(tmp_path / "agent.wal")
    wal.open()
    t1, id1 = wal.append_with_id(0, 1, b"a")
    t2, id2 = wal.append_with_id(0, 1, b"b")
    t3, id3 = wal.append_with_id(0, 1, b"c")
    wal.wait(t3)
    wal.void(id1)
    wal.close()
    with void.open("ab") as f:
        f.write(void_entry(id2)[:9])  # a short write (a full disk), then a whole entry after it
        f.write(void_entry(id3))
    assert read_voids(void) == ({id1, id3}, 9)
    again = WriteAheadLog(tmp_path / "agent.wal")
    assert [r.payload for r in again.open()] == [b"b"]  # the entry after the torn one counts
    assert again.voided_on_open == 2
    again.close()
    (tmp_path / "agent.wal").write_bytes(b"")  # the log was emptied, its void file not (a crash)
    third = WriteAheadLog(tmp_path / "agent.wal")
    assert third.open() == [] and third.voided_on_open == 0
    assert void.stat().st_size == 0  # nothing left to name
    third.close()


def test_record_ids_are_unique_even_when_the_clock_repeats_or_steps_back(
        tmp_path: Path, monkeypatch) -> None:
    """A record's id is (append ns, CRC): two equal payloads appended in the same nanosecond, or
    after a clock step back, must still get different ids, or voiding one would drop both."""
    import time as time_module

    from agent import wal as wal_module

    wal = WriteAheadLog(tmp_path / "agent.wal")
    wal.open()
    monkeypatch.setattr(wal_module.time, "time_ns", lambda: 5_000)  # a frozen clock
    t1, id1 = wal.append_with_id(0, 1, b"same")
    t2, id2 = wal.append_with_id(0, 1, b"same")
    assert id1 != id2 and id2[0] == id1[0] + 1
    wal.wait(t2)
    wal.void(id1)
    wal.close()
    monkeypatch.setattr(wal_module.time, "time_ns", lambda: 10)  # stepped back past both
    again = WriteAheadLog(tmp_path / "agent.wal")
    assert [r.payload for r in again.open()] == [b"same"]  # only the voided one is dropped
    t3, id3 = again.append_with_id(0, 1, b"same")
    assert id3[0] > id2[0]  # later than every record already in the log
    monkeypatch.setattr(wal_module.time, "time_ns", time_module.time_ns)
    again.wait(t3)
    again.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=0, max_size=40), st.booleans()), max_size=25))
def test_reopening_returns_exactly_the_records_not_named_void_in_log_order(
        tmp_path_factory, records: list[tuple[bytes, bool]]) -> None:
    d = tmp_path_factory.mktemp("wal")
    wal = WriteAheadLog(d / "agent.wal")
    wal.open()
    for payload, voided in records:
        ticket, rid = wal.append_with_id(0, 1, payload)
        if voided:
            wal.void(rid)
        wal.wait(ticket)
    wal.close()
    again = WriteAheadLog(d / "agent.wal")
    assert [r.payload for r in again.open()] == [p for p, v in records if not v]
    assert again.voided_on_open == sum(v for _, v in records)
    again.close()


def test_records_appended_without_a_wake_wait_for_one_and_share_its_commit(
        tmp_path: Path) -> None:
    """OTLP/HTTP's loop appends a turn's records with ``wake=False`` and wakes the writer once
    after them: until then nothing is written; then one group commit covers them all."""
    import time

    wal = WriteAheadLog(tmp_path / "agent.wal")
    wal.open()
    wal.wait(wal.append(0, 1, b"first"))  # the writer is idle, waiting for a wake
    fsyncs = wal.fsyncs
    tickets = [wal.append_with_id(0, 1, b"r%d" % i, wake=False)[0] for i in range(5)]
    time.sleep(0.2)
    assert wal.durable < tickets[0] and wal.fsyncs == fsyncs  # nobody woke the writer
    wal.wake()
    wal.wait(tickets[-1], timeout=5)
    assert wal.fsyncs == fsyncs + 1  # one commit for the five
    wal.wake()  # nothing pending: a no-op
    wal.close()
    assert [r.payload for r in read_records(tmp_path / "agent.wal")[0]] == [
        b"first", b"r0", b"r1", b"r2", b"r3", b"r4"]
