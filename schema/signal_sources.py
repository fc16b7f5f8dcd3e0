"""Answers of the intensity APIs carbonspan reads, as signal-log rows (``schema.signal_log``).

One definition shared by the agent's live sources (which append what they read to
``[agent.signal_log]``) and ``carbonspan shadow signals`` (which converts saved answers), so a
value becomes the same row either way (docs/contracts.md, "Recording signals").

- GB grid operator (NESO Carbon Intensity API, ``/intensity``, ``/intensity/{from}/fw48h``):
  ``data[]`` of ``{from, to, intensity: {forecast, actual}}``. The API gives no publication
  times, so the time the answer was fetched is when each value was known: an ``actual``
  becomes an observation with ``observed_at`` = the fetch; a ``forecast`` for a half hour
  starting at or after the fetch becomes a forecast with ``issued_at`` = the fetch (the 48 h
  forecast). Forecasts of past half hours are left out (their issue time is unknown), and
  counted.
- Electricity Maps v3 (``/carbon-intensity/latest``: one value; ``/history``: ``history[]``;
  ``/forecast``: ``forecast[]`` and ``updatedAt``): hourly ``{carbonIntensity, datetime,
  updatedAt}``. An observation is known when it was fetched (the agent) or, for a saved
  answer, at its ``updatedAt``; a forecast was issued at the answer's ``updatedAt``.
- RTE éCO2mix on ODRÉ (``eco2mix-national-tr`` records): ``{date_heure, taux_co2}``, the
  quarter hour starting at ``date_heure``; known when fetched. ``taux_co2`` counts direct
  combustion emissions only (not life-cycle), which ``version`` says.

ENTSO-E's A75 documents become rows in the agent (``agent/sources/entsoe.py``), where their
parser and the emission factors live.
"""

from __future__ import annotations

from typing import Any

from schema.signal_log import SignalLogError, make_row, to_ms

HALF_HOUR_MS = 1_800_000
HOUR_MS = 3_600_000
QUARTER_MS = 900_000
GB_SOURCE, GB_FORECAST_SOURCE, GB_VERSION = "gb-carbon-intensity", "gb-carbon-intensity-forecast", "api-2.0"
EM_SOURCE, EM_FORECAST_SOURCE = "electricitymaps", "electricitymaps-forecast"
RTE_SOURCE, RTE_VERSION = "rte-eco2mix", "eco2mix-national-tr/taux_co2-direct"


def from_gb(doc: Any, fetched_ms: int, region: str = "GB") -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows and counters (``observations``, ``forecasts``, ``past_forecasts_left_out``, ``empty``)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise SignalLogError("GB carbon intensity answer: expected {\"data\": [...]} (api.carbonintensity.org.uk)")
    rows, n = [], {"observations": 0, "forecasts": 0, "past_forecasts_left_out": 0, "empty": 0}
    for i, p in enumerate(doc["data"]):
        where = f"data[{i}]"
        if not isinstance(p, dict):
            raise SignalLogError(f"GB carbon intensity answer {where}: expected an object")
        start = to_ms(p.get("from"), f"{where} from")  # the API writes 2018-01-20T12:00Z
        end = start + HALF_HOUR_MS if p.get("to") is None else to_ms(p["to"], f"{where} to")
        block = p.get("intensity") if isinstance(p.get("intensity"), dict) else {}
        actual, forecast = block.get("actual"), block.get("forecast")
        if actual is not None:
            rows.append(make_row(region, start, end, actual, GB_SOURCE, GB_VERSION, observed_ms=fetched_ms))
            n["observations"] += 1
        if forecast is not None and start >= fetched_ms:
            rows.append(make_row(region, start, end, forecast, GB_FORECAST_SOURCE, GB_VERSION, issued_ms=fetched_ms))
            n["forecasts"] += 1
        elif forecast is not None and actual is None:
            n["past_forecasts_left_out"] += 1
        if actual is None and forecast is None:
            n["empty"] += 1
    return rows, n


def from_electricitymaps(doc: Any, region: str | None = None,
                         fetched_ms: int | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows and counters (``observations``, ``forecasts``, ``empty``) of a latest, history or
    forecast answer. ``fetched_ms``: when the answer was fetched (observations known then),
    else each value's ``updatedAt``."""
    if not isinstance(doc, dict) or not ("history" in doc or "forecast" in doc or "carbonIntensity" in doc):
        raise SignalLogError("Electricity Maps answer: expected a carbon-intensity latest, history or forecast (v3)")
    zone = region or doc.get("zone")
    if not zone:
        raise SignalLogError("Electricity Maps answer has no zone; give --region")
    rows, n = [], {"observations": 0, "forecasts": 0, "empty": 0}
    history = doc.get("history") if "history" in doc else ([doc] if "carbonIntensity" in doc else [])
    for i, h in enumerate(history or []):
        where = f"history[{i}]" if "history" in doc else "latest"
        if not isinstance(h, dict) or h.get("carbonIntensity") is None:
            n["empty"] += 1  # an hour without a value is left out: missing, never 0
            continue
        start = to_ms(h.get("datetime"), f"{where} datetime")
        known = fetched_ms if fetched_ms is not None else to_ms(h.get("updatedAt") or h.get("createdAt"),
                                                                 f"{where} updatedAt")
        rows.append(make_row(zone, start, start + HOUR_MS, h.get("carbonIntensity"), EM_SOURCE,
                             str(h.get("emissionFactorType") or "v3"), observed_ms=known))
        n["observations"] += 1
    if doc.get("forecast"):
        issued = to_ms(doc.get("updatedAt"), "updatedAt")
        for i, f in enumerate(doc["forecast"]):
            if not isinstance(f, dict) or f.get("carbonIntensity") is None:
                n["empty"] += 1
                continue
            start = to_ms(f.get("datetime"), f"forecast[{i}] datetime")
            rows.append(make_row(zone, start, start + HOUR_MS, f.get("carbonIntensity"), EM_FORECAST_SOURCE, "v3",
                                 issued_ms=issued))
            n["forecasts"] += 1
    return rows, n


def from_rte(doc: Any, fetched_ms: int, region: str = "FR") -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows and counters (``observations``, ``empty``) of an éCO2mix records answer."""
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise SignalLogError("RTE éCO2mix answer: expected {\"results\": [...]} (ODRÉ Explore v2.1, eco2mix-national-tr)")
    rows, n = [], {"observations": 0, "empty": 0}
    for i, rec in enumerate(results):
        if not isinstance(rec, dict) or rec.get("taux_co2") is None:
            n["empty"] += 1
            continue
        start = to_ms(rec.get("date_heure"), f"results[{i}] date_heure")
        rows.append(make_row(region, start, start + QUARTER_MS, rec["taux_co2"], RTE_SOURCE, RTE_VERSION,
                             observed_ms=fetched_ms))
        n["observations"] += 1
    return rows, n
