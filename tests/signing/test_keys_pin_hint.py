"""`carbonspan keys generate` says where to pin the key it made, for each use it can have.

An Ed25519 key signs an agent's checkpoints or a report's attestation (the same key type), so
the hint names both tables, [agents] and [signers]; a witness key goes under [witnesses]. Each
hint line, pasted under its table, is a keys.toml entry that Trust accepts.
"""

from __future__ import annotations

import re
import tomllib

from carbonspan.cli import main
from schema.trust import Trust

HINT = re.compile(r"\[(agents|witnesses|signers)\]\s+(\"[^\"]+\" = \"[^\"]+\")")


def _hints(capsys, tmp_path, name: str, *flags: str) -> dict[str, str]:
    assert main(["keys", "generate", "--name", name, "--out", str(tmp_path / "k.key"), *flags]) == 0
    err = capsys.readouterr().err
    return {m.group(1): m.group(2) for m in HINT.finditer(err)}


def test_an_ed25519_key_is_pinned_as_an_agent_or_a_report_signer(capsys, tmp_path) -> None:
    hints = _hints(capsys, tmp_path, "reporting")
    assert set(hints) == {"agents", "signers"}
    for table, entry in hints.items():
        trust = Trust.from_table(tomllib.loads(f"[{table}]\n{entry}\n"))
        assert "reporting" in getattr(trust, table)


def test_a_witness_key_is_pinned_under_witnesses_only(capsys, tmp_path) -> None:
    hints = _hints(capsys, tmp_path, "witness.test/w9", "--witness")
    assert set(hints) == {"witnesses"}
    trust = Trust.from_table(tomllib.loads(f"[witnesses]\n{hints['witnesses']}\n"))
    assert "witness.test/w9" in trust.witnesses
