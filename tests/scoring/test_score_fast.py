"""The C scoring pass (agent/_score.c via agent.score_fast) equals the numpy reference, byte for byte.

``score_batch`` runs the C pass; ``score_batch_reference`` is the specification. Equal means:
the WAL record (``WindowPartial.to_bytes``), the window line (the report's JSON) and every
float's bits (no tolerance: the C pass adds and multiplies in the reference's order).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent.score
from agent import score_fast
from agent.batch import SpanBatch
from agent.carbon.ext import FALLBACK_REASONS
from agent.carbon.model import CarbonModel
from agent.carbon.partial import WindowPartial
from agent.carbon.signals import LiveIntensity, MeasuredRate, Signals
from agent.config import GreenConfig
from agent.otlp import decode_json, decode_protobuf
from agent.score import ScoringContext, score_batch, score_batch_reference
from agent.window import build_report

T0 = 1_767_268_800_000_000_000  # 2026-01-01T12:00:00Z
MINUTE = 60 * 10**9
NOW_S = T0 / 1e9 + 60
I64_MAX = 2**63 - 1


def _line(partial: WindowPartial, ctx: ScoringContext) -> bytes:
    return orjson.dumps(build_report(partial, ctx, T0, T0 + MINUTE).model_dump(mode="json"))


def _bits(a: np.ndarray) -> list[int]:
    return a.astype(np.float64).view(np.int64).tolist()


def assert_same(batch: SpanBatch, ctx: ScoringContext) -> WindowPartial:
    """C pass == reference: WAL bytes, float bits, counters' order, window line."""
    before = score_fast.fallbacks()
    fast = score_fast.score(batch, ctx)
    assert fast is not None, f"the C pass declined a batch: {score_fast.fallbacks()}"
    assert score_fast.fallbacks() == before
    ref = score_batch_reference(batch, ctx)
    assert fast.to_bytes() == ref.to_bytes() == ref.to_bytes_reference()  # C record = orjson's
    for name in ("energy", "carbon"):
        assert _bits(getattr(fast, name)) == _bits(getattr(ref, name)), name
    for name in ("region_kind", "region_estimated", "cell_svc", "cell_reg", "ops",
                 "measured_ops", "span_count", "etag", "ltag", "requests"):
        assert getattr(fast, name).dtype == getattr(ref, name).dtype, name
    assert list(fast.counters.items()) == list(ref.counters.items())
    assert list(fast.endpoints.items()) == list(ref.endpoints.items())
    assert _line(fast, ctx) == _line(ref, ctx)
    # and as the window sees it: merged into an empty window, then through the WAL bytes
    assert WindowPartial.empty().merge(fast).to_bytes() == WindowPartial.empty().merge(ref).to_bytes()
    return fast


# ------------------------------------------------------------------ the seam


def test_the_c_scorer_is_built_and_used():
    """A broken or stale build must fail here rather than silently score at numpy speed."""
    assert agent.score.FAST_SCORER, agent.score.SCORER_STATUS
    assert agent.score.SCORER_STATUS == "c"
    assert score_fast._score.SCORE_VERSION == score_fast.SCORE_VERSION


def test_a_stale_build_is_refused(monkeypatch):
    """A build whose SCORE_VERSION differs is not used: the reference scores, and STATUS says why."""
    import importlib

    from agent import _score
    from agent.carbon import ext

    monkeypatch.setattr(_score, "SCORE_VERSION", score_fast.SCORE_VERSION + 1)
    try:
        importlib.reload(ext)  # the loader (below score_fast and partial) judges the build
        assert ext.EXT is None and "stale build" in ext.STATUS
        reloaded = importlib.reload(score_fast)
        assert not reloaded.FAST_SCORER
        assert "stale build" in reloaded.STATUS and "rebuild" in reloaded.STATUS
    finally:
        monkeypatch.undo()
        importlib.reload(ext)
        importlib.reload(score_fast)
    assert score_fast.FAST_SCORER and ext.EXT is _score


