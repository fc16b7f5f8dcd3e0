"""Durable, hash-chained window archives: append, rotate, compress, lock, recover.

Layout (docs/archive-format.md; the names, the body key and how lines are read are
``schema.archive``'s): one directory per agent id holding window files
``windows-<YYYYMMDD>-<NNNNNN>.jsonl`` (``.jsonl.gz`` once compressed), where ``NNNNNN`` is a
rotation counter that never goes back, so lexical order is write order. The lock
``agent.lock``, the write-ahead log ``agent.wal`` (and its ``agent.wal.void``) and torn tails ``*.corrupt`` sit beside them.

Why each step is there:
- a line is written whole with one ``write`` on an ``O_APPEND`` descriptor and ``fsync``ed
  before :meth:`ArchiveWriter.append` returns, so "archived" means "on disk";
- the lock is an ``flock`` (released by the kernel when the holder dies, even by ``kill -9``,
  so a crash never leaves a stale lock), and the file names the holder's PID for the error;
- recovery keeps the chain whole: a torn last line (a crash mid-write) is moved to a
  ``.corrupt`` file, never silently deleted, and the chain continues from the last good line.
"""

from __future__ import annotations

import fcntl
import gzip
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from schema import times
from schema.archive import (
    AGENT_FILE_RE,
    BODY_KEY,
    GZIP_SUFFIX,
    RECORD_KEYS,
    ArchiveReadError,
    LongLine,
    is_gzip,
    numbered_lines,
    window_file_name,
)
from schema.chain import record_hash, seal
from schema.constants import MAX_LINE_BYTES

LOCK_NAME = "agent.lock"
WAL_NAME = "agent.wal"


class ArchiveError(RuntimeError):
    """The archive directory cannot be used as it is; the message says what to do."""


class ArchiveLockedError(ArchiveError):
    """Another live agent holds the archive directory's lock."""

    def __init__(self, directory: Path, holder_pid: int | None) -> None:
        who = f"process {holder_pid}" if holder_pid else "another process"
        super().__init__(
            f"archive directory {directory} is locked by {who} (lock file {directory / LOCK_NAME}); "
            "two agents must not write one chain: stop that agent, or give this one another "
            "--archive-dir or agent id"
        )
        self.holder_pid = holder_pid


def _utc_day(ts: str) -> str:
    """``YYYYMMDD`` of an RFC 3339 time in UTC (a time without offset is taken as UTC); the
    current UTC day if ``ts`` is not such a time."""
    try:
        return times.utc_day(ts)
    except ValueError:
        return times.utc_day(times.now())


