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
from types import ModuleType

log = logging.getLogger("carbonspan.score")

#: What ``_score.c`` computes; bumped with it (its SCORE_VERSION must match).
SCORE_VERSION = 3


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

__all__ = ["EXT", "SCORE_VERSION", "STATUS", "load"]
