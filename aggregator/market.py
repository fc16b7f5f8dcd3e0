"""Market-based Scope 2 factors: the ``--market-factors`` TOML file, and the same factors read
back from a report's ``methodology.market_factors`` (so ``verify`` needs no file).

The file::

    [market]
    source = "Supplier-specific rate, EDF contract 2026; AIB European Residual Mix 2024 elsewhere"
    [market.regions]          # gCO2e per kWh of the facility's electricity
    eu-west-3 = 0.0           # covered by a PPA with guarantees of origin
    eu-central-1 = 713.0      # residual mix

Every mistake is a :class:`MarketFactorsError` naming the file (or report block) and the key
and saying what to write; nothing is folded before the file is known to be good.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schema.constants import REGION_RE

#: A factor above this is a unit mistake (kg or lb for g, per MWh for per kWh), not a grid:
#: lignite, the dirtiest generation, emits about 1,200 g/kWh life-cycle (IPCC AR5 WGIII).
MAX_FACTOR_GCO2_KWH = 10_000.0
MAX_FACTOR_REGIONS = 1024  # the aggregator's region cap
MAX_SOURCE_CHARS = 2048
FORMULA = (
    "per region r: facility energy = (energy_kwh + host_energy_kwh) x pue; market_based_r = "
    "facility energy x factor_r / 1000 kg where a factor is given (contractual), else "
    "location_based_r (location_fallback); market_based = location_based - sum of contractual "
    "regions' location_based_r + their market_based_r (GHG Protocol Scope 2 Guidance, 2015)"
)
EXAMPLE = '[market]\nsource = "Supplier-specific rate, contract 2026"\n[market.regions]\neu-west-3 = 0.0'


class MarketFactorsError(ValueError):
    """A market factors file or block that cannot be used; ``str(exc)`` says what to write."""


@dataclass(frozen=True, slots=True)
class MarketFactors:
    """The source text and region (lowercase) -> gCO2e/kWh, sorted by region."""

    source: str
    regions: dict[str, float]

    def factor(self, region: str) -> float | None:
        """The factor of ``region`` (matched case-insensitively), or None."""
        return self.regions.get(region.lower())


def _err(where: str, text: str) -> MarketFactorsError:
    return MarketFactorsError(f"{where}: {text}" if where else text)


def load_market_factors(path: Path) -> MarketFactors:
    """Read and check a ``--market-factors`` file."""
    where = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise _err(where, f"cannot read the market factors file "
                   f"({exc.strerror or exc}); give the path of a TOML file") from None
    except UnicodeDecodeError:
        raise _err(where, "not UTF-8 text; save the TOML file as UTF-8") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _err(where, f"not valid TOML ({exc}); for example:\n{EXAMPLE}") from None
    unknown = sorted(set(doc) - {"market"})
    if unknown:
        raise _err(where, f"unknown top-level key {unknown[0]!r}; the file holds one "
                   "[market] table with source = \"...\" and a [market.regions] table")
    market = doc.get("market")
    if not isinstance(market, dict):
        raise _err(where, f"no [market] table; write:\n{EXAMPLE}")
    return check_factors(market, where, "[market]")


def check_factors(block: Mapping[str, Any], where: str, table: str) -> MarketFactors:
    """Check a ``{source, regions}`` mapping (the file's [market] table or a report's block)."""
    in_file = table == "[market]"
    regions_key = "[market.regions]" if in_file else f"{table}.regions"
    extra = sorted(set(block) - ({"source", "regions"} if in_file else {"source", "regions", "formula"}))
    if extra:
        raise _err(where, f"unknown key {extra[0]!r} in {table}; it holds source = \"...\" "
                   f"and {regions_key} only")
    source = block.get("source")
    if not isinstance(source, str) or not source.strip():
        raise _err(
            where, f"{table} source is missing or empty; say where the factors come from, e.g. "
            'source = "Supplier-specific rate, EDF contract 2026; AIB European Residual Mix 2024" '
            "(an auditor must see it)")
    if len(source) > MAX_SOURCE_CHARS:
        raise _err(where, f"{table} source is {len(source)} characters; keep it under "
                   f"{MAX_SOURCE_CHARS} and cite the documents by name")
    raw = block.get("regions")
    if not isinstance(raw, dict):
        raise _err(where, f"no {regions_key} table of region = gCO2e/kWh; write:\n{EXAMPLE}")
    if not raw:
        raise _err(where, f"{regions_key} is empty; give at least one region's factor, "
                   "e.g. eu-west-3 = 0.0")
    if len(raw) > MAX_FACTOR_REGIONS:
        raise _err(where, f"{regions_key} has {len(raw)} regions; at most {MAX_FACTOR_REGIONS}")
    regions: dict[str, float] = {}
    spelled: dict[str, str] = {}
    for key, value in raw.items():
        regions[_region(key, spelled, where, regions_key)] = _factor(value, key, where, regions_key)
    return MarketFactors(source, dict(sorted(regions.items())))


def _region(key: object, spelled: dict[str, str], where: str, table: str) -> str:
    if not isinstance(key, str) or not REGION_RE.fullmatch(key):
        raise _err(where, f"{table} key {key!r} is not a region name; use the cloud "
                   "region or country code of the window lines (1-64 letters, digits, - or _), "
                   "e.g. eu-west-3")
    name = key.lower()
    if name == "unknown":
        raise _err(where, f"{table} key {key!r}: 'unknown' is the row of spans without a "
                   "region, not a grid; a contract applies to a known region, name it")
    if name in spelled:
        raise _err(where, f"{table} keys {spelled[name]!r} and {key!r} name the same region "
                   "(region names are case-insensitive); keep one")
    spelled[name] = key
    return name


def _factor(value: object, key: str, where: str, table: str) -> float:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    what = f"{table} {key} = {shown}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _err(where, f"{what} is not a number; write gCO2e per kWh as a number, e.g. {key} = 713.0")
    if isinstance(value, float) and not math.isfinite(value):
        raise _err(where, f"{what} is not a finite number; write gCO2e per kWh, e.g. {key} = 713.0")
    if value < 0:
        raise _err(where, f"{what} is negative; an emission factor is 0 or more gCO2e per kWh "
                   "(certificates that cover the electricity give 0, never less)")
    if value > MAX_FACTOR_GCO2_KWH:
        raise _err(where, f"{what} is above {MAX_FACTOR_GCO2_KWH:,.0f} gCO2e/kWh, more than any grid "
                   "emits: is it per MWh, or in kg? write grams per kWh (e.g. 0.713 kg/kWh -> 713.0)")
    return float(value) + 0.0  # -0.0 -> 0.0


def from_report(report: Mapping[str, Any]) -> MarketFactors | None:
    """The factors a report declares in ``methodology.market_factors`` (None when it has none)."""
    methodology = report.get("methodology")
    block = methodology.get("market_factors") if isinstance(methodology, dict) else None
    if block is None:
        return None
    if not isinstance(block, dict):
        raise MarketFactorsError("methodology.market_factors is not an object")
    return check_factors(block, "", "methodology.market_factors")
