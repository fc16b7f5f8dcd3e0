"""Per-service I/O operation counts that turn a source's energy into energy per operation.

A power source measures joules over its own polling interval; to publish kWh per I/O op it
needs how many I/O ops each service performed over the same interval. The daemon scores span
batches, so it is the one that knows: after each scored batch it calls
``OpCounter.add({service: io_ops})`` (or ``add_partial(partial)`` with the batch's
``WindowPartial``). The counter keeps monotonic running totals; each source
holds an ``OpCursor`` and takes the deltas since its previous successful poll, so several
sources with different intervals read the same counter without interfering.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping


class OpCounter:
    """Thread-safe running totals of I/O ops per lowercased service name."""

    __slots__ = ("_lock", "_totals", "before_read")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, int] = {}
        # called before each read of the totals: with --workers N the supervisor's counter
        # takes in the workers' latest op totals there (agent/sources/shared.py), so a power
        # source's poll pairs its joules with ops as recent as the workers have written
        self.before_read: Callable[[], None] | None = None

    def add(self, per_service_io_ops: Mapping[str, int]) -> None:
        """Count one scored batch's I/O ops. Non-positive or non-integer counts are ignored."""
        with self._lock:
            totals = self._totals
            for service, ops in per_service_io_ops.items():
                if isinstance(ops, bool) or not isinstance(ops, int) or ops <= 0:
                    continue
                key = service.lower()
                totals[key] = totals.get(key, 0) + ops

    def add_partial(self, partial: object) -> None:
        """Count a scored ``WindowPartial`` by its per-service I/O operations."""
        per_service = getattr(partial, "ops_by_service", None)
        if per_service is not None:
            self.add(per_service())

    def totals(self) -> dict[str, int]:
        """A copy of the running totals."""
        if self.before_read is not None:
            self.before_read()
        with self._lock:
            return dict(self._totals)

    def cursor(self) -> OpCursor:
        """A reader positioned at the current totals (ops counted before it are not seen)."""
        return OpCursor(self)


class OpCursor:
    """One source's position in an ``OpCounter``: ``take()`` returns ops since the last take."""

    __slots__ = ("_counter", "_last")

    def __init__(self, counter: OpCounter) -> None:
        self._counter = counter
        self._last = counter.totals()

    def take(self) -> dict[str, int]:
        """Ops per service since the previous ``take()`` (or since the cursor was made)."""
        now = self._counter.totals()
        last = self._last
        self._last = now
        return {s: n - last.get(s, 0) for s, n in now.items() if n > last.get(s, 0)}
