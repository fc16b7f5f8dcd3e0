"""The HTML report's per-service parts: the table of every service and the carbon chart.

Reads only the disclosure report. The table has no cap: every ``applications[]`` entry is a
row. The chart shows the ``CHART_BARS`` largest services and one "other" bar that carries the
rest's count and figures, so nothing is dropped without being shown. Long names are elided in
the middle on the chart (the full name in the bar's ``<title>`` tooltip) and wrap in the
table (the full name in the cell's ``title`` too); a name is never clipped.
"""

from __future__ import annotations

import math
import unicodedata

from aggregator.html_templates import Markup, macro, render
from aggregator.render import backfill_share, band, fmt_g, fmt_kg, fmt_kwh, fmt_share, g_band
from schema.report import Application, DisclosureReport

CHART_BARS = 25
LABEL_CHARS = 28
#: The widest a chart's label column may grow (px); a label wider than that is elided further.
LABEL_MAX_PX = 300


def elide_middle(name: str, most: int = LABEL_CHARS) -> str:
    """``name`` in at most ``most`` characters: its start and end around an ellipsis."""
    if len(name) <= most:
        return name
    keep = most - 1
    head = (keep + 1) // 2
    return name[:head] + "\u2026" + name[len(name) - (keep - head):]


def _em(ch: str) -> float:
    """A generous width of ``ch`` in em in a sans-serif font (DejaVu Sans, Chromium's fallback
    on Debian, is among the widest): wide East Asian characters a full em, the widest Latin
    letters and capitals more than the rest, so a label never measures wider than this says."""
    if unicodedata.east_asian_width(ch) in "WF":
        return 1.0
    if ch in "mwMW@%":
        return 0.95
    if ch.isupper() or ch.isdigit() or not ch.isascii():
        return 0.8
    return 0.64


def text_px(text: str, size: float) -> int:
    """An upper estimate of ``text``'s width in px at font size ``size`` (px): the chart's room
    for a label is made from it, so a label's start is never left of the drawing (clipped)."""
    return math.ceil(sum(_em(ch) for ch in text) * size)


def chart_label(name: str, size: float, most_px: int = LABEL_MAX_PX - 10) -> str:
    """``name`` elided in the middle to ``LABEL_CHARS`` and, if it would still be wider than
    ``most_px`` at ``size``, further, one character at a time (the full name is the tooltip)."""
    most = LABEL_CHARS
    label = elide_middle(name, most)
    while most > 3 and text_px(label, size) > most_px:
        most -= 1
        label = elide_middle(name, most)
    return label


def label_room(labels: list[str], size: float) -> int:
    """The px a chart keeps left of its bars for ``labels`` (right-aligned at 6 px from the
    bars): the widest label's estimate, at most ``LABEL_MAX_PX``."""
    return min(LABEL_MAX_PX, max((text_px(t, size) for t in labels), default=0) + 10)


def _bar_rows(report: DisclosureReport) -> list[tuple[str, str, float, str]]:
    """(label, tooltip, kg, value text) per bar: the largest services, then "other"."""
    apps = report.applications
    rows = [(chart_label(a.service_name, 13), f"{a.service_name}: {fmt_kg(a.carbon_kgco2eq)}", a.carbon_kgco2eq,
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
        return render("bars.html", rows=[])
    top = max(kg for _, _, kg, _ in rows) or 1.0
    row_h, bar_w = 22, 400
    label_w = label_room([label for label, *_ in rows], 13)  # the labels' start never left of the chart
    value_w = max(text_px(value, 12) for *_, value in rows) + 14  # nor the figures' end right of it
    note = ""
    if len(report.applications) > CHART_BARS:
        note = (f"The chart shows the {CHART_BARS} services with the most carbon and the other "
                f"{len(report.applications) - CHART_BARS} together; the table below lists every service.")
    return render("bars.html", width=label_w + bar_w + value_w, height=row_h * len(rows) + 4, label_x=label_w - 6,
                  bar_x=label_w, bar_h=row_h - 6, note=note,
                  rows=[{"y": i * row_h + 2, "width": max(1.0, bar_w * kg / top), "label": label, "tip": tip,
                         "value": value} for i, (label, tip, kg, value) in enumerate(rows)])


def _cells(app: Application) -> list[str]:
    """A service's cells after its name, in the order of ``HEADS``."""
    return [app.region, fmt_kwh(app.energy_kwh), fmt_kg(app.carbon_kgco2eq), f"{app.share_of_total:.1%}",
            f"{app.requests:,}", fmt_g(app.operational_gco2e_per_request), fmt_g(app.sci_gco2e_per_request),
            fmt_share(app.measured_share), app.energy_model or "-", f"{backfill_share(app):.1%}"]


HEADS = ["service", "region", "energy", "operational carbon", "share of total carbon", "requests",
         "operational CO2e per request", "SCI per request (O+M)/R", "measured share of energy", "energy model",
         "carbon from backfill"]


def services_table(report: DisclosureReport) -> str:
    """Every service, one row each, and a total row with the period's per-request figures
    (``aggregate.per_request``) and their SCI band."""
    apps = report.applications
    if not apps:
        return render("services.html", rows=[])
    agg = report.aggregate
    op = sum(a.carbon_kgco2eq for a in apps)
    energy = sum(a.energy_kwh for a in apps)
    measured = min(1.0, sum(a.measured_energy_kwh for a in apps) / energy) if energy > 0 else None
    pr = agg.per_request  # the period's per-request figures and their SCI band (null: no requests)
    per_request = None if pr is None else {
        "operational": fmt_g(pr.operational_gco2e), "operational_band": g_band(pr.operational_gco2e),
        "sci": fmt_g(pr.sci_gco2e), "sci_band": g_band(pr.sci_gco2e)}
    total = {
        "count": f"{len(apps):,}", "energy": fmt_kwh(energy), "carbon": fmt_kg(op), "carbon_band": band(op),
        "share": _share(op, agg.total_carbon_kgco2eq), "requests": f"{agg.total_requests:,}",
        "per_request": per_request, "measured": fmt_share(measured),
        "backfilled": f"{agg.backfill.operational_share if agg.backfill is not None else 0.0:.1%}",
        "sci_text": "-" if pr is None else f"{fmt_g(pr.sci_gco2e)} (SCI band {g_band(pr.sci_gco2e)})",
        "total_carbon": fmt_kg(agg.total_carbon_kgco2eq), "total_band": band(agg.total_carbon_kgco2eq),
    }
    return render("services.html", heads=HEADS, head_numeric={2, 3, 4, 5, 6, 7, 8, 10}, numeric={1, 2, 3, 4, 5, 6, 7, 9},
                  rows=[{"name": a.service_name, "cells": _cells(a)} for a in apps], total=total)


def band_line(kg: float) -> str:
    """The SCI band of a carbon total on a line of its own under it (x0.5 to x2, ``render.band``)."""
    return macro("band_line")(band(kg))


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 else "-"


def page_footer_style(period: str, generated: str) -> Markup:
    """The @page bottom-left box's text: the period and when the page was generated, escaped
    for a CSS string (a backslash, a quote, ``<`` and a line end cannot end the string or the
    ``<style>`` element), hence safe to put in the page as it is."""
    text = f"Period {period}" + (f" \u00b7 generated {generated}" if generated else "")
    safe = text.replace("\\", "\\\\").replace('"', '\\"').replace("<", "\\3c ").replace("\n", " ")
    return Markup(f'@page{{@bottom-left{{content:"{safe}"}}}}')
