"""Property tests for the sanitisers: trace parsing, cluster validation, YAML formulas.

Whatever comes in, the result is a valid value or the documented error type with a message;
never a crash of another kind.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.formula import FormulaError, FormulaProvider, compile_formula
from placement.place import validate_clusters, validate_job
from placement.trace import TraceError, parse_trace

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                        st.floats(allow_nan=True), st.text(max_size=5))
json_value = st.recursive(json_scalar, lambda c: st.lists(c, max_size=4)
                          | st.dictionaries(st.text(max_size=5), c, max_size=4), max_leaves=12)
job = st.fixed_dictionaries({}, optional={
    "id": json_value, "submit": json_value, "duration": json_value, "energy_kwh": json_value,
    "slack": json_value, "regions": json_value, "home": json_value})
docs = st.fixed_dictionaries({}, optional={
    "method": st.sampled_from(["average", "marginal", "nope"]) | json_value,
    "regions": st.dictionaries(st.sampled_from(["A", "B"]),
                               st.lists(st.floats(-1, 500) | json_scalar, max_size=6), max_size=2)
    | json_value,
    "jobs": st.lists(job | json_value, max_size=3) | json_value,
})


def accepted(fn, value, error=ValueError):
    """``fn(value)``, or None if it raised ``error`` with a message; any other exception fails."""
    try:
        return fn(value)
    except error as exc:
        assert str(exc)
        return None


@settings(max_examples=150, deadline=None)
@given(docs)
def test_parse_trace_accepts_or_explains(doc):
    t = accepted(parse_trace, doc, TraceError)
    if t is None:
        return
    assert (t.submit + t.slack + t.duration <= t.hours).all()
    assert np.isfinite(t.intensity).all() and (t.intensity >= 0).all()
    assert t.allowed[np.arange(len(t.home)), t.home].all()


cluster = st.fixed_dictionaries({}, optional={k: json_value for k in (
    "name", "region", "carbon_intensity", "cost_per_hour", "capacity", "used")})


@settings(max_examples=100, deadline=None)
@given(st.lists(cluster, max_size=3) | json_value)
def test_validate_clusters_accepts_or_explains(clusters):
    out = accepted(validate_clusters, clusters)
    if out is None:
        return
    assert all(isinstance(c["name"], str) and c["capacity"] >= 0 for c in out)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="carbon_intesyph+-*/() .0123456789,maxd", max_size=40))
def test_formula_compiles_or_explains(expr):
    try:
        p = FormulaProvider("f", expr, False, "test")
    except FormulaError as exc:
        assert str(exc)
        return
    f = {k: np.array([[1.0, 2.0, np.nan]]) for k in
         ("carbon_intensity", "cost_per_hour", "capacity", "used", "size", "headroom")}
    try:
        s = p.score_arrays(f)
    except FormulaError as exc:  # a field the clusters do not carry
        assert "does not carry" in str(exc) or "do not carry" in str(exc)
        return
    assert s.shape == (1, 3) and not np.isinf(s).any()


def test_formula_refuses_anything_but_arithmetic():
    for bad in ("__import__('os').system('x')", "carbon_intensity.real", "open('f')", "[1]",
                "lambda: 1", "carbon_intensity if 1 else 2", "a\0"):
        with pytest.raises(FormulaError):
            compile_formula(bad)
    fn, names = compile_formula("max(cost_per_hour, 2) + abs(-carbon_intensity) / 10")
    assert names == {"cost_per_hour", "carbon_intensity"}
    got = fn({"cost_per_hour": np.array([1.0, 3.0]), "carbon_intensity": np.array([50.0, 10.0])})
    # max(1, 2) + 50/10 = 7 ; max(3, 2) + 10/10 = 4
    assert got.tolist() == [7.0, 4.0]


@settings(max_examples=100, deadline=None)
@given(st.fixed_dictionaries({}, optional={"id": json_value, "size": json_value}) | json_value)
def test_validate_job_accepts_or_explains(job):
    out = accepted(validate_job, job)
    if out is None:
        return
    size = out.get("size", 1)
    assert not isinstance(size, bool) and np.isfinite(float(size)) and size >= 0


@pytest.mark.parametrize("size", [-(2**63) - 1, 2**64, 10**400])
def test_a_size_past_64_bits_is_explained_not_a_crash(size):
    # found by the property test above: numpy's isfinite raised TypeError on such ints
    if size < 0 or size > 1e308:
        with pytest.raises(ValueError, match="'size' must be a number >= 0"):
            validate_job({"id": "j", "size": size})
    else:
        assert validate_job({"id": "j", "size": size})["size"] == size


@pytest.mark.parametrize("size, msg", [("big", "'size' must be a number >= 0"), (-5, "got -5"),
                                       (True, "got True"), (float("nan"), "got nan")])
def test_a_bad_job_size_is_an_error_not_a_placement(size, msg):
    from placement import place

    full = [{"name": "a", "region": "DE", "carbon_intensity": 10.0, "cost_per_hour": 1.0,
             "capacity": 2.0, "used": 2.0}]
    with pytest.raises(ValueError, match=msg):  # -5 would otherwise "fit" the full cluster
        place({"id": "j", "size": size}, full, "headroom")
