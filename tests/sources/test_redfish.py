"""Redfish BMC on loopback (plain and TLS with a CA bundle): chassis watts shared by I/O ops."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import GreenConfig, HostConfig
from agent.sources.config import parse_sources
from agent.sources.energy import MAX_METER_WATTS
from agent.sources.errors import ConfigError, SourceError, SourceStartError
from agent.sources.http import basic_auth
from agent.sources.manager import SourceManager
from agent.sources.opcounter import OpCounter
from agent.sources.redfish import KwhCounter, RedfishSource

POWER_PATH = "/redfish/v1/Chassis/1U/Power"


def power_doc(watts: object) -> bytes:
    """A Power resource as DMTF's Redfish mockups show it (Power.v1_5_0)."""
    return orjson.dumps({
        "@odata.id": POWER_PATH, "@odata.type": "#Power.v1_5_0.Power", "Id": "Power", "Name": "Power",
        "PowerControl": [{
            "@odata.id": f"{POWER_PATH}#/PowerControl/0", "MemberId": "0", "Name": "System Power Control",
            "PowerConsumedWatts": watts, "PowerCapacityWatts": 800,
            "PowerMetrics": {"IntervalInMin": 1, "MinConsumedWatts": 320, "MaxConsumedWatts": 380,
                             "AverageConsumedWatts": 350},
        }],
        "PowerSupplies": [{"MemberId": "0", "PowerInputWatts": 190, "LineInputVoltage": 230}],
    })


def table(url: str, **extra: object) -> dict:
    return {"redfish": {"url": url, "chassis_id": "1U", "interval_s": 30, "username": "root",
                        "password_env": "TEST_BMC_PASSWORD", "services": ["checkout", "orders"], **extra}}


def test_chassis_energy_is_shared_by_io_ops(endpoint, clock, monkeypatch):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    endpoint.set(POWER_PATH, power_doc(360), content_type="application/json",
                 require={"Authorization": basic_auth("root", "calvin")})
    ops = OpCounter()
    src = RedfishSource("bmc", parse_sources(table(endpoint.base)).redfish[0], ops, clock=clock, monotonic=clock)
    src.start()
    src.poll()
    ops.add({"checkout": 6_000, "orders": 3_000, "elsewhere": 5_000})
    clock.advance(30.0)
    src.poll()
    rates, watts = src.snapshot(clock())
    # 360 W x 30 s = 10,800 J over the chassis' 9,000 ops: 10,800 / 3.6e6 / 9,000 = 3.3333e-7 kWh/op
    assert rates["checkout"].kwh_per_op == pytest.approx(3.3333e-7, rel=1e-4)
    assert rates["orders"].kwh_per_op == rates["checkout"].kwh_per_op
    assert "elsewhere" not in rates and rates["orders"].tag == "redfish_bmc"
    assert watts == 360.0


def test_wrong_password_is_an_error_at_start_naming_the_source(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "wrong")
    endpoint.set(POWER_PATH, power_doc(360), require={"Authorization": basic_auth("root", "calvin")})
    mgr = SourceManager.from_config(table(endpoint.base, name="rack7-bmc"))
    with pytest.raises(SourceStartError, match="rack7-bmc refused our credentials.*HTTP 401"):
        mgr.start()


def test_missing_password_is_a_config_error_at_start(endpoint, monkeypatch):
    monkeypatch.delenv("TEST_BMC_PASSWORD", raising=False)
    mgr = SourceManager.from_config(table(endpoint.base))
    with pytest.raises(ConfigError, match="TEST_BMC_PASSWORD.*not set"):
        mgr.start()


