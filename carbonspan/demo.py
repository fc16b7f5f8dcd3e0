"""``carbonspan demo`` (``make demo``): the main job end to end on embedded defaults.

1. start ``carbonspan agent`` on loopback (free ports) with a temporary archive directory;
2. run a small shop instrumented with the real OpenTelemetry SDK, five services in four
   regions: ``frontend`` calls ``checkout`` over real HTTP (a loopback ``http.server``, W3C
   trace context propagated), ``checkout`` and ``inventory`` run real SQL on SQLite
   (``db.statement`` as instrumentations set it), ``checkout`` publishes to an in-process
   queue (messaging producer) that ``notifications`` consumes; half the services export over
   OTLP/gRPC and half over OTLP/HTTP;
3. stop the agent (SIGTERM: it archives the open window) and print the per-service table
   from the archive, the chain check and, when the aggregator is installed, the disclosure
   summary folded from the same archive over the period the windows cover, with the carbon
   breakdown that explains why its total exceeds the per-service column.

W3C trace context crosses the HTTP hop and the queue (as the HTTP and messaging
instrumentations carry it), so one shop request is one trace with one root span: the embodied
carbon term (SCI's M, charged per request) counts shop requests, not hops. The demo runs on the
defaults, so M is charged per distinct trace in each window (``[green] embodied_per =
"trace"``, the specification): a request whose spans straddle a window close is charged in
both windows. The breakdown prints the root-span count beside the trace count, which is what
``embodied_per = "root_span"`` would charge (once per request), so the overcount is visible.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

EPILOG = """\
example:
  carbonspan demo                  # 8 s of traffic (the default), then the tables
  carbonspan demo --seconds 20 --keep demo-archives
"""

#: service -> (region, exporter protocol)
SERVICES = {
    "frontend": ("us-east-1", "grpc"),
    "checkout": ("eu-west-3", "grpc"),
    "inventory": ("eu-central-1", "http"),
    "payments": ("pl", "http"),
    "notifications": ("europe-west1", "grpc"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the main job end to end on embedded defaults",
        description="Start the agent on loopback, send it traffic from a small multi-service "
        "shop instrumented with the OpenTelemetry SDK, stop it, and print what was archived.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seconds", type=_seconds, default=8.0,
                   help="how long to run the workload (default 8; at most 600)")
    p.add_argument("--keep", type=Path, default=None,
                   help="archive root to keep (default: a temporary directory); a chain a "
                   "previous run left there is continued")
    p.set_defaults(func=handle)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 600:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, 600]")
    return value


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # piped (make demo in CI): wide enough for the tables
        console = Console(width=120)
    if args.keep is not None:
        try:
            args.keep.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"carbonspan demo: --keep {args.keep}: cannot use it as the archive root "
                  f"({exc.strerror}); give a directory", file=sys.stderr)
            return 2
        return _run(console, args.keep, args.seconds, args.keep / "report.html", temporary=False)
    with tempfile.TemporaryDirectory(prefix="carbonspan-demo-") as tmp:  # the page outlives the archives
        return _run(console, Path(tmp), args.seconds, Path(tempfile.gettempdir()) / "carbonspan-demo-report.html",
                    temporary=True)


def plural(n: int, noun: str) -> str:
    """``1 window``, ``2 windows``: the count with thousands separators and the noun agreeing."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def chain_line(chain_dir: Path, verdict: str, temporary: bool) -> str:
    """The hash-chain check's line. Without ``--keep`` the archive is in a temporary directory
    deleted when the demo exits, so its path would point at nothing: the line says so instead."""
    if temporary:
        return f"hash chain (in a temporary directory, deleted on exit; --keep DIR keeps it): {verdict}"
    return f"hash chain of {chain_dir}: {verdict}"


