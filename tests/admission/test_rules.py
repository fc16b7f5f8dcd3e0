"""Rules 1-6, table-driven in the style of Kueue's scheduler tests: state in, verdicts and
preemptions out. Each case builds a forest, applies the state (admissions that must succeed,
completions, releases), submits the claims in order and compares every verdict field that
matters, the preempted workloads and the pools' used µJ afterwards.

Claims are written ``(id, pool, devices, estimate_uj, grade, priority[, gang])``.
"""

from __future__ import annotations

import pytest

from admission.claims import Claim

# org 1000 µJ / 8 devices; a and b 400 µJ / 4 devices each; 200 µJ unassigned at org.
TWO = [("org", None, 1000, 8, 1), ("a", "org", 400, 4, 1), ("b", "org", 400, 4, 1)]
# org 1200 µJ; a (weight 3), b (weight 1), c (weight 2) with 300 µJ each; 300 unassigned.
WEIGHTED = [
    ("org", None, 1200, 9, 1),
    ("a", "org", 300, 3, 3),
    ("b", "org", 300, 3, 1),
    ("c", "org", 300, 3, 2),
]
# r 3000 µJ = G1 + G2 + G3 (1000 each). G2 keeps 200 µJ unassigned for its leaves to borrow.
GROUPS = [
    ("r", None, 3000, 30, 1),
    ("G1", "r", 1000, 10, 1), ("l1", "G1", 1000, 10, 1),
    ("G2", "r", 1000, 10, 1), ("l2a", "G2", 400, 5, 1), ("l2b", "G2", 400, 5, 1),
    ("G3", "r", 1000, 10, 1), ("l3", "G3", 1000, 10, 1),
]
TWO_ROOTS = [("r1", None, 500, 4, 1), ("x", "r1", 500, 4, 1), ("r2", None, 500, 4, 1), ("y", "r2", 500, 4, 1)]

