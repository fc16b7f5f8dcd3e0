"""``carbonspan agent --workers N``: N agent processes sharing the two ports (SO_REUSEPORT).

Why: one agent process is bound by the GIL at about 1.2 cores (issue 19); N processes, each
with its own WAL and chain, use N. The kernel spreads connections over the processes listening
on a port with ``SO_REUSEPORT`` (by a hash of the connection's addresses), so each connection,
and every request on it, is served by one worker.

Layout. With N = 1 nothing changes: one process, the chain ``<archive dir>/<agent_id>/``. With
N > 1 this process is a **supervisor** that serves nothing itself: worker k (0 ≤ k < N) is an
ordinary agent process whose agent id is ``<agent_id>-w<k>``, so it writes its own chain and WAL
in ``<archive dir>/<agent_id>-w<k>/`` (chains never interleave; the aggregator folds them all and
``carbonspan verify`` checks each). Every other setting (ports, bind, TLS, auth, limits,
windows, sources) is the supervisor's, so it applies to every worker, and ``[agent.signing]``
needs N = 1 (a signed chain's key is named after its one agent id). With a ``[sources]`` table
the supervisor polls the sources once for every worker and writes the signal log (one file, one
writer); the workers score with what it publishes (``agent/sources/shared.py``).

Ports. The supervisor binds each port first without ``SO_REUSEPORT`` (a port anyone holds is
refused by name, as with one agent), then holds a bound, never-listening ``SO_REUSEPORT`` socket
on it for its whole life: port 0 becomes a concrete free port once, and a restarted worker
binds the same port again. A socket that does not listen is given no connections.

Supervision (decided): the supervisor forwards SIGTERM/SIGINT to every worker and exits 0 once
all stopped cleanly (else 1). A worker that dies on its own is reported on stderr (which worker,
its pid, exit code or signal, how long it ran) and **restarted** on its own chain: the restart
is the kill -9 recovery (lock, archive tail, WAL replay), so what it acknowledged is archived.
Restarts back off (at once after a minute of life, else 1 s doubling to 30 s). A worker that
exits 2 (a configuration mistake) stops all and the supervisor exits 2; a worker that fails
before the first start is complete stops all with its exit code. Each worker's
``carbonspan_worker_restarts`` says how often its slot was restarted. If the supervisor itself
is killed, every worker gets SIGTERM from the kernel (``PR_SET_PDEATHSIG``) and drains.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.config import Config, ConfigError
from agent.daemon_config import AgentSettings, SignalLogSettings
from agent.metrics_share import ENV as METRICS_ENV
from agent.metrics_share import clear as clear_metrics
from agent.metrics_share import forget as forget_metrics
from agent.metrics_share import metrics_dir
from agent.sources.shared import ENV as SOURCES_ENV
from agent.sources.shared import hold_lock

log = logging.getLogger("carbonspan.agent")

#: set by the supervisor in each worker's environment: "k/n restarts supervisor-pid"
WORKER_ENV = "_CARBONSPAN_WORKER"
MAX_AUTO = 8  # the automatic count stops here: each worker holds ~100 MB and its own windows
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Worker:
    """Which worker this process is (None in a single agent)."""

    index: int
    count: int
    restarts: int = 0

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota
    (``cpu.max``, what a Kubernetes CPU limit sets), at least 1."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, n)


def worker_count(settings: AgentSettings) -> tuple[int, str]:
    """``(N, why)``: ``[agent] workers`` when set, else one per usable core (at most
    ``MAX_AUTO``), or 1 with ``[agent.signing]``."""
    if settings.workers:
        if settings.workers > 1 and settings.signing.key_file is not None:
            raise ConfigError(
                f"[agent] workers = {settings.workers} with [agent.signing] key_file: a signed "
                "chain's key is named after its one agent id, and each worker writes a chain of "
                "its own; run signed agents with workers = 1 (one per node or per port pair)")
        return settings.workers, "as configured"
    if settings.signing.key_file is not None:
        return 1, "automatic: 1 with [agent.signing]"
    cores = usable_cores()
    return min(cores, MAX_AUTO), f"automatic: {cores} usable core(s), at most {MAX_AUTO}"


def worker_id(agent_id: str, index: int) -> str:
    return f"{agent_id}-w{index}"


def worker_settings(settings: AgentSettings, worker: Worker) -> AgentSettings:
    """The settings of worker ``worker`` of this agent: its own agent id (so its own chain and
    WAL), the signal log only in worker 0."""
    wid = worker_id(settings.agent_id, worker.index)
    if len(wid) > 128:
        raise ConfigError(f"[agent] agent_id = {settings.agent_id!r} is too long for workers: "
                          f"worker chains are named {wid!r}, at most 128 characters")
    s = replace(settings, agent_id=wid)
    if worker.index:
        s = replace(s, signal_log=SignalLogSettings())
    return s


def worker_from_env(environ: dict[str, str] | os._Environ) -> Worker | None:
    """This process's worker identity, from the supervisor (None when it is no worker); also
    asks the kernel for SIGTERM should the supervisor die."""
    raw = environ.get(WORKER_ENV)
    if not raw:
        return None
    m = re.fullmatch(r"(\d+)/(\d+) (\d+) (\d+)", raw)
    if not m:
        raise ConfigError(f"{WORKER_ENV}={raw!r} is not set by a carbonspan supervisor; unset it")
    index, count, restarts, parent = (int(g) for g in m.groups())
    _die_with(parent)
    return Worker(index, count, restarts)


def _die_with(parent: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's SIGTERM is the only stop
        return
    if os.getppid() != parent:  # the supervisor died before prctl: stop now
        os.kill(os.getpid(), signal.SIGTERM)


def orphaned_chains(settings: AgentSettings, running: list[str]) -> list[str]:
    """Chains of this agent id that no process of this run will replay, with an unreplayed
    write-ahead log: left by a run with another worker count that was killed (a clean stop
    empties the log). Their acknowledged spans reach the archive only when they run again."""
    from agent.archive import LOCK_NAME, WAL_NAME

    root = settings.archive.dir
    pattern = re.compile(re.escape(settings.agent_id) + r"(-w\d+)?")
    out = []
    try:
        names = sorted(p.name for p in root.iterdir() if pattern.fullmatch(p.name))
    except OSError:
        return []
    for name in names:
        wal = root / name / WAL_NAME
        if name in running or not wal.is_file() or wal.stat().st_size == 0:
            continue
        if _locked(root / name / LOCK_NAME):  # another agent runs on it: its own business
            continue
        out.append(f"{root / name} holds a write-ahead log of {wal.stat().st_size} bytes "
                   "that this run will not replay")
    return out


def orphan_error(settings: AgentSettings, found: list[str]) -> str:
    return ("; ".join(found) + ": its acknowledged spans reach the archive only when that chain's "
            "agent runs again. Start once with the worker count that wrote it (--workers 1 "
            f"replays {settings.agent_id}/, --workers K replays {settings.agent_id}-w0 .. "
            f"-w<K-1>), stop it with SIGTERM once it is ready, then start with the count you "
            "want (docs/operations.md, Workers)")


def _locked(path: Path) -> bool:
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def reserve_port(bind: str, port: int, what: str) -> socket.socket:
    """A bound (never listening) ``SO_REUSEPORT`` socket holding ``port`` for the workers; a
    port already held by anyone is refused with the same words as a single agent's."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    if port:
        probe = socket.socket(family, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((bind, port))
        except OSError as exc:
            raise OSError(f"cannot listen for {what} on {bind}:{port} ({exc.strerror or exc}); "
                          "is the port in use?") from None
        finally:
            probe.close()
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((bind, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen for {what} on {bind}:{port} ({exc.strerror or exc}); "
                      "is the port in use?") from None
    return sock


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.ready = False
        self.started = 0.0
        self.restarts = 0
        self.backoff = 0.0
        self.restart_at: float | None = None
        self.pump: threading.Thread | None = None


class Supervisor:
    """Runs ``count`` workers of ``settings``; :meth:`run` blocks until they stopped."""

    def __init__(self, settings: AgentSettings, count: int, why: str, argv: list[str],
                 cfg: Config | None = None) -> None:
        self.settings, self.count, self.why, self.argv = settings, count, why, argv
        self.cfg = cfg
        self.hub: Any | None = None  # the one [sources] poller (agent/sources/shared.py)
        self.slots = [_Slot(k) for k in range(count)]
        # SimpleQueue: its put is reentrant, so the signal handler may wake the loop with it
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.stop_signal = 0
        self.out_lock = threading.Lock()

    def _say(self, line: str, err: bool = False) -> None:
        with self.out_lock:
            print(line, file=sys.stderr if err else sys.stdout, flush=True)

    def request_stop(self, signum: int, _frame: object = None) -> None:
        self.stop_signal = signum
        self.events.put(("signal", -1, ""))

    def run(self) -> int:
        s = self.settings
        held = [reserve_port(s.bind, s.grpc_port, "OTLP/gRPC"),
                reserve_port(s.bind, s.http_port, "OTLP/HTTP")]
        self.ports = [int(sock.getsockname()[1]) for sock in held]
        self.metrics_dir = metrics_dir(s.archive.dir, s.agent_id)
        self.run_token = secrets.token_hex(8)  # the workers' files name it: another run's refused
        lock = hold_lock(self.metrics_dir)  # before clearing: never a running agent's files
        clear_metrics(self.metrics_dir)  # no file of another run is read as this one's
        try:
            if self.cfg is not None:
                self.hub = start_hub(self.cfg, s, self.count)
            return self._run()
        finally:
            if self.hub is not None:  # after the workers stopped
                self.hub.stop()
            for sock in held:
                sock.close()
            try:
                clear_metrics(self.metrics_dir)
            except OSError as exc:
                log.warning("could not empty %s: %s", self.metrics_dir, exc)
            os.close(lock)

    def _run(self) -> int:
        for slot in self.slots:
            self._start(slot)
        code = self._until_ready()
        if code is not None:
            return self._stop_all(code)
        s = self.settings
        pids = ", ".join(f"{worker_id(s.agent_id, sl.index)} pid {sl.proc.pid}"  # type: ignore[union-attr]
                         for sl in self.slots)
        self._say(f"carbonspan agent {s.agent_id}: {self.count} workers ({self.why}: {pids}), "
                  f"OTLP/gRPC {s.bind}:{self.ports[0]}, OTLP/HTTP {s.bind}:{self.ports[1]}, "
                  f"archives {s.archive.dir / worker_id(s.agent_id, 0)} .. -w{self.count - 1}"
                  + ("" if self.hub is None else
                     f", [sources] polled here once for all workers ({self.hub.dir})"))
        while True:
            code = self._watch()
            if code is not None:
                return self._stop_all(code)

    def _start(self, slot: _Slot) -> None:
        env = dict(os.environ)
        env[WORKER_ENV] = f"{slot.index}/{self.count} {slot.restarts} {os.getpid()}"
        env.pop(SOURCES_ENV, None)
        env[METRICS_ENV] = f"{self.metrics_dir} {self.run_token}"  # one /metrics for all workers
        if self.hub is not None:
            env[SOURCES_ENV] = str(self.hub.dir)
        argv = [*self.argv, "--grpc-port", str(self.ports[0]), "--http-port", str(self.ports[1])]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        slot.proc, slot.ready, slot.started, slot.restart_at = proc, False, time.monotonic(), None
        slot.pump = threading.Thread(target=self._pump, args=(slot.index, proc), daemon=True)
        slot.pump.start()

    def _pump(self, index: int, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.events.put(("line", index, line.rstrip("\n"), proc))
        self.events.put(("eof", index, "", proc))

    def _next_event(self, timeout: float) -> tuple | None:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def _until_ready(self) -> int | None:
        """Wait for every worker's first start; an exit code when one failed or a stop came."""
        while not all(sl.ready for sl in self.slots):
            ev = self._next_event(0.2)
            if self.stop_signal:
                return 0
            if ev is not None and ev[0] == "line":
                self._line(ev)
            for sl in self.slots:
                rc = sl.proc.poll() if sl.proc is not None else None
                if rc is not None and not sl.ready:
                    self._say(f"carbonspan agent {self.settings.agent_id}: worker {sl.index} "
                              f"{_how(rc)} before it was ready; stopping the others", err=True)
                    return rc if rc > 0 else 1
        return None

    def _line(self, ev: tuple) -> None:
        _, index, line, proc = ev
        slot = self.slots[index]
        if proc is slot.proc and not slot.ready and " ready," in line:
            slot.ready = True
        self._say(line)

    def _watch(self) -> int | None:
        ev = self._next_event(0.2)
        if self.stop_signal:
            return 0
        if ev is not None and ev[0] == "line":
            self._line(ev)
        now = time.monotonic()
        for slot in self.slots:
            if slot.restart_at is not None:
                if now >= slot.restart_at:
                    slot.restarts += 1
                    self._start(slot)
                continue
            assert slot.proc is not None
            rc = slot.proc.poll()
            if rc is None:
                continue
            ran = now - slot.started
            wid = worker_id(self.settings.agent_id, slot.index)
            if rc == 2:
                self._say(f"carbonspan agent {self.settings.agent_id}: worker {slot.index} ({wid}, "
                          f"pid {slot.proc.pid}) {_how(rc)} (a configuration mistake); stopping "
                          "every worker", err=True)
                return 2
            try:  # its frozen figures must not be served as live (agent/metrics_share.py)
                forget_metrics(self.metrics_dir, slot.index)
            except OSError as exc:
                log.warning("could not remove worker %d's figures: %s", slot.index, exc)
            slot.backoff = 0.0 if ran >= 60 else min(30.0, max(1.0, 2 * slot.backoff))
            slot.restart_at = now + slot.backoff
            self._say(f"carbonspan agent {self.settings.agent_id}: worker {slot.index} ({wid}, pid "
                      f"{slot.proc.pid}) {_how(rc)} after {ran:.1f} s; restarting it on its chain "
                      f"{self.settings.archive.dir / wid} in {slot.backoff:.0f} s (restart "
                      f"{slot.restarts + 1}); its WAL replay archives what it acknowledged",
                      err=True)
        return None

    def _stop_all(self, code: int) -> int:
        """SIGTERM every worker still running, wait for them (bounded), the exit code."""
        live = [sl for sl in self.slots if sl.proc is not None and sl.proc.poll() is None]
        for sl in live:
            sl.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + self.settings.shutdown_timeout_s + 30
        worst = code
        for sl in self.slots:
            if sl.proc is None:
                continue
            try:
                rc = sl.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._say(f"carbonspan agent {self.settings.agent_id}: worker {sl.index} did not "
                          "stop in time; killing it (its WAL keeps what it acknowledged)", err=True)
                sl.proc.kill()
                rc = sl.proc.wait()
            if sl in live and rc != 0:
                self._say(f"carbonspan agent {self.settings.agent_id}: worker {sl.index} "
                          f"{_how(rc)} while stopping", err=True)
                worst = max(worst, rc if rc > 0 else 1)
        for sl in self.slots:  # the workers' last lines ("stopped cleanly")
            if sl.pump is not None:
                sl.pump.join(5)
        while not self.events.empty():
            ev = self.events.get()
            if ev[0] == "line":
                self._say(ev[2])
        if worst == 0 and self.stop_signal:
            self._say(f"carbonspan agent {self.settings.agent_id}: stopped cleanly "
                      f"({self.count} workers)")
        return worst


def start_hub(cfg: Config, settings: AgentSettings, count: int) -> Any | None:
    """With a ``[sources]`` table: the supervisor's one poller, started and its first readings
    published (``agent/sources/shared.py``); it writes the signal log too. None without one."""
    table = cfg.sections.get("sources")
    if not table:  # nothing to poll: worker 0 says so if a signal log is set
        return None
    from agent.sources.manager import SourceManager
    from agent.sources.shared import SignalHub, sources_dir

    hub = SignalHub(None, sources_dir(settings.archive.dir, settings.agent_id), count)
    recorder = None
    if settings.signal_log.path is not None:
        from agent.signal_recorder import SignalRecorder

        recorder = SignalRecorder(settings.signal_log.path,
                                  int(settings.signal_log.max_mb * 1024 * 1024),
                                  hub.count_signal_log)
    hub.manager = SourceManager.from_config(table, cfg.green, recorder=recorder)
    if recorder is not None:
        if not hub.manager.live:
            log.warning("[agent.signal_log] path is set but [sources] has no live-intensity "
                        "source (electricity_maps or grid_operator): nothing will be recorded")
        recorder.start()
        hub.recorder = recorder
        log.info("recording the live sources' intensity to the signal log %s",
                 settings.signal_log.path)
    try:
        hub.start()
    except BaseException:
        hub.stop()
        raise
    return hub


def supervise(settings: AgentSettings, count: int, why: str, argv: list[str],
              cfg: Config | None = None) -> int:
    sup = Supervisor(settings, count, why, argv, cfg)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, sup.request_stop)
        signal.signal(signal.SIGINT, sup.request_stop)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s %(name)s[{settings.agent_id} "
                        "supervisor]: %(message)s")
    return sup.run()
