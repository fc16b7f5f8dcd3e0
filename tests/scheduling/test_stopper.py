"""The task stopper pauses running deferrable tasks while the intensity is high, keeps their
progress, and resumes them when it is low or when the deadline guard says so.

One 1-core host, hourly trace from T0 (perfect forecast, so the arithmetic is the trace's):

    hour   0   1   2    3    4    5   6 ...
    g/kWh  50  50  500  200  200  50  200 ...

A 3-hour deferrable task submitted at T0 starts at once (50 is low). At T0 + 2 h, 500 is above
the 0.6 quantile of the next day (200): paused after 2 h of work. At T0 + 3 h and + 4 h, 200 is
not below the 0.2 quantile (200): held. At T0 + 5 h, 50 is low: resumed, 1 h left, done at 6 h.
"""

from __future__ import annotations

from sim_inputs import HOUR, T0, experiment

import scheduling

VALUES = [50.0, 50.0, 500.0, 200.0, 200.0, 50.0] + [200.0] * 42


def run(files, deadline: int, stopper: bool = True):
    trace = files.trace(VALUES)
    topo = files.topology([{"hosts": [{"cores": 1}], "trace": trace}])
    wl = files.workload([{"id": 0, "submit": T0, "fragments": [(3 * HOUR, 2000)], "deferrable": True,
                          "deadline": deadline}])
    policy = {"type": "timeshift", "forecastProvider": "perfect"}
    if stopper:
        policy["taskStopper"] = {}
    (res,) = scheduling.simulate(experiment(topo, wl, [policy]))
    return res.tables["task"].to_pylist()[0], res.summary


def test_pause_while_high_and_resume_when_low(files) -> None:
    task, summary = run(files, T0 + 20 * HOUR)
    assert task["start_time"] == T0 and task["finish_time"] == T0 + 6 * HOUR
    assert task["paused_ms"] == 3 * HOUR and summary["counters"]["pauses"] == 1
    # 2 h at 50 + 1 h at 50, 200 W: 0.6 kWh x 50 g = 30 g; without the stopper the third hour
    # runs at 500 g/kWh: 0.4 x 50 + 0.2 x 500 = 120 g
    assert abs(task["carbon_g"] - 30.0) < 1e-9
    plain, _ = run(files, T0 + 20 * HOUR, stopper=False)
    assert abs(plain["carbon_g"] - 120.0) < 1e-9


def test_the_guard_limits_pausing_to_what_the_deadline_allows(files) -> None:
    # deadline T0 + 4 h: at T0 + 2 h the 1 h left x 1.1 must start by T0 + 2 h 54 min: it may
    # pause, and the guard resumes it then, so it ends by 3 h 54 min, before the deadline
    task, summary = run(files, T0 + 4 * HOUR)
    assert task["finish_time"] <= T0 + 4 * HOUR and not task["deadline_missed"]
    assert task["guard_released"]
    # regression: the guard once counted a running task's whole runtime as left, so it never
    # paused; here 1 h is left at T0 + 2 h and a pause is allowed (checked above). With a
    # deadline of T0 + 3 h 5 min the last safe start is 3 h 5 min - 66 min = 1 h 59 min, before
    # the high hour: never paused
    task, summary = run(files, T0 + 3 * HOUR + 5 * 60_000)
    assert summary["counters"]["pauses"] == 0 and task["finish_time"] == T0 + 3 * HOUR


def test_compat_pauses_every_task_and_requeues_the_ones_it_may_not_hold(files) -> None:
    trace = files.trace(VALUES)
    topo = files.topology([{"hosts": [{"cores": 1}], "trace": trace}])
    wl = files.workload([{"id": 0, "submit": T0, "fragments": [(3 * HOUR, 2000)], "deferrable": False,
                          "deadline": -1}])
    exp = experiment(topo, wl, [{"type": "timeshift", "forecastProvider": "perfect", "taskStopper": {}}])
    (ours,) = scheduling.simulate(exp)
    (compat,) = scheduling.simulate(exp, compat=True)
    assert ours.summary["counters"]["pauses"] == 0
    # OpenDC's stopper snapshots every task at a high hour; a task that is not deferrable is
    # rescheduled at once, so it loses no time
    assert compat.summary["counters"]["pauses"] >= 1
    assert compat.tables["task"].column("finish_time")[0].as_py() == T0 + 3 * HOUR
