"""The kill -9 guarantee as a campaign: nothing acknowledged is lost, however the agent dies.

A real ``carbonspan agent`` on loopback (0.3 s windows, fixed ports across lives) is fed by
client threads sending 64-span OTLP/gRPC requests (``bench/workload.py``) and killed with
SIGKILL again and again, at a random moment (seeded) of one of three phases:

- ``load``: while the clients are sending (requests in flight, windows closing);
- ``startup``: right after spawning, while it recovers the archive and replays the WAL;
- ``drain``: a few milliseconds after SIGTERM, while it drains and archives its window.

With ``--workers N`` (N > 1) the agent is ``carbonspan agent --workers N`` (agent/workers.py):
a kill is SIGKILL to the supervisor and every worker at once (its process group: a crashed
node), and a fourth phase, ``worker``, SIGKILLs one worker under load, lets the supervisor
restart it on its chain while the clients go on, then kills them all.

After each kill it is restarted on the same archive; after the last, stopped cleanly. Then
every chain must verify and the archived spans must lie between the acknowledged spans and the
acknowledged + the spans of requests that failed (in flight at a kill, or refused while
starting or draining: never acknowledged, so their clients would retry them). Not a timed
benchmark: it prints what it counted.

    python -m bench.kill9 --kills 30 --seed 1 [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from schema.archive import BODY_KEY

REPO = Path(__file__).resolve().parents[1]
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SPANS = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clients:
    """Threads that send while ``up`` is set; they count acknowledged and failed spans."""

    def __init__(self, port: int, threads: int) -> None:
        import grpc

        from bench.workload import make_request_bytes

        self.bodies = [make_request_bytes(SPANS, seed=s) for s in range(8)]
        self.up, self.stop = threading.Event(), threading.Event()
        self.lock = threading.Lock()
        self.acked = self.failed = 0
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.export = self.channel.unary_unary(EXPORT, request_serializer=None,
                                               response_deserializer=None)
        self.error = grpc.RpcError
        self.threads = [threading.Thread(target=self._run, args=(k,)) for k in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, k: int) -> None:
        i = k
        while not self.stop.is_set():
            if not self.up.wait(0.05):
                continue
            try:
                # wait_for_ready: a request sent just after a restart waits for the channel
                # to reconnect instead of failing fast
                self.export(self.bodies[i % len(self.bodies)], timeout=10, wait_for_ready=True)
                ok = True
            except self.error:
                ok = False
                time.sleep(0.02)
            with self.lock:
                if ok:
                    self.acked += SPANS
                else:
                    self.failed += SPANS
            i += 1

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        self.channel.close()


def _spawn(root: str, grpc_port: int, http_port: int, workers: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
    return subprocess.Popen(
        [sys.executable, "-m", "carbonspan", "agent", "--archive-dir", root, "--agent-id",
         "k9", "--grpc-port", str(grpc_port), "--http-port", str(http_port),
         "--window-seconds", "0.3", "--workers", str(workers)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True)  # its own process group: a kill reaches every worker


def _wait_ready(agent: subprocess.Popen) -> list[int]:
    """Wait for the ports line; the workers' pids (none for a single agent)."""
    assert agent.stdout is not None
    pids = []
    for line in agent.stdout:
        if " ready, archive " in line:
            pids.append(int(line.split("(pid ", 1)[1].split(")", 1)[0]))
        if "OTLP/gRPC" in line:
            threading.Thread(target=agent.stdout.read, daemon=True).start()  # keep it drained
            return pids
    raise RuntimeError(f"agent did not start (exit {agent.poll()})")


def _kill(agent: subprocess.Popen) -> None:
    """SIGKILL the agent and, with workers, every process of its group at once."""
    try:
        os.killpg(agent.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    agent.wait(timeout=30)


def campaign(kills: int, seed: int, threads: int, workers: int = 1) -> dict:
    rng = random.Random(seed)
    phases = {"load": 0, "startup": 0, "drain": 0, **({"worker": 0} if workers > 1 else {})}
    grpc_port, http_port = _free_port(), _free_port()
    with tempfile.TemporaryDirectory(prefix="carbonspan-kill9-") as root:
        clients = Clients(grpc_port, threads)
        try:
            for _ in range(kills):
                phase = rng.choice(list(phases))
                phases[phase] += 1
                agent = _spawn(root, grpc_port, http_port, workers)
                if phase == "startup":
                    time.sleep(rng.uniform(0.0, 0.6))  # Python start, recovery, WAL replay
                else:
                    pids = _wait_ready(agent)
                    clients.up.set()
                    time.sleep(rng.uniform(0.2, 1.5))
                    if phase == "worker":  # one worker dies; the supervisor restarts it
                        os.kill(rng.choice(pids), signal.SIGKILL)
                        time.sleep(rng.uniform(1.5, 3.0))
                    clients.up.clear()  # requests in flight go on; no new ones start
                    if phase == "drain":
                        agent.send_signal(signal.SIGTERM)
                        time.sleep(rng.uniform(0.0, 0.05))
                _kill(agent)
            agent = _spawn(root, grpc_port, http_port, workers)  # the last life ends cleanly
            _wait_ready(agent)
            clients.up.set()
            time.sleep(1.0)
            clients.up.clear()
            time.sleep(0.2)
            agent.send_signal(signal.SIGTERM)
            exit_code = agent.wait(timeout=60)
        finally:
            clients.close()
        from agent.archive import read_records
        from schema.chain import verify_chain

        chains = [Path(root) / "k9"] if workers == 1 else [
            Path(root) / f"k9-w{k}" for k in range(workers)]
        findings, records = [], []
        for chain in chains:  # each worker's chain on its own
            lines = read_records(chain)
            findings += verify_chain(lines)[0]
            records += lines
        archived = sum(r[BODY_KEY]["window"]["spans"] for _, r in records if r)
    return {"kills": kills, "phases": phases, "acked": clients.acked, "failed": clients.failed,
            "archived": archived, "findings": len(findings), "exit_code": exit_code,
            "lines": len(records)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m bench.kill9 --kills 30 --seed 1")
    ap.add_argument("--kills", type=int, default=30, help="SIGKILLs before the clean stop")
    ap.add_argument("--seed", type=int, default=1, help="seeds the phases and moments")
    ap.add_argument("--clients", type=int, default=4, help="client threads")
    ap.add_argument("--workers", type=int, default=1, metavar="N",
                    help="run 'carbonspan agent --workers N' (default 1: one process)")
    args = ap.parse_args(argv)
    r = campaign(args.kills, args.seed, args.clients, args.workers)
    lost = max(0, r["acked"] - r["archived"])
    extra = r["archived"] - r["acked"]
    ok = lost == 0 and extra <= r["failed"] and r["findings"] == 0 and r["exit_code"] == 0
    print(f"{r['kills']} kill -9 of {args.workers} worker(s) ({', '.join(f'{k} {v}' for k, v in r['phases'].items())}), "
          f"{r['lines']} window lines, chain findings {r['findings']}, clean stop exit "
          f"{r['exit_code']}")
    print(f"acknowledged {r['acked']:,} spans, archived {r['archived']:,}: lost {lost}; "
          f"{extra:,} archived beyond the acknowledged, of {r['failed']:,} spans in requests "
          f"never acknowledged -> {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
