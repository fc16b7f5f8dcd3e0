"""One polling thread per source: interval, exponential backoff with jitter, health counters.

A failed poll (timeout, refused connection, bad status, unreadable body) never stops the
thread and never touches the last good values: it is counted, and the next attempt waits
``min(cap, interval x 2^n)`` for the n-th consecutive failure, with "equal jitter" (half of
that plus a uniform random half) so many agents restarted together do not hit an API in
step. The first success resets the schedule to the plain interval.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from agent.sources.errors import SourceAuthError


class Pollable(Protocol):
    name: str
    kind: str
    tag: str
    interval_s: float
    stats: dict[str, int]

    def poll(self) -> None: ...


def backoff_delay(failures: int, interval_s: float, cap_s: float, rng: random.Random) -> float:
    """Delay before the next attempt after ``failures`` consecutive failures (>= 0)."""
    if failures <= 0:
        return interval_s
    ceiling = min(cap_s, interval_s * 2.0 ** min(failures, 32))
    ceiling = max(ceiling, interval_s)
    return ceiling / 2 + rng.uniform(0.0, ceiling / 2)


class Runner:
    """Drives one source: ``run`` is the thread body, ``poll_once`` one attempt."""

    def __init__(
        self,
        source: Pollable,
        backoff_cap_s: float,
        is_stale: Callable[[float, float | None], bool],
        on_update: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.source = source
        self.backoff_cap_s = backoff_cap_s
        self._is_stale = is_stale
        self._on_update = on_update
        self._clock = clock
        self._rng = rng or random.Random()
        self.ok = False
        self.last_success: float | None = None
        self.failures = 0
        self.consecutive_failures = 0
        self.last_error = ""
        self.auth_error: SourceAuthError | None = None
        self.first_done = threading.Event()
        self.thread: threading.Thread | None = None

    def poll_once(self) -> bool:
        try:
            self.source.poll()
        except Exception as exc:  # a poller must survive anything a remote end sends
            self.ok = False
            self.failures += 1
            self.consecutive_failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, SourceAuthError):
                self.auth_error = exc
            return False
        self.ok = True
        self.consecutive_failures = 0
        self.last_error = ""
        self.auth_error = None
        self.last_success = self._clock()
        self._on_update()
        return True

    def next_delay(self) -> float:
        return backoff_delay(
            self.consecutive_failures, self.source.interval_s, self.backoff_cap_s, self._rng
        )

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.poll_once()
            self.first_done.set()
            if stop.wait(self.next_delay()):
                return

    def start(self, stop: threading.Event) -> None:
        self.thread = threading.Thread(
            target=self.run, args=(stop,), name=f"carbonspan-source-{self.source.name}", daemon=True
        )
        self.thread.start()

    def health(self, now: float) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "last_success": self.last_success,
            "failures": self.failures,
            "stale": self._is_stale(now, self.last_success),
            "consecutive_failures": self.consecutive_failures,
            "last_error": self.last_error,
            "kind": self.source.kind,
            "tag": self.source.tag,
            **self.source.stats,
        }
