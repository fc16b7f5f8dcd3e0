"""The scoring invariants, each with a named test and a hypothesis property over random batches."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.carbon.partial import WindowAccumulator, WindowAccumulatorReference, WindowPartial
from agent.carbon.signals import LiveIntensity, MeasuredRate, Signals
from agent.score import score_batch
from agent.window import build_report

T0 = 1_767_268_800_000_000_000
NOW_S = T0 / 1e9 + 60

SERVICES = ["checkout", "Checkout", "cart", "PAYMENTS", "search"]
REGIONS = [
    None,
    "eu-west-3",
    "EU-CENTRAL-1",
    "us-east-1",
    "pl",
    "europe-west9",
    "westus2",
    "mars-1",
    "unknown",
    "hk",
]
OPS = [None, "select", "insert", "update", "delete", "db", "http", "messaging"]

span_st = st.fixed_dictionaries(
    {
        "service": st.sampled_from(SERVICES),
        "region": st.sampled_from(REGIONS),
        "op": st.sampled_from(OPS),
        "resp": st.sampled_from([-1, 0, 500, 10240, 2_000_000]),
        "start": st.one_of(st.just(0), st.integers(T0 - 400 * 86400 * 10**9, T0)),
        "trace": st.integers(0, 2**64 - 1) | st.integers(0, 20),
        "entry": st.booleans(),
        "root": st.booleans(),
        "endpoint": st.sampled_from(["GET /", "SELECT cart", "publish"]),
    }
)
spans_st = st.lists(span_st, max_size=40)
green_st = st.fixed_dictionaries(
    {
        "use_hourly_profiles": st.booleans(),
        "per_operation_coefficients": st.booleans(),
        "embodied_carbon_per_request_gco2": st.sampled_from([0.0, 0.001, 0.5]),
        "embodied_per": st.sampled_from(["trace", "root_span"]),
    },
    optional={
        "default_region": st.sampled_from(["eu-west-3", "pl", "nowhere-9"]),
        "service_regions": st.just({"CART": "eu-central-1", "search": "mars-2"}),
        "calibration": st.just({"payments": 2.5, "Checkout": 0.3}),
        "hosts": st.just(
            [{"name": "pg", "kind": "database", "region": "pl", "watts": 80, "count": 3}]
        ),
    },
)
signals_st = st.builds(
    Signals,
    measured=st.dictionaries(
        st.sampled_from(["checkout", "cart"]),
        st.builds(
            MeasuredRate,
            kwh_per_op=st.sampled_from([0.0, 2e-7, 1e-5, math.nan, -1.0, 2.0, 1e308]),
            tag=st.sampled_from(["scaphandre_rapl", "alumet_rapl", "cloud_specpower", "bogus"]),
            taken_at=st.sampled_from([NOW_S - 5, NOW_S - 1000]),
            interval_s=st.just(30.0),
        ),
    ),
    live_intensity=st.dictionaries(
        st.sampled_from(["eu-west-3", "pl", "mars-1"]),
        st.builds(
            LiveIntensity,
            gco2_kwh=st.sampled_from([0.0, 55.0, 420.0, math.inf, -3.0, 6000.0, 1e308]),
            tag=st.sampled_from(["electricity_maps_api", "grid_operator_api"]),
            taken_at=st.sampled_from([NOW_S - 30, NOW_S - 9000]),
            estimated=st.booleans(),
        ),
    ),
    host_watts=st.dictionaries(
        st.just("pg"),
        st.tuples(st.sampled_from([0.0, 45.0, math.nan, 1e308]), st.just("alumet_rapl")),
    ),
)
PROPS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _report(h, spans, green, signals=None):
    ctx = h.context(green, signals=signals or Signals())
    return build_report(score_batch(h.build_batch(spans), ctx), ctx, T0, T0 + 60 * 10**9)


def _check_sum_carbon(gs):
    total = sum(gs.per_service_carbon_kgco2eq.values()) * 1000
    assert total == pytest.approx(gs.co2.operational_gco2, rel=1e-6, abs=1e-300)


def _check_sum_energy(gs):
    total = sum(gs.per_service_energy_kwh.values())
    assert total == pytest.approx(gs.application_energy_kwh(), rel=1e-9, abs=1e-15)


def _check_finite_non_negative(obj, path="report"):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite_non_negative(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_finite_non_negative(v, f"{path}[{i}]")
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        assert math.isfinite(obj) and obj >= 0, f"{path} = {obj}"


MIXED = [
    {"service": "checkout", "region": "eu-west-3", "op": "select"},
    {"service": "Checkout", "region": "pl", "op": "http", "resp": 50_000},
    {"service": "cart", "op": "insert", "entry": True},
    {"service": "cart", "region": "mars-1", "op": "messaging"},
    {"service": "search", "region": "europe-west9", "op": None, "entry": True},
]
for _i, _s in enumerate(MIXED):
    _s["trace"] = 100 + _i // 2  # explicit ids: build_batch numbers traces by row otherwise
MIXED_GREEN = {"hosts": [{"name": "pg", "kind": "database", "region": "pl", "watts": 80}]}


def test_invariant_per_service_carbon_sums_to_operational(h):
    _check_sum_carbon(_report(h, MIXED, MIXED_GREEN).green_summary)


def test_invariant_per_service_energy_sums_to_application_energy(h):
    gs = _report(h, MIXED, MIXED_GREEN).green_summary
    assert gs.energy_kwh > gs.application_energy_kwh() > 0  # the host is in the totals
    _check_sum_energy(gs)


def test_invariant_no_nan_or_negative_figure(h):
    bad = Signals(
        measured={"checkout": MeasuredRate(math.nan, "scaphandre_rapl", NOW_S, 30.0)},
        live_intensity={"pl": LiveIntensity(-5.0, "electricity_maps_api", NOW_S)},
        host_watts={"pg": (math.inf, "alumet_rapl")},
    )
    rep = _report(h, MIXED, MIXED_GREEN, bad)
    _check_finite_non_negative(rep.model_dump())
    assert rep.green_summary.per_service_energy_model["checkout"].startswith("io_proxy")


def test_huge_finite_signals_are_refused_and_counted(h):
    # finite but absurd readings would overflow the window's sums to inf (which no archive
    # line can hold): 1e308 kWh/op, 1e308 g/kWh and 1e308 W fall back like stale ones
    huge = Signals(
        measured={"checkout": MeasuredRate(1e308, "scaphandre_rapl", NOW_S, 30.0)},
        live_intensity={"pl": LiveIntensity(1e308, "electricity_maps_api", NOW_S)},
        host_watts={"pg": (1e308, "alumet_rapl")},
    )
    rep = _report(h, MIXED * 3, MIXED_GREEN, huge)
    _check_finite_non_negative(rep.model_dump())
    gs = rep.green_summary
    assert gs.per_service_energy_model["checkout"].startswith("io_proxy")
    assert gs.hosts[0].watts == 80 and gs.hosts[0].energy_model == "declared_watts"
    pl = next(r for r in gs.regions if r.region == "pl")
    assert pl.intensity_source != "real_time" and pl.intensity_estimated
    # checkout's I/O spans: "checkout" and "Checkout", twice per MIXED; one pl span per MIXED
    assert rep.counters["measured_stale_spans"] == 6
    assert rep.counters["live_intensity_stale_spans"] == 3


def test_invariant_merge_equals_concatenation(h):
    ctx = h.context(MIXED_GREEN)
    a, b = MIXED[:2], MIXED[2:] + MIXED[:1]
    merged = score_batch(h.build_batch(a), ctx).merge(score_batch(h.build_batch(b), ctx))
    assert merged.same_as(score_batch(h.build_batch(a + b), ctx), rel=1e-12)


@PROPS
@given(spans=spans_st, green=green_st, signals=signals_st)
def test_property_report_invariants(h, spans, green, signals):
    rep = _report(h, spans, green, signals)
    gs = rep.green_summary
    _check_sum_carbon(gs)
    _check_sum_energy(gs)
    _check_finite_non_negative(rep.model_dump())
    assert rep.window.spans == len(spans)
    assert rep.window.root_spans == sum(1 for s in spans if s["root"])
    # M follows from the line alone: its unit count x the per-request figure it records
    unit = {"trace": rep.window.traces, "root_span": rep.window.root_spans}
    per_request = float(rep.methodology["embodied_carbon_per_request_gco2"])
    assert gs.co2.embodied_gco2 == unit[rep.methodology["embodied_per"]] * per_request
    assert gs.total_io_ops == sum(1 for s in spans if s["op"]) == sum(r.io_ops for r in gs.regions)
    if gs.energy_kwh == 0:
        assert gs.energy_model == ""
    if gs.total_io_ops and gs.energy_kwh > 0:
        assert gs.energy_model != ""


@PROPS
@given(a=spans_st, b=spans_st, c=spans_st, green=green_st, signals=signals_st)
def test_property_merge_equals_concatenation(h, a, b, c, green, signals):
    ctx = h.context(green, signals=signals)

    def score(spans):
        return score_batch(h.build_batch(spans), ctx)

    whole = score(a + b + c)
    left = score(a).merge(score(b)).merge(score(c))
    right = score(a).merge(score(b).merge(score(c)))
    assert left.same_as(whole, rel=1e-9)
    assert right.same_as(whole, rel=1e-9)
    assert WindowPartial.empty().merge(whole).same_as(whole)
    assert whole.merge(WindowPartial.empty()).same_as(whole)


@PROPS
@given(a=spans_st, b=spans_st, green=green_st, signals=signals_st)
def test_property_partial_round_trips_exactly(h, a, b, green, signals):
    ctx = h.context(green, signals=signals)
    p = score_batch(h.build_batch(a), ctx).merge(score_batch(h.build_batch(b), ctx))
    back = WindowPartial.from_bytes(p.to_bytes())
    assert back.same_as(p, rel=0.0)
    assert back.to_bytes() == p.to_bytes()
    assert p.to_bytes() == p.to_bytes_reference()  # the C record writer is orjson's bytes


def test_the_wal_record_is_written_in_c() -> None:
    """With the extension built, ``to_bytes`` is the C writer (the tests above then hold it to
    orjson's bytes), not its fallback."""
    from agent import score_fast

    if score_fast._score is None:
        pytest.skip(score_fast.STATUS)
    p = WindowPartial.empty()
    assert score_fast._score.partial_bytes(
        (p.services, p.service_region, p.regions),
        (p.region_kind, p.region_estimated, p.requests, p.traces, p.cell_svc, p.cell_reg,
         b"[]", b"[]", p.ops, p.measured_ops, p.span_count, p.etag, p.ltag),
        {}, 0, {}, 0, ("",)) == p.to_bytes_reference()


def test_the_c_record_writer_equals_orjson_on_hostile_values() -> None:
    """Names that need escaping (quotes, backslashes, control characters, non-ASCII), floats
    of every exponent and bit pattern (NaN, infinities, subnormals, -0.0), 64-bit extremes;
    and what it does not write (a lone surrogate, an int past 64 bits) falls back to orjson."""
    import numpy as np

    from agent.carbon.tagcodes import TAGS

    rng = np.random.default_rng(19)
    floats = np.concatenate([
        rng.integers(0, 2**64, 20_000, dtype=np.uint64).view(np.float64),
        10.0 ** rng.uniform(-12, 20, 20_000), rng.random(5_000) * 1e-5,
        [0.0, -0.0, 1e-5, 9.99e-6, 1e-4, 1e16, 9.999999999999998e15, np.nan, np.inf, -np.inf,
         5e-324, 1.7976931348623157e308, -2.5e-5],
    ])
    n = floats.size
    p = WindowPartial.empty(counters={"a\"b": 2**63 - 1, "é": -(2**63)})
    p.energy, p.carbon = floats, floats[::-1].copy()
    for name in ("cell_svc", "cell_reg", "ops", "measured_ops", "span_count"):
        setattr(p, name, rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64))
    p.etag = rng.integers(0, len(TAGS), n, dtype=np.int8)
    p.ltag = rng.integers(0, len(TAGS), n, dtype=np.int8)
    weird = "".join(map(chr, range(32))) + '"\\/\x7f\u2028é😀'
    p.services, p.service_region, p.regions = [weird, "svc"], [0, -1], ["eu-west-3", weird]
    p.region_kind = np.array([0, 3], np.int8)
    p.region_estimated = np.array([True, False])
    p.requests = np.array([0, 2**62], np.int64)
    p.endpoints = {(weird, weird): 3, ("svc", "GET /"): 2**63 - 1}
    p.traces = rng.integers(0, 2**64, 7, dtype=np.uint64)
    p.spans, p.root_spans = 10**12, 3
    assert p.to_bytes() == p.to_bytes_reference()
    for tail in (1, 2, 3):  # base64 padding of every length
        p.traces = p.traces[:tail]
        assert p.to_bytes() == p.to_bytes_reference()
    p.endpoints = {("svc", "x"): 2**64}  # orjson refuses it; so does the fallback
    with pytest.raises(orjson.JSONEncodeError):
        p.to_bytes()
    p.endpoints = {("svc", "x"): 1}
    p.services = ["\ud800"]
    with pytest.raises(orjson.JSONEncodeError):
        p.to_bytes()


