"""``carbonspan simulate`` as a user runs it: a real process, real files in, parquet out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from sim_inputs import DATA, MIN, experiment

from scheduling.policy import HostState, Request
from scheduling.prefabs import PREFABS

CLI = [sys.executable, "-m", "carbonspan"]


def carbonspan(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def golden_experiment(files) -> Path:
    wl = files.workload([{"id": 0, "submit": 0, "fragments": [(10 * MIN, 1000)]},
                         {"id": 1, "submit": 20 * MIN, "fragments": [(5 * MIN, 2000)]}])
    path = files.root / "exp.json"
    exp = experiment(DATA / "topologies" / "single_1_2000.json", wl,
                     [{"type": "prefab", "policyName": "Mem"}, {"type": "prefab", "policyName": "MemInv"}])
    path.write_text(json.dumps(exp))
    return path


def test_simulate_writes_parquet_and_prints_the_summary(files) -> None:
    exp = golden_experiment(files)
    out = files.root / "out"
    p = carbonspan("simulate", str(exp), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "carbonspan simulate" in p.stdout and "0.058" in p.stdout  # 210,000 J = 0.0583 kWh
    folders = sorted(d.name for d in out.iterdir())
    assert folders == ["0-single_1_2000-wl-Mem-run0", "1-single_1_2000-wl-MemInv-run0"]
    for name in ("task", "host", "powerSource", "service"):
        assert pq.read_table(out / folders[0] / f"{name}.parquet").num_rows >= 1
    task = pq.read_table(out / folders[0] / "task.parquet").to_pydict()
    assert task["energy_j"] == [90_000.0, 60_000.0]
    summary = json.loads((out / folders[0] / "summary.json").read_text())
    assert summary["energy_j"] == 210_000.0


def test_simulate_json_and_the_run_spelling(files) -> None:
    exp = golden_experiment(files)
    p = carbonspan("simulate", "run", str(exp), "--json", "--out", str(files.root / "o2"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [s["energy_j"] for s in doc["scenarios"]] == [210_000.0, 210_000.0]


def test_bad_input_is_a_message_not_a_traceback(files) -> None:
    exp = golden_experiment(files)
    spec = json.loads(exp.read_text())
    spec["allocationPolicies"] = [{"type": "prefab", "name": "MemInv"}]
    exp.write_text(json.dumps(spec))
    p = carbonspan("simulate", str(exp))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "write \"policyName\": \"MemInv\"" in p.stderr


def test_explain_names_filters_weights_and_the_chosen_host(files) -> None:
    topo = files.topology([{"name": "C", "hosts": [{"name": "A", "cores": 4, "mem": 8000},
                                                   {"name": "B", "cores": 4, "mem": 8000}]}])
    spec = json.loads(topo.read_text())
    spec["state"] = [{"host": "C/A-0", "usedCores": 1, "usedMemory": 6000, "tasks": 1}]
    hosts = files.root / "hosts.json"
    hosts.write_text(json.dumps(spec))
    policy = files.root / "policy.json"
    policy.write_text(json.dumps({"type": "prefab", "policyName": "Mem"}))
    task = files.root / "task.json"
    task.write_text(json.dumps({"cpuCount": 2, "cpuCapacity": 4000, "memory": 3000}))
    p = carbonspan("simulate", "explain", "--policy", str(policy), "--hosts", str(hosts),
                   "--task", str(task), "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    a, b = rep["hosts"]
    assert a["filters"] == {"VCpu": True, "Ram": False} and not a["fits"]  # 2000 free < 3000
    assert b["fits"] and rep["chosen"] == "C/B-0"
    assert rep["skipped_weighers"] == ["Ram"]  # one fitting host: all its weights are equal
    text = carbonspan("simulate", "explain", "--policy", str(policy), "--hosts", str(hosts),
                      "--task", str(task))
    assert "chosen: C/B-0" in text.stdout and "Ram:NO" in text.stdout
    policy.write_text(json.dumps({"type": "prefab", "policyName": "Random"}))
    rand = carbonspan("simulate", "explain", "--policy", str(policy), "--hosts", str(hosts),
                      "--task", str(task))
    # Random draws from every fitting host: said so, not as its internal size 1073741824
    assert "subset size all fitting hosts" in rand.stdout and "1073741824" not in rand.stdout


def test_help_explains_itself_with_an_example() -> None:
    for args in (("simulate", "--help"), ("simulate", "run", "--help"), ("simulate", "explain", "--help")):
        p = carbonspan(*args)
        assert p.returncode == 0 and "example" in p.stdout


def test_policy_objects_work_on_their_own() -> None:
    from scheduling.topology import load_topology

    hosts = load_topology({
        "clusters": [{"hosts": [{"cpu": {"coreCount": 16, "coreSpeed": 2100}, "memory": {"memorySize": 100000},
                                 "cpuPowerModel": {"modelType": "linear", "idlePower": 32, "maxPower": 180},
                                 "count": 3}]}]})
    s = HostState(hosts)
    s.used_memory[:] = [50000, 0, 90000]
    assert PREFABS["Mem"].select(s, Request(4, 8000, 1000)) == 1
