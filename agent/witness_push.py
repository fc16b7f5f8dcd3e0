"""Pushing signed checkpoints to witnesses (C2SP tlog-witness ``add-checkpoint``), off the
ingest path.

One background thread serves every configured witness in turn. It always pushes the newest
checkpoint (older ones are superseded: a witness only needs the latest, with a consistency
proof from the size it last cosigned). Per witness it remembers that size; a ``409 Conflict``
answer (``text/x.tlog.size``) tells it the witness's size, and it retries once with a proof
from there. A cosignature that comes back is appended to ``checkpoints.log`` as the same
checkpoint with the witness's signature line added (``reason = "cosigned"``); only lines of
the answer shaped as tlog-cosignature/v1 under a name the note does not carry are kept
(:func:`cosignatures`), so a hostile answer cannot spoil the agent's own checkpoint.

A witness that is down, slow or refusing never blocks ingest and loses nothing (the checkpoint
is on disk; the next push carries a proof over everything since). Each failure is counted in
``carbonspan_witness_failures_total{witness, reason}`` and logged once per failure streak;
the thread then backs off (1 s doubling to 60 s) for that witness.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from agent.checkpoints import CheckpointLog
from schema.note import COSIGNATURE_BYTES, NoteError, Signature, split_note

log = logging.getLogger("carbonspan.agent")
MAX_BACKOFF_S = 60.0
MAX_RESPONSE_BYTES = 64 * 1024


@dataclass
class _Witness:
    url: str
    size: int = 0  # the size it last cosigned for us, as far as we know
    cosigned: int = -1
    failing: bool = False
    retry_at: float = 0.0
    backoff: float = 0.0


def cosignatures(answer: list[Signature], ours: list[Signature]) -> list[Signature]:
    """The lines of a witness's answer the agent may add to its note: tlog-cosignature/v1
    shaped (8-byte timestamp + 64-byte signature), under a name the note does not carry yet,
    once each. Anything else (a line under the agent's own name, another kind of signature, a
    repeat) would make the agent's own checkpoint fail verification, so it is dropped."""
    names = {s.name for s in ours}
    kept = []
    for s in answer:
        if len(s.blob) == COSIGNATURE_BYTES and s.name not in names:
            names.add(s.name)
            kept.append(s)
    return kept


class WitnessPusher:
    def __init__(self, log_: CheckpointLog, urls: list[str], timeout_s: float) -> None:
        self.cp = log_
        self.timeout_s = timeout_s
        self.witnesses = [_Witness(u.rstrip("/")) for u in urls]
        self._latest: tuple[str, int] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="witness-push", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, note: str, size: int) -> None:
        self._latest = (note, size)
        self._wake.set()

    def stop(self, grace_s: float) -> None:
        """Let a push in flight (bounded by the timeout) finish, then stop; never hangs."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=grace_s)

    def _run(self) -> None:
        while True:
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            latest = self._latest
            if latest is not None:
                for w in self.witnesses:
                    if w.cosigned < latest[1] and time.monotonic() >= w.retry_at:
                        self._push(w, *latest)
            if self._stop.is_set():
                return

    def _push(self, w: _Witness, note: str, size: int) -> None:
        for _ in range(2):  # a 409 tells us the witness's size: one retry with that proof
            try:
                status, body = self._post(w, note, size)
            except (OSError, ValueError) as exc:
                return self._failed(w, "unreachable", str(exc))
            if status == 200:
                return self._cosigned(w, note, size, body)
            if status == 409 and body.strip().isdigit() and int(body.strip()) != w.size:
                w.size = int(body.strip())
                continue
            reason = {403: "forbidden", 404: "unknown_origin", 409: "conflict",
                      422: "bad_proof"}.get(status, "http_error")
            return self._failed(w, reason, f"HTTP {status}: {body.strip()[:200]}")
        return None

    def _post(self, w: _Witness, note: str, size: int) -> tuple[int, str]:
        old = w.size if w.size <= size else 0
        with self.cp.lock:
            proof = self.cp.tree.consistency_proof(old, size)
        lines = "".join(base64.b64encode(p).decode() + "\n" for p in proof)
        body = f"old {old}\n{lines}\n{note}".encode()
        req = urllib.request.Request(f"{w.url}/add-checkpoint", data=body, method="POST",
                                     headers={"Content-Type": "text/plain; charset=utf-8"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, resp.read(MAX_RESPONSE_BYTES).decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            text = exc.read(MAX_RESPONSE_BYTES).decode("utf-8", "replace")
            exc.close()
            return exc.code, text

    def _cosigned(self, w: _Witness, note: str, size: int, body: str) -> None:
        try:
            text, ours = split_note(note)
            _, sigs = split_note(text + "\n" + body)
        except NoteError as exc:
            return self._failed(w, "bad_response", f"the witness answered no signature lines ({exc})")
        kept = cosignatures(sigs, ours)
        if not kept:
            return self._failed(w, "bad_response", "the witness answered no tlog-cosignature/v1 "
                                "line under a name of its own")
        witness = kept[0].name
        try:
            self.cp.append_record("cosigned", note + "".join(s.line() for s in kept), witness=witness)
        except OSError as exc:
            return self._failed(w, "write_failed", str(exc))
        if self.cp.metrics is not None:
            self.cp.metrics.witness_cosignatures.labels(witness).inc()
        if w.failing:
            log.info("witness %s cosigns again (size %d)", w.url, size)
        w.size, w.cosigned, w.failing, w.backoff, w.retry_at = size, size, False, 0.0, 0.0
        return None

    def _failed(self, w: _Witness, reason: str, detail: str) -> None:
        if self.cp.metrics is not None:
            self.cp.metrics.witness_failures.labels(w.url, reason).inc()
        if not w.failing:
            log.warning("witness %s did not cosign (%s: %s); ingest goes on, checkpoints stay in "
                        "%s and the next push carries them", w.url, reason, detail, self.cp.path)
        w.failing = True
        w.backoff = min(MAX_BACKOFF_S, max(1.0, w.backoff * 2))
        w.retry_at = time.monotonic() + w.backoff
