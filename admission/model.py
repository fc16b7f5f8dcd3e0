"""The pool forest: guarantees in microjoules and devices, weights, and where each pool sits.

A pool has a per-window energy guarantee (integer µJ), a device guarantee, a weight for
sharing surplus among its siblings, and children. A child's guarantees fit inside its
parent's: the children's energy guarantees sum to at most the parent's, and so do their device
guarantees. Claims name leaf pools; inner pools group tenants and lend (like Kueue's cohorts).

The forest is loaded from TOML (a flat list of ``[[pool]]`` tables with ``parent`` names) and
checked once at load, so the admission hot path never meets a malformed pool. Per-pool usage
aggregates live on the ``Pool`` objects themselves and are kept up to date incrementally by
``admission.engine``; nothing here walks the tree per claim.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from admission.claims import MAX_INT


class PoolConfigError(ValueError):
    """The pool definition cannot be used; the message says which pool and what to change."""


class Pool:
    """One pool: static definition plus the usage aggregates the engine maintains.

    Aggregates cover the pool's whole subtree: ``spent_uj`` (metered this window),
    ``reserved_uj`` (admitted, not yet spent), ``used_uj = spent_uj + reserved_uj``,
    ``devices_used``, and ``children_in_guarantee_uj`` = Σ over children of
    ``min(child.used_uj, child.guarantee_uj)`` (the part of the children's usage that their
    own guarantees cover; what is left of the parent is the surplus they share).
    """

    __slots__ = (
        "name",
        "parent",
        "children",
        "guarantee_uj",
        "devices",
        "weight",
        "children_weight",
        "path",
        "ceiling_uj",
        "up",
        "spent_uj",
        "used_uj",
        "devices_used",
        "children_in_guarantee_uj",
        "workloads",
    )

    def __init__(self, name: str, guarantee_uj: int, devices: int, weight: int) -> None:
        self.name = name
        self.parent: Pool | None = None
        self.children: list[Pool] = []
        self.guarantee_uj = guarantee_uj
        self.devices = devices
        self.weight = weight
        self.children_weight = 0
        self.path: tuple[Pool, ...] = ()  # root first, this pool last
        self.up: tuple[Pool, ...] = ()  # this pool first, root last (the order updates walk)
        self.ceiling_uj = guarantee_uj  # the most this pool could ever hold in one window
        self.spent_uj = 0
        self.used_uj = 0
        self.devices_used = 0
        self.children_in_guarantee_uj = 0
        self.workloads: dict[str, Any] = {}

    @property
    def reserved_uj(self) -> int:
        """µJ admitted and not yet spent (kept as ``used - spent``: one field less per update)."""
        return self.used_uj - self.spent_uj

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def root(self) -> Pool:
        return self.path[0]

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, guarantee_uj={self.guarantee_uj}, devices={self.devices})"


def _int_field(table: Mapping[str, Any], key: str, where: str, *, minimum: int, default: int | None = None) -> int:
    if key not in table:
        if default is None:
            raise PoolConfigError(f"{where}: missing '{key}' (an integer >= {minimum})")
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise PoolConfigError(
            f"{where}: '{key}' must be an integer >= {minimum}, got {value!r}; "
            "energy is in whole microjoules (1 J = 1_000_000 µJ), never a float"
        )
    if value < minimum:
        raise PoolConfigError(f"{where}: '{key}' must be >= {minimum}, got {value}")
    if value > MAX_INT:
        raise PoolConfigError(
            f"{where}: '{key}' must be at most {MAX_INT}, got {value}; decision logs and "
            "archives hold 64-bit integers (2^63 - 1 µJ is about 2.5 GWh)"
        )
    return value


class Forest:
    """All pools by name, with the static facts derived once at load."""

    def __init__(self, pools: Iterable[Pool]) -> None:
        self.pools: dict[str, Pool] = {p.name: p for p in pools}
        self.roots: list[Pool] = [p for p in self.pools.values() if p.parent is None]

    def __getitem__(self, name: str) -> Pool:
        return self.pools[name]

    def __contains__(self, name: object) -> bool:
        return name in self.pools

    def __len__(self) -> int:
        return len(self.pools)

    def leaves(self) -> list[Pool]:
        return [p for p in self.pools.values() if p.is_leaf]

    def to_dicts(self) -> list[dict[str, Any]]:
        """The definition as plain dicts (parents before children), e.g. for the decision log."""
        out: list[dict[str, Any]] = []
        for root in self.roots:
            stack = [root]
            while stack:
                p = stack.pop()
                out.append(
                    {
                        "name": p.name,
                        "parent": p.parent.name if p.parent else None,
                        "energy_uj": p.guarantee_uj,
                        "devices": p.devices,
                        "weight": p.weight,
                    }
                )
                stack.extend(reversed(p.children))
        return out


def build_forest(tables: Iterable[Mapping[str, Any]], source: str = "pools") -> Forest:
    """Build and check a forest from ``[[pool]]`` tables; raise PoolConfigError on any fault."""
    pools: dict[str, Pool] = {}
    parents: dict[str, str | None] = {}
    for i, table in enumerate(tables, start=1):
        where = f"{source}: pool #{i}"
        if not isinstance(table, Mapping):
            raise PoolConfigError(f"{where}: expected a table, got {type(table).__name__}")
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise PoolConfigError(f"{where}: missing 'name' (a non-empty string)")
        where = f"{source}: pool '{name}'"
        if name in pools:
            raise PoolConfigError(f"{where}: defined twice; pool names must be unique")
        unknown = set(table) - {"name", "parent", "energy_uj", "devices", "weight"}
        if unknown:
            raise PoolConfigError(
                f"{where}: unknown key(s) {sorted(unknown)}; "
                "allowed: name, parent, energy_uj, devices, weight"
            )
        parent = table.get("parent")
        if parent is not None and (not isinstance(parent, str) or not parent):
            raise PoolConfigError(f"{where}: 'parent' must be a pool name, got {parent!r}")
        pools[name] = Pool(
            name,
            _int_field(table, "energy_uj", where, minimum=0),
            _int_field(table, "devices", where, minimum=0),
            _int_field(table, "weight", where, minimum=1, default=1),
        )
        parents[name] = parent
    if not pools:
        raise PoolConfigError(f"{source}: no pools defined; add at least one [[pool]] table")
    for name, parent in parents.items():
        if parent is None:
            continue
        if parent not in pools:
            raise PoolConfigError(
                f"{source}: pool '{name}' names parent '{parent}', which is not defined"
            )
        pools[name].parent = pools[parent]
        pools[parent].children.append(pools[name])
    _derive(pools, source)
    return Forest(pools.values())


def _derive(pools: dict[str, Pool], source: str) -> None:
    """Check nesting and fill ``path``, ``children_weight`` and ``ceiling_uj`` top-down."""
    roots = [p for p in pools.values() if p.parent is None]
    seen: set[str] = set()
    stack = [(r, (r,)) for r in roots]
    while stack:
        pool, path = stack.pop()
        seen.add(pool.name)
        pool.path = path
        pool.up = tuple(reversed(path))
        pool.children_weight = sum(c.weight for c in pool.children)
        _check_fits(pool, source)
        parent = pool.parent
        if parent is not None:
            # Everything else under the parent idle: the sibling surplus is the parent's ceiling
            # less this pool's guarantee, and this pool's weighted share of it is the most it
            # could ever borrow (the surplus formula of docs/admission.md with used = 0).
            surplus = parent.ceiling_uj - pool.guarantee_uj
            pool.ceiling_uj = pool.guarantee_uj + surplus * pool.weight // parent.children_weight
        stack.extend((c, (*path, c)) for c in pool.children)
    cyclic = sorted(set(pools) - seen)
    if cyclic:
        raise PoolConfigError(
            f"{source}: pools {cyclic} form a cycle of parents; every pool must reach a root"
        )


def _check_fits(pool: Pool, source: str) -> None:
    for attr, unit, key in (("guarantee_uj", " µJ", "energy_uj"), ("devices", " devices", "devices")):
        total = sum(getattr(c, attr) for c in pool.children)
        own = getattr(pool, attr)
        if total > own:
            raise PoolConfigError(
                f"{source}: the children of pool '{pool.name}' guarantee {total}{unit} in total, "
                f"more than its own {own}{unit}; a child's guarantee must fit inside its "
                f"parent's: lower the children's {key} or raise the parent's"
            )


def load_pools(path: str | Path) -> Forest:
    """Load a forest from a TOML file of ``[[pool]]`` tables (see docs/admission.md)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise PoolConfigError(f"{path}: no such file; pass the pool definition with --pools") from None
    except OSError as exc:
        raise PoolConfigError(f"{path}: cannot read the pool definition: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PoolConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise PoolConfigError(f"{path}: not valid TOML: the file is not UTF-8 text") from None
    tables = doc.get("pool")
    if not isinstance(tables, list):
        raise PoolConfigError(f"{path}: expected [[pool]] tables (an array of tables named 'pool')")
    return build_forest(tables, source=path.name)
