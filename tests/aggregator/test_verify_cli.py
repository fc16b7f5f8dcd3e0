"""carbonspan verify (every kind of tampering) and carbonspan aggregate end to end."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import synth
from aggregator.files import discover
from aggregator.verify import verify_archives
from carbonspan.cli import main

FILE0 = "agent-a/windows-20261110-000000.jsonl"
FILE1 = "agent-a/windows-20261110-000001.jsonl"


@pytest.fixture
def archive(tmp_path):
    root = tmp_path / "archives"
    recs = synth.sealed_lines(synth.realistic(12, seed=5, n_services=3, v1_every=5))
    synth.write_agent(root, "agent-a", synth.split(recs, 2), day="20261110")
    return root


def _lines(root, name):
    return (root / name).read_bytes().splitlines()


def _put(root, name, lines):
    (root / name).write_bytes(b"".join(x + b"\n" for x in lines))


def _kinds(root):
    findings, _ = verify_archives(discover([str(root)]))
    return [(f.location, f.kind) for f in findings]


def _reseal_from(root, name, index, edit):
    """An attacker who edits a window and re-seals the rest of the file (chain stays valid)."""
    recs = [orjson.loads(x) for x in _lines(root, name)]
    prev = recs[index - 1]["hash"] if index else None
    edit(recs[index]["report"])
    for i in range(index, len(recs)):
        recs[i] = synth.sealed_lines([recs[i]["report"]], prev, recs[i]["seq"])[0]
        prev = recs[i]["hash"]
    _put(root, name, [orjson.dumps(r) for r in recs])
    return prev


def test_an_untouched_archive_verifies(archive, capsys):
    assert _kinds(archive) == []
    assert main(["verify", str(archive)]) == 0
    assert "OK: 2 files" in capsys.readouterr().out


def test_edited_line_is_reported_with_file_and_line(archive):
    lines = _lines(archive, FILE0)
    lines[2] = lines[2].replace(b'"traces":', b'"traces":1', 1)
    _put(archive, FILE0, lines)
    assert _kinds(archive) == [(f"{FILE0}:3", "hash_mismatch")]


def test_deleted_line_is_reported_at_its_successor(archive):
    lines = _lines(archive, FILE0)
    _put(archive, FILE0, lines[:2] + lines[3:])
    assert _kinds(archive) == [(f"{FILE0}:3", "prev_mismatch"), (f"{FILE0}:3", "seq_gap")]


def test_inserted_line_is_reported(archive):
    lines = _lines(archive, FILE0)
    forged = synth.sealed_lines(synth.realistic(1, seed=9, n_services=2), orjson.loads(lines[1])["hash"], 2)[0]
    _put(archive, FILE0, lines[:2] + [orjson.dumps(forged)] + lines[2:])
    kinds = _kinds(archive)
    assert (f"{FILE0}:4", "prev_mismatch") in kinds and (f"{FILE0}:4", "seq_gap") in kinds


def test_reordered_lines_are_reported(archive):
    lines = _lines(archive, FILE0)
    lines[1], lines[2] = lines[2], lines[1]
    _put(archive, FILE0, lines)
    kinds = _kinds(archive)
    assert kinds[0] == (f"{FILE0}:2", "prev_mismatch") and (f"{FILE0}:3", "prev_mismatch") in kinds


def test_a_deleted_file_breaks_the_chain_across_files(tmp_path):
    root = tmp_path / "archives"
    recs = synth.sealed_lines(synth.realistic(9, seed=5, n_services=2))
    paths = synth.write_agent(root, "agent-a", synth.split(recs, 3), gzip_files=[2], day="20261110")
    paths[1].unlink()
    assert _kinds(root) == [("agent-a/windows-20261110-000002.jsonl.gz:1", "prev_mismatch"),
                            ("agent-a/windows-20261110-000002.jsonl.gz:1", "seq_gap")]


def test_resealed_windows_still_fail_their_invariants(archive):
    def break_carbon(report):
        gs = report["green_summary"]
        gs["co2"]["operational_gco2"] *= 2

    _reseal_from(archive, FILE0, 1, break_carbon)
    assert (f"{FILE0}:2", "carbon_invariant") in _kinds(archive)

    def host_short_of_its_window(report):  # 100 W over a 60 s window is 100 x 60 / 3.6e6 kWh
        report["green_summary"]["hosts"] = [{"name": "pg", "kind": "database", "watts": 100.0,
                                             "in_totals": False, "energy_kwh": 100.0 * 20 / 3.6e6}]

    _reseal_from(archive, FILE1, 1, host_short_of_its_window)
    assert (f"{FILE1}:2", "host_energy_invariant") in _kinds(archive)


def _host_named_like_a_service(report, kwh=100.0 * 60 / 3.6e6):
    """An honest line gains database host "svc-00", the name of one of its services."""
    gs = report["green_summary"]
    assert "svc-00" in gs.get("per_service_energy_kwh", {"svc-00": 0})
    gs["hosts"] = [{"name": "svc-00", "kind": "database", "watts": 100.0, "energy_kwh": kwh}]
    gs["energy_kwh"] = sum(gs["per_service_energy_kwh"].values()) + kwh


def test_a_host_named_like_a_service_is_not_a_finding_but_its_energy_is_checked(archive):
    """Hosts and services are separate namespaces (issue 11, item 3): an honest archive with a
    host and a service of one name verifies; a host row short of watts x window length
    (issue 11, item 1: every running second charged) is a host_energy_invariant."""
    _reseal_from(archive, FILE1, 1, _host_named_like_a_service)  # the chain's last file: it stays whole
    assert _kinds(archive) == []
    _reseal_from(archive, FILE1, 1, lambda r: _host_named_like_a_service(r, kwh=100.0 * 59 / 3.6e6))
    found = verify_archives(discover([str(archive)]))[0]
    assert [(f.location, f.kind) for f in found] == [(f"{FILE1}:2", "host_energy_invariant")]
    assert "watts 100 W x window length 60.000000 s" in found[0].message


def test_energy_invariant(archive):
    _reseal_from(archive, FILE0, 2, lambda r: r["green_summary"].__setitem__("energy_kwh", 9.0))
    assert any(k == (f"{FILE0}:3", "energy_invariant") for k in _kinds(archive))


def test_carbon_terms_and_embodied_invariants(archive):
    """total.mid must be the sum of its four terms; where a line records how embodied carbon
    was charged, embodied = window.traces (or root_spans) x the per-request figure."""
    def inflate_mid(report):
        report["green_summary"]["co2"]["total"]["mid"] += 1.0

    _reseal_from(archive, FILE0, 1, inflate_mid)
    assert (f"{FILE0}:2", "total_invariant") in _kinds(archive)

    def per_root_span(report):  # 3 root spans x 0.002 g = 0.006 g, total kept consistent
        report["window"]["root_spans"] = 3
        report["methodology"] = {"embodied_per": "root_span", "embodied_carbon_per_request_gco2": "0.002"}
        co2 = report["green_summary"]["co2"]
        co2["total"]["mid"] += 0.006 - co2["embodied_gco2"]
        co2["embodied_gco2"] = 0.006

    _reseal_from(archive, FILE1, 1, per_root_span)
    # consistent: no invariant finding (the chain findings are FILE0's reseal, seen from FILE1)
    assert not [k for k in _kinds(archive) if k[0].startswith(f"{FILE1}:") and k[1].endswith("_invariant")]

    def charge_per_trace_instead(report):  # same line, but embodied from traces, not root spans
        per_root_span(report)
        co2 = report["green_summary"]["co2"]
        co2["embodied_gco2"] = report["window"]["traces"] * 0.002
        co2["total"]["mid"] = sum(co2[f"{t}_gco2"] for t in ("operational", "embodied", "database", "messaging"))

    _reseal_from(archive, FILE1, 1, charge_per_trace_instead)
    assert (f"{FILE1}:2", "embodied_invariant") in _kinds(archive)


def test_malformed_line_is_a_finding_not_a_crash(archive):
    lines = _lines(archive, FILE0)
    _put(archive, FILE0, lines[:1] + [b'{"torn": '] + lines[1:])
    assert (f"{FILE0}:2", "malformed") in _kinds(archive)


def _aggregate(archive, out, *extra):
    return main(["aggregate", str(archive), "--from", "2026-11-01", "--to", "2026-11-30",
                 "--org", "ACME", "--out", str(out), *extra])


def test_a_report_made_by_other_rules_is_said_to_be_so_not_to_be_false(archive, tmp_path, capsys):
    """A report of an earlier schema version (fewer fields, as carbonspan wrote before the
    comparison and per-service SCI) does not re-derive byte for byte here; verify says it was
    made by other rules and with which tool to re-derive it, never that its figures do not
    follow from the archives. An edit of the same report under this version still does."""
    from aggregator.report import content_hash

    out = tmp_path / "report.json"
    assert _aggregate(archive, out) == 0
    report = json.loads(out.read_bytes())
    from schema.report import REPORT_SCHEMA_VERSION

    assert report["schema_version"] == REPORT_SCHEMA_VERSION and report["produced_by"].startswith("carbonspan ")
    old = dict(report, schema_version="1.0")
    del old["produced_by"]
    for app in old["applications"]:  # the fields 1.1 added
        for key in ("sci_gco2e_per_request", "operational_gco2e_per_request", "measured_share"):
            app.pop(key, None)
    old["integrity"] = dict(old["integrity"], content_hash="")
    old["integrity"]["content_hash"] = content_hash(old)
    older = tmp_path / "older.json"
    older.write_text(json.dumps(old))
    assert main(["verify", str(archive), "--report", str(older)]) == 1
    text = capsys.readouterr().out
    assert "rederivation_other_rules" in text and "rederivation_mismatch" not in text
    assert "made by an earlier carbonspan with report schema 1.0" in text and "re-derive it with" in text
    assert "report_hash_mismatch" not in text


def test_verify_report_rederives_and_catches_edits_and_truncation(archive, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert _aggregate(archive, out) == 0
    assert main(["verify", str(archive), "--report", str(out)]) == 0
    assert "re-derives to the same content hash" in capsys.readouterr().out
    # an edited report
    edited = json.loads(out.read_bytes())
    edited["aggregate"]["total_carbon_kgco2eq"] /= 2
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(edited))
    assert main(["verify", str(archive), "--report", str(bad)]) == 1
    text = capsys.readouterr().out
    assert "report_hash_mismatch" in text and "rederivation_mismatch" in text
    # the archive's last lines deleted: the chain alone cannot see it, the report can
    _put(archive, FILE1, _lines(archive, FILE1)[:-2])
    assert main(["verify", str(archive), "--report", str(out)]) == 1
    text = capsys.readouterr().out
    assert "rederivation_mismatch" in text and "integrity.chains[agent-a]" in text


def test_aggregate_cli_writes_json_and_html_and_summary(archive, tmp_path, capsys):
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    assert _aggregate(archive, out, "--html", str(html)) == 0
    report = json.loads(out.read_bytes())
    assert report["organisation"] == "ACME" and report["aggregate"]["windows"] == 12
    # 12 one-minute windows from synth's start 2026-11-01T00:00Z: the last starts at 00:11
    assert report["period"] == {"start": "2026-11-01T00:00:00Z", "end": "2026-12-01T00:00:00Z",
                                "first_window": "2026-11-01T00:00:00Z", "last_window": "2026-11-01T00:11:00Z"}
    assert "<svg" in html.read_text()
    shown = " ".join(capsys.readouterr().out.split())  # rich wraps lines to the terminal width
    assert "svc-00" in shown and "attributed by the agent" in shown  # the summary table
    assert "windows 2026-11-01T00:00:00Z .. 2026-11-01T00:11:00Z" in shown  # the windows' own times
    b = report["aggregate"]["carbon_breakdown"]
    assert f"services (operational) {b['operational_kgco2eq'] * 1000:,.3f} g" in shown
    assert "+ embodied" in shown and "+ database hosts" in shown and "+ messaging hosts" in shown


def test_summary_title_without_bounds_shows_the_windows_first_and_last_start(archive):
    from aggregator.engines import run_local
    from aggregator.read import Period
    from aggregator.render import title
    from aggregator.report import build_report

    everything = Period.everything()
    report = build_report(run_local(discover([str(archive)]), everything), everything, "ACME")
    assert (report.period.start, report.period.end) == ("", "")  # an open period has no bounds
    assert title(report) == "carbon disclosure: ACME, windows 2026-11-01T00:00:00Z .. 2026-11-01T00:11:00Z"


def test_aggregate_shows_progress_over_files_on_a_terminal(archive, tmp_path):
    """Run the real CLI with stdout and stderr on a pseudo-terminal (rich draws the bar only
    on a terminal); read until it exits, with a deadline."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "carbonspan", "aggregate", str(archive), "--from",
                             "2026-11-01", "--to", "2026-11-30", "--out", str(tmp_path / "r.json")],
                            stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            cwd=Path(__file__).resolve().parents[2])
    os.close(slave)
    out, deadline = b"", time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=10) == 0
    text = out.decode("utf-8", "replace")
    assert "folding" in text and "/2" in text  # the bar over the archive's 2 files
    assert "\x1b[" in text  # drawn with terminal control sequences, not plain lines
    assert "svc-00" in text and "attributed" in text  # then the summary


