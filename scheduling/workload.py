"""Workload traces (OpenDC's ``tasks.parquet`` + ``fragments.parquet``) as numpy columns.

A task runs its fragments in file order, each for its ``duration`` (ms) at ``cpu_usage`` (MHz):
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
        return Workload(**cols, frag_start=starts.astype(np.int64),
                        frag_duration=self.frag_duration[pick], frag_usage=self.frag_usage[pick],
                        counters=dict(self.counters))


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
    for dep in ("parents", "children"):
        if dep in tasks.column_names and any(v for v in tasks.column(dep).to_pylist()):
            raise SpecError(f"workload {p}: tasks have {dep}: recognised but not supported yet "
                            "(workflow dependencies are not simulated; every task would start at its "
                            "submission time)")
    frags = pq.read_table(p / "fragments.parquet", columns=["id", "duration", "cpu_usage"])
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
    counts = np.bincount(task_of, minlength=tid.size)
    if np.any(fdur < 0) or np.any(fuse < 0):
        raise SpecError(f"workload {p}: a fragment has a negative duration or cpu_usage")
    submit = _col(tasks, "submission_time", np.int64)
    wl = Workload(
        task_id=tid, submit=submit, duration=_col(tasks, "duration", np.int64),
        cpu_count=_col(tasks, "cpu_count", np.int64), cpu_capacity=_col(tasks, "cpu_capacity", float),
        memory=_col(tasks, "mem_capacity", float), gpu_count=_col(tasks, "gpu_count", np.int64, 0),
        gpu_capacity=_col(tasks, "gpu_capacity", float, 0.0),
        deferrable=_col(tasks, "deferrable", bool, False), deadline=_col(tasks, "deadline", np.int64, -1),
        frag_start=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        frag_duration=fdur, frag_usage=fuse, counters=counters,
    )
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
