"""OpenDC's own experiment files (scheduling/data/opendc/experiments), end to end.

Their paths are OpenDC's (relative to its source tree); each test rewrites them to the copies
in scheduling/data/opendc (topologies by file name, workloads by folder name, carbon traces to
the copied 2022 cuts). Inputs OpenDC's tree has and the copy does not (the AT and AU SURF
topologies, its full-year 2022 traces) are replaced by the nearest copied file, said at each
rewrite. The features experiment uses features carbonspan does not simulate and is refused,
naming the first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_inputs import DATA, HOUR

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


def experiment(name: str, tmp: Path | None = None) -> dict:
    """The experiment with its workload paths rewritten to the copies (and, given ``tmp``, its
    topologies: OpenDC's file of that name, a carbonTracePath pointed at the copied cut)."""
    spec = json.loads((DATA / "experiments" / name).read_text())
    for w in spec["workloads"]:
        w["pathToFile"] = str(DATA / "workload_traces" / Path(w["pathToFile"]).name)
    if tmp is not None:
        for t in spec["topologies"]:
            rel = Path(t["pathToFile"]).relative_to("src/test/resources/topologies")
            topo = json.loads((DATA / "topologies" / rel).read_text())
            for c in topo["clusters"]:
                if c.get("powerSource", {}).get("carbonTracePath"):
                    c["powerSource"]["carbonTracePath"] = str(BE if "_BE" in c["powerSource"]["carbonTracePath"] else NL)
            out = tmp / rel.name
            out.write_text(json.dumps(topo))
            t["pathToFile"] = str(out)
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


def test_features_experiment_is_refused_at_its_first_unsupported_feature() -> None:
    # it also needs failure models, checkpoints, batteries, the Perfect scaling policy and the
    # compute export config (docs/simulation.md, "Inputs"), and topologies the copy lacks
    with pytest.raises(SpecError, match="maxNumFailures: recognised but not supported"):
        load_experiment(experiment("features_experiment.json"))


def test_experiment_2_runs_as_opendc_runs_it_with_compat_and_is_refused_without(tmp_path) -> None:
    """experiment_2.json gives its prefab a ``name`` and no ``policyName``: OpenDC runs Mem
    (AllocationPolicySpec.kt). The default refuses it, naming the fix; ``--compat opendc`` runs
    Mem, as OpenDC does, and notes it. OpenDC's small_gpu topology (copied): 4 hosts of 4 cores
    x 2000 MHz (linear 100/200 W) and 3 GPUs of 2 cores x 2000 MHz (linear 100/200 W each);
    small_gpu: 25 tasks of 4 cores, 1,209,600 ms each at 50 CPU MHz and 1500 GPU MHz.

    One task per host (4 cores each), so 7 waves of 1,209.6 s (4 x 6 + 1). A busy host draws
    CPU 100 + 100 x 50 / 8000 = 100.625 W and GPUs 3 x (100 + 100 x 1500 / 12000) = 337.5 W;
    an idle one 100 + 300 = 400 W. Busy 25 x 1209.6 = 30,240 host-s, idle (the last wave)
    3 x 1209.6 = 3,628.8 host-s: 30,240 x 438.125 + 3,628.8 x 400 = 14,700,420 J, of which the
    GPUs 30,240 x 337.5 + 3,628.8 x 300 = 11,294,640 J. No power source: no carbon, all of it
    energy without an intensity."""
    spec = experiment("experiment_2.json", tmp_path)
    with pytest.raises(SpecError, match=r"'name' is only a label.*--compat opendc"):
        load_experiment(spec)
    (res,) = scheduling.simulate(spec, compat=True)
    s = res.summary
    assert s["policy"] == "Mem" and "runs Mem, as OpenDC does" in s["notes"][0]
    assert s["tasks"] == s["tasks_done"] == 25
    assert s["makespan_ms"] == 7 * 1_209_600
    assert s["energy_j"] == pytest.approx(14_700_420.0, rel=1e-9)  # 504,000 fragment steps summed
    assert s["gpu_energy_j"] == pytest.approx(11_294_640.0, rel=1e-9)
    assert s["carbon_g"] == 0.0 and s["energy_without_intensity_j"] == pytest.approx(s["energy_j"])
    # with the fix the refusal names: ProvisionedCpuGpuCores checks free GPU cores, and each
    # task asks 50 of a host's 6 (VGpuFilter.kt does the same), so none is schedulable
    spec["allocationPolicies"] = [{"type": "prefab", "policyName": "ProvisionedCpuGpuCores"}]
    (fixed,) = scheduling.simulate(spec)
    assert fixed.summary["counters"]["tasks_unschedulable"] == 25 and fixed.summary["energy_j"] == 0.0


def test_experiment_3_runs_its_workflow_end_to_end(tmp_path) -> None:
    """experiment_3.json: OpenDC's workflow_example (0 -> (1, 2) -> 3, each 1 h at 2500 MHz on
    one core) on workflow_topology.json (3 hosts of 12 cores x 3300 MHz, no power model: OpenDC's
    default, linear 200/400 W). 1 and 2 run together after 0, 3 after both: makespan 3 h.
    Energy: 3 hosts x 3 h at 200 W idle = 6,480,000 J, plus 200 W x 2500 / 39,600 for each of
    the 4 task-hours: 4 x 3600 x 200 x 2500 / 39,600 = 181,818.18 J."""
    spec = experiment("experiment_3.json", tmp_path)
    (res,) = scheduling.simulate(spec, out=tmp_path / "out")
    s, task = res.summary, res.tables["task"].to_pydict()
    t0 = min(task["submission_time"])
    assert task["start_time"] == [t0, t0 + HOUR, t0 + HOUR, t0 + 2 * HOUR]
    assert s["makespan_ms"] == 3 * HOUR and s["tasks_done"] == 4
    assert s["energy_j"] == pytest.approx(6_480_000 + 4 * 3600 * 200 * 2500 / 39_600, rel=1e-12)
    assert s["counters"]["default_cpu_power_models"] == 3
    assert (tmp_path / "out" / res.scenario.label / "task.parquet").is_file()


def test_experiment_1_runs_end_to_end_with_its_realigned_submission(tmp_path) -> None:
    # OpenDC's single_50_big (one host of 64 cores x 2000 MHz, no power source) and its _BE
    # variant (the BE trace: the copied cut stands in for OpenDC's full-year file)
    spec = experiment("experiment_1.json", tmp_path)
    plain, be = scheduling.simulate(spec)
    for res in (plain, be):
        s, task = res.summary, res.tables["task"]
        assert s["tasks"] == s["tasks_done"] == 50 and s["policy"] == "Mem"
        # submissionTime 2024-03-01T00:00:00 moves the first submission there
        assert min(task.column("submission_time").to_pylist()) == 1_709_251_200_000
        # 2024 lies outside the copied 2022 traces: missing signal, shown, not a made-up carbon
        assert s["carbon_g"] == 0.0 and s["energy_without_intensity_j"] == s["energy_j"] > 0
    assert plain.summary["energy_j"] == pytest.approx(be.summary["energy_j"], rel=1e-12)


def test_a_run_where_no_task_fits_has_an_empty_window_and_no_energy(tmp_path) -> None:
    # bitbrains-small on the SURF hosts (100,000 memory each): every task is unschedulable;
    # the window was once negative (-1.7e12 ms) and 1 ms of idle power was charged
    spec = experiment("experiment_1.json")
    spec["topologies"] = [{"pathToFile": topology(tmp_path, "surfsara_NL.json", NL)}]
    (res,) = scheduling.simulate(spec)
    s = res.summary
    assert s["counters"]["tasks_unschedulable"] == 50 and s["tasks_done"] == 0
    assert s["window_ms"] == 0 and s["energy_j"] == 0.0 and s["makespan_ms"] == 0
