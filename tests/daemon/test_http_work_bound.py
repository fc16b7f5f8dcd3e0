"""The HTTP path's concurrent work is bounded like gRPC's (issue 19 item 4): ``http_workers``
threads decode, score and wait for the WAL's group commit, the other admitted requests wait
for one of them (``queue_size`` admitted, past it 429).

Seen from outside through the group commit: with a slow disk (``wal_fsync_delay_ms``) four
concurrent exports handled one at a time each need a commit of their own (4 fsyncs), while
handled together they share them (the first commits alone, the three that came during its
sync share the next). The default (64) is one thread per admitted request: fewer measured
slower (docs/operations.md, HTTP connections)."""

from __future__ import annotations

import threading
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


def _fsyncs_for_four_concurrent_exports(agent) -> float:
    before = agent.metric("carbonspan_wal_fsyncs_total")
    codes: list[int] = []

    def post(k: int) -> None:
        req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=_body(k),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            codes.append(resp.status)

    threads = [threading.Thread(target=post, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert codes == [200] * 4
    return agent.metric("carbonspan_wal_fsyncs_total") - before


def test_http_workers_bound_the_exports_handled_at_once(start_agent) -> None:
    slow = {"CARBONSPAN_ARCHIVE_WAL_FSYNC_DELAY_MS": "600"}
    one = start_agent("--window-seconds", "60", env={**slow, "CARBONSPAN_HTTP_WORKERS": "1"})
    assert _fsyncs_for_four_concurrent_exports(one) == 4  # one at a time: a commit each
    many = start_agent("--window-seconds", "60", env=slow)  # the default, 64
    assert _fsyncs_for_four_concurrent_exports(many) < 4  # together: they shared commits
    assert one.stop() == 0 and many.stop() == 0


def test_the_agents_http_limits_admit_queue_size_and_run_http_workers() -> None:
    limits = http_limits(AgentSettings(queue_size=32, http_workers=3))
    assert (limits.workers, limits.work_threads) == (32, 3)
