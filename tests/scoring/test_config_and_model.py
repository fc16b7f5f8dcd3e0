"""agent.config errors and defaults; the carbon model's data, provenance and profile scaling."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.carbon import annual as a
from agent.carbon import model as m
from agent.carbon.regions import ISO_SPLIT, PROVIDER_ZONES
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


#: issue 11, item 9: the table's values, as the issue gives them (Ember, national grids, table
#: ember-2025; subnational rows: Cloud Carbon Footprint and Electricity Maps 2023-2024)
EMBER_VALUES = {
    "eu-west-3": 41.5, "fr": 41.5, "eu-central-1": 329.6, "de": 329.6, "pl": 590.8,
    "eu-west-2": 217.4, "gb": 217.4, "eu-west-1": 255.9, "ie": 255.9, "eu-north-1": 35.4,
    "se": 35.4, "no": 28.1, "norwayeast": 28.1, "fi": 57.5, "europe-north1": 57.5,
    "nl": 253.6, "westeurope": 253.6, "be": 109.3, "europe-west1": 109.3, "it": 284.6,
    "eu-south-1": 284.6, "es": 153.6, "eu-south-2": 153.6, "jp": 477.4,
    "ap-northeast-1": 477.4, "ap-northeast-3": 477.4, "sg": 497.1, "ap-southeast-1": 497.1,
    "au": 524.6, "ap-southeast-2": 524.6, "in": 670.5, "ap-south-1": 670.5, "us": 384.4,
}  # fmt: skip
SUBNATIONAL_VALUES = {
    "us-east-1": 379.0, "us-east-2": 410.0, "us-west-1": 200.0, "us-west-2": 89.0,
    "ca-central-1": 13.0, "sa-east-1": 96.0, "us-central1": 426.0,
    "southamerica-east1": 96.0, "brazilsouth": 96.0,  # sa-east-1's row is for the BR-CS zone
}  # fmt: skip


def test_table_values_and_their_sources_and_pue():
    model = m.CarbonModel.default()
    assert {k: model.regions[k].annual_gco2_kwh for k in EMBER_VALUES} == EMBER_VALUES
    assert {model.regions[k].source for k in EMBER_VALUES} == {a.EMBER}
    assert {k: model.regions[k].annual_gco2_kwh for k in SUBNATIONAL_VALUES} == SUBNATIONAL_VALUES
    assert {model.regions[k].source for k in SUBNATIONAL_VALUES} == {a.SUBNATIONAL_KEY}
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
            assert reg.source in a.SOURCES and reg.annual_gco2_kwh > 0
    assert len(model.regions) >= 130


def test_a_split_country_code_is_in_the_table_only_with_a_national_figure():
    # no zone (so no profile, annual only) and Ember's figure; DK, BR, CA have none: out of table
    model = m.CarbonModel.default()
    for code in ("us", "jp", "au", "in", "it", "se", "no"):
        reg = model.regions[code]
        assert (reg.zone, reg.source, reg.provider) == (None, a.EMBER, "iso"), code
        assert model.profile_kind(code, True) == m.KIND_ANNUAL
    assert not {"dk", "br", "ca"} & set(model.regions)
    assert set(ISO_SPLIT) >= {"us", "jp", "dk"}


def test_the_rest_keep_the_zone_2022_mean_labelled_as_such():
    zones = json.loads((DATA / "profiles.json").read_text())["zones"]
    model = m.CarbonModel.default()
    for name, zone in (("ap-northeast-2", "KR"), ("eu-central-2", "CH"), ("ch", "CH"),
                       ("us-south1", "US-TEX-ERCO"), ("northcentralus", "US-MIDA-PJM"),
                       ("us-west2", "US-CAL-LDWP")):  # fmt: skip
        reg = model.regions[name]
        assert (reg.annual_gco2_kwh, reg.source) == (zones[zone]["annual_mean"], a.EM_2022), name
    # a US region with no subnational row is not given the US national figure: no one grid
    assert all(r.annual_gco2_kwh != 384.4 for r in model.regions.values() if r.name != "us")


def test_one_national_grid_has_one_level_whichever_provider_names_it():
    # Ember's figures are national grids' levels: Paris is 41.5 for AWS, GCP, Azure and "fr"
    # alike, and every region on any zone of an Ember country (outside the US) has its figure
    model = m.CarbonModel.default()
    for reg in model.regions.values():
        country = a.country_of(reg.zone) if reg.zone else reg.name
        if country in a.EMBER_2025 and country != "us":
            assert (reg.annual_gco2_kwh, reg.source) == (a.EMBER_2025[country], a.EMBER), reg.name
    for name in ("eu-west-3", "europe-west9", "francecentral", "francesouth", "fr"):
        assert model.regions[name].annual_gco2_kwh == 41.5
    # a subnational row holds for its site: Azure and GCP in N. Virginia take us-east-1's 379
    for row in a.SUBNATIONAL:
        assert row.given_for in row.regions
        for name in row.regions:
            reg = model.regions[name]
            assert (reg.annual_gco2_kwh, reg.source, reg.zone) == (row.value, a.SUBNATIONAL_KEY, row.zone)


def test_methodology_names_source_basis_and_vintage_of_every_region():
    # an auditor reading only the line can tell, value by value, where each level came from
    model = m.CarbonModel.default()
    meth = m.methodology(model, True, True)
    assert "ember-2025" in meth["intensity_table"]
    texts = {key: meth[f"intensity_table_{key}"] for key in a.SOURCES}
    for key, text in texts.items():
        src = a.SOURCES[key]
        assert text.startswith(f"{src.publisher}; {src.basis}; vintage {src.vintage}; {src.licence}")
    assert "generation-based" in texts[a.EMBER] and "CC-BY-4.0" in texts[a.EMBER]
    assert "consumption-based" in texts[a.SUBNATIONAL_KEY] and "2023-2024" in texts[a.SUBNATIONAL_KEY]
    assert "2022" in texts[a.EM_2022] and "ODbL" in texts[a.EM_2022]
    named: dict[str, list[tuple[str, str]]] = {}  # region -> [(source, entry naming it)]
    for key, text in texts.items():
        for entry in text.split(f"{a.SOURCES[key].licence}: ", 1)[1].split("; "):
            head, _, tail = entry.rpartition(": ")
            names = tail.split(", ") if head else [entry.split(" ")[0]]  # "r v (zone)" for EM
            for name in names:
                named.setdefault(name, []).append((key, entry))
    assert set(named) == set(model.regions)
    for reg in model.regions.values():
        ((key, entry),) = named[reg.name]
        assert key == reg.source and f"{reg.annual_gco2_kwh:g}" in entry.replace(":", " ").split(" "), (reg.name, entry)
    assert "design notes" not in meth["intensity_table"] + "".join(texts.values())


def test_every_methodology_value_fits_what_a_report_keeps():
    # the aggregator keeps a methodology value of at most MAX_METHOD_VALUE_BYTES; a longer one
    # would vanish from the report, and with it the source of its figures
    from aggregator.fold.rules import MAX_METHOD_KEYS, MAX_METHOD_VALUE_BYTES

    meth = m.methodology(m.CarbonModel.default(), True, True)
    assert max(len(v.encode()) for v in meth.values()) <= MAX_METHOD_VALUE_BYTES
    assert len(meth) <= MAX_METHOD_KEYS // 2


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
