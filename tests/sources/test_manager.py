"""SourceManager end to end over loopback: threads, priority, staleness, failures, backoff."""

from __future__ import annotations

import random
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.carbon.signals import MeasuredRate
from agent.sources.config import parse_sources
from agent.sources.errors import ConfigError
from agent.sources.manager import SourceManager
from agent.sources.opcounter import OpCounter
from agent.sources.runner import backoff_delay

SCAPH = """\
# TYPE scaph_host_power_microwatts gauge
scaph_host_power_microwatts 30000000
# TYPE scaph_process_power_consumption_microwatts gauge
scaph_process_power_consumption_microwatts{pid="7",exe="checkout",cmdline="checkout"} 12000000
"""
HEADER = "metric;timestamp;value;resource_kind;resource_id;consumer_kind;consumer_id;__late_attributes\n"


def stale(rate, now: float) -> bool:
    """What the scorer tests before using a rate (agent/score.py): older than 3 x interval."""
    return now - rate.taken_at > 3 * rate.interval_s


def scaph(endpoint, interval=10.0, **extra):
    return {"url": endpoint.url("/metrics"), "interval_s": interval, "timeout_s": 1.0,
            "services": {"checkout": {"exe": "checkout"}}, **extra}


def test_pollers_run_in_threads_and_publish_signals(endpoint, until):
    endpoint.set("/metrics", SCAPH)
    mgr = SourceManager.from_config({"scaphandre": scaph(endpoint, interval=0.05)})
    with mgr:
        def fed() -> bool:
            mgr.ops.add({"checkout": 100})
            return "checkout" in mgr.current().measured
        assert until(fed, 10.0)
        rate = mgr.current().measured["checkout"]
        assert rate.tag == "scaphandre_rapl" and rate.kwh_per_op > 0
        polls = len(endpoint.requests)
        assert until(lambda: len(endpoint.requests) >= polls + 3, 10.0)  # it keeps polling
    stopped_at = len(endpoint.requests)
    endpoint.release.wait(0.2)
    assert len(endpoint.requests) <= stopped_at + 1  # stop() ended the thread


def test_current_never_touches_the_network(endpoint):
    endpoint.set("/metrics", SCAPH)
    mgr = SourceManager.from_config({"scaphandre": scaph(endpoint)})
    mgr.poll_all()
    before = len(endpoint.requests)
    endpoint.close()  # the exporter is gone
    t0 = time.monotonic()
    for _ in range(1000):
        mgr.current()
    assert time.monotonic() - t0 < 2.0 and len(endpoint.requests) == before


def test_priority_alumet_over_scaphandre_over_redfish_and_stale_fallback(endpoint, tmp_path, clock, monkeypatch):
    monkeypatch.setenv("BMC_PW", "pw")
    endpoint.set("/metrics", SCAPH)
    endpoint.set("/redfish/v1/Chassis/1/Power", b'{"PowerControl":[{"PowerConsumedWatts":300}]}')
    csv = tmp_path / "alumet.csv"
    csv.write_text(HEADER)
    table = {
        "alumet": {"csv_path": str(csv), "interval_s": 10, "services": {"checkout": {"consumer_id": "^7$"}}},
        "scaphandre": scaph(endpoint, interval=60.0),
        "redfish": {"url": endpoint.base, "interval_s": 600, "username": "u", "password_env": "BMC_PW",
                    "services": ["checkout"]},
    }
    mgr = SourceManager(parse_sources(table), clock=clock)
    mgr.poll_all()
    with csv.open("a") as f:
        f.write("rapl_consumed_energy_J;2026-11-30T10:00:01Z;5.0;cpu_package;0;process;7;domain=package\n")
    mgr.ops.add({"checkout": 1000})
    clock.advance(1.0)
    mgr.poll_all()
    assert mgr.current().measured["checkout"].tag == "alumet_rapl"
    # no new Alumet rows: after 3 x 10 s its value is stale and dropped; Scaphandre's (60 s) wins
    clock.advance(31.0)
    assert mgr.current().measured["checkout"].tag == "scaphandre_rapl"
    assert mgr.health()["alumet"]["stale_dropped"] == 2  # the rate and the machine watts
    clock.advance(3 * 60.0)
    assert mgr.current().measured["checkout"].tag == "redfish_bmc"
    clock.advance(3 * 600.0)
    # all stale: the newest-kind's last value is handed over as it is, so the scorer sees it is
    # stale, uses the I/O proxy and counts the spans (measured_stale_spans)
    assert stale(mgr.current().measured["checkout"], clock())


