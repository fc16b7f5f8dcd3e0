"""Topology JSON (OpenDC's TopologySpec) -> a host table of numpy columns.

Clusters (``name``, ``count``) of hosts (``name``, ``count``, ``cpu {count, coreCount,
coreSpeed}``, ``memory {memorySize}``, optional ``gpu {count, coreCount, coreSpeed}``,
``cpuPowerModel``), each cluster with its own ``powerSource {carbonTracePath}``: several
clusters with their own traces in one simulation work. Unknown keys are an error naming the
key; recognised but unsupported features (batteries, distribution policies, GPU power,
virtualisation overhead) are an error saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scheduling.carbon import CarbonTrace, read_trace
from scheduling.power import PowerModel


class SpecError(ValueError):
    """An experiment, topology or policy file that cannot be used; the message names the field."""


UNSUPPORTED = {
    "battery": "batteries are not simulated yet",
    "cpuDistributionPolicy": "CPU distribution policies are not simulated (demand is capped at capacity)",
    "gpuDistributionPolicy": "GPU distribution policies are not simulated",
    "gpuPowerModel": "GPU power is not modelled yet",
    "virtualizationOverHeadModel": "virtualisation overhead is not modelled",
}
INFO = {"modelName", "vendor", "arch", "architecture", "memorySpeed", "memoryBandwidth"}


@dataclass
class Hosts:
    """One row per host (clusters and counts expanded, in file order)."""

    name: list[str]
    cluster: np.ndarray  # int32 index into cluster_names
    cores: np.ndarray  # int64
    core_speed: np.ndarray  # MHz
    memory: np.ndarray  # float64, the workload's mem_capacity unit
    gpu_cores: np.ndarray  # int64
    gpu_speed: np.ndarray  # MHz per GPU core
    power: list[PowerModel]
    cluster_names: list[str]
    traces: list[CarbonTrace | None]

    @property
    def n(self) -> int:
        return len(self.name)

    @property
    def capacity(self) -> np.ndarray:
        return self.cores * self.core_speed


def _check_keys(where: str, obj: Any, allowed: set[str], required: set[str] = frozenset()) -> dict:
    if not isinstance(obj, dict):
        raise SpecError(f"{where}: expected an object, got {type(obj).__name__}")
    for key in obj:
        if key in UNSUPPORTED:
            raise SpecError(f"{where}.{key}: recognised but not supported: {UNSUPPORTED[key]}; remove it")
        if key not in allowed and key not in INFO:
            raise SpecError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(allowed))})")
    missing = required - set(obj)
    if missing:
        raise SpecError(f"{where}: missing {', '.join(sorted(missing))}")
    return obj


def _num(where: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise SpecError(f"{where}: expected a number >= {minimum:g}, got {value!r}")
    return float(value)


def _power(where: str, spec: dict | None) -> PowerModel:
    if spec is None:
        raise SpecError(f"{where}: missing cpuPowerModel (modelType, idlePower, maxPower)")
    _check_keys(where, spec, {"modelType", "power", "idlePower", "maxPower", "calibrationFactor",
                              "asymUtil", "dvfs"}, {"modelType"})
    if spec.get("dvfs"):
        raise SpecError(f"{where}.dvfs: recognised but not supported: give dvfs false or leave it out")
    try:
        return PowerModel(
            kind=str(spec["modelType"]).lower(),
            idle=_num(f"{where}.idlePower", spec.get("idlePower", 0.0)),
            max=_num(f"{where}.maxPower", spec.get("maxPower", 0.0)),
            power=_num(f"{where}.power", spec.get("power", 400.0)),
            calibration=_num(f"{where}.calibrationFactor", spec.get("calibrationFactor", 1.0)),
            asym_util=_num(f"{where}.asymUtil", spec.get("asymUtil", 0.3)),
        )
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None


def resolve(path: str, *bases: Path) -> Path:
    """A relative path against each base in turn (the referring file's folder first)."""
    p = Path(path)
    if p.is_absolute():
        return p
    tried = [b / p for b in bases]
    for cand in tried:
        if cand.exists():
            return cand
    raise SpecError(f"{path}: not found (looked in {', '.join(str(t) for t in tried)})")


def read_spec(source: str | Path | dict, base: Path | None, what: str) -> tuple[Any, Path]:
    """A JSON file (or an already parsed dict) and the folder its relative paths start from."""
    if isinstance(source, dict):
        return source, base or Path.cwd()
    p = Path(source)
    try:
        return json.loads(p.read_text(encoding="utf-8")), p.parent
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{what} {p}: {exc}") from None


def load_topology(source: str | Path | dict, base: Path | None = None) -> Hosts:
    spec, here = read_spec(source, base, "topology")
    _check_keys("topology", spec, {"clusters"}, {"clusters"})
    hosts = Hosts([], *([] for _ in range(6)), [], [], [])  # type: ignore[arg-type]
    cols: dict[str, list] = {k: [] for k in ("cluster", "cores", "speed", "mem", "gcores", "gspeed")}
    for ci, cluster in enumerate(spec["clusters"]):
        where = f"clusters[{ci}]"
        _check_keys(where, cluster, {"name", "count", "hosts", "powerSource"}, {"hosts"})
        trace = _trace(f"{where}.powerSource", cluster.get("powerSource"), here, base)
        for rep in range(int(_num(f"{where}.count", cluster.get("count", 1), 1))):
            cname = str(cluster.get("name", f"C{ci}"))
            hosts.cluster_names.append(cname if rep == 0 else f"{cname}-{rep}")
            hosts.traces.append(trace)
            for hi, host in enumerate(cluster["hosts"]):
                _add_host(hosts, cols, f"{where}.hosts[{hi}]", host, len(hosts.cluster_names) - 1)
    hosts.cluster = np.asarray(cols["cluster"], dtype=np.int32)
    hosts.cores = np.asarray(cols["cores"], dtype=np.int64)
    hosts.core_speed = np.asarray(cols["speed"], dtype=float)
    hosts.memory = np.asarray(cols["mem"], dtype=float)
    hosts.gpu_cores = np.asarray(cols["gcores"], dtype=np.int64)
    hosts.gpu_speed = np.asarray(cols["gspeed"], dtype=float)
    if hosts.n == 0:
        raise SpecError("topology: no hosts")
    return hosts


def _trace(where: str, spec: Any, here: Path, base: Path | None) -> CarbonTrace | None:
    if spec is None:
        return None
    _check_keys(where, spec, {"name", "maxPower", "carbonTracePath"})
    if spec.get("carbonTracePath") is None:
        return None
    raw = str(spec["carbonTracePath"])
    file, _, zone = raw.partition("#")
    path = resolve(file, here, *([base] if base else []), Path.cwd())
    try:
        return read_trace(f"{path}#{zone}" if zone else path)
    except ValueError as exc:
        raise SpecError(f"{where}.carbonTracePath: {exc}") from None


def _add_host(hosts: Hosts, cols: dict, where: str, host: dict, cluster: int) -> None:
    _check_keys(where, host, {"name", "count", "cpu", "memory", "gpu", "cpuPowerModel"},
                {"cpu", "memory"})
    cpu = _check_keys(f"{where}.cpu", host["cpu"], {"count", "coreCount", "coreSpeed"},
                      {"coreCount", "coreSpeed"})
    mem = _check_keys(f"{where}.memory", host["memory"], {"memorySize"}, {"memorySize"})
    cores = int(_num(f"{where}.cpu.count", cpu.get("count", 1), 1)) * int(
        _num(f"{where}.cpu.coreCount", cpu["coreCount"], 1))
    speed = _num(f"{where}.cpu.coreSpeed", cpu["coreSpeed"], 1e-9)
    memory = _num(f"{where}.memory.memorySize", mem["memorySize"])
    gcores, gspeed = 0, 0.0
    if host.get("gpu") is not None:
        gpu = _check_keys(f"{where}.gpu", host["gpu"], {"count", "coreCount", "coreSpeed", "memorySize"},
                          {"coreCount", "coreSpeed"})
        gcores = int(_num(f"{where}.gpu.count", gpu.get("count", 1), 1)) * int(
            _num(f"{where}.gpu.coreCount", gpu["coreCount"], 1))
        gspeed = _num(f"{where}.gpu.coreSpeed", gpu["coreSpeed"])
    power = _power(f"{where}.cpuPowerModel", host.get("cpuPowerModel"))
    for rep in range(int(_num(f"{where}.count", host.get("count", 1), 1))):
        name = str(host.get("name", "H"))
        hosts.name.append(f"{hosts.cluster_names[cluster]}/{name}-{rep}")
        hosts.power.append(power)
        for key, val in zip(cols, (cluster, cores, speed, memory, gcores, gspeed), strict=True):
            cols[key].append(val)
