"""``--workers N`` with a ``[sources]`` table: the supervisor polls once for every worker
(agent/sources/shared.py).

A real ``--workers 2`` agent against a loopback Electricity Maps (its real answer format) that
gives a different intensity on every request: the API sees one request per poll interval, not
one per worker, both workers' window lines carry the same reading, the supervisor's signal log
holds it once (its counters on worker 0's /metrics), and the supervisor's op counter is the sum
of what both workers report, which equals their archived I/O ops. Stopping the supervisor
(SIGSTOP) silences the publisher; the workers say so on ``/metrics`` and recover when it goes
on. The hub and a worker's link are also run directly on one directory: each worker's I/O ops
reach the supervisor's op counter (a restarted worker counts from zero), a silent publisher is
a warning, a counter and stale sources, and the readings round-trip exactly.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
import urllib.request
from datetime import UTC, datetime

import orjson
import pytest
from agent_process import wait_for

from agent.archive import read_records
from agent.carbon.signals import LiveIntensity, MeasuredRate, Signals
from agent.metrics import AgentMetrics
from agent.sources.manager import SourceManager
from agent.sources.shared import (
    READINGS,
    STALE_AFTER_S,
    SharedSignals,
    SignalHub,
    decode_signals,
    encode_signals,
    ops_file,
    sources_dir,
)

ZONE_PATH = "/v3/carbon-intensity/latest?zone=FR"


class Upstream:
    """Electricity Maps' ``latest`` answer; the n-th request gets 100 + n gCO2/kWh, so two
    independent pollers would read different values."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[str] = []

    def answer(self, path: str, headers) -> tuple[int, str, bytes]:
        if headers.get("auth-token") != "key":
            return 401, "application/json", b'{"error":"unauthorized"}'
        with self.lock:
            self.requests.append(path)
            n = len(self.requests)
        return 200, "application/json", orjson.dumps({
            "zone": "FR", "carbonIntensity": 100.0 + n, "isEstimated": False,
            "datetime": datetime.now(UTC).strftime("%Y-%m-%dT%H:00:00.000Z")})


def config(base: str, log) -> str:
    return f"""
[agent.signal_log]
path = "{log}"
[green]
default_region = "eu-west-3"
use_hourly_profiles = false
[sources.electricity_maps]
base_url = "{base}"
api_key_env = "TEST_EM_KEY"
regions = ["eu-west-3"]
interval_s = 3600
"""


def post(agent, i: int) -> str:
    """Five SQL client spans over OTLP/HTTP JSON on a new connection; the answering worker."""
    now = datetime.now(UTC).timestamp()
    spans = [{"traceId": f"{i:016x}{k + 1:016x}", "spanId": f"{i:08x}{k + 1:08x}",
              "name": "SELECT", "kind": 3, "startTimeUnixNano": str(int((now - 1) * 1e9)),
              "endTimeUnixNano": str(int((now - 1) * 1e9) + 10**6),
              "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}}]}
             for k in range(5)]
    body = orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}}]},
        "scopeSpans": [{"spans": spans}]}]})  # fmt: skip
    req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        return resp.headers["Carbonspan-Worker"]


def metrics_text(agent) -> tuple[str, str]:
    with urllib.request.urlopen(f"{agent.http_url}/metrics", timeout=5) as resp:
        return resp.headers["Carbonspan-Worker"], resp.read().decode()


