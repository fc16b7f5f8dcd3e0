"""End-to-end ingest: a load generator in a second process sends pre-serialised 512-span
OTLP requests (``bench/workload.py``) to a real ``carbonspan agent`` on loopback: over gRPC
(protobuf), then over HTTP with OTLP/JSON bodies (what e.g. the JavaScript exporter sends).

Reports sustained spans/s with zero loss (archived spans = acknowledged spans, checked after
a clean stop), p50/p99 export latency, agent CPU seconds per million spans and the agent's
peak RSS. Target (issue 3): >= 150,000 spans/s on the 2-core machine, RSS < 250 MB.

    python -m bench ingest                       # via make bench
    python -m bench.bench_ingest --seconds 20 --clients 8 [--http-json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SPANS = 512


def _grpc_sender(target: str) -> tuple[list[bytes], object, object]:
    import grpc

    from bench.workload import make_request_bytes

    bodies = [make_request_bytes(SPANS, seed=s) for s in range(16)]
    channel = grpc.insecure_channel(target)
    return bodies, channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None), channel


class _JsonSender:
    """POST /v1/traces with OTLP/JSON bodies, one keep-alive connection per client thread."""

    def __init__(self, target: str) -> None:
        self.host, self.port = target.rsplit(":", 1)
        self.local = threading.local()

    def __call__(self, body: bytes, timeout: float) -> None:
        import http.client

        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, int(self.port), timeout=timeout)
        try:
            conn.request("POST", "/v1/traces", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            self.local.conn = None
            raise _Refused(str(exc)) from exc
        if resp.status != 200:
            raise _Refused(f"HTTP {resp.status}")


class _Refused(Exception):
    pass


def _json_bodies() -> list[bytes]:
    """The gRPC bodies as OTLP/JSON as the spec writes it (hex trace ids, integer kinds): the
    bench decode module's spec payloads."""
    import orjson
    from google.protobuf.json_format import MessageToDict

    from bench.bench_decode import spec_json
    from bench.workload import make_request

    return [orjson.dumps(spec_json(MessageToDict(make_request(SPANS, seed=seed), use_integers_for_enums=True)))
            for seed in range(16)]


