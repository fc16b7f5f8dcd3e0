"""What a reader must know before trusting the figures: temporal coverage, energy without
carbon, embodied carbon charged per trace, and the warnings the renderings show.

Each warning is decided here, once, from the folded state and the report's own fields; the
terminal summary and the HTML page print ``report.warnings`` as they are
(docs/report-format.md, "Warnings").
"""

from __future__ import annotations

from aggregator.coverage import GAP_TOLERANCE_S, coverage
from aggregator.fold.state import AggregateState
from aggregator.read import Period
from schema.report import (
    AgentCoverage,
    Aggregate,
    Application,
    CoverageGap,
    Methodology,
    ReportWarning,
)
from schema.times import period_label

#: Traces may exceed root spans by this much before the report warns (a trace split over
#: windows or agents is charged embodied carbon by each).
TRACES_OVER_ROOTS = 1.05
NO_DATA = "No data in this period"
PARTIAL = "partial period"


def temporal(state: AggregateState, period: Period) -> dict:
    """The ``aggregate`` fields of temporal coverage."""
    c = coverage(state.spans, period.start, period.end)
    return {
        "temporal_coverage": c["coverage"],
        "period_seconds": c["period_seconds"],
        "temporal_coverage_by_agent": [
            AgentCoverage(agent=a, covered_seconds=s, temporal_coverage=f, runs=n) for a, s, f, n in c["agents"]
        ],
        "largest_gaps": [CoverageGap(agent=a, start=period_label(lo), end=period_label(hi), seconds=g) for a, lo, hi, g in c["gaps"]],
        "coverage_gaps_joined": state.coverage_gaps_joined,
        "windows_without_end": state.windows_without_end,
    }


def without_carbon(state: AggregateState, apps: list[Application]) -> dict:
    """The ``aggregate`` fields of energy counted at 0 g, with the regions and services concerned."""
    regions = sorted(r for r, kwh in state.ewc_regions.items() if kwh > 0.0)
    chosen = set(regions)
    return {
        "energy_without_carbon_kwh": state.energy_without_carbon,
        "energy_without_carbon_regions": regions,
        "energy_without_carbon_services": sorted(a.service_name for a in apps if a.region in chosen),
    }


def _names(names: list[str], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _partial(agg: Aggregate) -> ReportWarning | None:
    agents = agg.temporal_coverage_by_agent
    short = agg.period_seconds * len(agents) - sum(a.covered_seconds for a in agents)
    if not agents or short < GAP_TOLERANCE_S:
        return None
    worst = [f"{a.agent} {a.temporal_coverage:.1%}" for a in agents if a.temporal_coverage < 1.0]
    gap = agg.largest_gaps[0] if agg.largest_gaps else None
    return ReportWarning(code="partial_period", message=(
        f"{PARTIAL}: the windows cover {agg.temporal_coverage:.1%} of the period "
        f"({_names(worst)}); " + (f"the longest gap is {gap.seconds:,.0f} s ({gap.agent}, {gap.start} to "
                                  f"{gap.end}); " if gap else "")
        + "time an agent did not run is not in the figures"))


def warnings(agg: Aggregate, methodology: Methodology) -> list[ReportWarning]:
    """The report's warnings, in a fixed order (so the same archives give the same bytes)."""
    out = []
    if agg.windows == 0:
        out.append(ReportWarning(code="no_data", message=(
            f"{NO_DATA}: no measurement window starts inside it, so every figure is zero for "
            "lack of data, not because nothing ran")))
    partial = _partial(agg)
    if partial is not None:
        out.append(partial)
    if agg.energy_without_carbon_kwh > 0.0:
        out.append(ReportWarning(code="energy_without_carbon", message=(
            f"{agg.energy_without_carbon_kwh:.6g} kWh were counted at 0 gCO2e because their region is "
            f"unresolved or not in the intensity table (regions: "
            f"{_names(agg.energy_without_carbon_regions) or 'not listed'}; services: "
            f"{_names(agg.energy_without_carbon_services) or 'none'}); set cloud.region, "
            "[green.service_regions] or default_region to a region of the table")))
    traces, roots = agg.traces_counted, agg.root_spans_counted
    per_root = methodology.window_methodology.get("embodied_per") == ["root_span"]  # charged once already
    if traces > roots * TRACES_OVER_ROOTS and not per_root:
        over = f"{traces / roots - 1:.0%}" if roots else "all"
        out.append(ReportWarning(code="traces_exceed_root_spans", message=(
            f"traces counted ({traces:,}) exceed root spans ({roots:,}) by {over}: a trace split over "
            "windows or agents is charged embodied carbon by each; set [green] embodied_per = "
            '"root_span" to charge each request once, where its root span arrives')))
    if agg.one_sided_windows:
        out.append(ReportWarning(code="one_sided_windows", message=(
            f"{agg.one_sided_windows:,} window(s) had only one of the two per-service maps; they were "
            "split by I/O operations from the line's totals (the files: inputs.one_sided_files)")))
    return out
