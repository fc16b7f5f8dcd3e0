"""Per-service gauges of the last window are capped, so service names cannot blow up /metrics."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import MAX_SERVICE_LABELS, AgentMetrics


def _samples(m: AgentMetrics, name: str) -> dict[str, float]:
    text = m.exposition().decode()
    return {s.labels["service"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def test_the_largest_services_keep_their_label_and_the_rest_sum_to_other() -> None:
    m = AgentMetrics()
    n = MAX_SERVICE_LABELS + 10
    energy = {f"svc-{i:03d}": float(i) for i in range(n)}
    carbon_kg = {f"svc-{i:03d}": i / 1000.0 for i in range(n)}  # svc-059 is the largest
    m.record_window(energy, carbon_kg, 1.0)
    e = _samples(m, "carbonspan_last_window_energy_kwh")
    c = _samples(m, "carbonspan_last_window_carbon_gco2")
    assert len(e) == len(c) == MAX_SERVICE_LABELS + 1
    assert "svc-059" in e and "svc-009" not in e  # the ten smallest are folded
    assert e["_other"] == pytest.approx(sum(range(10)))  # 0 + 1 + ... + 9
    assert c["svc-059"] == pytest.approx(59.0)  # kg -> g: 0.059 kg = 59 g
    assert sum(e.values()) == pytest.approx(sum(energy.values()))
    energy["_other"] = 1000.0  # a service really named "_other" is not overwritten
    m.record_window(energy, {k: v / 1000 for k, v in energy.items()}, 1.5)
    # "_other" itself is the largest and keeps a label; svc-000 .. svc-010 are folded into it
    assert _samples(m, "carbonspan_last_window_energy_kwh")["_other"] == pytest.approx(1000 + 55)
    m.record_window({"only": 2.0}, {"only": 0.5}, 2.0)  # the next window replaces the labels
    assert _samples(m, "carbonspan_last_window_energy_kwh") == {"only": 2.0}


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=20), st.floats(0, 1e6), max_size=120))
def test_any_service_names_keep_the_totals_and_the_cap(energy: dict[str, float]) -> None:
    m = AgentMetrics()
    m.record_window(energy, {k: v / 1000 for k, v in energy.items()}, 1.0)
    e = _samples(m, "carbonspan_last_window_energy_kwh")
    assert len(e) <= MAX_SERVICE_LABELS + 1
    assert sum(e.values()) == pytest.approx(sum(energy.values()), rel=1e-9, abs=1e-9)


def test_a_counter_source_shows_in_metrics_whether_its_counter_carries_the_energy() -> None:
    from agent.sources.redfish import KwhCounter

    def families(m: AgentMetrics) -> dict[tuple[str, tuple], float]:
        text = m.exposition().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    counter, m = KwhCounter("bmc"), AgentMetrics()
    counter.step(1.0, None)  # baseline
    assert counter.step(1.001, 30.0) == pytest.approx(3600.0)  # 0.001 kWh = 3,600 J
    m.record_source_health({"bmc": {"ok": True, "failures": 0, **counter.stats()},
                            "scaph": {"ok": True, "failures": 0}})
    got = families(m)
    assert got[("carbonspan_source_energy_counter", (("source", "bmc"),))] == 1.0
    assert not any(k[0] == "carbonspan_source_energy_counter" and ("source", "scaph") in k[1] for k in got)
    assert counter.step(0.5, 30.0) is None  # went backwards: a BMC reset, counted, not energy
    m.record_source_health({"bmc": {"ok": True, "failures": 0, **counter.stats()}})
    got = families(m)
    assert got[("carbonspan_source_energy_counter", (("source", "bmc"),))] == 0.0
    assert got[("carbonspan_source_counter_events", (("event", "resets"), ("source", "bmc")))] == 1.0


def _summary(energy: dict[str, float], carbon_g: float = 0.0, **co2: float) -> dict:
    """A green summary as archived: carbon per service in kg, co2 terms in g."""
    terms = {f"{t}_gco2": co2.get(t, 0.0) for t in ("operational", "embodied", "database", "messaging")}
    return {"per_service_energy_kwh": energy,
            "per_service_carbon_kgco2eq": {k: v * carbon_g / 1000 for k, v in energy.items()},
            "energy_kwh": sum(energy.values()) + co2.get("host_kwh", 0.0), "co2": terms,
            "regions": [{"region": "eu-west-3", "intensity_source": "real_time", "grid_intensity_gco2_kwh": 31.5}]}


def _all(m: AgentMetrics, name: str) -> dict[tuple, float]:
    text = m.exposition().decode()
    return {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def test_cumulative_counters_add_every_window_with_sticky_service_labels() -> None:
    """Window 1 has 60 services: the first 50 by name keep a label for good, 10 go to _other.
    Window 2 brings svc-000 again (its label) and a new service (to _other, the cap is full).
    Every kWh lands somewhere: the counters' sum is the sum of the windows."""
    m = AgentMetrics()
    first = {f"svc-{i:03d}": 1.0 for i in range(60)}
    m.record_totals(_summary(first, carbon_g=2.0, operational=120.0, embodied=3.0, database=4.0, host_kwh=0.5))
    m.record_totals(_summary({"svc-000": 5.0, "new": 7.0}, carbon_g=2.0, operational=24.0, messaging=1.0))
    e = {dict(k)["service"]: v for k, v in _all(m, "carbonspan_service_energy_kwh_total").items()}
    assert len(e) == MAX_SERVICE_LABELS + 1 and "svc-049" in e and "svc-050" not in e
    assert e["svc-000"] == 6.0 and e["_other"] == 10.0 + 7.0
    assert sum(e.values()) == 60.0 + 12.0
    c = {dict(k)["service"]: v for k, v in _all(m, "carbonspan_service_carbon_gco2_total").items()}
    assert c["svc-000"] == pytest.approx(12.0) and sum(c.values()) == pytest.approx(144.0)  # 72 kWh x 2 g
    assert _all(m, "carbonspan_energy_kwh_total")[()] == pytest.approx(72.5)  # + 0.5 kWh of hosts
    terms = {dict(k)["term"]: v for k, v in _all(m, "carbonspan_carbon_gco2_total").items()}
    assert terms == {"operational": 144.0, "embodied": 3.0, "database": 4.0, "messaging": 1.0}
    assert _all(m, "carbonspan_grid_intensity_gco2_per_kwh") == {
        (("region", "eu-west-3"), ("source", "real_time")): 31.5}


