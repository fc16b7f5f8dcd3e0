"""Property tests: random forests and random claim/complete/release/rollover sequences.

The engine keeps per-pool aggregates incrementally; these tests recompute everything from
scratch (an oracle written as a plain recursion over the tree) and check after every step:
- the incremental aggregates equal the recomputed ones;
- no pool's admitted µJ exceeds guarantee + its weighted share of sibling surplus (checked on
  the path of every admitted claim, at the moment it is admitted);
- no estimator claim ever borrows;
- gangs are never partially admitted, a refused gang leaves no trace, and a gang that loses
  a member to reclaim loses all of them;
- the arrival order of borrowers does not change what each one may borrow;
- a guarantee is a guarantee: while nothing is spent, a claim inside its pool's remaining
  guarantee with devices free is admitted (reclaiming borrowers as needed);
- pending is never a disguised denial: every pending claim or gang is admitted by a fresh
  engine on the same forest (an idle window), and every denied one is refused there too.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.claims import Claim
from admission.engine import Admission
from admission.model import build_forest
from admission.reclaim import leaves_under

GRADE = st.sampled_from(["measured", "modelled", "estimator"])


@st.composite
def forests(draw):
    """1-2 roots, depth <= 3, each child's guarantees a slice of what its parent has left."""
    tables = []
    counter = [0]

    def grow(parent, energy, devices, depth):
        counter[0] += 1
        name = f"p{counter[0]}"
        tables.append(
            {"name": name, "parent": parent, "energy_uj": energy, "devices": devices,
             "weight": draw(st.integers(1, 4))}
        )
        if depth >= 3:
            return
        n = draw(st.integers(0 if depth else 1, 3 - depth))
        left_e, left_d = energy, devices
        for _ in range(n):
            e = draw(st.integers(left_e // 4 if left_e else 0, left_e))
            d = draw(st.integers(left_d // 4, left_d))
            left_e, left_d = left_e - e, left_d - d
            grow(name, e, d, depth + 1)

    for _ in range(draw(st.integers(1, 2))):
        grow(None, draw(st.integers(1, 2000)), draw(st.integers(4, 24)), 0)
    return build_forest(tables)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(0, 99), st.integers(0, 1), st.integers(0, 250), GRADE, st.integers(0, 3)),
        st.tuples(st.just("gang"), st.lists(st.tuples(st.integers(0, 99), st.integers(0, 2), st.integers(0, 200), GRADE), min_size=2, max_size=3)),
        st.tuples(st.just("complete"), st.integers(0, 99), st.integers(0, 3), st.integers(0, 400)),
        st.tuples(st.just("release"), st.integers(0, 99)),
        st.tuples(st.just("rollover")),
    ),
    min_size=8,
    max_size=60,
)


class Oracle:
    """Usage recomputed from scratch from the engine's workloads and the spends we made."""

    def __init__(self, eng: Admission) -> None:
        self.eng = eng
        self.spent: dict[str, int] = {}

    def used(self, pool) -> int:
        return sum(
            self.spent.get(leaf.name, 0) + sum(w.reserved_uj for w in leaf.workloads.values())
            for leaf in leaves_under(pool)
        )

    def cap(self, pool) -> int:
        """guarantee + weight/Σweights x (parent cap - guarantee - siblings' in-guarantee use)."""
        parent = pool.parent
        if parent is None:
            return pool.guarantee_uj
        others = sum(min(self.used(c), c.guarantee_uj) for c in parent.children if c is not pool)
        surplus = max(0, self.cap(parent) - pool.guarantee_uj - others)
        return pool.guarantee_uj + surplus * pool.weight // sum(c.weight for c in parent.children)

    def check_aggregates(self) -> None:
        for p in self.eng.forest.pools.values():
            assert p.used_uj == self.used(p), p.name
            assert p.used_uj == p.spent_uj + p.reserved_uj
            assert p.children_in_guarantee_uj == sum(min(self.used(c), c.guarantee_uj) for c in p.children)
            devs = sum(w.devices for leaf in leaves_under(p) for w in leaf.workloads.values())
            assert p.devices_used == devs <= p.devices, p.name


def _uj(leaf, pct: int) -> int:
    """Claims sized as a percentage of their pool's guarantee, so boundaries are hit often."""
    return leaf.guarantee_uj * pct // 100 if leaf.guarantee_uj else pct


def _snapshot(eng):
    return {n: (p.used_uj, p.devices_used) for n, p in eng.forest.pools.items()}, set(eng.workloads)


def _check_rule4(forest, claims, verdicts) -> None:
    """A pending claim could fit some window (an idle one); a denied one could fit none."""
    decision = verdicts[0].decision
    if decision == "admitted":
        return
    fresh = Admission(build_forest(forest.to_dicts()))
    again = fresh.admit_gang(claims) if claims[0].gang else [fresh.admit(claims[0])]
    if decision == "pending":
        assert again[0].admitted, f"pending but could never fit: {verdicts[0].reason} / {again[0].reason}"
    else:
        assert again[0].decision == "denied", f"denied but fits an idle window: {verdicts[0].reason}"


def _check_gangs_whole(eng, verdicts, gang_of) -> None:
    """A preempted gang member never leaves the rest of its gang running."""
    running = {w.gang for w in eng.workloads.values()}
    for v in verdicts:
        for victim in v.preempted:
            gang = gang_of.get(victim)
            if gang is None:  # a lone workload: no gang to leave behind
                continue
            assert gang not in running, f"gang of {victim} left partly running"


def _check_admitted(oracle, claim, verdict, alone=True):
    leaf = oracle.eng.forest[claim.pool]
    for x in leaf.path:
        assert oracle.used(x) <= oracle.cap(x), f"{x.name} holds more than guarantee + share"
    if claim.grade == "estimator":
        assert verdict.borrowed_uj == 0, "an estimator claim borrowed"
        if alone:  # a gang's measured members may borrow after it; judge it by its verdict
            assert oracle.used(leaf) <= leaf.guarantee_uj, "an estimator claim borrowed"
    assert verdict.from_guarantee_uj + verdict.borrowed_uj == claim.estimate_uj


@settings(max_examples=150, deadline=None)
@given(forests(), OPS)
def test_random_sequences_keep_every_invariant(forest, ops):
    eng = Admission(forest)
    oracle = Oracle(eng)
    leaves = forest.leaves()
    gang_of: dict[str, str] = {}
    n = 0
    for op in ops:
        if op[0] == "claim":
            n += 1
            leaf = leaves[op[1] % len(leaves)]
            c = Claim(f"c{n}", leaf.name, op[2], _uj(leaf, op[3]), op[4], op[5])
            honoured = (
                c.estimate_uj <= leaf.guarantee_uj - leaf.used_uj
                and leaf.devices_used + c.devices <= leaf.devices
                and all(r.spent_uj == 0 for r in forest.roots)
            )
            v = eng.admit(c)
            assert v.admitted or not honoured, f"own guarantee not honoured: {v.reason}"
            _check_rule4(forest, [c], [v])
            _check_gangs_whole(eng, [v], gang_of)
            if v.admitted:
                _check_admitted(oracle, c, v)
        elif op[0] == "gang":
            n += 1
            members = [
                Claim(f"c{n}.{i}", leaves[li % len(leaves)].name, d, _uj(leaves[li % len(leaves)], e), g, 0, f"g{n}")
                for i, (li, d, e, g) in enumerate(op[1])
            ]
            gang_of.update((c.id, c.gang) for c in members)
            before = _snapshot(eng)
            vs = eng.admit_gang(members)
            _check_gangs_whole(eng, vs, gang_of)
            assert len({v.decision for v in vs}) == 1, "a gang was partially admitted"
            _check_rule4(forest, members, vs)
            if vs[0].admitted:
                assert all(c.id in eng.workloads for c in members), "a member was preempted"
                for c, v in zip(members, vs, strict=True):
                    _check_admitted(oracle, c, v, alone=False)
            else:
                assert _snapshot(eng) == before, "a refused gang left usage behind"
        elif op[0] == "complete" and eng.workloads:
            w = sorted(eng.workloads)[op[1] % len(eng.workloads)]
            leaf = eng.workloads[w].pool.name
            eng.complete(w, op[2], op[3])
            oracle.spent[leaf] = oracle.spent.get(leaf, 0) + op[3]
        elif op[0] == "release" and eng.workloads:
            eng.release(sorted(eng.workloads)[op[1] % len(eng.workloads)])
        elif op[0] == "rollover":
            eng.rollover()
            oracle.spent.clear()
        oracle.check_aggregates()


@settings(max_examples=150, deadline=None)
@given(
    weights=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    lender_use=st.integers(0, 300),
    claims=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 400)), min_size=1, max_size=12),
    order_seed=st.randoms(use_true_random=False),
)
def test_arrival_order_of_borrowers_does_not_change_their_shares(weights, lender_use, claims, order_seed):
    """Borrowers that have used their guarantee, and one lender: interleave the borrowers'
    claims in two different orders (each pool's own claims keep their order) and compare."""
    spec = [{"name": "org", "energy_uj": 300 * (len(weights) + 2), "devices": 100}]
    spec += [
        {"name": f"b{i}", "parent": "org", "energy_uj": 300, "devices": 16, "weight": w}
        for i, w in enumerate(weights)
    ]
    spec.append({"name": "lender", "parent": "org", "energy_uj": 300, "devices": 4, "weight": 2})

    def run(seq):
        eng = Admission(build_forest(spec))
        for i in range(len(weights)):
            assert eng.admit(Claim(f"own{i}", f"b{i}", 0, 300, "measured")).admitted
        if lender_use:
            assert eng.admit(Claim("l", "lender", 0, lender_use, "estimator")).admitted
        shares = {f"b{i}": eng.cap_uj(f"b{i}") - 300 for i in range(len(weights))}
        verdicts = {}
        for k, (pi, uj) in seq:
            pool = f"b{pi % len(weights)}"
            verdicts[k] = eng.admit(Claim(f"x{k}", pool, 0, uj, "measured")).decision
        borrowed = {f"b{i}": eng.forest[f"b{i}"].used_uj - 300 for i in range(len(weights))}
        return shares, verdicts, borrowed

    tagged = list(enumerate(claims))
    shuffled = tagged[:]
    order_seed.shuffle(shuffled)
    # keep each pool's own claims in their original relative order
    by_pool: dict[int, list] = {}
    for item in tagged:
        by_pool.setdefault(item[1][0] % len(weights), []).append(item)
    interleaved = [by_pool[item[1][0] % len(weights)].pop(0) for item in shuffled]
    first, second = run(tagged), run(interleaved)
    assert first == second
    shares, _, borrowed = first
    # org 300 x (n + 2) less n + 1 guarantees of 300 leaves 300 unassigned, plus the lender's idle
    surplus = 300 + (300 - lender_use)
    total_w = sum(weights) + 2
    for i, w in enumerate(weights):
        assert shares[f"b{i}"] == surplus * w // total_w  # the documented formula, by hand
        assert 0 <= borrowed[f"b{i}"] <= shares[f"b{i}"]


