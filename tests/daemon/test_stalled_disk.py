"""A stalled disk is visible and costs no double count (issue 12, item 9), on a real agent.

How the stall is simulated, honestly: the testing-only setting ``[agent.archive]
wal_stall_file`` makes the WAL's group-commit thread wait before each ``fdatasync`` for as long
as that file exists (agent/wal.py). The test creates the file, so the commit of the next
request hangs as on a frozen disk, and deletes it to thaw the disk. Nothing else is faked: the
client is the OpenTelemetry SDK's OTLP/HTTP exporter with its default 10 s timeout and its own
retries, the agent a real process.

Before the fix both probes answered 200 during the freeze, the request waited 30 s for its
commit (past the client's 10 s), and its partial was merged once the record landed, so the
client's retry was counted a second time. Later the running agent counted it once, but the
abandoned record still landed in the log, and a kill -9 before its window closed replayed it
beside the retry; now it is named in ``agent.wal.void`` and the restart skips it.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind

from agent.pipeline import COMMIT_WAIT_S, STALL_READY_S


def probe(agent, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{agent.http_url}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_frozen_disk_fails_readiness_answers_in_time_and_counts_the_retry_once_even_after_kill9(
        start_agent, recording, tmp_path) -> None:
    stall = tmp_path / "wal.stall"
    agent = start_agent("--window-seconds", "600",
                        env={"CARBONSPAN_ARCHIVE_WAL_STALL_FILE": str(stall)})
    assert probe(agent, "/readyz")[0] == 200
    stall.touch()  # the disk freezes
    exporter = recording(OTLPSpanExporter(endpoint=f"{agent.http_url}/v1/traces"))  # timeout 10 s
    provider = TracerProvider(resource=Resource.create({"service.name": "frozen"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    took: list[float] = []

    def one_request() -> None:
        t0 = time.monotonic()
        with tracer.start_as_current_span("GET /", kind=SpanKind.SERVER):
            pass  # SimpleSpanProcessor exports on end, in this thread
        took.append(time.monotonic() - t0)

    client = threading.Thread(target=one_request)
    client.start()
    # readiness turns 503 once the commit has waited STALL_READY_S, and says why
    status, body = agent.wait_for(
        lambda: (r := probe(agent, "/readyz"))[0] == 503 and r, timeout=STALL_READY_S + 5,
        what="/readyz to fail during the stall")
    assert "stalled" in body and "write-ahead-log commit has waited" in body
    assert probe(agent, "/healthz")[0] == 200  # alive: a restart would not thaw the disk
    assert agent.metric("carbonspan_wal_oldest_commit_wait_seconds") >= STALL_READY_S
    # the client hears "unavailable, retry" after COMMIT_WAIT_S, well inside its 10 s timeout
    agent.wait_for(lambda: agent.metric("carbonspan_requests_total", protocol="http",
                                        outcome="unavailable") >= 1,
                   timeout=COMMIT_WAIT_S + 5, what="the stalled request to be refused")
    stall.unlink()  # the disk thaws: the abandoned record lands, and must not be merged
    client.join(timeout=15)
    provider.shutdown()
    assert exporter.results == [SpanExportResult.SUCCESS]  # the SDK's own retry got through
    assert took[0] < 10.0
    assert agent.wait_for(lambda: probe(agent, "/readyz")[0] == 200, timeout=10,
                          what="/readyz to recover")
    assert agent.metric("carbonspan_spans_accepted_total") == 1  # the retry once, live
    assert agent.metric("carbonspan_wal_records_voided_total") == 1
    # the abandoned record landed in the log when the disk thawed; a kill -9 before the window
    # closes must not bring it back beside the retry (it did: the window held 2 spans)
    agent.kill9()
    again = start_agent("--window-seconds", "600", root=agent.root)
    assert "1 partials replayed from the WAL, 1 void records skipped" in again.startup_line
    assert again.stop() == 0
    (rec,) = again.records()
    assert rec["report"]["window"]["spans"] == 1  # the retry once, the abandoned record never
    log = "".join(agent.stderr_text())
    assert f"could not make durable within {COMMIT_WAIT_S} s" in log
