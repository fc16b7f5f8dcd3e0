"""Golden numbers, each with its hand calculation beside it (docs/carbon-model.md, section 8)."""

from __future__ import annotations

import itertools
import math

import pytest

from agent.carbon.model import CarbonModel, Profile
from agent.carbon.signals import LiveIntensity, MeasuredRate, Signals
from agent.carbon.tagcodes import CODE, TAGS
from schema import pick_window_tag

T0 = 1_767_268_800_000_000_000  # 2026-01-01T12:00:00Z
NOW_S = T0 / 1e9 + 60


def six_sql(region="eu-west-3", service="checkout", op="db"):
    return [{"service": service, "region": region, "op": op} for _ in range(6)]


def test_six_sql_spans_in_eu_west_3(h):
    # 6 ops x 1e-7 kWh x 41.5 g/kWh x PUE 1.15 = 2.8635e-5 g
    gs = h.report(six_sql(), h.PLAIN).green_summary
    assert gs.co2.operational_gco2 == pytest.approx(2.8635e-5, rel=1e-12)
    assert gs.per_service_carbon_kgco2eq["checkout"] == pytest.approx(2.8635e-8, rel=1e-12)
    assert gs.energy_kwh == pytest.approx(6e-7, rel=1e-12)
    assert gs.co2.total.mid == pytest.approx(2.8635e-5, rel=1e-12)  # embodied 0, no hosts
    assert gs.energy_model == "io_proxy_v1"


def test_six_sql_spans_in_eu_central_1(h):
    # 6 x 1e-7 x 329.6 x 1.15 = 2.27424e-4 g
    gs = h.report(six_sql("eu-central-1"), h.PLAIN).green_summary
    assert gs.co2.operational_gco2 == pytest.approx(2.27424e-4, rel=1e-12)


@pytest.mark.parametrize(
    ("region", "grams", "source"),
    [
        # issue 11, item 9: Ember 2025 national figures (generation-based)
        ("eu-west-1", 1.76571e-4, "ember_2025"),  # 6 x 1e-7 x 255.9 (ie) x 1.15 = 1.76571e-4 g
        ("eu-north-1", 2.4426e-5, "ember_2025"),  # 6 x 1e-7 x 35.4 (se) x 1.15 = 2.4426e-5 g
        ("ap-northeast-1", 3.29406e-4, "ember_2025"),  # 6 x 1e-7 x 477.4 (jp) x 1.15
        ("europe-west4", 1.658544e-4, "ember_2025"),  # GCP: 6 x 1e-7 x 253.6 (nl) x 1.09
        ("us", 3.4596e-4, "ember_2025"),  # ISO code: 6 x 1e-7 x 384.4 x 1.5 = 3.4596e-4 g
        # subnational rows (Cloud Carbon Footprint / Electricity Maps 2023-2024, consumption-based)
        ("us-west-2", 6.141e-5, "ccf_em_2023_2024"),  # 6 x 1e-7 x 89 x 1.15 = 6.141e-5 g
        ("us-east-2", 2.829e-4, "ccf_em_2023_2024"),  # 6 x 1e-7 x 410 x 1.15 = 2.829e-4 g
        ("eastus", 2.66058e-4, "ccf_em_2023_2024"),  # Azure, N. Virginia: 6e-7 x 379 x 1.17
        ("brazilsouth", 6.7392e-5, "ccf_em_2023_2024"),  # BR-CS: 6 x 1e-7 x 96 x 1.17
        ("us-central1", 2.78604e-4, "ccf_em_2023_2024"),  # 6 x 1e-7 x 426 x 1.09 = 2.78604e-4 g
        # the rest: the zone's 2022 Electricity Maps mean (KR 490.82)
        ("ap-northeast-2", 3.386658e-4, "electricitymaps_2022_mean"),  # 6e-7 x 490.82 x 1.15
    ],
)
def test_six_sql_spans_in_a_region_of_each_source(h, region, grams, source):
    gs = h.report(six_sql(region), h.PLAIN).green_summary
    assert gs.co2.operational_gco2 == pytest.approx(grams, rel=1e-12)
    assert CarbonModel.default().regions[region].source == source


