"""Review 19: the C WAL record writer and the C accumulator against their references, on hostile
partials no scorer writes but a record, a replay or a future scorer could hold.

- ``WindowPartial.to_bytes`` (``agent._score.partial_bytes``) equals ``to_bytes_reference``
  (orjson) byte for byte, or both refuse: int64 extremes, every control character, DEL, U+2028,
  emoji, lone surrogates, NaN/inf/-0.0/subnormal floats, counters past int64 and bools, tag
  codes outside the table, endpoint keys that are not pairs.
- ``WindowAccumulator`` (C) equals ``WindowAccumulatorReference`` and the merge fold on partials
  with duplicated names, unsorted and repeated cells, services and regions appearing and
  disappearing, NaN/inf figures, the service/region/endpoint caps: WAL bytes and counters' order.
- Two threads driving one C Accumulator (the GIL is its only lock) lose no integer sum.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent.carbon.partial as partial_mod
from agent.carbon.partial import WindowAccumulator, WindowAccumulatorReference, WindowPartial
from agent.carbon.tagcodes import TAGS

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

I64 = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([-(2**63), 2**63 - 1, 0, -1, 10**18])
NAMES = st.sampled_from(["svc", "SVC", "", "(other)", "unknown", "a\x00b", "q\"uote", "back\\slash",
                         "\x7f", "\x1f\x01\t\n\r\b\f", "\u2028\u2029", "é", "😀", "x" * 40]) | st.text(max_size=5)
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308, 0.1, 1e-7, 123456789.125])


def _built() -> bool:
    return partial_mod._c_module() is not None


@st.composite
def partials(draw: st.DrawFn, names=NAMES, ints=I64, floats=FLOATS, hostile: bool = True) -> WindowPartial:
    ns = draw(st.integers(0, 5))
    nr = draw(st.integers(1 if ns else 0, 4))
    nc = draw(st.integers(0, 8)) if ns and nr else 0
    services = draw(st.lists(names, min_size=ns, max_size=ns))
    regions = draw(st.lists(names, min_size=nr, max_size=nr))
    n_tags = len(TAGS)
    tag = st.integers(0, n_tags - 1)
    p = WindowPartial(
        services=services,
        service_region=[draw(st.integers(0, nr - 1)) for _ in range(ns)],
        regions=regions,
        region_kind=np.array(draw(st.lists(st.integers(0, 3), min_size=nr, max_size=nr)), np.int8),
        region_estimated=np.array(draw(st.lists(st.booleans(), min_size=nr, max_size=nr)), np.bool_),
        cell_svc=np.array([draw(st.integers(0, ns - 1)) for _ in range(nc)], np.int64),
        cell_reg=np.array([draw(st.integers(0, nr - 1)) for _ in range(nc)], np.int64),
        energy=np.array(draw(st.lists(floats, min_size=nc, max_size=nc)), np.float64),
        carbon=np.array(draw(st.lists(floats, min_size=nc, max_size=nc)), np.float64),
        ops=np.array(draw(st.lists(ints, min_size=nc, max_size=nc)), np.int64),
        measured_ops=np.array(draw(st.lists(ints, min_size=nc, max_size=nc)), np.int64),
        span_count=np.array(draw(st.lists(ints, min_size=nc, max_size=nc)), np.int64),
        etag=np.array(draw(st.lists(tag, min_size=nc, max_size=nc)), np.int8),
        ltag=np.array(draw(st.lists(tag, min_size=nc, max_size=nc)), np.int8),
        requests=np.array(draw(st.lists(ints, min_size=ns, max_size=ns)), np.int64),
        endpoints={(draw(st.sampled_from(services) if services and draw(st.booleans()) else names),
                    draw(names)): draw(ints) for _ in range(draw(st.integers(0, 4)))},
        traces=np.unique(np.array(draw(st.lists(st.integers(0, 2**64 - 1), max_size=6)), np.uint64)),
        spans=draw(ints),
        counters={draw(names): draw(ints) for _ in range(draw(st.integers(0, 3)))},
        root_spans=draw(ints),
    )
    return p


def _outcome(fn):  # noqa: ANN001, ANN202
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - the kind of refusal is what is compared
        return "raise", type(exc).__name__


@pytest.mark.skipif(not _built(), reason="agent._score is not built")
@SETTINGS
@given(p=partials())
def test_the_c_record_is_orjsons_record_for_hostile_partials(p):
    got, want = _outcome(p.to_bytes), _outcome(p.to_bytes_reference)
    assert got == want
    if want[0] == "ok":
        back = WindowPartial.from_bytes(want[1])  # and it reads back to the same record
        assert back.to_bytes() == want[1]
        # and the C writer wrote it (no silent fallback): orjson is not asked
        refuse = lambda self: pytest.fail("fell back to orjson")  # noqa: E731
        saved, WindowPartial.to_bytes_reference = WindowPartial.to_bytes_reference, refuse
        try:
            assert p.to_bytes() == want[1]
        finally:
            WindowPartial.to_bytes_reference = saved


@pytest.mark.skipif(not _built(), reason="agent._score is not built")
@SETTINGS
@given(p=partials(), extra=st.sampled_from([
    ("counters", {"big": 2**63}), ("counters", {"bigger": 2**64 - 1}), ("counters", {"neg": -(2**63) - 1}),
    ("counters", {"bool": True}), ("counters", {"float": 1.5}), ("counters", {"np": np.int64(3)}),
    ("counters", {"\ud800": 1}), ("spans", 2**64 - 1), ("spans", True), ("root_spans", 2**70),
    ("services", ["\udfff"]), ("regions", ["ok", "\ud83d"]), ("endpoints", {("a", "\ud800"): 1}),
    ("endpoints", {("a", "b"): 2**63}), ("endpoints", {("a",): 1}), ("endpoints", {("a", "b", "c"): 1}),
    ("endpoints", {"ab": 1}), ("endpoints", {("a", 1): 1}), ("etag", np.array([-1], np.int8)),
    ("ltag", np.array([len(TAGS)], np.int8)), ("service_region", [2**63]), ("service_region", [True]),
]))
def test_values_the_c_writer_does_not_write_fall_back_to_the_same_bytes(p, extra):
    """Each one odd value: the C writer declines it (None) and orjson decides, so the record, or
    the refusal, is orjson's."""
    field_, value = extra
    if field_ in ("etag", "ltag"):
        n = p.cell_svc.size
        if n == 0:
            return
        value = np.resize(value, n)
    setattr(p, field_, value)
    assert _outcome(p.to_bytes) == _outcome(p.to_bytes_reference)


