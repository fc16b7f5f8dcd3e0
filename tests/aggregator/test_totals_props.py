"""The report's totals are the lines' totals, on every path (issue 11, item 2).

Whatever path a window takes - runtime maps, the I/O proxy, a one-sided window (only one
per-service map non-empty), host rows, a service named like a host - and whichever fold
does it (the general path, the Python fast path, the C fold), the report's total energy is
the sum of the lines' ``energy_kwh`` and its total carbon the sum of the lines'
``co2.total.mid`` terms, and the applications plus the hosts make up the total.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines
from aggregator.fold.fast import fold_line
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.state import AggregateState
from aggregator.read import Period
from aggregator.report import build_report
from schema.chain import seal

T0 = datetime(2026, 11, 10, tzinfo=UTC)
EVERYTHING = Period.everything()
NAMES = ["api", "pay", "pg", "batch"]  # "pg" is also the name of the database host below
FIGURE = st.integers(1, 4096).map(lambda n: n / 65536)
SHAPES = ["runtime", "energy_only", "carbon_only", "v1"]


@st.composite
def line(draw, i: int) -> dict:
    """One honest window: energy_kwh = services + in-totals hosts, operational = services'."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    shape = draw(st.sampled_from(SHAPES))
    energies = {n: draw(FIGURE) for n in names}
    carbons = {n: draw(FIGURE) / 1000 for n in names}
    hosts = [{"name": "pg", "kind": "database", "watts": 60.0, "energy_kwh": 60.0 * 60 / 3.6e6,
              "co2_gco2": 0.25}] if draw(st.booleans()) else []
    host_kwh = sum(h["energy_kwh"] for h in hosts)
    operational = sum(carbons.values()) * 1000
    embodied = draw(FIGURE)
    database = sum(h["co2_gco2"] for h in hosts)
    gs: dict = {
        "energy_kwh": sum(energies.values()) + host_kwh, "total_io_ops": 10 * len(names),
        "co2": {"operational_gco2": operational, "embodied_gco2": embodied, "database_gco2": database,
                "messaging_gco2": 0.0, "total": {"mid": operational + embodied + database}},
        "hosts": hosts,
    }
    if shape != "v1":
        gs["per_service_energy_kwh"] = {} if shape == "carbon_only" else energies
        gs["per_service_carbon_kgco2eq"] = {} if shape == "energy_only" else carbons
        gs["per_service_energy_model"] = dict.fromkeys(names, "io_proxy_v3")
    start = (T0 + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
    end = (T0 + timedelta(minutes=i + 1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"window": {"start": start, "end": end, "traces": draw(st.integers(0, 9))}, "green_summary": gs,
            "per_endpoint_io_ops": [{"service": n, "endpoint": "GET /", "io_ops": 10} for n in names]}


@st.composite
def archive(draw) -> list[dict]:
    return [draw(line(i)) for i in range(draw(st.integers(1, 10)))]


def _lines(reports: list[dict]) -> list[bytes]:
    out, prev = [], None
    for i, rep in enumerate(reports):
        rec = seal(prev, i, rep["window"]["start"], "report", rep)
        out.append(orjson.dumps(rec))
        prev = rec["hash"]
    return out


def _fold(lines: list[bytes], fold: Callable) -> AggregateState:
    state = AggregateState()
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state, fold=fold)
    return state


@settings(max_examples=300, deadline=None)
@given(archive())
def test_report_totals_are_the_lines_totals_on_every_path(reports):
    lines = _lines(reports)
    energy = sum(r["green_summary"]["energy_kwh"] for r in reports)
    carbon_g = sum(r["green_summary"]["co2"]["total"]["mid"] for r in reports)
    hosts = sum(h["energy_kwh"] for r in reports for h in r["green_summary"]["hosts"])
    one_sided = sum(1 for r in reports
                    if bool(r["green_summary"].get("per_service_energy_kwh"))
                    != bool(r["green_summary"].get("per_service_carbon_kgco2eq")))
    for fold in (fold_line_reference, fold_line):  # the reference, the accelerated fold
        state = _fold(lines, fold)
        agg = build_report(state, EVERYTHING).aggregate
        assert agg.total_energy_kwh == pytest.approx(energy, rel=1e-9)
        assert agg.total_carbon_kgco2eq == pytest.approx(carbon_g / 1000, rel=1e-9)
        assert agg.host_energy_kwh == pytest.approx(hosts, rel=1e-9)
        apps = build_report(state, EVERYTHING).applications
        assert sum(a.energy_kwh for a in apps) + agg.host_energy_kwh == pytest.approx(agg.total_energy_kwh, rel=1e-9)
        assert agg.one_sided_windows == one_sided


def _one_sided(empty: str) -> list[bytes]:
    """The issue's reproduction: one window of "api", 3e-7 kWh and 8.06e-5 g, one map empty."""
    gs = {"energy_kwh": 3e-7, "total_io_ops": 3,
          "co2": {"operational_gco2": 8.06e-5, "total": {"mid": 8.06e-5}},
          "per_service_energy_kwh": {"api": 3e-7}, "per_service_carbon_kgco2eq": {"api": 8.06e-8}}
    gs[empty] = {}
    rep = {"window": {"start": "2026-11-10T00:00:00Z", "end": "2026-11-10T00:01:00Z", "traces": 1},
           "green_summary": gs, "per_endpoint_io_ops": [{"service": "api", "endpoint": "GET /", "io_ops": 3}]}
    return _lines([rep])


@pytest.mark.parametrize("empty", ["per_service_carbon_kgco2eq", "per_service_energy_kwh"])
def test_a_one_sided_window_keeps_both_totals_and_is_counted_and_warned_once_per_file(tmp_path, fold, empty, caplog):
    path = tmp_path / "agent-a" / "windows-20261110-000000.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(_one_sided(empty) * 1) + b"\n")
    with caplog.at_level(logging.WARNING, logger="carbonspan.aggregate"):
        state = fold(tmp_path)
    agg = build_report(state, EVERYTHING).aggregate
    # before: the runtime path summed the empty map, reporting 0 g (or 0 kWh)
    assert agg.total_carbon_kgco2eq == pytest.approx(8.06e-8) and agg.total_energy_kwh == pytest.approx(3e-7)
    assert state.services["api"].carbon == pytest.approx(8.06e-8)  # split by I/O ops: api has them all
    assert agg.one_sided_windows == 1 and agg.fallback_windows == 1
    assert caplog.text.count("had only one of per_service_energy_kwh") == 1
