"""One ``/metrics`` for all workers (agent/metrics_share.py), with real ``AgentMetrics`` and real
files: each worker's figures labelled ``worker`` whichever worker answers, and every file that
cannot be trusted (missing, stale, another run's, another worker's, a FIFO, a symlink, too big,
not Prometheus text) left out with ``carbonspan_worker_metrics_up`` 0 and a warning, the
answering worker's own figures still served. The real ``--workers 2`` agent is in
tests/daemon/test_workers.py."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import AgentMetrics
from agent.metrics_share import (
    FORMAT,
    MAX_METRICS_BYTES,
    MAX_SERIES,
    STALE_AFTER_S,
    MetricsShare,
    clear,
    forget,
    metrics_file,
)

RUN = "4242abcd"


def worker(tmp: Path, k: int, n: int, accepted: int) -> tuple[AgentMetrics, MetricsShare]:
    m = AgentMetrics()
    m.worker_on(k, n, f"a-w{k}", 0)
    m.spans_accepted.inc(accepted)
    share = m.share = MetricsShare(tmp, k, n, RUN, m.exposition,
                                   m.worker_metrics_publish_errors.inc)
    return m, share


def strict(text: bytes) -> bytes:
    """``text`` as the Prometheus text format allows it (prometheus_client's parser is lenient):
    one TYPE line per name, each family's samples together after it, no series twice, no
    sample timestamps. Returns ``text``."""
    lines = text.decode().splitlines()
    typed: set[str] = set()
    series: set[str] = set()
    current = None
    for line in lines:
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in typed, f"a second TYPE line for {name}"
            typed.add(name)
            current = name
        elif line and not line.startswith("#"):
            ident = line.rsplit(" ", 1)[0]
            value_and_more = line[len(ident):].split()
            assert len(value_and_more) == 1, f"a sample with a timestamp: {line}"
            name = ident.split("{", 1)[0]
            assert current is not None and name.startswith(current.removesuffix("_total")), \
                f"{name} outside its family (after TYPE {current})"
            assert ident not in series, f"series twice: {ident}"
            series.add(ident)
    return text


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    strict(text)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text.decode()) for s in fam.samples}


def accepted(text: bytes) -> dict[str, float]:
    return {dict(labels)["worker"]: v for (name, labels), v in samples(text).items()
            if name == "carbonspan_spans_accepted_total"}


def up(text: bytes) -> dict[str, float]:
    return {dict(labels)["worker"]: v for (name, labels), v in samples(text).items()
            if name == "carbonspan_worker_metrics_up"}


def test_every_worker_answers_for_all_each_sample_labelled_with_its_worker(tmp_path) -> None:
    clear(tmp_path)
    workers = [worker(tmp_path, k, 3, 100 * (k + 1)) for k in range(3)]
    for _, share in workers:
        share.publish()
    answers = [m.scrape() for m, _ in workers]
    for text in answers:  # whichever worker answers: the same series, the same figures
        assert accepted(text) == {"0": 100.0, "1": 200.0, "2": 300.0}
        assert up(text) == {"0": 1.0, "1": 1.0, "2": 1.0}
        s = samples(text)
        for k in range(3):
            info = ("carbonspan_worker_info", (("agent_id", f"a-w{k}"), ("worker", str(k)),
                                               ("workers", "3")))
            assert s[info] == 1.0
            assert 0.0 <= s[("carbonspan_worker_metrics_age_seconds",
                             (("worker", str(k)),))] < 60.0
    # a worker publishes before it answers, so every answer shows each worker's latest
    # published figures: a counter never falls from one answer to the next, whoever answers
    workers[0][0].spans_accepted.inc(5)
    assert accepted(workers[0][0].scrape())["0"] == 105.0
    assert accepted(workers[1][0].scrape())["0"] == 105.0


def test_counters_never_fall_between_answers_of_alternating_workers(tmp_path) -> None:
    clear(tmp_path)
    workers = [worker(tmp_path, k, 2, 0) for k in range(2)]
    for _, share in workers:
        share.publish()
    last = {"0": 0.0, "1": 0.0}
    for i in range(60):
        workers[i % 2][0].spans_accepted.inc(1 + i % 3)  # traffic on the worker answering next
        workers[(i + 1) % 2][0].spans_accepted.inc(2)  # ... and on the other, not yet published
        got = accepted(workers[i % 2][0].scrape())
        for k, v in got.items():
            assert v >= last[k], f"worker {k} fell from {last[k]} to {v} at answer {i}"
            last[k] = v
    assert last["0"] > 60 and last["1"] > 60


def test_a_single_agent_answers_its_own_figures_unlabelled() -> None:
    m = AgentMetrics()
    m.spans_accepted.inc(7)
    s = samples(m.scrape())
    assert s[("carbonspan_spans_accepted_total", ())] == 7.0
    assert not any(name.startswith("carbonspan_worker_metrics") for name, _ in s)


def _planted(tmp: Path, k: int, body: bytes, *, run: str = RUN, taken_at: float | None = None,
             claims: int | None = None) -> None:
    head = (f"# {FORMAT} worker={k if claims is None else claims} run={run} pid=1 "
            f"taken_at={time.time() if taken_at is None else taken_at:.3f}\n").encode()
    metrics_file(tmp, k).write_bytes(head + body)


def _peer_text(k: int, value: int) -> bytes:
    m = AgentMetrics()
    m.worker_on(k, 2, f"a-w{k}", 0)
    m.spans_accepted.inc(value)
    return m.exposition()


@pytest.mark.parametrize("case, why", [
    ("missing", "has no figures"),
    ("stale", "s old (over 10 s"),
    ("future", "ahead: the clock stepped back?"),
    ("other_run", "is not worker 1's of this run"),
    ("other_worker", "is not worker 1's of this run"),
    ("bad_taken_at", "does not start with a carbonspan-worker-metrics/1 header"),
    ("no_newline", "does not start with a carbonspan-worker-metrics/1 header"),
    ("empty", "does not start with a carbonspan-worker-metrics/1 header"),
    ("not_text", "do not parse as Prometheus text"),
    ("not_utf8", "is not UTF-8"),
    ("too_big", "over "),
    ("too_many_series", f"hold over {MAX_SERIES} samples"),
    ("info_type", "is of type info, which no worker exposes"),
    ("counter_as_gauge", "clashes with carbonspan_spans_accepted (counter)"),
    ("reserved", "the reserved family carbonspan_worker_metrics_up"),
    ("twice", "appears twice"),
    ("timestamp", "carries a timestamp"),
    ("other_info", "carbonspan_worker_info names worker '0'"),
    ("fifo", "not a regular file"),
    ("symlink", "figures refused"),
])
def test_a_peer_file_that_cannot_be_trusted_is_left_out_and_said(tmp_path, caplog, case,
                                                                 why) -> None:
    clear(tmp_path)
    m, share = worker(tmp_path, 0, 2, 11)
    good = _peer_text(1, 22)
    header = f"# {FORMAT} worker=1 run={RUN} pid=1 taken_at="
    if case == "stale":
        _planted(tmp_path, 1, good, taken_at=time.time() - STALE_AFTER_S - 5)
    elif case == "future":
        _planted(tmp_path, 1, good, taken_at=time.time() + 3600)
    elif case == "other_run":
        _planted(tmp_path, 1, good, run="5e5e5e5e")
    elif case == "other_worker":
        _planted(tmp_path, 1, good, claims=0)
    elif case == "bad_taken_at":
        metrics_file(tmp_path, 1).write_bytes(f"{header}1.2.3\n".encode() + good)
    elif case == "no_newline":
        metrics_file(tmp_path, 1).write_bytes(f"{header}{time.time():.3f}".encode())
    elif case == "empty":
        metrics_file(tmp_path, 1).write_bytes(b"")
    elif case == "not_text":
        _planted(tmp_path, 1, b"carbonspan_spans_accepted_total{ 1 2 3\n")
    elif case == "not_utf8":
        _planted(tmp_path, 1, b"\xff\xfe" + good)
    elif case == "too_big":
        _planted(tmp_path, 1, b"#" * (MAX_METRICS_BYTES + 1))
    elif case == "too_many_series":
        _planted(tmp_path, 1, good + b"# TYPE x gauge\n" + b"".join(
            b'x{n="%d"} 1.0\n' % i for i in range(MAX_SERIES)))
    elif case == "info_type":  # would render a second TYPE carbonspan_worker_info
        _planted(tmp_path, 1, good + b"# TYPE carbonspan_worker info\n")
    elif case == "counter_as_gauge":
        _planted(tmp_path, 1, good.replace(b"# TYPE carbonspan_spans_accepted_total counter",
                                           b"# TYPE carbonspan_spans_accepted_total gauge"))
    elif case == "reserved":
        _planted(tmp_path, 1, good + b"# TYPE carbonspan_worker_metrics_up gauge\n"
                 b"carbonspan_worker_metrics_up 1.0\n")
    elif case == "twice":
        _planted(tmp_path, 1, good.replace(b"carbonspan_spans_accepted_total 22.0\n",
                                           b"carbonspan_spans_accepted_total 22.0\n"
                                           b"carbonspan_spans_accepted_total 99.0\n"))
    elif case == "timestamp":
        _planted(tmp_path, 1, good.replace(b"carbonspan_spans_accepted_total 22.0\n",
                                           b"carbonspan_spans_accepted_total 22.0 1700000000000\n"))
    elif case == "other_info":
        _planted(tmp_path, 1, good.replace(b'worker="1"', b'worker="0"'))
    elif case == "fifo":
        os.mkfifo(metrics_file(tmp_path, 1))  # opened without blocking, then refused
    elif case == "symlink":
        target = tmp_path / "elsewhere.prom"
        target.write_bytes(f"# {FORMAT} worker=1 run={RUN} pid=1 taken_at={time.time():.3f}\n"
                           .encode() + good)
        metrics_file(tmp_path, 1).symlink_to(target)
    with caplog.at_level(logging.WARNING, logger="carbonspan.agent"):
        text = m.scrape()
    assert accepted(text) == {"0": 11.0}  # its own figures served, the peer's left out
    assert up(text) == {"0": 1.0, "1": 0.0}
    assert any(why in r.getMessage() and "worker 1" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    ages = {dict(lab)["worker"]: v for (n, lab), v in samples(text).items()
            if n == "carbonspan_worker_metrics_age_seconds"}
    if case == "stale":  # its age is said
        assert ages["1"] > STALE_AFTER_S
    elif case in ("missing", "fifo", "symlink", "empty", "bad_taken_at", "other_run"):
        assert "1" not in ages  # no header read: no age to say
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="carbonspan.agent"):
        m.scrape()
    assert not caplog.records  # once a minute per worker, not once per scrape


def test_labels_in_a_peer_file_cannot_claim_another_worker(tmp_path) -> None:
    clear(tmp_path)
    m, _ = worker(tmp_path, 0, 2, 5)
    forged = _peer_text(1, 9).replace(b"carbonspan_spans_accepted_total 9.0",
                                      b'carbonspan_spans_accepted_total{worker="0"} 9.0')
    assert forged != _peer_text(1, 9)
    _planted(tmp_path, 1, forged)
    assert accepted(m.scrape()) == {"0": 5.0, "1": 9.0}


def test_publish_replaces_the_file_whole_and_a_failed_write_is_counted(tmp_path, caplog) -> None:
    clear(tmp_path)
    m, share = worker(tmp_path, 1, 2, 3)
    share.publish()
    first = metrics_file(tmp_path, 1).read_bytes()
    assert first.startswith(f"# {FORMAT} worker=1 run={RUN} pid={os.getpid()} ".encode())
    assert [p.name for p in tmp_path.iterdir()] == ["metrics-w1.prom"]  # no temporary left
    # a directory where the temporary file goes: the write fails (as root too)
    blocker = tmp_path / f"metrics-w1.prom.{os.getpid()}.tmp"
    blocker.mkdir()
    m.spans_accepted.inc(1)
    with caplog.at_level(logging.WARNING, logger="carbonspan.agent"):
        assert share.publish()[0] == first.partition(b"\n")[2]  # the last published figures
    assert share.publish_errors == 1
    assert any("could not write its figures" in r.getMessage() for r in caplog.records)
    assert metrics_file(tmp_path, 1).read_bytes() == first  # the last whole file stays
    assert samples(m.exposition())[("carbonspan_worker_metrics_publish_errors_total", ())] == 1
    # its answers say at once that it cannot publish, and show what the others show (its last
    # published figures: no counter falls between two workers' answers) ...
    s = samples(m.scrape())
    assert s[("carbonspan_worker_metrics_publish_failing", (("worker", "1"),))] == 1.0
    assert s[("carbonspan_spans_accepted_total", (("worker", "1"),))] == 3.0
    # ... until those are STALE_AFTER_S old, when the others leave them out: then its live
    # figures, so a full disk does not hide the figures that say why for long
    body, taken = share._last
    share._last = (body, taken - STALE_AFTER_S - 1)
    s = samples(m.scrape())
    assert s[("carbonspan_spans_accepted_total", (("worker", "1"),))] == 4.0
    assert s[("carbonspan_worker_metrics_publish_errors_total", (("worker", "1"),))] >= 2.0
    assert s[("carbonspan_worker_metrics_publish_failing", (("worker", "1"),))] == 1.0
    blocker.rmdir()
    share.publish()
    assert metrics_file(tmp_path, 1).read_bytes() != first
    assert samples(m.scrape())[("carbonspan_worker_metrics_publish_failing",
                                (("worker", "1"),))] == 0.0


def test_a_scrape_never_waits_for_a_hung_disk(tmp_path, monkeypatch) -> None:
    """The publisher thread writes; a scrape asks it and waits SCRAPE_WAIT_S at most, then
    answers with its live figures (and says publishing fails) while the write hangs."""
    import threading

    from agent import metrics_share
    from agent.metrics_share import SCRAPE_WAIT_S

    clear(tmp_path)
    m, share = worker(tmp_path, 0, 2, 5)
    share.start()
    try:
        assert up(m.scrape())["0"] == 1.0
        release = threading.Event()
        real = metrics_share.replace_bytes

        def hung(path, data):  # the disk freezes under the publisher thread
            release.wait(30)
            real(path, data)

        monkeypatch.setattr(metrics_share, "replace_bytes", hung)
        m.spans_accepted.inc(3)
        times = []
        for _ in range(3):
            t0 = time.monotonic()
            s = samples(m.scrape())
            times.append(time.monotonic() - t0)
        assert max(times) < SCRAPE_WAIT_S + 0.5, times
        assert sum(times[1:]) < 0.3, times  # once it knows the disk hangs, it does not wait
        assert s[("carbonspan_spans_accepted_total", (("worker", "0"),))] == 5.0  # as published
        assert s[("carbonspan_worker_metrics_publish_failing", (("worker", "0"),))] == 1.0
        me_wants = time.monotonic()
        share.want_live()  # a GET / does not touch the disk itself either
        assert time.monotonic() - me_wants < 0.1
        release.set()
        monkeypatch.setattr(metrics_share, "replace_bytes", real)
        wait = time.monotonic() + 5
        while samples(m.scrape())[("carbonspan_worker_metrics_publish_failing",
                                   (("worker", "0"),))] != 0.0:
            assert time.monotonic() < wait, "publishing did not recover after the thaw"
    finally:
        share.stop()


def test_a_dead_workers_figures_are_forgotten(tmp_path) -> None:
    clear(tmp_path)
    m0, _ = worker(tmp_path, 0, 2, 1)
    _, s1 = worker(tmp_path, 1, 2, 2)
    s1.publish()
    assert up(m0.scrape()) == {"0": 1.0, "1": 1.0}
    forget(tmp_path, 1)  # the supervisor, when worker 1 died
    assert up(m0.scrape()) == {"0": 1.0, "1": 0.0}


def test_clear_removes_every_workers_file_and_leftover(tmp_path) -> None:
    for name in ("metrics-w0.prom", "metrics-w7.prom", "metrics-w1.prom.123.tmp", "keep.txt"):
        (tmp_path / name).write_text("x")
    clear(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


# -- the live page (GET /) ----------------------------------------------------------------------


def _report(spans: int, service: str) -> dict:
    from schema.models import WindowReport

    return WindowReport.model_validate({
        "agent_id": "a", "window": {"start": "2026-12-06T10:00:00Z", "end": "2026-12-06T10:00:10Z",
                                    "spans": spans, "io_ops": spans, "traces": spans},
        "green_summary": {"per_service_energy_kwh": {service: 1e-6},
                          "per_service_carbon_kgco2eq": {service: 2e-7},
                          "per_service_requests": {service: spans}},
    }).model_dump(mode="json")


def test_live_figures_are_wanted_then_published_and_read_back(tmp_path) -> None:
    from agent.metrics_share import live_file

    clear(tmp_path)
    _, me = worker(tmp_path, 0, 2, 0)
    _, peer = worker(tmp_path, 1, 2, 0)
    assert not peer.live_wanted()  # nobody looked: nothing is written
    me.want_live()
    assert peer.live_wanted()
    peer.publish_live("ready", "a-w1", _report(7, "svc-b"), [_report(3, "svc-b")])
    got = me.peer_live(1)
    assert got["state"] == "ready" and got["agent_id"] == "a-w1" and got["age"] < 5
    assert got["open"]["window"]["spans"] == 7 and len(got["recent"]) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("live")] == \
        sorted(["live-wanted", live_file(tmp_path, 1).name])
    clear(tmp_path)
    assert not any(p.name.startswith("live") for p in tmp_path.iterdir())


@pytest.mark.parametrize("case, why", [
    ("missing", "no figures yet"),
    ("stale", "s old (over 15 s"),
    ("other_run", "not worker 1's of this run"),
    ("not_json", "figures refused"),
    ("bad_report", "does not match the window report schema"),
    ("too_many", "recent is not a list of at most"),
    ("future", "ahead (the clock stepped back?)"),
    ("negative", "a report holds a negative figure"),
    ("too_many_services", "a report lists over 201 services"),
    ("fifo", "not a regular file"),
])
def test_a_live_file_that_cannot_be_trusted_is_left_out_with_its_reason(tmp_path, case,
                                                                        why) -> None:
    import orjson

    from agent.livepage import render
    from agent.metrics_share import LIVE_FORMAT, LIVE_STALE_S, MAX_RECENT, live_file

    clear(tmp_path)
    _, me = worker(tmp_path, 0, 2, 0)
    doc = {"format": LIVE_FORMAT, "worker": 1, "run": RUN, "pid": 1, "taken_at": time.time(),
           "state": "ready", "agent_id": "a-w1", "open": _report(5, "svc-b"), "recent": []}
    path = live_file(tmp_path, 1)
    if case == "stale":
        doc["taken_at"] = time.time() - LIVE_STALE_S - 1
    elif case == "other_run":
        doc["run"] = "5e5e5e5e"
    elif case == "future":
        doc["taken_at"] = time.time() + 3600
    elif case == "negative":
        doc["open"]["counters"] = {"spans_rejected": -20}
    elif case == "too_many_services":
        many = _report(5, "svc-b")
        many["green_summary"]["per_service_energy_kwh"] = {f"s{i}": 1e-9 for i in range(300)}
        doc["open"] = many
    elif case == "bad_report":
        doc["open"] = {"window": {"start": 5}, "green_summary": []}
    elif case == "too_many":
        doc["recent"] = [_report(1, "x")] * (MAX_RECENT + 1)
    if case == "not_json":
        path.write_bytes(b"{not json")
    elif case == "fifo":
        os.mkfifo(path)
    elif case != "missing":
        path.write_bytes(orjson.dumps(doc))
    got = me.peer_live(1)
    assert why in got["why"], got
    own = {"worker": 0, "agent_id": "a-w0", "state": "ready", "age": 0.0,
           "open": _report(4, "svc-a"), "recent": []}
    page = render("a-w0", "ready", own["open"], [], None, [own, got], 0).decode()
    assert "this page sums the figures of 1 of them (1 left out: see below)" in page
    assert "left out: " in page and "<td>svc-a</td>" in page and "<td>svc-b</td>" not in page
    assert "since 2026-12-06T10:00:00Z: 4 spans" in page


def test_a_live_file_holds_the_services_of_most_carbon_and_the_rest_in_one_row(tmp_path) -> None:
    from agent.livepage import render
    from agent.metrics_share import LIVE_SERVICES, MORE

    def wide(worker_k: int) -> dict:
        rep = _report(300, "x")
        gs = rep["green_summary"]
        gs["per_service_energy_kwh"] = {f"s{i}": 1e-6 for i in range(300)}
        gs["per_service_carbon_kgco2eq"] = {f"s{i}": (300 - i) * 1e-9 for i in range(300)}
        gs["per_service_requests"] = {f"s{i}": 1 for i in range(300)}
        return rep

    clear(tmp_path)
    _, me = worker(tmp_path, 0, 2, 0)
    _, peer = worker(tmp_path, 1, 2, 0)
    peer.publish_live("ready", "a-w1", wide(1), [])
    got = me.peer_live(1)
    gs = got["open"]["green_summary"]
    assert len(gs["per_service_energy_kwh"]) == LIVE_SERVICES + 1
    assert "s0" in gs["per_service_energy_kwh"] and "s299" not in gs["per_service_energy_kwh"]
    assert gs["per_service_requests"][MORE] == 300 - LIVE_SERVICES
    assert sum(gs["per_service_energy_kwh"].values()) == pytest.approx(300e-6)
    from agent.metrics_share import compact

    own = {"worker": 0, "agent_id": "a-w0", "state": "ready", "age": 0.0,
           "open": compact(wide(0)), "recent": []}
    page = render("a-w0", "ready", None, [], None, [own, got], 0).decode()
    # one row for the rest, summed over both workers: 2 x 100 requests
    assert f"<td>{MORE}</td>" in page and '<td class="n">200</td>' in page


def test_after_a_live_answer_a_late_snapshot_never_shows_less(tmp_path) -> None:
    """A publish taken before a stall that lands after live answers were given (its snapshot
    older than them) is not answered: live figures go on until a later publish lands."""
    clear(tmp_path)
    m, share = worker(tmp_path, 0, 2, 100)
    share.publish()
    late = share._last  # a snapshot taken now, whose write hangs ...
    m.spans_accepted.inc(40)
    share._last = (late[0], late[1] - STALE_AFTER_S - 1)  # ... past STALE_AFTER_S: live answers
    share.inline = False  # no publish from the scrape: the thread is the one stalled
    assert accepted(m.scrape())["0"] == 140.0
    share._last = late  # the stalled write lands, with its older snapshot (100)
    assert accepted(m.scrape())["0"] == 140.0  # not 100: live until a later publish lands
    share.inline = True
    assert accepted(m.scrape())["0"] == 140.0  # a new publish (taken after the live answer)
    assert share._live_at is not None and share._last[1] >= share._live_at


def test_every_answer_says_whether_each_worker_publishes(tmp_path) -> None:
    """publish_failing for every worker in every answer (an alert's series never comes and
    goes with the answering worker): another worker's figures over PUBLISH_LATE_S old say it."""
    from agent.metrics_share import PUBLISH_LATE_S

    clear(tmp_path)
    m0, _ = worker(tmp_path, 0, 2, 1)
    _, s1 = worker(tmp_path, 1, 2, 2)
    _planted(tmp_path, 1, s1.own(), taken_at=time.time() - PUBLISH_LATE_S - 1)
    failing = {dict(lab)["worker"]: v for (n, lab), v in samples(m0.scrape()).items()
               if n == "carbonspan_worker_metrics_publish_failing"}
    assert failing == {"0": 0.0, "1": 1.0}
    s1.publish()
    failing = {dict(lab)["worker"]: v for (n, lab), v in samples(m0.scrape()).items()
               if n == "carbonspan_worker_metrics_publish_failing"}
    assert failing == {"0": 0.0, "1": 0.0}


def test_a_worker_not_started_yet_answers_live_and_writes_nothing(tmp_path) -> None:
    """The HTTP server starts before the WAL replay: a scrape or a look then must not write
    from the request thread (a worker's share has inline False until start())."""
    clear(tmp_path)
    m = AgentMetrics()
    m.worker_on(0, 2, "a-w0", 0)
    m.spans_accepted.inc(9)
    m.share = MetricsShare.from_env(f"{tmp_path} {RUN}", 0, 2, m.exposition)
    assert accepted(m.scrape())["0"] == 9.0
    m.share.want_live()
    assert not list(tmp_path.iterdir())  # neither its figures nor live-wanted written
    m.share.start()
    try:
        assert metrics_file(tmp_path, 0).exists()
        wait = time.monotonic() + 5
        while not (tmp_path / "live-wanted").exists():  # the thread asks the others now
            assert time.monotonic() < wait
            time.sleep(0.05)
    finally:
        m.share.stop()
