"""The C accelerator (``aggregator.fold.fast.fold_line``, the C ``fold_plain`` in front of the
reference) gives exactly the reference fold (``aggregator.fold.reference.fold_line``):
byte-identical reports on hostile archives, and the accelerator is really taken on plain lines."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines
from aggregator.fold.ext import EXT, FOLD_VERSION
from aggregator.fold.fast import ACCELERATED, fold_line, usable_layout
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.state import AggregateState
from aggregator.fold.sums import RegionAcc, ServiceAcc
from aggregator.read import Period, window_start
from aggregator.report import build_report, report_bytes
from schema.chain import seal

T0 = datetime(2026, 11, 10, tzinfo=UTC)
EVERYTHING = Period.everything()
HOURS = Period.parse("2026-11-10", "2026-11-11")  # hourly time buckets (aggregate.series)
POOL = ["a", "b", "c", "pg", "_unattributed", "x" * 300]
TAGS = st.sampled_from(["io_proxy_v1", "scaphandre_rapl+cal", "scaphandre_rapl", "t" * 70, ""])
FIGURE = st.one_of(st.integers(0, 4096).map(lambda n: n / 1024), st.floats(0, 1e3, allow_nan=False))
# what a hostile or careless writer may put where a figure belongs (JSON text)
HOSTILE = st.one_of(
    st.sampled_from(["-1e308", "1e308", "1e16", "-2.5", "-5", "18446744073709551615", "9007199254740993", "2.5"]),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "-0.0", "null", "true", "false", '"12"', "[]", "{}", "7", "0"]),
)
PATHS = [
    ("green_summary", "energy_kwh"), ("green_summary", "total_io_ops"), ("window", "traces"),
    ("green_summary", "co2", "operational_gco2"), ("green_summary", "co2", "embodied_gco2"),
    ("green_summary", "co2", "database_gco2"), ("green_summary", "co2", "messaging_gco2"),
    ("green_summary", "co2", "total", "mid"), ("green_summary", "co2", "total"), ("green_summary", "co2"),
    ("green_summary", "per_service_energy_kwh", "a"), ("green_summary", "per_service_carbon_kgco2eq", "a"),
    ("green_summary", "per_service_requests", "a"), ("green_summary", "per_service_region", "a"),
    ("green_summary", "per_service_energy_model", "a"), ("green_summary", "per_service_requests"),
    ("green_summary", "per_service_region"), ("green_summary", "per_service_energy_model"),
    ("green_summary", "per_service_carbon_kgco2eq"), ("green_summary", "hosts"), ("green_summary", "regions"),
    ("methodology",), ("hash",), ("green_summary",), ("per_endpoint_io_ops",),
    ("green_summary", "energy_model"), ("green_summary", "co2", "total", "model"),
    ("window", "root_spans"), ("window", "end"), ("green_summary", "energy_without_carbon_kwh"),
    ("green_summary", "per_service_measured_ratio", "a"), ("green_summary", "per_service_measured_ratio"),
]
SENTINEL = "@@HOSTILE@@"
# backfilled lines (methodology.backfill = "true") take the general path, which keeps the
# report's backfill term; the near misses are ordinary lines
METHODOLOGY = st.sampled_from([{"intensity_vintage": "2024"}] * 3 + [
    {"intensity_vintage": "2024", "backfill": "true", "backfill_hosts": "not charged"},
    {"backfill": "true"}, {"backfill": "TRUE"}, {"backfill": True}, {"backfill": ["true"]}])
START_FORMATS = st.sampled_from(["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%S+00:00"])


@st.composite
def io_rows(draw, own: list[str]) -> list:
    """per_endpoint_io_ops: the services' rows (a service may repeat, a host may appear, ops
    may be 0 so there is nothing to split by), sometimes a hostile row or value."""
    rows: list = [{"service": n, "io_ops": draw(st.integers(0, 5))} for n in own]
    rows += [{"service": draw(st.sampled_from(POOL)), "io_ops": draw(st.integers(0, 5))}
             for _ in range(draw(st.integers(0, 2)))]
    hostile = draw(st.integers(0, 9))
    if hostile == 0:
        rows.append({"service": "a", "io_ops": SENTINEL})
    elif hostile == 1:
        rows.append({"service": SENTINEL, "io_ops": 2})
    elif hostile == 2:
        rows.append(SENTINEL)
    elif hostile == 3:
        rows.append({"service": "b"})  # io_ops absent: 0
    return rows


@st.composite
def archive(draw) -> list[bytes]:
    """Lines that mostly repeat one layout (the fast path's case), with hostile leaves,
    host rows, layout changes, v1.0 lines and truncated lines mixed in."""
    names = draw(st.lists(st.sampled_from(POOL[:3]) if draw(st.integers(0, 3)) else st.sampled_from(POOL),
                          min_size=1, max_size=4, unique=True))
    tags = {n: draw(TAGS) for n in names}
    lines, prev = [], None
    spread = draw(st.sampled_from([1, 29, 61]))  # minutes between windows: the time bucket changes or not
    for i in range(draw(st.integers(1, 12))):
        own = names if draw(st.integers(0, 7)) else draw(st.lists(st.sampled_from(POOL), max_size=3, unique=True))
        gs: dict = {
            "energy_kwh": draw(FIGURE), "total_io_ops": draw(st.integers(0, 99)),
            "co2": {"operational_gco2": draw(FIGURE), "embodied_gco2": draw(FIGURE), "database_gco2": 0.0,
                    "messaging_gco2": draw(FIGURE), "total": {"mid": draw(FIGURE), "model": "io_proxy_v1"}},
            "regions": [{"region": draw(st.sampled_from(["pl", "eu-west-3", "mars-1"])),
                         "status": draw(st.sampled_from(["resolved", "resolved", "out_of_table", "unresolved"])),
                         "io_ops": draw(st.integers(0, 9)), "energy_kwh": draw(FIGURE), "co2_gco2": draw(FIGURE)}],
            "hosts": [{"name": "pg", "energy_kwh": draw(FIGURE)}] if draw(st.integers(0, 9)) == 0 else [],
        }
        if draw(st.booleans()):  # lines since 2026-12-01 record it
            gs["energy_without_carbon_kwh"] = draw(FIGURE)
        if draw(st.booleans()):  # mostly zeros (the C fold takes them), sometimes a meter's share
            gs["per_service_measured_ratio"] = {n: draw(st.sampled_from([0.0, 0.0, 0, 0.5, 1.0, 1, 0.25]))
                                                for n in own}
        v1 = not own or not draw(st.integers(0, 4))
        if not v1:
            gs["per_service_energy_kwh"] = {n: draw(FIGURE) for n in own}
            gs["per_service_carbon_kgco2eq"] = {n: draw(FIGURE) for n in own}
            if draw(st.booleans()):
                gs["per_service_requests"] = {n: draw(st.integers(0, 50)) for n in own}
            if draw(st.integers(0, 9)):
                gs["per_service_region"] = {n: "pl" for n in own}
            gs["per_service_energy_model"] = {n: tags.get(n, "io_proxy_v2") for n in own}
        else:  # a v1.0 line (the proxy path): runtime maps absent, energy_kwh often too
            if draw(st.booleans()):
                del gs["energy_kwh"]
            if draw(st.integers(0, 3)) == 0:
                gs["energy_model"] = draw(TAGS)
            gs["co2"]["total"]["model"] = draw(TAGS)
        at = T0 + timedelta(minutes=i * spread, microseconds=draw(st.sampled_from([0, 1, 999999, 123456])))
        report = {"window": {"start": at.strftime(draw(START_FORMATS)),
                             "end": (at + timedelta(minutes=draw(st.integers(0, 2)))).strftime(draw(START_FORMATS)),
                             "traces": draw(st.integers(0, 9))},
                  "green_summary": gs, "methodology": draw(METHODOLOGY),
                  "per_endpoint_io_ops": draw(io_rows(own))}
        if draw(st.booleans()):
            report["window"]["root_spans"] = draw(st.integers(0, 9))
        path = draw(st.sampled_from(PATHS[:8] if draw(st.booleans()) else PATHS)) if draw(st.booleans()) else None
        rec = seal(prev, i, report["window"]["start"], "report", report)
        prev = rec["hash"]
        if path is not None:
            node = rec if path[0] == "hash" else rec["report"]
            for key in path[:-1]:
                node = node.get(key) if isinstance(node.get(key), dict) else {}
            node[path[-1]] = SENTINEL
        raw = orjson.dumps(rec).replace(f'"{SENTINEL}"'.encode(), draw(HOSTILE).encode())
        cut = draw(st.integers(0, 12))
        lines.append(raw[: len(raw) // 2] if cut == 0 else raw)
    return lines


def _fold(lines: list[bytes], fold: Callable = fold_line, **caps: int) -> tuple[bytes, AggregateState]:
    state = AggregateState(**caps)
    _, stat = fold_lines(lines, "agent-a/w.jsonl", "agent-a", HOURS, state=state, fold=fold)
    state.files.append(stat)
    return report_bytes(build_report(state, HOURS)), state


def plain_args(state: AggregateState, start: float) -> tuple:
    """What the accelerated fold hands the C ``fold_plain`` after a line (the cached layout)."""
    usable = usable_layout(state, start)
    assert usable is not None, "no layout the C fold can take"
    layout, _ = usable
    return layout.names, layout.tags, layout.targets, layout.cells, state.regions


def test_the_c_fold_is_built_and_by_the_current_rules():
    # make test builds it (setup.py); without it the aggregator is correct but slower, and the
    # differential tests below would compare the reference with itself
    assert ACCELERATED and EXT is not None and EXT.FOLD_VERSION == FOLD_VERSION
    assert fold_line is not fold_line_reference
    assert issubclass(ServiceAcc, EXT.ServiceSums) and issubclass(RegionAcc, EXT.RegionSums)


@settings(max_examples=200, deadline=None)
@given(archive(), st.sampled_from([{}, {"max_services": 2, "max_models": 2, "max_regions": 1}]))
def test_the_accelerator_folds_hostile_archives_exactly_as_the_reference(lines, caps):
    general, gstate = _fold(lines, fold_line_reference, **caps)
    fast, fstate = _fold(lines, **caps)
    assert fast == general  # byte-identical: same additions in the same order, same counters
    assert fstate.chains == gstate.chains and fstate.malformed_samples == gstate.malformed_samples
    assert (fstate.tally.sanitised, fstate.tally.missing) == (gstate.tally.sanitised, gstate.tally.missing)
    assert [s.__dict__ for s in fstate.files] == [s.__dict__ for s in gstate.files]


def _plain(i: int, energy: object = 0.25) -> dict:
    gs = {"energy_kwh": 0.5, "co2": {"operational_gco2": 1.0, "total": {"mid": 1.0}},
          "per_service_energy_kwh": {"a": energy, "b": 0.25}, "per_service_carbon_kgco2eq": {"a": 0.5, "b": 0.5},
          "per_service_requests": {"a": 1, "b": 2}, "per_service_region": {"a": "pl", "b": "pl"},
          "per_service_energy_model": {"a": "scaphandre_rapl", "b": "scaphandre_rapl"}}
    report = {"window": {"start": (T0 + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ"), "traces": 3},
              "green_summary": gs}
    return seal(None, i, report["window"]["start"], "report", report)


def test_a_plain_line_after_one_of_the_same_layout_is_summed_in_c_exactly():
    assert EXT is not None
    state = AggregateState()
    # the first line by the reference: it caches the layout fold_plain is handed
    fold_lines([orjson.dumps(_plain(0))], "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state,
               fold=fold_line_reference)
    rec = orjson.loads(orjson.dumps(_plain(1)))
    before = (state.energy, state.requests, state.windows)
    got = EXT.fold_plain(rec, *plain_args(state, window_start(rec)))
    # the window's deltas: application energy and carbon, requests, traces, the other terms ...
    assert got[:7] == (0.5, 1.0, 3, 3, 0.0, 0.0, 0.0) and got[-1] == rec["hash"]
    # ... which the caller adds to the totals; the per-service sums are added in C already
    assert (state.energy, state.requests, state.windows) == before
    assert state.services["a"].energy == 0.5 and state.services["b"].requests == 4
    # through the seam: two more windows, the totals added by the reference's functions
    fold_line(state, orjson.loads(orjson.dumps(_plain(2))), window_start(rec), "agent-a/w.jsonl")
    assert state.windows == 2 and state.runtime_windows == 2 and state.models == {"scaphandre_rapl": 4}


def test_the_c_fold_changes_nothing_when_it_declines():
    assert EXT is not None
    state = AggregateState()
    # the first line by the reference: it caches the layout fold_plain is handed
    fold_lines([orjson.dumps(_plain(0))], "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state,
               fold=fold_line_reference)
    before = pickle.dumps(state)
    for path, value in [(("green_summary", "energy_kwh"), -1.0),  # window-level: the reference counts it
                        (("green_summary", "per_service_energy_kwh", "a"), -1.0),  # so is a leaf
                        (("green_summary", "per_service_requests", "b"), 2.0),  # a float count
                        (("green_summary", "hosts"), [{"name": "pg"}]),  # a host row
                        (("green_summary", "per_service_energy_model", "b"), "io_proxy_v1"),  # a new layout
                        (("green_summary", "per_service_measured_ratio"), {"a": 0.5}),  # measured energy
                        (("methodology",), {"backfill": "true"}),  # a backfilled line
                        (("window", "traces"), True)]:  # a bool is not a count
        hostile = orjson.loads(orjson.dumps(_plain(1)))
        node = hostile["report"]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert EXT.fold_plain(hostile, *plain_args(state, window_start(hostile))) is None, path
        assert pickle.dumps(state) == before, path
    # through the seam a sanitised leaf is counted, by the reference
    rec = orjson.loads(orjson.dumps(_plain(2, energy=-1.0)))
    assert fold_line(state, rec, window_start(rec), "agent-a/w.jsonl") == rec["hash"]
    assert state.tally.sanitised == 1 and state.services["a"].energy == 0.25 and state.windows == 2


def test_a_v1_line_is_split_by_io_share():
    report = {"window": {"start": "2026-11-10T00:00:00Z", "traces": 4},
              "green_summary": {"total_io_ops": 4, "energy_kwh": 0.5,
                                "co2": {"operational_gco2": 2000.0, "total": {"mid": 2000.0, "model": "io_proxy_v1"}}},
              "per_endpoint_io_ops": [{"service": "a", "io_ops": 1}, {"service": "b", "io_ops": 3}]}
    line = orjson.dumps(seal(None, 0, "2026-11-10T00:00:00Z", "report", report))
    got, state = _fold([line])
    assert got == _fold([line], fold_line_reference)[0]
    # a: 1/4 of 0.5 kWh = 0.125 kWh and of 2 kg = 0.5 kg; b: 3/4 -> 0.375 kWh, 1.5 kg
    assert (state.services["a"].energy, state.services["a"].carbon) == (0.125, 0.5)
    assert (state.services["b"].energy, state.services["b"].carbon) == (0.375, 1.5)
    assert state.fallback_windows == 1 and state.requests == 4 and state.models == {"io_proxy_v1": 2}


def test_counts_are_exact_past_64_bits_and_accumulators_pickle_whole():
    # requests and I/O ops are summed as exact integers (C: 128-bit), as Python ints would be
    acc, region = ServiceAcc("pl"), RegionAcc("resolved", 590.8, 1.5, "annual")
    for _ in range(3):
        acc.requests += 2**63 + 1
        region.io_ops += 2**62
    acc.energy += 0.1
    acc.energy += 0.2  # IEEE double addition, as on a Python float
    acc.windows += 2
    acc.models["scaphandre_rapl"] = None
    assert acc.requests == 3 * (2**63 + 1) and region.io_ops == 3 * 2**62 and acc.energy == 0.1 + 0.2
    back = pickle.loads(pickle.dumps(acc))  # how Dask ships a state
    assert (back.region, back.models, back.energy, back.requests, back.windows) == (
        "pl", {"scaphandre_rapl": None}, 0.1 + 0.2, 3 * (2**63 + 1), 2)
    region.rows += 4
    r = pickle.loads(pickle.dumps(region))
    assert (r.status, r.intensity, r.pue, r.source, r.io_ops, r.rows) == ("resolved", 590.8, 1.5, "annual", 3 * 2**62, 4)
    with pytest.raises(ValueError, match="negative"):
        acc.requests = -1


STARTS = st.one_of(
    st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")),
    # the agent's own form, with microseconds
    st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")),
    st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z"),  # mostly impossible dates
    st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z\Z"),
    st.sampled_from(["2026-11-30T12:00:00+01:00", "2026-11-30T12:00:00.5Z", "2024-02-29T00:00:00Z",
                     "2026-02-29T00:00:00Z", "2026-11-30T24:00:00Z", "0000-01-01T00:00:00Z", "2026-11-30t12:00:00Z",
                     "２０２６-11-30T12:00:00Z", "2026-11-30T12:00:60Z", "2026-11-30"]),
    st.text(max_size=24),
)


@settings(max_examples=600, deadline=None)
@given(STARTS)
def test_the_c_window_start_equals_the_python_parser(text):
    # the C parser takes the usual form only and hands every other text to the Python one
    from aggregator.read import Malformed

    assert EXT is not None

    rec = {"report": {"window": {"start": text}}}
    try:
        want: object = window_start(rec)
    except Malformed as exc:
        want = str(exc)
    try:
        got: object = EXT.window_start(rec)
    except Malformed as exc:
        got = str(exc)
    assert got == want and type(got) is type(want)
    # the window's end is read by the same C parser (None where Python's cannot read it)
    from aggregator.coverage import window_end

    rec = {"report": {"window": {"start": "2026-11-10T00:00:00Z", "end": text}}}
    assert EXT.window_end(rec) == window_end(rec) and type(EXT.window_end(rec)) is type(window_end(rec))


@pytest.mark.parametrize(("mid", "embodied", "energy_kwh", "io_ops", "want_kg"), [
    (5000.0, 1000.0, 0.0, 3, 4.0),  # no operational figure: mid - embodied - database - messaging
    (500.0, 1000.0, 0.25, 3, 0.0),  # ... never below zero
])
def test_a_v1_line_without_an_operational_figure_takes_it_from_mid_and_never_below_zero(
        mid, embodied, energy_kwh, io_ops, want_kg):
    from schema.constants import ENERGY_PER_IO_OP_KWH

    report = {"window": {"start": "2026-11-10T00:00:00Z", "traces": 1},
              "green_summary": {"total_io_ops": io_ops, "energy_kwh": energy_kwh,
                                "co2": {"operational_gco2": 0.0, "embodied_gco2": embodied,
                                        "total": {"mid": mid, "model": "io_proxy_v1"}}},
              "per_endpoint_io_ops": [{"service": "a", "io_ops": 1}, {"service": "a", "io_ops": 2}]}
    line = orjson.dumps(seal(None, 0, "2026-11-10T00:00:00Z", "report", report))
    fast, state = _fold([line])
    assert fast == _fold([line], fold_line_reference)[0] and state.fallback_windows == 1
    assert state.services["a"].carbon == want_kg == state.operational_kg
    # energy: energy_kwh when > 0, else total_io_ops x the per-op coefficient
    assert state.services["a"].energy == (energy_kwh or io_ops * ENERGY_PER_IO_OP_KWH)


def test_without_the_c_build_the_python_paths_give_the_same_report(mixed_archive):
    # a machine without a C compiler: aggregator.fold._fold cannot be imported; the accumulators
    # fall back to Python slots and the reference folds every line - same report bytes
    import subprocess
    import sys
    from pathlib import Path

    from aggregator.engines import run_local
    from aggregator.files import discover

    script = (
        "import sys; sys.modules['aggregator.fold._fold'] = None\n"  # import of it raises ImportError
        "from aggregator.fold.fast import ACCELERATED, fold_line\n"
        "from aggregator.fold.reference import fold_line as reference\n"
        "from aggregator.fold.sums import ServiceAcc\n"
        "assert not ACCELERATED and fold_line is reference\n"
        "assert ServiceAcc.__mro__[1].__module__ == 'aggregator.fold.ext'\n"
        "from aggregator.engines import run_local\n"
        "from aggregator.files import discover\n"
        "from aggregator.read import Period\n"
        "from aggregator.report import build_report, report_bytes\n"
        "state = run_local(discover([sys.argv[1]]), Period.everything())\n"
        "sys.stdout.buffer.write(report_bytes(build_report(state, Period.everything(), 'ACME')))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script, str(mixed_archive)], cwd=root, capture_output=True,
                         timeout=120, check=True).stdout
    here = report_bytes(build_report(run_local(discover([str(mixed_archive)]), EVERYTHING), EVERYTHING, "ACME"))
    assert out == here


def _hostile_line_mix() -> list[bytes]:
    """Plain runtime lines (taken by the C fold) and, between them, a sanitised leaf, ints past
    64 bits, a new layout, a +cal tag, host rows, region rows (known, short, new), a v1.0 line
    with _unattributed and new services, an over-long hash, a torn and a non-object line."""
    plain = orjson.dumps(_plain(0))
    lines = [plain, plain]
    for old, new in [(b'"a":0.25', b'"a":-1.0'), (b'"a":1,', b'"a":true,'), (b'"b":0.5}', b'"b":18446744073709551615}'),
                     (b'"traces":3', b'"traces":9223372036854775808'), (b'"b":"scaphandre_rapl"', b'"b":"io_proxy_v1+cal"'),
                     (b'"energy_kwh":0.5', b'"energy_kwh":0.5,"hosts":[{"name":"pg"}]'),
                     (b'"energy_kwh":0.5', b'"energy_kwh":0.5,"regions":[{"region":"pl","io_ops":1,'
                                           b'"energy_kwh":0.5,"co2_gco2":1.0},{"region":"pl"},{"region":"de"}]'),
                     (b'"a":"scaphandre_rapl"', b'"a":[1]'), (b'"traces":3', b'"traces":-0.0')]:
        assert old in plain
        lines += [plain.replace(old, new), plain]
    v1 = {"window": {"start": "2026-11-10T01:00:00Z", "traces": 2},
          "green_summary": {"energy_kwh": 0.5, "co2": {"operational_gco2": 1.0, "total": {"mid": 1.0, "model": "m"}}},
          "per_endpoint_io_ops": [{"service": "a", "io_ops": 1}, {"service": "_unattributed", "io_ops": 2},
                                  {"service": "new", "io_ops": 3}]}
    return [*lines, orjson.dumps({"report": v1, "hash": "h" * 200}), b'{"report": 5}', b'{"torn']


def _objects(obj: object) -> list:
    """``obj`` and everything in it (a loaded line's dicts, keys, lists and leaves)."""
    out = [obj]
    for part in obj.items() if type(obj) is dict else enumerate(obj) if type(obj) is list else ():
        out += [part[0], *_objects(part[1])]
    return out


def test_folding_the_same_hostile_lines_again_and_again_leaks_no_reference_and_no_memory():
    # a missing Py_DECREF keeps a line's objects alive: their refcounts grow with every fold;
    # a leaked allocation shows in tracemalloc's count of live bytes
    import gc
    import sys
    import tracemalloc

    assert EXT is not None
    lines = _hostile_line_mix()
    recs = [orjson.loads(raw) for raw in lines[:-2]]
    # the lines' own objects (not small ints: shared with everything, a list of refcounts included)
    parts = [o for rec in recs for o in _objects(rec) if not (type(o) is int and -5 <= o <= 256)]

    def fold_all() -> None:
        fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=AggregateState())
        state = AggregateState()
        fold_lines(lines[:1], "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state, fold=fold_line_reference)
        for rec in recs:
            EXT.fold_plain(rec, *plain_args(state, EXT.window_start(rec)))

    for _ in range(20):  # warm the caches (the hour cache, free lists)
        fold_all()
    gc.collect()
    refs, shared = [sys.getrefcount(o) for o in parts], [sys.getrefcount(o) for o in (None, True, False)]
    for _ in range(200):
        fold_all()
    gc.collect()
    assert [sys.getrefcount(o) for o in parts] == refs
    # None, True and False are shared with all other code: less than one reference per fold
    assert all(abs(sys.getrefcount(o) - n) < 50 for o, n in zip((None, True, False), shared, strict=True))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            fold_all()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 16_384, grown  # 200 folds of 25 lines: one leaked float per line is 160 KB


@st.composite
def start_records(draw) -> dict:
    """A loaded line whose report.window.start is wrong at any depth: the text, its type, a
    parent absent or not an object."""
    text = st.one_of(STARTS, st.text(alphabet="0123456789-T:Z+. ", min_size=18, max_size=22))
    start = draw(st.one_of(text, st.none(), st.integers(), st.floats(), st.booleans(), st.just([]), st.just({})))
    window = {"start": start} if draw(st.integers(0, 5)) else draw(st.sampled_from([{}, [], "w", None]))
    report = {"window": window} if draw(st.integers(0, 5)) else draw(st.sampled_from([{}, [], 5, None]))
    return {"report": report} if draw(st.integers(0, 7)) else {}


@settings(max_examples=400, deadline=None)
@given(start_records())
def test_the_c_window_start_equals_the_python_parser_whatever_the_line_shape(rec):
    from aggregator.read import Malformed

    assert EXT is not None
    outcomes = []
    for parse in (window_start, EXT.window_start):
        try:
            outcomes.append(parse(rec))
        except Malformed as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1] and type(outcomes[0]) is type(outcomes[1])


@pytest.mark.parametrize("depth", [10, 990, 1000, 1020])
def test_a_deeply_nested_methodology_block_is_folded_not_fatal(depth):
    # comparing two such blocks with == passes Python's recursion limit; every path must go on
    block = b'{"vintage":"2024","k":' + b"[" * depth + b"]" * depth + b"}"
    lines = [orjson.dumps({"report": {"window": {"start": f"2026-11-10T00:0{i}:00Z", "traces": 1},
                                      "green_summary": {"per_service_energy_kwh": {"a": 0.25},
                                                        "per_service_carbon_kgco2eq": {"a": 0.5}},
                                      "methodology": "@M"}}).replace(b'"@M"', block) for i in range(3)]
    reports = set()
    for fold in (fold_line_reference, fold_line):
        state = AggregateState()
        fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state, fold=fold)
        assert state.windows == 3 and state.methodology == {"vintage": ["2024"]}
        reports.add(report_bytes(build_report(state, EVERYTHING)))
    assert len(reports) == 1


