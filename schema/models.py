"""Pydantic models of the window report the agent archives (one per scoring window).

Field names follow the design notes. New fields are additive with defaults, so a line
written by an older agent still loads: the seven runtime-attribution fields of
``GreenSummary`` default to ``0.0``, ``""`` and empty maps (a "v1.0" line has none of them).
Unknown fields are ignored, so an older reader loads a newer line.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

WINDOW_REPORT_VERSION = "1.1"

RegionStatus = Literal["resolved", "unresolved", "out_of_table"]
IntensitySource = Literal["annual", "hourly", "monthly_hourly", "real_time"]
HostKind = Literal["database", "messaging"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)


class WindowInfo(_Model):
    """When the window ran and what it saw."""

    start: str = Field(description="RFC 3339 UTC start of the window")
    end: str = Field(description="RFC 3339 UTC end of the window")
    spans: int = Field(0, ge=0, description="spans scored in the window")
    traces: int = Field(0, ge=0, description="distinct trace ids in the window")
    root_spans: int = Field(
        0,
        ge=0,
        description="spans without a parent span id (requests begun here); 0 on lines written "
        "before it was counted",
    )
    io_ops: int = Field(0, ge=0, description="I/O operations (db, outgoing HTTP, messaging)")


class Co2Total(_Model):
    """Total carbon with its uncertainty band: low = mid x 0.5, high = mid x 2."""

    low: float = 0.0
    mid: float = 0.0
    high: float = 0.0
    model: str = Field("", description="energy-model tag of the window (precedence pick)")
    methodology: str = Field("", description="what the total covers, e.g. sci_operational_embodied_hosts")


class Co2(_Model):
    total: Co2Total = Field(default_factory=Co2Total)
    operational_gco2: float = Field(0.0, description="application spans only: energy x intensity x PUE")
    embodied_gco2: float = Field(
        0.0,
        description="window.traces (or window.root_spans when methodology.embodied_per is "
        "root_span) x embodied_carbon_per_request_gco2",
    )
    database_gco2: float = Field(0.0, description="database hosts counted in totals")
    messaging_gco2: float = Field(0.0, description="broker hosts counted in totals")


class RegionRow(_Model):
    region: str
    status: RegionStatus
    grid_intensity_gco2_kwh: float = 0.0
    pue: float = 1.0
    intensity_source: IntensitySource = "annual"
    intensity_estimated: bool = Field(
        False, description="a live signal was wanted but stale or missing; a profile/annual value was used"
    )
    io_ops: int = 0
    energy_kwh: float = 0.0
    co2_gco2: float = 0.0


class HostRow(_Model):
    """A database or broker host: emits no spans, never a service."""

    name: str
    kind: HostKind
    region: str = "unknown"
    in_totals: bool = True
    watts: float = 0.0
    energy_kwh: float = 0.0
    co2_gco2: float = 0.0
    pue: float | None = Field(
        None,
        description="the PUE applied to the host's energy in co2_gco2 (1.0 outside the region "
        "table); absent in lines written before it was recorded",
    )
    energy_model: str = Field("declared_watts", description="declared_watts or a measured tag")


class EndpointIoOps(_Model):
    service: str
    endpoint: str
    io_ops: int = 0


class GreenSummary(_Model):
    total_io_ops: int = 0
    co2: Co2 = Field(default_factory=Co2)
    regions: list[RegionRow] = Field(default_factory=list)
    # Runtime attribution ("v1.1"): absent from v1.0 lines, hence the defaults.
    energy_kwh: float = Field(0.0, description="sum of per-service energy + host energy in totals")
    energy_model: str = Field("", description="precedence pick over the window; empty when energy is 0")
    per_service_energy_kwh: dict[str, float] = Field(default_factory=dict)
    per_service_carbon_kgco2eq: dict[str, float] = Field(default_factory=dict)
    per_service_region: dict[str, str] = Field(default_factory=dict)
    per_service_energy_model: dict[str, str] = Field(default_factory=dict)
    per_service_measured_ratio: dict[str, float] = Field(default_factory=dict)
    per_service_requests: dict[str, int] = Field(
        default_factory=dict, description="entry spans (server/consumer) per service"
    )
    hosts: list[HostRow] = Field(default_factory=list)
    energy_without_carbon_kwh: float = Field(
        0.0,
        description="energy counted at 0 g because its region is unresolved or out of the "
        "intensity table: regions[] rows with those statuses + in-totals hosts in such regions; "
        "0 on lines written before it was recorded",
    )

    def host_energy_in_totals_kwh(self) -> float:
        return sum(h.energy_kwh for h in self.hosts if h.in_totals)

    def application_energy_kwh(self) -> float:
        """``energy_kwh`` minus the host energy counted in totals (never negative)."""
        return max(0.0, self.energy_kwh - self.host_energy_in_totals_kwh())


class WindowReport(_Model):
    """The ``report`` object of one archive line."""

    version: str = WINDOW_REPORT_VERSION
    agent_id: str = ""
    window: WindowInfo
    green_summary: GreenSummary = Field(default_factory=GreenSummary)
    per_endpoint_io_ops: list[EndpointIoOps] = Field(default_factory=list)
    counters: dict[str, int] = Field(
        default_factory=dict,
        description="spans_rejected, trace_id_invalid, region_invalid, region_overflow, ... (by reason; the full list is in docs/archive-format.md)",
    )
    methodology: dict[str, str] = Field(
        default_factory=dict, description="intensity table, PUE and coefficient sources in force"
    )


class ArchiveLine(_Model):
    """One line of an archive ``*.jsonl`` file; see schema.chain for ``prev`` and ``hash``."""

    ts: str
    seq: int = Field(ge=0)
    prev: str
    hash: str
    report: WindowReport
