"""Alumet: its CSV output followed like tail -f, and its Prometheus exporter (gauge or counter)."""

from __future__ import annotations

import pytest

from agent.sources.alumet import AlumetSource
from agent.sources.config import parse_sources
from agent.sources.errors import SourceError
from agent.sources.opcounter import OpCounter

HEADER = "metric;timestamp;value;resource_kind;resource_id;consumer_kind;consumer_id;__late_attributes\n"


def row(t: str, joules: float, consumer: str, domain: str = "package", metric: str = "rapl_consumed_energy_J") -> str:
    return f"{metric};2026-11-30T10:00:{t}Z;{joules};cpu_package;0;process;{consumer};domain={domain}\n"


def make(clock, ops, **table):
    cfg = parse_sources({"alumet": {"interval_s": 10, **table}}).alumet[0]
    return AlumetSource("alumet", cfg, ops, clock=clock, monotonic=clock)


def test_csv_rows_since_the_last_poll_are_the_interval_energy(tmp_path, clock):
    path = tmp_path / "alumet-output.csv"
    path.write_text(HEADER + row("00", 999, "101"))  # history before the agent started
    ops = OpCounter()
    src = make(clock, ops, csv_path=str(path), services={"checkout": {"consumer_id": "^101$"}})
    src.poll()  # positions at the end: old rows are not this interval's
    with path.open("a") as f:
        f.write(row("01", 3.0, "101") + row("02", 3.0, "101") + row("02", 1.0, "101", domain="dram"))
        f.write(row("02", 7.0, "101", domain="pp0"))  # pp0 (cores) is inside package: not summed
        f.write(row("03", 2.0, "202"))  # another process, no rule
        f.write("rapl_consumed_energy_J;2026-11-30T10:00:04Z;5.0;cpu_pack")  # half-written row
    ops.add({"checkout": 2_000})
    clock.advance(10.0)
    src.poll()
    rates, watts = src.snapshot(clock())
    # 3 + 3 (package) + 1 (dram) = 7 J for checkout; / 3.6e6 / 2,000 ops
    assert rates["checkout"].kwh_per_op == pytest.approx(7 / 3.6e6 / 2_000)
    assert rates["checkout"].tag == "alumet_rapl"
    assert watts == pytest.approx((7 + 2) / 10.0)  # all package+dram joules / 10 s
    # the half-written row is read once complete, in the next interval
    with path.open("a") as f:
        f.write("age;0;process;101;domain=package\n")
    ops.add({"checkout": 1_000})
    clock.advance(10.0)
    src.poll()
    assert src.snapshot(clock())[0]["checkout"].kwh_per_op == pytest.approx(5 / 3.6e6 / 1_000)


def test_csv_rotation_restarts_from_the_top(tmp_path, clock):
    path = tmp_path / "a.csv"
    path.write_text(HEADER + row("00", 50, "101") * 5)
    ops = OpCounter()
    src = make(clock, ops, csv_path=str(path), services={"checkout": {"consumer_id": "101"}})
    src.poll()
    path.write_text(HEADER + row("05", 4.0, "101"))  # truncated and rewritten: smaller than before
    ops.add({"checkout": 10})
    clock.advance(10.0)
    src.poll()
    assert src.snapshot(clock())[0]["checkout"].kwh_per_op == pytest.approx(4 / 3.6e6 / 10)


def test_csv_with_a_wrong_header_or_missing_file_is_a_clear_error(tmp_path, clock):
    ops = OpCounter()
    src = make(clock, ops, csv_path=str(tmp_path / "nope.csv"), services={"x": {"consumer_id": "1"}})
    with pytest.raises(SourceError, match="cannot read it"):
        src.poll()
    bad = tmp_path / "bad.csv"
    bad.write_text("time,watts\n1,2\n")
    src = make(clock, ops, csv_path=str(bad), services={"x": {"consumer_id": "1"}})
    with pytest.raises(SourceError, match="metric,timestamp,value"):
        src.poll()


