"""The report on a terminal: headline figures and a per-application table (rich).

Used by ``carbonspan aggregate`` at the end of a run. Rich degrades to plain text when the
output is not a terminal, so the same summary reads well in a CI log.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from schema.report import (
    SCI_HIGH_FACTOR,
    SCI_LOW_FACTOR,
    Application,
    BackfillTotal,
    DisclosureReport,
)

MAX_ROWS = 20


#: What a non-zero figure too small for its column's unit prints as (never "0.000").
TINY = "<0.001"


def plural(n: int, noun: str) -> str:
    """``1 request``, ``1,675 requests``: the count with thousands separators, the noun agreeing."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def fixed(value: float, name: str, signed: bool = False) -> str:
    """``value`` (already in unit ``name``) to 3 decimals; a non-zero figure that would print
    as zero prints ``<0.001`` (``-<0.001`` below zero, ``+<0.001`` for a signed change), so
    every figure of a column keeps the column's unit and none reads as nothing."""
    text = f"{value:{'+' if signed else ''},.3f}"
    if value != 0.0 and text.lstrip("+-").strip("0.,") == "":
        text = ("-" if value < 0 else "+" if signed else "") + TINY
    return f"{text} {name}"


def unit_of(values: list[float], units: tuple[str, str, str]) -> tuple[float, str]:
    """(scale, unit) for a whole column, chosen by its largest magnitude: x1000 below 1,
    /1000 from 1000 (a column never mixes g and kg)."""
    small, unit, large = units
    top = max((abs(v) for v in values), default=0.0)
    return (1e-3, large) if top >= 1000.0 else (1.0, unit) if top >= 1.0 else (1e3, small)


def _scaled(value: float, units: tuple[str, str, str]) -> str:
    """``value`` (in the middle unit) in the unit a reader expects: x1000 below 1, /1000 above 1000."""
    scale, name = unit_of([value], units)
    return fixed(value * scale, name)


def column_format(values: list[float], units: tuple[str, str, str]):
    """One unit for a whole column, chosen by its largest value as ``_scaled`` would: a column
    never mixes g and kg; a figure too small for it prints ``<0.001`` in it (``fixed``)."""
    scale, name = unit_of(values, units)
    return lambda v: fixed(v * scale, name)


#: gCO2e per request: g, mg or µg (the middle unit is mg: a request's carbon is small).
PER_REQUEST_UNITS = ("\u00b5g", "mg", "g")


def per_request_format(values: list[float | None]):
    """One unit (g, mg or µg of CO2e per request) for a whole column, by its largest value;
    None (no requests) prints "-"."""
    scale, name = unit_of([v * 1e3 for v in values if v is not None], PER_REQUEST_UNITS)
    return lambda v: "-" if v is None else fixed(v * 1e3 * scale, name)


def fmt_g(g: float | None) -> str:
    """gCO2e (per request) in g, mg or µg; "-" for None (no requests)."""
    return per_request_format([g])(g)


def g_band(g: float) -> str:
    """The SCI band of a per-request figure (x0.5 .. x2), as ``band`` is of a carbon total."""
    return f"{fmt_g(g * SCI_LOW_FACTOR)} to {fmt_g(g * SCI_HIGH_FACTOR)}"


def fmt_share(share: float | None) -> str:
    """The measured share of a service's energy; "-" without energy."""
    return "-" if share is None else f"{share:.0%}"


def fmt_kg(kg: float) -> str:
    return _scaled(kg, ("g", "kg", "t"))


def fmt_kwh(kwh: float) -> str:
    return _scaled(kwh, ("Wh", "kWh", "MWh"))


def band(kg: float) -> str:
    """The SCI band of a carbon figure, x0.5 .. x2 (what the window lines' co2.total low / high say)."""
    return f"{fmt_kg(kg * SCI_LOW_FACTOR)} to {fmt_kg(kg * SCI_HIGH_FACTOR)}"


def with_band(kg: float) -> str:
    return f"{fmt_kg(kg)} (band {band(kg)})"


def title(report: DisclosureReport) -> str:
    """The period the figures cover: the windows' own first and last start, beside the
    requested bounds when there were any (an open bound is not a time a reader can use)."""
    period = report.period
    org = f"{report.organisation}, " if report.organisation else ""
    if not period.first_window:
        covered = "no windows"
    elif period.first_window == period.last_window:
        covered = f"window {period.first_window}"
    else:
        covered = f"windows {period.first_window} .. {period.last_window}"
    if period.start and period.end:
        return f"carbon disclosure: {org}period {period.start} up to {period.end} ({covered})"
    return f"carbon disclosure: {org}{covered}"


