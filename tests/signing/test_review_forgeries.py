"""Forgeries found in review (issue 14) that the first tamper set did not cover: a whole agent
removed, an agent's chain duplicated into a second directory, a witness log that no pinned
witness vouches for (unpinned, or edited and re-sealed), and gzip-rotated files, which are an
operator's routine and must still verify (and still be signed over by a restarted agent)."""

from __future__ import annotations

import contextlib
import gzip
import io
import shutil

import orjson

from agent.checkpoints import CheckpointLog
from carbonspan.cli import main
from schema.chain import seal
from schema.note import Signer


def verify(root, *flags: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["verify", str(root), *flags])
    return code, out.getvalue()


def test_a_whole_agent_removed_is_named_with_keys_pinned(signed_archive) -> None:
    s = signed_archive
    root = s.copy("agent-removed")
    shutil.rmtree(root / "agent-b")
    code, out = verify(root, "--trust", str(s.trust))
    assert code == 1 and "agent-b/: pinned_agent_missing" in out, out
    code, out = verify(root, "--trust", str(s.witnessed), "--witness-log", str(s.witness_log))
    assert code == 1 and "pinned_agent_missing" in out and "a witness cosigned it at size" in out, out


def test_an_agents_chain_copied_into_a_second_directory_is_named(signed_archive) -> None:
    s = signed_archive
    root = s.copy("agent-duplicated")
    shutil.copytree(root / "agent-a", root / "more" / "agent-a")  # aggregate would fold it twice
    code, out = verify(root, "--trust", str(s.trust))
    assert code == 1 and "agent-a/: duplicate_agent" in out, out
    code, out = verify(root)  # the copy is signed: named without --trust too
    assert code == 1 and "duplicate_agent" in out, out


def test_a_witness_log_no_pinned_witness_cosigned_is_named_not_skipped(signed_archive) -> None:
    s = signed_archive
    code, out = verify(s.root, "--trust", str(s.trust), "--witness-log", str(s.witness_log))
    assert code == 1 and "witness_log_unverified" in out and "no [witnesses] key is pinned" in out, out


def test_a_witness_log_edited_and_resealed_is_named(signed_archive, tmp_path) -> None:
    """The forger rolls agent-a back by one checkpoint and edits the witness log's last record
    for it to that size, re-sealing the log's hash chain (which needs no key)."""
    s = signed_archive
    recs = [orjson.loads(x) for x in s.witness_log.read_bytes().splitlines()]
    last = max(i for i, r in enumerate(recs) if r["event"]["origin"] == "agent-a")
    ev = recs[last]["event"]
    lines = ev["note"].split("\n")
    lines[1] = str(int(lines[1]) + 7)  # the head moved: the cosignature no longer covers it
    ev["note"], ev["size"] = "\n".join(lines), int(lines[1])
    prev, out = None, []
    for r in recs:
        r = seal(prev, r["seq"], r["ts"], "event", r["event"])
        prev = r["hash"]
        out.append(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n")
    edited = tmp_path / "witness.log"
    edited.write_bytes(b"".join(out))
    code, text = verify(s.root, "--trust", str(s.witnessed), "--witness-log", str(edited))
    assert code == 1 and "witness_log_unverified" in text and "1 of" in text, text
    assert "witness_log_broken" not in text  # the chain itself is whole again


def test_gzip_rotated_files_verify_and_the_agent_signs_on(signed_archive) -> None:
    s = signed_archive
    root = s.copy("gzipped")
    d = root / "agent-a"
    files = sorted(d.glob("windows-*.jsonl"))
    for p in files[:-1]:  # logrotate's compress: every file but the one being written
        with gzip.open(str(p) + ".gz", "wb") as g:
            g.write(p.read_bytes())
        p.unlink()
    code, out = verify(root, "--trust", str(s.trust))
    assert code == 0, out
    cp = CheckpointLog(d, Signer.parse((s.keys / "agent-a.key").read_text()), every=1)
    cp.open()  # a restarted agent rebuilds the same tree from the compressed files
    assert cp.conflict is None and cp.signed_size == cp.tree.size > len(files) - 1


def test_verify_without_trust_says_signed_but_unverified_even_for_a_resigned_forgery(
        signed_archive) -> None:
    s = signed_archive
    root = s.copy("resigned-no-trust")
    d = root / "agent-a"
    (d / "checkpoints.log").unlink()
    CheckpointLog(d, Signer.generate("agent-a"), every=1).open()  # the forger's own key
    code, out = verify(root)
    assert code == 0, out  # nothing is pinned, so nothing tells the keys apart...
    assert out.count("signed but unverified (no key pinned)") == 2, out
    assert "signatures were NOT verified" in out  # ...and the output says so
    code, out = verify(root, "--trust", str(s.trust))
    assert code == 1 and "checkpoint_bad_signature" in out and "NOT verified" not in out, out


def _resign_last(d, edit) -> None:
    """Replace the last checkpoint record's note by ``edit(note)``."""
    recs = [orjson.loads(x) for x in (d / "checkpoints.log").read_bytes().splitlines()]
    recs[-1]["note"] = edit(recs[-1]["note"])
    (d / "checkpoints.log").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))


def test_origins_unlike_the_directory_and_signatures_under_other_names_are_refused(
        signed_archive) -> None:
    """Guards (these held already): an origin that differs from the directory only in case or
    a trailing space, signed with the agent's real key; the agent's signature line renamed to
    another agent; another agent's key signing this agent's head."""
    from schema.checkpoint import Checkpoint
    from schema.note import sign_note, split_note

    s = signed_archive
    key_a = Signer.parse((s.keys / "agent-a.key").read_text())
    key_b = Signer.parse((s.keys / "agent-b.key").read_text())

    def origin(new: str):
        def edit(note: str) -> str:
            cp = Checkpoint.parse(split_note(note)[0])
            return sign_note(Checkpoint(new, cp.size, cp.root).text(), [key_a])
        return edit

    cases = {
        "upper": (origin("Agent-A"), "checkpoint_origin_mismatch"),
        "space": (origin("agent-a "), "checkpoint_origin_mismatch"),
        "renamed": (lambda n: n.replace("\u2014 agent-a ", "\u2014 agent-b "), "checkpoint_bad_signature"),
        "other_key": (lambda n: sign_note(split_note(n)[0], [key_b]), "checkpoint_bad_signature"),
    }
    for name, (edit, kind) in cases.items():
        root = s.copy(f"origin-{name}")
        _resign_last(root / "agent-a", edit)
        code, out = verify(root, "--trust", str(s.trust))
        assert code == 1 and kind in out, (name, out)