def test_two_services_eu_west_3_and_pl_ratio(h):
    # same ops, so the ratio is (intensity x PUE) of pl over eu-west-3:
    # (590.8 x 1.5) / (41.5 x 1.15) = 886.2 / 47.725 = 18.5689...
    green = dict(h.PLAIN, service_regions={"Paris-Svc": "eu-west-3", "warsaw-svc": "PL"})
    spans = [{"service": "paris-svc", "op": "db"}] * 3 + [{"service": "Warsaw-Svc", "op": "db"}] * 3
    gs = h.report(spans, green).green_summary
    ratio = gs.per_service_carbon_kgco2eq["warsaw-svc"] / gs.per_service_carbon_kgco2eq["paris-svc"]
    assert ratio == pytest.approx(18.5689, rel=1e-5)
    assert gs.per_service_region == {"paris-svc": "eu-west-3", "warsaw-svc": "pl"}
    pl = next(r for r in gs.regions if r.region == "pl")
    assert pl.pue == 1.5 and pl.grid_intensity_gco2_kwh == pytest.approx(590.8)


def test_first_seen_region_is_sticky(h):
    # first span in eu-west-3, then two in eu-central-1: label stays eu-west-3, but the
    # carbon is 1e-7 x 41.5 x 1.15 + 2 x 1e-7 x 329.6 x 1.15 = 4.7725e-6 + 7.5808e-5 = 8.05805e-5
    spans = [
        {"service": "API", "region": "EU-West-3", "op": "db"},
        {"service": "api", "region": "eu-central-1", "op": "db"},
        {"service": "api", "region": "eu-central-1", "op": "db"},
    ]
    gs = h.report(spans, h.PLAIN).green_summary
    assert gs.per_service_region == {"api": "eu-west-3"}
    assert gs.per_service_carbon_kgco2eq["api"] * 1000 == pytest.approx(8.05805e-5, rel=1e-12)
    assert [(r.region, r.io_ops) for r in gs.regions] == [("eu-west-3", 1), ("eu-central-1", 2)]
    assert gs.regions[1].co2_gco2 == pytest.approx(7.5808e-5, rel=1e-12)


def test_per_operation_coefficients(h):
    # weights: SELECT 0.5 + INSERT 1.5 + UPDATE 1.5 + DELETE 1.2 + other SQL 1.0
    #        + HTTP 100 B 0.8 + 10 KiB 1.2 + 1 MiB 1.2 + 1 MiB+1 2.0 + unknown size 1.0
    #        + messaging 1.0 = 12.9  ->  12.9e-7 kWh x 41.5 x 1.15 = 6.156525e-5 g
    ops = [("select", -1), ("insert", -1), ("update", -1), ("delete", -1), ("db", -1)]
    ops += [("http", 100), ("http", 10240), ("http", 1048576), ("http", 1048577), ("http", -1)]
    ops += [("messaging", -1), (None, -1)]
    spans = [{"region": "eu-west-3", "op": o, "resp": r} for o, r in ops]
    gs = h.report(spans, dict(h.PLAIN, per_operation_coefficients=True)).green_summary
    assert gs.energy_kwh == pytest.approx(12.9e-7, rel=1e-12)
    assert gs.co2.operational_gco2 == pytest.approx(6.156525e-5, rel=1e-12)
    assert gs.total_io_ops == 11


def test_month_by_hour_profile(h):
    # FR's stored Jan 12:00 UTC mean is 97.1 g; the day-weighted mean of its 288 cells is
    # 871135.8 / 8760 = 99.444726; so eu-west-3 at 2026-01-01T12:00Z is
    # 41.5 x 97.1 / 99.444726 = 40.521505 g/kWh, and 6 SQL spans give
    # 6e-7 x 40.521505 x 1.15 = 2.7959839e-5 g
    gs = h.report(six_sql(), dict(h.PLAIN, use_hourly_profiles=True)).green_summary
    assert gs.co2.operational_gco2 == pytest.approx(2.7959839e-5, rel=1e-6)
    row = gs.regions[0]
    assert row.intensity_source == "monthly_hourly"
    assert row.grid_intensity_gco2_kwh == pytest.approx(40.521505, rel=1e-6)
    assert gs.energy_model == "io_proxy_v3"


