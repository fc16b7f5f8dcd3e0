"""The byte path of the C fold (``fast.fold_raw``) on lines shaped as the agent writes them, then
broken the ways a hostile or a damaged archive breaks them: held to the reference fold.

test_fold_accel.py and test_fold_c_edges.py put hostile *values* into small lines. Here the
lines are the agent's own (``bench.agent_lines``: real window bodies, 27-character times,
regions, endpoint rows), and what is broken is their *text*: numbers orjson refuses or reads
another way (NaN, 1e400, 01, ints past 64 bits, halfway decimals), a key written twice, a key or
a name spelled with an escape, strings with escapes and non-ASCII in the parts the scan skips,
nesting in those parts near and past the scan's and orjson's limits, a line cut short, bytes
after the object, a byte-order mark, invalid UTF-8, a lone surrogate, white space JSON allows
and bytes it does not; services renamed, dropped, reordered, new, past the service cap; tags
with ``+cal``; backfill spelled every way. Each archive is folded with the accelerator (byte
path and ``fold_plain``) and with the reference alone: the reports must be the same bytes, the
counters the same. A line the byte path must not take (orjson refuses it or reads it otherwise)
is checked to be declined with the state untouched.
"""

from __future__ import annotations

import copy
import pickle
import random
import sys
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines
from aggregator.fold.ext import EXT
from aggregator.fold.fast import fold_line, fold_raw, folder
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.state import AggregateState
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
from schema import times
from schema.archive import BODY_KEY
from schema.chain import seal

T0 = datetime(2026, 11, 10, tzinfo=UTC)
HOURS = Period.parse("2026-11-10", "2026-11-11")  # hourly buckets: a 61-minute step changes bucket
EVERYTHING = Period.everything()


@cache
def _bodies() -> tuple[dict, ...]:
    """Window bodies the agent's own code builds: six of nine services drawn anew each window,
    and four services in every window (bench/agent_lines.py, held to a real agent's lines)."""
    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:  # bench is not an installed package
        sys.path.append(repo)
    from bench.agent_lines import window_bodies

    return tuple(window_bodies(6, 4, changing=True, seed=3) + window_bodies(4, 2, seed=5))


def _fold(lines: list[bytes], fold, period: Period, **caps: int) -> tuple[bytes, AggregateState, dict]:
    state = AggregateState(**caps)
    _, stat = fold_lines(lines, "agent-a/w.jsonl", "agent-a", period, state=state, fold=fold)
    state.files.append(stat)
    return report_bytes(build_report(state, period)), state, dict(stat.__dict__)


def assert_same_as_reference(lines: list[bytes]) -> None:
    for period in (HOURS, EVERYTHING):
        for caps in ({}, {"max_services": 5, "max_models": 2}):
            want, wstate, wstat = _fold(lines, fold_line_reference, period, **caps)
            got, gstate, gstat = _fold(lines, fold_line, period, **caps)
            assert got == want, (period, caps)
            assert (gstate.tally.sanitised, gstate.tally.missing) == (wstate.tally.sanitised, wstate.tally.missing)
            assert gstate.malformed_samples == wstate.malformed_samples and gstate.chains == wstate.chains
            assert gstat == wstat and gstate.models == wstate.models
            assert gstate.calibration_applied == wstate.calibration_applied


# -- the text of a line as a tree, so it can be written back broken ---------------------------
# ["o", [[key text, node], ...]] an object (a key may repeat), ["a", [node, ...]] an array,
# ["r", text] any other value as its JSON text (or any text at all)


def _tree(value: object) -> list:
    if isinstance(value, dict):
        return ["o", [[orjson.dumps(k).decode(), _tree(v)] for k, v in value.items()]]
    if isinstance(value, list):
        return ["a", [_tree(v) for v in value]]
    return ["r", orjson.dumps(value).decode()]


