"""A real ``carbonspan agent`` subprocess on 127.0.0.1 (ports picked by the kernel: port 0),
shared by the daemon, deploy and sources tests (``from agent_process import AgentProcess``;
``tests/conftest.py`` puts tests/_shared on ``sys.path``)."""

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
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from agent.archive import read_records

REPO = Path(__file__).resolve().parents[2]
_LISTEN = re.compile(r"OTLP/gRPC [\d.]+:(\d+), OTLP/HTTP [\d.]+:(\d+)")


class AgentProcess:
    """One agent process; ``dir`` is its chain directory (root/agent-id)."""

    def __init__(self, root: Path, args: list[str], env: dict[str, str], config: str | None,
                 max_file_bytes: int | None = None) -> None:
        self.root = root
        self.agent_id = "test-agent"
        self.dir = root / self.agent_id
        cmd = [sys.executable, "-m", "carbonspan", "agent", "--archive-dir", str(root),
               "--agent-id", self.agent_id, "--grpc-port", "0", "--http-port", "0",
               # one process, one chain root/agent-id, unless the test asks for workers
               *([] if "--workers" in args else ["--workers", "1"]), *args]
        if config is not None:
            cfg = root.parent / f"{root.name}.toml"
            cfg.write_text(config)
            cmd += ["--config", str(cfg)]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
        full_env.update(env)
        if max_file_bytes is not None:
            cmd = [sys.executable, "-c", _EXEC_WITH_FSIZE, str(max_file_bytes), *cmd]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stdout: list[str] = []  # the lines wait_ready read (stdout_text() adds the rest)
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
                self.stdout.append(line)
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

    def stdout_text(self) -> str:
        """Everything the agent wrote to stdout so far (all of it once it has exited)."""
        while True:
            try:
                self.stdout.append(self.lines.get_nowait())
            except queue.Empty:
                return "".join(self.stdout)

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


# RLIMIT_FSIZE for the agent (``max_file_bytes``): writes past the limit fail with EFBIG, as on
# a full disk (Python ignores SIGXFSZ, so the process sees the error instead of dying). It is
# set by a small Python process that then execs the agent, not by preexec_fn: preexec_fn makes
# subprocess fork() instead of vfork, and in a test process that has used gRPC, gRPC's fork
# handler restarts its poller in the child, whose epoll descriptor close_fds then closes: the
# child aborts now and then (exit -6, "epoll_wait error: Bad file descriptor") before exec.
_EXEC_WITH_FSIZE = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def wait_for(pred: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> object:
    """Poll ``pred`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
