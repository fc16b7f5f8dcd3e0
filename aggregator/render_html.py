"""The report as one self-contained HTML page for readers who are not engineers.

No scripts, fonts, images or style sheets are fetched: the style sits in a ``<style>`` block
and the chart is inline SVG, so the file can be mailed, archived or printed as it is. The
markup is in Jinja2 templates (``aggregator/templates/``, ``report.html`` for the page; the
environment in ``aggregator.html_templates`` autoescapes, so every string from the archives is
HTML-escaped: service names are untrusted input); this module turns the report into the
figures' texts the templates show.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime

from aggregator.caveats import PARTIAL
from aggregator.coverage import GAP_TOLERANCE_S
from aggregator.html_templates import render
from aggregator.render import (
    LOCATION_LABEL,
    MARKET_LABEL,
    backfill_line,
    band,
    fmt_kg,
    fmt_kwh,
    warnings,
)
from aggregator.render_compare import html_section
from aggregator.render_html_regions import chains, region_chart
from aggregator.render_html_series import time_charts
from aggregator.render_html_services import bars, page_footer_style, services_table
from schema.report import DisclosureReport
from schema.version import __version__

#: What the embodied line of the breakdown is, under the table (terminal: render.breakdown).
EMBODIED_NOTE = ("Embodied carbon (SCI's M term) is the carbon of making the servers, charged by the agent per "
                 "request ([green] embodied_carbon_per_request_gco2, per trace or per root span), not "
                 "measured: it is in the total, not in any service's operational carbon.")


def _regions(report: DisclosureReport) -> list[list[str]]:
    return [[r.region, r.status, f"{r.grid_intensity_gco2_kwh:g} g/kWh", f"{r.pue:g}", r.intensity_source,
             fmt_kwh(r.energy_kwh), fmt_kg(r.carbon_kgco2eq)] for r in report.regions]


def _scope2(report: DisclosureReport) -> dict | None:
    """The electricity's carbon two ways, in words a non-engineer can follow."""
    s2, factors = report.aggregate.scope2, report.methodology.market_factors
    if s2 is None or factors is None:
        return None
    rows = [[r.region,
             "the factor given" if r.market_basis == "contractual" else "the grid average (no factor given)",
             f"{r.market_factor_gco2_kwh:g} g/kWh" if r.market_factor_gco2_kwh is not None else "-",
             f"{r.location_intensity_gco2_kwh:.4g} g/kWh", fmt_kwh(r.facility_energy_kwh),
             fmt_kg(r.location_based_kgco2eq), fmt_kg(r.market_based_kgco2eq)] for r in s2.regions]
    texts = [
        f"The electricity behind these services emitted {fmt_kg(s2.location_based_kgco2eq)} "
        f"{LOCATION_LABEL} (SCI band {band(s2.location_based_kgco2eq)}) and {fmt_kg(s2.market_based_kgco2eq)} "
        f"{MARKET_LABEL} (SCI band {band(s2.market_based_kgco2eq)}).",
        "Location-based: the average carbon of the grid each region draws from. Market-based: the "
        "emission factors of the electricity bought under contract (supplier rate, power purchase "
        "agreement, certificates) or, where there is none, the residual mix, as stated by: "
        + factors.source + ". A region without a factor keeps its grid average. Making the hardware (embodied) is in neither figure.",
        "If these servers are rented from a cloud provider, their electricity is usually reported "
        "under Scope 3 (purchased services), with the provider's own market-based figures.",
    ]
    if s2.unmatched_factor_regions:
        texts.append("Market factors given for regions with no activity in the period (check the "
                     "spelling): " + ", ".join(s2.unmatched_factor_regions) + ".")
    return {"texts": texts[:2], "rows": rows, "notes": texts[2:]}


def _temporal(report: DisclosureReport) -> dict:
    """Time covered: the period's share inside each agent's windows, and the longest gaps."""
    agg = report.aggregate
    partial = [w for w in report.warnings if w.code == "partial_period"]
    head = (f"{PARTIAL.capitalize()}: the windows cover {agg.temporal_coverage:.1%} of the period"
            if partial else f"The windows cover {agg.temporal_coverage:.1%} of the period")
    text = (f"{head} ({agg.period_seconds:,.0f} s per agent; gaps under {GAP_TOLERANCE_S:g} s between "
            "windows are not gaps). Time an agent did not run is not in the figures.")
    agents = [[a.agent, f"{a.temporal_coverage:.1%}", f"{a.covered_seconds:,.0f} s", f"{a.runs:,}"]
              for a in agg.temporal_coverage_by_agent]
    gaps = [[g.agent, g.start, g.end, f"{g.seconds:,.0f} s"] for g in agg.largest_gaps]
    return {"text": text, "agents": agents, "gaps": gaps}


def _coverage(report: DisclosureReport) -> list[str]:
    agg, inp = report.aggregate, report.inputs
    return [
        f"Attributed by the agent: {agg.period_coverage:.1%} of the {agg.windows:,} measurement windows "
        f"carried per-service figures from the agent ({agg.runtime_windows:,}); {agg.fallback_windows:,} came from older "
        "agents and were split between services by their share of I/O operations.",
        f"{agg.unattributed_windows:,} windows could not be split at all and are shown as _unattributed.",
        f"{inp.malformed_lines:,} unreadable archive lines were skipped; {agg.sanitised_values:,} "
        f"impossible values (negative, not a number, infinite) were set to zero; "
        f"{agg.missing_values:,} values were missing.",
        f"{agg.dropped_services:,} service entries past the limit of services were not listed "
        f"({fmt_kwh(agg.dropped_energy_kwh)}, {fmt_kg(agg.dropped_carbon_kgco2eq)}); they are in the totals.",
        f"{backfill_line(report).capitalize()}: windows scored afterwards from historic traces "
        "(carbonspan backfill), not measured by an agent while they ran.",
    ]


