"""One ``/metrics`` for all workers of ``carbonspan agent --workers N``.

Why: the workers share the HTTP port (``SO_REUSEPORT``) and the kernel picks which one takes a
scrape's connection. Were each worker to answer with its own counters alone, Prometheus would see
``carbonspan_spans_accepted_total`` jump between two workers' values from one scrape to the next:
every fall reads as a counter reset, so ``rate()`` and ``increase()`` come out wrong, silently.

So each worker writes its own exposition, every ``SHARE_S``, to ``metrics-w<k>.prom`` in
``<archive dir>/.<agent_id>.metrics/`` (replaced atomically: written beside it, then renamed),
and whichever worker takes a scrape answers for all of them: its own figures read at that
moment, the others' from their files, every sample labelled ``worker="<k>"`` (the label is set
by the answering worker, never taken from a file). So each series always belongs to one worker,
whichever answered, and sums over ``worker`` are the agent's. Per worker, two series say how
whole the answer is: ``carbonspan_worker_metrics_age_seconds{worker}`` (how old that worker's
figures are: 0 for the one answering, up to ``SHARE_S`` for the others) and
``carbonspan_worker_metrics_up{worker}`` (1 when they are in the answer; 0 when its file is
missing, unreadable, not from this run, or over ``STALE_AFTER_S`` old: a worker that died and is
restarting. Its samples are then left out, not shown stale, and the answering worker logs a
warning, the first time and then once a minute per worker).

A file is the Prometheus text format after one header line, ``# carbonspan-worker-metrics/1
worker=<k> run=<supervisor pid> pid=<pid> taken_at=<unix seconds>``. The supervisor empties the
directory when it starts and when it stops. A file that is not a regular file (a FIFO, a
symlink), is over ``MAX_FILE_BYTES``, names another worker or run, or does not parse is refused
(that worker's ``up`` is 0, with the reason in the warning).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from agent.sources.shared import read_regular

log = logging.getLogger("carbonspan.agent")

#: set by the supervisor in each worker's environment: "<directory> <supervisor pid>"
ENV = "_CARBONSPAN_METRICS_DIR"
FORMAT = "carbonspan-worker-metrics/1"
SHARE_S = 1.0  # each worker rewrites its file this often
STALE_AFTER_S = 10.0  # figures older than this are left out (the worker is gone or stuck)
MAX_FILE_BYTES = 8 << 20
WARN_EVERY_S = 60.0
_HEADER = re.compile(
    rf"# {re.escape(FORMAT)} worker=(\d+) run=(\d+) pid=(\d+) taken_at=([0-9.]+)")


def metrics_dir(archive_dir: Path, agent_id: str) -> Path:
    return archive_dir / f".{agent_id}.metrics"


def metrics_file(directory: Path, index: int) -> Path:
    return directory / f"metrics-w{index}.prom"


def clear(directory: Path) -> None:
    """The supervisor, at start and at stop: no file of another run is left to be read."""
    directory.mkdir(parents=True, exist_ok=True)
    for p in directory.glob("metrics-w*.prom*"):
        p.unlink(missing_ok=True)


class _Families:
    """The merged families, as a collector ``generate_latest`` renders."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