def test_tls_with_a_ca_bundle(tls_endpoint, tls_files, clock, monkeypatch, tmp_path):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    tls_endpoint.set(POWER_PATH, power_doc(200.5), content_type="application/json")
    ops = OpCounter()
    cfg = parse_sources(table(tls_endpoint.base, ca_file=tls_files["ca"])).redfish[0]
    src = RedfishSource("bmc", cfg, ops, clock=clock, monotonic=clock)
    src.start()
    src.poll()
    ops.add({"checkout": 10})
    clock.advance(30.0)
    src.poll()
    assert src.snapshot(clock())[1] == 200.5
    # without the CA bundle the server's certificate is not trusted: a clear failure
    untrusted = RedfishSource("bmc", parse_sources(table(tls_endpoint.base)).redfish[0], ops)
    untrusted.start()
    with pytest.raises(SourceError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        untrusted.poll()
    missing = RedfishSource("bmc", parse_sources(table(tls_endpoint.base, ca_file=str(tmp_path / "x.pem"))).redfish[0], ops)
    with pytest.raises(ConfigError, match="ca_file"):
        missing.start()


@pytest.mark.parametrize("watts,match", [(None, "not a non-negative number"), (-5, "not a non-negative number")])
def test_bad_power_values_fail_the_poll(endpoint, clock, monkeypatch, watts, match):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    endpoint.set(POWER_PATH, power_doc(watts))
    src = RedfishSource("bmc", parse_sources(table(endpoint.base)).redfish[0], OpCounter(), clock=clock)
    src.start()
    with pytest.raises(SourceError, match=match):
        src.poll()
    endpoint.set(POWER_PATH, b'{"PowerControl": []}')
    with pytest.raises(SourceError, match=r"no PowerControl\[0\]"):
        src.poll()


def test_a_host_can_take_the_chassis_watts(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    endpoint.set(POWER_PATH, power_doc(410))
    green = GreenConfig(hosts=(HostConfig(name="pg-main", kind="database", measured="db-bmc"),))
    mgr = SourceManager.from_config(table(endpoint.base, name="db-bmc", services=[]), green)
    mgr.poll_all()
    mgr.poll_all()
    assert mgr.current().host_watts == {"pg-main": (410.0, "redfish_bmc")}
    bad = GreenConfig(hosts=(HostConfig(name="pg-main", kind="database", measured="nope"),))
    with pytest.raises(ConfigError, match="measured = 'nope' names no power source"):
        SourceManager.from_config(table(endpoint.base), bad)


CHASSIS_PATH = "/redfish/v1/Chassis/1U"
ENV_PATH = "/redfish/v1/Chassis/1U/EnvironmentMetrics"


def chassis_doc(links: bool = True) -> bytes:
    """A Chassis resource of the newer schema (Chassis.v1_21_0): no Power link, PowerSubsystem
    and EnvironmentMetrics instead, as DMTF's public-rackmount1 mockup shows it."""
    doc: dict = {"@odata.id": CHASSIS_PATH, "@odata.type": "#Chassis.v1_21_0.Chassis", "Id": "1U",
                 "Name": "Computer System Chassis", "ChassisType": "RackMount",
                 "PowerSubsystem": {"@odata.id": f"{CHASSIS_PATH}/PowerSubsystem"},
                 "ThermalSubsystem": {"@odata.id": f"{CHASSIS_PATH}/ThermalSubsystem"}}
    if links:
        doc["EnvironmentMetrics"] = {"@odata.id": ENV_PATH}
    return orjson.dumps(doc)


ABSENT = object()


def env_doc(watts: object = ABSENT, kwh: object = ABSENT) -> bytes:
    """EnvironmentMetrics as DMTF's public-rackmount1 mockup shows it; ``EnergykWh`` (schema
    v1.1+, "The energy consumption (kWh)") and ``PowerWatts`` only when given."""
    doc: dict = {
        "@odata.id": ENV_PATH, "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "Id": "EnvironmentMetrics", "Name": "Chassis Environment Metrics",
        "TemperatureCelsius": {"DataSourceUri": f"{CHASSIS_PATH}/Sensors/AmbientTemp", "Reading": 22.5},
    }
    if watts is not ABSENT:
        doc["PowerWatts"] = {"DataSourceUri": f"{CHASSIS_PATH}/Sensors/TotalPower", "Reading": watts}
    if kwh is not ABSENT:
        doc["EnergykWh"] = {"DataSourceUri": f"{CHASSIS_PATH}/Sensors/TotalEnergy", "Reading": kwh}
    return orjson.dumps(doc)


def test_newer_bmc_without_power_is_read_through_environment_metrics(endpoint, clock, monkeypatch):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    auth = {"Authorization": basic_auth("root", "calvin")}
    endpoint.set(CHASSIS_PATH, chassis_doc(), content_type="application/json", require=auth)
    endpoint.set(ENV_PATH, env_doc(374), content_type="application/json", require=auth)
    ops = OpCounter()
    src = RedfishSource("bmc", parse_sources(table(endpoint.base)).redfish[0], ops, clock=clock, monotonic=clock)
    src.start()
    src.poll()  # Power answers 404; the Chassis links EnvironmentMetrics
    ops.add({"checkout": 2_000, "orders": 1_000})
    clock.advance(30.0)
    src.poll()
    rates, watts = src.snapshot(clock())
    # 374 W x 30 s = 11,220 J over 3,000 ops: 11,220 / 3.6e6 / 3,000 = 1.0389e-6 kWh/op
    assert watts == 374.0
    assert rates["checkout"].kwh_per_op == pytest.approx(1.0389e-6, rel=1e-4) == rates["orders"].kwh_per_op
    paths = [p for p, _ in endpoint.requests]
    # the first poll looks for an energy counter (Chassis -> EnvironmentMetrics: none here),
    # reads Power (404), then EnvironmentMetrics through the link already followed; then directly
    assert paths == [CHASSIS_PATH, ENV_PATH, POWER_PATH, ENV_PATH, ENV_PATH]


def test_environment_metrics_can_be_pinned(endpoint, clock, monkeypatch):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    endpoint.set(POWER_PATH, power_doc(999))
    endpoint.set(ENV_PATH, env_doc(250.5))
    cfg = parse_sources(table(endpoint.base, resource="EnvironmentMetrics")).redfish[0]
    src = RedfishSource("bmc", cfg, OpCounter(), clock=clock, monotonic=clock)
    src.start()
    src.poll()
    clock.advance(30.0)
    src.poll()
    assert src.snapshot(clock())[1] == 250.5 and {p for p, _ in endpoint.requests} == {ENV_PATH}
    endpoint.set(ENV_PATH, env_doc(None))
    with pytest.raises(SourceError, match=r"PowerWatts\.Reading is None, not a non-negative number"):
        src.poll()


def test_a_chassis_that_is_not_there_or_reports_no_power_is_a_clear_error(endpoint, clock, monkeypatch):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    src = RedfishSource("bmc", parse_sources(table(endpoint.base)).redfish[0], OpCounter(), clock=clock)
    src.start()
    with pytest.raises(SourceError, match=r"no chassis '1U' at .*check `chassis_id`.*/redfish/v1/Chassis lists"):
        src.poll()
    endpoint.set(CHASSIS_PATH, chassis_doc(links=False))
    with pytest.raises(SourceError, match="neither a Power resource nor an EnvironmentMetrics link"):
        src.poll()
    with pytest.raises(ConfigError, match=r"resource.*'auto', 'Power' or 'EnvironmentMetrics'"):
        parse_sources(table(endpoint.base, resource="PowerSubsystem"))


def test_credentials_follow_a_redirect_only_within_the_same_origin(endpoint, clock, monkeypatch):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    auth = {"Authorization": basic_auth("root", "calvin")}
    port = endpoint.server.server_address[1]
    endpoint.set(POWER_PATH, b"", status=302, headers={"Location": "/redfish/v1/Chassis/1U/Power/"})
    endpoint.set(POWER_PATH + "/", power_doc(150), content_type="application/json", require=auth)
    src = RedfishSource("bmc", parse_sources(table(endpoint.base)).redfish[0], OpCounter(), clock=clock,
                        monotonic=clock)
    src.start()
    src.poll()
    clock.advance(30.0)
    src.poll()
    assert src.snapshot(clock())[1] == 150.0  # same origin: followed, with the credentials
    # another origin (localhost is not 127.0.0.1): the password is not sent there
    endpoint.set(POWER_PATH, b"", status=302, headers={"Location": f"http://localhost:{port}/steal"})
    before = len(endpoint.requests)
    with pytest.raises(SourceError, match="redirected .*another origin; credentials are not sent there"):
        src.poll()
    assert len(endpoint.requests) == before + 1  # only the request that was redirected


# -- EnergykWh: the chassis' cumulative energy counter ------------------------------------


def pinned_env_source(endpoint, clock, monkeypatch, ops: OpCounter) -> RedfishSource:
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    cfg = parse_sources(table(endpoint.base, resource="EnvironmentMetrics")).redfish[0]
    src = RedfishSource("bmc", cfg, ops, clock=clock, monotonic=clock)
    src.start()
    return src


def poll_at(src: RedfishSource, endpoint, clock, ops: OpCounter, kwh: object, watts: object = 300,
            ops_in: int = 3_000, advance: float = 30.0) -> tuple[float | None, float | None]:
    """One interval: ops counted, the BMC's counter set, 30 s pass, one poll; -> (kWh/op, W)."""
    endpoint.set(ENV_PATH, env_doc(watts, kwh), content_type="application/json")
    ops.add({"checkout": ops_in * 2 // 3, "orders": ops_in - ops_in * 2 // 3})
    clock.advance(advance)
    src.poll()
    rates, w = src.snapshot(clock())
    return (rates["checkout"].kwh_per_op if "checkout" in rates else None), w


def test_energy_is_the_counters_increase_between_polls(endpoint, clock, monkeypatch, caplog):
    ops = OpCounter()
    src = pinned_env_source(endpoint, clock, monkeypatch, ops)
    endpoint.set(ENV_PATH, env_doc(300, 325.675), content_type="application/json")
    src.poll()  # baseline: 325.675 kWh
    assert src.snapshot(clock()) == ({}, None)
    # 325.675 -> 325.679 kWh: 0.004 kWh x 3.6e6 = 14,400 J in 30 s = 480 W (PowerWatts says 300:
    # the counter, which saw a burst between the samples, wins); 14,400 / 3.6e6 / 3,000 ops = 1.3333e-6
    per_op, w = poll_at(src, endpoint, clock, ops, 325.679)
    assert w == pytest.approx(480.0) and per_op == pytest.approx(1.3333e-6, rel=1e-4)
    assert src.stats["energy_counter"] == 1
    # 325.679 -> 325.6815 kWh: 0.0025 kWh = 9,000 J in 30 s = 300 W; over 6,000 ops 4.1667e-7 kWh/op
    per_op, w = poll_at(src, endpoint, clock, ops, 325.6815, ops_in=6_000)
    assert w == pytest.approx(300.0) and per_op == pytest.approx(4.1667e-7, rel=1e-4)
    # counter and no PowerWatts at all: the counter alone carries the energy
    # 325.6815 -> 325.6845 kWh: 0.003 kWh = 10,800 J in 30 s = 360 W
    per_op, w = poll_at(src, endpoint, clock, ops, 325.6845, watts=ABSENT)
    assert w == pytest.approx(360.0) and per_op == pytest.approx(1.0e-6, rel=1e-4)
    health = src.stats
    assert (health["counter_resets"], health["counter_rejected"], health["counter_stalled"]) == (0, 0, 0)
    assert not caplog.records


def test_first_poll_is_a_baseline_and_power_watts_carries_that_interval(endpoint, clock, monkeypatch):
    ops = OpCounter()
    src = pinned_env_source(endpoint, clock, monkeypatch, ops)
    endpoint.set(ENV_PATH, env_doc(300), content_type="application/json")
    src.poll()
    # no counter yet: 300 W x 30 s = 9,000 J over 3,000 ops = 8.3333e-7 kWh/op
    per_op, w = poll_at(src, endpoint, clock, ops, ABSENT)
    assert (w, src.stats["energy_counter"]) == (300.0, 0) and per_op == pytest.approx(8.3333e-7, rel=1e-4)
    # the counter appears (e.g. after a firmware update): its first value is only a baseline,
    # PowerWatts carries this interval: 420 W x 30 s = 12,600 J / 3.6e6 / 3,000 = 1.1667e-6
    per_op, w = poll_at(src, endpoint, clock, ops, 1000.0, watts=420)
    assert (w, src.stats["energy_counter"]) == (420.0, 0) and per_op == pytest.approx(1.1667e-6, rel=1e-4)
    # then the increase: 1000.0 -> 1000.0025 kWh = 9,000 J = 300 W although PowerWatts says 420
    per_op, w = poll_at(src, endpoint, clock, ops, 1000.0025, watts=420)
    assert (w, src.stats["energy_counter"]) == (pytest.approx(300.0), 1)
    # a baseline with no PowerWatts publishes nothing new: the previous value stays
    src2 = pinned_env_source(endpoint, clock, monkeypatch, OpCounter())
    endpoint.set(ENV_PATH, env_doc(kwh=5.0), content_type="application/json")
    src2.poll()
    assert src2.snapshot(clock()) == ({}, None)


def test_a_counter_going_backwards_starts_a_new_baseline_and_is_counted(endpoint, clock, monkeypatch, caplog):
    ops = OpCounter()
    src = pinned_env_source(endpoint, clock, monkeypatch, ops)
    endpoint.set(ENV_PATH, env_doc(300, 500.0), content_type="application/json")
    src.poll()
    per_op, w = poll_at(src, endpoint, clock, ops, 500.003)  # 0.003 kWh in 30 s = 360 W
    assert w == pytest.approx(360.0)
    # BMC reset: 500.003 -> 0.001 kWh. No negative energy: PowerWatts 250 W carries the interval
    per_op, w = poll_at(src, endpoint, clock, ops, 0.001, watts=250)
    assert (w, src.stats["energy_counter"], src.stats["counter_resets"]) == (250.0, 0, 1)
    assert per_op == pytest.approx(250 * 30 / 3.6e6 / 3_000, rel=1e-9)  # 6.9444e-7, positive
    # from the new baseline: 0.001 -> 0.0035 kWh = 9,000 J in 30 s = 300 W
    per_op, w = poll_at(src, endpoint, clock, ops, 0.0035, watts=250)
    assert (w, src.stats["energy_counter"]) == (pytest.approx(300.0), 1)
    # a second reset is counted, but logged only once
    poll_at(src, endpoint, clock, ops, 0.0, watts=250)
    assert src.stats["counter_resets"] == 2
    warnings = [r for r in caplog.records if "went back" in r.getMessage()]
    assert len(warnings) == 1 and "bmc" in warnings[0].getMessage()


def test_negative_or_absurd_counter_values_never_become_energy(endpoint, clock, monkeypatch):
    ops = OpCounter()
    src = pinned_env_source(endpoint, clock, monkeypatch, ops)
    endpoint.set(ENV_PATH, env_doc(300, 10.0), content_type="application/json")
    src.poll()
    # a negative reading: no baseline from it, PowerWatts carries the interval
    per_op, w = poll_at(src, endpoint, clock, ops, -4.0, watts=310)
    assert (w, src.stats["counter_rejected"], src.stats["energy_counter"]) == (310.0, 1, 0)
    per_op, w = poll_at(src, endpoint, clock, ops, 10.01, watts=320)  # new baseline only
    assert (w, src.stats["energy_counter"]) == (320.0, 0)
    # 10.01 -> 1e9 kWh in 30 s would be ~1.2e14 W (> MAX_METER_WATTS 1e6): rejected, new baseline
    per_op, w = poll_at(src, endpoint, clock, ops, 1e9, watts=330)
    assert (w, src.stats["counter_rejected"]) == (330.0, 2)
    # from 1e9 kWh: +0.003 kWh = 360 W. (At 1e9 a double still resolves 0.003 kWh to ~1e-7 kWh.)
    per_op, w = poll_at(src, endpoint, clock, ops, 1e9 + 0.003, watts=330)
    assert w == pytest.approx(360.0, rel=1e-4) and src.stats["energy_counter"] == 1
    assert 0 < per_op < 1e-5


@pytest.mark.parametrize("kwh", ["325.675", None, True, {"value": 1}, [1.0]])
def test_a_non_numeric_counter_is_treated_as_absent(endpoint, clock, monkeypatch, kwh):
    ops = OpCounter()
    src = pinned_env_source(endpoint, clock, monkeypatch, ops)
    endpoint.set(ENV_PATH, env_doc(300, kwh), content_type="application/json")
    src.poll()
    # PowerWatts as before: 300 W x 30 s = 9,000 J over 3,000 ops = 8.3333e-7 kWh/op
    per_op, w = poll_at(src, endpoint, clock, ops, kwh)
    assert (w, src.stats["energy_counter"]) == (300.0, 0) and per_op == pytest.approx(8.3333e-7, rel=1e-4)
    # and without PowerWatts that is today's error, naming what is missing
    endpoint.set(ENV_PATH, env_doc(kwh=kwh))
    with pytest.raises(SourceError, match=r"no PowerWatts\.Reading"):
        src.poll()


def test_a_counter_coarser_than_an_interval_is_counted_as_stalled(endpoint, clock, monkeypatch):
    ops = OpCounter()
    src = pinned_env_source(endpoint, clock, monkeypatch, ops)
    endpoint.set(ENV_PATH, env_doc(374, 325.675), content_type="application/json")
    src.poll()
    per_op, w = poll_at(src, endpoint, clock, ops, 325.675, watts=374)  # did not move at 374 W
    assert (w, src.stats["counter_stalled"], src.stats["energy_counter"]) == (0.0, 1, 1)


def test_counter_in_use_shows_in_health_and_auto_finds_it(endpoint, clock, monkeypatch):
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    endpoint.set(CHASSIS_PATH, chassis_doc(), content_type="application/json")
    endpoint.set(ENV_PATH, env_doc(300, 42.0), content_type="application/json")
    mgr = SourceManager(parse_sources(table(endpoint.base, name="rack7-bmc")), clock=clock, monotonic=clock)
    mgr.poll_all()  # Power answers 404: EnvironmentMetrics, counter baseline 42.0
    assert mgr.health()["rack7-bmc"]["energy_counter"] == 0
    endpoint.set(ENV_PATH, env_doc(300, 42.003), content_type="application/json")
    clock.advance(30.0)
    mgr.poll_all()  # 0.003 kWh in 30 s = 360 W
    assert mgr.current().host_watts == {} and mgr.energy[0].snapshot(clock())[1] == pytest.approx(360.0)
    health = mgr.health()["rack7-bmc"]
    assert health["ok"] and health["energy_counter"] == 1 and health["counter_resets"] == 0


readings = st.one_of(
    st.none(),
    st.floats(min_value=-1e3, max_value=1e12, allow_nan=False),
    st.sampled_from([float("inf"), float("-inf"), float("nan")]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(readings, st.floats(min_value=0.001, max_value=3_600)), max_size=40))
def test_counter_energy_is_never_negative_or_huge(steps):
    counter = KwhCounter("prop")
    counter.step(steps[0][0] if steps else None, None)
    for kwh, elapsed in steps[1:]:
        joules = counter.step(kwh, elapsed)
        assert joules is None or 0.0 <= joules <= MAX_METER_WATTS * elapsed
        assert counter.used == (joules is not None)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0, max_value=1e6), st.lists(st.floats(min_value=0, max_value=5.0), min_size=1, max_size=30))
def test_a_rising_counter_is_integrated_exactly(start, increases):
    """Summed interval energies equal the counter's whole rise (each 30 s step <= 5 kWh = 600 kW)."""
    counter = KwhCounter("prop")
    value = start
    counter.step(value, None)
    total = 0.0
    for inc in increases:
        before, value = value, value + inc
        joules = counter.step(value, 30.0)
        assert joules is not None and joules == (value - before) * 3.6e6
        total += joules
    assert total == pytest.approx((value - start) * 3.6e6, rel=1e-9, abs=1e-3)
    assert (counter.resets, counter.rejected) == (0, 0)


def test_auto_prefers_the_energy_counter_even_where_power_still_answers(endpoint, clock, monkeypatch):
    # many BMCs serve the deprecated Power resource beside EnvironmentMetrics: with a counter
    # there, auto reads the counter; without one it stays on Power (the tests above)
    monkeypatch.setenv("TEST_BMC_PASSWORD", "calvin")
    endpoint.set(POWER_PATH, power_doc(999), content_type="application/json")
    endpoint.set(CHASSIS_PATH, chassis_doc(), content_type="application/json")
    endpoint.set(ENV_PATH, env_doc(300, 42.0), content_type="application/json")
    ops = OpCounter()
    src = RedfishSource("bmc", parse_sources(table(endpoint.base)).redfish[0], ops, clock=clock, monotonic=clock)
    src.start()
    src.poll()  # probe finds EnergykWh; this poll is the counter's baseline (42.0 kWh)
    endpoint.set(ENV_PATH, env_doc(300, 42.003), content_type="application/json")
    ops.add({"checkout": 2_000, "orders": 1_000})
    clock.advance(30.0)
    src.poll()
    # 42.0 -> 42.003 kWh: 0.003 kWh x 3.6e6 = 10,800 J in 30 s = 360 W (Power says 999: not read)
    # 10,800 J / 3.6e6 / 3,000 ops = 1.0e-6 kWh/op
    rates, watts = src.snapshot(clock())
    assert watts == pytest.approx(360.0) and rates["checkout"].kwh_per_op == pytest.approx(1.0e-6, rel=1e-9)
    assert src.stats["energy_counter"] == 1
    # the probe's fetch is the first poll's sample: one GET per poll after finding the link
    assert [p for p, _ in endpoint.requests] == [CHASSIS_PATH, ENV_PATH, ENV_PATH]
