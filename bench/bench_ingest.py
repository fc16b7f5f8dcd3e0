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

Two request shapes (``--services N``): the default is the gateway/fan-in shape, each span's
service drawn from all N (what a collector in front of everything forwards: at 10,000 services
a request is ~500 resources of about one span, 380 kB against 186 kB at 10);
``--services-per-request K`` is the SDK shape, each request's spans from K services (one
resource each, as an SDK, K=1, or a per-node collector sends), the requests cycling through all
N so that each window still meets every one. Issue 19's "10,000 services per window within
20 % of 10" is about window cardinality, which only the SDK shape holds apart from request
shape; ``make bench`` (or ``--cardinality`` alone) prints, for both shapes, the raw ratio of
agent CPU per million spans (the target's figure, said met or missed), the trivial handler's
ratio on the same bytes (the transport's own), and the agent's own ratio: (agent - trivial
handler) at 10,000 over the same at 10 services. A
window line lists at most ``MAX_SERVICES`` (4,096) services, the rest under "(other)"; the
report prints the services each archived window line lists.

``--workers N`` runs ``carbonspan agent --workers N`` (agent/workers.py: N processes sharing the
ports, one chain each); the agent's CPU is then the supervisor's and every worker's, its peak
RSS the largest one process reached (the issue's bound is per process), and the archived spans
those of every chain. The gRPC client threads share one channel unless ``--channels N``: one
channel is one connection, which the kernel hands to one worker, so a workers run needs a
channel per client thread (and its 1-worker baseline the same client).

    python -m bench ingest                       # via make bench
    python -m bench.bench_ingest --seconds 20 --clients 8 [--http-json | --http-proto] [--services N] [--ceiling]
    python -m bench.bench_ingest --services 10000 --services-per-request 8   # the SDK shape
    python -m bench.bench_ingest --cardinality --seconds 10   # issue 19's 10 vs 10,000 ratios
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


def _proto_bodies(services: int | None, per_request: int | None = None) -> list[bytes]:
    """The fan-in shape's 16 bodies, or the SDK shape's templates (template t: block t)."""
    from bench.workload import make_request_bytes

    if per_request is None:
        return [make_request_bytes(SPANS, seed=s, services=services) for s in range(BODIES)]
    return [make_request_bytes(SPANS, seed=t, services=services, per_request=per_request, block=t)
            for t in range(SHAPE_TEMPLATES)]


def _grpc_sender(target: str, services: int | None, channels: int = 1,
                 per_request: int | None = None) -> tuple[list[bytes], _GrpcSender]:
    return _proto_bodies(services, per_request), _GrpcSender(target, channels)


class FreshIds:
    """Each call gives a body with new trace ids: the template's, each replaced (in every span
    of its trace) by random bytes, so no two requests share a trace. The template is cut at
    its ids once; a call joins the pieces around new ids (~0.1 ms for 512 spans, not a
    re-serialisation).

    ``names`` (the SDK shape): the template's service names, each of one fixed width; a call
    given ``names`` of the same width puts them wherever the template's stood (resource
    attributes and the span attributes that quote the service), so one template serves every
    block of services. ``fresh=False`` keeps the template's trace ids."""

    def __init__(self, body: bytes, trace_ids: list[bytes], as_hex: bool,
                 names: list[bytes] | None = None, fresh: bool = True) -> None:
        self.as_hex, self.fresh = as_hex, fresh
        self.ids = [t.hex().encode() if as_hex else t for t in trace_ids]
        at: list[tuple[int, int, int]] = []  # (offset, width, slot): slot < traces is a trace
        needles = self.ids + list(names or ())
        for slot, needle in enumerate(needles):
            found = body.find(needle)
            if found < 0:
                raise RuntimeError("a trace id or service name of the template is not in its bytes")
            while found >= 0:
                at.append((found, len(needle), slot))
                found = body.find(needle, found + len(needle))
        at.sort()
        if any(a[0] + a[1] > b[0] for a, b in itertools.pairwise(at)):
            raise RuntimeError("a template's trace ids or service names overlap")
        self.traces = len(trace_ids)
        self.width = {len(n) for n in names} if names else set()
        if len(self.width) > 1:
            raise RuntimeError("the template's service names differ in width")
        self.order = [slot for _, _, slot in at]
        cuts = [0] + [x for off, w, _ in at for x in (off, off + w)] + [len(body)]
        self.pieces = [body[cuts[k]:cuts[k + 1]] for k in range(0, len(cuts), 2)]

    def __call__(self, names: list[bytes] | None = None) -> bytes:
        if self.fresh:
            fresh = os.urandom(16 * self.traces)
            ids = [fresh[16 * g:16 * g + 16] for g in range(self.traces)]
            if self.as_hex:
                ids = [i.hex().encode() for i in ids]
        else:
            ids = list(self.ids)
        if self.width:
            if names is None or {len(n) for n in names} != self.width:
                raise ValueError("the SDK shape's template needs names of its width")
            ids += names
        parts: list[bytes] = [self.pieces[0]]
        for piece, g in zip(self.pieces[1:], self.order, strict=True):
            parts.append(ids[g])
            parts.append(piece)
        return b"".join(parts)


#: Templates of the SDK shape: block b is sent as template b mod 20 with its service names
#: put in; 20 is a multiple of the workload's 5 provider/region classes, so a service keeps
#: its region in every request (``--services`` must then be a multiple of 5).
SHAPE_TEMPLATES = 20


class Bodies:
    """What the client threads send. The gateway/fan-in shape (``per_request`` None): the 16
    pre-serialised bodies in turn (each thread its own turn, as before). The SDK shape: request
    number b (one counter across the threads) carries the ``per_request`` services of
    :func:`bench.workload.block_services` (b), so the requests cycle through all ``services``
    and each window meets every one of them when it holds ``services / per_request`` requests
    or more."""

    def __init__(self, bodies: list[bytes], makers: list[FreshIds] | None,
                 services: int | None = None, per_request: int | None = None) -> None:
        self.bodies, self.makers = bodies, makers
        self.services, self.per_request = services, per_request
        self.blocks = itertools.count()
        if per_request is not None:
            from bench.workload import services_of

            self.names = [s[0].encode() for s in services_of(services)]

    def take(self, i: int) -> bytes:
        if self.per_request is None:
            return self.makers[i % len(self.bodies)]() if self.makers else self.bodies[i % len(self.bodies)]
        from bench.workload import block_services

        b = next(self.blocks)  # itertools.count: atomic under the GIL
        assert self.makers is not None
        return self.makers[b % len(self.makers)](
            [self.names[k] for k in block_services(b, self.per_request, self.services)])


def shaped(bodies: list[bytes], as_hex: bool, services: int | None, per_request: int | None,
           fresh_ids: bool) -> Bodies:
    """:class:`Bodies` over ``bodies`` (seed k = template k; in the SDK shape template k is
    block k's request)."""
    if per_request is None:
        makers = ([FreshIds(b, _trace_ids(services, seed), as_hex) for seed, b in enumerate(bodies)]
                  if fresh_ids else None)
        return Bodies(bodies, makers, services)
    _check_shape(services, per_request)
    from bench.workload import block_services, services_of

    table = services_of(services)
    makers = [FreshIds(b, _trace_ids(services, t, per_request, t), as_hex,
                       [table[k][0].encode() for k in block_services(t, per_request, services)],
                       fresh_ids)
              for t, b in enumerate(bodies)]
    return Bodies(bodies, makers, services, per_request)


def _check_shape(services: int | None, per_request: int | None) -> None:
    if per_request is None:
        return
    if services is None or services % 5 or not 1 <= per_request <= services or services > 100_000:
        raise ValueError("--services-per-request K needs --services N, N a multiple of 5 up to "
                         "100,000 and 1 <= K <= N")


def _shape(per_request: int | None) -> str:
    return "fan-in" if per_request is None else f"sdk-{per_request}"


def _trace_ids(services: int | None, seed: int, per_request: int | None = None,
               block: int = 0) -> list[bytes]:
    from bench.workload import make_request

    req = make_request(SPANS, seed=seed, services=services, per_request=per_request, block=block)
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


def _json_bodies(services: int | None = None, per_request: int | None = None) -> list[bytes]:
    """The gRPC bodies as OTLP/JSON as the spec writes it (hex trace ids, integer kinds): the
    bench decode module's spec payloads."""
    import orjson
    from google.protobuf.json_format import MessageToDict

    from bench.bench_decode import spec_json
    from bench.workload import make_request

    seeds = range(BODIES) if per_request is None else range(SHAPE_TEMPLATES)
    return [orjson.dumps(spec_json(MessageToDict(
        make_request(SPANS, seed=seed, services=services, per_request=per_request, block=seed),
        use_integers_for_enums=True))) for seed in seeds]


def loadgen(target: str, seconds: float, clients: int, warmup: float, http_json: bool = False,
            services: int | None = None, fresh_ids: bool = True, channels: int = 1,
            http_proto: bool = False, per_request: int | None = None) -> dict:
    """Blocking clients in threads (grpc and socket waits release the GIL)."""
    import grpc

    channel = None
    if http_json:
        bodies, call = _json_bodies(services, per_request), _HttpSender(target)
    elif http_proto:  # the gRPC bodies, as the OTLP/HTTP protobuf exporters send them
        bodies = _proto_bodies(services, per_request)
        call = _HttpSender(target, "application/x-protobuf")
    else:
        bodies, channel = _grpc_sender(target, services, channels, per_request)
        call = channel
    source = shaped(bodies, http_json, services, per_request, fresh_ids)
    call(source.take(0), timeout=30)  # connect; these spans count as acknowledged too
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
            body = source.take(i)
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
           http_proto: bool = False, per_request: int | None = None) -> dict:
    """Run the load generator against ``target``; its figures and the CPU s of the server
    processes ``pids``."""
    cpu0 = sum(_proc_cpu_s(pid) for pid in pids)
    gen = subprocess.run(
        [sys.executable, "-m", "bench.bench_ingest", "--loadgen", target,
         "--seconds", str(seconds), "--clients", str(clients), "--warmup", str(warmup),
         *(["--http-json"] if http_json else []),
         *(["--http-proto"] if http_proto else []),
         *(["--services", str(services)] if services else []),
         *(["--services-per-request", str(per_request)] if per_request else []),
         *([] if fresh_ids else ["--repeat-ids"]), "--channels", str(channels)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=seconds + warmup + 300)
    if gen.returncode != 0:
        raise RuntimeError(f"load generator failed: {gen.stderr[-2000:]}")
    result = json.loads(gen.stdout.strip().splitlines()[-1])
    result["server_cpu_s"] = sum(_proc_cpu_s(pid) for pid in pids) - cpu0
    result["spans_per_s"] = result["measured_spans"] / seconds
    result["fresh_ids"] = fresh_ids
    result["services"] = services or 5
    result["shape"] = _shape(per_request)
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
        workers: int = 1, channels: int = 1, http_proto: bool = False,
        per_request: int | None = None) -> dict:
    _check_shape(services, per_request)
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
                            fresh_ids, env, channels, http_proto, per_request)
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
        windows = [rec[BODY_KEY]["green_summary"] for chain in chains for _, rec in read_records(chain) if rec]
        result["chain_spans"] = {chain.name: sum(rec[BODY_KEY]["window"]["spans"]
                                                 for _, rec in read_records(chain) if rec)
                                 for chain in chains}
        # distinct services each archived window line lists (the first and last windows are
        # partial: warm-up and stop)
        result["window_services"] = [len(w["per_service_energy_kwh"]) for w in windows]
        result["window_spans"] = [rec[BODY_KEY]["window"]["spans"] for chain in chains
                                  for _, rec in read_records(chain) if rec]
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
            http_proto: bool = False, per_request: int | None = None) -> dict:
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
                        http_json, services, fresh_ids, env, http_proto=http_proto,
                        per_request=per_request)
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
    shape = r.get("shape", "fan-in")
    shape = ("gateway/fan-in shape (each span's service drawn from all of them)" if shape == "fan-in"
             else f"SDK shape ({shape[4:]} services, one resource each, per request, cycling)")
    print(f"{what}, 512-span requests, {r['services']:,} services, {shape}, {ids}, {r['clients']} client threads in a "
          f"second process, {r['seconds']:.0f} s measured after warm-up, load average "
          f"{r['load_average']:.1f}")
    print(f"  sustained:          {r['spans_per_s']:,.0f} spans/s  {target}")
    print(f"  acknowledged:       {r['acked_spans']:,} spans, archived {r['archived_spans']:,} "
          f"-> loss {loss} ({'zero loss' if loss == 0 else 'LOSS'}); "
          f"{r['failed_requests']} requests refused/failed")
    print(f"  export latency:     p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms")
    print(f"  agent CPU:          {r['agent_cpu_s_per_million']:.2f} s per million spans")
    print(f"  agent peak RSS:     {r['peak_rss_mb']:.0f} MB  (target < 250)")
    ws = r.get("window_services") or [0]
    full = ws[1:-1] or ws
    from agent.carbon.partial import MAX_SERVICES

    capped = (f"; a window lists at most {MAX_SERVICES:,} (MAX_SERVICES: {MAX_SERVICES - 1:,} named "
              f"and \"(other)\", which takes the spans of the rest)" if max(ws) >= MAX_SERVICES else "")
    print(f"  services/window:    {min(full):,}-{max(full):,} in the {len(full)} full window line(s) "
          f"archived (all {len(ws)}: {', '.join(f'{n:,}' for n in ws)}){capped}")
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