def test_hostile_summaries_never_make_a_counter_fail_or_go_down() -> None:
    m = AgentMetrics()
    m.record_totals(_summary({"a": 1.0}, carbon_g=1.0, operational=1.0))
    for bad in ({"per_service_energy_kwh": {"a": float("nan"), "b": -3.0, "c": "7", "d": True, "e": float("inf")},
                 "energy_kwh": -1.0, "co2": {"operational_gco2": float("nan")}, "regions": [5, {"region": 3}]},
                {"per_service_energy_kwh": [1, 2], "co2": "x", "regions": {}}, {}):
        m.record_totals(bad)
    e = {dict(k)["service"]: v for k, v in _all(m, "carbonspan_service_energy_kwh_total").items()}
    assert e["a"] == 1.0 and all(v == 0.0 for k, v in e.items() if k != "a")
    assert _all(m, "carbonspan_energy_kwh_total")[()] == 1.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=8), st.floats(0, 1e6), max_size=40), max_size=6))
def test_any_windows_keep_every_kwh_and_the_label_cap(windows: list[dict[str, float]]) -> None:
    m = AgentMetrics()
    for energy in windows:
        m.record_totals(_summary(energy))
    e = _all(m, "carbonspan_service_energy_kwh_total")
    assert len(e) <= MAX_SERVICE_LABELS + 1
    assert sum(e.values()) == pytest.approx(sum(sum(w.values()) for w in windows), rel=1e-9, abs=1e-9)


def _scrape(m: AgentMetrics) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(m.exposition().decode()) for s in f.samples}


def test_the_scorer_and_its_fallbacks_are_on_metrics() -> None:
    """``carbonspan_scorer_c{status}`` says whether the C pass scores; every batch it declines
    (handed to the numpy reference) counts in ``carbonspan_scorer_fallbacks_total{reason}``,
    from this registry's start, under a reason of a fixed set (the detail, which names a
    batch's length, is the log's)."""
    from agent import score_fast
    from agent.carbon.ext import FALLBACK_REASONS

    assert FALLBACK_REASONS == ("column", "calibration", "clock", "table", "count_overflow")
    score_fast._fallback("column", "column service_id is not int32[3]")  # before this registry
    m = AgentMetrics()
    first = _scrape(m)
    assert first[("carbonspan_scorer_c", (("status", "c"),))] == 1.0
    for reason in FALLBACK_REASONS:
        assert first[("carbonspan_scorer_fallbacks_total", (("reason", reason),))] == 0.0
    score_fast._fallback("column", "column service_id is not int32[3]")
    score_fast._fallback("column", "column start_ns is not int64[9]")
    score_fast._fallback("table", "an id outside its table, an unknown op class or a clock past int64")
    score_fast._fallback("clock", "the clock is not an int of ns")
    score_fast._fallback("count_overflow", "a batch of 3 spans would take a count past int64")
    after = _scrape(m)
    fallbacks = {k[1][0][1]: v for k, v in after.items()
                 if k[0] == "carbonspan_scorer_fallbacks_total"}
    assert fallbacks == {"column": 2.0, "calibration": 0.0, "clock": 1.0, "table": 1.0,
                         "count_overflow": 1.0}
    assert _scrape(m) == after  # a scrape alone adds nothing
    with pytest.raises(ValueError):
        score_fast._fallback("column service_id is not int32[3]", "a detail is no reason")


def test_a_scorer_that_is_not_built_or_stale_shows_zero(monkeypatch) -> None:
    from agent import score_fast

    monkeypatch.setattr(score_fast, "FAST_SCORER", False)
    monkeypatch.setattr(score_fast, "STATUS", "reference: agent._score is not built")
    assert _scrape(AgentMetrics())[("carbonspan_scorer_c", (("status", "not_built"),))] == 0.0
    monkeypatch.setattr(score_fast, "STATUS", "reference: agent._score (x.so) is a stale build "
                        "(score version 1, expected 2); rebuild it")
    assert _scrape(AgentMetrics())[("carbonspan_scorer_c", (("status", "stale_build"),))] == 0.0
