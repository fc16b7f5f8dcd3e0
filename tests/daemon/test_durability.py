"""Nothing acknowledged is lost: kill -9 part-way, restart, stop cleanly, count; lock; torn tail."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc

from agent.archive import window_files
from bench.workload import make_request_bytes
from schema.chain import verify_chain

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SPANS_PER_REQUEST = 64


def _export_fn(target: str):
    channel = grpc.insecure_channel(target)
    return channel, channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)


def _check_chain(agent) -> list[dict]:
    records = agent.records()
    findings, _, count = verify_chain((str(i), r) for i, r in enumerate(records))
    assert findings == [], findings
    assert [r["seq"] for r in records] == list(range(count))
    return records


def _archived_spans(records: list[dict]) -> int:
    return sum(r["report"]["window"]["spans"] for r in records)


def test_kill9_between_acks_loses_nothing(start_agent) -> None:
    """Client-side count of acknowledged spans == archived spans after kill -9 and restart."""
    agent = start_agent("--window-seconds", "60")  # nothing archived before the kill: WAL only
    bodies = [make_request_bytes(SPANS_PER_REQUEST, seed=s) for s in range(8)]
    acked = 0
    channel, export = _export_fn(agent.grpc_target)
    for i in range(40):
        export(bodies[i % len(bodies)], timeout=10)
        acked += SPANS_PER_REQUEST
    channel.close()
    agent.kill9()  # no request in flight: every span sent was acknowledged
    assert not window_files(agent.dir)
    again = start_agent("--window-seconds", "60", root=agent.root)
    assert "40 partials replayed" in again.startup_line
    channel, export = _export_fn(again.grpc_target)
    for i in range(5):
        export(bodies[i], timeout=10)
        acked += SPANS_PER_REQUEST
    channel.close()
    assert again.stop(signal.SIGTERM) == 0
    records = _check_chain(again)
    assert _archived_spans(records) == acked == 45 * SPANS_PER_REQUEST
    assert (again.dir / "agent.wal").stat().st_size == 0


def test_kill9_with_the_sdk_exporter_loses_nothing_it_acknowledged(start_agent, recording) -> None:
    """The same with the OpenTelemetry SDK's gRPC exporter as the client, killed after 25 OKs."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.trace import SpanKind

    def send(agent, n: int, kill_after: int | None = None):
        def after(result, count: int) -> None:
            if count == kill_after:
                agent.kill9()  # right after the 25th acknowledgement: nothing in flight

        rec = recording(OTLPSpanExporter(endpoint=agent.grpc_target, insecure=True, timeout=1),
                        after)
        provider = TracerProvider(resource=Resource.create({"service.name": "durable",
                                                            "cloud.region": "eu-west-3"}))
        provider.add_span_processor(SimpleSpanProcessor(rec))
        tracer = provider.get_tracer("t")
        for _ in range(n):
            with tracer.start_as_current_span("GET /", kind=SpanKind.SERVER):
                pass
        provider.shutdown()
        return rec

    agent = start_agent("--window-seconds", "60")
    first = send(agent, 26, kill_after=25)
    assert first.results == [SpanExportResult.SUCCESS] * 25 + [SpanExportResult.FAILURE]
    # the sequence exactly: restart, stop cleanly, archived = acknowledged, chain intact
    restarted = start_agent("--window-seconds", "60", root=agent.root)
    assert "25 partials replayed" in restarted.startup_line
    assert restarted.stop() == 0
    records = _check_chain(restarted)
    assert _archived_spans(records) == first.acked_spans == 25
    # and the chain goes on: one more life with more spans
    again = start_agent("--window-seconds", "60", root=agent.root)
    second = send(again, 5)
    assert again.stop() == 0
    acked = first.acked_spans + second.acked_spans
    assert acked == 30
    records = _check_chain(again)
    assert sum(r["report"]["green_summary"]["per_service_requests"].get("durable", 0)
               for r in records) == acked == _archived_spans(records)


