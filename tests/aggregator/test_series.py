"""``aggregate.series``: the report over time, kept as mergeable fold state (issue 15).

The grid (hourly up to two days, else daily, UTC), the rule that a window's start picks its
bucket, empty buckets as zeros, the service cap, the identities with the report's totals, the
three fold paths and the engines' merge giving the same buckets, pickling for Dask,
``series.csv`` and ``verify --report`` re-deriving the series.
"""

from __future__ import annotations

import csv
import json
import math
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import synth
from aggregator.engines import fold_lines, merge_next, run_local
from aggregator.files import discover
from aggregator.fold.fast import fold_line
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.rules import DAY, HOUR, bucket_start, series_grid
from aggregator.fold.state import AggregateState
from aggregator.fold.sums import Bucket
from aggregator.read import Period, to_epoch
from aggregator.report import build_report, report_bytes
from carbonspan.cli import main
from schema.chain import seal

T0 = datetime(2026, 11, 10, tzinfo=UTC)
DAY_10 = Period.parse("2026-11-10", "2026-11-10")  # one day: hourly buckets
TWO_DAYS = Period.parse("2026-11-10", "2026-11-11")  # 48 hours: still hourly


def test_the_grid_is_hourly_up_to_two_days_else_daily_from_utc_midnight():
    midnight = to_epoch("2026-11-10T00:00:00Z")
    assert series_grid(DAY_10) == (midnight, HOUR) == series_grid(TWO_DAYS)
    assert series_grid(Period.parse("2026-11-10", "2026-11-12")) == (midnight, DAY)  # 3 days
    assert series_grid(Period.parse("2026-11-10T06:30:00Z", "2026-11-11T06:30:00Z")) == (midnight, HOUR)
    assert series_grid(Period.parse("2026-11-01", "2026-11-30")) == (to_epoch("2026-11-01T00:00:00Z"), DAY)
    # past 400 days touched: buckets of k whole days, the smallest k giving at most 400
    assert series_grid(Period.parse("2025-01-01", "2026-12-31")) == (to_epoch("2025-01-01T00:00:00Z"), 2 * DAY)
    assert series_grid(Period.everything()) == (0, DAY)


@settings(max_examples=500, deadline=None)
@given(st.floats(-6e10, 2.5e11, allow_nan=False), st.sampled_from([HOUR, DAY, 2 * DAY]),
       st.sampled_from([0, 1_762_732_800]))
def test_a_bucket_is_the_grid_point_at_or_before_the_start_exactly(t, width, origin):
    lo = bucket_start(origin, width, t)
    assert (lo - origin) % width == 0 and lo <= t < lo + width  # exact comparisons (int vs float)


def _window(at: datetime, services: dict[str, tuple[float, float, int]], *, v1: bool = False,
            host_kwh: float = 0.0, embodied_g: float = 0.0, length_s: int = 60) -> dict:
    """A window starting at ``at``: service -> (kWh, kg, requests); dyadic figures add exactly."""
    ops = sum(s[0] for s in services.values())
    gs: dict = {"energy_kwh": ops + host_kwh, "total_io_ops": 4 * len(services),
                "co2": {"operational_gco2": sum(s[1] for s in services.values()) * 1000.0,
                        "embodied_gco2": embodied_g, "database_gco2": 0.5 if host_kwh else 0.0, "messaging_gco2": 0.0,
                        "total": {"mid": 0.0}},
                "hosts": [{"name": "pg", "kind": "database", "energy_kwh": host_kwh, "co2_gco2": 0.5}] if host_kwh else []}
    if not v1:
        gs["per_service_energy_kwh"] = {n: s[0] for n, s in services.items()}
        gs["per_service_carbon_kgco2eq"] = {n: s[1] for n, s in services.items()}
        gs["per_service_requests"] = {n: s[2] for n, s in services.items()}
    return {"window": {"start": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "end": (at + timedelta(seconds=length_s)).strftime("%Y-%m-%dT%H:%M:%SZ"), "traces": 5},
            "green_summary": gs, "per_endpoint_io_ops": [{"service": n, "io_ops": 4} for n in services]}


