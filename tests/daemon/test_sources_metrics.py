"""/metrics shows source health and signal ages when a [sources] table is configured.

The live-intensity source polls a loopback HTTP server speaking the Electricity Maps v3
``carbon-intensity/latest`` format.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class _Maps(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.headers.get("auth-token") != "k" or "zone=FR" not in self.path:
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({"zone": "FR", "carbonIntensity": 40.0, "isEstimated": False,
                           "datetime": datetime.now(UTC).strftime("%Y-%m-%dT%H:00:00.000Z")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def maps():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Maps)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_source_up_and_signal_age_are_exported(start_agent, maps) -> None:
    agent = start_agent(
        env={"TEST_EM_KEY": "k"},
        config=f'[green]\ndefault_region = "eu-west-3"\n[sources.electricity_maps]\n'
               f'base_url = "{maps}"\napi_key_env = "TEST_EM_KEY"\nregions = ["eu-west-3"]\n',
    )
    agent.wait_for(lambda: agent.metric("carbonspan_source_up") >= 1, timeout=15,
                   what="the source to report up")
    age = agent.wait_for(
        lambda: agent.metric("carbonspan_source_signal_age_seconds", kind="live_intensity",
                             key="eu-west-3") or None, timeout=15, what="a live-intensity age")
    assert 0 < age < 2 * 3600  # the reading is stamped at the start of the current hour
    assert agent.metric("carbonspan_source_failures") == 0
    assert agent.stop() == 0