# ------------------------------------------------------------------ the accumulator


def _fold_and_accumulate(parts, caps=None):  # noqa: ANN001, ANN202
    saved = (partial_mod.MAX_SERVICES, partial_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS)
    if caps:
        partial_mod.MAX_SERVICES, partial_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS = caps
    try:
        fold, acc, ref = WindowPartial.empty(), WindowAccumulator(), WindowAccumulatorReference()
        for p in parts:
            fold = fold.merge(p)
            acc.add(p)
            ref.add(p)
        return fold, acc.snapshot(), ref.snapshot()
    finally:
        partial_mod.MAX_SERVICES, partial_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS = saved


SMALL_INTS = st.integers(-(2**40), 2**40)  # sums that cannot overflow int64 over a few partials


@pytest.mark.skipif(not _built(), reason="agent._score is not built")
@SETTINGS
@given(parts=st.lists(partials(names=st.sampled_from(["a", "B", "(other)", "unknown", "é", "c" * 20, ""]),
                               ints=SMALL_INTS), min_size=1, max_size=6),
       caps=st.sampled_from([None, (2, 1, 1), (3, 2, 3), (1, 0, 0)]))
def test_the_c_accumulator_equals_the_fold_on_hostile_partials(parts, caps):
    """Duplicated names in one partial, repeated and unsorted cells, "(other)"/"unknown" named
    outright, NaN/inf figures, names appearing and disappearing, with and past caps (even caps of
    one service and no region): the C window, its reference and the fold write the same record."""
    fold, acc, ref = _fold_and_accumulate(parts, caps)
    want = fold.to_bytes_reference()
    assert ref.to_bytes_reference() == want
    assert acc.to_bytes_reference() == want
    assert acc.to_bytes() == want
    assert list(acc.counters.items()) == list(fold.counters.items())
    assert list(acc.endpoints.items()) == list(fold.endpoints.items())
    # through the record, as a replay adds it: the same window again
    _, replayed, _ = _fold_and_accumulate([WindowPartial.from_bytes(p.to_bytes()) for p in parts
                                           if not _has_nan(p)], caps)
    if not any(_has_nan(p) for p in parts):
        assert replayed.to_bytes() == want


