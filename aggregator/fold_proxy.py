"""The I/O proxy path of AggregateState: ``_proxy`` (the general path) and ``fold_proxy``
(a v1.0 line folded straight from the loaded dict), one place for the proxy's arithmetic.

A v1.0 agent writes no per-service maps, so the general path builds a ``Window`` and then
splits the window's energy and carbon by each service's share of I/O ops
(``AggregateState._proxy``). ``fold_proxy`` does the same additions in the same order - the
split itself is the shared ``_split_proxy`` - without the ``Window`` and the general parser's
calls. Like ``fold_plain`` it checks everything first: a line with host rows, a figure or an
I/O row the sanitiser would touch, a non-object where an object belongs, a backfilled line,
or nothing to split by (where strict attribution may have to fail) returns ``None`` having changed nothing, and
the caller takes the general path. tests/aggregator/test_fold_fast.py folds hostile v1.0
lines both ways and asserts byte-identical reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aggregator.fold_backfill import is_backfill
from aggregator.fold_fast import clean_figures, finish_window
from aggregator.sanitize import MAX_COUNT
from schema.constants import ENERGY_PER_IO_OP_KWH

if TYPE_CHECKING:
    from aggregator.read import Window

_EMPTY: dict = {}
UNATTRIBUTED = "_unattributed"
_UNSET = object()  # the proxy loop's tag before its first credit


class AttributionError(Exception):
    """Strict attribution: a window had nothing to split its energy and carbon by."""


def _tag(value: object) -> str | None:
    return value if type(value) is str and value else None


class ProxyFast:
    """``_proxy(w, location, strict)`` and ``fold_proxy(rec, gs, start)``; the state provides
    the accumulators and ``_credit``."""

    def _proxy(self, w: Window, location: str, strict: bool, backfill: bool = False) -> tuple[float, float, int]:
        """Split the window by I/O share; returns what was added to the energy, operational
        carbon and request totals. A ``backfill`` window's credits also go to the backfill term."""
        io_total = sum(w.io_split.values())
        if w.energy_kwh > 0.0:
            app_energy = max(0.0, w.energy_kwh - w.host_energy)
        else:
            app_energy = (w.total_io_ops or io_total) * ENERGY_PER_IO_OP_KWH
        app_g = w.operational_g or max(0.0, w.mid_g - w.embodied_g - w.database_g - w.messaging_g)
        app_kg = app_g / 1000.0
        added = (app_energy + w.host_energy, app_kg, w.traces)
        self.energy += added[0]
        self.operational_kg += app_kg
        self.requests += w.traces
        bucket = self._bcache[2]  # type: ignore[attr-defined]  # the window's (aggregator.series)
        bucket.energy += app_energy + w.host_energy
        bucket.operational += app_kg
        bucket.requests += w.traces
        if io_total == 0 and app_energy == 0.0 and app_kg == 0.0 and not w.one_sided:
            self.idle_windows += 1  # a host-only window: nothing to attribute, not a fallback
            return added
        self.fallback_windows += 1
        if io_total == 0:
            if strict:
                raise AttributionError(
                    f"{location}: window has no per-service maps and no I/O ops to split "
                    f"{app_energy:g} kWh by; drop --strict-attribution to book it as "
                    f"{UNATTRIBUTED}, or fix the agent that wrote it"
                )
            self._credit(UNATTRIBUTED, "unknown", app_energy, app_kg, 0, w.model)
            if backfill:
                self._backfill_credit(UNATTRIBUTED, app_energy, app_kg, 0)  # type: ignore[attr-defined]
            return added
        if w.host_names:
            self.host_named_services += sum(1 for name in w.io_split if name in w.host_names)
        self._split_proxy(w.io_split, io_total, app_energy, app_kg, w.model)
        if backfill:
            self._backfill_split(w.io_split, io_total, app_energy, app_kg)  # type: ignore[attr-defined]
        return added

    def _split_proxy(self, io_split: dict[str, int], io_total: int, app_energy: float, app_kg: float,
                     model: str | None) -> None:
        """Credit each service its share of I/O ops (``io_total`` > 0)."""
        # Every entry carries the window's one model, so after the first credit the tag set's
        # answer is known: accepted (count one more) or rejected (count one more rejection).
        services, tag = self.services, _UNSET
        bucket = self._bcache[2]  # type: ignore[attr-defined]
        for name, ops in io_split.items():
            share = ops / io_total
            acc = services.get(name)
            if acc is None or tag is _UNSET:  # a new or dropped service, or the first entry
                answer = self._credit(name, "unknown", app_energy * share, app_kg * share, 0, model)
                tag = answer if tag is _UNSET else tag
                continue
            acc.energy += app_energy * share  # a known service (proxy windows know no region)
            acc.carbon += app_kg * share
            acc.windows += 1
            cell = bucket.cell(name)
            cell.energy += app_energy * share
            cell.carbon += app_kg * share
            if tag is not None:
                self.models[tag] += 1  # type: ignore[index]
                acc.models[tag] = None  # type: ignore[index]
            elif model is not None:
                self.rejected_models += 1


    def fold_proxy(self, rec: dict, gs: dict, start: float) -> str | None:  # noqa: C901 - one flat check list
        """Fold ``rec`` (a loaded line without runtime maps; ``gs`` its green_summary object)
        if nothing in it needs the sanitiser or the malformed-line report; returns its hash
        (``""`` when unusable, as on the general path), or ``None`` having changed nothing."""
        report = rec["report"]
        f = clean_figures(report, gs)
        if f is None:
            return None
        endpoints = report.get("per_endpoint_io_ops", ())
        if type(endpoints) is not list and endpoints != ():
            return None
        split: dict[str, int] = {}
        for row in endpoints:
            if type(row) is not dict:
                return None
            service, ops = row.get("service"), row.get("io_ops", 0)
            if type(service) is not str or type(ops) is not int or not 0 <= ops <= MAX_COUNT:
                return None
            split[service] = split.get(service, 0) + ops
        io_total = sum(split.values())
        if io_total == 0:  # nothing to split by: _unattributed, or an error under strict
            return None
        meta = report.get("methodology", _EMPTY)
        if is_backfill(meta):  # the backfill term is kept by the general path only
            return None
        line_hash = rec.get("hash")
        model = _tag(gs.get("energy_model")) or _tag(f.total.get("model"))
        # -- recognised: fold it (the order of process_window and _proxy; no host energy) -----
        bucket = self._bucket_for(start)  # type: ignore[attr-defined]
        self.fallback_windows += 1  # type: ignore[attr-defined]
        if f.kwh > 0.0:
            app_energy = max(0.0, f.kwh - 0.0)
        else:
            app_energy = (f.io_ops or io_total) * ENERGY_PER_IO_OP_KWH
        app_kg = (f.operational or max(0.0, f.mid - f.embodied - f.database - f.messaging)) / 1000.0
        self.energy += app_energy + 0.0  # type: ignore[attr-defined]
        self.operational_kg += app_kg  # type: ignore[attr-defined]
        self.requests += f.traces  # type: ignore[attr-defined]
        bucket.energy += app_energy + 0.0
        bucket.operational += app_kg
        bucket.requests += f.traces
        self._split_proxy(split, io_total, app_energy, app_kg, model)  # type: ignore[attr-defined]
        return finish_window(self, start, f, meta, line_hash)