def window_files(directory: Path) -> list[Path]:
    """The window files this agent wrote in ``directory`` (``schema.archive.AGENT_FILE_RE``),
    in write (= lexical) order; a renamed copy is not the writer's to continue."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if AGENT_FILE_RE.match(p.name))


def read_lines(path: Path) -> list[bytes]:
    """The lines (without newline) of a plain or gzip window file, read by the archive's rules
    (``schema.archive.numbered_lines``: blank lines skipped, a line past ``MAX_LINE_BYTES`` a
    ``LongLine``); of a stream that ends abnormally, the lines before the break (the unreadable
    rest is for ``verify`` to report)."""
    out: list[bytes] = []
    try:
        for _, line in numbered_lines(path):
            out.append(line)
    except ArchiveReadError:
        pass
    return out


def read_records(directory: Path) -> list[tuple[str, dict[str, Any] | None]]:
    """``(file:line, record or None)`` for every line of every window file, in write order.

    This is the input ``schema.chain.verify_chain`` expects.
    """
    out: list[tuple[str, dict[str, Any] | None]] = []
    for path in window_files(directory):
        try:
            for lineno, raw in numbered_lines(path):
                try:
                    rec = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    rec = None
                out.append((f"{path.name}:{lineno}", rec if isinstance(rec, dict) else None))
        except ArchiveReadError:
            pass  # the lines before the break stand; verify reports the break
    return out


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_line(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """``(record, "")`` if ``raw`` is a whole, self-consistent chained record, else ``(None,
    why not)``. Never raises on the line's content (issue 12: a line nested 1,000 levels deep
    once crashed start-up with RecursionError)."""
    if type(raw) is LongLine or len(raw) > MAX_LINE_BYTES:
        length = raw.length if type(raw) is LongLine else len(raw)
        return None, f"a line of {length:,} bytes, past the {MAX_LINE_BYTES:,}-byte limit"
    try:
        rec = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, f"not JSON ({str(exc).split(':')[0]})"
    if not isinstance(rec, dict) or not RECORD_KEYS <= rec.keys():
        return None, "not a chained record"
    try:
        recomputed = record_hash(rec)
    except ValueError as exc:  # e.g. nested past canonical JSON's 254 levels: no agent wrote it
        return None, str(exc)
    return (rec, "") if recomputed == rec["hash"] else (None, "its hash does not verify")


def _good_line(raw: bytes) -> dict[str, Any] | None:
    """The record on ``raw`` if it is a whole, self-consistent chained record."""
    return _check_line(raw)[0]


@dataclass(slots=True)
class RecoveryReport:
    """What opening the archive found and did (logged by the daemon, asserted by tests)."""

    last_seq: int | None = None
    last_hash: str | None = None
    last_window_start: str | None = None
    last_window_end: str | None = None  # the pipeline warns when the clock is behind it
    corrupt_file: Path | None = None
    corrupt_bytes: int = 0
    corrupt_reason: str = ""  # why the tail was cut: its last line's fault, or a partial write
    skipped_lines: int = 0  # unreadable last lines of compressed files, left in place
    skipped_reason: str = ""  # the file and why the last of them is unreadable
    removed_duplicates: int = 0


class ArchiveWriter:
    """The only writer of one agent's chain. Not thread-safe: the pipeline serialises calls."""

    def __init__(
        self,
        directory: Path,
        *,
        max_size_mb: float = 100.0,
        rotate_daily: bool = True,
        compress: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.max_size_bytes = int(max_size_mb * 1024 * 1024)
        self.rotate_daily = rotate_daily
        self.compress = compress
        self._lock_fd: int | None = None
        self._fd: int | None = None
        self._path: Path | None = None
        self._size = 0
        self._counter = 0
        self._day = ""
        self.last_seq: int | None = None
        self.last_hash: str | None = None
        self.bytes_written = 0
        self._compressor: threading.Thread | None = None
        # told of every durable line and of close (agent.checkpoints.CheckpointLog signs heads)
        self.listener: Any = None

    # -- opening -----------------------------------------------------------------------
    def open(self) -> RecoveryReport:
        """Take the lock, recover the tail and find the chain head. Raises ArchiveError."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            return self._recover()
        except BaseException:
            self.close()
            raise

    def _acquire_lock(self) -> None:
        path = self.directory / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise ArchiveLockedError(self.directory, int(raw) if raw.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self._lock_fd = fd

    def _recover(self) -> RecoveryReport:
        report = RecoveryReport()
        report.removed_duplicates = self._drop_half_compressed()
        files = window_files(self.directory)
        if not files:
            return report
        last = files[-1]
        m = AGENT_FILE_RE.match(last.name)
        assert m is not None
        self._day, self._counter = m.group(1), int(m.group(2))
        if is_gzip(last.name):
            rec = self._head_of(files, report)
            if rec is None:  # nothing to continue from: a new chain here would hide the old one
                raise ArchiveError(f"{last} is compressed and no window file holds a valid record "
                                   f"({report.skipped_reason}); run 'carbonspan verify' on the archive")
        else:
            rec = self._recover_plain(last, report)
            if rec is None:  # the whole file was torn away: take the head from earlier files
                rec = self._head_of(files[:-1], report)
        if rec is not None:
            self.last_seq, self.last_hash = int(rec["seq"]), str(rec["hash"])
            report.last_window_start = rec[BODY_KEY].get("window", {}).get("start")
            report.last_window_end = rec[BODY_KEY].get("window", {}).get("end")
        report.last_seq, report.last_hash = self.last_seq, self.last_hash
        if self.compress:
            for path in files[:-1]:
                if not is_gzip(path.name):
                    self._gzip(path)
        return report

    def _head_of(self, files: list[Path], report: RecoveryReport) -> dict[str, Any] | None:
        """The last good record of ``files``. A compressed file cannot be cut, so unreadable
        lines after it stay in place (counted in ``report.skipped_lines`` with the first's
        reason; ``verify`` reports them) and the chain continues from the good record."""
        for path in reversed(files):
            lines = read_lines(path)
            for line in reversed(lines):
                rec, why = _check_line(line)
                if rec is not None:
                    return rec
                report.skipped_lines += 1
                report.skipped_reason = report.skipped_reason or f"{path.name}: {why}"
        return None

    def _recover_plain(self, path: Path, report: RecoveryReport) -> dict[str, Any] | None:
        """Cut a torn tail off ``path`` into a ``.corrupt`` file; return the last good record."""
        data = path.read_bytes()
        good_end = data.rfind(b"\n") + 1  # bytes after the last newline are a torn write
        last_rec: dict[str, Any] | None = None
        reason = "a partial line without its newline (a torn write)" if good_end < len(data) else ""
        while good_end > 0:
            start = data.rfind(b"\n", 0, good_end - 1) + 1
            last_rec, why = _check_line(data[start : good_end - 1])
            if last_rec is not None:
                break
            reason = reason or f"its last whole line is unreadable: {why}"
            good_end = start  # a whole but unreadable last line: also a torn write
        if good_end < len(data):
            tail = data[good_end:]
            corrupt = self.directory / f"{path.name}.{times.now().replace(':', '')}.corrupt"
            with open(corrupt, "wb") as fh:
                fh.write(tail)
                fh.flush()
                os.fsync(fh.fileno())
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, good_end)
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(self.directory)
            report.corrupt_file, report.corrupt_bytes, report.corrupt_reason = corrupt, len(tail), reason
        self._path, self._size = path, good_end
        return last_rec

    def _drop_half_compressed(self) -> int:
        """Finish a compression a crash interrupted: never leave one file's lines twice."""
        removed = 0
        for tmp in self.directory.glob("*.tmp"):
            if AGENT_FILE_RE.match(tmp.name[: -len(".tmp")]):
                tmp.unlink()
        for gz in window_files(self.directory):
            if not is_gzip(gz.name):
                continue
            plain = gz.with_suffix("")
            if plain.exists():
                plain.unlink()  # the .gz was renamed into place only once complete
                removed += 1
        return removed

    # -- writing -----------------------------------------------------------------------
    def append(self, report: dict[str, Any], ts: str | None = None) -> dict[str, Any]:
        """Seal ``report`` as the next record, write it whole and fsync. Returns the record.

        The line goes to the file of the UTC day of its ``ts`` (one clock read decides both),
        so a line sealed just before midnight never lands in the next day's file.
        """
        seq = 0 if self.last_seq is None else self.last_seq + 1
        ts = ts or times.now()
        record = seal(self.last_hash, seq, ts, BODY_KEY, report)
        line = orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n"
        old_path = self._path
        fd = self._file_for(len(line), _utc_day(ts))
        before = self._size
        try:
            view = memoryview(line)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, before)  # never leave half a line behind a failed write
            raise
        self._size += len(line)
        self.bytes_written += len(line)
        self.last_seq, self.last_hash = seq, record["hash"]
        if self.listener is not None:
            self.listener.on_append(record, line[:-1], old_path is not None and self._path != old_path)
        return record

    def _file_for(self, nbytes: int, today: str) -> int:
        """The descriptor to append ``nbytes`` sealed on UTC day ``today`` (``YYYYMMDD``) to,
        rotating by size and/or UTC day first."""
        if self._path is not None and self._size > 0:
            too_big = self._size + nbytes > self.max_size_bytes
            if too_big or (self.rotate_daily and today > self._day):
                self._close_current()
        if self._path is None:
            day = max(today, self._day)  # a clock going back never breaks lexical order
            path = self.directory / window_file_name(day, self._counter + 1)
            # nothing changes until the file exists: when it cannot be made (a read-only or
            # full directory) the next append tries the same name again. Naming it first left
            # a path that was never created, reopened without O_CREAT at every retry (ENOENT),
            # so the agent archived nothing more even once the directory was fixed
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._counter, self._day, self._path, self._fd, self._size = (
                self._counter + 1, day, path, fd, 0)
            _fsync_dir(self.directory)
        if self._fd is None:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND)
        return self._fd

    def _close_current(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.compress and self._path is not None and self._path.exists():
            # off the append path: gzip of a 100 MB file takes seconds and the pipeline holds
            # its lock while appending; a crash mid-way is finished by the next recovery
            self._wait_compression()
            self._compressor = threading.Thread(
                target=self._gzip, args=(self._path,), name="archive-gzip", daemon=True
            )
            self._compressor.start()
        self._path, self._size = None, 0

    def _wait_compression(self) -> None:
        if self._compressor is not None:
            self._compressor.join()
            self._compressor = None

    def _gzip(self, path: Path) -> Path:
        """Compress a closed window file: write ``.gz.tmp``, fsync, rename, then unlink."""
        gz = path.with_name(path.name + GZIP_SUFFIX)
        tmp = path.with_name(gz.name + ".tmp")
        with open(path, "rb") as src, open(tmp, "wb") as raw:
            with gzip.GzipFile(filename=path.name, mode="wb", fileobj=raw, mtime=0) as dst:
                shutil.copyfileobj(src, dst)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, gz)
        _fsync_dir(self.directory)
        path.unlink()
        _fsync_dir(self.directory)
        return gz

    @property
    def current_path(self) -> Path | None:
        return self._path

    def close(self) -> None:
        """Close the current file (not compressed: it may be appended to on restart), unlock."""
        if self.listener is not None and self._lock_fd is not None:
            self.listener.on_close()
        self._wait_compression()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None
