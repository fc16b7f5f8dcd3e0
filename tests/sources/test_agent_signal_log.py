"""A real `carbonspan agent` with `[agent.signal_log]` and four live sources on loopback servers
speaking the real APIs' formats (Electricity Maps v3, the GB Carbon Intensity API with its 48 h
forecast, RTE éCO2mix on ODRÉ, ENTSO-E A75): every value they read lands in the signal log, once
(re-read values are counted as unchanged, a changed one is a new observation), a restart appends
nothing it already holds, `scheduling.signals` reads the log and `carbonspan shadow decide`
decides on it from the recorded GB forecast. A log that cannot be written is counted in
/metrics and the agent goes on scoring."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path

import orjson

from agent.signal_recorder import SignalRecorder
from agent.sources.config import parse_sources
from agent.sources.manager import SourceManager
from scheduling.signals import read_signal_log

from .conftest import Route, post_spans, start_agent_with, wait_for
from .test_agent_entsoe import FR, TOKEN, france_a75
from .test_grid_operators import ECO2MIX_PATH, eco2mix

EM_KEY = "em-key"
HALF = 1800


def z(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%MZ")


class Apis:
    """The four APIs on one loopback endpoint; their answers are fixed at the test's start, so a
    re-poll reads the same values (and the GB forecast starts an hour ahead: no half hour of it
    passes during the test)."""

    def __init__(self, endpoint) -> None:
        now = time.time()
        self.hour = int(now) // 3600 * 3600
        self.half = int(now) // HALF * HALF
        self.quarter = int(now) // 900 * 900
        self.em_value = 320.0
        self.dip = self.half + 4 * HALF  # the GB forecast's cleanest half hour, 2 h ahead
        self.forecast_status = 200
        self.entsoe = france_a75(self.quarter - 3600)  # four quarter hours, the last just ended
        endpoint.dispatch = self.dispatch

    def fw48h(self) -> bytes:
        data = [{"from": z(self.half), "to": z(self.half + HALF), "intensity": {"forecast": 190, "actual": 183}}]
        for i in range(2, 96):  # from an hour ahead; the API's own answer starts at `from`
            s = self.half + i * HALF
            data.append({"from": z(s), "to": z(s + HALF),
                         "intensity": {"forecast": 50 if s == self.dip else 200, "actual": None, "index": "low"}})
        return orjson.dumps({"data": data})

    def dispatch(self, path: str) -> Route | None:
        url = urllib.parse.urlsplit(path)
        q = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/v3/carbon-intensity/latest":
            return Route(orjson.dumps({
                "zone": q.get("zone"), "carbonIntensity": self.em_value, "datetime": z(self.hour)[:-1] + ":00.000Z",
                "updatedAt": z(self.hour + 60)[:-1] + ":00.000Z", "emissionFactorType": "lifecycle",
                "isEstimated": False, "estimationMethod": None}), 200, "application/json",
                require={"auth-token": EM_KEY})
        if url.path == "/intensity":
            return Route(orjson.dumps({"data": [{"from": z(self.half), "to": z(self.half + HALF),
                                                 "intensity": {"forecast": 190, "actual": 183, "index": "moderate"}}]}),
                         200, "application/json")
        if url.path.startswith("/intensity/") and url.path.endswith("/fw48h"):
            return Route(self.fw48h() if self.forecast_status == 200 else b"{}", self.forecast_status, "application/json")
        if url.path == "/api":
            if q.get("securityToken") != TOKEN:
                return Route(b"<html>401</html>", 401, "text/html")
            return Route(self.entsoe, 200, "text/xml") if q.get("in_Domain") == FR else None
        if path == ECO2MIX_PATH:
            return Route(eco2mix({"date_heure": datetime.fromtimestamp(self.quarter - 900, UTC).isoformat(),
                                  "taux_co2": 23}), 200, "application/json; charset=utf-8")
        return None


def config(base: str, log: Path, interval: float = 0.5) -> str:
    return f"""
