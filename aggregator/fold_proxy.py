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

from aggregator.sanitize import MAX_COUNT, MAX_FIGURE
from schema.constants import ENERGY_PER_IO_OP_KWH

_EMPTY: dict = {}
_ABSENT = object()
_NO_HOSTS: frozenset[str] = frozenset()


def _tag(value: object) -> str | None:
    return value if type(value) is str and value else None


class ProxyFast:
    """``fold_proxy(rec, gs, start)``; the state provides the accumulators and ``_split_proxy``."""

    def fold_proxy(self, rec: dict, gs: dict, start: float) -> str | None:  # noqa: C901 - one flat check list
        """Fold ``rec`` (a loaded line without runtime maps; ``gs`` its green_summary object)
        if nothing in it needs the sanitiser or the malformed-line report; returns its hash
        (``""`` when unusable, as on the general path), or ``None`` having changed nothing."""
        report = rec["report"]
        co2 = gs.get("co2", _EMPTY)
        if type(co2) is not dict:
            return None
        total = co2.get("total", _EMPTY)
        hosts = gs.get("hosts", _ABSENT)
        if type(total) is not dict or hosts is not _ABSENT and hosts != []:
            return None
        window = report["window"]
        traces, io_ops = window.get("traces", 0), gs.get("total_io_ops", 0)
        embodied, database, messaging = (co2.get("embodied_gco2", 0.0), co2.get("database_gco2", 0.0),
                                         co2.get("messaging_gco2", 0.0))
        kwh, operational, mid = gs.get("energy_kwh", 0.0), co2.get("operational_gco2", 0.0), total.get("mid", 0.0)
        if not (type(kwh) is float and 0.0 <= kwh <= MAX_FIGURE
                and type(operational) is float and 0.0 <= operational <= MAX_FIGURE
                and type(embodied) is float and 0.0 <= embodied <= MAX_FIGURE
                and type(database) is float and 0.0 <= database <= MAX_FIGURE
                and type(messaging) is float and 0.0 <= messaging <= MAX_FIGURE
                and type(mid) is float and 0.0 <= mid <= MAX_FIGURE
                and type(traces) is int and 0 <= traces <= MAX_COUNT
                and type(io_ops) is int and 0 <= io_ops <= MAX_COUNT):
            return None
        rows = gs.get("regions", ())
        if type(rows) is not list and rows != ():
            return None
        for row in rows:
            if type(row) is not dict:
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
        model = _tag(gs.get("energy_model")) or _tag(total.get("model"))
        # -- recognised: fold it (the order of process_window and _proxy; no host energy) -----
        self.fallback_windows += 1  # type: ignore[attr-defined]
        if kwh > 0.0:
            app_energy = max(0.0, kwh - 0.0)
        else:
            app_energy = (io_ops or io_total) * ENERGY_PER_IO_OP_KWH
        app_kg = (operational or max(0.0, mid - embodied - database - messaging)) / 1000.0
        self.energy += app_energy + 0.0  # type: ignore[attr-defined]
        self.operational_kg += app_kg  # type: ignore[attr-defined]
        self.requests += traces  # type: ignore[attr-defined]
        self._split_proxy(split, io_total, app_energy, app_kg, _NO_HOSTS, model)  # type: ignore[attr-defined]
        self.windows += 1  # type: ignore[attr-defined]
        if start < self.first_start:  # type: ignore[attr-defined,has-type]
            self.first_start = start
        if start > self.last_start:  # type: ignore[attr-defined,has-type]
            self.last_start = start
        self.host_energy += 0.0  # type: ignore[attr-defined]
        self.embodied_kg += embodied / 1000.0  # type: ignore[attr-defined]
        self.database_kg += database / 1000.0  # type: ignore[attr-defined]
        self.messaging_kg += messaging / 1000.0  # type: ignore[attr-defined]
        if rows:
            self._regions(rows)  # type: ignore[attr-defined]
        if type(meta) is dict and meta:
            self._note_methodology(meta)  # type: ignore[attr-defined]
        return line_hash if type(line_hash) is str and len(line_hash) <= 128 else ""
