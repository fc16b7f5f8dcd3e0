"""``carbonspan agent --workers N`` (agent/workers.py): N real agent processes sharing the gRPC
and HTTP ports with SO_REUSEPORT, one WAL and one chain each, under a supervisor.

The proof the issue asks for: a real ``--workers 2`` agent on kernel-picked ports, spans sent
with the OpenTelemetry SDK's own OTLP exporters over gRPC and over HTTP (a new connection per
exporter, so the kernel spreads them over both workers), a clean stop, then ``carbonspan
aggregate`` and ``carbonspan verify`` over the archive root: per-service and total requests
equal what was sent, the archived spans equal the spans sent, both workers' chains hold spans
and verify. Then supervision: a worker killed with SIGKILL is reported and restarted on its
chain and loses nothing it acknowledged; the supervisor's own death stops the workers; health,
readiness and metrics say which worker answered; the refusals (signing, an orphaned WAL).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from agent_process import wait_for
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from agent.archive import read_records
from agent.daemon_config import AgentSettings, SigningSettings
from agent.workers import MAX_AUTO, usable_cores, worker_count

REPO = Path(__file__).resolve().parents[2]
CHAINS = ("test-agent-w0", "test-agent-w1")


def send(recording, make_exporter, service: str, requests: int) -> int:
    """``requests`` SERVER spans, each with a SQL client child, from ``service`` through one
    new exporter (one new connection); the spans the agent acknowledged."""
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "cloud.region": "eu-west-1"}))
    exporter = recording(make_exporter())
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=16))
    tracer = provider.get_tracer("carbonspan-test")
    for i in range(requests):
        with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
            with tracer.start_as_current_span("SELECT orders", kind=SpanKind.CLIENT) as s:
                s.set_attribute("db.system", "postgresql")
                s.set_attribute("db.statement", f"SELECT * FROM orders WHERE id = {i}")
    assert provider.force_flush(20_000)
    provider.shutdown()
    assert [r.name for r in exporter.results] and {r.name for r in exporter.results} == {"SUCCESS"}
    return exporter.acked_spans


def chain_spans(root: Path) -> dict[str, int]:
    out = {}
    for name in CHAINS:
        recs = read_records(root / name)
        assert all(rec is not None for _, rec in recs), f"unreadable line in {name}"
        out[name] = sum(rec["report"]["window"]["spans"] for _, rec in recs)
    return out


def worker_pids(agent) -> dict[int, int]:
    """worker index -> pid, from the workers' ready lines (the latest life of each)."""
    out = {}
    for line in agent.stdout_text().splitlines():
        m = re.search(r"worker (\d+)/\d+ \(pid (\d+)\) ready", line)
        if m:
            out[int(m.group(1))] = int(m.group(2))
    return out


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "carbonspan", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_two_workers_share_both_ports_and_aggregate_and_verify_add_up(start_agent, recording,
                                                                      tmp_path) -> None:
    agent = start_agent("--workers", "2", "--window-seconds", "1")
    assert re.search(r"carbonspan agent test-agent: 2 workers \(as configured", agent.startup_line)
    requests, acked = Counter(), 0
    for i in range(8):  # a new exporter, so a new connection, per service and transport
        acked += send(recording, lambda: GrpcExporter(endpoint=agent.grpc_target, insecure=True),
                      f"grpc-{i}", 6)
        requests[f"grpc-{i}"] += 6
        acked += send(recording, lambda: HttpExporter(endpoint=f"{agent.http_url}/v1/traces"),
                      f"http-{i}", 5)
        requests[f"http-{i}"] += 5
    sent_spans = 2 * sum(requests.values())
    assert acked == sent_spans
    assert agent.stop() == 0
    out = agent.stdout_text()
    assert "test-agent-w0: stopped cleanly" in out and "test-agent-w1: stopped cleanly" in out
    assert "carbonspan agent test-agent: stopped cleanly (2 workers)" in out

    spans = chain_spans(agent.root)
    assert sum(spans.values()) == sent_spans, spans
    assert all(n > 0 for n in spans.values()), f"the kernel gave one worker nothing: {spans}"
    assert not (agent.root / "test-agent").exists()  # no single-agent chain beside them

    day = datetime.now(UTC).date()
    report = tmp_path / "report.json"
    agg = run_cli("aggregate", str(agent.root), "--from", str(day - timedelta(days=1)), "--to",
                  str(day + timedelta(days=1)), "--out", str(report), "--verify")
    assert agg.returncode == 0, agg.stdout + agg.stderr
    doc = json.loads(report.read_text())
    assert doc["aggregate"]["total_requests"] == sum(requests.values())
    assert {a["service_name"]: a["requests"] for a in doc["applications"]} == dict(requests)
    windows = sum(len(read_records(agent.root / name)) for name in CHAINS)
    assert doc["aggregate"]["windows"] == windows
    energy = sum(rec["report"]["green_summary"]["energy_kwh"]
                 for name in CHAINS for _, rec in read_records(agent.root / name))
    assert doc["aggregate"]["total_energy_kwh"] == pytest.approx(energy, rel=1e-9)
    verify = run_cli("verify", str(agent.root))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    for name in CHAINS:
        assert name in verify.stdout, verify.stdout


