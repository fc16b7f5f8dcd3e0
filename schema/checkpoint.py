"""C2SP tlog-checkpoint bodies (c2sp.org/tlog-checkpoint) and where an agent keeps them.

A checkpoint's note text is three lines: the log's **origin** (for an archive: the agent id,
which is also its directory name), the tree **size** in decimal (no leading zeros), and the
base64 RFC 6962 **root hash** of the tree of the first ``size`` window lines
(``schema.merkle``). It is signed as a C2SP signed note (``schema.note``) by the agent's key,
whose key name is the origin, and may carry witness cosignatures (tlog-cosignature/v1).

An agent directory keeps its checkpoints in ``checkpoints.log`` beside its window files
(docs/archive-format.md): one JSON object per line, ``{"ts", "reason", "note"}``, where
``note`` is the whole signed note as text. A later line for the same size carries the same
checkpoint with more (witness) signatures.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from schema.merkle import HASH_SIZE
from schema.note import NoteError

CHECKPOINTS_NAME = "checkpoints.log"
_SIZE_RE = re.compile(r"^(0|[1-9][0-9]{0,19})$")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """The checkpoint in a note's text; NoteError naming the line that is wrong."""
        if not text.endswith("\n"):
            raise NoteError("checkpoint text does not end in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3 or any(not ln for ln in lines):
            raise NoteError("a checkpoint is at least three non-empty lines: origin, size, root")
        origin, size, root, *ext = lines
        if not _SIZE_RE.match(size) or int(size) >= 2**63:
            raise NoteError(f"checkpoint size {size[:30]!r} is not a decimal without leading zeros")
        try:
            raw = base64.b64decode(root, validate=True)
        except ValueError:
            raise NoteError(f"checkpoint root {root[:60]!r} is not base64") from None
        if len(raw) != HASH_SIZE:
            raise NoteError(f"checkpoint root is {len(raw)} bytes, not {HASH_SIZE}")
        return cls(origin, int(size), raw, tuple(ext))
