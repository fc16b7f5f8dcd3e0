"""Sources -> Signals -> the real scorer (agent.score.score_batch + agent.window.build_report).

Spans are OTLP/JSON decoded by agent.otlp; the sources read loopback Scaphandre and
Electricity Maps endpoints; the daemon's wiring is reproduced exactly: count each scored
batch with ``manager.ops.add_partial(partial)`` and score with ``manager.current()``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import orjson
import pytest

from agent.config import parse_green
from agent.otlp import decode_json
from agent.score import ScoringContext, score_batch
from agent.sources.config import parse_sources
from agent.sources.manager import SourceManager
from agent.window import build_report

SCAPH = """\
# TYPE scaph_process_power_consumption_microwatts gauge
scaph_process_power_consumption_microwatts{pid="7",exe="checkout",cmdline="/srv/checkout"} 12000000
scaph_process_power_consumption_microwatts{pid="9",exe="orders"} 99000000
"""


def otlp_json(now_ns: int, spans_per_service: dict[str, int]) -> bytes:
    """An OTLP/JSON export request: SQL client spans per service in eu-west-3."""
    resource_spans = []
    for s_i, (service, n) in enumerate(spans_per_service.items()):
        spans = [{
            "traceId": f"{s_i + 1:016x}{i:016x}", "spanId": f"{s_i + 1:08x}{i:08x}", "name": "SELECT orders",
            "kind": 3, "startTimeUnixNano": str(now_ns - 10**9), "endTimeUnixNano": str(now_ns - 10**9 + 2_000_000),
            "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}},
                           {"key": "db.statement", "value": {"stringValue": "SELECT * FROM orders WHERE id = $1"}}],
        } for i in range(n)]
        resource_spans.append({
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}},
                                        {"key": "cloud.region", "value": {"stringValue": "eu-west-3"}}]},
            "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.psycopg"}, "spans": spans}],
        })
    return orjson.dumps({"resourceSpans": resource_spans})


GREEN = parse_green({"use_hourly_profiles": False, "per_operation_coefficients": False,
                     "embodied_carbon_per_request_gco2": 0.0})


def report(mgr: SourceManager, now_s: float, spans: dict[str, int]):
    now_ns = int(now_s * 1e9)
    ctx = ScoringContext.from_config(GREEN, signals=mgr.current(), now_ns=now_ns)
    partial = score_batch(decode_json(otlp_json(now_ns, spans)), ctx)
    mgr.ops.add_partial(partial)  # what the daemon does after each scored batch
    return build_report(partial, ctx, now_ns - 60 * 10**9, now_ns)


def window(mgr: SourceManager, now_s: float, spans: dict[str, int]):
    return report(mgr, now_s, spans).green_summary


def test_scaphandre_measured_and_proxy_services_then_live_intensity(endpoint, clock, monkeypatch):
    monkeypatch.setenv("TEST_EM_KEY", "k")
    clock.t = datetime.now(UTC).timestamp()
    endpoint.set("/metrics", SCAPH)
    table = {"scaphandre": {"url": endpoint.url("/metrics"), "interval_s": 10,
                            "services": {"checkout": {"exe": "^checkout$"}}}}
    mgr = SourceManager(parse_sources(table), GREEN, clock=clock)
    mgr.poll_all()  # baseline
    first = window(mgr, clock(), {"checkout": 4, "orders": 2})  # no measurement yet: all proxy
    assert first.energy_model == "io_proxy_v1"
    mgr.poll_all()  # the interval now holds checkout's 4 ops
    rate = mgr.current().measured["checkout"]
    gs = window(mgr, clock(), {"checkout": 4, "orders": 2})
    assert gs.per_service_energy_model == {"checkout": "scaphandre_rapl", "orders": "io_proxy_v1"}
    assert gs.energy_model == "scaphandre_rapl"
    assert gs.per_service_measured_ratio == {"checkout": 1.0, "orders": 0.0}
    assert gs.per_service_energy_kwh["checkout"] == pytest.approx(4 * rate.kwh_per_op, rel=1e-12)
    assert gs.per_service_energy_kwh["orders"] == pytest.approx(2 * 1e-7)  # 2 ops x 1e-7 kWh

    # live intensity for eu-west-3 (zone FR) from Electricity Maps
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", orjson.dumps({
        "zone": "FR", "carbonIntensity": 20.0, "isEstimated": False,
        "datetime": datetime.fromtimestamp(clock() - 300, UTC).isoformat().replace("+00:00", "Z")}))
    table["electricity_maps"] = {"base_url": endpoint.base, "api_key_env": "TEST_EM_KEY", "regions": ["eu-west-3"]}
    mgr = SourceManager(parse_sources(table), GREEN, clock=clock)
    mgr.poll_all()
    window(mgr, clock(), {"checkout": 4})
    mgr.poll_all()
    gs = window(mgr, clock(), {"checkout": 4, "orders": 2})
    assert gs.energy_model == "electricity_maps_api"
    row = next(r for r in gs.regions if r.region == "eu-west-3")
    assert row.intensity_source == "real_time"
    assert row.grid_intensity_gco2_kwh == pytest.approx(20.0)  # energy-weighted mean of 20.0
    assert row.intensity_estimated is False
    # carbon uses the live value: energy x 20 g/kWh x PUE 1.15 (AWS)
    assert gs.co2.operational_gco2 == pytest.approx(gs.energy_kwh * 20.0 * 1.15, rel=1e-9)


def test_stale_sources_fall_back_to_the_proxy_and_the_annual_value(endpoint, clock, monkeypatch):
    monkeypatch.setenv("TEST_EM_KEY", "k")
    clock.t = datetime.now(UTC).timestamp()
    endpoint.set("/metrics", SCAPH)
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", orjson.dumps({
        "zone": "FR", "carbonIntensity": 20.0, "isEstimated": False,
        "datetime": datetime.fromtimestamp(clock(), UTC).isoformat()}))
    table = {"scaphandre": {"url": endpoint.url("/metrics"), "interval_s": 10,
                            "services": {"checkout": {"exe": "^checkout$"}}},
             "electricity_maps": {"base_url": endpoint.base, "api_key_env": "TEST_EM_KEY", "regions": ["eu-west-3"]}}
    mgr = SourceManager(parse_sources(table), GREEN, clock=clock)
    mgr.poll_all()
    window(mgr, clock(), {"checkout": 4})
    mgr.poll_all()
    assert window(mgr, clock(), {"checkout": 1}).energy_model == "electricity_maps_api"
    # both endpoints now fail; an hour and a bit after the last good polls everything is stale
    endpoint.set("/metrics", "down", status=503)
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", "down", status=503)
    clock.advance(3601.0)
    mgr.poll_all()
    rep = report(mgr, clock(), {"checkout": 4})
    gs = rep.green_summary
    assert gs.per_service_energy_model == {"checkout": "io_proxy_v1"}
    # the fallbacks are counted in the archived window itself: 4 I/O spans with a stale
    # measured value, 4 spans in a region whose live value is stale
    assert rep.counters["measured_stale_spans"] == 4
    assert rep.counters["live_intensity_stale_spans"] == 4
    assert gs.per_service_energy_kwh["checkout"] == pytest.approx(4e-7)
    row = gs.regions[0]
    # annual eu-west-3 value, and the report says a live value was wanted but was stale
    assert row.intensity_source == "annual" and row.intensity_estimated is True
    assert row.grid_intensity_gco2_kwh == pytest.approx(41.5)
    health = mgr.health()
    assert health["scaphandre"]["stale"] and health["electricity_maps"]["stale"]
    assert health["scaphandre"]["stale_dropped"] == 1


def test_a_database_host_takes_measured_watts_until_they_are_stale(tmp_path, clock):
    clock.t = datetime.now(UTC).timestamp()
    csv = tmp_path / "alumet.csv"
    csv.write_text("metric;timestamp;value;resource_kind;resource_id;consumer_kind;consumer_id\n")
    green = parse_green({"use_hourly_profiles": False, "embodied_carbon_per_request_gco2": 0.0,
                         "hosts": [{"name": "pg-main", "kind": "database", "region": "eu-west-3",
                                    "watts": 120.0, "measured": "db-alumet"}]})
    table = {"alumet": {"name": "db-alumet", "csv_path": str(csv), "interval_s": 10}}
    mgr = SourceManager(parse_sources(table), green, clock=clock, monotonic=clock)
    mgr.poll_all()
    with csv.open("a") as f:  # 450 J in the interval
        f.write("rapl_consumed_energy_J;t;300;cpu_package;0;local_machine;\n")
        f.write("rapl_consumed_energy_J;t;150;dram;0;local_machine;\n")
    clock.advance(10.0)
    mgr.poll_all()
    watts, tag = mgr.current().host_watts["pg-main"]
    assert tag == "alumet_rapl" and watts == pytest.approx(45.0)  # 450 J / 10 s

    def host_row():
        now_ns = int(clock() * 1e9)
        ctx = ScoringContext.from_config(green, signals=mgr.current(), now_ns=now_ns)
        partial = score_batch(decode_json(otlp_json(now_ns, {"checkout": 1})), ctx)
        return build_report(partial, ctx, now_ns - 60 * 10**9, now_ns).green_summary.hosts[0]

    row = host_row()
    # measured watts x 60 s window / 3.6e6
    assert row.energy_model == "alumet_rapl" and row.energy_kwh == pytest.approx(watts * 60 / 3.6e6)
    clock.advance(31.0)  # 3 x 10 s without a new reading: the declared 120 W apply again
    row = host_row()
    assert row.energy_model == "declared_watts" and row.energy_kwh == pytest.approx(120 * 60 / 3.6e6)


def test_calibrate_output_scales_the_proxy_as_cal_and_a_measured_source_drops_it(endpoint, clock, tmp_path, capsys):
    """carbonspan calibrate over an archive the real scorer wrote -> [green.calibration] ->
    the real scorer tags the service io_proxy_v1+cal; once Scaphandre measures it, the
    measured value replaces the calibrated proxy and the tag has no +cal."""
    import tomllib

    from carbonspan.cli import main
    from schema.chain import seal

    clock.t = datetime.now(UTC).timestamp()
    t_end = float(int(clock()))
    t_start = t_end - 60
    # the agent's archive: one 60 s window in which checkout did 400 I/O ops
    empty = SourceManager(parse_sources({}), GREEN, clock=clock)
    now_ns = int(t_end * 1e9)
    ctx = ScoringContext.from_config(GREEN, signals=empty.current(), now_ns=now_ns)
    report = build_report(score_batch(decode_json(otlp_json(now_ns, {"checkout": 400})), ctx),
                          ctx, int(t_start * 1e9), now_ns)
    archive = tmp_path / "archives" / "a1"
    archive.mkdir(parents=True)
    line = seal(None, 0, report.window.end, "report", report.model_dump(mode="json"))
    (archive / "windows-20261130-000000.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    # a meter read 12 W at both ends of the window: 12 W x 60 s = 720 J = 2e-4 kWh;
    # / 400 ops = 5e-7 kWh/op; / 1e-7 = factor 5.0
    readings = tmp_path / "power.csv"
    readings.write_text(f"timestamp,service,power_watts\n{t_start},checkout,12\n{t_end},checkout,12\n")
    assert main(["calibrate", "--readings", str(readings), "--archives", str(tmp_path / "archives")]) == 0
    factors = tomllib.loads(capsys.readouterr().out)["green"]["calibration"]
    assert factors == {"checkout": pytest.approx(5.0, rel=1e-12)}

    green = parse_green({"use_hourly_profiles": False, "per_operation_coefficients": False,
                         "embodied_carbon_per_request_gco2": 0.0, "calibration": factors})
    endpoint.set("/metrics", SCAPH)
    table = {"scaphandre": {"url": endpoint.url("/metrics"), "interval_s": 10,
                            "services": {"checkout": {"exe": "^checkout$"}}}}
    mgr = SourceManager(parse_sources(table), green, clock=clock)

    def scored(spans):
        now_ns = int(clock() * 1e9)
        ctx = ScoringContext.from_config(green, signals=mgr.current(), now_ns=now_ns)
        partial = score_batch(decode_json(otlp_json(now_ns, spans)), ctx)
        mgr.ops.add_partial(partial)
        return build_report(partial, ctx, now_ns - 60 * 10**9, now_ns).green_summary

    mgr.poll_all()  # baseline: nothing measured yet
    gs = scored({"checkout": 4, "orders": 2})
    # calibrated proxy: 4 ops x 1e-7 kWh x 5.0 = 2e-6 kWh; orders has no factor: 2 x 1e-7
    assert gs.per_service_energy_model == {"checkout": "io_proxy_v1+cal", "orders": "io_proxy_v1"}
    assert gs.per_service_energy_kwh["checkout"] == pytest.approx(2e-6, rel=1e-12)
    assert gs.per_service_energy_kwh["orders"] == pytest.approx(2e-7, rel=1e-12)
    assert gs.energy_model == "io_proxy_v1+cal"
    mgr.poll_all()  # Scaphandre now measures checkout over the 4 ops counted above
    rate = mgr.current().measured["checkout"].kwh_per_op
    gs = scored({"checkout": 4, "orders": 2})
    assert gs.per_service_energy_model == {"checkout": "scaphandre_rapl", "orders": "io_proxy_v1"}
    # the measured kWh/op replaces the calibrated proxy (no factor 5 on top of it)
    assert gs.per_service_energy_kwh["checkout"] == pytest.approx(4 * rate, rel=1e-12)
    assert gs.energy_model == "scaphandre_rapl"


def test_scoring_never_waits_for_a_hanging_source(endpoint, monkeypatch):
    """The scoring path reads snapshots only: while both pollers are stuck on endpoints that
    do not answer, current() + score_batch + build_report still run, and make no request."""
    import threading

    monkeypatch.setenv("TEST_EM_KEY", "k")
    endpoint.set("/metrics", SCAPH)
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", orjson.dumps({
        "zone": "FR", "carbonIntensity": 20.0, "isEstimated": False,
        "datetime": datetime.now(UTC).isoformat()}))
    table = {"scaphandre": {"url": endpoint.url("/metrics"), "interval_s": 10, "timeout_s": 60,
                            "services": {"checkout": {"exe": "^checkout$"}}},
             "electricity_maps": {"base_url": endpoint.base, "api_key_env": "TEST_EM_KEY",
                                  "regions": ["eu-west-3"], "timeout_s": 60}}
    mgr = SourceManager(parse_sources(table), GREEN)
    mgr.poll_all()
    mgr.ops.add({"checkout": 10})
    mgr.poll_all()
    assert "checkout" in mgr.current().measured
    # both endpoints now hang (until released); each poller blocks in its own thread
    endpoint.set("/metrics", SCAPH, hang=True)
    endpoint.set("/v3/carbon-intensity/latest?zone=FR", b"{}", hang=True)
    before = len(endpoint.requests)
    pollers = [threading.Thread(target=r.poll_once) for r in mgr.runners.values()]
    for t in pollers:
        t.start()
    deadline = time.monotonic() + 10
    while len(endpoint.requests) < before + 2 and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    in_flight = len(endpoint.requests)
    assert in_flight == before + 2
    results = []

    def score_many() -> None:
        for _ in range(50):
            results.append(window(mgr, time.time(), {"checkout": 3, "orders": 1}))

    scorer = threading.Thread(target=score_many)
    scorer.start()
    scorer.join(5.0)  # the pollers stay blocked far longer (60 s timeout, 10 s server hang)
    try:
        assert not scorer.is_alive(), "scoring waited for a source's network call"
        assert len(results) == 50 and all(p.is_alive() for p in pollers)
        assert len(endpoint.requests) == in_flight  # scoring sent nothing
        gs = results[-1]
        assert gs.per_service_energy_model["checkout"] == "electricity_maps_api"
        assert gs.per_service_measured_ratio["checkout"] == 1.0
    finally:
        endpoint.release.set()
        for t in pollers:
            t.join(15.0)
