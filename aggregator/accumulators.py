"""The small accumulators an AggregateState is made of (one per service, region, layout)."""

from __future__ import annotations

from dataclasses import dataclass

from aggregator.fold_fast import FAST

MAX_METHOD_KEYS = 32
MAX_METHOD_VALUES = 8
MAX_METHOD_VALUE_BYTES = 2048

if FAST is not None:  # the running sums live in C structs that aggregator._fold adds to directly
    ServiceSums, RegionSums, BucketSums = FAST.ServiceSums, FAST.RegionSums, FAST.BucketSums
else:  # no C build: the same fields as Python slots

    class ServiceSums:  # type: ignore[no-redef]
        __slots__ = ("energy", "carbon", "requests", "windows")

        def __init__(self) -> None:
            self.energy = 0.0
            self.carbon = 0.0
            self.requests = 0
            self.windows = 0

    class RegionSums:  # type: ignore[no-redef]
        __slots__ = ("energy", "carbon", "io_ops", "rows")

        def __init__(self) -> None:
            self.energy = 0.0
            self.carbon = 0.0
            self.io_ops = 0
            self.rows = 0

    class BucketSums:  # type: ignore[no-redef]
        __slots__ = ("energy", "host_energy", "operational", "embodied", "database", "messaging",
                     "dropped_energy", "dropped_carbon", "requests", "windows")

        def __init__(self) -> None:
            self.energy = self.host_energy = 0.0
            self.operational = self.embodied = self.database = self.messaging = 0.0
            self.dropped_energy = self.dropped_carbon = 0.0
            self.requests = 0
            self.windows = 0


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
        self.energy += other.energy
        self.carbon += other.carbon
        self.requests += other.requests
        self.windows += other.windows
        self.measured += other.measured
        for tag in other.models:
            if tag in models:
                self.models[tag] = None


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


_BUCKET_FIELDS = ("energy", "host_energy", "operational", "embodied", "database", "messaging",
                  "dropped_energy", "dropped_carbon", "requests", "windows")


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
        return _bucket, (tuple(getattr(self, f) for f in _BUCKET_FIELDS), self.services)

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


class _Layout:
    """How one (service names, tags, hosts) combination folds; see AggregateState._runtime.
    ``cells`` are the targets' cells in the bucket ``cells_for`` (rebuilt when it changes)."""

    __slots__ = ("targets", "tag_counts", "rejected", "unknown", "simple", "host_named", "names", "cells",
                 "cells_for")

    def __init__(self) -> None:
        self.targets: list[ServiceAcc | None] = []  # None: past the cap
        self.names: tuple[str, ...] = ()
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


def add_methodology(methodology: dict[str, list[str]], meta: dict) -> bool:
    """Add a window's methodology block (key -> distinct string values, first seen; at most
    32 keys x 8 values of <= 2 KiB). Returns whether a new key was refused at the key cap."""
    refused = False
    for key, value in meta.items():
        if type(value) is not str or len(value) > MAX_METHOD_VALUE_BYTES:
            continue
        values = methodology.get(key)
        if values is None:
            if len(key) > 64:
                continue
            if len(methodology) >= MAX_METHOD_KEYS:
                refused = True
                continue
            values = methodology[key] = []
        if value not in values and len(values) < MAX_METHOD_VALUES:
            values.append(value)
    return refused
