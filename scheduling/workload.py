"""Workload traces (OpenDC's ``tasks.parquet`` + ``fragments.parquet``) as numpy columns.

A task runs its fragments in file order, each for its ``duration`` (ms) at ``cpu_usage`` (MHz)
and, when the file has the column, ``gpu_usage`` (MHz of GPU):
the task's run length is the sum of its fragments (OpenDC's NoDelay scaling), and a task whose
``duration`` column disagrees is counted (``duration_mismatch``). Fragments of one task need not
be contiguous in the file; they are grouped stably by task id.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from scheduling.topology import SpecError


@dataclass
class Workload:
    task_id: np.ndarray  # int64
    submit: np.ndarray  # int64 ms
    duration: np.ndarray  # int64 ms, the `duration` column
    cpu_count: np.ndarray  # int64
    cpu_capacity: np.ndarray  # MHz
    memory: np.ndarray  # float64
    gpu_count: np.ndarray  # int64
    gpu_capacity: np.ndarray  # MHz
    deferrable: np.ndarray  # bool
    deadline: np.ndarray  # int64 ms, -1 for none
    frag_start: np.ndarray  # int64 index: fragments of task i are frag_start[i]:frag_start[i+1]
    frag_duration: np.ndarray  # int64 ms
    frag_usage: np.ndarray  # MHz
    counters: dict[str, int] = field(default_factory=dict)
    frag_gpu_usage: np.ndarray | None = None  # MHz; None when the file has no gpu_usage column
    #: workflow dependencies, None without: the parent *ids* of task i are dep_ids[dep_start[i]:dep_start[i+1]]
    dep_start: np.ndarray | None = None
    dep_ids: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.task_id.size)

    @property
    def runtime(self) -> np.ndarray:
        """Run length of each task: the sum of its fragments' durations (ms)."""
        csum = np.concatenate([[0], np.cumsum(self.frag_duration)])
        return csum[self.frag_start[1:]] - csum[self.frag_start[:-1]]

    def take(self, idx: np.ndarray) -> Workload:
        """The tasks ``idx`` (in that order) with their fragments."""
        idx = np.asarray(idx, dtype=np.int64)
        lo, hi = self.frag_start[idx], self.frag_start[idx + 1]
        lens = hi - lo
        starts = np.concatenate([[0], np.cumsum(lens)])
        pick = np.repeat(lo - starts[:-1], lens) + np.arange(int(starts[-1]))
        cols = {k: getattr(self, k)[idx] for k in ("task_id", "submit", "duration", "cpu_count",
                                                    "cpu_capacity", "memory", "gpu_count",
                                                    "gpu_capacity", "deferrable", "deadline")}
        gpu = None if self.frag_gpu_usage is None else self.frag_gpu_usage[pick]
        dep_start = dep_ids = None
        if self.dep_start is not None:
            dep_start, dpick = _csr_take(self.dep_start, idx)
            dep_ids = self.dep_ids[dpick]
        return Workload(**cols, frag_start=starts.astype(np.int64),
                        frag_duration=self.frag_duration[pick], frag_usage=self.frag_usage[pick],
                        counters=dict(self.counters), frag_gpu_usage=gpu, dep_start=dep_start,
                        dep_ids=dep_ids)

    def dependencies(self) -> tuple[np.ndarray, np.ndarray]:
        """(parent, child) task *indices* of every dependency edge (empty without)."""
        if self.dep_start is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        child = np.repeat(np.arange(self.n), np.diff(self.dep_start))
        pos = np.argsort(self.task_id, kind="stable")
        at = np.searchsorted(self.task_id[pos], self.dep_ids)
        return pos[np.minimum(at, self.n - 1)], child


