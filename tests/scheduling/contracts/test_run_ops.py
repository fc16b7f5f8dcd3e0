"""`carbonspan run` decides with an operations state (restore failures and releases from its own
log, the kill switch from the platform's --ops file), under a flock so concurrent wrappers do not
race past the herd cap, and only with a licence for exactly this contract and code; all as real
`carbonspan run` processes (docs/contracts.md, "carbonspan run")."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from test_cli_contracts import CLI, cli, licensed, live, live_contract, z

from scheduling.contracts import parse_contract
from scheduling.decide import Guards
from scheduling.run_ops import ops_from_log
from schema.chainlog import append, events

FAIL_RESTORE = "import os; open(os.environ['CARBONSPAN_RESTORE_FAILED_FILE'], 'w')"


def decisions(log: Path) -> list[dict]:
    return [e for e in events(log) if e["type"] == "run-decision"]


def wait_for(pred, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not pred():
        time.sleep(0.1)
    assert pred(), "timed out"


def test_two_restore_failures_today_stop_moves_and_yesterdays_do_not(tmp_path: Path) -> None:
    c, s = live(tmp_path)
    log = tmp_path / "run.log"
    yesterday = datetime.now(UTC) - timedelta(days=1)
    for k in range(2):  # two failures a local day ago: they do not count today
        append(log, {"type": "run-outcome", "run_id": f"y{k}", "job": "reindex", "outcome": "ran", "exit_status": 0,
                     "started": z(yesterday), "finished": z(yesterday), "ran": True, "checkpoint_restore_failed": True})
    args = ["run", "--contract", str(c), "--signal", str(s), "--log", str(log), "--"]
    for k in range(2):  # the first run is eligible, and so is the second (one failure today)
        r = cli(*args, sys.executable, "-c", FAIL_RESTORE)
        assert r.returncode == 0 and "reported a failed checkpoint restore" in r.stderr, r.stderr
        d = decisions(log)[-1]["decision"]
        assert (d["reason"], d["action"]) == ("lowest_score", "defer"), (k, d)
    assert [e["checkpoint_restore_failed"] for e in events(log) if e["type"] == "run-outcome"][-2:] == [True, True]
    r = cli(*args, sys.executable, "-c", "pass")
    assert r.returncode == 0, r.stderr
    last = decisions(log)[-1]
    assert (last["decision"]["layer"], last["decision"]["reason"]) == ("safety_gates", "restore_failures")
    assert last["decision"]["start"] == last["decision"]["decided_at"]  # not moved: fallback run_at_submit
    assert len(last["ops"]["restore_failures"]) == 4  # the two of yesterday listed, not counted
    assert events(log)[-1]["checkpoint_restore_failed"] is False
    other = tmp_path / "other.yaml"  # another job's failures never count
    other.write_text(json.dumps({"workload_contract": {**json.loads(c.read_text())["workload_contract"],
                                                       "name": "other"}}))
    r = cli("run", "--contract", str(other), "--signal", str(s), "--log", str(log), "--", sys.executable, "-c", "pass")
    assert r.returncode == 0 and decisions(log)[-1]["decision"]["reason"] == "lowest_score", r.stderr


def test_concurrent_wrappers_do_not_race_past_the_herd_cap(tmp_path: Path) -> None:
    cap = 2
    contract = live_contract()
    audit = licensed(tmp_path, contract, Guards(release_cap=cap))
    c, s = live(tmp_path, contract)
    g = tmp_path / "g.yaml"
    g.write_text(f"release_cap: {cap}\n")
    log = tmp_path / "run.log"
    procs = [subprocess.Popen([*CLI, "run", "--contract", str(c), "--signal", str(s), "--guards", str(g), "--log", str(log),
                               "--enforce", "--audit-log", str(audit), "--", sys.executable, "-c", "pass"],
                              stderr=subprocess.PIPE, text=True) for _ in range(cap + 1)]
    try:
        wait_for(lambda: log.exists() and log.read_text().strip() and len(decisions(log)) == cap + 1)
        time.sleep(0.3)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [143] * (cap + 1)
    ds = decisions(log)
    assert all(e["licensed"] for e in ds), [e["licence"] for e in ds]
    green = ds[0]["decision"]["start"]
    assert [e["decision"]["start"] for e in ds[:cap]] == [green] * cap
    refused = ds[cap]["decision"]
    assert refused["start"] != green and refused["reason"] == "lowest_score"
    assert {"region": "r1", "start": green, "layer": "safety_gates", "reason": "herd_cap"} in refused["vetoes"]
    assert ds[cap]["ops"]["released_slots"] == {f"r1 {green}": cap}
    # the cancelled waits release their slot: the next wrapper may take the green slot again
    ops, _ = ops_from_log(events(log), parse_contract(contract), "enforce", int(time.time() * 1000), Guards(release_cap=cap),
                          None)
    assert ops.released == {}


def test_kill_switch_from_the_platforms_ops_file_runs_at_once(tmp_path: Path) -> None:
    contract = live_contract()
    audit = licensed(tmp_path, contract)
    c, s = live(tmp_path, contract)
    ops, log, marker = tmp_path / "ops.json", tmp_path / "run.log", tmp_path / "ran"
    now = datetime.now(UTC)
    ops.write_text(json.dumps({"queue_age_minutes": 90, "retry_rate": 0.0, "observed_at": z(now)}))
    r = cli("run", "--contract", str(c), "--signal", str(s), "--log", str(log), "--enforce", "--audit-log", str(audit),
            "--ops", str(ops), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert r.returncode == 0 and marker.exists(), r.stderr
    d = decisions(log)[-1]
    assert d["licensed"] is True and d["action"] == "run at once"
    assert (d["decision"]["reason"], d["decision"]["action"]) == ("kill_switch", "start_now")
    assert d["ops"]["platform"]["queue_age_minutes"] == 90
    ops.write_text(json.dumps({"queue_age_minutes": 1, "retry_rate": 0.0, "observed_at": z(now - timedelta(hours=2))}))
    r = cli("run", "--contract", str(c), "--signal", str(s), "--log", str(log), "--ops", str(ops), "--",
            sys.executable, "-c", "pass")
    assert r.returncode == 0 and "minutes old (stale_minutes 60)" in r.stderr and "undecided" in r.stderr


def test_an_edited_contract_has_no_licence_until_it_is_shadowed_again(tmp_path: Path) -> None:
    contract = live_contract()
    audit = licensed(tmp_path, contract)
    later = datetime.fromisoformat(contract["deadline"].replace("Z", "+00:00")) + timedelta(hours=1)
    c, s = live(tmp_path, {**contract, "deadline": z(later)})
    log = tmp_path / "run.log"
    r = cli("run", "--contract", str(c), "--signal", str(s), "--log", str(log), "--enforce", "--audit-log", str(audit),
            "--", sys.executable, "-c", "pass")
    assert r.returncode == 0 and "not licensed for reindex" in r.stderr, r.stderr
    assert "a changed policy has no evaluation until it is re-evaluated" in r.stderr
    d = decisions(log)[-1]
    assert d["licensed"] is False and d["action"] == "run at once" and d["decision"]["action"] == "defer"


def test_a_licence_withdrawn_while_waiting_runs_the_job_at_once(tmp_path: Path) -> None:
    contract = live_contract()
    audit = licensed(tmp_path, contract)
    c, s = live(tmp_path, contract)
    log, marker = tmp_path / "run.log", tmp_path / "ran"
    p = subprocess.Popen([*CLI, "run", "--contract", str(c), "--signal", str(s), "--log", str(log), "--enforce",
                          "--audit-log", str(audit), "--recheck-seconds", "1", "--",
                          sys.executable, "-c", f"open({str(marker)!r}, 'w')"], stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: log.exists() and log.read_text().strip() != "")
        assert decisions(log)[0]["action"].startswith("wait until")
        with audit.open("a") as fh:  # a broken audit log licenses nothing (the gate fails closed)
            fh.write("not a record\n")
        code = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert code == 0 and marker.exists()
    kinds = [e["type"] for e in events(log)]
    assert kinds == ["run-decision", "run-licence-withdrawn", "run-outcome"]
    assert "withdrawn while waiting" in p.stderr.read()


def test_the_shadow_identity_is_the_contracts_content_the_guards_and_the_deciding_code() -> None:
    from test_cli_contracts import JOB

    from scheduling import contracts, decide, signals
    from scheduling.contracts import parse_contract as parse
    from scheduling.shadow_evidence import deciding_code, shadow_identity

    base = shadow_identity(parse(JOB), Guards())
    reordered = dict(reversed(list(JOB.items())))
    assert shadow_identity(parse({**reordered, "fallback": "run_at_submit"}), Guards()) == base  # layout, a default
    assert shadow_identity(parse({**JOB, "deadline": "07:00"}), Guards()) != base
    assert shadow_identity(parse({**JOB, "max_deferral_minutes": 200}), Guards()) != base
    assert shadow_identity(parse(JOB), Guards(stale_minutes=59)) != base
    assert {decide, contracts, signals} <= set(deciding_code())
