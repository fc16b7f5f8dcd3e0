"""OpenDC's own experiment files (scheduling/data/opendc/experiments), end to end.

Their paths are OpenDC's (relative to its source tree); each test rewrites them to the copies
in scheduling/data/opendc. Inputs OpenDC's tree has and the copy does not (its
single_50_big (a stand-in of 50 big hosts is written), small_gpu and workflow topologies, its 2021-2024 traces) are replaced by the
nearest copied file, said at each rewrite; the experiments that use a feature carbonspan
does not simulate are refused, naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_inputs import DATA

import scheduling
from scheduling.experiment import load_experiment
from scheduling.topology import SpecError

NL = DATA / "carbon_traces" / "2022-09-01_2022-11-30_NL.parquet"
BE = DATA / "carbon_traces" / "2022-09-01_2022-11-30_BE.parquet"


def topology(tmp: Path, name: str, trace: Path) -> str:
    """An OpenDC topology with its carbonTracePath pointed at the copied (cut) trace."""
    spec = json.loads((DATA / "topologies" / name).read_text())
    for c in spec["clusters"]:
        c["powerSource"]["carbonTracePath"] = str(trace)
    out = tmp / f"{Path(name).stem}-{trace.stem[-2:]}.json"
    out.write_text(json.dumps(spec))
    return str(out)


def experiment(name: str) -> dict:
    spec = json.loads((DATA / "experiments" / name).read_text())
    for w in spec["workloads"]:
        w["pathToFile"] = str(DATA / "workload_traces" / Path(w["pathToFile"]).name)
    return spec


def test_simple_experiment_runs_end_to_end(tmp_path) -> None:
    spec = experiment("simple_experiment.json")
    spec["topologies"] = [{"pathToFile": topology(tmp_path, "surfsara.json", NL)}]
    (res,) = scheduling.simulate(spec, out=tmp_path / "out")
    s = res.summary
    assert s["tasks"] == s["tasks_done"] == 6295 and s["deadline_misses"] == 0
    assert s["energy_without_intensity_j"] == 0.0  # the week lies inside the copied trace
    assert s["carbon_g"] > 0 and s["energy_j"] > s["unattributed_energy_j"] > 0
    host = res.tables["host"]
    assert host.num_rows == 279 * -(-s["makespan_ms"] // 3_600_000)  # 279 hosts x hourly rows
    assert abs(sum(host.column("energy_j").to_pylist()) - s["energy_j"]) < 1e-3 * s["energy_j"]
    assert abs(sum(res.tables["task"].column("energy_j").to_pylist())
               + s["unattributed_energy_j"] - s["energy_j"]) < 1e-6 * s["energy_j"]
    assert (tmp_path / "out" / res.scenario.label / "host.parquet").is_file()


def test_location_experiment_compares_grids(tmp_path) -> None:
    spec = experiment("location_experiment.json")
    # OpenDC's AT and AU topologies are not copied: the BE and NL ones are, with their traces
    spec["topologies"] = [{"pathToFile": topology(tmp_path, "surfsara_BE.json", BE)},
                          {"pathToFile": topology(tmp_path, "surfsara_NL.json", NL)}]
    be, nl = scheduling.simulate(spec)
    assert be.summary["energy_j"] == pytest.approx(nl.summary["energy_j"], rel=1e-12)  # same work
    assert be.summary["carbon_g"] < nl.summary["carbon_g"]  # Belgium's grid was cleaner


@pytest.mark.parametrize("name, message", [
    ("features_experiment.json", "maxNumFailures: recognised but not supported"),
    ("experiment_2.json", "'name' is only a label"),
])
def test_experiments_using_what_is_not_simulated_are_refused(name: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_experiment(experiment(name))


def test_workflow_dependencies_are_refused_not_ignored(tmp_path) -> None:
    spec = experiment("experiment_3.json")
    spec["topologies"] = [{"pathToFile": str(DATA / "topologies" / "single_1_2000.json")}]
    with pytest.raises(SpecError, match="parents: recognised but not supported"):
        scheduling.simulate(spec)


def big(tmp: Path, trace: Path) -> str:
    """A stand-in for OpenDC's single_50_big (not copied): 50 hosts of 32 cores x 3200 MHz and
    140,000,000 memory units, so the largest bitbrains-small task (32 cores, 130,457,600) fits."""
    host = {"name": "H", "count": 50, "cpu": {"coreCount": 32, "coreSpeed": 3200},
            "memory": {"memorySize": 140_000_000},
            "cpuPowerModel": {"modelType": "linear", "idlePower": 100.0, "maxPower": 300.0}}
    out = tmp / f"big-{trace.stem[-2:]}.json"
    out.write_text(json.dumps({"clusters": [{"name": "C01", "hosts": [host],
                                             "powerSource": {"carbonTracePath": str(trace)}}]}))
    return str(out)


def test_experiment_1_runs_end_to_end_with_its_realigned_submission(tmp_path) -> None:
    spec = experiment("experiment_1.json")
    spec["topologies"] = [{"pathToFile": big(tmp_path, NL)}, {"pathToFile": big(tmp_path, BE)}]
    nl, be = scheduling.simulate(spec)
    for res in (nl, be):
        s, task = res.summary, res.tables["task"]
        assert s["tasks"] == s["tasks_done"] == 50 and s["policy"] == "Mem"
        # submissionTime 2024-03-01T00:00:00 moves the first submission there
        assert min(task.column("submission_time").to_pylist()) == 1_709_251_200_000
        # 2024 lies outside the copied 2022 traces: missing signal, shown, not a made-up carbon
        assert s["carbon_g"] == 0.0 and s["energy_without_intensity_j"] == s["energy_j"] > 0
    assert nl.summary["energy_j"] == pytest.approx(be.summary["energy_j"], rel=1e-12)


def test_a_run_where_no_task_fits_has_an_empty_window_and_no_energy(tmp_path) -> None:
    # bitbrains-small on the SURF hosts (100,000 memory each): every task is unschedulable;
    # the window was once negative (-1.7e12 ms) and 1 ms of idle power was charged
    spec = experiment("experiment_1.json")
    spec["topologies"] = [{"pathToFile": topology(tmp_path, "surfsara_NL.json", NL)}]
    (res,) = scheduling.simulate(spec)
    s = res.summary
    assert s["counters"]["tasks_unschedulable"] == 50 and s["tasks_done"] == 0
    assert s["window_ms"] == 0 and s["energy_j"] == 0.0 and s["makespan_ms"] == 0
