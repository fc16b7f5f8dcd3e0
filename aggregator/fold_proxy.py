"""The v1.0 (I/O proxy) line folded straight from the loaded dict (a mixin of AggregateState).

A v1.0 agent writes no per-service maps, so the general path builds a ``Window`` and then
splits the window's energy and carbon by each service's share of I/O ops
(``AggregateState._proxy``). ``fold_proxy`` does the same additions in the same order - the
split itself is the shared ``_split_proxy`` - without the ``Window`` and the general parser's
calls. Like ``fold_plain`` it checks everything first: a line with host rows, a figure or an
I/O row the sanitiser would touch, a non-object where an object belongs, or nothing to split
by (where strict attribution may have to fail) returns ``None`` having changed nothing, and
the caller takes the general path. tests/aggregator/test_fold_fast.py folds hostile v1.0
lines both ways and asserts byte-identical reports.
"""

from __future__ import annotations

from aggregator.fold_fast import clean_figures, finish_window
from aggregator.sanitize import MAX_COUNT
from schema.constants import ENERGY_PER_IO_OP_KWH

_EMPTY: dict = {}


def _tag(value: object) -> str | None:
    return value if type(value) is str and value else None


class ProxyFast:
    """``fold_proxy(rec, gs, start)``; the state provides the accumulators and ``_split_proxy``."""

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
        line_hash = rec.get("hash")
        model = _tag(gs.get("energy_model")) or _tag(f.total.get("model"))
        # -- recognised: fold it (the order of process_window and _proxy; no host energy) -----
        self.fallback_windows += 1  # type: ignore[attr-defined]
        if f.kwh > 0.0:
            app_energy = max(0.0, f.kwh - 0.0)
        else:
            app_energy = (f.io_ops or io_total) * ENERGY_PER_IO_OP_KWH
        app_kg = (f.operational or max(0.0, f.mid - f.embodied - f.database - f.messaging)) / 1000.0
        self.energy += app_energy + 0.0  # type: ignore[attr-defined]
        self.operational_kg += app_kg  # type: ignore[attr-defined]
        self.requests += f.traces  # type: ignore[attr-defined]
        self._split_proxy(split, io_total, app_energy, app_kg, model)  # type: ignore[attr-defined]
        return finish_window(self, start, f, meta, line_hash)
