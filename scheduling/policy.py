"""Host selection: filters, weighers and the two placement rules (filter-weigh, fewest tasks).

A policy object is usable on its own: build a ``HostState`` over a ``Hosts`` table and call
``policy.select(state, request)`` or ``policy.explain(state, request)``. Decisions are
stateless: the same state and request give the same host, whatever was asked before (OpenDC's
FilterScheduler keeps a weight array across calls; this does not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduling.topology import Hosts


@dataclass(frozen=True)
class Request:
    """What a task asks of a host."""

    cpu_count: int
    cpu_capacity: float = 0.0  # MHz over all its cores
    memory: float = 0.0
    gpu_count: int = 0
    gpu_capacity: float = 0.0
    key: int = 0  # the task's index: seeds the subset draw


@dataclass
class HostState:
    """What is provisioned on each host now (the allocator's view)."""

    hosts: Hosts
    used_cores: np.ndarray = field(default=None)  # type: ignore[assignment]
    used_memory: np.ndarray = field(default=None)  # type: ignore[assignment]
    used_gpu: np.ndarray = field(default=None)  # type: ignore[assignment]
    instances: np.ndarray = field(default=None)  # type: ignore[assignment]
    up: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        n = self.hosts.n
        for name, dtype in (("used_cores", np.int64), ("used_memory", float),
                            ("used_gpu", np.int64), ("instances", np.int64)):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(n, dtype=dtype))
        if self.up is None:
            self.up = np.ones(n, dtype=bool)

    def place(self, host: int, req: Request, sign: int = 1) -> None:
        self.used_cores[host] += sign * req.cpu_count
        self.used_memory[host] += sign * req.memory
        self.used_gpu[host] += sign * req.gpu_count
        self.instances[host] += sign


# -- filters: each returns a boolean mask over all hosts -----------------------------------


@dataclass(frozen=True)
class Filter:
    kind: str
    allocation_ratio: float = 1.0
    limit: int = 0

    def test(self, s: HostState, r: Request) -> np.ndarray:
        h = s.hosts
        if self.kind == "Compute":
            return s.up.copy()
        if self.kind == "VCpu":  # never larger than the host itself, whatever the ratio
            return (r.cpu_count <= h.cores) & (h.cores * self.allocation_ratio - s.used_cores >= r.cpu_count)
        if self.kind == "Ram":
            return (r.memory <= h.memory) & (h.memory * self.allocation_ratio - s.used_memory >= r.memory)
        if self.kind == "VCpuCapacity":
            return h.core_speed >= r.cpu_capacity / max(r.cpu_count, 1)
        if self.kind == "InstanceCount":
            return s.instances < self.limit
        if self.kind == "VGpu":
            return (r.gpu_count <= h.gpu_cores) & (h.gpu_cores * self.allocation_ratio - s.used_gpu >= r.gpu_count)
        if self.kind == "VGpuCapacity":
            if r.gpu_count == 0:
                return np.ones(h.n, dtype=bool)
            return h.gpu_speed >= r.gpu_capacity / r.gpu_count
        raise ValueError(f"unknown filter {self.kind!r}")


FILTERS = ("Compute", "VCpu", "Ram", "VCpuCapacity", "InstanceCount", "VGpu", "VGpuCapacity")


# -- weighers: raw weights over all hosts ---------------------------------------------------


@dataclass(frozen=True)
class Weigher:
    kind: str
    multiplier: float = 1.0
    allocation_ratio: float = 1.0

    def raw(self, s: HostState, r: Request) -> np.ndarray:
        h = s.hosts
        if self.kind == "Ram":
            return h.memory - s.used_memory
        if self.kind == "CoreRam":
            return (h.memory - s.used_memory) / h.cores
        if self.kind == "InstanceCount":
            return s.instances.astype(float)
        if self.kind == "VCpu":
            return h.cores * self.allocation_ratio - s.used_cores.astype(float)
        if self.kind == "VCpuCapacity":
            return h.core_speed - r.cpu_capacity / max(r.cpu_count, 1)
        if self.kind == "VGpu":
            return h.gpu_cores * self.allocation_ratio - s.used_gpu.astype(float)
        raise ValueError(f"unknown weigher {self.kind!r}")


WEIGHERS = ("Ram", "CoreRam", "InstanceCount", "VCpu", "VCpuCapacity", "VGpu")


def scores(weighers: tuple[Weigher, ...], raws: list[np.ndarray], n: int) -> tuple[np.ndarray, list[Any]]:
    """Sum of multiplier x min-max-normalised weight; a weigher with equal weights is skipped."""
    total = np.zeros(n)
    normalised: list[Any] = []
    for w, raw in zip(weighers, raws, strict=True):
        lo, hi = (float(raw.min()), float(raw.max())) if n else (0.0, 0.0)
        if hi == lo:
            normalised.append(None)  # skipped: all equal
            continue
        norm = (raw - lo) / (hi - lo)
        normalised.append(norm)
        total += w.multiplier * norm
    return total, normalised


