"""The disclosure report: the aggregator's output and the auditor's input.

One report covers one organisation and one period. Every figure is derived from archive
window lines by ``aggregator.fold`` and ``aggregator.report``; docs/report-format.md explains
each field, the two attribution paths, the sanitising rules, the caps and the integrity hash.
The model is versioned by ``schema_version``; new fields are additive with defaults.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

#: Bumped whenever the report's fields or their derivation change, so a report says which rules
#: made it and ``verify`` can tell "made by other rules" from "does not follow from the
#: archives" (``tests/schema/test_report_version.py`` pins each version's JSON schema).
#: 1.0: the first; 1.1: comparison, per-service SCI and measured share, produced_by;
#: 1.2: aggregate.series (the period over time);
#: 1.3: the share from backfilled chains (aggregate.backfill, applications[].backfill);
#: 1.4: the period's per-request figures with their SCI band (aggregate.per_request) and the
#: files with one-sided windows (inputs.one_sided_files, inputs.files[].one_sided_windows);
#: 1.5: a count past 2^64 - 1 written as 2^64 - 1 with the warning count_saturated.
REPORT_SCHEMA_VERSION = "1.5"
#: The SCI uncertainty band of a carbon figure (the window line's co2.total low / high): x0.5 .. x2.
SCI_LOW_FACTOR = 0.5
SCI_HIGH_FACTOR = 2.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _OmitNone(_Model):
    """A model whose optional blocks (listed in ``_omit_when_none``) are left out of the dump
    while they are None: a report made without them has the bytes, and so the content hash,
    it had before the blocks existed, and reports issued earlier still re-derive."""

    _omit_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _drop_absent_blocks(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in self._omit_when_none:
            if key in data and data[key] is None:
                del data[key]
        return data


class Period(_Model):
    start: str = Field(description="RFC 3339 UTC, inclusive: windows starting at or after it")
    end: str = Field(description="RFC 3339 UTC, exclusive: windows starting before it")
    first_window: str = Field("", description="RFC 3339 UTC start of the earliest window folded (empty with none)")
    last_window: str = Field("", description="RFC 3339 UTC start of the latest window folded (empty with none)")


class MarketFactors(_Model):
    """The contractual emission factors the market-based Scope 2 figure was made with, as given
    to ``carbonspan aggregate --market-factors`` (``verify`` re-derives with these)."""

    source: str = Field(description="where the factors come from (contracts, supplier rates, residual mix)")
    regions: dict[str, float] = Field(
        description="region (lowercase) -> gCO2e per kWh of the facility's electricity, every factor given"
    )
    formula: str = Field("", description="how the market-based figure is computed from them")


class Methodology(_OmitNone):
    """What the figures rest on, gathered from the window lines and the aggregator's constants."""

    _omit_when_none: ClassVar[tuple[str, ...]] = ("market_factors",)

    intensity_sources: list[str] = Field(
        default_factory=list, description="intensity kinds seen in regions[]: annual, hourly, ..."
    )
    vintages: list[str] = Field(
        default_factory=list, description="values of window methodology keys naming a vintage, intensity table or profiles"
    )
    pue: dict[str, float] = Field(default_factory=dict, description="region -> PUE (first seen)")
    coefficients: list[str] = Field(
        default_factory=list, description="values of window methodology keys naming coefficients or the energy per I/O op"
    )
    energy_per_io_op_kwh: float = Field(description="I/O proxy energy per operation (fallback path)")
    energy_source_models: list[str] = Field(
        default_factory=list, description="energy-model tags seen (bare; +cal merged)"
    )
    calibration_applied: bool = False
    sci_formula: str = ""
    window_methodology: dict[str, list[str]] = Field(
        default_factory=dict, description="window methodology key -> distinct values (first seen)"
    )
    market_factors: MarketFactors | None = Field(
        None, description="market-based Scope 2 factors; absent when none were given"
    )


class CarbonBreakdown(_Model):
    operational_kgco2eq: float = 0.0
    embodied_kgco2eq: float = 0.0
    database_kgco2eq: float = 0.0
    messaging_kgco2eq: float = 0.0


