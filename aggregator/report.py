"""AggregateState -> DisclosureReport, its canonical bytes and its integrity hash.

Determinism: every list in the report has a defined order (applications by carbon then
name, regions by name, tags sorted) and the bytes are ``schema.canonical_json``, so the same
archives give the same bytes. The content hash is SHA-256 over those canonical bytes with
``integrity.content_hash`` set to ``""``; anyone holding the archives can recompute it.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel

from aggregator.caveats import temporal, warnings, without_carbon
from aggregator.compare import Previous, comparison
from aggregator.fold.rules import UNATTRIBUTED
from aggregator.fold.state import AggregateState
from aggregator.fold.sums import BackfillSums, ServiceAcc
from aggregator.market import MarketFactors
from aggregator.read import Period
from aggregator.scope2 import methodology_block, scope2
from aggregator.series import build_series
from schema.canonical import MAX_INT, canonical_json
from schema.constants import ENERGY_PER_IO_OP_KWH, SCI_FORMULA
from schema.report import (
    SCI_HIGH_FACTOR,
    SCI_LOW_FACTOR,
    Aggregate,
    Application,
    BackfillShare,
    BackfillTotal,
    CarbonBreakdown,
    ChainSpan,
    DisclosureReport,
    FileInput,
    Inputs,
    Integrity,
    Methodology,
    PerRequest,
    RegionTotal,
    ReportWarning,
    content_hash,
)
from schema.report import Period as PeriodModel
from schema.tags import pick_window_tag
from schema.times import period_label
from schema.totals import SCI_TERMS, TOTAL_TERMS, sum_of, terms_of, total_of
from schema.version import __version__

__all__ = ["build_report", "content_hash", "report_bytes"]


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0.0 else 0.0


def _backfill_share(state: AggregateState, name: str, acc: ServiceAcc) -> BackfillShare | None:
    """The service's backfill term; None (left out) when no backfilled window is in the period."""
    if not state.backfill.windows:
        return None
    b = state.backfill_services.get(name) or BackfillSums()
    return BackfillShare(windows=b.windows, energy_kwh=b.energy, carbon_kgco2eq=b.carbon, requests=b.requests,
                         energy_share=_share(b.energy, acc.energy), carbon_share=_share(b.carbon, acc.carbon),
                         requests_share=_share(b.requests, acc.requests))


def _backfill_total(state: AggregateState) -> BackfillTotal | None:
    b = state.backfill
    if not b.windows:
        return None
    carbon = total_of(b, "_kg")
    total_kg = total_of(state, "_kg")
    return BackfillTotal(
        windows=b.windows, windows_share=_share(b.windows, state.windows),
        energy_kwh=b.energy, energy_share=_share(b.energy, state.energy),
        operational_kgco2eq=b.operational_kg, operational_share=_share(b.operational_kg, state.operational_kg),
        carbon_kgco2eq=carbon, carbon_share=_share(carbon, total_kg),
        requests=b.requests, requests_share=_share(b.requests, state.requests),
    )


def _applications(state: AggregateState, total_kg: float) -> list[Application]:
    rows: list[tuple[str, ServiceAcc]] = list(state.services.items())
    if state.unattributed.windows:
        rows.append((UNATTRIBUTED, state.unattributed))
    all_requests = sum(acc.requests for _, acc in rows)
    apps = []
    for name, acc in rows:
        embodied = state.embodied_kg * acc.requests / all_requests if all_requests else 0.0
        apps.append(Application(
            service_name=name,
            region=acc.region,
            energy_kwh=acc.energy,
            carbon_kgco2eq=acc.carbon,
            requests=acc.requests,
            windows=acc.windows,
            share_of_total=_share(acc.carbon, total_kg),
            energy_model=pick_window_tag(acc.models),
            embodied_kgco2eq=embodied,
            operational_gco2e_per_request=acc.carbon * 1000.0 / acc.requests if acc.requests else None,
            sci_gco2e_per_request=(acc.carbon + embodied) * 1000.0 / acc.requests if acc.requests else None,
            measured_energy_kwh=acc.measured,
            measured_share=min(1.0, acc.measured / acc.energy) if acc.energy > 0.0 else None,
            backfill=_backfill_share(state, name, acc),
        ))
    apps.sort(key=lambda a: (-a.carbon_kgco2eq, -a.energy_kwh, a.service_name))
    return apps


