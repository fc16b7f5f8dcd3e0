"""The model C(j, r, t) and the five policies, with the arithmetic written beside each number."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.evaluate import (
    Placement,
    agnostic,
    evaluate_policies,
    forecast_greedy,
    job_emissions,
    lowest_average_region,
    oracle,
    prefix_sums,
    provider_policy,
    threshold_shift,
)
from placement.providers import CarbonAware
from placement.trace import TraceError, parse_trace


def test_emissions_equal_hand_computed_value():
    doc = {
        "method": "average",
        "regions": {"A": [100.0, 200.0, 300.0, 400.0, 500.0], "B": [10.0, 20.0, 30.0, 40.0, 50.0]},
        "jobs": [{"id": "j", "submit": 0, "duration": 2, "energy_kwh": 6.0, "slack": 3}],
    }
    t = parse_trace(doc)
    # C(j, A, 1) = 6 kWh / 2 h × (200 + 300) g/kWh = 3 × 500 = 1500 g
    assert job_emissions(t, Placement(np.array([0]), np.array([1])))[0] == pytest.approx(1500.0)
    # C(j, B, 3) = 3 × (40 + 50) = 270 g
    assert job_emissions(t, Placement(np.array([1]), np.array([3])))[0] == pytest.approx(270.0)
    # agnostic: home A at 0 -> 3 × (100 + 200) = 900 g; oracle: B at 0 -> 3 × 30 = 90 g
    res = evaluate_policies(t, "carbon-aware", provider_policy(CarbonAware()))
    assert res["carbon-agnostic"]["emissions_g"] == pytest.approx(900.0)
    assert res["oracle"]["emissions_g"] == pytest.approx(90.0)
    # reduction(oracle) = 100 × (1 − 90/900) = 90 %
    assert res["oracle"]["reduction_pct"] == pytest.approx(90.0)


def test_job_running_past_the_trace_is_an_error_naming_it():
    doc = {
        "method": "average",
        "regions": {"A": [1.0] * 10},
        "jobs": [{"id": "ok", "submit": 0, "duration": 1, "energy_kwh": 1, "slack": 0},
                 {"id": "late-etl", "submit": 5, "duration": 3, "energy_kwh": 1, "slack": 3}],
    }
    with pytest.raises(TraceError, match="late-etl.*runs past the trace's 10 hours"):
        parse_trace(doc)


@pytest.mark.parametrize(
    "bad, msg",
    [
        ({"method": "guess"}, "method"),
        ({"regions": {"A": [1.0, -2.0]}}, "region 'A' hour 1"),
        ({"regions": {"A": [1.0, 2.0], "B": [1.0]}}, "'A' has 2, 'B' has 1; cut the traces"),
        ({"regions": {"A": [1.0, 2.0], "B": "12"}}, "region 'B' must be a list"),
        ({"jobs": [{"id": "x", "submit": 0.5, "duration": 1, "energy_kwh": 1}]}, "'submit' must be a whole"),
        ({"jobs": [{"id": "x", "submit": 0, "duration": 1, "energy_kwh": 1, "regions": ["Z"]}]}, "unknown region"),
        ({"jobs": [{"id": "x", "submit": 0, "duration": 1, "energy_kwh": 1, "regions": []}]},
         "job 'x': 'regions' must be a non-empty list"),
        ({"jobs": [{"id": "x", "submit": 0, "duration": 1, "energy_kwh": 1, "regions": ["A"], "home": "B"}]}, "home 'B'"),
    ],
)
def test_bad_traces_say_what_to_fix(bad, msg):
    doc = {"method": "average", "regions": {"A": [1.0, 2.0], "B": [1.0, 2.0]},
           "jobs": [{"id": "x", "submit": 0, "duration": 1, "energy_kwh": 1}]}
    doc.update(bad)
    with pytest.raises(TraceError, match=msg):
        parse_trace(doc)


def test_simple_baselines_follow_their_rules():
    # A: mean 250, B: mean 200 -> lowest-average-region picks B, at submission
    a = [400.0, 400.0, 100.0, 100.0, 400.0, 400.0, 100.0, 100.0]
    b = [200.0] * 8
    doc = {"method": "average", "regions": {"A": a, "B": b},
           "jobs": [{"id": "j", "submit": 0, "duration": 2, "energy_kwh": 2.0, "slack": 4}]}
    t = parse_trace(doc)
    p = prefix_sums(t)
    la = lowest_average_region(t, p)
    assert (la.region[0], la.start[0]) == (1, 0)
    # A's 30th percentile is 100 (half its hours are 100); the first window (home A) with
    # mean <= 100 starts at hour 2 -> threshold-shift starts there, in A
    ts = threshold_shift(t, p)
    assert (ts.region[0], ts.start[0]) == (0, 2)
    ag = agnostic(t, p)
    assert (ag.region[0], ag.start[0]) == (0, 0)


def test_live_provider_uses_only_the_intensity_at_submission():
    # at hour 0, B (300) is cleaner than A (350), but A dips to 10 from hour 1:
    # carbon-aware runs at once in B; it never waits and never looks ahead
    doc = {"method": "average", "regions": {"A": [350.0, 10.0, 10.0], "B": [300.0, 300.0, 300.0]},
           "jobs": [{"id": "j", "submit": 0, "duration": 2, "energy_kwh": 1.0, "slack": 1}]}
    t = parse_trace(doc)
    pl = provider_policy(CarbonAware())(t, prefix_sums(t))
    assert (pl.region[0], pl.start[0]) == (1, 0)


def test_forecast_greedy_never_reads_the_future_moved_dip():
    """Yesterday's dip was at 12 h; today it moved three hours to 15 h.

    forecast-greedy (persistence: today looks like yesterday) picks 12 h today; the oracle,
    seeing the truth, picks 15 h. Submission is at 00 h of day 1 (hour 24) with 23 h slack.
    """
    day0 = [400.0] * 24
    day0[12] = 50.0
    day1 = [400.0] * 24
    day1[15] = 50.0
    doc = {"method": "marginal", "regions": {"r": day0 + day1 + [400.0] * 24},
           "jobs": [{"id": "j", "submit": 24, "duration": 1, "energy_kwh": 1.0, "slack": 23}]}
    t = parse_trace(doc)
    p = prefix_sums(t)
    assert forecast_greedy(t, p).start[0] == 24 + 12
    assert oracle(t, p).start[0] == 24 + 15


@settings(max_examples=60, deadline=None)
@given(
    history=st.lists(st.floats(0, 1000, allow_nan=False), min_size=24, max_size=24),
    future_a=st.lists(st.floats(0, 1000, allow_nan=False), min_size=30, max_size=30),
    future_b=st.lists(st.floats(0, 1000, allow_nan=False), min_size=30, max_size=30),
    duration=st.integers(1, 6),
    slack=st.integers(0, 24),
)
def test_forecast_greedy_choice_is_unchanged_by_any_future(history, future_a, future_b, duration, slack):
    """Property: whatever happens from the submit hour on, forecast-greedy decides the same."""
    choices = []
    for future in (future_a, future_b):
        doc = {"method": "average", "regions": {"r": history + future, "s": history[::-1] + future},
               "jobs": [{"id": "j", "submit": 24, "duration": duration, "energy_kwh": 1.0, "slack": slack}]}
        t = parse_trace(doc)
        pl = forecast_greedy(t, prefix_sums(t))
        choices.append((int(pl.region[0]), int(pl.start[0])))
    assert choices[0] == choices[1]


@st.composite
def traces(draw):
    n_regions = draw(st.integers(1, 3))
    hours = draw(st.integers(1, 60))  # shorter than a day too: forecast-greedy has no history
    vals = st.floats(0, 900, allow_nan=False, width=32)
    regions = {f"r{i}": draw(st.lists(vals, min_size=hours, max_size=hours)) for i in range(n_regions)}
    jobs = []
    for k in range(draw(st.integers(1, 6))):
        d = draw(st.integers(1, min(5, hours)))
        slack = draw(st.integers(0, min(24, hours - d)))
        submit = draw(st.integers(0, hours - d - slack))
        allowed = draw(st.lists(st.sampled_from(list(regions)), min_size=1, max_size=n_regions, unique=True))
        jobs.append({"id": f"j{k}", "submit": submit, "duration": d, "slack": slack,
                     "energy_kwh": draw(st.floats(0.1, 50)), "regions": allowed})
    return {"method": "average", "regions": regions, "jobs": jobs}


@settings(max_examples=80, deadline=None)
@given(doc=traces())
def test_oracle_is_a_lower_bound_on_every_policy(doc):
    t = parse_trace(doc)
    p = prefix_sums(t)
    best = job_emissions(t, oracle(t, p), p)
    for policy in (agnostic, lowest_average_region, threshold_shift, forecast_greedy,
                   provider_policy(CarbonAware())):
        placed = policy(t, p)
        assert t.allowed[np.arange(len(placed.region)), placed.region].all()
        other = job_emissions(t, placed, p)
        assert (best <= other + 1e-6 * np.maximum(1.0, other)).all(), policy


def test_forecast_greedy_without_a_day_of_history_runs_at_once_at_home():
    # submitted at hour 5: there is no same-hour value from yesterday to forecast with, so
    # it must not "forecast" from hours 0-23 (which include the future dip at 10 h)
    a = [400.0] * 48
    a[10] = 5.0
    doc = {"method": "average", "regions": {"A": a, "B": [300.0] * 48},
           "jobs": [{"id": "early", "submit": 5, "duration": 1, "energy_kwh": 1.0, "slack": 10}]}
    t = parse_trace(doc)
    pl = forecast_greedy(t, prefix_sums(t))
    assert (pl.region[0], pl.start[0]) == (0, 5)


def test_forecast_greedy_at_the_one_day_boundary():
    """Submitted at hour 23, the "same hour yesterday" of hour 46 would be hour 23 — the submit
    hour itself, not yet observed — so with under a day of history the job runs at once at
    home. At hour 24 the full day 0..23 is history and the forecast is used."""
    a = [400.0] * 72
    a[23] = 5.0  # a dip at the submit hour: only a forecast that reads the future sees it
    b = [300.0] * 72
    doc = {"method": "average", "regions": {"A": a, "B": b},
           "jobs": [{"id": "j23", "submit": 23, "duration": 1, "energy_kwh": 1.0, "slack": 24},
                    {"id": "j24", "submit": 24, "duration": 1, "energy_kwh": 1.0, "slack": 24,
                     "home": "B"}]}
    t = parse_trace(doc)
    pl = forecast_greedy(t, prefix_sums(t))
    assert (int(pl.region[0]), int(pl.start[0])) == (0, 23)  # at once, at home A
    # j24 forecasts hour 47 by hour 23 (5 g/kWh, observed): it waits 23 h and runs in A
    assert (int(pl.region[1]), int(pl.start[1])) == (0, 47)


def test_forecast_greedy_on_a_trace_shorter_than_a_day_runs_everything_at_once_at_home():
    doc = {"method": "average", "regions": {"A": [400.0, 10.0, 10.0, 10.0], "B": [5.0] * 4},
           "jobs": [{"id": "j", "submit": 0, "duration": 1, "energy_kwh": 2.0, "slack": 3}]}
    res = evaluate_policies(parse_trace(doc), "forecast-greedy", forecast_greedy)
    # no history at all: forecast-greedy is carbon-agnostic, 2 kWh × 400 = 800 g, 0 %
    assert res["forecast-greedy"]["emissions_g"] == pytest.approx(800.0)
    assert res["forecast-greedy"]["reduction_pct"] == pytest.approx(0.0)


@settings(max_examples=60, deadline=None)
@given(
    hist=st.integers(0, 40),
    past=st.lists(st.floats(0, 1000, allow_nan=False), min_size=40, max_size=40),
    future_a=st.lists(st.floats(0, 1000, allow_nan=False), min_size=30, max_size=30),
    future_b=st.lists(st.floats(0, 1000, allow_nan=False), min_size=30, max_size=30),
    duration=st.integers(1, 6),
    slack=st.integers(0, 24),
)
def test_forecast_greedy_never_reads_the_future_with_any_amount_of_history(
    hist, past, future_a, future_b, duration, slack
):
    """Property: with 0-40 h of history (either side of the one-day boundary), rewriting every
    hour from submission on never changes forecast-greedy's choice."""
    choices = []
    for future in (future_a, future_b):
        r = past[:hist] + future
        doc = {"method": "average", "regions": {"r": r, "s": r[::-1][len(future):] + future},
               "jobs": [{"id": "j", "submit": hist, "duration": duration, "energy_kwh": 1.0,
                         "slack": slack, "home": "s"}]}
        t = parse_trace(doc)
        pl = forecast_greedy(t, prefix_sums(t))
        choices.append((int(pl.region[0]), int(pl.start[0])))
    assert choices[0] == choices[1]
    if hist < 24:
        assert choices[0] == (1, hist)  # under a day of history: at once, at home