def test_a_batch_the_c_pass_does_not_take_is_scored_by_the_reference_and_counted(h):
    ctx = h.context()
    batch = h.build_batch([{"service": "a", "op": "select"}, {"service": "b", "op": "http"}])
    odd = dataclasses.replace(batch, service_id=batch.service_id.astype(np.int64))
    before = score_fast.fallbacks()
    assert score_fast.score(odd, ctx) is None
    assert score_batch(odd, ctx).to_bytes() == score_batch_reference(batch, ctx).to_bytes()
    after = score_fast.fallbacks()
    assert after["column"] == before.get("column", 0) + 2  # the direct call and score_batch's
    assert set(after) <= set(FALLBACK_REASONS)  # a fixed set: the detail (a length) is the log's
    # an id outside its table: the reference decides what that means (here: an IndexError)
    bad = dataclasses.replace(batch, service_id=np.array([0, 7], np.int32))
    assert score_fast.score(bad, ctx) is None
    with pytest.raises(IndexError):
        score_batch(bad, ctx)
    bad_op = dataclasses.replace(batch, op_class=np.array([1, 9], np.uint8))
    assert score_fast.score(bad_op, ctx) is None
    # a clock that is not an int of ns, or past int64: the reference reads it
    for now in (float(T0), 2**70):
        odd_clock = dataclasses.replace(ctx, now_ns=now)
        assert score_fast.score(batch, odd_clock) is None
        assert score_batch(batch, odd_clock).to_bytes() == score_batch_reference(batch, odd_clock).to_bytes()


def test_fallback_reasons_stay_a_fixed_set_whatever_the_batch_lengths(h):
    """Batches of many lengths that the C pass declines: the process's fallback counts and the
    ``reason`` labels of ``carbonspan_scorer_fallbacks_total`` on /metrics are the fixed set,
    not one per length (the length is in the logged detail)."""
    from prometheus_client.parser import text_string_to_metric_families

    from agent.metrics import AgentMetrics

    ctx = h.context()
    m = AgentMetrics()
    before = score_fast.fallbacks().get("column", 0)
    for n in range(1, 40, 3):
        batch = h.build_batch([{"service": f"s{k}", "op": "select"} for k in range(n)])
        odd = dataclasses.replace(batch, service_id=batch.service_id.astype(np.int64))
        assert score_batch(odd, ctx).to_bytes() == score_batch_reference(batch, ctx).to_bytes()
    assert set(score_fast.fallbacks()) <= set(FALLBACK_REASONS)
    assert score_fast.fallbacks()["column"] == before + 13
    samples = {s.labels["reason"]: s.value
               for f in text_string_to_metric_families(m.exposition().decode()) for s in f.samples
               if s.name == "carbonspan_scorer_fallbacks_total"}
    assert set(samples) == set(FALLBACK_REASONS)
    assert samples["column"] == 13.0


def test_the_c_pass_releases_the_gil():
    """Another thread runs while ``_score.score`` works: with a switch interval longer than the
    call, a thread that needs the GIL can only advance if the call released it."""
    n = 2_000_000
    rng = np.random.default_rng(7)
    batch = SpanBatch(
        services=[f"s{i}" for i in range(50)], regions=["eu-west-3", "pl"], endpoints=["e"],
        service_id=rng.integers(0, 50, n, dtype=np.int32),
        region_id=rng.integers(-1, 2, n, dtype=np.int32),
        endpoint_id=np.zeros(n, np.int32),
        op_class=rng.integers(0, 8, n, dtype=np.uint8),
        response_bytes=rng.integers(-1, 3_000_000, n),
        start_ns=T0 + rng.integers(0, 40 * 86400 * 10**9, n),
        duration_ns=np.ones(n, np.int64), trace_lo=np.arange(n, dtype=np.uint64),
        is_entry=rng.random(n) < 0.3, is_root=rng.random(n) < 0.1,
    )  # fmt: skip
    ctx = ScoringContext.from_config(None, now_ns=T0)
    ticks = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            ticks[0] += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    worker = threading.Thread(target=spin)
    try:
        worker.start()
        seen = []
        for _ in range(3):
            before = ticks[0]
            score_fast.score(batch, ctx)
            seen.append(ticks[0] - before)
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        worker.join()
    assert max(seen) > 0, "no other thread ran during the C pass: it held the GIL"


# ------------------------------------------------------------------ decoded batches


@pytest.mark.parametrize("services", [None, 1000, 10_000])
@pytest.mark.parametrize("green", [GreenConfig(), GreenConfig(use_hourly_profiles=False),
                                   GreenConfig(per_operation_coefficients=False)])
def test_decoded_workload_batches(workload, services, green):
    ctx = ScoringContext.from_config(green, now_ns=T0 + MINUTE)
    for seed in range(4):
        body = workload.make_request_bytes(512, seed=seed, services=services)
        assert_same(decode_protobuf(body), ctx)