class Scope2Region(_Model):
    """One region's purchased electricity, location-based and market-based (hosts included)."""

    region: str
    status: str = Field(
        "resolved",
        description="the region rows' status (resolved, out_of_table: PUE 1.0, unresolved); host_only: "
        "only hosts, PUE as their rows recorded it; host_only_no_pue: only hosts from lines that did not "
        "record a PUE, so the region stays location-based even with a factor",
    )
    market_basis: Literal["contractual", "location_fallback"] = Field(
        description="contractual: a factor was given for the region; location_fallback: none, the grid average stands"
    )
    market_factor_gco2_kwh: float | None = Field(None, description="the factor applied (null on location_fallback)")
    pue: float = Field(1.0, description="the region's PUE (its region rows; else its host rows'; 1.0 when none known)")
    energy_kwh: float = Field(0.0, description="application energy of the region's rows")
    host_energy_kwh: float = Field(0.0, description="energy of database/broker hosts in totals in the region")
    facility_energy_kwh: float = Field(0.0, description="(energy_kwh + host_energy_kwh) x pue")
    location_intensity_gco2_kwh: float = Field(
        0.0, description="location_based x 1000 / facility energy: the grid intensity the location figure used"
    )
    location_based_kgco2eq: float = Field(0.0, description="region rows' carbon + host carbon")
    market_based_kgco2eq: float = Field(
        0.0, description="facility_energy_kwh x market factor / 1000, or location_based on location_fallback"
    )


class Scope2(_Model):
    """Scope 2 (purchased electricity) reported both ways, GHG Protocol Scope 2 Guidance (2015)."""

    location_based_kgco2eq: float = Field(0.0, description="operational + database + messaging carbon")
    market_based_kgco2eq: float = Field(
        0.0, description="location_based - sum of contractual regions' location_based + their market_based"
    )
    regions: list[Scope2Region] = Field(default_factory=list, description="sorted by region")
    unmatched_factor_regions: list[str] = Field(
        default_factory=list, description="regions with a factor but no energy in the period (typos?)"
    )
    dropped_host_rows: int = Field(0, description="host rows past the region cap: kept location-based")


class AgentCoverage(_Model):
    """How much of the period one agent's windows cover."""

    agent: str
    temporal_coverage: float = Field(0.0, description="covered_seconds / aggregate.period_seconds")
    covered_seconds: float = Field(0.0, description="seconds of the period inside this agent's windows")
    runs: int = Field(0, description="unbroken runs of windows (gaps under 1 s do not break a run)")


class CoverageGap(_Model):
    """A stretch of the period no window of the agent covers (1 s or longer)."""

    agent: str
    start: str = Field(description="RFC 3339 UTC")
    end: str = Field(description="RFC 3339 UTC")
    seconds: float = 0.0


class ReportWarning(_Model):
    """Something a reader must know before trusting the figures."""

    code: Literal["no_data", "partial_period", "energy_without_carbon", "traces_exceed_root_spans",
                  "one_sided_windows", "count_saturated"]
    message: str


class SeriesBucket(_Model):
    """One time bucket: the windows that start in it (window.start decides; never split)."""

    start: str = Field(description="RFC 3339 UTC, inclusive (the period's start for a first bucket it cuts)")
    end: str = Field(description="RFC 3339 UTC, exclusive (the period's end for a last bucket it cuts)")
    windows: int = 0
    requests: int = 0
    energy_kwh: float = Field(0.0, description="application + host energy, as total_energy_kwh")
    host_energy_kwh: float = 0.0
    carbon_kgco2eq: float = Field(0.0, description="operational + embodied + host carbon, as total_carbon_kgco2eq")
    operational_kgco2eq: float = 0.0
    embodied_kgco2eq: float = 0.0
    host_carbon_kgco2eq: float = Field(0.0, description="database + messaging host carbon")
    dropped_energy_kwh: float = Field(0.0, description="entries of services past the service cap")
    dropped_carbon_kgco2eq: float = 0.0


class SeriesService(_Model):
    """One service over time: one value per bucket, aligned with ``series.buckets``."""

    service_name: str
    energy_kwh: list[float] = Field(default_factory=list)
    carbon_kgco2eq: list[float] = Field(default_factory=list, description="operational, as applications[]")
    requests: list[int] = Field(default_factory=list)


class Series(_Model):
    """The period over time: hourly when it is at most two days, else daily (UTC)."""

    bucket: str = Field("day", description='"hour", "day", or "N days" for periods past 400 days')
    bucket_seconds: int = 86400
    buckets: list[SeriesBucket] = Field(default_factory=list, description="every bucket of the period, in time order")
    services: list[SeriesService] = Field(
        default_factory=list, description="every applications[] entry, in its order"
    )
