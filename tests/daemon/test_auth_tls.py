"""Bearer-token auth and TLS on both ports, with the SDK's exporters and raw clients.

The certificate is self-signed, made by the ``openssl`` CLI for 127.0.0.1 (the ``cryptography``
package is not a dependency of this project).
"""

from __future__ import annotations

import signal
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
import requests
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from tls_cert import self_signed

TOKEN = "t0ken-for-tests"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture(scope="module")
def secured(start_agent, tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    cert, key = self_signed(d)
    token = d / "token"
    token.write_text(TOKEN + "\n")
    agent = start_agent(
        "--window-seconds", "60",
        config=f'[agent.auth]\ntoken_file = "{token}"\n[agent.tls]\ncert_file = "{cert}"\n'
               f'key_file = "{key}"\n',
    )
    return agent, cert


def _send(recording, exporter: SpanExporter, service: str, n: int) -> list[SpanExportResult]:
    rec = recording(exporter)
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "cloud.region": "eu-west-3"}))
    provider.add_span_processor(SimpleSpanProcessor(rec))
    tracer = provider.get_tracer("t")
    for _ in range(n):
        with tracer.start_as_current_span("GET /", kind=SpanKind.SERVER):
            pass
    provider.shutdown()
    return rec.results


def test_grpc_exporter_with_token_over_tls(secured, recording) -> None:
    agent, cert = secured
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    ok = _send(recording, GrpcExporter(endpoint=agent.grpc_target, credentials=creds,
                            headers={"authorization": f"Bearer {TOKEN}"}), "tls-grpc", 3)
    assert ok == [SpanExportResult.SUCCESS] * 3
    bad = _send(recording, GrpcExporter(endpoint=agent.grpc_target, credentials=creds,
                             headers={"authorization": "Bearer wrong"}), "tls-grpc-bad", 1)
    assert bad == [SpanExportResult.FAILURE]


def test_raw_grpc_without_token_is_unauthenticated(secured) -> None:
    agent, cert = secured
    channel = grpc.secure_channel(agent.grpc_target,
                                  grpc.ssl_channel_credentials(root_certificates=cert.read_bytes()))
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as info:
        call(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "Bearer" in info.value.details()
    assert call(b"", timeout=10, metadata=[("authorization", f"Bearer {TOKEN}")]) == b""
    channel.close()


def test_plaintext_grpc_client_cannot_talk_to_tls_port(secured) -> None:
    agent, _ = secured
    channel = grpc.insecure_channel(agent.grpc_target)
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as info:
        call(b"", timeout=5, metadata=[("authorization", f"Bearer {TOKEN}")])
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    channel.close()


def test_http_exporter_with_token_over_tls(secured, recording) -> None:
    agent, cert = secured
    url = f"https://127.0.0.1:{agent.http_port}/v1/traces"
    ok = _send(recording, HttpExporter(endpoint=url, certificate_file=str(cert), session=_session(),
                            headers={"Authorization": f"Bearer {TOKEN}"}), "tls-http", 2)
    assert ok == [SpanExportResult.SUCCESS] * 2
    bad = _send(recording, HttpExporter(endpoint=url, certificate_file=str(cert), session=_session()),
                "tls-http-bad", 1)
    assert bad == [SpanExportResult.FAILURE]


def _session() -> requests.Session:
    """requests lets REQUESTS_CA_BUNDLE (set on some machines) override a session's CA file;
    trust_env=False makes the exporter use exactly the certificate_file it was given."""
    session = requests.Session()
    session.trust_env = False
    return session


def test_raw_https_401_names_the_header_and_health_needs_no_token(secured) -> None:
    agent, cert = secured
    ctx = ssl.create_default_context(cafile=str(cert))
    req = urllib.request.Request(f"https://127.0.0.1:{agent.http_port}/v1/traces", data=b"{}",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer nope"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10, context=ctx)
    assert info.value.code == 401
    assert info.value.headers["WWW-Authenticate"].startswith("Bearer")
    assert b"Authorization: Bearer" in info.value.read()
    with urllib.request.urlopen(f"https://127.0.0.1:{agent.http_port}/healthz", timeout=10,
                                context=ctx) as resp:
        assert resp.status == 200


def test_only_authorised_spans_are_archived(secured) -> None:
    agent, _ = secured
    assert agent.stop(signal.SIGTERM) == 0
    services: dict[str, int] = {}
    for rec in agent.records():
        for svc, n in rec["report"]["green_summary"]["per_service_requests"].items():
            services[svc] = services.get(svc, 0) + n
    assert services == {"tls-grpc": 3, "tls-http": 2}


def test_tls_key_mismatch_or_missing_file_fails_clearly(start_agent, tmp_path: Path) -> None:
    agent = start_agent(config=f'[agent.tls]\ncert_file = "{tmp_path}/none.pem"\n'
                               f'key_file = "{tmp_path}/none.key"\n', ready=False)
    assert agent.proc.wait(timeout=30) == 1
    assert "cannot start" in "".join(agent.stderr_text())


def test_a_passphrase_protected_key_is_named_with_what_to_do(start_agent, secured,
                                                              tmp_path: Path) -> None:
    """It used to end in "[Errno 22] Invalid argument" (OpenSSL's prompt, with no terminal)."""
    _, cert = secured
    key = cert.parent / "key.pem"
    locked = tmp_path / "locked.key"
    subprocess.run(["openssl", "pkey", "-in", str(key), "-aes256", "-passout", "pass:secret",
                    "-out", str(locked)], check=True, capture_output=True, timeout=60)
    agent = start_agent(config=f'[agent.tls]\ncert_file = "{cert}"\nkey_file = "{locked}"\n',
                        ready=False)
    assert agent.proc.wait(timeout=30) == 1
    err = "".join(agent.stderr_text())
    assert f"the TLS key {locked} is protected by a passphrase" in err
    assert "openssl pkey" in err and "Errno 22" not in err


def test_130_tls_connections_that_never_handshake_leave_health_up(start_agent, secured) -> None:
    """issue 12 item 1: the handshake ran in each connection's thread, so 130 silent TCP
    connections held every slot and the next client, the liveness probe too, got 503."""
    import socket

    _, cert = secured
    key = cert.parent / "key.pem"
    agent = start_agent(env={"CARBONSPAN_MAX_CONNECTIONS": "128"},
                        config=f'[agent.tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n')
    silent = [socket.create_connection(("127.0.0.1", agent.http_port), timeout=5)
              for _ in range(130)]
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        for path in ("/healthz", "/readyz"):
            with urllib.request.urlopen(f"https://127.0.0.1:{agent.http_port}{path}", timeout=10,
                                        context=ctx) as resp:
                assert resp.status == 200
    finally:
        for s in silent:
            s.close()
    assert agent.stop() == 0
