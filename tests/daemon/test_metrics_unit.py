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
