"""End-to-end ingest: a load generator in a second process sends pre-serialised 512-span
OTLP requests (``bench/workload.py``) to a real ``carbonspan agent`` on loopback: over gRPC
(protobuf), then over HTTP with OTLP/JSON bodies (what e.g. the JavaScript exporter sends) and
with OTLP/protobuf bodies (``--http-proto``: what most OTLP/HTTP exporters send).

Reports sustained spans/s with zero loss (archived spans = acknowledged spans, checked after
a clean stop), p50/p99 export latency, agent CPU seconds per million spans (the figure that
survives a busy machine) and the agent's peak RSS. Target (issue 3): >= 150,000 spans/s on
the 2-core machine, RSS < 250 MB.

Honest by default (issue 19): every request carries fresh trace ids (the 16 pre-serialised
bodies get new ids patched in before each send, so a window meets new traces as with real
traffic; ``--repeat-ids`` sends the 16 bodies as they are, as this bench did before), and
``python -m bench ingest`` also runs 1,000- and 10,000-service scenarios (``--services N``)
and measures the trivial-handler ceiling of each transport in the same run (``--ceiling``:
the same client and request bytes against a grpcio handler, resp. an ``httpserve`` handler,
that answers OK without looking at the body), printing the agent's share of it.

``--workers N`` runs ``carbonspan agent --workers N`` (agent/workers.py: N processes sharing the
ports, one chain each); the agent's CPU is then the supervisor's and every worker's, its peak
RSS the largest one process reached (the issue's bound is per process), and the archived spans
those of every chain. The gRPC client threads share one channel unless ``--channels N``: one
channel is one connection, which the kernel hands to one worker, so a workers run needs a
channel per client thread (and its 1-worker baseline the same client).

    python -m bench ingest                       # via make bench
    python -m bench.bench_ingest --seconds 20 --clients 8 [--http-json | --http-proto] [--services N] [--ceiling]
    python -m bench.bench_ingest --workers 2 --channels 8 [--http-json | --http-proto]
"""

from __future__ import annotations

import argparse
import itertools
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

from schema.archive import BODY_KEY

REPO = Path(__file__).resolve().parents[1]
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SPANS = 512


BODIES = 16  # pre-serialised request bodies, sent in turn


class _GrpcSender:
    """Export calls over ``channels`` gRPC channels, each its own connection (a local
    subchannel pool: grpcio shares one connection between channels to one target otherwise);
    client thread k uses channel k mod ``channels``. With workers, the kernel hands each
    connection to one worker, so one channel is one worker's load."""

    def __init__(self, target: str, channels: int) -> None:
        import grpc

        self.channels = [grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
                         for _ in range(channels)]
        self.calls = [c.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
                      for c in self.channels]
        self.local = threading.local()
        self.next = itertools.count()

    def __call__(self, body: bytes, timeout: float) -> None:
        call = getattr(self.local, "call", None)
        if call is None:
            call = self.local.call = self.calls[next(self.next) % len(self.calls)]
        call(body, timeout=timeout)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()


def _grpc_sender(target: str, services: int | None, channels: int = 1) -> tuple[list[bytes], _GrpcSender]:
    from bench.workload import make_request_bytes

    bodies = [make_request_bytes(SPANS, seed=s, services=services) for s in range(BODIES)]
    return bodies, _GrpcSender(target, channels)


class FreshIds:
    """Each call gives a body with new trace ids: the template's, each replaced (in every span
    of its trace) by random bytes, so no two requests share a trace. The template is cut at
    its ids once; a call joins the pieces around new ids (~0.1 ms for 512 spans, not a
    re-serialisation)."""

    def __init__(self, body: bytes, trace_ids: list[bytes], as_hex: bool) -> None:
        self.as_hex = as_hex
        width = 32 if as_hex else 16
        at: list[tuple[int, int]] = []  # (offset, trace index)
        for g, tid in enumerate(trace_ids):
            needle = tid.hex().encode() if as_hex else tid
            found = body.find(needle)
            if found < 0:
                raise RuntimeError("a trace id of the template was not found in its bytes")
            while found >= 0:
                at.append((found, g))
                found = body.find(needle, found + width)
        at.sort()
        self.traces = len(trace_ids)
        self.order = [g for _, g in at]
        cuts = [0] + [x for off, _ in at for x in (off, off + width)] + [len(body)]
        self.pieces = [body[cuts[k]:cuts[k + 1]] for k in range(0, len(cuts), 2)]

    def __call__(self) -> bytes:
        fresh = os.urandom(16 * self.traces)
        ids = [fresh[16 * g:16 * g + 16] for g in range(self.traces)]
        if self.as_hex:
            ids = [i.hex().encode() for i in ids]
        parts: list[bytes] = [self.pieces[0]]
        for piece, g in zip(self.pieces[1:], self.order, strict=True):
            parts.append(ids[g])
            parts.append(piece)
        return b"".join(parts)


