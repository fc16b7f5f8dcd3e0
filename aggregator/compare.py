"""This period against the previous one: ``carbonspan aggregate ... --compare PREVIOUS.json``.

PREVIOUS is a disclosure report an earlier ``aggregate`` wrote. It is checked before any
archive is read (``load_previous``): it must be a carbonspan report, its content hash must
match its body (a report edited since it was written is refused), and its period must end
at or before the current period's start. The comparison (``schema.report.Comparison``) then
holds, per service and in total, the previous and current figure, the change and the change
in percent, which is null where the previous figure is 0 (a percentage of nothing is
undefined; ``undefined_percent`` counts them and every rendering says so).

The comparison is part of the hashed report: it follows from the archives and from the
previous report, both of which an auditor can have. Its ``previous`` block and the previous
figures it lists are all it reads of the previous report, so ``carbonspan verify --report``
re-derives it from the block itself (``from_block``), or checks it against the previous
report's file with ``--previous`` (docs/report-format.md, "Against the previous period").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from aggregator.read import Period
from schema.report import (
    Change,
    ComparedReport,
    Comparison,
    ComparisonTotal,
    DisclosureReport,
    ServiceChange,
    content_hash,
)
from schema.times import to_epoch

#: Period lengths that differ by more than this fraction get a note (a month against a week).
LENGTH_TOLERANCE = 0.01


class CompareError(ValueError):
    """PREVIOUS cannot be compared with: the message says what is wrong and what to do."""


@dataclass(frozen=True)
class Figures:
    energy_kwh: float = 0.0
    carbon_kgco2eq: float = 0.0
    requests: float = 0.0


@dataclass
class Previous:
    """What a comparison reads of the previous report."""

    block: ComparedReport
    total: dict[str, float]  # ComparisonTotal field -> the previous figure
    services: dict[str, Figures] = field(default_factory=dict)  # in the previous report's order


TOTALS = ("energy_kwh", "carbon_kgco2eq", "operational_kgco2eq", "embodied_kgco2eq", "requests")


def _totals(report: DisclosureReport) -> dict[str, float]:
    agg = report.aggregate
    return {"energy_kwh": agg.total_energy_kwh, "carbon_kgco2eq": agg.total_carbon_kgco2eq,
            "operational_kgco2eq": agg.carbon_breakdown.operational_kgco2eq,
            "embodied_kgco2eq": agg.carbon_breakdown.embodied_kgco2eq, "requests": float(agg.total_requests)}


def from_report(report: DisclosureReport) -> Previous:
    block = ComparedReport(content_hash=report.integrity.content_hash, organisation=report.organisation,
                           period=report.period.model_copy(), period_seconds=report.aggregate.period_seconds,
                           dropped_services=report.aggregate.dropped_services,
                           temporal_coverage=report.aggregate.temporal_coverage)
    services = {a.service_name: Figures(a.energy_kwh, a.carbon_kgco2eq, float(a.requests))
                for a in report.applications}
    return Previous(block, _totals(report), services)


def from_block(comparison: Comparison) -> Previous:
    """The previous report as a comparison block states it (for ``verify`` without the file):
    the services it lists, in its order, so the disappeared ones come out in the same order."""
    total = {name: getattr(comparison.total, name).previous for name in TOTALS}
    services = {s.service_name: Figures(s.energy_kwh.previous, s.carbon_kgco2eq.previous, s.requests.previous)
                for s in comparison.services if s.status != "appeared"}
    return Previous(comparison.previous.model_copy(deep=True), total, services)


def load_previous(path: Path, period: Period) -> Previous:
    """PREVIOUS.json checked as the module docstring says; CompareError otherwise."""
    what = f"--compare {path}"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CompareError(f"{what}: cannot read it ({exc.strerror or exc})") from None
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise CompareError(f"{what} is not JSON: give the JSON report a previous 'carbonspan aggregate "
                           "--out' wrote (not its HTML or CSV)") from None
    return check_previous(raw, period, what)


def check_previous(raw: Any, period: Period, what: str = "the previous report") -> Previous:
    """A previous report's JSON (already parsed) checked and read; CompareError otherwise."""

    if (type(raw) is not dict or "schema_version" not in raw or not isinstance(raw.get("integrity"), dict)
            or not isinstance(raw["integrity"].get("content_hash"), str)):
        raise CompareError(f"{what} is not a carbonspan disclosure report (no schema_version and "
                           "integrity.content_hash): give the JSON report a previous 'carbonspan aggregate "
                           "--out' wrote")
    try:
        report = DisclosureReport.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise CompareError(f"{what} is not a disclosure report this carbonspan can read ({where}: "
                           f"{first['msg']}); was it made by another version or edited? Re-run "
                           "'carbonspan aggregate' over the previous period's archives") from None
    stated, actual = raw["integrity"]["content_hash"], content_hash(raw)
    if stated != actual:
        raise CompareError(f"{what} was changed after it was written: it states {stated or '(none)'} but its "
                           f"content hashes to {actual}. Compare with the report as it was issued, or "
                           "re-run 'carbonspan aggregate' over the previous period's archives")
    prev = report.period
    if not prev.start or not prev.end:
        raise CompareError(f"{what} has an open period ({prev.start or '...'} to {prev.end or '...'}): "
                           "give a report made with --from and --to")
    start, end = to_epoch(prev.start), to_epoch(prev.end)
    now = f"this period ({_label(period.start)} to {_label(period.end)})"
    if start >= period.end:
        raise CompareError(f"{what} covers {prev.start} to {prev.end}, after {now}: the previous report must "
                           "cover an earlier period. To compare the other way round, aggregate the later period "
                           "with --compare the earlier period's report")
    if end > period.start:
        overlap = min(end, period.end) - max(start, period.start)
        raise CompareError(f"{what} covers {prev.start} to {prev.end}, which overlaps {now} by "
                           f"{overlap:,.0f} s ({overlap / 86400:,.2f} days): those windows would count in both. "
                           f"Give the report of a period that ends by {_label(period.start)} (its --to the day "
                           "before this --from)")
    return from_report(report)