class BackfillTotal(_Model):
    """The part of the totals that came from backfilled chains (``carbonspan backfill``): the
    same additions the totals got from lines marked ``methodology.backfill = "true"``."""

    windows: int = Field(0, description="backfilled windows in the period")
    windows_share: float = Field(0.0, description="windows / aggregate.windows (0 when that is 0)")
    energy_kwh: float = Field(0.0, description="application + host energy of those windows")
    energy_share: float = Field(0.0, description="energy_kwh / aggregate.total_energy_kwh (0 when that is 0)")
    operational_kgco2eq: float = Field(0.0, description="their operational carbon")
    operational_share: float = Field(
        0.0, description="operational_kgco2eq / carbon_breakdown.operational_kgco2eq (0 when that is 0)"
    )
    carbon_kgco2eq: float = Field(0.0, description="their operational + embodied + database + messaging carbon")
    carbon_share: float = Field(0.0, description="carbon_kgco2eq / aggregate.total_carbon_kgco2eq (0 when that is 0)")
    requests: int = Field(0, description="their requests, counted as total_requests counts them")
    requests_share: float = Field(0.0, description="requests / aggregate.total_requests (0 when that is 0)")


class BackfillShare(_Model):
    """The part of one service's figures that came from backfilled chains."""

    windows: int = Field(0, description="backfilled windows that credited the service")
    energy_kwh: float = 0.0
    carbon_kgco2eq: float = Field(0.0, description="operational, as the service's carbon_kgco2eq")
    requests: int = 0
    energy_share: float = Field(0.0, description="energy_kwh / the service's energy_kwh (0 when that is 0)")
    carbon_share: float = Field(0.0, description="carbon_kgco2eq / the service's carbon_kgco2eq (0 when that is 0)")
    requests_share: float = Field(0.0, description="requests / the service's requests (0 when that is 0)")


class PerRequest(_Model):
    """The whole period's carbon per request with its SCI band (x0.5 .. x2, as every carbon
    total): the figures of the HTML table's total row."""

    requests: int = Field(0, description="aggregate.total_requests (more than 0: the block is null without requests)")
    operational_gco2e: float = Field(0.0, description="carbon_breakdown.operational_kgco2eq x 1000 / requests")
    operational_low_gco2e: float = Field(0.0, description="operational_gco2e x 0.5")
    operational_high_gco2e: float = Field(0.0, description="operational_gco2e x 2")
    sci_gco2e: float = Field(
        0.0, description="SCI (O + M) / R: (operational_kgco2eq + embodied_kgco2eq) x 1000 / requests"
    )
    sci_low_gco2e: float = Field(0.0, description="sci_gco2e x 0.5")
    sci_high_gco2e: float = Field(0.0, description="sci_gco2e x 2")


class Aggregate(_OmitNone):
    _omit_when_none: ClassVar[tuple[str, ...]] = ("scope2", "backfill")

    windows: int = 0
    total_requests: int = 0
    total_energy_kwh: float = 0.0
    host_energy_kwh: float = Field(0.0, description="database/broker host energy counted in totals")
    total_carbon_kgco2eq: float = 0.0
    carbon_low_kgco2eq: float = Field(0.0, description="SCI band: total_carbon_kgco2eq x 0.5")
    carbon_high_kgco2eq: float = Field(0.0, description="SCI band: total_carbon_kgco2eq x 2")
    carbon_breakdown: CarbonBreakdown = Field(default_factory=CarbonBreakdown)
    per_request: PerRequest | None = Field(
        None, description="the period's carbon per request with its SCI band; null without requests"
    )
    period_coverage: float = Field(
        0.0, description="attributed by the agent: runtime / (runtime + fallback) windows (not time)"
    )
    temporal_coverage: float = Field(
        0.0, description="window seconds inside the period / period seconds, averaged over agents"
    )
    period_seconds: float = Field(
        0.0, description="the period's length (with an open bound: the windows' own extent)"
    )
    temporal_coverage_by_agent: list[AgentCoverage] = Field(default_factory=list, description="by agent name")
    largest_gaps: list[CoverageGap] = Field(
        default_factory=list, description="the 10 longest gaps of any agent, longest first"
    )
    coverage_gaps_joined: int = Field(0, description="gaps lost to the 4096-runs-per-agent cap")
    windows_without_end: int = Field(0, description="windows without a readable window.end (not in coverage)")
    energy_without_carbon_kwh: float = Field(
        0.0, description="energy counted at 0 g: its region is unresolved or out of the intensity table"
    )
    energy_without_carbon_regions: list[str] = Field(
        default_factory=list, description="the regions of that energy (sorted)"
    )
    energy_without_carbon_services: list[str] = Field(
        default_factory=list, description="services whose region is one of them (sorted)"
    )
    traces_counted: int = Field(0, description="sum of window.traces over windows recording root_spans")
    root_spans_counted: int = Field(0, description="sum of window.root_spans over the same windows")
    runtime_windows: int = 0
    fallback_windows: int = 0
    unattributed_windows: int = 0
    dropped_services: int = Field(0, description="service entries dropped by the service cap")
    dropped_energy_kwh: float = 0.0
    dropped_carbon_kgco2eq: float = 0.0
    sanitised_values: int = Field(0, description="NaN, +-Inf, negative or out-of-range -> 0")
    missing_values: int = Field(0, description="non-numeric values read as missing")
    host_named_services: int = Field(
        0, description="per-service entries named like a host of their window: services all the same "
        "(hosts and services are separate namespaces; host rows are the only host terms)"
    )
    one_sided_windows: int = Field(
        0, description="windows with only one of the two per-service maps non-empty: folded by the proxy path"
    )
    idle_windows: int = Field(
        0, description="windows with nothing to attribute (host-only windows: no spans, no I/O, no application "
        "energy or carbon): neither runtime nor fallback; their host energy is in the totals"
    )
    rejected_energy_models: int = Field(0, description="tags over 64 bytes or past the tag cap")
    dropped_regions: int = Field(0, description="region rows past the region cap")
    per_service_energy_models: dict[str, list[str]] = Field(default_factory=dict)
    scope2: Scope2 | None = Field(
        None, description="location- and market-based Scope 2; absent without --market-factors"
    )
    series: Series = Field(default_factory=Series, description="the period over time (docs: Over time)")
    backfill: BackfillTotal | None = Field(
        None, description="the part of the totals from backfilled chains; absent when no backfilled window is in the period"
    )


