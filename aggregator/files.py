"""Finding and opening archive files: local paths and fsspec URLs, plain and gzip.

The archive layout (pinned by the daemon): one directory per agent, window lines in
``windows-<YYYYMMDD>-<NNNNNN>.jsonl`` (lexical order is write order), ``*.jsonl.gz`` once
compressed. ``agent.wal``, ``agent.lock`` and ``*.corrupt`` sit beside them and are not
window files. An :class:`ArchiveFile` is a plain value (picklable) so the Dask engine can ship
it to a worker, which opens it there.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from schema.constants import MAX_LINE_BYTES

#: ``*.jsonl``, ``*.jsonl.gz``, and logrotate-style ``*.jsonl.3`` / ``*.jsonl.3.gz``.
WINDOW_FILE = re.compile(r"^.+\.jsonl(\.\d+)?(\.gz)?$")


@dataclass(frozen=True, slots=True)
class ArchiveFile:
    """One window file: where it is (``url`` is a local path or an fsspec URL) and whose."""

    url: str
    agent: str  # the agent directory's name
    name: str  # the file's base name
    group: str  # the agent directory's full path: one hash chain per group

    @property
    def label(self) -> str:
        return f"{self.agent}/{self.name}"

    @property
    def gzipped(self) -> bool:
        return self.name.endswith(".gz")


class ArchiveReadError(Exception):
    """A stream broke part-way (truncated gzip, I/O error); the lines before it were read."""


def _is_url(path: str) -> bool:
    return "://" in path


def _sort_key(f: ArchiveFile) -> tuple[str, str, bool]:
    base = f.name[:-3] if f.gzipped else f.name
    return (f.group, base, f.gzipped)


def _local(path: str) -> list[ArchiveFile]:
    root = Path(path)
    if root.is_file():
        return [ArchiveFile(str(root), root.parent.name, root.name, str(root.parent.resolve()))]
    if not root.is_dir():
        raise FileNotFoundError(
            f"no archive at {path!r}: give an archive directory (e.g. archives/) or a window file"
        )
    return [
        ArchiveFile(str(p), p.parent.name, p.name, str(p.parent.resolve()))
        for p in root.rglob("*")
        if WINDOW_FILE.match(p.name) and p.is_file()
    ]


def _remote(url: str) -> list[ArchiveFile]:
    import fsspec  # imported here: local runs never pay for it

    try:
        fs, root = fsspec.core.url_to_fs(url)
    except ImportError as exc:  # e.g. s3:// without s3fs
        raise FileNotFoundError(
            f"cannot read {url!r}: {exc}; install that fsspec backend here (and on every Dask "
            "worker), or give a local path"
        ) from None
    except ValueError as exc:  # an unknown protocol
        raise FileNotFoundError(
            f"cannot read {url!r}: {exc}; give a local path or a URL fsspec supports "
            "(file://, memory://, s3://, gs://, ...)"
        ) from None
    if fs.isfile(root):
        paths = [root]
    elif fs.isdir(root):
        paths = [p for p in fs.find(root) if WINDOW_FILE.match(PurePosixPath(p).name)]
    else:
        raise FileNotFoundError(f"no archive at {url!r}: the URL names no file or directory")
    out = []
    for p in paths:
        pp = PurePosixPath(p)
        parent = fs.unstrip_protocol(str(pp.parent))
        out.append(ArchiveFile(fs.unstrip_protocol(p), pp.parent.name, pp.name, parent))
    return out


def discover(paths: Iterable[str]) -> list[ArchiveFile]:
    """Every window file under ``paths``, in write order: by agent directory, then name.

    When both ``x.jsonl`` and ``x.jsonl.gz`` exist (a compression in progress) the plain file
    is read and the gzip copy skipped, so no window is counted twice.
    """
    found: dict[str, ArchiveFile] = {}
    for path in paths:
        for f in _remote(path) if _is_url(path) else _local(path):
            found.setdefault(f.url, f)
    files = sorted(found.values(), key=_sort_key)
    seen: set[tuple[str, str]] = set()
    out = []
    for f in files:
        key = (f.group, f.name[:-3] if f.gzipped else f.name)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out


def _open_binary(f: ArchiveFile) -> tuple[io.BufferedIOBase, io.IOBase]:
    """``(stream to read, underlying file to close)``."""
    if _is_url(f.url):
        import fsspec

        raw = fsspec.open(f.url, "rb").open()
    else:
        raw = open(f.url, "rb")  # noqa: SIM115 - closed by iter_line_views
    if f.gzipped:
        # GzipFile buffers in small chunks, so the lines before a truncation are still yielded.
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    return raw, raw


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


def iter_lines(f: ArchiveFile) -> Iterator[bytes]:
    """The raw lines of ``f`` (with their newline) as bytes, decompressing gzip; a line past
    ``MAX_LINE_BYTES`` is a :class:`LongLine`, read in bounded memory.

    Raises :class:`ArchiveReadError` after the last good line when the stream is truncated
    or corrupt, so the caller counts it and goes on with the next file.
    """
    for view in iter_line_views(f):
        yield view if type(view) is LongLine else bytes(view)


#: Read sizes: big for plain files; small for gzip, whose read loses the chunk a break falls in.
CHUNK_PLAIN = 1 << 20
CHUNK_GZIP = 1 << 16


def iter_line_views(f: ArchiveFile, limit: int = MAX_LINE_BYTES) -> Iterator[memoryview | LongLine]:
    """The lines of ``f`` as zero-copy views into one reused read buffer (with their newline).

    The fold's hot path: orjson parses a memoryview directly, so no per-line bytes object is
    allocated and copied, and the buffer is read into again and again (``readinto``) instead
    of a fresh megabyte per read, whose page faults cost about a tenth of the fold. A view is
    valid until the next one is requested. A line longer than the buffer grows it, up to
    ``limit + 1`` bytes; a line longer than ``limit`` is dropped as it is read and stands as
    one :class:`LongLine`, so memory is bounded by the limit, never by the longest line.
    """
    fh, raw = _open_binary(f)
    chunk = CHUNK_GZIP if f.gzipped else CHUNK_PLAIN  # each read is at most this long
    buf = bytearray(min(chunk, limit + 1))
    view, kept = memoryview(buf), 0  # buf[:kept]: the start of a line the last read cut
    skipped = 0  # > 0: bytes of a line past the limit dropped so far (its newline not yet read)
    try:
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
                n = fh.readinto(view[kept : kept + chunk])
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
    finally:
        fh.close()
        raw.close()