def test_two_workers_share_one_poll_and_score_with_the_same_reading(start_agent, loopback_http,
                                                                   tmp_path):
    upstream = Upstream()
    base = loopback_http(upstream.answer)
    log = tmp_path / "signals.jsonl"
    agent = start_agent("--workers", "2", "--window-seconds", "1", config=config(base, log),
                        env={"TEST_EM_KEY": "key"})
    supervisor = agent.proc.pid
    try:
        assert "[sources] polled here once for all workers" in agent.startup_line
        answered: set[str] = set()
        for i in range(200):  # new connections until the kernel gave both workers some
            answered.add(post(agent, i + 1).split()[0])
            if len(answered) == 2 and i >= 7:
                break
        assert answered == {"0/2", "1/2"}, answered
        # the supervisor writes the signal log; worker 0 alone counts it, and every answer
        # (whichever worker gave it: each answers for all, agent/metrics_share.py) says so
        counted: dict[str, dict[str, float]] = {}

        def both_scraped() -> bool:
            worker, text = metrics_text(agent)
            counted[worker.split()[0]] = {w: float(v) for w, v in re.findall(
                r'^carbonspan_signal_log_rows_total\{kind="observation",worker="(\d)"\} (\S+)$',
                text, re.M)}
            return len(counted) == 2 and all(c == {"0": 1.0} for c in counted.values())

        wait_for(both_scraped, timeout=20, what="a scrape of each worker")
        assert counted == {"0/2": {"0": 1.0}, "1/2": {"0": 1.0}}, counted
        # each worker's I/O ops reach the supervisor's one op counter (measured kWh per op)
        shared = agent.root / ".test-agent.sources"

        def ops_summed() -> bool:
            files = [json.loads(p.read_bytes())["totals"].get("checkout", 0)
                     for p in (shared / "ops-w0.json", shared / "ops-w1.json") if p.exists()]
            hub = json.loads((shared / "readings.json").read_bytes())["ops_totals"]
            return len(files) == 2 and min(files) > 0 and hub.get("checkout") == sum(files)

        wait_for(ops_summed, timeout=20, what="the supervisor counts both workers' ops")

        # silence the publisher: the workers see it (a warning, the gauge, the counter)
        os.kill(supervisor, signal.SIGSTOP)
        try:
            silent: set[str] = set()

            def both_silent() -> bool:
                worker, text = metrics_text(agent)
                if all(s in text for k in "01" for s in (  # the gauge, the counter, the health
                        f'carbonspan_sources_publisher_up{{worker="{k}"}} 0.0',
                        f'carbonspan_sources_publisher_silent_total{{worker="{k}"}} 1.0',
                        f'carbonspan_source_up{{source="electricity_maps",worker="{k}"}} 0.0')):
                    silent.add(worker.split()[0])
                return len(silent) == 2

            wait_for(both_silent, timeout=STALE_AFTER_S + 30, what="both workers see the silence")
        finally:
            os.kill(supervisor, signal.SIGCONT)
        wait_for(lambda: all(f'carbonspan_sources_publisher_up{{worker="{k}"}} 1.0'
                             in metrics_text(agent)[1] for k in "01"),
                 timeout=20, what="the publisher is heard again")
    finally:
        assert agent.stop() == 0
    err = "".join(agent.stderr_text())
    assert "has published no [sources] readings for" in err

    # one poll of the one zone for both workers (its interval is an hour), not one per worker
    assert upstream.requests == [ZONE_PATH]
    readings = []
    for chain in ("test-agent-w0", "test-agent-w1"):
        rows = [row for _, rec in read_records(agent.root / chain)
                for row in rec["report"]["green_summary"]["regions"]]
        assert rows, f"{chain} archived no region row"
        readings += [(chain, r["intensity_source"], round(r["grid_intensity_gco2_kwh"], 9))
                     for r in rows]
    assert {(src, g) for _, src, g in readings} == {("real_time", 101.0)}, readings
    assert {c for c, _, _ in readings} == {"test-agent-w0", "test-agent-w1"}
    for k, chain in enumerate(("test-agent-w0", "test-agent-w1")):  # what each worker reported
        ops = sum(row["io_ops"] for _, rec in read_records(agent.root / chain)
                  for row in rec["report"]["green_summary"]["regions"])
        assert json.loads((shared / f"ops-w{k}.json").read_bytes())["totals"] == {"checkout": ops}
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["region"], r["source"], r["value"]) for r in rows] == [
        ("eu-west-3", "electricitymaps", 101.0)]


def test_a_refused_key_stops_the_supervisor_at_start_as_it_stops_one_agent(start_agent,
                                                                          loopback_http, tmp_path):
    upstream = Upstream()
    agent = start_agent("--workers", "2", config=config(loopback_http(upstream.answer),
                                                        tmp_path / "s.jsonl"),
                        env={"TEST_EM_KEY": "revoked"}, ready=False)
    assert agent.proc.wait(timeout=30) == 2
    err = "".join(agent.stderr_text())
    assert "electricity_maps refused our credentials" in err and "HTTP 401" in err
    assert "worker" not in agent.stdout_text()  # no worker was started


def test_a_second_supervisor_of_the_same_agent_id_is_refused(tmp_path):
    from agent.archive import ArchiveError

    first = SignalHub(SourceManager.from_config({}), sources_dir(tmp_path, "a"), 2)
    first.open()
    second = SignalHub(SourceManager.from_config({}), sources_dir(tmp_path, "a"), 2)
    try:
        with pytest.raises(ArchiveError, match="held by another carbonspan supervisor"):
            second.open()
    finally:
        first.stop()


