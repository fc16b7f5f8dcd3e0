"""Reading what the signed-head checks need: an agent's lines as Merkle leaves, its
``checkpoints.log`` records, and a witness's log of cosigned checkpoints.

The leaves are the window lines exactly as stored (without the newline), in write order, so
the tree is the one the agent signed (docs/archive-format.md, "Checkpoints"). A line that
cannot be read ends that file's leaves; ``aggregator.verify`` reports the break itself.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from aggregator.files import ArchiveFile, ArchiveReadError, iter_lines
from aggregator.verify import Finding
from schema import chainlog
from schema.archive import BODY_KEY
from schema.checkpoint import CHECKPOINTS_NAME, Checkpoint
from schema.merkle import MerkleTree
from schema.note import NoteError, Signature, check_signature, matching, split_note
from schema.trust import Trust


@dataclass
class CheckpointRecord:
    location: str
    note: str = ""
    text: str = ""
    signatures: list[Signature] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    proof: tuple[int, list[bytes]] | None = None  # (old size, consistency proof) if stored
    error: str = ""


@dataclass
class AgentLog:
    agent: str
    tree: MerkleTree
    files: list[tuple[int, str]]  # (index of the file's first leaf, file label)
    foreign_ids: list[tuple[int, str]]  # (leaf index, agent_id) of lines naming another agent
    records: list[CheckpointRecord]


def parse_record(location: str, raw: bytes) -> CheckpointRecord:
    r = CheckpointRecord(location)
    try:
        rec = orjson.loads(raw)
        r.note = rec["note"]
        r.text, r.signatures = split_note(r.note)
        r.checkpoint = Checkpoint.parse(r.text)
        if "proof" in rec:
            r.proof = (int(rec["proof_from"]), [base64.b64decode(p, validate=True) for p in rec["proof"]])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        r.error = f"not a checkpoint record ({exc})"
    return r


def _open(group: str, name: str) -> bytes | None:
    if "://" in group:
        import fsspec

        fs, root = fsspec.core.url_to_fs(group.rstrip("/") + "/" + name)
        return fs.cat_file(root) if fs.exists(root) else None
    path = Path(group) / name
    return path.read_bytes() if path.exists() else None


def read_agent(files: Sequence[ArchiveFile]) -> AgentLog:
    agent = files[0].agent
    tree, starts, foreign = MerkleTree(), [], []
    for f in files:
        starts.append((tree.size, f.label))
        try:
            for raw in iter_lines(f):
                line = raw[:-1] if raw.endswith(b"\n") else raw
                if not line.strip():
                    continue
                index = tree.append(line)
                _agent_id(line, agent, index, foreign)
        except ArchiveReadError:
            pass
    data = _open(files[0].group, CHECKPOINTS_NAME) or b""
    records = [parse_record(f"{agent}/{CHECKPOINTS_NAME}:{n}", raw)
               for n, raw in enumerate(data.split(b"\n"), start=1) if raw.strip()]
    return AgentLog(agent, tree, starts, foreign, records)


def _agent_id(line: bytes, agent: str, index: int, out: list[tuple[int, str]]) -> None:
    try:
        rep = orjson.loads(line).get(BODY_KEY)
        agent_id = rep.get("agent_id") if isinstance(rep, dict) else None
    except (orjson.JSONDecodeError, AttributeError):
        return
    if isinstance(agent_id, str) and agent_id and agent_id != agent:
        out.append((index, agent_id))


def read_witness_log(path: Path, trust: Trust | None) -> tuple[list[Finding], dict[str, tuple[str, Checkpoint]]]:
    """The latest checkpoint per origin that a pinned witness cosigned in its log at ``path``."""
    findings = [Finding(c.location, "witness_log_broken", c.message)
                for c in chainlog.verify(Path(path))]
    heads: dict[str, tuple[str, Checkpoint]] = {}
    witnesses = list(trust.witnesses.values()) if trust is not None else []
    unproven: list[str] = []  # records no pinned witness cosigned: they prove nothing
    records = 0
    for location, rec in chainlog.read_records(Path(path)):
        records += 1
        cp = _cosigned(rec, witnesses)
        if cp is None:
            unproven.append(location)
        elif cp.origin not in heads or cp.size > heads[cp.origin][1].size:
            heads[cp.origin] = (location, cp)
    if unproven:
        why = ("no [witnesses] key is pinned in --trust" if not witnesses else
               "its cosignature does not verify with a pinned [witnesses] key, or it is no "
               "cosigned checkpoint")
        findings.append(Finding(unproven[0], "witness_log_unverified",
                                f"{len(unproven)} of {records} record(s) of this witness log prove "
                                f"nothing ({why}): the log was edited, or is another witness's; "
                                "pin the witness's key and get its log from the witness itself"))
    return findings, heads


def _cosigned(rec: dict | None, witnesses: list) -> Checkpoint | None:
    """The checkpoint of a witness-log record if a pinned witness's cosignature on it verifies."""
    event = rec.get(chainlog.BODY_KEY) if rec else None
    if not isinstance(event, dict) or not isinstance(event.get("note"), str):
        return None
    try:
        text, sigs = split_note(event["note"])
        cp = Checkpoint.parse(text)
    except NoteError:
        return None
    if not any(check_signature(text, s, w) is not None for w in witnesses for s in matching(sigs, w)):
        return None
    return cp
