"""Window figures: WindowPartial + context -> schema.WindowReport (pure; the daemon stamps it).

per_service_energy_kwh[s]     = sum over s's cells of energy
per_service_carbon_kgco2eq[s] = sum over s's cells of carbon / 1000
co2.operational_gco2          = sum over services of their carbon (application only)
host energy                   = watts x (end - start) seconds / 3.6e6   (declared watts x
                                count, or the measured watts a source publishes for the host;
                                the pipeline archives host-only windows, so every second the
                                agent runs is charged once)
energy_kwh                    = sum per_service_energy_kwh + host energy counted in totals
energy_without_carbon_kwh     = energy of regions[] rows unresolved / out_of_table + energy of
                                in-totals hosts whose region is not in the table (all at 0 g)
co2.embodied_gco2 (M)         = requests x embodied_carbon_per_request_gco2, where requests is
                                window.traces (distinct trace ids; embodied_per = "trace", the
                                default) or window.root_spans (embodied_per = "root_span")
co2.total.mid                 = operational + M + database_gco2 + messaging_gco2
                                (schema.totals.carbon_total: the terms are the contract's)
co2.total.low / high          = mid x 0.5 / mid x 2
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np

from agent.carbon.model import KIND_NAMES, KIND_REAL_TIME, CarbonModel, methodology
from agent.carbon.partial import UNKNOWN, WindowPartial
from agent.carbon.tagcodes import TAGS
from agent.config import MAX_HOST_WATTS, GreenConfig, HostConfig
from agent.score import ScoringContext, live_ok
from schema import (
    Co2,
    Co2Total,
    EndpointIoOps,
    GreenSummary,
    HostRow,
    RegionRow,
    WindowInfo,
    WindowReport,
    pick_window_tag,
    times,
)
from schema.totals import carbon_total

J_PER_KWH = 3.6e6


def build_report(
    partial: WindowPartial,
    ctx: ScoringContext,
    start_ns: int,
    end_ns: int,
    agent_id: str = "",
    counters: dict[str, int] | None = None,
) -> WindowReport:
    """The window report of ``partial`` over [start_ns, end_ns] (ns since the epoch, UTC).

    The caps (MAX_REGIONS, MAX_ENDPOINTS) are applied by folding ``partial`` into an empty
    window, so a single large batch reports the same as the same spans merged batch by batch.
    """
    partial = WindowPartial.empty().merge(partial)
    seconds = max(0, end_ns - start_ns) / 1e9
    hosts = [_host_row(h, ctx, seconds, start_ns, end_ns) for h in ctx.config.hosts]
    summary = _summary(partial, ctx, hosts)
    all_counters = dict(partial.counters)
    for k, v in (counters or {}).items():
        all_counters[k] = all_counters.get(k, 0) + int(v)
    # a host that names a measured source but has no usable reading fell back to declared watts
    fallback = sum(
        1
        for h, row in zip(ctx.config.hosts, hosts, strict=True)
        if h.measured and row.energy_model == "declared_watts"
    )
    if fallback:
        all_counters["host_measured_fallback"] = (
            all_counters.get("host_measured_fallback", 0) + fallback
        )
    return WindowReport(
        agent_id=agent_id,
        window=WindowInfo(
            start=times.format_ns(start_ns),
            end=times.format_ns(max(start_ns, end_ns)),
            spans=partial.spans,
            traces=int(partial.trace_ids().size),
            root_spans=partial.root_spans,
            io_ops=partial.io_ops,
        ),
        green_summary=summary,
        per_endpoint_io_ops=[
            EndpointIoOps(service=s, endpoint=e, io_ops=n)
            for (s, e), n in sorted(partial.endpoints.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        counters=all_counters,
        methodology={
            **methodology(
                ctx.model, ctx.config.use_hourly_profiles, ctx.config.per_operation_coefficients
            ),
            # what M counts and at what rate, so that M can be recomputed from the line
            "embodied_per": ctx.config.embodied_per,
            "embodied_carbon_per_request_gco2": repr(ctx.config.embodied_carbon_per_request_gco2),
        },
    )


def _summary(partial: WindowPartial, ctx: ScoringContext, hosts: list[HostRow]) -> GreenSummary:
    n, by = len(partial.services), partial.cell_svc
    energy = np.bincount(by, partial.energy, minlength=n)
    carbon = np.bincount(by, partial.carbon, minlength=n)
    ops = np.bincount(by, partial.ops, minlength=n)
    measured = np.bincount(by, partial.measured_ops, minlength=n)
    codes = np.zeros(n, dtype=np.int8)  # highest tag over the service's cells with I/O
    np.maximum.at(codes, by, np.where(partial.ops > 0, np.maximum(partial.etag, partial.ltag), 0))
    service_tags = [TAGS[c] for c in codes.tolist()]
    operational = float(carbon.sum())
    in_totals = [h for h in hosts if h.in_totals]
    database = sum(h.co2_gco2 for h in in_totals if h.kind == "database")
    messaging = sum(h.co2_gco2 for h in in_totals if h.kind == "messaging")
    embodied = embodied_requests(partial, ctx) * ctx.config.embodied_carbon_per_request_gco2
    mid = carbon_total(operational, embodied, database, messaging)
    energy_kwh = float(energy.sum()) + sum(h.energy_kwh for h in in_totals)
    window_tag = pick_window_tag(service_tags + [h.energy_model for h in in_totals])
    regions = _region_rows(partial, ctx)
    uncarbonised = sum(r.energy_kwh for r in regions if r.status != "resolved") + sum(
        h.energy_kwh for h in in_totals if ctx.model.region(h.region) is None
    )
    return GreenSummary(
        total_io_ops=partial.io_ops,
        co2=Co2(
            total=Co2Total(
                low=mid * 0.5,
                mid=mid,
                high=mid * 2.0,
                model=window_tag if energy_kwh > 0 else "",
                methodology="sci_operational_embodied" + ("_hosts" if in_totals else ""),
            ),
            operational_gco2=operational,
            embodied_gco2=embodied,
            database_gco2=database,
            messaging_gco2=messaging,
        ),
        regions=regions,
        energy_kwh=energy_kwh,
        energy_without_carbon_kwh=float(uncarbonised),
        energy_model=window_tag if energy_kwh > 0 else "",
        per_service_energy_kwh={s: float(e) for s, e in zip(partial.services, energy, strict=True)},
        per_service_carbon_kgco2eq={
            s: float(c) / 1000.0 for s, c in zip(partial.services, carbon, strict=True)
        },
        per_service_region={
            s: partial.regions[r] or UNKNOWN
            for s, r in zip(partial.services, partial.service_region, strict=True)
        },
        per_service_energy_model=dict(zip(partial.services, service_tags, strict=True)),
        per_service_measured_ratio={
            s: float(m) / float(o) if o else 0.0
            for s, m, o in zip(partial.services, measured, ops, strict=True)
        },
        per_service_requests={
            s: int(n) for s, n in zip(partial.services, partial.requests, strict=True)
        },
        hosts=hosts,
    )


def unscored_regions(cfg: GreenConfig, model: CarbonModel) -> list[str]:
    """One warning per configured region the intensity table lacks: its energy counts at 0 g
    (``energy_without_carbon_kwh`` on every window line that has some)."""
    out: list[str] = []
    where: list[tuple[str, str]] = []
    if cfg.default_region:
        where.append(("[green] default_region", cfg.default_region))
    where += [(f"[green.service_regions] {s}", r) for s, r in cfg.service_regions.items()]
    where += [(f"[[green.hosts]] {h.name} region", h.region) for h in cfg.hosts]
    for key, region in where:
        if model.region(region) is None:
            why = "no region" if region == UNKNOWN else f"{region!r} is not in the intensity table"
            out.append(
                f"{key}: {why}, so its energy is counted at 0 gCO2e (recorded per window as "
                "green_summary.energy_without_carbon_kwh); use a region of the table "
                "(docs/carbon-model.md) or add one"
            )
    return out


def embodied_requests(partial: WindowPartial, ctx: ScoringContext) -> int:
    """The requests embodied carbon is charged for: distinct trace ids (a trace whose spans reach
    two windows, or two agents, is charged in each) or root spans (once, where the root is)."""
    if ctx.config.embodied_per == "root_span":
        return partial.root_spans
    return int(partial.trace_ids().size)


def _region_rows(partial: WindowPartial, ctx: ScoringContext) -> list[RegionRow]:
    rows: list[RegionRow] = []
    n, by = len(partial.regions), partial.cell_reg
    energy = np.bincount(by, partial.energy, minlength=n)
    carbon = np.bincount(by, partial.carbon, minlength=n)
    ops = np.bincount(by, partial.ops, minlength=n)
    for j, name in enumerate(partial.regions):
        reg = ctx.model.region(name)
        kind = int(partial.region_kind[j])
        status = "unresolved" if name == UNKNOWN else ("resolved" if reg else "out_of_table")
        pue = ctx.model.pue_of(name) if reg else 1.0
        if reg is None:
            intensity = 0.0
        elif energy[j] > 0:  # the energy-weighted intensity the spans actually used
            intensity = float(carbon[j] / (energy[j] * pue))
        else:
            intensity = _intensity_now(name, ctx, kind == KIND_REAL_TIME)
        rows.append(
            RegionRow(
                region=name,
                status=status,
                grid_intensity_gco2_kwh=intensity,
                pue=pue,
                intensity_source=KIND_NAMES[kind] if reg else "annual",
                intensity_estimated=bool(partial.region_estimated[j]),
                io_ops=int(ops[j]),
                energy_kwh=float(energy[j]),
                co2_gco2=float(carbon[j]),
            )
        )
    return rows


def _intensity_now(name: str, ctx: ScoringContext, want_live: bool) -> float:
    live = ctx.signals.live_intensity.get(name)
    if want_live and live is not None and live_ok(live, ctx.now_s(), ctx.signals.max_signal_age_s):
        return float(live.gco2_kwh)
    return ctx.model.regions[name].annual_gco2_kwh


def _host_row(
    h: HostConfig, ctx: ScoringContext, seconds: float, start_ns: int, end_ns: int
) -> HostRow:
    """A host's energy (watts x window length) and carbon at its region's intensity."""
    watts, tag = h.watts * h.count, "declared_watts"
    published = ctx.signals.host_watts.get(h.name)
    if published is not None:
        w, t = published
        if isinstance(w, int | float) and math.isfinite(w) and 0 <= w <= MAX_HOST_WATTS:
            watts, tag = float(w), t
    energy = watts * seconds / J_PER_KWH
    known = ctx.model.region(h.region) is not None
    pue = ctx.model.pue_of(h.region) if known else 1.0
    return HostRow(
        name=h.name,
        kind=h.kind,
        region=h.region,
        in_totals=h.in_totals,
        watts=watts,
        energy_kwh=energy,
        co2_gco2=energy * _host_intensity(h.region, ctx, start_ns, end_ns) * pue if known else 0.0,
        pue=pue,
        energy_model=tag,
    )


def _host_intensity(region: str, ctx: ScoringContext, start_ns: int, end_ns: int) -> float:
    """Live if fresh, else the profile at the window's midpoint hour, else the annual value."""
    live = ctx.signals.live_intensity.get(region)
    if live is not None and live_ok(live, ctx.now_s(), ctx.signals.max_signal_age_s):
        return float(live.gco2_kwh)
    if start_ns <= 0:
        return ctx.model.regions[region].annual_gco2_kwh
    mid = datetime.fromtimestamp((start_ns + max(start_ns, end_ns)) / 2e9, UTC)
    return ctx.model.intensity_at(region, ctx.config.use_hourly_profiles, mid.month, mid.hour)