def _lines(reports: list[dict]) -> list[bytes]:
    out, prev = [], None
    for i, rep in enumerate(reports):
        rec = seal(prev, i, rep["window"]["start"], "report", rep)
        out.append(orjson.dumps(rec))
        prev = rec["hash"]
    return out


def _fold(lines: list[bytes], period: Period, fold: Callable = fold_line, **caps: int) -> AggregateState:
    state = AggregateState(**caps)
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", period, state=state, fold=fold)
    return state


PATHS = [fold_line_reference, fold_line]  # the reference, the accelerated fold


def test_worked_example_hourly_buckets_by_window_start_with_empty_hours_as_zeros():
    # docs/report-format.md, "Over time": four windows on 2026-11-10
    reports = [
        _window(T0 + timedelta(minutes=10), {"api": (0.25, 0.125, 3), "pay": (0.5, 0.25, 1)}),
        _window(T0 + timedelta(minutes=11), {"api": (0.25, 0.125, 3), "pay": (0.5, 0.25, 1)}),
        # starts at 00:59:30 and ends at 01:00:30: all of it counts in hour 00 (its start)
        _window(T0 + timedelta(minutes=59, seconds=30), {"api": (0.25, 0.125, 3), "pay": (0.5, 0.25, 1)}),
        _window(T0 + timedelta(hours=3), {"api": (1.0, 0.5, 7)}, host_kwh=0.125, embodied_g=250.0),
    ]
    lines = _lines(reports)
    got = set()
    for fold in PATHS:
        report = build_report(_fold(lines, DAY_10, fold), DAY_10)
        got.add(report_bytes(report))
    assert len(got) == 1  # both folds give the same bytes, series included
    series = report.aggregate.series
    assert (series.bucket, series.bucket_seconds, len(series.buckets)) == ("hour", 3600, 24)
    b = series.buckets
    assert (b[0].start, b[0].end, b[23].end) == ("2026-11-10T00:00:00Z", "2026-11-10T01:00:00Z", "2026-11-11T00:00:00Z")
    assert (b[0].windows, b[0].requests, b[0].energy_kwh, b[0].operational_kgco2eq) == (3, 12, 2.25, 1.125)
    assert (b[3].windows, b[3].energy_kwh, b[3].host_energy_kwh) == (1, 1.125, 0.125)
    assert (b[3].operational_kgco2eq, b[3].embodied_kgco2eq, b[3].host_carbon_kgco2eq) == (0.5, 0.25, 0.0005)
    assert b[3].carbon_kgco2eq == 0.5 + 0.25 + 0.0005
    empty = [x for i, x in enumerate(b) if i not in (0, 3)]
    assert all(x.windows == x.requests == 0 and x.energy_kwh == x.carbon_kgco2eq == 0.0 for x in empty)
    services = {s.service_name: s for s in series.services}
    assert [s.service_name for s in series.services] == [a.service_name for a in report.applications]
    assert services["api"].energy_kwh[:4] == [0.75, 0.0, 0.0, 1.0] and services["api"].requests[:4] == [9, 0, 0, 7]
    assert services["pay"].carbon_kgco2eq[0] == 0.75 and sum(services["pay"].energy_kwh) == 1.5
    # the series adds up to the report (exactly here: every figure is dyadic)
    agg = report.aggregate
    assert sum(x.energy_kwh for x in b) == agg.total_energy_kwh and sum(x.requests for x in b) == agg.total_requests
    assert sum(x.carbon_kgco2eq for x in b) == agg.total_carbon_kgco2eq and sum(x.windows for x in b) == agg.windows


