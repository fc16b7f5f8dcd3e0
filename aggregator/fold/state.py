"""AggregateState: everything a disclosure report needs, and its ordered merge.

The state grows with services, regions, tags and time buckets, never with lines. It is
filled by the fold (``aggregator/fold/reference.py``, the rules; ``fast.py``, the same fold
with the C accelerator where it is built) and merged here: ``merge`` is ordered - the left
side's first-seen facts win (a service's region, the order of services, regions and tags) and
caps apply as if the right side's windows had been folded after the left's (a right service
that does not fit is dropped with all it carried, ``dropped_*``; a tag past the tag cap counts
each of its occurrences as rejected). The engines merge per-file states left to right in file
order, which is why local and Dask reports are byte-identical.

Hosts and services are separate namespaces: the host rows (``green_summary.hosts``) are the
only host terms; their energy and carbon go to the totals and to ``carbon_breakdown`` only. A
per-service entry is a service even when a host carries the same name (counted in
``host_named_services``), so sum(applications) + hosts = total on both paths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aggregator.coverage import add_run, merge_runs
from aggregator.fold.rules import (
    DAY,
    MAX_ENERGY_MODELS,
    MAX_REGIONS,
    MAX_SAMPLES,
    MAX_SERVICES,
    UNATTRIBUTED,
    add_methodology,
    series_grid,
)
from aggregator.fold.sums import (
    BackfillSums,
    BackfillTotals,
    Bucket,
    FileStat,
    HostRegionAcc,
    RegionAcc,
    ServiceAcc,
    merge_cells,
    merge_services,
)
from aggregator.sanitize import Tally
from schema.totals import TOTAL_TERMS

if TYPE_CHECKING:
    from aggregator.read import Period

NO_BUCKET: tuple = (math.inf, -math.inf, None)  # the bucket cache before any window


@dataclass
class AggregateState:
    """Everything a disclosure report needs; grows with services, never with lines."""

    services: dict[str, ServiceAcc] = field(default_factory=dict)
    unattributed: ServiceAcc = field(default_factory=lambda: ServiceAcc("unknown"))
    regions: dict[str, RegionAcc] = field(default_factory=dict)
    host_regions: dict[str, HostRegionAcc] = field(default_factory=dict)  # in-totals hosts by region
    models: dict[str, int] = field(default_factory=dict)  # bare tag -> accepted occurrences
    calibration_applied: bool = False
    methodology: dict[str, list[str]] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    windows: int = 0
    first_start: float = float("inf")  # epoch seconds of the earliest / latest window start
    last_start: float = float("-inf")
    runtime_windows: int = 0
    fallback_windows: int = 0
    requests: int = 0
    energy: float = 0.0
    host_energy: float = 0.0
    operational_kg: float = 0.0
    embodied_kg: float = 0.0
    database_kg: float = 0.0
    messaging_kg: float = 0.0
    dropped_services: int = 0
    dropped_energy: float = 0.0
    dropped_carbon: float = 0.0
    host_named_services: int = 0  # per-service entries named like a host of their window (kept)
    one_sided_windows: int = 0  # runtime maps with only one side non-empty: folded by the proxy
    idle_windows: int = 0  # nothing to attribute (host-only windows): neither runtime nor fallback
    traces_counted: int = 0  # Σ window.traces / Σ window.root_spans over windows recording both
    root_spans: int = 0
    energy_without_carbon: float = 0.0  # kWh counted at 0 g (unresolved / out-of-table regions)
    ewc_regions: dict[str, float] = field(default_factory=dict)  # region -> those kWh
    spans: dict[str, list] = field(default_factory=dict)  # agent -> runs of window time (coverage)
    coverage_gaps_joined: int = 0  # gaps lost to the runs cap (aggregator.coverage.MAX_RUNS)
    windows_without_end: int = 0  # in-period windows without a readable window.end (no coverage)
    rejected_models: int = 0
    dropped_regions: int = 0
    dropped_host_rows: int = 0  # host rows past the host-region cap (max_regions)
    lines: int = 0
    windows_outside: int = 0
    malformed: int = 0
    malformed_samples: list[str] = field(default_factory=list)
    files: list[FileStat] = field(default_factory=list)
    fallback_files: list[str] = field(default_factory=list)
    chains: dict[str, list] = field(default_factory=dict)  # agent -> [first, last, windows]
    series: dict[int, Bucket] = field(default_factory=dict)  # bucket start (epoch s) -> sums (aggregate.series)
    series_origin: int = 0  # the bucket grid (set_grid: from the period)
    series_width: int = DAY
    # what backfilled lines added (docs/report-format.md, "Backfill"): in total, and per service
    backfill: BackfillTotals = field(default_factory=BackfillTotals)
    backfill_services: dict[str, BackfillSums] = field(default_factory=dict)
    max_services: int = MAX_SERVICES  # caps are fields so property tests can use small ones
    max_models: int = MAX_ENERGY_MODELS
    max_regions: int = MAX_REGIONS
    #: a cap refused a new name here (so merging this state on the right may not equal one
    #: sequential fold: the engines fold such a partition again, seeded; see Known)
    overflowed: bool = False
    _layouts: dict = field(default_factory=dict, repr=False)  # caches, never merged or shipped
    _seen_meta: set = field(default_factory=set, repr=False)
    _last_meta: dict = field(default_factory=dict, repr=False)
    _last_meta_raw: bytes = field(default=b"", repr=False)  # the bytes of the block the byte path noted last
    _last_key: tuple = field(default=(), repr=False)  # the key and layout of the last cached window
    _last_layout: object = field(default=None, repr=False)
    _bcache: tuple = field(default=NO_BUCKET, repr=False)  # (lo, hi, bucket) being folded into

    def drop_caches(self) -> None:
        """Forget derived caches (before a state is shipped between processes)."""
        self._layouts.clear()
        self._seen_meta.clear()
        self._last_meta, self._last_meta_raw = {}, b""
        self._last_key, self._last_layout = (), None
        self._bcache = NO_BUCKET

    def set_grid(self, period: Period) -> None:
        """Bucket this state's windows by ``period``'s grid (before any window is folded)."""
        grid = series_grid(period)
        if (self.series_origin, self.series_width) == grid:
            return
        if self.series:
            raise ValueError(f"this state already holds buckets of {self.series_width} s from "
                             f"{self.series_origin}; fold the period {period} into a new state")
        self.series_origin, self.series_width = grid
        self._bcache = NO_BUCKET

    def note_malformed(self, location: str, reason: str) -> None:
        self.malformed += 1
        if len(self.malformed_samples) < MAX_SAMPLES:
            self.malformed_samples.append(f"{location}: {reason}")

    def note_without_carbon(self, region: str, energy: float) -> None:
        """``energy`` kWh of ``region`` counted at 0 g (a region past the region cap is not listed)."""
        kept = self.ewc_regions
        if region in kept:
            kept[region] += energy
        elif len(kept) < self.max_regions:
            kept[region] = energy

    def note_methodology(self, meta: dict) -> None:
        """Add a methodology block's values (a key refused at the key cap overflows the state)."""
        if add_methodology(self.methodology, meta):
            self.overflowed = True

    def add_run(self, agent: str, lo: float, hi: float) -> None:
        """A run of this agent's window time, ``[lo, hi]`` (see aggregator.coverage)."""
        runs = self.spans.get(agent)
        if runs is None:
            self.spans[agent] = [[lo, hi]]
        else:
            self.coverage_gaps_joined += add_run(runs, lo, hi)

    def merge(self, other: AggregateState) -> AggregateState:
        """Fold ``other`` in after ``self`` (in place; returns ``self``)."""
        return merge_into(self, other)