def breakdown(report: DisclosureReport) -> str:
    """Why the total exceeds the per-service sum: the services carry the operational carbon;
    embodied carbon and the database/broker hosts (never a service) are added on top."""
    agg, b = report.aggregate, report.aggregate.carbon_breakdown
    return (
        f"carbon {with_band(agg.total_carbon_kgco2eq)} = services (operational) {with_band(b.operational_kgco2eq)} "
        f"+ embodied {fmt_kg(b.embodied_kgco2eq)} (band {band(b.embodied_kgco2eq)}; {embodied_share(report)} of "
        f"the total: making the servers, charged per request, SCI's M) + database hosts {with_band(b.database_kgco2eq)} "
        f"+ messaging hosts {with_band(b.messaging_kgco2eq)}; host energy {fmt_kwh(agg.host_energy_kwh)}; "
        f"SCI band x{SCI_LOW_FACTOR:g} to x{SCI_HIGH_FACTOR:g}"
    )


def per_request_line(report: DisclosureReport) -> str:
    """The period's carbon per request with its SCI band (``aggregate.per_request``)."""
    pr = report.aggregate.per_request
    if pr is None:
        return "per request: - (no requests in the period)"
    return (f"per request ({plural(pr.requests, 'request')}): operational {fmt_g(pr.operational_gco2e)} "
            f"(band {g_band(pr.operational_gco2e)}), SCI (O+M)/R {fmt_g(pr.sci_gco2e)} (band {g_band(pr.sci_gco2e)})")


def embodied_share(report: DisclosureReport) -> str:
    """The embodied carbon's share of the total carbon ("-" when the total is 0)."""
    total = report.aggregate.total_carbon_kgco2eq
    return f"{report.aggregate.carbon_breakdown.embodied_kgco2eq / total:.1%}" if total > 0 else "-"


LOCATION_LABEL = "location-based (grid average)"
MARKET_LABEL = "market-based (your contracts)"