def test_health_readiness_and_metrics_name_the_worker_that_answered(start_agent) -> None:
    agent = start_agent("--workers", "2")
    seen: dict[str, str] = {}
    for _ in range(200):  # each urlopen is a new connection; the kernel picks the worker
        with urllib.request.urlopen(f"{agent.http_url}/healthz", timeout=5) as resp:
            seen[resp.headers["Carbonspan-Worker"]] = resp.read().decode()
        if len(seen) == 2:
            break
    pids = worker_pids(agent)
    assert seen == {f"{k}/2 test-agent-w{k}": f"ok (worker {k}/2, test-agent-w{k}, pid {pids[k]})\n"
                    for k in (0, 1)}
    with urllib.request.urlopen(f"{agent.http_url}/readyz", timeout=5) as resp:
        assert re.fullmatch(r"ready \(worker [01]/2, test-agent-w[01], pid \d+\)\n",
                            resp.read().decode())
    assert agent.stop() == 0


def scrape(agent) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """One GET /metrics on a new connection: the index of the worker that answered, and the
    samples by (name, sorted labels)."""
    with urllib.request.urlopen(f"{agent.http_url}/metrics", timeout=5) as resp:
        who = resp.headers["Carbonspan-Worker"].split("/")[0]
        text = resp.read().decode()
    return who, {(s.name, tuple(sorted(s.labels.items()))): s.value
                 for family in text_string_to_metric_families(text) for s in family.samples}


def by_worker(samples: dict, name: str, **labels: str) -> dict[str, float]:
    """``name``'s value per ``worker`` label, among the samples with these other labels."""
    out = {}
    for (n, lab), v in samples.items():
        d = dict(lab)
        if n == name and all(d.get(k) == w for k, w in labels.items()):
            out[d["worker"]] = v
    return out


def from_both_workers(answer, timeout: float, what: str) -> dict[str, object]:
    """``answer()`` gives (worker index, what it answered) once the answer is whole, else None;
    new connections until each of the two workers has given a whole answer."""
    answers: dict[str, object] = {}
    for _ in range(200):
        who, got = wait_for(answer, timeout, what)
        answers[who] = got
        if len(answers) == 2:
            break
    assert sorted(answers) == ["0", "1"], f"the kernel gave every request to one worker ({what})"
    return answers


