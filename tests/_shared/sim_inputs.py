"""Inputs for the simulator tests (tests/scheduling): real parquet workloads, carbon traces and
topology files written where a test says."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DATA = Path(__file__).resolve().parents[2] / "scheduling" / "data" / "opendc"
MIN = 60_000
HOUR = 3_600_000
T0 = 1_664_582_400_000  # 2022-10-01T00:00Z


def write_workload(folder: Path, tasks: Sequence[dict]) -> Path:
    """tasks: {id, submit, fragments: [(duration_ms, usage_mhz)], cpu_count, mem, deferrable?, deadline?}"""
    folder.mkdir(parents=True, exist_ok=True)
    cols: dict[str, list] = {k: [] for k in ("id", "submission_time", "duration", "cpu_count",
                                             "cpu_capacity", "mem_capacity")}
    extra = any("deadline" in t for t in tasks)
    if extra:
        cols["deferrable"], cols["deadline"] = [], []
    fid, fdur, fuse = [], [], []
    for t in tasks:
        frags = t["fragments"]
        cols["id"].append(t["id"])
        cols["submission_time"].append(t["submit"])
        cols["duration"].append(t.get("duration", sum(d for d, _ in frags)))
        cols["cpu_count"].append(t.get("cpu_count", 1))
        cols["cpu_capacity"].append(t.get("cpu_capacity", max(u for _, u in frags)))
        cols["mem_capacity"].append(t.get("mem", 1000))
        if extra:
            cols["deferrable"].append(t.get("deferrable", False))
            cols["deadline"].append(t.get("deadline", -1))
        for d, u in frags:
            fid.append(t["id"])
            fdur.append(d)
            fuse.append(float(u))
    schema = {"id": pa.int32(), "submission_time": pa.int64(), "duration": pa.int64(),
              "cpu_count": pa.int32(), "cpu_capacity": pa.float64(), "mem_capacity": pa.int64(),
              "deferrable": pa.bool_(), "deadline": pa.int64()}
    pq.write_table(pa.table({k: pa.array(v, type=schema[k]) for k, v in cols.items()}), folder / "tasks.parquet")
    pq.write_table(pa.table({"id": pa.array(fid, pa.int32()), "duration": pa.array(fdur, pa.int64()),
                             "cpu_usage": pa.array(fuse, pa.float64())}), folder / "fragments.parquet")
    return folder


def write_trace(path: Path, start_ms: int, step_ms: int, values: Sequence[float]) -> Path:
    t = start_ms + step_ms * np.arange(len(values), dtype=np.int64)
    pq.write_table(pa.table({"timestamp": pa.array(t, pa.timestamp("ms")),
                             "carbon_intensity": pa.array(np.asarray(values, float))}), path)
    return path


def write_topology(path: Path, clusters: Sequence[dict]) -> Path:
    """clusters: {name, hosts: [{name, count, cores, speed, mem, idle, max, model}], trace}"""
    out = []
    for c in clusters:
        hosts = [{"name": h.get("name", "H"), "count": h.get("count", 1),
                  "cpu": {"coreCount": h.get("cores", 1), "coreSpeed": h.get("speed", 2000)},
                  "memory": {"memorySize": h.get("mem", 100_000)},
                  "cpuPowerModel": {"modelType": h.get("model", "linear"), "idlePower": h.get("idle", 100.0),
                                    "maxPower": h.get("max", 200.0)}} for h in c["hosts"]]
        spec = {"name": c.get("name", "C01"), "hosts": hosts}
        if c.get("trace"):
            spec["powerSource"] = {"carbonTracePath": str(c["trace"])}
        out.append(spec)
    path.write_text(json.dumps({"clusters": out}))
    return path


def experiment(topology: Path, workload: Path, policies: list | None = None, **wl_opts) -> dict:
    return {"name": "t", "topologies": [{"pathToFile": str(topology)}],
            "workloads": [{"pathToFile": str(workload), "type": "ComputeWorkload", **wl_opts}],
            "allocationPolicies": policies or [{"type": "prefab", "policyName": "Mem"}],
            "exportModels": [{"exportInterval": 3600}]}