#: services per request of ``make bench``'s SDK shape: at 10,000 services a cycle is 1,250
#: requests, well inside one window (a window closes at the agent's ``max_window_spans``,
#: 2,000,000 = ~3,900 requests of 512, if 10 s have not passed first); one service per request
#: would meet only ~3,900 services per window (measured: 3,907).
SDK_PER_REQUEST = 8


def own_ratio(agent10: float, agent10k: float, trivial10: float, trivial10k: float) -> float:
    """The agent's own cost at 10,000 over 10 services: agent CPU per million spans less the
    trivial handler's on the same bytes (what the transport alone costs), at each side."""
    return (agent10k - trivial10k) / max(1e-9, agent10 - trivial10)


def window_cardinality(cpu: dict[tuple[str, int], float], trivial: dict[tuple[str, int], float]) -> str:
    """Issue 19's "10,000 services per window within 20 % of 10", per request shape: agent CPU
    per million spans at 10,000 over 10 services of the same shape (the raw ratio, which the
    target names), the trivial handler's own ratio on the same bytes, and the agent's own ratio:
    (agent - trivial handler) at 10,000 over the same at 10, the transport's share taken out."""
    lines = ["10,000 vs 10 services per window, OTLP/gRPC, CPU s per million spans (issue 19: "
             "within 20 %, i.e. <= 1.20 x, of the raw agent figure):"]
    for shape, label in (("sdk", f"SDK shape ({SDK_PER_REQUEST} services per request)"),
                         ("fan-in", "gateway/fan-in shape (~500 resources per request at 10,000)")):
        a10, a10k = cpu[shape, 10], cpu[shape, 10_000]
        t10, t10k = trivial[shape, 10], trivial[shape, 10_000]
        raw = a10k / a10
        lines += [
            f"  {label}:",
            f"    agent (raw, the target's figure): {a10:.2f} -> {a10k:.2f} s = {raw:.2f} x "
            f"({'meets' if raw <= 1.20 else 'misses'} the 20 % target)",
            f"    trivial handler, same bytes:      {t10:.2f} -> {t10k:.2f} s = {t10k / t10:.2f} x "
            f"(the transport's own)",
            f"    agent's own (agent - trivial):    {a10 - t10:.2f} -> {a10k - t10k:.2f} s = "
            f"{own_ratio(a10, a10k, t10, t10k):.2f} x",
        ]
    return "\n".join(lines)