@dataclass(frozen=True, slots=True)
class Known:
    """The names a state folded on the left already holds, in their first-seen order.

    A partition folded on its own cannot know them: when it refuses a name at a cap, that
    name may be one the left side knows (and a sequential fold would keep crediting it), and
    the left side may have less room than the partition assumed. Such a partition is folded
    again from a state seeded with these names (:func:`seeded`), which applies
    every cap exactly as one sequential fold over all the lines would.
    """

    services: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    method_keys: tuple[str, ...] = ()
    host_regions: tuple[str, ...] = ()


def seeded(known: Known, **caps: int) -> AggregateState:
    """A fresh state holding ``known``'s names as empty entries, so that its caps leave
    exactly the room the left side has left. Merging it after that left side adds zeros
    to what the left holds and credits each name exactly as one sequential fold would."""
    state = AggregateState(**caps)
    for name in known.services:
        state.services[name] = ServiceAcc("unknown")
    for name in known.regions:
        state.regions[name] = RegionAcc("unresolved", 0.0, 1.0, "unknown")
    for tag in known.models:
        state.models[tag] = 0
    for key in known.method_keys:
        state.methodology[key] = []
    for name in known.host_regions:
        state.host_regions[name] = HostRegionAcc()
    return state


def known_names(state: AggregateState) -> Known:
    """The names ``state`` holds (what a partition folded after it must treat as present)."""
    return Known(tuple(state.services), tuple(state.regions), tuple(state.models), tuple(state.methodology),
                 tuple(state.host_regions))