@PROPS
@given(a=spans_st, b=spans_st, c=spans_st, green=green_st, signals=signals_st)
def test_property_merge_equals_concatenation_with_small_caps(h, a, b, c, green, signals):
    # the window law with caps small enough that random batches overflow them: at most 3 real
    # regions and 2 endpoints per window (the caps are module constants, lowered for this test)
    import agent.carbon.partial as partial_mod
    import agent.score as score_mod

    saved = (
        partial_mod.MAX_REGIONS,
        score_mod.MAX_REGIONS,
        partial_mod.MAX_ENDPOINTS,
        score_mod.MAX_ENDPOINTS,
        partial_mod.MAX_SERVICES,
    )
    partial_mod.MAX_REGIONS = score_mod.MAX_REGIONS = 3
    partial_mod.MAX_ENDPOINTS = score_mod.MAX_ENDPOINTS = 2
    partial_mod.MAX_SERVICES = 2
    try:
        ctx = h.context(green, signals=signals)

        def score(spans):
            return score_batch(h.build_batch(spans), ctx)

        # caps apply when partials are folded into a window: batch by batch equals all at once
        whole = WindowPartial.empty().merge(score(a + b + c))
        assert len([r for r in whole.regions if r != "unknown"]) <= 3
        assert len([e for e in whole.endpoints if e[1] != "(other)"]) <= 2
        assert len(whole.services) <= 2
        window = WindowPartial.empty()
        for part in (a, b, c):
            window = window.merge(score(part))
        assert window.same_as(whole, rel=1e-9)
        gs = build_report(whole, ctx, T0, T0 + 10**9).green_summary
        _check_sum_carbon(gs)
        _check_sum_energy(gs)
    finally:
        (
            partial_mod.MAX_REGIONS,
            score_mod.MAX_REGIONS,
            partial_mod.MAX_ENDPOINTS,
            score_mod.MAX_ENDPOINTS,
            partial_mod.MAX_SERVICES,
        ) = saved