def cardinality(seconds: float = 15.0) -> dict:
    """The gRPC runs behind :func:`window_cardinality`: each shape at 10 and 10,000 services,
    the agent and the trivial handler on the same bytes, in turn (agent, trivial, agent,
    trivial); prints each run and the ratios, and returns the figures."""
    cpu: dict[tuple[str, int], float] = {}
    trivial: dict[tuple[str, int], float] = {}
    loads = []
    for shape, per in (("fan-in", None), ("sdk", SDK_PER_REQUEST)):
        for services in (10, 10_000):
            r = run(seconds=seconds, services=services, per_request=per)
            c = ceiling(seconds=seconds, services=services, per_request=per)
            cpu[shape, services] = r["agent_cpu_s_per_million"]
            trivial[shape, services] = c["server_cpu_s_per_million"]
            loads += [r["load_average"], c["load_average"]]
            _report(r, _NAMES["grpc"], _NOTES["grpc"])
            print(f"trivial gRPC handler, {_shape(per)} shape, {services:,} services: "
                  f"{c['spans_per_s']:,.0f} spans/s at {c['server_cpu_s_per_million']:.2f} server "
                  f"CPU s per million spans (load average {c['load_average']:.1f})")
    print(window_cardinality(cpu, trivial))
    return {"agent": {f"{k[0]} {k[1]}": v for k, v in cpu.items()},
            "trivial": {f"{k[0]} {k[1]}": v for k, v in trivial.items()},
            "load_average": [min(loads), max(loads)]}


