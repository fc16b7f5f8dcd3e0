"""Figures a reader can trust (issue 11): temporal coverage, energy without carbon, the SCI
band and embodied carbon charged per trace - in the JSON, the terminal summary and the HTML."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from aggregator import synth
from aggregator.coverage import GAP_TOLERANCE_S, add_run, merge_runs
from aggregator.read import Period
from aggregator.render import print_summary
from aggregator.render_html import render_html
from aggregator.report import build_report, report_bytes
from aggregator.synth import Svc

T0 = datetime(2026, 11, 10, tzinfo=UTC)
DAY = Period.parse("2026-11-10", "2026-11-10")  # 86,400 s
API = Svc("api", "eu-west-3", energy_kwh=1e-3, requests=5, io_ops=10)


def _write(root, agent, reports, files=1):
    synth.write_agent(root, agent, synth.split(synth.sealed_lines(reports), files), day="20261110")
    return root


def _shown(report) -> tuple[str, str]:
    console = Console(width=400, record=True)
    print_summary(report, console)
    return " ".join(console.export_text().split()), render_html(report)  # the caption wraps


def test_25_seconds_of_a_day_is_a_partial_period_not_100_percent(tmp_path, fold):
    """The issue's case: 25 one-second windows in a one-day period were 'Coverage 100 %'."""
    reports = [synth.window_report(T0 + timedelta(hours=6, seconds=i), [API], length_s=1) for i in range(25)]
    report = build_report(fold(_write(tmp_path, "agent-a", reports, files=2), period=DAY), DAY)
    agg = report.aggregate
    assert agg.period_coverage == 1.0  # attributed by the agent: every window had runtime maps
    assert agg.period_seconds == 86_400.0
    assert agg.temporal_coverage == pytest.approx(25 / 86_400)  # one run of 25 s (two files, joined)
    [a] = agg.temporal_coverage_by_agent
    assert (a.agent, a.covered_seconds, a.runs) == ("agent-a", 25.0, 1)
    # the gaps: 06:00:25 to the end of the day, and midnight to 06:00
    assert [(g.start, g.end, g.seconds) for g in agg.largest_gaps] == [
        ("2026-11-10T06:00:25Z", "2026-11-11T00:00:00Z", 64_775.0),
        ("2026-11-10T00:00:00Z", "2026-11-10T06:00:00Z", 21_600.0)]
    assert [w.code for w in report.warnings] == ["partial_period"]
    text, html = _shown(report)
    assert "attributed by the agent 100.0%" in text and "temporal coverage 0.0% of the period's 86,400 s" in text
    assert "partial period: the windows cover 0.0% of the period" in text
    assert "Partial period: the windows cover 0.0% of the period" in html and "Attributed by the agent" in html
    assert "2026-11-10T06:00:25Z" in html  # the longest gap is listed


def test_temporal_coverage_per_agent_and_overall_with_a_gap_and_a_full_day(tmp_path, fold):
    full = [synth.window_report(T0 + timedelta(minutes=i), [API], agent_id="agent-a") for i in range(1440)]
    # agent-b: 00:00-08:00 and 12:00-24:00 (down four hours), over three files
    half = [synth.window_report(T0 + timedelta(minutes=i), [API], agent_id="agent-b")
            for i in [*range(480), *range(720, 1440)]]
    root = _write(_write(tmp_path, "agent-a", full, files=2), "agent-b", half, files=3)
    report = build_report(fold(root, period=DAY), DAY)
    agg = report.aggregate
    by = {a.agent: (a.temporal_coverage, a.runs) for a in agg.temporal_coverage_by_agent}
    assert by == {"agent-a": (1.0, 1), "agent-b": (pytest.approx(20 / 24), 2)}
    assert agg.temporal_coverage == pytest.approx((1 + 20 / 24) / 2)  # averaged over agents
    assert [(g.agent, g.start, g.seconds) for g in agg.largest_gaps] == [("agent-b", "2026-11-10T08:00:00Z", 14_400.0)]
    assert "agent-b 83.3%" in report.warnings[0].message


