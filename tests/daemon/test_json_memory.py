"""The Python JSON walk is memory-bounded (issue 12 item 6).

The C walker leaves snake_case OTLP/JSON (legal: the spec's JSON mapping accepts the proto
field names) to ``agent.otlp.jsonfmt``'s Python walk, whose orjson objects cost about eight
times the body: twelve concurrent 15.5 MB snake_case bodies, each under ``max_request_bytes``,
took an agent to 1,314 MB. Walks now share a budget of body bytes (``WALK_BUDGET``, 16 MiB),
so concurrent large bodies take turns. Measured by the peak RSS (VmHWM) of a real agent.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

from agent.otlp.jsonfast import decode_json_fast
from agent.otlp.jsonfmt import WALK_BUDGET

BODY_BYTES = 15_000_000
CONCURRENT = 8


def _snake_case_body(size: int) -> tuple[bytes, int]:
    span = {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331",
            "name": "GET /snake", "kind": 2, "start_time_unix_nano": "1764496800000000000",
            "end_time_unix_nano": "1764496800000001000",
            "attributes": [{"key": "http.route", "value": {"string_value": "/snake"}}]}
    n = (size - 200) // (len(json.dumps(span)) + 2)
    doc = {"resource_spans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"string_value": "snake"}}]},
        "scope_spans": [{"spans": [span] * n}]}]}
    return json.dumps(doc).encode(), n


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM")) / 1024


def test_concurrent_snake_case_bodies_take_turns_in_the_python_walk(start_agent) -> None:
    body, spans = _snake_case_body(BODY_BYTES)
    assert len(body) <= BODY_BYTES and decode_json_fast(body) is None  # the Python walk's
    assert WALK_BUDGET.limit < 2 * len(body)  # so two of them cannot walk at once
    agent = start_agent("--window-seconds", "600")
    before = _peak_rss_mb(agent.proc.pid)
    statuses: list[int] = []
    retried: list[int] = []
    go = threading.Barrier(CONCURRENT)

    def post() -> None:
        """As an OTLP exporter does: a 503 (an export that waited for a thread past
        COMMIT_WAIT_S from its arrival is refused, nothing counted) is retried after the
        Retry-After the agent gives."""
        req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=body,
                                     headers={"Content-Type": "application/json"})
        go.wait(timeout=30)
        for _ in range(40):
            try:
                with urllib.request.urlopen(req, timeout=120) as resp:
                    statuses.append(resp.status)
                    return
            except urllib.error.HTTPError as err:
                if err.code != 503:
                    statuses.append(err.code)
                    return
                retried.append(1)
                time.sleep(float(err.headers.get("Retry-After", "1")))
        statuses.append(503)

    threads = [threading.Thread(target=post) for _ in range(CONCURRENT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert statuses == [200] * CONCURRENT
    grew = _peak_rss_mb(agent.proc.pid) - before
    # the bodies themselves (8 x 15 MB, held while they wait) plus one walk (~8x a body);
    # before the budget, eight walks at once: about 8 x 8 x 15 MB
    assert grew < 400, f"peak RSS grew {grew:.0f} MB"
    # each body walked once, or more when its walk ended past its answer time and it was
    # refused and sent again; a refusal at a thread's start walks nothing
    assert agent.metric("carbonspan_json_python_walks_total") >= CONCURRENT
    assert agent.metric("carbonspan_json_python_walks_total", waited="true") >= 1
    assert agent.metric("carbonspan_spans_accepted_total") == CONCURRENT * spans
    assert agent.stop() == 0


def test_a_walk_that_would_wait_past_its_answer_time_is_not_walked() -> None:
    """An export waiting for a thread must be answered within COMMIT_WAIT_S of its arrival;
    one still waiting for the walk budget then is refused before its walk (WalkExpired, the
    'deadline' outcome), not walked only to be refused after the work. Without a deadline
    the wait is as long as the walks ahead of it."""
    from agent.otlp.jsonfmt import WalkBudget, WalkExpired

    budget = WalkBudget(100)
    walks: list[bool] = []
    budget.on_walk = walks.append
    release = threading.Event()
    holding = threading.Event()

    def walker() -> None:
        with budget.hold(80):
            holding.set()
            release.wait(10)

    t = threading.Thread(target=walker)
    t.start()
    assert holding.wait(10)
    t0 = time.monotonic()
    try:
        with budget.hold(50, deadline=time.monotonic() + 0.2):
            raise AssertionError("walked although no room came before its deadline")
    except WalkExpired:
        pass
    assert 0.15 <= time.monotonic() - t0 < 5 and budget.held == 80 and walks == [False]
    with budget.hold(20, deadline=time.monotonic()):  # room now: walked, whatever the deadline
        pass
    threading.Timer(0.2, release.set).start()
    with budget.hold(50):  # no deadline: waits for the walk ahead
        assert budget.held == 50
    t.join(10)
    assert walks == [False, False, True]
