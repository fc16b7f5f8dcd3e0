"""The signal log: carbon-intensity values with their provenance, one JSON object per line.

The one definition of the row format (docs/contracts.md, "Signal log"), shared by the agent's
live sources, which append what they read (``[agent.signal_log]``), ``carbonspan shadow
signals``, which converts saved API answers, and ``scheduling.signals``, which reads the log
as of a decision's time::

    {"region": "gb", "start": "2026-03-01T00:00:00Z", "end": "2026-03-01T00:30:00Z",
     "value": 182.0, "observed_at": "2026-03-01T00:31:00Z", "issued_at": null,
     "source": "gb-carbon-intensity", "signal_type": "average", "version": "api-2.0"}

A row with ``issued_at`` is a forecast issued then; one without is an observation, known from
``observed_at``. ``value`` is gCO2e/kWh, finite and >= 0 (an unknown interval is left out,
never written as 0).

:class:`SignalLogWriter` appends rows durably and without repeats: an observation already in
the log with the same value (same region, source, signal type and interval) is not appended
again; the same interval with another value is a new observation (a later ``observed_at``).
A forecast issue (the rows of one region and source issued at one instant) is appended whole,
unless it holds exactly the intervals and values of the last issue the log has for that region
and source. Each append is one ``write`` followed by ``fsync``; when the file would pass its
size bound it is renamed to ``PATH.1`` (replacing an older one) and a new file begun, so the
log never holds more than twice the bound. A torn last line (a crash mid-write) is cut off
when the writer opens the file, and counted.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

FIELDS = ("region", "start", "end", "value", "observed_at", "issued_at", "source", "signal_type", "version")
REQUIRED = ("region", "start", "end", "value")
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
SEED_BYTES = 4 * 1024 * 1024  # of the log's tail read at open to know what it already holds
MAX_OBSERVATION_KEYS = 200_000  # intervals remembered for deduplication (oldest dropped first)


class SignalLogError(ValueError):
    """A signal-log row that cannot be used; the message names the line and field."""


def to_ms(text: Any, where: str) -> int:
    """RFC 3339 with an offset (or epoch milliseconds) -> UTC epoch milliseconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return int(text)
    try:
        d = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise SignalLogError(f"{where}: {text!r} is not an RFC 3339 time") from None
    if d.tzinfo is None:
        raise SignalLogError(f"{where}: {text!r} has no UTC offset; write it with Z or +HH:MM")
    return int(d.timestamp() * 1000)


