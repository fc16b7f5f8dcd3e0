"""SourceManager: runs the configured sources and hands the scorer one ``Signals`` snapshot.

The daemon builds it with ``SourceManager.from_config(sources_table, green)``, calls
``start()`` once, feeds ``manager.ops.add({service: io_ops})`` after every accepted batch (scored and durable in the write-ahead log; never on replay),
passes ``manager.current()`` into each ``ScoringContext`` and calls ``stop()`` on shutdown.
``current()`` never touches the network: it merges what the pollers last stored, at most
once a second (or right after a poll succeeded), so it is cheap on the scoring path.

Merging rules (issue 5): per service the first kind with a fresh rate among alumet >
scaphandre > kepler > redfish > cloud SPECpower wins; a rate older than 3 x its source's
interval is dropped (counted as ``stale_dropped``); when no kind has a fresh value, the
service's last stale value is handed over as it is, so the scorer sees it is stale, uses the
proxy and counts the spans (``measured_stale_spans`` in the window's counters). Several meters of one kind (one
Scaphandre per node, one BMC per chassis) each see their own part of a service, so their
rates add up; while one of them that is configured for the service is down (no successful
poll for 3 x its interval) the sum would be short, so that kind is not used for the service
(the next kind, or the proxy, is) and the down meter's ``incomplete_services`` says so. Live intensity per region
comes from Electricity Maps before grid operators and is kept however old, with its time,
so the scorer can see it is stale and say so. Host watts (``[[green.hosts]] measured``)
come from the named source.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from agent.carbon.signals import LiveIntensity, MeasuredRate, Signals
from agent.config import GreenConfig
from agent.sources.alumet import AlumetSource
from agent.sources.config import ENERGY_KINDS, SourcesConfig, parse_sources
from agent.sources.energy import STALE_INTERVALS, EnergySource
from agent.sources.errors import ConfigError, SourceStartError
from agent.sources.intensity import ElectricityMapsSource, GridOperatorSource, LiveSource, Recorder
from agent.sources.kepler import KeplerSource
from agent.sources.opcounter import OpCounter
from agent.sources.redfish import RedfishSource
from agent.sources.runner import Runner
from agent.sources.scaphandre import ScaphandreSource
from agent.sources.specpower import SpecPowerSource

_ENERGY_CLASSES: dict[str, type[EnergySource]] = {
    "alumet": AlumetSource,
    "scaphandre": ScaphandreSource,
    "kepler": KeplerSource,
    "redfish": RedfishSource,
    "specpower": SpecPowerSource,
}
REFRESH_S = 1.0  # current() rebuilds at most this often unless a poll just succeeded


class SourceManager:
    def __init__(
        self,
        config: SourcesConfig,
        green: GreenConfig | None = None,
        ops: OpCounter | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        recorder: Recorder | None = None,
    ) -> None:
        self.config = config
        self.green = green or GreenConfig()
        self.ops = ops or OpCounter()
        self._clock = clock
        self.energy: list[EnergySource] = []
        self.live: list[LiveSource] = []
        for kind, name, settings in config.named():
            if kind in _ENERGY_CLASSES:
                self.energy.append(
                    _ENERGY_CLASSES[kind](name, settings, self.ops, clock=clock, monotonic=monotonic)  # type: ignore[arg-type]
                )
            elif kind == "grid_operator":
                self.live.append(GridOperatorSource(name, settings))  # type: ignore[arg-type]
        if config.electricity_maps is not None:
            em = config.electricity_maps
            regions = em.regions if em.regions is not None else _green_regions(self.green)
            self.live.insert(0, ElectricityMapsSource(em.name or "electricity_maps", em, regions))
        for lsrc in self.live:
            lsrc.clock = clock
            lsrc.recorder = recorder  # [agent.signal_log]: the values they read, as signal-log rows
        self.energy.sort(key=lambda s: ENERGY_KINDS.index(s.kind))
        self.host_sources = self._host_sources()
        self._stop = threading.Event()
        self._prepared = False
        self._lock = threading.Lock()
        self._dirty = True
        self._built_at = -1e18
        self._signals = Signals(max_signal_age_s=config.max_signal_age_s)
        self.runners: dict[str, Runner] = {
            src.name: Runner(
                src,
                self._backoff_cap(src.name),
                self._stale_fn(src),
                self._mark_dirty,
                clock,
                random.Random(hash(src.name)),
            )
            for src in (*self.energy, *self.live)
        }

    @classmethod
    def from_config(
        cls,
        sources_table: Mapping[str, Any] | None,
        green: GreenConfig | None = None,
        ops: OpCounter | None = None,
        recorder: Recorder | None = None,
    ) -> SourceManager:
        """Parse ``[sources]`` and build the manager; ``ConfigError`` names the key that is wrong."""
        return cls(parse_sources(sources_table), green, ops, recorder=recorder)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, first_poll_timeout_s: float | None = None) -> None:
        """Resolve secrets, start one thread per source, and wait for their first polls.

        Raises ``ConfigError`` for a missing key or password and ``SourceStartError`` when an
        endpoint refuses the credentials (401/403): both name the source. An endpoint that is
        merely down is not fatal: it is retried with backoff and shows in ``health()``.
        """
        self._prepare()
        self._stop.clear()
        for runner in self.runners.values():
            runner.start(self._stop)
        limit = (
            first_poll_timeout_s if first_poll_timeout_s is not None else self._first_poll_budget()
        )
        deadline = time.monotonic() + limit
        for runner in self.runners.values():
            runner.first_done.wait(max(0.0, deadline - time.monotonic()))
        refused = [(n, r.auth_error) for n, r in self.runners.items() if r.auth_error is not None]
        if refused:
            self.stop()
            name, err = refused[0]
            raise SourceStartError(f"sources: {name} refused our credentials: {err}")

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for runner in self.runners.values():
            if runner.thread is not None:
                runner.thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> SourceManager:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _prepare(self) -> None:
        """Resolve every source's secrets and files once (``ConfigError`` names the source)."""
        if not self._prepared:
            for src in (*self.energy, *self.live):
                src.start()
            self._prepared = True

    def poll_all(self) -> None:
        """Poll every source once, in this thread (tools and tests; the daemon uses threads)."""
        self._prepare()
        for runner in self.runners.values():
            runner.poll_once()

    # -- what the scorer and /metrics read -----------------------------------------------
    def current(self) -> Signals:
        """The latest ``Signals``; never blocks on I/O."""
        now = self._clock()
        if not self._dirty and now - self._built_at < REFRESH_S:
            return self._signals
        with self._lock:
            self._dirty = False
            self._built_at = now
            self._signals = self._build(now)
        return self._signals

    def health(self) -> dict[str, dict[str, Any]]:
        """Per source: ``ok``, ``last_success``, ``failures``, ``stale`` and more counters."""
        now = self._clock()
        return {name: runner.health(now) for name, runner in self.runners.items()}

    def host_watts_until(self) -> dict[str, float]:
        """Per ``[[green.hosts]]`` host with measured watts: when they go stale (for workers
        that read them from the supervisor, ``agent/sources/shared.py``)."""
        by_name = {s.name: s for s in self.energy}
        out: dict[str, float] = {}
        for host, name in self.host_sources.items():
            until = by_name[name].watts_stale_at()
            if until is not None:
                out[host] = until
        return out

    # -- internals -----------------------------------------------------------------------
    def _build(self, now: float) -> Signals:
        measured, watts_by_source = self._measured(now)
        live: dict[str, LiveIntensity] = {}
        for lsrc in self.live:  # Electricity Maps first
            for region, reading in lsrc.snapshot(now).items():
                live.setdefault(region, reading)
        hosts = {
            h: watts_by_source[s] for h, s in self.host_sources.items() if s in watts_by_source
        }
        return Signals(
            measured=measured,
            live_intensity=live,
            host_watts=hosts,
            max_signal_age_s=self.config.max_signal_age_s,
        )

    def _measured(
        self, now: float
    ) -> tuple[dict[str, MeasuredRate], dict[str, tuple[float, str]]]:
        """Per service the first kind, in priority order, with complete fresh rates.

        A service with no such kind gets a stale value (the highest kind's), which the
        scorer recognises as stale: it uses the proxy and counts ``measured_stale_spans``.
        """
        measured: dict[str, MeasuredRate] = {}
        stale: dict[str, MeasuredRate] = {}
        watts_by_source: dict[str, tuple[float, str]] = {}
        for kind in ENERGY_KINDS:
            meters = [s for s in self.energy if s.kind == kind]
            fresh: dict[str, list[MeasuredRate]] = defaultdict(list)
            for src in meters:
                src.stats["incomplete_services"] = 0  # a gauge: recounted at every build
                rates, watts = src.snapshot(now)
                for service, rate in rates.items():
                    fresh[service].append(rate)
                if watts is not None:
                    watts_by_source[src.name] = (watts, src.tag)
            for service, rates in fresh.items():
                if service in measured:
                    continue
                down = [m for m in meters if service in m.covered and m.down(now)]
                for m in down:
                    m.stats["incomplete_services"] += 1
                if not down:
                    measured[service] = add_rates(rates)
                    continue
                # a down meter is a part known only as of its last success: the sum is stale
                worst = min(down, key=lambda m: m.last_ok or 0.0)
                total = add_rates(rates).kwh_per_op
                stale.setdefault(
                    service, MeasuredRate(total, worst.tag, worst.last_ok or 0.0, worst.interval_s)
                )
            for src in meters:
                for service, rate in src.lapsed().items():
                    stale.setdefault(service, rate)
        for service, rate in stale.items():
            measured.setdefault(service, rate)
        return measured, watts_by_source

    def _mark_dirty(self) -> None:
        self._dirty = True

    def _host_sources(self) -> dict[str, str]:
        names = {s.name for s in self.energy}
        out: dict[str, str] = {}
        for host in self.green.hosts:
            if host.measured is None:
                continue
            if host.measured not in names:
                raise ConfigError(
                    f"[[green.hosts]] {host.name}: measured = {host.measured!r} names no power source "
                    f"in [sources] (known: {', '.join(sorted(names)) or 'none'})"
                )
            out[host.name] = host.measured
        used = set(out.values())
        for src in self.energy:
            if not _feeds_services(src) and src.name not in used:
                raise ConfigError(
                    f"sources.{src.kind} {src.name}: feeds no service and no [[green.hosts]] names it "
                    "(measured = ...); give `services` or point a host at it"
                )
        return out

    def _backoff_cap(self, name: str) -> float:
        for _, n, settings in self.config.named():
            if n == name:
                return settings.backoff_cap()
        return 300.0

    def _stale_fn(self, src: EnergySource | LiveSource) -> Callable[[float, float | None], bool]:
        if isinstance(src, EnergySource):
            limit = STALE_INTERVALS * src.interval_s
            return lambda now, last: last is None or now - last > limit
        max_age = self.config.max_signal_age_s

        def live_stale(now: float, last: float | None) -> bool:
            readings = src.snapshot(now)
            return not readings or any(
                now - r.taken_at > (max_age if r.max_age_s is None else r.max_age_s)
                for r in readings.values()
            )

        return live_stale

    def _first_poll_budget(self) -> float:
        budget = 1.0
        for _, _, settings in self.config.named():
            budget = max(budget, settings.timeout_s + 1.0)
        for lsrc in self.live:
            budget = max(budget, len(set(lsrc.region_zones.values())) * lsrc.timeout_s + 1.0)
        return budget


def add_rates(rates: list[MeasuredRate]) -> MeasuredRate:
    """Rates of meters of one kind for one service: each is its meter's joules over the
    service's ops in the same stretch of time, so their sum is the service's kWh per op.
    The sum is as fresh as its oldest part (the first to go stale)."""
    if len(rates) == 1:
        return rates[0]
    first = min(rates, key=lambda r: r.taken_at + STALE_INTERVALS * r.interval_s)
    total = math.fsum(r.kwh_per_op for r in rates)
    return MeasuredRate(total, first.tag, first.taken_at, first.interval_s)


def _feeds_services(src: EnergySource) -> bool:
    return bool(getattr(src.settings, "services", None))


def _green_regions(green: GreenConfig) -> list[str]:
    """Regions the scorer will look up: the default region, service regions, host regions."""
    regions = (
        {green.default_region}
        | set(green.service_regions.values())
        | {h.region for h in green.hosts}
    )
    return sorted(r for r in regions if r and r != "unknown")