def _names(names: list[str], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def scope2_line(report: DisclosureReport) -> str:
    """The electricity's carbon both ways (GHG Protocol Scope 2), when factors were given."""
    s2 = report.aggregate.scope2
    if s2 is None:
        return ""
    contract = [r.region for r in s2.regions if r.market_basis == "contractual"]
    grid = [r.region for r in s2.regions if r.market_basis == "location_fallback"]
    line = (f"electricity (Scope 2): {LOCATION_LABEL} {with_band(s2.location_based_kgco2eq)}, "
            f"{MARKET_LABEL} {with_band(s2.market_based_kgco2eq)}; contract factors for "
            f"{len(contract)} region(s)" + (f" ({_names(contract)})" if contract else "")
            + f", grid average for {len(grid)}" + (f" ({_names(grid)})" if grid else ""))
    if s2.unmatched_factor_regions:
        line += f"; factors matching no region: {_names(s2.unmatched_factor_regions)}"
    return line


def warnings(report: DisclosureReport) -> list[str]:
    """What a reader must know before trusting the figures (``report.warnings``, decided in
    aggregator.caveats); terminal and HTML show the same list."""
    return [w.message for w in report.warnings]


def backfill_share(app: Application) -> float:
    """The share of the service's carbon from backfilled chains (0 without any in the report)."""
    return app.backfill.carbon_share if app.backfill is not None else 0.0


def backfill_line(report: DisclosureReport) -> str:
    """Which share of the totals came from backfilled chains (``carbonspan backfill``); 0 %
    when the period holds none (``aggregate.backfill`` is then absent)."""
    agg = report.aggregate
    b = agg.backfill or BackfillTotal()
    return (f"from backfilled chains: {b.energy_share:.1%} of energy, {b.carbon_share:.1%} of carbon, "
            f"{b.requests_share:.1%} of requests ({b.windows:,} of {plural(agg.windows, 'window')})")


def temporal_line(report: DisclosureReport) -> str:
    agg = report.aggregate
    agents = ", ".join(f"{a.agent} {a.temporal_coverage:.1%}" for a in agg.temporal_coverage_by_agent[:6])
    return (f"temporal coverage {agg.temporal_coverage:.1%} of the period's {agg.period_seconds:,.0f} s"
            + (f" ({agents})" if agents else ""))


#: Columns a narrow terminal drops first (never the names or a figure cut in two).
NARROW_DROPS = ("model", "region")


def summary_table(report: DisclosureReport, max_rows: int | None = MAX_ROWS, drop: tuple[str, ...] = (),
                  two_line_headers: bool = True) -> Table:
    """The summary; ``max_rows`` caps the rows on a terminal (``None``: every service); the
    columns named in ``drop`` are left out (a narrow terminal); headers on one line each unless
    ``two_line_headers``. Names wrap (fold), never cut; figures never wrap (a unit alone on a
    line reads as another figure)."""
    agg = report.aggregate
    table = Table(title=Text(title(report)), caption_justify="left")
    backfilled = agg.backfill is not None  # the backfill column only then; the caption's line always
    shown = report.applications if max_rows is None else report.applications[:max_rows]
    kwh = column_format([a.energy_kwh for a in shown], ("Wh", "kWh", "MWh"))
    kg = column_format([a.carbon_kgco2eq for a in shown], ("g", "kg", "t"))
    op = per_request_format([a.operational_gco2e_per_request for a in shown])
    sci = per_request_format([a.sci_gco2e_per_request for a in shown])
    columns = [  # (name, header, justify, cell)
        ("service", "service", "left", lambda a: a.service_name),
        ("region", "region", "left", lambda a: a.region),
        ("energy", "energy", "right", lambda a: kwh(a.energy_kwh)),
        ("carbon", "carbon", "right", lambda a: kg(a.carbon_kgco2eq)),
        ("share", "share of\ntotal carbon", "right", lambda a: f"{a.share_of_total:.1%}"),
        ("requests", "requests", "right", lambda a: f"{a.requests:,}"),
        ("per_request", "CO2e per\nrequest", "right", lambda a: op(a.operational_gco2e_per_request)),
        ("sci", "SCI per\nrequest", "right", lambda a: sci(a.sci_gco2e_per_request)),
        ("measured", "measured\nenergy", "right", lambda a: fmt_share(a.measured_share)),
        ("model", "model", "left", lambda a: a.energy_model),
    ]
    if backfilled:
        columns.append(("backfill", "backfill", "right", lambda a: f"{backfill_share(a):.1%}"))
    columns = [c for c in columns if c[0] not in drop]
    for name, header, justify, _ in columns:
        table.add_column(header if two_line_headers else header.replace("\n", " "), justify=justify, overflow="fold",  # type: ignore[arg-type]
                         no_wrap=justify == "right", min_width=12 if name == "service" else None)
    for app in shown:  # as Text: a name like "pay[/b]" is shown as it is, never read as rich markup
        table.add_row(*(Text(cell(app)) for *_, cell in columns))
    hidden = len(report.applications) - len(shown)
    if hidden > 0:
        table.add_row(f"... {hidden} more", *([""] * (len(columns) - 1)))
    table.caption = Text(
        f"total {fmt_kwh(agg.total_energy_kwh)}, {with_band(agg.total_carbon_kgco2eq)} CO2e over "
        f"{plural(agg.windows, 'window')}; {temporal_line(report)}; attributed by the agent {agg.period_coverage:.1%} "
        f"(runtime {agg.runtime_windows:,}, fallback {agg.fallback_windows:,}); "
        f"malformed lines {report.inputs.malformed_lines:,}, sanitised values {agg.sanitised_values:,}, "
        f"dropped service entries {agg.dropped_services:,}"
        + (f" ({fmt_kwh(agg.dropped_energy_kwh)}, {fmt_kg(agg.dropped_carbon_kgco2eq)})" if agg.dropped_services else "")
        + "\n" + breakdown(report) + "\n" + per_request_line(report) + "\n" + backfill_line(report)
        + "\ncarbon: operational; CO2e per request: operational; SCI per request: (operational + embodied "
        "allocated by requests) / requests; measured energy: the share of the service's energy a meter measured "
        "(the rest is modelled)"
        + ("; backfill: the share of the service's carbon from backfilled chains" if backfilled else "")
        + ("\n" + scope2_line(report) if report.aggregate.scope2 is not None else "")
        + (f"\ncolumns left out to fit this terminal: {', '.join(drop)} (every column: a wider terminal, "
           "--format csv, or --csv DIR)" if drop else "")
        + "".join(f"\nWARNING: {w}" for w in warnings(report))
    )
    return table


#: The widest layout of a summary when the output is not a terminal (a file, a CI log).
PLAIN_WIDTH = 1000


def print_summary(report: DisclosureReport, console: Console | None = None) -> None:
    """On a terminal the first ``MAX_ROWS`` services; elsewhere (a file, a pipe, a CI log)
    every service, laid out wide enough that no name is wrapped or cut."""
    console = console or Console()
    if console.is_terminal:
        table, width = fitting_table(report, console)
        if width is None:
            console.print(table)
            return
        narrow = console.width  # too narrow even then: lay it out wider, the terminal wraps it
        console.width = width
        try:
            console.print(table)
        finally:
            console.width = narrow
        return
    table = summary_table(report, max_rows=None, two_line_headers=False)
    longest = max((len(a.service_name) for a in report.applications), default=0)
    console.width = max(console.width, min(PLAIN_WIDTH, longest + 160))
    console.print(table)


def needed_width(table: Table) -> int:
    """The width ``table`` needs to show every figure whole (figure columns never wrap) with at
    least 12 characters for a name or a region (and never less than a column's ``min_width``):
    its cells' widths, plus padding and rules."""
    total = 1
    for column in table.columns:
        texts = [str(c) for c in (column.header, *column._cells)]
        widest = max((len(line) for t in texts for line in t.splitlines()), default=0)
        total += max(widest if column.no_wrap else min(widest, 12), column.min_width or 0) + 3
    return total


def fitting_table(report: DisclosureReport, console: Console) -> tuple[Table, int | None]:
    """The terminal's summary and the width to print it at: every column if the terminal is wide
    enough, else without model, then without region; if even that does not fit, at the width it
    needs (the terminal wraps the long lines: nothing is cut)."""
    for n in range(len(NARROW_DROPS) + 1):
        table = summary_table(report, drop=NARROW_DROPS[:n])
        need = needed_width(table)
        if need <= console.width:
            return table, None
    return table, need
