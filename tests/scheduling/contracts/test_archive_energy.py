"""A contract's `service:` energy read from carbonspan archives (docs/contracts.md, "Energy from
archives"): archives written by the agent's own writer (``agent.archive.ArchiveWriter``) and by
a real agent process, per-run energy pro rata over the windows the run overlaps, summed over
agents; a run without (complete) archived windows is not measured, never zero; a broken chain
is refused; `carbonspan shadow run --archives` and `shadow report` on real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from agent_process import AgentProcess, wait_for

from agent.archive import ArchiveWriter
from scheduling.archive_energy import ArchiveError, read_archives, run_energy
from schema.signal_log import to_ms

CLI = [sys.executable, "-m", "carbonspan"]
SERVICE = "reindexer"
JOB = {"name": "reindex", "class": "flexible", "deadline": "06:00", "timezone": "UTC", "max_deferral_minutes": 240,
       "runtime": {"p50_minutes": 30, "p95_minutes": 60}, "service": SERVICE, "residency": ["r1"],
       "home_region": "r1", "checkpoint": "required", "cancellation": "safe"}


def t(hhmm: str) -> str:
    return f"2026-03-01T{hhmm}:00Z"


def write_chain(root: Path, agent: str, windows: list[tuple[str, str, dict[str, float], dict[str, int]]]) -> Path:
    """One agent's chain, sealed and written by the agent's archive writer."""
    w = ArchiveWriter(root / agent)
    w.open()
    for start, end, energy, counters in windows:
        w.append({"version": "1.1", "agent_id": agent,
                  "window": {"start": t(start), "end": t(end), "spans": 10, "traces": 1, "root_spans": 1, "io_ops": 5},
                  "green_summary": {"per_service_energy_kwh": energy}, "counters": counters})
    w.close()
    return root / agent


@pytest.fixture
def archives(tmp_path: Path) -> Path:
    root = tmp_path / "archives"
    write_chain(root, "node-a", [("00:00", "00:10", {SERVICE: 1.0}, {}), ("00:10", "00:20", {SERVICE: 2.0, "web": 9.0}, {}),
                                 ("00:20", "00:30", {SERVICE: 3.0}, {}), ("00:30", "00:40", {"web": 1.0}, {"service_overflow": 3})])
    write_chain(root, "node-b", [("00:05", "00:15", {SERVICE: 0.5}, {}), ("00:15", "00:25", {"web": 1.0}, {})])
    return root


def energy(chains, start: str, end: str):
    return run_energy(chains, SERVICE, to_ms(t(start), "s"), to_ms(t(end), "e"))


def test_energy_per_run_is_pro_rata_over_the_windows_and_summed_over_agents(archives: Path) -> None:
    chains = read_archives(archives)
    assert sorted(chains) == ["node-a", "node-b"] and chains["node-a"].lines == 4
    e = energy(chains, "00:05", "00:25")
    # node-a: half of 1.0 + all of 2.0 + half of 3.0 = 4.0; node-b: all of 0.5, then a window
    # without the service (the agent ran, the service drew nothing there) = 4.5 kWh
    assert e.kwh == pytest.approx(4.5) and e.agents == ("node-a", "node-b") and e.windows == 5
    assert energy(read_archives(archives / "node-a"), "00:05", "00:25").kwh == pytest.approx(4.0)  # one agent dir


def test_a_run_the_archives_do_not_cover_is_not_measured_never_zero(archives: Path) -> None:
    chains = read_archives(archives)
    none = energy(chains, "01:00", "01:10")
    assert none.kwh is None and "no archived window holds service 'reindexer'" in none.reason
    gap = energy(chains, "00:25", "00:45")  # node-a's windows end at 00:40; 00:30-00:40 may hide it
    assert gap.kwh is None and "do not cover the whole run" in gap.reason and "not counted as zero" in gap.reason
    assert ("node-a", t("00:40"), t("00:45")) in gap.missing
    assert ("node-a", t("00:30"), t("00:40")) in gap.missing  # service_overflow: it may be in "(other)"
    partial = energy(chains, "00:12", "00:22")  # node-b holds it, then has nothing after 00:25: covered here
    assert partial.kwh == pytest.approx(2.0 * 0.8 + 3.0 * 0.2 + 0.5 * 0.3)


def test_an_archive_whose_chain_does_not_verify_is_refused(archives: Path) -> None:
    (f,) = sorted((archives / "node-a").glob("windows-*.jsonl"))
    lines = f.read_bytes().splitlines()
    lines[1] = lines[1].replace(b'"reindexer":2.0', b'"reindexer":0.2')
    f.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(ArchiveError, match=r"node-a.*chain does not verify .*:2: hash_mismatch"):
        read_archives(archives)
    with pytest.raises(ArchiveError, match="no such directory"):
        read_archives(archives / "nope")


def signals(path: Path) -> Path:
    """15-minute observations from 23:00 to 07:00 at 300 g with 100 g at 03:00-03:30, and a
    forecast of the same issued at 00:50 (test_cli_contracts' day)."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    out = []
    for issued in (None, t0 + timedelta(minutes=50)):
        for i in range(32):
            s = t0 + timedelta(minutes=15 * i - 60)
            if issued is not None and s < t0:
                continue
            v = 100.0 if t0 + timedelta(hours=3) <= s < t0 + timedelta(hours=3.5) else 300.0
            r = {"region": "r1", "start": s.strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "end": (s + timedelta(minutes=15)).strftime("%Y-%m-%dT%H:%M:%SZ"), "value": v, "source": "grid",
                 "signal_type": "average", "version": "v1"}
            known = issued or s + timedelta(minutes=16)
            r["issued_at" if issued else "observed_at"] = known.strftime("%Y-%m-%dT%H:%M:%SZ")
            out.append(r)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in out))
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_shadow_run_takes_service_energy_from_the_archives(tmp_path: Path) -> None:
    root = tmp_path / "archives"
    write_chain(root, "node-a", [("01:00", "01:10", {SERVICE: 2.5}, {}), ("01:10", "01:20", {SERVICE: 5.0}, {}),
                                 ("01:20", "01:30", {SERVICE: 2.5}, {})])
    (tmp_path / "c.yaml").write_text(json.dumps({"workload_contract": JOB}))
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps({"job": "reindex", "run_id": rid, "submitted": t(a), "started": t(a),
                                        "finished": t(b), "region": "r1"}) + "\n"
                            for rid, a, b in (("a", "01:00", "01:30"), ("b", "02:00", "02:30"))))
    sig = signals(tmp_path / "s.jsonl")
    log = tmp_path / "shadow.log"
    r = cli("shadow", "run", "--contracts", str(tmp_path / "c.yaml"), "--runs", str(runs), "--signal", str(sig),
            "--archives", str(root), "--log", str(log))
    assert r.returncode == 0, r.stderr
    assert "energy from archives (1 agent chain(s) verified): 1 run(s)" in r.stdout
    assert "energy not measured for 1 run(s)" in r.stdout and "no archived window holds service" in r.stdout
    rep = cli("shadow", "report", str(log), "--json")
    assert rep.returncode == 0, rep.stderr
    total = json.loads(rep.stdout)["total"]
    # run a: 10 kWh from the archives (a point, measured), moved into the 03:00 dip:
    # p50 10 x (300 - 100) = 2000 g, p95 10 x (300 - 200) = 1000 g -> 1.0 .. 2.0 kg
    assert total["avoided_kgco2e_measured"] == pytest.approx([1.0, 2.0])
    assert total["runs_measured"] == 1 and total["runs_energy_from_archives"] == 1
    (b,) = total["runs_energy_not_measured"]
    assert b["run_id"] == "b" and "no archived window holds service 'reindexer'" in b["reason"]
    assert "b" in total["runs_not_measured"]
    text = cli("shadow", "report", str(log)).stdout
    assert "energy not measured, run b" in text and "energy from archives: 1 run(s)" in text
    # without --archives nothing is measured, and it says what to give
    r = cli("shadow", "run", "--contracts", str(tmp_path / "c.yaml"), "--runs", str(runs), "--signal", str(sig),
            "--log", str(tmp_path / "shadow2.log"))
    assert r.returncode == 0 and "give --archives DIR" in r.stdout, r.stdout + r.stderr
    assert json.loads(cli("shadow", "report", str(tmp_path / "shadow2.log"), "--json").stdout)["total"][
        "avoided_kgco2e_measured"] is None
    # a tampered archive is refused, naming the break
    (f,) = sorted((root / "node-a").glob("windows-*.jsonl"))
    f.write_bytes(f.read_bytes().replace(b'"reindexer":5.0', b'"reindexer":0.5'))
    r = cli("shadow", "run", "--contracts", str(tmp_path / "c.yaml"), "--runs", str(runs), "--signal", str(sig),
            "--archives", str(root), "--log", str(tmp_path / "shadow3.log"))
    assert r.returncode == 2 and "chain does not verify" in r.stderr and "hash_mismatch" in r.stderr