# -- the open window's in-place accumulator (agent.carbon.partial.WindowAccumulator): live ingest
# and WAL replay add each partial to it in O(batch); it must equal the reference fold
# empty().merge(p1).merge(p2)... bit for bit, and give the same window line


def _acc_line(partial: WindowPartial, ctx) -> bytes:  # noqa: ANN001 - a ScoringContext
    return orjson.dumps(build_report(partial, ctx, T0, T0 + 60 * 10**9).model_dump(mode="json"))


def _check_accumulator(h, batches, green, signals, cls=WindowAccumulator) -> None:  # noqa: ANN001
    ctx = h.context(green, signals=signals)
    parts = [score_batch(h.build_batch(spans), ctx) for spans in batches]
    fold, acc = WindowPartial.empty(), cls(WindowPartial.empty())
    for i, p in enumerate(parts):
        fold = fold.merge(p)
        acc.add(WindowPartial.from_bytes(p.to_bytes()))  # what a replay adds: equal to p
        if i % 2:  # a snapshot in between (the live page) changes nothing
            assert acc.snapshot().same_as(fold, rel=0.0)
    snap = acc.snapshot()
    assert snap.same_as(fold, rel=0.0)  # bit-identical sums
    assert list(snap.counters.items()) == list(fold.counters.items())  # and in the same order
    assert list(snap.endpoints.items()) == list(fold.endpoints.items())
    assert _acc_line(snap, ctx) == _acc_line(fold, ctx)
    assert snap.to_bytes() == fold.to_bytes()


