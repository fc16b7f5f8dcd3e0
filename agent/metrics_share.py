"""One ``/metrics`` and one live page for all workers of ``carbonspan agent --workers N``.

Why: the workers share the HTTP port (``SO_REUSEPORT``) and the kernel picks which one takes a
scrape's connection. Were each worker to answer with its own counters alone, Prometheus would see
``carbonspan_spans_accepted_total`` jump between two workers' values from one scrape to the next:
every fall reads as a counter reset, so ``rate()`` and ``increase()`` come out wrong, silently.

So each worker's ``metrics-share`` thread writes its exposition every ``SHARE_S``, and whenever
a scrape asks, to ``metrics-w<k>.prom`` in ``<archive dir>/.<agent_id>.metrics/`` (replaced
atomically: written beside it, then renamed, one writer at a time), and whichever worker takes a
scrape answers for all of them: each worker's **last published** figures (its own it asked its
thread to publish, waiting ``SCRAPE_WAIT_S`` at most: a request never writes to the disk), every
sample labelled ``worker="<k>"`` (the label is set by the answering worker, never taken from a
file). A worker that cannot publish (a failed or hung write) says so in every answer
(``carbonspan_worker_metrics_publish_failing{worker}`` 1: the answering worker knows it of
itself, and of another once that one's figures are over ``PUBLISH_LATE_S`` old); its answers show
its last published figures until they are ``STALE_AFTER_S`` old, then its live ones. So each
series always belongs to one worker, whichever answered, and its counters never fall: a worker's
file is only ever replaced by a later snapshot, every answer reads the latest, and a worker
answers with live figures only where no answer shows its file any more (and keeps to them until
a later snapshot has landed).
Sums over ``worker`` are the agent's. Per worker, two series say how whole the answer is (and a
third whether it publishes):
``carbonspan_worker_metrics_up{worker}`` (1 when its figures are in the answer; 0 when they are
left out: see below) and ``carbonspan_worker_metrics_age_seconds{worker}`` (how old they are; 0 to
~``SHARE_S`` for a live worker; present whenever the file's header could be read).

A worker's figures are left out (``up`` 0, and a warning from the answering worker, the first time
and then once a minute per worker and reason) when its file is missing (not written yet, or its
worker died: the supervisor removes a dead worker's files), refused, or over ``STALE_AFTER_S`` old
(a hung worker). Refused: not a regular file (a FIFO, a symlink), over ``MAX_METRICS_BYTES``, a
header that is not this format, another worker's or another supervisor run's (a random token per
supervisor start), dated more than ``FUTURE_S`` ahead (a stepped clock), not UTF-8 Prometheus text,
over ``MAX_SERIES`` samples, or figures at odds with the answer: a family whose name or type
clashes with one already in it (the answering worker's own come first), a repeated series, a
sample with a timestamp, one of the three families the merge adds itself, or a
``carbonspan_worker_info`` of another worker. A file is refused whole, never in part, so ``up`` 1
always means all of that worker's figures.

The live page (``GET /``) is made whole the same way, but only while somebody looks at it: the
worker answering ``GET /`` touches ``live-wanted``, and while that is under ``WANTED_S`` old every
worker writes its page figures (its state, the open window's report so far and its last archived
window reports) to ``live-w<k>.json`` every ``LIVE_S``; the answering worker sums the workers'
figures, lists each worker with the age of its figures, and names any left out (missing, refused,
or over ``LIVE_STALE_S`` old) with the reason. Each report is checked against the window report's
schema (``schema.models.WindowReport``) before it is shown.

Files are written by that thread alone, never by a request, the ingest path or the main loop, so
a slow or frozen archive file system delays the figures, not an answer or a drain.

A metrics file is the Prometheus text format after one header line, ``# carbonspan-worker-metrics/1
worker=<k> run=<token> pid=<pid> taken_at=<unix seconds>``. The supervisor holds the directory's
``lock`` for its life (``agent.sources.shared.hold_lock``: a second supervisor of the agent id is refused)
and empties the directory when it starts and when it stops.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from agent.sources.shared import read_regular, replace_bytes

log = logging.getLogger("carbonspan.agent")

#: set by the supervisor in each worker's environment: "<directory> <run token>"
ENV = "_CARBONSPAN_METRICS_DIR"
FORMAT = "carbonspan-worker-metrics/1"
SHARE_S = 1.0  # each worker rewrites its metrics file this often (and when a scrape asks)
SCRAPE_WAIT_S = 0.5  # a scrape waits this long at most for its worker's publish
PUBLISH_LATE_S = 3 * SHARE_S  # another worker's figures older than this: it cannot publish
STALE_AFTER_S = 10.0  # figures older than this are left out (the worker hangs)
FUTURE_S = 2 * SHARE_S  # figures dated further ahead than this are refused (a stepped clock)
MAX_METRICS_BYTES = 512 << 10  # a worker's real file is 20-50 kB (service labels capped at 50)
MAX_SERIES = 4_000  # samples per worker's file (a real one has ~450); counted while parsing
WARN_EVERY_S = 60.0
RESERVED = ("carbonspan_worker_metrics_up", "carbonspan_worker_metrics_age_seconds",
            "carbonspan_worker_metrics_publish_failing")  # the families the merge adds itself
FILE_TYPES = ("counter", "gauge")  # the only types AgentMetrics exposes
LIVE_FORMAT = "carbonspan-worker-live/1"
LIVE_S = 5.0  # while the live page is wanted, each worker rewrites its live file this often
WANTED_S = 30.0  # ... and it is wanted this long after a GET / (the page reloads every 5 s)
LIVE_STALE_S = 3 * LIVE_S  # a live file older than this is left out
LIVE_SERVICES = 200  # per report in a live file: the services of most carbon, the rest one row
MORE = "(more services)"  # ... that row's name
MAX_LIVE_BYTES = 32 << 20  # 13 reports of 200 services with 256-byte names, escaped, fit
WANTED = "live-wanted"
MAX_RECENT = 16  # more recent windows than any worker keeps (12): a file with more is refused
_HEADER = re.compile(
    rf"# {re.escape(FORMAT)} worker=(\d+) run=([0-9a-f]{{1,64}}) pid=(\d+) "
    r"taken_at=(\d{1,12}(?:\.\d{1,9})?)")


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


def forget(directory: Path, index: int) -> None:
    """The supervisor, when worker ``index`` died: its frozen figures are not served as live
    (the others say "missing" until its restart has published)."""
    for p in (metrics_file(directory, index), live_file(directory, index),
              *directory.glob(f"metrics-w{index}.prom.*.tmp"),
              *directory.glob(f"live-w{index}.json.*.tmp")):
        p.unlink(missing_ok=True)


def compact(report: dict) -> dict:
    """``report`` as a live file holds it: what the page shows, its per-service rows cut to the
    ``LIVE_SERVICES`` of most carbon (then energy, then name) and the rest summed in one row,
    ``MORE``, so a look at the page costs the same whatever a window's cardinality; endpoints,
    hosts and methodology, which the page does not show, left out."""
    gs = dict(report.get("green_summary") or {})
    energy, carbon = gs.get("per_service_energy_kwh") or {}, gs.get("per_service_carbon_kgco2eq") or {}
    services = sorted(set(energy) | set(carbon),
                      key=lambda n: (-carbon.get(n, 0.0), -energy.get(n, 0.0), n))
    if len(services) > LIVE_SERVICES:
        rest = set(services[LIVE_SERVICES:])
        for field in ("per_service_energy_kwh", "per_service_carbon_kgco2eq",
                      "per_service_requests"):
            values = gs.get(field) or {}
            kept = {n: v for n, v in values.items() if n not in rest}
            kept[MORE] = kept.get(MORE, 0) + sum(v for n, v in values.items() if n in rest)
            gs[field] = kept
        for field in ("per_service_energy_model", "per_service_region",
                      "per_service_measured_ratio"):
            gs[field] = {n: v for n, v in (gs.get(field) or {}).items() if n not in rest}
    gs["hosts"] = []
    return {**report, "green_summary": gs, "per_endpoint_io_ops": [], "methodology": {}}


def _valid_report(rep: object) -> dict:
    """A window report of a live file as the page reads it, or ``ValueError``."""
    from pydantic import ValidationError

    from schema.models import WindowReport

    if not isinstance(rep, dict):
        raise ValueError("a report is not an object")
    try:
        valid = WindowReport.model_validate(rep)
    except ValidationError as exc:
        raise ValueError(f"a report does not match the window report schema "
                         f"({exc.error_count()} errors)") from None
    gs, w = valid.green_summary, valid.window
    figures = [w.spans, w.io_ops, w.traces, *valid.counters.values(),
               *gs.per_service_energy_kwh.values(), *gs.per_service_carbon_kgco2eq.values(),
               *gs.per_service_requests.values(), gs.energy_kwh]
    if any(not (v >= 0) for v in figures):  # also NaN; no agent writes a negative figure
        raise ValueError("a report holds a negative figure")
    if len(gs.per_service_energy_kwh) > LIVE_SERVICES + 1:
        raise ValueError(f"a report lists over {LIVE_SERVICES + 1} services")
    return valid.model_dump(mode="json")


class _Refused(Exception):
    """A worker's figures left out of an answer: ``reason`` (a short key) and the message."""

    def __init__(self, reason: str, message: str, age: float | None = None) -> None:
        super().__init__(message)
        self.reason, self.age = reason, age


