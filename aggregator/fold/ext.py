"""The C extension of the fold (``aggregator.fold._fold``, built from ``_fold.c``), if it is built
by the current rules; and the two things a build provides: the running-sum bases (compact C
structs) and the window-time parsers.

``EXT`` is the module, or ``None`` when it is not built (a machine without a C compiler) or
was built by other rules: ``FOLD_VERSION`` here must equal the one compiled in, so a stale
build is refused - with a warning, never silently - instead of folding by old rules. Without
it the same classes and functions exist in Python and the reports are the same bytes, only
slower. Which fold runs is said by :data:`aggregator.fold.fast.ACCELERATED`.
"""

from __future__ import annotations

import re
import warnings
from types import ModuleType

#: Must equal FOLD_VERSION in aggregator/fold/_fold.c; bump both when the rules change.
FOLD_VERSION = 17


def _load() -> ModuleType | None:
    try:
        from aggregator.fold import _fold  # type: ignore[attr-defined]
    except ImportError:
        return None
    built = getattr(_fold, "FOLD_VERSION", None)
    if built != FOLD_VERSION:
        warnings.warn(f"{_fold.__file__} was built by fold rules {built}, not {FOLD_VERSION}: not used "
                      "(the Python fold runs, slower); rebuild with `.venv/bin/pip install -e '.[test]'`",
                      RuntimeWarning, stacklevel=2)
        return None
    try:
        _fold.configure(*contract_facts())
    except ValueError as exc:  # the C code is written for other facts: refuse it, loudly
        warnings.warn(f"{_fold.__file__} does not fit the contract ({exc}): not used (the Python fold runs, "
                      "slower)", RuntimeWarning, stacklevel=2)
        return None
    return _fold


def contract_facts() -> tuple:
    """The facts ``_fold.c`` uses, from where they are decided (docs/archive-format.md, "Where
    the facts live"): the body key, the two window time shapes read without a parse (the
    agent's 27 characters and the 20-character form, digits as 0), the terms of a total, the
    sanitiser's bounds, the calibration suffix, the unattributed bucket's name."""
    from aggregator.fold.rules import UNATTRIBUTED
    from aggregator.sanitize import MAX_COUNT, MAX_FIGURE, MAX_NAME_BYTES, MAX_TAG_BYTES
    from schema import times
    from schema.archive import BODY_KEY
    from schema.tags import CAL_SUFFIX
    from schema.totals import TOTAL_TERMS

    written = re.sub(r"[0-9]", "0", times.format_ns(0))  # the agent's form: YYYY-MM-DDTHH:MM:SS.ffffffZ
    short = written[: written.index(".")] + "Z"  # the same instant in whole seconds (...:00Z)
    assert len(written) == times.WINDOW_TIME_LENGTH
    return (BODY_KEY, (written, short), TOTAL_TERMS, MAX_FIGURE, MAX_COUNT, MAX_NAME_BYTES, MAX_TAG_BYTES,
            CAL_SUFFIX, UNATTRIBUTED)


EXT = _load()

if EXT is not None:  # running sums in C structs, which the C fold adds to directly
    ServiceSums, RegionSums, BucketSums = EXT.ServiceSums, EXT.RegionSums, EXT.BucketSums
    window_start, window_end = EXT.window_start, EXT.window_end
else:  # the same fields as Python slots, the same parsers in Python
    from aggregator.coverage import window_end
    from aggregator.read import window_start

    class ServiceSums:  # type: ignore[no-redef]
        __slots__ = ("energy", "carbon", "requests", "windows")

        def __init__(self) -> None:
            self.energy = 0.0
            self.carbon = 0.0
            self.requests = 0
            self.windows = 0

        def add_sums(self, other: ServiceSums) -> None:
            self.energy += other.energy
            self.carbon += other.carbon
            self.requests += other.requests
            self.windows += other.windows

    class RegionSums:  # type: ignore[no-redef]
        __slots__ = ("energy", "carbon", "io_ops", "rows")

        def __init__(self) -> None:
            self.energy = 0.0
            self.carbon = 0.0
            self.io_ops = 0
            self.rows = 0

    class BucketSums:  # type: ignore[no-redef]
        __slots__ = ("energy", "host_energy", "operational", "embodied", "database", "messaging",
                     "dropped_energy", "dropped_carbon", "requests", "windows")

        def __init__(self) -> None:
            self.energy = self.host_energy = 0.0
            self.operational = self.embodied = self.database = self.messaging = 0.0
            self.dropped_energy = self.dropped_carbon = 0.0
            self.requests = 0
            self.windows = 0

__all__ = ["EXT", "FOLD_VERSION", "BucketSums", "RegionSums", "ServiceSums", "window_end", "window_start"]
