"""Why the Collector fragment routes by trace id (deploy/otel-collector/carbonspan-fanout.yaml),
held to real agents: two agents started with the kit's carbonspan.toml, fed by the Python SDK's
gRPC exporter with the fragment's ``protocol.otlp`` settings (plaintext, gzip, timeout). Spans
routed as the ``loadbalancing`` exporter with ``routing_key: traceID`` does (every span of a
trace to one agent; a stand-in for its hash ring) count each request once over the fleet;
spans spread round-robin count every request at each agent it reaches."""

from __future__ import annotations

import itertools
import signal

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import Compression, OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind

from .conftest import COLLECTOR, REGION, AgentProcess, Kit, load_yaml

TRACES = 4  # requests of 3 spans: a SERVER root, a database and an HTTP client span


class _Counting(IdGenerator):
    """Trace ids 1, 2, 3, ... so that routing by trace id is deterministic."""

    def __init__(self) -> None:
        self._trace, self._span = itertools.count(1), itertools.count(1)

    def generate_trace_id(self) -> int:
        return next(self._trace)

    def generate_span_id(self) -> int:
        return next(self._span)


class _Router(SpanProcessor):
    """Ends each span at one of ``targets``: by trace id, or round-robin span by span."""

    def __init__(self, targets: list[SpanProcessor], by_trace: bool) -> None:
        self.targets, self.by_trace, self._next = targets, by_trace, itertools.cycle(range(len(targets)))

    def on_end(self, span) -> None:
        i = span.context.trace_id % len(self.targets) if self.by_trace else next(self._next)
        self.targets[i].on_end(span)

    def shutdown(self) -> None:
        for t in self.targets:
            t.shutdown()


def _exporter(agent: AgentProcess, otlp: dict) -> OTLPSpanExporter:
    assert otlp["compression"] == "gzip" and otlp["timeout"].endswith("s")
    return OTLPSpanExporter(endpoint=agent.grpc_target, insecure=otlp["tls"]["insecure"],
                            compression=Compression.Gzip, timeout=int(otlp["timeout"][:-1]))  # fmt: skip


def _run(kit: Kit, tmp_path, by_trace: bool) -> list[dict]:
    """Send TRACES requests through the router to two kit-configured agents; their windows."""
    (cfg,) = load_yaml(COLLECTOR / "carbonspan-fanout.yaml")
    lb = cfg["exporters"]["loadbalancing/carbonspan"]
    assert lb["routing_key"] == "traceID"
    (tmp_path / "agents").mkdir()
    agents = [AgentProcess(tmp_path / "agents" / f"pod-{i}", ["--bind", "127.0.0.1", "--window-seconds", "60"],
                           {}, kit.toml_text) for i in range(2)]  # fmt: skip
    try:
        for agent in agents:
            agent.wait_ready(timeout=30)
        targets = [SimpleSpanProcessor(_exporter(a, lb["protocol"]["otlp"])) for a in agents]
        provider = TracerProvider(resource=Resource.create({"service.name": "shop", "cloud.region": REGION}),
                                  id_generator=_Counting())  # fmt: skip
        provider.add_span_processor(_Router(targets, by_trace))
        tracer = provider.get_tracer("carbonspan-deploy-test")
        for _ in range(TRACES):
            with tracer.start_as_current_span("GET /cart", kind=SpanKind.SERVER):
                with tracer.start_as_current_span("SELECT", kind=SpanKind.CLIENT) as db:
                    db.set_attributes({"db.system.name": "postgresql", "db.operation.name": "SELECT"})
                with tracer.start_as_current_span("POST", kind=SpanKind.CLIENT) as http:
                    http.set_attributes({"http.request.method": "POST", "url.full": "http://pay/charge"})
        provider.shutdown()
        for agent in agents:
            assert agent.stop(signal.SIGTERM) == 0
    finally:
        for agent in agents:
            if agent.proc.poll() is None:
                agent.kill9()
    return [[rec["report"]["window"] for rec in agent.records()] for agent in agents]


def test_routing_by_trace_id_counts_each_request_once_over_the_agents(kit: Kit, tmp_path) -> None:
    per_agent = _run(kit, tmp_path, by_trace=True)
    traces = [sum(w["traces"] for w in windows) for windows in per_agent]
    assert traces == [TRACES // 2, TRACES // 2]  # both agents used, each trace at one
    assert sum(traces) == sum(w["root_spans"] for windows in per_agent for w in windows) == TRACES
    assert sum(w["spans"] for windows in per_agent for w in windows) == 3 * TRACES


def test_round_robin_would_count_every_request_at_each_agent(kit: Kit, tmp_path) -> None:
    # what the fragment avoids: 3 spans of a trace alternate over 2 agents, so both see it
    per_agent = _run(kit, tmp_path, by_trace=False)
    traces = [sum(w["traces"] for w in windows) for windows in per_agent]
    assert traces == [TRACES, TRACES]
    assert sum(w["root_spans"] for windows in per_agent for w in windows) == TRACES