def test_a_provider_is_offered_only_the_jobs_allowed_regions():
    """A hedging provider that picks the *second*-cleanest cluster it is offered: the choice
    depends on which clusters are offered, so offering disallowed regions would change it."""

    class SecondCleanest:
        name = "second-cleanest"

        def score(self, clusters, job):
            order = sorted(range(len(clusters)), key=lambda i: clusters[i]["carbon_intensity"])
            return [1.0 if i == order[min(1, len(order) - 1)] else 0.0 for i in range(len(clusters))]

    doc = {"method": "average",
           "regions": {"A": [100.0] * 4, "B": [200.0] * 4, "C": [300.0] * 4},
           "jobs": [{"id": "bc", "submit": 1, "duration": 1, "energy_kwh": 1.0, "regions": ["B", "C"]},
                    {"id": "abc", "submit": 1, "duration": 1, "energy_kwh": 1.0}]}
    t = parse_trace(doc)
    pl = provider_policy(SecondCleanest())(t, prefix_sums(t))
    # offered {B: 200, C: 300} -> second cleanest is C (index 2); offered all three -> B (1)
    assert pl.region.tolist() == [2, 1] and pl.start.tolist() == [1, 1]


@settings(max_examples=60, deadline=None)
@given(doc=traces(), which=st.sampled_from(["carbon-aware", "carbon-simple", "cost-aware"]))
def test_builtin_array_scoring_chooses_as_if_offered_only_the_allowed_regions(doc, which):
    """The evaluator scores built-ins over all regions at once; that must pick what scoring
    each job's allowed regions alone (the production call) picks."""
    from placement.evaluate import _score_rows, provider_fields
    from placement.providers import BUILTINS, choose

    t = parse_trace(doc)
    provider = BUILTINS[which]()
    f = provider_fields(t, slice(0, len(t.submit)))
    whole = choose(provider.score_arrays(f), t.allowed)
    alone = choose(_score_rows(provider, t, f, slice(0, len(t.submit))), t.allowed)
    assert whole.tolist() == alone.tolist()


def test_threshold_shift_compares_window_means_with_the_percentile_of_hourly_values():
    """The threshold is the 30th percentile of the home region's *hourly* values over the
    whole trace (numpy's linear interpolation), not of run-window means."""
    a = [300.0, 100.0, 300.0, 100.0, 300.0, 300.0, 300.0, 100.0, 100.0, 300.0, 300.0, 300.0]
    doc = {"method": "average", "regions": {"A": a, "B": [1.0] * 12},
           "jobs": [{"id": "j", "submit": 0, "duration": 2, "energy_kwh": 1.0, "slack": 8}]}
    t = parse_trace(doc)
    # hourly values sorted: 4 × 100, 8 × 300; rank 0.3 × (12 − 1) = 3.3 -> 100 + 0.3 × 200 = 160
    # 2 h window means from hours 0..8: 200 200 200 200 300 300 200 100 200 -> first ≤ 160: 7
    # (the 30th percentile of the eleven window means would be 200: start 0; B is not home)
    pl = threshold_shift(t, prefix_sums(t))
    assert (int(pl.region[0]), int(pl.start[0])) == (0, 7)
