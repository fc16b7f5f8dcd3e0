"""Property tests: the ordered merge equals one sequential fold (so Dask equals local), and
hostile lines never crash the fold nor put a NaN in the report."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import orjson
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines, merge_next
from aggregator.fold.state import AggregateState, Known, seeded
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
from schema.chain import seal
from schema.constants import ENERGY_PER_IO_OP_KWH

T0 = datetime(2026, 11, 10, tzinfo=UTC)
EVERYTHING = Period.everything()
NAMES = st.sampled_from(["a", "b", "c", "d", "pg"])
DYADIC = st.integers(0, 4096).map(lambda n: n / 1024)  # sums of these are exact in binary
TAGS = st.sampled_from(["io_proxy_v1", "io_proxy_v2+cal", "io_proxy_v2", "scaphandre_rapl"])
REGIONS = st.sampled_from(["eu-west-3", "pl", "us-east-1"])
SERVICE = st.tuples(DYADIC, DYADIC, REGIONS, TAGS, st.integers(0, 50))
BACKFILL = st.sampled_from([{}, {}, {"backfill": "true"}])  # a backfilled line: the report's backfill term


@st.composite
def window(draw, i: int = 0) -> dict:
    runtime = draw(st.booleans())
    services = draw(st.dictionaries(NAMES, SERVICE, max_size=3))
    gs: dict = {
        "total_io_ops": draw(st.integers(0, 100)),
        "co2": {"operational_gco2": draw(DYADIC), "embodied_gco2": draw(DYADIC),
                "database_gco2": draw(DYADIC), "messaging_gco2": 0.0, "total": {"model": draw(TAGS)}},
        "regions": [{"region": draw(REGIONS), "status": "resolved", "io_ops": draw(st.integers(0, 9)),
                     "energy_kwh": draw(DYADIC), "co2_gco2": draw(DYADIC), "pue": 1.5}],
        "hosts": [{"name": "pg", "kind": "database", "energy_kwh": draw(DYADIC)}],
    }
    if runtime and services:
        gs["energy_kwh"] = draw(DYADIC)
        gs["per_service_energy_kwh"] = {n: v[0] for n, v in services.items()}
        gs["per_service_carbon_kgco2eq"] = {n: v[1] for n, v in services.items()}
        gs["per_service_region"] = {n: v[2] for n, v in services.items()}
        gs["per_service_energy_model"] = {n: v[3] for n, v in services.items()}
        gs["per_service_requests"] = {n: v[4] for n, v in services.items()}
    io = [{"service": n, "endpoint": "/", "io_ops": draw(st.sampled_from([0, 1, 2, 4]))} for n in services]
    return {"window": {"start": "", "traces": draw(st.integers(0, 9))}, "green_summary": gs,
            "per_endpoint_io_ops": io, "methodology": {"intensity_vintage": draw(st.sampled_from(["2023", "2024"])),
                                                        **draw(BACKFILL)}}


def _lines(reports: list[dict]) -> list[bytes]:
    out, prev = [], None
    for i, rep in enumerate(reports):
        rep = orjson.loads(orjson.dumps(rep))  # never mutate what hypothesis drew
        rep["window"]["start"] = (T0 + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        rec = seal(prev, i, rep["window"]["start"], "report", rep)
        prev = rec["hash"]
        out.append(orjson.dumps(rec))
    return out


def _fold(lines: list[bytes]) -> AggregateState:
    state = AggregateState(max_services=3, max_models=3)  # small caps so merges cross them
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state)
    return state


def _bytes(state: AggregateState) -> bytes:
    return report_bytes(build_report(state, EVERYTHING))


def _same(a: object, b: object, path: str = "$") -> None:
    """Equal reports: every count, name, order, cap and first-seen fact exactly; floats to
    1e-9 relative, because float addition is not associative (the engines avoid the issue by
    merging in one fixed order; their byte identity is tested in test_engines)."""
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15), path  # type: ignore[arg-type]
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), path
        for k in a:
            if k != "content_hash":
                _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def _report(state: AggregateState) -> dict:
    return orjson.loads(_bytes(state))


@settings(max_examples=80, deadline=None)
@given(st.lists(window(), max_size=10), st.integers(0, 10), st.integers(0, 10))
def test_merge_is_associative_and_equals_the_sequential_fold(reports, i, j):
    lines = _lines(reports)
    i, j = sorted((min(i, len(lines)), min(j, len(lines))))
    a, b, c = lines[:i], lines[i:j], lines[j:]
    # The bare merge equals one sequential fold while no partition overflows a cap by itself;
    # the engines refold a partition that does (merge_next, tested below without assume()).
    parts = [_fold(p) for p in (a, b, c)]
    assume(all(p.dropped_services == 0 and p.rejected_models == 0 for p in parts))
    whole = _report(_fold(lines))
    _same(_report(_fold(a).merge(_fold(b)).merge(_fold(c))), whole)  # what the engines do
    right = _fold(b).merge(_fold(c))
    if right.dropped_services == 0 and right.rejected_models == 0:
        # grouping on the right is the same only while that inner merge stays under the caps
        # (it cannot know what the left side already holds); the engines never group so
        _same(_report(_fold(a).merge(right)), whole)


CAPS = {"max_services": 3, "max_models": 3, "max_regions": 2}


def _capped(lines: list[bytes], known: Known | None = None) -> AggregateState:
    state = AggregateState(**CAPS) if known is None else seeded(known, **CAPS)
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state)
    state.drop_caches()
    return state


def _engine_fold(parts: list[list[bytes]]) -> AggregateState:
    """What both engines do: fold each file alone, merge in file order, refold on overflow."""
    total = AggregateState(**CAPS)
    for part in parts:
        merge_next(total, _capped(part), lambda known, part=part: _capped(part, known))
    return total


@settings(max_examples=120, deadline=None)
@given(st.lists(window(), max_size=12), st.lists(st.integers(0, 12), max_size=3))
def test_engine_merge_equals_one_sequential_fold_even_when_a_file_overflows_a_cap(reports, cuts):
    # no assume(): partitions that overflow the service, tag and region caps on their own
    # (4 service names, 4 tags, 3 regions against caps of 3, 3 and 2) are the point
    lines = _lines(reports)
    bounds = sorted({0, len(lines), *(min(c, len(lines)) for c in cuts)})
    parts = [lines[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    _same(_report(_engine_fold(parts)), _report(_capped(lines)))


def _service_line(names: list[str], i: int) -> dict:
    gs = {"per_service_energy_kwh": {n: 1.0 for n in names},
          "per_service_carbon_kgco2eq": {n: 0.5 for n in names},
          "per_service_requests": {n: 1 for n in names}}
    return {"window": {"start": "", "traces": 1}, "green_summary": gs}


def test_a_file_overflowing_the_cap_on_its_own_still_credits_services_known_before():
    # file 1 knows "z"; file 2 alone holds 4 new services and then z again (cap 3).
    # One sequential fold: z, a, b are kept; c and d are dropped; z keeps accumulating.
    lines = _lines([_service_line(["z"], 0), _service_line(["a", "b", "c", "d"], 1), _service_line(["z"], 2)])
    alone = _capped(lines[1:])
    assert alone.overflowed and "z" not in alone.services  # on its own file 2 drops z
    state = _engine_fold([lines[:1], lines[1:]])
    assert list(state.services) == ["z", "a", "b"]
    assert state.services["z"].energy == 2.0 and state.services["z"].windows == 2  # 1.0 + 1.0
    assert state.dropped_services == 2 and state.dropped_energy == 2.0  # c and d, 1.0 kWh each
    assert _report(state) == _report(_capped(lines))


@settings(max_examples=80, deadline=None)
@given(st.lists(window(), max_size=8), st.integers(1, 3))
def test_every_proxy_entry_counts_its_window_tag_once_accepted_or_rejected(reports, max_models):
    # Each credited or dropped proxy entry meets the window's one model tag once: accepted
    # (models[tag] + 1) or rejected past the cap (rejected_models + 1). The proxy loop decides
    # the tag once per window; this checks it still counts every entry.
    proxy = []
    for rep in reports:
        rep = orjson.loads(orjson.dumps(rep))
        for key in [k for k in rep["green_summary"] if k.startswith("per_service_")]:
            del rep["green_summary"][key]
        proxy.append(rep)
    lines = _lines(proxy)
    state = AggregateState(max_services=2, max_models=max_models)
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state)
    entries = 0
    for rep in proxy:
        io = {row["service"]: row["io_ops"] for row in rep["per_endpoint_io_ops"]}
        gs = rep["green_summary"]
        # nothing to attribute: no I/O to split by, no application energy (the line's energy
        # less its hosts', or I/O ops x the per-op figure) and no application carbon
        co2, hosts = gs["co2"], sum(h.get("energy_kwh", 0.0) for h in gs.get("hosts", ()) if h.get("in_totals", True))
        app_kwh = max(0.0, gs.get("energy_kwh", 0.0) - hosts) if gs.get("energy_kwh", 0.0) > 0 else gs["total_io_ops"] * ENERGY_PER_IO_OP_KWH
        app_g = co2["operational_gco2"] or max(0.0, co2["total"].get("mid", 0.0) - co2["embodied_gco2"]
                                               - co2["database_gco2"] - co2["messaging_gco2"])
        idle = app_kwh == 0.0 and app_g == 0.0
        # a service named like host pg is a service; with nothing to split by, _unattributed
        entries += len(io) if sum(io.values()) else 0 if idle else 1
    assert sum(state.models.values()) + state.rejected_models == entries
    assert all(state.models[t] >= 1 for t in state.models) and len(state.models) <= max_models


@settings(max_examples=30, deadline=None)
@given(st.lists(window(), min_size=1, max_size=6))
def test_merging_an_empty_state_changes_nothing(reports):
    lines = _lines(reports)
    whole = _bytes(_fold(lines))
    assert _bytes(_fold([]).merge(_fold(lines))) == whole
    assert _bytes(_fold(lines).merge(_fold([]))) == whole


def test_merge_is_ordered_left_first_seen_region_wins():
    first = {"window": {"start": ""}, "green_summary": {
        "per_service_energy_kwh": {"a": 1.0}, "per_service_carbon_kgco2eq": {"a": 1.0},
        "per_service_region": {"a": "pl"}}}
    second = json.loads(json.dumps(first))
    second["green_summary"]["per_service_region"] = {"a": "eu-west-3"}
    l1, l2 = _lines([first, second])
    assert _fold([l1]).merge(_fold([l2])).services["a"].region == "pl"
    assert _fold([l2]).merge(_fold([l1])).services["a"].region == "eu-west-3"


HOSTILE_LEAF = st.one_of(
    st.sampled_from(["NaN", "Infinity", "-Infinity", "-1e308", "1e308", "-0.0", "null", "true",
                     '"12"', "[]", "{}", "18446744073709551615", "-5"]),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: json.dumps(f)),
    st.text(max_size=3).map(json.dumps),
)
PATHS = [
    ("green_summary", "energy_kwh"), ("green_summary", "total_io_ops"),
    ("green_summary", "co2", "operational_gco2"), ("green_summary", "co2", "embodied_gco2"),
    ("green_summary", "co2", "database_gco2"), ("green_summary", "co2", "total", "mid"),
    ("green_summary", "per_service_energy_kwh", "a"), ("green_summary", "per_service_carbon_kgco2eq", "b"),
    ("green_summary", "per_service_requests", "a"), ("green_summary", "per_service_region", "a"),
    ("green_summary", "per_service_energy_model", "a"), ("green_summary", "hosts"),
    ("green_summary", "regions"), ("green_summary", "per_service_energy_kwh"), ("window", "traces"),
    ("per_endpoint_io_ops",), ("green_summary",), ("window", "start"), ("methodology",),
]
SENTINEL = "@@HOSTILE@@"


def _inject(report: dict, path: tuple[str, ...]) -> dict:
    node = report
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node.get(key), dict) or key not in node else node[key]
        if not isinstance(node, dict):
            return report
    node[path[-1]] = SENTINEL
    return report


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(window(), st.sampled_from(PATHS), HOSTILE_LEAF, st.integers(0, 3)), max_size=6))
def test_hostile_lines_never_crash_and_never_put_nan_in_the_report(cases):
    lines = []
    for i, (rep, path, leaf, cut) in enumerate(cases):
        rep = orjson.loads(orjson.dumps(rep))
        rep["window"]["start"] = (T0 + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        rec = seal(None, i, "t", "report", _inject(rep, path))
        raw = orjson.dumps(rec).replace(f'"{SENTINEL}"'.encode(), leaf.encode())
        lines.append(raw[: len(raw) * cut // 4] if cut else raw)  # cut 1-3: a truncated line
    state = AggregateState()
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state)
    data = _bytes(state)  # canonical JSON refuses NaN/Inf: building it proves there is none
    report = orjson.loads(data)
    assert state.windows + state.malformed == len(lines)
    assert all(math.isfinite(x) and x >= 0 for x in _numbers(report))


def _numbers(obj):
    if isinstance(obj, bool):
        return
    if isinstance(obj, int | float):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)


def test_5000_services_100_tags_and_1kib_tags_in_hostile_lines():
    names = [f"svc-{i}" for i in range(5000)]
    tags = [f"t{i}" for i in range(100)] + ["k" * 1024]
    gs = {
        "energy_kwh": float("nan"),
        "per_service_energy_kwh": {n: (-1.0 if i % 7 == 0 else 1e-6) for i, n in enumerate(names)},
        "per_service_carbon_kgco2eq": {n: ("x" if i % 11 == 0 else 1e-9) for i, n in enumerate(names)},
        "per_service_energy_model": {n: tags[i % len(tags)] for i, n in enumerate(names)},
    }
    rep = {"window": {"start": "2026-11-10T00:00:00Z"}, "green_summary": gs}
    raw = json.dumps(seal(None, 0, "t", "report", {"window": rep["window"], "green_summary": {}}))
    raw = raw.replace('"green_summary": {}', '"green_summary": ' + json.dumps(gs))  # NaN as written
    assert b"NaN" in raw.encode()
    state = AggregateState()
    fold_lines([raw.encode()], "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state)
    # literal NaN is not JSON for orjson; the tolerant parse reads it as a number, sanitised to 0
    assert state.malformed == 0 and state.tally.sanitised == 1 + sum(1 for i in range(5000) if i % 7 == 0)
    valid = orjson.dumps(seal(None, 0, "t", "report", {"window": rep["window"],
                                                        "green_summary": {**gs, "energy_kwh": -3.0}}))
    state = AggregateState()
    fold_lines([valid], "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state)
    report = build_report(state, EVERYTHING)
    agg = report.aggregate
    assert len(report.applications) == 4096 and agg.dropped_services == 904
    assert len(report.methodology.energy_source_models) == 64
    assert agg.rejected_energy_models == 5000 - sum(1 for i in range(5000) if i % 101 < 64)
    assert agg.sanitised_values == 1 + sum(1 for i in range(5000) if i % 7 == 0)  # energy_kwh + negatives
    assert agg.missing_values == sum(1 for i in range(5000) if i % 11 == 0)
    assert all(math.isfinite(x) and x >= 0 for x in _numbers(orjson.loads(report_bytes(report))))
