"""`carbonspan shadow` and `carbonspan run` as real processes: decisions, reports, evidence for the
placement gate, the licence, and the wrapper under SIGTERM (docs/contracts.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from scheduling.contracts import parse_contract
from scheduling.decide import Guards
from scheduling.runs import read_runs
from scheduling.shadow import shadow_events, write_log
from scheduling.shadow_evidence import licence, record, shadow_identity
from scheduling.shadow_report import report
from scheduling.signals import parse_lines
from schema.chainlog import events

CLI = [sys.executable, "-m", "carbonspan"]
JOB = {"name": "reindex", "class": "flexible", "deadline": "06:00", "timezone": "UTC", "max_deferral_minutes": 240,
       "runtime": {"p50_minutes": 30, "p95_minutes": 60}, "energy_kwh": 10, "residency": ["r1"], "home_region": "r1",
       "checkpoint": "required", "cancellation": "safe"}


def z(d: datetime) -> str:
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


def rows(t0: datetime, hours: float, dip_at: datetime | None, issued: datetime | None = None) -> list[dict]:
    """15-minute intervals from t0: 300 g, 100 g for 30 minutes from ``dip_at``; observations
    (known a minute after their end) or, with ``issued``, a forecast issued then."""
    out = []
    for i in range(int(hours * 4)):
        s = t0 + timedelta(minutes=15 * i)
        v = 100.0 if dip_at is not None and dip_at <= s < dip_at + timedelta(minutes=30) else 300.0
        r = {"region": "r1", "start": z(s), "end": z(s + timedelta(minutes=15)), "value": v, "source": "grid",
             "signal_type": "average", "version": "v1"}
        r.update({"issued_at": z(issued)} if issued else {"observed_at": z(s + timedelta(minutes=16))})
        out.append(r)
    return out


def write_jsonl(p: Path, items: list[dict]) -> Path:
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in items))
    return p


def cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, **kw)


@pytest.fixture
def day(tmp_path: Path) -> dict[str, Path]:
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    sig = rows(t0 - timedelta(hours=1), 8, t0 + timedelta(hours=3)) + \
        rows(t0, 6, t0 + timedelta(hours=3), issued=t0 + timedelta(minutes=50))
    (tmp_path / "c.yaml").write_text(json.dumps({"workload_contract": JOB}))
    write_jsonl(tmp_path / "s.jsonl", sig)
    write_jsonl(tmp_path / "runs.jsonl", [{"job": "reindex", "run_id": "a", "submitted": "2026-03-01T01:00:00Z",
                                           "started": "2026-03-01T01:00:00Z", "finished": "2026-03-01T01:30:00Z",
                                           "region": "r1", "energy_kwh": 10}])
    return {"c": tmp_path / "c.yaml", "s": tmp_path / "s.jsonl", "runs": tmp_path / "runs.jsonl", "dir": tmp_path}


def test_shadow_decide_prints_the_layer_and_reason(day) -> None:
    r = cli("shadow", "decide", "--contracts", str(day["c"]), "--job", "reindex", "--at", "2026-03-01T01:00:00Z",
            "--signal", str(day["s"]), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["start"], d["layer"], d["reason"], d["action"]) == ("2026-03-01T03:00:00Z", "soft_objective", "lowest_score", "defer")
    r = cli("shadow", "decide", "--contracts", str(day["c"]), "--job", "reindex", "--at", "2026-03-01T04:30:00Z",
            "--signal", str(day["s"]))
    assert r.returncode == 0 and "reason deadline_guard" in r.stdout
    r = cli("shadow", "decide", "--contracts", str(day["c"]), "--job", "nope", "--at", "2026-03-01T01:00:00Z",
            "--signal", str(day["s"]))
    assert r.returncode == 2 and "no such contract" in r.stderr


def test_shadow_decide_says_why_the_signal_is_stale(day) -> None:
    """signal_stale is said with its cause: no observation of the job's region (naming what the
    log holds instead), or the latest one too old."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    elsewhere = [{**r, "region": "r9"} for r in rows(t0, 4, None)]
    other = write_jsonl(day["dir"] / "r9.jsonl", elsewhere)
    r = cli("shadow", "decide", "--contracts", str(day["c"]), "--job", "reindex", "--at", "2026-03-01T01:00:00Z",
            "--signal", str(other))
    assert r.returncode == 0 and "reason signal_stale" in r.stdout, r.stderr
    assert (f"signal_stale: {other} holds no observed intensity of r1 (observations of r9); the decision "
            "needs an observation of the region it runs in") in r.stdout
    # observations of r1 that end an hour and a half before the decision (stale_minutes 60 by default)
    old = write_jsonl(day["dir"] / "old.jsonl", rows(t0, 1, None))
    r = cli("shadow", "decide", "--contracts", str(day["c"]), "--job", "reindex", "--at", "2026-03-01T02:30:00Z",
            "--signal", str(old))
    assert r.returncode == 0 and "reason signal_stale" in r.stdout, r.stderr
    assert ("signal_stale: the latest observation of r1 ended 2026-03-01T01:00:00Z, 90 min before the "
            "decision, at least the guards' stale_minutes 60") in r.stdout