#: the C accumulator (agent._score.Accumulator, what the agent runs) and its Python reference
ACCUMULATORS = pytest.mark.parametrize("cls", [WindowAccumulator, WindowAccumulatorReference],
                                       ids=["c", "reference"])


def test_the_agent_accumulates_in_c() -> None:
    """A built extension is what the agent uses: the property tests below then test the C path,
    not its stand-in."""
    from agent import score_fast

    if score_fast._score is None:
        pytest.skip(score_fast.STATUS)
    assert WindowAccumulator()._c is not None


@ACCUMULATORS
@PROPS
@given(batches=st.lists(spans_st, min_size=1, max_size=6), green=green_st, signals=signals_st)
def test_property_accumulator_equals_the_merge_fold(h, batches, green, signals, cls):
    _check_accumulator(h, batches, green, signals, cls)


@ACCUMULATORS
@PROPS
@given(batches=st.lists(spans_st, min_size=1, max_size=6), green=green_st, signals=signals_st)
def test_property_accumulator_equals_the_merge_fold_past_the_caps(h, batches, green, signals, cls):
    """With caps small enough that random batches pass them: services folded into (other),
    regions into unknown, endpoints into (service, (other)), each counted, as the fold does."""
    import agent.carbon.partial as partial_mod
    import agent.score as score_mod

    saved = (partial_mod.MAX_REGIONS, score_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS,
             score_mod.MAX_ENDPOINTS, partial_mod.MAX_SERVICES)
    partial_mod.MAX_REGIONS = score_mod.MAX_REGIONS = 3
    partial_mod.MAX_ENDPOINTS = score_mod.MAX_ENDPOINTS = 2
    partial_mod.MAX_SERVICES = 2
    try:
        _check_accumulator(h, batches, green, signals, cls)
    finally:
        (partial_mod.MAX_REGIONS, score_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS,
         score_mod.MAX_ENDPOINTS, partial_mod.MAX_SERVICES) = saved


