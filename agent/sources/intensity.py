"""Live grid carbon intensity: Electricity Maps API v3 and grid operators' own APIs.

Both poll on their interval (default 5 minutes) and keep the latest reading per region; the
snapshot keeps a reading however old it is, with the time it is *for*, so the scorer can
tell a stale value (older than ``max_signal_age_s``) from a missing one, fall back to the
profile/annual value and mark the region ``intensity_estimated``.

A reading's ``taken_at`` is the last time the value was known to describe the grid: the
time of the poll that fetched it, but never later than the end of the period it is for
(Electricity Maps: ``datetime`` + 1 h, its values being hourly; GB ESO: ``to``; RTE
éCO2mix: ``date_heure`` + 15 min; ENTSO-E: the end of the interval the value was computed
for). So a value is stale ``max_signal_age_s`` after the feed last confirmed it as current,
and a value for a long-past period is as old as that period. Taking the period's *start*
instead would make every hourly value stale a few minutes into the next hour, until the next
poll (up to 5 minutes later) brought the new hour: the region would flap to the profile
value once an hour.

- Electricity Maps: ``GET {base}/v3/carbon-intensity/latest?zone=Z`` with the ``auth-token``
  header; ``carbonIntensity`` (gCO2eq/kWh), ``datetime``, ``isEstimated``. One request per
  distinct zone. Tag ``electricity_maps_api``.
- Grid operators (tag ``grid_operator_api``) implement ``GridOperator``
  (``agent/sources/operators.py``): ``zones(regions)`` maps cloud regions to the operator's
  zones and ``fetch(base_url, zone, timeout_s, now)`` reads one zone, once per distinct zone
  per poll. ``OPERATORS`` below names them for ``[[sources.grid_operator]] operator``:

  - ``gb_eso``: GB National Grid ESO Carbon Intensity API (``data[0].intensity.actual``, or
    ``forecast`` marked estimated), one zone;
  - ``rte_eco2mix``: RTE éCO2mix on ODRÉ, France's latest 15-minute ``taux_co2`` (direct
    combustion emissions, not life-cycle: lower than the other sources' values), one zone;
  - ``entsoe``: ENTSO-E Transparency Platform actual generation per production type (A75)
    per bidding zone, weighted by life-cycle emission factors (``agent/sources/entsoe.py``,
    factors and EIC codes in ``entsoe_tables.py``), with a security token.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

from agent.carbon.signals import LiveIntensity
from agent.sources.config import ElectricityMapsConfig, GridOperatorConfig
from agent.sources.entsoe import EntsoE
from agent.sources.errors import ConfigError, SourceAuthError, SourceError
from agent.sources.http import http_get
from agent.sources.liveutil import (
    MAX_PLAUSIBLE_GCO2_KWH,
    check_intensity,
    parse_json,
    parse_time,
    read_secret,
)
from agent.sources.operators import (
    ESO_PERIOD_S,
    GbEso,
    GridOperator,
    OperatorReading,
    RteEco2mix,
)
from agent.sources.zones import zone_for
from schema.signal_log import SignalLogError
from schema.signal_sources import from_electricitymaps


class Recorder(Protocol):
    """Where a source's signal-log rows go (``agent.signal_recorder.SignalRecorder``)."""

    def submit(self, rows: list[dict[str, Any]]) -> None: ...

    def error(self, reason: str, n: int = 1, detail: str = "") -> None: ...

__all__ = [
    "ESO_PERIOD_S",
    "MAX_PLAUSIBLE_GCO2_KWH",
    "OPERATORS",
    "ElectricityMapsSource",
    "EntsoE",
    "GbEso",
    "GridOperator",
    "GridOperatorSource",
    "LiveSource",
    "OperatorReading",
    "RteEco2mix",
    "parse_time",
]

EM_PERIOD_S = 3600.0  # Electricity Maps' carbon-intensity values are hourly


