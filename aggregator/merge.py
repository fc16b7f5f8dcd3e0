"""The ordered merge of two AggregateStates: ``left`` then ``right``.

The left side's first-seen facts win (a service's region, the order of services, regions and
tags); caps apply as if the right side's windows had been folded after the left's: a right
service that does not fit is dropped with all it carried (``dropped_*``), a tag past the tag
cap counts each of its occurrences as rejected. The engines always merge per-file states
left to right in file order, which is why local and Dask reports are byte-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

from aggregator.accumulators import HostRegionAcc, RegionAcc, ServiceAcc
from aggregator.coverage import merge_runs
from aggregator.fold import MAX_SAMPLES, UNATTRIBUTED, AggregateState
from aggregator.fold_backfill import BackfillSums
from aggregator.series import merge_series


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
    for name, acc in right.services.items():
        mine = left.services.get(name)
        if mine is None:
            if len(left.services) >= left.max_services:
                left.dropped_services += acc.windows
                left.dropped_energy += acc.energy
                left.dropped_carbon += acc.carbon
                continue
            mine = left.services[name] = ServiceAcc(acc.region)
        mine.add(acc, left.models)
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
            left._methodology({key: value})
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


_SUMMED = (
    "windows", "runtime_windows", "fallback_windows", "requests", "energy", "host_energy",
    "operational_kg", "embodied_kg", "database_kg", "messaging_kg", "dropped_services",
    "dropped_energy", "dropped_carbon", "host_named_services", "one_sided_windows", "idle_windows", "dropped_regions", "dropped_host_rows", "lines",
    "windows_outside", "malformed", "rejected_models", "traces_counted", "root_spans",
    "energy_without_carbon", "coverage_gaps_joined", "windows_without_end",
)
