"""Shared fixtures for the placement tests: an isolated environment and trace builders."""

from __future__ import annotations

import textwrap

import pytest

from placement.trace import parse_trace

ENV_KEYS = (
    "CARBONSPAN_CARBON_POLICY_MARGIN_PP",
    "CARBONSPAN_CARBON_POLICY_RETIRE_BELOW_PCT",
    "CARBONSPAN_CARBON_POLICY_RETEST_DAYS",
    "CARBONSPAN_CARBON_POLICY_GATE",
    "CARBONSPAN_PLACEMENT_AUDIT_LOG",
    "CARBONSPAN_PLACEMENT_POLICY_DIR",
    "CARBONSPAN_PLACEMENT_POLICY",
)


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch, tmp_path):
    """No test reads the developer's environment, home directory or real audit log."""
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("CARBONSPAN_PLACEMENT_AUDIT_LOG", str(tmp_path / "audit.jsonl"))


@pytest.fixture
def audit_log(tmp_path):
    return tmp_path / "audit.jsonl"


def _daily(base: float, dip_hours: range, dip: float, days: int) -> list[float]:
    return [dip if h % 24 in dip_hours else base for h in range(days * 24)]


@pytest.fixture
def spatial_win_doc():
    """A trace on which the live spatial policy (carbon-aware) wins by far.

    east dips to 50 at 10-13 h, west at 16-19 h, north is flat 250 (the lowest mean:
    east's mean is (20·400 + 4·50)/24 = 341.7). Jobs (home north, no slack) are submitted
    in a dip, so the cleanest region *now* is the dipping one: carbon-aware emits at 50
    where every baseline stays in north at 250 -> reduction 80 %, both baselines 0 %.
    """
    days = 3
    jobs = [
        {"id": f"j{k}", "submit": 24 + (10 if k % 2 == 0 else 16) + 24 * (k % 2),
         "duration": 2, "energy_kwh": 10.0, "slack": 0, "home": "north"}
        for k in range(6)
    ]
    return {
        "method": "marginal",
        "regions": {
            "east": _daily(400.0, range(10, 14), 50.0, days),
            "west": _daily(400.0, range(16, 20), 50.0, days),
            "north": [250.0] * (days * 24),
        },
        "jobs": jobs,
    }


@pytest.fixture
def flat_doc():
    """Every region flat at 300: nothing can reduce anything, so what ships reduces 0 %."""
    return {
        "method": "average",
        "regions": {"a": [300.0] * 72, "b": [300.0] * 72},
        "jobs": [{"id": "only", "submit": 30, "duration": 3, "energy_kwh": 4.0, "slack": 12}],
    }


@pytest.fixture
def parse():
    return parse_trace


PLUGIN = textwrap.dedent(
    '''
    class GreenPlugin:
        """Scores by carbon only, and says it does not (the gate must not believe it)."""
        name = "green-plugin"
        uses_carbon = False

        def score(self, clusters, job):
            return [None if c.get("carbon_intensity") is None else -c["carbon_intensity"]
                    for c in clusters]


    class RoomyPlugin:
        name = "roomy-plugin"

        def score(self, clusters, job):
            return [c["capacity"] - c["used"] for c in clusters]


    def broken():
        return 42


    class Crashy:
        name = "crashy-plugin"

        def score(self, clusters, job):
            return [c["no-such-field"] for c in clusters]
    '''
)


@pytest.fixture
def plugin_dist(tmp_path, monkeypatch):
    """A tiny installed distribution exposing providers in ``carbonspan.placement_policies``."""
    site = tmp_path / "site"
    (site / "cs_testplugin").mkdir(parents=True)
    (site / "cs_testplugin" / "__init__.py").write_text(PLUGIN)
    info = site / "cs_testplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cs-testplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[carbonspan.placement_policies]\n"
        "green-plugin = cs_testplugin:GreenPlugin\n"
        "roomy-plugin = cs_testplugin:RoomyPlugin\n"
        "broken-plugin = cs_testplugin:broken\n"
        "crashy-plugin = cs_testplugin:Crashy\n"
    )
    monkeypatch.syspath_prepend(str(site))
    return site
