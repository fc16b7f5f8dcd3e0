"""When to hold a deferrable task, when to pause one, and the deadline guard.

carbonspan's rule (default) and OpenDC's (``compat=True``), evaluated per power source at each
carbon change. A rule returns *hold* flags: True means "the intensity is not low, wait".

- Forecast (``forecast: true``): the provider's values over the next ``forecastSize`` **hours**
  (as of now); short tasks (< 2 h left) use the ``shortForecastThreshold`` quantile, longer ones
  ``longForecastThreshold`` (numpy's linear quantile); low means ``current < quantile``.
- No forecast: low means ``current < mean`` of the rows of the last ``windowSize`` hours.
- Missing signal (no intensity now, or a forecast with a gap): never hold, counted.
- Stopper: high means ``current > quantile(forecastThreshold)`` (or ``> mean``).

Compat (OpenDC's Timeshifter.kt / TaskStopper.kt): the forecast is the next ``forecastSize - 1``
rows of the real trace, the quantile is ``sorted[round_half_up(n x t)]``, and without a forecast
the mean is over the last ``windowSize`` intensity *updates* the rule received (CarbonModel.java
pushes the trace's first row when the rule is attached, then the row in effect at the
simulation start, then each row as it begins), and short tasks need "low and rising"
(``current > previous update``, 0 before the first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from scheduling.carbon import HOUR_MS, CarbonTrace
from scheduling.prefabs import TimeshiftSpec, round_half_up

SHORT_MS = 2 * HOUR_MS


def latest_release(deadline: int, remaining: int, margin: float) -> int:
    """The deadline guard: the last instant from which ``remaining`` x (1 + margin) still ends
    by the deadline. A task may be held (or paused) only strictly before it."""
    # rounded to a microsecond first, so 3,600,000 x 1.1 is 3,960,000 ms, not 3,960,001
    return int(deadline - math.ceil(round(remaining * (1.0 + margin), 3)))


@dataclass
class ShiftRules:
    spec: TimeshiftSpec
    provider: object
    compat: bool = False
    counters: dict[str, int] = field(default_factory=lambda: {
        "decisions_signal_missing": 0, "decisions_forecast_unavailable": 0})
    #: compat: per power source, the intensity updates received (OpenDC's pastCarbonIntensities)
    _received: dict[int, list[float]] = field(default_factory=dict)
    _row: dict[int, int] = field(default_factory=dict)

    def _forecast(self, trace: CarbonTrace, now: int, size: int) -> np.ndarray | None:
        if self.compat:
            i = int(np.searchsorted(trace.t_ms, now, side="right")) - 1
            lo = min(i + 1, trace.values.size - 1)
            return trace.values[max(lo, 0): min(i + size, trace.values.size)]
        values = self.provider.forecast(trace, now, size * HOUR_MS)
        if values.size == 0 or np.isnan(values).any():
            self.counters["decisions_forecast_unavailable"] += 1
            return None
        return values

    def _quantile(self, values: np.ndarray, t: float) -> float:
        if self.compat:
            return float(np.sort(values)[min(round_half_up(values.size * t), values.size - 1)])
        return float(np.quantile(values, t))

    def observe(self, c: int, trace: CarbonTrace | None, now: int) -> None:
        """Compat: record the updates OpenDC's CarbonModel would have pushed to the rule by
        ``now``: on the first call the trace's first row (``addReceiver`` pushes fragment 0,
        which OpenDC stretches back to the beginning of time), then the row in effect if it is a
        later one; afterwards each new row once. Only rows from the simulation start on, plus
        that first row, are ever counted."""
        if not self.compat or trace is None:
            return
        i = int(np.searchsorted(trace.t_ms, now, side="right")) - 1
        got = self._received.setdefault(c, [])
        if c not in self._row:
            got.append(float(trace.values[0]))
            self._row[c] = 0
        if i > self._row[c]:
            got.append(float(trace.values[i]))
            self._row[c] = i
        keep = max(self.spec.window_size, self.spec.stopper.window_size if self.spec.stopper else 1, 2)
        del got[:-keep]

    def _mean(self, c: int, trace: CarbonTrace, now: int, window: int) -> float:
        if self.compat:
            return float(np.mean(self._received[c][-window:]))
        seen = trace.until(now)  # the observed history, before the simulation start too
        recent = seen.values[seen.t_ms > now - window * HOUR_MS]
        return float(recent.mean()) if recent.size else float(seen.values[-1])

    def hold(self, c: int, trace: CarbonTrace | None, now: int) -> tuple[bool, bool]:
        """(hold short tasks, hold long tasks) for power source ``c`` at ``now``."""
        self.observe(c, trace, now)
        cur = float(trace.value_at(now)) if trace is not None else float("nan")
        if np.isnan(cur):
            self.counters["decisions_signal_missing"] += 1
            return False, False
        s = self.spec
        if s.forecast:
            values = self._forecast(trace, now, s.forecast_size)
            if values is None or values.size == 0:
                return False, False
            return (not cur < self._quantile(values, s.short_threshold),
                    not cur < self._quantile(values, s.long_threshold))
        mean = self._mean(c, trace, now, s.window_size)
        low_long = cur < mean
        if not self.compat:
            return not low_long, not low_long
        got = self._received[c]
        prev = got[-2] if len(got) >= 2 else 0.0
        return not (low_long and cur > prev), not low_long

    def high(self, trace: CarbonTrace | None, now: int, c: int = 0) -> bool:
        """The task stopper's rule for power source ``c``: is the intensity high now?"""
        self.observe(c, trace, now)
        st = self.spec.stopper
        cur = float(trace.value_at(now)) if trace is not None else float("nan")
        if st is None or np.isnan(cur):
            return False
        if st.forecast:
            values = self._forecast(trace, now, st.forecast_size)
            if values is None or values.size == 0:
                return False
            return cur > self._quantile(values, st.forecast_threshold)
        return cur > self._mean(c, trace, now, st.window_size)
