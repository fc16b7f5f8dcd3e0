"""One ``[sources]`` stream for every worker of ``carbonspan agent --workers N``.

Why: each worker polling the ``[sources]`` itself puts N times the load on the upstream APIs
and meters, and two workers could score the same window with different live intensities
(different poll instants, different answers), so the same traffic would get different carbon
depending on which worker the kernel handed its connection. A measured kWh per op would also
be wrong: a meter's joules cover the whole service, but one worker sees only its share of the
service's I/O ops.

So with N > 1 and a ``[sources]`` table the **supervisor** polls (``SignalHub``: one
``SourceManager``, the same code and schedule as a single agent's) and the workers read what it
published (``SharedSignals``, which stands in for the ``SourceManager`` in the daemon). Both go
through files in ``<archive dir>/.<agent_id>.sources/``, each replaced atomically (written
beside it, then renamed):

- ``readings.json`` (supervisor -> workers), rewritten every ``PUBLISH_S``: the merged
  ``Signals`` (each reading with its source tag and ``taken_at``), host watts with the time they
  go stale, the sources' health, the signal log's counters, ``published_at`` and a ``seq``.
  Every worker reads the same file, so every worker scores with the same reading from the same
  poll; a restarted worker reads it at once. New readings carry ``effective_at`` (published +
  ``SWITCH_S``, longer than a worker takes to see the file) and the file keeps the readings
  before them: every worker uses the old ones until that instant and the new ones from it, so
  two workers scoring at the same moment use the same reading.
- ``ops-w<k>.json`` (worker k -> supervisor), rewritten every ``LINK_S`` while it changes: the
  worker's running I/O-op totals per service, its pid, a token of this life of it and the
  supervisor's ``run`` (a token in ``readings.json``). The supervisor adds each worker's
  increase (a new pid or life token, or totals that went back, count from zero: a restarted
  worker's totals start again, even under a reused pid) into the manager's op counter, so a
  meter's joules are divided by the ops of all workers. Totals of another ``run`` (a worker
  of a killed supervisor, still stopping, writing into the next run's directory) are refused
  and counted, and a worker refuses readings of a run other than the first it read.

A worker's link thread reads ``readings.json`` on change; the scoring path never does I/O.
When ``published_at`` is older than ``STALE_AFTER_S`` (the supervisor's publisher stopped), the
worker says so: a warning in its log, ``carbonspan_sources_publisher_up`` 0, one more
``carbonspan_sources_publisher_silent``, every source in its health (``/metrics``
``carbonspan_source_up``, the live page) not ok and stale with the reason. It keeps the last
readings as they are, so they age out exactly like a single agent's readings when its source
stops answering: a live intensity older than ``max_signal_age_s`` gives the profile/annual value
(``intensity_estimated``), a measured rate older than 3 intervals gives the proxy
(``measured_stale_spans``), host watts past their staleness give the declared watts.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent.carbon.signals import LiveIntensity, MeasuredRate, Signals
from agent.sources.opcounter import OpCounter

log = logging.getLogger("carbonspan.sources")

#: set by the supervisor in each worker's environment: the directory of the shared readings
ENV = "_CARBONSPAN_SOURCES_DIR"
FORMAT = "carbonspan-shared-signals/1"
READINGS = "readings.json"
PUBLISH_S = 1.0  # the supervisor rewrites readings.json this often (a heartbeat as well)
LINK_S = 0.5  # a worker looks for a new readings.json and writes its op totals this often
SWITCH_S = 1.0  # new readings are used from this long after they were published, in all workers
STALE_AFTER_S = 10.0  # a readings.json older than this: the publisher is silent
FIRST_READ_S = 10.0  # a worker waits at most this long at start for the first readings
MAX_FILE_BYTES = 8 << 20  # a shared file over this is refused unread (a foreign/runaway writer)


def sources_dir(archive_dir: Path, agent_id: str) -> Path:
    return archive_dir / f".{agent_id}.sources"


def ops_file(directory: Path, index: int) -> Path:
    return directory / f"ops-w{index}.json"


def read_regular(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """A shared file's bytes, or ``ValueError`` saying why not: not a regular file (a FIFO would
    block the reader for good; a symlink is not ours: ``OSError``), or over ``limit`` bytes (a
    foreign or runaway writer). Also the workers' metrics files (agent/metrics_share.py)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"over {limit} bytes")
    return b"".join(chunks)


