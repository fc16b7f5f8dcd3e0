"""The pending queue (rule 4 lived out): pending claims wait in arrival order and are re-decided
after releases and rollovers; denied ones never queue; every decision is logged for audit."""

from __future__ import annotations

import pytest

from admission.claims import Claim, ClaimError
from admission.log import DecisionLog, audit
from admission.queue import AdmissionQueue

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