# -- the hub and the worker link on one directory ------------------------------------------------
class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_every_workers_ops_reach_the_supervisors_counter(tmp_path):
    directory = sources_dir(tmp_path, "a")
    hub = SignalHub(SourceManager.from_config({}), directory, 2)
    hub.start()
    try:
        w0, w1 = SharedSignals(directory, 0), SharedSignals(directory, 1)
        assert w0.refresh() and w1.refresh()  # each takes the supervisor's run from its readings
        w0.ops.add({"checkout": 5})
        w1.ops.add({"checkout": 7, "cart": 2})
        w0.write_ops()
        w1.write_ops()
        hub.collect_ops()
        assert hub.manager.ops.totals() == {"checkout": 12, "cart": 2}
        hub.collect_ops()  # totals, not deltas: nothing is counted twice
        assert hub.manager.ops.totals() == {"checkout": 12, "cart": 2}
        w1.ops.add({"cart": 1})
        w1.write_ops()
        hub.collect_ops()
        assert hub.manager.ops.totals() == {"checkout": 12, "cart": 3}
        # a restarted worker 1 (another pid) counts from zero again
        doc = json.loads(ops_file(directory, 1).read_bytes())
        ops_file(directory, 1).write_text(json.dumps({"pid": doc["pid"] + 1, "run": hub.run,
                                                      "life": doc["life"],
                                                      "totals": {"cart": 4}}))
        hub.collect_ops()
        assert hub.manager.ops.totals() == {"checkout": 12, "cart": 7}
        # totals that go back (a pid reused by the next life) count from zero as well
        ops_file(directory, 1).write_text(json.dumps({"pid": doc["pid"] + 1, "run": hub.run,
                                                      "life": doc["life"],
                                                      "totals": {"cart": 1}}))
        hub.collect_ops()
        assert hub.manager.ops.totals() == {"checkout": 12, "cart": 8}
        ops_file(directory, 0).write_text("{not json")
        hub.collect_ops()
        assert hub.ops_unreadable == 1
    finally:
        hub.stop()


def test_a_silent_publisher_is_visible_and_its_readings_age_as_a_single_agents(tmp_path, caplog):
    directory = sources_dir(tmp_path, "a")
    clock = Clock(1_800_000_000.0)
    hub = SignalHub(SourceManager.from_config({}), directory, 1, clock=clock)
    hub.open()
    hub.publish()
    metrics = AgentMetrics()
    metrics.publisher_on()
    link = SharedSignals(directory, 0, metrics, clock=clock)
    link.start(first_read_s=5)
    assert link.seq == 1 and not link.silent
    assert b"carbonspan_sources_publisher_up 1.0" in metrics.exposition()

    clock.t += STALE_AFTER_S + 1  # nothing published meanwhile
    with caplog.at_level(logging.WARNING, logger="carbonspan.sources"):
        link.refresh()
    assert link.silent and link.silences == 1
    assert "has published no [sources] readings for 11 s" in caplog.text
    text = metrics.exposition().decode()
    assert "carbonspan_sources_publisher_up 0.0" in text
    assert "carbonspan_sources_publisher_silent_total 1.0" in text
    assert "carbonspan_sources_publisher_age_seconds 11.0" in text

    hub.publish()  # the publisher goes on
    link.refresh()
    assert not link.silent and link.seq == 2
    assert b"carbonspan_sources_publisher_up 1.0" in metrics.exposition()
    link.stop()
    hub.stop()


def test_a_silent_publishers_sources_show_not_ok_and_stale(tmp_path):
    directory = sources_dir(tmp_path, "a")
    directory.mkdir(parents=True)
    now = 1_800_000_000.0
    health = {"emaps": {"ok": True, "stale": False, "last_success": now, "failures": 0,
                        "last_error": "", "kind": "electricity_maps", "tag": "electricity_maps_api"}}
    sig = Signals(live_intensity={"eu-west-3": LiveIntensity(55.0, "electricity_maps_api", now)},
                  host_watts={"db": (120.0, "redfish_bmc")})
    (directory / READINGS).write_text(json.dumps({
        "format": "carbonspan-shared-signals/1", "run": "r1", "seq": 3, "published_at": now,
        "signals": encode_signals(sig, {"db": now + 90}), "health": health, "signal_log": {}}))
    clock = Clock(now + 1)
    link = SharedSignals(directory, 0, clock=clock)
    assert link.refresh()
    assert link.health()["emaps"]["ok"] is True
    assert link.current().host_watts == {"db": (120.0, "redfish_bmc")}
    clock.t = now + 100  # past the host watts' staleness and the publisher's silence
    link.refresh()
    h = link.health()["emaps"]
    assert h["ok"] is False and h["stale"] is True and "publisher is silent" in h["last_error"]
    cur = link.current()
    assert cur.host_watts == {}  # the declared watts apply again, as in a single agent
    assert cur.live_intensity == sig.live_intensity  # kept with its time: the scorer ages it