@settings(max_examples=40, deadline=None)
@given(forests(), OPS)
def test_every_decision_log_replays_identically(tmp_path_factory, forest, ops):
    """Whatever happened, an auditor rebuilding the engine from the log gets the same verdicts."""
    import orjson

    from admission.log import DecisionLog, audit
    from admission.simulate import Simulator, parse_events
    from schema import chainlog

    leaves = forest.leaves()
    lines, ids = [], []
    for n, op in enumerate(ops):
        if op[0] == "claim":
            leaf = leaves[op[1] % len(leaves)]
            ids.append(f"c{n}")
            lines.append({"type": "claim", "id": f"c{n}", "pool": leaf.name, "devices": op[2],
                          "estimate_uj": _uj(leaf, op[3]), "grade": op[4], "priority": op[5]})
        elif op[0] == "gang":
            for i, (li, d, e, g) in enumerate(op[1]):
                leaf = leaves[li % len(leaves)]
                ids.append(f"c{n}.{i}")
                lines.append({"type": "claim", "id": f"c{n}.{i}", "pool": leaf.name, "devices": d,
                              "estimate_uj": _uj(leaf, e), "grade": g, "gang": f"g{n}", "gang_size": len(op[1])})
        elif op[0] == "complete" and ids:
            lines.append({"type": "complete", "workload": ids[op[1] % len(ids)], "units": op[2], "uj": op[3]})
        elif op[0] == "release" and ids:
            lines.append({"type": "release", "workload": ids[op[1] % len(ids)]})
        elif op[0] == "rollover":
            lines.append({"type": "rollover"})
    tmp = tmp_path_factory.mktemp("log")
    (tmp / "events.jsonl").write_bytes(b"\n".join(orjson.dumps(x) for x in lines))
    log = DecisionLog(tmp / "d.jsonl", batch=7)
    Simulator(forest, log).run(parse_events(tmp / "events.jsonl", forest))  # bad ids: reported, skipped
    log.close()
    assert chainlog.verify(tmp / "d.jsonl") == []
    assert audit(tmp / "d.jsonl") == []


