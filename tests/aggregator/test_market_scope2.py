"""Market-based Scope 2 beside the location-based figure: worked figures, the equality
property, hosts, engines (Dask = local bytes), verify round trip and tampering, rendering."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from distributed import Client, LocalCluster
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import synth
from aggregator.engines import fold_lines, merge_next, run_dask, run_local
from aggregator.files import discover
from aggregator.fold.state import AggregateState, seeded
from aggregator.market import MarketFactors
from aggregator.read import Period
from aggregator.render import summary_table
from aggregator.render_html import render_html
from aggregator.report import build_report, content_hash, report_bytes
from carbonspan.cli import main
from schema.models import HostRow
from schema.report import DisclosureReport

PERIOD = Period.parse("2026-11-01", "2026-11-30")
T0 = datetime(2026, 11, 10, tzinfo=UTC)
SOURCE = "EDF PPA with guarantees of origin (eu-west-3); AIB European Residual Mix 2024 (eu-central-1)"
# eu-west-3 covered by a PPA (0 g), eu-central-1 at the residual mix (713 g), pl not in the file
FACTORS = MarketFactors(SOURCE, {"eu-central-1": 713.0, "eu-west-3": 0.0})
FACTORS_TOML = f'[market]\nsource = "{SOURCE}"\n[market.regions]\nEU-West-3 = 0.0\neu-central-1 = 713\n'


def _hosts(i: int = 0) -> list[HostRow]:
    return [
        # 0.004 kWh in eu-central-1: 0.004 x 329.6 x 1.15 = 1.51616 g
        HostRow(name="pg", kind="database", region="eu-central-1", energy_kwh=0.004, co2_gco2=1.51616, pue=1.15),
        # 0.001 kWh in us-east-1, a region no span uses: 0.001 x 379 x 1.15 = 0.43585 g
        HostRow(name="kafka", kind="messaging", region="us-east-1", energy_kwh=0.001, co2_gco2=0.43585, pue=1.15),
        # not in totals: in neither figure
        HostRow(name="spare", kind="database", region="eu-central-1", in_totals=False, energy_kwh=9.0, co2_gco2=9e3),
    ]


def _windows(n: int = 10, hosts: bool = True) -> list:
    svcs = [synth.Svc("api", "eu-west-3", 0.002), synth.Svc("pay", "eu-central-1", 0.001),
            synth.Svc("batch", "pl", 0.004)]
    return [synth.window_report(T0 + timedelta(minutes=i), svcs, hosts=_hosts(i) if hosts else (),
                                embodied_g=0.5) for i in range(n)]


def _archive(root, reports, parts: int = 3):
    synth.write_agent(root, "agent-a", synth.split(synth.sealed_lines(reports), parts), gzip_files=[1],
                      day="20261110")
    return root


def _report(root, factors=FACTORS, engine=run_local, **kw) -> DisclosureReport:
    return build_report(engine(discover([str(root)]), PERIOD, **kw), PERIOD, "ACME", factors)


def test_worked_example_two_contractual_regions_one_fallback_and_hosts(tmp_path):
    report = _report(_archive(tmp_path / "a", _windows()))
    s2 = report.aggregate.scope2
    rows = {r.region: r for r in s2.regions}
    assert list(rows) == ["eu-central-1", "eu-west-3", "pl", "us-east-1"]
    # eu-west-3 (PPA, 0 g): 10 x 0.002 kWh x 1.15 = 0.023 kWh facility; location 10 x 0.002 x 41.5 x 1.15 g
    r = rows["eu-west-3"]
    assert (r.market_basis, r.market_factor_gco2_kwh, r.pue) == ("contractual", 0.0, 1.15)
    assert r.facility_energy_kwh == pytest.approx(0.023, rel=1e-12)
    assert r.location_based_kgco2eq == pytest.approx(0.9545e-3, rel=1e-12)  # 10 x 0.09545 g
    assert r.market_based_kgco2eq == 0.0
    # eu-central-1 (residual mix 713 g): spans 10 x 0.001 kWh + host pg 10 x 0.004 kWh = 0.05 kWh
    # x 1.15 = 0.0575 kWh facility; market 0.0575 x 713 = 40.9975 g; location 10 x (0.37904 + 1.51616) g
    r = rows["eu-central-1"]
    assert (r.market_basis, r.energy_kwh, r.host_energy_kwh) == ("contractual", pytest.approx(0.01), pytest.approx(0.04))
    assert r.facility_energy_kwh == pytest.approx(0.0575, rel=1e-12)
    assert r.market_based_kgco2eq == pytest.approx(40.9975e-3, rel=1e-12)
    assert r.location_based_kgco2eq == pytest.approx(18.952e-3, rel=1e-12)
    assert r.location_intensity_gco2_kwh == pytest.approx(329.6, rel=1e-12)
    # pl: no factor -> location fallback, 10 x 0.004 x 590.8 x 1.5 = 35.448 g both ways
    r = rows["pl"]
    assert (r.market_basis, r.market_factor_gco2_kwh) == ("location_fallback", None)
    assert r.market_based_kgco2eq == r.location_based_kgco2eq == pytest.approx(35.448e-3, rel=1e-12)
    # us-east-1: only the kafka host (PUE 1.15, as its rows recorded it), fallback: 10 x 0.43585 g
    r = rows["us-east-1"]
    assert (r.status, r.pue, r.energy_kwh, r.market_basis) == ("host_only", 1.15, 0.0, "location_fallback")
    assert r.host_energy_kwh == pytest.approx(0.01) and r.market_based_kgco2eq == pytest.approx(4.3585e-3)
    # location = operational + database + messaging = 10 x (0.09545 + 0.37904 + 3.5448 + 1.51616 + 0.43585)
    #          = 10 x 5.9713 g = 59.713 g;  market = 10 x (0 + 4.09975 + 3.5448 + 0.43585) = 80.804 g
    assert s2.location_based_kgco2eq == pytest.approx(59.713e-3, rel=1e-12)
    assert s2.market_based_kgco2eq == pytest.approx(80.804e-3, rel=1e-12)
    # embodied (10 x 0.5 g) is not Scope 2: in the total only, unchanged
    assert report.aggregate.carbon_breakdown.embodied_kgco2eq == pytest.approx(5e-3)
    assert report.aggregate.total_carbon_kgco2eq == pytest.approx(64.713e-3, rel=1e-12)
    assert s2.unmatched_factor_regions == [] and s2.dropped_host_rows == 0
    m = report.methodology.market_factors
    assert (m.source, m.regions) == (SOURCE, {"eu-central-1": 713.0, "eu-west-3": 0.0}) and "x pue" in m.formula


def test_without_factors_the_report_has_no_market_keys_and_the_bytes_are_unchanged(tmp_path):
    root = _archive(tmp_path / "a", _windows(4))
    plain = report_bytes(_report(root, None))
    assert b"scope2" not in plain and b"market" not in plain
    with_factors = json.loads(report_bytes(_report(root)))
    del with_factors["aggregate"]["scope2"], with_factors["methodology"]["market_factors"]
    with_factors["integrity"]["content_hash"] = content_hash(with_factors)
    assert json.loads(plain) == with_factors  # the factors change nothing else
    assert DisclosureReport.model_validate_json(plain).aggregate.scope2 is None  # null when absent


def test_factor_equal_to_the_location_intensity_gives_the_location_figure(tmp_path):
    # the annual table's intensities (synth.REGIONS) and us-east-1's for the kafka host
    same = MarketFactors("grid average as a check", {r: i for r, (i, _) in synth.REGIONS.items()})
    s2 = _report(_archive(tmp_path / "a", _windows())).aggregate.scope2
    s2_same = _report(tmp_path / "a", same).aggregate.scope2
    assert all(r.market_basis == "contractual" for r in s2_same.regions)
    for r in s2_same.regions:
        assert r.market_based_kgco2eq == pytest.approx(r.location_based_kgco2eq, rel=1e-12), r.region
    assert s2_same.market_based_kgco2eq == pytest.approx(s2.location_based_kgco2eq, rel=1e-12)
    # no region in the file at all: market is the location figure exactly
    none = MarketFactors("none here", {"ap-south-1": 10.0})
    s2_none = _report(tmp_path / "a", none).aggregate.scope2
    assert s2_none.market_based_kgco2eq == s2_none.location_based_kgco2eq
    assert s2_none.unmatched_factor_regions == ["ap-south-1"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(synth.REGIONS)), st.integers(1, 10**6)), min_size=1, max_size=6),
       st.integers(0, 10**4))
def test_equality_property_holds_for_any_energies(tmp_path_factory, services, host_wh):
    """For every region, factor = the intensity the location figure used -> market = location."""
    svcs = [synth.Svc(f"s{i}", region, energy * 1e-9) for i, (region, energy) in enumerate(services)]
    host = [HostRow(name="pg", kind="database", region="pl", energy_kwh=host_wh * 1e-6,
                    co2_gco2=host_wh * 1e-6 * 590.8 * 1.5, pue=1.5)]
    root = _archive(tmp_path_factory.mktemp("eq"), [synth.window_report(T0, svcs, hosts=host)], parts=1)
    state = run_local(discover([str(root)]), PERIOD)
    location = build_report(state, PERIOD, "", MarketFactors("x", {"ap-south-1": 1.0})).aggregate.scope2
    factors = MarketFactors("x", {r.region: r.location_intensity_gco2_kwh for r in location.regions})
    s2 = build_report(state, PERIOD, "", factors).aggregate.scope2
    assert s2.market_based_kgco2eq == pytest.approx(s2.location_based_kgco2eq, rel=1e-9)
    table = MarketFactors("x", {r: i for r, (i, _) in synth.REGIONS.items()})  # the annual values
    assert build_report(state, PERIOD, "", table).aggregate.scope2.market_based_kgco2eq == pytest.approx(
        s2.location_based_kgco2eq, rel=1e-9)


def test_host_only_regions_take_the_pue_their_rows_recorded(tmp_path):
    """The agent records the PUE it applied to each host row (1.0 outside its region table);
    a region only hosts use takes it from there (the aggregator never reads the agent's table)."""
    hosts = [HostRow(name="pg", kind="database", region="us-east-1", energy_kwh=0.01, co2_gco2=4.3585, pue=1.15),
             HostRow(name="bahrain", kind="database", region="me-south-1", energy_kwh=0.01, pue=1.0),  # out of table
             HostRow(name="nowhere", kind="messaging", energy_kwh=0.01, pue=1.0)]  # region "unknown"
    reports = [synth.window_report(T0 + timedelta(minutes=i), [synth.Svc("api", "eu-west-3", 0.002)], hosts=hosts)
               for i in range(2)]
    factors = MarketFactors("s", {"us-east-1": 100.0, "me-south-1": 500.0})
    rows = {r.region: r for r in _report(_archive(tmp_path / "a", reports, 1), factors).aggregate.scope2.regions}
    # us-east-1: 2 x 0.01 kWh x 1.15 (AWS) = 0.023 kWh x 100 g = 2.3 g
    assert (rows["us-east-1"].status, rows["us-east-1"].pue) == ("host_only", 1.15)
    assert rows["us-east-1"].market_based_kgco2eq == pytest.approx(2.3e-3)
    # me-south-1: not in the agent's table, so its rows say PUE 1.0: 0.02 x 500 = 10 g
    assert (rows["me-south-1"].status, rows["me-south-1"].pue) == ("host_only", 1.0)
    assert rows["me-south-1"].market_based_kgco2eq == pytest.approx(10e-3)
    assert rows["unknown"].market_basis == "location_fallback"


def test_host_rows_without_a_believable_pue_keep_their_region_location_based(tmp_path):
    """Lines written before host rows recorded a PUE (and rows whose PUE is not a number in
    [1, 10]) give a host-only region no facility energy: even with a factor it stays
    location-based (host_only_no_pue), the regions with rows are unaffected."""
    def window(i: int, pue) -> dict:
        body = synth.window_report(T0 + timedelta(minutes=i), [synth.Svc("api", "eu-west-3", 0.002)], hosts=[
            HostRow(name="pg", kind="database", region="us-east-1", energy_kwh=0.01, co2_gco2=4.3585)]).model_dump(mode="json")
        host = body["green_summary"]["hosts"][0]
        host.pop("pue")
        if pue is not ...:
            host["pue"] = pue
        return body

    reports = [window(i, pue) for i, pue in enumerate([..., None, 0.5, 11.0, [1.2], "1.2", True])]
    factors = MarketFactors("s", {"us-east-1": 100.0, "eu-west-3": 0.0})
    s2 = _report(_archive(tmp_path / "a", reports, 1), factors).aggregate.scope2
    rows = {r.region: r for r in s2.regions}
    r = rows["us-east-1"]
    assert (r.status, r.market_basis, r.market_factor_gco2_kwh) == ("host_only_no_pue", "location_fallback", None)
    assert r.market_based_kgco2eq == r.location_based_kgco2eq == pytest.approx(7 * 4.3585e-3)
    assert (rows["eu-west-3"].market_basis, rows["eu-west-3"].market_based_kgco2eq) == ("contractual", 0.0)
    reports.append(window(7, 1.15))  # one line that records it is enough: the first recorded PUE
    r = {r.region: r for r in _report(_archive(tmp_path / "b", reports, 1), factors).aggregate.scope2.regions}["us-east-1"]
    assert (r.status, r.pue, r.market_basis) == ("host_only", 1.15, "contractual")
    assert r.market_based_kgco2eq == pytest.approx(8 * 0.01 * 1.15 * 100 / 1000)


def _host_lines(regions_per_window: list[list[str]]) -> list[bytes]:
    reports = [synth.window_report(T0 + timedelta(minutes=i), [synth.Svc("api", "eu-west-3", 0.001)],
                                   hosts=[HostRow(name=f"h{j}", kind="database", region=r, energy_kwh=0.001 * (j + 1),
                                                  co2_gco2=0.1 * (j + 1), pue=[None, 1.1, 1.5][(i + j) % 3])
                                          for j, r in enumerate(rs)])
               for i, rs in enumerate(regions_per_window)]
    return [orjson.dumps(rec) for rec in synth.sealed_lines(reports)]


def _capped_fold(lines: list[bytes], known=None) -> AggregateState:
    state = AggregateState(max_regions=3) if known is None else seeded(known, max_regions=3)
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", Period.everything(), state=state)
    state.drop_caches()
    return state


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["eu-west-3", "pl", "us-east-1", "eu-central-1", "de"]), max_size=3),
                min_size=1, max_size=6),
       st.lists(st.integers(0, 6), max_size=3))