CASES = {
    # ---- rule 1: the discriminating pair. a has used its 400; b is idle, so the sibling
    # surplus is 1000 - 400 - 0 = 600 and a's weighted share is 600 * 1 // 2 = 300.
    "rule1 measured estimate borrows the surplus": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 1, 400, "measured", 0))],
        claims=[("c", "a", 1, 200, "measured", 0)],
        want=[("c", "admitted", "borrowing", 0, 200)],
        used={"a": 600, "org": 600},
    ),
    "rule1 same claim as estimator waits for its own guarantee": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 1, 400, "measured", 0))],
        claims=[("c", "a", 1, 200, "estimator", 0)],
        want=[("c", "pending", "guarantee", 0, 0)],
        used={"a": 400, "org": 400},
    ),
    "rule1 estimator that could never fit its own guarantee is denied": dict(
        pools=TWO,
        state=[],
        claims=[("c", "a", 1, 500, "estimator", 0)],
        want=[("c", "denied", "impossibility", 0, 0)],
        used={"a": 0},
    ),
    "rule1 the same 500 uJ measured is admitted: 400 own + 100 of a 300 share": dict(
        pools=TWO,
        state=[],
        claims=[("c", "a", 1, 500, "measured", 0)],
        want=[("c", "admitted", "borrowing", 400, 100)],
        used={"a": 500, "org": 500},
    ),
    "rule1 modelled estimates may borrow like measured ones": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 1, 400, "measured", 0))],
        claims=[("c", "a", 1, 300, "modelled", 0)],
        want=[("c", "admitted", "borrowing", 0, 300)],
        used={"a": 700},
    ),
    # ---- rule 2: gangs are all-or-nothing in joules and devices.
    "rule2 gang that fits in devices but not joules admits nobody": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 0, 300, "measured", 0))],
        claims=[("gang", [("g1", "a", 1, 100, "estimator", 0, "g"), ("g2", "a", 1, 100, "estimator", 0, "g")])],
        want=[("g1", "pending", "guarantee", 0, 0), ("g2", "pending", "guarantee", 0, 0)],
        used={"a": 300},
    ),
    "rule2 gang whose members together exceed the pool's devices is denied": dict(
        pools=TWO,
        state=[],
        claims=[("gang", [("g1", "a", 3, 10, "measured", 0, "g"), ("g2", "a", 3, 10, "measured", 0, "g")])],
        want=[("g1", "denied", "impossibility", 0, 0), ("g2", "denied", "impossibility", 0, 0)],
        used={"a": 0},
    ),
    "rule2 gang across pools is admitted whole when it fits": dict(
        pools=TWO,
        state=[],
        claims=[("gang", [("g1", "a", 2, 400, "measured", 0, "g"), ("g2", "b", 2, 400, "estimator", 0, "g")])],
        want=[("g1", "admitted", "guarantee", 400, 0), ("g2", "admitted", "guarantee", 400, 0)],
        used={"a": 400, "b": 400, "org": 800},
    ),
    "rule2 gang member blocked on devices rolls back the admitted member": dict(
        pools=TWO,
        state=[("admit", ("w0", "b", 4, 0, "measured", 0))],
        claims=[("gang", [("g1", "a", 1, 100, "measured", 0, "g"), ("g2", "b", 1, 100, "measured", 0, "g")])],
        want=[("g1", "pending", "devices", 0, 0), ("g2", "pending", "devices", 0, 0)],
        used={"a": 0, "b": 0, "org": 0},
    ),
    "rule2 gang judged as a whole: a member using its pool's idle guarantee shrinks the share "
    "another member borrowed": dict(
        pools=TWO,  # alone, g1 fits a's cap 400 + (1000 - 400 - 300) // 2 = 550; once g2 takes
        # b's idle 100, a's cap is 400 + (1000 - 400 - 400) // 2 = 500 < 550: the gang waits
        state=[("admit", ("a0", "a", 0, 400, "measured", 0)), ("admit", ("b0", "b", 0, 300, "measured", 0))],
        claims=[("gang", [("g1", "a", 0, 150, "measured", 0, "g"), ("g2", "b", 0, 150, "measured", 0, "g")])],
        want=[("g1", "pending", "borrowing", 0, 0), ("g2", "pending", "borrowing", 0, 0)],
        used={"a": 400, "b": 300, "org": 700},
    ),
    "rule2 gang members that fit their guarantee go first, so the estimator is not starved": dict(
        pools=TWO,
        state=[],
        claims=[("gang", [("g1", "a", 0, 500, "measured", 0, "g"), ("g2", "a", 0, 100, "estimator", 0, "g")])],
        want=[("g1", "admitted", "borrowing", 300, 200), ("g2", "admitted", "guarantee", 100, 0)],
        used={"a": 600},
    ),
    "rule2 a gang member reclaiming for its guarantee never preempts its own gang": dict(
        pools=[("org", None, 800, 8, 1), ("a", "org", 400, 4, 1), ("b", "org", 400, 4, 1)],
        # m1 takes a's last 100, m2 borrows 100 (a's cap 400 + (800 - 400) // 2 = 600), m3
        # needs b's 400 but org would hold 900 > 800: the victim is a0, not the newer m2
        state=[("admit", ("a0", "a", 0, 300, "measured", 0))],
        claims=[("gang", [("m1", "a", 0, 100, "measured", 0, "g"), ("m2", "a", 0, 100, "measured", 0, "g"),
                          ("m3", "b", 0, 400, "measured", 0, "g")])],
        want=[("m1", "admitted", "guarantee", 100, 0), ("m2", "admitted", "borrowing", 0, 100),
              ("m3", "admitted", "guarantee", 400, 0)],
        preempted=["a0"],
        used={"a": 200, "b": 400, "org": 600},
    ),
    # ---- rule 3: a lender's claim inside its guarantee reclaims borrowers, evidence first.
    # a holds w0 400 (own) + w1 300 (borrowed while b was idle); b's 400 needs 100 back.
    "rule3 unmeasured borrowers go by declared priority, lowest first": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 1, 400, "measured", 5)), ("admit", ("w1", "a", 1, 300, "measured", 1))],
        claims=[("c", "b", 1, 400, "estimator", 0)],
        want=[("c", "admitted", "guarantee", 400, 0)],
        preempted=["w1"],
        used={"a": 400, "b": 400, "org": 800},
    ),
    "rule3 a measured wasteful workload goes before any unmeasured one": dict(
        pools=TWO,
        state=[
            ("admit", ("w0", "a", 1, 400, "measured", 5)),
            ("admit", ("w1", "a", 1, 300, "measured", 1)),
            ("complete", "w0", 2, 100),  # 50 µJ per completed unit; 300 still reserved
        ],
        claims=[("c", "b", 1, 400, "estimator", 0)],
        want=[("c", "admitted", "guarantee", 400, 0)],
        preempted=["w0"],  # w0 leaves 100 spent + 0 reserved; a uses 100 + 300 = 400
        used={"a": 400, "b": 400, "org": 800},
    ),
    "rule3 joules a borrower already spent cannot be reclaimed: pending": dict(
        pools=TWO,
        state=[
            ("admit", ("w0", "a", 1, 400, "measured", 0)),
            ("admit", ("w1", "a", 1, 300, "measured", 0)),
            ("complete", "w0", 1, 400),
            ("complete", "w1", 1, 300),
        ],
        claims=[("c", "b", 1, 400, "estimator", 0)],
        want=[("c", "pending", "guarantee", 0, 0)],
        used={"a": 700, "b": 0, "org": 700},
    ),
    "rule3 only pools borrowing at every level below the contention give back": dict(
        pools=GROUPS,
        # l2a borrows 200 inside G2, but G2 as a whole is within its 1000 guarantee: that 200 is
        # G2's own. G3 borrows 333 of the root (G1 idle: S = 3000 - 1000 - 1000 = 1000, share
        # 1000 // 3). l1's 1000 needs 333 back at r: only G3's borrower goes, though a2 ranks
        # first in rule-3 order (lowest priority, newest).
        state=[
            ("admit", ("a", "l2a", 0, 400, "measured", 5)), ("admit", ("b", "l2b", 0, 400, "measured", 5)),
            ("admit", ("a2", "l2a", 0, 200, "measured", 0)), ("admit", ("c", "l3", 0, 1000, "measured", 5)),
            ("admit", ("c2", "l3", 0, 333, "measured", 5)),
        ],
        claims=[("x", "l1", 0, 1000, "estimator", 0)],
        want=[("x", "admitted", "guarantee", 1000, 0)],
        preempted=["c2"],
        used={"r": 3000, "G2": 1000, "l2a": 600, "G3": 1000},
    ),
    "rule3 a sibling borrowing the claimant's idle guarantee gives back, judged with the claim": dict(
        # r 800 = G1 400 (leaves x, y 200 each) + G2 400 (leaf z). z uses 300, so G1 may hold
        # 400 + (800 - 400 - 300) // 2 = 450 and x borrows y's idle guarantee up to
        # 200 + (450 - 200 - 0) // 2 = 325. y's own 200 would take G1 to 525 and r to 825: G1 is
        # within its guarantee *before* the claim, yet x borrows exactly what y now needs.
        pools=[("r", None, 800, 8, 1), ("G1", "r", 400, 4, 1), ("x", "G1", 200, 2, 1), ("y", "G1", 200, 2, 1),
               ("G2", "r", 400, 4, 1), ("z", "G2", 400, 4, 1)],
        state=[("admit", ("z0", "z", 0, 300, "measured", 0)), ("admit", ("x0", "x", 0, 200, "measured", 0)),
               ("admit", ("x1", "x", 0, 125, "measured", 0))],
        claims=[("c", "y", 0, 200, "estimator", 0)],
        want=[("c", "admitted", "guarantee", 200, 0)],
        preempted=["x1"],
        used={"r": 700, "G1": 400, "x": 200, "y": 200},
    ),
    "rule2 a gang over its members' common parent in every window is denied, not pending": dict(
        pools=TWO,  # each member fits its own ceiling (700), but 700 + 700 > org's 1000, ever
        state=[],
        claims=[("gang", [("g1", "a", 0, 700, "measured", 0, "g"), ("g2", "b", 0, 700, "measured", 0, "g")])],
        want=[("g1", "denied", "impossibility", 0, 0), ("g2", "denied", "impossibility", 0, 0)],
        used={"org": 0},
    ),
    "rule2 a gang whose members shrink each other's weighted share is denied, not pending": dict(
        pools=TWO,  # g2's 400 fills b's guarantee, so a may hold at most 400 + (1000 - 400 - 400) // 2
        # = 500 < 600 in any window, with every other pool idle
        state=[],
        claims=[("gang", [("g1", "a", 0, 600, "measured", 0, "g"), ("g2", "b", 0, 400, "measured", 0, "g")])],
        want=[("g1", "denied", "impossibility", 0, 0), ("g2", "denied", "impossibility", 0, 0)],
        used={"org": 0},
    ),
    "rule2 the same gang fits once it asks for what a can hold beside b: pending while busy": dict(
        pools=TWO,  # 500 + 400 fits an idle window; now a0 holds 100 more in a, so a would hold 600
        state=[("admit", ("a0", "a", 0, 100, "measured", 0))],
        claims=[("gang", [("g1", "a", 0, 500, "measured", 0, "g"), ("g2", "b", 0, 400, "measured", 0, "g")])],
        want=[("g1", "pending", "borrowing", 0, 0), ("g2", "pending", "borrowing", 0, 0)],
        used={"org": 100},
    ),
    "rule3 a borrowing gang member is reclaimed with its whole gang, never leaving half": dict(
        pools=TWO,  # the gang holds a's 400 (m1) and borrows 300 (m2); b's 400 needs 100 back:
        # m2 is the victim, and m1 goes with it, because a gang runs all or nothing
        state=[("gang", [("m1", "a", 1, 400, "measured", 0, "g"), ("m2", "a", 1, 300, "measured", 0, "g")])],
        claims=[("c", "b", 1, 400, "estimator", 0)],
        want=[("c", "admitted", "guarantee", 400, 0)],
        preempted=["m1", "m2"],
        used={"a": 0, "b": 400, "org": 400},
    ),
    # ---- rule 4: pending and denied differ.
    "rule4 more devices than the pool guarantees is denied": dict(
        pools=TWO,
        state=[],
        claims=[("c", "a", 5, 10, "measured", 0)],
        want=[("c", "denied", "impossibility", 0, 0)],
    ),
    "rule4 devices busy now is pending": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 3, 10, "measured", 0))],
        claims=[("c", "a", 2, 10, "measured", 0)],
        want=[("c", "pending", "devices", 0, 0)],
    ),
    "rule4 beyond the pool's ceiling in any window is denied even for measured work": dict(
        pools=TWO,  # ceiling(a) = 400 + (1000 - 400) * 1 // 2 = 700
        state=[],
        claims=[("c", "a", 1, 701, "measured", 0)],
        want=[("c", "denied", "impossibility", 0, 0)],
    ),
    # ---- rule 5: the normative order decides which verdict a many-fault claim gets.
    "rule5 impossibility is checked before devices": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 4, 0, "measured", 0))],
        claims=[("c", "a", 1, 900, "measured", 0)],  # no device free now, and 900 > 700 ever
        want=[("c", "denied", "impossibility", 0, 0)],
    ),
    "rule5 devices are checked before the guarantee": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 4, 400, "measured", 0))],
        claims=[("c", "a", 1, 100, "estimator", 0)],  # no device free and no guarantee left
        want=[("c", "pending", "devices", 0, 0)],
    ),
    "rule5 devices before the guarantee: a claim that cannot run preempts nobody": dict(
        pools=TWO,  # a borrows 300 of b's idle guarantee; b's devices are all busy (b0, 0 µJ).
        # Checked in the normative order, c waits for a device and a's borrower keeps running;
        # had the guarantee step (which reclaims) come first, w1 would be preempted for nothing.
        state=[
            ("admit", ("w0", "a", 1, 400, "measured", 5)), ("admit", ("w1", "a", 1, 300, "measured", 1)),
            ("admit", ("b0", "b", 4, 0, "measured", 0)),
        ],
        claims=[("c", "b", 1, 400, "estimator", 0)],
        want=[("c", "pending", "devices", 0, 0)],
        preempted=[],
        used={"a": 700, "b": 0, "org": 700},
    ),
    "rule5 the guarantee before borrowing: inside its own guarantee a claim reclaims, not waits": dict(
        pools=TWO,  # the same state with b's devices free: b's own 400 is honoured by reclaiming
        # w1; judged as borrowing first, org (700 + 400 > 1000) would leave it pending
        state=[("admit", ("w0", "a", 1, 400, "measured", 5)), ("admit", ("w1", "a", 1, 300, "measured", 1))],
        claims=[("c", "b", 1, 400, "measured", 0)],
        want=[("c", "admitted", "guarantee", 400, 0)],
        preempted=["w1"],
        used={"a": 400, "b": 400, "org": 800},
    ),
    "rule5 the guarantee is used before borrowing": dict(
        pools=TWO,
        state=[("admit", ("w0", "a", 1, 300, "measured", 0))],
        claims=[("c", "a", 1, 150, "measured", 0)],
        want=[("c", "admitted", "borrowing", 100, 50)],
        used={"a": 450},
    ),
    # ---- rule 6: surplus by weight; never across roots.
    # a and b have used their 300; c is idle. Sibling surplus 1200 - 300 - 300 = 600:
    # a's share 600 * 3 // 6 = 300, b's 600 * 1 // 6 = 100 (c's 200 stays c's).
    "rule6 each borrower gets its weighted share, not first come first served": dict(
        pools=WEIGHTED,
        state=[("admit", ("a0", "a", 0, 300, "measured", 0)), ("admit", ("b0", "b", 0, 300, "measured", 0))],
        claims=[
            ("b1", "b", 0, 101, "measured", 0),
            ("b2", "b", 0, 100, "measured", 0),
            ("a1", "a", 0, 301, "measured", 0),
            ("a2", "a", 0, 300, "measured", 0),
        ],
        want=[
            ("b1", "pending", "borrowing", 0, 0),
            ("b2", "admitted", "borrowing", 0, 100),
            ("a1", "pending", "borrowing", 0, 0),
            ("a2", "admitted", "borrowing", 0, 300),
        ],
        used={"a": 600, "b": 400, "org": 1000},
    ),
    "rule6 an idle root lends nothing to another root": dict(
        pools=TWO_ROOTS,
        state=[("admit", ("x0", "x", 1, 500, "measured", 0))],
        claims=[("c", "x", 1, 1, "measured", 0)],
        want=[("c", "pending", "borrowing", 0, 0)],
        used={"r1": 500, "r2": 0},
    ),
}