def test_the_readings_round_trip_exactly():
    sig = Signals(
        measured={"checkout": MeasuredRate(2.0833333333333333e-09, "scaphandre_rapl",
                                           1_800_000_000.123, 10.0)},
        live_intensity={"eu-west-3": LiveIntensity(33.3, "grid_operator_api", 1_800_000_001.5,
                                                   True, 7200.0),
                        "eu-west-1": LiveIntensity(280.0, "electricity_maps_api", 1.0)},
        host_watts={"db": (0.1 + 0.2, "redfish_bmc")},
        max_signal_age_s=1800.0)
    doc = json.loads(json.dumps(encode_signals(sig, {"db": 5.0})))
    back, until = decode_signals(doc)
    assert back == sig and until == {"db": 5.0}


def test_new_readings_take_effect_at_one_instant_in_every_worker(tmp_path, loopback_http,
                                                                 monkeypatch):
    """The supervisor's real manager polls a loopback Electricity Maps twice (101, then 102);
    two workers' links read the one file and switch from 101 to 102 at ``effective_at``,
    whenever each of them read it."""
    from agent.config import GreenConfig
    from agent.sources.shared import SWITCH_S

    monkeypatch.setenv("TEST_EM_KEY", "key")
    upstream = Upstream()
    table = {"electricity_maps": {"base_url": loopback_http(upstream.answer),
                                  "api_key_env": "TEST_EM_KEY", "regions": ["eu-west-3"]}}
    manager = SourceManager.from_config(table, GreenConfig())
    directory = sources_dir(tmp_path, "a")
    clock = Clock(1_800_000_000.0)
    hub = SignalHub(manager, directory, 2, clock=clock)
    hub.open()
    w0, w1 = SharedSignals(directory, 0, clock=clock), SharedSignals(directory, 1, clock=clock)

    def used(link: SharedSignals) -> float:
        return link.current().live_intensity["eu-west-3"].gco2_kwh

    manager.poll_all()
    hub.publish()  # the first readings: in effect at once
    assert w0.refresh() and w1.refresh()
    assert used(w0) == used(w1) == 101.0
    manager.poll_all()
    clock.t += 5
    hub.publish()
    assert w0.refresh()  # worker 0 sees the new file at once, worker 1 half a second later
    assert used(w0) == 101.0
    clock.t += SWITCH_S / 2
    assert w1.refresh()
    assert used(w0) == used(w1) == 101.0
    clock.t += SWITCH_S / 2  # effective_at: both switch
    assert used(w0) == used(w1) == 102.0
    clock.t += 1
    hub.publish()  # a heartbeat with the same readings changes nothing
    w0.refresh()
    assert used(w0) == 102.0 and w0.seq == 3
    assert upstream.requests == [ZONE_PATH, ZONE_PATH]
    hub.stop()


@pytest.mark.parametrize("body", [
    '{"pid": 5, "run": "RUN", "totals": {"checkout": Infinity}}',  # json.loads takes it; int() overflows
    '{"pid": 5, "run": "RUN", "totals": {"checkout": 1e400}}',
    '{"pid": 5, "run": "RUN", "totals": {"checkout": NaN}}',
    '{"pid": 5, "run": "RUN", "totals": {"checkout": 2.5}}',
    '{"pid": 5, "run": "RUN", "totals": {"checkout": "7"}}',
    '{"pid": 5, "run": "RUN", "totals": {"checkout": true}}',
    '{"pid": true, "run": "RUN", "totals": {"checkout": 1}}',
    '{"pid": 5, "run": "RUN", "totals": [1]}',
    '[' * 100_000 + ']' * 100_000,  # deep enough to recurse in the parser
    '{"pid": 5, "run": "RUN", "totals": {"checkout": 1}, "pad": "' + 'x' * (9 << 20) + '"}',  # huge
    '{"pid": 5, "run": "RUN", "tot',  # a partial write
    '\xff\xfe',
])
def test_a_hostile_ops_file_is_refused_and_the_publisher_goes_on(tmp_path, body):
    directory = sources_dir(tmp_path, "a")
    hub = SignalHub(SourceManager.from_config({}), directory, 2)
    hub.start()
    try:
        w1 = SharedSignals(directory, 1)
        assert w1.refresh()
        w1.ops.add({"checkout": 4})
        w1.write_ops()
        ops_file(directory, 0).write_bytes(body.replace("RUN", hub.run).encode()
                                           if body != "\xff\xfe" else b"\xff\xfe")
        before = json.loads((directory / READINGS).read_bytes())["seq"]
        hub.publish()  # never stopped by a bad file: the workers would go silent
        hub.publish()  # the same bad file again: refused, not counted twice
        doc = json.loads((directory / READINGS).read_bytes())
        assert doc["seq"] == before + 2
        assert hub.ops_unreadable == 1 and doc["ops_unreadable"] == 1
        assert hub.manager.ops.totals() == {"checkout": 4}  # worker 1's, nothing of worker 0's
        metrics = AgentMetrics()  # worker 0's /metrics shows the supervisor's refusals
        metrics.publisher_on()
        assert SharedSignals(directory, 0, metrics).refresh()
        assert "carbonspan_sources_ops_refused_total 1.0" in metrics.exposition().decode()
    finally:
        hub.stop()


