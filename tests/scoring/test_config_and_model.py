"""agent.config errors and defaults; the carbon model's data, provenance and profile scaling."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.carbon import model as m
from agent.carbon.regions import PINNED_ANNUAL, PINNED_SOURCE, PINNED_ZONES, PROVIDER_ZONES
from agent.config import Config, ConfigError, GreenConfig, load_config, parse_config

DATA = Path(m.__file__).parent / "data"


def test_defaults_without_a_file():
    cfg = load_config(None)
    assert cfg == Config()
    g = cfg.green
    assert (g.use_hourly_profiles, g.per_operation_coefficients) == (True, True)
    assert g.embodied_carbon_per_request_gco2 == 0.001 and g.default_region is None
    assert g.embodied_per == "trace"  # issue 2's M = traces x per request stays the default


def test_full_file_round_trip(tmp_path):
    path = tmp_path / "carbonspan.toml"
    path.write_text(
        """
[green]
default_region = "EU-West-3"
use_hourly_profiles = false
embodied_carbon_per_request_gco2 = 0
embodied_per = "root_span"
[green.service_regions]
Checkout = "PL"
[green.calibration]
Cart = 1.8
[[green.hosts]]
name = "pg-main"
kind = "database"
region = "eu-west-3"
watts = 120.5
count = 2
[[green.hosts]]
name = "kafka"
kind = "messaging"
measured = "alumet"
in_totals = false
[agent]
grpc_port = 4317
[sources.scaphandre]
url = "http://127.0.0.1:8080/metrics"
"""
    )
    cfg = load_config(path)
    g = cfg.green
    assert g.default_region == "eu-west-3" and g.use_hourly_profiles is False
    assert g.embodied_per == "root_span"
    assert g.service_regions == {"checkout": "pl"} and g.calibration == {"cart": 1.8}
    assert g.hosts[0].watts == 120.5 and g.hosts[0].count == 2 and g.hosts[0].in_totals
    assert g.hosts[1].measured == "alumet" and g.hosts[1].watts == 0.0 and not g.hosts[1].in_totals
    assert cfg.sections == {
        "agent": {"grpc_port": 4317},
        "sources": {"scaphandre": {"url": "http://127.0.0.1:8080/metrics"}},
    }


@pytest.mark.parametrize(
    "doc,message",
    [
        (
            {"green": {"use_hourly_profiles": "yes"}},
            '[green] use_hourly_profiles: expected true or false, got "yes"',
        ),
        ({"green": {"colour": 1}}, "[green] colour: unknown key; expected one of default_region"),
        (
            {"placement": {}},
            "placement: unknown top-level key; expected one of green, agent, sources",
        ),
        (
            {"green": {"default_region": "eu west"}},
            "[green] default_region: expected a region name",
        ),
        (
            {"green": {"embodied_carbon_per_request_gco2": -1}},
            "[green] embodied_carbon_per_request_gco2: expected a number from 0 to 1,000,000 (gCO2e per request)",
        ),
        ({"green": {"embodied_carbon_per_request_gco2": True}}, "got true"),
        (
            {"green": {"embodied_per": "root"}},
            '[green] embodied_per: expected "trace" (each distinct trace id in a window) or '
            '"root_span" (each span without a parent), got "root"',
        ),
        ({"green": {"embodied_per": "Trace"}}, '[green] embodied_per: expected "trace"'),
        ({"green": {"embodied_per": "root-span"}}, 'got "root-span"'),
        ({"green": {"embodied_per": ""}}, '[green] embodied_per: expected "trace"'),
        ({"green": {"embodied_per": True}}, "[green] embodied_per: expected"),
        ({"green": {"embodied_per": 1}}, "[green] embodied_per: expected"),
        ({"green": {"embodied_per": ["trace"]}}, "got an array"),
        (
            {"green": {"service_regions": {"a": 3}}},
            "[green.service_regions] a: expected a region name",
        ),
        ({"green": {"default_region": "pl\n"}}, "[green] default_region: expected a region name"),
        ({"green": {"default_region": "x" * 65}}, "[green] default_region: expected a region name"),
        (
            {"green": {"service_regions": {"A": "pl", "a": "pl"}}},
            "[green.service_regions] a: listed twice",
        ),
        ({"green": {"calibration": {"a": 0}}}, "[green.calibration] a: expected a factor > 0"),
        (
            {"green": {"calibration": {"a": "x"}}},
            '[green.calibration] a: expected a factor > 0 and <= 10,000,000 (e.g. 1.8), got "x"',
        ),
        (
            {"green": {"hosts": {"name": "x"}}},
            "[[green.hosts]]: expected an array of tables, got a table",
        ),
        (
            {"green": {"hosts": [{"kind": "database", "watts": 1}]}},
            "[[green.hosts]] #1 name: missing",
        ),
        (
            {"green": {"hosts": [{"name": "a", "kind": "cache", "watts": 1}]}},
            '[[green.hosts]] #1 kind: expected "database" or "messaging", got "cache"',
        ),
        (
            {"green": {"hosts": [{"name": "a", "kind": "database"}]}},
            "[[green.hosts]] #1 watts: missing",
        ),
        (
            {"green": {"hosts": [{"name": "a", "kind": "database", "watts": 1, "count": 0}]}},
            "[[green.hosts]] #1 count: expected an integer from 1 to 1,000,000, got 0",
        ),
        (
            {"green": {"hosts": [{"name": "a", "kind": "database", "watts": 1, "cores": 4}]}},
            "[[green.hosts]] #1 cores: unknown key",
        ),
        (
            {
                "green": {
                    "hosts": [
                        {"name": "a", "kind": "database", "watts": 1},
                        {"name": "a", "kind": "messaging", "watts": 1},
                    ]
                }
            },
            "[[green.hosts]] #2 name: 'a' is used by an earlier host",
        ),
        (
            {"green": {"hosts": [{"name": "a", "kind": "database", "watts": math.inf}]}},
            "[[green.hosts]] #1 watts: expected a number of watts from 0 to 10,000,000, got inf",
        ),
        ({"agent": 3}, "[agent]: expected a table, got 3"),
        # upper bounds: past them a value is a unit mistake, and it could overflow a window
        (
            {"green": {"calibration": {"a": 1e305}}},
            "[green.calibration] a: expected a factor > 0 and <= 10,000,000 (e.g. 1.8), got 1e+305",
        ),
        (
            {"green": {"embodied_carbon_per_request_gco2": 2e6}},
            "[green] embodied_carbon_per_request_gco2: expected a number from 0 to 1,000,000 "
            "(gCO2e per request), got 2000000.0",
        ),
        (
            {"green": {"hosts": [{"name": "a", "kind": "database", "watts": 1e308}]}},
            "[[green.hosts]] #1 watts: expected a number of watts from 0 to 10,000,000, got 1e+308",
        ),
        (
            {"green": {"hosts": [{"name": "a", "kind": "database", "watts": 1, "count": 10**18}]}},
            "[[green.hosts]] #1 count: expected an integer from 1 to 1,000,000, got "
            "1000000000000000000",
        ),
    ],
)
def test_config_errors_name_the_key_and_what_is_expected(doc, message):
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert message in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[green\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)
    assert isinstance(GreenConfig().service_regions, dict)


def test_pinned_annual_values_and_pue():
    model = m.CarbonModel.default()
    assert {k: model.regions[k].annual_gco2_kwh for k in PINNED_ANNUAL} == {
        "eu-west-3": 41.5,
        "eu-central-1": 329.6,
        "us-east-1": 379.0,
        "pl": 590.8,
    }
    assert [
        model.pue_of(r) for r in ("us-east-1", "europe-west9", "westeurope", "pl", "mars-1")
    ] == [1.15, 1.09, 1.17, 1.5, 1.5]
    assert m.ENERGY_PER_IO_OP_KWH == 1e-7


def test_every_region_has_a_source_and_a_zone_in_the_data():
    zones = json.loads((DATA / "profiles.json").read_text())["zones"]
    model = m.CarbonModel.default()
    for provider, mapping in PROVIDER_ZONES.items():
        for name, zone in mapping.items():
            assert zone in zones, (provider, name, zone)
            reg = model.regions[name]
            assert reg.source in m.SOURCES and reg.annual_gco2_kwh > 0
    assert len(model.regions) >= 130


def test_unpinned_annual_value_is_the_zone_2022_mean():
    zones = json.loads((DATA / "profiles.json").read_text())["zones"]
    model = m.CarbonModel.default()
    assert model.regions["europe-west4"].annual_gco2_kwh == zones["NL"]["annual_mean"]
    assert model.regions["gb"].annual_gco2_kwh == zones["GB"]["annual_mean"]
    assert model.regions["gb"].source == "electricitymaps_2022_mean"


def test_one_grid_zone_has_one_level_whichever_provider_names_it():
    # the design notes' values are grid levels: Paris is 41.5 for AWS, GCP, Azure and "fr"
    # alike, Warsaw 590.8; every region on a pinned zone has the pinned value and source
    model = m.CarbonModel.default()
    by_zone: dict[str, set[float]] = {}
    for reg in model.regions.values():
        by_zone.setdefault(reg.zone, set()).add(reg.annual_gco2_kwh)
    assert all(len(levels) == 1 for levels in by_zone.values()), by_zone
    for name in ("eu-west-3", "europe-west9", "francecentral", "fr"):
        assert model.regions[name].annual_gco2_kwh == 41.5
    assert model.regions["europe-central2"].annual_gco2_kwh == 590.8
    pinned = {r.name for r in model.regions.values() if r.source == PINNED_SOURCE}
    assert pinned == {r.name for r in model.regions.values() if r.zone in PINNED_ZONES}


def test_methodology_names_the_source_of_every_annual_value():
    # an auditor reading only the report can tell, value by value, where the level came from
    model = m.CarbonModel.default()
    text = m.methodology(model, True, True)["intensity_table"]
    pinned_part, other_part = text.split("; electricitymaps_2022_mean: ")
    for reg in model.regions.values():
        if reg.source == PINNED_SOURCE:
            assert f"{reg.annual_gco2_kwh:g} gCO2e/kWh" in pinned_part
            assert f" {reg.name}," in pinned_part or f" {reg.name};" in pinned_part or (
                f" {reg.name} (" in pinned_part
            ), reg.name
        else:
            assert reg.source == "electricitymaps_2022_mean"
    assert "every other table region" in other_part and "2022" in other_part
    assert "year is not stated" in pinned_part


@pytest.mark.parametrize("region", ["eu-west-3", "eu-central-1", "pl", "us-west-1", "westeurope"])
def test_profiles_average_to_the_annual_value(region):
    # the month x hour row, weighted by days per month, and the 24-hour row both average
    # to exactly the annual value: a profile adds shape, never level
    model = m.CarbonModel.default()
    annual = model.regions[region].annual_gco2_kwh
    row = model.intensity_row(region, True)[: m.ANNUAL_COLUMN].reshape(12, 24)
    days = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
    assert float((row * days[:, None]).sum() / (365 * 24)) == pytest.approx(annual, rel=1e-12)
    hourly = np.array(model.profiles[model.regions[region].zone].hourly) * annual
    assert float(hourly.mean()) == pytest.approx(annual, rel=1e-12)
    assert model.intensity_row(region, True)[m.ANNUAL_COLUMN] == annual
    assert set(model.intensity_row(region, False).tolist()) == {annual}


def test_profile_shape_follows_the_data():
    # DE 2022: the stored July 12:00 mean is below the January 18:00 one (solar noon vs winter
    # evening peak), and the scaled values keep that order
    zones = json.loads((DATA / "profiles.json").read_text())["zones"]
    de = zones["DE"]["monthly_hourly"]
    model = m.CarbonModel.default()
    jul_noon, jan_evening = (
        model.intensity_at("eu-central-1", True, 7, 12),
        model.intensity_at("eu-central-1", True, 1, 18),
    )
    assert (de[6][12] < de[0][18]) == (jul_noon < jan_evening)
    assert jul_noon / jan_evening == pytest.approx(de[6][12] / de[0][18], rel=1e-12)


def test_constant_placeholder_zones_have_no_profile():
    model = m.CarbonModel.default()
    assert model.profile_kind("hk", True) == m.KIND_ANNUAL
    assert model.profile_kind("eu-west-3", True) == m.KIND_MONTHLY_HOURLY
    assert model.profile_kind("eu-west-3", False) == m.KIND_ANNUAL


def test_http_weight_buckets():
    got = m.http_weights(np.array([-1, 0, 10239, 10240, 1048576, 1048577]))
    assert got.tolist() == [1.0, 0.8, 0.8, 1.2, 1.2, 2.0]
    assert m.op_weight_table(False).tolist() == [0.0] + [1.0] * 7


def test_data_notice_carries_the_odbl_attribution():
    notice = " ".join((DATA / "NOTICE.md").read_text().split())
    for words in (
        "Open Database License (ODbL 1.0)",
        "Database Contents License (DbCL 1.0)",
        "Sukprasert",
        "Electricity Maps",
    ):
        assert words in notice
    doc = json.loads((DATA / "profiles.json").read_text())
    assert doc["vintage"] == 2022 and "ODbL" in doc["source"]


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1e6, 1e7, 1e6 + 1, 1e7 + 1, 1e305, 10**18])
    | st.sampled_from(
        ["", "pl", "eu-west-3", "EU-West-3", "x y", "database", "messaging", "a" * 70, "trace",
         "root_span"]
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["a", "A", "name", "kind", "watts", "count"]), inner, max_size=3
        )
    ),
    max_leaves=8,
)
_green_tables = st.dictionaries(
    st.sampled_from(
        [
            "default_region",
            "use_hourly_profiles",
            "per_operation_coefficients",
            "embodied_carbon_per_request_gco2",
            "embodied_per",
            "service_regions",
            "calibration",
            "hosts",
            "bogus",
        ]
    ),
    _values,
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(table=_green_tables)
def test_property_green_sanitiser_accepts_clean_values_or_names_the_key(table):
    # whatever the TOML holds, the parser returns a clean config or a ConfigError naming a key
    try:
        g = parse_config({"green": table}).green
    except ConfigError as exc:
        assert str(exc).startswith("[") and any(k in str(exc) for k in (*table, "green"))
        return
    assert isinstance(g.use_hourly_profiles, bool) and isinstance(
        g.per_operation_coefficients, bool
    )
    assert (
        math.isfinite(g.embodied_carbon_per_request_gco2)
        and g.embodied_carbon_per_request_gco2 >= 0
    )
    for key, region in g.service_regions.items():
        assert key == key.lower() and region == region.lower() and 1 <= len(region) <= 64
    assert all(math.isfinite(f) and 0 < f <= 1e7 for f in g.calibration.values())
    assert g.embodied_carbon_per_request_gco2 <= 1e6
    assert g.embodied_per in ("trace", "root_span")
    assert all(0 <= h.watts <= 1e7 and 1 <= h.count <= 1_000_000 for h in g.hosts)
    for host in g.hosts:
        assert host.kind in ("database", "messaging") and host.count >= 1
        assert math.isfinite(host.watts) and host.watts >= 0


def test_the_docs_list_every_config_key_and_default():
    # docs/carbon-model.md section 9 is the user's reference for [green]: it must not drift
    from agent import config

    docs = (Path(__file__).resolve().parents[2] / "docs" / "carbon-model.md").read_text()
    section = docs[docs.index("## 9. Configuration") :]
    for key in (*config._GREEN_KEYS, *config._HOST_KEYS):
        assert f"`{key}`" in section or f"green.{key}" in section, key
    g = GreenConfig()
    assert f"`{str(g.use_hourly_profiles).lower()}`" in section
    assert f"`{g.embodied_carbon_per_request_gco2:g}`" in section
    for bound in (config.MAX_CALIBRATION_FACTOR, config.MAX_HOST_WATTS, config.MAX_HOST_COUNT):
        assert f"{bound:.0e}".replace("e+0", "e") in section  # 1e7 as the docs write it