def _apply_state(eng, state):
    for op in state:
        if op[0] == "admit":
            v = eng.admit(Claim(*op[1]))
            assert v.admitted, f"state setup failed: {v}"
        elif op[0] == "gang":
            vs = eng.admit_gang([Claim(*m) for m in op[1]])
            assert all(v.admitted for v in vs), f"state setup failed: {vs}"
        elif op[0] == "complete":
            eng.complete(op[1], op[2], op[3])
        elif op[0] == "release":
            eng.release(op[1])


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_scheduler_table(engine, case):
    eng = engine(case["pools"])
    _apply_state(eng, case["state"])
    verdicts = []
    for c in case["claims"]:
        if c[0] == "gang":
            verdicts += eng.admit_gang([Claim(*m) for m in c[1]])
        else:
            verdicts.append(eng.admit(Claim(*c)))
    got = [(v.claim, v.decision, v.step, v.from_guarantee_uj, v.borrowed_uj) for v in verdicts]
    assert got == case["want"]
    assert [p for v in verdicts for p in v.preempted] == case.get("preempted", [])
    for name, used in case.get("used", {}).items():
        assert eng.forest[name].used_uj == used, name
    for v in verdicts:
        assert v.reason, "every verdict says why"
        assert (v.decision == "pending") == bool(v.waits_for), "pending, and only pending, waits"


