"""Prometheus metrics of the agent (served at ``GET /metrics`` on the HTTP port).

Every metric is documented in docs/operations.md. Per-service gauges are capped at
``MAX_SERVICE_LABELS`` label values (the largest by carbon); the rest are summed under
``service="_other"``, so a tenant that sends a thousand service names cannot blow up the
scrape or the server's memory.

The cumulative counters (``carbonspan_service_energy_kwh_total``, ``..._carbon_gco2_total``,
``carbonspan_carbon_gco2_total{term}``) are what dashboards should use: ``increase()`` over
any range gives the energy and carbon archived in it, whatever the scrape interval, where the
last-window gauges miss windows that close between two scrapes. Their service labels are
sticky: the first ``MAX_SERVICE_LABELS`` services archived keep a label for the life of the
process (a counter must not move between labels), later ones add to ``_other``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from schema.totals import TOTAL_TERMS

MAX_SERVICE_LABELS = 50
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AgentMetrics:
    """All agent metrics in one registry of their own (no process-global state)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.share: Any = None  # a worker's MetricsShare (agent/metrics_share.py), or None
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
        self.archive_write_errors = Counter(
            "carbonspan_archive_write_errors",
            "Window closes whose line could not be archived (the window stays open, its spans "
            "safe in the WAL, and is tried again); /readyz is 503 until one succeeds",
            registry=r,
        )
        self.wal_fsyncs = Counter(
            "carbonspan_wal_fsyncs", "Group commits (one fdatasync each) of the WAL", registry=r
        )
        self.http_connections = Gauge(
            "carbonspan_http_connections", "Open HTTP connections being served", registry=r
        )
        self.wal_records_voided = Counter(
            "carbonspan_wal_records_voided",
            "WAL records of batches answered 'unavailable, retry' (not durable in time), named "
            "in agent.wal.void so that a replay never counts them beside the client's retry",
            registry=r,
        )
        self.wal_void_errors = Counter(
            "carbonspan_wal_void_errors",
            "Void entries (agent.wal.void) that could not be written: if such a record lands and "
            "the agent is killed before its window is archived, a restart counts it beside the "
            "client's retry",
            registry=r,
        )
        self.http_connections_refused = Counter(
            "carbonspan_http_connections_refused",
            "HTTP connections closed at once at max_connections (none could be evicted)",
            registry=r,
        )
        self.http_accept_failed = Counter(
            "carbonspan_http_accept_failed",
            "HTTP connections the OS could not accept (the process at its open-file limit)",
            registry=r,
        )
        self.http_connections_evicted = Counter(
            "carbonspan_http_connections_evicted",
            "HTTP connections closed to make room for a new one at max_connections, by reason: "
            "idle (a keep-alive connection with no request), slow (a request still arriving) "
            "or handshake (a TLS handshake not finished)",
            ["reason"],
            registry=r,
        )
        for reason in ("idle", "slow", "handshake"):
            self.http_connections_evicted.labels(reason)
        self.http_tls_handshake_failures = Counter(
            "carbonspan_http_tls_handshake_failures",
            "TLS handshakes on the HTTP port that did not finish, by reason: timeout (past "
            "10 s), error (not TLS, no shared protocol or cipher) or closed (the client left)",
            ["reason"],
            registry=r,
        )
        for reason in ("timeout", "error", "closed"):
            self.http_tls_handshake_failures.labels(reason)
        self.http_request_timeouts = Counter(
            "carbonspan_http_request_timeouts",
            "HTTP requests whose head and body did not arrive within http_request_timeout_s "
            "(answered 408 and closed)",
            registry=r,
        )
        self.json_python_walks = Counter(
            "carbonspan_json_python_walks",
            "OTLP/JSON requests decoded by the Python walk (the C walker left them), by whether "
            "they waited for the walk's memory budget",
            ["waited"],
            registry=r,
        )
        for waited in ("false", "true"):
            self.json_python_walks.labels(waited)
        self.http_handed_off = Counter(
            "carbonspan_http_exports_handed_off",
            "OTLP/HTTP exports the event loop handed to a thread instead of decoding them "
            "itself (http_workers = 0), by why: large, python_walk, pipeline_busy",
            ["reason"],
            registry=r,
        )
        for reason in ("large", "python_walk", "pipeline_busy"):
            self.http_handed_off.labels(reason)
        self.queue_depth = Gauge(
            "carbonspan_queue_depth", "Requests admitted and not yet answered", registry=r
        )
        self.queue_capacity = Gauge(
            "carbonspan_queue_capacity", "Admission limit; beyond it requests get 429", registry=r
        )
        self.wal_oldest_wait = Gauge(
            "carbonspan_wal_oldest_commit_wait_seconds",
            "Seconds the oldest WAL record not yet durable has waited (0: none waits)", registry=r
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
        self.service_energy = Counter(
            "carbonspan_service_energy_kwh",
            "Energy per service archived since start (first 50 services by first archive, "
            "the rest as _other)",
            ["service"],
            registry=r,
        )
        self.service_carbon = Counter(
            "carbonspan_service_carbon_gco2",
            "Operational carbon per service archived since start (same labels)",
            ["service"],
            registry=r,
        )
        self.energy_total = Counter(
            "carbonspan_energy_kwh",
            "Energy archived since start: services plus database/broker hosts in totals",
            registry=r,
        )
        self.carbon_total = Counter(
            "carbonspan_carbon_gco2",
            "Carbon archived since start by term (operational, embodied, database, messaging); "
            "their sum is the windows' co2.total.mid",
            ["term"],
            registry=r,
        )
        self.grid_intensity = Gauge(
            "carbonspan_grid_intensity_gco2_per_kwh",
            "Grid intensity each region's spans used in the last archived window",
            ["region", "source"],
            registry=r,
        )
        self._labelled: set[str] = set()  # services with their own counter label
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
        # [agent.signal_log]: agent.signal_recorder (signal_log_on makes every child, so 0 shows)
        self.signal_log_rows = Counter("carbonspan_signal_log_rows", "Signal-log rows appended, by "
                                       "kind (observation, forecast)", ["kind"], registry=r)
        self.signal_log_unchanged = Counter("carbonspan_signal_log_unchanged", "Rows read again by a "
                                            "poll that the signal log already held (not appended)",
                                            registry=r)
        self.signal_log_errors = Counter("carbonspan_signal_log_errors", "Signal-log rows lost or "
                                         "not made, by reason", ["reason"], registry=r)
        self.signal_log_rotations = Counter("carbonspan_signal_log_rotations", "Times the signal log "
                                            "reached max_mb and was renamed to PATH.1", registry=r)
        # [agent.signing]: agent.checkpoints and agent.witness_push
        self.checkpoints_written = Counter("carbonspan_checkpoints_written", "Signed checkpoints "
                                           "appended to checkpoints.log", registry=r)
        self.checkpoint_errors = Counter("carbonspan_checkpoint_errors", "Checkpoints not made, "
                                         "by reason", ["reason"], registry=r)
        self.checkpoint_size = Gauge("carbonspan_checkpoint_size", "Lines covered by the last "
                                     "signed checkpoint", registry=r)
        self.witness_cosignatures = Counter("carbonspan_witness_cosignatures", "Checkpoints a "
                                            "witness cosigned", ["witness"], registry=r)
        self.witness_failures = Counter("carbonspan_witness_failures", "Failed pushes to a "
                                        "witness, by reason", ["witness", "reason"], registry=r)
        # the scoring pass (agent/score_fast.py): read from it at each scrape (exposition)
        self.scorer_c = Gauge(
            "carbonspan_scorer_c",
            "1 when the C scoring pass (agent/_score.c) scores batches; 0 when the numpy "
            "reference scores every batch, by status: not_built or stale_build (the log says how "
            "to rebuild it)",
            ["status"], registry=r,
        )
        from agent import score_fast
        from agent.carbon.ext import FALLBACK_REASONS

        status = scorer_status(score_fast.STATUS)
        self.scorer_c.labels(status).set(1.0 if score_fast.FAST_SCORER else 0.0)
        self.scorer_fallbacks = Counter(
            "carbonspan_scorer_fallbacks",
            "Batches the C scoring pass declined and the numpy reference scored (same answers, "
            "slower), by reason: column, calibration, clock, table, count_overflow (the window's "
            "C accumulator declined a batch whose counts could pass int64)",
            ["reason"], registry=r,
        )
        for reason in FALLBACK_REASONS:
            self.scorer_fallbacks.labels(reason)
        # the process's fallbacks so far (score_fast counts for the process): this registry
        # counts from its own start
        self._fallbacks_seen = score_fast.fallbacks()
        self._lock = threading.Lock()

    def _sync_scorer(self) -> None:
        """Add the C pass's fallbacks since the last scrape to the counter."""
        from agent import score_fast

        with self._lock:  # read under the lock too: two scrapes must not count one twice
            now = score_fast.fallbacks()
            for reason, n in now.items():
                seen = self._fallbacks_seen.get(reason, 0)
                if n > seen:
                    self.scorer_fallbacks.labels(reason).inc(n - seen)
            self._fallbacks_seen = now

    def worker_on(self, index: int, count: int, agent_id: str, restarts: int) -> None:
        """A worker of ``carbonspan agent --workers N`` (agent/workers.py) says which it is."""
        self.worker_info = Gauge("carbonspan_worker_info", "This process is worker <worker> of "
                                 "<workers>, writing the chain <agent_id>",
                                 ["worker", "workers", "agent_id"], registry=self.registry)
        self.worker_info.labels(str(index), str(count), agent_id).set(1)
        self.worker_restarts = Gauge("carbonspan_worker_restarts", "Times the supervisor "
                                     "restarted this worker's slot before this process",
                                     registry=self.registry)
        self.worker_restarts.set(restarts)
        self.worker_metrics_publish_errors = Counter(
            "carbonspan_worker_metrics_publish_errors", "Times this worker could not publish its "
            "figures for the other workers' /metrics and live page (logged)",
            registry=self.registry)

    def publisher_on(self) -> None:
        """A worker reading the supervisor's ``[sources]`` (agent/sources/shared.py)."""
        r = self.registry
        self.publisher_up = Gauge("carbonspan_sources_publisher_up", "1 while the supervisor's "
                                  "[sources] readings are current (published in the last 10 s)",
                                  registry=r)
        self.publisher_age = Gauge("carbonspan_sources_publisher_age_seconds", "Seconds since "
                                   "the supervisor last published [sources] readings", registry=r)
        self.publisher_silent = Counter("carbonspan_sources_publisher_silent", "Times the "
                                        "supervisor's [sources] readings went silent (over 10 s "
                                        "old); the last readings are kept and go stale",
                                        registry=r)
        self.readings_refused = Counter("carbonspan_sources_readings_refused", "Versions of the "
                                        "supervisor's readings.json this worker refused "
                                        "(unreadable, malformed, not finite); the last readings "
                                        "are kept", registry=r)
        self.switch_late = Counter("carbonspan_sources_switch_late", "Times this worker read the "
                                   "supervisor's [sources] readings after they took effect (its "
                                   "reader stalled over 1 s): it scored with the readings before "
                                   "meanwhile", registry=r)
        self.ops_refused = Counter("carbonspan_sources_ops_refused", "Workers' ops-w<k>.json "
                                   "files the supervisor refused (unreadable, malformed, another "
                                   "run's), shown by worker 0; their ops count once the file "
                                   "reads again", registry=r)
        self._ops_refused_seen = 0
        self._silences_seen = 0
        self._refused_seen = 0
        self._late_seen = 0

    def record_ops_refused(self, total: int) -> None:
        """The supervisor's running count of refused ops files (readings.json)."""
        with self._lock:
            if total > self._ops_refused_seen:
                self.ops_refused.inc(total - self._ops_refused_seen)
            self._ops_refused_seen = total

    def record_publisher(self, up: bool, age_s: float | None, silences: int,
                         refused: int = 0, late: int = 0) -> None:
        with self._lock:
            self.publisher_up.set(1.0 if up else 0.0)
            self.publisher_age.set(-1.0 if age_s is None else max(0.0, age_s))
            if silences > self._silences_seen:
                self.publisher_silent.inc(silences - self._silences_seen)
                self._silences_seen = silences
            if refused > self._refused_seen:
                self.readings_refused.inc(refused - self._refused_seen)
                self._refused_seen = refused
            if late > self._late_seen:
                self.switch_late.inc(late - self._late_seen)
                self._late_seen = late

    def signal_log_on(self, kinds: tuple[str, ...], reasons: tuple[str, ...]) -> None:
        """With ``[agent.signal_log]``: every series exists from the start (at 0)."""
        for kind in kinds:
            self.signal_log_rows.labels(kind)
        for reason in reasons:
            self.signal_log_errors.labels(reason)

    def count_signal_log(self, metric: str, label: str, n: int) -> None:
        """``agent.signal_recorder``'s counts (``metric``: rows, unchanged, errors, rotations)."""
        if metric == "rows":
            self.signal_log_rows.labels(label).inc(n)
        elif metric == "unchanged":
            self.signal_log_unchanged.inc(n)
        elif metric == "errors":
            self.signal_log_errors.labels(label).inc(n)
        elif metric == "rotations":
            self.signal_log_rotations.inc(n)

    def set_gauge_functions(
        self, queue_depth: Callable[[], float], window_spans: Callable[[], float],
        wal_oldest_wait: Callable[[], float] | None = None,
    ) -> None:
        self.queue_depth.set_function(queue_depth)
        self.window_spans.set_function(window_spans)
        if wal_oldest_wait is not None:
            self.wal_oldest_wait.set_function(wal_oldest_wait)

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

    def record_totals(self, summary: Mapping[str, object]) -> None:
        """Add an archived window's green summary to the cumulative counters and set the
        regions' intensity gauges. Values that are not finite non-negative numbers are
        skipped (a counter can only go up)."""
        energy = _numbers(summary.get("per_service_energy_kwh"))
        carbon_kg = _numbers(summary.get("per_service_carbon_kgco2eq"))
        co2 = summary.get("co2")
        co2 = co2 if isinstance(co2, Mapping) else {}
        with self._lock:
            for s in sorted(set(energy) | set(carbon_kg)):
                if s not in self._labelled and len(self._labelled) < MAX_SERVICE_LABELS:
                    self._labelled.add(s)
                label = s if s in self._labelled else "_other"
                self.service_energy.labels(label).inc(energy.get(s, 0.0))
                self.service_carbon.labels(label).inc(carbon_kg.get(s, 0.0) * 1000.0)
            self.energy_total.inc(_number(summary.get("energy_kwh")))
            for term in TOTAL_TERMS:
                self.carbon_total.labels(term).inc(_number(co2.get(f"{term}_gco2")))
            regions = summary.get("regions")
            self.grid_intensity.clear()
            for row in regions[:MAX_SERVICE_LABELS] if isinstance(regions, list) else ():
                if isinstance(row, Mapping) and isinstance(row.get("region"), str):
                    self.grid_intensity.labels(row["region"], str(row.get("intensity_source", ""))).set(
                        _number(row.get("grid_intensity_gco2_kwh"))
                    )

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
        """This process's figures, in the Prometheus text format."""
        self._sync_scorer()
        return generate_latest(self.registry)

    def scrape(self) -> bytes:
        """What ``GET /metrics`` answers: this process's figures, or, in a worker of
        ``--workers N``, every worker's, each sample labelled ``worker`` (agent/metrics_share.py)."""
        return self.exposition() if self.share is None else self.share.exposition()


def scorer_status(status: str) -> str:
    """``agent.score_fast.STATUS`` as the label of ``carbonspan_scorer_c``."""
    if status == "c":
        return "c"
    return "stale_build" if "stale build" in status else "not_built"


def _number(value: object) -> float:
    """A finite non-negative float, else 0.0."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        v = float(value)
        if v >= 0.0 and v != float("inf"):
            return v
    return 0.0


def _numbers(values: object) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    return {str(k): _number(v) for k, v in values.items()}

