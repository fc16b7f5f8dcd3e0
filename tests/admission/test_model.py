"""Loading the pool forest from TOML: the nesting rule and the error messages."""

from __future__ import annotations

import pytest

from admission.model import PoolConfigError, build_forest, load_pools

GOOD = """
[[pool]]
name = "org"
energy_uj = 40_000_000_000_000  # 40 MJ
devices = 64

[[pool]]
name = "research"
parent = "org"
energy_uj = 30_000_000_000_000
devices = 48
weight = 3

[[pool]]
name = "web"
parent = "org"
energy_uj = 10_000_000_000_000
devices = 16
"""


def test_load_good_forest_and_derive_ceilings(tmp_path):
    path = tmp_path / "pools.toml"
    path.write_text(GOOD)
    forest = load_pools(path)
    assert [r.name for r in forest.roots] == ["org"]
    research, web = forest["research"], forest["web"]
    assert forest["org"].children_weight == 4
    assert [p.name for p in web.path] == ["org", "web"]
    # ceiling = guarantee + (parent ceiling - guarantee) x weight // Σ weights
    assert research.ceiling_uj == 30_000_000_000_000 + 10_000_000_000_000 * 3 // 4
    assert web.ceiling_uj == 10_000_000_000_000 + 30_000_000_000_000 * 1 // 4
    assert forest.to_dicts()[0] == {
        "name": "org", "parent": None, "energy_uj": 40_000_000_000_000, "devices": 64, "weight": 1,
    }


@pytest.mark.parametrize(
    "tables, match",
    [
        ([{"name": "p", "energy_uj": 10, "devices": 1}, {"name": "c", "parent": "p", "energy_uj": 11, "devices": 1}],
         r"children of pool 'p' guarantee 11 µJ in total, more than its own 10 µJ"),
        ([{"name": "p", "energy_uj": 10, "devices": 1}, {"name": "c", "parent": "p", "energy_uj": 1, "devices": 2}],
         r"children of pool 'p' guarantee 2 devices"),
        ([{"name": "p", "energy_uj": 1.5, "devices": 1}], r"'energy_uj' must be an integer.*never a float"),
        ([{"name": "p", "energy_uj": 1, "devices": 1, "weight": 0}], r"'weight' must be >= 1"),
        ([{"name": "p", "energy_uj": 2**63, "devices": 1}], r"'energy_uj' must be at most 9223372036854775807.*64-bit"),
        ([{"name": "p", "energy_uj": 1}], r"missing 'devices'"),
        ([{"name": "p", "energy_uj": 1, "devices": 1, "quota": 3}], r"unknown key\(s\) \['quota'\]"),
        ([{"name": "p", "energy_uj": 1, "devices": 1}, {"name": "p", "energy_uj": 1, "devices": 1}], "defined twice"),
        ([{"name": "c", "parent": "nope", "energy_uj": 1, "devices": 1}], "parent 'nope', which is not defined"),
        ([{"name": "a", "parent": "b", "energy_uj": 1, "devices": 1}, {"name": "b", "parent": "a", "energy_uj": 1, "devices": 1}],
         "form a cycle"),
        ([], "no pools defined"),
    ],
)
def test_bad_forests_are_refused_with_the_reason(tables, match):
    with pytest.raises(PoolConfigError, match=match):
        build_forest(tables)


def test_bad_toml_files(tmp_path):
    with pytest.raises(PoolConfigError, match="no such file"):
        load_pools(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[pool]\nname=")
    with pytest.raises(PoolConfigError, match="not valid TOML"):
        load_pools(bad)
    with pytest.raises(PoolConfigError, match="cannot read the pool definition"):
        load_pools(tmp_path)  # a directory
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[[pool]]")
    with pytest.raises(PoolConfigError, match="not UTF-8"):
        load_pools(binary)
    empty = tmp_path / "empty.toml"
    empty.write_text("title = 'x'\n")
    with pytest.raises(PoolConfigError, match=r"expected \[\[pool\]\] tables"):
        load_pools(empty)