def test_reclaim_order_evidence_then_declaration(engine, claim):
    eng = engine(TWO)
    for wid, prio in (("m_good", 9), ("m_bad", 9), ("new_low", 1), ("new_high", 7), ("new_low2", 1)):
        assert eng.admit(claim(wid, "a", 0, 10, "measured", prio)).admitted
    eng.complete("m_good", 10, 100)  # 10 µJ per unit
    eng.complete("m_bad", 2, 100)  # 50 µJ per unit: worst first
    order = [w.id for w in eng.reclaim_order("org")]
    # measured worst-first, then unmeasured by priority (lowest first, newest first among equals)
    assert order == ["m_bad", "m_good", "new_low2", "new_low", "new_high"]


def test_uj_per_completed_unit_is_none_until_a_unit_completes(engine, claim):
    eng = engine(TWO)
    eng.admit(claim("w", "a", 0, 100, "measured"))
    eng.meter("w", 60)
    assert eng.workloads["w"].uj_per_completed_unit is None
    eng.complete("w", 3, 30)
    assert eng.workloads["w"].uj_per_completed_unit == 30  # (60 + 30) µJ // 3 units


def test_release_returns_reservation_and_devices_but_not_spent(engine, claim):
    eng = engine(TWO)
    eng.admit(claim("w", "a", 2, 300, "measured"))
    eng.complete("w", 1, 120)
    a = eng.forest["a"]
    assert (a.spent_uj, a.reserved_uj, a.devices_used) == (120, 180, 2)
    eng.release("w")
    assert (a.spent_uj, a.reserved_uj, a.used_uj, a.devices_used) == (120, 0, 120, 0)