def test_failures_are_counted_and_the_last_good_value_is_kept(endpoint, clock):
    endpoint.set("/metrics", SCAPH)
    mgr = SourceManager(parse_sources({"scaphandre": scaph(endpoint)}), clock=clock)
    mgr.poll_all()
    mgr.ops.add({"checkout": 10})
    mgr.poll_all()
    good = mgr.current().measured["checkout"]
    endpoint.set("/metrics", "boom", status=503)
    clock.advance(1.0)
    mgr.poll_all()
    mgr.poll_all()
    health = mgr.health()["scaphandre"]
    assert health["ok"] is False and health["failures"] == 2 and health["consecutive_failures"] == 2
    assert "HTTP 503" in health["last_error"] and health["stale"] is False
    assert mgr.current().measured["checkout"] == good
    runner = mgr.runners["scaphandre"]
    assert runner.next_delay() >= 10.0 * 2  # two failures: between 20 s and 40 s
    endpoint.set("/metrics", SCAPH)
    mgr.poll_all()
    assert mgr.health()["scaphandre"]["ok"] is True and runner.next_delay() == 10.0
    clock.advance(31.0)
    assert mgr.health()["scaphandre"]["stale"] is True


def test_a_hanging_endpoint_times_out(endpoint):
    endpoint.set("/metrics", SCAPH, hang=True)
    mgr = SourceManager.from_config({"scaphandre": scaph(endpoint, timeout_s=0.2)})
    t0 = time.monotonic()
    mgr.poll_all()
    assert time.monotonic() - t0 < 3.0
    health = mgr.health()["scaphandre"]
    assert health["ok"] is False and "timed out" in health["last_error"]


def test_an_endpoint_that_is_down_is_not_fatal_at_start(endpoint):
    endpoint.set("/metrics", "nope", status=404)
    mgr = SourceManager.from_config({"scaphandre": scaph(endpoint)})
    mgr.start()  # down endpoints are retried with backoff, not a start error
    try:
        assert mgr.health()["scaphandre"]["failures"] >= 1
    finally:
        mgr.stop()


@given(st.integers(0, 60), st.floats(0.01, 3600), st.floats(0.01, 86400), st.integers(0, 2**32))
def test_backoff_is_jittered_exponential_and_capped(failures, interval, cap, seed):
    delay = backoff_delay(failures, interval, cap, random.Random(seed))
    if failures == 0:
        assert delay == interval
    else:
        ceiling = max(interval, min(cap, interval * 2.0 ** failures))
        assert ceiling / 2 <= delay <= ceiling


def test_config_mistakes_name_the_key():
    with pytest.raises(ConfigError, match=r"sources\.scaphandre\[0\]\.url: required key is missing"):
        parse_sources({"scaphandre": [{"services": {"a": {"exe": "a"}}}]})
    with pytest.raises(ConfigError, match=r"sources\.kepler\[0\]\.intervl_s: unknown key"):
        parse_sources({"kepler": {"url": "http://h/metrics", "intervl_s": 3}})
    with pytest.raises(ConfigError, match=r"bad regex"):
        parse_sources({"scaphandre": {"url": "http://h/", "services": {"a": {"exe": "("}}}})
    with pytest.raises(ConfigError, match="repeated: scaphandre"):
        parse_sources({"scaphandre": [{"url": "http://a/", "name": "scaphandre"}, {"url": "http://b/", "name": "scaphandre"}]})
    with pytest.raises(ConfigError, match="exactly one of `url`"):
        parse_sources({"alumet": {"services": {"a": {"x": "y"}}}})
    with pytest.raises(ConfigError, match="feeds no service and no"):
        SourceManager.from_config({"scaphandre": {"url": "http://127.0.0.1:9/"}})


