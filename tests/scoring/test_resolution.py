"""Region resolution, caps, first-seen facts, counters and the partial's merge edge cases."""

from __future__ import annotations

import pytest

from agent.carbon.partial import MAX_ENDPOINTS, MAX_REGIONS, OTHER_ENDPOINT, WindowPartial
from agent.carbon.signals import LiveIntensity, MeasuredRate, Signals
from agent.score import score_batch

T0 = 1_767_268_800_000_000_000
NOW_S = T0 / 1e9 + 60


def test_region_resolution_order(h):
    # span/resource region > [green.service_regions] (case-insensitive) > default_region > unknown
    green = {"default_region": "PL", "service_regions": {"Mapped": "eu-central-1"}}
    spans = [
        {"service": "mapped", "region": "eu-west-3", "op": "db"},  # own region wins
        {"service": "MAPPED", "op": "db"},  # service_regions
        {"service": "other", "op": "db"},  # default_region
    ]
    gs = h.report(spans, dict(h.PLAIN, **green)).green_summary
    assert [(r.region, r.status, r.io_ops) for r in gs.regions] == [
        ("eu-west-3", "resolved", 1),
        ("eu-central-1", "resolved", 1),
        ("pl", "resolved", 1),
    ]
    assert gs.per_service_region == {"mapped": "eu-west-3", "other": "pl"}


def test_no_region_anywhere_is_the_unknown_row_with_zero_carbon(h):
    gs = h.report([{"service": "a", "op": "db"}] * 2, h.PLAIN).green_summary
    (row,) = gs.regions
    assert (row.region, row.status, row.io_ops, row.co2_gco2) == ("unknown", "unresolved", 2, 0.0)
    assert row.energy_kwh == pytest.approx(2e-7)
    assert gs.per_service_region == {"a": "unknown"}
    assert gs.per_service_energy_kwh["a"] == pytest.approx(2e-7)  # energy still counted


def test_out_of_table_region_counts_energy_at_zero_grams(h):
    gs = h.report([{"region": "Mars-North-1", "op": "db"}], h.PLAIN).green_summary
    (row,) = gs.regions
    assert (row.region, row.status, row.co2_gco2) == ("mars-north-1", "out_of_table", 0.0)
    assert gs.energy_kwh == pytest.approx(1e-7) and gs.co2.operational_gco2 == 0.0


def test_invalid_region_string_is_ignored_and_counted(h):
    spans = [
        {"service": "a", "region": "pl\n", "op": "db"},
        {"service": "a", "region": "eu west 3!", "op": "db"},
        {"service": "a", "region": "pl", "op": "db"},
    ]
    rep = h.report(spans, dict(h.PLAIN, default_region="eu-west-3"))
    assert rep.counters["region_invalid"] == 2
    assert [r.region for r in rep.green_summary.regions] == ["eu-west-3", "pl"]


def test_max_regions_overflow_goes_to_unknown(h):
    # 256 out-of-table regions first, then eu-west-3 (in the table) overflows: scored as unknown, 0 g
    spans = [{"region": f"r-{i}", "op": "db", "trace": i} for i in range(MAX_REGIONS)]
    spans += [{"region": "eu-west-3", "op": "db", "trace": 999}] * 3
    rep = h.report(spans, h.PLAIN)
    gs = rep.green_summary
    assert len(gs.regions) == MAX_REGIONS + 1 and gs.regions[-1].region == "unknown"
    assert gs.regions[-1].io_ops == 3 and gs.co2.operational_gco2 == 0.0
    assert rep.counters["region_overflow"] == 3


def test_region_overflow_across_merge_equals_concatenation(h):
    ctx = h.context({"calibration": {"b": 2.0}})
    a = [{"service": "a", "region": f"r-{i}", "op": "db", "trace": i} for i in range(200)]
    b = [{"service": "b", "region": f"r-{i}", "op": "db", "trace": i} for i in range(150, 300)]
    b += [{"service": "b", "region": "eu-west-3", "op": "select", "trace": 7}]
    b += [{"service": "b", "region": "unknown", "op": "db", "trace": 8}]
    empty = WindowPartial.empty()
    whole = empty.merge(score_batch(h.build_batch(a + b), ctx))
    merged = empty.merge(score_batch(h.build_batch(a), ctx)).merge(
        score_batch(h.build_batch(b), ctx)
    )
    assert merged.same_as(whole, rel=1e-12)
    assert merged.counters["region_overflow"] == 45  # r-256..r-299 and eu-west-3
    assert float(merged.carbon.sum()) == 0.0
    # a region the window already holds is never folded, even from a batch that overflows alone
    late = [{"service": "c", "region": f"z-{i}", "op": "db", "trace": 1} for i in range(300)]
    late.append({"service": "c", "region": "r-5", "op": "db", "trace": 1})
    window = merged.merge(score_batch(h.build_batch(late), ctx))
    assert window.counters["region_overflow"] == 45 + 300
    # r-5: one op from a, one from the late batch (whose own 300 z-regions all fold)
    assert window.ops[window.cell_reg == window.regions.index("r-5")].sum() == 2


