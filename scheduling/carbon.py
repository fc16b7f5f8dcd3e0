"""Carbon-intensity traces: piecewise-constant gCO2e/kWh over absolute time (ms, UTC).

Row *i* of a trace holds from its timestamp to the next row's; the last row holds for the
trace's step (the median spacing of its rows, or one hour for a one-row trace). Outside
[first row, last row + step) the intensity is **missing** (NaN), never the first or last value
forever: energy spent there is reported as energy without an intensity, and a carbon-aware
rule reading a missing value does not defer (docs/simulation.md, "Carbon traces").
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

HOUR_MS = 3_600_000


class TraceError(ValueError):
    """A carbon trace that cannot be read; the message names the file and what to fix."""


@dataclass(frozen=True)
class CarbonTrace:
    """``t_ms[i]`` (int64, strictly increasing) starts row ``i`` of value ``values[i]``."""

    name: str
    t_ms: np.ndarray
    values: np.ndarray
    step_ms: int

    @property
    def end_ms(self) -> int:
        return int(self.t_ms[-1]) + self.step_ms

    def value_at(self, t_ms: np.ndarray | int) -> np.ndarray:
        """Intensity at each time; NaN outside the trace."""
        t = np.asarray(t_ms, dtype=np.int64)
        idx = np.searchsorted(self.t_ms, t, side="right") - 1
        inside = (idx >= 0) & (t < self.end_ms)
        out = np.full(t.shape, np.nan)
        out[inside] = self.values[idx[inside]]
        return out

    def change_points(self, lo_ms: int, hi_ms: int) -> np.ndarray:
        """Row starts (and the trace end) inside (lo, hi): instants where the value changes."""
        pts = np.append(self.t_ms, self.end_ms)
        return pts[(pts > lo_ms) & (pts < hi_ms)]

    def until(self, t_ms: int) -> CarbonTrace:
        """The rows that started at or before ``t_ms``: what was observable then (as-of view)."""
        n = int(np.searchsorted(self.t_ms, t_ms, side="right"))
        if n == 0:
            return CarbonTrace(self.name, self.t_ms[:0], self.values[:0], self.step_ms)
        return CarbonTrace(self.name, self.t_ms[:n], self.values[:n], self.step_ms)

    def replaced_after(self, t_ms: int, values: np.ndarray) -> CarbonTrace:
        """A copy whose rows starting after ``t_ms`` get ``values`` (for no-future tests)."""
        out = self.values.copy()
        later = self.t_ms > t_ms
        out[later] = np.asarray(values, dtype=float)[: int(later.sum())]
        return CarbonTrace(self.name, self.t_ms, out, self.step_ms)


def make_trace(name: str, t_ms: np.ndarray, values: np.ndarray) -> CarbonTrace:
    """Validate and build a trace: sorted, unique, finite, non-negative values."""
    t = np.asarray(t_ms, dtype=np.int64)
    v = np.asarray(values, dtype=float)
    if t.size == 0:
        raise TraceError(f"{name}: the carbon trace has no rows; give at least one row")
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    if np.any(np.diff(t) == 0):
        dup = int(t[np.flatnonzero(np.diff(t) == 0)[0]])
        raise TraceError(f"{name}: two rows share the timestamp {_iso(dup)}; keep one per time")
    bad = ~np.isfinite(v) | (v < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(
            f"{name}: carbon_intensity {v[i]!r} at {_iso(int(t[i]))} is not a finite number >= 0; "
            "fix the value or remove the row (the row before it then holds until the next one)"
        )
    step = int(np.median(np.diff(t))) if t.size > 1 else HOUR_MS
    return CarbonTrace(name, t, v, step)


def read_trace(path: str | Path) -> CarbonTrace:
    """OpenDC's parquet (``timestamp``, ``carbon_intensity``) or a CSV.

    CSV: a time column (ISO 8601, UTC) then values. ``file.csv#ZONE`` picks the column named
    ``ZONE`` of a wide table such as the project's hourly 2022 table; a CSV with one value
    column needs no suffix.
    """
    text = str(path)
    file, _, column = text.partition("#")
    p = Path(file)
    if not p.is_file():
        raise TraceError(f"carbon trace {file}: no such file")
    if p.suffix == ".parquet":
        return _read_parquet(p)
    if p.suffix == ".csv":
        return _read_csv(p, column or None)
    raise TraceError(f"carbon trace {file}: expected a .parquet or .csv file")


def _read_parquet(p: Path) -> CarbonTrace:
    import pyarrow.parquet as pq

    table = pq.read_table(p)
    missing = {"timestamp", "carbon_intensity"} - set(table.column_names)
    if missing:
        raise TraceError(f"carbon trace {p}: missing column(s) {sorted(missing)} (OpenDC's format)")
    ts = table.column("timestamp")
    import pyarrow as pa

    if pa.types.is_timestamp(ts.type):
        ts = ts.cast(pa.timestamp("ms")).cast(pa.int64())
    t = np.asarray(ts.to_numpy(zero_copy_only=False), dtype=np.int64)
    v = np.asarray(table.column("carbon_intensity").to_numpy(zero_copy_only=False), dtype=float)
    return make_trace(p.name, t, v)


def _read_csv(p: Path, column: str | None) -> CarbonTrace:
    with p.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2:
        raise TraceError(f"carbon trace {p}: no data rows")
    header = rows[0]
    if column is None:
        if len(header) != 2:
            raise TraceError(
                f"carbon trace {p}: {len(header) - 1} value columns; name one as {p.name}#ZONE "
                f"(columns: {', '.join(header[1:6])}...)"
            )
        col = 1
    elif column in header[1:]:
        col = header.index(column)
    else:
        raise TraceError(f"carbon trace {p}: no column {column!r} (columns: {', '.join(header[1:])})")
    try:
        t = np.array([_parse_time(r[0]) for r in rows[1:]], dtype=np.int64)
        v = np.array([float(r[col]) for r in rows[1:]], dtype=float)
    except (ValueError, IndexError) as exc:
        raise TraceError(f"carbon trace {p}: {exc}") from None
    return make_trace(f"{p.name}#{header[col]}", t, v)


def _parse_time(text: str) -> int:
    s = text.strip().replace("Z", "+00:00")
    d = datetime.fromisoformat(s)
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return int(d.timestamp() * 1000)


def _iso(t_ms: int) -> str:
    return datetime.fromtimestamp(t_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant(text: str) -> int:
    """OpenDC's ``submissionTime`` (``2024-03-01T00:00:00``, UTC) as epoch ms."""
    return _parse_time(text)