def loadgen(target: str, seconds: float, clients: int, warmup: float, http_json: bool = False) -> dict:
    """Blocking clients in threads (grpc and socket waits release the GIL)."""
    import grpc

    channel = None
    if http_json:
        bodies, call = _json_bodies(), _JsonSender(target)
    else:
        bodies, call, channel = _grpc_sender(target)
    call(bodies[0], timeout=30)  # connect; these spans count as acknowledged too
    acked = [SPANS]
    failed = [0]
    lat: list[float] = []
    lock = threading.Lock()
    t_start = time.perf_counter()
    measure_from = t_start + warmup
    stop_at = measure_from + seconds
    measured = [0]

    def worker(k: int) -> None:
        i = k
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            try:
                call(bodies[i % len(bodies)], timeout=30)
            except (grpc.RpcError, _Refused):
                with lock:
                    failed[0] += 1
                continue
            t1 = time.perf_counter()
            with lock:
                acked[0] += SPANS
                if t0 >= measure_from:
                    measured[0] += SPANS
                    lat.append(t1 - t0)
            i += clients

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if channel is not None:
        channel.close()
    lat.sort()
    pick = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3) if lat else (lambda q: 0.0)
    return {"acked_spans": acked[0], "failed_requests": failed[0], "measured_spans": measured[0],
            "seconds": seconds, "p50_ms": pick(0.50), "p99_ms": pick(0.99)}


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(seconds: float = 15.0, clients: int = 8, warmup: float = 3.0,
        agent_env: dict[str, str] | None = None, window_seconds: float = 10.0,
        http_json: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="carbonspan-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
        agent = subprocess.Popen(
            [sys.executable, "-m", "carbonspan", "agent", "--archive-dir", tmp, "--agent-id",
             "bench", "--grpc-port", "0", "--http-port", "0", "--window-seconds",
             str(window_seconds)],
            cwd=REPO, env={**env, **(agent_env or {})}, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        try:
            assert agent.stdout is not None
            line = agent.stdout.readline()
            m = re.search(r"OTLP/gRPC ([\d.]+:\d+), OTLP/HTTP ([\d.]+:\d+)", line)
            if not m:
                raise RuntimeError(f"agent did not start: {line!r}")
            cpu0 = _proc_cpu_s(agent.pid)
            gen = subprocess.run(
                [sys.executable, "-m", "bench.bench_ingest", "--loadgen", m.group(2 if http_json else 1),
                 "--seconds", str(seconds), "--clients", str(clients), "--warmup", str(warmup),
                 *(["--http-json"] if http_json else [])],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=seconds + warmup + 120)
            if gen.returncode != 0:
                raise RuntimeError(f"load generator failed: {gen.stderr[-2000:]}")
            result = json.loads(gen.stdout.strip().splitlines()[-1])
            cpu = _proc_cpu_s(agent.pid) - cpu0
            result["peak_rss_mb"] = _peak_rss_mb(agent.pid)
            agent.send_signal(signal.SIGTERM)
            result["exit_code"] = agent.wait(timeout=60)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        from agent.archive import read_records  # plain and gzip window files alike

        result["archived_spans"] = sum(rec["report"]["window"]["spans"]
                                       for _, rec in read_records(Path(tmp) / "bench") if rec)
        result["agent_cpu_s_per_million"] = cpu / max(1, result["acked_spans"]) * 1e6
        result["spans_per_s"] = result["measured_spans"] / seconds
        return result


def _report(r: dict, what: str, target: str) -> None:
    loss = r["acked_spans"] - r["archived_spans"]
    print(f"{what}, 512-span requests, 8 client threads in a second process, "
          f"{r['seconds']:.0f} s measured after warm-up")
    print(f"  sustained:          {r['spans_per_s']:,.0f} spans/s  {target}")
    print(f"  acknowledged:       {r['acked_spans']:,} spans, archived {r['archived_spans']:,} "
          f"-> loss {loss} ({'zero loss' if loss == 0 else 'LOSS'}); "
          f"{r['failed_requests']} requests refused/failed")
    print(f"  export latency:     p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms")
    print(f"  agent CPU:          {r['agent_cpu_s_per_million']:.2f} s per million spans")
    print(f"  agent peak RSS:     {r['peak_rss_mb']:.0f} MB  (target < 250)")
    print(f"  clean stop exit:    {r['exit_code']}")


def main() -> None:
    _report(run(), "OTLP/gRPC ingest", "(target >= 150,000)")
    _report(run(http_json=True), "OTLP/HTTP JSON ingest", "(no target; the JSON bodies are ~4x the protobuf bytes)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="End-to-end OTLP/gRPC ingest benchmark "
                                 "(prints the figures as JSON; `python -m bench ingest` prints text)")
    ap.add_argument("--loadgen", metavar="HOST:PORT",
                    help="internal: run only the load generator against this agent")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds (default 15)")
    ap.add_argument("--clients", type=int, default=8, help="client threads (default 8)")
    ap.add_argument("--warmup", type=float, default=3.0,
                    help="seconds sent before measuring (default 3)")
    ap.add_argument("--window-seconds", type=float, default=10.0,
                    help="the agent's window length (default 10)")
    ap.add_argument("--agent-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for the agent, e.g. CARBONSPAN_GRPC_WORKERS=4")
    ap.add_argument("--http-json", action="store_true",
                    help="send OTLP/JSON over HTTP (POST /v1/traces) instead of protobuf over gRPC")
    a = ap.parse_args()
    if a.loadgen:
        print(json.dumps(loadgen(a.loadgen, a.seconds, a.clients, a.warmup, a.http_json)))
    else:
        r = run(a.seconds, a.clients, a.warmup, dict(kv.split("=", 1) for kv in a.agent_env),
                a.window_seconds, a.http_json)
        print(json.dumps(r, indent=2))
