"""Grid operators' own APIs behind one interface: regions -> zones, one reading per zone.

``GridOperatorSource`` (``intensity.py``) asks the operator which zone each configured cloud
region is in, then calls ``fetch`` once per distinct zone per poll. The registry of
operators, ``OPERATORS``, is in ``intensity.py``; ENTSO-E is in ``entsoe.py``.

- ``gb_eso``: GB National Grid ESO Carbon Intensity API, ``GET {base}/intensity`` ->
  ``data[0].intensity.actual`` (``forecast`` while the actual is not published, marked
  estimated) for the half hour ``data[0].from`` .. ``to``. One zone, GB.
- ``rte_eco2mix``: RTE's éCO2mix through the ODRÉ open-data API (OpenDataSoft Explore v2.1),
  ``GET {base}/api/explore/v2.1/catalog/datasets/eco2mix-national-tr/records`` for the most
  recent record with a ``taux_co2`` (gCO2/kWh of France's generation, **direct combustion
  emissions only**, not life-cycle), a 15-minute value for the quarter hour starting at
  ``date_heure``. One zone, FR; no key.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, ClassVar, NamedTuple, Protocol

from agent.sources.config import GridOperatorConfig
from agent.sources.errors import SourceError
from agent.sources.http import http_get
from agent.sources.liveutil import check_intensity, parse_json, parse_time
from schema.signal_log import SignalLogError
from schema.signal_sources import from_gb, from_rte

ESO_PERIOD_S = 1800.0  # the GB ESO API's settlement periods are half hours
ECO2MIX_PERIOD_S = 900.0  # éCO2mix real-time values are quarter-hourly
ECO2MIX_DATASET = "eco2mix-national-tr"


class OperatorReading(NamedTuple):
    gco2_kwh: float
    period_end: float  # unix seconds at which the period the value is for ends
    estimated: bool  # the operator marked it estimated, or carbonspan found it partial
    #: the answer's values as signal-log rows (``schema.signal_log``, region = the zone), for
    #: ``[agent.signal_log]``: what the operator published, not only the value the scorer uses
    rows: tuple[dict[str, Any], ...] = ()
    rows_error: str = ""  # why the answer gave no rows although it gave a reading (counted)


def answer_rows(convert: Any, doc: Any, now: float, zone: str) -> tuple[tuple[dict[str, Any], ...], str]:
    """``convert(doc, fetched_ms, zone)``'s rows, or none and why: the reading itself was
    checked, and its record failing is counted (``unreadable_answer``), never a failed poll."""
    try:
        return tuple(convert(doc, int(now * 1000), zone)[0]), ""
    except SignalLogError as exc:
        return (), str(exc)


class GridOperator(Protocol):
    """One operator's API: where it lives, which cloud regions it covers, one reading per zone."""

    default_base_url: str
    default_regions: tuple[str, ...]
    default_max_age_s: float | None  # its readings' staleness bound (None: [sources] max_signal_age_s)
    stats: dict[str, int]  # shown in the source's health()

    def zones(self, regions: Iterable[str]) -> dict[str, str]:
        """Lowercased region -> the operator's zone; ``ConfigError`` names unknown regions."""
        ...

    def start(self) -> None:
        """Resolve secrets; ``ConfigError`` naming the source when one is missing."""
        ...

    def fetch(self, base_url: str, zone: str, timeout_s: float, now: float) -> OperatorReading:
        """The latest reading for ``zone``; ``SourceError`` (or ``SourceAuthError``) if none."""
        ...


class OneZoneOperator:
    """An operator with one national zone and no credentials."""

    key: ClassVar[str] = ""
    zone: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    default_regions: ClassVar[tuple[str, ...]] = ()
    default_max_age_s: ClassVar[float | None] = None

    def __init__(self, name: str = "", cfg: GridOperatorConfig | None = None) -> None:
        self.name = name or self.key
        self.stats: dict[str, int] = {}

    def zones(self, regions: Iterable[str]) -> dict[str, str]:
        return {r.lower(): self.zone for r in regions}

    def start(self) -> None:
        pass


