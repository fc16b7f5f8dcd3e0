"""Scaphandre's Prometheus exporter on loopback -> kWh per I/O op per service."""

from __future__ import annotations

import math

import pytest

from agent.sources.config import parse_sources
from agent.sources.errors import SourceError
from agent.sources.opcounter import OpCounter
from agent.sources.scaphandre import ScaphandreSource

# As `scaphandre prometheus` serves it (HELP/TYPE lines, microwatt gauges, pid/exe/cmdline).
EXPOSITION = """\
# HELP scaph_host_power_microwatts Power measurement on the whole host, in microwatts
# TYPE scaph_host_power_microwatts gauge
scaph_host_power_microwatts 20000000
# HELP scaph_process_power_consumption_microwatts Power consumption due to the process, measured on at the topology level, in microwatts
# TYPE scaph_process_power_consumption_microwatts gauge
scaph_process_power_consumption_microwatts{pid="1234",exe="checkout",cmdline="/usr/bin/checkout --port 8080"} 8000000
scaph_process_power_consumption_microwatts{pid="1235",exe="checkout",cmdline="/usr/bin/checkout --port 8081"} 4000000
scaph_process_power_consumption_microwatts{pid="2001",exe="java",cmdline="java -jar orders.jar"} 3000000
scaph_process_power_consumption_microwatts{pid="2002",exe="java"} 5000000
scaph_process_power_consumption_microwatts{pid="1",exe="systemd",cmdline="/sbin/init"} 100000
"""


def make(endpoint, clock, ops, **extra):
    table = {"scaphandre": {"url": endpoint.url("/metrics"), "interval_s": 5, "services": {
        "checkout": {"exe": "^checkout$"},
        "orders": {"exe": "^java$", "cmdline": r"orders\.jar"},
    }, **extra}}
    cfg = parse_sources(table).scaphandre[0]
    return ScaphandreSource("scaphandre", cfg, ops, clock=clock, monotonic=clock)


def after_one_interval(endpoint, clock, body, ops_by_service, **extra):
    """A source that polled ``body`` twice, 5 s apart, with these ops in between."""
    endpoint.set("/metrics", body)
    ops = OpCounter()
    src = make(endpoint, clock, ops, **extra)
    src.poll()
    ops.add(ops_by_service)
    clock.advance(5.0)
    src.poll()
    return src


def test_microwatts_over_the_interval_become_kwh_per_op(endpoint, clock):
    endpoint.set("/metrics", EXPOSITION)
    ops = OpCounter()
    src = make(endpoint, clock, ops)
    src.poll()  # baseline: no interval yet
    assert src.snapshot(clock())[0] == {}
    ops.add({"checkout": 8_000, "Orders": 1_000})
    clock.advance(5.0)
    src.poll()
    rates, watts = src.snapshot(clock())
    # checkout: (8e6 + 4e6) uW / 1e6 = 12 W; x 5 s = 60 J; / 3.6e6 = 1.6667e-5 kWh; / 8,000 ops
    assert rates["checkout"].kwh_per_op == pytest.approx(2.0833e-9, rel=1e-4)
    # orders: only the java process whose cmdline names orders.jar: 3 W x 5 s = 15 J / 3.6e6 / 1,000
    assert rates["orders"].kwh_per_op == pytest.approx(4.1667e-9, rel=1e-4)
    assert rates["checkout"].tag == "scaphandre_rapl"
    assert rates["checkout"].taken_at == clock() and rates["checkout"].interval_s == 5
    assert watts == pytest.approx(20.0)  # host gauge: 20,000,000 uW
    # systemd matches no rule; the java process without cmdline misses a label of the rule
    assert src.stats["unmatched_series"] == 2


def test_zero_ops_keep_the_previous_value_and_stale_values_are_dropped(endpoint, clock):
    endpoint.set("/metrics", EXPOSITION)
    ops = OpCounter()
    src = make(endpoint, clock, ops)
    src.poll()
    ops.add({"checkout": 8_000, "orders": 1_000})
    clock.advance(5.0)
    src.poll()
    first = src.snapshot(clock())[0]["orders"]
    ops.add({"checkout": 4_000})  # orders did nothing in this interval
    clock.advance(5.0)
    src.poll()
    rates = src.snapshot(clock())[0]
    assert rates["orders"] == first  # kept as it was, with its own time
    assert rates["checkout"].kwh_per_op == pytest.approx(60 / 3.6e6 / 4_000)
    assert src.stats["zero_ops_kept"] == 1
    clock.advance(3 * 5.0 + 0.1)  # older than 3 x interval
    assert src.snapshot(clock())[0] == {}
    assert src.stats["stale_dropped"] == 3  # two rates and the host watts