def test_the_accumulator_refuses_a_partial_with_an_index_outside_its_tables() -> None:
    """A cell naming a service the partial does not list is refused before anything changes
    (the reference would index past its arrays, or wrap a negative index)."""
    if WindowAccumulator()._c is None:
        pytest.skip("the C accumulator is not built")
    good = WindowPartial.empty()
    bad = WindowPartial.empty()
    bad.cell_svc = bad.cell_svc[:0].copy()
    import numpy as np

    for field_ in ("cell_svc", "cell_reg", "energy", "carbon", "ops", "measured_ops",
                   "span_count", "etag", "ltag"):
        setattr(bad, field_, np.zeros(1, getattr(good, field_).dtype))
    bad.services, bad.service_region, bad.requests = ["a"], [0], np.zeros(1, np.int64)
    bad.regions = ["eu-west-3"]
    bad.region_kind, bad.region_estimated = np.zeros(1, np.int8), np.zeros(1, np.bool_)
    bad.cell_svc = np.array([1])  # only service 0 exists
    acc = WindowAccumulator()
    with pytest.raises(ValueError):
        acc.add(bad)
    assert acc.snapshot().same_as(WindowPartial.empty())


def test_a_merge_into_a_large_window_costs_the_batch_not_the_window(h) -> None:  # noqa: ANN001
    """10,000 services in the window: adding a 20-span batch stays far below a fold's merge."""
    import time

    ctx = h.context({})
    big = score_batch(h.build_batch(
        [{"service": f"svc-{k}", "region": "eu-west-3", "op": "select", "resp": 0, "start": T0,
          "trace": k, "entry": True, "root": True, "endpoint": "SELECT cart"}
         for k in range(4000)]), ctx)
    small = score_batch(h.build_batch(
        [{"service": f"svc-{k}", "region": "pl", "op": "http", "resp": 500, "start": T0,
          "trace": k, "entry": False, "root": False, "endpoint": "GET /"} for k in range(20)]), ctx)
    fold = WindowPartial.empty().merge(big)
    acc = WindowAccumulator(WindowPartial.empty())
    acc.add(big)

    def best(fn) -> float:  # noqa: ANN001
        times = []
        for _ in range(15):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    fold_s = best(lambda: fold.merge(small))
    acc_s = best(lambda: acc.add(small))
    assert acc_s * 5 < fold_s, (acc_s, fold_s)


