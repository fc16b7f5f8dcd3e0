"""Service keys and endpoint names are cut to MAX_NAME_BYTES (the aggregator's bound)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.carbon.names import MAX_NAME_BYTES, bounded
from agent.score import WindowPartial, score_batch

PROPS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _nbytes(s: str) -> int:
    return len(s.encode("utf-8"))


def test_long_names_are_cut_counted_and_keep_their_figures(h):
    # two services whose names differ only past byte 256 (and in case) become one key; the
    # carbon of all 4 I/O spans stays: 4 x 1e-7 x 41.5 x 1.15 = 1.909e-5 g
    long_a, long_b = "Checkout-" + "x" * 300, "checkout-" + "x" * 300 + "-v2"
    spans = [
        {"service": long_a, "region": "eu-west-3", "op": "db", "endpoint": "SELECT " + "c" * 400},
        {"service": long_b, "region": "eu-west-3", "op": "db", "endpoint": "SELECT " + "c" * 401},
        {"service": "cart", "region": "eu-west-3", "op": "db", "endpoint": "é" * 200},
        {"service": "cart", "region": "eu-west-3", "op": "db", "endpoint": "short"},
        {"service": long_a, "region": "eu-west-3", "op": None},
    ]
    rep = h.report(spans, h.PLAIN)
    gs = rep.green_summary
    key = ("checkout-" + "x" * 300)[:MAX_NAME_BYTES]
    assert list(gs.per_service_carbon_kgco2eq) == [key, "cart"]
    assert gs.co2.operational_gco2 == sum(gs.per_service_carbon_kgco2eq.values()) * 1000
    assert gs.co2.operational_gco2 == 4 * 1e-7 * 41.5 * 1.15
    assert rep.counters["service_name_truncated"] == 3  # every span of the two long services
    assert rep.counters["endpoint_name_truncated"] == 3  # I/O spans with a long span name
    eps = {(e.service, e.endpoint): e.io_ops for e in rep.per_endpoint_io_ops}
    assert eps[(key, ("SELECT " + "c" * 400)[:MAX_NAME_BYTES])] == 2  # cut names merge
    assert eps[("cart", "é" * 128)] == 1  # 2-byte characters: 128 fit in 256 bytes
    assert all(_nbytes(s) <= MAX_NAME_BYTES and _nbytes(e) <= MAX_NAME_BYTES for s, e in eps)


@given(st.text(max_size=400))
def test_property_bounded_is_a_short_prefix(name):
    cut = bounded(name)
    assert name.startswith(cut) and _nbytes(cut) <= MAX_NAME_BYTES
    assert (cut == name) == (_nbytes(name) <= MAX_NAME_BYTES)
    assert _nbytes(cut) > MAX_NAME_BYTES - 4 or cut == name  # cut only as far as needed


names_st = st.text(min_size=1, max_size=120) | st.sampled_from(
    ["a" * 300, "A" * 300 + "b", "İ" * 200]
)
span_st = st.fixed_dictionaries(
    {
        "service": names_st,
        "endpoint": names_st,
        "op": st.sampled_from([None, "db", "http"]),
        "region": st.sampled_from([None, "pl", "eu-west-3"]),
        "trace": st.integers(0, 5),  # explicit: build_batch numbers traces by row otherwise
    }
)


@PROPS
@given(a=st.lists(span_st, max_size=12), b=st.lists(span_st, max_size=12))
def test_property_names_are_bounded_and_batching_does_not_change_the_window(h, a, b):
    ctx = h.context(h.PLAIN)
    whole = score_batch(h.build_batch(a + b), ctx)
    merged = score_batch(h.build_batch(a), ctx).merge(score_batch(h.build_batch(b), ctx))
    assert WindowPartial.empty().merge(merged).same_as(WindowPartial.empty().merge(whole), 1e-12)
    assert all(_nbytes(s) <= MAX_NAME_BYTES for s in whole.services)
    assert all(
        _nbytes(s) <= MAX_NAME_BYTES and _nbytes(e) <= MAX_NAME_BYTES for s, e in whole.endpoints
    )
    assert sum(whole.endpoints.values()) == whole.io_ops == sum(1 for s in a + b if s["op"])