def test_shadow_run_and_report_on_a_real_process(day) -> None:
    log = day["dir"] / "shadow.log"
    r = cli("shadow", "run", "--contracts", str(day["c"]), "--runs", str(day["runs"]), "--signal", str(day["s"]),
            "--log", str(log))
    assert r.returncode == 0 and "1 decisions for 1 runs (jsonl)" in r.stdout, r.stderr
    r = cli("shadow", "run", "--contracts", str(day["c"]), "--runs", str(day["runs"]), "--signal", str(day["s"]),
            "--log", str(log))
    assert r.returncode == 2 and "never rewritten" in r.stderr
    html = day["dir"] / "r.html"
    r = cli("shadow", "report", str(log), "--json", "--html", str(html))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["total"]["avoided_kgco2e_measured"] == pytest.approx([1.0, 2.0])
    assert "<table>" in html.read_text()
    r = cli("shadow", "report", str(log))
    assert "measured 1.000 .. 2.000" in r.stdout


def fortnight(tmp_path: Path, days: int, contract: dict | None = None, guards: Guards | None = None) -> Path:
    """``days`` daily runs at 01:00 with a dip at 03:00 each night: the shadow recommends 03:00
    (of ``contract``, JOB by default, under ``guards``)."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    sig, runs = [], []
    for k in range(days):
        d = t0 + timedelta(days=k)
        sig += rows(d - timedelta(hours=1), 8, d + timedelta(hours=3))
        sig += rows(d, 6, d + timedelta(hours=3), issued=d + timedelta(minutes=50))
        runs.append({"job": "reindex", "run_id": f"r{k}", "submitted": z(d + timedelta(hours=1)),
                     "started": z(d + timedelta(hours=1)), "finished": z(d + timedelta(hours=1.5)), "energy_kwh": 10})
    evs = shadow_events({"reindex": parse_contract(contract or JOB)},
                        read_runs(write_jsonl(tmp_path / "runs14.jsonl", runs)),
                        parse_lines([orjson.dumps(r) for r in sig]), guards)
    log = tmp_path / f"shadow{days}.log"
    write_log(log, evs)
    return log


def test_a_fortnight_of_shadow_wins_licenses_the_job_and_less_does_not(tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    ident = shadow_identity(parse_contract(JOB), Guards())
    assert licence("reindex", ident, audit)[0] is False
    short = report(fortnight(tmp_path, 14))  # 14 runs span 13 days: not yet evidence
    assert short["total"]["days"] == 13 and not short["total"]["real_evidence"]
    record(short, audit)
    ok, why = licence("reindex", ident, audit)
    assert not ok and "synthetic" in why
    doc = report(fortnight(tmp_path, 15))
    assert doc["total"]["real_evidence"] and doc["total"]["avoided_kgco2e_measured"] == pytest.approx([15.0, 30.0])
    rec = record(doc, audit)
    assert rec["reindex"]["verdict"] == "ship-candidate"
    ok, why = licence("reindex", ident, audit)
    assert ok, why
    assert not licence("reindex", shadow_identity(parse_contract(JOB), Guards(release_cap=3)), audit)[0]  # other guards
    edited = shadow_identity(parse_contract({**JOB, "deadline": "07:00"}), Guards())
    ok, why = licence("reindex", edited, audit)  # an edited contract is another policy until re-shadowed
    assert not ok and "a changed policy has no evaluation" in why
    ev = events(audit)[-1]
    assert ev["policy"] == "shadow:reindex" and ev["trace"]["synthetic"] is False and ev["delta_pp"] > 0


def live_contract() -> dict:
    """JOB around the real clock (deadline ten hours ahead) in a zone where it is about noon now,
    so a local day does not end while a test runs."""
    now = datetime.now(UTC)
    off = 12 - now.hour
    tz = "Etc/GMT" if off == 0 else f"Etc/GMT{'-' if off > 0 else '+'}{abs(off)}"  # Etc signs are inverted
    return {**JOB, "deadline": z(now.replace(second=0, microsecond=0) + timedelta(hours=10)), "timezone": tz}


def live(tmp_path: Path, contract: dict | None = None) -> tuple[Path, Path]:
    """A contract and signal log around the real clock: a dip two hours from now."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    slot = now - timedelta(minutes=now.minute % 15)
    dip = slot + timedelta(hours=2)
    sig = rows(slot - timedelta(hours=2), 2, None) + rows(slot, 8, dip, issued=now - timedelta(minutes=1))
    (tmp_path / "live.yaml").write_text(json.dumps({"workload_contract": contract or live_contract()}))
    return tmp_path / "live.yaml", write_jsonl(tmp_path / "live.jsonl", sig)


