"""A real `carbonspan agent` with `[[sources.grid_operator]] operator = "entsoe"` on loopback.

The agent reads the security token from the environment, asks the loopback Transparency
Platform for France's actual generation per production type, and scores spans in eu-west-3
with the live value: the archived window's region row is ``real_time`` at the hand-computed
intensity and the energy model is ``grid_operator_api``. The token is in the requests and
nowhere in the agent's output.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime

from .conftest import Route, post_spans, start_agent_with

NS = "urn:iec62325.351:tc57wg16:451-6:generationloaddocument:3:0"
FR = "10YFR-RTE------C"
TOKEN = "0c4e7a9b-1d2f-4a6b-8c3d-5e7f9a1b3c5d"


def ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%MZ")


def france_a75(start: float) -> bytes:
    """Four quarter hours from ``start``, the last one just ended; one pumping series."""
    rows = [("B14", "in", 45000), ("B11", "in", 5000), ("B12", "in", 2000), ("B04", "in", 3000),
            ("B19", "in", 6000), ("B16", "in", 1000), ("B01", "in", 800), ("B10", "out", 1500)]
    series = "".join(
        f'<TimeSeries><mRID>{i}</mRID><businessType>A01</businessType><objectAggregation>A08</objectAggregation>'
        f'<{d}BiddingZone_Domain.mRID codingScheme="A01">{FR}</{d}BiddingZone_Domain.mRID>'
        f"<quantity_Measure_Unit.name>MAW</quantity_Measure_Unit.name><curveType>A01</curveType>"
        f"<MktPSRType><psrType>{psr}</psrType></MktPSRType><Period><timeInterval><start>{ts(start)}</start>"
        f"<end>{ts(start + 3600)}</end></timeInterval><resolution>PT15M</resolution>"
        + "".join(f"<Point><position>{p}</position><quantity>{mw}</quantity></Point>" for p in range(1, 5))
        + "</Period></TimeSeries>"
        for i, (psr, d, mw) in enumerate(rows, 1))
    return (f'<?xml version="1.0" encoding="UTF-8"?><GL_MarketDocument xmlns="{NS}"><type>A75</type>'
            f"<process.processType>A16</process.processType>{series}</GL_MarketDocument>").encode()


def test_agent_scores_eu_west_3_with_entsoe(tmp_path, endpoint):
    quarter = int(time.time()) // 900 * 900
    doc = france_a75(quarter - 3600)  # the value is for the quarter hour that just ended

    def dispatch(path: str) -> Route | None:
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query))
        if q.get("securityToken") != TOKEN:
            return Route(b"<html><body>401 Unauthorized</body></html>", 401, "text/html")
        return Route(doc, 200, "text/xml") if q.get("in_Domain") == FR else None

    endpoint.dispatch = dispatch
    cfg_text = f"""
[green]
default_region = "eu-west-3"
use_hourly_profiles = false
[[sources.grid_operator]]
operator = "entsoe"
base_url = "{endpoint.base}"
api_key_env = "TEST_ENTSOE_TOKEN"
regions = ["eu-west-3"]
"""
    agent = start_agent_with(tmp_path, cfg_text, {"TEST_ENTSOE_TOKEN": TOKEN}).wait_ready()
    try:
        post_spans(agent)
    finally:
        assert agent.stop() == 0
    stderr, stdout = "".join(agent.stderr_text()), agent.stdout_text()
    lines = agent.records()
    gs = lines[-1]["report"]["green_summary"]
    assert gs["energy_model"] == "grid_operator_api"
    row = gs["regions"][0]
    assert row["region"] == "eu-west-3" and row["intensity_source"] == "real_time"
    # nuclear 45000×12 + run-of-river 5000×24 + reservoir 2000×24 + gas 3000×490 + wind 6000×11
    #   + solar 1000×48 + biomass 800×230 = 540,000 + 120,000 + 48,000 + 1,470,000 + 66,000 + 48,000
    #   + 184,000 = 2,476,000 / 62,800 MW = 39.43 gCO2eq/kWh (the 1,500 MW of pumping is not generation)
    assert abs(row["grid_intensity_gco2_kwh"] - 2_476_000 / 62_800) < 1e-9
    assert row["intensity_estimated"] is False
    assert any(f"securityToken={TOKEN}" in p and f"in_Domain={FR}" in p for p, _ in endpoint.requests)
    assert TOKEN not in stderr and TOKEN not in stdout
