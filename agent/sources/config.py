"""The ``[sources]`` table: which power meters and grid-intensity APIs the agent polls.

``parse_sources(table) -> SourcesConfig`` validates the raw TOML table (``Config.sections
["sources"]``) and raises ``ConfigError`` naming the key and what is expected. Each power
source kind is an array of tables (``[[sources.scaphandre]]``; a single ``[sources.kepler]``
table is accepted as a list of one) so one agent can read several meters. See
``docs/energy-sources.md`` for the reference with examples.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent.sources.entsoe_tables import BIDDING_ZONES, eic_is_valid, zone_by_name
from agent.sources.errors import ConfigError
from agent.sources.specpower_table import INSTANCE_POWER

#: Measured-source kinds, highest priority first (issue 5): a service measured by several
#: kinds takes the first one's value.
ENERGY_KINDS: tuple[str, ...] = ("alumet", "scaphandre", "kepler", "redfish", "specpower")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PollSettings(_Strict):
    """Shared by every source: its name, how often it polls and how long one poll may take."""

    name: str = Field("", pattern=r"^$|^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    interval_s: float = Field(10.0, gt=0, le=86_400)
    timeout_s: float = Field(5.0, gt=0, le=300)
    max_backoff_s: float = Field(0.0, ge=0, le=86_400)  # 0: ten intervals

    def backoff_cap(self) -> float:
        return self.max_backoff_s or self.interval_s * 10


def _rules(value: Any) -> Any:
    """``services`` as ``{service: {label: regex}}`` or ``{service: [{label: regex}, ...]}``."""
    if not isinstance(value, Mapping):
        return value
    out: dict[str, list[Any]] = {}
    for service, rule in value.items():
        out[service] = list(rule) if isinstance(rule, list) else [rule]
    return out


class _LabelMapped(PollSettings):
    """A source whose series carry labels that say which service they belong to."""

    services: dict[str, list[dict[str, str]]] = Field(default_factory=dict)

    @field_validator("services", mode="before")
    @classmethod
    def _norm(cls, v: Any) -> Any:
        return _rules(v)

    @field_validator("services")
    @classmethod
    def _compile(cls, v: dict[str, list[dict[str, str]]]) -> dict[str, list[dict[str, str]]]:
        for service, alts in v.items():
            for alt in alts:
                if not alt:
                    raise ValueError(f"service {service!r}: a rule needs at least one label")
                for label, rx in alt.items():
                    try:
                        re.compile(rx)
                    except re.error as exc:
                        raise ValueError(
                            f"service {service!r}, label {label!r}: bad regex ({exc})"
                        ) from None
        return v


class ScaphandreConfig(_LabelMapped):
    url: str = Field(pattern=r"^https?://")
    interval_s: float = Field(10.0, gt=0, le=86_400)


class KeplerConfig(_LabelMapped):
    url: str = Field(pattern=r"^https?://")
    metric: str = "kepler_container_cpu_joules_total"
    zones: list[str] = Field(default_factory=lambda: ["package"])
    zone_label: str = "zone"
    interval_s: float = Field(15.0, gt=0, le=86_400)

    @field_validator("zones")
    @classmethod
    def _no_overlap(cls, v: list[str]) -> list[str]:
        return _check_zones(v)


class AlumetConfig(_LabelMapped):
    url: str | None = Field(None, pattern=r"^https?://")
    csv_path: str | None = None
    metric: str = "rapl_consumed_energy"
    measure_interval_s: float = Field(1.0, gt=0)  # Alumet's own poll period, for gauge series
    zones: list[str] = Field(default_factory=lambda: ["package", "dram"])
    zone_label: str = "domain"

    @field_validator("zones")
    @classmethod
    def _no_overlap(cls, v: list[str]) -> list[str]:
        return _check_zones(v)

    @model_validator(mode="after")
    def _one_input(self) -> AlumetConfig:
        if (self.url is None) == (self.csv_path is None):
            raise ValueError(
                "give exactly one of `url` (Prometheus exporter) or `csv_path` (CSV output)"
            )
        return self


class RedfishConfig(PollSettings):
    url: str = Field(pattern=r"^https?://")  # the BMC's base URL, e.g. https://bmc-12.example
    chassis_id: str = Field("1", pattern=r"^[A-Za-z0-9._-]{1,64}$")
    username: str | None = None
    password_env: str | None = None
    password_file: str | None = None
    ca_file: str | None = None
    verify_tls: bool = True
    resource: Literal["auto", "Power", "EnvironmentMetrics"] = "auto"
    services: list[str] = Field(default_factory=list)
    interval_s: float = Field(30.0, gt=0, le=86_400)

    @model_validator(mode="after")
    def _check(self) -> RedfishConfig:
        if self.username is not None and not (self.password_env or self.password_file):
            raise ValueError("`username` needs `password_env` or `password_file`")
        return self


class SpecPowerConfig(PollSettings):
    instance_type: str
    vcpus: int | None = Field(None, gt=0, le=4096)
    cpu_source: Literal["proc", "prometheus"] = "proc"
    url: str | None = Field(None, pattern=r"^https?://")  # node_exporter /metrics
    proc_stat_path: str = "/proc/stat"
    services: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> SpecPowerConfig:
        row = INSTANCE_POWER.get(self.instance_type)
        if row is None:
            known = ", ".join(sorted(INSTANCE_POWER))
            raise ValueError(
                f"instance_type {self.instance_type!r} is not in the table; known: {known}"
            )
        if row.per_vcpu and self.vcpus is None:
            raise ValueError(f"instance_type {self.instance_type!r} is per vCPU: give `vcpus`")
        if not row.per_vcpu and self.vcpus is not None:
            raise ValueError(
                f"instance_type {self.instance_type!r} has the watts of its own vCPUs; drop "
                "`vcpus`, or use a per-vCPU row (generic, aws-average, ...) with `vcpus`"
            )
        if self.cpu_source == "prometheus" and not self.url:
            raise ValueError("cpu_source = 'prometheus' needs `url` (node_exporter's /metrics)")
        return self


class ElectricityMapsConfig(PollSettings):
    base_url: str = Field("https://api.electricitymap.org", pattern=r"^https?://")
    api_key_env: str = "ELECTRICITY_MAPS_API_KEY"
    api_key_file: str | None = None
    regions: list[str] | None = None  # None: the [green] default and service regions
    zone_map: dict[str, str] = Field(default_factory=dict)
    interval_s: float = Field(300.0, gt=0, le=86_400)


ENTSOE_TOKEN_ENV = "ENTSOE_SECURITY_TOKEN"


class GridOperatorConfig(PollSettings):
    """``[[sources.grid_operator]]``: one operator's API. ``gb_eso`` (GB, national),
    ``rte_eco2mix`` (France) and ``entsoe`` (the European bidding zones, with a security
    token read like the Electricity Maps key, and ``zone_map`` overrides)."""

    operator: Literal["gb_eso", "entsoe", "rte_eco2mix"] = "gb_eso"
    base_url: str | None = Field(None, pattern=r"^https?://")
    regions: list[str] | None = None  # None: the operator's own cloud regions
    interval_s: float = Field(300.0, gt=0, le=86_400)
    api_key_env: str | None = None  # entsoe: the security token; default ENTSOE_SECURITY_TOKEN
    api_key_file: str | None = None
    zone_map: dict[str, str] = Field(default_factory=dict)  # entsoe: region -> zone or EIC
    # This source's readings are stale after this many seconds; None: the operator's own
    # default (entsoe: 7200, as it publishes up to an hour late), else [sources] max_signal_age_s.
    max_signal_age_s: float | None = Field(None, gt=0, le=7 * 86_400)

    @model_validator(mode="after")
    def _check(self) -> GridOperatorConfig:
        if self.operator != "entsoe":
            extra = [k for k in ("api_key_env", "api_key_file") if getattr(self, k) is not None]
            extra += ["zone_map"] if self.zone_map else []
            if extra:
                raise ValueError(
                    f"{', '.join(extra)}: only operator = 'entsoe' takes them "
                    f"({self.operator!r} needs no key and covers one zone)"
                )
            return self
        for region, zone in self.zone_map.items():
            if zone_by_name(zone) is None and not eic_is_valid(zone):
                known = ", ".join(z.key for z in BIDDING_ZONES)
                raise ValueError(
                    f"zone_map[{region!r}] = {zone!r} is neither a known bidding zone ({known}) "
                    "nor a valid 16-character EIC code (e.g. '10YFR-RTE------C')"
                )
        return self

    def token_env(self) -> str:
        return self.api_key_env or ENTSOE_TOKEN_ENV


class SourcesConfig(_Strict):
    max_signal_age_s: float = Field(3600.0, gt=0)
    alumet: list[AlumetConfig] = Field(default_factory=list)
    scaphandre: list[ScaphandreConfig] = Field(default_factory=list)
    kepler: list[KeplerConfig] = Field(default_factory=list)
    redfish: list[RedfishConfig] = Field(default_factory=list)
    specpower: list[SpecPowerConfig] = Field(default_factory=list)
    electricity_maps: ElectricityMapsConfig | None = None
    grid_operator: list[GridOperatorConfig] = Field(default_factory=list)

    @field_validator(
        "alumet", "scaphandre", "kepler", "redfish", "specpower", "grid_operator", mode="before"
    )
    @classmethod
    def _one_is_a_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, Mapping) else v

    def named(self) -> list[tuple[str, str, PollSettings]]:
        """``(kind, name, settings)`` for every source; unnamed ones get ``kind`` or ``kind-N``."""
        out: list[tuple[str, str, PollSettings]] = []
        for kind in (*ENERGY_KINDS, "grid_operator"):
            items: list[PollSettings] = getattr(self, kind)
            for i, item in enumerate(items, 1):
                out.append((kind, item.name or (kind if len(items) == 1 else f"{kind}-{i}"), item))
        if self.electricity_maps is not None:
            out.append(
                (
                    "electricity_maps",
                    self.electricity_maps.name or "electricity_maps",
                    self.electricity_maps,
                )
            )
        return out


_OVERLAPS = {"core": "package", "uncore": "package", "psys": "*", "platform": "*"}


def _check_zones(zones: list[str]) -> list[str]:
    present = set(zones)
    for zone, parent in _OVERLAPS.items():
        if zone in present and (parent == "*" and len(present) > 1 or parent in present):
            raise ValueError(
                f"zones {sorted(present)} overlap ({zone!r} is inside another): "
                "the same joules would be counted twice"
            )
    return zones


def parse_sources(table: Mapping[str, Any] | None) -> SourcesConfig:
    """Validate the ``[sources]`` table; raise ``ConfigError`` naming the key that is wrong."""
    try:
        cfg = SourcesConfig.model_validate(dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    names = [name for _, name, _ in cfg.named()]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"sources: source names must be unique; repeated: {', '.join(dupes)} "
            "(set `name` on each)"
        )
    return cfg


_PATTERN_HINTS = {
    "url": "must be an http:// or https:// URL",
    "base_url": "must be an http:// or https:// URL",
    "name": "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
    "chassis_id": "must be 1-64 letters, digits, '.', '_' or '-' (the Id under /redfish/v1/Chassis)",
}


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors()[:5]:
        loc = "sources"
        for part in err["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else f".{part}"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling against docs/energy-sources.md)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif err["type"] == "string_pattern_mismatch":
            msg = _PATTERN_HINTS.get(str(err["loc"][-1]), msg) + f", got {err['input']!r}"
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines)
