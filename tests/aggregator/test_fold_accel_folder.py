"""The C Folder (``_fold.c``, "the Folder") against the reference fold where the byte path now
goes: a window whose service set is not the previous window's, services the state does not
hold yet (made from the line's region map), services past the service cap (their entries
dropped into the "(other)" row), regions still unknown, new tags, "+cal" tags, new region
rows (folded by the reference's fold_regions from the row bytes), a new time bucket, and what
must still be declined (a name twice, ``_unattributed``, a region that cannot be read, a tag
past the tag cap).

Each archive is folded by the engine with the accelerator and with the reference alone, and
line by line by the driver of test_fold_c_edges.py (a line the C fold takes adds exactly what
the reference adds; one it declines leaves the state untouched), states compared bit for bit
and reports byte for byte.
"""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from aggregator.engines import GIVE_UP_AFTER, fold_lines
from aggregator.fold.ext import EXT
from aggregator.fold.fast import BYTE_PATH, fold_raw, folder
from tests.aggregator.test_fold_c_edges import HOURS, Raw, _check, _dumps, _state, line

POOL = [f"s{i}" for i in range(12)]
REGIONS = ['"eu-west-3"', '"pl"', "null", "5", '""', '"' + "r" * 300 + '"', '"p\\u006c"', '"zone-x"']
TAGS = ['"scaphandre_rapl"', '"kepler_ebpf"', '"io_proxy_v3+cal"', '"+cal"', '""', '"' + "t" * 70 + '"',
        '"m1"', '"m2"', '"m3"']
ROWS = ['{"region":"pl","status":"resolved","io_ops":2,"energy_kwh":0.25,"co2_gco2":1.3}',
        '{"region":"de","status":"resolved","io_ops":1,"energy_kwh":0.5,"co2_gco2":2.0,"pue":1.2}',
        '{"region":"fr","status":"unresolved","io_ops":1,"energy_kwh":0.125,"co2_gco2":0.0}',
        '{"region":"pl","io_ops":1}', '{"region":"pl","status":"resolved","io_ops":1,"io_ops":2,'
                                      '"energy_kwh":0.5,"co2_gco2":1.0}']
CAPS = st.sampled_from([{}, {}, {"max_services": 3}, {"max_services": 5, "max_models": 2}, {"max_models": 3},
                        {"max_services": 1, "max_models": 1, "max_regions": 1}])


@st.composite
def changing_archive(draw) -> list[bytes]:
    """Runtime lines whose service sets change from line to line, with the edges above."""
    lines = []
    for i in range(draw(st.integers(1, 10))):
        names = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=6, unique=True))
        tags = {n: draw(st.sampled_from(TAGS)) if draw(st.integers(0, 2)) == 0 else '"scaphandre_rapl"'
                for n in names}
        rec = line(i, names, tags, zones=draw(st.integers(0, 4)) > 0)
        gs = rec["report"]["green_summary"]
        if "per_service_region" in gs:
            for n in names:
                if draw(st.integers(0, 3)) == 0:
                    gs["per_service_region"][n] = Raw(draw(st.sampled_from(REGIONS)))
            if draw(st.integers(0, 9)) == 0:  # the region map in another order
                gs["per_service_region"] = dict(reversed(list(gs["per_service_region"].items())))
        if draw(st.integers(0, 3)) == 0:
            gs["regions"] = Raw("[" + ",".join(draw(st.lists(st.sampled_from(ROWS), min_size=0, max_size=3))) + "]")
        dups: list = []
        if draw(st.integers(0, 15)) == 0:  # a name twice
            dups.append(("per_service_energy_kwh", f'"{names[0]}":0.5,'))
        if draw(st.integers(0, 15)) == 0:
            gs["per_service_energy_kwh"]["_unattributed"] = 0.5
            gs["per_service_carbon_kgco2eq"]["_unattributed"] = 0.5
            gs["per_service_requests"]["_unattributed"] = 1
            gs["per_service_energy_model"]["_unattributed"] = Raw('"m1"')
        lines.append(_dumps(rec, dups))
    return lines


