"""Per-pool usage rows for people and JSON: what ``carbonspan admit simulate`` prints at the end.

Kept out of the engine because it walks the whole forest (the engine never does per claim).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from admission.model import Forest
from admission.reclaim import leaves_under


def usage_rows(forest: Forest, cap_uj: Callable[[str], int]) -> list[dict[str, Any]]:
    """One row per pool, parents before children: guarantee, spent, reserved, used, borrowed,
    what the pool may hold right now (``cap_uj``), devices and running workloads."""
    rows = []
    for d in forest.to_dicts():
        p = forest.pools[d["name"]]
        rows.append(
            {
                "pool": p.name,
                "parent": d["parent"],
                "depth": len(p.path) - 1,
                "guarantee_uj": p.guarantee_uj,
                "spent_uj": p.spent_uj,
                "reserved_uj": p.reserved_uj,
                "used_uj": p.used_uj,
                "borrowed_uj": max(0, p.used_uj - p.guarantee_uj),
                "cap_uj": cap_uj(p.name),
                "devices_used": p.devices_used,
                "devices": p.devices,
                "workloads": sum(len(leaf.workloads) for leaf in leaves_under(p)),
            }
        )
    return rows