@settings(max_examples=150, deadline=None)
@given(
    forests(),
    st.lists(
        st.tuples(st.integers(0, 99), st.integers(1, 250), st.sampled_from(["measured", "modelled"]), st.booleans()),
        max_size=25,
    ),
    st.randoms(use_true_random=False),
)
def test_a_guarantee_is_a_guarantee_while_nothing_is_spent(forest, borrows, rnd):
    """Let graded claims and two-member gangs borrow all they may, then let every leaf claim
    what is left of its own guarantee, in random order: with nothing spent, each must be
    admitted, reclaiming; and no reclaim may leave part of a gang running."""
    eng = Admission(forest)
    leaves = forest.leaves()
    gangs: dict[str, set[str]] = {}
    for i, (li, pct, grade, gang) in enumerate(borrows):
        leaf = leaves[li % len(leaves)]
        if not gang:
            eng.admit(Claim(f"b{i}", leaf.name, 0, _uj(leaf, pct), grade))
            continue
        other = leaves[(li + 1) % len(leaves)]
        members = [Claim(f"g{i}.0", leaf.name, 0, _uj(leaf, pct), grade, 0, f"g{i}"),
                   Claim(f"g{i}.1", other.name, 0, _uj(other, pct // 2), grade, 0, f"g{i}")]
        if eng.admit_gang(members)[0].admitted:
            gangs[f"g{i}"] = {c.id for c in members}
    order = leaves[:]
    rnd.shuffle(order)
    for leaf in order:
        left = leaf.guarantee_uj - leaf.used_uj
        if left > 0:
            v = eng.admit(Claim(f"own-{leaf.name}", leaf.name, 0, left, "estimator"))
            assert v.admitted, f"{leaf.name}'s own {left} µJ refused: {v.reason}"
        for g, ids in gangs.items():
            running = ids & set(eng.workloads)
            assert running in (ids, set()), f"gang {g} left partly running: {sorted(running)}"
