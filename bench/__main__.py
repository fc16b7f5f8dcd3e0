"""Run every benchmark module (``bench/bench_*.py``), or those named: ``python -m bench decode``.

``python -m bench --help`` lists them. A module's own options (e.g. ``--http-json``) go to the
module itself: ``python -m bench.bench_ingest --help``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path

from bench import require_c_build


def _names() -> list[str]:
    return sorted(m.name.removeprefix("bench_") for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                  if m.name.startswith("bench_"))


def _parser(names: list[str]) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run the benchmarks behind `make bench` (all of them, or those named) and print "
                    "their figures. Each module's own options: python -m bench.bench_NAME --help.",
        epilog="example: python -m bench decode aggregate   (two modules; `make bench` runs all)")
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"one of: {', '.join(names)}")
    return ap


def main(argv: list[str]) -> int:
    names = _names()
    ap = _parser(names)
    args, extra = ap.parse_known_args(argv)  # --help prints and exits 0
    wanted = [a.removeprefix("bench_") for a in args.names]
    if extra:  # e.g. `python -m bench ingest --http-json`: run nothing rather than the defaults
        one = wanted[0] if len(wanted) == 1 else "NAME"
        ap.error(f"options are the module's own: run python -m bench.bench_{one} {' '.join(extra)} "
                 f"(see python -m bench.bench_{one} --help)")
    require_c_build()  # before the names: a stale build is what to fix first
    unknown = [w for w in wanted if w not in names]
    if unknown:
        ap.error(f"no benchmark named {', '.join(unknown)}; there are: {', '.join(names)}")
    failed = 0
    for name in names:
        if wanted and name not in wanted:
            continue
        print(f"\n=== bench_{name} ===", flush=True)
        t0 = time.perf_counter()
        try:
            importlib.import_module(f"bench.bench_{name}").main()
        except Exception as exc:  # report and go on: one broken benchmark hides no other figure
            failed += 1
            print(f"bench_{name} FAILED: {type(exc).__name__}: {exc}", flush=True)
        print(f"(bench_{name} took {time.perf_counter() - t0:.1f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