def _text(node: list, rng: random.Random, spaces: list[str] | None) -> str:
    def gap() -> str:
        return rng.choice(spaces) if spaces and rng.random() < 0.3 else ""

    if node[0] == "o":
        return "{" + ",".join(gap() + k + gap() + ":" + gap() + _text(v, rng, spaces) + gap()
                              for k, v in node[1]) + gap() + "}"
    if node[0] == "a":
        return "[" + ",".join(gap() + _text(v, rng, spaces) + gap() for v in node[1]) + gap() + "]"
    return node[1]


def _all(node: list) -> list[list]:
    out = [node]
    for child in (v for _, v in node[1]) if node[0] == "o" else node[1] if node[0] == "a" else ():
        out += _all(child)
    return out


def _member(node: list | None, key: str) -> list | None:
    """The object under ``key`` of the object ``node`` (the first such member), or None."""
    if node is None or node[0] != "o":
        return None
    for k, v in node[1]:
        if k == f'"{key}"':
            return v if v[0] == "o" else None
    return None


def _escaped(quoted: str, rng: random.Random) -> str:
    """``quoted`` (a JSON string's text) with one of its characters written as a \\u escape."""
    body = quoted[1:-1]
    if not body or "\\" in body:
        return quoted
    i = rng.randrange(len(body))
    return '"' + body[:i] + f"\\u{ord(body[i]):04x}" + body[i + 1:] + '"'


NUMBERS = [
    "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "1e308", "5e-324", "2.2250738585072011e-308",
    "-0.0", "-0", "0", "0.0", "1E2", "1e+2", "0e0", "01", "1.", ".5", "+1", "-", "1e", "0x10", "tru", "nul",
    "18446744073709551615", "18446744073709551616", "9223372036854775808", "123456789012345678901234567890",
    "1e15", "1000000000000000.5", "9007199254740993", "9007199254740993.0", "0." + "0" * 320 + "1",
    "1" + "0" * 310 + ".0", "1.7976931348623159e308",
    "0.3000000000000000166533453693773481063544750213623046875",  # exactly halfway: to even
    "0.000014550000000000006", "1.4550000000000006e-5", "0.00001455000000000000600000000000000000000000000001",
    "true", "null", '"1.5"', "[]", "{}", "[1.5]",
]
STRINGS = ['"\\u0061"', '"a\\"b"', '"\\\\"', '"\\/"', '"\\ud800"', '"\\ud83d\\ude00"', '"\\udc00\\ud800"', '"é"',
           '"\\u00e9"', '"\\u0000"', '""', '"\x7f"', '"\\x41"', '"\x01"', '"\t"', '"' + "\\\\" * 9 + '"',
           '"' + "a" * 15 + '\\\\"', '"' + "a" * 14 + '\\""', '"' + "b" * 31 + '\\u0041"']
TAGS = ['"io_proxy_v3+cal"', '"io_proxy_v3"', '""', '"' + "t" * 70 + '"', "null", "5", '"io_proxy_v\\u0033"',
        '"scaphandre_rapl"']
METHODOLOGY = [
    '{"backfill":"true"}', '{"backfill":"tru\\u0065"}', '{"backfil\\u006c":"true"}',
    '{"backfill":"false","backfill":"true"}', '{"backfill":"true","backfill":"false"}',
    '{"intensity_vintage":"2024"}', '{"x":"\\ud800"}', '{"x":NaN}', '{"x":1e400}', '{"x":"é"}', '{"x":01}',
    "[]", '"true"', "{}", '{"a":"1","a":"2"}', '{"k":' + "[" * 600 + "]" * 600 + "}",
]
NAMES = ['"svc-new"', '"svc-0000"', '"_unattributed"', '"svc-0001"', '""', '"' + "x" * 300 + '"', '"svc-é"']


