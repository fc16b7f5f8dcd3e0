"""Signed checkpoints of an agent's chain: the head an archive operator cannot rewrite alone.

After window lines are appended (every ``checkpoint_every`` lines, at every rotation to a new
window file, at start when lines are not yet covered, and at shutdown) the agent signs a C2SP
tlog-checkpoint of its whole chain (origin = agent id, size = lines, RFC 6962 root over the
lines: ``schema.merkle``) with its Ed25519 key, appends it to ``checkpoints.log`` in the agent
directory (fsynced) and hands it to the witness pusher (``agent.witness_push``).

Signing never blocks or fails ingest: the window line is durable before a checkpoint is made,
and a checkpoint that cannot be signed or written is logged and counted
(``carbonspan_checkpoint_errors_total{reason}``); the next one covers the same lines.

The agent refuses to sign a history that contradicts its own last checkpoint (fewer lines than
it signed, or a different root at that size: the archive was cut or rewritten behind its
back), because a log must never sign two inconsistent heads. It logs the conflict, counts it
(``reason="history_conflict"``) and keeps archiving unsigned until an operator looks.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from pathlib import Path
from typing import Any

import orjson

from agent.archive import read_lines, window_files
from agent.config import ConfigError
from agent.metrics import AgentMetrics
from schema import times
from schema.chainlog import append_line
from schema.checkpoint import CHECKPOINTS_NAME, Checkpoint
from schema.merkle import MerkleTree
from schema.note import NoteError, Signer, open_note, sign_note

log = logging.getLogger("carbonspan.agent")


class SigningError(ConfigError):
    """The signing key cannot be used; the message says what to do."""


def load_signer(path: Path, agent_id: str) -> Signer:
    """The agent's signer key from ``path`` (made by ``carbonspan keys generate``)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise SigningError(f"[agent.signing] key_file = '{path}': cannot read it ({exc})") from None
    if mode & 0o077:
        log.warning("signing key %s is readable by group/others (mode %o); chmod 600 it",
                    path, mode & 0o777)
    try:
        signer = Signer.parse(text)
    except NoteError as exc:
        raise SigningError(f"[agent.signing] key_file = '{path}': {exc}") from None
    if signer.name != agent_id:
        raise SigningError(
            f"[agent.signing] key_file = '{path}' holds the key of {signer.name!r}, not of agent "
            f"{agent_id!r}: the key name is the checkpoint origin, so generate one with "
            f"'carbonspan keys generate --name {agent_id}'"
        )
    return signer


class CheckpointLog:
    """Keeps the Merkle tree of one agent's chain and appends its signed checkpoints."""

    def __init__(self, directory: Path, signer: Signer, *, every: int,
                 metrics: AgentMetrics | None = None) -> None:
        self.directory = Path(directory)
        self.path = self.directory / CHECKPOINTS_NAME
        self.signer = signer
        self.origin = signer.name
        self.every = every
        self.metrics = metrics
        self.tree = MerkleTree()
        self.lock = threading.Lock()  # tree and file: the pipeline and the pusher share them
        self.signed_size = 0
        self.conflict: str | None = None
        self.pusher: Any = None  # agent.witness_push.WitnessPusher, set by the daemon

    # -- opening -----------------------------------------------------------------------
    def open(self) -> str | None:
        """Rebuild the tree from the window files, check it against the last checkpoint and
        sign what is not yet covered. Returns the latest signed note (None if none)."""
        for path in window_files(self.directory):
            for line in read_lines(path):
                self.tree.append(line)
        self._cut_torn_tail()
        last = self.last_note()
        if last is not None:
            self._check_history(last)
        if self.tree.size > self.signed_size:
            return self.checkpoint("start")
        return last

    def _cut_torn_tail(self) -> None:
        """A crash mid-append leaves a record without its newline: move it to a ``.corrupt``
        file (never deleted silently) so the next record starts on a line of its own."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end == len(data):
            return
        corrupt = self.directory / f"{CHECKPOINTS_NAME}.{times.now().replace(':', '')}.corrupt"
        corrupt.write_bytes(data[end:])
        os.truncate(self.path, end)
        log.warning("a torn last record of %s (%d bytes, a crash mid-write) was moved to %s",
                    self.path, len(data) - end, corrupt)

    def last_note(self) -> str | None:
        if not self.path.exists():
            return None
        last = None
        for raw in self.path.read_bytes().splitlines():
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # a torn last record (crash mid-write): the one before it stands
            if isinstance(rec, dict) and isinstance(rec.get("note"), str):
                last = rec["note"]
        return last

    def _check_history(self, note: str) -> None:
        try:
            cp = Checkpoint.parse(open_note(note, self.signer.verifier))
        except NoteError as exc:
            self._conflict(f"the last checkpoint in {self.path} does not verify with this "
                           f"agent's key ({exc})")
            return
        if cp.size > self.tree.size:
            self._conflict(f"the last checkpoint signed {cp.size} lines but the archive holds "
                           f"{self.tree.size}: lines were removed after they were signed")
        elif cp.origin != self.origin or self.tree.root(cp.size) != cp.root:
            self._conflict(f"the first {cp.size} lines no longer hash to the root this agent "
                           "signed: the archive was rewritten after it was signed")
        else:
            self.signed_size = cp.size
            if self.metrics is not None:
                self.metrics.checkpoint_size.set(cp.size)

    def _conflict(self, why: str) -> None:
        self.conflict = why
        log.error("signing disabled: %s; run 'carbonspan verify --trust keys.toml' on %s and "
                  "restore the archive from a copy, then restart", why, self.directory)
        if self.metrics is not None:
            self.metrics.checkpoint_errors.labels("history_conflict").inc()

    # -- appending ---------------------------------------------------------------------
    def on_append(self, record: dict[str, Any], line: bytes, rotated: bool) -> None:
        """Called by the archive writer after a line is durable (``line`` without newline)."""
        with self.lock:
            self.tree.append(line)
        if rotated:
            self.checkpoint("rotation")
        elif self.tree.size - self.signed_size >= self.every:
            self.checkpoint("window")

    def on_close(self) -> None:
        self.checkpoint("shutdown")

    def checkpoint(self, reason: str) -> str | None:
        """Sign and append a checkpoint of the whole tree; never raises (logged, counted)."""
        if self.conflict is not None:
            if self.metrics is not None:
                self.metrics.checkpoint_errors.labels("history_conflict").inc()
            return None
        with self.lock:
            size = self.tree.size
            if size == 0 or (size == self.signed_size and reason != "start"):
                return None
            text = Checkpoint(self.origin, size, self.tree.root(size)).text()
            old = self.signed_size
            proof = [base64.b64encode(p).decode() for p in self.tree.consistency_proof(old, size)]
        try:
            note = sign_note(text, [self.signer])
            self.append_record(reason, note, proof_from=old, proof=proof)
        except Exception as exc:  # e.g. a full disk: the lines are safe, the next one covers them
            log.warning("could not write checkpoint of %d lines to %s (%s); the next checkpoint "
                        "covers them", size, self.path, exc)
            if self.metrics is not None:
                self.metrics.checkpoint_errors.labels("write_failed").inc()
            return None
        self.signed_size = size
        if self.metrics is not None:
            self.metrics.checkpoints_written.inc()
            self.metrics.checkpoint_size.set(size)
        if self.pusher is not None:
            self.pusher.submit(note, size)
        return note

    def append_record(self, reason: str, note: str, **extra: Any) -> None:
        rec = {"ts": times.now(), "reason": reason, "note": note, **extra}
        data = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS) + b"\n"
        with self.lock:
            append_line(self.path, data)
