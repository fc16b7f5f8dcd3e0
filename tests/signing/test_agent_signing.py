"""The agent's side of signing, with real agent processes: keys, restarts, crashes, refusals."""

from __future__ import annotations

import contextlib
import io
import signal

import orjson

from carbonspan.cli import main
from schema.chain import seal
from schema.checkpoint import CHECKPOINTS_NAME


def verify(root, *flags: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["verify", str(root), *flags])
    return code, out.getvalue()


def trust_file(tmp_path, agent: str, vkey: str):
    path = tmp_path / "keys.toml"
    path.write_text(f'[agents]\n"{agent}" = "{vkey}"\n')
    return path


def records(d):
    return [orjson.loads(x) for x in (d / CHECKPOINTS_NAME).read_bytes().splitlines()]


def test_restart_and_kill9_keep_one_consistent_signed_history(tmp_path, tools) -> None:
    vkey = tools.make_key(tmp_path / "n.key", "node-n")
    root, cfg = tmp_path / "arch", tools.signing_config(tmp_path / "n.key")
    a = tools.start_agent(root, "node-n", cfg).wait_ready(timeout=60)
    tools.run_rounds([a], 2)
    assert a.stop() == 0
    first = records(a.dir)
    assert first[-1]["reason"] == "shutdown" or first[-1]["reason"] in ("window", "rotation")
    b = tools.start_agent(root, "node-n", cfg).wait_ready(timeout=60)
    tools.send_spans(b.http_url, "svc", 4)
    b.kill9()  # acknowledged spans are in the WAL; the window line and its checkpoint come on restart
    c = tools.start_agent(root, "node-n", cfg).wait_ready(timeout=60)
    tools.run_rounds([c], 1)
    assert c.stop() == 0
    recs = records(c.dir)
    sizes = [r["note"].split("\n")[1] for r in recs]
    assert [int(s) for s in sizes] == sorted(int(s) for s in sizes)
    assert all(r["proof_from"] <= int(s) for r, s in zip(recs, sizes, strict=True))
    code, out = verify(root, "--trust", str(trust_file(tmp_path, "node-n", vkey)))
    assert code == 0, out
    assert "signed: " in out and "not_checkpointed" not in out


def test_the_agent_refuses_to_sign_over_a_rewritten_history_and_keeps_ingesting(tmp_path, tools) -> None:
    vkey = tools.make_key(tmp_path / "n.key", "node-n")
    root, cfg = tmp_path / "arch", tools.signing_config(tmp_path / "n.key")
    a = tools.start_agent(root, "node-n", cfg).wait_ready(timeout=60)
    tools.run_rounds([a], 2)
    assert a.stop() == 0
    last = sorted(a.dir.glob("windows-*.jsonl"))[-1]
    lines = last.read_bytes().splitlines()
    rec = orjson.loads(lines[-1])  # an edit behind the agent's back, re-sealed so it looks whole
    rec["report"]["window"]["spans"] += 1
    lines[-1] = orjson.dumps(seal(rec["prev"], rec["seq"], rec["ts"], "report", rec["report"]),
                             option=orjson.OPT_SORT_KEYS)
    last.write_bytes(b"".join(x + b"\n" for x in lines))
    before = len(records(a.dir))
    b = tools.start_agent(root, "node-n", cfg).wait_ready(timeout=60)
    tools.send_spans(b.http_url, "svc", 3)
    b.wait_for(lambda: b.metric("carbonspan_checkpoint_errors_total", reason="history_conflict") >= 1,
               what="a history_conflict count")
    assert b.metric("carbonspan_spans_accepted_total") >= 3  # ingest goes on
    assert b.stop(signal.SIGTERM) == 0
    assert any("signing disabled" in line for line in b.stderr_text())
    assert len(records(b.dir)) == before  # nothing signed over the forgery
    code, out = verify(root, "--trust", str(trust_file(tmp_path, "node-n", vkey)))
    assert code == 1 and "checkpoint_root_mismatch" in out and "not_checkpointed" in out


