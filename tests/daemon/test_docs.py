"""docs/operations.md stays the reference: every setting's variable and every metric is in it."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from pathlib import Path

from agent.daemon_config import AgentSettings, env_names
from agent.metrics import AgentMetrics

DOC = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()


def test_every_setting_is_in_the_config_reference() -> None:
    missing = [name for name in env_names() if f"`{name}`" not in DOC]
    assert missing == [], f"add to docs/operations.md: {missing}"
    base = AgentSettings()  # sub-tables ([agent.archive], ...) are checked by their variables above
    top = [f.name for f in fields(AgentSettings) if not is_dataclass(getattr(base, f.name))]
    assert [k for k in top if f"`[agent] {k}`" not in DOC] == []


def test_every_metric_is_explained() -> None:
    exposed = {family.name for family in AgentMetrics().registry.collect()}
    assert len(exposed) >= 19
    missing = [name for name in sorted(exposed) if f"`{name}" not in DOC]
    assert missing == [], f"add to the metrics table of docs/operations.md: {missing}"
