"""Forecast providers: as-of semantics (never reading the future), the noisy provider's
calibration, and the labels that keep perfect foresight from passing as achievable."""

from __future__ import annotations

import numpy as np
import pytest
from sim_inputs import HOUR, T0, experiment

import scheduling
from scheduling.carbon import make_trace
from scheduling.forecast import PERFECT_LABEL, Noisy, Perfect, Persistence, Recorded, make_provider
from scheduling.prefabs import make_policy
from scheduling.shift import ShiftRules

RNG = np.random.default_rng(42)
VALUES = 200 + 80 * np.sin(np.arange(24 * 14) * 2 * np.pi / 24) + RNG.normal(0, 20, 24 * 14)
TRACE = make_trace("t", T0 + HOUR * np.arange(VALUES.size), np.clip(VALUES, 1, None))


def rules(provider, forecast: bool = True) -> ShiftRules:
    return ShiftRules(make_policy({"type": "timeshift", "forecast": forecast,
                                   "taskStopper": {"forecast": forecast}}), provider)


@pytest.mark.parametrize("provider, forecast", [(Persistence(), True), ("recorded", True),
                                                (Persistence(), False)],
                         ids=["persistence", "recorded", "no-forecast-mean"])
def test_decisions_never_read_the_future(provider, forecast: bool) -> None:
    if provider == "recorded":
        # forecasts issued every 6 h of the real values + 5 %, each covering 6 h before its
        # issue to 30 h after: an issue later than the decision would cover the decision's
        # whole horizon, so reading one changes the decision (a gap would hide it)
        issued = np.repeat(T0 + 6 * HOUR * np.arange(50), 36)
        ts = issued + HOUR * np.tile(np.arange(-5, 31), 50)
        provider = Recorded(issued, ts, TRACE.value_at(ts) * 1.05)
    for now in T0 + HOUR * np.arange(30, 300):
        future = RNG.uniform(0, 1000, TRACE.values.size)
        changed = TRACE.replaced_after(int(now), future)
        if isinstance(provider, Recorded):  # and every forecast issued after now
            late = provider.issued > now
            vs = provider.values.copy()
            vs[late] = RNG.uniform(0, 1000, int(late.sum()))
            other = Recorded(provider.issued.copy(), provider.t_ms.copy(), vs)
        else:
            other = provider
        a, b = rules(provider, forecast), rules(other, forecast)
        assert a.hold(0, TRACE, int(now)) == b.hold(0, changed, int(now)), now
        assert a.high(TRACE, int(now)) == b.high(changed, int(now)), now


def test_the_perfect_provider_does_read_the_future_so_the_test_above_has_teeth() -> None:
    differ = 0
    for now in T0 + HOUR * np.arange(30, 300, 7):
        changed = TRACE.replaced_after(int(now), RNG.uniform(0, 1000, TRACE.values.size))
        differ += rules(Perfect()).hold(0, TRACE, int(now)) != rules(Perfect()).hold(0, changed, int(now))
    assert differ > 5


def test_persistence_is_the_same_time_yesterday_and_horizons_are_hours() -> None:
    now = T0 + 100 * HOUR
    f = Persistence().forecast(TRACE, now, 24 * HOUR)
    assert f.size == 24
    assert np.array_equal(f, TRACE.value_at(now + HOUR * np.arange(1, 25) - 24 * HOUR))
    fine = make_trace("q", T0 + 900_000 * np.arange(96 * 3), np.arange(96 * 3, dtype=float))
    assert Persistence().forecast(fine, T0 + 2 * 86_400_000, 24 * HOUR).size == 96  # 24 h of 15 min


