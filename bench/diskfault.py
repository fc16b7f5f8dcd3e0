"""The disk-fault guarantee as a campaign: nothing acknowledged is lost, whatever the disk does.

A real ``carbonspan agent`` on loopback (0.3 s windows, a fresh archive per fault, fixed ports
across its lives) is fed by client threads sending 64-span OTLP requests (``bench/workload.py``)
over gRPC and over HTTP (protobuf), while its disk misbehaves in one of these ways, each made
with what the OS or the agent's testing-only settings offer:

- ``wal_full``: the disk fills up under the write-ahead log (``RLIMIT_FSIZE``: writes past the
  limit fail with EFBIG, as on a full disk; 60 s windows, so the log fills first); stopped
  with SIGTERM, restarted with room;
- ``archive_full``: after a first clean life, the agent restarts with ``RLIMIT_FSIZE`` 1 KiB
  above its window file's size, so the next window line cannot be written, then the log fills
  too; stopped (exit 1: the open window cannot be archived), restarted with room;
- ``archive_readonly``: the chain directory turns read-only under load (``chmod 555``; as root
  the agent runs without ``CAP_DAC_OVERRIDE`` so the mode binds it), so windows cannot rotate
  into a new file (``max_size_mb`` 0.01); made writable again after a while;
- ``frozen``: the disk freezes (``wal_stall_file``: every group commit waits before its
  ``fdatasync`` while the file exists) for longer than the 4 s commit wait, then thaws;
- ``slow``: every group commit takes ``wal_fsync_delay_ms`` longer, with a queue of 4;
- ``kill9_frozen``: the disk freezes, the agent is killed with SIGKILL during the freeze, the
  disk thaws and the agent is restarted on the same archive.

Each fault ends with a clean stop. Then ``carbonspan verify`` must pass on its chain and the
archived spans must lie between the acknowledged spans and the acknowledged + the spans of
requests that were refused or failed (never acknowledged, so their clients would retry
them). It prints one row per fault and the total, and exits 1 if any acknowledged span is
lost, a chain fails, more is archived than was sent, or an agent life ends with an exit code
the fault does not explain. Not a timed benchmark: it prints what it counted.

    python -m bench.diskfault --seed 1
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.kill9 import EXPORT, SPANS, _free_port
from schema.archive import BODY_KEY, window_files

REPO = Path(__file__).resolve().parents[1]
AGENT_ID = "df"
WINDOW_S = "0.3"
FSIZE = 48 * 1024  # RLIMIT_FSIZE of the wal_full life: about 30 WAL records of 64 spans


class Clients:
    """gRPC and HTTP client threads sending while ``up`` is set; each request either
    acknowledged (its spans count as ``acked``) or not (``failed``: refused, timed out, reset)."""

    def __init__(self, grpc_port: int, http_port: int, grpc_threads: int,
                 http_threads: int) -> None:
        import grpc

        from bench.workload import make_request_bytes

        self.bodies = [make_request_bytes(SPANS, seed=s) for s in range(8)]
        self.up, self.stop = threading.Event(), threading.Event()
        self.lock = threading.Lock()
        self.acked = self.failed = 0
        self.why: collections.Counter[str] = collections.Counter()  # what the failures were
        self.url = f"http://127.0.0.1:{http_port}/v1/traces"
        self.channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        self.export = self.channel.unary_unary(EXPORT, request_serializer=None,
                                               response_deserializer=None)
        self.error = grpc.RpcError
        self.threads = [threading.Thread(target=self._run, args=(k, self._grpc))
                        for k in range(grpc_threads)]
        self.threads += [threading.Thread(target=self._run, args=(k, self._http))
                         for k in range(http_threads)]
        for t in self.threads:
            t.start()

    def _grpc(self, body: bytes) -> str | None:
        """None when acknowledged, else what the client got."""
        try:
            self.export(body, timeout=10, wait_for_ready=True)
            return None
        except self.error as exc:
            return f"gRPC {exc.code().name}"

    def _http(self, body: bytes) -> str | None:
        req = urllib.request.Request(self.url, data=body,
                                     headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                resp.read()
                return None if resp.status == 200 else f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:  # 429, 503, ...
            return f"HTTP {exc.code}"
        except OSError as exc:  # refused while restarting, reset, timed out
            return f"HTTP {type(exc).__name__}"

    def _run(self, k: int, send: Callable[[bytes], str | None]) -> None:
        i = k
        while not self.stop.is_set():
            if not self.up.wait(0.05):
                continue
            why = send(self.bodies[i % len(self.bodies)])
            ok = why is None
            with self.lock:
                if why is None:
                    self.acked += SPANS
                else:
                    self.failed += SPANS
                    self.why[why] += 1
            if not ok:
                time.sleep(0.05)  # a client backs off
            i += 1

    def counts(self) -> tuple[int, int, dict[str, int]]:
        with self.lock:
            return self.acked, self.failed, dict(self.why)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        self.channel.close()


# A limit the agent must start under is applied by a small Python process that then execs
# the agent, not by preexec_fn: preexec_fn makes subprocess fork() instead of vfork, and in
# this process (gRPC clients running) gRPC's fork handler restarts its poller in the child,
# whose epoll descriptor close_fds then closes: the child aborts (exit -6, "epoll_wait error:
# Bad file descriptor") before it execs, now and then.
_EXEC_LIMITED = r"""
import ctypes, os, resource, sys
what, value, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
if what == "fsize":
    resource.setrlimit(resource.RLIMIT_FSIZE, (value, value))
