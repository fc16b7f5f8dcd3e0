"""ENTSO-E data as data: production types with life-cycle emission factors, bidding zones.

**Emission factors** (gCO2eq per kWh generated, life-cycle basis, the basis of the bundled
annual intensities in ``docs/carbon-model.md`` and of Electricity Maps' default values).
Where IPCC AR5 WG3 Annex III (2014), Table A.III.2 gives a life-cycle median for the
technology, that median is used. For the types it does not cover, the row says what is used
and why; each choice is also in ``docs/energy-sources.md``. ``None`` means the type is left
out of the weighted mean (pumped-storage generation: its energy was produced earlier by the
rest of the grid, so the current mix's own intensity stands for it).

**Bidding zones** by their EIC codes (Energy Identification Codes, issued by ENTSO-E; the
16th character is a check character, verified by ``eic_is_valid`` and by a test for every
row). Each zone also names the Electricity Maps zone that ``agent/sources/zones.py`` gives
cloud regions, so one region table serves both live sources.
"""

from __future__ import annotations

from typing import NamedTuple

IPCC = "IPCC AR5 WG3 Annex III (2014), Table A.III.2, life-cycle median"


class ProductionType(NamedTuple):
    name: str  # ENTSO-E's name of the psrType
    gco2_kwh: float | None  # None: not part of the mean (see the module docstring)
    source: str


PRODUCTION_TYPES: dict[str, ProductionType] = {
    "B01": ProductionType("Biomass", 230.0, f"{IPCC}: biomass, dedicated"),
    "B02": ProductionType(
        "Fossil Brown coal/Lignite",
        820.0,
        f"{IPCC}: coal (pulverised); IPCC gives no lignite row. Electricity Maps also counts "
        "lignite as coal. A lower bound: lignite emits more CO2 per kWh than hard coal",
    ),
    "B03": ProductionType(
        "Fossil Coal-derived gas",
        820.0,
        f"{IPCC}: coal. Coke-oven and blast-furnace gas are by-products of coal in steel "
        "making; per unit of energy they carry as much CO2 as coal or more (IPCC 2006 "
        "Guidelines, Vol. 2, Table 1.4), so natural gas's 490 would understate them",
    ),
    "B04": ProductionType("Fossil Gas", 490.0, f"{IPCC}: gas, combined cycle"),
    "B05": ProductionType("Fossil Hard coal", 820.0, f"{IPCC}: coal (pulverised)"),
    "B06": ProductionType(
        "Fossil Oil",
        650.0,
        "Electricity Maps' default life-cycle factor for oil (electricitymaps-contrib, "
        "config/co2eq_parameters_lifecycle, citing UK POST 2014); IPCC gives no oil row",
    ),
    "B07": ProductionType(
        "Fossil Oil shale",
        820.0,
        f"{IPCC}: coal, as Electricity Maps counts oil shale. A lower bound: oil shale emits "
        "more CO2 per unit of energy than coal (IPCC 2006 Guidelines, Vol. 2, Table 1.4)",
    ),
    "B08": ProductionType(
        "Fossil Peat",
        820.0,
        f"{IPCC}: coal, as Electricity Maps counts peat. A lower bound: peat emits more CO2 "
        "per unit of energy than coal (IPCC 2006 Guidelines, Vol. 2, Table 1.4)",
    ),
    "B09": ProductionType("Geothermal", 38.0, f"{IPCC}: geothermal"),
    "B10": ProductionType(
        "Hydro Pumped Storage",
        None,
        "left out of the mean: it returns energy the grid generated earlier (its pumping is "
        "consumption, reported as a separate series); the current mix stands for it",
    ),
    "B11": ProductionType("Hydro Run-of-river and poundage", 24.0, f"{IPCC}: hydropower"),
    "B12": ProductionType("Hydro Water Reservoir", 24.0, f"{IPCC}: hydropower"),
    "B13": ProductionType("Marine", 17.0, f"{IPCC}: ocean (tidal and wave)"),
    "B14": ProductionType("Nuclear", 12.0, f"{IPCC}: nuclear"),
    "B15": ProductionType(
        "Other renewable",
        230.0,
        f"{IPCC}: biomass, dedicated. IPCC gives no row; in ENTSO-E data this is mostly "
        "biogas, landfill and sewage gas, so the biomass value is used, not wind's or solar's",
    ),
    "B16": ProductionType(
        "Solar",
        48.0,
        f"{IPCC}: solar PV, utility (rooftop: 41). ENTSO-E does not split the two; the higher "
        "value is used so that solar is not under-counted",
    ),
    "B17": ProductionType(
        "Waste",
        230.0,
        f"{IPCC}: biomass, dedicated, as Electricity Maps counts waste. IPCC gives no row; "
        "municipal waste is part biogenic, part fossil",
    ),
    "B18": ProductionType("Wind Offshore", 12.0, f"{IPCC}: wind offshore"),
    "B19": ProductionType("Wind Onshore", 11.0, f"{IPCC}: wind onshore"),
    "B20": ProductionType(
        "Other",
        700.0,
        "Electricity Maps' default life-cycle factor for unknown generation "
        "(electricitymaps-contrib, config/co2eq_parameters_lifecycle: assumed thermal, i.e. "
        "coal, gas, oil or biomass); IPCC gives no row",
    ),
}