def _per_request(state: AggregateState) -> PerRequest | None:
    """The period's carbon per request with its SCI band; None (null) without requests."""
    if state.requests <= 0:
        return None
    op = state.operational_kg * 1000.0 / state.requests
    sci = sum_of(state, "_kg", SCI_TERMS) * 1000.0 / state.requests  # (E x I + M) / R
    return PerRequest(requests=state.requests, operational_gco2e=op, operational_low_gco2e=op * SCI_LOW_FACTOR,
                      operational_high_gco2e=op * SCI_HIGH_FACTOR, sci_gco2e=sci,
                      sci_low_gco2e=sci * SCI_LOW_FACTOR, sci_high_gco2e=sci * SCI_HIGH_FACTOR)


def _methodology(state: AggregateState, market: MarketFactors | None) -> Methodology:
    meta = state.methodology

    def values_of(*words: str) -> list[str]:
        return sorted({v for k, vs in meta.items() if any(w in k.lower() for w in words) for v in vs})

    return Methodology(
        intensity_sources=sorted({r.source for r in state.regions.values()}),
        vintages=values_of("vintage", "intensity_table", "intensity_profiles"),
        pue={name: r.pue for name, r in sorted(state.regions.items())},
        coefficients=values_of("coefficient", "energy_per_io_op"),
        energy_per_io_op_kwh=ENERGY_PER_IO_OP_KWH,
        energy_source_models=sorted(state.models),
        calibration_applied=state.calibration_applied,
        sci_formula=SCI_FORMULA,
        window_methodology={k: list(v) for k, v in sorted(meta.items())},
        market_factors=methodology_block(market) if market is not None else None,
    )


def _aggregate(state: AggregateState, period: Period, apps: list[Application],
               market: MarketFactors | None) -> Aggregate:
    breakdown = CarbonBreakdown(**{f"{term}_kgco2eq": kg for term, kg in
                                   zip(TOTAL_TERMS, terms_of(state, "_kg"), strict=True)})
    total_kg = total_of(state, "_kg")
    models = {
        name: sorted(acc.models) for name, acc in sorted(state.services.items()) if acc.models
    }
    return Aggregate(
        windows=state.windows,
        total_requests=state.requests,
        total_energy_kwh=state.energy,
        host_energy_kwh=state.host_energy,
        total_carbon_kgco2eq=total_kg,
        carbon_low_kgco2eq=total_kg * SCI_LOW_FACTOR,
        carbon_high_kgco2eq=total_kg * SCI_HIGH_FACTOR,
        carbon_breakdown=breakdown,
        per_request=_per_request(state),
        period_coverage=_share(state.runtime_windows, state.runtime_windows + state.fallback_windows),
        runtime_windows=state.runtime_windows,
        fallback_windows=state.fallback_windows,
        unattributed_windows=state.unattributed.windows,
        dropped_services=state.dropped_services,
        dropped_energy_kwh=state.dropped_energy,
        dropped_carbon_kgco2eq=state.dropped_carbon,
        sanitised_values=state.tally.sanitised,
        missing_values=state.tally.missing,
        host_named_services=state.host_named_services,
        one_sided_windows=state.one_sided_windows,
        idle_windows=state.idle_windows,
        rejected_energy_models=state.rejected_models,
        dropped_regions=state.dropped_regions,
        per_service_energy_models=models,
        scope2=scope2(state, market) if market is not None else None,
        traces_counted=state.traces_counted,
        root_spans_counted=state.root_spans,
        series=build_series(state, period, apps),
        backfill=_backfill_total(state),
        **temporal(state, period),
        **without_carbon(state, apps),
    )


def _inputs(state: AggregateState) -> Inputs:
    return Inputs(
        files=[FileInput(**vars(f)) for f in state.files],
        lines=state.lines,
        windows_read=state.windows + state.windows_outside,
        windows_in_period=state.windows,
        windows_outside_period=state.windows_outside,
        malformed_lines=state.malformed,
        malformed_samples=list(state.malformed_samples),
        runtime_windows=state.runtime_windows,
        fallback_windows=state.fallback_windows,
        fallback_files=list(state.fallback_files),
        one_sided_files=[f"{f.agent}/{f.file}" for f in state.files if f.one_sided_windows],
    )


