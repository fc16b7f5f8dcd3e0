"""Cloud SPECpower: idle/max watts interpolated by CPU utilisation from /proc/stat or node_exporter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.sources.config import parse_sources
from agent.sources.errors import ConfigError
from agent.sources.opcounter import OpCounter
from agent.sources.specpower import SpecPowerSource
from agent.sources.specpower_table import INSTANCE_POWER, interpolate_watts


def test_interpolate_hand_calculation():
    # 2 W idle, 20 W at full load, 50 % busy: 2 + (20 - 2) x 0.5 = 11 W
    assert interpolate_watts(2.0, 20.0, 0.5) == 11.0
    assert interpolate_watts(2.0, 20.0, None) == 2.0  # unknown utilisation -> idle
    assert interpolate_watts(2.0, 20.0, 1.7) == 20.0 and interpolate_watts(2.0, 20.0, -1) == 2.0


@given(st.floats(0, 1000), st.floats(0, 1000), st.one_of(st.none(), st.floats(allow_nan=True)))
def test_interpolated_watts_stay_between_idle_and_max(idle, extra, cpu):
    w = interpolate_watts(idle, idle + extra, cpu)
    assert idle <= w <= idle + extra


def test_table_rows_carry_source_and_vintage():
    assert INSTANCE_POWER["m5.large"].idle_w == 1.4 and INSTANCE_POWER["m5.large"].max_w == 8.1
    generic = INSTANCE_POWER["generic"]
    assert (generic.idle_w, generic.max_w, generic.per_vcpu) == (3.0, 20.0, True)
    assert all(row.source and row.vintage and row.idle_w < row.max_w for row in INSTANCE_POWER.values())


def proc_stat(user: int, idle: int) -> str:
    # cpu  user nice system idle iowait irq softirq steal guest guest_nice
    return (f"cpu  {user} 0 0 {idle} 0 0 0 0 0 0\ncpu0 {user} 0 0 {idle} 0 0 0 0 0 0\n"
            "intr 123 0\nctxt 456\nbtime 1700000000\n")


def test_proc_stat_utilisation_sets_the_shared_energy(tmp_path, clock):
    stat = tmp_path / "stat"
    stat.write_text(proc_stat(1_000, 9_000))
    table = {"specpower": {"instance_type": "generic", "vcpus": 2, "proc_stat_path": str(stat),
                           "services": ["checkout", "orders"], "interval_s": 10}}
    ops = OpCounter()
    src = SpecPowerSource("spec", parse_sources(table).specpower[0], ops, clock=clock, monotonic=clock)
    src.poll()
    stat.write_text(proc_stat(1_000 + 250, 9_000 + 750))  # 250 busy of 1,000 jiffies: 25 %
    ops.add({"checkout": 600, "orders": 400})
    clock.advance(10.0)
    src.poll()
    rates, watts = src.snapshot(clock())
    # generic x 2 vCPU: idle 6 W, max 40 W; 6 + 34 x 0.25 = 14.5 W; x 10 s = 145 J over 1,000 ops
    assert watts == pytest.approx(14.5)
    assert rates["checkout"].kwh_per_op == pytest.approx(145 / 3.6e6 / 1_000)
    assert rates["orders"].tag == "cloud_specpower"


def test_node_exporter_cpu_seconds(endpoint, clock):
    def values(busy: float, idle: float) -> str:
        lines = ["# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.",
                 "# TYPE node_cpu_seconds_total counter"]
        for cpu in ("0", "1"):
            for mode, v in (("idle", idle), ("iowait", 0), ("user", busy), ("system", 0), ("steal", 0)):
                lines.append(f'node_cpu_seconds_total{{cpu="{cpu}",mode="{mode}"}} {v}')
        return "\n".join(lines) + "\n"

    endpoint.set("/metrics", values(100, 300))
    table = {"specpower": {"instance_type": "m5.large", "cpu_source": "prometheus",
                           "url": endpoint.url("/metrics"), "services": ["api"], "interval_s": 5}}
    ops = OpCounter()
    src = SpecPowerSource("spec", parse_sources(table).specpower[0], ops, clock=clock, monotonic=clock)
    src.poll()
    endpoint.set("/metrics", values(104, 301))  # per CPU: 4 s busy, 1 s idle -> 80 %
    ops.add({"api": 50})
    clock.advance(5.0)
    src.poll()
    # m5.large: 1.4 + (8.1 - 1.4) x 0.8 = 6.76 W
    assert src.snapshot(clock())[1] == pytest.approx(6.76)
    assert src.last_cpu == pytest.approx(0.8)


def test_unknown_utilisation_falls_back_to_idle(endpoint, clock):
    endpoint.set("/metrics", "down", status=503)
    table = {"specpower": {"instance_type": "m5.large", "cpu_source": "prometheus",
                           "url": endpoint.url("/metrics"), "services": ["api"], "interval_s": 5}}
    ops = OpCounter()
    src = SpecPowerSource("spec", parse_sources(table).specpower[0], ops, clock=clock, monotonic=clock)
    src.poll()
    ops.add({"api": 10})
    clock.advance(5.0)
    src.poll()
    assert src.snapshot(clock())[1] == 1.4
    assert src.stats["cpu_unknown"] == 2 and "HTTP 503" in src.last_cpu_error


def test_table_mistakes_are_config_errors():
    with pytest.raises(ConfigError, match=r"sources\.specpower\[0\].*'m9.huge' is not in the table"):
        parse_sources({"specpower": {"instance_type": "m9.huge", "services": ["a"]}})
    with pytest.raises(ConfigError, match="per vCPU: give `vcpus`"):
        parse_sources({"specpower": {"instance_type": "generic", "services": ["a"]}})
    with pytest.raises(ConfigError, match="needs `url`"):
        parse_sources({"specpower": {"instance_type": "m5.large", "cpu_source": "prometheus", "services": ["a"]}})


def test_vcpus_on_a_whole_instance_row_is_refused_not_ignored():
    # m5.large's 1.4/8.1 W are for its own 2 vCPUs; `vcpus = 8` would silently do nothing
    with pytest.raises(ConfigError, match="'m5.large' has the watts of its own vCPUs; drop `vcpus`"):
        parse_sources({"specpower": {"instance_type": "m5.large", "vcpus": 8, "services": ["a"]}})
