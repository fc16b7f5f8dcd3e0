"""Calibration: measured energy over a period / the I/O ops archived for it, per service.

The I/O proxy charges ``ENERGY_PER_IO_OP_KWH = 1e-7`` kWh per op, times the op's weight
when ``per_operation_coefficients`` is on (0.5 for a SELECT ... 2.0 for a large response). A
team with a power meter can say what an op really costs on their hardware:

    factor(service) = (measured kWh in the readings' time range / ops in that range) / 1e-7

where "ops" are **weighted ops** (Σ weight(op), read back from the uncalibrated proxy energy
the agent archived: ``per_service_energy_kwh / 1e-7``) whenever every window of the service in
the range carries it, so that ``1e-7 × weight × factor`` summed over the range reproduces the
meter whatever the mix of operations; and plain I/O ops (``per_endpoint_io_ops``) otherwise,
i.e. when some window was already calibrated (``+cal``), measured, or is a v1.0 line without
per-service energy. The output says which basis each factor has.

Readings are a CSV with a header, one of:

- ``timestamp,service,power_watts``: power samples, integrated per service with the
  trapezoid rule, sum of (t[i+1] - t[i]) x (P[i] + P[i+1]) / 2 joules;
- ``timestamp,service,energy_kwh``: each row is the energy used since that service's
  previous row, so a service's first row only opens its range (its energy lies before it).

Timestamps are RFC 3339 (``2026-11-30T10:00:00Z``) or unix seconds. Ops come from the
agent's archive window lines (``windows-*.jsonl[.gz]``, read by ``schema.archive``: ``report.window.start/end`` and
``report.per_endpoint_io_ops``); a window partly inside a service's range counts its ops pro
rata to the overlap. Factors above 10x or below 0.1x are kept with a warning (check the
meter's scope); negative or non-finite readings are refused.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orjson

from agent.config import MAX_CALIBRATION_FACTOR
from schema import archive, times
from schema.archive import agent_directories
from schema.constants import ENERGY_PER_IO_OP_KWH  # the proxy's charge per I/O op
from schema.tags import PROXY_TAGS

WARN_ABOVE, WARN_BELOW = 10.0, 0.1
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class CalibrationError(ValueError):
    """The readings or archives cannot be used; the message says where and what to fix."""


@dataclass
class Measured:
    kwh: float = 0.0
    start_s: float = math.inf
    end_s: float = -math.inf
    rows: int = 0


@dataclass
class Factor:
    service: str
    kwh: float
    ops: float
    start_s: float
    end_s: float
    factor: float = math.nan
    warning: str = ""
    weighted: bool = False  # ops are weighted ops (Σ weight), not plain I/O ops
    note: str = ""  # why the basis is plain ops, when it could not be weighted

    @property
    def kwh_per_op(self) -> float:
        return self.kwh / self.ops if self.ops > 0 else math.nan


@dataclass
class ArchiveScan:
    ops: dict[str, float] = field(default_factory=dict)
    # Σ weight(op) in range, from windows whose service energy is the bare proxy
    weighted_ops: dict[str, float] = field(default_factory=dict)
    # windows in range whose service energy is not the bare proxy (+cal, measured, v1.0)
    unweighable: dict[str, int] = field(default_factory=dict)
    files: int = 0
    windows: int = 0
    bad_lines: int = 0


def parse_timestamp(text: str, where: str) -> float:
    """RFC 3339 or unix seconds -> finite unix seconds, else CalibrationError."""
    if not isinstance(text, str):
        raise CalibrationError(f"{where}: timestamp {text!r} is not a string")
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise CalibrationError(f"{where}: timestamp {text!r} is not a finite number")
        return value
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CalibrationError(
            f"{where}: timestamp {text!r} is neither RFC 3339 nor unix seconds"
        ) from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def trapezoid_joules(points: list[tuple[float, float]]) -> float:
    """Integrate (seconds, watts) samples: 12 W at t=0 and t=5 s -> 60 J."""
    pts = sorted(points)
    return math.fsum(
        (t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(pts, pts[1:], strict=False)
    )


def read_readings(path: Path) -> dict[str, Measured]:
    """Measured kWh and time range per lowercased service; CalibrationError on bad input."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # spreadsheets write a BOM
    except OSError as exc:
        raise CalibrationError(
            f"{path}: cannot read the readings ({exc.strerror or exc})"
        ) from None
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        raise CalibrationError(f"{path}: not a readable CSV ({exc})") from None
    header = [h.strip().lower() for h in rows[0]] if rows else []
    if (
        header[:2] != ["timestamp", "service"]
        or len(header) < 3
        or header[2] not in ("power_watts", "energy_kwh")
    ):
        raise CalibrationError(
            f"{path}: the header must be 'timestamp,service,power_watts' or 'timestamp,service,energy_kwh'; "
            f"got {','.join(header) or 'an empty file'}"
        )
    kind = header[2]
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for n, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{path}:{n}"
        if len(row) < 3:
            raise CalibrationError(f"{where}: expected 3 columns, got {len(row)}")
        try:
            value = float(row[2])
        except ValueError:
            raise CalibrationError(f"{where}: {kind} {row[2]!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise CalibrationError(
                f"{where}: {kind} {row[2]!r} is negative or not finite; fix the meter export"
            )
        service = row[1].strip().lower()
        if not service:
            raise CalibrationError(f"{where}: the service column is empty")
        series[service].append((parse_timestamp(row[0], where), value))
    if not series:
        raise CalibrationError(f"{path}: no readings after the header")
    measured = {svc: _measure(points, kind) for svc, points in series.items()}
    for svc, m in measured.items():
        if not math.isfinite(m.kwh):
            raise CalibrationError(
                f"{path}: the energy of {svc!r} sums past what a float holds; check the units "
                f"({kind} is expected)"
            )
    return measured


