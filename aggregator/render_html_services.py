"""The HTML report's per-service parts: the table of every service and the carbon chart.

Reads only the disclosure report. The table has no cap: every ``applications[]`` entry is a
row. The chart shows the ``CHART_BARS`` largest services and one "other" bar that carries the
rest's count and figures, so nothing is dropped without being shown. Long names are elided in
the middle on the chart (the full name in the bar's ``<title>`` tooltip) and wrap in the
table (the full name in the cell's ``title`` too); a name is never clipped.
"""

from __future__ import annotations

from html import escape

from aggregator.render import backfill_share, band, fmt_g, fmt_kg, fmt_kwh, fmt_share, g_band
from schema.report import Application, DisclosureReport

CHART_BARS = 25
LABEL_CHARS = 28


def elide_middle(name: str, most: int = LABEL_CHARS) -> str:
    """``name`` in at most ``most`` characters: its start and end around an ellipsis."""
    if len(name) <= most:
        return name
    keep = most - 1
    head = (keep + 1) // 2
    return name[:head] + "\u2026" + name[len(name) - (keep - head):]


def _bar_rows(report: DisclosureReport) -> list[tuple[str, str, float, str]]:
    """(label, tooltip, kg, value text) per bar: the largest services, then "other"."""
    apps = report.applications
    rows = [(elide_middle(a.service_name), f"{a.service_name}: {fmt_kg(a.carbon_kgco2eq)}", a.carbon_kgco2eq,
             fmt_kg(a.carbon_kgco2eq)) for a in apps[:CHART_BARS]]
    tail = apps[CHART_BARS:]
    if tail:
        kg = sum(a.carbon_kgco2eq for a in tail)
        kwh = sum(a.energy_kwh for a in tail)
        label = f"other ({len(tail)} services)"
        rows.append((label, f"{label}: {fmt_kg(kg)}, {fmt_kwh(kwh)}", kg, f"{fmt_kg(kg)} ({len(tail)} services)"))
    return rows


def bars(report: DisclosureReport) -> str:
    rows = _bar_rows(report)
    if not rows:
        return "<p>No application carbon in this period.</p>"
    top = max(kg for _, _, kg, _ in rows) or 1.0
    row_h, label_w, bar_w = 22, 200, 400
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{label_w + bar_w + 160}" '
             f'height="{row_h * len(rows) + 4}" aria-label="carbon per service" class="chart">']
    for i, (label, tip, kg, value) in enumerate(rows):
        y = i * row_h + 2
        width = max(1.0, bar_w * kg / top)
        parts.append(f'<g><title>{escape(tip)}</title>'
                     f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" font-size="13">{escape(label)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{row_h - 6}" fill="#3f8f4f"/>'
                     f'<text x="{label_w + width + 6:.1f}" y="{y + 15}" font-size="12">{escape(value)}</text></g>')
    parts.append("</svg>")
    if len(report.applications) > CHART_BARS:
        parts.append(f'<p class="note">The chart shows the {CHART_BARS} services with the most carbon and the '
                     f"other {len(report.applications) - CHART_BARS} together; the table below lists every service.</p>")
    return "".join(parts)


def _row(app: Application) -> str:
    name = escape(app.service_name)
    cells = [escape(app.region), escape(fmt_kwh(app.energy_kwh)), escape(fmt_kg(app.carbon_kgco2eq)),
             f"{app.share_of_total:.1%}", f"{app.requests:,}",
             escape(fmt_g(app.operational_gco2e_per_request)), escape(fmt_g(app.sci_gco2e_per_request)),
             escape(fmt_share(app.measured_share)), escape(app.energy_model or "-"), f"{backfill_share(app):.1%}"]
    numeric = {1, 2, 3, 4, 5, 6, 7, 9}
    return (f'<tr><td class="name" title="{name}">{name}</td>'
            + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(cells))
            + "</tr>")


