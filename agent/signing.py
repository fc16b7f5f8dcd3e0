"""Wiring signed checkpoints into a running agent (called by ``agent.daemon``).

``[agent.signing] key_file`` turns it on. The key must live outside the archive directory:
whoever can rewrite the archive must not thereby hold the key that signs its heads
(docs/auditors-guide.md). For production keys in an HSM or KMS, see the PKCS#11/KMS note
there: only :meth:`schema.note.Signer.sign` needs replacing.
"""

from __future__ import annotations

import logging

from agent.archive import ArchiveWriter
from agent.checkpoints import CheckpointLog, SigningError, load_signer
from agent.daemon_config import AgentSettings
from agent.metrics import AgentMetrics
from agent.witness_push import WitnessPusher

log = logging.getLogger("carbonspan.agent")


class Signing:
    """The checkpoint log and witness pusher of one agent; ``stop`` after the archive closes."""

    def __init__(self, cp: CheckpointLog, pusher: WitnessPusher | None, grace_s: float) -> None:
        self.log, self.pusher, self.grace_s = cp, pusher, grace_s

    def stop(self) -> None:
        if self.pusher is not None:
            self.pusher.stop(self.grace_s)


def attach(settings: AgentSettings, archive: ArchiveWriter, metrics: AgentMetrics) -> Signing | None:
    """Sign the chain of ``archive`` (already opened and recovered); None when signing is off."""
    s = settings.signing
    if s.key_file is None:
        return None
    root = settings.archive.dir.resolve()
    key = s.key_file.resolve()
    if key.is_relative_to(root):
        raise SigningError(
            f"[agent.signing] key_file = '{s.key_file}' is inside the archive directory {root}: "
            "whoever can rewrite the archive would hold the key that vouches for it; keep the "
            "key elsewhere (e.g. /etc/carbonspan/agent.key, mode 600)"
        )
    signer = load_signer(s.key_file, settings.agent_id)
    cp = CheckpointLog(settings.archive_path, signer, every=s.checkpoint_every,
                       metrics=metrics)
    pusher = None
    if s.witness_urls:
        pusher = WitnessPusher(cp, s.witness_urls, s.witness_timeout_s)
        cp.pusher = pusher
        pusher.start()
    latest = cp.open()
    if latest is not None and pusher is not None:
        pusher.submit(latest, cp.signed_size)
    archive.listener = cp
    log.info("signing checkpoints of %s as %s (%d lines, %d witness(es))", settings.archive_path,
             signer.verifier.encode(), cp.tree.size, len(s.witness_urls))
    return Signing(cp, pusher, s.witness_timeout_s)
