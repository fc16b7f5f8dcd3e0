"""The plain runtime line folded straight from the loaded dict (a mixin of AggregateState).

Almost every line of a current archive has the same shape as the one before it: per-service
maps over the same services with the same tags, no host rows, clean figures. For such a line
``fold_plain`` does exactly what ``parse_window`` + ``process_window`` do - the same
additions in the same order, the same counters - without building a ``Window`` and without
the general parser's many small calls; that work was about half of the fold's time.

It only *checks* first and *changes* afterwards: any line it does not recognise as plain
(a structural oddity, a leaf that needs the sanitiser at window level, a new layout, a host
row, a backfilled line: aggregator/fold_backfill.py) returns ``None`` before anything is touched, and the caller takes the general path,
which handles it (and reports it) as before. Per-service leaves are still sanitised and
counted inline by ``_credit_raw``, as on the general path. A property test folds hostile
lines both ways and asserts byte-identical reports (tests/aggregator/test_fold_fast.py).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from aggregator.fold_backfill import is_backfill
from aggregator.sanitize import MAX_COUNT, MAX_FIGURE

if TYPE_CHECKING:
    from aggregator.accumulators import _Layout

#: Must equal FOLD_VERSION in aggregator/_fold.c: a build by other rules is not used.
FOLD_VERSION = 7


def _c_fold() -> ModuleType | None:
    """``aggregator._fold`` (the C ``fold_plain``), or None when not built or built by other
    rules (then the Python ``fold_plain`` below does the same work, slower)."""
    try:
        from aggregator import _fold  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _fold if getattr(_fold, "FOLD_VERSION", None) == FOLD_VERSION else None


FAST = _c_fold()

_EMPTY: dict = {}
_ABSENT = object()


class Figures(NamedTuple):
    """A line's window-level figures, each one the sanitiser would pass unchanged."""

    total: dict
    traces: int
    io_ops: int
    kwh: float
    operational: float
    mid: float
    embodied: float
    database: float
    messaging: float
    rows: list | tuple
    root_spans: int | None  # absent: None
    without_carbon: float | None  # energy_without_carbon_kwh; absent: None


def clean_figures(report: dict, gs: dict) -> Figures | None:  # noqa: C901 - one flat check list
    """The window-level figures of a host-less line if every one is clean (inline: hot), else
    ``None``; shared by ``fold_plain`` and ``fold_proxy``, which change nothing on ``None``."""
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
    root, without = window.get("root_spans"), gs.get("energy_without_carbon_kwh")
    if not (root is None or type(root) is int and 0 <= root <= MAX_COUNT) or not (
            without is None or type(without) is float and 0.0 <= without <= MAX_FIGURE):
        return None
    return Figures(total, traces, io_ops, kwh, operational, mid, embodied, database, messaging, rows,
                   root, without)


def no_measured(ratios: object) -> bool:
    """A ``per_service_measured_ratio`` map with nothing to add (absent, null, or every value an
    exact 0): any other goes to the general path, which adds measured energy (energy x ratio)."""
    if ratios is None:
        return True
    if type(ratios) is not dict:
        return False
    return all((type(v) is float or type(v) is int) and v == 0 for v in ratios.values())


def finish_window(state: Any, start: float, f: Figures, meta: object, line_hash: object) -> str:
    """The additions both fast paths end a recognised window with, in process_window's order;
    returns the line's hash (``""`` when unusable, as on the general path)."""
    bucket = state._bcache[2]  # the window's time bucket (aggregator.series), entered by the caller
    state.windows += 1
    bucket.windows += 1
    if start < state.first_start:
        state.first_start = start
    if start > state.last_start:
        state.last_start = start
    state.host_energy += 0.0  # no host rows on a fast path
    bucket.host_energy += 0.0
    state.embodied_kg += f.embodied / 1000.0
    state.database_kg += f.database / 1000.0
    state.messaging_kg += f.messaging / 1000.0
    bucket.embodied += f.embodied / 1000.0
    bucket.database += f.database / 1000.0
    bucket.messaging += f.messaging / 1000.0
    derived = state._regions(f.rows) if f.rows else 0.0
    state.add_window_counts(f.traces, f.root_spans, f.without_carbon, derived)
    if type(meta) is dict and meta:
        state._note_methodology(meta)
    return line_hash if type(line_hash) is str and len(line_hash) <= 128 else ""


class PlainRuntime:
    """``fold_plain(rec, start)``; the state provides the accumulators and the layout cache."""

    _last_key: tuple
    _last_layout: _Layout | None

    def fold_plain(self, rec: dict, start: float) -> str | None:  # noqa: C901 - one flat check list
        """Fold ``rec`` (a loaded line whose ``report.window.start`` is ``start``) if it is a
        plain runtime line whose layout is the previous window's; returns its hash (``""``
        when unusable, as on the general path), or ``None`` having changed nothing."""
        report = rec["report"]  # window_start proved report and report.window are objects
        gs = report.get("green_summary")
        if type(gs) is not dict:
            return None
        energy = gs.get("per_service_energy_kwh", _ABSENT)
        if energy is _ABSENT and "per_service_carbon_kgco2eq" not in gs:
            return self.fold_proxy(rec, gs, start)  # type: ignore[attr-defined]  # a v1.0 line
        carbon = gs.get("per_service_carbon_kgco2eq", _EMPTY)
        requests = gs.get("per_service_requests", _EMPTY)
        regions = gs.get("per_service_region", _EMPTY)
        models = gs.get("per_service_energy_model", _EMPTY)
        if not (type(energy) is dict and type(carbon) is dict and type(requests) is dict
                and type(regions) is dict and type(models) is dict and energy):
            return None
        names = tuple(energy)
        if tuple(carbon) != names or requests and tuple(requests) != names:
            return None
        if not no_measured(gs.get("per_service_measured_ratio")):
            return None
        tags = tuple(models.values()) if tuple(models) == names else tuple(models.get(n) for n in names)
        layout, last = self._last_layout, self._last_key  # last = (names, tags, host names)
        if layout is None or not layout.simple or layout.unknown or names != last[0] or tags != last[1] or last[2]:
            return None
        figures = clean_figures(report, gs)
        if figures is None:
            return None
        meta = report.get("methodology", _EMPTY)
        if is_backfill(meta):  # the backfill term is kept by the general path only
            return None
        line_hash = rec.get("hash")
        # -- recognised: fold it (the order of process_window and _runtime) -------------------
        bucket = self._bucket_for(start)  # type: ignore[attr-defined]
        self.runtime_windows += 1  # type: ignore[attr-defined]
        for tag, count in layout.tag_counts.items():
            self.models[tag] += count  # type: ignore[attr-defined]
        self.rejected_models += layout.rejected  # type: ignore[attr-defined]
        app_energy, app_carbon, app_requests = self._credit_raw(  # type: ignore[attr-defined]
            layout, energy.values(), carbon.values(), requests.values() if requests else None)
        self.energy += app_energy + 0.0  # type: ignore[attr-defined]  # + host energy, none here
        self.operational_kg += app_carbon  # type: ignore[attr-defined]
        self.requests += app_requests if app_requests else figures.traces  # type: ignore[attr-defined]
        bucket.energy += app_energy + 0.0
        bucket.operational += app_carbon
        bucket.requests += app_requests if app_requests else figures.traces
        return finish_window(self, start, figures, meta, line_hash)
