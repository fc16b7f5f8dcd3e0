"""The C fold (``aggregator._fold``) at the edges where C and Python most easily part ways.

tests/aggregator/test_fold_fast.py mutates one field per line; here the lines are aimed at
what a C mirror of Python code gets wrong: ``-0.0``, bools where ints belong, ints past 64
bits (orjson yields them up to 2**64 - 1, then floats), figures at exactly the caps, duplicate
JSON keys (orjson keeps the first position and the last value, so a duplicate reorders a map),
maps whose keys are the layout's in another order, tags that are not strings (a cached
layout's tag ``1`` equals a later line's ``1.0`` and ``true``), empty and non-list host rows,
region rows with fields missing, methodology blocks that are not objects, hashes around 128
characters, ``_unattributed`` and unusable names in I/O rows, I/O totals past 2**53, tiny caps.

Each archive is folded three ways: by the engine with the C fold, by the engine's general
path, and by a driver that calls the C fold line by line and checks the contract itself -
a line it declines (``None``) leaves the state exactly as it was - before handing the line
to the general path. Every field of the resulting states is compared bit for bit (floats by
their hex form, so ``-0.0`` is not ``0.0``).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import orjson
from hypothesis import event, given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines
from aggregator.fold import AggregateState
from aggregator.fold_fast import FAST
from aggregator.read import Malformed, Period, parse_window
from aggregator.report import build_report, report_bytes
from schema.chain import seal

T0 = datetime(2026, 11, 10, tzinfo=UTC)
EVERYTHING = Period.everything()
NAMES = ["a", "b", "c", "_unattributed", "é", "x" * 300, ""]
REGIONS = ["pl", "eu-west-3", "r" * 300, ""]
# JSON texts put where a figure or a count belongs
EDGE = st.sampled_from([
    "-0.0", "0.0", "-0", "1e15", "1.0000000000000002e15", "5e-324", "1e-400", "0.5",
    "9007199254740992", "9007199254740993", "9223372036854775807", "9223372036854775808",
    "18446744073709551615", "18446744073709551616", "-1", "-9223372036854775809",
    "true", "false", "7", "7.0", "null", '"1"', "[]", "{}", "[1.5]",
])
TAG = st.sampled_from(['"scaphandre_rapl"', '"io_proxy_v1+cal"', '"+cal"', '""', '"' + "t" * 70 + '"',
                       '"kepler_ebpf"', "1", "1.0", "true", "null", "[]", "{}", '["a"]'])
HOSTS = st.sampled_from(["[]", "null", "{}", "[{}]", '"x"', '[{"name":"a","in_totals":false}]',
                         '[{"name":"pg","energy_kwh":0.5}]'])
METHOD = st.sampled_from(['{"intensity_vintage":"2024"}', '{"intensity_vintage":"2025"}', "{}", "[]", '"x"', "1",
                          "null", '{"k":[1,{"a":2}]}', '{"k":"' + "v" * 3000 + '"}',
                          "{" + ",".join(f'"k{i}":"v"' for i in range(40)) + "}"])
HASH = st.sampled_from(['"' + "h" * 128 + '"', '"' + "h" * 129 + '"', "5", "null", '""', "[]"])
WINDOW_PATHS = [
    ("green_summary", "energy_kwh"), ("green_summary", "total_io_ops"), ("window", "traces"),
    ("green_summary", "co2", "operational_gco2"), ("green_summary", "co2", "embodied_gco2"),
    ("green_summary", "co2", "database_gco2"), ("green_summary", "co2", "messaging_gco2"),
    ("green_summary", "co2", "total", "mid"), ("green_summary", "co2", "total"), ("green_summary", "co2"),
    ("green_summary", "energy_model"), ("green_summary", "co2", "total", "model"),
    ("green_summary", "regions"), ("per_endpoint_io_ops",), ("green_summary", "per_service_requests"),
    ("green_summary", "per_service_region"), ("green_summary", "per_service_energy_model"),
]
MAPS = ["per_service_energy_kwh", "per_service_carbon_kgco2eq", "per_service_requests",
        "per_service_energy_model", "per_service_region"]


class Raw:
    """A JSON text to splice in where this object stands (after orjson.dumps)."""

    def __init__(self, text: str) -> None:
        self.text = text


@st.composite
def region_rows(draw) -> list:
    rows: list = []
    for _ in range(draw(st.integers(0, 3))):
        row: dict = {"region": draw(st.sampled_from(REGIONS[:2])) if draw(st.integers(0, 5)) else
                     draw(st.sampled_from([*REGIONS[2:], Raw("5"), Raw("null")])),
                     "status": "resolved", "io_ops": draw(st.integers(0, 9)), "energy_kwh": 0.25, "co2_gco2": 0.5}
        if not draw(st.integers(0, 3)):
            field = draw(st.sampled_from(["region", "io_ops", "energy_kwh", "co2_gco2", "status"]))
            if draw(st.booleans()):
                del row[field]
            else:
                row[field] = Raw(draw(EDGE))
        rows.append(row if draw(st.integers(0, 12)) else Raw(draw(st.sampled_from(["null", "[]", "1"]))))
    return rows


@st.composite
def io_rows(draw, names: list[str]) -> list:
    rows: list = [{"service": n, "io_ops": draw(st.integers(0, 5))} for n in names]
    for _ in range(draw(st.integers(0, 3))):
        row: dict = {"service": draw(st.sampled_from(NAMES)), "io_ops": draw(st.integers(0, 5))}
        kind = draw(st.integers(0, 6))
        if kind == 0:
            row["io_ops"] = Raw(draw(EDGE))
        elif kind == 1:
            del row["io_ops"]
        elif kind == 2:
            row["service"] = Raw(draw(st.sampled_from(["5", "null", "[]"])))
        elif kind == 3:
            row["io_ops"] = 2**53 - draw(st.integers(0, 2))  # totals past 2**53
        rows.append(row)
    return rows


def _at(rec: dict, path: tuple) -> tuple[dict, str] | None:
    node = rec["report"]
    for key in path[:-1]:
        node = node.get(key)
        if type(node) is not dict:
            return None
    return node, path[-1]


@st.composite
def edge_archive(draw) -> list[bytes]:
    """Lines that mostly keep one layout (so the C fold takes them), each with 0-3 edges."""
    names = draw(st.lists(st.sampled_from(NAMES[:3]) if draw(st.integers(0, 2)) else st.sampled_from(NAMES),
                          min_size=1, max_size=3, unique=True))
    tags = {n: draw(TAG) if not draw(st.integers(0, 3)) else '"scaphandre_rapl"' for n in names}
    lines = []
    for i in range(draw(st.integers(1, 14))):
        gs: dict = {"energy_kwh": 0.5, "total_io_ops": 4,
                    "co2": {"operational_gco2": 2.0, "embodied_gco2": 0.25, "database_gco2": 0.0,
                            "messaging_gco2": 0.125, "total": {"mid": 3.0, "model": "io_proxy_v1"}},
                    "regions": draw(region_rows()), "hosts": []}
        if draw(st.integers(0, 4)):
            gs["per_service_energy_kwh"] = {n: draw(st.sampled_from([0.25, 0.5, 1e15, -0.0])) for n in names}
            gs["per_service_carbon_kgco2eq"] = {n: 0.5 for n in names}
            gs["per_service_requests"] = {n: draw(st.integers(0, 3)) for n in names}
            gs["per_service_region"] = {n: "pl" for n in names}
            gs["per_service_energy_model"] = {n: Raw(tags[n]) for n in names}
        report: dict = {"window": {"start": (T0 + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ"), "traces": 3},
                        "green_summary": gs, "methodology": {"intensity_vintage": "2024"},
                        "per_endpoint_io_ops": draw(io_rows(names))}
        # the fold reads only report and hash (the chain is checked by `carbonspan verify`)
        rec = {"ts": report["window"]["start"], "seq": i, "report": report, "hash": f"sha256:{i:064x}"}
        dups: list[tuple[str, str]] = []
        for _ in range(draw(st.integers(1, 3)) if not draw(st.integers(0, 2)) else 0):
            _edge(draw, rec, names, dups)
        lines.append(_dumps(rec, dups))
    return lines


def _edge(draw, rec: dict, names: list[str], dups: list[tuple[str, str]]) -> None:  # noqa: C901 - a menu
    """One edge put into ``rec`` (or a duplicate key to splice into its text, in ``dups``)."""
    gs = rec["report"]["green_summary"]
    kind = draw(st.integers(0, 11))
    if kind == 0:  # a window-level figure (or structure) set to an edge value or removed
        at = _at(rec, draw(st.sampled_from(WINDOW_PATHS)))
        if at is not None:
            node, key = at
            if draw(st.booleans()):
                node[key] = Raw(draw(EDGE))
            else:
                node.pop(key, None)
    elif kind == 1 and type(m := gs.get(draw(st.sampled_from(MAPS[:3])))) is dict:  # a per-service leaf
        m[draw(st.sampled_from(names))] = Raw(draw(EDGE))
    elif kind == 2:
        if draw(st.integers(0, 3)):
            gs["hosts"] = Raw(draw(HOSTS))
        else:
            gs.pop("hosts", None)
    elif kind == 3:
        rec["report"]["methodology"] = Raw(draw(METHOD))
    elif kind == 4:
        rec["hash"] = Raw(draw(HASH))
    elif kind == 5 and type(gs.get(key := draw(st.sampled_from(MAPS)))) is dict:  # reordered, short, long
        items = list(gs[key].items())
        how = draw(st.integers(0, 3))
        gs[key] = dict(items[::-1] if how == 0 else items[1:] if how == 1 else [*items, ("zz", 0.5)] if how == 2 else [])
    elif kind == 6 and "per_service_energy_kwh" in gs:  # a duplicate key: first position, last value
        dups.append((draw(st.sampled_from(MAPS[:4])), f'"{draw(st.sampled_from(names))}":{draw(EDGE)},'))
    elif kind == 7:
        dups.append(("green_summary", f'"{draw(st.sampled_from(["energy_kwh", "hosts", "co2"]))}":{draw(EDGE)},'))
    elif kind == 8 and "per_service_energy_kwh" in gs:  # only one of the two runtime maps, or both empty
        how = draw(st.integers(0, 2))
        if how == 2:
            gs["per_service_energy_kwh"], gs["per_service_carbon_kgco2eq"] = {}, {}
        else:
            gs.pop(MAPS[how], None)
    elif kind == 9 and type(m := gs.get("per_service_energy_model")) is dict:  # a new tag, maybe not a str
        m[draw(st.sampled_from(names))] = Raw(draw(TAG))
    elif kind == 10:
        rec["report"]["window"]["start"] = draw(st.sampled_from(
            ["2026-11-10T00:00:00+00:00", "2026-11-10T00:00:00.5Z", "2026-11-10 00:00:00Z", "2026-02-30T00:00:00Z"]))
    elif kind == 11:
        gs["energy_model"] = Raw(draw(TAG))


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
            v = [(n, _sums(a, "region")) for n, a in v.items()]
        elif f.name == "unattributed":
            v = _sums(v, "region")
        elif f.name == "regions":
            v = [(n, _sums(a, "status", "intensity", "pue", "source")) for n, a in v.items()]
        elif f.name == "tally":
            v = (v.sanitised, v.missing)
        elif f.name in ("models", "methodology", "chains"):
            v = [(k, list(x) if type(x) is list else x) for k, x in v.items()]
        elif f.name == "files":
            v = [dataclasses.astuple(s) for s in v]
        out[f.name] = _k(v) if type(v) is float else v
    return out


def _engine(lines: list[bytes], plain: bool, caps: dict) -> AggregateState:
    state = AggregateState(**caps)
    _, stat = fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state, plain=plain, c_fold=True)
    state.files.append(stat)
    return state


def _driver(lines: list[bytes], caps: dict) -> tuple[AggregateState, int]:
    """The C fold line by line, checking that a declined line changed nothing; returns the
    state and how many lines the C fold took."""
    state, taken = AggregateState(**caps), 0
    for raw in lines:
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        try:
            start = FAST.window_start(rec)
        except Malformed:
            continue
        before = snapshot(state, engine=False)
        got = FAST.fold_plain(state, rec, start)
        if got is not None:
            taken += 1
            assert type(got) is str
            continue
        assert snapshot(state, engine=False) == before, "declined, yet the state changed"
        try:
            w = parse_window(rec, start, state.tally)
        except Malformed:
            continue
        state.process_window(w, "agent-a/w.jsonl")
    return state, taken


CAPS = st.sampled_from([{}, {"max_services": 1, "max_models": 1, "max_regions": 1}])


@settings(max_examples=250, deadline=None)
@given(edge_archive(), CAPS)
def test_the_c_fold_equals_the_general_path_at_the_edges(lines, caps):
    assert FAST is not None
    general = _engine(lines, False, caps)
    c = _engine(lines, True, caps)
    assert snapshot(c) == snapshot(general)
    assert report_bytes(build_report(c, EVERYTHING)) == report_bytes(build_report(general, EVERYTHING))
    driven, taken = _driver(lines, caps)
    assert snapshot(driven, engine=False) == snapshot(general, engine=False)
    event(f"C fold took {min(taken, 3)}+ lines" if taken >= 3 else f"C fold took {taken} lines")


def _line(i: int, **gs_extra: object) -> dict:
    gs: dict = {"energy_kwh": 0.5, "co2": {"operational_gco2": 1.0, "total": {"mid": 1.0}},
                "per_service_energy_kwh": {"a": 0.25, "b": 0.25}, "per_service_carbon_kgco2eq": {"a": 0.5, "b": 0.5},
                "per_service_requests": {"a": 1, "b": 2},
                "per_service_energy_model": {"a": "scaphandre_rapl", "b": "scaphandre_rapl"}}
    gs.update(gs_extra)
    report = {"window": {"start": (T0 + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ"), "traces": 3},
              "green_summary": gs, "methodology": {"intensity_vintage": "2024"}}
    return seal(None, i, report["window"]["start"], "report", report)