def test_first_seen_region_survives_merges(h):
    ctx = h.context(h.PLAIN)
    first = score_batch(h.build_batch([{"service": "Svc", "region": "pl", "op": "db"}]), ctx)
    later = score_batch(h.build_batch([{"service": "svc", "region": "eu-west-3", "op": "db"}]), ctx)
    merged = first.merge(later)
    assert merged.services == ["svc"] and merged.regions[merged.service_region[0]] == "pl"
    assert later.merge(first).regions[0] == "eu-west-3"


def test_endpoint_cap_folds_new_endpoints_into_other(h):
    ctx = h.context(h.PLAIN)
    spans = [
        {"service": "s", "op": "db", "endpoint": f"q{i}", "trace": 1}
        for i in range(MAX_ENDPOINTS + 10)
    ]
    spans.append({"service": "s", "op": None, "endpoint": "not-io", "trace": 1})
    whole = WindowPartial.empty().merge(score_batch(h.build_batch(spans), ctx))
    assert len(whole.endpoints) == MAX_ENDPOINTS + 1
    assert whole.endpoints[("s", OTHER_ENDPOINT)] == 10
    assert whole.counters["endpoint_overflow"] == 10
    half = len(spans) // 2
    merged = (
        WindowPartial.empty()
        .merge(score_batch(h.build_batch(spans[:half]), ctx))
        .merge(score_batch(h.build_batch(spans[half:]), ctx))
    )
    assert merged.same_as(whole, rel=1e-12)
    # an endpoint the window already holds keeps counting after the cap; q4104 and q4105
    # (folded before) fold again, the last span is not I/O: (other) = 10 + 2
    again = merged.merge(score_batch(h.build_batch(spans[:3] + spans[-3:]), ctx))
    assert again.endpoints[("s", "q0")] == 2 and again.endpoints[("s", OTHER_ENDPOINT)] == 12


def test_traces_requests_and_spans(h):
    spans = [
        {"service": "a", "trace": 1, "entry": True},
        {"service": "a", "trace": 1, "op": "db"},
        {"service": "b", "trace": 2**64 - 1, "entry": True},
        {"service": "b", "trace": 2**64 - 1},
    ]
    rep = h.report(spans, h.PLAIN)
    assert (rep.window.spans, rep.window.traces, rep.window.io_ops) == (4, 2, 1)
    assert rep.green_summary.per_service_requests == {"a": 1, "b": 1}
    assert rep.green_summary.per_service_energy_model == {"a": "io_proxy_v1", "b": ""}
    assert [e.model_dump() for e in rep.per_endpoint_io_ops] == [
        {"service": "a", "endpoint": "op", "io_ops": 1}
    ]


def test_absurd_timestamp_uses_the_window_clock_or_annual(h):
    # with a clock (2026-01-01T12:01Z) the span takes the January 12:00 profile cell; without
    # one it takes the annual value 41.5
    green = dict(h.PLAIN, use_hourly_profiles=True)
    spans = [{"region": "eu-west-3", "op": "db", "start": 0}]
    with_clock = h.report(spans, green).green_summary.regions[0]
    assert with_clock.grid_intensity_gco2_kwh == pytest.approx(40.521505, rel=1e-6)
    no_clock = h.report(spans, green, now_ns=None).green_summary.regions[0]
    assert no_clock.grid_intensity_gco2_kwh == pytest.approx(41.5)
    assert no_clock.intensity_source == "annual"


def test_measured_ratio_is_the_share_of_io_spans_with_measured_energy(h):
    # batch 1: the rate is fresh for 3 ops; batch 2: stale for 1 op -> ratio 3/4
    fresh = h.context(
        h.PLAIN, signals=Signals(measured={"s": MeasuredRate(2e-7, "alumet_rapl", NOW_S, 10.0)})
    )
    stale = h.context(
        h.PLAIN,
        signals=Signals(measured={"s": MeasuredRate(2e-7, "alumet_rapl", NOW_S - 60, 10.0)}),
    )
    one = score_batch(h.build_batch([{"service": "s", "region": "pl", "op": "db"}] * 3), fresh)
    two = score_batch(h.build_batch([{"service": "s", "region": "pl", "op": "db"}]), stale)
    from agent.window import build_report

    gs = build_report(one.merge(two), fresh, T0, T0 + 10**9).green_summary
    assert gs.per_service_measured_ratio == {"s": 0.75}
    # energy 3 x 2e-7 + 1 x 1e-7 = 7e-7 kWh; tag: the measured one wins
    assert gs.per_service_energy_kwh["s"] == pytest.approx(7e-7)
    assert gs.per_service_energy_model["s"] == "alumet_rapl"