def test_aggregate_cli_strict_attribution_names_file_and_line(tmp_path, capsys):
    root = tmp_path / "archives"
    d = synth.v1_dict(synth.realistic(1, n_services=1)[0])
    d["per_endpoint_io_ops"] = []
    d["green_summary"]["total_io_ops"] = 0
    synth.write_agent(root, "agent-a", [synth.sealed_lines([d])], day="20261110")
    assert _aggregate(root, tmp_path / "r.json", "--strict-attribution") == 1
    assert f"{FILE0}:1" in capsys.readouterr().err
    assert _aggregate(root, tmp_path / "r.json") == 0


def test_aggregate_cli_errors_say_what_to_do(tmp_path, capsys):
    assert main(["aggregate", str(tmp_path / "nope"), "--from", "2026-11-01", "--to", "2026-11-30"]) == 2
    assert "give an archive directory" in capsys.readouterr().err
    assert main(["aggregate", str(tmp_path), "--from", "yesterday", "--to", "2026-11-30"]) == 2
    assert "YYYY-MM-DD" in capsys.readouterr().err


def test_aggregate_refuses_an_output_directory_that_does_not_exist_before_reading(archive, tmp_path, capsys):
    for flag in ("--out", "--html"):
        target = tmp_path / "missing-dir" / "r"
        assert main(["aggregate", str(archive), "--from", "2026-11-01", "--to", "2026-11-30", flag, str(target)]) == 2
        err = capsys.readouterr().err
        assert f"{flag} {target}: the directory {target.parent} does not exist" in err and "Traceback" not in err


