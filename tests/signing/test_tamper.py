"""Forgeries of a copied agent directory, as an archive operator without the agent's key could
make them (and one with a key of their own). Each function edits ``root/agent`` in place."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from agent.archive import window_files
from agent.checkpoints import CheckpointLog
from schema.chain import seal
from schema.checkpoint import CHECKPOINTS_NAME
from schema.note import Signer

A, B = "agent-a", "agent-b"


def load(d: Path) -> list[tuple[Path, list[bytes]]]:
    return [(p, [ln for ln in p.read_bytes().split(b"\n") if ln]) for p in window_files(d)]


def save(files: list[tuple[Path, list[bytes]]]) -> None:
    for path, lines in files:
        path.write_bytes(b"".join(ln + b"\n" for ln in lines))


def flat(files: list[tuple[Path, list[bytes]]]) -> list[tuple[int, int]]:
    return [(f, i) for f, (_, lines) in enumerate(files) for i in range(len(lines))]


def _edit(rec: dict) -> None:
    """Cut the window's energy and carbon by 34 % (the issue's forgery), keeping every window
    invariant whole so only the signed heads can tell."""
    gs = rec["report"]["green_summary"]
    if gs["energy_kwh"] == 0:  # a window of client spans only: forge its span count instead
        rec["report"]["window"]["spans"] += 1
        return
    gs["energy_kwh"] *= 0.66
    for m in ("per_service_energy_kwh", "per_service_carbon_kgco2eq"):
        for k in gs.get(m, {}):
            gs[m][k] *= 0.66
    co2 = gs["co2"]
    before = co2["operational_gco2"]
    co2["operational_gco2"] = sum(gs["per_service_carbon_kgco2eq"].values()) * 1000.0
    co2["total"]["mid"] += co2["operational_gco2"] - before


def _line(rec: dict) -> bytes:
    return orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)


def _reseal(rec: dict) -> dict:
    return seal(rec["prev"], rec["seq"], rec["ts"], "report", rec["report"])


def edit_line(d: Path, which: str, rehash: bool) -> None:
    files = load(d)
    pos = flat(files)
    f, i = pos[len(pos) // 2] if which == "middle" else pos[-1]
    rec = orjson.loads(files[f][1][i])
    _edit(rec)
    files[f][1][i] = _line(_reseal(rec) if rehash else rec)
    save(files)


def append_forged(d: Path) -> None:
    files = load(d)
    last = orjson.loads(files[-1][1][-1])
    report = dict(last["report"])
    files[-1][1].append(_line(seal(last["hash"], last["seq"] + 1, last["ts"], "report", report)))
    save(files)


def delete(d: Path, which: str) -> None:
    files = load(d)
    pos = flat(files)
    f, i = {"head": pos[0], "middle": pos[len(pos) // 2], "tail": pos[-1]}[which]
    del files[f][1][i]
    save(files)


def swap_lines(d: Path) -> None:
    files = load(d)
    (f1, i1), (f2, i2) = flat(files)[1:3]
    files[f1][1][i1], files[f2][1][i2] = files[f2][1][i2], files[f1][1][i1]
    save(files)


def swap_files(d: Path) -> None:
    files = load(d)
    (p1, l1), (p2, l2) = files[0], files[1]
    save([(p1, l2), (p2, l1)])


def splice(root: Path, with_checkpoints: bool) -> None:
    """Agent B's whole chain copied into agent A's directory in place of A's."""
    for p in window_files(root / A):
        p.unlink()
    for p in window_files(root / B):
        shutil.copy(p, root / A / p.name)
    if with_checkpoints:
        shutil.copy(root / B / CHECKPOINTS_NAME, root / A / CHECKPOINTS_NAME)


def recompute(d: Path) -> None:
    """Edit an early line and re-seal every line after it: the hash chain is whole again."""
    files = load(d)
    before = [ln for _, lines in files for ln in lines]
    target = max(range(len(before)), key=lambda n: orjson.loads(before[n])["report"]["green_summary"]["energy_kwh"])
    prev = None
    for n, (f, i) in enumerate(flat(files)):
        rec = orjson.loads(files[f][1][i])
        if n == target:
            _edit(rec)
        if prev is not None:
            rec["prev"] = prev
        rec = _reseal(rec)
        files[f][1][i] = _line(rec)
        prev = rec["hash"]
    assert [ln for _, lines in files for ln in lines] != before
    save(files)