def test_negative_op_totals_cannot_inflate_the_count(tmp_path):
    directory = sources_dir(tmp_path, "a")
    hub = SignalHub(SourceManager.from_config({}), directory, 1)
    hub.start()
    try:
        for n in (-1000, 3):
            ops_file(directory, 0).write_text(json.dumps(
                {"pid": 5, "run": hub.run, "totals": {"checkout": n}}))
            hub.collect_ops()
        assert hub.manager.ops.totals() == {"checkout": 3}  # not 1,003
        assert hub.ops_unreadable == 1
    finally:
        hub.stop()


def _good_readings(directory, now: float, seq: int = 1) -> dict:
    sig = Signals(measured={"checkout": MeasuredRate(2e-9, "scaphandre_rapl", now, 10.0)},
                  live_intensity={"eu-west-3": LiveIntensity(55.0, "electricity_maps_api", now)},
                  host_watts={"db": (120.0, "redfish_bmc")})
    return {"format": "carbonspan-shared-signals/1", "run": "r1", "seq": seq,
            "published_at": now,
            "effective_at": now, "signals": encode_signals(sig, {"db": now + 90}),
            "previous": None, "health": {}, "signal_log": {}}


def _spoil(doc: dict, how: str) -> bytes:
    sig = doc["signals"]
    if how == "deep":
        return b"[" * 100_000 + b"]" * 100_000
    if how == "huge":
        return json.dumps({**doc, "pad": "x" * (9 << 20)}).encode()
    if how == "truncated":
        return json.dumps(doc).encode()[:-7]
    if how == "list":
        return b"[1, 2]"
    if how == "nan_rate":
        sig["measured"]["checkout"][0] = float("nan")
    elif how == "inf_intensity":
        sig["live_intensity"]["eu-west-3"][0] = float("inf")
    elif how == "negative_watts":
        sig["host_watts"]["db"][0] = -5.0
    elif how == "string_row":  # "1234"[0..3] would pass float()/str() one by one
        sig["measured"]["checkout"] = "1234"
    elif how == "int_past_float":
        sig["live_intensity"]["eu-west-3"][0] = 10**400
    elif how == "bool_rate":
        sig["measured"]["checkout"][0] = True
    elif how == "nan_published":
        doc["published_at"] = float("nan")
    return json.dumps(doc).encode()


@pytest.mark.parametrize("how", ["deep", "huge", "truncated", "list", "nan_rate",
                                 "inf_intensity", "negative_watts", "string_row",
                                 "int_past_float", "bool_rate", "nan_published"])
def test_a_hostile_readings_file_is_refused_visibly_and_the_last_readings_kept(tmp_path, how):
    directory = sources_dir(tmp_path, "a")
    directory.mkdir(parents=True)
    now = 1_800_000_000.0
    (directory / READINGS).write_text(json.dumps(_good_readings(directory, now)))
    metrics = AgentMetrics()
    metrics.publisher_on()
    link = SharedSignals(directory, 0, metrics, clock=Clock(now + 1))
    assert link.refresh()
    good = link.current()
    (directory / READINGS).write_bytes(_spoil(_good_readings(directory, now + 1, 2), how))
    assert not link.refresh()  # never raises, whatever the file holds
    assert not link.refresh()  # the same bad file is refused once, not every half second
    assert link.unreadable == 1 and link.seq == 1 and link.current() == good
    assert "carbonspan_sources_readings_refused_total 1.0" in metrics.exposition().decode()
    (directory / READINGS).write_text(json.dumps(_good_readings(directory, now + 2, 3)))
    assert link.refresh() and link.seq == 3


def test_a_worker_starts_even_if_its_first_readings_are_hostile(tmp_path):
    directory = sources_dir(tmp_path, "a")
    directory.mkdir(parents=True)
    (directory / READINGS).write_bytes(b"[" * 100_000 + b"]" * 100_000)
    link = SharedSignals(directory, 0)
    link.start(first_read_s=0.2)  # a RecursionError out of here stopped the worker at start
    try:
        assert link.seq == 0 and link.unreadable == 1
    finally:
        link.stop()


