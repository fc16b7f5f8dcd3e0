"""Scope 2 both ways (GHG Protocol Scope 2 Guidance, 2015): location-based and market-based.

The location-based figure is what every carbon figure already is: the electricity's energy x
PUE x the grid's average intensity, summed over the period's windows. The market-based figure
replaces, region by region, the grid average with the factor of the contractual instruments
that cover the electricity (``--market-factors``, docs/report-format.md):

    facility_r    = (energy_kwh_r + host_energy_kwh_r) x pue_r                      [kWh]
    market_r      = facility_r x factor_r / 1000          (a factor is given: contractual)
                  = location_r                            (none: location_fallback)
    market_based  = location_based - sum_c location_c + sum_c market_c    (c: contractual)

``location_r`` is the carbon of the region's rows plus that of its in-totals hosts, so for a
factor equal to the intensity the location figure used (``location_intensity_gco2_kwh``) the
two figures agree. Carbon in no region row (v1.0 windows without ``regions[]``, rows past the
region cap) stays location-based in both. Computed from the folded state when the report is
built, so the fold, the merge and the C fast path do not depend on the factors.
"""

from __future__ import annotations

from aggregator.fold.state import AggregateState
from aggregator.fold.sums import HostRegionAcc, RegionAcc
from aggregator.market import FORMULA, MarketFactors
from schema.report import MarketFactors as MarketFactorsModel
from schema.report import Scope2, Scope2Region
from schema.totals import scope2_of


def _pue(racc: RegionAcc | None, hacc: HostRegionAcc | None) -> tuple[str, float | None]:
    """Status and PUE of a region: its region rows', else the PUE its host rows recorded
    (``host_only``), else none known (``host_only_no_pue``: lines written before host rows
    recorded their PUE; the region then stays location-based)."""
    if racc is not None:
        return racc.status, racc.pue
    if hacc is not None and hacc.pue is not None:
        return "host_only", hacc.pue
    return "host_only_no_pue", None


def scope2(state: AggregateState, factors: MarketFactors) -> Scope2:
    """The ``aggregate.scope2`` block of ``state`` under ``factors``."""
    location = scope2_of(state, "_kg")  # schema.totals.SCOPE2_TERMS
    delta = 0.0  # sum over contractual regions of (market_r - location_r), in region order
    rows = []
    for name in sorted(set(state.regions) | set(state.host_regions)):
        racc, hacc = state.regions.get(name), state.host_regions.get(name)
        status, known_pue = _pue(racc, hacc)
        pue = 1.0 if known_pue is None else known_pue
        energy = racc.energy if racc is not None else 0.0
        host_energy = hacc.energy if hacc is not None else 0.0
        loc = (racc.carbon if racc is not None else 0.0) + (hacc.carbon if hacc is not None else 0.0)
        facility = (energy + host_energy) * pue
        # No PUE known: the facility energy is unknown, so no factor can be applied.
        factor = factors.factor(name) if known_pue is not None else None
        if factor is None:
            market = loc
        else:
            market = facility * factor / 1000.0
            delta += market - loc
        rows.append(Scope2Region(
            region=name, status=status,
            market_basis="location_fallback" if factor is None else "contractual",
            market_factor_gco2_kwh=factor, pue=pue, energy_kwh=energy, host_energy_kwh=host_energy,
            facility_energy_kwh=facility,
            location_intensity_gco2_kwh=loc * 1000.0 / facility if facility > 0.0 else 0.0,
            location_based_kgco2eq=loc, market_based_kgco2eq=market,
        ))
    seen = {r.region.lower() for r in rows}
    return Scope2(
        location_based_kgco2eq=location,
        market_based_kgco2eq=max(0.0, location + delta),  # max: a rounding residue is not < 0
        regions=rows,
        unmatched_factor_regions=[r for r in factors.regions if r not in seen],
        dropped_host_rows=state.dropped_host_rows,
    )


def methodology_block(factors: MarketFactors) -> MarketFactorsModel:
    """``methodology.market_factors``: the source, every factor given, and the formula."""
    return MarketFactorsModel(source=factors.source, regions=dict(factors.regions), formula=FORMULA)