def test_hour_of_day_profile_when_zone_has_only_24_values(h):
    # FR's stored 12:00 UTC mean is 90.1 g; the mean of the 24 is 2386.8 / 24 = 99.45, so
    # 41.5 x 90.1 / 99.45 = 37.598291 g/kWh; 6 SQL spans: 6e-7 x 37.598291 x 1.15 = 2.5942821e-5 g
    base = CarbonModel.default()
    model = CarbonModel(
        regions={"eu-west-3": base.regions["eu-west-3"]},
        profiles={"FR": Profile(hourly=base.profiles["FR"].hourly)},
    )
    ctx = h.context(dict(h.PLAIN, use_hourly_profiles=True), model=model)
    from agent.score import score_batch
    from agent.window import build_report

    gs = build_report(score_batch(h.build_batch(six_sql()), ctx), ctx, T0, T0 + 10**9).green_summary
    assert gs.co2.operational_gco2 == pytest.approx(2.5942821e-5, rel=1e-6)
    assert gs.regions[0].intensity_source == "hourly" and gs.energy_model == "io_proxy_v2"


def test_calibration_factor_scales_proxy_and_tags_cal(h):
    # factor 2: 6 x 1e-7 x 2 = 1.2e-6 kWh; x 41.5 x 1.15 = 5.727e-5 g
    gs = h.report(six_sql(), dict(h.PLAIN, calibration={"Checkout": 2.0})).green_summary
    assert gs.energy_kwh == pytest.approx(1.2e-6, rel=1e-12)
    assert gs.co2.operational_gco2 == pytest.approx(5.727e-5, rel=1e-12)
    assert gs.per_service_energy_model["checkout"] == "io_proxy_v1+cal"
    assert gs.energy_model == "io_proxy_v1+cal"


def test_measured_rate_replaces_proxy_and_drops_cal(h):
    # 4 I/O spans at a measured 3e-7 kWh/op = 1.2e-6 kWh (the weight does not apply);
    # x 41.5 x 1.15 = 5.727e-5 g; two non-I/O spans add nothing; measured ratio 4/4 = 1
    sig = Signals(measured={"checkout": MeasuredRate(3e-7, "scaphandre_rapl", NOW_S - 10, 30.0)})
    spans = [{"service": "checkout", "region": "eu-west-3", "op": "select"}] * 4
    spans += [{"service": "checkout", "region": "eu-west-3"}] * 2
    gs = h.report(spans, dict(h.PLAIN, calibration={"checkout": 5.0}), signals=sig).green_summary
    assert gs.per_service_energy_kwh["checkout"] == pytest.approx(1.2e-6, rel=1e-12)
    assert gs.co2.operational_gco2 == pytest.approx(5.727e-5, rel=1e-12)
    assert gs.per_service_measured_ratio["checkout"] == 1.0
    assert gs.per_service_energy_model["checkout"] == "scaphandre_rapl"


def test_stale_measured_rate_falls_back_to_proxy_and_is_counted(h):
    # taken 100 s ago with a 30 s interval: 100 > 3 x 30 -> stale -> proxy 6 x 1e-7 kWh
    sig = Signals(measured={"checkout": MeasuredRate(3e-7, "kepler_ebpf", NOW_S - 100, 30.0)})
    rep = h.report(six_sql(), h.PLAIN, signals=sig)
    gs = rep.green_summary
    assert gs.energy_kwh == pytest.approx(6e-7, rel=1e-12)
    assert gs.per_service_measured_ratio["checkout"] == 0.0
    assert gs.energy_model == "io_proxy_v1"
    assert rep.counters["measured_stale_spans"] == 6


def test_fresh_live_intensity_is_real_time(h):
    # live 100 g/kWh: 6 x 1e-7 x 100 x 1.15 = 6.9e-5 g
    sig = Signals(
        live_intensity={"eu-west-3": LiveIntensity(100.0, "electricity_maps_api", NOW_S - 60)}
    )
    gs = h.report(six_sql(), h.PLAIN, signals=sig).green_summary
    assert gs.co2.operational_gco2 == pytest.approx(6.9e-5, rel=1e-12)
    assert gs.regions[0].intensity_source == "real_time"
    assert not gs.regions[0].intensity_estimated
    assert gs.energy_model == "electricity_maps_api"
    # the provider's isEstimated flag is carried to the row; the value is still used
    sig = Signals(
        live_intensity={"eu-west-3": LiveIntensity(100.0, "electricity_maps_api", NOW_S, True)}
    )
    row = h.report(six_sql(), h.PLAIN, signals=sig).green_summary.regions[0]
    assert row.intensity_source == "real_time" and row.intensity_estimated
    assert row.grid_intensity_gco2_kwh == pytest.approx(100.0)


