"""The HTML report's table of every service and its chart with an "other" bar."""

from __future__ import annotations

from html import unescape
from html.parser import HTMLParser

from aggregator import synth
from aggregator.read import Period
from aggregator.render import fmt_kg, fmt_kwh
from aggregator.render_html import render_html
from aggregator.render_html_services import CHART_BARS, elide_middle
from aggregator.report import build_report
from tests.aggregator.conftest import T0

N_SERVICES = 60


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.titles: list[str] = []
        self.tags: list[str] = []
        self._cell = self._title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._cell = tag == "td" and ("class", "name") in attrs
        self._title = tag == "title"

    def handle_endtag(self, tag):
        self._cell = self._title = False

    def handle_data(self, data):
        if self._cell:
            self.names.append(data)
        if self._title:
            self.titles.append(data)


def _report(tmp_path, fold):
    lines = synth.sealed_lines(synth.realistic(20, seed=4, n_services=N_SERVICES, start=T0))
    synth.write_agent(tmp_path / "archives", "agent-a", synth.split(lines, 2), gzip_files=[], day="20261110")
    return build_report(fold(tmp_path / "archives"), Period.everything(), "ACME")


def test_every_service_is_a_row_and_the_tail_is_one_bar_with_its_figures(tmp_path, fold):
    report = _report(tmp_path, fold)
    long = "eckout-" * 3 + "checkout-service-production-europe-" * 3
    report.applications[0].service_name = long
    page = render_html(report)
    parsed = _Page()
    parsed.feed(page)
    assert len(report.applications) >= N_SERVICES
    assert parsed.names == [a.service_name for a in report.applications]  # no cap, report order
    tail = report.applications[CHART_BARS:]
    other = f"other ({len(tail)} services): {fmt_kg(sum(a.carbon_kgco2eq for a in tail))}"
    assert any(t.startswith(other) for t in parsed.titles)
    assert parsed.tags.count("rect") == CHART_BARS + 1 + 2 * len(report.regions)  # + energy, carbon per region
    # the long name: elided in the middle on the chart, whole in the tooltips
    label = elide_middle(long)
    assert label != long and label.startswith("eckout-") and label.endswith("europe-") and len(label) == 28
    assert f">{label}</text>" in page and f'title="{long}"' in page
    assert any(t.startswith(long + ":") for t in parsed.titles)
    # self-contained, print rules present, the same report gives the same bytes
    assert "script" not in parsed.tags and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "@media print" in page and "break-after:avoid" in page and "counter(pages)" in page
    assert render_html(report) == page
    assert render_html(_report(tmp_path / "again", fold)) == render_html(_report(tmp_path / "more", fold))


def test_a_report_without_requests_shows_no_made_up_per_request_figure(tmp_path, fold):
    report = _report(tmp_path, fold)
    for app in report.applications:
        app.requests = 0
    report.aggregate.total_requests = 0
    report.aggregate.per_request = None  # as a report built without requests has it
    page = render_html(report)
    assert "SCI per request (operational + embodied) / requests for the whole period: -" in page


def test_the_region_chart_and_the_archive_chains_are_on_the_page(tmp_path, fold):
    report = _report(tmp_path, fold)
    page = render_html(report)
    parsed = _Page()
    parsed.feed(page)
    assert report.regions and 'aria-label="energy and carbon per region"' in page
    for r in report.regions:
        assert any(t.startswith(f"{r.region}: {fmt_kwh(r.energy_kwh)}, {fmt_kg(r.carbon_kgco2eq)} CO2e")
                   and t.endswith(f"({r.intensity_source})") for t in parsed.titles)
    assert report.integrity.chains
    for c in report.integrity.chains:
        assert c.first_hash and f"<code>{c.first_hash}</code>" in page and f"<code>{c.last_hash}</code>" in page


def test_the_breakdown_gives_the_embodied_share_of_the_total_and_says_what_it_is(tmp_path, fold):
    # 3 windows of 1 g embodied each beside one service's operational carbon: the share by hand
    from datetime import timedelta

    from aggregator.render import breakdown
    from aggregator.render_html import EMBODIED_NOTE

    svc = synth.Svc("shop", region="pl", energy_kwh=2e-3)  # 2e-3 kWh x 590.8 g/kWh x PUE 1.5 = 1.7724 g
    lines = synth.sealed_lines([synth.window_report(T0 + timedelta(minutes=i), [svc], embodied_g=1.0)
                                for i in range(3)])
    synth.write_agent(tmp_path / "archives", "agent-a", [lines], day="20261110")
    report = build_report(fold(tmp_path / "archives"), Period.everything(), "ACME")
    share = f"{3.0 / (3.0 + 3 * 1.7724):.1%}"
    assert share == "36.1%"
    page = render_html(report)
    row = page.split("making the hardware (embodied)</td>")[1].split("</tr>")[0]
    assert f'<td class="n">{share}</td>' in row and '<td class="n">100.0%</td>' in page.split(">total<")[1]
    # the note whole, its apostrophes escaped (an entity: &#x27; or &#39;)
    assert EMBODIED_NOTE in unescape(page) and "SCI's M term" not in page
    assert f"; {share} of the total: making the servers" in breakdown(report)


def test_the_total_row_and_the_series_legend_carry_the_sci_band(tmp_path, fold):
    from aggregator.render import band
    from aggregator.render_html_series import LEGEND_BAND, SERIES_SERVICES

    report = _report(tmp_path, fold)
    page = render_html(report)
    agg = report.aggregate
    # the table's "all N services" row: the operational carbon with its band x0.5 to x2 under it
    foot = page.split("<tfoot>")[1].split("</tfoot>")[0]
    op = sum(a.carbon_kgco2eq for a in report.applications)
    assert f"all {len(report.applications):,} services" in foot
    assert f'{fmt_kg(op)}<br><span class="band">SCI band {band(op)}</span></td>' in foot, foot
    assert band(op) == f"{fmt_kg(op * 0.5)} to {fmt_kg(op * 2.0)}"
    assert f"of {fmt_kg(agg.total_carbon_kgco2eq)} (SCI band {band(agg.total_carbon_kgco2eq)})" in page
    # the carbon legend: every whole-period figure with its band ("other" and the rest included);
    # the energy legend has no band (it is not a carbon figure)
    over = page.split("<h2>Over time</h2>")[1].split("<h2>")[0]
    carbon, energy = over.split("<h3>Energy</h3>")
    legend = carbon.split('<table class="legend"')[1]
    assert f'<th class="n">{LEGEND_BAND}</th>' in legend and LEGEND_BAND not in energy
    rows = legend.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:-1]
    assert len(rows) == SERIES_SERVICES + 2  # the 8 services, "other", embodied and host carbon
    first = report.applications[0]
    assert f'<td class="n">{fmt_kg(first.carbon_kgco2eq)}</td><td class="n">{band(first.carbon_kgco2eq)}</td>' in rows[0]
    for row in rows:
        figure = row.split('<td class="n">')[1].split("</td>")[0]
        assert row.count('<td class="n">') == 2 and " to " in row.split('<td class="n">')[2], row
        assert figure in page
    b = agg.carbon_breakdown
    rest = b.embodied_kgco2eq + b.database_kgco2eq + b.messaging_kgco2eq
    assert f'<td class="n">{band(rest)}</td>' in rows[-1]
