"""The archive layout, decided once (docs/archive-format.md, "Layout"): what a window file is
called, which files a reader takes for window files and in what order, where a line keeps its
window report, and how a file's lines are read.

The agent writes by these facts (``agent/archive``); the aggregator, ``verify``, admission's
grades, calibration and the scheduler's energy-from-archives read by them. Nothing else decides
a window file's name, the body key or how a line ends.

- The agent names its files ``windows-<YYYYMMDD>-<NNNNNN>.jsonl`` (:func:`window_file_name`,
  :data:`AGENT_FILE_RE`), ``.gz`` appended once compressed: the UTC day of the first line and a
  counter that never goes back, so **lexical order is write order**.
- A reader takes for a window file every ``*.jsonl``, ``*.jsonl.gz`` and logrotate-style
  ``*.jsonl.N[.gz]`` (:func:`is_window_file`): an operator's renamed or rotated copy is still
  read. ``agent.wal``, ``agent.wal.void``, ``agent.lock``, ``checkpoints.log``, ``*.corrupt`` and ``*.tmp`` are not.
- Within one agent directory files are read by name (:func:`read_order_key`); when ``x.jsonl``
  and ``x.jsonl.gz`` both exist (a compression in progress) the plain one is read and the gzip
  twin skipped (:func:`without_gzip_twins`), so no window counts twice.
- A line is one JSON object (a record sealed by ``schema.chain.seal``) ending in ``\\n``; the
  window report is under :data:`BODY_KEY`. A file whose name ends in ``.gz`` is gzip. A line of
  only white space is no record and is skipped, but it is counted in line numbers
  (``file:line`` counts every ``\\n``). A line longer than ``MAX_LINE_BYTES`` is malformed: it
  is read past in bounded memory and stands as one :class:`LongLine`. A stream that breaks
  part-way (a truncated gzip, an I/O error) yields the lines before the break, then raises
  :class:`ArchiveReadError`, which each reader reports in its own way.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TypeVar

from schema.constants import MAX_LINE_BYTES

#: The key of a window line's body: ``{"ts", "seq", "prev", "hash", "report"}``.
BODY_KEY = "report"
#: Every key of a chained window record (``schema.chain.seal`` with :data:`BODY_KEY`).
RECORD_KEYS = frozenset({"ts", "seq", "prev", "hash", BODY_KEY})
#: The suffix of a compressed window file.
GZIP_SUFFIX = ".gz"
#: The names the agent writes: group 1 the UTC day ``YYYYMMDD``, group 2 the counter.
AGENT_FILE_RE = re.compile(r"^windows-(\d{8})-(\d{6})\.jsonl(\.gz)?$")
#: The names a reader takes for window files (the agent's, renamed or rotated copies included).
READABLE_FILE_RE = re.compile(r"^.+\.jsonl(\.\d+)?(\.gz)?$")

#: Read sizes: big for plain files; small for gzip, whose read loses the chunk a break falls in.
CHUNK_PLAIN = 1 << 20
CHUNK_GZIP = 1 << 16
#: Read buffers of the first size a reader takes, kept for the next reader (by size) once a
#: reader ends: a fresh megabyte per file costs its page faults again (113 us against 38 us to
#: read a 360 kB file, 2026-12-02). A buffer a long line grew is dropped, so at most this many
#: buffers of ``CHUNK_PLAIN`` and of ``CHUNK_GZIP`` bytes stay allocated between files.
KEPT_BUFFERS = 2
_FREE_BUFFERS: dict[int, list[bytearray]] = {}

_P = TypeVar("_P")


def window_file_name(day: str, counter: int) -> str:
    """The name of the agent's ``counter``-th window file, opened on UTC day ``day``
    (``YYYYMMDD``): ``windows-20261130-000001.jsonl``."""
    return f"windows-{day}-{counter:06d}.jsonl"


def is_window_file(name: str) -> bool:
    """Whether a reader takes the file called ``name`` for a window file."""
    return READABLE_FILE_RE.match(name) is not None


def is_gzip(name: str) -> bool:
    """Whether the window file called ``name`` is gzip-compressed."""
    return name.endswith(GZIP_SUFFIX)


def plain_name(name: str) -> str:
    """``name`` without its gzip suffix: a file and its compressed twin share it."""
    return name[: -len(GZIP_SUFFIX)] if is_gzip(name) else name


def read_order_key(name: str) -> tuple[str, bool]:
    """Sort key of a window file within its agent directory: write order, plain before gzip."""
    return plain_name(name), is_gzip(name)


def without_gzip_twins(files: Iterable[_P], name: Callable[[_P], str], group: Callable[[_P], str]) -> list[_P]:
    """``files`` (already in read order) without the gzip twin of a plain file of the same group."""
    seen: set[tuple[str, str]] = set()
    out = []
    for f in files:
        key = (group(f), plain_name(name(f)))
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def window_files(directory: Path) -> list[Path]:
    """The window files of one agent directory (one chain), in read order, without gzip twins."""
    if not directory.is_dir():
        return []
    found = sorted((p for p in directory.iterdir() if is_window_file(p.name) and p.is_file()),
                   key=lambda p: read_order_key(p.name))
    return without_gzip_twins(found, lambda p: p.name, lambda p: "")


def agent_directories(root: Path) -> list[Path]:
    """Every directory at or below ``root`` that holds window files, by path: one agent's chain
    each (the aggregator groups the files it finds by their directory in the same way)."""
    if not root.is_dir():
        return []
    return sorted({p.parent for p in root.rglob("*") if is_window_file(p.name) and p.is_file()})


class ArchiveReadError(Exception):
    """A stream broke part-way (truncated gzip, I/O error); the lines before it were read."""


class LongLine(bytes):
    """Stands in for a line longer than the readers' limit, skipped unread to its newline:
    ``length`` is its length in bytes (without the newline). Its bytes are not JSON, so every
    parser refuses it; readers test ``type(raw) is LongLine`` only once a parse has failed."""

    length: int

    def __new__(cls, length: int) -> LongLine:
        obj = super().__new__(cls, b"\x00 line too long")
        obj.length = length
        return obj

    def reason(self) -> str:
        return (f"line of {self.length:,} bytes is longer than the {MAX_LINE_BYTES:,}-byte limit "
                "(MAX_LINE_BYTES); skipped unread to its newline")


def open_window_file(path: Path) -> IO[bytes]:
    """A binary stream of the window file at ``path``, decompressed when it is gzip (whose
    reader buffers in small chunks, so the lines before a truncation are still yielded)."""
    return gzip.open(path, "rb") if is_gzip(path.name) else open(path, "rb")  # noqa: SIM115


def iter_line_views(fh: IO[bytes], gzipped: bool, limit: int = MAX_LINE_BYTES) -> Iterator[memoryview | LongLine]:
    """The lines of the binary stream ``fh`` as zero-copy views into one reused read buffer
    (with their newline); ``fh`` is read to its end, not closed.

    orjson parses a memoryview directly, so no per-line bytes object is allocated and copied,
    and the buffer is read into again and again (``readinto``) instead of a fresh megabyte per
    read, whose page faults cost about a tenth of the aggregator's fold; once the reader ends
    the buffer is kept for the next file's reader (:data:`KEPT_BUFFERS`). A view is valid until
    the next one is requested, and not after the reader ends. A line longer than the buffer
    grows it, up to ``limit + 1`` bytes; a line longer than ``limit`` is dropped as it is read
    and stands as one :class:`LongLine`, so memory is bounded by the limit, never by the
    longest line (a grown buffer is not kept). Raises
    :class:`ArchiveReadError` after the last good line when the stream breaks.
    """
    chunk = CHUNK_GZIP if gzipped else CHUNK_PLAIN  # each read is at most this long
    size = min(chunk, limit + 1)
    pooled = _take_buffer(size)
    try:
        yield from _line_views(fh, chunk, limit, pooled)
    finally:
        _give_back(pooled)


def _take_buffer(size: int) -> bytearray:
    """A read buffer of ``size`` bytes: one a finished reader gave back, else a fresh one. Each
    reader holds its own until it ends (a reader left part-way, another thread's), so no two
    share one; a buffer's old bytes are never read (every search stops at the end of the data
    just read into it)."""
    free = _FREE_BUFFERS.get(size)
    try:
        return free.pop() if free else bytearray(size)
    except IndexError:  # another thread took the last one between the test and the pop
        return bytearray(size)


def _give_back(buf: bytearray) -> None:
    """Keep ``buf`` for the next reader, unless :data:`KEPT_BUFFERS` of its size are kept."""
    free = _FREE_BUFFERS.setdefault(len(buf), [])
    if len(free) < KEPT_BUFFERS:
        free.append(buf)


def _line_views(fh: IO[bytes], chunk: int, limit: int, buf: bytearray) -> Iterator[memoryview | LongLine]:
    """:func:`iter_line_views` reading into ``buf`` (of ``min(chunk, limit + 1)`` bytes), which
    it replaces by a bigger one (never given back) when a line fills it."""
    view, kept = memoryview(buf), 0  # buf[:kept]: the start of a line the last read cut
    skipped = 0  # > 0: bytes of a line past the limit dropped so far (its newline not yet read)
    while True:
        if kept == len(buf):  # one line fills the buffer
            if kept > limit:  # past the limit: drop it and read on to its newline
                skipped, kept = skipped + kept, 0
            else:  # a bigger buffer, the line copied over
                size = 2 * len(buf)
                bigger = bytearray(size if size < limit else limit + 1)
                buf, view, old = bigger, memoryview(bigger), view
                view[:kept] = old[:kept]  # memoryview to memoryview: a memmove, no copy
                old.release()
        try:
            n = fh.readinto(view[kept : kept + chunk])  # type: ignore[attr-defined]
        except (EOFError, OSError, zlib.error) as exc:
            raise ArchiveReadError(f"stream ended abnormally ({exc}); later lines lost") from exc
        if not n:
            break
        end_of_data, pos, find = kept + n, 0, buf.find
        end = find(b"\n", kept, end_of_data)  # buf[:kept] holds no newline
        if skipped:
            if end < 0:
                skipped, kept = skipped + end_of_data, 0
                continue
            yield LongLine(skipped + end)
            skipped, pos = 0, end + 1
            end = find(b"\n", pos, end_of_data)
        while end >= 0:
            yield view[pos : end + 1]
            pos = end + 1
            end = find(b"\n", pos, end_of_data)
        kept = end_of_data - pos
        if kept and pos:
            view[:kept] = view[pos:end_of_data]  # an in-place memmove: same length, views may be out
    if skipped or kept > limit:
        yield LongLine(skipped + kept)
    elif kept:
        yield view[:kept]


def numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, line without its newline)`` of every line of the window file at
    ``path`` that is not blank, by the rules above: a line past ``MAX_LINE_BYTES`` is a
    :class:`LongLine`; a broken stream raises :class:`ArchiveReadError` after the good lines."""
    with open_window_file(path) as fh:
        for lineno, view in enumerate(iter_line_views(fh, is_gzip(path.name)), start=1):
            if type(view) is LongLine:
                yield lineno, view
                continue
            line = bytes(view)
            if line.strip():
                yield lineno, line.rstrip(b"\n")
