"""Reading archives: sanitiser rules, malformed lines, gzip/rotation, fsspec URLs, the period."""

from __future__ import annotations

import gzip
import math
from datetime import UTC, datetime, timedelta

import fsspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import synth
from aggregator.engines import run_local
from aggregator.files import discover
from aggregator.read import Malformed, Period, to_epoch, window_start
from aggregator.report import build_report, report_bytes
from aggregator.sanitize import MAX_FIGURE, Tally, clean_count, clean_float, clean_tag

T0 = datetime(2026, 11, 10, tzinfo=UTC)
JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@given(JSON_LEAVES)
def test_clean_float_is_always_finite_non_negative_and_counts_what_it_changes(value):
    tally = Tally()
    out = clean_float(value, tally)
    assert type(out) is float and math.isfinite(out) and 0.0 <= out <= MAX_FIGURE
    kept = type(value) in (int, float) and 0 <= value <= MAX_FIGURE
    if kept:
        assert out == float(value) and tally.sanitised == tally.missing == 0
    else:
        assert out == 0.0 and tally.sanitised + tally.missing == 1
        # numbers are sanitised, other types are missing
        assert tally.sanitised == (1 if type(value) in (int, float) else 0)


@given(JSON_LEAVES)
def test_clean_count_is_a_non_negative_int(value):
    tally = Tally()
    out = clean_count(value, tally)
    assert type(out) is int and out >= 0
    if type(value) is int and 0 <= value <= 2**53:
        assert out == value and tally.sanitised + tally.missing == 0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0, -5, 1e300])
def test_clean_float_sanitises_nan_inf_negative_and_huge(value):
    tally = Tally()
    assert clean_float(value, tally) == 0.0 and tally.sanitised == 1


@pytest.mark.parametrize("value", ["1.5", None, True, [1.0], {"a": 1}])
def test_non_numeric_is_missing(value):
    tally = Tally()
    assert clean_float(value, tally) == 0.0 and tally.missing == 1 and tally.sanitised == 0


def test_tag_over_64_bytes_is_rejected():
    assert clean_tag("io_proxy_v1") == "io_proxy_v1"
    assert clean_tag("x" * 64) == "x" * 64
    assert clean_tag("x" * 65) is None
    assert clean_tag("é" * 33) is None  # 66 bytes in UTF-8, 33 characters
    assert clean_tag(7) is None


def _good(n, start=T0, agent="agent-a"):
    return [orjson.dumps(r) for r in synth.sealed_lines(synth.realistic(n, seed=3, n_services=3, start=start, agent_id=agent))]