def test_op_counter_cursors_see_each_op_once_across_threads():
    counter = OpCounter()
    cursor = counter.cursor()
    seen: dict[str, int] = {}

    def feed() -> None:
        for _ in range(2000):
            counter.add({"A": 1, "b": 2, "neg": -5, "flag": True})  # type: ignore[dict-item]

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for k, v in cursor.take().items():
            seen[k] = seen.get(k, 0) + v
    for t in threads:
        t.join()
    for k, v in cursor.take().items():
        seen[k] = seen.get(k, 0) + v
    assert seen == {"a": 8000, "b": 16000} == counter.totals()


@given(st.lists(st.dictionaries(st.sampled_from("abc"), st.integers(-3, 50)), max_size=20),
       st.lists(st.booleans(), max_size=20))
def test_op_cursor_deltas_sum_to_the_totals(batches, takes):
    counter = OpCounter()
    cursor = counter.cursor()
    got: dict[str, int] = {}
    for i, batch in enumerate(batches):
        counter.add(batch)
        if i < len(takes) and takes[i]:
            for k, v in cursor.take().items():
                assert v > 0
                got[k] = got.get(k, 0) + v
    for k, v in cursor.take().items():
        got[k] = got.get(k, 0) + v
    assert got == counter.totals()


KEPLER = """\
# TYPE kepler_container_cpu_joules_total counter
kepler_container_cpu_joules_total{container_name="checkout",zone="package"} %d
"""


def test_priority_over_all_five_kinds_then_the_proxy(endpoint, tmp_path, clock, monkeypatch):
    """alumet > scaphandre > kepler > redfish > specpower: each gives way when it goes stale."""
    monkeypatch.setenv("BMC_PW", "pw")
    endpoint.set("/scaph", SCAPH)
    endpoint.set("/kepler", KEPLER % 1000)
    endpoint.set("/redfish/v1/Chassis/1/Power", b'{"PowerControl":[{"PowerConsumedWatts":300}]}')
    csv = tmp_path / "alumet.csv"
    csv.write_text(HEADER)
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 0 900 0 0 0 0 0 0\n")
    rules = {"checkout": {"exe": "checkout"}}
    table = {
        "alumet": {"csv_path": str(csv), "interval_s": 10, "services": {"checkout": {"consumer_id": "^7$"}}},
        "scaphandre": {"url": endpoint.url("/scaph"), "interval_s": 20, "services": rules},
        "kepler": {"url": endpoint.url("/kepler"), "interval_s": 40,
                   "services": {"checkout": {"container_name": "^checkout$"}}},
        "redfish": {"url": endpoint.base, "interval_s": 80, "username": "u", "password_env": "BMC_PW",
                    "services": ["checkout"]},
        "specpower": {"instance_type": "m5.large", "proc_stat_path": str(stat), "interval_s": 160,
                      "services": ["checkout"]},
    }
    mgr = SourceManager(parse_sources(table), clock=clock)
    mgr.poll_all()
    with csv.open("a") as f:
        f.write("rapl_consumed_energy_J;2026-11-30T10:00:01Z;5.0;cpu_package;0;process;7;domain=package\n")
    endpoint.set("/kepler", KEPLER % 1090)
    stat.write_text("cpu  150 0 0 950 0 0 0 0 0 0\n")
    mgr.ops.add({"checkout": 1000})
    clock.advance(1.0)
    mgr.poll_all()
    signals = mgr.current()
    assert signals.measured["checkout"].tag == "alumet_rapl"
    expected = ["alumet_rapl", "scaphandre_rapl", "kepler_ebpf", "redfish_bmc", "cloud_specpower"]
    seen = []
    for interval in (10, 20, 40, 80, 160):
        seen.append(mgr.current().measured["checkout"].tag)
        clock.t = 1_700_000_001.0 + 3 * interval + 0.5  # just past this kind's 3 x interval
    assert seen == expected
    last = mgr.current().measured["checkout"]  # every kind stale: the scorer uses the proxy
    assert stale(last, clock()) and last.tag == "alumet_rapl"  # the highest kind's last value


