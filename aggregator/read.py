"""Archive lines -> sanitised window records. Lines are untrusted: nothing here raises on them.

Lines are read as dicts with orjson and checked field by field rather than validated with the
strict pydantic models: those would raise on a hostile line and cost more than the whole fold.
A line whose *structure* is wrong (not JSON, not UTF-8, longer than MAX_LINE_BYTES, a
duplicate key seen by the tolerant parse, not an object, a map that is not a map, a window
without a start time) is :class:`Malformed` and skipped by the caller with its file and line.
A *leaf* of the wrong type is a missing value (see ``aggregator.sanitize``); a NaN, Infinity
or overflowing number is a number, sanitised to 0 (``aggregator.lines``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import orjson

from aggregator.lines import Malformed, tolerant
from aggregator.sanitize import MAX_COUNT, MAX_FIGURE, Tally, clean_count, clean_float
from schema.archive import BODY_KEY
from schema.times import period_label, to_epoch
from schema.totals import line_terms

# A host row's recorded PUE is believed in [1, MAX_PUE]: below 1 is impossible (the IT load is
# part of the facility's), and no operating data centre is near 10 (Uptime Institute surveys
# put the global average near 1.55); outside it the row's PUE counts as not recorded.
MAX_PUE = 10.0
HostRows = tuple[tuple[str, float, float, "float | None"], ...]  # (region, kWh, gCO2e, PUE)


@dataclass(frozen=True, slots=True)
class Period:
    """Windows whose ``window.start`` lies in ``[start, end)`` (epoch seconds, UTC)."""

    start: float
    end: float

    @classmethod
    def parse(cls, start: str, end: str) -> Period:
        """From ``--from``/``--to``: a date (``--to`` then includes that whole day) or a time."""
        lo, hi = _bound(start, "--from", False), _bound(end, "--to", True)
        if hi <= lo:
            raise ValueError(f"--to ({end}) must be after --from ({start})")
        return cls(lo, hi)

    @classmethod
    def everything(cls) -> Period:
        return cls(float("-inf"), float("inf"))

    def labels(self) -> tuple[str, str]:
        """RFC 3339 labels for the report; an open end is ``""``."""
        return period_label(self.start), period_label(self.end)

    @classmethod
    def from_labels(cls, start: str, end: str) -> Period:
        """Inverse of :meth:`labels` (used to re-derive a report)."""
        return cls(to_epoch(start) if start else float("-inf"), to_epoch(end) if end else float("inf"))


def _bound(text: str, flag: str, end: bool) -> float:
    try:
        if len(text) == 10:
            day = date.fromisoformat(text) + timedelta(days=1 if end else 0)
            return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        return to_epoch(text)
    except ValueError:
        raise ValueError(
            f"{flag} {text!r} is not a date: use YYYY-MM-DD or an RFC 3339 time "
            "such as 2026-11-30T12:00:00Z"
        ) from None


@dataclass(slots=True)
class Window:
    """One sanitised window line: ``names`` and the aligned lists on the runtime path, else
    ``io_split`` (service -> I/O ops) for the proxy path."""

    start: float
    line_hash: str
    traces: int
    total_io_ops: int
    energy_kwh: float
    model: str | None
    operational_g: float
    embodied_g: float
    database_g: float
    messaging_g: float
    mid_g: float
    host_energy: float
    host_names: frozenset[str]
    io_split: dict[str, int]
    regions: list[dict]
    methodology: dict
    # runtime path (``names`` is None on the proxy path); values aligned with ``names``
    names: tuple[str, ...] | None = None
    energies: Any = ()  # a list, or the map's values view when ``raw``
    carbons: Any = ()
    requests: list[int] | None = None
    region_map: Any = None  # dicts, set together with ``names``
    model_map: Any = None
    raw: bool = False  # energies/carbons/requests are the line's own values, not yet sanitised
    host_rows: HostRows = ()  # in-totals hosts: (region, kWh, gCO2e, PUE or None)
    one_sided: bool = False  # only one per-service map is non-empty: the proxy path folds it
    root_spans: int | None = None  # window.root_spans (None: not recorded)
    energy_without_carbon: float | None = None  # green_summary.energy_without_carbon_kwh (None: absent)
    measured: dict[str, float] | None = None  # runtime path: per_service_measured_ratio, non-zero ones


_EMPTY: dict = {}
_NO_HOSTS: frozenset[str] = frozenset()
_UNCOUNTED = Tally()  # a sink for sanitising host carbon, which no counter reports (see _hosts)


def _obj(parent: dict, key: str) -> dict:
    value = parent.get(key, _EMPTY)
    if type(value) is not dict:
        raise Malformed(f"{key} is {type(value).__name__}, expected an object")
    return value


def _list(parent: dict, key: str) -> list:
    value = parent.get(key, ())
    if type(value) is tuple:
        return []
    if type(value) is not list:
        raise Malformed(f"{key} is {type(value).__name__}, expected a list")
    return value


def _str(value: object) -> str | None:
    """A tag as read (length is checked where tags are accepted, so rejections are counted)."""
    return value if type(value) is str and value else None


def load(raw: bytes | memoryview) -> tuple[dict, int]:
    """``(the line as a dict, numbers in it sanitised to 0)``, or :class:`Malformed`.

    orjson first; a line it refuses gets the tolerant parse (``aggregator.lines``): NaN,
    Infinity and numbers past the double range become 0 (counted), a duplicate key is
    Malformed, and so is everything else orjson refuses."""
    try:
        rec, fixed = orjson.loads(raw), 0
    except orjson.JSONDecodeError:
        rec, fixed, _ = tolerant(raw)  # raises Malformed saying why
    if type(rec) is not dict:
        raise Malformed("not a JSON object")
    return rec, fixed


def window_start(rec: dict) -> float:
    report = rec.get(BODY_KEY, _EMPTY)
    window = report.get("window", _EMPTY) if type(report) is dict else _obj(rec, BODY_KEY)
    start = window.get("start") if type(window) is dict else _obj(report, "window")
    if type(start) is not str:
        raise Malformed("report.window.start is missing or not a string")
    try:
        return to_epoch(start)  # the two usual forms without a parse (schema.times)
    except ValueError:
        raise Malformed(f"report.window.start {start[:40]!r} is not an RFC 3339 time") from None


def clean_values(values: list, tally: Tally) -> list:
    """Sanitise a list of figures: a clean float passes through a cheap inline check (one
    comprehension, no call); anything else goes through :func:`clean_float` and is counted."""
    return [v if type(v) is float and 0.0 <= v <= MAX_FIGURE else clean_float(v, tally) for v in values]


def clean_counts(values: list, tally: Tally) -> list[int]:
    """Sanitise a list of counts; same inline check as :func:`clean_values`."""
    return [v if type(v) is int and 0 <= v <= MAX_COUNT else clean_count(v, tally) for v in values]


def _aligned(mapping: dict, names: tuple[str, ...]) -> list:
    """``mapping``'s values in ``names`` order (missing -> 0, which is not counted)."""
    if len(mapping) == len(names) and tuple(mapping) == names:
        return list(mapping.values())
    return [mapping.get(n, 0) for n in names]


