"""Snapshots that the energy and intensity sources publish and the scorer reads.

Sources (``agent/sources``) poll off the scoring path and replace these immutable values;
the scorer reads whatever is current when a batch is scored, never the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class MeasuredRate:
    """Measured energy per I/O operation of one service over the source's last interval."""

    kwh_per_op: float
    tag: str  # "alumet_rapl" | "scaphandre_rapl" | "kepler_ebpf" | "redfish_bmc" | "cloud_specpower"
    taken_at: float  # unix seconds
    interval_s: float  # stale after 3 x interval_s


@dataclass(frozen=True, slots=True)
class LiveIntensity:
    """A live grid-intensity reading for one region."""

    gco2_kwh: float
    tag: str  # "electricity_maps_api" | "grid_operator_api"
    taken_at: float  # unix seconds of the poll that fetched it (never after the end of its period)
    estimated: bool = False  # the provider marked the value as estimated
    max_age_s: float | None = None  # its source's own staleness bound (None: Signals.max_signal_age_s)


@dataclass(frozen=True, slots=True)
class Signals:
    """Everything live the scorer may use; empty by default (pure proxy scoring)."""

    measured: dict[str, MeasuredRate] = field(default_factory=dict)  # by lowercased service
    live_intensity: dict[str, LiveIntensity] = field(default_factory=dict)  # by lowercased region
    host_watts: dict[str, tuple[float, str]] = field(default_factory=dict)  # host -> (W, tag)
    max_signal_age_s: float = 3600.0