def test_decoded_json_batches(workload):
    from google.protobuf.json_format import MessageToJson

    ctx = ScoringContext.from_config(None, now_ns=T0 + MINUTE)
    for seed in range(3):
        body = MessageToJson(workload.make_request(512, seed=seed, services=1000))
        assert_same(decode_json(body.encode()), ctx)


def test_a_big_batch_with_many_services_and_regions():
    """200,000 spans, 3,000 services (some differing only in case), every table region and
    some unknown ones, spans across a year of month x hour cells."""
    model = CarbonModel.default()
    regions = sorted(model.regions)[:240] + ["mars-1", "UNKNOWN", "Eu-West-3", "bad region!"]
    n = 200_000
    rng = np.random.default_rng(11)
    services = [f"svc-{i}" for i in range(3000)] + [f"SVC-{i}" for i in range(50)]
    batch = SpanBatch(
        services=services, regions=regions, endpoints=[f"op {i}" for i in range(700)],
        service_id=rng.integers(0, len(services), n, dtype=np.int32),
        region_id=rng.integers(-1, len(regions), n, dtype=np.int32),
        endpoint_id=rng.integers(0, 700, n, dtype=np.int32),
        op_class=rng.integers(0, 8, n, dtype=np.uint8),
        response_bytes=rng.choice([-1, 0, 10239, 10240, 1048576, 1048577, 2**62], n),
        start_ns=np.where(rng.random(n) < 0.05, 0, T0 + rng.integers(-400, 400, n) * 86400 * 10**9
                          + rng.integers(0, 86400 * 10**9, n)),
        duration_ns=rng.integers(0, I64_MAX, n), trace_lo=rng.integers(0, 2**63, n).astype(np.uint64),
        is_entry=rng.random(n) < 0.3, is_root=rng.random(n) < 0.1,
    )  # fmt: skip
    green = GreenConfig(service_regions={"svc-1": "pl", "svc-2": "nowhere-1"},
                        calibration={"svc-3": 2.5, "svc-4": 0.3}, default_region="eu-west-3")
    signals = Signals(
        measured={"svc-5": MeasuredRate(2e-7, "scaphandre_rapl", NOW_S - 5, 30.0),
                  "svc-6": MeasuredRate(1e-5, "cloud_specpower", NOW_S - 5, 30.0),
                  "svc-7": MeasuredRate(1e-5, "alumet_rapl", NOW_S - 1000, 30.0)},
        live_intensity={"pl": LiveIntensity(420.0, "electricity_maps_api", NOW_S - 30, True),
                        "eu-west-3": LiveIntensity(55.0, "grid_operator_api", NOW_S - 9000)},
    )  # fmt: skip
    ctx = ScoringContext.from_config(green, signals=signals, now_ns=T0 + MINUTE)
    part = assert_same(batch, ctx)
    assert len(part.services) == 3000 and len(part.regions) > 100
    assert part.counters["region_invalid"] > 0 and part.counters["measured_stale_spans"] > 0


# ------------------------------------------------------------------ hostile batches (hypothesis)

LONG = "x" * 70  # longer than the "surely short" scan, within the bound: kept
SERVICES = ["checkout", "Checkout", "CART", "cart", "İstanbul" * 40, "ß" * 100, "é" * 200, LONG,
            "payments", "unknown_service", "", "Q" * 300, "q" * 256, "PayMents", "Café"]
REGIONS = [None, "eu-west-3", "EU-WEST-3", "pl", "PL", "us-east-1", "europe-west9", "westus2",
           "mars-1", "unknown", "hk", "bad region!", "x" * 65, "", "de"]
ENDPOINTS = ["GET /", "SELECT cart", "é" * 300, "publish", ""]
PROPS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