def test_malformed_lines_are_skipped_and_counted_with_file_and_line(tmp_path, write_lines, fold):
    good = _good(3)
    bad_types = orjson.loads(good[0])
    bad_types["report"]["green_summary"] = [1, 2]
    no_start = orjson.loads(good[0])
    del no_start["report"]["window"]["start"]
    lines = [
        good[0],
        b"{not json",  # 2: bad JSON
        orjson.dumps(bad_types),  # 3: wrong type for green_summary
        good[1],
        b"[1, 2, 3]",  # 5: not an object
        b'{"ts": "x", "report": {"window": {"start": "2026-11-10T00:00:00Z"}, "green_\xff": 1}}',  # 6: not UTF-8
        orjson.dumps(no_start),  # 7: no window start
        good[2][: len(good[2]) // 2],  # 8: truncated
        b"",  # 9, 10: blank lines are not windows and not malformed
        b"  \r",
    ]
    write_lines(tmp_path, lines)
    state = fold(tmp_path)
    assert state.windows == 2 and state.malformed == 6
    where = [s.split(": ")[0] for s in state.malformed_samples]
    assert where == [f"agent-a/windows-20261110-000000.jsonl:{n}" for n in (2, 3, 5, 6, 7, 8)]
    assert "green_summary is list" in state.malformed_samples[1]
    assert state.files[0].malformed_lines == 6 and state.files[0].lines == 10


def test_truncated_gzip_keeps_the_lines_before_the_break(tmp_path, fold):
    lines = _good(50)
    data = gzip.compress(b"".join(x + b"\n" for x in lines), mtime=0)
    path = tmp_path / "agent-a" / "windows-20261110-000000.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(data[: len(data) * 2 // 3])
    state = fold(tmp_path)
    assert 0 < state.windows < 50
    assert state.malformed == 1 and "stream ended abnormally" in state.malformed_samples[0]


def test_discover_orders_rotations_and_ignores_wal_lock_and_corrupt(mixed_archive):
    files = discover([str(mixed_archive)])
    assert [f.label for f in files] == [
        "agent-a/windows-20261110-000000.jsonl.gz",
        "agent-a/windows-20261110-000001.jsonl",
        "agent-a/windows-20261110-000002.jsonl",
        "agent-b/windows-20261110-000000.jsonl",
        "agent-b/windows-20261110-000001.jsonl.gz",
    ]


def test_a_plain_file_and_its_gzip_copy_are_read_once(tmp_path, write_lines, fold):
    path = write_lines(tmp_path, _good(4))
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
    assert fold(tmp_path).windows == 4


def test_missing_path_says_what_to_give():
    with pytest.raises(FileNotFoundError, match="give an archive directory"):
        discover(["/nonexistent/archives"])


def test_fsspec_memory_and_file_urls_give_the_local_report(mixed_archive):
    mem = fsspec.filesystem("memory")
    for path in sorted(mixed_archive.rglob("*")):
        if path.is_file():
            mem.pipe(f"/t-read/archives/{path.relative_to(mixed_archive)}", path.read_bytes())
    period = Period.everything()

    def report(url):
        return report_bytes(build_report(run_local(discover([url]), period), period))

    try:
        local = report(str(mixed_archive))
        assert report("memory://t-read/archives") == local
        assert report(mixed_archive.as_uri()) == local
    finally:
        mem.rm("/t-read", recursive=True)


def test_an_unknown_or_uninstalled_url_protocol_says_what_to_do():
    with pytest.raises(FileNotFoundError, match="give a local path or a URL fsspec supports"):
        discover(["nope://bucket/archives"])
    # a protocol fsspec knows whose backend package is not installed here (none of these is
    # a dependency of carbonspan)
    for url in ("s3://bucket/archives", "gs://bucket/archives", "abfs://c/archives"):
        try:
            discover([url])
        except FileNotFoundError as exc:
            assert "install that fsspec backend" in str(exc)
            return
    pytest.fail("every backend is installed: nothing to test here")


def test_period_keeps_windows_starting_inside_and_to_includes_its_day(tmp_path, write_lines, fold):
    day1 = _good(3, start=T0 + timedelta(hours=23, minutes=58))  # 23:58, 23:59, 00:00 next day
    write_lines(tmp_path, day1)
    state = fold(tmp_path, period=Period.parse("2026-11-10", "2026-11-10"))
    assert state.windows == 2 and state.windows_outside == 1
    state = fold(tmp_path, period=Period.parse("2026-11-10T23:59:00Z", "2026-11-12"))
    assert state.windows == 2 and state.windows_outside == 1


def test_period_errors_say_what_to_write():
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        Period.parse("last tuesday", "2026-11-30")
    with pytest.raises(ValueError, match="must be after"):
        Period.parse("2026-11-30", "2026-11-01")


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.integers(2020, 2030), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23),
                 st.sampled_from(["00", "07", "59", "60", "99", "5:", " 5"]),
                 st.sampled_from(["00", "30", "59", "60", "ab"]), st.sampled_from([":", "-"])))
def test_the_cached_window_start_equals_a_full_rfc3339_parse(parts):
    y, mo, d, h, mm, ss, sep = parts
    text = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mm}{sep}{ss}Z"
    try:
        expected: float | None = to_epoch(text)
    except ValueError:
        expected = None
    try:
        got: float | None = window_start({"report": {"window": {"start": text}}})
    except Malformed:
        got = None
    assert got == expected  # the "MM:SS" cache never accepts what the full parser refuses


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=90).map(lambda b: b.replace(b"\n", b"")), max_size=12), st.booleans(),
       st.booleans(), st.sampled_from([8, 16, 64]))
