"""The agent process: open the archive, replay the WAL, serve OTLP, drain on SIGTERM/SIGINT.

Start order is what makes ``/readyz`` honest: the lock and archive recovery come first (a
second agent on the same directory fails here, before binding anything), then the HTTP port
(``/healthz`` answers, ``/readyz`` says 503 and exports get 503 "starting"), then the WAL replay
into its window, then gRPC, then ready. Stop order is the reverse of accepting: refuse new
requests, let admitted ones finish (bounded by ``shutdown_timeout_s``), archive the open
window, flush the WAL, release the lock, exit 0.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent.archive import WAL_NAME, ArchiveWriter
from agent.config import Config, ConfigError
from agent.daemon_config import AgentSettings, read_token
from agent.export import ExportHandler
from agent.metrics import AgentMetrics
from agent.metrics_share import ENV as METRICS_SHARE_ENV
from agent.metrics_share import MetricsShare
from agent.pipeline import Pipeline, Scoring
from agent.server_grpc import GrpcReceiver
from agent.server_http import HttpReceiver
from agent.sources.shared import ENV as SHARED_SOURCES_ENV
from agent.wal import WriteAheadLog
from agent.workers import Worker

log = logging.getLogger("carbonspan.agent")


def build_scoring(cfg: Config, agent_id: str, sources: Any | None) -> Scoring:
    """Bind ``agent.score`` / ``agent.window`` to this agent's config (and live signals)."""
    from agent.score import ScoringContext, WindowPartial, score_batch
    from agent.window import build_report, unscored_regions

    base = ScoringContext.from_config(cfg.green)
    for warning in unscored_regions(cfg.green, base.model):
        log.warning("%s", warning)

    def context(now: int) -> Any:
        # the window's clock stands in for absurd span timestamps and judges signal freshness
        if sources is None:
            return dataclasses.replace(base, now_ns=now)
        return dataclasses.replace(base, now_ns=now, signals=sources.current())

    def score(batch: Any) -> Any:
        return score_batch(batch, context(time.time_ns()))

    def report(
        partial: Any, start_ns: int, end_ns: int, counters: dict[str, int]
    ) -> dict[str, Any]:
        rep = build_report(
            partial, context(end_ns), start_ns, end_ns, agent_id=agent_id, counters=counters or None
        )
        return rep.model_dump(mode="json")

    return Scoring(
        score=score,
        empty=WindowPartial.empty,
        from_bytes=WindowPartial.from_bytes,
        report=report,
        # measured sources turn watts into kWh per I/O op with the ops of accepted batches
        accepted=None if sources is None else sources.ops.add_partial,
        archive_idle=bool(cfg.green.hosts),  # hosts draw power with or without spans
        context=context,
    )


def start_sources(cfg: Config, recorder: Any | None = None) -> Any | None:
    table = cfg.sections.get("sources")
    if not table:
        if recorder is not None:
            log.warning("[agent.signal_log] path is set but there is no [sources] table: no live "
                        "intensity is read, so nothing will be recorded")
        return None
    from agent.sources.manager import SourceManager

    manager = SourceManager.from_config(table, cfg.green, recorder=recorder)
    if recorder is not None and not manager.live:
        log.warning("[agent.signal_log] path is set but [sources] has no live-intensity source "
                    "(electricity_maps or grid_operator): nothing will be recorded")
    manager.start()
    return manager


def start_shared_sources(directory: Path, worker: Any, settings: AgentSettings,
                         metrics: AgentMetrics) -> Any:
    """A worker's ``[sources]``: the readings its supervisor publishes in ``directory``; the
    supervisor writes the signal log, worker 0 shows its counters."""
    from agent.sources.shared import SharedSignals

    counts = settings.signal_log.path is not None  # worker 0 only (agent/workers.py)
    if counts:
        from agent.signal_recorder import ERROR_REASONS, ROW_KINDS

        metrics.signal_log_on(ROW_KINDS, ERROR_REASONS)
    metrics.publisher_on()
    shared = SharedSignals(directory, worker.index, metrics, signal_log=counts)
    shared.start()
    log.info("[sources] readings from the supervisor (%s), seq %d", directory, shared.seq)
    return shared


