"""The deployment kit (deploy/) against the real agent.

``kit`` parses every manifest; ``live`` is one real ``carbonspan agent`` process on 127.0.0.1
(kernel-picked ports) started with the ConfigMap's carbonspan.toml (ports, bind, archive dir and
window length overridden by flags) plus the ConfigMap's commented ``[sources]`` example pointed
at a stand-in Electricity Maps API, with the signal log on (``CARBONSPAN_SIGNAL_LOG_PATH``), fed
through the SDK settings of deploy/otel-collector/*.env, and scraped once it has archived
windows with spans and recorded a signal. The agent process is the one every process-level
test uses (``AgentProcess``, tests/_shared/agent_process.py).

``contract_metrics`` is what the workload-contract commands really write with ``--metrics``
(the Grafana row's source, through node_exporter's textfile collector): ``carbonspan run``
deciding on the signal log that live agent wrote, and ``carbonspan shadow run`` over a day of
runs and signals.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from agent_process import AgentProcess, wait_for
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # bench.workload (the pinned request generator) is not installed
    sys.path.append(str(REPO))
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
COLLECTOR = DEPLOY / "otel-collector"
DASHBOARD = DEPLOY / "grafana" / "carbonspan-dashboard.json"
REGION = "eu-west-3"




@dataclass
class Kit:
    """Every YAML document of deploy/kubernetes, by file, and the objects by kind and name."""

    files: dict[str, list[dict]]

    def all(self) -> list[dict]:
        return [doc for docs in self.files.values() for doc in docs]

    def get(self, kind: str, name: str) -> dict:
        found = [d for d in self.all() if d["kind"] == kind and d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]

    def of_kind(self, kind: str) -> list[dict]:
        return [d for d in self.all() if d["kind"] == kind]

    @property
    def statefulset(self) -> dict:
        (sts,) = self.of_kind("StatefulSet")
        return sts

    @property
    def container(self) -> dict:
        (c,) = [c for c in self.statefulset["spec"]["template"]["spec"]["containers"]
                if c["name"] == "agent"]
        return c

    @property
    def toml_text(self) -> str:
        (cm,) = self.of_kind("ConfigMap")
        return cm["data"]["carbonspan.toml"]

    def container_port(self, port: int | str) -> int:
        """A Service targetPort or probe port (number or name) as the container's port number."""
        if isinstance(port, int):
            return port
        (p,) = [p for p in self.container["ports"] if p["name"] == port]
        return p["containerPort"]


def load_yaml(path: Path) -> list[dict]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


@pytest.fixture(scope="session")
def kit() -> Kit:
    files = {p.name: load_yaml(p) for p in sorted(K8S.glob("*.yaml"))}
    assert files, "no manifests in deploy/kubernetes"
    return Kit(files)


def sources_example(toml_text: str) -> str:
    """The ConfigMap's commented ``[sources...]`` example, uncommented."""
    lines = toml_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# [sources"))
    out = []
    for line in lines[start:]:
        if not line.startswith("# "):
            break
        out.append(line[2:])
    return "\n".join(out) + "\n"


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (comments and blanks skipped), as docker --env-file reads them."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value
    return out