def _read_doc(path: Path) -> Any:
    """A shared file's JSON, or ``ValueError`` saying why not: see :func:`read_regular`, not
    UTF-8 JSON, or nested too deep for the parser."""
    raw = read_regular(path)
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deep") from None


def _count(n: Any) -> int:
    """An op total: an int >= 0 (not a bool, a float or a string)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"op total {n!r} is not an integer >= 0")
    return n


def replace_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` beside ``path`` and rename it over ``path`` (readers see all or nothing);
    the temporary file (``<name>.<pid>.tmp``: one writer per file in a process) is never written
    through a link and is removed if the write fails. No fsync: these files are rebuilt after
    any restart. Also the workers' metrics and live-page files (agent/metrics_share.py)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # a failed write's leftover, or a symlink planted there
    # O_EXCL | O_NOFOLLOW: never written through a link to another file
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _replace(path: Path, doc: Mapping[str, Any]) -> None:
    replace_bytes(path, json.dumps(doc, separators=(",", ":")).encode())


def hold_lock(directory: Path) -> int:
    """Take ``directory`` for this supervisor's life (an open fd holding its ``lock``): a second
    supervisor of the same agent id on the same archive dir is refused, before it touches any
    file there. Also the workers' metrics directory (agent/workers.py)."""
    from agent.archive import ArchiveError

    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ArchiveError(f"{directory} is held by another carbonspan supervisor of this agent "
                           "id on this archive dir: give each agent its own --agent-id (or "
                           "--archive-dir)") from None
    return fd


# -- the snapshot on the wire ------------------------------------------------------------------
def encode_signals(sig: Signals, host_until: Mapping[str, float]) -> dict[str, Any]:
    """``Signals`` as JSON; floats round-trip exactly (shortest repr)."""
    return {
        "max_signal_age_s": sig.max_signal_age_s,
        "measured": {k: [m.kwh_per_op, m.tag, m.taken_at, m.interval_s]
                     for k, m in sorted(sig.measured.items())},
        "live_intensity": {k: [v.gco2_kwh, v.tag, v.taken_at, v.estimated, v.max_age_s]
                           for k, v in sorted(sig.live_intensity.items())},
        "host_watts": {h: [w, tag, host_until.get(h)] for h, (w, tag) in sorted(sig.host_watts.items())},
    }


