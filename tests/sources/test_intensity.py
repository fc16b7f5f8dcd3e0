"""Live grid intensity: Electricity Maps v3 and the GB ESO Carbon Intensity API on loopback."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import orjson
import pytest

from agent.config import GreenConfig
from agent.sources.errors import ConfigError, SourceStartError
from agent.sources.intensity import parse_time
from agent.sources.manager import SourceManager

KEY = "test-key-123"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def em_doc(zone: str, value: float, ts: float, estimated: bool = False) -> bytes:
    """The /v3/carbon-intensity/latest answer as Electricity Maps documents it."""
    return orjson.dumps({
        "zone": zone, "carbonIntensity": value, "datetime": iso(ts), "updatedAt": iso(ts + 60),
        "createdAt": iso(ts - 86400), "emissionFactorType": "lifecycle", "isEstimated": estimated,
        "estimationMethod": "TIME_SLICER_AVERAGE" if estimated else None,
    })


def em_table(endpoint, **extra):
    return {"electricity_maps": {"base_url": endpoint.base, "api_key_env": "TEST_EM_KEY", **extra}}


def serve_zone(endpoint, zone, value, ts, estimated=False, status=200):
    endpoint.set(f"/v3/carbon-intensity/latest?zone={zone}", em_doc(zone, value, ts, estimated), status=status,
                 content_type="application/json", require={"auth-token": KEY})


def test_latest_intensity_per_region(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_EM_KEY", KEY)
    now = time.time()
    serve_zone(endpoint, "FR", 41.0, now - 600, estimated=True)
    serve_zone(endpoint, "DE", 302.0, now - 300)
    mgr = SourceManager.from_config(em_table(endpoint, regions=["eu-west-3", "europe-west9", "eu-central-1"]))
    with mgr:
        live = mgr.current().live_intensity
    assert live["eu-west-3"].gco2_kwh == 41.0 and live["eu-west-3"].estimated is True
    assert live["europe-west9"] == live["eu-west-3"]  # one zone, one request
    assert live["eu-central-1"].gco2_kwh == 302.0 and live["eu-central-1"].tag == "electricity_maps_api"
    # taken_at: when the poll confirmed it (its hour, datetime + 3,600 s, has not ended)
    assert now <= live["eu-central-1"].taken_at <= time.time()
    fetched = sorted(p for p, _ in endpoint.requests)
    assert fetched == ["/v3/carbon-intensity/latest?zone=DE", "/v3/carbon-intensity/latest?zone=FR"]
    assert all(h["auth-token"] == KEY for _, h in endpoint.requests)


def test_regions_default_to_the_green_config_and_zone_map_overrides(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_EM_KEY", KEY)
    serve_zone(endpoint, "PL", 590.8, time.time())
    serve_zone(endpoint, "FR", 41.0, time.time())
    green = GreenConfig(default_region="eu-west-3", service_regions={"billing": "onprem-waw"})
    mgr = SourceManager.from_config(em_table(endpoint, zone_map={"onprem-waw": "PL"}), green)
    mgr.start()
    mgr.stop()
    assert set(mgr.current().live_intensity) == {"eu-west-3", "onprem-waw"}


def test_missing_key_is_an_error_at_start_naming_the_source(endpoint, monkeypatch):
    monkeypatch.delenv("TEST_EM_KEY", raising=False)
    mgr = SourceManager.from_config(em_table(endpoint, regions=["eu-west-3"], name="emaps"))
    with pytest.raises(ConfigError, match="electricity_maps emaps: no API key.*TEST_EM_KEY is not set"):
        mgr.start()
    assert endpoint.requests == []  # nothing was sent without a key


def test_a_401_is_an_error_at_start(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_EM_KEY", "revoked")
    serve_zone(endpoint, "FR", 41.0, time.time())
    mgr = SourceManager.from_config(em_table(endpoint, regions=["eu-west-3"]))
    with pytest.raises(SourceStartError, match="electricity_maps refused our credentials.*HTTP 401"):
        mgr.start()


def test_unknown_region_needs_a_zone_map_entry(endpoint):
    with pytest.raises(ConfigError, match="no Electricity Maps zone known for region.*moon-base-1.*zone_map"):
        SourceManager.from_config(em_table(endpoint, regions=["moon-base-1"]))


def test_stale_values_are_kept_with_their_time_and_reported(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_EM_KEY", KEY)
    three_hours_ago = time.time() - 3 * 3600  # its hour ended two hours ago
    serve_zone(endpoint, "FR", 55.0, three_hours_ago)
    mgr = SourceManager.from_config(em_table(endpoint, regions=["eu-west-3"]))
    mgr.poll_all()
    signals = mgr.current()
    reading = signals.live_intensity["eu-west-3"]
    # older than max_signal_age_s: the scorer sees the time and falls back (intensity_estimated)
    assert time.time() - reading.taken_at > signals.max_signal_age_s == 3600.0
    health = mgr.health()["electricity_maps"]
    assert health["ok"] is True and health["stale"] is True


def test_one_failing_zone_keeps_the_others(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_EM_KEY", KEY)
    serve_zone(endpoint, "FR", 41.0, time.time())
    serve_zone(endpoint, "DE", 302.0, time.time(), status=502)
    mgr = SourceManager.from_config(em_table(endpoint, regions=["eu-west-3", "eu-central-1"]))
    mgr.poll_all()
    assert set(mgr.current().live_intensity) == {"eu-west-3"}
    health = mgr.health()["electricity_maps"]
    assert health["ok"] is False and health["failures"] == 1 and "zone DE" in health["last_error"]


def eso_doc(actual: float | None, forecast: float, start: str) -> bytes:
    """GET /intensity as api.carbonintensity.org.uk documents it."""
    return orjson.dumps({"data": [{"from": start, "to": start[:-3] + "30Z",
                                   "intensity": {"forecast": forecast, "actual": actual, "index": "moderate"}}]})


def test_gb_eso_actual_then_forecast(endpoint):
    start = datetime.now(UTC).strftime("%Y-%m-%dT%H:00Z")
    endpoint.set("/intensity", eso_doc(183, 190, start), content_type="application/json")
    mgr = SourceManager.from_config({"grid_operator": {"operator": "gb_eso", "base_url": endpoint.base}})
    mgr.poll_all()
    live = mgr.current().live_intensity
    assert live["eu-west-2"].gco2_kwh == 183 and live["uksouth"].tag == "grid_operator_api"
    # the value is about the half hour [from, to): confirmed now, or at `to` if that has passed
    to = parse_time(start, "t") + 1800
    assert live["gb"].estimated is False
    assert live["gb"].taken_at == pytest.approx(min(time.time(), to), abs=5)
    endpoint.set("/intensity", eso_doc(None, 190, start), content_type="application/json")
    mgr.poll_all()
    assert mgr.current().live_intensity["gb"].gco2_kwh == 190  # forecast, marked estimated
    assert mgr.current().live_intensity["gb"].estimated is True


def test_electricity_maps_wins_over_the_grid_operator(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_EM_KEY", KEY)
    serve_zone(endpoint, "GB", 150.0, time.time())
    endpoint.set("/intensity", eso_doc(183, 190, datetime.now(UTC).strftime("%Y-%m-%dT%H:00Z")))
    table = {**em_table(endpoint, regions=["eu-west-2"]), "grid_operator": {"base_url": endpoint.base}}
    mgr = SourceManager.from_config(table)
    mgr.poll_all()
    live = mgr.current().live_intensity
    assert live["eu-west-2"].tag == "electricity_maps_api" and live["eu-west-2"].gco2_kwh == 150.0
    assert live["uksouth"].tag == "grid_operator_api"  # only the operator covers it here


def test_iso_times_of_both_apis():
    assert parse_time("2018-01-20T12:00Z", "t") == 1516449600.0
    assert parse_time("2018-01-20T12:00:00.000Z", "t") == 1516449600.0


def test_an_hourly_value_stays_fresh_past_its_hour_until_max_signal_age(endpoint, clock, monkeypatch):
    """A value for 09:00-10:00 polled at 09:58 is still used at 10:03, before the next poll
    brings 10:00 (no flapping to the profile at every hour); an hour after the poll that
    confirmed it, it is stale; a value for a long-past hour is as old as that hour. The
    scorer's own test (agent.score.live_ok) decides."""
    from agent.score import live_ok
    from agent.sources.config import parse_sources

    monkeypatch.setenv("TEST_EM_KEY", KEY)
    nine = datetime(2026, 11, 30, 9, 0, tzinfo=UTC).timestamp()
    serve_zone(endpoint, "FR", 41.0, nine)
    mgr = SourceManager(parse_sources(em_table(endpoint, regions=["eu-west-3"])), clock=clock)
    clock.t = nine + 58 * 60
    mgr.poll_all()
    reading = mgr.current().live_intensity["eu-west-3"]
    assert reading.taken_at == nine + 58 * 60  # confirmed current by the 09:58 poll
    assert live_ok(reading, nine + 63 * 60, 3600.0)  # 10:03: three minutes past its hour
    assert live_ok(reading, nine + 118 * 60, 3600.0)  # 10:58: an hour after the poll
    assert not live_ok(reading, nine + 118 * 60 + 1, 3600.0)  # then stale
    clock.t = nine + 118 * 60 + 1
    assert mgr.health()["electricity_maps"]["stale"] is True
    # the API keeps answering 09:00 (stuck) until 11:30: the value is as old as its hour's end
    clock.t = nine + 150 * 60
    mgr.poll_all()
    reading = mgr.current().live_intensity["eu-west-3"]
    assert reading.taken_at == nine + 3600 and not live_ok(reading, clock(), 3600.0)


@pytest.mark.parametrize("value,message", [(1e300, "not plausible for a grid"), (-3, "not a non-negative number"),
                                           ("41", "not a non-negative number"), (None, "not a non-negative number")])
def test_a_broken_feed_value_is_not_used(endpoint, monkeypatch, value, message):
    monkeypatch.setenv("TEST_EM_KEY", KEY)
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", orjson.dumps({
        "zone": "FR", "carbonIntensity": value, "datetime": iso(time.time()), "isEstimated": False}),
        require={"auth-token": KEY})
    mgr = SourceManager.from_config(em_table(endpoint, regions=["eu-west-3"]))
    mgr.poll_all()
    assert mgr.current().live_intensity == {}
    assert message in mgr.health()["electricity_maps"]["last_error"]
