"""``[agent.signal_log]``: the live sources' intensity values appended to a signal log.

The pollers hand their rows to :meth:`SignalRecorder.submit`, which never blocks: a bounded
queue (``QUEUE_BATCHES`` polls) feeds one writer thread, so neither the scoring path nor a
poller ever waits for the disk. The writer is ``schema.signal_log.SignalLogWriter`` (the
format ``scheduling.signals`` reads): rows the log already holds are not appended again, each
batch is one ``write`` + ``fsync``, the file is rotated to ``PATH.1`` at ``max_mb``.

Nothing here can stop the agent: a full queue drops the batch (``queue_full``), a disk that
refuses a write loses that batch (``write_failed``; the next poll's rows are tried again, and
since the writer remembered nothing of the lost ones, they are appended then), a forecast that
cannot be fetched or an answer that gives no rows is counted (``forecast_unavailable``,
``unreadable_answer``). Every such event is counted in ``/metrics``
(``carbonspan_signal_log_errors_total{reason}``) and logged once per streak.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schema.signal_log import SignalLogWriter

log = logging.getLogger("carbonspan.agent.signal_log")

QUEUE_BATCHES = 64
ERROR_REASONS = ("queue_full", "write_failed", "invalid_row", "forecast_unavailable", "unreadable_answer")
ROW_KINDS = ("observation", "forecast")

#: ``count(metric, label, n)``: metric is ``rows`` (label: kind), ``unchanged``, ``errors``
#: (label: reason) or ``rotations``.
Count = Callable[[str, str, int], None]


def _ignore(_metric: str, _label: str, _n: int) -> None:
    pass


class SignalRecorder:
    def __init__(self, path: str | Path, max_bytes: int, count: Count = _ignore,
                 queue_batches: int = QUEUE_BATCHES) -> None:
        self.path = Path(path)
        self.writer = SignalLogWriter(self.path, max_bytes)
        self._count = count
        self._queue: queue.Queue[list[dict[str, Any]] | None] = queue.Queue(maxsize=queue_batches)
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()  # reasons in a streak (logged once until a success)
        self._lock = threading.Lock()
        self.totals: dict[str, int] = {}  # the same counts, for tests and health

    # -- what the pollers call -------------------------------------------------------------
    def submit(self, rows: list[dict[str, Any]]) -> None:
        """Queue one poll's rows for the writer; never blocks (a full queue drops them)."""
        try:
            self._queue.put_nowait(list(rows))
        except queue.Full:
            self.error("queue_full", len(rows), f"{len(rows)} rows dropped: the writer is "
                       f"{QUEUE_BATCHES} polls behind (a slow or stalled disk under {self.path})")

    def error(self, reason: str, n: int = 1, detail: str = "") -> None:
        self._add("errors", reason, n)
        with self._lock:
            first = reason not in self._failing
            self._failing.add(reason)
        if first:
            log.warning("signal log %s: %s%s (counted in carbonspan_signal_log_errors_total; "
                        "the agent goes on)", self.path, reason, f": {detail}" if detail else "")

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.writer.open()
        except OSError as exc:  # retried at the first batch; the agent starts regardless
            self.error("write_failed", 0, f"cannot open it ({exc.strerror or exc})")
        else:
            if self.writer.torn_bytes:
                log.warning("signal log %s: cut a torn last line of %d bytes (a crash mid-write)",
                            self.path, self.writer.torn_bytes)
        self._thread = threading.Thread(target=self._run, name="carbonspan-signal-log", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Write what is queued (within ``timeout_s``), then close the file."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)
        self._thread = None
        self.writer.close()

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued batch is written (tools and tests)."""
        done = threading.Event()

        def waiter() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        return done.wait(timeout_s)

    # -- the writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    return
                self._write(batch)
            finally:
                self._queue.task_done()

    def _write(self, batch: list[dict[str, Any]]) -> None:
        try:
            res = self.writer.append(batch)
        except OSError as exc:
            self.error("write_failed", len(batch), f"{len(batch)} rows not written ({exc.strerror or exc}); "
                       "the next poll tries again")
            return
        except Exception as exc:  # a writer bug must not kill the thread: count and go on
            log.exception("signal log %s: unexpected error", self.path)
            self.error("write_failed", len(batch), str(exc))
            return
        with self._lock:
            self._failing.discard("write_failed")
            self._failing.discard("queue_full")
            if res.forecasts:
                self._failing.discard("forecast_unavailable")
        if res.invalid:
            self.error("invalid_row", len(res.invalid), res.invalid[0])
        self._add("rows", "observation", res.observations)
        self._add("rows", "forecast", res.forecasts)
        self._add("unchanged", "", res.unchanged)
        if res.rotated:
            self._add("rotations", "", 1)
            log.info("signal log %s: rotated the full file to %s.1", self.path, self.path.name)

    def _add(self, metric: str, label: str, n: int) -> None:
        key = f"{metric}:{label}" if label else metric
        with self._lock:
            self.totals[key] = self.totals.get(key, 0) + n
        if n:
            try:
                self._count(metric, label, n)
            except Exception:  # a metrics glitch must never stop the recording
                log.exception("signal log: could not count %s", key)
