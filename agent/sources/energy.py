"""The part every power source shares: energy over an interval -> kWh per I/O op.

A source's ``read`` returns a ``Reading``: joules per service over the interval since its
previous successful poll (Scaphandre, Kepler, Alumet), or joules of a whole machine that its
services share by their I/O ops (Redfish chassis, cloud SPECpower), and the machine's
average watts (published as a ``[[green.hosts]]`` host's power when a host names the
source). ``EnergySource.poll`` pairs that with the I/O ops the daemon counted over the same
interval (``OpCursor.take``) and keeps, per service, the latest

    kWh/op = joules / 3.6e6 / ops

Rules from issue 5: zero ops in an interval keeps the previous value; a non-finite or
negative energy (or one implying more than ``MAX_METER_WATTS``) is discarded (counted); a value older than 3 x the interval is stale and
dropped when the snapshot is taken (counted).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from agent.carbon.signals import MeasuredRate
from agent.sources.config import PollSettings
from agent.sources.opcounter import OpCounter

J_PER_KWH = 3.6e6
STALE_INTERVALS = 3.0
# One meter (a process set, a node, a chassis) drawing more than a megawatt is a broken
# exporter, not a server: a dense rack is tens of kW. Such readings are discarded (counted).
MAX_METER_WATTS = 1e6


@dataclass(slots=True)
class Reading:
    """What one poll measured over the interval since the previous successful poll."""

    service_joules: dict[str, float] = field(default_factory=dict)
    shared_joules: float | None = None  # shared by the configured services by their I/O ops
    total_watts: float | None = None  # the machine's average power over the interval


def kwh_per_op(joules: float, ops: int) -> float:
    """12 W for 5 s is 60 J = 1.6667e-5 kWh; over 8,000 ops that is 2.0833e-9 kWh/op."""
    return joules / J_PER_KWH / ops


class EnergySource:
    """Base of the power sources: subclasses implement ``read(elapsed_s)``."""

    kind: ClassVar[str] = ""
    tag: ClassVar[str] = ""

    def __init__(
        self,
        name: str,
        settings: PollSettings,
        ops: OpCounter,
        shared_services: Iterable[str] = (),
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.settings = settings
        self.interval_s = settings.interval_s
        self.shared_services = tuple(s.lower() for s in shared_services)
        # services this meter is configured to measure (label rules or shared services)
        self.covered = frozenset(s.lower() for s in getattr(settings, "services", None) or ())
        self.last_ok: float | None = None  # wall time of the last successful read
        self._clock = clock
        self._mono = monotonic
        self._cursor = ops.cursor()
        self._lock = threading.Lock()
        self._rates: dict[str, MeasuredRate] = {}
        self._lapsed: dict[str, MeasuredRate] = {}  # rates dropped as stale, until replaced
        self._watts: tuple[float, float] | None = None  # (W, taken_at)
        self._last_mono: float | None = None
        self.stats: dict[str, int] = {
            "discarded": 0,
            "zero_ops_kept": 0,
            "stale_dropped": 0,
            "unmatched_series": 0,
            "incomplete_services": 0,
        }

    # -- subclass hook -------------------------------------------------------------------
    def read(self, elapsed_s: float | None) -> Reading | None:
        """Fetch and convert one sample; ``elapsed_s`` is None on the first (baseline) poll."""
        raise NotImplementedError

    def start(self) -> None:
        """Resolve secrets and files; raise ``ConfigError`` for what cannot work."""

    # -- the shared part -----------------------------------------------------------------
    def poll(self) -> None:
        """One poll: read, pair with the ops of the same interval, keep the new rates."""
        mono = self._mono()
        elapsed = None if self._last_mono is None else max(mono - self._last_mono, 1e-9)
        reading = self.read(elapsed)
        ops = self._cursor.take()  # only after a successful read: the next interval starts now
        self._last_mono = mono
        self.last_ok = self._clock()
        if reading is not None and elapsed is not None:
            self._apply(reading, ops, self._clock(), elapsed)

    def _apply(self, reading: Reading, ops: dict[str, int], now: float, elapsed: float) -> None:
        with self._lock:
            for service, joules in reading.service_joules.items():
                self._set(service, joules / elapsed, joules, ops.get(service, 0), now)
            if reading.shared_joules is not None and self.shared_services:
                total_ops = sum(ops.get(s, 0) for s in self.shared_services)
                for service in self.shared_services:
                    if ops.get(service, 0) > 0:
                        watts = reading.shared_joules / elapsed
                        self._set(service, watts, reading.shared_joules, total_ops, now)
                    else:
                        self.stats["zero_ops_kept"] += 1
            w = reading.total_watts
            if w is not None:
                if 0 <= w <= MAX_METER_WATTS:
                    self._watts = (w, now)
                else:
                    self.stats["discarded"] += 1

    def _set(self, service: str, watts: float, joules: float, ops: int, now: float) -> None:
        if not (0 <= watts <= MAX_METER_WATTS and math.isfinite(joules)):
            self.stats["discarded"] += 1
        elif ops <= 0:
            self.stats["zero_ops_kept"] += 1
        else:
            self._rates[service] = MeasuredRate(
                kwh_per_op(joules, ops), self.tag, now, self.interval_s
            )
            self._lapsed.pop(service, None)

    def lapsed(self) -> dict[str, MeasuredRate]:
        """The last rate of each service whose value went stale and has not been replaced.

        The manager hands one of these to the scorer when no source has a fresh value for
        the service, so the scorer itself sees the staleness and counts the fallback to the
        proxy in the window's ``measured_stale_spans``.
        """
        with self._lock:
            return dict(self._lapsed)

    def down(self, now: float) -> bool:
        """No successful read for 3 x the interval: what this meter sees is unknown now."""
        return self.last_ok is None or now - self.last_ok > STALE_INTERVALS * self.interval_s

    def watts_stale_at(self) -> float | None:
        """When the machine watts last read go stale (None: none are held)."""
        with self._lock:
            return None if self._watts is None else self._watts[1] + STALE_INTERVALS * self.interval_s

    def snapshot(self, now: float) -> tuple[dict[str, MeasuredRate], float | None]:
        """Fresh rates by service and fresh machine watts; stale entries are dropped and counted."""
        limit = STALE_INTERVALS * self.interval_s
        with self._lock:
            for service in [s for s, r in self._rates.items() if now - r.taken_at > limit]:
                self._lapsed[service] = self._rates.pop(service)
                self.stats["stale_dropped"] += 1
            if self._watts is not None and now - self._watts[1] > limit:
                self._watts = None
                self.stats["stale_dropped"] += 1
            return dict(self._rates), None if self._watts is None else self._watts[0]
