"""A real `carbonspan agent` process with a [sources] table, against a loopback Electricity Maps.

The daemon builds the SourceManager from the TOML, starts it, and scores every window with
its snapshot: spans posted over OTLP/HTTP (JSON) land in an archived window whose region
uses the live value (``real_time``, tag ``electricity_maps_api``). A refused key stops the
agent at start with a message naming the source.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from agent_process import AgentProcess

from .conftest import post_spans, start_agent_with


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


def spawn(tmp_path, endpoint, key: str) -> AgentProcess:
    return start_agent_with(tmp_path, config(endpoint), {"TEST_EM_KEY": key})


def test_agent_scores_with_live_intensity(tmp_path, endpoint):
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", orjson.dumps({
        "zone": "FR", "carbonIntensity": 33.0, "isEstimated": False,
        "datetime": datetime.now(UTC).strftime("%Y-%m-%dT%H:00:00.000Z")}),
        content_type="application/json", require={"auth-token": "good"})
    agent = spawn(tmp_path, endpoint, "good").wait_ready()
    try:
        post_spans(agent)
    finally:
        assert agent.stop() == 0
    lines = agent.records()
    gs = lines[-1]["report"]["green_summary"]
    assert gs["energy_model"] == "electricity_maps_api"
    row = gs["regions"][0]
    assert row["region"] == "eu-west-3" and row["intensity_source"] == "real_time"
    assert abs(row["grid_intensity_gco2_kwh"] - 33.0) < 1e-9
    assert any(p.startswith("/v3/carbon-intensity/latest?zone=FR") for p, _ in endpoint.requests)


def test_agent_refuses_to_start_with_a_refused_key(tmp_path, endpoint):
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", b"{}", require={"auth-token": "good"})
    agent = spawn(tmp_path, endpoint, "revoked")
    code = agent.proc.wait(timeout=30)
    err = "".join(agent.stderr_text())
    assert code != 0
    assert "electricity_maps refused our credentials" in err and "HTTP 401" in err