class _ElectricityMaps(BaseHTTPRequestHandler):
    """Electricity Maps v3 ``carbon-intensity/latest`` for zone FR (eu-west-3), key "k"."""

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.headers.get("auth-token") != "k" or "zone=FR" not in self.path:
            status, body = 401, b'{"error": "unauthorised"}'
        else:
            status, body = 200, json.dumps({
                "zone": "FR", "carbonIntensity": 40.0, "isEstimated": False,
                "datetime": datetime.now(UTC).strftime("%Y-%m-%dT%H:00:00.000Z")}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Live:
    agent: Any  # AgentProcess
    metrics_text: str
    sample_labels: dict[str, set[str]]  # sample name -> label names seen on it
    acked_spans: int
    signal_log: Path  # what the agent's [agent.signal_log] wrote


def sample_labels(text: str) -> dict[str, set[str]]:
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def scrape(agent: Any) -> str:
    with urllib.request.urlopen(f"{agent.http_url}/metrics", timeout=5) as resp:
        return resp.read().decode()


def _send_with_sdk_env(env_file: Path, agent: Any, service: str, requests: int) -> int:
    """Configure the SDK exporter only through ``env_file``'s variables (endpoint rewritten to
    this agent) and send ``requests`` traces of 3 spans; returns the spans acknowledged."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    env = read_env_file(env_file)
    protocol = env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
    port = agent.grpc_port if protocol == "grpc" else agent.http_port
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = re.sub(
        r"//[^/:]+:\d+", f"//127.0.0.1:{port}", env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])
    with mock.patch.dict(os.environ, env):
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            assert protocol == "http/protobuf", protocol
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter()  # everything from the environment
    acked = [0]

    class Counting:
        def export(self, spans):
            result = exporter.export(spans)
            if result.name == "SUCCESS":
                acked[0] += len(spans)
            return result

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    provider = TracerProvider(resource=Resource.create(
        {"service.name": service, "cloud.region": REGION, "cloud.provider": "aws"}))
    provider.add_span_processor(SimpleSpanProcessor(Counting()))
    tracer = provider.get_tracer("carbonspan-deploy-test")
    for i in range(requests):
        with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
            with tracer.start_as_current_span("SELECT orders", kind=SpanKind.CLIENT) as s:
                s.set_attribute("db.system", "postgresql")
                s.set_attribute("db.statement", f"SELECT * FROM orders WHERE id = {i}")
            with tracer.start_as_current_span("POST", kind=SpanKind.CLIENT) as s:
                s.set_attribute("http.request.method", "POST")
                s.set_attribute("url.full", "http://payments.internal/charge")
    provider.shutdown()
    return acked[0]


def _post_rejected_span(agent: Any) -> None:
    """One OTLP/JSON span with an all-zero trace id: accepted request, span rejected."""
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "bad-ids"}}]},
        "scopeSpans": [{"spans": [{"traceId": "0" * 32, "spanId": "1" * 16, "name": "x",
                                   "kind": 2, "startTimeUnixNano": str(time.time_ns() - 1000),
                                   "endTimeUnixNano": str(time.time_ns())}]}]}]}).encode()
    req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


@pytest.fixture(scope="session")
def live(kit: Kit, tmp_path_factory) -> Iterator[Live]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ElectricityMaps)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    source = sources_example(kit.toml_text)
    table = tomllib.loads(source)["sources"]
    (name,) = table
    config = (kit.toml_text + "\n" + source
              + f'base_url = "http://127.0.0.1:{server.server_address[1]}"\n')
    root = tmp_path_factory.mktemp("live-archives")
    signal_log = root.parent / "live-signals.jsonl"
    agent = AgentProcess(root, ["--bind", "127.0.0.1", "--window-seconds", "1"],
                         {table[name]["api_key_env"]: "k", "CARBONSPAN_SIGNAL_LOG_PATH": str(signal_log)}, config)
    try:
        agent.wait_ready(timeout=30)
        acked = _send_with_sdk_env(COLLECTOR / "sdk-grpc.env", agent, "checkout", 5)
        acked += _send_with_sdk_env(COLLECTOR / "sdk-http.env", agent, "payments", 5)
        _post_rejected_span(agent)
        wait_for(lambda: agent.metric("carbonspan_spans_accepted_total") >= acked
                 and agent.metric("carbonspan_open_window_spans") == 0
                 and agent.metric("carbonspan_windows_written_total") >= 1,
                 timeout=15, what="the spans to be archived")
        wait_for(lambda: agent.metric("carbonspan_source_up") >= 1
                 and "carbonspan_source_signal_age_seconds{" in scrape(agent)
                 and agent.metric("carbonspan_signal_log_rows_total", kind="observation") >= 1,
                 timeout=15, what="the Electricity Maps source to report and its value to be recorded")
        text = scrape(agent)
        yield Live(agent, text, sample_labels(text), acked, signal_log)
    finally:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait(timeout=10)
        server.shutdown()
        server.server_close()


CONTRACT = {"name": "nightly-reindex", "class": "flexible", "deadline": "06:00", "timezone": "UTC",
            "max_deferral_minutes": 240, "runtime": {"p50_minutes": 30, "p95_minutes": 60}, "energy_kwh": 10,
            "residency": [REGION], "home_region": REGION, "checkpoint": "required", "cancellation": "safe"}


def _shadow_day(d: Path) -> tuple[Path, Path]:
    """A day of 15-minute observations and a forecast for REGION, and one run at 01:00."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    rows = []
    for i in range(32):
        s, e = t0.timestamp() + (i - 4) * 900, t0.timestamp() + (i - 3) * 900
        iso = [datetime.fromtimestamp(x, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for x in (s, e, e + 60)]
        value = 100.0 if 3 * 3600 <= s - t0.timestamp() < 3.5 * 3600 else 300.0
        rows.append({"region": REGION, "start": iso[0], "end": iso[1], "value": value, "observed_at": iso[2],
                     "source": "test", "signal_type": "average", "version": "v1"})
        if s >= t0.timestamp():
            rows.append({**rows[-1], "observed_at": None, "issued_at": "2026-03-01T00:50:00Z"})
    sig = d / "shadow-signals.jsonl"
    sig.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = d / "runs.jsonl"
    runs.write_text(json.dumps({"job": CONTRACT["name"], "run_id": "a", "submitted": "2026-03-01T01:00:00Z",
                                "started": "2026-03-01T01:00:00Z", "finished": "2026-03-01T01:30:00Z",
                                "region": REGION}) + "\n")
    return sig, runs


@pytest.fixture(scope="session")
def contract_metrics(live: Live, tmp_path_factory) -> dict[str, set[str]]:
    """Sample name -> labels of the text files `carbonspan run --metrics` (on the live agent's
    signal log) and `carbonspan shadow run --metrics` really write."""
    d = tmp_path_factory.mktemp("contract-metrics")
    contract = d / "contract.yaml"
    contract.write_text(json.dumps({"workload_contract": CONTRACT}))
    cli = [sys.executable, "-m", "carbonspan"]
    run = subprocess.run([*cli, "run", "--contract", str(contract), "--signal", str(live.signal_log), "--log",
                          str(d / "run.log"), "--metrics", str(d / "run.prom"), "--", sys.executable, "-c", "pass"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr
    sig, runs = _shadow_day(d)
    shadow = subprocess.run([*cli, "shadow", "run", "--contracts", str(contract), "--runs", str(runs), "--signal",
                             str(sig), "--log", str(d / "shadow.log"), "--metrics", str(d / "shadow.prom")],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert shadow.returncode == 0, shadow.stderr
    labels: dict[str, set[str]] = {}
    for prom in (d / "run.prom", d / "shadow.prom"):
        for name, found in sample_labels(prom.read_text()).items():
            labels.setdefault(name, set()).update(found)
    return labels
