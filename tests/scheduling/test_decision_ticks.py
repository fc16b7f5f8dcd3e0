"""Decision ticks (``decisionIntervalMinutes``) re-decide the hold state in the default mode.

A held task is re-evaluated at each tick with the carbon-change rule, from the forecast the
provider issues at the tick instant; the deadline guard is unchanged; ``--compat opendc`` has no
ticks (OpenDC decides at arrivals, completions and carbon changes only).

Hand-worked setting: one 1-core host; a carbon trace of **4-hour rows**, 100 g/kWh throughout
(carbon changes at T0 + 4 h, 8 h, ...); a recorded forecast **re-issued every hour** (T0 + k h),
each issue predicting one value for its whole horizon. One deferrable 1-hour task is submitted
at SUBMIT = T0 + 1 h 05; its deadline is SUBMIT + 10 h, so with the 0.1 margin its guard instant
is the deadline - 66 min = T0 + 9 h 59. Under 2 hours left, the rule is the short one: low means
100 < the 0.2 quantile of the forecast, which is the issue's one value.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from distributed import LocalCluster
from sim_inputs import HOUR, MIN, T0, experiment

import scheduling
from scheduling.carbon import _iso
from scheduling.shift import latest_release

SUBMIT = T0 + HOUR + 5 * MIN
DEADLINE = SUBMIT + 10 * HOUR
GUARD = latest_release(DEADLINE, HOUR, 0.1)


def recorded(path: Path, high_issues: set[int], n_issues: int = 14) -> Path:
    """Issue k at T0 + k h predicts 200 (above the current 100: now is low) if k is in
    ``high_issues``, else 50 (now is not low: hold), for each hour of the 30 h after it."""
    lines = ["issued_at,timestamp,carbon_intensity"]
    for k in range(n_issues):
        issued = T0 + k * HOUR
        value = 200.0 if k in high_issues else 50.0
        lines += [f"{_iso(issued)},{_iso(issued + j * HOUR)},{value}" for j in range(31)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(files, high_issues: set[int], interval: float, compat: bool = False) -> tuple[dict, dict]:
    trace = files.trace([100.0] * 12, step=4 * HOUR, start=T0)
    topo = files.topology([{"hosts": [{"cores": 1}], "trace": trace}])
    wl = files.workload([{"id": 0, "submit": SUBMIT, "fragments": [(HOUR, 1000)], "deferrable": True,
                          "deadline": DEADLINE}])
    rec = recorded(files.root / "forecasts.csv", high_issues)
    policy = {"type": "timeshift", "memorize": True, "decisionIntervalMinutes": interval,
              "forecastProvider": {"type": "recorded", "pathToFile": str(rec)}}
    (res,) = scheduling.simulate(experiment(topo, wl, [policy]), compat=compat)
    return res.tables["task"].to_pylist()[0], res.summary["counters"]


def test_the_hand_worked_instants() -> None:
    assert GUARD == T0 + 9 * HOUR + 59 * MIN
    assert SUBMIT + 8 * 15 * MIN == T0 + 3 * HOUR + 5 * MIN  # the 8th 15-minute tick


@pytest.mark.parametrize("interval, start", [
    (15, T0 + 3 * HOUR + 5 * MIN),  # ticks 2:50 (issue 2: hold), 3:05 (issue 3: low)
    (60, T0 + 3 * HOUR + 5 * MIN),  # ticks 2:05, 3:05
    (120, T0 + 3 * HOUR + 5 * MIN),  # ticks 1:05, 3:05
])
def test_a_held_task_is_released_at_the_first_tick_where_the_rule_says_low(files, interval, start) -> None:
    """Only the issue of T0 + 3 h says low. No carbon change reads it (the rows change at 4 h and
    8 h, where issues 4 and 8 say hold): only a tick between 3 h and 4 h can."""
    task, counters = run(files, {3}, interval)
    assert task["start_time"] == start and not task["guard_released"]
    assert task["deferred_ms"] == start - SUBMIT
    assert counters["tick_releases"] == 1 and counters["guard_releases"] == 0
    assert not task["deadline_missed"]


@pytest.mark.parametrize("interval", [90, 10_000])
def test_without_a_tick_in_the_low_hour_the_task_waits_for_its_guard(files, interval) -> None:
    """90 min: ticks 1:05, 2:35, 4:05 (issue 4: hold); 10,000 min, longer than the 24 h horizon:
    the only tick is at the submission. The carbon changes say hold, so the guard releases it."""
    task, counters = run(files, {3}, interval)
    assert task["start_time"] == GUARD and task["guard_released"]
    assert counters["tick_releases"] == 0 and counters["guard_releases"] == 1
    assert task["finish_time"] <= DEADLINE and not task["deadline_missed"]


def test_a_tick_never_holds_a_task_past_its_guard_instant(files) -> None:
    """Issue 10 says low, but its first tick (10:05) is after the guard instant (9:59): the
    guard releases the task at 9:59, between the ticks 9:50 and 10:05, and it meets its deadline."""
    task, counters = run(files, {10}, 15)
    assert task["start_time"] == GUARD and task["guard_released"]
    assert counters["tick_releases"] == 0
    assert task["finish_time"] == GUARD + HOUR <= DEADLINE and not task["deadline_missed"]


def test_compat_opendc_has_no_decision_ticks(files) -> None:
    """OpenDC decides at arrivals, completions and carbon changes only (docs/simulation.md)."""
    _, ours = run(files, {3}, 15)
    _, compat = run(files, {3}, 15, compat=True)
    assert ours["tick_decisions"] > 0
    assert compat["tick_decisions"] == 0 and compat["tick_releases"] == 0


def noisy_experiment(files) -> dict:
    """A 4-hour-row trace and the noisy provider (its error is re-drawn at each issue instant)."""
    trace = files.trace([100.0 + 60 * (h % 3) for h in range(24)], step=4 * HOUR, start=T0 - 24 * HOUR)
    topo = files.topology([{"hosts": [{"cores": 2, "count": 2}], "trace": trace}])
    wl = files.workload([{"id": i, "submit": T0 + i * 23 * MIN, "fragments": [(50 * MIN, 1000)],
                          "deferrable": True, "deadline": T0 + i * 23 * MIN + 12 * HOUR} for i in range(30)])
    return experiment(topo, wl, [{"type": "timeshift", "forecastProvider": {"type": "noisy", "mape": 0.3},
                                  "decisionIntervalMinutes": 10}])


def test_tick_decisions_are_deterministic_and_equal_on_dask(files) -> None:
    exp = noisy_experiment(files)
    first, again = scheduling.simulate(exp)[0], scheduling.simulate(exp)[0]
    assert first.summary["counters"]["tick_releases"] > 0  # the ticks did release tasks
    assert first.summary == again.summary
    for name in first.tables:
        assert first.tables[name].equals(again.tables[name]), name
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster:
        (remote,) = scheduling.simulate(exp, engine="dask", scheduler=cluster.scheduler_address)
    assert remote.summary == first.summary
    for name in first.tables:
        assert remote.tables[name].equals(first.tables[name]), name