span_st = st.fixed_dictionaries(
    {
        "service": st.sampled_from(SERVICES),
        "region": st.sampled_from(REGIONS),
        "op": st.sampled_from([None, "select", "insert", "update", "delete", "db", "http",
                               "messaging"]),
        "resp": st.sampled_from([-(2**63), -5, -1, 0, 1, 10239, 10240, 1048576, 1048577, I64_MAX]),
        "start": st.one_of(
            st.sampled_from([0, -1, 1, -(2**63), I64_MAX, 7289654400000000000 - 1]),
            st.integers(T0 - 800 * 86400 * 10**9, T0 + 90 * 86400 * 10**9),
            st.integers(1, I64_MAX),
        ),
        "dur": st.sampled_from([0, 1, I64_MAX]),  # durations are not scored: any value is fine
        "trace": st.integers(0, 2**64 - 1) | st.integers(0, 5),
        "entry": st.booleans(),
        "root": st.booleans(),
        "endpoint": st.sampled_from(ENDPOINTS),
    }
)
FACTORS = [0.3, 2.5, 1, 10**6, math.inf, math.nan, 5e-324]
green_st = st.builds(
    GreenConfig,
    default_region=st.sampled_from([None, "eu-west-3", "pl", "nowhere-9", "unknown"]),
    use_hourly_profiles=st.booleans(),
    per_operation_coefficients=st.booleans(),
    service_regions=st.sampled_from([{}, {"cart": "eu-central-1", "checkout": "mars-2",
                                          "payments": "hk"}]),
    calibration=st.dictionaries(st.sampled_from(["cart", "checkout", "payments", "nobody"]),
                                st.sampled_from(FACTORS), max_size=3),
)
RATES = [0.0, 2e-7, 1e-5, math.nan, math.inf, -1.0, 2.0, 1e308, 5e-324]
signals_st = st.builds(
    Signals,
    measured=st.dictionaries(
        st.sampled_from(["checkout", "cart", "payments"]),
        st.builds(
            MeasuredRate,
            kwh_per_op=st.sampled_from(RATES),
            tag=st.sampled_from(["scaphandre_rapl", "alumet_rapl", "kepler_ebpf", "redfish_bmc",
                                 "cloud_specpower", "bogus", "io_proxy_v1"]),
            taken_at=st.sampled_from([NOW_S - 5, NOW_S - 1000, NOW_S + 5, math.nan]),
            interval_s=st.sampled_from([30.0, math.inf]),
        ),
    ),
    live_intensity=st.dictionaries(
        st.sampled_from(["eu-west-3", "pl", "mars-1", "hk", "unknown"]),
        st.builds(
            LiveIntensity,
            gco2_kwh=st.sampled_from([0.0, 55.0, 420.0, math.inf, math.nan, -3.0, 6000.0, 1e308]),
            tag=st.sampled_from(["electricity_maps_api", "grid_operator_api", "bogus"]),
            taken_at=st.sampled_from([NOW_S - 30, NOW_S - 9000, NOW_S + 30]),
            estimated=st.booleans(),
            max_age_s=st.sampled_from([None, 10.0, 1e9]),
        ),
    ),
)
NOW_NS = st.sampled_from([None, T0 + MINUTE, 0, -5, 1, I64_MAX, T0 + 40 * 86400 * 10**9])


@PROPS
@given(spans=st.lists(span_st, max_size=60), green=green_st, signals=signals_st, now_ns=NOW_NS)
def test_property_c_pass_equals_the_reference(h, spans, green, signals, now_ns):
    ctx = ScoringContext.from_config(green, signals=signals, now_ns=now_ns)
    batch = h.build_batch(spans)
    batch.counters = {"region_invalid": 2, "timestamp_absurd": 1, "zero": 0}
    batch.rejected = len(spans) % 3
    assert_same(batch, ctx)


@PROPS
@given(batches=st.lists(st.lists(span_st, min_size=1, max_size=30), min_size=2, max_size=5),
       green=green_st, signals=signals_st)
def test_property_a_window_of_c_partials_equals_one_of_reference_partials(h, batches, green,
                                                                          signals):
    ctx = ScoringContext.from_config(green, signals=signals, now_ns=T0 + MINUTE)
    fast, ref = WindowPartial.empty(), WindowPartial.empty()
    for spans in batches:
        batch = h.build_batch(spans)
        fast = fast.merge(score_batch(batch, ctx))
        ref = ref.merge(score_batch_reference(batch, ctx))
    assert fast.to_bytes() == ref.to_bytes()
    assert _line(fast, ctx) == _line(ref, ctx)


def test_an_empty_batch(h):
    ctx = h.context()
    batch = SpanBatch.empty()
    batch.counters, batch.rejected = {"trace_id_invalid": 3}, 3
    assert score_batch(batch, ctx).to_bytes() == score_batch_reference(batch, ctx).to_bytes()