def test_noisy_provider_is_calibrated_correlated_growing_and_seeded() -> None:
    trace = make_trace("flat", T0 + HOUR * np.arange(24 * 400), np.full(24 * 400, 100.0))
    p = Noisy(mape=0.09, seed=5)
    errs = np.array([p.forecast(trace, int(T0 + HOUR * k), 24 * HOUR) / 100.0 - 1
                     for k in range(0, 24 * 380, 5)])
    assert abs(np.abs(errs).mean() - 0.09) < 0.01  # mean absolute percentage error ~ 9 %
    assert np.abs(errs[:, :6]).mean() < np.abs(errs[:, -6:]).mean()  # grows with the horizon
    assert np.corrcoef(errs[:, 12], errs[:, 13])[0, 1] > 0.5  # correlated hour to hour
    again = Noisy(mape=0.09, seed=5).forecast(trace, T0, 24 * HOUR)
    assert np.array_equal(again, p.forecast(trace, T0, 24 * HOUR))
    assert not np.array_equal(again, Noisy(mape=0.09, seed=6).forecast(trace, T0, 24 * HOUR))


def test_provider_specs_and_their_errors(tmp_path) -> None:
    assert isinstance(make_provider(None), Persistence)
    assert make_provider({"type": "noisy", "mape": 0.07}).mape == 0.07
    with pytest.raises(ValueError, match="unknown type 'oracle'"):
        make_provider("oracle")
    with pytest.raises(ValueError, match="unknown key"):
        make_provider({"type": "noisy", "mapee": 0.1})
    csv = tmp_path / "rec.csv"
    csv.write_text("issued_at,timestamp,carbon_intensity\n2022-10-01T00:00Z,2022-10-01T01:00Z,120\n")
    rec = make_provider({"type": "recorded", "pathToFile": str(csv)})
    one = make_trace("t", np.array([T0]), np.array([100.0]))
    assert rec.forecast(one, T0, HOUR)[0] == 120.0
    assert np.isnan(rec.forecast(one, T0 - 1, HOUR)[0])  # nothing issued yet


def test_every_output_labels_perfect_foresight_as_not_achievable_and_not_a_bound(files) -> None:
    trace = files.trace([100.0] * 72, start=T0 - 24 * HOUR)
    topo = files.topology([{"hosts": [{"cores": 1}], "trace": trace}])
    wl = files.workload([{"id": 0, "submit": T0 + HOUR, "fragments": [(HOUR, 1000)]}])
    (res,) = scheduling.simulate(experiment(topo, wl, [{"type": "timeshift", "forecastProvider": "perfect"}]))
    assert res.summary["forecast"] == PERFECT_LABEL == ("perfect foresight: the policy's own rule given the real "
                                                      "future; not achievable, and not a bound (it can lose)")
    assert "headroom" not in PERFECT_LABEL  # a greedy rule given the future is no bound: it can lose
    (compat,) = scheduling.simulate(experiment(topo, wl, [{"type": "timeshift"}]), compat=True)
    assert "not achievable, and not a bound" in compat.summary["forecast"]


def test_short_tasks_use_the_short_threshold_long_ones_the_long_threshold() -> None:
    """Perfect forecast of the next 24 h: values 100, 110, ..., 330 (24 values); numpy's linear
    0.2 quantile is 100 + 0.2 x 23 x 10 = 146, the 0.35 quantile 100 + 0.35 x 23 x 10 = 180.5.
    A current value of 160 is low for a long task (< 180.5) but not for a short one (>= 146)."""
    values = np.concatenate([[160.0], 100.0 + 10 * np.arange(24), [500.0] * 4])
    trace = make_trace("q", T0 + HOUR * np.arange(values.size), values)
    hold_short, hold_long = rules(Perfect()).hold(0, trace, T0)
    assert hold_short and not hold_long
    no_forecast = ShiftRules(make_policy({"type": "timeshift", "forecast": False, "windowSize": 2}), Persistence())
    # forecast false, windowSize 2 h: at T0 + 2 h the rows in (T0, T0 + 2 h] are 100 and 110,
    # mean 105; the current 110 is not below it (hold both); at T0 + 1 h the rows are 160 and
    # 100, mean 130, and 100 is below it (release both: no "rising" rule outside compat)
    assert no_forecast.hold(0, trace, T0 + 2 * HOUR) == (True, True)
    assert no_forecast.hold(0, trace, T0 + HOUR) == (False, False)