def merge_into(left: AggregateState, right: AggregateState) -> AggregateState:
    """Fold ``right`` into ``left`` after it (in place; returns ``left``)."""
    left.drop_caches()
    left.calibration_applied |= right.calibration_applied
    for tag, count in right.models.items():
        if tag in left.models:
            left.models[tag] += count
        elif len(left.models) < left.max_models:
            left.models[tag] = count
        else:
            left.rejected_models += count
    left.dropped_services, left.dropped_energy, left.dropped_carbon = merge_services(
        left.services, right.services, left.models, left.max_services,
        (left.dropped_services, left.dropped_energy, left.dropped_carbon))
    left.unattributed.add(right.unattributed, left.models)
    merge_series(left, right)
    for name, sums in right.backfill_services.items():  # where the service itself was kept
        if name == UNATTRIBUTED or name in left.services:
            mine_b = left.backfill_services.get(name)
            if mine_b is None:
                mine_b = left.backfill_services[name] = BackfillSums()
            mine_b.add(sums)
    left.backfill.add(right.backfill)
    for name, racc in right.regions.items():
        mine_r = left.regions.get(name)
        if mine_r is None:
            if len(left.regions) >= left.max_regions:
                left.dropped_regions += racc.rows
                continue
            mine_r = left.regions[name] = RegionAcc(racc.status, racc.intensity, racc.pue, racc.source)
        mine_r.rows += racc.rows
        mine_r.io_ops += racc.io_ops
        mine_r.energy += racc.energy
        mine_r.carbon += racc.carbon
    for name, hacc in right.host_regions.items():
        mine_h = left.host_regions.get(name)
        if mine_h is None:
            if len(left.host_regions) >= left.max_regions:
                left.dropped_host_rows += hacc.rows
                continue
            mine_h = left.host_regions[name] = HostRegionAcc()
        mine_h.energy += hacc.energy
        mine_h.carbon += hacc.carbon
        mine_h.rows += hacc.rows
        if mine_h.pue is None:  # first recorded, in file order
            mine_h.pue = hacc.pue
    for region, kwh in right.ewc_regions.items():
        left.note_without_carbon(region, kwh)
    left.coverage_gaps_joined += merge_runs(left.spans, right.spans)
    for key, values in right.methodology.items():
        for value in values:
            left.note_methodology({key: value})
    left.tally.merge(right.tally)
    left.first_start = min(left.first_start, right.first_start)
    left.last_start = max(left.last_start, right.last_start)
    for name in _SUMMED:
        setattr(left, name, getattr(left, name) + getattr(right, name))
    room = MAX_SAMPLES - len(left.malformed_samples)
    left.malformed_samples.extend(right.malformed_samples[: max(0, room)])
    left.files.extend(right.files)
    left.fallback_files.extend(right.fallback_files)
    for agent, (first, last, n) in right.chains.items():
        span = left.chains.get(agent)
        if span is None:
            left.chains[agent] = [first, last, n]
        else:
            span[0] = span[0] or first
            span[1] = last or span[1]
            span[2] += n
    return left


def merge_series(left: AggregateState, right: AggregateState) -> None:
    """Add ``right``'s buckets into ``left``'s (after ``left.services`` took ``right``'s): a
    cell of a service the left side dropped at its cap goes to the bucket's dropped sums, as
    the entries would have in one sequential fold."""
    if not right.series:
        return
    if not left.series:
        left.series_origin, left.series_width = right.series_origin, right.series_width
    elif (left.series_origin, left.series_width) != (right.series_origin, right.series_width):
        raise ValueError("cannot merge states bucketed on different grids (folded for different periods)")
    kept = left.services
    for key, theirs in right.series.items():
        mine = left.series.get(key)
        if mine is None:
            mine = left.series[key] = Bucket()
        mine.add(theirs)
        merge_cells(mine, theirs.services, kept, UNATTRIBUTED)


_SUMMED = (
    "windows", "runtime_windows", "fallback_windows", "requests", "energy", "host_energy",
    *(term + "_kg" for term in TOTAL_TERMS), "dropped_services",
    "dropped_energy", "dropped_carbon", "host_named_services", "one_sided_windows", "idle_windows", "dropped_regions", "dropped_host_rows", "lines",
    "windows_outside", "malformed", "rejected_models", "traces_counted", "root_spans",
    "energy_without_carbon", "coverage_gaps_joined", "windows_without_end",
)
