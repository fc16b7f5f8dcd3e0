"""The runtime gate: every row of the table, the probe, withholding, warn mode, fail-closed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from placement import place, resolve
from placement.evaluation import record_evaluation, run_evaluation
from placement.formula import FormulaProvider
from placement.probe import weighs_carbon
from placement.providers import CarbonSimple, CostAware
from placement.trace import parse_trace

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def recorded(audit_log, doc, name, *, days_ago=1.0, synthetic=None):
    trace = parse_trace(doc, synthetic=synthetic)
    result = run_evaluation(trace, name)
    when = (NOW - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return record_evaluation(audit_log, trace, result, evaluated_at=when), result


def cl(name, ci, cost=1.0, capacity=10.0, used=0.0):
    return {"name": name, "region": name.upper(), "carbon_intensity": ci,
            "cost_per_hour": cost, "capacity": capacity, "used": used}


# carbon-aware (carbon, then cost) picks "cheap"; carbon-simple (carbon, then headroom) "roomy"
TIE = [cl("cheap", 100.0, cost=1.0, used=8.0), cl("roomy", 100.0, cost=2.0, used=0.0),
       cl("dirty", 600.0, cost=0.5)]


def test_unmeasured_carbon_aware_runs_carbon_simple(audit_log):
    rep = place({"id": "j"}, TIE, "carbon-aware", audit_log=audit_log, now=NOW)
    pp = rep["objectives"]["placement_policy"]
    assert rep["cluster"] == "roomy"  # carbon-simple's headroom tie-break, not carbon-aware's cost
    assert (pp["requested"], pp["effective"], pp["action"]) == ("carbon-aware", "carbon-simple", "replaced")
    assert rep["reason"].startswith("[placement policy: carbon-aware -> carbon-simple: no R-ec evaluation")
    # and says what would license it, as a command to run
    assert "carbonspan policy evaluate carbon-aware --trace TRACE.json --record" in rep["reason"]
    assert pp["evidence"] is None


def test_only_synthetic_evaluations_never_gate(audit_log, spatial_win_doc):
    rec, result = recorded(audit_log, spatial_win_doc, "carbon-aware", synthetic=True)
    assert result["verdict"]["action"] == "ship-candidate"  # it won, but on synthetic evidence
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("carbon-simple", "replaced")
    assert "only synthetic" in res.reason
    assert "record a win on a real trace" in res.reason


def test_candidate_won_and_current_runs_as_requested(audit_log, spatial_win_doc):
    rec, _ = recorded(audit_log, spatial_win_doc, "carbon-aware", days_ago=89)
    rep = place({"id": "j"}, TIE, "carbon-aware", audit_log=audit_log, now=NOW)
    pp = rep["objectives"]["placement_policy"]
    assert rep["cluster"] == "cheap" and pp["action"] == "as-requested"
    assert pp["evidence"]["seq"] == rec.seq and pp["evidence"]["hash"] == rec.hash


def test_overdue_evidence_is_same_as_none(audit_log, spatial_win_doc, monkeypatch):
    recorded(audit_log, spatial_win_doc, "carbon-aware", days_ago=91)
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("carbon-simple", "replaced")
    assert "re-test overdue" in res.reason and "91.00 days old > cadence 90 days" in res.reason
    assert res.evidence is not None
    monkeypatch.setenv("CARBONSPAN_CARBON_POLICY_RETEST_DAYS", "120")
    assert resolve("carbon-aware", audit_log=audit_log, now=NOW).action == "as-requested"


def test_simple_baseline_won_is_same_as_none(audit_log, spatial_win_doc):
    recorded(audit_log, spatial_win_doc, "carbon-aware")
    # out of the dips, from home east: carbon-aware and lowest-average both pick north
    jobs = [dict(j, submit=j["submit"] + 4, home="east") for j in spatial_win_doc["jobs"]]
    losing = dict(spatial_win_doc, jobs=jobs)
    _, result = recorded(audit_log, losing, "carbon-aware")  # the latest real one: baseline won
    assert result["verdict"]["action"] == "ship-baseline"
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("carbon-simple", "replaced")
    assert "simple baseline lowest-average-region won" in res.reason
    other = resolve("cost-aware", audit_log=audit_log, now=NOW)
    assert (other.effective, other.action) == ("cost-aware", "carbon-withheld")


def test_retired_withholds_carbon_even_from_carbon_simple(audit_log, flat_doc):
    _, result = recorded(audit_log, flat_doc, "carbon-aware")
    assert result["verdict"]["action"] == "retire"
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("carbon-aware", "carbon-withheld")
    assert "retired by evaluation seq 0" in res.reason
    simple = resolve("carbon-simple", audit_log=audit_log, now=NOW)
    assert simple.action == "carbon-withheld"
    # withheld carbon-aware still ranks by its other terms: all intensities equal -> cheapest
    rep = place({"id": "j"}, TIE, "carbon-aware", audit_log=audit_log, now=NOW)
    assert rep["cluster"] == "dirty"


def test_unmeasured_other_policy_runs_with_carbon_withheld(audit_log):
    res = resolve("cost-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("cost-aware", "carbon-withheld")
    assert res.reason.startswith("[placement policy: cost-aware (carbon input withheld): no R-ec")


def test_only_a_recorded_winning_evaluation_lets_a_policy_place_on_carbon(audit_log, spatial_win_doc):
    # equal prices: licensed cost-aware breaks the tie on carbon ("green"); withheld, the
    # intensities look equal and headroom decides ("grey")
    clusters = [cl("grey", 500.0, used=0.0), cl("green", 20.0, used=6.0)]
    trace = parse_trace(spatial_win_doc)
    dry = run_evaluation(trace, "cost-aware")  # a dry run that wins licenses nothing
    assert dry["verdict"]["action"] == "ship-candidate"
    assert place({"id": "j"}, clusters, "cost-aware", audit_log=audit_log, now=NOW)["cluster"] == "grey"
    recorded(audit_log, spatial_win_doc, "cost-aware", synthetic=True)  # nor a synthetic one
    assert place({"id": "j"}, clusters, "cost-aware", audit_log=audit_log, now=NOW)["cluster"] == "grey"
    recorded(audit_log, spatial_win_doc, "cost-aware")  # a recorded real win does
    rep = place({"id": "j"}, clusters, "cost-aware", audit_log=audit_log, now=NOW)
    assert rep["cluster"] == "green"
    assert rep["objectives"]["placement_policy"]["action"] == "as-requested"


def test_withholding_keeps_a_policys_other_objectives(audit_log):
    # cost-aware withheld still optimises cost: the cheapest cluster wins although it is the
    # dirtiest, and the cleaner-but-dearer ones do not
    clusters = [cl("clean-dear", 10.0, cost=9.0), cl("cheap-dirty", 700.0, cost=1.0),
                cl("mid", 300.0, cost=2.0)]
    rep = place({"id": "j"}, clusters, "cost-aware", audit_log=audit_log, now=NOW)
    assert rep["objectives"]["placement_policy"]["action"] == "carbon-withheld"
    assert rep["cluster"] == "cheap-dirty"


def test_withheld_yaml_formula_keeps_its_other_terms(audit_log, tmp_path):
    f = tmp_path / "thrifty.yaml"
    f.write_text("name: thrifty-green\nminimize: cost_per_hour + 0.01 * carbon_intensity\n")
    clusters = [cl("p", 500.0, cost=1.0), cl("q", 10.0, cost=4.0), cl("r", 10.0, cost=4.5)]
    # licensed: p = 1 + 5 = 6, q = 4 + 0.1 = 4.1, r = 4.6 -> q. Withheld: carbon equal -> cost -> p
    rep = place({"id": "j"}, clusters, str(f), audit_log=audit_log, now=NOW)
    pp = rep["objectives"]["placement_policy"]
    assert (pp["requested"], pp["action"], rep["cluster"]) == ("thrifty-green", "carbon-withheld", "p")
    res = resolve(str(f), audit_log=audit_log, now=NOW, env={"CARBONSPAN_CARBON_POLICY_GATE": "warn"})
    assert res.provider.score(clusters, {"size": 1}) == pytest.approx([-6.0, -4.1, -4.6])


def test_probe_decides_not_the_declaration(audit_log):
    class Sneaky:  # claims not to use carbon, but does
        name = "sneaky"
        uses_carbon = False

        def score(self, clusters, job):
            return [-(c["carbon_intensity"] or 0.0) for c in clusters]

    assert weighs_carbon(Sneaky())
    assert resolve(Sneaky(), audit_log=audit_log, now=NOW).action == "carbon-withheld"
    cheap = FormulaProvider("cheap", "-cost_per_hour", True, "test")
    assert not weighs_carbon(cheap) and not weighs_carbon(__import__("placement.providers").providers.Headroom())
    assert weighs_carbon(CostAware()) and weighs_carbon(CarbonSimple())
    res = resolve(cheap, audit_log=audit_log, now=NOW)
    assert (res.action, res.weighs_carbon) == ("as-requested", False)


def test_warn_mode_runs_requested_and_records_what_enforce_would_do(audit_log, monkeypatch):
    monkeypatch.setenv("CARBONSPAN_CARBON_POLICY_GATE", "warn")
    rep = place({"id": "j"}, TIE, "carbon-aware", audit_log=audit_log, now=NOW)
    pp = rep["objectives"]["placement_policy"]
    assert rep["cluster"] == "cheap" and pp["effective"] == "carbon-aware" and pp["action"] == "warn"
    assert pp["would_have"]["effective"] == "carbon-simple" and pp["would_have"]["action"] == "replaced"
    monkeypatch.setenv("CARBONSPAN_CARBON_POLICY_GATE", "off")
    with pytest.raises(ValueError, match="use 'enforce'"):
        resolve("carbon-aware", audit_log=audit_log, now=NOW)


def test_broken_chain_fails_closed(audit_log, spatial_win_doc):
    recorded(audit_log, spatial_win_doc, "carbon-aware")
    assert resolve("carbon-aware", audit_log=audit_log, now=NOW).action == "as-requested"
    lines = audit_log.read_text().splitlines()
    audit_log.write_text(lines[0].replace('"margin_pp":5.0', '"margin_pp":0.0') + "\n")
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("carbon-simple", "replaced")
    assert "chain is broken" in res.reason and "fail closed" in res.reason


def test_unreadable_log_fails_closed(tmp_path):
    res = resolve("carbon-aware", audit_log=tmp_path, now=NOW)  # a directory cannot be read
    assert res.action == "replaced" and "unreadable" in res.reason and "fail closed" in res.reason


def test_carbon_simple_ranks_unknown_last_and_breaks_ties_on_headroom():
    s = CarbonSimple().score(
        [cl("unknown", None), cl("a", 200.0, used=5.0), cl("b", 200.0, used=1.0), cl("c", 300.0)],
        {"size": 1},
    )
    order = sorted(range(4), key=lambda i: -s[i])
    assert order == [2, 1, 3, 0]
    # a cluster that does not fit is never chosen, however green
    rep = place({"id": "j", "size": 5}, [cl("full", 1.0, used=9.0), cl("ok", 900.0)], "carbon-simple")
    assert rep["cluster"] == "ok"


def test_future_dated_evidence_licenses_nothing(audit_log, spatial_win_doc):
    recorded(audit_log, spatial_win_doc, "carbon-aware", days_ago=-3)
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert res.action == "replaced" and "in the future" in res.reason


def test_yaml_policy_found_by_name_in_the_policy_dir(tmp_path, monkeypatch, audit_log):
    d = tmp_path / "policies"
    d.mkdir()
    (d / "roomiest.yaml").write_text("name: roomiest\nmaximize: headroom\n")
    (d / "liar.yaml").write_text("name: other\nmaximize: headroom\n")
    monkeypatch.setenv("CARBONSPAN_PLACEMENT_POLICY_DIR", str(d))
    rep = place({"id": "j"}, [cl("a", 10.0, used=9.0), cl("b", 900.0, used=1.0)], "roomiest",
                audit_log=audit_log, now=NOW)
    assert rep["cluster"] == "b" and rep["objectives"]["placement_policy"]["weighs_carbon"] is False
    with pytest.raises(LookupError, match="declares name 'other'"):
        resolve("liar", audit_log=audit_log, now=NOW)


def test_a_cluster_with_exactly_enough_room_fits():
    # capacity 10, used 8, job size 2: 10 − 8 = 2 ≥ 2 fits; the roomier one is dirtier
    rep = place({"id": "j", "size": 2}, [cl("snug", 50.0, used=8.0), cl("roomy", 900.0)],
                "carbon-simple")
    assert rep["cluster"] == "snug"


def _losing(doc):
    """Out of the dips, from home east: every live spatial policy ties lowest-average (north)."""
    return dict(doc, jobs=[dict(j, submit=j["submit"] + 4, home="east") for j in doc["jobs"]])


@pytest.mark.parametrize("row", ["overdue", "baseline-won"])
def test_other_policy_with_its_own_stale_or_losing_evidence_runs_withheld(audit_log, spatial_win_doc, row):
    # cost-aware's own evaluation exists (and is cited) but does not license carbon: it keeps
    # running (not replaced), with carbon withheld: equal prices, so licensed it would break
    # the tie on carbon ("clean"); withheld the intensities look equal and headroom decides
    if row == "overdue":
        rec, result = recorded(audit_log, spatial_win_doc, "cost-aware", days_ago=91)
        assert result["verdict"]["action"] == "ship-candidate"
    else:
        rec, result = recorded(audit_log, _losing(spatial_win_doc), "cost-aware")
        assert result["verdict"]["action"] == "ship-baseline"
    clusters = [cl("clean", 10.0, used=6.0), cl("roomy-dirty", 700.0)]
    rep = place({"id": "j"}, clusters, "cost-aware", audit_log=audit_log, now=NOW)
    pp = rep["objectives"]["placement_policy"]
    assert (pp["effective"], pp["action"], rep["cluster"]) == ("cost-aware", "carbon-withheld", "roomy-dirty")
    assert pp["evidence"]["seq"] == rec.seq
    assert ("re-test overdue" if row == "overdue" else "simple baseline") in rep["reason"]


@pytest.mark.parametrize("flag", ["removed", False])
def test_the_sample_stays_synthetic_whatever_its_flag_says(audit_log, flag):
    from placement.sample import sample_trace

    doc = sample_trace()
    if flag == "removed":
        del doc["synthetic"]
    else:
        doc["synthetic"] = flag
    trace = parse_trace(doc)
    assert trace.synthetic is False  # the flag alone would make it real evidence
    result = run_evaluation(trace, "forecast-greedy")
    assert result["trace"]["synthetic"] is True  # its digest gives it away
    # a hand-made event claiming the sample is real (as an edited evaluator could write) is
    # still synthetic to the gate; carbon-aware wins nothing on it anyway, so use a winner
    rec = record_evaluation(audit_log, trace, result)
    assert rec.event["trace"]["synthetic"] is True
    forged = dict(result, candidate="carbon-aware",
                  trace=dict(result["trace"], synthetic=False),
                  verdict={"ships": "carbon-aware", "action": "ship-candidate", "reason": "forged"})
    from placement.decision import Settings, audit_event
    from schema import chainlog

    chainlog.append(audit_log, audit_event(forged, trace, Settings(),
                                           (NOW - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")))
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert (res.effective, res.action) == ("carbon-simple", "replaced") and "only synthetic" in res.reason


def test_an_overdue_reason_never_contradicts_its_own_figures(audit_log, spatial_win_doc):
    """90.3 days against a 90-day cadence is overdue; the reason must not say '90 days old >
    cadence 90 days' (the age rounded to whole days)."""
    recorded(audit_log, spatial_win_doc, "carbon-aware", days_ago=90.3)
    res = resolve("carbon-aware", audit_log=audit_log, now=NOW)
    assert res.action == "replaced" and "90.30 days old > cadence 90 days" in res.reason, res.reason