def _measure(points: list[tuple[float, float]], kind: str) -> Measured:
    pts = sorted(points)
    m = Measured(start_s=pts[0][0], end_s=pts[-1][0], rows=len(pts))
    m.kwh = (
        trapezoid_joules(pts) / 3.6e6 if kind == "power_watts" else math.fsum(v for _, v in pts[1:])
    )
    return m


def window_files(root: Path) -> list[Path]:
    """Archive window files under ``root`` (an archive root or one agent's directory), by the
    layout of ``schema.archive``: each agent directory's files in read order, gzip twins skipped."""
    return [f for d in agent_directories(root) for f in archive.window_files(d)]


def scan_archives(root: Path, ranges: dict[str, tuple[float, float]]) -> ArchiveScan:
    """I/O ops per service inside its range, pro rata for windows that straddle an edge."""
    if not root.is_dir():
        raise CalibrationError(f"{root}: not a directory; give the archive root (e.g. archives/)")
    scan = ArchiveScan(
        ops=dict.fromkeys(ranges, 0.0),
        weighted_ops=dict.fromkeys(ranges, 0.0),
        unweighable=dict.fromkeys(ranges, 0),
    )
    for path in window_files(root):
        scan.files += 1
        try:
            for _, line in archive.numbered_lines(path):
                _count_line(line, ranges, scan)
        except (OSError, archive.ArchiveReadError) as exc:
            raise CalibrationError(f"{path}: cannot read it ({exc})") from None
    return scan


def _count_line(line: bytes, ranges: dict[str, tuple[float, float]], scan: ArchiveScan) -> None:
    try:
        report = orjson.loads(line)[archive.BODY_KEY]
        w_start = times.to_epoch(report["window"]["start"])
        w_end = times.to_epoch(report["window"]["end"])
        entries = report.get("per_endpoint_io_ops") or []
        per_service: dict[str, float] = defaultdict(float)
        for e in entries:
            ops = e["io_ops"]
            if isinstance(ops, int | float) and math.isfinite(ops) and ops > 0:
                per_service[str(e["service"]).lower()] += ops
        proxy_kwh = _bare_proxy_energy(report.get("green_summary"))
    except (
        orjson.JSONDecodeError, KeyError, TypeError, AttributeError, OverflowError, ValueError
    ):
        scan.bad_lines += 1
        return
    if w_end < w_start or not all(math.isfinite(v) for v in per_service.values()):
        scan.bad_lines += 1  # a window that ends before it starts, or ops summing past floats
        return
    scan.windows += 1
    length = w_end - w_start
    for service, ops in per_service.items():
        if service not in ranges:
            continue
        lo, hi = ranges[service]
        overlap = min(hi, w_end) - max(lo, w_start)
        if length <= 0:
            share = 1.0 if lo <= w_start <= hi else 0.0
        else:
            share = max(0.0, overlap) / length
        if share <= 0.0:
            continue
        scan.ops[service] += ops * share
        kwh = proxy_kwh.get(service)
        if kwh is None:
            scan.unweighable[service] = scan.unweighable.get(service, 0) + 1
        else:
            weighted = scan.weighted_ops.get(service, 0.0) + kwh / ENERGY_PER_IO_OP_KWH * share
            scan.weighted_ops[service] = weighted if math.isfinite(weighted) else math.inf


