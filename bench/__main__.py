"""Run every benchmark module (``bench/bench_*.py``), or those named: ``python -m bench decode``."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path

from bench import require_c_build


def main(argv: list[str]) -> int:
    require_c_build()
    names = sorted(
        m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_")
    )
    wanted = [f"bench_{a}" if not a.startswith("bench_") else a for a in argv]
    failed = 0
    for name in names:
        if wanted and name not in wanted:
            continue
        print(f"\n=== {name} ===", flush=True)
        t0 = time.perf_counter()
        try:
            importlib.import_module(f"bench.{name}").main()
        except Exception as exc:  # report and go on: one broken benchmark hides no other figure
            failed += 1
            print(f"{name} FAILED: {type(exc).__name__}: {exc}", flush=True)
        print(f"({name} took {time.perf_counter() - t0:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
