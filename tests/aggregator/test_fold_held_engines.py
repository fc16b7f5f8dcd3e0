"""The totals the C Folder holds, through the engines and on every way out of a file.

test_fold_held_totals.py holds ``take``/``sync`` to the reference on lines handed to
``fold_lines``; here the lines come from archive *files* as the engines read them, hostile
(``test_fold_hostile_bytes.hostile_archive``'s damaged agent lines) and ending every way a file
ends: a gzip stream cut short after lines the Folder took (``ArchiveReadError`` mid-file), a
last line cut short or not JSON, lines outside the period between taken ones, a window that
fails strict attribution after taken lines, a file past a tiny service cap that the engine folds
again seeded. Whatever the way out, the held totals must have been written back before anything
else read them, so:

- the engine's fold with the accelerator gives the reference fold's report, byte for byte, and
  under ``--strict-attribution`` the same error (property test, in process);
- ``run_local``, ``run_dask`` on one worker folding four files at once in threads (``dask worker
  --nthreads 4``: each task's Folder holds its own state's totals) and ``run_local`` in a
  process without the C build give the same report bytes.
"""

from __future__ import annotations

import copy
import gzip
import random
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines, merge_next, run_dask, run_local
from aggregator.files import ArchiveFile, discover, iter_line_views
from aggregator.fold.ext import EXT
from aggregator.fold.fast import BYTE_PATH, fold_line
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.rules import AttributionError
from aggregator.fold.state import AggregateState, Known, seeded
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
from schema import times
from schema.archive import BODY_KEY, window_file_name
from schema.chain import seal
from tests.aggregator.test_fold_hostile_bytes import (
    EVERYTHING,
    HOURS,
    T0,
    _agent_lines,
    _bodies,
    hostile_archive,
)

OUTSIDE = ("2026-11-09T23:59:59.999999Z", "2026-11-11T00:00:00.000000Z", "2025-01-01T00:00:00Z")


def _sealed(body: dict, at, seq: int) -> bytes:
    body["window"]["start"] = times.format_datetime(at)
    body["window"]["end"] = times.format_datetime(at + timedelta(minutes=1))
    return orjson.dumps(seal(None, seq, times.format_datetime(at + timedelta(minutes=1)), BODY_KEY, body))


def _nothing_to_split(rng: random.Random, at) -> bytes:
    """A window with energy but no per-service maps and no I/O ops: strict attribution refuses it."""
    body = copy.deepcopy(rng.choice(_bodies()))
    gs = body["green_summary"]
    for key in [k for k in gs if k.startswith("per_service_")]:
        del gs[key]
    body.pop("per_endpoint_io_ops", None)
    gs["total_io_ops"] = 0
    gs["energy_kwh"] = 0.25
    return _sealed(body, at, 0)


def _file_lines(rng: random.Random) -> list[bytes]:
    """A file's lines: hostile agent lines, some outside the period, perhaps one strict
    attribution refuses, perhaps many services."""
    lines = hostile_archive(rng)
    for _ in range(rng.choice([0, 0, 1, 3])):  # outside the period, between taken lines
        lines.insert(rng.randrange(len(lines) + 1),
                     _sealed(copy.deepcopy(rng.choice(_bodies())), T0, 0).replace(
                         times.format_datetime(T0).encode(), rng.choice(OUTSIDE).encode(), 1))
    if rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines) + 1), _nothing_to_split(rng, T0 + timedelta(minutes=rng.randrange(600))))
    if rng.random() < 0.3:  # 40 new services: past a tiny cap, the file is folded again seeded
        body = copy.deepcopy(_bodies()[0])
        gs = body["green_summary"]
        gs.pop("per_service_measured_ratio", None)
        names = [f"s{rng.randrange(10**6):06d}" for _ in range(40)]
        gs["per_service_energy_kwh"] = {n: rng.randrange(1, 9999) / 1e8 for n in names}
        gs["per_service_carbon_kgco2eq"] = {n: rng.randrange(1, 9999) / 1e9 for n in names}
        gs["per_service_requests"] = {n: rng.randrange(50) for n in names}
        gs["per_service_region"] = dict.fromkeys(names, "pl")
        gs["per_service_energy_model"] = dict.fromkeys(names, "io_proxy_v3")
        lines.insert(rng.randrange(len(lines) + 1), _sealed(body, T0 + timedelta(minutes=rng.randrange(600)), 0))
    return lines