def _csr_take(start: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``idx`` of a CSR index: (their new start array, the positions of their entries)."""
    lo, hi = start[idx], start[idx + 1]
    lens = hi - lo
    new = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return new, np.repeat(lo - new[:-1], lens) + np.arange(int(new[-1]))


def topological_order(n: int, parent: np.ndarray, child: np.ndarray) -> np.ndarray | None:
    """Task indices with every parent before its children, or None if the edges hold a cycle."""
    from collections import deque

    indeg = np.bincount(child, minlength=n)
    by_parent = np.argsort(parent, kind="stable")
    starts = np.searchsorted(parent[by_parent], np.arange(n + 1))
    kids = child[by_parent].tolist()
    ready = deque(np.flatnonzero(indeg == 0).tolist())
    left = indeg.tolist()
    order = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for c in kids[starts[i]:starts[i + 1]]:
            left[c] -= 1
            if left[c] == 0:
                ready.append(c)
    return np.asarray(order, dtype=np.int64) if len(order) == n else None


def _dependencies(p: Path, tasks, tid: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """OpenDC's ``parents`` (and ``children``) list columns -> CSR of parent ids, checked: every
    parent is a task, ``children`` (when given) is exactly the inverse of ``parents``, no cycle."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def pairs(name: str) -> tuple[np.ndarray, np.ndarray] | None:
        if name not in tasks.column_names:
            return None
        col = tasks.column(name).combine_chunks()
        if not pa.types.is_list(col.type) and not pa.types.is_large_list(col.type):
            raise SpecError(f"workload {p}: column {name!r} must be a list of task ids")
        lens = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = np.asarray(pc.list_flatten(col).to_numpy(zero_copy_only=False), dtype=np.int64)
        return np.repeat(tid, lens), flat  # (owner id, listed id)

    par, chi = pairs("parents"), pairs("children")
    if (par is None or par[1].size == 0) and (chi is None or chi[1].size == 0):
        return None, None
    if par is None or par[1].size == 0:
        raise SpecError(f"workload {p}: tasks list children but no parents; give each child's "
                        "parents (OpenDC blocks a task on its parents column)")
    known = np.sort(tid)
    for owner, listed, what in ((*par, "parent"), *([(*chi, "child")] if chi is not None else [])):
        bad = ~np.isin(listed, known)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise SpecError(f"workload {p}: task {int(owner[k])} names {what} {int(listed[k])}, "
                            "which is not a task of this workload")
    edges = np.unique(np.stack([par[1], par[0]], axis=1), axis=0)  # (parent id, child id)
    if np.any(edges[:, 0] == edges[:, 1]):
        raise SpecError(f"workload {p}: task {int(edges[edges[:, 0] == edges[:, 1]][0, 0])} is its own parent")
    if chi is not None:  # OpenDC unblocks a child from its parent's children list
        inverse = np.unique(np.stack([chi[0], chi[1]], axis=1), axis=0).reshape(-1, 2)
        if inverse.shape != edges.shape or not np.array_equal(inverse, edges):
            a = {tuple(e) for e in edges.tolist()}
            b = {tuple(e) for e in inverse.tolist()}
            pr, ch = sorted(a ^ b)[0]
            side = "parents" if (pr, ch) in a else "children"
            raise SpecError(f"workload {p}: task {ch}'s parents and task {pr}'s children disagree "
                            f"(the pair is only in {side}); make children the inverse of parents")
    # CSR over the file's task order, parents by id
    pos = np.searchsorted(known, edges[:, 1])
    order = np.argsort(tid, kind="stable")
    row = order[pos]  # file row of each edge's child
    by_row = np.argsort(row, kind="stable")
    dep_start = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=tid.size))]).astype(np.int64)
    dep_ids = edges[by_row, 0].astype(np.int64)
    parent_row = order[np.searchsorted(known, dep_ids)]
    child_row = row[by_row]
    topo = topological_order(tid.size, parent_row, child_row)
    if topo is None:
        indeg = np.bincount(child_row, minlength=tid.size)
        stuck = int(tid[np.flatnonzero(indeg > 0)[0]])
        raise SpecError(f"workload {p}: the dependencies hold a cycle (through task {stuck} or its "
                        "ancestors); a task in a cycle could never start")
    return dep_start, dep_ids



def _col(table, name: str, dtype, default=None) -> np.ndarray:
    if name not in table.column_names:
        if default is None:
            raise SpecError(f"workload: column {name!r} is missing")
        return np.full(table.num_rows, default, dtype=dtype)
    col = table.column(name)
    import pyarrow as pa

    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.timestamp("ms")).cast(pa.int64())
    arr = col.to_numpy(zero_copy_only=False)
    if arr.dtype == object:  # nulls
        arr = np.array([default if v is None else v for v in arr])
    return np.asarray(arr, dtype=dtype)


