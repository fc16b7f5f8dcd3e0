"""Signed reports: an in-toto Statement in a DSSE envelope beside a disclosure report.

``carbonspan aggregate --sign KEY --out report.json`` writes ``report.json.intoto.json``. Its
statement's subject is the report file (name and SHA-256 of its bytes); the predicate
(``schema.dsse.PREDICATE_TYPE``) holds::

    period {start, end}, organisation, content_hash   (as in the report)
    carbonspan_version
    checkpoints [{origin, size, root, note}]           the latest signed head of each agent
                                                       the report was folded from, with the
                                                       witness cosignatures the agent holds
    unsigned_agents [agent ids without checkpoints]

``carbonspan verify --report R --attestation A --trust keys.toml`` checks that a pinned
``[signers]`` key signed it, that it is about exactly these report bytes, and that every head
it names is signed by the pinned agent key and still held by the archive (docs/auditors-guide.md).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import orjson

from aggregator.verify import Finding
from aggregator.verify_signed import SignedSummary
from schema.checkpoint import Checkpoint
from schema.dsse import PREDICATE_TYPE, STATEMENT_TYPE, open_envelope, sign_envelope, statement
from schema.note import NoteError, Signer, open_note
from schema.trust import Trust
from schema.version import __version__

SUFFIX = ".intoto.json"


def attestation_path(report: Path) -> Path:
    return report.with_name(report.name + SUFFIX)


def predicate(report: dict[str, Any], summaries: list[SignedSummary]) -> dict[str, Any]:
    heads = []
    for s in summaries:
        if s.latest is not None:
            heads.append({"origin": s.latest.origin, "size": s.latest.size,
                          "root": base64.b64encode(s.latest.root).decode(), "note": s.latest_note})
    return {
        "period": report.get("period"),
        "organisation": report.get("organisation", ""),
        "content_hash": (report.get("integrity") or {}).get("content_hash", ""),
        "carbonspan_version": __version__,
        "checkpoints": heads,
        "unsigned_agents": sorted(s.agent for s in summaries if s.latest is None),
    }


def sign_report(data: bytes, name: str, report: dict[str, Any], summaries: list[SignedSummary],
                signer: Signer) -> dict[str, Any]:
    body = statement(name, hashlib.sha256(data).hexdigest(), predicate(report, summaries))
    return sign_envelope(body, signer)


def verify_attestation(envelope: Any, data: bytes, trust: Trust,
                       summaries: list[SignedSummary]) -> list[Finding]:
    """Findings about the attestation of the report whose file bytes are ``data``."""
    try:
        body, who = open_envelope(envelope, list(trust.signers.values()))
    except NoteError as exc:
        return [Finding("attestation", "attestation_bad_signature", str(exc))]
    try:
        st = orjson.loads(body)
        digest = st["subject"][0]["digest"]["sha256"]
        pred = st["predicate"]
        if st["_type"] != STATEMENT_TYPE or st["predicateType"] != PREDICATE_TYPE:
            raise ValueError(f"it is a {st['_type']} / {st['predicateType']}")
        heads = list(pred["checkpoints"])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError) as exc:
        return [Finding("attestation", "attestation_malformed",
                        f"signed by {who.name} but not a carbonspan report statement ({exc})")]
    out = []
    if digest != hashlib.sha256(data).hexdigest():
        out.append(Finding("attestation", "attestation_subject_mismatch",
                           f"{who.name} signed a report with SHA-256 {digest}, not this file "
                           f"({hashlib.sha256(data).hexdigest()}): the report was changed or "
                           "regenerated after it was signed"))
    by_agent = {s.agent: s for s in summaries}
    for head in heads:
        out.extend(_head(head, trust, by_agent))
    return out


def _head(head: Any, trust: Trust, by_agent: dict[str, SignedSummary]) -> list[Finding]:
    origin = head.get("origin") if isinstance(head, dict) else None
    where = f"attestation:{origin}"
    verifier = trust.agents.get(origin) if isinstance(origin, str) else None
    if verifier is None:
        return [Finding(where, "attestation_checkpoint_unverified",
                        f"the report names a head of {origin!r}, whose key is not pinned")]
    try:
        cp = Checkpoint.parse(open_note(head.get("note", ""), verifier))
    except NoteError as exc:
        return [Finding(where, "attestation_checkpoint_unverified", str(exc))]
    summary = by_agent.get(origin)
    log = summary.log if summary is not None else None
    if log is None or cp.size > log.tree.size or log.tree.root(cp.size) != cp.root:
        held = log.tree.size if log is not None else 0
        return [Finding(where, "attestation_checkpoint_missing",
                        f"the report was folded from {origin!r} at size {cp.size}, a head the "
                        f"archive ({held} lines) no longer holds: it was cut or rewritten since")]
    return []


def load_signer(key_file: Path) -> Signer:
    """The report signer's key; ValueError with a message for the user when it is unusable."""
    try:
        return Signer.parse(key_file.read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--sign {key_file}: cannot read the key ({exc})") from None
    except NoteError as exc:
        raise ValueError(f"--sign {key_file}: {exc}") from None


def write_attestation(signer: Signer, out: Path, data: bytes, files: list) -> Path:
    """Sign the report just written to ``out`` (bytes ``data``); returns the attestation path."""
    from aggregator.verify_signed import verify_signatures

    _, summaries = verify_signatures(files)
    envelope = sign_report(data, out.name, orjson.loads(data), summaries, signer)
    path = attestation_path(out)
    path.write_bytes(orjson.dumps(envelope, option=orjson.OPT_INDENT_2) + b"\n")
    return path
