"""The decision log: the same chain as the archives, batched, tamper-evident and replayable."""

from __future__ import annotations

import orjson
import pytest

from admission.log import DecisionLog, audit
from admission.simulate import Simulator
from schema import chainlog
from schema.chain import GENESIS_PREV


def _run(forest, path, claim):
    sim = Simulator(forest, DecisionLog(path, batch=3))
    for i, (pool, uj, grade) in enumerate([("a", 400, "measured"), ("a", 200, "measured"), ("a", 100, "estimator"), ("b", 400, "estimator")]):
        sim._decide(f"t:{i}", [claim(f"c{i}", pool, 1, uj, grade)], retry=False)
    sim.engine.complete("c0", 2, 300)
    sim._input(_ev("release", workload="c0"))
    sim._input(_ev("rollover"))
    sim.log.close()
    return sim


def _ev(kind, **data):
    from admission.simulate import Event

    return Event("t:0", kind, {"type": kind, **data})


TWO = [("org", None, 1000, 8, 1), ("a", "org", 400, 4, 1), ("b", "org", 400, 4, 1)]


def test_log_is_a_valid_chain_that_chainlog_reads(tmp_path, forest, claim):
    path = tmp_path / "decisions.jsonl"
    _run(forest(TWO), path, claim)
    assert chainlog.verify(path) == []
    events = chainlog.events(path)
    assert events[0]["kind"] == "pools"
    assert [e["kind"] for e in events[1:]] == ["claim"] * 4 + ["release", "rollover"]
    assert events[2]["verdicts"][0]["borrowed_uj"] == 200
    first = orjson.loads(path.read_bytes().splitlines()[0])
    assert (first["seq"], first["prev"]) == (0, GENESIS_PREV)


def test_a_second_writer_continues_the_chain(tmp_path, forest, claim):
    path = tmp_path / "decisions.jsonl"
    with DecisionLog(path) as log:
        log.append({"kind": "pools", "pools": forest(TWO).to_dicts()})
    with DecisionLog(path) as log:
        rec = log.append({"kind": "rollover"})
    assert rec["seq"] == 1
    assert chainlog.verify(path) == []


def test_audit_replays_identically_and_catches_a_forged_verdict(tmp_path, forest, claim):
    path = tmp_path / "decisions.jsonl"
    _run(forest(TWO), path, claim)
    assert audit(path) == []
    # Forge a verdict *and* re-seal the whole chain: the chain checks out, the replay does not.
    from schema.chain import seal

    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    records[2]["event"]["verdicts"][0]["decision"] = "denied"
    prev, lines = None, []
    for rec in records:
        new = seal(prev, rec["seq"], rec["ts"], "event", rec["event"])
        prev = new["hash"]
        lines.append(orjson.dumps(new, option=orjson.OPT_SORT_KEYS))
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert chainlog.verify(path) == []
    assert audit(path) == ["event 3: replayed verdicts differ from the recorded ones"]


def test_tampering_breaks_the_chain_and_refuses_appends(tmp_path, forest, claim):
    path = tmp_path / "decisions.jsonl"
    _run(forest(TWO), path, claim)
    lines = path.read_bytes().splitlines()
    lines[3] = lines[3].replace(b'"estimate_uj":100', b'"estimate_uj":99')
    path.write_bytes(b"\n".join(lines) + b"\n")
    findings = chainlog.verify(path)
    assert findings and findings[0].location == "decisions.jsonl:4"
    with pytest.raises(ValueError, match="failed verification"):
        audit(path)
    with pytest.raises(ValueError, match="refusing to append"):
        DecisionLog(path)


def test_records_reach_disk_only_on_flush(tmp_path):
    path = tmp_path / "d.jsonl"
    log = DecisionLog(path, batch=1000)
    for i in range(5):
        log.append({"kind": "rollover", "i": i})
    assert not path.exists()
    log.flush()
    assert len(path.read_bytes().splitlines()) == 5
    assert chainlog.verify(path) == []
