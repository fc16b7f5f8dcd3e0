"""The disclosure report: the aggregator's output and the auditor's input.

One report covers one organisation and one period. Every figure is derived from archive
window lines by ``aggregator.fold`` and ``aggregator.report``; docs/report-format.md explains
each field, the two attribution paths, the sanitising rules, the caps and the integrity hash.
The model is versioned by ``schema_version``; new fields are additive with defaults.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

REPORT_SCHEMA_VERSION = "1.0"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Period(_Model):
    start: str = Field(description="RFC 3339 UTC, inclusive: windows starting at or after it")
    end: str = Field(description="RFC 3339 UTC, exclusive: windows starting before it")
    first_window: str = Field("", description="RFC 3339 UTC start of the earliest window folded (empty with none)")
    last_window: str = Field("", description="RFC 3339 UTC start of the latest window folded (empty with none)")


class Methodology(_Model):
    """What the figures rest on, gathered from the window lines and the aggregator's constants."""

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


class CarbonBreakdown(_Model):
    operational_kgco2eq: float = 0.0
    embodied_kgco2eq: float = 0.0
    database_kgco2eq: float = 0.0
    messaging_kgco2eq: float = 0.0


class Aggregate(_Model):
    windows: int = 0
    total_requests: int = 0
    total_energy_kwh: float = 0.0
    host_energy_kwh: float = Field(0.0, description="database/broker host energy counted in totals")
    total_carbon_kgco2eq: float = 0.0
    carbon_breakdown: CarbonBreakdown = Field(default_factory=CarbonBreakdown)
    period_coverage: float = Field(0.0, description="runtime / (runtime + fallback) windows")
    runtime_windows: int = 0
    fallback_windows: int = 0
    unattributed_windows: int = 0
    dropped_services: int = Field(0, description="service entries dropped by the service cap")
    dropped_energy_kwh: float = 0.0
    dropped_carbon_kgco2eq: float = 0.0
    sanitised_values: int = Field(0, description="NaN, +-Inf, negative or out-of-range -> 0")
    missing_values: int = Field(0, description="non-numeric values read as missing")
    host_terms_excluded: int = Field(0, description="host names found in per-service maps")
    rejected_energy_models: int = Field(0, description="tags over 64 bytes or past the tag cap")
    dropped_regions: int = Field(0, description="region rows past the region cap")
    per_service_energy_models: dict[str, list[str]] = Field(default_factory=dict)


class Application(_Model):
    service_name: str
    region: str = "unknown"
    energy_kwh: float = 0.0
    carbon_kgco2eq: float = 0.0
    requests: int = 0
    windows: int = 0
    share_of_total: float = Field(0.0, description="carbon_kgco2eq / aggregate.total_carbon_kgco2eq")
    energy_model: str = Field("", description="highest-fidelity tag seen for the service")


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


class DisclosureReport(_Model):
    """A periodic carbon disclosure per application, re-derivable from the archives."""

    schema_version: str = REPORT_SCHEMA_VERSION
    organisation: str = ""
    period: Period
    methodology: Methodology
    aggregate: Aggregate = Field(default_factory=Aggregate)
    applications: list[Application] = Field(default_factory=list)
    regions: list[RegionTotal] = Field(default_factory=list)
    inputs: Inputs = Field(default_factory=Inputs)
    integrity: Integrity = Field(default_factory=Integrity)
