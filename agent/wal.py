"""The write-ahead log: every accepted batch's partial is on disk before the agent answers OK.

One file, ``agent.wal``, beside the window files. A record is a 32-byte header
``<u32 payload length | 1<<31, u32 crc32(header[8:] + payload), i64 window start ns,
i64 window seq, i64 appended at ns>`` and the payload, ``WindowPartial.to_bytes()``. The seq is
the archive sequence number the window's line will take, so a restart replays into a window
exactly the records whose seq is after the archive head and skips those of a window the
archive already holds (a crash between writing the window line and truncating the log),
whatever the wall clock says. Records of the 16-byte v1 header (``<u32 length, u32 crc32,
i64 window start>``, before the seq was logged) are still read.

Group commit: request threads call :meth:`append` (cheap: it queues bytes and returns a ticket)
and then :meth:`wait`; one writer thread writes everything queued with one ``write`` and one
``fdatasync`` and wakes every waiter it covered. Many concurrent requests thus share one
fsync, which is what keeps the ingest rate up (one fsync per request would cap it at the
disk's fsync rate). An append wakes the writer alone, and a commit wakes exactly the waiters
whose tickets it made durable, each on a lock of its own: one shared condition woke every
waiting request thread at every append and every commit, only for most to find their record
not yet durable and sleep again (each wake a context switch and a turn at the GIL). A request
need not wait at all: after each commit the writer calls ``on_commit``, where the pipeline
merges what is durable and answers the requests that did not wait (the OTLP/HTTP ones: see
``Pipeline.ingest_later``). The log is truncated once its window is archived.

Void records: a request whose record was not durable within ``COMMIT_WAIT_S`` (a stalled disk)
is answered "unavailable, retry" and its partial is never merged, but its record may still land
in the file once the disk thaws, and a replay after ``kill -9`` would then count the batch a
second time beside the client's retry. So the pipeline names each record it gives up on in
``agent.wal.void`` (:meth:`WriteAheadLog.void`), a file of 16-byte entries ``<i64 the record's
append time in ns, u32 the record's CRC, u32 crc32 of those 12 bytes>``, written at once by the
thread that gives up (not queued behind the stalled writer) and synced with the writer's next
commit; :meth:`WriteAheadLog.open` drops every record so named, whether the record landed
before or after its entry. The void file is emptied with the log.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger("carbonspan.agent")

HEADER = struct.Struct("<IIq")  # v1 (read only): length, crc32(payload), window start ns
#: v2: length | V2_FLAG, crc32(rest of header + payload), window start ns, window seq, append ns
HEADER_V2 = struct.Struct("<IIqqq")
V2_FLAG = 1 << 31
MAX_RECORD_BYTES = 1 << 30
#: a void entry: the record's append time (ns), its CRC, and crc32 of those 12 bytes
VOID = struct.Struct("<qII")
VOID_SUFFIX = ".void"


class WalError(RuntimeError):
    """The log could not be written; what was queued is not durable (the requests fail)."""


class WalRecord(NamedTuple):
    """One logged partial: the archive ``seq`` its window's line will take (``None`` in a v1
    record), the window's start and the wall-clock time it was appended (ns since the epoch)."""

    seq: int | None
    start_ns: int
    appended_ns: int
    payload: bytes
    crc: int = 0  # the header's CRC (0 in a v1 record): with appended_ns, what a void entry names

    @property
    def record_id(self) -> tuple[int, int]:
        return self.appended_ns, self.crc


def encode_record(seq: int, start_ns: int, appended_ns: int, payload: bytes) -> bytes:
    rest = HEADER_V2.pack(0, 0, start_ns, seq, appended_ns)[8:]
    crc = zlib.crc32(payload, zlib.crc32(rest))
    return struct.pack("<II", len(payload) | V2_FLAG, crc) + rest + payload


def void_entry(record_id: tuple[int, int]) -> bytes:
    head = VOID.pack(record_id[0], record_id[1], 0)[:12]
    return head + struct.pack("<I", zlib.crc32(head))