elif what == "no-dac-override" and os.geteuid() == 0:
    # as root: drop CAP_DAC_OVERRIDE from the bounding set before exec, so the agent (still
    # uid 0) is bound by file modes like any service user
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(24, 1, 0, 0, 0) != 0:  # PR_CAPBSET_DROP, CAP_DAC_OVERRIDE
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE)")
os.execv(argv[0], argv)
"""
NO_DAC_OVERRIDE = ("no-dac-override", 0)


def _fsize(limit: int) -> tuple[str, int]:
    """RLIMIT_FSIZE for the agent: writes past ``limit`` bytes fail with EFBIG."""
    return ("fsize", limit)


class Agent:
    """One life of the agent; stderr kept in memory (a file would fall under RLIMIT_FSIZE)."""

    def __init__(self, root: Path, grpc_port: int, http_port: int, env: dict[str, str],
                 limit: tuple[str, int] | None = None, window_s: str = WINDOW_S) -> None:
        full = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
        full.update(env)
        self.http = f"http://127.0.0.1:{http_port}"
        cmd = [sys.executable, "-m", "carbonspan", "agent", "--archive-dir", str(root),
               "--agent-id", AGENT_ID, "--grpc-port", str(grpc_port), "--http-port",
               str(http_port), "--window-seconds", window_s, "--workers", "1"]
        if limit is not None:
            cmd = [sys.executable, "-c", _EXEC_LIMITED, limit[0], str(limit[1]), *cmd]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=full, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "OTLP/gRPC" not in line:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"agent did not start (exit {self.proc.returncode}): "
                               f"{''.join(self.log[-5:])}")

    def probe(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.http + path, timeout=3) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def logged(self, text: str) -> bool:
        return any(text in line for line in list(self.log))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def kill9(self) -> int:
        self.proc.kill()
        return self.proc.wait(timeout=30)


def _until(pred: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


@dataclass
class Run:
    """What one fault's lives did: exit codes, and what the probes said during the fault."""

    exits: list[int] = field(default_factory=list)
    expected: list[set[int]] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)

    def ended(self, code: int, allowed: set[int]) -> None:
        self.exits.append(code)
        self.expected.append(allowed)