[green]
default_region = "eu-west-3"
use_hourly_profiles = false
[agent.signal_log]
path = "{log}"
[sources.electricity_maps]
base_url = "{base}"
api_key_env = "TEST_EM_KEY"
regions = ["eu-central-1"]
interval_s = {interval}
[[sources.grid_operator]]
name = "gb"
operator = "gb_eso"
base_url = "{base}"
regions = ["eu-west-2"]
interval_s = {interval}
[[sources.grid_operator]]
name = "rte"
operator = "rte_eco2mix"
base_url = "{base}"
regions = ["fr"]
interval_s = {interval}
[[sources.grid_operator]]
name = "entsoe"
operator = "entsoe"
base_url = "{base}"
api_key_env = "TEST_ENTSOE_TOKEN"
regions = ["eu-west-3"]
interval_s = {interval}
"""


ENV = {"TEST_EM_KEY": EM_KEY, "TEST_ENTSOE_TOKEN": TOKEN}
# EM 1 + GB actual 1 + GB forecast 94 + RTE 1 + ENTSO-E 4 quarter hours
FIRST_POLL_ROWS = 1 + 1 + 94 + 1 + 4


def log_lines(p: Path) -> list[dict]:
    return [json.loads(ln) for ln in p.read_text().splitlines() if ln]


def test_the_agent_records_what_its_sources_read_once_and_a_decision_reads_it(tmp_path, endpoint) -> None:
    apis = Apis(endpoint)
    log = tmp_path / "state" / "signals.jsonl"
    agent = start_agent_with(tmp_path, config(endpoint.base, log), ENV).wait_ready()
    try:
        assert wait_for(lambda: agent.metric("carbonspan_signal_log_unchanged_total") >= 3 * FIRST_POLL_ROWS, 30)
        assert agent.metric("carbonspan_signal_log_rows_total") == FIRST_POLL_ROWS  # re-polls added nothing
        apis.em_value = 310.0  # Electricity Maps revises the hour: a new observation of it
        assert wait_for(lambda: agent.metric("carbonspan_signal_log_rows_total") == FIRST_POLL_ROWS + 1, 30)
        assert agent.metric("carbonspan_signal_log_rows_total", kind="forecast") == 94
        assert agent.metric("carbonspan_signal_log_errors_total") == 0
        post_spans(agent)
    finally:
        assert agent.stop() == 0
    rows = log_lines(log)
    assert len(rows) == FIRST_POLL_ROWS + 1
    by = {}
    for r in rows:
        by.setdefault((r["region"], r["source"]), []).append(r)
    em = by[("eu-central-1", "electricitymaps")]
    assert [r["value"] for r in em] == [320.0, 310.0] and em[0]["start"] == em[1]["start"]
    assert em[0]["observed_at"] <= em[1]["observed_at"] and em[0]["version"] == "lifecycle"
    (gb,) = by[("eu-west-2", "gb-carbon-intensity")]
    assert (gb["value"], gb["start"], gb["issued_at"]) == (183.0, z(apis.half)[:-1] + ":00Z", None)
    forecast = by[("eu-west-2", "gb-carbon-intensity-forecast")]
    assert len(forecast) == 94 and len({r["issued_at"] for r in forecast}) == 1
    (rte,) = by[("fr", "rte-eco2mix")]
    assert rte["value"] == 23.0 and "direct" in rte["version"]
    entsoe = by[("eu-west-3", "entsoe-a75")]
    assert len(entsoe) == 4  # every complete quarter hour of the answer, not only the latest
    assert all(abs(r["value"] - 2_476_000 / 62_800) < 1e-9 for r in entsoe)  # test_agent_entsoe's by-hand mix

    sig = read_signal_log(log)  # the scheduling reader takes what the agent wrote
    assert sig.latest("eu-west-2")[1:3] == (183.0, "gb-carbon-intensity")
    assert set(sig.observed) == {"eu-central-1", "eu-west-2", "fr", "eu-west-3"}
    issued = forecast[0]["issued_at"]
    contract = tmp_path / "c.yaml"
    contract.write_text(json.dumps({"workload_contract": {
        "name": "gb-batch", "class": "flexible", "deadline": z(apis.half + 20 * HALF)[:-1] + ":00Z",
        "max_deferral_minutes": 480, "runtime": {"p50_minutes": 30, "p95_minutes": 60}, "energy_kwh": 5,
        "residency": ["eu-west-2"], "home_region": "eu-west-2", "checkpoint": "required", "cancellation": "safe"}}))
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = subprocess.run([sys.executable, "-m", "carbonspan", "shadow", "decide", "--contracts", str(contract),
                        "--job", "gb-batch", "--at", at, "--signal", str(log), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["layer"], d["reason"], d["action"]) == ("soft_objective", "lowest_score", "defer")
    assert d["start"] == z(apis.dip)[:-1] + ":00Z"  # the recorded forecast's dip
    assert d["forecast"]["provider"] == "recorded" and d["forecast"]["issued_at"] == issued
    assert d["signal"]["source"] == "gb-carbon-intensity" and d["signal"]["staleness_minutes"] == 0

    # restarted on the same log: the first polls read only what the log holds
    (tmp_path / "again").mkdir()
    agent = start_agent_with(tmp_path / "again", config(endpoint.base, log), ENV).wait_ready()
    try:
        assert wait_for(lambda: agent.metric("carbonspan_signal_log_unchanged_total") >= FIRST_POLL_ROWS, 30)
        assert agent.metric("carbonspan_signal_log_rows_total") == 0
    finally:
        assert agent.stop() == 0
    assert len(log_lines(log)) == FIRST_POLL_ROWS + 1


def test_a_signal_log_that_cannot_be_written_is_counted_and_the_agent_goes_on(tmp_path, endpoint) -> None:
    Apis(endpoint)
    (tmp_path / "a-file").write_text("not a directory")
    log = tmp_path / "a-file" / "signals.jsonl"
    agent = start_agent_with(tmp_path, config(endpoint.base, log), ENV).wait_ready()
    try:
        assert wait_for(lambda: agent.metric("carbonspan_signal_log_errors_total", reason="write_failed") > 0, 30)
        assert agent.metric("carbonspan_signal_log_rows_total") == 0
        post_spans(agent)
    finally:
        assert agent.stop() == 0
    assert "signal log" in "".join(agent.stderr_text()) and "write_failed" in "".join(agent.stderr_text())
    gs = agent.records()[-1]["report"]["green_summary"]  # scoring went on, with the live value
    assert gs["regions"][0]["intensity_source"] == "real_time"


def test_a_forecast_that_cannot_be_fetched_is_counted_and_the_reading_stands(tmp_path, endpoint) -> None:
    apis = Apis(endpoint)
    apis.forecast_status = 503
    counted: dict[str, int] = {}
    recorder = SignalRecorder(tmp_path / "s.jsonl", 1 << 20,
                              lambda m, label, n: counted.__setitem__(f"{m}:{label}", counted.get(f"{m}:{label}", 0) + n))
    recorder.start()
    mgr = SourceManager(parse_sources({"grid_operator": {"operator": "gb_eso", "base_url": endpoint.base,
                                                         "regions": ["eu-west-2"]}}), recorder=recorder)
    mgr.poll_all()
    assert recorder.drain(10)
    recorder.stop()
    assert mgr.current().live_intensity["eu-west-2"].gco2_kwh == 183.0
    assert mgr.health()["grid_operator"]["ok"] is True
    assert counted == {"errors:forecast_unavailable": 1, "rows:observation": 1}
    assert [r["source"] for r in log_lines(tmp_path / "s.jsonl")] == ["gb-carbon-intensity"]
