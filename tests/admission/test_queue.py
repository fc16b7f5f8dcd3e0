"""The pending queue (rule 4 lived out): pending claims wait in arrival order and are re-decided
after releases and rollovers; denied ones never queue; every decision is logged for audit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.claims import Claim, ClaimError
from admission.engine import Admission
from admission.log import DecisionLog, audit
from admission.model import build_forest
from admission.queue import AdmissionQueue

GRADE = st.sampled_from(["measured", "modelled", "estimator"])
TWO = [("org", None, 1000, 8, 1), ("a", "org", 400, 4, 1), ("b", "org", 400, 4, 1)]


def test_pending_waits_in_arrival_order_and_denied_never_queues(forest):
    q = AdmissionQueue(forest(TWO))
    assert q.submit(Claim("w0", "a", 1, 400, "measured")).admitted
    assert q.submit(Claim("p1", "a", 1, 300, "estimator"), tag="first").decision == "pending"
    assert q.submit(Claim("p2", "a", 1, 150, "estimator"), tag="second").decision == "pending"
    assert q.submit(Claim("d", "a", 1, 401, "estimator")).decision == "denied"
    assert [w.tag for w in q.waiting] == ["first", "second"]
    assert q.find("p2").waits_for.startswith("150 µJ to be freed in pool 'a'")
    decided = q.release("w0")  # 400 free: p1 (300) first, then p2 (150) no longer fits
    assert [(tag, [v.decision for v in vs]) for tag, vs in decided] == [("first", ["admitted"])]
    assert [w.tag for w in q.waiting] == ["second"]
    assert q.find("p2").waits_for.startswith("50 µJ to be freed")  # the new verdict, not the old
    q.complete("p1", 1, 300)
    q.release("p1")  # 300 spent stays for the window: still 50 short
    assert [w.tag for w in q.waiting] == ["second"]
    assert [(t, vs[0].claim) for t, vs in q.rollover()] == [("second", "p2")]
    assert q.waiting == [] and "p2" in q.engine.workloads


def test_a_pending_gang_queues_whole_and_withdraws_whole(forest):
    q = AdmissionQueue(forest(TWO))
    assert q.submit(Claim("w0", "b", 4, 0, "measured")).admitted
    gang = [Claim("g1", "a", 1, 10, "measured", gang="g"), Claim("g2", "b", 1, 10, "measured", gang="g")]
    assert [v.decision for v in q.submit_gang(gang)] == ["pending", "pending"]
    with pytest.raises(ClaimError, match="'g2' is already pending"):
        q.submit(Claim("g2", "a", 0, 1, "measured"))
    assert q.release("g2") == [] and q.waiting == []  # withdrawn: the whole gang leaves the queue
    assert [v.decision for v in q.submit_gang(gang)] == ["pending", "pending"]
    decided = q.release("w0")
    assert [v.decision for _, vs in decided for v in vs] == ["admitted", "admitted"]


def test_every_decision_and_retry_is_logged_and_audits_clean(tmp_path, forest):
    path = tmp_path / "decisions.jsonl"
    with DecisionLog(path, batch=2) as log:
        q = AdmissionQueue(forest(TWO), log)
        q.submit(Claim("w0", "a", 1, 400, "measured"))
        q.submit(Claim("p", "a", 1, 100, "estimator"))
        q.meter("w0", 250)
        q.release("w0")  # p retried: 150 of a's guarantee left, admitted
    assert "p" in q.engine.workloads
    assert audit(path) == []


@settings(max_examples=120, deadline=None)
@given(
    weights=st.lists(st.integers(1, 3), min_size=2, max_size=4),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("claim"), st.integers(0, 3), st.integers(0, 1), st.integers(0, 80), GRADE),
            st.tuples(st.just("claim"), st.integers(0, 3), st.integers(0, 1), st.integers(0, 80), GRADE),
            st.tuples(st.just("gang"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 120), GRADE),
            st.tuples(st.just("complete"), st.integers(0, 99), st.integers(0, 2), st.integers(0, 120)),
            st.tuples(st.just("release"), st.integers(0, 99)),
            st.tuples(st.just("release"), st.integers(0, 99)),
            st.tuples(st.just("rollover")),
        ),
        min_size=20, max_size=80,
    ),
)
def test_skipping_claims_that_cannot_fit_yet_changes_no_outcome(weights, ops):
    """The queue skips entries whose shortfall was not freed; a naive queue that re-decides
    every entry after every release and rollover must reach the very same verdicts."""
    spec = [("org", None, 100 * len(weights) + 50, 3 * len(weights), 1)]
    spec += [(f"p{i}", "org", 100, 3, w) for i, w in enumerate(weights)]
    tables = [{"name": n, "parent": p, "energy_uj": e, "devices": d, "weight": w} for n, p, e, d, w in spec]
    q = AdmissionQueue(build_forest(tables))
    naive, pending = Admission(build_forest(tables)), []
    fast_out, naive_out = [], []

    def naive_decide(claims, tag):
        vs = naive.admit_gang(claims) if claims[0].gang else [naive.admit(claims[0])]
        return vs

    def naive_retry():
        nonlocal pending
        queue, pending = pending, []
        for tag, claims in queue:
            vs = naive_decide(claims, tag)
            if vs[0].decision == "pending":
                pending.append((tag, claims))
            else:
                naive_out.append((tag, _key(vs)))

    ids: list[str] = []
    for n, op in enumerate(ops):
        if op[0] in ("claim", "gang"):
            pool = f"p{op[1] % len(weights)}"
            if op[0] == "claim":
                claims = [Claim(f"c{n}", pool, op[2], op[3], op[4])]
            else:
                other = f"p{(op[1] + 1) % len(weights)}"
                claims = [Claim(f"c{n}.0", pool, op[2] % 2, op[3], op[4], gang=f"g{n}"),
                          Claim(f"c{n}.1", other, 1, op[3] // 2, "measured", gang=f"g{n}")]
            ids += [c.id for c in claims]
            fast = q.submit_gang(claims, n) if op[0] == "gang" else [q.submit(claims[0], n)]
            slow = naive_decide(claims, n)
            assert _key(fast) == _key(slow)
            if slow[0].decision == "pending":
                pending.append((n, claims))
        elif op[0] == "complete" and ids:
            wid = ids[op[1] % len(ids)]
            if wid in naive.workloads:
                q.complete(wid, op[2], op[3])
                naive.complete(wid, op[2], op[3])
        elif op[0] == "release" and ids:
            wid = ids[op[1] % len(ids)]
            if wid in naive.workloads:
                fast_out += [(t, _key(vs)) for t, vs in q.release(wid)]
                naive.release(wid)
                naive_retry()
        elif op[0] == "rollover":
            fast_out += [(t, _key(vs)) for t, vs in q.rollover()]
            naive.rollover()
            naive_retry()
        assert fast_out == naive_out
        assert [w.tag for w in q.waiting] == [t for t, _ in pending]
    assert q.engine.usage() == naive.usage()


def _key(verdicts):
    return [(v.claim, v.decision, v.step, v.from_guarantee_uj, v.borrowed_uj, sorted(v.preempted)) for v in verdicts]


def test_a_borrowing_claim_wakes_when_its_own_pool_frees_enough_for_the_guarantee_path(forest):
    """The shortfall is the smaller of the two ways in: back into the own guarantee (where
    borrowers can be reclaimed) or room in the surplus."""
    q = AdmissionQueue(forest(TWO))
    assert q.submit(Claim("b0", "b", 0, 400, "measured")).admitted
    assert q.submit(Claim("b1", "b", 0, 300, "measured")).admitted  # a idle: b may hold 700
    assert q.submit(Claim("w0", "a", 0, 250, "measured")).admitted
    assert q.submit(Claim("w1", "a", 0, 50, "measured")).admitted  # org at 1000
    # X: 150 with 100 of a's guarantee left, so it must borrow 50, and org is 150 over
    x = q.submit(Claim("x", "a", 0, 150, "measured"), tag="x")
    assert (x.decision, x.step, x.waits_for) == ("pending", "borrowing", "150 µJ under pool 'org' (releases or the window rollover)")
    assert q.engine.shortfall(Claim("x2", "a", 0, 150, "measured")) == (50, 0)  # min(own 50, surplus 150)
    decided = q.release("w1")  # frees 50 in a: x fits a's own guarantee now, reclaiming b1
    assert [(t, vs[0].decision, vs[0].step, vs[0].preempted) for t, vs in decided] == [("x", "admitted", "guarantee", ["b1"])]
