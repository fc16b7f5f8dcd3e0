"""Kepler (sustainable-computing-io/kepler): eBPF-attributed energy counters per workload.

Kepler exports cumulative ``*_joules_total`` counters per container, pod or process (e.g.
``kepler_container_cpu_joules_total`` with ``container_name``/``pod_name``/``zone`` labels
in Kepler >= 0.10; ``kepler_container_joules_total`` with ``mode`` in 0.7). The configured
``metric`` is read; series whose ``zone`` is not in ``zones`` are skipped because RAPL zones
overlap (``package`` contains ``core``/``uncore``); a series without a zone label is kept.
Energy over the interval is the counter's increase (a counter that went down was reset:
its increase is its current value); an endpoint whose counters all stood still is stuck and
the poll fails rather than publish a zero. So

    kWh/op = delta_joules / 3.6e6 / ops.

For a ``[[green.hosts]]`` host, point ``metric`` at the node counter
(``kepler_node_cpu_joules_total``): the machine's watts are the summed increase / interval.
"""

from __future__ import annotations

from collections import defaultdict

from agent.sources.config import KeplerConfig
from agent.sources.energy import EnergySource, Reading
from agent.sources.errors import SourceError
from agent.sources.http import http_get
from agent.sources.prom import CounterDeltas, Sample, ServiceMatcher, parse_exposition, zone_ok


class KeplerSource(EnergySource):
    kind = "kepler"
    tag = "kepler_ebpf"
    settings: KeplerConfig

    def __init__(self, name: str, settings: KeplerConfig, ops, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name, settings, ops, **kw)
        self._matcher = ServiceMatcher(settings.services)
        self._counters = CounterDeltas()
        self._zones = frozenset(settings.zones)

    def read(self, elapsed_s: float | None) -> Reading | None:
        cfg = self.settings
        body = http_get(cfg.url, timeout_s=cfg.timeout_s)
        samples = parse_exposition(body, (cfg.metric,), f"kepler {self.name} ({cfg.url})", cfg.zone_label, self._zones)
        if not samples:
            raise SourceError(
                f"kepler {self.name}: {cfg.url} serves no {cfg.metric} series; check `metric` "
                "(Kepler >= 0.10: kepler_container_cpu_joules_total, 0.7: kepler_container_joules_total)"
            )
        kept: dict[object, float] = {}
        by_key: dict[object, Sample] = {}
        for s in samples:
            if zone_ok(s.labels, cfg.zone_label, self._zones):
                kept[s.key] = s.value
                by_key[s.key] = s
        discarded_before = self._counters.discarded
        deltas = self._counters.update(kept)
        self.stats["discarded"] += self._counters.discarded - discarded_before
        self.stats["counter_resets"] = self._counters.resets
        if elapsed_s is None:
            return None
        if deltas and not any(deltas.values()):
            # a powered machine's package counters always move: a frozen exporter is a failed
            # poll (the last good values stay until stale), not a measured zero
            raise SourceError(
                f"kepler {self.name}: none of the {len(deltas)} {cfg.metric} series moved in "
                f"{elapsed_s:.0f} s; is the exporter stuck? (check Kepler's own logs)"
            )
        joules: dict[str, float] = defaultdict(float)
        for key, delta in deltas.items():
            service = self._matcher.service(by_key[key].labels) if self._matcher else None
            if service is not None:
                joules[service] += delta
            elif self._matcher:
                self.stats["unmatched_series"] += 1
        return Reading(service_joules=dict(joules), total_watts=sum(deltas.values()) / elapsed_s)