class _Families:
    """The merged families, as a collector ``generate_latest`` renders."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _exposed(fam: Metric) -> set[str]:
    """The names a family takes in an answer: its TYPE line's (as ``generate_latest`` renames
    counters and infos), its own and its samples'."""
    suffix = {"counter": "_total", "info": "_info"}.get(fam.type, "")
    return {fam.name + suffix, fam.name, *(s.name for s in fam.samples)}


class _Merge:
    """Families of several workers, each worker's taken whole or not at all."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}
        self.owner: dict[str, tuple[str, str]] = {}  # exposed name -> (family, type)

    def check(self, k: int, text: str, from_file: bool) -> list[Metric]:
        """Worker ``k``'s families, or ``_Refused`` saying what is at odds with the answer."""
        families: list[Metric] = []
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        owner: dict[str, tuple[str, str]] = {}
        n = 0
        parsed = text_string_to_metric_families(text)  # a generator: counted as it parses
        while True:
            try:
                fam = next(parsed, None)
            except Exception as exc:  # the parser raises ValueError and others on bad text
                raise _Refused("parse", f"its figures do not parse as Prometheus text "
                               f"({exc})") from None
            if fam is None:
                break
            families.append(fam)
            n += len(fam.samples)
            if n > MAX_SERIES:
                raise _Refused("size", f"its figures hold over {MAX_SERIES} samples")
            if from_file and fam.name in RESERVED:
                raise _Refused("clash", f"its figures hold the reserved family {fam.name}")
            if from_file and fam.type not in FILE_TYPES:
                raise _Refused("clash", f"its family {fam.name} is of type {fam.type}, which "
                               "no worker exposes")
            for exposed in _exposed(fam):
                mine = (fam.name, fam.type)
                known = self.owner.get(exposed) or owner.get(exposed)
                if known is not None and known != mine:
                    raise _Refused("clash", f"its family {fam.name} ({fam.type}) clashes with "
                                   f"{known[0]} ({known[1]}) in this answer")
                owner[exposed] = mine
            for s in fam.samples:
                if s.timestamp is not None:
                    raise _Refused("clash", f"its sample {s.name} carries a timestamp")
                if fam.name == "carbonspan_worker_info" and s.labels.get("worker") != str(k):
                    raise _Refused("clash", f"its carbonspan_worker_info names worker "
                                   f"{s.labels.get('worker')!r}")
                key = (s.name, tuple(sorted((a, b) for a, b in s.labels.items() if a != "worker")))
                if key in seen:
                    raise _Refused("clash", f"its series {s.name}{dict(key[1])} appears twice")
                seen.add(key)
        return families

    def add(self, k: int, families: list[Metric]) -> None:
        label = str(k)
        for fam in families:
            for exposed in _exposed(fam):
                self.owner[exposed] = (fam.name, fam.type)
            into = self.families.get(fam.name)
            if into is None:
                into = self.families[fam.name] = Metric(fam.name, fam.documentation, fam.type,
                                                        fam.unit)
            into.samples += [s._replace(labels={**s.labels, "worker": label}) for s in fam.samples]


