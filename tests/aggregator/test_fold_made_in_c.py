"""What the C fold makes and reaches without Python (``_fold.c``, "service slots"): services
and cells made as ``ServiceAcc(region)`` and ``Cell()`` make them but left untracked by the
cyclic garbage collector, a service's ``region``, ``models`` and ``measured`` read and written
through their slots (and through the attribute for an object of another class), the region
names a Folder met decoded once; the classes it cannot make so refused, loudly.

The folds and merges that use them are held to the reference by their own property tests
(test_fold_accel_folder.py, test_fold_accel_merge.py, test_fold_c_edges.py); these hold the
pieces: the same fields, the same additions on the attribute path, the same regions past the
Folder's region cache."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.engines import fold_lines
from aggregator.fold import sums
from aggregator.fold.ext import EXT
from aggregator.fold.fast import fold_raw, folder
from aggregator.fold.state import AggregateState
from aggregator.fold.sums import Bucket, Cell, ServiceAcc
from tests.aggregator.test_fold_accel_merge import FLOATS, TAG_SET, _view, services
from tests.aggregator.test_fold_c_edges import HOURS, Raw, _check, _dumps, _state, line

pytestmark = pytest.mark.skipif(EXT is None, reason="the C fold is not built")


class OtherAcc(ServiceAcc):
    """A ServiceAcc subclass: not the class the C code reads by slot, so it goes by attribute."""

    __slots__ = ()


class WithDict(sums.ServiceSums):  # type: ignore[misc,valid-type]
    """A service class keeping its fields in a __dict__: the C makers cannot make it."""

    def __init__(self, region: str) -> None:
        super().__init__()
        self.region, self.models, self.measured = region, {}, 0.0


class CellWithField(Cell):
    __slots__ = ("extra",)


def test_services_and_cells_made_in_c_are_untracked_and_the_python_ones():
    for region in ("pl", "unknown", ""):
        made, want = sums.make_service(region), ServiceAcc(region)
        assert type(made) is ServiceAcc and not gc.is_tracked(made) and gc.is_tracked(want)
        fields = ("energy", "carbon", "requests", "windows", *ServiceAcc.__slots__)
        assert [getattr(made, f) for f in fields] == [getattr(want, f) for f in fields]
        assert [type(getattr(made, f)) for f in fields] == [type(getattr(want, f)) for f in fields]
    cell, want_cell = sums.make_cell(), Cell()
    assert type(cell) is Cell and not gc.is_tracked(cell)
    assert cell.__reduce__() == want_cell.__reduce__()
    # what a fold and a merge make: untracked; the states hold the same as before
    tags = {n: '"scaphandre_rapl"' for n in ("a", "b", "c")}
    state, _ = fold_lines([_dumps(line(i, ["a", "b", "c"][: i + 1], tags), []) for i in range(3)], "a/w.jsonl",
                          "a", HOURS)
    assert state.services and not any(gc.is_tracked(a) for a in state.services.values())
    cells = [c for b in state.series.values() for c in b.services.values()]
    assert cells and not any(gc.is_tracked(c) for c in cells)
    total = AggregateState().merge(state)
    assert [(n, a.region, a.energy, a.models) for n, a in total.services.items()] == \
        [(n, a.region, a.energy, a.models) for n, a in state.services.items()]
    assert not any(gc.is_tracked(a) for a in total.services.values())
    assert not any(gc.is_tracked(c) for b in total.series.values() for c in b.services.values())


def test_the_c_makers_refuse_the_classes_they_cannot_make():
    with pytest.raises(TypeError, match="__slots__"):
        EXT.new_service(WithDict, "pl")
    with pytest.raises(TypeError, match="adding no field"):
        EXT.new_cell(CellWithField)
    with pytest.raises(TypeError, match="adding no field"):
        EXT.new_cell(ServiceAcc)
    state = AggregateState()
    args = (state.services, state.models, state.regions)
    with pytest.raises(TypeError, match="service_type"):
        EXT.Folder(*args, WithDict, Cell, print, 10, 10, state)
    with pytest.raises(TypeError, match="service_type"):
        EXT.Folder(*args, ServiceAcc, CellWithField, print, 10, 10, state)
    with pytest.raises(TypeError, match="service_type"):
        EXT.merge_services({}, {}, {}, 10, WithDict, (0, 0.0, 0.0))
    with pytest.raises(TypeError, match="cell_type"):
        EXT.merge_cells(Bucket(), {}, {}, {}, "_unattributed", CellWithField)


def _make(rows: list, classes: list) -> dict:
    out = {}
    for (name, region, energy, carbon, requests, windows, measured, tags), cls in zip(rows, classes, strict=False):
        acc = cls(region)
        acc.energy, acc.carbon, acc.requests, acc.windows, acc.measured = energy, carbon, requests, windows, measured
        acc.models = dict.fromkeys(tags)
        out[name] = acc
    return out


CLASSES = st.lists(st.sampled_from([ServiceAcc, OtherAcc]), min_size=6, max_size=6)
MEASURED = FLOATS | st.integers(0, 5)  # an int measured goes by the generic +=


@settings(max_examples=300, deadline=None)
@given(services(), services(), CLASSES, CLASSES, st.integers(0, 7), TAG_SET,
       st.tuples(st.integers(0, 99), FLOATS, FLOATS), st.lists(MEASURED, min_size=6, max_size=6))
def test_merge_by_slot_and_by_attribute_is_the_python_merge(left_rows, right_rows, left_cls, right_cls, cap,
                                                            known_tags, dropped, measured):
    right_rows = [(*r[:6], m, r[7]) for r, m in zip(right_rows, measured, strict=False)]
    models = dict.fromkeys(known_tags, 1)
    got_left, want_left = _make(left_rows, left_cls), _make(left_rows, left_cls)
    got = sums.merge_services(got_left, _make(right_rows, right_cls), models, cap, dropped)
    want = sums.merge_services_py(want_left, _make(right_rows, right_cls), models, cap, dropped)
    assert (got[0], got[1].hex(), got[2].hex()) == (want[0], want[1].hex(), want[2].hex())
    assert [(type(a), type(a.measured), repr(a.measured)) for a in got_left.values()] == \
        [(type(a), type(a.measured), repr(a.measured)) for a in want_left.values()]
    assert _view_any(got_left) == _view_any(want_left)


def _view_any(accs: dict) -> list:
    return [(n, a.region, a.energy.hex(), a.carbon.hex(), a.requests, a.windows, repr(a.measured), list(a.models))
            for n, a in accs.items()]


def test_a_view_of_exact_services_is_the_merge_tests_view():
    accs = _make([("a", "pl", 0.5, 0.25, 1, 1, 0.125, ["m1"])], [ServiceAcc])
    assert _view(accs)[0][:6] == _view_any(accs)[0][:6]


def test_past_the_folders_region_cache_the_regions_are_the_references():
    # 40 services, each of its own region (more than the 32 a Folder keeps decoded, some longer
    # than the 64 bytes it keeps, some not ASCII), in two lines: each service's region is the
    # reference's, and the byte path took every line
    names = [f"s{i}" for i in range(40)]
    regions = [f"zone-{i}" if i % 3 else f"z\u00f3na-{i}-" + "r" * (60 + i) for i in range(40)]
    tags = dict.fromkeys(names, '"scaphandre_rapl"')
    lines = []
    for i in range(2):
        rec = line(i, names, tags)
        rec["report"]["green_summary"]["per_service_region"] = {n: Raw('"' + r + '"') for n, r in zip(names, regions,
                                                                                                      strict=True)}
        lines.append(_dumps(rec, []))
    state = _state({})
    fold = folder(state)
    for raw in lines:
        assert fold_raw(state, raw, HOURS.start, HOURS.end, fold) is not None
    assert [a.region for a in state.services.values()] == regions
    assert _check(lines, {}) == len(lines)
