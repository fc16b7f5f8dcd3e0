"""The totals the C Folder holds (``_fold.c``, "the Folder": ``take`` and ``sync``).

A line the Folder takes adds its window's totals (energy, carbon, requests, windows, the
terms no service carries, traces and root spans, energy at 0 g, the dropped entries, first
and last start) to copies of the state's it holds, in the reference's order, and ``sync``
writes them back; ``engines.fold_lines`` syncs before every line it folds the long way and
at the end of the file (also when a line raises). Held here: the state is untouched until
the sync and then equals the reference's bit for bit, over archives mixing taken and declined
lines; a state whose totals are not plain floats and ints makes the Folder decline (the
reference folds, counted as declined); a strict-attribution error leaves the lines before it
written back; the region rows and methodology the Folder leaves to Python (``fast.finish``).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines
from aggregator.fold.ext import EXT
from aggregator.fold.fast import BYTE_PATH, finish, folder
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.rules import AttributionError
from tests.aggregator.test_fold_c_edges import HOURS, Raw, _dumps, _engine, _state, line, snapshot

NAMES = ["a", "b", "c"]
TAGS = dict.fromkeys(NAMES, '"scaphandre_rapl"')
# the fields the Folder holds while it folds (the rest of the state it changes at once)
HELD = ("energy", "operational_kg", "host_energy", "embodied_kg", "database_kg", "messaging_kg", "dropped_energy",
        "dropped_carbon", "energy_without_carbon", "first_start", "last_start", "runtime_windows", "windows",
        "requests", "traces_counted", "root_spans", "dropped_services", "overflowed", "calibration_applied")
UNRESOLVED = '[{"region":"fr","status":"unresolved","io_ops":1,"energy_kwh":0.125,"co2_gco2":0.0}]'


def _line(i: int, kind: str = "plain") -> bytes:
    """A runtime line (taken), a v1.0 line (declined), or a taken line whose rows the Folder
    leaves to Python, with (``rows+stated``) or without (``rows``) energy_without_carbon_kwh."""
    rec = line(i, NAMES[: 1 + i % 3], TAGS, v1=kind == "v1")
    gs = rec["report"]["green_summary"]
    if kind.startswith("rows"):
        gs["regions"] = Raw(UNRESOLVED)
    if kind == "rows+stated":
        gs["energy_without_carbon_kwh"] = 0.0625
    if kind == "cal":
        gs["per_service_energy_model"]["a"] = Raw('"kepler_ebpf+cal"')
    if kind == "method":
        rec["report"]["methodology"] = {"intensity_vintage": f"20{i:02d}"}
    return _dumps(rec, [])


def _held(state) -> dict:
    return {name: snapshot(state)[name] for name in HELD}


def test_taken_lines_change_the_held_totals_only_at_the_sync():
    assert EXT is not None
    lines = [_line(i, kind) for i, kind in enumerate(["plain", "plain", "cal", "plain", "plain"])]
    state = _state({"max_services": 2})
    byte_folder = folder(state)
    before = _held(state)
    for raw in lines:
        got = byte_folder.take(raw, HOURS.start, HOURS.end)
        assert got is not None
        if got[3] is not None:
            finish(state, byte_folder, got[3])  # adds nothing the Folder holds (no rows to derive from)
    assert _held(state) == before  # held: nothing written yet
    assert len(state.services) == 2 and state.series  # services, cells and buckets at once
    byte_folder.sync()
    byte_folder.sync()  # a second sync writes nothing more
    reference = _engine(lines, {"max_services": 2}, reference=True)
    assert _held(state) == _held(reference)
    assert state.dropped_services > 0 and state.overflowed and state.calibration_applied


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["plain", "plain", "plain", "v1", "rows", "rows+stated", "cal", "method"]),
                min_size=1, max_size=14),
       st.sampled_from([{}, {"max_services": 2}, {"max_models": 1}]))
def test_held_totals_mixed_with_lines_the_long_way_equal_the_reference(kinds, caps):
    lines = [_line(i, kind) for i, kind in enumerate(kinds)]
    folded = BYTE_PATH["folded"]
    c = _engine(lines, caps)
    assert snapshot(c) == snapshot(_engine(lines, caps, reference=True))
    if not caps:  # every runtime line taken from its bytes, the totals held across the v1.0 ones
        assert BYTE_PATH["folded"] - folded == sum(1 for k in kinds if k != "v1")


@pytest.mark.parametrize("field", ["energy", "first_start", "dropped_carbon", "windows", "requests"])
def test_a_state_whose_totals_are_not_plain_numbers_is_declined_and_folded_by_the_reference(field):
    lines = [_line(i) for i in range(4)]

    class Odd(float if field in ("energy", "first_start", "dropped_carbon") else int):  # type: ignore[misc]
        pass

    def odd_state():
        state = _state({})
        setattr(state, field, Odd(getattr(state, field) if field != "first_start" else 1e300))
        return state

    byte_folder = folder(odd_state())
    assert byte_folder.take(lines[0], HOURS.start, HOURS.end) is None and byte_folder.declined == 1
    c, general = odd_state(), odd_state()
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", HOURS, state=c)
    fold_lines(lines, "agent-a/w.jsonl", "agent-a", HOURS, state=general, fold=fold_line_reference)
    assert snapshot(c) == snapshot(general)


def test_a_strict_attribution_error_leaves_the_lines_before_it_written_back():
    rec = line(3, NAMES, TAGS, v1=True)
    rec["report"].pop("per_endpoint_io_ops")
    rec["report"]["green_summary"]["total_io_ops"] = 0
    lines = [_line(0), _line(1), _line(2), _dumps(rec, [])]
    states = []
    for fold in ({}, {"fold": fold_line_reference}):
        state = _state({})
        with pytest.raises(AttributionError):
            fold_lines(lines, "agent-a/w.jsonl", "agent-a", HOURS, strict=True, state=state, **fold)
        states.append(state)
    assert states[0].windows == 3
    assert _held(states[0]) == _held(states[1])


def test_rows_left_to_python_count_their_energy_at_0_g_once_and_in_order():
    # derived from the rows (no stated figure) and stated: both after taken lines whose held
    # totals must be written back first
    for kind in ("rows", "rows+stated"):
        lines = [_line(0), _line(1, kind), _line(2), _line(3, kind)]
        c = _engine(lines, {})
        assert snapshot(c) == snapshot(_engine(lines, {}, reference=True))
        assert c.energy_without_carbon == (0.125 * 2 if kind == "rows" else 0.0625 * 2)
        assert c.ewc_regions == {"fr": 0.25}


def test_the_folder_holds_nothing_another_folder_sees():
    # two states folded through interleaved Folders: each one's held totals are its own
    lines = [_line(i) for i in range(6)]
    states = [_state({}), _state({})]
    folders = [folder(s) for s in states]
    for i, raw in enumerate(lines):
        got = folders[i % 2].take(raw, HOURS.start, HOURS.end)
        assert got is not None
        if got[3] is not None:  # a first line's new region rows and methodology: Python's
            finish(states[i % 2], folders[i % 2], got[3])
    for f in folders:
        f.sync()
    engine_only = ("files", "lines", "chains", "spans", "windows_without_end")  # the engine's bookkeeping
    for k, state in enumerate(states):
        alone = _engine(lines[k::2], {})
        assert {n: v for n, v in snapshot(state).items() if n not in engine_only} == \
            {n: v for n, v in snapshot(alone).items() if n not in engine_only}
    assert dataclasses.fields(states[0])  # the states are plain dataclasses (nothing of the Folder in them)