def _post(agent: AgentProcess, i: int) -> None:
    now = time.time_ns()
    spans = [{"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "UPDATE index", "kind": 3,
              "startTimeUnixNano": str(now - 10**6), "endTimeUnixNano": str(now),
              "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}}]}]
    body = orjson.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": SERVICE}}]}, "scopeSpans": [{"spans": spans}]}]})
    req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def test_energy_of_a_run_traced_by_a_real_agent(tmp_path: Path) -> None:
    root = tmp_path / "archives"
    agent = AgentProcess(root, ["--window-seconds", "2"], {}, '[green]\ndefault_region = "r1"\n').wait_ready()
    try:
        started = time.time()
        i = 0
        while time.time() - started < 5:  # the job runs 5 s, its spans arrive all along
            _post(agent, i)
            i += 1
            time.sleep(0.2)
        finished = time.time()
        assert wait_for(lambda: agent.metric("carbonspan_windows_written_total") >= 2, timeout=15, what="windows")
    finally:
        assert agent.stop() == 0
    chains = read_archives(root)
    ms = lambda x: int(x * 1000)  # noqa: E731
    e = run_energy(chains, SERVICE, ms(started), ms(finished))
    assert e.kwh is not None and e.agents == ("test-agent",), e.reason
    lines = [r["report"] for r in agent.records()]
    total = sum(r["green_summary"]["per_service_energy_kwh"].get(SERVICE, 0.0) for r in lines)
    assert 0 < e.kwh <= total * (1 + 1e-9)
    later = run_energy(chains, SERVICE, ms(finished + 60), ms(finished + 120))  # after the agent stopped
    assert later.kwh is None and "no archived window" in later.reason
