"""The write-ahead log: every accepted batch's partial is on disk before the agent answers OK.

One file, ``agent.wal``, beside the window files. A record is a 16-byte header
``<u32 payload length, u32 crc32(payload), i64 window start ns>`` and the payload,
``WindowPartial.to_bytes()``. The window start says which window the partial belongs to, so a
restart replays it into that window (and skips partials of a window the archive already
holds: a crash between writing the window line and truncating the log).

Group commit: request threads call :meth:`append` (cheap: it queues bytes and returns a ticket)
and then :meth:`wait`; one writer thread writes everything queued with one ``write`` and one
``fdatasync`` and wakes every waiter it covered. Many concurrent requests thus share one
fsync, which is what keeps the ingest rate up (one fsync per request would cap it at the
disk's fsync rate). The log is truncated once its window is archived.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("carbonspan.agent")

HEADER = struct.Struct("<IIq")
MAX_RECORD_BYTES = 1 << 30


class WalError(RuntimeError):
    """The log could not be written; what was queued is not durable (the requests fail)."""


def read_records(path: Path) -> tuple[list[tuple[int, bytes]], int]:
    """``([(window_start_ns, payload)], good_length)``; reading stops at the first torn record.

    A torn or corrupt record can only be one that was never acknowledged (acknowledged records
    were fsynced before it), so everything from it on is dropped by :meth:`open`.
    """
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    out: list[tuple[int, bytes]] = []
    pos = 0
    while pos + HEADER.size <= len(data):
        length, crc, start_ns = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + length
        if length > MAX_RECORD_BYTES or end > len(data):
            break
        payload = data[pos + HEADER.size : end]
        if zlib.crc32(payload) != crc:
            break
        out.append((start_ns, payload))
        pos = end
    return out, pos


class WriteAheadLog:
    """Append-only log with group commit. ``fsync_delay_s`` slows every flush (tests only)."""

    def __init__(self, path: Path, *, fsync_delay_s: float = 0.0,
                 on_sync: Callable[[int], None] | None = None) -> None:
        self.path = Path(path)
        self.fsync_delay_s = fsync_delay_s
        self.on_sync = on_sync  # called with the records covered by each group commit
        self._fd: int | None = None
        self._cond = threading.Condition()
        self._pending: list[bytes] = []
        self._queued = 0  # tickets handed out
        self._durable = 0  # highest ticket on disk
        self._error: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self.fsyncs = 0
        self.bytes_written = 0
        self._good_size = 0  # file length after the last successful sync

    def open(self) -> list[tuple[int, bytes]]:
        """Open the log, drop a torn tail, start the writer; return the records to replay."""
        records, good = read_records(self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if os.fstat(self._fd).st_size != good:
            os.ftruncate(self._fd, good)
            os.fsync(self._fd)
        self._good_size = good
        self._thread = threading.Thread(target=self._run, name="wal-writer", daemon=True)
        self._thread.start()
        return records

    def append(self, window_start_ns: int, payload: bytes) -> int:
        """Queue one record; returns the ticket to :meth:`wait` on. Order of calls is log order."""
        rec = HEADER.pack(len(payload), zlib.crc32(payload), window_start_ns) + payload
        with self._cond:
            if self._error is not None:
                raise WalError(f"the write-ahead log {self.path} failed: {self._error}")
            self._pending.append(rec)
            self._queued += 1
            self._cond.notify_all()
            return self._queued

    def wait(self, ticket: int, timeout: float = 30.0) -> None:
        """Block until record ``ticket`` is on disk. Raises WalError if it cannot be."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._durable < ticket:
                if self._error is not None:
                    raise WalError(f"the write-ahead log {self.path} failed: {self._error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WalError(
                        f"the write-ahead log {self.path} did not sync within {timeout} s"
                    )
                self._cond.wait(left)

    def truncate(self) -> None:
        """Empty the log once its window is archived (waits for queued records first)."""
        with self._cond:
            self.wait(self._queued)
            assert self._fd is not None
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
            self._good_size = 0

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
                    self._cond.notify_all()
                return
            with self._cond:
                self._durable = upto
                self._cond.notify_all()
            if self.on_sync is not None:
                self.on_sync(len(batch))

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        if self.fsync_delay_s:
            time.sleep(self.fsync_delay_s)  # test knob: a slow disk, to provoke backpressure
        os.fdatasync(self._fd)
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
