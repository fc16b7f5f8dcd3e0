"""Live grid carbon intensity: Electricity Maps API v3 and grid operators' own APIs.

Both poll on their interval (default 5 minutes) and keep the latest reading per region; the
snapshot keeps a reading however old it is, with the time it is *for*, so the scorer can
tell a stale value (older than ``max_signal_age_s``) from a missing one, fall back to the
profile/annual value and mark the region ``intensity_estimated``.

A reading's ``taken_at`` is the last time the value was known to describe the grid: the
time of the poll that fetched it, but never later than the end of the period it is for
(Electricity Maps: ``datetime`` + 1 h, its values being hourly; GB ESO: ``to``). So a value
is stale ``max_signal_age_s`` after the feed last confirmed it as current, and a value for a
long-past period is as old as that period. Taking the period's *start* instead would make
every hourly value stale a few minutes into the next hour, until the next poll (up to 5
minutes later) brought the new hour: the region would flap to the profile value once an hour.

- Electricity Maps: ``GET {base}/v3/carbon-intensity/latest?zone=Z`` with the ``auth-token``
  header; ``carbonIntensity`` (gCO2eq/kWh), ``datetime``, ``isEstimated``. One request per
  distinct zone. Tag ``electricity_maps_api``.
- Grid operators (tag ``grid_operator_api``) implement ``GridOperator.fetch``. First one:
  GB National Grid ESO Carbon Intensity API, ``GET {base}/intensity`` ->
  ``data[0].intensity.actual`` (``forecast`` when the actual is not yet published, marked
  estimated) for the half hour starting ``data[0].from``. RTE eco2mix or ENTSO-E slot in as
  further ``GridOperator`` classes in ``OPERATORS`` (and their names in
  ``GridOperatorConfig.operator``).
"""

from __future__ import annotations

import math
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Protocol

import orjson

from agent.carbon.signals import LiveIntensity
from agent.sources.config import ElectricityMapsConfig, GridOperatorConfig
from agent.sources.errors import ConfigError, SourceAuthError, SourceError
from agent.sources.http import http_get
from agent.sources.zones import zone_for

# Coal, the most carbon-intensive common generation, emits 740-910 gCO2eq/kWh over its life
# cycle (IPCC AR5 WG3 Annex III, Table A.III.2). A grid mix an order of magnitude above that
# is a broken feed, not a grid: refusing it keeps a bad value (say 1e300) out of the reports.
MAX_PLAUSIBLE_GCO2_KWH = 10_000.0
EM_PERIOD_S = 3600.0  # Electricity Maps' carbon-intensity values are hourly
ESO_PERIOD_S = 1800.0  # the GB ESO API's settlement periods are half hours


