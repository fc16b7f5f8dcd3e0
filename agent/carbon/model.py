"""The carbon model as data plus pure lookups: intensity, PUE, profiles, energy per operation.

Formulas (docs/carbon-model.md has the derivations and sources):

    energy(span)    = ENERGY_PER_IO_OP_KWH x weight(op) x calibration(service)     [kWh]
    carbon(span)    = energy(span) x intensity(region, t) x PUE(provider)           [gCO2e]
    intensity(r, t) = annual(r)                                   profiles off / no zone
                    = annual(r) x hourly[h] / mean(hourly)                     (io_proxy_v2)
                    = annual(r) x monthly_hourly[m][h] / mean(monthly_hourly)  (io_proxy_v3)

A profile contributes only its shape; the annual table sets the level, so a region's profile
averages (day-weighted over 2022) to exactly its annual value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from agent.batch import (
    OP_CLASS_COUNT,
    OP_HTTP,
    OP_MESSAGING,
    OP_SQL_DELETE,
    OP_SQL_INSERT,
    OP_SQL_OTHER,
    OP_SQL_SELECT,
    OP_SQL_UPDATE,
)
from agent.carbon.annual import annual_level, provenance
from agent.carbon.regions import ISO_SPLIT, PROVIDER_ZONES, PUE, PUE_SOURCES
from schema.constants import ENERGY_PER_IO_OP_KWH as _SCHEMA_ENERGY_PER_IO_OP_KWH

#: Energy of one I/O operation (kWh): the proxy's unit, from the design notes (perf-sentinel's
#: I/O proxy: 0.1 Wh per thousand operations). Defined once in schema/constants.py, which the
#: aggregator and calibration read too.
ENERGY_PER_IO_OP_KWH = _SCHEMA_ENERGY_PER_IO_OP_KWH

#: Largest live grid intensity the scorer accepts (gCO2e/kWh). The most carbon-intensive
#: generation, coal and lignite, emits roughly 740-1,200 g life-cycle (IPCC AR5 WGIII,
#: Annex III, 2014), and no grid mix can exceed its dirtiest plant; a larger reading is a
#: unit or data error. The bound is generous on purpose: it is there to refuse nonsense
#: (and keep every window sum finite), not to judge a grid.
MAX_INTENSITY_GCO2_KWH = 5000.0
#: Largest measured energy per I/O operation the scorer accepts (kWh): a kilowatt-hour per
#: database call or request is an attribution error (or a near-zero op count), not a reading.
MAX_KWH_PER_OP = 1.0

#: Per-operation weights (design notes): writes cost more than reads, big responses more
#: than small ones. ``OP_HTTP`` here is the weight for an unknown response size.
OP_WEIGHTS: dict[int, float] = {
    OP_SQL_SELECT: 0.5,
    OP_SQL_INSERT: 1.5,
    OP_SQL_UPDATE: 1.5,
    OP_SQL_DELETE: 1.2,
    OP_SQL_OTHER: 1.0,
    OP_HTTP: 1.0,
    OP_MESSAGING: 1.0,
}
HTTP_SMALL_BYTES = 10 * 1024  # below: weight 0.8
HTTP_LARGE_BYTES = 1024 * 1024  # above: weight 2.0; between (inclusive): 1.2
HTTP_WEIGHTS = (0.8, 1.2, 2.0)
# buckets by searchsorted(edges, size, "right"): <0 unknown | <10 KiB | <=1 MiB | >1 MiB
HTTP_EDGES = np.array([0, HTTP_SMALL_BYTES, HTTP_LARGE_BYTES + 1], dtype=np.int64)
HTTP_WEIGHT_BY_BUCKET = np.array([1.0, *HTTP_WEIGHTS])

#: intensity kinds, in increasing fidelity (codes used in WindowPartial)
KIND_ANNUAL, KIND_HOURLY, KIND_MONTHLY_HOURLY, KIND_REAL_TIME = 0, 1, 2, 3
KIND_NAMES = ("annual", "hourly", "monthly_hourly", "real_time")
PROXY_TAG_BY_KIND = ("io_proxy_v1", "io_proxy_v2", "io_proxy_v3", "io_proxy_v1")

#: Column 288 of an intensity row holds the annual value (spans with no usable timestamp).
ANNUAL_COLUMN = 12 * 24

DATA_FILE = Path(__file__).parent / "data" / "profiles.json"
@dataclass(frozen=True, slots=True)
class Region:
    """One row of the intensity table."""

    name: str  # lowercased
    provider: str  # aws | gcp | azure | iso
    annual_gco2_kwh: float
    source: str  # key of agent.carbon.annual.SOURCES
    zone: str | None  # Electricity Maps zone of the profile


@dataclass(frozen=True, slots=True)
class Profile:
    """A zone's shape: factors whose (day-weighted) mean is exactly 1."""

    hourly: tuple[float, ...] | None = None  # 24 factors
    monthly_hourly: tuple[float, ...] | None = None  # 288 factors, month-major