def _has_nan(p: WindowPartial) -> bool:  # NaN/inf are written as null: not a record's figure
    return not (np.isfinite(p.energy).all() and np.isfinite(p.carbon).all())


@pytest.mark.skipif(not _built(), reason="agent._score is not built")
def test_a_refused_partial_changes_nothing_even_after_its_names():
    """add() checks everything before changing anything: a partial whose service's region is
    out of its table leaves the window as it was, its services and regions not interned; one
    whose endpoint count is past int64 is declined by the C accumulator (nothing changed,
    tests/scoring/test_invariants.py) and taken by the reference, whose ints are unbounded."""
    def bad(endpoint_ops: int, service_region: int) -> WindowPartial:
        return WindowPartial(
            services=["new-svc"], service_region=[service_region], regions=["eu-west-3"],
            region_kind=np.zeros(1, np.int8), region_estimated=np.zeros(1, np.bool_),
            cell_svc=np.zeros(1, np.int64), cell_reg=np.zeros(1, np.int64), energy=np.ones(1),
            carbon=np.ones(1), ops=np.ones(1, np.int64), measured_ops=np.zeros(1, np.int64),
            span_count=np.ones(1, np.int64), etag=np.zeros(1, np.int8), ltag=np.zeros(1, np.int8),
            requests=np.ones(1, np.int64), endpoints={("new-svc", "GET /"): endpoint_ops},
        )  # fmt: skip

    acc = WindowAccumulator()
    acc.add(WindowPartial.empty())
    before = acc.snapshot().to_bytes()
    with pytest.raises((OverflowError, ValueError, IndexError)):
        acc.add(bad(2, 3))  # its service's region is outside its region table
    assert acc.snapshot().to_bytes() == before
    assert acc.services == [] and acc.regions == []
    ref = WindowAccumulatorReference()
    for p in (WindowPartial.empty(), bad(2**64, 0)):
        acc.add(p)
        ref.add(p)
    assert acc.snapshot().same_as(ref.snapshot(), rel=0.0)
    assert acc.endpoints == {("new-svc", "GET /"): 2**64}


# ------------------------------------------------------------------ two threads, one window


@pytest.mark.skipif(not _built(), reason="agent._score is not built")
def test_two_threads_adding_to_one_c_accumulator_lose_nothing():
    """The C Accumulator holds the GIL for a whole add (no lock of its own): two threads adding
    while a third snapshots never crash it, and every integer sum and endpoint count is the
    total of what was added (float sums may differ only by order)."""
    rng = np.random.default_rng(19)

    def part(k: int) -> WindowPartial:
        ns, nc = 40, 120
        svc = rng.integers(0, ns, nc)
        return WindowPartial(
            services=[f"svc-{(k * 37 + i) % 300}" for i in range(ns)], service_region=[0] * ns,
            regions=["eu-west-3", f"r-{k % 7}"], region_kind=np.zeros(2, np.int8),
            region_estimated=np.zeros(2, np.bool_), cell_svc=svc.astype(np.int64),
            cell_reg=rng.integers(0, 2, nc).astype(np.int64), energy=np.ones(nc), carbon=np.ones(nc),
            ops=np.full(nc, 3, np.int64), measured_ops=np.ones(nc, np.int64),
            span_count=np.full(nc, 2, np.int64), etag=np.zeros(nc, np.int8), ltag=np.zeros(nc, np.int8),
            requests=np.ones(ns, np.int64),
            endpoints={(f"svc-{(k * 37 + i) % 300}", f"GET /{i % 11}"): 1 for i in range(ns)},
        )  # fmt: skip

    parts = [part(k) for k in range(400)]
    c = WindowAccumulator()._c
    args = []
    for p in parts:  # the wrapper's call, without its (pipeline-locked) Python bookkeeping
        arr = np.ascontiguousarray
        args.append((p.services, p.service_region, p.regions, p.endpoints,
                     (arr(p.region_kind), arr(p.region_estimated), arr(p.cell_svc), arr(p.cell_reg),
                      arr(p.energy), arr(p.carbon), arr(p.ops), arr(p.measured_ops), arr(p.span_count),
                      arr(p.etag), arr(p.ltag), arr(p.requests), partial_mod.TO_UNKNOWN),
                     (partial_mod.MAX_SERVICES, partial_mod.MAX_REGIONS, partial_mod.MAX_ENDPOINTS),
                     (partial_mod.OTHER_SERVICE, partial_mod.UNKNOWN, partial_mod.OTHER_ENDPOINT)))
    stop = threading.Event()
    errors: list[BaseException] = []

    def adder(chunk) -> None:  # noqa: ANN001
        try:
            for a in chunk:
                c.add(*a)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def snapper() -> None:
        try:
            while not stop.is_set():
                c.snapshot()
                _ = c.endpoints, c.services
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=adder, args=(args[0::2],)),
               threading.Thread(target=adder, args=(args[1::2],))]
    snap_thread = threading.Thread(target=snapper)
    snap_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    snap_thread.join()
    assert not errors, errors
    snap = c.snapshot()
    ops, spans, endpoints = np.frombuffer(snap[10], np.int64), np.frombuffer(snap[12], np.int64), snap[15]
    assert int(ops.sum()) == sum(int(p.ops.sum()) for p in parts)
    assert int(spans.sum()) == sum(int(p.span_count.sum()) for p in parts)
    assert sum(endpoints.values()) == sum(sum(p.endpoints.values()) for p in parts)
    assert float(np.frombuffer(snap[8], np.float64).sum()) == sum(p.energy.size for p in parts)
    assert len(set(snap[0])) == len(snap[0]) == 300  # each service once