def test_host_regions_merge_like_one_sequential_fold_even_past_the_cap(windows, cuts):
    lines = _host_lines(windows)
    whole = _capped_fold(lines)
    bounds = [0, *sorted(min(c, len(lines)) for c in cuts), len(lines)]
    total = AggregateState(max_regions=3)
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        part = lines[lo:hi]
        merge_next(total, _capped_fold(part), lambda known, part=part: _capped_fold(part, known))
    assert list(total.host_regions) == list(whole.host_regions)
    assert total.dropped_host_rows == whole.dropped_host_rows
    for name, acc in whole.host_regions.items():
        assert (total.host_regions[name].energy, total.host_regions[name].carbon, total.host_regions[name].rows) \
            == pytest.approx((acc.energy, acc.carbon, acc.rows), rel=1e-12)
        assert total.host_regions[name].pue == acc.pue  # the first recorded, in file order


@pytest.mark.timeout(120)
def test_dask_gives_the_local_bytes_with_market_factors(tmp_path):
    root = _archive(tmp_path / "a", _windows(24), parts=4)
    local = report_bytes(_report(root))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        distributed = report_bytes(_report(root, engine=run_dask, client=client))
    assert distributed == local and b'"market_based_kgco2eq"' in local


def test_summary_and_html_show_both_figures_in_plain_words(tmp_path, capsys):
    root = _archive(tmp_path / "a", _windows(2))
    report = _report(root, MarketFactors(SOURCE, {"eu-central-1": 713.0, "eu-west-3": 0.0, "eu-west3": 1.0}))
    from rich.console import Console

    console = Console(width=400, record=True)
    console.print(summary_table(report))
    shown = " ".join(console.export_text().split())  # the caption wraps at the table's width
    s2 = report.aggregate.scope2
    assert f"location-based (grid average) {s2.location_based_kgco2eq * 1000:,.3f} g" in shown
    assert f"market-based (your contracts) {s2.market_based_kgco2eq * 1000:,.3f} g" in shown
    assert "contract factors for 2 region(s) (eu-central-1, eu-west-3), grid average for 2 (pl, us-east-1)" in shown
    assert "factors matching no region: eu-west3" in shown
    page = render_html(report)
    for needle in ("Electricity two ways (Scope 2)", "location-based (grid average)",
                   "market-based (your contracts)", "713 g/kWh", "the grid average (no factor given)",
                   "Scope 3", "EDF PPA with guarantees of origin"):
        assert needle in page, needle
    plain = _report(root, None)
    assert "Scope 2" not in render_html(plain)
    console = Console(width=400, record=True)
    console.print(summary_table(plain))
    assert "market-based" not in console.export_text()


def _aggregate(root, out, *extra) -> int:
    return main(["aggregate", str(root), "--from", "2026-11-01", "--to", "2026-11-30", "--org", "ACME",
                 "--out", str(out), *extra])


def test_aggregate_warns_about_a_factor_that_matches_no_region(tmp_path, caplog):
    root = _archive(tmp_path / "a", _windows(2))
    factors = tmp_path / "market.toml"
    factors.write_text(FACTORS_TOML + "eu-west3 = 5.0\n")
    assert _aggregate(root, tmp_path / "r.json", "--market-factors", str(factors)) == 0
    assert "no window in the period has a region named eu-west3" in caplog.text