@settings(max_examples=400, deadline=None)
@given(changing_archive(), CAPS)
def test_the_folder_folds_changing_service_sets_exactly_as_the_reference(lines, caps):
    assert EXT is not None
    taken = _check(lines, caps)
    event(f"C fold took {min(taken, 5)}+ lines" if taken >= 5 else f"C fold took {taken} lines")


def test_a_line_of_new_services_in_a_new_bucket_past_the_cap_is_taken_from_its_bytes():
    # the paths this Folder added, each seen to be taken (a test that fails if one regresses to
    # the reference) and seen to agree with the reference
    tags = dict.fromkeys(POOL, '"scaphandre_rapl"')
    lines = [_dumps(line(i, POOL[i % 3 * 3: i % 3 * 3 + 6], tags), []) for i in range(8)]
    for caps in ({}, {"max_services": 4}):
        state = _state(caps)
        byte_folder = folder(state)
        for raw in lines:
            assert fold_raw(state, raw, HOURS.start, HOURS.end, byte_folder) is not None
        assert byte_folder.folded == len(lines) and byte_folder.declined == 0
        assert len(state.series) > 1  # the lines cross hours: new buckets entered from the bytes
        assert (state.dropped_services > 0) == bool(caps) and state.overflowed == bool(caps)
        first = {}  # each service's region: its first line's (new services made from the bytes)
        for i in range(8):
            for n in POOL[i % 3 * 3: i % 3 * 3 + 6]:
                first.setdefault(n, f"zone-{i}")
        assert {n: a.region for n, a in state.services.items()} == {n: first[n] for n in state.services}
        assert _check(lines, caps) == len(lines)


def test_what_the_folder_must_decline_it_declines():
    tags = dict.fromkeys(POOL, '"scaphandre_rapl"')
    base = line(1, POOL[:3], tags)
    edges = {
        "a name twice": _dumps(base, [("per_service_energy_kwh", '"s0":0.5,')]),
        "_unattributed": _dumps(line(1, [*POOL[:2], "_unattributed"], {**tags, "_unattributed": '"m"'}), []),
        "an escaped region of a new service": _dumps(line(1, [*POOL[:2], "s5"], tags), []).replace(
            b'"s5":"zone-1"', b'"s5":"zo\\u006ee"'),
        "a tag past the tag cap": _dumps(line(1, POOL[:3], {**tags, "s2": '"m9"'}), []),
    }
    assert b'"zo\\u006ee"' in edges["an escaped region of a new service"]
    for label, raw in edges.items():
        caps = {"max_models": 1} if "cap" in label else {}
        state = _state(caps)
        fold_lines([_dumps(line(0, POOL[:3], tags), [])], "a/w.jsonl", "a", HOURS, state=state)
        assert fold_raw(state, raw, HOURS.start, HOURS.end, folder(state)) is None, label
        assert _check([_dumps(line(0, POOL[:3], tags), []), raw], caps) >= 1, label


def test_the_byte_path_is_given_up_on_a_file_it_keeps_declining_and_the_report_is_the_same():
    tags = dict.fromkeys(POOL, '"scaphandre_rapl"')
    v1 = [_dumps(line(i, POOL[:3], tags, v1=True), []) for i in range(GIVE_UP_AFTER + 4)]
    runtime = [_dumps(line(i, POOL[:3], tags), []) for i in range(GIVE_UP_AFTER + 4, GIVE_UP_AFTER + 8)]
    before = dict(BYTE_PATH)
    assert _check(v1 + runtime, {}) >= 0
    state = _state({})
    fold_lines(v1 + runtime, "a/w.jsonl", "a", HOURS, state=state)
    assert BYTE_PATH["given_up"] > before.get("given_up", 0)
    # given up after GIVE_UP_AFTER declines: the runtime lines after them went the long way
    state = _state({})
    folded = BYTE_PATH["folded"]
    fold_lines(runtime + v1, "a/w.jsonl", "a", HOURS, state=state)  # taken before the declines start
    assert BYTE_PATH["folded"] - folded == len(runtime)
    folded = BYTE_PATH["folded"]
    fold_lines(v1 + runtime, "a/w.jsonl", "a", HOURS, state=_state({}))
    assert BYTE_PATH["folded"] == folded