def test_aggregate_over_an_empty_period_exits_3_unless_allowed_and_says_no_data(archive, tmp_path, capsys, caplog):
    """Issue 11, item 6: a period without windows is not a tidy 0 g report: exit 3, nothing
    written; with --allow-empty the JSON, the HTML and the terminal say "No data in this period"."""
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    args = ["aggregate", str(archive), "--from", "2027-01-01", "--to", "2027-01-31", "--out", str(out), "--html", str(html)]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "No data in this period: no window starts inside it (12 read outside it" in err
    assert "--allow-empty" in err and not out.exists() and not html.exists()
    assert main([*args, "--allow-empty"]) == 0
    assert json.loads(out.read_bytes())["aggregate"]["windows"] == 0
    assert "No data in this period" in html.read_text() and "No data in this period" in caplog.text
    assert "WARNING: No data in this period" in capsys.readouterr().out


def test_aggregate_says_when_the_dask_scheduler_cannot_be_reached(archive, tmp_path, capsys):
    import socket

    with socket.socket() as sock:  # a port on loopback that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    import dask
    import distributed  # noqa: F401  (load its config defaults first: leaving a config.set that
    # created the "distributed" key removes the whole key, defaults included, and every later
    # Dask test in the process then fails with KeyError: 'distributed')

    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        code = main(["aggregate", str(archive), "--from", "2026-11-01", "--to", "2026-11-30", "--engine", "dask",
                     "--scheduler", f"tcp://127.0.0.1:{port}", "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and "the Dask engine failed" in err and "check --scheduler" in err


def test_verify_errors_name_the_report_and_say_what_to_give(archive, tmp_path, capsys):
    bad = tmp_path / "report.json"
    bad.write_bytes(b"{")  # a truncated report
    assert main(["verify", str(archive), "--report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"--report {bad} is not a disclosure report" in err and "carbonspan aggregate --out" in err
    assert main(["verify", str(archive), "--report", str(tmp_path / "missing.json")]) == 2
    assert "cannot read --report" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "nope")]) == 2
    assert "give an archive directory" in capsys.readouterr().err


def test_mixed_gzip_rotated_v1_archive_verifies_clean(mixed_archive, capsys):
    assert main(["verify", str(mixed_archive)]) == 0
    out = capsys.readouterr().out
    assert "chain agent-a: 60 records" in out and "chain agent-b: 40 records" in out


@pytest.mark.timeout(120)
def test_aggregate_cli_on_an_existing_dask_scheduler_matches_local(mixed_archive, tmp_path):
    from distributed import LocalCluster

    local, dist = tmp_path / "local.json", tmp_path / "dask.json"
    assert _aggregate(mixed_archive, local) == 0
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address="127.0.0.1:0") as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        code = _aggregate(mixed_archive, dist, "--engine", "dask", "--scheduler", cluster.scheduler_address)
    assert code == 0 and dist.read_bytes() == local.read_bytes()