def test_kill9_under_concurrent_load(start_agent) -> None:
    """Concurrent clients, short windows, kill -9 at an arbitrary moment.

    Every acknowledged span is archived. A request in flight at the kill may or may not have
    reached the WAL (it was never acknowledged, so the client retries it): archived spans lie
    between acknowledged and acknowledged + in flight.
    """
    agent = start_agent("--window-seconds", "0.3")
    bodies = [make_request_bytes(SPANS_PER_REQUEST, seed=s) for s in range(8)]
    lock = threading.Lock()
    acked = [0]
    failed = [0]
    enough = threading.Event()

    def client(k: int) -> None:
        channel, export = _export_fn(agent.grpc_target)
        for i in range(100_000):  # until the kill
            try:
                export(bodies[(i + k) % len(bodies)], timeout=10)
            except grpc.RpcError:
                with lock:
                    failed[0] += SPANS_PER_REQUEST
                break
            with lock:
                acked[0] += SPANS_PER_REQUEST
                if acked[0] >= 150 * SPANS_PER_REQUEST:
                    enough.set()
        channel.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    assert enough.wait(60)
    agent.wait_for(lambda: window_files(agent.dir), timeout=20, what="a first archived window")
    agent.kill9()
    for t in threads:
        t.join(timeout=30)
    again = start_agent("--window-seconds", "60", root=agent.root)
    assert again.stop(signal.SIGTERM) == 0
    archived = _archived_spans(_check_chain(again))
    assert acked[0] <= archived <= acked[0] + failed[0]


def test_second_agent_on_same_directory_names_the_holder(start_agent) -> None:
    first = start_agent()
    second = start_agent(root=first.root, ready=False)
    assert second.proc.wait(timeout=30) == 1
    err = "".join(second.stderr_text())
    assert f"locked by process {first.proc.pid}" in err and "--archive-dir" in err
    assert first.proc.poll() is None  # the holder keeps running
    assert first.stop() == 0


def test_torn_tail_from_a_crash_is_moved_aside_on_restart(start_agent) -> None:
    agent = start_agent("--window-seconds", "60")
    channel, export = _export_fn(agent.grpc_target)
    export(make_request_bytes(SPANS_PER_REQUEST, seed=1), timeout=10)
    channel.close()
    assert agent.stop() == 0
    path = window_files(agent.dir)[-1]
    good = path.read_bytes()
    torn = good[: len(good) // 2]  # half of a line, as a crash mid-write would leave
    path.write_bytes(good + torn)
    again = start_agent("--window-seconds", "60", root=agent.root)
    channel, export = _export_fn(again.grpc_target)
    export(make_request_bytes(SPANS_PER_REQUEST, seed=2), timeout=10)
    channel.close()
    assert again.stop() == 0
    corrupt = list(again.dir.glob("*.corrupt"))
    assert len(corrupt) == 1 and corrupt[0].read_bytes() == torn
    records = _check_chain(again)
    assert len(records) == 2 and _archived_spans(records) == 2 * SPANS_PER_REQUEST
    assert "moved to" in "".join(again.stderr_text())


def test_stop_with_no_spans_writes_nothing_and_sigint_exits_zero(start_agent) -> None:
    agent = start_agent("--window-seconds", "0.2")
    assert agent.stop(signal.SIGINT) == 0
    assert window_files(agent.dir) == []


def test_cli_reports_config_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[agent]\ngrpc_port = 'x'\n")
    out = subprocess.run([sys.executable, "-m", "carbonspan", "agent", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 2
    assert "[agent] grpc_port = 'x': expected a non-negative integer" in out.stderr


def test_port_in_use_fails_with_exit_1_and_releases_the_lock(start_agent) -> None:
    import socket

    for flag in ("--http-port", "--grpc-port"):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            agent = start_agent(flag, str(port), ready=False)
            assert agent.proc.wait(timeout=30) == 1
        err = "".join(agent.stderr_text())
        assert "cannot start" in err and f"127.0.0.1:{port}" in err and "in use" in err, err
        again = start_agent(root=agent.root)  # the lock was released on the way out
        assert again.stop() == 0
