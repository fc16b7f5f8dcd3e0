"""The witness's decisions (C2SP tlog-witness ``add-checkpoint``) and its durable log.

A request body is ``old <size>\\n``, zero to 63 base64 consistency-proof lines, an empty line,
then the signed checkpoint note. The answers, as the spec orders them:

=====  ===============================================================================
 400   malformed body, or ``old`` larger than the checkpoint's size
 404   the origin is not a log this witness is configured for (``[agents]`` of its keys.toml)
 403   no signature by that log's pinned key verifies
 409   ``old`` is not the size it last cosigned (body: that size, ``text/x.tlog.size``), or
       same size with another root
 422   the consistency proof from its last cosigned checkpoint does not verify
 200   the cosignature line(s) (tlog-cosignature/v1, timestamped Ed25519)
=====  ===============================================================================

Checking and persisting happen under one lock, so two racing requests can never roll a log's
state back. Every cosigned checkpoint is appended (fsynced, before answering) to
``witness.log`` in the state directory: a ``schema.chain`` hash-chained JSON-lines log whose
events are ``{origin, size, root, old, note}``, ``note`` being the checkpoint with this
witness's cosignature. On start the log is verified and the latest state per origin rebuilt
from it; a broken log stops the witness (it must not forget what it cosigned).
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from schema import chainlog, times
from schema.chain import seal
from schema.checkpoint import Checkpoint
from schema.merkle import ProofError, verify_consistency
from schema.note import NoteError, Signer, Verifier, check_signature, cosign, matching, split_note

LOG_NAME = "witness.log"
MAX_PROOF_LINES = 63
SIZE_TYPE = "text/x.tlog.size"


class WitnessError(RuntimeError):
    """The witness cannot start; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: str
    content_type: str = "text/plain; charset=utf-8"


class Witness:
    def __init__(self, signer: Signer, logs: dict[str, Verifier], state_dir: Path) -> None:
        self.signer, self.logs = signer, logs
        self.path = Path(state_dir) / LOG_NAME
        self.lock = threading.Lock()
        self.latest: dict[str, tuple[Checkpoint, str]] = {}  # origin -> (checkpoint, cosigned note)
        self._last_hash: str | None = None
        self._seq = 0
        self._load()

    def _load(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        broken = chainlog.verify(self.path)
        if broken:
            raise WitnessError(f"{self.path} is not an intact hash chain ({broken[0]}); the witness "
                               "will not forget what it cosigned: restore the log from a copy")
        for _, rec in chainlog.read_records(self.path):
            assert rec is not None
            ev = rec[chainlog.BODY_KEY]
            text, _ = split_note(ev["note"])
            self.latest[ev["origin"]] = (Checkpoint.parse(text), ev["note"])
            self._last_hash, self._seq = rec["hash"], rec["seq"] + 1

    def add_checkpoint(self, body: bytes) -> Answer:
        try:
            old, proof, note = _parse_request(body)
            text, sigs = split_note(note)
            cp = Checkpoint.parse(text)
        except (NoteError, ValueError) as exc:
            return Answer(400, f"malformed add-checkpoint request: {exc}\n")
        verifier = self.logs.get(cp.origin)
        if verifier is None:
            return Answer(404, f"unknown log origin {cp.origin!r}: not in this witness's [agents]\n")
        mine = matching(sigs, verifier)
        if not mine or any(check_signature(text, s, verifier) is None for s in mine):
            return Answer(403, f"the checkpoint is not signed by {cp.origin!r}'s pinned key\n")
        if old > cp.size:
            return Answer(400, f"old size {old} is larger than the checkpoint's size {cp.size}\n")
        with self.lock:
            return self._decide(cp, text, old, proof)

    def _decide(self, cp: Checkpoint, text: str, old: int, proof: list[bytes]) -> Answer:
        prev = self.latest.get(cp.origin)
        size = prev[0].size if prev else 0
        if old != size:
            return Answer(409, f"{size}\n", SIZE_TYPE)
        if prev is not None and old == cp.size:
            if prev[0].root != cp.root or proof:
                return Answer(409, f"{size}\n", SIZE_TYPE)
        elif prev is not None:
            try:
                verify_consistency(old, cp.size, prev[0].root, cp.root, proof)
            except ProofError as exc:
                return Answer(422, f"consistency proof from {old} to {cp.size} fails: {exc}\n")
        elif proof:
            return Answer(422, "the proof must be empty when old is 0\n")
        line = cosign(text, self.signer, int(time.time())).line()
        self._persist(cp, text + "\n" + line, old)
        return Answer(200, line)

    def _persist(self, cp: Checkpoint, note: str, old: int) -> None:
        event = {"origin": cp.origin, "size": cp.size, "root": base64.b64encode(cp.root).decode(),
                 "old": old, "note": note}
        record = seal(self._last_hash, self._seq, times.now(), chainlog.BODY_KEY, event)
        chainlog.append_line(self.path, orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n")
        self._last_hash, self._seq = record["hash"], self._seq + 1
        self.latest[cp.origin] = (cp, note)


def _parse_request(body: bytes) -> tuple[int, list[bytes], str]:
    text = body.decode("utf-8")
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise ValueError("no empty line between the proof and the checkpoint")
    lines = head.split("\n")
    first = lines[0].split(" ")
    if len(first) != 2 or first[0] != "old" or not (first[1] == "0" or first[1][:1] in "123456789"
                                                      and first[1].isdigit()):
        raise ValueError("the first line must be 'old <size>'")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise ValueError(f"more than {MAX_PROOF_LINES} proof lines")
    try:
        proof = [base64.b64decode(x, validate=True) for x in lines[1:]]
    except (binascii.Error, ValueError):
        raise ValueError("a proof line is not base64") from None
    return int(first[1]), proof, note