class BiddingZone(NamedTuple):
    key: str  # the name carbonspan uses (and accepts in zone_map)
    eic: str  # ENTSO-E's area code, in_Domain of the query
    em_zone: str  # the Electricity Maps zone of agent/sources/zones.py
    name: str


BIDDING_ZONES: tuple[BiddingZone, ...] = (
    BiddingZone("AT", "10YAT-APG------L", "AT", "Austria (APG)"),
    BiddingZone("BE", "10YBE----------2", "BE", "Belgium (Elia)"),
    BiddingZone("CH", "10YCH-SWISSGRIDZ", "CH", "Switzerland (Swissgrid)"),
    BiddingZone("DE-LU", "10Y1001A1001A82H", "DE", "Germany-Luxembourg"),
    BiddingZone("DK1", "10YDK-1--------W", "DK-DK1", "Denmark West"),
    BiddingZone("DK2", "10YDK-2--------M", "DK-DK2", "Denmark East"),
    BiddingZone("ES", "10YES-REE------0", "ES", "Spain (REE)"),
    BiddingZone("FI", "10YFI-1--------U", "FI", "Finland (Fingrid)"),
    BiddingZone("FR", "10YFR-RTE------C", "FR", "France (RTE)"),
    BiddingZone("IE-SEM", "10Y1001A1001A59C", "IE", "Ireland, Single Electricity Market"),
    BiddingZone("IT-North", "10Y1001A1001A73I", "IT-NO", "Italy North"),
    BiddingZone("NL", "10YNL----------L", "NL", "Netherlands (TenneT NL)"),
    BiddingZone("NO1", "10YNO-1--------2", "NO-NO1", "Norway NO1 (Oslo)"),
    BiddingZone("NO2", "10YNO-2--------T", "NO-NO2", "Norway NO2 (Kristiansand)"),
    BiddingZone("NO3", "10YNO-3--------J", "NO-NO3", "Norway NO3 (Trondheim)"),
    BiddingZone("NO4", "10YNO-4--------9", "NO-NO4", "Norway NO4 (Tromsø)"),
    BiddingZone("NO5", "10Y1001A1001A48H", "NO-NO5", "Norway NO5 (Bergen)"),
    BiddingZone("PL", "10YPL-AREA-----S", "PL", "Poland (PSE)"),
    BiddingZone("PT", "10YPT-REN------W", "PT", "Portugal (REN)"),
    BiddingZone("SE1", "10Y1001A1001A44P", "SE-SE1", "Sweden SE1 (Luleå)"),
    BiddingZone("SE2", "10Y1001A1001A45N", "SE-SE2", "Sweden SE2 (Sundsvall)"),
    BiddingZone("SE3", "10Y1001A1001A46L", "SE-SE3", "Sweden SE3 (Stockholm)"),
    BiddingZone("SE4", "10Y1001A1001A47J", "SE-SE4", "Sweden SE4 (Malmö)"),
)

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-"


def eic_check_char(code15: str) -> str:
    """The check character of an EIC's first 15 characters (ENTSO-E EIC reference manual:
    values 0-9, A-Z = 10-35, '-' = 36; weights 16 down to 2; 36 - ((sum - 1) mod 37))."""
    total = sum(_ALPHABET.index(c) * (16 - i) for i, c in enumerate(code15))
    return _ALPHABET[36 - ((total - 1) % 37)]


def eic_is_valid(code: str) -> bool:
    """16 characters of 0-9, A-Z, '-' whose last is the check character of the others."""
    return (
        len(code) == 16
        and all(c in _ALPHABET for c in code)
        and code[15] != "-"
        and eic_check_char(code[:15]) == code[15]
    )


def zone_by_name(value: str) -> BiddingZone | None:
    """A zone by EIC, carbonspan key (``DE-LU``) or Electricity Maps zone (``DE``), any case."""
    wanted = value.strip().upper()
    for zone in BIDDING_ZONES:
        if wanted in (zone.eic, zone.key.upper(), zone.em_zone.upper()):
            return zone
    return None
