"""Hosts running several tasks: demand is the sum of the tasks' current fragments, capped at the
host's capacity; power follows the host's model from utilisation (every modelType, worked by
hand); each task carries its demand share of the host's power.

One 1-core 2000 MHz host, idle 100 W, max 200 W (span 100 W), for one hour from T0.
"""

from __future__ import annotations

import json
import math

import pytest
from sim_inputs import HOUR, MIN, T0, experiment

import scheduling

# u = 0.25 (500 of 2000 MHz) for one hour: P(u) by hand, from OpenDC's PowerModels.java
MODELS = [
    ({"modelType": "linear"}, 100 + 100 * 0.25),
    ({"modelType": "square"}, 100 + 100 * 0.0625),
    ({"modelType": "cubic"}, 100 + 100 * 0.015625),
    ({"modelType": "sqrt"}, 100 + 100 * 0.5),
    ({"modelType": "mse", "calibrationFactor": 2.0}, 100 + 100 * (0.5 - 0.0625)),
    ({"modelType": "asymptotic", "asymUtil": 0.5}, 100 + 50 * (1.25 - math.exp(-0.5))),
    # OpenDC's DVFS variant: u^3 = 0.015625 for u
    ({"modelType": "asymptotic", "asymUtil": 0.5, "dvfs": True},
     100 + 50 * (1.015625 - math.exp(-0.03125))),
    ({"modelType": "constant", "power": 321.0}, 321.0),
]


def one_host(files, model: dict):
    spec = {"clusters": [{"name": "C", "hosts": [{
        "name": "H", "cpu": {"coreCount": 1, "coreSpeed": 2000}, "memory": {"memorySize": 10_000},
        "cpuPowerModel": {"idlePower": 100.0, "maxPower": 200.0, **model}}]}]}
    path = files.root / "host.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.mark.parametrize("model, watts", MODELS,
                         ids=[m["modelType"] + ("-dvfs" if m.get("dvfs") else "") for m, _ in MODELS])
def test_every_power_model_at_a_quarter_load(files, model: dict, watts: float) -> None:
    wl = files.workload([{"id": 0, "submit": T0, "fragments": [(HOUR, 500)]}])
    (res,) = scheduling.simulate(experiment(one_host(files, model), wl))
    assert res.summary["energy_j"] == pytest.approx(watts * 3600, rel=1e-12)
    assert res.tables["task"].column("energy_j")[0].as_py() == pytest.approx(watts * 3600, rel=1e-12)


def test_concurrent_tasks_sum_their_demand_and_share_power_by_it(files) -> None:
    # VCpu allocationRatio 2 lets two 1-core tasks share the 1-core host. 0-30 min: A 500 +
    # B 1000 = 1500 MHz (u 0.75, 175 W; A a third, B two thirds); 30-60 min: A alone, 500 MHz
    # (u 0.25, 125 W)
    wl = files.workload([{"id": 0, "submit": T0, "fragments": [(HOUR, 500)]},
                         {"id": 1, "submit": T0, "fragments": [(30 * MIN, 1000)]}])
    policy = {"type": "filter", "filters": [{"type": "VCpu", "allocationRatio": 2.0}]}
    (res,) = scheduling.simulate(experiment(one_host(files, {"modelType": "linear"}), wl, [policy]))
    task = res.tables["task"].to_pydict()
    assert task["host_name"] == ["C/H-0", "C/H-0"] and task["start_time"] == [T0, T0]
    assert res.summary["energy_j"] == pytest.approx(175 * 1800 + 125 * 1800)
    assert task["energy_j"] == pytest.approx([175 * 1800 / 3 + 125 * 1800, 175 * 1800 * 2 / 3])
    assert res.summary["counters"]["demand_capped_ms"] == 0


def test_demand_above_capacity_is_capped_and_counted(files) -> None:
    # 1500 + 1500 MHz on a 2000 MHz host for 20 minutes: u is 1 (200 W), not 1.5, and the
    # capped time is counted; the tasks split the 200 W half and half
    wl = files.workload([{"id": 0, "submit": T0, "fragments": [(20 * MIN, 1500)]},
                         {"id": 1, "submit": T0, "fragments": [(20 * MIN, 1500)]}])
    policy = {"type": "filter", "filters": [{"type": "VCpu", "allocationRatio": 2.0}]}
    (res,) = scheduling.simulate(experiment(one_host(files, {"modelType": "linear"}), wl, [policy]))
    assert res.summary["energy_j"] == pytest.approx(200 * 1200)
    assert res.tables["task"].column("energy_j").to_pylist() == pytest.approx([100 * 1200] * 2)
    assert res.summary["counters"]["demand_capped_ms"] == 20 * MIN
    assert res.tables["host"].column("cpu_utilization").to_pylist() == pytest.approx([1.0])