def test_a_period_cut_inside_an_hour_cuts_its_first_and_last_bucket():
    period = Period.parse("2026-11-10T06:30:00Z", "2026-11-10T09:15:00Z")
    lines = _lines([_window(T0 + timedelta(hours=6, minutes=40), {"api": (0.25, 0.125, 1)})])
    series = build_report(_fold(lines, period), period).aggregate.series
    assert [(x.start, x.end) for x in series.buckets] == [
        ("2026-11-10T06:30:00Z", "2026-11-10T07:00:00Z"), ("2026-11-10T07:00:00Z", "2026-11-10T08:00:00Z"),
        ("2026-11-10T08:00:00Z", "2026-11-10T09:00:00Z"), ("2026-11-10T09:00:00Z", "2026-11-10T09:15:00Z")]
    assert [x.windows for x in series.buckets] == [1, 0, 0, 0]


def test_services_past_the_cap_are_each_buckets_dropped_entries():
    reports = [_window(T0 + timedelta(hours=h), {"a": (0.25, 0.125, 1), "b": (0.5, 0.25, 2)}) for h in range(3)]
    for fold in PATHS:
        report = build_report(_fold(_lines(reports), DAY_10, fold, max_services=1), DAY_10)
        series, agg = report.aggregate.series, report.aggregate
        assert [s.service_name for s in series.services] == ["a"] and agg.dropped_energy_kwh == 1.5
        for x in series.buckets[:3]:
            assert (x.dropped_energy_kwh, x.dropped_carbon_kgco2eq, x.energy_kwh) == (0.5, 0.25, 0.75)
            # per bucket: services + entries past the cap + hosts = the bucket's energy
        assert sum(x.dropped_energy_kwh for x in series.buckets) == agg.dropped_energy_kwh


def test_buckets_and_cells_pickle_whole_for_dask():
    state = _fold(_lines([_window(T0, {"a": (0.25, 0.125, 2**53)})]), DAY_10)
    back = pickle.loads(pickle.dumps(state))
    (key, bucket), = back.series.items()
    assert isinstance(bucket, Bucket) and bucket.sums() == state.series[key].sums()
    cell = bucket.services["a"]
    assert (cell.energy, cell.carbon, cell.requests) == (0.25, 0.125, 2**53)


NAMES = st.sampled_from(["a", "b", "c", "pg"])
DYADIC = st.integers(0, 4096).map(lambda n: n / 1024)


@st.composite
def spread_archive(draw) -> list[bytes]:
    """Windows of runtime, v1.0 and host shapes at any time of two days, in any order."""
    reports = []
    for _ in range(draw(st.integers(1, 14))):
        names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
        services = {n: (draw(DYADIC), draw(DYADIC), draw(st.integers(0, 9))) for n in names}
        at = T0 + timedelta(seconds=draw(st.integers(0, 2 * 86400 - 1)))
        reports.append(_window(at, services, v1=draw(st.integers(0, 3)) == 0,
                               host_kwh=draw(st.sampled_from([0.0, 0.0, 0.125])), embodied_g=draw(DYADIC)))
    return _lines(reports)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=150, deadline=None)
