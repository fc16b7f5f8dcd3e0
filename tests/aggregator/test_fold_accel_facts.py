"""The C fold's copies of the contract's facts come from where they are decided (issue 18 item
2, docs/archive-format.md "Where the facts live"): ``aggregator/fold/ext.py`` hands them to
``_fold.configure`` at load, and a fact the C code is written for (the two window time shapes,
the four terms of a total) that the contract no longer has refuses the build instead of folding
by the old one."""

from __future__ import annotations

import orjson
import pytest

from aggregator.fold.ext import EXT, contract_facts
from aggregator.fold.fast import fold_raw
from aggregator.fold.state import AggregateState
from aggregator.read import Period
from schema import times
from schema.archive import BODY_KEY
from schema.totals import TOTAL_TERMS

pytestmark = pytest.mark.skipif(EXT is None, reason="the C fold is not built")
DAY = Period.parse("2026-11-10", "2026-11-11")


def _line(body_key: str = BODY_KEY) -> bytes:
    start = times.format_ns(1_794_268_800 * 10**9)
    gs = {"energy_kwh": 0.5, "co2": {"operational_gco2": 1.0, "total": {"mid": 1.0}},
          "per_service_energy_kwh": {"a": 0.25}, "per_service_carbon_kgco2eq": {"a": 0.5},
          "per_service_region": {"a": "pl"}, "per_service_energy_model": {"a": "m"}}
    return orjson.dumps({body_key: {"window": {"start": start, "traces": 1}, "green_summary": gs}, "hash": "h"})


def test_the_facts_handed_over_are_the_contracts():
    body, shapes, terms, *_ = contract_facts()
    assert body == BODY_KEY and terms == TOTAL_TERMS
    assert len(shapes[0]) == times.WINDOW_TIME_LENGTH
    for shape in shapes:  # each shape is one to_epoch reads without a parse, digits as 0
        assert times.to_epoch(shape.replace("0000-00-00", "2026-11-10")) == 1_794_268_800.0


@pytest.mark.parametrize("change", ["terms", "shape"])
def test_a_fact_the_c_code_is_not_written_for_refuses_it(change):
    facts = list(contract_facts())
    if change == "terms":
        facts[2] = (*TOTAL_TERMS, "water")
    else:
        facts[1] = ("0000-00-00 00:00:00Z", facts[1][1])
    with pytest.raises(ValueError):
        EXT.configure(*facts)


def test_the_body_key_is_the_one_handed_over():
    state = AggregateState()
    assert fold_raw(state, _line(), DAY.start, DAY.end) is not None
    facts = list(contract_facts())
    facts[0] = "body"
    EXT.configure(*facts)
    try:
        assert fold_raw(AggregateState(), _line(), DAY.start, DAY.end) is None  # "report" is no body now
        assert fold_raw(AggregateState(), _line("body"), DAY.start, DAY.end) is not None
        assert EXT.window_start(orjson.loads(_line("body"))) == 1_794_268_800.0
    finally:
        EXT.configure(*contract_facts())
    assert fold_raw(AggregateState(), _line(), DAY.start, DAY.end) is not None