def test_a_window_of_10000_services_past_the_real_caps_equals_the_fold(workload) -> None:
    """The bench's 10,000-service shape (~500 services a batch, with and without fresh trace
    ids through the WAL bytes) at the real caps: the window passes 4,096 services and 4,096
    endpoints; the C accumulator, its reference and the merge fold give the same partial, the
    same WAL bytes and the same window line."""
    import numpy as np

    from agent.otlp import decode_protobuf
    from agent.score import ScoringContext

    ctx = ScoringContext.from_config(None, now_ns=T0)
    rng = np.random.default_rng(5)
    fold, acc, ref = WindowPartial.empty(), WindowAccumulator(), WindowAccumulatorReference()
    for seed in range(30):
        batch = decode_protobuf(workload.make_request_bytes(512, seed=seed, services=10_000))
        batch.trace_lo = rng.integers(0, 2**63, len(batch), dtype=np.uint64)
        p = score_batch(batch, ctx)
        record = p.to_bytes()
        fold = fold.merge(p)
        acc.add(WindowPartial.from_bytes(record))  # as a replay adds it
        ref.add(p)  # as live ingest adds it
    assert len(fold.services) == 4096 and len(fold.endpoints) >= 4096
    assert fold.counters["service_overflow"] > 0 and fold.counters["endpoint_overflow"] > 0
    for snap in (acc.snapshot(), ref.snapshot()):
        assert snap.same_as(fold, rel=0.0)
        assert list(snap.endpoints.items()) == list(fold.endpoints.items())
        assert list(snap.counters.items()) == list(fold.counters.items())
        assert snap.to_bytes() == fold.to_bytes_reference()
        assert _acc_line(snap, ctx) == _acc_line(fold, ctx)


@pytest.mark.parametrize("caps", [None, (3, 2, 2)])
def test_the_c_accumulator_compares_names_as_python_does(h, caps) -> None:  # noqa: ANN001
    """Names inline (up to 16 bytes) and in the arena (longer), equal up to 16 bytes then not,
    non-ASCII, a lone surrogate (compared by its surrogatepass bytes) and names that differ only
    past the inline part: the C accumulator's window equals its reference's, with and past
    (small) caps."""
    import agent.carbon.partial as partial_mod

    names = ["a" * 16, "a" * 17, "a" * 16 + "b", "a" * 40 + "x", "a" * 40 + "y", "Ünïcødé", "é",
             "\ud800", "svc", "(other)", "unknown"]
    ctx = h.context({})
    saved = (partial_mod.MAX_SERVICES, partial_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS)
    if caps:
        partial_mod.MAX_SERVICES, partial_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS = caps
    try:
        acc, ref = WindowAccumulator(), WindowAccumulatorReference()
        for k in range(4):
            spans = [{"service": names[(i + k) % len(names)], "region": ["pl", "eu-west-3"][i % 2],
                      "op": "select", "endpoint": names[(3 * i + k) % len(names)], "start": T0,
                      "entry": True} for i in range(30)]
            p = score_batch(h.build_batch(spans), ctx)
            acc.add(p)
            ref.add(p)
        a, b = acc.snapshot(), ref.snapshot()
        assert a.same_as(b, rel=0.0)
        assert list(a.endpoints.items()) == list(b.endpoints.items())
        assert list(a.counters.items()) == list(b.counters.items())
    finally:
        partial_mod.MAX_SERVICES, partial_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS = saved


def _huge(h, n: int):  # noqa: ANN001, ANN202 - a harness; a WindowPartial
    """A scored 3-span batch of one service, one region and one endpoint whose every count
    (its cell's ops, measured ops and spans, its requests, its endpoint's ops) is ``n``: what
    a window near int64 receives."""
    import numpy as np

    p = score_batch(h.build_batch([{"service": s, "region": "eu-west-3", "op": "select",
                                    "endpoint": "SELECT cart", "start": T0, "entry": True}
                                   for s in ("a", "a", "a")]), h.context({}))
    for name in ("ops", "measured_ops", "span_count"):
        setattr(p, name, np.full(p.cell_svc.size, n, np.int64))
    p.requests = np.full(len(p.services), n, np.int64)
    p.endpoints = dict.fromkeys(p.endpoints, n)
    return p


