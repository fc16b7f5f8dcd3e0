"""The HTML report's region chart and the archive chains it was built from.

Reads only the disclosure report. The chart gives each region two bars, energy and carbon
(each scaled to its own largest region), labelled with the figure and the intensity data it
used; the chain table names every agent's first and last archive record hash.
"""

from __future__ import annotations

from aggregator.html_templates import render
from aggregator.render import fmt_kg, fmt_kwh
from aggregator.render_html_services import chart_label, label_room, text_px
from schema.report import DisclosureReport


def region_chart(report: DisclosureReport) -> str:
    regions = report.regions
    if not regions:
        return render("regions.html", rows=[])
    top_kwh = max(r.energy_kwh for r in regions) or 1.0
    top_kg = max(r.carbon_kgco2eq for r in regions) or 1.0
    row_h, bar_w = 40, 320
    rows = [{"y": i * row_h + 2, "kwh_w": max(1.0, bar_w * r.energy_kwh / top_kwh),
             "kg_w": max(1.0, bar_w * r.carbon_kgco2eq / top_kg), "label": chart_label(r.region, 13),
             "source": chart_label(r.intensity_source, 11), "energy": fmt_kwh(r.energy_kwh), "carbon": fmt_kg(r.carbon_kgco2eq),
             "tip": (f"{r.region}: {fmt_kwh(r.energy_kwh)}, {fmt_kg(r.carbon_kgco2eq)} CO2e, "
                     f"{r.grid_intensity_gco2_kwh:g} g/kWh ({r.intensity_source})")}
            for i, r in enumerate(regions)]
    # the labels (13 px) and the intensity data under them (11 px) never start left of the chart,
    # nor the figures after the bars (11 px) end right of it
    label_w = max(label_room([r["label"] for r in rows], 13), label_room([r["source"] for r in rows], 11))
    value_w = max(text_px(t, 11) for r in rows for t in (r["energy"], r["carbon"] + " CO2e")) + 14
    return render("regions.html", rows=rows, width=label_w + bar_w + value_w, height=row_h * len(regions) + 4,
                  label_x=label_w - 6, bar_x=label_w)


def chains(report: DisclosureReport) -> str:
    return render("chains.html", rows=report.integrity.chains)
