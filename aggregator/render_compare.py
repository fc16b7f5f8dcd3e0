"""The comparison with the previous period (``report.comparison``) in every rendering.

Reads only the disclosure report. A percentage the report leaves null (the previous figure
was 0) is written "n/a (was 0)" on the terminal and in the HTML and left empty in the CSV,
never as 0 % or infinity; a line under each table says how many there are.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table
from rich.text import Text

from aggregator.csv_cells import csv_text, num
from aggregator.html_templates import render
from aggregator.render import PER_REQUEST_UNITS, band, fixed, needed_width, unit_of
from schema.report import Change, Comparison, DisclosureReport, ServiceChange

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
    scale, name = unit_of(values, units)
    return lambda v, signed=False: fixed(v * scale, name, signed)


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
    scale, name = unit_of([v * 1e3 for v in values_g], PER_REQUEST_UNITS)
    return lambda v, signed=False: fixed(v * 1e3 * scale, name, signed)


# -- terminal -----------------------------------------------------------------------------


#: The per-service table's column pairs a narrow terminal leaves out, in this order (every
#: change and its % stay; the caption says what was left out).
NARROW_DROPS = ("requests before/now", "energy before/now", "carbon before/now")


def _service_columns(rows: list[ServiceChange]) -> list[tuple[str, str, Callable[[ServiceChange], str]]]:
    """(group, header, cell) per figure column of the per-service table; ``group`` names the
    pair a narrow terminal may leave out ("" for a change or a % column)."""
    kg = scaler([v for s in rows for v in (s.carbon_kgco2eq.previous, s.carbon_kgco2eq.current,
                                           s.carbon_kgco2eq.change)], KG)
    kwh = scaler([v for s in rows for v in (s.energy_kwh.previous, s.energy_kwh.current, s.energy_kwh.change)], KWH)
    return [
        ("energy before/now", "energy\nbefore", lambda s: kwh(s.energy_kwh.previous, False)),
        ("energy before/now", "energy\nnow", lambda s: kwh(s.energy_kwh.current, False)),
        ("", "energy\nchange", lambda s: kwh(s.energy_kwh.change, True)),
        ("", "energy\nchange %", lambda s: percent(s.energy_kwh)),
        ("carbon before/now", "carbon\nbefore", lambda s: kg(s.carbon_kgco2eq.previous, False)),
        ("carbon before/now", "carbon\nnow", lambda s: kg(s.carbon_kgco2eq.current, False)),
        ("", "carbon\nchange", lambda s: kg(s.carbon_kgco2eq.change, True)),
        ("", "carbon\nchange %", lambda s: percent(s.carbon_kgco2eq)),
        ("requests before/now", "requests\nbefore", lambda s: _count(s.requests.previous)),
        ("requests before/now", "requests\nnow", lambda s: _count(s.requests.current)),
        ("", "requests\nchange", lambda s: _count(s.requests.change, True)),
        ("", "requests\nchange %", lambda s: percent(s.requests)),
    ]


def service_table(c: Comparison, rows: list[ServiceChange], drop: tuple[str, ...] = (),
                  two_line_headers: bool = True) -> Table:
    """Energy, operational carbon and requests per service, before and now, with each change
    and its %; the column pairs named in ``drop`` left out (a narrow terminal, said in the
    caption). Names fold, never cut (off a terminal, one line layout: never wrapped either);
    figures never wrap."""
    columns = [col for col in _service_columns(rows) if col[0] not in drop]
    per = Table(title="energy, operational carbon and requests per service, before and now", caption_justify="left")
    per.add_column("service", justify="left", overflow="fold", min_width=12, no_wrap=not two_line_headers)
    # which services are new or gone (empty: in both periods); two lines on a terminal keep it as
    # narrow as its values, so the narrow-terminal fit is unchanged
    per.add_column("new/\ngone" if two_line_headers else "new/gone", justify="left", no_wrap=True)
    for _, header, _ in columns:
        per.add_column(header if two_line_headers else header.replace("\n", " "), justify="right", no_wrap=True)
    for s in rows:  # names as Text: never read as rich markup
        per.add_row(Text(s.service_name), STATUS[s.status], *(cell(s) for *_, cell in columns))
    hidden = len(c.services) - len(rows)
    if hidden:
        per.add_row(f"... {hidden} more (the {len(rows)} largest changes shown; every service: "
                    "--csv DIR's comparison.csv, or comparison.services in the JSON)", *([""] * (len(columns) + 1)))
    if drop:
        per.caption = Text(f"columns left out to fit this terminal: {', '.join(drop)} (every column: a wider "
                           "terminal, or --csv DIR's comparison.csv)")
    return per


def terminal_tables(report: DisclosureReport, max_rows: int | None,
                    width: int | None = None) -> list[tuple[Table | Text, int | None]]:
    """The totals table, the per-service table (``max_rows`` largest changes on a terminal,
    every service elsewhere) and the lines under them, each with the width it needs (None: the
    console's will do). ``width``: a terminal's, to fit the per-service table to it as
    ``render.fitting_table`` fits the summary (column pairs left out, ``NARROW_DROPS``; if even
    that does not fit, laid out at the width it needs and the terminal wraps it: nothing is cut)."""
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
    need: int | None = None
    if width is None:  # off a terminal: every column and whole names, at the width they need
        per = service_table(c, rows, two_line_headers=False)
        need = needed_width(per)
    else:
        for n in range(len(NARROW_DROPS) + 1):
            per = service_table(c, rows, NARROW_DROPS[:n])
            need = needed_width(per)
            if need <= width:
                need = None
                break
    lines = [f"appeared {len(c.appeared):,}" + (f" ({_names(c.appeared)})" if c.appeared else "")
             + f"; disappeared {len(c.disappeared):,}" + (f" ({_names(c.disappeared)})" if c.disappeared else "")]
    lines += [x for x in (undefined_line(c),) if x] + [f"NOTE: {n}" for n in c.notes]
    # the heading a line of its own (never wrapped to a table); names as Text, never read as rich markup
    return [(Text(heading(c)), None), (totals, None), (per, need), (Text("\n".join(lines)), None)]


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


def html_section(report: DisclosureReport) -> str:
    """The "Against the previous period" section (empty without a comparison)."""
    c = report.comparison
    if c is None:
        return ""
    p = c.previous
    intro = (f"This period against the report for {p.period.start} to {p.period.end}"
             + (f" ({p.organisation})" if p.organisation else "") + ", whose content hash is ")
    totals = [[label, fmt(ch.previous, False), fmt(ch.current, False), fmt(ch.change, True), percent(ch),
               _bands(label, ch)] for label, ch, fmt in _total_rows(c)]
    kg = scaler([v for s in c.services for v in (s.carbon_kgco2eq.previous, s.carbon_kgco2eq.current,
                                                 s.carbon_kgco2eq.change)], KG)
    kwh = scaler([v for s in c.services for v in (s.energy_kwh.previous, s.energy_kwh.current,
                                                  s.energy_kwh.change)], KWH)
    heads = ["service", "new/gone", "energy before", "energy now", "energy change", "energy change %", "carbon before",
             "carbon now", "carbon change", "carbon change %", "requests before", "requests now",
             "requests change", "requests change %"]
    rows = [{"name": s.service_name, "cells": [
        STATUS[s.status], kwh(s.energy_kwh.previous, False), kwh(s.energy_kwh.current, False),
        kwh(s.energy_kwh.change, True), percent(s.energy_kwh), kg(s.carbon_kgco2eq.previous, False),
        kg(s.carbon_kgco2eq.current, False), kg(s.carbon_kgco2eq.change, True), percent(s.carbon_kgco2eq),
        _count(s.requests.previous), _count(s.requests.current), _count(s.requests.change, True),
        percent(s.requests)]} for s in c.services]
    lists = [f"Appeared ({len(c.appeared):,}): {', '.join(c.appeared) or 'none'}.",
             f"Disappeared ({len(c.disappeared):,}): {', '.join(c.disappeared) or 'none'}."]
    notes = [x for x in (undefined_line(c),) if x] + c.notes
    return render("compare.html", intro=intro, content_hash=p.content_hash,
                  total_heads=["", "before", "now", "change", "change %", BAND_HEAD], total_numeric={1, 2, 3, 4, 5},
                  totals=totals, heads=heads, numeric=set(range(2, 14)), rows=rows, lists=lists,
                  notes=[f"{n[0].upper()}{n[1:]}." for n in notes])