def test_overrun_is_charged_to_the_pool(engine, claim):
    eng = engine(TWO)
    eng.admit(claim("w", "a", 0, 100, "measured"))
    eng.complete("w", 1, 250)  # 150 µJ more than estimated: the tenant bears it
    assert eng.forest["a"].used_uj == 250
    assert eng.forest["org"].used_uj == 250


def test_rollover_clears_spent_and_keeps_reservations(engine, claim):
    eng = engine(TWO)
    eng.admit(claim("w1", "a", 0, 400, "estimator"))
    eng.complete("w1", 1, 150)
    eng.release("w1")
    eng.admit(claim("w2", "a", 0, 200, "estimator"))
    assert not eng.admit(claim("w3", "a", 0, 100, "estimator")).admitted  # 150 + 200 + 100 > 400
    eng.rollover()
    assert eng.forest["a"].used_uj == 200
    assert eng.forest["org"].children_in_guarantee_uj == 200
    assert eng.admit(claim("w3", "a", 0, 100, "estimator")).admitted


def test_claims_must_name_a_known_leaf(engine, claim):
    from admission.claims import ClaimError

    eng = engine(TWO)
    with pytest.raises(ClaimError, match="unknown pool 'zz'"):
        eng.admit(claim("c", "zz"))
    with pytest.raises(ClaimError, match="has children"):
        eng.admit(claim("c", "org"))
    assert eng.admit(claim("c", "a", 0, 1)).admitted
    with pytest.raises(ClaimError, match="already admitted"):
        eng.admit(claim("c", "b", 0, 1))
    with pytest.raises(ClaimError, match="same 'gang' id"):
        eng.admit_gang([claim("g1", "a", 0, 1, gang="g"), claim("g2", "a", 0, 1)])
    with pytest.raises(ClaimError, match="no running workload 'ghost'"):
        eng.release("ghost")
    with pytest.raises(ClaimError, match="'uj' must be at most"):
        eng.complete("c", 1, 2**64)
    with pytest.raises(ClaimError, match="'units' must be an integer >= 0"):
        eng.complete("c", -1, 0)
    with pytest.raises(ClaimError, match="belongs to gang 'g'; submit the whole gang with admit_gang"):
        eng.admit(claim("g1", "a", 0, 1, gang="g"))
    assert eng.admit_gang([claim("g1", "a", 0, 1, gang="g"), claim("g2", "b", 0, 1, gang="g")])[0].admitted
    with pytest.raises(ClaimError, match="gang 'g' already has running members \\(g1, g2\\)"):
        eng.admit_gang([claim("g3", "a", 0, 1, gang="g"), claim("g4", "b", 0, 1, gang="g")])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"estimate_uj": 1.5}, "estimate_uj"),
        ({"estimate_uj": -1}, "estimate_uj"),
        ({"devices": True}, "devices"),
        ({"grade": "guess"}, "grade"),
        ({"estimate_uj": 2**63}, "'estimate_uj' must be at most 9223372036854775807"),
        ({"priority": -(2**63) - 1}, "'priority' must be an integer >= -9223372036854775808"),
        ({"priority": "high"}, "'priority' must be an integer"),
    ],
)
def test_claim_validation(kwargs, match):
    from admission.claims import ClaimError

    base = {"id": "c", "pool": "a", "devices": 1, "estimate_uj": 1}
    with pytest.raises(ClaimError, match=match):
        Claim(**{**base, **kwargs})