def test_metrics_answer_for_every_worker_whichever_takes_the_scrape(start_agent,
                                                                    recording) -> None:
    """The kernel picks the worker of each scrape's connection. Each answer holds every
    worker's figures, labelled with its worker, so a counter never jumps between two workers'
    values (Prometheus would read each fall as a reset); the sum over workers is the agent's."""
    agent = start_agent("--workers", "2")
    acked = 0
    for i in range(8):  # new connections, so both workers take spans
        acked += send(recording, lambda: GrpcExporter(endpoint=agent.grpc_target, insecure=True),
                      f"grpc-{i}", 4)
        acked += send(recording, lambda: HttpExporter(endpoint=f"{agent.http_url}/v1/traces"),
                      f"http-{i}", 3)

    def settled():  # each worker republishes its figures every second
        who, s = scrape(agent)
        got = by_worker(s, "carbonspan_spans_accepted_total")
        return (who, s) if sum(got.values()) == acked else None

    answers = from_both_workers(settled, 10, "every worker's accepted spans in one answer")
    pids = worker_pids(agent)
    for who, s in answers.items():
        accepted = by_worker(s, "carbonspan_spans_accepted_total")
        assert sorted(accepted) == ["0", "1"] and all(v > 0 for v in accepted.values()), accepted
        assert by_worker(s, "carbonspan_worker_metrics_up") == {"0": 1.0, "1": 1.0}
        ages = by_worker(s, "carbonspan_worker_metrics_age_seconds")
        assert ages[who] < 0.5 and all(0.0 <= a < 5.0 for a in ages.values()), ages
        for k in ("0", "1"):  # each worker says which it is, whichever answered
            info = ("carbonspan_worker_info", (("agent_id", f"test-agent-w{k}"), ("worker", k),
                                               ("workers", "2")))
            assert s[info] == 1.0
        assert by_worker(s, "carbonspan_worker_restarts") == {"0": 0.0, "1": 0.0}
    # the same series, the same figures, from both workers (no traffic since: nothing moved)
    assert (by_worker(answers["0"], "carbonspan_spans_accepted_total")
            == by_worker(answers["1"], "carbonspan_spans_accepted_total"))
    ok = {w: by_worker(a, "carbonspan_requests_total", protocol="grpc", outcome="ok")
          for w, a in answers.items()}
    assert ok["0"] == ok["1"], ok
    assert len(pids) == 2
    assert agent.stop() == 0
    assert sum(chain_spans(agent.root).values()) == acked
    left = [p.name for p in (agent.root / ".test-agent.metrics").iterdir()]
    assert left == ["lock"], left  # emptied at the stop (the supervisors' lock file stays)


def test_a_worker_killed_with_sigkill_is_reported_restarted_and_loses_nothing(
        start_agent, recording) -> None:
    agent = start_agent("--workers", "2", "--window-seconds", "0.5")
    acked = sum(send(recording, lambda: GrpcExporter(endpoint=agent.grpc_target, insecure=True),
                     f"before-{i}", 10) for i in range(4))
    first = worker_pids(agent)
    figures = agent.root / ".test-agent.metrics" / "metrics-w1.prom"
    assert figures.exists()
    os.kill(first[1], signal.SIGKILL)  # acknowledged spans of its open window are in its WAL
    # the supervisor removes its frozen figures once it reaps it (restarted >= 1 s later)
    wait_for(lambda: not figures.exists(), 5, "the dead worker's figures to be removed")
    agent.wait_for(lambda: worker_pids(agent).get(1, first[1]) != first[1], 30,
                   "worker 1 to be restarted")
    err = "".join(agent.stderr_text())
    assert (f"worker 1 (test-agent-w1, pid {first[1]}) was killed by SIGKILL after" in err
            and "restarting it on its chain" in err), err
    assert worker_pids(agent)[0] == first[0]  # the other worker served on
    acked += sum(send(recording, lambda: HttpExporter(endpoint=f"{agent.http_url}/v1/traces"),
                      f"after-{i}", 10) for i in range(4))
    restarted = wait_for(lambda: _metric_of_worker(agent, "1", "carbonspan_worker_restarts"),
                         30, "a connection to reach worker 1")
    assert restarted == 1.0
    assert agent.stop() == 0
    assert sum(chain_spans(agent.root).values()) == acked == 2 * 80
    verify = run_cli("verify", str(agent.root))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_the_live_page_sums_every_workers_figures_whichever_answers(start_agent,
                                                                     recording) -> None:
    """GET / from either worker shows the open windows of both, summed, and lists both workers
    with the age of their figures (each writes them while the page is being looked at)."""
    agent = start_agent("--workers", "2", "--window-seconds", "60")
    acked = 0
    for i in range(8):  # new connections, so both workers take spans
        acked += send(recording, lambda: GrpcExporter(endpoint=agent.grpc_target, insecure=True),
                      f"live-{i}", 3)

    def page() -> tuple[str, str]:
        with urllib.request.urlopen(f"{agent.http_url}/", timeout=5) as resp:
            return resp.headers["Carbonspan-Worker"].split("/")[0], resp.read().decode()

    def whole() -> tuple[str, str] | None:
        who, html = page()
        m = re.search(r"since [^:]+:\d\d:[^:]+: (\d+) spans, \d+ I/O operations, \d+ traces "
                      r"\(the open windows of (\d) worker\(s\), summed\)", html)
        return (who, html) if m and int(m.group(1)) == acked and m.group(2) == "2" else None

    pages = from_both_workers(whole, 20, "a live page summing both workers' open windows")
    for html in pages.values():
        assert "2 workers share this agent's ports; this page sums the figures of 2 of them" \
            in html, html
        for i in range(8):  # every service, whichever worker took it
            assert f"<td>live-{i}</td>" in html
        assert html.count("<td>test-agent-w") == 2  # both workers listed, with their chains
        assert "<td>this answer</td>" in html and "<td>summed</td>" in html
    assert agent.stop() == 0
    assert sum(chain_spans(agent.root).values()) == acked


