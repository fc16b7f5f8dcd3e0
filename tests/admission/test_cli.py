"""``carbonspan admit simulate|audit`` as a user runs it: a real subprocess on real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from schema import chainlog

CLI = str(Path(sys.executable).with_name("carbonspan"))

POOLS = """
[[pool]]
name = "org"
energy_uj = 1_000
devices = 8

[[pool]]
name = "a"
parent = "org"
energy_uj = 400
devices = 4

[[pool]]
name = "b"
parent = "org"
energy_uj = 400
devices = 4
"""

EVENTS = [
    {"type": "claim", "id": "a1", "pool": "a", "devices": 1, "estimate_uj": 400, "grade": "measured"},
    {"type": "claim", "id": "a2", "pool": "a", "devices": 1, "estimate_uj": 200, "grade": "measured"},
    {"type": "claim", "id": "a3", "pool": "a", "devices": 1, "estimate_uj": 100, "grade": "estimator"},
    {"type": "claim", "id": "a4", "pool": "a", "devices": 9, "estimate_uj": 1, "grade": "measured"},
    {"type": "complete", "workload": "a1", "units": 4, "uj": 300},
    {"type": "claim", "id": "g1", "pool": "b", "devices": 2, "estimate_uj": 100, "grade": "measured", "gang": "g", "gang_size": 2},
    {"type": "claim", "id": "g2", "pool": "b", "devices": 2, "estimate_uj": 100, "grade": "measured", "gang": "g", "gang_size": 2},
    {"type": "release", "workload": "a1"},
    {"type": "rollover"},
]


def _run(*args, cwd):
    return subprocess.run([CLI, "admit", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def _write(tmp_path, events, pools=POOLS):
    (tmp_path / "pools.toml").write_text(pools)
    (tmp_path / "events.jsonl").write_bytes(
        b"\n".join(e if isinstance(e, bytes) else orjson.dumps(e) for e in events) + b"\n"
    )


def test_simulate_json_log_and_audit(tmp_path):
    _write(tmp_path, EVENTS)
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", "--json", "--log", "d.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = orjson.loads(res.stdout)
    got = [(v["event"], v["claim"], v["decision"], v["borrowed_uj"]) for v in out["verdicts"]]
    assert got == [
        ("events.jsonl:1", "a1", "admitted", 0),
        ("events.jsonl:2", "a2", "admitted", 200),
        ("events.jsonl:3", "a3", "pending", 0),  # estimator: a's guarantee is used up
        ("events.jsonl:4", "a4", "denied", 0),  # 9 devices > a's 4, ever
        ("events.jsonl:7", "g1", "admitted", 0),
        ("events.jsonl:7", "g2", "admitted", 0),
        ("events.jsonl:3@9", "a3", "admitted", 0),  # the rollover cleared a1's 300 spent µJ
    ]
    pools = {p["pool"]: p for p in out["pools"]}
    # after rollover: a holds a2 200 + a3 100 reserved; b holds g1 + g2 = 200
    assert (pools["a"]["used_uj"], pools["b"]["used_uj"], pools["org"]["used_uj"]) == (300, 200, 500)
    assert chainlog.verify(tmp_path / "d.jsonl") == []
    audited = _run("audit", "--log", "d.jsonl", cwd=tmp_path)
    assert audited.returncode == 0 and "replays identically" in audited.stdout


def test_simulate_prints_tables(tmp_path):
    _write(tmp_path, EVENTS)
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "verdicts" in res.stdout and "pools (energy in µJ this window)" in res.stdout
    row = next(line for line in res.stdout.splitlines() if line.startswith("  a "))
    assert row.split()[:6] == ["a", "400", "0", "300", "300", "0"]  # guarantee spent reserved used borrowed


def test_simulate_tables_group_the_digits_of_large_figures(tmp_path):
    big = POOLS.replace("1_000", "10_000_000_000_000").replace("energy_uj = 400", "energy_uj = 4_000_000_000_000")
    events = [{"type": "claim", "id": "a1", "pool": "a", "devices": 1, "estimate_uj": 5_400_000_000_000,
               "grade": "measured"}]
    _write(tmp_path, events, big)
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    verdict = next(line for line in lines if line.startswith("events.jsonl:1 "))
    assert "4,000,000,000,000  1,400,000,000,000" in verdict, verdict  # own, borrowed
    pool = next(line for line in lines if line.startswith("  a "))
    assert pool.split()[1:6] == ["4,000,000,000,000", "0", "5,400,000,000,000", "5,400,000,000,000",
                                 "1,400,000,000,000"], pool
    assert "5400000000000" not in res.stdout


@pytest.mark.parametrize(
    "bad_line, message",
    [
        (b'{"type": "claim", "id": "x"', "events.jsonl:2: not valid JSON"),
        (orjson.dumps({"type": "claim", "id": "x", "pool": "zz", "estimate_uj": 1}), "events.jsonl:2: unknown pool 'zz'"),
        (orjson.dumps({"type": "claim", "id": "x", "pool": "a", "estimate_uj": 1.5}), "events.jsonl:2: 'estimate_uj' must be an integer"),
        (orjson.dumps({"type": "teleport"}), "events.jsonl:2: unknown event type 'teleport'"),
        (orjson.dumps({"type": "release"}), "events.jsonl:2: 'workload' must be a workload id"),
        (orjson.dumps({"type": "claim", "id": "x", "pool": "a", "estimate_uj": 1, "colour": 1}), "unknown key(s) ['colour']"),
        (b"[1, 2]", "events.jsonl:2: expected a JSON object"),
    ],
)
def test_a_malformed_event_names_file_line_and_nothing_runs(tmp_path, bad_line, message):
    _write(tmp_path, [EVENTS[0], bad_line, EVENTS[1]])
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", "--log", "d.jsonl", cwd=tmp_path)
    assert res.returncode == 2
    assert message in res.stderr
    assert "nothing was replayed" in res.stderr
    assert res.stdout == "" and not (tmp_path / "d.jsonl").exists()


def test_child_guarantees_exceeding_the_parent_fail_at_load(tmp_path):
    _write(tmp_path, EVENTS, pools=POOLS.replace("energy_uj = 1_000", "energy_uj = 700"))
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", cwd=tmp_path)
    assert res.returncode == 2
    assert "children of pool 'org' guarantee 800 µJ in total, more than its own 700 µJ" in res.stderr


def test_runtime_errors_are_reported_and_the_replay_goes_on(tmp_path):
    _write(tmp_path, [{"type": "release", "workload": "ghost"}, EVENTS[0]])
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", "--json", cwd=tmp_path)
    assert res.returncode == 1
    assert "events.jsonl:1: no running workload 'ghost'" in res.stderr
    assert orjson.loads(res.stdout)["verdicts"][0]["decision"] == "admitted"


def test_service_claims_take_estimate_and_grade_from_archives(tmp_path, archive):
    archive(
        tmp_path / "archives" / "agent-1" / "windows-0001.jsonl",
        [{"ts": "2026-11-30T10:00:00Z", "energy": {"api": 5e-11}, "model": {"api": "scaphandre_rapl"}}],
    )
    events = [
        {"type": "claim", "id": "w", "pool": "a", "estimate_uj": 400, "grade": "estimator"},
        {"type": "claim", "id": "m", "pool": "a", "service": "api"},  # 5e-11 kWh x 3.6e12 = 180 µJ, measured
        {"type": "claim", "id": "u", "pool": "a", "service": "unknown-svc", "estimate_uj": 360, "grade": "measured"},
    ]
    _write(tmp_path, events)
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", "--json", "--archives", "archives", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    v = {x["claim"]: x for x in orjson.loads(res.stdout)["verdicts"]}
    assert (v["m"]["decision"], v["m"]["grade"], v["m"]["borrowed_uj"]) == ("admitted", "measured", 180)
    # no archive data: the declared 'measured' is not believed; as a guess it may not borrow
    assert (v["u"]["decision"], v["u"]["grade"]) == ("pending", "estimator")


def test_missing_archives_flag_is_a_clear_error(tmp_path):
    _write(tmp_path, [{"type": "claim", "id": "m", "pool": "a", "service": "api"}])
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", cwd=tmp_path)
    assert res.returncode == 2 and "pass --archives DIR" in res.stderr


def test_admit_help_has_an_example():
    res = subprocess.run([CLI, "admit", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "carbonspan admit simulate --pools pools.toml" in res.stdout


def test_missing_files_and_no_action_are_clear(tmp_path):
    _write(tmp_path, EVENTS)
    res = _run("simulate", "--pools", "nope.toml", "--events", "events.jsonl", cwd=tmp_path)
    assert res.returncode == 2 and "nope.toml: no such file" in res.stderr
    res = _run("simulate", "--pools", "pools.toml", "--events", "nope.jsonl", cwd=tmp_path)
    assert res.returncode == 2 and "cannot read the events file" in res.stderr
    res = _run(cwd=tmp_path)
    assert res.returncode == 2 and "simulate" in res.stdout
    res = _run("audit", "--log", "nope.jsonl", cwd=tmp_path)
    assert res.returncode == 1 and "nope.jsonl: no such decision log" in res.stderr


def test_duplicate_pending_id_is_refused_and_the_queue_keeps_its_claims(tmp_path):
    events = [
        EVENTS[0],  # a1 takes a's 400
        {"type": "claim", "id": "q", "pool": "a", "devices": 1, "estimate_uj": 100, "grade": "estimator"},
        {"type": "claim", "id": "q", "pool": "b", "devices": 1, "estimate_uj": 100, "grade": "estimator"},
        {"type": "claim", "id": "r", "pool": "a", "devices": 1, "estimate_uj": 50, "grade": "estimator"},
        {"type": "claim", "id": "s", "pool": "a", "devices": 1, "estimate_uj": 390, "grade": "estimator"},
        {"type": "release", "workload": "a1"},
    ]
    _write(tmp_path, events)
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", "--json", cwd=tmp_path)
    assert res.returncode == 1
    assert "events.jsonl:3: claim 'q' is already pending (since events.jsonl:2)" in res.stderr
    out = orjson.loads(res.stdout)
    # after the release q (100) and r (50) fit a's 400 in arrival order; s (390) no longer does
    assert [(v["event"], v["claim"], v["decision"]) for v in out["verdicts"]][-2:] == [
        ("events.jsonl:2@6", "q", "admitted"), ("events.jsonl:4@6", "r", "admitted"),
    ]
    assert out["pending"] == [{"event": "events.jsonl:5", "claim": "s"}]
    table = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", cwd=tmp_path)
    assert "still pending at the end: s (events.jsonl:5)" in table.stdout


def test_windows_must_be_positive(tmp_path):
    _write(tmp_path, EVENTS)
    res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", "--windows", "0", cwd=tmp_path)
    assert res.returncode == 2 and "--windows: expected a whole number of windows >= 1, got '0'" in res.stderr


def test_an_unwritable_log_fails_before_anything_is_decided(tmp_path):
    _write(tmp_path, EVENTS)
    (tmp_path / "logdir").mkdir()
    (tmp_path / "file").write_text("")
    for bad in ("logdir", "file/d.jsonl"):
        res = _run("simulate", "--pools", "pools.toml", "--events", "events.jsonl", "--log", bad, cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert f"{bad}: cannot write the decision log" in res.stderr and res.stdout == ""
