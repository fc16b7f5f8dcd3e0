"""Day rotation through a real agent whose clock crosses UTC midnight.

The agent runs with libfaketime preloaded (the PyPI package ``libfaketime`` ships the library):
its wall clock starts a few seconds before 2026-12-01T00:00:00Z and then ticks at the real
rate, in every thread (gRPC's included), while its monotonic clock stays real. The test process
keeps the real clock and sends spans with the OpenTelemetry SDK's OTLP/gRPC exporter until the
agent has archived windows on both sides of midnight, stops the agent cleanly and checks the
archive: one file per UTC day, each line in the file of the day it was sealed (``ts``, the
time the writer rotates by), one hash chain across both files, and every acknowledged span
archived exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import libfaketime
import orjson
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from agent.archive import read_lines, window_files
from schema.archive import AGENT_FILE_RE

MIDNIGHT = datetime(2026, 12, 1, tzinfo=UTC)
BEFORE, AFTER = "20261130", "20261201"
CONFIG = "[agent]\nwindow_seconds = 0.5\n"  # windows close every half second
# fake seconds from the agent's start to midnight: enough for it to start and archive a window
# first on an idle machine; a slow start is detected and retried once with the longer lead
LEADS_S = (6.0, 15.0)
DEADLINE_S = 20.0  # real seconds to reach two windows past midnight, per attempt


def faketime_env(start: datetime) -> dict[str, str]:
    """Environment that preloads libfaketime with the wall clock starting at ``start``.

    ``get_reload_information`` gives the package's own settings: LD_PRELOAD of its bundled
    ``libfaketime.so.1`` (found through LD_LIBRARY_PATH), DONT_FAKE_MONOTONIC=1 (timeouts and
    gRPC's timers stay real) and FAKETIME_NO_CACHE=1 (every clock read is computed afresh).
    """
    _, env = libfaketime.get_reload_information()
    env = dict(env)
    if os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] += os.pathsep + os.environ["LD_LIBRARY_PATH"]
    env["FAKETIME"] = "@" + start.strftime("%Y-%m-%d %H:%M:%S")  # start there, then tick
    return env


class Client:
    """One service's traces (a SERVER span with a database CLIENT child) through the SDK's
    OTLP/gRPC exporter, one export per span; ``recording`` keeps the acknowledgements."""

    def __init__(self, target: str, recording: type) -> None:
        self.exporter = recording(OTLPSpanExporter(endpoint=target, insecure=True, timeout=10))
        self.provider = TracerProvider(resource=Resource.create(
            {"service.name": "checkout", "cloud.region": "eu-west-3"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("carbonspan-test")
        self.traces = 0

    def send_trace(self) -> None:
        with self.tracer.start_as_current_span("GET /cart", kind=SpanKind.SERVER):
            with self.tracer.start_as_current_span("SELECT cart", kind=SpanKind.CLIENT) as s:
                s.set_attribute("db.system", "postgresql")
                s.set_attribute("db.statement", "SELECT * FROM cart WHERE id = 1")
        self.traces += 1

    def close(self) -> None:
        self.provider.shutdown()


def day_files(agent) -> dict[str, int]:
    """UTC day of each window file -> lines in it so far."""
    out: dict[str, int] = {}
    for path in window_files(agent.dir):
        m = AGENT_FILE_RE.match(path.name)
        assert m is not None
        out[m.group(1)] = out.get(m.group(1), 0) + len(read_lines(path))
    return out


def cross_midnight(start_agent, recording, lead_s: float):
    """Start an agent ``lead_s`` fake seconds before midnight and send one trace per window
    until two windows after midnight are archived. None if the agent started too slowly to
    archive a window before midnight (then it has been stopped)."""
    agent = start_agent(config=CONFIG, env=faketime_env(MIDNIGHT - timedelta(seconds=lead_s)))
    client = Client(agent.grpc_target, recording)
    deadline = time.monotonic() + DEADLINE_S
    written = 0
    try:
        while day_files(agent).get(AFTER, 0) < 2:
            assert time.monotonic() < deadline, f"no two windows after midnight: {day_files(agent)}"
            client.send_trace()
            # the trace is acknowledged (fsynced in the WAL) by now; its window line follows
            # within window_seconds: wait for it, so that every window holds spans
            agent.wait_for(
                lambda n=written: agent.metric("carbonspan_windows_written_total") > n,
                timeout=10, what="the window holding the trace to be archived")
            if written == 0 and BEFORE not in day_files(agent):
                break  # midnight passed before the first window: retry with a longer lead
            written = int(agent.metric("carbonspan_windows_written_total"))
        else:
            client.send_trace()  # and spans still open in the window at shutdown
    finally:
        client.close()
    assert agent.stop() == 0, "".join(agent.stderr_text())
    return (agent, client) if written else None


def test_running_agent_rotates_its_archive_at_utc_midnight(start_agent, recording) -> None:
    for lead_s in LEADS_S:
        outcome = cross_midnight(start_agent, recording, lead_s)
        if outcome is not None:
            break
    else:
        raise AssertionError(f"the agent never archived a window before midnight: leads {LEADS_S}")
    agent, client = outcome
    files = window_files(agent.dir)
    # one file per UTC day, the counter going on across the day change
    assert [f.name for f in files] == [f"windows-{BEFORE}-000001.jsonl",
                                       f"windows-{AFTER}-000002.jsonl"], files
    records: list[dict] = []
    for path in files:
        file_day = AGENT_FILE_RE.match(path.name).group(1)
        lines = [orjson.loads(raw) for raw in read_lines(path)]
        assert lines, f"{path.name} is empty"
        for rec in lines:
            # the writer picks the file by the time the line is sealed with (ts), in UTC
            sealed = datetime.fromisoformat(rec["ts"].replace("Z", "+00:00"))
            assert sealed.strftime("%Y%m%d") == file_day, (path.name, rec["ts"])
            assert (sealed < MIDNIGHT) == (file_day == BEFORE)
            window = rec["report"]["window"]
            assert window["start"] <= window["end"] <= rec["ts"], (path.name, window, rec["ts"])
        records += lines
    # the chain runs on across the files: seq without a gap, the new file's first prev is the
    # old file's last hash (carbonspan verify below recomputes every hash)
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert all(b["prev"] == a["hash"] for a, b in zip(records, records[1:], strict=False))
    out = subprocess.run([sys.executable, "-m", "carbonspan", "verify", str(agent.root)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"chain {agent.agent_id}: {len(records)} records" in out.stdout
    assert "OK: 2 files" in out.stdout
    # nothing acknowledged is lost or counted twice, on either side of midnight
    assert all(r.name == "SUCCESS" for r in client.exporter.results)
    assert client.exporter.acked_spans == 2 * client.traces
    reports = [r["report"] for r in records]
    assert sum(r["window"]["spans"] for r in reports) == client.exporter.acked_spans
    assert sum(r["window"]["io_ops"] for r in reports) == client.traces
    assert sum(r["green_summary"]["per_service_requests"]["checkout"] for r in reports) \
        == client.traces