def _methodology(report: DisclosureReport) -> list[list[str]]:
    m = report.methodology
    rows = [
        ["formula", m.sci_formula],
        ["grid intensity data", ", ".join(m.intensity_sources) or "none recorded"],
        ["data vintages", ", ".join(m.vintages) or "none recorded"],
        ["energy sources", ", ".join(m.energy_source_models) or "none recorded"],
        ["calibration applied", "yes" if m.calibration_applied else "no"],
        ["energy per I/O operation (older agents)", f"{m.energy_per_io_op_kwh:g} kWh"],
        ["data-centre overhead (PUE)", ", ".join(f"{k} {v:g}" for k, v in m.pue.items()) or "none"],
        ["coefficients", ", ".join(m.coefficients) or "none recorded"],
    ]
    if m.market_factors is not None:
        factors = ", ".join(f"{k} {v:g} g/kWh" for k, v in m.market_factors.regions.items())
        rows.append(["market-based factors", f"{factors} (source: {m.market_factors.source})"])
    return rows


def generated_at(environ: Mapping[str, str] | None = None) -> str:
    """When the page is made, UTC to the second: ``SOURCE_DATE_EPOCH`` when set (the
    reproducible-builds convention: the same archives then give the same page bytes), else now."""
    env = os.environ if environ is None else environ
    raw = env.get("SOURCE_DATE_EPOCH", "").strip()
    when = datetime.fromtimestamp(int(raw), UTC) if raw.isdigit() else datetime.now(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cards(report: DisclosureReport) -> list[tuple[str, str, str]]:
    """(label, figure, note) per card at the top."""
    agg, s2 = report.aggregate, report.aggregate.scope2
    electricity = [] if s2 is None else [
        (f"Electricity CO2e, {LOCATION_LABEL}", fmt_kg(s2.location_based_kgco2eq),
         f"SCI band {band(s2.location_based_kgco2eq)}"),
        (f"Electricity CO2e, {MARKET_LABEL}", fmt_kg(s2.market_based_kgco2eq),
         f"SCI band {band(s2.market_based_kgco2eq)}"),
    ]
    return [
        ("Carbon (CO2e)", fmt_kg(agg.total_carbon_kgco2eq), f"SCI band {band(agg.total_carbon_kgco2eq)}"),
        *electricity,
        ("Energy", fmt_kwh(agg.total_energy_kwh), ""),
        ("Requests", f"{agg.total_requests:,}", ""),
        ("Temporal coverage", f"{agg.temporal_coverage:.1%}",
         PARTIAL if any(w.code == "partial_period" for w in report.warnings) else ""),
        ("Attributed by the agent", f"{agg.period_coverage:.1%}", ""),
        ("From backfill", f"{agg.backfill.carbon_share if agg.backfill else 0.0:.1%}", "of the carbon"),
    ]


def _breakdown(report: DisclosureReport) -> list[list[str]]:
    b, total = report.aggregate.carbon_breakdown, report.aggregate.total_carbon_kgco2eq
    return [[part, fmt_kg(kg), f"{kg / total:.1%}" if total > 0 else "-", band(kg)] for part, kg in (
        ("running the applications", b.operational_kgco2eq),
        ("making the hardware (embodied)", b.embodied_kgco2eq),
        ("database servers", b.database_kgco2eq),
        ("message brokers", b.messaging_kgco2eq),
        ("total", total))]


def render_html(report: DisclosureReport, generated: str = "") -> str:
    """The whole page as a string; ``generated`` (e.g. ``generated_at()``) is shown on the page
    and on each printed page, and is not in the JSON report (empty: not shown). Who made the
    page from what (under the title): carbonspan's version, the report's content hash and,
    outside the hashed JSON, when the page was generated."""
    integ = report.integrity
    first, last = report.period.first_window or "-", report.period.last_window or "-"
    period = f"{report.period.start or first} to {report.period.end or last}"
    windows = f"Windows folded start from {first} to {last}." if report.period.first_window else "No window in the period."
    made = f"Generated {generated} by carbonspan {__version__}" if generated else f"Made by carbonspan {__version__}"
    return str(render(
        "report.html", organisation=report.organisation, footer_style=page_footer_style(period, generated),
        period=period, windows=windows, schema_version=report.schema_version, made=made,
        content_hash=integ.content_hash, n_chains=len(integ.chains), warnings=warnings(report),
        cards=_cards(report), breakdown=_breakdown(report), embodied_note=EMBODIED_NOTE, scope2=_scope2(report),
        bars=bars(report), services_table=services_table(report), comparison=html_section(report),
        time_charts=time_charts(report), region_chart=region_chart(report), regions=_regions(report),
        temporal=_temporal(report), coverage=_coverage(report), methodology=_methodology(report),
        first_archive_hash=integ.first_archive_hash, last_archive_hash=integ.last_archive_hash,
        chains=chains(report)))
