"""Workflow dependencies (OpenDC's ``parents`` / ``children`` task columns): a task arrives at
the later of its submission and its last parent's completion; checked at load (unknown ids,
cycles, children that are not the inverse of parents); with time-shifting, holding a parent
never makes a child miss its deadline."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sim_inputs import DATA, HOUR, MIN, T0, experiment, write_trace

import scheduling
from scheduling.topology import SpecError
from scheduling.workload import read_workload


def flow(folder: Path, tasks: list[dict], children: bool = True) -> Path:
    """tasks: {id, submit, minutes, mhz, parents: [...], deadline?}; children derived unless given."""
    folder.mkdir(parents=True, exist_ok=True)
    kids = {t["id"]: [c["id"] for c in tasks if t["id"] in c.get("parents", [])] for t in tasks}
    cols = {
        "id": pa.array([t["id"] for t in tasks], pa.int32()),
        "submission_time": pa.array([t["submit"] for t in tasks], pa.int64()),
        "duration": pa.array([t["minutes"] * MIN for t in tasks], pa.int64()),
        "cpu_count": pa.array([1] * len(tasks), pa.int32()),
        "cpu_capacity": pa.array([float(t["mhz"]) for t in tasks], pa.float64()),
        "mem_capacity": pa.array([1000] * len(tasks), pa.int64()),
        "parents": pa.array([t.get("parents", []) for t in tasks], pa.list_(pa.int32())),
    }
    if children:
        cols["children"] = pa.array([t.get("children", kids[t["id"]]) for t in tasks], pa.list_(pa.int32()))
    if any("deadline" in t for t in tasks):
        cols["deferrable"] = pa.array([t.get("deadline", -1) >= 0 for t in tasks], pa.bool_())
        cols["deadline"] = pa.array([t.get("deadline", -1) for t in tasks], pa.int64())
    pq.write_table(pa.table(cols), folder / "tasks.parquet")
    pq.write_table(pa.table({"id": pa.array([t["id"] for t in tasks], pa.int32()),
                             "duration": pa.array([t["minutes"] * MIN for t in tasks], pa.int64()),
                             "cpu_usage": pa.array([float(t["mhz"]) for t in tasks], pa.float64())}),
                   folder / "fragments.parquet")
    return folder


DIAMOND = [{"id": 0, "submit": T0, "minutes": 10, "mhz": 1000},
           {"id": 1, "submit": T0, "minutes": 10, "mhz": 1000, "parents": [0]},
           {"id": 2, "submit": T0, "minutes": 10, "mhz": 1000, "parents": [0]},
           {"id": 3, "submit": T0, "minutes": 10, "mhz": 1000, "parents": [1, 2]}]


def test_opendc_diamond_workflow_by_hand(tmp_path) -> None:
    """OpenDC's WorkflowTest.testWorkflow1 on single_2_2000.json (copied): one host of 2 cores x
    2000 MHz, linear 100/200 W; 0 -> (1, 2) -> 3, each 10 min at 1000 MHz. 1 and 2 run together,
    so the makespan is 30 min and the energy 600 x 125 + 600 x 150 + 600 x 125 = 255,000 J
    (u = 1000 / 4000, 2000 / 4000, 1000 / 4000)."""
    wl = flow(tmp_path / "wl", DIAMOND)
    (res,) = scheduling.simulate(experiment(DATA / "topologies" / "single_2_2000.json", wl))
    task = res.tables["task"].to_pydict()
    assert task["start_time"] == [T0, T0 + 10 * MIN, T0 + 10 * MIN, T0 + 20 * MIN]
    assert res.summary["makespan_ms"] == 30 * MIN
    assert res.summary["energy_j"] == pytest.approx(600 * 125 + 600 * 150 + 600 * 125, rel=1e-12)
    # the wait for the parents is delay: 10, 10 and 20 minutes
    assert task["delay_ms"] == [0, 10 * MIN, 10 * MIN, 20 * MIN]


def test_a_child_submitted_after_its_parent_finished_runs_at_its_submission(tmp_path) -> None:
    # OpenDC's ComputeService blocks a task whose parents are not all done at its submission
    # and only unblocks it from a completion after that, so this child would wait forever there
    wl = flow(tmp_path / "wl", [{"id": 0, "submit": T0, "minutes": 10, "mhz": 1000},
                                {"id": 1, "submit": T0 + HOUR, "minutes": 10, "mhz": 1000, "parents": [0]}])
    (res,) = scheduling.simulate(experiment(DATA / "topologies" / "single_2_2000.json", wl))
    assert res.tables["task"].column("start_time").to_pylist() == [T0, T0 + HOUR]


def test_a_child_of_an_unschedulable_parent_is_blocked_and_counted(tmp_path) -> None:
    # task 0 asks more memory than the host has: unschedulable; 1 waits on it, 2 on 1
    tasks = [{"id": 0, "submit": T0, "minutes": 10, "mhz": 1000},
             {"id": 1, "submit": T0, "minutes": 10, "mhz": 1000, "parents": [0]},
             {"id": 2, "submit": T0, "minutes": 10, "mhz": 1000, "parents": [1]},
             {"id": 3, "submit": T0, "minutes": 10, "mhz": 1000}]
    wl = flow(tmp_path / "wl", tasks)
    table = pq.read_table(wl / "tasks.parquet")
    mem = pa.array([10**15, 1000, 1000, 1000], pa.int64())
    pq.write_table(table.set_column(table.schema.get_field_index("mem_capacity"), "mem_capacity", mem),
                   wl / "tasks.parquet")
    (res,) = scheduling.simulate(experiment(DATA / "topologies" / "single_2_2000.json", wl))
    assert res.tables["task"].column("status").to_pylist() == ["unschedulable", "blocked", "blocked", "done"]
    c = res.summary["counters"]
    assert c["tasks_unschedulable"] == 1 and c["tasks_blocked"] == 2 and c["tasks_never_finished"] == 0


@pytest.mark.parametrize("tasks, message", [
    ([{"id": 0, "submit": T0, "minutes": 1, "mhz": 1, "parents": [7]}], "names parent 7"),
    ([{"id": 0, "submit": T0, "minutes": 1, "mhz": 1, "parents": [1]},
      {"id": 1, "submit": T0, "minutes": 1, "mhz": 1, "parents": [0]}], "cycle"),
    ([{"id": 0, "submit": T0, "minutes": 1, "mhz": 1, "parents": [0]}], "its own parent"),
    ([{"id": 0, "submit": T0, "minutes": 1, "mhz": 1, "children": []},
      {"id": 1, "submit": T0, "minutes": 1, "mhz": 1, "parents": [0]}], "disagree"),
], ids=["unknown-parent", "cycle", "self", "children-not-inverse"])
def test_inconsistent_dependencies_are_refused(tmp_path, tasks: list[dict], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        read_workload(flow(tmp_path / "wl", tasks))


def test_sampling_a_workflow_is_refused(tmp_path) -> None:
    wl = flow(tmp_path / "wl", DIAMOND)
    with pytest.raises(SpecError, match="sampleFraction 0.5 with workflow dependencies"):
        scheduling.simulate(experiment(DATA / "topologies" / "single_2_2000.json", wl, sampleFraction=0.5))


def test_holding_a_parent_never_makes_its_child_miss(tmp_path) -> None:
    """Constant intensity: never low, so a deferrable task is held until its guard instant.
    Parent P (1 h, due at +10 h) and child C (1 h, due at +4 h), both submitted at T0.
    Alone, P's guard is 10 h - 1.1 h = +8.9 h and C could start only at +9.9 h: a miss caused by
    deferral. With the child's bound, P's effective deadline is C's latest release,
    4 h - 1.1 h = +2.9 h, so P is released at 2.9 - 1.1 = +1.8 h, ends at +2.8 h, and C (held
    to its own guard, +2.9 h) ends at +3.9 h, before +4 h."""
    trace = write_trace(tmp_path / "t.parquet", T0 - 48 * HOUR, HOUR, [100.0] * 80)
    spec = json.loads((DATA / "topologies" / "single_2_2000.json").read_text())
    spec["clusters"][0]["powerSource"] = {"carbonTracePath": str(trace)}
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(spec))
    wl = flow(tmp_path / "wl", [
        {"id": 0, "submit": T0, "minutes": 60, "mhz": 1000, "deadline": T0 + 10 * HOUR},
        {"id": 1, "submit": T0, "minutes": 60, "mhz": 1000, "deadline": T0 + 4 * HOUR, "parents": [0]}])
    (res,) = scheduling.simulate(experiment(topo, wl, [{"type": "timeshift"}]))
    task = res.tables["task"].to_pydict()
    assert task["start_time"] == [T0 + 108 * MIN, T0 + 174 * MIN]
    assert task["finish_time"] == [T0 + 168 * MIN, T0 + 234 * MIN]
    assert task["guard_released"] == [True, True] and res.summary["deadline_misses"] == 0