@given(spread_archive(), st.sampled_from([{}, {"max_services": 2}]), st.lists(st.integers(0, 14), max_size=2))
def test_the_series_adds_up_to_the_report_on_every_path_and_through_the_engines_merge(lines, caps, cuts):
    reports = {report_bytes(build_report(_fold(lines, TWO_DAYS, fold, **caps), TWO_DAYS)) for fold in PATHS}
    assert len(reports) == 1
    report = orjson.loads(reports.pop())
    agg, series = report["aggregate"], report["aggregate"]["series"]
    b = series["buckets"]
    assert len(b) == 48 and [x["start"] for x in b] == sorted(x["start"] for x in b)
    # integers exactly; floats to rounding (the buckets associate the same terms otherwise)
    assert sum(x["windows"] for x in b) == agg["windows"] and sum(x["requests"] for x in b) == agg["total_requests"]
    for field, total in (("energy_kwh", agg["total_energy_kwh"]), ("carbon_kgco2eq", agg["total_carbon_kgco2eq"]),
                         ("host_energy_kwh", agg["host_energy_kwh"]), ("dropped_energy_kwh", agg["dropped_energy_kwh"])):
        assert _close(sum(x[field] for x in b), total), field
    apps = {a["service_name"]: a for a in report["applications"]}
    assert [s["service_name"] for s in series["services"]] == list(apps)
    for s in series["services"]:
        app = apps[s["service_name"]]
        assert sum(s["requests"]) == app["requests"] and len(s["energy_kwh"]) == 48
        assert _close(sum(s["energy_kwh"]), app["energy_kwh"]) and _close(sum(s["carbon_kgco2eq"]), app["carbon_kgco2eq"])
    for i, x in enumerate(b):  # per bucket: services + entries past the cap + hosts = the bucket's energy
        services = sum(s["energy_kwh"][i] for s in series["services"])
        assert _close(services + x["dropped_energy_kwh"] + x["host_energy_kwh"], x["energy_kwh"])
        if x["windows"] == 0:
            assert x["energy_kwh"] == x["carbon_kgco2eq"] == 0.0 and x["requests"] == 0
    # the engines: each file folded alone, merged in file order (refolded when it overflows)
    bounds = sorted({0, len(lines), *(min(c, len(lines)) for c in cuts)})
    total = AggregateState(**caps)
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        part = _fold(lines[lo:hi], TWO_DAYS, **caps)
        part.drop_caches()
        merge_next(total, part, lambda known, lo=lo, hi=hi: _refold(lines[lo:hi], known, caps))
    merged = orjson.loads(report_bytes(build_report(total, TWO_DAYS)))["aggregate"]["series"]
    assert [x["windows"] for x in merged["buckets"]] == [x["windows"] for x in b]
    assert [s["service_name"] for s in merged["services"]] == [s["service_name"] for s in series["services"]]
    for mine, theirs in zip(merged["services"], series["services"], strict=True):
        assert mine["requests"] == theirs["requests"]
        assert all(_close(x, y) for x, y in zip(mine["energy_kwh"], theirs["energy_kwh"], strict=True))
    for mine, theirs in zip(merged["buckets"], b, strict=True):
        assert all(_close(mine[k], theirs[k]) for k in theirs if isinstance(theirs[k], float))


def _refold(lines: list[bytes], known, caps: dict) -> AggregateState:
    from aggregator.fold.state import seeded

    state = seeded(known, **caps)
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", TWO_DAYS, state=state)
    state.drop_caches()
    return state


