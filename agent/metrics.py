"""Prometheus metrics of the agent (served at ``GET /metrics`` on the HTTP port).

Every metric is documented in docs/operations.md. Per-service gauges are capped at
``MAX_SERVICE_LABELS`` label values (the largest by carbon); the rest are summed under
``service="_other"``, so a tenant that sends a thousand service names cannot blow up the
scrape or the server's memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

MAX_SERVICE_LABELS = 50
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AgentMetrics:
    """All agent metrics in one registry of their own (no process-global state)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "carbonspan_requests",
            "Export requests by protocol and outcome",
            ["protocol", "outcome"],
            registry=r,
        )
        self.spans_received = Counter(
            "carbonspan_spans_received",
            "Spans decoded from admitted requests (accepted or rejected)",
            registry=r,
        )
        self.spans_accepted = Counter(
            "carbonspan_spans_accepted",
            "Spans scored and durable in the write-ahead log",
            registry=r,
        )
        self.spans_rejected = Counter(
            "carbonspan_spans_rejected", "Spans refused, by reason", ["reason"], registry=r
        )
        self.windows_written = Counter(
            "carbonspan_windows_written", "Window lines appended to the archive", registry=r
        )
        self.archive_bytes = Counter(
            "carbonspan_archive_bytes", "Bytes appended to window files", registry=r
        )
        self.wal_fsyncs = Counter(
            "carbonspan_wal_fsyncs", "Group commits (one fdatasync each) of the WAL", registry=r
        )
        self.http_connections = Gauge(
            "carbonspan_http_connections", "Open HTTP connections being served", registry=r
        )
        self.http_connections_refused = Counter(
            "carbonspan_http_connections_refused",
            "HTTP connections over max_connections (answered 503 or closed)",
            registry=r,
        )
        self.queue_depth = Gauge(
            "carbonspan_queue_depth", "Requests admitted and not yet answered", registry=r
        )
        self.queue_capacity = Gauge(
            "carbonspan_queue_capacity", "Admission limit; beyond it requests get 429", registry=r
        )
        self.window_spans = Gauge(
            "carbonspan_open_window_spans", "Spans merged into the open window so far", registry=r
        )
        self.last_window_energy = Gauge(
            "carbonspan_last_window_energy_kwh",
            "Energy per service in the last archived window",
            ["service"],
            registry=r,
        )
        self.last_window_carbon = Gauge(
            "carbonspan_last_window_carbon_gco2",
            "Operational carbon per service in the last archived window",
            ["service"],
            registry=r,
        )
        self.last_window_end = Gauge(
            "carbonspan_last_window_end_seconds",
            "Unix time the last archived window ended",
            registry=r,
        )
        self.ready = Gauge(
            "carbonspan_ready", "1 once the archive is open and recovered", registry=r
        )
        self.source_up = Gauge(
            "carbonspan_source_signal_age_seconds",
            "Age of each live signal the scorer can use (measured energy, live intensity)",
            ["kind", "key"],
            registry=r,
        )
        self.source_ok = Gauge(
            "carbonspan_source_up", "1 when the source's last poll succeeded", ["source"], registry=r
        )
        self.source_failures = Gauge(
            "carbonspan_source_failures", "Failed polls of the source so far", ["source"], registry=r
        )
        self.source_energy_counter = Gauge(
            "carbonspan_source_energy_counter",
            "1 when the source's last interval of energy came from a cumulative energy counter "
            "(Redfish EnergykWh) rather than a power sample", ["source"], registry=r,
        )
        self.source_counter_events = Gauge(
            "carbonspan_source_counter_events",
            "Energy-counter readings not used as energy so far: resets (went backwards), "
            "rejected (negative, non-finite, implausible), stalled (no rise while drawing power)",
            ["source", "event"], registry=r,
        )
        self._lock = threading.Lock()

    def set_gauge_functions(
        self, queue_depth: Callable[[], float], window_spans: Callable[[], float]
    ) -> None:
        self.queue_depth.set_function(queue_depth)
        self.window_spans.set_function(window_spans)

    def record_window(
        self, energy: Mapping[str, float], carbon_kg: Mapping[str, float], end_s: float
    ) -> None:
        """Replace the per-service gauges with the window just archived (labels capped)."""
        ranked = sorted(energy, key=lambda s: (-carbon_kg.get(s, 0.0), -energy.get(s, 0.0), s))
        keep, rest = ranked[:MAX_SERVICE_LABELS], ranked[MAX_SERVICE_LABELS:]
        with self._lock:
            self.last_window_energy.clear()
            self.last_window_carbon.clear()
            for s in keep:
                self.last_window_energy.labels(s).set(energy.get(s, 0.0))
                self.last_window_carbon.labels(s).set(carbon_kg.get(s, 0.0) * 1000.0)
            if rest:  # inc, not set: a service really named "_other" keeps its share
                self.last_window_energy.labels("_other").inc(sum(energy.get(s, 0.0) for s in rest))
                self.last_window_carbon.labels("_other").inc(
                    sum(carbon_kg.get(s, 0.0) for s in rest) * 1000.0
                )
            self.last_window_end.set(end_s)

    def record_signals(self, measured: Mapping[str, float], live: Mapping[str, float]) -> None:
        """Signal ages from the sources' current snapshot (taken_at unix seconds by key)."""
        now = time.time()
        with self._lock:
            self.source_up.clear()
            for key, taken in measured.items():
                self.source_up.labels("measured_energy", key).set(max(0.0, now - taken))
            for key, taken in live.items():
                self.source_up.labels("live_intensity", key).set(max(0.0, now - taken))

    def record_source_health(self, health: Mapping[str, Mapping[str, object]]) -> None:
        """Per source: up (last poll ok) and failures, and for counter sources whether the
        counter carries the energy, from ``SourceManager.health()``."""
        with self._lock:
            for name, h in health.items():
                self.source_ok.labels(name).set(1.0 if h.get("ok") else 0.0)
                failures = h.get("failures", 0)
                self.source_failures.labels(name).set(float(failures) if isinstance(failures, int | float) else 0.0)
                if "energy_counter" in h:  # sources that read a cumulative counter (Redfish)
                    self.source_energy_counter.labels(name).set(1.0 if h["energy_counter"] else 0.0)
                    for event in ("resets", "rejected", "stalled"):
                        n = h.get(f"counter_{event}", 0)
                        self.source_counter_events.labels(name, event).set(
                            float(n) if isinstance(n, int | float) else 0.0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
