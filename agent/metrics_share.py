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

The live page (``GET /``) is made whole the same way, but only while somebody looks at it: the
worker answering ``GET /`` touches ``live-wanted``, and while that is under ``WANTED_S`` old
every worker writes its page figures (its state, the open window's report so far and its last
archived window reports) to ``live-w<k>.json`` every ``LIVE_S``; the answering worker sums the
workers' figures, lists each worker with the age of its figures, and names any left out (missing,
refused, or over ``LIVE_STALE_S`` old) with the reason. Each report is checked against the
window report's schema (``schema.models.WindowReport``) before it is shown.

A metrics file is the Prometheus text format after one header line, ``# carbonspan-worker-metrics/1
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
LIVE_FORMAT = "carbonspan-worker-live/1"
LIVE_S = 5.0  # while the live page is wanted, each worker rewrites its live file this often
WANTED_S = 30.0  # ... and it is wanted this long after a GET / (the page reloads every 5 s)
LIVE_STALE_S = 3 * LIVE_S  # a live file older than this is left out
WANTED = "live-wanted"
MAX_RECENT = 64  # more recent windows than any worker keeps: a file with more is refused
_HEADER = re.compile(
    rf"# {re.escape(FORMAT)} worker=(\d+) run=(\d+) pid=(\d+) taken_at=([0-9.]+)")


def metrics_dir(archive_dir: Path, agent_id: str) -> Path:
    return archive_dir / f".{agent_id}.metrics"


def metrics_file(directory: Path, index: int) -> Path:
    return directory / f"metrics-w{index}.prom"


def live_file(directory: Path, index: int) -> Path:
    return directory / f"live-w{index}.json"


def clear(directory: Path) -> None:
    """The supervisor, at start and at stop: no file of another run is left to be read."""
    directory.mkdir(parents=True, exist_ok=True)
    for pattern in ("metrics-w*.prom*", "live-w*.json*", WANTED):
        for p in directory.glob(pattern):
            p.unlink(missing_ok=True)


def _valid_report(rep: object) -> dict:
    """A window report of a live file as the page reads it, or ``ValueError``."""
    from pydantic import ValidationError

    from schema.models import WindowReport

    if not isinstance(rep, dict):
        raise ValueError("a report is not an object")
    try:
        return WindowReport.model_validate(rep).model_dump(mode="json")
    except ValidationError as exc:
        raise ValueError(f"a report does not match the window report schema "
                         f"({exc.error_count()} errors)") from None


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
        self._warned: dict[tuple[int, str], float] = {}
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

    def want_live(self) -> None:
        """A ``GET /``: ask every worker for its live figures for the next ``WANTED_S``."""
        path = self.dir / WANTED
        try:
            path.touch()
        except OSError as exc:
            self._warn(self.index, f"could not ask the others for their live figures ({path}: "
                       f"{exc}): the live page shows this worker's alone", "live page")

    def live_wanted(self) -> bool:
        try:
            return time.time() - (self.dir / WANTED).stat().st_mtime < WANTED_S
        except OSError:
            return False

    def publish_live(self, state: str, agent_id: str, open_report: dict | None,
                     recent: list[dict]) -> None:
        """Replace this worker's live file (the page's figures), as :meth:`publish` does."""
        import orjson

        doc = {"format": LIVE_FORMAT, "worker": self.index, "run": self.run, "pid": os.getpid(),
               "taken_at": time.time(), "state": state, "agent_id": agent_id,
               "open": open_report, "recent": recent}
        path = live_file(self.dir, self.index)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(orjson.dumps(doc))
            os.replace(tmp, path)
        except OSError as exc:
            self.publish_errors += 1
            self._warn(self.index, f"could not write its live figures to {path} ({exc})",
                       "live page")

    def peer_live(self, k: int, now: float | None = None) -> dict:
        """Worker ``k``'s live figures: ``{"worker", "agent_id", "state", "age", "open",
        "recent"}``, or ``{"worker", "age", "why"}`` when they are left out (logged)."""
        import orjson

        now = time.time() if now is None else now
        path = live_file(self.dir, k)
        age = None
        try:
            doc = orjson.loads(read_regular(path, MAX_FILE_BYTES))
            if not isinstance(doc, dict) or doc.get("format") != LIVE_FORMAT:
                raise ValueError(f"not a {LIVE_FORMAT} document")
            if doc.get("worker") != k or doc.get("run") != self.run:
                raise ValueError(f"not worker {k}'s of this run")
            taken = doc.get("taken_at")
            if isinstance(taken, bool) or not isinstance(taken, int | float):
                raise ValueError("taken_at is not a number")
            age = max(0.0, now - float(taken))
            if age > LIVE_STALE_S:
                return {"worker": k, "age": age, "why": f"figures {age:.0f} s old (over "
                        f"{LIVE_STALE_S:.0f} s: stopped, restarting or hung)"}
            state, agent_id, recent = doc.get("state"), doc.get("agent_id"), doc.get("recent")
            if not isinstance(state, str) or not isinstance(agent_id, str):
                raise ValueError("state or agent_id is not a string")
            if not isinstance(recent, list) or len(recent) > MAX_RECENT:
                raise ValueError(f"recent is not a list of at most {MAX_RECENT} reports")
            opened = doc.get("open")
            return {"worker": k, "agent_id": agent_id, "state": state, "age": age,
                    "open": None if opened is None else _valid_report(opened),
                    "recent": [_valid_report(r) for r in recent]}
        except FileNotFoundError:
            why = f"no figures yet (they come within {LIVE_S:.0f} s of a first look)"
        except (OSError, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
            why = f"figures refused ({path.name}: {exc})"
            self._warn(k, f"figures refused ({path}: {exc}): left out of the page", "live page")
        return {"worker": k, "age": age, "why": why}

    def _warn(self, worker: int, why: str, kind: str = "/metrics") -> None:
        now = time.monotonic()
        if now - self._warned.get((worker, kind), -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[(worker, kind)] = now
            log.warning("%s: worker %d %s", kind, worker, why)

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