def test_meters_of_one_kind_add_up_and_a_down_meter_withholds_the_kind(endpoint, clock):
    """One Scaphandre per node: a service on both nodes is charged both nodes' power; while
    one node's exporter is down the sum would be short, so the kind is not used for it."""
    node_b = SCAPH.replace("12000000", "3000000").replace("30000000", "10000000")
    node_b += 'scaph_process_power_consumption_microwatts{pid="8",exe="orders"} 6000000\n'
    endpoint.set("/a/metrics", SCAPH)
    endpoint.set("/b/metrics", node_b)
    rules = {"checkout": {"exe": "^checkout$"}, "orders": {"exe": "^orders$"}}
    table = {"scaphandre": [
        {"name": "node-a", "url": endpoint.url("/a/metrics"), "interval_s": 10, "services": rules},
        {"name": "node-b", "url": endpoint.url("/b/metrics"), "interval_s": 10, "services": rules},
    ]}
    mgr = SourceManager(parse_sources(table), clock=clock)
    mgr.poll_all()
    mgr.ops.add({"checkout": 1000, "orders": 500})
    clock.advance(1.0)
    mgr.poll_all()
    measured = mgr.current().measured
    ea = mgr.runners["node-a"].source.snapshot(clock())[0]["checkout"].kwh_per_op
    eb = mgr.runners["node-b"].source.snapshot(clock())[0]["checkout"].kwh_per_op
    # node a's 12 W and node b's 3 W, each over its own interval and the same 1,000 ops
    assert ea > 0 and eb > 0
    assert measured["checkout"].kwh_per_op == pytest.approx(ea + eb, rel=1e-12)
    # orders runs on node b only: node a is up and sees none of it, so b's value stands alone
    assert measured["orders"].kwh_per_op == pytest.approx(
        mgr.runners["node-b"].source.snapshot(clock())[0]["orders"].kwh_per_op)
    # node a goes down; node b keeps answering
    endpoint.set("/a/metrics", "down", status=503)
    for _ in range(4):
        clock.advance(10.0)
        mgr.ops.add({"checkout": 1000, "orders": 500})
        mgr.poll_all()
    measured = mgr.current().measured
    # node a's share is unknown: b's fresh values are not used; node a's last (stale) ones are
    # handed over so that the scorer falls back to the proxy and counts it
    assert stale(measured["checkout"], clock()) and stale(measured["orders"], clock())
    assert mgr.health()["node-a"]["incomplete_services"] == 2
    assert mgr.health()["node-b"]["incomplete_services"] == 0
    endpoint.set("/a/metrics", SCAPH)  # node a is back: the sum is complete again
    clock.advance(10.0)
    mgr.poll_all()
    assert mgr.current().measured["checkout"].kwh_per_op > 0
    assert mgr.health()["node-a"]["incomplete_services"] == 0


def test_pattern_mistakes_say_what_is_expected():
    with pytest.raises(ConfigError, match=r"scaphandre\[0\]\.url: must be an http:// or https:// URL, "
                                          r"got 'localhost:8080/metrics'"):
        parse_sources({"scaphandre": {"url": "localhost:8080/metrics"}})
    with pytest.raises(ConfigError, match=r"redfish\[0\]\.chassis_id: must be 1-64 letters.*got '1/../2'"):
        parse_sources({"redfish": {"url": "https://bmc", "chassis_id": "1/../2"}})


_rates = st.lists(st.builds(
    lambda k, t, i: MeasuredRate(k, "scaphandre_rapl", t, i),
    st.floats(0, 1e-3, allow_nan=False), st.floats(1.6e9, 1.8e9), st.floats(0.5, 3600)), min_size=1, max_size=6)


@given(_rates, st.randoms(use_true_random=False))
def test_meters_of_one_kind_add_up_in_any_order_and_are_as_fresh_as_the_first_to_expire(rates, rnd):
    from agent.sources.manager import add_rates

    total = add_rates(rates)
    shuffled = list(rates)
    rnd.shuffle(shuffled)
    assert add_rates(shuffled).kwh_per_op == total.kwh_per_op  # fsum: order does not matter
    assert total.kwh_per_op == pytest.approx(sum(r.kwh_per_op for r in rates), rel=1e-12, abs=1e-300)
    expiry = min(r.taken_at + 3 * r.interval_s for r in rates)
    assert total.taken_at + 3 * total.interval_s == expiry  # stale exactly when its first part is
    assert total.tag == "scaphandre_rapl"