@st.composite
def odd_batches(draw) -> SpanBatch:
    """Hand-built batches with ids outside their tables and op classes past the weight table:
    the C pass must decline them (never read outside a table), or agree with the reference."""
    n = draw(st.integers(1, 12))
    services = draw(st.lists(st.sampled_from(["a", "B", "b", "c"]), max_size=3))
    regions = draw(st.lists(st.sampled_from(["pl", "PL", "eu-west-3", "bad!"]), max_size=3))
    endpoints = draw(st.lists(st.sampled_from(["x", "x", "y"]), max_size=3))  # duplicates too

    def ids(lo: int, hi: int, dtype: type) -> np.ndarray:
        return np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), dtype)

    return SpanBatch(
        services=services, regions=regions, endpoints=endpoints,
        service_id=ids(-2, len(services) + 1, np.int32),
        region_id=ids(-3, len(regions) + 1, np.int32),
        endpoint_id=ids(-2, len(endpoints) + 1, np.int32),
        op_class=ids(0, 9, np.uint8), response_bytes=ids(-2, 2_000_000, np.int64),
        start_ns=ids(-1, T0, np.int64), duration_ns=np.zeros(n, np.int64),
        trace_lo=np.arange(n, dtype=np.uint64), is_entry=ids(0, 1, np.bool_),
        is_root=ids(0, 1, np.bool_),
    )  # fmt: skip


@PROPS
@given(batch=odd_batches(), green=green_st)
def test_property_an_odd_batch_is_declined_or_scored_alike(batch, green):
    ctx = ScoringContext.from_config(green, now_ns=T0 + MINUTE)
    fast = score_fast.score(batch, ctx)
    try:
        ref = score_batch_reference(batch, ctx)
    except (IndexError, ValueError):
        assert fast is None, "the C pass scored a batch the reference refuses"
        return
    if fast is not None:
        assert fast.to_bytes() == ref.to_bytes()
        assert _line(fast, ctx) == _line(ref, ctx)
    assert score_batch(batch, ctx).to_bytes() == ref.to_bytes()


def test_a_cached_region_plan_scores_as_a_fresh_one(workload):
    """The C path reuses a batch's region plan (score_fast._plan) when no region has a live
    reading; a live reading is judged afresh every batch (fresh, then stale by the clock), and
    the profile switch and the model are part of the key."""
    body = workload.make_request_bytes(512, seed=3)
    batch = decode_protobuf(body)
    score_fast._PLANS.clear()
    for green in (GreenConfig(), GreenConfig(use_hourly_profiles=False), GreenConfig()):
        ctx = ScoringContext.from_config(green, now_ns=T0 + MINUTE)
        for _ in range(2):  # the second batch reads the cached plan
            assert_same(batch, ctx)
    assert len(score_fast._PLANS) == 2
    other = ScoringContext.from_config(GreenConfig(), now_ns=T0 + MINUTE,
                                       model=dataclasses.replace(CarbonModel.default()))
    assert_same(batch, other)  # another model object: planned (and cached) for it
    assert len(score_fast._PLANS) == 3
    live = Signals(live_intensity={"eu-west-3": LiveIntensity(55.0, "grid_operator_api", NOW_S)})
    for now_ns in (T0 + MINUTE, T0 + 3 * 3600 * 10**9):  # fresh, then past max_signal_age_s
        ctx = ScoringContext.from_config(GreenConfig(), signals=live, now_ns=now_ns)
        part = assert_same(batch, ctx)
        fresh = now_ns == T0 + MINUTE
        assert bool(part.counters.get("live_intensity_stale_spans")) is not fresh
    assert len(score_fast._PLANS) == 3  # a region with a live reading is never cached


def test_service_keys_of_an_ascii_table_equal_the_dict_path():
    """_score.keys dedupes an all-ASCII table in a C table of lowercased bytes: the same keys,
    in the same order, as str.lower + a dict (which it still uses when a name is not short
    ASCII), including names equal but for case, empty names and many names."""
    from agent.carbon.names import MAX_NAME_BYTES

    names = ["Checkout", "checkout", "CART", "", "cart", "checkouT", "a" * MAX_NAME_BYTES]
    names += [f"Svc-{i % 3000}" if i % 2 else f"svc-{i % 3000}" for i in range(9000)]
    for table in (names, names + ["ÄPFEL"]):  # the second one takes the dict path
        keys, of, cut, by_key = score_fast._score.keys(
            table, {}, "unknown", {}, [], score_fast._slow_key, MAX_NAME_BYTES)
        index: dict[str, int] = {}
        want = [index.setdefault(name.lower(), len(index)) for name in table]
        assert keys == list(index)
        assert np.frombuffer(of, np.int64).tolist() == want
        assert np.frombuffer(by_key, np.int64).tolist() == [0] * len(keys)