def test_live_intensity_for_an_out_of_table_region_is_not_used(h):
    sig = Signals(live_intensity={"mars-1": LiveIntensity(100.0, "electricity_maps_api", NOW_S)})
    gs = h.report([{"region": "mars-1", "op": "db"}], h.PLAIN, signals=sig).green_summary
    assert gs.regions[0].status == "out_of_table" and gs.co2.operational_gco2 == 0.0


def test_unknown_measured_tag_is_not_trusted(h):
    sig = Signals(measured={"svc": MeasuredRate(5e-7, "my_meter", NOW_S, 10.0)})
    rep = h.report([{"region": "pl", "op": "db"}], h.PLAIN, signals=sig)
    assert rep.green_summary.energy_kwh == pytest.approx(1e-7)
    assert rep.counters["measured_stale_spans"] == 1


def test_empty_batch_and_rejected_counts(h):
    batch = h.build_batch([])
    batch.rejected = 3
    batch.counters["service_name_invalid"] = 2
    p = score_batch(batch, h.context())
    assert p.spans == 0 and p.counters == {"spans_rejected": 3, "service_name_invalid": 2}
    assert WindowPartial.from_bytes(p.to_bytes()).same_as(p)
    from agent.window import build_report

    rep = build_report(p, h.context(), T0, T0)
    assert rep.green_summary.energy_model == "" and rep.green_summary.regions == []


def test_from_bytes_refuses_an_unknown_version():
    with pytest.raises(ValueError, match="version 9"):
        WindowPartial.from_bytes(b'{"v": 9}')
    # version 1 (the dense-grid layout) is refused too, with the same message shape
    with pytest.raises(ValueError, match="expected 2"):
        WindowPartial.from_bytes(b'{"v": 1}')


@pytest.mark.parametrize(
    "stamps",
    [
        # across a month end inside one batch
        ["2026-01-31T23:30:00", "2026-02-01T00:30:00"],
        # regression: January of two years plus a February between them (same month number
        # at both ends must not take the one-month fast path)
        ["2025-01-01T05:00:00", "2025-02-01T10:00:00", "2026-01-01T12:00:00"],
    ],
)
def test_each_span_takes_its_own_month_and_hour(h, stamps):
    from datetime import datetime

    from agent.carbon.model import CarbonModel

    model = CarbonModel.default()
    green = dict(h.PLAIN, use_hourly_profiles=True)
    spans = []
    expected = 0.0
    for i, stamp in enumerate(stamps):
        dt = datetime.fromisoformat(stamp + "+00:00")
        spans.append(
            {"region": "eu-west-3", "op": "db", "start": int(dt.timestamp()) * 10**9, "trace": i}
        )
        expected += 1e-7 * model.intensity_at("eu-west-3", True, dt.month, dt.hour) * 1.15
    gs = h.report(spans, green).green_summary
    assert gs.co2.operational_gco2 == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "stamps", [["2026-01-31T23:30:00", "2026-02-01T00:30:00"], ["2026-03-10T14:00:00"] * 2]
)
def test_spans_without_a_time_and_no_clock_take_the_annual_value_beside_timed_ones(h, stamps):
    # no window clock: the span with start 0 is scored at the annual 41.5, each timed span at
    # its own month x hour cell: 1e-7 x 41.5 x 1.15 + sum of 1e-7 x I(month, hour) x 1.15
    from datetime import datetime

    from agent.carbon.model import CarbonModel

    model = CarbonModel.default()
    spans = [{"region": "eu-west-3", "op": "db", "start": 0, "trace": 99}]
    expected = 1e-7 * 41.5 * 1.15
    for i, stamp in enumerate(stamps):
        dt = datetime.fromisoformat(stamp + "+00:00")
        spans.insert(
            i, {"region": "eu-west-3", "op": "db", "start": int(dt.timestamp()) * 10**9, "trace": i}
        )
        expected += 1e-7 * model.intensity_at("eu-west-3", True, dt.month, dt.hour) * 1.15
    green = dict(h.PLAIN, use_hourly_profiles=True)
    gs = h.report(spans, green, now_ns=None).green_summary
    assert gs.co2.operational_gco2 == pytest.approx(expected, rel=1e-12)
    assert gs.regions[0].intensity_source == "monthly_hourly"


