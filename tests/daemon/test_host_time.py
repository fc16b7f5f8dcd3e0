"""Hosts are charged for every second the agent runs, once (issue 11, item 1), on a real agent.

1 s windows, a 3,600 W database host, two traces ~3 windows apart sent with the SDK's OTLP/gRPC
exporter, SIGTERM after ~5 s. Before the fix only the two windows holding spans were
archived: about 2 of the ~5 seconds were charged. Now idle windows are archived as host-only
lines, each window starts where the last ended, and archived host energy = watts x the agent's
running time, within one window at start and at stop.
"""

from __future__ import annotations

import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from schema.times import to_ns as rfc3339_to_ns

WATTS = 3600.0
CONFIG = f"""
[agent]
window_seconds = 1
[[green.hosts]]
name = "pg-main"
kind = "database"
region = "eu-west-3"
watts = {WATTS}
"""


def _s(text: str) -> float:
    """Seconds since the epoch, exact to the microsecond (as nanoseconds / 1e9)."""
    return rfc3339_to_ns(text) / 1e9


def test_host_energy_is_watts_times_the_agent_running_time(start_agent, recording) -> None:
    spawned = time.time()
    agent = start_agent(config=CONFIG)
    ready = time.time()
    exporter = recording(OTLPSpanExporter(endpoint=agent.grpc_target, insecure=True, timeout=10))
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for i in range(2):
        if i:  # idle windows between the two requests: once the open window holds no span,
            # three more close (the first may still be the span's own), so two are idle;
            # waited for, not slept for (a loaded machine may tick late)
            agent.wait_for(lambda: agent.metric("carbonspan_open_window_spans") == 0,
                           timeout=30, what="the span's window to be archived")
            written = agent.metric("carbonspan_windows_written_total")
            agent.wait_for(lambda w=written: agent.metric("carbonspan_windows_written_total") >= w + 3,
                           timeout=30, what="two idle windows")
        with tracer.start_as_current_span("GET /", kind=SpanKind.SERVER):
            pass
    time.sleep(1.5)
    provider.shutdown()
    stopping = time.time()
    assert agent.stop() == 0
    stopped = time.time()
    assert exporter.acked_spans == 2
    lines = [r["report"] for r in agent.records()]
    windows = [(_s(r["window"]["start"]), _s(r["window"]["end"])) for r in lines]
    exact = [(rfc3339_to_ns(r["window"]["start"]), rfc3339_to_ns(r["window"]["end"]))
             for r in lines]
    # every second once: each window starts where the previous ended, no gap, no overlap
    assert all(b[0] == a[1] for a, b in zip(exact, exact[1:], strict=False)), windows
    assert sum(r["window"]["spans"] for r in lines) == 2
    assert sum(1 for r in lines if r["window"]["spans"] == 0) >= 2  # host-only lines
    # each host row: watts x its line's window length (what `carbonspan verify` checks)
    for r, (start, end) in zip(lines, exact, strict=True):
        (host,) = r["green_summary"]["hosts"]
        assert host["energy_kwh"] == WATTS * ((end - start) / 1e9) / 3.6e6
        assert host["energy_kwh"] <= r["green_summary"]["energy_kwh"]
    # ... and together: watts x the running time, from start-up to SIGTERM within a window
    first, last = windows[0][0], windows[-1][1]
    assert spawned <= first <= ready and stopping <= last <= stopped
    energy = sum(r["green_summary"]["hosts"][0]["energy_kwh"] for r in lines)
    assert abs(energy - WATTS * (exact[-1][1] - exact[0][0]) / 1e9 / 3.6e6) < 1e-12
    assert energy >= WATTS * (stopping - ready) / 3.6e6  # nothing the agent ran is uncharged


def test_a_restart_charges_no_downtime(start_agent) -> None:
    """kill -9 and a restart 2 s later: the gap is not charged, and is visible between lines."""
    agent = start_agent(config=CONFIG)
    agent.wait_for(lambda: len(agent.records()) >= 2, timeout=20, what="two host-only lines")
    agent.kill9()
    killed = time.time()
    time.sleep(2.0)
    again = start_agent(config=CONFIG, root=agent.root)
    agent.wait_for(lambda: len(again.records()) >= 4, timeout=20, what="more host-only lines")
    assert again.stop() == 0
    lines = [r["report"] for r in again.records()]
    windows = [(_s(r["window"]["start"]), _s(r["window"]["end"])) for r in lines]
    gaps = [b[0] - a[1] for a, b in zip(windows, windows[1:], strict=False)]
    assert all(g >= 0 for g in gaps)  # never charged twice
    assert [g for g in gaps if g > 0] and max(gaps) >= 2.0  # the downtime is a gap ...
    assert all(w[1] <= killed or w[0] >= killed for w in windows)  # ... and charged to no line