def read_voids(path: Path) -> tuple[set[tuple[int, int]], int]:
    """``(record ids named void, bytes that were not whole entries)``. Each entry checks itself,
    so a torn or partial one (a power loss, a short write on a full disk) is skipped and reading
    goes on at the next byte: the entries after it still count (a false match needs a 32-bit
    CRC to agree by chance, and could only name a record that does not exist)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set(), 0
    out: set[tuple[int, int]] = set()
    pos = bad = 0
    while pos + VOID.size <= len(data):
        ns, crc, check = VOID.unpack_from(data, pos)
        if zlib.crc32(data[pos : pos + 12]) != check:
            pos += 1
            bad += 1
            continue
        out.add((ns, crc))
        pos += VOID.size
    return out, bad + len(data) - pos


def read_records(path: Path) -> tuple[list[WalRecord], int]:
    """``([WalRecord], good_length)``; reading stops at the first torn or corrupt record.

    A torn or corrupt record can only be one that was never acknowledged (acknowledged records
    were fsynced before it), so everything from it on is dropped by :meth:`open`.
    """
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    out: list[WalRecord] = []
    pos = 0
    while pos + HEADER.size <= len(data):
        word, crc = struct.unpack_from("<II", data, pos)
        v2 = bool(word & V2_FLAG)
        size = HEADER_V2.size if v2 else HEADER.size
        length = word & ~V2_FLAG
        end = pos + size + length
        if length > MAX_RECORD_BYTES or end > len(data):
            break
        payload = data[pos + size : end]
        if v2:
            _, _, start_ns, seq, appended_ns = HEADER_V2.unpack_from(data, pos)
            if zlib.crc32(payload, zlib.crc32(data[pos + 8 : pos + size])) != crc:
                break
            out.append(WalRecord(seq, start_ns, appended_ns, payload, crc))
        else:
            start_ns = HEADER.unpack_from(data, pos)[2]
            if zlib.crc32(payload) != crc:
                break
            out.append(WalRecord(None, start_ns, 0, payload))
        pos = end
    return out, pos


def unarchived(
    records: list[WalRecord], head_seq: int | None, head_start_ns: int | None
) -> dict[int, list[WalRecord]]:
    """The records of windows the archive lacks, by window seq (log order kept in each).

    A record whose seq is after the archive head's (``head_seq``; None for an empty archive)
    is not archived yet; the others were (a crash between the window line and the truncation).
    A v1 record has no seq: it is of the unarchived window when its window start is after the
    head's ``window.start`` (``head_start_ns``), the rule before the seq was logged.
    """
    head = -1 if head_seq is None else head_seq
    groups: dict[int, list[WalRecord]] = {}
    for rec in records:
        seq = rec.seq
        if seq is None:
            seq = head + 1 if head_start_ns is None or rec.start_ns > head_start_ns else head
        if seq > head:
            groups.setdefault(seq, []).append(rec)
    return groups


class WriteAheadLog:
    """Append-only log with group commit.

    Test knobs (``[agent.archive]``, documented as testing only): ``fsync_delay_s`` slows
    every flush; while the file ``stall_file`` exists every flush waits before its
    ``fdatasync``, as on a frozen disk, so a test can freeze and thaw the log at will.
    """

    def __init__(self, path: Path, *, fsync_delay_s: float = 0.0,
                 on_sync: Callable[[int], None] | None = None,
                 stall_file: Path | None = None) -> None:
        self.path = Path(path)
        self.fsync_delay_s = fsync_delay_s
        self.stall_file = stall_file
        self.on_sync = on_sync  # called with the records covered by each group commit
        # called (no lock held) after each group commit and once when the log fails, after the
        # waiters it covered were released: the pipeline answers its deferred requests here
        self.on_commit: Callable[[], None] | None = None
        self._waiting: deque[tuple[int, float]] = deque()  # (ticket, monotonic append time)
        self._fd: int | None = None
        self._cond = threading.Condition()  # guards the state; the writer alone waits on it
        # threads in wait(): (ticket, n, lock held until the commit that covers the ticket)
        self._sleepers: list[tuple[int, int, threading.Lock]] = []
        self._sleeper_n = itertools.count()
        self._pending: list[bytes] = []
        self._queued = 0  # tickets handed out
        self._durable = 0  # highest ticket on disk
        self._error: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self.fsyncs = 0
        self.bytes_written = 0
        self._good_size = 0  # file length after the last successful sync
        self.void_path = self.path.with_name(self.path.name + VOID_SUFFIX)
        self._void_fd: int | None = None
        self._void_lock = threading.Lock()  # one void entry written at a time
        self._void_dirty = False  # entries written since the void file's last sync
        self.voided_on_open = 0  # records open() dropped because the void file names them
        self.voided: list[WalRecord] = []  # those records (Pipeline.restore counts its own)
        self._last_ns = 0  # the last record's append time: each one's is later (its id is unique)
        self.voids_written = 0

    def open(self) -> list[WalRecord]:
        """Open the log, drop a torn tail, start the writer; return the records to replay (those
        the void file names are dropped and counted in :attr:`voided_on_open`)."""
        records, good = read_records(self.path)
        self._last_ns = max((r.appended_ns for r in records), default=0)
        voids, void_bad = read_voids(self.void_path)
        if void_bad:
            log.warning("%s holds %d bytes that are not whole void entries (a torn write); the "
                        "%d whole entries around them are honoured", self.void_path, void_bad,
                        len(voids))
        if voids:
            kept = [r for r in records if r.record_id not in voids]
            self.voided = [r for r in records if r.record_id in voids]
            self.voided_on_open = len(self.voided)
            records = kept
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        void_created = not self.void_path.exists()
        self._void_fd = os.open(self.void_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if created or void_created:  # a new file's directory entry must be durable too
            _fsync_dir(self.path.parent)
        if os.fstat(self._fd).st_size != good:
            os.ftruncate(self._fd, good)
            os.fsync(self._fd)
        if good == 0 and os.fstat(self._void_fd).st_size:
            os.ftruncate(self._void_fd, 0)  # no record left to name: what it holds is stale
            os.fsync(self._void_fd)
        self._good_size = good
        self._thread = threading.Thread(target=self._run, name="wal-writer", daemon=True)
        self._thread.start()
        return records

    def append(self, seq: int, window_start_ns: int, payload: bytes) -> int:
        """Queue one record of the window whose line will be archive ``seq``; returns the ticket
        to :meth:`wait` on. Order of calls is log order."""
        return self.append_with_id(seq, window_start_ns, payload)[0]

    def append_with_id(self, seq: int, window_start_ns: int, payload: bytes, *,
                       wake: bool = True) -> tuple[int, tuple[int, int]]:
        """:meth:`append`, also returning the record's id, which :meth:`void` takes. With
        ``wake=False`` the writer is not woken (a caller that appends several records in a row,
        OTLP/HTTP's event loop, then calls :meth:`wake` once: one wake-up and one group commit
        for them all, where each wake-up is a context switch and a turn at the GIL)."""
        # strictly increasing, so no two records share an id (appends are serialised by the
        # caller, the pipeline's lock; a clock step back costs 1 ns per record until it passes)
        appended = max(time.time_ns(), self._last_ns + 1)
        self._last_ns = appended
        rec = encode_record(seq, window_start_ns, appended, payload)
        with self._cond:
            if self._error is not None:
                raise WalError(f"the write-ahead log {self.path} failed: {self._error}")
            self._pending.append(rec)
            self._queued += 1
            self._waiting.append((self._queued, time.monotonic()))
            if wake:
                self._cond.notify()  # the writer: nobody else waits on the condition
            return self._queued, (appended, struct.unpack_from("<I", rec, 4)[0])

    def wake(self) -> None:
        """Wake the writer for the records appended with ``wake=False`` (a no-op when none waits
        or the writer is busy: it looks for more records after each commit)."""
        with self._cond:
            if self._pending:
                self._cond.notify()

    def void(self, record_id: tuple[int, int]) -> None:
        """Name a record whose request was answered "unavailable, retry" (never merged): a
        replay drops it even if it lands in the log afterwards (a thawed disk), so it is never
        counted beside the client's retry. Written at once, not behind the writer (which may be
        the thread stalled on the disk); synced with the writer's next commit. Raises OSError
        if the void file cannot be written."""
        entry = void_entry(record_id)
        with self._void_lock:
            if self._void_fd is None:
                raise OSError(f"the write-ahead log {self.path} is not open")
            n = os.write(self._void_fd, entry)
            if n != len(entry):  # a 16-byte append is whole or fails, short only on a full disk
                raise OSError(f"short write to {self.void_path}")
            self.voids_written += 1
            self._void_dirty = True

    def oldest_wait_s(self) -> float:
        """Seconds the oldest record not yet durable has waited (0 when none waits). Without
        the condition, which a truncation holds through its fsync: the readiness checks on
        OTLP/HTTP's event loop (/readyz, every export) read this and must not wait for a disk
        (indexing the deque is one step under the GIL)."""
        try:
            return time.monotonic() - self._waiting[0][1]
        except IndexError:  # none waits
            return 0.0

    def wait(self, ticket: int, timeout: float = 30.0) -> None:
        """Block until record ``ticket`` is on disk. Raises WalError if it cannot be."""
        with self._cond:
            if self._durable >= ticket:
                return
            if self._error is not None:
                raise WalError(f"the write-ahead log {self.path} failed: {self._error}")
            lock = threading.Lock()
            lock.acquire()
            entry = (ticket, next(self._sleeper_n), lock)
            heapq.heappush(self._sleepers, entry)
        woken = lock.acquire(timeout=max(0.0, timeout))
        with self._cond:
            if self._durable >= ticket:
                return
            if not woken and self._error is None:  # still listed: no commit reached it
                self._sleepers.remove(entry)
                heapq.heapify(self._sleepers)
            if self._error is not None:
                raise WalError(f"the write-ahead log {self.path} failed: {self._error}")
            raise WalError(f"the write-ahead log {self.path} did not sync within {timeout} s")

    def _wake_locked(self, upto: int | None) -> None:
        """Release the sleepers whose ticket is at most ``upto`` (None: all of them)."""
        sleepers = self._sleepers
        while sleepers and (upto is None or sleepers[0][0] <= upto):
            heapq.heappop(sleepers)[2].release()

    def truncate(self) -> None:
        """Empty the log once its window is archived (waits for queued records first)."""
        with self._cond:
            upto = self._queued
        self.wait(upto)  # not holding the lock: the writer takes it to say what is durable
        with self._cond:
            self._truncate_locked()

    def _truncate_locked(self) -> None:
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self._good_size = 0
        with self._void_lock:  # after the log: a crash between the two leaves stale entries only
            if self._void_fd is not None and os.fstat(self._void_fd).st_size:
                os.ftruncate(self._void_fd, 0)
                os.fsync(self._void_fd)
            self._void_dirty = False

    def truncate_if_idle(self) -> bool:
        """Empty the log if no record waits for its commit (never blocks); False otherwise.

        A window close uses this: with a stalled disk it must not wait, and records it leaves
        behind belong to archived windows (their ``seq`` is not after the archive head), which
        a replay skips.
        """
        with self._cond:
            if self._queued != self._durable or self._error is not None:
                return False
            self._truncate_locked()
            return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending and self._closing:
                    return
                batch, self._pending = self._pending, []
                upto = self._queued
            try:
                self._write(b"".join(batch))
            except OSError as exc:
                log.error("the write-ahead log %s failed (%s): the agent acknowledges nothing "
                          "more until it is restarted with the disk fixed", self.path, exc)
                self._cut_back()
                with self._cond:
                    self._error = exc
                    self._wake_locked(None)
                self._committed()
                return
            with self._cond:
                self._durable = upto
                while self._waiting and self._waiting[0][0] <= upto:
                    self._waiting.popleft()
                self._wake_locked(upto)
            if self.on_sync is not None:
                self.on_sync(len(batch))
            self._committed()

    def _committed(self) -> None:
        if self.on_commit is not None:
            try:
                self.on_commit()
            except Exception:  # the writer must outlive it: the requests it owed time out
                log.exception("answering the requests of a group commit failed")

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        if self.fsync_delay_s:
            time.sleep(self.fsync_delay_s)  # test knob: a slow disk, to provoke backpressure
        while self.stall_file is not None and self.stall_file.exists():
            time.sleep(0.02)  # test knob: a frozen disk, thawed when the file goes
        os.fdatasync(self._fd)
        if self._void_dirty and self._void_fd is not None:  # rare: only after a give-up
            self._void_dirty = False
            os.fdatasync(self._void_fd)
        self.fsyncs += 1
        self.bytes_written += len(data)
        self._good_size += len(data)

    def _cut_back(self) -> None:
        """After a failed write or sync, cut the file back to what was durable.

        Records of a failed group commit were answered "unavailable" and will be retried by
        their clients; were they left in the file (a write that landed before the sync
        failed), a restart would replay them and count them twice.
        """
        try:
            assert self._fd is not None
            os.ftruncate(self._fd, self._good_size)
            os.fsync(self._fd)
        except OSError:  # the disk is gone: nothing more can be done here; restart says more
            pass

    @property
    def durable(self) -> int:
        """The highest ticket whose record is on disk (final once :attr:`failed`)."""
        with self._cond:
            return self._durable

    @property
    def failed(self) -> bool:
        """True once a write or fsync failed: nothing more can be acknowledged."""
        return self._error is not None

    @property
    def pending(self) -> int:
        with self._cond:
            return self._queued - self._durable

    def close(self) -> None:
        """Flush what is queued, stop the writer and close the file (the log is kept)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with self._void_lock:
            if self._void_fd is not None:
                os.close(self._void_fd)
                self._void_fd = None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