def _trace_ids(services: int | None, seed: int) -> list[bytes]:
    from bench.workload import make_request

    req = make_request(SPANS, seed=seed, services=services)
    return list(dict.fromkeys(span.trace_id for rs in req.resource_spans
                              for ss in rs.scope_spans for span in ss.spans))


class _HttpSender:
    """POST /v1/traces with OTLP/JSON or OTLP/protobuf bodies (``content_type``), one keep-alive
    connection per client thread."""

    def __init__(self, target: str, content_type: str = "application/json") -> None:
        self.host, self.port = target.rsplit(":", 1)
        self.headers = {"Content-Type": content_type}
        self.local = threading.local()

    def __call__(self, body: bytes, timeout: float) -> None:
        import http.client

        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, int(self.port), timeout=timeout)
        try:
            conn.request("POST", "/v1/traces", body, self.headers)
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


def _json_bodies(services: int | None = None) -> list[bytes]:
    """The gRPC bodies as OTLP/JSON as the spec writes it (hex trace ids, integer kinds): the
    bench decode module's spec payloads."""
    import orjson
    from google.protobuf.json_format import MessageToDict

    from bench.bench_decode import spec_json
    from bench.workload import make_request

    return [orjson.dumps(spec_json(MessageToDict(make_request(SPANS, seed=seed, services=services),
                                                 use_integers_for_enums=True)))
            for seed in range(BODIES)]


def loadgen(target: str, seconds: float, clients: int, warmup: float, http_json: bool = False,
            services: int | None = None, fresh_ids: bool = True, channels: int = 1,
            http_proto: bool = False) -> dict:
    """Blocking clients in threads (grpc and socket waits release the GIL)."""
    import grpc

    from bench.workload import make_request_bytes

    channel = None
    if http_json:
        bodies, call = _json_bodies(services), _HttpSender(target)
    elif http_proto:  # the gRPC bodies, as the OTLP/HTTP protobuf exporters send them
        bodies = [make_request_bytes(SPANS, seed=s, services=services) for s in range(BODIES)]
        call = _HttpSender(target, "application/x-protobuf")
    else:
        bodies, channel = _grpc_sender(target, services, channels)
        call = channel
    if fresh_ids:
        makers = [FreshIds(b, _trace_ids(services, seed), http_json) for seed, b in enumerate(bodies)]
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
            body = makers[i % len(bodies)]() if fresh_ids else bodies[i % len(bodies)]
            t0 = time.perf_counter()  # the body's ids are patched before the clock starts
            try:
                call(body, timeout=30)
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