def test_compat_moving_average_counts_the_updates_received_not_the_rows_before_the_start() -> None:
    """OpenDC's Timeshifter.kt / TaskStopper.kt average the intensity *updates* they received:
    CarbonModel.java pushes the trace's first row when the rule is attached, then the row in
    effect at the simulation start, then each row as it begins. Here the trace starts 48 h
    before the simulation: a first row of 400, then 47 rows of 100; from T0 300, 200, 250.

    compat, at T0:     updates [400, 300], mean 350: 300 is low (long); rising? 300 > 400 no
               T0+1h:  [400, 300, 200], mean 300: 200 low; rising? 200 > 300 no
               T0+2h:  [400, 300, 200, 250], mean 287.5: 250 low; rising? 250 > 200 yes
    default (rows of the last 168 h, before the start too): at T0 the mean is
    (400 + 47 x 100 + 300) / 49 = 110.2, so 300 is not low: hold both."""
    values = np.array([400.0] + [100.0] * 47 + [300.0, 200.0, 250.0] + [250.0] * 10)
    trace = make_trace("pre", T0 - 48 * HOUR + HOUR * np.arange(values.size), values)
    spec = {"type": "timeshift", "forecast": False, "taskStopper": {"forecast": False}}
    compat = ShiftRules(make_policy(spec), Persistence(), compat=True)
    assert compat.hold(0, trace, T0) == (True, False)
    assert compat.high(trace, T0) is False  # the stopper: 300 > 350? no
    assert compat._received[0] == [400.0, 300.0]
    assert compat.hold(0, trace, T0 + HOUR) == (True, False)
    assert compat.hold(0, trace, T0 + HOUR + 30 * 60_000) == (True, False)  # no new row: no update
    assert compat.hold(0, trace, T0 + 2 * HOUR) == (False, False)
    assert compat._received[0] == [400.0, 300.0, 200.0, 250.0]
    default = ShiftRules(make_policy(spec), Persistence())
    assert default.hold(0, trace, T0) == (True, True)
    assert default.high(trace, T0) is True  # 300 > 110.2
    assert default.hold(0, trace, T0 + 2 * HOUR) == (True, True)  # mean 112.5


def test_compat_moving_average_window_drops_the_oldest_update() -> None:
    # windowSize 2: at T0 + 2 h the updates are [400 (first row), 300, 200, 250]; the last two
    # are 200 and 250, mean 225, and 250 is not below it
    values = np.array([400.0] + [100.0] * 47 + [300.0, 200.0, 250.0] + [250.0] * 10)
    trace = make_trace("pre", T0 - 48 * HOUR + HOUR * np.arange(values.size), values)
    compat = ShiftRules(make_policy({"type": "timeshift", "forecast": False, "windowSize": 2}),
                        Persistence(), compat=True)
    for k in range(3):
        flags = compat.hold(0, trace, T0 + k * HOUR)
    assert flags == (True, True)


def test_compat_forecast_is_the_next_size_minus_one_rows_and_its_quantile_rounds_half_up() -> None:
    """forecastSize 10, threshold 0.5: OpenDC reads the next 9 rows (100, 110, ..., 180) and
    takes sorted[round_half_up(9 x 0.5)] = sorted[5] = 150, so the current 145 is low. Python's
    round(4.5) = 4 would give 140 (not low); reading a 10th row (the 0 after them) would make the
    index round(10 x 0.5) = 5 of (0, 100, ..., 180) = 140 (not low); numpy's linear median of
    the 9 rows is 140 (not low): each of OpenDC's choices is needed for this answer."""
    values = np.array([145.0, *(100.0 + 10 * np.arange(9)), 0.0, 500.0])
    trace = make_trace("q", T0 + HOUR * np.arange(values.size), values)
    spec = {"type": "timeshift", "forecastSize": 10, "shortForecastThreshold": 0.5, "longForecastThreshold": 0.5}
    compat = ShiftRules(make_policy(spec), Persistence(), compat=True)
    assert compat.hold(0, trace, T0) == (False, False)
    assert ShiftRules(make_policy(spec), Perfect()).hold(0, trace, T0) == (True, True)  # carbonspan's rule
