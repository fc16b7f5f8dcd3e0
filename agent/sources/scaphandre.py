"""Scaphandre (hubblo-org/scaphandre): per-process RAPL power from its Prometheus exporter.

``scaphandre prometheus`` serves ``scaph_process_power_consumption_microwatts`` gauges
labelled ``pid``, ``exe`` and ``cmdline`` (plus ``container_*`` / ``kubernetes_*`` labels
with ``--containers``), and ``scaph_host_power_microwatts`` for the whole host. Processes are
mapped to services by the configured label rules and their power is summed. The gauge is the
power now; over the interval since the previous poll the energy is taken as

    joules = uW / 1e6 x interval_s,  so  kWh/op = uW / 1e6 x interval_s / 3.6e6 / ops.
"""

from __future__ import annotations

import math
from collections import defaultdict

from agent.sources.config import ScaphandreConfig
from agent.sources.energy import EnergySource, Reading
from agent.sources.errors import SourceError
from agent.sources.http import http_get
from agent.sources.prom import ServiceMatcher, finite_sum, parse_exposition

PROCESS_METRIC = "scaph_process_power_consumption_microwatts"
HOST_METRIC = "scaph_host_power_microwatts"


class ScaphandreSource(EnergySource):
    kind = "scaphandre"
    tag = "scaphandre_rapl"
    settings: ScaphandreConfig

    def __init__(self, name: str, settings: ScaphandreConfig, ops, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name, settings, ops, **kw)
        self._matcher = ServiceMatcher(settings.services)

    def read(self, elapsed_s: float | None) -> Reading | None:
        cfg = self.settings
        body = http_get(cfg.url, timeout_s=cfg.timeout_s)
        samples = parse_exposition(
            body, (PROCESS_METRIC, HOST_METRIC), f"scaphandre {self.name} ({cfg.url})"
        )
        if not samples:
            raise SourceError(
                f"scaphandre {self.name}: {cfg.url} serves no {PROCESS_METRIC} or {HOST_METRIC}; "
                "is this Scaphandre's Prometheus exporter (scaphandre prometheus)?"
            )
        if elapsed_s is None:
            return None
        microwatts: dict[str, float] = defaultdict(float)
        for s in samples:
            if s.name != PROCESS_METRIC:
                continue
            service = self._matcher.service(s.labels)
            if service is None:
                self.stats["unmatched_series"] += 1
            elif not math.isfinite(s.value) or s.value < 0:
                self.stats["discarded"] += 1
            else:
                microwatts[service] += s.value
        host = [s.value for s in samples if s.name == HOST_METRIC]
        return Reading(
            service_joules={svc: uw / 1e6 * elapsed_s for svc, uw in microwatts.items()},
            total_watts=finite_sum(host) / 1e6 if host else None,
        )
