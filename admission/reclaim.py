"""Rule 3: preemption follows evidence, then declaration.

Workloads with a measured cost per completed unit (µJ per completed unit) are reclaimed
worst-first; workloads that have completed nothing are unmeasured, not wasteful, and are
ordered by declared priority, lowest first, after every measured one. Among equals the most
recently admitted goes first (it has the least work to lose), as in Kueue.

The two groups are never compared on one number: an unmeasured workload's cost per unit is
``None``, not 0 (which would rank it the most efficient and make it unreclaimable among the
measured) nor infinity (which would make every new workload the first victim).
"""

from __future__ import annotations

from collections.abc import Iterable

from admission.claims import Workload
from admission.model import Pool


def reclaim_key(w: Workload) -> tuple[int, int, int, int]:
    """Sort key: measured group first (worst µJ/unit first), then unmeasured by priority."""
    cost = w.uj_per_completed_unit
    if cost is None:
        return (1, w.priority, -w.seq, 0)
    return (0, -cost, w.priority, -w.seq)


def order(workloads: Iterable[Workload]) -> list[Workload]:
    """Workloads in the order rule 3 reclaims them."""
    return sorted(workloads, key=reclaim_key)


def leaves_under(pool: Pool) -> list[Pool]:
    """The leaf pools of ``pool``'s subtree (the pool itself when it is a leaf)."""
    out: list[Pool] = []
    stack = [pool]
    while stack:
        p = stack.pop()
        if p.children:
            stack.extend(p.children)
        else:
            out.append(p)
    return out


def borrowing_under(w: Workload, over: Pool) -> bool:
    """True while every pool from ``w``'s leaf up to (not including) ``over`` uses more than its
    own guarantee, i.e. ``w`` is part of what some child of ``over`` borrows from it.

    A leaf that borrows inside a group which is itself within its guarantee is spending the
    group's own guarantee; taking it back would make that group pay for another's borrowing.
    """
    for x in w.pool.up:
        if x is over:
            return True
        if x.used_uj <= x.guarantee_uj:
            return False
    return True


def borrowing_candidates(over: Pool, exclude: Pool, gang: str | None = None) -> list[Workload]:
    """Workloads that could give back reserved µJ under ``over``, in rule-3 order: those in
    leaves reached from ``over`` through pools that all use more than their own guarantee
    (borrowers at every level down from ``over``), other than the claimant's pool and the
    claimant's own gang."""
    found: list[Workload] = []
    stack = [c for c in over.children if c.used_uj > c.guarantee_uj]
    while stack:
        p = stack.pop()
        if p.children:
            stack.extend(c for c in p.children if c.used_uj > c.guarantee_uj)
        elif p is not exclude:
            found.extend(
                w for w in p.workloads.values() if w.reserved_uj > 0 and (gang is None or w.gang != gang)
            )
    return order(found)