@pytest.mark.parametrize("ahead_s,fresh", [(30, True), (2 * 3600, False)])
def test_a_live_reading_dated_in_the_future_is_not_fresh_forever(h, ahead_s, fresh):
    # the window clock is NOW_S; max_signal_age_s is 3600: a reading up to an hour ahead
    # (clock skew, the provider's hour start) is used, one further ahead is refused and counted
    sig = Signals(
        live_intensity={"pl": LiveIntensity(100.0, "electricity_maps_api", NOW_S + ahead_s)}
    )
    rep = h.report([{"region": "pl", "op": "db"}], h.PLAIN, signals=sig)
    row = rep.green_summary.regions[0]
    if fresh:  # 1e-7 x 100 x 1.5 = 1.5e-5 g
        assert row.intensity_source == "real_time" and row.co2_gco2 == pytest.approx(1.5e-5)
    else:  # annual 590.8: 1e-7 x 590.8 x 1.5 = 8.862e-5 g
        assert row.intensity_source == "annual" and row.intensity_estimated
        assert row.co2_gco2 == pytest.approx(8.862e-5)
        assert rep.counters["live_intensity_stale_spans"] == 1


@pytest.mark.parametrize("own_bound,fresh", [(None, False), (7200.0, True), (3000.0, False)])
def test_a_live_reading_with_its_own_age_bound_is_judged_by_it(h, own_bound, fresh):
    # 90 minutes old: stale under the global 3600 s, fresh under a source bound of 7200 s
    # (ENTSO-E publishes an hour late), stale again under a tighter bound of its own
    sig = Signals(live_intensity={
        "pl": LiveIntensity(100.0, "grid_operator_api", NOW_S - 5400, max_age_s=own_bound)})
    rep = h.report([{"region": "pl", "op": "db"}], h.PLAIN, signals=sig)
    row = rep.green_summary.regions[0]
    assert (row.intensity_source, row.intensity_estimated) == (("real_time", False) if fresh else ("annual", True))
    assert row.co2_gco2 == pytest.approx(1.5e-5 if fresh else 8.862e-5)  # 1e-7 x (100 | 590.8) x 1.5


@pytest.mark.parametrize("ahead_s,fresh", [(60, True), (1000, False)])
def test_a_measured_rate_dated_in_the_future_is_not_fresh_forever(h, ahead_s, fresh):
    # interval 30 s: fresh within 3 x 30 = 90 s of the clock, on either side
    sig = Signals(measured={"svc": MeasuredRate(5e-7, "scaphandre_rapl", NOW_S + ahead_s, 30.0)})
    rep = h.report([{"region": "pl", "op": "db"}], h.PLAIN, signals=sig)
    assert rep.green_summary.energy_kwh == pytest.approx(5e-7 if fresh else 1e-7)
    assert rep.counters.get("measured_stale_spans", 0) == (0 if fresh else 1)


def test_service_cap_folds_new_services_into_other_with_their_figures(h):
    from agent.carbon.partial import MAX_SERVICES, OTHER_SERVICE

    ctx = h.context(h.PLAIN)
    spans = [
        {"service": f"s{i}", "region": "eu-west-3" if i < MAX_SERVICES - 1 else "pl", "op": "db",
         "entry": True, "trace": i + 1}
        for i in range(MAX_SERVICES + 7)
    ]
    batch = score_batch(h.build_batch(spans), ctx)
    whole = WindowPartial.empty().merge(batch)
    # 4,095 named services and "(other)": at most MAX_SERVICES names, as the aggregator keeps
    assert len(whole.services) == MAX_SERVICES and whole.services[-1] == OTHER_SERVICE
    assert whole.counters["service_overflow"] == 8
    gs = h.report(spans, h.PLAIN).green_summary
    # the 8 folded services' energy and carbon are in "(other)", scored in their own region
    assert gs.per_service_energy_kwh[OTHER_SERVICE] == pytest.approx(8e-7)
    assert gs.per_service_carbon_kgco2eq[OTHER_SERVICE] > 0
    assert gs.per_service_region[OTHER_SERVICE] == "pl"
    assert gs.per_service_requests[OTHER_SERVICE] == 8
    assert sum(gs.per_service_energy_kwh.values()) == pytest.approx(gs.energy_kwh)
    assert sum(gs.per_service_carbon_kgco2eq.values()) * 1000 == pytest.approx(
        gs.co2.operational_gco2)
    # batch by batch equals at once; a folded service stays folded in later batches
    half = len(spans) // 2
    merged = (WindowPartial.empty().merge(score_batch(h.build_batch(spans[:half]), ctx))
              .merge(score_batch(h.build_batch(spans[half:]), ctx)))
    assert merged.same_as(whole, rel=1e-12)
    again = merged.merge(score_batch(h.build_batch(spans[-2:] + spans[:1]), ctx))
    assert again.counters["service_overflow"] == 10
    assert again.requests[again.services.index(OTHER_SERVICE)] == 10
    assert again.requests[again.services.index("s0")] == 2
