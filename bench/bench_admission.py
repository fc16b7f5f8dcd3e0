"""pool/1 admission throughput: 100,000 claims over a forest of 1,000 pools (target >= 50,000/s).

Forest: 10 roots x 9 groups x 10 leaves (10 + 90 + 900 = 1,000 pools), each level holding its
children's guarantees plus 5 % unassigned surplus, weights 1-4. Claims are drawn with a fixed
seed: a random leaf, 10-35 % of the leaf's guarantee, grades measured/modelled/estimator in
40/30/30 proportions, 0-2 devices; one claim in twenty asks for 110-200 % of its leaf's guarantee. Running workloads complete some units now and then and
are released first-in-first-out once 3,000 are running, so pools keep filling, borrowing and
draining. With 5 % unassigned at every level and leaves about three-quarters full on
average, this mix never needs a reclaim (the printed ``preempted`` count is 0), so a reclaim
storm measures the preemption path separately. The figure counts verdicts over the wall time
of the whole replay, releases and completions included. A last pass writes every verdict to a
batched hash-chained decision log.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections import deque
from pathlib import Path

from admission.claims import Claim
from admission.engine import Admission
from admission.log import DecisionLog
from admission.model import Forest, build_forest

ROOTS, GROUPS, LEAVES = 10, 9, 10
LEAF_UJ = 1_000_000_000  # 1 kJ per leaf per window
CLAIMS = 100_000
RUNNING = 3_000
GRADES = ("measured",) * 4 + ("modelled",) * 3 + ("estimator",) * 3


def forest(rng: random.Random) -> Forest:
    tables = []
    group_uj = LEAF_UJ * LEAVES * 21 // 20
    root_uj = group_uj * GROUPS * 21 // 20
    for r in range(ROOTS):
        tables.append({"name": f"r{r}", "energy_uj": root_uj, "devices": 12 * LEAVES * GROUPS})
        for g in range(GROUPS):
            gname = f"r{r}g{g}"
            tables.append({"name": gname, "parent": f"r{r}", "energy_uj": group_uj,
                           "devices": 12 * LEAVES, "weight": rng.randint(1, 4)})
            for leaf in range(LEAVES):
                tables.append({"name": f"{gname}l{leaf}", "parent": gname, "energy_uj": LEAF_UJ,
                               "devices": 12, "weight": rng.randint(1, 4)})
    return build_forest(tables)


def claims(f: Forest, rng: random.Random) -> list[Claim]:
    leaves = [p.name for p in f.leaves()]
    out = []
    for i in range(CLAIMS):
        big = rng.random() < 0.05  # beyond the guarantee: denied as a guess, borrowing if graded
        uj = rng.randint(LEAF_UJ * 11 // 10, LEAF_UJ * 2) if big else rng.randint(LEAF_UJ // 10, LEAF_UJ * 35 // 100)
        out.append(Claim(f"w{i}", rng.choice(leaves), rng.randint(0, 2), uj, rng.choice(GRADES), rng.randint(0, 9)))
    return out


def replay(f: Forest, batch: list[Claim], log: DecisionLog | None) -> tuple[float, dict[str, int]]:
    """Replay ``batch``; the loop keeps its own bookkeeping to plain locals and dict
    increments so that the figure measures the engine, not the harness."""
    eng = Admission(f)
    admit, complete, release, workloads = eng.admit, eng.complete, eng.release, eng.workloads
    running: deque[str] = deque()
    counts = {"admitted": 0, "pending": 0, "denied": 0, "preempted": 0}
    t0 = time.perf_counter()
    for i, c in enumerate(batch):
        v = admit(c)
        decision = v.decision
        counts[decision] += 1
        if v.preempted:
            counts["preempted"] += len(v.preempted)
        if log is not None:
            log.append({"kind": "claim", "claims": [c.to_dict()], "verdicts": [v.to_dict()]})
        if decision == "admitted":
            running.append(c.id)
            if len(running) > RUNNING:
                wid = running.popleft()
                if wid in workloads:  # it may have been preempted
                    release(wid)
        if i % 7 == 0 and running and running[-1] in workloads:
            complete(running[-1], 1, c.estimate_uj // 3)
        if i % 20_000 == 19_999:
            eng.rollover()
    if log is not None:
        log.close()
    return time.perf_counter() - t0, counts


def reclaim_storm(f: Forest, rounds: int = 3) -> tuple[float, int, int]:
    """The slow path: in every group the first leaf borrows all it may in 10 % chunks, then
    every other leaf claims its whole guarantee as a guess, reclaiming the borrowed joules."""
    eng = Admission(f)
    groups: dict[str, list] = {}
    for leaf in f.leaves():
        groups.setdefault(leaf.parent.name if leaf.parent else leaf.name, []).append(leaf)
    n = preempted = 0
    t0 = time.perf_counter()
    for _ in range(rounds):
        for leaves in groups.values():
            for k in range(30):
                n += 1
                eng.admit(Claim(f"x{n}", leaves[0].name, 0, LEAF_UJ // 10, "measured", k % 5))
        for leaves in groups.values():
            for leaf in leaves[1:]:
                n += 1
                preempted += len(eng.admit(Claim(f"x{n}", leaf.name, 0, LEAF_UJ, "estimator")).preempted)
        for wid in list(eng.workloads):
            eng.release(wid)
        eng.rollover()
    return time.perf_counter() - t0, n, preempted


def main() -> None:
    rng = random.Random(7)
    f = forest(rng)
    batch = claims(f, rng)
    print(f"forest: {len(f)} pools ({len(f.roots)} roots, {len(f.leaves())} leaves); {CLAIMS:,} claims")
    # Best of three fresh replays, as timeit does: the machine is shared, and the minimum is
    # the run least disturbed by other work; the median is printed beside it.
    runs, cpu = [], []
    for _ in range(3):
        f = forest(random.Random(7))
        c0 = time.process_time()
        elapsed, counts = replay(f, batch, None)
        cpu.append(time.process_time() - c0)
        runs.append(elapsed)
    best, median = min(runs), sorted(runs)[1]
    print(f"admission: {CLAIMS / best:,.0f} verdicts/s best of 3 ({best:.2f} s; median "
          f"{CLAIMS / median:,.0f}/s; target >= 50,000/s)")
    # CPU time is what the engine costs whatever else runs on the machine; when the wall
    # figure is far below it, the process was waiting for a core, not working.
    print(f"  per CPU-second: {CLAIMS / min(cpu):,.0f} verdicts (best of 3); "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("  verdicts: " + ", ".join(f"{k} {counts[k]:,}" for k in ("admitted", "pending", "denied", "preempted")))
    elapsed, n, preempted = reclaim_storm(forest(random.Random(7)))
    print(f"reclaim storm: {n / elapsed:,.0f} verdicts/s ({n:,} claims, {preempted:,} preemptions, "
          f"{elapsed:.2f} s, releases included)")
    with tempfile.TemporaryDirectory() as tmp:
        f = forest(random.Random(7))
        log = DecisionLog(Path(tmp) / "decisions.jsonl", batch=4096)
        elapsed, _ = replay(f, batch, log)
        size = (Path(tmp) / "decisions.jsonl").stat().st_size
    print(f"with the hash-chained decision log: {CLAIMS / elapsed:,.0f} verdicts/s "
          f"({elapsed:.2f} s, {size / 1e6:.1f} MB, one fsync per 4,096 records)")
