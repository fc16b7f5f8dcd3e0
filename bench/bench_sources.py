"""Energy sources: the cost of ``SourceManager.current()`` on the scoring path, and of one
Kepler poll (fetch + parse + counter deltas) for a large node, against a loopback server.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent.sources.config import parse_sources
from agent.sources.manager import SourceManager

CONTAINERS = 2_000
ZONES = ("package", "core", "uncore", "dram")


def _exposition(step: int) -> bytes:
    lines = ["# HELP kepler_container_cpu_joules_total Energy consumption of cpu at container level in joules",
             "# TYPE kepler_container_cpu_joules_total counter"]
    for c in range(CONTAINERS):
        for z in ZONES:
            lines.append(
                f'kepler_container_cpu_joules_total{{container_id="{c:012x}",container_name="svc-{c % 50}",'
                f'pod_id="pod-{c}",runtime="containerd",state="running",zone="{z}"}} {1000 + c + step * 7}'
            )
    # the rest of a real Kepler endpoint: per-process counters and node counters, not read here
    lines.append("# TYPE kepler_process_cpu_joules_total counter")
    for p in range(4 * CONTAINERS):
        for z in ("package", "dram"):
            lines.append(f'kepler_process_cpu_joules_total{{pid="{p}",comm="worker",zone="{z}"}} {p + step}')
    lines.append("# TYPE kepler_node_cpu_joules_total counter")
    lines.extend(f'kepler_node_cpu_joules_total{{zone="{z}"}} {99999 + step}' for z in ZONES)
    return ("\n".join(lines) + "\n").encode()


def _serve(bodies: list[bytes]) -> ThreadingHTTPServer:
    counter = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = bodies[counter["n"] % len(bodies)]
            counter["n"] += 1
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    bodies = [_exposition(i) for i in range(3)]
    server = _serve(bodies)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    services = {f"svc-{i}": {"container_name": f"^svc-{i}$"} for i in range(50)}
    mgr = SourceManager(parse_sources({"kepler": {"url": url, "interval_s": 15, "timeout_s": 30,
                                                   "services": services}}))
    mgr.poll_all()
    for _ in range(5):
        mgr.ops.add({f"svc-{i}": 100 for i in range(50)})
        mgr.poll_all()
    polls = 10
    t0 = time.perf_counter()
    for _ in range(polls):
        mgr.ops.add({f"svc-{i}": 100 for i in range(50)})
        mgr.poll_all()
    per_poll = (time.perf_counter() - t0) / polls
    assert mgr.health()["kepler"]["ok"], mgr.health()
    total = bodies[0].count(b"\n") - 3
    print(f"kepler poll, {total:,} series of which {CONTAINERS * len(ZONES):,} container series read "
          f"({len(bodies[0]) / 1e6:.1f} MB), 50 services: "
          f"{per_poll * 1e3:.1f} ms per poll (fetch + parse + deltas), off the scoring path")
    n = 200_000
    t0 = time.perf_counter()
    for _ in range(n):
        mgr.current()
    cached = (time.perf_counter() - t0) / n
    print(f"SourceManager.current(), cached snapshot: {cached * 1e9:.0f} ns per call")
    n = 2_000
    t0 = time.perf_counter()
    for _ in range(n):
        mgr._dirty = True  # force the rebuild the first call after each poll pays
        mgr.current()
    rebuild = (time.perf_counter() - t0) / n
    print(f"SourceManager.current(), rebuild (50 services): {rebuild * 1e6:.1f} us per call "
          "(at most once per second or per successful poll)")
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    main()