class Campaign:
    def __init__(self, seed: int, scale: float, grpc_threads: int, http_threads: int) -> None:
        self.rng = random.Random(seed)
        self.scale = scale
        self.grpc_threads, self.http_threads = grpc_threads, http_threads

    def hold(self, lo: float, hi: float) -> None:
        time.sleep(self.rng.uniform(lo, hi) * self.scale)

    # -- the faults: each drives the agent's lives and says what it saw -------------------
    def wal_full(self, start: Callable[..., Agent], clients: Clients, run: Run) -> None:
        agent = start(limit=_fsize(FSIZE), window_s="60")
        clients.up.set()
        if not _until(lambda: agent.probe("/healthz") == 503, 20):
            run.seen.append("the WAL never filled")
        run.seen.append(f"/healthz {agent.probe('/healthz')}, /readyz {agent.probe('/readyz')}")
        self.hold(0.3, 1.0)  # clients go on being refused
        clients.up.clear()
        run.ended(agent.stop(), {0})
        self._clean_life(start(), clients, run)

    def archive_full(self, start: Callable[..., Agent], clients: Clients, run: Run) -> None:
        self._clean_life(start(), clients, run)
        (window_file,) = window_files(self.root / AGENT_ID)[-1:]
        agent = start(limit=_fsize(window_file.stat().st_size + 1024))
        clients.up.set()
        if _until(lambda: agent.logged("could not archive the window"), 20):
            run.seen.append("window close failed")
        if _until(lambda: agent.probe("/healthz") == 503, 20):
            run.seen.append("then the WAL: /healthz 503")
        self.hold(0.2, 0.6)
        clients.up.clear()
        run.ended(agent.stop(), {1})  # the open window cannot be archived on the way out
        self._clean_life(start(), clients, run)

    def archive_readonly(self, start: Callable[..., Agent], clients: Clients,
                         run: Run) -> None:
        env = {"CARBONSPAN_ARCHIVE_MAX_SIZE_MB": "0.01"}  # a new window file every ~2 lines
        agent = start(env=env, limit=NO_DAC_OVERRIDE)
        chain = self.root / AGENT_ID
        clients.up.set()
        self.hold(0.5, 1.0)
        chain.chmod(0o555)
        try:
            if _until(lambda: agent.logged("could not archive the window"), 10):
                run.seen.append("window close failed")
            if _until(lambda: agent.probe("/readyz") == 503, 5):
                run.seen.append("/readyz 503 while the archive fails")
            else:
                run.seen.append(f"/readyz {agent.probe('/readyz')}")
            self.hold(1.0, 3.0)
        finally:
            chain.chmod(0o755)
        files = len(window_files(chain))
        if _until(lambda: len(window_files(chain)) > files, 20):
            run.seen.append("archived again by the retry")
        if _until(lambda: agent.probe("/readyz") == 200, 20):
            run.seen.append("then /readyz 200")
        clients.up.clear()
        run.ended(agent.stop(), {0})

    def frozen(self, start: Callable[..., Agent], clients: Clients, run: Run) -> None:
        stall = self.root.parent / "wal.stall"
        agent = start(env={"CARBONSPAN_ARCHIVE_WAL_STALL_FILE": str(stall)})
        clients.up.set()
        self.hold(0.5, 1.0)
        stall.touch()
        try:
            if _until(lambda: agent.probe("/readyz") == 503, 10):
                run.seen.append(f"/readyz 503, /healthz {agent.probe('/healthz')}")
            self.hold(4.5, 6.0)  # past the 4 s commit wait: requests answered UNAVAILABLE
        finally:
            stall.unlink()
        if _until(lambda: agent.probe("/readyz") == 200, 10):
            run.seen.append("thawed: /readyz 200")
        self.hold(0.5, 1.0)
        clients.up.clear()
        run.ended(agent.stop(), {0})

    def slow(self, start: Callable[..., Agent], clients: Clients, run: Run) -> None:
        delay = self.rng.choice([150, 300, 600])
        agent = start(env={"CARBONSPAN_ARCHIVE_WAL_FSYNC_DELAY_MS": str(delay),
                           "CARBONSPAN_QUEUE_SIZE": "4"})
        clients.up.set()
        self.hold(2.0, 3.0)
        clients.up.clear()
        run.seen.append(f"fsync +{delay} ms, /readyz {agent.probe('/readyz')}")
        run.ended(agent.stop(), {0})

    def kill9_frozen(self, start: Callable[..., Agent], clients: Clients, run: Run) -> None:
        stall = self.root.parent / "wal.stall"
        agent = start(env={"CARBONSPAN_ARCHIVE_WAL_STALL_FILE": str(stall)})
        clients.up.set()
        self.hold(0.5, 1.0)
        stall.touch()
        try:
            self.hold(0.5, 5.0)  # before or after the 4 s commit wait
            clients.up.clear()
            run.ended(agent.kill9(), {-signal.SIGKILL})
        finally:
            stall.unlink()
        run.seen.append("killed while frozen")
        self._clean_life(start(), clients, run)

    def _clean_life(self, agent: Agent, clients: Clients, run: Run) -> None:
        """A life on a healthy disk: the clients' next requests, then SIGTERM."""
        clients.up.set()
        self.hold(0.5, 1.0)
        clients.up.clear()
        run.ended(agent.stop(), {0})

    # -- one fault, start to finish --------------------------------------------------------
    def run(self, name: str) -> dict:
        grpc_port, http_port = _free_port(), _free_port()
        with tempfile.TemporaryDirectory(prefix=f"carbonspan-diskfault-{name}-") as tmp:
            self.root = Path(tmp) / "archives"
            self.root.mkdir()
            run = Run()
            lives: list[Agent] = []

            def start(env: dict[str, str] | None = None,
                      limit: tuple[str, int] | None = None,
                      window_s: str = WINDOW_S) -> Agent:
                agent = Agent(self.root, grpc_port, http_port, env or {}, limit, window_s)
                lives.append(agent)
                agent.wait_ready()
                return agent

            clients = Clients(grpc_port, http_port, self.grpc_threads, self.http_threads)
            try:
                getattr(self, name)(start, clients, run)
            finally:
                clients.up.clear()
                clients.close()
                for agent in lives:
                    if agent.proc.poll() is None:
                        agent.proc.kill()
                        agent.proc.wait(timeout=30)
            acked, failed, why = clients.counts()
            verify = subprocess.run(
                [sys.executable, "-m", "carbonspan", "verify", str(self.root / AGENT_ID)],
                cwd=REPO, capture_output=True, text=True, timeout=120)
            from agent.archive import read_records

            records = read_records(self.root / AGENT_ID)
            archived = sum(r[BODY_KEY]["window"]["spans"] for _, r in records if r)
            unreadable = sum(1 for _, r in records if r is None)
        exits_ok = all(code in allowed for code, allowed in zip(run.exits, run.expected, strict=True))
        return {"fault": name, "lives": len(lives), "acked": acked, "failed": failed, "why": why,
                "archived": archived, "lines": len(records), "unreadable": unreadable,
                "verify": verify.returncode, "verify_out": verify.stdout + verify.stderr,
                "exits": run.exits, "exits_ok": exits_ok, "seen": run.seen}


