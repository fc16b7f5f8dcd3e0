"""The signal log: carbon-intensity values with provenance, read as of a decision's time.

One JSON object per line (docs/contracts.md, "Signal log")::

    {"region": "GB", "start": "2026-03-01T00:00:00Z", "end": "2026-03-01T00:30:00Z",
     "value": 182.0, "observed_at": "2026-03-01T00:31:00Z", "issued_at": null,
     "source": "gb-carbon-intensity", "signal_type": "average", "version": "v2"}

A row with ``issued_at`` is a forecast issued then; one without is an observation, known from
``observed_at``. :meth:`SignalLog.as_of` gives what a decision at *t* could have read: rows
observed (or issued) at or before *t*; everything later is unreachable from the view. Forecasts
go through ``scheduling.forecast`` (``Recorded`` for recorded issues, ``Persistence`` over the
observations otherwise); observations through ``scheduling.carbon.CarbonTrace``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from scheduling.forecast import DAY_MS, Recorded
from schema.signal_log import FIELDS, SignalLogError, check_row, iso, to_ms

__all__ = ["FIELDS", "Rows", "SignalError", "SignalLog", "iso", "parse_lines", "read_signal_log", "signal_files", "to_ms"]

#: the row format is ``schema.signal_log`` (shared with the agent, which writes the log)
SignalError = SignalLogError


@dataclass(frozen=True)
class Rows:
    """Columns of one region's rows (observations or forecasts), sorted by start."""

    start: np.ndarray
    end: np.ndarray
    value: np.ndarray
    known: np.ndarray  # observed_at for observations, issued_at for forecasts
    source: np.ndarray  # object arrays of strings
    version: np.ndarray

    def take(self, keep: np.ndarray) -> Rows:
        if keep.all():
            return self
        return Rows(self.start[keep], self.end[keep], self.value[keep], self.known[keep],
                    self.source[keep], self.version[keep])


def _rows(items: list[dict[str, Any]], known: str) -> Rows:
    items = sorted(items, key=lambda r: (r["_start"], r["_known"]))
    return Rows(np.array([r["_start"] for r in items], dtype=np.int64), np.array([r["_end"] for r in items], dtype=np.int64),
                np.array([float(r["value"]) for r in items]), np.array([r["_known"] for r in items], dtype=np.int64),
                np.array([str(r.get("source", "")) for r in items], dtype=object),
                np.array([str(r.get("version", "")) for r in items], dtype=object))


