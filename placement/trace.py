"""Evaluation traces: hourly intensities per region plus a job list, as arrays.

The JSON form (the issue's format) is::

    {"method": "average", "regions": {"DE": [gCO2e/kWh per hour, ...], ...},
     "jobs": [{"id", "submit", "duration", "energy_kwh", "slack", "regions"?, "home"?}]}

``submit``, ``duration`` and ``slack`` are whole hours and ``submit`` indexes the hourly
arrays. ``regions`` defaults to every region and ``home`` to the first allowed one. The
evaluator never sees this JSON: it sees a :class:`Trace` of numpy columns, so 100,000 jobs
cost one array each rather than 100,000 dicts.

The signal method is recorded truthfully: an average-mix trace (life-cycle or direct) is an
*accounting-basis* figure, a marginal trace a *decision* figure (the distinction the GHG
Protocol scope 2 guidance and WattTime draw between attributional and consequential signals).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from schema.canonical import canonical_json, sha256_tag

#: signal method -> what a figure computed on it may be called
METHOD_BASIS: dict[str, str] = {
    "average": "accounting",
    "average-lifecycle": "accounting",
    "average-direct": "accounting",
    "marginal": "decision",
}
MAX_HOURS = 10_000_000  # > 1,000 years of hours: anything larger is a unit mistake
PACKAGED_CSV = Path(__file__).parent / "data" / "grid-intensity-2022-hourly.csv"


class TraceError(ValueError):
    """A trace or job list that cannot be evaluated; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Trace:
    """A workload over hourly intensity arrays, in columns.

    ``intensity`` is (regions, hours); per-job columns are aligned; ``allowed`` is a
    (jobs, regions) mask and ``home`` an index into ``regions``.
    """

    method: str
    region_names: tuple[str, ...]
    intensity: np.ndarray
    job_ids: tuple[str, ...]
    submit: np.ndarray
    duration: np.ndarray
    energy_kwh: np.ndarray
    slack: np.ndarray
    allowed: np.ndarray
    home: np.ndarray
    synthetic: bool = False
    digest: str = ""

    @property
    def basis(self) -> str:
        return METHOD_BASIS[self.method]

    @property
    def hours(self) -> int:
        return int(self.intensity.shape[1])


def _whole(job: Mapping[str, Any], key: str, jid: str, minimum: int) -> int:
    value = job.get(key, 0 if key == "slack" else None)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise TraceError(f"job {jid!r}: {key!r} must be a whole number of hours, got {value!r}")
    if not minimum <= value <= MAX_HOURS:
        raise TraceError(f"job {jid!r}: {key!r} must be in [{minimum}, {MAX_HOURS}], got {value!r}")
    return int(value)


def _job_columns(jobs: Sequence[Mapping[str, Any]], names: tuple[str, ...], hours: int):
    index = {n: i for i, n in enumerate(names)}
    n = len(jobs)
    ids: list[str] = []
    submit = np.empty(n, np.int64)
    duration = np.empty(n, np.int64)
    slack = np.empty(n, np.int64)
    energy = np.empty(n, np.float64)
    allowed = np.zeros((n, len(names)), bool)
    home = np.empty(n, np.int64)
    for k, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise TraceError(f"jobs[{k}] must be an object, got {type(job).__name__}")
        jid = str(job.get("id", f"#{k}"))
        ids.append(jid)
        submit[k] = _whole(job, "submit", jid, 0)
        duration[k] = _whole(job, "duration", jid, 1)
        slack[k] = _whole(job, "slack", jid, 0)
        e = job.get("energy_kwh")
        if isinstance(e, bool) or not isinstance(e, int | float) or not e >= 0 or e == float("inf"):
            raise TraceError(f"job {jid!r}: 'energy_kwh' must be a finite number >= 0, got {e!r}")
        energy[k] = float(e)
        regs = job.get("regions")
        regs = list(names) if regs is None else regs  # absent: every region; [] is a mistake
        if not isinstance(regs, list) or not regs or not all(isinstance(r, str) for r in regs):
            raise TraceError(
                f"job {jid!r}: 'regions' must be a non-empty list of region names (or left "
                f"out for every region), got {regs!r}"
            )
        unknown = [r for r in regs if r not in index]
        if unknown:
            raise TraceError(f"job {jid!r}: unknown region(s) {unknown}; the trace has {list(names)}")
        allowed[k, [index[r] for r in regs]] = True
        h = job.get("home", regs[0])
        if not isinstance(h, str) or h not in regs:
            raise TraceError(f"job {jid!r}: home {h!r} is not one of its allowed regions {regs}")
        home[k] = index[h]
        end = submit[k] + slack[k] + duration[k]
        if end > hours:
            raise TraceError(
                f"job {jid!r}: its window (submit {submit[k]} + slack {slack[k]} + duration "
                f"{duration[k]} = hour {end}) runs past the trace's {hours} hours; shorten the "
                "slack or extend the trace"
            )
    return tuple(ids), submit, duration, energy, slack, allowed, home


