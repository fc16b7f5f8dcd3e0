"""The report on a terminal: headline figures and a per-application table (rich).

Used by ``carbonspan aggregate`` at the end of a run. Rich degrades to plain text when the
output is not a terminal, so the same summary reads well in a CI log.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from schema.report import DisclosureReport

MAX_ROWS = 20


def _scaled(value: float, units: tuple[str, str, str]) -> str:
    """``value`` (in the middle unit) in the unit a reader expects: x1000 below 1, /1000 above 1000."""
    small, unit, large = units
    if value >= 1000.0:
        return f"{value / 1000.0:,.3f} {large}"
    if value >= 1.0:
        return f"{value:,.3f} {unit}"
    return f"{value * 1000.0:,.3f} {small}"


def fmt_kg(kg: float) -> str:
    return _scaled(kg, ("g", "kg", "t"))


def fmt_kwh(kwh: float) -> str:
    return _scaled(kwh, ("Wh", "kWh", "MWh"))


def summary_table(report: DisclosureReport) -> Table:
    agg = report.aggregate
    table = Table(title=f"carbon disclosure {report.organisation} "
                        f"{report.period.start or '(start)'} .. {report.period.end or '(end)'}")
    for column, justify in (("service", "left"), ("region", "left"), ("energy", "right"),
                            ("carbon", "right"), ("share", "right"), ("requests", "right"),
                            ("model", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for app in report.applications[:MAX_ROWS]:
        table.add_row(app.service_name, app.region, fmt_kwh(app.energy_kwh), fmt_kg(app.carbon_kgco2eq),
                      f"{app.share_of_total:.1%}", f"{app.requests:,}", app.energy_model)
    hidden = len(report.applications) - MAX_ROWS
    if hidden > 0:
        table.add_row(f"... {hidden} more", "", "", "", "", "", "")
    table.caption = (
        f"total {fmt_kwh(agg.total_energy_kwh)}, {fmt_kg(agg.total_carbon_kgco2eq)} CO2e over "
        f"{agg.windows:,} windows; coverage {agg.period_coverage:.1%} "
        f"(runtime {agg.runtime_windows:,}, fallback {agg.fallback_windows:,}); "
        f"malformed lines {report.inputs.malformed_lines:,}, sanitised values {agg.sanitised_values:,}, "
        f"dropped services {agg.dropped_services:,}"
    )
    return table


def print_summary(report: DisclosureReport, console: Console | None = None) -> None:
    (console or Console()).print(summary_table(report))