def _metric_of_worker(agent, index: str, name: str) -> float | None:
    """``name``'s value for worker ``index`` in /metrics, once that worker's figures are in the
    answer (each worker answers for all; a restarted worker's appear once it has published)."""
    _, s = scrape(agent)
    if by_worker(s, "carbonspan_worker_metrics_up").get(index) != 1.0:
        return None
    return by_worker(s, name).get(index)


def test_the_supervisors_death_stops_every_worker(start_agent, recording) -> None:
    agent = start_agent("--workers", "2", "--window-seconds", "60")
    acked = sum(send(recording, lambda: GrpcExporter(endpoint=agent.grpc_target, insecure=True),
                     f"svc-{i}", 5) for i in range(4))
    pids = worker_pids(agent)
    agent.kill9()  # the supervisor only: the kernel sends each worker SIGTERM (PR_SET_PDEATHSIG)

    def gone() -> bool:
        return all(not Path(f"/proc/{pid}").exists() or "zombie" in _state(pid)
                   for pid in pids.values())

    wait_for(gone, 30, "the workers to drain and exit")
    # they drained: each archived its open window (nothing left to replay) and let go its lock
    assert sum(chain_spans(agent.root).values()) == acked
    for name in CHAINS:
        assert (agent.root / name / "agent.wal").stat().st_size == 0


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def test_workers_and_signing_are_refused_together(start_agent, tmp_path) -> None:
    key = tmp_path / "test-agent.key"
    key.write_text("unused: refused before it is read\n")
    agent = start_agent("--workers", "2", ready=False,
                        config=f"[agent.signing]\nkey_file = '{key}'\n")
    assert agent.proc.wait(timeout=60) == 2
    assert "[agent] workers = 2 with [agent.signing] key_file" in "".join(agent.stderr_text())


def test_a_chain_no_worker_of_this_run_replays_is_refused(start_agent, tmp_path) -> None:
    root = tmp_path / "archives"
    agent = start_agent("--workers", "2", root=root)
    assert agent.stop() == 0
    # a killed --workers 3 run left worker 2's WAL behind (its bytes are not read: any will do)
    (root / "test-agent-w2").mkdir()
    (root / "test-agent-w2" / "agent.wal").write_bytes(b"\0" * 64)
    again = start_agent("--workers", "2", root=root, ready=False)
    assert again.proc.wait(timeout=60) == 1
    err = "".join(again.stderr_text())
    assert f"{root / 'test-agent-w2'} holds a write-ahead log of 64 bytes" in err, err
    assert "--workers K replays" in err
    single = start_agent(root=root, ready=False)  # --workers 1 neither
    assert single.proc.wait(timeout=60) == 1


def test_the_automatic_count_follows_the_cores_and_signing() -> None:
    n, why = worker_count(AgentSettings())
    assert n == min(usable_cores(), MAX_AUTO) and why.startswith("automatic")
    assert usable_cores() <= len(os.sched_getaffinity(0))
    signed = AgentSettings(signing=SigningSettings(key_file=Path("/etc/k.key")))
    assert worker_count(signed) == (1, "automatic: 1 with [agent.signing]")
    assert worker_count(AgentSettings(workers=3)) == (3, "as configured")


def test_a_port_in_use_is_refused_by_the_supervisor_too(start_agent) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        agent = start_agent("--workers", "2", "--grpc-port", str(port), ready=False)
        assert agent.proc.wait(timeout=30) == 1
    err = "".join(agent.stderr_text())
    assert f"cannot listen for OTLP/gRPC on 127.0.0.1:{port}" in err and "in use" in err, err


