"""A real `carbonspan agent` process for the sources' end-to-end tests: start it with a
config and environment, find its OTLP/HTTP port, post spans, stop it, read its archive."""

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
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[2]
LISTEN = re.compile(r"OTLP/HTTP [\d.]+:(\d+)")


class Agent:
    """``carbonspan agent`` on ephemeral loopback ports, archiving as agent ``a1``."""

    def __init__(self, tmp_path: Path, config: str, env: dict[str, str]) -> None:
        cfg = tmp_path / "carbonspan.toml"
        cfg.write_text(config)
        self.archive = tmp_path / "arch" / "a1"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")} | env
        cmd = [sys.executable, "-m", "carbonspan", "agent", "--config", str(cfg), "--archive-dir",
               str(tmp_path / "arch"), "--agent-id", "a1", "--grpc-port", "0", "--http-port", "0",
               "--window-seconds", "60"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)  # fmt: skip
        self.stdout: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self._lines.put(x) for x in self.proc.stdout],  # type: ignore[union-attr]
                         daemon=True).start()  # fmt: skip

    def http_port(self, timeout_s: float = 30.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.stdout.append(self._lines.get(timeout=0.2))
            except queue.Empty:
                assert self.proc.poll() is None, f"agent exited: {self.proc.stderr.read()}"  # type: ignore[union-attr]
                continue
            if m := LISTEN.search(self.stdout[-1]):
                return int(m.group(1))
        raise AssertionError("agent did not start")

    def post_spans(self, body: bytes) -> None:
        req = urllib.request.Request(f"http://127.0.0.1:{self.http_port()}/v1/traces", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200

    def stop(self) -> str:
        """SIGTERM, a clean exit, and the agent's stderr; the rest of stdout joins ``stdout``."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0
        while not self._lines.empty():
            self.stdout.append(self._lines.get())
        return self.proc.stderr.read()  # type: ignore[union-attr]

    def records(self) -> list[dict[str, Any]]:
        return [orjson.loads(x) for f in sorted(self.archive.glob("windows-*.jsonl"))
                for x in f.read_bytes().splitlines() if x.strip()]  # fmt: skip


def otlp_json() -> bytes:
    """Five SQL client spans of checkout, region left to the config's default_region."""
    now = time.time_ns()
    spans = [{"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "SELECT", "kind": 3,
              "startTimeUnixNano": str(now - 10**9), "endTimeUnixNano": str(now - 10**9 + 10**6),
              "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}}]} for i in range(5)]
    return orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}}]},
        "scopeSpans": [{"spans": spans}]}]})  # fmt: skip
