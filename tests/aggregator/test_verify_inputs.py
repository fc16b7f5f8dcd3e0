"""verify --report identifies the report's input files by content (issue 12 item 11): a file
gzipped or renamed by rotation after the report was written re-derives to the same report."""

from __future__ import annotations

import gzip
import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from aggregator import synth
from carbonspan.cli import main

T0 = datetime(2026, 11, 10, tzinfo=UTC)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """agent-a: 3 files of 4 windows, a torn line inside the first (a malformed sample that
    names the file), plain files as the agent leaves them before compression."""
    root = tmp_path / "archives"
    recs = synth.sealed_lines(synth.realistic(12, seed=4, n_services=3, start=T0))
    paths = synth.write_agent(root, "agent-a", synth.split(recs, 3), day="20261110")
    lines = paths[0].read_bytes().splitlines(keepends=True)
    paths[0].write_bytes(b"".join(lines[:2]) + b'{"torn": \n' + b"".join(lines[2:]))
    return root


def _aggregate(root: Path, out: Path) -> dict:
    assert main(["aggregate", str(root), "--from", "2026-11-01", "--to", "2026-11-30", "--out", str(out)]) == 0
    return json.loads(out.read_bytes())


def _gzip_in_place(path: Path) -> Path:
    """What the agent's rotation does: x.jsonl -> x.jsonl.gz, the plain file removed."""
    gz = path.with_name(path.name + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
    path.unlink()
    return gz


def test_report_files_carry_their_first_and_last_line_hashes(archive, tmp_path):
    report = _aggregate(archive, tmp_path / "r.json")
    first = archive / "agent-a" / "windows-20261110-000000.jsonl"
    lines = [orjson.loads(x) for x in first.read_bytes().splitlines() if not x.startswith(b'{"torn')]
    entry = report["inputs"]["files"][0]
    assert (entry["first_hash"], entry["last_hash"]) == (lines[0]["hash"], lines[-1]["hash"])


def test_a_file_gzipped_by_rotation_after_the_report_still_verifies(archive, tmp_path, capsys, caplog):
    out = tmp_path / "r.json"
    report = _aggregate(archive, out)
    assert "agent-a/windows-20261110-000000.jsonl:3" in report["inputs"]["malformed_samples"][0]
    for path in sorted((archive / "agent-a").glob("*.jsonl"))[:2]:
        _gzip_in_place(path)
    with caplog.at_level(logging.WARNING, logger="carbonspan.verify"):
        code = main(["verify", str(archive), "--report", str(out)])
    text = capsys.readouterr().out
    assert "rederivation_mismatch" not in text
    assert code == 1 and "malformed" in text  # only the torn line, which the report counted too
    notes = " ".join(r.getMessage() for r in caplog.records)
    assert "agent-a/windows-20261110-000000.jsonl.gz is the report's agent-a/windows-20261110-000000.jsonl" in notes


def test_a_logrotate_rename_still_verifies_and_an_edit_still_does_not(tmp_path, capsys):
    root = tmp_path / "archives"
    recs = synth.sealed_lines(synth.realistic(8, seed=6, n_services=3, start=T0))
    synth.write_agent(root, "agent-a", synth.split(recs, 2), day="20261110")
    out = tmp_path / "r.json"
    _aggregate(root, out)
    last = root / "agent-a" / "windows-20261110-000001.jsonl"
    moved = last.with_name(last.name + ".1")
    last.rename(moved)
    assert main(["verify", str(root), "--report", str(out)]) == 0
    assert "re-derives to the same content hash" in capsys.readouterr().out
    # same name mapping, different content: the figures differ and so does the chain's end
    data = moved.read_bytes().splitlines(keepends=True)
    moved.write_bytes(b"".join(data[:-1]))
    assert main(["verify", str(root), "--report", str(out)]) == 1
    assert "rederivation_mismatch" in capsys.readouterr().out
