"""/metrics shows source health and signal ages when a [sources] table is configured.

The live-intensity source polls a loopback HTTP server speaking the Electricity Maps v3
``carbon-intensity/latest`` format.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest


def _maps(path: str, headers) -> tuple[int, str, bytes]:
    if headers.get("auth-token") != "k" or "zone=FR" not in path:
        return 401, "application/json", b'{"error": "unauthorised"}'
    body = json.dumps({"zone": "FR", "carbonIntensity": 40.0, "isEstimated": False,
                       "datetime": datetime.now(UTC).strftime("%Y-%m-%dT%H:00:00.000Z")})
    return 200, "application/json", body.encode()


@pytest.fixture(scope="module")
def maps(loopback_http):
    return loopback_http(_maps)


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