def start_signal_log(settings: AgentSettings, metrics: AgentMetrics) -> Any | None:
    """The ``[agent.signal_log]`` recorder, started (None when ``path`` is unset)."""
    cfg = settings.signal_log
    if cfg.path is None:
        return None
    from agent.signal_recorder import ERROR_REASONS, ROW_KINDS, SignalRecorder

    metrics.signal_log_on(ROW_KINDS, ERROR_REASONS)
    recorder = SignalRecorder(cfg.path, int(cfg.max_mb * 1024 * 1024), metrics.count_signal_log)
    recorder.start()
    log.info("recording the live sources' intensity to the signal log %s", cfg.path)
    return recorder


class Agent:
    """One running agent; :meth:`run` blocks until a stop signal and returns the exit code."""

    def __init__(self, settings: AgentSettings, cfg: Config, worker: Worker | None = None) -> None:
        self.settings = settings
        self.cfg = cfg
        self.worker = worker  # one of a supervisor's workers (agent/workers.py), or None
        self.stop_event = threading.Event()
        self.metrics = AgentMetrics()
        if worker is not None:
            self.metrics.worker_on(worker.index, worker.count, settings.agent_id, worker.restarts)
            raw = os.environ.get(METRICS_SHARE_ENV)
            if raw:  # one /metrics for all workers (agent/metrics_share.py)
                try:
                    self.metrics.share = MetricsShare.from_env(
                        raw, worker.index, worker.count, self.metrics.exposition,
                        self.metrics.worker_metrics_publish_errors.inc)
                except ValueError as exc:
                    raise ConfigError(str(exc)) from None

    def request_stop(self, signum: int = 0, _frame: Any = None) -> None:
        if signum:
            log.info("received %s: draining", signal.Signals(signum).name)
        self.stop_event.set()

    def run(self) -> int:
        s = self.settings
        token = read_token(s)
        archive = ArchiveWriter(
            s.archive_path,
            max_size_mb=s.archive.max_size_mb,
            rotate_daily=s.archive.rotate_daily,
            compress=s.archive.compress,
        )
        recovery = archive.open()  # ArchiveLockedError: the caller prints it
        if recovery.corrupt_file is not None:
            log.warning(
                "the archive's unreadable tail (%d bytes: %s) was moved to %s; the chain continues "
                "from seq %s",
                recovery.corrupt_bytes,
                recovery.corrupt_reason,
                recovery.corrupt_file,
                recovery.last_seq,
            )
        if recovery.skipped_lines:
            log.warning(
                "%d unreadable last line(s) of a compressed archive file were left in place (%s); "
                "the chain continues from seq %s: run 'carbonspan verify' to see them",
                recovery.skipped_lines,
                recovery.skipped_reason,
                recovery.last_seq,
            )
        sources = None
        http: HttpReceiver | None = None
        self.signing = None
        self.recorder = None
        try:
            from agent.signing import attach

            self.signing = attach(s, archive, self.metrics)  # [agent.signing]
            shared = os.environ.get(SHARED_SOURCES_ENV) if self.worker is not None else None
            if shared:  # the supervisor polls [sources] for every worker (sources/shared.py)
                sources = start_shared_sources(Path(shared), self.worker, s, self.metrics)
            else:
                self.recorder = start_signal_log(s, self.metrics)  # [agent.signal_log]
                sources = start_sources(self.cfg, self.recorder)
            scoring = build_scoring(self.cfg, s.agent_id, sources)
            wal = WriteAheadLog(
                s.archive_path / WAL_NAME,
                fsync_delay_s=s.archive.wal_fsync_delay_ms / 1000.0,
                on_sync=lambda _n: self.metrics.wal_fsyncs.inc(),
                stall_file=s.archive.wal_stall_file,
            )
            pipeline = Pipeline(
                scoring,
                archive,
                wal,
                self.metrics,
                window_seconds=s.window_seconds,
                max_window_spans=s.max_window_spans,
                queue_size=s.queue_size,
            )
            from agent.otlp import OtlpDecodeError, decode_json, decode_protobuf
            from agent.otlp.jsonfast import decode_json_fast

            handler = ExportHandler(
                pipeline,
                self.metrics,
                {"protobuf": decode_protobuf, "json": decode_json},
                OtlpDecodeError,
                token,
                s.max_request_bytes,
                # on OTLP/HTTP's loop: the C walker alone (None: the request goes to a thread)
                loop_decoders={"protobuf": decode_protobuf, "json": decode_json_fast},
            )
            handler.sources_health = None if sources is None else sources.health
            if s.debug_last_batch and scoring.context is not None:  # GET /debug/last-batch
                from agent.debug_batch import LastBatch

                handler.last_batch = LastBatch(scoring.context)
            http = HttpReceiver(handler, s, self.worker)
            http.start()
            replayed = pipeline.restore(wal.open(), recovery)
            grpc_rx = GrpcReceiver(handler, s, worker=self.worker)
            grpc_port = grpc_rx.start()
        except BaseException:
            if http is not None:
                http.stop()
            archive.close()
            if self.signing is not None:
                self.signing.stop()
            if sources is not None:
                sources.stop()
            if self.recorder is not None:
                self.recorder.stop()
            raise
        handler.ready = True
        self.metrics.ready.set(1)
        share = self.metrics.share
        if share is not None:  # before "ready": the supervisor's ports line finds every file
            share.live_view = lambda: ("ready" if handler.is_ready() else handler.state(),
                                       s.agent_id, *pipeline.live_view())
            share.start()
        pipeline.start_ticker()
        next_seq = 0 if archive.last_seq is None else archive.last_seq + 1
        if pipeline.voided_skipped:  # records of refused batches that landed late (agent/wal.py)
            replayed_text = (f"{replayed} partials replayed from the WAL, "
                             f"{pipeline.voided_skipped} void records skipped")
        else:
            replayed_text = f"{replayed} partials replayed from the WAL"
        if self.worker is None:
            _say(f"carbonspan agent {s.agent_id}: OTLP/gRPC {s.bind}:{grpc_port}, OTLP/HTTP "
                 f"{s.bind}:{http.port}, archive {s.archive_path} (next seq {next_seq}, "
                 f"{replayed_text})")
        else:  # the supervisor prints the ports once every worker is ready
            _say(f"carbonspan agent {s.agent_id}: worker {self.worker.label} (pid "
                 f"{os.getpid()}) ready, archive {s.archive_path} (next seq {next_seq}, "
                 f"{replayed_text})")
        while not self.stop_event.wait(0.5):
            if sources is not None:
                self._publish_signal_ages(sources)
        return self._shutdown(handler, pipeline, grpc_rx, http, sources)

    def _publish_signal_ages(self, sources: Any) -> None:
        try:
            sig = sources.current()
            self.metrics.record_signals(
                {k: v.taken_at for k, v in sig.measured.items()},
                {k: v.taken_at for k, v in sig.live_intensity.items()},
            )
            self.metrics.record_source_health(sources.health())
        except Exception:  # a metrics glitch must never stop the agent
            log.exception("could not read the sources' signals for /metrics")

    def _shutdown(
        self,
        handler: ExportHandler,
        pipeline: Pipeline,
        grpc_rx: GrpcReceiver,
        http: HttpReceiver,
        sources: Any | None,
    ) -> int:
        budget = self.settings.shutdown_timeout_s
        handler.ready = False
        self.metrics.ready.set(0)
        pipeline.stop_accepting()
        done = grpc_rx.stop(grace_s=budget / 2)
        done.wait(budget / 2)
        # HTTP stays up while draining: /readyz says 503 and new exports get 503 + Retry-After
        drained = pipeline.drain(budget / 2)
        http.stop()
        if not drained:
            log.warning(
                "%d requests still in flight after %.1f s; they were not acknowledged",
                pipeline.inflight,
                budget,
            )
        code = 0
        try:
            pipeline.shutdown()
        except Exception as exc:  # e.g. a full disk: say where the spans are, exit non-zero
            log.error(
                "could not archive the open window on the way out (%s); its spans stay in the "
                "write-ahead log %s and are archived on the next start", exc, pipeline.wal.path,
            )
            code = 1
        if self.metrics.share is not None:  # its publisher thread (--workers N)
            self.metrics.share.stop()
        if sources is not None:
            sources.stop()
        if self.recorder is not None:  # after the pollers: their last rows are written
            self.recorder.stop()
        if self.signing is not None:  # after the archive's shutdown checkpoint was queued
            self.signing.stop()
        if code == 0:
            _say(f"carbonspan agent {self.settings.agent_id}: stopped cleanly")
        return code


def _say(line: str) -> None:
    """A line on stdout; a worker whose supervisor died (its stdout pipe closed) goes on."""
    try:
        print(line, flush=True)
    except (BrokenPipeError, ValueError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the rest of the process


def serve(settings: AgentSettings, cfg: Config, worker: Worker | None = None) -> int:
    agent = Agent(settings, cfg, worker)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, agent.request_stop)
        signal.signal(signal.SIGINT, agent.request_stop)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s"
        + ("" if worker is None else f"[{settings.agent_id}]") + ": %(message)s",
    )
    return agent.run()