def _break(tree: list, rng: random.Random) -> None:  # noqa: C901 - one branch per kind of damage
    """One piece of damage to the line ``tree``, in place."""
    nodes = _all(tree)
    objects = [n for n in nodes if n[0] == "o" and n[1]]
    report = _member(tree, BODY_KEY)
    gs = _member(report, "green_summary")
    maps = [v for k, v in gs[1] if k.startswith('"per_service_') and v[0] == "o"] if gs else []
    kind = rng.randrange(15)
    node = rng.choice(nodes)
    if kind <= 2 and node[0] == "r":  # a number or a leaf orjson refuses or reads its own way
        node[1] = rng.choice(NUMBERS)
    elif kind == 3 and node[0] == "r":
        node[1] = rng.choice(STRINGS)
    elif kind == 4:  # a member written twice (the same value or another), before or after
        obj = rng.choice(objects)
        i = rng.randrange(len(obj[1]))
        key, value = obj[1][i]
        again = copy.deepcopy(value) if rng.random() < 0.5 else ["r", rng.choice(NUMBERS + STRINGS)]
        obj[1].insert(rng.choice([i, i + 1, len(obj[1])]), [key, again])
    elif kind == 5:  # a key spelled with an escape
        obj = rng.choice(objects)
        member = rng.choice(obj[1])
        member[0] = _escaped(member[0], rng)
    elif kind == 6:  # a string value spelled with an escape (a name, a tag, a time, a hash)
        texts = [n for n in nodes if n[0] == "r" and n[1].startswith('"') and len(n[1]) > 2]
        if texts:
            text = rng.choice(texts)
            text[1] = _escaped(text[1], rng)
    elif kind == 7 and report is not None:  # nesting or odd strings in a part the scan skips
        depth = rng.choice([3, 100, 500, 509, 510, 511, 512, 513, 1000, 1100])
        deep = "[" * depth + rng.choice(["", "1", '"x"', "{}"]) + "]" * depth
        report[1].append(['"counters_x"', ["r", rng.choice([deep, '{"a":' + deep + "}", rng.choice(STRINGS)])]])
    elif kind == 8 and gs is not None:  # a tag
        models = _member(gs, "per_service_energy_model")
        if models is not None and models[1]:
            rng.choice(models[1])[1] = ["r", rng.choice(TAGS)]
    elif kind == 9 and report is not None:  # the methodology block, backfill every way
        meta = ["r", rng.choice(METHODOLOGY)]
        for member in report[1]:
            if member[0] == '"methodology"':
                member[1] = meta
                break
        else:
            report[1].append(['"methodology"', meta])
    elif kind == 10 and maps and maps[0][1]:  # a service renamed or dropped, in one map or all
        i = rng.randrange(len(maps[0][1]))
        name, drop = rng.choice(NAMES), rng.random() < 0.3
        for m in maps if rng.random() < 0.7 else [rng.choice(maps)]:
            if i < len(m[1]):
                if drop:
                    del m[1][i]
                else:
                    m[1][i][0] = name
    elif kind == 11 and maps:  # a map in another order
        rng.shuffle(rng.choice(maps)[1])
    elif kind == 12 and gs is not None:  # host rows, measured ratios, a map the fold does not know
        gs[1].append(rng.choice([
            ['"hosts"', ["r", '[{"name":"svc-0001","energy_kwh":0.001}]']],
            ['"per_service_measured_ratio"', ["r", rng.choice(['{"svc-0000":0}', '{"svc-0000":0.0}', "null",
                                                              '{"svc-0000":-0}', '{"svc-0000":0.5}', "[]"])]],
            ['"per_service_unknown"', ["r", "{}"]],
            ['"energy_without_carbon_kwh"', ["r", rng.choice(["null", "0.5", "0", "NaN"])]],
        ]))
    elif kind == 13:  # members in another order
        rng.shuffle(rng.choice([tree, report or tree])[1])
    elif kind == 14 and report is not None:  # the window's times in other forms
        window = _member(report, "window")
        for member in window[1] if window else ():
            if member[0] in ('"start"', '"end"') and member[1][1].startswith('"'):
                at = orjson.loads(member[1][1])
                member[1][1] = rng.choice([f'"{at[:19]}Z"', f'"{at[:19]}+00:00"', f'"{at[:19]}.5Z"', "null", "5",
                                           '"2026-11-10T24:00:00Z"', f'"{at.replace("T", "t")}"'])
    elif objects:  # a member dropped
        obj = rng.choice(objects)
        del obj[1][rng.randrange(len(obj[1]))]