class GbEso(OneZoneOperator):
    """GB National Grid ESO Carbon Intensity API (api.carbonintensity.org.uk), national."""

    key = "gb_eso"
    zone = "GB"
    default_base_url = "https://api.carbonintensity.org.uk"
    default_regions = ("gb", "eu-west-2", "europe-west2", "uksouth", "ukwest")

    def fetch(self, base_url: str, zone: str, timeout_s: float, now: float) -> OperatorReading:
        url = f"{base_url.rstrip('/')}/intensity"
        where = f"grid_operator gb_eso ({url})"
        doc = parse_json(
            http_get(url, timeout_s=timeout_s, headers={"Accept": "application/json"}), where
        )
        try:
            period = doc["data"][0]
            block = period["intensity"]
        except (KeyError, IndexError, TypeError):
            raise SourceError(f"{where}: no data[0].intensity in the answer") from None
        actual = block.get("actual") if isinstance(block, dict) else None
        value = (
            actual
            if actual is not None
            else (block.get("forecast") if isinstance(block, dict) else None)
        )
        if value is None:
            raise SourceError(f"{where}: data[0].intensity has neither actual nor forecast")
        if period.get("to") is not None:
            ends = parse_time(period["to"], where)
        else:
            ends = parse_time(period.get("from"), where) + ESO_PERIOD_S
        rows, error = answer_rows(from_gb, {"data": [period]}, now, zone)  # the actual only:
        return OperatorReading(check_intensity(value, where), ends, actual is None, rows, error)  # not a forecast

    def forecast(self, base_url: str, zone: str, timeout_s: float, now: float) -> list[dict[str, Any]]:
        """The 48 h forecast from now (``/intensity/{from}/fw48h``) as signal-log rows: forecasts
        issued now for the half hours ahead, and the actuals the answer holds. Fetched only
        when ``[agent.signal_log]`` records (one more request per poll)."""
        url = f"{base_url.rstrip('/')}/intensity/{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime(now))}/fw48h"
        where = f"grid_operator gb_eso ({url})"
        doc = parse_json(http_get(url, timeout_s=timeout_s, headers={"Accept": "application/json"}), where)
        try:
            return from_gb(doc, int(now * 1000), zone)[0]
        except SignalLogError as exc:
            raise SourceError(f"{where}: {exc}") from None


class RteEco2mix(OneZoneOperator):
    """RTE éCO2mix national real-time data on ODRÉ (odre.opendatasoft.com), France."""

    key = "rte_eco2mix"
    zone = "FR"
    default_base_url = "https://odre.opendatasoft.com"
    default_regions = ("fr", "eu-west-3", "europe-west9", "francecentral", "francesouth")

    def fetch(self, base_url: str, zone: str, timeout_s: float, now: float) -> OperatorReading:
        url = (
            f"{base_url.rstrip('/')}/api/explore/v2.1/catalog/datasets/{ECO2MIX_DATASET}/records"
            "?order_by=date_heure%20desc&limit=1&where=taux_co2%20is%20not%20null"
        )
        where = f"grid_operator rte_eco2mix ({url})"
        doc = parse_json(
            http_get(url, timeout_s=timeout_s, headers={"Accept": "application/json"}), where
        )
        results = doc.get("results") if isinstance(doc, dict) else None
        if not isinstance(results, list):
            raise SourceError(f"{where}: no `results` list in the answer")
        if not results or not isinstance(results[0], dict):
            raise SourceError(f"{where}: no record with a taux_co2 value in the answer")
        record = results[0]
        value = check_intensity(record.get("taux_co2"), f"{where} taux_co2")
        start = parse_time(record.get("date_heure"), f"{where} date_heure")
        # real-time values, provisional until RTE consolidates them; not model estimates
        return OperatorReading(value, start + ECO2MIX_PERIOD_S, False,
                               *answer_rows(from_rte, {"results": [record]}, now, zone))
