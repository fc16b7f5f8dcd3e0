"""The contract: canonical JSON, hash chain, tag precedence, backward-compatible models."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schema import (
    ENERGY_MODEL_PRECEDENCE,
    GENESIS_PREV,
    GreenSummary,
    WindowReport,
    base_tag,
    canonical_json,
    pick_window_tag,
    seal,
    verify_chain,
)
from schema.generate import OUT_DIR, render, schema_models
from schema.tags import with_calibration


def test_canonical_json_sorts_keys_and_has_no_spaces():
    assert canonical_json({"b": 1, "a": {"d": [1, 2.5], "c": "é"}}) == (
        '{"a":{"c":"é","d":[1,2.5]},"b":1}'.encode()
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_canonical_json_refuses_non_finite(bad):
    with pytest.raises(ValueError, match="sanitise"):
        canonical_json({"x": [1.0, bad]})


def _chain(n):
    recs, prev = [], None
    for i in range(n):
        rec = seal(prev, i, f"2026-11-30T00:00:0{i}Z", "report", {"i": i})
        recs.append(rec)
        prev = rec["hash"]
    return recs


def test_chain_first_prev_is_genesis_and_verifies():
    recs = _chain(4)
    assert recs[0]["prev"] == GENESIS_PREV
    findings, last, n = verify_chain((f"f:{i}", r) for i, r in enumerate(recs))
    assert findings == [] and last == recs[-1]["hash"] and n == 4


def test_chain_detects_edit_delete_reorder():
    recs = _chain(5)
    edited = [dict(r) for r in recs]
    edited[2]["report"] = {"i": 99}
    f, _, _ = verify_chain((f"f:{i}", r) for i, r in enumerate(edited))
    assert [x.kind for x in f] == ["hash_mismatch"] and f[0].location == "f:2"
    deleted = recs[:2] + recs[3:]
    f, _, _ = verify_chain((f"f:{i}", r) for i, r in enumerate(deleted))
    assert {x.kind for x in f} == {"prev_mismatch", "seq_gap"}
    swapped = [recs[0], recs[2], recs[1], recs[3]]
    f, _, _ = verify_chain((f"f:{i}", r) for i, r in enumerate(swapped))
    assert f and f[0].location == "f:1"


def test_precedence_every_pair():
    for hi, lo in itertools.combinations(ENERGY_MODEL_PRECEDENCE, 2):
        assert pick_window_tag([lo, hi]) == hi
        assert pick_window_tag([hi, lo]) == hi
    assert pick_window_tag([]) == ""


def test_calibration_suffix_only_on_proxy_tags():
    assert with_calibration("io_proxy_v2") == "io_proxy_v2+cal"
    assert with_calibration("scaphandre_rapl") == "scaphandre_rapl"
    assert base_tag("io_proxy_v3+cal") == "io_proxy_v3"
    assert pick_window_tag(["io_proxy_v3", "io_proxy_v3+cal"]) == "io_proxy_v3+cal"
    assert pick_window_tag(["io_proxy_v3+cal", "kepler_ebpf"]) == "kepler_ebpf"


def test_v1_0_line_without_runtime_fields_loads():
    line = {
        "window": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:01:00Z", "spans": 3},
        "green_summary": {"total_io_ops": 3, "co2": {"operational_gco2": 1.0}, "regions": []},
    }
    rep = WindowReport.model_validate(line)
    gs = rep.green_summary
    assert gs.energy_kwh == 0.0 and gs.energy_model == "" and gs.per_service_energy_kwh == {}
    assert gs.per_service_carbon_kgco2eq == {} and gs.per_service_region == {}


def test_a_line_written_before_root_spans_were_counted_loads():
    # no window.root_spans and no methodology.embodied_per: such a line was charged per trace
    line = {
        "window": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:01:00Z", "spans": 3, "traces": 2},
        "green_summary": {"co2": {"embodied_gco2": 0.002}},
        "methodology": {"pue": "design notes"},
    }
    rep = WindowReport.model_validate(line)
    assert rep.window.root_spans == 0 and rep.window.traces == 2
    assert "embodied_per" not in rep.methodology
    assert rep.model_dump(mode="json")["window"]["root_spans"] == 0


def test_application_energy_excludes_hosts_in_totals():
    gs = GreenSummary.model_validate(
        {
            "energy_kwh": 3.0,
            "hosts": [
                {"name": "pg", "kind": "database", "energy_kwh": 1.0, "in_totals": True},
                {"name": "mq", "kind": "messaging", "energy_kwh": 0.5, "in_totals": False},
            ],
        }
    )
    assert gs.application_energy_kwh() == pytest.approx(2.0)


def test_checked_in_json_schemas_match_models():
    for stem, model in schema_models().items():
        path = OUT_DIR / f"{stem}.schema.json"
        assert path.exists(), f"{path} missing: run `make schema`"
        assert path.read_text() == render(model), f"{path} drifted: run `make schema`"
        json.loads(path.read_text())


# Canonical JSON is UTF-8: a lone surrogate is no Unicode scalar value and cannot be written
# (orjson refuses it, and no decoder of ours produces one); the round trip is over real text.
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))


@given(st.recursive(st.none() | st.integers(-(2**63), 2**63 - 1) | _TEXT | st.floats(allow_nan=False, allow_infinity=False),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(_TEXT.filter(lambda s: len(s) <= 5), c, max_size=4),
                    max_leaves=20))
def test_canonical_json_round_trips(value):
    assert json.loads(canonical_json(value)) == value


@pytest.mark.parametrize("value", ["\ud800", {"k\udfff": 1}, ["ok", "\udc80"]])
def test_canonical_json_refuses_lone_surrogates_with_a_message(value):
    with pytest.raises(ValueError, match="not valid UTF-8"):
        canonical_json(value)
