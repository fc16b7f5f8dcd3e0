"""A report whose counts sum past what its JSON holds (2^64 - 1) is still written, saying so.

The sanitiser passes a count of at most 2^53 per value, and the fold sums counts exactly, so
one forged line of 2,048 services of 2^53 requests each sums to 2^64: canonical JSON (orjson)
cannot write that integer, and ``carbonspan aggregate`` died with a traceback, for every
archive the forged one was folded with. Such a count is written as 2^64 - 1 and the report
warns ``count_saturated``, naming the fields; the fold's own sums stay exact, with the C fold
and without it.
"""

from __future__ import annotations

import subprocess
import sys

import orjson

from aggregator.engines import fold_lines
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.state import AggregateState
from aggregator.report import build_report, report_bytes
from schema import times
from schema.archive import BODY_KEY
from schema.canonical import MAX_INT
from schema.chain import seal
from tests.aggregator.test_fold_hostile_bytes import HOURS, T0

NAMES = [f"s{i:04d}" for i in range(2048)]


def _forged(seq: int, requests: int, names: list[str] = NAMES) -> bytes:
    start = times.format_datetime(T0)
    gs = {"energy_kwh": 0.002048, "co2": {"operational_gco2": 2.048e-3, "total": {"mid": 2.048e-3}},
          "per_service_energy_kwh": dict.fromkeys(names, 1e-6), "per_service_carbon_kgco2eq": dict.fromkeys(names, 1e-9),
          "per_service_requests": dict.fromkeys(names, requests), "per_service_region": dict.fromkeys(names, "pl"),
          "per_service_energy_model": dict.fromkeys(names, "io_proxy_v3")}
    body = {"window": {"start": start, "end": start, "traces": 1, "root_spans": 1}, "green_summary": gs}
    return orjson.dumps(seal(None, seq, start, BODY_KEY, body))


def _report(lines: list[bytes], **fold) -> tuple[AggregateState, bytes]:
    state = AggregateState()
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", HOURS, state=state, **fold)
    return state, report_bytes(build_report(state, HOURS))


def test_a_request_total_past_2_64_is_written_saturated_and_warned():
    lines = [_forged(0, 2**53)]
    state, data = _report(lines)
    assert state.requests == 2**64  # exact in the fold
    report = orjson.loads(data)
    assert report["aggregate"]["total_requests"] == MAX_INT
    assert report["aggregate"]["series"]["buckets"][0]["requests"] == MAX_INT
    assert all(a["requests"] == 2**53 for a in report["applications"])  # each service's own count fits
    (warning,) = [w for w in report["warnings"] if w["code"] == "count_saturated"]
    assert "aggregate.total_requests" in warning["message"] and "2^64 - 1" in warning["message"]
    assert _report(lines, fold=fold_line_reference)[1] == data  # the C fold and the reference alike


def test_one_services_count_past_2_64_is_saturated_in_every_place_it_is_written():
    lines = [_forged(i, 2**53, ["a"]) for i in range(2049)]  # 2,049 windows of one service
    state, data = _report(lines)
    assert state.services["a"].requests == 2049 * 2**53
    report = orjson.loads(data)
    assert report["applications"][0]["requests"] == MAX_INT
    assert report["aggregate"]["series"]["services"][0]["requests"][0] == MAX_INT
    (warning,) = [w for w in report["warnings"] if w["code"] == "count_saturated"]
    assert "applications[0].requests" in warning["message"]
    assert "aggregate.series.services[0].requests[0]" in warning["message"]


def test_counts_that_fit_are_not_touched_and_not_warned():
    state, data = _report([_forged(0, 2**53 - 1)])
    report = orjson.loads(data)
    assert report["aggregate"]["total_requests"] == state.requests == 2048 * (2**53 - 1) < MAX_INT
    assert "count_saturated" not in [w["code"] for w in report["warnings"]]


def test_the_cli_writes_the_report_of_a_forged_archive(tmp_path):
    directory = tmp_path / "agent-a"
    directory.mkdir()
    (directory / "windows-20261110-000000.jsonl").write_bytes(_forged(0, 2**53) + b"\n")
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-m", "carbonspan", "aggregate", str(tmp_path), "--from", "2026-11-10",
                          "--to", "2026-11-11", "--out", str(out)], capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert b"count_saturated" in out.read_bytes()
