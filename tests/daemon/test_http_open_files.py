"""At its open-file limit the agent logs once, counts, and answers again when files free up.

asyncio's accept loop, which the HTTP port runs on, logs a traceback for every connection it
cannot accept at EMFILE, in batches as large as the listen backlog (the OS's maximum): 1,100
never-handshaking TLS connections against an agent limited to 1,024 files wrote 15,630
tracebacks (93,000 lines) to its log in about four seconds. An agent started with a low
``RLIMIT_NOFILE`` and more idle sockets than that must log a handful of lines, count the
failures, and answer ``/healthz`` once the sockets close."""

from __future__ import annotations

import resource
import socket
import time
import urllib.request

import pytest

FILES = 300  # the agent's open-file limit here: fewer than its max_connections (512)


@pytest.fixture
def agent(start_agent):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, hard))  # inherited by the agent
    try:
        proc = start_agent("--window-seconds", "60", ready=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return proc.wait_ready()


def _healthz(agent) -> int:
    try:
        with urllib.request.urlopen(f"{agent.http_url}/healthz", timeout=3) as resp:
            return resp.status
    except OSError:
        return 0


def test_open_file_limit_is_logged_once_counted_and_recovered(agent) -> None:
    socks = [socket.create_connection(("127.0.0.1", agent.http_port), timeout=5)
             for _ in range(FILES + 100)]
    try:
        time.sleep(3)  # asyncio retries accepting once a second: several rounds of EMFILE
    finally:
        for s in socks:
            s.close()
    agent.wait_for(lambda: _healthz(agent) == 200, timeout=30, what="/healthz after EMFILE")
    assert agent.metric("carbonspan_http_accept_failed_total") >= 1
    err = agent.stderr_text()
    logged = [line for line in err if "could not be accepted" in line]
    assert 1 <= len(logged) <= 3, logged
    assert "open-file limit" in logged[0]
    assert not [line for line in err if "out of system resource" in line]
    assert len(err) < 50, err[:20]
