"""The state's merge in C (``merge_services``, ``merge_cells``) against its Python oracle
(``aggregator.fold.sums.merge_services_py``, ``merge_cells_py``): the same services, cells,
regions, tags, measured energy and dropped sums, bit for bit, on arbitrary floats and caps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.fold import sums
from aggregator.fold.ext import EXT
from aggregator.fold.rules import UNATTRIBUTED
from aggregator.fold.sums import Bucket, Cell, ServiceAcc

pytestmark = pytest.mark.skipif(EXT is None, reason="the C fold is not built")

NAMES = st.sampled_from(["a", "b", "c", "d", "e", UNATTRIBUTED])
FLOATS = st.floats(0.0, 1e15, allow_nan=False) | st.sampled_from([0.1, 0.2, 0.3, 1e-300, 5e-324])
COUNTS = st.integers(0, 2**53)
REGIONS = st.sampled_from(["unknown", "pl", "eu-west-3"])
TAG_SET = st.lists(st.sampled_from(["m1", "m2", "m3"]), max_size=3, unique=True)


@st.composite
def services(draw) -> list:
    return draw(st.lists(st.tuples(NAMES, REGIONS, FLOATS, FLOATS, COUNTS, st.integers(0, 2**40), FLOATS, TAG_SET),
                         max_size=6, unique_by=lambda t: t[0]))


def _make(rows: list) -> dict[str, ServiceAcc]:
    out = {}
    for name, region, energy, carbon, requests, windows, measured, tags in rows:
        acc = ServiceAcc(region)
        acc.energy, acc.carbon, acc.requests, acc.windows, acc.measured = energy, carbon, requests, windows, measured
        acc.models = dict.fromkeys(tags)
        out[name] = acc
    return out


def _view(accs: dict) -> list:
    return [(n, a.region, a.energy.hex(), a.carbon.hex(), a.requests, a.windows, a.measured.hex(), list(a.models))
            for n, a in accs.items()]


@settings(max_examples=300, deadline=None)
@given(services(), services(), st.integers(0, 7), TAG_SET, st.tuples(st.integers(0, 99), FLOATS, FLOATS))
def test_merge_services_in_c_is_the_python_merge(left_rows, right_rows, cap, known_tags, dropped):
    models = dict.fromkeys(known_tags, 1)
    got_left, want_left = _make(left_rows), _make(left_rows)
    right = _make(right_rows)
    got = sums.merge_services(got_left, right, models, cap, dropped)
    want = sums.merge_services_py(want_left, _make(right_rows), models, cap, dropped)
    assert (got[0], got[1].hex(), got[2].hex()) == (want[0], want[1].hex(), want[2].hex())
    assert _view(got_left) == _view(want_left)
    assert _view(right) == _view(_make(right_rows))  # the right side is read, never changed


@settings(max_examples=300, deadline=None)
@given(services(), services(), st.lists(NAMES, max_size=5), FLOATS, FLOATS)
def test_merge_cells_in_c_is_the_python_merge(mine_rows, their_rows, kept_names, d_energy, d_carbon):
    def bucket() -> Bucket:
        b = Bucket()
        b.dropped_energy, b.dropped_carbon = d_energy, d_carbon
        for name, _, energy, carbon, requests, _, _, _ in mine_rows:
            cell = b.services[name] = Cell()
            cell.energy, cell.carbon, cell.requests = energy, carbon, requests
        return b

    def cells() -> dict[str, Cell]:
        out = {}
        for name, _, energy, carbon, requests, _, _, _ in their_rows:
            cell = out[name] = Cell()
            cell.energy, cell.carbon, cell.requests = energy, carbon, requests
        return out

    kept = dict.fromkeys(kept_names)
    got, want = bucket(), bucket()
    sums.merge_cells(got, cells(), kept, UNATTRIBUTED)
    sums.merge_cells_py(want, cells(), kept, UNATTRIBUTED)
    assert [x.hex() if isinstance(x, float) else x for x in got.sums()] == \
        [x.hex() if isinstance(x, float) else x for x in want.sums()]
    assert [(n, c.energy.hex(), c.carbon.hex(), c.requests, c.windows) for n, c in got.services.items()] == \
        [(n, c.energy.hex(), c.carbon.hex(), c.requests, c.windows) for n, c in want.services.items()]


def test_a_dropped_service_past_the_cap_keeps_the_float_order():
    left = {"a": ServiceAcc("pl")}
    right = _make([("b", "pl", 0.1, 0.2, 1, 1, 0.0, []), ("c", "pl", 0.2, 0.3, 1, 2, 0.0, [])])
    windows, energy, carbon = sums.merge_services(left, right, {}, 1, (0, 0.3, 0.0))
    assert (windows, energy, carbon) == (3, (0.3 + 0.1) + 0.2, 0.2 + 0.3) and list(left) == ["a"]


@pytest.mark.parametrize("region", ["unknown", "pl", ""])
def test_a_service_made_in_c_is_the_one_service_acc_makes(region):
    made, want = sums.make_service(region), ServiceAcc(region)
    assert type(made) is ServiceAcc and made.models is not sums.make_service(region).models
    fields = ("energy", "carbon", "requests", "windows", *ServiceAcc.__slots__)
    assert [getattr(made, f) for f in fields] == [getattr(want, f) for f in fields]
    assert [type(getattr(made, f)) for f in fields] == [type(getattr(want, f)) for f in fields]
    assert made.__reduce__()[1] == want.__reduce__()[1]
