"""The small accumulators an AggregateState is made of: per service, region, time bucket,
layout, file, and what backfilled lines added. The per-service and per-region running sums
are C structs when the extension is built (``aggregator.fold.ext``): the C fold adds to the
ones it is handed, and nothing else of the state."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from aggregator.fold.ext import EXT, BucketSums, RegionSums, ServiceSums
from schema.totals import TOTAL_TERMS


def _service_acc(region: str, models: dict, energy: float, carbon: float, requests: int, windows: int,
                 measured: float = 0.0) -> ServiceAcc:
    acc = ServiceAcc(region)
    acc.models, acc.energy, acc.carbon, acc.requests, acc.windows = models, energy, carbon, requests, windows
    acc.measured = measured
    return acc


def _region_acc(fixed: tuple, energy: float, carbon: float, io_ops: int, rows: int) -> RegionAcc:
    acc = RegionAcc(*fixed)
    acc.energy, acc.carbon, acc.io_ops, acc.rows = energy, carbon, io_ops, rows
    return acc


class ServiceAcc(ServiceSums):  # type: ignore[misc,valid-type]
    """Running totals of one service (or of the ``_unattributed`` bucket): energy (kWh),
    carbon (kg), requests, windows from the base; the first known region, the tags and the
    measured energy (kWh: Σ window energy x the line's per_service_measured_ratio) here."""

    __slots__ = ("region", "models", "measured")

    def __init__(self, region: str) -> None:
        super().__init__()
        self.region = region
        self.models: dict[str, None] = {}
        self.measured = 0.0

    def __reduce__(self) -> tuple:  # the C fields are not slots: pickle (Dask) names them
        return _service_acc, (self.region, self.models, self.energy, self.carbon, self.requests, self.windows,
                              self.measured)

    def add(self, other: ServiceAcc, models: dict[str, int]) -> None:
        if self.region == "unknown":
            self.region = other.region
        self.add_sums(other)  # energy, carbon, requests, windows: each self.x += other.x
        self.measured += other.measured
        if other.models:
            mine = self.models
            for tag in other.models:
                if tag in models:
                    mine[tag] = None


def merge_services_py(left: dict[str, ServiceAcc], right: dict[str, ServiceAcc], models: dict[str, int],
                      max_services: int, dropped: tuple[int, float, float]) -> tuple[int, float, float]:
    """``right``'s services merged after ``left``'s (in place; the state's merge): a name
    ``left`` lacks is added while it holds fewer than ``max_services``, else its windows,
    energy and carbon go to ``dropped`` (returned updated), in ``right``'s order. The
    reference of the C ``merge_services`` (:func:`merge_services`)."""
    windows, energy, carbon = dropped
    for name, acc in right.items():
        mine = left.get(name)
        if mine is None:
            if len(left) >= max_services:
                windows += acc.windows
                energy += acc.energy
                carbon += acc.carbon
                continue
            mine = left[name] = ServiceAcc(acc.region)
        mine.add(acc, models)
    return windows, energy, carbon


def merge_services(left: dict[str, ServiceAcc], right: dict[str, ServiceAcc], models: dict[str, int],
                   max_services: int, dropped: tuple[int, float, float]) -> tuple[int, float, float]:
    """:func:`merge_services_py`, in C where the extension is built (the same additions in the
    same order, without a Python call per service)."""
    if _MERGE_C is None:
        return merge_services_py(left, right, models, max_services, dropped)
    return _MERGE_C(left, right, models, max_services, ServiceAcc, dropped)


def merge_cells_py(bucket: Bucket, theirs: dict[str, Cell], kept: dict, unattributed: str) -> None:
    """Another state's cells of one time bucket (``theirs``) merged into ``bucket``'s: a cell of
    a service ``kept`` holds (or of ``unattributed``) is added to the bucket's cell of that
    service, any other to the bucket's dropped sums, in ``theirs``' order. The reference of the
    C ``merge_cells`` (:func:`merge_cells`)."""
    cells, get = bucket.services, bucket.services.get
    for name, cell in theirs.items():
        if name in kept or name == unattributed:
            own = get(name)
            if own is None:
                own = cells[name] = Cell()
            own.add_sums(cell)  # energy, carbon, requests (a cell's windows stay 0)
        else:
            bucket.dropped_energy += cell.energy
            bucket.dropped_carbon += cell.carbon


def merge_cells(bucket: Bucket, theirs: dict[str, Cell], kept: dict, unattributed: str) -> None:
    """:func:`merge_cells_py`, in C where the extension is built."""
    if _CELLS_C is None:
        merge_cells_py(bucket, theirs, kept, unattributed)
    else:
        _CELLS_C(bucket, bucket.services, theirs, kept, unattributed, Cell)


_MERGE_C = EXT.merge_services if EXT is not None else None
_CELLS_C = EXT.merge_cells if EXT is not None else None


#: Makes a service's accumulator: ``make_service(region)`` is ``ServiceAcc(region)``, in C
#: where the extension is built, as the C Folder and ``merge_services`` make theirs (handed
#: the class, they make it without a call: ``_fold.c``, make_acc).
make_service = partial(EXT.new_service, ServiceAcc) if EXT is not None else ServiceAcc


def _cell(energy: float, carbon: float, requests: int) -> Cell:
    cell = Cell()
    cell.energy, cell.carbon, cell.requests = energy, carbon, requests
    return cell


class Cell(ServiceSums):  # type: ignore[misc,valid-type]
    """One service's sums in one time bucket (aggregate.series): energy (kWh), operational
    carbon (kg), requests; ``windows`` stays 0 (the report does not give it per bucket)."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        return _cell, (self.energy, self.carbon, self.requests)


#: Makes a time bucket's cell of a service: ``make_cell()`` is ``Cell()``, in C where the
#: extension is built, as the C Folder and ``merge_cells`` make theirs. The services and cells
#: made in C are left untracked by the cyclic garbage collector (they can hold no reference
#: back to themselves; ``_fold.c``, new_service), so its passes do not visit them.
make_cell = partial(EXT.new_cell, Cell) if EXT is not None else Cell


_BUCKET_FIELDS = ("energy", "host_energy", *TOTAL_TERMS, "dropped_energy", "dropped_carbon", "requests", "windows")


def _bucket(sums: tuple, services: dict) -> Bucket:
    bucket = Bucket()
    for name, value in zip(_BUCKET_FIELDS, sums, strict=True):
        setattr(bucket, name, value)
    bucket.services = services
    return bucket


class Bucket(BucketSums):  # type: ignore[misc,valid-type]
    """One time bucket of aggregate.series: the window-level sums of the windows starting in
    it (the same terms as the state's totals: energy, host energy, operational, embodied,
    database and messaging carbon, entries dropped past the service cap, requests, windows)
    from the base, and each service's :class:`Cell` here (name -> cell, first credited first)."""

    __slots__ = ("services",)

    def __init__(self) -> None:
        super().__init__()
        self.services: dict[str, Cell] = {}

    def __reduce__(self) -> tuple:
        return _bucket, (self.sums(), self.services)

    def sums(self) -> tuple:
        """The window-level sums, in a fixed order (for comparisons)."""
        return tuple(getattr(self, f) for f in _BUCKET_FIELDS)

    def cell(self, name: str) -> Cell:
        """The service's cell in this bucket (created empty on first use)."""
        cell = self.services.get(name)
        if cell is None:
            cell = self.services[name] = Cell()
        return cell

    def add(self, other: Bucket) -> None:
        """Add ``other``'s window-level sums (the merge; cells are merged by the caller)."""
        for name in _BUCKET_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class Layout:
    """How one (service names, tags, host names) combination folds (see the reference fold's
    ``layout``): each entry's target (``None`` past the service cap), what its tags do to the
    tag set, and the targets' cells in the bucket ``cells_for`` (rebuilt when it changes).
    ``simple``: every target is kept; ``unknown``: some target has no known region yet."""

    __slots__ = ("names", "tags", "hosts", "targets", "tag_counts", "rejected", "unknown", "simple",
                 "host_named", "cells", "cells_for")

    def __init__(self, names: tuple[str, ...], tags: tuple, hosts: frozenset[str]) -> None:
        self.names, self.tags, self.hosts = names, tags, hosts
        self.targets: list[ServiceAcc | None] = []
        self.cells: list[Cell | None] = []
        self.cells_for: Bucket | None = None
        self.tag_counts: dict[str, int] = {}
        self.rejected = 0
        self.unknown = False
        self.simple = True
        self.host_named = 0  # entries named like a host of the window (services all the same)


class RegionAcc(RegionSums):  # type: ignore[misc,valid-type]
    """One grid region: rows, I/O ops, energy (kWh), carbon (kg) from the base; the first
    row's status, intensity, PUE and intensity source here."""

    __slots__ = ("status", "intensity", "pue", "source")

    def __init__(self, status: str, intensity: float, pue: float, source: str) -> None:
        super().__init__()
        self.status, self.intensity, self.pue, self.source = status, intensity, pue, source

    def __reduce__(self) -> tuple:
        return _region_acc, ((self.status, self.intensity, self.pue, self.source),
                             self.energy, self.carbon, self.io_ops, self.rows)


@dataclass(slots=True)
class HostRegionAcc:
    """Database/broker hosts in totals, per region (for the market-based Scope 2 figure):
    energy (kWh), carbon (kg) and the host rows summed. Hosts are never a region row."""

    energy: float = 0.0
    carbon: float = 0.0
    rows: int = 0
    pue: float | None = None  # the first recorded host PUE (None: lines before it was recorded)


@dataclass
class FileStat:
    agent: str
    file: str
    lines: int = 0
    windows_in_period: int = 0
    malformed_lines: int = 0
    one_sided_windows: int = 0  # of aggregate.one_sided_windows (set by engines.fold_lines)
    first_hash: str = ""  # the file's first and last line hashes: its identity by content
    last_hash: str = ""


@dataclass(slots=True)
class BackfillSums:
    """What backfilled lines credited one service (or ``_unattributed``)."""

    energy: float = 0.0  # kWh
    carbon: float = 0.0  # kg CO2e, operational
    requests: int = 0
    windows: int = 0

    def add(self, other: BackfillSums) -> None:
        self.energy += other.energy
        self.carbon += other.carbon
        self.requests += other.requests
        self.windows += other.windows


@dataclass(slots=True)
class BackfillTotals:
    """What backfilled windows added to the totals (the same additions, in the same order)."""

    windows: int = 0
    energy: float = 0.0  # kWh: application + host energy, as total_energy_kwh
    operational_kg: float = 0.0
    embodied_kg: float = 0.0
    database_kg: float = 0.0
    messaging_kg: float = 0.0
    requests: int = 0

    def add(self, other: BackfillTotals) -> None:
        for name in _BACKFILL_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))


#: BackfillTotals' sums: the window count, energy, each term of a total (schema.totals), requests.
_BACKFILL_FIELDS = ("windows", "energy", *(term + "_kg" for term in TOTAL_TERMS), "requests")