@pytest.mark.parametrize("uj, a_used, estimator_decision", [(200, 400, "pending"), (500, 0, "denied")])
def test_rule1_discriminating_pair(engine, claim, uj, a_used, estimator_decision):
    """One claim, one state, one surplus; only the grade differs, and so does the verdict."""
    verdicts = {}
    for grade in ("measured", "estimator"):
        eng = engine(TWO)
        if a_used:
            assert eng.admit(claim("w0", "a", 0, a_used, "measured")).admitted
        assert eng.cap_uj("a") - 400 == 300  # the same weighted share of b's idle surplus
        verdicts[grade] = eng.admit(claim("c", "a", 1, uj, grade))
    assert verdicts["measured"].decision == "admitted" and verdicts["measured"].borrowed_uj > 0
    assert verdicts["estimator"].decision == estimator_decision
    assert verdicts["estimator"].borrowed_uj == 0


@pytest.mark.parametrize(
    "state, claim_args, step, waits_for",
    [
        # devices: 3 of a's 4 busy, 2 asked
        ([("w0", "a", 3, 10, "measured")], ("c", "a", 2, 10, "measured"), "devices",
         "1 more devices in pool 'a' (3 of 4 in use)"),
        # own guarantee: a holds 700 (300 borrowed), so a guess of 200 needs 200 + 300 freed in a
        ([("w0", "a", 0, 400, "measured"), ("w1", "a", 0, 300, "measured")], ("c", "a", 0, 200, "estimator"),
         "guarantee", "500 µJ to be freed in pool 'a' (0 of its own 400 µJ guarantee is left; "
         "releases or the window rollover)"),
        # surplus: a holds 650 of its cap 700; a measured 100 is 50 over
        ([("w0", "a", 0, 650, "measured")], ("c", "a", 0, 100, "measured"), "borrowing",
         "50 µJ under pool 'org' (releases or the window rollover)"),
    ],
)
def test_pending_says_exactly_what_it_waits_for(engine, claim, state, claim_args, step, waits_for):
    eng = engine(TWO)
    for args in state:
        assert eng.admit(claim(*args)).admitted
    v = eng.admit(claim(*claim_args))
    assert (v.decision, v.step, v.waits_for) == ("pending", step, waits_for)


