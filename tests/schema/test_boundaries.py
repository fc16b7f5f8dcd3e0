"""The design's boundary (DESIGN.md, "The house"): the agent and the aggregator never import
each other; both import schema, and schema imports neither. The agent does not import
``scheduling`` either: the signal log both write and read is ``schema.signal_log``. A reader of an archive (the
aggregator, an auditor's copy of it) must not depend on the code that wrote it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"agent": {"aggregator", "scheduling"}, "aggregator": {"agent"},
             "schema": {"agent", "aggregator", "placement", "scheduling"},
             "witness": {"agent", "aggregator", "placement", "admission", "scheduling"}}


def _imports(path: Path) -> set[str]:
    """Top-level packages imported anywhere in the file (including inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_packages_do_not_import_across_the_boundary(package: str) -> None:
    offenders = [f"{p.relative_to(ROOT)} imports {sorted(_imports(p) & FORBIDDEN[package])}"
                 for p in sorted((ROOT / package).rglob("*.py")) if _imports(p) & FORBIDDEN[package]]
    assert offenders == []