def _bare_proxy_energy(summary: object) -> dict[str, float]:
    """Lowercased service -> its window energy, for services whose energy is the bare I/O
    proxy (tag ``io_proxy_v*`` without ``+cal``, nothing measured): 1e-7 × Σ weight(op)."""
    if not isinstance(summary, dict):
        return {}
    energy, model, ratio = (
        summary.get(k)
        for k in ("per_service_energy_kwh", "per_service_energy_model", "per_service_measured_ratio")
    )
    if not isinstance(energy, dict) or not isinstance(model, dict):
        return {}
    ratio = ratio if isinstance(ratio, dict) else {}
    out: dict[str, float] = {}
    for name, kwh in energy.items():
        if (
            model.get(name) in PROXY_TAGS
            and ratio.get(name, 0) == 0
            and isinstance(kwh, int | float)
            and math.isfinite(kwh)
            and kwh >= 0
        ):
            out[str(name).lower()] = float(kwh)
    return out


def compute_factors(measured: dict[str, Measured], scan: ArchiveScan) -> list[Factor]:
    out = []
    for service in sorted(measured):
        m = measured[service]
        f = Factor(service, m.kwh, scan.ops.get(service, 0.0), m.start_s, m.end_s)
        weighted = scan.weighted_ops.get(service, 0.0)
        if f.ops > 0 and scan.unweighable.get(service, 0) == 0 and 0 < weighted < math.inf:
            f.ops, f.weighted = weighted, True
        if m.end_s <= m.start_s:
            f.warning = (
                f"only {m.rows} reading(s) at one time: no time range to measure; "
                "give at least two readings"
            )
        elif f.ops <= 0:
            f.warning = "no I/O ops archived in its time range: no factor"
        else:
            factor = f.kwh_per_op / ENERGY_PER_IO_OP_KWH
            if not 0.0 < factor <= MAX_CALIBRATION_FACTOR:
                # The agent's config refuses such a factor; writing it would only move the
                # error to the agent's start.
                f.warning = (
                    f"factor {factor:.4g} is outside (0, {MAX_CALIBRATION_FACTOR:g}]: the meter "
                    "read no energy, or far more than 1 kWh per I/O op; check the readings' "
                    "unit and service names; no factor"
                )
                out.append(f)
                continue
            f.factor = factor
            if f.ops > 0 and not f.weighted and scan.unweighable.get(service, 0):
                f.note = (
                    f"per plain I/O op: {scan.unweighable[service]} window(s) in range carry no "
                    "bare-proxy energy (calibrated, measured or v1.0), so op weights are unknown; "
                    "with per_operation_coefficients on, the calibrated proxy matches the meter "
                    "only as closely as the mean op weight is to 1"
                )
            if f.factor > WARN_ABOVE:
                f.warning = f"factor {f.factor:.4g} is above {WARN_ABOVE:g}x: does the meter cover more than this service?"
            elif f.factor < WARN_BELOW:
                f.warning = f"factor {f.factor:.4g} is below {WARN_BELOW:g}x: does the meter see all of this service?"
        out.append(f)
    return out


def to_toml(factors: list[Factor], note: str = "") -> str:
    lines = [
        "# carbonspan calibrate: factor = (measured kWh / ops) / 1e-7 kWh per op; ops are weighted",
        "# ops (what the uncalibrated proxy charged / 1e-7) where the archives carry them",
    ]
    if note:
        lines.append(f"# {note}")
    lines.append("[green.calibration]")
    for f in factors:
        if math.isnan(f.factor):
            lines.append(f"# {f.service}: {f.warning}")
            continue
        key = f.service if _BARE_KEY.match(f.service) else orjson.dumps(f.service).decode()
        basis = "weighted ops" if f.weighted else "ops"
        comment = f"  # {f.kwh:.6g} kWh / {f.ops:.6g} {basis} = {f.kwh_per_op:.6g} kWh/op"
        lines.append(f"{key} = {f.factor!r}{comment}")
        if f.note:
            lines.append(f"# note: {f.note}")
        if f.warning:
            lines.append(f"# warning: {f.warning}")
    return "\n".join(lines) + "\n"