def test_the_agents_own_lines_are_folded_straight_from_their_bytes():
    # lines of the shape a real agent writes (bench/agent_lines.py, held to a real agent's
    # lines by test_bench_lines.py): every one is folded by the C scan of its bytes (no
    # orjson.loads) - the first of a fresh state (new services, new regions, a new bucket), one
    # whose service set is not the previous window's, one past the service cap (its entries
    # dropped) - and the report is the reference's, byte for byte
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:  # bench is not an installed package
        sys.path.append(repo)
    from aggregator.fold.fast import fold_raw, folder
    from bench.agent_lines import replicate, window_bodies

    first_ns = int(T0.timestamp()) * 10**9
    # ten services in every window; then 30 of 45 services, a different draw every window
    for bodies in (window_bodies(10, 2), window_bodies(30, 4, changing=True)):
        lines = [raw.rstrip(b"\n") for raw in replicate(bodies, "agent-a", 30, first_ns)]
        for caps in ({}, {"max_services": 20}):
            state = AggregateState(**caps)
            state.set_grid(HOURS)
            byte_folder = folder(state)
            for raw in lines:
                rec = orjson.loads(raw)
                got = fold_raw(state, raw, HOURS.start, HOURS.end, byte_folder)
                assert got == (window_start(rec), EXT.window_end(rec), rec["hash"])
            assert byte_folder.folded == len(lines) and byte_folder.declined == 0
            wide = len(bodies[0]["green_summary"]["per_service_energy_kwh"]) > 20
            assert (state.dropped_services > 0) == bool(caps and wide)  # the "(other)" row, from the bytes
            assert _fold(lines, **caps)[0] == _fold(lines, fold_line_reference, **caps)[0]
        assert _fold(lines)[0] == _fold(lines, fold_line_reference)[0]