class MetricsShare:
    """Worker ``index`` of ``count``: :meth:`publish` writes its figures for the others (call
    it every ``SHARE_S``), :meth:`exposition` answers a scrape for all of them."""

    def __init__(self, directory: Path, index: int, count: int, run: int,
                 own: Callable[[], bytes]) -> None:
        self.dir, self.index, self.count, self.run = directory, index, count, run
        self.own = own
        self.path = metrics_file(directory, index)
        self._warned: dict[int, float] = {}
        self.publish_errors = 0

    @classmethod
    def from_env(cls, raw: str, index: int, count: int, own: Callable[[], bytes]) -> MetricsShare:
        directory, _, run = raw.rpartition(" ")
        if not directory or not run.isdigit():
            raise ValueError(f"{ENV}={raw!r} is not set by a carbonspan supervisor; unset it")
        return cls(Path(directory), index, count, int(run), own)

    def publish(self) -> None:
        """Replace this worker's file with its figures now. A failure is logged (the first,
        then once a minute) and counted; the other workers then show this one as not up."""
        head = (f"# {FORMAT} worker={self.index} run={self.run} pid={os.getpid()} "
                f"taken_at={time.time():.3f}\n").encode()
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            body = self.own()
            tmp.unlink(missing_ok=True)  # a failed write's leftover, or a symlink planted there
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(head + body)
            os.replace(tmp, self.path)
        except OSError as exc:
            self.publish_errors += 1
            self._warn(self.index, f"could not write its figures to {self.path} ({exc}); the "
                       "other workers' /metrics show it as not up until a write succeeds")

    def _warn(self, worker: int, why: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(worker, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[worker] = now
            log.warning("/metrics: worker %d %s", worker, why)

    def _peer(self, k: int, now: float) -> tuple[str | None, float | None]:
        """Worker ``k``'s exposition text and age, or (None, age or None) with a warning."""
        path = metrics_file(self.dir, k)
        try:
            raw = read_regular(path, MAX_FILE_BYTES)
        except FileNotFoundError:
            self._warn(k, f"has written no figures yet ({path} is missing): its samples are left "
                       "out of this answer (carbonspan_worker_metrics_up 0)")
            return None, None
        except (OSError, ValueError) as exc:
            self._warn(k, f"figures refused ({path}: {exc}): its samples are left out")
            return None, None
        head, _, body = raw.partition(b"\n")
        m = _HEADER.fullmatch(head.decode("ascii", "replace"))
        if m is None or int(m.group(1)) != k or int(m.group(2)) != self.run:
            self._warn(k, f"figures refused ({path} is not worker {k}'s of this run): its "
                       "samples are left out")
            return None, None
        age = max(0.0, now - float(m.group(4)))
        if age > STALE_AFTER_S:
            self._warn(k, f"figures are {age:.0f} s old (over {STALE_AFTER_S:.0f} s: the worker "
                       "stopped or is restarting): its samples are left out")
            return None, age
        try:
            return body.decode("utf-8"), age
        except UnicodeDecodeError:
            self._warn(k, f"figures refused ({path} is not UTF-8): its samples are left out")
            return None, age

    def exposition(self) -> bytes:
        """Every worker's figures, each sample labelled ``worker``, plus how whole it is."""
        now = time.time()
        texts: dict[int, str] = {self.index: self.own().decode("utf-8")}
        ages: dict[int, float | None] = {self.index: 0.0}
        for k in range(self.count):
            if k != self.index:
                text, ages[k] = self._peer(k, now)
                if text is not None:
                    texts[k] = text
        merged: dict[str, Metric] = {}
        for k in sorted(texts):
            try:
                families = list(text_string_to_metric_families(texts[k]))
            except Exception as exc:  # the parser raises ValueError and others on bad text
                self._warn(k, f"figures refused (they do not parse as Prometheus text: {exc}): "
                           "its samples are left out")
                del texts[k]
                continue
            label = str(k)
            for fam in families:
                into = merged.get(fam.name)
                if into is None:
                    into = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                elif into.type != fam.type:  # a file at odds with the others: not merged
                    continue
                into.samples += [s._replace(labels={**s.labels, "worker": label})
                                 for s in fam.samples]
        age = Metric("carbonspan_worker_metrics_age_seconds", "Seconds since this worker's "
                     "figures in this answer were taken (0: the worker answering)", "gauge")
        up = Metric("carbonspan_worker_metrics_up", "1 when this worker's figures are in this "
                    "answer; 0 when they are missing, refused or stale (left out)", "gauge")
        for k in range(self.count):
            a = ages.get(k)
            if a is not None:
                age.add_sample(age.name, {"worker": str(k)}, a)
            up.add_sample(up.name, {"worker": str(k)}, 1.0 if k in texts else 0.0)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families([*merged.values(), age, up]))
        return generate_latest(registry)