def hostile_archive(rng: random.Random) -> list[bytes]:
    """Up to 14 lines of one chain: about half as the agent wrote them, the rest damaged (one to
    three pieces of damage, then perhaps cut short, followed by bytes, or given a BOM)."""
    lines, prev = [], None
    at = T0 + timedelta(minutes=rng.randrange(50))
    for seq in range(rng.randrange(1, 15)):
        body = copy.deepcopy(rng.choice(_bodies()))
        body["window"]["start"] = times.format_datetime(at)
        body["window"]["end"] = times.format_datetime(at + timedelta(minutes=1))
        rec = seal(prev, seq, times.format_datetime(at + timedelta(minutes=1)), BODY_KEY, body)
        prev = rec["hash"]
        at += timedelta(minutes=rng.choice([1, 1, 1, 1, 61, 0]), microseconds=rng.choice([0, 0, 1, 999999]))
        if rng.random() < 0.45:
            lines.append(orjson.dumps(rec))
            continue
        tree = _tree(rec)
        for _ in range(rng.choice([1, 1, 2, 3])):
            _break(tree, rng)
        spaces = rng.choice([None, [" ", "\t", "\r", "\n"], [" ", "\x0c"], ["\x0b"]])  # JSON's, and two it refuses
        raw = _text(tree, rng, spaces).encode("utf-8", "surrogateescape")
        cut = rng.random()
        if cut < 0.05:
            raw = raw[: rng.randrange(len(raw))]
        elif cut < 0.08:
            raw += rng.choice([b" x", b"{}", b"\x00", b"  ", b",", b"\r"])
        elif cut < 0.1:
            raw = b"\xef\xbb\xbf" + raw
        elif cut < 0.12:
            raw = raw.replace(b'"svc-0', b'"svc-\xff', 1)  # invalid UTF-8 in a name
        lines.append(raw)
    return lines


def test_the_c_fold_is_built():
    assert EXT is not None  # else the comparisons below compare the reference with itself


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_hostile_agent_lines_fold_exactly_as_the_reference(seed):
    # a seed, not st.randoms(): an archive draws thousands of choices, past Hypothesis's buffer
    assert_same_as_reference(hostile_archive(random.Random(seed)))


# -- lines the byte path must decline ---------------------------------------------------------



def _sealed_at(body: dict, seq: int, prev: str | None) -> dict:
    """``body`` given the minute-long window ``seq`` minutes after T0, sealed after ``prev``
    as the agent seals (the line's ts is the window's end)."""
    at = T0 + timedelta(minutes=seq)
    body["window"]["start"] = times.format_datetime(at)
    body["window"]["end"] = times.format_datetime(at + timedelta(minutes=1))
    return seal(prev, seq, times.format_datetime(at + timedelta(minutes=1)), BODY_KEY, body)


def _agent_lines(count: int, changing: bool = False) -> list[bytes]:
    bodies = _bodies()[:4] if changing else _bodies()[4:]
    lines, prev = [], None
    for seq in range(count):
        rec = _sealed_at(copy.deepcopy(bodies[seq % len(bodies)]), seq, prev)
        prev = rec["hash"]
        lines.append(orjson.dumps(rec))
    return lines


