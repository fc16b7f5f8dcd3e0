"""Redfish BMC on loopback (plain and TLS with a CA bundle): chassis watts shared by I/O ops."""

from __future__ import annotations

import orjson
import pytest

from agent.config import GreenConfig, HostConfig
from agent.sources.config import parse_sources
from agent.sources.errors import ConfigError, SourceError, SourceStartError
from agent.sources.http import basic_auth
from agent.sources.manager import SourceManager
from agent.sources.opcounter import OpCounter
from agent.sources.redfish import RedfishSource

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


def env_doc(watts: object) -> bytes:
    return orjson.dumps({
        "@odata.id": ENV_PATH, "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "Id": "EnvironmentMetrics", "Name": "Chassis Environment Metrics",
        "TemperatureCelsius": {"DataSourceUri": f"{CHASSIS_PATH}/Sensors/AmbientTemp", "Reading": 22.5},
        "PowerWatts": {"DataSourceUri": f"{CHASSIS_PATH}/Sensors/TotalPower", "Reading": watts},
        "EnergykWh": {"DataSourceUri": f"{CHASSIS_PATH}/Sensors/TotalEnergy", "Reading": 325.675},
    })


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
    assert paths == [POWER_PATH, CHASSIS_PATH, ENV_PATH, ENV_PATH]  # found once, then read directly


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
