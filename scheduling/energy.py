"""Energy and carbon, integrated exactly over fragment boundaries (no time stepping).

Each run segment maps its fragments to wall-clock *pieces* (host, start, end, CPU usage, GPU
usage). On each host the CPU demand D(t) is the sum of the pieces running at t: a step function
that changes only at piece boundaries, so power P(min(D, capacity) / capacity) is a step
function too and

    E_host = sum over steps of P x dt            [J]
    C_host = sum over steps of P x dt x I(t) / 3.6e6   [gCO2e], I from the host's power source

where the steps are also cut at carbon changes and export-interval edges. A host with GPUs does
the same a second time for its GPUs: GPU demand G(t) is the sum of the pieces' GPU usage, the
host's GPU capacity is GPU count x cores x MHz per core, each of its ``count`` GPUs runs at
u = min(G, capacity) / capacity (the demand spread evenly) and draws the GPU power model's
P(u), so the GPUs draw count x P(u). A task's share of a step is its usage / D (whole power
split by demand share), per resource; a step with D = 0 (idle) belongs to no task
(``unattributed``). Demand above capacity is capped and counted (``demand_capped_ms``,
``gpu_demand_capped_ms``); energy where the trace has no value counts as
``energy_without_intensity_j`` and carries no carbon. Usage is held in integer milli-MHz so the
running sums are exact. Hosts are processed in chunks to bound memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduling.engine import Schedule
from scheduling.topology import Hosts
from scheduling.workload import Workload

SHIFT = 40  # bits for time since the start: 2^40 ms is 34 years
CHUNK_HOSTS = 64


@dataclass
class Energy:
    edges: np.ndarray  # interval edges (ms), K + 1
    host_energy: np.ndarray  # (H, K) J
    host_carbon: np.ndarray  # (H, K) g
    host_util: np.ndarray  # (H, K) mean CPU utilisation
    host_no_intensity: np.ndarray  # (H, K) J without an intensity
    task_energy: np.ndarray  # (T,) J
    task_carbon: np.ndarray  # (T,) g
    host_gpu_util: np.ndarray  # (H, K) mean GPU utilisation (0 for a host without GPUs)
    host_gpu_energy: np.ndarray  # (H, K) J drawn by the GPUs (included in host_energy)
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Resource:
    """CPU or GPU: per host capacity (MHz), power model and number of devices drawing it."""

    capacity: np.ndarray
    models: list
    devices: np.ndarray
    capped: str  # the counter of capped demand time


def pieces(wl: Workload, sch: Schedule) -> tuple[np.ndarray, ...]:
    """(task, host, wall start, wall end, CPU usage, GPU usage; milli-MHz) of every fragment
    piece that ran (GPU usage None for a workload without a ``gpu_usage`` column)."""
    fs = np.concatenate([[0], np.cumsum(wl.frag_duration)])
    f_start, f_end = fs[:-1], fs[1:]
    base = fs[wl.frag_start[:-1]]  # global task-time start of each task
    g0 = base[sch.seg_task] + sch.seg_off0
    g1 = base[sch.seg_task] + sch.seg_off1
    lo = np.searchsorted(f_end, g0, side="right")
    hi = np.searchsorted(f_start, g1, side="left")
    counts = np.maximum(hi - lo, 0)
    seg = np.repeat(np.arange(counts.size), counts)
    first = np.concatenate([[0], np.cumsum(counts)])[:-1]
    j = np.repeat(lo - first, counts) + np.arange(int(counts.sum()))
    a = np.maximum(f_start[j], g0[seg])
    b = np.minimum(f_end[j], g1[seg])
    keep = b > a
    seg, j, a, b = seg[keep], j[keep], a[keep], b[keep]
    wall0 = sch.seg_wall[seg] + (a - g0[seg])
    wall1 = wall0 + (b - a)
    usage = np.rint(wl.frag_usage[j] * 1000).astype(np.int64)
    gpu = None if wl.frag_gpu_usage is None else np.rint(wl.frag_gpu_usage[j] * 1000).astype(np.int64)
    return sch.seg_task[seg], sch.seg_host[seg], wall0, wall1, usage, gpu


def integrate(wl: Workload, hosts: Hosts, sch: Schedule, t_begin: int, t_end: int,
              interval_ms: int) -> Energy:
    k = max(1, -(-(t_end - t_begin) // interval_ms))
    edges = t_begin + interval_ms * np.arange(k + 1, dtype=np.int64)
    edges[-1] = max(edges[-1], t_end)
    edges = np.minimum(edges, max(t_end, t_begin))
    edges[-1] = max(t_end, t_begin)  # an empty window (nothing ran) integrates to zero
    task, host, w0, w1, use, guse = pieces(wl, sch)
    grids = [np.zeros((hosts.n, k)) for _ in range(6)]
    out = Energy(edges, *grids[:4], np.zeros(wl.n), np.zeros(wl.n), *grids[4:],
                 {"demand_capped_ms": 0, "gpu_demand_capped_ms": 0, "gpu_demand_without_gpus_ms": 0})
    cpu = _Resource(hosts.capacity, hosts.power, np.ones(hosts.n, dtype=np.int64), "demand_capped_ms")
    _integrate(out, hosts, cpu, np.arange(hosts.n), (task, host, w0, w1, use), t_begin, edges,
               out.host_util, None)
    # GPU usage on a host without GPUs (a policy that ignores GPUs put it there) draws nothing
    if guse is None:
        guse = np.zeros(0, dtype=np.int64)
        task = host = w0 = w1 = guse  # no GPU pieces: GPU hosts draw idle GPU power only
    lost = (guse > 0) & (hosts.gpu_cores[host] == 0)
    out.counters["gpu_demand_without_gpus_ms"] = int((w1[lost] - w0[lost]).sum())
    gpu_hosts = np.flatnonzero(hosts.gpu_cores > 0)
    if gpu_hosts.size:  # idle GPUs draw power too, so every GPU host is integrated
        keep = (guse > 0) & ~lost
        gpu = _Resource(hosts.gpu_cores * hosts.gpu_speed, hosts.gpu_power, hosts.gpu_count,
                        "gpu_demand_capped_ms")
        _integrate(out, hosts, gpu, gpu_hosts, (task[keep], host[keep], w0[keep], w1[keep], guse[keep]),
                   t_begin, edges, out.host_gpu_util, out.host_gpu_energy)
    return out


def _integrate(out: Energy, hosts: Hosts, res: _Resource, which: np.ndarray, cols: tuple,
               t_begin: int, edges: np.ndarray, util_out: np.ndarray, energy_out: np.ndarray | None) -> None:
    """One resource over the hosts ``which`` (sorted), in chunks of CHUNK_HOSTS hosts."""
    task, host, w0, w1, use = cols
    order = np.argsort(host, kind="stable")
    task, host, w0, w1, use = task[order], host[order], w0[order], w1[order], use[order]
    for c0 in range(0, which.size, CHUNK_HOSTS):
        hs_arr = which[c0: c0 + CHUNK_HOSTS]
        lo, hi = np.searchsorted(host, [hs_arr[0], hs_arr[-1] + 1])
        _chunk(out, hosts, res, hs_arr, task[lo:hi], host[lo:hi], w0[lo:hi], w1[lo:hi], use[lo:hi],
               t_begin, edges, util_out, energy_out)


def _chunk(out: Energy, hosts: Hosts, res: _Resource, hs_arr: np.ndarray, task, host, w0, w1, use,
           t_begin, edges, util_out: np.ndarray, energy_out: np.ndarray | None) -> None:
    # boundary events (delta 0): interval edges and carbon changes of each host's power source
    marks_h, marks_t = [], []
    for h in hs_arr:
        trace = hosts.traces[hosts.cluster[h]]
        pts = edges if trace is None else np.union1d(edges, trace.change_points(edges[0], edges[-1]))
        marks_h.append(np.full(pts.size, h))
        marks_t.append(pts)
    mh, mt = np.concatenate(marks_h), np.concatenate(marks_t)
    ev_h = np.concatenate([host, host, mh])
    ev_t = np.concatenate([w0, w1, mt])
    delta = np.concatenate([use, -use, np.zeros(mt.size, dtype=np.int64)])
    keys = (ev_h.astype(np.int64) << SHIFT) | (ev_t - t_begin)
    perm = np.argsort(keys, kind="stable")
    keys, ev_h, ev_t, delta = keys[perm], ev_h[perm], ev_t[perm], delta[perm]
    demand = np.cumsum(delta)  # exact: integers, and each host's deltas sum to zero
    same = np.empty(keys.size, dtype=bool)
    same[:-1] = ev_h[1:] == ev_h[:-1]
    same[-1] = False
    dt = np.where(same, np.diff(ev_t, append=ev_t[-1]), 0)
    cap = (res.capacity[ev_h] * 1000).astype(np.int64)
    capped = np.minimum(demand, cap)
    out.counters[res.capped] += int(dt[demand > cap].sum())
    util = capped / np.maximum(cap, 1)
    watts = np.empty(keys.size)
    for model in {id(m): m for m in (res.models[h] for h in hs_arr)}.values():
        sel = np.array([res.models[h] is model for h in range(hosts.n)])[ev_h]
        watts[sel] = model.watts(util[sel])
    watts *= res.devices[ev_h]
    joules = watts * dt / 1000.0
    inten = np.full(keys.size, np.nan)
    for c in np.unique(hosts.cluster[hs_arr]):
        trace = hosts.traces[c]
        if trace is not None:
            sel = hosts.cluster[ev_h] == c
            inten[sel] = trace.value_at(ev_t[sel])
    known = ~np.isnan(inten)
    grams = np.where(known, joules * np.nan_to_num(inten) / 3.6e6, 0.0)
    no_int = np.where(known, 0.0, joules)
    cum = {name: np.concatenate([[0.0], np.cumsum(v)]) for name, v in
           (("e", joules), ("c", grams), ("u", util * dt), ("n", no_int))}
    # per host and interval: differences of the running sums at the interval edges
    for h in hs_arr:
        ek = (np.int64(h) << SHIFT) | (edges - t_begin)
        idx = np.searchsorted(keys, ek, side="left")
        e = np.diff(cum["e"][idx])
        out.host_energy[h] += e
        if energy_out is not None:
            energy_out[h] = e
        out.host_carbon[h] += np.diff(cum["c"][idx])
        util_out[h] = np.diff(cum["u"][idx]) / np.maximum(np.diff(edges), 1)
        out.host_no_intensity[h] += np.diff(cum["n"][idx])
    # per task: its usage share of each step's power
    per = np.where(demand > 0, joules / np.maximum(demand, 1), 0.0)
    per_c = np.where(demand > 0, grams / np.maximum(demand, 1), 0.0)
    cg, cgc = np.concatenate([[0.0], np.cumsum(per)]), np.concatenate([[0.0], np.cumsum(per_c)])
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    n = task.size
    i0, i1 = inv[:n], inv[n: 2 * n]
    # a piece starts after the events sorted before it at the same instant and ends before i1
    out.task_energy += np.bincount(task, weights=use * (cg[i1] - cg[i0]), minlength=out.task_energy.size)
    out.task_carbon += np.bincount(task, weights=use * (cgc[i1] - cgc[i0]), minlength=out.task_carbon.size)
