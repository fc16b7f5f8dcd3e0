"""Saved answers of the intensity APIs the agent's sources read, as signal-log rows with their
provenance (docs/contracts.md, "Recording signals").

- GB grid operator (NESO/ESO Carbon Intensity API, ``/intensity/{from}/{to}``, ``/intensity/{from}/fw48h``):
  ``data[]`` of ``{from, to, intensity: {forecast, actual}}``. The API gives no publication
  times, so the time the answer was fetched (``fetched_at``) is when each value was known: an
  ``actual`` becomes an observation with ``observed_at = fetched_at``; a ``forecast`` for a
  half hour starting at or after ``fetched_at`` becomes a forecast with ``issued_at =
  fetched_at`` (the 48 h forecast). Forecasts of past half hours are left out (their issue time
  is unknown), and counted.
- Electricity Maps (``/v3/carbon-intensity/history``: ``history[]``; ``/v3/carbon-intensity/forecast``:
  ``forecast[]`` and ``updatedAt``): hourly ``{carbonIntensity, datetime, updatedAt}``; an
  observation is known at its ``updatedAt``; a forecast was issued at the answer's ``updatedAt``.
"""

from __future__ import annotations

from typing import Any

from scheduling.signals import SignalError, iso, to_ms

HALF_HOUR_MS = 1_800_000
HOUR_MS = 3_600_000


def _row(region: str, start: int, end: int, value: Any, source: str, version: str, *, observed: int | None = None,
         issued: int | None = None) -> dict[str, Any]:
    return {"region": region, "start": iso(start), "end": iso(end), "value": float(value),
            "observed_at": None if observed is None else iso(observed), "issued_at": None if issued is None else iso(issued),
            "source": source, "signal_type": "average", "version": version}


def from_gb(doc: Any, fetched_at: int, region: str = "GB") -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows and counters (``observations``, ``forecasts``, ``past_forecasts_left_out``, ``empty``)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise SignalError("GB carbon intensity answer: expected {\"data\": [...]} (api.carbonintensity.org.uk)")
    rows, n = [], {"observations": 0, "forecasts": 0, "past_forecasts_left_out": 0, "empty": 0}
    for i, p in enumerate(doc["data"]):
        where = f"data[{i}]"
        start = to_ms(p.get("from"), f"{where} from")  # the API writes 2018-01-20T12:00Z
        end = start + HALF_HOUR_MS if p.get("to") is None else to_ms(p["to"], f"{where} to")
        block = p.get("intensity") or {}
        actual, forecast = block.get("actual"), block.get("forecast")
        if actual is not None:
            rows.append(_row(region, start, end, actual, "gb-carbon-intensity", "api-2.0", observed=fetched_at))
            n["observations"] += 1
        if forecast is not None and start >= fetched_at:
            rows.append(_row(region, start, end, forecast, "gb-carbon-intensity-forecast", "api-2.0", issued=fetched_at))
            n["forecasts"] += 1
        elif forecast is not None and actual is None:
            n["past_forecasts_left_out"] += 1
        if actual is None and forecast is None:
            n["empty"] += 1
    return rows, n


def from_electricitymaps(doc: Any, region: str | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows and counters (``observations``, ``forecasts``)."""
    if not isinstance(doc, dict) or not ("history" in doc or "forecast" in doc):
        raise SignalError("Electricity Maps answer: expected a carbon-intensity history or forecast (v3)")
    zone = region or doc.get("zone")
    if not zone:
        raise SignalError("Electricity Maps answer has no zone; give --region")
    rows, n = [], {"observations": 0, "forecasts": 0, "empty": 0}
    for i, h in enumerate(doc.get("history") or []):
        if h.get("carbonIntensity") is None:
            n["empty"] += 1  # an hour without a value is left out: missing, never 0
            continue
        start = to_ms(h.get("datetime"), f"history[{i}] datetime")
        known = to_ms(h.get("updatedAt") or h.get("createdAt"), f"history[{i}] updatedAt")
        rows.append(_row(zone, start, start + HOUR_MS, h.get("carbonIntensity"), "electricitymaps",
                         str(h.get("emissionFactorType") or "v3"), observed=known))
        n["observations"] += 1
    if doc.get("forecast"):
        issued = to_ms(doc.get("updatedAt"), "updatedAt")
        for i, f in enumerate(doc["forecast"]):
            if f.get("carbonIntensity") is None:
                n["empty"] += 1
                continue
            start = to_ms(f.get("datetime"), f"forecast[{i}] datetime")
            rows.append(_row(zone, start, start + HOUR_MS, f.get("carbonIntensity"), "electricitymaps-forecast", "v3",
                             issued=issued))
            n["forecasts"] += 1
    return rows, n