def spread_archives(root: Path, days: int = 3, step_minutes: int = 97) -> Path:
    """Two agents over ``days`` days from 2026-11-10, a window every ``step_minutes`` (runtime
    and v1.0 lines, 12 and 6 services), rotated into files, one gzipped; a day left empty."""
    for agent, n_services, seed in (("agent-a", 12, 1), ("agent-b", 6, 2)):
        reports = []
        for i, t in enumerate(range(0, days * 1440, step_minutes)):
            if 1440 <= t < 2880 and agent == "agent-b":
                continue  # agent-b is down on the second day
            template = synth.realistic(1, seed=seed + i, n_services=n_services, agent_id=agent)[0]
            rep = template.model_copy(deep=True) if not isinstance(template, dict) else template
            start = T0 + timedelta(minutes=t)
            rep.window.start, rep.window.end = (start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                                (start + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ"))
            reports.append(synth.v1_dict(rep) if i % 5 == 0 else rep)
        lines = synth.sealed_lines(reports)
        synth.write_agent(root, agent, synth.split(lines, 3), gzip_files=[1], day="20261110")
    return root


def test_series_csv_has_units_in_its_headers_and_the_report_figures(tmp_path):
    root = spread_archives(tmp_path / "archives")
    out, csv_dir = tmp_path / "r.json", tmp_path / "csv"
    assert main(["aggregate", str(root), "--from", "2026-11-10", "--to", "2026-11-13", "--out", str(out),
                 "--csv", str(csv_dir)]) == 0
    report = json.loads(out.read_bytes())
    series = report["aggregate"]["series"]
    with (csv_dir / "series.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["bucket_start_utc", "bucket_end_utc", "row", "service", "windows", "requests",
                             "energy_kwh", "operational_carbon_kgco2e", "carbon_kgco2e", "host_energy_kwh",
                             "embodied_carbon_kgco2e", "host_carbon_kgco2e", "dropped_energy_kwh",
                             "dropped_carbon_kgco2e"]
    totals = [r for r in rows if r["row"] == "total"]
    assert len(series["buckets"]) == len(totals) == 4 and series["bucket"] == "day"
    assert len(rows) == len(totals) * (1 + len(series["services"]))
    for row, b in zip(totals, series["buckets"], strict=True):
        assert (row["bucket_start_utc"], row["bucket_end_utc"]) == (b["start"], b["end"])
        assert float(row["energy_kwh"]) == b["energy_kwh"] and int(row["windows"]) == b["windows"]
        assert float(row["carbon_kgco2e"]) == b["carbon_kgco2eq"]
    api = series["services"][0]
    mine = [r for r in rows if r["row"] == "service" and r["service"] == api["service_name"]]
    assert [float(r["energy_kwh"]) for r in mine] == api["energy_kwh"]
    assert [int(r["requests"]) for r in mine] == api["requests"]
    assert totals[-1]["windows"] == "0" and totals[-1]["energy_kwh"] == "0.0"  # 2026-11-13: no data, zeros


def test_verify_rederives_the_series_and_catches_an_edited_bucket(tmp_path, capsys):
    root = spread_archives(tmp_path / "archives")
    out = tmp_path / "r.json"
    assert main(["aggregate", str(root), "--from", "2026-11-10", "--to", "2026-11-11", "--out", str(out)]) == 0
    report = json.loads(out.read_bytes())
    assert report["aggregate"]["series"]["bucket"] == "hour" and len(report["aggregate"]["series"]["buckets"]) == 48
    assert main(["verify", str(root), "--report", str(out)]) == 0
    assert "re-derives to the same content hash" in capsys.readouterr().out
    # move a bucket's energy to the next hour and re-hash: the hash is consistent, the figures not
    from aggregator.report import content_hash

    buckets = report["aggregate"]["series"]["buckets"]
    buckets[1]["energy_kwh"] += buckets[0]["energy_kwh"]
    buckets[0]["energy_kwh"] = 0.0
    report["integrity"]["content_hash"] = content_hash(report)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(report))
    assert main(["verify", str(root), "--report", str(edited)]) == 1
    text = capsys.readouterr().out
    assert "rederivation_mismatch" in text and "aggregate" in text and "report_hash_mismatch" not in text


def test_an_open_period_is_bucketed_by_day_over_the_windows_extent():
    lines = _lines([_window(T0, {"a": (0.25, 0.125, 1)}), _window(T0 + timedelta(days=2), {"a": (0.25, 0.125, 1)})])
    report = build_report(_fold(lines, Period.everything()), Period.everything())
    series = report.aggregate.series
    assert series.bucket == "day" and [x.start for x in series.buckets] == [
        "2026-11-10T00:00:00Z", "2026-11-11T00:00:00Z", "2026-11-12T00:00:00Z"]
    assert [x.windows for x in series.buckets] == [1, 0, 1]


def test_run_local_merges_files_of_one_bucket_into_one(tmp_path):
    root = spread_archives(tmp_path / "archives", days=1, step_minutes=7)
    files = discover([str(root)])
    state = run_local(files, DAY_10)
    series = build_report(state, DAY_10).aggregate.series
    assert sum(x.windows for x in series.buckets) == state.windows and len(series.buckets) == 24
    assert all(x.windows > 0 for x in series.buckets)  # every hour has windows of both agents
