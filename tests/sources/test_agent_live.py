"""A real `carbonspan agent` process with a [sources] table, against a loopback Electricity Maps.

The daemon builds the SourceManager from the TOML, starts it, and scores every window with
its snapshot: spans posted over OTLP/HTTP (JSON) land in an archived window whose region
uses the live value (``real_time``, tag ``electricity_maps_api``). A refused key stops the
agent at start with a message naming the source.
"""

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
from datetime import UTC, datetime
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
LISTEN = re.compile(r"OTLP/HTTP [\d.]+:(\d+)")


def config(endpoint) -> str:
    return f"""
[green]
default_region = "eu-west-3"
use_hourly_profiles = false
[sources.electricity_maps]
base_url = "{endpoint.base}"
api_key_env = "TEST_EM_KEY"
regions = ["eu-west-3"]
"""


def spawn(tmp_path, endpoint, key: str) -> subprocess.Popen:
    cfg = tmp_path / "carbonspan.toml"
    cfg.write_text(config(endpoint))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARBONSPAN_")}
    env["TEST_EM_KEY"] = key
    cmd = [sys.executable, "-m", "carbonspan", "agent", "--config", str(cfg), "--archive-dir", str(tmp_path / "arch"),
           "--agent-id", "a1", "--grpc-port", "0", "--http-port", "0", "--window-seconds", "60"]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def http_port(proc: subprocess.Popen, timeout_s: float = 30.0) -> int:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            m = LISTEN.search(lines.get(timeout=0.2))
        except queue.Empty:
            assert proc.poll() is None, f"agent exited: {proc.stderr.read()}"  # type: ignore[union-attr]
            continue
        if m:
            return int(m.group(1))
    raise AssertionError("agent did not start")


def otlp_json() -> bytes:
    now = time.time_ns()
    spans = [{"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "SELECT", "kind": 3,
              "startTimeUnixNano": str(now - 10**9), "endTimeUnixNano": str(now - 10**9 + 10**6),
              "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}}]} for i in range(5)]
    return orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}}]},
        "scopeSpans": [{"spans": spans}]}]})


def test_agent_scores_with_live_intensity(tmp_path, endpoint):
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", orjson.dumps({
        "zone": "FR", "carbonIntensity": 33.0, "isEstimated": False,
        "datetime": datetime.now(UTC).strftime("%Y-%m-%dT%H:00:00.000Z")}),
        content_type="application/json", require={"auth-token": "good"})
    proc = spawn(tmp_path, endpoint, "good")
    try:
        port = http_port(proc)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=otlp_json(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    lines = [orjson.loads(x) for f in sorted((tmp_path / "arch/a1").glob("windows-*.jsonl"))
             for x in f.read_bytes().splitlines() if x.strip()]
    gs = lines[-1]["report"]["green_summary"]
    assert gs["energy_model"] == "electricity_maps_api"
    row = gs["regions"][0]
    assert row["region"] == "eu-west-3" and row["intensity_source"] == "real_time"
    assert abs(row["grid_intensity_gco2_kwh"] - 33.0) < 1e-9
    assert any(p.startswith("/v3/carbon-intensity/latest?zone=FR") for p, _ in endpoint.requests)


def test_agent_refuses_to_start_with_a_refused_key(tmp_path, endpoint):
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", b"{}", require={"auth-token": "good"})
    proc = spawn(tmp_path, endpoint, "revoked")
    code = proc.wait(timeout=30)
    err = proc.stderr.read()  # type: ignore[union-attr]
    assert code != 0
    assert "electricity_maps refused our credentials" in err and "HTTP 401" in err
