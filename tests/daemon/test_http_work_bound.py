"""The HTTP path's concurrent work is bounded like gRPC's (issue 19 item 4), and no thread is
held through the fsync by default: with ``http_workers = 0`` an export is decoded, scored and
queued for the WAL on the event loop, then waits for its group commit holding only its
admission (``queue_size`` admitted, past it 429), answered by the pipeline's committer once the
commit made it durable (``ExportHandler.export_later``). ``http_workers = N`` runs exports in N
threads that each wait through their commit (the model before).

Seen from outside through the group commit: with a slow disk (``wal_fsync_delay_ms``) four
concurrent exports with one export thread need a commit each (4 fsyncs), on the loop they share
commits; with ``queue_size = 2`` two of four concurrent exports are refused with 429 while the
first two wait for their commit; and the loop answers ``/healthz`` while exports wait."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import orjson

from agent.daemon_config import AgentSettings
from agent.server_http import http_limits


def _body(k: int) -> bytes:
    span = {"traceId": f"{k + 1:032x}", "spanId": f"{k + 1:016x}", "name": "GET /", "kind": 2,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000001000000"}
    return orjson.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "bound"}}]},
        "scopeSpans": [{"spans": [span]}]}]})


def _post(agent, k: int, body: bytes | None = None, headers: dict | None = None) -> int:
    req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=body or _body(k),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _four_concurrent_exports(agent) -> tuple[list[int], float]:
    """The status of each of four concurrent exports, and the WAL commits they took."""
    before = agent.metric("carbonspan_wal_fsyncs_total")
    codes: list[int] = []

    def post(k: int) -> None:
        req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=_body(k),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                codes.append(resp.status)
        except urllib.error.HTTPError as exc:
            codes.append(exc.code)
            assert exc.headers["Retry-After"] == "1"

    threads = [threading.Thread(target=post, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return sorted(codes), agent.metric("carbonspan_wal_fsyncs_total") - before


def test_exports_on_the_loop_share_commits_and_one_thread_does_not(start_agent) -> None:
    slow = {"CARBONSPAN_ARCHIVE_WAL_FSYNC_DELAY_MS": "600"}
    one = start_agent("--window-seconds", "60", env={**slow, "CARBONSPAN_HTTP_WORKERS": "1"})
    codes, fsyncs = _four_concurrent_exports(one)
    assert codes == [200] * 4
    assert fsyncs == 4  # one thread, each export holding it through its fsync: a commit each
    loop = start_agent("--window-seconds", "60", env=slow)  # the default, http_workers = 0
    codes, fsyncs = _four_concurrent_exports(loop)
    assert codes == [200] * 4
    assert fsyncs < 4  # queued during the first sync, they shared the next
    assert loop.metric("carbonspan_spans_accepted_total") == 4
    assert one.stop() == 0 and loop.stop() == 0


def test_the_loop_answers_health_while_exports_wait_for_their_commit(start_agent) -> None:
    agent = start_agent("--window-seconds", "60",
                        env={"CARBONSPAN_ARCHIVE_WAL_FSYNC_DELAY_MS": "1500"})
    done: list[int] = []
    threads = [threading.Thread(target=lambda k=k: done.append(_post(agent, k))) for k in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # both queued on the loop, their commit 1.5 s away
    with urllib.request.urlopen(f"{agent.http_url}/healthz", timeout=30) as resp:
        assert resp.status == 200
    assert done == []  # answered while the exports still waited for their commit
    for t in threads:
        t.join(30)
    assert sorted(done) == [200, 200]
    assert agent.stop() == 0


def test_the_loop_never_waits_for_a_window_close_on_a_frozen_disk(start_agent, tmp_path) -> None:
    """The disk freezes with an export waiting for its commit, and the window (1 s) closes:
    the close holds the pipeline's lock until the export's 4 s are up. Meanwhile the loop
    answers /healthz and hands the next export to a thread (counted ``pipeline_busy``)
    instead of waiting for the lock; when the disk thaws, the next exports are accepted."""
    from agent.pipeline import COMMIT_WAIT_S

    stall = tmp_path / "wal.stall"
    agent = start_agent("--window-seconds", "1",
                        env={"CARBONSPAN_ARCHIVE_WAL_STALL_FILE": str(stall)})
    stall.touch()
    done: list[int] = []
    first = threading.Thread(target=lambda: done.append(_post(agent, 0)))
    first.start()
    time.sleep(1.6)  # the window's close has begun: it waits for the first export's commit
    second = threading.Thread(target=lambda: done.append(_post(agent, 1)))
    second.start()
    agent.wait_for(lambda: agent.metric("carbonspan_http_exports_handed_off_total",
                                        reason="pipeline_busy") == 1,
                   timeout=COMMIT_WAIT_S, what="the second export to be handed off")
    with urllib.request.urlopen(f"{agent.http_url}/healthz", timeout=30) as resp:
        assert resp.status == 200
    assert done == []  # all of this while the close still held the lock
    first.join(30)
    stall.unlink()
    second.join(30)
    assert done[0] == 503  # the first: not durable within COMMIT_WAIT_S
    assert _post(agent, 2) == 200
    assert agent.stop() == 0


def test_what_the_loop_does_not_decode_goes_to_a_thread_and_is_accepted(start_agent) -> None:
    """A JSON body the C walker leaves to the Python walk (snake_case names), a gzip body
    (inflated on the loop) and one larger than 1 MiB on the wire: all accepted, the hand-offs
    counted by reason."""
    import gzip

    agent = start_agent("--window-seconds", "60")
    snake = _body(0).replace(b"resourceSpans", b"resource_spans").replace(
        b"scopeSpans", b"scope_spans")
    assert _post(agent, 0, snake) == 200
    assert _post(agent, 1, gzip.compress(_body(1)), {"Content-Encoding": "gzip"}) == 200
    spans = [{"traceId": f"{k + 10:032x}", "spanId": f"{k + 1:016x}", "name": "GET /" + "x" * 200,
              "kind": 2, "startTimeUnixNano": "1700000000000000000",
              "endTimeUnixNano": "1700000000001000000"} for k in range(4000)]
    large = orjson.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "bound"}}]},
        "scopeSpans": [{"spans": spans}]}]})
    assert len(large) > 1 << 20
    assert _post(agent, 2, large) == 200
    assert agent.metric("carbonspan_spans_accepted_total") == 2 + 4000
    assert agent.metric("carbonspan_http_exports_handed_off_total", reason="python_walk") == 1
    assert agent.metric("carbonspan_http_exports_handed_off_total", reason="large") == 1
    assert agent.stop() == 0


def test_exports_waiting_for_their_commit_keep_their_admission(start_agent) -> None:
    slow = {"CARBONSPAN_ARCHIVE_WAL_FSYNC_DELAY_MS": "1500", "CARBONSPAN_QUEUE_SIZE": "2"}
    agent = start_agent("--window-seconds", "60", env=slow)
    codes, _ = _four_concurrent_exports(agent)
    assert codes == [200, 200, 429, 429]  # two admitted, waiting for the slow commit
    assert agent.metric("carbonspan_spans_accepted_total") == 2
    assert agent.stop() == 0


def test_the_agents_http_limits_admit_queue_size_and_run_http_workers() -> None:
    limits = http_limits(AgentSettings(queue_size=32, http_workers=3))
    assert (limits.workers, limits.work_threads) == (32, 3)
    limits = http_limits(AgentSettings(queue_size=32))  # the default: exports on the loop
    assert (limits.workers, limits.work_threads) == (32, -1)