def test_scheduler_needs_the_dask_engine(archive, tmp_path, capsys):
    assert _aggregate(archive, tmp_path / "r.json", "--scheduler", "tcp://127.0.0.1:1") == 2
    assert "--scheduler needs --engine dask" in capsys.readouterr().err


HOSTILE = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"NaN", b"[]", b"{}", b'{"seq":"x","prev":1,"hash":[],"ts":null}',
                     b'{"report":{"green_summary":[1]},"seq":0,"prev":"","hash":"","ts":""}',
                     b'{"report":{"green_summary":{"per_service_energy_kwh":{"a":"x"},"co2":1}},'
                     b'"seq":0,"prev":"","hash":"","ts":""}', b"\xff\xfe", b'{"a":1e999}']),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), HOSTILE), max_size=5))
def test_verify_never_crashes_on_hostile_lines(edits):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        recs = synth.sealed_lines(synth.realistic(12, seed=5, n_services=2))
        lines = [orjson.dumps(r) for r in recs]
        for at, junk in edits:
            lines.insert(at, junk.replace(b"\n", b" "))
        (root / "agent-a").mkdir()
        (root / "agent-a" / "windows-20261110-000000.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        findings, chains = verify_archives(discover([str(root)]))
        assert bool(findings) == any(j.strip() for _, j in edits)
        assert all(":" in f.location for f in findings)