def test_stale_live_intensity_falls_back_and_says_estimated(h):
    # 2 h old > max_signal_age 1 h -> annual 41.5: 2.8635e-5 g, estimated
    sig = Signals(
        live_intensity={"eu-west-3": LiveIntensity(100.0, "grid_operator_api", NOW_S - 7200)}
    )
    rep = h.report(six_sql(), h.PLAIN, signals=sig)
    gs = rep.green_summary
    assert gs.co2.operational_gco2 == pytest.approx(2.8635e-5, rel=1e-12)
    assert gs.regions[0].intensity_source == "annual" and gs.regions[0].intensity_estimated
    assert gs.energy_model == "io_proxy_v1"
    assert rep.counters["live_intensity_stale_spans"] == 6


def test_hosts_declared_watts(h):
    # app: 6 SQL spans = 6e-7 kWh, 2.8635e-5 g.  window 60 s.
    # pg (database, in totals): 120 W x 2 x 60 s = 14400 J = 0.004 kWh; x 41.5 x 1.15 = 0.1909 g
    # mq (messaging, not in totals): 10 W x 60 s = 600 J = 1.6667e-4 kWh (reported, not summed)
    # energy_kwh = 6e-7 + 0.004 = 0.0040006; total.mid = 2.8635e-5 + 0 + 0.1909 = 0.190928635
    hosts = [
        {"name": "pg", "kind": "database", "region": "eu-west-3", "watts": 120, "count": 2},
        {"name": "mq", "kind": "messaging", "region": "eu-west-3", "watts": 10, "in_totals": False},
        {"name": "far", "kind": "database", "region": "mars-north-1", "watts": 10, "in_totals": False},
    ]
    gs = h.report(six_sql(), dict(h.PLAIN, hosts=hosts)).green_summary
    assert gs.hosts[0].energy_kwh == pytest.approx(0.004, rel=1e-12)
    # each row records the PUE in its carbon (AWS 1.15; 1.0 outside the table, where carbon is 0),
    # so the aggregator's market-based figure needs no region table of its own
    assert [(r.pue, r.co2_gco2 > 0) for r in gs.hosts] == [(1.15, True), (1.15, True), (1.0, False)]
    assert gs.co2.database_gco2 == pytest.approx(0.1909, rel=1e-12)
    assert gs.co2.messaging_gco2 == 0.0
    assert gs.hosts[1].energy_kwh == pytest.approx(1.6666667e-4, rel=1e-6)
    assert gs.energy_kwh == pytest.approx(0.0040006, rel=1e-12)
    assert gs.application_energy_kwh() == pytest.approx(6e-7, rel=1e-6)
    assert gs.co2.operational_gco2 == pytest.approx(2.8635e-5, rel=1e-12)
    assert gs.co2.total.mid == pytest.approx(0.190928635, rel=1e-12)
    assert gs.co2.total.methodology == "sci_operational_embodied_hosts"
    assert set(gs.per_service_energy_kwh) == {"checkout"}
    assert sum(r.co2_gco2 for r in gs.regions) == pytest.approx(2.8635e-5, rel=1e-12)


def test_hosts_measured_watts(h):
    # pg publishes 50 W (alumet): 50 x 60 s = 3000 J = 8.3333e-4 kWh (count not applied)
    sig = Signals(host_watts={"pg": (50.0, "alumet_rapl")})
    hosts = [{"name": "pg", "kind": "database", "region": "eu-west-3", "watts": 120, "count": 2}]
    gs = h.report(six_sql(), dict(h.PLAIN, hosts=hosts), signals=sig).green_summary
    assert gs.hosts[0].energy_kwh == pytest.approx(8.3333333e-4, rel=1e-6)
    assert gs.hosts[0].energy_model == "alumet_rapl"
    assert gs.energy_model == "alumet_rapl"


