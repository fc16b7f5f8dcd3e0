"""The annual intensity table as data: each region's level (gCO2e/kWh) with its source.

Table vintage ``ember-2025``. Three sources, tried in this order for every table region:

1. ``ember_2025``: Ember's yearly electricity data, the annual carbon intensity of each
   country's electricity *generation* (gCO2e/kWh), latest year per country in Ember's 2025
   release, CC-BY-4.0 (attribution in ``agent/carbon/data/NOTICE.md``). A national figure is a
   national grid's level, so it holds for every region on that country's grid, whichever
   provider names it and whichever of the country's Electricity Maps zones gives the region
   its profile (eu-north-1 on SE-SE3 takes Sweden's 35.4). The United States has no national
   grid: its cloud regions take their balancing area's value (2., else 3.) and the US figure
   scores the ISO code ``us`` only.
2. ``ccf_em_2023_2024``: subnational North American and Brazilian rows, annual averages of
   2023-2024 from Cloud Carbon Footprint and Electricity Maps, *consumption*-based (imports
   and exports traced). Each row is given for one region; it holds for the regions at the same
   site on the same zone (``SUBNATIONAL``, listed region by region).
3. ``electricitymaps_2022_mean``: every other region, the mean of its Electricity Maps zone
   over the 8,760 hours of 2022 (consumption-based, life-cycle; ``data/profiles.json``,
   ODbL 1.0).

Every text below is copied into each window line's ``methodology`` block, where an auditor
reads it without this code, so each names its regions and values one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

EMBER = "ember_2025"
SUBNATIONAL_KEY = "ccf_em_2023_2024"
EM_2022 = "electricitymaps_2022_mean"
TABLE_VINTAGE = "ember-2025"


@dataclass(frozen=True, slots=True)
class Source:
    """Who published a level, on what basis, of which year, under which licence."""

    key: str
    publisher: str
    basis: str
    vintage: str
    licence: str

    def label(self) -> str:
        return f"{self.publisher}; {self.basis}; vintage {self.vintage}; {self.licence}"


SOURCES: dict[str, Source] = {
    EMBER: Source(
        EMBER,
        "Ember yearly electricity data (national grids)",
        "generation-based annual gCO2e/kWh",
        f"latest year per country, table {TABLE_VINTAGE}",
        "CC-BY-4.0, Ember",
    ),
    SUBNATIONAL_KEY: Source(
        SUBNATIONAL_KEY,
        "Cloud Carbon Footprint and Electricity Maps (subnational grids)",
        "consumption-based annual average gCO2e/kWh",
        "2023-2024",
        "Cloud Carbon Footprint Apache-2.0, Electricity Maps data portal ODbL 1.0",
    ),
    EM_2022: Source(
        EM_2022,
        "Electricity Maps hourly data, mean of the zone's 8,760 hours",
        "consumption-based, life-cycle gCO2e/kWh",
        "2022",
        "ODbL 1.0, agent/carbon/data/profiles.json",
    ),
}

#: Ember, national grids, by ISO 3166-1 alpha-2 code (lowercase): gCO2e/kWh.
EMBER_2025: dict[str, float] = {
    "fr": 41.5,
    "de": 329.6,
    "pl": 590.8,
    "gb": 217.4,
    "ie": 255.9,
    "se": 35.4,
    "no": 28.1,
    "fi": 57.5,
    "nl": 253.6,
    "be": 109.3,
    "it": 284.6,
    "es": 153.6,
    "jp": 477.4,
    "sg": 497.1,
    "au": 524.6,
    "in": 670.5,
    "us": 384.4,
}
#: Countries without one national grid: their figure scores the ISO code alone.
NOT_ONE_GRID: frozenset[str] = frozenset({"us"})


@dataclass(frozen=True, slots=True)
class SubnationalRow:
    value: float  # gCO2e/kWh
    given_for: str  # the region the source gives it for
    site: str  # where that region's data centres are
    zone: str  # its Electricity Maps zone (profile shape)
    regions: tuple[str, ...]  # every table region at the same site on that zone


SUBNATIONAL: tuple[SubnationalRow, ...] = (
    SubnationalRow(379.0, "us-east-1", "N. Virginia", "US-MIDA-PJM",
                   ("us-east-1", "us-east4", "eastus", "eastus2")),
    SubnationalRow(410.0, "us-east-2", "Ohio", "US-MIDA-PJM", ("us-east-2", "us-gov-east-1", "us-east5")),
    SubnationalRow(200.0, "us-west-1", "N. California", "US-CAL-CISO", ("us-west-1", "westus")),
    SubnationalRow(89.0, "us-west-2", "Oregon", "US-NW-BPAT", ("us-west-2", "us-gov-west-1", "us-west1")),
    SubnationalRow(13.0, "ca-central-1", "Quebec", "CA-QC",
                   ("ca-central-1", "northamerica-northeast1", "canadaeast")),
    SubnationalRow(96.0, "sa-east-1", "Sao Paulo (BR-CS)", "BR-CS",
                   ("sa-east-1", "southamerica-east1", "brazilsouth")),
    SubnationalRow(426.0, "us-central1", "Iowa", "US-MIDW-MISO", ("us-central1", "centralus")),
)  # fmt: skip
SUBNATIONAL_BY_REGION: dict[str, SubnationalRow] = {r: row for row in SUBNATIONAL for r in row.regions}


def country_of(zone: str) -> str:
    """ISO code (lowercase) of an Electricity Maps zone: ``SE-SE3`` -> ``se``."""
    return zone.split("-", 1)[0].lower()


def annual_level(name: str, zone: str | None, zone_mean: float | None) -> tuple[float, str] | None:
    """``(gCO2e/kWh, source key)`` of a table region, by the order in the module docstring."""
    row = SUBNATIONAL_BY_REGION.get(name)
    if row is not None:
        return row.value, SUBNATIONAL_KEY
    country = country_of(zone) if zone else name
    if country in EMBER_2025 and (country not in NOT_ONE_GRID or zone is None):
        return EMBER_2025[country], EMBER
    if zone_mean is not None:
        return zone_mean, EM_2022
    return None


def provenance(levels: dict[str, tuple[str, float, str | None]]) -> dict[str, str]:
    """Methodology texts, one per source: ``levels`` maps region -> (source key, value, zone).

    Each text stays well under the 2 KiB a report keeps of one methodology value.
    """
    out = {
        "intensity_table": f"table {TABLE_VINTAGE}: each region's annual gCO2e/kWh and its source, "
        "basis and vintage are named region by region under intensity_table_<source> "
        f"({', '.join(SOURCES)}); a region outside the table has no intensity (0 g, counted)",
    }
    for key, src in SOURCES.items():
        if key == EMBER:
            body = "; ".join(
                f"{code} {value:g}: " + ", ".join(sorted(r for r, (k, _, z) in levels.items()
                                                         if k == EMBER and (country_of(z) if z else r) == code))
                for code, value in EMBER_2025.items()
            )  # fmt: skip
        elif key == SUBNATIONAL_KEY:
            body = "; ".join(
                f"{row.value:g} given for {row.given_for}, applied at its site ({row.site}, zone {row.zone}): "
                + ", ".join(row.regions)
                for row in SUBNATIONAL
            )
        else:
            body = "; ".join(
                f"{r} {v:g} ({z})" for r, (k, v, z) in sorted(levels.items()) if k == key
            )
        out[f"intensity_table_{key}"] = f"{src.label()}: {body}"
    return out