def test_a_pending_claim_is_admitted_once_what_it_waits_for_is_freed(engine, claim):
    eng = engine(TWO)
    assert eng.admit(claim("w0", "a", 0, 400, "measured")).admitted
    assert eng.admit(claim("w1", "a", 0, 300, "measured")).admitted
    assert eng.admit(claim("c", "a", 0, 200, "estimator")).decision == "pending"
    eng.release("w1")  # frees 300 of the 500: still short
    assert eng.admit(claim("c", "a", 0, 200, "estimator")).decision == "pending"
    eng.complete("w0", 1, 200)  # w0 spent 200 of its 400: its reservation stays, so still short
    assert eng.admit(claim("c", "a", 0, 200, "estimator")).decision == "pending"
    eng.release("w0")  # 200 spent stays for the window: 400 - 200 = 200 left, exactly enough
    assert eng.admit(claim("c", "a", 0, 200, "estimator")).admitted


def test_a_gang_denied_as_a_whole_says_which_pool_and_why(engine, claim):
    eng = engine(TWO)
    over_root = eng.admit_gang([claim("g1", "a", 0, 700, "measured", gang="g"), claim("g2", "b", 0, 700, "measured", gang="g")])
    assert "needs 1400 µJ under pool 'org', which can never hold more than 1000 µJ" in over_root[0].reason
    assert "its whole window budget (surplus never crosses roots)" in over_root[0].reason
    shrunk = eng.admit_gang([claim("h1", "a", 0, 600, "measured", gang="h"), claim("h2", "b", 0, 400, "measured", gang="h")])
    assert "needs 600 µJ under pool 'a', which can never hold more than 500 µJ" in shrunk[1].reason
    assert "shrunk by the gang's own use of its siblings' guarantees" in shrunk[1].reason
    assert [v.claim for v in shrunk] == ["h1", "h2"] and eng.workloads == {}