FAULTS = ("wal_full", "archive_full", "archive_readonly", "frozen", "slow", "kill9_frozen")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python -m bench.diskfault --seed 1   (all faults, about 1-2 minutes); "
               "python -m bench.diskfault --faults frozen,kill9_frozen --scale 0.5")
    ap.add_argument("--seed", type=int, default=1, help="seeds the moments and durations")
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help=f"comma-separated, from: {', '.join(FAULTS)} (default: all)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies the times held under load (the frozen disk's freeze is "
                         "never shorter than the 4 s commit wait at 1.0)")
    ap.add_argument("--grpc-clients", type=int, default=3, help="gRPC client threads")
    ap.add_argument("--http-clients", type=int, default=2, help="OTLP/HTTP client threads")
    args = ap.parse_args(argv)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        ap.error(f"unknown fault(s) {', '.join(unknown) or '(none given)'}; "
                 f"choose from {', '.join(FAULTS)}")
    campaign = Campaign(args.seed, args.scale, args.grpc_clients, args.http_clients)
    t0 = time.monotonic()
    results = []
    for name in faults:
        r = campaign.run(name)
        results.append(r)
        print(f"{name}: done ({len(results)}/{len(faults)})", file=sys.stderr, flush=True)
    head = ("fault", "lives", "acknowledged", "never acked", "archived", "lost", "beyond acked",
            "lines", "verify", "exits", "seen")
    rows = []
    total_lost = total_acked = total_archived = 0
    ok = True
    for r in results:
        lost = max(0, r["acked"] - r["archived"])
        beyond = r["archived"] - r["acked"]
        good = (lost == 0 and beyond <= r["failed"] and r["verify"] == 0
                and r["unreadable"] == 0 and r["exits_ok"])
        ok &= good
        total_lost += lost
        total_acked += r["acked"]
        total_archived += r["archived"]
        rows.append((r["fault"], str(r["lives"]), f"{r['acked']:,}", f"{r['failed']:,}",
                     f"{r['archived']:,}", str(lost), f"{beyond:,}", str(r["lines"]),
                     "OK" if r["verify"] == 0 else f"exit {r['verify']}",
                     ",".join(map(str, r["exits"])) + ("" if r["exits_ok"] else " (!)"),
                     "; ".join(r["seen"])))
        if not good and r["verify"] != 0:
            print(f"{r['fault']}: carbonspan verify said:\n{r['verify_out']}", file=sys.stderr)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    for line in (head, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    for r in results:  # what the clients of requests never acknowledged were told
        told = ", ".join(f"{k} {v}" for k, v in sorted(r["why"].items(), key=lambda kv: -kv[1]))
        print(f"never acknowledged in {r['fault']}: {told or 'none'} (requests)")
    print(f"{len(results)} faults, seed {args.seed}, {time.monotonic() - t0:.0f} s: acknowledged "
          f"{total_acked:,} spans, archived {total_archived:,}; acknowledged lost: {total_lost} "
          f"-> {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