def _label(t: float) -> str:
    return Period(t, t).labels()[0] or "..."


def change(previous: float, current: float) -> Change:
    diff = current - previous
    return Change(previous=previous, current=current, change=diff,
                  change_percent=diff / previous * 100.0 if previous != 0.0 else None)


def _sci(op: float, emb: float, requests: float) -> float | None:
    return (op + emb) * 1000.0 / requests if requests > 0 else None


def comparison(report: DisclosureReport, previous: Previous) -> Comparison:
    """``report`` (current, without its hash) against ``previous``."""
    now = {a.service_name: Figures(a.energy_kwh, a.carbon_kgco2eq, float(a.requests)) for a in report.applications}
    rows: list[ServiceChange] = []
    zero = Figures()
    for name, cur in now.items():
        old = previous.services.get(name)
        rows.append(_row(name, "both" if old is not None else "appeared", old or zero, cur))
    gone = [name for name in previous.services if name not in now]
    rows += [_row(name, "disappeared", previous.services[name], zero) for name in gone]
    cur_total = _totals(report)
    total = ComparisonTotal(**{k: change(previous.total[k], v) for k, v in cur_total.items()})
    p, c = previous.total, cur_total
    sci_prev = _sci(p["operational_kgco2eq"], p["embodied_kgco2eq"], p["requests"])
    sci_now = _sci(c["operational_kgco2eq"], c["embodied_kgco2eq"], c["requests"])
    if sci_prev is not None and sci_now is not None:
        total.sci_gco2e_per_request = change(sci_prev, sci_now)
    changes = [getattr(total, k) for k in ComparisonTotal.model_fields if getattr(total, k) is not None]
    changes += [ch for r in rows for ch in (r.energy_kwh, r.carbon_kgco2eq, r.requests)]
    block = previous.block
    gap = 0.0
    if report.period.start and block.period.end:
        gap = max(0.0, to_epoch(report.period.start) - to_epoch(block.period.end))
    return Comparison(
        previous=block.model_copy(deep=True), gap_seconds=gap, total=total, services=rows,
        appeared=[r.service_name for r in rows if r.status == "appeared"], disappeared=gone,
        undefined_percent=sum(1 for ch in changes if ch.change_percent is None),
        notes=_notes(report, block, gap),
    )


def _row(name: str, status: str, old: Figures, cur: Figures) -> ServiceChange:
    return ServiceChange(service_name=name, status=status,  # type: ignore[arg-type]
                         energy_kwh=change(old.energy_kwh, cur.energy_kwh),
                         carbon_kgco2eq=change(old.carbon_kgco2eq, cur.carbon_kgco2eq),
                         requests=change(old.requests, cur.requests))


def _notes(report: DisclosureReport, block: ComparedReport, gap: float) -> list[str]:
    """What a reader must weigh before reading a change as a trend (deterministic text)."""
    out = []
    now_s, prev_s = report.aggregate.period_seconds, block.period_seconds
    if prev_s > 0 and abs(now_s - prev_s) > LENGTH_TOLERANCE * prev_s:
        out.append(f"the periods differ in length ({prev_s / 86400:,.2f} days before, {now_s / 86400:,.2f} "
                   "days now): totals are not per day")
    if gap > 0:
        out.append(f"{gap / 86400:,.2f} days between the previous period's end ({block.period.end}) and this "
                   f"one's start ({report.period.start}) are in neither report")
    cov_now, cov_prev = report.aggregate.temporal_coverage, block.temporal_coverage
    if min(cov_now, cov_prev) < 1.0:
        out.append(f"the windows cover {cov_prev:.1%} of the previous period and {cov_now:.1%} of this one: "
                   "time an agent did not run is in neither figure, so a change may be one of coverage")
    if block.dropped_services or report.aggregate.dropped_services:
        out.append("a service cap dropped service entries in one report (aggregate.dropped_services): a "
                   "service shown as appeared or disappeared may only have been past the cap")
    if block.organisation != report.organisation:
        out.append(f"the organisations differ: {block.organisation or '(none)'} before, "
                   f"{report.organisation or '(none)'} now")
    return out