class MetricsShare:
    """Worker ``index`` of ``count``: :meth:`start` publishes its figures for the others (every
    ``SHARE_S``, and the live page's while wanted), :meth:`exposition` answers a scrape for all
    of them, :meth:`peer_live` reads another worker's live-page figures."""

    def __init__(self, directory: Path, index: int, count: int, run: str,
                 own: Callable[[], bytes], on_error: Callable[[], None] | None = None) -> None:
        self.dir, self.index, self.count, self.run = directory, index, count, run
        self.own = own
        self.on_error = on_error  # counts a failed publish (carbonspan_worker_metrics_publish_errors)
        self.path = metrics_file(directory, index)
        self._warned: dict[tuple[int, str, str], float] = {}
        self._lock = threading.Lock()  # one publish at a time: a file never goes back in time
        self._last: tuple[bytes, float] | None = None  # the last published figures, their time
        self._failing = False  # the last publish failed
        self._kick = threading.Event()  # a scrape or a GET / asks the publisher now
        self._done = threading.Condition()  # ... and waits for its attempt (SCRAPE_WAIT_S)
        self._attempts = 0
        self._want_pending = False
        self.publish_errors = 0
        self.live_view: Callable[[], tuple[str, str, dict | None, list[dict]]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cycle_since: float | None = None  # monotonic start of the thread's disk work
        self._live_at: float | None = None  # time of the newest live answer given (see below)
        #: publish from the asking thread when no publisher thread runs (tests); a worker sets
        #: False (from_env): before start() its requests answer live and never write
        self.inline = True

    @classmethod
    def from_env(cls, raw: str, index: int, count: int, own: Callable[[], bytes],
                 on_error: Callable[[], None] | None = None) -> MetricsShare:
        directory, _, run = raw.rpartition(" ")
        if not directory or not re.fullmatch(r"[0-9a-f]{1,64}", run):
            raise ValueError(f"{ENV}={raw!r} is not set by a carbonspan supervisor; unset it")
        share = cls(Path(directory), index, count, run, own, on_error)
        share.inline = False
        return share

    # -- this worker's side ----------------------------------------------------------------
    def start(self) -> None:
        """Publish now, then every ``SHARE_S`` (and whenever a scrape asks) from a thread of its
        own, with the live page's figures every ``LIVE_S`` while wanted (:attr:`live_view`)."""
        self.publish()
        self._thread = threading.Thread(target=self._run, name="metrics-share", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(1.0)  # a publisher stuck on a hung disk is a daemon thread

    def _run(self) -> None:
        live_at = 0.0
        while not self._stop.is_set():
            self._kick.wait(SHARE_S)
            self._kick.clear()
            if self._stop.is_set():
                return
            self._cycle_since = time.monotonic()  # any of its disk work may hang: said so
            try:
                if self._want_pending:  # a GET / here: ask the others (the disk only from here)
                    self._want_pending = False
                    self._touch_wanted()
                self.publish()
                with self._done:
                    self._attempts += 1
                    self._done.notify_all()
                if self.live_view is not None and time.monotonic() - live_at >= LIVE_S - 0.05 \
                        and self.live_wanted():
                    live_at = time.monotonic()
                    try:
                        self.publish_live(*self.live_view())
                    except Exception:  # the live page must never stop the agent
                        log.exception("could not write this worker's live-page figures")
            finally:
                self._cycle_since = None

    def _count_error(self, reason: str, message: str, kind: str = "/metrics") -> None:
        self.publish_errors += 1
        if self.on_error is not None:
            self.on_error()
        self._warn(self.index, reason, message, kind)

    def _failed(self, reason: str, message: str) -> None:
        self._failing = True
        self._count_error(reason, message)

    def publish(self) -> tuple[bytes, float] | None:
        """Replace this worker's file with its figures now; the figures and their time (the
        last published ones if this write failed, None if none ever was). Never raises: a
        failure is logged (the first, then once a minute) and counted. Called by the
        ``metrics-share`` thread (and directly where none runs), never by a request."""
        with self._lock:
            try:
                body, taken = self.own(), time.time()
                head = (f"# {FORMAT} worker={self.index} run={self.run} pid={os.getpid()} "
                        f"taken_at={taken:.6f}\n").encode()
                replace_bytes(self.path, head + body)
                self._last, self._failing = (body, taken), False
            except OSError as exc:
                self._failed("write", f"could not write its figures to {self.path} ({exc}); "
                             "answers show its last published figures with "
                             "carbonspan_worker_metrics_publish_failing 1, and its live figures "
                             f"once those are {STALE_AFTER_S:.0f} s old")
            except Exception as exc:  # a metrics glitch must never stop the agent
                log.exception("could not take this worker's figures for /metrics")
                self._failed("own", f"could not take its figures ({exc})")
            return self._last

    def failing(self) -> bool:
        """True while this worker cannot publish: its last write failed, or its thread's disk
        work (a publish, the live page's files) has been under way for over ``SCRAPE_WAIT_S``."""
        since = self._cycle_since
        return self._failing or (since is not None
                                 and time.monotonic() - since > SCRAPE_WAIT_S)

    def _own_for_answer(self) -> tuple[bytes, float]:
        """This worker's figures for an answer.

        Its latest published ones, asked for now and waited for at most ``SCRAPE_WAIT_S``
        (not waited for while the thread hangs): what the others read, so no counter falls
        from one answer to the next. Its live figures only once its published ones are over
        ``STALE_AFTER_S`` old (the others leave them out from then on), or before it ever
        published; and after a live answer, live again until a publish taken later than it has
        landed, so a late snapshot never shows a counter lower than an answer already given.
        """
        if self._thread is None and self.inline:  # no publisher thread (tests): publish here
            self.publish()
        elif self._thread is not None and not self.failing():
            with self._done:
                target = self._attempts + 1
                self._kick.set()
                self._done.wait_for(lambda: self._attempts >= target, SCRAPE_WAIT_S)
        last, now = self._last, time.time()
        live_at = self._live_at
        if last is not None and now - last[1] <= STALE_AFTER_S \
                and (live_at is None or last[1] >= live_at):
            return last
        try:
            body = self.own()
        except Exception as exc:  # its figures cannot be taken: the last ones, if any
            log.exception("could not take this worker's figures for /metrics")
            self._warn(self.index, "own", f"could not take its figures ({exc})")
            return last if last is not None else (b"", now)
        self._live_at = now
        return body, now

    def want_live(self) -> None:
        """A ``GET /``: ask every worker for its live figures for the next ``WANTED_S`` (the
        publisher thread touches the file: a request never waits for the disk)."""
        if self._thread is None and self.inline:  # no publisher thread (tests): here
            self._touch_wanted()
            return
        self._want_pending = True  # before start(): the thread touches it once it runs
        self._kick.set()

    def _touch_wanted(self) -> None:
        path = self.dir / WANTED
        try:
            path.touch()
        except OSError as exc:
            self._warn(self.index, "want", f"could not ask the others for their live figures "
                       f"({path}: {exc}): the live page shows this worker's alone", "live page")

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
               "open": None if open_report is None else compact(open_report),
               "recent": [compact(r) for r in recent[-MAX_RECENT:]]}
        path = live_file(self.dir, self.index)
        try:
            replace_bytes(path, orjson.dumps(doc))
        except OSError as exc:
            self._count_error("write", f"could not write its live figures to {path} ({exc})",
                              "live page")

    # -- the others' side --------------------------------------------------------------------
    def _warn(self, worker: int, reason: str, why: str, kind: str = "/metrics") -> None:
        now = time.monotonic()
        key = (worker, kind, reason)
        if now - self._warned.get(key, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[key] = now
            log.warning("%s: worker %d: %s", kind, worker, why)

    def _peer(self, k: int, now: float) -> tuple[str, float]:
        """Worker ``k``'s exposition text and age, or ``_Refused``."""
        path = metrics_file(self.dir, k)
        try:
            raw = read_regular(path, MAX_METRICS_BYTES)
        except FileNotFoundError:
            raise _Refused("missing", f"has no figures ({path.name} is missing: not written yet, "
                           "or its worker died and has not published since its restart)") from None
        except (OSError, ValueError) as exc:
            raise _Refused("refused", f"figures refused ({path}: {exc})") from None
        head, newline, body = raw.partition(b"\n")
        m = _HEADER.fullmatch(head.decode("ascii", "replace")) if newline else None
        if m is None:
            raise _Refused("refused", f"figures refused ({path.name} does not start with a "
                           f"{FORMAT} header)")
        if int(m.group(1)) != k or m.group(2) != self.run:
            raise _Refused("refused", f"figures refused ({path.name} is not worker {k}'s of "
                           "this run)")
        taken = float(m.group(4))
        if taken > now + FUTURE_S:
            raise _Refused("future", f"figures refused ({path.name} is dated {taken - now:.0f} s "
                           "ahead: the clock stepped back?)")
        age = max(0.0, now - taken)
        if age > STALE_AFTER_S:
            raise _Refused("stale", f"figures are {age:.0f} s old (over {STALE_AFTER_S:.0f} s: the "
                           "worker hangs)", age)
        try:
            return body.decode("utf-8"), age
        except UnicodeDecodeError:
            raise _Refused("refused", f"figures refused ({path.name} is not UTF-8)", age) from None

    def exposition(self) -> bytes:
        """Every worker's last published figures (this one's published now), each sample
        labelled ``worker``, plus how whole the answer is."""
        own, own_taken = self._own_for_answer()
        now = time.time()
        merge = _Merge()
        ages: dict[int, float] = {self.index: max(0.0, now - own_taken)}
        up: dict[int, bool] = {}
        try:
            merge.add(self.index, merge.check(self.index, own.decode("utf-8"), False))
            up[self.index] = True
        except (_Refused, UnicodeDecodeError) as exc:  # its own figures: a bug, but say it
            self._warn(self.index, "own", f"its own figures could not be merged ({exc})")
            up[self.index] = False
        for k in range(self.count):
            if k == self.index:
                continue
            try:
                text, ages[k] = self._peer(k, now)
                merge.add(k, merge.check(k, text, True))
                up[k] = True
            except _Refused as exc:
                if exc.age is not None:
                    ages[k] = exc.age
                self._warn(k, exc.reason, f"{exc}: its samples are left out of this answer "
                           "(carbonspan_worker_metrics_up 0)")
                up[k] = False
            except Exception as exc:  # whatever a file holds, the answer is served
                log.exception("/metrics: worker %d's figures could not be read", k)
                self._warn(k, "error", f"figures could not be read ({exc!r}): left out")
                up[k] = False
        age = Metric("carbonspan_worker_metrics_age_seconds", "Seconds since this worker's "
                     "figures in this answer were taken (absent: its file's header could not be "
                     "read)", "gauge")
        upm = Metric("carbonspan_worker_metrics_up", "1 when all of this worker's figures are in "
                     "this answer; 0 when they are left out (missing, refused or stale)", "gauge")
        for k in range(self.count):
            if k in ages:
                age.add_sample(age.name, {"worker": str(k)}, ages[k])
            upm.add_sample(upm.name, {"worker": str(k)}, 1.0 if up.get(k) else 0.0)
        failm = Metric("carbonspan_worker_metrics_publish_failing", "1 while this worker "
                       "cannot publish its figures (a full, read-only or hung archive disk): the "
                       "answering worker knows it of itself, and of the others when their "
                       f"figures are over {PUBLISH_LATE_S:g} s old", "gauge")
        for k in range(self.count):
            late = self.failing() if k == self.index else ages.get(k, 0.0) > PUBLISH_LATE_S
            failm.add_sample(failm.name, {"worker": str(k)}, 1.0 if late else 0.0)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families([*merge.families.values(), age, upm, failm]))
        return generate_latest(registry)

    def peer_live(self, k: int, now: float | None = None) -> dict[str, Any]:
        """Worker ``k``'s live figures: ``{"worker", "agent_id", "state", "age", "open",
        "recent"}``, or ``{"worker", "age", "why"}`` when they are left out (logged)."""
        import orjson

        now = time.time() if now is None else now
        path = live_file(self.dir, k)
        age = None
        try:
            doc = orjson.loads(read_regular(path, MAX_LIVE_BYTES))
            if not isinstance(doc, dict) or doc.get("format") != LIVE_FORMAT:
                raise ValueError(f"not a {LIVE_FORMAT} document")
            if doc.get("worker") != k or doc.get("run") != self.run:
                raise ValueError(f"not worker {k}'s of this run")
            taken = doc.get("taken_at")
            if isinstance(taken, bool) or not isinstance(taken, int | float) or taken != taken:
                raise ValueError("taken_at is not a number")
            if taken > now + FUTURE_S:
                raise ValueError(f"dated {taken - now:.0f} s ahead (the clock stepped back?)")
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
            self._warn(k, "refused", f"figures refused ({path}: {exc}): left out of the page",
                       "live page")
        return {"worker": k, "age": age, "why": why}
