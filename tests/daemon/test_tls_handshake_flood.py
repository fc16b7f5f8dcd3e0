"""TLS connections that never handshake are counted and evicted, so health stays up (issue 12).

asyncio's ``create_server(ssl=...)`` tells the protocol about a connection only once its TLS
handshake is done, so the agent could neither count nor evict a connection that never sends a
ClientHello: each held a file for the 10 s handshake timeout, beyond ``max_connections``, and a
flood of them reached the open-file limit, where the OS refuses every new connection,
``/healthz`` and ``/readyz`` included (a liveness probe then restarts the pod). Now the port
accepts plain TCP, counts each connection from its accept and upgrades it with
``loop.start_tls``; a connection still handshaking is evicted like a slow request, oldest
first, counted as ``evicted_total{reason="handshake"}``.

Each test holds its silent connections for less than the 10 s handshake timeout, so on the old
code nothing had timed out yet when it checks (the checks below failed there: no connection
was evicted, the agent held every socket, and with 256 files health did not answer).
"""

from __future__ import annotations

import os
import resource
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families
from tls_cert import self_signed

CAP = 128
FILES = 256  # the second agent's open-file limit (RLIMIT_NOFILE), above CAP


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls-flood"))


def _tls_config(files: tuple[Path, Path]) -> str:
    cert, key = files
    return f'[agent.tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n'


@pytest.fixture(scope="module")
def agent(start_agent, tls_files):
    return start_agent("--window-seconds", "60", env={"CARBONSPAN_MAX_CONNECTIONS": str(CAP)},
                       config=_tls_config(tls_files))


def _get(agent, cert: Path, path: str, timeout: float = 3) -> tuple[int, bytes]:
    """GET over TLS: (status, body); (0, b"") when no answer came (refused, reset, timeout)."""
    ctx = ssl.create_default_context(cafile=str(cert))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{agent.http_port}{path}",
                                    timeout=timeout, context=ctx) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _metric(agent, cert: Path, name: str, **labels: str) -> float:
    status, body = _get(agent, cert, "/metrics")
    assert status == 200, f"/metrics answered {status}"
    total = 0.0
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def _sockets(pid: int) -> int:
    """Sockets the process holds open (its /proc fd table)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return n


def _silent(port: int, n: int) -> list[socket.socket]:
    """``n`` TCP connections that never send a byte (no ClientHello)."""
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]


def _export(agent, cert: Path) -> SpanExportResult:
    """One span with the SDK's OTLP/HTTP exporter over TLS."""
    session = requests.Session()
    session.trust_env = False  # use exactly certificate_file (REQUESTS_CA_BUNDLE may be set)
    exporter = OTLPSpanExporter(endpoint=f"https://127.0.0.1:{agent.http_port}/v1/traces",
                                certificate_file=str(cert), session=session, timeout=10)
    results: list[SpanExportResult] = []

    class Keep:
        def export(self, spans):
            results.append(exporter.export(spans))
            return results[-1]

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    provider = TracerProvider(resource=Resource.create({"service.name": "tls-flood"}))
    provider.add_span_processor(SimpleSpanProcessor(Keep()))
    with provider.get_tracer("t").start_as_current_span("GET /", kind=SpanKind.SERVER):
        pass
    provider.shutdown()
    session.close()
    return results[0]


def test_300_silent_tls_connections_are_evicted_and_health_and_ingest_answer(
        agent, tls_files) -> None:
    cert, _ = tls_files
    baseline = _sockets(agent.proc.pid)
    before = _metric(agent, cert, "carbonspan_http_connections_evicted_total", reason="handshake")
    silent = _silent(agent.http_port, 300)
    t0 = time.monotonic()
    try:
        # each was counted at its accept, and the oldest handshaking ones evicted to make room
        agent.wait_for(lambda: _metric(agent, cert, "carbonspan_http_connections_evicted_total",
                                       reason="handshake") >= before + 300 - CAP,
                       timeout=6, what="the silent connections to be evicted")
        assert _sockets(agent.proc.pid) <= baseline + CAP + 2  # + this probe, + one closing
        assert _metric(agent, cert, "carbonspan_http_connections") <= CAP
        assert _get(agent, cert, "/healthz") == (200, b"ok\n")
        assert _get(agent, cert, "/readyz") == (200, b"ready\n")
        assert _export(agent, cert) == SpanExportResult.SUCCESS
        assert time.monotonic() - t0 < 10  # all of it before any handshake could time out
    finally:
        for s in silent:
            s.close()


def test_failed_handshakes_are_counted_by_reason(agent, tls_files) -> None:
    cert, _ = tls_files

    def failures(reason: str) -> float:
        return _metric(agent, cert, "carbonspan_http_tls_handshake_failures_total",
                       reason=reason)

    error, closed = failures("error"), failures("closed")
    with socket.create_connection(("127.0.0.1", agent.http_port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP to the TLS port
        s.settimeout(5)
        try:
            while s.recv(4096):  # the agent closes it: no HTTP answer over a TLS port
                pass
        except ConnectionResetError:
            pass
    socket.create_connection(("127.0.0.1", agent.http_port), timeout=5).close()  # a TCP probe
    agent.wait_for(lambda: failures("error") >= error + 1 and failures("closed") >= closed + 1,
                   timeout=10, what="the failed handshakes to be counted")


def test_the_export_was_archived_once(agent) -> None:
    assert agent.stop() == 0
    spans = sum(r["report"]["window"]["spans"] for r in agent.records())
    assert spans == 1


def test_at_the_open_file_limit_silent_tls_connections_free_their_files(
        start_agent, tls_files) -> None:
    """The agent may open 256 files and hold 128 connections; 600 silent TLS connections (more
    than it has files) arrive: each evicted one frees its file, so the probes get through.
    Before, the first ~230 held every file for 10 s and the probes waited in the kernel's
    queue behind the rest."""
    cert, _ = tls_files
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, hard))  # inherited by the agent
    try:
        agent = start_agent("--window-seconds", "60", env={"CARBONSPAN_MAX_CONNECTIONS": str(CAP)},
                            config=_tls_config(tls_files), ready=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    agent.wait_ready()
    silent = _silent(agent.http_port, 600)
    t0 = time.monotonic()
    try:
        agent.wait_for(lambda: _get(agent, cert, "/healthz", timeout=2)[0] == 200, timeout=6,
                       what="/healthz over TLS during the flood")
        assert _get(agent, cert, "/readyz") == (200, b"ready\n")
        assert _sockets(agent.proc.pid) < FILES
        assert _metric(agent, cert, "carbonspan_http_connections_evicted_total",
                       reason="handshake") >= 600 - CAP
        assert time.monotonic() - t0 < 10  # before any handshake could time out
    finally:
        for s in silent:
            s.close()
    assert agent.stop() == 0
