"""The C scoring extension (``agent/_score.c``), loaded once, below everything that uses it.

``EXT`` is the built module, or None when it is not built (no C compiler: the numpy reference
scores, same answers, slower) or is a stale build whose ``SCORE_VERSION`` differs from this
file's (refused, with a warning); ``STATUS`` is ``"c"`` or says which and what to do. The
scoring pass (``agent.score_fast``) and the window's merge and WAL record
(``agent.carbon.partial``) both take the extension from here, so neither imports the other
for it (as ``aggregator/fold/ext.py`` does for the fold).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from types import ModuleType

log = logging.getLogger("carbonspan.score")

#: What ``_score.c`` computes; bumped with it (its SCORE_VERSION must match).
SCORE_VERSION = 4


def load() -> tuple[ModuleType | None, str]:
    """``(module, "c")`` for a current build, else ``(None, why)``; a stale build is logged."""
    try:
        from agent import _score
    except ImportError:
        return None, "reference: agent._score is not built"
    if getattr(_score, "SCORE_VERSION", None) != SCORE_VERSION:
        status = (
            f"reference: agent._score ({_score.__file__}) is a stale build (score version "
            f"{getattr(_score, 'SCORE_VERSION', 'none')}, expected {SCORE_VERSION}); rebuild it "
            "with `.venv/bin/pip install -e '.[test]'`"
        )
        log.warning("%s", status)
        return None, status
    return _score, "c"


EXT, STATUS = load()

#: Why the C pass handed work to the reference, each a label of
#: ``carbonspan_scorer_fallbacks_total{reason}`` (a fixed set: the detail, which may name a
#: batch's length, goes to the log): ``column`` (a span column of another dtype), ``calibration``
#: (a factor that is not a number), ``clock`` (not an int of ns), ``table`` (an id outside its
#: string table, an unknown op class, a clock past int64), ``count_overflow`` (the window's C
#: accumulator declined a batch whose counts could take a sum past int64: the reference, whose
#: ints are unbounded, holds that window from then on).
FALLBACK_REASONS = ("column", "calibration", "clock", "table", "count_overflow")
_FALLBACKS: Counter[str] = Counter()
_FALLBACKS_LOCK = threading.Lock()


def fallback(reason: str, detail: str) -> None:
    """Count one hand-over to the reference under ``reason`` (one of ``FALLBACK_REASONS``);
    the first of each reason is logged as a warning with its ``detail``, later ones at debug."""
    if reason not in FALLBACK_REASONS:
        raise ValueError(f"{reason!r} is not one of {FALLBACK_REASONS}")
    with _FALLBACKS_LOCK:
        first = not _FALLBACKS[reason]
        _FALLBACKS[reason] += 1
    (log.warning if first else log.debug)(
        "the numpy reference does work the C pass declined (%s: %s)", reason, detail)


def fallbacks() -> dict[str, int]:
    """Hand-overs to the reference since start, by reason (the reasons that occurred)."""
    with _FALLBACKS_LOCK:
        return dict(_FALLBACKS)


__all__ = ["EXT", "FALLBACK_REASONS", "SCORE_VERSION", "STATUS", "fallback", "fallbacks", "load"]