class LiveSource:
    """Base of the live-intensity sources: fetch per zone, keep the latest per region."""

    kind: ClassVar[str] = ""
    tag: ClassVar[str] = ""

    def __init__(
        self, name: str, interval_s: float, timeout_s: float, region_zones: dict[str, str]
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.region_zones = region_zones  # lowercased region -> zone
        self._lock = threading.Lock()
        self._latest: dict[str, LiveIntensity] = {}
        self.stats: dict[str, int] = {}
        self.clock: Callable[[], float] = time.time  # the manager sets its own
        self.recorder: Recorder | None = None  # the manager sets it with [agent.signal_log]

    def confirmed_at(self, period_end: float) -> float:
        """``taken_at`` of a value fetched now whose period ends at ``period_end``."""
        return min(self.clock(), period_end)

    def start(self) -> None:
        """Resolve secrets; raise ``ConfigError`` naming the source when one is missing."""

    def fetch(self, zone: str) -> LiveIntensity:
        return self.read(zone)[0]

    def read(self, zone: str) -> tuple[LiveIntensity, list[dict[str, Any]]]:
        """The zone's reading, and (when recording) the answer's values as signal-log rows
        filed under the zone."""
        raise NotImplementedError

    def poll(self) -> None:
        """Fetch every zone once; keep what succeeded, record its rows, then report what failed."""
        errors: list[str] = []
        rows: list[dict[str, Any]] = []
        for zone in sorted(set(self.region_zones.values())):
            try:
                reading, zone_rows = self.read(zone)
            except SourceAuthError:
                raise
            except SourceError as exc:
                errors.append(f"zone {zone}: {exc}")
                continue
            regions = sorted(r for r, z in self.region_zones.items() if z == zone)
            with self._lock:
                for region in regions:
                    self._latest[region] = reading
            rows += [{**row, "region": region} for region in regions for row in zone_rows]
        if rows and self.recorder is not None:
            self.recorder.submit(rows)
        if errors:
            raise SourceError("; ".join(errors))

    def snapshot(self, now: float) -> dict[str, LiveIntensity]:
        with self._lock:
            return dict(self._latest)


class ElectricityMapsSource(LiveSource):
    kind = "electricity_maps"
    tag = "electricity_maps_api"

    def __init__(self, name: str, cfg: ElectricityMapsConfig, regions: Iterable[str]) -> None:
        zones = {r.lower(): zone_for(r, cfg.zone_map) for r in regions}
        unknown = sorted(r for r, z in zones.items() if z is None)
        if unknown:
            raise ConfigError(
                f"sources.electricity_maps {name}: no Electricity Maps zone known for region(s) "
                f"{', '.join(unknown)}; add them to zone_map, e.g. zone_map = {{ {unknown[0]!r} = 'DE' }}"
            )
        super().__init__(name, cfg.interval_s, cfg.timeout_s, {r: z for r, z in zones.items() if z})
        self.cfg = cfg
        self._token = ""

    def start(self) -> None:
        cfg = self.cfg
        self._token = read_secret(
            cfg.api_key_env,
            cfg.api_key_file,
            f"sources.electricity_maps {self.name}",
            "API key",
            "get a key at electricitymaps.com and export it, or remove [sources.electricity_maps]",
        )
        if not self.region_zones:
            raise ConfigError(
                f"sources.electricity_maps {self.name}: no regions to poll; set `regions`"
            )

    def read(self, zone: str) -> tuple[LiveIntensity, list[dict[str, Any]]]:
        url = f"{self.cfg.base_url.rstrip('/')}/v3/carbon-intensity/latest?zone={urllib.parse.quote(zone)}"
        where = f"electricity_maps {self.name} zone {zone}"
        doc = parse_json(
            http_get(url, timeout_s=self.cfg.timeout_s, headers={"auth-token": self._token}), where
        )
        if not isinstance(doc, dict) or "carbonIntensity" not in doc:
            raise SourceError(f"{where}: no carbonIntensity in the answer")
        reading = LiveIntensity(
            gco2_kwh=check_intensity(doc["carbonIntensity"], where),
            tag=self.tag,
            taken_at=self.confirmed_at(parse_time(doc.get("datetime"), where) + EM_PERIOD_S),
            estimated=bool(doc.get("isEstimated", False)),
        )
        rows: list[dict[str, Any]] = []
        if self.recorder is not None:
            try:  # known when the agent read it: what a decision then could have used
                rows = from_electricitymaps(doc, zone, fetched_ms=int(self.clock() * 1000))[0]
            except SignalLogError as exc:
                self.recorder.error("unreadable_answer", detail=f"{self.name}: {exc}")
        return reading, rows


#: ``[[sources.grid_operator]] operator`` -> the operator, built with the source's name and table.
OPERATORS: dict[str, Callable[[str, GridOperatorConfig], GridOperator]] = {
    "gb_eso": GbEso,
    "rte_eco2mix": RteEco2mix,
    "entsoe": EntsoE,
}


class GridOperatorSource(LiveSource):
    kind = "grid_operator"
    tag = "grid_operator_api"

    def __init__(self, name: str, cfg: GridOperatorConfig) -> None:
        self.operator = OPERATORS[cfg.operator](name, cfg)
        regions = cfg.regions if cfg.regions is not None else self.operator.default_regions
        super().__init__(name, cfg.interval_s, cfg.timeout_s, self.operator.zones(regions))
        self.stats = self.operator.stats  # the operator's counters show in health()
        self.cfg = cfg
        self.base_url = cfg.base_url or self.operator.default_base_url
        self.max_age_s = (
            cfg.max_signal_age_s
            if cfg.max_signal_age_s is not None
            else self.operator.default_max_age_s
        )

    def start(self) -> None:
        self.operator.start()
        if not self.region_zones:
            raise ConfigError(f"sources.grid_operator {self.name}: no regions to poll; set `regions`")

    def read(self, zone: str) -> tuple[LiveIntensity, list[dict[str, Any]]]:
        now = self.clock()
        reading = self.operator.fetch(self.base_url, zone, self.cfg.timeout_s, now)
        live = LiveIntensity(
            reading.gco2_kwh,
            self.tag,
            self.confirmed_at(reading.period_end),
            reading.estimated,
            self.max_age_s,
        )
        if self.recorder is None:
            return live, []
        rows = list(reading.rows)
        if reading.rows_error:
            self.recorder.error("unreadable_answer", detail=f"{self.name}: {reading.rows_error}")
        forecast = getattr(self.operator, "forecast", None)
        if forecast is not None:
            try:
                rows += forecast(self.base_url, zone, self.cfg.timeout_s, now)
            except SourceError as exc:  # the reading stands; the missing forecast is counted
                self.recorder.error("forecast_unavailable", detail=f"{self.name}: {exc}")
        return live, rows
