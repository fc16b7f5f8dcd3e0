"""Evidence belongs to the policy that was measured (identity), and retirement is
capability-wide (issue 13, items 1 and 2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from placement import place, resolve
from placement.audit import read_log
from placement.decision import Settings, audit_event
from placement.evaluation import evaluate_candidate, identity_of, record_evaluation, run_evaluation
from placement.identity import (
    builtin_identity,
    code_digest,
    describe,
    formula_identity,
    same_policy,
)
from placement.trace import parse_trace
from schema import chainlog

NOW = datetime(2026, 6, 1, tzinfo=UTC)
WHEN = (NOW - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cl(name, ci, cost=1.0, capacity=10.0, used=0.0):
    return {"name": name, "region": name.upper(), "carbon_intensity": ci,
            "cost_per_hour": cost, "capacity": capacity, "used": used}


CLEAN_FIRST = [cl("clean", 20.0), cl("dirty", 600.0)]


def record(audit_log, doc, name, **kw):
    trace = parse_trace(doc)
    result, identity = evaluate_candidate(trace, name)
    return record_evaluation(audit_log, trace, result, evaluated_at=WHEN, identity=identity, **kw), result


def test_an_edited_formula_under_the_same_name_has_no_evaluation(audit_log, tmp_path, spatial_win_doc):
    f = tmp_path / "green.yaml"
    f.write_text("name: green-formula\nminimize: carbon_intensity\n")
    rec, result = record(audit_log, spatial_win_doc, str(f))
    assert result["verdict"]["action"] == "ship-candidate"
    assert rec.event["policy_identity"]["kind"] == "formula"
    assert place({"id": "j"}, CLEAN_FIRST, str(f), audit_log=audit_log, now=NOW)["cluster"] == "clean"
    # the same formula written differently is the same policy: still licensed
    f.write_text("name: green-formula\nminimize:   (carbon_intensity)  \ndescription: reworded\n")
    assert resolve(str(f), audit_log=audit_log, now=NOW).action == "as-requested"
    # edited to prefer the dirtiest cluster under the same name: it inherits nothing
    f.write_text("name: green-formula\nmaximize: carbon_intensity\n")
    rep = place({"id": "j"}, CLEAN_FIRST, str(f), audit_log=audit_log, now=NOW)
    pp = rep["objectives"]["placement_policy"]
    assert (pp["action"], rep["cluster"]) == ("carbon-withheld", "clean")  # not the 600 g one
    old, new = rec.event["policy_identity"]["digest"], pp["identity"]["digest"]
    assert old != new
    assert (f"the evaluated green-formula (seq 0) had digest {old[:23]}…; this one has digest "
            f"{new[:23]}…: a changed policy has no evaluation until it is re-evaluated") in rep["reason"]
    assert pp["evidence"]["seq"] == rec.seq
    # re-evaluated, the edited formula gets its own verdict, cited as such: it loses, and as
    # no baseline reduces anything on this trace's home region, the capability retires
    _, result = record(audit_log, spatial_win_doc, str(f))
    assert result["verdict"]["action"] == "retire"
    res = resolve(str(f), audit_log=audit_log, now=NOW)
    assert res.action == "carbon-withheld" and "retired by evaluation seq 1" in res.reason
    assert res.evidence["seq"] == 1


def test_an_upgraded_plugin_inherits_no_win(plugin_dist, audit_log, spatial_win_doc):
    rec, _ = record(audit_log, spatial_win_doc, "green-plugin")
    ident = rec.event["policy_identity"]
    assert (ident["kind"], ident["distribution"], ident["version"]) == ("plugin", "cs-testplugin", "0.1")
    assert ident["entry_point"] == "carbonspan.placement_policies:green-plugin = cs_testplugin:GreenPlugin"
    assert resolve("green-plugin", audit_log=audit_log, now=NOW).action == "as-requested"
    info = plugin_dist / "cs_testplugin-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cs-testplugin\nVersion: 0.2\n")
    info.rename(plugin_dist / "cs_testplugin-0.2.dist-info")
    res = resolve("green-plugin", audit_log=audit_log, now=NOW)
    assert res.action == "carbon-withheld"
    assert ("had distribution cs-testplugin 0.1 (entry point carbonspan.placement_policies:green-plugin"
            " = cs_testplugin:GreenPlugin); this one has distribution cs-testplugin 0.2") in res.reason


def forged(audit_log, doc, name, identity):
    """A real winning evaluation of ``name`` recorded under another identity (or none)."""
    trace = parse_trace(doc)
    result = run_evaluation(trace, name)
    assert result["verdict"]["action"] == "ship-candidate"
    event = audit_event(result, trace, Settings(), WHEN)
    if identity is not None:
        event["policy_identity"] = identity
    chainlog.append(audit_log, event)


def test_a_changed_built_in_inherits_no_win(audit_log, spatial_win_doc):
    forged(audit_log, spatial_win_doc, "carbon-aware", builtin_identity("carbon-aware", "sha256:older"))
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("carbon-simple", "replaced")
    assert "had code version sha256:older; this one has code version sha256:" in res.reason
    # and the current code, evaluated, is licensed
    record(audit_log, spatial_win_doc, "carbon-aware")
    assert resolve("carbon-aware", audit_log=audit_log, now=NOW).action == "as-requested"


def test_an_evaluation_without_an_identity_licenses_nothing(audit_log, spatial_win_doc):
    forged(audit_log, spatial_win_doc, "carbon-aware", None)  # as recorded before identities
    assert read_log(audit_log).problem is None  # an older log still reads
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert res.action == "replaced" and "no recorded identity" in res.reason


def test_a_malformed_identity_fails_closed(audit_log, spatial_win_doc):
    forged(audit_log, spatial_win_doc, "carbon-aware", "sha256:abc")
    log = read_log(audit_log)
    assert log.evaluations == [] and "policy_identity" in log.problem


def test_identities_are_canonical_and_distinguish_what_matters():
    a = formula_identity("g", "minimize", "cost_per_hour+0.010*carbon_intensity")
    assert a == formula_identity("g", "minimize", " (cost_per_hour) + 0.01 * carbon_intensity ")
    assert a["expression"] == "cost_per_hour + 0.01 * carbon_intensity"
    for other in (formula_identity("g", "maximize", "cost_per_hour+0.01*carbon_intensity"),
                  formula_identity("h", "minimize", "cost_per_hour+0.01*carbon_intensity"),
                  formula_identity("g", "minimize", "cost_per_hour+0.02*carbon_intensity")):
        assert not same_policy(other, a)
    assert same_policy(dict(a), a) and not same_policy(None, a)
    assert describe(a).startswith("digest sha256:") and describe(None).startswith("no recorded")
    # a built-in's code version follows its code
    assert identity_of("carbon-aware") == identity_of("carbon-aware")
    versions = {identity_of(n)["code_version"] for n in ("carbon-aware", "carbon-simple", "cost-aware")}
    assert len(versions) == 3  # each built-in's own class is part of its code version
    assert code_digest(test_identities_are_canonical_and_distinguish_what_matters) != code_digest(cl)
    assert identity_of("forecast-greedy")["kind"] == "built-in"


def test_an_object_without_an_identity_is_never_licensed(audit_log, spatial_win_doc):
    class Anon:  # weighs carbon; an object has no provenance to match an evaluation against
        name = "carbon-aware"

        def score(self, clusters, job):
            return [-(c["carbon_intensity"] or 0.0) for c in clusters]

    record(audit_log, spatial_win_doc, "carbon-aware")
    res = resolve(Anon(), audit_log=audit_log, now=NOW)
    assert res.action == "replaced" and "no identity" in res.reason


def test_retirement_withholds_carbon_from_a_policy_with_its_own_current_win(
        audit_log, spatial_win_doc, flat_doc):
    record(audit_log, spatial_win_doc, "cost-aware")  # cost-aware's own real, current win
    clusters = [cl("grey", 500.0), cl("green", 20.0, used=6.0)]
    assert place({"id": "j"}, clusters, "cost-aware", audit_log=audit_log, now=NOW)["cluster"] == "green"
    _, result = record(audit_log, flat_doc, "carbon-aware")  # then: carbon-aware placement retired
    assert result["verdict"]["action"] == "retire"
    rep = place({"id": "j"}, clusters, "cost-aware", audit_log=audit_log, now=NOW)
    pp = rep["objectives"]["placement_policy"]
    assert (pp["action"], rep["cluster"]) == ("carbon-withheld", "grey")
    assert "carbon-aware placement retired by evaluation seq 1 of 'carbon-aware'" in rep["reason"]
    assert pp["evidence"]["seq"] == 1
    # a newer real evaluation that ships lifts the retirement; cost-aware's win counts again
    record(audit_log, spatial_win_doc, "carbon-aware")
    assert place({"id": "j"}, clusters, "cost-aware", audit_log=audit_log, now=NOW)["cluster"] == "green"


@pytest.mark.parametrize("name", ["carbon-aware", "carbon-simple", "cost-aware"])
def test_every_carbon_weighing_policy_is_withheld_while_retired(audit_log, spatial_win_doc, flat_doc, name):
    record(audit_log, spatial_win_doc, name if name != "carbon-simple" else "carbon-aware")
    record(audit_log, flat_doc, "forecast-greedy")  # any policy's retirement is everyone's
    res = resolve(name, audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == (name, "carbon-withheld")


def test_an_older_evaluation_recorded_after_a_retirement_does_not_lift_it(
        audit_log, spatial_win_doc, flat_doc):
    """Retirement is lifted by a *newer* measurement: one dated before the retirement (a
    back-dated or late-recorded win) or dated in the future licenses nothing against it."""
    _, result = record(audit_log, flat_doc, "carbon-aware")  # retired, measured a day ago
    assert result["verdict"]["action"] == "retire"
    trace = parse_trace(spatial_win_doc)
    win, ident = evaluate_candidate(trace, "carbon-aware")
    assert win["verdict"]["action"] == "ship-candidate"
    old = (NOW - timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    record_evaluation(audit_log, trace, win, evaluated_at=old, identity=ident)
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert res.action == "carbon-withheld" and "retired by evaluation seq 0" in res.reason
    future = (NOW + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    record_evaluation(audit_log, trace, win, evaluated_at=future, identity=ident)
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert res.action == "carbon-withheld" and "retired by evaluation seq 0" in res.reason
    # a win measured after the retirement lifts it
    record_evaluation(audit_log, trace, win, evaluated_at=NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
                      identity=ident)
    assert resolve("carbon-aware", audit_log=audit_log, now=NOW).action == "as-requested"


def test_a_policys_own_lifted_retirement_licenses_nothing(audit_log, spatial_win_doc, flat_doc, monkeypatch):
    # margin 0: carbon-aware "ships" on the flat grid but reduces 0 % < 2 %: retire, ships itself
    monkeypatch.setenv("CARBONSPAN_CARBON_POLICY_MARGIN_PP", "0")
    _, result = record(audit_log, flat_doc, "carbon-aware")
    assert (result["verdict"]["action"], result["verdict"]["ships"]) == ("retire", "carbon-aware")
    monkeypatch.delenv("CARBONSPAN_CARBON_POLICY_MARGIN_PP")
    record(audit_log, spatial_win_doc, "cost-aware")  # a newer real evaluation ships: lifted
    assert resolve("carbon-simple", audit_log=audit_log, now=NOW).action == "as-requested"
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("carbon-simple", "replaced")
    assert "did not ship carbon-aware: retired carbon-aware placement (since lifted" in res.reason
