"""Signal-log rows for the contract tests (real JSON lines, parsed by the real reader)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson

from scheduling.signals import SignalLog, parse_lines

T0 = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def ms(minutes: float) -> int:
    return int(at(minutes).timestamp() * 1000)


def z(d: datetime) -> str:
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


def observed(region: str, start_min: float, values: list[float], step: int = 15, lag: float = 1,
             source: str = "test-grid", version: str = "v1") -> list[dict]:
    """Observations of consecutive ``step``-minute intervals, each known ``lag`` min after its end."""
    return [{"region": region, "start": z(at(start_min + i * step)), "end": z(at(start_min + (i + 1) * step)),
             "value": v, "observed_at": z(at(start_min + (i + 1) * step + lag)), "source": source,
             "signal_type": "average", "version": version} for i, v in enumerate(values)]


def forecast(region: str, issued_min: float, start_min: float, values: list[float], step: int = 15) -> list[dict]:
    return [{"region": region, "start": z(at(start_min + i * step)), "end": z(at(start_min + (i + 1) * step)),
             "value": v, "issued_at": z(at(issued_min)), "source": "test-forecast", "signal_type": "average",
             "version": "v1"} for i, v in enumerate(values)]


def log(*groups: list[dict]) -> SignalLog:
    return parse_lines([orjson.dumps(r) for g in groups for r in g])
