"""The small accumulators an AggregateState is made of (one per service, region, layout)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_METHOD_KEYS = 32
MAX_METHOD_VALUES = 8
MAX_METHOD_VALUE_BYTES = 2048


class ServiceAcc:
    """Running totals of one service (or of the ``_unattributed`` bucket)."""

    __slots__ = ("energy", "carbon", "requests", "windows", "region", "models")

    def __init__(self, region: str) -> None:
        self.energy = 0.0
        self.carbon = 0.0
        self.requests = 0
        self.windows = 0
        self.region = region
        self.models: dict[str, None] = {}

    def add(self, other: ServiceAcc, models: dict[str, int]) -> None:
        if self.region == "unknown":
            self.region = other.region
        self.energy += other.energy
        self.carbon += other.carbon
        self.requests += other.requests
        self.windows += other.windows
        for tag in other.models:
            if tag in models:
                self.models[tag] = None


class _Layout:
    """How one (service names, tags, hosts) combination folds; see AggregateState._runtime."""

    __slots__ = ("targets", "tag_counts", "rejected", "unknown", "simple")

    def __init__(self) -> None:
        self.targets: list[ServiceAcc | None | object] = []  # None: past the cap; _HOST: excluded
        self.tag_counts: dict[str, int] = {}
        self.rejected = 0
        self.unknown = False
        self.simple = True


_HOST = object()  # a layout target: the entry is a host, never a service


class RegionAcc:
    __slots__ = ("status", "intensity", "pue", "source", "rows", "io_ops", "energy", "carbon")

    def __init__(self, status: str, intensity: float, pue: float, source: str) -> None:
        self.status, self.intensity, self.pue, self.source = status, intensity, pue, source
        self.rows = 0
        self.io_ops = 0
        self.energy = 0.0
        self.carbon = 0.0  # kg


@dataclass
class FileStat:
    agent: str
    file: str
    lines: int = 0
    windows_in_period: int = 0
    malformed_lines: int = 0


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
