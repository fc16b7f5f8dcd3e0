"""Finding and opening archive files: local paths and fsspec URLs, plain and gzip.

The archive layout is ``schema.archive``'s: which names are window files, their read order,
the gzip twin skipped, how a line is read. This module applies it to local paths and fsspec URLs. An :class:`ArchiveFile` is a plain value (picklable) so the Dask engine can ship
it to a worker, which opens it there.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from schema.archive import (
    ArchiveReadError,
    LongLine,
    is_gzip,
    is_window_file,
    read_order_key,
    without_gzip_twins,
)
from schema.archive import iter_line_views as iter_line_views_of
from schema.constants import MAX_LINE_BYTES

__all__ = ["ArchiveFile", "ArchiveReadError", "LongLine", "discover", "iter_line_views", "iter_lines"]


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
        return is_gzip(self.name)


def _is_url(path: str) -> bool:
    return "://" in path


def _sort_key(f: ArchiveFile) -> tuple[str, tuple[str, bool]]:
    return f.group, read_order_key(f.name)


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
        if is_window_file(p.name) and p.is_file()
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
        paths = [p for p in fs.find(root) if is_window_file(PurePosixPath(p).name)]
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
    return without_gzip_twins(files, lambda f: f.name, lambda f: f.group)


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


def iter_lines(f: ArchiveFile) -> Iterator[bytes]:
    """The raw lines of ``f`` (with their newline) as bytes, decompressing gzip; a line past
    ``MAX_LINE_BYTES`` is a :class:`LongLine`, read in bounded memory.

    Raises :class:`ArchiveReadError` after the last good line when the stream is truncated
    or corrupt, so the caller counts it and goes on with the next file.
    """
    for view in iter_line_views(f):
        yield view if type(view) is LongLine else bytes(view)


def iter_line_views(f: ArchiveFile, limit: int = MAX_LINE_BYTES) -> Iterator[memoryview | LongLine]:
    """The lines of ``f`` as zero-copy views into one reused read buffer (with their newline),
    read by the archive's rules (``schema.archive.iter_line_views``): the fold's hot path. A
    view is valid until the next one is requested."""
    fh, raw = _open_binary(f)
    try:
        yield from iter_line_views_of(fh, f.gzipped, limit)
    finally:
        fh.close()
        raw.close()