def licensed(tmp_path: Path, contract: dict, guards: Guards | None = None) -> Path:
    """An audit log holding a fortnight's shadow win of ``contract`` under ``guards``."""
    audit = tmp_path / "audit.log"
    rec = record(report(fortnight(tmp_path, 15, contract, guards)), audit)
    assert rec["reindex"]["verdict"] == "ship-candidate"
    return audit


def test_run_shadow_mode_runs_at_once_and_keeps_the_exit_status(tmp_path: Path) -> None:
    c, s = live(tmp_path)
    log = tmp_path / "run.log"
    marker = tmp_path / "ran"
    r = cli("run", "--contract", str(c), "--signal", str(s), "--log", str(log), "--",
            sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x'); raise SystemExit(7)")
    assert r.returncode == 7 and marker.exists(), r.stderr
    decision, outcome = events(log)
    assert decision["mode"] == "shadow" and decision["decision"]["action"] == "defer"
    assert decision["action"] == "run at once" and (outcome["outcome"], outcome["exit_status"]) == ("ran", 7)


def test_run_says_on_stderr_what_it_decided_that_it_is_shadow_mode_and_where_it_recorded(tmp_path: Path) -> None:
    c, s = live(tmp_path)
    log = tmp_path / "run.log"
    r = cli("run", "--contract", str(c), "--signal", str(s), "--log", str(log), "--", sys.executable, "-c", "print(1)")
    assert r.returncode == 0 and r.stdout == "1\n", r.stderr  # the command's stdout untouched
    decided, shadow = r.stderr.splitlines()
    d = events(log)[0]["decision"]
    assert d["action"] == "defer" and d["start"] > d["decided_at"]
    assert decided.startswith(f"carbonspan run: reindex: would start {d['start']} in r1, "
                              f"{d['deferral_minutes']:.0f} min from now (defer; soft_objective/lowest_score; "
                              f"forecast {d['forecast']['intensity_at_decision']:.0f} gCO2e/kWh"), decided
    assert shadow == ("carbonspan run: shadow mode: the command runs now, not at the decided start "
                      f"(pass --enforce to wait for it); decision recorded in {log}:1")
    # without --signal optimisation is off, and it says so; the record is the log's third line
    r = cli("run", "--contract", str(c), "--log", str(log), "--", sys.executable, "-c", "print(1)")
    assert r.returncode == 0 and r.stdout == "1\n", r.stderr
    assert r.stderr.splitlines() == [
        "carbonspan run: reindex: start now in r1 (run_at_submit; safety_gates/signal_stale: no --signal given, "
        "optimisation is off)",
        f"carbonspan run: shadow mode: the command runs now; decision recorded in {log}:3"]
    assert events(log)[2]["decision"]["reason"] == "signal_stale"


def test_run_enforce_unlicensed_runs_at_once_and_says_why(tmp_path: Path) -> None:
    c, s = live(tmp_path)
    r = cli("run", "--contract", str(c), "--signal", str(s), "--log", str(tmp_path / "l"), "--enforce",
            "--audit-log", str(tmp_path / "audit.log"), "--", sys.executable, "-c", "pass")
    assert r.returncode == 0 and "not licensed for reindex" in r.stderr
    assert events(tmp_path / "l")[0]["licensed"] is False


def test_run_enforce_licensed_waits_and_sigterm_runs_nothing(tmp_path: Path) -> None:
    contract = live_contract()
    audit = licensed(tmp_path, contract)
    c, s = live(tmp_path, contract)
    log, marker = tmp_path / "run.log", tmp_path / "ran"
    p = subprocess.Popen([*CLI, "run", "--contract", str(c), "--signal", str(s), "--log", str(log), "--enforce",
                          "--audit-log", str(audit), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (log.exists() and log.read_text().strip()):
            time.sleep(0.1)
        assert log.exists(), "the wrapper never recorded its decision"
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert code == 143 and not marker.exists()
    decision, outcome = events(log)
    assert decision["licensed"] is True and decision["action"].startswith("wait until")
    assert (outcome["outcome"], outcome["ran"]) == ("cancelled_while_waiting", False)
    said = p.stderr.read()
    assert "SIGTERM while waiting" in said
    assert f"enforce: licensed; waiting until {decision['decision']['start']} to start in r1" in said, said
    assert f"decision recorded in {log}:1" in said and "reindex: starts " in said


def test_bad_contract_still_runs_the_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"workload_contract": {**JOB, "class": "whenever"}}))
    r = cli("run", "--contract", str(bad), "--log", str(tmp_path / "l"), "--", sys.executable, "-c", "raise SystemExit(3)")
    assert r.returncode == 3 and "field `class`" in r.stderr and "running the command at once" in r.stderr
    decision, outcome = events(tmp_path / "l")  # the outcome is recorded undecided too
    assert decision["mode"] == "error" and "field `class`" in decision["error"]
    assert (outcome["type"], outcome["outcome"], outcome["exit_status"]) == ("run-outcome", "ran", 3)


