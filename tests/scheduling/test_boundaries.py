"""scheduling/ imports neither the agent nor the aggregator (docs/simulation.md; DESIGN.md).
The only other wing it may reach is placement's public evidence API, and only from
``scheduling/evaluate.py`` (the gate's audit log; see docs/simulation.md, "Evaluate") and
``scheduling/shadow_evidence.py`` (shadow reports as evidence; docs/contracts.md)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "scheduling"


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_scheduling_imports_neither_agent_nor_aggregator() -> None:
    for path in ROOT.rglob("*.py"):
        found = imports(path) & {"agent", "aggregator", "admission"}
        assert not found, f"{path.relative_to(ROOT.parent)} imports {sorted(found)}"


def test_only_evaluate_reaches_placement() -> None:
    users = sorted(p.name for p in ROOT.rglob("*.py") if "placement" in imports(p))
    assert set(users) <= {"evaluate.py", "shadow_evidence.py"}, users
