"""Topology JSON (OpenDC's TopologySpec) -> a host table of numpy columns.

Clusters (``name``, ``count``) of hosts (``name``, ``count``, ``cpu {count, coreCount,
coreSpeed}``, ``memory {memorySize}``, optional ``gpu {count, coreCount, coreSpeed}``,
``cpuPowerModel``, ``gpuPowerModel``), each cluster with its own ``powerSource
{carbonTracePath}``: several clusters with their own traces in one simulation work. A missing
power model is OpenDC's default (TopologySpecs.kt ``PowerModelSpec.DFLT``: linear, 200 W idle,
400 W max), counted per host (``default_cpu_power_models``, ``default_gpu_power_models``).
Unknown keys are an error naming the key; recognised but unsupported features (batteries,
distribution policies, virtualisation overhead) are an error saying so.
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
    "virtualizationOverHeadModel": "virtualisation overhead is not modelled",
}
INFO = {"modelName", "vendor", "arch", "architecture", "memorySpeed", "memoryBandwidth"}
#: OpenDC's PowerModelSpec.DFLT (TopologySpecs.kt), used where a host gives no power model
DEFAULT_POWER_MODEL = {"modelType": "linear", "power": 350.0, "idlePower": 200.0, "maxPower": 400.0}


@dataclass
class Hosts:
    """One row per host (clusters and counts expanded, in file order)."""

    name: list[str]
    cluster: np.ndarray  # int32 index into cluster_names
    cores: np.ndarray  # int64
    core_speed: np.ndarray  # MHz
    memory: np.ndarray  # float64, the workload's mem_capacity unit
    gpu_cores: np.ndarray  # int64, over all the host's GPUs
    gpu_speed: np.ndarray  # MHz per GPU core
    power: list[PowerModel]
    cluster_names: list[str]
    traces: list[CarbonTrace | None]
    gpu_count: np.ndarray = None  # type: ignore[assignment]  # int64: GPUs (each draws gpu_power)
    gpu_power: list[PowerModel | None] = None  # type: ignore[assignment]
    counters: dict[str, int] = None  # type: ignore[assignment]

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


def _power(where: str, spec: dict) -> PowerModel:
    _check_keys(where, spec, {"modelType", "power", "idlePower", "maxPower", "calibrationFactor",
                              "asymUtil", "dvfs"}, {"modelType"})
    dvfs = spec.get("dvfs", False)
    if not isinstance(dvfs, bool):
        raise SpecError(f"{where}.dvfs: {dvfs!r} must be true or false")
    try:
        return PowerModel(
            kind=str(spec["modelType"]).lower(),
            idle=_num(f"{where}.idlePower", spec.get("idlePower", 0.0)),
            max=_num(f"{where}.maxPower", spec.get("maxPower", 0.0)),
            power=_num(f"{where}.power", spec.get("power", 400.0)),
            calibration=_num(f"{where}.calibrationFactor", spec.get("calibrationFactor", 1.0)),
            asym_util=_num(f"{where}.asymUtil", spec.get("asymUtil", 0.3)),
            dvfs=dvfs,
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
    hosts = Hosts([], *([] for _ in range(6)), [], [], [], gpu_power=[],  # type: ignore[arg-type]
                  counters={"default_cpu_power_models": 0, "default_gpu_power_models": 0})
    cols: dict[str, list] = {k: [] for k in ("cluster", "cores", "speed", "mem", "gcores", "gspeed", "gcount")}
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
    hosts.gpu_count = np.asarray(cols["gcount"], dtype=np.int64)
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
    _check_keys(where, host, {"name", "count", "cpu", "memory", "gpu", "cpuPowerModel", "gpuPowerModel"},
                {"cpu", "memory"})
    cpu = _check_keys(f"{where}.cpu", host["cpu"], {"count", "coreCount", "coreSpeed"},
                      {"coreCount", "coreSpeed"})
    mem = _check_keys(f"{where}.memory", host["memory"], {"memorySize"}, {"memorySize"})
    cores = int(_num(f"{where}.cpu.count", cpu.get("count", 1), 1)) * int(
        _num(f"{where}.cpu.coreCount", cpu["coreCount"], 1))
    speed = _num(f"{where}.cpu.coreSpeed", cpu["coreSpeed"], 1e-9)
    memory = _num(f"{where}.memory.memorySize", mem["memorySize"])
    gcount, gcores, gspeed, gpower = 0, 0, 0.0, None
    n = int(_num(f"{where}.count", host.get("count", 1), 1))
    if host.get("gpu") is not None:
        gpu = _check_keys(f"{where}.gpu", host["gpu"], {"count", "coreCount", "coreSpeed", "memorySize"},
                          {"coreCount", "coreSpeed"})
        gcount = int(_num(f"{where}.gpu.count", gpu.get("count", 1), 1))
        gcores = gcount * int(_num(f"{where}.gpu.coreCount", gpu["coreCount"], 1))
        gspeed = _num(f"{where}.gpu.coreSpeed", gpu["coreSpeed"], 1e-9)
        if host.get("gpuPowerModel") is None:
            hosts.counters["default_gpu_power_models"] += n
        gpower = _power(f"{where}.gpuPowerModel", host.get("gpuPowerModel") or DEFAULT_POWER_MODEL)
    elif host.get("gpuPowerModel") is not None:
        raise SpecError(f"{where}.gpuPowerModel: the host has no gpu; add gpu {{count, coreCount, "
                        "coreSpeed}} or remove gpuPowerModel")
    if host.get("cpuPowerModel") is None:
        hosts.counters["default_cpu_power_models"] += n
    power = _power(f"{where}.cpuPowerModel", host.get("cpuPowerModel") or DEFAULT_POWER_MODEL)
    for rep in range(n):
        name = str(host.get("name", "H"))
        hosts.name.append(f"{hosts.cluster_names[cluster]}/{name}-{rep}")
        hosts.power.append(power)
        hosts.gpu_power.append(gpower)
        for key, val in zip(cols, (cluster, cores, speed, memory, gcores, gspeed, gcount), strict=True):
            cols[key].append(val)