def test_prometheus_gauge_is_joules_per_alumet_period(endpoint, clock):
    body = """\
# HELP rapl_consumed_energy_J energy consumed by a RAPL domain since the previous measurement
# TYPE rapl_consumed_energy_J gauge
rapl_consumed_energy_J{resource_kind="cpu_package",resource_id="0",consumer_kind="local_machine",consumer_id="",domain="package"} 12.5
rapl_consumed_energy_J{resource_kind="dram",resource_id="0",consumer_kind="local_machine",consumer_id="",domain="dram"} 2.5
rapl_consumed_energy_J{resource_kind="cpu_package",resource_id="0",consumer_kind="local_machine",consumer_id="",domain="platform"} 40
"""
    endpoint.set("/metrics", body)
    ops = OpCounter()
    src = make(clock, ops, url=endpoint.url("/metrics"), measure_interval_s=0.5,
               services={"db": {"consumer_kind": "local_machine"}})
    src.poll()
    ops.add({"db": 300})
    clock.advance(10.0)
    src.poll()
    rates, watts = src.snapshot(clock())
    # (12.5 + 2.5) J per 0.5 s period = 30 W; x 10 s = 300 J; / 3.6e6 / 300 ops
    assert rates["db"].kwh_per_op == pytest.approx(300 / 3.6e6 / 300)
    assert watts == pytest.approx(30.0)


def test_prometheus_counter_is_read_as_an_increase(endpoint, clock):
    body = "# TYPE rapl_consumed_energy_total counter\n" \
           'rapl_consumed_energy_total{domain="package",consumer_id="/kubepods/orders"} %s\n'
    endpoint.set("/metrics", body % 1_000)
    ops = OpCounter()
    src = make(clock, ops, url=endpoint.url("/metrics"), services={"orders": {"consumer_id": "orders"}})
    src.poll()
    ops.add({"orders": 100})
    clock.advance(10.0)
    endpoint.set("/metrics", body % 1_036)
    src.poll()
    assert src.snapshot(clock())[0]["orders"].kwh_per_op == pytest.approx(36 / 3.6e6 / 100)


def test_csv_with_comma_delimiter_as_issue_5_writes_it(tmp_path, clock):
    path = tmp_path / "alumet.csv"
    path.write_text("metric,timestamp,value,resource_kind,resource_id,consumer_kind,consumer_id\n")
    ops = OpCounter()
    src = make(clock, ops, csv_path=str(path), services={"search": {"consumer_id": "^/kubepods/search$"}})
    src.poll()
    with path.open("a") as f:
        f.write("rapl_consumed_energy,2026-11-30T10:00:01Z,0.75,cpu_package,0,cgroup,/kubepods/search\n")
        f.write("rapl_consumed_energy,2026-11-30T10:00:02Z,0.25,cpu_package,0,cgroup,/kubepods/search\n")
    ops.add({"search": 250})
    clock.advance(10.0)
    src.poll()
    # 0.75 + 0.25 = 1 J / 3.6e6 / 250 ops = 1.1111e-9 kWh/op
    assert src.snapshot(clock())[0]["search"].kwh_per_op == pytest.approx(1.1111e-9, rel=1e-4)


def test_a_hostile_csv_line_loses_only_itself(tmp_path, clock):
    path = tmp_path / "alumet.csv"
    path.write_text(HEADER)
    ops = OpCounter()
    src = make(clock, ops, csv_path=str(path), services={"checkout": {"consumer_id": "^101$"}})
    src.poll()
    with path.open("a") as f:
        f.write(row("01", 2.0, "101"))
        f.write("rapl_consumed_energy_J;t;" + "9" * 200_000 + ";cpu_package;0;process;101;domain=package\n")
        f.write(row("02", 3.0, "101"))
        f.write("rapl_consumed_energy_J;t;not-a-number;cpu_package;0;process;101;domain=package\n")
    ops.add({"checkout": 100})
    clock.advance(10.0)
    src.poll()
    # the over-long line and the non-numeric value are discarded; 2 + 3 J remain
    assert src.snapshot(clock())[0]["checkout"].kwh_per_op == pytest.approx(5 / 3.6e6 / 100)
    assert src.stats["discarded"] == 2