def test_metrics_text_file_from_the_shadow_log(day) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    log, prom = day["dir"] / "shadow.log", day["dir"] / "m.prom"
    r = cli("shadow", "run", "--contracts", str(day["c"]), "--runs", str(day["runs"]), "--signal", str(day["s"]),
            "--log", str(log), "--metrics", str(prom))
    assert r.returncode == 0, r.stderr
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(prom.read_text()) for s in fam.samples}
    assert samples[("carbonspan_contract_decisions_total",
                    (("contract", "reindex"), ("layer", "soft_objective"), ("reason", "lowest_score")))] == 1
    assert samples[("carbonspan_contract_deferral_minutes_bucket", (("contract", "reindex"), ("le", "60.0")))] == 0
    assert samples[("carbonspan_contract_deferral_minutes_bucket", (("contract", "reindex"), ("le", "120.0")))] == 1
    assert samples[("carbonspan_contract_deadline_slack_minutes", (("contract", "reindex"),))] == 120
    # at 01:00 the latest known interval is 00:30-00:45 (00:45-01:00 is known at 01:01): 15 minutes old
    assert samples[("carbonspan_contract_signal_staleness_minutes", (("region", "r1"),))] == 15
    assert samples[("carbonspan_contract_kill_switch", (("contract", "reindex"),))] == 0