def test_a_key_inside_the_archive_or_of_another_agent_is_refused(tmp_path, tools) -> None:
    root = tmp_path / "arch"
    root.mkdir()
    tools.make_key(root / "inside.key", "node-n")
    tools.make_key(tmp_path / "other.key", "node-x")
    for key, says in ((root / "inside.key", "inside the archive directory"),
                      (tmp_path / "other.key", "carbonspan keys generate --name node-n")):
        p = tools.start_agent(root, "node-n", tools.signing_config(key))
        assert p.proc.wait(timeout=60) == 2
        assert says in "".join(p.stderr_text())


def test_an_unsigned_archive_verifies_as_before_and_says_it_is_unsigned(tmp_path, tools) -> None:
    root = tmp_path / "arch"
    a = tools.start_agent(root, "node-u", None).wait_ready(timeout=60)
    tools.run_rounds([a], 1)
    assert a.stop() == 0
    assert not (a.dir / CHECKPOINTS_NAME).exists()
    code, out = verify(root)
    assert code == 0, out
    assert "unsigned" in out


def test_checkpoints_every_n_lines_at_rotation_and_at_close(tmp_path) -> None:
    """The archive writer and the checkpoint log on real files, without a process: with
    checkpoint_every = 3, lines 3 and 6 are signed, a rotation signs at once, close signs the rest."""
    from agent.archive import ArchiveWriter
    from agent.checkpoints import CheckpointLog
    from schema.note import Signer

    d = tmp_path / "node-n"
    writer = ArchiveWriter(d, max_size_mb=1.0)
    writer.open()
    cp = CheckpointLog(d, Signer.generate("node-n"), every=3)
    cp.open()
    writer.listener = cp
    sizes = lambda: [(r["reason"], int(r["note"].split("\n")[1])) for r in records(d)]  # noqa: E731
    for i in range(7):
        writer.append({"agent_id": "node-n", "window": {"start": f"2026-12-01T00:0{i}:00Z"}})
    assert sizes() == [("window", 3), ("window", 6)]
    writer.max_size_bytes = 1  # the next line rotates to a new file
    writer.append({"agent_id": "node-n", "window": {"start": "2026-12-01T00:08:00Z"}})
    assert sizes()[-1] == ("rotation", 8)
    writer.max_size_bytes = 1 << 20
    writer.append({"agent_id": "node-n", "window": {"start": "2026-12-01T00:09:00Z"}})
    writer.close()
    assert sizes()[-1] == ("shutdown", 9)
    again = CheckpointLog(d, cp.signer, every=3)
    assert again.open() is not None and again.signed_size == 9 and again.conflict is None


def test_a_torn_checkpoint_record_is_moved_aside_and_the_log_goes_on(tmp_path) -> None:
    from agent.archive import ArchiveWriter
    from agent.checkpoints import CheckpointLog
    from schema.note import Signer

    d, signer = tmp_path / "node-t", Signer.generate("node-t")
    writer = ArchiveWriter(d)
    writer.open()
    writer.listener = CheckpointLog(d, signer, every=1)
    writer.listener.open()
    writer.append({"agent_id": "node-t", "window": {"start": "2026-12-01T00:00:00Z"}})
    writer.listener = None
    writer.append({"agent_id": "node-t", "window": {"start": "2026-12-01T00:01:00Z"}})
    writer.close()
    with open(d / CHECKPOINTS_NAME, "ab") as fh:  # a crash in the middle of the next record
        fh.write(b'{"note":"node-t\\n2\\n')
    cp = CheckpointLog(d, signer, every=1)
    cp.open()  # signs the uncovered line on a line of its own
    assert [r["reason"] for r in records(d)] == ["window", "start"]
    assert len(list(d.glob("checkpoints.log.*.corrupt"))) == 1
    from aggregator.files import discover
    from aggregator.verify_signed import verify_signatures
    from schema.trust import Trust

    trust = Trust.load(trust_file(tmp_path, "node-t", signer.verifier.encode()))
    findings, summaries = verify_signatures(discover([str(tmp_path)]), trust)
    assert findings == [] and summaries[0].latest is not None and summaries[0].latest.size == 2