def _drive(target: str, pids: list[int], seconds: float, clients: int, warmup: float, http_json: bool,
           services: int | None, fresh_ids: bool, env: dict[str, str], channels: int = 1,
           http_proto: bool = False) -> dict:
    """Run the load generator against ``target``; its figures and the CPU s of the server
    processes ``pids``."""
    cpu0 = sum(_proc_cpu_s(pid) for pid in pids)
    gen = subprocess.run(
        [sys.executable, "-m", "bench.bench_ingest", "--loadgen", target,
         "--seconds", str(seconds), "--clients", str(clients), "--warmup", str(warmup),
         *(["--http-json"] if http_json else []),
         *(["--http-proto"] if http_proto else []),
         *(["--services", str(services)] if services else []),
         *([] if fresh_ids else ["--repeat-ids"]), "--channels", str(channels)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=seconds + warmup + 300)
    if gen.returncode != 0:
        raise RuntimeError(f"load generator failed: {gen.stderr[-2000:]}")
    result = json.loads(gen.stdout.strip().splitlines()[-1])
    result["server_cpu_s"] = sum(_proc_cpu_s(pid) for pid in pids) - cpu0
    result["spans_per_s"] = result["measured_spans"] / seconds
    result["fresh_ids"] = fresh_ids
    result["services"] = services or 5
    result["load_average"] = os.getloadavg()[0]
    result["channels"] = 0 if http_json or http_proto else channels
    result["transport"] = _transport(http_json, http_proto)
    result["clients"] = clients
    return result


def _transport(http_json: bool, http_proto: bool) -> str:
    return "http-json" if http_json else "http-proto" if http_proto else "grpc"


def run(seconds: float = 15.0, clients: int = 8, warmup: float = 3.0,
        agent_env: dict[str, str] | None = None, window_seconds: float = 10.0,
        http_json: bool = False, services: int | None = None, fresh_ids: bool = True,
        workers: int = 1, channels: int = 1, http_proto: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="carbonspan-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
        agent = subprocess.Popen(
            [sys.executable, "-m", "carbonspan", "agent", "--archive-dir", tmp, "--agent-id",
             "bench", "--grpc-port", "0", "--http-port", "0", "--window-seconds",
             str(window_seconds), "--workers", str(workers)],
            cwd=REPO, env={**env, **(agent_env or {})}, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        try:
            target, pids = _started(agent, http_json or http_proto)
            result = _drive(target, pids, seconds, clients, warmup, http_json, services,
                            fresh_ids, env, channels, http_proto)
            result["peak_rss_mb"] = max(_peak_rss_mb(pid) for pid in pids)
            result["workers"] = workers
            agent.send_signal(signal.SIGTERM)
            result["exit_code"] = agent.wait(timeout=60)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        from agent.archive import read_records  # plain and gzip window files alike

        chains = [Path(tmp) / "bench"] if workers == 1 else [
            Path(tmp) / f"bench-w{k}" for k in range(workers)]
        result["chain_spans"] = {chain.name: sum(rec[BODY_KEY]["window"]["spans"]
                                                 for _, rec in read_records(chain) if rec)
                                 for chain in chains}
        result["archived_spans"] = sum(result["chain_spans"].values())
        result["agent_cpu_s_per_million"] = result["server_cpu_s"] / max(1, result["acked_spans"]) * 1e6
        return result


def _started(agent: subprocess.Popen, http: bool) -> tuple[str, list[int]]:
    """Wait for the agent's ports line: the target and the pids of its processes (with
    workers: the supervisor's and each worker's, from their ready lines)."""
    assert agent.stdout is not None
    pids = [agent.pid]
    for line in agent.stdout:
        w = re.search(r"worker \d+/\d+ \(pid (\d+)\) ready", line)
        if w:
            pids.append(int(w.group(1)))
        m = re.search(r"OTLP/gRPC ([\d.]+:\d+), OTLP/HTTP ([\d.]+:\d+)", line)
        if m:
            threading.Thread(target=agent.stdout.read, daemon=True).start()  # keep it drained
            return m.group(2 if http else 1), pids
    raise RuntimeError(f"agent did not start (exit {agent.wait()})")


def ceiling(seconds: float = 15.0, clients: int = 8, warmup: float = 3.0,
            http_json: bool = False, services: int | None = None, fresh_ids: bool = True,
            http_proto: bool = False) -> dict:
    """The same load against a trivial handler of the agent's own transport: grpcio's sync
    server with the agent's 4 threads and raw-bytes method, or ``httpserve`` with the agent's
    limits, each answering OK without reading the body: what the transport alone allows."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
    srv = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_ingest", "--serve-trivial",
         "http" if http_json or http_proto else "grpc"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stdin=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    try:
        assert srv.stdout is not None
        line = srv.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"trivial server did not start: {line!r}")
        result = _drive(f"127.0.0.1:{line.split()[1]}", [srv.pid], seconds, clients, warmup,
                        http_json, services, fresh_ids, env, http_proto=http_proto)
    finally:
        srv.kill()
        srv.wait()
    result["server_cpu_s_per_million"] = result["server_cpu_s"] / max(1, result["acked_spans"]) * 1e6
    return result


def serve_trivial(kind: str) -> None:
    """A server that answers every export OK at once (for :func:`ceiling`); runs until killed."""
    if kind == "grpc":
        from concurrent.futures import ThreadPoolExecutor

        import grpc

        server = grpc.server(ThreadPoolExecutor(4), options=[
            ("grpc.max_receive_message_length", 16 << 20), ("grpc.so_reuseport", 0)])
        method = grpc.unary_unary_rpc_method_handler(lambda request, context: b"")
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            EXPORT.split("/")[1], {"Export": method}),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
    else:
        from agent.daemon_config import AgentSettings
        from agent.server_http import http_limits
        from httpserve import HttpServer, Response, Route

        class Trivial:
            def route(self, head):  # noqa: ANN001, ANN201 - httpserve.App
                return Route.WORK if head.method == "POST" else Route.INLINE

            def check(self, head):  # noqa: ANN001, ANN201
                return None

            def handle(self, request):  # noqa: ANN001, ANN201
                if request.head.header("content-type") == "application/json":
                    return Response(200, b"{}", "application/json")
                return Response(200, b"", "application/x-protobuf")

            def refuse(self, head, status, kind, message):  # noqa: ANN001, ANN201
                return Response(status, message.encode())

        server = HttpServer(Trivial(), http_limits(AgentSettings()), "127.0.0.1", 0)
        port = server.start()
    print(f"PORT {port}", flush=True)
    sys.stdin.read()  # until the parent goes


def _report(r: dict, what: str, target: str) -> None:
    loss = r["acked_spans"] - r["archived_spans"]
    ids = "fresh trace ids per request" if r["fresh_ids"] else "16 bodies repeated (same trace ids)"
    workers = r.get("workers", 1)
    what += "" if workers == 1 else f", {workers} workers (agent CPU: all processes; RSS: the largest)"
    print(f"{what}, 512-span requests, {r['services']:,} services, {ids}, {r['clients']} client threads in a "
          f"second process, {r['seconds']:.0f} s measured after warm-up, load average "
          f"{r['load_average']:.1f}")
    print(f"  sustained:          {r['spans_per_s']:,.0f} spans/s  {target}")
    print(f"  acknowledged:       {r['acked_spans']:,} spans, archived {r['archived_spans']:,} "
          f"-> loss {loss} ({'zero loss' if loss == 0 else 'LOSS'}); "
          f"{r['failed_requests']} requests refused/failed")
    print(f"  export latency:     p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms")
    print(f"  agent CPU:          {r['agent_cpu_s_per_million']:.2f} s per million spans")
    print(f"  agent peak RSS:     {r['peak_rss_mb']:.0f} MB  (target < 250)")
    print(f"  clean stop exit:    {r['exit_code']}")
    c = r.get("ceiling")
    if workers > 1:
        print("  spans per chain:    " + ", ".join(f"{k} {v:,}" for k, v in r["chain_spans"].items())
              + (f" ({r['channels']} gRPC channels)" if r["channels"] else ""))
    if c:
        whose = "its transport's ceiling" if workers == 1 else "the one-process ceiling"
        bracket = (f" (mean of {c['before']:,.0f} before and {c['after']:,.0f} after)"
                   if "before" in c else "")
        print(f"  trivial handler:    {c['spans_per_s']:,.0f} spans/s{bracket} at "
              f"{c['server_cpu_s_per_million']:.2f} server CPU s per million spans (same client "
              f"and bytes, one process) -> the agent takes {r['share_of_ceiling']:.2f} x "
              f"{whose} (target >= 0.5)")


_NAMES = {"grpc": "OTLP/gRPC ingest", "http-json": "OTLP/HTTP JSON ingest",
          "http-proto": "OTLP/HTTP protobuf ingest"}
_NOTES = {"grpc": "(target >= 150,000; issue 19: >= 400,000)",
          "http-json": "(the JSON bodies are ~4x the protobuf bytes)",
          "http-proto": "(what most OTLP/HTTP exporters send; issue 19: >= 400,000)"}


def main() -> None:
    """``make bench``: fresh trace ids; 10, 1,000 and 10,000 services over gRPC; OTLP/JSON and
    OTLP/protobuf over HTTP; each transport's trivial-handler ceiling measured right before and
    right after the agent's 10-service run (the machine is shared: a bracket, not one side),
    and the agent's share of their mean printed for every transport (with the default workers
    too, against the same one-process ceiling)."""
    ceilings: dict[str, dict] = {}

    def bracketed(http_json: bool = False, http_proto: bool = False) -> dict:
        before = ceiling(services=10, http_json=http_json, http_proto=http_proto)
        r = run(services=10, http_json=http_json, http_proto=http_proto)
        after = ceiling(services=10, http_json=http_json, http_proto=http_proto)
        ceilings[r["transport"]] = {
            "spans_per_s": (before["spans_per_s"] + after["spans_per_s"]) / 2,
            "server_cpu_s_per_million": (before["server_cpu_s_per_million"]
                                         + after["server_cpu_s_per_million"]) / 2,
            "before": before["spans_per_s"], "after": after["spans_per_s"]}
        return share(r)

    def share(r: dict) -> dict:
        r["ceiling"] = c = ceilings[r["transport"]]
        r["share_of_ceiling"] = r["spans_per_s"] / max(1.0, c["spans_per_s"])
        return r

    for services in (10, 1000, 10_000):
        r = bracketed() if services == 10 else run(services=services)
        _report(r, _NAMES["grpc"], _NOTES["grpc"])
    for http_json, http_proto in ((True, False), (False, True)):
        r = bracketed(http_json, http_proto)
        _report(r, _NAMES[r["transport"]], _NOTES[r["transport"]])
    from agent.daemon_config import AgentSettings
    from agent.workers import worker_count

    auto = worker_count(AgentSettings())[0]  # the agent's default on this machine
    if auto > 1:
        for http_json, http_proto in ((False, False), (True, False), (False, True)):
            r = share(run(http_json=http_json, http_proto=http_proto, services=10,
                          workers=auto, channels=8))
            _report(r, _NAMES[r["transport"]], "(the default worker count for this machine's cores)")


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
    ap.add_argument("--http-proto", action="store_true",
                    help="send OTLP/protobuf over HTTP (POST /v1/traces, application/x-protobuf: "
                    "what most OTLP/HTTP exporters send) instead of over gRPC")
    ap.add_argument("--services", type=int, default=None, metavar="N",
                    help="spans drawn from N numbered services (default: the workload's 5)")
    ap.add_argument("--repeat-ids", action="store_true",
                    help="send the 16 bodies as they are (the same trace ids again and again; "
                    "this bench's figures before 2026-12-02) instead of fresh trace ids")
    ap.add_argument("--ceiling", action="store_true",
                    help="also measure the trivial-handler ceiling of the transport and print "
                    "the agent's share of it")
    ap.add_argument("--workers", type=int, default=1, metavar="N",
                    help="run 'carbonspan agent --workers N' (default 1: one agent process)")
    ap.add_argument("--channels", type=int, default=1, metavar="N",
                    help="gRPC channels (connections) the client threads share (default 1; with "
                    "workers, each connection is served by one worker: give one per client)")
    ap.add_argument("--serve-trivial", choices=("grpc", "http"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    fresh = not a.repeat_ids
    if a.serve_trivial:
        serve_trivial(a.serve_trivial)
    elif a.loadgen:
        print(json.dumps(loadgen(a.loadgen, a.seconds, a.clients, a.warmup, a.http_json,
                                 a.services, fresh, a.channels, a.http_proto)))
    else:
        r = run(a.seconds, a.clients, a.warmup, dict(kv.split("=", 1) for kv in a.agent_env),
                a.window_seconds, a.http_json, a.services, fresh, a.workers, a.channels,
                a.http_proto)
        if a.ceiling:
            c = ceiling(a.seconds, a.clients, a.warmup, a.http_json, a.services, fresh,
                        a.http_proto)
            r["ceiling"] = c
            r["share_of_ceiling"] = r["spans_per_s"] / max(1.0, c["spans_per_s"])
        print(json.dumps(r, indent=2))