def test_signals_from_saved_gb_and_electricitymaps_answers(tmp_path: Path) -> None:
    gb = {"data": [
        {"from": "2026-03-01T00:00Z", "to": "2026-03-01T00:30Z", "intensity": {"forecast": 180, "actual": 175, "index": "moderate"}},
        {"from": "2026-03-01T00:30Z", "to": "2026-03-01T01:00Z", "intensity": {"forecast": 170, "actual": None, "index": "moderate"}},
        {"from": "2026-03-01T01:00Z", "to": "2026-03-01T01:30Z", "intensity": {"forecast": 150, "actual": None, "index": "low"}}]}
    (tmp_path / "gb.json").write_text(json.dumps(gb))
    out = tmp_path / "s.jsonl"
    r = cli("shadow", "signals", "--gb", str(tmp_path / "gb.json"), "--fetched-at", "2026-03-01T00:40:00Z", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "observations 1, forecasts 1, past_forecasts_left_out 1" in r.stdout
    em = {"zone": "DE", "history": [{"zone": "DE", "carbonIntensity": 302, "datetime": "2026-03-01T00:00:00.000Z",
                                     "updatedAt": "2026-03-01T01:05:00.000Z", "emissionFactorType": "lifecycle",
                                     "isEstimated": False},
                                    {"zone": "DE", "carbonIntensity": None, "datetime": "2026-03-01T01:00:00.000Z",
                                     "updatedAt": "2026-03-01T02:05:00.000Z"}]}
    (tmp_path / "em.json").write_text(json.dumps(em))
    r = cli("shadow", "signals", "--electricitymaps", str(tmp_path / "em.json"), "--out", str(out))
    assert r.returncode == 0 and "observations 1, forecasts 0, empty 1" in r.stdout, r.stderr
    sig = parse_lines(out.read_bytes().splitlines())
    assert sig.latest("GB") == (ms_of("2026-03-01T00:30:00Z"), 175.0, "gb-carbon-intensity", "api-2.0")
    assert sig.as_of(ms_of("2026-03-01T00:39:00Z")).latest("GB") is None  # known only when fetched
    assert sig.forecast_issue("GB", ms_of("2026-03-01T00:40:00Z")) == "2026-03-01T00:40:00Z"
    assert sig.latest("DE")[1:3] == (302.0, "electricitymaps")
    r = cli("shadow", "signals", "--gb", str(tmp_path / "gb.json"), "--out", str(out))
    assert r.returncode == 2 and "--fetched-at" in r.stderr
    before = out.read_bytes()
    r = cli("shadow", "signals", "--gb", str(tmp_path / "gb.json"), "--fetched-at", "2026-03-01T00:40:00Z", "--out", str(out))
    assert r.returncode == 0 and "appended 0 rows" in r.stdout and "(2 already in it)" in r.stdout
    assert out.read_bytes() == before  # the same answer imported twice adds nothing
    rte = {"total_count": 2, "results": [{"date_heure": "2026-03-01T00:15:00+00:00", "taux_co2": 21},
                                         {"date_heure": "2026-03-01T00:00:00+00:00", "taux_co2": 24}]}
    (tmp_path / "rte.json").write_text(json.dumps(rte))
    r = cli("shadow", "signals", "--rte", str(tmp_path / "rte.json"), "--fetched-at", "2026-03-01T00:35:00Z",
            "--region", "eu-west-3", "--out", str(out))
    assert r.returncode == 0 and "appended 2 rows" in r.stdout and "observations 2" in r.stdout, r.stderr
    sig = parse_lines(out.read_bytes().splitlines())
    assert sig.latest("eu-west-3") == (ms_of("2026-03-01T00:30:00Z"), 21.0, "rte-eco2mix",
                                       "eco2mix-national-tr/taux_co2-direct")


def ms_of(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.mark.parametrize(("text", "words"), [
    ("slot_minutes: 0\n", "slot_minutes 0 must be at least 1"),  # was a ZeroDivisionError traceback
    ("release_cap: 2.5\n", "['release_cap'] must be whole numbers"),
    ("restore_failures: .inf\n", "must be finite numbers >= 0"),
    ("stale_minutes: yes\n", "must be finite numbers >= 0"),
    ("- stale_minutes\n", "expected a mapping of guard settings"),
    ("stale_mintues: 30\n", "unknown guard setting(s) ['stale_mintues']"),
])
def test_a_bad_guard_file_is_a_message_naming_the_setting(day, text: str, words: str) -> None:
    g = day["dir"] / "g.yaml"
    g.write_text(text)
    r = cli("shadow", "decide", "--contracts", str(day["c"]), "--job", "reindex", "--at", "2026-03-01T01:00:00Z",
            "--signal", str(day["s"]), "--guards", str(g))
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_whole_number_guards_load_as_integers(tmp_path: Path) -> None:
    from scheduling.cli_shadow import load_guards

    g = tmp_path / "g.yaml"
    g.write_text("slot_minutes: 30.0\nrelease_cap: 10\nstale_minutes: 45.5\n")
    got = load_guards(g)
    assert (got.slot_minutes, got.release_cap, got.stale_minutes) == (30, 10, 45.5)
    assert isinstance(got.slot_minutes, int)