class Application(_OmitNone):
    _omit_when_none: ClassVar[tuple[str, ...]] = ("backfill",)

    service_name: str
    region: str = "unknown"
    energy_kwh: float = 0.0
    carbon_kgco2eq: float = 0.0
    requests: int = 0
    windows: int = 0
    share_of_total: float = Field(0.0, description="carbon_kgco2eq / aggregate.total_carbon_kgco2eq")
    energy_model: str = Field("", description="highest-fidelity tag seen for the service")
    embodied_kgco2eq: float = Field(
        0.0, description="the period's embodied carbon allocated by requests: embodied x requests / sum of requests"
    )
    operational_gco2e_per_request: float | None = Field(
        None, description="carbon_kgco2eq x 1000 / requests; null without requests"
    )
    sci_gco2e_per_request: float | None = Field(
        None, description="SCI (O + M) / R: (carbon_kgco2eq + embodied_kgco2eq) x 1000 / requests; null without requests"
    )
    measured_energy_kwh: float = Field(
        0.0, description="sum over windows of the service's energy x its per_service_measured_ratio"
    )
    measured_share: float | None = Field(
        None, description="measured_energy_kwh / energy_kwh (the rest is modelled); null without energy"
    )
    backfill: BackfillShare | None = Field(
        None, description="the part of these figures from backfilled chains; absent when no backfilled window is in the period"
    )


class RegionTotal(_Model):
    region: str
    status: str = "resolved"
    grid_intensity_gco2_kwh: float = 0.0
    pue: float = 1.0
    intensity_source: str = "annual"
    io_ops: int = 0
    energy_kwh: float = 0.0
    carbon_kgco2eq: float = 0.0


class FileInput(_Model):
    agent: str
    file: str
    lines: int = 0
    windows_in_period: int = 0
    malformed_lines: int = 0
    one_sided_windows: int = Field(0, description="windows of this file counted in aggregate.one_sided_windows")
    first_hash: str = Field("", description="hash of the file's first line: with last_hash, the file's identity by content")
    last_hash: str = Field("", description="hash of the file's last line (a rotation that renames or gzips the file keeps both)")


class Inputs(_Model):
    files: list[FileInput] = Field(default_factory=list)
    lines: int = 0
    windows_read: int = 0
    windows_in_period: int = 0
    windows_outside_period: int = 0
    malformed_lines: int = 0
    malformed_samples: list[str] = Field(
        default_factory=list, description="first malformed lines as 'agent/file:line: reason'"
    )
    runtime_windows: int = 0
    fallback_windows: int = 0
    fallback_files: list[str] = Field(
        default_factory=list, description="archive files with at least one fallback window"
    )
    one_sided_files: list[str] = Field(
        default_factory=list, description="archive files with at least one one-sided window (files[].one_sided_windows: how many)"
    )


class ChainSpan(_Model):
    agent: str
    first_hash: str = ""
    last_hash: str = ""
    windows: int = 0


