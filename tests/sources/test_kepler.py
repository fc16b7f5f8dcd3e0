"""Kepler's *_joules_total counters on loopback: zones, resets, new and unlabelled series."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.sources.config import parse_sources
from agent.sources.kepler import KeplerSource
from agent.sources.opcounter import OpCounter
from agent.sources.prom import parse_exposition, zone_ok

HEAD = """\
# HELP kepler_container_cpu_joules_total Energy consumption of cpu at container level in joules
# TYPE kepler_container_cpu_joules_total counter
"""


def exposition(pkg_a: float, pkg_b: float, core: float, dram: float, extra: str = "") -> str:
    lab = 'container_id="{cid}",container_name="{name}",pod_id="p-{cid}",runtime="containerd",state="running"'
    a = lab.format(cid="a1", name="checkout")
    b = lab.format(cid="b2", name="checkout")
    return HEAD + "".join([
        f'kepler_container_cpu_joules_total{{{a},zone="package"}} {pkg_a}\n',
        f'kepler_container_cpu_joules_total{{{a},zone="core"}} {core}\n',
        f'kepler_container_cpu_joules_total{{{a},zone="dram"}} {dram}\n',
        f'kepler_container_cpu_joules_total{{{b},zone="package"}} {pkg_b}\n',
        'kepler_container_cpu_joules_total{container_id="c3",zone="package"} 50\n',  # no name
        extra,
    ])


def make(endpoint, clock, ops, **extra):
    table = {"kepler": {"url": endpoint.url("/metrics"), "interval_s": 15,
                        "services": {"checkout": {"container_name": "^checkout$"}}, **extra}}
    return KeplerSource("kepler", parse_sources(table).kepler[0], ops, clock=clock, monotonic=clock)


def test_package_zone_increase_over_ops(endpoint, clock):
    ops = OpCounter()
    src = make(endpoint, clock, ops)
    endpoint.set("/metrics", exposition(1000, 500, 900, 300))
    src.poll()
    ops.add({"checkout": 8_000})
    clock.advance(15.0)
    # package +120 J on each checkout container; core (inside package) and dram are not summed
    endpoint.set("/metrics", exposition(1120, 620, 1000, 330))
    src.poll()
    rates, watts = src.snapshot(clock())
    # (120 + 120) J / 3.6e6 / 8,000 ops = 8.3333e-9 kWh/op
    assert rates["checkout"].kwh_per_op == pytest.approx(8.3333e-9, rel=1e-4)
    assert rates["checkout"].tag == "kepler_ebpf"
    # machine watts over the interval: 240 J of package zone (the unnamed container is flat) / 15 s
    assert watts == pytest.approx(16.0)
    assert src.stats["unmatched_series"] == 1  # the container without container_name


def test_dram_zone_can_be_added(endpoint, clock):
    ops = OpCounter()
    src = make(endpoint, clock, ops, zones=["package", "dram"])
    endpoint.set("/metrics", exposition(1000, 500, 900, 300))
    src.poll()
    ops.add({"checkout": 1_000})
    clock.advance(15.0)
    endpoint.set("/metrics", exposition(1120, 620, 1000, 336))
    src.poll()
    # (120 + 120 + 36) J / 3.6e6 / 1,000
    assert src.snapshot(clock())[0]["checkout"].kwh_per_op == pytest.approx(276 / 3.6e6 / 1_000)


def test_counter_reset_counts_the_current_value_and_new_series_wait(endpoint, clock):
    ops = OpCounter()
    src = make(endpoint, clock, ops)
    endpoint.set("/metrics", exposition(1000, 500, 900, 300))
    src.poll()
    ops.add({"checkout": 1_000})
    clock.advance(15.0)
    # Kepler restarted: container a's counter went from 1000 to 30 (reset: 30 J this interval);
    # container b grew by 60 J; a new container appears (its total is not this interval's).
    new = 'kepler_container_cpu_joules_total{container_id="d4",container_name="checkout",zone="package"} 9999\n'
    endpoint.set("/metrics", exposition(30, 560, 10, 5, extra=new))
    src.poll()
    assert src.snapshot(clock())[0]["checkout"].kwh_per_op == pytest.approx((30 + 60) / 3.6e6 / 1_000)
    assert src.stats["counter_resets"] >= 1


def test_kepler_07_series_without_zone_are_kept(endpoint, clock):
    ops = OpCounter()
    src = make(endpoint, clock, ops, metric="kepler_container_joules_total",
               services={"orders": {"pod_name": "^orders-", "container_namespace": "^shop$"}})
    body = """\
