"""Loopback HTTP endpoints that speak the sources' real formats, and a manual clock.

``endpoint`` is a ``ThreadingHTTPServer`` on 127.0.0.1 (port 0) in a thread. A test sets
the answer per path (status, body, content type, required headers) and can make a path hang
until released, to exercise timeouts without sleeping in the test. ``dispatch``, when set,
answers first (a ``Route`` for the full request path, or ``None`` to use the routes), for
APIs that answer by query parameters.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest
from agent_process import AgentProcess


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    content_type: str = "text/plain; version=0.0.4"
    require: dict[str, str] = field(default_factory=dict)  # header -> value, else 401
    hang: bool = False
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers (Location)


class FakeEndpoint:
    def __init__(self, tls: tuple[str, str] | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.release = threading.Event()
        self.dispatch: Callable[[str], Route | None] | None = None
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                endpoint.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                route = endpoint.dispatch(self.path) if endpoint.dispatch is not None else None
                route = route or endpoint.routes.get(self.path) or endpoint.routes.get(self.path.split("?")[0])
                if route is None:
                    return self._send(404, b"not found", "text/plain")
                if route.hang:
                    endpoint.release.wait(10.0)
                for header, value in route.require.items():
                    if self.headers.get(header) != value:
                        return self._send(401, b'{"error":"unauthorized"}', "application/json")
                self._send(route.status, route.body, route.content_type, route.headers)

            def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    for name, value in (extra or {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (timeout tests)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base + path

    def set(self, path: str, body: bytes | str, status: int = 200, **kw: object) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.routes[path] = Route(body=data, status=status, **kw)  # type: ignore[arg-type]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    ep = FakeEndpoint()
    yield ep
    ep.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl CLI)."""
    d = tmp_path_factory.mktemp("tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=30)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=carbonspan test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf")
    return {"ca": str(d / "ca.pem"), "cert": str(d / "srv.pem"), "key": str(d / "srv.key")}


@pytest.fixture
def tls_endpoint(tls_files: dict[str, str]) -> Iterator[FakeEndpoint]:
    ep = FakeEndpoint(tls=(tls_files["cert"], tls_files["key"]))
    yield ep
    ep.close()


class ManualClock:
    """Wall and monotonic time a test advances by hand, for exact interval arithmetic."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll ``predicate`` until true or the deadline; never a bare sleep."""
    import time

    deadline = time.monotonic() + timeout_s
    event = threading.Event()
    while time.monotonic() < deadline:
        if predicate():
            return True
        event.wait(0.01)
    return predicate()


@pytest.fixture
def until() -> Callable[..., bool]:
    return wait_for


# ---- a real agent process with a [sources] table ------------------------------------------------
def start_agent_with(tmp_path, config: str, env: dict[str, str]) -> AgentProcess:
    """``carbonspan agent`` on loopback with ``config``; windows of 60 s (archived at stop)."""
    return AgentProcess(tmp_path / "arch", ["--window-seconds", "60"], env, config)


def post_spans(agent: AgentProcess) -> None:
    """Five SQL client spans of checkout over OTLP/HTTP JSON (region: the config's default)."""
    now = time.time_ns()
    spans = [{"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "SELECT", "kind": 3,
              "startTimeUnixNano": str(now - 10**9), "endTimeUnixNano": str(now - 10**9 + 10**6),
              "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}}]} for i in range(5)]
    body = orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}}]},
        "scopeSpans": [{"spans": spans}]}]})  # fmt: skip
    req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