def _num(x: Any, what: str, low: float = 0.0) -> float:
    """A finite number >= ``low`` (not a bool, a string or ``NaN``/``Infinity``)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ValueError(f"{what} {x!r} is not a number")
    v = float(x)  # an int past float's range raises OverflowError: refused as well
    if not math.isfinite(v) or v < low:
        raise ValueError(f"{what} {x!r} is not a finite number >= {low:g}")
    return v


def _row(v: Any, n: int, what: str) -> list[Any]:
    if not isinstance(v, list) or len(v) != n:
        raise ValueError(f"{what} {v!r} is not a list of {n}")
    return v


def _tag(x: Any, what: str) -> str:
    if not isinstance(x, str):
        raise ValueError(f"{what} tag {x!r} is not a string")
    return x


def decode_signals(doc: Mapping[str, Any]) -> tuple[Signals, dict[str, float]]:
    """``(Signals, host watts' stale-after times)``; ``ValueError`` (or ``TypeError``,
    ``KeyError``, ...) for a bad doc: every value a finite number >= 0 (times finite), every
    tag a string, every row its exact length, so no foreign or corrupt file is scored."""
    measured, live, hosts, until = {}, {}, {}, {}
    for k, v in doc["measured"].items():
        v = _row(v, 4, f"measured[{k!r}]")
        measured[str(k)] = MeasuredRate(_num(v[0], "kwh_per_op"), _tag(v[1], "measured"),
                                        _num(v[2], "taken_at", -math.inf),
                                        _num(v[3], "interval_s"))
    for k, v in doc["live_intensity"].items():
        v = _row(v, 5, f"live_intensity[{k!r}]")
        if not isinstance(v[3], bool):
            raise ValueError(f"estimated {v[3]!r} is not a bool")
        live[str(k)] = LiveIntensity(_num(v[0], "gco2_kwh"), _tag(v[1], "live"),
                                     _num(v[2], "taken_at", -math.inf), v[3],
                                     None if v[4] is None else _num(v[4], "max_age_s"))
    for h, v in doc["host_watts"].items():
        v = _row(v, 3, f"host_watts[{h!r}]")
        hosts[str(h)] = (_num(v[0], "watts"), _tag(v[1], "host_watts"))
        if v[2] is not None:
            until[str(h)] = _num(v[2], "stale_at", -math.inf)
    return (Signals(measured=measured, live_intensity=live, host_watts=hosts,
                    max_signal_age_s=_num(doc["max_signal_age_s"], "max_signal_age_s")), until)


# -- the supervisor's side -------------------------------------------------------------------------
class SignalHub:
    """The supervisor's one poller: runs ``manager`` and publishes what it has to the workers."""

    def __init__(self, manager: Any, directory: Path, workers: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.manager = manager
        self.dir = directory
        self.workers = workers
        self._clock = clock
        self._seq = 0
        self._signals: dict[str, Any] | None = None  # the readings published, encoded
        self._previous: dict[str, Any] | None = None  # the ones before, until effective_at
        self._effective_at = 0.0
        # worker -> ((pid, life), totals): a life is one SharedSignals (a new token at each start)
        self._seen: dict[int, tuple[tuple[int, str | None], dict[str, int]]] = {}
        self.run = secrets.token_hex(8)  # this supervisor's run: the workers echo it in their ops
        self._signal_log: dict[str, int] = {}  # "metric:label" -> count, for worker 0's /metrics
        self._count_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = None
        self.recorder: Any | None = None  # [agent.signal_log]: stopped after the pollers
        self.ops_unreadable = 0  # versions of ops files refused (each counted once)
        self._ops_refused: dict[int, tuple[int, int, int] | None] = {}  # worker -> refused stamp

    def open(self) -> None:
        """Take the directory (one supervisor per agent id and archive dir), clear old files."""
        self._lock_fd = hold_lock(self.dir)
        for p in self.dir.iterdir():  # a previous run's files: its workers are gone
            if p.name != "lock":
                p.unlink(missing_ok=True)

    def start(self) -> None:
        """Open the directory, start the sources (their first polls, as a single agent's), and
        publish the first readings before any worker starts."""
        self.open()
        self.manager.ops.before_read = self._collect_before_read  # a power poll's ops are fresh
        self.manager.start()
        self.publish()
        self._thread = threading.Thread(target=self._run, name="carbonspan-sources-hub",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.manager is not None:
            self.manager.stop()
        if self.recorder is not None:
            self.recorder.stop()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def count_signal_log(self, metric: str, label: str, n: int) -> None:
        """The signal recorder's counts (``agent.signal_recorder``), passed on to worker 0."""
        with self._count_lock:
            key = f"{metric}:{label}"
            self._signal_log[key] = self._signal_log.get(key, 0) + n

    def _run(self) -> None:
        while not self._stop.wait(PUBLISH_S):
            try:
                self.publish()
            except Exception:  # the workers see the silence; this says why
                log.exception("could not publish the [sources] readings to the workers")

    def _collect_before_read(self) -> None:
        try:
            self.collect_ops()
        except Exception:  # never fails the power source's poll; its ops come on the next one
            log.exception("could not take in the workers' I/O-op totals before a power poll")

    def collect_ops(self) -> None:
        """Add every worker's I/O ops since the last look to the manager's op counter."""
        with self._count_lock:
            self._collect_ops()

    def _collect_ops(self) -> None:
        for k in range(self.workers):
            stamp = None
            try:
                st = os.stat(ops_file(self.dir, k), follow_symlinks=False)
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
                if stamp == self._ops_refused.get(k):
                    continue  # the file refused already, unchanged: counted once
                doc = _read_doc(ops_file(self.dir, k))
                pid = doc["pid"]
                if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
                    raise ValueError(f"pid {pid!r}")
                totals = {str(s): _count(n) for s, n in doc["totals"].items()}
                if doc.get("run") != self.run:  # a worker of a previous supervisor, still stopping
                    raise ValueError(f"written for supervisor run {doc.get('run')!r}, this one is "
                                     f"{self.run!r}")
                life = (pid, str(doc.get("life")))
            except FileNotFoundError:
                continue
            except Exception as exc:  # any bad file (even one deep enough to recurse) is refused
                self._ops_refused[k] = stamp
                if self.ops_unreadable % 60 == 0:  # the first, then one per 60 versions
                    log.warning("worker %d's I/O-op totals %s are unreadable (%s; %d so far): its "
                                "ops since are counted once the file reads again", k,
                                ops_file(self.dir, k), exc, self.ops_unreadable + 1)
                self.ops_unreadable += 1
                continue
            last_life, last = self._seen.get(k, (life, {}))
            if last_life != life or any(totals.get(s, -1) < n for s, n in last.items()):
                last = {}  # a new life of the worker (a new pid or token, or totals went back)
            delta = {s: n - last.get(s, 0) for s, n in totals.items() if n > last.get(s, 0)}
            if delta:
                self.manager.ops.add(delta)
            self._seen[k] = (life, totals)

    def publish(self) -> None:
        """Replace ``readings.json``. The new state (readings, the ones before, effective_at)
        is kept only once the file is written: a failed write (a full disk) publishes nothing,
        so the next write still gives the workers a full ``SWITCH_S`` to see the change."""
        self.collect_ops()
        now = self._clock()
        signals = encode_signals(self.manager.current(), self.manager.host_watts_until())
        previous, effective_at = self._previous, self._effective_at
        if signals != self._signals:  # new readings: every worker switches at effective_at
            previous = self._signals
            effective_at = now if previous is None else now + SWITCH_S
        elif effective_at > now + SWITCH_S:  # the clock went back past the switch
            log.warning("the clock went back %.0f s: the [sources] readings published last take "
                        "effect in %.0f s, not at the old instant", effective_at - SWITCH_S - now,
                        SWITCH_S)
            effective_at = now + SWITCH_S
        with self._count_lock:
            seq = self._seq + 1
            counts = dict(self._signal_log)
        _replace(self.dir / READINGS, {
            "format": FORMAT, "run": self.run, "seq": seq, "published_at": now,
            "publisher_pid": os.getpid(), "signals": signals, "previous": previous,
            "effective_at": effective_at, "health": self.manager.health(), "signal_log": counts,
            "ops_unreadable": self.ops_unreadable, "ops_totals": self.manager.ops.totals(),
        })
        self._seq, self._signals, self._previous, self._effective_at = (seq, signals, previous,
                                                                        effective_at)


# -- a worker's side ---------------------------------------------------------------------------------
class SharedSignals:
    """What a worker's daemon uses in place of a ``SourceManager``: ``ops``, ``current()``,
    ``health()``, ``start()``, ``stop()``; the readings are the supervisor's."""

    def __init__(self, directory: Path, index: int, metrics: Any | None = None,
                 clock: Callable[[], float] = time.time, signal_log: bool = False) -> None:
        self.dir = directory
        self.index = index
        self.metrics = metrics
        self.ops = OpCounter()
        self._clock = clock
        self._signal_log = signal_log  # worker 0 shows the supervisor's signal-log counters
        # (Signals, host watts' stale-after times): the new readings from effective_at on,
        # the ones before until then (the switch at one instant in every worker)
        self._new: tuple[Signals, dict[str, float]] = (Signals(), {})
        self._old: tuple[Signals, dict[str, float]] | None = None
        self._effective_at = 0.0
        self._health: dict[str, dict[str, Any]] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._refused: tuple[int, int, int] | None = None  # the file last refused, not re-read
        self._published_at: float | None = None
        self.seq = 0
        self.silent = False  # the publisher is silent (STALE_AFTER_S)
        self.silences = 0
        self.unreadable = 0  # readings.json versions refused
        self.ops_write_failures = 0
        self.late = 0  # files read after the switch they carried (scored with older readings)
        self._counts_seen: dict[str, int] = {}
        self._ops_written: dict[str, int] | None = None
        self.life = secrets.token_hex(8)  # this worker life's token in its ops (pids get reused)
        self.run: str | None = None  # the supervisor run of the first readings read: pinned
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.live: list[Any] = []  # (the daemon's signal-log warning looks at a manager's)

    def start(self, first_read_s: float = FIRST_READ_S) -> None:
        deadline = time.monotonic() + first_read_s
        while not self.refresh() and time.monotonic() < deadline:
            self._stop.wait(0.05)
        if self.seq == 0:
            log.warning("no [sources] readings from the supervisor in %s after %.0f s: scoring "
                        "without live signals until they come", self.dir / READINGS, first_read_s)
        self._thread = threading.Thread(target=self._run, name="carbonspan-sources-link",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._write_ops_once()

    def _write_ops_once(self) -> None:
        try:  # one failing must not stop the rest: a worker that cannot write its ops
            self.write_ops()  # still reads the readings every other worker uses, and stops
        except Exception as exc:
            self.ops_write_failures += 1
            log.warning("could not write this worker's I/O-op totals %s (%s; %d so far)",
                        ops_file(self.dir, self.index), exc, self.ops_write_failures)

    def _run(self) -> None:
        while not self._stop.wait(LINK_S):
            self._write_ops_once()
            try:
                self.refresh()
            except Exception:
                log.exception("the link to the supervisor's [sources] readings failed once")

    def write_ops(self) -> None:
        totals = self.ops.totals()
        if totals != self._ops_written:
            _replace(ops_file(self.dir, self.index), {"pid": os.getpid(), "life": self.life,
                                                      "run": self.run, "totals": totals})
            self._ops_written = totals

    def refresh(self) -> bool:
        """Read ``readings.json`` when it changed; judge the publisher's silence. True when a
        new snapshot was taken."""
        path = self.dir / READINGS
        fresh = False
        stamp = None
        try:
            st = path.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._stamp and stamp != self._refused:
                doc = _read_doc(path)
                if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                    raise ValueError(f"not a {FORMAT} document")
                new = decode_signals(doc["signals"])
                old = None if doc.get("previous") is None else decode_signals(doc["previous"])
                run = doc.get("run")
                if not isinstance(run, str) or (self.run is not None and run != self.run):
                    raise ValueError(f"published by supervisor run {run!r}, not this worker's "
                                     f"{self.run!r} (a new supervisor: this worker is stopping)")
                seq = doc["seq"]
                if isinstance(seq, bool) or not isinstance(seq, int):
                    raise ValueError(f"seq {seq!r}")
                health = {str(k): dict(v) for k, v in doc["health"].items()}
                published = _num(doc["published_at"], "published_at", -math.inf)
                effective = _num(doc.get("effective_at") or 0.0, "effective_at", -math.inf)
                counts = doc.get("signal_log") or {}
                ops_refused = doc.get("ops_unreadable", 0)
                if isinstance(ops_refused, bool) or not isinstance(ops_refused, int):
                    raise ValueError(f"ops_unreadable {ops_refused!r}")
                if not all(isinstance(n, int) for n in counts.values()):
                    raise ValueError("signal_log counts are not integers")
                self._judge_switch(new, old, effective, seq)
                with self._lock:
                    self.run = run
                    self._new, self._old = new, old
                    self._effective_at = effective
                    self._health = health
                    self._published_at = published
                    self.seq = seq
                self._stamp = stamp
                self._count_signal_log(counts)
                if self.index == 0 and self.metrics is not None:  # one worker shows them
                    self.metrics.record_ops_refused(ops_refused)
                fresh = True
        except FileNotFoundError:
            pass
        except Exception as exc:  # a bad file (any way it is bad) is refused, once per version
            self._refused = stamp
            self.unreadable += 1
            log.warning("the supervisor's [sources] readings %s are refused (%s); keeping "
                        "the last ones", path, exc)
        self._judge()
        return fresh

    def _judge_switch(self, new: tuple[Signals, dict[str, float]],
                      old: tuple[Signals, dict[str, float]] | None, effective: float,
                      seq: int) -> None:
        """A worker that reads a file later than ``SWITCH_S`` after it was published (its link
        thread stalled) has scored with readings the other workers no longer used: say so."""
        if self.seq == 0:
            return
        now = self._clock()
        should = new if old is None or now >= effective else old
        with self._lock:
            had = self._new if self._old is None or now >= self._effective_at else self._old
        if had[0] != should[0]:
            self.late += 1
            log.warning("this worker read the supervisor's [sources] readings late (seq %d -> %d, "
                        "%s after the switch the other workers made): it scored with the readings "
                        "before meanwhile", self.seq, seq,
                        f"{now - effective:.1f} s" if should is new else "over a second")

    def _judge(self) -> None:
        now = self._clock()
        # either way: readings "published" 10 s in the future (the clock stepped back since)
        # are no sign of life; a live publisher rewrites them on the stepped clock within 1 s
        silent = self._published_at is None or abs(now - self._published_at) > STALE_AFTER_S
        if silent and not self.silent and self._published_at is not None:
            self.silences += 1
            log.warning("the supervisor has published no [sources] readings for %.0f s (%s): "
                        "keeping the last readings, which go stale as a single agent's do when "
                        "its sources stop answering", now - self._published_at, self.dir / READINGS)
        elif not silent and self.silent:
            log.info("the supervisor's [sources] readings come again (seq %d)", self.seq)
        self.silent = silent
        if self.metrics is not None:
            self.metrics.record_publisher(
                not silent, None if self._published_at is None else now - self._published_at,
                self.silences, self.unreadable, self.late)

    def _count_signal_log(self, counts: Mapping[str, int]) -> None:
        if not self._signal_log or self.metrics is None:
            return
        for key, n in counts.items():
            seen = self._counts_seen.get(key, 0)
            if n > seen:
                metric, _, label = key.partition(":")
                self.metrics.count_signal_log(metric, label, n - seen)
            self._counts_seen[key] = n

    def current(self) -> Signals:
        """The supervisor's readings (no I/O): the new ones from their ``effective_at`` on, the
        ones before until then; host watts past their staleness dropped."""
        now = self._clock()
        with self._lock:
            sig, until = self._new if self._old is None or now >= self._effective_at else self._old
        if sig.host_watts and until:
            gone = [h for h in sig.host_watts if h in until and now > until[h]]
            if gone:
                sig = Signals(measured=sig.measured, live_intensity=sig.live_intensity,
                              host_watts={h: w for h, w in sig.host_watts.items() if h not in gone},
                              max_signal_age_s=sig.max_signal_age_s)
        return sig

    def health(self) -> dict[str, dict[str, Any]]:
        """The supervisor's sources' health; with a silent publisher every source is not ok and
        stale, and says why."""
        with self._lock:
            health = {k: dict(v) for k, v in self._health.items()}
            published = self._published_at
        if self.silent:
            age = "never" if published is None else f"{self._clock() - published:.0f} s ago"
            for h in health.values():
                h.update(ok=False, stale=True,
                         last_error=f"the supervisor's publisher is silent (last readings {age})")
        return health