def _integrity(state: AggregateState) -> Integrity:
    chains = [
        ChainSpan(agent=agent, first_hash=first, last_hash=last, windows=n)
        for agent, (first, last, n) in state.chains.items()
    ]
    firsts = [c.first_hash for c in chains if c.first_hash]
    lasts = [c.last_hash for c in chains if c.last_hash]
    return Integrity(
        first_archive_hash=firsts[0] if firsts else "",
        last_archive_hash=lasts[-1] if lasts else "",
        chains=chains,
    )


def build_report(state: AggregateState, period: Period, organisation: str = "",
                 market: MarketFactors | None = None, previous: Previous | None = None) -> DisclosureReport:
    """The disclosure report of ``state`` with its content hash filled in; with ``market``
    (``--market-factors``) it carries the market-based Scope 2 figure and the factors; with
    ``previous`` (``--compare``) the comparison with that report (inside the hash)."""
    start, end = period.labels()
    total_kg = total_of(state, "_kg")
    apps = _applications(state, total_kg)
    aggregate = _aggregate(state, period, apps, market)
    methodology = _methodology(state, market)
    report = DisclosureReport(
        produced_by=f"carbonspan {__version__}",
        organisation=organisation,
        period=PeriodModel(start=start, end=end, first_window=period_label(state.first_start),
                           last_window=period_label(state.last_start)),
        methodology=methodology,
        aggregate=aggregate,
        applications=apps,
        regions=[
            RegionTotal(region=name, status=r.status, grid_intensity_gco2_kwh=r.intensity,
                        pue=r.pue, intensity_source=r.source, io_ops=r.io_ops,
                        energy_kwh=r.energy, carbon_kgco2eq=r.carbon)
            for name, r in sorted(state.regions.items())
        ],
        inputs=_inputs(state),
        warnings=warnings(aggregate, methodology),
        integrity=_integrity(state),
    )
    saturated: list[str] = []
    _saturate(report, "", saturated)
    if saturated:
        report.warnings.append(ReportWarning(code="count_saturated", message=(
            f"{len(saturated)} count(s) of this report exceed {MAX_INT:,} (2^64 - 1, the largest integer "
            f"its JSON holds) and are written as {MAX_INT:,}: {', '.join(saturated[:8])}"
            f"{', ...' if len(saturated) > 8 else ''}; the sanitiser passes at most 2^53 per value, so "
            "only an archive of forged or broken lines sums this far: check the agents that wrote it")))
    if previous is not None:
        report.comparison = comparison(report, previous)
    report.integrity.content_hash = content_hash(report.model_dump(mode="json"))
    return report


def _saturate(node: BaseModel, path: str, out: list[str]) -> None:
    """Write every integer of the report past :data:`~schema.canonical.MAX_INT` (a sum of
    archive counts: requests, I/O operations, traces) as ``MAX_INT``, its path added to ``out``,
    so that a forged archive cannot make the report unwritable (the fold's sums stay exact)."""
    for name in type(node).model_fields:
        value = getattr(node, name)
        where = f"{path}.{name}" if path else name
        if type(value) is int:
            if value > MAX_INT:
                setattr(node, name, MAX_INT)
                out.append(where)
        elif isinstance(value, BaseModel):
            _saturate(value, where, out)
        elif type(value) is list and value:  # a list holds one type (the model's)
            kind = type(value[0])
            if kind is int:
                if max(value) > MAX_INT:  # in C: a series' requests per bucket are many
                    for i, item in enumerate(value):
                        if item > MAX_INT:
                            value[i] = MAX_INT
                            out.append(f"{where}[{i}]")
            elif issubclass(kind, BaseModel):
                for i, item in enumerate(value):
                    _saturate(item, f"{where}[{i}]", out)


def report_bytes(report: DisclosureReport) -> bytes:
    """The report file's bytes: canonical JSON and a final newline."""
    return canonical_json(report.model_dump(mode="json")) + b"\n"


def load_report(data: bytes) -> dict[str, Any]:
    """A report file as a dict (for verification: no model needed to recompute the hash)."""
    obj = orjson.loads(data)
    if type(obj) is not dict:
        raise ValueError("the report is not a JSON object")
    return obj
