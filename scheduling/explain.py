"""``carbonspan simulate explain``: which host a policy picks for one task, and why.

HOSTS.json is a topology file; an optional top-level ``state`` list gives what is already on
each host: ``{"host": "C01/H01-0", "usedCores": 4, "usedMemory": 2000, "usedGpu": 0,
"tasks": 1, "up": true}`` (a host not listed is empty and up). TASK.json holds ``cpuCount``,
``cpuCapacity`` (MHz), ``memory``, optional ``gpuCount``, ``gpuCapacity`` and ``id`` (seeds
the subset draw).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scheduling.policy import HostState, Request
from scheduling.prefabs import ALL, TimeshiftSpec, make_policy
from scheduling.topology import SpecError, _check_keys, load_topology

STATE_KEYS = {"host", "usedCores", "usedMemory", "usedGpu", "tasks", "up"}
TASK_KEYS = {"id", "cpuCount", "cpuCapacity", "memory", "gpuCount", "gpuCapacity"}


def _read(path: Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{what} {path}: {exc}") from None


def explain_files(policy: Path, hosts: Path, task: Path, seed: int = 0) -> dict[str, Any]:
    pol = make_policy(_read(policy, "policy"), "policy")
    topo = _read(hosts, "hosts")
    if not isinstance(topo, dict):
        raise SpecError(f"hosts {hosts}: expected a topology object")
    state_rows = topo.pop("state", [])
    table = load_topology(topo, base=Path(hosts).parent)
    state = HostState(table)
    index = {n: i for i, n in enumerate(table.name)}
    for k, row in enumerate(state_rows):
        _check_keys(f"state[{k}]", row, STATE_KEYS, {"host"})
        if row["host"] not in index:
            raise SpecError(f"state[{k}].host {row['host']!r}: no such host (hosts: {', '.join(table.name[:5])}...)")
        h = index[row["host"]]
        state.used_cores[h] = int(row.get("usedCores", 0))
        state.used_memory[h] = float(row.get("usedMemory", 0))
        state.used_gpu[h] = int(row.get("usedGpu", 0))
        state.instances[h] = int(row.get("tasks", 0))
        state.up[h] = bool(row.get("up", True))
    t = _check_keys("task", _read(task, "task"), TASK_KEYS, {"cpuCount"})
    req = Request(int(t["cpuCount"]), float(t.get("cpuCapacity", 0)), float(t.get("memory", 0)),
                  int(t.get("gpuCount", 0)), float(t.get("gpuCapacity", 0)), key=int(t.get("id", 0)))
    return explain(pol, state, req, seed)


def explain(policy: Any, state: HostState, req: Request, seed: int = 0) -> dict[str, Any]:
    note = None
    if isinstance(policy, TimeshiftSpec):
        note = ("time-shifting decides *when* (it needs a time and a carbon trace: run the "
                "experiment); this explains *where*, its placement rule")
        policy = policy.placement
    out = policy.explain(state, req, seed)
    out["seed"] = seed
    if note:
        out["note"] = note
    return out


def render(report: dict[str, Any]) -> str:
    size = report.get("subset_size", 1)
    size_text = "all fitting hosts" if size >= ALL else str(size)
    lines = [f"policy {report['policy']} (subset size {size_text}, seed {report['seed']})"]
    if report.get("note"):
        lines.append(f"note: {report['note']}")
    for row in report["hosts"]:
        verdicts = " ".join(f"{k}:{'ok' if v else 'NO'}" for k, v in row["filters"].items())
        extra = ""
        if "weights" in row:
            parts = [f"{k} raw {w['raw']:g} norm {_norm(w['normalised'])} x{w['multiplier']:g}"
                     for k, w in row["weights"].items()]
            extra = "".join(f" | {p}" for p in ["; ".join(parts)] if p) + f" | score {row['score']:.3f}"
        elif "tasks" in row:
            extra = f" | tasks {row['tasks']}"
        lines.append(f"  {row['host']:<24} {verdicts} {'fits' if row['fits'] else 'does not fit'}{extra}")
    if report.get("subset") is not None:
        lines.append(f"subset drawn from: {', '.join(report['subset']) or '(none)'}")
    if report.get("skipped_weighers"):
        lines.append(f"skipped (all weights equal): {', '.join(report['skipped_weighers'])}")
    lines.append(f"chosen: {report['chosen'] or 'no host fits'}")
    return "\n".join(lines) + "\n"


def _norm(value: float | None) -> str:
    return "skipped" if value is None else f"{value:.3f}"