PLAIN = b'"per_service_energy_kwh":{"svc-0000":'
# (what is wrong, the line's text -> the broken text): orjson refuses it, or reads it otherwise
# than its bytes say, or it is a line only the reference folds
DECLINED = [
    ("NaN as a figure", lambda t: t.replace(PLAIN, PLAIN + b"NaN,\"x\":", 1)),
    ("1e400 in a skipped row", lambda t: t.replace(b'"io_ops":', b'"io_ops":1e400,"n":', 1)),
    ("-1e400 in a skipped row", lambda t: t.replace(b'"io_ops":', b'"io_ops":-1e400,"n":', 1)),
    ("NaN in a skipped row", lambda t: t.replace(b'"io_ops":', b'"io_ops":NaN,"n":', 1)),
    ("a leading zero in a skipped row", lambda t: t.replace(b'"io_ops":', b'"io_ops":01,"n":', 1)),
    ("the first figure twice", lambda t: t.replace(PLAIN, PLAIN + b"0.5,\"svc-0000\":", 1)),
    ("the energy map twice", lambda t: t.replace(b'"per_service_energy_kwh":', b'"per_service_energy_kwh":{},'
                                                 b'"per_service_energy_kwh":', 1)),
    ("the energy map again, its key escaped", lambda t: t.replace(
        b'"per_service_energy_kwh":', b'"per_service_energy_kwh":{"svc-0000":0.5},"per\\u005fservice_energy_kwh":', 1)),
    ("the start again, its key escaped", lambda t: t.replace(
        b'"start":', b'"st\\u0061rt":"2026-11-10T05:00:00.000000Z","start":', 1)),
    ("the body key escaped", lambda t: t.replace(b'"report":', b'"r\\u0065port":', 1)),
    ("a service name escaped", lambda t: t.replace(b'"svc-0000"', b'"svc-000\\u0030"')),
    ("a tag escaped", lambda t: t.replace(b'"io_proxy_v3"', b'"io_proxy_v\\u0033"')),
    ("the start escaped", lambda t: t.replace(b'"start":"2026', b'"start":"\\u0032026', 1)),
    ("backfilled", lambda t: t.replace(b'"methodology":{', b'"methodology":{"backfill":"true",', 1)),
    ("backfilled, escaped", lambda t: t.replace(b'"methodology":{', b'"methodology":{"backfill":"tru\\u0065",', 1)),
    ("backfilled, its key escaped", lambda t: t.replace(b'"methodology":{', b'"methodology":{"backfil\\u006c":"true",',
                                                        1)),
    ("backfilled the second time", lambda t: t.replace(b'"methodology":{', b'"methodology":{"backfill":"false",'
                                                       b'"backfill":"true",', 1)),
    ("nesting past orjson's limit", lambda t: t.replace(b'"counters":', b'"deep":' + b"[" * 1100 + b"]" * 1100
                                                        + b',"counters":', 1)),
    ("a lone surrogate skipped", lambda t: t.replace(b'"counters":', b'"s":"\\ud800","counters":', 1)),
    ("a raw control byte skipped", lambda t: t.replace(b'"counters":', b'"s":"\x01","counters":', 1)),
    ("invalid UTF-8 skipped", lambda t: t.replace(b'"counters":', b'"s":"\xc3\x28","counters":', 1)),
    ("an overlong UTF-8 form skipped", lambda t: t.replace(b'"counters":', b'"s":"\xc0\xaf","counters":', 1)),
    ("cut short", lambda t: t[: len(t) - 7]),
    ("bytes after the object", lambda t: t + b" x"),
    ("a second object after it", lambda t: t + b"{}"),
    ("a byte-order mark", lambda t: b"\xef\xbb\xbf" + t),
    ("a form feed between tokens", lambda t: t.replace(b',"report":', b',\x0c"report":', 1)),
    ("a host row", lambda t: t.replace(b'"green_summary":{', b'"green_summary":{"hosts":[{"name":"pg"}],', 1)),
    ("a per-service map the fold does not know", lambda t: t.replace(b'"green_summary":{',
                                                                    b'"green_summary":{"per_service_x":{},', 1)),
    ("_unattributed", lambda t: t.replace(b'"svc-0000"', b'"_unattributed"')),
]