def services_table(report: DisclosureReport) -> str:
    """Every service, one row each, and a total row with the SCI per request (O+M)/R."""
    apps = report.applications
    if not apps:
        return "<p>No services in this period.</p>"
    agg = report.aggregate
    heads = ["service", "region", "energy", "operational carbon", "share of total carbon", "requests",
             "operational CO2e per request", "SCI per request (O+M)/R", "measured share of energy", "energy model",
             "carbon from backfill"]
    head = "".join(f'<th class="n">{escape(h)}</th>' if 2 <= i <= 8 or i == 10 else f"<th>{escape(h)}</th>"
                   for i, h in enumerate(heads))
    backfilled = agg.backfill.operational_share if agg.backfill is not None else 0.0
    op = sum(a.carbon_kgco2eq for a in apps)
    energy = sum(a.energy_kwh for a in apps)
    measured = min(1.0, sum(a.measured_energy_kwh for a in apps) / energy) if energy > 0 else None
    pr = agg.per_request  # the period's per-request figures and their SCI band (null: no requests)
    op_cell = "-" if pr is None else fmt_g(pr.operational_gco2e) + g_band_line(pr.operational_gco2e)
    sci = "-" if pr is None else fmt_g(pr.sci_gco2e)
    sci_cell = "-" if pr is None else sci + g_band_line(pr.sci_gco2e)
    sci_text = "-" if pr is None else f"{sci} (SCI band {g_band(pr.sci_gco2e)})"
    foot = (f'<tr><th>all {len(apps):,} services</th><td></td><td class="n">{escape(fmt_kwh(sum(a.energy_kwh for a in apps)))}</td>'
            f'<td class="n">{escape(fmt_kg(op))}{band_line(op)}</td><td class="n">{_share(op, agg.total_carbon_kgco2eq)}</td>'
            f'<td class="n">{agg.total_requests:,}</td>'
            f'<td class="n">{op_cell}</td>'
            f'<td class="n">{sci_cell}</td><td class="n">{escape(fmt_share(measured))}</td><td></td>'
            f'<td class="n">{backfilled:.1%}</td></tr>')
    note = (f'<p class="note">Operational carbon is the electricity of running each service. SCI per request '
            f"(operational + embodied) / requests for the whole period: {escape(sci_text)}. A service's SCI per "
            "request adds to its operational carbon its part of the period's embodied carbon, allocated by "
            "its share of the requests (the archives record embodied carbon per window, not per service). "
            "Measured share of energy: the part of the service's energy a meter measured; the rest is "
            "modelled (estimated from I/O operations or cloud power curves). Share of total carbon: of "
            f"{escape(fmt_kg(agg.total_carbon_kgco2eq))} (SCI band {escape(band(agg.total_carbon_kgco2eq))}), which also holds embodied and host carbon. Carbon from backfill: the share of the "
            "service's carbon scored from historic traces by carbonspan backfill.</p>")
    return (f'<table class="services"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(_row(a) for a in apps) + f"</tbody><tfoot>{foot}</tfoot></table>" + note)


def band_line(kg: float) -> str:
    """The SCI band of a carbon total on a line of its own under it (x0.5 to x2, ``render.band``)."""
    return f'<br><span class="band">SCI band {escape(band(kg))}</span>'


def g_band_line(g: float) -> str:
    """The SCI band of a per-request figure on a line of its own under it (``render.g_band``)."""
    return f'<br><span class="band">SCI band {escape(g_band(g))}</span>'


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 else "-"


PRINT_STYLE = """
td.name{overflow-wrap:anywhere;word-break:break-word;max-width:18rem}td.n{white-space:nowrap}
table.services{font-size:.9em}.print-footer{display:none}span.band{font-size:.85em;color:#58705c}
@page{size:A4;margin:16mm 12mm 18mm 12mm;
@bottom-left{font-size:8pt;color:#58705c}
@bottom-right{content:"page " counter(page) " of " counter(pages);font-size:8pt;color:#58705c}}
@media print{body{margin:0;max-width:none;font-size:10pt}
h1,h2,h3{break-after:avoid;page-break-after:avoid;break-inside:avoid}
h2+p,h2+table,h2+svg,h2+p.note+h3{break-before:avoid;page-break-before:avoid}
table{break-inside:auto}tr,.card,.warn{break-inside:avoid;page-break-inside:avoid}
thead{display:table-header-group}tfoot{display:table-row-group}
svg.chart{break-inside:avoid;max-width:100%;height:auto}}
"""


def page_footer_style(period: str, generated: str) -> str:
    """The @page bottom-left box's text: the period and when the page was generated."""
    text = f"Period {period}" + (f" \u00b7 generated {generated}" if generated else "")
    safe = text.replace("\\", "\\\\").replace('"', '\\"').replace("<", "\\3c ").replace("\n", " ")
    return f'@page{{@bottom-left{{content:"{safe}"}}}}'
