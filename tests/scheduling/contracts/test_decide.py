"""The four ordered layers, each guard at its boundary, worked by hand (docs/contracts.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from signal_rows import forecast, log, ms, observed

from scheduling.contracts import parse_contract
from scheduling.decide import Guards, Ops, decide

# a flexible job: deadline 06:00 UTC, may wait 240 min, p50 30 / p95 60 min (guard band 120 min)
BASE = {"name": "reindex", "class": "flexible", "deadline": "06:00", "timezone": "UTC",
        "max_deferral_minutes": 240, "runtime": {"p50_minutes": 30, "p95_minutes": 60}, "energy_kwh": 10,
        "residency": ["r1"], "home_region": "r1", "checkpoint": "required", "cancellation": "safe",
        "fallback": "run_by_deadline"}
C = parse_contract(BASE)
NOW = 60  # 01:00 UTC; observations up to 00:59 are known
# home: 300 now, a dip to 100 from 03:00 to 03:30 (slots 12..13 of the forecast from 00:00)
HOME_FC = [300.0] * 12 + [100.0, 100.0] + [300.0] * 10
PAST = observed("r1", -60, [300.0] * 8)  # 23:00..01:00, last interval ends 01:00 (known 01:01)


def sig(*extra):
    return log(observed("r1", -60, [300.0] * 7), forecast("r1", 50, 0, HOME_FC), *extra)


def test_carbon_picks_the_forecast_dip() -> None:
    d = decide(C, ms(NOW), sig())
    assert (d.layer, d.reason, d.action, d.region) == ("soft_objective", "lowest_score", "defer", "r1")
    assert d.start == ms(180)  # 03:00: the 30-minute run fits the 100 g dip exactly
    assert d.deferral_minutes == 120 and d.slack_minutes == 120  # 06:00 - 03:00 - 60 min
    assert d.forecast["provider"] == "recorded" and d.forecast["intensity_at_decision"] == 100.0
    assert d.forecast["issued_at"] == "2026-03-01T00:50:00Z"


def test_a_far_cleaner_region_outside_residency_is_never_recommended() -> None:
    clean = observed("r2", -60, [1.0] * 7)
    d = decide(C, ms(NOW), sig(clean, forecast("r2", 50, 0, [1.0] * 24)))
    assert d.region == "r1"
    assert ("r2", "hard_constraints", "residency") in {(r, la, re) for r, _, la, re in d.vetoes}


def test_region_moves_need_every_licence_and_14_shadow_days() -> None:
    licensed = parse_contract({**BASE, "residency": ["r1", "r2"], "allow_region_move": True,
                               "input_data_regions": ["r2"], "checkpoint_ids": "region_independent",
                               "recovery_to_home": True})
    s = sig(observed("r2", -60, [1.0] * 7), forecast("r2", 50, 0, [1.0] * 24))
    assert decide(licensed, ms(NOW), s, Ops(shadow_days=14)).region == "r2"
    assert decide(licensed, ms(NOW), s, Ops(shadow_days=14)).action == "move"
    for contract, ops in [(licensed, Ops(shadow_days=13.9)),
                          (licensed.model_copy(update={"recovery_to_home": False}), Ops(shadow_days=30)),
                          (licensed.model_copy(update={"input_data_regions": []}), Ops(shadow_days=30)),
                          (licensed.model_copy(update={"cancellation": "unsafe"}), Ops(shadow_days=30)),
                          (licensed.model_copy(update={"checkpoint": "none"}), Ops(shadow_days=30))]:
        d = decide(contract, ms(NOW), s, ops)
        assert d.region == "r1" and ("r2", "region_move") in {(r, re) for r, _, _, re in d.vetoes}


def test_two_p95_rule_beats_the_carbon_best_slot() -> None:
    # a start at the dip (04:15-04:45) leaves 105 min < 2 x 60 before the deadline: vetoed by the guard
    fc = [300.0] * 17 + [1.0, 1.0] + [300.0] * 5
    d = decide(C, ms(NOW), log(PAST, forecast("r1", 50, 0, fc)))
    assert d.start != ms(255) and ms(255) in {s for _, s, _, re in d.vetoes if re == "deadline_guard"}
    # 04:00 is the last start the guard allows (06:00 - 120 min); it half-covers the dip (150.5 g)
    assert d.start == ms(240)
    # time left under 2 x p95 at submission: run at once, whatever the forecast
    late = decide(C, ms(241), log(observed("r1", 0, [300.0] * 16), forecast("r1", 235, 0, fc)))
    assert (late.layer, late.reason, late.start, late.action) == ("safety_gates", "deadline_guard", ms(241), "start_now")
    edge = decide(C, ms(240), log(observed("r1", 0, [300.0] * 15), forecast("r1", 235, 0, fc)))
    assert edge.reason != "deadline_guard"  # exactly 2 x p95 left is not under it


@pytest.mark.parametrize(("age", "stale"), [(59, False), (60, True)])
def test_signal_staleness_boundary(age: int, stale: bool) -> None:
    # the latest observation's interval ends `age` minutes before the decision
    s = log(observed("r1", NOW - age - 15, [300.0]), forecast("r1", 50, 0, HOME_FC))
    d = decide(C, ms(NOW), s)
    assert (d.reason == "signal_stale") is stale
    if stale:
        assert d.layer == "safety_gates" and d.action == "run_by_deadline"
        assert d.start == ms(240)  # the contract's fallback: the latest start the guard allows
        assert d.signal["staleness_minutes"] == 60


def test_missing_signal_turns_optimisation_off_without_imputing() -> None:
    d = decide(C, ms(NOW), log(forecast("r1", 50, 0, HOME_FC)))
    assert (d.reason, d.signal["status"]) == ("signal_stale", "missing")


def test_restore_failures_one_vs_two_and_the_next_local_day() -> None:
    seoul = C.model_copy(update={"timezone": "Asia/Seoul", "deadline": "2026-03-01T06:00:00Z"})
    one = Ops(restore_failures=(ms(10),))
    two = Ops(restore_failures=(ms(10), ms(20)))
    assert decide(seoul, ms(NOW), sig(), one).reason == "lowest_score"
    d = decide(seoul, ms(NOW), sig(), two)
    assert (d.layer, d.reason) == ("safety_gates", "restore_failures")
    # both failures at 09:10/09:20 KST on 1 March; a failure the day before (KST) does not count
    prev_day = Ops(restore_failures=(ms(-540), ms(20)))  # 15:00 UTC on 28 Feb is 00:00 KST 1 March
    assert decide(seoul, ms(NOW), sig(), prev_day).reason == "restore_failures"
    prev_day = Ops(restore_failures=(ms(-541), ms(20)))  # 23:59 KST on 28 Feb
    assert decide(seoul, ms(NOW), sig(), prev_day).reason == "lowest_score"


@pytest.mark.parametrize(("ops", "off"), [(Ops(queue_age_minutes=60), False), (Ops(queue_age_minutes=60.5), True),
                                          (Ops(retry_rate=0.2), False), (Ops(retry_rate=0.21), True)])
def test_kill_switch_thresholds(ops: Ops, off: bool) -> None:
    d = decide(C, ms(NOW), sig(), ops)
    assert (d.reason == "kill_switch") is off
    if off:
        assert (d.start, d.action) == (ms(NOW), "start_now")


def test_release_cap_prevents_a_herd_at_the_green_hour() -> None:
    full = Ops(released={("r1", ms(180)): 50})
    d = decide(C, ms(NOW), sig(), full)
    # next best: 02:45 and 03:15 each half-cover the dip (200 g); the earlier one wins the tie
    assert d.start == ms(165) and ("r1", ms(180), "safety_gates", "herd_cap") in d.vetoes
    assert decide(C, ms(NOW), sig(), Ops(released={("r1", ms(180)): 49})).start == ms(180)


def test_contract_without_deferral_or_immediate_runs_at_submission() -> None:
    never = parse_contract({k: v for k, v in BASE.items() if k != "max_deferral_minutes"})
    d = decide(never, ms(NOW), sig())
    assert (d.start, d.layer, d.reason) == (ms(NOW), "hard_constraints", "no_deferral_allowed")
    now = parse_contract({**BASE, "class": "immediate"})
    assert decide(now, ms(NOW), sig()).reason == "immediate"


def test_soft_objective_weights_worked_by_hand() -> None:
    # r1 (home) 300 g, cost 0.10; r2 (licensed move) 100 g, cost 0.30, free capacity 0.5.
    # normalised: carbon r1 1 / r2 0; cost r1 0 / r2 1; capacity used r1 0 / r2 1; locality 0 / 1
    # score r1 = 0.45 x 1 = 0.45; r2 = 0.25 + 0.20 + 0.10 = 0.55 -> r1 wins, although r2 is cleaner
    c = parse_contract({**BASE, "residency": ["r1", "r2"], "allow_region_move": True, "input_data_regions": ["r2"],
                        "checkpoint_ids": "region_independent", "recovery_to_home": True, "max_deferral_minutes": 1})
    s = log(observed("r1", -60, [300.0] * 7), forecast("r1", 50, 0, [300.0] * 24),
            observed("r2", -60, [100.0] * 7), forecast("r2", 50, 0, [100.0] * 24))
    ops = Ops(shadow_days=14, cost_per_kwh={"r1": 0.1, "r2": 0.3}, capacity={"r1": 1.0, "r2": 0.5})
    d = decide(c, ms(NOW), s, ops)
    assert d.region == "r1" and d.forecast["score"] == pytest.approx(0.45)
    # weights are configurable: carbon 0.9 makes r2 win (r1 0.9 x 1 = 0.9 > r2 0.25 + 0.2 + 0.1)
    assert decide(c, ms(NOW), s, ops, replace(Guards(), w_carbon=0.9)).region == "r2"


def test_hard_limits_capacity_and_cost() -> None:
    d = decide(C, ms(NOW), sig(), Ops(capacity={"r1": 0.0}))
    assert (d.layer, d.reason) == ("fallback", "no_eligible_option")
    assert ("r1", ms(NOW), "hard_constraints", "capacity") in d.vetoes
    pricey = C.model_copy(update={"max_cost": 1.0})
    assert ("r1", ms(NOW), "hard_constraints", "max_cost") in decide(pricey, ms(NOW), sig(),
                                                                     Ops(cost_per_kwh={"r1": 0.2})).vetoes


def test_decision_unchanged_when_every_value_after_it_changes() -> None:
    before = decide(C, ms(NOW), sig())
    # every observation known after 01:00 and every forecast issued after it: wildly different
    later = log(observed("r1", -60, [300.0] * 7), forecast("r1", 50, 0, HOME_FC),
                observed("r1", 45, [0.0] * 40), forecast("r1", 61, 0, [0.0] * 40),
                forecast("r1", 120, 60, [5000.0] * 40))
    assert decide(C, ms(NOW), later) == before


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(now=st.integers(min_value=0, max_value=200),
       future_obs=st.lists(st.floats(min_value=0, max_value=2000), min_size=1, max_size=40),
       future_fc=st.lists(st.floats(min_value=0, max_value=2000), min_size=1, max_size=40),
       lag=st.integers(min_value=1, max_value=30))
def test_property_nothing_after_the_decision_changes_it(now, future_obs, future_fc, lag) -> None:
    """Any observation known after `now` and any forecast issued after it leave the decision as it was."""
    base = [observed("r1", -120, [300.0] * 8 + [250.0] * 16), forecast("r1", -5, 0, HOME_FC)]
    past = [[r for g in base for r in g if r.get("observed_at", r.get("issued_at")) <= _z(now)]]
    before = decide(C, ms(now), log(*past))
    later = [observed("r1", now + lag, list(future_obs), lag=0),  # known from now + lag on
             forecast("r1", now + lag, now, list(future_fc)),
             observed("r1", now - 30, future_obs[:1], lag=16 + lag)]  # a late correction of the past
    after = decide(C, ms(now), log(*past, *later))
    assert after == before


def _z(minutes: int) -> str:
    from signal_rows import at, z

    return z(at(minutes))