@dataclass(frozen=True)
class SignalLog:
    observed: dict[str, Rows]
    forecasts: dict[str, Rows]
    signal_type: str = "average"

    def as_of(self, t_ms: int) -> SignalLog:
        """Only what was observed or issued at or before ``t_ms``."""
        return SignalLog({r: v.take(v.known <= t_ms) for r, v in self.observed.items()},
                         {r: v.take(v.known <= t_ms) for r, v in self.forecasts.items()}, self.signal_type)

    def latest(self, region: str) -> tuple[int, float, str, str] | None:
        """(interval end, value, source, version) of the region's latest observation, or None.
        Of several observations of that interval (a revised value), the last known."""
        rows = self.observed.get(region)
        if rows is None or rows.start.size == 0:
            return None
        last = np.flatnonzero(rows.end == rows.end.max())
        i = int(last[np.argmax(rows.known[last])])
        return int(rows.end[i]), float(rows.value[i]), str(rows.source[i]), str(rows.version[i])

    def forecast_issue(self, region: str, now_ms: int) -> str | None:
        """When the latest forecast for ``region`` issued at or before ``now_ms`` was issued."""
        fc = self.forecasts.get(region)
        known = fc.known[fc.known <= now_ms] if fc is not None else np.empty(0)
        return iso(int(known.max())) if known.size else None

    def covered(self, region: str, t: np.ndarray) -> np.ndarray:
        """Observed intensity at instants ``t``: NaN where no observation's [start, end) covers
        an instant (a gap is missing, never carried forward or averaged over)."""
        t = np.asarray(t, dtype=np.int64)
        rows = self.observed.get(region)
        out = np.full(t.shape, np.nan)
        if rows is None or rows.start.size == 0:
            return out
        idx = np.searchsorted(rows.start, t, side="right") - 1
        ok = idx >= 0
        ok[ok] &= t[ok] < rows.end[idx[ok]]
        out[ok] = rows.value[idx[ok]]
        return out

    def predicted(self, region: str, now_ms: int, t: np.ndarray) -> tuple[np.ndarray, str]:
        """Intensity expected at instants ``t`` (>= ``now_ms``) as of ``now_ms``, and the provider:
        ``recorded`` (the latest forecast issued at or before now, ``scheduling.forecast.Recorded``)
        where one covers an instant, else ``persistence`` (the observation one whole day
        earlier, at or before now). NaN where neither has a value: never imputed."""
        t = np.asarray(t, dtype=np.int64)
        out = np.full(t.shape, np.nan)
        fc = self.forecasts.get(region)
        used = "persistence"
        if fc is not None and fc.start.size:
            rec = Recorded(fc.known.copy(), fc.start.copy(), fc.value.copy())
            k = int(np.searchsorted(rec.issues, now_ms, side="right")) - 1
            if k >= 0:
                rows = rec.issued == rec.issues[k]
                starts, vals = rec.t_ms[rows], rec.values[rows]
                ends = fc.end[fc.known == rec.issues[k]]  # fc is sorted by start, as rec's rows
                idx = np.searchsorted(starts, t, side="right") - 1
                ok = idx >= 0
                ok[ok] &= t[ok] < ends[idx[ok]]
                out[ok] = vals[idx[ok]]
                used = "recorded"
        gap = np.isnan(out)
        if gap.any():
            days = np.maximum(1, -((now_ms - t[gap]) // DAY_MS))
            back = t[gap] - days * DAY_MS
            out[gap] = self.covered(region, back)
        return out, used


def parse_lines(lines: list[bytes], where: str = "signal log") -> SignalLog:
    return _parse([(f"{where}:{n}", raw) for n, raw in enumerate(lines, start=1)], where)


def _parse(lines: list[tuple[str, bytes]], where: str) -> SignalLog:
    obs: dict[str, list[dict[str, Any]]] = {}
    fc: dict[str, list[dict[str, Any]]] = {}
    kinds = set()
    for at, raw in lines:
        if not raw.strip():
            continue
        try:
            r = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise SignalError(f"{at}: not JSON: {exc}") from None
        c = check_row(r, at)
        r["_start"], r["_end"], r["_known"] = c.start, c.end, c.known
        (fc if c.forecast else obs).setdefault(str(r["region"]), []).append(r)
        kinds.add(c.signal_type)
    if len(kinds) > 1:
        raise SignalError(f"{where}: mixes signal types {sorted(kinds)}; keep average and marginal in separate logs")
    return SignalLog({k: _rows(v, "observed_at") for k, v in obs.items()},
                     {k: _rows(v, "issued_at") for k, v in fc.items()}, next(iter(kinds), "average"))


def signal_files(path: str | Path) -> list[Path]:
    """The files of the log at ``path``: its rotated predecessor ``PATH.1`` first when there is
    one (the agent's writer rotates there at its size bound, ``schema.signal_log``), then ``PATH``."""
    p = Path(path)
    older = p.with_name(p.name + ".1")
    return [older, p] if older.is_file() else [p]


def read_signal_log(path: str | Path) -> SignalLog:
    """The log at ``path``, with its rotated predecessor ``PATH.1`` when there is one."""
    lines: list[tuple[str, bytes]] = []
    for p in signal_files(path):
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise SignalError(f"signal log {p}: cannot read: {exc.strerror}") from None
        lines += [(f"{p.name}:{n}", raw) for n, raw in enumerate(data.splitlines(), start=1)]
    return _parse(lines, Path(path).name)
