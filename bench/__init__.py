"""Benchmarks behind ``make bench``: each ``bench_*.py`` module has a ``main()`` that prints figures.

A figure measured on the pure-Python fallback of a C accelerator (a build made before a
``FOLD_VERSION`` or ``SCORE_VERSION`` change is refused at load with only a warning) would be
reported as if it were the product's, so ``python -m bench`` and ``python -m bench.bench_NAME``
refuse to run unless every accelerator ``carbonspan --version`` lists is in use: exit 2 with the
names and the fix (``make venv``). ``CARBONSPAN_BENCH_ALLOW_PYTHON=1`` measures the fallback on
purpose, with a warning on every run.
"""

from __future__ import annotations

import os
import sys

ALLOW_ENV = "CARBONSPAN_BENCH_ALLOW_PYTHON"


def python_fallbacks() -> list[str]:
    """The accelerators not in use (the pure-Python path would be measured)."""
    from carbonspan.cli import accelerators

    return [name for name, in_use in accelerators().items() if not in_use]


def require_c_build() -> None:
    """Exit 2 (with what to do) if a C accelerator is not in use, unless ``ALLOW_ENV`` is ``1``."""
    missing = python_fallbacks()
    if not missing:
        return
    names = ", ".join(missing)
    if os.environ.get(ALLOW_ENV) == "1":
        print(f"bench: WARNING: measuring the pure-Python path of {names} ({ALLOW_ENV}=1); "
              "these are not the product's figures", file=sys.stderr, flush=True)
        return
    print(f"bench: refusing to measure: the C accelerator(s) {names} are not in use (a missing or "
          "stale build; the warnings above say which). Run `make venv`, check `carbonspan "
          f"--version` says C for each, and run the bench again; or set {ALLOW_ENV}=1 to measure "
          "the Python fallback on purpose.", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _run_as_bench_module() -> bool:
    """True when this interpreter was started as ``python -m bench.bench_NAME`` (``python -m
    bench`` checks in ``bench.__main__``); the package is imported first either way."""
    argv = getattr(sys, "orig_argv", [])
    return any(a == "-m" and i + 1 < len(argv) and argv[i + 1].startswith("bench.bench_")
               for i, a in enumerate(argv))


if _run_as_bench_module():
    require_c_build()