def test_gaps_under_a_second_between_windows_are_not_gaps(tmp_path, fold):
    reports = []
    for i in range(4):  # 59.5 s windows, each opened half a second after the last one closed
        rep = synth.window_report(T0 + timedelta(minutes=i), [API]).model_dump(mode="json")
        rep["window"]["end"] = (T0 + timedelta(minutes=i, seconds=59.5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        reports.append(rep)
    report = build_report(fold(_write(tmp_path, "agent-a", reports)), Period.everything())
    [a] = report.aggregate.temporal_coverage_by_agent
    assert a.runs == 1 and report.aggregate.largest_gaps == [] and report.warnings == []
    assert report.aggregate.temporal_coverage == 1.0  # an open period: the windows' own extent


RUN = st.tuples(st.integers(0, 200), st.integers(0, 20)).map(lambda t: (t[0] / 4, t[0] / 4 + t[1] / 4))


@settings(max_examples=300, deadline=None)
@given(st.lists(RUN, max_size=30), st.integers(0, 2**32 - 1), st.integers(0, 30))
def test_runs_are_a_union_whatever_the_order_and_the_partition(runs, seed, cut):
    """Merging two partitions' runs (as the engines do, file by file) is the union of windows
    with gaps under GAP_TOLERANCE_S joined, whatever the order: Dask and local agree."""
    one: list = []
    for lo, hi in sorted(runs):
        add_run(one, lo, hi)
    shuffled = list(runs)
    random.Random(seed).shuffle(shuffled)
    left: list = []
    right: list = []
    for lo, hi in shuffled[:cut]:
        add_run(left, lo, hi)
    for lo, hi in shuffled[cut:]:
        add_run(right, lo, hi)
    merged = {"a": left} if left else {}
    merge_runs(merged, {"a": right} if right else {})
    assert merged.get("a", []) == one
    assert all(b[0] - a[1] > GAP_TOLERANCE_S for a, b in zip(one, one[1:], strict=False))
    covered = sum(hi - lo for lo, hi in one)
    assert covered <= sum(hi - lo for lo, hi in runs) + GAP_TOLERANCE_S * len(runs)


def _ewc_window(i, stated: float | None):
    """api in eu-west-3 (with carbon) and batch with no region at all ("unknown", 0 g)."""
    rep = synth.window_report(T0 + timedelta(minutes=i), [API]).model_dump(mode="json")
    gs = rep["green_summary"]
    gs["regions"].append({"region": "unknown", "status": "unresolved", "io_ops": 5, "energy_kwh": 2e-3,
                          "co2_gco2": 0.0, "grid_intensity_gco2_kwh": 0.0, "pue": 1.0})
    gs["per_service_energy_kwh"]["batch"] = 2e-3
    gs["per_service_carbon_kgco2eq"]["batch"] = 0.0
    gs["per_service_region"]["batch"] = "unknown"
    gs["energy_kwh"] += 2e-3
    if stated is None:  # a line written before the agent recorded it
        del gs["energy_without_carbon_kwh"]
    else:
        gs["energy_without_carbon_kwh"] = stated
    return rep


def test_energy_without_carbon_is_reported_with_its_regions_and_services(tmp_path, fold):
    """Item 5: a line since the agent records energy_without_carbon_kwh is taken at its word;
    an older line's figure is derived from its regions[] rows that are not resolved."""
    reports = [_ewc_window(0, 2e-3), _ewc_window(1, None), _ewc_window(2, None)]
    report = build_report(fold(_write(tmp_path, "agent-a", reports)), Period.everything())
    agg = report.aggregate
    assert agg.energy_without_carbon_kwh == pytest.approx(3 * 2e-3)
    assert agg.energy_without_carbon_regions == ["unknown"] and agg.energy_without_carbon_services == ["batch"]
    [w] = [w for w in report.warnings if w.code == "energy_without_carbon"]
    assert "0.006 kWh were counted at 0 gCO2e" in w.message and "services: batch" in w.message
    text, html = _shown(report)
    assert "WARNING: 0.006 kWh were counted at 0 gCO2e" in text and "0.006 kWh were counted at 0 gCO2e" in html


def test_the_sci_band_is_shown_beside_every_total(tmp_path, fold):
    reports = [synth.window_report(T0 + timedelta(minutes=i), [API], embodied_g=1.0) for i in range(3)]
    report = build_report(fold(_write(tmp_path, "agent-a", reports)), Period.everything())
    agg = report.aggregate
    assert agg.carbon_low_kgco2eq == agg.total_carbon_kgco2eq * 0.5
    assert agg.carbon_high_kgco2eq == agg.total_carbon_kgco2eq * 2
    text, html = _shown(report)
    # operational 3 x 1e-3 x 41.5 x 1.15 = 0.143175 g, embodied 3 g: total 3.143175 g, band 1.5715875 to 6.28635 g
    assert "3.143 g (band 1.572 g to 6.286 g) CO2e" in text and "embodied 3.000 g (band 1.500 g to 6.000 g; 95.4% of the total" in text
    assert "SCI band 1.572 g to 6.286 g" in html and "0.072 g to 0.286 g" in html  # operational's band


@pytest.mark.parametrize(("traces", "roots", "warned"), [(105, 100, False), (106, 100, True), (3, 0, True)])
def test_traces_beyond_root_spans_warn_naming_embodied_per_root_span(tmp_path, fold, traces, roots, warned):
    reports = []
    for i, (t, r) in enumerate([(traces, roots), (7, None)]):  # the second line predates root_spans
        rep = synth.window_report(T0 + timedelta(minutes=i), [API]).model_dump(mode="json")
        rep["window"]["traces"] = t
        if r is None:
            del rep["window"]["root_spans"]
        else:
            rep["window"]["root_spans"] = r
        reports.append(rep)
    report = build_report(fold(_write(tmp_path, "agent-a", reports)), Period.everything())
    assert (report.aggregate.traces_counted, report.aggregate.root_spans_counted) == (traces, roots)
    codes = [w.code for w in report.warnings]
    assert ("traces_exceed_root_spans" in codes) is warned
    if warned:
        text, html = _shown(report)
        # in the HTML with its quotes escaped (an entity: &quot; or &#34;), the text the same
        assert 'embodied_per = "root_span"' in text and 'embodied_per = "root_span"' in unescape(html)
        assert 'embodied_per = "root_span"' not in html
    # lines charged per root span already: no trace is charged twice, nothing to warn about
    for rep in reports:
        rep["methodology"]["embodied_per"] = "root_span"
    again = build_report(fold(_write(tmp_path / "per-root", "agent-a", reports)), Period.everything())
    assert "traces_exceed_root_spans" not in [w.code for w in again.warnings]


def test_a_report_without_warnings_keeps_its_bytes_deterministic(mixed_archive):
    from aggregator.engines import run_local
    from aggregator.files import discover

    period = Period.parse("2026-11-10", "2026-11-10")
    first = report_bytes(build_report(run_local(discover([str(mixed_archive)]), period), period))
    assert first == report_bytes(build_report(run_local(discover([str(mixed_archive)]), period), period))