# HELP kepler_container_joules_total Aggregated RAPL value in joules
# TYPE kepler_container_joules_total counter
kepler_container_joules_total{container_name="app",container_namespace="shop",pod_name="orders-7d9f",mode="dynamic"} %s
kepler_container_joules_total{container_name="app",container_namespace="shop",pod_name="orders-7d9f",mode="idle"} %s
"""
    endpoint.set("/metrics", body % (100, 40))
    src.poll()
    ops.add({"orders": 500})
    clock.advance(15.0)
    endpoint.set("/metrics", body % (145, 50))
    src.poll()
    # dynamic +45 J and idle +10 J: (45 + 10) / 3.6e6 / 500
    assert src.snapshot(clock())[0]["orders"].kwh_per_op == pytest.approx(55 / 3.6e6 / 500)


def test_node_counter_gives_host_watts(endpoint, clock):
    ops = OpCounter()
    src = make(endpoint, clock, ops, metric="kepler_node_cpu_joules_total", services={})
    body = "# TYPE kepler_node_cpu_joules_total counter\n" \
           'kepler_node_cpu_joules_total{zone="package",path="/sys/class/powercap/intel-rapl:0"} %s\n' \
           'kepler_node_cpu_joules_total{zone="core",path="/sys/class/powercap/intel-rapl:0:0"} %s\n'
    endpoint.set("/metrics", body % (10_000, 7_000))
    src.poll()
    clock.advance(15.0)
    endpoint.set("/metrics", body % (11_500, 8_000))
    src.poll()
    # 1,500 J of package over 15 s = 100 W (core is inside package and not added)
    assert src.snapshot(clock())[1] == pytest.approx(100.0)


_label_text = st.text(alphabet='ab,={}" \\zone', max_size=12)


@given(st.lists(st.tuples(st.sampled_from(["kepler_container_cpu_joules_total", "kepler_other_joules_total"]),
                          st.sampled_from([None, "package", "core", "dram"]), _label_text,
                          st.integers(0, 10**6)), max_size=25),
       st.sets(st.sampled_from(["package", "core", "dram"]), max_size=2))
@settings(max_examples=150, deadline=None)
def test_prefilter_keeps_exactly_what_the_library_and_zone_filter_keep(series, zones):
    """The line pre-filter is only a shortcut: same samples as parsing everything then filtering."""
    lines = ["# TYPE kepler_container_cpu_joules_total counter", "# TYPE kepler_other_joules_total counter"]
    for i, (name, zone, text, value) in enumerate(series):
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        labels = [f'container_name="{escaped}"', f'i="{i}"'] + ([f'zone="{zone}"'] if zone else [])
        lines.append(f"{name}{{{','.join(labels)}}} {value}")
    body = ("\n".join(lines) + "\n").encode()
    wanted = "kepler_container_cpu_joules_total"
    fast = parse_exposition(body, (wanted,), "t", "zone", frozenset(zones))
    slow = [s for s in parse_exposition(body, (wanted,), "t") if zone_ok(s.labels, "zone", frozenset(zones))]
    assert [(s.key, s.value) for s in fast] == [(s.key, s.value) for s in slow]


@given(st.lists(st.dictionaries(st.sampled_from("abc"), st.floats(allow_nan=True, allow_infinity=True,
                                                                 min_value=None, max_value=None)), max_size=8))
def test_counter_deltas_are_finite_non_negative_and_follow_reset_rules(polls):
    from agent.sources.prom import CounterDeltas

    tracker = CounterDeltas()
    prev: dict[str, float] = {}
    for values in polls:
        deltas = tracker.update(values)
        clean = {k: v for k, v in values.items() if v == v and abs(v) != float("inf") and v >= 0}
        for key, d in deltas.items():
            assert d >= 0 and d == d and d != float("inf")
            assert d == (clean[key] - prev[key] if clean[key] >= prev[key] else clean[key])
        assert set(deltas) == {k for k in clean if k in prev}
        prev = clean


def test_a_frozen_exporter_fails_the_poll_instead_of_measuring_zero(endpoint, clock):
    from agent.sources.errors import SourceError

    ops = OpCounter()
    src = make(endpoint, clock, ops)
    endpoint.set("/metrics", exposition(1000, 500, 900, 300))
    src.poll()
    ops.add({"checkout": 1_000})
    clock.advance(15.0)
    endpoint.set("/metrics", exposition(1060, 560, 950, 310))
    src.poll()
    good = src.snapshot(clock())[0]["checkout"]
    assert good.kwh_per_op == pytest.approx(120 / 3.6e6 / 1_000)
    ops.add({"checkout": 1_000})
    clock.advance(15.0)  # the exporter now serves the very same counters
    with pytest.raises(SourceError, match=r"none of the 3 kepler_container_cpu_joules_total series moved in 15 s"):
        src.poll()
    assert src.snapshot(clock())[0]["checkout"] == good  # the last good value, until it is stale
    clock.advance(31.0)
    assert src.snapshot(clock())[0] == {}