def test_a_worker_that_cannot_write_its_ops_still_reads_the_readings(tmp_path):
    directory = sources_dir(tmp_path, "a")
    hub = SignalHub(SourceManager.from_config({}), directory, 1)
    hub.start()
    link = SharedSignals(directory, 0)
    try:
        link.ops.add({"checkout": 3})
        # the temporary name is taken by a directory: every write of the ops file fails
        ops_file(directory, 0).with_name(f"ops-w0.json.{os.getpid()}.tmp").mkdir()
        link.start(first_read_s=5)
        seq = link.seq
        hub.publish()
        wait_for(lambda: link.seq > seq, timeout=20, what="the worker reads the new readings")
        assert link.ops_write_failures >= 1
    finally:
        link.stop()  # its last write fails too, with a warning: the worker still stops
        hub.stop()


def test_a_reused_pid_with_a_new_life_counts_from_zero(tmp_path):
    """Pids get reused: a new life (a new token) of worker 0 under the same pid, whose totals
    have not gone back in any service it still has, counts from zero all the same."""
    directory = sources_dir(tmp_path, "a")
    hub = SignalHub(SourceManager.from_config({}), directory, 1)
    hub.start()
    try:
        def write(life: str, totals: dict) -> None:
            ops_file(directory, 0).write_text(json.dumps(
                {"pid": 4242, "run": hub.run, "life": life, "totals": totals}))

        write("one", {"checkout": 10, "cart": 5})
        hub.collect_ops()
        write("two", {"checkout": 12})  # 12 ops of the new life, not 2
        hub.collect_ops()
        assert hub.manager.ops.totals() == {"checkout": 22, "cart": 5}
        write("two", {"checkout": 13, "cart": 1})
        hub.collect_ops()
        assert hub.manager.ops.totals() == {"checkout": 23, "cart": 6}
    finally:
        hub.stop()


def test_a_worker_of_a_previous_supervisor_neither_counts_nor_reads_in_the_next(tmp_path):
    """The supervisor is killed; its worker, still stopping, writes its last op totals after
    the next supervisor took the directory: they are refused (counted), not added as a new
    worker's ops, and that worker refuses the next supervisor's readings."""
    directory = sources_dir(tmp_path, "a")
    first = SignalHub(SourceManager.from_config({}), directory, 1)
    first.start()
    old = SharedSignals(directory, 0)
    assert old.refresh() and old.run == first.run
    old.ops.add({"checkout": 1000})
    old.write_ops()
    first.collect_ops()
    assert first.manager.ops.totals() == {"checkout": 1000}
    first.stop()  # (its lock goes with it, as with a kill -9)

    second = SignalHub(SourceManager.from_config({}), directory, 1)
    second.start()
    try:
        assert not old.refresh() and old.unreadable == 1 and old.run == first.run
        old.ops.add({"checkout": 1})
        old.write_ops()  # the old worker's last write, in the new run's directory
        second.collect_ops()
        assert second.manager.ops.totals() == {}
        assert second.ops_unreadable == 1
        new = SharedSignals(directory, 0)  # the new run's worker 0
        assert new.refresh() and new.run == second.run
        new.ops.add({"checkout": 3})
        new.write_ops()
        second.collect_ops()
        assert second.manager.ops.totals() == {"checkout": 3}
    finally:
        second.stop()


def _two_readings_hub(tmp_path, loopback_http, monkeypatch, clock):
    """A hub on a real manager of a loopback Electricity Maps (101 on the first poll, 102 on
    the next) and two workers' links on its directory."""
    from agent.config import GreenConfig

    monkeypatch.setenv("TEST_EM_KEY", "key")
    upstream = Upstream()
    table = {"electricity_maps": {"base_url": loopback_http(upstream.answer),
                                  "api_key_env": "TEST_EM_KEY", "regions": ["eu-west-3"]}}
    manager = SourceManager.from_config(table, GreenConfig())
    directory = sources_dir(tmp_path, "a")
    hub = SignalHub(manager, directory, 2, clock=clock)
    hub.open()
    return hub, SharedSignals(directory, 0, clock=clock), SharedSignals(directory, 1, clock=clock)


def _used(link: SharedSignals) -> float:
    return link.current().live_intensity["eu-west-3"].gco2_kwh


