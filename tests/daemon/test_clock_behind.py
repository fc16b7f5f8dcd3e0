"""WAL replay is tied to the archive sequence, not the wall clock (issue 12, item 4).

Reproduced on the old code: an agent archives windows with the real clock, restarts with its
clock an hour behind (an NTP step, a snapshot restore, a VM without RTC), acknowledges 20
requests, is killed with SIGKILL and restarted: replay skipped every record whose window start
was not after the last archived start, "0 partials replayed", 20 acknowledged requests lost.

The agent's clock is set back with libfaketime (from the test extra) preloaded into the agent
only: ``FAKETIME="-3600"`` shifts its wall clock an hour back in every thread; its monotonic
clock stays real (DONT_FAKE_MONOTONIC), as after an NTP step.
"""

from __future__ import annotations

import os

import libfaketime
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from schema.times import to_ns as rfc3339_to_ns


def clock_behind_env(seconds: int) -> dict[str, str]:
    """libfaketime's own preload settings with the wall clock ``seconds`` behind."""
    _, env = libfaketime.get_reload_information()
    env = dict(env)
    if os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] += os.pathsep + os.environ["LD_LIBRARY_PATH"]
    env["FAKETIME"] = f"-{seconds}"
    return env


def send(agent, recording, n: int, service: str):
    rec = recording(OTLPSpanExporter(endpoint=agent.grpc_target, insecure=True, timeout=10))
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "cloud.region": "eu-west-3"}))
    provider.add_span_processor(SimpleSpanProcessor(rec))
    tracer = provider.get_tracer("t")
    for _ in range(n):
        with tracer.start_as_current_span("GET /", kind=SpanKind.SERVER):
            pass
    provider.shutdown()
    return rec


def test_kill9_with_the_clock_behind_the_archive_loses_no_acknowledged_span(
        start_agent, recording) -> None:
    first = start_agent("--window-seconds", "0.5")
    before = send(first, recording, 5, "before")
    first.wait_for(lambda: sum(r["report"]["window"]["spans"] for r in first.records()) == 5,
                   timeout=20, what="the first life's spans to be archived")
    assert first.stop() == 0
    head = first.records()[-1]["report"]["window"]
    # the second life: an hour behind, a long window (the requests stay in the WAL), kill -9
    behind = start_agent("--window-seconds", "600", root=first.root, env=clock_behind_env(3600))
    acked = send(behind, recording, 20, "behind")
    assert acked.acked_spans == 20
    behind.kill9()
    # the third life, still behind: every acknowledged span is replayed and archived
    third = start_agent("--window-seconds", "600", root=first.root, env=clock_behind_env(3600))
    assert "20 partials replayed" in third.startup_line
    assert third.stop() == 0
    records = third.records()
    assert [r["seq"] for r in records] == list(range(len(records)))
    spans: dict[str, int] = {}
    for r in records:
        for svc, n in r["report"]["green_summary"]["per_service_requests"].items():
            spans[svc] = spans.get(svc, 0) + n
    assert spans == {"before": before.acked_spans, "behind": 20}
    # recorded, not silent: the replayed window began before the archive head ended
    (replayed,) = [r["report"] for r in records
                   if "behind" in r["report"]["green_summary"]["per_service_requests"]]
    assert replayed["counters"]["clock_behind_archive"] == 1
    assert rfc3339_to_ns(replayed["window"]["start"]) < rfc3339_to_ns(head["end"])
    assert "behind the archive head" in "".join(third.stderr_text())
    assert "behind the archive head" in "".join(behind.stderr_text())