def subset_rng(seed: int, key: int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, key & 0xFFFFFFFF])


@dataclass(frozen=True)
class FilterPolicy:
    """Filter, weigh, then draw uniformly from the best ``subset_size`` (ties keep host order)."""

    filters: tuple[Filter, ...]
    weighers: tuple[Weigher, ...] = ()
    subset_size: int = 1
    name: str = "filter"

    def fits(self, s: HostState, r: Request, allowed: np.ndarray | None = None) -> np.ndarray:
        mask = np.ones(s.hosts.n, dtype=bool) if allowed is None else allowed.copy()
        for f in self.filters:
            mask &= f.test(s, r)
        return mask

    def ranked(self, s: HostState, r: Request, fit: np.ndarray) -> tuple[np.ndarray, np.ndarray, list, list]:
        idx = np.flatnonzero(fit)
        raws = [w.raw(s, r)[idx] for w in self.weighers]
        total, normalised = scores(self.weighers, raws, idx.size)
        order = idx[np.argsort(-total, kind="stable")]
        return order, total, raws, normalised

    def select(self, s: HostState, r: Request, seed: int = 0, allowed: np.ndarray | None = None) -> int:
        fit = self.fits(s, r, allowed)
        if not fit.any():
            return -1
        if not self.weighers and self.subset_size == 1:
            return int(np.argmax(fit))
        if self.subset_size == 1:  # the best host only: no sort needed (argmax keeps host order)
            idx = np.flatnonzero(fit)
            if len(self.weighers) == 1:
                w = self.weighers[0]
                raw = w.raw(s, r)[idx]
                if w.multiplier == 0:
                    return int(idx[0])
                return int(idx[np.argmax(raw) if w.multiplier > 0 else np.argmin(raw)])
            total, _ = scores(self.weighers, [w.raw(s, r)[idx] for w in self.weighers], idx.size)
            return int(idx[np.argmax(total)])
        order = self.ranked(s, r, fit)[0]
        k = min(self.subset_size, order.size)
        return int(order[0] if k == 1 else order[subset_rng(seed, r.key).integers(k)])

    def explain(self, s: HostState, r: Request, seed: int = 0) -> dict[str, Any]:
        verdicts = {f.kind: f.test(s, r) for f in self.filters}
        fit = self.fits(s, r)
        out: dict[str, Any] = {"policy": self.name, "subset_size": self.subset_size, "hosts": []}
        order, total, raws, normalised = self.ranked(s, r, fit) if fit.any() else (np.array([], int), [], [], [])
        pos = {int(h): i for i, h in enumerate(np.flatnonzero(fit))}
        for h in range(s.hosts.n):
            row: dict[str, Any] = {"host": s.hosts.name[h], "filters": {k: bool(v[h]) for k, v in verdicts.items()},
                                   "fits": bool(fit[h])}
            if h in pos:
                i = pos[h]
                row["weights"] = {w.kind: {"raw": float(raws[j][i]), "multiplier": w.multiplier,
                                           "normalised": None if normalised[j] is None else float(normalised[j][i])}
                                  for j, w in enumerate(self.weighers)}
                row["score"] = float(total[i])
            out["hosts"].append(row)
        k = min(self.subset_size, order.size)
        out["subset"] = [s.hosts.name[int(h)] for h in order[:k]]
        chosen = self.select(s, r, seed)
        out["chosen"] = s.hosts.name[chosen] if chosen >= 0 else None
        out["skipped_weighers"] = [w.kind for j, w in enumerate(self.weighers) if fit.any() and normalised[j] is None]
        return out


@dataclass(frozen=True)
class FewestTasksPolicy:
    """The fitting host with the fewest tasks (OpenDC's memorizing schedulers), ties by host order."""

    filters: tuple[Filter, ...]
    name: str = "fewest-tasks"
    subset_size: int = 1
    weighers: tuple[Weigher, ...] = ()

    def fits(self, s: HostState, r: Request, allowed: np.ndarray | None = None) -> np.ndarray:
        return FilterPolicy(self.filters).fits(s, r, allowed)

    def select(self, s: HostState, r: Request, seed: int = 0, allowed: np.ndarray | None = None) -> int:
        fit = self.fits(s, r, allowed)
        if not fit.any():
            return -1
        return int(np.argmin(np.where(fit, s.instances, np.iinfo(np.int64).max)))

    def explain(self, s: HostState, r: Request, seed: int = 0) -> dict[str, Any]:
        verdicts = {f.kind: f.test(s, r) for f in self.filters}
        fit = self.fits(s, r)
        chosen = self.select(s, r, seed)
        return {"policy": self.name, "rule": "fewest tasks among fitting hosts, ties by host order",
                "hosts": [{"host": s.hosts.name[h], "filters": {k: bool(v[h]) for k, v in verdicts.items()},
                           "fits": bool(fit[h]), "tasks": int(s.instances[h])} for h in range(s.hosts.n)],
                "chosen": s.hosts.name[chosen] if chosen >= 0 else None}