def test_orjson_still_writes_nan_as_null():
    """The C record copies orjson's rendering of the float arrays; the tests above lean on
    orjson writing NaN and inf as null for numpy arrays and lists alike."""
    a = np.array([math.nan, math.inf, -0.0])
    assert orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY) == orjson.dumps(a.tolist()) == b"[null,null,-0.0]"


@pytest.mark.skipif(not _built(), reason="agent._score is not built")
def test_one_batch_of_20000_services_and_one_of_none(h) -> None:  # noqa: ANN001
    """A single batch naming 20,000 services (one span each, 6,000 endpoints), then an empty
    batch and a batch of counters only: the C pass equals the reference, and the C window the
    fold, past every cap in one add."""
    from agent import score_fast
    from agent.score import score_batch_reference

    ctx = h.context({})
    spans = [{"service": f"Svc-{k}", "region": ("eu-west-3", "pl", "mars-1", None)[k % 4],
              "op": ("select", "http", "insert")[k % 3], "resp": k, "trace": k, "entry": k % 2 == 0,
              "endpoint": f"GET /{k % 6000}", "start": h.T0 + k} for k in range(20_000)]
    big = h.build_batch(spans)
    empty = h.build_batch([])
    counted = h.build_batch([])
    counted.counters, counted.rejected = {"region_invalid": 3, "trace_invalid": 2}, 5
    parts = []
    for batch in (big, empty, counted, big):
        fast = score_fast.score(batch, ctx)
        ref = score_batch_reference(batch, ctx)
        assert fast is not None and fast.to_bytes() == ref.to_bytes_reference()
        parts.append(fast)
    fold, acc, ref_acc = _fold_and_accumulate(parts)
    assert len(fold.services) == partial_mod.MAX_SERVICES
    assert fold.counters["service_overflow"] > 0 and fold.counters["endpoint_overflow"] > 0
    assert acc.to_bytes() == ref_acc.to_bytes() == fold.to_bytes_reference()
    assert list(acc.counters.items()) == list(fold.counters.items())


@SETTINGS
@given(ids=st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 2**63, 2**64 - 1]), max_size=40))
def test_distinct_trace_ids_by_sort_are_np_unique(ids):
    """partial.distinct (a sort and a neighbour compare, not numpy 2's hash unique): the same
    sorted distinct ids, uint64 extremes and repeats included."""
    a = np.array(ids, np.uint64)
    got = partial_mod.distinct(a)
    assert got.dtype == np.uint64 and got.tolist() == np.unique(a).tolist()
