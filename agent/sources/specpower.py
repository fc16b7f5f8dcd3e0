"""Cloud SPECpower: modelled instance power from CPU utilisation, for hosts without a meter.

W = idle + (max - idle) x cpu (clamped to [0, 1]; unknown utilisation -> idle), with idle and
max watts from ``specpower_table`` (CCF-aligned, per instance or per vCPU). Utilisation is
the busy share of CPU time between two polls, from the local ``/proc/stat`` (``cpu`` line:
user nice system idle iowait irq softirq steal; idle and iowait are idle, guest time is
already inside user/nice) or from node_exporter's ``node_cpu_seconds_total`` counters by
``mode``. The instance's energy over the interval is W x interval_s, shared by its services
by their I/O ops.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from agent.sources.config import SpecPowerConfig
from agent.sources.energy import EnergySource, Reading
from agent.sources.errors import SourceError
from agent.sources.http import http_get
from agent.sources.prom import CounterDeltas, parse_exposition
from agent.sources.specpower_table import INSTANCE_POWER, interpolate_watts

_PROC_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_IDLE_MODES = frozenset({"idle", "iowait"})
_BUSY_MODES = frozenset({"user", "nice", "system", "irq", "softirq", "steal"})


class SpecPowerSource(EnergySource):
    kind = "specpower"
    tag = "cloud_specpower"
    settings: SpecPowerConfig

    def __init__(self, name: str, settings: SpecPowerConfig, ops, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name, settings, ops, shared_services=settings.services, **kw)
        row = INSTANCE_POWER[settings.instance_type]
        scale = settings.vcpus if row.per_vcpu and settings.vcpus else 1
        self.idle_w, self.max_w = row.idle_w * scale, row.max_w * scale
        self._cpu = CounterDeltas()
        self.last_cpu: float | None = None
        self.last_cpu_error = ""

    def read(self, elapsed_s: float | None) -> Reading | None:
        try:
            cpu = utilisation(self._cpu.update(self._cpu_times()))
            self.last_cpu_error = ""
        except SourceError as exc:  # unknown utilisation -> idle watts, said in health
            cpu = None
            self.last_cpu_error = str(exc)
            self.stats["cpu_unknown"] = self.stats.get("cpu_unknown", 0) + 1
        self.last_cpu = cpu
        watts = interpolate_watts(self.idle_w, self.max_w, cpu)
        if elapsed_s is None:
            return None
        return Reading(shared_joules=watts * elapsed_s, total_watts=watts)

    def _cpu_times(self) -> dict[object, float]:
        cfg = self.settings
        if cfg.cpu_source == "proc":
            return proc_stat_times(cfg.proc_stat_path)
        assert cfg.url is not None
        body = http_get(cfg.url, timeout_s=cfg.timeout_s)
        times: dict[object, float] = defaultdict(float)
        for s in parse_exposition(body, ("node_cpu_seconds_total",), f"node_exporter {cfg.url}"):
            if "mode" in s.labels:
                times[s.labels["mode"]] += s.value
        if not times:
            raise SourceError(
                f"node_exporter {cfg.url}: no node_cpu_seconds_total{{mode=...}} series"
            )
        return dict(times)


def proc_stat_times(path: str = "/proc/stat") -> dict[object, float]:
    """Aggregate CPU times (jiffies) by mode from the ``cpu`` line of ``/proc/stat``."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("cpu "):
                values = [float(v) for v in line.split()[1:]]
                return dict(zip(_PROC_FIELDS, values, strict=False))
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot read CPU times from {path} ({exc})") from None
    raise SourceError(f"{path} has no aggregate 'cpu ' line")


def utilisation(deltas: dict[object, float]) -> float | None:
    """Busy share of CPU time over the interval; None when no time passed (unknown)."""
    busy = sum(v for k, v in deltas.items() if k in _BUSY_MODES)
    idle = sum(v for k, v in deltas.items() if k in _IDLE_MODES)
    total = busy + idle
    return busy / total if total > 0 else None
