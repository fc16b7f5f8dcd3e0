"""The HTML report's charts over time, drawn from ``aggregate.series`` alone (inline SVG).

Two stacked-column charts, carbon and energy, one column per time bucket (hour or day, UTC):
the ``SERIES_SERVICES`` services with the most carbon each in their own colour, the rest of the
services (and entries past the service cap) as one "other (N services)" segment, and what is
not per service (embodied and host carbon; host energy) on top, so a column is the bucket's
total. A bucket in which no window started is marked under the axis ("no data", which is not
zero emissions). Every column's tooltip gives the bucket, its figures and its windows; the
legend gives each segment's figure for the whole period, "other" included (and, on the carbon
chart, its SCI band x0.5 to x2).
"""

from __future__ import annotations

from aggregator.html_templates import render
from aggregator.render import band, fmt_kg, fmt_kwh, plural
from aggregator.render_html_services import elide_middle
from schema.report import DisclosureReport, SeriesBucket
from schema.totals import UNATTRIBUTED_TERMS, sum_of

SERIES_SERVICES = 8
PALETTE = ("#3f8f4f", "#7aa6c8", "#c77700", "#8e6bb8", "#c8553d", "#2a7f8f", "#b5a22c", "#d17fa4")
#: The carbon legend's band column: each whole-period figure's SCI band (``render.band``).
LEGEND_BAND = "SCI band (x0.5 to x2)"
OTHER_COLOUR, REST_COLOUR = "#9aa5a0", "#e0cfa8"
PLOT_W, PLOT_H, AXIS_W, FOOT_H = 660, 200, 76, 44


def _label(bucket: SeriesBucket, hourly: bool, first: bool) -> tuple[str, str]:
    """The time axis label and the line under it: ``06:00`` by the hour (the date under the
    first label and under each midnight), ``11-10`` by the day (the year under the first)."""
    year, day, hour = bucket.start[:4], bucket.start[5:10], bucket.start[11:16]
    if hourly:
        return hour, day if first or hour == "00:00" else ""
    return day, year if first else ""


def _segments(report: DisclosureReport, carbon: bool) -> tuple[list[tuple[str, str, float, list[float]]], str]:
    """(label, colour, period figure, per-bucket values) per segment, bottom first; and the
    label of the part that is not per service."""
    agg, series = report.aggregate, report.aggregate.series
    n = len(series.buckets)
    shown = series.services[:SERIES_SERVICES]
    apps = {a.service_name: a for a in report.applications}
    out = []
    for colour, s in zip(PALETTE, shown, strict=False):
        app = apps.get(s.service_name)
        total = (app.carbon_kgco2eq if carbon else app.energy_kwh) if app else sum(s.carbon_kgco2eq if carbon else s.energy_kwh)
        out.append((s.service_name, colour, total, list(s.carbon_kgco2eq if carbon else s.energy_kwh)))
    tail = series.services[SERIES_SERVICES:]
    dropped = [b.dropped_carbon_kgco2eq if carbon else b.dropped_energy_kwh for b in series.buckets]
    if tail or any(dropped):
        values = [sum((s.carbon_kgco2eq if carbon else s.energy_kwh)[i] for s in tail) + dropped[i] for i in range(n)]
        total = sum(a.carbon_kgco2eq if carbon else a.energy_kwh for a in report.applications[SERIES_SERVICES:]) + (
            agg.dropped_carbon_kgco2eq if carbon else agg.dropped_energy_kwh)
        label = f"other ({len(tail)} services" + (", and entries past the service cap)" if any(dropped) else ")")
        out.append((label, OTHER_COLOUR, total, values))
    if carbon:
        b = agg.carbon_breakdown
        rest = [x.embodied_kgco2eq + x.host_carbon_kgco2eq for x in series.buckets]
        out.append(("embodied and host carbon", REST_COLOUR, sum_of(b, "_kgco2eq", UNATTRIBUTED_TERMS),
                    rest))
        return out, "embodied and host carbon"
    out.append(("database and broker hosts", REST_COLOUR, agg.host_energy_kwh, [x.host_energy_kwh for x in series.buckets]))
    return out, "database and broker hosts"