def _runtime_maps(gs: dict, w: Window, tally: Tally) -> None:
    """Fill the runtime fields of ``w``. Names stay None unless both maps are non-empty: with
    one side empty its total would be lost, so such a window is ``one_sided`` (proxy path)."""
    energy = _obj(gs, "per_service_energy_kwh")
    carbon = _obj(gs, "per_service_carbon_kgco2eq")
    if not energy or not carbon:
        w.one_sided = bool(energy or carbon)
        return
    names = tuple(energy)
    same = tuple(carbon) == names  # the usual shape: both maps list the same services in order
    if not same:
        names = names + tuple(k for k in carbon if k not in energy)
    w.names = names
    requests = _obj(gs, "per_service_requests")
    if same and (not requests or (len(requests) == len(names) and tuple(requests) == names)):
        # the common shape: the fold sanitises the values inline as it adds them up
        w.energies, w.carbons = energy.values(), carbon.values()  # type: ignore[assignment]
        w.requests = requests.values() if requests else None  # type: ignore[assignment]
        w.raw = True
    else:
        w.energies = clean_values(_aligned(energy, names), tally)
        w.carbons = clean_values(_aligned(carbon, names), tally)
        w.requests = clean_counts(_aligned(requests, names), tally) if requests else None
    w.region_map = _obj(gs, "per_service_region")
    w.model_map = _obj(gs, "per_service_energy_model")


def _io_split(report: dict, tally: Tally) -> dict[str, int]:
    split: dict[str, int] = {}
    for row in _list(report, "per_endpoint_io_ops"):
        if type(row) is not dict:
            raise Malformed("per_endpoint_io_ops holds a non-object")
        service = row.get("service")
        if type(service) is not str:
            tally.missing += 1
            continue
        ops = row.get("io_ops", 0)
        split[service] = split.get(service, 0) + (
            ops if type(ops) is int and 0 <= ops <= MAX_COUNT else clean_count(ops, tally))
    return split