def _run(console: Any, root: Path, seconds: float, html: Path, temporary: bool) -> int:
    agent = _start_agent(root)
    try:
        grpc_target, http_url = agent.ports
        console.print(f"[bold]agent[/] listening: OTLP/gRPC {grpc_target}, OTLP/HTTP {http_url}")
        stats = Shop(grpc_target, http_url).run(seconds)
        console.print(f"[bold]workload[/]: {plural(stats['requests'], 'shop request')} over {seconds:.0f} s "
                      f"({plural(stats['spans'], 'span')})")
    finally:
        code = agent.stop()
    if code != 0:
        console.print(f"[red]agent exited with {code}[/]:\n{agent.stderr_tail()}")
        return 1
    records = _print_archive(console, root / "demo", temporary)
    _print_disclosure(console, root, records, html)
    return 0


class _Agent:
    def __init__(self, root: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "carbonspan", "agent", "--archive-dir", str(root),
             "--agent-id", "demo", "--grpc-port", "0", "--http-port", "0",
             "--window-seconds", "3", "--workers", "1"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._stderr: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"OTLP/gRPC ([\d.]+:\d+), OTLP/HTTP ([\d.]+:\d+)", line)
        if not m:
            self.proc.wait(timeout=30)
            raise RuntimeError(f"the agent did not start:\n{self.stderr_tail()}")
        self.ports = (m.group(1), f"http://{m.group(2)}")

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def stderr_tail(self) -> str:
        return "".join(self._stderr[-20:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _start_agent(root: Path) -> _Agent:
    return _Agent(root)


class Shop:
    """The demo workload: real HTTP, real SQL, an in-process queue, one tracer per service."""

    def __init__(self, grpc_target: str, http_url: str) -> None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as G
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as H
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.providers = {}
        self.tracers = {}
        for svc, (region, proto) in SERVICES.items():
            exporter = (G(endpoint=grpc_target, insecure=True) if proto == "grpc"
                        else H(endpoint=f"{http_url}/v1/traces"))
            provider = TracerProvider(resource=Resource.create(
                {"service.name": svc, "cloud.region": region, "deployment.environment": "demo"}))
            provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
            self.providers[svc] = provider
            self.tracers[svc] = provider.get_tracer("carbonspan.demo")
        self.db_lock = threading.Lock()
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.executescript(
            "CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER);"
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT, qty INTEGER);"
            + "".join(f"INSERT INTO stock VALUES ('sku-{i}', 1000);" for i in range(50)))
        self.outbox: queue.Queue[tuple[int, dict]] = queue.Queue()
        self.requests = 0
        self.spans = 0
        self._count = threading.Lock()

    # -- spans helpers ---------------------------------------------------------------
    def _span(self, svc: str, name: str, kind: Any, attrs: dict | None = None, context: Any = None):
        with self._count:
            self.spans += 1
        return self.tracers[svc].start_as_current_span(name, kind=kind, attributes=attrs,
                                                       context=context)

    def _sql(self, svc: str, statement: str, params: tuple = ()) -> list:
        from opentelemetry.trace import SpanKind

        verb = statement.split()[0].upper()
        with self._span(svc, f"{verb} shop", SpanKind.CLIENT,
                        {"db.system": "sqlite", "db.name": "shop", "db.statement": statement}):
            with self.db_lock:
                rows = self.db.execute(statement, params).fetchall()
                self.db.commit()
            return rows

    # -- services ----------------------------------------------------------------------
    def checkout_handler(self, sku: str, headers: Any) -> bytes:
        from opentelemetry.propagate import extract, inject
        from opentelemetry.trace import SpanKind

        with self._span("checkout", "POST /checkout", SpanKind.SERVER,
                        {"http.request.method": "POST", "url.path": "/checkout"},
                        # header names are case-insensitive; the propagator looks up
                        # lower-case "traceparent" and urllib sends "Traceparent"
                        context=extract({k.lower(): v for k, v in headers.items()})):
            self._sql("checkout", "SELECT qty FROM stock WHERE sku = ?", (sku,))
            self._sql("checkout", "INSERT INTO orders (sku, qty) VALUES (?, 1)", (sku,))
            with self._span("inventory", "reserve", SpanKind.SERVER):
                self._sql("inventory", "UPDATE stock SET qty = qty - 1 WHERE sku = ?", (sku,))
            with self._span("payments", "charge", SpanKind.SERVER):
                with self._span("payments", "POST", SpanKind.CLIENT, {
                        "http.request.method": "POST", "url.full": "https://psp.example/charge",
                        "http.response.body.size": 512}):
                    pass
            with self._span("checkout", "orders publish", SpanKind.PRODUCER,
                            {"messaging.system": "python_queue",
                             "messaging.destination.name": "orders"}):
                carrier: dict[str, str] = {}
                inject(carrier)  # message headers, as messaging instrumentations do
                self.outbox.put((1, {"sku": sku, "headers": carrier}))
            return f'{{"ok": true, "sku": "{sku}"}}'.encode()

    def _notifications(self, stop: threading.Event) -> None:
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind

        while not stop.is_set() or not self.outbox.empty():
            try:
                _, msg = self.outbox.get(timeout=0.1)
            except queue.Empty:
                continue
            with self._span("notifications", "orders process", SpanKind.CONSUMER,
                            {"messaging.system": "python_queue",
                             "messaging.destination.name": "orders"},
                            context=extract(msg["headers"])):
                self._sql("notifications", "SELECT count(*) FROM orders")

    def _user(self, url: str, stop: threading.Event, k: int) -> None:
        from opentelemetry.propagate import inject
        from opentelemetry.trace import SpanKind

        i = 0
        while not stop.is_set():
            sku = f"sku-{(k * 7 + i) % 50}"
            with self._span("frontend", "GET /buy", SpanKind.SERVER, {"http.request.method": "GET"}):
                with self._span("frontend", "POST", SpanKind.CLIENT,
                                {"http.request.method": "POST", "url.full": f"{url}/checkout"}) as s:
                    headers: dict[str, str] = {}
                    inject(headers)
                    req = urllib.request.Request(f"{url}/checkout?sku={sku}", data=b"{}",
                                                 headers=headers)
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        body = resp.read()
                    s.set_attribute("http.response.status_code", resp.status)
                    s.set_attribute("http.response.body.size", len(body))
            with self._count:
                self.requests += 1
            i += 1
            time.sleep(0.02)  # a user's think time, so the demo is a shop, not a load test

    def run(self, seconds: float) -> dict[str, int]:
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sku = self.path.split("sku=", 1)[-1]
                body = shop.checkout_handler(sku, self.headers)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        stop = threading.Event()
        threads = [threading.Thread(target=self._notifications, args=(stop,))]
        threads += [threading.Thread(target=self._user, args=(url, stop, k)) for k in range(4)]
        for t in threads:
            t.start()
        stop.wait(seconds)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        server.shutdown()
        for provider in self.providers.values():
            provider.force_flush(10_000)
            provider.shutdown()
        return {"requests": self.requests, "spans": self.spans}


def _print_archive(console: Any, chain_dir: Path, temporary: bool) -> list[dict[str, Any]]:
    """Print the per-service table of ``chain_dir``; return its (readable) records."""
    from rich.table import Table

    from agent.archive import read_records
    from schema.archive import BODY_KEY
    from schema.chain import verify_chain

    records = read_records(chain_dir)
    findings, _, count = verify_chain(records)
    per: dict[str, dict[str, Any]] = {}
    spans = 0
    for _, rec in records:
        if rec is None:
            continue
        rep = rec[BODY_KEY]
        spans += rep["window"]["spans"]
        gs = rep["green_summary"]
        for svc in set(gs["per_service_energy_kwh"]) | set(gs["per_service_requests"]):
            row = per.setdefault(svc, {"region": gs["per_service_region"].get(svc, "unknown"),
                                       "requests": 0, "kwh": 0.0, "kg": 0.0, "model": ""})
            row["requests"] += gs["per_service_requests"].get(svc, 0)
            row["kwh"] += gs["per_service_energy_kwh"].get(svc, 0.0)
            row["kg"] += gs["per_service_carbon_kgco2eq"].get(svc, 0.0)
            row["model"] = gs["per_service_energy_model"].get(svc, row["model"])
    table = Table(title=f"per-service energy and carbon from the archive ({plural(count, 'window')}, "
                        f"{plural(spans, 'span')})")
    for col in ("service", "region", "requests", "energy (kWh)", "carbon (gCO2e)", "model"):
        table.add_column(col, justify="right" if col[0] in "rec" and col != "region" else "left")
    for svc, row in sorted(per.items(), key=lambda kv: -kv[1]["kg"]):
        table.add_row(svc, row["region"], f"{row['requests']:,}", f"{row['kwh']:.3e}",
                      f"{row['kg'] * 1000:.3e}", row["model"])
    console.print(table)
    verdict = "[green]intact[/]" if not findings else f"[red]{len(findings)} findings[/]"
    console.print(chain_line(chain_dir, verdict, temporary))
    return [rec for _, rec in records if rec is not None]


def _print_disclosure(console: Any, root: Path, records: list[dict[str, Any]], html: Path) -> None:
    """The aggregator's disclosure summary of the same archive, over the period its windows
    cover (first window start .. last window end), the carbon breakdown, and last the HTML
    report written to ``html`` with its path."""
    try:
        from aggregator.engines import run_local
        from aggregator.files import discover
        from aggregator.read import Period
        from aggregator.render import print_summary
        from aggregator.render_html import generated_at, render_html
        from aggregator.report import build_report
    except ImportError as exc:  # hook: an agent-only build has no aggregator
        console.print(f"(disclosure report skipped: the aggregator could not be imported: {exc})")
        return
    if not records:
        console.print("(no windows archived: nothing to disclose)")
        return
    from schema.archive import BODY_KEY
    from schema.times import to_epoch

    # a window belongs to the period when its start lies in [start, end)
    windows = [r[BODY_KEY]["window"] for r in records]
    period = Period(min(to_epoch(w["start"]) for w in windows), max(to_epoch(w["end"]) for w in windows))
    report = build_report(run_local(discover([str(root)]), period), period, "carbonspan demo")
    print_summary(report, console)
    _print_breakdown(console, report, sum(w["traces"] for w in windows),
                     sum(w.get("root_spans", 0) for w in windows))
    html.write_text(render_html(report, generated_at()), encoding="utf-8")
    console.print(f"HTML report: {html}", soft_wrap=True)


def _print_breakdown(console: Any, report: Any, traces: int, root_spans: int) -> None:
    """Why the total exceeds the per-service column: it also holds embodied carbon and hosts."""
    from rich.markup import escape
    from rich.table import Table

    from agent.config import Config
    from aggregator.render import fmt_kg

    b = report.aggregate.carbon_breakdown
    per_trace = Config().green.embodied_carbon_per_request_gco2
    table = Table(title="carbon breakdown: total = operational + embodied + hosts")
    table.add_column("term")
    table.add_column("carbon", justify="right")
    table.add_column("what it is")
    table.add_row("operational", fmt_kg(b.operational_kgco2eq),
                  "the services' energy x grid intensity x PUE: the sum of the carbon column")
    table.add_row("embodied", fmt_kg(b.embodied_kgco2eq),
                  f"{traces:,} traces over the windows x {per_trace:g} g per request: hardware "
                  f"manufacture (SCI's M term). A trace straddling a window close counts in "
                  f"each; the {root_spans:,} root spans count each request once "
                  f'(embodied_per = "root_span")')
    table.add_row("database hosts", fmt_kg(b.database_kgco2eq),
                  escape("[[green.hosts]] of kind database: watts x window length (none in the demo)"))
    table.add_row("messaging hosts", fmt_kg(b.messaging_kgco2eq),
                  escape("[[green.hosts]] of kind messaging (none in the demo)"))
    table.add_row("total", fmt_kg(report.aggregate.total_carbon_kgco2eq), "the headline figure")
    console.print(table)
    serving = sum(1 for a in report.applications if a.requests)
    console.print(f"requests: the {report.aggregate.total_requests:,} requests of the summary (the R of "
                  f"SCI per request) are each service's SERVER and CONSUMER spans, so a shop request "
                  f"counts once per service it reaches ({serving} services here); the {root_spans:,} "
                  "root spans are the shop requests", soft_wrap=True)