class Integrity(_Model):
    algorithm: str = "sha256 over canonical JSON of the report with integrity.content_hash empty"
    content_hash: str = ""
    first_archive_hash: str = ""
    last_archive_hash: str = ""
    chains: list[ChainSpan] = Field(default_factory=list)


class Change(_Model):
    """One figure in the previous period and now. ``change_percent`` is ``change / previous x
    100``; it is null when ``previous`` is 0, where a percentage is undefined (never a silent 0)."""

    previous: float = 0.0
    current: float = 0.0
    change: float = Field(0.0, description="current - previous")
    change_percent: float | None = Field(None, description="change / previous x 100; null when previous is 0")


class ServiceChange(_Model):
    """One service against the previous period (``_unattributed`` included)."""

    service_name: str
    status: Literal["both", "appeared", "disappeared"] = Field(
        description="both: in both reports; appeared: only now; disappeared: only in the previous one"
    )
    energy_kwh: Change = Field(default_factory=Change)
    carbon_kgco2eq: Change = Field(default_factory=Change, description="operational carbon, as applications[]")
    requests: Change = Field(default_factory=Change)


class ComparedReport(_Model):
    """The previous report a comparison was made with: everything the comparison reads of it
    besides its figures, so ``verify`` can re-derive the comparison from this block alone."""

    content_hash: str = Field(description="the previous report's integrity.content_hash (checked against its body)")
    organisation: str = ""
    period: Period
    period_seconds: float = Field(0.0, description="the previous report's aggregate.period_seconds")
    dropped_services: int = Field(0, description="the previous report's aggregate.dropped_services")
    temporal_coverage: float = Field(0.0, description="the previous report's aggregate.temporal_coverage")


class ComparisonTotal(_Model):
    energy_kwh: Change = Field(default_factory=Change, description="aggregate.total_energy_kwh")
    carbon_kgco2eq: Change = Field(default_factory=Change, description="aggregate.total_carbon_kgco2eq")
    operational_kgco2eq: Change = Field(default_factory=Change)
    embodied_kgco2eq: Change = Field(default_factory=Change)
    requests: Change = Field(default_factory=Change, description="aggregate.total_requests")
    sci_gco2e_per_request: Change | None = Field(
        None, description="(operational + embodied) x 1000 / requests; null when either period has no requests"
    )


class Comparison(_Model):
    """This period against a previous report (``aggregate --compare PREVIOUS.json``)."""

    previous: ComparedReport
    gap_seconds: float = Field(0.0, description="seconds from the previous period's end to this one's start")
    total: ComparisonTotal = Field(default_factory=ComparisonTotal)
    services: list[ServiceChange] = Field(
        default_factory=list, description="this report's applications in order, then the disappeared ones"
    )
    appeared: list[str] = Field(default_factory=list, description="services only in this period")
    disappeared: list[str] = Field(default_factory=list, description="services only in the previous period")
    undefined_percent: int = Field(0, description="changes whose percentage is null because the previous value is 0")
    notes: list[str] = Field(default_factory=list, description="what limits the comparison (period lengths, gap, caps)")


class DisclosureReport(_OmitNone):
    """A periodic carbon disclosure per application, re-derivable from the archives."""

    _omit_when_none: ClassVar[tuple[str, ...]] = ("comparison",)

    schema_version: str = REPORT_SCHEMA_VERSION
    produced_by: str = Field("", description="the tool and version that derived it, e.g. 'carbonspan 0.1.0'")
    organisation: str = ""
    period: Period
    methodology: Methodology
    aggregate: Aggregate = Field(default_factory=Aggregate)
    applications: list[Application] = Field(default_factory=list)
    regions: list[RegionTotal] = Field(default_factory=list)
    inputs: Inputs = Field(default_factory=Inputs)
    warnings: list[ReportWarning] = Field(default_factory=list, description="in the order of ReportWarning.code")
    comparison: Comparison | None = Field(
        None, description="against a previous report (--compare); absent without it"
    )
    integrity: Integrity = Field(default_factory=Integrity)


def content_hash(report: dict[str, Any]) -> str:
    """The report's content hash: SHA-256 of its canonical JSON with ``integrity.content_hash``
    empty (docs/report-format.md, Integrity). Here, in the contract, because every reader of a
    report (aggregate --compare, verify, attestations) checks it the same way."""
    from schema.canonical import canonical_json, sha256_tag

    body = dict(report)
    integrity = dict(body.get("integrity") or {})
    integrity["content_hash"] = ""
    body["integrity"] = integrity
    return sha256_tag(canonical_json(body))
