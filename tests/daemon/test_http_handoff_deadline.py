"""An OTLP/HTTP export that waits for a thread is answered within COMMIT_WAIT_S of its arrival,
counted only if it is acknowledged (a real agent, real HTTP requests).

Bodies over 1 MiB are exported by 4 threads of the agent's own, which wait through their
commit; on a slow disk (the testing-only ``wal_fsync_delay_ms``: 1 s per group commit) the
others wait for a thread. Before the fix every one of them was exported however long it had
waited, so those answered after their client's timeout (here 6.5 s; the Collector's default
is 5 s) were archived although the client saw a failure and would send them again. Now a
request not durable within COMMIT_WAIT_S of its hand-off is refused with 503 and nothing
counted, in time for its client to hear it.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections import Counter

import pytest

from bench.workload import make_request_bytes

SPANS = 4096  # 1.4 MB of protobuf: over the loop's 1 MiB, so handed to a thread


@pytest.mark.parametrize("http_workers", ["0", "4"], ids=["loop-hand-off", "4-threads"])
def test_handed_off_exports_are_answered_in_time_and_counted_only_when_acknowledged(
        start_agent, http_workers: str) -> None:
    """``http_workers = 0`` (the default): the loop hands the large bodies to its 4 threads;
    ``4``: every export waits in the server's queue for one of 4 threads. Either way the wait
    counts from the request's arrival."""
    agent = start_agent("--window-seconds", "600",
                        env={"CARBONSPAN_ARCHIVE_WAL_FSYNC_DELAY_MS": "1000",
                             "CARBONSPAN_HTTP_WORKERS": http_workers})
    bodies = [make_request_bytes(SPANS, seed=i) for i in range(24)]
    assert all(len(b) > 1 << 20 for b in bodies)
    outcomes: list[str] = []
    lock = threading.Lock()

    def post(body: bytes) -> None:
        req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=body, method="POST",
                                     headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(req, timeout=6.5) as resp:
                code = str(resp.status)
        except urllib.error.HTTPError as exc:
            code = str(exc.code)
        except OSError:  # the client's timeout: it gave up, and would send the batch again
            code = "timeout"
        with lock:
            outcomes.append(code)

    threads = [threading.Thread(target=post, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    got = Counter(outcomes)
    assert sum(got.values()) == len(bodies)
    assert got["timeout"] == 0, got  # every client heard its answer
    assert 0 < got["200"] < len(bodies), got  # the disk was slow enough for some to be refused
    if http_workers == "0":
        assert agent.metric("carbonspan_http_exports_handed_off_total",
                            reason="large") == len(bodies)
    assert agent.stop() == 0
    archived = sum(r["report"]["window"]["spans"] for r in agent.records())
    assert archived == SPANS * got["200"], got  # nothing counted that its client will resend