def write_archive(rng: random.Random, root: Path) -> Path:
    """One to three agents of one to three files each, plain or gzip; a gzip stream may be cut
    short (its lines after the break lost: ArchiveReadError), a plain file may end in a line
    cut short or in bytes that are not JSON, without a newline."""
    for a in range(rng.randrange(1, 4)):
        directory = root / f"agent-{a}"
        directory.mkdir(parents=True)
        for f in range(rng.randrange(1, 4)):
            lines = _file_lines(rng) if (a, f) != (0, 0) else _agent_lines(2) + _file_lines(rng)
            data = b"\n".join(lines) + b"\n"
            name = window_file_name("20261110", f)
            ending = rng.random() if (a, f) != (0, 0) else 1.0
            if ending < 0.45:
                data = gzip.compress(data, mtime=0)
                name += ".gz"
                if ending < 0.25:  # cut within the stream
                    data = data[: rng.randrange(20, len(data))]
            elif ending < 0.6:
                data += lines[-1][: rng.randrange(1, len(lines[-1]))]
            elif ending < 0.7:
                data += rng.choice([b"{", b"\x00\xff", b'{"report":', b"[]"])
            (directory / name).write_bytes(data)
    return root


def _fold(files: list[ArchiveFile], period: Period, strict: bool, fold, caps: dict) -> bytes | str:
    """The engines' fold (fold_file per file, merge_next in file order, a file past a cap folded
    again seeded) with ``fold`` for the loaded lines: the report's bytes, or the strict error."""

    def one(f: ArchiveFile, known: Known | None = None) -> AggregateState:
        state = AggregateState(**caps) if known is None else seeded(known, **caps)
        state, stat = fold_lines(iter_line_views(f), f.label, f.agent, period, strict, state, fold=fold)
        state.drop_caches()
        state.files.append(stat)
        if state.fallback_windows:
            state.fallback_files.append(f.label)
        return state

    total = AggregateState(**caps)
    try:
        for f in files:
            merge_next(total, one(f), lambda known, f=f: one(f, known))
    except AttributionError as exc:
        return str(exc)
    return report_bytes(build_report(total, period))


def test_the_c_fold_is_built():
    assert EXT is not None  # else the comparisons below compare the reference with itself


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_archive_files_ending_every_way_fold_as_the_reference(tmp_path_factory, seed):
    rng = random.Random(seed)
    files = discover([str(write_archive(rng, tmp_path_factory.mktemp("archive")))])
    folded = BYTE_PATH["folded"]
    for period in (HOURS, EVERYTHING):
        for caps in ({}, {"max_services": 12, "max_models": 2}):
            for strict in (False, True):
                want = _fold(files, period, strict, fold_line_reference, caps)
                assert _fold(files, period, strict, fold_line, caps) == want, (period, caps, strict)
    assert BYTE_PATH["folded"] > folded  # the Folder took lines, so totals were held


_NO_C = """
import sys
sys.modules['aggregator.fold._fold'] = None  # as if never built
from aggregator.fold.fast import ACCELERATED
assert not ACCELERATED
from aggregator.engines import run_local
from aggregator.files import discover
from aggregator.fold.rules import AttributionError
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
period = Period.parse('2026-11-10', '2026-11-11')
for root in sys.argv[1:]:
    for strict in (False, True):
        try:
            out = report_bytes(build_report(run_local(discover([root]), period, strict), period))
        except AttributionError as exc:
            out = ('strict: ' + str(exc)).encode()
        sys.stdout.buffer.write(len(out).to_bytes(8, 'big') + out)
"""


def _reports(run, roots: list[Path], period: Period, **engine) -> list[bytes]:
    out = []
    for root in roots:
        for strict in (False, True):
            try:
                out.append(report_bytes(build_report(run(discover([str(root)]), period, strict, **engine), period)))
            except AttributionError as exc:
                out.append(("strict: " + str(exc)).encode())
    return out


@pytest.mark.timeout(300)
def test_local_dask_in_threads_and_no_c_build_give_the_same_bytes(tmp_path):
    """A Dask worker with four threads folds four files at once; with the C build each task's
    Folder holds its own state's totals. Its reports are run_local's, and run_local's are those
    of a process without the C build."""
    from distributed import Client, LocalCluster

    roots = [write_archive(random.Random(seed), tmp_path / f"a{seed}") for seed in range(8)]
    here = _reports(run_local, roots, HOURS)
    assert any(not r.startswith(b"strict: ") for r in here) and any(r.startswith(b"strict: ") for r in here)
    with LocalCluster(n_workers=1, threads_per_worker=4, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        assert _reports(run_dask, roots, HOURS, client=client) == here
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", _NO_C, *map(str, roots)], cwd=root, capture_output=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    there, data = [], run.stdout
    while data:
        size = int.from_bytes(data[:8], "big")
        there.append(data[8 : 8 + size])
        data = data[8 + size :]
    assert there == here