def test_a_failed_publish_leaves_the_switch_to_the_next_one(tmp_path, loopback_http,
                                                           monkeypatch):
    """A write that fails (the disk) must not move the switch: the readings it would have
    carried take effect SWITCH_S after the write that succeeds, not at once."""
    from agent.sources.shared import SWITCH_S

    clock = Clock(1_800_000_000.0)
    hub, w0, w1 = _two_readings_hub(tmp_path, loopback_http, monkeypatch, clock)
    try:
        hub.manager.poll_all()
        hub.publish()
        assert w0.refresh() and w1.refresh() and _used(w0) == _used(w1) == 101.0
        hub.manager.poll_all()  # 102 now
        blocker = hub.dir / f"{READINGS}.{os.getpid()}.tmp"
        blocker.mkdir()  # the next write fails
        clock.t += 1
        with pytest.raises(OSError):
            hub.publish()
        blocker.rmdir()
        clock.t += 5
        hub.publish()  # the first write with 102 in it
        assert w0.refresh()
        assert _used(w0) == 101.0  # not yet: worker 1 has not seen the file
        assert _used(w1) == 101.0
        clock.t += SWITCH_S / 2
        assert w1.refresh()
        clock.t += SWITCH_S / 2
        assert _used(w0) == _used(w1) == 102.0
    finally:
        hub.stop()


def test_a_clock_stepped_back_does_not_hold_the_old_readings(tmp_path, loopback_http, monkeypatch):
    from agent.sources.shared import SWITCH_S

    clock = Clock(1_800_000_000.0)
    hub, w0, _ = _two_readings_hub(tmp_path, loopback_http, monkeypatch, clock)
    try:
        hub.manager.poll_all()
        hub.publish()
        hub.manager.poll_all()
        clock.t += 5
        hub.publish()  # 102 from t + 6
        clock.t -= 3600  # NTP steps the clock back an hour
        hub.publish()  # a heartbeat: same readings
        assert w0.refresh()
        clock.t += SWITCH_S
        assert _used(w0) == 102.0  # not 101 for another hour
    finally:
        hub.stop()


def test_a_worker_whose_reader_lags_past_the_switch_says_so(tmp_path, loopback_http, monkeypatch,
                                                             caplog):
    from agent.sources.shared import SWITCH_S

    clock = Clock(1_800_000_000.0)
    hub, w0, w1 = _two_readings_hub(tmp_path, loopback_http, monkeypatch, clock)
    metrics = AgentMetrics()
    metrics.publisher_on()
    w1.metrics = metrics
    try:
        hub.manager.poll_all()
        hub.publish()
        assert w0.refresh() and w1.refresh()
        hub.manager.poll_all()
        clock.t += 5
        hub.publish()  # 102 from t + 6
        assert w0.refresh()
        clock.t += SWITCH_S + 2.5  # worker 1's reader stalls past the switch
        assert _used(w0) == 102.0 and _used(w1) == 101.0  # the divergence it must not hide
        with caplog.at_level(logging.WARNING, logger="carbonspan.sources"):
            assert w1.refresh()
        assert w1.late == 1 and w0.late == 0
        assert "read the supervisor's [sources] readings late (seq 1 -> 2, 2.5 s" in caplog.text
        assert "carbonspan_sources_switch_late_total 1.0" in metrics.exposition().decode()
        clock.t += 1
        hub.publish()  # a heartbeat, read in time: nothing more
        assert w1.refresh() and w1.late == 1
    finally:
        hub.stop()


def test_a_fifo_or_a_symlink_in_the_directory_neither_blocks_nor_is_followed(tmp_path):
    """A foreign process puts a FIFO where worker 0's ops file goes (opening it for reading
    would wait for a writer, for good), a symlink for readings.json, and a symlink at the
    publisher's temporary name towards a file of its choosing."""
    directory = sources_dir(tmp_path, "a")
    hub = SignalHub(SourceManager.from_config({}), directory, 1)
    hub.start()
    try:
        os.mkfifo(ops_file(directory, 0))
        done = threading.Thread(target=hub.collect_ops, daemon=True)
        done.start()
        done.join(20)
        assert not done.is_alive(), "the publisher blocked on a FIFO"
        assert hub.ops_unreadable == 1

        victim = tmp_path / "victim"
        victim.write_text("keep me")
        (directory / f"{READINGS}.{os.getpid()}.tmp").symlink_to(victim)
        hub.publish()  # written beside readings.json, not through the link
        assert victim.read_text() == "keep me"
        assert json.loads((directory / READINGS).read_bytes())["run"] == hub.run

        good = directory / "elsewhere.json"
        good.write_bytes((directory / READINGS).read_bytes())
        (directory / READINGS).unlink()
        (directory / READINGS).symlink_to(good)
        link = SharedSignals(directory, 0)
        assert not link.refresh() and link.unreadable == 1
    finally:
        hub.stop()


