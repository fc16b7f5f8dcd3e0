"""AggregateState: the fold of sanitised windows into disclosure figures, and its merge.

Each window takes one of two paths (docs/report-format.md):

- **runtime** - the line carries per-service maps: sum them per service;
- **proxy** - no maps (a v1.0 line): split the window's application energy and carbon by
  each service's share of I/O ops; energy is ``energy_kwh`` when > 0, else
  ``total_io_ops x ENERGY_PER_IO_OP_KWH``; with nothing to split by the window goes to the
  ``_unattributed`` bucket (or fails under strict attribution).

Hosts (database, broker) are never a service: their energy and carbon go to the totals and
to ``carbon_breakdown`` only. ``merge`` is ordered - the left side's first-seen facts win and
caps apply as if the right side's windows had been folded after the left's - so folding file
partitions and merging them in file order is the same computation on one machine or on Dask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aggregator.read import Window
from aggregator.sanitize import Tally, clean_tag
from schema.constants import ENERGY_PER_IO_OP_KWH
from schema.tags import CAL_SUFFIX

MAX_SERVICES = 4096
MAX_ENERGY_MODELS = 64
MAX_REGIONS = 1024
MAX_SAMPLES = 100
MAX_METHOD_KEYS = 32
MAX_METHOD_VALUES = 8
MAX_METHOD_VALUE_BYTES = 256
UNATTRIBUTED = "_unattributed"


class AttributionError(Exception):
    """Strict attribution: a window had nothing to split its energy and carbon by."""


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


@dataclass
class AggregateState:
    """Everything a disclosure report needs; grows with services, never with lines."""

    services: dict[str, ServiceAcc] = field(default_factory=dict)
    unattributed: ServiceAcc = field(default_factory=lambda: ServiceAcc("unknown"))
    regions: dict[str, RegionAcc] = field(default_factory=dict)
    models: dict[str, int] = field(default_factory=dict)  # bare tag -> accepted occurrences
    calibration_applied: bool = False
    methodology: dict[str, list[str]] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    windows: int = 0
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
    host_terms_excluded: int = 0
    rejected_models: int = 0
    dropped_regions: int = 0
    lines: int = 0
    windows_outside: int = 0
    malformed: int = 0
    malformed_samples: list[str] = field(default_factory=list)
    files: list[FileStat] = field(default_factory=list)
    fallback_files: list[str] = field(default_factory=list)
    chains: dict[str, list] = field(default_factory=dict)  # agent -> [first, last, windows]
    max_services: int = MAX_SERVICES  # caps are fields so property tests can use small ones
    max_models: int = MAX_ENERGY_MODELS

    # -- per window -----------------------------------------------------------------------

    def note_chain(self, agent: str, line_hash: str) -> None:
        """Remember the first and last archive hash of each agent's windows in the period."""
        span = self.chains.get(agent)
        if span is None:
            span = self.chains[agent] = ["", "", 0]
        if line_hash:
            span[0] = span[0] or line_hash
            span[1] = line_hash
        span[2] += 1

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
            return None
        self.models[tag] = 1
        return tag

    def _service(self, name: str, region: str) -> ServiceAcc | None:
        acc = self.services.get(name)
        if acc is None and len(self.services) < self.max_services:
            acc = self.services[name] = ServiceAcc(region)
        return acc

    def _credit(self, name: str, region: str, energy: float, carbon: float, requests: int,
                model: str | None) -> None:
        acc = self.unattributed if name == UNATTRIBUTED else self._service(name, region)
        if acc is None:
            self.dropped_services += 1
            self.dropped_energy += energy
            self.dropped_carbon += carbon
            self.accept_model(model)
            return
        if acc.region == "unknown":
            acc.region = region  # first *known* region wins: proxy windows know none
        acc.energy += energy
        acc.carbon += carbon
        acc.requests += requests
        acc.windows += 1
        tag = self.accept_model(model)
        if tag is not None:
            acc.models[tag] = None

    def process_window(self, w: Window, location: str, strict: bool = False) -> None:
        """Fold one window in; ``location`` (``agent/file:line``) names it in errors."""
        if w.services is not None:
            self._runtime(w)
        else:
            self._proxy(w, location, strict)
        self.windows += 1
        self.host_energy += w.host_energy
        self.embodied_kg += w.embodied_g / 1000.0
        self.database_kg += w.database_g / 1000.0
        self.messaging_kg += w.messaging_g / 1000.0
        self._regions(w)
        self._methodology(w.methodology)

    def _runtime(self, w: Window) -> None:
        self.runtime_windows += 1
        hosts = w.host_names
        app_energy = 0.0
        requests = 0
        for name, energy, carbon, region, model, reqs in w.services:  # type: ignore[union-attr]
            if name in hosts:
                self.host_terms_excluded += 1
                continue
            app_energy += energy
            self.operational_kg += carbon
            requests += reqs
            self._credit(name, region, energy, carbon, reqs, model)
        self.energy += app_energy + w.host_energy
        self.requests += requests if requests else w.traces

    def _proxy(self, w: Window, location: str, strict: bool) -> None:
        self.fallback_windows += 1
        io_total = sum(w.io_split.values())
        if w.energy_kwh > 0.0:
            app_energy = max(0.0, w.energy_kwh - w.host_energy)
        else:
            app_energy = (w.total_io_ops or io_total) * ENERGY_PER_IO_OP_KWH
        app_g = w.operational_g or max(0.0, w.mid_g - w.embodied_g - w.database_g - w.messaging_g)
        app_kg = app_g / 1000.0
        self.energy += app_energy + w.host_energy
        self.operational_kg += app_kg
        self.requests += w.traces
        if io_total == 0:
            if strict:
                raise AttributionError(
                    f"{location}: window has no per-service maps and no I/O ops to split "
                    f"{app_energy:g} kWh by; drop --strict-attribution to book it as "
                    f"{UNATTRIBUTED}, or fix the agent that wrote it"
                )
            self._credit(UNATTRIBUTED, "unknown", app_energy, app_kg, 0, w.model)
            return
        for name, ops in w.io_split.items():
            if name in w.host_names:
                self.host_terms_excluded += 1
                continue
            share = ops / io_total
            self._credit(name, "unknown", app_energy * share, app_kg * share, 0, w.model)

    def _regions(self, w: Window) -> None:
        for name, status, intensity, pue, source, io_ops, energy, co2_g in w.regions:
            acc = self.regions.get(name)
            if acc is None:
                if len(self.regions) >= MAX_REGIONS:
                    self.dropped_regions += 1
                    continue
                acc = self.regions[name] = RegionAcc(status, intensity, pue, source)
            acc.rows += 1
            acc.io_ops += io_ops
            acc.energy += energy
            acc.carbon += co2_g / 1000.0

    def _methodology(self, meta: dict) -> None:
        for key, value in meta.items():
            if type(value) is not str or len(value) > MAX_METHOD_VALUE_BYTES:
                continue
            values = self.methodology.get(key)
            if values is None:
                if len(self.methodology) >= MAX_METHOD_KEYS or len(key) > 64:
                    continue
                values = self.methodology[key] = []
            if value not in values and len(values) < MAX_METHOD_VALUES:
                values.append(value)

    # -- merge ----------------------------------------------------------------------------

    def merge(self, other: AggregateState) -> AggregateState:
        """Fold ``other`` in after ``self`` (in place; returns ``self``)."""
        self.calibration_applied |= other.calibration_applied
        for tag, count in other.models.items():
            if tag in self.models:
                self.models[tag] += count
            elif len(self.models) < self.max_models:
                self.models[tag] = count
            else:
                self.rejected_models += count
        for name, acc in other.services.items():
            mine = self.services.get(name)
            if mine is None:
                if len(self.services) >= self.max_services:
                    self.dropped_services += acc.windows
                    self.dropped_energy += acc.energy
                    self.dropped_carbon += acc.carbon
                    continue
                mine = self.services[name] = ServiceAcc(acc.region)
            mine.add(acc, self.models)
        self.unattributed.add(other.unattributed, self.models)
        for name, racc in other.regions.items():
            mine_r = self.regions.get(name)
            if mine_r is None:
                if len(self.regions) >= MAX_REGIONS:
                    self.dropped_regions += racc.rows
                    continue
                mine_r = self.regions[name] = RegionAcc(racc.status, racc.intensity, racc.pue, racc.source)
            mine_r.rows += racc.rows
            mine_r.io_ops += racc.io_ops
            mine_r.energy += racc.energy
            mine_r.carbon += racc.carbon
        for key, values in other.methodology.items():
            for value in values:
                self._methodology({key: value})
        self.tally.merge(other.tally)
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        room = MAX_SAMPLES - len(self.malformed_samples)
        self.malformed_samples.extend(other.malformed_samples[: max(0, room)])
        self.files.extend(other.files)
        self.fallback_files.extend(other.fallback_files)
        for agent, (first, last, n) in other.chains.items():
            span = self.chains.get(agent)
            if span is None:
                self.chains[agent] = [first, last, n]
            else:
                span[0] = span[0] or first
                span[1] = last or span[1]
                span[2] += n
        return self


_SUMMED = (
    "windows", "runtime_windows", "fallback_windows", "requests", "energy", "host_energy",
    "operational_kg", "embodied_kg", "database_kg", "messaging_kg", "dropped_services",
    "dropped_energy", "dropped_carbon", "host_terms_excluded", "dropped_regions", "lines",
    "windows_outside", "malformed", "rejected_models",
)
