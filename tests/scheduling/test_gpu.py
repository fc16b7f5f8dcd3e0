"""GPU power, modelled like CPU power: GPU demand (the fragments' ``gpu_usage``) -> utilisation
of the host's GPUs -> the GPU power model -> energy and carbon; and OpenDC's default power
model where a host gives none. Every figure is worked by hand below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sim_inputs import DATA, MIN, T0, experiment, write_trace

import scheduling
from scheduling.topology import SpecError, load_topology


def gpu_workload(folder: Path, tasks: list[dict]) -> Path:
    """tasks: {id, submit, fragments: [(duration_ms, cpu_mhz, gpu_mhz)], cpu_count?, gpu_count?}"""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "id": pa.array([t["id"] for t in tasks], pa.int32()),
        "submission_time": pa.array([t["submit"] for t in tasks], pa.int64()),
        "duration": pa.array([sum(f[0] for f in t["fragments"]) for t in tasks], pa.int64()),
        "cpu_count": pa.array([t.get("cpu_count", 1) for t in tasks], pa.int32()),
        "cpu_capacity": pa.array([max(f[1] for f in t["fragments"]) for t in tasks], pa.float64()),
        "mem_capacity": pa.array([1000] * len(tasks), pa.int64()),
        "gpu_count": pa.array([t.get("gpu_count", 1) for t in tasks], pa.int32()),
        "gpu_capacity": pa.array([max(f[2] for f in t["fragments"]) for t in tasks], pa.float64()),
    }), folder / "tasks.parquet")
    rows = [(t["id"], *f) for t in tasks for f in t["fragments"]]
    pq.write_table(pa.table({
        "id": pa.array([r[0] for r in rows], pa.int32()),
        "duration": pa.array([r[1] for r in rows], pa.int64()),
        "cpu_usage": pa.array([float(r[2]) for r in rows], pa.float64()),
        "gpu_usage": pa.array([float(r[3]) for r in rows], pa.float64()),
    }), folder / "fragments.parquet")
    return folder


def gpu_host(path: Path, trace: Path | None = None, gpu_model: bool = True, cpu_model: bool = True) -> Path:
    """One host: 1 CPU core at 2000 MHz, linear 100/200 W; 2 GPUs of 1 core at 2000 MHz, each
    linear 100/200 W (GPU capacity 2 x 1 x 2000 = 4000 MHz)."""
    host: dict = {"name": "H", "cpu": {"coreCount": 1, "coreSpeed": 2000}, "memory": {"memorySize": 10_000},
                  "gpu": {"count": 2, "coreCount": 1, "coreSpeed": 2000}}
    if cpu_model:
        host["cpuPowerModel"] = {"modelType": "linear", "idlePower": 100.0, "maxPower": 200.0}
    if gpu_model:
        host["gpuPowerModel"] = {"modelType": "linear", "idlePower": 100.0, "maxPower": 200.0}
    cluster: dict = {"name": "C", "hosts": [host]}
    if trace is not None:
        cluster["powerSource"] = {"carbonTracePath": str(trace)}
    path.write_text(json.dumps({"clusters": [cluster]}))
    return path


def test_gpu_power_energy_and_carbon_by_hand(tmp_path) -> None:
    """The golden CPU fact (A 10 min at 1000 MHz from 0, B 5 min at 2000 MHz from 00:20) with
    two GPUs beside the CPU; A also asks 2000 GPU MHz (u_gpu = 2000 / 4000 = 0.5).

    | minutes | CPU W | GPU W (2 x P(u)) | host W | joules |
    |---|---|---|---|---|
    | 0-10 A  | 150   | 2 x 150 = 300    | 450    | 270,000 |
    | 10-20   | 100   | 2 x 100 = 200    | 300    | 180,000 |
    | 20-25 B | 200   | 2 x 100 = 200    | 400    | 120,000 |
    total 570,000 J, GPUs 180,000 + 120,000 + 60,000 = 360,000 J. A carries its CPU and GPU
    power (450 W x 600 s = 270,000 J); B its CPU power only (200 W x 300 s = 60,000 J: it asks no
    GPU, so the idle GPUs' 200 W during B belong to no task); unattributed 180,000 + 60,000.

    Carbon, 100 g/kWh to 00:15 then 300: 0-10 270,000 J x 100; 10-15 90,000 J x 100; 15-20
    90,000 J x 300; 20-25 120,000 J x 300 -> (27e6 + 9e6 + 27e6 + 36e6) / 3.6e6 = 27.5 g;
    A 270,000 x 100 / 3.6e6 = 7.5 g, B 60,000 x 300 / 3.6e6 = 5 g."""
    trace = write_trace(tmp_path / "t.parquet", T0, 15 * MIN, [100.0, 300.0])
    wl = gpu_workload(tmp_path / "wl", [
        {"id": 0, "submit": T0, "fragments": [(10 * MIN, 1000, 2000)]},
        {"id": 1, "submit": T0 + 20 * MIN, "fragments": [(5 * MIN, 2000, 0)], "gpu_count": 0},
    ])
    (res,) = scheduling.simulate(experiment(gpu_host(tmp_path / "h.json", trace), wl))
    s, task = res.summary, res.tables["task"].to_pydict()
    assert s["makespan_ms"] == 25 * MIN
    assert s["energy_j"] == pytest.approx(570_000.0, rel=1e-12)
    assert s["gpu_energy_j"] == pytest.approx(360_000.0, rel=1e-12)
    assert task["energy_j"] == pytest.approx([270_000.0, 60_000.0], rel=1e-12)
    assert s["unattributed_energy_j"] == pytest.approx(240_000.0, rel=1e-12)
    assert s["carbon_g"] == pytest.approx(27.5, rel=1e-12)
    assert task["carbon_g"] == pytest.approx([7.5, 5.0], rel=1e-12)
    host = res.tables["host"].to_pydict()  # one 1-hour interval cut at 25 min
    assert host["gpu_utilization"] == pytest.approx([0.5 * 600 / 1500])
    assert host["gpu_energy_j"] == pytest.approx([360_000.0])
    assert host["cpu_utilization"] == pytest.approx([0.4])  # the CPU fact is unchanged
    assert s["counters"]["gpu_demand_capped_ms"] == 0


def test_opendc_multi_gpu_host_two_tasks_by_hand(tmp_path) -> None:
    """OpenDC's GpuTest.testMultiGpuConcation on its multi_gpu_host.json (copied): 4 CPU cores x
    2000 MHz and 2 GPUs of 1 core x 2000 MHz, linear 100/200 W each; two tasks of 10 min at
    1000 CPU MHz and 2000 GPU MHz. OpenDC reports host CPU demand 2000 and each GPU at 2000: here
    CPU u = 2000 / 8000 = 0.25 (125 W) and the GPUs u = 4000 / 4000 = 1 (2 x 200 W): 525 W x
    600 s = 315,000 J, each task half of it."""
    wl = gpu_workload(tmp_path / "wl", [
        {"id": i, "submit": T0, "fragments": [(10 * MIN, 1000, 2000)]} for i in (0, 1)])
    (res,) = scheduling.simulate(experiment(DATA / "topologies" / "Gpus" / "multi_gpu_host.json", wl))
    s = res.summary
    assert res.tables["task"].column("host_name").to_pylist() == ["C01/DualGpuHost-0"] * 2
    assert s["makespan_ms"] == 10 * MIN
    assert s["energy_j"] == pytest.approx(315_000.0, rel=1e-12)
    assert s["gpu_energy_j"] == pytest.approx(240_000.0, rel=1e-12)
    assert res.tables["task"].column("energy_j").to_pylist() == pytest.approx([157_500.0] * 2, rel=1e-12)


def test_gpu_demand_above_capacity_is_capped_and_counted(tmp_path) -> None:
    # 3000 + 3000 GPU MHz on 4000 for 10 minutes: u_gpu 1 (2 x 200 W), not 1.5; the CPU runs
    # 500 + 500 of 2000 MHz with VCpu allocationRatio 2 (u 0.5, 150 W): 550 W x 600 s
    wl = gpu_workload(tmp_path / "wl", [
        {"id": i, "submit": T0, "fragments": [(10 * MIN, 500, 3000)]} for i in (0, 1)])
    policy = {"type": "filter", "filters": [{"type": "VCpu", "allocationRatio": 2.0}]}
    (res,) = scheduling.simulate(experiment(gpu_host(tmp_path / "h.json"), wl, [policy]))
    assert res.summary["energy_j"] == pytest.approx(550 * 600, rel=1e-12)
    assert res.summary["counters"]["gpu_demand_capped_ms"] == 10 * MIN
    assert res.summary["counters"]["demand_capped_ms"] == 0


def test_gpu_demand_on_a_host_without_gpus_draws_nothing_and_is_counted(tmp_path) -> None:
    # Mem ignores GPUs, so a GPU task can land on a CPU-only host: its GPU demand has nowhere
    # to go; the CPU energy is the golden host's (10 min at 1000 of 2000 MHz: 150 W x 600 s)
    wl = gpu_workload(tmp_path / "wl", [{"id": 0, "submit": T0, "fragments": [(10 * MIN, 1000, 2000)]}])
    (res,) = scheduling.simulate(experiment(DATA / "topologies" / "single_1_2000.json", wl))
    assert res.summary["energy_j"] == pytest.approx(90_000.0, rel=1e-12)
    assert res.summary["gpu_energy_j"] == 0.0
    assert res.summary["counters"]["gpu_demand_without_gpus_ms"] == 10 * MIN


def test_a_missing_power_model_is_opendcs_default_and_counted(tmp_path) -> None:
    """OpenDC's PowerModelSpec.DFLT (TopologySpecs.kt): linear, 200 W idle, 400 W max, for the
    CPU and for each GPU. A 10-minute task at 1000 of 2000 CPU MHz and 2000 of 4000 GPU MHz:
    CPU 200 + 200 x 0.5 = 300 W, GPUs 2 x 300 W: 900 W x 600 s = 540,000 J."""
    wl = gpu_workload(tmp_path / "wl", [{"id": 0, "submit": T0, "fragments": [(10 * MIN, 1000, 2000)]}])
    topo = gpu_host(tmp_path / "h.json", gpu_model=False, cpu_model=False)
    (res,) = scheduling.simulate(experiment(topo, wl))
    assert res.summary["energy_j"] == pytest.approx(540_000.0, rel=1e-12)
    assert res.summary["counters"]["default_cpu_power_models"] == 1
    assert res.summary["counters"]["default_gpu_power_models"] == 1


def test_a_gpu_power_model_needs_a_gpu(tmp_path) -> None:
    spec = json.loads(gpu_host(tmp_path / "h.json").read_text())
    del spec["clusters"][0]["hosts"][0]["gpu"]
    with pytest.raises(SpecError, match=r"gpuPowerModel: the host has no gpu"):
        load_topology(spec)
    spec["clusters"][0]["hosts"][0]["gpuPowerModel"]["modelType"] = "cubed"
    spec["clusters"][0]["hosts"][0]["gpu"] = {"count": 1, "coreCount": 1, "coreSpeed": 1000}
    with pytest.raises(SpecError, match=r"hosts\[0\]\.gpuPowerModel: modelType 'cubed'"):
        load_topology(spec)


def test_opendc_small_gpu_topology_loads_with_its_gpu_power() -> None:
    hosts = load_topology(DATA / "topologies" / "Gpus" / "small_gpu.json")
    assert hosts.n == 4 and list(hosts.gpu_count) == [3] * 4 and list(hosts.gpu_cores) == [6] * 4
    assert hosts.gpu_power[0].watts([0.125]).tolist() == [112.5]