def read_workload(folder: str | Path) -> Workload:
    import pyarrow.parquet as pq

    p = Path(folder)
    for name in ("tasks.parquet", "fragments.parquet"):
        if not (p / name).is_file():
            raise SpecError(f"workload {p}: no {name} (a workload folder holds tasks.parquet + fragments.parquet)")
    tasks = pq.read_table(p / "tasks.parquet")
    fcols = ["id", "duration", "cpu_usage"]
    has_gpu = "gpu_usage" in pq.read_schema(p / "fragments.parquet").names
    frags = pq.read_table(p / "fragments.parquet", columns=fcols + ["gpu_usage"] * has_gpu)
    tid = _col(tasks, "id", np.int64)
    order = np.argsort(tid, kind="stable")
    if np.any(np.diff(tid[order]) == 0):
        raise SpecError(f"workload {p}: task ids are not unique")
    fid = _col(frags, "id", np.int64)
    fpos = np.searchsorted(tid[order], fid)
    known = (fpos < tid.size) & (tid[order][np.minimum(fpos, tid.size - 1)] == fid)
    counters = {"fragments_without_task": int((~known).sum())}
    task_of = order[fpos[known]]  # row index of each fragment's task
    forder = np.argsort(task_of, kind="stable")
    fdur = _col(frags, "duration", np.int64)[known][forder]
    fuse = _col(frags, "cpu_usage", float)[known][forder]
    # a null gpu_usage (NaN here) is no GPU use
    fgpu = np.nan_to_num(_col(frags, "gpu_usage", float, 0.0)[known][forder]) if has_gpu else None
    counts = np.bincount(task_of, minlength=tid.size)
    if np.any(fdur < 0) or np.any(fuse < 0) or (fgpu is not None and np.any(fgpu < 0)):
        raise SpecError(f"workload {p}: a fragment has a negative duration, cpu_usage or gpu_usage")
    submit = _col(tasks, "submission_time", np.int64)
    wl = Workload(
        task_id=tid, submit=submit, duration=_col(tasks, "duration", np.int64),
        cpu_count=_col(tasks, "cpu_count", np.int64), cpu_capacity=_col(tasks, "cpu_capacity", float),
        memory=_col(tasks, "mem_capacity", float), gpu_count=_col(tasks, "gpu_count", np.int64, 0),
        gpu_capacity=_col(tasks, "gpu_capacity", float, 0.0),
        deferrable=_col(tasks, "deferrable", bool, False), deadline=_col(tasks, "deadline", np.int64, -1),
        frag_start=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        frag_duration=fdur, frag_usage=fuse, counters=counters, frag_gpu_usage=fgpu,
    )
    wl.dep_start, wl.dep_ids = _dependencies(p, tasks, tid)
    wl.counters["tasks_without_fragments"] = int((counts == 0).sum())
    wl.counters["duration_mismatch"] = int((wl.runtime != wl.duration).sum())
    by_submit = np.argsort(wl.submit, kind="stable")
    return wl.take(by_submit)


def prepare(wl: Workload, *, sample_fraction: float = 1.0, seed: int = 0,
            submission_time_ms: int | None = None, defer_all: bool = False) -> Workload:
    """Apply the experiment's workload options, in OpenDC's order: realign, then sample.

    - ``submissionTime``: every submission (and deadline) moves by the same shift so the first
      submission is at that instant.
    - ``sampleFraction`` f < 1: tasks drawn without replacement in a seeded random order until
      their CPU load (sum of usage x duration) reaches f of the total (OpenDC draws *with*
      replacement, so a task can appear twice there).
    - ``deferAll``: every task deferrable, ``deadline = submission + 3 x duration``.
    """
    out = replace(wl, counters=dict(wl.counters))
    if submission_time_ms is not None and wl.n:
        shift = submission_time_ms - int(wl.submit.min())
        out.submit = wl.submit + shift
        out.deadline = np.where(wl.deadline >= 0, wl.deadline + shift, -1)
    if defer_all:
        out.deferrable = np.ones(out.n, dtype=bool)
        out.deadline = out.submit + 3 * out.duration
    if not 0 < sample_fraction <= 1:
        raise SpecError(f"sampleFraction {sample_fraction!r}: must be in (0, 1]")
    if sample_fraction < 1 and wl.dep_start is not None:
        raise SpecError(f"sampleFraction {sample_fraction!r} with workflow dependencies: a sampled-out "
                        "parent would leave its children waiting forever; use 1 for a workflow")
    if sample_fraction < 1:
        csum = np.concatenate([[0.0], np.cumsum(out.frag_duration * out.frag_usage)])
        load = csum[out.frag_start[1:]] - csum[out.frag_start[:-1]]
        perm = np.random.default_rng(seed).permutation(out.n)
        reached = np.cumsum(load[perm]) >= sample_fraction * load.sum()
        k = int(np.argmax(reached)) + 1 if reached.any() else out.n
        chosen = np.sort(perm[:k])  # back in submission order
        out = out.take(chosen)
        out.counters["sampled_out"] = wl.n - k
    return out