def test_a_dead_publisher_is_seen_even_if_the_clock_stepped_back(tmp_path):
    directory = sources_dir(tmp_path, "a")
    clock = Clock(1_800_000_000.0)
    hub = SignalHub(SourceManager.from_config({}), directory, 1, clock=clock)
    hub.open()
    hub.publish()
    link = SharedSignals(directory, 0, clock=clock)
    assert link.refresh() and not link.silent
    hub.stop()  # the supervisor dies; then NTP steps the clock back an hour
    clock.t -= 3600
    link.refresh()
    assert link.silent and link.silences == 1  # not hidden for the hour it takes to catch up


def test_after_the_supervisors_death_the_next_run_counts_only_its_own_workers_ops(
        start_agent, loopback_http, tmp_path):
    """Real processes: kill -9 the supervisor (its workers drain and exit), start again on the
    same archive dir: the new run has a new ``run`` token, its workers take it, and the op
    counter holds only the new workers' ops (none of the previous run's totals)."""
    upstream = Upstream()
    base = loopback_http(upstream.answer)
    root = tmp_path / "archives"
    shared = root / ".test-agent.sources"
    env = {"TEST_EM_KEY": "key"}

    def run_once(first: int) -> tuple[str, dict]:
        agent = start_agent("--workers", "2", config=config(base, tmp_path / "s.jsonl"),
                            env=env, root=root)
        answered: set[str] = set()
        for i in range(200):
            answered.add(post(agent, first + i).split()[0])
            if len(answered) == 2 and i >= 3:
                break
        assert answered == {"0/2", "1/2"}

        def summed():
            doc = json.loads((shared / READINGS).read_bytes())
            files = [json.loads(p.read_bytes()) for p in (ops_file(shared, 0), ops_file(shared, 1))
                     if p.exists()]
            ok = (len(files) == 2 and all(f["run"] == doc["run"] for f in files)
                  and all(f["totals"].get("checkout", 0) > 0 for f in files)
                  and doc["ops_totals"].get("checkout")
                  == sum(f["totals"]["checkout"] for f in files))
            return (doc["run"], doc) if ok else None

        got = wait_for(summed, timeout=30, what="the supervisor sums this run's workers' ops")
        return agent, got

    def archived_ops() -> int:
        return sum(row["io_ops"] for chain in ("test-agent-w0", "test-agent-w1")
                   for _, rec in read_records(root / chain)
                   for row in rec["report"]["green_summary"]["regions"])

    agent, (run1, _) = run_once(1)
    pids = [int(m) for m in re.findall(r"worker \d+/\d+ \(pid (\d+)\) ready", agent.stdout_text())]
    agent.kill9()
    wait_for(lambda: all(not os.path.exists(f"/proc/{p}") or "zombie" in
                         open(f"/proc/{p}/status").read().lower() for p in pids),
             timeout=30, what="the first run's workers to exit")
    first = archived_ops()  # they drained: every op of the first run is archived
    assert first > 0
    agent2, (run2, doc) = run_once(1000)
    assert run2 != run1 and doc["ops_unreadable"] == 0
    assert agent2.stop() == 0
    final = [json.loads(ops_file(shared, k).read_bytes()) for k in (0, 1)]
    assert all(f["run"] == run2 for f in final)
    # the second run's workers' totals are exactly what it archived, none of the first run's
    assert sum(f["totals"]["checkout"] for f in final) == archived_ops() - first


def test_a_power_poll_takes_in_the_workers_latest_ops(tmp_path, loopback_http):
    """The supervisor's power source pairs its joules with the ops the workers wrote just
    before the poll, not only with those the last publish (up to a second before) collected."""
    expo = (b'# TYPE scaph_process_power_consumption_microwatts gauge\n'
            b'scaph_process_power_consumption_microwatts{pid="1",exe="checkout",'
            b'cmdline="/usr/bin/checkout"} 12000000\n')
    url = loopback_http(lambda path, _h: (200, "text/plain; version=0.0.4", expo)) + "/metrics"
    table = {"scaphandre": [{"url": url, "interval_s": 3600,
                             "services": {"checkout": {"exe": "^checkout$"}}}]}
    manager = SourceManager.from_config(table)
    directory = sources_dir(tmp_path, "a")
    hub = SignalHub(manager, directory, 1)
    hub.start()  # the first poll: no interval yet
    try:
        link = SharedSignals(directory, 0)
        assert link.refresh()
        link.ops.add({"checkout": 100})
        link.write_ops()  # no publish since: only the poll itself can take these in
        manager.poll_all()
        rate = manager.current().measured.get("checkout")
        assert rate is not None and rate.tag == "scaphandre_rapl", manager.current().measured
        assert manager.ops.totals() == {"checkout": 100}
    finally:
        hub.stop()
