"""Suite-wide test settings.

Hypothesis profiles: ``dev`` (the default) explores new random examples on every run, which
is how the property tests keep finding things; ``ci`` (``HYPOTHESIS_PROFILE=ci``, set by
``.ci/run``) is derandomised, so a clean clone sees the same examples on every run and a
landing is not decided by the draw. A failure found in ``dev`` prints its reproduction blob.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import settings

# Helpers shared by several test directories (tests/_shared/agent_process.py) import as
# top-level modules. Only that directory goes on sys.path: tests/ itself would put its
# subdirectories (tests/schema, tests/aggregator, ...) before the packages of the same name.
_SHARED = str(Path(__file__).parent / "_shared")
if _SHARED not in sys.path:
    sys.path.append(_SHARED)

settings.register_profile("dev", print_blob=True)
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