@pytest.mark.parametrize(("why", "damage"), DECLINED, ids=[why for why, _ in DECLINED])
def test_the_byte_path_declines_what_it_cannot_read_as_orjson_does(why, damage):
    assert EXT is not None
    lines = _agent_lines(3)
    state = AggregateState()
    state.set_grid(HOURS)
    fold_lines(lines[:2], "agent-a/w.jsonl", "agent-a", HOURS, state=state)  # the services known
    byte_folder = folder(state)
    before = pickle.dumps(state)
    broken = damage(lines[2])
    assert broken != lines[2], why
    assert fold_raw(state, broken, HOURS.start, HOURS.end, byte_folder) is None, why  # declined broken ...
    assert pickle.dumps(state) == before, why
    assert fold_raw(state, lines[2], HOURS.start, HOURS.end, byte_folder) is not None  # ... taken as written
    assert_same_as_reference([*lines[:2], broken, lines[2]])


# -- lines the byte path takes ----------------------------------------------------------------

TAKEN = [
    ("as written", lambda t: t),
    ("escapes and non-ASCII in a skipped string", lambda t: t.replace(
        b'"counters":', b'"s":"a\\"b\\\\c\\/\\u00e9\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80","counters":', 1)),
    ("backslash runs across 16-byte blocks", lambda t: t.replace(
        b'"counters":', b'"s":"' + b"a" * 13 + b'\\\\\\"' + b"b" * 14 + b'\\\\","counters":', 1)),
    ("a deep value skipped", lambda t: t.replace(b'"counters":', b'"deep":' + b"[" * 400 + b"]" * 400
                                                 + b',"counters":', 1)),
    ("a new service", lambda t: t.replace(b'"svc-0000"', b'"svc-new"')),
    ("an escaped key in a skipped object", lambda t: t.replace(b'"counters":{}', b'"counters":{"c\\u006f":1}', 1)),
    ("white space between tokens", lambda t: _text(_tree(orjson.loads(t)), random.Random(len(t)),
                                                   [" ", "\t", "\r", "\n", " \r\n\t "]).encode()),
]


@pytest.mark.parametrize(("why", "change"), TAKEN, ids=[why for why, _ in TAKEN])
def test_the_byte_path_takes_the_agents_lines_and_what_orjson_reads_alike(why, change):
    assert EXT is not None
    for changing in (False, True):  # the same services every window, or a new draw of known ones
        lines = _agent_lines(8, changing)
        state = AggregateState()
        state.set_grid(HOURS)
        fold_lines(lines[:4], "agent-a/w.jsonl", "agent-a", HOURS, state=state)
        byte_folder = folder(state)
        changed = [change(t) for t in lines[4:]]
        assert all(fold_raw(state, t, HOURS.start, HOURS.end, byte_folder) is not None for t in changed), why
        assert_same_as_reference(lines[:4] + [change(t) for t in lines[4:]])


def test_past_the_service_cap_the_report_is_the_references():
    """4,096 services and more: ~1,000 per window drawn from 5,000, so most windows bring
    services past the cap (dropped, counted) beside known ones."""
    rng = random.Random(11)
    template = copy.deepcopy(_bodies()[0])
    gs = template["green_summary"]
    lines, prev = [], None
    for seq in range(12):
        names = sorted(rng.sample(range(5000), 1000))
        gs["per_service_energy_kwh"] = {f"s{n:04d}": rng.randrange(1, 9999) / 1e8 for n in names}
        gs["per_service_carbon_kgco2eq"] = {f"s{n:04d}": rng.randrange(1, 9999) / 1e9 for n in names}
        gs["per_service_requests"] = {f"s{n:04d}": rng.randrange(50) for n in names}
        gs["per_service_region"] = {f"s{n:04d}": "pl" for n in names}
        gs["per_service_energy_model"] = {f"s{n:04d}": "io_proxy_v3" for n in names}
        gs.pop("per_service_measured_ratio", None)
        rec = _sealed_at(template, seq, prev)
        prev = rec["hash"]
        lines.append(orjson.dumps(rec))
    for caps in ({}, {"max_services": 1500}):
        want, wstate, _ = _fold(lines, fold_line_reference, HOURS, **caps)
        got, gstate, _ = _fold(lines, fold_line, HOURS, **caps)
        assert got == want and gstate.dropped_services == wstate.dropped_services > 0


