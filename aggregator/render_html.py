"""The report as one self-contained HTML page for readers who are not engineers.

No scripts, fonts, images or style sheets are fetched: the style sits in a ``<style>`` block
and the chart is inline SVG, so the file can be mailed, archived or printed as it is.
Every string from the archives is HTML-escaped (service names are untrusted input).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from html import escape

from aggregator.caveats import PARTIAL
from aggregator.coverage import GAP_TOLERANCE_S
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
from aggregator.render_html_services import PRINT_STYLE, bars, page_footer_style, services_table
from schema.report import DisclosureReport
from schema.version import __version__

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:60rem;
color:#1d2b1f;padding:0 1rem;line-height:1.45}
h1{margin-bottom:.2rem}h2{border-bottom:2px solid #cfe3d2;padding-bottom:.2rem;margin-top:2rem}
.sub{color:#58705c}.cards{display:flex;flex-wrap:wrap;gap:1rem}
.card{background:#f1f8f2;border-radius:.5rem;padding:.8rem 1.1rem;min-width:10rem}
.card b{display:block;font-size:1.5rem}table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #e2ece3}td.n,th.n{text-align:right}
code{font-size:.85em;word-break:break-all}.note{color:#58705c;font-size:.9em}
.warn{background:#fff4e0;border-left:4px solid #c77700;padding:.6rem 1rem;margin:.6rem 0}
"""


#: What the embodied line of the breakdown is, under the table (terminal: render.breakdown).
EMBODIED_NOTE = ("Embodied carbon (SCI's M term) is the carbon of making the servers, charged by the agent per "
                 "request ([green] embodied_carbon_per_request_gco2, per trace or per root span), not "
                 "measured: it is in the total, not in any service's operational carbon.")


def _card(label: str, value: str, note: str = "") -> str:
    extra = f'<span class="note">{escape(note)}</span>' if note else ""
    return f'<div class="card">{escape(label)}<b>{escape(value)}</b>{extra}</div>'


