"""A real ``carbonspan agent`` subprocess on 127.0.0.1 (ports picked by the kernel: port 0)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.archive import read_records

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # bench.workload (the pinned request generator) is not installed
    sys.path.append(str(REPO))
_LISTEN = re.compile(r"OTLP/gRPC [\d.]+:(\d+), OTLP/HTTP [\d.]+:(\d+)")


class AgentProcess:
    """One agent process; ``dir`` is its chain directory (root/agent-id)."""

    def __init__(self, root: Path, args: list[str], env: dict[str, str], config: str | None,
                 max_file_bytes: int | None = None) -> None:
        self.root = root
        self.agent_id = "test-agent"
        self.dir = root / self.agent_id
        cmd = [sys.executable, "-m", "carbonspan", "agent", "--archive-dir", str(root),
               "--agent-id", self.agent_id, "--grpc-port", "0", "--http-port", "0", *args]
        if config is not None:
            cfg = root.parent / f"{root.name}.toml"
            cfg.write_text(config)
            cmd += ["--config", str(cfg)]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
        full_env.update(env)
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     preexec_fn=_file_size_limit(max_file_bytes))
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._stderr_open = True
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._collect, daemon=True).start()
        self.grpc_port = self.http_port = 0
        self.startup_line = ""

    @staticmethod
    def _pump(stream, out: queue.Queue) -> None:
        for line in stream:
            out.put(line)

    def _collect(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
        self._stderr_open = False

    def wait_ready(self, timeout: float = 30.0) -> AgentProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise AssertionError(f"agent exited {self.proc.returncode}: {''.join(self.stderr)}") from None
                continue
            m = _LISTEN.search(line)
            if m:
                self.grpc_port, self.http_port = int(m.group(1)), int(m.group(2))
                self.startup_line = line
                return self
        raise AssertionError(f"agent not ready in {timeout} s: {''.join(self.stderr)}")

    def stderr_text(self) -> list[str]:
        """What the agent wrote to stderr so far (complete once it has exited)."""
        if self.proc.poll() is not None:
            deadline = time.monotonic() + 5
            while self._stderr_open and time.monotonic() < deadline:
                time.sleep(0.01)
        return list(self.stderr)

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def records(self) -> list[dict]:
        out = []
        for loc, rec in read_records(self.dir):
            assert rec is not None, f"unreadable archive line at {loc}"
            out.append(rec)
        return out

    wait_for = staticmethod(lambda *a, **kw: wait_for(*a, **kw))

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (from GET /metrics)."""
        with urllib.request.urlopen(f"{self.http_url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    total += sample.value
        return total


def _file_size_limit(limit: int | None) -> Callable[[], None] | None:
    """RLIMIT_FSIZE for the agent: writes past ``limit`` bytes fail with EFBIG, as on a full
    disk (Python ignores SIGXFSZ, so the process sees the error instead of dying)."""
    if limit is None:
        return None

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def wait_for(pred: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> object:
    """Poll ``pred`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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