def _tagged(seq: int, tags: dict[str, str]) -> bytes:
    names = list(tags)
    gs = {"energy_kwh": 0.5, "co2": {"operational_gco2": 1.0, "total": {"mid": 1.0}},
          "per_service_energy_kwh": {n: 0.25 for n in names}, "per_service_carbon_kgco2eq": {n: 0.5 for n in names},
          "per_service_region": {n: "pl" for n in names}, "per_service_energy_model": tags}
    start = times.format_datetime(T0 + timedelta(minutes=seq))
    return orjson.dumps(seal(None, seq, start, BODY_KEY, {"window": {"start": start, "traces": 1},
                                                           "green_summary": gs}))


def test_the_agents_calibrated_tags_in_a_changed_service_order_fold_as_the_reference():
    assert_same_as_reference([_tagged(i, dict(sorted({"a": "io_proxy_v3+cal", "b": "io_proxy_v3"}.items(),
                                                     reverse=i % 2 == 1))) for i in range(4)])


def test_a_calibrated_tag_in_a_changed_service_set_is_counted_by_its_bare_tag():
    """A tag ending in ``+cal`` is the bare tag, calibrated (reference.accept_model); a window of
    known services in another order must not count ``m+cal`` itself when the tag set holds it
    (it does once a line carried ``m+cal+cal``)."""
    assert_same_as_reference([_tagged(0, {"a": "m+cal+cal", "b": "m"}), _tagged(1, {"b": "m", "a": "m+cal"})])
    assert_same_as_reference([_tagged(0, {"a": "+cal+cal", "b": "m"}), _tagged(1, {"b": "m", "a": "+cal"})])


def test_an_archive_of_files_past_the_cap_gives_the_same_report_without_the_c_build(tmp_path):
    """Through the engine: files folded one by one (a Folder each), merged in order, and a file
    folded again from the merged state's names when it overflowed the 4,096-service cap
    (engines.merge_next); hostile lines among them. The report is the one a machine without the
    C build writes, byte for byte."""
    import subprocess

    from aggregator.engines import run_local
    from aggregator.files import discover
    from schema.archive import window_file_name

    rng = random.Random(5)
    template = copy.deepcopy(_bodies()[0])
    gs = template["green_summary"]
    gs.pop("per_service_measured_ratio", None)
    for agent in ("node-a", "node-b"):
        prev, seq = None, 0
        directory = tmp_path / agent
        directory.mkdir()
        for f in range(2):
            lines = []
            for _ in range(4):  # ~4,500 services in a file: past the cap on its own
                names = [f"s{n:04d}" for n in sorted(rng.sample(range(8000), 1500))]
                gs["per_service_energy_kwh"] = {n: rng.randrange(1, 9999) / 1e8 for n in names}
                gs["per_service_carbon_kgco2eq"] = {n: rng.randrange(1, 9999) / 1e9 for n in names}
                gs["per_service_requests"] = {n: rng.randrange(50) for n in names}
                gs["per_service_region"] = {n: rng.choice(["pl", "eu-west-3", "", "x" * 300]) for n in names}
                gs["per_service_energy_model"] = {n: rng.choice(["io_proxy_v3", "io_proxy_v3+cal", ""]) for n in names}
                at = T0 + timedelta(minutes=seq)
                template["window"]["start"] = times.format_datetime(at)
                template["window"]["end"] = times.format_datetime(at + timedelta(minutes=1))
                rec = seal(prev, seq, times.format_datetime(at + timedelta(minutes=1)), BODY_KEY, template)
                prev, seq = rec["hash"], seq + 1
                raw = orjson.dumps(rec)
                if rng.random() < 0.3:  # damaged as above
                    tree = _tree(rec)
                    _break(tree, rng)
                    raw = _text(tree, rng, None).encode("utf-8", "surrogateescape")
                lines.append(raw)
            (directory / window_file_name("20261110", f)).write_bytes(b"\n".join(lines) + b"\n")
    period = Period.parse("2026-11-10", "2026-11-11")
    here = report_bytes(build_report(run_local(discover([str(tmp_path)]), period), period))
    script = (
        "import sys; sys.modules['aggregator.fold._fold'] = None\n"  # as if never built
        "from aggregator.fold.fast import ACCELERATED\n"
        "assert not ACCELERATED\n"
        "from aggregator.engines import run_local\n"
        "from aggregator.files import discover\n"
        "from aggregator.read import Period\n"
        "from aggregator.report import build_report, report_bytes\n"
        "period = Period.parse('2026-11-10', '2026-11-11')\n"
        "sys.stdout.buffer.write(report_bytes(build_report(run_local(discover([sys.argv[1]]), period), period)))\n"
    )
    root = Path(__file__).resolve().parents[2]
    there = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=root, capture_output=True,
                           timeout=300, check=True).stdout
    assert b'"dropped_services"' in here and here == there


