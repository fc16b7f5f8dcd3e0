"""Forecast providers with as-of semantics: a forecast issued at *t* uses only what was known at *t*.

Every provider answers ``forecast(trace, issued_ms, horizon_ms)`` with the values it predicts on
the grid ``issued + k * step`` for ``k = 1 .. horizon // step`` (``step`` is the trace's row
spacing, so a 24-hour horizon is 96 values on a 15-minute trace and 24 on an hourly one). NaN
means the provider has no value there (no history, no recorded issue): a rule given a NaN
does not defer, and says so in its counters.

| provider | what it reads | label |
|---|---|---|
| ``persistence`` (default) | ``trace.until(issued)``: the value at the same time one day earlier | achievable |
| ``recorded`` | forecasts recorded with their issue time, latest issue <= issued | achievable |
| ``noisy`` | the real future x (1 + error growing with the horizon, AR(1) correlated, seeded) | synthetic |
| ``perfect`` | the real future (OpenDC's only mode) | not achievable, not a bound |

These are the interfaces the shadow scheduler (issue 16) builds on: ``ForecastProvider`` and
``make_provider``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from scheduling.carbon import HOUR_MS, CarbonTrace, TraceError, _parse_time

DAY_MS = 24 * HOUR_MS
#: the run's own rule fed the real future instead of a forecast: a greedy rule is no optimiser,
#: so this is neither achievable nor a bound and can emit more than another policy
#: (scheduling/evaluate.py's ORACLE_LABEL, docs/simulation.md)
PERFECT_LABEL = "perfect foresight: the policy's own rule given the real future; not achievable, and not a bound (it can lose)"
NOISY_LABEL = "synthetic forecast (real future + calibrated error)"
#: default target mean absolute percentage error of the noisy provider (published day-ahead
#: errors are about 7-11 % MAPE, e.g. the GB grid operator's forecasts)
NOISY_DEFAULT_MAPE = 0.09
#: hour-to-hour correlation of the noisy provider's error
NOISY_HOURLY_CORRELATION = 0.9


class ForecastProvider(Protocol):
    name: str
    label: str  # "" for an achievable forecast
    reads_future: bool

    def forecast(self, trace: CarbonTrace, issued_ms: int, horizon_ms: int) -> np.ndarray: ...


def grid(trace: CarbonTrace, issued_ms: int, horizon_ms: int) -> np.ndarray:
    """The instants a forecast predicts: ``issued + k * step``, k = 1 .. max(1, horizon // step)."""
    n = max(1, horizon_ms // trace.step_ms)
    return issued_ms + trace.step_ms * np.arange(1, n + 1, dtype=np.int64)


@dataclass
class Persistence:
    """Tomorrow looks like today: the value observed one day (or whole days) before each instant."""

    name: str = "persistence"
    label: str = ""
    reads_future: bool = False

    def forecast(self, trace: CarbonTrace, issued_ms: int, horizon_ms: int) -> np.ndarray:
        seen = trace.until(issued_ms)  # the as-of view: nothing later is reachable from here
        t = grid(trace, issued_ms, horizon_ms)
        days = -((issued_ms - t) // DAY_MS)  # ceil((t - issued) / day) >= 1
        back = t - days * DAY_MS
        if seen.t_ms.size == 0:
            return np.full(t.shape, np.nan)
        return seen.value_at(np.minimum(back, issued_ms))


@dataclass
class Perfect:
    """The real future trace. Only an upper bound on what shifting could achieve."""

    name: str = "perfect"
    label: str = PERFECT_LABEL
    reads_future: bool = True

    def forecast(self, trace: CarbonTrace, issued_ms: int, horizon_ms: int) -> np.ndarray:
        return trace.value_at(grid(trace, issued_ms, horizon_ms))


@dataclass
class Noisy:
    """The real future times ``1 + e_k``: e_k Gaussian, AR(1) over the horizon, sd growing as
    sqrt(h / H), scaled so the mean absolute percentage error over the horizon is ``mape``."""

    mape: float = NOISY_DEFAULT_MAPE
    seed: int = 0
    name: str = "noisy"
    label: str = NOISY_LABEL
    reads_future: bool = True
    clamped: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.mape < 1:
            raise ValueError(f"noisy forecast: mape {self.mape!r} must be in [0, 1)")

    def errors(self, issued_ms: int, n: int, step_ms: int) -> np.ndarray:
        key = hashlib.blake2b(f"{self.seed}:{issued_ms}".encode(), digest_size=8).digest()
        rng = np.random.default_rng(int.from_bytes(key, "little"))
        phi = NOISY_HOURLY_CORRELATION ** (step_ms / HOUR_MS)
        z = np.empty(n)
        z[0] = rng.standard_normal()
        innov = rng.standard_normal(n) * math.sqrt(1 - phi * phi)
        for k in range(1, n):
            z[k] = phi * z[k - 1] + innov[k]
        shape = np.sqrt(np.arange(1, n + 1) / n)
        scale = self.mape / (math.sqrt(2 / math.pi) * float(shape.mean()))
        return scale * shape * z

    def forecast(self, trace: CarbonTrace, issued_ms: int, horizon_ms: int) -> np.ndarray:
        t = grid(trace, issued_ms, horizon_ms)
        out = trace.value_at(t) * (1 + self.errors(issued_ms, t.size, trace.step_ms))
        neg = out < 0
        if neg.any():
            self.clamped += int(neg.sum())  # counted: an intensity forecast below 0 becomes 0
            out[neg] = 0.0
        return out


@dataclass
class Recorded:
    """Forecasts recorded with their issue time: rows (issued_at, timestamp, carbon_intensity)."""

    issued: np.ndarray
    t_ms: np.ndarray
    values: np.ndarray
    name: str = "recorded"
    label: str = ""
    reads_future: bool = False
    issues: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        order = np.lexsort((self.t_ms, self.issued))
        self.issued, self.t_ms, self.values = self.issued[order], self.t_ms[order], self.values[order]
        self.issues = np.unique(self.issued)

    def forecast(self, trace: CarbonTrace, issued_ms: int, horizon_ms: int) -> np.ndarray:
        t = grid(trace, issued_ms, horizon_ms)
        k = int(np.searchsorted(self.issues, issued_ms, side="right")) - 1
        if k < 0:
            return np.full(t.shape, np.nan)
        rows = self.issued == self.issues[k]  # the latest issue at or before the decision
        ts, vs = self.t_ms[rows], self.values[rows]
        idx = np.searchsorted(ts, t, side="right") - 1
        out = np.full(t.shape, np.nan)
        ok = idx >= 0
        out[ok] = vs[idx[ok]]
        out[t > ts[-1] + trace.step_ms] = np.nan  # past what the issue covered
        return out


def read_recorded(path: str | Path) -> Recorded:
    """A CSV or parquet of recorded forecasts: ``issued_at``, ``timestamp``, ``carbon_intensity``."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"recorded forecasts {p}: no such file")
    cols = ("issued_at", "timestamp", "carbon_intensity")
    if p.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(p)
        data = []
        for c in cols:
            if c not in table.column_names:
                raise TraceError(f"recorded forecasts {p}: missing column {c!r}")
            col = table.column(c)
            if pa.types.is_timestamp(col.type):
                col = col.cast(pa.timestamp("ms")).cast(pa.int64())
            data.append(np.asarray(col.to_numpy(zero_copy_only=False)))
    else:
        import csv

        with p.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        if not rows or any(c not in rows[0] for c in cols):
            raise TraceError(f"recorded forecasts {p}: need columns {', '.join(cols)}")
        data = [np.array([_parse_time(r[c]) for r in rows]) for c in cols[:2]]
        data.append(np.array([float(r[cols[2]]) for r in rows]))
    return Recorded(data[0].astype(np.int64), data[1].astype(np.int64), data[2].astype(float))


PROVIDERS = ("persistence", "noisy", "recorded", "perfect")


def make_provider(spec: str | dict[str, Any] | None, seed: int = 0, base: Path | None = None) -> Any:
    """``"persistence"`` | ``{"type": "noisy", "mape": 0.09}`` | ``{"type": "recorded",
    "pathToFile": F}`` | ``"perfect"``; ``None`` is persistence."""
    if spec is None:
        return Persistence()
    kind = spec if isinstance(spec, str) else spec.get("type")
    opts = {} if isinstance(spec, str) else {k: v for k, v in spec.items() if k != "type"}
    allowed = {"persistence": set(), "perfect": set(), "noisy": {"mape"}, "recorded": {"pathToFile"}}
    if kind not in allowed:
        raise ValueError(f"forecastProvider: unknown type {kind!r}; use one of {', '.join(PROVIDERS)}")
    extra = set(opts) - allowed[kind]
    if extra:
        raise ValueError(f"forecastProvider {kind}: unknown key(s) {sorted(extra)}")
    if kind == "noisy":
        return Noisy(mape=float(opts.get("mape", NOISY_DEFAULT_MAPE)), seed=seed)
    if kind == "recorded":
        if "pathToFile" not in opts:
            raise ValueError("forecastProvider recorded: give pathToFile (issued_at, timestamp, carbon_intensity)")
        path = Path(opts["pathToFile"])
        return read_recorded(path if path.is_absolute() or base is None else base / path)
    return Perfect() if kind == "perfect" else Persistence()
