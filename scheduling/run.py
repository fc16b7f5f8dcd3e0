"""One scenario end to end: load, schedule, integrate, and build the output tables (pyarrow)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from scheduling.energy import integrate
from scheduling.engine import BLOCKED, UNSCHEDULABLE, schedule
from scheduling.experiment import Scenario
from scheduling.forecast import PERFECT_LABEL, make_provider
from scheduling.prefabs import TimeshiftSpec
from scheduling.topology import Hosts, load_topology
from scheduling.workload import Workload, prepare, read_workload

COMPAT_LABEL = "OpenDC compat: the next rows of the real trace; " + PERFECT_LABEL


@dataclass
class Result:
    scenario: Scenario
    tables: dict[str, pa.Table]
    summary: dict[str, Any]
    counters: dict[str, int] = field(default_factory=dict)


def _stamp(path: Path) -> tuple:
    """A cache key that changes when the file (or a workload folder's files) change."""
    files = [path / "tasks.parquet", path / "fragments.parquet"] if path.is_dir() else [path]
    return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.exists())


@lru_cache(maxsize=4)
def _workload(path: Path, _stamp: tuple) -> Workload:
    return read_workload(path)


def load_inputs(sc: Scenario) -> tuple[Hosts, Workload]:
    """A workload is read once per process for all the scenarios that share it (the cache key
    includes its files' sizes and modification times, so an edited file is read again);
    topologies and their traces are small and read every time."""
    w = sc.workload
    wl = prepare(_workload(w.path, _stamp(w.path)), sample_fraction=w.sample_fraction, seed=sc.seed,
                 submission_time_ms=w.submission_time_ms, defer_all=w.defer_all)
    return load_topology(sc.topology), wl


def forecast_label(policy: Any, compat: bool, provider: Any) -> str:
    if not isinstance(policy, TimeshiftSpec):
        return ""
    if compat:
        return COMPAT_LABEL
    return provider.label or provider.name


def run_scenario(sc: Scenario, compat: bool = False, reference: bool = True) -> Result:
    """One scenario; a timeshift policy also runs its placement without shifting (the
    reference), and both are integrated over the same window (first submission to the later
    of the two last completions), so idle hosts count the same in both."""
    hosts, wl = load_inputs(sc)
    provider = None
    if isinstance(sc.policy, TimeshiftSpec):
        provider = make_provider(sc.policy.provider, sc.seed, sc.topology.parent)
    sch = schedule(wl, hosts, sc.policy, seed=sc.seed, compat=compat, provider=provider)
    ref_sch = None
    if reference and isinstance(sc.policy, TimeshiftSpec):
        ref_sch = schedule(wl, hosts, sc.policy.placement, seed=sc.seed)
    # no earlier than the first submission: when nothing finished the window is empty, not negative
    t_end = max([int(s.finish.max()) for s in (sch, ref_sch) if s is not None] + [int(wl.submit.min())]) \
        if wl.n else 0
    result = build(sc, hosts, wl, sch, t_end)
    result.summary["forecast"] = forecast_label(sc.policy, compat, provider)
    if provider is not None and hasattr(provider, "clamped"):
        result.counters["forecast_values_clamped"] = provider.clamped
    if ref_sch is not None:
        ref = build(replace(sc, policy=sc.policy.placement), hosts, wl, ref_sch, t_end)
        c0 = ref.summary["carbon_g"]
        result.summary["reference_carbon_g"] = c0
        result.summary["reference_energy_j"] = ref.summary["energy_j"]
        result.summary["reduction_pct"] = 100.0 * (1 - result.summary["carbon_g"] / c0) if c0 > 0 else None
    result.summary["counters"] = dict(sorted(result.counters.items()))
    if sc.notes:
        result.summary["notes"] = list(sc.notes)
    return result