def resign(d: Path, signer: Signer) -> None:
    """After ``recompute``: throw the agent's checkpoints away and sign new ones with ``signer``
    (a key of the forger's own under the agent's name), with the agent's own checkpoint code."""
    (d / CHECKPOINTS_NAME).unlink()
    CheckpointLog(d, signer, every=1).open()


def _forger(d: Path) -> None:
    recompute(d / A)
    resign(d / A, Signer.generate(A))


#: case -> (forgery of the copied archive root, the named findings it must give with keys pinned)
CASES = {
    "edit_middle": (lambda r: edit_line(r / A, "middle", False), {"hash_mismatch", "checkpoint_root_mismatch"}),
    "edit_middle_rehash": (lambda r: edit_line(r / A, "middle", True), {"prev_mismatch", "checkpoint_root_mismatch"}),
    "edit_last": (lambda r: edit_line(r / A, "last", False), {"hash_mismatch", "checkpoint_root_mismatch"}),
    "edit_last_rehash": (lambda r: edit_line(r / A, "last", True), {"checkpoint_root_mismatch"}),
    "append_forged": (lambda r: append_forged(r / A), {"not_checkpointed"}),
    "delete_head": (lambda r: delete(r / A, "head"), {"checkpoint_root_mismatch", "checkpoint_beyond_archive"}),
    "delete_middle": (lambda r: delete(r / A, "middle"), {"checkpoint_root_mismatch", "checkpoint_beyond_archive"}),
    "delete_tail": (lambda r: delete(r / A, "tail"), {"checkpoint_beyond_archive"}),
    "swap_lines": (lambda r: swap_lines(r / A), {"checkpoint_root_mismatch"}),
    "swap_files": (lambda r: swap_files(r / A), {"checkpoint_root_mismatch"}),
    "splice_chain": (lambda r: splice(r, False), {"agent_id_mismatch", "checkpoint_root_mismatch"}),
    "splice_chain_and_checkpoints": (lambda r: splice(r, True), {"agent_id_mismatch", "checkpoint_origin_mismatch"}),
    "recompute_chain": (lambda r: recompute(r / A), {"checkpoint_root_mismatch"}),
    "recompute_and_resign": (_forger, {"checkpoint_bad_signature"}),
    "drop_checkpoints": (lambda r: (r / A / CHECKPOINTS_NAME).unlink(), {"unsigned_archive"}),
}
#: forgeries the hash chain alone does not see (verify without --trust said OK before signing)
CHAIN_BLIND = {"edit_last_rehash", "append_forged", "delete_tail", "recompute_chain",
               "recompute_and_resign", "drop_checkpoints"}


def _verify(root: Path, *flags: str) -> tuple[int, str]:
    import contextlib
    import io

    from carbonspan.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["verify", str(root), *flags])
    return code, out.getvalue()


def _kinds(text: str) -> set[str]:
    return {line.split(": ")[1] for line in text.splitlines() if line.startswith("  ") and ": " in line
            and not line.startswith("  signed") and not line.startswith("  unsigned")}


def test_the_pristine_signed_archive_verifies_with_pinned_keys(signed_archive) -> None:
    code, out = _verify(signed_archive.root, "--trust", str(signed_archive.trust))
    assert code == 0, out
    for agent in (A, B):
        assert f"chain {agent}:" in out
    assert out.count("  signed: ") == 2 and "inclusion proofs verified" in out
    assert (signed_archive.root / A / CHECKPOINTS_NAME).exists()
    assert len(window_files(signed_archive.root / A)) >= 3  # the agent rotated: several files


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_forgery_is_a_named_finding_with_keys_pinned(signed_archive, case: str) -> None:
    forge, expected = CASES[case]
    root = signed_archive.copy(case)
    forge(root)
    code, out = _verify(root, "--trust", str(signed_archive.trust))
    assert code == 1, out
    assert expected <= _kinds(out), out


@pytest.mark.parametrize("case", sorted(CHAIN_BLIND))
def test_the_hash_chain_alone_misses_these_forgeries(signed_archive, case: str) -> None:
    """The blind spots of issue 14, reproduced: the chain and window checks find nothing, so
    only the signed heads catch them (the test above)."""
    from aggregator.files import discover
    from aggregator.verify import verify_archives

    root = signed_archive.copy(f"blind-{case}")
    CASES[case][0](root)
    findings, _ = verify_archives(discover([str(root)]))
    assert findings == []