def _table(headers: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    head = "".join(f'<th class="{"n" if i in numeric else ""}">{escape(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"n" if i in numeric else ""}">{escape(c)}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _regions(report: DisclosureReport) -> str:
    rows = [[r.region, r.status, f"{r.grid_intensity_gco2_kwh:g} g/kWh", f"{r.pue:g}", r.intensity_source,
             fmt_kwh(r.energy_kwh), fmt_kg(r.carbon_kgco2eq)] for r in report.regions]
    if not rows:
        return "<p>No regions recorded.</p>"
    return _table(["region", "status", "grid intensity", "PUE", "intensity data", "energy", "carbon"],
                  rows, {2, 3, 5, 6})


def _scope2(report: DisclosureReport) -> str:
    """The electricity's carbon two ways, in words a non-engineer can follow."""
    s2, factors = report.aggregate.scope2, report.methodology.market_factors
    if s2 is None or factors is None:
        return ""
    rows = [[r.region,
             "the factor given" if r.market_basis == "contractual" else "the grid average (no factor given)",
             f"{r.market_factor_gco2_kwh:g} g/kWh" if r.market_factor_gco2_kwh is not None else "-",
             f"{r.location_intensity_gco2_kwh:.4g} g/kWh", fmt_kwh(r.facility_energy_kwh),
             fmt_kg(r.location_based_kgco2eq), fmt_kg(r.market_based_kgco2eq)] for r in s2.regions]
    table = _table(["region", "market-based uses", "market factor", "grid average", "electricity (with PUE)",
                    "location-based", "market-based"], rows, {2, 3, 4, 5, 6})
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
    return ("<h2>Electricity two ways (Scope 2)</h2>" + "".join(f"<p>{escape(t)}</p>" for t in texts[:2])
            + table + "".join(f'<p class="note">{escape(t)}</p>' for t in texts[2:]))


def _temporal(report: DisclosureReport) -> str:
    """Time covered: the period's share inside each agent's windows, and the longest gaps."""
    agg = report.aggregate
    partial = [w for w in report.warnings if w.code == "partial_period"]
    head = (f"{PARTIAL.capitalize()}: the windows cover {agg.temporal_coverage:.1%} of the period"
            if partial else f"The windows cover {agg.temporal_coverage:.1%} of the period")
    text = (f"{head} ({agg.period_seconds:,.0f} s per agent; gaps under {GAP_TOLERANCE_S:g} s between "
            "windows are not gaps). Time an agent did not run is not in the figures.")
    rows = [[a.agent, f"{a.temporal_coverage:.1%}", f"{a.covered_seconds:,.0f} s", f"{a.runs:,}"]
            for a in agg.temporal_coverage_by_agent]
    out = f"<p>{escape(text)}</p>"
    if rows:
        out += _table(["agent", "temporal coverage", "covered", "unbroken runs"], rows, {1, 2, 3})
    gaps = [[g.agent, g.start, g.end, f"{g.seconds:,.0f} s"] for g in agg.largest_gaps]
    if gaps:
        out += "<p>The longest gaps:</p>" + _table(["agent", "from", "to", "length"], gaps, {3})
    return out


def _coverage(report: DisclosureReport) -> str:
    agg, inp = report.aggregate, report.inputs
    lines = [
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
    return "".join(f"<p>{escape(t)}</p>" for t in lines)


def _methodology(report: DisclosureReport) -> str:
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
    return _table(["", ""], rows, set())


def generated_at(environ: Mapping[str, str] | None = None) -> str:
    """When the page is made, UTC to the second: ``SOURCE_DATE_EPOCH`` when set (the
    reproducible-builds convention: the same archives then give the same page bytes), else now."""
    env = os.environ if environ is None else environ
    raw = env.get("SOURCE_DATE_EPOCH", "").strip()
    when = datetime.fromtimestamp(int(raw), UTC) if raw.isdigit() else datetime.now(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _provenance(report: DisclosureReport, generated: str) -> str:
    """Who made the page from what: carbonspan's version, the report's content hash and, outside
    the hashed JSON, when the page was generated."""
    made = f"Generated {generated} by carbonspan {__version__}" if generated else f"Made by carbonspan {__version__}"
    return (f'<p class="sub provenance">{escape(made)} from the report with content hash '
            f"<code>{escape(report.integrity.content_hash)}</code> "
            f"({len(report.integrity.chains):,} archive chain(s), listed under Integrity).</p>")


def render_html(report: DisclosureReport, generated: str = "") -> str:
    """The whole page as a string; ``generated`` (e.g. ``generated_at()``) is shown on the page
    and on each printed page, and is not in the JSON report (empty: not shown)."""
    agg, integ = report.aggregate, report.integrity
    b = agg.carbon_breakdown
    s2 = agg.scope2
    electricity = [] if s2 is None else [
        _card(f"Electricity CO2e, {LOCATION_LABEL}", fmt_kg(s2.location_based_kgco2eq),
              f"SCI band {band(s2.location_based_kgco2eq)}"),
        _card(f"Electricity CO2e, {MARKET_LABEL}", fmt_kg(s2.market_based_kgco2eq),
              f"SCI band {band(s2.market_based_kgco2eq)}"),
    ]
    cards = "".join([
        _card("Carbon (CO2e)", fmt_kg(agg.total_carbon_kgco2eq), f"SCI band {band(agg.total_carbon_kgco2eq)}"),
        *electricity,
        _card("Energy", fmt_kwh(agg.total_energy_kwh)),
        _card("Requests", f"{agg.total_requests:,}"),
        _card("Temporal coverage", f"{agg.temporal_coverage:.1%}",
              PARTIAL if any(w.code == "partial_period" for w in report.warnings) else ""),
        _card("Attributed by the agent", f"{agg.period_coverage:.1%}"),
        _card("From backfill", f"{agg.backfill.carbon_share if agg.backfill else 0.0:.1%}", "of the carbon"),
    ])
    total = agg.total_carbon_kgco2eq
    breakdown = _table(["part", "carbon", "share of the total", "SCI band (x0.5 to x2)"], [
        [part, fmt_kg(kg), f"{kg / total:.1%}" if total > 0 else "-", band(kg)] for part, kg in (
            ("running the applications", b.operational_kgco2eq),
            ("making the hardware (embodied)", b.embodied_kgco2eq),
            ("database servers", b.database_kgco2eq),
            ("message brokers", b.messaging_kgco2eq),
            ("total", total))
    ], {1, 2, 3}) + f'<p class="note">{escape(EMBODIED_NOTE)}</p>'
    first, last = report.period.first_window or "-", report.period.last_window or "-"
    period = f"{report.period.start or first} to {report.period.end or last}"
    windows = f"Windows folded start from {first} to {last}." if report.period.first_window else "No window in the period."
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Carbon disclosure {escape(report.organisation)}</title>"
        f"<style>{_STYLE}{PRINT_STYLE}{page_footer_style(period, generated)}</style></head><body>"
        f"<h1>Carbon disclosure{': ' + escape(report.organisation) if report.organisation else ''}</h1>"
        f'<p class="sub">Period {escape(period)} (end excluded). {escape(windows)} Report format {escape(report.schema_version)}.</p>'
        + _provenance(report, generated)
        + "".join(f'<p class="warn"><b>Warning.</b> {escape(w)}</p>' for w in warnings(report))
        + f'<div class="cards">{cards}</div>'
        f"<h2>Where the carbon comes from</h2>{breakdown}{_scope2(report)}"
        f"<h2>Carbon per service</h2>{bars(report)}"
        f"<h2>Every service</h2>{services_table(report)}"
        f"{html_section(report)}"
        f"<h2>Over time</h2>{time_charts(report)}"
        f"<h2>Per region</h2>{region_chart(report)}{_regions(report)}"
        f"<h2>Coverage</h2>{_temporal(report)}{_coverage(report)}"
        f"<h2>Methodology</h2>{_methodology(report)}"
        "<h2>Integrity</h2><p>Anyone with the archives can check this report with "
        "<code>carbonspan verify ARCHIVES --report report.json</code>.</p>"
        f"<p>Content hash <code>{escape(integ.content_hash)}</code><br>first archive record "
        f"<code>{escape(integ.first_archive_hash)}</code><br>last archive record "
        f"<code>{escape(integ.last_archive_hash)}</code></p>{chains(report)}</body></html>\n"
    )
