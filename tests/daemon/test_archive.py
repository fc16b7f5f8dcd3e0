"""The archive writer on real files: chain, rotation, gzip, lock, torn-tail recovery."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.archive import (
    LOCK_NAME,
    ArchiveError,
    ArchiveLockedError,
    ArchiveWriter,
    read_lines,
    read_records,
    window_files,
)
from schema.chain import GENESIS_PREV, verify_chain


def _report(i: int) -> dict:
    return {"window": {"start": f"2026-11-30T10:00:{i % 60:02d}.000000Z",
                       "end": "2026-11-30T10:01:00.000000Z", "spans": i + 1}}


def _write(directory: Path, n: int, **kw) -> ArchiveWriter:
    w = ArchiveWriter(directory, **kw)
    w.open()
    for i in range(n):
        w.append(_report(i))
    return w


def test_chain_starts_at_genesis_and_verifies(tmp_path: Path) -> None:
    w = _write(tmp_path, 5)
    w.close()
    recs = read_records(tmp_path)
    findings, last, count = verify_chain(recs)
    assert findings == [] and count == 5
    assert recs[0][1]["prev"] == GENESIS_PREV and recs[0][1]["seq"] == 0
    assert last == recs[-1][1]["hash"]
    assert [r["report"]["window"]["spans"] for _, r in recs] == [1, 2, 3, 4, 5]


def test_reopen_continues_the_chain(tmp_path: Path) -> None:
    _write(tmp_path, 2).close()
    w = _write(tmp_path, 3)
    w.close()
    findings, _, count = verify_chain(read_records(tmp_path))
    assert findings == [] and count == 5
    assert [r["seq"] for _, r in read_records(tmp_path)] == [0, 1, 2, 3, 4]


def test_rotation_by_size_keeps_lexical_order_and_chain(tmp_path: Path) -> None:
    w = _write(tmp_path, 30, max_size_mb=0.001)  # ~1 KiB files: several lines per file at most
    w.close()
    files = window_files(tmp_path)
    assert len(files) > 3
    names = [f.name for f in files]
    assert names == sorted(names)
    assert all(f.stat().st_size <= 1100 or len(f.read_bytes().splitlines()) == 1 for f in files)
    counters = [int(n.split("-")[2].split(".")[0]) for n in names]
    assert counters == list(range(1, len(files) + 1))
    findings, _, count = verify_chain(read_records(tmp_path))
    assert findings == [] and count == 30


def test_a_window_file_that_cannot_be_made_is_tried_again_under_its_name(tmp_path: Path) -> None:
    """Rotation into a directory where the next file cannot be made (read-only or full; here a
    directory squats its name: EISDIR) fails that append only; once the cause is gone the next
    append makes the file, and the counter has no gap. Before, the writer kept the path it had
    named and reopened it without O_CREAT at every retry (ENOENT) until the agent restarted
    (found by ``python -m bench.diskfault``, fault ``archive_readonly``)."""
    w = ArchiveWriter(tmp_path, max_size_mb=0.001)
    w.open()
    w.append(_report(0))
    first = w.current_path
    assert first is not None and first.name.endswith("-000001.jsonl")
    squat = first.with_name(first.name.replace("-000001.", "-000002."))
    squat.mkdir()
    written = 1
    for i in range(1, 20):  # bounded: ~1 KiB files rotate within a few lines
        try:
            w.append(_report(i))
        except IsADirectoryError:
            break
        written += 1
    else:
        pytest.fail("the writer never rotated")
    with pytest.raises(IsADirectoryError):
        w.append(_report(written))  # still failing, and still the same name
    squat.rmdir()
    w.append(_report(written))
    w.close()
    assert [f.name for f in window_files(tmp_path)] == [first.name, squat.name]
    recs = read_records(tmp_path)
    findings, _, count = verify_chain(recs)
    assert findings == [] and count == written + 1
    assert [r["seq"] for _, r in recs] == list(range(written + 1))


def test_gzip_of_closed_files(tmp_path: Path) -> None:
    w = _write(tmp_path, 20, max_size_mb=0.001, compress=True)
    w.close()
    files = window_files(tmp_path)
    assert all(f.name.endswith(".jsonl.gz") for f in files[:-1])
    assert files[-1].name.endswith(".jsonl")  # the open file stays plain (appendable)
    with gzip.open(files[0], "rb") as fh:
        assert orjson.loads(fh.readline())["seq"] == 0
    findings, _, count = verify_chain(read_records(tmp_path))
    assert findings == [] and count == 20
    # restart after compression: continues from the last line of the plain file
    _write(tmp_path, 1, max_size_mb=0.001, compress=True).close()
    assert verify_chain(read_records(tmp_path))[2] == 21


def test_half_finished_compression_never_duplicates_lines(tmp_path: Path) -> None:
    w = _write(tmp_path, 6, max_size_mb=0.001, compress=True)
    w.close()
    gz = window_files(tmp_path)[0]
    plain = gz.with_suffix("")  # a crash after the rename, before the unlink
    with gzip.open(gz, "rb") as fh:
        plain.write_bytes(fh.read())
    (tmp_path / (plain.name + ".gz.tmp")).write_bytes(b"partial")
    w2 = ArchiveWriter(tmp_path, max_size_mb=0.001, compress=True)
    rec = w2.open()
    w2.close()
    assert rec.removed_duplicates == 1 and not plain.exists()
    assert verify_chain(read_records(tmp_path))[:1] == ([],)


def test_torn_tail_is_moved_to_corrupt_and_chain_continues(tmp_path: Path) -> None:
    _write(tmp_path, 3).close()
    path = window_files(tmp_path)[-1]
    good = path.read_bytes()
    torn = b'{"ts":"2026-11-30T10:03:00Z","seq":3,"prev":"sha256:ab'
    path.write_bytes(good + torn)
    w = ArchiveWriter(tmp_path)
    rec = w.open()
    assert rec.corrupt_file is not None and rec.corrupt_file.read_bytes() == torn
    assert rec.corrupt_file.name.endswith(".corrupt") and rec.last_seq == 2
    assert path.read_bytes() == good
    w.append(_report(9))
    w.close()
    findings, _, count = verify_chain(read_records(tmp_path))
    assert findings == [] and count == 4


def test_whole_but_invalid_last_line_is_also_moved_aside(tmp_path: Path) -> None:
    _write(tmp_path, 2).close()
    path = window_files(tmp_path)[-1]
    lines = path.read_bytes().splitlines(keepends=True)
    broken = lines[-1].replace(b'"spans":2', b'"spans":7')  # a line whose hash no longer holds
    path.write_bytes(lines[0] + broken)
    w = ArchiveWriter(tmp_path)
    rec = w.open()
    w.append(_report(5))
    w.close()
    assert rec.corrupt_file is not None and rec.corrupt_file.read_bytes() == broken
    assert verify_chain(read_records(tmp_path))[0] == []


def test_lock_held_by_live_process_names_its_pid(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
            from agent.archive import ArchiveWriter
            w = ArchiveWriter(__import__("pathlib").Path({str(tmp_path)!r})); w.open()
            print("locked", flush=True); sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(ArchiveLockedError) as info:
            ArchiveWriter(tmp_path).open()
        assert info.value.holder_pid == holder.pid
        assert f"process {holder.pid}" in str(info.value) and "--archive-dir" in str(info.value)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    # the kernel dropped the lock with the process: a new writer opens (no stale lock)
    w = ArchiveWriter(tmp_path)
    w.open()
    assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
    w.close()


def test_compressed_last_file_with_bad_tail_is_refused(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "windows-20261130-000001.jsonl.gz", "wb") as fh:
        fh.write(b'{"not": "a record"}\n')
    with pytest.raises(ArchiveError, match="carbonspan verify"):
        ArchiveWriter(tmp_path).open()


def test_daily_rotation_starts_a_new_file_and_keeps_lexical_order(tmp_path: Path) -> None:
    _write(tmp_path, 2).close()
    old = window_files(tmp_path)[-1]
    yesterday = old.with_name("windows-20000101-000001.jsonl")  # as if opened long ago
    old.rename(yesterday)
    w = _write(tmp_path, 1)  # same size limit, new UTC day: a new file, counter + 1
    w.close()
    files = window_files(tmp_path)
    assert files[0] == yesterday and len(files) == 2
    assert files[1].name.endswith("-000002.jsonl") and files[1].name > files[0].name
    findings, _, count = verify_chain(read_records(tmp_path))
    assert findings == [] and count == 3
    # without daily rotation the same situation appends to the old file
    yesterday2 = tmp_path / "other"
    _write(yesterday2, 1).close()
    f = window_files(yesterday2)[0]
    f.rename(f.with_name("windows-20000101-000001.jsonl"))
    _write(yesterday2, 1, rotate_daily=False).close()
    assert len(window_files(yesterday2)) == 1


def test_a_line_goes_to_the_file_of_the_day_it_is_sealed(tmp_path: Path) -> None:
    """The day comes from the line's ts, not from a second clock read that may already be
    past midnight (tests/daemon/test_midnight_rotation.py does the same through an agent)."""
    w = ArchiveWriter(tmp_path)
    w.open()
    for ts in ("2026-11-30T23:59:58.000000Z", "2026-11-30T23:59:59.999990Z",
               "2026-12-01T00:00:00.000010Z",
               "2026-11-30T23:59:59.000000Z"):  # a clock stepping back: the day stays
        w.append(_report(0), ts)
    w.close()
    got = {p.name: [orjson.loads(raw)["ts"][:10] for raw in read_lines(p)]
           for p in window_files(tmp_path)}
    assert got == {"windows-20261130-000001.jsonl": ["2026-11-30", "2026-11-30"],
                   "windows-20261201-000002.jsonl": ["2026-12-01", "2026-11-30"]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4)),
    st.tuples(st.just("reopen"), st.just(0)),
    st.tuples(st.just("garbage"), st.integers(1, 40)),
    st.tuples(st.just("cut"), st.integers(1, 30)),
), max_size=12), compress=st.booleans(), size_kb=st.sampled_from([1, 2, 100]))
def test_any_history_of_appends_crashes_and_reopens_keeps_one_valid_chain(
        tmp_path_factory, ops, compress, size_kb) -> None:
    """Whatever happens, the chain verifies and holds every line not cut by a crash."""
    d = tmp_path_factory.mktemp("hist")
    kw = {"max_size_mb": size_kb / 1024, "compress": compress}
    expected: list[int] = []
    counter = 0
    w = ArchiveWriter(d, **kw)
    w.open()
    for op, n in ops:
        if op == "append":
            for _ in range(n):
                w.append(_report(counter))
                expected.append(counter + 1)
                counter += 1
            continue
        w.close()
        files = window_files(d)
        plain = files[-1] if files and files[-1].suffix == ".jsonl" else None
        if op == "garbage" and plain is not None:
            with open(plain, "ab") as fh:
                fh.write(b'{"torn": ' + b"x" * n)
        elif op == "cut" and plain is not None and plain.stat().st_size > 0:
            data = plain.read_bytes()
            last_start = data.rstrip(b"\n").rfind(b"\n") + 1
            cut = min(n, len(data) - last_start)
            plain.write_bytes(data[: len(data) - cut])
            expected.pop()  # the last line is no longer whole: recovery moves it aside
        w = ArchiveWriter(d, **kw)
        w.open()
    w.close()
    findings, _, count = verify_chain(read_records(d))
    assert findings == []
    assert [r["report"]["window"]["spans"] for _, r in read_records(d)] == expected