def test_the_c_accumulator_declines_a_sum_past_int64_and_the_reference_goes_on(h) -> None:  # noqa: ANN001
    """Counts near 2^63: the C sums are int64, the reference's endpoint counts Python ints. An
    add whose sums could pass int64 is declined by the C accumulator with nothing changed; the
    window then goes on in the reference (a visible fallback, ``count_overflow``), which gives
    what the reference alone gives, 2^63 included; sums that reach 2^63 - 1 exactly stay in C."""
    from agent import _score
    from agent.carbon import ext

    assert ext.EXT is _score  # this tests the C path
    half = 2**62
    before = ext.fallbacks().get("count_overflow", 0)
    acc, ref = WindowAccumulator(), WindowAccumulatorReference()
    for p in (_huge(h, half), _huge(h, half - 1)):  # 2^63 - 1: the largest int64, still in C
        acc.add(p)
        ref.add(p)
    assert acc._c is not None and ext.fallbacks().get("count_overflow", 0) == before
    assert acc.snapshot().same_as(ref.snapshot(), rel=0.0)
    assert set(acc.endpoints.values()) == {2**63 - 1}
    acc.add(_huge(h, 1))  # one more: past int64
    ref.add(_huge(h, 1))
    assert acc._c is None, "the window went on in the reference"
    assert ext.fallbacks()["count_overflow"] == before + 1
    a, b = acc.snapshot(), ref.snapshot()
    assert a.same_as(b, rel=0.0)
    assert list(a.endpoints.items()) == list(b.endpoints.items())
    assert list(a.counters.items()) == list(b.counters.items())
    assert set(a.endpoints.values()) == {2**63}  # unbounded, as the reference keeps them
    acc.add(_huge(h, 5))  # later adds of the window: the reference's, no new fallback
    ref.add(_huge(h, 5))
    assert acc.snapshot().same_as(ref.snapshot(), rel=0.0)
    assert ext.fallbacks()["count_overflow"] == before + 1


@pytest.mark.parametrize("n", [2**63 - 1, -(2**63), 2**64])
def test_the_c_add_changes_nothing_when_it_declines(h, n) -> None:  # noqa: ANN001
    """``_score.Accumulator.add`` returns None and leaves its window as it was when one add's
    counts could pass int64: 2^63 - 1 onto a window that holds 3 (which an empty window takes),
    -2^63 (no magnitude in int64) or an endpoint count past int64 altogether."""
    import numpy as np

    from agent import _score
    from agent.carbon.partial import (
        MAX_ENDPOINTS,
        MAX_REGIONS,
        MAX_SERVICES,
        OTHER_ENDPOINT,
        OTHER_SERVICE,
        UNKNOWN,
    )
    from agent.carbon.tagcodes import TO_UNKNOWN

    acc = WindowAccumulator()
    acc.add(_huge(h, 3))
    snap = acc.snapshot()
    p = _huge(h, 1 if n == 2**64 else n)
    if n == 2**64:
        p.endpoints = dict.fromkeys(p.endpoints, n)

    def raw_add(c):  # noqa: ANN001, ANN202 - an agent._score.Accumulator
        i64 = np.int64
        return c.add(list(p.services), list(p.service_region), list(p.regions), dict(p.endpoints),
                     (p.region_kind.astype(np.int8), p.region_estimated, p.cell_svc.astype(i64),
                      p.cell_reg.astype(i64), p.energy, p.carbon, p.ops, p.measured_ops,
                      p.span_count, p.etag, p.ltag, p.requests.astype(i64), TO_UNKNOWN),
                     (MAX_SERVICES, MAX_REGIONS, MAX_ENDPOINTS), (OTHER_SERVICE, UNKNOWN, OTHER_ENDPOINT))

    assert acc._c is not None
    assert raw_add(acc._c) is None
    assert acc.snapshot().same_as(snap, rel=0.0)
    assert list(acc.snapshot().endpoints.items()) == list(snap.endpoints.items())
    assert (raw_add(_score.Accumulator()) is None) == (n != 2**63 - 1)