_THREADS = '''
import copy, random, sys, threading
from datetime import timedelta
import orjson
sys.path.insert(0, sys.argv[1])
import test_fold_hostile_bytes as T
from aggregator.engines import fold_lines
from aggregator.fold.state import AggregateState
from aggregator.report import build_report, report_bytes
from schema import times
from schema.chain import seal


def archive(seed):
    rng = random.Random(seed)
    body = copy.deepcopy(T._bodies()[0])
    gs = body["green_summary"]
    gs.pop("per_service_measured_ratio", None)
    lines, prev = [], None
    for seq in range(25):  # new services every line, a new time bucket every other line
        names = [f"s{seed}-{k:04d}" for k in sorted(rng.sample(range(2000), 200))]
        gs["per_service_energy_kwh"] = {x: rng.randrange(1, 9999) / 1e8 for x in names}
        gs["per_service_carbon_kgco2eq"] = {x: rng.randrange(1, 9999) / 1e9 for x in names}
        gs["per_service_requests"] = {x: rng.randrange(50) for x in names}
        gs["per_service_region"] = {x: "pl" for x in names}
        gs["per_service_energy_model"] = {x: "io_proxy_v3" for x in names}
        at = T.T0 + timedelta(minutes=seq * 37)
        body["window"]["start"] = times.format_datetime(at)
        body["window"]["end"] = times.format_datetime(at + timedelta(minutes=1))
        rec = seal(prev, seq, times.format_datetime(at), "report", body)
        prev = rec["hash"]
        lines.append(orjson.dumps(rec))
    return lines


def fold(lines):
    state = AggregateState()
    fold_lines(lines, "a/w.jsonl", "a", T.HOURS, state=state)
    return report_bytes(build_report(state, T.HOURS))


archives = [archive(i) for i in range(4)]
alone = [fold(a) for a in archives]
sys.setswitchinterval(1e-4)
for _ in range(2):
    out = [None] * 4
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, fold(archives[i]))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == alone
print("same")
'''


def test_files_folded_in_threads_at_once_give_each_files_own_report():
    """A Dask worker runs as many tasks at once as it has threads (``dask worker --nthreads``,
    an existing cluster's default is one per core): each folds its own file, in threads of one
    process. Each file's report must be what that file folds to alone."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", _THREADS, str(Path(__file__).parent)], cwd=root,
                         capture_output=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == b"same", run.stderr[-2000:]
