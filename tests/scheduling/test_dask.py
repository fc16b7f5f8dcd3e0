"""Scenarios on Dask (a real LocalCluster) give exactly the local results, in scenario order."""

from __future__ import annotations

from distributed import LocalCluster
from sim_inputs import HOUR, MIN, T0, experiment

import scheduling


def test_dask_results_equal_local_results(files) -> None:
    trace = files.trace([100.0 + 50 * (h % 5) for h in range(72)], start=T0 - 24 * HOUR)
    topo = files.topology([{"hosts": [{"cores": 2, "count": 3}], "trace": trace}])
    wl = files.workload([{"id": i, "submit": T0 + i * 17 * MIN, "fragments": [(40 * MIN, 900), (20 * MIN, 1800)],
                          "deferrable": True, "deadline": T0 + i * 17 * MIN + 6 * HOUR} for i in range(40)])
    exp = experiment(topo, wl, [{"type": "prefab", "policyName": "Random"},
                                {"type": "timeshift", "memorize": False, "subsetSize": 2,
                                 "weighers": [{"type": "Ram"}], "taskStopper": {}}])
    exp["runs"] = 2
    local = scheduling.simulate(exp)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster:
        remote = scheduling.simulate(exp, engine="dask", scheduler=cluster.scheduler_address)
    assert [r.scenario.label for r in remote] == [r.scenario.label for r in local]
    for a, b in zip(local, remote, strict=True):
        assert a.summary == b.summary
        for name in a.tables:
            assert a.tables[name].equals(b.tables[name]), name
    # the runs differ by seed: the Random prefab's draws are not all the same
    assert local[0].tables["task"].column("host_name") != local[1].tables["task"].column("host_name")
