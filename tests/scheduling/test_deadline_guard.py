"""The deadline guard: a held task is released at the latest instant from which its runtime x
(1 + margin) still ends by its deadline, so deferral never makes it miss.

One 1-core host; one deferrable task of 1 hour submitted at T0 + 1 h with a deadline 5 h later;
margin 0.1, so the guard instant is deadline - 66 min = T0 + 4 h 54 min.
"""

from __future__ import annotations

import numpy as np
from sim_inputs import HOUR, MIN, T0, experiment

import scheduling
from scheduling.shift import latest_release

SUBMIT = T0 + HOUR
DEADLINE = SUBMIT + 5 * HOUR
GUARD = DEADLINE - 66 * MIN


def run(files, values: list[float], provider: str = "persistence", deadline: int = DEADLINE) -> dict:
    # a day of history before T0, so persistence has a "same time yesterday" for every hour
    trace = files.trace([values[0]] * 24 + values, start=T0 - 24 * HOUR)
    topo = files.topology([{"hosts": [{"cores": 1}], "trace": trace}])
    wl = files.workload([{"id": 0, "submit": SUBMIT, "fragments": [(HOUR, 1000)], "deferrable": True,
                          "deadline": deadline}])
    policy = {"type": "timeshift", "forecastProvider": provider, "memorize": True}
    (res,) = scheduling.simulate(experiment(topo, wl, [policy]))
    task = res.tables["task"].to_pylist()[0]
    return {**task, "summary": res.summary}


def test_latest_release_arithmetic() -> None:
    assert latest_release(DEADLINE, HOUR, 0.1) == GUARD
    assert latest_release(10_000, 1_000, 0.0) == 9_000


def test_constant_intensity_is_never_low_so_the_guard_releases_it_in_time(files) -> None:
    t = run(files, [100.0] * 48)
    assert t["start_time"] == GUARD and t["guard_released"]
    assert t["finish_time"] == GUARD + HOUR <= DEADLINE and not t["deadline_missed"]
    assert t["deferred_ms"] == GUARD - SUBMIT


def test_a_dip_after_the_deadline_is_not_waited_for(files) -> None:
    values = [300.0] * 48
    values[8:12] = [50.0] * 4  # T0 + 8 h: after the deadline (T0 + 6 h)
    t = run(files, values, "perfect")
    assert t["start_time"] == GUARD and t["finish_time"] <= DEADLINE and not t["deadline_missed"]


def test_a_dip_reachable_only_by_missing_the_deadline_is_not_taken(files) -> None:
    values = [300.0] * 48
    values[5:8] = [50.0] * 3  # from T0 + 5 h: a 1 h run started there ends at T0 + 6 h + ...
    # the dip starts at T0 + 5 h, after the guard instant T0 + 4 h 54 min: taking it would
    # end at T0 + 6 h = the deadline with no margin left, so the guard runs the task first
    t = run(files, values, "perfect")
    assert t["start_time"] == GUARD < T0 + 5 * HOUR
    assert not t["deadline_missed"]


def test_a_dip_within_the_slack_is_taken(files) -> None:
    values = [300.0] * 48
    values[3:5] = [50.0] * 2  # T0 + 3 h .. 5 h, inside the slack
    t = run(files, values, "perfect")
    assert t["start_time"] == T0 + 3 * HOUR and not t["guard_released"]
    assert t["carbon_g"] < 300.0 * 200 / 1000  # ran at 50 g/kWh, not 300


def test_without_a_day_of_history_persistence_has_no_forecast_and_does_not_defer(files) -> None:
    trace = files.trace([100.0] * 48)  # starts at T0: nothing observed a day before T0 + 1 h
    topo = files.topology([{"hosts": [{"cores": 1}], "trace": trace}])
    wl = files.workload([{"id": 0, "submit": SUBMIT, "fragments": [(HOUR, 1000)], "deferrable": True,
                          "deadline": DEADLINE}])
    (res,) = scheduling.simulate(experiment(topo, wl, [{"type": "timeshift"}]))
    assert res.tables["task"].column("start_time")[0].as_py() == SUBMIT
    assert res.summary["counters"]["decisions_forecast_unavailable"] >= 1


def test_a_task_without_slack_runs_at_once(files) -> None:
    t = run(files, [100.0] * 48, deadline=SUBMIT + HOUR + 5 * MIN)  # 1 h x 1.1 > 65 min
    assert t["start_time"] == SUBMIT and t["deferred_ms"] == 0


def test_compat_opendc_can_miss_the_deadline_the_guard_protects(files) -> None:
    """OpenDC releases a held task only at a decision instant where now + duration >= deadline;
    with hourly carbon changes and no other events that is after the last safe start."""
    trace = files.trace([100.0] * 72, start=T0 - 24 * HOUR)
    topo = files.topology([{"hosts": [{"cores": 1}], "trace": trace}])
    deadline = SUBMIT + 2 * HOUR + 30 * MIN
    wl = files.workload([{"id": 0, "submit": SUBMIT, "fragments": [(HOUR, 1000)], "deferrable": True,
                          "deadline": deadline}])
    exp = experiment(topo, wl, [{"type": "timeshift", "memorize": True}])
    (ours,) = scheduling.simulate(exp)
    (compat,) = scheduling.simulate(exp, compat=True)
    assert not ours.tables["task"].column("deadline_missed")[0].as_py()
    c = compat.tables["task"].to_pylist()[0]
    # decisions at T0 + 2 h (now + 1 h < deadline: hold) and T0 + 3 h (release): finish T0 + 4 h
    assert c["start_time"] == T0 + 3 * HOUR and c["deadline_missed"]
    assert np.isclose(compat.summary["deadline_misses"], 1)


def test_a_task_kept_for_a_low_carbon_source_that_is_full_goes_elsewhere_at_its_guard(files) -> None:
    """Two power sources: A turns low at T0 + 2 h but its one host is busy until T0 + 10 h, B
    stays high and its host is free. The released task may wait for A only until its guard
    instant; it once waited for A past its deadline (deferral causing the miss)."""
    clean = files.trace([100.0] * 24 + [300.0, 300.0] + [50.0] * 46, start=T0 - 24 * HOUR, name="a.parquet")
    dirty = files.trace([400.0] * 72, start=T0 - 24 * HOUR, name="b.parquet")
    topo = files.topology([{"name": "A", "hosts": [{"cores": 1}], "trace": clean},
                           {"name": "B", "hosts": [{"cores": 1}], "trace": dirty}])
    deadline = T0 + 4 * HOUR
    wl = files.workload([
        {"id": 0, "submit": T0, "fragments": [(10 * HOUR, 2000)], "deferrable": False, "deadline": -1},
        {"id": 1, "submit": T0 + 1, "fragments": [(HOUR, 2000)], "deferrable": True, "deadline": deadline},
    ])
    policy = {"type": "timeshift", "forecast": False, "filters": [{"type": "Compute"}, {"type": "VCpu"}]}
    (res,) = scheduling.simulate(experiment(topo, wl, [policy]))
    first, task = res.tables["task"].to_pylist()
    assert first["host_name"] == "A/H-0"
    assert task["host_name"] == "B/H-0" and task["guard_released"]
    assert task["start_time"] == latest_release(deadline, HOUR, 0.1) == deadline - 66 * MIN
    assert not task["deadline_missed"] and res.summary["deadline_misses"] == 0