def iso(t_ms: int) -> str:
    return datetime.fromtimestamp(t_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_row(region: str, start_ms: int, end_ms: int, value: Any, source: str, version: str, *,
             observed_ms: int | None = None, issued_ms: int | None = None,
             signal_type: str = "average") -> dict[str, Any]:
    """One row: an observation (``observed_ms``) or a forecast (``issued_ms``), never both."""
    if (observed_ms is None) == (issued_ms is None):
        raise SignalLogError("a row is an observation (observed_at) or a forecast (issued_at): give exactly one")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SignalLogError(f"{source} {region} {iso(start_ms)}: value {value!r} is not a number")
    return {"region": region, "start": iso(start_ms), "end": iso(end_ms), "value": float(value),
            "observed_at": None if observed_ms is None else iso(observed_ms),
            "issued_at": None if issued_ms is None else iso(issued_ms),
            "source": source, "signal_type": signal_type, "version": version}


@dataclass(frozen=True, slots=True)
class Checked:
    """A row's parsed times (UTC epoch ms) and value."""

    start: int
    end: int
    known: int  # observed_at for an observation, issued_at for a forecast
    forecast: bool
    value: float
    signal_type: str


def check_row(r: Any, where: str) -> Checked:
    """Validate one decoded row; ``SignalLogError`` names ``where`` and the field."""
    if not isinstance(r, dict):
        raise SignalLogError(f"{where}: expected a JSON object with {', '.join(FIELDS)}")
    for f in REQUIRED:
        if r.get(f) is None:
            raise SignalLogError(f"{where}: field `{f}` is required")
    v = r["value"]
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise SignalLogError(f"{where}: field `value` {v!r} must be a finite number >= 0 (gCO2e/kWh); "
                             "leave the interval out if it is unknown")
    start, end = to_ms(r["start"], f"{where} field `start`"), to_ms(r["end"], f"{where} field `end`")
    if end <= start:
        raise SignalLogError(f"{where}: field `end` must be after `start`")
    if r.get("issued_at") is not None:
        known, forecast = to_ms(r["issued_at"], f"{where} field `issued_at`"), True
    elif r.get("observed_at") is None:
        raise SignalLogError(f"{where}: field `observed_at` is required on an observation "
                             "(or give `issued_at` for a forecast)")
    else:
        known, forecast = to_ms(r["observed_at"], f"{where} field `observed_at`"), False
    return Checked(start, end, known, forecast, float(v), str(r.get("signal_type") or "average"))


def encode(row: dict[str, Any]) -> bytes:
    """A row as one line (the fields in their documented order, newline included)."""
    return orjson.dumps({f: row.get(f) for f in FIELDS}) + b"\n"


@dataclass
class AppendResult:
    observations: int = 0
    forecasts: int = 0
    unchanged: int = 0  # rows the log already held (not appended again)
    invalid: list[str] = field(default_factory=list)  # rows refused, with the reason
    rotated: bool = False


ObsKey = tuple[str, str, str, int, int]  # region, source, signal type, start, end
IssueKey = tuple[str, str, str]  # region, source, signal type


class SignalLogWriter:
    """Append-only writer of one signal log (see the module docstring); not thread-safe: one
    writer per file, driven from one thread."""

    def __init__(self, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES, seed_bytes: int = SEED_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max(1, int(max_bytes))
        self.seed_bytes = seed_bytes
        self._fh: Any = None
        self._size = 0
        self._obs: dict[ObsKey, float] = {}
        self._issues: dict[IssueKey, tuple[int, tuple[tuple[int, int, float], ...]]] = {}
        self.torn_bytes = 0  # cut off the tail at open (a crash mid-write)
        self.seeded = 0  # rows read back from the tail at open

    # -- opening ------------------------------------------------------------------------------
    def open(self) -> None:
        """Open (creating directories), cut a torn tail, and learn what the log's tail holds."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = self.path.open("a+b")
        try:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            tail = b""
            if size:
                start = max(0, size - self.seed_bytes)
                fh.seek(start)
                tail = fh.read()
                if not tail.endswith(b"\n"):
                    keep = tail.rfind(b"\n") + 1  # 0: no whole line in the tail window
                    cut = start + keep if keep or start == 0 else size
                    self.torn_bytes = size - cut
                    fh.truncate(cut)
                    os.fsync(fh.fileno())
                    tail, size = tail[:keep], cut
                if start > 0:
                    tail = tail[tail.find(b"\n") + 1:]  # the first line is probably cut
            self._seed(tail)
        except BaseException:
            fh.close()
            raise
        self._fh, self._size = fh, size

    def _seed(self, tail: bytes) -> None:
        rows = []
        for raw in tail.splitlines():
            try:
                r = orjson.loads(raw)
                rows.append((r, check_row(r, "tail")))
            except (orjson.JSONDecodeError, SignalLogError):
                continue  # the reader reports bad lines; the writer only learns from good ones
        self.seeded = len(rows)
        self._remember(rows)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    # -- appending ----------------------------------------------------------------------------
    def append(self, rows: list[dict[str, Any]]) -> AppendResult:
        """Append the rows the log does not already hold; ``OSError`` if the disk refuses (the
        writer then remembers nothing of them, so the next poll's rows are tried again)."""
        if self._fh is None:
            self.open()
        out = AppendResult()
        checked: list[tuple[dict[str, Any], Checked]] = []
        for i, r in enumerate(rows):
            try:
                checked.append((r, check_row(r, f"row {i}")))
            except SignalLogError as exc:
                out.invalid.append(str(exc))
        fresh = self._new(checked, out)
        if not fresh:
            return out
        data = b"".join(encode(r) for r, _ in fresh)
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
            out.rotated = True
        self._fh.write(data)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._size += len(data)
        self._remember(fresh)
        for _, c in fresh:
            if c.forecast:
                out.forecasts += 1
            else:
                out.observations += 1
        return out

    def _new(self, checked: list[tuple[dict[str, Any], Checked]], out: AppendResult) -> list[tuple[dict[str, Any], Checked]]:
        fresh: list[tuple[dict[str, Any], Checked]] = []
        seen: dict[ObsKey, float] = {}
        issues: dict[tuple[str, str, str, int], list[tuple[dict[str, Any], Checked]]] = {}
        for r, c in checked:
            if c.forecast:
                issues.setdefault((str(r["region"]), str(r.get("source") or ""), c.signal_type, c.known), []).append((r, c))
                continue
            key = self._obs_key(r, c)
            last = seen.get(key, self._obs.get(key))
            if last is not None and last == c.value:
                out.unchanged += 1
                continue
            seen[key] = c.value
            fresh.append((r, c))
        for (region, source, kind, issued), group in issues.items():
            shape = tuple(sorted((c.start, c.end, c.value) for _, c in group))
            last_issue = self._issues.get((region, source, kind))
            if last_issue is not None and (last_issue[1] == shape or last_issue[0] >= issued):
                out.unchanged += len(group)  # the same forecast again, or not newer than the log's
                continue
            fresh.extend(group)
        return fresh

    @staticmethod
    def _obs_key(r: dict[str, Any], c: Checked) -> ObsKey:
        return (str(r["region"]), str(r.get("source") or ""), c.signal_type, c.start, c.end)

    def _remember(self, rows: list[tuple[dict[str, Any], Checked]]) -> None:
        groups: dict[tuple[str, str, str, int], list[tuple[int, int, float]]] = {}
        for r, c in rows:
            if c.forecast:
                groups.setdefault((str(r["region"]), str(r.get("source") or ""), c.signal_type, c.known),
                                  []).append((c.start, c.end, c.value))
            else:
                self._obs[self._obs_key(r, c)] = c.value
        for (region, source, kind, issued), cells in sorted(groups.items(), key=lambda kv: kv[0][3]):
            last = self._issues.get((region, source, kind))
            if last is None or issued >= last[0]:
                self._issues[(region, source, kind)] = (issued, tuple(sorted(cells)))
        if len(self._obs) > MAX_OBSERVATION_KEYS:  # keep the newest intervals (by end)
            keep = sorted(self._obs, key=lambda k: k[4])[-MAX_OBSERVATION_KEYS // 2:]
            self._obs = {k: self._obs[k] for k in keep}

    def _rotate(self) -> None:
        self._fh.close()
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._fh = self.path.open("a+b")
        self._size = 0
