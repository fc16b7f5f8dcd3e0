"""The HTML report's region chart and the archive chains it was built from.

Reads only the disclosure report. The chart gives each region two bars, energy and carbon
(each scaled to its own largest region), labelled with the figure and the intensity data it
used; the chain table names every agent's first and last archive record hash.
"""

from __future__ import annotations

from html import escape

from aggregator.render import fmt_kg, fmt_kwh
from aggregator.render_html_services import elide_middle
from schema.report import DisclosureReport


def region_chart(report: DisclosureReport) -> str:
    regions = report.regions
    if not regions:
        return ""
    top_kwh = max(r.energy_kwh for r in regions) or 1.0
    top_kg = max(r.carbon_kgco2eq for r in regions) or 1.0
    row_h, label_w, bar_w = 40, 200, 320
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{label_w + bar_w + 240}" '
             f'height="{row_h * len(regions) + 4}" aria-label="energy and carbon per region" class="chart">']
    for i, r in enumerate(regions):
        y = i * row_h + 2
        kwh_w, kg_w = max(1.0, bar_w * r.energy_kwh / top_kwh), max(1.0, bar_w * r.carbon_kgco2eq / top_kg)
        tip = (f"{r.region}: {fmt_kwh(r.energy_kwh)}, {fmt_kg(r.carbon_kgco2eq)} CO2e, "
               f"{r.grid_intensity_gco2_kwh:g} g/kWh ({r.intensity_source})")
        parts.append(
            f'<g><title>{escape(tip)}</title>'
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end" font-size="13">{escape(elide_middle(r.region))}</text>'
            f'<text x="{label_w - 6}" y="{y + 29}" text-anchor="end" font-size="11" fill="#58705c">'
            f'{escape(r.intensity_source)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{kwh_w:.1f}" height="15" fill="#7aa6c8"/>'
            f'<text x="{label_w + kwh_w + 6:.1f}" y="{y + 12}" font-size="11">{escape(fmt_kwh(r.energy_kwh))}</text>'
            f'<rect x="{label_w}" y="{y + 17}" width="{kg_w:.1f}" height="15" fill="#3f8f4f"/>'
            f'<text x="{label_w + kg_w + 6:.1f}" y="{y + 29}" font-size="11">{escape(fmt_kg(r.carbon_kgco2eq))} CO2e</text></g>')
    parts.append("</svg>")
    return ('<p class="note">Blue: energy; green: carbon; under each region the grid intensity data it used.</p>'
            + "".join(parts))


def chains(report: DisclosureReport) -> str:
    rows = report.integrity.chains
    if not rows:
        return ""
    body = "".join(f"<tr><td>{escape(c.agent)}</td><td class=\"n\">{c.windows:,}</td>"
                   f"<td><code>{escape(c.first_hash)}</code></td><td><code>{escape(c.last_hash)}</code></td></tr>"
                   for c in rows)
    return ("<p>Built from these archive chains (one per agent):</p><table><thead><tr><th>agent</th>"
            '<th class="n">windows</th><th>first record</th><th>last record</th></tr></thead>'
            f"<tbody>{body}</tbody></table>")
