"""AggregateState: the fold of sanitised windows into disclosure figures, and its merge.

Each window takes one of two paths (docs/report-format.md):

- **runtime** - the line carries both per-service maps, each non-empty: sum them per service;
- **proxy** - no maps (a v1.0 line), or only one of the two (a *one-sided* window, counted in
  ``one_sided_windows``: its other side's total would be lost): split the window's
  application energy and carbon by
  each service's share of I/O ops; energy is ``energy_kwh`` when > 0, else
  ``total_io_ops x ENERGY_PER_IO_OP_KWH``; with nothing to split by the window goes to the
  ``_unattributed`` bucket (or fails under strict attribution).

Hosts and services are separate namespaces: the host rows (``green_summary.hosts``) are the
only host terms; their energy and carbon go to the totals and to ``carbon_breakdown`` only. A
per-service entry is a service even when a host carries the same name (counted in
``host_named_services``), so Σ applications + hosts = total on both paths. ``merge`` is ordered - the left side's first-seen facts win and
caps apply as if the right side's windows had been folded after the left's - so folding file
partitions and merging them in file order is the same computation on one machine or on Dask.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING

from aggregator.accumulators import (
    Bucket,
    FileStat,
    RegionAcc,
    ServiceAcc,
    _Layout,
    add_methodology,
)
from aggregator.coverage import add_run
from aggregator.fold_backfill import BackfillSums, BackfillTerm, BackfillTotals, is_backfill
from aggregator.fold_fast import PlainRuntime
from aggregator.fold_proxy import UNATTRIBUTED, AttributionError, ProxyFast  # noqa: F401 - re-exported
from aggregator.fold_regions import RegionRows
from aggregator.read import Window, clean_counts, clean_values
from aggregator.sanitize import (
    MAX_COUNT,
    MAX_FIGURE,
    Tally,
    clean_count,
    clean_float,
    clean_name,
    clean_tag,
)
from aggregator.series import DAY, NO_BUCKET, SeriesFold
from schema.tags import CAL_SUFFIX

if TYPE_CHECKING:
    from aggregator.accumulators import HostRegionAcc

MAX_SERVICES = 4096
MAX_ENERGY_MODELS = 64
MAX_REGIONS = 1024
MAX_SAMPLES = 100
MAX_LAYOUTS = 4096
_UNCOUNTED = Tally()  # a sink: a value sanitised a second time is counted once, where it is added


@dataclass
class AggregateState(RegionRows, PlainRuntime, ProxyFast, SeriesFold, BackfillTerm):
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
    series: dict[int, Bucket] = field(default_factory=dict)  # bucket start (epoch s) -> sums (aggregator.series)
    series_origin: int = 0  # the bucket grid (set_grid: from the period)
    series_width: int = DAY
    # what backfilled lines added (aggregator.fold_backfill): in total, and per service
    backfill: BackfillTotals = field(default_factory=BackfillTotals)
    backfill_services: dict[str, BackfillSums] = field(default_factory=dict)
    max_services: int = MAX_SERVICES  # caps are fields so property tests can use small ones
    max_models: int = MAX_ENERGY_MODELS
    max_regions: int = MAX_REGIONS
    #: a cap refused a new name here (so merging this state on the right may not equal one
    #: sequential fold: the engines fold such a partition again, seeded; see merge.Known)
    overflowed: bool = False
    _layouts: dict = field(default_factory=dict, repr=False)  # caches, never merged or shipped
    _seen_meta: set = field(default_factory=set, repr=False)
    _last_meta: dict = field(default_factory=dict, repr=False)
    _last_key: tuple = field(default=(), repr=False)  # the key and layout of the last cached window
    _last_layout: object = field(default=None, repr=False)
    _bcache: tuple = field(default=NO_BUCKET, repr=False)  # (lo, hi, bucket) being folded into

    # -- per window -----------------------------------------------------------------------

    def drop_caches(self) -> None:
        """Forget derived caches (before a state is shipped between processes)."""
        self._layouts.clear()
        self._seen_meta.clear()
        self._last_meta = {}
        self._last_key, self._last_layout = (), None
        self._bcache = NO_BUCKET

    def note_malformed(self, location: str, reason: str) -> None:
        self.malformed += 1
        if len(self.malformed_samples) < MAX_SAMPLES:
            self.malformed_samples.append(f"{location}: {reason}")

    def accept_model(self, tag: str | None) -> str | None:
        """The bare tag if the model set takes it (cap, +cal merge), else None (counted)."""
        if tag is None:
            return None
        if clean_tag(tag) is None:  # longer than 64 bytes
            self.rejected_models += 1
            return None
        if tag.endswith(CAL_SUFFIX):
            tag = tag[: -len(CAL_SUFFIX)]
            self.calibration_applied = True
        count = self.models.get(tag)
        if count is not None:
            self.models[tag] = count + 1
            return tag
        if len(self.models) >= self.max_models or not tag:
            self.rejected_models += 1
            self.overflowed = self.overflowed or bool(tag)
            return None
        self.models[tag] = 1
        return tag

    def _service(self, name: str, region: str) -> ServiceAcc | None:
        """The service's accumulator; None when it is new past the cap or its name is unusable."""
        acc = self.services.get(name)
        if acc is None and clean_name(name):
            if len(self.services) < self.max_services:
                acc = self.services[name] = ServiceAcc(region)
            else:
                self.overflowed = True
        return acc

    def _credit(self, name: str, region: str, energy: float, carbon: float, requests: int,
                model: str | None) -> str | None:
        """Credit one entry; returns what the tag set made of ``model`` (see accept_model)."""
        acc = self.unattributed if name == UNATTRIBUTED else self._service(name, region)
        bucket = self._bcache[2]
        if acc is None:
            self.dropped_services += 1
            self.dropped_energy += energy
            self.dropped_carbon += carbon
            bucket.dropped_energy += energy
            bucket.dropped_carbon += carbon
            return self.accept_model(model)
        if acc.region == "unknown":
            acc.region = region  # first *known* region wins: proxy windows know none
        acc.energy += energy
        acc.carbon += carbon
        acc.requests += requests
        acc.windows += 1
        cell = bucket.cell(name)
        cell.energy += energy
        cell.carbon += carbon
        cell.requests += requests
        tag = self.accept_model(model)
        if tag is not None:
            acc.models[tag] = None
        return tag

    def process_window(self, w: Window, location: str, strict: bool = False) -> None:
        """Fold one window in; ``location`` (``agent/file:line``) names it in errors. What it
        adds to the totals it adds to the window's time bucket too (aggregator.series), and a backfilled window's to the backfill term."""
        lo, hi, bucket = self._bcache
        if not lo <= w.start < hi:
            bucket = self._enter_bucket(w.start)
        backfill = is_backfill(w.methodology)
        if w.names is not None:
            added = self._runtime(w, backfill)
        else:
            if w.one_sided:
                self.one_sided_windows += 1
            added = self._proxy(w, location, strict, backfill)
        if backfill:
            self._backfill_window(w, *added)
        self.windows += 1
        bucket.windows += 1
        if w.start < self.first_start:
            self.first_start = w.start
        if w.start > self.last_start:
            self.last_start = w.start
        self.host_energy += w.host_energy
        bucket.host_energy += w.host_energy
        if w.host_rows:
            self._host_regions(w.host_rows)
        self.embodied_kg += w.embodied_g / 1000.0
        self.database_kg += w.database_g / 1000.0
        self.messaging_kg += w.messaging_g / 1000.0
        bucket.embodied += w.embodied_g / 1000.0
        bucket.database += w.database_g / 1000.0
        bucket.messaging += w.messaging_g / 1000.0
        without = self._regions(w.regions) if w.regions else 0.0
        for region, kwh, co2, _ in w.host_rows:  # a host charged 0 g with energy: no intensity known
            if kwh > 0.0 and co2 == 0.0:
                without += kwh
                self.note_without_carbon(clean_name(region) or "unknown", kwh)
        self.add_window_counts(w.traces, w.root_spans, w.energy_without_carbon, without)
        if w.methodology:
            self._note_methodology(w.methodology)

    def add_window_counts(self, traces: int, root_spans: int | None, stated: float | None,
                          derived: float) -> None:
        """Traces beside root spans (where the line records them), and the energy counted at
        0 g: the line's ``energy_without_carbon_kwh``, or for lines without it what its rows say."""
        if root_spans is not None:
            self.traces_counted += traces
            self.root_spans += root_spans
        without = derived if stated is None else stated
        if without:
            self.energy_without_carbon += without

    def add_run(self, agent: str, lo: float, hi: float) -> None:
        """A run of this agent's window time, ``[lo, hi]`` (see aggregator.coverage)."""
        runs = self.spans.get(agent)
        if runs is None:
            self.spans[agent] = [[lo, hi]]
        else:
            self.coverage_gaps_joined += add_run(runs, lo, hi)

    def _note_methodology(self, meta: dict) -> None:
        """Record a window's methodology block; a block seen before adds nothing."""
        try:
            if meta == self._last_meta:  # the usual case: the same block as the previous window
                return
        except RecursionError:  # a hostile block nested past the recursion limit: add it anew
            pass  # (add_methodology gives the same result when a block is added again)
        self._last_meta = meta
        try:
            seen = tuple(meta.items())
            if seen in self._seen_meta:
                return
            if len(self._seen_meta) < MAX_LAYOUTS:
                self._seen_meta.add(seen)
        except TypeError:  # an unhashable (hostile) value: record it the long way
            pass
        self._methodology(meta)

    def _runtime(self, w: Window, backfill: bool = False) -> tuple[float, float, int]:
        """Sum the per-service maps. Which service each entry goes to, and what its tag does
        to the tag set, depends only on (names, tags, hosts): that layout is worked out once
        and reused, so a steady stream of windows costs a tight loop over figures. Returns
        what was added to the energy, operational carbon and request totals; a ``backfill``
        window's entries also go to the backfill term (from the sanitised lists)."""
        self.runtime_windows += 1
        layout = self._layout(w)
        self.host_named_services += layout.host_named
        if w.raw and layout.simple and not backfill:
            app_energy, app_carbon, app_requests = self._credit_raw(layout, w.energies, w.carbons, w.requests)
        else:
            if w.raw:  # the general loop takes sanitised lists
                w.energies = clean_values(list(w.energies), self.tally)
                w.carbons = clean_values(list(w.carbons), self.tally)
                w.requests = clean_counts(list(w.requests), self.tally) if w.requests else None
            app_energy, app_carbon, app_requests = self._credit_mixed(layout, w)
            if backfill:
                self._backfill_entries(w.names or (), layout.targets, w.energies, w.carbons, w.requests)
        if layout.unknown:
            layout.unknown = self._upgrade_regions(layout, w)
        if w.measured is not None:
            self._credit_measured(layout, w)
        energy, requests = app_energy + w.host_energy, app_requests if app_requests else w.traces
        self.energy += energy
        self.operational_kg += app_carbon
        self.requests += requests
        bucket = self._bcache[2]
        bucket.energy += app_energy + w.host_energy
        bucket.operational += app_carbon
        bucket.requests += app_requests if app_requests else w.traces
        return energy, app_carbon, requests

    def _credit_measured(self, layout: _Layout, w: Window) -> None:
        """Each service's measured energy: its energy in the window x its measured ratio (the
        energies as credited: a raw value is sanitised again, uncounted, as _credit_raw did)."""
        ratios = w.measured or {}
        for name, acc, e in zip(w.names or (), layout.targets, w.energies, strict=False):
            r = ratios.get(name)
            if r is None or acc is None:
                continue
            if type(e) is not float or not 0.0 <= e <= MAX_FIGURE:
                e = clean_float(e, _UNCOUNTED)
            acc.measured += e * r

    def _credit_raw(self, layout: _Layout, energies: Iterable, carbons: Iterable,
                    requests: Iterable | None) -> tuple[float, float, int]:
        """The hot loop: every entry is a known service; values are sanitised inline."""
        tally = self.tally
        app_energy = app_carbon = 0.0
        app_requests = 0
        cells = layout.cells if layout.cells_for is self._bcache[2] else self._layout_cells(layout)
        for acc, cell, e, c, r in zip(layout.targets, cells, energies, carbons,  # repeat(0) is endless
                                      requests if requests is not None else repeat(0), strict=False):
            if type(e) is not float or not 0.0 <= e <= MAX_FIGURE:
                e = clean_float(e, tally)
            if type(c) is not float or not 0.0 <= c <= MAX_FIGURE:
                c = clean_float(c, tally)
            if type(r) is not int or not 0 <= r <= MAX_COUNT:
                r = clean_count(r, tally)
            acc.energy += e  # type: ignore[union-attr]
            acc.carbon += c  # type: ignore[union-attr]
            acc.requests += r  # type: ignore[union-attr]
            acc.windows += 1  # type: ignore[union-attr]
            cell.energy += e  # type: ignore[union-attr]
            cell.carbon += c  # type: ignore[union-attr]
            cell.requests += r  # type: ignore[union-attr]
            app_energy += e
            app_carbon += c
            app_requests += r
        return app_energy, app_carbon, app_requests

    def _credit_mixed(self, layout: _Layout, w: Window) -> tuple[float, float, int]:
        """The general loop over sanitised lists: entries may be past the service cap (dropped,
        counted)."""
        app_energy = app_carbon = 0.0
        app_requests = 0
        requests = w.requests or [0] * len(w.energies)
        bucket = self._bcache[2]
        cells = layout.cells if layout.cells_for is bucket else self._layout_cells(layout)
        for acc, cell, e, c, r in zip(layout.targets, cells, w.energies, w.carbons, requests, strict=True):
            app_energy += e
            app_carbon += c
            app_requests += r
            if acc is None:
                self.dropped_services += 1
                self.dropped_energy += e
                self.dropped_carbon += c
                bucket.dropped_energy += e
                bucket.dropped_carbon += c
                continue
            acc.energy += e  # type: ignore[union-attr]
            acc.carbon += c  # type: ignore[union-attr]
            acc.requests += r  # type: ignore[union-attr]
            acc.windows += 1  # type: ignore[union-attr]
            cell.energy += e  # type: ignore[union-attr]
            cell.carbon += c  # type: ignore[union-attr]
            cell.requests += r  # type: ignore[union-attr]
        return app_energy, app_carbon, app_requests

    def _upgrade_regions(self, layout: _Layout, w: Window) -> bool:
        """First *known* region wins; returns whether any target is still unknown."""
        still = False
        for name, acc in zip(w.names or (), layout.targets, strict=True):
            if isinstance(acc, ServiceAcc) and acc.region == "unknown":
                acc.region = clean_name(w.region_map.get(name)) or "unknown"
                still = still or acc.region == "unknown"
        return still

    def _layout(self, w: Window) -> _Layout:
        names = w.names or ()
        models = w.model_map
        tags = tuple(models.values()) if tuple(models) == names else tuple(models.get(n) for n in names)
        key = (names, tags, w.host_names)
        if key == self._last_key:  # the usual case: the previous window's layout (no hashing)
            layout = self._last_layout
        else:
            try:
                layout = self._layouts.get(key)
            except TypeError:  # an unhashable (hostile) tag value: no caching for this window
                key, layout = None, None
            if layout is not None:
                self._last_key, self._last_layout = key, layout
        if layout is not None:
            for tag, count in layout.tag_counts.items():
                self.models[tag] += count
            self.rejected_models += layout.rejected
            return layout
        layout = self._new_layout(w, names, tags)
        if key is not None and len(self._layouts) < MAX_LAYOUTS:
            self._layouts[key] = layout
            self._last_key, self._last_layout = key, layout
        return layout

    def _new_layout(self, w: Window, names: tuple[str, ...], tags: tuple) -> _Layout:
        layout = _Layout()
        layout.names = names
        for name, raw_tag in zip(names, tags, strict=True):
            if name in w.host_names:
                layout.host_named += 1  # still a service: hosts are only their rows
            tag_in = raw_tag if type(raw_tag) is str and raw_tag else None
            tag = self.accept_model(tag_in)
            if tag is not None:
                layout.tag_counts[tag] = layout.tag_counts.get(tag, 0) + 1
            elif tag_in is not None:
                layout.rejected += 1
            region = clean_name(w.region_map.get(name)) or "unknown"
            if name == UNATTRIBUTED:
                acc: ServiceAcc | None = self.unattributed
            else:
                acc = self._service(name, region)
            if acc is not None and tag is not None:
                acc.models[tag] = None
            if acc is not None and acc.region == "unknown":
                acc.region = region
                layout.unknown = layout.unknown or region == "unknown"
            layout.targets.append(acc)
        layout.simple = all(isinstance(t, ServiceAcc) for t in layout.targets)
        return layout

    def _methodology(self, meta: dict) -> None:
        if add_methodology(self.methodology, meta):
            self.overflowed = True

    # -- merge ----------------------------------------------------------------------------

    def merge(self, other: AggregateState) -> AggregateState:
        """Fold ``other`` in after ``self`` (in place; returns ``self``); see aggregator.merge."""
        from aggregator.merge import merge_into

        return merge_into(self, other)