def test_embodied_only_in_totals(h):
    # traces 7, 7, 8, 9: 3 distinct x 0.001 g = 0.003 g (totals only);
    # 3 I/O spans (the second is not I/O): 3 x 1e-7 x 41.5 x 1.15 = 1.43175e-5 g operational
    spans = [{"region": "eu-west-3", "op": "db", "trace": t} for t in (7, 7, 8, 9)]
    spans[1]["op"] = None
    gs = h.report(spans, dict(h.PLAIN, embodied_carbon_per_request_gco2=0.001)).green_summary
    assert gs.co2.embodied_gco2 == pytest.approx(0.003)
    assert gs.co2.operational_gco2 == pytest.approx(1.43175e-5, rel=1e-12)
    assert gs.co2.total.mid == pytest.approx(0.003 + 1.43175e-5, rel=1e-12)
    assert gs.co2.total.low == pytest.approx(gs.co2.total.mid * 0.5)
    assert gs.co2.total.high == pytest.approx(gs.co2.total.mid * 2)
    assert sum(gs.per_service_carbon_kgco2eq.values()) * 1000 == pytest.approx(
        1.43175e-5, rel=1e-12
    )


def test_embodied_per_root_span_counts_a_split_trace_once(h):
    # trace 7's root span closes window 1, its child opens window 2:
    # per trace 1 x 0.001 + 1 x 0.001 = 0.002 g; per root span 1 x 0.001 + 0 = 0.001 g
    first, second = [{"trace": 7, "root": True}], [{"trace": 7}]
    for unit, want in (("trace", 0.002), ("root_span", 0.001)):
        cfg = dict(h.PLAIN, embodied_carbon_per_request_gco2=0.001, embodied_per=unit)
        later = {"start": h.T0 + 60 * 10**9, "end": h.T0 + 120 * 10**9}
        windows = [h.report(first, cfg), h.report(second, cfg, **later)]
        assert sum(w.green_summary.co2.embodied_gco2 for w in windows) == pytest.approx(want)


@pytest.mark.parametrize("a,b", list(itertools.combinations(TAGS[1:], 2)))
def test_tag_codes_follow_precedence_for_every_pair(a, b):
    assert TAGS[max(CODE[a], CODE[b])] == pick_window_tag([a, b]) == pick_window_tag([b, a])


def test_cal_applies_to_proxy_tags_under_profiles(h):
    gs = h.report(six_sql(), {"calibration": {"checkout": 1.5}}).green_summary
    assert gs.per_service_energy_model["checkout"] == "io_proxy_v3+cal"
    sig = Signals(live_intensity={"eu-west-3": LiveIntensity(80.0, "grid_operator_api", NOW_S)})
    gs = h.report(six_sql(), {"calibration": {"checkout": 1.5}}, signals=sig).green_summary
    assert gs.per_service_energy_model["checkout"] == "grid_operator_api"  # live wins, no +cal


def test_host_with_a_measured_source_but_no_reading_falls_back_and_is_counted(h):
    # no reading for "pg": declared 100 W x 60 s = 6000 J = 1.6667e-3 kWh, counted
    hosts = [{"name": "pg", "kind": "database", "region": "pl", "watts": 100, "measured": "alumet"}]
    rep = h.report(
        six_sql(),
        dict(h.PLAIN, hosts=hosts),
        signals=Signals(host_watts={"pg": (math.nan, "alumet_rapl")}),
    )
    assert rep.green_summary.hosts[0].energy_kwh == pytest.approx(1.6666667e-3, rel=1e-6)
    assert rep.green_summary.hosts[0].energy_model == "declared_watts"
    assert rep.counters["host_measured_fallback"] == 1


def test_host_carbon_uses_the_profile_at_the_window_midpoint_or_live(h):
    # window 2026-01-01T12:00:00Z..12:01:00Z, midpoint 12:00:30 -> January 12:00 cell of FR:
    # 41.5 x 97.1 / 99.444726 = 40.521505 g/kWh; 240 W x 60 s = 0.004 kWh;
    # 0.004 x 40.521505 x 1.15 = 0.18639892 g
    hosts = [{"name": "pg", "kind": "database", "region": "eu-west-3", "watts": 120, "count": 2}]
    green = dict(h.PLAIN, use_hourly_profiles=True, hosts=hosts)
    gs = h.report(six_sql(), green).green_summary
    assert gs.co2.database_gco2 == pytest.approx(0.18639892, rel=1e-6)
    # a fresh live 200 g/kWh wins: 0.004 x 200 x 1.15 = 0.92 g
    sig = Signals(live_intensity={"eu-west-3": LiveIntensity(200.0, "electricity_maps_api", NOW_S)})
    gs = h.report(six_sql(), green, signals=sig).green_summary
    assert gs.co2.database_gco2 == pytest.approx(0.92, rel=1e-12)
