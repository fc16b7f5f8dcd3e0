"""The backfill term of the fold: which part of each figure came from backfilled chains.

``carbonspan backfill`` writes chains whose every line says ``methodology.backfill = "true"``
(agent/backfill.py). Beside the figures it folds anyway, AggregateState keeps what such lines
added: per service (energy, operational carbon, requests, windows) in ``backfill_services``
and in total (energy with hosts, the four carbon terms, requests, windows) in ``backfill``.
The additions are the very values the fold adds to the figures, so the term equals the fold
of the backfilled lines alone (tests/aggregator/test_backfill_term.py) and a share is never
above 1.

A line is backfilled when its ``methodology`` is an object whose ``backfill`` is the string
``"true"``; anything else (``"TRUE"``, ``true``, a missing key) is not. Backfilled lines are
always folded by the general path (``parse_window`` + ``process_window``): the fast paths -
the C ``aggregator._fold.fold_plain`` and the Python ``fold_plain`` / ``fold_proxy`` -
decline them having changed nothing, so the term is computed in one place, the reference.

Per service the term follows the service's figures exactly: an entry the fold drops (past the
service cap, an unusable name) is not in it, and the merge drops it where the merge drops the
service (aggregator/merge.py), so partitioned and sequential folds agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aggregator.accumulators import ServiceAcc
    from aggregator.read import Window

UNATTRIBUTED = "_unattributed"  # aggregator.fold_proxy.UNATTRIBUTED (not imported: a cycle)


def is_backfill(meta: object) -> bool:
    """Whether a line's ``methodology`` marks it as backfilled (``backfill = "true"``)."""
    if type(meta) is not dict:
        return False
    value = meta.get("backfill")
    return type(value) is str and value == "true"


@dataclass(slots=True)
class BackfillSums:
    """What backfilled lines credited one service (or ``_unattributed``)."""

    energy: float = 0.0  # kWh
    carbon: float = 0.0  # kg CO2e, operational
    requests: int = 0
    windows: int = 0

    def add(self, other: BackfillSums) -> None:
        self.energy += other.energy
        self.carbon += other.carbon
        self.requests += other.requests
        self.windows += other.windows


@dataclass(slots=True)
class BackfillTotals:
    """What backfilled windows added to the totals (the same additions, in the same order)."""

    windows: int = 0
    energy: float = 0.0  # kWh: application + host energy, as total_energy_kwh
    operational_kg: float = 0.0
    embodied_kg: float = 0.0
    database_kg: float = 0.0
    messaging_kg: float = 0.0
    requests: int = 0

    def add(self, other: BackfillTotals) -> None:
        self.windows += other.windows
        self.energy += other.energy
        self.operational_kg += other.operational_kg
        self.embodied_kg += other.embodied_kg
        self.database_kg += other.database_kg
        self.messaging_kg += other.messaging_kg
        self.requests += other.requests


class BackfillTerm:
    """The term's additions; the state provides ``backfill``, ``backfill_services`` and
    ``services`` (AggregateState)."""

    backfill: BackfillTotals
    backfill_services: dict[str, BackfillSums]
    services: dict[str, ServiceAcc]

    def _backfill_credit(self, name: str, energy: float, carbon: float, requests: int) -> None:
        sums = self.backfill_services.get(name)
        if sums is None:
            sums = self.backfill_services[name] = BackfillSums()
        sums.energy += energy
        sums.carbon += carbon
        sums.requests += requests
        sums.windows += 1

    def _backfill_entries(self, names: Iterable[str], targets: Iterable[object], energies: Iterable[float],
                          carbons: Iterable[float], requests: Iterable[int] | None) -> None:
        """A runtime window's entries as credited (sanitised lists; a ``None`` target was
        dropped by the service cap and is not in the term)."""
        for name, acc, e, c, r in zip(names, targets, energies, carbons,
                                      requests if requests is not None else repeat(0), strict=False):
            if acc is not None:
                self._backfill_credit(name, e, c, r)

    def _backfill_split(self, io_split: dict[str, int], io_total: int, app_energy: float, app_kg: float) -> None:
        """A proxy window's split as ``_split_proxy`` credited it: each service its share of
        I/O ops (the same products), if the fold holds the service."""
        for name, ops in io_split.items():
            if name == UNATTRIBUTED or name in self.services:
                share = ops / io_total
                self._backfill_credit(name, app_energy * share, app_kg * share, 0)

    def _backfill_window(self, w: Window, energy: float, operational_kg: float, requests: int) -> None:
        """The window's totals: ``energy``, ``operational_kg`` and ``requests`` are what the
        fold added to ``energy``, ``operational_kg`` and ``requests``."""
        b = self.backfill
        b.windows += 1
        b.energy += energy
        b.operational_kg += operational_kg
        b.requests += requests
        b.embodied_kg += w.embodied_g / 1000.0
        b.database_kg += w.database_g / 1000.0
        b.messaging_kg += w.messaging_g / 1000.0