def _host_pue(value: object) -> float | None:
    """A recorded host PUE in [1, MAX_PUE], else None (not recorded, or not believable)."""
    if type(value) in (int, float) and 1.0 <= value <= MAX_PUE:  # NaN fails both comparisons
        return float(value)  # type: ignore[arg-type]
    return None


def _hosts(gs: dict, tally: Tally) -> tuple[float, frozenset[str], HostRows]:
    """In-totals host energy, every host name, and the in-totals rows as (region, kWh, gCO2e,
    PUE or None).

    A host's carbon is not otherwise read (the window's database/messaging figures are): a bad
    one becomes 0 here without being counted, so the counters stay what they were before the
    rows were kept for the market-based figure."""
    energy = 0.0
    names = []
    rows = []
    for row in _list(gs, "hosts"):
        if type(row) is not dict:
            raise Malformed("green_summary.hosts holds a non-object")
        name = row.get("name")
        if type(name) is str:
            names.append(name)
        if row.get("in_totals", True) is not False:
            kwh = clean_float(row.get("energy_kwh", 0.0), tally)
            energy += kwh
            region = row.get("region", "unknown")
            rows.append((region if type(region) is str else "", kwh,
                         clean_float(row.get("co2_gco2", 0.0), _UNCOUNTED), _host_pue(row.get("pue"))))
    return energy, frozenset(names), tuple(rows)


def _regions(gs: dict) -> list[dict]:
    """The region rows (objects); their figures are sanitised where they are added up."""
    rows = _list(gs, "regions")
    for row in rows:
        if type(row) is not dict:
            raise Malformed("green_summary.regions holds a non-object")
    return rows


def parse_window(rec: dict, start: float, tally: Tally) -> Window:
    """Sanitise the fields the fold needs from a loaded line (``start`` from window_start)."""
    line_hash = rec.get("hash")
    report = rec[BODY_KEY]
    gs = _obj(report, "green_summary")
    co2 = _obj(gs, "co2")
    total = _obj(co2, "total")
    window = report["window"]
    host_energy, host_names, host_rows = (_hosts(gs, tally) if gs.get("hosts") != [] and "hosts" in gs
                                          else (0.0, _NO_HOSTS, ()))
    model = _str(gs.get("energy_model")) or _str(total.get("model"))
    methodology = report.get("methodology", _EMPTY)
    energy, operational, embodied, database, messaging, mid = clean_values(
        [gs.get("energy_kwh", 0.0), *line_terms(co2), total.get("mid", 0.0)],  # schema.totals' terms
        tally,
    )
    traces, total_io_ops = clean_counts([window.get("traces", 0), gs.get("total_io_ops", 0)], tally)
    w = Window(
        start, line_hash if type(line_hash) is str and len(line_hash) <= 128 else "",
        traces, total_io_ops, energy, model, operational, embodied, database, messaging, mid,
        host_energy, host_names, {}, _regions(gs) if "regions" in gs else [],
        methodology if type(methodology) is dict else _EMPTY,
    )
    w.host_rows = host_rows
    root, ewc = window.get("root_spans"), gs.get("energy_without_carbon_kwh")
    w.root_spans = None if root is None else clean_count(root, tally)
    w.energy_without_carbon = None if ewc is None else clean_float(ewc, tally)
    _runtime_maps(gs, w, tally)
    if w.names is None:
        w.io_split = _io_split(report, tally)
    elif "per_service_measured_ratio" in gs:
        w.measured = measured_ratios(gs["per_service_measured_ratio"], tally)
    return w


def measured_ratios(raw: object, tally: Tally) -> dict[str, float] | None:
    """The non-zero ratios of a runtime line's ``per_service_measured_ratio`` (each 0..1: the
    share of the service's I/O spans a meter measured), or None when none. A ratio that is not
    a number is missing (counted), one outside [0, 1] or NaN is sanitised to 0 (counted); a map
    that is not an object counts one missing value."""
    if raw is None:
        return None
    if type(raw) is not dict:
        tally.missing += 1
        return None
    out = {}
    for name, value in raw.items():
        if type(value) is not float and type(value) is not int:
            tally.missing += 1
        elif not 0.0 <= value <= 1.0:
            tally.sanitised += 1
        elif value:
            out[name] = float(value)
    return out or None