def trace_digest(doc: Mapping[str, Any]) -> str:
    """``sha256:`` over the canonical JSON of the trace document (what an audit event cites).

    The ``synthetic`` flag is left out: the digest names the data (method, regions, jobs), and
    the flag is recorded beside it. So deleting or flipping the flag on the sample trace does
    not change its digest, and the sample is still recognised as synthetic.
    """
    return sha256_tag(canonical_json({k: v for k, v in doc.items() if k != "synthetic"}))


def parse_trace(doc: Mapping[str, Any], *, synthetic: bool | None = None) -> Trace:
    """Validate a trace document and turn it into columns; errors name the field and the job."""
    if not isinstance(doc, Mapping):
        raise TraceError("a trace must be a JSON object with 'method', 'regions' and 'jobs'")
    method = doc.get("method")
    if not isinstance(method, str) or method not in METHOD_BASIS:
        raise TraceError(
            f"trace 'method' is {method!r}; say which signal the intensities are: one of "
            f"{sorted(METHOD_BASIS)}"
        )
    regions = doc.get("regions")
    if not isinstance(regions, Mapping) or not regions:
        raise TraceError("trace 'regions' must map at least one region name to hourly values")
    names = tuple(str(r) for r in regions)
    lengths = {}
    for name, values in regions.items():
        if not isinstance(values, Sequence) or isinstance(values, str | bytes):
            raise TraceError(f"region {name!r} must be a list of hourly values, got {values!r:.60}")
        lengths[name] = len(values)
    if len(set(lengths.values())) > 1:
        first, n = next(iter(lengths.items()))
        odd = next(r for r, k in lengths.items() if k != n)
        raise TraceError(
            f"every region needs the same number of hourly values: {first!r} has {n}, "
            f"{odd!r} has {lengths[odd]}; cut the traces to a common span"
        )
    try:
        arr = np.array([list(v) for v in regions.values()], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TraceError(
            f"trace 'regions' must hold equal-length lists of numbers per region ({exc})"
        ) from None
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise TraceError("every region needs the same number (> 0) of hourly values")
    if not np.isfinite(arr).all() or (arr < 0).any():
        r, h = np.argwhere(~np.isfinite(arr) | (arr < 0))[0]
        raise TraceError(f"region {names[r]!r} hour {h}: intensity {arr[r, h]!r} is not >= 0")
    jobs = doc.get("jobs")
    if not isinstance(jobs, Sequence) or isinstance(jobs, str | bytes) or not jobs:
        raise TraceError("trace 'jobs' must be a non-empty list of job objects")
    cols = _job_columns(jobs, names, arr.shape[1])
    flag = bool(doc.get("synthetic", False)) if synthetic is None else synthetic
    return Trace(method, names, arr, *cols, synthetic=flag, digest=trace_digest(doc))


def load_hourly_csv(path: Path = PACKAGED_CSV, zones: Sequence[str] | None = None):
    """Read an hourly wide CSV (hour column, then one column per zone) into (names, array)."""
    with Path(path).open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    wanted = list(zones) if zones else header[1:]
    missing = [z for z in wanted if z not in header[1:]]
    if missing:
        raise TraceError(f"{path}: no column for zone(s) {missing}; it has {header[1:]}")
    cols = [header.index(z) for z in wanted]
    data = np.array([[float(row[c]) for c in cols] for row in rows], dtype=np.float64)
    return tuple(wanted), np.ascontiguousarray(data.T)


def trace_from_csv(
    jobs: Sequence[Mapping[str, Any]],
    *,
    csv_path: Path = PACKAGED_CSV,
    zones: Sequence[str] | None = None,
    method: str = "average-lifecycle",
    hours: slice | None = None,
) -> dict[str, Any]:
    """Build a trace document from an hourly CSV and a job list (``submit`` indexes ``hours``).

    The packaged CSV is Electricity Maps' life-cycle average mix, hence the default method.
    """
    names, arr = load_hourly_csv(csv_path, zones)
    if hours is not None:
        arr = arr[:, hours]
    doc = {
        "method": method,
        "regions": {n: [float(x) for x in arr[i]] for i, n in enumerate(names)},
        "jobs": [dict(j) for j in jobs],
    }
    parse_trace(doc)  # fail here, naming the job, rather than at evaluation
    return doc


def trace_from_arrays(
    method: str,
    names: Sequence[str],
    intensity: np.ndarray,
    submit: np.ndarray,
    duration: np.ndarray,
    energy_kwh: np.ndarray,
    slack: np.ndarray,
    home: np.ndarray | None = None,
    allowed: np.ndarray | None = None,
) -> Trace:
    """A :class:`Trace` straight from columns (benchmarks: no per-job dicts, no digest)."""
    n, r = len(submit), len(names)
    end = submit + slack + duration
    if (end > intensity.shape[1]).any():
        k = int(np.argmax(end > intensity.shape[1]))
        raise TraceError(f"job #{k}: its window ends at hour {end[k]}, past the trace")
    return Trace(
        method,
        tuple(names),
        np.asarray(intensity, np.float64),
        tuple(f"#{k}" for k in range(n)),
        submit.astype(np.int64),
        duration.astype(np.int64),
        energy_kwh.astype(np.float64),
        slack.astype(np.int64),
        np.ones((n, r), bool) if allowed is None else allowed,
        np.zeros(n, np.int64) if home is None else home.astype(np.int64),
    )