def test_non_finite_power_is_discarded(endpoint, clock):
    endpoint.set("/metrics", EXPOSITION.replace("8000000", "NaN"))
    ops = OpCounter()
    src = make(endpoint, clock, ops)
    src.poll()
    ops.add({"checkout": 100, "orders": 100})
    clock.advance(5.0)
    src.poll()
    rates = src.snapshot(clock())[0]
    # the NaN process is discarded; the other checkout process still counts (4 W)
    assert rates["checkout"].kwh_per_op == pytest.approx(4 * 5 / 3.6e6 / 100)
    assert src.stats["discarded"] == 1
    assert all(math.isfinite(r.kwh_per_op) for r in rates.values())


def test_a_body_that_is_not_scaphandre_is_a_clear_error(endpoint, clock):
    ops = OpCounter()
    src = make(endpoint, clock, ops)
    endpoint.set("/metrics", "node_load1 0.5\n")
    with pytest.raises(SourceError, match="scaph_process_power_consumption_microwatts"):
        src.poll()
    endpoint.set("/metrics", 'scaph_process_power_consumption_microwatts{pid="1",exe= 5\n')
    with pytest.raises(SourceError, match="not Prometheus exposition text"):
        src.poll()
    endpoint.set("/metrics", "oops", status=500)
    with pytest.raises(SourceError, match="HTTP 500"):
        src.poll()


def test_container_and_kubernetes_labels_map_to_services(endpoint, clock):
    # `scaphandre prometheus --containers` adds container_* and kubernetes_* labels
    body = """\
# TYPE scaph_process_power_consumption_microwatts gauge
scaph_process_power_consumption_microwatts{pid="41",exe="node",cmdline="node server.js",container_names="cart",container_runtime="containerd",container_scheduler="kubernetes",kubernetes_pod_name="cart-7c9d-x2",kubernetes_pod_namespace="shop",kubernetes_node_name="n1"} 2500000
scaph_process_power_consumption_microwatts{pid="42",exe="node",cmdline="node server.js",container_names="cart",container_runtime="containerd",container_scheduler="kubernetes",kubernetes_pod_name="cart-7c9d-q8",kubernetes_pod_namespace="shop",kubernetes_node_name="n1"} 1500000
scaph_process_power_consumption_microwatts{pid="43",exe="node",cmdline="node server.js",container_names="cart",kubernetes_pod_name="cart-1",kubernetes_pod_namespace="staging"} 9000000
scaph_process_power_consumption_microwatts{pid="44",exe="nginx",container_names="edge"} -1
"""
    src = after_one_interval(endpoint, clock, body, {"cart": 1_000, "edge": 10}, services={
        "cart": {"kubernetes_pod_name": "^cart-", "kubernetes_pod_namespace": "^shop$"},
        "edge": {"container_names": "^edge$"}})
    rates = src.snapshot(clock())[0]
    # the two shop pods: (2.5 + 1.5) W x 5 s = 20 J / 3.6e6 / 1,000 ops; staging is not matched
    assert rates["cart"].kwh_per_op == pytest.approx(20 / 3.6e6 / 1_000)
    assert "edge" not in rates and src.stats["discarded"] == 1  # a negative gauge is discarded
    assert src.stats["unmatched_series"] == 1


def test_a_reading_implying_more_than_a_megawatt_is_discarded(endpoint, clock):
    # a broken exporter: 5e12 uW = 5 MW for one process set; the host gauge claims 2 MW
    body = EXPOSITION.replace("8000000", "5000000000000").replace("20000000", "2000000000000")
    src = after_one_interval(endpoint, clock, body, {"checkout": 8_000, "orders": 1_000})
    rates, watts = src.snapshot(clock())
    assert "checkout" not in rates and watts is None  # not used, and counted
    assert rates["orders"].kwh_per_op == pytest.approx(15 / 3.6e6 / 1_000)  # a sane neighbour is kept
    assert src.stats["discarded"] == 2
