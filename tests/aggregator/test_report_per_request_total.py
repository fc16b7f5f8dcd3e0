"""The period's carbon per request carries its SCI band (``aggregate.per_request``: JSON, the
HTML table's total row, the terminal), and a column's unit never prints a non-zero figure
as zero (``<0.001`` in the column's unit)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from rich.console import Console

from aggregator import synth
from aggregator.fold.state import AggregateState
from aggregator.read import Period
from aggregator.render import (
    TINY,
    column_format,
    fixed,
    fmt_g,
    fmt_kg,
    fmt_kwh,
    per_request_format,
    print_summary,
)
from aggregator.render_compare import scaler
from aggregator.render_html import render_html
from aggregator.report import build_report
from tests.aggregator.conftest import T0


def _report(tmp_path, fold):
    # 3 windows of "shop" in pl, 2e-3 kWh each: 2e-3 x 590.8 g/kWh x PUE 1.5 = 1.7724 g a window,
    # beside 1 g embodied a window; 10 requests a window
    svc = synth.Svc("shop", region="pl", energy_kwh=2e-3)
    lines = synth.sealed_lines([synth.window_report(T0 + timedelta(minutes=i), [svc], embodied_g=1.0)
                                for i in range(3)])
    synth.write_agent(tmp_path / "archives", "agent-a", [lines], day="20261110")
    return build_report(fold(tmp_path / "archives"), Period.everything(), "ACME")


def test_the_period_per_request_figures_and_their_band_by_hand(tmp_path, fold):
    pr = _report(tmp_path, fold).aggregate.per_request
    assert pr is not None and pr.requests == 30
    # operational 3 x 1.7724 g / 30 = 0.17724 g; SCI (5.3172 g + 3 g) / 30 = 0.27724 g
    assert pr.operational_gco2e == pytest.approx(0.17724) and pr.sci_gco2e == pytest.approx(0.27724)
    assert (pr.operational_low_gco2e, pr.operational_high_gco2e) == (pr.operational_gco2e * 0.5, pr.operational_gco2e * 2)
    assert (pr.sci_low_gco2e, pr.sci_high_gco2e) == (pr.sci_gco2e * 0.5, pr.sci_gco2e * 2)
    # no requests, no per-request figure (null, never a made-up 0)
    assert build_report(AggregateState(), Period.everything()).aggregate.per_request is None


def test_the_total_row_and_the_terminal_give_the_per_request_band(tmp_path, fold):
    report = _report(tmp_path, fold)
    foot = render_html(report).split("<tfoot>")[1].split("</tfoot>")[0]
    assert ('<td class="n">177.240 mg<br><span class="band">SCI band 88.620 mg to 354.480 mg</span></td>'
            in foot), foot
    assert '<td class="n">277.240 mg<br><span class="band">SCI band 138.620 mg to 554.480 mg</span></td>' in foot
    page = render_html(report)
    assert "for the whole period: 277.240 mg (SCI band 138.620 mg to 554.480 mg)." in page
    buf = io.StringIO()
    print_summary(report, Console(file=buf, width=200))
    text = " ".join(buf.getvalue().split())
    assert ("per request (30 requests): operational 177.240 mg (band 88.620 mg to 354.480 mg), "
            "SCI (O+M)/R 277.240 mg (band 138.620 mg to 554.480 mg)") in text


def test_a_tiny_figure_in_a_large_unit_column_is_not_printed_as_zero(tmp_path, fold):
    report = _report(tmp_path, fold)
    big = report.applications[0].model_copy(update={"service_name": "big", "energy_kwh": 1500.0,
                                                    "carbon_kgco2eq": 2500.0})
    tiny = report.applications[0].model_copy(update={"service_name": "tiny", "energy_kwh": 2e-7,
                                                     "carbon_kgco2eq": 3e-7, "requests": 10**9,
                                                     "operational_gco2e_per_request": 1e-12})
    zero = report.applications[0].model_copy(update={"service_name": "zero", "energy_kwh": 0.0,
                                                     "carbon_kgco2eq": 0.0})
    report.applications = [big, tiny, zero]
    buf = io.StringIO()
    print_summary(report, Console(file=buf, width=200))
    rows = {line.split("\u2502")[1].strip(): [c.strip() for c in line.split("\u2502")[1:-1]]
            for line in buf.getvalue().splitlines() if line.count("\u2502") > 3}
    # one unit a column (MWh, t) and the tiny figure in it as <0.001, a true zero as 0.000
    assert rows["big"][2:4] == ["1.500 MWh", "2.500 t"]
    assert rows["tiny"][2:4] == [f"{TINY} MWh", f"{TINY} t"], rows["tiny"]
    assert rows["zero"][2:4] == ["0.000 MWh", "0.000 t"]
    assert rows["tiny"][6] == f"{TINY} mg"  # per request: the column is in mg (shop's 177 mg)
    # the same rule everywhere a figure is put in a unit
    assert column_format([1500.0, 4e-7], ("Wh", "kWh", "MWh"))(4e-7) == f"{TINY} MWh"
    assert fixed(-4e-7, "MWh") == f"-{TINY} MWh" and fixed(4e-7, "MWh", signed=True) == f"+{TINY} MWh"
    assert fixed(0.0004, "g") == f"{TINY} g" and fixed(0.0006, "g") == "0.001 g"
    assert scaler([2000.0, 1e-6], ("Wh", "kWh", "MWh"))(-1e-6, True) == f"-{TINY} MWh"
    assert fmt_kg(1e-10) == f"{TINY} g" and fmt_kwh(1e-10) == f"{TINY} Wh" and fmt_g(1e-12) == f"{TINY} \u00b5g"
    assert per_request_format([0.5, None])(None) == "-"


def test_a_single_request_and_window_are_printed_in_the_singular(tmp_path, fold):
    svc = synth.Svc("shop", region="pl", energy_kwh=2e-3, requests=1)
    synth.write_agent(tmp_path / "archives", "agent-a", [synth.sealed_lines([synth.window_report(T0, [svc])])],
                      day="20261110")
    report = build_report(fold(tmp_path / "archives"), Period.everything(), "ACME")
    buf = io.StringIO()
    print_summary(report, Console(file=buf, width=200))
    text = " ".join(buf.getvalue().split())
    assert "per request (1 request):" in text and "(1 requests)" not in text
    assert "CO2e over 1 window;" in text and "(0 of 1 window)" in text
