"""The fold on service names chosen to collide in the C Folder's name table (hash flooding).

The archive of the aggregate bench's ``1,000 services, changing`` scenario (the agent's own
window bodies: each window a draw of about 1,000 services from 1,500), folded by the local
engine twice: with the 1,500 names replaced by names whose old name-table hash (FNV-1a,
``_fold.c`` up to FOLD_VERSION 14) shares its low 13 bits (``bench/collide.py``), and by the
same prefixes with a fixed tail (same lengths). With an unkeyed hash the first is a flood:
every lookup walks the whole cluster. With the keyed hash both must cost the same.

Reported: microseconds per line for each (CPU thread time, best of 3, the two interleaved)
and how many lines the C byte path folded (a declined line would be measuring another path).
``BENCH_COLLIDE_WINDOWS`` (default 600) sets the lines.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import time
from pathlib import Path

import orjson

from aggregator.engines import run_local
from aggregator.files import discover
from aggregator.fold.fast import BYTE_PATH
from aggregator.read import Period
from bench.agent_lines import window_bodies, write_archive
from bench.collide import colliding_names, fnv1a, ordinary_names

N_WINDOWS = int(os.environ.get("BENCH_COLLIDE_WINDOWS", "600"))
AGENTS = 4
POOL = 1500  # agent_lines: services * 1.5 names when changing


def _renamed(bodies: list[dict], names: list[str]) -> list[dict]:
    """The bodies with ``svc-NNNN`` (agent_lines' pool) renamed to ``names[NNNN]`` everywhere."""
    pattern = re.compile(rb'"svc-(\d{4})(-7d9f-x2k4)?"')

    def sub(m: re.Match) -> bytes:
        return b'"' + names[int(m[1])].encode() + (m[2] or b"") + b'"'

    return [orjson.loads(pattern.sub(sub, orjson.dumps(b))) for b in bodies]


def main() -> None:
    logging.getLogger("carbonspan.aggregate").setLevel(logging.ERROR)
    period = Period.parse("2026-11-01", "2026-12-31")
    t0 = time.perf_counter()
    bodies = window_bodies(1000, 4, changing=True)
    hot = colliding_names(POOL)
    cold = ordinary_names(hot)
    homes = len({fnv1a(n.encode()) & 8191 for n in hot}), len({fnv1a(n.encode()) & 8191 for n in cold})
    print(f"{POOL:,} names, {len(hot[0])} bytes each; distinct low-13-bit homes under the old hash: "
          f"colliding {homes[0]:,}, ordinary {homes[1]:,} ({time.perf_counter() - t0:.1f} s to build)")
    with tempfile.TemporaryDirectory(prefix="bench-collide-") as tmp:
        archives = {}
        for label, names in (("colliding", hot), ("ordinary", cold)):
            root = Path(tmp) / label
            write_archive(root, _renamed(bodies, names), N_WINDOWS, AGENTS, None)
            archives[label] = discover([str(root)])
        lines = (N_WINDOWS // AGENTS) * AGENTS
        best = dict.fromkeys(archives, float("inf"))
        reports = {}
        for _ in range(3):
            for label, files in archives.items():
                before = BYTE_PATH["folded"]
                c0 = time.thread_time()
                state = run_local(files, period)
                best[label] = min(best[label], time.thread_time() - c0)
                folded = BYTE_PATH["folded"] - before
                reports[label] = (state.windows, folded, len(state.services))
        for label, (windows, folded, services) in reports.items():
            assert windows == lines, (windows, lines)
            print(f"  {label:>9} names: {best[label] / lines * 1e6:8.1f} us/line (CPU, best of 3), "
                  f"{folded:,} of {lines:,} lines folded from their bytes, {services:,} services")
        print(f"  colliding / ordinary: {best['colliding'] / best['ordinary']:.2f}")


if __name__ == "__main__":
    main()