def _chart(report: DisclosureReport, carbon: bool) -> dict:
    """One chart's geometry and texts (the template ``series.html`` draws it)."""
    series = report.aggregate.series
    buckets = series.buckets
    fmt = fmt_kg if carbon else fmt_kwh
    segments, _ = _segments(report, carbon)
    totals = [b.carbon_kgco2eq if carbon else b.energy_kwh for b in buckets]
    top = max(max(totals, default=0.0), max((sum(s[3][i] for s in segments) for i in range(len(buckets))), default=0.0))
    scale = PLOT_H / top if top > 0 else 0.0
    n = len(buckets)
    step = PLOT_W / n
    bar = step * (0.8 if step >= 4 else 1.0)
    hourly = series.bucket == "hour"
    every = max(1, -(-n // 12))  # at most ~12 labels on the time axis
    columns = []
    for i, b in enumerate(buckets):
        x = AXIS_W + i * step + (step - bar) / 2
        tip = [f"{b.start} to {b.end}: {fmt(totals[i])} {'CO2e' if carbon else ''}".rstrip()
               + f", {plural(b.windows, 'window')}, {plural(b.requests, 'request')}"]
        tip += [f"{elide_middle(label)}: {fmt(values[i])}" for label, _, _, values in segments if values[i] > 0]
        rects, y = [], PLOT_H + 4.0
        for _, colour, _, values in segments:
            h = values[i] * scale
            if h <= 0:
                continue
            y -= h
            rects.append((x, y, bar, h, colour))
        no_data = None
        if b.windows == 0:  # no window started here: a gap in the data, not a zero
            no_data = (x, PLOT_H + 6, bar, 4, "#c77700", "no-data")
            tip[0] += " (no data: no window started in it)"
        label = None
        if i % every == 0:
            text, under = _label(b, hourly, i == 0)
            label = {"x": AXIS_W + i * step + step / 2, "text": text, "under": under}
        columns.append({"tip": "; ".join(tip), "hit": (AXIS_W + i * step, 4, step, PLOT_H + 8, "transparent"),  # the tooltip's area
                        "rects": rects, "no_data": no_data, "label": label})
    return {
        "what": "carbon" if carbon else "energy", "unit": {"hour": "hour", "day": "day"}.get(series.bucket, series.bucket),
        "width": AXIS_W + PLOT_W + 8, "height": PLOT_H + FOOT_H, "x0": AXIS_W, "x1": AXIS_W + PLOT_W,
        "axis_y": PLOT_H + 4, "label_y": PLOT_H + 24, "under_y": PLOT_H + 38,
        # the value axis: 0, half and the largest column
        "ticks": [{"y": PLOT_H + 4 - frac * PLOT_H, "text": fmt(top * frac)} for frac in (0.0, 0.5, 1.0)],
        "columns": columns, "band_head": LEGEND_BAND if carbon else "",
        "legend": [{"colour": colour, "label": label, "total": fmt(total), "band": band(total) if carbon else None}
                   for label, colour, total, _ in segments],
    }


def time_charts(report: DisclosureReport) -> str:
    """The "Over time" section's body: the carbon chart, the energy chart and what they show."""
    series = report.aggregate.series
    if not series.buckets:
        return render("series.html", charts=[])
    empty = sum(1 for b in series.buckets if b.windows == 0)
    unit = series.bucket
    note = (f"One column per {unit} (UTC), {len(series.buckets):,} in the period; a window counts in the "
            f"{unit} its start falls in. The {min(SERIES_SERVICES, len(series.services))} services with the "
            "most carbon have their own colour; the rest are one segment, with their figure in the legend.")
    if empty:
        note += (f" {empty:,} of them had no window at all (marked in orange under the axis): no data, not zero "
                 "emissions; see Coverage.")
    return render("series.html", note=note, charts=[_chart(report, True), _chart(report, False)])
