"""The golden energy fact from OpenDC's own test, worked by hand.

One 1-core 2000 MHz host, linear 100 W idle / 200 W max. Task A runs 10 min at 1000 MHz from
t = 0 (utilisation 0.5: 150 W); the host idles 10 min (100 W); task B runs 5 min at 2000 MHz
from 00:20 (utilisation 1: 200 W). Makespan 25 min and

    600 s x 150 W + 600 s x 100 W + 300 s x 200 W = 90,000 + 60,000 + 60,000 = 210,000 J
"""

from __future__ import annotations

from sim_inputs import DATA, MIN, experiment

import scheduling


def golden(files) -> dict:
    wl = files.workload([
        {"id": 0, "submit": 0, "fragments": [(10 * MIN, 1000)]},
        {"id": 1, "submit": 20 * MIN, "fragments": [(5 * MIN, 2000)]},
    ])
    return experiment(DATA / "topologies" / "single_1_2000.json", wl)


def test_golden_energy_and_makespan(files) -> None:
    (result,) = scheduling.simulate(golden(files))
    s = result.summary
    assert s["makespan_ms"] == 25 * MIN
    assert s["energy_j"] == 210_000.0
    task = result.tables["task"].to_pydict()
    # each task carries its own host power: A 600 s x 150 W, B 300 s x 200 W; the idle
    # 10 minutes (600 s x 100 W) belong to no task
    assert task["energy_j"] == [90_000.0, 60_000.0]
    assert s["unattributed_energy_j"] == 60_000.0
    assert task["start_time"] == [0, 20 * MIN] and task["finish_time"] == [10 * MIN, 25 * MIN]


def test_golden_host_table_integrates_to_the_same_energy(files) -> None:
    (result,) = scheduling.simulate(golden(files))
    host = result.tables["host"].to_pydict()
    assert sum(host["energy_j"]) == 210_000.0
    # one 1-hour export interval cut at the makespan: mean utilisation (300 + 300) / 1500 s
    assert host["cpu_utilization"] == [0.4]
    assert host["power_w"] == [210_000.0 / 1500]
