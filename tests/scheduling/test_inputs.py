"""Reading experiments, topologies, workloads and carbon traces: what is refused and why,
the Cartesian product of axes, sampling, realignment and the trace's ends."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sim_inputs import DATA, HOUR, MIN, T0, experiment

import scheduling
from scheduling.carbon import make_trace, read_trace
from scheduling.experiment import load_experiment
from scheduling.topology import SpecError, load_topology
from scheduling.workload import prepare, read_workload

SURF = DATA / "workload_traces" / "surf_week"


def small(files):
    topo = files.topology([{"hosts": [{"cores": 4}]}])
    wl = files.workload([{"id": i, "submit": T0 + i * MIN, "fragments": [(10 * MIN, 500)]} for i in range(6)])
    return topo, wl


def test_unknown_keys_are_errors_naming_the_key(files) -> None:
    topo, wl = small(files)
    exp = experiment(topo, wl)
    with pytest.raises(SpecError, match="unknown key 'allocationPolicy'"):
        load_experiment({**exp, "allocationPolicy": []})
    bad = json.loads(topo.read_text())
    bad["clusters"][0]["hosts"][0]["cpu"]["coreSpeeed"] = 1
    with pytest.raises(SpecError, match="unknown key 'coreSpeeed'"):
        load_topology(bad)
    with pytest.raises(SpecError, match=r"workloads\[0\]: unknown key 'deferall'"):
        load_experiment({**exp, "workloads": [{**exp["workloads"][0], "deferall": True}]})
    with pytest.raises(SpecError, match="unknown key 'windowsize'"):
        load_experiment({**exp, "allocationPolicies": [{"type": "timeshift", "windowsize": 3}]})


def test_recognised_but_unsupported_features_say_so(files) -> None:
    topo, wl = small(files)
    exp = experiment(topo, wl)
    with pytest.raises(SpecError, match="failureModels: recognised but not supported"):
        load_experiment({**exp, "failureModels": [{"type": "no"}]})
    load_experiment({**exp, "failureModels": [None], "checkpointModels": [None]})  # off: accepted
    with pytest.raises(SpecError, match="checkpointModels: recognised but not supported"):
        load_experiment({**exp, "checkpointModels": [{"checkpointInterval": 1}]})
    t = json.loads(topo.read_text())
    t["clusters"][0]["battery"] = {"capacity": 1}
    with pytest.raises(SpecError, match="battery: recognised but not supported"):
        load_topology(t)
    with pytest.raises(SpecError, match="scalingPolicy 'Perfect'"):
        load_experiment({**exp, "workloads": [{**exp["workloads"][0], "scalingPolicy": "Perfect"}]})
    # OpenDC's own features experiment: refused at its first unsupported feature, named
    with pytest.raises(SpecError, match="maxNumFailures"):
        load_experiment(DATA / "experiments" / "features_experiment.json")


@pytest.mark.parametrize("key, value, field", [
    ("shortForecastThreshold", 1.5, "shortForecastThreshold"), ("forecastSize", 0, "forecastSize"),
    ("windowSize", -1, "windowSize"), ("deadlineMargin", -0.1, "deadlineMargin"),
    ("taskStopper", {"forecastThreshold": -0.2}, "taskStopper.forecastThreshold"),
    # a quoted "false" once ran as true: flags must be JSON booleans
    ("forecast", "false", "forecast"), ("memorize", "no", "memorize"),
    ("taskStopper", {"forecast": "false"}, "taskStopper.forecast"),
])
def test_timeshift_parameters_are_checked_at_load(files, key, value, field) -> None:
    topo, wl = small(files)
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        load_experiment(experiment(topo, wl, [{"type": "timeshift", key: value}]))


def test_compat_refuses_a_quantile_index_past_the_forecast(files) -> None:
    topo, wl = small(files)
    exp = experiment(topo, wl, [{"type": "timeshift", "longForecastThreshold": 0.99}])
    load_experiment(exp)  # fine for carbonspan's own quantile
    with pytest.raises(SpecError, match=r"longForecastThreshold: .*round\(23 x 0.99\)"):
        load_experiment(exp, compat=True)


def test_scenarios_are_the_cartesian_product_times_runs(files) -> None:
    topo, wl = small(files)
    exp = experiment(topo, wl, [{"type": "prefab", "policyName": "Mem"}, {"type": "prefab", "policyName": "Random"}])
    exp["topologies"] *= 2
    exp["exportModels"] = [{"exportInterval": 60}, {"exportInterval": 600}]
    exp.update(runs=3, initialSeed=10)
    e = load_experiment(exp)
    assert len(e.scenarios) == 2 * 1 * 2 * 2 * 3
    assert [s.seed for s in e.scenarios[:3]] == [10, 11, 12]
    assert len({s.label for s in e.scenarios}) == len(e.scenarios)


def test_sample_fraction_is_seeded_without_replacement_and_by_load() -> None:
    wl = read_workload(SURF)
    a = prepare(wl, sample_fraction=0.5, seed=3)
    b = prepare(wl, sample_fraction=0.5, seed=3)
    c = prepare(wl, sample_fraction=0.5, seed=4)
    assert np.array_equal(a.task_id, b.task_id) and not np.array_equal(a.task_id, c.task_id)
    assert np.unique(a.task_id).size == a.n  # without replacement
    load = lambda w: float((w.frag_duration * w.frag_usage).sum())  # noqa: E731
    assert 0.5 <= load(a) / load(wl) < 0.5 + 0.01
    assert np.all(np.diff(a.submit) >= 0)  # back in submission order
    assert a.counters["sampled_out"] == wl.n - a.n


def test_submission_time_realigns_and_defer_all_sets_deadlines() -> None:
    wl = read_workload(SURF)
    start = T0 + 30 * 86_400_000
    out = prepare(wl, submission_time_ms=start, defer_all=True)
    assert out.submit.min() == start
    assert np.array_equal(out.submit - wl.submit, np.full(wl.n, start - wl.submit.min()))
    assert out.deferrable.all() and np.array_equal(out.deadline, out.submit + 3 * out.duration)


def test_workload_groups_non_contiguous_fragments_by_task() -> None:
    wl = read_workload(SURF)
    assert wl.n == 6295 and wl.frag_duration.size == 2_323_475
    assert wl.counters["fragments_without_task"] == 0 and wl.counters["duration_mismatch"] == 0


def test_a_time_outside_the_trace_is_missing_signal_not_the_edge_value(files) -> None:
    trace = files.trace([100.0, 300.0])  # T0 .. T0 + 2 h
    topo = files.topology([{"hosts": [{"cores": 1}], "trace": trace}])
    wl = files.workload([{"id": 0, "submit": T0 + HOUR, "fragments": [(2 * HOUR, 2000)]}])
    (res,) = scheduling.simulate(experiment(topo, wl))
    s = res.summary
    # 1 h inside the trace at 300 g/kWh and 200 W, then 1 h past its end: no intensity
    assert s["carbon_g"] == pytest.approx(200 * 3600 / 3.6e6 * 300)
    assert s["energy_without_intensity_j"] == pytest.approx(200 * 3600)
    t = read_trace(trace)
    assert np.isnan(t.value_at(T0 - 1)) and np.isnan(t.value_at(T0 + 2 * HOUR)) and t.value_at(T0) == 100


def test_edge_case_traces_and_csv(tmp_path) -> None:
    one = read_trace(DATA / "carbon_traces" / "2022-01-01_single_100.parquet")
    assert one.step_ms == HOUR and one.values.tolist() == [100.0]
    two = read_trace(DATA / "carbon_traces" / "2022-01-01_two_80_120.parquet")
    assert two.values.tolist() == [80.0, 120.0]
    wide = tmp_path / "wide.csv"
    wide.write_text("datetime_utc,NL,BE\n2022-10-01T00:00Z,300,150\n2022-10-01T01:00Z,250,140\n")
    assert read_trace(f"{wide}#BE").values.tolist() == [150.0, 140.0]
    with pytest.raises(ValueError, match="name one as wide.csv#ZONE"):
        read_trace(wide)
    with pytest.raises(ValueError, match="not a finite number >= 0"):
        make_trace("x", np.array([0, 1]), np.array([1.0, -2.0]))


def test_several_clusters_each_with_its_own_trace(files) -> None:
    dirty = files.trace([400.0] * 4, name="dirty.parquet")
    clean = files.trace([50.0] * 4, name="clean.parquet")
    topo = files.topology([{"name": "A", "hosts": [{"cores": 1}], "trace": dirty},
                           {"name": "B", "hosts": [{"cores": 1}], "trace": clean}])
    wl = files.workload([{"id": 0, "submit": T0, "fragments": [(HOUR, 2000)]},
                         {"id": 1, "submit": T0, "fragments": [(HOUR, 2000)]}])
    (res,) = scheduling.simulate(experiment(topo, wl))
    ps = res.tables["powerSource"].to_pydict()
    assert ps["power_source"] == ["A", "B"]
    # each host: 200 W for 1 h = 0.2 kWh, at its own source's intensity
    assert ps["carbon_g"] == pytest.approx([0.2 * 400, 0.2 * 50])
    assert res.summary["carbon_g"] == pytest.approx(0.2 * 450)


def test_a_forecast_provider_is_checked_at_load_and_its_file_found_next_to_the_experiment(files) -> None:
    """A recorded forecast's pathToFile is resolved like every other path (against the
    experiment's folder: it was once looked for next to the topology), and a bad provider spec
    is refused at load with the field named, not when its scenario runs."""
    topo, wl = small(files)
    here = files.root / "study"
    here.mkdir()
    (here / "rec.csv").write_text("issued_at,timestamp,carbon_intensity\n"
                                  "2022-10-01T00:00Z,2022-10-01T01:00Z,120\n")
    exp = experiment(topo, wl, [{"type": "timeshift", "forecastProvider": {"type": "recorded",
                                                                           "pathToFile": "rec.csv"}}])
    (here / "exp.json").write_text(json.dumps(exp))
    (res,) = scheduling.simulate(here / "exp.json")
    assert res.summary["forecast"] == "recorded"
    for provider, message in [({"type": "noisy", "mapee": 0.1}, "unknown key"),
                              ({"type": "noisy", "mape": 1.5}, "mape 1.5"),
                              ({"type": "recorded", "pathToFile": "nowhere.csv"}, "nowhere.csv"),
                              ("oracle", "unknown type 'oracle'")]:
        exp["allocationPolicies"] = [{"type": "timeshift", "forecastProvider": provider}]
        with pytest.raises(SpecError, match=rf"allocationPolicies\[0\]\.forecastProvider: .*{message}"):
            load_experiment(exp, base=here)
