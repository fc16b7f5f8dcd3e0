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

import pytest
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


# pytest-xdist (`make test`: ``-n <cores> --dist loadfile``) hands each worker whole files, so a
# file's module-scoped agent process or Dask cluster starts once. The directories below share
# a session-scoped fixture across their files (tests/signing: signed_archive, a signed
# two-agent chain with a witness; tests/deploy: kit and live, a real agent fed by the SDK), so
# each goes to one worker whole and builds it once. (xdist's own ``--dist loadgroup`` does not
# work with pytest 9: it renames node ids through an attribute pytest no longer reads.)
_ONE_UNIT_DIRS = ("tests/signing/", "tests/deploy/")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _FilesAndSharedDirs(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((d for d in _ONE_UNIT_DIRS if path.startswith(d)), path)

    return _FilesAndSharedDirs(config, log)
