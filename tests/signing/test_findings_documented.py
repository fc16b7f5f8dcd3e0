"""Every finding the signed-head checks can give is a row of docs/auditors-guide.md, so an
auditor who reads a finding's name finds what it means (issue 14: each forgery a named,
documented finding)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = ("aggregator/verify_signed.py", "aggregator/signed_read.py", "aggregator/attest.py")


def _kinds(path: Path) -> set[str]:
    """The ``kind`` of every ``Finding(where, kind, message)`` and ``self.add(where, kind, ...)``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        fn = node.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
        if name in ("Finding", "add") and isinstance(node.args[1], ast.Constant):
            out.add(node.args[1].value)
    return out


def test_every_signing_finding_is_documented() -> None:
    guide = (REPO / "docs/auditors-guide.md").read_text()
    kinds = set().union(*(_kinds(REPO / m) for m in MODULES))
    assert len(kinds) >= 25  # the extractor still sees them
    missing = sorted(k for k in kinds if f"| `{k}` |" not in guide)
    assert not missing, f"add a row to docs/auditors-guide.md for each of {missing}"
