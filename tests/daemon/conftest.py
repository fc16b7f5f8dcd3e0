"""Fixtures around a real ``carbonspan agent`` subprocess (``tests/_shared/agent_process.py``)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from agent_process import AgentProcess

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # bench.workload (the pinned request generator) is not installed
    sys.path.append(str(REPO))


class _Reply(BaseHTTPRequestHandler):
    """Answers GET with what ``answer(path, headers) -> (status, content type, body)`` says."""

    answer: Callable[[str, object], tuple[int, str, bytes]]

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        status, ctype, body = type(self).answer(self.path, self.headers)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def loopback_http() -> Iterator[Callable[..., str]]:
    """``loopback_http(answer)`` -> base URL of an http.server on 127.0.0.1 (port 0) that
    answers every GET with ``answer(path, headers) -> (status, content type, body)``."""
    servers: list[ThreadingHTTPServer] = []

    def serve(answer: Callable[[str, object], tuple[int, str, bytes]]) -> str:
        handler = type("Handler", (_Reply,), {"answer": staticmethod(answer)})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def start_agent(tmp_path_factory) -> Iterator[Callable[..., AgentProcess]]:
    """``start_agent(*args, env=..., config=..., root=..., max_file_bytes=...)`` -> a ready
    AgentProcess (``max_file_bytes``: a per-file size limit, to make the disk "fill up")."""
    procs: list[AgentProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, config: str | None = None,
              root: Path | None = None, ready: bool = True,
              max_file_bytes: int | None = None) -> AgentProcess:
        root = root or tmp_path_factory.mktemp("archives")
        p = AgentProcess(root, list(args), env or {}, config, max_file_bytes)
        procs.append(p)
        return p.wait_ready() if ready else p

    yield start
    for p in procs:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(timeout=10)


class Recording:
    """Wraps a real SpanExporter and keeps each export's result: the client-side
    acknowledgement. ``after_export`` (optional) runs after each export returns."""

    def __init__(self, inner, after_export: Callable[[object, int], None] | None = None) -> None:
        self.inner, self.results, self.after_export = inner, [], after_export
        self.acked_spans = 0

    def export(self, spans):
        result = self.inner.export(spans)
        self.results.append(result)
        if result.name == "SUCCESS":
            self.acked_spans += len(spans)
        if self.after_export is not None:
            self.after_export(result, len(self.results))
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        self.inner.shutdown()


@pytest.fixture(scope="module")
def recording() -> type[Recording]:
    """The Recording exporter wrapper (test modules cannot import each other)."""
    return Recording

