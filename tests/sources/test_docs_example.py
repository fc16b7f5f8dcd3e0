"""The configuration example in docs/energy-sources.md is valid: it parses and builds a manager."""

from __future__ import annotations

import re
from pathlib import Path

from agent.config import load_config
from agent.sources.manager import SourceManager

DOC = Path(__file__).resolve().parents[2] / "docs" / "energy-sources.md"


def test_the_documented_sources_table_is_valid(tmp_path):
    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(), flags=re.S)
    example = next(b for b in blocks if "[sources]" in b)
    path = tmp_path / "carbonspan.toml"
    path.write_text(example)
    cfg = load_config(path)
    mgr = SourceManager.from_config(cfg.sections["sources"], cfg.green)
    kinds = sorted({r.source.kind for r in mgr.runners.values()})
    assert kinds == ["alumet", "electricity_maps", "grid_operator", "kepler", "redfish", "scaphandre", "specpower"]
    assert mgr.host_sources == {"pg-main": "db-alumet"}
    assert [s.kind for s in mgr.energy] == ["alumet", "scaphandre", "kepler", "redfish", "specpower"]
