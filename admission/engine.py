"""The admission engine: rules 1-6 over a pool forest, in integer microjoules and devices.

Normative order (rule 5): a claim is checked for **impossibility** first (it can never fit as
written: denied), then **devices** (pending until devices free up), then the **guarantee**
(fits the pool's own remaining guarantee: admitted, reclaiming borrowers if they ate it),
then **borrowing** (only for measured or modelled estimates, rule 1; within the pool's
weighted share of its siblings' surplus at every level up to its root, rule 6).

The surplus formula (docs/admission.md has the derivation). Walking the claimant's path from
its root down, with ``cap(root) = guarantee(root)`` and for each pool ``x`` with parent ``P``::

    S(x) = max(0, cap(P) - guarantee(x) - Σ_{c ∈ children(P), c ≠ x} min(used(c), guarantee(c)))
    cap(x) = guarantee(x) + S(x) * weight(x) // Σ_{c ∈ children(P)} weight(c)

A claim of E µJ fits when ``used(x) + E <= cap(x)`` for every ``x`` on the path. ``S(x)`` is
the sibling surplus: what the parent may hold minus what its other children use *inside their
own guarantees*. Borrowers' borrowing never enters it, and the weight sum runs over every
child (every potential borrower), so a borrower's share does not depend on who asked first.

Per claim the engine touches only the claimant's path: ``used_uj`` and
``children_in_guarantee_uj`` are kept on each pool and shifted incrementally.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from admission import explain, reclaim
from admission.claims import Claim, ClaimError, Verdict, Workload, check_int
from admission.model import Forest, Pool, build_forest
from admission.usage import usage_rows


class Admission:
    """Admission state for one forest: admitted workloads and per-pool usage this window."""

    def __init__(self, forest: Forest) -> None:
        self.forest = forest
        self.workloads: dict[str, Workload] = {}
        self._seq = 0
        self._idle: Admission | None = None  # an empty twin of the forest, for gang impossibility
        self._gangs: dict[str, dict[str, Workload]] = {}  # running members by gang id
        # Monotone counters of what was ever freed (releases, preemptions, undos) and of
        # windows: a pending claim cannot fit again before enough is freed (``shortfall``).
        self.freed_uj = 0
        self.freed_devices = 0
        self.window = 0

    # ----------------------------------------------------------------- aggregates
    @staticmethod
    def _move(leaf: Pool, d_used: int, d_devices: int) -> None:
        """Apply a change of used µJ and devices at ``leaf`` to it and every ancestor (O(depth)).

        The hot path of admission and release: one pass up the path, each pool's
        ``children_in_guarantee_uj`` at its parent shifted by the change of
        ``min(used, guarantee)`` (often zero: a borrower stays above its guarantee).
        """
        for x in leaf.up:
            old = x.used_uj
            new = old + d_used
            x.used_uj = new
            x.devices_used += d_devices
            parent = x.parent
            if parent is not None:
                g = x.guarantee_uj
                if old < g or new < g:
                    parent.children_in_guarantee_uj += (new if new < g else g) - (old if old < g else g)

    @classmethod
    def _shift(cls, leaf: Pool, d_spent: int, d_reserved: int) -> None:
        """A meter reading: ``d_spent`` µJ spent, ``d_reserved`` drawn from the reservation."""
        if d_spent:
            for x in leaf.up:
                x.spent_uj += d_spent
        cls._move(leaf, d_spent + d_reserved, 0)

    def _attach(self, w: Workload) -> None:
        w.pool.workloads[w.id] = w
        self.workloads[w.id] = w
        if w.gang is not None:
            self._gangs.setdefault(w.gang, {})[w.id] = w
        self._move(w.pool, w.reserved_uj, w.devices)

    def _detach(self, w: Workload) -> None:
        del w.pool.workloads[w.id]
        del self.workloads[w.id]
        if w.gang is not None:
            members = self._gangs[w.gang]
            del members[w.id]
            if not members:
                del self._gangs[w.gang]
        self.freed_uj += w.reserved_uj
        self.freed_devices += w.devices
        self._move(w.pool, -w.reserved_uj, -w.devices)

    @staticmethod
    def _first_over(leaf: Pool, e: int) -> tuple[Pool, int] | None:
        """The topmost pool on ``leaf``'s path that ``e`` more µJ would push past its cap."""
        path = leaf.path
        root = path[0]
        cap = root.guarantee_uj
        if root.used_uj + e > cap:
            return root, cap
        for i in range(1, len(path)):
            x = path[i]
            parent = path[i - 1]
            g = x.guarantee_uj
            u = x.used_uj
            s = cap - g - parent.children_in_guarantee_uj + (u if u < g else g)
            cap = g + (s * x.weight // parent.children_weight if s > 0 else 0)
            if u + e > cap:
                return x, cap
        return None

    def cap_uj(self, name: str) -> int:
        """What pool ``name`` may hold right now: guarantee + weighted share of sibling surplus."""
        pool = self._pool(name)
        cap = pool.path[0].guarantee_uj
        for i in range(1, len(pool.path)):
            x, parent = pool.path[i], pool.path[i - 1]
            s = cap - x.guarantee_uj - parent.children_in_guarantee_uj + min(x.used_uj, x.guarantee_uj)
            cap = x.guarantee_uj + (s * x.weight // parent.children_weight if s > 0 else 0)
        return cap

    # ----------------------------------------------------------------- lookups
    def _pool(self, name: str) -> Pool:
        try:
            return self.forest.pools[name]
        except KeyError:
            known = ", ".join(sorted(self.forest.pools)[:10])
            raise ClaimError(f"unknown pool '{name}'; defined pools include: {known}") from None

    def _leaf(self, claim: Claim) -> Pool:
        pool = self._pool(claim.pool)
        if pool.children:
            raise ClaimError(
                f"claim '{claim.id}' names pool '{claim.pool}', which has children; claims go "
                "to leaf pools (inner pools only group and lend)"
            )
        if claim.id in self.workloads:
            raise ClaimError(f"claim '{claim.id}' is already admitted; workload ids must be unique")
        return pool

    # ----------------------------------------------------------------- rules
    def _decide(self, pool: Pool, claim: Claim, who: str = "") -> tuple[Verdict, list[Workload]]:
        """Steps 2-4 of the normative order for a possible claim; commits it when admitted."""
        e = claim.estimate_uj
        if pool.devices_used + claim.devices > pool.devices:
            return explain.wait_devices(pool, claim, who), []
        remaining = pool.guarantee_uj - pool.used_uj
        if e <= remaining:
            over = self._first_over(pool, e)
            victims = [] if over is None else self._reclaim(pool, e, claim.gang)
            if victims is None:
                assert over is not None
                return explain.wait_reclaim(pool, claim, over, who), []
            return self._commit(pool, claim, "guarantee", e, victims, who), victims
        if claim.grade == "estimator":  # rule 1: a guess never borrows
            return explain.wait_own_guarantee(pool, claim, remaining, who), []
        over = self._first_over(pool, e)
        if over is not None:
            return explain.wait_surplus(claim, over, who), []
        return self._commit(pool, claim, "borrowing", remaining if remaining > 0 else 0, [], who), []

    def _commit(
        self, pool: Pool, claim: Claim, step: str, from_g: int, victims: list[Workload], who: str
    ) -> Verdict:
        self._seq += 1
        e = claim.estimate_uj
        # positional arguments: the hot path builds one Workload and one Verdict per admission
        self._attach(
            Workload(claim.id, pool, claim.devices, claim.priority, claim.grade, self._seq, e, 0, 0, claim.gang)
        )
        borrowed = e - from_g
        return Verdict(
            claim.id, "admitted",
            f"{who}borrowing {borrowed} µJ of the sibling surplus" if borrowed else f"{who}within the guarantee",
            claim.grade, step, from_g, borrowed, claim.devices, "",
            [w.id for w in victims] if victims else [],
        )

    def _reclaim(self, pool: Pool, e: int, gang: str | None) -> list[Workload] | None:
        """Take borrowers back in rule-3 order until ``e`` more µJ in ``pool`` fit; None if
        they cannot (what borrowers hold is already spent), with nothing changed.

        The claim is placed provisionally first, so "borrowing" is judged with it: a group
        that only goes over its guarantee because of this claim has a leaf borrowing the
        claimant's idle guarantee, and that leaf is a victim. Victims come from under the
        topmost pool over its cap, through pools all over their guarantee; when that pool
        fits, the contention can only have moved down the path, and the search follows it.
        """
        self._move(pool, e, 0)
        victims: list[Workload] = []
        try:
            while (over := self._first_over(pool, 0)) is not None:
                top, taken = over[0], False
                for w in reclaim.borrowing_candidates(top, exclude=pool, gang=gang):
                    if w.id not in self.workloads or not reclaim.borrowing_under(w, top):
                        continue  # taken with its gang, or its chain is back within its guarantee
                    # Rule 2 holds while running too: a gang member goes with its whole gang.
                    for m in [w] if w.gang is None else list(self._gangs[w.gang].values()):
                        self._detach(m)
                        victims.append(m)
                    taken = True
                    now = self._first_over(pool, 0)
                    if now is None or now[0] is not top:
                        break
                if not taken:
                    for w in reversed(victims):
                        self._attach(w)
                    return None
            return victims
        finally:
            self._move(pool, -e, 0)

    # ----------------------------------------------------------------- public API
    def admit(self, claim: Claim) -> Verdict:
        """Decide one claim (rules 1, 3-6); admitted claims hold their estimate as reserved."""
        pool = self.forest.pools.get(claim.pool)
        if pool is None or pool.children or claim.id in self.workloads or claim.gang is not None:
            pool = self._leaf(claim)  # raises the error that says which
            raise ClaimError(
                f"claim '{claim.id}' belongs to gang '{claim.gang}'; submit the whole gang with "
                "admit_gang (rule 2: all members or none)"
            )
        e = claim.estimate_uj
        if (
            claim.devices > pool.devices
            or e > pool.ceiling_uj
            or (e > pool.guarantee_uj and claim.grade == "estimator")
        ):
            grade_e = e if claim.grade == "estimator" else 0
            return explain.denied(pool, claim, e, grade_e, claim.devices, "")
        return self._decide(pool, claim)[0]

    def admit_gang(self, claims: Sequence[Claim]) -> list[Verdict]:
        """Rule 2: admit every member or none, judged on the gang's joules *and* devices."""
        if not claims:
            return []
        gang = claims[0].gang
        if gang is None or any(c.gang != gang for c in claims):
            raise ClaimError("gang members must all carry the same 'gang' id")
        if gang in self._gangs:
            raise ClaimError(
                f"gang '{gang}' already has running members ({', '.join(sorted(self._gangs[gang]))}); "
                "a gang is admitted once: give a new gang a new id"
            )
        pools = [self._leaf(c) for c in claims]
        if len({c.id for c in claims}) != len(claims):
            raise ClaimError(f"gang '{gang}' lists the same claim id twice")
        totals: dict[str, list[int]] = {}
        for c in claims:
            t = totals.setdefault(c.pool, [0, 0, 0])
            t[0] += c.estimate_uj
            t[1] += c.estimate_uj if c.grade == "estimator" else 0
            t[2] += c.devices
        for c, pool in zip(claims, pools, strict=True):
            e, e_est, d = totals[c.pool]
            if d > pool.devices or e > pool.ceiling_uj or e_est > pool.guarantee_uj:
                denied = explain.denied(pool, c, e, e_est, d, f"gang '{gang}' (all members): ")
                return [self._copy(denied, m) for m in claims]
        never = self._never_fits(claims) if len(totals) > 1 else None
        if never is not None:
            denied = explain.gang_never_fits(claims[0], gang, *never)
            return [self._copy(denied, m) for m in claims]
        # Members that fit their pool's remaining guarantee go first (estimators before the
        # rest), so a guess takes the guarantee and measured members borrow; then the whole
        # gang must leave every pool on its members' paths within its cap.
        ranked = sorted(
            range(len(claims)),
            key=lambda i: (
                claims[i].estimate_uj > pools[i].guarantee_uj - pools[i].used_uj,
                claims[i].grade != "estimator",
            ),
        )
        done: list[tuple[Verdict, list[Workload]]] = []
        for i in ranked:
            verdict, victims = self._decide(pools[i], claims[i], f"gang '{gang}' member '{claims[i].id}': ")
            if not verdict.admitted:
                self._rollback(done)
                return [self._copy(verdict, m) for m in claims]
            done.append((verdict, victims))
        for pool in {id(p): p for p in pools}.values():
            over = self._first_over(pool, 0)
            if over is not None:
                excess = over[0].used_uj - over[1]
                self._rollback(done)
                first = claims[ranked[0]]
                pending = Verdict(
                    first.id, "pending", f"gang '{gang}' as a whole would leave pool "
                    f"'{over[0].name}' beyond its weighted share (rule 6)", first.grade,
                    "borrowing", waits_for=f"{excess} µJ under pool "
                    f"'{over[0].name}' (releases or the window rollover)",
                )
                return [self._copy(pending, m) for m in claims]
        by_id = {v.claim: v for v, _ in done}
        return [by_id[c.id] for c in claims]

    def _never_fits(self, claims: Sequence[Claim]) -> tuple[str, int, int, bool] | None:
        """Rule 4 for a gang spread over several pools: place the whole gang on an idle twin
        of the forest (every other pool empty, nothing spent: the most any window can offer,
        since a cap only shrinks as others use more). If some pool on a member's path is then
        over its cap, the gang can never fit as written: ``(pool, µJ it needs, cap, is a root)``.

        Per-pool totals are not enough: two members that each fit their own pool's ceiling
        may together exceed their common parent, or each shrink the other's weighted share.
        """
        if self._idle is None:
            self._idle = Admission(build_forest(self.forest.to_dicts(), source="idle twin"))
        twin = self._idle
        placed = [
            Workload(c.id, twin.forest.pools[c.pool], c.devices, c.priority, c.grade, 0, c.estimate_uj)
            for c in claims
        ]
        for w in placed:
            twin._attach(w)
        try:
            for leaf in {id(w.pool): w.pool for w in placed}.values():
                over = twin._first_over(leaf, 0)
                if over is not None:
                    return over[0].name, over[0].used_uj, over[1], over[0].parent is None
            return None
        finally:
            for w in reversed(placed):
                twin._detach(w)

    def _rollback(self, done: list[tuple[Verdict, list[Workload]]]) -> None:
        """Undo a partial gang: detach its members, re-attach the workloads they preempted."""
        for v, victims in reversed(done):
            self._detach(self.workloads[v.claim])
            for w in reversed(victims):
                self._attach(w)
        self._seq -= len(done)

    @staticmethod
    def _copy(v: Verdict, member: Claim) -> Verdict:
        return Verdict(
            member.id, v.decision, v.reason, member.grade, v.step, devices=member.devices,
            waits_for=v.waits_for,
        )

    def complete(self, workload: str, units: int, uj: int) -> Workload:
        """Record ``units`` completed units and ``uj`` metered µJ for a running workload."""
        return self._spend(workload, units, uj)

    def meter(self, workload: str, uj: int) -> Workload:
        """Record a meter reading (µJ spent) for a running workload without completed units."""
        return self._spend(workload, 0, uj)

    def _spend(self, workload: str, units: int, uj: int) -> Workload:
        w = self._workload(workload)
        check_int("units", units, 0)
        check_int("uj", uj, 0)
        draw = uj if uj < w.reserved_uj else w.reserved_uj
        w.reserved_uj -= draw
        w.spent_uj += uj
        w.units += units
        # Spending past the estimate is charged to the pool: a tenant bears its own mis-estimate.
        self._shift(w.pool, uj, -draw)
        return w

    def release(self, workload: str) -> Workload:
        """End a workload: its unspent reservation and devices return; what it spent stays."""
        w = self._workload(workload)
        self._detach(w)
        return w

    def _workload(self, workload: str) -> Workload:
        try:
            return self.workloads[workload]
        except KeyError:
            raise ClaimError(f"no running workload '{workload}'; was it admitted (and not yet released)?") from None

    def shortfall(self, claim: Claim) -> tuple[int, int]:
        """A lower bound on the µJ and devices that must be freed before ``claim``, just found
        pending in this window, could be admitted; ``(1, 0)`` when any free might do.

        Between windows usage only falls when a reservation is freed, and freeing ``r`` µJ
        lowers any pool's excess over its cap by at most ``r``: the pool's own usage falls by
        at most ``r`` (the freed workload is below it), or its cap rises by at most ``r`` (a
        sibling's in-guarantee use fell, or the parent's cap rose), never both. So a claim
        ``D`` µJ over at some pool cannot fit before ``D`` µJ are freed; the queue uses this
        to skip re-deciding claims that cannot have changed.
        """
        pool = self._pool(claim.pool)
        short_devices = claim.devices - (pool.devices - pool.devices_used)
        if short_devices > 0:
            return 0, short_devices
        e = claim.estimate_uj
        remaining = pool.guarantee_uj - pool.used_uj
        if e <= remaining:
            return 1, 0  # inside the guarantee, but borrowers' joules are spent
        own = e - remaining  # the guarantee path needs this much back in the pool itself
        if claim.grade == "estimator":
            return own, 0
        over = self._first_over(pool, e)
        return (0, 0) if over is None else (min(own, over[0].used_uj + e - over[1]), 0)

    def rollover(self) -> None:
        """Start a new window: spent µJ return to zero; running workloads keep their reservation."""
        self.window += 1
        for p in self.forest.pools.values():
            p.used_uj -= p.spent_uj
            p.spent_uj = 0
        for p in self.forest.pools.values():
            p.children_in_guarantee_uj = sum(min(c.used_uj, c.guarantee_uj) for c in p.children)

    def reclaim_order(self, pool: str) -> list[Workload]:
        """Running workloads of ``pool``'s subtree in the order rule 3 would reclaim them."""
        p = self._pool(pool)
        return reclaim.order(w for leaf in reclaim.leaves_under(p) for w in leaf.workloads.values())

    def usage(self) -> list[dict[str, Any]]:
        """Per-pool energy and devices against the guarantees, parents before children."""
        return usage_rows(self.forest, self.cap_uj)