_NAMES = {"grpc": "OTLP/gRPC ingest", "http-json": "OTLP/HTTP JSON ingest",
          "http-proto": "OTLP/HTTP protobuf ingest"}
_NOTES = {"grpc": "(target >= 150,000; issue 19: >= 400,000)",
          "http-json": "(the JSON bodies are ~4x the protobuf bytes)",
          "http-proto": "(what most OTLP/HTTP exporters send; issue 19: >= 400,000)"}


def main() -> None:
    """``make bench``: fresh trace ids; 10, 1,000 and 10,000 services over gRPC in the fan-in
    shape, 10 and 10,000 in the SDK shape (with the ratios of :func:`window_cardinality` and the
    trivial handler at 10,000 fan-in services); OTLP/JSON and
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

    cpu: dict[tuple[str, int], float] = {}
    trivial: dict[tuple[str, int], float] = {}
    for services in (10, 1000, 10_000):
        r = bracketed() if services == 10 else run(services=services)
        cpu["fan-in", services] = r["agent_cpu_s_per_million"]
        _report(r, _NAMES["grpc"], _NOTES["grpc"])
    trivial["fan-in", 10] = ceilings["grpc"]["server_cpu_s_per_million"]
    for services, per in ((10_000, None), (10, SDK_PER_REQUEST), (10_000, SDK_PER_REQUEST)):
        c = ceiling(services=services, per_request=per)
        trivial["sdk" if per else "fan-in", services] = c["server_cpu_s_per_million"]
        print(f"trivial gRPC handler, {_shape(per)} shape, {services:,} services: "
              f"{c['spans_per_s']:,.0f} spans/s at {c['server_cpu_s_per_million']:.2f} server CPU s "
              f"per million spans (load average {c['load_average']:.1f})")
    for services in (10, 10_000):
        r = run(services=services, per_request=SDK_PER_REQUEST)
        cpu["sdk", services] = r["agent_cpu_s_per_million"]
        _report(r, _NAMES["grpc"], _NOTES["grpc"])
    print(window_cardinality(cpu, trivial))
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
    ap.add_argument("--services-per-request", type=int, default=None, metavar="K",
                    help="the SDK shape: each request's spans from K of the N services (one "
                    "resource each), the requests cycling through all N (default: the "
                    "gateway/fan-in shape, each span's service drawn from all N)")
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
    ap.add_argument("--cardinality", action="store_true",
                    help="only issue 19's window-cardinality runs (gRPC; fan-in and SDK shapes at "
                    "10 and 10,000 services, each with the trivial handler on the same bytes) "
                    "and their raw and agent's-own ratios")
    ap.add_argument("--serve-trivial", choices=("grpc", "http"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    fresh = not a.repeat_ids
    if a.serve_trivial:
        serve_trivial(a.serve_trivial)
    elif a.cardinality:
        print(json.dumps(cardinality(a.seconds)))
    elif a.loadgen:
        print(json.dumps(loadgen(a.loadgen, a.seconds, a.clients, a.warmup, a.http_json,
                                 a.services, fresh, a.channels, a.http_proto,
                                 a.services_per_request)))
    else:
        r = run(a.seconds, a.clients, a.warmup, dict(kv.split("=", 1) for kv in a.agent_env),
                a.window_seconds, a.http_json, a.services, fresh, a.workers, a.channels,
                a.http_proto, a.services_per_request)
        if a.ceiling:
            c = ceiling(a.seconds, a.clients, a.warmup, a.http_json, a.services, fresh,
                        a.http_proto, a.services_per_request)
            r["ceiling"] = c
            r["share_of_ceiling"] = r["spans_per_s"] / max(1.0, c["spans_per_s"])
        print(json.dumps(r, indent=2))