def parse_time(value: Any, where: str) -> float:
    """RFC 3339 / ISO 8601 (``2024-05-01T12:00:00.000Z``, ``2018-01-20T12:00Z``) -> unix s."""
    if not isinstance(value, str):
        raise SourceError(f"{where}: expected an ISO 8601 time string, got {value!r}")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SourceError(f"{where}: {value!r} is not an ISO 8601 time") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _intensity(value: Any, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise SourceError(f"{where}: carbon intensity {value!r} is not a non-negative number")
    if value > MAX_PLAUSIBLE_GCO2_KWH:
        raise SourceError(
            f"{where}: carbon intensity {value!r} gCO2/kWh is not plausible for a grid "
            f"(above {MAX_PLAUSIBLE_GCO2_KWH:g}); the value is not used"
        )
    return float(value)


def _json(body: bytes, where: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise SourceError(f"{where}: the body is not JSON") from None


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

    def confirmed_at(self, period_end: float) -> float:
        """``taken_at`` of a value fetched now whose period ends at ``period_end``."""
        return min(self.clock(), period_end)

    def start(self) -> None:
        """Resolve secrets; raise ``ConfigError`` naming the source when one is missing."""

    def fetch(self, zone: str) -> LiveIntensity:
        raise NotImplementedError

    def poll(self) -> None:
        """Fetch every zone once; keep what succeeded, then report what failed."""
        errors: list[str] = []
        for zone in sorted(set(self.region_zones.values())):
            try:
                reading = self.fetch(zone)
            except SourceAuthError:
                raise
            except SourceError as exc:
                errors.append(f"zone {zone}: {exc}")
                continue
            with self._lock:
                for region, z in self.region_zones.items():
                    if z == zone:
                        self._latest[region] = reading
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
        if cfg.api_key_file:
            try:
                self._token = Path(cfg.api_key_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"sources.electricity_maps {self.name}: cannot read api_key_file {cfg.api_key_file!r} ({exc.strerror})"
                ) from None
        else:
            self._token = os.environ.get(cfg.api_key_env, "").strip()
        if not self._token:
            where = (
                f"api_key_file {cfg.api_key_file!r} is empty"
                if cfg.api_key_file
                else (f"the environment variable {cfg.api_key_env} is not set")
            )
            raise ConfigError(
                f"sources.electricity_maps {self.name}: no API key ({where}); get a key at "
                "electricitymaps.com and export it, or remove [sources.electricity_maps]"
            )
        if not self.region_zones:
            raise ConfigError(
                f"sources.electricity_maps {self.name}: no regions to poll; set `regions`"
            )

    def fetch(self, zone: str) -> LiveIntensity:
        url = f"{self.cfg.base_url.rstrip('/')}/v3/carbon-intensity/latest?zone={urllib.parse.quote(zone)}"
        where = f"electricity_maps {self.name} zone {zone}"
        doc = _json(
            http_get(url, timeout_s=self.cfg.timeout_s, headers={"auth-token": self._token}), where
        )
        if not isinstance(doc, dict) or "carbonIntensity" not in doc:
            raise SourceError(f"{where}: no carbonIntensity in the answer")
        return LiveIntensity(
            gco2_kwh=_intensity(doc["carbonIntensity"], where),
            tag=self.tag,
            taken_at=self.confirmed_at(parse_time(doc.get("datetime"), where) + EM_PERIOD_S),
            estimated=bool(doc.get("isEstimated", False)),
        )


class GridOperator(Protocol):
    """One operator's API: where it lives, which cloud regions it covers, one reading."""

    default_base_url: str
    default_regions: tuple[str, ...]

    def fetch(self, base_url: str, timeout_s: float) -> tuple[float, float, bool]:
        """``(gCO2/kWh, unix seconds at which the value's period ends, estimated)``."""
        ...


class GbEso:
    """GB National Grid ESO Carbon Intensity API (api.carbonintensity.org.uk), national."""

    default_base_url = "https://api.carbonintensity.org.uk"
    default_regions = ("gb", "eu-west-2", "europe-west2", "uksouth", "ukwest")

    def fetch(self, base_url: str, timeout_s: float) -> tuple[float, float, bool]:
        url = f"{base_url.rstrip('/')}/intensity"
        where = f"grid_operator gb_eso ({url})"
        doc = _json(
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
        return _intensity(value, where), ends, actual is None


OPERATORS: dict[str, Callable[[], GridOperator]] = {"gb_eso": GbEso}


class GridOperatorSource(LiveSource):
    kind = "grid_operator"
    tag = "grid_operator_api"

    def __init__(self, name: str, cfg: GridOperatorConfig) -> None:
        self.operator = OPERATORS[cfg.operator]()
        regions = cfg.regions if cfg.regions is not None else self.operator.default_regions
        super().__init__(
            name, cfg.interval_s, cfg.timeout_s, {r.lower(): cfg.operator for r in regions}
        )
        self.cfg = cfg
        self.base_url = cfg.base_url or self.operator.default_base_url

    def fetch(self, zone: str) -> LiveIntensity:
        value, period_end, estimated = self.operator.fetch(self.base_url, self.cfg.timeout_s)
        return LiveIntensity(value, self.tag, self.confirmed_at(period_end), estimated)
