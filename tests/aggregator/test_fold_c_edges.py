"""The C fold (``aggregator.fold._fold``) at the edges where C and Python most easily part ways.

tests/aggregator/test_fold_accel.py mutates one field per line; here the lines are aimed at
what a C mirror of Python code gets wrong: ``-0.0``, bools where ints belong, ints past 64
bits (orjson yields them up to 2**64 - 1, then floats), figures at exactly the caps, duplicate
JSON keys (orjson keeps the first position and the last value, so a duplicate can reorder a
map), maps whose keys are the layout's in another order, tags that are not strings (a cached
layout's tag ``1`` equals a later line's ``1.0`` and ``true``), empty and non-list host rows,
region rows with fields missing, methodology blocks that are not objects, hashes around 128
characters, ``_unattributed`` and unusable names in I/O rows, I/O totals past 2**53, tiny caps.

``edge_menu()`` lists every such edge once. The grid test puts each one, alone, into a line
between plain lines of a cached layout (runtime and v1.0, string and non-string tags); the
property test mixes them across archives. Each archive is folded by the engine with the
accelerator and with the reference alone, and by a driver that calls the C fold line by line
and checks the contract itself - a line it declines (``None``) leaves the state exactly as it
was; a line it takes gives the hash the reference parser reads. Every field
of the states is compared bit for bit (floats by their hex form, so ``-0.0`` is not ``0.0``).
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import orjson
from hypothesis import event, given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines
from aggregator.fold.ext import EXT
from aggregator.fold.fast import add_deltas, fold_raw, folder, usable_layout
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.reference import process_window
from aggregator.fold.rules import is_backfill
from aggregator.fold.state import AggregateState, Known, seeded
from aggregator.read import Malformed, Period, parse_window
from aggregator.report import build_report, report_bytes
from aggregator.sanitize import Tally

T0 = datetime(2026, 11, 10, tzinfo=UTC)
# two days: hourly time buckets (aggregate.series); the lines are 29 minutes apart, so the
# bucket changes every other line and each fold path must enter it the same way
HOURS = Period.parse("2026-11-10", "2026-11-11")
NAMES = ["a", "b", "c", "_unattributed", "é", "x" * 300, ""]
# JSON texts put where a figure or a count belongs
EDGES = ["-0.0", "0.0", "-0", "1e15", "1.0000000000000002e15", "5e-324", "1e-400", "0.5", "3",
         "9007199254740992", "9007199254740993", "9223372036854775807", "9223372036854775808",
         "18446744073709551615", "18446744073709551616", "-1", "-9223372036854775809",
         "true", "false", "7.0", "null", '"1"', "[]", "{}", "[1.5]"]
TAGS = ['"scaphandre_rapl"', '"io_proxy_v1+cal"', '"+cal"', '""', '"' + "t" * 70 + '"', '"kepler_ebpf"',
        "1", "1.0", "true", "null", "[]", "{}", '["a"]']
HOSTS = ["[]", "null", "{}", "[{}]", '"x"', '[{"name":"a","in_totals":false}]', '[{"name":"pg","energy_kwh":0.5}]']
METHODS = ['{"intensity_vintage":"2024"}', '{"intensity_vintage":"2025"}', "{}", "[]", '"x"', "1", "null",
           # a backfilled line is declined by the C fold (the general path keeps the backfill term)
           '{"intensity_vintage":"2024","backfill":"true"}', '{"backfill":"true"}', '{"backfill":"TRUE"}',
           '{"backfill":true}', '{"backfill":"true "}', '{"backfill":null}',
           '{"backfill":"true","backfill":"false"}', '{"backfill":"false","backfill":"true"}',
           '{"k":[1,{"a":2}]}', '{"k":"' + "v" * 3000 + '"}', "{" + ",".join(f'"k{i}":"v"' for i in range(40)) + "}"]
# 128 characters of 2 bytes each: at most 128 *characters* (the scan counts them, not bytes)
HASHES = ['"' + "h" * 128 + '"', '"' + "h" * 129 + '"', '"' + "é" * 128 + '"', '"' + "é" * 129 + '"', "5", "null",
          '""', "[]"]
STARTS = ["2026-11-10T00:00:00+00:00", "2026-11-10T00:00:00.5Z", "2026-11-10 00:00:00Z", "2026-02-30T00:00:00Z", "1"]
WINDOW_PATHS = [
    ("green_summary", "energy_kwh"), ("green_summary", "total_io_ops"), ("window", "traces"),
    ("green_summary", "co2", "operational_gco2"), ("green_summary", "co2", "embodied_gco2"),
    ("green_summary", "co2", "database_gco2"), ("green_summary", "co2", "messaging_gco2"),
    ("green_summary", "co2", "total", "mid"), ("green_summary", "co2", "total"), ("green_summary", "co2"),
    ("green_summary", "energy_model"), ("green_summary", "co2", "total", "model"), ("green_summary", "regions"),
    ("green_summary", "hosts"), ("per_endpoint_io_ops",), ("methodology",), ("green_summary",), ("window",),
]
MAPS = ["per_service_energy_kwh", "per_service_carbon_kgco2eq", "per_service_requests",
        "per_service_energy_model", "per_service_region"]
ROW_FIELDS = ["region", "io_ops", "energy_kwh", "co2_gco2", "status", "grid_intensity_gco2_kwh", "pue"]

Edge = Callable[[dict, list], None]  # (rec, dups) -> None: changes rec, or lists a duplicate key to splice in


class Raw:
    """A JSON text to splice in where this object stands (after orjson.dumps)."""

    def __init__(self, text: str) -> None:
        self.text = text


def line(i: int, names: list[str], tags: dict[str, str], v1: bool = False, zones: bool = True) -> dict:
    """A plain line: runtime (per-service maps, a different value per service and window; the
    services' region map unless not ``zones``) or v1.0 (I/O rows only); one clean region row,
    no host rows. Grams are chosen so that g / 1000 and g * 0.001 differ in the last bit."""
    gs: dict = {"energy_kwh": 0.5 + i / 64, "total_io_ops": 4,
                "co2": {"operational_gco2": 2.6, "embodied_gco2": 0.25, "database_gco2": 0.0625,
                        "messaging_gco2": 0.125, "total": {"mid": 3.6, "model": "io_proxy_v1"}},
                "regions": [{"region": "pl", "status": "resolved", "io_ops": 2, "energy_kwh": 0.25, "co2_gco2": 1.3}],
                "hosts": []}
    if not v1:
        gs["per_service_energy_kwh"] = {n: 0.25 * (k + 1) + i / 128 for k, n in enumerate(names)}
        gs["per_service_carbon_kgco2eq"] = {n: 0.3 * (k + 1) for k, n in enumerate(names)}
        gs["per_service_requests"] = {n: k + 1 + i for k, n in enumerate(names)}
        if zones:  # a zone per window: the first known one must stick
            gs["per_service_region"] = {n: f"zone-{i}" for n in names}
        gs["per_service_energy_model"] = {n: Raw(tags[n]) for n in names}
    report = {"window": {"start": (T0 + timedelta(minutes=29 * i)).strftime("%Y-%m-%dT%H:%M:%SZ"), "traces": 3},
              "green_summary": gs, "methodology": {"intensity_vintage": "2024"},
              "per_endpoint_io_ops": [{"service": n, "io_ops": k + 1} for k, n in enumerate(names)]}
    # the fold reads only report and hash (the chain is checked by `carbonspan verify`)
    return {"ts": report["window"]["start"], "seq": i, "report": report, "hash": f"sha256:{i:064x}"}


def _node(rec: dict, path: tuple) -> object:
    node: object = rec["report"]
    for key in path:
        if type(node) is dict and key in node or type(node) is list and type(key) is int and key < len(node):
            node = node[key]  # type: ignore[index]
        else:
            return None
    return node


def _set(path: tuple, text: str | None) -> Edge:
    """Set the value at ``path`` (under report; "hash" is the line's) to a JSON text, or remove it."""

    def edge(rec: dict, dups: list) -> None:
        parent = rec if path == ("hash",) else _node(rec, path[:-1])
        if type(parent) is dict:
            if text is None:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = Raw(text)
        elif type(parent) is list and path[-1] < len(parent):
            parent[path[-1]] = Raw("null" if text is None else text)

    return edge


def _reshape(key: str, how: str) -> Edge:
    def edge(rec: dict, dups: list) -> None:
        m = _node(rec, ("green_summary", key))
        if type(m) is dict:
            items = list(m.items())
            shaped = {"reversed": items[::-1], "short": items[1:], "long": [*items, ("zz", 0.5)], "empty": [],
                      "rotated": items[1:] + items[:1]}[how]
            rec["report"]["green_summary"][key] = dict(shaped)

    return edge


def _dup(key: str, text: str) -> Edge:
    return lambda rec, dups: dups.append((key, text))


def edge_menu() -> list[tuple[str, Edge]]:
    """Every edge, once: (label, edge)."""
    menu: list[tuple[str, Edge]] = []
    for path in WINDOW_PATHS:
        menu += [(f"{path}={t}", _set(path, t)) for t in [*EDGES, None]]
    for m in MAPS[:3]:
        for n in ("a", "b", "zz"):
            menu += [(f"{m}.{n}={t}", _set(("green_summary", m, n), t)) for t in [*EDGES, None]]
    for m in MAPS:
        menu += [(f"{m} {how}", _reshape(m, how)) for how in ("reversed", "short", "long", "empty", "rotated")]
        menu += [(f"{m}={t}", _set(("green_summary", m), t)) for t in ("null", "[]", "5", None)]
        menu += [(f"{m} dup {t}", _dup(m, t)) for t in ('"b":-1.0,', '"a":-1.0,', '"b":0.25,', '"a":true,', '"zz":1,')]
    menu += [(f"gs dup {k}", _dup("green_summary", f'"{k}":-1.0,')) for k in ("energy_kwh", "hosts", "co2", "regions")]
    for n in ("a", "b"):
        menu += [(f"tag {n}={t}", _set(("green_summary", "per_service_energy_model", n), t)) for t in TAGS]
    menu += [(f"energy_model={t}", _set(("green_summary", "energy_model"), t)) for t in TAGS]
    menu += [(f"hosts={t}", _set(("green_summary", "hosts"), t)) for t in HOSTS]
    menu += [(f"methodology={t[:20]}", _set(("methodology",), t)) for t in METHODS]
    menu += [(f"hash={t[:10]}", _set(("hash",), t)) for t in HASHES]
    menu += [(f"start={t}", _set(("window", "start"), f'"{t}"')) for t in STARTS]
    row = ("green_summary", "regions", 0)
    for f in ROW_FIELDS:
        menu += [(f"region row {f}={t}", _set((*row, f), t)) for t in [*EDGES, None]]
    menu += [(f"region={t[:12]}", _set((*row, "region"), t))
             for t in ('"eu-west-3"', '""', '"' + "r" * 300 + '"', '"pl "', "5")]
    menu += [(f"region row={t}", _set(row, t)) for t in ("null", "[]", "1")]
    menu += [("two region rows", _set(("green_summary", "regions"),
                                      '[{"region":"pl","io_ops":1,"energy_kwh":0.5,"co2_gco2":1.0},'
                                      '{"region":"new","io_ops":1,"energy_kwh":0.5,"co2_gco2":1.0}]'))]
    # per_service_measured_ratio (FOLD_VERSION 5): all zeros, absent or null fold in C; any other
    # map (a ratio, a hostile value, not an object) is declined and the general path adds it
    ratios = ("per_service_measured_ratio",)
    menu += [(f"measured ratios={t[:16]}", _set(("green_summary", *ratios), t))
             for t in ("null", "[]", "5", "{}", '{"a":0.0,"b":0}', '{"a":-0.0,"b":-0}', '{"a":0.5,"b":0.0}',
                       '{"a":1,"b":1.0}', '{"zz":1.0}', '{"a":true}', '{"a":"0.5"}', '{"a":2.0}', '{"a":-1}',
                       '{"a":1e400}', '{"a":NaN}', '{"a":5e-324}', '{"a":18446744073709551616}')]
    io = ("per_endpoint_io_ops", 0)
    menu += [(f"io row io_ops={t}", _set((*io, "io_ops"), t)) for t in [*EDGES, None]]
    menu += [(f"io row service={str(t)[:12]}", _set((*io, "service"), t))
             for t in ['"_unattributed"', '""', '"' + "x" * 300 + '"', '"new"', "5", "null", "[]", None]]
    menu += [(f"io row={t}", _set(io, t)) for t in ("null", "[]", "1")]
    menu += [(f"io rows={t[:16]}", _set(("per_endpoint_io_ops",), t))
             for t in ("[]", "{}", '[{"service":"a","io_ops":0}]', '[{"service":"a","io_ops":9007199254740992},'
                       '{"service":"b","io_ops":9007199254740992}]', '[{"service":"b"},{"service":"a","io_ops":1}]',
                       # a total of 2**53 + 1 is not exact as a double: zz's share is 1 - 2**-53, not 1.0
                       '[{"service":"zz","io_ops":9007199254740992},{"service":"a","io_ops":1}]')]
    return menu


MENU = edge_menu()


def _dumps(rec: dict, dups: list[tuple[str, str]]) -> bytes:
    raws: list[str] = []

    def default(obj: object) -> str:
        if isinstance(obj, Raw):
            raws.append(obj.text)
            return f"@@RAW{len(raws) - 1}@@"
        raise TypeError

    out = orjson.dumps(rec, default=default)
    for i, text in enumerate(raws):
        out = out.replace(f'"@@RAW{i}@@"'.encode(), text.encode())
    for key, text in dups:
        out = out.replace(f'"{key}":{{'.encode(), f'"{key}":{{{text}'.encode(), 1)
    return out


def _k(x: object) -> object:
    """A value as compared bit for bit: floats by their hex form (-0.0 is not 0.0, NaN is NaN)."""
    return x.hex() if type(x) is float else x


def _sums(acc: object, *extra: str) -> tuple:
    fields = (*extra, "energy", "carbon", "requests" if hasattr(acc, "requests") else "io_ops",
              "windows" if hasattr(acc, "windows") else "rows")
    return tuple(_k(getattr(acc, f)) for f in fields) + (tuple(getattr(acc, "models", ())),)


def _series(series: dict) -> list:
    """The time buckets bit for bit: each bucket's sums and its cells, in their order."""
    return [(key, tuple(_k(x) for x in b.sums()),
             [(name, _k(c.energy), _k(c.carbon), c.requests, c.windows) for name, c in b.services.items()])
            for key, b in series.items()]


def snapshot(state: AggregateState, engine: bool = True) -> dict:
    """Every field of ``state`` (caches aside); without the engine's per-line bookkeeping when
    ``engine`` is False (the driver below does not keep it)."""
    skip = set() if engine else {"lines", "malformed", "malformed_samples", "files", "chains", "windows_outside"}
    out: dict = {}
    for f in dataclasses.fields(state):
        if f.name.startswith("_") or f.name in skip:
            continue
        v = getattr(state, f.name)
        if f.name == "services":
            v = [(n, _sums(a, "region", "measured")) for n, a in v.items()]
        elif f.name == "unattributed":
            v = _sums(v, "region", "measured")
        elif f.name == "regions":
            v = [(n, _sums(a, "status", "intensity", "pue", "source")) for n, a in v.items()]
        elif f.name == "tally":
            v = (v.sanitised, v.missing)
        elif f.name == "backfill":
            v = tuple(_k(x) for x in dataclasses.astuple(v))
        elif f.name == "backfill_services":
            v = [(n, tuple(_k(x) for x in dataclasses.astuple(b))) for n, b in v.items()]
        elif f.name in ("models", "methodology", "chains"):
            v = [(k, list(x) if type(x) is list else x) for k, x in v.items()]
        elif f.name == "files":
            v = [dataclasses.astuple(s) for s in v]
        elif f.name == "series":
            v = _series(v)
        out[f.name] = _k(v) if type(v) is float else v
    return out


def _state(caps: dict) -> AggregateState:
    """A fresh state with these caps; seeded with ``caps["seed"]`` (a Known), as the engines
    fold a partition again after it overflowed a cap."""
    caps = dict(caps)
    seed = caps.pop("seed", None)
    state = AggregateState(**caps) if seed is None else seeded(seed, **caps)
    state.set_grid(HOURS)
    return state


def _engine(lines: list[bytes], caps: dict, reference: bool = False) -> AggregateState:
    state = _state(caps)
    fold = {"fold": fold_line_reference} if reference else {}
    _, stat = fold_lines(lines, "agent-a/w.jsonl", "agent-a", HOURS, state=state, **fold)
    state.files.append(stat)
    return state


_BUCKET_SUMS = ("energy", "host_energy", "operational", "embodied", "database", "messaging", "dropped_energy",
                "dropped_carbon")
_SUMS = ("energy", "host_energy", "operational_kg", "embodied_kg", "database_kg", "messaging_kg",
         "dropped_energy", "dropped_carbon")


def _zero_sums(state: AggregateState) -> None:
    """Set every running float sum to 0.0, so that the next line's additions are seen exactly
    (added onto a total, a difference in the last bit of one term can round away)."""
    cells = [c for b in state.series.values() for c in b.services.values()]
    for acc in [*state.services.values(), state.unattributed, *state.regions.values(), *cells]:
        acc.energy = acc.carbon = 0.0
    for b in state.series.values():
        for name in _BUCKET_SUMS:
            setattr(b, name, 0.0)
    for name in _SUMS:
        setattr(state, name, 0.0)


def _driver(lines: list[bytes], caps: dict) -> int:
    """Fold ``lines`` line by line into two states in step - the C fold from the bytes, else
    from the loaded line, else the reference - and the reference alone - with the float sums zeroed before each line, and
    compare them after each line: a line the C fold takes must add exactly what the reference
    adds, and a line it declines must leave the state untouched. Returns how many lines the C
    fold took."""
    c, g, taken = _state(caps), _state(caps), 0
    byte_folder = folder(c)
    for raw in lines:
        try:
            rec = orjson.loads(raw)
            start = EXT.window_start(rec)
            w = parse_window(rec, start, Tally())  # a line the reference parser refuses: skipped by both
        except (orjson.JSONDecodeError, Malformed):
            continue
        _zero_sums(c)
        _zero_sums(g)
        process_window(g, parse_window(rec, start, g.tally), "agent-a/w.jsonl")
        before = pickle.dumps(c)  # the whole state, its caches too, floats bit for bit
        from_bytes = fold_raw(c, raw, HOURS.start, HOURS.end, byte_folder)  # straight from the bytes
        if from_bytes is not None:
            taken += 1
            assert from_bytes == (start, EXT.window_end(rec), w.line_hash)
            assert snapshot(c, engine=False) == snapshot(g, engine=False)
            continue
        assert pickle.dumps(c) == before, "declined from the bytes, yet the state changed"
        usable, got = usable_layout(c, start), None
        if usable is not None:
            layout, bucket = usable
            got = EXT.fold_plain(rec, layout.names, layout.tags, layout.targets, layout.cells, c.regions)
            if type(rec.get("report")) is dict and is_backfill(rec["report"].get("methodology")):
                assert got is None, "a backfilled line must go to the reference (the backfill term)"
            if got is None:
                assert pickle.dumps(c) == before, "declined, yet the state changed"
        if got is None:
            process_window(c, parse_window(rec, start, c.tally), "agent-a/w.jsonl")
        else:
            taken += 1
            assert add_deltas(c, layout, bucket, start, got, got[10]) == w.line_hash  # the hash the reference reads
        assert snapshot(c, engine=False) == snapshot(g, engine=False)
    return taken


TAGS_AB = {"a": '"scaphandre_rapl"', "b": '"kepler_ebpf+cal"'}
SEED = Known(services=("b",), regions=("pl",), models=("kepler_ebpf",), method_keys=("intensity_vintage",))
CAPS = st.sampled_from([{}, {}, {}, {"max_services": 1, "max_models": 1, "max_regions": 1}, {"seed": SEED},
                       {"max_services": 2, "max_models": 2, "max_regions": 2}])


def _check(lines: list[bytes], caps: dict) -> int:
    """Fold ``lines`` by the engine both ways and line by line (:func:`_driver`), and compare
    (the reports too); returns how many lines the C fold took."""
    general = _engine(lines, caps, reference=True)
    c = _engine(lines, caps)
    assert snapshot(c) == snapshot(general)
    # a function of the state compared above; its bytes once more, to be sure
    assert report_bytes(build_report(c, HOURS)) == report_bytes(build_report(general, HOURS))
    return _driver(lines, caps)


# names, tags, v1.0 (None: runtime without a region map in line 0), caps: the layout the plain
# lines around an edge keep, and the state they are folded into
BASES = {
    "runtime": (["a", "b"], TAGS_AB, False, {}),
    # no region map in the first line: the layout waits for a known region (the general path)
    "runtime, regions known from the second line": (["a", "b"], TAGS_AB, None, {}),
    "runtime, one tag and one region allowed": (["a", "b"], TAGS_AB, False, {"max_models": 1, "max_regions": 1}),
    "runtime, seeded": (["a", "b"], TAGS_AB, False, {"seed": SEED}),
    "non-string tags": (["a", "b"], {"a": "1", "b": "null"}, False, {}),
    # v1.0 lines are the reference's (the C fold declines them): one base proves it does
    "v1.0, tiny caps": (["a", "b"], {}, True, {"max_services": 1, "max_models": 1, "max_regions": 1}),
}


def test_every_edge_alone_folds_by_c_exactly_as_by_the_reference():
    assert EXT is not None
    failures, taken = [], 0
    for base, (names, tags, v1, caps) in BASES.items():
        for label, edge in MENU:
            recs = [line(i, names, tags, bool(v1), zones=v1 is not None or i > 0) for i in range(4)]
            dups: list = []
            edge(recs[2], dups)
            lines = [_dumps(rec, dups if i == 2 else []) for i, rec in enumerate(recs)]
            try:  # line by line against the reference (the engines are compared on the archives below)
                taken += _driver(lines, caps)
            except AssertionError as exc:
                failures.append(f"{base}: {label}: {str(exc)[:300]}")
    assert failures == []
    # the plain runtime lines around each edge are taken (v1.0 lines are the reference's):
    # the grid tests the C fold
    assert taken >= sum(1 for _, _, v1, _ in BASES.values() if v1 is not True) * len(MENU)


@st.composite
def edge_archive(draw) -> list[bytes]:
    """Lines that mostly keep one layout (so the C fold takes them), some with edges."""
    names = draw(st.lists(st.sampled_from(NAMES[:3]) if draw(st.integers(0, 3)) else st.sampled_from(NAMES),
                          min_size=1, max_size=3, unique=True))
    tags = {n: draw(st.sampled_from(TAGS)) if not draw(st.integers(0, 3)) else '"scaphandre_rapl"' for n in names}
    lines, zones_from = [], draw(st.integers(0, 3)) if draw(st.booleans()) else 0
    for i in range(draw(st.integers(1, 12))):
        rec = line(i, names, tags, v1=not draw(st.integers(0, 4)), zones=i >= zones_from)
        dups: list = []
        for _ in range(draw(st.integers(1, 3)) if not draw(st.integers(0, 2)) else 0):
            draw(st.sampled_from(MENU))[1](rec, dups)
        lines.append(_dumps(rec, dups))
    return lines


@settings(max_examples=300, deadline=None)
@given(edge_archive(), CAPS)
def test_the_c_fold_equals_the_reference_on_archives_mixing_the_edges(lines, caps):
    assert EXT is not None
    taken = _check(lines, caps)
    event(f"C fold took {min(taken, 3)}+ lines" if taken >= 3 else f"C fold took {taken} lines")