def test_line_views_are_the_lines_whatever_the_buffer_size(tmp_path_factory, lines, newline_at_end, gz, chunk):
    # lines cross read boundaries, and some are longer than the read buffer (which then grows)
    import gzip

    from aggregator import files
    from schema import archive

    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    root = tmp_path_factory.mktemp("views") / "agent-a"
    root.mkdir()
    path = root / ("windows-20261130-000000.jsonl" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    (f,) = files.discover([str(root)])
    saved = archive.CHUNK_PLAIN, archive.CHUNK_GZIP  # the read sizes are schema.archive's
    archive.CHUNK_PLAIN = archive.CHUNK_GZIP = chunk
    try:
        views = [bytes(v) for v in files.iter_line_views(f)]
    finally:
        archive.CHUNK_PLAIN, archive.CHUNK_GZIP = saved
    parts = data.split(b"\n")
    want = [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    assert views == want == list(files.iter_lines(f))


def _want_views(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=6)
                .map(b"\n".join) | st.binary(max_size=60), min_size=2, max_size=5),
       st.booleans(), st.sampled_from([8, 16, 64]))
def test_a_reused_read_buffer_never_shows_one_file_s_bytes_in_the_next(tmp_path_factory, datas, gz, chunk):
    # files read one after another share a read buffer (schema.archive.KEPT_BUFFERS); a shorter
    # file after a longer one, a line without its newline, must be read as if the buffer were new
    from aggregator import files
    from schema import archive

    root = tmp_path_factory.mktemp("reuse")
    paths = []
    for i, data in enumerate(datas):
        path = root / (f"windows-20261130-{i:06d}.jsonl" + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(data) if gz else data)
        paths.append(path)
    saved = archive.CHUNK_PLAIN, archive.CHUNK_GZIP
    archive.CHUNK_PLAIN = archive.CHUNK_GZIP = chunk
    try:
        got = [[bytes(v) for v in files.iter_line_views(f)] for f in files.discover([str(root)])]
    finally:
        archive.CHUNK_PLAIN, archive.CHUNK_GZIP = saved
    assert got == [_want_views(data) for data in datas]


def test_a_shorter_file_after_a_longer_one_is_read_into_the_same_buffer_and_only_its_bytes(tmp_path):
    from aggregator import files
    from schema import archive

    long_path, short_path = tmp_path / "a" / "w-1.jsonl", tmp_path / "b" / "w-2.jsonl"
    for path, data in ((long_path, b"x" * 5000 + b"\n" + b"y" * 3000), (short_path, b"ab\ncd")):
        path.parent.mkdir()
        path.write_bytes(data)
    (long_f,), (short_f,) = files.discover([str(long_path)]), files.discover([str(short_path)])
    size = archive.CHUNK_PLAIN
    archive._FREE_BUFFERS.pop(size, None)
    assert [bytes(v) for v in files.iter_line_views(long_f)] == [b"x" * 5000 + b"\n", b"y" * 3000]
    (kept,) = archive._FREE_BUFFERS[size]
    assert kept[:3000] == b"y" * 3000  # the first file's last line is still in it
    assert [bytes(v) for v in files.iter_line_views(short_f)] == [b"ab\n", b"cd"]
    assert kept[2:6] == b"\ncdy"  # read over the first file's bytes (the last line moved to the front)
    assert archive._FREE_BUFFERS[size] == [kept] and archive._FREE_BUFFERS[size][0] is kept  # reused


def test_two_readers_at_once_never_share_a_buffer_and_a_grown_one_is_not_kept(tmp_path):
    from schema import archive

    size = archive.CHUNK_PLAIN
    archive._FREE_BUFFERS.pop(size, None)
    a_path, b_path = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a_path.write_bytes(b"a1\na2\na3\n")
    b_path.write_bytes(b"b1\nb2\n")
    with open(a_path, "rb") as fa, open(b_path, "rb") as fb:
        a, b = archive.iter_line_views(fa, False), archive.iter_line_views(fb, False)
        assert bytes(next(a)) == b"a1\n"
        assert [bytes(v) for v in b] == [b"b1\n", b"b2\n"]  # b read while a is part-way
        assert [bytes(v) for v in a] == [b"a2\n", b"a3\n"]
    assert len(archive._FREE_BUFFERS[size]) == 2 <= archive.KEPT_BUFFERS
    archive._FREE_BUFFERS.pop(size, None)
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"z" * (size + 10) + b"\nq\n")
    with open(big, "rb") as fh:
        assert [len(v) for v in archive.iter_line_views(fh, False)] == [size + 11, 2]
    assert [len(buf) for buf in archive._FREE_BUFFERS[size]] == [size]  # the first-size one, not the grown