def build(sc: Scenario, hosts: Hosts, wl: Workload, sch, t_end: int | None = None) -> Result:
    ran = sch.status != UNSCHEDULABLE
    t_begin = int(wl.submit.min()) if wl.n else 0
    if t_end is None:
        t_end = int(sch.finish.max()) if (sch.finish >= 0).any() else t_begin
    en = integrate(wl, hosts, sch, t_begin, t_end, sc.export_interval_s * 1000)
    counters = {**wl.counters, **sch.counters, **en.counters, **(hosts.counters or {})}
    deadline = wl.deadline
    finished = sch.finish >= 0
    missed = finished & (deadline >= 0) & (sch.finish > deadline)
    delay = np.where(finished, sch.finish - wl.submit - wl.runtime, -1)
    host_names = np.array(hosts.name + [""], dtype=object)
    task = pa.table({
        "task_id": wl.task_id, "host_name": host_names[sch.host],
        "submission_time": wl.submit, "start_time": sch.start, "finish_time": sch.finish,
        "runtime_ms": wl.runtime, "delay_ms": delay, "deferred_ms": sch.deferred_ms,
        "paused_ms": sch.paused_ms, "deadline": deadline, "deadline_missed": missed,
        "guard_released": sch.guard_released, "energy_j": en.task_energy, "carbon_g": en.task_carbon,
        "status": np.where(~ran, "unschedulable", np.where(
            sch.status == BLOCKED, "blocked", np.where(finished, "done", "unfinished"))),
    })
    k = en.edges.size - 1
    ts = np.tile(en.edges[:-1], hosts.n)
    host = pa.table({
        "timestamp": ts, "host_name": np.repeat(np.array(hosts.name, dtype=object), k),
        "power_source": np.repeat(np.array(hosts.cluster_names, dtype=object)[hosts.cluster], k),
        "cpu_utilization": en.host_util.ravel(),
        "power_w": (en.host_energy / np.maximum(np.diff(en.edges), 1) * 1000).ravel(),
        "energy_j": en.host_energy.ravel(), "carbon_g": en.host_carbon.ravel(),
        "gpu_utilization": en.host_gpu_util.ravel(), "gpu_energy_j": en.host_gpu_energy.ravel(),
        "energy_without_intensity_j": en.host_no_intensity.ravel(),
    })
    tables = {"task": task, "host": host, "powerSource": _power_sources(hosts, en),
              "service": _service(wl, sch, en.edges, hosts.n)}
    done = wl.deadline >= 0
    summary = {
        "scenario": sc.label, "topology": sc.topology.stem, "workload": sc.workload.label,
        "policy": sc.policy_name, "seed": sc.seed, "run": sc.run, "tasks": int(wl.n),
        "tasks_done": int(finished.sum()),
        "makespan_ms": int(sch.finish.max()) - t_begin if finished.any() else 0,
        "window_ms": t_end - t_begin,
        "energy_j": float(en.host_energy.sum()), "carbon_g": float(en.host_carbon.sum()),
        "gpu_energy_j": float(en.host_gpu_energy.sum()),
        "energy_without_intensity_j": float(en.host_no_intensity.sum()),
        "unattributed_energy_j": float(en.host_energy.sum() - en.task_energy.sum()),
        "deadline_misses": int(missed.sum()), "tasks_with_deadline": int(done.sum()),
        "mean_delay_ms": float(delay[finished].mean()) if finished.any() else 0.0,
        "p95_delay_ms": float(np.percentile(delay[finished], 95)) if finished.any() else 0.0,
    }
    return Result(sc, tables, summary, counters)


def _power_sources(hosts: Hosts, en) -> pa.Table:
    k = en.edges.size - 1
    rows: dict[str, list] = {c: [] for c in ("timestamp", "power_source", "carbon_intensity",
                                             "energy_j", "carbon_g", "energy_without_intensity_j")}
    for c, name in enumerate(hosts.cluster_names):
        sel = hosts.cluster == c
        trace = hosts.traces[c]
        inten = trace.value_at(en.edges[:-1]) if trace is not None else np.full(k, np.nan)
        rows["timestamp"].append(en.edges[:-1])
        rows["power_source"].append(np.full(k, name, dtype=object))
        rows["carbon_intensity"].append(inten)
        rows["energy_j"].append(en.host_energy[sel].sum(axis=0))
        rows["carbon_g"].append(en.host_carbon[sel].sum(axis=0))
        rows["energy_without_intensity_j"].append(en.host_no_intensity[sel].sum(axis=0))
    return pa.table({k2: np.concatenate(v) for k2, v in rows.items()})


def _service(wl: Workload, sch, edges: np.ndarray, n_hosts: int) -> pa.Table:
    t = edges[:-1]
    seg_end = sch.seg_wall + (sch.seg_off1 - sch.seg_off0)
    running = np.searchsorted(np.sort(sch.seg_wall), t, "right") - np.searchsorted(np.sort(seg_end), t, "right")
    submitted = np.searchsorted(np.sort(wl.submit), t, "right")
    fin = np.sort(sch.finish[sch.finish >= 0])
    finished = np.searchsorted(fin, t, "right")
    return pa.table({"timestamp": t, "hosts_up": np.full(t.size, n_hosts), "tasks_running": running,
                     "tasks_waiting": submitted - finished - running, "tasks_finished": finished})
