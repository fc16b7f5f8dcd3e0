"""The auditor's pinned keys: ``keys.toml`` (docs/auditors-guide.md, "Pinning keys").

::

    [agents]                      # agent id = origin = key name -> its verifier key
    node-a = "node-a+1a2b3c4d+AX..."
    [witnesses]                   # witness name -> its cosignature (0x04) verifier key
    w1 = "w1+5e6f7a8b+BH..."
    [signers]                     # who may sign disclosure-report attestations
    reporting = "reporting+9c0d1e2f+AZ..."
    [policy]
    witness_quorum = 1            # cosignatures each agent's latest checkpoint needs (0: none)

A table key must equal its key's name: a key pinned under the wrong name is refused rather
than trusted for an identity it does not sign as.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from schema.note import COSIGNATURE_V1, ED25519, NoteError, Verifier


class TrustError(ValueError):
    """keys.toml cannot be used; the message names the entry."""


@dataclass(frozen=True)
class Trust:
    agents: dict[str, Verifier] = field(default_factory=dict)
    witnesses: dict[str, Verifier] = field(default_factory=dict)
    signers: dict[str, Verifier] = field(default_factory=dict)
    witness_quorum: int = 0

    @classmethod
    def load(cls, path: Path) -> Trust:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise TrustError(f"cannot read --trust {path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise TrustError(f"--trust {path} is not TOML: {exc}") from None
        return cls.from_table(data, str(path))

    @classmethod
    def from_table(cls, data: dict, where: str = "keys.toml") -> Trust:
        unknown = set(data) - {"agents", "witnesses", "signers", "policy"}
        if unknown:
            raise TrustError(f"{where}: unknown table(s) {sorted(unknown)}; "
                             "known: agents, witnesses, signers, policy")
        tables = {}
        for table, sig_type in (("agents", ED25519), ("witnesses", COSIGNATURE_V1),
                                ("signers", ED25519)):
            tables[table] = _keys(data.get(table) or {}, table, sig_type, where)
        quorum = (data.get("policy") or {}).get("witness_quorum", 0)
        if type(quorum) is not int or quorum < 0:
            raise TrustError(f"{where}: [policy] witness_quorum = {quorum!r}: expected an integer >= 0")
        if quorum > len(tables["witnesses"]):
            raise TrustError(f"{where}: [policy] witness_quorum = {quorum} but only "
                             f"{len(tables['witnesses'])} witness key(s) are pinned")
        return cls(tables["agents"], tables["witnesses"], tables["signers"], quorum)


def _keys(table: object, name: str, sig_type: int, where: str) -> dict[str, Verifier]:
    if not isinstance(table, dict):
        raise TrustError(f"{where}: [{name}] must be a table of name = \"<verifier key>\"")
    out = {}
    for key_name, text in table.items():
        if not isinstance(text, str):
            raise TrustError(f"{where}: [{name}] {key_name} must be a verifier key string")
        try:
            v = Verifier.parse(text)
        except NoteError as exc:
            raise TrustError(f"{where}: [{name}] {key_name}: {exc}") from None
        if v.name != key_name:
            raise TrustError(f"{where}: [{name}] {key_name} pins a key named {v.name!r}; "
                             "the entry's name must be the key's name")
        if v.sig_type != sig_type:
            kind = "a witness cosignature key (type 0x04)" if sig_type == COSIGNATURE_V1 else \
                "a note-signing key (type 0x01)"
            raise TrustError(f"{where}: [{name}] {key_name} must be {kind}")
        out[key_name] = v
    return out
