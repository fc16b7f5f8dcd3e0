"""The region rows of a window folded into ``AggregateState.regions`` (a mixin of the state).

Kept apart from aggregator.fold so that module stays readable: a region row carries the true
energy/carbon split by grid region, whatever region label a service carries; the first row
seen for a region fixes its status, intensity, PUE and intensity source.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING

from aggregator.accumulators import HostRegionAcc, RegionAcc
from aggregator.read import HostRows
from aggregator.sanitize import MAX_COUNT, MAX_FIGURE, clean_count, clean_float, clean_name

if TYPE_CHECKING:
    from aggregator.sanitize import Tally

_REGION_FIELDS = itemgetter("region", "io_ops", "energy_kwh", "co2_gco2")


class RegionRows:
    """``_regions(rows)`` (a window's region rows, each an object) and ``_host_regions(rows)``;
    the state provides ``regions``, ``host_regions``, ``tally``, ``max_regions``,
    ``dropped_regions``, ``dropped_host_rows`` and ``overflowed``."""

    regions: dict[str, RegionAcc]
    host_regions: dict[str, HostRegionAcc]
    tally: Tally
    max_regions: int
    dropped_regions: int
    dropped_host_rows: int
    overflowed: bool
    ewc_regions: dict[str, float]

    def _host_regions(self, rows: HostRows) -> None:
        """In-totals host rows ``(region, kWh, gCO2e, PUE)`` summed per region (for the market-based
        figure; general path only: a window with host rows never takes a fast path). At most
        ``max_regions`` host regions; a row past it stays location-based, counted."""
        accs = self.host_regions
        for region, energy, co2, pue in rows:
            name = clean_name(region) or "unknown"
            acc = accs.get(name)
            if acc is None:
                if len(accs) >= self.max_regions:
                    self.dropped_host_rows += 1
                    self.overflowed = True
                    continue
                acc = accs[name] = HostRegionAcc()
            acc.energy += energy
            acc.carbon += co2 / 1000.0
            acc.rows += 1
            if acc.pue is None:
                acc.pue = pue

    def _regions(self, rows: list[dict]) -> float:
        """Fold the rows; returns the energy of rows whose status is not ``resolved`` (counted
        at 0 g: energy without carbon), which is also summed per region in ``ewc_regions``."""
        tally, regions = self.tally, self.regions
        without = 0.0
        for row in rows:
            try:
                name, io, energy, co2 = _REGION_FIELDS(row)
                acc = regions.get(name) if type(name) is str else None
            except KeyError:  # a field is absent: take the defaults
                name = row.get("region")
                io, energy, co2 = row.get("io_ops", 0), row.get("energy_kwh", 0.0), row.get("co2_gco2", 0.0)
                acc = regions.get(name) if type(name) is str else None
            if acc is None:
                acc = self._new_region(row)
                if acc is None:
                    continue
            acc.rows += 1
            # inline fast path (the common clean case); the sanitisers handle everything else
            acc.io_ops += io if type(io) is int and 0 <= io <= MAX_COUNT else clean_count(io, tally)
            if not (type(energy) is float and 0.0 <= energy <= MAX_FIGURE):
                energy = clean_float(energy, tally)
            acc.energy += energy
            acc.carbon += (co2 if type(co2) is float and 0.0 <= co2 <= MAX_FIGURE else clean_float(co2, tally)) / 1000.0
            if energy and row.get("status") != "resolved":
                without += energy
                self.note_without_carbon(name, energy)
        return without

    def note_without_carbon(self, region: str, energy: float) -> None:
        """``energy`` kWh of ``region`` counted at 0 g (a region past the region cap is not listed)."""
        kept = self.ewc_regions
        if region in kept:
            kept[region] += energy
        elif len(kept) < self.max_regions:
            kept[region] = energy

    def _new_region(self, row: dict) -> RegionAcc | None:
        """First sight of a region: its status, intensity, PUE and source are kept."""
        name = clean_name(row.get("region"))
        if name is None:
            self.tally.missing += 1
            return None
        if len(self.regions) >= self.max_regions:
            self.dropped_regions += 1
            self.overflowed = True
            return None
        status, source = row.get("status"), row.get("intensity_source")
        acc = self.regions[name] = RegionAcc(
            status if type(status) is str and len(status) <= 32 else "unresolved",
            clean_float(row.get("grid_intensity_gco2_kwh", 0.0), self.tally),
            clean_float(row.get("pue", 1.0), self.tally),
            source if type(source) is str and len(source) <= 32 else "unknown",
        )
        return acc