def test_a_second_supervisor_of_the_agent_id_is_refused_before_it_touches_the_first(
        start_agent) -> None:
    """Another `--workers 2` of the same agent id on the same archive dir (other ports) exits 1
    saying why, and leaves the running agent's shared figures in place (it used to empty
    them before its workers failed on the archive lock)."""
    agent = start_agent("--workers", "2")
    figures = agent.root / ".test-agent.metrics" / "metrics-w0.prom"
    assert figures.exists()
    second = run_cli("agent", "--archive-dir", str(agent.root), "--agent-id", "test-agent",
                     "--workers", "2", "--grpc-port", "0", "--http-port", "0")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "is held by another carbonspan supervisor of this agent id" in second.stderr
    assert figures.exists()
    _, s = scrape(agent)
    assert by_worker(s, "carbonspan_worker_metrics_up") == {"0": 1.0, "1": 1.0}
    assert agent.stop() == 0


def test_tls_and_the_token_bind_every_worker(start_agent, tmp_path) -> None:
    import ssl

    import grpc
    from tls_cert import self_signed

    cert, key = self_signed(tmp_path)
    (tmp_path / "token").write_text("w0rkers\n")
    agent = start_agent("--workers", "2", config=(
        f'[agent.auth]\ntoken_file = "{tmp_path / "token"}"\n'
        f'[agent.tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n'))
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    for _ in range(24):  # a new channel, so a new TLS connection, each: both workers get some
        with grpc.secure_channel(agent.grpc_target, creds) as channel:
            call = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/"
                                       "Export", request_serializer=None,
                                       response_deserializer=None)
            with pytest.raises(grpc.RpcError) as info:
                call(b"", timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert call(b"", timeout=10, metadata=[("authorization", "Bearer w0rkers")]) == b""
    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{agent.http_port}"
    refused, metrics = {}, {}
    for _ in range(200):
        req = urllib.request.Request(f"{url}/v1/traces", data=b"{}", headers={
            "Content-Type": "application/json", "Authorization": "Bearer nope"})
        with pytest.raises(urllib.error.HTTPError) as http_info:
            urllib.request.urlopen(req, timeout=10, context=ctx)
        assert http_info.value.code == 401
        refused[http_info.value.headers["Carbonspan-Worker"]] = True
        with urllib.request.urlopen(f"{url}/metrics", timeout=10, context=ctx) as resp:
            metrics[resp.headers["Carbonspan-Worker"]] = resp.read().decode()
        if len(refused) == len(metrics) == 2:
            break
    assert sorted(refused) == sorted(metrics) == ["0/2 test-agent-w0", "1/2 test-agent-w1"]
    for who, text in metrics.items():  # each worker refused and accepted gRPC calls itself
        k = who.split("/")[0]
        got = {(s.labels["protocol"], s.labels["outcome"]): s.value
               for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "carbonspan_requests_total" and s.labels["worker"] == k}
        assert got.get(("grpc", "unauthenticated"), 0) > 0 and got.get(("grpc", "ok"), 0) > 0, who
    assert agent.stop() == 0


def test_a_worker_that_fails_to_start_stops_the_others_with_its_exit_code(start_agent,
                                                                          tmp_path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    agent = start_agent("--workers", "2", ready=False, config=(
        f'[agent.tls]\ncert_file = "{tmp_path / "cert.pem"}"\n'
        f'key_file = "{tmp_path / "key.pem"}"\n'))
    assert agent.proc.wait(timeout=60) == 1
    err = "".join(agent.stderr_text())
    assert "cannot be used together" in err, err  # the worker's own words, on our stderr
    assert re.search(r"worker [01] exited with code 1 before it was ready; stopping the others",
                     err), err
    assert "OTLP/gRPC" not in agent.stdout_text()  # no ports line: it never served


def test_a_worker_restarted_into_a_configuration_mistake_stops_all_with_exit_2(
        start_agent, tmp_path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[agent]\nwindow_seconds = 60\n")
    agent = start_agent("--workers", "2", "--config", str(config))
    config.write_text("[agent]\nwindow_seconds = 'soon'\n")  # edited under the running agent
    os.kill(worker_pids(agent)[0], signal.SIGKILL)
    assert agent.proc.wait(timeout=60) == 2
    err = "".join(agent.stderr_text())
    assert "window_seconds = 'soon'" in err, err
    assert re.search(r"worker 0 \(test-agent-w0, pid \d+\) exited with code 2 \(a configuration "
                     r"mistake\); stopping every worker", err), err
    assert "test-agent-w1: stopped cleanly" in agent.stdout_text()
