"""Third-party providers through a real entry point, and the audit log's tamper detection."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from placement import place, resolve
from placement.audit import read_log
from placement.evaluation import record_evaluation, run_evaluation
from placement.registry import UnknownPolicy, available, get_provider
from placement.trace import parse_trace
from schema import chainlog

CLUSTERS = [
    {"name": "coal", "region": "PL", "carbon_intensity": 800.0, "cost_per_hour": 1.0, "capacity": 10, "used": 0},
    {"name": "hydro", "region": "SE", "carbon_intensity": 20.0, "cost_per_hour": 1.0, "capacity": 10, "used": 5},
]


def test_entry_point_provider_is_found_probed_and_gated(plugin_dist, audit_log, spatial_win_doc):
    assert "green-plugin" in available()
    provider = get_provider("green-plugin")
    assert provider.score(CLUSTERS, {"size": 1}) == [-800.0, -20.0]
    # unmeasured: carbon withheld (equal intensities -> all score the same -> first cluster)
    rep = place({"id": "j"}, CLUSTERS, "green-plugin", audit_log=audit_log)
    assert rep["objectives"]["placement_policy"]["action"] == "carbon-withheld"
    assert rep["cluster"] == "coal"
    # evaluated the production way (per-job score calls) and recorded as a real win: licensed
    trace = parse_trace(spatial_win_doc)
    result = run_evaluation(trace, "green-plugin")
    assert result["policies"]["green-plugin"]["reduction_pct"] == pytest.approx(80.0)
    record_evaluation(audit_log, trace, result)
    rep = place({"id": "j"}, CLUSTERS, "green-plugin", audit_log=audit_log)
    assert rep["cluster"] == "hydro"
    assert rep["objectives"]["placement_policy"]["action"] == "as-requested"


def test_entry_point_provider_that_ignores_carbon_runs_as_requested(plugin_dist, audit_log):
    res = resolve("roomy-plugin", audit_log=audit_log)
    assert (res.action, res.weighs_carbon) == ("as-requested", False)
    assert place({"id": "j"}, CLUSTERS, "roomy-plugin", audit_log=audit_log)["cluster"] == "coal"


def test_broken_plugin_and_unknown_names_are_clear_errors(plugin_dist):
    with pytest.raises(UnknownPolicy, match="broken-plugin.*has no score"):
        get_provider("broken-plugin")
    with pytest.raises(UnknownPolicy, match="no placement policy named 'nope'; available: .*carbon-aware"):
        get_provider("nope")
    with pytest.raises(UnknownPolicy, match="evaluation candidate"):
        get_provider("forecast-greedy")


def test_audit_log_records_everything_and_detects_tampering(audit_log, spatial_win_doc):
    trace = parse_trace(spatial_win_doc)
    for name in ("carbon-aware", "forecast-greedy"):
        record_evaluation(audit_log, trace, run_evaluation(trace, name))
    log = read_log(audit_log)
    assert log.problem is None and [r.seq for r in log.evaluations] == [0, 1]
    ev = log.evaluations[0].event
    assert ev["policy"] == "carbon-aware" and ev["trace"]["digest"] == trace.digest
    assert ev["trace"]["method"] == "marginal" and ev["trace"]["basis"] == "decision"
    assert ev["trace"]["synthetic"] is False
    assert set(ev["policies"]) == {"carbon-agnostic", "lowest-average-region", "threshold-shift",
                                   "oracle", "carbon-aware"}
    assert ev["verdict"]["action"] == "ship-candidate" and ev["evaluated_at"]
    # deleting the first event breaks the chain: the gate sees no evaluation at all
    lines = audit_log.read_text().splitlines()
    audit_log.write_text(lines[1] + "\n")
    bad = read_log(audit_log)
    assert bad.evaluations == [] and "prev_mismatch" in bad.problem
    with pytest.raises(ValueError, match="refusing to append"):
        record_evaluation(audit_log, trace, run_evaluation(trace, "carbon-aware"))
    assert chainlog.verify(audit_log)


def test_evaluations_older_than_a_fresh_one_do_not_count(audit_log, spatial_win_doc, flat_doc):
    # a real win, then a real retirement of the same policy: the latest decides
    win = parse_trace(spatial_win_doc)
    record_evaluation(audit_log, win, run_evaluation(win, "carbon-aware"))
    flat = parse_trace(flat_doc)
    record_evaluation(audit_log, flat, run_evaluation(flat, "carbon-aware"))
    res = resolve("carbon-aware", audit_log=audit_log, now=datetime.now(UTC))
    assert res.action == "carbon-withheld" and res.evidence["seq"] == 1


@pytest.mark.parametrize("field, value", [("verdict", "ship-candidate"), ("delta_pp", "5"),
                                          ("policy", None), ("trace", [])])
def test_a_well_chained_but_malformed_event_fails_closed(audit_log, spatial_win_doc, field, value):
    # a real winning evaluation, then a hand-appended event of the wrong shape: the chain
    # verifies, so only the shape check stands between it and a crash or a half-read licence
    trace = parse_trace(spatial_win_doc)
    good = record_evaluation(audit_log, trace, run_evaluation(trace, "carbon-aware"))
    assert resolve("carbon-aware", audit_log=audit_log).action == "as-requested"
    chainlog.append(audit_log, {**good.event, field: value})
    assert chainlog.verify(audit_log) == []
    log = read_log(audit_log)
    assert log.evaluations == [] and "event seq 1 is not a well-formed" in log.problem
    assert field in log.problem
    res = resolve("carbon-aware", audit_log=audit_log)
    assert (res.effective, res.action) == ("carbon-simple", "replaced")
    assert "fail closed" in res.reason


def test_audit_log_default_path(monkeypatch, tmp_path, spatial_win_doc):
    from placement.audit import default_log_path, resolve_log_path

    monkeypatch.delenv("CARBONSPAN_PLACEMENT_AUDIT_LOG")
    assert default_log_path() == tmp_path / "state" / "carbonspan" / "placement-audit.jsonl"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    want = tmp_path / "home" / ".local" / "state" / "carbonspan" / "placement-audit.jsonl"
    assert default_log_path() == want
    assert resolve_log_path(None) == want and resolve_log_path("~/x.jsonl") == tmp_path / "home" / "x.jsonl"
    # recording with no path given lands there (directories created), and the gate reads it
    trace = parse_trace(spatial_win_doc)
    record_evaluation(resolve_log_path(None), trace, run_evaluation(trace, "carbon-aware"))
    assert want.is_file() and resolve("carbon-aware").action == "as-requested"
    monkeypatch.setenv("CARBONSPAN_PLACEMENT_AUDIT_LOG", str(tmp_path / "env.jsonl"))
    assert default_log_path() == tmp_path / "env.jsonl"


def test_a_plugin_that_raises_is_an_error_naming_it(plugin_dist, audit_log, spatial_win_doc):
    msg = r"placement provider 'crashy-plugin' \(entry point .*Crashy\) failed while scoring 2 clusters: KeyError"
    with pytest.raises(ValueError, match=msg):
        place({"id": "j"}, CLUSTERS, "crashy-plugin", audit_log=audit_log)
    with pytest.raises(ValueError, match="'crashy-plugin'.*failed while scoring"):
        run_evaluation(parse_trace(spatial_win_doc), "crashy-plugin")
