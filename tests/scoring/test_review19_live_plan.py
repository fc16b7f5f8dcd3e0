"""Review 19: the cached region plan (score_fast._plan) never serves a stale plan while live
intensity readings come, change, go stale and go within one open window.

Each step scores the same regions with the C pass (which may read a cached plan) and with the
numpy reference (which always plans afresh); every batch's WAL record must be the reference's,
and the window the C accumulator builds from the C partials must be, byte for byte, the merge
fold of the reference partials, its window line included.
"""

from __future__ import annotations

import dataclasses

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import score_fast
from agent.carbon.model import CarbonModel
from agent.carbon.partial import WindowAccumulator, WindowPartial
from agent.carbon.signals import LiveIntensity, Signals
from agent.config import GreenConfig
from agent.score import ScoringContext, score_batch_reference
from agent.window import build_report

T0 = 1_767_268_800_000_000_000  # 2026-01-01T12:00:00Z
MINUTE = 60 * 10**9
REGIONS = ["eu-west-3", "pl", "de", "us-east-1", "mars-1"]
OTHER_MODEL = dataclasses.replace(CarbonModel.default())


def _spans(k: int) -> list[dict]:
    return [{"service": f"svc-{(k + i) % 7}", "region": REGIONS[(k * 3 + i) % len(REGIONS)],
             "op": ("select", "http", "insert")[i % 3], "resp": 4000 * i, "start": T0 + i * MINUTE // 40,
             "trace": k * 100 + i, "entry": i % 4 == 0, "endpoint": f"op-{i % 5}"} for i in range(40)]


reading = st.builds(
    LiveIntensity,
    gco2_kwh=st.sampled_from([0.0, 55.0, 420.0, 999.0, float("nan"), -1.0]),
    tag=st.sampled_from(["electricity_maps_api", "grid_operator_api", "bogus"]),
    taken_at=st.sampled_from([0.0, -30.0, -5000.0, 20.0]),  # relative to the step's clock
    estimated=st.booleans(),
    max_age_s=st.sampled_from([None, 60.0]),
)
step = st.fixed_dictionaries({
    "live": st.dictionaries(st.sampled_from(REGIONS), reading, max_size=3),
    "minutes": st.integers(0, 240),
    "profiles": st.booleans(),
    "model": st.sampled_from([None, None, None, OTHER_MODEL]),
    "batch": st.integers(0, 6),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=2, max_size=10))
def test_live_readings_changing_mid_window_never_meet_a_stale_cached_plan(h, steps):
    fold, acc = WindowPartial.empty(), WindowAccumulator()
    for s in steps:
        now_ns = T0 + s["minutes"] * MINUTE
        now_s = now_ns / 1e9
        live = {r: dataclasses.replace(v, taken_at=now_s + v.taken_at) for r, v in s["live"].items()}
        ctx = ScoringContext.from_config(GreenConfig(use_hourly_profiles=s["profiles"]),
                                         signals=Signals(live_intensity=live), now_ns=now_ns,
                                         model=s["model"])
        batch = h.build_batch(_spans(s["batch"]))
        fast = score_fast.score(batch, ctx)
        assert fast is not None, score_fast.fallbacks()
        ref = score_batch_reference(batch, ctx)
        assert fast.to_bytes() == ref.to_bytes_reference()
        fold = fold.merge(ref)
        acc.add(fast)
    snap = acc.snapshot()
    assert snap.to_bytes() == fold.to_bytes_reference()
    line = [orjson.dumps(build_report(p, ctx, T0, T0 + 300 * MINUTE).model_dump(mode="json"))
            for p in (snap, fold)]
    assert line[0] == line[1]


def test_a_reading_that_comes_then_goes_is_read_then_forgotten(h):
    """Deterministically: no reading (the plan is cached), a fresh one (planned afresh: real
    time), the same one past its age (stale: the annual proxy, estimated), gone (the cached
    plan again, not the live one)."""
    score_fast._PLANS.clear()
    batch = h.build_batch([{"service": "svc", "region": "pl", "op": "select", "start": T0}] * 20)

    def carbon(live: dict, minutes: int) -> tuple[float, bytes]:
        now = T0 + minutes * MINUTE
        ctx = ScoringContext.from_config(GreenConfig(), signals=Signals(live_intensity=live), now_ns=now)
        fast = score_fast.score(batch, ctx)
        ref = score_batch_reference(batch, ctx)
        assert fast.to_bytes() == ref.to_bytes_reference()
        return float(fast.carbon.sum()), fast.to_bytes()

    none_1 = carbon({}, 1)
    assert len(score_fast._PLANS) == 1
    zero = {"pl": LiveIntensity(0.0, "grid_operator_api", (T0 + 2 * MINUTE) / 1e9)}
    fresh = carbon(zero, 2)
    assert fresh[0] == 0.0 < none_1[0]  # the live 0 g reading, not the cached proxy plan
    stale = carbon(zero, 200)
    assert stale[0] > 0.0 and b"live_intensity_stale_spans" in stale[1]
    none_2 = carbon({}, 3)
    assert none_2[0] == none_1[0] and b"live_intensity_stale_spans" not in none_2[1]
    assert len(score_fast._PLANS) == 1  # a region with a reading was never cached
