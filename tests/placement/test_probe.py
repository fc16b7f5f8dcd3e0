"""The probe cannot be dodged (issue 13, item 3): it spans 0 to beyond 2,000 g, looks near the
real clusters' own values, does not announce itself, and any difference counts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from placement import place, resolve
from placement.formula import FormulaProvider
from placement.probe import PROBE_LEVELS, STAND_INS, weighs_carbon
from placement.providers import CarbonAware, CarbonSimple, CostAware, Headroom

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def cl(name, ci, cost=1.0, capacity=10.0, used=0.0):
    return {"name": name, "region": name.upper(), "carbon_intensity": ci,
            "cost_per_hour": cost, "capacity": capacity, "used": used}


def test_a_floor_above_1000_g_is_still_weighing_carbon(audit_log, tmp_path):
    f = tmp_path / "floor.yaml"
    f.write_text("name: floored\nminimize: max(carbon_intensity, 1001)\n")
    # lignite grids: the formula prefers 1,100 g over 1,400 g, so it places by carbon
    clusters = [cl("lignite-a", 1400.0), cl("lignite-b", 1100.0)]
    rep = place({"id": "j"}, clusters, str(f), audit_log=audit_log, now=NOW)
    pp = rep["objectives"]["placement_policy"]
    assert pp["weighs_carbon"] is True and pp["action"] == "carbon-withheld"
    assert rep["cluster"] == "lignite-a"  # withheld: equal intensities, the first cluster


@pytest.mark.parametrize("expr", ["max(carbon_intensity, 1990)", "min(carbon_intensity, 0.5)",
                                  "max(carbon_intensity, 1500) * cost_per_hour"])
def test_thresholds_anywhere_from_0_to_2000_g_are_seen_without_clusters(expr):
    assert weighs_carbon(FormulaProvider("t", expr, False, "test"))
    assert PROBE_LEVELS[0] == 0.0 and PROBE_LEVELS[-1] >= 2000.0


class Evasive:
    """Carbon-blind whenever anything looks like a probe, carbon-first otherwise."""

    name = "evasive"

    def score(self, clusters, job):
        looks = any("probe" in str(c.get(k, "")).lower() for c in clusters for k in ("name", "region"))
        if looks or "probe" in str(job.get("id", "")):
            return [0.0 for _ in clusters]
        return [-(c["carbon_intensity"] or 0.0) for c in clusters]


def test_nothing_announces_a_probe(audit_log):
    assert weighs_carbon(Evasive())
    assert all("probe" not in n + r for n, r in STAND_INS)
    assert resolve(Evasive(), audit_log=audit_log, now=NOW).action == "carbon-withheld"


class NarrowBump:
    """Weighs carbon only within 1 g of 433.5: invisible to a coarse sweep."""

    name = "narrow"

    def score(self, clusters, job):
        return [1.0 if c["carbon_intensity"] is not None and 433.0 < c["carbon_intensity"] < 434.0
                else 0.0 for c in clusters]


def test_pairs_near_the_real_clusters_own_values(audit_log):
    assert not weighs_carbon(NarrowBump())  # nowhere near a real value: the sweep misses it
    clusters = [cl("grey", 700.0), cl("odd", 433.5)]
    assert weighs_carbon(NarrowBump(), clusters, {"id": "j"})
    rep = place({"id": "j"}, clusters, NarrowBump(), audit_log=audit_log, now=NOW)
    assert rep["objectives"]["placement_policy"]["action"] == "carbon-withheld"
    assert rep["cluster"] == "grey"  # withheld, it cannot single the 433.5 g cluster out


def test_a_score_that_depends_on_the_name_is_not_mistaken_for_carbon():
    class ByName:
        name = "by-name"

        def score(self, clusters, job):
            return [float(len(c["name"])) for c in clusters]

    assert not weighs_carbon(ByName(), [cl("a", 10.0), cl("bbb", 900.0)], {"id": "j"})


def test_any_difference_counts_even_an_unreproducible_score():
    class Jitter:
        name = "jitter"
        n = 0

        def score(self, clusters, job):
            self.n += 1
            return [float(self.n % 2) for _ in clusters]

    assert weighs_carbon(Jitter())


def test_the_built_ins_are_probed_as_before():
    assert all(weighs_carbon(p()) for p in (CarbonAware, CarbonSimple, CostAware))
    assert not weighs_carbon(Headroom())
    assert not weighs_carbon(FormulaProvider("cheap", "cost_per_hour", False, "t"),
                             [cl("a", 10.0, cost=2.0), cl("b", 500.0)], {"id": "j"})