@dataclass(frozen=True)
class CarbonModel:
    """The tables the scorer uses; ``CarbonModel.default()`` is the built-in one."""

    regions: dict[str, Region]
    profiles: dict[str, Profile] = field(default_factory=dict)
    pue: dict[str, float] = field(default_factory=lambda: dict(PUE))
    generic_pue: float = PUE["iso"]
    _rows: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def default(cls) -> CarbonModel:
        return _default_model()

    def region(self, name: str) -> Region | None:
        return self.regions.get(name)

    def pue_of(self, name: str) -> float:
        reg = self.regions.get(name)
        return self.pue.get(reg.provider, self.generic_pue) if reg else self.generic_pue

    def profile_kind(self, name: str, use_profiles: bool) -> int:
        """KIND_* that scoring ``name`` uses when its spans have timestamps."""
        reg = self.regions.get(name)
        prof = self.profiles.get(reg.zone) if reg and reg.zone else None
        if not use_profiles or prof is None:
            return KIND_ANNUAL
        if prof.monthly_hourly is not None:
            return KIND_MONTHLY_HOURLY
        return KIND_HOURLY if prof.hourly is not None else KIND_ANNUAL

    def intensity_row(self, name: str, use_profiles: bool) -> np.ndarray:
        """289 intensities of a table region: month x hour cells (month-major), then annual.

        Cached per (region, use_profiles): the scorer gathers rows for a batch's few regions
        and indexes them with each span's month x hour cell.
        """
        key = (name, use_profiles)
        row = self._rows.get(key)
        if row is None:
            row = self._build_row(name, use_profiles)
            row.setflags(write=False)
            self._rows[key] = row
        return row

    def _build_row(self, name: str, use_profiles: bool) -> np.ndarray:
        reg = self.regions[name]
        row = np.full(ANNUAL_COLUMN + 1, reg.annual_gco2_kwh, dtype=np.float64)
        kind = self.profile_kind(name, use_profiles)
        prof = self.profiles.get(reg.zone or "")
        if kind == KIND_MONTHLY_HOURLY and prof and prof.monthly_hourly:
            row[:ANNUAL_COLUMN] = reg.annual_gco2_kwh * np.asarray(prof.monthly_hourly)
        elif kind == KIND_HOURLY and prof and prof.hourly:
            row[:ANNUAL_COLUMN] = reg.annual_gco2_kwh * np.tile(np.asarray(prof.hourly), 12)
        return row

    def intensity_at(self, name: str, use_profiles: bool, month: int, hour: int) -> float:
        """Intensity of a table region at a UTC month (1-12) and hour (0-23)."""
        return float(self.intensity_row(name, use_profiles)[(month - 1) * 24 + hour])


@cache
def op_weight_table(per_operation_coefficients: bool) -> np.ndarray:
    """Weight per ``op_class`` (index); 0 for OP_NONE, all 1.0 when coefficients are off."""
    table = np.zeros(OP_CLASS_COUNT, dtype=np.float64)
    for op, w in OP_WEIGHTS.items():
        table[op] = w if per_operation_coefficients else 1.0
    table.setflags(write=False)
    return table


def http_weights(response_bytes: np.ndarray) -> np.ndarray:
    """HTTP weight by response size: < 10 KiB 0.8, 10 KiB..1 MiB 1.2, > 1 MiB 2.0, unknown 1.0."""
    bucket = np.searchsorted(HTTP_EDGES, response_bytes, side="right")
    return HTTP_WEIGHT_BY_BUCKET[bucket]


def _profile(zone_doc: dict) -> Profile:
    hourly = zone_doc.get("hourly")
    mh = zone_doc.get("monthly_hourly")
    if hourly is None or mh is None:
        return Profile()
    h = np.asarray(hourly, dtype=np.float64)
    cells = np.asarray(mh, dtype=np.float64)  # 12 x 24
    days = np.asarray(zone_doc["days_per_month"], dtype=np.float64)
    mh_mean = float((cells * days[:, None]).sum() / (days.sum() * 24))
    return Profile(
        hourly=tuple((h / h.mean()).tolist()),
        monthly_hourly=tuple((cells / mh_mean).ravel().tolist()),
    )


@cache
def _default_model() -> CarbonModel:
    doc = json.loads(DATA_FILE.read_text())
    zones: dict[str, dict] = doc["zones"]
    regions: dict[str, Region] = {}
    for provider, mapping in PROVIDER_ZONES.items():
        for name, zone in mapping.items():
            level = annual_level(name, zone, float(zones[zone]["annual_mean"]))
            assert level is not None  # a zone's 2022 mean is the last resort
            regions[name] = Region(name, provider, level[0], level[1], zone)
    for code in ISO_SPLIT:  # a split country is in the table only with a national figure
        level = annual_level(code, None, None)
        if level is not None:
            regions[code] = Region(code, "iso", level[0], level[1], None)
    profiles = {z: _profile(d) for z, d in zones.items()}
    return CarbonModel(regions=regions, profiles={z: p for z, p in profiles.items() if p.hourly})


def _provenance(model: CarbonModel) -> dict[str, str]:
    cached = model._rows.get("provenance")
    if cached is None:
        levels = {r.name: (r.source, r.annual_gco2_kwh, r.zone) for r in model.regions.values()}
        cached = model._rows["provenance"] = provenance(levels)
    return cached


def methodology(model: CarbonModel, use_profiles: bool, coefficients: bool) -> dict[str, str]:
    """The sources in force, for a window report's ``methodology`` block."""
    return {
        "energy_per_io_op_kwh": f"{ENERGY_PER_IO_OP_KWH:g} (design notes, I/O proxy)",
        "per_operation_coefficients": "on" if coefficients else "off",
        **_provenance(model),
        "intensity_profiles": (
            "shape of the zone's 2022 month x hour (else hour-of-day) means, scaled to the "
            "annual value"
            if use_profiles
            else "off (annual values)"
        ),
        "pue": "; ".join(f"{k}: {v}" for k, v in PUE_SOURCES.items()),
    }
