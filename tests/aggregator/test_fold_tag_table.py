"""The C Folder's tag table cannot be filled by lines it declines (``_fold.c``, "the Folder").

The Folder keeps the tags it has met (their bytes and the str the tag set holds) in a table
searched in order. Up to FOLD_VERSION 16 a tag went into it when a line was first scanned, even
when the Folder then declined that line, and the table held at most 256: an archive (untrusted)
whose first lines each carried a new tag and a name twice - declined, and folded by the
reference, which sees only the name's last tag - filled the table with tags the state never
held, and from then on every line with a tag not yet in the table was declined and folded the
long way (the reference, correct but slow): a cliff the archive's author chose. Now a line's new
tags are dropped from the table when the line is declined, so the table holds only the tags of
lines taken (each in the state's tag set, so at most two texts - with and without "+cal" - per
tag the set holds), and it has no fixed size. Proven here with the Folder's own counters
(``folded``, ``declined``, ``tags``), and the report is the reference fold's, byte for byte.
"""

from __future__ import annotations

from datetime import timedelta

from aggregator.fold.ext import EXT
from aggregator.fold.fast import fold_raw, folder
from aggregator.fold.rules import MAX_ENERGY_MODELS
from tests.aggregator.test_fold_c_edges import HOURS, T0, _check, _dumps, _state, line

JUNK = 300  # more than the old table's 256


def _at(rec: dict, minutes: int, seq: int) -> dict:
    """``rec`` moved to ``minutes`` past T0, with its own sequence number and hash."""
    start = (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    rec["report"]["window"]["start"] = rec["ts"] = start
    rec["seq"], rec["hash"] = seq, f"sha256:{seq:064x}"
    return rec


def _junk(k: int) -> bytes:
    """A line the Folder declines after reading its first entry's tag: service "a" twice in
    every per-service map, first with the junk tag ``junk-<k>`` (the reference, reading the map
    as a dict, sees only the last: "scaphandre_rapl", so the state never holds a junk tag)."""
    rec = _at(line(0, ["a"], {"a": '"scaphandre_rapl"'}), 5 * k, k)
    dups = [("per_service_energy_kwh", '"a":0.125,'), ("per_service_carbon_kgco2eq", '"a":0.5,'),
            ("per_service_requests", '"a":7,'), ("per_service_region", '"a":"zone-j",'),
            ("per_service_energy_model", f'"a":"junk-{k}",')]
    return _dumps(rec, dups)


def _ordinary(i: int, tag: str = "kepler_ebpf") -> bytes:
    """A plain line of services a and b, both with ``tag`` (by default one no junk line used)."""
    rec = _at(line(i, ["a", "b"], {"a": f'"{tag}"', "b": f'"{tag}"'}), 5 * (JUNK + i), JUNK + i)
    return _dumps(rec, [])


def _lines(ordinary: int = 20) -> list[bytes]:
    return [_junk(k) for k in range(JUNK)] + [_ordinary(i) for i in range(ordinary)]


def test_declined_lines_leave_no_tag_in_the_table():
    assert EXT is not None
    lines = _lines()
    assert HOURS.start <= (T0 + timedelta(minutes=5 * (len(lines) - 1))).timestamp() < HOURS.end
    state = _state({})
    byte_folder = folder(state)
    for raw in lines[:JUNK]:
        assert fold_raw(state, raw, HOURS.start, HOURS.end, byte_folder) is None  # declined: a name twice
    assert (byte_folder.folded, byte_folder.declined, byte_folder.tags) == (0, JUNK, 0)
    assert state.models == {}  # the Folder added nothing (the engine would fold these the long way)
    for raw in lines[JUNK:]:
        assert fold_raw(state, raw, HOURS.start, HOURS.end, byte_folder) is not None
    # every ordinary line taken by the C path, its one tag the table's only one
    assert (byte_folder.folded, byte_folder.declined, byte_folder.tags) == (len(lines) - JUNK, JUNK, 1)
    assert state.models == {"kepler_ebpf": 2 * (len(lines) - JUNK)}


def test_the_archive_folds_to_the_references_report():
    assert EXT is not None
    lines = _lines()
    # the engine with the accelerator against the reference alone (states and report bytes), and
    # line by line (_check's driver: each line the C fold takes adds what the reference adds);
    # the ordinary lines are taken (by the Folder, or from the loaded line after the engine gave
    # up the byte path for this file: engines.GIVE_UP_AFTER)
    assert _check(lines, {}) >= len(lines) - JUNK
    assert _check(lines, {"max_models": 1}) >= len(lines) - JUNK  # the tag set full at the junk lines' tag


def test_a_line_with_more_new_tags_than_the_tag_set_has_room_for_leaves_none():
    # one line with JUNK distinct new tags: declined at the first past the tag set's room (the
    # reference folds it and counts those it refuses), and none of them stays in the table
    assert EXT is not None
    names = [f"s{n}" for n in range(JUNK)]
    wide = _dumps(_at(line(0, names, {n: f'"junk-{n}"' for n in names}), 0, 0), [])
    state = _state({})
    byte_folder = folder(state)
    assert fold_raw(state, wide, HOURS.start, HOURS.end, byte_folder) is None
    assert (byte_folder.declined, byte_folder.tags) == (1, 0)
    assert MAX_ENERGY_MODELS < JUNK
    # the reference took the first MAX_ENERGY_MODELS of them: a later line with one of those is
    # taken by the C path (the tag is in the state's set, though not in the Folder's table)
    later = [_ordinary(0, "junk-s0"), _ordinary(1, "junk-s1")]
    for raw in later:
        fold_raw(state, raw, HOURS.start, HOURS.end, byte_folder)
    assert _check([wide, *later], {}) == 2
