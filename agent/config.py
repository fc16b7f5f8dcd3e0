"""``carbonspan.toml``: the ``[green]`` table parsed here; ``[agent]``/``[sources]`` kept raw.

Every mistake is a ``ConfigError`` naming the table, the key, what was expected and what was
found, e.g. ``[green] use_hourly_profiles: expected true or false, got "yes"``. The raw
``[agent]`` and ``[sources]`` tables are handed to their owners' parsers
(``agent.daemon_config.parse_agent``, ``agent.sources.config.parse_sources``).

    [green]
    default_region = "eu-west-3"
    use_hourly_profiles = true
    per_operation_coefficients = true
    embodied_carbon_per_request_gco2 = 0.001
    embodied_per = "trace"     # trace | root_span: what one request is for embodied carbon
    [green.service_regions]
    checkout = "eu-west-3"
    [green.calibration]
    checkout = 1.8
    [[green.hosts]]
    name = "pg-main"
    kind = "database"          # database | messaging
    region = "eu-west-3"
    watts = 120.0
    count = 2
    in_totals = true
    measured = "alumet"        # optional: a [sources] entry publishing this host's watts
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schema.constants import REGION_RE

# Upper bounds. A value past one is a unit mistake (W for kW, g for t), and a bound keeps every
# sum a window can form finite: an unbounded factor of 1e305 overflowed the report to inf.
MAX_CALIBRATION_FACTOR = 1e7  # x 1e-7 kWh = 1 kWh per I/O op, the bound on a measured rate
MAX_EMBODIED_GCO2 = 1e6  # per request: a tonne
MAX_HOST_WATTS = 1e7  # per host, before count: 10 MW, a whole data hall
MAX_HOST_COUNT = 1_000_000
TOP_LEVEL = ("green", "agent", "sources")
HOST_KINDS = ("database", "messaging")
#: What embodied carbon (SCI's M) is charged per: each distinct trace id a window sees (the
#: specification), or each root span (a span without a parent), which counts a request once
#: however many windows and agents its spans reach.
EMBODIED_UNITS = ("trace", "root_span")


class ConfigError(ValueError):
    """A configuration mistake; the message names the key and what is expected."""


@dataclass(frozen=True, slots=True)
class HostConfig:
    """A database or broker host: emits no spans; energy = watts x count x window length."""

    name: str
    kind: str  # database | messaging
    region: str = "unknown"  # lowercased
    watts: float = 0.0
    count: int = 1
    in_totals: bool = True
    measured: str | None = None  # name of a source publishing the host's watts


@dataclass(frozen=True, slots=True)
class GreenConfig:
    default_region: str | None = None  # lowercased
    use_hourly_profiles: bool = True
    per_operation_coefficients: bool = True
    embodied_carbon_per_request_gco2: float = 0.001
    embodied_per: str = "trace"  # one of EMBODIED_UNITS
    service_regions: dict[str, str] = field(default_factory=dict)  # lowercased both sides
    calibration: dict[str, float] = field(default_factory=dict)  # lowercased service -> factor
    hosts: tuple[HostConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class Config:
    green: GreenConfig = field(default_factory=GreenConfig)
    sections: dict[str, dict] = field(default_factory=dict)  # raw [agent] / [sources]


def load_config(path: str | Path | None) -> Config:
    """Read a TOML file (``None``: the built-in defaults)."""
    if path is None:
        return Config()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such configuration file; pass an existing --config") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read the configuration ({exc})") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    return parse_config(doc)


def parse_config(doc: dict[str, Any]) -> Config:
    """Validate an already-parsed TOML document."""
    for key in doc:
        if key not in TOP_LEVEL:
            raise ConfigError(
                f"{key}: unknown top-level key; expected one of {', '.join(TOP_LEVEL)}"
            )
    sections: dict[str, dict] = {}
    for name in ("agent", "sources"):
        if name in doc:
            sections[name] = _table(doc[name], f"[{name}]")
    green = parse_green(_table(doc.get("green", {}), "[green]"))
    return Config(green=green, sections=sections)


_GREEN_KEYS = (
    "default_region",
    "use_hourly_profiles",
    "per_operation_coefficients",
    "embodied_carbon_per_request_gco2",
    "embodied_per",
    "service_regions",
    "calibration",
    "hosts",
)


def parse_green(table: dict[str, Any]) -> GreenConfig:
    _known(table, _GREEN_KEYS, "[green]")
    default_region = None
    if "default_region" in table:
        default_region = _region(table["default_region"], "[green] default_region")
    return GreenConfig(
        default_region=default_region,
        use_hourly_profiles=_bool(
            table.get("use_hourly_profiles", True), "[green] use_hourly_profiles"
        ),
        per_operation_coefficients=_bool(
            table.get("per_operation_coefficients", True), "[green] per_operation_coefficients"
        ),
        embodied_carbon_per_request_gco2=_number(
            table.get("embodied_carbon_per_request_gco2", 0.001),
            "[green] embodied_carbon_per_request_gco2",
            f"a number from 0 to {MAX_EMBODIED_GCO2:,.0f} (gCO2e per request)",
            MAX_EMBODIED_GCO2,
        ),
        embodied_per=_embodied_per(table.get("embodied_per", "trace")),
        service_regions=_service_regions(table.get("service_regions", {})),
        calibration=_calibration(table.get("calibration", {})),
        hosts=_hosts(table.get("hosts", [])),
    )


def _embodied_per(value: Any) -> str:
    if value not in EMBODIED_UNITS:
        raise ConfigError(
            f'[green] embodied_per: expected "trace" (each distinct trace id in a window) or '
            f'"root_span" (each span without a parent), got {_show(value)}'
        )
    return value


def _by_service(value: Any, where: str, parse: Callable[[Any, str], Any]) -> dict[str, Any]:
    """A service -> value table with lowercased keys; a key given twice in two cases is an error."""
    out: dict[str, Any] = {}
    for service, item in _table(value, where).items():
        key = service.lower()
        if key in out:
            raise ConfigError(f"{where} {service}: listed twice (keys are case-insensitive)")
        out[key] = parse(item, f"{where} {service}")
    return out


def _service_regions(value: Any) -> dict[str, str]:
    return _by_service(value, "[green.service_regions]", _region)


def _factor(value: Any, where: str) -> float:
    what = f"a factor > 0 and <= {MAX_CALIBRATION_FACTOR:,.0f} (e.g. 1.8)"
    f = _number(value, where, what, MAX_CALIBRATION_FACTOR)
    if f == 0:
        raise ConfigError(f"{where}: expected {what}, got 0")
    return f


def _calibration(value: Any) -> dict[str, float]:
    return _by_service(value, "[green.calibration]", _factor)


_HOST_KEYS = ("name", "kind", "region", "watts", "count", "in_totals", "measured")


def _hosts(value: Any) -> tuple[HostConfig, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"[[green.hosts]]: expected an array of tables, got {_show(value)}")
    hosts: list[HostConfig] = []
    names: set[str] = set()
    for i, item in enumerate(value, start=1):
        where = f"[[green.hosts]] #{i}"
        t = _table(item, where)
        _known(t, _HOST_KEYS, where)
        if "name" not in t:
            raise ConfigError(f"{where} name: missing; every host needs a name")
        name = _string(t["name"], f"{where} name", "a non-empty string")
        if name in names:
            raise ConfigError(
                f"{where} name: {name!r} is used by an earlier host; names must be unique"
            )
        names.add(name)
        kind = t.get("kind")
        if kind not in HOST_KINDS:
            raise ConfigError(
                f'{where} kind: expected "database" or "messaging", got {_show(kind)}'
            )
        if "watts" not in t and "measured" not in t:
            raise ConfigError(f"{where} watts: missing; declare watts or name a measured source")
        count = t.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_HOST_COUNT:
            raise ConfigError(
                f"{where} count: expected an integer from 1 to {MAX_HOST_COUNT:,}, got {_show(count)}"
            )
        measured = t.get("measured")
        hosts.append(
            HostConfig(
                name=name,
                kind=kind,
                region=_region(t.get("region", "unknown"), f"{where} region"),
                watts=_number(
                    t.get("watts", 0.0),
                    f"{where} watts",
                    f"a number of watts from 0 to {MAX_HOST_WATTS:,.0f}",
                    MAX_HOST_WATTS,
                ),
                count=count,
                in_totals=_bool(t.get("in_totals", True), f"{where} in_totals"),
                measured=None
                if measured is None
                else _string(measured, f"{where} measured", "a source name"),
            )
        )
    return tuple(hosts)


def _known(table: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in keys:
            raise ConfigError(f"{where} {key}: unknown key; expected one of {', '.join(keys)}")


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table, got {_show(value)}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {_show(value)}")
    return value


def _number(value: Any, where: str, what: str, limit: float = math.inf) -> float:
    """A finite number from 0 to ``limit``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected {what}, got {_show(value)}")
    try:
        f = float(value)
    except OverflowError:  # a TOML integer too large for a float
        f = math.inf
    if not math.isfinite(f) or not 0 <= f <= limit:
        raise ConfigError(f"{where}: expected {what}, got {_show(value)}")
    return f


def _string(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected {what}, got {_show(value)}")
    return value


def _region(value: Any, where: str) -> str:
    if not isinstance(value, str) or not REGION_RE.fullmatch(value):
        raise ConfigError(
            f"{where}: expected a region name of 1-64 ASCII letters, digits, '-' or '_' "
            f'(e.g. "eu-west-3"), got {_show(value)}'
        )
    return value.lower()
