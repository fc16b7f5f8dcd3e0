"""The comparison with the previous period (``report.comparison``) in every rendering.

Reads only the disclosure report. A percentage the report leaves null (the previous figure
was 0) is written "n/a (was 0)" on the terminal and in the HTML and left empty in the CSV,
never as 0 % or infinity; a line under each table says how many there are.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from rich.table import Table
from rich.text import Text

from aggregator.render import band
from aggregator.render_csv import csv_text, num
from schema.report import Change, Comparison, DisclosureReport

STATUS = {"both": "", "appeared": "new", "disappeared": "gone"}
UNDEFINED = "n/a (was 0)"
KWH = ("Wh", "kWh", "MWh")
KG = ("g", "kg", "t")
COMPARISON_CSV = "comparison.csv"
COMPARISON_TOTAL_CSV = "comparison_total.csv"


def percent(ch: Change) -> str:
    return UNDEFINED if ch.change_percent is None else f"{ch.change_percent:+,.1f} %"


def scaler(values: list[float], units: tuple[str, str, str]) -> Callable[[float, bool], str]:
    """One unit for a column (by its largest magnitude, as ``render.column_format``); the second
    argument asks for a sign (a change)."""
    small, unit, large = units
    top = max((abs(v) for v in values), default=0.0)
    scale, name = (1e-3, large) if top >= 1000.0 else (1.0, unit) if top >= 1.0 else (1e3, small)
    return lambda v, signed=False: f"{v * scale:{'+' if signed else ''},.3f} {name}"


def _count(v: float, signed: bool = False) -> str:
    return f"{v:{'+' if signed else ''},.0f}"


def heading(c: Comparison) -> str:
    p = c.previous
    return f"against the previous period {p.period.start} up to {p.period.end}"


def undefined_line(c: Comparison) -> str:
    if not c.undefined_percent:
        return ""
    return (f"{c.undefined_percent:,} change(s) have no percentage ({UNDEFINED}): the previous figure was 0, "
            "so a percentage is undefined")


def _total_rows(c: Comparison) -> list[tuple[str, Change, Callable[[float, bool], str]]]:
    t = c.total
    rows: list[tuple[str, Change, Callable[[float, bool], str]]] = []
    for label, ch, units in (("energy", t.energy_kwh, KWH), ("carbon (total)", t.carbon_kgco2eq, KG),
                             ("operational carbon", t.operational_kgco2eq, KG),
                             ("embodied carbon", t.embodied_kgco2eq, KG)):
        rows.append((label, ch, scaler([ch.previous, ch.current, ch.change], units)))
    rows.append(("requests", t.requests, _count))
    if t.sci_gco2e_per_request is not None:
        ch = t.sci_gco2e_per_request
        rows.append(("SCI per request", ch, _per_request_scaler([ch.previous, ch.current, ch.change])))
    return rows


#: The rows of the totals that are carbon figures: each gets its SCI band, before and now.
CARBON_ROWS = ("carbon (total)", "operational carbon", "embodied carbon")
BAND_HEAD = "SCI band before / now (x0.5 to x2)"


def _bands(label: str, ch: Change) -> str:
    return f"{band(ch.previous)} / {band(ch.current)}" if label in CARBON_ROWS else ""


def _per_request_scaler(values_g: list[float]) -> Callable[[float, bool], str]:
    """gCO2e per request in g, mg or µg, one unit for the row."""
    top = max((abs(v) for v in values_g), default=0.0)
    scale, name = (1.0, "g") if top >= 1.0 else (1e3, "mg") if top >= 1e-3 else (1e6, "\u00b5g")
    return lambda v, signed=False: f"{v * scale:{'+' if signed else ''},.3f} {name}"


# -- terminal -----------------------------------------------------------------------------


def terminal_tables(report: DisclosureReport, max_rows: int | None) -> list[Table | Text]:
    """The totals table, the per-service table (``max_rows`` largest changes on a terminal,
    every service elsewhere) and the lines under them."""
    c = report.comparison
    if c is None:
        return []
    totals = Table(caption=f"previous report {c.previous.content_hash}", caption_justify="left")
    for col, justify in (("figure", "left"), ("before", "right"), ("now", "right"), ("change", "right"),
                         ("change %", "right"), (BAND_HEAD, "right")):
        totals.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for label, ch, fmt in _total_rows(c):
        totals.add_row(label, fmt(ch.previous, False), fmt(ch.current, False), fmt(ch.change, True), percent(ch),
                       _bands(label, ch))
    rows = c.services
    if max_rows is not None and len(rows) > max_rows:
        rows = sorted(rows, key=lambda s: -abs(s.carbon_kgco2eq.change))[:max_rows]
    per = Table(title="operational carbon per service, before and now", caption_justify="left")
    for col, justify in (("service", "left"), ("", "left"), ("carbon before", "right"), ("carbon now", "right"),
                         ("change", "right"), ("change %", "right"), ("requests before", "right"),
                         ("requests now", "right")):
        per.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    kg = scaler([v for s in rows for v in (s.carbon_kgco2eq.previous, s.carbon_kgco2eq.current,
                                           s.carbon_kgco2eq.change)], KG)
    for s in rows:
        ch = s.carbon_kgco2eq
        per.add_row(Text(s.service_name), STATUS[s.status], kg(ch.previous, False), kg(ch.current, False),
                    kg(ch.change, True), percent(ch), _count(s.requests.previous), _count(s.requests.current))
    hidden = len(c.services) - len(rows)
    if hidden:
        per.add_row(f"... {hidden} more (the {len(rows)} largest changes shown; every service: "
                    "--format csv, or comparison.services in the JSON)", "", "", "", "", "", "", "")
    lines = [f"appeared {len(c.appeared):,}" + (f" ({_names(c.appeared)})" if c.appeared else "")
             + f"; disappeared {len(c.disappeared):,}" + (f" ({_names(c.disappeared)})" if c.disappeared else "")]
    lines += [x for x in (undefined_line(c),) if x] + [f"NOTE: {n}" for n in c.notes]
    # the heading a line of its own (never wrapped to a table); names as Text, never read as rich markup
    return [Text(heading(c)), totals, per, Text("\n".join(lines))]


def _names(names: list[str], most: int = 6) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


# -- CSV ----------------------------------------------------------------------------------

SERVICE_HEADERS = ("service", "status", "previous_energy_kwh", "energy_kwh", "energy_change_kwh",
                   "energy_change_percent", "previous_operational_carbon_kgco2e", "operational_carbon_kgco2e",
                   "carbon_change_kgco2e", "carbon_change_percent", "previous_requests", "requests",
                   "requests_change", "requests_change_percent")
TOTAL_HEADERS = ("figure", "unit", "previous", "current", "change", "change_percent")
TOTAL_UNITS = {"energy_kwh": "kWh", "carbon_kgco2eq": "kgCO2e", "operational_kgco2eq": "kgCO2e",
               "embodied_kgco2eq": "kgCO2e", "requests": "requests", "sci_gco2e_per_request": "gCO2e/request"}


def _pct(ch: Change) -> str:
    return "" if ch.change_percent is None else num(ch.change_percent)


def _cells(ch: Change, count: bool = False) -> list[str]:
    if count:
        return [str(int(ch.previous)), str(int(ch.current)), str(int(ch.change)), _pct(ch)]
    return [num(ch.previous), num(ch.current), num(ch.change), _pct(ch)]


def comparison_csvs(report: DisclosureReport) -> dict[str, str]:
    """``{file name: text}``; empty without a comparison."""
    c = report.comparison
    if c is None:
        return {}
    services = csv_text(SERVICE_HEADERS, [
        [s.service_name, s.status, *_cells(s.energy_kwh), *_cells(s.carbon_kgco2eq), *_cells(s.requests, True)]
        for s in c.services])
    totals = []
    for name, unit in TOTAL_UNITS.items():
        ch = getattr(c.total, name)
        if ch is not None:
            totals.append([name, unit, *_cells(ch, name == "requests")])
    return {COMPARISON_CSV: services, COMPARISON_TOTAL_CSV: csv_text(TOTAL_HEADERS, totals)}


# -- HTML ---------------------------------------------------------------------------------


def _cls(i: int, numeric: set[int]) -> str:
    return ' class="n"' if i in numeric else ""


def html_section(report: DisclosureReport) -> str:
    """The "Against the previous period" section (empty without a comparison)."""
    c = report.comparison
    if c is None:
        return ""
    p = c.previous
    intro = (f"This period against the report for {p.period.start} to {p.period.end}"
             + (f" ({p.organisation})" if p.organisation else "") + ", whose content hash is ")
    head = ["", "before", "now", "change", "change %", BAND_HEAD]
    total_rows = "".join(
        "<tr>" + "".join(f"<td{_cls(i, {1, 2, 3, 4, 5})}>{escape(x)}</td>" for i, x in enumerate(
            [label, fmt(ch.previous, False), fmt(ch.current, False), fmt(ch.change, True), percent(ch),
             _bands(label, ch)]))
        + "</tr>" for label, ch, fmt in _total_rows(c))
    totals = ("<table><thead><tr>" + "".join(f"<th{_cls(i, {1, 2, 3, 4, 5})}>{escape(h)}</th>" for i, h in enumerate(head))
              + f"</tr></thead><tbody>{total_rows}</tbody></table>")
    kg = scaler([v for s in c.services for v in (s.carbon_kgco2eq.previous, s.carbon_kgco2eq.current,
                                                 s.carbon_kgco2eq.change)], KG)
    kwh = scaler([v for s in c.services for v in (s.energy_kwh.previous, s.energy_kwh.current)], KWH)
    sheads = ["service", "", "energy before", "energy now", "carbon before", "carbon now", "change", "change %",
              "requests before", "requests now"]
    numeric = set(range(2, 10))
    body = "".join(
        f'<tr><td class="name" title="{escape(s.service_name)}">{escape(s.service_name)}</td>'
        + "".join(f"<td{_cls(i, numeric)}>{escape(x)}</td>" for i, x in enumerate(
            ["", STATUS[s.status], kwh(s.energy_kwh.previous, False), kwh(s.energy_kwh.current, False),
             kg(s.carbon_kgco2eq.previous, False), kg(s.carbon_kgco2eq.current, False),
             kg(s.carbon_kgco2eq.change, True), percent(s.carbon_kgco2eq), _count(s.requests.previous),
             _count(s.requests.current)]) if i > 0)
        + "</tr>" for s in c.services)
    services = ('<table class="services compare"><thead><tr>'
                + "".join(f"<th{_cls(i, numeric)}>{escape(h)}</th>" for i, h in enumerate(sheads))
                + f"</tr></thead><tbody>{body}</tbody></table>")
    lists = [f"Appeared ({len(c.appeared):,}): {', '.join(c.appeared) or 'none'}.",
             f"Disappeared ({len(c.disappeared):,}): {', '.join(c.disappeared) or 'none'}."]
    notes = [x for x in (undefined_line(c),) if x] + c.notes
    return ("<h2>Against the previous period</h2>"
            f"<p>{escape(intro)}<code>{escape(p.content_hash)}</code>. Carbon per service is operational "
            "(as in the table of every service); new: only in this period, gone: only in the previous one.</p>"
            + totals + services + "".join(f"<p>{escape(x)}</p>" for x in lists)
            + "".join(f'<p class="note">{escape(n[0].upper() + n[1:])}.</p>' for n in notes))
